/* kernels/cpu/attn_kv.c: paged attention over K/V rows stored as f16, q8 or
 * fp8 (kernels/kvq.h). Each K and V row of the head is decoded into a
 * head_dim tile on the stack as it is read (never a whole context), then used
 * exactly as the f32 path uses its rows: scores for the group's queries,
 * an online softmax per KV block, and the weighted sum of V. */
#include "kernels/cpu/simd.h"
#include "kernels/kvq.h"

#include <math.h>
#include <string.h>

#define MAX_HEAD_DIM 512

/* Decodes head h of a row into dst[hd] (f16 through a table-free path). */
static inline void load_head(float *dst, const uint8_t *row, enum kv_type type, int n_heads, int hd, int h)
{
	if (type == KV_F32) {
		memcpy(dst, (const float *)row + (size_t)h * hd, (size_t)hd * sizeof(float));
		return;
	}
	kv_load_head(dst, row, type, n_heads, hd, h);
}

static float dot(const float *a, const float *b, int n)
{
	float s[8] = {0};
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
	for (; i < n; i++)
		r += a[i] * b[i];
	return r;
}

void cpu_attend_typed(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
		      const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head)
{
	int hd = a->head_dim, bt = a->block_tokens;
	const uint8_t *kc = a->k, *vc = a->v;
	float kf[MAX_HEAD_DIM], vf[MAX_HEAD_DIM];
	float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP], s[ATTN_MAX_GROUP][ATTN_MAX_BLOCK_TOKENS];
	int32_t longest = 0, first[ATTN_MAX_GROUP], earliest = INT32_MAX;
	for (int i = 0; i < nq; i++) {
		m[i] = -INFINITY;
		l[i] = 0;
		memset(out + i * out_stride, 0, (size_t)hd * sizeof(float));
		longest = MAX(longest, n_ctx[i]);
		first[i] = attn_first_key(a, n_ctx[i]);
		earliest = MIN(earliest, first[i]);
	}
	/* a query's keys outside [first, n_ctx) score -inf: they change nothing
	 * (whole blocks of them multiply its sums by exactly 1) */
	for (int32_t j0 = earliest / bt * bt; j0 < longest; j0 += bt) {
		int nj = (int)MIN(bt, longest - j0);
		int64_t base = (int64_t)table[j0 / bt] * bt;
		for (int j = 0; j < nj; j++) {
			load_head(kf, kc + (size_t)(base + j) * a->k_row, a->k_type, a->n_kv_heads, hd, kv_head);
			for (int i = 0; i < nq; i++)
				s[i][j] = j0 + j < n_ctx[i] && j0 + j >= first[i] ? dot(q + i * q_stride, kf, hd) * a->scale
										    : -INFINITY;
		}
		float corr[ATTN_MAX_GROUP], m_new[ATTN_MAX_GROUP];
		for (int i = 0; i < nq; i++) {
			float bm = -INFINITY;
			for (int j = 0; j < nj; j++)
				bm = MAX(bm, s[i][j]);
			m_new[i] = MAX(m[i], bm);
			corr[i] = m_new[i] == -INFINITY ? 1.0f : expf(m[i] - m_new[i]);
			l[i] *= corr[i];
			for (int d = 0; d < hd; d++)
				out[i * out_stride + d] *= corr[i];
		}
		for (int j = 0; j < nj; j++) {
			load_head(vf, vc + (size_t)(base + j) * a->v_row, a->v_type, a->n_kv_heads, hd, kv_head);
			for (int i = 0; i < nq; i++) {
				if (j0 + j >= n_ctx[i] || j0 + j < first[i])
					continue;
				float p = expf(s[i][j] - m_new[i]);
				l[i] += p;
				for (int d = 0; d < hd; d++)
					out[i * out_stride + d] += p * vf[d];
			}
		}
		for (int i = 0; i < nq; i++)
			m[i] = m_new[i];
	}
	for (int i = 0; i < nq; i++)
		for (int d = 0; d < hd; d++)
			out[i * out_stride + d] /= l[i];
}

void cpu_touch_rows(const kern_attn *a, const int32_t *table, int32_t p0, int32_t p1)
{
	const int bt = a->block_tokens;
	unsigned acc = 0;
	for (int32_t p = p0; p < p1;) {
		int32_t b = p / bt, in = p - b * bt, run = MIN(bt - in, p1 - p);
		int64_t slot = (int64_t)table[b] * bt + in;
		const uint8_t *k = (const uint8_t *)a->k + slot * (int64_t)a->k_row;
		const uint8_t *v = (const uint8_t *)a->v + slot * (int64_t)a->v_row;
		/* a run of slots in one block is one stretch of memory: a load per line */
		for (int64_t o = 0; o < run * (int64_t)a->k_row; o += 64)
			acc |= k[o];
		for (int64_t o = 0; o < run * (int64_t)a->v_row; o += 64)
			acc |= v[o];
		p += run;
	}
	__asm__ volatile("" : : "r"(acc));
}
