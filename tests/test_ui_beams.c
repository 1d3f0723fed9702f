/* tests/test_ui_beams.c: several answers to one turn in the chat, through a
 * pseudo-terminal (tests/pty.h) on the demo model: `/n 3` streams three
 * sampled answers whose block tables (the panel under the map) share the
 * prompt's blocks, drawn in the shared colour and counted with their
 * refcounts; the three are shown numbered, `/pick 2` continues with the
 * second (its text stays, the others go); `/beams 3` runs beam search the
 * same way and shows each beam's log-probability; bad arguments get one
 * line. Every check polls the screen or the log of frames with a timeout.
 * Answers run until the 1024-token context is full, so frames showing the
 * sequences at work are drawn long before they end. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DIR "build/test-ui-beams"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 60.0
#define PAIR_SHARED 'H' /* ui_int.h's PAIR_SHARED (17) as the dump writes it */

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 1024\n"
	"kv_cache: {block_size: 16, pool_blocks: 700}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"system_prompts:\n"
	"  story: Once upon a time, in a little town by the sea, there lived a girl named\n"
	"    Lily. She loved to play on the beach with her dog Max, and every morning they\n"
	"    looked for shells in the sand.\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;

static bool lacks(const char *screen, const void *s)
{
	return !strstr(screen, s);
}

typedef struct above {
	const char *label;
	int value;
} above;

/* The number after label exceeds value. */
static bool figure_above(const char *screen, const void *ctx)
{
	const above *a = ctx;
	const char *p = strstr(screen, a->label);
	return p && atoi(p + strlen(a->label)) > a->value;
}

typedef struct shares {
	const char *who;         /* " shared by 1a-1c (ref " (a tab's rows as a
	                            range): [11] is the tab */
	int min_blocks;          /* a frame must show at least this many shared */
	int n_blocks, refcount;  /* read from the frame that matched */
	bool colored;            /* 1a's first block in the shared colour */
	int map_shared;          /* cells of the pool map in the shared colour */
} shares;

/* A frame with rows 1a..1c and a "N blocks shared by ..." line naming all
 * three; records N, the refcount and the colour of 1a's first block. */
static bool sharing(const char *frame, const void *ctx)
{
	shares *s = (shares *)ctx;
	const char *p = strstr(frame, s->who);
	int col;
	char a[16], b[16], c[16];
	snprintf(a, sizeof a, "x %.1sa  ", s->who + 11);
	snprintf(b, sizeof b, "x %.1sb  ", s->who + 11);
	snprintf(c, sizeof c, "x %.1sc  ", s->who + 11);
	int row = pty_find_cell(frame, a, &col);
	if (!p || row < 0 || !strstr(frame, b) || !strstr(frame, c) ||
	    !strstr(frame, "block tables"))
		return false;
	const char *line = p;
	while (line > frame && line[-1] != '\n')
		line--;
	const char *num = p; /* the line's start in the panel, after its border "x " */
	while (num - 2 > line && !(num[-1] == ' ' && num[-2] == 'x'))
		num--;
	s->n_blocks = atoi(num);
	s->refcount = atoi(p + strlen(s->who));
	if (s->n_blocks < s->min_blocks)
		return false; /* a frame drawn while the tables were still being built */
	/* "x 1a  ": the panel's border, the row's label, then its blocks */
	s->colored = pty_frame_pair(frame, row, col + 6) == PAIR_SHARED;
	/* the pool map draws those blocks once each, in the same colour */
	int mc, mrow = pty_find_cell(frame, "KV pool", &mc);
	s->map_shared = 0;
	for (int y = mrow + 1; mrow >= 0 && y < mrow + 3; y++)
		for (int x = mc; x < mc + 38; x++)
			s->map_shared += pty_frame_pair(frame, y, x) == PAIR_SHARED;
	return true;
}

static void start(void)
{
	CHECK(pty_start(&app, DIR, ARGS, 40, 130));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar; screen:\n%s", app.screen);
	above pinned = {"pinned ", 0};
	const char *idle[] = {"0 waiting  0 running", NULL};
	CHECK_(pty_wait(&app, figure_above, &pinned, WAIT) && pty_wait(&app, pty_all_of, idle, WAIT),
	       "the system prompt never settled:\n%s", app.screen);
}

/* The number of blocks the system prompt's pins take (the pool panel's
 * "pinned N"). */
static int pinned_blocks(void)
{
	const char *p = strstr(app.screen, "pinned ");
	return p ? atoi(p + 7) : -1;
}

static void test_n(void)
{
	int pinned = pinned_blocks();
	CHECK_(pinned >= 3, "the system prompt pins %d blocks:\n%s", pinned, app.screen);
	pty_send(&app, "/n 3 Lily saw a cat\r");
	shares s = {.who = " shared by 1a-1c (ref ", .min_blocks = pinned};
	CHECK_(pty_wait_ever(&app, sharing, &s, WAIT), "no three rows sharing blocks:\n%s", app.screen);
	/* the system prompt's blocks at least, read by the three and pinned */
	CHECK_(s.n_blocks >= pinned, "%d blocks shared, the prompt pins %d", s.n_blocks, pinned);
	CHECK_(s.refcount >= 3, "refcount %d for blocks three sequences read", s.refcount);
	CHECK_(s.colored, "1a's first block is not in the shared colour");
	CHECK_(s.map_shared >= 1, "%d map cells in the shared colour", s.map_shared); /* a cell holds several blocks here */
	/* /snapshot while they run: the tables with the blocks' refcounts */
	pty_send(&app, "/snapshot " DIR "/run.txt\r");
	CHECK(pty_wait_str(&app, "wrote the pool's snapshot to", WAIT));
	static char snap[1 << 16];
	slurp(DIR "/run.txt", snap, sizeof snap);
	CHECK_(strstr(snap, "KV pool, stories260K.gguf") && strstr(snap, "cache skipped ") &&
	       strstr(snap, "    0 "), "%s", snap);
	const char *tables = strstr(snap, "block tables (block:refcount)");
	if (tables) { /* the answers may have ended: then there are none to show */
		int rows = 0;
		for (const char *p = tables; (p = strstr(p, "\n1:one #")); p++)
			rows++;
		CHECK_(rows == 3, "%d rows:\n%s", rows, snap);
	}
	const char *done[] = {"[3] ", "/pick 1..3", NULL};
	CHECK_(pty_wait(&app, pty_all_of, done, WAIT), "no three answers:\n%s", app.screen);
	/* each answer's first words (scrolled to), then pick the second: the
	 * saved chat holds it and not the others */
	char words[3][32];
	for (int k = 2; k >= 0; k--) { /* scrolling up from the last */
		char label[8];
		snprintf(label, sizeof label, "[%d] ", k + 1);
		for (int i = 0; i < 200 && !strstr(app.screen, label); i++) {
			pty_send(&app, "\033[<64;10;5M"); /* the wheel: 3 lines up */
			pty_wait_str(&app, label, 0.1);
		}
		const char *p = strstr(app.screen, label);
		CHECK_(p != NULL, "no %s:\n%s", label, app.screen);
		if (!p)
			return;
		CHECK_(p[4] != ' ', "answer %d is shown with the model's leading blank (#40):\n%s", k + 1, app.screen);
		p += 4;
		while (*p == ' ')
			p++;
		snprintf(words[k], sizeof words[k], "%.*s", (int)MIN(strcspn(p, "\n"), (size_t)24), p);
	}
	pty_send(&app, "\033[<64;10;5M\033[<64;10;5M");
	CHECK_(pty_wait_str(&app, "3 sampled answers (temperature 0.8)", WAIT), "%s", app.screen);
	pty_send(&app, "/pick 2\r");
	CHECK_(pty_wait_str(&app, "continuing with answer 2 of 3", WAIT), "%s", app.screen);
	/* a picture of the pool: a square per block */
	pty_send(&app, "/snapshot " DIR "/pool.svg\r");
	CHECK(pty_wait_str(&app, "wrote the pool's snapshot to /", WAIT) &&
	      pty_wait_str(&app, DIR "/pool.svg", WAIT)); /* the whole path (#40) */
	static char svg[1 << 18];
	slurp(DIR "/pool.svg", svg, sizeof svg);
	int rects = 0;
	for (const char *p = svg; (p = strstr(p, "<rect x=")); p++)
		rects++;
	CHECK_(!strncmp(svg, "<svg ", 5) && rects == 700 && strstr(svg, "</svg>"), "%d squares", rects);
	CHECK_(pty_wait(&app, lacks, "[2] ", WAIT), "the answers are still shown:\n%s", app.screen);
	pty_send(&app, "/save " DIR "/picked.md\r");
	CHECK(pty_wait_str(&app, "saved this tab to", WAIT));
	static char md[1 << 16];
	slurp(DIR "/picked.md", md, sizeof md);
	CHECK_(strstr(md, words[1]) != NULL, "answer 2 (%s) not in the chat:\n%s", words[1], md);
	CHECK_(strcmp(words[0], words[1]) == 0 || !strstr(md, words[0]), "answer 1 (%s) kept:\n%s", words[0], md);
	CHECK_(strcmp(words[2], words[1]) == 0 || !strstr(md, words[2]), "answer 3 (%s) kept:\n%s", words[2], md);
}

static void test_beams(void)
{
	pty_send(&app, "\033o"); /* a new tab (Alt-o): the first one's context is full */
	CHECK(pty_wait_str(&app, "2:tab2", WAIT));
	pty_send(&app, "/beams 3\r");
	CHECK_(pty_wait_str(&app, "beam search: the 3 best beams", WAIT), "%s", app.screen);
	pty_send(&app, "The dog ran\r");
	shares s = {.who = " shared by 2a-2c (ref "};
	CHECK_(pty_wait_ever(&app, sharing, &s, WAIT), "no three beams sharing blocks:\n%s", app.screen);
	CHECK_(s.refcount >= 3 && s.colored, "refcount %d, shared colour %d", s.refcount, s.colored);
	const char *done[] = {"[3] ", "logprob -", " ms per beam step; /pick 1..3", NULL};
	CHECK_(pty_wait(&app, pty_all_of, done, WAIT), "no three beams:\n%s", app.screen);
	/* F7 highlights the second: its label bold and reversed, the others
	 * bold as before (#40 item 9: it lost its bold) */
	pty_send(&app, "\033[18~");
	CHECK_(pty_wait_str(&app, "answer 2 highlighted", WAIT), "%s", app.screen);
	for (int i = 0; i < 200 && !(strstr(app.screen, "[2] ") && strstr(app.screen, "[3] ")); i++) {
		pty_send(&app, "\033[<64;10;5M"); /* the wheel: 3 lines up, to the labels */
		pty_wait_str(&app, "[2] ", 0.1);
	}
	int c2, c3, r2 = pty_find_cell(app.screen, "[2] ", &c2), r3 = pty_find_cell(app.screen, "[3] ", &c3);
	char pair;
	int a2 = r2 >= 0 ? pty_frame_attr(app.screen, r2, c2, &pair) : -1;
	int a3 = r3 >= 0 ? pty_frame_attr(app.screen, r3, c3, &pair) : -1;
	CHECK_(a2 >= 0 && (a2 & 1) && (a2 & 4), "the highlighted [2]: flags %d\n%s", a2, app.screen);
	CHECK_(a3 >= 0 && (a3 & 1) && !(a3 & 4), "[3]: flags %d", a3);
	pty_send(&app, "/pick\r");
	CHECK_(pty_wait_str(&app, "continuing with answer 2 of 3", WAIT), "%s", app.screen);
}

static void test_errors(void)
{
	pty_send(&app, "/n 99\r");
	CHECK_(pty_wait_str(&app, "usage: /n N [PROMPT] with N in 1..16", WAIT), "%s", app.screen);
	pty_send(&app, "/beams x\r");
	CHECK_(pty_wait_str(&app, "usage: /beams N [PROMPT] with N in 0..16", WAIT), "%s", app.screen);
	pty_send(&app, "/pick 2\r");
	CHECK_(pty_wait_str(&app, "no answers to pick from", WAIT), "%s", app.screen);
	pty_send(&app, "/snapshot\r");
	CHECK_(pty_wait_str(&app, "usage: /snapshot FILE", WAIT), "%s", app.screen);
	pty_send(&app, "/snapshot " DIR "\r");
	CHECK_(pty_wait_str(&app, DIR, WAIT) && pty_wait(&app, lacks, "wrote the pool's", WAIT), "%s", app.screen);
}

/* Beams that cannot fit (#42 finding 6): `/beams 16` on an 8-block pool.
 * The engine refused the request with one FINISH where the tab waits for
 * one per beam, and the tab stayed busy ("still answering") for good. Now
 * the refusal says the arithmetic (the status line keeps the engine's
 * reason when every answer failed), and the tab takes the next turn. */
static void test_beams_too_wide(void)
{
	static pty_app small;
	static const char cfg[] =
		"model: ../shared/models/stories260K.gguf\n"
		"context: 128\n"
		"kv_cache: {block_size: 16, pool_blocks: 8}\n"
		"sampling: {temperature: 0, max_tokens: 8, seed: 7}\n"
		"tabs:\n"
		"  - name: one\n"
		"ui: {refresh_ms: 50}\n";
	CHECK(system("rm -rf " DIR "/small && mkdir -p " DIR "/small/home") == 0);
	CHECK(write_file(DIR "/small/ui.yaml", cfg, strlen(cfg)) == 0);
	CHECK(pty_start(&small, DIR "/small", "--config " DIR "/small/ui.yaml", 40, 130));
	CHECK_(pty_wait_str(&small, "1:one", WAIT), "no tab bar; screen:\n%s", small.screen);
	pty_send(&small, "/beams 16\r");
	CHECK_(pty_wait_str(&small, "beam search: the 16 best beams", WAIT), "%s", small.screen);
	pty_send(&small, "The dog ran\r");
	CHECK_(pty_wait_str(&small, "but the pool has 8", WAIT), "no refusal with the arithmetic:\n%s", small.screen);
	pty_send(&small, "/beams 2\r");
	CHECK_(pty_wait_str(&small, "beam search: the 2 best beams", WAIT), "%s", small.screen);
	pty_send(&small, "The cat\r");
	CHECK_(pty_wait_str(&small, "-- the 2 best beams", WAIT) && pty_wait_str(&small, "/pick 1..2 continues", WAIT),
	       "the tab did not take the next turn:\n%s", small.screen);
	pty_send(&small, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&small, WAIT), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	start();
	test_n();
	test_beams();
	test_errors();
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	test_beams_too_wide();
	return TEST_DONE();
}
