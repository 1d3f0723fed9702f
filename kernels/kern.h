/* kernels/kern.h: the compute backend table.
 *
 * A backend is a const table of function pointers over raw buffers with
 * shapes passed in; kernels know nothing of sequences, models or the engine.
 * The CPU backend (kern_cpu) is the reference and always present; a CUDA
 * backend implements the same table when built with nvcc.
 * Rule the CPU backend keeps: a row's result never depends on which other
 * rows share the call (same arithmetic order for any n), so batching
 * requests together gives bit-identical results to running them alone. The
 * CUDA backend keeps it for every operation but matmul and attention, whose
 * few-row paths (matrix-vector; the context split over blocks) round
 * differently from their many-row ones (kernels/cuda/mm.cu, attn.cu).
 * Kernels hide their own threading; callers are single-threaded (the engine).
 *
 * Memory: a host backend (the CPU) leaves the buffer operations NULL and every
 * pointer is host memory. A device backend (CUDA) fills them in; then every
 * buffer an operation takes or gives (activations, weights, K/V, ids,
 * positions, slots, block tables and n_ctx, the block-table pointers
 * themselves) is memory from its buf_alloc, and only a kern_attn's own fields
 * and the sizes are read on the host. Operations on a device may run
 * asynchronously, in order; download waits for them.
 * Failures: host operations cannot fail. Device operations can (out of device
 * memory, a launch that fails, a kernel that faults); they then return as
 * usual and the backend keeps the first failure for status() to report, and
 * the caller turns it into its own error. Weight rows are read with vector
 * loads: a weight tensor must start on a 16-byte boundary of device memory. */
#ifndef PAGECHAT_KERN_H
#define PAGECHAT_KERN_H

#include "base/base.h"
#include "kernels/dtype.h"
#include "kernels/kvq.h"

/* Largest KV block (tokens) and head size the attention kernels take. */
#define KERN_MAX_BLOCK_TOKENS 256
#define KERN_MAX_HEAD_DIM 256

typedef struct kern_attn {
	const void *k, *v;           /* one layer's cache: [n_slots] rows of k_row / v_row bytes */
	enum kv_type k_type, v_type; /* row types (kernels/kvq.h) */
	size_t k_row, v_row;         /* bytes per row */
	int n_heads, n_kv_heads, head_dim;
	int block_tokens;
	float scale;                 /* usually 1/sqrt(head_dim) */
	const int32_t *const *table; /* [n] block table of each query's sequence */
	const int32_t *n_ctx;        /* [n] positions each query attends to (pos + 1) */
	int window;                  /* > 0: a sliding window, each query attends to its
	                                last window positions only, [n_ctx - window, n_ctx)
	                                (from 0 when n_ctx <= window); 0: to all [0, n_ctx) */
} kern_attn;

/* What a model will ask of a device backend's operations, so that their
 * scratch is set aside once (kern_ops.reserve). */
typedef struct kern_sizes {
	int64_t max_rows;            /* rows (tokens) per operation */
	int64_t max_k;               /* the widest matmul input */
	int n_heads, head_dim;       /* attention's query heads */
} kern_sizes;

/* One matmul of a group that shares its input (kern_ops.matmul_group). */
#define KERN_MM_GROUP_MAX 4
typedef struct kern_mm {
	float *y;                    /* [n][n_out] */
	const void *w;               /* n_out rows of k values of type wt */
	enum dtype wt;
	int64_t n_out;
} kern_mm;

/* A recorded sequence of device operations (kern_ops.record_end); opaque. */
typedef struct kern_graph kern_graph;

typedef struct kern_ops {
	const char *name;
	/* True when matmul/embed accept weights of type t. */
	bool (*supports)(enum dtype t);
	/* The largest head_dim attention handles (0: any); models beyond it are
	 * refused at load, not mid-forward. */
	int max_head_dim;
	/* Sets how many threads the backend's kernels use (n <= 0: one per
	 * available core) and returns the number now in use. Results do not
	 * depend on it. Call between operations, from the calling thread. */
	int (*set_threads)(int n);
	/* y[n][n_out] = x[n][k] . W^T; W is n_out rows of k values of type wt. */
	void (*matmul)(float *y, const float *x, const void *w, enum dtype wt,
		       int64_t n, int64_t k, int64_t n_out);
	/* matmul of one input x[n][k] with each of mm[0..n_mm) (n_mm <=
	 * KERN_MM_GROUP_MAX): the bits matmul gives each, in one pass over the
	 * backend's threads (Q/K/V, gate/up: one wait instead of three or two).
	 * NULL where not offered: the caller runs matmul on each. */
	void (*matmul_group)(const kern_mm *mm, int n_mm, const float *x, int64_t n, int64_t k);
	/* y[i] = row ids[i] of table (type t, rows of dim values), as f32. */
	void (*embed)(float *y, const void *table, enum dtype t, const int32_t *ids,
		      int64_t n, int64_t dim);
	/* y[n][dim] = x / rms(x) * w (y may equal x). */
	void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps);
	/* Rotates x[n][n_heads*head_dim] in place by positions pos[n]: the first
	 * n_rot dims of each head, pair frequencies inv_freq[n_rot/2]. neox: pairs
	 * (i, i + n_rot/2); otherwise adjacent pairs (2i, 2i+1). */
	void (*rope)(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim,
		     int n_rot, const float *inv_freq, bool neox);
	/* g[i] = silu(g[i]) * u[i]. */
	void (*silu_mul)(float *g, const float *u, int64_t n);
	/* g[i] = gelu(g[i]) * u[i], GELU in its tanh form:
	 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
	void (*gelu_mul)(float *g, const float *u, int64_t n);
	/* x[i] *= s. */
	void (*scale)(float *x, float s, int64_t n);
	/* y[i] += x[i]. */
	void (*add)(float *y, const float *x, int64_t n);
	/* y[n][dim] += b[dim] (a bias broadcast over rows). */
	void (*add_bias)(float *y, const float *b, int64_t n, int64_t dim);
	/* Stores k[n][kv_dim], v[n][kv_dim] (kv_dim = n_kv_heads * head_dim) as
	 * cache rows slot[n], in the row formats fmt names (its k/v types, row
	 * sizes and head shape; the other fields are unused). */
	void (*kv_write)(void *kc, void *vc, const float *k, const float *v,
			 const int64_t *slot, int64_t n, const struct kern_attn *fmt);
	/* Causal paged attention: out[n][n_heads*head_dim] for queries q[n][...],
	 * each over the positions its n_ctx and the window give. */
	void (*attention)(float *out, const float *q, int64_t n, const kern_attn *a);
	/* A context shift's move of n cache rows (one layer): row src[i] goes to
	 * row dst[i], its K turned by delta[i] positions of RoPE (the rotation
	 * rope applies, n_rot dims per head, inv_freq[n_rot/2], neox as there):
	 * decoded from the stored type, rotated in f32 and encoded again; where
	 * delta[i] is 0 the K and V rows are copied as they are. V rows are
	 * copied. Every dst must differ from every src. NULL where the backend
	 * has none (then a shift is refused). */
	void (*kv_shift)(void *kc, void *vc, const int64_t *src, const int64_t *dst, const int32_t *delta,
			 int64_t n, const struct kern_attn *fmt, int n_rot, const float *inv_freq, bool neox);

	/* ---- weights laid out for the kernels (NULL where not offered) ---- */
	/* weights_add offers a weight matrix: n_out rows of k values of type t
	 * at w, which must stay valid and unchanged until weights_remove(w). The
	 * backend may keep a copy laid out for its kernels (the CPU packs rows
	 * for the instruction set in use); matmuls on w then read the copy, with
	 * the same results. Returns the bytes the copy takes, 0 when none is
	 * kept (nothing to gain, or no memory for it: never an error). Call
	 * between operations, from the thread that runs them. */
	int64_t (*weights_add)(const void *w, enum dtype t, int64_t k, int64_t n_out);
	void (*weights_remove)(const void *w);                       /* no-op for a w not kept */

	/* ---- buffers (NULL for a host backend) ---- */
	/* A zeroed buffer of bytes, or NULL when it does not fit or the device
	 * has failed (status says which); never fatal. */
	void *(*buf_alloc)(size_t bytes);
	void (*buf_free)(void *p);                                   /* NULL is a no-op */
	void (*upload)(void *dst, const void *src, size_t bytes);    /* host -> device */
	/* device -> host, after every operation issued before it has finished */
	void (*download)(void *dst, const void *src, size_t bytes);
	void (*copy)(void *dst, const void *src, size_t bytes);      /* device -> device */
	/* Free and total device memory in bytes (0 and 0 after a failure). */
	void (*mem_info)(int64_t *free_bytes, int64_t *total_bytes);

	/* ---- device failures, scratch and recording (NULL where not offered) ---- */
	/* 0 when nothing has failed, else -1 with e naming the first failure
	 * (a kernel's fault shows at the latest at the next download). A failure
	 * stays: the operations after it may be skipped and their outputs are
	 * undefined, and every later call returns -1 again. Does not wait. */
	int (*status)(err *e);
	/* Sets aside the device scratch that operations on batches of these
	 * sizes need, so that they allocate nothing (it only grows). 0, or -1
	 * with e when it does not fit (nothing is kept failing then). */
	int (*reserve)(const kern_sizes *s, err *e);
	/* record_begin: the operations issued from now until record_end are
	 * recorded, not run; false (and nothing changes) when the backend will
	 * not record now (it is turned off, or debugging waits for every kernel).
	 * Only operations may be issued while recording, no buffer calls.
	 * record_end returns the recording, or NULL when it failed: then none of
	 * the operations ran and the caller issues them again. replay runs a
	 * recording's operations again with the same arguments, reading the
	 * buffers as they are then; -1 when it can no longer run (the backend's
	 * scratch moved since: free it and record again), with nothing run. */
	bool (*record_begin)(void);
	kern_graph *(*record_end)(void);
	int (*replay)(kern_graph *g);
	void (*graph_free)(kern_graph *g);                          /* NULL is a no-op */
} kern_ops;

const kern_ops *kern_cpu(void);

/* The CUDA backend on the current device, or NULL with e saying why (a build
 * without CUDA, no CUDA device, a driver or cuBLAS failure). A CUDA build
 * keeps the backend in a library of its own (libpagechat_cuda.so, next to
 * the program or one or two folders above it, or where PAGECHAT_CUDA_LIB
 * names it) that links cudart and cuBLAS; the first call loads it (dlopen),
 * so a program that never asks for CUDA never maps those libraries. */
const kern_ops *kern_cuda(err *e);
/* Whether an NVIDIA device looks present, judged cheaply without loading
 * any CUDA library (the driver's /proc/driver/nvidia/gpus entries, else
 * /dev/nvidia0 or WSL's /dev/dxg). False in a build without CUDA. */
bool kern_cuda_present(void);

/* The backend that device names: "cpu", "cuda", "fake", or "auto" (NULL or
 * ""): CUDA when a device is found (kern_cuda_present, then kern_cuda), else
 * the CPU, with *note (may be NULL) then set to a one-line reason for the app
 * to show (NULL when there is nothing to say). NULL with e filled for "cuda"
 * without a usable device or an unknown name. */
const kern_ops *kern_pick(const char *device, const char **note, err *e);

/* The fake device: a device backend (buffer operations filled in) whose
 * device memory is host memory and whose operations are the CPU kernels, in
 * every build. Everything above the kernels runs on it as on a GPU (uploads,
 * device scratch and K/V, recorded steps, memory that runs out), with the
 * CPU's results bit for bit; it proves nothing about CUDA kernels. Its memory
 * holds kern_fake_set_mem bytes (default KERN_FAKE_DEFAULT_MEM; buffers past
 * what is left are NULL). The settings are process-wide: set them before
 * allocating, from the thread that runs the kernels. */
#define KERN_FAKE_DEFAULT_MEM (INT64_C(16) << 30)
const kern_ops *kern_fake(void);
void kern_fake_set_mem(int64_t bytes);         /* <= 0: the default */
/* Tests: while msg is set, status() reports it as the device's failure and
 * buffers are not given (NULL clears it). */
void kern_fake_fail(const char *msg);
typedef struct kern_fake_counts {
	int recorded, replayed;  /* recordings made, replays run */
	int misuse;              /* buffer calls made while recording (a bug) */
	int64_t uploads, downloads; /* calls so far */
	int64_t used_bytes;      /* device memory in use */
} kern_fake_counts;
kern_fake_counts kern_fake_get_counts(void);

/* The CPU backend's kernel set: "scalar" (the portable reference), "avx2"
 * (AVX2 + FMA), "avx512" (AVX-512 F/BW/VL/DQ + VNNI). By default the best the
 * processor has, or the one the environment variable PAGECHAT_ISA names.
 * kern_cpu_set_isa also takes "auto"; -1 with e filled for an unknown name or
 * a set this CPU lacks. Call between operations (tests, benchmarks). */
int kern_cpu_set_isa(const char *name, err *e);
const char *kern_cpu_isa(void);
/* The int8 multiply-adds per second the CPU backend's threads issue
 * together with the kernel set's int8 instruction (AVX2 vpmaddubsw,
 * AVX-512 vpdpbusd), measured now (some ms; the best of three passes); 0
 * when the set has none (scalar). The ceiling of any quantized matmul. */
double kern_cpu_int8_peak(void);
/* Notes on how the CPU backend set itself up, for the app to show (the
 * library never prints): PAGECHAT_ISA naming an unknown set or one this CPU
 * lacks (the best one is used instead), the thread pool unable to start its
 * threads (it runs single-threaded). Settles the kernel set and starts the
 * thread pool first, if that has not happened yet (it otherwise happens at
 * first use), so the notes are known where the app chooses the backend.
 * Returns note i (0, 1, ...: one line each, static), or NULL past the last.
 * Call from the thread that runs the kernels, or before any other does. */
const char *kern_cpu_notice(int i);

/* f16 <-> f32 (IEEE half, round to nearest even). */
float    f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float    bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);  /* round to nearest even; NaN stays NaN */

#endif
