/* ui/ui_rows.c: the block tables panel, under the pool map.
 *
 * One row per running sequence, from the snapshot's tables
 * (link_snapshot.seqs), and one per idle tab that still pins blocks (its
 * system prompt's: a table with index -1): its blocks in order, each drawn
 * with the map's glyph for its class; blocks that several sequences or pins
 * hold (refcount > 1) in one bright colour that no tab has, the others in
 * the row's tab colour. Under the rows, who shares what: the blocks grouped
 * by the set of rows that hold them ("5 blocks shared by 1a,1b,1c (ref 4)":
 * ref is the blocks' refcount, pins included, the rows named in tab
 * order). The running rows come first, in the engine's order; the idle
 * tabs' rows after them only as far as the panel has room. A row is
 * labelled by its tab's number, and when a tab runs several sequences (/n,
 * /beams) by a letter per sequence, in the engine's order. Drawn from the
 * snapshot only. UI thread only. */
#include "ui/ui_int.h"

#include "ui/poolmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_MAX 12              /* sequences drawn at most */
#define COW_FLASH_S 0.8
#define COW_MAX 64

struct rows_prev {
	uint32_t *seen;          /* owned; [n_blocks] each block's cow_step when last seen */
	poolmap_memo memo;       /* the last busy waste and the last copy (the figures') */
	int32_t cow[COW_MAX];    /* blocks copied on write since (they flash) */
	double cow_until[COW_MAX];
	int n_cow;
};

static int tab_index(const ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return i;
	return -1;
}

short rows_conv_pair(const ui *u, int conv)
{
	int i = tab_index(u, conv);
	return i >= 0 && u->colors ? (short)(u->tabs[i]->color + 1) : 0;
}

/* The row's label: "2" for a tab's only sequence, "1a" for completion 0 of
 * a tab running several, "s" for another front-end's (the HTTP server). */
static void row_label(const ui *u, const link_snapshot *s, int k, char *buf, size_t cap)
{
	const core_seq_info *q = &s->seqs[k];
	int ti = tab_index(u, q->conv);
	if (ti < 0) {
		snprintf(buf, cap, "s");
		return;
	}
	int same = 0, before = 0; /* beams all have index 0: letters go by row order */
	for (int j = 0; j < s->n_seqs; j++) {
		same += s->seqs[j].conv == q->conv;
		before += j < k && s->seqs[j].conv == q->conv;
	}
	if (same > 1)
		snprintf(buf, cap, "%d%c", ti + 1, 'a' + before % 26);
	else
		snprintf(buf, cap, "%d", ti + 1);
}

/* The lines under the rows: what they hold together and who shares what;
 * none under a single row (nothing to share with). */
static int footer_lines(int n_rows, int share_rows)
{
	return n_rows > 1 ? 1 + share_rows : 0;
}

int rows_panel_rows(int n_tables, int share_rows)
{
	return n_tables ? 2 + n_tables + footer_lines(n_tables, share_rows) : 0;
}

int rows_panel_tables(const ui *u, int extra, int share_rows)
{
	const link_snapshot *s = &u->view.snap;
	int n_all = MIN(s->n_seqs, ROWS_MAX), n_run = 0;
	while (n_run < n_all && s->seqs[n_run].index >= 0)
		n_run++;
	int n = n_all;
	while (n > n_run && rows_panel_rows(n, share_rows) - rows_panel_rows(n_run, share_rows) > extra)
		n--;
	return n;
}

/* One sequence's blocks from column x, a cell per `group` blocks. */
static void draw_row(const ui *u, WINDOW *w, int y, int x, int k, int64_t group, int cells)
{
	const link_snapshot *s = &u->view.snap;
	const core_seq_info *q = &s->seqs[k];
	const int32_t *b = s->seq_blocks + q->first;
	short own = rows_conv_pair(u, q->conv);
	for (int c = 0; c < cells && (int64_t)c * group < q->n_blocks; c++) {
		int64_t j0 = (int64_t)c * group, j1 = MIN((int64_t)q->n_blocks, j0 + group);
		enum poolmap_class cls = PM_USED;
		bool shared = false;
		for (int64_t j = j0; j < j1; j++) {
			const core_block_info *m = &s->map[b[j]];
			enum poolmap_class cj = poolmap_classify(m);
			shared |= m->refcount > 1;
			if (j == j0 || cj == PM_SHARED || cj == PM_PINNED_SHARED)
				cls = cj;
		}
		if ((int64_t)(j1) * s->block_tokens > q->n_tokens && !shared)
			cls = PM_PARTIAL;
		attr_t a = shared ? (u->colors ? COLOR_PAIR(PAIR_SHARED) | A_BOLD : A_REVERSE)
				  : (own ? COLOR_PAIR(own) : A_NORMAL);
		for (int64_t j = j0; j < j1; j++)
			if (rows_is_copy(u, b[j])) /* a copy on write just made: flashes */
				a = (u->colors ? COLOR_PAIR(PAIR_SHARED) : 0) | A_REVERSE | A_BOLD;
		wattrset(w, a);
		mvwaddstr(w, y, x + c, poolmap_glyph(cls, u->utf8));
	}
	wattrset(w, A_NORMAL);
}

typedef struct share_group {
	uint32_t rows;           /* bit k: row k holds these blocks */
	int n_blocks;
	int rc_lo, rc_hi;        /* their refcounts */
} share_group;

static int by_size(const void *a, const void *b)
{
	return ((const share_group *)b)->n_blocks - ((const share_group *)a)->n_blocks;
}

int rows_wrap_line(WINDOW *w, int y, int x, int width, const char *line, int max_rows)
{
	int rows = 0, indent = 0, n = (int)strlen(line);
	while (n > 0 && rows < max_rows) {
		int room = MAX(8, width - indent), take = n;
		if (n > room) {
			take = room;
			while (take > room / 2 && line[take] != ' ' && line[take - 1] != ',')
				take--;
			if (line[take] != ' ' && line[take - 1] != ',')
				take = room; /* nowhere to break: cut */
		}
		if (w)
			mvwaddnstr(w, y + rows, x + indent, line, take);
		rows++;
		line += take, n -= take;
		while (*line == ' ')
			line++, n--;
		indent = 2;
	}
	return MAX(rows, 1);
}

/* Groups the first n_rows rows' shared blocks by the rows that hold them. */
static int share_groups(const link_snapshot *s, int n_rows, share_group *g, int cap)
{
	int n = 0;
	for (int k = 0; k < n_rows; k++) {
		const core_seq_info *q = &s->seqs[k];
		for (int j = 0; j < q->n_blocks; j++) {
			int32_t blk = s->seq_blocks[q->first + j];
			uint32_t rows = 0;
			bool earlier = false;
			for (int r = 0; r < n_rows; r++) {
				const core_seq_info *o = &s->seqs[r];
				for (int i = 0; i < o->n_blocks; i++)
					if (s->seq_blocks[o->first + i] == blk) {
						rows |= 1u << r;
						earlier |= r < k;
						break;
					}
			}
			if (earlier || !(rows & (rows - 1)))
				continue; /* counted with an earlier row, or held by one only */
			int rc = s->map[blk].refcount, i = 0;
			while (i < n && g[i].rows != rows)
				i++;
			if (i == n && n < cap)
				g[n++] = (share_group){.rows = rows, .rc_lo = rc, .rc_hi = rc};
			if (i < n) {
				g[i].n_blocks++;
				g[i].rc_lo = MIN(g[i].rc_lo, rc);
				g[i].rc_hi = MAX(g[i].rc_hi, rc);
			}
		}
	}
	qsort(g, (size_t)n, sizeof *g, by_size);
	return n;
}

/* Who holds a group, in tab order (rows of no tab last), a tab's rows in
 * row order; three or more letters of one tab in a row as a range
 * ("1,3a-3h"). */
static int share_who(const ui *u, const link_snapshot *s, uint32_t rows, int n_rows, char *out, size_t cap)
{
	char lab[32][16];
	int tabn[32], n = 0;
	for (int t = 0; t <= u->n_tabs; t++)
		for (int k = 0; k < n_rows; k++) {
			int ti = tab_index(u, s->seqs[k].conv);
			if (!(rows & 1u << k) || (ti < 0 ? u->n_tabs : ti) != t)
				continue;
			row_label(u, s, k, lab[n], sizeof lab[n]);
			tabn[n++] = ti;
		}
	size_t m = 0;
	out[0] = '\0';
	for (int i = 0; i < n && m + 16 < cap;) {
		int j = i; /* the run of one tab's lettered rows from i */
		while (j + 1 < n && tabn[j + 1] == tabn[i] && tabn[i] >= 0 && lab[i][strlen(lab[i]) - 1] >= 'a' &&
		       lab[j + 1][strlen(lab[j + 1]) - 1] == lab[j][strlen(lab[j]) - 1] + 1)
			j++;
		if (j - i >= 2)
			bfmt(out, cap, &m, "%s%s-%s", i ? "," : "", lab[i], lab[j]);
		else
			for (int k = i; k <= j; k++)
				bfmt(out, cap, &m, "%s%s", k ? "," : "", lab[k]);
		i = j + 1;
	}
	return (int)m;
}

/* Who shares what under the rows, over all n_all tables (drawn or not),
 * each group's line going on over more rows where it is wider than the
 * panel; lines rows at most. */
/* Draws who shares what from row y in at most `lines` rows (w NULL: draws
 * nothing); returns the rows it takes. */
static int draw_shares(const ui *u, WINDOW *w, int y, int x, int width, int n_all, int lines)
{
	const link_snapshot *s = &u->view.snap;
	share_group g[32];
	int n = share_groups(s, MIN(n_all, 32), g, (int)ARRAY_LEN(g));
	if (n == 0 && lines > 0) {
		if (w) {
			wattrset(w, A_DIM);
			mvwaddnstr(w, y, x, "no block is shared between them", width);
			wattrset(w, A_NORMAL);
		}
		return 1;
	}
	int row = 0;
	for (int i = 0; i < n && row < lines; i++) {
		char line[400], who[300];
		share_who(u, s, g[i].rows, MIN(n_all, 32), who, sizeof who);
		size_t m = 0;
		bfmt(line, sizeof line, &m, "%d block%s shared by %s", g[i].n_blocks, g[i].n_blocks > 1 ? "s" : "",
		     who);
		if (g[i].rc_lo == g[i].rc_hi)
			bfmt(line, sizeof line, &m, " (ref %d)", g[i].rc_lo);
		else
			bfmt(line, sizeof line, &m, " (ref %d-%d)", g[i].rc_lo, g[i].rc_hi);
		row += rows_wrap_line(w, y + row, x, width, line, lines - row);
	}
	return row;
}

int rows_panel_share_rows(const ui *u, int width, int most)
{
	return MAX(1, MIN(most, draw_shares(u, NULL, 0, 0, width, u->view.snap.n_seqs, most)));
}

/* The blocks all the tables hold together against the sum of their
 * lengths (what as many independent sequences would hold): the figures'
 * "sharing saves" is the difference (poolmap_table_sums). */
static void draw_held(const ui *u, WINDOW *w, int y, int x, int width, int n_drawn)
{
	const link_snapshot *s = &u->view.snap;
	int64_t apart, held;
	poolmap_table_sums(s, &apart, &held);
	char line[96];
	if (n_drawn < s->n_seqs)
		snprintf(line, sizeof line, "all %d hold %lld block%s; apart: %lld", s->n_seqs, (long long)held,
			 held == 1 ? "" : "s", (long long)apart);
	else
		snprintf(line, sizeof line, "they hold %lld block%s; apart: %lld", (long long)held, held == 1 ? "" : "s",
			 (long long)apart);
	mvwaddnstr(w, y, x, line, width);
}

int rows_panel_draw(const ui *u, WINDOW *w, int y, int x, int width, int room, int n_tables, int share_rows)
{
	const link_snapshot *s = &u->view.snap;
	int n = MIN(n_tables, room - 2 - footer_lines(n_tables, share_rows));
	if (n <= 0)
		return 0;
	int longest = 1;
	for (int k = 0; k < n; k++)
		longest = MAX(longest, s->seqs[k].n_blocks);
	int label = 4, cells = MAX(1, width - label);
	int64_t group = poolmap_group(longest, cells);
	char title[80];
	size_t m = 0;
	if (group > 1)
		bfmt(title, sizeof title, &m, "block tables (cell = %lld blocks)", (long long)group);
	else
		bfmt(title, sizeof title, &m, "block tables");
	if (n < s->n_seqs) /* the rest are left out for room, but counted below */
		bfmt(title, sizeof title, &m, ", %d of %d", n, s->n_seqs);
	wattrset(w, A_BOLD);
	mvwaddnstr(w, y + 1, x, title, width);
	for (int k = 0; k < n; k++) {
		char lab[16];
		row_label(u, s, k, lab, sizeof lab);
		short own = rows_conv_pair(u, s->seqs[k].conv);
		wattrset(w, own ? COLOR_PAIR(own) : A_NORMAL);
		mvwaddnstr(w, y + 2 + k, x, lab, label - 1);
		draw_row(u, w, y + 2 + k, x + label, k, group, cells);
	}
	if (footer_lines(n, share_rows)) {
		draw_held(u, w, y + 2 + n, x, width, n);
		draw_shares(u, w, y + 3 + n, x, width, s->n_seqs, share_rows);
	}
	return 2 + n + footer_lines(n, share_rows);
}

/* ---- copy-on-write, seen between two snapshots ---- */

/* Blocks whose copy-on-write stamp moved since the last snapshot are new
 * copies: they flash for a moment. */
static void track_copies(ui *u)
{
	const link_snapshot *s = &u->view.snap;
	struct rows_prev *p = u->rows_prev;
	bool first = !p;
	if (first) {
		p = u->rows_prev = xcalloc(1, sizeof *p);
		p->seen = xcalloc((size_t)MAX(1, s->n_blocks), sizeof *p->seen);
		p->memo.cow_block = -1;
	}
	if (s->st.n_running > 0 && s->st.slots_alloc > 0) {
		p->memo.has_busy = true;
		p->memo.waste = s->st.waste;
		p->memo.waste_contig = s->st.waste_contig;
	}
	double now = now_s();
	for (int i = 0; i < p->n_cow; i++)
		if (p->cow_until[i] < now) {
			p->n_cow--;
			p->cow[i] = p->cow[p->n_cow];
			p->cow_until[i] = p->cow_until[p->n_cow];
			i--;
		}
	for (int64_t b = 0; b < s->n_blocks; b++) {
		if (s->map[b].cow_step == p->seen[b])
			continue;
		p->seen[b] = s->map[b].cow_step;
		if (first)
			continue;
		int slot = p->n_cow < COW_MAX ? p->n_cow++ : 0;
		p->cow[slot] = (int32_t)b;
		p->memo.cow_block = (int32_t)b;
		p->memo.cow_tab = tab_index(u, s->map[b].conv) + 1;
		p->cow_until[slot] = now + COW_FLASH_S;
	}
}

const poolmap_memo *rows_memo(const ui *u)
{
	return u->rows_prev ? &u->rows_prev->memo : NULL;
}

bool rows_is_copy(const ui *u, int32_t block)
{
	const struct rows_prev *p = u->rows_prev;
	for (int i = 0; p && i < p->n_cow; i++)
		if (p->cow[i] == block)
			return true;
	return false;
}

void rows_on_snapshot(ui *u)
{
	const link_snapshot *s = &u->view.snap;
	if (!u->block_last) {
		u->block_last = xmalloc((size_t)MAX(1, s->n_blocks) * sizeof *u->block_last);
		for (int64_t b = 0; b < s->n_blocks; b++)
			u->block_last[b] = -1;
	}
	poolmap_track(s->map, s->n_blocks, u->block_last);
	track_copies(u);
	hist_on_snapshot(u);
	if (s->st.has_store && !s->st.store_writable && !u->store_noted) {
		u->store_noted = true;
		ui_status(u, true, "the KV disk tier cannot write (read-only or full): blocks are no longer "
			  "kept on disk");
	}
}

void rows_deinit(ui *u)
{
	free(u->block_last);
	u->block_last = NULL;
	hist_free(u);
	if (u->rows_prev) {
		free(u->rows_prev->seen);
		free(u->rows_prev);
		u->rows_prev = NULL;
	}
}

const char *const rows_figure_help[] = {
	"The pool panel's figures (F1 again: back to the keys)",
	"The side panel's figures",
	"used/cached/free  blocks held by sequences / free but still findable",
	"                  by the prefix cache / empty; a block = block_size tok",
	"pinned N blocks   system prompts kept for their tabs",
	"held N tok        tokens whose K/V live sequences hold now",
	"sharing saves     the block tables' lengths added up (\"apart\") less",
	"                  the distinct blocks they hold: what sharing",
	"                  (prefixes, forks, /n, /beams) does not store, in",
	"                  tokens, blocks and % of the pool's blocks",
	"cache skipped     prompt tokens the prefix cache gave, of all so far",
	"waste             unfilled slots in running sequences' blocks (paged),",
	"                  against the same if each reserved a whole context;",
	"                  while nothing runs, the last answers' (\"last\")",
	"copy-on-write     blocks copied before a shared block was written (a",
	"                  fork, /n, /beams): the count, and the last copy's",
	"                  block and tab; the copy flashes in the tables",
	"cached/hit tiers  cached blocks in the pool, host RAM and on disk",
	"                  (bytes); each tier's share of all prompt tokens",
	"block tables      each running sequence's blocks in order, and an idle",
	"                  tab's pinned ones: shared ones in one colour,",
	"                  \"shared by\" who, ref = refcount",
	"speed-up Nx       with a draft: tokens/s of decode steps that verified",
	"                  drafts over tokens/s of decode steps without (one",
	"                  in 16 runs without it to measure); below 1x the",
	"                  draft slows decoding. \"speed\" in the history: the",
	"                  same over each sample's steps",
	"map colours       tab colour: its blocks; yellow (no tab's): shared;",
	"                  dim tint: cached after that tab; blue/magenta: back",
	"                  from host RAM / disk",
	"any other key closes this help",
};
const int rows_n_figure_help = (int)ARRAY_LEN(rows_figure_help);
