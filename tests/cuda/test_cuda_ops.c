/* tests/cuda/test_cuda_ops.c: every operation of the CUDA backend against the
 * CPU backend on random inputs (make test-cuda; make test runs it on the fake
 * device). Matmuls are also held to a double-precision reference of the
 * dequantized weights, since the CPU quantizes activations for the quantized
 * types and the GPU does not. Then the cases review found risky: activations
 * above f16's 65504 (the GEMM path's 16-bit activations), batches of more
 * rows than a grid's y can hold (65535), K/V rows holding NaN and
 * infinities, and after all of it no failure kept by the backend. */
#include "tests/cuda/cuda_test.h"

#include "kernels/kvq.h"
#include "kernels/quant.h"

#include <math.h>

/* Largest |a - b| over n values. */
static double max_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

/* Largest |a - b| over the values finite in both, and how many are NaN in
 * one and not the other (*nan_diff). */
static double nan_diff(const float *a, const float *b, size_t n, int *nan_diff)
{
	double m = 0;
	*nan_diff = 0;
	for (size_t i = 0; i < n; i++) {
		*nan_diff += isnan(a[i]) != isnan(b[i]);
		if (isfinite(a[i]) && isfinite(b[i]))
			m = fmax(m, fabs((double)a[i] - b[i]));
	}
	return m;
}

/* ---- matmul ---- */

/* big: activations times 1e6 (big_row < 0: every row; else that row alone,
 * the others stay near 1). */
static void test_matmul_big(enum dtype t, int64_t n, int64_t k, int64_t n_out, int64_t big_row)
{
	const kern_ops *C = kern_cpu();
	int64_t rb = dtype_row_bytes(t, k);
	float *wf = rand_floats((size_t)(n_out * k), 0.5f), *x = rand_floats((size_t)(n * k), 1.0f);
	for (int64_t r = 0; big_row > -2 && r < n; r++)
		for (int64_t i = 0; (big_row < 0 || r == big_row) && i < k; i++)
			x[r * k + i] *= 1e6f;
	uint8_t *w = xmalloc((size_t)(rb * n_out));
	for (int64_t o = 0; o < n_out; o++)
		quant_quantize_row(t, wf + o * k, w + o * rb, k);
	float *deq = xmalloc((size_t)k * sizeof(float));
	double *ref = xmalloc((size_t)(n * n_out) * sizeof(double)), *mag = xmalloc((size_t)(n * n_out) * sizeof(double));
	for (int64_t o = 0; o < n_out; o++) {
		quant_dequantize_row(t, w + o * rb, deq, k);
		for (int64_t r = 0; r < n; r++) {
			double s = 0, a = 0;
			for (int64_t i = 0; i < k; i++) {
				s += (double)deq[i] * x[r * k + i];
				a += fabs((double)deq[i] * x[r * k + i]);
			}
			ref[r * n_out + o] = s;
			mag[r * n_out + o] = a + 1e-6;
		}
	}
	float *yc = xmalloc((size_t)(n * n_out) * sizeof(float)), *yg = xmalloc((size_t)(n * n_out) * sizeof(float));
	C->matmul(yc, x, w, t, n, k, n_out);
	void *dw = dev_put(w, (size_t)(rb * n_out)), *dx = dev_put(x, (size_t)(n * k) * sizeof(float));
	float *dy = dev_put(NULL, (size_t)(n * n_out) * sizeof(float));
	G->matmul(dy, dx, dw, t, n, k, n_out);
	G->download(yg, dy, (size_t)(n * n_out) * sizeof(float));
	/* GPU vs exact: f32 paths to 1e-5 of sum |w x|, f16 conversions (GEMM
	 * path) to 2e-3; GPU vs CPU (int8 activations on the CPU) to 2e-2. */
	double worst_ref = 0, worst_cpu = 0;
	for (int64_t i = 0; i < n * n_out; i++) {
		worst_ref = fmax(worst_ref, fabs(yg[i] - ref[i]) / mag[i]);
		worst_cpu = fmax(worst_cpu, fabs((double)yg[i] - yc[i]) / mag[i]);
	}
	bool gemm16 = t != DT_F32 && (n > (t == DT_F16 || t == DT_BF16 ? 8 : 32) || k % 8);
	double tol = gemm16 ? 2e-3 : (t == DT_F32 ? 1e-5 : 1e-4);
	if (fake_device) /* the CPU's int8 activations */
		tol = 2e-2;
	CHECK_(worst_ref <= tol, "matmul %s n=%lld k=%lld n_out=%lld big %lld: GPU vs exact %.3g (tol %g)",
	       dtype_name(t), (long long)n, (long long)k, (long long)n_out, (long long)big_row, worst_ref, tol);
	CHECK_(worst_cpu <= 2e-2, "matmul %s n=%lld k=%lld n_out=%lld big %lld: GPU vs CPU %.3g",
	       dtype_name(t), (long long)n, (long long)k, (long long)n_out, (long long)big_row, worst_cpu);
	G->buf_free(dw); G->buf_free(dx); G->buf_free(dy);
	free(wf); free(x); free(w); free(deq); free(ref); free(mag); free(yc); free(yg);
}

static void test_matmul_case(enum dtype t, int64_t n, int64_t k, int64_t n_out)
{
	test_matmul_big(t, n, k, n_out, -2);
}

static void test_matmul(void)
{
	static const enum dtype types[] = {DT_F32,  DT_F16,  DT_BF16,   DT_Q8_0, DT_Q4_0, DT_Q4_K,
					   DT_Q5_K, DT_Q6_K, DT_Q4_1,   DT_Q5_0, DT_Q5_1, DT_IQ4_NL,
					   DT_Q2_K, DT_Q3_K, DT_IQ4_XS};
	static const int64_t ns[] = {1, 3, 8, 9, 31, 33, 100};
	for (size_t i = 0; i < ARRAY_LEN(types); i++)
		for (size_t j = 0; j < ARRAY_LEN(ns); j++)
			test_matmul_case(types[i], ns[j], 512, 131);
	/* widths that are not a multiple of 8 (stories260K's FFN is 172) */
	test_matmul_case(DT_F32, 1, 172, 64);
	test_matmul_case(DT_F32, 5, 172, 64);
	test_matmul_case(DT_F16, 2, 172, 64);
	/* a big head in slices of dequantized rows */
	test_matmul_case(DT_Q6_K, 40, 4096, 9000);
	/* the int8 matrix-vector kernels: rows of an odd number of blocks (2-byte
	 * aligned rows for q8_0, q4_0, q5_0, iq4_nl, q3_K, q6_K; 32-value blocks
	 * off the 256 of a k-quant file), weight rows not a multiple of the
	 * kernel's 4, long rows, every activation count up to 32 */
	static const enum dtype q[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_Q4_1, DT_Q5_0,
				       DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS};
	for (size_t i = 0; i < ARRAY_LEN(q); i++) {
		int64_t odd = dtype_block_elems(q[i]) == 32 ? 1056 : 768;
		test_matmul_case(q[i], 1, odd, 37);
		test_matmul_case(q[i], 5, odd, 37);
		test_matmul_case(q[i], 1, 14336, 66);
		test_matmul_case(q[i], 32, 1024, 9);
	}
	/* activations past f16's 65504, in both paths: all rows, and one row
	 * among ordinary ones (the batch's scale must not drown them) */
	static const enum dtype big[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_K, DT_Q6_K};
	for (size_t i = 0; i < ARRAY_LEN(big); i++) {
		test_matmul_big(big[i], 1, 512, 131, -1);
		test_matmul_big(big[i], 40, 512, 131, -1);
		test_matmul_big(big[i], 40, 512, 131, 3);
	}
}

/* ---- embed ---- */

static void test_embed(void)
{
	static const enum dtype types[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0,   DT_Q4_K, DT_Q5_K, DT_Q6_K,
					   DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_IQ4_NL, DT_Q3_K, DT_IQ4_XS};
	const int64_t rows = 50, n = 7;
	int32_t ids[7] = {0, 49, 3, 3, 17, 25, 8};
	for (size_t i = 0; i < ARRAY_LEN(types); i++) {
		enum dtype t = types[i];
		int64_t dim = t == DT_F32 || t == DT_F16 || t == DT_BF16 ? 300 : 512, rb = dtype_row_bytes(t, dim);
		float *f = rand_floats((size_t)(rows * dim), 1.0f);
		uint8_t *tab = xmalloc((size_t)(rows * rb));
		for (int64_t r = 0; r < rows; r++)
			quant_quantize_row(t, f + r * dim, tab + r * rb, dim);
		float *yc = xmalloc((size_t)(n * dim) * sizeof(float)), *yg = xmalloc((size_t)(n * dim) * sizeof(float));
		kern_cpu()->embed(yc, tab, t, ids, n, dim);
		void *dt = dev_put(tab, (size_t)(rows * rb)), *di = dev_put(ids, sizeof ids);
		float *dy = dev_put(NULL, (size_t)(n * dim) * sizeof(float));
		G->embed(dy, dt, t, di, n, dim);
		G->download(yg, dy, (size_t)(n * dim) * sizeof(float));
		double d = max_diff(yc, yg, (size_t)(n * dim));
		CHECK_(d <= 1e-5, "embed %s: max diff %g", dtype_name(t), d);
		G->buf_free(dt); G->buf_free(di); G->buf_free(dy);
		free(f); free(tab); free(yc); free(yg);
	}
}

/* ---- row-wise and element-wise ---- */

static void test_rowwise(void)
{
	const int64_t n = 5, dim = 300;
	size_t sz = (size_t)(n * dim) * sizeof(float);
	float *x = rand_floats((size_t)(n * dim), 3.0f), *w = rand_floats((size_t)dim, 1.0f);
	float *u = rand_floats((size_t)(n * dim), 2.0f), *yc = xmalloc(sz), *yg = xmalloc(sz);
	float *dx = dev_put(x, sz), *dw = dev_put(w, (size_t)dim * 4), *du = dev_put(u, sz), *dy = dev_put(NULL, sz);

	kern_cpu()->rmsnorm(yc, x, w, n, dim, 1e-5f);
	G->rmsnorm(dy, dx, dw, n, dim, 1e-5f);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) <= 1e-5, "rmsnorm: %g", max_diff(yc, yg, (size_t)(n * dim)));
	G->rmsnorm(dx, dx, dw, n, dim, 1e-5f); /* in place */
	G->download(yg, dx, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) <= 1e-5, "rmsnorm in place");
	G->upload(dx, x, sz);

	memcpy(yc, x, sz);
	kern_cpu()->silu_mul(yc, u, n * dim);
	G->upload(dy, x, sz);
	G->silu_mul(dy, du, n * dim);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) <= 1e-5, "silu_mul: %g", max_diff(yc, yg, (size_t)(n * dim)));

	memcpy(yc, x, sz);
	kern_cpu()->gelu_mul(yc, u, n * dim);
	G->upload(dy, x, sz);
	G->gelu_mul(dy, du, n * dim);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) <= 1e-5, "gelu_mul: %g", max_diff(yc, yg, (size_t)(n * dim)));

	memcpy(yc, x, sz);
	kern_cpu()->scale(yc, 25.3f, n * dim);
	G->upload(dy, x, sz);
	G->scale(dy, 25.3f, n * dim);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) == 0, "scale");

	memcpy(yc, x, sz);
	kern_cpu()->add(yc, u, n * dim);
	G->upload(dy, x, sz);
	G->add(dy, du, n * dim);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) == 0, "add");

	memcpy(yc, x, sz);
	kern_cpu()->add_bias(yc, w, n, dim);
	G->upload(dy, x, sz);
	G->add_bias(dy, dw, n, dim);
	G->download(yg, dy, sz);
	CHECK_(max_diff(yc, yg, (size_t)(n * dim)) == 0, "add_bias");

	G->buf_free(dx); G->buf_free(dw); G->buf_free(du); G->buf_free(dy);
	free(x); free(w); free(u); free(yc); free(yg);
}

static void test_rope(void)
{
	const int64_t n = 7;
	const int n_heads = 4, hd = 64;
	int32_t pos[7] = {0, 1, 2, 17, 511, 4095, 30000};
	size_t sz = (size_t)(n * n_heads * hd) * sizeof(float);
	for (int neox = 0; neox < 2; neox++)
		for (int n_rot = 32; n_rot <= hd; n_rot += 32) {
			float inv[32];
			for (int i = 0; i < n_rot / 2; i++) /* with Llama 3 style factors on half of them */
				inv[i] = powf(500000.0f, -2.0f * (float)i / (float)n_rot) / (i % 2 ? 8.0f : 1.0f);
			float *x = rand_floats((size_t)(n * n_heads * hd), 1.0f), *yg = xmalloc(sz);
			float *dx = dev_put(x, sz), *dinv = dev_put(inv, sizeof inv);
			int32_t *dpos = dev_put(pos, sizeof pos);
			kern_cpu()->rope(x, pos, n, n_heads, hd, n_rot, inv, neox);
			G->rope(dx, dpos, n, n_heads, hd, n_rot, dinv, neox);
			G->download(yg, dx, sz);
			double d = max_diff(x, yg, (size_t)(n * n_heads * hd));
			CHECK_(d <= 1e-4, "rope neox=%d n_rot=%d: %g", neox, n_rot, d);
			G->buf_free(dx); G->buf_free(dinv); G->buf_free(dpos);
			free(x); free(yg);
		}
}

/* ---- KV rows and attention ---- */

typedef struct attn_case {
	int n_heads, n_kv_heads, head_dim, block_tokens;
	enum kv_type kt, vt;
	int window;              /* kern_attn.window (0: none) */
} attn_case;

/* kv_write of n rows into random slots: bytes equal (8-bit codes within one
 * step: the scale division may round differently in the last place). */
static void test_kv_write_case(const attn_case *c, bool with_nan)
{
	int kv_dim = c->n_kv_heads * c->head_dim;
	size_t kr = kv_row_bytes(c->kt, c->n_kv_heads, c->head_dim), vr = kv_row_bytes(c->vt, c->n_kv_heads, c->head_dim);
	const int64_t n = 9, n_slots = 64;
	int64_t slot[9] = {5, 0, 63, 17, 18, 19, 40, 2, 33};
	float *k = rand_floats((size_t)(n * kv_dim), 2.0f), *v = rand_floats((size_t)(n * kv_dim), 0.5f);
	if (with_nan) { /* a NaN, an infinity, a head so large its fp8 scales overflow f16 */
		k[1] = NAN;
		v[kv_dim + 2] = -INFINITY;
		for (int i = 0; i < c->head_dim; i++)
			k[3 * kv_dim + i] *= 3e7f;
	}
	uint8_t *kc = xcalloc((size_t)n_slots, kr), *vc = xcalloc((size_t)n_slots, vr);
	uint8_t *kg = xcalloc((size_t)n_slots, kr), *vg = xcalloc((size_t)n_slots, vr);
	kern_attn f = {.k_type = (uint8_t)c->kt, .v_type = (uint8_t)c->vt, .k_row = kr, .v_row = vr,
		       .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim};
	kern_cpu()->kv_write(kc, vc, k, v, slot, n, &f);
	void *dkc = dev_put(NULL, n_slots * kr), *dvc = dev_put(NULL, n_slots * vr);
	void *dk = dev_put(k, (size_t)(n * kv_dim) * 4), *dv = dev_put(v, (size_t)(n * kv_dim) * 4);
	void *ds = dev_put(slot, sizeof slot);
	G->kv_write(dkc, dvc, dk, dv, ds, n, &f);
	G->download(kg, dkc, n_slots * kr);
	G->download(vg, dvc, n_slots * vr);
	int bad = 0;
	for (size_t i = 0; i < n_slots * kr; i++)
		bad += kc[i] != kg[i] && (c->kt < KV_Q8 || abs((int)(int8_t)kc[i] - (int)(int8_t)kg[i]) > 1);
	for (size_t i = 0; i < n_slots * vr; i++)
		bad += vc[i] != vg[i] && (c->vt < KV_Q8 || abs((int)(int8_t)vc[i] - (int)(int8_t)vg[i]) > 1);
	CHECK_(bad == 0, "kv_write %s/%s%s: %d bytes differ", kv_type_name(c->kt), kv_type_name(c->vt),
	       with_nan ? " (NaN, inf, huge)" : "", bad);
	G->buf_free(dkc); G->buf_free(dvc); G->buf_free(dk); G->buf_free(dv); G->buf_free(ds);
	free(k); free(v); free(kc); free(vc); free(kg); free(vg);
}

/* Three sequences in one call: a decode at position 40, a chunk of five
 * queries (positions 10..14: prefill or verification rows, causal among
 * themselves) and a long decode crossing several tiles; shuffled blocks.
 * with_nan: a NaN in the last K head's row at position 3 of the first
 * sequence and in the first V head's row at position 100 of the third: the
 * heads that read them are left out (what comes of a NaN there depends on
 * the CPU's kernel set: a SIMD exp may clamp it), every other head of every
 * row must still match, finite. */
static void test_attention_case(const attn_case *c, bool with_nan)
{
	int hd = c->head_dim, bt = c->block_tokens, kv_dim = c->n_kv_heads * hd, q_dim = c->n_heads * hd;
	size_t kr = kv_row_bytes(c->kt, c->n_kv_heads, hd), vr = kv_row_bytes(c->vt, c->n_kv_heads, hd);
	const int n_blocks = 64, n = 7;
	int64_t n_slots = (int64_t)n_blocks * bt;
	uint8_t *kc = xmalloc((size_t)n_slots * kr), *vc = xmalloc((size_t)n_slots * vr);
	for (int64_t s = 0; s < n_slots; s++) {
		float *kx = rand_floats((size_t)kv_dim, 1.5f), *vx = rand_floats((size_t)kv_dim, 1.0f);
		kx[kv_dim - 1] = with_nan && s == 3 ? NAN : kx[kv_dim - 1];
		vx[0] = with_nan && s == 32 * bt + 100 ? NAN : vx[0];
		kv_store_row(kc + s * kr, kx, c->kt, c->n_kv_heads, hd);
		kv_store_row(vc + s * vr, vx, c->vt, c->n_kv_heads, hd);
		free(kx);
		free(vx);
	}
	/* block tables: a permutation of the pool cut into three sequences
	 * (with_nan: blocks in order, so slot 3 and slot 100 are the positions
	 * the comment above names) */
	int32_t perm[64];
	for (int i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (int i = n_blocks - 1; i > 0 && !with_nan; i--) {
		int j = (int)((frand() + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	int seq_len[3] = {41, 15, (n_blocks - 2 * 16) * bt > 700 ? 700 : (n_blocks - 32) * bt};
	int seq_start[3] = {0, 16, 32}; /* offsets into perm */
	int32_t n_ctx[7] = {41, 11, 12, 13, 14, 15, seq_len[2]};
	int row_seq[7] = {0, 1, 1, 1, 1, 1, 2};
	const int32_t *tables[7];
	for (int i = 0; i < n; i++)
		tables[i] = perm + seq_start[row_seq[i]];
	kern_attn a = {.k = kc, .v = vc, .k_type = (uint8_t)c->kt, .v_type = (uint8_t)c->vt, .k_row = kr,
		       .v_row = vr, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = hd,
		       .block_tokens = bt, .scale = 1.0f / sqrtf((float)hd), .table = tables, .n_ctx = n_ctx,
		       .window = c->window};
	float *q = rand_floats((size_t)(n * q_dim), 1.0f);
	float *oc = xmalloc((size_t)(n * q_dim) * 4), *og = xmalloc((size_t)(n * q_dim) * 4);
	kern_cpu()->attention(oc, q, n, &a);

	int32_t *dperm = dev_put(perm, sizeof perm);
	const int32_t *dtables_h[7];
	for (int i = 0; i < n; i++)
		dtables_h[i] = dperm + seq_start[row_seq[i]];
	kern_attn da = a;
	da.k = dev_put(kc, (size_t)n_slots * kr);
	da.v = dev_put(vc, (size_t)n_slots * vr);
	da.table = dev_put(dtables_h, sizeof dtables_h);
	da.n_ctx = dev_put(n_ctx, sizeof n_ctx);
	float *dq = dev_put(q, (size_t)(n * q_dim) * 4), *dout = dev_put(NULL, (size_t)(n * q_dim) * 4);
	G->attention(dout, dq, n, &da);
	G->download(og, dout, (size_t)(n * q_dim) * 4);
	int group = c->n_heads / c->n_kv_heads, nan_mismatch = 0, dirty = 0;
	double d = 0;
	for (int r = 0; r < n; r++)
		for (int h = 0; h < c->n_heads; h++) {
			bool reads_nan = with_nan && ((r == 0 && h / group == c->n_kv_heads - 1) || (r == 6 && h / group == 0));
			if (reads_nan)
				continue;
			int nm = 0;
			size_t at = (size_t)r * q_dim + (size_t)h * hd;
			d = fmax(d, nan_diff(oc + at, og + at, (size_t)hd, &nm));
			nan_mismatch += nm;
			for (int i = 0; i < hd; i++)
				dirty += !isfinite(og[at + i]);
		}
	CHECK_(d <= 1e-4 && !nan_mismatch && !dirty, "attention heads %d/%d hd %d bt %d window %d %s/%s%s: max "
	       "diff %g, %d NaN differ, %d not finite", c->n_heads, c->n_kv_heads, hd, bt, c->window,
	       kv_type_name(c->kt), kv_type_name(c->vt), with_nan ? " (NaN rows)" : "", d, nan_mismatch, dirty);
	G->buf_free((void *)da.k); G->buf_free((void *)da.v); G->buf_free((void *)da.table);
	G->buf_free((void *)da.n_ctx); G->buf_free(dq); G->buf_free(dout); G->buf_free(dperm);
	free(kc); free(vc); free(q); free(oc); free(og);
}

static void test_attention(void)
{
	static const attn_case cases[] = {
		{8, 2, 64, 16, KV_F32, KV_F32, 0}, {8, 2, 64, 16, KV_F16, KV_F16, 0}, {8, 2, 64, 16, KV_Q8, KV_Q8, 0},
		{8, 2, 64, 16, KV_FP8, KV_FP8, 0}, {8, 2, 64, 16, KV_F16, KV_Q8, 0}, {4, 4, 128, 32, KV_F32, KV_F32, 0},
		{4, 4, 128, 32, KV_F16, KV_F16, 0}, {32, 8, 128, 16, KV_F16, KV_F16, 0},
		{6, 2, 256, 8, KV_F32, KV_F32, 0}, {2, 1, 8, 4, KV_F32, KV_F32, 0},
		/* every head size of the grouped decode kernel in every K/V type, a
		 * group of 12 (three blocks of 4 heads), 8-bit rows on 16 bytes (8 KV
		 * heads) and not (2) */
		{8, 2, 80, 16, KV_F16, KV_F16, 0}, {8, 2, 96, 16, KV_Q8, KV_FP8, 0}, {8, 2, 112, 16, KV_F32, KV_F16, 0},
		{8, 2, 80, 16, KV_FP8, KV_Q8, 0}, {8, 2, 112, 16, KV_Q8, KV_Q8, 0}, {8, 2, 96, 16, KV_F32, KV_F32, 0},
		{16, 8, 64, 16, KV_Q8, KV_FP8, 0}, {16, 8, 128, 16, KV_FP8, KV_FP8, 0}, {4, 2, 256, 16, KV_Q8, KV_F16, 0},
		{4, 2, 256, 16, KV_FP8, KV_FP8, 0}, {12, 1, 64, 16, KV_F16, KV_F16, 0},
		{64, 8, 128, 16, KV_F16, KV_F16, 0},
		/* 8-bit heads of 8 values: not whole 16-byte chunks, the per-head kernel */
		{2, 1, 8, 4, KV_Q8, KV_FP8, 0},
		/* sliding windows (both kernels): starting inside a block, past several
		 * tiles, with splits; Gemma 3's head of 256 with one KV head */
		{8, 2, 64, 16, KV_F32, KV_F32, 13}, {4, 1, 256, 16, KV_F16, KV_F16, 100},
		{6, 2, 256, 8, KV_Q8, KV_Q8, 37}, {8, 2, 64, 16, KV_FP8, KV_FP8, 300}, {2, 1, 8, 4, KV_Q8, KV_FP8, 5},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		test_kv_write_case(&cases[i], false);
		test_kv_write_case(&cases[i], true);
		test_attention_case(&cases[i], false);
		test_attention_case(&cases[i], true);
	}
}

/* ---- batches of more rows than a grid's y holds ---- */

/* 70000 rows (the y limit is 65535): rows, RoPE, a GEMM-path matmul, KV
 * writes into 70000 slots and attention of every row over a short context
 * (row i attends to 1 + i % 32 positions of one two-block sequence). */
static void test_big_batch(void)
{
	const int64_t n = 70000;
	const int n_heads = 2, n_kv = 1, hd = 8, bt = 16, q_dim = n_heads * hd, kv_dim = n_kv * hd;
	float *x = rand_floats((size_t)(n * q_dim), 1.0f), *w = rand_floats((size_t)q_dim, 1.0f);
	float *yc = xmalloc((size_t)(n * q_dim) * 4), *yg = xmalloc((size_t)(n * q_dim) * 4);
	float *dx = dev_put(x, (size_t)(n * q_dim) * 4), *dw = dev_put(w, (size_t)q_dim * 4);
	float *dy = dev_put(NULL, (size_t)(n * q_dim) * 4);
	kern_cpu()->rmsnorm(yc, x, w, n, q_dim, 1e-5f);
	G->rmsnorm(dy, dx, dw, n, q_dim, 1e-5f);
	G->download(yg, dy, (size_t)(n * q_dim) * 4);
	CHECK_(max_diff(yc, yg, (size_t)(n * q_dim)) <= 1e-5, "rmsnorm of %lld rows", (long long)n);

	/* f16 weights through the GEMM path: 16 outputs of the 16 values */
	uint16_t wh[16 * 16];
	for (int i = 0; i < 16 * 16; i++)
		wh[i] = f32_to_f16(frand() * 0.5f);
	void *dwh = dev_put(wh, sizeof wh);
	kern_cpu()->matmul(yc, x, wh, DT_F16, n, q_dim, 16);
	G->matmul(dy, dx, dwh, DT_F16, n, q_dim, 16);
	G->download(yg, dy, (size_t)(n * 16) * 4);
	CHECK_(max_diff(yc, yg, (size_t)(n * 16)) <= 2e-2, "matmul of %lld rows: %g", (long long)n,
	       max_diff(yc, yg, (size_t)(n * 16)));

	int32_t *pos = xmalloc((size_t)n * 4), *n_ctx = xmalloc((size_t)n * 4);
	int64_t *slot = xmalloc((size_t)n * 8);
	for (int64_t i = 0; i < n; i++) {
		pos[i] = (int32_t)(i % 32);
		n_ctx[i] = pos[i] + 1;
		slot[i] = i;
	}
	float inv[4] = {1.0f, 0.1f, 0.01f, 0.001f};
	int32_t *dpos = dev_put(pos, (size_t)n * 4), *dctx = dev_put(n_ctx, (size_t)n * 4);
	float *dinv = dev_put(inv, sizeof inv);
	memcpy(yc, x, (size_t)(n * q_dim) * 4);
	kern_cpu()->rope(yc, pos, n, n_heads, hd, hd, inv, false);
	G->rope(dx, dpos, n, n_heads, hd, hd, dinv, false);
	G->download(yg, dx, (size_t)(n * q_dim) * 4);
	CHECK_(max_diff(yc, yg, (size_t)(n * q_dim)) <= 1e-4, "rope of %lld rows", (long long)n);

	/* K and V: the first kv_dim values of each rotated row, in slot i */
	size_t kr = kv_row_bytes(KV_F16, n_kv, hd);
	uint8_t *kc = xcalloc((size_t)n, kr), *vc = xcalloc((size_t)n, kr);
	void *dkc = dev_put(NULL, (size_t)n * kr), *dvc = dev_put(NULL, (size_t)n * kr);
	float *kx = xmalloc((size_t)(n * kv_dim) * 4);
	for (int64_t i = 0; i < n; i++)
		memcpy(kx + i * kv_dim, yc + i * q_dim, (size_t)kv_dim * 4);
	float *dk = dev_put(kx, (size_t)(n * kv_dim) * 4);
	int64_t *dslot = dev_put(slot, (size_t)n * 8);
	kern_attn a = {.k = kc, .v = vc, .k_type = KV_F16, .v_type = KV_F16, .k_row = kr, .v_row = kr,
		       .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd, .block_tokens = bt,
		       .scale = 1.0f / sqrtf((float)hd), .n_ctx = n_ctx};
	kern_cpu()->kv_write(kc, vc, kx, kx, slot, n, &a);
	G->kv_write(dkc, dvc, dk, dk, dslot, n, &a);
	uint8_t *kg = xmalloc((size_t)n * kr);
	G->download(kg, dkc, (size_t)n * kr);
	CHECK_(!memcmp(kc, kg, (size_t)n * kr), "kv_write of %lld rows", (long long)n);

	int32_t table[2] = {0, 1}; /* slots 0..31 */
	const int32_t **tabs = xmalloc((size_t)n * sizeof *tabs);
	for (int64_t i = 0; i < n; i++)
		tabs[i] = table;
	a.table = tabs;
	kern_cpu()->attention(yc, x, n, &a);
	int32_t *dtable = dev_put(table, sizeof table);
	for (int64_t i = 0; i < n; i++)
		tabs[i] = dtable;
	kern_attn da = a;
	da.k = dkc;
	da.v = dvc;
	da.table = dev_put(tabs, (size_t)n * sizeof *tabs);
	da.n_ctx = dctx;
	G->upload(dx, x, (size_t)(n * q_dim) * 4);
	G->attention(dy, dx, n, &da);
	G->download(yg, dy, (size_t)(n * q_dim) * 4);
	CHECK_(max_diff(yc, yg, (size_t)(n * q_dim)) <= 1e-4, "attention of %lld rows: %g", (long long)n,
	       max_diff(yc, yg, (size_t)(n * q_dim)));

	void *bufs[] = {dx, dw, dy, dwh, dpos, dctx, dinv, dkc, dvc, dk, dslot, dtable, (void *)da.table};
	for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
		G->buf_free(bufs[i]);
	free(x); free(w); free(yc); free(yg); free(pos); free(n_ctx); free(slot);
	free(kc); free(vc); free(kx); free(kg); free(tabs);
}


/* ---- a layer's sequence (the fused and kept-back paths) ---- */

#define LS_DIM 512
#define LS_FFN 1024
#define LS_HD 64
#define LS_SLOTS 64

/* One side's buffers for test_layer_seq: the weights (q4_K, V and down
 * q6_K), activations, K/V cache and batch rows, host or device. */
typedef struct layer_side {
	void *w[7];
	float *x, *xb, *q, *k, *v, *att, *g, *u, *nw, *inv;
	void *kc, *vc;
	int32_t *pos;
	int64_t *slot;
	kern_attn a;
} layer_side;

static const struct { enum dtype t; int64_t k, n_out; } ls_w[7] = {
	{DT_Q4_K, LS_DIM, LS_DIM}, {DT_Q4_K, LS_DIM, 2 * LS_HD}, {DT_Q6_K, LS_DIM, 2 * LS_HD}, {DT_Q4_K, LS_DIM, LS_DIM},
	{DT_Q4_K, LS_DIM, LS_FFN}, {DT_Q4_K, LS_DIM, LS_FFN}, {DT_Q6_K, LS_FFN, LS_DIM},
};

/* What a decode step asks of a backend, in the model's order: RMSNorm, Q/K/V
 * as one group (two quantized types), RoPE of Q and K, the KV write,
 * attention, the output matmul, the residual add, RMSNorm, gate/up, SwiGLU,
 * down (into xb). */
static void layer_step(const kern_ops *K, layer_side *s, int64_t n)
{
	const int kvd = 2 * LS_HD;
	kern_mm qkv[3] = {{s->q, s->w[0], ls_w[0].t, LS_DIM}, {s->k, s->w[1], ls_w[1].t, kvd},
			  {s->v, s->w[2], ls_w[2].t, kvd}};
	kern_mm gu[2] = {{s->g, s->w[4], ls_w[4].t, LS_FFN}, {s->u, s->w[5], ls_w[5].t, LS_FFN}};
	K->rmsnorm(s->xb, s->x, s->nw, n, LS_DIM, 1e-5f);
	for (int i = 0; !K->matmul_group && i < 3; i++)
		K->matmul(qkv[i].y, s->xb, qkv[i].w, qkv[i].wt, n, LS_DIM, qkv[i].n_out);
	if (K->matmul_group)
		K->matmul_group(qkv, 3, s->xb, n, LS_DIM);
	K->rope(s->q, s->pos, n, 8, LS_HD, LS_HD, s->inv, false);
	K->rope(s->k, s->pos, n, 2, LS_HD, LS_HD, s->inv, false);
	K->kv_write(s->kc, s->vc, s->k, s->v, s->slot, n, &s->a);
	K->attention(s->att, s->q, n, &s->a);
	K->matmul(s->xb, s->att, s->w[3], ls_w[3].t, n, LS_DIM, LS_DIM);
	K->add(s->x, s->xb, n * LS_DIM);
	K->rmsnorm(s->xb, s->x, s->nw, n, LS_DIM, 1e-5f);
	for (int i = 0; !K->matmul_group && i < 2; i++)
		K->matmul(gu[i].y, s->xb, gu[i].w, gu[i].wt, n, LS_DIM, gu[i].n_out);
	if (K->matmul_group)
		K->matmul_group(gu, 2, s->xb, n, LS_DIM);
	K->silu_mul(s->g, s->u, n * LS_FFN);
	K->matmul(s->xb, s->g, s->w[6], ls_w[6].t, n, LS_FFN, LS_DIM);
}

/* The host side (h, made here) and its device copy (d). */
static void layer_sides(layer_side *h, layer_side *d, int64_t n, const int32_t *const *htabs,
			const int32_t *const *dtabs, int32_t *n_ctx, int32_t *dctx)
{
	size_t fz = sizeof(float), kr = kv_row_bytes(KV_F16, 2, LS_HD);
	for (int i = 0; i < 7; i++) {
		int64_t rb = dtype_row_bytes(ls_w[i].t, ls_w[i].k);
		float *f = rand_floats((size_t)(ls_w[i].k * ls_w[i].n_out), 0.3f);
		h->w[i] = xmalloc((size_t)(rb * ls_w[i].n_out));
		for (int64_t o = 0; o < ls_w[i].n_out; o++)
			quant_quantize_row(ls_w[i].t, f + o * ls_w[i].k, (uint8_t *)h->w[i] + o * rb, ls_w[i].k);
		d->w[i] = dev_put(h->w[i], (size_t)(rb * ls_w[i].n_out));
		free(f);
	}
	h->x = rand_floats((size_t)(n * LS_DIM), 1.0f), h->nw = rand_floats(LS_DIM, 1.0f), h->inv = xmalloc(32 * fz);
	for (int i = 0; i < 32; i++)
		h->inv[i] = powf(10000.0f, -2.0f * (float)i / 64.0f);
	float **hb[] = {&h->xb, &h->q, &h->att}, **db[] = {&d->xb, &d->q, &d->att};
	for (int i = 0; i < 3; i++)
		*hb[i] = xcalloc((size_t)(n * LS_DIM), fz), *db[i] = dev_put(NULL, (size_t)(n * LS_DIM) * fz);
	h->k = xcalloc((size_t)(n * 2 * LS_HD), fz), h->v = xcalloc((size_t)(n * 2 * LS_HD), fz);
	h->g = xcalloc((size_t)(n * LS_FFN), fz), h->u = xcalloc((size_t)(n * LS_FFN), fz);
	d->k = dev_put(NULL, (size_t)(n * 2 * LS_HD) * fz), d->v = dev_put(NULL, (size_t)(n * 2 * LS_HD) * fz);
	d->g = dev_put(NULL, (size_t)(n * LS_FFN) * fz), d->u = dev_put(NULL, (size_t)(n * LS_FFN) * fz);
	h->kc = xcalloc(LS_SLOTS, kr), h->vc = xcalloc(LS_SLOTS, kr);
	for (int s2 = 0; s2 < 40; s2++) { /* the context before the step */
		float *r = rand_floats(2 * LS_HD, 1.0f);
		kv_store_row((uint8_t *)h->kc + s2 * kr, r, KV_F16, 2, LS_HD);
		kv_store_row((uint8_t *)h->vc + s2 * kr, r, KV_F16, 2, LS_HD);
		free(r);
	}
	h->pos = xmalloc(8 * 4), h->slot = xmalloc(8 * 8);
	for (int i = 0; i < n; i++)
		h->pos[i] = 40 + i, n_ctx[i] = 41 + i, h->slot[i] = 40 + i;
	d->x = dev_put(h->x, (size_t)(n * LS_DIM) * fz), d->nw = dev_put(h->nw, LS_DIM * fz);
	d->inv = dev_put(h->inv, 32 * fz), d->kc = dev_put(h->kc, LS_SLOTS * kr), d->vc = dev_put(h->vc, LS_SLOTS * kr);
	d->pos = dev_put(h->pos, 8 * 4), d->slot = dev_put(h->slot, 8 * 8);
	h->a = (kern_attn){.k = h->kc, .v = h->vc, .k_type = KV_F16, .v_type = KV_F16, .k_row = kr, .v_row = kr,
			   .n_heads = 8, .n_kv_heads = 2, .head_dim = LS_HD, .block_tokens = 16, .scale = 0.125f,
			   .table = htabs, .n_ctx = n_ctx};
	d->a = h->a;
	d->a.k = d->kc, d->a.v = d->vc, d->a.table = dtabs, d->a.n_ctx = dctx;
	G->upload(dctx, n_ctx, 8 * 4);
}

static void layer_side_free(layer_side *s, bool dev)
{
	void *p[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->g, s->u, s->nw, s->inv, s->kc, s->vc, s->pos, s->slot,
		     s->w[0], s->w[1], s->w[2], s->w[3], s->w[4], s->w[5], s->w[6]};
	for (size_t i = 0; i < ARRAY_LEN(p); i++)
		if (dev)
			G->buf_free(p[i]);
		else
			free(p[i]);
}

/* A decode step's operations on the device and on the CPU (layer_step):
 * what a device backend does behind the calls (int8 activations made by
 * RMSNorm and SwiGLU and kept for the matmuls, RoPE issued inside the KV
 * write, Q/K/V in one launch) gives every output the CPU's, and the K rows. */
static void test_layer_seq(int64_t n)
{
	layer_side h, d;
	int32_t table[4] = {0, 1, 2, 3}, n_ctx[8];
	int32_t *dtab = dev_put(table, sizeof table), *dctx = dev_put(NULL, sizeof n_ctx);
	const int32_t *htabs[8], *dtabs_h[8];
	for (int i = 0; i < 8; i++)
		htabs[i] = table, dtabs_h[i] = dtab;
	const int32_t *const *dtabs = dev_put(dtabs_h, sizeof dtabs_h);
	layer_sides(&h, &d, n, htabs, dtabs, n_ctx, dctx);
	layer_step(kern_cpu(), &h, n);
	layer_step(G, &d, n);
	struct { const char *what; float *h, *d; int64_t count; } out[] = {
		{"q (rope)", h.q, d.q, n * LS_DIM}, {"k (rope)", h.k, d.k, n * 2 * LS_HD},
		{"attention", h.att, d.att, n * LS_DIM}, {"residual", h.x, d.x, n * LS_DIM},
		{"swiglu", h.g, d.g, n * LS_FFN}, {"down", h.xb, d.xb, n * LS_DIM},
	};
	float *back = xmalloc((size_t)(n * LS_FFN) * sizeof(float));
	for (size_t i = 0; i < ARRAY_LEN(out); i++) {
		G->download(back, out[i].d, (size_t)out[i].count * sizeof(float));
		double m = 0, diff = max_diff(out[i].h, back, (size_t)out[i].count);
		for (int64_t e = 0; e < out[i].count; e++)
			m = fmax(m, fabs(out[i].h[e]));
		CHECK_(diff <= 2e-3 * (m + 1), "layer sequence, %lld rows: %s differs by %g (largest |value| %g)",
		       (long long)n, out[i].what, diff, m);
	}
	size_t kr = kv_row_bytes(KV_F16, 2, LS_HD);
	uint8_t *kg = xmalloc(LS_SLOTS * kr);
	G->download(kg, d.kc, LS_SLOTS * kr);
	int bad = 0;
	for (size_t b = 40 * kr; b < (size_t)(40 + n) * kr; b += 2) /* f16 codes within one step */
		bad += abs((int)*(uint16_t *)(kg + b) - (int)*(uint16_t *)((uint8_t *)h.kc + b)) > 1;
	CHECK_(bad == 0, "layer sequence, %lld rows: %d K cache values differ", (long long)n, bad);
	layer_side_free(&h, false);
	layer_side_free(&d, true);
	G->buf_free(dtab), G->buf_free(dctx), G->buf_free((void *)dtabs);
	free(back);
	free(kg);
}

/* ---- buffers ---- */

static void test_buffers(void)
{
	uint8_t h[1000], back[1000];
	for (int i = 0; i < 1000; i++)
		h[i] = (uint8_t)(i * 7);
	uint8_t *a = G->buf_alloc(1000), *b = G->buf_alloc(1000);
	CHECK(a && b);
	G->download(back, a, 1000);
	CHECK_(back[0] == 0 && back[999] == 0, "buf_alloc zeroes");
	G->upload(a, h, 1000);
	G->copy(b + 100, a + 200, 500);
	G->download(back, b, 1000);
	CHECK(!memcmp(back + 100, h + 200, 500) && back[99] == 0 && back[600] == 0);
	int64_t fr = 0, tot = 0;
	G->mem_info(&fr, &tot);
	CHECK(fr > 0 && tot >= fr);
	CHECK(G->buf_alloc((size_t)tot * 2) == NULL); /* too big: NULL, not fatal */
	err e = {0};
	CHECK_(!G->status || G->status(&e) == 0, "a buffer too big is not a failure: %s", e.msg);
	G->buf_free(a);
	G->buf_free(b);
	G->buf_free(NULL);
}

int main(void)
{
	need_cuda(__FILE__);
	test_buffers();
	test_rowwise();
	test_rope();
	test_embed();
	test_matmul();
	test_attention();
	test_layer_seq(1);
	test_layer_seq(3);
	test_big_batch();
	err e = {0};
	CHECK_(!G->status || G->status(&e) == 0, "the backend kept a failure: %s", e.msg);
	return TEST_DONE();
}
