/* tests/test_engine_client.c: several front-ends on one engine thread. Three
 * threads each drive a client (one of them the default client, as the chat
 * UI does) with the same request and conversation ids; every client must get
 * exactly its own requests' events, equal to their solo runs. A client that
 * closes with a request running frees that request's blocks; the block map
 * shows the clients' conversations apart. Run under TSan by make
 * test-threads. */
#include "link/engine.h"
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
	eng *g;
	eng_client *cl;          /* NULL: the default client through eng_* */
	int k;                   /* which prompts */
	int32_t got[N_REQ][N_GEN];
	int n_got[N_REQ], n_fin[N_REQ], stray;
	bool ok;
} worker;

static bool pop(worker *w, eng_event *ev)
{
	return w->cl ? eng_client_poll(w->cl, ev) : eng_poll(w->g, ev);
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
			eng_client_submit(w->cl, &r);
		else
			eng_submit(w->g, &r);
	}
	int fd = w->cl ? eng_client_wake_fd(w->cl) : eng_wake_fd(w->g), done = 0;
	for (int spins = 0; spins < 3000 && done < N_REQ; spins++) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		poll(&p, 1, 10);
		eng_event ev;
		while (pop(w, &ev)) {
			int i = (int)ev.req - 1;
			if (i < 0 || i >= N_REQ || ev.conv != 1)
				w->stray++;
			else if (ev.kind == CORE_EV_TOKEN && w->n_got[i] < N_GEN)
				w->got[i][w->n_got[i]++] = ev.token;
			else if (ev.kind == CORE_EV_FINISH)
				done += ++w->n_fin[i] == 1;
			eng_event_clear(&ev);
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
static void check_close(eng *g)
{
	err e = {0};
	eng_client *cl = eng_client_open(g, &e);
	CHECK_(cl != NULL, "%s", e.msg);
	if (!cl)
		return;
	samp_params sp = samp_default_params();
	core_request r = {.id = 7, .conv = 5, .prompt = prompts[0][0], .n_prompt = n_prompt[0][0], .samp = sp,
			  .max_tokens = 1500, .n = 2};
	eng_client_submit(cl, &r);
	eng_snapshot snap = {0};
	bool seen = false;
	for (int i = 0; i < 300 && !seen; i++) {
		poll(NULL, 0, 5);
		eng_snapshot_get(g, &snap);
		for (int64_t b = 0; b < snap.n_blocks; b++)
			seen |= snap.map[b].state != BLK_FREE && snap.map[b].state != BLK_CACHED &&
				snap.map[b].conv >= ENG_CONV_IDS && snap.map[b].conv % ENG_CONV_IDS == 5;
	}
	CHECK_(seen, "the client's blocks show its own conversation id in the map");
	eng_client_close(cl);
	bool freed = false;
	for (int i = 0; i < 300 && !freed; i++) {
		poll(NULL, 0, 5);
		eng_snapshot_get(g, &snap);
		freed = snap.st.n_running == 0 && snap.st.n_waiting == 0 && snap.st.blocks_used == 0;
	}
	CHECK_(freed, "closing the client freed its blocks (%lld used)", (long long)snap.st.blocks_used);
	CHECK(snap.st.finished_by[FIN_CANCELLED] >= 2);
	eng_snapshot_deinit(&snap);
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
	eng *g = eng_start(&cp, &e);
	CHECK_(g != NULL, "%s", e.msg);
	static worker w[N_CLIENTS];
	pthread_t th[N_CLIENTS];
	for (int k = 0; k < N_CLIENTS; k++) {
		w[k] = (worker){.g = g, .k = k, .cl = k ? eng_client_open(g, &e) : NULL};
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
		eng_client_close(w[k].cl);
	}
	check_close(g);
	/* a client left open is freed by eng_stop */
	eng_client *left = eng_client_open(g, &e);
	CHECK(left != NULL && eng_default_client(g) != left);
	eng_stop(g);
	tok_free(tk);
	llama_free(m);
	return TEST_DONE();
}
