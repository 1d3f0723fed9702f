/* kernels/base.c: errors, checked allocation, the fatal hook. */
#define _POSIX_C_SOURCE 200809L
#include "kernels/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void (*fatal_hook)(void);

void err_set(err *e, const char *fmt, ...)
{
	if (!e)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
}

void err_prefix(err *e, const char *fmt, ...)
{
	if (!e)
		return;
	char head[256], old[sizeof e->msg];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(head, sizeof head, fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof old);
	size_t n = strlen(head);
	if (n > sizeof e->msg - 3)
		n = sizeof e->msg - 3;
	memcpy(e->msg, head, n);
	memcpy(e->msg + n, ": ", 2);
	size_t room = sizeof e->msg - n - 3;
	size_t m = strnlen(old, room);
	memcpy(e->msg + n + 2, old, m);
	e->msg[n + 2 + m] = '\0';
}

void fatal_set_hook(void (*hook)(void))
{
	fatal_hook = hook;
}

_Noreturn void fatal(const char *fmt, ...)
{
	void (*hook)(void) = fatal_hook;
	fatal_hook = NULL; /* a hook that fails must not recurse */
	if (hook)
		hook();
	va_list ap;
	va_start(ap, fmt);
	fputs("pagechat: fatal: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		fatal("out of memory allocating %zu bytes", n);
	return p;
}

void *xmalloc_lines(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 1))
		fatal("out of memory allocating %zu bytes", n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		fatal("out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		fatal("out of memory reallocating to %zu bytes", n);
	return q;
}

char *xstrndup(const char *s, size_t n)
{
	char *d = xmalloc(n + 1);
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
