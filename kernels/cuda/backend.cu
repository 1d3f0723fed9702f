/* kernels/cuda/backend.cu: the CUDA backend's table, its memory operations and
 * the row-wise and element-wise kernels (RMSNorm, RoPE, SwiGLU, adds).
 * Matmuls and embeddings are in mm.cu, KV writes and attention in attn.cu.
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
	cublasHandle_t blas;
	void *scratch;           /* owned, device */
	size_t scratch_cap;
} S;

void *cu_scratch(size_t bytes)
{
	if (bytes > S.scratch_cap) {
		if (S.scratch)
			CU_CHECK(cudaFree(S.scratch));
		S.scratch = NULL;
		S.scratch_cap = 0;
		if (cudaMalloc(&S.scratch, bytes) != cudaSuccess)
			fatal("cuda: no room for %zu bytes of matmul scratch", bytes);
		S.scratch_cap = bytes;
	}
	return S.scratch;
}

void cu_launched(const char *op)
{
	cudaError_t r = cudaGetLastError();
	if (r == cudaSuccess && S.sync)
		r = cudaDeviceSynchronize();
	if (r != cudaSuccess)
		fatal("cuda: %s: %s", op, cudaGetErrorString(r));
}

cublasHandle_t cu_blas(void)
{
	return S.blas;
}

/* ---- memory ---- */

static void *cu_buf_alloc(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
		(void)cudaGetLastError(); /* an allocation failure is reported, not sticky */
		return NULL;
	}
	CU_CHECK(cudaMemset(p, 0, bytes));
	return p;
}

static void cu_buf_free(void *p)
{
	if (p)
		CU_CHECK(cudaFree(p));
}

static void cu_upload(void *dst, const void *src, size_t bytes)
{
	CU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cu_download(void *dst, const void *src, size_t bytes)
{
	CU_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void cu_copy(void *dst, const void *src, size_t bytes)
{
	CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}

static void cu_mem_info(int64_t *free_bytes, int64_t *total_bytes)
{
	size_t f = 0, t = 0;
	CU_CHECK(cudaMemGetInfo(&f, &t));
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
	if (n <= 0)
		return;
	rmsnorm_k<<<(unsigned)n, NORM_THREADS>>>(y, x, w, dim, eps);
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
	if (total <= 0)
		return;
	rope_k<<<cu_blocks(total, 256), 256>>>(x, pos, n, n_heads, head_dim, n_rot, inv_freq, neox);
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
	if (n <= 0)
		return;
	silu_mul_k<<<cu_blocks(n, 256), 256>>>(g, u, n);
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
	if (n <= 0)
		return;
	add_k<<<cu_blocks(n, 256), 256>>>(y, x, n, n);
	CU_LAUNCHED();
}

static void cu_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	if (n * dim <= 0)
		return;
	add_k<<<cu_blocks(n * dim, 256), 256>>>(y, b, n * dim, dim);
	CU_LAUNCHED();
}

/* ---- the table ---- */

static const kern_ops cuda_ops = {
	.name = "cuda",
	.supports = cu_supports,
	.max_head_dim = KERN_MAX_HEAD_DIM,
	.set_threads = cu_set_threads,
	.matmul = cu_matmul,
	.embed = cu_embed,
	.rmsnorm = cu_rmsnorm,
	.rope = cu_rope,
	.silu_mul = cu_silu_mul,
	.add = cu_add,
	.add_bias = cu_add_bias,
	.kv_write = cu_kv_write,
	.attention = cu_attention,
	.buf_alloc = cu_buf_alloc,
	.buf_free = cu_buf_free,
	.upload = cu_upload,
	.download = cu_download,
	.copy = cu_copy,
	.mem_info = cu_mem_info,
};

/* First use: device 0 and a cuBLAS handle, or the reason there are none. */
static void cu_init(void)
{
	S.tried = true;
	const char *sync = getenv("PAGECHAT_CUDA_SYNC");
	S.sync = sync && !strcmp(sync, "1");
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
	cublasStatus_t b = cublasCreate(&S.blas);
	if (b != CUBLAS_STATUS_SUCCESS) {
		snprintf(S.why, sizeof S.why, "cuBLAS: cublasCreate: %s", cublasGetStatusString(b));
		return;
	}
	/* plain FP32 for f32 weights: no TF32 unless asked for */
	cublasSetMathMode(S.blas, CUBLAS_DEFAULT_MATH);
	S.ok = true;
}

extern "C" const kern_ops *kern_cuda(err *e)
{
	if (!S.tried)
		cu_init();
	if (!S.ok) {
		err_set(e, "%s", S.why);
		return NULL;
	}
	return &cuda_ops;
}
