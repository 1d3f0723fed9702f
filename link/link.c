/* link/link.c: the link interface's common part (link/link.h): the calls
 * that go to the engine behind a link, the event queue both engines fill,
 * and the snapshot and view records. */
#include "link/link_int.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---- the calls ---- */

unsigned link_caps(const elink *l) { return l->caps; }
void link_submit(elink *l, const link_request *q) { l->ops->submit(l, q); }
void link_cancel(elink *l, int64_t id) { l->ops->cancel(l, id); }
void link_close_conv(elink *l, int conv) { l->ops->close_conv(l, conv); }
bool link_view_get(elink *l, link_view *out) { return l->ops->view(l, out); }
elink *link_open(elink *l, err *e) { return l->ops->open(l, e); }

void link_fork(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	l->ops->fork(l, id, index, new_id, new_conv, seed);
}

void link_free(elink *l)
{
	if (l)
		l->ops->free(l);
}

/* ---- events ---- */

static void free_ev_node(lq_node *n)
{
	ev_node *e = (ev_node *)n;
	link_event_clear(&e->ev);
	free(e);
}

int link_init(elink *l, const link_ops *ops, unsigned caps, err *e)
{
	l->ops = ops;
	l->caps = caps;
	return lq_init(&l->events, true, e);
}

void link_deinit(elink *l)
{
	lq_deinit(&l->events, free_ev_node);
}

void link_push_event(elink *l, const link_event *ev)
{
	ev_node *n = xcalloc(1, sizeof *n);
	n->ev = *ev;
	lq_push(&l->events, &n->node);
}

bool link_poll(elink *l, link_event *ev)
{
	ev_node *n = (ev_node *)lq_pop(&l->events);
	if (!n)
		return false;
	*ev = n->ev;
	free(n);
	return true;
}

int link_wake_fd(const elink *l)
{
	return lq_wake_fd(&l->events);
}

void link_event_clear(link_event *ev)
{
	free(ev->text);
	ev->text = NULL;
}

int link_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(th, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* ---- the view ---- */

void link_snapshot_copy(link_snapshot *dst, const link_snapshot *src)
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
	if (src->n_blocks)
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

void link_snapshot_deinit(link_snapshot *s)
{
	free(s->map);
	free(s->seqs);
	free(s->seq_blocks);
	memset(s, 0, sizeof *s);
}

void link_view_deinit(link_view *v)
{
	link_snapshot_deinit(&v->snap);
	link_snapshot_deinit(&v->server.pool);
}

const char *link_fig_name(enum link_fig f)
{
	static const char *const names[LF_N] = {
		"KV usage", "prefix hits", "running", "waiting", "TTFT mean", "ITL mean", "gen tok/s", "KV tokens",
	};
	return f < LF_N ? names[f] : "?";
}
