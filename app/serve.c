/* app/serve.c: the HTTP server's frame: the listening socket, libmicrohttpd's
 * daemon, the endpoint table, and the checks every request passes before its
 * endpoint runs: the route, the API key, the body's size and its deadline.
 *
 * libmicrohttpd parses HTTP, runs a thread per connection (at most
 * max_connections; more are closed at accept), closes connections idle for
 * timeout_s, and caps a request's header memory (oversized headers get its
 * own 431). A body said to be too large gets 413; one that grows too large
 * while it arrives (chunked) gets the connection closed (libmicrohttpd sends
 * nothing before a body has ended).
 *
 * libmicrohttpd's timeout is an idle one: a byte now and then keeps a
 * connection open for ever (slowloris). A watchdog thread here holds every
 * connection to deadlines of its own (enum conn_phase): the whole head and
 * body of a request within timeout_s of the connection's opening or of its
 * previous answer's end, and a stream's bytes taken by the client within
 * timeout_s of being handed over. A connection past its deadline is shut
 * down (its socket, through a duplicate the watch owns, so that a number
 * libmicrohttpd has closed and reused is never touched); its thread then
 * ends the request, which cancels a generation and returns its blocks. A
 * slow or stalled client therefore holds one thread for a bounded time. */
#include "app/http.h"

#include "app/opts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const struct endpoint {
	const char *method, *path;
	bool prefix;             /* path is a prefix ("/v1/models/" + an id) */
	bool needs_key;          /* the API key guards it */
	bool has_body;
	enum MHD_Result (*run)(call *c);
} endpoints[] = {
	{"POST", "/v1/chat/completions", false, true, true, http_chat},
	{"POST", "/v1/completions", false, true, true, http_completions},
	{"GET", "/v1/models", false, true, false, http_models},
	{"GET", "/v1/models/", true, true, false, http_models},
	{"GET", "/health", false, false, false, http_health},
	{"GET", "/metrics", false, false, false, http_metrics},
	{"GET", "/pagechat/v1/pool", false, true, false, http_pool},
};

/* The endpoint for method and url, or -1; *path_known when only the method
 * is wrong. HEAD goes where GET would. */
static int find_endpoint(const char *method, const char *url, bool *path_known)
{
	*path_known = false;
	bool head = !strcmp(method, "HEAD");
	for (size_t i = 0; i < ARRAY_LEN(endpoints); i++) {
		const struct endpoint *p = &endpoints[i];
		size_t n = strlen(p->path);
		if (p->prefix ? strncmp(url, p->path, n) || !url[n] || strchr(url + n, '/') : strcmp(url, p->path))
			continue;
		*path_known = true;
		if (!strcmp(method, p->method) || (head && !strcmp(p->method, "GET")))
			return (int)i;
	}
	return -1;
}

/* Whether the request carries "Authorization: Bearer <the key>" (compared
 * in time independent of where the first difference is). */
static bool key_ok(const serve *s, struct MHD_Connection *conn)
{
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncmp(h, "Bearer ", 7))
		return false;
	h += 7;
	size_t a = strlen(h), b = strlen(s->api_key);
	unsigned diff = a != b;
	for (size_t i = 0; i < b; i++)
		diff |= (unsigned)(uint8_t)s->api_key[i] ^ (unsigned)(uint8_t)(i < a ? h[i] : 0);
	return diff == 0;
}

/* The checks that need only the headers; MHD_YES with nothing queued when
 * the request may go on. */
static enum MHD_Result check_headers(call *c, const char *method, const char *url)
{
	serve *s = c->s;
	bool path_known;
	c->endpoint = find_endpoint(method, url, &path_known);
	if (c->endpoint < 0 && path_known)
		return http_error(c, 405, "invalid_request_error", NULL, "method_not_allowed",
				  "%s is not allowed on %s", method, url);
	if (c->endpoint < 0)
		return http_error(c, 404, "invalid_request_error", NULL, "not_found", "no endpoint %s %s "
				  "(see GET /v1/models, POST /v1/chat/completions, POST /v1/completions)", method, url);
	const struct endpoint *ep = &endpoints[c->endpoint];
	if (ep->needs_key && s->api_key && !key_ok(s, c->conn))
		return http_error(c, 401, "invalid_request_error", NULL, "invalid_api_key",
				  "missing or wrong API key: send the header 'Authorization: Bearer KEY'");
	const char *cl = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	uint64_t n = 0;
	if (cl && cli_parse_number(OPT_U64, cl, &n) && n > s->p.max_body)
		return http_error(c, 413, "invalid_request_error", NULL, "body_too_large",
				  "the body is %llu bytes; this server takes at most %zu", (unsigned long long)n,
				  s->p.max_body);
	return MHD_YES;
}

/* A piece of the body: appended, unless the body grows past the limit
 * (one without a Content-Length): then the connection is closed, as
 * libmicrohttpd sends no response before the body has ended. */
static enum MHD_Result take_body(call *c, const char *data, size_t n)
{
	serve *s = c->s;
	if (c->len + n > s->p.max_body) {
		atomic_fetch_add(&s->refused_big, 1);
		return MHD_NO;
	}
	xgrow_size(&c->body, &c->cap, c->len + n + 1, 1);
	memcpy(c->body + c->len, data, n);
	c->len += n;
	c->body[c->len] = '\0';
	return MHD_YES;
}

/* ---- deadlines ---- */

/* libmicrohttpd's word on a connection opening or closing: its watch is
 * made or freed (the socket context). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	serve *s = cls;
	conn_watch *w = *ctx;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		int fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
		if (fd < 0)
			return; /* no watch: libmicrohttpd's idle timeout alone */
		w = xcalloc(1, sizeof *w);
		*w = (conn_watch){.fd = fd, .phase = CONN_READING, .since = now_s()};
		pthread_mutex_lock(&s->watch_lock);
		w->next = s->watches;
		if (s->watches)
			s->watches->prev = w;
		s->watches = w;
		pthread_mutex_unlock(&s->watch_lock);
		*ctx = w;
		return;
	}
	if (!w)
		return;
	pthread_mutex_lock(&s->watch_lock);
	if (w->prev)
		w->prev->next = w->next;
	else
		s->watches = w->next;
	if (w->next)
		w->next->prev = w->prev;
	pthread_mutex_unlock(&s->watch_lock);
	close(w->fd);
	free(w);
	*ctx = NULL;
}

/* Shuts down every connection past its deadline (under the lock). */
static void cut_late(serve *s, double now)
{
	for (conn_watch *w = s->watches; w; w = w->next) {
		if ((w->phase != CONN_READING && w->phase != CONN_WRITING) || now - w->since <= s->p.timeout_s)
			continue;
		atomic_fetch_add(w->phase == CONN_READING ? &s->refused_slow : &s->stalled, 1);
		w->phase = CONN_CUT;
		shutdown(w->fd, SHUT_RDWR);
	}
}

/* The watchdog thread: a look every 100 ms until the stop pipe is readable. */
static void *watchdog(void *arg)
{
	serve *s = arg;
	struct pollfd p = {.fd = s->stop[0], .events = POLLIN};
	while (poll(&p, 1, 100) <= 0 || !(p.revents & POLLIN)) {
		pthread_mutex_lock(&s->watch_lock);
		cut_late(s, now_s());
		pthread_mutex_unlock(&s->watch_lock);
	}
	return NULL;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				 const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	(void)version;
	serve *s = cls;
	call *c = *con_cls;
	if (!c) {
		c = xcalloc(1, sizeof *c);
		*c = (call){.s = s, .conn = conn, .endpoint = -1, .path = xstrdup(url), .t_start = now_s()};
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		c->w = ci ? ci->socket_context : NULL;
		*con_cls = c;
		enum MHD_Result rc = check_headers(c, method, url);
		if (rc != MHD_YES || c->answered || endpoints[c->endpoint].has_body)
			return rc;
		http_phase(c, CONN_BUSY);
		return endpoints[c->endpoint].run(c);
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (now_s() - c->t_start > s->p.timeout_s) {
			/* a body still arriving after the timeout: closed, unanswered */
			atomic_fetch_add(&s->refused_slow, 1);
			return MHD_NO;
		}
		return c->answered ? MHD_YES : take_body(c, upload, n);
	}
	if (c->answered || !endpoints[c->endpoint].has_body)
		return MHD_YES;
	http_phase(c, CONN_BUSY);
	return endpoints[c->endpoint].run(c);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	serve *s = cls;
	call *c = *con_cls;
	if (!c)
		return;
	if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
		atomic_fetch_add(&s->refused_slow, 1);
	else if (c->gen && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		atomic_fetch_add(&s->disconnects, 1);
	http_gen_free(c->gen);
	http_phase(c, CONN_READING); /* the next request's deadline, on a kept-alive connection */
	free(c->path);
	free(c->body);
	free(c);
	*con_cls = NULL;
}

/* ---- starting and stopping ---- */

/* A listening TCP socket on host:port; -1 with e. *v6 tells the family. */
static int listen_on(const char *host, int port, bool *v6, err *e)
{
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(host, ps, &hints, &res);
	if (rc) {
		err_set(e, "serve: cannot resolve --host '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	int fd = -1, why = 0;
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		int one = 1;
		if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
				bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128))) {
			why = errno;
			close(fd);
			fd = -1;
		}
		if (fd >= 0)
			*v6 = a->ai_family == AF_INET6;
	}
	freeaddrinfo(res);
	if (fd < 0)
		err_set(e, "serve: cannot listen on %s:%d: %s", host, port, strerror(why ? why : errno));
	return fd;
}

static int bound_port(int fd)
{
	struct sockaddr_storage a;
	socklen_t n = sizeof a;
	if (getsockname(fd, (struct sockaddr *)&a, &n))
		return -1;
	return ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
					     : ((struct sockaddr_in *)&a)->sin_port);
}

/* The most bytes one token stands for (a bound for a text's tokens from its
 * length: a text of B bytes has at least B / this many), with a little to
 * spare for the spaces a tokenizer may add or drop at the start. */
static int longest_token(const tok *t)
{
	if (!t)
		return INT_MAX / 2; /* no vocabulary to bound by: the check is off */
	int most = 1;
	char buf[64];
	for (int32_t id = 0; id < tok_n_vocab(t); id++)
		most = MAX(most, tok_detokenize(t, &id, 1, false, buf, sizeof buf)); /* the length, not what fit */
	return most + 2;
}

static void fill_defaults(serve *s, const serve_params *p, const serve_engine *x)
{
	s->p = *p;
	s->host = xstrdup(p->host ? p->host : "127.0.0.1");
	s->api_key = p->api_key ? xstrdup(p->api_key) : NULL;
	s->model_name = xstrdup(x->model_name ? x->model_name : "model");
	s->p.host = s->host;
	s->p.api_key = s->api_key;
	s->p.max_connections = p->max_connections > 0 ? p->max_connections : 256;
	s->p.timeout_s = p->timeout_s > 0 ? p->timeout_s : 30;
	s->p.max_body = p->max_body > 0 ? p->max_body : (size_t)4 << 20;
	s->p.max_queue = p->max_queue > 0 ? p->max_queue : 64;
	s->x = *x;
	s->x.model_name = s->model_name;
	link_view v = {0};
	link_view_get(x->link, &v);
	s->n_ctx = v.snap.n_ctx;
	s->n_blocks = v.snap.n_blocks;
	s->block_tokens = v.snap.block_tokens;
	s->max_seqs = v.snap.st.max_running;
	link_view_deinit(&v);
	s->max_token_bytes = longest_token(x->tok);
	atomic_init(&s->in_flight, 0);
	atomic_init(&s->next_id, ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid());
}

static struct MHD_Daemon *start_daemon(serve *s, bool v6)
{
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			 (v6 ? MHD_USE_IPv6 : 0);
	/* the threads libmicrohttpd starts inherit this mask: signals stay the main thread's */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
		MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_connections,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 << 10,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
		MHD_OPTION_END);
	if (d && !pthread_create(&s->watchdog, NULL, watchdog, s))
		s->watchdog_on = true;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (d && !s->watchdog_on) {
		MHD_stop_daemon(d);
		d = NULL;
	}
	return d;
}

serve *serve_start(const serve_params *p, const serve_engine *x, err *e)
{
	if (p->api_key && !*p->api_key) {
		err_set(e, "serve: the API key is empty, which would let every client in: give a key, or none to "
			"serve without one");
		return NULL;
	}
	serve *s = xcalloc(1, sizeof *s);
	pthread_mutex_init(&s->watch_lock, NULL);
	fill_defaults(s, p, x);
	s->stop[0] = s->stop[1] = -1;
	bool v6 = false;
	s->listen_fd = listen_on(s->host, p->port, &v6, e);
	if (s->listen_fd < 0)
		goto fail;
	s->port = bound_port(s->listen_fd);
	if (pipe2(s->stop, O_CLOEXEC)) {
		err_set(e, "serve: cannot create a pipe: %s", strerror(errno));
		goto fail;
	}
	if (!(s->d = start_daemon(s, v6))) {
		err_set(e, "serve: libmicrohttpd would not start on %s:%d", s->host, s->port);
		goto fail;
	}
	return s;
fail:
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	s->d = NULL;
	s->listen_fd = -1;
	serve_stop(s);
	return NULL;
}

int serve_port(const serve *s)
{
	return s->port;
}

void serve_stop(serve *s)
{
	if (!s)
		return;
	if (s->stop[1] >= 0) {
		ssize_t w = write(s->stop[1], "x", 1);
		(void)w; /* the pipe is empty: the byte goes in */
	}
	if (s->watchdog_on)
		pthread_join(s->watchdog, NULL);
	/* joins every connection's thread: their waits watch the stop pipe */
	if (s->d)
		MHD_stop_daemon(s->d);
	while (s->watches) { /* none once libmicrohttpd has closed every connection */
		conn_watch *w = s->watches;
		s->watches = w->next;
		close(w->fd);
		free(w);
	}
	pthread_mutex_destroy(&s->watch_lock);
	for (int i = 0; i < 2; i++)
		if (s->stop[i] >= 0)
			close(s->stop[i]);
	free(s->host);
	free(s->api_key);
	free(s->model_name);
	free(s);
}
