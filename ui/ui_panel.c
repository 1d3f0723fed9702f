/* ui/ui_panel.c: the side panels, drawn from the latest engine snapshot only
 * (never from engine state): the KV block map in each tab's colour with a
 * glyph per block class, its legend, the pool figures, each tab's latency
 * and the draft model's line. */
#include "ui/ui_int.h"

#include "ui/poolmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int panel_width(const ui *u)
{
	if (!u->panels || u->cols < 80)
		return 0;
	return MAX(36, MIN(44, u->cols * 32 / 100));
}

static const tab *tab_of_conv(const ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return u->tabs[i];
	return NULL;
}

/* Draws the legend from row y; returns the rows it took. */
static int draw_legend(const ui *u, WINDOW *w, int y, int x, int width, bool draw)
{
	static const enum poolmap_class order[] = {
		PM_USED, PM_PARTIAL, PM_SHARED, PM_PINNED, PM_PINNED_SHARED, PM_CACHED, PM_FREE,
	};
	int col = 0, rows = 1;
	for (size_t i = 0; i < ARRAY_LEN(order); i++) {
		const char *name = poolmap_name(order[i]);
		int need = 2 + (int)strlen(name) + 1;
		if (col > 0 && col + need > width) {
			rows++;
			col = 0;
		}
		if (draw) {
			mvwaddstr(w, y + rows - 1, x + col, poolmap_glyph(order[i], u->utf8));
			wattrset(w, A_DIM);
			wprintw(w, " %s", name);
			wattrset(w, A_NORMAL);
		}
		col += need;
	}
	return rows;
}

static int draw_map(const ui *u, WINDOW *w, int y, int x, int width, int rows)
{
	const eng_snapshot *s = &u->snap;
	int64_t group = poolmap_group(s->n_blocks, width * rows);
	int cap = (int)((s->n_blocks + group - 1) / group);
	poolmap_cell *cells = xmalloc((size_t)MAX(1, cap) * sizeof *cells);
	int n = poolmap_cells(s->map, s->n_blocks, group, cells);
	for (int i = 0; i < n; i++) {
		const poolmap_cell *c = &cells[i];
		const tab *t = c->conv >= 0 ? tab_of_conv(u, c->conv) : NULL;
		/* a block several sequences read belongs to no one tab: no tab colour */
		attr_t a = A_NORMAL;
		if (c->cls == PM_FREE || c->cls == PM_CACHED)
			a = A_DIM;
		else if (c->cls == PM_SHARED || c->cls == PM_PINNED_SHARED)
			a = A_BOLD;
		else if (t && u->colors)
			a = COLOR_PAIR(t->color + 1);
		wattrset(w, a);
		mvwaddstr(w, y + i / width, x + i % width, poolmap_glyph(c->cls, u->utf8));
	}
	wattrset(w, A_NORMAL);
	free(cells);
	return (n + width - 1) / width;
}

static void draw_tab_figures(const ui *u, WINDOW *w, int y, int x, int width, int rows)
{
	double now = now_s();
	for (int i = 0; i < u->n_tabs && i < rows; i++) {
		const tab *t = u->tabs[i];
		double ttft = 0, tpot = 0;
		if (tab_busy(t) && t->t_first > 0) {
			ttft = 1000 * (t->t_first - t->t_submit);
			tpot = t->n_live > 1 ? 1000 * (now - t->t_first) / (t->n_live - 1) : 0;
		} else {
			for (int k = t->chat.n_msgs - 1; k >= 0; k--)
				if (t->chat.msgs[k].role == CONV_ASSISTANT && t->chat.msgs[k].n_gen > 0) {
					ttft = t->chat.msgs[k].ttft_ms;
					tpot = t->chat.msgs[k].tpot_ms;
					break;
				}
		}
		char line[128];
		snprintf(line, sizeof line, "%d:%-6.6s ttft %5.1fms tpot %4.2fms", i + 1, t->chat.name, ttft, tpot);
		wattrset(w, u->colors ? COLOR_PAIR(t->color + 1) : A_NORMAL);
		mvwaddnstr(w, y + i, x, line, width);
	}
	wattrset(w, A_NORMAL);
}

/* Rows the speculative-decoding section takes. */
static int draft_rows(const ui *u)
{
	return u->p->draft_path ? 2 + u->n_tabs : 1;
}

/* Speculative decoding: the draft in use, its acceptance rate and mean
 * accepted tokens per verification (engine-wide, from the snapshot), and
 * each tab's acceptance over its last answer. Only figures the engine
 * counted; "-" before there are any. */
static void draw_draft_figures(const ui *u, WINDOW *w, int y, int x, int width, int h)
{
	char line[160];
	const char *dp = u->p->draft_path;
	if (!dp) {
		wattrset(w, A_DIM);
		mvwaddnstr(w, y, x, "draft: none", width);
		wattrset(w, A_NORMAL);
		return;
	}
	const char *name = strrchr(dp, '/');
	snprintf(line, sizeof line, "draft %s k=%d%s", name ? name + 1 : dp, u->p->draft_k,
		 u->p->draft_adaptive ? " adaptive" : "");
	mvwaddnstr(w, y++, x, line, width);
	const core_stats *st = &u->snap.st;
	if (st->spec_steps > 0)
		snprintf(line, sizeof line, "accept %.1f%%  %.2f per step",
			 100.0 * (double)st->spec_accepted / (double)MAX(1, st->spec_proposed),
			 (double)st->spec_accepted / (double)st->spec_steps);
	else
		snprintf(line, sizeof line, "accept -  (no drafts yet)");
	mvwaddnstr(w, y++, x, line, width);
	for (int i = 0; i < u->n_tabs && y < h; i++) {
		const tab *t = u->tabs[i];
		const conv_msg *m = NULL;
		for (int k = t->chat.n_msgs - 1; k >= 0 && !m; k--)
			if (t->chat.msgs[k].n_proposed > 0)
				m = &t->chat.msgs[k];
		if (m)
			snprintf(line, sizeof line, "%d:%-6.6s accepted %.1f%% (%d/%d)", i + 1, t->chat.name,
				 100.0 * m->n_accepted / m->n_proposed, m->n_accepted, m->n_proposed);
		else
			snprintf(line, sizeof line, "%d:%-6.6s accepted -", i + 1, t->chat.name);
		wattrset(w, u->colors ? COLOR_PAIR(t->color + 1) : A_NORMAL);
		mvwaddnstr(w, y++, x, line, width);
	}
	wattrset(w, A_NORMAL);
}

static void heading(WINDOW *w, int y, int x, int width, const char *text)
{
	wattrset(w, A_BOLD);
	mvwaddnstr(w, y, x, text, width);
	wattrset(w, A_NORMAL);
}

void panel_draw(ui *u)
{
	WINDOW *w = u->w_side;
	werase(w);
	int h = getmaxy(w), x = 2, width = getmaxx(w) - 3;
	mvwvline(w, 0, 0, ACS_VLINE, h);
	poolmap_figures fig;
	poolmap_format(&u->snap, &fig);
	int legend = draw_legend(u, w, 0, x, width, false);
	/* what is below the map, so the map gets the rest */
	int below = legend + 1 + fig.n + 1 + 1 + u->n_tabs + draft_rows(u);
	int map_rows = MAX(1, h - 1 - below);
	int64_t group = poolmap_group(u->snap.n_blocks, width * map_rows);
	char title[80];
	if (group > 1)
		snprintf(title, sizeof title, "KV pool (a cell = %lld blocks)", (long long)group);
	else
		snprintf(title, sizeof title, "KV pool (a cell = a block)");
	heading(w, 0, x, width, title);
	int y = 1 + draw_map(u, w, 1, x, width, map_rows);
	y += draw_legend(u, w, y, x, width, true);
	y++;
	for (int i = 0; i < fig.n && y < h; i++)
		mvwaddnstr(w, y++, x, fig.line[i], width);
	if (y + 1 < h) {
		heading(w, ++y, x, width, "tabs: last answer");
		draw_tab_figures(u, w, y + 1, x, width, h - y - 2);
		y += 1 + u->n_tabs;
	}
	if (y < h)
		draw_draft_figures(u, w, y, x, width, h);
	wnoutrefresh(w);
}
