/* tests/test_core.c: the engine core end to end on the real tiny model.
 * References: gen_run (one request alone, its own pool) and greedy.tsv. */
#include "engine/core.h"
#include "engine/gen.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define MAX_REQ 2100
#define MAX_OUT 512

typedef struct result {
	int32_t ids[8][MAX_OUT];
	int n_ids[8];
	int n_finish[8];
	enum core_finish finish[8];
	core_req_metrics m[8];
	core_req_metrics m_tok[8];   /* the last TOKEN event's figures so far */
	int tok_figures_off[8];      /* TOKEN events whose count or first-token
	                                time disagreed with the ones before */
	uint64_t steps[MAX_OUT];     /* step of each token of completion 0 */
	char text[4096];
	size_t text_len;
	char error[256];
} result;

static result *results;          /* [MAX_REQ] indexed by request id */
static llama_model *model;
static tok *tk;

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	result *r = &results[ev->req];
	if (ev->index >= (int)ARRAY_LEN(r->n_ids))
		return; /* a refused request's completions past the 8 kept here */
	if (ev->kind == CORE_EV_TOKEN) {
		core_req_metrics *last = &r->m_tok[ev->index];
		r->tok_figures_off[ev->index] += ev->m.ttft_ms <= 0 || (last->n_gen > 0 &&
			(ev->m.n_gen != last->n_gen + 1 || ev->m.ttft_ms != last->ttft_ms));
		*last = ev->m;
		if (ev->index == 0 && r->n_ids[0] < MAX_OUT)
			r->steps[r->n_ids[0]] = ev->step;
		if (r->n_ids[ev->index] < MAX_OUT)
			r->ids[ev->index][r->n_ids[ev->index]++] = ev->token;
		if (ev->index == 0 && r->text_len + ev->text_len < sizeof r->text) {
			memcpy(r->text + r->text_len, ev->text, ev->text_len);
			r->text_len += ev->text_len;
		}
	} else {
		r->n_finish[ev->index]++;
		r->finish[ev->index] = ev->finish;
		r->m[ev->index] = ev->m;
		snprintf(r->error, sizeof r->error, "%.*s", (int)ev->text_len, ev->text);
	}
}

static samp_params greedy(void)
{
	samp_params p = samp_default_params();
	p.temp = 0;
	return p;
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* Tokens gen_run gives for prompt alone (out[0] = count). */
static void reference(const int32_t *prompt, int n, int n_predict, int32_t *out)
{
	gen_params gp = {.samp = greedy(), .n_predict = n_predict, .n_ctx = 2048, .block_tokens = 16};
	gen_stats st;
	err e = {0};
	out[0] = 0;
	CHECK(gen_run(model, tk, prompt, n, &gp, collect, out, &st, &e) == 0);
}

static core *make_core(int64_t blocks, int bt, int step_tokens, int n_ctx)
{
	core_params p = {.model = model, .tok = tk, .block_tokens = bt, .pool_blocks = blocks,
			 .step_tokens = step_tokens, .n_ctx = n_ctx, .check = true};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	return c;
}

static int run_all(core *c)
{
	err e = {0};
	int steps = 0;
	while (!core_idle(c)) {
		int n = core_step(c, &e);
		CHECK_(n >= 0, "step: %s", e.msg);
		if (n < 0)
			break;
		steps++;
	}
	return steps;
}

static void random_prompt(uint64_t *rng, int32_t *p, int n)
{
	p[0] = 1;
	for (int i = 1; i < n; i++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = 3 + (int32_t)((*rng >> 33) % 500);
	}
}

static bool same_ids(const int32_t *got, int n_got, const int32_t *ref)
{
	if (n_got != ref[0])
		return false;
	for (int i = 0; i < n_got; i++)
		if (got[i] != ref[1 + i])
			return false;
	return true;
}

/* 16 concurrent greedy requests give exactly what each gives alone; the
 * pool is small enough that some are preempted and recomputed. */
static void test_concurrent_equals_alone(int64_t pool_blocks, int bt, int step_tokens)
{
	memset(results, 0, sizeof *results * 32);
	core *c = make_core(pool_blocks, bt, step_tokens, 2048);
	static int32_t prompts[16][300], ref[16][MAX_OUT + 1];
	int n_prompt[16];
	uint64_t rng = 42;
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/greedy.tsv") == 0);
	for (int i = 0; i < 16; i++) {
		if (i < t.n_rows)
			n_prompt[i] = tsv_ints(t.rows[i][1], prompts[i], 300);
		else
			random_prompt(&rng, prompts[i], n_prompt[i] = 5 + i * 13);
		int n_pred = 20 + 7 * i;
		reference(prompts[i], n_prompt[i], n_pred, ref[i]);
		core_request r = {.id = i, .conv = i, .prompt = prompts[i], .n_prompt = n_prompt[i],
				  .samp = greedy(), .max_tokens = n_pred, .n = 1};
		err e = {0};
		CHECK(core_submit(c, &r, &e) == 0);
	}
	/* the reference itself matches llama.cpp on the greedy.tsv rows */
	for (int i = 0; i < t.n_rows && i < 16; i++) {
		int32_t want[MAX_OUT];
		int n = tsv_ints(t.rows[i][2], want, MAX_OUT);
		CHECK(ref[i][0] >= MIN(n, 20) && !memcmp(ref[i] + 1, want, (size_t)MIN(n, ref[i][0]) * 4));
	}
	tsv_free(&t);
	run_all(c);
	core_stats st;
	core_get_stats(c, &st);
	for (int i = 0; i < 16; i++) {
		CHECK_EQ_INT(results[i].n_finish[0], 1);
		CHECK_(same_ids(results[i].ids[0], results[i].n_ids[0], ref[i]),
		       "pool %lld bt %d: request %d differs from its solo run (%d vs %d tokens)",
		       (long long)pool_blocks, bt, i, results[i].n_ids[0], ref[i][0]);
	}
	CHECK_EQ_INT(st.blocks_free + st.blocks_cached - st.blocks_cached, st.blocks_total);
	if (pool_blocks < 128)
		CHECK_(st.preemptions > 0, "pool of %lld blocks should force preemption", (long long)pool_blocks);
	core_free(c);
}

/* Two requests sharing a 200-token prefix; a second turn of a conversation. */
static void test_prefix_cache(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(256, 16, 512, 2048);
	static int32_t a[260], b[260];
	uint64_t rng = 7;
	random_prompt(&rng, a, 260);
	memcpy(b, a, 200 * sizeof *a);
	random_prompt(&rng, b + 200, 60);
	b[200] = 5; /* differ right after the shared 200 */
	err e = {0};
	core_request r = {.id = 0, .prompt = a, .n_prompt = 230, .samp = greedy(), .max_tokens = 10, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	r.id = 1, r.prompt = b, r.n_prompt = 240;
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK_EQ_INT(results[0].m[0].n_cached, 0);
	CHECK_EQ_INT(results[1].m[0].n_cached, 192); /* 12 full blocks of the 200 shared */
	/* turn 2 of conversation 0: its prompt + answer + new text */
	static int32_t turn2[400];
	int n = 230;
	memcpy(turn2, a, 230 * sizeof *a);
	for (int i = 0; i < results[0].n_ids[0]; i++)
		turn2[n++] = results[0].ids[0][i];
	for (int i = 0; i < 17; i++)
		turn2[n++] = 100 + i;
	r.id = 2, r.prompt = turn2, r.n_prompt = n;
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	/* every fed token of turn 1 (all but its last sampled one) in full blocks */
	int computed_turn1 = 230 + results[0].n_ids[0] - 1;
	CHECK_EQ_INT(results[2].m[0].n_cached, computed_turn1 / 16 * 16);
	core_stats st;
	core_get_stats(c, &st);
	CHECK(st.cached_tokens == 192 + computed_turn1 / 16 * 16);
	CHECK(st.blocks_cached > 0 && st.blocks_used == 0);
	/* the cached answer equals the uncached one */
	int32_t ref[MAX_OUT + 1];
	reference(turn2, n, 10, ref);
	CHECK(same_ids(results[2].ids[0], results[2].n_ids[0], ref));
	core_free(c);
}

/* While a long prompt is prefilled in chunks, running decodes advance one
 * token in every step. */
static void test_chunked_prefill(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(512, 16, 64, 2048);
	static int32_t shortp[3][20], longp[1500];
	uint64_t rng = 99;
	err e = {0};
	for (int i = 0; i < 3; i++) {
		random_prompt(&rng, shortp[i], 20);
		core_request r = {.id = i, .prompt = shortp[i], .n_prompt = 20, .samp = greedy(),
				  .max_tokens = 60, .n = 1};
		CHECK(core_submit(c, &r, &e) == 0);
	}
	for (int i = 0; i < 3; i++)
		CHECK(core_step(c, &e) > 0); /* all three prefilled and decoding */
	random_prompt(&rng, longp, 1500);
	core_request r = {.id = 3, .prompt = longp, .n_prompt = 1500, .samp = greedy(), .max_tokens = 2, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	for (int i = 0; i < 3; i++) {
		bool consecutive = results[i].n_ids[0] == 60;
		for (int k = 1; k < results[i].n_ids[0]; k++)
			consecutive &= results[i].steps[k] == results[i].steps[k - 1] + 1;
		CHECK_(consecutive, "decode %d skipped a step during the long prefill", i);
	}
	/* the long prompt needed ~1500/61 steps: it finished after the short ones started */
	CHECK(results[3].n_finish[0] == 1 && results[3].steps[0] > results[0].steps[0] + 20);
	core_free(c);
}

/* n > 1 shares the prompt's blocks; greedy completions are all equal to the
 * solo run; sampled ones differ by seed. A fork continues like its source. */
static void test_parallel_and_fork(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(128, 16, 512, 2048);
	static int32_t p[37];
	uint64_t rng = 5;
	random_prompt(&rng, p, 37);
	int32_t ref[MAX_OUT + 1];
	reference(p, 37, 30, ref);
	err e = {0};
	core_request r = {.id = 0, .prompt = p, .n_prompt = 37, .samp = greedy(), .max_tokens = 30, .n = 4};
	CHECK(core_submit(c, &r, &e) == 0);
	CHECK(core_step(c, &e) > 0); /* prefill + first token for all four */
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.n_running, 4);
	CHECK_EQ_INT(st.blocks_shared, 3); /* the prompt's 3 blocks (2 full + partial) */
	CHECK(core_fork(c, 0, 2, 5, 9, 1234) == 0);
	CHECK(core_fork(c, 77, 0, 6, 9, 1) == -1);
	run_all(c);
	/* five sequences wrote the partial block they shared: four copies, the
	 * fifth wrote it in place; the map stamps each copy */
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.cow_copies, 4);
	core_block_info map[128];
	CHECK_EQ_INT(core_n_blocks(c), 128);
	core_block_map(c, map);
	int stamped = 0;
	for (int b = 0; b < 128; b++)
		stamped += map[b].cow_step > 0;
	CHECK_EQ_INT(stamped, 4);
	for (int i = 0; i < 4; i++)
		CHECK_(same_ids(results[0].ids[i], results[0].n_ids[i], ref), "completion %d", i);
	/* the fork got the source's first token already; its continuation matches */
	CHECK_EQ_INT(results[5].n_ids[0], 29);
	CHECK(!memcmp(results[5].ids[0], ref + 2, 29 * sizeof(int32_t)));
	samp_params sp = samp_default_params();
	sp.temp = 1.0f, sp.seed = 3;
	r = (core_request){.id = 1, .prompt = p, .n_prompt = 37, .samp = sp, .max_tokens = 30, .n = 3};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	/* every TOKEN event carries the figures so far, defined as the final
	 * ones (the chat shows them live): the same first-token time from the
	 * first token on, one more token each time, and at the last token (each
	 * ran to max_tokens) the final figures exactly; a fork's are its
	 * source's (the same submit and first token) */
	for (int k = 0; k < 3; k++) {
		const result *q = &results[1];
		CHECK_(q->tok_figures_off[k] == 0 && q->finish[k] == FIN_LENGTH, "completion %d: %d", k,
		       q->tok_figures_off[k]);
		CHECK_(q->m_tok[k].ttft_ms == q->m[k].ttft_ms && q->m_tok[k].tpot_ms == q->m[k].tpot_ms &&
			       q->m_tok[k].n_gen == q->m[k].n_gen && q->m[k].n_gen == 30 && q->m[k].tpot_ms > 0,
		       "completion %d: ttft %g/%g tpot %g/%g n %d/%d", k, q->m_tok[k].ttft_ms, q->m[k].ttft_ms,
		       q->m_tok[k].tpot_ms, q->m[k].tpot_ms, q->m_tok[k].n_gen, q->m[k].n_gen);
	}
	CHECK_(results[5].tok_figures_off[0] == 0 && results[5].m_tok[0].n_gen == 30 &&
		       results[5].m[0].ttft_ms == results[0].m[2].ttft_ms,
	       "fork: %d off, n %d, ttft %g (its source %g)", results[5].tok_figures_off[0], results[5].m_tok[0].n_gen,
	       results[5].m[0].ttft_ms, results[0].m[2].ttft_ms);
	bool all_same = results[1].n_ids[0] == results[1].n_ids[1] &&
			!memcmp(results[1].ids[0], results[1].ids[1], (size_t)results[1].n_ids[0] * 4);
	CHECK(!all_same);
	core_free(c);
}

/* Requests with n > 1 completions under max_running: a first completion is
 * admitted only where its siblings (spawned at its first sample, straight
 * into running) fit too, so running never passes max_running (three n = 4
 * requests at max_running 8 once ran 12 and wrote past the scheduler's
 * arrays); each completion still gives the greedy reference; a fork into a
 * full running list and an n above max_running are refused. */
static void test_completions_fit(void)
{
	memset(results, 0, sizeof *results * 8);
	core_params cp = {.model = model, .tok = tk, .block_tokens = 16, .pool_blocks = 128, .step_tokens = 512,
			  .n_ctx = 512, .max_running = 8, .check = true};
	err e = {0};
	core *c = core_new(&cp, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	static int32_t p[3][20];
	int32_t ref[3][MAX_OUT + 1];
	uint64_t rng = 11;
	for (int i = 0; i < 3; i++) {
		random_prompt(&rng, p[i], 20);
		reference(p[i], 20, 12, ref[i]);
		core_request r = {.id = i, .prompt = p[i], .n_prompt = 20, .samp = greedy(), .max_tokens = 12, .n = 4};
		CHECK(core_submit(c, &r, &e) == 0);
	}
	int most = 0, forks = 0;
	while (!core_idle(c)) {
		CHECK_(core_step(c, &e) >= 0, "step: %s", e.msg);
		core_stats st;
		core_get_stats(c, &st);
		most = MAX(most, st.n_running);
		if (st.n_running == 8 && !forks++)
			CHECK_EQ_INT(core_fork(c, 0, 0, 5, 9, 1), -2);
	}
	CHECK_EQ_INT(most, 8);
	CHECK(forks > 0);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4; k++)
			CHECK_(results[i].n_finish[k] == 1 && same_ids(results[i].ids[k], results[i].n_ids[k], ref[i]),
			       "request %d completion %d", i, k);
	core_request r = {.id = 3, .prompt = p[0], .n_prompt = 20, .samp = greedy(), .max_tokens = 4, .n = 9};
	CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "must be 1..8"));
	core_free(c);
}

static void test_rejections_and_stops(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(8, 16, 512, 64);
	static int32_t p[200];
	uint64_t rng = 3;
	random_prompt(&rng, p, 200);
	err e = {0};
	core_request r = {.id = 0, .prompt = p, .n_prompt = 100, .samp = greedy(), .max_tokens = 5, .n = 1};
	CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "context holds 64"));
	CHECK(results[0].finish[0] == FIN_ERROR && strstr(results[0].error, "context"));
	r.id = 1, r.n_prompt = 0;
	CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "empty"));
	/* context limit: prompt 60 + 4 tokens */
	r.id = 2, r.n_prompt = 60, r.max_tokens = 0;
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK(results[2].finish[0] == FIN_CONTEXT && results[2].n_ids[0] == 4);
	core_free(c);

	/* a pool too small for one sequence's growth: a clear error, not a hang */
	c = make_core(3, 4, 512, 2048);
	r.id = 3, r.n_prompt = 9, r.max_tokens = 50;
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK(results[3].finish[0] == FIN_ERROR && strstr(results[3].error, "KV pool full"));
	CHECK_(strstr(results[3].error, "--pool-blocks N or --pool-mib N"), "%s", results[3].error); /* #40 */
	r.id = 4, r.n_prompt = 30;
	CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "pool has 3"));
	CHECK_(strstr(e.msg, "--pool-blocks N or --pool-mib N"), "%s", e.msg);
	core_free(c);

	/* stop strings: text ends before the stop string, nothing after it leaks */
	c = make_core(64, 16, 512, 2048);
	int32_t once[5] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
	const char *stops[] = {"Lily"};
	r = (core_request){.id = 5, .prompt = once, .n_prompt = 5, .samp = greedy(), .max_tokens = 64,
			   .n = 1, .stop_strs = stops, .n_stop_strs = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	results[5].text[results[5].text_len] = '\0';
	CHECK_(results[5].finish[0] == FIN_STOP && !strcmp(results[5].text, ", there was a little girl named "),
	       "text '%s'", results[5].text);
	core_free(c);
}

/* ignore_eos on the random 256x4 model (the same vocabulary; it samples the
 * end-of-text token now and then): a seed whose answer ends there, again
 * with ignore_eos, goes on to max_tokens with the same tokens up to there and
 * the end-of-text token streamed as any other. */
static void test_ignore_eos(void)
{
	err e = {0};
	llama_model *rm = llama_open("build/models/rand-256x4-f32.gguf", &(llama_params){.max_tokens = 256}, &e);
	CHECK_(rm != NULL, "%s", e.msg);
	if (!rm)
		return;
	core_params p = {.model = rm, .tok = tk, .block_tokens = 16, .pool_blocks = 64, .step_tokens = 256,
			 .n_ctx = 512, .check = true};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	int32_t once[5] = {1, 403, 407, 261, 378};
	samp_params sp = samp_default_params();
	sp.temp = 1, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0;
	core_request r = {.prompt = once, .n_prompt = 5, .samp = sp, .max_tokens = 200, .n = 1};
	int found = -1;
	for (int s = 0; c && s < 64 && found < 0; s++) {
		memset(&results[1000 + s], 0, sizeof *results);
		r.id = 1000 + s, r.samp.seed = 77 + (uint64_t)s;
		CHECK(core_submit(c, &r, &e) == 0);
		run_all(c);
		if (results[r.id].finish[0] == FIN_STOP && results[r.id].n_ids[0] < 199)
			found = s;
	}
	CHECK_(found >= 0, "one of 64 seeds ends at the end-of-text token within 200 tokens");
	if (found >= 0) {
		const result *a = &results[1000 + found], *b = &results[1100];
		memset(&results[1100], 0, sizeof *results);
		r.id = 1100, r.samp.seed = 77 + (uint64_t)found, r.ignore_eos = true;
		CHECK(core_submit(c, &r, &e) == 0);
		run_all(c);
		int k = a->n_ids[0];
		CHECK_(b->finish[0] == FIN_LENGTH && b->n_ids[0] == 200, "finish %d after %d tokens", b->finish[0],
		       b->n_ids[0]);
		CHECK(!memcmp(a->ids[0], b->ids[0], (size_t)k * sizeof *a->ids[0]) && tok_is_eog(tk, b->ids[0][k]));
	}
	core_free(c);
	llama_free(rm);
}

/* A prefill-only request (the chat's warm-up of a system prompt): the
 * prompt's K/V is computed and pinned, the request ends with FIN_STOP and
 * no token, and it is no finished request in the figures (the panel said
 * "finished 2" and "decode 4" before any question); the next request on the
 * prompt finds its full blocks cached and gives the reference tokens. */
static void test_prefill_only(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(64, 16, 512, 2048);
	static int32_t p[40];
	uint64_t rng = 23;
	random_prompt(&rng, p, 40);
	int32_t ref[MAX_OUT + 1];
	reference(p, 40, 5, ref);
	err e = {0};
	core_request r = {.id = 0, .conv = 5, .prompt = p, .n_prompt = 40, .samp = greedy(), .n = 1,
			  .pin_tokens = 40, .prefill_only = true};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_(results[0].n_finish[0] == 1 && results[0].finish[0] == FIN_STOP && results[0].n_ids[0] == 0 &&
		       results[0].m[0].n_gen == 0,
	       "finish %d (%d), %d tokens", results[0].finish[0], results[0].n_finish[0], results[0].n_ids[0]);
	CHECK_(st.finished == 0 && st.generated_tokens == 0 && st.decode_tokens == 0 && st.prefill_tokens == 40,
	       "finished %lld generated %lld decode %lld prefill %lld", (long long)st.finished,
	       (long long)st.generated_tokens, (long long)st.decode_tokens, (long long)st.prefill_tokens);
	CHECK_EQ_INT(st.blocks_pinned, 2);
	r = (core_request){.id = 1, .conv = 5, .prompt = p, .n_prompt = 40, .samp = greedy(), .max_tokens = 5, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK_(results[1].m[0].n_cached == 32 && same_ids(results[1].ids[0], results[1].n_ids[0], ref),
	       "cached %d", results[1].m[0].n_cached);
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.finished, 1);
	r = (core_request){.id = 2, .prompt = p, .n_prompt = 40, .samp = greedy(), .n = 2, .prefill_only = true};
	CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "prefill-only"));
	/* a second tab's warm-up of a prompt that is whole blocks, all cached:
	 * it computes nothing, reports them reused and pins the same blocks */
	core_get_stats(c, &st);
	int64_t prefill_before = st.prefill_tokens, cached_before = st.cached_tokens;
	r = (core_request){.id = 3, .conv = 6, .prompt = p, .n_prompt = 32, .samp = greedy(), .n = 1,
			   .pin_tokens = 32, .prefill_only = true};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	core_get_stats(c, &st);
	CHECK_(results[3].n_finish[0] == 1 && results[3].finish[0] == FIN_STOP && results[3].m[0].n_cached == 32,
	       "finish %d (%d), cached %d", results[3].finish[0], results[3].n_finish[0], results[3].m[0].n_cached);
	CHECK_(st.prefill_tokens == prefill_before && st.cached_tokens == cached_before + 32 && st.finished == 1,
	       "prefill %lld -> %lld, cached %lld -> %lld", (long long)prefill_before, (long long)st.prefill_tokens,
	       (long long)cached_before, (long long)st.cached_tokens);
	CHECK_EQ_INT(st.blocks_pinned, 2);   /* the same two blocks, pinned by both */
	core_block_info map[64];
	core_block_map(c, map);
	int both = 0;
	for (int i = 0; i < 64; i++)
		both += map[i].state == BLK_PINNED && map[i].refcount == 2;
	CHECK_EQ_INT(both, 2);
	/* conversation 5 lets go: conversation 6's pins keep the blocks, and its
	 * next question finds them */
	core_close_conv(c, 5);
	r = (core_request){.id = 4, .conv = 6, .prompt = p, .n_prompt = 40, .samp = greedy(), .max_tokens = 5, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK_(results[4].m[0].n_cached == 32 && same_ids(results[4].ids[0], results[4].n_ids[0], ref),
	       "cached %d", results[4].m[0].n_cached);
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_pinned, 2);
	core_free(c);
}

static void test_pins(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(64, 16, 512, 2048);
	static int32_t p[60];
	uint64_t rng = 11;
	random_prompt(&rng, p, 60);
	err e = {0};
	core_request r = {.id = 0, .conv = 3, .prompt = p, .n_prompt = 60, .samp = greedy(),
			  .max_tokens = 3, .n = 1, .pin_tokens = 40};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_pinned, 2);   /* the two full blocks inside 40 tokens */
	CHECK_EQ_INT(st.blocks_used, 2);
	core_block_info map[64];
	core_block_map(c, map);
	int n_pinned = 0;
	for (int i = 0; i < 64; i++)
		n_pinned += map[i].state == BLK_PINNED && map[i].conv == 3;
	CHECK_EQ_INT(n_pinned, 2);
	/* evicting everything else cannot touch them: fill the pool with other work */
	static int32_t q[990];
	random_prompt(&rng, q, 990);
	r = (core_request){.id = 1, .conv = 4, .prompt = q, .n_prompt = 990, .samp = greedy(), .max_tokens = 1, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	r = (core_request){.id = 2, .conv = 5, .prompt = p, .n_prompt = 60, .samp = greedy(), .max_tokens = 3, .n = 1};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	CHECK_EQ_INT(results[2].m[0].n_cached, 32);
	core_close_conv(c, 3);
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_pinned, 0);
	CHECK_EQ_INT(st.blocks_used, 0);
	CHECK(core_check(c, &e));
	core_free(c);
}

/* Random submits, cancels and forks through a pool too small to hold them
 * all; invariants are checked after every step (check = true). */
static void test_stress(int n_requests)
{
	memset(results, 0, sizeof *results * MAX_REQ);
	core *c = make_core(40, 4, 96, 256);
	uint64_t rng = 2024;
	int next = 0, n_fork = 0;
	static int n_expected[MAX_REQ];
	memset(n_expected, 0, sizeof n_expected);
	err e = {0};
	static int32_t p[80];
	for (int step = 0; next < n_requests || !core_idle(c); step++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		unsigned x = (unsigned)(rng >> 33);
		if (next < n_requests && x % 3 == 0) {
			int n = 2 + (int)(x / 3 % 60);
			random_prompt(&rng, p, n);
			samp_params sp = samp_default_params();
			sp.seed = x;
			sp.temp = x % 2 ? 0.9f : 0;
			int n_comp = x % 11 == 0 ? 3 : 1;
			core_request r = {.id = next, .conv = next % 7, .prompt = p, .n_prompt = n,
					  .samp = sp, .max_tokens = 1 + (int)(x / 7 % 30), .n = n_comp,
					  .pin_tokens = x % 13 == 0 ? 8 : 0};
			core_submit(c, &r, &e);
			n_expected[next] = n_comp;
			next++;
		}
		if (next > 0 && x % 17 == 0)
			core_cancel(c, (int64_t)(x / 17 % (unsigned)next));
		if (next > 0 && x % 19 == 0 && next < MAX_REQ - 1 && n_fork < 100) {
			int src = (int)(x / 19 % (unsigned)next);
			if (core_fork(c, src, 0, MAX_REQ - 1 - n_fork, 6, x) == 0)
				n_expected[MAX_REQ - 1 - n_fork] = 1, n_fork++;
		}
		if (x % 29 == 0)
			core_close_conv(c, (int)(x % 7));
		int n = core_step(c, &e);
		if (n < 0) {
			CHECK_(0, "step %d: %s", step, e.msg);
			break;
		}
	}
	int lost = 0, dup = 0;
	for (int i = 0; i < MAX_REQ; i++)
		for (int k = 0; k < n_expected[i]; k++) {
			lost += results[i].n_finish[k] == 0;
			dup += results[i].n_finish[k] > 1;
		}
	CHECK_EQ_INT(lost, 0);
	CHECK_EQ_INT(dup, 0);
	for (int conv = 0; conv < 7; conv++)
		core_close_conv(c, conv);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_used, 0);
	CHECK(st.preemptions > 0);
	CHECK_(core_check(c, &e), "%s", e.msg);
	core_free(c);
}

/* Pinned blocks: two conversations whose system prompt is exactly one
 * block both pin the same block (the second finds the first's when it
 * publishes its own copy), and the pinned figure counts it once. */
static void test_one_block_pin(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(64, 16, 512, 1024);
	uint64_t rng = 11;
	int32_t p[16];
	random_prompt(&rng, p, 16);
	for (int conv = 1; conv <= 2; conv++) {
		core_request r = {.id = conv, .conv = conv, .prompt = p, .n_prompt = 16, .samp = greedy(),
				  .max_tokens = 1, .n = 1, .pin_tokens = 16};
		err e = {0};
		CHECK(core_submit(c, &r, &e) == 0);
		run_all(c);
	}
	core_block_info map[64];
	core_block_map(c, map);
	int pinned = 0, shared = 0;
	for (int b = 0; b < 64; b++) {
		pinned += map[b].state == BLK_PINNED;
		shared += map[b].state == BLK_PINNED && map[b].refcount == 2;
	}
	CHECK_(pinned == 1 && shared == 1, "one block pinned by both: %d pinned, %d twice", pinned, shared);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_pinned, 1);
	CHECK(st.blocks_pinned <= st.blocks_used + st.blocks_cached);
	core_free(c);
}

/* A context shift: the earlier prompt's blocks, rotated, become the new
 * prompt's (only under its salt); the request then computes only the rest;
 * the pool's invariants hold throughout (check is on). */
static void test_shift(void)
{
	memset(results, 0, sizeof *results * 8);
	core *c = make_core(64, 16, 512, 1024);
	uint64_t rng = 5;
	enum { OLD = 150, KEEP = 20, DISCARD = 40 };
	int32_t old[OLD], next[OLD - DISCARD + 10];
	random_prompt(&rng, old, OLD);
	core_request r = {.id = 1, .conv = 1, .prompt = old, .n_prompt = OLD, .samp = greedy(), .max_tokens = 2,
			  .n = 1, .pin_tokens = KEEP};
	err e = {0};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	int n = OLD - DISCARD;
	memcpy(next, old, KEEP * sizeof *old);
	memcpy(next + KEEP, old + KEEP + DISCARD, (size_t)(OLD - KEEP - DISCARD) * sizeof *old);
	random_prompt(&rng, next + n, 10);
	n += 10;
	/* the same tokens unsalted find the exact blocks of the first 20 only */
	core_request plain = {.id = 2, .conv = 2, .prompt = next, .n_prompt = n, .samp = greedy(), .max_tokens = 1, .n = 1};
	CHECK(core_submit(c, &plain, &e) == 0);
	run_all(c);
	CHECK_EQ_INT(results[2].m[0].n_cached, 16);
	core_request s = plain;
	s.id = 3;
	s.conv = 1;
	s.salt = 77;
	s.salt_block = KEEP / 16;
	s.shift = (core_shift){.old = old, .n_old = OLD, .keep = KEEP, .discard = DISCARD};
	CHECK(core_submit(c, &s, &e) == 0);
	run_all(c);
	/* old blocks cover 144 tokens: new positions up to 104, so blocks 1..5 are built */
	CHECK_EQ_INT(results[3].m[0].n_shifted, 80);
	CHECK_EQ_INT(results[3].m[0].n_cached, 96);
	CHECK(results[3].finish[0] == FIN_LENGTH && results[3].n_ids[0] == 1);
	/* the same salt finds them again; another does not */
	core_request again = s;
	again.id = 4;
	again.shift = (core_shift){0};
	CHECK(core_submit(c, &again, &e) == 0);
	run_all(c);
	CHECK_EQ_INT(results[4].m[0].n_cached, 112);
	again.id = 5;
	again.salt = 78;
	CHECK(core_submit(c, &again, &e) == 0);
	run_all(c);
	CHECK_EQ_INT(results[5].m[0].n_cached, 16);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.shifted_tokens, 80);
	core_free(c);
}

/* With drafts, generated_tokens counts the tokens the sequences took
 * (what decode tok/s shows), decode_tokens every verified row; held is the
 * tokens live sequences keep in the pool, 0 once they are done. */
static void test_figures(void)
{
	memset(results, 0, sizeof *results * 8);
	core_params p = {.model = model, .tok = tk, .block_tokens = 16, .pool_blocks = 64, .n_ctx = 1024,
			 .check = true, .draft_kind = DRAFT_NGRAM, .draft_k = 4};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	int32_t prompt[60];
	for (int i = 0; i < 60; i++)
		prompt[i] = i ? 3 + i % 6 : 1;
	for (int r = 0; r < 2; r++) {
		core_request q = {.id = r, .conv = r, .prompt = prompt, .n_prompt = 60 - 10 * r, .samp = greedy(),
				  .max_tokens = 50, .n = 1};
		CHECK(core_submit(c, &q, &e) == 0);
	}
	core_stats st;
	int64_t held_max = 0;
	while (!core_idle(c)) {
		CHECK(core_step(c, &e) >= 0);
		core_get_stats(c, &st);
		held_max = MAX(held_max, st.slots_filled);
		CHECK(st.slots_filled <= st.blocks_used * 16);
	}
	core_get_stats(c, &st);
	int gen = results[0].m[0].n_gen + results[1].m[0].n_gen;
	CHECK_EQ_INT(st.generated_tokens, gen);
	CHECK_(st.spec_proposed > 0 && st.decode_tokens > st.generated_tokens, "rows %lld, tokens %lld, drafts %lld",
	       (long long)st.decode_tokens, (long long)st.generated_tokens, (long long)st.spec_proposed);
	CHECK(held_max >= 60 && st.slots_filled == 0);
	core_free(c);
}

int main(void)
{
	err e = {0};
	results = xcalloc(MAX_REQ, sizeof *results);
	model = llama_open(MODEL, &(llama_params){.max_tokens = 512}, &e);
	CHECK_(model != NULL, "%s", e.msg);
	gguf_file *f = gguf_open(MODEL, &e);
	tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	if (!model || !tk)
		return TEST_DONE();
	test_concurrent_equals_alone(512, 16, 512);
	test_concurrent_equals_alone(40, 16, 128);
	test_concurrent_equals_alone(90, 4, 37);
	test_prefix_cache();
	test_chunked_prefill();
	test_parallel_and_fork();
	test_completions_fit();
	test_rejections_and_stops();
	test_ignore_eos();
	test_pins();
	test_prefill_only();
	test_one_block_pin();
	test_figures();
	test_shift();
	test_stress(2000);
	llama_free(model);
	/* again split between the CPU (2 of the 5 layers) and the fake device
	 * (the rest, the head, the K/V of those layers): batch invariance with
	 * preemption, prefix sharing, copy-on-write forks, the reference ids */
	model = llama_open(MODEL, &(llama_params){.max_tokens = 512, .kern = kern_fake(), .host_layers = 2}, &e);
	CHECK_(model && llama_host_layers(model) == 2, "split: %s", e.msg);
	if (model) {
		test_concurrent_equals_alone(40, 16, 128);
		test_concurrent_equals_alone(90, 4, 37);
		test_prefix_cache();
		test_parallel_and_fork();
		test_pins();
		test_stress(300);
	}
	tok_free(tk);
	llama_free(model);
	free(results);
	return TEST_DONE();
}
