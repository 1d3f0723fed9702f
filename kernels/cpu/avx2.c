/* kernels/cpu/avx2.c: the AVX2 + FMA kernel set (with F16C).
 *
 * Float weights: dot-product tiles whose every output is one accumulation
 * chain in a fixed order, summed across lanes at the end by one fixed
 * reduction; tails run the bodies' arithmetic on zero-padded copies.
 * Quantized weights meet int8 activations with the scalar set's arithmetic
 * (exact integer sums per block, then its f32 chain), so every route gives
 * the scalar set's bits: stored rows one at a time for decoding, groups of 8
 * rows interleaved (lanes are rows) for prompts and for decoding on the
 * layout the set packs weights into at load (section "packed weights").
 * Where the CPU has AVX-512 VNNI, prompts on q8_0, q4_K and q6_K take
 * 512-bit vpdpbusd tiles over pairs of groups (same integers, same f32
 * steps, same bits; the AVX-512 set hands these types to this set). The
 * formats q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, iq4_xs, and q5_K once
 * packed, are kernels/cpu/avx2_qx.c's: this table's entries hand them on. */
#include "kernels/cpu/simd.h"
#include "kernels/cpu/avx2_qx.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET

/* Bytes of f32 activations a block of tokens keeps in L2. */
#define FX_BLOCK_BYTES (256 * 1024)
/* Tokens a call may have for the one-row-at-a-time kernels. */
#define ROWS_MAX_TOKENS 4
/* Tokens up to which packed weights are read by the decoding tiles rather
 * than expanded for the prompt tiles. Measured against 4 (AVX2, 2 threads,
 * tools/bench_ab.sh -b 1,4,8,16, a 2-layer cut of the 8B shape): x8 1.43x
 * and x16 1.12x tokens/s on Q4_K_M, 1.56x and 1.30x on Q8_0. */
#define DECODE_MAX_TOKENS 16

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
 *  - prompts expand each group of 8 weight rows, a k-chunk at a time, into
 *    vectors that hold 4 consecutive values of each of the 8 rows (lanes are
 *    rows), once per token block, and tiles of tokens run over them: a
 *    broadcast of 4 activation bytes meets 8 rows per vpmaddubsw, the 16-bit
 *    products of a whole sub-block are summed before one vpmaddwd applies its
 *    scales (q4_K: 8 vectors, q6_K: 2; their sums cannot overflow), and q8_0
 *    multiplies 16-bit values (vpmaddwd) against the activations' 16-bit copy.
 * Activation rows carry, after the qact part (act_row_bytes): q8_0 the values
 * as int16, q4_K and q5_K the sums of each 32 values. */

/* Weight rows per expanded group (the lanes of a vector). */
#define GR 8

INL int hsum_i32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* r[j] = [r0_j, r1_j, ..., r7_j]: an 8 x 8 transpose of 32-bit lanes. */
INL void tr8(__m256i r[8])
{
	__m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
	__m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
	__m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
	__m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
	__m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
	__m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
	__m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
	__m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
	r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
	r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
	r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
	r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
	r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
	r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
	r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
	r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* [sum of v[0], ..., sum of v[7]]: the lane totals of 8 vectors. */
INL __m256i sums8(const __m256i v[8])
{
	__m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
	__m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
	return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

INL __m256i bcast32(const void *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* Where the set's own activation data starts in a row. */
INL const uint8_t *act_ext(const mm_args *a, int64_t t)
{
	return a->qa + t * a->lda + qact_row_bytes(a->wt, a->k);
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

/* A q4_K/q5_K header (d, dmin, 12 bytes of 6-bit scales and mins) as
 * [sc0..sc7, m0..m7] in 16 bytes, *dd = [d, dmin, ...]. */
INL __m128i k_header(const uint8_t *blk, __m128 *dd)
{
	__m128i h = _mm_loadu_si128((const __m128i *)blk);
	*dd = _mm_cvtph_ps(h);
	/* bytes [s0..3, s8..11, s4..7, s8..11] and [-, s0..3, -, s4..7] (of s = scales) */
	__m128i v = _mm_shuffle_epi8(h, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
	__m128i hb = _mm_shuffle_epi8(h, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
	__m128i lo = _mm_and_si128(v, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
	__m128i nib = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
									 15, 15, 15, 15));
	__m128i top = _mm_and_si128(_mm_srli_epi16(hb, 2), _mm_set1_epi8(0x30));
	return _mm_or_si128(_mm_or_si128(lo, nib), top);
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

/* ---- prompts: groups of 8 weight rows expanded once per token block ---- */

/* Values per k-chunk that a group is expanded for (the expansions of two
 * groups, at most EXP_BYTES each, stay in L1 while the block's token tiles
 * pass over them). */
#define CHUNK_Q8 512
#define CHUNK_K 1024
#define EXP_BYTES (12 * 1024)
/* Expanded bytes per block: q8_0 16 vectors of 16-bit pairs + 8 f32 scales;
 * q4_K 64 value vectors, 8 scale vectors, 4 min-pair vectors, d and dmin;
 * q6_K 64 value vectors, 16 scale vectors, 8 scale-pair vectors and d. */
#define EB_Q8 (16 * 32 + 32)
#define EB_K4 (64 * 32 + 8 * 32 + 4 * 32 + 64)
#define EB_K6 (64 * 32 + 16 * 32 + 8 * 32 + 32)
/* Activation bytes (per token and chunk) a token block keeps in L2. */
#define X_BLOCK_BYTES (256 * 1024)

/* Tokens per tile over one group (TC_*) and over two (TC2_*). */
#define TC_Q8 6
#define TC2_Q8 3
#define TC_K 4
#define TC_MAX 8   /* the most of any (the tile tables' width) */
#define TC2_K 3

/* The group's row r (0..7) as a pointer, or NULL outside [o0, o1). */
INL const uint8_t *grow(const mm_args *a, int64_t row0, int r, int64_t o0, int64_t o1)
{
	int64_t o = row0 + r;
	return o >= o0 && o < o1 ? a->w + o * a->ldw : NULL;
}

/* 32 bytes at p, or zeros for an absent row. */
INL __m256i load_or0(const uint8_t *p)
{
	return p ? _mm256_loadu_si256((const __m256i *)p) : _mm256_setzero_si256();
}

INL void store8(uint8_t *e, int i, __m256i v)
{
	_mm256_storeu_si256((__m256i *)e + i, v);
}

/* Each of the 8 rows' 8 dwords -> dword r of vector j, stored at e + 32j. */
INL void store_tr(uint8_t *e, __m256i r[8])
{
	tr8(r);
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		store8(e, j, r[j]);
}

/* The f16 values at p[r] + off of each present row as 8 f32 (0 for absent rows). */
INL __m256 gather_f16(const uint8_t *const p[8], int64_t off)
{
	uint16_t h[8] = {0};
	for (int r = 0; r < 8; r++)
		if (p[r])
			memcpy(&h[r], p[r] + off, 2);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* q8_0 blocks [b0, b0 + n) of the group: per block, vector p holds values
 * 2p, 2p + 1 of each row as int16, then the rows' scales. */
NOINL void expand_q8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	const uint8_t *rp[8];
	for (int r = 0; r < 8; r++)
		rp[r] = grow(a, row0, r, o0, o1);
	for (int64_t b = 0; b < n; b++, e += EB_Q8) {
		__m256i lo[8], hi[8];
		const uint8_t *bp[8];
		for (int r = 0; r < 8; r++) {
			bp[r] = rp[r] ? rp[r] + (b0 + b) * 34 : NULL;
			__m256i v = bp[r] ? _mm256_loadu_si256((const __m256i *)(bp[r] + 2)) : _mm256_setzero_si256();
			lo[r] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
			hi[r] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
		}
		store_tr(e, lo);
		store_tr(e + 256, hi);
		_mm256_storeu_ps((float *)(e + 512), gather_f16(bp, 0));
	}
}

/* Bytes [s_r x2] as words, for 8 rows' bytes s_r (zero-extended or signed). */
INL __m256i dup_words(__m128i bytes8, bool is_signed)
{
	__m128i d = _mm_unpacklo_epi8(bytes8, bytes8);
	return is_signed ? _mm256_cvtepi8_epi16(d) : _mm256_cvtepu8_epi16(d);
}

/* q4_K super-blocks [s0, s0 + n) of the group: value vectors (vector v: values
 * 4v..4v+3 of each row), per sub-block its scale words, per pair of
 * sub-blocks the min words, then d and dmin. */
NOINL void expand_k4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t s0, int64_t n)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	const uint8_t *rp[8];
	for (int r = 0; r < 8; r++)
		rp[r] = grow(a, row0, r, o0, o1);
	for (int64_t sb = 0; sb < n; sb++, e += EB_K4) {
		const uint8_t *bp[8];
		uint8_t sm[8][16];
		for (int r = 0; r < 8; r++) {
			bp[r] = rp[r] ? rp[r] + (s0 + sb) * 144 : NULL;
			__m128 dd;
			_mm_storeu_si128((__m128i *)sm[r], bp[r] ? k_header(bp[r], &dd) : _mm_setzero_si128());
		}
		for (int p = 0; p < 4; p++) {
			__m256i v[8];
			for (int r = 0; r < 8; r++)
				v[r] = load_or0(bp[r] ? bp[r] + 16 + 32 * p : NULL);
			tr8(v);
			for (int j = 0; j < 8; j++) {
				store8(e, 16 * p + j, _mm256_and_si256(v[j], m4));
				store8(e, 16 * p + 8 + j, _mm256_and_si256(_mm256_srli_epi16(v[j], 4), m4));
			}
		}
		uint8_t col[16][8];
		for (int i = 0; i < 16; i++)
			for (int r = 0; r < 8; r++)
				col[i][r] = sm[r][i];
		for (int s = 0; s < 8; s++)
			store8(e, 64 + s, dup_words(_mm_loadl_epi64((const __m128i *)col[s]), false));
		for (int p = 0; p < 4; p++) /* [m(r, 2p), m(r, 2p + 1)] per row */
			store8(e, 72 + p, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)col[8 + 2 * p]),
									  _mm_loadl_epi64((const __m128i *)col[9 + 2 * p]))));
		_mm256_storeu_ps((float *)(e + 76 * 32), gather_f16(bp, 0));
		_mm256_storeu_ps((float *)(e + 76 * 32 + 32), gather_f16(bp, 2));
	}
}

/* q6_K super-blocks [s0, s0 + n) of the group: value vectors as for q4_K (the
 * values 0..63, not less 32), per 16-value sub-block its scale words, per
 * pair of sub-blocks the scale pair words, then d. */
NOINL void expand_k6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t s0, int64_t n)
{
	const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	const uint8_t *rp[8];
	for (int r = 0; r < 8; r++)
		rp[r] = grow(a, row0, r, o0, o1);
	for (int64_t sb = 0; sb < n; sb++, e += EB_K6) {
		const uint8_t *bp[8];
		for (int r = 0; r < 8; r++)
			bp[r] = rp[r] ? rp[r] + (s0 + sb) * 210 : NULL;
		for (int h = 0; h < 2; h++) {
			__m256i l0[8], l1[8], qh[8];
			for (int r = 0; r < 8; r++) {
				l0[r] = load_or0(bp[r] ? bp[r] + 64 * h : NULL);
				l1[r] = load_or0(bp[r] ? bp[r] + 64 * h + 32 : NULL);
				qh[r] = load_or0(bp[r] ? bp[r] + 128 + 32 * h : NULL);
			}
			tr8(l0);
			tr8(l1);
			tr8(qh);
			for (int j = 0; j < 8; j++) {
				int v = 32 * h + j;
				store8(e, v, _mm256_or_si256(_mm256_and_si256(l0[j], m4),
							     _mm256_and_si256(_mm256_slli_epi16(qh[j], 4), m30)));
				store8(e, v + 8, _mm256_or_si256(_mm256_and_si256(l1[j], m4),
								 _mm256_and_si256(_mm256_slli_epi16(qh[j], 2), m30)));
				store8(e, v + 16, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0[j], 4), m4),
								  _mm256_and_si256(qh[j], m30)));
				store8(e, v + 24, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1[j], 4), m4),
								  _mm256_and_si256(_mm256_srli_epi16(qh[j], 2), m30)));
			}
		}
		int8_t col[16][8];
		for (int s = 0; s < 16; s++)
			for (int r = 0; r < 8; r++)
				col[s][r] = bp[r] ? ((const blk_q6_k *)bp[r])->scales[s] : 0;
		for (int s = 0; s < 16; s++)
			store8(e, 64 + s, dup_words(_mm_loadl_epi64((const __m128i *)col[s]), true));
		for (int p = 0; p < 8; p++)
			store8(e, 80 + p, _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)col[2 * p]),
									 _mm_loadl_epi64((const __m128i *)col[2 * p + 1]))));
		_mm256_storeu_ps((float *)(e + 88 * 32), gather_f16(bp, 208));
	}
}

/* ---- packed weights: 8 rows interleaved, made once at load ----
 *
 * A group of 8 rows (rows past the matrix are zero) keeps its blocks in k
 * order; each block holds the 8 rows' data so that one 32-byte load gives 4
 * consecutive values of every row (the lanes of the group kernels), and the
 * block is exactly as large as the 8 rows' stored blocks:
 *   q8_0 (272 bytes): per value pair p, 16 bytes [row 0: v2p, v2p+1, row 1: ...]
 *        (vpmovsxbw makes the 16-bit vectors), then the 8 f16 scales;
 *   q4_K (1152): per pair of sub-blocks p and 4 bytes j, a vector whose dword r
 *        is row r's qs[32p + 4j..+3] (low nibbles: sub-block 2p, high: 2p + 1),
 *        then the 12 header bytes as planes of 8 rows, d[8], dmin[8];
 *   q6_K (1680): ql as q4_K's qs (4 chunks of 32), qh (2 halves of 32) the
 *        same way, the 16 scales as planes of 8 rows, d[8]. */

#define PB_Q8 272
#define PB_K4 1152
#define PB_K6 1680

static int64_t pk_block_bytes(enum dtype t)
{
	return t == DT_Q8_0 ? PB_Q8 : t == DT_Q4_K ? PB_K4 : t == DT_Q6_K ? PB_K6 : 0;
}

static int64_t avx2_pack_bytes(enum dtype t, int64_t k, int64_t n_out)
{
	if (qx_takes(t))
		return qx_pack_bytes(t, k, n_out);
	int64_t pb = pk_block_bytes(t);
	return pb ? (n_out + GR - 1) / GR * (k / dtype_block_elems(t)) * pb : 0;
}

/* The 8 rows' 32 bytes at off from their blocks, transposed by dwords into
 * the 8 vectors at e (absent rows zero). */
INL void pack_tr(uint8_t *e, const uint8_t *const bp[8], int64_t off)
{
	__m256i v[8];
	for (int r = 0; r < 8; r++)
		v[r] = load_or0(bp[r] ? bp[r] + off : NULL);
	store_tr(e, v);
}

/* Byte i of each row's block into plane i (8 bytes) at e, for i < n. */
INL void pack_planes(uint8_t *e, const uint8_t *const bp[8], int64_t off, int n)
{
	for (int i = 0; i < n; i++)
		for (int r = 0; r < 8; r++)
			e[8 * i + r] = bp[r] ? bp[r][off + i] : 0;
}

/* The f16 at off of each row's block, as 8 halves at e. */
INL void pack_f16(uint8_t *e, const uint8_t *const bp[8], int64_t off)
{
	for (int r = 0; r < 8; r++) {
		uint16_t h = 0;
		if (bp[r])
			memcpy(&h, bp[r] + off, 2);
		memcpy(e + 2 * r, &h, 2);
	}
}

/* q8_0: the 8 rows' values as 16 vectors of [row: v2p, v2p+1] pairs: dwords
 * (value pairs) transposed, then each 128-bit lane's words split into even
 * and odd pairs. */
INL void pack_q8_block(uint8_t *e, const uint8_t *const bp[8])
{
	const __m256i sep = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
					     0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
	__m256i v[8];
	for (int r = 0; r < 8; r++)
		v[r] = load_or0(bp[r] ? bp[r] + 2 : NULL);
	tr8(v);
	for (int i = 0; i < 8; i++) /* v[i]: [row 0..3: pairs 2i, 2i+1 | rows 4..7] */
		store8(e, i, _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v[i], sep), 0xd8));
	pack_f16(e + 256, bp, 0);
}

TARGET static void avx2_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0,
			     int64_t o1)
{
	if (qx_takes(t)) {
		qx_pack(dst, w, t, k, n_out, o0, o1);
		return;
	}
	const int64_t pb = pk_block_bytes(t), nb = k / dtype_block_elems(t), ldw = dtype_row_bytes(t, k);
	const int64_t bb = dtype_block_bytes(t);
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR) {
		uint8_t *e = dst + row0 / GR * nb * pb;
		for (int64_t b = 0; b < nb; b++, e += pb) {
			const uint8_t *bp[8];
			for (int r = 0; r < 8; r++)
				bp[r] = row0 + r < n_out ? w + (row0 + r) * ldw + b * bb : NULL;
			if (t == DT_Q8_0) {
				pack_q8_block(e, bp);
			} else if (t == DT_Q4_K) {
				for (int p = 0; p < 4; p++)
					pack_tr(e + 256 * p, bp, 16 + 32 * p);
				pack_planes(e + 1024, bp, 4, 12);
				pack_f16(e + 1120, bp, 0);
				pack_f16(e + 1136, bp, 2);
			} else {
				for (int c = 0; c < 4; c++)
					pack_tr(e + 256 * c, bp, 32 * c);
				for (int h = 0; h < 2; h++)
					pack_tr(e + 1024 + 256 * h, bp, 128 + 32 * h);
				pack_planes(e + 1536, bp, 192, 16);
				pack_f16(e + 1664, bp, 208);
			}
		}
	}
}

/* Byte-shuffle controls on 8 row bytes repeated in both lanes: dup gives
 * each row's byte as both words of its dword (zero-extended; dup_hi puts it
 * in the high bytes, for an arithmetic shift to sign-extend), pair takes
 * rows' bytes from the first and second 8 bytes of 16 as the two words. */
INL __m256i ctl_dup(void)
{
	return _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
				4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
}

INL __m256i ctl_dup_hi(void)
{
	return _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,
				-1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
}

INL __m256i ctl_pair(bool hi)
{
	char z = -1;
	if (hi)
		return _mm256_setr_epi8(z, 0, z, 8, z, 1, z, 9, z, 2, z, 10, z, 3, z, 11,
					z, 4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15);
	return _mm256_setr_epi8(0, z, 8, z, 1, z, 9, z, 2, z, 10, z, 3, z, 11, z,
				4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15, z);
}

INL int64_t ld64(const uint8_t *p)
{
	int64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* Words [b_r, b_r] in dword r for the 8 bytes b at p (signed: sign-extended). */
INL __m256i pk_dup(const uint8_t *p, bool is_signed)
{
	__m256i v = _mm256_set1_epi64x(ld64(p));
	if (is_signed)
		return _mm256_srai_epi16(_mm256_shuffle_epi8(v, ctl_dup_hi()), 8);
	return _mm256_shuffle_epi8(v, ctl_dup());
}

/* Words [a_r, b_r] in dword r for the bytes a (8 at p) and b (the next 8). */
INL __m256i pk_pair(const uint8_t *p, bool is_signed)
{
	__m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
	if (is_signed)
		return _mm256_srai_epi16(_mm256_shuffle_epi8(v, ctl_pair(true)), 8);
	return _mm256_shuffle_epi8(v, ctl_pair(false));
}

/* A packed q4_K block's 8 rows' 6-bit scales and mins from the header
 * planes: sc[8 s + r] and mn[8 s + r] for sub-block s and row r. */
INL void pk4_scales(const uint8_t *planes, uint8_t *sc, uint8_t *mn)
{
	const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	__m256i y0 = _mm256_loadu_si256((const __m256i *)planes);
	__m256i y1 = _mm256_loadu_si256((const __m256i *)(planes + 32));
	__m256i y2 = _mm256_loadu_si256((const __m256i *)(planes + 64));
	_mm256_storeu_si256((__m256i *)sc, _mm256_and_si256(y0, m63));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(y2, m15),
								   _mm256_and_si256(_mm256_srli_epi16(y0, 2), m30)));
	_mm256_storeu_si256((__m256i *)mn, _mm256_and_si256(y1, m63));
	_mm256_storeu_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y2, 4), m15),
								   _mm256_and_si256(_mm256_srli_epi16(y1, 2), m30)));
}

/* The 32 bytes of values 128h + 32q + 4j..+3 of each row of a packed q6_K
 * block (0..63). */
INL __m256i pk6_values(const uint8_t *e, int h, int q, int j)
{
	const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	__m256i ql = _mm256_loadu_si256((const __m256i *)(e + 32 * (8 * (2 * h + (q & 1)) + j)));
	__m256i qh = _mm256_loadu_si256((const __m256i *)(e + 1024 + 32 * (8 * h + j)));
	__m256i lo = q < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
	__m256i hi = q == 0 ? _mm256_slli_epi16(qh, 4) : q == 1 ? _mm256_slli_epi16(qh, 2) : q == 2 ? qh
		   : _mm256_srli_epi16(qh, 2);
	return _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
}

/* Lanes [lo, hi) of 8. */
INL __m256i lanes(int lo, int hi)
{
	__m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}

/* What a tile over one or two expanded groups needs to know. */
typedef struct gtile {
	const uint8_t *e[2];     /* the groups' expansions of blocks [b0, b0 + nb) */
	int64_t b0, nb;
	int64_t row0;            /* the first group's first row (the second's is row0 + 8) */
	__m256i keep[2];         /* lanes (rows) of each group to store */
	bool full[2];            /* all 8 lanes: plain loads and stores (a masked
	                          * store costs Zen 3 about a dozen cycles) */
	bool first;              /* the chunk starts the chain (else it goes on from y) */
} gtile;

INL __m256 acc_begin(const mm_args *a, const gtile *g, int64_t t, int r)
{
	if (g->first)
		return _mm256_setzero_ps();
	float *y = a->y + t * a->ldy + g->row0 + GR * r;
	return g->full[r] ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, g->keep[r]);
}

INL void acc_end(const mm_args *a, const gtile *g, int64_t t, int r, __m256 acc)
{
	float *y = a->y + t * a->ldy + g->row0 + GR * r;
	if (g->full[r])
		_mm256_storeu_ps(y, acc);
	else
		_mm256_maskstore_ps(y, g->keep[r], acc);
}

/* Keeps v in a register as it is: integer sums the compiler would otherwise
 * re-associate into trees of spilled partial sums. */
#define KEEP(v) __asm__("" : "+x"(v))

/* Decoding streams each thread's packed groups once per token, with
 * prefetch hints that suit the core (set once, in vnni_probe):
 * - AMD: a burst for a whole block pf_* blocks ahead (-1: none). On Zen 3,
 *   8B Q4_K_M shape, 2 threads (tools/bench_ab.sh): q4_K 8 ahead alone
 *   1.04x, with q6_K 6 ahead (its scales sit after its values, and without
 *   it the stream stalls) 1.47x tokens/s; q8_0 slower with them (0.89x at
 *   16 ahead): none.
 * - elsewhere: spread over the block, one hint per 64 bytes read, for the
 *   line pf_far bytes ahead into L2 (prefetcht2) and, for q8_0 with
 *   pf_near_q8, for the next block's line into L1. On an AVX-512 Xeon (a
 *   2-core VM), `pagechat bench` tg32 on the 8B shapes, fraction of the
 *   bandwidth limit: Q4_K_M 58-61% with bursts for the block being read
 *   (the best burst, 0 ahead), 80-84% with pf_far 18 KiB (then with 2 of
 *   q4_K's 18 lines a block and 10 of q6_K's 27 left unhinted, see
 *   pf_spread); Q8_0 75-82% with bursts 8 blocks ahead, 90-95% with pf_far
 *   9-18 KiB, 97% with the L1 hints. With every line hinted, the L1 hints
 *   cost q4_K and q6_K: Q4_K_M tg64 6.70-6.84 t/s with them, 6.89-7.17
 *   without (3 alternating runs); Q8_0 3.94-4.05 with, 3.91-3.96 without.
 *   Farther than 36 KiB or nearer than 4.5 KiB was slower (bench_matvec). */
static int pf_k4 = 8, pf_k6 = 6, pf_q8 = -1, pf_far = -1;
static bool pf_near_q8;

/* Part i of n of the hints for the block of eb bytes at e: one for each
 * offset o that is a multiple of 64 in [i eb / n, (i + 1) eb / n), so the
 * block's ceil(eb / 64) hints, 64 bytes apart, leave no line between them
 * or the next block's first one unhinted (eb, i and n are constants where
 * it is inlined: 0 to 2 hints each). Hints at i eb / n itself left lines
 * out where the parts are longer than 64 bytes: 2 of q4_K's 18 lines a
 * block, 10 of q6_K's 27, which streamed at 94% and 86% of the read pass
 * (bench_matvec) against q8_0's 100% (68-byte parts: none left out); 97%
 * and 96% with every line hinted. near: the next block's lines into L1 too. */
INL void pf_spread(const uint8_t *e, int64_t eb, int i, int n, bool near)
{
	for (int64_t o = (i * eb / n + 63) / 64 * 64; o < (i + 1) * eb / n; o += 64) {
		if (pf_far >= 0)
			_mm_prefetch((const char *)e + pf_far + o, _MM_HINT_T2);
		if (near)
			_mm_prefetch((const char *)e + eb + o, _MM_HINT_T0);
	}
}

/* q8_0 tile: C tokens from t0 over R groups, expanded (16-bit values) or
 * packed (8-bit, widened here); each 16-bit activation pair broadcast meets
 * R groups' value vectors. */
INL void q8_tile(const mm_args *a, const gtile *g, int64_t t0, const int R, const int C, const bool packed)
{
	const int64_t eb = packed ? PB_Q8 : EB_Q8;
	const int16_t *x16[TC_Q8];
	const float *xd[TC_Q8];
	__m256 acc[2][TC_Q8];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		x16[c] = (const int16_t *)act_ext(a, t0 + c) + 32 * g->b0;
		xd[c] = qact_view_of(DT_Q8_0, a->qa + (t0 + c) * a->lda, a->k).d + g->b0;
#pragma GCC unroll 2
		for (int r = 0; r < R; r++)
			acc[r][c] = acc_begin(a, g, t0 + c, r);
	}
	for (int64_t b = 0; b < g->nb; b++) {
		if (packed && pf_q8 >= 0)
			for (int l = 0; l < PB_Q8; l += 64)
				_mm_prefetch((const char *)g->e[0] + (b + pf_q8) * eb + l, _MM_HINT_T0);
		__m256i is[2][TC_Q8];
#pragma GCC unroll 2
		for (int r = 0; r < R; r++)
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				is[r][c] = _mm256_setzero_si256();
#pragma GCC unroll 16
		for (int p = 0; p < 16; p++) {
			__m256i w[2];
			if (packed && !(p & 3))
				pf_spread(g->e[0] + b * eb, PB_Q8, p / 4, 4, pf_near_q8);
#pragma GCC unroll 2
			for (int r = 0; r < R; r++)
				w[r] = packed ? _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g->e[r] + b * eb + 16 * p)))
					      : _mm256_loadu_si256((const __m256i *)(g->e[r] + b * eb) + p);
#pragma GCC unroll 8
			for (int c = 0; c < C; c++) {
				__m256i x = bcast32(x16[c] + 32 * b + 2 * p);
#pragma GCC unroll 2
				for (int r = 0; r < R; r++) {
					is[r][c] = _mm256_add_epi32(is[r][c], _mm256_madd_epi16(w[r], x));
					KEEP(is[r][c]);
				}
			}
		}
#pragma GCC unroll 2
		for (int r = 0; r < R; r++) {
			__m256 dw = packed ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g->e[r] + b * eb + 256)))
					   : _mm256_loadu_ps((const float *)(g->e[r] + b * eb + 512));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(xd[c] + b)),
										  _mm256_cvtepi32_ps(is[r][c])));
		}
	}
#pragma GCC unroll 2
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc_end(a, g, t0 + c, r, acc[r][c]);
}

/* ---- q8_0 prompts with vpdpbusd (AVX-512 VNNI) ----
 *
 * Where the CPU has it, q8_0 prompts take one vpdpbusd per 64 multiply-adds
 * (four 8-bit products summed into each 32-bit lane of a 512-bit vector)
 * instead of 16-bit vpmaddwd and vpaddd. vpdpbusd multiplies unsigned by
 * signed bytes: the activations go in as x + 128 (the set's copy of them,
 * act_ext) and the weights as they are, and each chain starts from the
 * block's -128 sum w of its row, so it ends at sum x w: the same exact
 * integer as every other route, and the same f32 steps after it, so the
 * results keep the set's bits.
 *
 * The expansion of a pair of groups (rows 0-7 in the low half of each
 * vector, 8-15 in the high half) holds per block 8 vectors [row r: values
 * 4j..4j+3], the rows' f32 scales and their -128 sum w; group g's 32-byte
 * halves start 32 g bytes in. On a Xeon's 512-bit units (ports 0 and 5)
 * every other vector operation competes with vpdpbusd, so the chains start
 * from memory, the activations are broadcast from memory and the tile has
 * no shuffles: per block and token 8 vpdpbusd and 4 f32 operations. */
#define VTARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni,avx512bw,avx512dq")))
#define VINL static inline __attribute__((always_inline)) VTARGET
#define VNOINL static __attribute__((noinline)) VTARGET
#define EB_Q8D 640        /* a pair of groups' block: 512 value, 64 scale, 64 offset bytes */
#define CHUNK_Q8D 1024
#define TC_Q8D1 6         /* tokens per tile over one group (256-bit) */
#define TC_Q8D 8          /* over a pair (512-bit) */
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
		if (!__builtin_cpu_is("amd")) {
			pf_k4 = pf_k6 = pf_q8 = -1;
			pf_far = 18432;
			pf_near_q8 = true;
		}
	}
}

bool cpu_vnni_routes(int on)
{
	vnni_probe();
	if (on >= 0)
		has_vnni = on && cpu_vnni;
	return has_vnni;
}

/* The outputs of token t in both groups' rows (the first group low). */
VINL __m512 acc2_begin(const mm_args *a, const gtile *g, int64_t t)
{
	return _mm512_insertf32x8(_mm512_castps256_ps512(acc_begin(a, g, t, 0)), acc_begin(a, g, t, 1), 1);
}

VINL void acc2_end(const mm_args *a, const gtile *g, int64_t t, __m512 acc)
{
	acc_end(a, g, t, 0, _mm512_castps512_ps256(acc));
	acc_end(a, g, t, 1, _mm512_extractf32x8_ps(acc, 1));
}

/* Two groups' 32-byte vectors as one 512-bit vector (the first low). */
VINL __m512i load2(const uint8_t *lo, const uint8_t *hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
				  _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* One group's block from its 8 rows' values as [row r: dword j] vectors v:
 * stored 64 bytes apart, then the scales (sc) and -128 sum w per row. */
VINL void store_q8d(uint8_t *e, __m256i v[8], __m256 sc)
{
	__m256i sum = _mm256_setzero_si256();
	for (int j = 0; j < 8; j++) {
		_mm256_storeu_si256((__m256i *)(e + 64 * j), v[j]);
		sum = _mm256_dpbusd_epi32(sum, _mm256_set1_epi8(1), v[j]);
	}
	_mm256_storeu_ps((float *)(e + 512), sc);
	_mm256_storeu_si256((__m256i *)(e + 576), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 7)));
}

VNOINL void expand_q8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	const uint8_t *rp[8];
	for (int r = 0; r < 8; r++)
		rp[r] = grow(a, row0, r, o0, o1);
	for (int64_t b = 0; b < n; b++, e += EB_Q8D) {
		__m256i v[8];
		const uint8_t *bp[8];
		for (int r = 0; r < 8; r++) {
			bp[r] = rp[r] ? rp[r] + (b0 + b) * 34 : NULL;
			v[r] = load_or0(bp[r] ? bp[r] + 2 : NULL);
		}
		tr8(v);
		store_q8d(e, v, gather_f16(bp, 0));
	}
}

INL const uint8_t *pk_group(const mm_args *a, int64_t row0, int64_t b0);

/* From the packed layout: its vector j holds pairs 2j and 2j + 1 of the 8
 * rows as two 128-bit halves; interleaving their words gives the dwords. */
VNOINL void expand_pq8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	(void)o0, (void)o1;
	const uint8_t *s = pk_group(a, row0, b0);
	for (int64_t b = 0; b < n; b++, e += EB_Q8D, s += PB_Q8) {
		__m256i v[8];
		for (int j = 0; j < 8; j++) {
			__m256i u = _mm256_loadu_si256((const __m256i *)(s + 32 * j));
			__m128i lo = _mm256_castsi256_si128(u), hi = _mm256_extracti128_si256(u, 1);
			v[j] = _mm256_setr_m128i(_mm_unpacklo_epi16(lo, hi), _mm_unpackhi_epi16(lo, hi));
		}
		store_q8d(e, v, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 256))));
	}
}

/* The activations of token t as x + 128 (after the 16-bit copy, act_ext). */
INL const uint8_t *act_u8(const mm_args *a, int64_t t)
{
	return act_ext(a, t) + 2 * a->k;
}

/* C tokens over the first group alone (the range's last, odd group). */
VINL void q8d1_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const uint8_t *xu[TC_Q8D1];
	const float *xd[TC_Q8D1];
	__m256 acc[TC_Q8D1];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		xu[c] = act_u8(a, t0 + c) + 32 * g->b0;
		xd[c] = qact_view_of(DT_Q8_0, a->qa + (t0 + c) * a->lda, a->k).d + g->b0;
		acc[c] = acc_begin(a, g, t0 + c, 0);
	}
	for (int64_t b = 0; b < g->nb; b++) {
		const uint8_t *e = g->e[0] + b * EB_Q8D;
		__m256i is[TC_Q8D1];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			is[c] = _mm256_loadu_si256((const __m256i *)(e + 576));
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(e + 64 * j));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				is[c] = _mm256_dpbusd_epi32(is[c], bcast32(xu[c] + 32 * b + 4 * j), w);
		}
		__m256 dw = _mm256_loadu_ps((const float *)(e + 512));
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(xd[c] + b)),
								      _mm256_cvtepi32_ps(is[c])));
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

/* C tokens over the pair. */
VINL void q8d_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const uint8_t *xu[TC_Q8D];
	const float *xd[TC_Q8D];
	__m512 acc[TC_Q8D];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		xu[c] = act_u8(a, t0 + c) + 32 * g->b0;
		xd[c] = qact_view_of(DT_Q8_0, a->qa + (t0 + c) * a->lda, a->k).d + g->b0;
		acc[c] = acc2_begin(a, g, t0 + c);
	}
	for (int64_t b = 0; b < g->nb; b++) {
		const uint8_t *e = g->e[0] + b * EB_Q8D;
		__m512i is[TC_Q8D];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			is[c] = _mm512_loadu_si512(e + 576);
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			__m512i w = _mm512_loadu_si512(e + 64 * j);
#pragma GCC unroll 8
			for (int c = 0; c < C; c++) {
				int32_t xv;
				memcpy(&xv, xu[c] + 32 * b + 4 * j, 4);
				is[c] = _mm512_dpbusd_epi32(is[c], _mm512_set1_epi32(xv), w);
			}
		}
		__m512 dw = _mm512_loadu_ps(e + 512);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b])),
								      _mm512_cvtepi32_ps(is[c])));
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc2_end(a, g, t0 + c, acc[c]);
}

/* ---- k-quant prompts with vpdpbusd (AVX-512 VNNI) ---- */

/* q4_K / q6_K over two expanded groups in 512-bit vectors: per sub-block
 * (32 or 16 values) vpdpbusd gives each row's exact sum and vpmulld its
 * scale (the expansion's [s, s] words: q4_K's masked to one, q6_K's signed
 * one sign-extended); the super-block's step is k_step's, lane for lane:
 * the same integers and f32 operations as the vpmaddubsw route. */
#define TC_KZ 8   /* tokens per tile over two groups */

VINL void kz_tile(const mm_args *a, const gtile *g, int64_t t0, const int C, const bool q6)
{
	const int NS = q6 ? 16 : 8, SV = q6 ? 4 : 8, EB = q6 ? EB_K6 : EB_K4;
	const int8_t *xq[TC_KZ];
	const float *xd[TC_KZ];
	const int16_t *xs[TC_KZ];   /* q4_K: 32-value sums; q6_K: 16-value sums */
	__m512 acc[TC_KZ];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(q6 ? DT_Q6_K : DT_Q4_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = q6 ? v.bs + 16 * g->b0 : (const int16_t *)act_ext(a, t0 + c) + 8 * g->b0;
		acc[c] = acc2_begin(a, g, t0 + c);
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e0 = g->e[0] + sb * EB, *e1 = g->e[1] + sb * EB;
		__m512i isum[TC_KZ];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
		for (int s = 0; s < NS; s++) {
			__m512i d[TC_KZ];
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				d[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int l = 0; l < SV; l++) {
				const int v = SV * s + l;
				__m512i w = load2(e0 + 32 * v, e1 + 32 * v);
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					int32_t xv;
					memcpy(&xv, xq[c] + 256 * sb + 4 * v, 4);
					d[c] = _mm512_dpbusd_epi32(d[c], w, _mm512_set1_epi32(xv));
				}
			}
			__m512i sw = load2(e0 + 32 * (64 + s), e1 + 32 * (64 + s));
			__m512i sc = q6 ? _mm512_srai_epi32(_mm512_slli_epi32(sw, 16), 16)
					: _mm512_and_si512(sw, _mm512_set1_epi32(0xffff));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(d[c], sc));
		}
		const int pw = 64 + NS, df = 64 + NS + NS / 2;   /* min or scale pairs; d (and dmin) */
		__m512 dd = _mm512_castsi512_ps(load2(e0 + 32 * df, e1 + 32 * df));
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512i ps = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int p = 0; p < NS / 2; p++) {
				int32_t xv;
				memcpy(&xv, xs[c] + NS * sb + 2 * p, 4);
				ps = _mm512_add_epi32(ps, _mm512_madd_epi16(load2(e0 + 32 * (pw + p), e1 + 32 * (pw + p)),
									    _mm512_set1_epi32(xv)));
			}
			__m512 vdx = _mm512_set1_ps(xd[c][sb]);
			if (q6) {
				__m512i sum = _mm512_sub_epi32(isum[c], _mm512_slli_epi32(ps, 5));
				acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dd, vdx), _mm512_cvtepi32_ps(sum)));
			} else {
				__m512 dmin = _mm512_castsi512_ps(load2(e0 + 32 * (df + 1), e1 + 32 * (df + 1)));
				__m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dd, vdx), _mm512_cvtepi32_ps(isum[c])),
							 _mm512_mul_ps(_mm512_mul_ps(dmin, vdx), _mm512_cvtepi32_ps(ps)));
				acc[c] = _mm512_add_ps(acc[c], t);
			}
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc2_end(a, g, t0 + c, acc[c]);
}

/* The chain's step for one super-block of an expanded k-quant group. */
INL __m256 k_step(__m256 acc, const uint8_t *e, __m256i isum, const int16_t *xs, float dx, const bool q6)
{
	const int NS = q6 ? 16 : 8;
	const __m256i *pw = (const __m256i *)e + 64 + NS;   /* min or scale pair words */
	const float *df = (const float *)(e + (64 + NS + NS / 2) * 32);
	__m256i ps = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int p = 0; p < NS / 2; p++)
		ps = _mm256_add_epi32(ps, _mm256_madd_epi16(_mm256_loadu_si256(pw + p), bcast32(xs + 2 * p)));
	__m256 vdx = _mm256_set1_ps(dx), d = _mm256_loadu_ps(df);
	if (q6) {
		__m256i s = _mm256_sub_epi32(isum, _mm256_slli_epi32(ps, 5));
		return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(s)));
	}
	__m256 dmin = _mm256_loadu_ps(df + 8);
	__m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum)),
				 _mm256_mul_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(ps)));
	return _mm256_add_ps(acc, t);
}

/* q4_K / q6_K tile: C tokens from t0 over R groups. Sub-blocks of SV value
 * vectors; the 16-bit products of L vectors are summed before the scale's
 * vpmaddwd (q4_K: 8 x 3810, q6_K: 2 x 16002 at most). */
INL void k_tile(const mm_args *a, const gtile *g, int64_t t0, const int R, const int C, const bool q6)
{
	const int NS = q6 ? 16 : 8, SV = q6 ? 4 : 8, L = q6 ? 2 : 8, EB = q6 ? EB_K6 : EB_K4;
	const enum dtype wt = q6 ? DT_Q6_K : DT_Q4_K;
	const int8_t *xq[TC_K];
	const float *xd[TC_K];
	const int16_t *xs[TC_K];    /* q4_K: 32-value sums; q6_K: 16-value sums */
	__m256 acc[2][TC_K];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(wt, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = q6 ? v.bs + 16 * g->b0 : (const int16_t *)act_ext(a, t0 + c) + 8 * g->b0;
#pragma GCC unroll 2
		for (int r = 0; r < R; r++)
			acc[r][c] = acc_begin(a, g, t0 + c, r);
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		__m256i isum[2][TC_K];
#pragma GCC unroll 2
		for (int r = 0; r < R; r++)
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				isum[r][c] = _mm256_setzero_si256();
#pragma GCC unroll 1
		for (int s = 0; s < NS; s++) {
			__m256i sv[2];
#pragma GCC unroll 2
			for (int r = 0; r < R; r++)
				sv[r] = _mm256_loadu_si256((const __m256i *)(g->e[r] + sb * EB) + 64 + s);
#pragma GCC unroll 4
			for (int u = 0; u < SV; u += L) {
				__m256i p16[2][TC_K];
#pragma GCC unroll 8
				for (int l = 0; l < L; l++) {
					const int v = s * SV + u + l;
					__m256i w[2];
#pragma GCC unroll 2
					for (int r = 0; r < R; r++)
						w[r] = _mm256_loadu_si256((const __m256i *)(g->e[r] + sb * EB) + v);
#pragma GCC unroll 4
					for (int c = 0; c < C; c++) {
						__m256i x = bcast32(xq[c] + 256 * sb + 4 * v);
#pragma GCC unroll 2
						for (int r = 0; r < R; r++) {
							__m256i p = _mm256_maddubs_epi16(w[r], x);
							p16[r][c] = l ? _mm256_add_epi16(p16[r][c], p) : p;
							KEEP(p16[r][c]);
						}
					}
				}
#pragma GCC unroll 2
				for (int r = 0; r < R; r++)
#pragma GCC unroll 4
					for (int c = 0; c < C; c++) {
						isum[r][c] = _mm256_add_epi32(isum[r][c], _mm256_madd_epi16(p16[r][c], sv[r]));
						KEEP(isum[r][c]);
					}
			}
		}
#pragma GCC unroll 2
		for (int r = 0; r < R; r++)
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				acc[r][c] = k_step(acc[r][c], g->e[r] + sb * EB, isum[r][c],
						   xs[c] + (q6 ? 16 : 8) * sb, xd[c][sb], q6);
	}
#pragma GCC unroll 2
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc_end(a, g, t0 + c, r, acc[r][c]);
}

/* ---- decoding on packed weights ---- */

/* A packed q4_K block's f32 step for one token: the mins (mn, as
 * pk4_scales leaves them) meet the 32-value sums xs, then d x isum -
 * dmin x mins, both scaled by the token's dx. */
INL __m256 pk4_step(__m256 acc, const uint8_t *e, const uint8_t *mn, __m256i isum, const int16_t *xs,
		    float dx)
{
	__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(e + 1120)));
	__m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(e + 1136)));
	__m256i ms = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int p = 0; p < 4; p++)
		ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pk_pair(mn + 16 * p, false), bcast32(xs + 2 * p)));
	__m256 vdx = _mm256_set1_ps(dx);
	__m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum)),
				 _mm256_mul_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(ms)));
	return _mm256_add_ps(acc, t);
}

/* q4_K, C tokens (1..ROWS_MAX_TOKENS) over one packed group: per pair of
 * sub-blocks, each packed vector gives both sub-blocks' values of the 8
 * rows; their 16-bit products are summed over the sub-block before the
 * scale's vpmaddwd (8 x 3810 at most), the mins meet the 32-value sums. */
INL void pk4_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	const int8_t *xq[ROWS_MAX_TOKENS];
	const float *xd[ROWS_MAX_TOKENS];
	const int16_t *xs[ROWS_MAX_TOKENS];
	__m256 acc[ROWS_MAX_TOKENS];
	uint8_t sm[128] __attribute__((aligned(32)));    /* scales, then mins: [8 s + r] */
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q4_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = (const int16_t *)act_ext(a, t0 + c) + 8 * g->b0;
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K4;
		if (pf_k4 >= 0)
			for (int l = 0; l < PB_K4; l += 64)
				_mm_prefetch((const char *)e + pf_k4 * PB_K4 + l, _MM_HINT_T0);
		pk4_scales(e + 1024, sm, sm + 64);
		__asm__("" : "+m"(sm)); /* read them back from memory: broadcasts, not shuffles */
		__m256i isum[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
		/* unrolled, so each pf_spread's part is a constant: its hints have
		 * fixed offsets (a p counted at run time cost a dozen scalar
		 * operations a hint, on the ports the vectors need) */
#pragma GCC unroll 4
		for (int p = 0; p < 4; p++) {
			__m256i pl[ROWS_MAX_TOKENS], ph[ROWS_MAX_TOKENS];
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(e + 32 * (8 * p + j)));
				if (!(j & 1))
					pf_spread(e, PB_K4, 4 * p + j / 2, 16, false);
				__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t *x = xq[c] + 256 * sb + 64 * p + 4 * j;
					__m256i l = _mm256_maddubs_epi16(lo, bcast32(x)), h = _mm256_maddubs_epi16(hi, bcast32(x + 32));
					pl[c] = j ? _mm256_add_epi16(pl[c], l) : l;
					ph[c] = j ? _mm256_add_epi16(ph[c], h) : h;
					KEEP(pl[c]);
					KEEP(ph[c]);
				}
			}
			__m256i sl = pk_dup(sm + 16 * p, false), sh = pk_dup(sm + 16 * p + 8, false);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pl[c], sl),
										     _mm256_madd_epi16(ph[c], sh)));
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = pk4_step(acc[c], e, sm + 64, isum[c], xs[c] + 8 * sb, xd[c][sb]);
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

/* A packed q6_K block's f32 step for one token: the -32 offset through the
 * 16-value sums xs (32 x sum of scale x xs), then d x isum scaled by dx. */
INL __m256 pk6_step(__m256 acc, const uint8_t *e, __m256i isum, const int16_t *xs, float dx)
{
	__m256i cs = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int p = 0; p < 8; p++) {
		__m256i sp = pk_pair(e + 1536 + 16 * p, true);
		cs = _mm256_add_epi32(cs, _mm256_madd_epi16(sp, bcast32(xs + 2 * p)));
	}
	__m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(e + 1664)));
	__m256i s = _mm256_sub_epi32(isum, _mm256_slli_epi32(cs, 5));
	return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(s)));
}

/* q6_K, C tokens over one packed group: per 16-value sub-block, the 16-bit
 * products of two vectors at a time (2 x 16002 at most) before its scale;
 * the -32 offset through the 16-value sums. */
INL void pk6_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const int8_t *xq[ROWS_MAX_TOKENS];
	const float *xd[ROWS_MAX_TOKENS];
	const int16_t *xs[ROWS_MAX_TOKENS];
	__m256 acc[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q6_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = v.bs + 16 * g->b0;
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K6;
		if (pf_k6 >= 0)
			for (int l = 0; l < PB_K6; l += 64)
				_mm_prefetch((const char *)e + pf_k6 * PB_K6 + l, _MM_HINT_T0);
		__m256i isum[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int hq = 0; hq < 8; hq++) {
			const int h = hq / 4, q = hq % 4;
#pragma GCC unroll 2
			for (int u = 0; u < 2; u++) {
				pf_spread(e, PB_K6, 2 * hq + u, 16, false);
				__m256i sv = pk_dup(e + 1536 + 8 * (8 * h + 2 * q + u), true);
#pragma GCC unroll 2
				for (int jp = 0; jp < 2; jp++) {
					const int j = 4 * u + 2 * jp;
					__m256i w0 = pk6_values(e, h, q, j), w1 = pk6_values(e, h, q, j + 1);
#pragma GCC unroll 4
					for (int c = 0; c < C; c++) {
						const int8_t *x = xq[c] + 256 * sb + 128 * h + 32 * q + 4 * j;
						__m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast32(x)),
									     _mm256_maddubs_epi16(w1, bcast32(x + 4)));
						isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, sv));
					}
				}
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = pk6_step(acc[c], e, isum[c], xs[c] + 16 * sb, xd[c][sb]);
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

/* ---- prompts on packed weights: the expansions from the packed blocks ---- */

INL const uint8_t *pk_group(const mm_args *a, int64_t row0, int64_t b0)
{
	const int64_t pb = pk_block_bytes(a->wt), nb = a->k / dtype_block_elems(a->wt);
	return a->pw + row0 / GR * nb * pb + b0 * pb;
}

NOINL void expand_pq8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	(void)o0, (void)o1;
	const uint8_t *s = pk_group(a, row0, b0);
	for (int64_t b = 0; b < n; b++, e += EB_Q8, s += PB_Q8) {
		for (int p = 0; p < 16; p++)
			store8(e, p, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(s + 16 * p))));
		_mm256_storeu_ps((float *)(e + 512), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 256))));
	}
}

NOINL void expand_pk4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	(void)o0, (void)o1;
	const __m256i m4 = _mm256_set1_epi8(15);
	const uint8_t *s = pk_group(a, row0, b0);
	uint8_t sm[128] __attribute__((aligned(32)));
	for (int64_t b = 0; b < n; b++, e += EB_K4, s += PB_K4) {
		for (int p = 0; p < 4; p++)
			for (int j = 0; j < 8; j++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(s + 32 * (8 * p + j)));
				store8(e, 16 * p + j, _mm256_and_si256(v, m4));
				store8(e, 16 * p + 8 + j, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
			}
		pk4_scales(s + 1024, sm, sm + 64);
		__asm__("" : "+m"(sm));
		for (int i = 0; i < 8; i++)
			store8(e, 64 + i, pk_dup(sm + 8 * i, false));
		for (int p = 0; p < 4; p++)
			store8(e, 72 + p, pk_pair(sm + 64 + 16 * p, false));
		_mm256_storeu_ps((float *)(e + 76 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 1120))));
		_mm256_storeu_ps((float *)(e + 77 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 1136))));
	}
}

NOINL void expand_pk6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	(void)o0, (void)o1;
	const uint8_t *s = pk_group(a, row0, b0);
	for (int64_t b = 0; b < n; b++, e += EB_K6, s += PB_K6) {
		for (int hq = 0; hq < 8; hq++)
			for (int j = 0; j < 8; j++)
				store8(e, 8 * hq + j, pk6_values(s, hq / 4, hq % 4, j));
		for (int i = 0; i < 16; i++)
			store8(e, 64 + i, pk_dup(s + 1536 + 8 * i, true));
		for (int p = 0; p < 8; p++)
			store8(e, 80 + p, pk_pair(s + 1536 + 16 * p, true));
		_mm256_storeu_ps((float *)(e + 88 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 1664))));
	}
}

typedef void (*gtile_fn)(const mm_args *a, const gtile *g, int64_t t0);
#define GT(N, R, C, E) NOINL void gt_##N##_##R##_##C(const mm_args *a, const gtile *g, int64_t t0) { E; }
#define GT_Q8(R, C) GT(q8, R, C, q8_tile(a, g, t0, R, C, false))
#define GT_K(R, C) GT(k4, R, C, k_tile(a, g, t0, R, C, false)) GT(k6, R, C, k_tile(a, g, t0, R, C, true))
GT_Q8(1, 1) GT_Q8(1, 2) GT_Q8(1, 3) GT_Q8(1, 4) GT_Q8(1, 5) GT_Q8(1, 6) GT_Q8(2, 1) GT_Q8(2, 2) GT_Q8(2, 3)
GT_K(1, 1) GT_K(1, 2) GT_K(1, 3) GT_K(1, 4) GT_K(2, 1) GT_K(2, 2) GT_K(2, 3)
/* [groups - 1][tokens] */
static const gtile_fn gt_q8[2][TC_MAX + 1] = {
	{NULL, gt_q8_1_1, gt_q8_1_2, gt_q8_1_3, gt_q8_1_4, gt_q8_1_5, gt_q8_1_6},
	{NULL, gt_q8_2_1, gt_q8_2_2, gt_q8_2_3},
};
static const gtile_fn gt_k4[2][TC_MAX + 1] = {
	{NULL, gt_k4_1_1, gt_k4_1_2, gt_k4_1_3, gt_k4_1_4}, {NULL, gt_k4_2_1, gt_k4_2_2, gt_k4_2_3},
};
static const gtile_fn gt_k6[2][TC_MAX + 1] = {
	{NULL, gt_k6_1_1, gt_k6_1_2, gt_k6_1_3, gt_k6_1_4}, {NULL, gt_k6_2_1, gt_k6_2_2, gt_k6_2_3},
};

#define GT_Q8D1(C) VNOINL void gt_q8d_1_##C(const mm_args *a, const gtile *g, int64_t t0) { q8d1_tile(a, g, t0, C); }
#define GT_Q8D(C) VNOINL void gt_q8d_2_##C(const mm_args *a, const gtile *g, int64_t t0) { q8d_tile(a, g, t0, C); }
GT_Q8D1(1) GT_Q8D1(2) GT_Q8D1(3) GT_Q8D1(4) GT_Q8D1(5) GT_Q8D1(6)
GT_Q8D(1) GT_Q8D(2) GT_Q8D(3) GT_Q8D(4) GT_Q8D(5) GT_Q8D(6) GT_Q8D(7) GT_Q8D(8)
static const gtile_fn gt_q8d[2][TC_MAX + 1] = {
	{NULL, gt_q8d_1_1, gt_q8d_1_2, gt_q8d_1_3, gt_q8d_1_4, gt_q8d_1_5, gt_q8d_1_6},
	{NULL, gt_q8d_2_1, gt_q8d_2_2, gt_q8d_2_3, gt_q8d_2_4, gt_q8d_2_5, gt_q8d_2_6, gt_q8d_2_7, gt_q8d_2_8},
};

#define GT_KZ(C) VNOINL void gt_k4z_2_##C(const mm_args *a, const gtile *g, int64_t t0) { kz_tile(a, g, t0, C, false); } \
	VNOINL void gt_k6z_2_##C(const mm_args *a, const gtile *g, int64_t t0) { kz_tile(a, g, t0, C, true); }
GT_KZ(1) GT_KZ(2) GT_KZ(3) GT_KZ(4) GT_KZ(5) GT_KZ(6) GT_KZ(7) GT_KZ(8)
static const gtile_fn gt_k4z[2][TC_MAX + 1] = {
	{NULL, gt_k4_1_1, gt_k4_1_2, gt_k4_1_3, gt_k4_1_4},
	{NULL, gt_k4z_2_1, gt_k4z_2_2, gt_k4z_2_3, gt_k4z_2_4, gt_k4z_2_5, gt_k4z_2_6, gt_k4z_2_7, gt_k4z_2_8},
};
static const gtile_fn gt_k6z[2][TC_MAX + 1] = {
	{NULL, gt_k6_1_1, gt_k6_1_2, gt_k6_1_3, gt_k6_1_4},
	{NULL, gt_k6z_2_1, gt_k6z_2_2, gt_k6z_2_3, gt_k6z_2_4, gt_k6z_2_5, gt_k6z_2_6, gt_k6z_2_7, gt_k6z_2_8},
};

/* q4_K decoding where AVX-512 VNNI is: pk4_tile's packed group and integers
 * on 256-bit vpdpbusd (ports 0, 1 and 5 all take 256-bit work, 512-bit
 * would leave one idle). Each sub-block's 32 products are summed into the
 * row's dword by vpdpbusd (no 16-bit sums to widen); the high nibbles are
 * masked in place, not shifted, so they enter as 16 h and their scaled sums
 * are divided by 16 at the end (an arithmetic shift of a multiple of 16:
 * exact; 16 x 4 x 63 x 61440 < 2^31). Two vector operations per 32 bytes
 * and token instead of five; the same isum, so the same f32 step and bits. */
VINL void pk4v_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const __m256i m4 = _mm256_set1_epi8(15), mh = _mm256_set1_epi8((char)0xf0);
	const int8_t *xq[ROWS_MAX_TOKENS];
	const float *xd[ROWS_MAX_TOKENS];
	const int16_t *xs[ROWS_MAX_TOKENS];
	__m256 acc[ROWS_MAX_TOKENS];
	uint8_t sm[128] __attribute__((aligned(32)));    /* scales, then mins: [8 s + r] */
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q4_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = (const int16_t *)act_ext(a, t0 + c) + 8 * g->b0;
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K4;
		if (pf_k4 >= 0)
			for (int l = 0; l < PB_K4; l += 64)
				_mm_prefetch((const char *)e + pf_k4 * PB_K4 + l, _MM_HINT_T0);
		pk4_scales(e + 1024, sm, sm + 64);
		__asm__("" : "+m"(sm));
		__m256i il[ROWS_MAX_TOKENS], ih[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			il[c] = ih[c] = _mm256_setzero_si256();
		/* unrolled as in pk4_tile: bench_matvec --hot --type q4_k on the
		 * Xeon 30 -> 37-38 GB/s a core with it (pk4_tile: 28.6 -> 36) */
#pragma GCC unroll 4
		for (int p = 0; p < 4; p++) {
			__m256i dl[2][ROWS_MAX_TOKENS], dh[2][ROWS_MAX_TOKENS];   /* even and odd j: shorter chains */
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(e + 32 * (8 * p + j)));
				if (!(j & 1))
					pf_spread(e, PB_K4, 4 * p + j / 2, 16, false);
				__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(v, mh);
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t *x = xq[c] + 256 * sb + 64 * p + 4 * j;
					if (j < 2) {
						dl[j][c] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, bcast32(x));
						dh[j][c] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, bcast32(x + 32));
					} else {
						dl[j & 1][c] = _mm256_dpbusd_epi32(dl[j & 1][c], lo, bcast32(x));
						dh[j & 1][c] = _mm256_dpbusd_epi32(dh[j & 1][c], hi, bcast32(x + 32));
					}
				}
			}
			__m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p)));
			__m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p + 8)));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				il[c] = _mm256_add_epi32(il[c], _mm256_mullo_epi32(_mm256_add_epi32(dl[0][c], dl[1][c]), sl));
				ih[c] = _mm256_add_epi32(ih[c], _mm256_mullo_epi32(_mm256_add_epi32(dh[0][c], dh[1][c]), sh));
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = pk4_step(acc[c], e, sm + 64, _mm256_add_epi32(il[c], _mm256_srai_epi32(ih[c], 4)),
					  xs[c] + 8 * sb, xd[c][sb]);
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

#define PK4V(C) \
	VNOINL void gt_pk4v_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk4v_tile(a, g, t0, C); }
PK4V(1) PK4V(2) PK4V(3) PK4V(4)
static const gtile_fn gt_pk4v[ROWS_MAX_TOKENS + 1] = {
	NULL, gt_pk4v_1_1, gt_pk4v_1_2, gt_pk4v_1_3, gt_pk4v_1_4,
};

/* The 4 vectors of values 128h + 32q + 4j..+3 (q = 0..3) of a packed q6_K
 * block's rows, as pk6_values gives them one at a time, by bit selects
 * (vpternlogd 0xe4: bits 0-3 from ql, 4-7 from qh's part): qh is masked once
 * into the bits of q = 0 and 2 (0x33) and of q = 1 and 3 (0xcc), so a 16-bit
 * shift of either brings one q's bits to 4-5 with zeros above them. 11
 * operations for the 4 instead of about 20. */
VINL void pk6v_values(const uint8_t *e, int h, int j, __m256i w[4])
{
	const __m256i m33 = _mm256_set1_epi8(0x33), mcc = _mm256_set1_epi8((char)0xcc);
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i l0 = _mm256_loadu_si256((const __m256i *)(e + 32 * (16 * h + j)));
	__m256i l1 = _mm256_loadu_si256((const __m256i *)(e + 32 * (16 * h + 8 + j)));
	__m256i qh = _mm256_loadu_si256((const __m256i *)(e + 1024 + 32 * (8 * h + j)));
	__m256i ha = _mm256_and_si256(qh, m33), hb = _mm256_and_si256(qh, mcc);
	w[0] = _mm256_ternarylogic_epi32(l0, _mm256_slli_epi16(ha, 4), m4, 0xe4);
	w[1] = _mm256_ternarylogic_epi32(l1, _mm256_slli_epi16(hb, 2), m4, 0xe4);
	w[2] = _mm256_ternarylogic_epi32(_mm256_srli_epi16(l0, 4), ha, m4, 0xe4);
	w[3] = _mm256_ternarylogic_epi32(_mm256_srli_epi16(l1, 4), _mm256_srli_epi16(hb, 2), m4, 0xe4);
}

/* q6_K decoding where AVX-512 VNNI is: pk6_tile's packed group on 256-bit
 * vpdpbusd, each 16-value sub-block's products summed into the row's dword
 * (4 vectors), then times its scale. The same isum (at most 256 x 63 x
 * 127 x 128 < 2^31) and f32 step (pk6_step), so the same bits. */
VINL void pk6v_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const int8_t *xq[ROWS_MAX_TOKENS];
	const float *xd[ROWS_MAX_TOKENS];
	const int16_t *xs[ROWS_MAX_TOKENS];
	__m256 acc[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q6_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xs[c] = v.bs + 16 * g->b0;
		acc[c] = _mm256_setzero_ps();
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K6;
		if (pf_k6 >= 0)
			for (int l = 0; l < PB_K6; l += 64)
				_mm_prefetch((const char *)e + pf_k6 * PB_K6 + l, _MM_HINT_T0);
		__m256i isum[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int hu = 0; hu < 4; hu++) {
			const int h = hu / 2, u = hu % 2;
			__m256i dq[4][ROWS_MAX_TOKENS];   /* sub-blocks 8h + 2q + u */
#pragma GCC unroll 4
			for (int jj = 0; jj < 4; jj++) {
				const int j = 4 * u + jj;
				__m256i w[4];
				pf_spread(e, PB_K6, 8 * h + j, 16, false);
				pk6v_values(e, h, j, w);
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t *x = xq[c] + 256 * sb + 128 * h + 4 * j;
#pragma GCC unroll 4
					for (int q = 0; q < 4; q++) {
						__m256i d = jj ? dq[q][c] : _mm256_setzero_si256();
						dq[q][c] = _mm256_dpbusd_epi32(d, w[q], bcast32(x + 32 * q));
					}
				}
			}
#pragma GCC unroll 4
			for (int q = 0; q < 4; q++) {
				const uint8_t *sc = e + 1536 + 8 * (8 * h + 2 * q + u);
				__m256i sv = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc));
#pragma GCC unroll 4
				for (int c = 0; c < C; c++)
					isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dq[q][c], sv));
			}
		}
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			acc[c] = pk6_step(acc[c], e, isum[c], xs[c] + 16 * sb, xd[c][sb]);
	}
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

#define PK6V(C) \
	VNOINL void gt_pk6v_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk6v_tile(a, g, t0, C); }
PK6V(1) PK6V(2) PK6V(3) PK6V(4)
static const gtile_fn gt_pk6v[ROWS_MAX_TOKENS + 1] = {
	NULL, gt_pk6v_1_1, gt_pk6v_1_2, gt_pk6v_1_3, gt_pk6v_1_4,
};

/* Decoding tiles on packed groups, [type][tokens]. */
#define PT(C) GT(pq8, 1, C, q8_tile(a, g, t0, 1, C, true)) GT(pk4, 1, C, pk4_tile(a, g, t0, C)) \
	GT(pk6, 1, C, pk6_tile(a, g, t0, C))
PT(1) PT(2) PT(3) PT(4)
static const gtile_fn gt_dec[3][ROWS_MAX_TOKENS + 1] = {
	{NULL, gt_pq8_1_1, gt_pq8_1_2, gt_pq8_1_3, gt_pq8_1_4},
	{NULL, gt_pk4_1_1, gt_pk4_1_2, gt_pk4_1_3, gt_pk4_1_4},
	{NULL, gt_pk6_1_1, gt_pk6_1_2, gt_pk6_1_3, gt_pk6_1_4},
};
/* Where AVX-512 VNNI is (q8_0 keeps the AVX2 tile). */
static const gtile_fn *const gt_decv[3] = {gt_dec[0], gt_pk4v, gt_pk6v};

typedef void (*expand_fn)(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);

/* How a weight type's prompts run. */
typedef struct gplan {
	expand_fn expand, expand_packed;      /* from the stored rows, from the packed groups */
	const gtile_fn (*tiles)[TC_MAX + 1];  /* [groups - 1][tokens] */
	int tc[2];               /* tokens per tile over one and two groups */
	int64_t chunk_blocks;    /* blocks per k-chunk */
	int64_t x_bytes;         /* activation bytes per token and block that a tile reads */
	bool paired;             /* both groups in one expansion, the second's halves 32 bytes in */
} gplan;

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

/* Decoding (at most DECODE_MAX_TOKENS tokens) on packed weights: group after
 * group of [o0, o1), one sequential stream per thread; a group's tiles of up
 * to ROWS_MAX_TOKENS tokens run one after another while its bytes (8 rows,
 * 64 KiB at k = 14336) are still in L2, so the weights leave memory once for
 * all the batch's sequences and no expansion is paid for a few tokens. */
TARGET static void packed_decode(const mm_args *a, const gtile_fn *tiles, int64_t t0, int64_t t1, int64_t o0,
				 int64_t o1)
{
	gtile g = {.b0 = 0, .nb = a->k / dtype_block_elems(a->wt), .first = true};
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR) {
		g.row0 = row0;
		g.e[0] = pk_group(a, row0, 0);
		g.keep[0] = lanes((int)(MAX(o0, row0) - row0), (int)(MIN(o1, row0 + GR) - row0));
		g.full[0] = row0 >= o0 && row0 + GR <= o1;
		for (int64_t t = t0; t < t1;) {
			int c = (int)MIN(ROWS_MAX_TOKENS, t1 - t);
			tiles[c](a, &g, t);
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
	if (qx_matmul(a, t0, t1, o0, o1))
		return;
	int q = a->wt == DT_Q8_0 ? 0 : a->wt == DT_Q4_0 ? 1 : a->wt == DT_Q4_K ? 2 : a->wt == DT_Q5_K ? 3
	      : a->wt == DT_Q6_K ? 4 : -1;
	if (q < 0) {
		float_matmul(a, t0, t1, o0, o1);
		return;
	}
	int gi = q == 0 ? 0 : q == 2 ? 1 : q == 4 ? 2 : -1;
	if (gi >= 0 && a->pw && t1 > t0 && t1 - t0 <= DECODE_MAX_TOKENS) {
		packed_decode(a, has_vnni ? gt_decv[gi] : gt_dec[gi], t0, t1, o0, o1);
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
 * not unroll left them), each step waited on a store and its reload and
 * the spin ran at half the rate. The volatile barrier keeps the unused
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
