/* kernels/cpu/avx2_pack.c: the AVX2 set's packed layout for q8_0, q4_K and
 * q6_K weights, made once at load, and decoding on it.
 *
 * Packed weights: 8 rows interleaved. A group of 8 rows (rows past the
 * matrix are zero) keeps its blocks in k order; each block holds the 8
 * rows' data so that one 32-byte load gives 4 consecutive values of every
 * row (the lanes of the group kernels), and the block is exactly as large
 * as the 8 rows' stored blocks:
 *   q8_0 (272 bytes): per value pair p, 16 bytes [row 0: v2p, v2p+1, row 1: ...]
 *        (vpmovsxbw makes the 16-bit vectors), then the 8 f16 scales;
 *   q4_K (1152): per pair of sub-blocks p and 4 bytes j, a vector whose dword r
 *        is row r's qs[32p + 4j..+3] (low nibbles: sub-block 2p, high: 2p + 1),
 *        then the 12 header bytes as planes of 8 rows, d[8], dmin[8];
 *   q6_K (1680): ql as q4_K's qs (4 chunks of 32), qh (2 halves of 32) the
 *        same way, the 16 scales as planes of 8 rows, d[8].
 * Decoding (packed_decode in avx2.c) runs the tiles here group after group,
 * each reading its group straight from this layout: no expansion to pay
 * for a few tokens, and one sequential stream per thread. Prompts expand
 * the packed groups as they do stored rows (avx2_group.c); the VNNI
 * decoding tiles read the same layout (avx2_vnni.c). */
#include "kernels/cpu/avx2_int.h"
#include "kernels/cpu/avx2_qx.h"

#if defined(__x86_64__) && defined(__GNUC__)

/* ---- the layout ---- */

int64_t avx2_pack_bytes(enum dtype t, int64_t k, int64_t n_out)
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

TARGET void avx2_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0,
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

/* ---- decoding on packed weights ---- */

/* Decoding streams each thread's packed groups once per token, with
 * prefetch hints that suit the core (set once, by avx2_prefetch_tune):
 * - AMD: a burst for a whole block pf_* blocks ahead (-1: none): q4_K 8
 *   ahead, q6_K 6 ahead (its scales sit after its values, and without the
 *   hints the stream stalls on them); q8_0 none (it streams slower with
 *   them).
 * - elsewhere: spread over the block, one hint per 64 bytes read
 *   (pf_spread), for the line pf_far bytes ahead into L2 (prefetcht2) and,
 *   for q8_0 with pf_near_q8, for the next block's line into L1. Spread
 *   hints beat bursts there at every distance tried; pf_far sits inside
 *   the range that works (4.5 to 36 KiB ahead); the L1 hints help q8_0 and
 *   cost q4_K and q6_K, so only q8_0 takes them. */
int pf_k4 = 8, pf_k6 = 6, pf_q8 = -1, pf_far = -1;
bool pf_near_q8;

void avx2_prefetch_tune(void)
{
	if (!__builtin_cpu_is("amd")) {
		pf_k4 = pf_k6 = pf_q8 = -1;
		pf_far = 18432;
		pf_near_q8 = true;
	}
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
	pk_begin(a, g, t0, C, false, xq, xd, xs, acc);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e[0] + sb * PB_K4;
		if (pf_k4 >= 0)
			for (int l = 0; l < PB_K4; l += 64)
				_mm_prefetch((const char *)e + pf_k4 * PB_K4 + l, _MM_HINT_T0);
		pk4_scales(e, sm);
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
	pk_end(a, g, t0, C, acc);
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
	pk_end(a, g, t0, C, acc);
}

/* Decoding tiles on packed groups, [type][tokens]. */
#define PT(C) GT(pq8, 1, C, q8_tile(a, g, t0, 1, C, true)) GT(pk4, 1, C, pk4_tile(a, g, t0, C)) \
	GT(pk6, 1, C, pk6_tile(a, g, t0, C))
PT(1) PT(2) PT(3) PT(4)
const gtile_fn gt_dec[3][ROWS_MAX_TOKENS + 1] = {
	{NULL, gt_pq8_1_1, gt_pq8_1_2, gt_pq8_1_3, gt_pq8_1_4},
	{NULL, gt_pk4_1_1, gt_pk4_1_2, gt_pk4_1_3, gt_pk4_1_4},
	{NULL, gt_pk6_1_1, gt_pk6_1_2, gt_pk6_1_3, gt_pk6_1_4},
};

#endif
