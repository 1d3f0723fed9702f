/* link/engine_client.c: the local engine's clients. A client is one link
 * (the chat's tabs, one HTTP request): its commands carry its own ids, which
 * the routes here turn into the core's ids and back, so that every event
 * reaches the client that submitted its request and no other. The event
 * queues are filled on the engine thread and emptied on the client's. */
#include "link/engine_int.h"

#include <stdlib.h>
#include <string.h>

static void push_cmd(eng *g, cmd *m)
{
	lq_push(&g->cmds, &m->node);
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

/* ---- opening and closing ---- */

static eng_client *client_new(eng *g, const link_ops *ops, err *e)
{
	eng_client *c = xcalloc(1, sizeof *c);
	c->g = g;
	if (link_init(&c->link, ops, LINK_TOKENS | LINK_FORK | LINK_SEVERAL, e)) {
		err_prefix(e, "an engine client");
		free(c);
		return NULL;
	}
	return c;
}

/* Frees c, its unread events and its pipe (c is out of the table already). */
static void client_free(eng_client *c)
{
	link_deinit(&c->link);
	free(c);
}

elink *client_open(elink *l, err *e)
{
	eng *g = ((eng_client *)l)->g;
	eng_client *c = client_new(g, l->ops, e);
	if (!c)
		return NULL;
	pthread_mutex_lock(&g->cli_mu);
	int slot = 1;
	while (slot < ENG_MAX_CLIENTS && g->clients[slot])
		slot++;
	if (slot < ENG_MAX_CLIENTS) {
		c->slot = slot;
		g->clients[slot] = c;
	}
	pthread_mutex_unlock(&g->cli_mu);
	if (slot == ENG_MAX_CLIENTS) {
		err_set(e, "the engine has %d clients open already", ENG_MAX_CLIENTS);
		client_free(c);
		return NULL;
	}
	return &c->link;
}

void client_close(eng_client *c)
{
	cmd *m = xcalloc(1, sizeof *m);
	m->kind = CMD_CLIENT_CLOSE;
	m->cl = c;
	push_cmd(c->g, m);
}

int clients_init(eng *g, const link_ops *ops, err *e)
{
	g->dirty = xcalloc(ENG_MAX_CLIENTS, sizeof *g->dirty);
	g->clients[0] = client_new(g, ops, e);
	return g->clients[0] ? 0 : -1;
}

void clients_deinit(eng *g)
{
	for (int i = 0; i < ENG_MAX_CLIENTS; i++)
		if (g->clients[i])
			client_free(g->clients[i]);
	free(g->routes);
	free(g->dirty);
}

/* ---- events (the engine thread pushes, the client's thread pops) ---- */

static void push_event(eng_client *c, const link_event *ev)
{
	link_push_event(&c->link, ev);
	if (!c->dirty) {
		c->dirty = true;
		c->g->dirty[c->g->n_dirty++] = c;
	}
}

void clients_wake(eng *g)
{
	for (int i = 0; i < g->n_dirty; i++) {
		g->dirty[i]->dirty = false;
		lq_wake(&g->dirty[i]->link.events);
	}
	g->n_dirty = 0;
}

/* ---- routes (engine thread only) ---- */

/* The route of core id, or NULL (routes are sorted by id). */
static route *route_of(eng *g, int64_t id)
{
	int lo = 0, hi = g->n_routes;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (g->routes[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < g->n_routes && g->routes[lo].id == id ? &g->routes[lo] : NULL;
}

/* The route of the client's request local, or NULL. */
static route *route_local(eng *g, const eng_client *c, int64_t local)
{
	for (int i = 0; i < g->n_routes; i++)
		if (g->routes[i].cl == c && g->routes[i].local == local)
			return &g->routes[i];
	return NULL;
}

static int64_t route_add(eng *g, eng_client *c, int64_t local, int conv, int left)
{
	xgrow(&g->routes, &g->cap_routes, (int64_t)g->n_routes + 1, sizeof *g->routes);
	int64_t id = g->next_id++;
	g->routes[g->n_routes++] = (route){.id = id, .local = local, .cl = c, .conv = conv, .left = left};
	return id;
}

static void route_remove(eng *g, route *r)
{
	int i = (int)(r - g->routes);
	memmove(r, r + 1, (size_t)(g->n_routes - i - 1) * sizeof *r);
	g->n_routes--;
}

/* The core's id for client c's conversation conv. */
static int core_conv(const eng_client *c, int conv)
{
	return c->slot == 0 ? conv : c->slot * LINK_CONV_IDS + (int)((unsigned)conv % LINK_CONV_IDS);
}

void route_event(void *ctx, const core_event *ce)
{
	eng *g = ctx;
	route *r = route_of(g, ce->req);
	if (!r)
		return; /* its client has gone */
	link_event ev = {
		.kind = ce->kind, .req = r->local, .conv = r->conv, .index = ce->index,
		.step = ce->step, .token = ce->token, .text = xstrndup(ce->text ? ce->text : "", ce->text_len),
		.text_len = ce->text_len, .finish = ce->finish, .m = ce->m,
	};
	push_event(r->cl, &ev);
	if (ce->kind == CORE_EV_FINISH && --r->left <= 0)
		route_remove(g, r);
}

/* ---- carrying out commands (engine thread) ---- */

static void apply_submit(eng *g, cmd *m)
{
	const core_request *q = &m->r;
	int left = q->beams > 0 ? q->beams : MAX(1, q->n);
	core_request r = *q;
	r.id = route_add(g, m->cl, q->id, q->conv, left);
	r.conv = core_conv(m->cl, q->conv);
	err e;
	if (core_submit(g->core, &r, &e)) {
		route *rt = route_of(g, r.id); /* refused: its events are out already */
		if (rt)
			route_remove(g, rt);
	}
}

static void apply_fork(eng *g, cmd *m)
{
	route *src = route_local(g, m->cl, m->id);
	int64_t from = src ? src->id : -1;
	int64_t id = route_add(g, m->cl, m->new_id, m->conv, 1);
	int rc = from >= 0 ? core_fork(g->core, from, m->index, id, core_conv(m->cl, m->conv), m->seed) : -1;
	if (rc == 0)
		return;
	const char *msg = rc == -2 ? "cannot fork now: the engine runs its most sequences at once; try again when "
				     "one has finished"
				   : "nothing to fork: that request has finished";
	route_event(g, &(core_event){.kind = CORE_EV_FINISH, .req = id, .conv = m->conv, .token = -1,
				      .text = msg, .text_len = strlen(msg), .finish = FIN_ERROR});
}

/* Cancels c's requests, drops it from the wake list and frees it. */
static void close_client(eng *g, eng_client *c)
{
	for (int i = 0; i < g->n_routes;) {
		if (g->routes[i].cl != c) {
			i++;
			continue;
		}
		int64_t id = g->routes[i].id;
		core_cancel(g->core, id);
		route *r = route_of(g, id);
		if (r) /* not known to the core any more */
			route_remove(g, r);
	}
	for (int i = 0; i < g->n_dirty; i++)
		if (g->dirty[i] == c)
			g->dirty[i--] = g->dirty[--g->n_dirty];
	pthread_mutex_lock(&g->cli_mu);
	g->clients[c->slot] = NULL;
	pthread_mutex_unlock(&g->cli_mu);
	client_free(c);
}

void client_apply(eng *g, cmd *m)
{
	route *r;
	switch (m->kind) {
	case CMD_SUBMIT:
		apply_submit(g, m);
		break;
	case CMD_CANCEL:
		if ((r = route_local(g, m->cl, m->id)))
			core_cancel(g->core, r->id);
		break;
	case CMD_FORK:
		apply_fork(g, m);
		break;
	case CMD_CLOSE_CONV:
		core_close_conv(g->core, core_conv(m->cl, m->conv));
		break;
	case CMD_CLIENT_CLOSE:
		close_client(g, m->cl);
		break;
	case CMD_STOP:
		break;
	}
}

/* ---- the commands' public side (the client's thread) ---- */

/* A copy of n ids, or NULL for none. */
static int32_t *copy_ids(const int32_t *ids, int n)
{
	if (n <= 0)
		return NULL;
	int32_t *c = xmalloc((size_t)n * sizeof *c);
	memcpy(c, ids, (size_t)n * sizeof *c);
	return c;
}

void client_submit(elink *l, const link_request *q)
{
	const core_request *r = &q->r;
	cmd *m = xcalloc(1, sizeof *m);
	m->kind = CMD_SUBMIT;
	m->cl = (eng_client *)l;
	m->r = *r;
	int32_t *p = xmalloc((size_t)MAX(1, r->n_prompt) * sizeof *p);
	memcpy(p, r->prompt, (size_t)MAX(0, r->n_prompt) * sizeof *p);
	m->r.prompt = p;
	m->r.n_stop_ids = MAX(0, r->n_stop_ids);
	m->r.n_stop_strs = MAX(0, r->n_stop_strs);
	m->r.stop_ids = copy_ids(r->stop_ids, r->n_stop_ids); /* the command owns its copies only */
	if (r->shift.n_old > 0)
		m->r.shift.old = copy_ids(r->shift.old, r->shift.n_old);
	else
		m->r.shift = (core_shift){0};
	m->r.stop_strs = NULL;
	if (r->n_stop_strs > 0) {
		char **s = xcalloc((size_t)r->n_stop_strs, sizeof *s);
		for (int i = 0; i < r->n_stop_strs; i++)
			s[i] = xstrdup(r->stop_strs[i] ? r->stop_strs[i] : "");
		m->r.stop_strs = (const char *const *)s;
	}
	push_cmd(m->cl->g, m);
}

void client_cancel(elink *l, int64_t id)
{
	eng_client *c = (eng_client *)l;
	cmd *m = xcalloc(1, sizeof *m);
	m->kind = CMD_CANCEL;
	m->cl = c;
	m->id = id;
	push_cmd(c->g, m);
}

void client_fork(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	eng_client *c = (eng_client *)l;
	cmd *m = xcalloc(1, sizeof *m);
	m->kind = CMD_FORK;
	m->cl = c;
	m->id = id;
	m->index = index;
	m->new_id = new_id;
	m->conv = new_conv;
	m->seed = seed;
	push_cmd(c->g, m);
}

void client_close_conv(elink *l, int conv)
{
	eng_client *c = (eng_client *)l;
	cmd *m = xcalloc(1, sizeof *m);
	m->kind = CMD_CLOSE_CONV;
	m->cl = c;
	m->conv = conv;
	push_cmd(c->g, m);
}
