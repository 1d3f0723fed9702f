/* kernels/cpu/avx2.c: the AVX2 + FMA kernel set (with F16C): its entry
 * points, float weights, decoding on stored rows, the activations, and which
 * route takes a matmul.
 *
 * Float weights: dot-product tiles whose every output is one accumulation
 * chain in a fixed order, summed across lanes at the end by one fixed
 * reduction; tails run the bodies' arithmetic on zero-padded copies.
 * Quantized weights meet int8 activations with the scalar set's arithmetic
 * (exact integer sums per block, then its f32 chain), so every route gives
 * the scalar set's bits: stored rows one at a time for decoding (here),
 * groups of 8 rows interleaved (lanes are rows) for prompts (avx2_group.c)
 * and for decoding on the layout the set packs weights into at load
 * (avx2_pack.c). Where the CPU has AVX-512 VNNI, prompts on q8_0, q4_K and
 * q6_K take 512-bit vpdpbusd tiles over pairs of groups, q8_0 decoding too,
 * and q4_K and q6_K decoding 256-bit ones (avx2_vnni.c: same integers, same
 * f32 steps, same bits; the AVX-512 set hands these types to this set). The
 * formats q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, iq4_xs, and q5_K once packed, are
 * kernels/cpu/avx2_qx.c's: this table's entries hand them on. Attention is
 * in avx2_attn.c; what the files share, in avx2_int.h. */
#include "kernels/cpu/avx2_int.h"
#include "kernels/cpu/avx2_qx.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* Bytes of f32 activations a block of tokens keeps in L2. */
#define FX_BLOCK_BYTES (256 * 1024)
/* Tokens up to which packed weights are read by the decoding tiles rather
 * than expanded for the prompt tiles: a batch of decoding sequences reads
 * each group once for all of them, where an expansion per token block
 * would cost more than it saves (batches of 8 and 16 ran faster this way
 * than with the limit at ROWS_MAX_TOKENS). */
#define DECODE_MAX_TOKENS 16
/* The same for q8_0 and q4_K where AVX-512 VNNI is: their decoding tiles
 * of DEC_TC tokens (avx2_vnni.c) outran the prompt tiles at 32 and 64
 * tokens too (bench_matvec --tokens; figures in docs/performance.md). */
#define DECODE_MAX_TOKENS_VNNI 64

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

/* f32/f16/bf16 weights: token blocks whose activations stay in L2; few
 * tokens take one weight row at a time (one sequential stream per thread:
 * interleaved short row streams defeat the hardware prefetcher). */
TARGET static void float_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	const tile_fn (*tab)[FC + 1] = ftiles[a->wt == DT_F32 ? 0 : a->wt == DT_F16 ? 1 : 2];
	int64_t tb = MAX(FC, FX_BLOCK_BYTES / MAX(a->k * (int64_t)sizeof(float), 1) / FC * FC);
	for (int64_t b0 = t0; b0 < t1; b0 += tb) {
		int64_t b1 = MIN(t1, b0 + tb);
		bool rows4 = b1 - b0 > ROWS_MAX_TOKENS;
		for (int64_t o = o0; o < o1;) {
			bool four = rows4 && o1 - o >= 4;
			int64_t oe = rows4 ? o + (four ? 4 : 1) : o1;
			for (int64_t t = b0; t < b1;) {
				int c = (int)MIN(FC, b1 - t);
				tab[four][c](a, t, o, oe);
				t += c;
			}
			o = oe;
		}
	}
}

/* ---- quantized weights against quantized activations ----
 *
 * Every output is the scalar set's chain (quant_dot_qact), operation for
 * operation: per block (q8_0, q4_0: 32 values; k-quants: a 256-value
 * super-block) in order, acc = acc + (dw * dx) * (float)isum, and for the
 * k-quants with mins acc = acc + ((d * dx) * isum - (dmin * dx) * msum),
 * with separate multiplies and adds (no FMA: the build's -std=c11 keeps
 * them apart) and isum, msum exact integer sums. Integer sums do not depend
 * on how they are formed, so every route below gives the scalar set's bits:
 *  - decoding (at most ROWS_MAX_TOKENS tokens) takes one weight row at a time
 *    in its stored layout (one sequential stream per thread): integer sums
 *    across lanes, reduced per block, then the chain;
 *  - prompts (avx2_group.c) expand each group of 8 weight rows, a k-chunk
 *    at a time, into vectors that hold 4 consecutive values of each of the 8
 *    rows (lanes are rows), once per token block, and tiles of tokens run
 *    over them: a broadcast of 4 activation bytes meets 8 rows per
 *    vpmaddubsw, the 16-bit products of a whole sub-block are summed before
 *    one vpmaddwd applies its scales (q4_K: 8 vectors, q6_K: 2; their sums
 *    cannot overflow), and q8_0 multiplies 16-bit values (vpmaddwd) against
 *    the activations' 16-bit copy;
 *  - decoding on packed weights (avx2_pack.c) runs the same kind of tiles
 *    straight over the packed groups.
 * Activation rows carry, after the qact part (act_row_bytes): q8_0 the values
 * as int16, q4_K and q5_K the sums of each 32 values. */

INL int hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* [sum of v[0], ..., sum of v[7]]: the lane totals of 8 vectors. */
INL __m256i sums8(const __m256i v[8])
{
	__m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
	__m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
	return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* acc + t[0] + t[1] + ... + t[n - 1], in that order (the scalar chain). */
INL float add_lanes(float acc, __m256 t, int n)
{
	if (n < 8) {
		float v[8];
		_mm256_storeu_ps(v, t);
		for (int i = 0; i < n; i++)
			acc = acc + v[i];
		return acc;
	}
	__m128 lo = _mm256_castps256_ps128(t), hi = _mm256_extractf128_ps(t, 1), a = _mm_set_ss(acc);
	a = _mm_add_ss(a, lo);
	a = _mm_add_ss(a, _mm_movehdup_ps(lo));
	a = _mm_add_ss(a, _mm_movehl_ps(lo, lo));
	a = _mm_add_ss(a, _mm_shuffle_ps(lo, lo, 3));
	a = _mm_add_ss(a, hi);
	a = _mm_add_ss(a, _mm_movehdup_ps(hi));
	a = _mm_add_ss(a, _mm_movehl_ps(hi, hi));
	a = _mm_add_ss(a, _mm_shuffle_ps(hi, hi, 3));
	return _mm_cvtss_f32(a);
}

/* acc + the lanes of isum times their block scales, the scalar way. */
INL float chain8(float acc, __m256 dw, __m256 dx, __m256i isum, int n)
{
	return add_lanes(acc, _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum)), n);
}

/* ---- decoding: one weight row at a time ---- */

INL int ld16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, 2);
	return v;
}

/* The f16 scales of 8 consecutive blocks of bytes bb from p (n of them, the
 * rest 0), as f32. */
INL __m256 scales8(const uint8_t *p, int64_t bb, int n)
{
	if (n < 8) {
		uint16_t h[8] = {0};
		for (int i = 0; i < n; i++)
			memcpy(&h[i], p + i * bb, 2);
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
	}
	__m128i h = _mm_cvtsi32_si128(ld16(p));
	h = _mm_insert_epi16(h, ld16(p + bb), 1);
	h = _mm_insert_epi16(h, ld16(p + 2 * bb), 2);
	h = _mm_insert_epi16(h, ld16(p + 3 * bb), 3);
	h = _mm_insert_epi16(h, ld16(p + 4 * bb), 4);
	h = _mm_insert_epi16(h, ld16(p + 5 * bb), 5);
	h = _mm_insert_epi16(h, ld16(p + 6 * bb), 6);
	h = _mm_insert_epi16(h, ld16(p + 7 * bb), 7);
	return _mm256_cvtph_ps(h);
}

/* q8_0 and q4_0, C tokens (1..ROWS_MAX_TOKENS), rows [o0, o1): per 8 blocks,
 * each block's integer sum (q8_0: 16-bit weights against the 16-bit
 * activations; q4_0: bytes 0..15 against the int8 ones, plus 8 times the
 * negated activation sum), then the chain over the 8. */
INL void q32_rows(const mm_args *a, int64_t t0, int64_t o0, int64_t o1, const int C, const enum dtype wt)
{
	const int64_t nb = a->k / 32, bb = dtype_block_bytes(wt);
	qact_view xa[ROWS_MAX_TOKENS];
	const int16_t *x16[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		xa[c] = qact_view_of(wt, a->qa + (t0 + c) * a->lda, a->k);
		x16[c] = (const int16_t *)act_ext(a, t0 + c);
	}
	const __m256i one16 = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(15);
	for (int64_t o = o0; o < o1; o++) {
		const uint8_t *row = a->w + o * a->ldw;
		float acc[ROWS_MAX_TOKENS] = {0};
		for (int64_t b0 = 0; b0 < nb; b0 += 8) {
			int n = (int)MIN(8, nb - b0);
			__m256 dw = scales8(row + b0 * bb, bb, n);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m256i v[8];
#pragma GCC unroll 8
				for (int j = 0; j < 8; j++) {
					if (j >= n) {
						v[j] = _mm256_setzero_si256();
					} else if (wt == DT_Q8_0) {
						const blk_q8_0 *b = (const blk_q8_0 *)row + b0 + j;
						const int16_t *xs = x16[c] + 32 * (b0 + j);
						__m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->qs));
						__m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16)));
						v[j] = _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256((const __m256i *)xs)),
									_mm256_madd_epi16(hi, _mm256_loadu_si256((const __m256i *)(xs + 16))));
					} else {
						const blk_q4_0 *b = (const blk_q4_0 *)row + b0 + j;
						__m128i q = _mm_loadu_si128((const __m128i *)b->qs);
						__m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4);
						__m256i x = _mm256_loadu_si256((const __m256i *)(xa[c].q + 32 * (b0 + j)));
						v[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), one16);
					}
				}
				__m256i s = sums8(v);
				if (wt == DT_Q4_0) /* (q - 8) x: q x - 8 * sum(x), ns = -sum(x) */
					s = _mm256_add_epi32(s, _mm256_slli_epi32(_mm256_maskload_epi32(xa[c].ns + b0, mask8(n)), 3));
				acc[c] = chain8(acc[c], dw, _mm256_maskload_ps(xa[c].d + b0, mask8(n)), s, n);
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o] = acc[c];
	}
}

/* Byte-shuffle control giving word i of each 128-bit lane in every word of
 * lane 0, word j in every word of lane 1. */
INL __m256i wsel(int i, int j)
{
	return _mm256_setr_epi8((char)(2 * i), (char)(2 * i + 1), (char)(2 * i), (char)(2 * i + 1), (char)(2 * i),
				(char)(2 * i + 1), (char)(2 * i), (char)(2 * i + 1), (char)(2 * i), (char)(2 * i + 1),
				(char)(2 * i), (char)(2 * i + 1), (char)(2 * i), (char)(2 * i + 1), (char)(2 * i),
				(char)(2 * i + 1), (char)(2 * j), (char)(2 * j + 1), (char)(2 * j), (char)(2 * j + 1),
				(char)(2 * j), (char)(2 * j + 1), (char)(2 * j), (char)(2 * j + 1), (char)(2 * j),
				(char)(2 * j + 1), (char)(2 * j), (char)(2 * j + 1), (char)(2 * j), (char)(2 * j + 1),
				(char)(2 * j), (char)(2 * j + 1));
}

/* q4_K and q5_K, C tokens, rows [o0, o1): per super-block, 32-byte loads of
 * packed values give sub-blocks 2c (low nibbles) and 2c + 1 (high), each
 * against its 32 activations and its scale; the mins meet the 16-value sums. */
INL void k4_rows(const mm_args *a, int64_t t0, int64_t o0, int64_t o1, const int C, const enum dtype wt)
{
	const int64_t nsb = a->k / 256, bb = dtype_block_bytes(wt);
	qact_view xa[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(wt, a->qa + (t0 + c) * a->lda, a->k);
	const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
	const __m256i mdup = _mm256_setr_epi8(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7,
					      8, 9, 8, 9, 10, 11, 10, 11, 12, 13, 12, 13, 14, 15, 14, 15);
	for (int64_t o = o0; o < o1; o++) {
		const uint8_t *row = a->w + o * a->ldw;
		float acc[ROWS_MAX_TOKENS] = {0};
		for (int64_t sb = 0; sb < nsb; sb++) {
			const uint8_t *blk = row + sb * bb;
			const uint8_t *qs = wt == DT_Q4_K ? ((const blk_q4_k *)blk)->qs : ((const blk_q5_k *)blk)->qs;
			__m128 dd;
			__m256i sm = _mm256_cvtepu8_epi16(k_header(blk, &dd));
			__m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);          /* scales in both lanes */
			__m256i mins = _mm256_shuffle_epi8(_mm256_permute2x128_si256(sm, sm, 0x11), mdup);
			__m256i qh = wt == DT_Q5_K ? _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)blk)->qh)
						   : _mm256_setzero_si256();
			__m256i isum[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int p = 0; p < 4; p++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
				__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
				if (wt == DT_Q5_K) {
					__m256i hl = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one);
					__m256i hh = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one);
					lo = _mm256_or_si256(lo, _mm256_slli_epi16(hl, 4));
					hi = _mm256_or_si256(hi, _mm256_slli_epi16(hh, 4));
				}
				__m256i slo = _mm256_shuffle_epi8(sc, wsel(2 * p, 2 * p));
				__m256i shi = _mm256_shuffle_epi8(sc, wsel(2 * p + 1, 2 * p + 1));
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t *x = xa[c].q + 256 * sb + 64 * p;
					__m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)x));
					__m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 32)));
					isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pl, slo),
											   _mm256_madd_epi16(ph, shi)));
				}
			}
			float d = _mm_cvtss_f32(dd), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dd));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m256i bs = _mm256_loadu_si256((const __m256i *)(xa[c].bs + 16 * sb));
				float dx = xa[c].d[sb];
				float fi = (float)hsum_i32(isum[c]), fm = (float)hsum_i32(_mm256_madd_epi16(bs, mins));
				acc[c] = acc[c] + (d * dx * fi - dmin * dx * fm);
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o] = acc[c];
	}
}

/* q6_K, C tokens, rows [o0, o1): per half of a super-block, the four
 * 32-value quarters from two low-nibble loads and one of high bits; each
 * quarter spans two 16-value sub-blocks, one per 128-bit lane, whose scales
 * vpmaddwd applies; the -32 offset through the 16-value sums. */
INL void k6_rows(const mm_args *a, int64_t t0, int64_t o0, int64_t o1, const int C)
{
	const int64_t nsb = a->k / 256;
	qact_view xa[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		xa[c] = qact_view_of(DT_Q6_K, a->qa + (t0 + c) * a->lda, a->k);
	const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	for (int64_t o = o0; o < o1; o++) {
		const blk_q6_k *row = (const blk_q6_k *)(a->w + o * a->ldw);
		float acc[ROWS_MAX_TOKENS] = {0};
		for (int64_t sb = 0; sb < nsb; sb++) {
			const blk_q6_k *b = row + sb;
			__m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
			__m256i isum[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
			for (int h = 0; h < 2; h++) {
				__m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
				__m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
				__m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
				__m256i s8 = _mm256_permute2x128_si256(sc, sc, h ? 0x11 : 0x00);
				__m256i w[4] = {
					_mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
					_mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
					_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
							_mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
				};
#pragma GCC unroll 4
				for (int q = 0; q < 4; q++) {
					__m256i sv = _mm256_shuffle_epi8(s8, wsel(2 * q, 2 * q + 1));
#pragma GCC unroll 4
					for (int c = 0; c < C; c++) {
						__m256i x = _mm256_loadu_si256((const __m256i *)(xa[c].q + 256 * sb + 128 * h + 32 * q));
						isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(w[q], x), sv));
					}
				}
			}
			float d = _cvtsh_ss(b->d);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m256i bs = _mm256_loadu_si256((const __m256i *)(xa[c].bs + 16 * sb));
				__m256i s = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(_mm256_madd_epi16(bs, sc), 5));
				acc[c] = acc[c] + d * xa[c].d[sb] * (float)hsum_i32(s);
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			a->y[(t0 + c) * a->ldy + o] = acc[c];
	}
}

#define QR(N, E) NOINL void qr_##N##_1(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) { E(1); } \
	NOINL void qr_##N##_2(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) { E(2); } \
	NOINL void qr_##N##_3(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) { E(3); } \
	NOINL void qr_##N##_4(const mm_args *a, int64_t t0, int64_t o0, int64_t o1) { E(4); }
#define E_Q8(C) q32_rows(a, t0, o0, o1, C, DT_Q8_0)
#define E_Q40(C) q32_rows(a, t0, o0, o1, C, DT_Q4_0)
#define E_Q4K(C) k4_rows(a, t0, o0, o1, C, DT_Q4_K)
#define E_Q5K(C) k4_rows(a, t0, o0, o1, C, DT_Q5_K)
#define E_Q6K(C) k6_rows(a, t0, o0, o1, C)
QR(q8, E_Q8) QR(q40, E_Q40) QR(q4k, E_Q4K) QR(q5k, E_Q5K) QR(q6k, E_Q6K)
#define QR_TAB(N) {NULL, qr_##N##_1, qr_##N##_2, qr_##N##_3, qr_##N##_4}

/* ---- which route takes a matmul ---- */

/* Activation bytes (per token and chunk) a token block keeps in L2. */
#define X_BLOCK_BYTES (256 * 1024)

/* Lanes [lo, hi) of 8. */
INL __m256i lanes(int lo, int hi)
{
	__m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}

static bool has_vnni, cpu_vnni, vnni_probed;

/* Once, before any matmul (cpu_kernels_avx2, or a test's cpu_vnni_routes):
 * the prompt route and the decoding prefetch distances (pf_*). */
static void vnni_probe(void)
{
	if (!vnni_probed) {
		vnni_probed = true;
		has_vnni = cpu_vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
				      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
				      __builtin_cpu_supports("avx512dq");
		avx2_prefetch_tune();
	}
}

bool cpu_vnni_routes(int on)
{
	vnni_probe();
	if (on >= 0)
		has_vnni = on && cpu_vnni;
	return has_vnni;
}

/* Prompts (more than ROWS_MAX_TOKENS tokens) on q8_0/q4_K/q6_K weights:
 * token blocks whose activations (for one k-chunk) stay in L2; per block and
 * chunk, the rows of [o0, o1) are expanded two groups of 8 at a time and the
 * block's tiles run over them, each output's chain going on from the last
 * chunk. */
TARGET static void group_matmul(const mm_args *a, const gplan *p, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	uint8_t e[2][EXP_BYTES] __attribute__((aligned(64)));
	const int64_t nb = a->k / (a->wt == DT_Q8_0 ? 32 : 256);
	int64_t tb = MAX(p->tc[0], X_BLOCK_BYTES / (p->x_bytes * p->chunk_blocks) / p->tc[0] * p->tc[0]);
	for (int64_t b0 = t0; b0 < t1; b0 += tb) {
		int64_t b1 = MIN(t1, b0 + tb);
		for (int64_t c0 = 0; c0 < nb; c0 += p->chunk_blocks) {
			gtile g = {.e = {e[0], p->paired ? e[0] + 32 : e[1]}, .b0 = c0, .nb = MIN(p->chunk_blocks, nb - c0),
				   .first = c0 == 0};
			for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += 2 * GR) {
				int R = row0 + GR < o1 ? 2 : 1;
				g.row0 = row0;
				for (int r = 0; r < R; r++) {
					int64_t base = row0 + GR * r;
					g.keep[r] = lanes((int)(MAX(o0, base) - base), (int)(MIN(o1, base + GR) - base));
					g.full[r] = base >= o0 && base + GR <= o1;
					(a->pw ? p->expand_packed : p->expand)((uint8_t *)g.e[r], a, base, o0, o1, g.b0, g.nb);
				}
				for (int64_t t = b0; t < b1;) {
					int c = (int)MIN(p->tc[R - 1], b1 - t);
					p->tiles[R - 1][c](a, &g, t);
					t += c;
				}
			}
		}
	}
}

/* Decoding (at most DECODE_MAX_TOKENS tokens, or DECODE_MAX_TOKENS_VNNI) on
 * packed weights: group after group of [o0, o1), one sequential stream per
 * thread; a group's tiles of up to tc tokens run one after another while
 * its bytes (8 rows, 64 KiB at k = 14336) are still in L2, so the weights
 * leave memory once for all the batch's sequences and no expansion is paid
 * for a few tokens. */
TARGET static void packed_decode(const mm_args *a, const gtile_fn *tiles, int tc, int64_t t0, int64_t t1,
				 int64_t o0, int64_t o1)
{
	gtile g = {.b0 = 0, .nb = a->k / dtype_block_elems(a->wt), .first = true};
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR) {
		g.row0 = row0;
		g.e[0] = pk_group(a, row0, 0);
		g.keep[0] = lanes((int)(MAX(o0, row0) - row0), (int)(MIN(o1, row0 + GR) - row0));
		g.full[0] = row0 >= o0 && row0 + GR <= o1;
		for (int64_t t = t0; t < t1;) {
			int c = (int)MIN(tc, t1 - t);
			tiles[c](a, &g, t);
			t += c;
		}
	}
}

/* packed_decode over pairs of groups: tiles2 over both where the range
 * has a second group, tiles1 over the last one alone. */
TARGET static void packed_decode2(const mm_args *a, const gtile_fn *tiles2, const gtile_fn *tiles1, int tc,
				  int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	gtile g = {.b0 = 0, .nb = a->k / dtype_block_elems(a->wt), .first = true};
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += 2 * GR) {
		int R = row0 + GR < o1 ? 2 : 1;
		g.row0 = row0;
		for (int r = 0; r < R; r++) {
			int64_t base = row0 + GR * r;
			g.e[r] = pk_group(a, base, 0);
			g.keep[r] = lanes((int)(MAX(o0, base) - base), (int)(MIN(o1, base + GR) - base));
			g.full[r] = base >= o0 && base + GR <= o1;
		}
		for (int64_t t = t0; t < t1;) {
			int c = (int)MIN(tc, t1 - t);
			(R == 2 ? tiles2 : tiles1)[c](a, &g, t);
			t += c;
		}
	}
}

static const tile_fn qrows[5][ROWS_MAX_TOKENS + 1] = {
	QR_TAB(q8), QR_TAB(q40), QR_TAB(q4k), QR_TAB(q5k), QR_TAB(q6k),
};

static const gplan gplans[3] = {
	{expand_q8, expand_pq8, gt_q8, {TC_Q8, TC2_Q8}, CHUNK_Q8 / 32, 32 * 3 + 4, false},
	{expand_k4, expand_pk4, gt_k4, {TC_K, TC2_K}, CHUNK_K / 256, 256 + 4 + 16, false},
	{expand_k6, expand_pk6, gt_k6, {TC_K, TC2_K}, CHUNK_K / 256, 256 + 4 + 32, false},
};

/* With AVX-512 VNNI (as gplans): q8_0 on pairs of groups in one
 * expansion, the k-quants on the same expansions as above. */
static const gplan gplans_vnni[3] = {
	{expand_q8d, expand_pq8d, gt_q8d, {TC_Q8D1, TC_Q8D}, CHUNK_Q8D / 32, 32 + 4, true},
	{expand_k4, expand_pk4, gt_k4z, {TC_K, TC_KZ}, CHUNK_K / 256, 256 + 4 + 16, false},
	{expand_k6, expand_pk6, gt_k6z, {TC_K, TC_KZ}, CHUNK_K / 256, 256 + 4 + 32, false},
};

_Static_assert(TC_Q8 <= TC_MAX && TC_Q8D <= TC_MAX && TC_KZ <= TC_MAX && EB_Q8D * (CHUNK_Q8D / 32) <= 2 * EXP_BYTES &&
	       EB_Q8 * (CHUNK_Q8 / 32) <= EXP_BYTES && EB_K4 * (CHUNK_K / 256) <= EXP_BYTES &&
	       EB_K6 * (CHUNK_K / 256) <= EXP_BYTES, "a chunk's expansion fits");

TARGET static void avx2_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	if (qx_matmul(a, t0, t1, o0, o1, has_vnni))
		return;
	int q = a->wt == DT_Q8_0 ? 0 : a->wt == DT_Q4_0 ? 1 : a->wt == DT_Q4_K ? 2 : a->wt == DT_Q5_K ? 3
	      : a->wt == DT_Q6_K ? 4 : -1;
	if (q < 0) {
		float_matmul(a, t0, t1, o0, o1);
		return;
	}
	int gi = q == 0 ? 0 : q == 2 ? 1 : q == 4 ? 2 : -1;
	if (gi >= 0 && a->pw && t1 > t0 && t1 - t0 <= (has_vnni && gi < 2 ? DECODE_MAX_TOKENS_VNNI : DECODE_MAX_TOKENS)) {
		if (has_vnni && gi == 0)
			packed_decode2(a, gt_pq8w, gt_pq8v, DEC_TC, t0, t1, o0, o1);
		else if (has_vnni)
			packed_decode(a, gi == 1 ? gt_pk4v : gt_pk6v, DEC_TC, t0, t1, o0, o1);
		else
			packed_decode(a, gt_dec[gi], ROWS_MAX_TOKENS, t0, t1, o0, o1);
		return;
	}
	if (gi >= 0 && t1 - t0 > ROWS_MAX_TOKENS) {
		group_matmul(a, has_vnni ? &gplans_vnni[gi] : &gplans[gi], t0, t1, o0, o1);
		return;
	}
	for (int64_t t = t0; t < t1;) {
		int c = (int)MIN(ROWS_MAX_TOKENS, t1 - t);
		qrows[q][c](a, t, o0, o1);
		t += c;
	}
}

/* ---- the int8 rate ---- */

/* 12 chains of vpmaddubsw (32 multiply-adds each): more than the latency
 * (3 cycles) times the issue rate (2 a cycle) keeps in flight. The chains
 * must stay in registers: kept in a stack array (as an init loop GCC did
 * not unroll left them), each step waits on a store and its reload. The
 * volatile barrier keeps the unused
 * results from being optimised away. */
TARGET static int64_t avx2_int8_spin(int64_t n)
{
	__m256i v[12], b = _mm256_set1_epi8(1);
#pragma GCC unroll 12
	for (int i = 0; i < 12; i++)
		v[i] = _mm256_set1_epi8((char)i);
	for (int64_t r = 0; r < n; r++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++) {
			v[i] = _mm256_maddubs_epi16(v[i], b);
			__asm__ volatile("" : "+x"(v[i]));
		}
	return n * 12 * 32;
}

/* ---- activations ---- */

static int64_t avx2_act_row_bytes(enum dtype wt, int64_t k)
{
	int64_t extra = wt == DT_Q8_0 ? 3 * k : wt == DT_Q4_K || wt == DT_Q5_K ? k / 32 * 2 : 0;
	return qact_row_bytes(wt, k) + ((extra + 63) & ~(int64_t)63) + qx_act_extra(wt, k);
}

/* The sum of 16 int8 values at p. */
INL int sum16(const int8_t *p)
{
	__m128i u = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)0x80));
	__m128i s = _mm_sad_epu8(u, _mm_setzero_si128());
	return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

/* qact_quantize_row's integers (the same products, rounded to nearest even
 * by the conversion, clamped), then the set's own data. */
TARGET static void avx2_quantize_act(enum dtype wt, const float *x, void *dst, int64_t k)
{
	qact_view v = qact_view_of(wt, dst, k);
	int8_t *q = (int8_t *)dst;
	float *d = (float *)v.d;
	const int bl = qact_block(wt);
	const __m256 sign = _mm256_set1_ps(-0.0f);
	for (int64_t b = 0; b < k / bl; b++) {
		const float *xb = x + (int64_t)bl * b;
		__m256 ax = _mm256_setzero_ps();
		for (int j = 0; j < bl; j += 8)
			ax = _mm256_max_ps(ax, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
		__m128 m = _mm_max_ps(_mm256_castps256_ps128(ax), _mm256_extractf128_ps(ax, 1));
		m = _mm_max_ps(m, _mm_movehl_ps(m, m));
		float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
		float id = amax > 0 ? 127.0f / amax : 0;
		d[b] = amax / 127.0f;
		__m256 vid = _mm256_set1_ps(id);
		for (int j = 0; j < bl; j += 8) {
			__m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j), vid));
			qi = _mm256_min_epi32(_mm256_max_epi32(qi, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
			__m128i w = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
			_mm_storel_epi64((__m128i *)(q + (int64_t)bl * b + j), _mm_packs_epi16(w, w));
		}
	}
	int32_t *ns = (int32_t *)v.ns;
	int16_t *bs = (int16_t *)v.bs;
	for (int64_t g = 0; g < k / 16; g++) {
		int s = sum16(q + 16 * g);
		if (bl == 32)
			ns[g / 2] = (g % 2 ? ns[g / 2] : 0) - s;
		else
			bs[g] = (int16_t)s;
	}
	uint8_t *ext = (uint8_t *)dst + qact_row_bytes(wt, k);
	if (wt == DT_Q8_0)
		for (int64_t i = 0; i < k; i += 16) {
			__m128i v = _mm_loadu_si128((const __m128i *)(q + i));
			_mm256_storeu_si256((__m256i *)((int16_t *)ext + i), _mm256_cvtepi8_epi16(v));
			_mm_storeu_si128((__m128i *)(ext + 2 * k + i), _mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
		}
	else if (wt == DT_Q4_K || wt == DT_Q5_K)
		for (int64_t s = 0; s < k / 32; s++)
			((int16_t *)ext)[s] = (int16_t)(bs[2 * s] + bs[2 * s + 1]);
	qx_act_fill(wt, dst, k);
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
	.quantize_act = avx2_quantize_act,
	.act_row_bytes = avx2_act_row_bytes,
	.qact_exact = true,
	.int8_spin = avx2_int8_spin,
	.pack_bytes = avx2_pack_bytes,
	.pack = avx2_pack,
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
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
		vnni_probe();
		return &avx2_kernels;
	}
	return NULL;
}

#else

const cpu_kernels *cpu_kernels_avx2(void)
{
	return NULL;
}

bool cpu_vnni_routes(int on)
{
	(void)on;
	return false;
}

#endif
