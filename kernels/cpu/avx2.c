/* kernels/cpu/avx2.c: the AVX2 + FMA kernel set (with F16C).
 *
 * The same structure as the AVX-512 set at 8 lanes: dot-product tiles whose
 * every output is one accumulation chain in a fixed order, summed across
 * lanes at the end by one fixed reduction; tails run the bodies' arithmetic
 * on zero-padded copies. Quantized weights meet int8 activations through
 * vpmaddubsw (u8 x s8 pairs): q8_0 as |w| against sign-transferred x, the
 * unsigned formats directly, k-quant sub-block scales through vpmaddwd. */
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET

#define X_BLOCK_BYTES (256 * 1024)
/* Token blocks this small are computed one weight row at a time. */
#define SEQ_ROWS_MAX_TOKENS 4

/* ---- helpers ---- */

INL float hsum8(__m256 v)
{
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

/* e^x for 8 lanes: 2^n * p(r) as in the AVX-512 set; 0 below -87.3. */
INL __m256 exp8(__m256 x)
{
	__m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
	x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
	x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
	__m256 p = _mm256_set1_ps(1.0f / 720);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lane mask for the first n (0..8) of 8 lanes, for maskload/maskstore. */
INL __m256i mask8(int64_t n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)MIN(n, 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- f32 / f16 / bf16 weights ---- */

INL __m256 load_w(const uint8_t *row, enum dtype wt, int64_t i)
{
	if (wt == DT_F32)
		return _mm256_loadu_ps((const float *)row + i);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
	if (wt == DT_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last n < 8 values from i, zero-padded. */
INL __m256 load_w_tail(const uint8_t *row, enum dtype wt, int64_t i, int64_t n)
{
	if (wt == DT_F32)
		return _mm256_maskload_ps((const float *)row + i, mask8(n));
	uint16_t buf[8] = {0};
	memcpy(buf, (const uint16_t *)row + i, (size_t)n * 2);
	return load_w((const uint8_t *)buf, wt, 0);
}

#define FR 4   /* weight rows per float tile */
#define FC 2   /* tokens per float tile */

INL void ftile(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k;
	const uint8_t *w[FR];
	const float *x[FC];
	__m256 acc[FR][FC];
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		w[r] = a->w + (o0 + r) * a->ldw;
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		x[c] = a->x + (t0 + c) * a->ldx;
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	int64_t i = 0;
	for (; i + 8 <= k; i += 8) {
		__m256 wv[FR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			wv[r] = load_w(w[r], wt, i);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256 xv = _mm256_loadu_ps(x[c] + i);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
		}
	}
	if (i < k) {
		__m256 wv[FR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			wv[r] = load_w_tail(w[r], wt, i, k - i);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256 xv = _mm256_maskload_ps(x[c] + i, mask8(k - i));
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum8(acc[r][c]);
}

/* A tile kernel runs weight rows [o0, o1) in groups of its R rows. */
typedef void (*tile_fn)(const mm_args *a, int64_t t0, int64_t o0, int64_t o1);

#define FT(T, R, C) NOINL void ft_##T##_##R##_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ for (int64_t o = o0; o < o1; o += R) ftile(a, t0, o, R, C, DT_##T); }
#define FT_TYPE(T) FT(T, 1, 1) FT(T, 1, 2) FT(T, 4, 1) FT(T, 4, 2)
FT_TYPE(F32)
FT_TYPE(F16)
FT_TYPE(BF16)
#define FT_TAB(T) {{NULL, ft_##T##_1_1, ft_##T##_1_2}, {NULL, ft_##T##_4_1, ft_##T##_4_2}}

static const tile_fn ftiles[3][2][FC + 1] = {FT_TAB(F32), FT_TAB(F16), FT_TAB(BF16)};

/* ---- quantized weights against quantized activations ---- */

#define QR 4
#define QC 2

/* The 32 values of a q4_0 block as bytes 0..15. */
INL __m256i w_q4_0(const blk_q4_0 *b)
{
	__m128i v = _mm_loadu_si128((const __m128i *)b->qs), m = _mm_set1_epi8(15);
	return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* The int32 lane sums of u8 w times s8 x, 4 bytes per lane. */
INL __m256i dot_u8s8(__m256i w, __m256i x)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

INL void qtile32(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k, nb = k / 32;
	const uint8_t *w[QR];
	qact_view xa[QC];
	__m256 acc[QR][QC];
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		w[r] = a->w + (o0 + r) * a->ldw;
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(wt, a->qa + (t0 + c) * a->lda, k);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		__m256i wv[QR];
		float dw[QR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			if (wt == DT_Q8_0) {
				const blk_q8_0 *q = (const blk_q8_0 *)w[r] + b;
				wv[r] = _mm256_loadu_si256((const __m256i *)q->qs);
				dw[r] = _cvtsh_ss(q->d);
			} else {
				const blk_q4_0 *q = (const blk_q4_0 *)w[r] + b;
				wv[r] = w_q4_0(q);
				dw[r] = _cvtsh_ss(q->d);
			}
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i xv = _mm256_loadu_si256((const __m256i *)(xa[c].q + 32 * b));
			float dx = xa[c].d[b];
			__m256i bias = _mm256_set1_epi32(xa[c].ns[b]);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				__m256i s;
				if (wt == DT_Q8_0) /* |w| times x with w's sign */
					s = dot_u8s8(_mm256_sign_epi8(wv[r], wv[r]), _mm256_sign_epi8(xv, wv[r]));
				else /* (q - 8) x: q x, then -8 * sum(x) spread over the lanes */
					s = _mm256_add_epi32(dot_u8s8(wv[r], xv), bias);
				acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[r] * dx), acc[r][c]);
			}
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum8(acc[r][c]);
}

/* 32 values 32s .. 32s+31 of a k-quant block as bytes (q6_K: q, not q - 32). */
INL __m256i w_k(const uint8_t *blk, enum dtype wt, int s)
{
	__m256i m4 = _mm256_set1_epi8(15);
	if (wt == DT_Q6_K) {
		const blk_q6_k *b = (const blk_q6_k *)blk;
		int h = s / 4, r = s % 4;
		__m256i ql = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (r & 1)));
		__m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
		__m256i lo = r < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
		/* bits 2r, 2r+1 of qh to bits 4, 5 */
		__m256i hb = r == 0 ? _mm256_slli_epi16(qh, 4) : r == 1 ? _mm256_slli_epi16(qh, 2)
			   : r == 2 ? qh : _mm256_srli_epi16(qh, 2);
		return _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
	}
	const uint8_t *qs = wt == DT_Q4_K ? ((const blk_q4_k *)blk)->qs : ((const blk_q5_k *)blk)->qs;
	__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (s / 2)));
	__m256i q = s % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
	if (wt == DT_Q5_K) {
		__m256i qh = _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)blk)->qh);
		__m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(1));
		q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
	}
	return q;
}

INL void qtile256(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k, bb = dtype_block_bytes(wt);
	const uint8_t *w[QR];
	qact_view xa[QC];
	__m256 acc[QR][QC];
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		w[r] = a->w + (o0 + r) * a->ldw;
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(wt, a->qa + (t0 + c) * a->lda, k);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm256_setzero_ps();
	for (int64_t sb = 0; sb < k / 256; sb++) {
		int16_t sc[QR][16];
		__m256i isum[QR][QC], off[QR];
		float d[QR], dmin[QR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			const uint8_t *blk = w[r] + sb * bb;
			if (wt == DT_Q6_K) {
				const blk_q6_k *b6 = (const blk_q6_k *)blk;
				for (int s = 0; s < 16; s++)
					sc[r][s] = b6->scales[s];
				d[r] = _cvtsh_ss(b6->d);
				dmin[r] = 0;
				/* -32 * scale of each 16-value group, for the offset term */
				off[r] = _mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(),
					_mm256_loadu_si256((const __m256i *)sc[r])), 5);
			} else {
				const blk_q4_k *b4 = (const blk_q4_k *)blk;
				int16_t m2[16];
				for (int s = 0; s < 8; s++) {
					uint8_t scv, mv;
					quant_k_scale_min(b4->scales, s, &scv, &mv);
					sc[r][s] = scv;
					m2[2 * s] = m2[2 * s + 1] = mv;
				}
				d[r] = _cvtsh_ss(b4->d);
				dmin[r] = _cvtsh_ss(b4->dmin);
				off[r] = _mm256_loadu_si256((const __m256i *)m2);
			}
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				isum[r][c] = _mm256_setzero_si256();
		}
		for (int s = 0; s < 8; s++) {
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				__m256i wv = w_k(w[r] + sb * bb, wt, s);
				__m256i sv = wt == DT_Q6_K
					? _mm256_set_m128i(_mm_set1_epi16(sc[r][2 * s + 1]), _mm_set1_epi16(sc[r][2 * s]))
					: _mm256_set1_epi16(sc[r][s]);
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					__m256i xv = _mm256_loadu_si256((const __m256i *)(xa[c].q + 256 * sb + 32 * s));
					__m256i p = _mm256_maddubs_epi16(wv, xv);
					isum[r][c] = _mm256_add_epi32(isum[r][c], _mm256_madd_epi16(p, sv));
				}
			}
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i bs = _mm256_loadu_si256((const __m256i *)(xa[c].bs + 16 * sb));
			float dx = xa[c].d[sb];
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				__m256i t = _mm256_madd_epi16(bs, off[r]);
				if (wt == DT_Q6_K)
					isum[r][c] = _mm256_add_epi32(isum[r][c], t);
				else
					acc[r][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(dmin[r] * dx),
								     acc[r][c]);
				acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]), _mm256_set1_ps(d[r] * dx),
							    acc[r][c]);
			}
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum8(acc[r][c]);
}

#define QT(T, R, C, F) NOINL void qt_##T##_##R##_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ for (int64_t o = o0; o < o1; o += R) F(a, t0, o, R, C, DT_##T); }
#define QT_TYPE(T, F) QT(T, 1, 1, F) QT(T, 1, 2, F) QT(T, 4, 1, F) QT(T, 4, 2, F)
QT_TYPE(Q8_0, qtile32)
QT_TYPE(Q4_0, qtile32)
QT_TYPE(Q4_K, qtile256)
QT_TYPE(Q5_K, qtile256)
QT_TYPE(Q6_K, qtile256)
#define QT_TAB(T) {{NULL, qt_##T##_1_1, qt_##T##_1_2}, {NULL, qt_##T##_4_1, qt_##T##_4_2}}

static const tile_fn qtiles[5][2][QC + 1] = {
	QT_TAB(Q8_0), QT_TAB(Q4_0), QT_TAB(Q4_K), QT_TAB(Q5_K), QT_TAB(Q6_K),
};

TARGET static void avx2_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	const tile_fn (*tab)[3];
	switch (a->wt) {
	case DT_F32: tab = ftiles[0]; break;
	case DT_F16: tab = ftiles[1]; break;
	case DT_BF16: tab = ftiles[2]; break;
	case DT_Q8_0: tab = qtiles[0]; break;
	case DT_Q4_0: tab = qtiles[1]; break;
	case DT_Q4_K: tab = qtiles[2]; break;
	case DT_Q5_K: tab = qtiles[3]; break;
	case DT_Q6_K: tab = qtiles[4]; break;
	default: return;
	}
	bool q = quant_uses_qact(a->wt);
	int cmax = q ? QC : FC;
	int64_t x_row = q ? a->lda : a->k * (int64_t)sizeof(float);
	int64_t tb = MAX(cmax, X_BLOCK_BYTES / MAX(x_row, 1) / cmax * cmax);
	for (int64_t b0 = t0; b0 < t1; b0 += tb) {
		int64_t b1 = MIN(t1, b0 + tb);
		/* few tokens: one row at a time, so each thread reads the weights as
		 * one sequential stream (interleaved short row streams defeat the
		 * hardware prefetcher: a third of the bandwidth) */
		bool rows4 = b1 - b0 > SEQ_ROWS_MAX_TOKENS;
		if (!rows4) {
			for (int64_t t = b0; t < b1;) {
				int c = (int)MIN(cmax, b1 - t);
				tab[0][c](a, t, o0, o1);
				t += c;
			}
			continue;
		}
		for (int64_t o = o0; o < o1;) {
			bool four = o1 - o >= 4;
			for (int64_t t = b0; t < b1;) {
				int c = (int)MIN(cmax, b1 - t);
				tab[four][c](a, t, o, o + (four ? 4 : 1));
				t += c;
			}
			o += four ? 4 : 1;
		}
	}
}

/* ---- attention ---- */

/* Values [8v, 8v + 8) of a head slice p of K/V row type t (f16, q8 or fp8;
 * the head fills its vectors), as f32 without the 8-bit scale; E4M3 through
 * f16 as in avx512.c (the value times 2^-8; kv_scale8 carries the 2^8). */
INL __m256 load8_kv(const uint8_t *p, int t, int v)
{
	if (t == KV_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + 8 * v)));
	__m128i x8 = _mm_loadl_epi64((const __m128i *)(p + 8 * v));
	if (t == KV_Q8)
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x8));
	/* sign-extended, shifted by 7, bit 14 cleared (as in avx512.c) */
	__m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(x8), 7), _mm_set1_epi16(-0x4001));
	return _mm256_cvtph_ps(h);
}

/* The scale of head h in an 8-bit row (fp8's times 2^8), 1 for f16 rows. */
INL float kv_scale8(const uint8_t *row, int t, int64_t kv_dim, int h)
{
	if (t == KV_F32 || t == KV_F16)
		return 1.0f;
	uint16_t s;
	memcpy(&s, row + kv_dim + 2 * (int64_t)h, 2);
	return t == KV_FP8 ? _cvtsh_ss(s) * 256.0f : _cvtsh_ss(s);
}

/* A K or V vector: f32 rows through the head's masks; typed rows (heads of
 * whole vectors) whole, and zero past the head's hd / 8 vectors. */
INL __m256 att_load(const uint8_t *row, int64_t off, int t, int v, __m256i m, int hd)
{
	if (t == KV_F32)
		return _mm256_maskload_ps((const float *)row + off + 8 * v, m);
	if (8 * v >= hd)
		return _mm256_setzero_ps();
	return load8_kv(row + off * (t == KV_F16 ? 2 : 1), t, v);
}

/* Keys per chunk (see cpu_kernels.attend_chunk): a query's keys are taken
 * in chunks of this many, each from a fresh softmax state, folded in order. */
#define ATT_CHUNK 512
/* Keys whose rows a decoding chunk reads whole before the heads take them. */
#define ATT_TOUCH 256

/* The running softmax state of a query against one KV head. */
typedef struct att8_state {
	__m256 o[32];
	float m, l;
} att8_state;

INL void att8_init(att8_state *st, const int NV)
{
#pragma GCC unroll 32
	for (int v = 0; v < NV; v++)
		st->o[v] = _mm256_setzero_ps();
	st->m = -INFINITY;
	st->l = 0;
}

/* Folds the next chunk's state (m, l, o) into t, both rescaled to the
 * larger maximum; a chunk without keys (l = 0) changes nothing, the first
 * with keys is taken as it is. Every route folds the same chunks in the
 * same order with these operations. */
INL void att8_fold(att8_state *t, float m, float l, const __m256 *o, const int NV)
{
	if (l == 0)
		return;
	if (t->l == 0) {
#pragma GCC unroll 32
		for (int v = 0; v < NV; v++)
			t->o[v] = o[v];
		t->m = m;
		t->l = l;
		return;
	}
	float mx = MAX(t->m, m);
	__m256 at = exp8(_mm256_set1_ps(t->m - mx)), ac = exp8(_mm256_set1_ps(m - mx));
	t->l = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(t->l), _mm256_castps256_ps128(at),
					  _mm_mul_ss(_mm_set_ss(l), _mm256_castps256_ps128(ac))));
	t->m = mx;
#pragma GCC unroll 32
	for (int v = 0; v < NV; v++)
		t->o[v] = _mm256_fmadd_ps(t->o[v], at, _mm256_mul_ps(o[v], ac));
}

INL void att8_finish(const att8_state *st, float *out, int hd, const int NV)
{
	__m256 il = _mm256_set1_ps(1.0f / st->l);
#pragma GCC unroll 32
	for (int v = 0; v < NV; v++)
		_mm256_maskstore_ps(out + 8 * v, mask8(MAX(0, hd - 8 * v)), _mm256_mul_ps(st->o[v], il));
}

/* NV vectors of 8 cover the head; vectors past the head's end are zero.
 * KT/VT: the K and V row types (typed rows only for heads of whole vectors).
 * Keys [j_begin, j_end) (j_begin a multiple of ATT_CHUNK) continuing st,
 * in segments that are the KV blocks cut at chunk ends: scores, an
 * online-softmax step, then the values in key order. */
INL void attend_span(att8_state *st, const float *q, const kern_attn *a, const int32_t *table,
		     int32_t n_ctx, int kv_head, int32_t j_begin, int32_t j_end, const int NV, const int KT,
		     const int VT)
{
	const int hd = a->head_dim, bt = a->block_tokens;
	const int64_t kv_dim = (int64_t)a->n_kv_heads * hd, off = (int64_t)kv_head * hd;
	const uint8_t *kcache = a->k, *vcache = a->v;
	__m256i mk[32];
	__m256 qv[32], ov[32];
#pragma GCC unroll 32
	for (int v = 0; v < NV; v++) {
		mk[v] = mask8(MAX(0, hd - 8 * v));
		qv[v] = _mm256_maskload_ps(q + 8 * v, mk[v]);
		ov[v] = st->o[v];
	}
	float m = st->m, l = st->l;
	float s[ATTN_MAX_BLOCK_TOKENS + 8] __attribute__((aligned(32)));
	const int32_t end = MIN(n_ctx, j_end);
	for (int32_t j0 = j_begin; j0 < end;) {
		int in = (int)(j0 % bt), nj = (int)MIN(bt - in, end - j0);
		int64_t base = (int64_t)table[j0 / bt] * bt + in;
		float bm = -INFINITY;
		for (int j = 0; j < nj; j++) {
			const uint8_t *kr = kcache + (base + j) * (int64_t)a->k_row;
			__m256 acc = _mm256_mul_ps(qv[0], att_load(kr, off, KT, 0, mk[0], hd));
#pragma GCC unroll 32
			for (int v = 1; v < NV; v++)
				acc = _mm256_fmadd_ps(qv[v], att_load(kr, off, KT, v, mk[v], hd), acc);
			s[j] = KT == KV_F32 || KT == KV_F16 ? hsum8(acc) * a->scale
							    : hsum8(acc) * kv_scale8(kr, KT, kv_dim, kv_head) * a->scale;
			bm = MAX(bm, s[j]);
		}
		float m_new = MAX(m, bm);
		float corr = _mm256_cvtss_f32(exp8(_mm256_set1_ps(m - m_new)));
		__m256 vc = _mm256_set1_ps(corr), lsum = _mm256_setzero_ps();
		for (int j = 0; j < nj; j += 8) {
			__m256i mj = mask8(nj - j);
			__m256 p = exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, mj), _mm256_set1_ps(m_new)));
			p = _mm256_and_ps(p, _mm256_castsi256_ps(mj));
			_mm256_maskstore_ps(s + j, mj, p);
			lsum = _mm256_add_ps(lsum, p);
		}
		l = l * corr + hsum8(lsum);
#pragma GCC unroll 32
		for (int v = 0; v < NV; v++)
			ov[v] = _mm256_mul_ps(ov[v], vc);
		for (int j = 0; j < nj; j++) {
			const uint8_t *vr = vcache + (base + j) * (int64_t)a->v_row;
			__m256 pj = _mm256_set1_ps(VT == KV_F32 || VT == KV_F16 ? s[j]
								      : s[j] * kv_scale8(vr, VT, kv_dim, kv_head));
#pragma GCC unroll 32
			for (int v = 0; v < NV; v++)
				ov[v] = _mm256_fmadd_ps(pj, att_load(vr, off, VT, v, mk[v], hd), ov[v]);
		}
		m = m_new;
		j0 += nj;
	}
#pragma GCC unroll 32
	for (int v = 0; v < NV; v++)
		st->o[v] = ov[v];
	st->m = m;
	st->l = l;
}

/* One query against one KV head, all its keys, chunk by chunk. */
INL void attend_nv(float *out, const float *q, const kern_attn *a, const int32_t *table,
		   int32_t n_ctx, int kv_head, const int NV, const int KT, const int VT)
{
	att8_state t, c;
	att8_init(&t, NV);
	for (int32_t c0 = 0; c0 < n_ctx; c0 += ATT_CHUNK) {
		att8_init(&c, NV);
		attend_span(&c, q, a, table, n_ctx, kv_head, c0, c0 + ATT_CHUNK, NV, KT, VT);
		att8_fold(&t, c.m, c.l, c.o, NV);
	}
	att8_finish(&t, out, a->head_dim, NV);
}

/* One decoding query in every head, chunk c of its keys: the state per
 * query head h at res + h * (head_dim + 2) (m, l, output). */
INL void attend_chunk_nv(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
			 int c, const int NV, const int KT, const int VT)
{
	const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, H = a->n_heads;
	const int32_t c0 = c * ATT_CHUNK, c1 = MIN(n_ctx, c0 + ATT_CHUNK);
	att8_state st;
	for (int32_t j0 = c0, j1; j0 < c1; j0 = j1) {
		/* windows end on a block's end (or the chunk's), so that the
		 * segments are attend_nv's: blocks cut at chunk ends */
		int64_t e = (int64_t)j0 + ATT_TOUCH, bt = a->block_tokens;
		j1 = (int32_t)MIN((int64_t)c1, (e + bt - 1) / bt * bt);
		cpu_touch_rows(a, table, j0, j1);
		for (int h = 0; h < H; h++) {
			float *r = res + (int64_t)h * (hd + 2);
			if (j0 == c0) {
				att8_init(&st, NV);
			} else {
				st.m = r[0];
				st.l = r[1];
#pragma GCC unroll 32
				for (int v = 0; v < NV; v++)
					st.o[v] = _mm256_maskload_ps(r + 2 + 8 * v, mask8(MAX(0, hd - 8 * v)));
			}
			attend_span(&st, q + (int64_t)h * hd, a, table, j1, h / group, j0, j1, NV, KT, VT);
			r[0] = st.m;
			r[1] = st.l;
#pragma GCC unroll 32
			for (int v = 0; v < NV; v++)
				_mm256_maskstore_ps(r + 2 + 8 * v, mask8(MAX(0, hd - 8 * v)), st.o[v]);
		}
	}
}

/* The chunks' states folded in order, per head, into out. */
INL void attend_fold_nv(float *out, const float *res, int n_chunks, const kern_attn *a, const int NV)
{
	const int hd = a->head_dim, H = a->n_heads;
	for (int h = 0; h < H; h++) {
		att8_state t;
		att8_init(&t, NV);
		for (int c = 0; c < n_chunks; c++) {
			const float *r = res + ((int64_t)c * H + h) * (hd + 2);
			__m256 o[32];
#pragma GCC unroll 32
			for (int v = 0; v < NV; v++)
				o[v] = _mm256_maskload_ps(r + 2 + 8 * v, mask8(MAX(0, hd - 8 * v)));
			att8_fold(&t, r[0], r[1], o, NV);
		}
		att8_finish(&t, out + (int64_t)h * hd, hd, NV);
	}
}

/* f32 K/V with the types folded away, and typed K/V (run-time types). */
typedef void (*att1_fn)(float *o, const float *q, const kern_attn *a, const int32_t *t, int32_t n, int h);
#define ATT(NV) NOINL void attend_##NV(float *o, const float *q, const kern_attn *a, const int32_t *t, \
				       int32_t n, int h) { attend_nv(o, q, a, t, n, h, NV, KV_F32, KV_F32); } \
	NOINL void attendt_##NV(float *o, const float *q, const kern_attn *a, const int32_t *t, \
				int32_t n, int h) { attend_nv(o, q, a, t, n, h, NV, a->k_type, a->v_type); }
ATT(1) ATT(2) ATT(4) ATT(8) ATT(16) ATT(32)
static const att1_fn att1[2][6] = {{attend_1, attend_2, attend_4, attend_8, attend_16, attend_32},
				   {attendt_1, attendt_2, attendt_4, attendt_8, attendt_16, attendt_32}};

typedef void (*chunk_fn)(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
			 int c);
typedef void (*fold_fn)(float *out, const float *res, int n_chunks, const kern_attn *a);
#define ATC(NV) NOINL void atc_##NV(float *res, const float *q, const kern_attn *a, const int32_t *t, \
				    int32_t n, int c) { attend_chunk_nv(res, q, a, t, n, c, NV, KV_F32, KV_F32); } \
	NOINL void atct_##NV(float *res, const float *q, const kern_attn *a, const int32_t *t, int32_t n, int c) \
	{ attend_chunk_nv(res, q, a, t, n, c, NV, a->k_type, a->v_type); } \
	NOINL void atf_##NV(float *out, const float *res, int n_chunks, const kern_attn *a) \
	{ attend_fold_nv(out, res, n_chunks, a, NV); }
ATC(1) ATC(2) ATC(4) ATC(8) ATC(16) ATC(32)
static const chunk_fn att_chunks[2][6] = {{atc_1, atc_2, atc_4, atc_8, atc_16, atc_32},
					  {atct_1, atct_2, atct_4, atct_8, atct_16, atct_32}};
static const fold_fn att_folds[6] = {atf_1, atf_2, atf_4, atf_8, atf_16, atf_32};

static int att_row(int hd)
{
	int nv = (hd + 7) / 8;
	return nv <= 1 ? 0 : nv <= 2 ? 1 : nv <= 4 ? 2 : nv <= 8 ? 3 : nv <= 16 ? 4 : 5;
}

/* Chunked decoding for what avx2_attend takes itself (not the portable
 * fallbacks, whose bits differ). */
static int avx2_attend_chunk_keys(const kern_attn *a)
{
	bool typed = a->k_type != KV_F32 || a->v_type != KV_F32;
	return a->head_dim > KERN_MAX_HEAD_DIM || (typed && a->head_dim % 8) ? 0 : ATT_CHUNK;
}

static void avx2_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table,
			      int32_t n_ctx, int c)
{
	att_chunks[a->k_type != KV_F32 || a->v_type != KV_F32][att_row(a->head_dim)](res, q, a, table, n_ctx, c);
}

static void avx2_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a)
{
	att_folds[att_row(a->head_dim)](out, res, n_chunks, a);
}

static void avx2_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
			const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head)
{
	bool typed = a->k_type != KV_F32 || a->v_type != KV_F32;
	if (a->head_dim > KERN_MAX_HEAD_DIM || (typed && a->head_dim % 8)) { /* the portable code */
		(typed ? cpu_attend_typed : cpu_kernels_scalar()->attend)(out, out_stride, q, q_stride, nq, a, table,
									n_ctx, kv_head);
		return;
	}
	int nv = (a->head_dim + 7) / 8;
	att1_fn f = att1[typed][nv <= 1 ? 0 : nv <= 2 ? 1 : nv <= 4 ? 2 : nv <= 8 ? 3 : nv <= 16 ? 4 : 5];
	for (int i = 0; i < nq; i++)
		f(out + i * out_stride, q + i * q_stride, a, table, n_ctx[i], kv_head);
}

/* ---- element-wise ---- */

INL __m256 silu_mul8(__m256 g, __m256 u)
{
	__m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
	return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

TARGET static void avx2_silu_mul(float *g, const float *u, int64_t n)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
	if (i < n) {
		__m256i m = mask8(n - i);
		_mm256_maskstore_ps(g + i, m, silu_mul8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
	}
}

static const cpu_kernels avx2_kernels = {
	.name = "avx2",
	.matmul = avx2_matmul,
	.quantize_act = qact_quantize_row,
	.attend = avx2_attend,
	.attend_typed = true,
	.attend_chunk_keys = avx2_attend_chunk_keys,
	.attend_chunk = avx2_attend_chunk,
	.attend_fold = avx2_attend_fold,
	.silu_mul = avx2_silu_mul,
};

const cpu_kernels *cpu_kernels_avx2(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
		return &avx2_kernels;
	return NULL;
}

#else

const cpu_kernels *cpu_kernels_avx2(void)
{
	return NULL;
}

#endif
