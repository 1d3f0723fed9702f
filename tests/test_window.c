/* tests/test_window.c: sliding windows in the paged pool (kv/pool.h, issue
 * #38 parts 2 and 3).
 *
 * The pool's W parts on synthetic tables (no model): release as a window
 * passes, forks and copy-on-write keeping each entry's kind, W parts taken
 * from blocks no table needs, what a prefix hit may take, the bytes of a
 * block without its W part, and kv_pool_check after every operation.
 *
 * Then a random-weight Gemma-3-shaped model (6 layers, layer 5 global, the
 * others windowed by 512) over a 4,096-token sequence: its logits at every
 * position, through the runner's private pool with the windowed layout, must
 * equal bit for bit those of the same model over a pool that keeps every
 * layer's blocks (the layout tests/test_arch.c holds to a full-attention-
 * with-mask reference in double), with chunk cuts inside and across the
 * window and a stretch decoded token by token; and the pool must hold at
 * most 35% of the layer-blocks full attention in every layer would.
 *
 * Last, the engine on that model: answers equal gen_run's alone with prompts
 * past the window, chunked, a second turn reusing a cached prefix longer
 * than the window, n > 1 (forks), preemption (recompute and swap through
 * tier 1) and beams, with core_check after every step. */
#include "engine/core.h"
#include "engine/gen.h"
#include "engine/runner.h"
#include "kv/pool.h"
#include "models/llama.h"
#include "tests/rand_model.h"
#include "tests/run.h"
#include "tests/test.h"
#include "ui/poolmap.h"

#include <string.h>
#include <sys/stat.h>

enum { BT = 4, WIN = 8, NL = 6 };

static const uint8_t win_mask[] = {0x1f}; /* layers 0..4 windowed, 5 global */

static kv_pool *windowed_pool(int64_t n_blocks, int64_t w_blocks)
{
	kv_pool_params p = {.n_layers = NL, .kv_dim = 4, .block_tokens = BT, .n_blocks = n_blocks,
			    .win_layers = win_mask, .window = WIN, .w_blocks = w_blocks};
	err e = {0};
	kv_pool *pool = kv_pool_new(&p, &e);
	CHECK_(pool != NULL, "%s", e.msg);
	return pool;
}

static void check_pool(const kv_pool *pool, const kv_seq *const *seqs, int n, const char *when)
{
	err e = {0};
	CHECK_(kv_pool_check(pool, seqs, n, NULL, &e), "%s: %s", when, e.msg);
}

/* Block b's bytes with every float of layer l's rows equal to l * 100 + tag. */
static void fill_block(kv_pool *pool, int32_t b, float tag)
{
	size_t n = (size_t)kv_pool_bytes_per_block(pool) / sizeof(float), per = n / NL;
	float *x = xmalloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(i / per) * 100 + tag;
	kv_pool_write_block(pool, b, x);
	free(x);
}

/* Whether block b reads back as fill_block(tag) wrote it, with zeros in the
 * windowed layers when without_w. */
static bool block_is(kv_pool *pool, int32_t b, float tag, bool without_w)
{
	size_t n = (size_t)kv_pool_bytes_per_block(pool) / sizeof(float), per = n / NL;
	float *x = xmalloc(n * sizeof *x);
	kv_pool_read_block(pool, b, x);
	bool ok = true;
	for (size_t i = 0; i < n; i++) {
		size_t l = i / per;
		ok = ok && x[i] == (without_w && l < 5 ? 0.0f : (float)l * 100 + tag);
	}
	free(x);
	return ok;
}

static void test_release(void)
{
	kv_pool *pool = windowed_pool(16, 8);
	if (!pool)
		return;
	kv_seq a;
	kv_seq_init(&a);
	const kv_seq *seqs[2] = {&a};
	CHECK_EQ_INT(kv_pool_n_free(pool), 8);            /* bounded by the W parts */
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 24), 0);    /* 6 blocks, each with its W part */
	a.n_tokens = 24;
	for (int j = 0; j < 6; j++)
		fill_block(pool, a.blocks[j], (float)j);
	check_pool(pool, seqs, 1, "reserved");
	CHECK_EQ_INT(kv_pool_n_free(pool), 2);
	/* the next query at 24 sees keys 17..24: blocks 0..3 are passed */
	CHECK_EQ_INT(kv_pool_window_first(pool, 24), 4);
	CHECK_EQ_INT(kv_seq_window_release(pool, &a, 24), 4);
	CHECK_EQ_INT(a.w_lo, 4);
	CHECK_EQ_INT(kv_seq_window_release(pool, &a, 24), 0);
	check_pool(pool, seqs, 1, "released");
	kv_pool_stats st = kv_pool_get_stats(pool, seqs, 1);
	CHECK_EQ_INT(st.n_win_held, 2);
	CHECK_EQ_INT(st.n_win_freed, 4);
	CHECK_EQ_INT(st.n_win_layers, 5);
	CHECK_EQ_INT(kv_pool_n_free(pool), 6);
	/* a fork shares the kinds: its W parts are the same full references */
	kv_seq b;
	kv_seq_init(&b);
	kv_seq_share(pool, &b, &a);
	seqs[1] = &b;
	CHECK_EQ_INT(b.w_lo, 4);
	CHECK_EQ_INT(kv_pool_wrc(pool, a.blocks[5]), 2);
	CHECK_EQ_INT(kv_pool_wrc(pool, a.blocks[1]), 0);
	check_pool(pool, seqs, 2, "forked");
	/* copy-on-write of the last block: b's copy has its own W rows, equal */
	CHECK_EQ_INT(kv_seq_own(pool, &b, 23), 0);
	CHECK(b.blocks[5] != a.blocks[5]);
	CHECK(block_is(pool, b.blocks[5], 5.0f, false));
	check_pool(pool, seqs, 2, "copied");
	/* five more blocks for b (W parts: 8, less a's 4 and 5 and b's copy):
	 * one brings its own, four come from a's passed blocks,
	 * released longest ago first, which lose theirs (and read zeros there) */
	CHECK_EQ_INT(kv_seq_reserve(pool, &b, 44), 0);
	check_pool(pool, seqs, 2, "grown");
	int gone = 0;
	for (int j = 0; j < 4; j++)
		gone += kv_pool_w_of(pool, a.blocks[j]) < 0;
	CHECK_EQ_INT(gone, 4);
	CHECK(block_is(pool, a.blocks[0], 0.0f, true));   /* global layer intact */
	CHECK(block_is(pool, a.blocks[4], 4.0f, false));
	CHECK_EQ_INT(kv_pool_n_free(pool), 0);
	CHECK_EQ_INT(kv_seq_reserve(pool, &b, 48), -1);   /* no W part left: wait, as for a full pool */
	/* a prefix hit may take a's blocks only where the window of its next
	 * position finds W parts: 6 blocks (position 24 sees blocks 4, 5) yes;
	 * 5 blocks (position 20 sees 3, 4) no, nor fewer, but 0 always */
	CHECK_EQ_INT(kv_pool_window_hits(pool, a.blocks, 6), 6);
	CHECK_EQ_INT(kv_pool_window_hits(pool, a.blocks, 5), 0);
	/* a table taking a's blocks as a hit: the passed ones without W parts
	 * first, as plain references */
	kv_seq c;
	kv_seq_init(&c);
	for (int j = 0; j < 6; j++) {
		kv_pool_ref(pool, a.blocks[j]);
		kv_seq_push(pool, &c, a.blocks[j]);
	}
	CHECK_EQ_INT(c.w_lo, 4);
	const kv_seq *three[3] = {&a, &b, &c};
	check_pool(pool, three, 3, "pushed");
	/* truncating and releasing give every reference back */
	CHECK_EQ_INT(kv_seq_truncate(pool, &c, 10), 3);
	CHECK_EQ_INT(c.w_lo, 3);
	check_pool(pool, three, 3, "truncated");
	kv_seq_release(pool, &c);
	kv_seq_release(pool, &b);
	check_pool(pool, seqs, 1, "b released");
	kv_seq_release(pool, &a);
	check_pool(pool, NULL, 0, "all released");
	CHECK_EQ_INT(kv_pool_n_free(pool), 8);
	st = kv_pool_get_stats(pool, NULL, 0);
	CHECK_EQ_INT(st.n_win_held, 0);
	CHECK_EQ_INT(st.n_used, 0);
	kv_pool_free(pool);
}

/* A pool without windows is as it was: no W parts, nothing to release. */
static void test_plain(void)
{
	kv_pool_params p = {.n_layers = NL, .kv_dim = 4, .block_tokens = BT, .n_blocks = 8};
	err e = {0};
	kv_pool *pool = kv_pool_new(&p, &e);
	kv_seq a;
	kv_seq_init(&a);
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 32), 0);
	CHECK_EQ_INT(kv_seq_window_release(pool, &a, 32), 0);
	CHECK_EQ_INT(kv_pool_window(pool), 0);
	CHECK_EQ_INT(kv_pool_w_of(pool, a.blocks[3]), a.blocks[3]);
	CHECK_EQ_INT(kv_pool_window_hits(pool, a.blocks, 8), 8);
	kv_pool_stats st = kv_pool_get_stats(pool, NULL, 0);
	CHECK_EQ_INT(st.n_win_layers + st.n_win_held + st.n_win_freed, 0);
	kv_seq_release(pool, &a);
	kv_pool_free(pool);
}

static void test_engine(llama_model *m);
static void test_engine_budget(llama_model *m);
static void test_engine_short_w(llama_model *m);
static void test_info(const char *path);

/* ---- the Gemma-shaped model over 4,096 tokens ---- */

enum { N_CTX = 4096, MWIN = 512, MBT = 16, VOCAB = 256, ROWS = 800 };

/* Feeds ids[0..N_CTX) through a runner in the given cuts (then one token at
 * a time), every position's logits into out[N_CTX][VOCAB]. Returns the
 * pool's figures at the end. */
static kv_pool_stats run_cuts(llama_model *m, bool kept, const int *cuts, int n_cuts, int decode_from,
			      const int32_t *ids, float *out)
{
	runner_params rp = {.model = m, .max_rows = ROWS, .pool_tokens = N_CTX, .block_tokens = MBT,
			    .windows_kept = kept};
	err e = {0};
	runner *r = runner_new(&rp, &e);
	CHECK_(r != NULL, "%s", e.msg);
	if (!r)
		return (kv_pool_stats){0};
	int at = 0;
	for (int c = 0; at < N_CTX; c++) {
		int n = c < n_cuts ? cuts[c] : at >= decode_from ? 1 : MIN(ROWS, decode_from - at);
		n = MIN(n, N_CTX - at);
		int rc = runner_append(r, 0, ids + at, n, 0, n, &e);
		CHECK_(rc == 0 && runner_run(r, &e) == 0, "at %d: %s", at, e.msg);
		for (int i = 0; i < n; i++)
			memcpy(out + (size_t)(at + i) * VOCAB, runner_logits(r, i), VOCAB * sizeof(float));
		at += n;
	}
	kv_pool_stats st = kv_pool_get_stats(runner_pool(r), NULL, 0);
	runner_free(r);
	return st;
}

static void test_gemma_4096(void)
{
	rm_spec s = {.arch = "gemma3", .n_vocab = VOCAB, .dim = 64, .n_layers = NL, .n_heads = 4, .n_kv_heads = 1,
		     .head_dim = 16, .ffn_dim = 128, .eps = 1e-6f, .rope_base = 1e6f, .tied = true,
		     .swa_window = MWIN, .swa_period = 6, .wtype = DT_F32, .seed = 38};
	const char *path = "build/models/window-gemma3.gguf";
	err e = {0};
	CHECK_(rm_write(&s, path, &e) == 0, "%s", e.msg);
	llama_model *m = llama_open(path, &(llama_params){.max_tokens = ROWS}, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (!m)
		return;
	CHECK_EQ_INT(llama_hp(m)->n_swa_layers, 5);
	int32_t *ids = xmalloc(N_CTX * sizeof *ids);
	uint64_t st = 3838;
	for (int i = 0; i < N_CTX; i++)
		ids[i] = (int32_t)(rm_next(&st) % VOCAB);
	float *want = xmalloc((size_t)N_CTX * VOCAB * sizeof *want);
	float *got = xmalloc((size_t)N_CTX * VOCAB * sizeof *got);
	/* cuts inside the window (100, 411: to 511), across its edge (2: to 513),
	 * a block's middle (37), longer than the window (700), then chunks of
	 * ROWS; the last 70 tokens one at a time (across a block and past the
	 * 4,032-token mark) */
	const int cuts[] = {100, 411, 2, 37, 700, 1, 15, 513};
	int decode_from = N_CTX - 70;
	kv_pool_stats full = run_cuts(m, true, cuts, (int)ARRAY_LEN(cuts), decode_from, ids, want);
	kv_pool_stats win = run_cuts(m, false, cuts, (int)ARRAY_LEN(cuts), decode_from, ids, got);
	int64_t differ = 0, first = -1;
	for (int64_t i = 0; i < (int64_t)N_CTX * VOCAB; i++)
		if (memcmp(&want[i], &got[i], sizeof(float)) && differ++ == 0)
			first = i / VOCAB;
	CHECK_(differ == 0, "windowed layout: %lld logits differ from the kept layout's, first at position %lld",
	       (long long)differ, (long long)first);
	/* the blocks held at the end: every block in the global layer, the
	 * window's in the windowed ones, in layer-blocks against all layers'
	 * (full attention) */
	int64_t blocks = N_CTX / MBT;
	CHECK_EQ_INT(full.n_used, blocks);
	CHECK_EQ_INT(win.n_used, blocks);
	int64_t held = win.n_used * (NL - win.n_win_layers) + win.n_win_held * win.n_win_layers;
	int64_t all = full.n_used * NL;
	double frac = (double)held / (double)all;
	printf("gemma-shaped, %d tokens, window %d, 5 of 6 layers windowed: %lld of %lld blocks keep W parts; "
	       "%lld of %lld layer-blocks held (%.1f%%); W parts %lld, pool %lld bytes against %lld\n", N_CTX, MWIN,
	       (long long)win.n_win_held, (long long)win.n_used, (long long)held, (long long)all, 100 * frac, (long long)win.w_blocks,
	       (long long)win.host_bytes, (long long)full.host_bytes);
	CHECK_(frac <= 0.35, "held %.3f of full attention's blocks (want <= 0.35)", frac);
	CHECK(win.n_win_held <= MWIN / MBT + 1);
	/* the storage itself: the global layer's rows for every block, the
	 * windowed layers' for w_blocks only */
	int64_t per_layer_block = full.host_bytes / (blocks * NL);
	CHECK_EQ_INT(win.host_bytes, (blocks * (NL - 5) + win.w_blocks * 5) * per_layer_block);
	CHECK(win.w_blocks < blocks);
	/* the device paths (stage_batch's windowed tables, a split pool's
	 * layout): on the fake device, whole and with 3 layers on the CPU, the
	 * same bits (its operations are the CPU's) */
	for (int host = 0; host <= 3; host += 3) {
		llama_model *d = llama_open(path, &(llama_params){.kern = kern_fake(), .max_tokens = ROWS,
								   .host_layers = host}, &e);
		CHECK_(d != NULL, "%s", e.msg);
		if (!d)
			continue;
		kv_pool_stats ds = run_cuts(d, false, cuts, (int)ARRAY_LEN(cuts), decode_from, ids, got);
		CHECK_(!memcmp(want, got, (size_t)N_CTX * VOCAB * sizeof *got),
		       "fake device, %d layers on the CPU: the logits differ", host);
		CHECK_EQ_INT(ds.host_bytes + ds.dev_bytes, win.host_bytes);
		CHECK_EQ_INT(ds.dev_layers, NL - host);
		llama_free(d);
	}
	free(ids);
	free(want);
	free(got);
	test_engine(m);
	test_engine_budget(m);
	test_engine_short_w(m);
	test_info(path);
	llama_free(m);
}

/* ---- the engine ---- */

enum { MAX_OUT = 160, N_REQ = 8 };

typedef struct result {
	int32_t ids[2][MAX_OUT];
	int n_ids[2], n_finish[2];
	core_req_metrics m[2];
	char error[400];         /* the last error's text */
} result;

static result res[N_REQ];

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	result *r = &res[ev->req];
	if (ev->index > 1)
		return;
	if (ev->kind == CORE_EV_TOKEN && r->n_ids[ev->index] < MAX_OUT)
		r->ids[ev->index][r->n_ids[ev->index]++] = ev->token;
	else if (ev->kind != CORE_EV_TOKEN) {
		r->n_finish[ev->index]++;
		r->m[ev->index] = ev->m;
		if (ev->finish == FIN_ERROR && ev->text)
			snprintf(r->error, sizeof r->error, "%.*s", (int)ev->text_len, ev->text);
	}
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

static void reference(llama_model *m, const int32_t *prompt, int n, int n_predict, int32_t *out)
{
	gen_params gp = {.samp = samp_default_params(), .n_predict = n_predict, .n_ctx = N_CTX, .block_tokens = MBT};
	out[0] = 0;
	if (n_predict > MAX_OUT) {
		CHECK_(false, "reference: %d tokens, at most %d", n_predict, MAX_OUT);
		return;
	}
	gp.samp.temp = 0;
	gen_stats st;
	err e = {0};
	CHECK_(gen_run(m, NULL, prompt, n, &gp, collect, out, &st, &e) == 0, "%s", e.msg);
}

static void run_all(core *c)
{
	err e = {0};
	while (!core_idle(c)) {
		int n = core_step(c, &e);
		CHECK_(n >= 0, "step: %s", e.msg);
		if (n < 0)
			break;
	}
	CHECK_(core_check(c, &e), "%s", e.msg);
}

static void submit(core *c, int64_t id, const int32_t *prompt, int n, int max_tokens, int n_compl, int beams)
{
	memset(&res[id], 0, sizeof res[id]);
	core_request r = {.id = id, .conv = (int)id, .prompt = prompt, .n_prompt = n, .samp = samp_default_params(),
			  .max_tokens = max_tokens, .n = n_compl, .beams = beams};
	r.samp.temp = 0;
	err e = {0};
	CHECK_(core_submit(c, &r, &e) == 0, "%s", e.msg);
}

static bool same(const result *r, int index, const int32_t *ref)
{
	return r->n_finish[index] == 1 && r->n_ids[index] == ref[0] &&
	       !memcmp(r->ids[index], ref + 1, (size_t)ref[0] * sizeof *ref);
}

/* The pool panel's (and /snapshot's) lines for the figures st. */
static void test_panel(const core_stats *st)
{
	link_snapshot snap = {.st = *st, .n_blocks = st->blocks_total, .block_tokens = MBT, .n_ctx = N_CTX};
	poolmap_figures f;
	poolmap_format(&snap, NULL, &f);
	char want[2][96];
	int64_t used = st->blocks_win_freed + st->blocks_win_held;
	snprintf(want[0], sizeof want[0], "window 512 tok: %lld blocks freed in 5/6 layers",
		 (long long)st->blocks_win_freed);
	snprintf(want[1], sizeof want[1], "K/V held %.1f%% of full attention's",
		 100.0 * (double)(used + 5 * st->blocks_win_held) / (double)(6 * used));
	for (int k = 0; k < 2; k++) {
		bool found = false;
		for (int i = 0; i < f.n; i++)
			found |= !strcmp(f.line[i], want[k]);
		CHECK_(found, "the pool panel lacks '%s'", want[k]);
	}
}

/* pagechat info states the K/V bytes per token with and without the window:
 * f16 rows of 1 KV head x 16 = 32 bytes, K and V, 6 layers (1 global). */
static void test_info(const char *path)
{
	run_result *r = xmalloc(sizeof *r);
	char args[160];
	snprintf(args, sizeof args, "info %s", path);
	run_pagechat(r, args);
	const char *want = "KV f16 with the sliding window: 384 bytes/token without the window (every layer), "
			   "64 bytes/token with it (the 1 global layer; the 5 windowed ones keep 512 tokens: 160 KiB "
			   "per sequence); for 4096 tokens 416 KiB instead of 1.5 MiB (27.1%)";
	CHECK_(r->status == 0 && strstr(r->out, want), "info lacks '%s':\n%s%s", want, r->out, r->errout);
	run_pagechat(r, "info ../shared/models/stories260K.gguf");
	CHECK_(r->status == 0 && !strstr(r->out, "sliding window"), "%s", r->out);
	free(r);
}

static void test_engine(llama_model *m)
{
	enum { NA = 1000, NB = 1300, GEN = 24 };
	static int32_t a[NB + GEN], ref_a[GEN + 1], ref_b[GEN + 1], ref_c[MAX_OUT + 1];
	uint64_t st = 77;
	for (int i = 0; i < NB + GEN; i++)
		a[i] = (int32_t)(rm_next(&st) % VOCAB);
	reference(m, a, NA, GEN, ref_a);
	core_params p = {.model = m, .block_tokens = MBT, .pool_blocks = 160, .step_tokens = 192, .check = true};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	/* a prompt twice the window, in chunks of 192; while it decodes, the
	 * figures count its blocks that no window reaches */
	submit(c, 0, a, NA, GEN, 1, 0);
	while (!core_idle(c) && res[0].n_ids[0] < 5)
		CHECK_(core_step(c, &e) >= 0, "%s", e.msg);
	core_stats cs;
	core_get_stats(c, &cs);
	int64_t done = NA + res[0].n_ids[0] - 1, blocks = (done + MBT - 1) / MBT, first = (done + 1 - MWIN) / MBT;
	CHECK_EQ_INT(cs.blocks_win_freed, first);
	CHECK_EQ_INT(cs.blocks_win_held, blocks - first);
	CHECK_EQ_INT(cs.window, MWIN);
	CHECK_EQ_INT(cs.win_layers, 5);
	test_panel(&cs);
	run_all(c);
	CHECK_(same(&res[0], 0, ref_a), "the engine's answer differs from gen_run's");
	/* the second turn: the first's prompt and answer, then more; its prefix,
	 * longer than the window, comes from the cache */
	memcpy(a + NA, ref_a + 1, GEN * sizeof *a);
	reference(m, a, NB, GEN, ref_b);
	submit(c, 1, a, NB, GEN, 1, 0);
	run_all(c);
	CHECK_(same(&res[1], 0, ref_b), "second turn: the answer differs from gen_run's");
	CHECK_(res[1].m[0].n_cached >= NA + GEN - MBT && res[1].m[0].n_cached > MWIN,
	       "second turn: %d tokens cached", res[1].m[0].n_cached);
	core_free(c);
	/* two completions each (forks sharing every block) of two requests
	 * past the window in a pool too small for all four answers: preemption,
	 * recomputing, then swapping through tier 1; then beams */
	enum { NC = 600, GC = 60 };
	static int32_t b2[NC], ref_a2[GC + 1];
	uint64_t st2 = 99;
	for (int i = 0; i < NC; i++)
		b2[i] = (int32_t)(rm_next(&st2) % VOCAB);
	reference(m, a, NC, GC, ref_a2);
	reference(m, b2, NC, GC, ref_c);
	for (int swap = 0; swap <= 1; swap++) {
		core_params q = p;
		q.pool_blocks = 84;
		q.pool_wparts = 84; /* blocks run short here; W parts: test_engine_short_w */
		q.host_blocks = swap ? 200 : 0;
		q.preempt = swap ? PREEMPT_SWAP : PREEMPT_RECOMPUTE;
		c = core_new(&q, on_event, NULL, &e);
		CHECK_(c != NULL, "%s", e.msg);
		if (!c)
			return;
		submit(c, 2, a, NC, GC, 2, 0);
		submit(c, 3, b2, NC, GC, 2, 0);
		run_all(c);
		for (int i = 0; i < 2; i++)
			CHECK_(same(&res[2], i, ref_a2) && same(&res[3], i, ref_c),
			       "%s: completion %d differs from gen_run's", swap ? "swap" : "recompute", i);
		core_stats cs;
		core_get_stats(c, &cs);
		CHECK_(cs.preemptions > 0, "%s: no preemption", swap ? "swap" : "recompute");
		CHECK(!swap || cs.swapped_in > 0);
		submit(c, 4, b2, NC, 8, 1, 2);
		run_all(c);
		CHECK_EQ_INT(res[4].n_finish[0], 1);
		core_free(c);
	}
}

/* ---- the engine's pool split between blocks and W parts ---- */

enum { LONG = 4000, LGEN = 40 };

/* Runs two conversations of LONG + LGEN tokens at once on an engine with
 * pool parameters q; their answers to out[2][LGEN + 1] (a count first), the
 * figures to st. */
static void run_long_pair(const core_params *q, const int32_t *const prompts[2], int32_t out[2][LGEN + 1],
			  core_stats *st)
{
	err e = {0};
	core *c = core_new(q, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	for (int k = 0; k < 2; k++)
		submit(c, 5 + k, prompts[k], LONG, LGEN, 1, 0);
	run_all(c);
	for (int k = 0; k < 2; k++) {
		result *r = &res[5 + k];
		CHECK_(r->n_finish[0] == 1 && !r->error[0], "conversation %d: %s", k, r->error);
		out[k][0] = r->n_ids[0];
		memcpy(out[k] + 1, r->ids[0], (size_t)r->n_ids[0] * sizeof(int32_t));
	}
	core_get_stats(c, st);
	core_free(c);
}

/* A byte budget that holds 200 blocks with every layer's rows (one W part
 * per block: two 4,040-token conversations need 506, one alone 253) gets
 * W parts for two windows and a chunk, and blocks for the rest: both
 * conversations run at once to the same tokens as on a pool that keeps
 * every layer's rows for 600 blocks (and as gen_run alone), and the pool's
 * bytes stay within the budget. */
static void test_engine_budget(llama_model *m)
{
	static int32_t p0[LONG], p1[LONG], want[2][LGEN + 1], got[2][LGEN + 1], ref[LGEN + 1];
	uint64_t x = 4242;
	for (int i = 0; i < LONG; i++) {
		p0[i] = (int32_t)(rm_next(&x) % VOCAB);
		p1[i] = (int32_t)(rm_next(&x) % VOCAB);
	}
	const int32_t *const prompts[2] = {p0, p1};
	int64_t bpb = MBT * llama_kv_token_bytes(llama_hp(m), KV_F32, KV_F32), budget = 200 * bpb;
	core_params big = {.model = m, .block_tokens = MBT, .pool_blocks = 600, .pool_wparts = 600,
			   .step_tokens = 256, .max_running = 2, .check = true};
	core_stats st;
	run_long_pair(&big, prompts, want, &st);
	CHECK_EQ_INT(st.blocks_total, 600);
	core_params q = {.model = m, .block_tokens = MBT, .pool_bytes = budget, .step_tokens = 256, .max_running = 2,
			 .check = true};
	run_long_pair(&q, prompts, got, &st);
	for (int k = 0; k < 2; k++)
		CHECK_(got[k][0] == LGEN && !memcmp(got[k], want[k], sizeof want[k]),
		       "conversation %d: %d tokens, differing from the full-rows pool's", k, got[k][0]);
	reference(m, p0, LONG, LGEN, ref);
	CHECK_(!memcmp(ref, want[0], sizeof ref), "the full-rows pool's answer differs from gen_run's");
	/* the split: the rule's W parts (2 spans of 35 and a 256-token chunk,
	 * a quarter more, under half of 200), the blocks what they leave */
	int64_t per_layer = bpb / NL, w = MIN((2 * 35 + 16) + (2 * 35 + 16) / 4, 200 / 2);
	int64_t blocks = (budget - w * 5 * per_layer) / per_layer;
	printf("engine pool of %lld bytes: %lld blocks and %lld W parts (one W part per block: %lld blocks); "
	       "%lld bytes used\n", (long long)budget, (long long)st.blocks_total, (long long)w, (long long)(budget / bpb),
	       (long long)(st.kv_host_bytes + st.kv_dev_bytes));
	CHECK_EQ_INT(st.blocks_total, blocks);
	CHECK(st.blocks_total >= 2 * ((LONG + LGEN + MBT - 1) / MBT));
	CHECK_EQ_INT(st.kv_host_bytes + st.kv_dev_bytes, (blocks + 5 * w) * per_layer);
	CHECK(st.kv_host_bytes + st.kv_dev_bytes <= budget);
	CHECK(st.preemptions == 0);
	/* every budget from one block's bytes up: the pool's bytes never pass
	 * it, and blocks never fall below one W part per block */
	for (int64_t b = bpb; b <= 400 * bpb; b += 7 * bpb + 1234) {
		core_params r = q;
		r.pool_bytes = b;
		err e = {0};
		core *c = core_new(&r, on_event, NULL, &e);
		CHECK_(c != NULL, "budget %lld: %s", (long long)b, e.msg);
		if (!c)
			continue;
		core_get_stats(c, &st);
		CHECK_(st.kv_host_bytes + st.kv_dev_bytes <= b && st.blocks_total >= b / bpb,
		       "budget %lld: %lld bytes, %lld blocks", (long long)b, (long long)(st.kv_host_bytes + st.kv_dev_bytes),
		       (long long)st.blocks_total);
		core_free(c);
	}
}

/* W parts scarce (pool_wparts): two completions of a prompt past the
 * window hold a window each once their tokens part, more than the pool's
 * 40 W parts: chunks shrink, the newer completion is preempted and comes
 * back, and both answers equal gen_run's. With 20 W parts, fewer than one
 * window needs, a long prompt fails naming the fix while a short one runs. */
static void test_engine_short_w(llama_model *m)
{
	enum { NP = 1200, G = 150 };
	static int32_t pr[NP], ref[G + 1];
	uint64_t x = 777;
	for (int i = 0; i < NP; i++)
		pr[i] = (int32_t)(rm_next(&x) % VOCAB);
	reference(m, pr, NP, G, ref);
	core_params q = {.model = m, .block_tokens = MBT, .pool_blocks = 300, .pool_wparts = 40, .step_tokens = 256,
			 .max_running = 4, .check = true};
	err e = {0};
	core *c = core_new(&q, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	/* alone: 1,200 prompt tokens in chunks of 256 would take 5 steps; the
	 * 40 W parts, 32 of them the window's once past it, allow 8 blocks a
	 * step there: 8 steps, then a decode step per token but the first */
	submit(c, 2, pr, NP, G, 1, 0);
	run_all(c);
	CHECK_(same(&res[2], 0, ref), "scarce W parts: the answer differs from gen_run's (%s)", res[2].error);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.steps, 8 + G - 1);
	CHECK_EQ_INT(st.preemptions, 0);
	/* two completions from the cached prompt */
	submit(c, 3, pr, NP, G, 2, 0);
	run_all(c);
	for (int i = 0; i < 2; i++)
		CHECK_(same(&res[3], i, ref), "scarce W parts: completion %d differs from gen_run's (%s)", i, res[3].error);
	core_get_stats(c, &st);
	CHECK_(st.preemptions > 0, "scarce W parts: no preemption");
	core_free(c);
	q.pool_wparts = 20;
	c = core_new(&q, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	submit(c, 3, pr + 1, 100, 20, 1, 0);
	submit(c, 4, pr, NP, 20, 1, 0);
	run_all(c);
	CHECK_(res[3].n_finish[0] == 1 && res[3].n_ids[0] == 20 && !res[3].error[0], "short prompt: %s", res[3].error);
	CHECK_(res[4].n_finish[0] == 1 && strstr(res[4].error, "windowed layers") && strstr(res[4].error, "--pool-blocks"),
	       "long prompt with 20 W parts: '%s'", res[4].error);
	core_free(c);
}

int main(void)
{
	mkdir("build/models", 0755);
	test_release();
	test_plain();
	test_gemma_4096();
	return TEST_DONE();
}
