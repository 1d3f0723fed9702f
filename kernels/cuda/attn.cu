/* kernels/cuda/attn.cu: K/V rows into the paged pool (kv_write) and causal
 * paged attention with GQA over rows of any kernels/kvq.h type.
 *
 * Attention: one thread block per (query row, split, head); query rows and
 * splits go on the grid's x (up to 2^31 - 1 blocks: batches of any size),
 * heads on y. The row's block table maps each position to its slot;
 * positions go by in tiles of ATT_TILE: the warps score the tile's keys (one
 * key per warp at a time, lanes over the head's dims), then an online
 * softmax rescales the running sum, and each thread accumulates its own dims
 * of the weighted V rows. A query attends to positions [0, n_ctx), so
 * prefill chunks and verification rows of one sequence (several queries) are
 * causal by their own n_ctx.
 * Decode-sized batches (a few rows, too few blocks for the device) split
 * each query's context into n_split equal ranges, one block each
 * (flash-decoding): every block leaves its unnormalized sums and its
 * softmax maximum and total in scratch, and attn_combine_k folds the splits
 * by their maxima. n_split depends only on the batch's rows, the heads and
 * the device, never on the context, which only the device reads, so a step
 * can be recorded once and replayed (graph.cu). A row's result therefore
 * rounds differently with the number of rows in the call (kern.h).
 * Known limit: each query head reads its KV head itself (GQA groups share
 * through L2, not shared memory). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/kvrow.cuh"

static_assert(KVR_F32 == KV_F32 && KVR_F16 == KV_F16 && KVR_Q8 == KV_Q8 && KVR_FP8 == KV_FP8, "kv types");
static_assert(KVQ_FP8_SCALES == 32, "kv_write_k scores one fp8 candidate scale per lane of a warp");

#define ATT_THREADS 128
#define ATT_TILE 64
#define ATT_MAX_DIMS (KERN_MAX_HEAD_DIM / ATT_THREADS)
/* Splits of a query's context at most, and the rows up to which they are used. */
#define ATT_MAX_SPLITS 16
#define ATT_SPLIT_MAX_ROWS 16

typedef struct attn_args {
	const uint8_t *k, *v;
	int k_type, v_type;
	int64_t k_row, v_row;
	int n_heads, n_kv_heads, head_dim, block_tokens;
	float scale;
	const int32_t *const *table;
	const int32_t *n_ctx;
	int n_split;             /* context ranges per query (1: no split) */
	float *part;             /* n_split > 1: [n][n_heads][n_split][head_dim + 2] */
} attn_args;

/* The running state of one block's softmax over its positions. */
typedef struct att_state {
	float acc[ATT_MAX_DIMS]; /* this thread's dims of the weighted V sum */
	float m, l;              /* largest score so far, sum of exp(score - m) */
} att_state;

/* Folds positions [j0, j0 + nj) (nj <= ATT_TILE) into st: scores into s[],
 * then the online softmax. All threads of the block take part. */
static __device__ __forceinline__ void att_tile(att_state *st, float *s, const float *qs, const attn_args &a,
					       const int32_t *table, int kvh, int32_t j0, int nj)
{
	int hd = a.head_dim, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	int n_kv = a.n_kv_heads * hd;
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
	float m_new = fmaxf(st->m, bm), corr = st->m == -INFINITY ? 0.0f : expf(st->m - m_new);
	__syncthreads();
	if (tid < nj)
		s[tid] = expf(s[tid] - m_new);
	__syncthreads();
	st->l *= corr;
	for (int i = 0; i < ATT_MAX_DIMS; i++)
		st->acc[i] *= corr;
	for (int j = 0; j < nj; j++) {
		int32_t p = j0 + j;
		int64_t slot = (int64_t)table[p / a.block_tokens] * a.block_tokens + p % a.block_tokens;
		const uint8_t *vr = a.v + slot * a.v_row;
		float w = s[j];
		st->l += w;
		for (int i = 0; i < ATT_MAX_DIMS; i++) {
			int d = tid + i * ATT_THREADS;
			if (d < hd)
				st->acc[i] += w * kv_at(vr, a.v_type, n_kv, hd, kvh, d);
		}
	}
	st->m = m_new;
	__syncthreads();
}

__global__ void __launch_bounds__(ATT_THREADS, 8) attention_k(float *out, const float *q, attn_args a)
{
	__shared__ float qs[KERN_MAX_HEAD_DIM];
	__shared__ float s[ATT_TILE];
	int h = blockIdx.y, hd = a.head_dim, tid = threadIdx.x, sp = (int)(blockIdx.x % (unsigned)a.n_split);
	int64_t t = blockIdx.x / (unsigned)a.n_split, q_dim = (int64_t)a.n_heads * hd;
	int kvh = h / (a.n_heads / a.n_kv_heads);
	const int32_t *table = a.table[t];
	int32_t n_ctx = a.n_ctx[t], per = (n_ctx + a.n_split - 1) / a.n_split;
	int32_t lo = min(n_ctx, sp * per), hi = min(n_ctx, lo + per);
	for (int d = tid; d < hd; d += ATT_THREADS)
		qs[d] = q[t * q_dim + (int64_t)h * hd + d];
	att_state st;
	for (int i = 0; i < ATT_MAX_DIMS; i++)
		st.acc[i] = 0;
	st.m = -INFINITY;
	st.l = 0;
	__syncthreads();
	for (int32_t j0 = lo; j0 < hi; j0 += ATT_TILE)
		att_tile(&st, s, qs, a, table, kvh, j0, min(ATT_TILE, hi - j0));
	if (a.n_split == 1) {
		for (int i = 0; i < ATT_MAX_DIMS; i++) {
			int d = tid + i * ATT_THREADS;
			if (d < hd)
				out[t * q_dim + (int64_t)h * hd + d] = st.acc[i] / st.l;
		}
		return;
	}
	/* an empty range leaves m = -inf, l = 0 and zero sums: weight 0 below */
	float *pp = a.part + ((t * a.n_heads + h) * a.n_split + sp) * (hd + 2);
	for (int i = 0; i < ATT_MAX_DIMS; i++) {
		int d = tid + i * ATT_THREADS;
		if (d < hd)
			pp[d] = st.acc[i];
	}
	if (tid == 0) {
		pp[hd] = st.m;
		pp[hd + 1] = st.l;
	}
}

/* out for (row blockIdx.x, head blockIdx.y): the splits' sums, each weighted
 * by exp(its max - the largest max), over their weighted totals. */
__global__ void __launch_bounds__(ATT_THREADS) attn_combine_k(float *out, const float *part, int n_heads, int hd,
							       int n_split)
{
	__shared__ float f[ATT_MAX_SPLITS];
	__shared__ float inv_l;
	int64_t t = blockIdx.x;
	int h = blockIdx.y, tid = threadIdx.x;
	const float *p = part + (t * n_heads + h) * n_split * (int64_t)(hd + 2);
	if (tid == 0) {
		float mx = -INFINITY, l = 0;
		for (int i = 0; i < n_split; i++)
			mx = fmaxf(mx, p[i * (hd + 2) + hd]);
		for (int i = 0; i < n_split; i++) {
			float mi = p[i * (hd + 2) + hd];
			f[i] = mi == -INFINITY ? 0.0f : expf(mi - mx);
			l += f[i] * p[i * (hd + 2) + hd + 1];
		}
		inv_l = 1.0f / l;
	}
	__syncthreads();
	for (int d = tid; d < hd; d += ATT_THREADS) {
		float acc = 0;
		for (int i = 0; i < n_split; i++)
			acc += f[i] * p[i * (hd + 2) + d];
		out[t * (int64_t)n_heads * hd + (int64_t)h * hd + d] = acc * inv_l;
	}
}

/* Context ranges per query: enough blocks for two per multiprocessor, for
 * the few rows of a decode step; one range for anything bigger. */
static int att_splits(int64_t n, int n_heads)
{
	int64_t blocks = n * n_heads, want = 2 * (int64_t)cu_n_sm();
	if (n > ATT_SPLIT_MAX_ROWS || blocks >= want)
		return 1;
	return (int)MIN((want + blocks - 1) / blocks, (int64_t)ATT_MAX_SPLITS);
}

static size_t att_part_bytes(int64_t n, int n_heads, int hd, int n_split)
{
	return (size_t)(n * n_heads * n_split) * (size_t)(hd + 2) * sizeof(float);
}

size_t cu_attention_scratch(const kern_sizes *s)
{
	return att_part_bytes(MIN(s->max_rows, (int64_t)ATT_SPLIT_MAX_ROWS), s->n_heads, s->head_dim, ATT_MAX_SPLITS);
}

void cu_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	if (n <= 0 || cu_failed())
		return;
	/* llama_from_gguf refuses larger heads (kern_ops.max_head_dim) */
	assert(a->head_dim <= KERN_MAX_HEAD_DIM && a->n_heads <= 65535);
	attn_args g = {
		(const uint8_t *)a->k, (const uint8_t *)a->v, a->k_type, a->v_type,
		(int64_t)a->k_row, (int64_t)a->v_row, a->n_heads, a->n_kv_heads, a->head_dim,
		a->block_tokens, a->scale, a->table, a->n_ctx, att_splits(n, a->n_heads), NULL,
	};
	if (g.n_split > 1) {
		g.part = (float *)cu_scratch(att_part_bytes(n, a->n_heads, a->head_dim, g.n_split));
		if (!g.part)
			return;
	}
	dim3 grid((unsigned)(n * g.n_split), (unsigned)a->n_heads);
	attention_k<<<grid, ATT_THREADS, 0, cu_stream()>>>(out, q, g);
	CU_LAUNCHED();
	if (g.n_split > 1) {
		attn_combine_k<<<dim3((unsigned)n, (unsigned)a->n_heads), ATT_THREADS, 0, cu_stream()>>>(
			out, g.part, a->n_heads, a->head_dim, g.n_split);
		CU_LAUNCHED();
	}
}

/* ---- kv_write ---- */

/* One block per (token, K or V); a warp per head for the 8-bit types: the
 * head's max |x| sets its f16 scale, and for fp8 each lane scores one of the
 * 32 candidate scales and the warp keeps the first smallest error, as
 * kv_store_row does (kvrow.cuh, kvq_fp8.h: the same bits; NaN errors in the
 * order kv_fp8_key gives them, so all lanes agree). */
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
				((unsigned short *)row)[i] = kv_f16(x[i]);
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
			float e = kv_fp8_key(kv_fp8_try(xh, hd, amax, lane, &c));
			int j = lane;
			for (int o = 16; o > 0; o /= 2) {
				float e2 = __shfl_xor_sync(0xffffffffu, e, o);
				int j2 = __shfl_xor_sync(0xffffffffu, j, o);
				if (kv_fp8_before(e2, j2, e, j))
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
	if (n <= 0 || cu_failed())
		return;
	kv_write_k<<<dim3((unsigned)n, 2), 128, 0, cu_stream()>>>((uint8_t *)kc, (uint8_t *)vc, k, v, slot, (int64_t)f->k_row,
						  (int64_t)f->v_row, f->k_type, f->v_type, f->n_kv_heads,
						  f->head_dim);
	CU_LAUNCHED();
}
