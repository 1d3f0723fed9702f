/* tests/test_demo.c: `pagechat demo` through a pseudo-terminal (tests/pty.h):
 * every caption of the tour in turn, and at each step what it is about on
 * the screen: the three tabs' block tables sharing the system prompt's
 * blocks (in the shared colour, "shared by 1,2,3"); the fork's table sharing
 * tab 1's; three answers to one prompt sharing it; a squeeze that preempts;
 * the figures equal to the engine's counts (the prefix cache's, against
 * `pagechat batch` on the same three prompts); any key ends the tour and the
 * chat answers as usual. The idle tabs' rows of pinned blocks and the
 * sharing figure against them; with a draft, the speed-up against no draft
 * against the engine's counters. `--script`, `--speed` out of range and no
 * terminal get checked too. Every check polls the frames the app drew, with a
 * timeout; nothing sleeps. Every step's figures against the snapshot's
 * counters, at three sizes: tests/test_demo_steps.c. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DIR "build/test-demo"
#define WAIT 60.0
#define PAIR_SHARED 'H' /* ui_int.h's PAIR_SHARED (17) as the dump writes it */

static pty_app app;
static run_result res;

/* A frame whose block tables have rows[] (labels) and a line "N blocks
 * shared by WHO (ref"; records N and whether rows[0]'s first block is in
 * the shared colour. */
typedef struct tables {
	const char *rows[9];
	const char *who;         /* " shared by 1,2,3 (ref" */
	const char *or_who;      /* this one first, if the frame has it (NULL: none) */
	const char *caption;     /* the frame also shows it (NULL: any frame) */
	int n_blocks;
	bool colored;
	long pinned, cached, prompt; /* step 1: the frame's figures */
} tables;

static bool has_tables(const char *frame, const void *ctx)
{
	tables *t = (tables *)ctx;
	const char *p = t->or_who ? strstr(frame, t->or_who) : NULL;
	if (!p)
		p = strstr(frame, t->who);
	if (!p || !strstr(frame, "block tables") || (t->caption && !strstr(frame, t->caption)))
		return false;
	int row = -1, col = 0;
	for (int i = 0; t->rows[i]; i++) {
		char lab[16];
		snprintf(lab, sizeof lab, "x %s  ", t->rows[i]);
		int r = pty_find_cell(frame, lab, &col);
		if (r < 0)
			return false;
		if (i == 0)
			row = r, t->colored = pty_frame_pair(frame, r, col + 6) == PAIR_SHARED; /* "x ", label 4 */
	}
	const char *line = p;
	while (line > frame && line[-1] != '\n' && line[-1] != 'x')
		line--;
	t->n_blocks = atoi(line);
	return row >= 0;
}

/* The number after label on the screen, -1 if absent. */
static long figure(const char *screen, const char *label)
{
	const char *s = strstr(screen, label);
	return s ? atol(s + strlen(label)) : -1;
}

/* The panel counts copies on write ("copy-on-write: N" or the compact
 * "copy-on-write N", N > 0), and a block table row shows one flashing
 * (reverse video, the shared colour). */
static bool cow_seen(const char *frame, const void *ctx)
{
	(void)ctx;
	const char *c = strstr(frame, "copy-on-write");
	if (!c || figure(c, c[13] == ':' ? "copy-on-write: " : "copy-on-write ") <= 0)
		return false;
	int col, row = pty_find_cell(frame, "block tables", &col);
	if (row < 0)
		return false;
	for (int y = row + 1; y < row + 14; y++)
		for (int x = col; x < col + 60; x++) {
			char pair;
			int f = pty_frame_attr(frame, y, x, &pair);
			if (f >= 0 && (f & 4) && pair == PAIR_SHARED)
				return true;
		}
	return false;
}

/* Step 5, the squeeze: the cached blocks when it began and the fewest
 * since (evicted to make room), and the preemptions counted. */
typedef struct squeeze {
	long first, least, preempted;
} squeeze;

static bool squeezed(const char *frame, const void *ctx)
{
	squeeze *q = (squeeze *)ctx;
	if (q->first < 0 && !strstr(frame, "demo 5/6"))
		return false;
	long n = figure(frame, "  cached ");
	if (q->first < 0)
		q->first = q->least = n;
	q->least = MIN(q->least, n);
	q->preempted = MAX(q->preempted, figure(frame, "x preempted "));
	return q->preempted > 0 && q->least < q->first;
}

/* Step 1 done: the three prompts settled. */
static bool step1_settled(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *p = strstr(screen, "cache skipped ");
	return strstr(screen, "demo 1/6") && strstr(screen, "0 waiting  0 running") &&
	       figure(screen, "x pinned ") >= 26 && p && figure(p, "/") >= 3 * 400; /* three prompts */
}

/* Step 1 done, and the three idle tabs' rows show the blocks they pin;
 * records the frame's figures. */
static bool step1_pins(const char *screen, const void *ctx)
{
	if (!step1_settled(screen, NULL) || !has_tables(screen, ctx))
		return false;
	tables *t = (tables *)ctx;
	const char *c = strstr(screen, "cache skipped ");
	t->pinned = figure(screen, "x pinned "), t->cached = figure(c, "cache skipped "), t->prompt = figure(c, "/");
	return true;
}

/* The system prompt three times through `batch`, one at a time: its
 * prompt and cached tokens equal the chat's (each tab prefills the prompt
 * once, the second and third after the first). */
static void check_against_batch(long cached, long prompt)
{
	run_pagechat(&res, "demo --script");
	CHECK_EQ_INT(res.status, 0);
	const char *sys = strstr(res.out, "system\t");
	CHECK(sys != NULL);
	if (!sys)
		return;
	sys += 7;
	size_t n = strcspn(sys, "\n");
	static char reqs[16384];
	size_t m = 0;
	for (int i = 0; i < 3; i++) {
		m += (size_t)snprintf(reqs + m, sizeof reqs - m, "{\"prompt\": \"");
		for (size_t k = 0; k < n; k++) {
			if (sys[k] == '"' || sys[k] == '\\')
				reqs[m++] = '\\';
			reqs[m++] = sys[k];
		}
		m += (size_t)snprintf(reqs + m, sizeof reqs - m, "\", \"max_tokens\": 1}\n");
	}
	CHECK(write_file(DIR "/reqs.jsonl", reqs, m) == 0);
	run_pagechat(&res, "batch -m ../shared/models/stories260K.gguf -f " DIR "/reqs.jsonl --parallel 1 "
			   "--block-size 16 --temp 0");
	CHECK_(res.status == 0, "%s", res.errout);
	const char *s = strstr(res.out, "\"summary\"");
	CHECK(s != NULL);
	if (!s)
		return;
	long bp = figure(s, "\"prompt_tokens\": "), bc = figure(s, "\"cached_tokens\": ");
	CHECK_(bp == prompt && bc == cached, "chat: %ld of %ld prompt tokens cached; batch: %ld of %ld", cached,
	       prompt, bc, bp);
}

static void start(const char *args)
{
	CHECK(pty_start(&app, DIR, args, 40, 120));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar; screen:\n%s", app.screen);
}

static void test_tour(void)
{
	start("demo -m ../shared/models/stories260K.gguf --speed 4");
	/* 1: the idle tabs' rows: the system prompt's pinned blocks, shared */
	tables t1 = {.rows = {"1", "2", "3"}, .who = " shared by 1,2,3 (ref"};
	CHECK_(pty_wait_ever(&app, step1_pins, &t1, WAIT), "step 1 never settled with pin rows:\n%s", app.screen);
	CHECK_(t1.n_blocks == t1.pinned && t1.colored, "step 1: %d blocks shared (pinned %ld), colour %d", t1.n_blocks,
	       t1.pinned, t1.colored);
	check_against_batch(t1.cached, t1.prompt);
	/* 2: three tabs answer, their tables share the system prompt's blocks */
	tables t2 = {.rows = {"1", "2", "3"}, .who = " shared by 1,2,3 (ref", .caption = "demo 2/6"};
	CHECK_(pty_wait_ever(&app, has_tables, &t2, WAIT), "step 2: no shared tables:\n%s", app.screen);
	CHECK_(t2.n_blocks >= 26 && t2.colored, "step 2: %d blocks shared, colour %d", t2.n_blocks, t2.colored);
	CHECK(pty_wait_ever(&app, has_str, "demo 2/6", WAIT));
	/* 3: the fork shares tab 1's blocks (the system prompt's with the idle
	 * tabs' pins too when their rows fit) */
	tables t3 = {.rows = {"1", "4"}, .or_who = " shared by 1,2,3,4 (ref", .who = " shared by 1,4 (ref"};
	CHECK_(pty_wait_ever(&app, has_tables, &t3, WAIT), "step 3: no fork sharing:\n%s", app.screen);
	CHECK_(t3.n_blocks >= 26, "step 3: %d blocks shared", t3.n_blocks);
	CHECK(pty_wait(&app, has_str, "4:one'", WAIT));
	/* the two write the block they shared: copies on write, counted and flashed */
	CHECK_(pty_wait_ever(&app, cow_seen, NULL, WAIT), "step 3: no copy on write:\n%s", app.screen);
	/* 4: three answers to one prompt */
	tables t4 = {.rows = {"2a", "2b", "2c"}, .who = " shared by 2a-2c (ref"};
	CHECK_(pty_wait_ever(&app, has_tables, &t4, WAIT), "step 4: no three answers:\n%s", app.screen);
	CHECK_(pty_wait_ever(&app, has_str, "continuing with answer 2 of 3", WAIT), "no pick:\n%s", app.screen);
	/* 5: the squeeze preempts */
	squeeze q = {.first = -1, .least = -1};
	CHECK_(pty_wait_ever(&app, squeezed, &q, WAIT), "step 5: cached %ld -> at least %ld, preempted %ld:\n%s",
	       q.first, q.least, q.preempted, app.screen);
	CHECK_(pty_wait_ever(&app, has_str, "demo 6/6", WAIT), "%s", app.screen);
	CHECK_(pty_wait_ever(&app, has_str, "the tour is over", WAIT), "%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* The input line (the screen's last row) shows text typed whole. */
static bool input_has(const char *screen, const void *ctx)
{
	const char *want = ctx, *last = strstr(screen, "\n@attr");
	if (!last)
		return false;
	const char *row = last;
	while (row > screen && row[-1] != '\n')
		row--;
	char line[512];
	snprintf(line, sizeof line, "%.*s", (int)MIN((size_t)(last - row), sizeof line - 1), row);
	const char *p = strstr(line, want);
	return p && p > line && (p[-1] == ' ' || p[-1] == '>');
}

/* F1 opens the help and the tour goes on; F1 again shows what the figures
 * mean; another key closes the help, still touring (#40 item 3). A key in
 * the middle then stops the tour, and is typed, not swallowed ("hello",
 * not "ello"); the chat then answers as usual. */
static void test_take_over(void)
{
	start("demo -m ../shared/models/stories260K.gguf --speed 2");
	CHECK(pty_wait_ever(&app, has_str, "demo 1/6", WAIT));
	pty_send(&app, "\033OP"); /* F1 */
	CHECK_(pty_wait_str(&app, "Alt-o", WAIT), "no help:\n%s", app.screen);
	pty_send(&app, "\033OP");
	CHECK_(pty_wait_str(&app, "The side panel's figures", WAIT), "F1 again: no figures:\n%s", app.screen);
	CHECK_(!strstr(app.screen, "the tour stopped"), "F1 ended the tour:\n%s", app.screen);
	pty_send(&app, "q"); /* closes the help only */
	CHECK_(pty_wait(&app, pty_shows_without, (const char *[]){"demo ", "The side panel's figures"}, WAIT),
	       "the help stayed, or the tour ended:\n%s", app.screen);
	CHECK_(!strstr(app.screen, "the tour stopped"), "closing the help ended the tour:\n%s", app.screen);
	pty_send(&app, "hello");
	CHECK_(pty_wait_str(&app, "the tour stopped", WAIT), "%s", app.screen);
	CHECK_(pty_wait(&app, input_has, "hello", WAIT), "the key that ended the tour was lost:\n%s", app.screen);
	pty_send(&app, "\025Lily ran home\r");
	const char *answered[] = {"Lily ran home", " tok, length", NULL};
	CHECK_(pty_wait(&app, pty_all_of, answered, WAIT), "no answer after the tour:\n%s", app.screen);
	CHECK_(!strstr(app.screen, "demo 6/6"), "the tour went on:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* The answer has finished, and the panel's snapshot is from after it: idle
 * with a speed-up figure (the panel's snapshot may lag the chat's events). */
static bool answered_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	return strstr(screen, " tok, ") && strstr(screen, "TTFT") && strstr(screen, "0 waiting  0 running") &&
	       strstr(screen, "x vs no draft");
}

/* With a draft the panel shows the speed-up against no draft: /snapshot
 * writes it with the engine's counters of decode steps with and without
 * drafts (one in 16 runs without); the figure equals their recomputation,
 * on the screen too (idle: the counters no longer move). */
static void test_draft_speedup(void)
{
	CHECK(pty_start(&app, DIR, "--draft ../shared/models/stories260K.gguf", 60, 200));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar; screen:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, "speed-up -  (no drafted step yet)", WAIT), "%s", app.screen);
	pty_send(&app, "Once upon a time\r");
	CHECK_(pty_wait(&app, answered_idle, NULL, WAIT), "no answer:\n%s", app.screen);
	pty_send(&app, "/snapshot " DIR "/draft.txt\r");
	CHECK_(pty_wait_str(&app, "wrote the pool's snapshot to", WAIT), "%s", app.screen);
	static char snap[1 << 16];
	slurp(DIR "/draft.txt", snap, sizeof snap);
	const char *a = strstr(snap, "decode steps with drafts: "), *b = strstr(snap, "decode steps without: ");
	long long ds = 0, dt = 0, dus = 0, ps = 0, pt = 0, pus = 0;
	CHECK_(a && b && sscanf(a, "decode steps with drafts: %lld steps, %lld tokens, %lld us", &ds, &dt, &dus) == 3 &&
	       sscanf(b, "decode steps without: %lld steps, %lld tokens, %lld us", &ps, &pt, &pus) == 3,
	       "no counters in the snapshot:\n%s", snap);
	/* one tab: a plain step takes one token; 16 steps at most between plain ones */
	CHECK_(ds > 0 && ps > 0 && pt == ps && ds <= 15 * ps && dus > 0 && pus > 0,
	       "drafted %lld steps %lld tok %lld us, plain %lld steps %lld tok %lld us", ds, dt, dus, ps, pt, pus);
	double x = ((double)dt / (double)dus) / ((double)pt / (double)pus);
	char want[96];
	snprintf(want, sizeof want, "speed-up %.2fx vs no draft%s\n", x, x < 1 ? ": slower" : "");
	CHECK_(strstr(snap, want) != NULL, "want '%s' in the snapshot:\n%s", want, snap);
	want[strlen(want) - 1] = '\0';
	CHECK_(strstr(app.screen, want) != NULL, "want '%s' on the screen:\n%s", want, app.screen);
	CHECK_(strstr(app.screen, "speed   ") != NULL, "no speed-up history:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

static void test_cli(void)
{
	run_pagechat(&res, "demo --script");
	CHECK(res.status == 0 && strstr(res.out, "caption\t1\t0\tdemo 1/6") && strstr(res.out, "fork\t1\t24\t"));
	run_pagechat(&res, "demo --speed 0");
	CHECK_(res.status == 2 && strstr(res.errout, "--speed: 0 is out of range"), "%s", res.errout);
	run_pagechat(&res, "demo");
	CHECK_(res.status == 2 && strstr(res.errout, "the tour needs a terminal"), "%s", res.errout);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	test_cli();
	test_tour();
	test_take_over();
	test_draft_speedup();
	return TEST_DONE();
}
