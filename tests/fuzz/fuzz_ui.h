/* tests/fuzz/fuzz_ui.h: a chat UI with no engine and no terminal, for the
 * targets that draw (fuzz_chat_view, fuzz_remote_view). Header-only, tests
 * only.
 *
 * It reaches into ui/'s internal header (ui/ui_int.h) and the link's
 * (link/link_int.h) for a ui whose link is a bare elink with the caps asked
 * for: a test may, ui/ itself may not. The screen is virtual: ncurses
 * writing to /dev/null, made once per process. */
#ifndef PAGECHAT_FUZZ_UI_H
#define PAGECHAT_FUZZ_UI_H

#include "tests/fuzz/fuzz.h"

#include "link/link_int.h"
#include "ui/ui_int.h"

#include <locale.h>

#define FUZZ_ROWS 24

/* The virtual screen, resized to cols columns (and FUZZ_ROWS rows). */
static inline void fuzz_screen(int cols)
{
	static SCREEN *screen;
	if (!screen) {
		setlocale(LC_ALL, "C.UTF-8");
		FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
		static const char *const terms[] = {"xterm-256color", "xterm", "vt100"};
		for (size_t i = 0; out && in && !screen && i < ARRAY_LEN(terms); i++)
			screen = newterm(terms[i], out, in);
		if (!screen) {
			fprintf(stderr, "fuzz: no terminal description (xterm, vt100) for the virtual screen\n");
			abort();
		}
	}
	resize_term(FUZZ_ROWS, cols);
}

/* A tab holding c (taken: c is left zeroed), idle. */
static inline tab *fuzz_tab(conv *c, int color)
{
	tab *t = xcalloc(1, sizeof *t);
	t->chat = *c;
	*c = (conv){0};
	t->color = color;
	t->gen_req = -1;
	t->warm_req = -1;
	t->prefill_frac = -1;
	t->follow = true;
	return t;
}

/* A ui of cols columns on link (borrowed) with the tabs array tabs (room
 * for the tabs to come), template family fam (TMPL_NONE, TMPL_UNKNOWN:
 * completion mode), its bar and chat windows made. fuzz_ui_end frees the
 * windows and the tabs. */
static inline void fuzz_ui(ui *u, elink *link, tab **tabs, enum tmpl_family fam, int cols)
{
	fuzz_screen(cols);
	*u = (ui){.link = link, .fam = fam, .rows = FUZZ_ROWS, .cols = cols, .utf8 = true, .tabs = tabs};
	u->cm.fam = fam;
	u->cm.n_ctx = 4096;
	snprintf(u->model_name, sizeof u->model_name, "fuzz");
	u->w_bar = newwin(1, cols, 0, 0);
	u->w_chat = newwin(FUZZ_ROWS - 2, cols, 1, 0);
}

static inline void fuzz_ui_end(ui *u)
{
	delwin(u->w_bar);
	delwin(u->w_chat);
	if (u->w_side)
		delwin(u->w_side);
	for (int i = 0; i < u->n_tabs; i++)
		tab_free(u->tabs[i]);
	u->n_tabs = 0;
}

/* The columns view line ln of d takes. */
static inline int fuzz_line_width(const wrap_doc *d, const wrap_line *ln)
{
	int w = ln->indent;
	for (int k = 0; k < ln->n_segs; k++)
		w += wrap_width(d->text + d->segs[ln->seg + k].off, d->segs[ln->seg + k].len);
	return w;
}

/* Draws the bar and the active tab's view; checks that the bar starts with
 * the first tab's number and that every view line fits its width. */
static inline void fuzz_draw_tabs(ui *u)
{
	tab_draw_bar(u);
	tab_draw_chat(u);
	char row[16];
	mvwinnstr(u->w_bar, 0, 0, row, 3);
	FUZZ_CHECK(!strcmp(row, " 1:"));
	const wrap_doc *d = &ui_tab(u)->view;
	int width = getmaxx(u->w_chat) - 1;
	for (int i = 0; i < d->n_lines; i++)
		FUZZ_CHECK(fuzz_line_width(d, &d->lines[i]) <= MAX(width, 2));
}

#endif
