/* tests/test_engine_client.c: several front-ends on one engine thread. Three
 * threads each drive a client (one of them the default client, as the chat
 * UI does) with the same request and conversation ids; every client must get
 * exactly its own requests' events, equal to their solo runs. A client that
 * closes with a request running frees that request's blocks; the block map
 * shows the clients' conversations apart. Run under TSan by make
 * test-threads. */
#include "link/link.h"
#include "engine/gen.h"
#include "tests/test.h"

#include <poll.h>
#include <pthread.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define N_CLIENTS 3
#define N_REQ 3              /* per client */
#define N_GEN 24

static int32_t prompts[N_CLIENTS][N_REQ][32];
static int n_prompt[N_CLIENTS][N_REQ];
static int32_t ref[N_CLIENTS][N_REQ][N_GEN + 1];

typedef struct worker {
	elink *g;
	elink *cl;               /* NULL: the engine's first link (g) */
	int k;                   /* which prompts */
	int32_t got[N_REQ][N_GEN];
	int n_got[N_REQ], n_fin[N_REQ], stray;
	bool ok;
} worker;

static bool pop(worker *w, link_event *ev)
{
	return w->cl ? link_poll(w->cl, ev) : link_poll(w->g, ev);
}

static void *run_worker(void *arg)
{
	worker *w = arg;
	samp_params sp = samp_default_params();
	sp.temp = 0;
	for (int i = 0; i < N_REQ; i++) {
		core_request r = {.id = i + 1, .conv = 1, .prompt = prompts[w->k][i], .n_prompt = n_prompt[w->k][i],
				  .samp = sp, .max_tokens = N_GEN, .n = 1};
		if (w->cl)
			link_submit(w->cl, &(link_request){.r = r});
		else
			link_submit(w->g, &(link_request){.r = r});
	}
	int fd = w->cl ? link_wake_fd(w->cl) : link_wake_fd(w->g), done = 0;
	for (int spins = 0; spins < 3000 && done < N_REQ; spins++) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		poll(&p, 1, 10);
		link_event ev;
		while (pop(w, &ev)) {
			int i = (int)ev.req - 1;
			if (i < 0 || i >= N_REQ || ev.conv != 1)
				w->stray++;
			else if (ev.kind == CORE_EV_TOKEN && w->n_got[i] < N_GEN)
				w->got[i][w->n_got[i]++] = ev.token;
			else if (ev.kind == CORE_EV_FINISH)
				done += ++w->n_fin[i] == 1;
			link_event_clear(&ev);
		}
	}
	w->ok = done == N_REQ;
	return NULL;
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

static void make_refs(llama_model *m, tok *tk)
{
	samp_params sp = samp_default_params();
	sp.temp = 0;
	err e = {0};
	for (int k = 0; k < N_CLIENTS; k++)
		for (int i = 0; i < N_REQ; i++) {
			char s[96];
			snprintf(s, sizeof s, "Client %d asked: once upon a time, %d cats went to the %s", k, i,
				 (k + i) % 2 ? "park" : "sea");
			n_prompt[k][i] = tok_encode(tk, s, strlen(s), TOK_ADD_BOS, prompts[k][i], 32);
			gen_params gp = {.samp = sp, .n_predict = N_GEN, .n_ctx = 2048, .block_tokens = 16};
			gen_stats st;
			ref[k][i][0] = 0;
			CHECK(gen_run(m, tk, prompts[k][i], n_prompt[k][i], &gp, collect, ref[k][i], &st, &e) == 0);
		}
}

/* A client closed mid-request: its blocks go back, nothing leaks. */
static void check_close(elink *g)
{
	err e = {0};
	elink *cl = link_open(g, &e);
	CHECK_(cl != NULL, "%s", e.msg);
	if (!cl)
		return;
	samp_params sp = samp_default_params();
	core_request r = {.id = 7, .conv = 5, .prompt = prompts[0][0], .n_prompt = n_prompt[0][0], .samp = sp,
			  .max_tokens = 1500, .n = 2};
	link_submit(cl, &(link_request){.r = r});
	link_view view = {0};
	bool seen = false;
	for (int i = 0; i < 300 && !seen; i++) {
		poll(NULL, 0, 5);
		link_view_get(g, &view);
		for (int64_t b = 0; b < view.snap.n_blocks; b++)
			seen |= view.snap.map[b].state != BLK_FREE && view.snap.map[b].state != BLK_CACHED &&
				view.snap.map[b].conv >= LINK_CONV_IDS && view.snap.map[b].conv % LINK_CONV_IDS == 5;
	}
	CHECK_(seen, "the client's blocks show its own conversation id in the map");
	link_free(cl);
	bool freed = false;
	for (int i = 0; i < 300 && !freed; i++) {
		poll(NULL, 0, 5);
		link_view_get(g, &view);
		freed = view.snap.st.n_running == 0 && view.snap.st.n_waiting == 0 && view.snap.st.blocks_used == 0;
	}
	CHECK_(freed, "closing the client freed its blocks (%lld used)", (long long)view.snap.st.blocks_used);
	CHECK(view.snap.st.finished_by[FIN_CANCELLED] >= 2);
	link_view_deinit(&view);
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
	make_refs(m, tk);
	core_params cp = {.model = m, .tok = tk, .pool_blocks = 64, .block_tokens = 16, .step_tokens = 128,
			  .check = true};
	elink *g = link_start_local(&cp, &e);
	CHECK_(g != NULL, "%s", e.msg);
	static worker w[N_CLIENTS];
	pthread_t th[N_CLIENTS];
	for (int k = 0; k < N_CLIENTS; k++) {
		w[k] = (worker){.g = g, .k = k, .cl = k ? link_open(g, &e) : NULL};
		CHECK(k == 0 || w[k].cl);
		pthread_create(&th[k], NULL, run_worker, &w[k]);
	}
	for (int k = 0; k < N_CLIENTS; k++) {
		pthread_join(th[k], NULL);
		CHECK_(w[k].ok && w[k].stray == 0, "client %d: all finished %d, stray events %d", k, w[k].ok,
		       w[k].stray);
		for (int i = 0; i < N_REQ; i++) {
			CHECK_EQ_INT(w[k].n_fin[i], 1);
			CHECK_(w[k].n_got[i] == ref[k][i][0] && !memcmp(w[k].got[i], ref[k][i] + 1,
									 (size_t)w[k].n_got[i] * 4),
			       "client %d request %d differs from its solo run", k, i);
		}
		link_free(w[k].cl);
	}
	check_close(g);
	/* a link left open is freed when the engine's first link stops it */
	elink *left = link_open(g, &e);
	CHECK(left != NULL && g != left);
	link_free(g);
	tok_free(tk);
	llama_free(m);
	return TEST_DONE();
}
