/* kernels/cuda/cuda_int.cuh: what the CUDA backend's files share.
 *
 * Everything runs on the legacy default stream of device 0, in issue order;
 * download (cudaMemcpy to the host) is the only wait. A failing CUDA or
 * cuBLAS call inside an operation is fatal (the ops cannot fail by contract);
 * only allocation failures come back as NULL. */
#ifndef PAGECHAT_CUDA_INT_CUH
#define PAGECHAT_CUDA_INT_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>

/* The C headers, with C11's _Noreturn spelled for C++. */
#define _Noreturn __attribute__((noreturn))
extern "C" {
#include "kernels/kern.h"
#include "kernels/kvq.h"
}
#undef _Noreturn

#define CU_CHECK(call) do { cudaError_t r_ = (call); \
	if (r_ != cudaSuccess) fatal("cuda: %s: %s", #call, cudaGetErrorString(r_)); } while (0)
#define BLAS_CHECK(call) do { cublasStatus_t r_ = (call); \
	if (r_ != CUBLAS_STATUS_SUCCESS) fatal("cublas: %s: %s", #call, cublasGetStatusString(r_)); } while (0)
/* After a launch: a bad configuration shows up here, a fault at the next
 * sync, or right here, named, with PAGECHAT_CUDA_SYNC=1 (debugging). */
#define CU_LAUNCHED() cu_launched(__func__)
void cu_launched(const char *op);

/* Blocks of n threads enough for total items. */
static inline unsigned cu_blocks(int64_t total, int threads)
{
	return (unsigned)((total + threads - 1) / threads);
}

/* Device scratch owned by the backend (grows, never shrinks). */
void *cu_scratch(size_t bytes);
cublasHandle_t cu_blas(void);

/* kernels/cuda/mm.cu */
void cu_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out);
void cu_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim);
bool cu_supports(enum dtype t);

/* kernels/cuda/attn.cu */
void cu_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
		 const kern_attn *f);
void cu_attention(float *out, const float *q, int64_t n, const kern_attn *a);

#endif
