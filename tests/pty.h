/* tests/pty.h: driving the full-screen chat through a pseudo-terminal.
 *
 * pty_start() runs PAGECHAT_BIN under forkpty() with a fixed environment
 * (TERM=xterm-256color, LANG=C.UTF-8, INPUTRC=/dev/null, HOME and the XDG
 * directories inside the test's own folder) and PAGECHAT_SCREEN_DUMP set, so
 * the app writes what ncurses shows to a file after every frame. Keys go in
 * as bytes; assertions poll that file until a condition holds or a timeout
 * passes (never a fixed sleep). The pty is drained all along, so the app
 * never blocks on output. Header-only, tests only. */
#ifndef PAGECHAT_PTY_H
#define PAGECHAT_PTY_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

typedef struct pty_app {
	pid_t pid;
	int fd;                  /* the pty's master side */
	char dir[1024];          /* absolute: the test's folder */
	char dump[1100];         /* the screen file */
	char screen[1 << 17];    /* the latest screen read */
	int status;              /* exit status once reaped, else -1 */
	long log_off;            /* where the unread frames of DUMP.log start */
	const char *env;         /* "NAME=VALUE" lines set in the child after the
	                            defaults (NAME= alone unsets), or NULL */
	char *out;               /* when set: what the app wrote to the terminal */
	size_t n_out, cap_out;   /* ... (the last cap_out - 1 bytes, NUL-ended) */
} pty_app;

static inline double pty_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads and drops what the app wrote to the terminal. */
static inline void pty_drain(pty_app *a)
{
	char buf[8192];
	ssize_t n;
	while ((n = read(a->fd, buf, sizeof buf)) > 0) {
		if (!a->out || a->cap_out < 2)
			continue;
		size_t k = MIN((size_t)n, a->cap_out - 1);
		if (a->n_out + k >= a->cap_out) { /* keep the newest bytes */
			size_t drop = a->n_out + k - (a->cap_out - 1);
			memmove(a->out, a->out + drop, a->n_out - drop);
			a->n_out -= drop;
		}
		memcpy(a->out + a->n_out, buf + n - k, k);
		a->n_out += k;
		a->out[a->n_out] = '\0';
	}
}

/* Applies a->env's lines in the child. */
static inline void pty_child_env(const char *env)
{
	while (env && *env) {
		char line[512];
		size_t n = strcspn(env, "\n");
		snprintf(line, sizeof line, "%.*s", (int)MIN(n, sizeof line - 1), env);
		char *eq = strchr(line, '=');
		if (eq && eq[1]) {
			*eq = '\0';
			setenv(line, eq + 1, 1);
		} else if (eq) {
			*eq = '\0';
			unsetenv(line);
		}
		env += n + (env[n] == '\n');
	}
}

/* Starts the app with args (shell words) in a rows x cols terminal. dir is
 * the test's folder (made absolute here). false if it cannot start. */
static inline bool pty_start(pty_app *a, const char *dir, const char *args, int rows, int cols)
{
	char cwd[900];
	if (!getcwd(cwd, sizeof cwd))
		return false;
	snprintf(a->dir, sizeof a->dir, "%s/%s", cwd, dir);
	snprintf(a->dump, sizeof a->dump, "%s/screen.txt", a->dir);
	unlink(a->dump);
	char log[1200];
	snprintf(log, sizeof log, "%s.log", a->dump);
	unlink(log);
	a->log_off = 0;
	a->n_out = 0;
	if (a->out)
		a->out[0] = '\0';
	a->screen[0] = '\0';
	a->status = -1;
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	a->pid = forkpty(&a->fd, NULL, NULL, &ws);
	if (a->pid < 0)
		return false;
	if (a->pid == 0) {
		char v[1200];
		setenv("TERM", "xterm-256color", 1);
		setenv("LANG", "C.UTF-8", 1);
		unsetenv("LC_ALL");
		unsetenv("LC_CTYPE");
		setenv("INPUTRC", "/dev/null", 1);
		snprintf(v, sizeof v, "%s/home", a->dir);
		setenv("HOME", v, 1);
		snprintf(v, sizeof v, "%s/data", a->dir);
		setenv("XDG_DATA_HOME", v, 1);
		snprintf(v, sizeof v, "%s/config", a->dir);
		setenv("XDG_CONFIG_HOME", v, 1);
		setenv("PAGECHAT_SCREEN_DUMP", a->dump, 1);
		pty_child_env(a->env);
		snprintf(v, sizeof v, "exec %s %s", PAGECHAT_BIN, args);
		execl("/bin/sh", "sh", "-c", v, (char *)NULL);
		_exit(127);
	}
	fcntl(a->fd, F_SETFL, fcntl(a->fd, F_GETFL) | O_NONBLOCK);
	return true;
}

static inline void pty_send(pty_app *a, const char *bytes)
{
	size_t n = strlen(bytes);
	while (n > 0) {
		ssize_t w = write(a->fd, bytes, n);
		if (w < 0 && errno == EAGAIN) {
			pty_drain(a);
			continue;
		}
		if (w <= 0)
			return;
		bytes += w;
		n -= (size_t)w;
	}
}

/* Re-reads the screen file into a->screen. */
static inline void pty_read_screen(pty_app *a)
{
	FILE *fp = fopen(a->dump, "rb");
	if (!fp)
		return;
	size_t n = fread(a->screen, 1, sizeof a->screen - 1, fp);
	a->screen[n] = '\0';
	fclose(fp);
}

static inline bool pty_alive(pty_app *a)
{
	if (a->status >= 0)
		return false;
	int st;
	if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
		a->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		return false;
	}
	return true;
}

typedef bool (*pty_pred)(const char *screen, const void *ctx);

/* Polls the screen until pred holds; false after timeout seconds or if the
 * app died. */
static inline bool pty_wait(pty_app *a, pty_pred pred, const void *ctx, double timeout)
{
	double end = pty_now() + timeout;
	for (;;) {
		pty_drain(a);
		pty_read_screen(a);
		if (pred(a->screen, ctx))
			return true;
		if (pty_now() > end || !pty_alive(a))
			return false;
		struct pollfd p = {.fd = a->fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
}

/* Checks the frames drawn since the last call (DUMP.log) against pred;
 * true if one matched. pred must hold for a frame if it holds for a prefix
 * of it (a "contains" test): the last frame may still be being written. */
static inline bool pty_scan_log(pty_app *a, pty_pred pred, const void *ctx)
{
	char log[1200];
	snprintf(log, sizeof log, "%s.log", a->dump);
	FILE *fp = fopen(log, "rb");
	if (!fp)
		return false;
	bool hit = false;
	static char buf[1 << 22];
	fseek(fp, a->log_off, SEEK_SET);
	size_t n = fread(buf, 1, sizeof buf - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	char *f = strstr(buf, "@frame\n");
	while (f && !hit) {
		char *next = strstr(f + 7, "@frame\n");
		if (next)
			*next = '\0';
		hit = pred(f + 7, ctx);
		if (next) {
			*next = '@';
			a->log_off += next - f;
		}
		f = next;
	}
	return hit;
}

/* Waits until some frame drawn from now on (or since the last scan) matches. */
static inline bool pty_wait_ever(pty_app *a, pty_pred pred, const void *ctx, double timeout)
{
	double end = pty_now() + timeout;
	for (;;) {
		pty_drain(a);
		pty_read_screen(a); /* for messages */
		if (pty_scan_log(a, pred, ctx))
			return true;
		if (pty_now() > end || !pty_alive(a))
			return false;
		struct pollfd p = {.fd = a->fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
}

static inline bool has_str(const char *screen, const void *s)
{
	return strstr(screen, (const char *)s) != NULL;
}

/* All of a NULL-terminated list of strings (ctx: const char *const *). */
static inline bool pty_all_of(const char *screen, const void *ctx)
{
	for (const char *const *s = ctx; *s; s++)
		if (!strstr(screen, *s))
			return false;
	return true;
}

/* ctx[0] shown and ctx[1] not. */
static inline bool pty_shows_without(const char *screen, const void *ctx)
{
	const char *const *s = ctx;
	return strstr(screen, s[0]) && !strstr(screen, s[1]);
}

static inline bool pty_wait_str(pty_app *a, const char *s, double timeout)
{
	return pty_wait(a, has_str, s, timeout);
}

/* Waits for the app to exit; its status, or -1 on timeout (then killed). */
static inline int pty_wait_exit(pty_app *a, double timeout)
{
	double end = pty_now() + timeout;
	while (pty_alive(a) && pty_now() < end) {
		pty_drain(a);
		struct pollfd p = {.fd = a->fd, .events = POLLIN};
		poll(&p, 1, 10);
	}
	if (pty_alive(a)) {
		kill(a->pid, SIGKILL);
		waitpid(a->pid, NULL, 0);
		a->status = -1;
	}
	pty_drain(a); /* what it wrote last */
	close(a->fd);
	return a->status;
}

static inline void pty_kill(pty_app *a)
{
	kill(a->pid, SIGKILL);
	pty_wait_exit(a, 5);
}

static inline void pty_resize(pty_app *a, int rows, int cols)
{
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(a->fd, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH to the app */
}

/* The screen's row y (0 = the top row), into out. */
static inline void pty_row(const pty_app *a, int y, char *out, size_t cap)
{
	const char *s = a->screen;
	for (int skip = 0; skip < 2 + y && s; skip++) { /* two header lines first */
		s = strchr(s, '\n');
		if (s)
			s++;
	}
	size_t n = s ? strcspn(s, "\n") : 0;
	snprintf(out, cap, "%.*s", (int)MIN(n, cap - 1), s ? s : "");
}

/* The attributes of row y, column x (0-based) of a screen or frame, as the
 * app dumps them after "@attr": *pair is the colour pair's character ('.'
 * none, '1'..'9', 'A'...) and the result its flags (1 bold, 2 dim, 4
 * reverse, 8 underline), or -1 when the screen has no such cell. */
static inline int pty_frame_attr(const char *screen, int y, int x, char *pair)
{
	const char *s = strstr(screen, "\n@attr\n");
	if (!s)
		return -1;
	s += 7;
	for (int i = 0; i < y && s; i++) {
		s = strchr(s, '\n');
		if (s)
			s++;
	}
	if (!s || (int)strcspn(s, "\n") < 2 * x + 2)
		return -1;
	*pair = s[2 * x];
	char f = s[2 * x + 1];
	return f >= 'a' ? f - 'a' + 10 : f - '0';
}

/* Row and column (in cells) of the first text s in a screen or frame (not
 * in its attributes); -1 when absent. */
static inline int pty_find_cell(const char *screen, const char *s, int *col)
{
	const char *p = strstr(screen, s), *attr = strstr(screen, "\n@attr\n");
	if (!p || (attr && p > attr))
		return -1;
	int row = -2; /* two header lines */
	const char *line = screen;
	for (const char *q = screen; q < p; q++)
		if (*q == '\n')
			row++, line = q + 1;
	*col = 0;
	for (const char *q = line; q < p; q++)
		*col += ((unsigned char)*q & 0xc0) != 0x80;
	return row;
}

/* The colour pair character of a cell of a screen or frame, 0 if none. */
static inline char pty_frame_pair(const char *screen, int y, int x)
{
	char pair = 0;
	return pty_frame_attr(screen, y, x, &pair) < 0 ? 0 : pair;
}

#endif
