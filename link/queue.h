/* link/queue.h: the one message queue of link/: a locked FIFO between
 * threads, with an optional wake-up pipe.
 *
 * Every queue in link/ is one of these: the engine thread's commands, each
 * engine client's events, the remote engine's commands and its links'
 * events. Nodes are intrusive (a struct embeds an lq_node as its first
 * member) and belong to the queue from lq_push until lq_pop or lq_take hands
 * them back. The lock is held only to link or unlink nodes: never while a
 * node is built, freed or handled.
 *
 * A consumer sleeps in one of two ways: in lq_wait (a condition variable,
 * for a thread that owns no poll loop: the engine's), or in poll() on
 * lq_wake_fd (a front-end's loop). The pipe carries at most one unread byte:
 * lq_wake writes it when nodes wait and none is unread, and an lq_pop that
 * finds the queue empty reads it back, so the fd is readable exactly while a
 * wake is unanswered (a byte written just after that costs one spurious
 * wake-up, never a lost one). Any thread may push, wake and pop. */
#ifndef PAGECHAT_LINK_QUEUE_H
#define PAGECHAT_LINK_QUEUE_H

#include "base/base.h"

#include <pthread.h>

typedef struct lq_node {
	struct lq_node *next;
} lq_node;

typedef struct lqueue {
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* signalled by every push (lq_wait) */
	lq_node *head, *tail;    /* under mu */
	bool signalled;          /* under mu: a wake byte is unread */
	int wake[2];             /* the pipe ([0] read by the consumer), or -1, -1 */
} lqueue;

/* An empty queue; with_pipe gives it a wake-up pipe (non-blocking,
 * close-on-exec). -1 with e when no pipe can be made (nothing to undo). */
int lq_init(lqueue *q, bool with_pipe, err *e);
/* Frees the nodes still queued with free_node (NULL: leaves them to whoever
 * else holds them), closes the pipe and destroys the lock. */
void lq_deinit(lqueue *q, void (*free_node)(lq_node *n));

/* Appends n (the queue owns it until popped) and signals lq_wait. Writes no
 * wake byte: see lq_wake. Cannot fail. */
void lq_push(lqueue *q, lq_node *n);
/* Writes the wake byte when nodes wait and none is unread (a no-op without
 * a pipe). Cannot fail. */
void lq_wake(lqueue *q);
/* Takes the oldest node (the caller owns it), or NULL when the queue is
 * empty; then the unread wake byte is consumed, so poll() sleeps again. */
lq_node *lq_pop(lqueue *q);
/* Takes every node at once (the caller owns them), oldest first, linked by
 * next; NULL when empty. Consumes no wake byte. */
lq_node *lq_take(lqueue *q);
/* Sleeps until a node waits, or timeout_s seconds pass (< 0: no limit).
 * Returns whether a node waits. */
bool lq_wait(lqueue *q, double timeout_s);
/* The pipe's read end (poll it for POLLIN), or -1 without a pipe. */
int lq_wake_fd(const lqueue *q);

#endif
