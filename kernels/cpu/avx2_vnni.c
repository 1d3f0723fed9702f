/* kernels/cpu/avx2_vnni.c: the AVX2 set's routes on AVX-512 VNNI, taken
 * where the CPU has it (cpu_vnni_routes, avx2.c): q8_0, q4_K and q6_K
 * prompts on 512-bit vpdpbusd over pairs of groups, and q8_0, q4_K and q6_K
 * decoding on 256-bit vpdpbusd over the packed layout.
 *
 * vpdpbusd sums four 8-bit products into each 32-bit lane: one instruction
 * where the AVX2 tiles (avx2_group.c, avx2_pack.c) need vpmaddubsw or
 * vpmaddwd, then vpaddd. Every tile here forms the same exact integer sums
 * as the AVX2 tile it stands in for and takes the same f32 steps after
 * them, so a matmul has the same bits on either route; the plans and tables
 * that pick the route are in avx2.c. Compiled for AVX-512 (VTARGET), called
 * only where the CPU has it. */
#include "kernels/cpu/avx2_int.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define VTARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni,avx512bw,avx512dq")))
#define VINL static inline __attribute__((always_inline)) VTARGET
#define VNOINL static __attribute__((noinline)) VTARGET
#define VNOINL_EXT __attribute__((noinline)) VTARGET

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
 * halves start 32 g bytes in. On Intel's 512-bit units (ports 0 and 5)
 * every other vector operation competes with vpdpbusd, so the chains start
 * from memory, the activations are broadcast from memory and the tile has
 * no shuffles: per block and token 8 vpdpbusd and 4 f32 operations. */

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

VNOINL_EXT void expand_q8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
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

/* From the packed layout: its vector j holds pairs 2j and 2j + 1 of the 8
 * rows as two 128-bit halves; interleaving their words gives the dwords. */
VNOINL_EXT void expand_pq8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n)
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

/* Token t's activations from the tile's first block on: as x + 128, and
 * the block scales. */
INL void q8d_token(const mm_args *a, const gtile *g, int64_t t, const uint8_t **xu, const float **xd)
{
	*xu = act_u8(a, t) + 32 * g->b0;
	*xd = qact_view_of(DT_Q8_0, a->qa + t * a->lda, a->k).d + g->b0;
}

/* C tokens over the first group alone (the range's last, odd group). */
VINL void q8d1_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const uint8_t *xu[TC_Q8D1];
	const float *xd[TC_Q8D1];
	__m256 acc[TC_Q8D1];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		q8d_token(a, g, t0 + c, &xu[c], &xd[c]);
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
		q8d_token(a, g, t0 + c, &xu[c], &xd[c]);
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

VINL void kz_tile(const mm_args *a, const gtile *g, int64_t t0, const int C, const bool q6)
{
	const int NS = q6 ? 16 : 8, SV = q6 ? 4 : 8, EB = q6 ? EB_K6 : EB_K4;
	const int8_t *xq[TC_KZ];
	const float *xd[TC_KZ];
	const int16_t *xs[TC_KZ];   /* q4_K: 32-value sums; q6_K: 16-value sums */
	__m512 acc[TC_KZ];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		k_token(a, g, t0 + c, q6, &xq[c], &xd[c], &xs[c]);
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

#define GT_Q8D1(C) VNOINL void gt_q8d_1_##C(const mm_args *a, const gtile *g, int64_t t0) { q8d1_tile(a, g, t0, C); }
#define GT_Q8D(C) VNOINL void gt_q8d_2_##C(const mm_args *a, const gtile *g, int64_t t0) { q8d_tile(a, g, t0, C); }
GT_Q8D1(1) GT_Q8D1(2) GT_Q8D1(3) GT_Q8D1(4) GT_Q8D1(5) GT_Q8D1(6)
GT_Q8D(1) GT_Q8D(2) GT_Q8D(3) GT_Q8D(4) GT_Q8D(5) GT_Q8D(6) GT_Q8D(7) GT_Q8D(8)
const gtile_fn gt_q8d[2][TC_MAX + 1] = {
	{NULL, gt_q8d_1_1, gt_q8d_1_2, gt_q8d_1_3, gt_q8d_1_4, gt_q8d_1_5, gt_q8d_1_6},
	{NULL, gt_q8d_2_1, gt_q8d_2_2, gt_q8d_2_3, gt_q8d_2_4, gt_q8d_2_5, gt_q8d_2_6, gt_q8d_2_7, gt_q8d_2_8},
};

#define GT_KZ(C) VNOINL void gt_k4z_2_##C(const mm_args *a, const gtile *g, int64_t t0) { kz_tile(a, g, t0, C, false); } \
	VNOINL void gt_k6z_2_##C(const mm_args *a, const gtile *g, int64_t t0) { kz_tile(a, g, t0, C, true); }
GT_KZ(1) GT_KZ(2) GT_KZ(3) GT_KZ(4) GT_KZ(5) GT_KZ(6) GT_KZ(7) GT_KZ(8)
const gtile_fn gt_k4z[2][TC_MAX + 1] = {
	{NULL, gt_k4_1_1, gt_k4_1_2, gt_k4_1_3, gt_k4_1_4},
	{NULL, gt_k4z_2_1, gt_k4z_2_2, gt_k4z_2_3, gt_k4z_2_4, gt_k4z_2_5, gt_k4z_2_6, gt_k4z_2_7, gt_k4z_2_8},
};
const gtile_fn gt_k6z[2][TC_MAX + 1] = {
	{NULL, gt_k6_1_1, gt_k6_1_2, gt_k6_1_3, gt_k6_1_4},
	{NULL, gt_k6z_2_1, gt_k6z_2_2, gt_k6z_2_3, gt_k6z_2_4, gt_k6z_2_5, gt_k6z_2_6, gt_k6z_2_7, gt_k6z_2_8},
};

/* ---- decoding on packed weights with vpdpbusd ---- */

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
	pk_begin(a, g, t0, C, false, xq, xd, xs, acc);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K4;
		if (pf_k4 >= 0)
			for (int l = 0; l < PB_K4; l += 64)
				_mm_prefetch((const char *)e + pf_k4 * PB_K4 + l, _MM_HINT_T0);
		pk4_scales(e, sm);
		__m256i il[ROWS_MAX_TOKENS], ih[ROWS_MAX_TOKENS];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			il[c] = ih[c] = _mm256_setzero_si256();
		/* unrolled as in pk4_tile, so that pf_spread's parts are constants */
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
	pk_end(a, g, t0, C, acc);
}

/* pk4v_tile for up to DEC_TC tokens: a batch's tokens share each packed
 * vector's two masks and the block's scales. To keep 8 tokens' chains in
 * registers each token has one chain per nibble half (not pk4v_tile's two)
 * and one running sum: 16 x (low sum x scale) + (high sum, which is 16 x
 * its own, x scale), divided by 16 at the block's end, which is pk4v_tile's
 * il + ih / 16 exactly (every term a multiple of 16; at most 2 x 16 x 4 x 63
 * x 61440 < 2^31). The same isum, so the same f32 step and bits. */
VINL void pk4w_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const __m256i m4 = _mm256_set1_epi8(15), mh = _mm256_set1_epi8((char)0xf0);
	const int8_t *xq[DEC_TC];
	const float *xd[DEC_TC];
	const int16_t *xs[DEC_TC];
	__m256 acc[DEC_TC];
	uint8_t sm[128] __attribute__((aligned(32)));    /* scales, then mins: [8 s + r] */
	pk_begin(a, g, t0, C, false, xq, xd, xs, acc);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K4;
		if (pf_k4 >= 0)
			for (int l = 0; l < PB_K4; l += 64)
				_mm_prefetch((const char *)e + pf_k4 * PB_K4 + l, _MM_HINT_T0);
		pk4_scales(e, sm);
		__m256i is16[DEC_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			is16[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int p = 0; p < 4; p++) {
			__m256i dl[DEC_TC], dh[DEC_TC];
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(e + 32 * (8 * p + j)));
				if (!(j & 1))
					pf_spread(e, PB_K4, 4 * p + j / 2, 16, false);
				__m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(v, mh);
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					const int8_t *x = xq[c] + 256 * sb + 64 * p + 4 * j;
					dl[c] = _mm256_dpbusd_epi32(j ? dl[c] : _mm256_setzero_si256(), lo, bcast32(x));
					dh[c] = _mm256_dpbusd_epi32(j ? dh[c] : _mm256_setzero_si256(), hi, bcast32(x + 32));
				}
			}
			__m256i sl = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p))), 4);
			__m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p + 8)));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				is16[c] = _mm256_add_epi32(is16[c], _mm256_add_epi32(_mm256_mullo_epi32(dl[c], sl),
										     _mm256_mullo_epi32(dh[c], sh)));
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[c] = pk4_step(acc[c], e, sm + 64, _mm256_srai_epi32(is16[c], 4), xs[c] + 8 * sb, xd[c][sb]);
	}
	pk_end(a, g, t0, C, acc);
}

/* q4_K decoding tiles: pk4v_tile up to 4 tokens (its two chains per nibble
 * half ran faster there), pk4w_tile from 5 to DEC_TC (fewer registers a
 * token; faster at 8 and 16 sequences than runs of pk4v_tile). */
#define PK4V(C) \
	VNOINL void gt_pk4v_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk4v_tile(a, g, t0, C); }
#define PK4W(C) \
	VNOINL void gt_pk4w_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk4w_tile(a, g, t0, C); }
PK4V(1) PK4V(2) PK4V(3) PK4V(4) PK4W(5) PK4W(6) PK4W(7) PK4W(8)
const gtile_fn gt_pk4v[DEC_TC + 1] = {
	NULL, gt_pk4v_1_1, gt_pk4v_1_2, gt_pk4v_1_3, gt_pk4v_1_4, gt_pk4w_1_5, gt_pk4w_1_6, gt_pk4w_1_7, gt_pk4w_1_8,
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
	pk_begin(a, g, t0, C, true, xq, xd, xs, acc);
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
	pk_end(a, g, t0, C, acc);
}

/* pk6v_values' vector for one q alone: the same bit selects. */
VINL __m256i pk6v_value(const uint8_t *e, int h, int j, int q)
{
	const __m256i m4 = _mm256_set1_epi8(15);
	__m256i l = _mm256_loadu_si256((const __m256i *)(e + 32 * (16 * h + 8 * (q & 1) + j)));
	__m256i qh = _mm256_loadu_si256((const __m256i *)(e + 1024 + 32 * (8 * h + j)));
	__m256i hx = _mm256_and_si256(qh, _mm256_set1_epi8((char)(q & 1 ? 0xcc : 0x33)));
	switch (q) {
	case 0: return _mm256_ternarylogic_epi32(l, _mm256_slli_epi16(hx, 4), m4, 0xe4);
	case 1: return _mm256_ternarylogic_epi32(l, _mm256_slli_epi16(hx, 2), m4, 0xe4);
	case 2: return _mm256_ternarylogic_epi32(_mm256_srli_epi16(l, 4), hx, m4, 0xe4);
	default: return _mm256_ternarylogic_epi32(_mm256_srli_epi16(l, 4), _mm256_srli_epi16(hx, 2), m4, 0xe4);
	}
}

/* pk6v_tile for up to DEC_TC tokens: one q at a time (its 4 vectors over
 * the sub-block pair's 4 j), so that a token holds one chain and one sum
 * rather than four chains. The same sums, so the same bits. */
VINL void pk6w_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const int8_t *xq[DEC_TC];
	const float *xd[DEC_TC];
	const int16_t *xs[DEC_TC];
	__m256 acc[DEC_TC];
	pk_begin(a, g, t0, C, true, xq, xd, xs, acc);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K6;
		if (pf_k6 >= 0)
			for (int l = 0; l < PB_K6; l += 64)
				_mm_prefetch((const char *)e + pf_k6 * PB_K6 + l, _MM_HINT_T0);
		__m256i isum[DEC_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int hu = 0; hu < 4; hu++) {
			const int h = hu / 2, u = hu % 2;
#pragma GCC unroll 4
			for (int jj = 0; jj < 4; jj++)
				pf_spread(e, PB_K6, 8 * h + 4 * u + jj, 16, false);
#pragma GCC unroll 4
			for (int q = 0; q < 4; q++) {
				__m256i dq[DEC_TC];   /* sub-block 8h + 2q + u */
#pragma GCC unroll 4
				for (int jj = 0; jj < 4; jj++) {
					const int j = 4 * u + jj;
					__m256i w = pk6v_value(e, h, j, q);
#pragma GCC unroll 8
					for (int c = 0; c < C; c++) {
						const int8_t *x = xq[c] + 256 * sb + 128 * h + 4 * j + 32 * q;
						dq[c] = _mm256_dpbusd_epi32(jj ? dq[c] : _mm256_setzero_si256(), w, bcast32(x));
					}
				}
				const uint8_t *sc = e + 1536 + 8 * (8 * h + 2 * q + u);
				__m256i sv = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc));
#pragma GCC unroll 8
				for (int c = 0; c < C; c++)
					isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dq[c], sv));
			}
		}
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			acc[c] = pk6_step(acc[c], e, isum[c], xs[c] + 16 * sb, xd[c][sb]);
	}
	pk_end(a, g, t0, C, acc);
}

/* q6_K decoding tiles: pk6v_tile up to 4 tokens, pk6w_tile from 5. */
#define PK6V(C) \
	VNOINL void gt_pk6v_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk6v_tile(a, g, t0, C); }
#define PK6W(C) \
	VNOINL void gt_pk6w_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pk6w_tile(a, g, t0, C); }
PK6V(1) PK6V(2) PK6V(3) PK6V(4) PK6W(5) PK6W(6) PK6W(7) PK6W(8)
const gtile_fn gt_pk6v[DEC_TC + 1] = {
	NULL, gt_pk6v_1_1, gt_pk6v_1_2, gt_pk6v_1_3, gt_pk6v_1_4, gt_pk6w_1_5, gt_pk6w_1_6, gt_pk6w_1_7, gt_pk6w_1_8,
};

/* ---- q8_0 decoding on packed weights with vpdpbusd ---- */

/* q8_0 decoding where AVX-512 VNNI is, C tokens (1..DEC_TC) over one packed
 * group: q8_tile's integers on 256-bit vpdpbusd. Per block, each packed
 * vector (pairs 2j and 2j + 1 of the 8 rows, as two 128-bit halves) becomes
 * [row r: values 4j..4j+3] by one word permutation, and the rows' sums of w
 * (vpdpbusd with ones) give each chain its start, -128 sum w, as in the
 * prompt tiles: with the activations in as x + 128 the chain ends at sum x
 * w exactly. That is done once per block for all C tokens, which then take
 * 8 vpdpbusd each where q8_tile takes 16 vpmaddwd and 16 vpaddd: a batch of
 * decoding sequences (or a draft being verified) runs on the weights' one
 * pass instead of on the arithmetic. The same isum and f32 step, so the
 * same bits. */
VINL void pq8v_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const __m256i idx = _mm256_setr_epi16(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
	const __m256i ones = _mm256_set1_epi8(1);
	const uint8_t *xu[DEC_TC];
	const float *xd[DEC_TC];
	__m256 acc[DEC_TC];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		q8d_token(a, g, t0 + c, &xu[c], &xd[c]);
		acc[c] = acc_begin(a, g, t0 + c, 0);
	}
	for (int64_t b = 0; b < g->nb; b++) {
		const uint8_t *e = g->e[0] + b * PB_Q8;
		__m256i w[8], sw = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			if (!(j & 1))
				pf_spread(e, PB_Q8, j / 2, 4, pf_near_q8);
			w[j] = _mm256_permutexvar_epi16(idx, _mm256_loadu_si256((const __m256i *)(e + 32 * j)));
			sw = _mm256_dpbusd_epi32(sw, ones, w[j]);
		}
		const __m256i off = _mm256_slli_epi32(sw, 7);
		const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(e + 256)));
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j += 2) {
				i0 = _mm256_dpbusd_epi32(i0, bcast32(xu[c] + 32 * b + 4 * j), w[j]);
				i1 = _mm256_dpbusd_epi32(i1, bcast32(xu[c] + 32 * b + 4 * j + 4), w[j + 1]);
			}
			__m256i is = _mm256_sub_epi32(_mm256_add_epi32(i0, i1), off);
			acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(xd[c] + b)),
								      _mm256_cvtepi32_ps(is)));
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
}

/* pq8v_tile over two packed groups at once (rows 0-7 in the low half of
 * each 512-bit vector, 8-15 in the high half): the same integers and f32
 * steps lane for lane, half the instructions per multiply-add. On a Zen 4,
 * whose units split 512-bit work into two halves (so the arithmetic is the
 * same), it ran well ahead of pq8v_tile at 8 and 16 tokens: there the
 * instructions, not the arithmetic, were the limit (docs/performance.md). */
VINL void pq8w_tile(const mm_args *a, const gtile *g, int64_t t0, const int C)
{
	const __m512i idx = _mm512_setr_epi32(0x00080000, 0x00090001, 0x000a0002, 0x000b0003, 0x000c0004,
					      0x000d0005, 0x000e0006, 0x000f0007, 0x00180010, 0x00190011,
					      0x001a0012, 0x001b0013, 0x001c0014, 0x001d0015, 0x001e0016,
					      0x001f0017);
	const __m512i ones = _mm512_set1_epi8(1);
	const uint8_t *xu[DEC_TC];
	const float *xd[DEC_TC];
	__m512 acc[DEC_TC];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		q8d_token(a, g, t0 + c, &xu[c], &xd[c]);
		acc[c] = acc2_begin(a, g, t0 + c);
	}
	for (int64_t b = 0; b < g->nb; b++) {
		const uint8_t *e0 = g->e[0] + b * PB_Q8, *e1 = g->e[1] + b * PB_Q8;
		__m512i w[8], sw = _mm512_setzero_si512();
#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			if (!(j & 1)) {
				pf_spread(e0, PB_Q8, j / 2, 4, pf_near_q8);
				pf_spread(e1, PB_Q8, j / 2, 4, pf_near_q8);
			}
			w[j] = _mm512_permutexvar_epi16(idx, load2(e0 + 32 * j, e1 + 32 * j));
			sw = _mm512_dpbusd_epi32(sw, ones, w[j]);
		}
		const __m512i off = _mm512_slli_epi32(sw, 7);
		const __m512 dw = _mm512_cvtph_ps(_mm256_inserti128_si256(
			_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(e0 + 256))),
			_mm_loadu_si128((const __m128i *)(e1 + 256)), 1));
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int j = 0; j < 8; j += 2) {
				int32_t v0, v1;
				memcpy(&v0, xu[c] + 32 * b + 4 * j, 4);
				memcpy(&v1, xu[c] + 32 * b + 4 * j + 4, 4);
				i0 = _mm512_dpbusd_epi32(i0, _mm512_set1_epi32(v0), w[j]);
				i1 = _mm512_dpbusd_epi32(i1, _mm512_set1_epi32(v1), w[j + 1]);
			}
			__m512i is = _mm512_sub_epi32(_mm512_add_epi32(i0, i1), off);
			acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b])),
								      _mm512_cvtepi32_ps(is)));
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc2_end(a, g, t0 + c, acc[c]);
}

#define PQ8W(C) \
	VNOINL void gt_pq8w_2_##C(const mm_args *a, const gtile *g, int64_t t0) { pq8w_tile(a, g, t0, C); }
PQ8W(1) PQ8W(2) PQ8W(3) PQ8W(4) PQ8W(5) PQ8W(6) PQ8W(7) PQ8W(8)
const gtile_fn gt_pq8w[DEC_TC + 1] = {
	NULL, gt_pq8w_2_1, gt_pq8w_2_2, gt_pq8w_2_3, gt_pq8w_2_4, gt_pq8w_2_5, gt_pq8w_2_6, gt_pq8w_2_7, gt_pq8w_2_8,
};

#define PQ8V(C) \
	VNOINL void gt_pq8v_1_##C(const mm_args *a, const gtile *g, int64_t t0) { pq8v_tile(a, g, t0, C); }
PQ8V(1) PQ8V(2) PQ8V(3) PQ8V(4) PQ8V(5) PQ8V(6) PQ8V(7) PQ8V(8)
const gtile_fn gt_pq8v[DEC_TC + 1] = {
	NULL, gt_pq8v_1_1, gt_pq8v_1_2, gt_pq8v_1_3, gt_pq8v_1_4, gt_pq8v_1_5, gt_pq8v_1_6, gt_pq8v_1_7, gt_pq8v_1_8,
};

#endif
