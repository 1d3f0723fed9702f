/* app/http_out.c: building the server's responses: a text buffer, JSON
 * strings, OpenAI-style errors, the count of answers by status, and the
 * connection's phase for its deadlines. */
#include "app/http.h"

#include "models/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the buffer ---- */

void sb_json(sbuf *b, const char *s, size_t n)
{
	json_put_str(&b->p, &b->n, &b->cap, s, n);
	xgrow_size(&b->p, &b->cap, b->n + 1, 1);
	b->p[b->n] = '\0';
}


/* ---- responses ---- */

void http_count(serve *s, unsigned status)
{
	static const unsigned codes[] = {
#define X(c) c,
		HTTP_STATUSES(X)
#undef X
	};
	for (size_t i = 0; i < ARRAY_LEN(codes); i++)
		if (codes[i] == status)
			atomic_fetch_add(&s->responses[i], 1);
}

enum MHD_Result http_reply(call *c, unsigned status, const char *type, sbuf *b)
{
	if (!b->p)
		sb_put(b, "", 0);
	struct MHD_Response *r = MHD_create_response_from_buffer(b->n, b->p, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		sb_free(b);
		return MHD_NO;
	}
	*b = (sbuf){0}; /* the response owns the text now */
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == 429)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	if (status == 401)
		MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	enum MHD_Result rc = MHD_queue_response(c->conn, status, r);
	MHD_destroy_response(r);
	c->answered = rc == MHD_YES;
	http_count(c->s, status);
	return rc;
}

static void put_opt(sbuf *b, const char *s)
{
	if (s)
		sb_json(b, s, strlen(s));
	else
		sb_put(b, "null", 4);
}

enum MHD_Result http_error(call *c, unsigned status, const char *type, const char *param, const char *code,
			   const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	sbuf b = {0};
	sb_put(&b, "{\"error\":{\"message\":", 20);
	sb_json(&b, msg, strlen(msg));
	sb_printf(&b, ",\"type\":\"%s\",\"param\":", type);
	put_opt(&b, param && *param ? param : NULL);
	sb_put(&b, ",\"code\":", 8);
	put_opt(&b, code);
	sb_put(&b, "}}\n", 3);
	return http_reply(c, status, "application/json", &b);
}

void http_set_timeout(call *c, bool generating)
{
	MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT,
				  generating ? 0u : (unsigned)c->s->p.timeout_s);
}

void http_phase(call *c, enum conn_phase ph)
{
	if (!c->w)
		return;
	serve *s = c->s;
	pthread_mutex_lock(&s->watch_lock);
	if (c->w->phase != CONN_CUT) {
		c->w->phase = ph;
		c->w->since = now_s();
	}
	pthread_mutex_unlock(&s->watch_lock);
}
