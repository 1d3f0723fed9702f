/* kernels/cpu/avx512.c: the AVX-512 kernel set (F, BW, VL, DQ and VNNI).
 *
 * Matmuls are dot-product tiles of R weight rows x C tokens; each output
 * keeps one 16-lane accumulator that takes the K dimension in order (16 f32
 * values, one 64-value pair of q8_0/q4_0 blocks, or one 256-value k-quant
 * super-block at a time) and is summed across lanes at the end by one fixed
 * reduction. A tile of any shape therefore computes every element exactly as
 * a 1 x 1 tile does, and the batch and thread split never show in a result.
 * Quantized weights meet int8 activations (kernels/quant.h): q8_0/q4_0 through
 * vpdpbusd (weights as unsigned bytes, q8_0 as q + 128 with the offset taken
 * back through the activation sums) and one f32 step per block pair;
 * k-quants through vpmaddubsw and vpdpwssd with their integer sub-block
 * scales, and one f32 step per super-block.
 * Blocking: a batch is cut into token blocks whose activations fit in L2, and
 * weight rows stream past them in groups of 4 (quantized groups unpacked
 * once per block into the vectors the tiles use); a block of at most
 * SEQ_ROWS_MAX_TOKENS tokens (decoding) takes the rows one at a time, so the
 * weights are read as one sequential stream, with kernels of their own for
 * q8_0 and q4_K. Tiles of 4 rows sum their accumulators four at a time by
 * hsum's own tree, so every route gives the bits of a 1 x 1 tile. */
#include "kernels/cpu/simd.h"
#include "kernels/cpu/avx2_qx.h"
#include "kernels/kvq.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET

/* Token blocks this small are computed one weight row at a time. */
#define SEQ_ROWS_MAX_TOKENS 4

/* Bytes of activations (per token) a block of tokens may keep in L2. */
#define X_BLOCK_BYTES (768 * 1024)

/* ---- helpers ---- */

INL float hsum(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

/* hsum of v[0..3] into *y .. y[3], by the same tree of additions as hsum
 * (so the same bits) but on four vectors at once: halves, quarters, then
 * pairs within each 128-bit lane. */
INL void hsum4_store(float *y, __m512 v0, __m512 v1, __m512 v2, __m512 v3)
{
	__m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
				   _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
	__m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
				   _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
	/* 128-bit lane i: lanes 0..3 of vector i's quarter sums */
	__m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
				 _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
	q = _mm512_add_ps(q, _mm512_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
	q = _mm512_add_ps(q, _mm512_shuffle_ps(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
	__m512 r = _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), q);
	_mm_storeu_ps(y, _mm512_castps512_ps128(r));
}

/* e^x for 16 lanes: 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p of degree 6
 * (relative error about 2e-7). Below -104 the result is 0. */
INL __m512 exp16(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
	x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
	__m512 p = _mm512_set1_ps(1.0f / 720);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

INL __mmask16 mask_n(int64_t n)
{
	return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/* ---- f32 / f16 / bf16 weights ---- */

INL __m512 cvt_w(__m256i h, enum dtype wt)
{
	if (wt == DT_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INL __m512 load_w(const uint8_t *row, enum dtype wt, int64_t i)
{
	if (wt == DT_F32)
		return _mm512_loadu_ps((const float *)row + i);
	return cvt_w(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)), wt);
}

INL __m512 load_w_tail(const uint8_t *row, enum dtype wt, int64_t i, __mmask16 m)
{
	if (wt == DT_F32)
		return _mm512_maskz_loadu_ps(m, (const float *)row + i);
	return cvt_w(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i), wt);
}

#define FR 4   /* weight rows per float tile */
#define FC 6   /* tokens per float tile */

/* Tokens [t0, t0+C) against weight rows [o0, o0+R). */
INL void ftile(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k;
	const uint8_t *w[FR];
	const float *x[FC];
	__m512 acc[FR][FC];
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
			acc[r][c] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 16 <= k; i += 16) {
		__m512 wv[FR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			wv[r] = load_w(w[r], wt, i);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512 xv = _mm512_loadu_ps(x[c] + i);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
		}
	}
	if (i < k) {
		__mmask16 m = mask_n(k - i);
		__m512 wv[FR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			wv[r] = load_w_tail(w[r], wt, i, m);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512 xv = _mm512_maskz_loadu_ps(m, x[c] + i);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
		}
	}
	if (R == 4) {
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			hsum4_store(a->y + (t0 + c) * a->ldy + o0, acc[0][c], acc[R > 1 ? 1 : 0][c], acc[R > 2 ? 2 : 0][c], acc[R > 3 ? 3 : 0][c]);
		return;
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum(acc[r][c]);
}

/* A tile kernel runs weight rows [o0, o1) in groups of its R rows. */
typedef void (*tile_fn)(const mm_args *a, int64_t t0, int64_t o0, int64_t o1);

#define FT(T, R, C) NOINL void ft_##T##_##R##_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ for (int64_t o = o0; o < o1; o += R) ftile(a, t0, o, R, C, DT_##T); }
#define FT_ROW(T, R) FT(T, R, 1) FT(T, R, 2) FT(T, R, 3) FT(T, R, 4) FT(T, R, 5) FT(T, R, 6)
#define FT_TYPE(T) FT_ROW(T, 1) FT_ROW(T, 4)
FT_TYPE(F32)
FT_TYPE(F16)
FT_TYPE(BF16)
#define FT_TAB_ROW(T, R) {NULL, ft_##T##_##R##_1, ft_##T##_##R##_2, ft_##T##_##R##_3, \
	ft_##T##_##R##_4, ft_##T##_##R##_5, ft_##T##_##R##_6}
#define FT_TAB(T) {FT_TAB_ROW(T, 1), FT_TAB_ROW(T, 4)}

static const tile_fn ftiles[3][2][FC + 1] = {FT_TAB(F32), FT_TAB(F16), FT_TAB(BF16)};

/* ---- quantized weights against quantized activations ---- */

#define QR 4   /* weight rows per quantized tile */
#define QC 4   /* tokens per quantized tile */
#ifndef QC_K
#define QC_K 3 /* tokens per k-quant tile */
#endif

/* Lane index vectors: [a x8, b x8] for the scale of each 32-value half of a
 * 64-value pair, and [4j + l/4] for q6_K's 16-value sub-blocks. */
INL __m512i idx_pair(int a, int b)
{
	return _mm512_set_epi32(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
}

/* The f16 scales of blocks b[0] and (when two) b[1] as [d0 x8, d1 x8]. */
INL __m512 pair_scales(uint16_t d0, uint16_t d1)
{
	__m128i h = _mm_insert_epi16(_mm_cvtsi32_si128(d0), d1, 1);
	return _mm512_permutexvar_ps(idx_pair(0, 1), _mm512_castps128_ps512(_mm_cvtph_ps(h)));
}

/* Two consecutive 32-bit values of an activation row spread as [v0 x8, v1 x8]
 * (lanes of a missing second block masked to zero by ml). */
INL __m512i pair_i32(const void *p, __mmask16 ml)
{
	__m128i v = _mm_loadl_epi64((const __m128i *)p);
	return _mm512_maskz_permutexvar_epi32(ml, idx_pair(0, 1), _mm512_castsi128_si512(v));
}

INL void w_q8_0(const uint8_t *row, int64_t b0, bool two, __m512i *wv, __m512 *ws)
{
	const blk_q8_0 *b = (const blk_q8_0 *)row + b0;
	__m256i lo = _mm256_loadu_si256((const __m256i *)b[0].qs);
	__m256i hi = two ? _mm256_loadu_si256((const __m256i *)b[1].qs) : _mm256_setzero_si256();
	*wv = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
			       _mm512_set1_epi8((char)0x80));
	*ws = pair_scales(b[0].d, two ? b[1].d : 0);
}

INL void w_q4_0(const uint8_t *row, int64_t b0, bool two, __m512i *wv, __m512 *ws)
{
	const blk_q4_0 *b = (const blk_q4_0 *)row + b0;
	__m128i q0 = _mm_loadu_si128((const __m128i *)b[0].qs);
	__m128i q1 = two ? _mm_loadu_si128((const __m128i *)b[1].qs) : _mm_setzero_si128();
	__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
	__m256i m = _mm256_set1_epi8(15);
	__m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
	__m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
	*wv = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
	*ws = pair_scales(b[0].d, two ? b[1].d : 0);
}

/* q4_K/q5_K super-block header (d, dmin, 12 bytes of packed 6-bit scales
 * and mins) unpacked without scalar work: *sm gets 16 words [sc0..sc7,
 * m0..m7], *dd the floats [d, dmin, ...]. */
INL void k_header(const uint8_t *blk, __m512i *sm, __m128 *dd)
{
	__m128i h = _mm_loadu_si128((const __m128i *)blk);      /* d, dmin, s[0..11] */
	*dd = _mm_cvtph_ps(h);
	/* bytes [s0..3, s8..11, s4..7, s8..11] and [-, s0..3, -, s4..7] */
	__m128i v = _mm_shuffle_epi8(h, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
	__m128i hb = _mm_shuffle_epi8(h, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
	__m128i lo = _mm_and_si128(v, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
	__m128i nib = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
									   15, 15, 15, 15));
	__m128i top = _mm_and_si128(_mm_srli_epi16(hb, 2), _mm_set1_epi8(0x30));
	*sm = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_or_si128(_mm_or_si128(lo, nib), top)));
}

/* Values 64j .. 64j+63 of a q4_K/q5_K block as bytes. */
INL __m512i w_k4(const uint8_t *qs, int j)
{
	__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
	__m256i m = _mm256_set1_epi8(15);
	__m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

INL __m512i w_k5(const uint8_t *qs, __m256i qh, int j)
{
	__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
	__m256i m = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
	__m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
	__m256i hl = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one);
	__m256i hh = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one);
	lo = _mm256_or_si256(lo, _mm256_slli_epi16(hl, 4));
	hi = _mm256_or_si256(hi, _mm256_slli_epi16(hh, 4));
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Values 64j .. 64j+63 of a q6_K block as unsigned bytes (q, not q - 32). */
INL __m512i w_k6(const blk_q6_k *b, int j)
{
	int h = j / 2;
	__m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
	__m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
	__m512i qhx = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
	__m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
	if (j % 2 == 0)
		return _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qhx, 4), m2));
	return _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qhx, m2));
}

/* Byte-shuffle controls that spread one word of each 128-bit lane across
 * it: q4_K/q5_K pair j takes word 2j (lanes 0-1) and 2j+1 (lanes 2-3) of
 * the scales repeated in every lane; q6_K pair j takes word (4j + L) % 8 in
 * lane L of the 16 scales' low (j < 2) or high eight, repeated. */
INL __m512i bidx_k4(int j)
{
	char a = (char)(4 * j), b = (char)(4 * j + 2);
	return _mm512_set_epi8(b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
			       b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
			       a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
			       a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a);
}

INL __m512i bidx_k6(int j)
{
	char w0 = (char)(2 * ((4 * j) % 8)), w1 = w0 + 2, w2 = w0 + 4, w3 = w0 + 6;
	return _mm512_set_epi8(w3 + 1, w3, w3 + 1, w3, w3 + 1, w3, w3 + 1, w3, w3 + 1, w3, w3 + 1, w3, w3 + 1, w3, w3 + 1, w3,
			       w2 + 1, w2, w2 + 1, w2, w2 + 1, w2, w2 + 1, w2, w2 + 1, w2, w2 + 1, w2, w2 + 1, w2, w2 + 1, w2,
			       w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1, w1 + 1, w1,
			       w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0, w0 + 1, w0);
}

/* q8_0 and q4_0, per 64-value pair: acc += lanes of (bias + w . x) * (dw * dx). */
INL void qtile32(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k, nb = k / 32;
	const uint8_t *w[QR];
	qact_view xa[QC];
	__m512 acc[QR][QC];
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
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t p = 0; 2 * p < nb; p++) {
		bool two = 2 * p + 1 < nb;
		__mmask64 mb = two ? ~(__mmask64)0 : (__mmask64)0xFFFFFFFFu;
		__mmask16 ml = two ? (__mmask16)0xFFFF : (__mmask16)0x00FF;
		__m512i wv[QR];
		__m512 ws[QR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			if (wt == DT_Q8_0)
				w_q8_0(w[r], 2 * p, two, &wv[r], &ws[r]);
			else
				w_q4_0(w[r], 2 * p, two, &wv[r], &ws[r]);
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512i xv = _mm512_maskz_loadu_epi8(mb, xa[c].q + 64 * p);
			__m512 dv = _mm512_castsi512_ps(pair_i32(xa[c].d + 2 * p, ml));
			/* lanes sum to -128 * S (q8_0, for the +128) or -8 * S (q4_0) */
			__m512i bias = pair_i32(xa[c].ns + 2 * p, ml);
			if (wt == DT_Q8_0)
				bias = _mm512_slli_epi32(bias, 4);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				__m512i sum = _mm512_dpbusd_epi32(bias, wv[r], xv);
				acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws[r], dv), acc[r][c]);
			}
		}
	}
	if (R == 4) {
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			hsum4_store(a->y + (t0 + c) * a->ldy + o0, acc[0][c], acc[R > 1 ? 1 : 0][c], acc[R > 2 ? 2 : 0][c], acc[R > 3 ? 3 : 0][c]);
		return;
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum(acc[r][c]);
}

/* k-quants, per 256-value super-block: integer sums of the 16-bit products
 * times the integer sub-block scales (vpmaddubsw + vpdpwssd; q6_K's -32 and
 * q4_K/q5_K's mins through the activation's 16-value sums), then one f32
 * step: acc += lanes * (d * dx) (- mins * (dmin * dx)). */
INL void qtile256(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	const int64_t k = a->k, bb = dtype_block_bytes(wt);
	const uint8_t *w[QR];
	qact_view xa[QC];
	__m512 acc[QR][QC];
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
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t sb = 0; sb < k / 256; sb++) {
		/* two integer accumulators (even and odd pairs) shorten the
		 * dependency chain; integer sums are exact, so this changes no bit */
		__m512i sc16[QR], sclo[QR], schi[QR], mdup[QR], isum[QR][QC], isum2[QR][QC];
		__m256i qh[QR];
		float d[QR], dmin[QR];
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			const uint8_t *blk = w[r] + sb * bb;
			if (wt == DT_Q6_K) {
				const blk_q6_k *b6 = (const blk_q6_k *)blk;
				__m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b6->scales));
				sc16[r] = _mm512_zextsi256_si512(s);
				/* -32 * scale, for the offset term */
				mdup[r] = _mm512_zextsi256_si512(_mm256_slli_epi16(
					_mm256_sub_epi16(_mm256_setzero_si256(), s), 5));
				d[r] = _cvtsh_ss(b6->d);
				dmin[r] = 0;
			} else {
				__m128 dd;
				k_header(blk, &sc16[r], &dd);
				/* [m0, m0, m1, m1, ...] for the mins against pairs of 16-value sums */
				mdup[r] = _mm512_permutexvar_epi16(_mm512_set_epi16(
					0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), sc16[r]);
				mdup[r] = _mm512_zextsi256_si512(_mm512_castsi512_si256(mdup[r]));
				d[r] = _mm_cvtss_f32(dd);
				dmin[r] = _mm_cvtss_f32(_mm_movehdup_ps(dd));
				if (wt == DT_Q5_K)
					qh[r] = _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)blk)->qh);
			}
			/* the scales' words repeated in every 128-bit lane */
			sclo[r] = _mm512_broadcast_i32x4(_mm512_castsi512_si128(sc16[r]));
			schi[r] = _mm512_broadcast_i32x4(_mm256_extracti128_si256(_mm512_castsi512_si256(sc16[r]), 1));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				isum[r][c] = isum2[r][c] = _mm512_setzero_si512();
		}
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m512i wv[QR], sv[QR];
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				const uint8_t *blk = w[r] + sb * bb;
				if (wt == DT_Q4_K)
					wv[r] = w_k4(((const blk_q4_k *)blk)->qs, j);
				else if (wt == DT_Q5_K)
					wv[r] = w_k5(((const blk_q5_k *)blk)->qs, qh[r], j);
				else
					wv[r] = w_k6((const blk_q6_k *)blk, j);
				if (wt == DT_Q6_K)
					sv[r] = _mm512_shuffle_epi8(j < 2 ? sclo[r] : schi[r], bidx_k6(j));
				else
					sv[r] = _mm512_shuffle_epi8(sclo[r], bidx_k4(j));
			}
#pragma GCC unroll 8
			for (int c = 0; c < C; c++) {
				__m512i xv = _mm512_loadu_si512(xa[c].q + 256 * sb + 64 * j);
#pragma GCC unroll 8
				for (int r = 0; r < R; r++) {
					__m512i p16 = _mm512_maddubs_epi16(wv[r], xv);
					if (j % 2)
						isum2[r][c] = _mm512_dpwssd_epi32(isum2[r][c], p16, sv[r]);
					else
						isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], p16, sv[r]);
				}
			}
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xa[c].bs + 16 * sb)));
			float dx = xa[c].d[sb];
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				isum[r][c] = _mm512_add_epi32(isum[r][c], isum2[r][c]);
				if (wt == DT_Q6_K) {
					/* sum over 16-value groups of -32 * scale * (sum of x) */
					isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], bs, mdup[r]);
				} else {
					__m512i mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, mdup[r]);
					acc[r][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_set1_ps(dmin[r] * dx),
								     acc[r][c]);
				}
				acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]), _mm512_set1_ps(d[r] * dx),
							    acc[r][c]);
			}
		}
	}
	if (R == 4) {
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			hsum4_store(a->y + (t0 + c) * a->ldy + o0, acc[0][c], acc[R > 1 ? 1 : 0][c], acc[R > 2 ? 2 : 0][c], acc[R > 3 ? 3 : 0][c]);
		return;
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o0 + r] = hsum(acc[r][c]);
}

INL void qtile(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const enum dtype wt)
{
	if (wt == DT_Q8_0 || wt == DT_Q4_0)
		qtile32(a, t0, o0, R, C, wt);
	else
		qtile256(a, t0, o0, R, C, wt);
}

#define QT(T, R, C) NOINL void qt_##T##_##R##_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ for (int64_t o = o0; o < o1; o += R) qtile(a, t0, o, R, C, DT_##T); }
#define QT_ROW(T, R) QT(T, R, 1) QT(T, R, 2) QT(T, R, 3) QT(T, R, 4)
#define QT_TYPE(T) QT_ROW(T, 1) QT_ROW(T, 4)
QT_TYPE(Q8_0)
QT_TYPE(Q4_0)
QT_TYPE(Q4_K)
QT_TYPE(Q5_K)
QT_TYPE(Q6_K)
#define QT_TAB_ROW(T, R) {NULL, qt_##T##_##R##_1, qt_##T##_##R##_2, qt_##T##_##R##_3, qt_##T##_##R##_4}
#define QT_TAB(T) {QT_TAB_ROW(T, 1), QT_TAB_ROW(T, 4)}

static const tile_fn qtiles[5][2][QC + 1] = {
	QT_TAB(Q8_0), QT_TAB(Q4_0), QT_TAB(Q4_K), QT_TAB(Q5_K), QT_TAB(Q6_K),
};

/* ---- decoding: few tokens, weight rows streamed one at a time ---- */

/* q8_0, C tokens (1..QC), weight rows [o0, o1) one at a time: qtile32's
 * arithmetic (so its bits), with each block pair's two weight scales
 * broadcast straight into their halves. (Expanding the activation terms
 * once per call instead of once per row ran 1.5x faster in cache but 20%
 * slower inside a forward pass, so they are made per row as in the tiles.) */
INL void q8_0_rows(const mm_args *a, int64_t t0, int64_t o0, int64_t o1, const int C)
{
	const int64_t k = a->k, nb = k / 32, np = (nb + 1) / 2, full = nb / 2;
	qact_view xa[QC];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(DT_Q8_0, a->qa + (t0 + c) * a->lda, k);
	const __m512i flip = _mm512_set1_epi8((char)0x80);
	for (int64_t o = o0; o < o1; o++) {
		const blk_q8_0 *b = (const blk_q8_0 *)(a->w + o * a->ldw);
		__m512 acc[QC];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = _mm512_setzero_ps();
		for (int64_t p = 0; p < np; p++) {
			__m512i wv;
			__m512 ws;
			if (p < full) {
				const blk_q8_0 *bp = b + 2 * p;
				__m256i h = _mm256_mask_set1_epi16(_mm256_set1_epi16((short)bp[0].d), 0xFF00, (short)bp[1].d);
				ws = _mm512_cvtph_ps(h);
				__m256i lo = _mm256_loadu_si256((const __m256i *)bp[0].qs);
				__m256i hi = _mm256_loadu_si256((const __m256i *)bp[1].qs);
				wv = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
			} else {
				w_q8_0((const uint8_t *)b, 2 * p, false, &wv, &ws);
			}
			__mmask64 mb = p < full ? ~(__mmask64)0 : (__mmask64)0xFFFFFFFFu;
			__mmask16 ml = p < full ? (__mmask16)0xFFFF : (__mmask16)0x00FF;
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m512i xv = _mm512_maskz_loadu_epi8(mb, xa[c].q + 64 * p);
				__m512 dv = _mm512_castsi512_ps(pair_i32(xa[c].d + 2 * p, ml));
				__m512i bias = _mm512_slli_epi32(pair_i32(xa[c].ns + 2 * p, ml), 4);
				__m512i sum = _mm512_dpbusd_epi32(bias, wv, xv);
				acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, dv), acc[c]);
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o] = hsum(acc[c]);
	}
}

/* Decoding q4_K: super-blocks per call (times tokens) whose rearranged
 * activations a decoding kernel keeps on its stack (about 20 KiB). */
#define DEC_MAX_SB 64

/* Word s of each 128-bit lane in lanes 0-1 and word t in lanes 2-3. */
INL __m512i bidx_w2(int s, int t)
{
	char a = (char)(2 * s), b = (char)(2 * t);
	return _mm512_set_epi8(b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
			       b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
			       a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
			       a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a);
}

/* q4_K, C tokens (1..QC_K), weight rows [o0, o1) one at a time, with the
 * bits of qtile256. Each 64-byte load of packed values gives two vectors
 * (low nibbles: values 0-31 and 64-95 of the 128; high: 32-63 and 96-127)
 * that meet activations rearranged to match (once per call); their integer
 * sums land in the other half of the lanes than in qtile256, and one
 * exchange of halves per super-block puts every lane's (exact) integer total
 * where qtile256 has it, before the same f32 steps. */
INL void q4_k_rows(const mm_args *a, int64_t t0, int64_t o0, int64_t o1, const int C)
{
	const int64_t nsb = a->k / 256;
	/* token c's super-block sb at [c * nsb + sb] (c * nsb + sb < DEC_MAX_SB) */
	__m512i xq[DEC_MAX_SB][4], xbs[DEC_MAX_SB];
	float xd[DEC_MAX_SB];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q4_K, a->qa + (t0 + c) * a->lda, a->k);
		for (int64_t sb = 0; sb < nsb; sb++) {
			for (int h = 0; h < 2; h++) {
				__m512i x0 = _mm512_loadu_si512(v.q + 256 * sb + 128 * h);
				__m512i x1 = _mm512_loadu_si512(v.q + 256 * sb + 128 * h + 64);
				xq[c * nsb + sb][2 * h] = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(1, 0, 1, 0));
				xq[c * nsb + sb][2 * h + 1] = _mm512_shuffle_i64x2(x0, x1, _MM_SHUFFLE(3, 2, 3, 2));
			}
			xbs[c * nsb + sb] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(v.bs + 16 * sb)));
			xd[c * nsb + sb] = v.d[sb];
		}
	}
	const __m512i m4 = _mm512_set1_epi8(15);
	const __m256i midx = _mm256_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
	for (int64_t o = o0; o < o1; o++) {
		const uint8_t *row = a->w + o * a->ldw;
		__m512 acc[QC_K];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = _mm512_setzero_ps();
		for (int64_t sb = 0; sb < nsb; sb++) {
			const blk_q4_k *blk = (const blk_q4_k *)row + sb;
			__m512i sc16, lo[QC_K], hi[QC_K];
			__m128 dd;
			k_header((const uint8_t *)blk, &sc16, &dd);
			__m512i mdup = _mm512_zextsi256_si512(_mm256_permutexvar_epi16(midx, _mm512_castsi512_si256(sc16)));
			__m512i sclo = _mm512_broadcast_i32x4(_mm512_castsi512_si128(sc16));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				lo[c] = hi[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				__m512i v = _mm512_loadu_si512(blk->qs + 64 * h);
				__m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
				/* sub-blocks 4h, 4h + 2 (low nibbles) and 4h + 1, 4h + 3 (high) */
				__m512i sl = _mm512_shuffle_epi8(sclo, bidx_w2(4 * h, 4 * h + 2));
				__m512i sh = _mm512_shuffle_epi8(sclo, bidx_w2(4 * h + 1, 4 * h + 3));
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					lo[c] = _mm512_dpwssd_epi32(lo[c], _mm512_maddubs_epi16(wl, xq[c * nsb + sb][2 * h]), sl);
					hi[c] = _mm512_dpwssd_epi32(hi[c], _mm512_maddubs_epi16(wh, xq[c * nsb + sb][2 * h + 1]), sh);
				}
			}
			__m512 vd = _mm512_broadcastss_ps(dd), vdmin = _mm512_broadcastss_ps(_mm_movehdup_ps(dd));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m512i isum = _mm512_add_epi32(_mm512_shuffle_i64x2(lo[c], hi[c], _MM_SHUFFLE(1, 0, 1, 0)),
								_mm512_shuffle_i64x2(lo[c], hi[c], _MM_SHUFFLE(3, 2, 3, 2)));
				__m512i mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), xbs[c * nsb + sb], mdup);
				__m512 dx = _mm512_set1_ps(xd[c * nsb + sb]);
				acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(vdmin, dx), acc[c]);
				acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(vd, dx), acc[c]);
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o] = hsum(acc[c]);
	}
}

#define Q4KR(C) NOINL void q4kr_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ q4_k_rows(a, t0, o0, o1, C); }
Q4KR(1) Q4KR(2) Q4KR(3)
static const tile_fn q4krows[QC_K + 1] = {NULL, q4kr_1, q4kr_2, q4kr_3};

#define Q8R(C) NOINL void q8r_##C(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) \
	{ q8_0_rows(a, t0, o0, o1, C); }
Q8R(1) Q8R(2) Q8R(3) Q8R(4)
static const tile_fn q8rows[QC + 1] = {NULL, q8r_1, q8r_2, q8r_3, q8r_4};

/* ---- prompts: weight rows unpacked once per token block ---- */

/* Vectors a packed group of 4 weight rows may take (96 KiB, in L2). */
#define PACK_VECS 1536

/* A tile over 4 weight rows whose vectors were unpacked into pk. */
typedef void (*ptile_fn)(const mm_args *a, int64_t t0, int64_t o0, const __m512i *pk);

/* q8_0: per 64-value pair p and row r, the flipped values at pk[8p + 2r]
 * and the scales at pk[8p + 2r + 1], exactly as w_q8_0 gives them. */
NOINL void pack_q8_0(const mm_args *a, int64_t o0, __m512i *pk)
{
	const int64_t nb = a->k / 32;
	/* row by row: the four rows are adjacent, so this reads one stream */
	for (int r = 0; r < 4; r++)
		for (int64_t p = 0; 2 * p < nb; p++) {
			__m512 ws;
			w_q8_0(a->w + (o0 + r) * a->ldw, 2 * p, 2 * p + 1 < nb, &pk[8 * p + 2 * r], &ws);
			pk[8 * p + 2 * r + 1] = _mm512_castps_si512(ws);
		}
}

/* qtile32 for q8_0 with R = 4 and the weights from pk: the same bits. */
INL void q8_0_ptile(const mm_args *a, int64_t t0, const __m512i *pk, const int C)
{
	const int64_t k = a->k, nb = k / 32;
	qact_view xa[QC];
	__m512 acc[4][QC];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(DT_Q8_0, a->qa + (t0 + c) * a->lda, k);
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t p = 0; 2 * p < nb; p++) {
		bool two = 2 * p + 1 < nb;
		__mmask64 mb = two ? ~(__mmask64)0 : (__mmask64)0xFFFFFFFFu;
		__mmask16 ml = two ? (__mmask16)0xFFFF : (__mmask16)0x00FF;
		const __m512i *pp = pk + 8 * p;
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) {
			__m512i xv = _mm512_maskz_loadu_epi8(mb, xa[c].q + 64 * p);
			__m512 dv = _mm512_castsi512_ps(pair_i32(xa[c].d + 2 * p, ml));
			__m512i bias = _mm512_slli_epi32(pair_i32(xa[c].ns + 2 * p, ml), 4);
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++) {
				__m512i sum = _mm512_dpbusd_epi32(bias, pp[2 * r], xv);
				acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
							    _mm512_mul_ps(_mm512_castsi512_ps(pp[2 * r + 1]), dv), acc[r][c]);
			}
		}
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		hsum4_store(a->y + (t0 + c) * a->ldy, acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
}

#define Q8P(C) NOINL void q8p_##C(const mm_args *a, int64_t t0, int64_t o0, const __m512i *pk) \
	{ mm_args b = *a; b.y += o0; q8_0_ptile(&b, t0, pk, C); }
Q8P(1) Q8P(2) Q8P(3) Q8P(4)
static const ptile_fn q8ptiles[QC + 1] = {NULL, q8p_1, q8p_2, q8p_3, q8p_4};

/* k-quants: per super-block sb and row r, KPV vectors at pk + KPV * (4 sb
 * + r): the four value vectors and four scale vectors of its 64-value
 * pairs, the mins (q6_K: the -32 offsets) and d and dmin broadcast, exactly
 * as qtile256 makes them. */
#define KPV 11

NOINL void pack_k(const mm_args *a, int64_t o0, __m512i *pk)
{
	const enum dtype wt = a->wt;
	const int64_t bb = dtype_block_bytes(wt);
	const __m512i midx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					      15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
	for (int r = 0; r < 4; r++) /* row by row: one stream, as in pack_q8_0 */
		for (int64_t sb = 0; sb < a->k / 256; sb++) {
			const uint8_t *blk = a->w + (o0 + r) * a->ldw + sb * bb;
			__m512i *v = pk + KPV * (4 * sb + r), sc16;
			__m256i qh = _mm256_setzero_si256();
			float d, dmin;
			if (wt == DT_Q6_K) {
				const blk_q6_k *b6 = (const blk_q6_k *)blk;
				__m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b6->scales));
				sc16 = _mm512_zextsi256_si512(sc);
				v[8] = _mm512_zextsi256_si512(_mm256_slli_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), sc), 5));
				d = _cvtsh_ss(b6->d);
				dmin = 0;
			} else {
				__m128 dd;
				k_header(blk, &sc16, &dd);
				v[8] = _mm512_zextsi256_si512(_mm512_castsi512_si256(_mm512_permutexvar_epi16(midx, sc16)));
				d = _mm_cvtss_f32(dd);
				dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
				if (wt == DT_Q5_K)
					qh = _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)blk)->qh);
			}
			__m512i sclo = _mm512_broadcast_i32x4(_mm512_castsi512_si128(sc16));
			__m512i schi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(_mm512_castsi512_si256(sc16), 1));
			for (int j = 0; j < 4; j++) {
				if (wt == DT_Q4_K)
					v[j] = w_k4(((const blk_q4_k *)blk)->qs, j);
				else if (wt == DT_Q5_K)
					v[j] = w_k5(((const blk_q5_k *)blk)->qs, qh, j);
				else
					v[j] = w_k6((const blk_q6_k *)blk, j);
				if (wt == DT_Q6_K)
					v[4 + j] = _mm512_shuffle_epi8(j < 2 ? sclo : schi, bidx_k6(j));
				else
					v[4 + j] = _mm512_shuffle_epi8(sclo, bidx_k4(j));
			}
			v[9] = _mm512_castps_si512(_mm512_set1_ps(d));
			v[10] = _mm512_castps_si512(_mm512_set1_ps(dmin));
		}
}

/* qtile256 with R = 4 and the weights from pk: the same bits. */
INL void k_ptile(const mm_args *a, int64_t t0, const __m512i *pk, const int C, const bool q6)
{
	const int64_t k = a->k;
	qact_view xa[QC_K];
	__m512 acc[4][QC_K];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(a->wt, a->qa + (t0 + c) * a->lda, k);
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[r][c] = _mm512_setzero_ps();
	for (int64_t sb = 0; sb < k / 256; sb++) {
		const __m512i *v = pk + KPV * 4 * sb;
		/* one integer accumulator per output (twelve chains are enough;
		 * integer sums are exact, so qtile256's two give the same totals) */
		__m512i isum[4][QC_K];
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				isum[r][c] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m512i xv = _mm512_loadu_si512(xa[c].q + 256 * sb + 64 * j);
#pragma GCC unroll 4
				for (int r = 0; r < 4; r++) {
					__m512i p16 = _mm512_maddubs_epi16(v[KPV * r + j], xv);
					isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], p16, v[KPV * r + 4 + j]);
				}
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) {
			__m512i bs = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(xa[c].bs + 16 * sb)));
			__m512 dx = _mm512_set1_ps(xa[c].d[sb]);
#pragma GCC unroll 4
			for (int r = 0; r < 4; r++) {
				const __m512i *vr = v + KPV * r;
				if (q6) {
					isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], bs, vr[8]);
				} else {
					__m512i mins = _mm512_dpwssd_epi32(_mm512_setzero_si512(), bs, vr[8]);
					acc[r][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins),
								     _mm512_mul_ps(_mm512_castsi512_ps(vr[10]), dx), acc[r][c]);
				}
				acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]),
							    _mm512_mul_ps(_mm512_castsi512_ps(vr[9]), dx), acc[r][c]);
			}
		}
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		hsum4_store(a->y + (t0 + c) * a->ldy, acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
}

#define KP(C, Q6, N) NOINL void kp_##N##_##C(const mm_args *a, int64_t t0, int64_t o0, const __m512i *pk) \
	{ mm_args b = *a; b.y += o0; k_ptile(&b, t0, pk, C, Q6); }
KP(1, false, k4) KP(2, false, k4) KP(3, false, k4) KP(1, true, k6) KP(2, true, k6) KP(3, true, k6)
static const ptile_fn kptiles[2][QC_K + 1] = {{NULL, kp_k4_1, kp_k4_2, kp_k4_3}, {NULL, kp_k6_1, kp_k6_2, kp_k6_3}};

TARGET static void avx512_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	const tile_fn *tab1, *tab4;
	switch (a->wt) {
	case DT_F32: tab1 = ftiles[0][0]; tab4 = ftiles[0][1]; break;
	case DT_F16: tab1 = ftiles[1][0]; tab4 = ftiles[1][1]; break;
	case DT_BF16: tab1 = ftiles[2][0]; tab4 = ftiles[2][1]; break;
	case DT_Q8_0: tab1 = qtiles[0][0]; tab4 = qtiles[0][1]; break;
	case DT_Q4_0: tab1 = qtiles[1][0]; tab4 = qtiles[1][1]; break;
	case DT_Q4_K: tab1 = qtiles[2][0]; tab4 = qtiles[2][1]; break;
	case DT_Q5_K: tab1 = qtiles[3][0]; tab4 = qtiles[3][1]; break;
	case DT_Q6_K: tab1 = qtiles[4][0]; tab4 = qtiles[4][1]; break;
	default: return;
	}
	bool q = quant_uses_qact(a->wt);
	int cmax = !q ? FC : (a->wt == DT_Q8_0 || a->wt == DT_Q4_0) ? QC : QC_K;
	int64_t x_row = q ? a->lda : a->k * (int64_t)sizeof(float);
	/* a block of tokens whose activations stay in L2 while every weight row
	 * of the range passes over them */
	int64_t tb = MAX(cmax, X_BLOCK_BYTES / MAX(x_row, 1) / cmax * cmax);
	for (int64_t b0 = t0; b0 < t1; b0 += tb) {
		int64_t b1 = MIN(t1, b0 + tb);
		/* few tokens: one row at a time, so each thread reads the weights as
		 * one sequential stream (interleaved short row streams defeat the
		 * hardware prefetcher: a third of the bandwidth) */
		if (b1 - b0 <= SEQ_ROWS_MAX_TOKENS) {
			for (int64_t t = b0; t < b1;) {
				int c = (int)MIN(cmax, b1 - t);
				const tile_fn *tab = tab1;
				if (a->wt == DT_Q8_0)
					tab = q8rows;
				else if (a->wt == DT_Q4_K && a->k / 256 * c <= DEC_MAX_SB)
					tab = q4krows;
				tab[c](a, t, o0, o1);
				t += c;
			}
			continue;
		}
		for (int64_t o = o0; o < o1;) {
			bool four = o1 - o >= 4;
			bool kq = a->wt == DT_Q4_K || a->wt == DT_Q5_K || a->wt == DT_Q6_K;
			if (four && ((a->wt == DT_Q8_0 && (a->k / 64 + 1) * 8 <= PACK_VECS) ||
				     (kq && a->k / 256 * 4 * KPV <= PACK_VECS))) {
				__m512i pk[PACK_VECS];
				const ptile_fn *ptab = kq ? kptiles[a->wt == DT_Q6_K] : q8ptiles;
				(kq ? pack_k : pack_q8_0)(a, o, pk);
				for (int64_t t = b0; t < b1;) {
					int c = (int)MIN(cmax, b1 - t);
					ptab[c](a, t, o, pk);
					t += c;
				}
				o += 4;
				continue;
			}
			const tile_fn *tab = four ? tab4 : tab1;
			for (int64_t t = b0; t < b1;) {
				int c = (int)MIN(cmax, b1 - t);
				tab[c](a, t, o, o + (four ? 4 : 1));
				t += c;
			}
			o += four ? 4 : 1;
		}
	}
}

/* ---- the int8 rate ---- */

/* 12 chains of vpdpbusd (64 multiply-adds each), in registers. */
TARGET static int64_t avx512_int8_spin(int64_t n)
{
	__m512i v[12], b = _mm512_set1_epi8(1);
#pragma GCC unroll 12
	for (int i = 0; i < 12; i++)
		v[i] = _mm512_set1_epi32(i);
	for (int64_t r = 0; r < n; r++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++) {
			v[i] = _mm512_dpbusd_epi32(v[i], b, b);
			__asm__ volatile("" : "+v"(v[i])); /* in registers: see avx2_int8_spin */
		}
	return n * 12 * 64;
}

/* ---- attention ---- */

/* A head slice: unmasked when the head fills its vectors exactly. */
INL __m512 load_h(const float *p, __mmask16 m, bool full)
{
	return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

/* The lane sums of v[0..3] in lanes 0..3 (a transpose-and-add tree). */
INL __m512 reduce4(const __m512 v[4])
{
	__m512 w0 = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
	__m512 w1 = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
	__m512d a = _mm512_castps_pd(w0), b = _mm512_castps_pd(w1);
	__m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
	__m512 y = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, 0x4e));
	return _mm512_add_ps(y, _mm512_shuffle_f32x4(y, y, 0xb1));
}

/* Keys are taken in segments of up to this many positions (across KV
 * blocks), one online-softmax step per segment. */
#define ATT_SEG 256

/* Keys per chunk: every query's keys are taken in chunks of this many, each
 * from a fresh softmax state, and the chunks' states folded in order; a
 * decoding sequence's chunks can so go to different threads. A multiple of
 * ATT_SEG. */
#define ATT_CHUNK 512

/* Lanes of vector v (of 16) inside a head of hd values. */
INL __mmask16 mask_hd(int hd, int v)
{
	return 16 * v >= hd ? 0 : mask_n(hd - 16 * v);
}

/* Bytes per value of a K/V row type (kernels/kvq.h). */
INL int kv_esize(int t)
{
	return t == KV_F32 ? 4 : t == KV_F16 ? 2 : 1;
}

/* Values [16v, 16v + 16) of a head slice p of row type t, as f32, without the
 * 8-bit types' scale (applied per row by the caller, kv_scale). E4M3 through
 * f16: the 7-bit magnitude placed under f16's 5-bit exponent field (bias 15
 * against E4M3's 7) is the value times 2^-8, subnormal codes included, so
 * the hardware conversion finishes it and kv_scale carries the 2^8. */
INL __m512 load_kv(const uint8_t *p, int t, int v, __mmask16 m, bool full)
{
	if (t == KV_F32)
		return load_h((const float *)p + 16 * v, m, full);
	if (t == KV_F16) {
		const uint16_t *h = (const uint16_t *)p + 16 * v;
		return _mm512_cvtph_ps(full ? _mm256_loadu_si256((const __m256i *)h) : _mm256_maskz_loadu_epi16(m, h));
	}
	const uint8_t *b = p + 16 * v;
	__m128i x8 = full ? _mm_loadu_si128((const __m128i *)b) : _mm_maskz_loadu_epi8(m, b);
	if (t == KV_Q8)
		return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x8));
	/* sign-extended to 16 bits and shifted by 7: the magnitude lands in
	 * bits 7..13 and the sign in bits 14 and 15, of which 14 is cleared */
	__m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x8), 7), _mm256_set1_epi16(-0x4001));
	return _mm512_cvtph_ps(h);
}

/* The scale of head h in an 8-bit row (f16 values after the kv_dim bytes;
 * fp8's times the 2^8 load_kv leaves out), 1 for f32/f16 rows. */
INL float kv_scale(const uint8_t *row, int t, int64_t kv_dim, int h)
{
	if (t == KV_F32 || t == KV_F16)
		return 1.0f;
	uint16_t s;
	memcpy(&s, row + kv_dim + 2 * (int64_t)h, 2);
	return t == KV_FP8 ? _cvtsh_ss(s) * 256.0f : _cvtsh_ss(s);
}

/* The running softmax state of up to 4 queries against one KV head: the
 * row maxima, the sums, and the unnormalized outputs. */
typedef struct att_state {
	__m512 o[4][16];
	float m[4], l[4];
} att_state;

INL void att_state_init(att_state *st, const int NQ, const int NV)
{
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++) {
#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			st->o[i][v] = _mm512_setzero_ps();
		st->m[i] = -INFINITY;
		st->l[i] = 0;
	}
}

/* Folds query i's state of the next chunk of keys (m, l, o[NV]) into the
 * total t: both rescaled to the larger maximum. A chunk without keys for
 * the query (l = 0) changes nothing; the first one with keys is taken as it
 * is. Every path folds the same chunks in the same order with these
 * operations, so a query's bits do not depend on how its chunks were
 * computed (in a group, alone, or split across threads). */
INL void att_fold(att_state *t, int i, float m, float l, const __m512 *o, const int NV)
{
	if (l == 0)
		return;
	if (t->l[i] == 0) {
#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			t->o[i][v] = o[v];
		t->m[i] = m;
		t->l[i] = l;
		return;
	}
	float mx = MAX(t->m[i], m);
	__m512 at = exp16(_mm512_set1_ps(t->m[i] - mx)), ac = exp16(_mm512_set1_ps(m - mx));
	t->l[i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(t->l[i]), _mm512_castps512_ps128(at),
					     _mm_mul_ss(_mm_set_ss(l), _mm512_castps512_ps128(ac))));
	t->m[i] = mx;
#pragma GCC unroll 16
	for (int v = 0; v < NV; v++)
		t->o[i][v] = _mm512_fmadd_ps(t->o[i][v], at, _mm512_mul_ps(o[v], ac));
}

/* out + i * os = the outputs over their sums. */
INL void att_state_finish(const att_state *st, float *out, int64_t os, int hd, const int NQ, const int NV)
{
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++) {
		__m512 il = _mm512_set1_ps(1.0f / st->l[i]);
#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			_mm512_mask_storeu_ps(out + i * os + 16 * v, mask_hd(hd, v), _mm512_mul_ps(st->o[i][v], il));
	}
}

/* NQ queries of one sequence against one KV head whose slice NV vectors of
 * 16 cover (FULL: exactly), over keys [j_begin, j_end) (j_begin a multiple
 * of ATT_SEG), continuing st. Per query, in every group size: for each
 * segment of ATT_SEG positions, scores 4 keys at a time (one FMA chain per
 * key over the head, reduce4, times the scale), an online-softmax step (max,
 * exp16, running sum in 16-key vectors), then the values weighted in key
 * order, one FMA chain per output vector. The group only shares the loads of
 * K and V. */
INL void attend_span(att_state *st, const float *q, int64_t qs, const kern_attn *a,
		     const int32_t *table, const int32_t *n_ctx, int kv_head, int32_t j_begin, int32_t j_end,
		     const int NQ, const int NV, const bool FULL, const int KT, const int VT)
{
	const int hd = a->head_dim, bt = a->block_tokens;
	const int64_t kv_dim = (int64_t)a->n_kv_heads * hd, off = (int64_t)kv_head * hd;
	const uint8_t *kc = a->k, *vc = a->v;
	const int64_t koff = off * kv_esize(KT), voff = off * kv_esize(VT);
	__mmask16 mk[16];
	__m512 ov[4][16];
	float m[4], l[4], s[4][ATT_SEG + 16] __attribute__((aligned(64)));
	int64_t row[ATT_SEG];                /* the segment's K/V slots */
	int32_t max_ctx = 0;
#pragma GCC unroll 16
	for (int v = 0; v < NV; v++)
		mk[v] = 16 * v >= hd ? 0 : mask_n(hd - 16 * v);
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++) {
#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			ov[i][v] = st->o[i][v];
		m[i] = st->m[i];
		l[i] = st->l[i];
		max_ctx = MAX(max_ctx, n_ctx[i]);
	}
	max_ctx = MIN(max_ctx, j_end);
	const __m512 scale = _mm512_set1_ps(a->scale);
	for (int32_t j0 = j_begin; j0 < max_ctx; j0 += ATT_SEG) {
		int nj = (int)MIN(ATT_SEG, max_ctx - j0), nqj[4];
		for (int j = 0; j < nj;) {
			int32_t pos = j0 + j, b = pos / bt, in = pos - b * bt;
			int64_t base = (int64_t)table[b] * bt + in;
			int run = MIN(bt - in, nj - j);
			for (int r = 0; r < run; r++)
				row[j + r] = base + r;
			j += run;
		}
#pragma GCC unroll 4
		for (int i = 0; i < NQ; i++)
			nqj[i] = (int)MIN(ATT_SEG, n_ctx[i] - j0);
		/* scores, 4 keys at a time */
		for (int jc = 0; jc < nj; jc += 4) {
			__m512 acc[4][4];
			float ks[4] = {1, 1, 1, 1};
#pragma GCC unroll 4
			for (int kk = 0; kk < 4; kk++) {
				if (jc + kk >= nj) {
#pragma GCC unroll 4
					for (int i = 0; i < NQ; i++)
						acc[i][kk] = _mm512_setzero_ps();
					continue;
				}
				const uint8_t *kr = kc + row[jc + kk] * (int64_t)a->k_row;
				ks[kk] = kv_scale(kr, KT, kv_dim, kv_head);
				__m512 kv[16];
#pragma GCC unroll 16
				for (int v = 0; v < NV; v++)
					kv[v] = load_kv(kr + koff, KT, v, mk[v], FULL);
#pragma GCC unroll 4
				for (int i = 0; i < NQ; i++) {
					const float *qi = q + i * qs;
					acc[i][kk] = _mm512_mul_ps(load_h(qi, mk[0], FULL), kv[0]);
#pragma GCC unroll 16
					for (int v = 1; v < NV; v++)
						acc[i][kk] = _mm512_fmadd_ps(load_h(qi + 16 * v, mk[v], FULL), kv[v], acc[i][kk]);
				}
			}
			/* 8-bit keys: the dot products times each key's scale */
			__m512 kscale = KT == KV_F32 || KT == KV_F16
				? scale : _mm512_mul_ps(scale, _mm512_castps128_ps512(_mm_loadu_ps(ks)));
#pragma GCC unroll 4
			for (int i = 0; i < NQ; i++)
				_mm512_mask_storeu_ps(s[i] + jc, 0x000F, _mm512_mul_ps(reduce4(acc[i]), kscale));
		}
		/* online softmax, per query over its own keys of this segment */
#pragma GCC unroll 4
		for (int i = 0; i < NQ; i++) {
			if (nqj[i] <= 0)
				continue;
			__m512 bmv = _mm512_set1_ps(-INFINITY);
			for (int j = 0; j < nqj[i]; j += 16)
				bmv = _mm512_mask_max_ps(bmv, mask_n(nqj[i] - j), bmv, _mm512_loadu_ps(s[i] + j));
			float m_new = MAX(m[i], _mm512_reduce_max_ps(bmv));
			float corr = _mm512_cvtss_f32(exp16(_mm512_set1_ps(m[i] - m_new)));
			__m512 lsum = _mm512_setzero_ps();
			for (int j = 0; j < nqj[i]; j += 16) {
				__mmask16 mj = mask_n(nqj[i] - j);
				__m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s[i] + j), _mm512_set1_ps(m_new)));
				p = _mm512_maskz_mov_ps(mj, p);
				_mm512_storeu_ps(s[i] + j, p);
				lsum = _mm512_add_ps(lsum, p);
			}
			l[i] = l[i] * corr + hsum(lsum);
			m[i] = m_new;
			__m512 vc = _mm512_set1_ps(corr);
#pragma GCC unroll 16
			for (int v = 0; v < NV; v++)
				ov[i][v] = _mm512_mul_ps(ov[i][v], vc);
		}
		/* the values, in key order */
		for (int j = 0; j < nj; j++) {
			const uint8_t *vr = vc + row[j] * (int64_t)a->v_row;
			float vs = kv_scale(vr, VT, kv_dim, kv_head);
			__m512 vv[16];
#pragma GCC unroll 16
			for (int v = 0; v < NV; v++)
				vv[v] = load_kv(vr + voff, VT, v, mk[v], FULL);
#pragma GCC unroll 4
			for (int i = 0; i < NQ; i++) {
				if (j >= nqj[i])
					continue;
				/* 8-bit values: the weight times the row's scale */
				__m512 p = _mm512_set1_ps(VT == KV_F32 || VT == KV_F16 ? s[i][j] : s[i][j] * vs);
#pragma GCC unroll 16
				for (int v = 0; v < NV; v++)
					ov[i][v] = _mm512_fmadd_ps(p, vv[v], ov[i][v]);
			}
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++) {
#pragma GCC unroll 16
		for (int v = 0; v < NV; v++)
			st->o[i][v] = ov[i][v];
		st->m[i] = m[i];
		st->l[i] = l[i];
	}
}

/* NQ queries of one sequence against one KV head, all their keys: each
 * chunk of ATT_CHUNK keys from a fresh state, folded in order (att_fold). */
INL void attend_grp(float *out, int64_t os, const float *q, int64_t qs, const kern_attn *a,
		    const int32_t *table, const int32_t *n_ctx, int kv_head, const int NQ, const int NV,
		    const bool FULL, const int KT, const int VT)
{
	int32_t max_ctx = 0;
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++)
		max_ctx = MAX(max_ctx, n_ctx[i]);
	att_state t, c;
	att_state_init(&t, NQ, NV);
	for (int32_t c0 = 0; c0 < max_ctx; c0 += ATT_CHUNK) {
		att_state_init(&c, NQ, NV);
		attend_span(&c, q, qs, a, table, n_ctx, kv_head, c0, c0 + ATT_CHUNK, NQ, NV, FULL, KT, VT);
#pragma GCC unroll 4
		for (int i = 0; i < NQ; i++)
			att_fold(&t, i, c.m[i], c.l[i], c.o[i], NV);
	}
	att_state_finish(&t, out, os, a->head_dim, NQ, NV);
}

/* One query (a decoding sequence with n_ctx positions) in every head: the
 * state of chunk c (keys [c * ATT_CHUNK, +ATT_CHUNK)) per query head h at
 * res + h * (head_dim + 2): m, l, then the unnormalized output. Segment by
 * segment, the rows are read whole (cpu_touch_rows), then every head takes
 * its slice of them. */
INL void attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
		      int c, const int NV, const bool FULL, const int KT, const int VT)
{
	const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, H = a->n_heads;
	const int32_t c0 = c * ATT_CHUNK, c1 = MIN(n_ctx, c0 + ATT_CHUNK);
	att_state st;
	for (int32_t j0 = c0; j0 < c1; j0 += ATT_SEG) {
		cpu_touch_rows(a, table, j0, MIN(c1, j0 + ATT_SEG));
		for (int h = 0; h < H; h++) {
			float *r = res + (int64_t)h * (hd + 2);
			if (j0 == c0) {
				att_state_init(&st, 1, NV);
			} else {
				st.m[0] = r[0];
				st.l[0] = r[1];
#pragma GCC unroll 16
				for (int v = 0; v < NV; v++)
					st.o[0][v] = _mm512_maskz_loadu_ps(mask_hd(hd, v), r + 2 + 16 * v);
			}
			attend_span(&st, q + (int64_t)h * hd, hd, a, table, &n_ctx, h / group, j0, j0 + ATT_SEG, 1, NV,
				    FULL, KT, VT);
			r[0] = st.m[0];
			r[1] = st.l[0];
#pragma GCC unroll 16
			for (int v = 0; v < NV; v++)
				_mm512_mask_storeu_ps(r + 2 + 16 * v, mask_hd(hd, v), st.o[0][v]);
		}
	}
}

/* The chunks' states (attend_chunk) folded in order, per head, into out. */
INL void attend_fold_chunks(float *out, const float *res, int n_chunks, const kern_attn *a, const int NV)
{
	const int hd = a->head_dim, H = a->n_heads;
	for (int h = 0; h < H; h++) {
		att_state t;
		att_state_init(&t, 1, NV);
		for (int c = 0; c < n_chunks; c++) {
			const float *r = res + ((int64_t)c * H + h) * (hd + 2);
			__m512 o[16];
#pragma GCC unroll 16
			for (int v = 0; v < NV; v++)
				o[v] = _mm512_maskz_loadu_ps(mask_hd(hd, v), r + 2 + 16 * v);
			att_fold(&t, 0, r[0], r[1], o, NV);
		}
		att_state_finish(&t, out + (int64_t)h * hd, hd, hd, 1, NV);
	}
}


typedef void (*attn_fn)(float *out, int64_t os, const float *q, int64_t qs, const kern_attn *a,
			const int32_t *table, const int32_t *n_ctx, int kv_head);

/* f32 K/V, with the types folded away; and typed K/V (f16, q8, fp8 and
 * mixes: the types are loop-invariant run-time values), for heads that
 * fill their vectors. */
#define ATT(NQ, NV, F) NOINL void att_##NQ##_##NV##_##F(float *out, int64_t os, const float *q, int64_t qs, \
	const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head) \
	{ attend_grp(out, os, q, qs, a, table, n_ctx, kv_head, NQ, NV, F, KV_F32, KV_F32); } \
	NOINL void attt_##NQ##_##NV##_##F(float *out, int64_t os, const float *q, int64_t qs, \
	const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head) \
	{ attend_grp(out, os, q, qs, a, table, n_ctx, kv_head, NQ, NV, F, a->k_type, a->v_type); }
#define ATT_NV(NV, F) ATT(1, NV, F) ATT(2, NV, F) ATT(3, NV, F) ATT(4, NV, F)
ATT_NV(1, 0) ATT_NV(1, 1) ATT_NV(2, 0) ATT_NV(2, 1) ATT_NV(4, 0) ATT_NV(4, 1)
ATT(1, 8, 0) ATT(2, 8, 0) ATT(1, 8, 1) ATT(2, 8, 1) ATT(1, 16, 0) ATT(1, 16, 1)
#define ATT_ROW(P, NV, F) {P##_1_##NV##_##F, P##_2_##NV##_##F, P##_3_##NV##_##F, P##_4_##NV##_##F}

/* A decoding sequence's attention in chunks (attend_chunk, then
 * attend_fold_chunks), by head size: [typed][vectors: 1, 2, 4, 8, 16][full]. */
typedef void (*chunk_fn)(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
			 int c);
typedef void (*fold_fn)(float *out, const float *res, int n_chunks, const kern_attn *a);
#define ATC(NV, F) NOINL void atc_##NV##_##F(float *res, const float *q, const kern_attn *a, \
	const int32_t *table, int32_t n_ctx, int c) \
	{ attend_chunk(res, q, a, table, n_ctx, c, NV, F, KV_F32, KV_F32); } \
	NOINL void atct_##NV##_##F(float *res, const float *q, const kern_attn *a, \
	const int32_t *table, int32_t n_ctx, int c) \
	{ attend_chunk(res, q, a, table, n_ctx, c, NV, F, a->k_type, a->v_type); }
ATC(1, 0) ATC(1, 1) ATC(2, 0) ATC(2, 1) ATC(4, 0) ATC(4, 1) ATC(8, 0) ATC(8, 1) ATC(16, 0) ATC(16, 1)
#define ATF(NV) NOINL void atf_##NV(float *out, const float *res, int n_chunks, const kern_attn *a) \
	{ attend_fold_chunks(out, res, n_chunks, a, NV); }
ATF(1) ATF(2) ATF(4) ATF(8) ATF(16)
static const chunk_fn att_chunks[2][5][2] = {
	{{atc_1_0, atc_1_1}, {atc_2_0, atc_2_1}, {atc_4_0, atc_4_1}, {atc_8_0, atc_8_1}, {atc_16_0, atc_16_1}},
	{{atct_1_0, atct_1_1}, {atct_2_0, atct_2_1}, {atct_4_0, atct_4_1}, {atct_8_0, atct_8_1}, {atct_16_0, atct_16_1}},
};
static const fold_fn att_folds[5] = {atf_1, atf_2, atf_4, atf_8, atf_16};

INL int att_row_of(int hd)
{
	int nv = (hd + 15) / 16;
	return nv <= 1 ? 0 : nv <= 2 ? 1 : nv <= 4 ? 2 : nv <= 8 ? 3 : 4;
}

static int avx512_attend_chunk_keys(const kern_attn *a)
{
	return a->head_dim > KERN_MAX_HEAD_DIM ? 0 : ATT_CHUNK;
}

TARGET static void avx512_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table,
				int32_t n_ctx, int c)
{
	int row = att_row_of(a->head_dim);
	att_chunks[a->k_type != KV_F32 || a->v_type != KV_F32][row][a->head_dim == 16 << row](res, q, a, table,
											    n_ctx, c);
}

TARGET static void avx512_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a)
{
	att_folds[att_row_of(a->head_dim)](out, res, n_chunks, a);
}

/* [typed][vectors: 1, 2, 4][full][group size - 1] */
static const attn_fn att_small[2][3][2][4] = {
	{{ATT_ROW(att, 1, 0), ATT_ROW(att, 1, 1)}, {ATT_ROW(att, 2, 0), ATT_ROW(att, 2, 1)},
	 {ATT_ROW(att, 4, 0), ATT_ROW(att, 4, 1)}},
	{{ATT_ROW(attt, 1, 0), ATT_ROW(attt, 1, 1)}, {ATT_ROW(attt, 2, 0), ATT_ROW(attt, 2, 1)},
	 {ATT_ROW(attt, 4, 0), ATT_ROW(attt, 4, 1)}},
};

static void avx512_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
			  const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head)
{
	int hd = a->head_dim, nv = (hd + 15) / 16;
	bool typed = a->k_type != KV_F32 || a->v_type != KV_F32;
	if (hd > KERN_MAX_HEAD_DIM) { /* beyond the register tiles: the portable code */
		(typed ? cpu_attend_typed : cpu_kernels_scalar()->attend)(out, out_stride, q, q_stride, nq, a, table,
									n_ctx, kv_head);
		return;
	}
	while (nq > 0) {
		int g;
		attn_fn f;
		if (nv <= 4) {
			int row = nv <= 1 ? 0 : nv <= 2 ? 1 : 2, vecs = 1 << row;
			g = MIN(nq, 4);
			f = att_small[typed][row][hd == 16 * vecs][g - 1];
		} else if (nv <= 8) {
			bool full = hd == 128;
			g = MIN(nq, 2);
			if (typed)
				f = g == 2 ? (full ? attt_2_8_1 : attt_2_8_0) : (full ? attt_1_8_1 : attt_1_8_0);
			else
				f = g == 2 ? (full ? att_2_8_1 : att_2_8_0) : (full ? att_1_8_1 : att_1_8_0);
		} else {
			g = 1;
			f = typed ? (hd == 256 ? attt_1_16_1 : attt_1_16_0) : (hd == 256 ? att_1_16_1 : att_1_16_0);
		}
		f(out, out_stride, q, q_stride, a, table, n_ctx, kv_head);
		out += g * out_stride;
		q += g * q_stride;
		n_ctx += g;
		nq -= g;
	}
}

/* ---- element-wise ---- */

TARGET static void avx512_silu_mul(float *g, const float *u, int64_t n)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = mask_n(n - i);
		__m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
		__m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
		__m512 r = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), uv);
		_mm512_mask_storeu_ps(g + i, m, r);
	}
}

/* kv_fp8_sse in 16 lanes: the same operations per element (no fused
 * multiply-add) and the same reduction tree (hsum), so the same bits. */
TARGET static float avx512_fp8_sse(const float *x, int n, float s)
{
	const __m512 inv = _mm512_set1_ps(1.0f / s), sv = _mm512_set1_ps(s), big = _mm512_set1_ps(0x1p23f);
	const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
	__m512 acc = _mm512_setzero_ps();
	for (int i = 0; i < n; i += 16) {
		__m512 a = _mm512_castsi512_ps(_mm512_and_si512(
			_mm512_castps_si512(_mm512_maskz_loadu_ps(mask_n(n - i), x + i)), absmask));
		__m512 t = _mm512_min_ps(_mm512_mul_ps(a, inv), _mm512_set1_ps(448.0f));
		__m512 sub = _mm512_mul_ps(_mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(t, _mm512_set1_ps(512.0f)), big), big),
					   _mm512_set1_ps(1.0f / 512));
		__m512i u = _mm512_castps_si512(t);
		u = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7ffff)),
				     _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1)));
		__m512 nrm = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(~0xfffff)));
		__m512 g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, _mm512_set1_ps(1.0f / 64), _CMP_LT_OQ), nrm, sub);
		__m512 d = _mm512_sub_ps(a, _mm512_mul_ps(sv, g));
		acc = _mm512_add_ps(acc, _mm512_mul_ps(d, d));
	}
	return hsum(acc);
}

/* ---- the AVX2 set's packed weights ----
 *
 * For q4_K, q6_K and q8_0 weights the AVX2 set's packed layout and its
 * kernels (grouped prompt tiles, on 512-bit vpdpbusd where VNNI is; one
 * packed stream per thread when decoding) are faster than this set's on the
 * same machine: on a 2-core AVX-512 Xeon VM, 8B Q4_K_M, single runs of
 * `pagechat bench -p 64 -n 8`, prompt 27.2 against 18.6 t/s and decoding
 * 3.78 against 2.95 t/s. So this set packs those types the AVX2 way and
 * hands every matmul on them, packed or as stored, to the AVX2 set (whose
 * bits are the same either way), with the AVX2 set's activation rows for
 * every type (their qact part is every set's, the rest the AVX2 set's).
 * avx2 is set once, in cpu_kernels_avx512, which offers this set only with
 * it. The formats of kernels/cpu/avx2_qx.c (q4_1, q5_0, q5_1, iq4_nl, q2_K,
 * q3_K, iq4_xs, q5_K) go the same way: their VNNI kernels are there. */
static const cpu_kernels *avx2;

static bool avx512_packs(enum dtype t)
{
	return t == DT_Q4_K || t == DT_Q6_K || t == DT_Q8_0 || qx_takes(t);
}

static int64_t avx512_pack_bytes(enum dtype t, int64_t k, int64_t n_out)
{
	return avx512_packs(t) ? avx2->pack_bytes(t, k, n_out) : 0;
}

static void avx512_matmul_mixed(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	(avx512_packs(a->wt) ? avx2->matmul : avx512_matmul)(a, t0, t1, o0, o1);
}

static void avx512_quantize_act_avx2(enum dtype wt, const float *x, void *dst, int64_t k)
{
	avx2->quantize_act(wt, x, dst, k);
}

static int64_t avx512_act_row_bytes(enum dtype wt, int64_t k)
{
	return avx2->act_row_bytes(wt, k);
}

static void avx512_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0,
			int64_t o1)
{
	avx2->pack(dst, w, t, k, n_out, o0, o1);
}

static const cpu_kernels avx512_kernels = {
	.name = "avx512",
	.matmul = avx512_matmul_mixed,
	.quantize_act = avx512_quantize_act_avx2,
	.act_row_bytes = avx512_act_row_bytes,
	.pack_bytes = avx512_pack_bytes,
	.pack = avx512_pack,
	.int8_spin = avx512_int8_spin,
	.attend = avx512_attend,
	.attend_typed = true,
	.attend_chunk_keys = avx512_attend_chunk_keys,
	.attend_chunk = avx512_attend_chunk,
	.attend_fold = avx512_attend_fold,
	.fp8_sse = avx512_fp8_sse,
	.silu_mul = avx512_silu_mul,
};

const cpu_kernels *cpu_kernels_avx512(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("avx2") && (avx2 || (avx2 = cpu_kernels_avx2())))
		return &avx512_kernels;
	return NULL;
}

#else

const cpu_kernels *cpu_kernels_avx512(void)
{
	return NULL;
}

#endif
