/* kernels/cuda/deq.cuh: reading 8 consecutive values of a weight row of any
 * type the CUDA backend takes, dequantized in registers (GGUF block layouts:
 * kernels/quant.h). Host and device code, so tests/cuda/test_cuda_deq.cu can
 * hold it to the CPU's dequantization on a machine without a GPU. Loads are
 * as wide as each type's block layout allows (load8 says what alignment a
 * row needs; models/llama.c puts every weight tensor on a 256-byte boundary
 * of device memory). */
#ifndef PAGECHAT_CUDA_DEQ_CUH
#define PAGECHAT_CUDA_DEQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/dtype.h"
}

/* An IEEE half or a bfloat16 from its bits (exact). */
static __host__ __device__ __forceinline__ float f16_bits(unsigned short u)
{
	__half_raw r;
	r.x = u;
	return __half2float(__half(r));
}

static __host__ __device__ __forceinline__ float bf16_bits(unsigned short u)
{
	uint32_t b = (uint32_t)u << 16;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

/* Little-endian words at addresses aligned to their size: one load through
 * the read-only path on the device (weights and activations do not change
 * during a kernel), memcpy on the host (no aliasing). */
static __host__ __device__ __forceinline__ uint32_t ld_u16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return __ldg((const unsigned short *)p);
#else
	unsigned short v;
	memcpy(&v, p, 2);
	return v;
#endif
}

static __host__ __device__ __forceinline__ uint32_t ld_u32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return __ldg((const unsigned int *)p);
#else
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
#endif
}

/* 8 bytes at p (8-byte aligned) as two words. */
static __host__ __device__ __forceinline__ void ld8_a8(const uint8_t *p, uint32_t q[2])
{
#ifdef __CUDA_ARCH__
	uint2 u = __ldg((const uint2 *)p);
	q[0] = u.x;
	q[1] = u.y;
#else
	memcpy(q, p, 8);
#endif
}

/* 8 bytes at p, which is only 2-byte aligned (the 34-, 18- and 210-byte
 * blocks of q8_0, q4_0 and q6_K), as two words: two or three aligned 4-byte
 * loads joined, instead of eight byte loads. Reads nothing before p's word
 * and nothing past the word that holds p[7] and, when p is not 4-byte
 * aligned, the 2 bytes after p[7] (inside the next block, or the padding
 * after a tensor: device allocations come in multiples of 256 bytes). */
static __host__ __device__ __forceinline__ void ld8_a2(const uint8_t *p, uint32_t q[2])
{
	bool odd = ((uintptr_t)p & 2) != 0;
	const uint8_t *w = p - (odd ? 2 : 0);
	uint32_t w0 = ld_u32(w), w1 = ld_u32(w + 4);
	if (odd) {
		uint32_t w2 = ld_u32(w + 8);
		q[0] = w0 >> 16 | w1 << 16;
		q[1] = w1 >> 16 | w2 << 16;
	} else {
		q[0] = w0;
		q[1] = w1;
	}
}

/* N words of the bytes at p, which is only 2-byte aligned: N + 1 aligned
 * 32-bit loads joined by funnel shifts. Reads from p's word up to 2 bytes past
 * p[4N - 1] (inside the block, or the padding after a tensor: device buffers
 * come in 256-byte units). */
template <int N>
static __host__ __device__ __forceinline__ void ld_a2(const uint8_t *p, uint32_t q[N])
{
	const uint8_t *a = (const uint8_t *)((uintptr_t)p & ~(uintptr_t)3);
	uint32_t sh = (uint32_t)((uintptr_t)p & 2) * 8, w[N + 1];
	for (int i = 0; i <= N; i++)
		w[i] = ld_u32(a + 4 * i);
	for (int i = 0; i < N; i++) {
#ifdef __CUDA_ARCH__
		q[i] = __funnelshift_r(w[i], w[i + 1], sh);
#else
		q[i] = sh ? (w[i] >> sh | w[i + 1] << (32 - sh)) : w[i];
#endif
	}
}

/* Byte i of two words. */
static __host__ __device__ __forceinline__ int byte8(const uint32_t q[2], int i)
{
	return (int)(q[i / 4] >> (8 * (i % 4))) & 0xff;
}

/* The 6-bit scale and min of sub-block s of a q4_K/q5_K block, from its 12
 * scale bytes as three words (no index into them at run time, which would
 * put the array in local memory). */
static __host__ __device__ __forceinline__ void k_scale_min(const uint32_t w[3], int s, int *sc, int *m)
{
	int a = s < 4 ? s : s + 4, b = s < 4 ? s + 4 : s - 4;
	uint32_t wa = a < 4 ? w[0] : a < 8 ? w[1] : w[2], wb = b < 4 ? w[0] : w[1];
	int ba = (int)(wa >> (8 * (a % 4))) & 0xff, bb = (int)(wb >> (8 * (b % 4))) & 0xff;
	if (s < 4) {
		*sc = ba & 63;
		*m = bb & 63;
	} else {
		int bs = (int)((s < 4 ? w[0] : w[1]) >> (8 * (s % 4))) & 0xff; /* byte s (s < 8) */
		*sc = (ba & 15) | (bb >> 6) << 4;
		*m = (ba >> 4) | (bs >> 6) << 4;
	}
}

/* Byte i (0..15) of four words, with no index into an array at run time
 * (which would put the array in local memory). */
static __host__ __device__ __forceinline__ int byte16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int i)
{
	uint32_t w = i < 4 ? w0 : i < 8 ? w1 : i < 12 ? w2 : w3;
	return (int)(w >> (8 * (i % 4))) & 0xff;
}

/* iq4_nl's and iq4_xs's 16 levels (kernels/quant.h quant_iq4_values) as
 * four words of int8, entry i in byte i. */
#define IQ4_W0 0xbfad9881u /* -127, -104, -83, -65 */
#define IQ4_W1 0xf6eaddcfu
#define IQ4_W2 0x26190d01u
#define IQ4_W3 0x71594535u

/* Level n (0..15) of the iq4 table. */
static __host__ __device__ __forceinline__ int iq4_level(int n)
{
	return (int)(int8_t)byte16(IQ4_W0, IQ4_W1, IQ4_W2, IQ4_W3, n);
}

/* The 6-bit scale of 16-value sub-block s of a q3_K block, from its 12
 * scale bytes as three words: the low 4 bits in byte s (s < 8) or byte
 * s - 8's high nibble, the top 2 at bit 2 (s / 4) of byte 8 + s % 4. */
static __host__ __device__ __forceinline__ int q3_scale(uint32_t w0, uint32_t w1, uint32_t w2, int s)
{
	int lo = s < 8 ? byte16(w0, w1, w2, 0, s) & 15 : byte16(w0, w1, w2, 0, s - 8) >> 4;
	return lo | ((byte16(w0, w1, w2, 0, 8 + s % 4) >> (2 * (s / 4))) & 3) << 4;
}

/* v[0..8) = values 8g .. 8g+7 of the row at r (type WT). The row must start
 * where its type's loads are aligned: 16 bytes for f32/f16/bf16 (and
 * q4_K/q5_K blocks), 8 for q5_1 and iq4_xs, 4 for q4_1 and q2_K, 2 for
 * q8_0, q4_0, q5_0, iq4_nl, q3_K and q6_K (each its blocks' alignment). */
template <int WT>
static __host__ __device__ __forceinline__ void load8(const uint8_t *r, int64_t g, float v[8])
{
	if (WT == DT_F32) {
		const float4 *p = (const float4 *)r + 2 * g;
		float4 a = p[0], b = p[1];
		v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
		v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
	} else if (WT == DT_F16 || WT == DT_BF16) {
		uint4 u = ((const uint4 *)r)[g];
		uint32_t w[4] = {u.x, u.y, u.z, u.w};
		for (int i = 0; i < 4; i++) {
			unsigned short lo = (unsigned short)(w[i] & 0xffff), hi = (unsigned short)(w[i] >> 16);
			v[2 * i] = WT == DT_F16 ? f16_bits(lo) : bf16_bits(lo);
			v[2 * i + 1] = WT == DT_F16 ? f16_bits(hi) : bf16_bits(hi);
		}
	} else if (WT == DT_Q8_0) {
		const uint8_t *b = r + g / 4 * 34;
		uint32_t q[2];
		ld8_a2(b + 2 + 8 * (g % 4), q);
		float d = f16_bits((unsigned short)ld_u16(b));
		for (int i = 0; i < 8; i++)
			v[i] = d * (float)(int8_t)byte8(q, i);
	} else if (WT == DT_Q4_0) {
		const uint8_t *b = r + g / 4 * 18;
		int j = (int)(g % 4);
		uint32_t q[2];
		ld8_a2(b + 2 + 8 * (j % 2), q);
		float d = f16_bits((unsigned short)ld_u16(b));
		for (int i = 0; i < 8; i++)
			v[i] = d * (float)((j < 2 ? byte8(q, i) & 15 : byte8(q, i) >> 4) - 8);
	} else if (WT == DT_Q4_K || WT == DT_Q5_K) {
		const int bb = WT == DT_Q4_K ? 144 : 176;
		const uint8_t *b = r + g / 32 * bb;
		int j = (int)(g % 32), c = j / 8, l0 = 8 * (j % 8) % 32;
		bool high = j % 8 >= 4;
		/* blocks are 16-byte multiples in rows of whole blocks: d and dmin
		 * one word, the scales three, the 8 quant bytes (and q5_K's 8 high
		 * bits) one 8-byte load each */
		uint32_t dm = ld_u32(b), sw[3] = {ld_u32(b + 4), ld_u32(b + 8), ld_u32(b + 12)}, q[2], qh[2];
		int sc, m;
		k_scale_min(sw, 2 * c + high, &sc, &m);
		float d = f16_bits((unsigned short)(dm & 0xffff)) * (float)sc;
		float mn = f16_bits((unsigned short)(dm >> 16)) * (float)m;
		ld8_a8(b + (WT == DT_Q4_K ? 16 : 48) + 32 * c + l0, q);
		if (WT == DT_Q5_K)
			ld8_a8(b + 16 + l0, qh);
		for (int i = 0; i < 8; i++) {
			int x = high ? byte8(q, i) >> 4 : byte8(q, i) & 15;
			if (WT == DT_Q5_K)
				x |= ((byte8(qh, i) >> (2 * c + high)) & 1) << 4;
			v[i] = d * (float)x - mn;
		}
	} else if (WT == DT_Q4_1 || WT == DT_Q5_0 || WT == DT_Q5_1 || WT == DT_IQ4_NL) {
		/* 32-value blocks: value i of a block is byte i % 16's low nibble
		 * (i < 16) or high nibble, q5's fifth bit is bit i of qh */
		const int bb = WT == DT_Q4_1 ? 20 : WT == DT_Q5_0 ? 22 : WT == DT_Q5_1 ? 24 : 18;
		const int qs = WT == DT_Q4_1 ? 4 : WT == DT_Q5_0 ? 6 : WT == DT_Q5_1 ? 8 : 2;
		const uint8_t *b = r + g / 4 * bb;
		int j = (int)(g % 4);
		uint32_t q[2], qh = 0;
		if (WT == DT_Q5_1)
			ld8_a8(b + qs + 8 * (j % 2), q);
		else
			ld8_a2(b + qs + 8 * (j % 2), q);
		if (WT == DT_Q5_0)
			qh = ld_u16(b + 2) | ld_u16(b + 4) << 16;
		if (WT == DT_Q5_1)
			qh = ld_u32(b + 4);
		float d = f16_bits((unsigned short)ld_u16(b));
		float m = WT == DT_Q4_1 || WT == DT_Q5_1 ? f16_bits((unsigned short)ld_u16(b + 2)) : 0.0f;
		for (int i = 0; i < 8; i++) {
			int x = j < 2 ? byte8(q, i) & 15 : byte8(q, i) >> 4;
			if (WT == DT_Q5_0 || WT == DT_Q5_1)
				x |= (int)((qh >> (8 * j + i)) & 1) << 4;
			v[i] = WT == DT_Q4_1 || WT == DT_Q5_1 ? (float)x * d + m
			     : WT == DT_Q5_0 ? (float)(x - 16) * d : d * (float)iq4_level(x);
		}
	} else if (WT == DT_Q2_K || WT == DT_Q3_K) {
		/* value 128h + 32j + l: bits 2j of qs[32h + l] (q3_K: less 4
		 * where bit 4h + j of hmask[l] is clear); 16-value sub-block s */
		const int bb = WT == DT_Q2_K ? 84 : 110, qo = WT == DT_Q2_K ? 16 : 32;
		const uint8_t *b = r + g / 32 * bb;
		int i0 = 8 * (int)(g % 32), h = i0 / 128, jj = i0 % 128 / 32, l0 = i0 % 32, s = i0 / 16;
		uint32_t q[2];
		ld8_a2(b + qo + 32 * h + l0, q);
		float dl, ml = 0;
		uint32_t hm[2] = {0, 0};
		if (WT == DT_Q2_K) {
			int sc = (int)(ld_u32(b + 4 * (s / 4)) >> (8 * (s % 4))) & 0xff;
			uint32_t dd = ld_u32(b + 80);
			dl = f16_bits((unsigned short)(dd & 0xffff)) * (float)(sc & 15);
			ml = f16_bits((unsigned short)(dd >> 16)) * (float)(sc >> 4);
		} else {
			uint32_t sw[3];
			ld_a2<3>(b + 96, sw);
			ld8_a2(b + l0, hm);
			dl = f16_bits((unsigned short)ld_u16(b + 108)) * (float)(q3_scale(sw[0], sw[1], sw[2], s) - 32);
		}
		for (int i = 0; i < 8; i++) {
			int x = (byte8(q, i) >> (2 * jj)) & 3;
			if (WT == DT_Q3_K)
				x -= (byte8(hm, i) >> (4 * h + jj)) & 1 ? 0 : 4;
			v[i] = WT == DT_Q2_K ? dl * (float)x - ml : dl * (float)x;
		}
	} else if (WT == DT_IQ4_XS) {
		/* 32-value sub-block s: nibbles as iq4_nl's in qs[16s..]; its
		 * 6-bit scale: nibble s of scales_l, bits 2s of scales_h */
		const uint8_t *b = r + g / 32 * 136;
		int i0 = 8 * (int)(g % 32), s = i0 / 32, jj = i0 % 32;
		uint32_t hd = ld_u32(b), sl = ld_u32(b + 4), q[2];
		ld8_a8(b + 8 + 16 * s + jj % 16, q);
		int ls = (int)((sl >> (4 * s)) & 15) | (int)((hd >> (16 + 2 * s)) & 3) << 4;
		float dl = f16_bits((unsigned short)(hd & 0xffff)) * (float)(ls - 32);
		for (int i = 0; i < 8; i++)
			v[i] = dl * (float)iq4_level(jj < 16 ? byte8(q, i) & 15 : byte8(q, i) >> 4);
	} else if (WT == DT_Q6_K) {
		const uint8_t *b = r + g / 32 * 210;
		int i0 = 8 * (int)(g % 32), h = i0 / 128, rr = i0 % 128 / 32, l0 = i0 % 32;
		uint32_t ql[2], qh[2];
		ld8_a2(b + 64 * h + 32 * (rr % 2) + l0, ql);
		ld8_a2(b + 128 + 32 * h + l0, qh);
		float d = f16_bits((unsigned short)ld_u16(b + 208)) * (float)(int8_t)b[192 + 8 * h + 2 * rr + l0 / 16];
		for (int i = 0; i < 8; i++) {
			int lq = byte8(ql, i);
			int x = (rr < 2 ? lq & 15 : lq >> 4) | ((byte8(qh, i) >> (2 * rr)) & 3) << 4;
			v[i] = d * (float)(x - 32);
		}
	}
}

#endif
