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

/* The quantized activations of a decode-sized input (mm.cu, mvq.cuh), in
 * scratch of their own (cu_act_scratch: as cu_scratch; its size now), kept
 * from the operation that made them (a fused RMSNorm or SwiGLU, or the first
 * matmul of an input) to the matmuls that read the same input. Every
 * operation that writes device memory calls cu_act_touch on what it writes,
 * which drops the copy when it overlaps; recording starts and ends with none
 * (cu_act_forget), so a recording's choices hold when it is replayed. */
typedef struct cu_xq {
	int8_t *q;               /* [total] */
	float *d;                /* [total / blk] */
	int blk;                 /* values per scale: 256 (k-quants) or 32 */
} cu_xq;
void *cu_act_scratch(size_t bytes);
size_t cu_act_scratch_cap(void);
size_t cu_act_scratch_bytes(const kern_sizes *s);
void cu_act_touch(const void *p, size_t bytes);
void cu_act_forget(void);
/* A producer of total f32 values at y: true (and the copy then counts as
 * made) when it should also write them quantized into *out, in blocks of
 * out->blk, for the matmul that follows; false when not (no quantized
 * matmul seen yet, not decode-sized, widths that do not fit). */
bool cu_act_fuse(const float *y, int64_t total, cu_xq *out);

/* The cuBLAS handle (on cu_stream(), with its own workspace and alpha/beta
 * read from device memory: cu_consts()). */
cublasHandle_t cu_blas(void);
/* Device floats {1, 0}: alpha and beta of a plain product. */
const float *cu_consts(void);

/* kernels/cuda/mm.cu */
void cu_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out);
void cu_matmul_group(const kern_mm *mm, int n_mm, const float *x, int64_t n, int64_t k);
void cu_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim);
bool cu_supports(enum dtype t);

/* A RoPE operation (kern_ops.rope's arguments). */
typedef struct cu_rope_op {
	float *x;
	const int32_t *pos;
	int64_t n;
	int n_heads, head_dim, n_rot;
	const float *inv_freq;
	bool neox;
} cu_rope_op;

/* Pair f of head th (row t = th / n_heads) of r rotated in place. */
static __device__ __forceinline__ void cu_rope_pair(const cu_rope_op &r, int64_t th, int f)
{
	int half = r.n_rot / 2;
	float theta = (float)r.pos[th / r.n_heads] * r.inv_freq[f];
	float c = cosf(theta), s = sinf(theta);
	float *v = r.x + th * r.head_dim;
	int a = r.neox ? f : 2 * f, b = r.neox ? f + half : 2 * f + 1;
	float x0 = v[a], x1 = v[b];
	v[a] = x0 * c - x1 * s;
	v[b] = x0 * s + x1 * c;
}

/* RoPE is issued late (backend.cu): cu_rope keeps up to two operations
 * (the layer's Q and K), and the next operation issues them first
 * (cu_pending_flush, called by every entry of the table), unless it is the
 * KV write of the rotated K: that takes them into its own launch
 * (cu_rope_take), so RoPE of Q and K and the K/V rows cost one launch. */
void cu_pending_flush(void);
int cu_rope_take(cu_rope_op out[2]);
void cu_rope_issue(const cu_rope_op *r);

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
