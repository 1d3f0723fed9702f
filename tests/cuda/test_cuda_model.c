/* tests/cuda/test_cuda_model.c: whole models and the engine on the CUDA
 * backend against the CPU backend (make test-cuda).
 *  - teacher-forced logits over a prompt and its CPU greedy continuation, in
 *    prefill chunks (cuBLAS path) and one token at a time (matrix-vector
 *    path): within 2e-2, and the same argmax wherever the CPU's top two are
 *    further apart than the difference;
 *  - free-running greedy generation on stories260K: the same tokens;
 *  - the engine: 16 concurrent requests sharing a system prompt (prefix
 *    hits), with a draft model, the same tokens as on the CPU;
 *  - models whose tensors sit off 16-byte boundaries (general.alignment 4):
 *    the same logits as the CPU (the device copy puts them back on one);
 *  - with PAGECHAT_CUDA_GRAPH=1 (or the fake device, which always records)
 *    all of the above with decode steps recorded and replayed;
 *  - partial offload: every N of a model's layers on the device, the rest
 *    (and the head, or not) on the CPU: the CPU's greedy tokens, its logits
 *    within 1e-4 on the fake device (2e-2 on a GPU); the engine with a split;
 *  - the fake device only: a device failure comes back from llama_open and
 *    llama_forward as an error naming it.
 * Paths: ../shared unless PAGECHAT_SHARED names the folder (tools/gpu_check.sh
 * stages it inside the checkout for a device machine). */
#include "tests/cuda/cuda_test.h"

#include "engine/core.h"
#include "engine/gen.h"
#include "kv/pool.h"
#include "kernels/kvq.h"
#include "models/gguf_write.h"
#include "tests/rand_model.h"

#include <math.h>
#include <stdio.h>

#define DRAFT "build/models/rand-draft.gguf"

/* stories260K in the shared folder */
static const char *model_path(void)
{
	static char path[512];
	const char *shared = getenv("PAGECHAT_SHARED");
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared && *shared ? shared : "../shared");
	return path;
}
#define MODEL model_path()
#define MAX_T 128

/* path on k, its first host_layers layers (and the head, with head_on_host)
 * on the CPU (partial offload). */
static llama_model *open_split(const char *path, const kern_ops *k, int host_layers, bool head_on_host)
{
	err e = {0};
	llama_params lp = {.max_tokens = MAX_T, .kern = k, .host_layers = host_layers, .head_on_host = head_on_host};
	llama_model *m = llama_open(path, &lp, &e);
	CHECK_(m != NULL, "%s on %s (%d layers on the CPU): %s", path, k->name, host_layers, e.msg);
	return m;
}

static llama_model *open_on(const char *path, const kern_ops *k)
{
	return open_split(path, k, 0, false);
}

/* logits[n][vocab] of every position of ids[n], run in chunks of chunk. */
static int all_logits(llama_model *m, const int32_t *ids, int n, int chunk, int kt, int vt, float *logits)
{
	const llama_hparams *hp = llama_hp(m);
	err e = {0};
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .head_dim = hp->head_dim, .k_type = (uint8_t)kt, .v_type = (uint8_t)vt,
			     .block_tokens = 16, .n_blocks = n / 16 + 2, .kern = llama_kern(m),
			     .host_layers = llama_host_layers(m)};
	kv_pool *pool = kv_pool_new(&pp, &e);
	if (!pool) {
		CHECK_(0, "pool: %s", e.msg);
		return -1;
	}
	kv_seq s;
	kv_seq_init(&s);
	int rc = kv_seq_reserve(pool, &s, n);
	int32_t pos[MAX_T], rows[MAX_T], seq[MAX_T] = {0};
	int64_t slot[MAX_T];
	for (int i0 = 0; !rc && i0 < n; i0 += chunk) {
		int c = MIN(chunk, n - i0);
		for (int i = 0; i < c; i++) {
			pos[i] = i0 + i;
			slot[i] = kv_seq_slot(pool, &s, i0 + i);
			rows[i] = i;
		}
		const int32_t *tables[1] = {s.blocks};
		llama_batch b = {.n_tokens = c, .token = ids + i0, .pos = pos, .slot = slot, .seq = seq,
				 .n_seqs = 1, .block_table = tables, .n_table = &s.n_blocks, .n_out = c,
				 .out_rows = rows};
		kv_view kv = kv_pool_view(pool);
		rc = llama_forward(m, &b, &kv, logits + (size_t)i0 * hp->n_vocab, &e);
		CHECK_(rc == 0, "forward: %s", e.msg);
	}
	kv_seq_release(pool, &s);
	kv_pool_free(pool);
	return rc;
}

static bool greedy_collect(void *ctx, int32_t id)
{
	int32_t *o = ctx;
	o[++o[0]] = id;
	return false;
}

static void compare_model(const char *path, const int32_t *prompt, int n_prompt, int kt, int vt)
{
	llama_model *mc = open_on(path, kern_cpu()), *mg = open_on(path, G);
	if (!mc || !mg)
		goto out;
	int n_vocab = llama_hp(mc)->n_vocab;
	/* the CPU's greedy continuation makes the sequence both score */
	int32_t ids[MAX_T], gen[MAX_T] = {0};
	memcpy(ids, prompt, (size_t)n_prompt * 4);
	samp_params sp = samp_default_params();
	sp.temp = 0;
	gen_params gp = {.samp = sp, .n_predict = MAX_T - n_prompt, .n_ctx = MAX_T + 16, .block_tokens = 16,
			 .kv_type_k = (uint8_t)kt, .kv_type_v = (uint8_t)vt};
	gen_stats st;
	err e = {0};
	CHECK_(gen_run(mc, NULL, prompt, n_prompt, &gp, greedy_collect, gen, &st, &e) == 0, "%s", e.msg);
	memcpy(ids + n_prompt, gen + 1, (size_t)gen[0] * 4);
	int n = n_prompt + gen[0];
	float *lc = xmalloc((size_t)n * n_vocab * 4), *lg = xmalloc((size_t)n * n_vocab * 4);
	static const int chunks[] = {MAX_T, 37, 1};
	CHECK(all_logits(mc, ids, n, MAX_T, kt, vt, lc) == 0);
	for (size_t ci = 0; ci < ARRAY_LEN(chunks); ci++) {
		if (all_logits(mg, ids, n, chunks[ci], kt, vt, lg))
			continue;
		double worst = 0;
		int bad_argmax = 0;
		for (int t = 0; t < n; t++) {
			const float *a = lc + (size_t)t * n_vocab, *b = lg + (size_t)t * n_vocab;
			int ia = 0, ib = 0;
			double d = 0;
			for (int v = 0; v < n_vocab; v++) {
				d = fmax(d, fabs((double)a[v] - b[v]));
				ia = a[v] > a[ia] ? v : ia;
				ib = b[v] > b[ib] ? v : ib;
			}
			float second = -INFINITY;
			for (int v = 0; v < n_vocab; v++)
				if (v != ia)
					second = fmaxf(second, a[v]);
			bad_argmax += ia != ib && a[ia] - second > 2 * d;
			worst = fmax(worst, d);
		}
		CHECK_(worst <= 2e-2, "%s kv %s/%s chunk %d: logits differ by %g", path, kv_type_name(kt),
		       kv_type_name(vt), chunks[ci], worst);
		CHECK_(bad_argmax == 0, "%s kv %s/%s chunk %d: %d positions pick another token", path,
		       kv_type_name(kt), kv_type_name(vt), chunks[ci], bad_argmax);
	}
	free(lc);
	free(lg);
out:
	llama_free(mc);
	llama_free(mg);
}

/* A Gemma 3 shaped random model (tests/rand_model.h): windows of 8 on layers
 * 0 and 1 of 3 (the sequences here run past them), GELU, the post norms,
 * the embedding scale and a soft-cap. */
#define GEMMA "build/models/cuda-gemma3.gguf"
static void write_gemma(void)
{
	rm_spec s = {.arch = "gemma3", .vocab_from = MODEL, .dim = 64, .n_layers = 3, .n_heads = 4, .n_kv_heads = 1,
		     .head_dim = 32, .ffn_dim = 128, .eps = 1e-6f, .rope_base = 1e6f, .tied = true, .swa_window = 8,
		     .swa_period = 3, .softcap = 20.0f, .wtype = DT_F32, .seed = 21};
	err e = {0};
	CHECK_(rm_write(&s, GEMMA, &e) == 0, "%s", e.msg);
}

static void test_models(void)
{
	int32_t prompt[8] = {1, 403, 407, 261, 378, 429, 261, 263};
	write_gemma();
	const char *const paths[] = {
		MODEL, DRAFT, "build/models/rand-256x4-f32.gguf", "build/models/rand-256x4-q8_0.gguf",
		"build/models/rand-256x4-q4_0.gguf", "build/models/rand-256x4-q4_k.gguf",
		"build/models/rand-256x4-q6_k.gguf", GEMMA,
		/* issue #37's formats */
		"build/models/rand-256x4-q4_1.gguf", "build/models/rand-256x4-q5_0.gguf",
		"build/models/rand-256x4-q5_1.gguf", "build/models/rand-256x4-iq4_nl.gguf",
		"build/models/rand-256x4-q2_k.gguf", "build/models/rand-256x4-q3_k.gguf",
		"build/models/rand-256x4-iq4_xs.gguf",
	};
	for (size_t i = 0; i < ARRAY_LEN(paths); i++)
		compare_model(paths[i], prompt, 8, KV_F32, KV_F32);
	compare_model(GEMMA, prompt, 8, KV_F16, KV_Q8);
	compare_model(MODEL, prompt, 8, KV_F16, KV_F16);
	compare_model(MODEL, prompt, 8, KV_Q8, KV_Q8);
	compare_model(MODEL, prompt, 8, KV_FP8, KV_F16);
	compare_model("build/models/rand-256x4-q4_k.gguf", prompt, 8, KV_F16, KV_F16);
}

/* stories260K, free running: the same greedy tokens as the CPU. */
static void test_greedy(void)
{
	llama_model *mc = open_on(MODEL, kern_cpu()), *mg = open_on(MODEL, G);
	if (!mc || !mg)
		goto out;
	static const int32_t prompt[] = {1, 403, 407, 261};
	for (int kt = KV_F32; kt <= KV_F16; kt++) {
		int32_t a[300] = {0}, b[300] = {0};
		samp_params sp = samp_default_params();
		sp.temp = 0;
		gen_params gp = {.samp = sp, .n_predict = 250, .n_ctx = 512, .block_tokens = 16,
				 .kv_type_k = (uint8_t)kt, .kv_type_v = (uint8_t)kt};
		gen_stats st;
		err e = {0};
		CHECK_(gen_run(mc, NULL, prompt, 4, &gp, greedy_collect, a, &st, &e) == 0, "%s", e.msg);
		CHECK_(gen_run(mg, NULL, prompt, 4, &gp, greedy_collect, b, &st, &e) == 0, "%s", e.msg);
		int same = 0;
		while (same < a[0] && same < b[0] && a[1 + same] == b[1 + same])
			same++;
		CHECK_(a[0] == b[0] && same == a[0], "greedy kv %s: first difference at token %d of %d",
		       kv_type_name(kt), same, a[0]);
	}
out:
	llama_free(mc);
	llama_free(mg);
}

/* ---- partial offload ---- */

static double max_diff(const float *a, const float *b, size_t n)
{
	double d = 0;
	for (size_t i = 0; i < n; i++)
		d = fmax(d, fabs((double)a[i] - b[i]));
	return isfinite(d) ? d : INFINITY;
}

/* A split model's decode step and an 8-row prefill with every row's logits
 * cross to the device and back once each (the fake device counts): two
 * uploads (the batch's rows and tables, the activations), one download
 * (logits, or the rows for the CPU's head). */
static void split_crossings(llama_model *m, const int32_t *ids)
{
	if (!fake_device)
		return;
	const llama_hparams *hp = llama_hp(m);
	err e = {0};
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .head_dim = hp->head_dim, .block_tokens = 16, .n_blocks = 2, .kern = llama_kern(m),
			     .host_layers = llama_host_layers(m)};
	kv_pool *pool = kv_pool_new(&pp, &e);
	kv_seq s;
	kv_seq_init(&s);
	if (!pool || kv_seq_reserve(pool, &s, 9)) {
		CHECK_(0, "pool: %s", e.msg);
		kv_pool_free(pool);
		return;
	}
	float *logits = xmalloc((size_t)8 * hp->n_vocab * 4);
	int32_t pos[8], rows[8], seq[8] = {0};
	int64_t slot[8];
	for (int i = 0; i < 8; i++)
		pos[i] = rows[i] = i, slot[i] = kv_seq_slot(pool, &s, i);
	const int32_t *tables[1] = {s.blocks};
	kv_view kv = kv_pool_view(pool);
	for (int T = 8; T >= 1; T -= 7) {
		llama_batch b = {.n_tokens = T, .token = ids, .pos = pos + 8 - T, .slot = slot + 8 - T, .seq = seq,
				 .n_seqs = 1, .block_table = tables, .n_table = &s.n_blocks, .n_out = T,
				 .out_rows = rows};
		kern_fake_counts c0 = kern_fake_get_counts();
		CHECK_(llama_forward(m, &b, &kv, logits, &e) == 0, "%s", e.msg);
		kern_fake_counts c1 = kern_fake_get_counts();
		CHECK_(c1.uploads - c0.uploads == 2 && c1.downloads - c0.downloads == 1,
		       "a split step of %d rows: %lld uploads, %lld downloads (want 2 and 1)", T,
		       (long long)(c1.uploads - c0.uploads), (long long)(c1.downloads - c0.downloads));
	}
	free(logits);
	kv_seq_release(pool, &s);
	kv_pool_free(pool);
}

/* path with N = 0 .. n_layers of its last layers on the device (the head
 * there, and for a split also on the CPU): the CPU's greedy tokens, and
 * teacher-forced logits over them in prefill chunks and one at a time
 * within 1e-4 of the all-CPU run on the fake device (2e-2 on a GPU). */
static void split_model(const char *path)
{
	llama_model *mc = open_on(path, kern_cpu());
	if (!mc)
		return;
	int L = llama_hp(mc)->n_layers, n_vocab = llama_hp(mc)->n_vocab;
	static const int32_t prompt[] = {1, 403, 407, 261, 378, 429};
	samp_params sp = samp_default_params();
	sp.temp = 0;
	gen_params gp = {.samp = sp, .n_predict = 40, .n_ctx = MAX_T, .block_tokens = 16};
	gen_stats st;
	err e = {0};
	int32_t ref[MAX_T] = {0}, got[MAX_T];
	CHECK_(gen_run(mc, NULL, prompt, 6, &gp, greedy_collect, ref, &st, &e) == 0, "%s", e.msg);
	int32_t ids[MAX_T];
	memcpy(ids, prompt, sizeof prompt);
	memcpy(ids + 6, ref + 1, (size_t)ref[0] * 4);
	int n = 6 + ref[0];
	float *lc = xmalloc((size_t)n * n_vocab * 4), *lg = xmalloc((size_t)n * n_vocab * 4);
	CHECK(all_logits(mc, ids, n, n, KV_F32, KV_F32, lc) == 0);
	double tol = fake_device ? 1e-4 : 2e-2, worst = 0;
	int runs = 0;
	int64_t prev_bytes = -1;
	for (int N = 0; N <= L; N++)
		for (int head_host = 0; head_host <= (N > 0 && N < L); head_host++) {
			llama_model *mg = open_split(path, G, L - N, head_host);
			if (!mg)
				continue;
			CHECK_EQ_INT(llama_host_layers(mg), N > 0 && N < L ? L - N : 0);
			int64_t bytes = llama_device_weight_bytes(mg);
			if (!head_host) /* each layer more on the device adds its weights there */
				CHECK_(bytes > prev_bytes && (N > 0 || bytes == 0), "%s: %d layers on the device: %lld "
				       "bytes of weights there", path, N, (long long)bytes);
			prev_bytes = head_host ? prev_bytes : bytes;
			if (N > 0 && N < L)
				split_crossings(mg, ids);
			memset(got, 0, sizeof got);
			CHECK_(gen_run(mg, NULL, prompt, 6, &gp, greedy_collect, got, &st, &e) == 0, "%s", e.msg);
			/* a GPU rounds differently: near-ties of random models may flip */
			CHECK_(!memcmp(ref, got, (size_t)(ref[0] + 1) * 4) || (!fake_device && strcmp(path, MODEL)),
			       "%s, %d of %d layers on %s (head on the %s): greedy tokens differ from the CPU's", path, N,
			       L, G->name, head_host ? "CPU" : "device");
			for (int chunk = 37; chunk >= 1; chunk -= 36) {
				CHECK(all_logits(mg, ids, n, chunk, KV_F32, KV_F32, lg) == 0);
				double d = max_diff(lc, lg, (size_t)n * n_vocab);
				worst = fmax(worst, d);
				CHECK_(d <= tol, "%s, %d of %d layers on %s (head on the %s), chunk %d: logits differ by %g",
				       path, N, L, G->name, head_host ? "CPU" : "device", chunk, d);
			}
			runs++;
			llama_free(mg);
		}
	fprintf(stderr, "%s: %d layers; N = 0..%d on %s (%d placements, head on either side): greedy tokens the "
		"CPU's, logits within %g of the CPU's\n", path, L, L, G->name, runs, worst);
	free(lc);
	free(lg);
	llama_free(mc);
}

static void test_split(void)
{
	static const char *const paths[] = {"build/models/rand-256x4-f32.gguf", DRAFT, GEMMA};
	write_gemma();
	split_model(MODEL);
	for (size_t i = 0; i < ARRAY_LEN(paths); i++)
		split_model(paths[i]);
	/* PAGECHAT_SPLIT_MODELS="A.gguf B.gguf": more (make test-offload: 768x12) */
	const char *more = getenv("PAGECHAT_SPLIT_MODELS");
	char buf[1024];
	snprintf(buf, sizeof buf, "%s", more ? more : "");
	for (char *sv = NULL, *p = strtok_r(buf, " ", &sv); p; p = strtok_r(NULL, " ", &sv))
		split_model(p);
}

/* ---- the engine ---- */

typedef struct run_out {
	int32_t tok[16][80];     /* [0] = count */
} run_out;

static void on_event(void *ctx, const core_event *ev)
{
	run_out *o = ctx;
	if (ev->kind == CORE_EV_TOKEN && ev->req >= 0 && ev->req < 16 && o->tok[ev->req][0] < 79)
		o->tok[ev->req][++o->tok[ev->req][0]] = ev->token;
}

/* 16 requests at once behind a shared 48-token system prompt, greedy, with
 * the draft; returns the prefix-cache hits through *cached. */
static void engine_run(const kern_ops *k, int host_layers, const char *draft_path, run_out *o, core_stats *st)
{
	llama_model *m = open_split(MODEL, k, host_layers, host_layers == 1), *d = open_on(draft_path, k);
	err e = {0};
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	core *c = NULL;
	if (!m || !d || !tk)
		goto out;
	core_params p = {.model = m, .tok = tk, .pool_blocks = 512, .block_tokens = 16, .step_tokens = MAX_T,
			 .max_running = 16, .check = true, .draft_kind = DRAFT_MODEL, .draft = d,
			 .draft_tok = tk, .draft_k = 4};
	memset(o, 0, sizeof *o);
	if (!(c = core_new(&p, on_event, o, &e))) {
		CHECK_(0, "core_new on %s: %s", k->name, e.msg);
		goto out;
	}
	int32_t prompt[64];
	for (int i = 0; i < 16; i++) {
		prompt[0] = 1;
		for (int j = 1; j < 48; j++)
			prompt[j] = 300 + (j * 37) % 200;     /* the shared "system prompt" */
		for (int j = 48; j < 52 + i % 5; j++)
			prompt[j] = 260 + (i * 13 + j) % 150; /* each request's own turn */
		core_request r = {.id = i, .conv = i, .prompt = prompt, .n_prompt = 52 + i % 5,
				  .samp = samp_default_params(), .max_tokens = 40 + i, .n = 1};
		r.samp.temp = 0;
		CHECK_(core_submit(c, &r, &e) == 0, "%s", e.msg);
	}
	while (!core_idle(c))
		if (core_step(c, &e) < 0) {
			CHECK_(0, "core_step on %s: %s", k->name, e.msg);
			break;
		}
	CHECK_(core_check(c, &e), "%s", e.msg);
	core_get_stats(c, st);
out:
	core_free(c);
	tok_free(tk);
	llama_free(m);
	llama_free(d);
}

static void test_engine(void)
{
	const char *const drafts[] = {MODEL, DRAFT};
	/* all layers on the device; then 2 and 1 of stories260K's 5 on the
	 * CPU (the head on the device, then on the CPU) */
	static const int splits[] = {0, 0, 2, 1};
	for (size_t j = 0; j < ARRAY_LEN(splits); j++) {
		size_t i = j % 2;
		static run_out oc, og;
		core_stats sc, sg;
		engine_run(kern_cpu(), 0, drafts[i], &oc, &sc);
		engine_run(G, splits[j], drafts[i], &og, &sg);
		for (int r = 0; r < 16; r++)
			CHECK_(oc.tok[r][0] == 40 + r && og.tok[r][0] == oc.tok[r][0] &&
			       !memcmp(oc.tok[r], og.tok[r], (size_t)(oc.tok[r][0] + 1) * 4),
			       "engine (draft %s, %d layers on the CPU): request %d differs from the CPU run (%d vs %d "
			       "tokens)", drafts[i], splits[j], r, og.tok[r][0], oc.tok[r][0]);
		CHECK_(sg.cached_tokens >= 15 * 32, "engine: prefix hits %lld tokens", (long long)sg.cached_tokens);
		/* the random draft is rarely right; the target as its own draft always is */
		CHECK_(sg.spec_steps > 0 && (i > 0 || sg.spec_accepted > 0), "engine (draft %s): %lld draft steps, "
		       "%lld tokens accepted", drafts[i], (long long)sg.spec_steps, (long long)sg.spec_accepted);
	}
}

/* ---- tensors off 16-byte boundaries ---- */

static int realign_fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	const gguf_file *f = ctx;
	static const uint8_t pad[4];
	if (i == 0)
		return gguf_out_write(out, pad, sizeof pad, e);
	const gguf_tensor *t = gguf_tensor_at(f, i - 1);
	return gguf_out_write(out, t->data, (size_t)t->n_bytes, e);
}

/* Writes src again as dst with general.alignment 4 and a 4-byte tensor in
 * front, so the tensors after it start 4 bytes off where they were. Returns
 * how many then start off a 16-byte boundary, or -1. */
static int realign(const char *src, const char *dst)
{
	err e = {0};
	gguf_file *f = gguf_open(src, &e), *g = NULL;
	gguf_writer *w = gguf_writer_new();
	int rc = f ? 0 : -1;
	for (int64_t i = 0; f && i < gguf_n_kv(f); i++)
		gguf_writer_copy_kv(w, f, i);
	gguf_writer_set_u32(w, "general.alignment", 4);
	int64_t ne_pad[1] = {2};
	if (!rc && gguf_writer_add_tensor(w, "pagechat.pad", DT_F16, 1, ne_pad, &e) < 0)
		rc = -1;
	for (int64_t i = 0; !rc && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e) < 0)
			rc = -1;
	}
	if (!rc)
		rc = gguf_writer_write(w, dst, realign_fill, f, &e);
	if (!rc && (g = gguf_open(dst, &e)))
		for (int64_t i = 0; i < gguf_n_tensors(g); i++)
			rc += gguf_tensor_at(g, i)->offset % 16 != 0;
	CHECK_(rc >= 0 && g, "realign %s: %s", src, e.msg);
	gguf_close(g);
	gguf_close(f);
	gguf_writer_free(w);
	return g ? rc : -1;
}

static void test_misaligned(void)
{
	static const char *const src[] = {"build/models/rand-256x4-f32.gguf", "build/models/rand-256x4-q8_0.gguf",
					  "build/models/rand-256x4-q4_k.gguf"};
	int32_t prompt[8] = {1, 403, 407, 261, 378, 429, 261, 263};
	for (size_t i = 0; i < ARRAY_LEN(src); i++) {
		char dst[256];
		snprintf(dst, sizeof dst, "build/models/align4-%zu.gguf", i);
		int off = realign(src[i], dst);
		CHECK_(off > 0, "%s: %d tensors off a 16-byte boundary (want some)", dst, off);
		if (off > 0)
			compare_model(dst, prompt, 8, KV_F32, KV_F16);
		remove(dst);
	}
}

/* ---- device failures (fake device: injected) ---- */

static void test_failure(void)
{
	if (!fake_device)
		return;
	err e = {0};
	llama_model *m = open_on(MODEL, G);
	const llama_hparams *hp = m ? llama_hp(m) : NULL;
	float *logits = hp ? xmalloc((size_t)hp->n_vocab * 4) : NULL;
	kv_pool_params pp = {.n_layers = hp ? hp->n_layers : 1, .kv_dim = hp ? hp->n_kv_heads * hp->head_dim : 8,
			     .head_dim = hp ? hp->head_dim : 8, .k_type = KV_F16, .v_type = KV_F16, .block_tokens = 16,
			     .n_blocks = 4, .kern = G};
	kv_pool *pool = m ? kv_pool_new(&pp, &e) : NULL;
	if (pool) {
		kv_seq s;
		kv_seq_init(&s);
		CHECK(kv_seq_reserve(pool, &s, 1) == 0);
		int32_t tok = 1, pos = 0, row = 0, seq = 0;
		int64_t slot = kv_seq_slot(pool, &s, 0);
		const int32_t *tables[1] = {s.blocks};
		llama_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos, .slot = &slot, .seq = &seq, .n_seqs = 1,
				 .block_table = tables, .n_table = &s.n_blocks, .n_out = 1, .out_rows = &row};
		kv_view kv = kv_pool_view(pool);
		CHECK(llama_forward(m, &b, &kv, logits, &e) == 0);
		kern_fake_fail("fake-device: injected failure");
		CHECK_(llama_forward(m, &b, &kv, logits, &e) == -1 && strstr(e.msg, "injected"),
		       "forward on a failed device: %s", e.msg);
		e.msg[0] = 0;
		CHECK_(!llama_open(MODEL, &(llama_params){.max_tokens = 16, .kern = G}, &e) &&
		       strstr(e.msg, "injected") && strstr(e.msg, "stories260K"),
		       "loading on a failed device: %s", e.msg);
		kern_fake_fail(NULL);
		kv_seq_release(pool, &s);
	}
	kv_pool_free(pool);
	free(logits);
	llama_free(m);
}

/* PAGECHAT_BIG_MODEL=FILE (tools/gpu_check.sh: a random 8B-shaped model):
 * BIG_N positions' logits, in one chunk (a prefill: more rows than the
 * matrix-vector kernels take, so the matmuls go through cuBLAS) and one at a
 * time (decode: the matrix-vector kernels), against the CPU,
 * within 2e-2 of the logits' range (the CPU's int8 activations for quantized
 * weights differ more in absolute terms at this size), with every layer on
 * the device and with the last half there (partial offload). */
#define BIG_N 40
static void test_big_model(void)
{
	const char *path = getenv("PAGECHAT_BIG_MODEL");
	if (!path || !*path)
		return;
	llama_model *mc = open_on(path, kern_cpu()), *mg = NULL;
	if (!mc)
		return;
	int L = llama_hp(mc)->n_layers, n_vocab = llama_hp(mc)->n_vocab;
	int32_t ids[BIG_N];
	for (int i = 0; i < BIG_N; i++)
		ids[i] = (int32_t)((i * 7919 + 13) % n_vocab);
	float *lc = xmalloc((size_t)BIG_N * n_vocab * 4), *lg = xmalloc((size_t)BIG_N * n_vocab * 4);
	CHECK(all_logits(mc, ids, BIG_N, BIG_N, KV_F16, KV_F16, lc) == 0);
	/* all layers on the device, then the last half (partial offload) */
	for (int split = 0; split < 2 && (mg = open_split(path, G, split ? L / 2 : 0, false)); split++) {
		int n_dev = L - llama_host_layers(mg);
		for (int chunk = BIG_N; chunk >= 1; chunk = chunk > 1 ? 1 : 0) {
			CHECK(all_logits(mg, ids, BIG_N, chunk, KV_F16, KV_F16, lg) == 0);
			double d = 0, lo = INFINITY, hi = -INFINITY;
			for (size_t i = 0; i < (size_t)BIG_N * n_vocab; i++) {
				d = fmax(d, fabs((double)lc[i] - lg[i]));
				lo = fmin(lo, lc[i]);
				hi = fmax(hi, lc[i]);
			}
			CHECK_(isfinite(d) && d <= 2e-2 * (hi - lo), "%s chunk %d, %d of %d layers on the device: logits "
			       "differ by %g (range %g..%g)", path, chunk, n_dev, L, d, lo, hi);
			fprintf(stderr, "%s chunk %d, %d of %d layers on the device: max logit difference %g, range "
				"%g..%g\n", path, chunk, n_dev, L, d, lo, hi);
		}
		llama_free(mg);
	}
	free(lc);
	free(lg);
	llama_free(mc);
}

/* --big FILE: the 8B-shaped logits alone (tools/gpu_check.sh, second call);
 * --split: partial offload alone (make test-offload). */
int main(int argc, char **argv)
{
	need_cuda(__FILE__);
	if (argc == 3 && !strcmp(argv[1], "--big")) {
		setenv("PAGECHAT_BIG_MODEL", argv[2], 1);
		test_big_model();
		return TEST_DONE();
	}
	if (argc == 2 && !strcmp(argv[1], "--split")) {
		test_split();
		return TEST_DONE();
	}
	test_models();
	test_greedy();
	test_engine();
	test_split();
	test_misaligned();
	test_failure();
	test_big_model();
	kern_fake_counts fc = kern_fake_get_counts();
	if (fake_device)
		CHECK_(fc.recorded > 0 && fc.replayed > fc.recorded && !fc.misuse,
		       "recorded steps: %d recorded, %d replayed, %d buffer calls while recording", fc.recorded,
		       fc.replayed, fc.misuse);
	return TEST_DONE();
}
