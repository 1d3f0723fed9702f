/* tests/test_spec_dist.c: speculative sampling keeps the target's output
 * distribution. 20,000 three-token continuations of a fixed prompt at
 * temperature 1 with a random-weight draft (which is rejected most of the
 * time, so the residual path is exercised) are compared with 20,000 without a
 * draft (distinct seeds) by a two-sample chi-square test on tokens 2..4; a
 * run at another temperature must fail the same test. A statistical test:
 * it runs in the normal pass (too slow under the sanitizers; the same code
 * paths run there in test_spec). */
#include "engine/core.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define DRAFT "build/models/rand-draft.gguf"
#define N_SAMPLES 20000
#define MAX_REQ (2 * N_SAMPLES + 64)

static llama_model *target, *rand_draft;
static tok *tk;
static int32_t (*out_ids)[8];
static int *n_out;

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	if (ev->kind == CORE_EV_TOKEN && n_out[ev->req] < 8)
		out_ids[ev->req][n_out[ev->req]++] = ev->token;
}

static core *make_core(enum core_draft kind, llama_model *draft, int k, bool adaptive)
{
	core_params p = {.model = target, .tok = tk, .pool_blocks = 2048, .block_tokens = 16,
			 .step_tokens = 512, .max_running = 64, .check = false, .draft_kind = kind,
			 .draft = draft, .draft_tok = tk, .draft_k = k, .draft_adaptive = adaptive};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	return c;
}

static void run(core *c)
{
	err e = {0};
	while (!core_idle(c))
		if (core_step(c, &e) < 0) {
			CHECK_(0, "%s", e.msg);
			return;
		}
}

/* ---- distribution ---- */

/* Regularised upper incomplete gamma Q(a, x) (series / continued fraction). */
static double gamma_q(double a, double x)
{
	if (x <= 0)
		return 1;
	double lg = lgamma(a);
	if (x < a + 1) {
		double sum = 1 / a, term = sum;
		for (int n = 1; n < 1000; n++) {
			term *= x / (a + n);
			sum += term;
		}
		return 1 - sum * exp(-x + a * log(x) - lg);
	}
	double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
	for (int i = 1; i < 1000; i++) {
		double an = -i * (i - a);
		b += 2;
		d = an * d + b;
		d = fabs(d) < 1e-300 ? 1e-300 : d;
		c = b + an / c;
		c = fabs(c) < 1e-300 ? 1e-300 : c;
		d = 1 / d;
		h *= d * c;
	}
	return exp(-x + a * log(x) - lg) * h;
}

/* Samples N_SAMPLES 3-token continuations with distinct seeds (ids from
 * base); fills counts of (token 2, token 3) pairs hashed into bins. */
static void sample_runs(enum core_draft kind, llama_model *draft, int base, uint64_t seed0)
{
	core *c = make_core(kind, draft, 3, false);
	int32_t prompt[5] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
	samp_params sp = samp_default_params();
	sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0;
	err e = {0};
	int rejected = 0;
	for (int i = 0; i < N_SAMPLES; i++) {
		sp.seed = seed0 + (uint64_t)i;
		core_request r = {.id = base + i, .prompt = prompt, .n_prompt = 5, .samp = sp,
				  .max_tokens = 4, .n = 1};
		rejected += core_submit(c, &r, &e) != 0;
		if (i % 256 == 255)
			run(c);
	}
	run(c);
	CHECK_EQ_INT(rejected, 0);
	core_stats st;
	core_get_stats(c, &st);
	if (kind != DRAFT_NONE)
		CHECK(st.spec_steps > 0);
	core_free(c);
}

/* Two-sample chi-square over the marginal of generated token `pos` (0-based).
 * Bins with fewer than 10 expected are pooled. Returns the p-value. */
static double chi_square(int base_a, int base_b, int pos)
{
	static int ca[512], cb[512];
	memset(ca, 0, sizeof ca);
	memset(cb, 0, sizeof cb);
	for (int i = 0; i < N_SAMPLES; i++) {
		if (n_out[base_a + i] > pos)
			ca[out_ids[base_a + i][pos]]++;
		if (n_out[base_b + i] > pos)
			cb[out_ids[base_b + i][pos]]++;
	}
	double stat = 0;
	int bins = 0, pool_a = 0, pool_b = 0;
	for (int t = 0; t < 512; t++) {
		if (ca[t] + cb[t] < 20) {
			pool_a += ca[t], pool_b += cb[t];
			continue;
		}
		stat += (double)(ca[t] - cb[t]) * (ca[t] - cb[t]) / (ca[t] + cb[t]);
		bins++;
	}
	if (pool_a + pool_b > 0) {
		stat += (double)(pool_a - pool_b) * (pool_a - pool_b) / (pool_a + pool_b);
		bins++;
	}
	return bins > 1 ? gamma_q((bins - 1) / 2.0, stat / 2) : 1.0;
}

static void test_distribution(void)
{
	sample_runs(DRAFT_NONE, NULL, 0, 1000000);
	sample_runs(DRAFT_MODEL, rand_draft, N_SAMPLES, 2000000);
	for (int pos = 1; pos <= 3; pos++) {
		double pv = chi_square(0, N_SAMPLES, pos);
		CHECK_(pv > 0.001, "random draft: token %d distribution differs (p = %g)", pos + 1, pv);
	}
	/* the test can fail: a distribution that is off (a skewed temperature) is caught */
	core *c = make_core(DRAFT_NONE, NULL, 3, false);
	int32_t prompt[5] = {1, 403, 407, 261, 378};
	samp_params sp = samp_default_params();
	sp.temp = 0.8f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0;
	err e = {0};
	memset(n_out + N_SAMPLES, 0, sizeof *n_out * N_SAMPLES);
	for (int i = 0; i < N_SAMPLES; i++) {
		sp.seed = 3000000 + (uint64_t)i;
		core_request r = {.id = N_SAMPLES + i, .prompt = prompt, .n_prompt = 5, .samp = sp,
				  .max_tokens = 4, .n = 1};
		core_submit(c, &r, &e);
		if (i % 256 == 255)
			run(c);
	}
	run(c);
	core_free(c);
	CHECK_(chi_square(0, N_SAMPLES, 1) < 0.001, "a temperature of 0.8 vs 1.0 should be detected");
}


int main(void)
{
	err e = {0};
	out_ids = xcalloc(MAX_REQ, sizeof *out_ids);
	n_out = xcalloc(MAX_REQ, sizeof *n_out);
	target = llama_open(MODEL, &(llama_params){.max_tokens = 512}, &e);
	rand_draft = llama_open(DRAFT, &(llama_params){.max_tokens = 512}, &e);
	gguf_file *f = gguf_open(MODEL, &e);
	tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	CHECK_(target && rand_draft && tk, "%s", e.msg);
	if (target && rand_draft && tk)
		test_distribution();
	tok_free(tk);
	llama_free(target);
	llama_free(rand_draft);
	free(out_ids);
	free(n_out);
	return TEST_DONE();
}
