/* kernels/cpu/avx2_qx.c: the AVX2 set's kernels for q4_1, q5_0, q5_1,
 * iq4_nl, q2_K, q3_K, iq4_xs and packed q5_K (kernels/cpu/avx2_qx.h).
 *
 * Layout. Weights are read as groups of 8 rows interleaved, the AVX2 set's
 * packed idea (avx2.c, "packed weights"): per weight block, the 8 rows'
 * blocks in exactly their stored bytes (so packing costs no memory over
 * the stored rows), rearranged so that one 32-byte load gives the same 4
 * bytes of every row (dword r = row r), values decode with a few whole-
 * vector operations and no per-weight branch, and every 32-bit lane of the
 * integer sums is one row's. Per type (offsets in the 8-row block):
 *   q4_1 (160)   nibbles: vector j = bytes 4j..4j+3 of qs (low nibbles values
 *                4j.., high 16+4j..); d[8] at 128, m[8] at 144 (f16)
 *   q5_0 (176)   nibbles; at 128 the fifth bits, bit g of byte b of a row's
 *                dword the bit of value 4g + b; d[8] at 160
 *   q5_1 (192)   as q5_0, then m[8] at 176
 *   iq4_nl (144) nibbles; d[8] at 128
 *   q2_K (672)   vector 8h + c = qs bytes 32h + 4c.. (values 128h + 32j +
 *                4c.. at bits 2j); scales as 16 planes of 8 rows at 512;
 *                d[8] at 640, dmin[8] at 656
 *   q3_K (880)   rearranged: per c (0..7) three vectors A, B, C at 96c, byte
 *                b of row r's dword holding the 8 values 128h + 32j + 4c + b
 *                (slot 4h + j) as A = u0 | u1 << 3 | low2(6) << 6, B = u2 |
 *                u3 << 3 | low2(7) << 6, C = u4 | u5 << 3 | hbit(6) << 6 |
 *                hbit(7) << 7 (u = q + 4, 0..7: two low bits and the hmask
 *                bit as bit 2), so each value decodes with one mask (slots 6
 *                and 7 three operations); the 12 scale bytes as planes at
 *                768; d[8] at 864
 *   iq4_xs (1088) vector 4s + j = qs bytes 16s + 4j.. (sub-block s); planes
 *                of scales_l[0..3] at 1024, of scales_h's low and high byte at
 *                1056; d[8] at 1072
 *   q5_K (1408)  vector 8p + j = qs bytes 32p + 4j.. (low nibbles sub-block
 *                2p, high 2p + 1); vector j of qh bytes 4j.. at 1024; the 12
 *                header bytes as planes at 1280; d[8] at 1376, dmin[8] at 1392
 * Weights not packed at load are packed the same way a k-chunk of a group
 * at a time into a buffer on the stack, so there is one set of kernels.
 *
 * Arithmetic. Each output is quant_dot_qact's chain: the exact integer sum
 * of each block (each super-block, its integer sub-block scales applied),
 * then its f32 step, block after block, with its multiplies and adds as
 * there (fused for the 32-value formats, separate for the k-quants).
 * The integer sums are formed two ways (cpu_vnni_routes): with AVX-512 VNNI
 * by 256-bit vpdpbusd (unsigned weight bytes by signed activation bytes,
 * four products into each row's dword; iq4 tables shifted to unsigned by 128
 * and 128 times the activation sum taken back), else by vpmaddubsw into
 * 16-bit sums of as many vectors as cannot overflow, then vpmaddwd with the
 * sub-block scales (iq4: |T| by the activation with T's sign). The same
 * integers either way, so the same bits. Tiles run C tokens over one group
 * (the group's bytes decoded once for the C of them); decoding takes the
 * groups of a thread's rows one after another in one sequential stream with
 * L2 prefetch hints ahead of it; prompts (and stored weights) go by token
 * blocks and k-chunks as the AVX2 set's grouped prompts do, each chain
 * going on from the last chunk through y. The route-specific tiles come
 * from kernels/cpu/avx2_qx_tiles.h, compiled once per route. */
#include "kernels/cpu/avx2_qx.h"

#include <string.h>

enum { QX_Q4_1, QX_Q5_0, QX_Q5_1, QX_IQ4_NL, QX_Q2_K, QX_Q3_K, QX_IQ4_XS, QX_Q5_K, QX_N };

static int qx_index(enum dtype t)
{
	switch (t) {
	case DT_Q4_1: return QX_Q4_1;
	case DT_Q5_0: return QX_Q5_0;
	case DT_Q5_1: return QX_Q5_1;
	case DT_IQ4_NL: return QX_IQ4_NL;
	case DT_Q2_K: return QX_Q2_K;
	case DT_Q3_K: return QX_Q3_K;
	case DT_IQ4_XS: return QX_IQ4_XS;
	case DT_Q5_K: return QX_Q5_K;
	default: return -1;
	}
}

bool qx_takes(enum dtype t)
{
	return qx_index(t) >= 0;
}

#define GR 8     /* rows per packed group */

/* ---- packing ---- */

/* Dwords [0, n) of each row's block from off, transposed: vector j (32 bytes
 * at e + 32j) holds row r's dword j at 4r (zeros for absent rows). */
static void pk_dwords(uint8_t *e, const uint8_t *const bp[GR], int off, int n)
{
	for (int j = 0; j < n; j++)
		for (int r = 0; r < GR; r++) {
			if (bp[r])
				memcpy(e + 32 * j + 4 * r, bp[r] + off + 4 * j, 4);
			else
				memset(e + 32 * j + 4 * r, 0, 4);
		}
}

/* Bytes [off, off + n) of each row's block as planes: e[8i + r]. */
static void pk_planes(uint8_t *e, const uint8_t *const bp[GR], int off, int n)
{
	for (int i = 0; i < n; i++)
		for (int r = 0; r < GR; r++)
			e[8 * i + r] = bp[r] ? bp[r][off + i] : 0;
}

/* The 16-bit field at off of each row's block: e[2r..2r+1]. */
static void pk_f16(uint8_t *e, const uint8_t *const bp[GR], int off)
{
	for (int r = 0; r < GR; r++) {
		if (bp[r])
			memcpy(e + 2 * r, bp[r] + off, 2);
		else
			memset(e + 2 * r, 0, 2);
	}
}

/* q5_0/q5_1: the 32 fifth bits of each row (qh at off) as its dword: bit g
 * of byte b is the bit of value 4g + b. */
static void pk_q5_bits(uint8_t *e, const uint8_t *const bp[GR], int off)
{
	for (int r = 0; r < GR; r++) {
		uint32_t h = 0;
		if (bp[r])
			memcpy(&h, bp[r] + off, 4);
		for (int b = 0; b < 4; b++) {
			uint8_t v = 0;
			for (int g = 0; g < 8; g++)
				v |= (uint8_t)(((h >> (4 * g + b)) & 1) << g);
			e[4 * r + b] = v;
		}
	}
}

/* q3_K's values of 8 rows as the A, B, C vectors of each c (above). */
static void pk_q3_values(uint8_t *e, const uint8_t *const bp[GR])
{
	for (int c = 0; c < 8; c++)
		for (int r = 0; r < GR; r++)
			for (int b = 0; b < 4; b++) {
				int l = 4 * c + b, u[8] = {0}, lo[8] = {0}, hb[8] = {0};
				for (int slot = 0; bp[r] && slot < 8; slot++) {
					int h = slot / 4, j = slot % 4;
					lo[slot] = (bp[r][32 + 32 * h + l] >> (2 * j)) & 3;   /* qs */
					hb[slot] = (bp[r][l] >> (4 * h + j)) & 1;             /* hmask */
					u[slot] = lo[slot] | hb[slot] << 2;
				}
				uint8_t *p = e + 96 * c + 4 * r + b;
				p[0] = (uint8_t)(u[0] | u[1] << 3 | lo[6] << 6);
				p[32] = (uint8_t)(u[2] | u[3] << 3 | lo[7] << 6);
				p[64] = (uint8_t)(u[4] | u[5] << 3 | hb[6] << 6 | hb[7] << 7);
			}
}

/* One block of 8 rows (bp[r]: row r's block, NULL when absent) into e. */
static void pk_block(uint8_t *e, const uint8_t *const bp[GR], int qi)
{
	switch (qi) {
	case QX_Q4_1: pk_dwords(e, bp, 4, 4); pk_f16(e + 128, bp, 0); pk_f16(e + 144, bp, 2); break;
	case QX_Q5_0: pk_dwords(e, bp, 6, 4); pk_q5_bits(e + 128, bp, 2); pk_f16(e + 160, bp, 0); break;
	case QX_Q5_1:
		pk_dwords(e, bp, 8, 4);
		pk_q5_bits(e + 128, bp, 4);
		pk_f16(e + 160, bp, 0);
		pk_f16(e + 176, bp, 2);
		break;
	case QX_IQ4_NL: pk_dwords(e, bp, 2, 4); pk_f16(e + 128, bp, 0); break;
	case QX_Q2_K:
		pk_dwords(e, bp, 16, 16);
		pk_planes(e + 512, bp, 0, 16);
		pk_f16(e + 640, bp, 80);
		pk_f16(e + 656, bp, 82);
		break;
	case QX_Q3_K:
		pk_q3_values(e, bp);
		pk_planes(e + 768, bp, 96, 12);
		pk_f16(e + 864, bp, 108);
		break;
	case QX_IQ4_XS:
		pk_dwords(e, bp, 8, 32);
		pk_planes(e + 1024, bp, 4, 4);
		pk_planes(e + 1056, bp, 2, 2);
		pk_f16(e + 1072, bp, 0);
		break;
	default: /* q5_K */
		pk_dwords(e, bp, 48, 32);
		pk_dwords(e + 1024, bp, 16, 8);
		pk_planes(e + 1280, bp, 4, 12);
		pk_f16(e + 1376, bp, 0);
		pk_f16(e + 1392, bp, 2);
		break;
	}
}

/* Blocks [b0, b0 + nb) of the group of rows from row0, the rows of
 * [r_lo, r_hi) present, into e (nb packed blocks). */
static void pk_group_blocks(uint8_t *e, const uint8_t *w, int64_t ldw, enum dtype t, int64_t row0, int64_t r_lo,
			    int64_t r_hi, int64_t b0, int64_t nb)
{
	const int64_t pb = GR * dtype_block_bytes(t), bb = dtype_block_bytes(t);
	const int qi = qx_index(t);
	for (int64_t b = 0; b < nb; b++, e += pb) {
		const uint8_t *bp[GR];
		for (int r = 0; r < GR; r++) {
			int64_t o = row0 + r;
			bp[r] = o >= r_lo && o < r_hi ? w + o * ldw + (b0 + b) * bb : NULL;
		}
		pk_block(e, bp, qi);
	}
}

int64_t qx_pack_bytes(enum dtype t, int64_t k, int64_t n_out)
{
	if (!qx_takes(t))
		return 0;
	return (n_out + GR - 1) / GR * (k / dtype_block_elems(t)) * GR * dtype_block_bytes(t);
}

void qx_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0, int64_t o1)
{
	const int64_t nb = k / dtype_block_elems(t), pb = GR * dtype_block_bytes(t);
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR)
		pk_group_blocks(dst + row0 / GR * nb * pb, w, dtype_row_bytes(t, k), t, row0, 0, n_out, 0, nb);
}

/* ---- activations ---- */

int64_t qx_act_extra(enum dtype wt, int64_t k)
{
	return wt == DT_Q4_1 || wt == DT_Q5_1 ? (k / 32 * 4 + 63) & ~(int64_t)63 : 0;
}

void qx_act_fill(enum dtype wt, void *dst, int64_t k)
{
	if (!qx_act_extra(wt, k))
		return;
	qact_view v = qact_view_of(wt, dst, k);
	float *xs = (float *)((uint8_t *)dst + qact_row_bytes(wt, k));
	for (int64_t i = 0; i < k / 32; i++)
		xs[i] = v.d[i] * (float)-v.ns[i];
}

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define VTARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni,avx512bw,avx512dq")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET
#define VINL static inline __attribute__((always_inline)) VTARGET
#define VNOINL static __attribute__((noinline)) VTARGET

/* Tokens up to which packed weights are decoded group after group (as the
 * AVX2 set's packed decoding), in tiles of TC_DEC. */
#define DECODE_MAX_TOKENS 16
#define TC_DEC 4
#define TC_MAX 8
/* Values per k-chunk of a prompt's groups, and the activation bytes a token
 * block keeps in L2 for one chunk. */
#define CHUNK_VALUES 1024
#define CHUNK_BYTES (CHUNK_VALUES / 32 * 192)   /* the largest packed chunk: q5_1's */
#define X_BLOCK_BYTES (256 * 1024)
/* Decoding hints each 64 bytes of a group's stream this far ahead into L2
 * (the AVX2 set's pf_far, measured there on the Xeon). */
#define PF_FAR 18432

/* What a tile over one group needs to know. */
typedef struct qtile {
	const uint8_t *e;        /* the group's packed blocks [b0, b0 + nb) */
	int64_t b0, nb;
	int64_t row0;            /* the group's first row */
	__m256i keep;            /* the lanes (rows) to store */
	bool full;               /* all 8: plain loads and stores */
	bool first;              /* the chain starts here (else it goes on from y) */
	int64_t pfd;             /* how far ahead the prefetch hints go (PF_FAR
	                          * decoding; 0 for prompts: the lines at hand,
	                          * which costs a load slot, not a branch) */
} qtile;

typedef void (*qtile_fn)(const mm_args *a, const qtile *g, int64_t t0);

INL __m256 acc_begin(const mm_args *a, const qtile *g, int64_t t)
{
	if (g->first)
		return _mm256_setzero_ps();
	float *y = a->y + t * a->ldy + g->row0;
	return g->full ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, g->keep);
}

INL void acc_end(const mm_args *a, const qtile *g, int64_t t, __m256 acc)
{
	float *y = a->y + t * a->ldy + g->row0;
	if (g->full)
		_mm256_storeu_ps(y, acc);
	else
		_mm256_maskstore_ps(y, g->keep, acc);
}

INL __m256i ld(const uint8_t *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

INL __m256i bcast32(const void *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

INL __m256 f16x8(const uint8_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* A 16-bit shift of every lane by n bits, left for n > 0 (n a constant). */
INL __m256i shl16(__m256i v, const int n)
{
	return n > 0 ? _mm256_slli_epi16(v, n) : n < 0 ? _mm256_srli_epi16(v, -n) : v;
}

/* The iq4 table in both 128-bit lanes, plus add (0, or 128 for unsigned bytes). */
INL __m256i iq4_table(int add)
{
	int8_t t[16];
	for (int i = 0; i < 16; i++)
		t[i] = (int8_t)(quant_iq4_values[i] + add);
	return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* Words [b_r, b_r] in dword r for the 8 bytes b at p (signed: sign-extended). */
INL __m256i pk_dup(const uint8_t *p, bool is_signed)
{
	int64_t v;
	memcpy(&v, p, 8);
	__m256i x = _mm256_set1_epi64x(v);
	if (is_signed)
		return _mm256_srai_epi16(_mm256_shuffle_epi8(x, _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2,
			-1, 3, -1, 3, -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7)), 8);
	return _mm256_shuffle_epi8(x, _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
						       4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1));
}

/* Words [a_r, b_r] in dword r for the bytes a (8 at p) and b (the next 8). */
INL __m256i pk_pair(const uint8_t *p, bool is_signed)
{
	__m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
	char z = -1;
	if (is_signed)
		return _mm256_srai_epi16(_mm256_shuffle_epi8(v, _mm256_setr_epi8(z, 0, z, 8, z, 1, z, 9, z, 2, z, 10,
			z, 3, z, 11, z, 4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15)), 8);
	return _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, z, 8, z, 1, z, 9, z, 2, z, 10, z, 3, z, 11, z,
						       4, z, 12, z, 5, z, 13, z, 6, z, 14, z, 7, z, 15, z));
}

/* Part i of n of the hints for the block of pb bytes whose lines are hinted
 * at e: one for each multiple of 64 in [i pb / n, (i + 1) pb / n), so all of
 * them are (i, n and pb are constants where this is inlined). after: a
 * vector the hints wait for, so that they stay spread over the block's
 * reads (the compiler otherwise issues them all at its start: a burst of
 * up to 22 that streamed q5_K and iq4_xs at about 71% of the read pass in
 * bench_matvec, against q4_K's 91%, on a loaded machine). */
INL void pf_part(const uint8_t *e, const int pb, const int i, const int n, __m256i after)
{
	for (int o = (i * pb / n + 63) / 64 * 64; o < (i + 1) * pb / n; o += 64)
		__asm__ volatile("prefetcht2 %0" : : "m"(*(const char *)(e + o)), "x"(after));
}

/* Each block's dx sum(x) (f32) of token t's row, after the qact part (q4_1,
 * q5_1: qx_act_fill), and the 32-value sums of q5_K's (the AVX2 set's). */
INL const float *act_sums(const mm_args *a, int64_t t)
{
	return (const float *)(a->qa + t * a->lda + qact_row_bytes(a->wt, a->k));
}

INL const int16_t *act_sums32(const mm_args *a, int64_t t)
{
	return (const int16_t *)(a->qa + t * a->lda + qact_row_bytes(a->wt, a->k));
}

/* The 16 scales of a packed q3_K block's 8 rows, less 32, as int8 at sc[8 s + r]. */
INL void q3_scales(const uint8_t *planes, int8_t *sc)
{
	const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
	__m256i A = ld(planes), B = ld(planes + 32), H = ld(planes + 64);
	__m256i v[4] = {
		_mm256_or_si256(_mm256_and_si256(A, m15), _mm256_slli_epi16(_mm256_and_si256(H, m3), 4)),
		_mm256_or_si256(_mm256_and_si256(B, m15),
				_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2), m3), 4)),
		_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m15),
				_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 4), m3), 4)),
		_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m15),
				_mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 6), m3), 4)),
	};
	for (int i = 0; i < 4; i++)
		_mm256_storeu_si256((__m256i *)(sc + 32 * i), _mm256_sub_epi8(v[i], k32));
}

/* The 8 scales of a packed iq4_xs block's rows, less 32, as int8: sub-block
 * s at sc[32 (s % 2) + 8 (s / 2) + r]. */
INL void xs_scales(const uint8_t *planes, int8_t *sc)
{
	const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
	__m256i L = ld(planes);
	__m256i H = _mm256_permute4x64_epi64(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(planes + 32))),
					     0x50);   /* [h_lo, h_lo, h_hi, h_hi] */
	__m256i he = _mm256_and_si256(_mm256_srlv_epi64(H, _mm256_setr_epi64x(0, 4, 0, 4)), m3);
	__m256i ho = _mm256_and_si256(_mm256_srlv_epi64(H, _mm256_setr_epi64x(2, 6, 2, 6)), m3);
	__m256i ev = _mm256_or_si256(_mm256_and_si256(L, m15), _mm256_slli_epi16(he, 4));
	__m256i od = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m15), _mm256_slli_epi16(ho, 4));
	_mm256_storeu_si256((__m256i *)sc, _mm256_sub_epi8(ev, k32));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_sub_epi8(od, k32));
}

/* The 6-bit scales and mins of a packed q5_K block's 8 rows (the q4_K
 * header's planes): sc[8 s + r], mn[8 s + r]. */
INL void k5_scales(const uint8_t *planes, uint8_t *sc, uint8_t *mn)
{
	const __m256i m63 = _mm256_set1_epi8(63), m15 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
	__m256i y0 = ld(planes), y1 = ld(planes + 32), y2 = ld(planes + 64);
	_mm256_storeu_si256((__m256i *)sc, _mm256_and_si256(y0, m63));
	_mm256_storeu_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(y2, m15),
								   _mm256_and_si256(_mm256_srli_epi16(y0, 2), m30)));
	_mm256_storeu_si256((__m256i *)mn, _mm256_and_si256(y1, m63));
	_mm256_storeu_si256((__m256i *)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y2, 4), m15),
								   _mm256_and_si256(_mm256_srli_epi16(y1, 2), m30)));
}

/* The tiles, per route: _a with vpmaddubsw, _v with vpdpbusd. */
#define QX_V 0
#define QI INL
#define QN NOINL
#define QX(n) n##_a
#define QX_TC 4
#include "kernels/cpu/avx2_qx_tiles.h"
#undef QX_V
#undef QI
#undef QN
#undef QX
#undef QX_TC
#define QX_V 1
#define QI VINL
#define QN VNOINL
#define QX(n) n##_v
#define QX_TC 8
#include "kernels/cpu/avx2_qx_tiles.h"

/* Tokens per tile over one group for prompts, per route and type. */
static const int tc_a[QX_N] = {4, 4, 4, 4, 4, 4, 4, 4};
static const int tc_v[QX_N] = {8, 8, 8, 8, 6, 6, 6, 4};

INL const uint8_t *pk_group(const mm_args *a, int64_t row0, int64_t b0)
{
	const int64_t pb = GR * dtype_block_bytes(a->wt), nb = a->k / dtype_block_elems(a->wt);
	return a->pw + row0 / GR * nb * pb + b0 * pb;
}

/* Lanes [lo, hi) of 8. */
INL __m256i lanes(int lo, int hi)
{
	__m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}

INL void set_rows(qtile *g, int64_t row0, int64_t o0, int64_t o1)
{
	g->row0 = row0;
	g->keep = lanes((int)(MAX(o0, row0) - row0), (int)(MIN(o1, row0 + GR) - row0));
	g->full = row0 >= o0 && row0 + GR <= o1;
}

/* Decoding on packed weights: the groups of [o0, o1) one after another (one
 * sequential stream), each group's tiles of up to TC_DEC tokens while its
 * bytes are in L2. */
TARGET static void qx_decode(const mm_args *a, const qtile_fn *tiles, int64_t t0, int64_t t1, int64_t o0,
			     int64_t o1)
{
	qtile g = {.b0 = 0, .nb = a->k / dtype_block_elems(a->wt), .first = true, .pfd = PF_FAR};
	for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR) {
		g.e = pk_group(a, row0, 0);
		set_rows(&g, row0, o0, o1);
		for (int64_t t = t0; t < t1;) {
			int c = (int)MIN(TC_DEC, t1 - t);
			tiles[c](a, &g, t);
			t += c;
		}
	}
}

/* Prompts, and stored weights: token blocks whose activations (one k-chunk
 * of them) stay in L2; per block and chunk, each group of [o0, o1) (packed
 * here first when the weights are stored) under tiles of tc tokens. */
TARGET static void qx_prompt(const mm_args *a, const qtile_fn *tiles, int tc, int64_t t0, int64_t t1, int64_t o0,
			     int64_t o1)
{
	uint8_t buf[CHUNK_BYTES] __attribute__((aligned(64)));
	const int64_t be = dtype_block_elems(a->wt), nb = a->k / be, cb = MAX(1, CHUNK_VALUES / be);
	const int64_t tb = MAX(tc, X_BLOCK_BYTES / (cb * be + 64) / tc * tc);
	for (int64_t b0 = t0; b0 < t1; b0 += tb) {
		int64_t b1 = MIN(t1, b0 + tb);
		for (int64_t c0 = 0; c0 < nb; c0 += cb) {
			qtile g = {.b0 = c0, .nb = MIN(cb, nb - c0), .first = c0 == 0, .pfd = 0};
			for (int64_t row0 = o0 / GR * GR; row0 < o1; row0 += GR) {
				if (a->pw) {
					g.e = pk_group(a, row0, c0);
				} else {
					pk_group_blocks(buf, a->w, a->ldw, a->wt, row0, o0, o1, c0, g.nb);
					g.e = buf;
				}
				set_rows(&g, row0, o0, o1);
				for (int64_t t = b0; t < b1;) {
					int c = (int)MIN(tc, b1 - t);
					tiles[c](a, &g, t);
					t += c;
				}
			}
		}
	}
}

_Static_assert(CHUNK_VALUES / 32 * 192 >= CHUNK_VALUES / 256 * 1408, "a chunk's packed blocks fit the buffer");

bool qx_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1, bool v)
{
	int qi = qx_index(a->wt);
	if (qi < 0 || (qi == QX_Q5_K && !a->pw))
		return false;
	if (t1 <= t0 || o1 <= o0)
		return true;
	const qtile_fn *tiles = v ? tiles_v[qi] : tiles_a[qi];
	if (a->pw && t1 - t0 <= DECODE_MAX_TOKENS)
		qx_decode(a, tiles, t0, t1, o0, o1);
	else
		qx_prompt(a, tiles, v ? tc_v[qi] : tc_a[qi], t0, t1, o0, o1);
	return true;
}

#else

bool qx_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1, bool v)
{
	(void)a, (void)t0, (void)t1, (void)o0, (void)o1, (void)v;
	return false;
}

#endif
