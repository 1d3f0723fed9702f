/* base/files.c: safe opening, reading and writing of files (see files.h). */
#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_BUF ((size_t)64 << 10)
#define TMP_TRIES 64

/* ---- the temporary files a signal must remove ---- */

/* Slots hold the paths of open temporary files. The handler reads them:
 * a slot's path is written before its flag is set and the flag is cleared
 * before the slot is reused, so the handler sees whole paths only. */
#define CLEAN_SLOTS 32
static char clean_path[CLEAN_SLOTS][PATH_MAX];
static volatile sig_atomic_t clean_used[CLEAN_SLOTS];
static pthread_mutex_t clean_lock = PTHREAD_MUTEX_INITIALIZER;

static const int clean_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction clean_old[ARRAY_LEN(clean_signals)];
static bool clean_installed;

static int clean_add(const char *path)
{
	if (strlen(path) >= PATH_MAX)
		return -1;
	pthread_mutex_lock(&clean_lock);
	int slot = -1;
	for (int i = 0; i < CLEAN_SLOTS && slot < 0; i++)
		if (!clean_used[i])
			slot = i;
	if (slot >= 0) {
		memcpy(clean_path[slot], path, strlen(path) + 1); /* checked above */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		clean_used[slot] = 1;
	}
	pthread_mutex_unlock(&clean_lock);
	return slot;
}

static void clean_remove(int slot)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&clean_lock);
	clean_used[slot] = 0;
	pthread_mutex_unlock(&clean_lock);
}

/* Only async-signal-safe calls: unlink, sigaction, raise. */
static void on_clean_signal(int sig)
{
	int saved = errno;
	for (int i = 0; i < CLEAN_SLOTS; i++)
		if (clean_used[i])
			unlink(clean_path[i]);
	for (size_t i = 0; i < ARRAY_LEN(clean_signals); i++)
		if (clean_signals[i] == sig)
			sigaction(sig, &clean_old[i], NULL);
	raise(sig);     /* blocked until this returns, then the old action takes it */
	errno = saved;
}

void file_cleanup_on_signals(void)
{
	pthread_mutex_lock(&clean_lock);
	if (!clean_installed) {
		struct sigaction sa = {.sa_handler = on_clean_signal};
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < ARRAY_LEN(clean_signals); i++) {
			sigaction(clean_signals[i], NULL, &clean_old[i]);
			if (clean_old[i].sa_handler != SIG_IGN) /* nohup's SIGHUP stays ignored */
				sigaction(clean_signals[i], &sa, NULL);
		}
		clean_installed = true;
	}
	pthread_mutex_unlock(&clean_lock);
}

/* ---- mapped files and SIGBUS ---- */

#define MAP_SLOTS 64
static struct {
	volatile uintptr_t base;     /* 0: free */
	size_t size;
	char path[512];
} maps[MAP_SLOTS];
static struct sigaction bus_old;
static bool bus_installed;

static void put_str(const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(2, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void put_u64(uint64_t v)
{
	char d[24];
	int i = (int)sizeof d - 1;
	d[i] = '\0';
	do
		d[--i] = (char)('0' + v % 10);
	while ((v /= 10) && i > 0);
	put_str(d + i);
}

static void on_bus(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	uintptr_t at = (uintptr_t)si->si_addr;
	for (int i = 0; i < MAP_SLOTS; i++) {
		uintptr_t b = maps[i].base;
		if (!b || at < b || at - b >= maps[i].size)
			continue;
		/* a dying process: restore the terminal first (not async-signal-safe,
		 * but nothing else will run), then one line on the real stderr */
		fatal_run_hook();
		put_str("pagechat: fatal: ");
		put_str(maps[i].path);
		put_str(": the file shrank or could not be read while in use (offset ");
		put_u64((uint64_t)(at - b));
		put_str("); was it replaced or truncated? Reopen it when it is whole\n");
		break;
	}
	sigaction(sig, &bus_old, NULL);
	raise(sig);     /* blocked until this returns; then its previous course */
}

void file_map_add(const void *base, size_t size, const char *path)
{
	pthread_mutex_lock(&clean_lock);
	if (!bus_installed) {
		struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGBUS, &sa, &bus_old);
		bus_installed = true;
	}
	for (int i = 0; i < MAP_SLOTS; i++)
		if (!maps[i].base) {
			snprintf(maps[i].path, sizeof maps[i].path, "%s", path);
			maps[i].size = size;
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			maps[i].base = (uintptr_t)base;
			break;
		}
	pthread_mutex_unlock(&clean_lock);
}

void file_map_remove(const void *base)
{
	pthread_mutex_lock(&clean_lock);
	for (int i = 0; i < MAP_SLOTS; i++)
		if (maps[i].base == (uintptr_t)base)
			maps[i].base = 0;
	pthread_mutex_unlock(&clean_lock);
}

/* ---- what is at a path ---- */

static const char *kind_of_mode(mode_t m)
{
	if (S_ISREG(m))
		return "a regular file";
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

const char *file_kind(const char *path)
{
	struct stat st;
	if (lstat(path, &st))
		return "nothing";
	return kind_of_mode(st.st_mode);
}

/* 0 when path is missing or a regular file (which may be replaced); else -1
 * with e saying what it is. */
static int check_target(const char *path, err *e)
{
	struct stat st;
	if (!*path) {
		err_set(e, "the output file name is empty: give a path");
		return -1;
	}
	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		err_set(e, "%s: cannot write: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISREG(st.st_mode))
		return 0;
	err_set(e, "%s is %s, not a regular file: refusing to replace it (remove it or write elsewhere)",
		path, kind_of_mode(st.st_mode));
	return -1;
}

/* ---- temporary files ---- */

/* The directory part of path ("." when none), in a new string. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return xstrdup(".");
	if (slash == path)
		return xstrdup("/");
	return xstrndup(path, (size_t)(slash - path));
}

static void random_letters(char *out, int n)
{
	static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	uint8_t r[32];
	if (getrandom(r, (size_t)n, GRND_NONBLOCK) != n) {
		/* no entropy yet (early boot): the clock and the pid still differ
		 * per try; O_EXCL keeps it safe, only less unpredictable */
		uint64_t x = (uint64_t)(now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
		for (int i = 0; i < n; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
			r[i] = (uint8_t)(x >> 56);
	}
	for (int i = 0; i < n; i++)
		out[i] = abc[r[i] % (sizeof abc - 1)];
	out[n] = '\0';
}

/* Creates a new temporary file beside path: ".BASE.XXXXXXXXXXXX". Returns
 * the descriptor and its path in *tmp (owned by the caller), or -1 with e. */
static int create_tmp(const char *path, int mode, bool read, char **tmp, err *e)
{
	char *dir = dir_of(path);
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t cap = strlen(dir) + 220;
	char *name = xmalloc(cap);
	int fd = -1, er = 0;
	for (int i = 0; i < TMP_TRIES && fd < 0; i++) {
		char rnd[13];
		random_letters(rnd, 12);
		snprintf(name, cap, "%s/.%.180s.%s", dir, base, rnd);
		fd = open(name, (read ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC |
			  O_NOCTTY, mode);
		er = errno;
		if (fd < 0 && er != EEXIST)
			break;
	}
	if (fd < 0) {
		err_set(e, "%s: cannot write (a new file in %s): %s", path, dir, strerror(er));
		free(name);
		name = NULL;
	}
	free(dir);
	*tmp = name;
	return fd;
}

static int write_all(int fd, const void *data, size_t n)
{
	const uint8_t *p = data;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void sync_dir(const char *path)
{
	char *dir = dir_of(path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
}

/* ---- file_out ---- */

/* An unnamed file in path's directory (O_TMPFILE), or -1 where the file
 * system or the kernel has none, or /proc (which names it at the commit)
 * is missing. */
static int create_unnamed(const char *path, int mode)
{
#ifdef O_TMPFILE
	if (access("/proc/self/fd", X_OK))
		return -1;
	char *dir = dir_of(path);
	int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	free(dir);
	return fd;
#else
	(void)path;
	(void)mode;
	return -1;
#endif
}

int file_out_open(file_out *f, const char *path, int mode, size_t buf_bytes, err *e)
{
	*f = (file_out){.fd = -1, .slot = -1};
	if (check_target(path, e))
		return -1;
	/* unnamed until it is complete: a kill -9 leaves nothing behind */
	char *tmp = NULL;
	int fd = create_unnamed(path, mode);
	if (fd < 0 && (fd = create_tmp(path, mode, false, &tmp, e)) < 0)
		return -1;
	f->fd = fd;
	f->tmp = tmp;
	f->path = xstrdup(path);
	f->slot = tmp ? clean_add(tmp) : -1;
	f->cap = buf_bytes ? buf_bytes : DEFAULT_BUF;
	f->buf = xmalloc(f->cap);
	return 0;
}

void file_out_abort(file_out *f)
{
	if (!f->path)
		return; /* closed, or never opened */
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp)
		unlink(f->tmp);
	clean_remove(f->slot);
	free(f->tmp);
	free(f->path);
	free(f->buf);
	*f = (file_out){.fd = -1, .slot = -1};
}

/* Reports errno against the target and abandons the write. */
static int write_failed(file_out *f, const char *what, err *e)
{
	err_set(e, "%s: %s: %s", f->path, what, strerror(errno));
	file_out_abort(f);
	return -1;
}

static int flush_buf(file_out *f, err *e)
{
	if (f->n && write_all(f->fd, f->buf, f->n))
		return write_failed(f, "cannot write", e);
	f->n = 0;
	return 0;
}

int file_out_write(file_out *f, const void *p, size_t n, err *e)
{
	if (!f->path) {
		err_set(e, "write to a closed file");
		return -1;
	}
	const uint8_t *src = p;
	f->written += n;
	while (n > 0) {
		if (f->n == 0 && n >= f->cap) {
			/* whole buffers straight from the caller */
			size_t k = n / f->cap * f->cap;
			if (write_all(f->fd, src, k))
				return write_failed(f, "cannot write", e);
			src += k;
			n -= k;
			continue;
		}
		size_t k = MIN(n, f->cap - f->n);
		memcpy(f->buf + f->n, src, k);
		f->n += k;
		src += k;
		n -= k;
		if (f->n == f->cap && flush_buf(f, e))
			return -1;
	}
	return 0;
}

int file_out_printf(file_out *f, err *e, const char *fmt, ...)
{
	char small[512];
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (k < 0) {
		err_set(e, "%s: cannot format the text", f->path ? f->path : "?");
		file_out_abort(f);
		return -1;
	}
	if ((size_t)k < sizeof small)
		return file_out_write(f, small, (size_t)k, e);
	char *big = xmalloc((size_t)k + 1);
	va_start(ap, fmt);
	vsnprintf(big, (size_t)k + 1, fmt, ap);
	va_end(ap);
	int rc = file_out_write(f, big, (size_t)k, e);
	free(big);
	return rc;
}

/* Gives f's unnamed file (complete and synced) a temporary name beside
 * the target, to be renamed over it: linked through /proc (an unnamed
 * file's only path), never over anything that exists. 0, or -1 with e
 * (the write abandoned). */
static int name_unnamed(file_out *f, err *e)
{
	char proc[64], rnd[13];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", f->fd);
	char *dir = dir_of(f->path);
	const char *base = strrchr(f->path, '/') ? strrchr(f->path, '/') + 1 : f->path;
	size_t cap = strlen(dir) + 220;
	char *name = xmalloc(cap);
	int rc = -1;
	for (int i = 0; i < TMP_TRIES && rc; i++) {
		random_letters(rnd, 12);
		snprintf(name, cap, "%s/.%.180s.%s", dir, base, rnd);
		rc = linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
		if (rc && errno != EEXIST)
			break;
	}
	free(dir);
	if (rc) {
		free(name);
		return write_failed(f, "cannot name the new file", e);
	}
	f->tmp = name;
	f->slot = clean_add(name);
	return 0;
}

int file_out_commit(file_out *f, err *e)
{
	if (!f->path) {
		err_set(e, "commit of a closed file");
		return -1;
	}
	if (flush_buf(f, e))
		return -1;
	if (fsync(f->fd))
		return write_failed(f, "cannot write (fsync)", e);
	if (!f->tmp && name_unnamed(f, e))
		return -1;
	int fd = f->fd;
	f->fd = -1;
	if (close(fd))
		return write_failed(f, "cannot write (close)", e);
	/* the target may have changed since the open: check it again */
	if (check_target(f->path, e)) {
		file_out_abort(f);
		return -1;
	}
	if (rename(f->tmp, f->path))
		return write_failed(f, "cannot replace", e);
	free(f->tmp);
	f->tmp = NULL;   /* renamed: nothing left to remove */
	sync_dir(f->path);
	file_out_abort(f);
	return 0;
}

int file_write_atomic(const char *path, const void *data, size_t n, int mode, err *e)
{
	file_out f;
	if (file_out_open(&f, path, mode, n ? MIN(n, DEFAULT_BUF) : 1, e))
		return -1;
	if (file_out_write(&f, data, n, e))
		return -1;
	return file_out_commit(&f, e);
}

/* ---- files written as they go ---- */

/* Makes a descriptor opened with O_NONBLOCK block again. */
static void set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int file_create_fresh(const char *path, int mode, bool read, err *e)
{
	if (check_target(path, e))
		return -1;
	char *tmp;
	int fd = create_tmp(path, mode, read, &tmp, e);
	if (fd < 0)
		return -1;
	if (rename(tmp, path)) {
		err_set(e, "%s: cannot create: %s", path, strerror(errno));
		close(fd);
		unlink(tmp);
		fd = -1;
	}
	free(tmp);
	return fd;
}

/* Checks that fd (opened from path) is a regular file; closes it and fills
 * e when not. */
static int require_regular(int fd, const char *path, int64_t *size, err *e)
{
	struct stat st;
	if (fstat(fd, &st)) {
		err_set(e, "%s: cannot open: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		err_set(e, "%s is %s, not a regular file: give a file", path, kind_of_mode(st.st_mode));
		close(fd);
		return -1;
	}
	if (size)
		*size = (int64_t)st.st_size;
	set_blocking(fd);
	return fd;
}

int file_open_append(const char *path, int mode, err *e)
{
	if (!*path) {
		err_set(e, "the output file name is empty: give a path");
		return -1;
	}
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
		      mode);
	if (fd < 0) {
		if (errno == ELOOP)
			err_set(e, "%s is a symbolic link: refusing to write through it", path);
		else
			err_set(e, "%s: cannot write: %s", path, strerror(errno));
		return -1;
	}
	return require_regular(fd, path, NULL, e);
}

/* ---- reading ---- */

int file_open_read(const char *path, int64_t *size, err *e)
{
	if (!*path) {
		err_set(e, "the file name is empty: give a path");
		return -1;
	}
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		err_set(e, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	return require_regular(fd, path, size, e);
}

FILE *file_fopen_read(const char *path, err *e)
{
	int fd = file_open_read(path, NULL, e);
	if (fd < 0)
		return NULL;
	FILE *fp = fdopen(fd, "rb");
	if (!fp) {
		err_set(e, "%s: cannot open: %s", path, strerror(errno));
		close(fd);
	}
	return fp;
}

static void too_big(const char *path, int64_t size, size_t max, const char *what, err *e)
{
	err_set(e, "%s: %lld bytes or more, but a %s may have at most %zu bytes", path, (long long)size,
		what ? what : "file", max);
}

char *file_read_all(const char *path, size_t max, const char *what, size_t *len, err *e)
{
	int64_t size;
	int fd = file_open_read(path, &size, e);
	if (fd < 0)
		return NULL;
	if (size < 0 || (uint64_t)size > max) {
		too_big(path, size, max, what, e);
		close(fd);
		return NULL;
	}
	/* one byte more than the size: a file that grew is noticed */
	size_t cap = (size_t)size + 2, n = 0;
	char *buf = xmalloc(cap);
	for (;;) {
		ssize_t got = read(fd, buf + n, cap - n - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			err_set(e, "%s: read error: %s", path, strerror(errno));
			break;
		}
		if (got == 0) {
			close(fd);
			buf[n] = '\0';
			*len = n;
			return buf;
		}
		n += (size_t)got;
		if (n > max) {
			too_big(path, (int64_t)n, max, what, e);
			break;
		}
		if (n + 1 == cap)
			xgrow_size(&buf, &cap, MIN(cap * 2, max + 2), 1);
	}
	close(fd);
	free(buf);
	return NULL;
}

/* ---- directories ---- */

/* mkdir -p (0700) for path and its parents; -1 with e. */
static int make_dirs(const char *path, err *e)
{
	char *p = xstrdup(path);
	int rc = 0;
	for (char *s = p + 1; rc == 0; s++) {
		if (*s && *s != '/')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0700) && errno != EEXIST) {
			err_set(e, "cannot create %s: %s", p, strerror(errno));
			rc = -1;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return rc;
}

int file_private_dir(const char *path, err *e)
{
	if (!*path) {
		err_set(e, "the directory name is empty");
		return -1;
	}
	if (make_dirs(path, e))
		return -1;
	struct stat st;
	if (stat(path, &st)) {
		err_set(e, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		err_set(e, "%s is %s, not a directory: remove it or point the variable elsewhere", path,
			kind_of_mode(st.st_mode));
		return -1;
	}
	if (st.st_uid != geteuid()) {
		err_set(e, "%s belongs to another user (uid %u): use a directory of your own", path,
			(unsigned)st.st_uid);
		return -1;
	}
	if (st.st_mode & S_IWOTH) {
		err_set(e, "%s is writable by every user (mode %04o): run chmod 700 %s", path,
			(unsigned)(st.st_mode & 07777), path);
		return -1;
	}
	return 0;
}
