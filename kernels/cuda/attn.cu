/* kernels/cuda/attn.cu: K/V rows into the paged pool (kv_write) and causal
 * paged attention with GQA over rows of any kernels/kvq.h type.
 *
 * Attention: one thread block per (query row, head). The row's block table
 * maps each position to its slot; positions go by in tiles of ATT_TILE: the
 * warps score the tile's keys (one key per warp at a time, lanes over the
 * head's dims), then an online softmax rescales the running sum, and each
 * thread accumulates its own dims of the weighted V rows. A query attends to
 * positions [0, n_ctx), so prefill chunks and verification rows of one
 * sequence (several queries) are causal by their own n_ctx.
 * Known limits: each query head reads its KV head itself (GQA groups share
 * through L2, not shared memory), and one block per (row, head) leaves most
 * of a big GPU idle for a single long decode (no split over the context). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/kvrow.cuh"

#include <assert.h>

static_assert(KVR_F32 == KV_F32 && KVR_F16 == KV_F16 && KVR_Q8 == KV_Q8 && KVR_FP8 == KV_FP8, "kv types");

#define ATT_THREADS 128
#define ATT_TILE 64
#define ATT_MAX_DIMS (KERN_MAX_HEAD_DIM / ATT_THREADS)

typedef struct attn_args {
	const uint8_t *k, *v;
	int k_type, v_type;
	int64_t k_row, v_row;
	int n_heads, n_kv_heads, head_dim, block_tokens;
	float scale;
	const int32_t *const *table;
	const int32_t *n_ctx;
} attn_args;

__global__ void __launch_bounds__(ATT_THREADS) attention_k(float *out, const float *q, attn_args a)
{
	__shared__ float qs[KERN_MAX_HEAD_DIM];
	__shared__ float s[ATT_TILE];
	int h = blockIdx.x, hd = a.head_dim, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	int64_t t = blockIdx.y, q_dim = (int64_t)a.n_heads * hd;
	int kvh = h / (a.n_heads / a.n_kv_heads), n_kv = a.n_kv_heads * hd;
	const int32_t *table = a.table[t];
	int32_t n_ctx = a.n_ctx[t];
	for (int d = tid; d < hd; d += ATT_THREADS)
		qs[d] = q[t * q_dim + (int64_t)h * hd + d];
	float acc[ATT_MAX_DIMS];
	for (int i = 0; i < ATT_MAX_DIMS; i++)
		acc[i] = 0;
	float m = -INFINITY, l = 0;
	__syncthreads();
	for (int32_t j0 = 0; j0 < n_ctx; j0 += ATT_TILE) {
		int nj = min(ATT_TILE, n_ctx - j0);
		for (int j = warp; j < nj; j += ATT_THREADS / 32) {
			int32_t p = j0 + j;
			int64_t slot = (int64_t)table[p / a.block_tokens] * a.block_tokens + p % a.block_tokens;
			const uint8_t *kr = a.k + slot * a.k_row;
			float dot = 0;
			for (int d = lane; d < hd; d += 32)
				dot += qs[d] * kv_at(kr, a.k_type, n_kv, hd, kvh, d);
			for (int o = 16; o > 0; o /= 2)
				dot += __shfl_xor_sync(0xffffffffu, dot, o);
			if (lane == 0)
				s[j] = dot * a.scale;
		}
		__syncthreads();
		float bm = -INFINITY;
		for (int j = 0; j < nj; j++)
			bm = fmaxf(bm, s[j]);
		float m_new = fmaxf(m, bm), corr = m == -INFINITY ? 0.0f : expf(m - m_new);
		__syncthreads();
		if (tid < nj)
			s[tid] = expf(s[tid] - m_new);
		__syncthreads();
		l *= corr;
		for (int i = 0; i < ATT_MAX_DIMS; i++)
			acc[i] *= corr;
		for (int j = 0; j < nj; j++) {
			int32_t p = j0 + j;
			int64_t slot = (int64_t)table[p / a.block_tokens] * a.block_tokens + p % a.block_tokens;
			const uint8_t *vr = a.v + slot * a.v_row;
			float w = s[j];
			l += w;
			for (int i = 0; i < ATT_MAX_DIMS; i++) {
				int d = tid + i * ATT_THREADS;
				if (d < hd)
					acc[i] += w * kv_at(vr, a.v_type, n_kv, hd, kvh, d);
			}
		}
		m = m_new;
		__syncthreads();
	}
	for (int i = 0; i < ATT_MAX_DIMS; i++) {
		int d = tid + i * ATT_THREADS;
		if (d < hd)
			out[t * q_dim + (int64_t)h * hd + d] = acc[i] / l;
	}
}

void cu_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	if (n <= 0)
		return;
	/* llama_from_gguf refuses larger heads (kern_ops.max_head_dim) */
	assert(a->head_dim <= KERN_MAX_HEAD_DIM);
	attn_args g = {
		(const uint8_t *)a->k, (const uint8_t *)a->v, a->k_type, a->v_type,
		(int64_t)a->k_row, (int64_t)a->v_row, a->n_heads, a->n_kv_heads, a->head_dim,
		a->block_tokens, a->scale, a->table, a->n_ctx,
	};
	attention_k<<<dim3((unsigned)a->n_heads, (unsigned)n), ATT_THREADS>>>(out, q, g);
	CU_LAUNCHED();
}

/* ---- kv_write ---- */

/* One block per (token, K or V); a warp per head for the 8-bit types: the
 * head's max |x| sets its f16 scale, and for fp8 each lane scores one of the
 * 32 candidate scales and the warp keeps the first smallest error, as
 * kv_store_row does (kvrow.cuh, kvq_fp8.h: the same bits). */
__global__ void kv_write_k(uint8_t *kc, uint8_t *vc, const float *k, const float *v, const int64_t *slot,
			   int64_t k_row, int64_t v_row, int k_type, int v_type, int n_heads, int hd)
{
	int64_t t = blockIdx.x;
	bool is_v = blockIdx.y == 1;
	int type = is_v ? v_type : k_type, n = n_heads * hd;
	const float *x = (is_v ? v : k) + t * n;
	uint8_t *row = (is_v ? vc : kc) + slot[t] * (is_v ? v_row : k_row);
	if (type == KV_F32 || type == KV_F16) {
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			if (type == KV_F32)
				((float *)row)[i] = x[i];
			else
				((__half *)row)[i] = __float2half_rn(x[i]);
		}
		return;
	}
	int lane = threadIdx.x % 32;
	for (int h = threadIdx.x / 32; h < n_heads; h += blockDim.x / 32) {
		const float *xh = x + h * hd;
		float amax = 0;
		for (int i = lane; i < hd; i += 32)
			amax = fmaxf(amax, fabsf(xh[i]));
		for (int o = 16; o > 0; o /= 2)
			amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
		__half s16 = kv_scale(amax, type);
		if (type == KV_FP8 && amax > 0) {
			__half c;
			float e = kv_fp8_try(xh, hd, amax, lane, &c);
			int j = lane;
			for (int o = 16; o > 0; o /= 2) {
				float e2 = __shfl_xor_sync(0xffffffffu, e, o);
				int j2 = __shfl_xor_sync(0xffffffffu, j, o);
				if (e2 < e || (e2 == e && j2 < j))
					e = e2, j = j2;
			}
			kv_fp8_try(xh, hd, amax, j, &s16);
		}
		float sc = __half2float(s16), inv = sc > 0 ? 1.0f / sc : 0.0f;
		if (lane == 0) {
			unsigned short u = __half_as_ushort(s16);
			row[n + 2 * h] = (uint8_t)(u & 0xff);
			row[n + 2 * h + 1] = (uint8_t)(u >> 8);
		}
		for (int i = lane; i < hd; i += 32)
			row[h * hd + i] = kv_code(xh[i], inv, type);
	}
}

void cu_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
		 const kern_attn *f)
{
	if (n <= 0)
		return;
	kv_write_k<<<dim3((unsigned)n, 2), 128>>>((uint8_t *)kc, (uint8_t *)vc, k, v, slot, (int64_t)f->k_row,
						  (int64_t)f->v_row, f->k_type, f->v_type, f->n_kv_heads,
						  f->head_dim);
	CU_LAUNCHED();
}
