/* link/engine.c: the engine thread, its command queue and the snapshot
 * (the clients and their events are link/engine_client.c). Locks are held
 * only to copy data in or out; no lock is held while stepping the model, and
 * no two locks are ever nested. */
#include "link/engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- commands (any thread pushes, engine thread pops) ---- */

void push_cmd(eng *g, cmd *c)
{
	pthread_mutex_lock(&g->cmd_mu);
	if (g->cmd_tail)
		g->cmd_tail->next = c;
	else
		g->cmd_head = c;
	g->cmd_tail = c;
	pthread_cond_signal(&g->cmd_cv);
	pthread_mutex_unlock(&g->cmd_mu);
}

void cmd_free(cmd *c)
{
	if (c->kind == CMD_SUBMIT) {
		free((void *)c->r.prompt);
		free((void *)c->r.stop_ids);
		free((void *)c->r.shift.old);
		for (int i = 0; i < c->r.n_stop_strs; i++)
			free((void *)c->r.stop_strs[i]);
		free((void *)c->r.stop_strs);
	}
	free(c);
}

/* ---- snapshot ---- */

static void copy_snapshot(eng_snapshot *dst, const eng_snapshot *src)
{
	core_block_info *map = dst->map;
	int64_t cap = dst->map_cap;
	if (cap < src->n_blocks) {
		cap = src->n_blocks;
		map = xrealloc(map, (size_t)cap * sizeof *map);
	}
	core_seq_info *seqs = dst->seqs;
	int32_t *blocks = dst->seq_blocks;
	int cap_seqs = dst->cap_seqs, cap_blocks = dst->cap_seq_blocks;
	int64_t nb = src->n_seqs ? src->seqs[src->n_seqs - 1].first + src->seqs[src->n_seqs - 1].n_blocks : 0;
	xgrow(&seqs, &cap_seqs, MAX(1, src->n_seqs), sizeof *seqs);
	xgrow(&blocks, &cap_blocks, MAX(1, nb), sizeof *blocks);
	*dst = *src;
	dst->map = map;
	dst->map_cap = cap;
	memcpy(map, src->map, (size_t)src->n_blocks * sizeof *map);
	dst->seqs = seqs;
	dst->cap_seqs = cap_seqs;
	dst->seq_blocks = blocks;
	dst->cap_seq_blocks = cap_blocks;
	if (src->n_seqs)
		memcpy(seqs, src->seqs, (size_t)src->n_seqs * sizeof *seqs);
	if (nb)
		memcpy(blocks, src->seq_blocks, (size_t)nb * sizeof *blocks);
}

/* Builds the snapshot in the engine's own buffer, then copies it under the
 * lock; at most every 50 ms while busy, always when idle. */
static void publish(eng *g, bool force)
{
	double now = now_s();
	if (!force && now - g->last_publish < 0.05)
		return;
	g->last_publish = now;
	eng_snapshot *w = &g->work;
	core_get_stats(g->core, &w->st);
	/* rates over wall-time windows of at least half a second (a short window
	 * at the end of a burst would inflate them) */
	double dt = now - g->rate_t;
	if (g->rate_t > 0 && dt >= 0.5) {
		w->prefill_tps = (double)(w->st.prefill_tokens - g->rate_prefill) / dt;
		w->decode_tps = (double)(w->st.generated_tokens - g->rate_decode) / dt;
	}
	if (g->rate_t == 0 || dt >= 0.5) {
		g->rate_t = now;
		g->rate_prefill = w->st.prefill_tokens;
		g->rate_decode = w->st.generated_tokens;
	}
	core_block_map(g->core, w->map);
	w->n_seqs = core_seq_tables(g->core, &w->seqs, &w->cap_seqs, &w->seq_blocks, &w->cap_seq_blocks);
	w->seq++;
	pthread_mutex_lock(&g->snap_mu);
	copy_snapshot(&g->snap, w);
	pthread_mutex_unlock(&g->snap_mu);
}

bool eng_snapshot_get(eng *g, eng_snapshot *out)
{
	bool copied = false;
	pthread_mutex_lock(&g->snap_mu);
	if (g->snap.seq > out->seq) {
		copy_snapshot(out, &g->snap);
		copied = true;
	}
	pthread_mutex_unlock(&g->snap_mu);
	return copied;
}

void eng_snapshot_deinit(eng_snapshot *s)
{
	free(s->map);
	free(s->seqs);
	free(s->seq_blocks);
	memset(s, 0, sizeof *s);
}

/* ---- the thread ---- */

/* Idle with rates still to bring down (or a window still open): the engine
 * wakes every half second to publish them until they are 0. */
static bool rates_pending(const eng *g)
{
	return g->work.prefill_tps > 0 || g->work.decode_tps > 0 ||
	       g->work.st.prefill_tokens != g->rate_prefill || g->work.st.generated_tokens != g->rate_decode;
}

/* Waits for a command while idle; false when it woke for the rates only. */
static bool wait_idle(eng *g)
{
	bool woken = true;
	pthread_mutex_lock(&g->cmd_mu);
	while (!g->cmd_head && core_idle(g->core) && woken) {
		if (!rates_pending(g)) {
			pthread_cond_wait(&g->cmd_cv, &g->cmd_mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		woken = pthread_cond_timedwait(&g->cmd_cv, &g->cmd_mu, &ts) != ETIMEDOUT;
	}
	pthread_mutex_unlock(&g->cmd_mu);
	return woken;
}

/* A paced engine (a demo) sleeps out the rest of the step's time. */
static void pace(const eng *g, double t0)
{
	double left = g->min_step_s - (now_s() - t0);
	if (g->min_step_s <= 0 || left <= 0 || core_idle(g->core))
		return;
	struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
	nanosleep(&ts, NULL);
}

static void *engine_main(void *arg)
{
	eng *g = arg;
	bool running = true;
	while (running) {
		if (!wait_idle(g)) {
			publish(g, true);
			clients_wake(g);
			continue;
		}
		pthread_mutex_lock(&g->cmd_mu);
		cmd *list = g->cmd_head;
		g->cmd_head = g->cmd_tail = NULL;
		pthread_mutex_unlock(&g->cmd_mu);
		while (list) {
			cmd *next = list->next;
			if (list->kind == CMD_STOP)
				running = false;
			else if (running)
				client_apply(g, list);
			cmd_free(list);
			list = next;
		}
		if (!running)
			break;
		err e;
		double t0 = now_s();
		if (!core_idle(g->core))
			core_step(g->core, &e); /* a model failure finishes requests with events */
		publish(g, core_idle(g->core) || g->min_step_s > 0);
		clients_wake(g);
		pace(g, t0);
	}
	return NULL;
}

eng *eng_start(const core_params *p, err *e)
{
	eng *g = xcalloc(1, sizeof *g);
	g->core = core_new(p, route_event, g, e);
	if (!g->core) {
		free(g);
		return NULL;
	}
	pthread_mutex_init(&g->cmd_mu, NULL);
	pthread_cond_init(&g->cmd_cv, NULL);
	pthread_mutex_init(&g->cli_mu, NULL);
	pthread_mutex_init(&g->snap_mu, NULL);
	g->thread = pthread_self();
	g->min_step_s = MAX(0, p->min_step_ms) / 1000.0;
	if (clients_init(g, e)) {
		eng_stop(g);
		return NULL;
	}
	g->work.n_blocks = core_n_blocks(g->core);
	g->work.block_tokens = p->block_tokens > 0 ? p->block_tokens : 16;
	g->work.n_ctx = core_n_ctx(g->core);
	g->work.map = xcalloc((size_t)g->work.n_blocks, sizeof *g->work.map);
	g->work.map_cap = g->work.n_blocks;
	publish(g, true);
	if (pthread_create(&g->thread, NULL, engine_main, g)) {
		err_set(e, "cannot start the engine thread");
		g->thread = pthread_self();
		eng_stop(g);
		return NULL;
	}
	return g;
}

void eng_stop(eng *g)
{
	if (!g)
		return;
	if (!pthread_equal(g->thread, pthread_self())) {
		cmd *c = xcalloc(1, sizeof *c);
		c->kind = CMD_STOP;
		push_cmd(g, c);
		pthread_join(g->thread, NULL);
	}
	while (g->cmd_head) {
		cmd *n = g->cmd_head->next;
		cmd_free(g->cmd_head);
		g->cmd_head = n;
	}
	core_free(g->core);
	clients_deinit(g);
	pthread_mutex_destroy(&g->cmd_mu);
	pthread_cond_destroy(&g->cmd_cv);
	pthread_mutex_destroy(&g->cli_mu);
	pthread_mutex_destroy(&g->snap_mu);
	eng_snapshot_deinit(&g->work);
	eng_snapshot_deinit(&g->snap);
	free(g);
}
