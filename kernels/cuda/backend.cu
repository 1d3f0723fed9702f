/* kernels/cuda/backend.cu: the CUDA backend's table and state (its stream,
 * cuBLAS, the operations' scratch, the first failure), its memory operations
 * and the row-wise and element-wise kernels (RMSNorm, RoPE, SwiGLU, adds).
 * Matmuls and embeddings are in mm.cu, KV writes and attention in attn.cu,
 * recording (CUDA graphs) and uploads in graph.cu.
 *
 * Every kernel computes one output element (or one row's reduction) the same
 * way whatever the batch, so rows do not depend on the rows beside them; the
 * matmul is the exception (see mm.cu). */
#include "kernels/cuda/cuda_int.cuh"

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
	void *scratch;           /* owned, device; cu_scratch */
	size_t scratch_cap;
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

/* Replaces the scratch by one of bytes; false, the old one kept, when it
 * does not fit (the CUDA error cleared: not a failure of the device) or the
 * device has failed (kept). */
static bool scratch_grow(size_t bytes)
{
	void *p = NULL;
	cudaError_t r = cudaMalloc(&p, bytes);
	if (r == cudaErrorMemoryAllocation)
		(void)cudaGetLastError();
	else
		cu_ok(r, "cudaMalloc (scratch)");
	if (r != cudaSuccess)
		return false;
	if (S.scratch) {
		/* kernels issued before may still read it */
		cu_ok(cudaStreamSynchronize(S.stream), "scratch: waiting for the device");
		cu_ok(cudaFree(S.scratch), "cudaFree(scratch)");
	}
	S.scratch = p;
	S.scratch_cap = bytes;
	cu_scratch_moved();
	return true;
}

void *cu_scratch(size_t bytes)
{
	if (bytes <= S.scratch_cap)
		return S.scratch;
	if (cu_recording()) {
		cu_record_spoil(); /* the operations then run unrecorded, where it can grow */
		return NULL;
	}
	if (!scratch_grow(bytes)) {
		char why[96];
		snprintf(why, sizeof why, "no room for %zu bytes of device memory", bytes);
		cu_fail("operation scratch", why);
		return NULL;
	}
	return S.scratch;
}

static int cu_reserve(const kern_sizes *s, err *e)
{
	size_t a = cu_matmul_scratch(s), b = cu_attention_scratch(s), need = a > b ? a : b;
	if (cu_failed())
		return cu_status(e);
	if (need <= S.scratch_cap || scratch_grow(need))
		return 0;
	if (cu_failed())
		return cu_status(e);
	err_set(e, "cuda: the operations' scratch for batches of %lld rows (%.1f MiB) does not fit in device "
		"memory; lower the batch (chunk) size", (long long)s->max_rows, (double)need / 1048576.0);
	return -1;
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

/* One block per row; the sum of squares in double, like the CPU backend. */
__global__ void rmsnorm_k(float *y, const float *x, const float *w, int64_t dim, float eps)
{
	__shared__ double part[NORM_THREADS / 32];
	const float *xr = x + blockIdx.x * dim;
	float *yr = y + blockIdx.x * dim;
	double ss = 0;
	for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
		ss += (double)xr[d] * xr[d];
	for (int o = 16; o > 0; o /= 2)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (threadIdx.x % 32 == 0)
		part[threadIdx.x / 32] = ss;
	__syncthreads();
	double tot = 0;
	for (int i = 0; i < NORM_THREADS / 32; i++)
		tot += part[i];
	float scale = (float)(1.0 / sqrt(tot / (double)dim + eps));
	for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
		yr[d] = xr[d] * scale * w[d];
}

static void cu_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	if (n <= 0 || cu_failed())
		return;
	rmsnorm_k<<<(unsigned)n, NORM_THREADS, 0, S.stream>>>(y, x, w, dim, eps);
	CU_LAUNCHED();
}

/* One thread per (row, head, pair). */
__global__ void rope_k(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim, int n_rot,
		       const float *inv_freq, bool neox)
{
	int half = n_rot / 2;
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * n_heads * half)
		return;
	int f = (int)(i % half);
	int64_t th = i / half;
	int64_t t = th / n_heads;
	float theta = (float)pos[t] * inv_freq[f];
	float c = cosf(theta), s = sinf(theta);
	float *v = x + th * head_dim;
	int a = neox ? f : 2 * f, b = neox ? f + half : 2 * f + 1;
	float x0 = v[a], x1 = v[b];
	v[a] = x0 * c - x1 * s;
	v[b] = x0 * s + x1 * c;
}

static void cu_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim, int n_rot,
		    const float *inv_freq, bool neox)
{
	int64_t total = n * n_heads * (n_rot / 2);
	if (total <= 0 || cu_failed())
		return;
	rope_k<<<cu_blocks(total, 256), 256, 0, S.stream>>>(x, pos, n, n_heads, head_dim, n_rot, inv_freq, neox);
	CU_LAUNCHED();
}

/* ---- element-wise ---- */

__global__ void silu_mul_k(float *g, const float *u, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void cu_silu_mul(float *g, const float *u, int64_t n)
{
	if (n <= 0 || cu_failed())
		return;
	silu_mul_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(g, u, n);
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
	add_k<<<cu_blocks(n, 256), 256, 0, S.stream>>>(y, x, n, n);
	CU_LAUNCHED();
}

static void cu_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	if (n * dim <= 0 || cu_failed())
		return;
	add_k<<<cu_blocks(n * dim, 256), 256, 0, S.stream>>>(y, b, n * dim, dim);
	CU_LAUNCHED();
}

/* ---- the table ---- */

static const kern_ops cuda_ops = {
	.name = "cuda",
	.supports = cu_supports,
	.max_head_dim = KERN_MAX_HEAD_DIM,
	.set_threads = cu_set_threads,
	.matmul = cu_matmul,
	.matmul_group = nullptr, /* Q/K/V and gate/up go one matmul at a time */
	.embed = cu_embed,
	.rmsnorm = cu_rmsnorm,
	.rope = cu_rope,
	.silu_mul = cu_silu_mul,
	.add = cu_add,
	.add_bias = cu_add_bias,
	.kv_write = cu_kv_write,
	.attention = cu_attention,
	.kv_shift = nullptr,     /* no context shift on CUDA yet: context.overflow shift is refused */
	.weights_add = nullptr,  /* the weights go up as they are stored */
	.weights_remove = nullptr,
	.buf_alloc = cu_buf_alloc,
	.buf_free = cu_buf_free,
	.upload = cu_upload,
	.download = cu_download,
	.copy = cu_copy,
	.mem_info = cu_mem_info,
	.status = cu_status,
	.reserve = cu_reserve,
	.record_begin = cu_record_begin,
	.record_end = cu_record_end,
	.replay = cu_replay,
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
	/* CUDA graphs for decode steps: off unless PAGECHAT_CUDA_GRAPH=1 (not yet
	 * measured on a GPU), and never with a wait after every kernel */
	cu_graph_init(env_is("PAGECHAT_CUDA_GRAPH", "1") && !S.sync);
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
