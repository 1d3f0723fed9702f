/* kernels/cuda/cuda_int.cuh: what the CUDA backend's files share.
 *
 * Everything runs in issue order on one stream of device 0 (cu_stream(), a
 * non-blocking stream, so that it can be recorded as a CUDA graph); download
 * is the only wait. A CUDA or cuBLAS call that fails inside an operation is
 * kept as the backend's failure (cu_ok, cu_blas_ok, CU_LAUNCHED) for
 * kern_ops.status to report; operations issued after a failure are skipped
 * (cu_failed). Programmer errors (an unsupported weight type reaching a
 * kernel) are asserts. Nothing here prints or exits. The engine thread is
 * the only caller. */
#ifndef PAGECHAT_CUDA_INT_CUH
#define PAGECHAT_CUDA_INT_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <assert.h>
#include <stdint.h>

/* The C headers, with C11's _Noreturn spelled for C++. */
#define _Noreturn __attribute__((noreturn))
extern "C" {
#include "kernels/kern.h"
#include "kernels/kvq.h"
}
#undef _Noreturn

/* Keeps the first failure ("cuda: what: why"); later ones are dropped. */
void cu_fail(const char *what, const char *why);
/* True after a failure: an operation returns without issuing anything. */
bool cu_failed(void);

/* False (and the failure kept) unless r is success. */
static inline bool cu_ok(cudaError_t r, const char *what)
{
	if (r != cudaSuccess)
		cu_fail(what, cudaGetErrorString(r));
	return r == cudaSuccess;
}

static inline bool cu_blas_ok(cublasStatus_t r, const char *what)
{
	if (r != CUBLAS_STATUS_SUCCESS)
		cu_fail(what, cublasGetStatusString(r));
	return r == CUBLAS_STATUS_SUCCESS;
}

/* After a launch: a bad configuration shows up here, a fault at the next
 * download, or right here, named, with PAGECHAT_CUDA_SYNC=1 (debugging). */
#define CU_LAUNCHED() cu_launched(__func__)
void cu_launched(const char *op);

/* Blocks of n threads enough for total items. */
static inline unsigned cu_blocks(int64_t total, int threads)
{
	return (unsigned)((total + threads - 1) / threads);
}

/* The stream every operation runs on, and the device's multiprocessors. */
cudaStream_t cu_stream(void);
int cu_n_sm(void);

/* Device scratch owned by the backend, at least bytes, shared by the
 * operations (one at a time); grows when asked for more (and never while
 * recording: NULL then, and the recording fails), never shrinks. NULL with
 * the failure kept when the device has no room. */
void *cu_scratch(size_t bytes);
/* Scratch bytes matmul and attention need for batches of these sizes. */
size_t cu_matmul_scratch(const kern_sizes *s);
size_t cu_attention_scratch(const kern_sizes *s);

/* The cuBLAS handle (on cu_stream(), with its own workspace and alpha/beta
 * read from device memory: cu_consts()). */
cublasHandle_t cu_blas(void);
/* Device floats {1, 0}: alpha and beta of a plain product. */
const float *cu_consts(void);

/* kernels/cuda/mm.cu */
void cu_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out);
void cu_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim);
bool cu_supports(enum dtype t);

/* kernels/cuda/attn.cu */
void cu_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
		 const kern_attn *f);
void cu_attention(float *out, const float *q, int64_t n, const kern_attn *a);

/* kernels/cuda/graph.cu: recording operations as CUDA graphs and the pinned
 * staging of uploads. cu_recording: a recording is under way (operations
 * must not allocate or wait); cu_record_spoil: it cannot succeed (cu_fail
 * calls it instead of keeping a failure). cu_scratch_moved: the scratch was
 * reallocated (recordings made before it are stale). */
bool cu_recording(void);
void cu_record_spoil(void);
void cu_scratch_moved(void);
bool cu_record_begin(void);
kern_graph *cu_record_end(void);
int cu_replay(kern_graph *g);
void cu_graph_free(kern_graph *g);
void cu_upload(void *dst, const void *src, size_t bytes);
void cu_graph_init(bool enabled);

#endif
