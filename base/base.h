/* base/base.h: the few helpers every layer of pagechat uses.
 *
 * err: a caller-provided error record with a fixed message buffer, filled by
 * err_set(). Functions that can fail return -1 (or NULL) and fill it.
 * xmalloc() and friends never return NULL: on exhaustion they run the hook
 * the app registered (restore the terminal, flush chats), print one line
 * naming the size and the limit (ulimit -v, or the machine's memory) and
 * exit with status 1 (running out is no bug: no abort). Any thread may call
 * these. */
#ifndef PAGECHAT_BASE_H
#define PAGECHAT_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* A 64-bit mixing function (splitmix64's finaliser): keys, salts, seeds. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

typedef struct err {
	char msg[512];          /* one line, no trailing newline; "" when unset */
} err;

/* Formats msg into e (truncating). e may be NULL, then nothing is written. */
void err_set(err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to e's message (e.g. a file name). NULL e is a no-op. */
void err_prefix(err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void *xmalloc(size_t n) __attribute__((malloc));
/* xmalloc whose block starts on a 64-byte line (SIMD loads of it never split
 * a line needlessly); free() releases it. */
void *xmalloc_lines(size_t n) __attribute__((malloc));
void *xcalloc(size_t n, size_t size) __attribute__((malloc));
void *xrealloc(void *p, size_t n);
/* Growable arrays: makes *pp (an array of elem-byte elements with room for
 * *cap) hold at least need elements, growing it to the larger of need and
 * twice *cap (at least 8) and keeping its contents; *pp may move. pp is the
 * address of the array pointer (T **), cap of its int capacity. No-op when
 * need <= *cap. Never fails (fatal on exhaustion or overflow). */
void xgrow(void *pp, int *cap, int64_t need, size_t elem);
/* The same for a size_t capacity (byte buffers, large arrays). */
void xgrow_size(void *pp, size_t *cap, size_t need, size_t elem);
char *xstrdup(const char *s) __attribute__((malloc));
char *xstrndup(const char *s, size_t n) __attribute__((malloc));

/* Bytes of memory the system can still give (Linux MemAvailable, which
 * counts the page cache it can drop; under an address-space limit, ulimit
 * -v, at most the room left in it), or -1 where /proc/meminfo does not say. */
int64_t mem_available(void);

/* A growable text buffer: {0} is empty; p is NUL-terminated once anything
 * was put. Never fails (fatal on exhaustion, as xgrow). */
typedef struct sbuf {
	char *p;                 /* owned */
	size_t n, cap;
} sbuf;
void sb_put(sbuf *b, const char *s, size_t n);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(sbuf *b);

/* Printing into a fixed buffer: appends printf output to buf[cap] at *at
 * (buf NUL-terminated there, *at < cap). What does not fit is cut, never
 * in the middle of a UTF-8 character, and *at stays below cap, so a run of
 * calls can never write past the buffer whatever the values printed.
 * Returns false when something was cut (cap 0: nothing is written). The
 * rule (tests/test_layout.c): snprintf's result is never used but in a
 * comparison with the buffer's size; text whose length matters goes
 * through this or an sbuf. */
bool bfmt(char *buf, size_t cap, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Huge-page memory (Linux transparent huge pages, where the kernel gives
 * them; a plain mapping elsewhere). map_aligned: an anonymous mapping of n
 * bytes with protection prot (PROT_* of sys/mman.h) starting on a 2 MiB
 * boundary, so that a file mapped over it (MAP_FIXED) or its own zero pages
 * can be mapped 2 MiB at a time; NULL when out of address space. Release with
 * munmap(p, n). zalloc_huge: n zeroed bytes, committed lazily, 2 MiB-aligned
 * with huge pages asked for (MADV_HUGEPAGE): for large buffers read on every
 * token, one TLB entry per 2 MiB; NULL when out of memory; free with
 * huge_free(p, n). */
void *map_aligned(size_t n, int prot);
void *zalloc_huge(size_t n);
void huge_free(void *p, size_t n);

/* Runs the fatal hook, prints "pagechat: fatal: <msg>" to stderr, aborts. */
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Registers the function fatal() calls first (NULL clears it). */
void fatal_set_hook(void (*hook)(void));
/* Runs the registered hook once (and clears it), as fatal() does; for a
 * process about to die another way (a fatal signal, base/files.h). */
void fatal_run_hook(void);

/* Monotonic clock in seconds. */
double now_s(void);

/* qsort's comparison of two doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* The median of v[n] (n > 0), which is sorted in place. */
double median_of(double *v, int n);

#endif
