/* kernels/cpu/avx2_int.h: what the files of the AVX2 kernel set share;
 * private to kernels/cpu/avx2*.c.
 *
 * The AVX2 set (simd.h) is one set in five files, one subject each:
 *  - avx2.c: its entry points, float weights, decoding on stored rows, the
 *    activations, and which route takes a matmul (the dispatch tables);
 *  - avx2_group.c: prompts on groups of 8 weight rows expanded per k-chunk;
 *  - avx2_pack.c: the packed 8-row layout made at load, and decoding on it;
 *  - avx2_vnni.c: the routes on AVX-512 VNNI's vpdpbusd, where the CPU has it;
 *  - avx2_attn.c: attention.
 * Here: the inline helpers that more than one of them uses (always inlined,
 * so each kernel compiles as if they were written in it), the sizes of the
 * layouts, the tile over groups (gtile) and how a type's prompts run
 * (gplan), and the tiles and tables the files hand each other. */
#ifndef PAGECHAT_CPU_AVX2_INT_H
#define PAGECHAT_CPU_AVX2_INT_H

#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET
/* NOINL for what another file of the set calls or takes (declared below). */
#define NOINL_EXT __attribute__((noinline)) TARGET

/* Tokens a call may have for the one-row-at-a-time kernels (and the
 * decoding tiles on packed groups). */
#define ROWS_MAX_TOKENS 4
/* Tokens per q8_0, q4_K and q6_K decoding tile on vpdpbusd (avx2_vnni.c):
 * a block's weights are made ready once for all of them. */
#define DEC_TC 8
/* Weight rows per expanded or packed group (the lanes of a vector). */
#define GR 8

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

/* ---- expanded groups of 8 weight rows (avx2_group.c, avx2_vnni.c) ---- */

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
/* Tokens per tile over one group (TC_*) and over two (TC2_*). */
#define TC_Q8 6
#define TC2_Q8 3
#define TC_K 4
#define TC_MAX 8   /* the most of any (the tile tables' width) */
#define TC2_K 3
/* The VNNI prompts (avx2_vnni.c): q8_0's expansion of a pair of groups, and
 * the tiles' tokens. */
#define EB_Q8D 640        /* a pair of groups' block: 512 value, 64 scale, 64 offset bytes */
#define CHUNK_Q8D 1024
#define TC_Q8D1 6         /* tokens per tile over one group (256-bit) */
#define TC_Q8D 8          /* over a pair (512-bit) */
#define TC_KZ 8           /* k-quant tokens per tile over two groups */

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

/* ---- tiles over groups ---- */

/* What a tile over one or two expanded groups needs to know. */
typedef struct gtile {
	const uint8_t *e[2];     /* the groups' expansions of blocks [b0, b0 + nb) */
	int64_t b0, nb;
	int64_t row0;            /* the first group's first row (the second's is row0 + 8) */
	__m256i keep[2];         /* lanes (rows) of each group to store */
	bool full[2];            /* all 8 lanes: plain loads and stores (masked
	                          * stores are slow on AMD cores) */
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

/* Token t's k-quant activations from the tile's first block (g->b0) on: its
 * int8 values, block scales and sums (q4_K: of each 32 values, the set's
 * own data; q6_K: of each 16, the qact part's). */
INL void k_token(const mm_args *a, const gtile *g, int64_t t, const bool q6, const int8_t **xq, const float **xd,
		 const int16_t **xs)
{
	qact_view v = qact_view_of(q6 ? DT_Q6_K : DT_Q4_K, a->qa + t * a->lda, a->k);
	*xq = v.q + 256 * g->b0;
	*xd = v.d + g->b0;
	*xs = q6 ? v.bs + 16 * g->b0 : (const int16_t *)act_ext(a, t) + 8 * g->b0;
}

/* Keeps v in a register as it is: integer sums the compiler would otherwise
 * re-associate into trees of spilled partial sums. */
#define KEEP(v) __asm__("" : "+x"(v))

typedef void (*gtile_fn)(const mm_args *a, const gtile *g, int64_t t0);
/* Tile function gt_N_R_C (R groups, C tokens), running E. */
#define GT_FN(N, R, C) void gt_##N##_##R##_##C(const mm_args *a, const gtile *g, int64_t t0)
#define GT(N, R, C, E) NOINL GT_FN(N, R, C) { E; }
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

/* ---- decoding prefetch hints ---- */

/* Their distances (avx2_pack.c, set by avx2_prefetch_tune). */
extern int pf_k4, pf_k6, pf_q8, pf_far;
extern bool pf_near_q8;
void avx2_prefetch_tune(void);

/* Part i of n of the hints for the block of eb bytes at e: one for each
 * offset o that is a multiple of 64 in [i eb / n, (i + 1) eb / n), so the
 * block's ceil(eb / 64) hints, 64 bytes apart, leave no line between them
 * or the next block's first one unhinted (eb, i and n are constants where
 * it is inlined: 0 to 2 hints each). Hints at i eb / n itself would leave
 * lines out where the parts are longer than 64 bytes (2 of q4_K's 18 lines
 * a block, 10 of q6_K's 27), and the stream slows at every line left out.
 * near: the next block's lines into L1 too. */
INL void pf_spread(const uint8_t *e, int64_t eb, int i, int n, bool near)
{
	for (int64_t o = (i * eb / n + 63) / 64 * 64; o < (i + 1) * eb / n; o += 64) {
		if (pf_far >= 0)
			_mm_prefetch((const char *)e + pf_far + o, _MM_HINT_T2);
		if (near)
			_mm_prefetch((const char *)e + eb + o, _MM_HINT_T0);
	}
}

/* ---- the packed layout (avx2_pack.c; read by avx2_group.c and avx2_vnni.c) ---- */

/* Bytes of a packed block of 8 rows. */
#define PB_Q8 272
#define PB_K4 1152
#define PB_K6 1680

static inline int64_t pk_block_bytes(enum dtype t)
{
	return t == DT_Q8_0 ? PB_Q8 : t == DT_Q4_K ? PB_K4 : t == DT_Q6_K ? PB_K6 : 0;
}

/* The packed blocks from b0 of the group whose first row is row0. */
INL const uint8_t *pk_group(const mm_args *a, int64_t row0, int64_t b0)
{
	const int64_t pb = pk_block_bytes(a->wt), nb = a->k / dtype_block_elems(a->wt);
	return a->pw + row0 / GR * nb * pb + b0 * pb;
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

/* A packed q4_K block e's 8 rows' 6-bit scales and mins from its header
 * planes: sm[8 s + r] and sm[64 + 8 s + r] for sub-block s and row r. Left
 * in memory (the empty asm), so that the readers load them back as
 * broadcasts rather than shuffle them out of registers. */
INL void pk4_scales(const uint8_t *e, uint8_t sm[128])
{
	const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	const uint8_t *planes = e + 1024;
	uint8_t *sc = sm, *mn = sm + 64;
	__m256i y0 = _mm256_loadu_si256((const __m256i *)planes);
	__m256i y1 = _mm256_loadu_si256((const __m256i *)(planes + 32));
	__m256i y2 = _mm256_loadu_si256((const __m256i *)(planes + 64));
	_mm256_storeu_si256((__m256i *)sc, _mm256_and_si256(y0, m63));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(y2, m15),
								   _mm256_and_si256(_mm256_srli_epi16(y0, 2), m30)));
	_mm256_storeu_si256((__m256i *)mn, _mm256_and_si256(y1, m63));
	_mm256_storeu_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y2, 4), m15),
								   _mm256_and_si256(_mm256_srli_epi16(y1, 2), m30)));
	__asm__("" : "+m"(*(uint8_t(*)[128])sm));
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

/* A packed q4_K block's f32 step for one token: the mins (mn, the second
 * half of what pk4_scales leaves) meet the 32-value sums xs, then d x isum -
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

/* The steps that the q4_K and q6_K decoding tiles of C tokens
 * (1..ROWS_MAX_TOKENS) over one packed group share (pk4_tile and pk6_tile
 * in avx2_pack.c, pk4v_tile and pk6v_tile in avx2_vnni.c: they differ in
 * how they form a block's integer sums). A tile takes its tokens'
 * activations and starts their chains from zero (pk_begin); per block it
 * gives AMD's hints (the whole block pf_k4 or pf_k6 blocks ahead: written
 * in each tile, as GCC lays out the block loop otherwise when that loop is
 * a helper's, an instruction more a block), forms the integer sums and
 * takes each token's f32 step (pk4_step, pk6_step); at the end it stores
 * the chains (pk_end). */
INL void pk_begin(const mm_args *a, const gtile *g, int64_t t0, const int C, const bool q6, const int8_t **xq,
		  const float **xd, const int16_t **xs, __m256 *acc)
{
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		k_token(a, g, t0 + c, q6, &xq[c], &xd[c], &xs[c]);
		acc[c] = _mm256_setzero_ps();
	}
}

INL void pk_end(const mm_args *a, const gtile *g, int64_t t0, const int C, const __m256 *acc)
{
#pragma GCC unroll 4
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, 0, acc[c]);
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

/* ---- what the files hand each other ---- */

/* avx2_group.c: the expansions and the AVX2 prompt tiles, [groups - 1][tokens]. */
void expand_q8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_k4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_k6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_pq8(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_pk4(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_pk6(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
extern const gtile_fn gt_q8[2][TC_MAX + 1], gt_k4[2][TC_MAX + 1], gt_k6[2][TC_MAX + 1];
/* the one-group k-quant tiles, which the VNNI plans use too */
GT_FN(k4, 1, 1); GT_FN(k4, 1, 2); GT_FN(k4, 1, 3); GT_FN(k4, 1, 4);
GT_FN(k6, 1, 1); GT_FN(k6, 1, 2); GT_FN(k6, 1, 3); GT_FN(k6, 1, 4);

/* avx2_pack.c: the layout and its decoding tiles, [type][tokens]. */
int64_t avx2_pack_bytes(enum dtype t, int64_t k, int64_t n_out);
void avx2_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0, int64_t o1);
extern const gtile_fn gt_dec[3][ROWS_MAX_TOKENS + 1];

/* avx2_vnni.c: the vpdpbusd expansions and tiles (as above). */
void expand_q8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
void expand_pq8d(uint8_t *e, const mm_args *a, int64_t row0, int64_t o0, int64_t o1, int64_t b0, int64_t n);
extern const gtile_fn gt_q8d[2][TC_MAX + 1], gt_k4z[2][TC_MAX + 1], gt_k6z[2][TC_MAX + 1];
/* The packed decoding tiles on vpdpbusd: q8_0 over two groups (pq8w) and
 * one (pq8v), q4_K and q6_K over one. */
extern const gtile_fn gt_pq8w[DEC_TC + 1], gt_pq8v[DEC_TC + 1], gt_pk4v[DEC_TC + 1], gt_pk6v[DEC_TC + 1];

/* avx2_attn.c: cpu_kernels.attend and its chunked decoding. */
void avx2_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq, const kern_attn *a,
		 const int32_t *table, const int32_t *n_ctx, int kv_head);
int avx2_attend_chunk_keys(const kern_attn *a);
void avx2_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
		       int c);
void avx2_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a);

#endif
#endif
