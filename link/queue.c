/* link/queue.c: the locked FIFO and its wake-up pipe (link/queue.h). */
#include "link/queue.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int lq_init(lqueue *q, bool with_pipe, err *e)
{
	memset(q, 0, sizeof *q);
	q->wake[0] = q->wake[1] = -1;
	if (with_pipe) {
		if (pipe(q->wake)) {
			err_set(e, "cannot create a wake-up pipe: %s", strerror(errno));
			return -1;
		}
		for (int i = 0; i < 2; i++) {
			fcntl(q->wake[i], F_SETFL, fcntl(q->wake[i], F_GETFL) | O_NONBLOCK);
			fcntl(q->wake[i], F_SETFD, FD_CLOEXEC);
		}
	}
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	return 0;
}

void lq_deinit(lqueue *q, void (*free_node)(lq_node *n))
{
	for (lq_node *n = q->head, *next; n && free_node; n = next) {
		next = n->next;
		free_node(n);
	}
	q->head = q->tail = NULL;
	if (q->wake[0] >= 0) {
		close(q->wake[0]);
		close(q->wake[1]);
	}
	q->wake[0] = q->wake[1] = -1;
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
}

void lq_push(lqueue *q, lq_node *n)
{
	n->next = NULL;
	pthread_mutex_lock(&q->mu);
	if (q->tail)
		q->tail->next = n;
	else
		q->head = n;
	q->tail = n;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

void lq_wake(lqueue *q)
{
	if (q->wake[1] < 0)
		return;
	pthread_mutex_lock(&q->mu);
	bool need = q->head && !q->signalled;
	if (need)
		q->signalled = true;
	pthread_mutex_unlock(&q->mu);
	if (!need)
		return;
	ssize_t w;
	do
		w = write(q->wake[1], "e", 1);
	while (w < 0 && errno == EINTR);
}

lq_node *lq_pop(lqueue *q)
{
	pthread_mutex_lock(&q->mu);
	lq_node *n = q->head;
	if (n) {
		q->head = n->next;
		if (!q->head)
			q->tail = NULL;
		n->next = NULL;
	} else if (q->wake[0] >= 0) {
		char buf[16];
		while (read(q->wake[0], buf, sizeof buf) > 0)
			;
		q->signalled = false;
	}
	pthread_mutex_unlock(&q->mu);
	return n;
}

lq_node *lq_take(lqueue *q)
{
	pthread_mutex_lock(&q->mu);
	lq_node *n = q->head;
	q->head = q->tail = NULL;
	pthread_mutex_unlock(&q->mu);
	return n;
}

bool lq_wait(lqueue *q, double timeout_s)
{
	struct timespec ts;
	if (timeout_s >= 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		long ns = ts.tv_nsec + (long)((timeout_s - (double)(long)timeout_s) * 1e9);
		ts.tv_sec += (time_t)timeout_s + ns / 1000000000L;
		ts.tv_nsec = ns % 1000000000L;
	}
	pthread_mutex_lock(&q->mu);
	while (!q->head) {
		if (timeout_s < 0)
			pthread_cond_wait(&q->cv, &q->mu);
		else if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
			break;
	}
	bool any = q->head != NULL;
	pthread_mutex_unlock(&q->mu);
	return any;
}

int lq_wake_fd(const lqueue *q)
{
	return q->wake[0];
}
