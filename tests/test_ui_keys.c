/* tests/test_ui_keys.c: the chat's keys and the screen's edges, through a
 * pseudo-terminal (tests/pty.h), at 80x24 and 200x60: the F1 help fits or
 * wraps and lists every row of docs/usage.md's key table; the status line
 * never draws over a message or a hint, and a message stays with its tab;
 * the tab bar keeps the active tab among 12; "more below" has its own row;
 * Ctrl-W and Ctrl-T edit as in bash while Alt keys handle tabs, and closing
 * a tab with typed text asks; Esc then a key stays two keys; F2 below 80
 * columns and F3 on a busy tab say what they do; LANG=C keeps non-ASCII
 * text; TERM=dumb and a YAML tab indentation get one clear line; /save ~;
 * chat -md; completion mode's "continue" joins the answer it continues.
 *
 * Every check polls the screen (or the log of frames) with a timeout. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <glob.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <wchar.h>

#define DIR "build/test-ui-keys"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 30.0

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 1024\n"
	"kv_cache: {block_size: 16, pool_blocks: 700}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"system_prompts:\n"
	"  story: Once upon a time\n"
	"  other: One day a bear\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

/* Answers that run for seconds (16K tokens of context), for the keys that
 * stop them: with 1024 an answer of this model ends in a fraction of a second,
 * at times before the key that was to stop it. */
static const char long_config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 16384\n"
	"kv_cache: {block_size: 16, pool_blocks: 2200}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

/* Short answers, for "continue". */
static const char short_config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"sampling: {temperature: 0, max_tokens: 12, seed: 7}\n"
	"system_prompts:\n"
	"  story: Once upon a time\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;
static char out[1 << 16];

static void start(const char *args, int rows, int cols, const char *env)
{
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app);
	app.env = env;
	app.out = out;
	app.cap_out = sizeof out;
	CHECK(pty_start(&app, DIR, args, rows, cols));
}

static void start_chat(int rows, int cols)
{
	CHECK(system("rm -rf " DIR "/data") == 0); /* no earlier session to mention */
	start(ARGS, rows, cols, NULL);
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
}

static void quit(void)
{
	pty_send(&app, "\025/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

static bool lacks(const char *screen, const void *s)
{
	return !strstr(screen, s);
}

static int rows_of(void)
{
	int c = 0, r = 0;
	sscanf(app.screen, "@size %dx%d", &c, &r);
	return r;
}

static void row(int y, char *buf, size_t cap)
{
	pty_row(&app, y, buf, cap);
}

/* Whitespace runs as one blank, into dst (for text wrapped over rows). */
static void squeeze(char *dst, size_t cap, const char *src)
{
	size_t n = 0;
	bool blank = true;
	for (; *src && n + 1 < cap; src++) {
		bool b = *src == ' ' || *src == '\n';
		if (!(b && blank))
			dst[n++] = b ? ' ' : *src;
		blank = b;
	}
	dst[n] = '\0';
}

/* ---- F1 and docs/usage.md ---- */

/* The help's scroll position ("lines A-B of N"): A, B and N, or false. */
static bool help_pos(const char *screen, int *a, int *b, int *n)
{
	const char *p = strstr(screen, "(PgUp/PgDn: lines ");
	return p && sscanf(p, "(PgUp/PgDn: lines %d-%d of %d)", a, b, n) == 3;
}

/* The help shows lines from a different first line than *ctx. */
static bool help_moved(const char *screen, const void *ctx)
{
	int a, b, n;
	return help_pos(screen, &a, &b, &n) && a != *(const int *)ctx;
}

/* Appends the columns of the box (x0 .. x0 + w) of every row to all. */
static void box_rows(int x0, int w, char *all, size_t cap, size_t *n)
{
	for (int y = 0; y < rows_of(); y++) {
		char r[2048];
		wchar_t wr[1024];
		row(y, r, sizeof r);
		size_t k = mbstowcs(wr, r, 1023);
		if (k == (size_t)-1)
			continue;
		for (int x = x0 + 1; x < x0 + w - 1 && x < (int)k && *n + 8 < cap; x++) {
			char mb[8];
			int m = wctomb(mb, wr[x]);
			for (int i = 0; i < m; i++)
				all[(*n)++] = mb[i];
		}
		all[(*n)++] = '\n';
	}
}

/* The help's text at this size, every page (PgDn until its last line),
 * with the box's borders cut off, squeezed. */
static void help_text(int cols, char *dst, size_t cap)
{
	static char all[1 << 17];
	size_t n = 0;
	int w = MIN(cols - 2, 100), x0 = (cols - w) / 2;
	pty_send(&app, "\033OP");
	CHECK_(pty_wait_str(&app, "any key closes", WAIT), "no help:\n%s", app.screen);
	for (int page = 0; page < 20; page++) {
		box_rows(x0, w, all, sizeof all, &n);
		int a, b, total;
		if (!help_pos(app.screen, &a, &b, &total) || b >= total)
			break;
		pty_send(&app, "\033[6~");
		CHECK_(pty_wait(&app, help_moved, &a, WAIT), "PgDn did not scroll the help:\n%s", app.screen);
	}
	all[n] = '\0';
	squeeze(dst, cap, all);
	pty_send(&app, "x");
	CHECK_(pty_wait(&app, lacks, "any key closes", WAIT), "the help stayed:\n%s", app.screen);
}

/* Each row of docs/usage.md's key table, "`KEY` | TEXT": both must be in
 * the help, whole (wrapped text joins with one blank). */
static void test_help(int rows, int cols)
{
	start_chat(rows, cols);
	static char help[1 << 16], doc[1 << 18];
	int failed = test_fail_;
	help_text(cols, help, sizeof help);
	slurp("docs/usage.md", doc, sizeof doc);
	const char *s = strstr(doc, "<!-- keys"), *end = strstr(doc, "<!-- /keys -->");
	CHECK_(s && end, "docs/usage.md has no key table");
	int n_rows = 0;
	while (s && end && (s = strstr(s, "\n| `")) && s < end) {
		char key[128], text[256], k2[128], t2[256];
		const char *k = s + 4, *ke = strstr(k, "` | ");
		if (!ke)
			break;
		const char *t = ke + 4, *te = strstr(t, " |\n");
		snprintf(key, sizeof key, "%.*s", (int)(ke - k), k);
		snprintf(text, sizeof text, "%.*s", (int)(te - t), t);
		/* Markdown escapes | in tables */
		char *p;
		while ((p = strstr(text, "\\|")))
			memmove(p, p + 1, strlen(p));
		while ((p = strstr(key, "\\|")))
			memmove(p, p + 1, strlen(p));
		squeeze(k2, sizeof k2, key);
		squeeze(t2, sizeof t2, text);
		CHECK_(strstr(help, k2), "%dx%d: F1 lacks the key '%s'", cols, rows, k2);
		CHECK_(strstr(help, t2), "%dx%d: F1 lacks (or cuts) '%s'", cols, rows, t2);
		n_rows++;
		s = te;
	}
	CHECK_(n_rows >= 30, "docs/usage.md's key table has %d rows", n_rows);
	if (test_fail_ > failed)
		fprintf(stderr, "the help at %dx%d:\n%s\n", cols, rows, help);
	quit();
}

/* ---- the status line ---- */

static void test_status(int rows, int cols)
{
	start_chat(rows, cols);
	char r[1024];
	pty_wait_str(&app, " story  ", WAIT);
	row(rows - 2, r, sizeof r);
	CHECK_(strstr(r, "F1 help") && strstr(r, "story  completion"), "%dx%d status: '%s'", cols, rows, r);
	CHECK_(strstr(r, "F2 panels"), "%dx%d: no F2 hint: '%s'", cols, rows, r);
	/* a message wider than what the right-hand text leaves: shown alone */
	const char *name = "a-prompt-name-that-is-long-enough-to-fill-the-line";
	char cmd[160], want[200];
	snprintf(cmd, sizeof cmd, "/new %s\r", name);
	snprintf(want, sizeof want, " no system prompt named '%.40s' (there are: story, other)", name);
	pty_send(&app, cmd);
	CHECK(pty_wait_str(&app, "no system prompt named", WAIT));
	/* a message wider than the screen goes on over the status line's rows
	 * (#40 item 11): the rows above the input, joined, hold it whole */
	char r2[512];
	row(rows - 2, r, sizeof r);
	if (strlen(want) > (size_t)cols) {
		row(rows - 3, r2, sizeof r2);
		size_t m = strlen(r2);
		snprintf(r2 + m, sizeof r2 - m, " %s", r);
		snprintf(r, sizeof r, "%s", r2);
	}
	size_t fit = strlen(want);
	CHECK_(!strncmp(r, want, fit), "%dx%d: message cut or covered: '%s'", cols, rows, r);
	CHECK_(strlen(want) + 19 < (size_t)cols || !strstr(r, "completion"), "%dx%d: right text over: '%s'",
	       cols, rows, r);
	/* the message belongs to tab 1: tab 2 does not show it */
	pty_send(&app, "\033o");
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	CHECK_(pty_wait(&app, lacks, "no system prompt named", WAIT), "the error followed:\n%s", app.screen);
	quit();
}

/* ---- the tab bar and the view ---- */

static void test_many_tabs(int rows, int cols)
{
	start_chat(rows, cols);
	for (int i = 2; i <= 12; i++)
		pty_send(&app, "\033o");
	CHECK(pty_wait_str(&app, "tab12>", WAIT));
	char r[1024];
	row(0, r, sizeof r);
	CHECK_(strstr(r, "12:tab12"), "%dx%d: the active tab is off the bar: '%s'", cols, rows, r);
	CHECK_(cols >= 200 || !strncmp(r, "< ", 2), "%dx%d: no mark for tabs on the left: '%s'", cols, rows, r);
	pty_send(&app, "\0331");
	CHECK(pty_wait_str(&app, "one>", WAIT));
	row(0, r, sizeof r);
	CHECK_(strstr(r, "1:one"), "%dx%d: tab 1 off the bar: '%s'", cols, rows, r);
	CHECK_(cols >= 200 || r[strlen(r) - 1] == '>' || strstr(r, "> "), "%dx%d: no right mark: '%s'", cols,
	       rows, r);
	/* Alt-Left from tab 1: the last tab */
	pty_send(&app, "\033[1;3D");
	CHECK(pty_wait_str(&app, "tab12>", WAIT));
	pty_send(&app, "\033[1;3C");
	CHECK(pty_wait_str(&app, "one>", WAIT));
	quit();
}

/* The row with "more below" holds nothing else of the chat. */
static bool more_alone(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *m = strstr(screen, " more below: PgDn ");
	if (!m)
		return false;
	const char *bol = m;
	while (bol > screen && bol[-1] != '\n')
		bol--;
	for (const char *p = bol; p < m; p++)
		if (*p != ' ')
			return false;
	return true;
}

static void test_more_below(int rows, int cols)
{
	start_chat(rows, cols);
	pty_send(&app, "Lily went to the park\r");
	CHECK(pty_wait_str(&app, " tok, context", WAIT));
	for (int turn = 0; rows > 30 && turn < 2; turn++) { /* a text longer than the window */
		pty_send(&app, "Once more\r");
		CHECK(pty_wait_str(&app, "1:one *", WAIT));
		CHECK(pty_wait(&app, lacks, "1:one *", WAIT));
	}
	pty_send(&app, "\033[5~");
	CHECK_(pty_wait(&app, more_alone, NULL, WAIT), "%dx%d: more below drawn over text:\n%s", cols, rows,
	       app.screen);
	quit();
}

/* ---- keys ---- */

static void input_is(int rows, const char *want)
{
	char r[512];
	for (int i = 0; i < 300; i++) {
		pty_wait_str(&app, "@size", WAIT);
		row(rows - 1, r, sizeof r);
		if (!strcmp(r, want))
			break;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
		pty_drain(&app);
		pty_read_screen(&app);
	}
	CHECK_(!strcmp(r, want), "input line '%s', want '%s'", r, want);
}

static void test_readline_keys(int rows, int cols)
{
	CHECK(system("rm -rf " DIR "/data") == 0);
	start("--config " DIR "/long.yaml", rows, cols, NULL);
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
	pty_send(&app, "hello world\027");
	input_is(rows, "one> hello");
	pty_send(&app, "\025ab\024");
	input_is(rows, "one> ba");
	/* a typed draft: Alt-w asks */
	pty_send(&app, "\033o");
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	pty_send(&app, "draft");
	input_is(rows, "tab2> draft");
	pty_send(&app, "\033w");
	CHECK_(pty_wait_str(&app, "has typed text in its input: close it? (y/n)", WAIT), "no question:\n%s",
	       app.screen);
	pty_send(&app, "n");
	CHECK(pty_wait_str(&app, "the tab stays open", WAIT));
	input_is(rows, "tab2> draft");
	pty_send(&app, "\033w");
	CHECK(pty_wait_str(&app, "close it? (y/n)", WAIT));
	pty_send(&app, "y");
	CHECK(pty_wait(&app, lacks, "2:tab2", WAIT));
	/* Esc, then a key a moment later: two keys, not Alt-b */
	pty_send(&app, "\025abc\033");
	CHECK(pty_wait_str(&app, "nothing to stop", WAIT));
	pty_send(&app, "b");
	input_is(rows, "one> abcb");
	/* while an answer runs: Esc stops it, the key after it is typed */
	pty_send(&app, "\025Lily went\r");
	CHECK(pty_wait_str(&app, "1:one *", WAIT));
	pty_send(&app, "\033");
	CHECK(pty_wait_str(&app, "tok, cancelled", WAIT));
	pty_send(&app, "h");
	input_is(rows, "one> h");
	/* Esc and the key in one read (typed fast): the same, where readline has
	 * no Alt binding for the key; Alt-b (a word back) stays readline's. In a
	 * new tab, so that the one cancelled answer is the view's last line (the
	 * first tab's could have scrolled off by then). */
	pty_send(&app, "\025\033o");
	CHECK(pty_wait_str(&app, "2:tab3", WAIT)); /* the closed tab2's name is not used again */
	pty_send(&app, "Lily went\r");
	CHECK(pty_wait_str(&app, "2:tab3 *", WAIT));
	pty_send(&app, "\033h");
	CHECK_(pty_wait_str(&app, "tok, cancelled", WAIT), "Esc h did not stop the answer:\n%s", app.screen);
	input_is(rows, "tab3> h");
	pty_send(&app, "\025ab cd\033bX");
	input_is(rows, "tab3> ab Xcd");
	/* F3 on a busy tab says what it did */
	pty_send(&app, "\025Lily went home\r\033OR");
	CHECK_(pty_wait_str(&app, "the running answer was stopped and is being asked again", WAIT), "%s",
	       app.screen);
	pty_send(&app, "\033");
	quit();
}

/* Keys typed while the model loads are kept: a question typed ahead (and
 * /model's reload keeps them alike: the same loop). */
static void test_typed_ahead(int rows, int cols)
{
	CHECK(system("rm -rf " DIR "/data") == 0);
	start(ARGS, rows, cols, NULL);
	pty_send(&app, "typed ahead"); /* before the first screen: read by the loading loop */
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
	input_is(rows, "one> typed ahead");
	/* the first run points at the tour, once */
	CHECK_(strstr(app.screen, "New here?") && (cols < 120 || strstr(app.screen, "pagechat demo")),
	       "no pointer to the demo:\n%s", app.screen);
	quit();
	start(ARGS, rows, cols, NULL);
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
	input_is(rows, "one>");
	CHECK_(!strstr(app.screen, "New here?"), "the pointer again on the second run:\n%s", app.screen);
	quit();
}

/* Row y is exactly want. */
static bool row_is(const char *screen, int y, const char *want)
{
	const char *s = screen;
	for (int skip = 0; skip < 2 + y && s; skip++)
		if ((s = strchr(s, '\n')))
			s++;
	size_t n = s ? strcspn(s, "\n") : 0;
	return s && n == strlen(want) && !strncmp(s, want, n);
}

typedef struct rows2 {
	int y;
	const char *a, *b;       /* rows y and y + 1 */
} rows2;

static bool two_rows(const char *screen, const void *ctx)
{
	const rows2 *r = ctx;
	return row_is(screen, r->y, r->a) && row_is(screen, r->y + 1, r->b);
}

/* "first" ends a row of the chat (the panel may follow after blanks) and
 * the next row starts with "second". */
static bool two_lines(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *p = strstr(screen, "\nfirst");
	if (!p || (p[6] != ' ' && p[6] != '\n'))
		return false;
	const char *next = strchr(p + 1, '\n');
	return next && !strncmp(next + 1, "second", 6);
}

/* The input box: Alt-Enter and a pasted newline make rows, the status line
 * moves up, the message keeps its lines; Ctrl-X Ctrl-E takes the editor's
 * text; Ctrl-R in another tab finds the line. */
static void test_input(int rows, int cols)
{
	start_chat(rows, cols);
	pty_send(&app, "first\033\rsecond");
	rows2 r = {rows - 2, "one> first", "     second"};
	CHECK_(pty_wait(&app, two_rows, &r, WAIT), "%dx%d: Alt-Enter:\n%s", cols, rows, app.screen);
	char st[512];
	row(rows - 3, st, sizeof st);
	CHECK_(strstr(st, "F1 help"), "%dx%d: the status line did not move up: '%s'", cols, rows, st);
	pty_send(&app, "\r\033");
	CHECK_(pty_wait(&app, two_lines, NULL, WAIT), "%dx%d: the message lost its newline:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "a\033[13;2ub"); /* Shift-Enter, as kitty and foot send it */
	rows2 sh = {rows - 2, "one> a", "     b"};
	CHECK_(pty_wait(&app, two_rows, &sh, WAIT), "%dx%d: Shift-Enter:\n%s", cols, rows, app.screen);
	pty_send(&app, "\025");
	pty_send(&app, "\033[200~pasted one\npasted two\033[201~");
	rows2 p = {rows - 2, "one> pasted one", "     pasted two"};
	CHECK_(pty_wait(&app, two_rows, &p, WAIT), "%dx%d: paste:\n%s", cols, rows, app.screen);
	/* the history is every tab's */
	pty_send(&app, "\025\033o");
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	pty_send(&app, "\022fir");
	CHECK_(pty_wait_str(&app, "(reverse-i-search)`fir': first", WAIT), "%dx%d: Ctrl-R:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "\007\025");
	quit();
}

/* /set, /system, /prompts: the tab's settings, checked against the ranges
 * of their flags, shown in the status line, used by the next answer. */
static void test_settings(int rows, int cols)
{
	start_chat(rows, cols);
	pty_send(&app, "/set temp -1\r");
	CHECK_(pty_wait_str(&app, "/set temp: -1 is out of range (0..100; 0: greedy)", WAIT), "%s", app.screen);
	pty_send(&app, "/set bogus 1\r");
	CHECK(pty_wait_str(&app, "/set: no setting 'bogus'", WAIT));
	pty_send(&app, "/set max_tokens 5\r");
	CHECK_(pty_wait_str(&app, "max 5", WAIT), "%s", app.screen);
	pty_send(&app, "Lily\r");
	CHECK_(pty_wait_str(&app, "[5 tok, length", WAIT), "%dx%d: /set max_tokens not used:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "/set temp 0.5\r");
	CHECK(pty_wait_str(&app, "temp 0.5", WAIT));
	if (cols >= 200) { /* the right-hand text keeps the settings */
		char r[512];
		row(rows - 2, r, sizeof r);
		CHECK_(strstr(r, "temp 0.5 top-p") && strstr(r, "max 5  story"), "status: '%s'", r);
	}
	pty_send(&app, "/prompts\r");
	CHECK(pty_wait_str(&app, "system prompts: story, other", WAIT));
	pty_send(&app, "/system other\r");
	CHECK_(pty_wait_str(&app, "system prompt other", WAIT), "%s", app.screen);
	CHECK_(pty_wait_str(&app, "One day a bear", WAIT), "%dx%d: the view kept the old prompt:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "Max\r");
	CHECK(pty_wait_str(&app, "[5 tok, length", WAIT));
	quit();
}

/* The number of the list's line that holds s, or -1. */
static int list_no(const char *s)
{
	const char *p = strstr(app.screen, s);
	if (!p)
		return -1;
	while (p > app.screen && p[-1] != '\n')
		p--;
	return atoi(p);
}

/* The saved-chat list: titles from the first message, search, reopen the
 * tab closed last, open, rename and delete by number. */
static void test_chats(int rows, int cols)
{
	start_chat(rows, cols);
	pty_send(&app, "Tell me about bears\r\033");
	CHECK(pty_wait_str(&app, "tok, cancelled", WAIT));
	pty_send(&app, "/name bearchat\r\033oLily and the sea\r\033");
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	pty_send(&app, "\033o"); /* a third tab, left empty */
	CHECK(pty_wait_str(&app, "3:tab3", WAIT));
	pty_send(&app, "\033[17~"); /* F6 */
	const char *both[] = {"saved chats", "Tell me about bears", "Lily and the sea", "'bearchat'", "(open)", NULL};
	for (const char *const *s = both; *s; s++)
		CHECK_(pty_wait_str(&app, *s, WAIT), "%dx%d: the list lacks '%s':\n%s", cols, rows, *s, app.screen);
	/* #40 item 10: the empty tab is no saved chat; the list tab has no
	 * figures in the panel (no latency, no context gauge) */
	CHECK_(!strstr(app.screen, "'tab3'"), "%dx%d: the empty tab is listed:\n%s", cols, rows, app.screen);
	CHECK_(!strstr(app.screen, ":saved  ttft") && !strstr(app.screen, ":saved  ["),
	       "%dx%d: the list tab is in the panel:\n%s", cols, rows, app.screen);
	CHECK_((strstr(app.screen, " 2 messages, ") || strstr(app.screen, " 1 messages, ")) &&
	       strstr(app.screen, " KB  stories260K.gguf"), "%dx%d: no model or size:\n%s", cols, rows, app.screen);
	pty_send(&app, "/find BEARS\r");
	CHECK(pty_wait_str(&app, "with 'BEARS'", WAIT));
	CHECK_(strstr(app.screen, "Tell me about bears") && !strstr(app.screen, "Lily and the sea"), "%dx%d: /find:\n%s",
	       cols, rows, app.screen);
	/* close the bear chat, bring it back with Alt-z, close it again */
	pty_send(&app, "\0331\033w");
	CHECK(pty_wait_str(&app, "closed 'bearchat'", WAIT));
	pty_send(&app, "\033z");
	CHECK_(pty_wait_str(&app, "bearchat>", WAIT), "%dx%d: Alt-z did not reopen:\n%s", cols, rows, app.screen);
	CHECK_(pty_wait_str(&app, " 1:bearchat", WAIT), "%dx%d: Alt-z put it elsewhere (#40):\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "\033w");
	CHECK(pty_wait_str(&app, "closed 'bearchat'", WAIT));
	pty_send(&app, "/open\r");
	CHECK(pty_wait_str(&app, ". 'bearchat'  Tell me about bears", WAIT));
	int n = list_no(". 'bearchat'  Tell me about bears");
	char cmd[64];
	snprintf(cmd, sizeof cmd, "/rename %d Bears\r", n);
	pty_send(&app, cmd);
	CHECK_(pty_wait_str(&app, "is now 'Bears'", WAIT), "%s:\n%s", cmd, app.screen);
	snprintf(cmd, sizeof cmd, "/open %d\r", n);
	pty_send(&app, cmd);
	CHECK_(pty_wait_str(&app, "Bears>", WAIT), "%dx%d: /open N:\n%s", cols, rows, app.screen);
	pty_send(&app, "\033w\033[17~");
	CHECK_(pty_wait_str(&app, ". 'Bears'  Tell me about bears", WAIT), "%dx%d: the title is not the new name:\n%s",
	       cols, rows, app.screen);
	n = list_no(". 'Bears'  Tell me about bears");
	snprintf(cmd, sizeof cmd, "/delete %d\r", n);
	pty_send(&app, cmd);
	CHECK_(pty_wait_str(&app, "delete this chat for good? (y/n) 'Bears'  Tell me about bears", WAIT), "%s", app.screen);
	pty_send(&app, "y");
	CHECK_(pty_wait_str(&app, "deleted 'Bears'  Tell me about bears (chat-", WAIT), "%s", app.screen);
	CHECK_(pty_wait(&app, lacks, "Tell me about bears", WAIT), "%dx%d: still listed:\n%s", cols, rows,
	       app.screen);
	quit();
	/* the next run: the empty tab left no saved chat behind (#40 item 10) */
	start(ARGS, rows, cols, NULL);
	CHECK(pty_wait_str(&app, "1:", WAIT));
	pty_send(&app, "/open\r");
	CHECK_(pty_wait_str(&app, "'tab2'  Lily and the sea", WAIT), "%dx%d: no list:\n%s", cols, rows, app.screen);
	CHECK_(!strstr(app.screen, "'tab3'"), "%dx%d: the empty tab was saved:\n%s", cols, rows, app.screen);
	quit();
}

/* Block files in the KV store dir (every model's folder). */
static int store_blocks(const char *dir)
{
	char pat[512];
	snprintf(pat, sizeof pat, "%s/*/*.kvb", dir);
	glob_t g;
	int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
	globfree(&g);
	return n;
}

/* /delete removes the chat's blocks from the default KV store (issue 42,
 * finding 10): a chat long enough to fill blocks leaves block files holding
 * its token ids in HOME/.cache/pagechat; once it is deleted (the only chat
 * with messages) none is left. */
static void test_delete_blocks(void)
{
	const char *store = DIR "/home/.cache/pagechat";
	CHECK(system("rm -rf " DIR "/data " DIR "/home/.cache/pagechat") == 0);
	start("--config " DIR "/short.yaml", 24, 80, NULL);
	CHECK(pty_wait_str(&app, "1:one", WAIT));
	pty_send(&app, "\033oLily went to the sea with her big red ball and a blue hat\r");
	CHECK_(pty_wait_str(&app, "[12 tok, length", WAIT), "%s", app.screen);
	int before = store_blocks(store);
	CHECK_(before > 0, "the chat left no block in %s", store);
	pty_send(&app, "\033w");
	CHECK(pty_wait_str(&app, "closed", WAIT));
	pty_send(&app, "/open\r");
	CHECK_(pty_wait_str(&app, "'  Lily went to the sea", WAIT), "%s", app.screen);
	char cmd[64];
	snprintf(cmd, sizeof cmd, "/delete %d\r", list_no("'  Lily went to the sea"));
	pty_send(&app, cmd);
	CHECK_(pty_wait_str(&app, "for good? (y/n)", WAIT), "%s", app.screen);
	pty_send(&app, "y");
	CHECK_(pty_wait_str(&app, "deleted 'tab2'  Lily went", WAIT), "%s", app.screen);
	int after = store_blocks(store);
	CHECK_(after == 0, "/delete left %d of %d block files holding the chat's ids in %s", after, before, store);
	quit();
}

/* Tab one answers no more: its label is neither "1:one *" (streaming) nor
 * "1:one N%" (its prompt being read, before the first token). */
static bool one_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *s = strstr(screen, "1:one");
	return s && !(s[5] == ' ' && (s[6] == '*' || (s[6] >= '0' && s[6] <= '9')));
}

/* /model and /draft: every tab goes on with another model (the engine
 * restarted, the chats kept); a bad file changes nothing. */
static void test_model(int rows, int cols)
{
	start("--config " DIR "/short.yaml", rows, cols, NULL);
	CHECK(pty_wait_str(&app, "1:one", WAIT));
	pty_send(&app, "Lily went\r");
	CHECK(pty_wait_str(&app, "[12 tok, length", WAIT));
	pty_send(&app, "/model nosuch.gguf\r");
	CHECK_(pty_wait_str(&app, "/model: nosuch.gguf does not exist", WAIT), "%s", app.screen);
	pty_send(&app, "/model build/models/replay-qwen3-vocab.gguf\r");
	CHECK_(pty_wait_str(&app, "replay-qwen3-vocab.gguf  chatml", WAIT), "%dx%d: no new model:\n%s", cols, rows,
	       app.screen);
	CHECK_(pty_wait_str(&app, "you> Lily went", WAIT), "%dx%d: the chat was lost:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "Hello\r");
	CHECK_(pty_wait_str(&app, "you> Hello", WAIT), "%s", app.screen);
	CHECK_(pty_wait(&app, one_idle, NULL, WAIT), "%dx%d: no answer on the new model:\n%s", cols, rows,
	       app.screen);
	pty_send(&app, "/draft ngram\r");
	CHECK_(pty_wait_str(&app, "speculative decoding: ngram", WAIT), "%s", app.screen);
	if (rows >= 60) /* the panel has room for the draft's line */
		CHECK_(pty_wait_str(&app, "draft ngram k=", WAIT), "%dx%d: the panel:\n%s", cols, rows, app.screen);
	pty_send(&app, "/draft off\r");
	CHECK(pty_wait_str(&app, "speculative decoding: off", WAIT));
	CHECK(rows < 60 || pty_wait_str(&app, "draft: none", WAIT));
	quit();
}

/* Ctrl-X Ctrl-E: what the editor saved becomes the input. */
static void test_editor(void)
{
	char env[1400];
	snprintf(env, sizeof env, "EDITOR=%s/ed.sh\nVISUAL=\n", app.dir);
	CHECK(system("rm -rf " DIR "/data") == 0);
	start(ARGS, 24, 80, env);
	CHECK(pty_wait_str(&app, "1:one", WAIT));
	pty_send(&app, "draft\030\005");
	rows2 r = {22, "one> from the editor", "     second line"};
	CHECK_(pty_wait(&app, two_rows, &r, WAIT), "Ctrl-X Ctrl-E:\n%s", app.screen);
	static char seen[256];
	slurp(DIR "/editor-saw", seen, sizeof seen);
	CHECK_(!strcmp(seen, "draft"), "the editor got '%s'", seen);
	quit();
}

static void test_f2_narrow(void)
{
	start_chat(24, 70);
	pty_send(&app, "\033OQ");
	CHECK_(pty_wait_str(&app, "the side panels need a terminal 80 columns wide", WAIT), "F2 said nothing:\n%s",
	       app.screen);
	char r[256];
	row(22, r, sizeof r);
	CHECK_(!strstr(r, "F2"), "F2 hinted at 70 columns: '%s'", r);
	quit();
}

/* ---- locale, terminal, files, flags ---- */

static void test_lang_c(int rows, int cols)
{
	start(ARGS, rows, cols, "LANG=C\nLC_ALL=C\n");
	CHECK(pty_wait_str(&app, "1:one", WAIT));
	pty_send(&app, "Lily \xc4\x83n ph\xe1\xbb\x9f\r\033"); /* Esc: the text stays in view */
	CHECK_(pty_wait_str(&app, "Lily \xc4\x83n ph\xe1\xbb\x9f", WAIT), "LANG=C lost the text:\n%s", app.screen);
	pty_send(&app, "\033");
	quit();
}

static void test_dumb(void)
{
	/* a bad PAGECHAT_ISA makes the device probe print a note: the terminal
	 * is refused before it runs, so the one line comes alone (#40) */
	start(ARGS, 24, 80, "TERM=dumb\nPAGECHAT_ISA=bogus\n");
	int rc = pty_wait_exit(&app, WAIT);
	CHECK_(rc == 1, "TERM=dumb: exit %d", rc);
	CHECK_(strstr(out, "pagechat: the terminal (TERM=dumb) cannot move the cursor"), "output: %s", out);
	CHECK_(!strstr(out, "\033["), "TERM=dumb got escape sequences: %s", out);
	const char *nl = strchr(out, '\n');
	CHECK_(!strstr(out, "PAGECHAT_ISA") && (!nl || !nl[strspn(nl, "\r\n")]), "more than one line: %s", out);
}

static void test_yaml_tab(void)
{
	const char *bad = "model: ../shared/models/stories260K.gguf\nkv_cache:\n\tblock_size: 16\n";
	CHECK(write_file(DIR "/tab.yaml", bad, strlen(bad)) == 0);
	start("--config " DIR "/tab.yaml", 24, 80, NULL);
	int rc = pty_wait_exit(&app, WAIT);
	CHECK_(rc == 1, "exit %d", rc);
	CHECK_(strstr(out, "tab.yaml:3:1: tabs are not allowed for indentation"), "output: %s", out);
}

static void test_save_home(void)
{
	start_chat(24, 80);
	pty_send(&app, "/save ~/x.md\r");
	CHECK_(pty_wait_str(&app, "saved this tab to", WAIT), "%s", app.screen);
	struct stat st;
	CHECK_(stat(DIR "/home/x.md", &st) == 0, "~ was not the home directory");
	quit();
	start(ARGS " -md ../shared/models/stories260K.gguf", 24, 80, NULL);
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "chat -md refused: %s", out);
	quit();
}

/* Completion mode: an empty line continues the answer in the same text,
 * with one set of figures after it. */
static void test_continue(int rows, int cols)
{
	start("--config " DIR "/short.yaml", rows, cols, NULL);
	CHECK(pty_wait_str(&app, "1:one", WAIT));
	pty_send(&app, "Lily went\r");
	CHECK(pty_wait_str(&app, "[12 tok, length", WAIT));
	pty_send(&app, "\r");
	/* both answers done (the panel counts them; the prompt is too short
	 * for a prefill request of its own) */
	CHECK_(pty_wait_str(&app, "finished 2", WAIT), "%dx%d: no second answer:\n%s", cols, rows, app.screen);
	CHECK(pty_wait(&app, lacks, "1:one *", WAIT));
	const char *first = strstr(app.screen, "[12 tok"), *again = first ? strstr(first + 1, "[12 tok") : NULL;
	CHECK_(first && !again, "%dx%d: the continuation is a separate text:\n%s", cols, rows, app.screen);
	quit();
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	setlocale(LC_ALL, "C.UTF-8");
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	CHECK(write_file(DIR "/short.yaml", short_config, strlen(short_config)) == 0);
	CHECK(write_file(DIR "/long.yaml", long_config, strlen(long_config)) == 0);
	const char *ed = "#!/bin/sh\ncat \"$1\" > " DIR "/editor-saw\nprintf 'from the editor\\nsecond line\\n' > \"$1\"\n";
	CHECK(write_file(DIR "/ed.sh", ed, strlen(ed)) == 0 && chmod(DIR "/ed.sh", 0755) == 0);
	static const int sizes[][2] = {{24, 80}, {60, 200}};
	for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
		int r = sizes[i][0], c = sizes[i][1];
		test_help(r, c);
		test_status(r, c);
		test_many_tabs(r, c);
		test_more_below(r, c);
		test_readline_keys(r, c);
		test_typed_ahead(r, c);
		test_lang_c(r, c);
		test_continue(r, c);
		test_input(r, c);
		test_settings(r, c);
		test_chats(r, c);
		test_model(r, c);
	}
	test_editor();
	test_f2_narrow();
	test_dumb();
	test_yaml_tab();
	test_save_home();
	test_delete_blocks();
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
