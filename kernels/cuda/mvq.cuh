/* kernels/cuda/mvq.cuh: the arithmetic of the quantized matrix-vector
 * kernels (mm.cu): int8 activations and integer dot products (dp4a), per
 * weight type, as host and device code, so tests/cuda/test_cuda_deq.cu can
 * run it on the host against the CPU backend's quantized activations
 * (qact_quantize_row) and integer sums (quant_dot_qact).
 *
 * Activations ("xq"): a row of k values as int8 q[k] and f32 scales d[k / B],
 * B = 256 for the k-quants and iq4_xs, 32 for the others (qact_block),
 * quantized exactly as the CPU backend does (d = max|x| / 127, q = x * (127 /
 * max|x|) rounded to nearest even), so both backends see the same integers.
 *
 * A weight row is cut into positions, each one thread's work in one step of
 * the kernel's loop (mvq<WT>::P per 256 values):
 *   q4_K/q5_K: 8 per block: 16 bytes of nibbles (one 128-bit load; q5_K a
 *     second for its 16 bytes of fifth bits) and the block's 16 header bytes
 *     (one 128-bit load: d, dmin, the scales): 32 weights of two sub-blocks;
 *   q6_K: 8 per block: 8 bytes of low bits from each half's two quarters and
 *     8 of high bits (realigned 32-bit loads: 210-byte blocks are only
 *     2-byte aligned), the 8 scale bytes: 32 weights of four sub-blocks;
 *   q8_0: 2 per block (16 weights), q4_0: 1 (32 weights), realigned;
 *   q4_1, q5_0, q5_1, iq4_nl: 1 per block, as q4_0 (q5: the 32 fifth bits
 *     spread onto bit 4 of each byte; iq4_nl: the levels looked up 4 at a
 *     time with byte permutes), loads as wide as each block's alignment;
 *   q2_K/q3_K: 8 per block: 8 bytes of 2-bit values holding 32 weights of
 *     four sub-blocks (q3_K: 8 hmask bytes, its scales gathered by permutes);
 *   iq4_xs: 8 per block, one 32-value sub-block each.
 * Consecutive threads take consecutive positions, so a warp's loads cover
 * consecutive bytes of the row. Each position's scales are decoded once and
 * applied to integer sub-block sums (one conversion to float per position).
 * Activation sums (for mins, offsets and q4_1/q5_1's m) are dp4a against
 * ones, computed once per position for all the rows a thread reads. */
#ifndef PAGECHAT_CUDA_MVQ_CUH
#define PAGECHAT_CUDA_MVQ_CUH

#include "kernels/cuda/deq.cuh"

/* ---- loads (device: one instruction; host: memcpy) ---- */

typedef struct u32x4 {
	uint32_t x, y, z, w;
} u32x4;

/* 16 bytes at p (16-byte aligned). */
static __host__ __device__ __forceinline__ u32x4 ld16(const void *p)
{
	u32x4 r;
#ifdef __CUDA_ARCH__
	uint4 u = __ldg((const uint4 *)p);
	r.x = u.x, r.y = u.y, r.z = u.z, r.w = u.w;
#else
	memcpy(&r, p, 16);
#endif
	return r;
}

/* ---- integer helpers ---- */

/* Sum of the products of the four signed bytes of a and b, plus c. */
static __host__ __device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDA_ARCH__
	return __dp4a((int)a, (int)b, c);
#else
	for (int i = 0; i < 4; i++)
		c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
	return c;
#endif
}

#define ONES 0x01010101u
#define LO4 0x0f0f0f0fu

/* Bits 0..3 of t as bit 4 of each of a word's 4 bytes (q5_0/q5_1's fifth
 * bits: value 4i + b takes bit 4i + b of qh). */
static __host__ __device__ __forceinline__ uint32_t bits_to_b4(uint32_t t)
{
	return ((t & 15) * 0x00204081u & ONES) << 4;
}

/* Bytes of x and y (x: 0..3, y: 4..7) picked by the low 3 bits of the
 * selector's 4 nibbles (prmt; the selectors here never set bit 3). */
static __host__ __device__ __forceinline__ uint32_t perm8(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
	return __byte_perm(x, y, s);
#else
	uint64_t v = (uint64_t)y << 32 | x;
	uint32_t r = 0;
	for (int i = 0; i < 4; i++)
		r |= (uint32_t)(v >> 8 * ((s >> 4 * i) & 7) & 0xff) << 8 * i;
	return r;
#endif
}

/* The iq4 levels of a word of 4 bytes 0..15, as a word of int8: the low 3
 * bits pick from each half of the table (as selector nibbles), bit 3 picks
 * the half. */
static __host__ __device__ __forceinline__ uint32_t iq4_word(uint32_t n)
{
	uint32_t v = n & 0x07070707u, c = v | v >> 4, sel = (c & 0xff) | (c >> 8 & 0xff00);
	uint32_t lo = perm8(IQ4_W0, IQ4_W1, sel), hi = perm8(IQ4_W2, IQ4_W3, sel);
	uint32_t m = (n >> 3 & ONES) * 0xffu;
	return (lo & ~m) | (hi & m);
}

/* The sum of 4 words' 16 signed bytes. */
static __host__ __device__ __forceinline__ int sum16(u32x4 v)
{
	return dp4a(v.x, ONES, dp4a(v.y, ONES, dp4a(v.z, ONES, dp4a(v.w, ONES, 0))));
}

/* ---- activations ---- */

/* The activation scale block of weight type wt: 256 values for the
 * k-quants, 32 for the others. */
static __host__ __device__ __forceinline__ int xq_block(int wt)
{
	return wt == DT_Q4_K || wt == DT_Q5_K || wt == DT_Q6_K || wt == DT_Q2_K || wt == DT_Q3_K || wt == DT_IQ4_XS
		       ? 256 : 32;
}

/* One row's quantized activations (q: k bytes; d: k / xq_block floats). */
typedef struct xq_row {
	const int8_t *q;
	const float *d;
} xq_row;

/* The codes of 8 values of a block whose largest |x| is amax, as the CPU's
 * qact_quantize_row rounds them (the same integers bit for bit). */
static __host__ __device__ __forceinline__ void xq_code8(const float x[8], float amax, uint32_t q[2])
{
	float id = amax > 0 ? 127.0f / amax : 0.0f;
	q[0] = q[1] = 0;
	for (int i = 0; i < 8; i++) {
		float v = rintf(x[i] * id);
		int c = v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v;
		q[i / 4] |= (uint32_t)(uint8_t)(int8_t)c << 8 * (i % 4);
	}
}

static __host__ __device__ __forceinline__ float xq_scale(float amax)
{
	return amax / 127.0f;
}

/* ---- per weight type: positions, loads, dot products ---- */

template <int WT> struct mvq;

/* q4_K and q5_K. Position j of a block: nibble bytes 16j..16j+15, that is
 * sub-block 2c (low nibbles: values 64c + 16h + i) and 2c + 1 (high nibbles:
 * 64c + 32 + 16h + i), c = j / 2, h = j % 2. */
template <int WT> struct mvq_k45 {
	enum { P = 8, BB = WT == DT_Q4_K ? 144 : 176, QS = WT == DT_Q4_K ? 16 : 48 };
	typedef struct w_regs {
		u32x4 hd, qs, qh;
	} W;
	typedef struct x_regs {
		u32x4 lo, hi;
		int s_lo, s_hi;
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + (p >> 3) * BB;
		int j = p & 7;
		w->hd = ld16(b);
		w->qs = ld16(b + QS + 16 * j);
		w->qh = WT == DT_Q5_K ? ld16(b + 16 + 16 * (j & 1)) : u32x4{0, 0, 0, 0};
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		int j = p & 7, c = j >> 1, h = j & 1;
		const int8_t *q = x.q + (p >> 3) * 256 + 64 * c + 16 * h;
		v->lo = ld16(q);
		v->hi = ld16(q + 32);
		v->s_lo = sum16(v->lo);
		v->s_hi = sum16(v->hi);
		v->d = x.d[p >> 3];
	}
	/* Scales and mins of sub-blocks 2c, 2c + 1 as byte pairs (low byte:
	 * 2c) from the header's three scale words. */
	static __host__ __device__ __forceinline__ void scales(const W *w, int c, uint32_t *sc, uint32_t *m)
	{
		uint32_t sh = 16 * (c & 1), h0 = (w->hd.y >> sh) & 0xffff, h1 = (w->hd.z >> sh) & 0xffff,
			 h2 = (w->hd.w >> sh) & 0xffff;
		bool up = c >= 2;
		*sc = up ? (h2 & 0x0f0f) | (h0 >> 2 & 0x3030) : h0 & 0x3f3f;
		*m = up ? (h2 >> 4 & 0x0f0f) | (h1 >> 2 & 0x3030) : h1 & 0x3f3f;
	}
	/* The nibbles of one word as two words of values (low, high), with
	 * q5_K's fifth bits (t: qh >> 2c). */
	static __host__ __device__ __forceinline__ int dot_word(uint32_t q, uint32_t t, uint32_t xl, uint32_t xh,
								 int *hi)
	{
		uint32_t lo = q & LO4, up = q >> 4 & LO4;
		if (WT == DT_Q5_K) {
			lo |= t << 4 & 0x10101010u;
			up |= t << 3 & 0x10101010u;
		}
		*hi = dp4a(up, xh, *hi);
		return dp4a(lo, xl, 0);
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		int c = (p & 7) >> 1, dh = 0, h2 = 0, h3 = 0, h4 = 0;
		uint32_t sh = 2 * c;
		int dl = dot_word(w->qs.x, w->qh.x >> sh, x->lo.x, x->hi.x, &dh);
		dl += dot_word(w->qs.y, w->qh.y >> sh, x->lo.y, x->hi.y, &h2);
		dl += dot_word(w->qs.z, w->qh.z >> sh, x->lo.z, x->hi.z, &h3);
		dl += dot_word(w->qs.w, w->qh.w >> sh, x->lo.w, x->hi.w, &h4);
		dh += h2 + h3 + h4;
		uint32_t sc, m;
		scales(w, c, &sc, &m);
		int isum = (int)(sc & 0xff) * dl + (int)(sc >> 8) * dh;
		int msum = (int)(m & 0xff) * x->s_lo + (int)(m >> 8) * x->s_hi;
		float d = f16_bits((unsigned short)(w->hd.x & 0xffff)), dmin = f16_bits((unsigned short)(w->hd.x >> 16));
		return x->d * (d * (float)isum - dmin * (float)msum);
	}
};
template <> struct mvq<DT_Q4_K> : mvq_k45<DT_Q4_K> {};
template <> struct mvq<DT_Q5_K> : mvq_k45<DT_Q5_K> {};

/* q6_K. Position j of a block: half h = j / 4, l0 = 8 (j % 4): values
 * 128h + 32r + l0 .. +7 for r = 0..3 (sub-block 8h + 2r + l0 / 16). */
template <> struct mvq<DT_Q6_K> {
	enum { P = 8, BB = 210 };
	typedef struct w_regs {
		uint32_t a[2], b[2], h[2], s[2];
		unsigned short d;
	} W;
	typedef struct x_regs {
		uint32_t q[4][2];
		int neg[4];  /* -32 times the sum of each r's 8 values */
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + (p >> 3) * BB;
		int j = p & 7, h = j >> 2, l0 = 8 * (j & 3);
		ld_a2<2>(b + 64 * h + l0, w->a);
		ld_a2<2>(b + 64 * h + 32 + l0, w->b);
		ld_a2<2>(b + 128 + 32 * h + l0, w->h);
		ld_a2<2>(b + 192 + 8 * h, w->s);
		w->d = (unsigned short)ld_u16(b + 208);
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		int j = p & 7, h = j >> 2, l0 = 8 * (j & 3);
		const int8_t *q = x.q + (p >> 3) * 256 + 128 * h + l0;
		for (int r = 0; r < 4; r++) {
			ld8_a8((const uint8_t *)q + 32 * r, v->q[r]);
			v->neg[r] = -32 * dp4a(v->q[r][0], ONES, dp4a(v->q[r][1], ONES, 0));
		}
		v->d = x.d[p >> 3];
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		/* the four scales at bytes 2r + (l0 >= 16) of the 8 scale bytes */
		uint32_t s4;
#ifdef __CUDA_ARCH__
		s4 = __byte_perm(w->s[0], w->s[1], (p & 2) ? 0x7531 : 0x6420);
#else
		int o = (p & 2) ? 1 : 0;
		s4 = 0;
		for (int r = 0; r < 4; r++)
			s4 |= (uint32_t)(uint8_t)(w->s[(2 * r + o) / 4] >> 8 * ((2 * r + o) % 4)) << 8 * r;
#endif
		int isum = 0;
		for (int i = 0; i < 2; i++) {
			uint32_t qa = w->a[i], qb = w->b[i], qh = w->h[i];
			uint32_t q0 = (qa & LO4) | (qh << 4 & 0x30303030u), q1 = (qb & LO4) | (qh << 2 & 0x30303030u);
			uint32_t q2 = (qa >> 4 & LO4) | (qh & 0x30303030u), q3 = (qb >> 4 & LO4) | (qh >> 2 & 0x30303030u);
			/* values q - 32: dot(q, x) - 32 sum(x), the sums once per r */
			isum += (int)(int8_t)(s4) * dp4a(q0, x->q[0][i], i ? 0 : x->neg[0]);
			isum += (int)(int8_t)(s4 >> 8) * dp4a(q1, x->q[1][i], i ? 0 : x->neg[1]);
			isum += (int)(int8_t)(s4 >> 16) * dp4a(q2, x->q[2][i], i ? 0 : x->neg[2]);
			isum += (int)(int8_t)(s4 >> 24) * dp4a(q3, x->q[3][i], i ? 0 : x->neg[3]);
		}
		return x->d * f16_bits(w->d) * (float)isum;
	}
};

/* q8_0. Position j of a block: values 16j .. 16j + 15. */
template <> struct mvq<DT_Q8_0> {
	enum { P = 16, BB = 34 };
	typedef struct w_regs {
		uint32_t q[4];
		unsigned short d;
	} W;
	typedef struct x_regs {
		u32x4 q;
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + (p >> 1) * BB;
		ld_a2<4>(b + 2 + 16 * (p & 1), w->q);
		w->d = (unsigned short)ld_u16(b);
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		v->q = ld16(x.q + 16 * p);
		v->d = x.d[p >> 1];
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		(void)p;
		int s = dp4a(w->q[0], x->q.x, dp4a(w->q[1], x->q.y, dp4a(w->q[2], x->q.z, dp4a(w->q[3], x->q.w, 0))));
		return f16_bits(w->d) * x->d * (float)s;
	}
};

/* q4_0. Position = block: low nibbles values 0..15, high 16..31, minus 8. */
template <> struct mvq<DT_Q4_0> {
	enum { P = 8, BB = 18 };
	typedef struct w_regs {
		uint32_t q[4];
		unsigned short d;
	} W;
	typedef struct x_regs {
		u32x4 lo, hi;
		int neg;     /* -8 times the block's sum */
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + p * BB;
		ld_a2<4>(b + 2, w->q);
		w->d = (unsigned short)ld_u16(b);
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		v->lo = ld16(x.q + 32 * p);
		v->hi = ld16(x.q + 32 * p + 16);
		v->neg = -8 * (sum16(v->lo) + sum16(v->hi));
		v->d = x.d[p];
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		(void)p;
		const uint32_t xl[4] = {x->lo.x, x->lo.y, x->lo.z, x->lo.w}, xh[4] = {x->hi.x, x->hi.y, x->hi.z, x->hi.w};
		int s = x->neg;
		for (int i = 0; i < 4; i++)
			s = dp4a(w->q[i] & LO4, xl[i], dp4a(w->q[i] >> 4 & LO4, xh[i], s));
		return f16_bits(w->d) * x->d * (float)s;
	}
};

/* ---- the 32-value formats: q4_1, q5_0, q5_1, iq4_nl ---- */

/* Position = block: low nibbles values 0..15, high 16..31 (q5: the fifth
 * bits in qh), as q4_0's. q4_1/q5_1 add m times the block's activation sum,
 * q5_0 takes 16 of it back; iq4_nl's levels come from the table. */
template <int WT> struct mvq_32 {
	enum { P = 8, BB = WT == DT_Q4_1 ? 20 : WT == DT_Q5_0 ? 22 : WT == DT_Q5_1 ? 24 : 18 };
	typedef struct w_regs {
		uint32_t q[4], qh;
		uint32_t dm;             /* d (low half), m (q4_1, q5_1) */
	} W;
	typedef struct x_regs {
		u32x4 lo, hi;
		int s;                   /* the block's sum */
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + p * BB;
		if (WT == DT_Q4_1) { /* 4-byte aligned blocks */
			w->dm = ld_u32(b);
			for (int i = 0; i < 4; i++)
				w->q[i] = ld_u32(b + 4 + 4 * i);
			w->qh = 0;
		} else if (WT == DT_Q5_1) { /* 8-byte aligned */
			w->dm = ld_u32(b);
			w->qh = ld_u32(b + 4);
			ld8_a8(b + 8, w->q);
			ld8_a8(b + 16, w->q + 2);
		} else if (WT == DT_Q5_0) { /* 2-byte aligned: qh and qs in 5 words */
			uint32_t t[5];
			ld_a2<5>(b + 2, t);
			w->dm = ld_u16(b);
			w->qh = t[0];
			for (int i = 0; i < 4; i++)
				w->q[i] = t[i + 1];
		} else {
			ld_a2<4>(b + 2, w->q);
			w->dm = ld_u16(b);
			w->qh = 0;
		}
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		v->lo = ld16(x.q + 32 * p);
		v->hi = ld16(x.q + 32 * p + 16);
		v->s = WT == DT_IQ4_NL ? 0 : sum16(v->lo) + sum16(v->hi);
		v->d = x.d[p];
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		(void)p;
		const uint32_t xl[4] = {x->lo.x, x->lo.y, x->lo.z, x->lo.w}, xh[4] = {x->hi.x, x->hi.y, x->hi.z, x->hi.w};
		int s = WT == DT_Q5_0 ? -16 * x->s : 0;
		for (int i = 0; i < 4; i++) {
			uint32_t lo = w->q[i] & LO4, hi = w->q[i] >> 4 & LO4;
			if (WT == DT_Q5_0 || WT == DT_Q5_1) {
				lo |= bits_to_b4(w->qh >> 4 * i);
				hi |= bits_to_b4(w->qh >> (16 + 4 * i));
			}
			if (WT == DT_IQ4_NL) {
				lo = iq4_word(lo);
				hi = iq4_word(hi);
			}
			s = dp4a(lo, xl[i], dp4a(hi, xh[i], s));
		}
		float d = f16_bits((unsigned short)(w->dm & 0xffff));
		if (WT == DT_Q4_1 || WT == DT_Q5_1)
			return x->d * (d * (float)s + f16_bits((unsigned short)(w->dm >> 16)) * (float)x->s);
		return x->d * d * (float)s;
	}
};
template <> struct mvq<DT_Q4_1> : mvq_32<DT_Q4_1> {};
template <> struct mvq<DT_Q5_0> : mvq_32<DT_Q5_0> {};
template <> struct mvq<DT_Q5_1> : mvq_32<DT_Q5_1> {};
template <> struct mvq<DT_IQ4_NL> : mvq_32<DT_IQ4_NL> {};

/* ---- q2_K and q3_K: 16 sub-blocks of 16 values ---- */

/* Position j of a block: half h = j / 4, l0 = 8 (j % 4): the 8 bytes
 * qs[32h + l0..] hold values 128h + 32r + l0 .. +7 at bits 2r, r = 0..3
 * (sub-block 8h + 2r + l0 / 16); q3_K's hmask[l0..] bit 4h + r is their
 * third bit (clear: less 4). 32 weights of four sub-blocks. */
template <int WT> struct mvq_k23 {
	enum { P = 8, BB = WT == DT_Q2_K ? 84 : 110 };
	typedef struct w_regs {
		uint32_t q[2], hm[2];
		uint32_t s[3];           /* q2_K: the 8 scale bytes of the half (2 words); q3_K: the 12 */
		uint32_t d;              /* d (low half), q2_K's dmin */
	} W;
	typedef struct x_regs {
		uint32_t q[4][2];
		int sum[4];              /* each r's 8 values' sum */
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + (p >> 3) * BB;
		int j = p & 7, h = j >> 2, l0 = 8 * (j & 3);
		if (WT == DT_Q2_K) { /* 4-byte aligned blocks */
			w->q[0] = ld_u32(b + 16 + 32 * h + l0);
			w->q[1] = ld_u32(b + 20 + 32 * h + l0);
			w->s[0] = ld_u32(b + 8 * h);
			w->s[1] = ld_u32(b + 8 * h + 4);
			w->s[2] = 0;
			w->d = ld_u32(b + 80);
			w->hm[0] = w->hm[1] = 0;
		} else { /* 2-byte aligned */
			ld_a2<2>(b + 32 + 32 * h + l0, w->q);
			ld_a2<2>(b + l0, w->hm);
			ld_a2<3>(b + 96, w->s);
			w->d = ld_u16(b + 108);
		}
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		int j = p & 7, h = j >> 2, l0 = 8 * (j & 3);
		const int8_t *q = x.q + (p >> 3) * 256 + 128 * h + l0;
		for (int r = 0; r < 4; r++) {
			ld8_a8((const uint8_t *)q + 32 * r, v->q[r]);
			v->sum[r] = dp4a(v->q[r][0], ONES, dp4a(v->q[r][1], ONES, 0));
		}
		v->d = x.d[p >> 3];
	}
	/* q3_K: the 6-bit scales of the position's sub-blocks 8h + 2r + o
	 * (r = 0..3) as 4 bytes: the low 4 bits from bytes 2r + o (h = 0) or
	 * their high nibbles (h = 1), the top 2 from bytes 8 + (2r + o) % 4
	 * at bit 2 (2h + r / 2). */
	static __host__ __device__ __forceinline__ uint32_t q3_scales(const W *w, int h, int o)
	{
		uint32_t lo = perm8(w->s[0], w->s[1], o ? 0x7531 : 0x6420) >> 4 * h & LO4;
		uint32_t t = perm8(w->s[2], 0, o ? 0x3131 : 0x2020) >> 4 * h;
		return lo | ((t & 0x0303u) | (t >> 2 & 0x03030000u)) << 4;
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		int j = p & 7, h = j >> 2, o = (j & 3) >> 1, isum = 0, msum = 0;
		uint32_t sc3 = WT == DT_Q3_K ? q3_scales(w, h, o) : 0;
		for (int r = 0; r < 4; r++) {
			uint32_t u0 = w->q[0] >> 2 * r & 0x03030303u, u1 = w->q[1] >> 2 * r & 0x03030303u;
			if (WT == DT_Q3_K) { /* u = q + 4: the hmask bit as bit 2 */
				u0 |= (w->hm[0] >> (4 * h + r) & ONES) << 2;
				u1 |= (w->hm[1] >> (4 * h + r) & ONES) << 2;
			}
			int sub = dp4a(u0, x->q[r][0], dp4a(u1, x->q[r][1], 0));
			if (WT == DT_Q2_K) {
				int sc = (int)(w->s[r >> 1] >> (8 * (2 * (r & 1) + o))) & 0xff;
				isum += (sc & 15) * sub;
				msum += (sc >> 4) * x->sum[r];
			} else {
				isum += ((int)(sc3 >> 8 * r & 0xff) - 32) * (sub - 4 * x->sum[r]);
			}
		}
		float d = f16_bits((unsigned short)(w->d & 0xffff));
		if (WT == DT_Q2_K)
			return x->d * (d * (float)isum - f16_bits((unsigned short)(w->d >> 16)) * (float)msum);
		return x->d * d * (float)isum;
	}
};
template <> struct mvq<DT_Q2_K> : mvq_k23<DT_Q2_K> {};
template <> struct mvq<DT_Q3_K> : mvq_k23<DT_Q3_K> {};

/* ---- iq4_xs: 8 sub-blocks of 32 values ---- */

/* Position j of a block = sub-block j: qs[16j..16j + 15] as iq4_nl's
 * nibbles, its 6-bit scale less 32 (nibble j of scales_l, bits 2j of
 * scales_h). */
template <> struct mvq<DT_IQ4_XS> {
	enum { P = 8, BB = 136 };
	typedef struct w_regs {
		uint32_t q[4];
		uint32_t hd, sl;         /* d and scales_h; scales_l */
	} W;
	typedef struct x_regs {
		u32x4 lo, hi;
		float d;
	} X;
	static __host__ __device__ __forceinline__ void load(const uint8_t *row, int p, W *w)
	{
		const uint8_t *b = row + (p >> 3) * BB;
		int j = p & 7;
		w->hd = ld_u32(b);
		w->sl = ld_u32(b + 4);
		ld8_a8(b + 8 + 16 * j, w->q);
		ld8_a8(b + 16 + 16 * j, w->q + 2);
	}
	static __host__ __device__ __forceinline__ void xload(xq_row x, int p, X *v)
	{
		const int8_t *q = x.q + (p >> 3) * 256 + 32 * (p & 7);
		v->lo = ld16(q);
		v->hi = ld16(q + 16);
		v->d = x.d[p >> 3];
	}
	static __host__ __device__ __forceinline__ float dot(const W *w, const X *x, int p)
	{
		int j = p & 7, s = 0;
		const uint32_t xl[4] = {x->lo.x, x->lo.y, x->lo.z, x->lo.w}, xh[4] = {x->hi.x, x->hi.y, x->hi.z, x->hi.w};
		for (int i = 0; i < 4; i++)
			s = dp4a(iq4_word(w->q[i] & LO4), xl[i], dp4a(iq4_word(w->q[i] >> 4 & LO4), xh[i], s));
		int ls = (int)(w->sl >> 4 * j & 15) | (int)(w->hd >> (16 + 2 * j) & 3) << 4;
		return x->d * f16_bits((unsigned short)(w->hd & 0xffff)) * (float)((ls - 32) * s);
	}
};

#endif
