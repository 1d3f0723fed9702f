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
#include "kernels/cpu/avx512_int.h"
#include "kernels/cpu/avx2_qx.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* Token blocks this small are computed one weight row at a time. */
#define SEQ_ROWS_MAX_TOKENS 4

/* Bytes of activations (per token) a block of tokens may keep in L2. */
#define X_BLOCK_BYTES (768 * 1024)

/* ---- helpers ---- */

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

/* The outputs of a tile of R weight rows x C tokens from its accumulators
 * acc[r][c] (NC a row): each one's lanes summed by hsum's tree, four rows
 * at a time by hsum4_store (the same bits). */
INL void tile_store(const mm_args *a, int64_t t0, int64_t o0, const int R, const int C, const int NC,
		    __m512 acc[][NC])
{
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
	tile_store(a, t0, o0, R, C, FC, acc);
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
	tile_store(a, t0, o0, R, C, QC, acc);
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
	tile_store(a, t0, o0, R, C, QC, acc);
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
 * broadcast straight into their halves. (The activation terms are made per
 * row as in the tiles: made once per call, they ran faster in cache but
 * slower inside a forward pass.) */
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
		 * hardware prefetcher) */
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
 * same machine, for prompts and for decoding. So this set packs those types the AVX2 way and
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
