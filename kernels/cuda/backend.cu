/* kernels/cuda/backend.cu: the CUDA backend's table and state (its stream,
 * cuBLAS, the operations' scratch, the first failure), its memory operations
 * and the row-wise and element-wise kernels (RMSNorm, RoPE, SwiGLU, GELU,
 * scaling, adds).
 * Matmuls and embeddings are in mm.cu, KV writes and attention in attn.cu,
 * recording (CUDA graphs) and uploads in graph.cu. Fewer launches: RMSNorm
 * and SwiGLU also write the next matmul's int8 activations (cu_act_fuse),
 * RoPE goes into the KV write's launch (cu_rope_take), Q/K/V and gate/up are
 * one launch each (matmul_group), and decode steps are recorded as CUDA
 * graphs unless PAGECHAT_CUDA_GRAPH=0.
 *
 * Every kernel computes one output element (or one row's reduction) the same
 * way whatever the batch, so rows do not depend on the rows beside them; the
 * matmul is the exception (see mm.cu). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/mvq.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct cu_state {
	bool tried, ok;
	bool sync;               /* PAGECHAT_CUDA_SYNC=1: wait for every kernel */
	char why[400];           /* why the backend is unusable, when !ok */
	char failed[480];        /* the first failure since start, "" while none */
	cudaStream_t stream;     /* owned; every operation's */
	int n_sm;                /* multiprocessors of device 0 */
	cublasHandle_t blas;     /* owned */
	void *blas_ws;           /* owned, device; cuBLAS's workspace */
	float *consts;           /* owned, device; {1, 0} */
	struct {
		void *p;         /* owned, device */
		size_t cap;
	} scr[2];                /* cu_scratch, cu_act_scratch */
} S;

void cu_fail(const char *what, const char *why)
{
	if (cu_recording()) {
		cu_record_spoil(); /* capture refused it; the device has not failed */
		return;
	}
	if (!S.failed[0])
		snprintf(S.failed, sizeof S.failed, "cuda: %s: %s", what, why);
}

bool cu_failed(void)
{
	return S.failed[0] != 0;
}

static int cu_status(err *e)
{
	if (!cu_failed())
		return 0;
	err_set(e, "%s", S.failed);
	return -1;
}

cudaStream_t cu_stream(void) { return S.stream; }
int cu_n_sm(void) { return S.n_sm; }
cublasHandle_t cu_blas(void) { return S.blas; }
const float *cu_consts(void) { return S.consts; }

/* Replaces scratch slot i by one of bytes; false, the old one kept, when it
 * does not fit (the CUDA error cleared: not a failure of the device) or the
 * device has failed (kept). */
static bool scratch_grow(int i, size_t bytes)
{
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes);
	if (r == cudaErrorMemoryAllocation)
		(void)cudaGetLastError();
	else
		cu_ok(r, "cudaMalloc (scratch)");
	if (r != cudaSuccess)
		return false;
	if (S.scr[i].p) {
		/* kernels issued before may still read it */
		cu_ok(cudaStreamSynchronize(S.stream), "scratch: waiting for the device");
		cu_ok(cudaFree(S.scr[i].p), "cudaFree(scratch)");
	}
	S.scr[i].p = p;
	S.scr[i].cap = bytes;
	cu_scratch_moved();
	if (i == 1)
		cu_act_forget();
	return true;
}

static void *scratch_at(int i, size_t bytes)
{
	if (bytes <= S.scr[i].cap)
		return S.scr[i].p;
	if (cu_recording()) {
		cu_record_spoil(); /* the operations then run unrecorded, where it can grow */
		return NULL;
	}
	if (!scratch_grow(i, bytes)) {
		char why[96];
		snprintf(why, sizeof why, "no room for %zu bytes of device memory", bytes);
		cu_fail("operation scratch", why);
		return NULL;
	}
	return S.scr[i].p;
}

void *cu_scratch(size_t bytes)
{
	return scratch_at(0, bytes);
}

void *cu_act_scratch(size_t bytes)
{
	return scratch_at(1, bytes);
}

size_t cu_act_scratch_cap(void)
{
	return S.scr[1].cap;
}

static int cu_reserve(const kern_sizes *s, err *e)
{
	size_t a = cu_matmul_scratch(s), b = cu_attention_scratch(s), need[2] = {a > b ? a : b, cu_act_scratch_bytes(s)};
	for (int i = 0; i < 2; i++) {
		if (cu_failed())
			return cu_status(e);
		if (need[i] <= S.scr[i].cap || scratch_grow(i, need[i]))
			continue;
		if (cu_failed())
			return cu_status(e);
		err_set(e, "cuda: the operations' scratch for batches of %lld rows (%.1f MiB) does not fit in device "
			"memory; lower the batch (chunk) size", (long long)s->max_rows, (double)need[i] / 1048576.0);
		return -1;
	}
	return 0;
}

void cu_launched(const char *op)
{
	cudaError_t r = cudaGetLastError();
	if (r == cudaSuccess && S.sync && !cu_recording())
		r = cudaStreamSynchronize(S.stream);
	cu_ok(r, op);
}

/* ---- memory ---- */

static void *cu_buf_alloc(size_t bytes)
{
	assert(!cu_recording());
	void *p = NULL;
	if (cu_failed())
		return NULL;
	cudaError_t r = cudaMalloc(&p, bytes ? bytes : 1);
	if (r == cudaErrorMemoryAllocation) {
		(void)cudaGetLastError(); /* "does not fit" is an answer, not a failure */
		return NULL;
	}
	if (!cu_ok(r, "cudaMalloc"))
		return NULL;
	if (!cu_ok(cudaMemsetAsync(p, 0, bytes, S.stream), "cudaMemsetAsync")) {
		(void)cudaFree(p);
		return NULL;
	}
	return p;
}

static void cu_buf_free(void *p)
{
	assert(!cu_recording());
	cu_act_forget();
	if (p)
		cu_ok(cudaFree(p), "cudaFree");
}

static void cu_download(void *dst, const void *src, size_t bytes)
{
	assert(!cu_recording());
	if (!cu_failed() &&
	    cu_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S.stream), "download") &&
	    cu_ok(cudaStreamSynchronize(S.stream), "download (a kernel before it)"))
		return;
	memset(dst, 0, bytes); /* defined bytes; status reports the failure */
}

static void cu_copy(void *dst, const void *src, size_t bytes)
{
	assert(!cu_recording());
	cu_act_touch(dst, bytes);
	if (!cu_failed())
		cu_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S.stream), "copy");
}

static void cu_mem_info(int64_t *free_bytes, int64_t *total_bytes)
{
	size_t f = 0, t = 0;
	if (cu_failed() || !cu_ok(cudaMemGetInfo(&f, &t), "cudaMemGetInfo"))
		f = t = 0;
	*free_bytes = (int64_t)f;
	*total_bytes = (int64_t)t;
}

static int cu_set_threads(int n)
{
	(void)n;
	return 1;
}

/* ---- row-wise ---- */

#define NORM_THREADS 256

/* The sum of squares of a row's values (each thread's part in ss) over the
 * block, in double like the CPU backend. */
static __device__ double block_sum(double ss)
{
	__shared__ double part[NORM_THREADS / 32];
	for (int o = 16; o > 0; o /= 2)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (threadIdx.x % 32 == 0)
		part[threadIdx.x / 32] = ss;
	__syncthreads();
	double tot = 0;
	for (int i = 0; i < NORM_THREADS / 32; i++)
		tot += part[i];
	return tot;
}

/* One block per row, any width. */
__global__ void rmsnorm_k(float *y, const float *x, const float *w, int64_t dim, float eps)
{
	const float *xr = x + blockIdx.x * dim;
	float *yr = y + blockIdx.x * dim;
	double ss = 0;
	for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
		ss += (double)xr[d] * xr[d];
	float scale = (float)(1.0 / sqrt(block_sum(ss) / (double)dim + eps));
	for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
		yr[d] = xr[d] * scale * w[d];
}

/* 8 values of a thread's as int8 codes (xq_code8) in blocks of B (B / 8
 * neighbouring lanes; every lane of the warp takes part), at value i8 * 8 of
 * the flat array. */
template <int B>
static __device__ __forceinline__ void quant8(const float v[8], int64_t i8, bool in, int8_t *q, float *qd)
{
	float amax = 0;
	for (int j = 0; j < 8; j++)
		amax = fmaxf(amax, fabsf(v[j]));
	for (int o = B / 16; o > 0; o /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	uint32_t c[2];
	xq_code8(v, amax, c);
	if (in) {
		((uint2 *)q)[i8] = make_uint2(c[0], c[1]);
		if (i8 % (B / 8) == 0)
			qd[i8 / (B / 8)] = xq_scale(amax);
	}
}

/* Widths of whole blocks of B (dim % B == 0): 8 neighbouring values a
 * thread, written as f32 and, fused, as the next matmul's int8 codes. */
template <int B>
__global__ void rmsnorm_q_k(float *y, const float *x, const float *w, int64_t dim, float eps, int8_t *q, float *qd)
{
	const float4 *xr = (const float4 *)(x + blockIdx.x * dim);
	float4 *yr = (float4 *)(y + blockIdx.x * dim);
	const float4 *wr = (const float4 *)w;
	int64_t n8 = dim / 8, lim = (n8 + 31) / 32 * 32;
	double ss = 0;
	for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
		float4 a = xr[2 * i], b = xr[2 * i + 1];
		ss += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
		ss += (double)b.x * b.x + (double)b.y * b.y + (double)b.z * b.z + (double)b.w * b.w;
	}
	float scale = (float)(1.0 / sqrt(block_sum(ss) / (double)dim + eps));
	for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
		float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		if (i < n8) {
			float4 a = xr[2 * i], b = xr[2 * i + 1], wa = wr[2 * i], wb = wr[2 * i + 1];
			v[0] = a.x * scale * wa.x, v[1] = a.y * scale * wa.y, v[2] = a.z * scale * wa.z;
			v[3] = a.w * scale * wa.w, v[4] = b.x * scale * wb.x, v[5] = b.y * scale * wb.y;
			v[6] = b.z * scale * wb.z, v[7] = b.w * scale * wb.w;
			yr[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
			yr[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
		}
		quant8<B>(v, blockIdx.x * n8 + i, i < n8, q, qd);
	}
}

static void cu_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	cu_xq xq;
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(y, (size_t)(n * dim) * 4);
	/* rows of whole blocks of 256 values (32 for q8_0/q4_0), so no scale
	 * block of the codes spans two rows */
	if (dim % 256 == 0 && cu_act_fuse(y, n * dim, &xq)) {
		if (xq.blk == 256)
			rmsnorm_q_k<256><<<(unsigned)n, NORM_THREADS, 0, S.stream>>>(y, x, w, dim, eps, xq.q, xq.d);
		else
			rmsnorm_q_k<32><<<(unsigned)n, NORM_THREADS, 0, S.stream>>>(y, x, w, dim, eps, xq.q, xq.d);
	} else {
		rmsnorm_k<<<(unsigned)n, NORM_THREADS, 0, S.stream>>>(y, x, w, dim, eps);
	}
	CU_LAUNCHED();
}

/* One thread per (row, head, pair). */
__global__ void rope_k(cu_rope_op r)
{
	int half = r.n_rot / 2;
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < r.n * r.n_heads * half)
		cu_rope_pair(r, i / half, (int)(i % half));
}

static struct {
	cu_rope_op op[2];
	int n;
} PR; /* RoPE not yet issued (cuda_int.cuh) */

void cu_rope_issue(const cu_rope_op *r)
{
	int64_t total = r->n * r->n_heads * (r->n_rot / 2);
	rope_k<<<cu_blocks(total, 256), 256, 0, S.stream>>>(*r);
	CU_LAUNCHED();
}

void cu_pending_flush(void)
{
	for (int i = 0; i < PR.n; i++)
		if (!cu_failed())
			cu_rope_issue(&PR.op[i]);
	PR.n = 0;
}

int cu_rope_take(cu_rope_op out[2])
{
	int n = PR.n;
	for (int i = 0; i < n; i++)
		out[i] = PR.op[i];
	PR.n = 0;
	return n;
}

static void cu_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim, int n_rot,
		    const float *inv_freq, bool neox)
{
	if (n * n_heads * (n_rot / 2) <= 0 || cu_failed())
		return;
	cu_act_touch(x, (size_t)(n * n_heads * head_dim) * 4);
	if (PR.n == 2)
		cu_pending_flush();
	PR.op[PR.n++] = (cu_rope_op){x, pos, n, n_heads, head_dim, n_rot, inv_freq, neox};
}

/* ---- element-wise ---- */

static __device__ __forceinline__ float silu_mul1(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

__global__ void silu_mul_k(float *g, const float *u, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		g[i] = silu_mul1(g[i], u[i]);
}

/* SwiGLU fused with the down projection's int8 codes: 8 values a thread
 * (n % B == 0). */
template <int B>
__global__ void silu_mul_q_k(float *g, const float *u, int64_t n8, int8_t *q, float *qd)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	if (i < n8) {
		float4 *gp = (float4 *)g + 2 * i;
		const float4 *up = (const float4 *)u + 2 * i;
		float4 a = gp[0], b = gp[1], ua = up[0], ub = up[1];
		v[0] = silu_mul1(a.x, ua.x), v[1] = silu_mul1(a.y, ua.y), v[2] = silu_mul1(a.z, ua.z);
		v[3] = silu_mul1(a.w, ua.w), v[4] = silu_mul1(b.x, ub.x), v[5] = silu_mul1(b.y, ub.y);
		v[6] = silu_mul1(b.z, ub.z), v[7] = silu_mul1(b.w, ub.w);
		gp[0] = make_float4(v[0], v[1], v[2], v[3]);
		gp[1] = make_float4(v[4], v[5], v[6], v[7]);
	}
	quant8<B>(v, i, i < n8, q, qd);
}

static void cu_silu_mul(float *g, const float *u, int64_t n)
{
	cu_xq xq;
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(g, (size_t)n * 4);
	if (n % 8 == 0 && cu_act_fuse(g, n, &xq)) {
		unsigned blocks = cu_blocks(n / 8, 256);
		if (xq.blk == 256)
			silu_mul_q_k<256><<<blocks, 256, 0, S.stream>>>(g, u, n / 8, xq.q, xq.d);
		else
			silu_mul_q_k<32><<<blocks, 256, 0, S.stream>>>(g, u, n / 8, xq.q, xq.d);
	} else {
		silu_mul_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(g, u, n);
	}
	CU_LAUNCHED();
}

/* GELU, tanh form (kern.h). */
__global__ void gelu_mul_k(float *g, const float *u, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float x = g[i];
		g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
	}
}

static void cu_gelu_mul(float *g, const float *u, int64_t n)
{
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(g, (size_t)n * 4);
	gelu_mul_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(g, u, n);
	CU_LAUNCHED();
}

__global__ void scale_k(float *x, float s, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= s;
}

static void cu_scale(float *x, float s, int64_t n)
{
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(x, (size_t)n * 4);
	scale_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(x, s, n);
	CU_LAUNCHED();
}

/* y[i] += x[i % period] (period = n for a plain add, dim for a bias). */
__global__ void add_k(float *y, const float *x, int64_t n, int64_t period)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += x[i % period];
}

static void cu_add(float *y, const float *x, int64_t n)
{
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(y, (size_t)n * 4);
	add_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(y, x, n, n);
	CU_LAUNCHED();
}

static void cu_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	if (n * dim <= 0 || cu_failed())
		return;
	cu_act_touch(y, (size_t)(n * dim) * 4);
	add_k<<<cu_blocks(n * dim, 256), 256, 0, S.stream>>>(y, b, n * dim, dim);
	CU_LAUNCHED();
}

/* ---- the table ---- */

/* Every entry but RoPE and the KV write first issues the RoPE kept back. */
#define FLUSHED(name, params, args)          \
	static void f_##name params          \
	{                                    \
		cu_pending_flush();          \
		name args;                   \
	}
FLUSHED(cu_matmul, (float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out),
	(y, x, w, wt, n, k, n_out))
FLUSHED(cu_matmul_group, (const kern_mm *mm, int n_mm, const float *x, int64_t n, int64_t k), (mm, n_mm, x, n, k))
FLUSHED(cu_embed, (float *y, const void *t, enum dtype wt, const int32_t *ids, int64_t n, int64_t dim),
	(y, t, wt, ids, n, dim))
FLUSHED(cu_rmsnorm, (float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps),
	(y, x, w, n, dim, eps))
FLUSHED(cu_silu_mul, (float *g, const float *u, int64_t n), (g, u, n))
FLUSHED(cu_gelu_mul, (float *g, const float *u, int64_t n), (g, u, n))
FLUSHED(cu_scale, (float *x, float s, int64_t n), (x, s, n))
FLUSHED(cu_add, (float *y, const float *x, int64_t n), (y, x, n))
FLUSHED(cu_add_bias, (float *y, const float *b, int64_t n, int64_t dim), (y, b, n, dim))
FLUSHED(cu_attention, (float *out, const float *q, int64_t n, const kern_attn *a), (out, q, n, a))
FLUSHED(cu_buf_free, (void *p), (p))
FLUSHED(cu_upload, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
FLUSHED(cu_download, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
FLUSHED(cu_copy, (void *dst, const void *src, size_t bytes), (dst, src, bytes))

static void *f_cu_buf_alloc(size_t bytes)
{
	cu_pending_flush();
	return cu_buf_alloc(bytes);
}

static int f_cu_reserve(const kern_sizes *s, err *e)
{
	cu_pending_flush();
	return cu_reserve(s, e);
}

static bool f_cu_record_begin(void)
{
	cu_pending_flush();
	return cu_record_begin();
}

static kern_graph *f_cu_record_end(void)
{
	cu_pending_flush();
	return cu_record_end();
}

static int f_cu_replay(kern_graph *g)
{
	cu_pending_flush();
	return cu_replay(g);
}

static int f_cu_status(err *e)
{
	cu_pending_flush();
	return cu_status(e);
}


static const kern_ops cuda_ops = {
	.name = "cuda",
	.supports = cu_supports,
	.max_head_dim = KERN_MAX_HEAD_DIM,
	.set_threads = cu_set_threads,
	.matmul = f_cu_matmul,
	.matmul_group = f_cu_matmul_group, /* decode: Q/K/V, gate/up in one launch each */
	.embed = f_cu_embed,
	.rmsnorm = f_cu_rmsnorm,
	.rope = cu_rope,
	.silu_mul = f_cu_silu_mul,
	.gelu_mul = f_cu_gelu_mul,
	.scale = f_cu_scale,
	.add = f_cu_add,
	.add_bias = f_cu_add_bias,
	.kv_write = cu_kv_write,
	.attention = f_cu_attention,
	.kv_shift = nullptr,     /* no context shift on CUDA yet: context.overflow shift is refused */
	.weights_add = nullptr,  /* the weights go up as they are stored */
	.weights_remove = nullptr,
	.buf_alloc = f_cu_buf_alloc,
	.buf_free = f_cu_buf_free,
	.upload = f_cu_upload,
	.download = f_cu_download,
	.copy = f_cu_copy,
	.mem_info = cu_mem_info,
	.status = f_cu_status,
	.reserve = f_cu_reserve,
	.record_begin = f_cu_record_begin,
	.record_end = f_cu_record_end,
	.replay = f_cu_replay,
	.graph_free = cu_graph_free,
};

static bool env_is(const char *name, const char *value)
{
	const char *v = getenv(name);
	return v && !strcmp(v, value);
}

/* The stream, cuBLAS on it with a workspace of its own (the size cuBLAS's
 * documentation advises: 32 MiB from Hopper on, else 4 MiB) and alpha/beta
 * in device memory; NULL or the step that failed. */
static const char *setup_device(void)
{
	int major = 0;
	const float consts[2] = {1.0f, 0.0f};
	if (cudaStreamCreateWithFlags(&S.stream, cudaStreamNonBlocking) != cudaSuccess)
		return "cudaStreamCreateWithFlags";
	if (cudaDeviceGetAttribute(&S.n_sm, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
	    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess)
		return "cudaDeviceGetAttribute";
	size_t ws = major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
	if (cudaMalloc(&S.blas_ws, ws) != cudaSuccess || cudaMalloc((void **)&S.consts, sizeof consts) != cudaSuccess)
		return "cudaMalloc (cuBLAS workspace)";
	if (cudaMemcpy(S.consts, consts, sizeof consts, cudaMemcpyHostToDevice) != cudaSuccess)
		return "cudaMemcpy";
	if (cublasCreate(&S.blas) != CUBLAS_STATUS_SUCCESS)
		return "cublasCreate";
	/* the stream first: setting it resets the workspace to cuBLAS's own */
	if (cublasSetStream(S.blas, S.stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(S.blas, S.blas_ws, ws) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetPointerMode(S.blas, CUBLAS_POINTER_MODE_DEVICE) != CUBLAS_STATUS_SUCCESS ||
	    /* plain FP32 for f32 weights: no TF32 unless asked for */
	    cublasSetMathMode(S.blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
		return "cuBLAS setup";
	return NULL;
}

/* First use: device 0, its stream and cuBLAS, or the reason there are none. */
static void cu_init(void)
{
	S.tried = true;
	S.sync = env_is("PAGECHAT_CUDA_SYNC", "1");
	int n = 0;
	cudaError_t r = cudaGetDeviceCount(&n);
	if (r != cudaSuccess || n == 0) {
		snprintf(S.why, sizeof S.why, "no CUDA device: %s",
			 r != cudaSuccess ? cudaGetErrorString(r) : "cudaGetDeviceCount found none");
		(void)cudaGetLastError();
		return;
	}
	if ((r = cudaSetDevice(0)) != cudaSuccess) {
		snprintf(S.why, sizeof S.why, "no CUDA device: cudaSetDevice(0): %s", cudaGetErrorString(r));
		return;
	}
	const char *bad = setup_device();
	if (bad) {
		r = cudaGetLastError();
		snprintf(S.why, sizeof S.why, "CUDA device 0 unusable: %s failed (%s)", bad, cudaGetErrorString(r));
		return;
	}
	/* CUDA graphs for decode steps: on unless PAGECHAT_CUDA_GRAPH=0, and
	 * never with a wait after every kernel */
	cu_graph_init(!env_is("PAGECHAT_CUDA_GRAPH", "0") && !S.sync);
	S.ok = true;
}

/* The library's entry point: kern_cuda() (kernels/device.c) loads this
 * library and calls it. */
extern "C" const kern_ops *pagechat_cuda_backend(err *e)
{
	if (!S.tried)
		cu_init();
	if (!S.ok) {
		err_set(e, "%s", S.why);
		return NULL;
	}
	return &cuda_ops;
}
