/* tests/test_spec.c: speculative decoding. The rejection arithmetic on
 * hand-made distributions; greedy output identical to the engine without a
 * draft (and to gen_run, the one-request reference) for every kind of draft;
 * acceptance figures at the extremes; the decode steps timed with and
 * without the draft (the panel's speed-up) by the counts they must have. (The sampled output distribution is
 * tested in test_spec_dist.c.) */
#include "engine/core.h"
#include "engine/gen.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define DRAFT "build/models/rand-draft.gguf"
#define SPM_DRAFT "build/models/rand-spm-vocab.gguf"

static llama_model *target, *rand_draft, *self_draft;
static tok *tk;

/* ---- the arithmetic ---- */

static void test_rejection_arithmetic(void)
{
	CHECK_NEAR(samp_accept_prob(0.2f, 0.5f), 0.4, 1e-7);
	CHECK_NEAR(samp_accept_prob(0.6f, 0.5f), 1.0, 0);
	CHECK_NEAR(samp_accept_prob(0.0f, 0.5f), 0.0, 0);
	CHECK_NEAR(samp_accept_prob(0.3f, 0.0f), 1.0, 0);
	float p[4] = {0.5f, 0.25f, 0.25f, 0.0f}, q[4] = {0.25f, 0.5f, 0.0f, 0.25f}, r[4];
	CHECK(samp_residual(p, q, -1, 4, r));
	/* max(0, p - q) = {0.25, 0, 0.25, 0} -> {0.5, 0, 0.5, 0} */
	CHECK_NEAR(r[0], 0.5, 1e-7);
	CHECK_NEAR(r[1], 0.0, 0);
	CHECK_NEAR(r[2], 0.5, 1e-7);
	CHECK_NEAR(r[3], 0.0, 0);
	/* a one-hot q removes that token and renormalises */
	CHECK(samp_residual(p, NULL, 0, 4, r));
	CHECK_NEAR(r[0], 0.0, 0);
	CHECK_NEAR(r[1], 0.5, 1e-7);
	CHECK_NEAR(r[2], 0.5, 1e-7);
	/* p == q: nothing left, p is returned */
	CHECK(!samp_residual(p, p, -1, 4, r));
	CHECK(!memcmp(r, p, sizeof p));
	/* the combined rule gives p exactly: P(x) = q(x) min(1, p/q) + P(reject) r(x) */
	double reject = 0;
	for (int i = 0; i < 4; i++)
		reject += q[i] * (1 - samp_accept_prob(p[i], q[i]));
	samp_residual(p, q, -1, 4, r);
	for (int i = 0; i < 4; i++)
		CHECK_NEAR(q[i] * samp_accept_prob(p[i], q[i]) + reject * r[i], p[i], 1e-7);
}

/* ---- engine runs ---- */

static void run(core *c)
{
	err e = {0};
	while (!core_idle(c))
		if (core_step(c, &e) < 0) {
			CHECK_(0, "%s", e.msg);
			return;
		}
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *o = ctx;
	o[++o[0]] = id;
	return false;
}

/* Collects every token of requests 0..15 into ctx ([16][130], [0] = count). */
static void on_tok(void *ctx, const core_event *ev)
{
	int32_t (*got)[130] = ctx;
	if (ev->kind == CORE_EV_TOKEN && got[ev->req][0] < 129)
		got[ev->req][++got[ev->req][0]] = ev->token;
}

/* 16 concurrent greedy requests with drafts equal gen_run alone. */
static void test_greedy_exact(const char *name, enum core_draft kind, llama_model *draft, int k,
			      bool adaptive, double min_rate, double max_rate)
{
	static int32_t prompts[16][40], ref[16][130];
	int n_prompt[16];
	static const char *const texts[] = {"Once upon a time", "Lily and Tom went to the park",
					    "The cat", "One day, a little dog saw a ball"};
	samp_params sp = samp_default_params();
	sp.temp = 0;
	static int32_t got[16][130];
	for (int i = 0; i < 16; i++) {
		char s[128];
		snprintf(s, sizeof s, "%s%s", texts[i % 4], i >= 4 ? (i >= 8 ? ", and" : ".") : "");
		n_prompt[i] = tok_encode(tk, s, strlen(s), TOK_ADD_BOS, prompts[i], 40);
		gen_params gp = {.samp = sp, .n_predict = 30 + 6 * i, .n_ctx = 2048, .block_tokens = 16};
		gen_stats st;
		err e = {0};
		ref[i][0] = 0;
		CHECK(gen_run(target, tk, prompts[i], n_prompt[i], &gp, collect, ref[i], &st, &e) == 0);
	}
	core_params p = {.model = target, .tok = tk, .pool_blocks = 2048, .block_tokens = 16,
			 .step_tokens = 512, .max_running = 64, .check = true, .draft_kind = kind,
			 .draft = draft, .draft_tok = tk, .draft_k = k, .draft_adaptive = adaptive};
	err e = {0};
	memset(got, 0, sizeof got);
	core *c = core_new(&p, on_tok, got, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	for (int i = 0; i < 16; i++) {
		core_request r = {.id = i, .prompt = prompts[i], .n_prompt = n_prompt[i], .samp = sp,
				  .max_tokens = 30 + 6 * i, .n = 1};
		CHECK(core_submit(c, &r, &e) == 0);
	}
	run(c);
	for (int i = 0; i < 16; i++)
		CHECK_(got[i][0] == ref[i][0] && !memcmp(got[i] + 1, ref[i] + 1, (size_t)ref[i][0] * 4),
		       "%s: request %d differs from the no-draft reference (%d vs %d tokens)", name, i,
		       got[i][0], ref[i][0]);
	core_stats st;
	core_get_stats(c, &st);
	double rate = (double)st.spec_accepted / (double)MAX(1, st.spec_proposed);
	CHECK_(st.spec_steps > 0 && rate >= min_rate && rate <= max_rate,
	       "%s: acceptance %.3f (%lld/%lld) outside [%g, %g]", name, rate, (long long)st.spec_accepted,
	       (long long)st.spec_proposed, min_rate, max_rate);
	CHECK_(core_check(c, &e), "%s", e.msg);
	core_free(c);
}

/* The decode steps' timings (core_params.draft_probe): one greedy request
 * whose decode steps go one in `probe` without the draft. The tokens stay
 * those of no draft; every token but the prefill's first is counted in a
 * drafted or a plain decode step, a plain one takes one token, and at most
 * probe - 1 drafted steps come between two plain ones. */
static void test_probe(const char *name, llama_model *draft, int probe)
{
	int32_t prompt[40], ref[130] = {0}, got[16][130];
	const char *text = "Lily and Tom went to the park";
	int n_prompt = tok_encode(tk, text, strlen(text), TOK_ADD_BOS, prompt, 40);
	samp_params sp = samp_default_params();
	sp.temp = 0;
	gen_params gp = {.samp = sp, .n_predict = 100, .n_ctx = 2048, .block_tokens = 16};
	gen_stats gs;
	err e = {0};
	CHECK(gen_run(target, tk, prompt, n_prompt, &gp, collect, ref, &gs, &e) == 0);
	core_params p = {.model = target, .tok = tk, .pool_blocks = 256, .block_tokens = 16, .check = true,
			 .draft_kind = DRAFT_MODEL, .draft = draft, .draft_tok = tk, .draft_k = 4,
			 .draft_probe = probe};
	memset(got, 0, sizeof got);
	core *c = core_new(&p, on_tok, got, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	core_request r = {.id = 0, .prompt = prompt, .n_prompt = n_prompt, .samp = sp, .max_tokens = 100, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run(c);
	CHECK_(got[0][0] == ref[0] && !memcmp(got[0] + 1, ref + 1, (size_t)ref[0] * 4), "%s: differs from no draft",
	       name);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_(st.plain_dec_steps > 0 && st.spec_dec_steps > 0 && st.plain_dec_us > 0 && st.spec_dec_us > 0,
	       "%s: %lld plain, %lld drafted steps", name, (long long)st.plain_dec_steps,
	       (long long)st.spec_dec_steps);
	CHECK_EQ_INT(st.plain_dec_tokens + st.spec_dec_tokens, st.generated_tokens - 1);
	CHECK_EQ_INT(st.plain_dec_tokens, st.plain_dec_steps);
	CHECK_EQ_INT(st.spec_dec_steps, st.spec_steps);
	CHECK_(st.spec_dec_steps <= (probe - 1) * st.plain_dec_steps, "%s: %lld drafted steps, %lld plain", name,
	       (long long)st.spec_dec_steps, (long long)st.plain_dec_steps);
	core_free(c);
}

static void test_cli(void)
{
	run_result *r = xcalloc(1, sizeof *r);
	run_pagechat(r, "generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 40 --ids");
	char want[4096];
	size_t n_want = MIN(strlen(r->out), sizeof want - 1);
	memcpy(want, r->out, n_want);
	want[n_want] = '\0';
	const char *drafts[] = {"-md " MODEL, "-md " DRAFT, "--draft ngram", "-md " DRAFT " --draft-k 7 --draft-adaptive"};
	for (size_t i = 0; i < ARRAY_LEN(drafts); i++) {
		char args[512];
		snprintf(args, sizeof args, "generate -m %s -p 'Once upon a time' --temp 0 -n 40 --ids %s", MODEL,
			 drafts[i]);
		run_pagechat(r, args);
		CHECK_(r->status == 0 && !strcmp(r->out, want) && strstr(r->errout, "draft:"),
		       "'%s': %s", drafts[i], r->errout);
	}
	/* batch: 16 concurrent greedy requests, with and without a draft */
	FILE *fp = fopen("build/test-spec.jsonl", "w");
	for (int i = 0; i < 16; i++)
		fprintf(fp, "{\"prompt\": \"Once upon a time %d\", \"max_tokens\": %d, \"temperature\": 0}\n", i,
			20 + 3 * i);
	fclose(fp);
	char *plain = xmalloc(sizeof r->out);
	run_pagechat(r, "batch -m " MODEL " -f build/test-spec.jsonl --parallel 16");
	CHECK(r->status == 0);
	memcpy(plain, r->out, sizeof r->out);
	for (size_t i = 0; i < 2; i++) {
		char args[512];
		snprintf(args, sizeof args, "batch -m %s -f build/test-spec.jsonl --parallel 16 %s", MODEL,
			 i ? "--draft ngram" : "-md " DRAFT);
		run_pagechat(r, args);
		CHECK(r->status == 0 && strstr(r->out, "\"draft\": {\"proposed\""));
		/* every completion's ids are the same as without the draft */
		int same = 0;
		for (const char *a = plain, *b = r->out; (a = strstr(a, "\"ids\": [")) && (b = strstr(b, "\"ids\": ["));
		     a++, b++)
			same += !strncmp(a, b, (size_t)(strchr(a, ']') - a));
		CHECK_EQ_INT(same, 16);
	}
	free(plain);
	/* a quantized copy of the target as its draft: Q8_0 (same weights) and Q4_0 (made by quantize) */
	const char *rand256 = "build/models/rand-256x4-f32.gguf";
	char args[512];
	snprintf(args, sizeof args, "generate -m %s -p 'The cat sat' --temp 0 -n 48 --ids", rand256);
	run_pagechat(r, args);
	CHECK(r->status == 0);
	n_want = MIN(strlen(r->out), sizeof want - 1);
	memcpy(want, r->out, n_want);
	want[n_want] = '\0';
	const char *copies[] = {"build/models/rand-256x4-q8_0.gguf", "build/models/rand-256x4-q4_0.gguf"};
	for (size_t i = 0; i < ARRAY_LEN(copies); i++) {
		snprintf(args, sizeof args, "generate -m %s -p 'The cat sat' --temp 0 -n 48 --ids -md %s", rand256,
			 copies[i]);
		run_pagechat(r, args);
		const char *acc = strstr(r->errout, "accepted (");
		double rate = acc ? atof(acc + 10) : -1;
		CHECK_(r->status == 0 && !strcmp(r->out, want) && rate >= 20.0, /* a random draft gets under 10% */
		       "%s as draft: %s", copies[i], r->errout);
	}
	/* bench --spec measures both runs */
	run_pagechat(r, "bench -m " MODEL " --spec -md " MODEL " -n 32 -r 1");
	CHECK_(r->status == 0 && strstr(r->out, "speed-up") && strstr(r->out, "accepted (100.0%)"), "%s%s",
	       r->out, r->errout);
	run_pagechat(r, "bench -m " MODEL " --spec -n 8 -r 1");
	CHECK(r->status == 1 && strstr(r->errout, "needs -md"));
	run_pagechat(r, "generate -m " MODEL " -p hi -md " SPM_DRAFT);
	CHECK_(r->status == 1 && strstr(r->errout, "vocabulary has 32000 tokens, the target's has 512"), "%s",
	       r->errout);
	run_pagechat(r, "generate -m " MODEL " -p hi --draft bogus"); /* a file, as the chat's --draft FILE (#40) */
	CHECK_(r->status == 1 && strstr(r->errout, "draft model: bogus"), "%s", r->errout);
	run_pagechat(r, "generate -m " MODEL " -p hi -md no/such.gguf");
	CHECK(r->status == 1 && strstr(r->errout, "draft model: no/such.gguf"));
	free(r);
}

int main(void)
{
	err e = {0};
	target = llama_open(MODEL, &(llama_params){.max_tokens = 512}, &e);
	self_draft = llama_open(MODEL, &(llama_params){.max_tokens = 512}, &e);
	rand_draft = llama_open(DRAFT, &(llama_params){.max_tokens = 512}, &e);
	gguf_file *f = gguf_open(MODEL, &e);
	tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	CHECK_(target && self_draft && rand_draft && tk, "%s", e.msg);
	if (!target || !self_draft || !rand_draft || !tk)
		return TEST_DONE();
	test_rejection_arithmetic();
	test_greedy_exact("self draft", DRAFT_MODEL, self_draft, 4, false, 1.0, 1.0);
	test_greedy_exact("random draft", DRAFT_MODEL, rand_draft, 4, false, 0.0, 0.2);
	test_greedy_exact("random draft adaptive", DRAFT_MODEL, rand_draft, 3, true, 0.0, 0.2);
	test_greedy_exact("n-gram", DRAFT_NGRAM, NULL, 5, false, 0.0, 1.0);
	test_greedy_exact("self draft k=16", DRAFT_MODEL, self_draft, 16, false, 1.0, 1.0);
	test_probe("self draft", self_draft, 4);
	test_probe("random draft", rand_draft, 5);
	test_cli();
	/* the target split between the CPU (3 of 5 layers, the head) and the fake
	 * device, the draft wholly on the device: the same greedy tokens */
	llama_free(target);
	llama_free(self_draft);
	target = llama_open(MODEL, &(llama_params){.max_tokens = 512, .kern = kern_fake(), .host_layers = 3,
						  .head_on_host = true}, &e);
	self_draft = llama_open(MODEL, &(llama_params){.max_tokens = 512, .kern = kern_fake()}, &e);
	CHECK_(target && self_draft, "split: %s", e.msg);
	if (target && self_draft) {
		test_greedy_exact("split, self draft", DRAFT_MODEL, self_draft, 4, false, 1.0, 1.0);
		test_greedy_exact("split, n-gram", DRAFT_NGRAM, NULL, 5, false, 0.0, 1.0);
	}
	tok_free(tk);
	llama_free(target);
	llama_free(self_draft);
	llama_free(rand_draft);
	return TEST_DONE();
}
