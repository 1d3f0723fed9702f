/* tests/test_ui.c: the full-screen chat end to end, through a pseudo-terminal
 * (tests/pty.h), on the demo model: a prompt streamed into tab 1; a second
 * tab with the same system prompt sharing its blocks (the map and the hit
 * rate show it); both tabs generating while we switch; a resize; Esc; closing
 * a busy tab (asked) and an idle one (its pinned blocks turn cached); quit
 * and --resume; F1-F4, Ctrl-R (all tabs' lines), Ctrl-PgUp/PgDn, the mouse wheel and /save;
 * kill -9 in the middle of an answer, then --resume.
 *
 * Determinism: every check polls the screen, or the log of every frame the
 * app drew, with a timeout; nothing sleeps. Sampling is greedy and answers
 * run until the 1024-token context is full (about 950 engine steps), so keys
 * sent in the same write as an Enter reach the UI while the answer runs, and
 * frames showing it streaming are drawn (30 a second) long before it ends.
 * Each long answer gets a fresh tab, so no later turn overflows a context. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DIR "build/test-ui"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 30.0 /* seconds: a ceiling for sanitizer builds; normally < 1 */
#define PGUP10 "\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~"
#define PGDN10 "\033[6~\033[6~\033[6~\033[6~\033[6~\033[6~\033[6~\033[6~\033[6~\033[6~"

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 1024\n"
	"kv_cache: {block_size: 16, pool_blocks: 700}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"system_prompts:\n"
	"  story: Once upon a time, in a little town by the sea, there lived a girl named\n"
	"    Lily. She loved to play on the beach with her dog Max, and every morning they\n"
	"    looked for shells in the sand.\n"
	"  other: One day a big brown bear walked out of the dark forest. He was very\n"
	"    hungry, so he went to look for honey near the river where the bees lived.\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;

/* ---- predicates over a screen ---- */

/* The number after label on the screen ("cache skipped 96/200" -> 96), or -1. */
static double figure(const char *screen, const char *label)
{
	const char *s = strstr(screen, label);
	return s ? atof(s + strlen(label)) : -1;
}

typedef struct above {
	const char *label;
	double value;
} above;

static bool figure_above(const char *screen, const void *ctx)
{
	const above *a = ctx;
	return figure(screen, a->label) > a->value;
}

/* All of a NULL-terminated list of strings. */
static bool all_of(const char *screen, const void *ctx)
{
	for (const char *const *s = ctx; *s; s++)
		if (!strstr(screen, *s))
			return false;
	return true;
}

static bool lacks(const char *screen, const void *s)
{
	return !strstr(screen, s);
}

static int count(const char *screen, const char *s)
{
	int n = 0;
	for (const char *p = screen; (p = strstr(p, s)); p += strlen(s))
		n++;
	return n;
}

/* Map cells with glyph g: the legend shows each glyph once more. */
static bool in_map(const char *screen, const void *g)
{
	return count(screen, g) > 1;
}

static bool not_in_map(const char *screen, const void *g)
{
	return count(screen, g) <= 1;
}

/* [0] shown, [1] not. */
static bool shows_without(const char *screen, const void *ctx)
{
	const char *const *s = ctx;
	return strstr(screen, s[0]) && !strstr(screen, s[1]);
}

/* The tab bar (the first row) shows no busy tab. */
static bool bar_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *row = strchr(screen, '\n');
	row = row ? strchr(row + 1, '\n') : NULL;
	if (!row)
		return false;
	row++;
	size_t n = strcspn(row, "\n");
	return !memchr(row, '*', n) && !memchr(row, '%', n);
}

/* [0] (a busy tab's bar label) and text right after [1] (the prompt). */
static bool streaming(const char *screen, const void *ctx)
{
	const char *const *s = ctx;
	const char *p = strstr(screen, s[1]);
	if (!strstr(screen, s[0]) || !p)
		return false;
	char c = p[strlen(s[1])]; /* rows end without blanks: a ' ' means text follows */
	return c && c != '\n';
}

/* ---- the steps ---- */

static void start(const char *args)
{
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app); /* left running by a failed step */
	CHECK(pty_start(&app, DIR, args, 30, 120));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar; screen:\n%s", app.screen);
}

/* A prompt in tab 1: its answer streams in after it until the context is full. */
static void test_stream(void)
{
	pty_send(&app, "Lily went to the park\r");
	const char *s[] = {"1:one *", "Lily went to the park"};
	CHECK_(pty_wait_ever(&app, streaming, s, WAIT), "no streaming:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, " tok, context", WAIT), "no finished answer:\n%s", app.screen);
}

/* The full tab: the gauge says so in the tab bar and the panel; one more
 * turn drops the oldest turn (context.overflow drop, the default), says so
 * in the tab, and answers; the conversation's text stays. */
static void test_context_full(void)
{
	const char *full[] = {"1:one ctx 1024/1024!", "1:one    [||||||||||] 1024 full", NULL};
	CHECK_(pty_wait(&app, all_of, full, WAIT), "no full gauge:\n%s", app.screen);
	pty_send(&app, "Once more\r");
	const char *dropped[] = {"[the 2 messages above have left the context]",
				 "[context full: 2 earlier messages dropped", NULL};
	CHECK_(pty_wait_ever(&app, all_of, dropped, WAIT), "no notice in the tab:\n%s", app.screen);
	const char *s[] = {"1:one *", "Once more"};
	CHECK_(pty_wait_ever(&app, streaming, s, WAIT), "no answer after the drop:\n%s", app.screen);
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	CHECK(pty_wait_str(&app, " tok, context", WAIT));
	pty_send(&app, PGUP10 PGUP10 PGUP10);
	CHECK(pty_wait_str(&app, "Lily went to the park", WAIT));
	pty_send(&app, PGDN10 PGDN10 PGDN10);
}

/* Tab 2 with the same system prompt: its prefill finds tab 1's blocks, so the
 * map shows pinned blocks referenced twice and the hit rate rises. */
static void test_second_tab(void)
{
	const char *ready[] = {"cache skipped", "0 running", NULL};
	CHECK(pty_wait(&app, all_of, ready, WAIT));
	above h = {"cache skipped ", figure(app.screen, "cache skipped ")};
	CHECK(h.value >= 0);
	pty_send(&app, "\033o"); /* Alt-o */
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	CHECK_(pty_wait(&app, figure_above, &h, WAIT), "the cache skipped %g tokens still", h.value);
	CHECK_(pty_wait(&app, in_map, "\u25a0", WAIT), "no pinned+shared block in the map:\n%s", app.screen);
}

/* Tabs 2 and 3 answer at once while we switch; each keeps its own text. */
static void test_switch_while_generating(void)
{
	pty_send(&app, "The sun was hot\r\033oA dog ran to the sea\r\0332");
	const char *both[] = {"2:tab2 *", "3:tab3 *", NULL};
	CHECK_(pty_wait_ever(&app, all_of, both, WAIT), "never saw both tabs busy:\n%s", app.screen);
	pty_send(&app, "\0333");
	CHECK(pty_wait_str(&app, "tab3>", WAIT));
	pty_send(&app, "\0332");
	CHECK(pty_wait_str(&app, "tab2>", WAIT));
	/* tab 3 goes on streaming behind tab 2: marked unread */
	const char *unread[] = {"3:tab3 * +", "tab2>", NULL};
	CHECK_(pty_wait_ever(&app, all_of, unread, WAIT), "no unread mark:\n%s", app.screen);
	CHECK_(pty_wait(&app, bar_idle, NULL, WAIT), "answers never ended:\n%s", app.screen);
	CHECK(pty_wait_str(&app, " tok, context", WAIT));
	/* each tab has its own turn (at its top, scrolled away by the answer) */
	const char *in2[] = {"The sun was hot", "A dog ran to the sea"};
	const char *in3[] = {"A dog ran to the sea", "The sun was hot"};
	pty_send(&app, PGUP10);
	CHECK_(pty_wait(&app, shows_without, in2, WAIT), "tab 2:\n%s", app.screen);
	pty_send(&app, PGDN10 "\0333" PGUP10);
	CHECK_(pty_wait(&app, shows_without, in3, WAIT), "tab 3:\n%s", app.screen);
	pty_send(&app, PGDN10 "\0332");
	CHECK(pty_wait_str(&app, "tab2>", WAIT));
}

static void test_resize(void)
{
	pty_resize(&app, 24, 90);
	const char *small[] = {"@size 90x24", "KV pool", NULL};
	CHECK_(pty_wait(&app, all_of, small, WAIT), "no reflow to 90x24:\n%s", app.screen);
	char row[512];
	pty_row(&app, 23, row, sizeof row);
	CHECK_(!strncmp(row, "tab2>", 5), "the input line is not the last row: '%s'", row);
	pty_row(&app, 0, row, sizeof row);
	CHECK_(strstr(row, "1:one") != NULL, "tab bar: '%s'", row);
	pty_resize(&app, 30, 120);
	CHECK(pty_wait_str(&app, "@size 120x30", WAIT));
}

/* Esc right after Enter stops the answer long before the context is full; a
 * busy tab asks before closing; an idle one closes, and the blocks only it
 * pinned (its own system prompt) become cached, not free. */
static void test_escape_and_close(void)
{
	pty_send(&app, "/new other\r");
	CHECK(pty_wait_str(&app, "4:tab4", WAIT));
	CHECK_(pty_wait(&app, in_map, "\u2593", WAIT), "tab 4's prompt is not pinned:\n%s", app.screen);
	pty_send(&app, "A bee\r\033");
	CHECK_(pty_wait_str(&app, " tok, cancelled", WAIT), "Esc did not stop:\n%s", app.screen);
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	pty_send(&app, "Two bees\r\033w");
	CHECK_(pty_wait_str(&app, "close it? (y/n)", WAIT), "no question:\n%s", app.screen);
	pty_send(&app, "n");
	CHECK(pty_wait_str(&app, "the tab stays open", WAIT));
	pty_send(&app, "\033");
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	const char *settled[] = {"0 waiting  0 running", NULL};
	CHECK(pty_wait(&app, all_of, settled, WAIT));
	above c = {"  cached ", figure(app.screen, "  cached ")};
	CHECK(c.value >= 0);
	pty_send(&app, "\033w");
	CHECK_(pty_wait_str(&app, "closed 'tab4'", WAIT), "not closed:\n%s", app.screen);
	CHECK_(pty_wait(&app, figure_above, &c, WAIT), "cached stayed at %g", c.value);
	CHECK_(pty_wait(&app, lacks, "4:tab4", WAIT), "tab 4 still there:\n%s", app.screen);
	CHECK_(pty_wait(&app, not_in_map, "\u2593", WAIT), "blocks still pinned:\n%s", app.screen);
}

/* Ctrl-D leaves; --resume brings the conversations back. */
static void test_resume(void)
{
	pty_send(&app, "\004");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	start(ARGS " --resume");
	const char *tabs[] = {"1:one", "2:tab2", "3:tab3", "tok, context", NULL};
	CHECK_(pty_wait(&app, all_of, tabs, WAIT), "tabs not resumed:\n%s", app.screen);
	for (int i = 1; i <= 3; i++) {
		static const char *const first[] = {"Lily went to the park", "The sun was hot",
						    "A dog ran to the sea"};
		char keys[16];
		snprintf(keys, sizeof keys, "\033%d", i);
		pty_send(&app, keys);
		pty_send(&app, PGUP10);
		CHECK_(pty_wait_str(&app, first[i - 1], WAIT), "tab %d not back:\n%s", i, app.screen);
		pty_send(&app, PGDN10);
	}
}

/* The other keys: F1 help, F2 panels, F3 regenerate, F4 fork, Ctrl-R in each
 * tab's own history, Ctrl-PgUp/PgDn, the mouse wheel, and /save. */
static void test_keys(void)
{
	pty_send(&app, "/new other\r");
	CHECK(pty_wait_str(&app, "4:tab4", WAIT));
	pty_send(&app, "\033OP");
	CHECK(pty_wait_str(&app, "key closes this help", WAIT));
	pty_send(&app, "x");
	CHECK(pty_wait(&app, lacks, "key closes this help", WAIT));
	pty_send(&app, "\033OQ");
	CHECK_(pty_wait(&app, lacks, "KV pool", WAIT), "F2 kept the panels:\n%s", app.screen);
	pty_send(&app, "\033OQ");
	CHECK(pty_wait_str(&app, "KV pool", WAIT));
	/* regenerate: the answer is replaced, not added to */
	pty_send(&app, "Honey\r\033");
	CHECK(pty_wait_str(&app, " tok, cancelled", WAIT));
	pty_send(&app, "\033OR");
	const char *again[] = {"4:tab4 *", "Honey", NULL};
	CHECK_(pty_wait_ever(&app, all_of, again, WAIT), "F3 did not answer again:\n%s", app.screen);
	pty_send(&app, "\033");
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	CHECK(pty_wait_str(&app, " tok, cancelled", WAIT));
	CHECK_(count(app.screen, "Honey") == 1 && count(app.screen, " tok, cancelled") == 1,
	       "F3 added instead of replacing:\n%s", app.screen);
	/* fork: a new tab with the same messages */
	pty_send(&app, "\033OS");
	const char *fork[] = {"5:tab4'", "tab4'>", "Honey", NULL};
	CHECK_(pty_wait(&app, all_of, fork, WAIT), "no fork:\n%s", app.screen);
	pty_send(&app, "\033w");
	CHECK(pty_wait(&app, lacks, "5:tab4'", WAIT));
	/* Ctrl-R searches the history */
	pty_send(&app, "\022Hon");
	CHECK_(pty_wait_str(&app, "(reverse-i-search)`Hon': Honey", WAIT), "no search:\n%s", app.screen);
	pty_send(&app, "\007");
	CHECK(pty_wait(&app, lacks, "reverse-i-search", WAIT));
	/* Ctrl-PgUp / Ctrl-PgDn: previous and next tab */
	pty_send(&app, "\033[5;5~");
	CHECK(pty_wait_str(&app, "tab3>", WAIT));
	pty_send(&app, "\022Hon"); /* the history is one for all tabs */
	CHECK_(pty_wait_str(&app, "(reverse-i-search)`Hon': Honey", WAIT), "tab 3 lacks tab 4's history:\n%s",
	       app.screen);
	pty_send(&app, "\007");
	CHECK(pty_wait(&app, lacks, "reverse-i-search", WAIT));
	/* the mouse wheel scrolls (xterm's SGR reports: button 64 up, 65 down) */
	pty_send(&app, "\033[<64;10;5M");
	CHECK_(pty_wait_str(&app, "more below", WAIT), "the wheel did not scroll:\n%s", app.screen);
	pty_send(&app, "\033[<65;10;5M\033[<65;10;5M");
	CHECK(pty_wait(&app, lacks, "more below", WAIT));
	pty_send(&app, "\033[6;5~");
	CHECK(pty_wait_str(&app, "tab4>", WAIT));
	/* wide and accented characters: the cursor counts columns, not bytes */
	pty_send(&app, "\u65e5\u672c \u00fcn\u00efc\u00f6d\u00e9\033[D");
	const char *wide[] = {"tab4> \u65e5\u672c \u00fcn\u00efc\u00f6d\u00e9", "@cursor 17,29", NULL};
	CHECK_(pty_wait(&app, all_of, wide, WAIT), "input line:\n%s", app.screen);
	pty_send(&app, "\005\025"); /* Ctrl-E, Ctrl-U: the line is empty again */
	CHECK(pty_wait_str(&app, "@cursor 6,29", WAIT));
	char row[256];
	pty_row(&app, 29, row, sizeof row);
	CHECK_(!strcmp(row, "tab4>"), "input line: '%s'", row);
	pty_send(&app, "/save " DIR "/tab4.md\r");
	CHECK(pty_wait_str(&app, "saved this tab to", WAIT));
	static char md[4096];
	slurp(DIR "/tab4.md", md, sizeof md);
	CHECK_(strstr(md, "# tab4\n") && strstr(md, "## You\n\nHoney\n"), "%s", md);
	pty_send(&app, "\033w");
	CHECK(pty_wait(&app, lacks, "4:tab4", WAIT));
}

/* kill -9 while an answer streams: the journal keeps the streamed text. */
static void test_kill(void)
{
	pty_send(&app, "/new\rKeep going\r");
	const char *s[] = {"4:tab6 *", "Keep going"};
	CHECK_(pty_wait_ever(&app, streaming, s, WAIT), "no streaming:\n%s", app.screen);
	pty_kill(&app);
	start(ARGS " --resume");
	const char *back[] = {"4:tab6", "interrupted", NULL};
	CHECK_(pty_wait(&app, all_of, back, WAIT), "lost the streamed answer:\n%s", app.screen);
	pty_send(&app, PGUP10);
	const char *kept[] = {"", "Keep going"};
	CHECK_(pty_wait(&app, streaming, kept, WAIT), "no text after the prompt:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	start(ARGS);
	test_stream();
	test_context_full();
	test_second_tab();
	test_switch_while_generating();
	test_resize();
	test_escape_and_close();
	test_resume();
	test_keys();
	test_kill();
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
