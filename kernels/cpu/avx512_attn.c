/* kernels/cpu/avx512_attn.c: the AVX-512 set's attention (cpu_kernels.attend
 * and its chunked decoding), for K/V rows in f32, f16, q8 and fp8.
 *
 * Up to 4 queries of one sequence against one KV head at a time (a decoding
 * step's grouped-query heads share the K and V loads), in 16-lane vectors
 * that cover the head: keys in segments of ATT_SEG with one online-softmax
 * step each, and in chunks of ATT_CHUNK, each from a fresh state, folded in
 * order, so a query's bits do not depend on its group or on how its chunks
 * were split across threads. Heads past KERN_MAX_HEAD_DIM take the portable
 * code. With a sliding window (kern_attn.window) a query's keys start at
 * attn_first_key: segments and chunks keep their places (multiples of
 * ATT_SEG and ATT_CHUNK from position 0), those before a query's first key
 * are passed over for it and its first segment leaves the earlier keys out,
 * so every route still takes the same segments in the same order. */
#include "kernels/cpu/avx512_int.h"
#include "kernels/kvq.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <math.h>
#include <string.h>

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

/* Lanes k and up of 16 (all for k <= 0, none for k >= 16). */
INL __mmask16 mask_from(int k)
{
	return k <= 0 ? (__mmask16)0xFFFF : k >= 16 ? (__mmask16)0 : (__mmask16)(0xFFFFu << k);
}

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
	int32_t max_ctx = 0, first[4], min_first = INT32_MAX;
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
		first[i] = attn_first_key(a, n_ctx[i]);
		min_first = MIN(min_first, first[i]);
	}
	max_ctx = MIN(max_ctx, j_end);
	const __m512 scale = _mm512_set1_ps(a->scale);
	for (int32_t j0 = MAX(j_begin, min_first / ATT_SEG * ATT_SEG); j0 < max_ctx; j0 += ATT_SEG) {
		int nj = (int)MIN(ATT_SEG, max_ctx - j0), nqj[4], lo[4];
		for (int j = 0; j < nj;) {
			int32_t pos = j0 + j, b = pos / bt, in = pos - b * bt;
			int64_t base = (int64_t)table[b] * bt + in;
			int run = MIN(bt - in, nj - j);
			for (int r = 0; r < run; r++)
				row[j + r] = base + r;
			j += run;
		}
		/* query i takes keys [lo[i], nqj[i]) of the segment */
#pragma GCC unroll 4
		for (int i = 0; i < NQ; i++) {
			nqj[i] = (int)MIN(ATT_SEG, n_ctx[i] - j0);
			lo[i] = (int)MAX(0, first[i] - j0);
		}
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
			if (nqj[i] <= lo[i])
				continue;
			__m512 bmv = _mm512_set1_ps(-INFINITY);
			for (int j = 0; j < nqj[i]; j += 16)
				bmv = _mm512_mask_max_ps(bmv, mask_n(nqj[i] - j) & mask_from(lo[i] - j), bmv,
							 _mm512_loadu_ps(s[i] + j));
			float m_new = MAX(m[i], _mm512_reduce_max_ps(bmv));
			float corr = _mm512_cvtss_f32(exp16(_mm512_set1_ps(m[i] - m_new)));
			__m512 lsum = _mm512_setzero_ps();
			for (int j = 0; j < nqj[i]; j += 16) {
				__mmask16 mj = mask_n(nqj[i] - j) & mask_from(lo[i] - j);
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
				if (j >= nqj[i] || j < lo[i])
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
	int32_t max_ctx = 0, min_first = INT32_MAX;
#pragma GCC unroll 4
	for (int i = 0; i < NQ; i++) {
		max_ctx = MAX(max_ctx, n_ctx[i]);
		min_first = MIN(min_first, attn_first_key(a, n_ctx[i]));
	}
	att_state t, c;
	att_state_init(&t, NQ, NV);
	for (int32_t c0 = min_first / ATT_CHUNK * ATT_CHUNK; c0 < max_ctx; c0 += ATT_CHUNK) {
		att_state_init(&c, NQ, NV);
		attend_span(&c, q, qs, a, table, n_ctx, kv_head, c0, c0 + ATT_CHUNK, NQ, NV, FULL, KT, VT);
#pragma GCC unroll 4
		for (int i = 0; i < NQ; i++)
			att_fold(&t, i, c.m[i], c.l[i], c.o[i], NV);
	}
	att_state_finish(&t, out, os, a->head_dim, NQ, NV);
}

/* One query (a decoding sequence with n_ctx positions) in every head: the
 * state of chunk c (keys [c * ATT_CHUNK, +ATT_CHUNK), counted from the chunk
 * holding its first key) per query head h at res + h * (head_dim + 2): m,
 * l, then the unnormalized output. Segment by segment, the rows are read
 * whole (cpu_touch_rows), then every head takes its slice of them. */
INL void attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
		      int c, const int NV, const bool FULL, const int KT, const int VT)
{
	const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, H = a->n_heads;
	const int32_t first = attn_first_key(a, n_ctx), c0 = (first / ATT_CHUNK + c) * ATT_CHUNK;
	const int32_t c1 = MIN(n_ctx, c0 + ATT_CHUNK), s0 = MAX(c0, first / ATT_SEG * ATT_SEG);
	att_state st;
	for (int32_t j0 = s0; j0 < c1; j0 += ATT_SEG) {
		cpu_touch_rows(a, table, MAX(j0, first), MIN(c1, j0 + ATT_SEG));
		for (int h = 0; h < H; h++) {
			float *r = res + (int64_t)h * (hd + 2);
			if (j0 == s0) {
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

int avx512_attend_chunk_keys(const kern_attn *a)
{
	return a->head_dim > KERN_MAX_HEAD_DIM ? 0 : ATT_CHUNK;
}

TARGET void avx512_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table,
				int32_t n_ctx, int c)
{
	int row = att_row_of(a->head_dim);
	att_chunks[a->k_type != KV_F32 || a->v_type != KV_F32][row][a->head_dim == 16 << row](res, q, a, table,
											    n_ctx, c);
}

TARGET void avx512_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a)
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

void avx512_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
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

#endif
