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
	WINDOW *w;
	int x, width, y, h;
} pane;

static void line(pane *p, attr_t a, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void line(pane *p, attr_t a, const char *fmt, ...)
{
	if (p->y >= p->h)
		return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	int n = 0, chars = 0; /* the bytes of the first width characters (UTF-8) */
	for (; buf[n]; n++)
		if (((unsigned char)buf[n] & 0xC0) != 0x80 && chars++ == p->width)
			break;
	wattrset(p->w, a);
	mvwaddnstr(p->w, p->y++, p->x, buf, n);
	wattrset(p->w, A_NORMAL);
}

/* Long text over as many lines as it needs (at most max), broken at spaces
 * where it can be. */
static void para(pane *p, attr_t a, const char *s, int max)
{
	int n = (int)strlen(s);
	for (int i = 0; i < n && max-- > 0;) {
		int k = MIN(p->width, n - i);
		if (i + k < n) {
			int sp = k;
			while (sp > p->width / 2 && s[i + sp] != ' ')
				sp--;
			k = s[i + sp] == ' ' ? sp : k;
		}
		line(p, a, "%.*s", k, s + i);
		i += k;
		while (s[i] == ' ')
			i++;
	}
}

/* The server's block map (pagechat serve), in rows rows at most. */
static void draw_pool(const ui *u, pane *p, int rows)
{
	const link_snapshot *s = &u->view.server.pool;
	int64_t group = poolmap_group(s->n_blocks, p->width * rows);
	line(p, A_BOLD, "KV pool (server's; a cell = %lld block%s)", (long long)group, group > 1 ? "s" : "");
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
	line(p, A_DIM, "%s used %s filling %s shared %s pinned", poolmap_glyph(PM_USED, u->utf8),
	     poolmap_glyph(PM_PARTIAL, u->utf8), poolmap_glyph(PM_SHARED, u->utf8), poolmap_glyph(PM_PINNED, u->utf8));
	line(p, A_DIM, "%s pinned+shared %s cached %s free", poolmap_glyph(PM_PINNED_SHARED, u->utf8),
	     poolmap_glyph(PM_CACHED, u->utf8), poolmap_glyph(PM_FREE, u->utf8));
	const core_stats *st = &s->st;
	line(p, A_NORMAL, "blocks %lld x %d tokens", (long long)s->n_blocks, s->block_tokens);
	line(p, A_NORMAL, "used %lld  cached %lld  free %lld", (long long)st->blocks_used,
	     (long long)st->blocks_cached, (long long)(st->blocks_free - st->blocks_cached));
	line(p, A_NORMAL, "shared %lld  pinned %lld", (long long)st->blocks_shared, (long long)st->blocks_pinned);
	line(p, A_NORMAL, "waste  paged %.1f%%  contig %.1f%%", 100 * st->waste, 100 * st->waste_contig);
	line(p, A_NORMAL, "prefix hits %.1f%% (%lld/%lld tok)", 100 * poolmap_hit_rate(st),
	     (long long)st->cached_tokens, (long long)st->prompt_tokens);
	line(p, A_NORMAL, "queue %d waiting  %d running", st->n_waiting, st->n_running);
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
		para(p, A_DIM, "the server gives no KV usage, prefix hits, queue or TTFT", 2);
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
		line(p, A_NORMAL, "%-11s %8s %s", link_fig_name((enum link_fig)f), val, src ? src + 1 : g->source);
	}
	if (missing[0]) {
		char buf[300];
		snprintf(buf, sizeof buf, "not given: %s", missing);
		para(p, A_DIM, buf, 3);
	}
}

/* Each tab's last answer as this client timed it. */
static void draw_tabs(const ui *u, pane *p)
{
	line(p, A_BOLD, "measured here: last answer");
	for (int i = 0; i < u->n_tabs; i++) {
		const tab *t = u->tabs[i];
		double ttft = 0, tpot = 0;
		for (int k = t->chat.n_msgs - 1; k >= 0; k--)
			if (t->chat.msgs[k].role == CONV_ASSISTANT && t->chat.msgs[k].finish[0]) {
				ttft = t->chat.msgs[k].ttft_ms;
				tpot = t->chat.msgs[k].tpot_ms;
				break;
			}
		char a[24] = "-", b[24] = "-";
		if (ttft > 0)
			snprintf(a, sizeof a, "%.1fms", ttft);
		if (tpot > 0)
			snprintf(b, sizeof b, "%.2fms", tpot);
		line(p, u->colors ? COLOR_PAIR(t->color + 1) : A_NORMAL, "%d:%-6.6s ttft %7s tpot %7s", i + 1,
		     t->chat.name, a, b);
	}
}

void server_panel_draw(ui *u)
{
	pane p = {.w = u->w_side, .x = 2, .width = getmaxx(u->w_side) - 3, .h = getmaxy(u->w_side)};
	const link_server *v = &u->view.server;
	werase(p.w);
	mvwvline(p.w, 0, 0, ACS_VLINE, p.h);
	line(&p, A_BOLD, "server %s", v->url);
	char ctx[32] = "";
	if (v->max_model_len > 0)
		snprintf(ctx, sizeof ctx, "  ctx %d", v->max_model_len);
	static const char *const state[] = {[LINK_CONNECTING] = "  (connecting)", [LINK_UP] = "",
					     [LINK_DOWN] = "  (down)", [LINK_REFUSED] = "  (refused the key)"};
	line(&p, A_NORMAL, "model %s%s%s", v->model[0] ? v->model : "?", ctx, state[v->state]);
	if ((v->state == LINK_DOWN || v->state == LINK_REFUSED) && v->problem[0])
		para(&p, A_BOLD, v->problem, 3);
	p.y++;
	/* the figures below the map take: metrics ~ LF_N + 4, tabs n + 1 */
	int below = LF_N + 5 + u->n_tabs + 2;
	if (v->has_pool)
		draw_pool(u, &p, MAX(1, p.h - p.y - below - 10));
	else
		para(&p, A_DIM, "block map: only pagechat serve publishes one (/pagechat/v1/pool)", 2);
	p.y++;
	draw_metrics(u, &p);
	p.y++;
	draw_tabs(u, &p);
	wnoutrefresh(p.w);
}
