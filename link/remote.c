/* link/remote.c: the remote engine's thread (link/remote.h).
 *
 * One thread runs one libcurl multi handle: a transfer per streaming
 * request, plus the scrapes (/v1/models until the model is known, /metrics
 * and /pagechat/v1/pool every refresh period). It sleeps in curl_multi_poll;
 * commands wake it with curl_multi_wakeup. A stream's bytes are cut into
 * server-sent event lines as they arrive, and each piece of text becomes a
 * TOKEN event at once. Requests that need the model's name wait for the
 * /v1/models answer (or its failure, which fails them with its line).
 * Commands and events travel on link/queue.h queues; the lock here guards
 * only the published view; nothing waits on the network while holding it. */
#include "link/remote_int.h"

#include "models/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- scrapes ---- */

/* Starts a GET of path (on r->active, id -1). */
static void scrape(rem *r, enum xfer_kind kind, const char *path)
{
	xfer *x = xcalloc(1, sizeof *x);
	x->kind = kind;
	x->id = -1;
	if (xfer_begin(r, x, path)) {
		xfer_free(x);
		return;
	}
	x->next = r->active;
	r->active = x;
	if (kind == X_MODELS)
		r->probing = true;
	else if (kind == X_METRICS)
		r->metrics_busy = true;
	else
		r->pool_busy = true;
}


/* The model's name (when not given) and context from a /v1/models body. */
static void models_read(rem *r, const xfer *x)
{
	err e = {0};
	json_doc *d = json_parse(x->in ? x->in : "", x->n_in, &e);
	const json *data = d ? json_get(json_root(d), "data") : NULL;
	for (size_t i = 0; data && data->type == JSON_ARR && i < data->n; i++) {
		const json *id = json_get(&data->items[i], "id"), *ml = json_get(&data->items[i], "max_model_len");
		if (!id || id->type != JSON_STR)
			continue;
		if (!r->model_given && !r->model[0])
			snprintf(r->model, sizeof r->model, "%s", id->str);
		if (!strcmp(id->str, r->model) && ml && ml->type == JSON_NUM) {
			pthread_mutex_lock(&r->mu);
			r->view.server.max_model_len = rem_int(ml->num);
			pthread_mutex_unlock(&r->mu);
		}
	}
	json_free(d);
}

/* /v1/models answered (or failed): the waiting streams start, or fail with
 * the reason when the server cannot be used. */
static void models_done(rem *r, xfer *x, CURLcode rc)
{
	char line[800] = "", why[256];
	enum link_state st = LINK_DOWN;
	r->probing = false;
	if (rc != CURLE_OK && x->status == 0) {
		snprintf(line, sizeof line, "cannot reach %s: %s", r->base, x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
	} else if (x->status == 401 || x->status == 403) {
		rem_error_text(x->in, x->n_in, why, sizeof why);
		snprintf(line, sizeof line, "the server refused the API key (HTTP %ld%s%s): give --api-key KEY",
			 x->status, why[0] ? ": " : "", why);
		st = LINK_REFUSED;
	} else {
		if (x->status == 200)
			models_read(r, x);
		r->model_known = true; /* a server without /v1/models gets no model name */
	}
	pthread_mutex_lock(&r->mu);
	snprintf(r->view.server.model, sizeof r->view.server.model, "%s", r->model);
	pthread_mutex_unlock(&r->mu);
	rem_view_state(r, line[0] ? st : LINK_UP, line);
	xfer *w = r->waiting;
	r->waiting = NULL;
	while (w) {
		xfer *next = w->next;
		if (line[0])
			stream_finish(w, FIN_ERROR, line);
		else
			stream_start(r, w);
		w = next;
	}
}

static void metrics_done(rem *r, xfer *x, CURLcode rc)
{
	r->metrics_busy = false;
	link_figure fig[LF_N] = {0};
	char kind[32] = "";
	if (x->status == 200)
		rem_parse_metrics(x->in ? x->in : "", x->n_in, fig, kind, sizeof kind, &r->ctr);
	if (x->status == 0 && rc != CURLE_OK) { /* the server went away while idle, too */
		char line[800];
		snprintf(line, sizeof line, "cannot reach %s: %s", r->base, x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
		rem_view_state(r, LINK_DOWN, line);
	} else if (x->status != 0 && r->unreachable) {
		rem_view_state(r, LINK_UP, "");
	}
	pthread_mutex_lock(&r->mu);
	link_server *v = &r->view.server;
	v->metrics_status = rc == CURLE_OK || x->status ? (int)x->status : 0;
	memcpy(v->fig, fig, sizeof fig);
	snprintf(v->kind, sizeof v->kind, "%s", kind);
	r->view.seq++;
	pthread_mutex_unlock(&r->mu);
}

static void pool_done(rem *r, xfer *x)
{
	r->pool_busy = false;
	err e = {0};
	bool ok = x->status == 200 && rem_parse_pool(x->in ? x->in : "", x->n_in, &r->pool, &e) == 0;
	r->pool_absent = x->status == 404 || (x->status == 200 && !ok);
	pthread_mutex_lock(&r->mu);
	link_server *v = &r->view.server;
	v->has_pool = ok;
	if (ok)
		link_snapshot_copy(&v->pool, &r->pool);
	r->view.seq++;
	pthread_mutex_unlock(&r->mu);
}

/* ---- the thread ---- */

static void unlink_active(rem *r, xfer *x)
{
	for (xfer **p = &r->active; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			return;
		}
}

static void transfer_done(rem *r, CURL *h, CURLcode rc)
{
	xfer *x = NULL;
	curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
	if (!x)
		return;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
	unlink_active(r, x);
	switch (x->kind) {
	case X_STREAM:
		stream_done(r, x, rc);
		return;
	case X_MODELS:
		models_done(r, x, rc);
		break;
	case X_METRICS:
		metrics_done(r, x, rc);
		break;
	case X_POOL:
		pool_done(r, x);
		break;
	}
	xfer_free(x);
}

/* Ends request id wherever it is (cancelled). */
static void cancel_one(rem *r, int64_t id)
{
	xfer **lists[] = {&r->active, &r->waiting};
	for (size_t k = 0; k < ARRAY_LEN(lists); k++)
		for (xfer **p = lists[k]; *p; p = &(*p)->next)
			if ((*p)->kind == X_STREAM && (*p)->id == id) {
				xfer *x = *p;
				*p = x->next;
				stream_finish(x, FIN_CANCELLED, NULL);
				return;
			}
}

/* Starts (or parks until the model is known) a submitted stream. */
static void take_submit(rem *r, xfer *x)
{
	x->r = r;
	if (r->model_known || r->model_given) {
		stream_start(r, x);
	} else {
		x->next = r->waiting;
		r->waiting = x;
	}
}

/* Carries out the commands, oldest first; false once asked to stop. */
static bool take_commands(rem *r)
{
	bool stop = false;
	for (lq_node *n = lq_take(&r->cmds), *next; n; n = next) {
		next = n->next;
		rcmd *c = (rcmd *)n;
		if (c->kind == RC_SUBMIT)
			take_submit(r, c->x);
		else if (c->kind == RC_CANCEL)
			cancel_one(r, c->id);
		else
			stop = true;
		free(c);
	}
	if (r->waiting && !r->probing)
		scrape(r, X_MODELS, "/v1/models");
	return !stop;
}

static void scrape_due(rem *r)
{
	double now = now_s();
	if (now < r->next_scrape)
		return;
	r->next_scrape = now + r->refresh_ms / 1000.0;
	if (!r->metrics_busy)
		scrape(r, X_METRICS, "/metrics");
	if (!r->pool_absent && !r->pool_busy)
		scrape(r, X_POOL, "/pagechat/v1/pool");
}

static void *rem_main(void *arg)
{
	rem *r = arg;
	scrape(r, X_MODELS, "/v1/models");
	while (take_commands(r)) {
		scrape_due(r);
		int running;
		curl_multi_perform(r->multi, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(r->multi, &left)))
			if (msg->msg == CURLMSG_DONE)
				transfer_done(r, msg->easy_handle, msg->data.result);
		int ms = (int)MAX(1, MIN(1000, 1000 * (r->next_scrape - now_s())));
		curl_multi_poll(r->multi, NULL, 0, ms, NULL);
	}
	return NULL;
}

/* ---- the link's side ---- */

static void push_rcmd(rem *r, rcmd *c)
{
	lq_push(&r->cmds, &c->node);
	curl_multi_wakeup(r->multi);
}

static void remote_submit(elink *l, const link_request *q)
{
	rem *r = (rem *)l;
	xfer *x = xcalloc(1, sizeof *x);
	x->kind = X_STREAM;
	x->id = q->r.id;
	x->conv = q->r.conv;
	x->chat = q->msgs != NULL;
	x->body = rem_request_body(q, &x->body_len);
	rcmd *c = xcalloc(1, sizeof *c);
	c->kind = RC_SUBMIT;
	c->x = x;
	push_rcmd(r, c);
}

static void remote_cancel(elink *l, int64_t id)
{
	rcmd *c = xcalloc(1, sizeof *c);
	c->kind = RC_CANCEL;
	c->id = id;
	push_rcmd((rem *)l, c);
}

/* A server cannot branch an answer: new_id ends at once. */
static void remote_fork(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	(void)id, (void)index, (void)seed;
	const char *msg = "a server cannot branch a running answer";
	link_event ev = {.kind = CORE_EV_FINISH, .req = new_id, .conv = new_conv, .token = -1,
			 .text = xstrdup(msg), .text_len = strlen(msg), .finish = FIN_ERROR};
	rem_push_event((rem *)l, &ev);
}

static void remote_close_conv(elink *l, int conv)
{
	(void)l, (void)conv; /* a server holds no pins of ours */
}

static bool remote_view(elink *l, link_view *out)
{
	rem *r = (rem *)l;
	pthread_mutex_lock(&r->mu);
	bool newer = r->view.seq > out->seq;
	if (newer) {
		link_snapshot pool = out->server.pool; /* out's arrays, reused */
		out->seq = r->view.seq;
		out->has_server = true;
		out->server = r->view.server;
		out->server.pool = pool;
		link_snapshot_copy(&out->server.pool, &r->view.server.pool);
	}
	pthread_mutex_unlock(&r->mu);
	return newer;
}

static elink *remote_open(elink *l, err *e)
{
	err_set(e, "a server's link is its only one: start another for %s", ((rem *)l)->base);
	return NULL;
}

static void free_list(xfer *x)
{
	while (x) {
		xfer *next = x->next;
		xfer_free(x);
		x = next;
	}
}

static void free_rcmd(lq_node *n)
{
	rcmd *c = (rcmd *)n;
	if (c->kind == RC_SUBMIT)
		xfer_free(c->x);
	free(c);
}

/* Cancels every stream, joins the thread, frees everything. */
static void remote_free(elink *l)
{
	rem *r = (rem *)l;
	rcmd *c = xcalloc(1, sizeof *c);
	c->kind = RC_STOP;
	push_rcmd(r, c);
	pthread_join(r->thread, NULL);
	free_list(r->active);
	free_list(r->waiting);
	lq_deinit(&r->cmds, free_rcmd);
	curl_multi_cleanup(r->multi);
	link_deinit(&r->link);
	pthread_mutex_destroy(&r->mu);
	link_view_deinit(&r->view);
	link_snapshot_deinit(&r->pool);
	free(r->key);
	free(r);
}

static const link_ops remote_ops = {
	.submit = remote_submit, .cancel = remote_cancel, .fork = remote_fork, .close_conv = remote_close_conv,
	.view = remote_view, .open = remote_open, .free = remote_free,
};

/* r's base URL (without trailing slashes and /v1), key, model and view. */
static void remote_setup(rem *r, const link_server_params *p)
{
	snprintf(r->base, sizeof r->base, "%s", p->url);
	size_t n = strlen(r->base);
	while (n > 0 && r->base[n - 1] == '/')
		r->base[--n] = '\0';
	if (n >= 3 && !strcmp(r->base + n - 3, "/v1"))
		r->base[n -= 3] = '\0';
	r->key = p->api_key && *p->api_key ? xstrdup(p->api_key) : NULL;
	r->model_given = p->model && *p->model;
	snprintf(r->model, sizeof r->model, "%s", r->model_given ? p->model : "");
	r->refresh_ms = MAX(500, p->refresh_ms);
	r->ctr.gen_tokens = -1;
	r->view.has_server = true;
	snprintf(r->view.server.url, sizeof r->view.server.url, "%s", r->base);
	snprintf(r->view.server.model, sizeof r->view.server.model, "%s", r->model);
	r->view.seq = 1;
}

elink *link_start_server(const link_server_params *p, err *e)
{
	if (strncmp(p->url, "http://", 7) && strncmp(p->url, "https://", 8)) {
		err_set(e, "--server wants an http:// or https:// URL, not '%s'", p->url);
		return NULL;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		err_set(e, "libcurl cannot start");
		return NULL;
	}
	rem *r = xcalloc(1, sizeof *r);
	remote_setup(r, p);
	pthread_mutex_init(&r->mu, NULL);
	lq_init(&r->cmds, false, NULL); /* no pipe: cannot fail */
	bool linked = link_init(&r->link, &remote_ops, 0, NULL) == 0;
	if (linked && (r->multi = curl_multi_init()) && link_thread_start(&r->thread, rem_main, r) == 0)
		return &r->link;
	err_set(e, "cannot start the thread that talks to %s", r->base);
	if (r->multi)
		curl_multi_cleanup(r->multi);
	if (linked)
		link_deinit(&r->link);
	lq_deinit(&r->cmds, NULL);
	pthread_mutex_destroy(&r->mu);
	free(r->key);
	free(r);
	return NULL;
}
