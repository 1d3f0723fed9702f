/* kernels/cpu/scalar.c: the portable kernel set, the reference the SIMD sets
 * are tested against. Plain C with fixed accumulation orders. */
#include "kernels/cpu/simd.h"

#include <math.h>
#include <string.h>

static inline float load_w(const void *w, enum dtype t, int64_t i)
{
	if (t == DT_F32)
		return ((const float *)w)[i];
	uint16_t h = ((const uint16_t *)w)[i];
	return t == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

/* Dot product with 8 independent partial sums (fixed order). */
static float dot_w(const float *x, const void *w, enum dtype t, int64_t k)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= k; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += x[i + j] * load_w(w, t, i + j);
	float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	for (; i < k; i++)
		r += x[i] * load_w(w, t, i);
	return r;
}

static void scalar_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1)
{
	bool q = quant_uses_qact(a->wt);
	for (int64_t o = o0; o < o1; o++) {
		const uint8_t *w = a->w + o * a->ldw;
		for (int64_t t = t0; t < t1; t++)
			a->y[t * a->ldy + o] = q ? quant_dot_qact(a->wt, w, a->qa + t * a->lda, a->k)
						 : dot_w(a->x + t * a->ldx, w, a->wt, a->k);
	}
}

/* One query head over its sequence's paged K/V, with an online softmax taken
 * one KV block at a time (no score buffer the size of the context). With a
 * window the blocks start at the one holding the first key, whose earlier
 * keys are left out. */
static void attend_one(float *out, const float *q, const kern_attn *a, const int32_t *table,
		       int32_t n_ctx, int kv_head)
{
	int hd = a->head_dim, bt = a->block_tokens;
	int64_t kv_dim = (int64_t)a->n_kv_heads * hd;
	int32_t first = attn_first_key(a, n_ctx);
	float m = -INFINITY, l = 0, s[ATTN_MAX_BLOCK_TOKENS];
	for (int d = 0; d < hd; d++)
		out[d] = 0;
	for (int32_t j0 = first / bt * bt; j0 < n_ctx; j0 += bt) {
		int nj = (int)MIN(bt, n_ctx - j0), jlo = (int)MAX(0, first - j0);
		int64_t base = (int64_t)table[j0 / bt] * bt;
		float bm = -INFINITY;
		for (int j = jlo; j < nj; j++) {
			const float *k = (const float *)a->k + (base + j) * kv_dim + (int64_t)kv_head * hd;
			s[j] = dot_w(q, k, DT_F32, hd) * a->scale;
			bm = MAX(bm, s[j]);
		}
		float m_new = MAX(m, bm);
		float corr = expf(m - m_new);
		l *= corr;
		for (int d = 0; d < hd; d++)
			out[d] *= corr;
		for (int j = jlo; j < nj; j++) {
			const float *v = (const float *)a->v + (base + j) * kv_dim + (int64_t)kv_head * hd;
			float p = expf(s[j] - m_new);
			l += p;
			for (int d = 0; d < hd; d++)
				out[d] += p * v[d];
		}
		m = m_new;
	}
	for (int d = 0; d < hd; d++)
		out[d] /= l;
}

static void scalar_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
			  const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head)
{
	for (int i = 0; i < nq; i++)
		attend_one(out + i * out_stride, q + i * q_stride, a, table, n_ctx[i], kv_head);
}

static void scalar_silu_mul(float *g, const float *u, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static const cpu_kernels scalar_kernels = {
	.name = "scalar",
	.matmul = scalar_matmul,
	.quantize_act = qact_quantize_row,
	.qact_exact = true,
	.attend = scalar_attend,
	.silu_mul = scalar_silu_mul,
};

const cpu_kernels *cpu_kernels_scalar(void)
{
	return &scalar_kernels;
}
