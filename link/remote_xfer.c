/* link/remote_xfer.c: the remote engine's transfers (libcurl easy
 * handles on the thread's multi handle) and its streams: a request's body
 * with the model put first, its server-sent events cut into lines as they
 * arrive, each piece of text a TOKEN event at once, and the one line a
 * failed stream ends with (unreachable, refused, cut off); and the state
 * of the view those outcomes change. Thread only. */
#include "link/remote_int.h"

#include "models/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- events and the view's state ---- */

void rem_push_event(rem *r, const link_event *ev)
{
	link_push_event(&r->link, ev);
	lq_wake(&r->link.events);
}

void rem_view_state(rem *r, enum link_state st, const char *problem)
{
	if (problem) /* the scrapes tell when an unreachable server is back */
		r->unreachable = st == LINK_DOWN && !strncmp(problem, "cannot reach", 12);
	pthread_mutex_lock(&r->mu);
	r->view.server.state = st;
	if (problem)
		snprintf(r->view.server.problem, sizeof r->view.server.problem, "%s", problem);
	r->view.seq++;
	pthread_mutex_unlock(&r->mu);
}

/* ---- transfers ---- */

static size_t on_data(char *p, size_t size, size_t n, void *ctx);

void xfer_free(xfer *x)
{
	if (!x)
		return;
	if (x->h) {
		curl_multi_remove_handle(x->r->multi, x->h);
		curl_easy_cleanup(x->h);
	}
	curl_slist_free_all(x->hdrs);
	free(x->in);
	free(x->body);
	free(x->post);
	free(x);
}

int xfer_begin(rem *r, xfer *x, const char *path)
{
	char url[512];
	snprintf(url, sizeof url, "%s%s", r->base, path);
	x->r = r;
	if (!(x->h = curl_easy_init()))
		return -1;
	CURL *h = x->h;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_MS);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	if (r->key) {
		char auth[600];
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", r->key);
		x->hdrs = curl_slist_append(x->hdrs, auth);
	}
	if (x->post) {
		x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/json");
		x->hdrs = curl_slist_append(x->hdrs, "Accept: text/event-stream");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->post);
		/* a long prefill sends nothing for a while; a dead peer sends nothing at all */
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 600L);
	} else {
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, SCRAPE_MS);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
	return curl_multi_add_handle(r->multi, h) == CURLM_OK ? 0 : -1;
}

/* ---- streams ---- */

/* The stream's figures so far, as the engine defines them (seq_metrics):
 * this client's clock, the server's token count where it sent one, else the
 * pieces streamed. Live and final figures both come from here. */
static core_req_metrics xfer_metrics(const xfer *x)
{
	core_req_metrics m = x->m;
	if (x->t_first > 0) {
		m.ttft_ms = 1000 * (x->t_first - x->t_start);
		if (m.n_gen <= 0)
			m.n_gen = x->n_pieces;
		if (m.n_gen > 1)
			m.tpot_ms = 1000 * (x->t_last - x->t_first) / (m.n_gen - 1);
	}
	return m;
}

void stream_finish(xfer *x, enum core_finish fin, const char *error)
{
	link_event ev = {.kind = CORE_EV_FINISH, .req = x->id, .conv = x->conv, .token = -1, .finish = fin,
			.m = xfer_metrics(x)};
	if (x->n_pieces > 0) { /* whether its figures count tokens or pieces of text */
		rem *r = x->r;
		pthread_mutex_lock(&r->mu);
		r->view.server.counts_pieces = !x->counted;
		r->view.seq++;
		pthread_mutex_unlock(&r->mu);
	}
	ev.text = xstrdup(error ? error : "");
	ev.text_len = strlen(ev.text);
	rem_push_event(x->r, &ev);
	xfer_free(x);
}

void stream_start(rem *r, xfer *x)
{
	char *q = NULL; /* the model's name as a JSON string */
	size_t qn = 0, qcap = 0;
	if (r->model[0])
		json_put_str(&q, &qn, &qcap, r->model, strlen(r->model));
	sbuf b = {0};
	sb_put(&b, "{", 1);
	if (q)
		sb_printf(&b, "\"model\":%.*s,", (int)qn, q);
	free(q);
	sb_put(&b, x->body, x->body_len);
	x->post = b.p;
	x->t_start = now_s();
	if (xfer_begin(r, x, x->chat ? "/v1/chat/completions" : "/v1/completions")) {
		stream_finish(x, FIN_ERROR, "libcurl could not start the request");
		return;
	}
	x->next = r->active;
	r->active = x;
}

/* One "data:" payload of a stream. */
static void stream_event(xfer *x, const char *s, size_t len)
{
	if (len == 6 && !memcmp(s, "[DONE]", 6)) {
		x->done = true;
		return;
	}
	err e = {0};
	json_doc *d = json_parse(s, len, &e);
	if (!d)
		return; /* a line we cannot read is skipped, as other clients do */
	const json *o = json_root(d), *ch = json_get(o, "choices"), *u = json_get(o, "usage");
	if (json_get(o, "error"))
		rem_error_text(s, len, x->error, sizeof x->error);
	const json *c0 = ch && ch->type == JSON_ARR && ch->n ? &ch->items[0] : NULL;
	const json *t = x->chat ? json_get(json_get(c0, "delta"), "content") : json_get(c0, "text");
	/* the usage first: with continuous_usage_stats (vLLM's, pagechat's)
	 * every chunk counts the tokens so far, and this piece's figures are
	 * the server's count, not the pieces' */
	const json *ct = json_get(u, "completion_tokens"), *pt = json_get(u, "prompt_tokens");
	const json *cached = json_get(json_get(u, "prompt_tokens_details"), "cached_tokens");
	if (ct && ct->type == JSON_NUM) {
		x->m.n_gen = rem_int(ct->num);
		x->counted = true;
	}
	if (pt && pt->type == JSON_NUM)
		x->m.n_prompt = rem_int(pt->num);
	if (cached && cached->type == JSON_NUM)
		x->m.n_cached = rem_int(cached->num);
	if (t && t->type == JSON_STR && t->len) {
		double now = now_s();
		if (x->t_first == 0)
			x->t_first = now;
		x->t_last = now;
		x->n_pieces++;
		link_event ev = {.kind = CORE_EV_TOKEN, .req = x->id, .conv = x->conv, .token = -1,
				.text = xstrndup(t->str, t->len), .text_len = t->len, .m = xfer_metrics(x)};
		rem_push_event(x->r, &ev);
	}
	const json *fr = json_get(c0, "finish_reason");
	if (fr && fr->type == JSON_STR) {
		x->have_finish = true;
		x->finish = !strcmp(fr->str, "length") ? FIN_LENGTH : FIN_STOP;
	}
	json_free(d);
}

/* Takes the complete lines of x->in. */
static void stream_lines(xfer *x)
{
	size_t at = 0;
	for (;;) {
		char *nl = memchr(x->in + at, '\n', x->n_in - at);
		if (!nl)
			break;
		size_t len = (size_t)(nl - (x->in + at));
		const char *s = x->in + at;
		if (len && s[len - 1] == '\r')
			len--;
		if (len >= 5 && !memcmp(s, "data:", 5)) {
			size_t k = 5 + (len > 5 && s[5] == ' ');
			stream_event(x, s + k, len - k);
		}
		at = (size_t)(nl - x->in) + 1;
	}
	memmove(x->in, x->in + at, x->n_in - at);
	x->n_in -= at;
}

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
	xfer *x = ctx;
	size_t len = size * n;
	if (x->status == 0)
		curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
	bool lines = x->kind == X_STREAM && x->status == 200;
	size_t cap = lines ? BODY_CAP : x->kind == X_STREAM ? ERR_BODY_CAP : BODY_CAP;
	if (x->n_in + len > cap)
		return lines ? 0 : len; /* a line that long, or a body past the cap: dropped */
	xgrow_size(&x->in, &x->cap_in, x->n_in + len + 1, 1);
	memcpy(x->in + x->n_in, p, len);
	x->n_in += len;
	x->in[x->n_in] = '\0';
	if (lines)
		stream_lines(x);
	return len;
}

/* The one line a failed stream ends with. */
static void stream_failure(rem *r, xfer *x, CURLcode rc, char *out, size_t cap)
{
	char why[256];
	if (rc != CURLE_OK && x->status == 0) {
		snprintf(out, cap, "cannot reach %s: %s", r->base, x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
		return;
	}
	if (x->status != 200) {
		rem_error_text(x->in, x->n_in, why, sizeof why);
		snprintf(out, cap, "the server refused the request (HTTP %ld%s)%s%s", x->status,
			 x->status == 401 || x->status == 403 ? ", check --api-key" : "", why[0] ? ": " : "", why);
		return;
	}
	if (x->error[0]) {
		snprintf(out, cap, "the server failed the answer: %s", x->error);
		return;
	}
	snprintf(out, cap, "the server closed the stream before the answer ended (%d pieces kept)%s%s", x->n_pieces,
		 rc != CURLE_OK ? ": " : "", rc != CURLE_OK ? (x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc)) : "");
}

void stream_done(rem *r, xfer *x, CURLcode rc)
{
	char line[800];
	if (rc == CURLE_OK && x->status == 200 && !x->error[0] && (x->done || x->have_finish)) {
		rem_view_state(r, LINK_UP, NULL);
		stream_finish(x, x->have_finish ? x->finish : FIN_STOP, NULL);
		return;
	}
	stream_failure(r, x, rc, line, sizeof line);
	if (x->status == 0)
		rem_view_state(r, LINK_DOWN, line);
	stream_finish(x, FIN_ERROR, line);
}

