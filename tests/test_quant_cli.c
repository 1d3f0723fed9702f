/* tests/test_quant_cli.c: the GGUF writer, and `quantize`, `perplexity` and
 * `bench` run as a user would: quantized random models against llama.cpp's
 * F32 logits and against their own weights in f32, the stories model's
 * perplexity under Q8_0 and its KL divergence against a saved F32 run
 * (recomputed here), its perplexity and greedy tokens in the 32-value
 * formats, bench's report fields (no timings are checked), and the misuse
 * errors. */
#include "engine/gen.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "models/gguf_write.h"
#include "models/llama.h"
#include "models/tok.h"
#include "tests/run.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <math.h>
#include <unistd.h>

#define STORIES "../shared/models/stories260K.gguf"
#define RAND256 "build/models/rand-256x4-f32.gguf"

static run_result r;

/* ---- the writer ---- */

static int copy_fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	const gguf_tensor *t = gguf_tensor_at(ctx, i);
	/* in two pieces, to exercise the streaming */
	size_t half = (size_t)t->n_bytes / 2;
	return gguf_out_write(out, t->data, half, e) ||
	       gguf_out_write(out, (const uint8_t *)t->data + half, (size_t)t->n_bytes - half, e);
}

static int short_fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	(void)ctx;
	(void)i;
	return gguf_out_write(out, "abc", 3, e);
}

static char *slurp_all(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long len = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *buf = xmalloc((size_t)MAX(len, 1));
	*n = fread(buf, 1, (size_t)MAX(len, 0), fp);
	fclose(fp);
	return buf;
}

static void test_writer(void)
{
	err e = {0};
	gguf_file *f = gguf_open(STORIES, &e);
	CHECK_(f != NULL, "%s", e.msg);
	if (!f)
		return;
	gguf_writer *w = gguf_writer_new();
	for (int64_t i = 0; i < gguf_n_kv(f); i++)
		gguf_writer_copy_kv(w, f, i);
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e) == i);
	}
	CHECK(gguf_writer_add_tensor(w, "output_norm.weight", DT_F32, 1, (int64_t[]){64}, &e) == -1 &&
	      strstr(e.msg, "twice"));
	CHECK(gguf_writer_add_tensor(w, "odd", DT_Q8_0, 2, (int64_t[]){40, 2}, &e) == -1 &&
	      strstr(e.msg, "40"));
	CHECK_(gguf_writer_write(w, "build/test-copy.gguf", copy_fill, f, &e) == 0, "%s", e.msg);
	/* a copy of every entry and tensor reproduces the file byte for byte */
	size_t na = 0, nb = 0;
	char *a = slurp_all(STORIES, &na), *b = slurp_all("build/test-copy.gguf", &nb);
	CHECK_(a && b && na == nb && !memcmp(a, b, na), "copy differs (%zu vs %zu bytes)", na, nb);
	free(a);
	free(b);
	/* set replaces in place, a new key goes last */
	gguf_writer_set_u32(w, "llama.block_count", 5);
	gguf_writer_set_str(w, "general.name", "copy");
	gguf_writer_set_u32(w, "test.new", 77);
	gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
	gguf_writer_set_f32(w, "test.newf", -2.5f);
	CHECK_EQ_INT(gguf_writer_n_kv(w), gguf_n_kv(f) + 2);
	CHECK_(gguf_writer_write(w, "build/test-copy.gguf", copy_fill, f, &e) == 0, "%s", e.msg);
	gguf_file *g = gguf_open("build/test-copy.gguf", &e);
	CHECK_(g != NULL, "%s", e.msg);
	if (g) {
		uint32_t v = 0;
		gguf_str s;
		CHECK(gguf_get_u32(g, "test.new", &v, &e) == 0 && v == 77);
		float x = 0;
		CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &x, &e) == 0 && x == 1e-6f);
		CHECK(gguf_get_f32(g, "test.newf", &x, &e) == 0 && x == -2.5f);
		CHECK(gguf_get_str(g, "general.name", &s, &e) == 0 && gguf_str_eq(s, "copy"));
		CHECK(gguf_find_key(g, "general.name") == gguf_find_key(f, "general.name"));
		const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
		CHECK(t && !memcmp(t->data, gguf_find_tensor(f, "token_embd.weight")->data, (size_t)t->n_bytes));
		gguf_close(g);
	}
	/* a tensor given too few bytes: an error, and no file left behind */
	unlink("build/test-short.gguf");
	CHECK(gguf_writer_write(w, "build/test-short.gguf", short_fill, NULL, &e) == -1 &&
	      strstr(e.msg, "fewer"));
	CHECK(access("build/test-short.gguf", F_OK) != 0 && access("build/test-short.gguf.tmp", F_OK) != 0);
	gguf_writer_free(w);
	gguf_close(f);
}

/* ---- quantize, then logits against the F32 reference ---- */

/* Max abs difference of the quantized model's logits from llama.cpp's F32
 * ones over the reference prompts; *same_argmax when every top token agrees
 * or, where it does not, the reference had the two tokens closer than twice
 * that prompt's largest error (a random model's top logits can be that
 * close). *scale gets the largest |reference logit|. */
/* The logits at the last position of a logits_rand256.tsv row's prompt
 * under model into got[512]; false when the run failed. */
static bool logits_of(const char *model, char **row, float *got)
{
	char text[256], args[1024];
	snprintf(text, sizeof text, "%.*s", (int)strlen(row[1]) - 2, row[1] + 1);
	CHECK(write_file("build/test-input.txt", text, strlen(text)) == 0);
	snprintf(args, sizeof args, "logits -m %s -f build/test-input.txt", model);
	run_pagechat(&r, args);
	CHECK_(r.status == 0 && tsv_floats(r.out, got, 512) == 512, "%s: %s", args, r.errout);
	return r.status == 0;
}

/* Max abs difference of model's logits from those of twin, its weights
 * dequantized to f32 (`quantize MODEL TWIN f32`): the same weights, so
 * only the int8 activations and the sums' order separate them. */
static float twin_error(const char *model, const char *twin)
{
	tsv t;
	float worst = 0;
	if (tsv_load(&t, "../shared/testdata/logits_rand256.tsv"))
		return INFINITY;
	for (int i = 0; i < t.n_rows; i++) {
		float a[512], b[512];
		if (!logits_of(model, t.rows[i], a) || !logits_of(twin, t.rows[i], b)) {
			worst = INFINITY;
			break;
		}
		for (int j = 0; j < 512; j++)
			worst = MAX(worst, fabsf(a[j] - b[j]));
	}
	tsv_free(&t);
	return worst;
}

static float logits_error(const char *model, bool *same_argmax, float *scale)
{
	tsv t;
	float worst = 0;
	*same_argmax = true;
	*scale = 0;
	if (tsv_load(&t, "../shared/testdata/logits_rand256.tsv"))
		return INFINITY;
	for (int i = 0; i < t.n_rows; i++) {
		float ref[512], got[512];
		CHECK_EQ_INT(tsv_floats(t.rows[i][3], ref, 512), 512);
		if (!logits_of(model, t.rows[i], got)) {
			worst = INFINITY;
			break;
		}
		int a = 0, b = 0;
		float row = 0;
		for (int j = 0; j < 512; j++) {
			row = MAX(row, fabsf(got[j] - ref[j]));
			*scale = MAX(*scale, fabsf(ref[j]));
			a = got[j] > got[a] ? j : a;
			b = ref[j] > ref[b] ? j : b;
		}
		worst = MAX(worst, row);
		/* another top token only where the two were within the row's errors */
		*same_argmax = *same_argmax && (a == b || ref[b] - ref[a] <= 2 * row);
	}
	tsv_free(&t);
	return worst;
}

/* The bounds: Q8_0 is the 0.05. For the others, every logit is a
 * sum of many weights' contributions, so its error follows the format's
 * relative weight error eps (test_quant measures, on Gaussian-like data,
 * 0.7% for q8_0, 2.2% for q6_K, 4.1% q5_K, 8.2% q4_K): we allow 3 * eps *
 * (largest |logit|), which q8_0's 0.015 observed error (= 2.1 * eps * scale)
 * shows to be a fair multiple; a format that broke its layout or scales
 * errs by the logits' own size instead. */
/* The round trip: every matrix of the written file has the type and,
 * dequantized, is the F32 source's within the format's relative RMS error
 * eps (test_quant's measures) with a quarter's margin. */
static void check_weights(const char *path, enum dtype want, float eps)
{
	err e = {0};
	gguf_file *f = gguf_open(path, &e), *src = gguf_open(RAND256, &e);
	CHECK_(f && src, "%s", e.msg);
	int n = 0;
	for (int64_t i = 0; f && src && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i), *s = gguf_find_tensor(src, t->name);
		if (t->n_dims < 2 || !s)
			continue;
		float *y = xmalloc((size_t)t->n_elems * sizeof *y);
		quant_dequantize_row(t->type, t->data, y, t->n_elems);
		double se = 0, sx = 0;
		for (int64_t j = 0; j < t->n_elems; j++) {
			double x = ((const float *)s->data)[j];
			se += (y[j] - x) * (y[j] - x);
			sx += x * x;
		}
		free(y);
		CHECK_(t->type == want, "%s: %s is %s, not %s", path, t->name, dtype_name(t->type), dtype_name(want));
		CHECK_(sqrt(se / sx) <= (want == DT_F32 ? 0 : 1.25 * eps), "%s: %s relative rms error %g (eps %g)", path,
		       t->name, sqrt(se / sx), eps);
		n++;
	}
	CHECK_EQ_INT(n, 30);
	gguf_close(f);
	gguf_close(src);
}

/* Every type quantize writes, from the F32 model: the weights' round trip,
 * and the logits against llama.cpp's (bounds above). */
static void test_quantize_logits(void)
{
	static const struct { const char *type; enum dtype t; float eps; } cases[] = {
		{"q8_0", DT_Q8_0, 0.0072f}, {"q6_k", DT_Q6_K, 0.022f}, {"q5_k", DT_Q5_K, 0.041f},
		{"q4_k", DT_Q4_K, 0.082f}, {"f16", DT_F16, 0.0003f}, {"q4_0", DT_Q4_0, 0.115f},
		{"q4_1", DT_Q4_1, 0.079f}, {"q5_0", DT_Q5_0, 0.057f}, {"q5_1", DT_Q5_1, 0.039f},
		{"iq4_nl", DT_IQ4_NL, 0.089f}, {"q3_k", DT_Q3_K, 0.177f}, {"iq4_xs", DT_IQ4_XS, 0.091f},
		{"q2_k", DT_Q2_K, 0.285f}, {"bf16", DT_BF16, 0.0017f}, {"f32", DT_F32, 0},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char args[512], out[128];
		snprintf(out, sizeof out, "build/test-r256-%s.gguf", cases[i].type);
		snprintf(args, sizeof args, "quantize %s %s %s -t 2", RAND256, out, cases[i].type);
		run_pagechat(&r, args);
		bool f32 = cases[i].t == DT_F32;
		CHECK_(r.status == f32 && strstr(r.errout, f32 ? "every matrix is already f32" : "30 tensors converted"),
		       "%s: %s", args, r.errout);
		if (f32)
			continue;
		check_weights(out, cases[i].t, cases[i].eps);
		bool same;
		float scale, d = logits_error(out, &same, &scale);
		float bound = cases[i].t != DT_Q8_0 ? 3 * cases[i].eps * scale : 0.05f;
		CHECK_(d <= bound, "%s logits: max abs diff %g > %g", cases[i].type, d, bound);
		CHECK_(same, "%s logits: the top token changed beyond the errors", cases[i].type);
		if (!quant_uses_qact(cases[i].t))
			continue;
		/* the kernels against the same weights in f32: 0.011-0.017 measured
		 * for every format (the int8 activations' share; the scale is
		 * about 1.2), where a format's own error allows 0.3-1 above */
		char twin[160];
		snprintf(twin, sizeof twin, "build/test-r256-%s-f32.gguf", cases[i].type);
		snprintf(args, sizeof args, "quantize %s %s f32", out, twin);
		run_pagechat(&r, args);
		CHECK_(r.status == 0, "%s: %s", args, r.errout);
		float dt = twin_error(out, twin);
		CHECK_(dt <= 0.035f, "%s logits: max abs diff %g from its weights in f32 (> 0.035)", cases[i].type, dt);
		unlink(twin);
	}
	/* the written file says what it holds */
	err e = {0};
	gguf_file *f = gguf_open("build/test-r256-q4_k.gguf", &e);
	uint32_t ft = 0, qv = 0;
	CHECK(f && gguf_get_u32(f, "general.file_type", &ft, &e) == 0 && ft == 14);
	CHECK(f && gguf_get_u32(f, "general.quantization_version", &qv, &e) == 0 && qv == 2);
	CHECK(f && gguf_find_tensor(f, "blk.3.ffn_down.weight")->type == DT_Q4_K);
	CHECK(f && gguf_find_tensor(f, "blk.3.ffn_norm.weight")->type == DT_F32);
	gguf_close(f);
}

/* ---- stories260K: the FFN rows of 172 stay, perplexity under Q8_0 ---- */

static double perplexity_of(const char *model)
{
	char args[512];
	snprintf(args, sizeof args, "perplexity -m %s -f build/test-ppl.txt -c 128", model);
	run_pagechat(&r, args);
	const char *p = strstr(r.out, "perplexity ");
	CHECK_(r.status == 0 && p && strstr(r.errout, "[1/"), "%s: %s", args, r.errout);
	return p ? atof(p + 11) : 0;
}

/* The greedy tokens of model that agree with llama.cpp's on the F32 stories
 * model (greedy.tsv: the common prefix of each row's 64, summed). */
static int greedy_agreeing(const char *model)
{
	tsv t;
	int sum = 0;
	CHECK(tsv_load(&t, "../shared/testdata/greedy.tsv") == 0);
	for (int i = 0; i < t.n_rows; i++) {
		char text[4096], args[8192];
		size_t n = strlen(t.rows[i][0]); /* a JSON string without escapes for these rows */
		snprintf(text, sizeof text, "%.*s", (int)n - 2, t.rows[i][0] + 1);
		CHECK(write_file("build/test-input.txt", text, strlen(text)) == 0);
		snprintf(args, sizeof args, "generate -m %s -f build/test-input.txt --temp 0 -n 64 --ids", model);
		run_pagechat(&r, args);
		CHECK_(r.status == 0, "%s: %s", args, r.errout);
		const char *a = r.out, *b = t.rows[i][2];
		for (char *ea, *eb;; a = ea, b = eb) {
			long x = strtol(a, &ea, 10), y = strtol(b, &eb, 10);
			if (ea == a || eb == b || x != y)
				break;
			sum++;
		}
	}
	tsv_free(&t);
	return sum;
}

/* The 32-value formats on a real model: stories260K's rows of 64 values
 * (not whole 256-value super-blocks; the FFN's rows of 172 stay f32), its
 * perplexity (base: the F32 model's) and greedy tokens. Bounds from the
 * formats' bits with room: measured here +8% (q4_1, iq4_nl; q4_0 +8%) and
 * +2-2.5% (q5_0, q5_1); 43, 47, 83 and 115 of the 192 greedy tokens (q4_0
 * 21, q8_0 192). A broken decoding gives thousands of percent and none. */
static void stories_32(double base)
{
	static const struct { const char *type; double rise; int agree; } cases[] = {
		{"q4_1", 0.15, 32}, {"q5_0", 0.05, 48}, {"q5_1", 0.05, 48}, {"iq4_nl", 0.15, 32},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		char args[512], out[128];
		snprintf(out, sizeof out, "build/test-st-%s.gguf", cases[i].type);
		snprintf(args, sizeof args, "quantize " STORIES " %s %s", out, cases[i].type);
		run_pagechat(&r, args);
		CHECK_(r.status == 0 && strstr(r.errout, "32 tensors converted"), "%s: %s", args, r.errout);
		double ppl = perplexity_of(out);
		int agree = greedy_agreeing(out);
		CHECK_(ppl > 1 && ppl < base * (1 + cases[i].rise), "%s perplexity %g vs %g (rise %.1f%%)", cases[i].type,
		       ppl, base, 100 * (ppl / base - 1));
		CHECK_(agree >= cases[i].agree, "%s: %d of 192 greedy tokens agree with the F32 model's (at least %d)",
		       cases[i].type, agree, cases[i].agree);
		unlink(out);
	}
}

static void test_stories(void)
{
	run_pagechat(&r, "quantize " STORIES " build/test-st-q8_0.gguf q8_0");
	CHECK_(r.status == 0, "%s", r.errout);
	CHECK(strstr(r.errout, "blk.0.ffn_down.weight has rows of 172 values") && strstr(r.errout, "kept as f32"));
	CHECK(strstr(r.errout, "5 matrices kept"));
	run_pagechat(&r, "info build/test-st-q8_0.gguf");
	CHECK(strstr(r.out, "tensors q8_0") && strstr(r.out, "tensors f32"));
	/* the model's own writing, sampled, as the text */
	run_pagechat(&r, "generate -m " STORIES " -p 'Once upon a time' -n 1500 -c 2048 --temp 0.8 --seed 7");
	CHECK(r.status == 0 && strlen(r.out) > 2000);
	CHECK(write_file("build/test-ppl.txt", r.out, strlen(r.out)) == 0);
	double base = perplexity_of(STORIES), q8 = perplexity_of("build/test-st-q8_0.gguf");
	CHECK_(base > 1 && base < 20, "stories perplexity %g", base);
	CHECK_(q8 < base * 1.01, "Q8_0 perplexity %g vs %g (rise %.2f%%)", q8, base, 100 * (q8 / base - 1));
	CHECK(strstr(r.out, "windows of 128"));
	stories_32(base);
}

/* ---- the KL divergence against a saved run ---- */

/* log softmax(logits[n]) into lp, in double. */
static void log_probs(const float *logits, int n, double *lp)
{
	double mx = logits[0], s = 0;
	for (int i = 1; i < n; i++)
		mx = fmax(mx, logits[i]);
	for (int i = 0; i < n; i++)
		s += exp(logits[i] - mx);
	for (int i = 0; i < n; i++)
		lp[i] = logits[i] - mx - log(s);
}

/* The mean KL(p || q) of q_model's next-token distributions against
 * p_model's over text_path's first n_windows windows of ctx tokens, as the
 * command defines them (BOS first, the second half scored), each position's
 * logits computed alone from its window's prefix, all in double;
 * *reversed gets the mean KL(q || p). */
static double kl_recomputed(const char *p_model, const char *q_model, const char *text_path, int ctx,
			    int n_windows, double *reversed)
{
	err e = {0};
	llama_model *mp = llama_open(p_model, NULL, &e), *mq = llama_open(q_model, NULL, &e);
	tok *tk = mp ? tok_new(llama_file(mp), &e) : NULL;
	static char text[1 << 16];
	FILE *fp = fopen(text_path, "rb");
	size_t len = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
	if (fp)
		fclose(fp);
	int nv = mp ? llama_hp(mp)->n_vocab : 0, n_ids = 1 << 14, n = 0;
	int32_t *ids = xmalloc((size_t)n_ids * sizeof *ids);
	if (tk)
		n = tok_encode(tk, text, len, TOK_ADD_BOS, ids, n_ids);
	CHECK_(mp && mq && tk && n >= ctx * n_windows, "kl_recomputed: %s (%d tokens)", e.msg, n);
	float *lg = xmalloc((size_t)MAX(nv, 1) * sizeof *lg);
	double *p = xmalloc((size_t)MAX(nv, 1) * sizeof *p), *q = xmalloc((size_t)MAX(nv, 1) * sizeof *q);
	double sum = 0, rsum = 0;
	int count = 0;
	for (int k = 0; mq && tk && n >= ctx * n_windows && k < n_windows; k++) {
		int32_t *w = ids + (size_t)k * ctx;
		w[0] = tok_bos(tk);
		for (int pos = ctx / 2 - 1; pos < ctx - 1; pos++, count++) {
			CHECK(gen_logits(mp, w, pos + 1, 0, lg, &e) == 0);
			log_probs(lg, nv, p);
			CHECK(gen_logits(mq, w, pos + 1, 0, lg, &e) == 0);
			log_probs(lg, nv, q);
			for (int i = 0; i < nv; i++) {
				sum += exp(p[i]) * (p[i] - q[i]);
				rsum += exp(q[i]) * (q[i] - p[i]);
			}
		}
	}
	*reversed = count ? rsum / count : 0;
	free(ids); free(lg); free(p); free(q);
	tok_free(tk);
	llama_free(mp);
	llama_free(mq);
	return count ? sum / count : 0;
}

/* A base file in llama-perplexity's --kl-divergence-base layout, written
 * here from the format's definition for p_model over the first n_windows
 * windows of ctx tokens of text_path (each row: the logits' maximum m, the
 * lowest logit kept lo = max(min, m - 16), scale = (m - lo) / 65535, min =
 * log p at lo, q = round((logit - lo) / scale) above lo, else 0); returns
 * the mean KL of q_model against it over the rows llama.cpp scores
 * (positions ctx/2 .. ctx-2), recomputed from each position's logits. */
static double write_llama_base(const char *path, const char *p_model, const char *q_model, const char *text_path,
			       int ctx, int n_windows)
{
	err e = {0};
	llama_model *mp = llama_open(p_model, NULL, &e), *mq = llama_open(q_model, NULL, &e);
	tok *tk = mp ? tok_new(llama_file(mp), &e) : NULL;
	static char text[1 << 16];
	FILE *fp = fopen(text_path, "rb"), *out = fopen(path, "wb");
	size_t len = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
	if (fp)
		fclose(fp);
	int32_t *ids = xmalloc((size_t)(1 << 14) * sizeof *ids), n = 0, nv = mp ? llama_hp(mp)->n_vocab : 1;
	if (tk)
		n = tok_encode(tk, text, len, TOK_ADD_BOS, ids, 1 << 14);
	CHECK_(mq && tk && out && n >= ctx * n_windows, "write_llama_base: %s", e.msg);
	int32_t h[3] = {ctx, nv, n_windows};
	fwrite("_logits_", 8, 1, out ? out : stderr);
	if (out) {
		fwrite(h, sizeof h, 1, out);
		fwrite(ids, 4, (size_t)ctx * n_windows, out);
	}
	float *lg = xmalloc((size_t)nv * sizeof *lg);
	double *q = xmalloc((size_t)nv * sizeof *q), sum = 0;
	uint16_t *row = xcalloc((size_t)(2 * ((nv + 1) / 2) + 4), 2);
	int count = 0;
	for (int k = 0; mq && tk && out && n >= ctx * n_windows && k < n_windows; k++) {
		int32_t w[512];
		memcpy(w, ids + (size_t)k * ctx, (size_t)ctx * sizeof *w);
		w[0] = tok_bos(tk);
		for (int pos = ctx / 2; pos < ctx - 1; pos++, count++) {
			CHECK(gen_logits(mp, w, pos + 1, 0, lg, &e) == 0);
			float mx = lg[0], mn = lg[0];
			for (int i = 1; i < nv; i++)
				mx = fmaxf(mx, lg[i]), mn = fminf(mn, lg[i]);
			mn = fmaxf(mn, mx - 16);
			double s = 0;
			for (int i = 0; i < nv; i++)
				s += exp((double)lg[i] - mx);
			float scale = (mx - mn) / 65535.0f, minlp = (float)(mn - mx - log(s));
			memcpy(row, &scale, 4);
			memcpy(row + 2, &minlp, 4);
			for (int i = 0; i < nv; i++)
				row[4 + i] = lg[i] > mn ? (uint16_t)lrintf((lg[i] - mn) / scale) : 0;
			fwrite(row, 2, (size_t)(2 * ((nv + 1) / 2) + 4), out);
			CHECK(gen_logits(mq, w, pos + 1, 0, lg, &e) == 0);
			log_probs(lg, nv, q);
			for (int i = 0; i < nv; i++) {
				double lp = (double)scale * row[4 + i] + minlp;
				if (lp > -16)
					sum += exp(lp) * (lp - q[i]);
			}
		}
	}
	if (out)
		fclose(out);
	free(ids); free(lg); free(q); free(row);
	tok_free(tk);
	llama_free(mp);
	llama_free(mq);
	return count ? sum / count : 0;
}

/* --kl on a base in llama-perplexity's layout: the Q8_0 copy's KL as the
 * test recomputes it on the same rows, the model against itself near 0 (the
 * 16-bit rounding of the saved log-probabilities only). */
static void test_kl_llama(void)
{
	double want = write_llama_base("build/test-kl-llama.bin", STORIES, "build/test-st-q8_0.gguf",
				       "build/test-ppl.txt", 128, 3);
	run_pagechat(&r, "perplexity -m build/test-st-q8_0.gguf -f build/test-ppl.txt -c 128 --kv-type f32 "
		     "--kl build/test-kl-llama.bin");
	const char *k = strstr(r.out, "KL divergence ");
	double got = k ? atof(k + 14) : -1;
	CHECK_(r.status == 0 && k && strstr(k, "llama.cpp's") && strstr(k, "(189 tokens;"), "%s%s", r.out, r.errout);
	CHECK_(fabs(got - want) <= 1e-5 * want, "KL against a llama.cpp base %.9g, recomputed %.9g", got, want);
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt -c 128 --kv-type f32 --kl build/test-kl-llama.bin");
	k = strstr(r.out, "KL divergence ");
	CHECK_(r.status == 0 && k && atof(k + 14) < 1e-6 && atof(k + 14) < want / 100, "%s%s", r.out, r.errout);
	printf("KL of stories Q8_0 against a base in llama.cpp's layout: %.6g (recomputed %.6g); F32 itself %s", got, want,
	       k ? k + 14 : "?\n");
}

/* perplexity --kl-base on the F32 model, then --kl on its Q8_0 copy (f32
 * K/V in both, so that gen_logits below computes what they do): the
 * mean the command prints is the exact KL recomputed here (within what
 * saving log-probabilities as f32 moves it), and KL(q || p), close but not
 * the same, is not; the model against its own run gives 0. */
static void test_kl(void)
{
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt -c 128 --chunks 4 --kv-type f32 "
		     "--kl-base build/test-kl.bin");
	CHECK_(r.status == 0 && strstr(r.out, "(256 tokens scored, 4 windows of 128)"), "%s%s", r.out, r.errout);
	run_pagechat(&r, "perplexity -m build/test-st-q8_0.gguf -f build/test-ppl.txt -c 128 --kv-type f32 "
		     "--kl build/test-kl.bin");
	const char *k = strstr(r.out, "KL divergence ");
	double got = k ? atof(k + 14) : -1, rev, want = kl_recomputed(STORIES, "build/test-st-q8_0.gguf",
								      "build/test-ppl.txt", 128, 4, &rev);
	CHECK_(r.status == 0 && k && strstr(k, "(256 tokens; same top token"), "%s%s", r.out, r.errout);
	/* printed to 6 digits; the reversed measure differs by 4e-4 of it here */
	CHECK_(fabs(got - want) <= 1e-5 * want, "KL %.9g, recomputed %.9g", got, want);
	CHECK_(fabs(rev - want) > 1e-4 * want, "KL(q||p) %.9g too close to KL(p||q) %.9g to tell them apart", rev,
	       want);
	printf("KL of stories Q8_0 against F32: %.6g (recomputed %.6g; reversed %.6g)\n", got, want, rev);
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt -c 128 --kv-type f32 --kl build/test-kl.bin");
	k = strstr(r.out, "KL divergence ");
	CHECK_(r.status == 0 && k && atof(k + 14) < 1e-7 && strstr(k, "same top token 100.00%"), "%s%s", r.out,
	       r.errout);
	/* the same run is needed: another -c, or a file that is not one */
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt -c 64 --kl build/test-kl.bin");
	CHECK_(r.status == 1 && strstr(r.errout, "4 windows of 128") && strstr(r.errout, "give the same text and -c"),
	       "%s", r.errout);
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt --kl build/test-ppl.txt");
	CHECK_(r.status == 1 && strstr(r.errout, "not a file of saved log-probabilities"), "%s", r.errout);
	run_pagechat(&r, "perplexity -m " STORIES " -f build/test-ppl.txt --kl x --kl-base y");
	CHECK_(r.status == 2 && strstr(r.errout, "give one"), "%s", r.errout);
}

/* ---- bench: the report's fields ---- */

static void test_bench(void)
{
	run_pagechat(&r, "bench -m " STORIES " -p 16 -n 4 -r 2 --batch 1,3 -t 2 --bw-mib 16 --json");
	CHECK_(r.status == 0, "%s", r.errout);
	const char *want[] = {"\"tests\": [", "\"test\": \"pp16\"", "\"test\": \"tg4\"", "\"test\": \"tg4 x3\"",
			      "\"bandwidth_gbs\"", "\"bytes_per_token\"", "\"tps_sd\"", "\"threads\": 2", "\"of_limit\""};
	for (size_t i = 0; i < ARRAY_LEN(want); i++)
		CHECK_(strstr(r.out, want[i]) != NULL, "bench --json lacks %s: %s", want[i], r.out);
	/* at a depth, with 8-bit K/V (the pool must hold depth + n for each sequence) */
	run_pagechat(&r, "bench -m " STORIES " -p 8 -n 4 -d 600 -r 1 --batch 1,3 -t 2 --bw-mib 8 --kv-type-k q8 "
		     "--kv-type-v fp8 --json");
	const char *want_d[] = {"\"test\": \"pp8 @d600\"", "\"test\": \"tg4 @d600\"", "\"test\": \"tg4 x3 @d600\"",
				"\"kv_type_k\": \"q8\"", "\"kv_type_v\": \"fp8\"", "\"depth\": 600"};
	for (size_t i = 0; i < ARRAY_LEN(want_d); i++)
		CHECK_(r.status == 0 && strstr(r.out, want_d[i]) != NULL, "bench -d --json lacks %s: %s%s", want_d[i],
		       r.out, r.errout);
	/* quantized matrices: the prompt test against the int8 limit (none for
	 * a kernel set without int8 instructions) */
	run_pagechat(&r, "bench -m build/test-st-q8_0.gguf -p 16 -n 2 -r 1 --batch 1 -t 2 --bw-mib 8 --json");
	const char *pp = strstr(r.out, "\"test\": \"pp16\""), *tg = pp ? strstr(pp, "\"test\": \"tg2\"") : NULL;
	bool scalar = strstr(r.out, "\"backend\": \"cpu/scalar\"") != NULL;
	const char *lim = pp ? strstr(pp, "\"of_limit\"") : NULL;
	CHECK_(r.status == 0 && strstr(r.out, "\"pp_limit_tps\"") && tg && (scalar || (lim && lim < tg)),
	       "bench --json on q8_0: no int8 limit for pp: %s%s", r.out, r.errout);
	/* the multiply-adds per prompt token, recomputed from the file: every
	 * quantized matrix but the embedding table (the stories model's output is
	 * its own matrix), the output once per 16-token prompt */
	err e = {0};
	gguf_file *f = gguf_open("build/test-st-q8_0.gguf", &e);
	CHECK_(f != NULL, "%s", e.msg);
	double macs = 0;
	for (int64_t i = 0; f && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		if (strcmp(t->name, "token_embd.weight") && t->ne[1] > 1 && dtype_block_elems(t->type) > 1)
			macs += (double)t->ne[0] * (double)t->ne[1] / (strcmp(t->name, "output.weight") ? 1 : 16);
	}
	gguf_close(f);
	const char *m = strstr(r.out, "\"int8_macs_per_token\": ");
	double got = m ? strtod(m + strlen("\"int8_macs_per_token\": "), NULL) : 0;
	CHECK_(macs > 0 && fabs(got - macs) <= 1e-3 * macs, "int8 multiply-adds per token %g, the file's %g", got,
	       macs);
	run_pagechat(&r, "bench -m build/test-st-q8_0.gguf -p 8 -n 2 -r 1 --batch 1 -t 2 --bw-mib 8");
	CHECK_(r.status == 0 && (scalar || strstr(r.out, "prompt limit ")), "%s%s", r.out, r.errout);
	run_pagechat(&r, "bench -m " STORIES " -d -1");
	CHECK(r.status == 2 && strstr(r.errout, "-d: -1 is out of range (0..16777216)"));
	run_pagechat(&r, "bench -m " STORIES " --kv-type q4");
	CHECK(r.status != 0 && strstr(r.errout, "--kv-type 'q4': must be f32, f16, q8 or fp8"));
	run_pagechat(&r, "bench -m " STORIES " -p 8 -n 2 -r 1 --batch 1 --bw-mib 8");
	CHECK_(r.status == 0 && strstr(r.out, "| pp8") && strstr(r.out, "| tg2") &&
	       strstr(r.out, "memory read bandwidth") && strstr(r.out, "bytes read per generated token"),
	       "%s%s", r.out, r.errout);
}

static void expect_error(const char *args, int status, const char *want)
{
	run_pagechat(&r, args);
	CHECK_(r.status == status && strstr(r.errout, want) && !strstr(r.errout, "fatal"),
	       "'%s': status %d, stderr '%s' (want %d, '%s')", args, r.status, r.errout, status, want);
}

static void test_errors(void)
{
	expect_error("quantize " STORIES " build/x.gguf", 2, "needs IN.gguf OUT.gguf TYPE");
	expect_error("quantize " STORIES " build/x.gguf q3_x", 2, "unknown type 'q3_x'");
	CHECK(strstr(r.errout, "iq4_xs") != NULL);
	expect_error("quantize no/such.gguf build/x.gguf q8_0", 1, "no/such.gguf");
	/* nothing converts: rows of 64 and 172 for 256-value blocks; a file
	 * already of the type. One line, status 1, no file written. */
	unlink("build/x.gguf");
	expect_error("quantize " STORIES " build/x.gguf q3_k", 1,
		     "no matrix converts to q3_K: 37 have rows not a multiple of q3_K's block of 256");
	CHECK(strstr(r.errout, "rows of 64") && strstr(r.errout, "nothing written"));
	expect_error("quantize build/test-r256-q4_1.gguf build/x.gguf q4_1", 1, "every matrix is already q4_1");
	CHECK(access("build/x.gguf", F_OK) != 0);
	run_pagechat(&r, "quantize build/test-r256-q4_1.gguf build/x.gguf q5_0");
	CHECK_(r.status == 0 && strstr(r.errout, "30 tensors converted to q5_0"), "%s", r.errout);
	unlink("build/x.gguf");
	expect_error("quantize " STORIES " no/such/dir/x.gguf q8_0", 1, "no/such/dir/x.gguf");
	expect_error("perplexity -m " STORIES, 2, "needs -m MODEL and -f TEXT");
	expect_error("perplexity -m " STORIES " -f no/such.txt", 1, "no/such.txt");
	CHECK(write_file("build/test-input.txt", "Hi", 2) == 0);
	expect_error("perplexity -m " STORIES " -f build/test-input.txt", 1, "at least 4");
	expect_error("bench", 2, "needs -m MODEL");
	expect_error("bench -m " STORIES " --batch 0", 2, "--batch");
	expect_error("bench -m " STORIES " -r 0", 2, "-r: 0 is out of range (1..64)");
	run_pagechat(&r, "--help");
	CHECK(strstr(r.out, "bench") && strstr(r.out, "quantize") && strstr(r.out, "perplexity"));
}

int main(void)
{
	test_writer();
	test_quantize_logits();
	test_stories();
	test_kl();
	test_kl_llama();
	test_bench();
	test_errors();
	return TEST_DONE();
}
