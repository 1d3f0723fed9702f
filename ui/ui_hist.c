/* ui/ui_hist.c: the figures' history as sparklines (btop-style).
 *
 * Once a second (or less often, with a slower snapshot period) the latest
 * snapshot gives one sample of each series: the pool's use (blocks held by
 * sequences or pins over all blocks), the prefix cache's hit rate over the
 * second (cached over prompt tokens admitted in it; none admitted: no
 * sample), prefill and decode tokens per second, and the draft's acceptance
 * over the second, and with a draft its speed-up against no draft
 * (poolmap_speedup of the decode steps' counters since the last sample that
 * had both drafted and plain steps; none: no sample). The panel draws the
 * last samples that fit its width, one cell each, as eighth blocks scaled to
 * the series' range (0..100% for the rates, 0..the largest sample shown for
 * the speeds, and for the speed-up at least 0..1x), with the latest value
 * after it; with a draft model, the acceptance by draft position so far.
 * UI thread only. */
#include "ui/ui_int.h"

#include "ui/poolmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIST_N 240               /* samples kept: four minutes at one a second */
#define HIST_PERIOD_S 1.0

enum { H_POOL, H_HITS, H_PREFILL, H_DECODE, H_ACCEPT, H_SPEED, H_KINDS };
enum hist_unit { U_PCT, U_RATE, U_TIMES };

struct ui_hist {
	float v[H_KINDS][HIST_N];    /* NAN: no sample (nothing to rate that second) */
	int n, head;                 /* samples stored; the next slot */
	double t_last;
	int64_t prompt, cached, proposed, accepted; /* the counters at the last sample */
	int64_t spec_tok, spec_us, plain_tok, plain_us; /* ... at the last speed-up sample */
};

static float ratio(int64_t num, int64_t den)
{
	return den > 0 ? (float)num / (float)den : NAN;
}

void hist_on_snapshot(ui *u)
{
	const link_snapshot *s = &u->view.snap;
	const core_stats *st = &s->st;
	double now = now_s();
	if (!u->hist) {
		u->hist = xcalloc(1, sizeof *u->hist);
		u->hist->t_last = now;
		u->hist->prompt = st->prompt_tokens, u->hist->cached = st->cached_tokens;
		u->hist->proposed = st->spec_proposed, u->hist->accepted = st->spec_accepted;
		u->hist->spec_tok = st->spec_dec_tokens, u->hist->spec_us = st->spec_dec_us;
		u->hist->plain_tok = st->plain_dec_tokens, u->hist->plain_us = st->plain_dec_us;
		return;
	}
	struct ui_hist *h = u->hist;
	if (now - h->t_last < HIST_PERIOD_S)
		return;
	h->t_last = now;
	int i = h->head;
	h->v[H_POOL][i] = ratio(st->blocks_total - st->blocks_free, MAX(1, st->blocks_total));
	h->v[H_HITS][i] = ratio(st->cached_tokens - h->cached, st->prompt_tokens - h->prompt);
	h->v[H_PREFILL][i] = (float)s->prefill_tps;
	h->v[H_DECODE][i] = (float)s->decode_tps;
	h->v[H_ACCEPT][i] = ratio(st->spec_accepted - h->accepted, st->spec_proposed - h->proposed);
	double x = poolmap_speedup(st->spec_dec_tokens - h->spec_tok, st->spec_dec_us - h->spec_us,
				   st->plain_dec_tokens - h->plain_tok, st->plain_dec_us - h->plain_us);
	h->v[H_SPEED][i] = x < 0 ? NAN : (float)x;
	if (x >= 0) {
		h->spec_tok = st->spec_dec_tokens, h->spec_us = st->spec_dec_us;
		h->plain_tok = st->plain_dec_tokens, h->plain_us = st->plain_dec_us;
	}
	h->prompt = st->prompt_tokens, h->cached = st->cached_tokens;
	h->proposed = st->spec_proposed, h->accepted = st->spec_accepted;
	h->head = (h->head + 1) % HIST_N;
	h->n = MIN(h->n + 1, HIST_N);
}

void hist_free(ui *u)
{
	free(u->hist);
	u->hist = NULL;
}

int hist_panel_rows(const ui *u)
{
	return u->hist ? 2 + 4 + (u->p->draft_path ? 3 : 0) : 0;
}

/* One series: label, the last `cells` samples as a sparkline, the latest. */
static void draw_series(const ui *u, WINDOW *w, int y, int x, int width, int k, const char *label,
			enum hist_unit unit)
{
	static const char *const bars[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587",
					   "\u2588"};
	static const char ascii[] = "_.-:=+*#";
	const struct ui_hist *h = u->hist;
	int cells = MIN(h->n, MAX(1, width - 7 - 7));
	float top = unit == U_RATE ? 0.0f : 1.0f, last = NAN;
	for (int c = 0; c < cells; c++) {
		float v = h->v[k][(h->head - cells + c + HIST_N) % HIST_N];
		if (!isnan(v))
			top = MAX(top, v), last = v;
	}
	mvwaddnstr(w, y, x, label, 6);
	wmove(w, y, x + 7);
	for (int c = 0; c < cells; c++) {
		float v = h->v[k][(h->head - cells + c + HIST_N) % HIST_N];
		int lvl = isnan(v) || top <= 0 ? -1 : MIN(7, (int)(v / top * 7.999f));
		if (lvl < 0)
			waddstr(w, " ");
		else if (u->utf8)
			waddstr(w, bars[lvl]);
		else
			waddch(w, (chtype)ascii[lvl]);
	}
	char val[16];
	if (isnan(last))
		snprintf(val, sizeof val, " -");
	else if (unit == U_PCT)
		snprintf(val, sizeof val, " %.0f%%", 100 * last);
	else if (unit == U_TIMES)
		snprintf(val, sizeof val, " %.2fx", last);
	else
		snprintf(val, sizeof val, " %.0f", last);
	waddnstr(w, val, MAX(0, width - 7 - cells));
}

/* The draft's acceptance by position: accepted / proposed at each. */
static void draw_positions(const ui *u, WINDOW *w, int y, int x, int width)
{
	const core_stats *st = &u->view.snap.st;
	char line[128];
	size_t m = 0;
	bfmt(line, sizeof line, &m, "by position:");
	for (int i = 0; i < SPEC_MAX_K && st->spec_pos_proposed[i] > 0; i++)
		bfmt(line, sizeof line, &m, " %.0f",
		     100.0 * (double)st->spec_pos_accepted[i] / (double)st->spec_pos_proposed[i]);
	bfmt(line, sizeof line, &m, "%s", m == 12 ? " -" : "%");
	mvwaddnstr(w, y, x, line, width);
}

int hist_panel_draw(const ui *u, WINDOW *w, int y, int x, int width, int room)
{
	int need = hist_panel_rows(u);
	if (!need || room < need)
		return 0;
	char title[64];
	snprintf(title, sizeof title, "history (a cell = %.0f s)", HIST_PERIOD_S);
	wattrset(w, A_BOLD);
	mvwaddnstr(w, y + 1, x, title, width);
	wattrset(w, A_NORMAL);
	draw_series(u, w, y + 2, x, width, H_POOL, "pool", U_PCT);
	draw_series(u, w, y + 3, x, width, H_HITS, "hits", U_PCT);
	draw_series(u, w, y + 4, x, width, H_PREFILL, "pp t/s", U_RATE);
	draw_series(u, w, y + 5, x, width, H_DECODE, "tg t/s", U_RATE);
	if (u->p->draft_path) {
		draw_series(u, w, y + 6, x, width, H_ACCEPT, "accept", U_PCT);
		draw_series(u, w, y + 7, x, width, H_SPEED, "speed", U_TIMES);
		draw_positions(u, w, y + 8, x, width);
	}
	return need;
}
