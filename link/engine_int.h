/* link/engine_int.h: the engine thread's records (folder-internal: only
 * link/engine.c and link/engine_client.c include this). engine.c runs
 * the thread, its command queue and the snapshot; engine_client.c the
 * clients: their event queues and wake-up pipes, and the routes that take a
 * core request's events back to the client that submitted it.
 *
 * Ids: the core sees one id space. Each submit or fork gets a fresh core id
 * (increasing, never reused) and a route {core id -> client, the client's
 * id and conversation}; the route lives until every completion of the
 * request has finished. A client's conversation c is kept in the core as
 * slot * ENG_CONV_IDS + c (slot 0, the default client: c itself). */
#ifndef PAGECHAT_ENGINE_INT_H
#define PAGECHAT_ENGINE_INT_H

#include "link/engine.h"

#include <pthread.h>

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_FORK, CMD_CLOSE_CONV, CMD_CLIENT_CLOSE, CMD_STOP };

typedef struct cmd {
	enum cmd_kind kind;
	eng_client *cl;          /* borrowed: the client that sent it (NULL for STOP) */
	core_request r;          /* SUBMIT: prompt, stop lists owned by the cmd */
	int64_t id, new_id;      /* the client's ids */
	int index, conv;         /* the client's conversation id */
	uint64_t seed;
	struct cmd *next;
} cmd;

typedef struct ev_node {
	eng_event ev;
	struct ev_node *next;
} ev_node;

struct eng_client {
	eng *g;                  /* borrowed: the engine it belongs to */
	int slot;                /* its index in eng.clients */
	int wake[2];             /* pipe: [0] read by the client, [1] written by the engine */
	pthread_mutex_t mu;
	ev_node *head, *tail;    /* owned; under mu */
	bool signalled;          /* under mu: a wake byte is unread */
	bool dirty;              /* engine thread: events pushed since the last wake */
};

typedef struct route {
	int64_t id;              /* the core's request id */
	int64_t local;           /* the client's */
	eng_client *cl;          /* borrowed; open while the route lives */
	int conv;                /* the client's conversation id */
	int left;                /* completions still to finish */
} route;

struct eng {
	core *core;              /* owned; touched only by the engine thread after start */
	pthread_t thread;
	pthread_mutex_t cmd_mu;
	pthread_cond_t cmd_cv;
	cmd *cmd_head, *cmd_tail;/* owned; under cmd_mu */
	pthread_mutex_t cli_mu;
	eng_client *clients[ENG_MAX_CLIENTS]; /* owned; slot -> client, under cli_mu */
	pthread_mutex_t snap_mu;
	eng_snapshot snap;       /* under snap_mu */
	/* engine-thread-only state */
	route *routes;           /* owned; [n_routes] by increasing id */
	int n_routes, cap_routes;
	int64_t next_id;         /* the next core request id */
	eng_client **dirty;      /* owned; [n_dirty] clients with events since the last wake */
	int n_dirty;
	eng_snapshot work;       /* built each step, then copied into snap */
	double rate_t;           /* start of the rate window (0: none yet) */
	int64_t rate_prefill, rate_decode; /* the counters at its start */
	double last_publish;
	double min_step_s;       /* core_params.min_step_ms: the pace, 0 none */
};

/* ---- link/engine.c ---- */

/* Appends c to the command queue and wakes the thread. */
void push_cmd(eng *g, cmd *c);
void cmd_free(cmd *c);

/* ---- link/engine_client.c ---- */

/* The core's event callback (ctx is the eng): routes ce to its client. */
void route_event(void *ctx, const core_event *ce);
/* Carries out a client's command (every kind but STOP). */
void client_apply(eng *g, cmd *c);
/* Writes the wake byte of every client that got events since the last call. */
void clients_wake(eng *g);
/* Opens the default client (slot 0); -1 with e. */
int clients_init(eng *g, err *e);
/* Frees every client still open (after the thread has stopped). */
void clients_deinit(eng *g);

#endif
