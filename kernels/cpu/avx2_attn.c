/* kernels/cpu/avx2_attn.c: the AVX2 set's attention (cpu_kernels.attend
 * and its chunked decoding), for K/V rows in f32, f16, q8 and fp8.
 *
 * One query against one KV head at a time, in 8-lane vectors that cover the
 * head (a register tile per head size: NV of 1 to 32 vectors): keys in
 * chunks of ATT_CHUNK, each from a fresh online-softmax state, folded in
 * order, so a decoding sequence's chunks can run on different threads and
 * give the same bits as attend. Heads past KERN_MAX_HEAD_DIM, and typed rows
 * whose heads are not whole vectors, take the portable code. With a sliding
 * window (kern_attn.window) a query's keys start at attn_first_key: the
 * chunks keep their places (multiples of ATT_CHUNK from position 0), those
 * before it are passed over, and its first segment starts at it. */
#include "kernels/cpu/avx2_int.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <math.h>

/* ---- attention ---- */

/* Values [8v, 8v + 8) of a head slice p of K/V row type t (f16, q8 or fp8;
 * the head fills its vectors), as f32 without the 8-bit scale; E4M3 through
 * f16 as in avx512_attn.c (the value times 2^-8; kv_scale8 carries the 2^8). */
INL __m256 load8_kv(const uint8_t *p, int t, int v)
{
	if (t == KV_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + 8 * v)));
	__m128i x8 = _mm_loadl_epi64((const __m128i *)(p + 8 * v));
	if (t == KV_Q8)
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x8));
	/* sign-extended, shifted by 7, bit 14 cleared (as in avx512_attn.c) */
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
 * Keys [j_begin, j_end) (j_begin a multiple of ATT_CHUNK, or a window's
 * first key) continuing st, in segments that are the KV blocks cut at chunk
 * ends: scores, an online-softmax step, then the values in key order. */
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
	const int32_t first = attn_first_key(a, n_ctx);
	for (int32_t c0 = first / ATT_CHUNK * ATT_CHUNK; c0 < n_ctx; c0 += ATT_CHUNK) {
		att8_init(&c, NV);
		attend_span(&c, q, a, table, n_ctx, kv_head, MAX(c0, first), c0 + ATT_CHUNK, NV, KT, VT);
		att8_fold(&t, c.m, c.l, c.o, NV);
	}
	att8_finish(&t, out, a->head_dim, NV);
}

/* One decoding query in every head, chunk c of its keys (counted from the
 * chunk holding its first key): the state per query head h at
 * res + h * (head_dim + 2) (m, l, output). */
INL void attend_chunk_nv(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
			 int c, const int NV, const int KT, const int VT)
{
	const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, H = a->n_heads;
	const int32_t first = attn_first_key(a, n_ctx), c0 = (first / ATT_CHUNK + c) * ATT_CHUNK;
	const int32_t c1 = MIN(n_ctx, c0 + ATT_CHUNK), s0 = MAX(c0, first);
	att8_state st;
	for (int32_t j0 = s0, j1; j0 < c1; j0 = j1) {
		/* windows end on a block's end (or the chunk's), so that the
		 * segments are attend_nv's: blocks cut at chunk ends */
		int64_t e = (int64_t)j0 + ATT_TOUCH, bt = a->block_tokens;
		j1 = (int32_t)MIN((int64_t)c1, (e + bt - 1) / bt * bt);
		cpu_touch_rows(a, table, j0, j1);
		for (int h = 0; h < H; h++) {
			float *r = res + (int64_t)h * (hd + 2);
			if (j0 == s0) {
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
int avx2_attend_chunk_keys(const kern_attn *a)
{
	bool typed = a->k_type != KV_F32 || a->v_type != KV_F32;
	return a->head_dim > KERN_MAX_HEAD_DIM || (typed && a->head_dim % 8) ? 0 : ATT_CHUNK;
}

void avx2_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table,
		       int32_t n_ctx, int c)
{
	att_chunks[a->k_type != KV_F32 || a->v_type != KV_F32][att_row(a->head_dim)](res, q, a, table, n_ctx, c);
}

void avx2_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a)
{
	att_folds[att_row(a->head_dim)](out, res, n_chunks, a);
}

void avx2_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
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

#endif
