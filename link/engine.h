/* link/engine.h: the engine thread, its command queue and its clients.
 *
 * eng_start() moves a core (engine/core.h) onto a background thread. Other
 * threads talk to it only through messages copied by value: commands in
 * (submit, cancel, fork, close conversation, stop) and events out (tokens
 * with their text, finishes with metrics). Once per step the engine also
 * publishes a by-value snapshot (figures and the block map) that panels and
 * the server's /metrics draw.
 *
 * Several front-ends can share one engine (the chat's tabs and the HTTP
 * server's requests, so they share blocks and prefixes): each is an
 * eng_client with its own event queue and wake-up fd (the read end of a pipe
 * that is readable whenever events wait, so a poll() loop can sleep on it).
 * Events reach only the client that submitted the request, under the ids that
 * client gave: request and conversation ids are the client's own, and two
 * clients may use the same ones. eng_start opens the default client, which
 * eng_submit(), eng_poll() and the other eng_* calls without a client use.
 * A client is used by one thread at a time; commands and polling may come
 * from any thread except the engine's own; eng_stop() from the thread that
 * started it. */
#ifndef PAGECHAT_ENGINE_H
#define PAGECHAT_ENGINE_H

#include "engine/core.h"

typedef struct eng eng;
typedef struct eng_client eng_client;

/* Clients open at once, the default one included. */
#define ENG_MAX_CLIENTS 1024
/* A client's conversation ids are 0 .. ENG_CONV_IDS - 1; the engine keeps
 * client k's conversation c as k * ENG_CONV_IDS + c (what the block map's
 * conv shows), the default client's as c itself. */
#define ENG_CONV_IDS (1 << 20)

typedef struct eng_event {
	enum core_event_kind kind;
	int64_t req;             /* the client's request id */
	int conv, index;         /* the client's conversation id */
	uint64_t step;
	int32_t token;
	char *text;              /* owned by the receiver (free with eng_event_clear) */
	size_t text_len;
	enum core_finish finish;
	core_req_metrics m;
} eng_event;

typedef struct eng_snapshot {
	uint64_t seq;            /* increases with every publication */
	core_stats st;
	double prefill_tps;      /* prompt rows computed per second, over the last
	                            half second or more (0 once idle that long) */
	double decode_tps;       /* tokens generated per second (target tokens: with
	                            drafts, the accepted ones), likewise */
	int64_t n_blocks;
	int block_tokens;
	int n_ctx;               /* the per-sequence context limit, tokens */
	core_block_info *map;    /* owned; [n_blocks] */
	int64_t map_cap;
	/* the running sequences' block tables (core_seq_tables), in the map's
	 * conversation ids */
	core_seq_info *seqs;     /* owned; [n_seqs] */
	int n_seqs, cap_seqs;
	int32_t *seq_blocks;     /* owned; the tables' block ids */
	int cap_seq_blocks;
} eng_snapshot;

/* Builds the core from p (the model and tokenizer stay borrowed and must
 * outlive the engine) and starts the thread. NULL with e filled. */
eng *eng_start(const core_params *p, err *e);
/* Asks the thread to finish its current step and exit, joins it, and frees
 * everything, every client included (their handles become invalid: close
 * them first). Unfinished requests get no further events. NULL is a no-op. */
void eng_stop(eng *g);

/* Opens a client: an empty event queue and its wake-up fd. NULL with e when
 * ENG_MAX_CLIENTS are open or no pipe can be made. */
eng_client *eng_client_open(eng *g, err *e);
/* Cancels the client's unfinished requests (their blocks go back to the
 * pool), drops its unread events and releases it; the handle is invalid
 * after the call. Does not wait for the engine. NULL is a no-op. */
void eng_client_close(eng_client *c);
/* The default client (owned by the engine; never close it). */
eng_client *eng_default_client(eng *g);

/* Commands: copied into the queue; cannot fail. A submitted request that the
 * core refuses is answered with FIN_ERROR events, one per completion. */
void eng_client_submit(eng_client *c, const core_request *r);
/* Finishes the client's request id (FIN_CANCELLED); unknown ids are ignored. */
void eng_client_cancel(eng_client *c, int64_t id);
/* Branches completion index of request id into new_id (see core_fork); an id
 * that has finished gets a FIN_ERROR event for new_id. */
void eng_client_fork(eng_client *c, int64_t id, int index, int64_t new_id, int new_conv,
		     uint64_t seed);
void eng_client_close_conv(eng_client *c, int conv);

int  eng_client_wake_fd(const eng_client *c);
/* Pops the client's oldest event into ev; false when none is waiting. */
bool eng_client_poll(eng_client *c, eng_event *ev);
void eng_event_clear(eng_event *ev);

/* The same commands and polling on the default client. */
void eng_submit(eng *g, const core_request *r);
void eng_cancel(eng *g, int64_t id);
void eng_fork(eng *g, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
void eng_close_conv(eng *g, int conv);
int  eng_wake_fd(const eng *g);
bool eng_poll(eng *g, eng_event *ev);

/* Copies the latest snapshot into out if it is newer than out->seq; returns
 * whether it copied. out must start zeroed; release with eng_snapshot_deinit.
 * Any thread. */
bool eng_snapshot_get(eng *g, eng_snapshot *out);
void eng_snapshot_deinit(eng_snapshot *s);

#endif
