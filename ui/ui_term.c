/* ui/ui_term.c: the terminal: ncurses set up and given back, the signals
 * (caught here, delivered only while the loop sleeps in ppoll), stderr kept
 * off the screen, the fatal hook, and the screen dump the tests read. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <langinfo.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t quit_signal;

static void on_quit_signal(int sig)
{
	quit_signal = sig;
}

bool term_quit_requested(void)
{
	return quit_signal != 0;
}

static ui *fatal_ui;
static ui_term *fatal_term;

static void restore_stderr(ui_term *t)
{
	if (t->saved_stderr < 0)
		return;
	fflush(stderr);
	dup2(t->saved_stderr, 2);
	close(t->saved_stderr);
	t->saved_stderr = -1;
	if (t->err_log) {
		rewind(t->err_log);
		char buf[4096];
		size_t n;
		while ((n = fread(buf, 1, sizeof buf, t->err_log)) > 0)
			fwrite(buf, 1, n, stderr);
		fclose(t->err_log);
		t->err_log = NULL;
		unlink(t->log_path);
	}
}

/* Out of memory somewhere: give the terminal back before fatal() prints. */
static void fatal_hook(void)
{
	if (fatal_ui) {
		fputs("\033[?2004l", stdout);
		endwin();
	}
	if (fatal_term)
		restore_stderr(fatal_term);
}

static const int quit_signals[] = {SIGTERM, SIGHUP, SIGINT, SIGQUIT};

/* Ours before ncurses' (which then leaves them alone); blocked, so they are
 * delivered only inside ppoll. */
static void catch_signals(ui_term *t)
{
	struct sigaction sa = {.sa_handler = on_quit_signal};
	sigemptyset(&sa.sa_mask);
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, SIGWINCH);
	for (size_t i = 0; i < ARRAY_LEN(quit_signals); i++) {
		sigaction(quit_signals[i], &sa, NULL);
		sigaddset(&block, quit_signals[i]);
	}
	pthread_sigmask(SIG_BLOCK, &block, &t->old_mask);
}

/* stderr would scribble over the screen: keep it in a file, replayed at the
 * end (after a crash it is still there to read). The file is made fresh
 * (base/files.h): a link or a device planted there is refused, never
 * written through; stderr then stays where it was, and the status says so. */
static void redirect_stderr(ui *u, ui_term *t)
{
	snprintf(t->log_path, sizeof t->log_path, "%s/stderr.log", u->data_dir);
	err e = {0};
	int fd = file_create_fresh(t->log_path, FILE_MODE_PRIVATE, true, &e);
	t->err_log = fd >= 0 ? fdopen(fd, "w+") : NULL;
	if (!t->err_log) {
		if (fd >= 0)
			close(fd);
		ui_status(u, true, "%s", e.msg[0] ? e.msg : "stderr.log: cannot open");
		return;
	}
	fflush(stderr);
	t->saved_stderr = dup(2);
	dup2(fileno(t->err_log), 2);
}

/* The private key codes. Alt-c (Esc then c at once: within the escape
 * delay, as terminals send it) is one key, KEY_META + c, so an Esc typed
 * and a key typed after it stay two keys; Esc-[ and Esc-O begin the
 * terminal's own sequences and are left to it. */
static void define_keys(void)
{
	for (int c = 0x20; c <= 0x7f; c++) {
		char seq[3] = {'\033', (char)c, 0};
		if (c != '[' && c != 'O' && !(c >= '1' && c <= '9'))
			define_key(seq, KEY_META + c);
	}
	define_key("\033\033", KEY_META + 033);
	for (int i = 1; i <= 9; i++) {
		char seq[3] = {'\033', (char)('0' + i), 0};
		define_key(seq, KEY_ALT_DIGIT + i);
	}
	/* the cursor keys' normal-mode forms, which some terminals (and
	 * multiplexers) send whatever keypad mode says */
	static const struct {
		const char *seq;
		int code;
	} normal[] = {
		{"\033[A", KEY_UP}, {"\033[B", KEY_DOWN}, {"\033[C", KEY_RIGHT}, {"\033[D", KEY_LEFT},
		{"\033[H", KEY_HOME}, {"\033[F", KEY_END}, {"\033[1~", KEY_HOME}, {"\033[4~", KEY_END},
		{"\033[3~", KEY_DC}, {"\033[5~", KEY_PPAGE}, {"\033[6~", KEY_NPAGE},
	};
	for (size_t i = 0; i < ARRAY_LEN(normal); i++)
		if (!key_defined(normal[i].seq))
			define_key(normal[i].seq, normal[i].code);
	define_key("\033\r", KEY_NEWLINE);
	define_key("\033[200~", KEY_PASTE);
	define_key("\033[201~", KEY_PASTE_END);
	define_key("\033[13;2u", KEY_NEWLINE);    /* Shift-Enter: the CSI u form */
	define_key("\033[27;2;13~", KEY_NEWLINE); /* ... xterm's modifyOtherKeys */
	/* Ctrl-PgUp/PgDn, Alt-Left/Right: the terminal's own sequences where
	 * terminfo has them, else xterm's */
	static const struct {
		const char *name, *fallback;
		int code;
	} tabs[] = {
		{"kPRV5", "\033[5;5~", KEY_TAB_PREV}, {"kNXT5", "\033[6;5~", KEY_TAB_NEXT},
		{"kLFT3", "\033[1;3D", KEY_TAB_PREV}, {"kRIT3", "\033[1;3C", KEY_TAB_NEXT},
	};
	for (size_t i = 0; i < ARRAY_LEN(tabs); i++) {
		const char *s = tigetstr(tabs[i].name);
		if (!s || s == (const char *)-1)
			s = tabs[i].fallback;
		define_key(s, tabs[i].code);
	}
}

/* Colours, the private key codes, the mouse wheel, bracketed paste. */
static void setup_screen(ui *u)
{
	u->colors = has_colors();
	if (u->colors) {
		start_color();
		use_default_colors();
		for (int i = 0; i < u->p->n_tab_colors; i++)
			init_pair((short)(i + 1), (short)u->p->tab_colors[i], -1);
		init_pair(PAIR_ERROR, COLOR_RED, -1);
		/* code: light on dark grey, readable on dark and light themes */
		if (COLORS >= 256)
			init_pair(PAIR_CODE, 252, 236);
		else
			init_pair(PAIR_CODE, COLOR_WHITE, COLOR_BLACK);
		/* shared blocks in one colour no tab has; blocks back from a lower tier */
		init_pair(PAIR_SHARED, COLOR_BLACK, COLOR_YELLOW);
		init_pair(PAIR_HOST, COLOR_WHITE, COLOR_BLUE);
		init_pair(PAIR_DISK, COLOR_WHITE, COLOR_MAGENTA);
	}
	define_keys();
	mousemask(BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
	mouseinterval(0);
	fputs("\033[?2004h", stdout); /* bracketed paste: readline takes a paste whole */
	fflush(stdout);
}

/* The user's locale, with a UTF-8 character type: readline and ncurses
 * take typed text through it, and a locale like C would cut a line at its
 * first non-ASCII character. When the user's is not UTF-8, a UTF-8 one the
 * system has takes its place for characters only; with none, the status
 * line says what cannot work. */
static void pick_locale(ui *u)
{
	setlocale(LC_ALL, "");
	u->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	static const char *const utf8[] = {"C.UTF-8", "C.utf8", "en_US.UTF-8", "en_US.utf8"};
	for (size_t i = 0; !u->utf8 && i < ARRAY_LEN(utf8); i++) {
		u->utf8 = setlocale(LC_CTYPE, utf8[i]) && !strcmp(nl_langinfo(CODESET), "UTF-8");
		/* readline sets LC_CTYPE again from LC_ALL, LC_CTYPE or LANG when
		 * it starts: they must name the same locale */
		if (u->utf8)
			setenv(getenv("LC_ALL") && *getenv("LC_ALL") ? "LC_ALL" : "LC_CTYPE", utf8[i], 1);
	}
	if (!u->utf8) {
		setlocale(LC_CTYPE, "");
		ui_status(u, true, "the locale (%s) is not UTF-8 and the system has none: only ASCII can be "
			  "typed here; install one and set LANG (e.g. LANG=C.UTF-8)", nl_langinfo(CODESET));
	}
}

int term_open(ui *u, ui_term *t, err *e)
{
	t->saved_stderr = -1;
	quit_signal = 0;
	pick_locale(u);
	catch_signals(t);
	const char *term = getenv("TERM") ? getenv("TERM") : "unset";
	t->scr = newterm(NULL, stdout, stdin);
	const char *cup = t->scr ? tigetstr("cup") : NULL;
	if (t->scr && (!cup || cup == (const char *)-1)) {
		endwin();
		delscreen(t->scr);
		t->scr = NULL;
		term_too_dumb(term, e);
		pthread_sigmask(SIG_SETMASK, &t->old_mask, NULL);
		return -1;
	}
	if (!t->scr) {
		err_set(e, "cannot use the terminal (TERM=%s)", term);
		pthread_sigmask(SIG_SETMASK, &t->old_mask, NULL);
		return -1;
	}
	redirect_stderr(u, t);
	fatal_term = t;
	fatal_ui = u;
	fatal_set_hook(fatal_hook);
	raw();             /* Ctrl-C, Ctrl-Z, Ctrl-S arrive as keys */
	noecho();
	nonl();
	intrflush(stdscr, FALSE);
	keypad(stdscr, TRUE);
	nodelay(stdscr, TRUE);
	set_escdelay(25);
	curs_set(1);
	setup_screen(u);
	getmaxyx(stdscr, u->rows, u->cols);
	return 0;
}

void term_close(ui *u, ui_term *t)
{
	(void)u;
	fputs("\033[?2004l", stdout);
	fflush(stdout);
	endwin();
	delscreen(t->scr);
	fatal_set_hook(NULL);
	fatal_ui = NULL;
	fatal_term = NULL;
	restore_stderr(t);
	pthread_sigmask(SIG_SETMASK, &t->old_mask, NULL);
}

void term_sleep_mask(sigset_t *mask)
{
	pthread_sigmask(SIG_SETMASK, NULL, mask);
	sigdelset(mask, SIGWINCH);
	for (size_t i = 0; i < ARRAY_LEN(quit_signals); i++)
		sigdelset(mask, quit_signals[i]);
}

/* The attributes of every cell after a line "@attr": a row of two
 * characters per cell, the colour pair ('.' none, '1'..'9', then 'A'...) and
 * a hex digit of flags (1 bold, 2 dim, 4 reverse, 8 underline). */
static size_t dump_attrs(const ui *u, char *out, size_t cap)
{
	size_t n = 0, need = 6 + (size_t)u->rows * ((size_t)u->cols * 2 + 1);
	if (need > cap)
		return 0;
	memcpy(out, "@attr\n", 6);
	n = 6;
	for (int y = 0; y < u->rows; y++) {
		for (int x = 0; x < u->cols; x++) {
			cchar_t cc;
			attr_t a = 0;
			short pair = 0;
			if (mvwin_wch(curscr, y, x, &cc) == OK) {
				wchar_t wc[CCHARW_MAX + 1];
				getcchar(&cc, wc, &a, &pair, NULL);
			}
			out[n++] = pair == 0 ? '.' : pair < 10 ? (char)('0' + pair) : (char)('A' + pair - 10);
			int f = (a & A_BOLD ? 1 : 0) | (a & A_DIM ? 2 : 0) | (a & A_REVERSE ? 4 : 0) |
				(a & A_UNDERLINE ? 8 : 0);
			out[n++] = "0123456789abcdef"[f];
		}
		out[n++] = '\n';
	}
	return n;
}

/* Writes the screen as ncurses sees it (curscr) to u->dump_path: a line
 * "@size COLSxROWS", one "@cursor X,Y", then the rows without trailing
 * blanks, then their attributes (dump_attrs). For the tests: written atomically, and appended to DUMP.log too,
 * so a test can tell that some frame showed a passing state. */
void term_dump(ui *u)
{
	int cy = getcury(curscr), cx = getcurx(curscr);
	size_t cap = (size_t)(u->rows + 2) * ((size_t)u->cols * (MB_CUR_MAX + 2) + 4) + 64;
	char *out = xmalloc(cap);
	size_t n = 0;
	bfmt(out, cap, &n, "@size %dx%d\n@cursor %d,%d\n", u->cols, u->rows, cx, cy);
	wchar_t *row = xmalloc(((size_t)u->cols + 1) * sizeof *row);
	for (int y = 0; y < u->rows; y++) {
		int k = mvwinnwstr(curscr, y, 0, row, u->cols);
		row[k < 0 ? 0 : k] = L'\0';
		size_t m = wcstombs(out + n, row, cap - n - 2);
		if (m == (size_t)-1)
			m = 0;
		while (m > 0 && out[n + m - 1] == ' ')
			m--;
		n += m;
		out[n++] = '\n';
	}
	n += dump_attrs(u, out + n, cap - n);
	wmove(curscr, cy, cx);
	store_write_atomic(u->dump_path, out, n, NULL);
	char log[4200];
	snprintf(log, sizeof log, "%s.log", u->dump_path);
	int fd = file_open_append(log, FILE_MODE_PRIVATE, NULL);
	if (fd >= 0) {
		/* the tests' record: a failed write only costs them a frame */
		bool ok = write(fd, "@frame\n", 7) == 7 && write(fd, out, n) == (ssize_t)n;
		(void)ok;
		close(fd);
	}
	free(row);
	free(out);
}
