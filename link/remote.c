/* link/remote.c: the remote engine's thread (link/remote.h).
 *
 * One thread runs one libcurl multi handle: a transfer per streaming
 * request, plus the scrapes (/v1/models until the model is known, /metrics
 * and /pagechat/v1/pool every refresh period). It sleeps in curl_multi_poll;
 * commands wake it with curl_multi_wakeup. A stream's bytes are cut into
 * server-sent event lines as they arrive, and each piece of text becomes a
 * TOKEN event at once. Requests that need the model's name wait for the
 * /v1/models answer (or its failure, which fails them with its line). The
 * lock guards only the command list, the event queue and the published
 * view; nothing waits on the network while holding it. */
#include "link/remote_int.h"

#include "models/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- events and the view (any thread, under mu) ---- */

void rem_push_event(rem *r, const eng_event *ev)
{
	ev_node *n = xcalloc(1, sizeof *n);
	n->ev = *ev;
	pthread_mutex_lock(&r->mu);
	if (r->tail)
		r->tail->next = n;
	else
		r->head = n;
	r->tail = n;
	bool need = !r->signalled;
	r->signalled = true;
	pthread_mutex_unlock(&r->mu);
	if (need) {
		ssize_t w;
		do
			w = write(r->wake[1], "e", 1);
		while (w < 0 && errno == EINTR);
	}
}

bool rem_poll(rem *r, eng_event *ev)
{
	pthread_mutex_lock(&r->mu);
	ev_node *n = r->head;
	if (n) {
		r->head = n->next;
		if (!r->head)
			r->tail = NULL;
	} else {
		char buf[16];
		while (read(r->wake[0], buf, sizeof buf) > 0)
			;
		r->signalled = false;
	}
	pthread_mutex_unlock(&r->mu);
	if (!n)
		return false;
	*ev = n->ev;
	free(n);
	return true;
}

int rem_wake_fd(const rem *r)
{
	return r->wake[0];
}

void rem_view_state(rem *r, enum rem_state st, const char *problem)
{
	if (problem) /* the scrapes tell when an unreachable server is back */
		r->unreachable = st == REM_DOWN && !strncmp(problem, "cannot reach", 12);
	pthread_mutex_lock(&r->mu);
	r->view.state = st;
	if (problem)
		snprintf(r->view.problem, sizeof r->view.problem, "%s", problem);
	r->view.seq++;
	pthread_mutex_unlock(&r->mu);
}

bool rem_view_get(rem *r, rem_view *out)
{
	pthread_mutex_lock(&r->mu);
	bool newer = r->view.seq > out->seq;
	if (newer) {
		core_block_info *map = out->pool.map;
		int64_t cap = out->pool.map_cap, n = r->view.pool.n_blocks;
		if (n > cap) {
			free(map);
			map = xmalloc((size_t)n * sizeof *map);
			cap = n;
		}
		*out = r->view;
		if (n)
			memcpy(map, r->view.pool.map, (size_t)n * sizeof *map);
		out->pool.map = map;
		out->pool.map_cap = cap;
	}
	pthread_mutex_unlock(&r->mu);
	return newer;
}

void rem_view_deinit(rem_view *v)
{
	free(v->pool.map);
	v->pool.map = NULL;
	v->pool.map_cap = 0;
}

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
			r->view.max_model_len = rem_int(ml->num);
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
	r->probing = false;
	if (rc != CURLE_OK && x->status == 0) {
		snprintf(line, sizeof line, "cannot reach %s: %s", r->base, x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
	} else if (x->status == 401 || x->status == 403) {
		rem_error_text(x->in, x->n_in, why, sizeof why);
		snprintf(line, sizeof line, "the server refused the API key (HTTP %ld%s%s): give --api-key KEY",
			 x->status, why[0] ? ": " : "", why);
	} else {
		if (x->status == 200)
			models_read(r, x);
		r->model_known = true; /* a server without /v1/models gets no model name */
	}
	pthread_mutex_lock(&r->mu);
	snprintf(r->view.model, sizeof r->view.model, "%s", r->model);
	pthread_mutex_unlock(&r->mu);
	rem_view_state(r, line[0] ? REM_DOWN : REM_UP, line);
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
	rem_figure fig[RF_N] = {0};
	char kind[32] = "";
	if (x->status == 200)
		rem_parse_metrics(x->in ? x->in : "", x->n_in, fig, kind, sizeof kind, &r->ctr);
	if (x->status == 0 && rc != CURLE_OK) { /* the server went away while idle, too */
		char line[800];
		snprintf(line, sizeof line, "cannot reach %s: %s", r->base, x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
		rem_view_state(r, REM_DOWN, line);
	} else if (x->status != 0 && r->unreachable) {
		rem_view_state(r, REM_UP, "");
	}
	pthread_mutex_lock(&r->mu);
	r->view.metrics_status = rc == CURLE_OK || x->status ? (int)x->status : 0;
	memcpy(r->view.fig, fig, sizeof fig);
	snprintf(r->view.kind, sizeof r->view.kind, "%s", kind);
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
	rem_view *v = &r->view;
	v->has_pool = ok;
	if (ok) {
		if (r->pool.n_blocks > v->pool.map_cap) {
			free(v->pool.map);
			v->pool.map = xmalloc((size_t)r->pool.n_blocks * sizeof *v->pool.map);
			v->pool.map_cap = r->pool.n_blocks;
		}
		core_block_info *map = v->pool.map;
		int64_t cap = v->pool.map_cap;
		v->pool = r->pool;
		v->pool.map = map;
		v->pool.map_cap = cap;
		memcpy(map, r->pool.map, (size_t)r->pool.n_blocks * sizeof *map);
	}
	v->seq++;
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

/* Takes the commands; false once asked to stop. */
static bool take_commands(rem *r)
{
	pthread_mutex_lock(&r->mu);
	xfer *s = r->submits;
	r->submits = NULL;
	int64_t *cancels = r->cancels;
	int n_cancels = r->n_cancels;
	r->cancels = NULL;
	r->n_cancels = r->cap_cancels = 0;
	bool stop = r->stop;
	pthread_mutex_unlock(&r->mu);
	xfer *rev = NULL; /* oldest first */
	while (s) {
		xfer *next = s->next;
		s->next = rev;
		rev = s;
		s = next;
	}
	for (xfer *x = rev, *next; x; x = next) {
		next = x->next;
		x->r = r;
		if (r->model_known || r->model_given) {
			stream_start(r, x);
		} else {
			x->next = r->waiting;
			r->waiting = x;
		}
	}
	for (int i = 0; i < n_cancels; i++)
		cancel_one(r, cancels[i]);
	free(cancels);
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

/* ---- the caller's side ---- */

rem *rem_start(const rem_params *p, err *e)
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
	snprintf(r->view.url, sizeof r->view.url, "%s", r->base);
	snprintf(r->view.model, sizeof r->view.model, "%s", r->model);
	r->view.seq = 1;
	pthread_mutex_init(&r->mu, NULL);
	bool piped = pipe(r->wake) == 0;
	for (int i = 0; piped && i < 2; i++) {
		fcntl(r->wake[i], F_SETFL, fcntl(r->wake[i], F_GETFL) | O_NONBLOCK);
		fcntl(r->wake[i], F_SETFD, FD_CLOEXEC);
	}
	if (piped && (r->multi = curl_multi_init()) && pthread_create(&r->thread, NULL, rem_main, r) == 0)
		return r;
	err_set(e, "cannot start the thread that talks to %s", r->base);
	if (r->multi)
		curl_multi_cleanup(r->multi);
	if (piped)
		close(r->wake[0]), close(r->wake[1]);
	pthread_mutex_destroy(&r->mu);
	free(r->key);
	free(r);
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

void rem_stop(rem *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_mutex_unlock(&r->mu);
	curl_multi_wakeup(r->multi);
	pthread_join(r->thread, NULL);
	free_list(r->active);
	free_list(r->waiting);
	free_list(r->submits);
	curl_multi_cleanup(r->multi);
	for (ev_node *n = r->head, *next; n; n = next) {
		next = n->next;
		eng_event_clear(&n->ev);
		free(n);
	}
	free(r->cancels);
	close(r->wake[0]);
	close(r->wake[1]);
	pthread_mutex_destroy(&r->mu);
	rem_view_deinit(&r->view);
	free(r->pool.map);
	free(r->key);
	free(r);
}

void rem_submit(rem *r, const rem_request *q)
{
	xfer *x = xcalloc(1, sizeof *x);
	x->kind = X_STREAM;
	x->id = q->id;
	x->conv = q->conv;
	x->chat = q->msgs != NULL;
	x->body = rem_request_body(q, &x->body_len);
	pthread_mutex_lock(&r->mu);
	x->next = r->submits;
	r->submits = x;
	pthread_mutex_unlock(&r->mu);
	curl_multi_wakeup(r->multi);
}

void rem_cancel(rem *r, int64_t id)
{
	pthread_mutex_lock(&r->mu);
	xgrow(&r->cancels, &r->cap_cancels, (int64_t)r->n_cancels + 1, sizeof *r->cancels);
	r->cancels[r->n_cancels++] = id;
	pthread_mutex_unlock(&r->mu);
	curl_multi_wakeup(r->multi);
}
