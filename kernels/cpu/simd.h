/* kernels/cpu/simd.h: one instruction set's kernels, internal to the CPU
 * backend (cpu.c picks a set at run time) and its tests.
 *
 * Every set computes the same things; the scalar set is the reference the
 * others are tested against. Within one set, a result element never depends
 * on the tile, block or thread that computes it: every output of a matmul is
 * one accumulation chain in a fixed order (tails use masked or padded loads
 * of the same arithmetic), so batched and threaded runs are bit-identical to
 * single ones, and so are weights read from a set's packed layout. The SIMD sets are compiled with target attributes, so the
 * build needs no -march flag; cpu_kernels_avx2/avx512 return NULL when the
 * CPU (or the build target) lacks the instructions. Pure functions, any
 * thread. */
#ifndef PAGECHAT_CPU_SIMD_H
#define PAGECHAT_CPU_SIMD_H

#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "kernels/quant.h"

enum cpu_isa { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_COUNT };

/* One matmul: y[t * ldy + o] = row t of the activations . weight row o. */
typedef struct mm_args {
	float *y;
	int64_t ldy;
	const float *x;          /* f32 activations [n][ldx] (f32/f16/bf16 weights) */
	int64_t ldx;
	const uint8_t *qa;       /* quantized activation rows, lda bytes apart (qact types) */
	int64_t lda;
	const uint8_t *w;        /* weight rows, ldw bytes apart */
	int64_t ldw;
	const uint8_t *pw;       /* the same weights in the set's packed layout (pack), or NULL */
	enum dtype wt;
	int64_t k;
} mm_args;

typedef struct cpu_kernels {
	const char *name;
	/* Computes the outputs of tokens [t0, t1) and weight rows [o0, o1). */
	void (*matmul)(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1);
	/* qact_quantize_row with the same integers, scales and sums (bit-exact),
	 * then whatever the set keeps after them (act_row_bytes). */
	void (*quantize_act)(enum dtype wt, const float *x, void *dst, int64_t k);
	/* Bytes of one activation row as quantize_act writes it: qact_row_bytes,
	 * or more where the set keeps data of its own after the qact part (NULL:
	 * qact_row_bytes). Matmuls get rows this far apart. */
	int64_t (*act_row_bytes)(enum dtype wt, int64_t k);
	/* True when matmuls on quantized weights give the scalar set's bits (the
	 * same operations in the same order on the same exact integer sums). */
	bool qact_exact;
	/* Optional (NULL: none): a layout of its own for weights of some types,
	 * made once (at load) and passed to matmul as mm_args.pw beside the rows
	 * it came from; results are the same bits either way. pack_bytes gives
	 * the bytes for n_out rows of k values of type t, or 0 when the set reads
	 * t as stored. pack writes the packed rows [o0, o1) (o0, o1 multiples of
	 * PACK_ROWS, or o1 = n_out) of the matrix w into dst, the whole packed
	 * matrix's buffer (64-byte aligned); ranges can be packed on different
	 * threads. */
	/* Optional: n rounds of the set's int8 multiply-add instruction
	 * (AVX2 vpmaddubsw, AVX-512 vpdpbusd) on independent registers, as
	 * many at once as the core can issue; returns the multiply-adds done.
	 * The machine's int8 rate (kern_cpu_int8_peak) is timed on it. */
	int64_t (*int8_spin)(int64_t n);
	int64_t (*pack_bytes)(enum dtype t, int64_t k, int64_t n_out);
	void (*pack)(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0,
		     int64_t o1);
	/* nq (1..ATTN_MAX_GROUP) queries of one sequence (block table) against
	 * one KV head: query i at q + i * q_stride attends to its first
	 * n_ctx[i] positions (with a window, the last window of them: from
	 * attn_first_key) and writes out + i * out_stride. A query's result
	 * does not depend on the others in the group (they share the K/V reads). */
	void (*attend)(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
		       const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head);
	/* True when attend also reads f16 and 8-bit rows (else cpu_attend_typed
	 * does). */
	bool attend_typed;
	/* Optional (0/NULL: attend per head): one query (a decoding sequence
	 * with block table `table` and n_ctx positions) in all heads, its keys
	 * in chunks of attend_chunk_keys that may run on different threads
	 * (chunk c: keys [c * keys, (c + 1) * keys) counted from the chunk that
	 * holds the query's first key, attn_first_key).
	 * attend_chunk writes the state of chunk c per head h at
	 * res + h * (head_dim + 2); attend_fold folds n_chunks of those (chunk
	 * c at res + c * n_heads * (head_dim + 2)) into out. The result has
	 * attend's bits. attend_chunk_keys gives the chunk's keys for a, or 0
	 * where attend_chunk cannot give those bits. */
	int (*attend_chunk_keys)(const kern_attn *a);
	void (*attend_chunk)(float *res, const float *q, const kern_attn *a, const int32_t *table,
			     int32_t n_ctx, int c);
	void (*attend_fold)(float *out, const float *res, int n_chunks, const kern_attn *a);
	/* g[i] = silu(g[i]) * u[i]. */
	void (*silu_mul)(float *g, const float *u, int64_t n);
	/* kv_fp8_sse, bit for bit (NULL: the portable one). */
	kv_sse_fn fp8_sse;
} cpu_kernels;

/* Attention for K/V stored in any kv_type (kernels/cpu/attn_kv.c); the
 * sets' own attend handles f32 rows. Same contract as cpu_kernels.attend. */
void cpu_attend_typed(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq,
		      const kern_attn *a, const int32_t *table, const int32_t *n_ctx, int kv_head);

/* Loads every line of the K and V rows of positions [p0, p1) of a sequence
 * (block table `table`), in address order within each block. One head's
 * slice of each row, read alone, comes from memory at about a third of the
 * speed of whole rows (10 against 30 GB/s here), so the chunked decoding
 * attention reads a segment's rows whole first and its heads then find them
 * in cache. Plain loads: prefetch hints for the same lines do not help. */
void cpu_touch_rows(const kern_attn *a, const int32_t *table, int32_t p0, int32_t p1);

/* kern_ops.kv_shift for host rows (kernels/cpu/kv_shift.c). */
void cpu_kv_shift(void *kc, void *vc, const int64_t *src, const int64_t *dst, const int32_t *delta,
		  int64_t n, const kern_attn *fmt, int n_rot, const float *inv_freq, bool neox);

const cpu_kernels *cpu_kernels_scalar(void);
const cpu_kernels *cpu_kernels_avx2(void);    /* NULL when unavailable */
const cpu_kernels *cpu_kernels_avx512(void);  /* AVX-512 F/BW/VL/DQ + VNNI; NULL when unavailable */
/* The AVX2 set's prompts on q8_0, q4_K and q6_K weights (which the AVX-512
 * set hands it too) take vpdpbusd on 512-bit vectors on CPUs with AVX-512
 * VNNI, and its q4_K and q6_K decoding vpdpbusd on 256-bit ones, as do the
 * formats of kernels/cpu/avx2_qx.c; else vpmaddwd / vpmaddubsw on 256-bit
 * vectors. Both routes give the same bits.
 * on = 0 or 1 picks the route (1 only where the CPU has it; for tests and
 * A/B runs, between matmuls), -1 asks; returns whether vpdpbusd is in use. */
bool cpu_vnni_routes(int on);
/* The set for isa, or NULL when this CPU lacks it (cpu.c, where the backend
 * is assembled). */
const cpu_kernels *cpu_kernels_for(enum cpu_isa isa);

/* Weight rows a packed layout keeps together (and that a matmul's rows are
 * split between threads in multiples of). */
#define PACK_ROWS 8

#define ATTN_MAX_BLOCK_TOKENS KERN_MAX_BLOCK_TOKENS
/* The first position a query with n_ctx positions attends to: 0, or with a
 * sliding window the window's first (kern_attn.window). Every set starts its
 * blocks at the one holding it and leaves that block's earlier keys out. */
static inline int32_t attn_first_key(const kern_attn *a, int32_t n_ctx)
{
	return a->window > 0 && n_ctx > a->window ? n_ctx - a->window : 0;
}
#define ATTN_MAX_GROUP 4

#endif
