/* link/link.h: how a front-end reaches an engine.
 *
 * A link is one front-end's end of an engine: the chat holds one for all its
 * tabs, and the HTTP server opens one per generation request. There are two
 * engines behind the one interface: the local engine thread (a core running
 * a model this process loaded: link_start_local, link/engine.c) and a
 * remote OpenAI-compatible server reached over libcurl (link_start_server,
 * link/remote.c). A front-end holds an elink and never asks which it is;
 * where the two differ it reads link_caps() and the parts of link_view()
 * that are present. (The type is elink because link() is POSIX's.)
 *
 * Commands (submit, cancel, fork, close_conv) are copied into the engine's
 * queue and return at once. They cannot fail: a request the engine refuses,
 * or cannot carry out, is answered with FINISH events (FIN_ERROR, text: one
 * line saying why). Every request ends with exactly one FINISH event per
 * completion (one; n; or its beams). Events come back on the link's own
 * queue, under the ids it gave: request and conversation ids belong to the
 * link, and two links may use the same ones. link_wake_fd is readable
 * whenever events wait: poll() it, then link_poll until it says false.
 *
 * Threads: a link is used by one thread at a time (its front-end's), never
 * by the engine's own; link_view and link_open may also be called from any
 * other thread meanwhile (the server's request threads do both on the
 * chat's link). The engines' threads start with every signal blocked:
 * signals stay with the front-end. */
#ifndef PAGECHAT_LINK_H
#define PAGECHAT_LINK_H

#include "engine/core.h"

typedef struct elink elink;

/* What an engine can do beyond the common part (link_caps). */
enum link_cap {
	/* Prompts are token ids the front-end renders with the model's own
	 * tokenizer (it loaded that model): the engine reads link_request.r's
	 * prompt, pins (pin_tokens), salt and shift, and TOKEN events carry ids.
	 * Without it the engine renders the turn's text itself (the request's
	 * msgs or text) and TOKEN events carry text only (token -1). */
	LINK_TOKENS = 1 << 0,
	LINK_FORK = 1 << 1,      /* link_fork branches a running answer */
	LINK_SEVERAL = 1 << 2,   /* n > 1 completions and beam search in one request */
};

/* A conversation id of the engine as the snapshot shows it: the first
 * link's (the one link_start_local returned) as they are; another's
 * conversation c as k * LINK_CONV_IDS + c, k its slot. */
#define LINK_CONV_IDS (1 << 20)

typedef struct link_event {
	enum core_event_kind kind;
	int64_t req;             /* the link's request id */
	int conv, index;         /* the link's conversation id; the completion */
	uint64_t step;
	int32_t token;           /* -1: none (a FINISH, or an engine without LINK_TOKENS) */
	char *text;              /* owned by the receiver (free with link_event_clear) */
	size_t text_len;
	enum core_finish finish;
	core_req_metrics m;
} link_event;

/* Frees ev's text (ev stays usable). */
void link_event_clear(link_event *ev);

/* One message of a turn as text. */
typedef struct link_msg {
	const char *role;        /* "system", "user", "assistant" */
	const char *text;        /* borrowed; [len] */
	size_t len;
} link_msg;

/* One request: the turn in both forms an engine may read, and what it asks.
 * r: the ids (r.id, r.conv: the link's), the sampling (r.samp), the limit
 * (r.max_tokens) and, for an engine with LINK_TOKENS, the prompt ids and the
 * rest of core_request (n, beams, stops, pin, salt, shift). An engine
 * without LINK_TOKENS reads msgs (chat: it applies its own template) or,
 * when msgs is NULL, text (completion: it continues the text); it ignores
 * r's prompt and everything but id, conv, samp and max_tokens. A front-end
 * fills the forms it has (a front-end without the model's tokenizer has no
 * ids; one that renders ids need not fill msgs). Everything is borrowed:
 * link_submit copies what it keeps. */
typedef struct link_request {
	core_request r;
	const link_msg *msgs;    /* [n_msgs], the system prompt first when there is one */
	int n_msgs;
	const char *text;        /* [text_len] */
	size_t text_len;
} link_request;

/* ---- the view: what a panel draws ---- */

/* The engine's own figures and block map, published once per step. */
typedef struct link_snapshot {
	uint64_t seq;            /* increases with every publication */
	core_stats st;
	double prefill_tps;      /* prompt rows computed per second, over the last
	                            half second or more (0 once idle that long) */
	double decode_tps;       /* tokens generated per second (target tokens: with
	                            drafts, the accepted ones), likewise */
	int64_t n_blocks;
	int block_tokens;
	int n_ctx;               /* the per-sequence context limit, tokens */
	core_block_info *map;    /* owned; [n_blocks] (conversations: LINK_CONV_IDS) */
	int64_t map_cap;
	/* the running sequences' block tables (core_seq_tables), in the map's
	 * conversation ids */
	core_seq_info *seqs;     /* owned; [n_seqs] */
	int n_seqs, cap_seqs;
	int32_t *seq_blocks;     /* owned; the tables' block ids */
	int cap_seq_blocks;
} link_snapshot;

/* Copies src into dst (dst's arrays grown as needed; dst starts zeroed or
 * from an earlier copy). */
void link_snapshot_copy(link_snapshot *dst, const link_snapshot *src);
void link_snapshot_deinit(link_snapshot *s); /* frees the arrays; zeroes s */

/* Figures a server's /metrics may give, each with the metric it came from. */
enum link_fig {
	LF_KV_USAGE,             /* share of the KV cache in use, 0..1 */
	LF_PREFIX_HIT,           /* prefix cache hits / queries (tokens), 0..1 */
	LF_RUNNING, LF_WAITING,  /* requests */
	LF_TTFT_MS,              /* mean time to first token, over the server's life */
	LF_ITL_MS,               /* mean time between tokens */
	LF_GEN_TPS,              /* tokens generated per second between two scrapes */
	LF_KV_TOKENS,            /* tokens held in the KV cache */
	LF_N
};

typedef struct link_figure {
	bool have;
	double value;
	char source[64];         /* the metric name(s) it came from */
} link_figure;

/* Names of the figures for a panel ("KV usage", ...). Static. */
const char *link_fig_name(enum link_fig f);

/* LINK_REFUSED: the server answers but refuses this client (its API key). */
enum link_state { LINK_CONNECTING, LINK_UP, LINK_DOWN, LINK_REFUSED };

/* What a server tells about itself (scraped every refresh period). */
typedef struct link_server {
	enum link_state state;
	char url[256];           /* the server's base URL (without /v1) */
	char model[128];         /* the model asked for ("" until known) */
	int max_model_len;       /* from /v1/models when the server says (0: unknown) */
	char problem[256];       /* the last failure talking to it, "" when none */
	char kind[32];           /* whose metric names /metrics used ("vLLM", "SGLang",
	                            "llama.cpp", "pagechat", "" unknown) */
	int metrics_status;      /* /metrics: the HTTP status, 0 not reached (yet) */
	link_figure fig[LF_N];
	bool counts_pieces;      /* the last answer's stream gave no token count: its
	                            figures count the pieces of text that came */
	bool has_pool;           /* pool is the server's block map */
	link_snapshot pool;      /* from /pagechat/v1/pool: map, block_tokens, n_ctx and
	                            st's block counts, running/waiting, waste, prefix
	                            (conversations in the server's ids; no tables) */
} link_server;

/* The optional parts an engine fills; a panel draws those present. */
typedef struct link_view {
	uint64_t seq;            /* increases with every change */
	bool has_snap;           /* snap is the engine's own (the local engine's) */
	link_snapshot snap;
	bool has_server;         /* server is filled (a remote server's) */
	link_server server;
} link_view;

/* ---- starting an engine ---- */

/* The local engine: builds a core from p (the model and tokenizer stay
 * borrowed and must outlive the engine) and starts its thread. Returns the
 * engine's first link (LINK_TOKENS | LINK_FORK | LINK_SEVERAL); link_free on
 * it stops the engine. NULL with e. */
elink *link_start_local(const core_params *p, err *e);

typedef struct link_server_params {
	const char *url;         /* the server: http://host:port, with or without /v1 */
	const char *api_key;     /* sent as a bearer token, or NULL */
	const char *model;       /* the model to ask for, or NULL: the first one the
	                            server's /v1/models lists */
	int refresh_ms;          /* how often /metrics and the pool are read */
} link_server_params;

/* A remote OpenAI-compatible server (vLLM, SGLang, llama.cpp's
 * llama-server, Ollama, another `pagechat serve`): one background thread
 * does every transfer (link/remote.h). No caps: prompts go as text, and
 * link_fork answers FIN_ERROR. NULL with e only when the URL is not http(s)
 * or libcurl cannot start; an unreachable server is no error here (the view
 * and the requests say so). Strings are copied. */
elink *link_start_server(const link_server_params *p, err *e);

/* ---- using a link ---- */

unsigned link_caps(const elink *l);          /* enum link_cap bits; constant */

/* Sends q (copied). Cannot fail (see the top). */
void link_submit(elink *l, const link_request *q);
/* Finishes request id (FIN_CANCELLED); unknown or finished ids are ignored. */
void link_cancel(elink *l, int64_t id);
/* Branches completion index of request id into request new_id of
 * conversation new_conv (same tokens so far, shared blocks; see core_fork);
 * an id that has finished, or an engine without LINK_FORK, gets a FIN_ERROR
 * event for new_id. */
void link_fork(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
/* The conversation's pins go (its blocks stay cached); a no-op where the
 * engine pins nothing. */
void link_close_conv(elink *l, int conv);

/* The fd that is readable while events wait. */
int link_wake_fd(const elink *l);
/* Pops the oldest event into ev (free its text with link_event_clear);
 * false when none waits (the wake fd is then drained). */
bool link_poll(elink *l, link_event *ev);

/* Copies the latest view into out if it is newer than out->seq; returns
 * whether it copied. out starts zeroed; release with link_view_deinit. Any
 * thread. */
bool link_view_get(elink *l, link_view *out);
void link_view_deinit(link_view *v);

/* Opens another link to l's engine: its own ids, events and wake fd (the
 * server's requests each get one). Any thread. NULL with e when the engine
 * takes no more (a server's engine takes none: it has one link). */
elink *link_open(elink *l, err *e);
/* Releases l: a link from link_open has its unfinished requests cancelled
 * (their blocks go back to the pool) and its unread events dropped, without
 * waiting for the engine; an engine's first link stops the engine too (its
 * thread finishes the current step and is joined; every link opened from it
 * must be freed first). NULL is a no-op. */
void link_free(elink *l);

#endif
