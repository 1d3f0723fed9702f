/* tests/fuzz/fuzz_remote_view.c: what a server sends the chat, through the
 * remote engine (link/remote.h, its transfers, its SSE reader and its
 * scrapes) to the screen: a stand-in server (a thread here, on a loopback
 * port) answers with the input's bytes, one answer streams into a tab, and
 * the tab and the server panel (ui/ui_server.c: the model, /metrics'
 * figures and kind, the block map, the last failure) are drawn into a
 * virtual screen (tests/fuzz/fuzz_ui.h).
 *
 * Input: byte 0 options (bits 0-1 the stream's HTTP status: 200, 200, 500
 * or 401; bit 2 /metrics answers 404; bit 3 the pool answers 404), then
 * fields at FUZZ_SEP: the /v1/models body, the /metrics body, the
 * /pagechat/v1/pool body, and the stream's body (server-sent events, sent
 * as they are, then the connection closes).
 *
 * Properties: nothing is read or written out of bounds (ASan, UBSan); the
 * answer ends (a FINISH event within 10 s, whatever the server sent), an
 * error ends it with one line; the view's kind and figures are well formed;
 * drawing the tab and the panel works at any width. */
#include "tests/fuzz/fuzz_ui.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

/* The stand-in server: one thread for the process, answering with the
 * current input (copied under mu). */
static struct {
	pthread_mutex_t mu;
	int fd, port;
	uint8_t opt;
	char *body[4];           /* owned: models, metrics, pool, stream */
	size_t len[4];
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void send_all(int fd, const void *p, size_t n)
{
	const char *s = p;
	while (n > 0) {
		ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
		if (k <= 0)
			return;
		s += k;
		n -= (size_t)k;
	}
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len, bool sized)
{
	char head[256];
	if (sized)
		snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", status, type, len);
	else
		snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nConnection: close\r\n\r\n", status,
			 type);
	send_all(fd, head, strlen(head));
	send_all(fd, body, len);
}

/* Reads a request's head (and its body, unread) and answers it. */
static void serve_one(int fd)
{
	char req[16384];
	size_t n = 0;
	while (n + 1 < sizeof req && !memmem(req, n, "\r\n\r\n", 4)) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 2000) <= 0)
			return;
		ssize_t k = recv(fd, req + n, sizeof req - n - 1, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
	}
	req[n] = '\0';
	static const char *const stream_status[4] = {"200 OK", "200 OK", "500 Internal Server Error",
						     "401 Unauthorized"};
	pthread_mutex_lock(&srv.mu);
	uint8_t opt = srv.opt;
	int which = !strncmp(req, "GET /v1/models", 14) ? 0 : !strncmp(req, "GET /metrics", 12) ? 1
		: !strncmp(req, "GET /pagechat/v1/pool", 21) ? 2 : !strncmp(req, "POST /v1/", 9) ? 3 : -1;
	char *body = which >= 0 ? fuzz_copy(srv.body[which], srv.len[which], false) : NULL;
	size_t len = which >= 0 ? srv.len[which] : 0;
	pthread_mutex_unlock(&srv.mu);
	if (which < 0 || (which == 1 && (opt & 4)) || (which == 2 && (opt & 8)))
		reply(fd, "404 Not Found", "application/json", "{\"error\":{\"message\":\"no such path\"}}", 37, true);
	else if (which == 3)
		reply(fd, stream_status[opt & 3], "text/event-stream", body, len, false);
	else
		reply(fd, "200 OK", which == 1 ? "text/plain" : "application/json", body, len, true);
	free(body);
}

static void *serve_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(srv.fd, NULL, NULL);
		if (c < 0)
			continue;
		serve_one(c);
		shutdown(c, SHUT_WR);
		close(c);
	}
	return NULL;
}

static void serve_start(void)
{
	if (srv.fd >= 0)
		return;
	srv.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	pthread_t th;
	if (srv.fd < 0 || bind(srv.fd, (struct sockaddr *)&a, sizeof a) || listen(srv.fd, 64) ||
	    getsockname(srv.fd, (struct sockaddr *)&a, &al) || pthread_create(&th, NULL, serve_main, NULL)) {
		perror("fuzz_remote_view: the stand-in server");
		abort();
	}
	srv.port = ntohs(a.sin_port);
}

/* The answer's events into message i of t's conversation, until it ends;
 * false when no FINISH came within the deadline. */
static bool stream(elink *l, conv *c, int i)
{
	double deadline = now_s() + 10;
	while (now_s() < deadline) {
		struct pollfd p = {.fd = link_wake_fd(l), .events = POLLIN};
		poll(&p, 1, 100);
		link_event ev;
		while (link_poll(l, &ev)) {
			bool end = ev.kind == CORE_EV_FINISH;
			if (!end) {
				conv_append(c, i, ev.text, ev.text_len);
			} else {
				FUZZ_CHECK(!memchr(ev.text, '\n', ev.text_len)); /* one line, if any */
				conv_answer_end(c, i, core_finish_name(ev.finish), &ev.m);
				if (ev.finish == FIN_ERROR)
					conv_set_error(c, i, ev.text);
			}
			link_event_clear(&ev);
			if (end)
				return true;
		}
	}
	return false;
}

/* The view once /metrics was read (or the deadline passed). */
static void view_after_scrape(elink *l, link_view *v)
{
	double deadline = now_s() + 5;
	while (link_view_get(l, v), (!v->has_server || v->server.metrics_status == 0) && now_s() < deadline)
		poll(NULL, 0, 5);
}

static void check_view(const link_view *v)
{
	const link_server *s = &v->server;
	FUZZ_CHECK(memchr(s->kind, '\0', sizeof s->kind) && memchr(s->model, '\0', sizeof s->model) &&
		   memchr(s->problem, '\0', sizeof s->problem));
	for (int f = 0; f < LF_N; f++)
		FUZZ_CHECK(!s->fig[f].have || s->fig[f].source[0]);
	FUZZ_CHECK(!s->has_pool || (s->pool.n_blocks >= 0 && s->pool.n_blocks <= s->pool.map_cap));
}

static void draw(elink *l, conv *c, link_view *v, int cols)
{
	tab *tabs[1];
	ui u;
	fuzz_ui(&u, l, tabs, TMPL_NONE, cols);
	u.view = *v;
	u.w_side = newwin(FUZZ_ROWS - 2, 40, 1, MAX(0, cols - 40));
	tabs[u.n_tabs++] = fuzz_tab(c, 0);
	fuzz_draw_tabs(&u);
	server_panel_draw(&u);
	doupdate();
	u.view = (link_view){0};
	fuzz_ui_end(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	uint8_t opt = fuzz_byte(&in);
	serve_start();
	pthread_mutex_lock(&srv.mu);
	srv.opt = opt;
	for (int k = 0; k < 4; k++) {
		fuzz_in f = fuzz_field(&in);
		free(srv.body[k]);
		srv.body[k] = fuzz_copy(f.p, f.n, false);
		srv.len[k] = f.n;
	}
	pthread_mutex_unlock(&srv.mu);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", srv.port);
	err e = {0};
	elink *l = link_start_server(&(link_server_params){.url = url, .refresh_ms = 20}, &e);
	if (!l) {
		fprintf(stderr, "fuzz_remote_view: %s\n", e.msg);
		abort();
	}
	conv c;
	conv_init(&c, "remote", "", "Be brief.");
	conv_add(&c, CONV_USER, "Hi", 2);
	int i = conv_add(&c, CONV_ASSISTANT, "", 0);
	link_msg msgs[2] = {{"system", c.system, strlen(c.system)}, {"user", "Hi", 2}};
	link_request q = {.r = {.id = 1, .conv = 1, .samp = samp_default_params(), .max_tokens = 8, .n = 1},
			  .msgs = msgs, .n_msgs = 2};
	link_submit(l, &q);
	FUZZ_CHECK(stream(l, &c, i));
	link_view v = {0};
	view_after_scrape(l, &v);
	check_view(&v);
	FUZZ_NOTE("answer '%.60s' finish %s error '%.80s'; model '%.40s' metrics %d kind '%s' pool %d blocks %lld",
		  c.msgs[i].text, c.msgs[i].finish, c.msgs[i].error ? c.msgs[i].error : "", v.server.model,
		  v.server.metrics_status, v.server.kind, v.server.has_pool, (long long)v.server.pool.n_blocks);
	draw(l, &c, &v, 60 + opt % 100);
	link_view_deinit(&v);
	link_free(l);
	conv_deinit(&c);
	return 0;
}
