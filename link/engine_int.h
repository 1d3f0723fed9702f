/* link/engine_int.h: the local engine's records (folder-internal: only
 * link/engine.c and link/engine_client.c include this). engine.c runs the
 * thread, steps the core, publishes the snapshot and starts and stops the
 * engine; engine_client.c holds the clients (each one a link: its own ids
 * and event queue), the routes that take a core request's events back to
 * the client that submitted it, and the commands clients send. engine.c
 * calls into engine_client.c, never the other way.
 *
 * Ids: the core sees one id space. Each submit or fork gets a fresh core id
 * (increasing, never reused) and a route {core id -> client, the client's
 * id and conversation}; the route lives until every completion of the
 * request has finished. A client's conversation c is kept in the core as
 * slot * LINK_CONV_IDS + c (slot 0, the engine's first link: c itself). */
#ifndef PAGECHAT_ENGINE_INT_H
#define PAGECHAT_ENGINE_INT_H

#include "link/link_int.h"

#include <pthread.h>

/* Clients open at once, the first included. */
#define ENG_MAX_CLIENTS 1024

typedef struct eng eng;
typedef struct eng_client eng_client;

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_FORK, CMD_CLOSE_CONV, CMD_CLIENT_CLOSE, CMD_STOP };

typedef struct cmd {
	lq_node node;            /* first: on eng.cmds */
	enum cmd_kind kind;
	eng_client *cl;          /* borrowed: the client that sent it (NULL for STOP) */
	core_request r;          /* SUBMIT: prompt, stop lists owned by the cmd */
	int64_t id, new_id;      /* the client's ids */
	int index, conv;         /* the client's conversation id */
	uint64_t seed;
} cmd;

struct eng_client {
	elink link;              /* first: the link this client is (its event queue) */
	eng *g;                  /* borrowed: the engine it belongs to */
	int slot;                /* its index in eng.clients */
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
	lqueue cmds;             /* cmd; any thread pushes, the engine thread takes */
	pthread_mutex_t cli_mu;
	eng_client *clients[ENG_MAX_CLIENTS]; /* owned; slot -> client, under cli_mu */
	pthread_mutex_t snap_mu;
	link_snapshot snap;      /* under snap_mu */
	/* engine-thread-only state */
	route *routes;           /* owned; [n_routes] by increasing id */
	int n_routes, cap_routes;
	int64_t next_id;         /* the next core request id */
	eng_client **dirty;      /* owned; [n_dirty] clients with events since the last wake */
	int n_dirty;
	link_snapshot work;      /* built each step, then copied into snap */
	double rate_t;           /* start of the rate window (0: none yet) */
	int64_t rate_prefill, rate_decode; /* the counters at its start */
	double last_publish;
	double min_step_s;       /* core_params.min_step_ms: the pace, 0 none */
};

/* ---- link/engine_client.c ---- */

/* Opens the first client (slot 0) with the engine's ops; -1 with e. */
int clients_init(eng *g, const link_ops *ops, err *e);
/* Frees every client still open (after the thread has stopped). */
void clients_deinit(eng *g);
/* The core's event callback (ctx is the eng): routes ce to its client. */
void route_event(void *ctx, const core_event *ce);
/* Carries out a client's command (every kind but STOP). */
void client_apply(eng *g, cmd *c);
/* Writes the wake byte of every client that got events since the last call. */
void clients_wake(eng *g);
void cmd_free(cmd *c);

/* The link operations of a client (link_ops; engine.c's table holds them). */
void client_submit(elink *l, const link_request *q);
void client_cancel(elink *l, int64_t id);
void client_fork(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
void client_close_conv(elink *l, int conv);
elink *client_open(elink *l, err *e);
/* Closes a client other than the first (through the engine thread). */
void client_close(eng_client *c);

#endif
