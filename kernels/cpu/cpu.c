/* kernels/cpu/cpu.c: the reference CPU backend.
 *
 * Plain C with fixed accumulation orders: each output element is computed the
 * same way whatever the batch size, so batching is bit-exact. */
#include "kernels/kern.h"

#include <math.h>
#include <string.h>

static bool cpu_supports(enum dtype t)
{
	return t == DT_F32 || t == DT_F16 || t == DT_BF16;
}

/* Dot product with 8 independent partial sums (fixed order). */
static float dot_f32(const float *a, const float *b, int64_t k)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= k; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	for (; i < k; i++)
		r += a[i] * b[i];
	return r;
}

static void to_f32(float *dst, const void *w, enum dtype t, int64_t at, int64_t k)
{
	if (t == DT_F32) {
		memcpy(dst, (const float *)w + at, (size_t)k * sizeof(float));
		return;
	}
	const uint16_t *h = (const uint16_t *)w + at;
	for (int64_t i = 0; i < k; i++)
		dst[i] = t == DT_F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
}

/* Half-precision rows are converted a chunk at a time into a stack buffer and
 * reused across all n inputs while hot in cache. */
#define CHUNK_FLOATS 4096
static void cpu_matmul(float *y, const float *x, const void *w, enum dtype wt,
		       int64_t n, int64_t k, int64_t n_out)
{
	if (wt == DT_F32) {
		const float *wf = w;
		for (int64_t o = 0; o < n_out; o++)
			for (int64_t t = 0; t < n; t++)
				y[t * n_out + o] = dot_f32(x + t * k, wf + o * k, k);
		return;
	}
	float buf[CHUNK_FLOATS];
	for (int64_t o = 0; o < n_out; o++) {
		for (int64_t t = 0; t < n; t++)
			y[t * n_out + o] = 0;
		for (int64_t c = 0; c < k; c += CHUNK_FLOATS) {
			int64_t nc = MIN(CHUNK_FLOATS, k - c);
			to_f32(buf, w, wt, o * k + c, nc);
			for (int64_t t = 0; t < n; t++)
				y[t * n_out + o] += dot_f32(x + t * k + c, buf, nc);
		}
	}
}

static void cpu_embed(float *y, const void *table, enum dtype t, const int32_t *ids,
		      int64_t n, int64_t dim)
{
	for (int64_t i = 0; i < n; i++)
		to_f32(y + i * dim, table, t, (int64_t)ids[i] * dim, dim);
}

static void cpu_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	for (int64_t t = 0; t < n; t++) {
		const float *xr = x + t * dim;
		float *yr = y + t * dim;
		double ss = 0;
		for (int64_t i = 0; i < dim; i++)
			ss += (double)xr[i] * xr[i];
		float scale = (float)(1.0 / sqrt(ss / (double)dim + eps));
		for (int64_t i = 0; i < dim; i++)
			yr[i] = xr[i] * scale * w[i];
	}
}

static void cpu_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim,
		     int n_rot, const float *inv_freq, bool neox)
{
	int half = n_rot / 2;
	for (int64_t t = 0; t < n; t++) {
		for (int i = 0; i < half; i++) {
			float theta = (float)pos[t] * inv_freq[i];
			float c = cosf(theta), s = sinf(theta);
			for (int h = 0; h < n_heads; h++) {
				float *v = x + (t * n_heads + h) * head_dim;
				int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
				float x0 = v[a], x1 = v[b];
				v[a] = x0 * c - x1 * s;
				v[b] = x0 * s + x1 * c;
			}
		}
	}
}

static void cpu_silu_mul(float *g, const float *u, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void cpu_add(float *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void cpu_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	for (int64_t t = 0; t < n; t++)
		cpu_add(y + t * dim, b, dim);
}

static void cpu_kv_write(float *kc, float *vc, const float *k, const float *v,
			 const int64_t *slot, int64_t n, int kv_dim)
{
	for (int64_t t = 0; t < n; t++) {
		memcpy(kc + slot[t] * kv_dim, k + t * kv_dim, (size_t)kv_dim * sizeof(float));
		memcpy(vc + slot[t] * kv_dim, v + t * kv_dim, (size_t)kv_dim * sizeof(float));
	}
}

/* One query head over its sequence's paged K/V, with an online softmax taken
 * one KV block at a time (no score buffer the size of the context). */
#define MAX_BLOCK_TOKENS 256
static void attend_head(float *out, const float *q, const kern_attn *a, const int32_t *table,
			int32_t n_ctx, int kv_head)
{
	int hd = a->head_dim, bt = a->block_tokens;
	int64_t kv_dim = (int64_t)a->n_kv_heads * hd;
	float m = -INFINITY, l = 0, s[MAX_BLOCK_TOKENS];
	for (int d = 0; d < hd; d++)
		out[d] = 0;
	for (int32_t j0 = 0; j0 < n_ctx; j0 += bt) {
		int nj = (int)MIN(bt, n_ctx - j0);
		int64_t base = (int64_t)table[j0 / bt] * bt;
		float bm = -INFINITY;
		for (int j = 0; j < nj; j++) {
			const float *k = a->k + (base + j) * kv_dim + (int64_t)kv_head * hd;
			s[j] = dot_f32(q, k, hd) * a->scale;
			bm = MAX(bm, s[j]);
		}
		float m_new = MAX(m, bm);
		float corr = expf(m - m_new);
		l *= corr;
		for (int d = 0; d < hd; d++)
			out[d] *= corr;
		for (int j = 0; j < nj; j++) {
			const float *v = a->v + (base + j) * kv_dim + (int64_t)kv_head * hd;
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

static void cpu_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	int group = a->n_heads / a->n_kv_heads;
	int64_t q_dim = (int64_t)a->n_heads * a->head_dim;
	for (int64_t t = 0; t < n; t++)
		for (int h = 0; h < a->n_heads; h++)
			attend_head(out + t * q_dim + (int64_t)h * a->head_dim,
				    q + t * q_dim + (int64_t)h * a->head_dim, a, a->table[t],
				    a->n_ctx[t], h / group);
}

static const kern_ops cpu_ops = {
	.name = "cpu",
	.supports = cpu_supports,
	.matmul = cpu_matmul,
	.embed = cpu_embed,
	.rmsnorm = cpu_rmsnorm,
	.rope = cpu_rope,
	.silu_mul = cpu_silu_mul,
	.add = cpu_add,
	.add_bias = cpu_add_bias,
	.kv_write = cpu_kv_write,
	.attention = cpu_attention,
};

const kern_ops *kern_cpu(void)
{
	return &cpu_ops;
}
