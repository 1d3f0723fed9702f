/* link/engine.c: the local engine: a core on its own thread, reached
 * through links (link/link.h; the clients are link/engine_client.c). The
 * thread takes the commands, steps the core, and publishes the snapshot a
 * link's view shows. Locks are held only to copy data in or out; no lock
 * is held while stepping the model, and no two locks are ever nested. */
#include "link/engine_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- snapshot ---- */

/* Builds the snapshot in the engine's own buffer, then copies it under the
 * lock; at most every 50 ms while busy, always when idle. */
static void publish(eng *g, bool force)
{
	double now = now_s();
	if (!force && now - g->last_publish < 0.05)
		return;
	g->last_publish = now;
	link_snapshot *w = &g->work;
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
	link_snapshot_copy(&g->snap, w);
	pthread_mutex_unlock(&g->snap_mu);
}

/* The view of a local link: the snapshot alone. */
static bool local_view(elink *l, link_view *out)
{
	eng *g = ((eng_client *)l)->g;
	bool copied = false;
	pthread_mutex_lock(&g->snap_mu);
	if (g->snap.seq > out->snap.seq) {
		link_snapshot_copy(&out->snap, &g->snap);
		out->seq = out->snap.seq;
		out->has_snap = true;
		copied = true;
	}
	pthread_mutex_unlock(&g->snap_mu);
	return copied;
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
	if (!core_idle(g->core))
		return true;
	return lq_wait(&g->cmds, rates_pending(g) ? 0.5 : -1);
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

/* Carries out the commands waiting; false once one was STOP. */
static bool take_commands(eng *g)
{
	bool running = true;
	for (lq_node *n = lq_take(&g->cmds), *next; n; n = next) {
		next = n->next;
		cmd *c = (cmd *)n;
		if (c->kind == CMD_STOP)
			running = false;
		else if (running)
			client_apply(g, c);
		cmd_free(c);
	}
	return running;
}

static void *engine_main(void *arg)
{
	eng *g = arg;
	for (;;) {
		if (!wait_idle(g)) {
			publish(g, true);
			clients_wake(g);
			continue;
		}
		if (!take_commands(g))
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

/* ---- starting and stopping ---- */

static void free_cmd_node(lq_node *n)
{
	cmd_free((cmd *)n);
}

/* Stops the thread (when it runs), then frees everything, every client
 * still open included. */
static void eng_stop(eng *g)
{
	if (!pthread_equal(g->thread, pthread_self())) {
		cmd *c = xcalloc(1, sizeof *c);
		c->kind = CMD_STOP;
		lq_push(&g->cmds, &c->node);
		pthread_join(g->thread, NULL);
	}
	lq_deinit(&g->cmds, free_cmd_node);
	core_free(g->core);
	clients_deinit(g);
	pthread_mutex_destroy(&g->cli_mu);
	pthread_mutex_destroy(&g->snap_mu);
	link_snapshot_deinit(&g->work);
	link_snapshot_deinit(&g->snap);
	free(g);
}

/* link_free: the first link stops the engine; another closes. */
static void local_free(elink *l)
{
	eng_client *c = (eng_client *)l;
	if (c->slot == 0)
		eng_stop(c->g);
	else
		client_close(c);
}

static const link_ops local_ops = {
	.submit = client_submit, .cancel = client_cancel, .fork = client_fork,
	.close_conv = client_close_conv, .view = local_view, .open = client_open, .free = local_free,
};

elink *link_start_local(const core_params *p, err *e)
{
	eng *g = xcalloc(1, sizeof *g);
	g->core = core_new(p, route_event, g, e);
	if (!g->core) {
		free(g);
		return NULL;
	}
	lq_init(&g->cmds, false, NULL); /* no pipe: cannot fail */
	pthread_mutex_init(&g->cli_mu, NULL);
	pthread_mutex_init(&g->snap_mu, NULL);
	g->thread = pthread_self();
	g->min_step_s = MAX(0, p->min_step_ms) / 1000.0;
	if (clients_init(g, &local_ops, e)) {
		eng_stop(g);
		return NULL;
	}
	g->work.n_blocks = core_n_blocks(g->core);
	g->work.block_tokens = p->block_tokens > 0 ? p->block_tokens : 16;
	g->work.n_ctx = core_n_ctx(g->core);
	g->work.map = xcalloc((size_t)g->work.n_blocks, sizeof *g->work.map);
	g->work.map_cap = g->work.n_blocks;
	publish(g, true);
	if (link_thread_start(&g->thread, engine_main, g)) {
		err_set(e, "cannot start the engine thread");
		g->thread = pthread_self();
		eng_stop(g);
		return NULL;
	}
	return &g->clients[0]->link;
}
