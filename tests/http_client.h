/* tests/http_client.h: a small HTTP/1.1 client on raw sockets, for the
 * server's tests and fuzz target. Raw sockets let a test send what no
 * library would (malformed, oversized, slow requests) and see exactly how
 * the server answers and when it closes. Responses are read whole: by
 * Content-Length, chunked, or to the end of the connection. Header-only,
 * tests only; one connection per thread. */
#ifndef PAGECHAT_HTTP_CLIENT_H
#define PAGECHAT_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct hresp {
	int status;              /* 0 when no status line came */
	char *head;              /* owned; the status line and headers */
	char *body;              /* owned; decoded (chunks joined), NUL-terminated */
	size_t body_len;
} hresp;

static inline void hresp_free(hresp *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof *r);
}

/* poll for POLLIN on fd for up to ms; a signal (libFuzzer's timer, say)
 * resumes the wait for the time left. > 0 when readable. */
static inline int hc_poll_in(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int rc = poll(&p, 1, ms);
		if (rc >= 0 || errno != EINTR)
			return rc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		long long left = ms - ((t.tv_sec - t0.tv_sec) * 1000LL + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (ms >= 0 && left <= 0)
			return 0;
		if (ms >= 0) {
			ms = (int)left;
			t0 = t;
		}
	}
}

/* recv, resumed after a signal. */
static inline ssize_t hc_recv(int fd, void *buf, size_t n)
{
	ssize_t k;
	while ((k = recv(fd, buf, n, 0)) < 0 && errno == EINTR)
		;
	return k;
}

/* Reads fd (a `pagechat serve` child's stderr) into log[0..cap) until its
 * "http://127.0.0.1:PORT" line: the port, or -1 after wait_s seconds or at
 * the end of the stream. */
static inline int hc_served_port(int fd, char *log, size_t cap, double wait_s)
{
	size_t n = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	log[0] = '\0';
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= wait_s || n + 1 >= cap)
			return -1;
		if (hc_poll_in(fd, 200) <= 0)
			continue;
		ssize_t k = read(fd, log + n, cap - n - 1);
		if (k <= 0)
			return -1;
		n += (size_t)k;
		log[n] = '\0';
		const char *at = strstr(log, "http://127.0.0.1:");
		if (at && strchr(at, '\n'))
			return atoi(at + 17);
	}
}

/* A connection to 127.0.0.1:port, or -1. */
static inline int hc_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int rc = fd >= 0 ? connect(fd, (struct sockaddr *)&a, sizeof a) : -1;
	if (rc && fd >= 0 && errno == EINTR) {
		/* interrupted by a signal, the connection goes on being made: wait for it */
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int err = 0;
		socklen_t len = sizeof err;
		while ((rc = poll(&p, 1, 10000)) < 0 && errno == EINTR)
			;
		rc = rc == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) && !err ? 0 : -1;
	}
	if (rc && fd >= 0) {
		close(fd);
		return -1;
	}
	int one = 1;
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static inline bool hc_send(int fd, const void *p, size_t n)
{
	const char *s = p;
	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		s += w;
		n -= (size_t)w;
	}
	return true;
}

/* A buffered reader with a deadline. */
typedef struct hc_rd {
	int fd;
	char buf[8192];
	size_t pos, len;
	int timeout_ms;          /* per read */
	bool eof, timed_out;
} hc_rd;

/* The next byte, or -1 at the end (or after timeout_ms without data). */
static inline int hc_getc(hc_rd *r)
{
	if (r->pos == r->len) {
		if (r->eof)
			return -1;
		if (hc_poll_in(r->fd, r->timeout_ms) <= 0) {
			r->timed_out = true;
			r->eof = true;
			return -1;
		}
		ssize_t n = hc_recv(r->fd, r->buf, sizeof r->buf);
		if (n <= 0) {
			r->eof = true;
			return -1;
		}
		r->pos = 0;
		r->len = (size_t)n;
	}
	return (unsigned char)r->buf[r->pos++];
}

/* One line without its CRLF into out (cap bytes); false at the end. */
static inline bool hc_line(hc_rd *r, char *out, size_t cap)
{
	size_t n = 0;
	int c;
	while ((c = hc_getc(r)) >= 0 && c != '\n')
		if (n + 1 < cap)
			out[n++] = (char)c;
	while (n > 0 && out[n - 1] == '\r')
		n--;
	out[n] = '\0';
	return c == '\n' || n > 0;
}

static inline void hc_append(char **s, size_t *n, size_t *cap, const char *p, size_t k)
{
	if (*n + k + 1 > *cap) {
		*cap = (*n + k + 1) * 2;
		*s = realloc(*s, *cap);
	}
	memcpy(*s + *n, p, k);
	*n += k;
	(*s)[*n] = '\0';
}

/* The value of header name in head, or NULL (points into head). */
static inline const char *hc_header(const char *head, const char *name)
{
	size_t n = strlen(name);
	for (const char *l = head; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncasecmp(l, name, n) && l[n] == ':')
			return l + n + 1 + strspn(l + n + 1, " ");
	return NULL;
}

static inline void hc_read_body(hc_rd *rd, hresp *r)
{
	size_t cap = 0;
	const char *te = hc_header(r->head, "Transfer-Encoding"), *cl = hc_header(r->head, "Content-Length");
	char line[256];
	if (te && !strncasecmp(te, "chunked", 7)) {
		while (hc_line(rd, line, sizeof line)) {
			long k = strtol(line, NULL, 16);
			if (k <= 0)
				break;
			for (long i = 0; i < k; i++) {
				int c = hc_getc(rd);
				if (c < 0)
					return;
				char ch = (char)c;
				hc_append(&r->body, &r->body_len, &cap, &ch, 1);
			}
			hc_line(rd, line, sizeof line);
		}
		return;
	}
	long want = cl ? strtol(cl, NULL, 10) : -1;
	int c;
	while ((want < 0 || (long)r->body_len < want) && (c = hc_getc(rd)) >= 0) {
		char ch = (char)c;
		hc_append(&r->body, &r->body_len, &cap, &ch, 1);
	}
}

/* Reads one response from fd (each read waits at most timeout_ms). False
 * when no status line came. */
static inline bool hc_read(int fd, hresp *r, int timeout_ms)
{
	memset(r, 0, sizeof *r);
	hc_rd *rd = calloc(1, sizeof *rd);
	rd->fd = fd;
	rd->timeout_ms = timeout_ms;
	char line[8192];
	size_t n = 0, cap = 0;
	if (hc_line(rd, line, sizeof line) && sscanf(line, "HTTP/%*d.%*d %d", &r->status) == 1) {
		hc_append(&r->head, &n, &cap, line, strlen(line));
		hc_append(&r->head, &n, &cap, "\n", 1);
		while (hc_line(rd, line, sizeof line) && line[0]) {
			hc_append(&r->head, &n, &cap, line, strlen(line));
			hc_append(&r->head, &n, &cap, "\n", 1);
		}
		hc_read_body(rd, r);
	}
	if (!r->body)
		r->body = calloc(1, 1);
	if (!r->head)
		r->head = calloc(1, 1);
	free(rd);
	return r->status != 0;
}

/* One request on a fresh connection ("Connection: close"): extra holds
 * more header lines ("Name: value\r\n"...), body may be NULL. */
static inline bool hc_request(int port, const char *method, const char *path, const char *extra,
			      const char *body, hresp *r)
{
	memset(r, 0, sizeof *r);
	int fd = hc_connect(port);
	if (fd < 0)
		return false;
	size_t blen = body ? strlen(body) : 0;
	size_t cap = strlen(path) + (extra ? strlen(extra) : 0) + 256;
	char *req = malloc(cap);
	int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path,
			 extra ? extra : "", blen);
	bool ok = hc_send(fd, req, (size_t)n) && (!blen || hc_send(fd, body, blen)) && hc_read(fd, r, 20000);
	free(req);
	close(fd);
	return ok;
}

/* A metric's value from the server's /metrics: the first sample line whose
 * name (labels included, if given) is name; -1 when there is none. extra as
 * for hc_request. */
static inline double hc_metric(int port, const char *extra, const char *name)
{
	hresp r;
	double v = -1;
	if (hc_request(port, "GET", "/metrics", extra, NULL, &r) && r.status == 200) {
		size_t n = strlen(name);
		for (const char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (!strncmp(l, name, n) && (l[n] == ' ' || l[n] == '{')) {
				v = strtod(strchr(l, ' ') + 1, NULL);
				break;
			}
	}
	hresp_free(&r);
	return v;
}

/* Whether the server closed fd (reads give the end) within ms. */
static inline bool hc_closed_within(int fd, int ms)
{
	char buf[4096];
	for (;;) {
		if (hc_poll_in(fd, ms) <= 0)
			return false;
		ssize_t k = hc_recv(fd, buf, sizeof buf);
		if (k <= 0)
			return true;
	}
}

#endif
