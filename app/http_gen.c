/* app/http_gen.c: POST /v1/chat/completions and /v1/completions.
 *
 * A request is parsed (app/http_req.h), checked against the engine's
 * limits that need no tokens (n, the count of messages, the bytes of text:
 * a text of B bytes has at least B / the longest token's bytes tokens, so a
 * body of 32,000 messages is refused before any rendering or tokenizing),
 * turned into prompt ids, checked against the context and the pool, and
 * submitted through an engine client of its own. The connection's thread
 * then waits on that client's wake-up fd, on its socket (a client that
 * hangs up is noticed at once: the request is cancelled and its blocks go
 * back to the pool) and on the server's stop pipe.
 *
 * A client that shut down its sending side before the generation began
 * (TCP half-close: "my request is complete", as nc -N and some HTTP/1.0
 * clients do) is still answered: its end-of-stream is not taken for a
 * hang-up. One that arrives later is; TCP tells a half-close from a close
 * only when a write fails, which a stream then notices. Streaming answers are written as server-sent events by
 * libmicrohttpd's content reader as the tokens come; the others are one JSON
 * document at the end. */
#include "app/http.h"

#include "app/http_req.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gen {
	call *c;                 /* borrowed: the request it answers */
	elink *cl;               /* owned: its link (freed by http_gen_free) */
	int sock;                /* the connection's socket, watched for hang-ups */
	bool half_closed;        /* the client had shut its sending side when the
	                            generation began: its end-of-stream is no hang-up */
	enum http_kind kind;
	int n;                   /* completions */
	bool stream, include_usage, continuous_usage;
	int n_prompt, n_cached, n_gen; /* usage: of completion 0, summed over all */
	int n_tok;               /* tokens generated so far, all completions (continuous usage) */
	char id[48];
	long long created;
	sbuf *text;              /* owned; [n] the answers so far (not streaming) */
	enum core_finish *fin;   /* owned; [n] */
	bool *done;              /* owned; [n] */
	int n_done;
	char *error;             /* owned; the first FIN_ERROR's message, or NULL */
	sbuf out;                /* streaming: events not yet handed to libmicrohttpd */
	size_t sent;
	bool ended;              /* streaming: the last event is in out */
};

static const char *finish_reason(enum core_finish f)
{
	return f == FIN_STOP ? "stop" : f == FIN_CANCELLED ? "abort" : f == FIN_ERROR ? "error" : "length";
}

void http_gen_free(gen *g)
{
	if (!g)
		return;
	link_free(g->cl); /* cancels whatever has not finished */
	atomic_fetch_sub(&g->c->s->in_flight, 1);
	for (int i = 0; g->text && i < g->n; i++)
		sb_free(&g->text[i]);
	free(g->text);
	free(g->fin);
	free(g->done);
	free(g->error);
	sb_free(&g->out);
	free(g);
}

/* ---- streaming events ---- */

/* "data: {"id": ..., "choices": [" */
static void chunk_open(gen *g)
{
	serve *s = g->c->s;
	sb_printf(&g->out, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", g->id,
		  g->kind == HTTP_CHAT ? "chat.completion.chunk" : "text_completion", g->created);
	sb_json(&g->out, s->model_name, strlen(s->model_name));
	sb_put(&g->out, ",\"choices\":[", 12);
}

/* The usage object, n_gen completion tokens. */
static void usage_json(gen *g, sbuf *b, int n_gen)
{
	sb_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
		  "\"prompt_tokens_details\":{\"cached_tokens\":%d}}", g->n_prompt, n_gen,
		  g->n_prompt + n_gen, g->n_cached);
}

/* One choice's piece of text (delta or text), or its end when reason. */
static void chunk_choice(gen *g, int i, const char *text, size_t len, const char *reason)
{
	chunk_open(g);
	sb_printf(&g->out, "{\"index\":%d,", i);
	if (g->kind == HTTP_CHAT) {
		sb_put(&g->out, "\"delta\":{", 9);
		if (text) {
			sb_put(&g->out, "\"content\":", 10);
			sb_json(&g->out, text, len);
		}
		sb_put(&g->out, "},", 2);
	} else {
		sb_put(&g->out, "\"text\":", 7);
		sb_json(&g->out, text ? text : "", text ? len : 0);
		sb_put(&g->out, ",", 1);
	}
	sb_printf(&g->out, "\"logprobs\":null,\"finish_reason\":");
	if (reason)
		sb_printf(&g->out, "\"%s\"", reason);
	else
		sb_put(&g->out, "null", 4);
	sb_put(&g->out, "}]", 2);
	if (g->continuous_usage) {
		sb_put(&g->out, ",", 1);
		usage_json(g, &g->out, g->n_tok);
	} else if (g->include_usage) {
		sb_put(&g->out, ",\"usage\":null", 13);
	}
	sb_put(&g->out, "}\n\n", 3);
}

/* The stream's end: the usage chunk when asked for, an error if one came,
 * then [DONE]. */
static void stream_end(gen *g)
{
	if (g->error) {
		sb_put(&g->out, "data: {\"error\":{\"message\":", 26);
		sb_json(&g->out, g->error, strlen(g->error));
		sb_put(&g->out, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n", 51);
	} else if (g->include_usage) {
		chunk_open(g);
		sb_put(&g->out, "],", 2);
		usage_json(g, &g->out, g->n_gen);
		sb_put(&g->out, "}\n\n", 3);
	}
	sb_put(&g->out, "data: [DONE]\n\n", 14);
	g->ended = true;
}

/* ---- events ---- */

static void on_event(gen *g, const link_event *ev)
{
	int i = ev->index;
	if (i < 0 || i >= g->n || g->done[i])
		return;
	if (ev->kind == CORE_EV_TOKEN) {
		g->n_tok++;
		if (i == 0)
			g->n_cached = ev->m.n_cached;
		if (ev->text_len == 0)
			return; /* text held back (a stop string may be starting, or a character) */
		if (g->stream)
			chunk_choice(g, i, ev->text, ev->text_len, NULL);
		else
			sb_put(&g->text[i], ev->text, ev->text_len);
		return;
	}
	g->done[i] = true;
	g->n_done++;
	g->fin[i] = ev->finish;
	g->n_gen += ev->m.n_gen;
	if (i == 0) {
		g->n_prompt = ev->m.n_prompt;
		g->n_cached = ev->m.n_cached;
	}
	if (ev->finish == FIN_ERROR && !g->error)
		g->error = xstrndup(ev->text, ev->text_len);
	if (g->stream && ev->finish != FIN_ERROR)
		chunk_choice(g, i, NULL, 0, finish_reason(ev->finish));
}

/* Takes every waiting event; true when the answer is complete. */
static bool drain(gen *g)
{
	link_event ev;
	while (link_poll(g->cl, &ev)) {
		on_event(g, &ev);
		link_event_clear(&ev);
	}
	bool complete = g->n_done == g->n || g->error;
	if (complete && g->stream && !g->ended)
		stream_end(g);
	return complete;
}

/* Sleeps until events come; false when the client hung up or the server
 * is stopping. */
static bool wait_events(gen *g)
{
	serve *s = g->c->s;
	struct pollfd p[3] = {{.fd = link_wake_fd(g->cl), .events = POLLIN},
			      {.fd = g->sock, .events = POLLRDHUP}, {.fd = s->stop[0], .events = POLLIN}};
	if (g->half_closed)
		p[1].events = 0; /* POLLHUP and POLLERR still come */
	int rc = poll(p, 3, 1000);
	if (rc < 0)
		return errno == EINTR;
	if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
		return false;
	return !(p[2].revents & POLLIN);
}

/* libmicrohttpd's content reader: the next bytes of the event stream. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	gen *g = cls;
	/* libmicrohttpd asks for more once it has sent what it had: the client
	 * keeps up. While this waits on the engine no deadline runs; once it
	 * returns, the client has timeout_s to take the bytes (serve.c). */
	http_phase(g->c, CONN_BUSY);
	for (;;) {
		if (g->sent < g->out.n) {
			size_t n = MIN(max, g->out.n - g->sent);
			memcpy(buf, g->out.p + g->sent, n);
			g->sent += n;
			if (g->sent == g->out.n)
				g->out.n = g->sent = 0;
			http_phase(g->c, CONN_WRITING);
			return (ssize_t)n;
		}
		if (g->ended) {
			http_set_timeout(g->c, false);
			http_phase(g->c, CONN_WRITING);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (!drain(g) && g->out.n == 0 && !wait_events(g))
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

/* ---- whole answers ---- */

static enum MHD_Result reply_whole(gen *g)
{
	call *c = g->c;
	serve *s = c->s;
	if (g->error)
		return http_error(c, 500, "server_error", NULL, NULL, "%s", g->error);
	sbuf b = {0};
	sb_printf(&b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", g->id,
		  g->kind == HTTP_CHAT ? "chat.completion" : "text_completion", g->created);
	sb_json(&b, s->model_name, strlen(s->model_name));
	sb_put(&b, ",\"choices\":[", 12);
	for (int i = 0; i < g->n; i++) {
		sb_printf(&b, "%s{\"index\":%d,", i ? "," : "", i);
		if (g->kind == HTTP_CHAT)
			sb_put(&b, "\"message\":{\"role\":\"assistant\",\"content\":", 40);
		else
			sb_put(&b, "\"text\":", 7);
		sb_json(&b, g->text[i].p ? g->text[i].p : "", g->text[i].n);
		sb_printf(&b, "%s,\"logprobs\":null,\"finish_reason\":\"%s\"}", g->kind == HTTP_CHAT ? "}" : "",
			  finish_reason(g->fin[i]));
	}
	sb_put(&b, "],", 2);
	usage_json(g, &b, g->n_gen);
	sb_put(&b, "}\n", 2);
	http_set_timeout(c, false);
	return http_reply(c, 200, "application/json", &b);
}

/* Waits for the whole answer in the connection's thread. */
static enum MHD_Result run_whole(gen *g)
{
	while (!drain(g))
		if (!wait_events(g))
			return MHD_NO; /* closes the connection; the request is cancelled */
	return reply_whole(g);
}

static enum MHD_Result run_stream(gen *g)
{
	if (g->kind == HTTP_CHAT) /* each choice opens with its role, as OpenAI's do */
		for (int i = 0; i < g->n; i++) {
			chunk_open(g);
			sb_printf(&g->out, "{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
				  "\"logprobs\":null,\"finish_reason\":null}]", i);
			if (g->continuous_usage) {
				sb_put(&g->out, ",", 1);
				usage_json(g, &g->out, 0);
			} else if (g->include_usage) {
				sb_put(&g->out, ",\"usage\":null", 13);
			}
			sb_put(&g->out, "}\n\n", 3);
		}
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, stream_read, g,
								    NULL);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	enum MHD_Result rc = MHD_queue_response(g->c->conn, 200, r);
	MHD_destroy_response(r);
	g->c->answered = rc == MHD_YES;
	http_count(g->c->s, 200);
	http_phase(g->c, CONN_WRITING);
	return rc;
}

/* ---- admission ---- */

/* The prompt must leave room in the context and fit the pool; false when
 * it does, else true with the error queued (its verdict in *rc). */
static bool too_long(call *c, const http_req *q, int n_prompt, enum MHD_Result *rc)
{
	serve *s = c->s;
	int64_t blocks = ((int64_t)n_prompt + s->block_tokens) / s->block_tokens;
	const char *code = "context_length_exceeded", *what = q->kind == HTTP_CHAT ? "messages" : "prompt";
	if (n_prompt >= s->n_ctx)
		*rc = http_error(c, 400, "invalid_request_error", what, code, "This model's maximum context "
				 "length is %d tokens, but the prompt has %d tokens: shorten it", s->n_ctx, n_prompt);
	else if (q->max_tokens > 0 && (int64_t)n_prompt + q->max_tokens > s->n_ctx)
		*rc = http_error(c, 400, "invalid_request_error", "max_tokens", code, "This model's maximum context "
				 "length is %d tokens, but the prompt has %d tokens and max_tokens asks for %d more "
				 "(%lld in all): lower max_tokens or shorten the prompt", s->n_ctx, n_prompt,
				 q->max_tokens, (long long)n_prompt + q->max_tokens);
	else if (blocks > s->n_blocks)
		*rc = http_error(c, 400, "invalid_request_error", what, code, "the prompt has %d tokens, which "
				 "need %lld KV blocks of %d tokens, but the pool has %lld", n_prompt, (long long)blocks,
				 s->block_tokens, (long long)s->n_blocks);
	else
		return false;
	return true;
}

/* The limits that need no tokens, checked before any rendering or
 * tokenizing: n against the sequences the engine runs at once, the count
 * of messages (each takes a token at least) and the bytes of text against
 * the context. false when the request is within them, else true with the
 * error queued (its verdict in *rc). */
static bool over_limits(call *c, const http_req *q, enum MHD_Result *rc)
{
	serve *s = c->s;
	const char *code = "context_length_exceeded", *what = q->kind == HTTP_CHAT ? "messages" : "prompt";
	size_t bytes = q->kind == HTTP_CHAT ? strlen(q->chat.system) : q->prompt_len;
	for (int i = 0; q->kind == HTTP_CHAT && i < q->chat.n_msgs; i++)
		bytes += q->chat.msgs[i].len;
	int64_t at_least = (int64_t)(bytes / (size_t)s->max_token_bytes);
	if (s->max_seqs > 0 && q->n > s->max_seqs)
		*rc = http_error(c, 400, "invalid_request_error", "n", NULL, "n = %d completions, but this server "
				 "runs at most %d sequences at once (its --parallel): ask for at most %d", q->n,
				 s->max_seqs, s->max_seqs);
	else if (q->kind == HTTP_CHAT && q->chat.n_msgs >= s->n_ctx)
		*rc = http_error(c, 400, "invalid_request_error", what, code, "This model's maximum context length "
				 "is %d tokens, but the request has %d messages, each of which takes a token at least: "
				 "shorten the conversation", s->n_ctx, q->chat.n_msgs);
	else if (q->kind == HTTP_COMPLETION && q->prompt_ids && q->n_prompt_ids >= s->n_ctx)
		*rc = http_error(c, 400, "invalid_request_error", what, code, "This model's maximum context length "
				 "is %d tokens, but the prompt has %d tokens: shorten it", s->n_ctx, q->n_prompt_ids);
	else if (at_least >= s->n_ctx)
		*rc = http_error(c, 400, "invalid_request_error", what, code, "This model's maximum context length "
				 "is %d tokens, but the %s hold %zu bytes of text, at least %lld tokens (a token "
				 "stands for %d bytes at most): shorten it", s->n_ctx, what, bytes, (long long)at_least,
				 s->max_token_bytes);
	else
		return false;
	return true;
}

/* Whether the client is gone for good (its socket reset or closed both
 * ways); a half-close is not. */
static bool client_gone(call *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p = {.fd = ci ? ci->connect_fd : -1, .events = 0};
	return p.fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* A new generation for q, its request submitted; NULL with the error queued. */
static gen *gen_new(call *c, const http_req *q, const int32_t *ids, int n_ids, elink *cl)
{
	serve *s = c->s;
	gen *g = xcalloc(1, sizeof *g);
	*g = (gen){.c = c, .cl = cl, .kind = q->kind, .n = q->n, .stream = q->stream,
		   .include_usage = q->include_usage, .continuous_usage = q->include_usage && q->continuous_usage,
		   .n_prompt = n_ids, .created = (long long)time(NULL)};
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	g->sock = ci ? ci->connect_fd : -1;
	struct pollfd p = {.fd = g->sock, .events = POLLRDHUP};
	g->half_closed = g->sock >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLRDHUP);
	uint64_t serial = atomic_fetch_add(&s->next_id, 1);
	snprintf(g->id, sizeof g->id, "%s-%016llx", q->kind == HTTP_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long long)mix64(serial));
	g->text = xcalloc((size_t)g->n, sizeof *g->text);
	g->fin = xcalloc((size_t)g->n, sizeof *g->fin);
	g->done = xcalloc((size_t)g->n, sizeof *g->done);
	core_request r = {.id = 1, .conv = 0, .prompt = ids, .n_prompt = n_ids, .samp = q->samp,
			  .max_tokens = q->max_tokens, .n = q->n, .stop_strs = (const char *const *)q->stop,
			  .n_stop_strs = q->n_stop, .ignore_eos = q->ignore_eos};
	if (!q->seed_given)
		r.samp.seed = mix64(serial ^ 0x9e3779b97f4a7c15ull);
	int32_t stop_ids[4]; /* a chat ends at its template's end-of-turn token, as the tabs' do */
	if (q->kind == HTTP_CHAT && !q->ignore_eos) {
		r.n_stop_ids = MAX(0, tmpl_stop_ids(s->x.fam, s->x.tok, stop_ids, (int)ARRAY_LEN(stop_ids)));
		r.stop_ids = stop_ids;
	}
	link_submit(cl, &(link_request){.r = r});
	return g;
}

/* Everything from the parsed request to the generation's start. */
static enum MHD_Result start(call *c, const http_req *q)
{
	serve *s = c->s;
	if (*q->model && strcmp(q->model, s->model_name))
		return http_error(c, 404, "invalid_request_error", "model", "model_not_found", "The model '%s' "
				  "does not exist; this server serves '%s'", q->model, s->model_name);
	int32_t *ids;
	int n;
	err e = {0};
	enum MHD_Result rc = MHD_NO;
	if (over_limits(c, q, &rc))
		return rc;
	if (http_req_prompt(q, s->x.tok, s->x.fam, &ids, &n, &e))
		return http_error(c, 400, "invalid_request_error", q->kind == HTTP_CHAT ? "messages" : "prompt",
				  NULL, "%s", e.msg);
	if (client_gone(c)) { /* left while the prompt was made: nothing to run for */
		free(ids);
		atomic_fetch_add(&s->disconnects, 1);
		return MHD_NO;
	}
	if (too_long(c, q, n, &rc)) {
		free(ids);
		return rc;
	}
	elink *cl = NULL;
	if (atomic_fetch_add(&s->in_flight, 1) >= s->p.max_queue)
		rc = http_error(c, 429, "rate_limit_error", NULL, "rate_limit_exceeded", "the server has %d "
				"requests in flight already (its --max-queue); retry later", s->p.max_queue);
	else if (!(cl = link_open(s->x.link, &e)))
		rc = http_error(c, 503, "server_error", NULL, NULL, "%s", e.msg);
	if (!cl) {
		atomic_fetch_sub(&s->in_flight, 1);
		free(ids);
		return rc;
	}
	c->gen = gen_new(c, q, ids, n, cl); /* from here http_gen_free gives the slot back */
	free(ids);
	http_set_timeout(c, true);
	return q->stream ? run_stream(c->gen) : run_whole(c->gen);
}

static enum MHD_Result run(call *c, enum http_kind kind)
{
	http_req q;
	char param[64];
	err e = {0};
	if (http_req_parse(c->body ? c->body : "", c->len, kind, &c->s->p.samp, &q, param, sizeof param, &e))
		return http_error(c, 400, "invalid_request_error", param, NULL, "%s", e.msg);
	enum MHD_Result rc = start(c, &q);
	http_req_deinit(&q);
	return rc;
}

enum MHD_Result http_chat(call *c)
{
	return run(c, HTTP_CHAT);
}

enum MHD_Result http_completions(call *c)
{
	return run(c, HTTP_COMPLETION);
}
