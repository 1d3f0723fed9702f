/* kernels/cpu/avx2_group.c: the AVX2 set's prompts on q8_0, q4_K and q6_K
 * weights: groups of 8 weight rows expanded once per token block and
 * k-chunk, and the tiles of tokens that run over the expansions.
 *
 * group_matmul (avx2.c) expands the rows of its range two groups at a time,
 * from the stored rows (expand_q8, _k4, _k6) or from the packed layout
 * (expand_pq8, _pk4, _pk6), into vectors that hold 4 consecutive values of
 * each of the 8 rows (lanes are rows), with the rows' scales beside them in
 * the form the tiles apply them; the expansions of two groups stay in L1
 * while the tiles of the block's tokens pass over them (gt_q8, gt_k4,
 * gt_k6, the AVX2 route of the plans in avx2.c). The expansion costs once
 * per block what every token's tile would otherwise pay: unpacking nibbles,
 * gathering 8 rows, widening scales. */
#include "kernels/cpu/avx2_int.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* ---- prompts: groups of 8 weight rows expanded once per token block ---- */


/* q8_0 blocks [b0, b0 + n) of the group: per block, vector p holds values
 * 2p, 2p + 1 of each row as int16, then the rows' scales. */
NOINL_EXT void expand_q8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
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
NOINL_EXT void expand_k4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t s0, int64_t n)
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
NOINL_EXT void expand_k6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t s0, int64_t n)
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
	const int8_t *xq[TC_K];
	const float *xd[TC_K];
	const int16_t *xs[TC_K];    /* q4_K: 32-value sums; q6_K: 16-value sums */
	__m256 acc[2][TC_K];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		k_token(a, g, t0 + c, q6, &xq[c], &xd[c], &xs[c]);
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

/* ---- prompts on packed weights: the expansions from the packed blocks ---- */

NOINL_EXT void expand_pq8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
{
	(void)o0, (void)o1;
	const uint8_t *s = pk_group(a, row0, b0);
	for (int64_t b = 0; b < n; b++, e += EB_Q8, s += PB_Q8) {
		for (int p = 0; p < 16; p++)
			store8(e, p, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(s + 16 * p))));
		_mm256_storeu_ps((float *)(e + 512), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 256))));
	}
}

NOINL_EXT void expand_pk4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
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
		pk4_scales(s, sm);
		for (int i = 0; i < 8; i++)
			store8(e, 64 + i, pk_dup(sm + 8 * i, false));
		for (int p = 0; p < 4; p++)
			store8(e, 72 + p, pk_pair(sm + 64 + 16 * p, false));
		_mm256_storeu_ps((float *)(e + 76 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 1120))));
		_mm256_storeu_ps((float *)(e + 77 * 32), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 1136))));
	}
}

NOINL_EXT void expand_pk6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
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

#define GT_Q8(R, C) GT(q8, R, C, q8_tile(a, g, t0, R, C, false))
#define GT_K(R, C) GT(k4, R, C, k_tile(a, g, t0, R, C, false)) GT(k6, R, C, k_tile(a, g, t0, R, C, true))
/* the one-group ones are the VNNI plans' too (avx2_vnni.c) */
#define GT_K1(C) NOINL_EXT GT_FN(k4, 1, C) { k_tile(a, g, t0, 1, C, false); } \
	NOINL_EXT GT_FN(k6, 1, C) { k_tile(a, g, t0, 1, C, true); }
GT_Q8(1, 1) GT_Q8(1, 2) GT_Q8(1, 3) GT_Q8(1, 4) GT_Q8(1, 5) GT_Q8(1, 6) GT_Q8(2, 1) GT_Q8(2, 2) GT_Q8(2, 3)
GT_K1(1) GT_K1(2) GT_K1(3) GT_K1(4) GT_K(2, 1) GT_K(2, 2) GT_K(2, 3)
/* [groups - 1][tokens] */
const gtile_fn gt_q8[2][TC_MAX + 1] = {
	{NULL, gt_q8_1_1, gt_q8_1_2, gt_q8_1_3, gt_q8_1_4, gt_q8_1_5, gt_q8_1_6},
	{NULL, gt_q8_2_1, gt_q8_2_2, gt_q8_2_3},
};
const gtile_fn gt_k4[2][TC_MAX + 1] = {
	{NULL, gt_k4_1_1, gt_k4_1_2, gt_k4_1_3, gt_k4_1_4}, {NULL, gt_k4_2_1, gt_k4_2_2, gt_k4_2_3},
};
const gtile_fn gt_k6[2][TC_MAX + 1] = {
	{NULL, gt_k6_1_1, gt_k6_1_2, gt_k6_1_3, gt_k6_1_4}, {NULL, gt_k6_2_1, gt_k6_2_2, gt_k6_2_3},
};

#endif
