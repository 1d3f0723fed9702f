/* tests/test_soak.c: the engine soak. A seeded random mix of submits (short
 * and long prompts, n > 1, stop strings, pins), cancels, forks and
 * conversation closes through a pool far too small for the load, with a draft
 * model, n-gram drafts or none; pool and prefix invariants are checked after
 * every step. At the end every block is free or cached and every completion
 * got exactly one finish event. The first part drives the core directly, the
 * second the engine thread (the TSan target). Then greedy requests with
 * shared prefixes through the same small pool with the lower KV tiers off,
 * with host memory and swapping, and with host memory and a disk store: the
 * same tokens for every request, and no block left in any tier.
 * SOAK_REQUESTS sets the size (`make soak` runs a long one). */
#include "engine/core.h"
#include "link/link.h"
#include "tests/test.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define DRAFT "build/models/rand-draft.gguf"
#define MAX_N 4

static llama_model *target, *draft;
static tok *tk;
static int n_requests;
static uint8_t (*finishes)[MAX_N]; /* [request][completion] finish events */
static int *n_completions;         /* [request] completions expected (0: none) */
static int64_t n_tokens_seen;

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

static void count_event(int64_t req, int index, enum core_event_kind kind)
{
	if (kind == CORE_EV_TOKEN) {
		n_tokens_seen++;
		return;
	}
	if (req >= 0 && req < 2 * n_requests && index >= 0 && index < MAX_N && finishes[req][index] < 255)
		finishes[req][index]++;
}

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	count_event(ev->req, ev->index, ev->kind);
}

/* One random action: returns the request built (if any) in *r. */
typedef struct action {
	enum { ACT_NONE, ACT_SUBMIT, ACT_CANCEL, ACT_FORK, ACT_CLOSE } kind;
	core_request r;
	int64_t id, new_id;
	int conv;
	uint64_t seed;
} action;

static int32_t prompt_buf[1200];
static const char *const stop_words[] = {"park", "Lily"};

static action next_action(uint64_t *rng, int *next_req, int *next_fork)
{
	action a = {.kind = ACT_NONE};
	unsigned x = (unsigned)rng_next(rng);
	if (*next_req < n_requests && x % 3 == 0) {
		int n = x % 50 == 0 ? 600 + (int)(x / 50 % 500) : 2 + (int)(x / 3 % 80);
		prompt_buf[0] = 1;
		for (int i = 1; i < n; i++)
			prompt_buf[i] = 3 + (int32_t)(rng_next(rng) % 500);
		samp_params sp = samp_default_params();
		sp.seed = x;
		sp.temp = x % 2 ? 0.9f : 0;
		int n_comp = x % 7 == 0 ? 1 + (int)(x / 7 % MAX_N) : 1;
		a.kind = ACT_SUBMIT;
		a.r = (core_request){.id = *next_req, .conv = *next_req % 9, .prompt = prompt_buf, .n_prompt = n,
				     .samp = sp, .max_tokens = 1 + (int)(x / 11 % 40), .n = n_comp,
				     .pin_tokens = x % 13 == 0 ? 16 : 0, .stop_strs = stop_words,
				     .n_stop_strs = x % 5 == 0 ? 2 : 0};
		n_completions[*next_req] = n_comp;
		(*next_req)++;
	} else if (*next_req > 0 && x % 17 == 0) {
		a.kind = ACT_CANCEL;
		a.id = (int64_t)(x / 17 % (unsigned)*next_req);
	} else if (*next_req > 0 && x % 19 == 0 && *next_fork < n_requests) {
		a.kind = ACT_FORK;
		a.id = (int64_t)(x / 19 % (unsigned)*next_req);
		a.new_id = n_requests + (*next_fork)++;
		a.conv = 9;
		a.seed = x;
	} else if (x % 31 == 0) {
		a.kind = ACT_CLOSE;
		a.conv = (int)(x % 10);
	}
	return a;
}

static core_params params(enum core_draft kind)
{
	return (core_params){.model = target, .tok = tk, .block_tokens = 8, .pool_blocks = 96,
			     .n_ctx = 1024, .step_tokens = 128, .max_running = 24, .check = true,
			     .draft_kind = kind, .draft = kind == DRAFT_MODEL ? draft : NULL, .draft_tok = tk,
			     .draft_k = 3, .draft_adaptive = true};
}

static void check_final(const char *what, const core_stats *st)
{
	int lost = 0, dup = 0;
	for (int i = 0; i < 2 * n_requests; i++)
		for (int k = 0; k < n_completions[i]; k++) {
			lost += finishes[i][k] == 0;
			dup += finishes[i][k] > 1;
		}
	CHECK_(lost == 0 && dup == 0, "%s: %d lost and %d duplicated finish events", what, lost, dup);
	CHECK_(st->blocks_used == 0, "%s: %lld blocks still used", what, (long long)st->blocks_used);
	CHECK_(st->blocks_free + 0 == st->blocks_total, "%s: free %lld of %lld", what,
	       (long long)st->blocks_free, (long long)st->blocks_total);
	CHECK_(st->preemptions > 0, "%s: the pool never ran short", what);
}

static void reset_counts(void)
{
	memset(finishes, 0, sizeof *finishes * 2 * (size_t)n_requests);
	memset(n_completions, 0, sizeof *n_completions * 2 * (size_t)n_requests);
}

static void soak_core(enum core_draft kind, uint64_t seed)
{
	reset_counts();
	core_params p = params(kind);
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	uint64_t rng = seed;
	int next_req = 0, next_fork = 0;
	while (next_req < n_requests || !core_idle(c)) {
		action a = next_action(&rng, &next_req, &next_fork);
		if (a.kind == ACT_SUBMIT)
			core_submit(c, &a.r, &e);
		else if (a.kind == ACT_CANCEL)
			core_cancel(c, a.id);
		else if (a.kind == ACT_FORK && core_fork(c, a.id, 0, a.new_id, a.conv, a.seed) == 0)
			n_completions[a.new_id] = 1;
		else if (a.kind == ACT_CLOSE)
			core_close_conv(c, a.conv);
		if (core_step(c, &e) < 0) {
			CHECK_(0, "step: %s", e.msg);
			break;
		}
	}
	for (int conv = 0; conv < 10; conv++)
		core_close_conv(c, conv);
	core_stats st;
	core_get_stats(c, &st);
	check_final(kind == DRAFT_MODEL ? "core, draft model" : kind == DRAFT_NGRAM ? "core, n-gram" : "core",
		    &st);
	if (kind != DRAFT_NONE)
		CHECK(st.spec_steps > 0);
	CHECK_(core_check(c, &e), "%s", e.msg);
	core_free(c);
}

/* The same through the engine thread: commands from here, events polled. */
static void soak_engine(enum core_draft kind, uint64_t seed)
{
	reset_counts();
	core_params p = params(kind);
	err e = {0};
	elink *g = link_start_local(&p, &e);
	CHECK_(g != NULL, "%s", e.msg);
	if (!g)
		return;
	uint64_t rng = seed;
	int next_req = 0, next_fork = 0;
	int64_t expected = 0, seen = 0;
	link_event ev;
	while (next_req < n_requests) {
		action a = next_action(&rng, &next_req, &next_fork);
		if (a.kind == ACT_SUBMIT) {
			link_submit(g, &(link_request){.r = a.r});
			expected += a.r.n;
		} else if (a.kind == ACT_CANCEL) {
			link_cancel(g, a.id);
		} else if (a.kind == ACT_FORK) {
			link_fork(g, a.id, 0, a.new_id, a.conv, a.seed);
			n_completions[a.new_id] = 1; /* finishes once, as a branch or as an error */
			expected++;
		} else if (a.kind == ACT_CLOSE) {
			link_close_conv(g, a.conv);
		}
		while (link_poll(g, &ev)) {
			count_event(ev.req, ev.index, ev.kind);
			seen += ev.kind == CORE_EV_FINISH;
			link_event_clear(&ev);
		}
	}
	for (int spins = 0; seen < expected && spins < 100000; spins++) {
		struct pollfd pfd = {.fd = link_wake_fd(g), .events = POLLIN};
		poll(&pfd, 1, 50);
		while (link_poll(g, &ev)) {
			count_event(ev.req, ev.index, ev.kind);
			seen += ev.kind == CORE_EV_FINISH;
			link_event_clear(&ev);
		}
	}
	for (int conv = 0; conv < 10; conv++)
		link_close_conv(g, conv);
	link_view view = {0};
	for (int i = 0; i < 400; i++) {
		link_view_get(g, &view);
		if (view.snap.st.blocks_used == 0 && view.snap.st.n_running == 0 && view.snap.st.n_waiting == 0)
			break;
		poll(NULL, 0, 5);
	}
	check_final("engine thread", &view.snap.st);
	link_view_deinit(&view);
	link_free(g);
}

/* ---- greedy through the tiers ---- */

static int32_t (*greedy_ids)[24];   /* [request] tokens */
static uint8_t *greedy_n;           /* [request] count */

static void on_greedy(void *ctx, const core_event *ev)
{
	(void)ctx;
	count_event(ev->req, ev->index, ev->kind);
	if (ev->kind == CORE_EV_TOKEN && greedy_n[ev->req] < 24)
		greedy_ids[ev->req][greedy_n[ev->req]++] = ev->token;
}

/* n_requests greedy requests (prompts sharing prefixes, conversations that
 * pin and close) into ids; the tiers as p says. */
static void soak_greedy(core_params p, const char *what, int32_t (*ids)[24], uint8_t *n)
{
	reset_counts();
	greedy_ids = ids;
	greedy_n = n;
	err e = {0};
	core *c = core_new(&p, on_greedy, NULL, &e);
	CHECK_(c != NULL, "%s: %s", what, e.msg);
	if (!c)
		return;
	uint64_t rng = 77;
	for (int r = 0; r < n_requests || !core_idle(c); r++) {
		if (r < n_requests) {
			int len = 8 + (int)(rng_next(&rng) % 120), stem = (int)(rng_next(&rng) % 5);
			for (int i = 0; i < len; i++)
				prompt_buf[i] = i < 40 ? 3 + (stem * 7 + i * 11) % 500 : 3 + (int32_t)(rng_next(&rng) % 500);
			samp_params sp = samp_default_params();
			sp.temp = 0;
			core_request q = {.id = r, .conv = stem, .prompt = prompt_buf, .n_prompt = len, .samp = sp,
					  .max_tokens = 24, .n = 1, .pin_tokens = rng_next(&rng) % 3 ? 0 : 16};
			n_completions[r] = 1;
			core_submit(c, &q, &e);
			if (rng_next(&rng) % 50 == 0)
				core_close_conv(c, stem);
		}
		if (core_step(c, &e) < 0) {
			CHECK_(0, "%s: step: %s", what, e.msg);
			break;
		}
	}
	for (int conv = 0; conv < 5; conv++)
		core_close_conv(c, conv);
	core_stats st;
	core_get_stats(c, &st);
	check_final(what, &st);
	CHECK_(st.host_swapped == 0, "%s: %lld swapped blocks left", what, (long long)st.host_swapped);
	if (p.host_blocks)
		CHECK_(st.demoted > 0, "%s: nothing fell to host memory", what);
	if (p.preempt == PREEMPT_SWAP)
		CHECK_(st.swapped_in > 0, "%s: nothing swapped back in", what);
	core_free(c);
}

static void soak_tiers(void)
{
	int32_t (*ref)[24] = xcalloc((size_t)n_requests, sizeof *ref), (*got)[24] = xcalloc((size_t)n_requests, sizeof *got);
	uint8_t *n_ref = xcalloc((size_t)n_requests, 1), *n_got = xcalloc((size_t)n_requests, 1);
	core_params p = params(DRAFT_NONE);
	p.preempt = PREEMPT_RECOMPUTE;
	soak_greedy(p, "greedy, no tiers", ref, n_ref);
	p.host_blocks = 48;
	p.preempt = PREEMPT_SWAP;
	soak_greedy(p, "greedy, host tier, swap", got, n_got);
	CHECK_(!memcmp(ref, got, sizeof *ref * (size_t)n_requests) && !memcmp(n_ref, n_got, (size_t)n_requests),
	       "greedy tokens differ with the host tier and swapping");
	memset(got, 0, sizeof *got * (size_t)n_requests);
	memset(n_got, 0, (size_t)n_requests);
	if (system("rm -rf build/test-soak-store") != 0)
		CHECK(0);
	p.host_blocks = 16;
	p.preempt = PREEMPT_AUTO;
	p.kv_store = "build/test-soak-store";
	soak_greedy(p, "greedy, host tier and disk store", got, n_got);
	CHECK_(!memcmp(ref, got, sizeof *ref * (size_t)n_requests) && !memcmp(n_ref, n_got, (size_t)n_requests),
	       "greedy tokens differ with the host tier and the disk store");
	free(ref);
	free(got);
	free(n_ref);
	free(n_got);
}

int main(void)
{
	const char *env = getenv("SOAK_REQUESTS");
	n_requests = env ? atoi(env) : 400;
	if (n_requests < 10)
		n_requests = 10;
	finishes = xcalloc(2 * (size_t)n_requests, sizeof *finishes);
	n_completions = xcalloc(2 * (size_t)n_requests, sizeof *n_completions);
	err e = {0};
	target = llama_open(MODEL, &(llama_params){.max_tokens = 128}, &e);
	draft = llama_open(DRAFT, &(llama_params){.max_tokens = 128}, &e);
	gguf_file *f = gguf_open(MODEL, &e);
	tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	CHECK_(target && draft && tk, "%s", e.msg);
	if (target && draft && tk) {
		soak_core(DRAFT_NONE, 1);
		soak_core(DRAFT_MODEL, 2);
		soak_core(DRAFT_NGRAM, 3);
		soak_engine(DRAFT_MODEL, 4);
		soak_tiers();
	}
	printf("soak: %d requests per run, %lld tokens streamed\n", n_requests, (long long)n_tokens_seen);
	tok_free(tk);
	llama_free(target);
	llama_free(draft);
	free(finishes);
	free(n_completions);
	return TEST_DONE();
}
