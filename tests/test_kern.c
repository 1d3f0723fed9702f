/* tests/test_kern.c: the CPU backend through its kern_ops table: every
 * operation gives bit-identical results for 1..4 threads and for a batch run
 * whole or one row at a time, under every kernel set this CPU has (issue
 * #37's formats: the scalar set's bits on every route, threads, token count
 * and weight layout); the
 * worker pool runs each chunk exactly once, also after its workers fell
 * asleep; kernel-set selection errors; a context shift's K rotation
 * (kv_shift) in every K row type against a scalar double-precision RoPE. */
#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"
#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "kernels/quant.h"
#include "tests/test.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static void fill(float *x, int64_t n, float scale)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = (frand() + frand()) * scale;
}

static const kern_ops *K;

/* ---- matmul ---- */

static void test_matmul(const char *isa)
{
	static const enum dtype types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K,
					   DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS};
	const int64_t n = 37, n_out = 67;
	for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
		enum dtype t = types[ti];
		int64_t k = dtype_block_elems(t) == 256 ? 512 : 160;
		int64_t row = dtype_row_bytes(t, k);
		float *wf = xmalloc((size_t)(n_out * k) * sizeof *wf), *x = xmalloc((size_t)(n * k) * sizeof *x);
		uint8_t *w = xmalloc((size_t)(n_out * row));
		float *ref = xmalloc((size_t)(n * n_out) * sizeof *ref), *y = xmalloc((size_t)(n * n_out) * sizeof *y);
		fill(wf, n_out * k, 0.1f);
		fill(x, n * k, 1.0f);
		for (int64_t o = 0; o < n_out; o++)
			quant_quantize_row(t, wf + o * k, w + o * row, k);
		K->set_threads(1);
		K->matmul(ref, x, w, t, n, k, n_out);
		for (int th = 2; th <= 4; th++) {
			K->set_threads(th);
			memset(y, 0, (size_t)(n * n_out) * sizeof *y);
			K->matmul(y, x, w, t, n, k, n_out);
			CHECK_(!memcmp(y, ref, (size_t)(n * n_out) * sizeof *y), "%s %s: %d threads differ from 1",
			       isa, dtype_name(t), th);
		}
		/* each row alone, and the batch in uneven pieces */
		bool same = true;
		for (int64_t i = 0; i < n; i++) {
			K->matmul(y, x + i * k, w, t, 1, k, n_out);
			same = same && !memcmp(y, ref + i * n_out, (size_t)n_out * sizeof *y);
		}
		K->matmul(y, x, w, t, 5, k, n_out);
		K->matmul(y + 5 * n_out, x + 5 * k, w, t, n - 5, k, n_out);
		same = same && !memcmp(y, ref, (size_t)(n * n_out) * sizeof *y);
		CHECK_(same, "%s %s: rows alone or in pieces differ from the whole batch", isa, dtype_name(t));
		/* and agree with the reference dot products */
		float worst = 0;
		for (int64_t i = 0; i < n; i += 9)
			for (int64_t o = 0; o < n_out; o += 7) {
				double d = quant_dot_f32(t, w + o * row, x + i * k, k), mag = 0;
				float deq[512];
				quant_dequantize_row(t, w + o * row, deq, k);
				for (int64_t j = 0; j < k; j++)
					mag += fabs((double)deq[j] * x[i * k + j]);
				worst = MAX(worst, (float)(fabs(ref[i * n_out + o] - d) / mag));
			}
		/* quantized activations err by up to half a step of 127 per block */
		float tol = quant_uses_qact(t) ? 0.02f : 1e-5f;
		CHECK_(worst <= tol, "%s %s: relative error %g against the f32 dot", isa, dtype_name(t), worst);
		free(wf); free(x); free(w); free(ref); free(y);
	}
}

/* A matmul case: n_out rows of k values quantized to t, n tokens of
 * activations, and the one-thread batch result ref; y is room for another. */
typedef struct mm_case {
	float *wf, *x, *ref, *y;
	uint8_t *w;
} mm_case;

static mm_case mm_case_new(enum dtype t, int64_t n, int64_t k, int64_t n_out)
{
	int64_t row = dtype_row_bytes(t, k);
	mm_case c = {
		.wf = xmalloc((size_t)(n_out * k) * sizeof *c.wf), .x = xmalloc((size_t)(n * k) * sizeof *c.x),
		.ref = xmalloc((size_t)(n * n_out) * sizeof *c.ref), .y = xmalloc((size_t)(n * n_out) * sizeof *c.y),
		.w = xmalloc((size_t)(n_out * row)),
	};
	fill(c.wf, n_out * k, 0.1f);
	fill(c.x, n * k, 1.0f);
	for (int64_t o = 0; o < n_out; o++)
		quant_quantize_row(t, c.wf + o * k, c.w + o * row, k);
	K->set_threads(1);
	K->matmul(c.ref, c.x, c.w, t, n, k, n_out);
	return c;
}

static void mm_case_free(mm_case *c)
{
	free(c->wf); free(c->x); free(c->ref); free(c->y); free(c->w);
}

/* Long rows (past the AVX-512 decoding kernels' stack buffers and the
 * prompt tiles' weight packing): each token alone, in pairs and in a batch
 * give the same bits whichever kernels take them. */
static void test_matmul_long(const char *isa)
{
	static const enum dtype types[] = {DT_F32, DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_Q4_1, DT_Q3_K, DT_IQ4_XS};
	const int64_t n = 7, n_out = 9, ks[] = {256 * 17, 256 * 64, 256 * 65};
	for (size_t ti = 0; ti < ARRAY_LEN(types); ti++)
		for (size_t ki = 0; ki < ARRAY_LEN(ks); ki++) {
			enum dtype t = types[ti];
			int64_t k = ks[ki];
			mm_case c = mm_case_new(t, n, k, n_out);
			float *x = c.x, *ref = c.ref, *y = c.y;
			const uint8_t *w = c.w;
			bool same = true;
			for (int64_t i = 0; i < n; i++) {
				K->matmul(y, x + i * k, w, t, 1, k, n_out);
				same = same && !memcmp(y, ref + i * n_out, (size_t)n_out * sizeof *y);
			}
			for (int64_t i = 0; i + 2 <= n; i += 2) {
				K->matmul(y, x + i * k, w, t, 2, k, n_out);
				same = same && !memcmp(y, ref + i * n_out, (size_t)(2 * n_out) * sizeof *y);
			}
			CHECK_(same, "%s %s k %lld: rows alone or in pairs differ from the batch", isa, dtype_name(t),
			       (long long)k);
			mm_case_free(&c);
		}
}

/* Weights the backend keeps laid out for its kernels (weights_add): the
 * bits of the stored rows whatever the threads, batch cuts and row ranges;
 * another instruction set reads the stored rows; remove gives them back. */
static void matmul_packed_case(const char *isa, enum dtype t, int64_t k, int64_t n_out)
{
	const int64_t n = 21; /* more tokens than the decoding tiles take (16), cut below into fewer */
	mm_case c = mm_case_new(t, n, k, n_out);
	float *x = c.x, *ref = c.ref, *y = c.y;
	const uint8_t *w = c.w;
	int64_t kept = K->weights_add(w, t, k, n_out);
	/* avx2 packs, and avx512 packs these types the AVX2 way; scalar never */
	CHECK_(kept == 0 || strcmp(isa, "scalar"), "%s %s: weights kept by a set without packing", isa,
	       dtype_name(t));
	CHECK(K->weights_add(w, t, k, n_out) == 0); /* once only */
	bool same = true;
	for (int th = 1; th <= 3; th++) {
		K->set_threads(th);
		memset(y, 0xff, (size_t)(n * n_out) * sizeof *y);
		K->matmul(y, x, w, t, n, k, n_out);
		same = same && !memcmp(y, ref, (size_t)(n * n_out) * sizeof *y);
	}
	for (int64_t i = 0; i < n; i++) {
		K->matmul(y, x + i * k, w, t, 1, k, n_out);
		same = same && !memcmp(y, ref + i * n_out, (size_t)n_out * sizeof *y);
	}
	/* batch cuts of 3, 5 and 13 tokens: the packed decoding tiles in runs of 4 */
	memset(y, 0xff, (size_t)(n * n_out) * sizeof *y);
	K->matmul(y, x, w, t, 3, k, n_out);
	K->matmul(y + 3 * n_out, x + 3 * k, w, t, 5, k, n_out);
	K->matmul(y + 8 * n_out, x + 8 * k, w, t, n - 8, k, n_out);
	K->matmul(y, x, w, t, 0, k, n_out); /* no tokens: nothing */
	same = same && !memcmp(y, ref, (size_t)(n * n_out) * sizeof *y);
	CHECK_(same, "%s %s k %lld: kept weights (%lld bytes) differ from the stored rows", isa,
	       dtype_name(t), (long long)k, (long long)kept);
	err e = {0};
	if (kept && kern_cpu_set_isa("scalar", &e) == 0) {
		float *sref = xmalloc((size_t)(n * n_out) * sizeof *sref);
		K->weights_remove(w);
		K->matmul(sref, x, w, t, n, k, n_out);
		CHECK(K->weights_add(w, t, k, n_out) == 0); /* scalar keeps nothing */
		K->matmul(y, x, w, t, n, k, n_out);
		CHECK_(!memcmp(y, sref, (size_t)(n * n_out) * sizeof *y), "%s %s: scalar after packing", isa,
		       dtype_name(t));
		CHECK(kern_cpu_set_isa(isa, &e) == 0);
		CHECK(K->weights_add(w, t, k, n_out) == kept);
		free(sref);
	}
	K->weights_remove(w);
	K->weights_remove(w); /* a no-op now */
	K->matmul(y, x, w, t, n, k, n_out);
	CHECK(!memcmp(y, ref, (size_t)(n * n_out) * sizeof *y));
	mm_case_free(&c);
}

static void test_matmul_packed(const char *isa)
{
	static const enum dtype types[] = {DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_Q4_0, DT_F32, DT_Q4_1, DT_Q5_0,
					   DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS, DT_Q5_K};
	const int64_t ks[] = {512, 2560};
	for (size_t ti = 0; ti < ARRAY_LEN(types); ti++)
		for (size_t ki = 0; ki < ARRAY_LEN(ks); ki++)
			matmul_packed_case(isa, types[ti], ks[ki], 67);
	/* Q8_0 is packed only from 4M values on (cpu.c) */
	matmul_packed_case(isa, DT_Q8_0, 4096, 1030);
}

/* Issue #37's formats, and q5_K, whose packed decoding is theirs: the
 * scalar set's bits from every route, for 1 and 2 threads, 1, 5 and 21
 * tokens (one-token decoding, decoding tiles, prompt tiles), stored and
 * packed weights, on the vpdpbusd and the vpmaddubsw routes where the CPU
 * has both; rows of 224 and 576 values for the 32-value formats (not whole
 * 256-value super-blocks, as in the k-quant files that hold them), 19 rows
 * (off the packed groups of 8). */
static void test_matmul_formats(const char *isa)
{
	static const enum dtype types[] = {DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS, DT_Q5_K};
	static const int64_t ns[] = {1, 5, 21}, k32[] = {224, 576}, k256[] = {256, 1280};
	const int64_t n_out = 19;
	err e = {0};
	bool vnni = cpu_vnni_routes(-1);
	for (size_t ti = 0; ti < ARRAY_LEN(types) && strcmp(isa, "scalar"); ti++)
		for (int ki = 0; ki < 2; ki++) {
			enum dtype t = types[ti];
			int64_t k = dtype_block_elems(t) == 32 ? k32[ki] : k256[ki];
			mm_case c = mm_case_new(t, 21, k, n_out);
			CHECK(kern_cpu_set_isa("scalar", &e) == 0);
			K->matmul(c.ref, c.x, c.w, t, 21, k, n_out);
			CHECK(kern_cpu_set_isa(isa, &e) == 0);
			char bad[160] = "";
			for (int pack = 0; pack < 2; pack++) {
				int64_t kept = pack ? K->weights_add(c.w, t, k, n_out) : 0;
				CHECK_(!pack || kept > 0, "%s %s: weights not packed", isa, dtype_name(t));
				for (int route = 0; route < 1 + vnni; route++) {
					cpu_vnni_routes(vnni && route == 0);
					for (int th = 1; th <= 2; th++) {
						K->set_threads(th);
						for (size_t ni = 0; ni < ARRAY_LEN(ns); ni++) {
							memset(c.y, 0xff, (size_t)(21 * n_out) * sizeof *c.y);
							K->matmul(c.y, c.x, c.w, t, ns[ni], k, n_out);
							if (!bad[0] && memcmp(c.y, c.ref, (size_t)(ns[ni] * n_out) * sizeof *c.y))
								snprintf(bad, sizeof bad, "%s weights, %s, %d threads, %lld tokens",
									 pack ? "packed" : "stored",
									 vnni && route == 0 ? "vpdpbusd" : "vpmaddubsw", th,
									 (long long)ns[ni]);
						}
					}
				}
				K->weights_remove(c.w);
			}
			cpu_vnni_routes(vnni);
			CHECK_(!bad[0], "%s %s k %lld: not the scalar set's bits (%s)", isa, dtype_name(t), (long long)k, bad);
			mm_case_free(&c);
		}
	K->set_threads(1);
}

/* A group of matmuls on one input (matmul_group): each matrix's bits as
 * matmul gives them alone, whatever the threads and tokens, with weight
 * types mixed (shared and separate activation formats), row counts off the
 * packed groups' 8, stored and packed weights; nothing written past a y. */
static void matmul_group_case(const char *isa, const enum dtype *types, const int64_t *n_outs, int n_mm,
			      bool pack)
{
	const int64_t k = 512, ns[] = {1, 5, 21};
	mm_case c[KERN_MM_GROUP_MAX];
	kern_mm mm[KERN_MM_GROUP_MAX];
	for (int m = 0; m < n_mm; m++) {
		c[m] = mm_case_new(types[m], 21, k, n_outs[m]);
		if (m > 0) /* one input for all: matrix 0's, and its references again */
			memcpy(c[m].x, c[0].x, (size_t)(21 * k) * sizeof *c[m].x);
		if (pack)
			K->weights_add(c[m].w, types[m], k, n_outs[m]);
		free(c[m].y);
		c[m].y = xmalloc((size_t)(21 * n_outs[m] + 1) * sizeof *c[m].y);
		mm[m] = (kern_mm){.y = c[m].y, .w = c[m].w, .wt = types[m], .n_out = n_outs[m]};
	}
	bool same = true, kept = true;
	for (int th = 1; th <= 3; th++)
		for (size_t ni = 0; ni < ARRAY_LEN(ns); ni++) {
			K->set_threads(th);
			for (int m = 0; m < n_mm; m++) {
				K->matmul(c[m].ref, c[0].x, c[m].w, types[m], ns[ni], k, n_outs[m]);
				memset(c[m].y, 0xff, (size_t)(21 * n_outs[m] + 1) * sizeof *c[m].y);
			}
			K->matmul_group(mm, n_mm, c[0].x, ns[ni], k);
			for (int m = 0; m < n_mm; m++) {
				size_t bytes = (size_t)(ns[ni] * n_outs[m]) * sizeof *c[m].y;
				uint32_t past;
				memcpy(&past, c[m].y + ns[ni] * n_outs[m], sizeof past);
				same = same && !memcmp(c[m].y, c[m].ref, bytes);
				kept = kept && past == 0xffffffffu;
			}
		}
	char names[80] = "";
	for (int m = 0; m < n_mm; m++)
		snprintf(names + strlen(names), sizeof names - strlen(names), " %s x %lld", dtype_name(types[m]),
			 (long long)n_outs[m]);
	CHECK_(same, "%s%s%s: a group's matmuls differ from each alone", isa, names, pack ? " (packed)" : "");
	CHECK_(kept, "%s%s: a group's matmul wrote past its rows", isa, names);
	for (int m = 0; m < n_mm; m++) {
		K->weights_remove(c[m].w);
		mm_case_free(&c[m]);
	}
}

static void test_matmul_group(const char *isa)
{
	static const enum dtype qkv[] = {DT_Q4_K, DT_Q4_K, DT_Q6_K}, mixed[] = {DT_Q8_0, DT_F32, DT_Q4_0, DT_Q8_0};
	static const enum dtype kq[] = {DT_Q6_K, DT_Q5_K, DT_Q6_K, DT_F16};
	/* the newer formats: q3_K/q4_K/q5_K as a Q3_K_M file mixes them, and
	 * the 32-value ones sharing their activation rows (and q4_1/q5_1 their sums) */
	static const enum dtype k3[] = {DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_IQ4_XS}, n32[] = {DT_Q4_1, DT_Q5_1, DT_IQ4_NL, DT_Q5_0};
	static const enum dtype k2[] = {DT_Q2_K, DT_Q4_1, DT_Q3_K};
	static const int64_t qkv_rows[] = {67, 13, 13}, mixed_rows[] = {9, 40, 3, 17}, kq_rows[] = {1, 8, 30, 5};
	for (int pack = 0; pack < 2; pack++) {
		matmul_group_case(isa, qkv, qkv_rows, 3, pack);
		matmul_group_case(isa, mixed, mixed_rows, 4, pack);
		matmul_group_case(isa, kq, kq_rows, 4, pack);
		matmul_group_case(isa, k3, mixed_rows, 4, pack);
		matmul_group_case(isa, n32, kq_rows, 4, pack);
		matmul_group_case(isa, k2, qkv_rows, 3, pack);
		matmul_group_case(isa, qkv + 2, qkv_rows, 1, pack);
	}
}

/* ---- attention and the row-wise operations ---- */

static void test_attention_hd(const char *isa, int hd, bool causal, int window)
{
	const int n_heads = 4, n_kv = 2, bt = 4, n_blocks = 24, n = 11;
	int64_t kv_dim = (int64_t)n_kv * hd, slots = (int64_t)bt * n_blocks, q_dim = (int64_t)n_heads * hd;
	float *kc = xmalloc((size_t)(slots * kv_dim) * sizeof *kc), *vc = xmalloc((size_t)(slots * kv_dim) * sizeof *vc);
	float *q = xmalloc((size_t)(n * q_dim) * sizeof *q);
	float *ref = xmalloc((size_t)(n * q_dim) * sizeof *ref), *out = xmalloc((size_t)(n * q_dim) * sizeof *out);
	fill(kc, slots * kv_dim, 1.0f);
	fill(vc, slots * kv_dim, 1.0f);
	fill(q, n * q_dim, 1.0f);
	/* two sequences with scattered blocks; queries at various positions */
	static const int32_t t0[12] = {3, 7, 1, 22, 9, 14, 0, 18, 5, 11, 20, 2};
	static const int32_t t1[12] = {4, 6, 8, 10, 12, 13, 15, 16, 17, 19, 21, 23};
	const int32_t *tables[11];
	int32_t n_ctx[11];
	for (int i = 0; i < n; i++) {
		/* causal: one sequence's prefill (grouped by the backend); else mixed */
		tables[i] = causal || i % 3 ? t0 : t1;
		n_ctx[i] = causal ? 30 + i : 1 + (i * 17) % 47;
	}
	kern_attn a = {.k = kc, .v = vc, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd,
		       .k_row = (size_t)kv_dim * sizeof(float), .v_row = (size_t)kv_dim * sizeof(float),
		       .block_tokens = bt, .scale = 0.125f, .table = tables, .n_ctx = n_ctx, .window = window};
	K->set_threads(1);
	K->attention(ref, q, n, &a);
	for (int th = 2; th <= 4; th++) {
		K->set_threads(th);
		K->attention(out, q, n, &a);
		CHECK_(!memcmp(out, ref, (size_t)(n * q_dim) * sizeof *out), "%s attention hd %d window %d: %d threads "
		       "differ", isa, hd, window, th);
	}
	bool same = true;
	for (int i = 0; i < n; i++) {
		kern_attn one = a;
		one.table = &tables[i];
		one.n_ctx = &n_ctx[i];
		K->attention(out, q + i * q_dim, 1, &one);
		same = same && !memcmp(out, ref + i * q_dim, (size_t)q_dim * sizeof *out);
	}
	CHECK_(same, "%s attention hd %d window %d: a query alone differs from the batch", isa, hd, window);
	free(kc); free(vc); free(q); free(ref); free(out);
}

/* Attention over K/V rows of types kt/vt against a double-precision
 * reference on the same decoded rows (kv_load_head), plus thread and
 * batch invariance: a prefill of one sequence and decodes of two. With a
 * sliding window the reference starts at each query's window. */
static void test_attention_typed(const char *isa, int hd, int kt, int vt, int bt, int window)
{
	const int n_heads = 4, n_kv = 2, n_blocks = 80, n = 9;
	int64_t kv_dim = (int64_t)n_kv * hd, slots = (int64_t)bt * n_blocks, q_dim = (int64_t)n_heads * hd;
	size_t k_row = kv_row_bytes((enum kv_type)kt, n_kv, hd), v_row = kv_row_bytes((enum kv_type)vt, n_kv, hd);
	uint8_t *kc = xmalloc((size_t)slots * k_row), *vc = xmalloc((size_t)slots * v_row);
	float *x = xmalloc((size_t)kv_dim * sizeof *x), *q = xmalloc((size_t)(n * q_dim) * sizeof *q);
	float *out = xmalloc((size_t)(n * q_dim) * sizeof *out), *one = xmalloc((size_t)q_dim * sizeof *one);
	float *kf = xmalloc((size_t)hd * sizeof *kf), *vf = xmalloc((size_t)hd * sizeof *vf);
	for (int64_t s = 0; s < slots; s++) {
		fill(x, kv_dim, 1.0f);
		x[s % kv_dim] *= 8; /* an outlier per row */
		kv_store_row(kc + s * k_row, x, (enum kv_type)kt, n_kv, hd);
		fill(x, kv_dim, 1.0f);
		kv_store_row(vc + s * v_row, x, (enum kv_type)vt, n_kv, hd);
	}
	fill(q, n * q_dim, 1.0f);
	int32_t t0[80], t1[80];
	for (int i = 0; i < 80; i++)
		t0[i] = (i * 7 + 3) % 80, t1[i] = (i * 11 + 5) % 80;
	const int32_t *tables[9];
	int32_t n_ctx[9];
	for (int i = 0; i < n; i++) {
		tables[i] = i < 6 ? t0 : t1;
		/* past one 256-key segment; the last past two 512-key chunks */
		n_ctx[i] = i < 6 ? 300 + i : i < 8 ? 1 + i * 70 : 1100;
	}
	kern_attn a = {.k = kc, .v = vc, .k_type = (uint8_t)kt, .v_type = (uint8_t)vt, .k_row = k_row,
		       .v_row = v_row, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .block_tokens = bt,
		       .scale = 1.0f / sqrtf((float)hd), .table = tables, .n_ctx = n_ctx, .window = window};
	K->set_threads(2);
	K->attention(out, q, n, &a);
	double worst = 0;
	double *sc = xmalloc(1280 * sizeof *sc);
	for (int i = 0; i < n; i++)
		for (int h = 0; h < n_heads; h++) {
			int kh = h / (n_heads / n_kv);
			const float *qi = q + i * q_dim + h * hd;
			double mx = -INFINITY, sum = 0;
			int first = window > 0 && n_ctx[i] > window ? n_ctx[i] - window : 0;
			for (int j = first; j < n_ctx[i]; j++) {
				int64_t slot = (int64_t)tables[i][j / bt] * bt + j % bt;
				kv_load_head(kf, kc + slot * k_row, (enum kv_type)kt, n_kv, hd, kh);
				double d = 0;
				for (int c = 0; c < hd; c++)
					d += (double)qi[c] * kf[c];
				sc[j] = d * a.scale;
				mx = fmax(mx, sc[j]);
			}
			double acc[256] = {0};
			for (int j = first; j < n_ctx[i]; j++) {
				int64_t slot = (int64_t)tables[i][j / bt] * bt + j % bt;
				kv_load_head(vf, vc + slot * v_row, (enum kv_type)vt, n_kv, hd, kh);
				double p = exp(sc[j] - mx);
				sum += p;
				for (int c = 0; c < hd; c++)
					acc[c] += p * vf[c];
			}
			for (int c = 0; c < hd; c++)
				worst = fmax(worst, fabs(acc[c] / sum - out[i * q_dim + h * hd + c]));
		}
	CHECK_(worst < 2e-5, "%s attention %s/%s hd %d window %d: max diff %g from the reference", isa,
	       kv_type_name((enum kv_type)kt), kv_type_name((enum kv_type)vt), hd, window, worst);
	bool same = true;
	for (int i = 0; i < n; i++) {
		kern_attn o = a;
		o.table = &tables[i];
		o.n_ctx = &n_ctx[i];
		for (int th = 1; th <= 2; th++) { /* a decoding sequence: its keys' chunks may split */
			K->set_threads(th);
			K->attention(one, q + i * q_dim, 1, &o);
			same = same && !memcmp(one, out + i * q_dim, (size_t)q_dim * sizeof *out);
		}
	}
	CHECK_(same, "%s attention %s/%s hd %d bt %d window %d: a query alone differs from the batch", isa,
	       kv_type_name((enum kv_type)kt), kv_type_name((enum kv_type)vt), hd, bt, window);
	/* three decoding sequences in one call (each query its own table) */
	const int pick[3] = {8, 0, 7};
	const int32_t *dt[3];
	int32_t dn[3];
	float *dq = xmalloc((size_t)(3 * q_dim) * sizeof *dq), *dout = xmalloc((size_t)(3 * q_dim) * sizeof *dout);
	for (int i = 0; i < 3; i++) {
		dt[i] = tables[pick[i]];
		dn[i] = n_ctx[pick[i]];
		memcpy(dq + i * q_dim, q + pick[i] * q_dim, (size_t)q_dim * sizeof *dq);
	}
	kern_attn d = a;
	d.table = dt;
	d.n_ctx = dn;
	same = true;
	for (int th = 1; th <= 2; th++) {
		K->set_threads(th);
		K->attention(dout, dq, 3, &d);
		for (int i = 0; i < 3; i++)
			same = same && !memcmp(dout + i * q_dim, out + pick[i] * q_dim, (size_t)q_dim * sizeof *out);
	}
	CHECK_(same, "%s attention %s/%s hd %d bt %d window %d: decoding sequences together differ from the batch",
	       isa, kv_type_name((enum kv_type)kt), kv_type_name((enum kv_type)vt), hd, bt, window);
	free(dq); free(dout);
	free(sc); free(kc); free(vc); free(x); free(q); free(out); free(one); free(kf); free(vf);
}

/* A kernel set's fp8_sse gives kv_fp8_sse's bits, so fp8 rows are the same
 * bytes whichever set wrote them. */
static void test_fp8_sse(void)
{
	const cpu_kernels *k = cpu_kernels_avx512();
	if (!k || !k->fp8_sse)
		return;
	float x[300], y[300];
	int bad = 0, rows_bad = 0;
	uint8_t r1[400], r2[400];
	for (int trial = 0; trial < 2000; trial++) {
		int n = 1 + trial % 300;
		fill(x, n, trial % 5 == 0 ? 1e-3f : trial % 5 == 1 ? 300.0f : 1.0f);
		float amax = 0;
		for (int i = 0; i < n; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		float s = amax / 448 * (1 + (float)(trial % 17) / 16);
		float a = kv_fp8_sse(x, n, s), b = k->fp8_sse(x, n, s);
		bad += memcmp(&a, &b, sizeof a) != 0;
		if (n % 16 == 0) {
			for (int i = 0; i < n; i++)
				y[i] = x[i] * (i % 7 == 0 ? 9.0f : 1.0f);
			kv_store_row(r1, y, KV_FP8, n / 16, 16);
			kv_store_row_with(r2, y, KV_FP8, n / 16, 16, k->fp8_sse);
			rows_bad += memcmp(r1, r2, kv_row_bytes(KV_FP8, n / 16, 16)) != 0;
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(rows_bad, 0);
}

static void test_attention(const char *isa)
{
	static const int dims[] = {64, 128, 20, 8, 256, 288};
	for (size_t i = 0; i < ARRAY_LEN(dims); i++) {
		test_attention_hd(isa, dims[i], false, 0);
		test_attention_hd(isa, dims[i], true, 0);
		test_attention_hd(isa, dims[i], false, 5);   /* windows inside and across 4-token blocks */
		test_attention_hd(isa, dims[i], true, 13);
	}
	static const int types[][2] = {{KV_F32, KV_F32}, {KV_F16, KV_F16}, {KV_Q8, KV_Q8}, {KV_FP8, KV_FP8},
				       {KV_Q8, KV_FP8}, {KV_F16, KV_Q8}};
	static const int tdims[] = {64, 128, 48, 256};
	for (size_t t = 0; t < ARRAY_LEN(types); t++)
		for (size_t i = 0; i < ARRAY_LEN(tdims); i++)
			test_attention_typed(isa, tdims[i], types[t][0], types[t][1], 16, 0);
	/* blocks that do not divide the 512-key chunks (segments cut at chunk ends) */
	test_attention_typed(isa, 64, KV_F16, KV_F16, 48, 0);
	test_attention_typed(isa, 64, KV_F32, KV_F32, 48, 0);
	test_attention_typed(isa, 128, KV_Q8, KV_F16, 48, 0);
	/* sliding windows: the longest query's (1100 keys) starting inside a chunk
	 * and a block and spanning three chunks, inside one segment, past 512 */
	static const int windows[] = {700, 37, 513, 300};
	for (size_t w = 0; w < ARRAY_LEN(windows); w++) {
		test_attention_typed(isa, 256, KV_F32, KV_F32, 16, windows[w]);
		test_attention_typed(isa, 64, KV_F16, KV_Q8, 48, windows[w]);
		test_attention_typed(isa, 128, KV_FP8, KV_FP8, 16, windows[w]);
	}
	test_attention_typed(isa, 48, KV_F16, KV_F16, 16, 700);
}

static void test_rows(const char *isa)
{
	const int64_t n = 300, dim = 256;
	float *x = xmalloc((size_t)(n * dim) * sizeof *x), *w = xmalloc((size_t)dim * sizeof *w);
	float *u = xmalloc((size_t)(n * dim) * sizeof *u), *inv = xmalloc(32 * sizeof *inv);
	float *ref[3] = {0}, *got = xmalloc((size_t)(n * dim) * sizeof *got);
	int32_t *pos = xmalloc((size_t)n * sizeof *pos);
	fill(x, n * dim, 2.0f);
	fill(w, dim, 1.0f);
	fill(u, n * dim, 1.0f);
	for (int i = 0; i < 32; i++)
		inv[i] = powf(10000.0f, -(float)i / 32);
	for (int64_t i = 0; i < n; i++)
		pos[i] = (int32_t)(i * 7 % 500);
	for (int th = 1; th <= 4; th++) {
		K->set_threads(th);
		float *r[3];
		for (int op = 0; op < 3; op++) {
			r[op] = xmalloc((size_t)(n * dim) * sizeof(float));
			memcpy(r[op], x, (size_t)(n * dim) * sizeof(float));
		}
		K->rmsnorm(r[0], r[0], w, n, dim, 1e-5f);
		K->silu_mul(r[1], u, n * dim);
		K->rope(r[2], pos, n, 4, 64, 64, inv, true);
		if (th == 1) {
			memcpy(ref, r, sizeof r);
			continue;
		}
		CHECK_(!memcmp(r[2], ref[2], (size_t)(n * dim) * sizeof(float)), "%s rope: %d threads", isa, th);
		CHECK_(!memcmp(r[0], ref[0], (size_t)(n * dim) * sizeof(float)), "%s rmsnorm: %d threads", isa, th);
		CHECK_(!memcmp(r[1], ref[1], (size_t)(n * dim) * sizeof(float)), "%s silu: %d threads", isa, th);
		for (int op = 0; op < 3; op++)
			free(r[op]);
	}
	/* one row at a time gives the batch's bits */
	memcpy(got, x, (size_t)(n * dim) * sizeof *got);
	for (int64_t i = 0; i < n; i++)
		K->silu_mul(got + i * dim, u + i * dim, dim);
	CHECK_(!memcmp(got, ref[1], (size_t)(n * dim) * sizeof *got), "%s silu: rows alone differ", isa);
	for (int op = 0; op < 3; op++)
		free(ref[op]);
	free(x); free(w); free(u); free(inv); free(got); free(pos);
}

/* ---- context shifts ---- */

/* Reference RoPE in double precision: x[n_heads][hd] turned to position pos. */
static void rope_ref(float *x, int n_heads, int hd, int n_rot, const float *inv, bool neox, double pos)
{
	int half = n_rot / 2;
	for (int h = 0; h < n_heads; h++)
		for (int f = 0; f < half; f++) {
			float *v = x + h * hd;
			int a = neox ? f : 2 * f, b = neox ? f + half : 2 * f + 1;
			double th = pos * inv[f], x0 = v[a], x1 = v[b];
			v[a] = (float)(x0 * cos(th) - x1 * sin(th));
			v[b] = (float)(x0 * sin(th) + x1 * cos(th));
		}
}

/* Rows of raw K at positions p, stored rotated, moved by kv_shift to q: they
 * decode as K stored rotated to q does, within the type's rounding (twice). */
static void test_kv_shift_type(enum kv_type t, bool neox, int n_rot)
{
	enum { N = 24, NH = 2, HD = 64 };
	size_t kr = kv_row_bytes(t, NH, HD), vr = kv_row_bytes(KV_F16, NH, HD);
	uint8_t *kc = xcalloc(2 * N, kr), *vc = xcalloc(2 * N, vr), *want = xmalloc(kr);
	float raw[N][NH * HD], x[NH * HD], a[HD], b[HD], inv[HD / 2];
	int64_t src[N], dst[N];
	int32_t delta[N];
	for (int i = 0; i < n_rot / 2; i++)
		inv[i] = powf(10000.0f, -2.0f * (float)i / (float)n_rot);
	for (int i = 0; i < N; i++) {
		fill(raw[i], NH * HD, 1.0f);
		memcpy(x, raw[i], sizeof x);
		rope_ref(x, NH, HD, n_rot, inv, neox, 300 + 17 * i);
		kv_store_row(kc + i * kr, x, t, NH, HD);
		kv_store_row(vc + i * vr, x, KV_F16, NH, HD);
		src[i] = i;
		dst[i] = N + i;
		delta[i] = i % 5 == 0 ? 0 : -(int32_t)(37 * i + 250);
	}
	K->kv_shift(kc, vc, src, dst, delta, N, &(kern_attn){.k_type = t, .v_type = KV_F16, .k_row = kr, .v_row = vr,
			   .n_kv_heads = NH, .head_dim = HD}, n_rot, inv, neox);
	static const float tol[] = {[KV_F32] = 1e-4f, [KV_F16] = 2e-3f, [KV_Q8] = 0.02f, [KV_FP8] = 0.12f};
	float worst = 0;
	bool copies = true;
	for (int i = 0; i < N; i++) {
		copies &= !memcmp(vc + dst[i] * vr, vc + src[i] * vr, vr);
		if (delta[i] == 0) {
			copies &= !memcmp(kc + dst[i] * kr, kc + src[i] * kr, kr);
			continue;
		}
		memcpy(x, raw[i], sizeof x);
		rope_ref(x, NH, HD, n_rot, inv, neox, 300 + 17 * i + delta[i]);
		kv_store_row(want, x, t, NH, HD);
		for (int h = 0; h < NH; h++) {
			kv_load_head(a, kc + dst[i] * kr, t, NH, HD, h);
			kv_load_head(b, want, t, NH, HD, h);
			float amax = 0;
			for (int d = 0; d < HD; d++)
				amax = fmaxf(amax, fabsf(x[h * HD + d]));
			for (int d = 0; d < HD; d++)
				worst = fmaxf(worst, fabsf(a[d] - b[d]) / amax);
		}
	}
	CHECK_(copies, "kv_shift %s: V rows and unmoved K rows are copied as they are", kv_type_name(t));
	CHECK_(worst <= tol[t], "kv_shift %s neox %d rot %d: off by %g of the head's largest value", kv_type_name(t),
	       neox, n_rot, worst);
	free(kc);
	free(vc);
	free(want);
}

static void test_kv_shift(void)
{
	CHECK(K->kv_shift != NULL);
	for (int t = 0; t < KV_TYPE_COUNT; t++) {
		test_kv_shift_type((enum kv_type)t, true, 64);
		test_kv_shift_type((enum kv_type)t, false, 64);
		test_kv_shift_type((enum kv_type)t, false, 32);
	}
}

/* ---- the pool ---- */

typedef struct count_job {
	atomic_int hits[257];
} count_job;

static void count_chunk(void *ctx, int i, int n)
{
	count_job *j = ctx;
	(void)n;
	atomic_fetch_add(&j->hits[i], 1);
}

static void test_pool(void)
{
	err e = {0};
	tpool *p = tpool_new(3, &e);
	CHECK_(p != NULL, "%s", e.msg);
	if (!p)
		return;
	CHECK_EQ_INT(tpool_size(p), 3);
	static count_job j;
	bool ok = true;
	for (int round = 0; round < 400; round++) {
		int n = 1 + round % 257;
		for (int i = 0; i < 257; i++)
			atomic_store(&j.hits[i], 0);
		if (round % 100 == 99) { /* let the workers fall asleep */
			struct timespec ts = {0, 5 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		tpool_run(p, n, count_chunk, &j);
		for (int i = 0; i < 257; i++)
			ok = ok && atomic_load(&j.hits[i]) == (i < n);
	}
	CHECK_(ok, "every chunk runs exactly once");
	tpool_free(p);
	CHECK(tpool_n_cpus() >= 1);
}

int main(void)
{
	K = kern_cpu();
	err e = {0};
	CHECK(kern_cpu_set_isa("bogus", &e) == -1 && strstr(e.msg, "bogus"));
	static const char *const isas[] = {"scalar", "avx2", "avx512"};
	int n_isa = 0;
	for (size_t i = 0; i < ARRAY_LEN(isas); i++) {
		if (kern_cpu_set_isa(isas[i], &e)) {
			CHECK_(strstr(e.msg, isas[i]) != NULL, "%s", e.msg);
			continue;
		}
		CHECK(!strcmp(kern_cpu_isa(), isas[i]));
		n_isa++;
		test_matmul(isas[i]);
		test_matmul_long(isas[i]);
		test_matmul_packed(isas[i]);
		test_matmul_formats(isas[i]);
		test_matmul_group(isas[i]);
		test_attention(isas[i]);
		test_rows(isas[i]);
	}
	CHECK(n_isa >= 1);
	test_fp8_sse();
	test_kv_shift();
	CHECK(kern_cpu_set_isa("auto", &e) == 0);
	CHECK(K->set_threads(0) >= 1);
	test_pool();
	return TEST_DONE();
}
