/* tests/test_engine.c: the engine thread driven as the UI drives it: commands
 * from this thread, events through the wake-up fd and poll(). Outputs must
 * equal gen_run's solo reference; cancel, fork, close and stop must work
 * while requests run; the snapshot's rates come down to 0 once idle. Also
 * the TSan target for the two-thread design. */
#include "link/link.h"
#include "engine/gen.h"
#include "tests/test.h"

#include <poll.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define N_REQ 8

static int32_t got[16][300];
static int n_got[16], n_fin[16];
static enum core_finish fin[16];
static char text[16][2048];

static void drain(elink *g)
{
	link_event ev;
	while (link_poll(g, &ev)) {
		int r = (int)ev.req;
		if (ev.kind == CORE_EV_TOKEN) {
			if (n_got[r] < 300)
				got[r][n_got[r]++] = ev.token;
			strncat(text[r], ev.text, sizeof text[r] - strlen(text[r]) - 1);
		} else {
			n_fin[r]++;
			fin[r] = ev.finish;
		}
		link_event_clear(&ev);
	}
}

/* Waits (poll on the fd) until request ids [0, n) have all finished. */
static bool wait_finished(elink *g, const int *ids, int n)
{
	for (int spins = 0; spins < 20000; spins++) {
		bool all = true;
		for (int i = 0; i < n; i++)
			all &= n_fin[ids[i]] > 0;
		if (all)
			return true;
		struct pollfd pfd = {.fd = link_wake_fd(g), .events = POLLIN};
		poll(&pfd, 1, 100);
		drain(g);
	}
	return false;
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

int main(void)
{
	err e = {0};
	llama_model *m = llama_open(MODEL, &(llama_params){.max_tokens = 256}, &e);
	gguf_file *f = gguf_open(MODEL, &e);
	tok *tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	CHECK_(m && tk, "%s", e.msg);
	if (!m || !tk)
		return TEST_DONE();
	static int32_t prompts[N_REQ][64], ref[N_REQ][301];
	int n_prompt[N_REQ];
	samp_params sp = samp_default_params();
	sp.temp = 0;
	/* the references first: the model is the engine thread's once it starts */
	for (int i = 0; i < N_REQ; i++) {
		char s[64];
		snprintf(s, sizeof s, "Once upon a time, %d friends went to the %s", i + 2,
			 i % 2 ? "park" : "sea");
		int n = tok_encode(tk, s, strlen(s), TOK_ADD_BOS, prompts[i], 64);
		gen_params gp = {.samp = sp, .n_predict = 40 + 10 * i, .n_ctx = 2048, .block_tokens = 16};
		gen_stats st;
		ref[i][0] = 0;
		CHECK(gen_run(m, tk, prompts[i], n, &gp, collect, ref[i], &st, &e) == 0);
		n_prompt[i] = n;
	}
	core_params cp = {.model = m, .tok = tk, .pool_blocks = 48, .block_tokens = 16,
			  .step_tokens = 128, .check = true};
	elink *g = link_start_local(&cp, &e);
	CHECK_(g != NULL, "%s", e.msg);
	int ids[N_REQ];
	for (int i = 0; i < N_REQ; i++) {
		core_request r = {.id = i, .conv = i % 3, .prompt = prompts[i], .n_prompt = n_prompt[i], .samp = sp,
				  .max_tokens = 40 + 10 * i, .n = 1, .pin_tokens = i < 2 ? 8 : 0};
		link_submit(g, &(link_request){.r = r});
		ids[i] = i;
	}
	/* a long one to cancel, and a fork of request 7 */
	static int32_t longp[200];
	for (int i = 0; i < 200; i++)
		longp[i] = prompts[0][i % 10];
	core_request r = {.id = 10, .prompt = longp, .n_prompt = 200, .samp = sp, .max_tokens = 1000, .n = 1};
	link_submit(g, &(link_request){.r = r});
	link_fork(g, 7, 0, 11, 5, 99);
	link_cancel(g, 10);
	CHECK(wait_finished(g, ids, N_REQ));
	int more[] = {10, 11};
	CHECK(wait_finished(g, more, 2));
	for (int i = 0; i < N_REQ; i++) {
		CHECK_EQ_INT(n_fin[i], 1);
		CHECK_(n_got[i] == ref[i][0] && !memcmp(got[i], ref[i] + 1, (size_t)n_got[i] * 4),
		       "request %d differs from its solo run (%d vs %d tokens, first %d vs %d)", i, n_got[i], ref[i][0], got[i][0], ref[i][1]);
	}
	CHECK(fin[10] == FIN_CANCELLED);
	CHECK(n_fin[11] == 1);
	/* the text streamed is the decoded ids */
	char want[2048];
	int n = tok_detokenize(tk, got[3], n_got[3], false, want, sizeof want);
	CHECK(n > 0 && !strcmp(want, text[3]));

	link_view view = {0};
	link_close_conv(g, 0);
	link_close_conv(g, 1);
	/* snapshots arrive; after everything finished and pins closed, no block is in use */
	bool settled = false;
	for (int i = 0; i < 200 && !settled; i++) {
		link_view_get(g, &view);
		settled = view.snap.st.n_running == 0 && view.snap.st.blocks_used == 0;
		if (!settled)
			poll(NULL, 0, 10);
		drain(g);
	}
	CHECK(settled);
	CHECK_EQ_INT(view.snap.n_blocks, 48);
	int cached = 0;
	for (int64_t b = 0; b < view.snap.n_blocks; b++)
		cached += view.snap.map[b].state == BLK_CACHED;
	CHECK(cached > 0 && cached == view.snap.st.blocks_cached);
	CHECK(view.snap.st.cached_tokens >= 0 && view.snap.st.finished >= N_REQ + 2);
	CHECK(!link_view_get(g, &view) || view.snap.seq > 0);
	/* idle: the rates come down to 0 within a second or so */
	bool zero = false;
	for (int i = 0; i < 300 && !zero; i++) {
		link_view_get(g, &view);
		zero = view.snap.decode_tps == 0 && view.snap.prefill_tps == 0;
		if (!zero)
			poll(NULL, 0, 10);
	}
	CHECK_(zero, "rates stayed at %g and %g while idle", view.snap.prefill_tps, view.snap.decode_tps);
	CHECK(view.snap.st.generated_tokens > 0 && view.snap.st.blocks_pinned <= view.snap.st.blocks_used + view.snap.st.blocks_cached);

	/* stopping while work is in flight loses nothing that matters and leaks nothing */
	for (int i = 0; i < 4; i++) {
		r = (core_request){.id = 12 + i, .prompt = longp, .n_prompt = 150, .samp = sp,
				   .max_tokens = 500, .n = 2};
		link_submit(g, &(link_request){.r = r});
	}
	poll(NULL, 0, 20);
	link_free(g);
	link_view_deinit(&view);
	tok_free(tk);
	llama_free(m);
	return TEST_DONE();
}
