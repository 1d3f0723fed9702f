/* ui/ui_panel.c: the side panels, drawn from the latest engine snapshot only
 * (never from engine state): the KV block map in each tab's colour with a
 * glyph per block class, its legend, the pool figures, each tab's latency
 * and the draft model's line. A panel is one row of `panels`: the rows it
 * needs and how it draws; they are drawn top to bottom, and the block map
 * takes the rows the others leave. */
#include "ui/ui_int.h"

#include "ui/poolmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one frame's panels share. */
typedef struct panel_frame {
	WINDOW *w;
	int x, width;            /* the panels' first column and width */
	int64_t group;           /* blocks per cell of the map: from the panel's
	                            size only, so its scale holds while tables come
	                            and go */
	int map_rows;            /* the rows the map takes */
	int level;               /* how tight the rows are: 0 all; 1 minor figures
	                            out; 2 the legend and "draft: none" out, the
	                            "shared by" rows under the tables only those
	                            its lines take (not three); 3 the
	                            context out, the tabs' figures compact */
	poolmap_figures fig;     /* the pool figures of u->view.snap */
	int n_tables;            /* block tables shown (rows_panel_tables) */
	int share_rows;          /* rows of "shared by" under them */
} panel_frame;

/* A side panel: one entry of `panels`, drawn top to bottom in table order. */
typedef struct panel {
	/* Rows the panel needs on this frame (the block map's own rows aside). */
	int (*rows)(const ui *u, const panel_frame *f);
	/* Draws the panel from row y, with room rows left down to the window's
	 * bottom (room >= 1); returns the rows it took (0: it did not fit). */
	int (*draw)(const ui *u, const panel_frame *f, int y, int room);
} panel;

int panel_width(const ui *u)
{
	if (!u->panels || u->cols < 80)
		return 0;
	return MAX(36, MIN(60, u->cols * 32 / 100));
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
	/* with lower tiers (and colours), two more: blocks back from each */
	const core_stats *st = &u->view.snap.st;
	bool tiers = u->colors && (st->host_blocks > 0 || st->has_store);
	size_t n = ARRAY_LEN(order) + (tiers ? 2 : 0);
	for (size_t i = 0; i < n; i++) {
		bool tier = i >= ARRAY_LEN(order);
		const char *name = tier ? (i == ARRAY_LEN(order) ? "from RAM" : "from disk") : poolmap_name(order[i]);
		int need = 2 + (int)strlen(name) + 1;
		if (col > 0 && col + need > width) {
			rows++;
			col = 0;
		}
		if (draw) {
			attr_t a = A_NORMAL;
			if (tier)
				a = COLOR_PAIR(i == ARRAY_LEN(order) ? PAIR_HOST : PAIR_DISK);
			else if (u->colors && (order[i] == PM_SHARED || order[i] == PM_PINNED_SHARED))
				a = COLOR_PAIR(PAIR_SHARED) | A_BOLD;
			wattrset(w, a);
			mvwaddstr(w, y + rows - 1, x + col, poolmap_glyph(tier ? PM_CACHED : order[i], u->utf8));
			wattrset(w, A_DIM);
			wprintw(w, " %s", name);
			wattrset(w, A_NORMAL);
		}
		col += need;
	}
	return rows;
}

static int draw_map(const ui *u, WINDOW *w, int y, int x, int width, int64_t group)
{
	const link_snapshot *s = &u->view.snap;
	int cap = (int)((s->n_blocks + group - 1) / group);
	poolmap_cell *cells = xmalloc((size_t)MAX(1, cap) * sizeof *cells);
	int n = poolmap_cells(s->map, s->n_blocks, group, u->block_last, cells);
	for (int i = 0; i < n; i++) {
		const poolmap_cell *c = &cells[i];
		const tab *t = c->conv >= 0 ? tab_of_conv(u, c->conv) : NULL;
		/* a block several sequences read belongs to no one tab: no tab colour */
		attr_t a = A_NORMAL;
		if (c->cls == PM_FREE)
			a = A_DIM;
		else if (c->cls == PM_CACHED) /* dim, in the tint of the tab that used it last */
			a = A_DIM | (u->colors ? COLOR_PAIR(rows_conv_pair(u, c->last_conv)) : 0);
		else if (c->cls == PM_SHARED || c->cls == PM_PINNED_SHARED)
			a = u->colors ? COLOR_PAIR(PAIR_SHARED) | A_BOLD : A_BOLD;
		else if (t && u->colors)
			a = COLOR_PAIR(t->color + 1);
		if (c->origin && c->cls != PM_FREE) /* back from host memory (1) or disk (2) */
			a = u->colors ? COLOR_PAIR(c->origin == 1 ? PAIR_HOST : PAIR_DISK) | (a & A_BOLD) : a | A_UNDERLINE;
		if (group == 1 && rows_is_copy(u, i)) /* a copy on write just made */
			a = (u->colors ? COLOR_PAIR(PAIR_SHARED) : 0) | A_REVERSE | A_BOLD;
		wattrset(w, a);
		mvwaddstr(w, y + i / width, x + i % width, poolmap_glyph(c->cls, u->utf8));
	}
	wattrset(w, A_NORMAL);
	free(cells);
	return (n + width - 1) / width;
}

/* A latency figure: "12.3ms", or "-" when there is none to show. */
static const char *ms(char *buf, size_t cap, double v, int width, int prec)
{
	if (v > 0)
		snprintf(buf, cap, "%*.*fms", width, prec, v);
	else
		snprintf(buf, cap, "%*s", width + 2, "-");
	return buf;
}

/* Whether tab t has figures of its own: not a read-only tab (the saved-chat
 * list, a damaged chat), which no engine serves. */
static bool chat_tab(const tab *t)
{
	return !t->note;
}

static int n_chat_tabs(const ui *u)
{
	int n = 0;
	for (int i = 0; i < u->n_tabs; i++)
		n += chat_tab(u->tabs[i]);
	return n;
}

/* A tab's latency over its answer running now, else its last one (-1:
 * none). The live figures are the engine's so far, defined as the final
 * ones (one sequence's: /n's first answer, not all of them together). */
static void tab_latency(const tab *t, double *ttft, double *tpot)
{
	*ttft = *tpot = -1; /* a tab that never answered shows none */
	core_req_metrics m = t->live;
	if (tab_busy(t) && (beams_live(t, &m) || (!t->alts && t->t_first > 0))) {
		*ttft = m.ttft_ms > 0 ? m.ttft_ms : -1;
		*tpot = m.n_gen > 1 ? m.tpot_ms : -1;
		return;
	}
	for (int k = t->chat.n_msgs - 1; k >= 0; k--)
		if (t->chat.msgs[k].role == CONV_ASSISTANT && t->chat.msgs[k].n_gen > 0) {
			*ttft = t->chat.msgs[k].ttft_ms;
			*tpot = t->chat.msgs[k].tpot_ms;
			return;
		}
}

int panel_tab_figures(const ui *u, WINDOW *w, int y, int x, int width, int rows)
{
	int r = 0;
	for (int i = 0; i < u->n_tabs && r < rows; i++) {
		const tab *t = u->tabs[i];
		if (!chat_tab(t))
			continue;
		double ttft, tpot;
		tab_latency(t, &ttft, &tpot);
		char line[128], a[32], b[32];
		snprintf(line, sizeof line, "%d:%-6.6s ttft %s tpot %s", i + 1, t->chat.name, ms(a, sizeof a, ttft, 5, 1),
			 ms(b, sizeof b, tpot, 4, 2));
		if ((int)strlen(line) > width)
			snprintf(line, sizeof line, "%d:%.5s ttft %s tpot %s", i + 1, t->chat.name,
				 ms(a, sizeof a, ttft, 1, 1), ms(b, sizeof b, tpot, 1, 1));
		wattrset(w, u->colors ? COLOR_PAIR(t->color + 1) : A_NORMAL);
		mvwaddnstr(w, y + r++, x, line, width);
	}
	wattrset(w, A_NORMAL);
	return r;
}

/* Tight rows: one line per figure for all tabs, each tab's value in its
 * colour ("ttft ms 1:1.1 2:2.7 ..."), going on over more rows where it must;
 * draws from row y when draw; returns the rows it takes. */
static int draw_tab_figures_compact(const ui *u, WINDOW *w, int y, int x, int width, bool draw)
{
	int rows = 0;
	for (int f = 0; f < 2; f++) {
		int col = 0;
		const char *name = f ? "tpot ms" : "ttft ms";
		if (draw)
			mvwaddstr(w, y + rows, x, name);
		col = (int)strlen(name);
		for (int i = 0; i < u->n_tabs; i++) {
			if (!chat_tab(u->tabs[i]))
				continue;
			double v[2];
			tab_latency(u->tabs[i], &v[0], &v[1]);
			char item[32];
			if (v[f] > 0)
				snprintf(item, sizeof item, " %d:%.*f", i + 1, v[f] < 10 ? 1 : 0, v[f]);
			else
				snprintf(item, sizeof item, " %d:-", i + 1);
			int n = (int)strlen(item);
			if (col + n > width)
				rows++, col = 2;
			if (draw) {
				wattrset(w, u->colors ? COLOR_PAIR(u->tabs[i]->color + 1) : A_NORMAL);
				mvwaddstr(w, y + rows, x + col, item);
				wattrset(w, A_NORMAL);
			}
			col += n;
		}
		rows++;
	}
	return rows;
}

/* Speculative decoding: the draft in use, its acceptance rate and mean
 * accepted tokens per verification (engine-wide, from the snapshot), the
 * measured speed-up against no draft (poolmap_draft_lines), and each tab's
 * acceptance over its last answer. Only figures the engine
 * counted; "-" before there are any. */
static void draw_draft_figures(const ui *u, WINDOW *w, int y, int x, int width, int h)
{
	char line[160];
	const char *dp = u->draft_path;
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
	const core_stats *st = &u->view.snap.st;
	if (st->spec_steps > 0)
		snprintf(line, sizeof line, "accept %.1f%%  %.2f per step",
			 100.0 * (double)st->spec_accepted / (double)MAX(1, st->spec_proposed),
			 (double)st->spec_accepted / (double)st->spec_steps);
	else
		snprintf(line, sizeof line, "accept -  (no drafts yet)");
	mvwaddnstr(w, y++, x, line, width);
	char speed[2][96];
	int n = poolmap_draft_lines(st, speed);
	for (int i = 0; i < 2; i++) /* always two rows, so the tabs' stay put */
		mvwaddnstr(w, y++, x, i < n ? speed[i] : "", width);
	for (int i = 0; i < u->n_tabs && y < h; i++) {
		const tab *t = u->tabs[i];
		if (!chat_tab(t))
			continue;
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

/* ---- the KV pool: title, block map, legend, figures ---- */

/* A figure line in the frame's form: compact where the long form is wider
 * than the panel. */
static const char *fig_text(const panel_frame *f, int i)
{
	return wrap_width(f->fig.line[i], strlen(f->fig.line[i])) > f->width ? f->fig.compact[i] : f->fig.line[i];
}

static bool fig_shown(const panel_frame *f, int i)
{
	return !(f->level >= 1 && f->fig.minor[i]);
}

static int pool_rows(const ui *u, const panel_frame *f)
{
	int figs = 0;
	for (int i = 0; i < f->fig.n; i++)
		if (fig_shown(f, i))
			figs += rows_wrap_line(NULL, 0, f->x, f->width, fig_text(f, i), 4);
	int legend = f->level >= 2 ? 0 : draw_legend(u, f->w, 0, f->x, f->width, false) + (f->level ? 0 : 1);
	return 1 + f->map_rows + legend + figs;
}

static int pool_draw(const ui *u, const panel_frame *f, int y, int room)
{
	WINDOW *w = f->w;
	int y0 = y, x = f->x, width = f->width;
	char title[80];
	if (f->group > 1)
		snprintf(title, sizeof title, "KV pool (a cell = %lld blocks)", (long long)f->group);
	else
		snprintf(title, sizeof title, "KV pool (a cell = a block)");
	heading(w, y++, x, width, title);
	y += draw_map(u, w, y, x, width, f->group);
	if (f->level < 2)
		y += draw_legend(u, w, y, x, width, true) + (f->level ? 0 : 1);
	for (int i = 0; i < f->fig.n; i++) {
		if (!fig_shown(f, i))
			continue;
		const char *line = fig_text(f, i);
		if (y + rows_wrap_line(NULL, y, x, width, line, 4) > y0 + room)
			break;
		y += rows_wrap_line(w, y, x, width, line, 4);
	}
	return y - y0;
}

/* ---- each tab's latency over its last answer ---- */

static int tabs_rows(const ui *u, const panel_frame *f)
{
	if (f->level >= 3)
		return 1 + draw_tab_figures_compact(u, f->w, 0, f->x, f->width, false);
	return 2 + n_chat_tabs(u);
}

static int tabs_draw(const ui *u, const panel_frame *f, int y, int room)
{
	if (f->level >= 3) {
		if (room < tabs_rows(u, f))
			return 0;
		return 1 + draw_tab_figures_compact(u, f->w, y + 1, f->x, f->width, true);
	}
	if (room < 2)
		return 0; /* not even the blank line and the heading */
	heading(f->w, y + 1, f->x, f->width, "tabs: last answer");
	panel_tab_figures(u, f->w, y + 2, f->x, f->width, room - 3);
	return 2 + n_chat_tabs(u);
}

/* ---- each tab's context: tokens in use against the limit ---- */

static int context_rows(const ui *u, const panel_frame *f)
{
	return f->level >= 3 ? 0 : 2 + n_chat_tabs(u);
}

static int context_draw(const ui *u, const panel_frame *f, int y, int room)
{
	if (room < 3 || f->level >= 3)
		return 0;
	char line[128];
	snprintf(line, sizeof line, "context of %d tok (full: %s)", u->cm.n_ctx,
		 conv_overflow_name(u->cm.overflow));
	heading(f->w, y + 1, f->x, f->width, line);
	for (int i = 0, r = 0; i < u->n_tabs && r < room - 2; i++) {
		const tab *t = u->tabs[i];
		if (!chat_tab(t))
			continue;
		int used = tab_context_used(t), level = tab_context_level(u, t);
		int bar = 10, fill = (int)MIN((int64_t)bar, (int64_t)used * bar / MAX(1, u->cm.n_ctx));
		char gauge[16];
		for (int k = 0; k < bar; k++)
			gauge[k] = k < fill ? '|' : ' ';
		gauge[bar] = '\0';
		snprintf(line, sizeof line, "%d:%-6.6s [%s] %d%s", i + 1, t->chat.name, gauge, used,
			 level > 1 ? " full" : level ? " high" : "");
		wattrset(f->w, level ? A_BOLD : u->colors ? COLOR_PAIR(t->color + 1) : A_NORMAL);
		mvwaddnstr(f->w, y + 2 + r++, f->x, line, f->width);
	}
	wattrset(f->w, A_NORMAL);
	return 2 + n_chat_tabs(u);
}

/* ---- speculative decoding ---- */

static int draft_rows(const ui *u, const panel_frame *f)
{
	return u->draft_path ? 4 + n_chat_tabs(u) : f->level >= 2 ? 0 : 1;
}

static int draft_draw(const ui *u, const panel_frame *f, int y, int room)
{
	if (!draft_rows(u, f))
		return 0;
	draw_draft_figures(u, f->w, y, f->x, f->width, y + room);
	return draft_rows(u, f);
}

/* ---- each running sequence's block table (ui_rows.c) ---- */

static int tables_rows(const ui *u, const panel_frame *f)
{
	(void)u;
	return rows_panel_rows(f->n_tables, f->share_rows);
}

static int tables_draw(const ui *u, const panel_frame *f, int y, int room)
{
	return rows_panel_draw(u, f->w, y, f->x, f->width, room, f->n_tables, f->share_rows);
}

static const panel panels[] = {
	{pool_rows, pool_draw},
	{tables_rows, tables_draw},
	{tabs_rows, tabs_draw},
	{context_rows, context_draw},
	{draft_rows, draft_draw},
};

/* The rows all panels need at the frame's level: every running sequence's
 * table and up to four idle tabs' (they show the sharing), and more idle
 * ones where h leaves room. */
static int panels_need(const ui *u, panel_frame *f, int h)
{
	int sr = f->share_rows =
		f->level >= 2 ? rows_panel_share_rows(u, f->width, ROWS_SHARE_ROWS) : ROWS_SHARE_ROWS;
	int n_run = rows_panel_tables(u, 0, sr), want = MIN(rows_panel_tables(u, 1 << 20, sr), MAX(n_run, 4));
	f->n_tables = want;
	int need = 0;
	for (size_t i = 0; i < ARRAY_LEN(panels); i++)
		need += panels[i].rows(u, f);
	if (need < h) {
		int more = rows_panel_tables(u, h - need + rows_panel_rows(want, sr) - rows_panel_rows(n_run, sr),
					     sr);
		if (more > want) {
			need += rows_panel_rows(more, sr) - rows_panel_rows(want, sr);
			f->n_tables = more;
		}
	}
	return need;
}

void panel_draw(ui *u)
{
	panel_frame f = {.w = u->w_side, .x = 2, .width = getmaxx(u->w_side) - 3};
	int h = getmaxy(f.w);
	werase(f.w);
	mvwvline(f.w, 0, 0, ACS_VLINE, h);
	const link_snapshot *s = &u->view.snap;
	poolmap_format(s, rows_memo(u), &f.fig);
	/* the map's scale comes from the panel's size, not from the tables
	 * drawn, so it does not change as tables come and go: a quarter of its
	 * rows at most, and fewer where that keeps the context and the tabs'
	 * full lines (level 2) with a table per tab, up to four, and one row
	 * of "shared by" */
	int map_budget = MAX(1, h / 4);
	f.level = 2;
	f.n_tables = MIN(n_chat_tabs(u), 4);
	f.share_rows = 1;
	int others = 0;
	for (size_t i = 0; i < ARRAY_LEN(panels); i++)
		others += panels[i].rows(u, &f); /* the pool's with no map rows yet */
	if (h - others >= 1 && h - others < map_budget)
		map_budget = h - others;
	f.group = poolmap_group(s->n_blocks, MAX(1, f.width) * map_budget);
	f.map_rows = (int)((s->n_blocks / f.group + (s->n_blocks % f.group != 0) + MAX(1, f.width) - 1) /
			   MAX(1, f.width));
	f.map_rows = MAX(1, f.map_rows);
	/* the least tight level at which every panel fits */
	int need = 0;
	for (f.level = 0; f.level <= 3; f.level++)
		if ((need = panels_need(u, &f, h)) <= h || f.level == 3)
			break;
	if (need > h && f.n_tables > 2) { /* still too many: fewer tables drawn (all counted) */
		int cut = MIN(need - h, f.n_tables - 2);
		f.n_tables -= cut, need -= cut;
	}
	/* the history (ui_hist.c) goes last, where the rows are left */
	int hist = hist_panel_rows(u);
	if (h - need < hist)
		hist = 0;
	int y = 0;
	for (size_t i = 0; i < ARRAY_LEN(panels) && y < h; i++)
		y += panels[i].draw(u, &f, y, h - y);
	if (hist && y < h)
		hist_panel_draw(u, f.w, y, f.x, f.width, h - y);
	wnoutrefresh(f.w);
}
