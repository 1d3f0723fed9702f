/* base/base.c: errors, checked allocation, the fatal hook. */
#define _POSIX_C_SOURCE 200809L
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

void fatal_run_hook(void)
{
	void (*hook)(void) = fatal_hook;
	fatal_hook = NULL; /* a hook that fails must not recurse */
	if (hook)
		hook();
}

_Noreturn void fatal(const char *fmt, ...)
{
	fatal_run_hook();
	va_list ap;
	va_start(ap, fmt);
	fputs("pagechat: fatal: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

/* The address-space limit (ulimit -v) in bytes, or -1 when there is none. */
static int64_t as_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT64_MAX)
		return -1;
	return (int64_t)rl.rlim_cur;
}

/* An allocation of bytes failed: the hook, one line saying so and what
 * limits memory, exit status 1. Running out is the machine's state, not a
 * bug: no abort, no core dump. */
static _Noreturn void out_of_memory(double bytes)
{
	fatal_run_hook();
	int64_t lim = as_limit();
	if (lim >= 0)
		fprintf(stderr, "pagechat: out of memory allocating %.0f bytes within the address-space limit of "
			"%lld MiB (ulimit -v): raise the limit, or use a smaller model, context or KV pool\n", bytes,
			(long long)(lim >> 20));
	else
		fprintf(stderr, "pagechat: out of memory allocating %.0f bytes: free some memory, or use a smaller "
			"model, context or KV pool\n", bytes);
	_exit(1);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		out_of_memory((double)n);
	return p;
}

/* The new capacity for need elements when cap are held: doubling, at least
 * 8, at most limit; fatal when need itself is past limit or the bytes. */
static size_t grown(size_t cap, size_t need, size_t limit, size_t elem)
{
	if (need > limit || need > SIZE_MAX / elem)
		fatal("array of %zu elements of %zu bytes is too large", need, elem);
	size_t n = cap > limit / 2 ? limit : MAX(MAX(need, (size_t)8), 2 * cap);
	return MIN(n, SIZE_MAX / elem);
}

void xgrow(void *pp, int *cap, int64_t need, size_t elem)
{
	if (need <= *cap)
		return;
	size_t n = grown((size_t)MAX(*cap, 0), need < 0 ? 0 : (size_t)need, INT32_MAX, elem);
	void **p = pp;
	*p = xrealloc(*p, n * elem);
	*cap = (int)n;
}

void xgrow_size(void *pp, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return;
	size_t n = grown(*cap, need, SIZE_MAX, elem);
	void **p = pp;
	*p = xrealloc(*p, n * elem);
	*cap = n;
}

void *xmalloc_lines(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 1))
		out_of_memory((double)n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		out_of_memory((double)n * (double)size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		out_of_memory((double)n);
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

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- huge pages ---- */

#define HUGE_BYTES ((size_t)2 << 20)

void *map_aligned(size_t n, int prot)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), pages = (n + pg - 1) / pg * pg;
	if (!n || HUGE_BYTES % pg || pages > SIZE_MAX - HUGE_BYTES)
		return NULL;
	/* a reservation (PROT_NONE) commits nothing; usable memory is counted
	 * against the system's overcommit limit, as malloc's would be */
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prot == PROT_NONE ? MAP_NORESERVE : 0);
	uint8_t *res = mmap(NULL, pages + HUGE_BYTES, prot, flags, -1, 0);
	if (res == MAP_FAILED)
		return NULL;
	uint8_t *at = (uint8_t *)(((uintptr_t)res + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
	/* the slack before and after the aligned pages */
	if (at > res)
		munmap(res, (size_t)(at - res));
	if (at + pages < res + pages + HUGE_BYTES)
		munmap(at + pages, (size_t)(res + HUGE_BYTES - at));
	return at;
}

void *zalloc_huge(size_t n)
{
	void *p = map_aligned(n, PROT_READ | PROT_WRITE);
#ifdef MADV_HUGEPAGE
	if (p && n >= HUGE_BYTES)
		madvise(p, n, MADV_HUGEPAGE);
#endif
	return p;
}

void huge_free(void *p, size_t n)
{
	if (p)
		munmap(p, n);
}

/* ---- a growable text buffer ---- */

void sb_put(sbuf *b, const char *s, size_t n)
{
	xgrow_size(&b->p, &b->cap, b->n + n + 1, 1);
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int need = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (need < 0)
		return;
	xgrow_size(&b->p, &b->cap, b->n + (size_t)need + 1, 1);
	va_start(ap, fmt);
	vsnprintf(b->p + b->n, (size_t)need + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)need;
}

void sb_free(sbuf *b)
{
	free(b->p);
	*b = (sbuf){0};
}

/* Where buf[from, end) must end so that no UTF-8 character is cut: end,
 * or the start of the last character when its bytes run past end. */
static size_t utf8_cut(const char *buf, size_t from, size_t end)
{
	size_t s = end;
	while (s > from && ((unsigned char)buf[s - 1] & 0xC0) == 0x80)
		s--;
	if (s == from)
		return end; /* continuation bytes only: not UTF-8, cut where it is */
	unsigned char lead = (unsigned char)buf[s - 1];
	size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	return end - (s - 1) < need ? s - 1 : end;
}

bool bfmt(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
	if (cap == 0)
		return false;
	if (*at >= cap)
		*at = cap - 1;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + *at, cap - *at, fmt, ap);
	va_end(ap);
	if (k >= 0 && (size_t)k < cap - *at) {
		*at += (size_t)k;
		return true;
	}
	size_t end = k < 0 ? *at : utf8_cut(buf, *at, cap - 1);
	buf[end] = '\0';
	*at = end;
	return false;
}

/* ---- memory ---- */

int64_t mem_available(void)
{
	FILE *fp = fopen("/proc/meminfo", "r");
	char line[256];
	long long kb = -1;
	while (fp && fgets(line, sizeof line, fp))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	if (fp)
		fclose(fp);
	int64_t avail = kb >= 0 ? (int64_t)kb * 1024 : -1;
	/* under ulimit -v, what the address space still has room for */
	int64_t lim = as_limit();
	long pages = 0;
	fp = lim >= 0 ? fopen("/proc/self/statm", "r") : NULL;
	if (fp && fscanf(fp, "%ld", &pages) == 1) {
		int64_t room = MAX(lim - (int64_t)pages * sysconf(_SC_PAGESIZE), 0);
		avail = avail < 0 ? room : MIN(avail, room);
	}
	if (fp)
		fclose(fp);
	return avail;
}
