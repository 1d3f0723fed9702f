/* app/http.h: what the HTTP server's files share (folder-internal to the
 * server: app/serve.c routes and limits requests, app/http_out.c builds
 * responses, app/http_gen.c runs the generation endpoints, app/http_info.c
 * the others). Each HTTP request is a `call`, owned by its connection's
 * thread (libmicrohttpd runs one thread per connection) from its headers
 * until libmicrohttpd reports it completed; the `serve` is shared by all of
 * them and holds only constants after start, atomics and the stop pipe. */
#ifndef PAGECHAT_HTTP_H
#define PAGECHAT_HTTP_H

#include "app/serve.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

/* The statuses the server answers with, counted for /metrics. */
#define HTTP_STATUSES(X) X(200) X(400) X(401) X(404) X(405) X(413) X(429) X(500) X(503)
enum {
#define X(c) HTTP_I_##c,
	HTTP_STATUSES(X)
#undef X
	HTTP_N_STATUSES
};

/* Where a connection is, for its deadlines (app/serve.c's watchdog):
 * reading a request (its head and body must have come timeout_s after the
 * connection opened or its previous answer ended, however slowly they
 * trickle), busy (the server works: no deadline), or writing a stream (the
 * client must take the bytes handed to it within timeout_s, else the
 * stream is cancelled). */
enum conn_phase { CONN_READING, CONN_BUSY, CONN_WRITING, CONN_CUT };

/* A connection's deadline (made and freed by app/serve.c as libmicrohttpd
 * opens and closes the connection; its phase set by http_phase). */
typedef struct conn_watch {
	int fd;                  /* owned: a duplicate of the connection's socket */
	enum conn_phase phase;   /* guarded by serve.watch_lock */
	double since;            /* when the phase began (now_s) */
	struct conn_watch *prev, *next; /* serve.watches */
} conn_watch;

struct serve {
	serve_params p;          /* copied, defaults filled; strings point into the fields below */
	char *host, *api_key;    /* owned */
	serve_engine x;          /* the engine, borrowed; x.model_name points to model_name */
	char *model_name;        /* owned */
	int n_ctx, block_tokens; /* the engine's, fixed */
	int64_t n_blocks;
	int max_seqs;            /* sequences the engine runs at once (0: unknown) */
	int max_token_bytes;     /* the most bytes one token of the vocabulary stands for */
	struct MHD_Daemon *d;    /* owned */
	int listen_fd;           /* owned by d once started */
	int port;
	int stop[2];             /* pipe: [0] readable once serve_stop has begun */
	atomic_int in_flight;    /* generation requests admitted and not yet completed */
	atomic_uint_least64_t next_id; /* for completion ids and unseeded requests' seeds */
	atomic_llong responses[HTTP_N_STATUSES];
	atomic_llong refused_slow, refused_big, disconnects, stalled;
	pthread_mutex_t watch_lock; /* guards watches and their phases */
	conn_watch *watches;     /* owned; the open connections, a list */
	pthread_t watchdog;      /* closes connections past their deadlines */
	bool watchdog_on;
};

typedef struct gen gen;

/* One HTTP request, from its headers to its completion. */
typedef struct call {
	serve *s;                /* borrowed */
	struct MHD_Connection *conn; /* borrowed from libmicrohttpd */
	int endpoint;            /* index in serve.c's table, or -1 */
	char *path;              /* owned; the URL's path */
	char *body;              /* owned; [len] received so far, NUL after */
	size_t len, cap;
	double t_start;          /* when its headers arrived */
	bool answered;           /* a response is queued */
	conn_watch *w;           /* borrowed: its connection's deadlines (NULL: none) */
	gen *gen;                /* owned; a generation in flight, or NULL */
} call;

/* ---- JSON into a text buffer (base/base.h's sbuf; app/http_out.c) ---- */

/* s[0..n) as a JSON string literal (quotes included; bad UTF-8 -> U+FFFD). */
void sb_json(sbuf *b, const char *s, size_t n);

/* ---- responses (app/http_out.c): each queues one and returns MHD's verdict ---- */

/* Queues status with body (taken: b is left empty) of content type type. */
enum MHD_Result http_reply(call *c, unsigned status, const char *type, sbuf *b);
/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}};
 * param and code may be NULL (JSON null). */
enum MHD_Result http_error(call *c, unsigned status, const char *type, const char *param,
			   const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Counts a response of status for /metrics. */
void http_count(serve *s, unsigned status);
/* The connection's idle timeout: 0 while an answer is being generated (the
 * request's own wait watches the client), then back to the server's. */
void http_set_timeout(call *c, bool generating);

/* ---- deadlines (app/http_out.c; app/serve.c's watchdog enforces them) ---- */

/* Moves c's connection to phase ph, its deadline counted from now. */
void http_phase(call *c, enum conn_phase ph);

/* ---- endpoints ---- */

enum MHD_Result http_health(call *c);       /* app/http_info.c */
enum MHD_Result http_models(call *c);
enum MHD_Result http_metrics(call *c);
enum MHD_Result http_pool(call *c);
enum MHD_Result http_chat(call *c);         /* app/http_gen.c */
enum MHD_Result http_completions(call *c);
/* Ends c's generation: cancels what is unfinished, frees it. NULL is a no-op. */
void http_gen_free(gen *g);

#endif
