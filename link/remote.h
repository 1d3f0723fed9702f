/* link/remote.h: a remote engine: the chat's requests sent to an
 * OpenAI-compatible server (vLLM, SGLang, llama.cpp's llama-server, Ollama,
 * another `pagechat serve`) instead of the local engine thread.
 *
 * rem_start() starts one background thread that does all the network work
 * with libcurl (one multi handle: every stream and every scrape at once), so
 * the caller never waits on the network. Requests go in as chat messages
 * (POST /v1/chat/completions: the server applies its own template) or as one
 * completion text (/v1/completions), always streamed (server-sent events);
 * what comes back is the engine's own event type (link/engine.h): TOKEN
 * events carry text (token -1: a server sends text, not ids), FINISH ends
 * every request exactly once (stop, length, cancelled, or error with one
 * line saying what went wrong: unreachable, refused key, a stream cut off).
 * Events wake a pipe, as an eng_client's do.
 *
 * Beside the requests the thread scrapes the server every refresh period:
 * /metrics (Prometheus text; the figures a panel shows are picked from the
 * names vLLM, SGLang and llama.cpp use, each kept with the metric it came
 * from) and, while the server has it, /pagechat/v1/pool (pagechat's block
 * map). rem_view_get copies the latest of these by value.
 *
 * Commands and polling from one thread (the UI's); rem_stop from the thread
 * that started it. */
#ifndef PAGECHAT_REMOTE_H
#define PAGECHAT_REMOTE_H

#include "link/engine.h"
#include "engine/sample.h"

typedef struct rem rem;

typedef struct rem_params {
	const char *url;         /* the server: http://host:port, with or without /v1 */
	const char *api_key;     /* sent as a bearer token, or NULL */
	const char *model;       /* the model to ask for, or NULL: the first one the
	                            server's /v1/models lists */
	int refresh_ms;          /* how often /metrics and the pool are read */
} rem_params;

typedef struct rem_msg {
	const char *role;        /* "system", "user", "assistant" */
	const char *text;        /* borrowed; [len] */
	size_t len;
} rem_msg;

typedef struct rem_request {
	int64_t id;              /* the caller's; events carry it back */
	int conv;
	const rem_msg *msgs;     /* chat mode: [n_msgs] ... */
	int n_msgs;
	const char *prompt;      /* ... or completion mode (msgs NULL): the text */
	size_t prompt_len;
	samp_params samp;        /* temperature, top_k, top_p, min_p, repeat penalty, seed */
	int max_tokens;          /* 0: the server's default */
} rem_request;

/* Figures a server's /metrics may give, each with the metric it came from. */
enum rem_fig {
	RF_KV_USAGE,             /* share of the KV cache in use, 0..1 */
	RF_PREFIX_HIT,           /* prefix cache hits / queries (tokens), 0..1 */
	RF_RUNNING, RF_WAITING,  /* requests */
	RF_TTFT_MS,              /* mean time to first token, over the server's life */
	RF_ITL_MS,               /* mean time between tokens */
	RF_GEN_TPS,              /* tokens generated per second between two scrapes */
	RF_KV_TOKENS,            /* tokens held in the KV cache */
	RF_N
};

typedef struct rem_figure {
	bool have;
	double value;
	char source[64];         /* the metric name(s) it came from */
} rem_figure;

enum rem_state { REM_CONNECTING, REM_UP, REM_DOWN };

typedef struct rem_view {
	uint64_t seq;            /* increases with every change */
	enum rem_state state;
	char url[256];           /* the server's base URL (without /v1) */
	char model[128];         /* the model asked for ("" until known) */
	int max_model_len;       /* from /v1/models when the server says (0: unknown) */
	char problem[256];       /* the last failure talking to it, "" when none */
	char kind[32];           /* whose metric names /metrics used ("vLLM", "SGLang",
	                            "llama.cpp", "pagechat", "" unknown) */
	int metrics_status;      /* /metrics: the HTTP status, 0 not reached (yet) */
	rem_figure fig[RF_N];
	bool has_pool;           /* the block map below is the server's */
	eng_snapshot pool;       /* from /pagechat/v1/pool: map, block_tokens, n_ctx and
	                            st's block counts, running/waiting, waste, prefix */
} rem_view;

/* Starts the thread for p (strings copied). NULL with e only when the URL is
 * not http(s) or libcurl cannot start; an unreachable server is no error
 * here (the view and the requests say so). */
rem *rem_start(const rem_params *p, err *e);
/* Cancels every stream, joins the thread, frees everything. NULL is a no-op. */
void rem_stop(rem *r);

/* Copies q (its strings too) for the thread; cannot fail. */
void rem_submit(rem *r, const rem_request *q);
/* Ends request id with FIN_CANCELLED (its stream is closed); unknown ids are
 * ignored. */
void rem_cancel(rem *r, int64_t id);
int  rem_wake_fd(const rem *r);
/* Pops the oldest event into ev (free its text with eng_event_clear); false
 * when none waits. */
bool rem_poll(rem *r, eng_event *ev);
/* Copies the latest view into out if newer than out->seq; out starts zeroed;
 * release with rem_view_deinit. */
bool rem_view_get(rem *r, rem_view *out);
void rem_view_deinit(rem_view *v);

/* Names of the figures for a panel ("KV usage", ...). Static. */
const char *rem_fig_name(enum rem_fig f);

/* ---- what the thread reads (link/remote_view.c; pure, tested alone) ---- */

/* Fills fig[RF_N] and kind from a /metrics body; prev (the previous scrape's
 * figures, or NULL) and dt_s give the counters' rates. Figures the text lacks
 * stay have = false. */
typedef struct rem_counters {
	double gen_tokens;       /* the generated-tokens counter's value, -1 none */
	double t;                /* when it was read (s) */
} rem_counters;
void rem_parse_metrics(const char *text, size_t len, rem_figure *fig, char *kind, size_t kind_cap,
		       rem_counters *ctr);
/* Fills s (map grown as needed, st's pool figures) from a /pagechat/v1/pool
 * body; -1 with e when it is not one. */
int rem_parse_pool(const char *text, size_t len, eng_snapshot *s, err *e);
/* The error line of a failed response: the OpenAI error object's message
 * when the body has one, else the first line of the body; "" when empty. */
void rem_error_text(const char *body, size_t len, char *out, size_t cap);
/* The request's JSON body after its opening brace, without "model" (the
 * thread puts that first): a new string starting "messages" or "prompt". */
char *rem_request_body(const rem_request *q, size_t *len);

#endif
