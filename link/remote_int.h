/* link/remote_int.h: the remote engine's state, shared by its files (not a
 * public header). remote_xfer.c has the transfers, the streams and the
 * view's state (what a transfer's outcome changes); remote.c the thread's
 * loop, the scrapes and the caller's side, and calls into remote_xfer.c,
 * never the other way; remote_view.c the pure parsing. */
#ifndef PAGECHAT_REMOTE_INT_H
#define PAGECHAT_REMOTE_INT_H

#include "link/link_int.h"
#include "link/remote.h"

#include <curl/curl.h>
#include <pthread.h>

#define BODY_CAP (8u << 20)      /* a scrape's body, at most */
#define ERR_BODY_CAP (64u << 10) /* an error response's, kept for its message */
#define CONNECT_MS 3000L
#define SCRAPE_MS 5000L

typedef struct rem rem;

enum xfer_kind { X_STREAM, X_MODELS, X_METRICS, X_POOL };

typedef struct xfer {
	enum xfer_kind kind;
	rem *r;
	CURL *h;
	struct curl_slist *hdrs;
	char errbuf[CURL_ERROR_SIZE];
	char *in;                /* bytes received and not yet used */
	size_t n_in, cap_in;
	long status;             /* the HTTP status, 0 before the headers */
	/* X_STREAM */
	int64_t id;
	int conv;
	bool chat;
	char *body;              /* owned; the JSON body after "{" and the model */
	size_t body_len;
	char *post;              /* owned; the whole body while it is sent */
	bool done, have_finish;  /* [DONE] seen; a finish_reason seen */
	enum core_finish finish;
	char error[256];         /* an error event's message */
	double t_start, t_first, t_last;
	int n_pieces;            /* text pieces received */
	bool counted;            /* the server gave a token count (usage) */
	core_req_metrics m;
	struct xfer *next;
} xfer;

/* A command from the link's thread to the remote thread. */
enum rcmd_kind { RC_SUBMIT, RC_CANCEL, RC_STOP };
typedef struct rcmd {
	lq_node node;            /* first: on rem.cmds */
	enum rcmd_kind kind;
	xfer *x;                 /* RC_SUBMIT: owned until taken */
	int64_t id;              /* RC_CANCEL */
} rcmd;

struct rem {
	elink link;              /* first: the one link to this server (its events) */
	char base[256], *key, model[128];
	bool model_given;
	int refresh_ms;
	pthread_t thread;
	CURLM *multi;
	lqueue cmds;             /* rcmd; the thread is woken with curl_multi_wakeup */
	pthread_mutex_t mu;
	link_view view;          /* under mu: the published view (server part) */
	/* the thread's own */
	xfer *active, *waiting;  /* streams running; streams waiting for the model */
	bool model_known, probing, metrics_busy, pool_busy, pool_absent;
	bool unreachable;        /* the view says LINK_DOWN for want of a connection */
	double next_scrape;
	rem_counters ctr;
	link_snapshot pool;
};

/* A JSON number as an int, clamped (a server may send anything). */
static inline int rem_int(double v)
{
	return v != v ? 0 : v < -2147483647.0 ? -2147483647 : v > 2147483647.0 ? 2147483647 : (int)v;
}

/* ---- remote_xfer.c ---- */
/* Queues ev for the link (its text taken) and wakes its pipe. */
void rem_push_event(rem *r, const link_event *ev);
/* Sets the view's state and problem (problem NULL: leaves it). */
void rem_view_state(rem *r, enum link_state st, const char *problem);
/* Starts x on path (GET, or POST of x->post). -1 when libcurl refuses. */
int xfer_begin(rem *r, xfer *x, const char *path);
/* Frees x (removing it from the multi handle). NULL is a no-op. */
void xfer_free(xfer *x);
/* Starts a stream now that the model is known (or fails it): on r->active. */
void stream_start(rem *r, xfer *x);
/* Ends stream x with one FINISH event (error: its line) and frees it. */
void stream_finish(xfer *x, enum core_finish fin, const char *error);
/* A stream's transfer ended with rc: its FINISH event; x is freed. */
void stream_done(rem *r, xfer *x, CURLcode rc);

#endif
