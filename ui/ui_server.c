/* ui/ui_server.c: the chat as a client of an OpenAI-compatible server
 * (`pagechat chat --server URL`): what the server part of the link's view
 * (link_server) shows. The tabs, their turns, saving, resume and every key
 * work as with a local model (ui_tab.c sends each turn in the form the
 * engine reads); here are only the status lines when the server goes down
 * or comes back, and the side panel, which labels every figure with where
 * it came from (a /metrics name, pagechat's block map, or this client's own
 * clock) and lists the figures the server does not give. */
#include "ui/ui_int.h"

#include "ui/poolmap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void server_on_view(ui *u, enum link_state was)
{
	const link_server *v = &u->view.server;
	if (v->model[0] && !u->p->server_model)
		snprintf(u->model_name, sizeof u->model_name, "%.63s", v->model);
	bool bad = v->state == LINK_DOWN || v->state == LINK_REFUSED;
	if (bad && was != v->state && v->problem[0])
		ui_status(u, true, "%s", v->problem);
	else if (v->state == LINK_UP && (was == LINK_DOWN || was == LINK_REFUSED))
		ui_status(u, false, "%s answers again", v->url);
}

/* ---- the panel ---- */

typedef struct pane {
	WINDOW *w;               /* NULL: rows are only counted */
	int x, width, y, h;
	int level;               /* what a short panel leaves out: 1 the minor
	                            figures, 2 also the legend, 3 also the metrics' names */
} pane;

/* A line of text, over more rows (indented) where it is wider than the
 * panel, broken at spaces: nothing is cut but what the panel's height cuts. */
static void line(pane *p, attr_t a, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void line(pane *p, attr_t a, const char *fmt, ...)
{
	if (p->y >= p->h)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (wrap_width(buf, strlen(buf)) <= p->width) { /* the legend's glyphs take a column each */
		if (p->w) {
			wattrset(p->w, a);
			mvwaddstr(p->w, p->y, p->x, buf);
		}
		p->y++;
	} else {
		if (p->w)
			wattrset(p->w, a);
		p->y += rows_wrap_line(p->w, p->y, p->x, p->width, buf, p->h - p->y);
	}
	if (p->w)
		wattrset(p->w, A_NORMAL);
}

/* The map's cells from row p->y, a group of blocks each. */
static void draw_map(const ui *u, pane *p, int64_t group)
{
	const link_snapshot *s = &u->view.server.pool;
	int cap = (int)((s->n_blocks + group - 1) / group);
	poolmap_cell *cells = xmalloc((size_t)MAX(1, cap) * sizeof *cells);
	int n = poolmap_cells(s->map, s->n_blocks, group, NULL, cells);
	for (int i = 0; i < n && p->y + i / p->width < p->h; i++) {
		const poolmap_cell *c = &cells[i];
		attr_t a = c->cls == PM_FREE || c->cls == PM_CACHED ? A_DIM :
			   c->cls == PM_SHARED || c->cls == PM_PINNED_SHARED ? A_BOLD : A_NORMAL;
		wattrset(p->w, a);
		mvwaddstr(p->w, p->y + i / p->width, p->x + i % p->width, poolmap_glyph(c->cls, u->utf8));
	}
	wattrset(p->w, A_NORMAL);
	p->y += (n + p->width - 1) / p->width;
	free(cells);
}

/* The server's block map (pagechat serve), in rows rows at most. */
static void draw_pool(ui *u, pane *p, int rows)
{
	const link_snapshot *s = &u->view.server.pool;
	int64_t group = poolmap_group(s->n_blocks, p->width * MAX(1, rows));
	if (group > 1)
		line(p, A_BOLD, "KV pool (server's; a cell = %lld blocks)", (long long)group);
	else
		line(p, A_BOLD, "KV pool (server's; a cell = a block)");
	if (p->w)
		draw_map(u, p, group);
	if (p->level < 2) {
		line(p, A_DIM, "%s used %s filling %s shared %s pinned", poolmap_glyph(PM_USED, u->utf8),
		     poolmap_glyph(PM_PARTIAL, u->utf8), poolmap_glyph(PM_SHARED, u->utf8),
		     poolmap_glyph(PM_PINNED, u->utf8));
		line(p, A_DIM, "%s pinned+shared %s cached %s free", poolmap_glyph(PM_PINNED_SHARED, u->utf8),
		     poolmap_glyph(PM_CACHED, u->utf8), poolmap_glyph(PM_FREE, u->utf8));
	}
	/* the local panel's figures, worded alike (poolmap_format), from what
	 * the server publishes; the waste of its last busy moment stays */
	if (s->st.n_running > 0 && s->st.slots_alloc > 0) {
		u->server_memo.has_busy = true;
		u->server_memo.waste = s->st.waste;
		u->server_memo.waste_contig = s->st.waste_contig;
	}
	poolmap_figures fig;
	poolmap_format(s, &u->server_memo, &fig);
	for (int i = 0; i < fig.n; i++)
		if (p->level < 1 || !fig.minor[i])
			line(p, A_NORMAL, "%s",
			     wrap_width(fig.line[i], strlen(fig.line[i])) > p->width ? fig.compact[i] : fig.line[i]);
}

static void fig_text(enum link_fig f, double v, char *buf, size_t cap)
{
	if (f == LF_KV_USAGE || f == LF_PREFIX_HIT)
		snprintf(buf, cap, "%.1f%%", 100 * v);
	else if (f == LF_TTFT_MS || f == LF_ITL_MS)
		snprintf(buf, cap, "%.*fms", v < 10 ? 2 : 1, v);
	else
		snprintf(buf, cap, "%.0f", v);
}

/* /metrics: each figure with the metric it came from, then the ones missing. */
static void draw_metrics(const ui *u, pane *p)
{
	const link_server *v = &u->view.server;
	if (v->metrics_status != 200) {
		char why[64];
		snprintf(why, sizeof why, v->metrics_status ? "HTTP %d" : "not reached", v->metrics_status);
		line(p, A_BOLD, "/metrics: none (%s)", why);
		line(p, A_DIM, "the server gives no KV usage, prefix hits, queue or TTFT");
		return;
	}
	line(p, A_BOLD, "/metrics (%s names)", v->kind[0] ? v->kind : "unknown");
	char missing[256] = "", val[32];
	for (int f = 0; f < LF_N; f++) {
		const link_figure *g = &v->fig[f];
		if (!g->have) {
			size_t n = strlen(missing);
			snprintf(missing + n, sizeof missing - n, "%s%s", n ? ", " : "", link_fig_name((enum link_fig)f));
			continue;
		}
		const char *src = strchr(g->source, ':');
		fig_text((enum link_fig)f, g->value, val, sizeof val);
		const char *name = link_fig_name((enum link_fig)f), *from = src ? src + 1 : g->source;
		if (p->level >= 3)
			line(p, A_NORMAL, "%-11s %8s", name, val);
		else if (11 + 1 + 8 + 1 + (int)strlen(from) <= p->width) /* in columns */
			line(p, A_NORMAL, "%-11s %8s %s", name, val, from);
		else if ((int)(strlen(name) + strlen(val) + strlen(from)) + 2 <= p->width)
			line(p, A_NORMAL, "%s %s %s", name, val, from);
		else {
			line(p, A_NORMAL, "%-11s %8s", name, val);
			line(p, A_DIM, "  %s", from);
		}
	}
	if (missing[0]) {
		line(p, A_DIM, "not given: %s", missing);
	}
}

/* Each tab's answer as this client timed it (the local panel's rows). */
static void draw_tabs(const ui *u, pane *p)
{
	line(p, A_BOLD, "measured here: last answer");
	if (u->view.server.counts_pieces)
		line(p, A_DIM, "the server sends no token counts: tpot and tok are per piece of text");
	if (!p->w)
		p->y += u->n_tabs;
	else if (p->y < p->h)
		p->y += panel_tab_figures(u, p->w, p->y, p->x, p->width, p->h - p->y);
}

/* Everything, the map in map_rows rows. */
static void draw_all(ui *u, pane *p, int map_rows)
{
	const link_server *v = &u->view.server;
	line(p, A_BOLD, "server %s", v->url);
	char ctx[32] = "";
	if (v->max_model_len > 0)
		snprintf(ctx, sizeof ctx, "  ctx %d", v->max_model_len);
	static const char *const state[] = {[LINK_CONNECTING] = "  (connecting)", [LINK_UP] = "",
					     [LINK_DOWN] = "  (down)", [LINK_REFUSED] = "  (refused the key)"};
	line(p, A_NORMAL, "model %s%s%s", v->model[0] ? v->model : "?", ctx, state[v->state]);
	if ((v->state == LINK_DOWN || v->state == LINK_REFUSED) && v->problem[0])
		line(p, A_BOLD, "%s", v->problem);
	p->y++;
	if (v->has_pool)
		draw_pool(u, p, map_rows);
	else
		line(p, A_DIM, "block map: only pagechat serve publishes one (/pagechat/v1/pool)");
	p->y++;
	draw_metrics(u, p);
	p->y++;
	draw_tabs(u, p);
}

void server_panel_draw(ui *u)
{
	pane p = {.w = u->w_side, .x = 2, .width = getmaxx(u->w_side) - 3, .h = getmaxy(u->w_side)};
	werase(p.w);
	mvwvline(p.w, 0, 0, ACS_VLINE, p.h);
	/* the rows everything but the map takes; the map gets the rest */
	pane dry = p;
	dry.w = NULL;
	dry.h = 1 << 20;
	enum { MAP_ROWS_MIN = 4 };
	for (p.level = 0; p.level <= 3; p.level++) {
		dry.level = p.level;
		dry.y = 0;
		draw_all(u, &dry, 1);
		if (dry.y + MAP_ROWS_MIN <= p.h || p.level == 3)
			break;
	}
	draw_all(u, &p, MAX(1, p.h - dry.y));
	wnoutrefresh(p.w);
}
