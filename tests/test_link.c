/* tests/test_link.c: link/'s own parts, without a model. The message queue
 * (link/queue.h): order, ownership, the wake-up pipe readable exactly while
 * a wake is unanswered, waits that time out empty or end on another
 * thread's push. And a server's link where its contract differs from the
 * local engine's (link/link.h): no capabilities, link_fork answers
 * FIN_ERROR for the new id, link_open refuses with one line, and a request
 * to an unreachable server ends in exactly one FINISH (FIN_ERROR naming the
 * address). Run under TSan by make test-threads. */
#include "link/link.h"
#include "link/queue.h"
#include "tests/test.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct item {
	lq_node node;            /* first */
	int v;
} item;

static void push(lqueue *q, int v)
{
	item *it = xcalloc(1, sizeof *it);
	it->v = v;
	lq_push(q, &it->node);
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void free_item(lq_node *n)
{
	free(n);
}

static void test_queue(void)
{
	lqueue q;
	err e = {0};
	CHECK(lq_init(&q, true, &e) == 0);
	int fd = lq_wake_fd(&q);
	lq_wake(&q);
	CHECK(fd >= 0 && !readable(fd)); /* nothing waits: no wake */
	for (int i = 0; i < 5; i++)
		push(&q, i);
	CHECK(!readable(fd)); /* a push writes no wake byte */
	lq_wake(&q);
	lq_wake(&q);
	CHECK(readable(fd));
	item *a = (item *)lq_pop(&q);
	CHECK(a && a->v == 0);
	free(a);
	CHECK(readable(fd)); /* unanswered until a pop finds the queue empty */
	int k = 1;
	for (lq_node *n = lq_take(&q), *next; n; n = next, k++) {
		next = n->next;
		CHECK_EQ_INT(((item *)n)->v, k);
		free(n);
	}
	CHECK_EQ_INT(k, 5);
	CHECK(readable(fd)); /* lq_take consumes no wake */
	CHECK(lq_pop(&q) == NULL);
	CHECK(!readable(fd));
	push(&q, 9);
	lq_wake(&q);
	CHECK(readable(fd)); /* a wake after the drain is not lost */
	push(&q, 10);
	lq_deinit(&q, free_item); /* frees what is still queued (ASan: no leak) */
}

static void *push_later(void *arg)
{
	poll(NULL, 0, 20);
	push(arg, 7);
	return NULL;
}

static void test_wait(void)
{
	lqueue q;
	CHECK(lq_init(&q, false, NULL) == 0);
	CHECK_EQ_INT(lq_wake_fd(&q), -1);
	lq_wake(&q); /* no pipe: a no-op */
	CHECK(!lq_wait(&q, 0.01)); /* times out empty */
	pthread_t th;
	CHECK(pthread_create(&th, NULL, push_later, &q) == 0);
	CHECK(lq_wait(&q, -1)); /* another thread's push ends it */
	pthread_join(th, NULL);
	CHECK(lq_wait(&q, 0)); /* a node waits: at once */
	item *it = (item *)lq_pop(&q);
	CHECK(it && it->v == 7);
	free(it);
	lq_deinit(&q, free_item);
}

/* The link's next event, waiting on its wake fd (10 s at most). */
static bool next_event(elink *l, link_event *ev)
{
	for (int i = 0; i < 1000; i++) {
		if (link_poll(l, ev))
			return true;
		struct pollfd p = {.fd = link_wake_fd(l), .events = POLLIN};
		poll(&p, 1, 10);
	}
	return false;
}

static void test_server_link(void)
{
	err e = {0};
#ifdef PAGECHAT_NO_HTTP /* make HTTP=0: refused, saying how to get it */
	CHECK(!link_start_server(&(link_server_params){.url = "http://127.0.0.1:9"}, &e) &&
	      strstr(e.msg, "without HTTP") && strstr(e.msg, "HTTP=1"));
	return;
#endif
	CHECK(!link_start_server(&(link_server_params){.url = "ftp://example.org"}, &e) && strstr(e.msg, "http://"));
	elink *l = link_start_server(&(link_server_params){.url = "http://127.0.0.1:9/v1/", .refresh_ms = 500}, &e);
	CHECK_(l, "%s", e.msg);
	if (!l)
		return;
	CHECK_EQ_INT(link_caps(l), 0);
	CHECK_(!link_open(l, &e) && strstr(e.msg, "http://127.0.0.1:9"), "%s", e.msg);
	link_view v = {0};
	CHECK(link_view_get(l, &v) && v.has_server && !v.has_snap);
	CHECK_(!strcmp(v.server.url, "http://127.0.0.1:9"), "'%s'", v.server.url);
	link_event ev;
	link_fork(l, 1, 0, 2, 5, 0);
	CHECK(next_event(l, &ev) && ev.kind == CORE_EV_FINISH && ev.req == 2 && ev.conv == 5 &&
	      ev.finish == FIN_ERROR && strstr(ev.text, "cannot branch"));
	link_event_clear(&ev);
	link_close_conv(l, 4); /* a no-op: a server holds no pins of ours */
	link_msg m = {"user", "hi", 2};
	link_submit(l, &(link_request){.r = {.id = 3, .conv = 4, .samp = samp_default_params()}, .msgs = &m,
				      .n_msgs = 1});
	CHECK(next_event(l, &ev) && ev.kind == CORE_EV_FINISH && ev.req == 3 && ev.conv == 4 &&
	      ev.finish == FIN_ERROR);
	CHECK_(ev.text && strstr(ev.text, "cannot reach http://127.0.0.1:9"), "'%s'", ev.text ? ev.text : "");
	link_event_clear(&ev);
	CHECK(!link_poll(l, &ev)); /* one FINISH, nothing after it */
	link_view_deinit(&v);
	link_free(l);
}

int main(void)
{
	test_queue();
	test_wait();
	test_server_link();
	return TEST_DONE();
}
