/* app/serve.h: the OpenAI-compatible HTTP server, one more front-end of an
 * engine (link/link.h), like the chat UI: it turns HTTP requests
 * into engine commands and engine events into HTTP responses, and never
 * touches the core. `pagechat serve` runs it alone; `pagechat chat --serve
 * PORT` beside the tabs, on the same engine, so both share the KV pool and
 * its cached prefixes.
 *
 * HTTP is libmicrohttpd's (a thread per connection). Each generation request
 * opens its own link to the engine (link_open) and waits on that link's wake-up fd and on
 * its socket together: when the client goes away the request is cancelled
 * and its blocks return to the pool. Endpoints: POST /v1/chat/completions,
 * POST /v1/completions (streamed as server-sent events or not), GET
 * /v1/models, /health, /metrics (Prometheus text) and /pagechat/v1/pool (the
 * block map as JSON). Limits (body size, connections, idle time, requests in
 * flight, the context) are refused with OpenAI-style JSON errors. Start and
 * stop on one thread (any but the engine's). */
#ifndef PAGECHAT_SERVE_H
#define PAGECHAT_SERVE_H

#include "link/link.h"
#include "models/tmpl.h"

typedef struct serve serve;

typedef struct serve_params {
	const char *host;        /* borrowed; NULL: 127.0.0.1 (a name or an address) */
	int port;                /* 0: a free port, which serve_port() tells */
	const char *api_key;     /* borrowed; NULL: none needed (else "Bearer KEY" on /v1/ and /pagechat/;
	                            an empty key is refused) */
	int max_connections;     /* 0: 64; more are refused at accept */
	int timeout_s;           /* 0: 30; an idle connection is closed after this, a
	                            request's whole head and body must arrive within it,
	                            and a stream's client must take what it was sent within it */
	size_t max_body;         /* bytes; 0: 4 MiB */
	int max_queue;           /* generation requests in flight at once; 0: 64 (429 past it) */
	samp_params samp;        /* the requests' defaults */
} serve_params;

/* What the server serves: a running engine and its model's vocabulary. */
typedef struct serve_engine {
	elink *link;             /* borrowed; the engine's link (the server opens its
	                            own from it); must outlive the server */
	const tok *tok;          /* borrowed; the engine's model's */
	enum tmpl_family fam;    /* its chat template (TMPL_NONE: completion mode) */
	const char *model_name;  /* borrowed (copied); the id /v1/models lists */
} serve_engine;

/* Binds host:port and starts answering. NULL with e naming the address and
 * the reason (in use, not resolvable, ...) or the empty API key. Release
 * with serve_stop(). */
serve *serve_start(const serve_params *p, const serve_engine *x, err *e);
/* The TCP port it listens on. */
int serve_port(const serve *s);
/* Stops accepting, ends every request in flight (cancelling its engine
 * requests) and frees everything. NULL is a no-op. */
void serve_stop(serve *s);

#endif
