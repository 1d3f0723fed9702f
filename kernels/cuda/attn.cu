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
 * causal by their own n_ctx; with a sliding window, to the last window of
 * them only ([n_ctx - window, n_ctx): the ranges below start there).
 * Decode-sized batches (a few rows, too few blocks for the device) split
 * each query's context into n_split equal ranges, one block each
 * (flash-decoding): every block leaves its unnormalized sums and its
 * softmax maximum and total in scratch, and attn_combine_k folds the splits
 * by their maxima. n_split depends only on the batch's rows, the heads and
 * the device, never on the context, which only the device reads, so a step
 * can be recorded once and replayed (graph.cu). A row's result therefore
 * rounds differently with the number of rows in the call (kern.h).
 * This kernel (attention_k) takes the batches attn_dec_k below cannot (head
 * rows that do not split into whole 16-byte chunks); there each query head
 * reads its KV head itself. */
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
	int window;              /* kern_attn.window: > 0, the last window positions only */
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
	int32_t n_ctx = a.n_ctx[t], first = a.window > 0 ? max(0, n_ctx - a.window) : 0;
	int32_t per = (n_ctx - first + a.n_split - 1) / a.n_split;
	int32_t lo = min(n_ctx, first + sp * per), hi = min(n_ctx, lo + per);
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

/* Scratch of the splits' partial sums: [n][n_heads][n_split][hd + 2]. */
static size_t att_part_bytes(int64_t n, int n_heads, int hd, int n_split)
{
	return (size_t)(n * n_heads * n_split) * (size_t)(hd + 2) * sizeof(float);
}

/* ---- decode attention grouped by KV head (attn_dec_k) ----
 * One block per (query row, context range) and (KV head, up to AD_GM of its
 * query heads): the block reads each K and V row of its range once for the
 * whole GQA group, in 128-bit loads (kvrow.cuh att_layout: L lanes per key,
 * 32 / L keys per warp at a time, AD_U of them in flight per lane group).
 * Each lane group keeps its own running softmax per query head (att_fold),
 * so the loop needs no barrier; at the end the groups of a warp merge
 * through shuffles and the warps through shared memory (att_join). Scores
 * are in the log2 domain (the query is scaled by log2(e)). With n_split > 1
 * the block leaves its unnormalized sums, maximum and total per head in
 * scratch and attn_merge_k folds the splits. Used for every batch whose
 * head rows split into whole chunks (attention_k takes the others). */

#define AD_THREADS (32 * AD_WARPS)
#define AD_MAX_SPLITS 64

typedef struct attd_args {
	const uint8_t *k, *v;
	int k_type, v_type;
	int64_t k_row, v_row;
	int n_heads, n_kv_heads, head_dim, block_tokens;
	float qscale;            /* the softmax scale times log2(e) */
	const int32_t *const *table;
	const int32_t *n_ctx;
	int window;              /* kern_attn.window: > 0, the last window positions only */
	att_layout lay;
	bool a16k, a16v;         /* 8-bit rows on 16 bytes (kv_lane) */
	int n_gc;                /* blocks per KV head: ceil(group / AD_GM) */
	int n_split;             /* context ranges per query (1: no split) */
	float *part;             /* n_split > 1: [n][n_heads][n_split][head_dim + 2] */
} attd_args;

/* The positions [*lo, *hi) split sp of query row t attends to. */
static __device__ __forceinline__ void attd_range(const attd_args &a, int64_t t, int sp, int32_t *lo, int32_t *hi)
{
	int32_t n_ctx = a.n_ctx[t], first = a.window > 0 ? max(0, n_ctx - a.window) : 0;
	int32_t per = (n_ctx - first + a.n_split - 1) / a.n_split;
	*lo = min(n_ctx, first + sp * per);
	*hi = min(n_ctx, *lo + per);
}

/* Merges the running states of the lanes that share li across the warp's
 * key groups (xor L, 2L, ... 16), then across warps through red; the
 * result is in warp 0's first group. */
template <int VPL>
static __device__ void attd_reduce(att_run *st, float (*acc)[VPL], float *red, const attd_args &a, int li)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, L = a.lay.L, hd = a.head_dim, stride = hd + 2;
	for (int o = L; o < 32; o *= 2)
		for (int g = 0; g < AD_GM; g++) {
			att_run b = {__shfl_xor_sync(0xffffffffu, st[g].m, o), __shfl_xor_sync(0xffffffffu, st[g].l, o)};
			float fa, fb;
			att_join(&st[g], b, &fa, &fb);
			for (int i = 0; i < VPL; i++)
				acc[g][i] = acc[g][i] * fa + __shfl_xor_sync(0xffffffffu, acc[g][i], o) * fb;
		}
	if (lane < L)
		for (int g = 0; g < AD_GM; g++) {
			float *r = red + (warp * AD_GM + g) * stride;
#pragma unroll
			for (int i = 0; i < VPL; i++)
				if (li < a.lay.nv && i < a.lay.kv)
					r[li * a.lay.kv + i] = acc[g][i];
			if (li == 0)
				r[hd] = st[g].m, r[hd + 1] = st[g].l;
		}
	__syncthreads();
}

template <int VPL>
__global__ void __launch_bounds__(AD_THREADS) attn_dec_k(float *out, const float *q, attd_args a)
{
	__shared__ float red[AD_WARPS * AD_GM * (KERN_MAX_HEAD_DIM + 2)];
	const att_layout ly = a.lay;
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32, li = lane % ly.L, kpw = 32 / ly.L;
	int sp = (int)(blockIdx.x % (unsigned)a.n_split), kvh = blockIdx.y / a.n_gc, gc = blockIdx.y % a.n_gc;
	int64_t t = blockIdx.x / (unsigned)a.n_split;
	int hd = a.head_dim, group = a.n_heads / a.n_kv_heads, h0 = kvh * group + gc * AD_GM;
	int ng = min(AD_GM, group - gc * AD_GM), n = a.n_kv_heads * hd;
	int ck = li < ly.nk ? ly.kk : 0, cv = li < ly.nv ? ly.kv : 0;
	const int32_t *table = a.table[t];
	int32_t lo, hi;
	attd_range(a, t, sp, &lo, &hi);
	float qv[AD_GM][VPL], acc[AD_GM][VPL];
	att_run st[AD_GM];
	for (int g = 0; g < AD_GM; g++) {
		const float *qh = q + (t * a.n_heads + h0 + min(g, ng - 1)) * (int64_t)hd + li * ly.kk;
		for (int i = 0; i < VPL; i++) {
			qv[g][i] = g < ng && i < ck ? qh[i] * a.qscale : 0.0f;
			acc[g][i] = 0;
		}
		st[g].m = -INFINITY;
		st[g].l = 0;
	}
	int step = AD_WARPS * kpw * AD_U;
	for (int32_t j0 = lo + (warp * kpw + lane / ly.L) * AD_U; j0 - (warp * kpw + lane / ly.L) * AD_U < hi;
	     j0 += step) {
		float kx[AD_U][VPL], vx[AD_U][VPL];
		bool ok[AD_U];
#pragma unroll
		for (int u = 0; u < AD_U; u++) {
			int32_t p = j0 + u;
			ok[u] = p < hi;
			int64_t slot = ok[u] ? (int64_t)table[p / a.block_tokens] * a.block_tokens + p % a.block_tokens : 0;
			kv_lane<VPL>(a.k + slot * a.k_row, a.k_type, n, hd, kvh, li * ly.kk, ok[u] ? ck : 0, a.a16k, kx[u]);
			kv_lane<VPL>(a.v + slot * a.v_row, a.v_type, n, hd, kvh, li * ly.kv, ok[u] ? cv : 0, a.a16v, vx[u]);
		}
#pragma unroll
		for (int u = 0; u < AD_U; u++)
#pragma unroll
			for (int g = 0; g < AD_GM; g++) {
				float d = 0, p;
				for (int i = 0; i < VPL; i++)
					d += qv[g][i] * kx[u][i];
				for (int o = ly.L / 2; o > 0; o /= 2)
					d += __shfl_xor_sync(0xffffffffu, d, o);
				float corr = att_fold(&st[g], ok[u] ? d : -INFINITY, &p);
				for (int i = 0; i < VPL; i++)
					acc[g][i] = acc[g][i] * corr + p * vx[u][i];
			}
	}
	attd_reduce<VPL>(st, acc, red, a, li);
	/* warp 0's first lane group folds the warps and writes the heads */
	if (warp != 0 || lane >= ly.L || li >= ly.nv)
		return;
	for (int g = 0; g < ng; g++) {
		att_run r = {-INFINITY, 0};
		float o[VPL];
#pragma unroll
		for (int i = 0; i < VPL; i++)
			o[i] = 0;
		for (int w = 0; w < AD_WARPS; w++) {
			const float *rw = red + (w * AD_GM + g) * (hd + 2);
			att_run b = {rw[hd], rw[hd + 1]};
			float fa, fb;
			att_join(&r, b, &fa, &fb);
#pragma unroll
			for (int i = 0; i < VPL; i++)
				o[i] = i < ly.kv ? o[i] * fa + rw[li * ly.kv + i] * fb : 0.0f;
		}
		int h = h0 + g;
		if (a.n_split == 1) {
			float *oh = out + (t * a.n_heads + h) * (int64_t)hd + li * ly.kv;
#pragma unroll
			for (int i = 0; i < VPL; i++)
				if (i < ly.kv)
					oh[i] = o[i] / r.l;
		} else {
			float *pp = a.part + ((t * a.n_heads + h) * a.n_split + sp) * (int64_t)(hd + 2);
#pragma unroll
			for (int i = 0; i < VPL; i++)
				if (i < ly.kv)
					pp[li * ly.kv + i] = o[i];
			if (li == 0)
				pp[hd] = r.m, pp[hd + 1] = r.l;
		}
	}
}

/* out for (row blockIdx.x, head blockIdx.y): attn_dec_k's splits folded
 * (maxima in the log2 domain). */
__global__ void __launch_bounds__(AD_THREADS) attn_merge_k(float *out, const float *part, int n_heads, int hd,
							   int n_split)
{
	__shared__ float f[AD_MAX_SPLITS];
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
			f[i] = mi == -INFINITY ? 0.0f : exp2f(mi - mx);
			l += f[i] * p[i * (hd + 2) + hd + 1];
		}
		inv_l = 1.0f / l;
	}
	__syncthreads();
	for (int d = tid; d < hd; d += AD_THREADS) {
		float acc = 0;
		for (int i = 0; i < n_split; i++)
			acc += f[i] * p[i * (hd + 2) + d];
		out[(t * n_heads + h) * (int64_t)hd + d] = acc * inv_l;
	}
}

/* Context ranges per query for attn_dec_k: enough blocks for four per
 * multiprocessor, for the few rows of a decode step; one range for anything
 * bigger. Depends on the batch's rows, the heads and the device, never on
 * the context (which only the device reads): a step can be recorded once. */
static int attd_splits(int64_t n, int kv_blocks)
{
	int64_t blocks = n * kv_blocks, want = 4 * (int64_t)cu_n_sm();
	if (n > ATT_SPLIT_MAX_ROWS || blocks >= want)
		return 1;
	return (int)MIN((want + blocks - 1) / blocks, (int64_t)AD_MAX_SPLITS);
}

/* Issues attn_dec_k (and the merge) for a, or false when its head rows do
 * not split into whole chunks (attention_k then runs). */
static bool attn_dec(float *out, const float *q, int64_t n, const kern_attn *a)
{
	attd_args g = {};
	if (!att_layout_of(a->head_dim, a->k_type, a->v_type, &g.lay))
		return false;
	int group = a->n_heads / a->n_kv_heads;
	g.k = (const uint8_t *)a->k, g.v = (const uint8_t *)a->v;
	g.k_type = a->k_type, g.v_type = a->v_type;
	g.k_row = (int64_t)a->k_row, g.v_row = (int64_t)a->v_row;
	g.n_heads = a->n_heads, g.n_kv_heads = a->n_kv_heads, g.head_dim = a->head_dim;
	g.block_tokens = a->block_tokens;
	g.qscale = a->scale * 1.4426950408889634f;
	g.table = a->table, g.n_ctx = a->n_ctx, g.window = a->window;
	g.a16k = a->k_row % 16 == 0 && a->head_dim % 16 == 0;
	g.a16v = a->v_row % 16 == 0 && a->head_dim % 16 == 0;
	g.n_gc = (group + AD_GM - 1) / AD_GM;
	g.n_split = attd_splits(n, a->n_kv_heads * g.n_gc);
	if (g.n_split > 1 && !(g.part = (float *)cu_scratch(att_part_bytes(n, a->n_heads, a->head_dim, g.n_split))))
		return true; /* the failure is kept */
	dim3 grid((unsigned)(n * g.n_split), (unsigned)(a->n_kv_heads * g.n_gc));
	if (g.lay.kk <= 8 && g.lay.kv <= 8)
		attn_dec_k<8><<<grid, AD_THREADS, 0, cu_stream()>>>(out, q, g);
	else
		attn_dec_k<16><<<grid, AD_THREADS, 0, cu_stream()>>>(out, q, g);
	CU_LAUNCHED();
	if (g.n_split > 1) {
		attn_merge_k<<<dim3((unsigned)n, (unsigned)a->n_heads), AD_THREADS, 0, cu_stream()>>>(
			out, g.part, a->n_heads, a->head_dim, g.n_split);
		CU_LAUNCHED();
	}
	return true;
}

/* ---- the attention operation ---- */

/* Context ranges per query for attention_k: enough blocks for two per
 * multiprocessor, for the few rows of a decode step; one range for anything
 * bigger. */
static int att_splits(int64_t n, int n_heads)
{
	int64_t blocks = n * n_heads, want = 2 * (int64_t)cu_n_sm();
	if (n > ATT_SPLIT_MAX_ROWS || blocks >= want)
		return 1;
	return (int)MIN((want + blocks - 1) / blocks, (int64_t)ATT_MAX_SPLITS);
}

/* The most rows times splits attn_dec_k and attention_k use: n splits of
 * at most 4 blocks per multiprocessor each (rounded up) for n rows. */
size_t cu_attention_scratch(const kern_sizes *s)
{
	int64_t rows = MIN(s->max_rows, (int64_t)ATT_SPLIT_MAX_ROWS), most = 0;
	for (int64_t n = 1; n <= rows; n++)
		most = MAX(most, n * MAX(attd_splits(n, 1), att_splits(n, 1)));
	return att_part_bytes(most, s->n_heads, s->head_dim, 1);
}

void cu_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(out, (size_t)(n * a->n_heads * a->head_dim) * 4);
	/* llama_from_gguf refuses larger heads (kern_ops.max_head_dim) */
	assert(a->head_dim <= KERN_MAX_HEAD_DIM && a->n_heads <= 65535);
	if (attn_dec(out, q, n, a))
		return;
	attn_args g = {
		(const uint8_t *)a->k, (const uint8_t *)a->v, a->k_type, a->v_type,
		(int64_t)a->k_row, (int64_t)a->v_row, a->n_heads, a->n_kv_heads, a->head_dim,
		a->block_tokens, a->scale, a->table, a->n_ctx, a->window, att_splits(n, a->n_heads), NULL,
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
			   int64_t k_row, int64_t v_row, int k_type, int v_type, int n_heads, int hd, cu_rope_op rk,
			   cu_rope_op rq)
{
	int64_t t = blockIdx.x;
	bool is_v = blockIdx.y == 1;
	/* RoPE taken in (cu_rope_take): y 2 turns the row's Q, y 0 its K first */
	const cu_rope_op &r = blockIdx.y == 2 ? rq : rk;
	if (blockIdx.y != 1 && r.x) {
		int half = r.n_rot / 2;
		for (int i = threadIdx.x; i < r.n_heads * half; i += blockDim.x)
			cu_rope_pair(r, t * r.n_heads + i / half, i % half);
		if (blockIdx.y == 2)
			return;
		__syncthreads(); /* the rotated K row, read below */
	}
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

/* The RoPE kept back (backend.cu) of this K rows (rk) and of one other
 * operation over the same rows (rq: the layer's Q) go into the KV write's
 * launch; anything else is issued first. */
static void rope_into_write(const float *k, int64_t n, const kern_attn *f, cu_rope_op *rk, cu_rope_op *rq)
{
	cu_rope_op op[2];
	int m = cu_rope_take(op);
	*rk = *rq = cu_rope_op{};
	for (int i = 0; i < m; i++) {
		const float *x = op[i].x, *xe = x + n * op[i].n_heads * op[i].head_dim;
		bool is_k = x == k && op[i].n == n && op[i].n_heads == f->n_kv_heads && op[i].head_dim == f->head_dim;
		bool apart = xe <= k || k + n * f->n_kv_heads * f->head_dim <= x;
		if (is_k && !rk->x)
			*rk = op[i];
		else if (!is_k && apart && op[i].n == n && !rq->x)
			*rq = op[i];
		else
			cu_rope_issue(&op[i]);
	}
}

void cu_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
		 const kern_attn *f)
{
	if (n <= 0 || cu_failed()) {
		cu_pending_flush();
		return;
	}
	cu_rope_op rk, rq;
	rope_into_write(k, n, f, &rk, &rq);
	kv_write_k<<<dim3((unsigned)n, rq.x ? 3 : 2), 128, 0, cu_stream()>>>(
		(uint8_t *)kc, (uint8_t *)vc, k, v, slot, (int64_t)f->k_row, (int64_t)f->v_row, f->k_type, f->v_type,
		f->n_kv_heads, f->head_dim, rk, rq);
	CU_LAUNCHED();
}
