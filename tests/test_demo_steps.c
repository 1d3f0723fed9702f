/* tests/test_demo_steps.c: `pagechat demo` as a newcomer sees it (#40), at
 * 80x24, 120x40 and 200x60, through a pseudo-terminal (tests/pty.h).
 *
 * With PAGECHAT_SCREEN_DUMP the tour records the end of each step: the
 * screen (DUMP.stepN.screen) and the snapshot it was drawn from, with the
 * counters behind every figure (DUMP.stepN.txt, /snapshot's text). For each
 * step and size: the caption is on the screen whole; the block tables, the
 * words "copy-on-write" and "waste" are there with non-zero figures (the
 * copies from step 4 on, where /n 3 writes its shared last block); every figure line is
 * recomputed here from the counters and found in the snapshot and on the
 * screen (long or compact form); "sharing saves" equals apart - held of the
 * snapshot's block tables, and so does the panel's "hold ...; apart: ..."
 * line; the map keeps one scale through the tour. The squeeze runs in the
 * tab on screen and /pick works there. The demo leaves the user's session
 * and saved chats as they were, and keeps its own apart. Each caption's
 * keys are rows of docs/usage.md's key table, with the word after the key
 * in that row. On a chat model the tabs ask the help desk's questions. A
 * long status message is shown whole. Nothing sleeps: every wait polls with a timeout. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <dirent.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TDIR "build/test-demo-steps"
#define WAIT 90.0
#define N_STEPS 6

static pty_app app;
static run_result res;
static char captions[N_STEPS][400];

/* The captions, from --script. */
static void read_captions(void)
{
	run_pagechat(&res, "demo --script");
	CHECK_EQ_INT(res.status, 0);
	int n = 0;
	for (const char *p = strstr(res.out, "caption\t"); p && n < N_STEPS; p = strstr(p + 1, "\ncaption\t")) {
		const char *t = strchr(p + 1, '\t');
		t = t ? strchr(t + 1, '\t') : NULL;
		t = t ? strchr(t + 1, '\t') : NULL;
		if (!t)
			break;
		size_t len = strcspn(t + 1, "\t\n");
		snprintf(captions[n++], sizeof captions[0], "%.*s", (int)len, t + 1);
	}
	CHECK_EQ_INT(n, N_STEPS);
}

/* ---- the screen's parts ---- */

/* Row y of a dump (0: the top row) into out. */
static void dump_row(const char *screen, int y, char *out, size_t cap)
{
	const char *s = screen;
	for (int skip = 0; skip < 2 + y && s; skip++) {
		s = strchr(s, '\n');
		if (s)
			s++;
	}
	size_t n = s ? strcspn(s, "\n") : 0;
	if (s && !strncmp(s, "@attr", 5))
		n = 0;
	snprintf(out, cap, "%.*s", (int)MIN(n, cap - 1), s ? s : "");
}

/* The bytes of s from character col on ("" past its end). */
static const char *from_col(const char *s, int col)
{
	for (int c = 0; *s && c < col; c++) {
		s++;
		while (((unsigned char)*s & 0xc0) == 0x80)
			s++;
	}
	return s;
}

static int panel_cols(int cols)
{
	return MAX(36, MIN(60, cols * 32 / 100)); /* ui_panel.c's panel_width */
}

/* The chat's rows (left of the panel, from column 1) joined by blanks. */
static void chat_text(const char *screen, int rows, int cols, char *out, size_t cap)
{
	int w = cols - panel_cols(cols);
	size_t n = 0;
	out[0] = '\0';
	for (int y = 1; y < rows - 2; y++) {
		char row[4096];
		dump_row(screen, y, row, sizeof row);
		const char *a = from_col(row, 1), *b = from_col(row, w - 1);
		while (b > a && b[-1] == ' ')
			b--;
		n += (size_t)snprintf(out + n, cap - n, "%.*s ", (int)(b - a), a);
		if (n >= cap)
			break;
	}
}

/* The panel's lines, a wrapped line's rows (indented by two) joined. */
static int panel_lines(const char *screen, int rows, int cols, char (*out)[160], int cap)
{
	int x = cols - panel_cols(cols) + 2, n = 0;
	for (int y = 1; y < rows - 2; y++) {
		char row[4096];
		dump_row(screen, y, row, sizeof row);
		const char *p = from_col(row, x);
		if (!strncmp(p, "  ", 2) && p[2] != ' ' && n > 0) { /* a wrapped line goes on */
			size_t m = strlen(out[n - 1]);
			snprintf(out[n - 1] + m, 160 - m, " %s", p + 2);
		} else if (*p && n < cap) {
			snprintf(out[n++], 160, "%s", p);
		}
	}
	return n;
}

static bool has_line(char (*lines)[160], int n, const char *want)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(lines[i], want))
			return true;
	return false;
}

/* ---- the snapshot's counters and tables ---- */

static double counter(const char *snap, const char *name)
{
	char key[64];
	snprintf(key, sizeof key, " %s=", name);
	const char *p = strstr(snap, key);
	CHECK_(p != NULL, "no counter %s", name);
	return p ? atof(p + strlen(key)) : -1;
}

static long long icounter(const char *snap, const char *name)
{
	return (long long)counter(snap, name);
}

/* The snapshot's block tables: the lengths added up, the distinct blocks,
 * the tables and their tokens. */
typedef struct tables_sum {
	long long apart, held, tokens;
	int n;
} tables_sum;

static tables_sum sum_tables(const char *snap)
{
	tables_sum t = {0};
	static char seen[1 << 16];
	memset(seen, 0, sizeof seen);
	const char *p = strstr(snap, "\nblock tables (block:refcount)\n");
	if (!p)
		return t;
	p = strchr(p + 1, '\n') + 1;
	while (*p && *p != '\n' && strncmp(p, "counters:", 9)) {
		const char *end = strchr(p, '\n'), *q = strstr(p, " tokens:");
		if (!end)
			break;
		const char *c = q;
		while (c > p && c[-1] != ' ')
			c--;
		t.tokens += atoll(c);
		t.n++;
		for (q = q ? q + 8 : end; q < end;) {
			int id = atoi(q + 1);
			t.apart++;
			if (id >= 0 && id < (int)sizeof seen && !seen[id])
				seen[id] = 1, t.held++;
			q = strchr(q + 1, ' ');
			if (!q || q > end)
				break;
		}
		p = end + 1;
	}
	return t;
}

/* The figure lines recomputed from the counters: each long form, each
 * compact one (ui/poolmap.c's formats), minor ones flagged. */
typedef struct figs {
	char line[16][128], compact[16][96];
	bool minor[16];
	int n;
} figs;

static const char *pl(long long n)
{
	return n == 1 ? "" : "s";
}

static void recompute(const char *snap, figs *f, tables_sum *t)
{
	long long nb = icounter(snap, "n_blocks"), bt = icounter(snap, "block_tokens"), ctx = icounter(snap, "n_ctx");
	long long used = icounter(snap, "blocks_used"), cached = icounter(snap, "blocks_cached");
	long long freeb = icounter(snap, "blocks_free") - cached, pinned = icounter(snap, "blocks_pinned");
	long long filled = icounter(snap, "slots_filled"), alloc = icounter(snap, "slots_alloc");
	long long prompt = icounter(snap, "prompt_tokens"), hit = icounter(snap, "cached_tokens");
	long long run = icounter(snap, "n_running"), wait = icounter(snap, "n_waiting");
	long long pre = icounter(snap, "preemptions"), fin = icounter(snap, "finished");
	long long cow = icounter(snap, "cow_copies");
	double w = counter(snap, "waste"), wc = counter(snap, "waste_contig"), kvx = counter(snap, "kv_vs_f16");
	double ptps = counter(snap, "prefill_tps"), dtps = counter(snap, "decode_tps");
	const char *types = strstr(snap, " kv_types=");
	char ty[32] = "";
	if (types)
		snprintf(ty, sizeof ty, "%.*s", (int)strcspn(types + 10, " \n"), types + 10);
	*t = sum_tables(snap);
	memset(f->minor, 0, sizeof f->minor);
	int n = 0;
#define L(...) snprintf(f->line[n], sizeof f->line[0], __VA_ARGS__)
#define C(...) snprintf(f->compact[n++], sizeof f->compact[0], __VA_ARGS__)
	f->minor[n] = true, L("blocks %lld x %lld tokens", nb, bt), C("blocks %lld x %lld tok", nb, bt);
	f->minor[n] = true, L("KV %s: %.2fx the tokens of f16", ty, kvx), C("KV %s: %.2fx f16's tok", ty, kvx);
	L("used %lld  cached %lld  free %lld", used, cached, freeb), C("used %lld cached %lld free %lld", used, cached,
									 freeb);
	L("pinned %lld block%s  held %lld tok", pinned, pl(pinned), filled), C("pinned %lld  held %lld tok", pinned,
									      filled);
	long long saved = t->apart - t->held;
	if (saved > 0) {
		double pct = 100.0 * (double)saved / (double)nb;
		L("sharing saves %lld tokens = %lld block%s (%.1f%% of the pool)", saved * bt, saved, pl(saved), pct);
		C("sharing saves %lld block%s (%.1f%%)", saved, pl(saved), pct);
	} else {
		L("sharing saves nothing now"), C("sharing saves nothing now");
	}
	L("cache skipped %lld/%lld prompt tok", hit, prompt), C("cache skipped %lld/%lld tok", hit, prompt);
	/* the waste: now, else the last answers', else the pins' */
	const char *rem = strstr(snap, "remembered: ");
	bool live = run > 0 && alloc > 0, last = !live && rem && counter(rem, "has_busy") > 0;
	const char *when = "", *brief = "";
	if (last)
		w = counter(rem, "waste"), wc = counter(rem, "waste_contig"), when = " (last answers)", brief = " (last)";
	else if (!live)
		w = 0, wc = 1.0 - (double)t->tokens / ((double)t->n * (double)ctx), when = " (pinned prompts)",
		brief = " (pins)";
	L("waste%s: paged %.1f%% of held slots; %.1f%% if each reserved %lld tok", when, 100 * w, 100 * wc, ctx);
	C("waste%s %.1f%%, reserved %.0f%%", brief, 100 * w, 100 * wc);
	char lastcow[48] = "";
	int cb = rem ? (int)counter(rem, "cow_block") : -1, ct = rem ? (int)counter(rem, "cow_tab") : 0;
	if (cow > 0 && cb >= 0)
		snprintf(lastcow, sizeof lastcow, ct > 0 ? " (last #%d, tab %d)" : " (last #%d)", cb, ct);
	L("copy-on-write: %lld block%s copied%s", cow, pl(cow), lastcow), C("copy-on-write %lld%s", cow, lastcow);
	L("tok/s  prefill %.0f  decode %.0f", ptps, dtps), C("tok/s prefill %.0f decode %.0f",
										 ptps, dtps);
	L("queue %lld waiting  %lld running", wait, run), C("queue %lld waiting  %lld running", wait, run);
	L("preempted %lld  finished %lld", pre, fin), C("preempted %lld finished %lld", pre, fin);
#undef L
#undef C
	f->n = n;
}

/* The snapshot's own figure lines (after the legend's blank line). */
static bool snap_has_line(const char *snap, const char *line)
{
	char want[160];
	snprintf(want, sizeof want, "\n%s\n", line);
	return strstr(snap, want) != NULL;
}

/* The number before '%' (or the first number) after label in s; -1 none. */
static double number_after(const char *s, const char *label)
{
	const char *p = strstr(s, label);
	if (!p)
		return -1;
	p += strlen(label);
	while (*p && !isdigit((unsigned char)*p))
		p++;
	return *p ? atof(p) : -1;
}

/* The first number of the panel line that starts with label; -1 none. */
static double panel_number(char (*lines)[160], int n, const char *label)
{
	for (int i = 0; i < n; i++)
		if (!strncmp(lines[i], label, strlen(label)))
			return number_after(lines[i], label);
	return -1;
}

/* No panel line is cut at the panel's edge (#40 item 11): a tab's figures
 * end in a figure, who shares what ends with its refcount. */
static void check_not_cut(const char *what, char (*lines)[160], int n, const char *screen)
{
	for (int i = 0; i < n; i++) {
		const char *l = lines[i];
		size_t len = strlen(l);
		bool tab_fig = isdigit((unsigned char)l[0]) && strstr(l, " ttft ");
		if (tab_fig)
			CHECK_(len > 2 && (!strcmp(l + len - 2, "ms") || l[len - 1] == '-'), "%s: cut: '%s'\n%s", what, l,
			       screen);
		if (strstr(l, " shared by "))
			CHECK_(l[len - 1] == ')', "%s: cut: '%s'\n%s", what, l, screen);
	}
}

/* A record's figures: recomputed from its counters, in its snapshot and on
 * its screen; the tables shown, their held/apart line as the snapshot's.
 * Fills lines[] with the panel's lines; returns their count. */
static int check_figures(const char *what, const char *screen, const char *snap, int rows, int cols,
			 char (*lines)[160])
{
	figs f;
	tables_sum t;
	recompute(snap, &f, &t);
	int n = panel_lines(screen, rows, cols, lines, 64);
	for (int i = 0; i < f.n; i++) {
		CHECK_(snap_has_line(snap, f.line[i]), "%s: snapshot lacks '%s':\n%s", what, f.line[i], snap);
		CHECK_(f.minor[i] || has_line(lines, n, f.line[i]) || has_line(lines, n, f.compact[i]),
		       "%s: panel lacks '%s' / '%s':\n%s", what, f.line[i], f.compact[i], screen);
	}
	char held[96], held_all[96];
	const char *pl = t.held == 1 ? "" : "s";
	snprintf(held, sizeof held, "they hold %lld block%s; apart: %lld", t.held, pl, t.apart);
	snprintf(held_all, sizeof held_all, "all %d hold %lld block%s; apart: %lld", t.n, t.held, pl, t.apart);
	CHECK_(strstr(screen, "block tables") && (has_line(lines, n, held) || has_line(lines, n, held_all)),
	       "%s: no tables or not '%s':\n%s", what, held, screen);
	check_not_cut(what, lines, n, screen);
	return n;
}

static bool read_record(const char *dump, int step, const char *tag, char *screen, char *snap, size_t cap)
{
	char path[1200];
	snprintf(path, sizeof path, "%s.step%d%s.screen", dump, step, tag);
	slurp(path, screen, cap);
	snprintf(path, sizeof path, "%s.step%d%s.txt", dump, step, tag);
	slurp(path, snap, cap);
	return screen[0] && snap[0];
}

/* One step's screen and snapshot at its end (and mid-step, where it has
 * one: the fork's moment, a sequence running). */
static void check_step(int step, int rows, int cols, const char *dump)
{
	static char screen[1 << 17], snap[1 << 17], chat[1 << 14];
	static char lines[64][160];
	char what[64];
	snprintf(what, sizeof what, "%dx%d step %d", cols, rows, step);
	if (step == 3) {
		char mid[96];
		snprintf(mid, sizeof mid, "%s (the fork's moment)", what);
		CHECK_(read_record(dump, step, "-fork", screen, snap, sizeof screen), "%s: no record", mid);
		CHECK_(icounter(snap, "n_running") > 0, "%s: nothing runs", mid);
		check_figures(mid, screen, snap, rows, cols, lines);
	}
	CHECK_(read_record(dump, step, "", screen, snap, sizeof screen), "%s: no record", what);
	if (!screen[0] || !snap[0])
		return;
	/* the caption whole */
	chat_text(screen, rows, cols, chat, sizeof chat);
	CHECK_(strstr(chat, captions[step - 1]) != NULL, "%s: caption not whole:\n%s\n%s", what, captions[step - 1],
	       screen);
	int n = check_figures(what, screen, snap, rows, cols, lines);
	/* copy-on-write and waste, with figures that are not 0 */
	double cow = panel_number(lines, n, "copy-on-write"), waste = -1;
	for (int i = 0; i < n; i++)
		for (const char *p = lines[i]; !strncmp(lines[i], "waste", 5) && *p; p++)
			if (isdigit((unsigned char)*p) && atof(p) > 0) {
				waste = atof(p);
				break;
			}
	/* the fork copies when it lands mid-block (15 times in 16, by timing);
	 * /n 3's answers always write their prompt's part-full last block */
	CHECK_(cow >= (step >= 4 ? 1 : 0) && waste > 0, "%s: copy-on-write %g, waste %g:\n%s", what, cow, waste,
	       screen);
}

/* The map's scale over every frame of the tour: one. */
static bool one_scale(const char *frame, const void *ctx)
{
	char *scale = (char *)ctx;
	const char *p = strstr(frame, "KV pool (a cell = ");
	if (!p)
		return false;
	char now[40];
	snprintf(now, sizeof now, "%.*s", (int)strcspn(p + 18, ")"), p + 18);
	if (!scale[0])
		snprintf(scale, 40, "%s", now);
	else if (strcmp(scale, now))
		snprintf(scale + 40, 40, "%s", now); /* a second scale */
	return false;
}

/* The tour at rows x cols, from start to end, then every step's record. */
static void tour_at(int rows, int cols)
{
	char args[64];
	snprintf(args, sizeof args, "demo -m ../shared/models/stories260K.gguf --speed 4");
	CHECK(pty_start(&app, TDIR, args, rows, cols));
	CHECK_(pty_wait_str(&app, "demo 1/6", WAIT), "%dx%d: no tour:\n%s", cols, rows, app.screen);
	char scale[80] = {0};
	bool over = false;
	for (double end = pty_now() + 4 * WAIT; !over && pty_now() < end && pty_alive(&app);) {
		pty_wait_ever(&app, one_scale, scale, 0.2);
		over = strstr(app.screen, "the tour is over") != NULL;
	}
	CHECK_(over, "%dx%d: the tour did not end:\n%s", cols, rows, app.screen);
	pty_scan_log(&app, one_scale, scale);
	CHECK_(scale[0] && !scale[40], "%dx%d: the map's scale changed: '%s' then '%s'", cols, rows, scale, scale + 40);
	/* the squeeze ran in the tab on screen, where /pick then works */
	static char s5[1 << 17];
	char path[1200];
	snprintf(path, sizeof path, "%s.step5.screen", app.dump);
	slurp(path, s5, sizeof s5);
	const char *active = strstr(s5, "\nthree>");
	static char l5[64][160];
	int n5 = panel_lines(s5, rows, cols, l5, 64);
	CHECK_(active && strstr(s5, "[8]") && panel_number(l5, n5, "preempted ") > 0,
	       "%dx%d: the squeeze is not on screen:\n%s", cols, rows, s5);
	pty_send(&app, "/pick 2\r");
	CHECK_(pty_wait_str(&app, "continuing with answer 2 of 8", WAIT), "%dx%d: /pick after the squeeze:\n%s", cols,
	       rows, app.screen);
	for (int i = 1; i <= N_STEPS; i++)
		check_step(i, rows, cols, app.dump);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* ---- the user's chats stay as they were ---- */

/* The data folder's files (not the demo's folder): names and contents. */
static void data_listing(char *out, size_t cap)
{
	size_t n = 0;
	out[0] = '\0';
	DIR *d = opendir(TDIR "/data/pagechat");
	struct dirent *de;
	char names[64][256];
	int k = 0;
	while (d && (de = readdir(d)) && k < 64)
		if (de->d_name[0] != '.' && strcmp(de->d_name, "demo") && strcmp(de->d_name, "stderr.log"))
			snprintf(names[k++], sizeof names[0], "%s", de->d_name);
	if (d)
		closedir(d);
	qsort(names, (size_t)k, sizeof names[0], (int (*)(const void *, const void *))strcmp);
	for (int i = 0; i < k && n < cap; i++) {
		char path[600];
		static char body[1 << 16];
		snprintf(path, sizeof path, TDIR "/data/pagechat/%.255s", names[i]);
		slurp(path, body, sizeof body);
		n += (size_t)snprintf(out + n, cap - n, "== %s\n%s\n", names[i], body);
	}
}

static void test_own_data(void)
{
	/* the user's chat: one tab that answered, saved, then quit */
	CHECK(pty_start(&app, TDIR, "-m ../shared/models/stories260K.gguf", 40, 120));
	CHECK_(pty_wait_str(&app, "1:", WAIT), "no chat:\n%s", app.screen);
	pty_send(&app, "Lily ran home\r");
	CHECK_(pty_wait_str(&app, " tok, ", WAIT), "no answer:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	static char before[1 << 18], after[1 << 18];
	data_listing(before, sizeof before);
	CHECK_(strstr(before, "== session.json"), "no session saved:\n%s", before);
	/* a demo, twice, each quit mid-tour after its tabs answered */
	for (int i = 0; i < 2; i++) {
		CHECK(pty_start(&app, TDIR, "demo -m ../shared/models/stories260K.gguf --speed 4", 40, 120));
		CHECK_(pty_wait_str(&app, "demo 3/6", WAIT), "no tour:\n%s", app.screen);
		pty_send(&app, "/quit\r");
		CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	}
	data_listing(after, sizeof after);
	CHECK_(!strcmp(before, after), "the demo changed the user's chats:\nbefore:\n%.2000s\nafter:\n%.2000s", before,
	       after);
	/* and the demo's own folder holds one run's chats, not two */
	int n = 0;
	DIR *d = opendir(TDIR "/data/pagechat/demo");
	for (struct dirent *de; d && (de = readdir(d));)
		n += strstr(de->d_name, ".json") && strcmp(de->d_name, "session.json");
	if (d)
		closedir(d);
	CHECK_(n >= 1 && n <= 4, "the demo's folder holds %d chats", n);
	/* --resume reopens the user's tab, not the demo's */
	CHECK(pty_start(&app, TDIR, "-m ../shared/models/stories260K.gguf --resume", 40, 120));
	CHECK_(pty_wait_str(&app, "Lily ran home", WAIT), "resume lost the user's chat:\n%s", app.screen);
	CHECK_(!strstr(app.screen, "3:three"), "resume opened the demo's tabs:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* ---- the keys the captions name ---- */

/* Each key a caption names (F1..F12, Alt-x, Ctrl-x, /command) is a row of
 * docs/usage.md's key or command tables, and the word after it in the
 * caption (three letters or more) is in that row. */
static void test_caption_keys(void)
{
	static char doc[1 << 17];
	slurp("docs/usage.md", doc, sizeof doc);
	CHECK(doc[0] != '\0');
	for (int i = 0; i < N_STEPS; i++)
		for (const char *p = captions[i]; *p; p++) {
			bool start = p == captions[i] || p[-1] == ' ' || p[-1] == '(';
			size_t len = 0;
			if (start && p[0] == 'F' && isdigit((unsigned char)p[1]))
				len = 1 + strspn(p + 1, "0123456789");
			else if (start && (!strncmp(p, "Alt-", 4) || !strncmp(p, "Ctrl-", 5)))
				len = strcspn(p, " ,;:.)");
			else if (start && p[0] == '/' && isalpha((unsigned char)p[1]))
				len = 1 + strspn(p + 1, "abcdefghijklmnopqrstuvwxyz");
			if (!len)
				continue;
			char key[32], row[600] = "";
			snprintf(key, sizeof key, "\n| `%.*s", (int)len, p);
			const char *r = strstr(doc, key);
			while (r && r[strlen(key)] != '`' && r[strlen(key)] != ' ')
				r = strstr(r + 1, key); /* "/n" is not "/new" */
			if (r)
				snprintf(row, sizeof row, "%.*s", (int)strcspn(r + 1, "\n"), r + 1);
			CHECK_(r != NULL, "caption %d names %.*s, which docs/usage.md's tables lack", i + 1, (int)len, p);
			const char *q = p + len;
			while (*q == ' ' || isdigit((unsigned char)*q) || *q == '.')
				q++;
			char word[32];
			int wl = (int)strspn(q, "abcdefghijklmnopqrstuvwxyz");
			snprintf(word, sizeof word, "%.*s", wl, q);
			CHECK_(!r || wl < 3 || strstr(row, word), "caption %d: '%.*s %s', but its row is '%s'", i + 1,
			       (int)len, p, word, row);
			p += len - 1;
		}
}

/* A status message wider than the screen goes on over more rows, whole
 * (#40 item 11): "unknown command /xyzzy (... starting with /)" is 81
 * columns with its margin. */
static void test_long_status(void)
{
	CHECK(pty_start(&app, TDIR, "-m ../shared/models/stories260K.gguf", 24, 80));
	CHECK_(pty_wait_str(&app, "1:", WAIT), "no chat:\n%s", app.screen);
	pty_send(&app, "/xyzzy\r");
	CHECK_(pty_wait_str(&app, "unknown command /xyzzy", WAIT), "no message:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, "with /)", WAIT), "the message is cut:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* With a chat model (a chat template: the random Llama 3 vocabulary
 * model of `make test-models`) the tabs chat: the help desk's system
 * prompt and its questions, not story lines. */
static void test_chat_model(void)
{
	CHECK(pty_start(&app, TDIR, "demo -m build/models/rand-llama3-vocab.gguf --speed 4", 40, 120));
	CHECK_(pty_wait_ever(&app, has_str, "Opening hours:", WAIT), "no help desk prompt:\n%s", app.screen);
	CHECK_(pty_wait_ever(&app, has_str, "open on Saturday?", WAIT), "no question:\n%s",
	       app.screen);
	CHECK_(pty_wait_ever(&app, has_str, "demo 3/6", WAIT), "the tour stalled:\n%s", app.screen);
	CHECK_(!strstr(app.screen, "Lily looked up"), "a story line on a chat model:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	/* without -m: make deps' chat model where it is there, else the demo model */
	bool smol = access("build/models/SmolLM2-135M-Instruct.Q4_1.gguf", R_OK) == 0;
	CHECK(pty_start(&app, TDIR, "demo --speed 4", 40, 120));
	CHECK_(pty_wait_str(&app, smol ? "SmolLM2-135M-Instruct" : "stories260K", WAIT), "%s default:\n%s",
	       smol ? "SmolLM2" : "stories260K", app.screen);
	pty_send(&app, "x\025/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " TDIR " && mkdir -p " TDIR "/home") == 0);
	read_captions();
	test_caption_keys();
	test_own_data();
	test_long_status();
	test_chat_model();
	tour_at(24, 80);
	tour_at(40, 120);
	tour_at(60, 200);
	return TEST_DONE();
}
