/* link/link_int.h: what the two engines of link/ share (folder-internal:
 * link/link.c, the local engine's files and the remote engine's include it).
 *
 * Every link is an elink at the start of its engine's own record (an
 * engine client, a remote link): the engine's table of operations, its
 * capabilities and its event queue, the one link/queue.h queue with a
 * wake-up pipe that link_poll and link_wake_fd read for either engine. The
 * engine's thread fills the queue (link_push_event, then lq_wake), the
 * link's front-end empties it. */
#ifndef PAGECHAT_LINK_INT_H
#define PAGECHAT_LINK_INT_H

#include "link/link.h"
#include "link/queue.h"

/* An engine's side of the link_* calls (link.h gives the contracts). */
typedef struct link_ops {
	void (*submit)(elink *l, const link_request *q);
	void (*cancel)(elink *l, int64_t id);
	void (*fork)(elink *l, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
	void (*close_conv)(elink *l, int conv);
	bool (*view)(elink *l, link_view *out);
	elink *(*open)(elink *l, err *e);
	void (*free)(elink *l);
} link_ops;

struct elink {
	const link_ops *ops;     /* borrowed: the engine's static table */
	unsigned caps;           /* enum link_cap */
	lqueue events;           /* ev_node; pushed by the engine's thread */
};

typedef struct ev_node {
	lq_node node;            /* first */
	link_event ev;
} ev_node;

/* Sets l up (an empty event queue with its pipe). -1 with e when no pipe
 * can be made (nothing to undo). */
int link_init(elink *l, const link_ops *ops, unsigned caps, err *e);
/* Drops l's unread events and closes its pipe. */
void link_deinit(elink *l);
/* Queues ev for l's front-end (its text taken). No wake byte: the engine
 * wakes with lq_wake(&l->events) once it has pushed what it has. */
void link_push_event(elink *l, const link_event *ev);

/* Starts an engine thread with every signal blocked (signals belong to the
 * front-end's thread). pthread_create's result. */
int link_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);

#endif
