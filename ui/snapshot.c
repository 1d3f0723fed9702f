/* ui/snapshot.c: /snapshot FILE: the pool as it is now, for slides and bug
 * reports.
 *
 * As text: a title line, the block map (a glyph per block, 64 a row, each
 * row after the number of its first block), the legend, the pool figures,
 * each running sequence's block table (and each idle tab's pinned blocks)
 * with who shares what, and with a draft its speed-up and the counters it
 * comes from, all from the latest snapshot, so it says what the panel says. FILE ending in .svg
 * gets a picture instead: a square per block in its tab's colour (shared
 * ones in the shared colour, cached ones pale, blocks back from host memory
 * or disk outlined), then the figures as text. Written atomically
 * (base/files.h); FILE may start with ~, a relative name is under the
 * working directory (the status line names the whole path), and a file that
 * is there is replaced only after a y to the question /save asks. UI thread
 * only. */
#include "ui/ui_int.h"

#include "base/files.h"
#include "kernels/kvq.h"
#include "ui/poolmap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SNAP_COLS 64             /* blocks per row */

static const char *tab_name(const ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return u->tabs[i]->chat.name;
	return NULL;
}

static int tab_number(const ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return i + 1;
	return 0;
}

static void text_map(const ui *u, sbuf *b)
{
	const link_snapshot *s = &u->view.snap;
	for (int64_t r = 0; r < s->n_blocks; r += SNAP_COLS) {
		sb_printf(b, "%5lld ", (long long)r);
		for (int64_t i = r; i < MIN(s->n_blocks, r + SNAP_COLS); i++)
			sb_printf(b, "%s", poolmap_glyph(poolmap_classify(&s->map[i]), true));
		sb_printf(b, "\n");
	}
	sb_printf(b, "      ");
	for (int c = PM_FREE; c < PM_N_CLASSES; c++)
		sb_printf(b, "%s %s  ", poolmap_glyph((enum poolmap_class)c, true), poolmap_name((enum poolmap_class)c));
	sb_printf(b, "\n");
}

/* Each running sequence: its tab and its blocks (ids and refcounts). */
static void text_tables(const ui *u, sbuf *b)
{
	const link_snapshot *s = &u->view.snap;
	if (s->n_seqs == 0)
		return;
	sb_printf(b, "\nblock tables (block:refcount)\n");
	for (int k = 0; k < s->n_seqs; k++) {
		const core_seq_info *q = &s->seqs[k];
		const char *name = tab_name(u, q->conv);
		if (q->index < 0) /* an idle tab's pinned blocks */
			sb_printf(b, "%d:%s pinned, %d tokens:", tab_number(u, q->conv), name ? name : "(server)",
			    q->n_tokens);
		else
			sb_printf(b, "%d:%s #%d, %d tokens:", tab_number(u, q->conv), name ? name : "(server)", q->index,
			    q->n_tokens);
		for (int j = 0; j < q->n_blocks; j++) {
			int32_t blk = s->seq_blocks[q->first + j];
			sb_printf(b, " %d:%d", blk, s->map[blk].refcount);
		}
		sb_printf(b, "\n");
	}
}

/* With a draft: the speed-up lines and the engine's counters they come from. */
static void text_draft(const ui *u, sbuf *b)
{
	const core_stats *st = &u->view.snap.st;
	if (!u->draft_path)
		return;
	char line[2][96];
	int n = poolmap_draft_lines(st, line);
	sb_printf(b, "\ndraft %s\n", u->draft_path);
	for (int i = 0; i < n; i++)
		sb_printf(b, "%s\n", line[i]);
	sb_printf(b, "decode steps with drafts: %lld steps, %lld tokens, %lld us\n", (long long)st->spec_dec_steps,
	    (long long)st->spec_dec_tokens, (long long)st->spec_dec_us);
	sb_printf(b, "decode steps without: %lld steps, %lld tokens, %lld us\n", (long long)st->plain_dec_steps,
	    (long long)st->plain_dec_tokens, (long long)st->plain_dec_us);
}

/* The counters the figures come from, as name=value pairs (the tests
 * recompute every figure from them). */
static void text_counters(const ui *u, sbuf *b)
{
	const link_snapshot *s = &u->view.snap;
	const core_stats *st = &s->st;
	sb_printf(b, "\ncounters: n_blocks=%lld block_tokens=%d n_ctx=%d blocks_used=%lld blocks_cached=%lld "
		  "blocks_free=%lld blocks_pinned=%lld slots_alloc=%lld slots_filled=%lld prompt_tokens=%lld "
		  "cached_tokens=%lld n_running=%d n_waiting=%d preemptions=%lld finished=%lld cow_copies=%lld "
		  "waste=%.17g waste_contig=%.17g kv_types=%s/%s kv_vs_f16=%.17g prefill_tps=%.17g "
		  "decode_tps=%.17g\n", (long long)s->n_blocks, s->block_tokens, s->n_ctx,
		  (long long)st->blocks_used, (long long)st->blocks_cached, (long long)st->blocks_free,
		  (long long)st->blocks_pinned, (long long)st->slots_alloc, (long long)st->slots_filled,
		  (long long)st->prompt_tokens, (long long)st->cached_tokens, st->n_running, st->n_waiting,
		  (long long)st->preemptions, (long long)st->finished, (long long)st->cow_copies, st->waste,
		  st->waste_contig, kv_type_name(st->kv_type_k), kv_type_name(st->kv_type_v), st->kv_vs_f16,
		  s->prefill_tps, s->decode_tps);
	const poolmap_memo *m = rows_memo(u);
	if (m)
		sb_printf(b, "remembered: has_busy=%d waste=%.17g waste_contig=%.17g cow_block=%d cow_tab=%d\n",
			  m->has_busy, m->waste, m->waste_contig, m->cow_block, m->cow_tab);
}

int snapshot_write_text(const ui *u, const char *path, err *e)
{
	sbuf b = {0};
	time_t now = time(NULL);
	char stamp[32];
	struct tm tm;
	strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
	sb_printf(&b, "pagechat KV pool, %s, %s: %lld blocks x %d tokens, %d tabs\n\n", u->model_name, stamp,
	    (long long)u->view.snap.n_blocks, u->view.snap.block_tokens, u->n_tabs);
	text_map(u, &b);
	poolmap_figures f;
	poolmap_format(&u->view.snap, rows_memo(u), &f);
	sb_printf(&b, "\n");
	for (int i = 0; i < f.n; i++)
		sb_printf(&b, "%s\n", f.line[i]);
	text_tables(u, &b);
	text_draft(u, &b);
	text_counters(u, &b);
	int rc = file_write_atomic(path, b.p, b.n, 0644, e);
	free(b.p);
	return rc;
}

/* The curses colours 0..7 as the terminal's usual RGB. */
static const char *rgb(int color)
{
	static const char *const c[] = {"#000000", "#cd3131", "#0dbc79", "#e5e510",
					"#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5"};
	return c[color & 7];
}

static const char *block_fill(const ui *u, const core_block_info *m, int64_t b)
{
	enum poolmap_class c = poolmap_classify(m);
	int conv = m->conv >= 0 ? m->conv : u->block_last ? u->block_last[b] : -1;
	int t = tab_number(u, conv);
	if (c == PM_SHARED || c == PM_PINNED_SHARED)
		return "#ffd700";
	if (c == PM_FREE)
		return "#eeeeee";
	return t ? rgb(u->p->tab_colors[u->tabs[t - 1]->color]) : "#999999";
}

static int write_svg(const ui *u, const char *path, err *e)
{
	const link_snapshot *s = &u->view.snap;
	poolmap_figures f;
	poolmap_format(s, rows_memo(u), &f);
	int64_t rows = (s->n_blocks + SNAP_COLS - 1) / SNAP_COLS;
	int cell = 12, w = SNAP_COLS * cell + 20, h = (int)rows * cell + 40 + 16 * f.n;
	sbuf b = {0};
	sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"monospace\" "
		"font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h);
	sb_printf(&b, "<text x=\"10\" y=\"16\">KV pool: %lld blocks x %d tokens</text>\n", (long long)s->n_blocks,
	    s->block_tokens);
	for (int64_t i = 0; i < s->n_blocks; i++) {
		const core_block_info *m = &s->map[i];
		enum poolmap_class c = poolmap_classify(m);
		sb_printf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s%s/>\n",
		    10 + (int)(i % SNAP_COLS) * cell, 24 + (int)(i / SNAP_COLS) * cell, cell - 2, cell - 2,
		    block_fill(u, m, i), c == PM_CACHED ? " fill-opacity=\"0.35\"" : "",
		    m->origin == 1 ? " stroke=\"#2472c8\"" : m->origin == 2 ? " stroke=\"#bc3fbc\"" : "");
	}
	for (int i = 0; i < f.n; i++)
		sb_printf(&b, "<text x=\"10\" y=\"%d\">%s</text>\n", 24 + (int)rows * cell + 16 * (i + 1), f.line[i]);
	sb_printf(&b, "</svg>\n");
	int rc = file_write_atomic(path, b.p, b.n, 0644, e);
	free(b.p);
	return rc;
}

void snapshot_write(ui *u, const char *path)
{
	size_t n = strlen(path);
	bool svg = n > 4 && !strcmp(path + n - 4, ".svg");
	err e = {0};
	if ((svg ? write_svg(u, path, &e) : snapshot_write_text(u, path, &e)) == 0)
		ui_status(u, false, "wrote the pool's snapshot to %s", path);
	else
		ui_status(u, true, "%s", e.msg);
}

void snapshot_cmd(ui *u, const char *arg)
{
	if (!*arg) {
		ui_status(u, true, "usage: /snapshot FILE (FILE.svg: a picture; else text)");
		return;
	}
	char path[4096];
	if (!ui_expand_home(u, "/snapshot", arg, path, sizeof path))
		return;
	struct stat st;
	if (lstat(path, &st) != 0) {
		snapshot_write(u, path);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		ui_status(u, true, "%s is %s, not a regular file: choose another name", path, file_kind(path));
		return;
	}
	free(u->pending_save); /* asked as /save asks (saved_confirm_save answers) */
	u->pending_save = xstrdup(path);
	u->pending_snapshot = true;
	u->mode = MODE_CONFIRM_SAVE;
	u->dirty = true;
}
