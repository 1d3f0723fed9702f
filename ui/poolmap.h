/* ui/poolmap.h: what the side panels show, computed from an engine snapshot.
 *
 * The block map: each KV block falls into a display class (free, cached,
 * used, filling, shared, pinned, pinned and shared) drawn with a glyph of its
 * own, so the map reads without colour too; the colour comes from the tab
 * that owns the block. A pool larger than the panel is drawn a group of
 * blocks per cell; a cell then shows the most notable class in its group
 * (shared over pinned over filling over used over cached over free), in the
 * colour of the conversation holding most of its blocks. The figures are
 * formatted as short labelled lines. Pure functions of the snapshot; no
 * curses. Any thread. */
#ifndef PAGECHAT_POOLMAP_H
#define PAGECHAT_POOLMAP_H

#include "link/link.h"

enum poolmap_class {
	PM_FREE,                 /* never used, or evicted */
	PM_CACHED,               /* free but still findable by the prefix cache */
	PM_USED,                 /* held by one sequence, full */
	PM_PARTIAL,              /* a sequence's tail block, being filled */
	PM_SHARED,               /* refcount > 1: several sequences read it */
	PM_PINNED,               /* a system prompt's block kept for its tab */
	PM_PINNED_SHARED,        /* pinned, and referenced more than once */
	PM_N_CLASSES
};

/* The display class of one block. */
enum poolmap_class poolmap_classify(const core_block_info *b);
/* Its glyph: UTF-8 block characters, or ASCII when utf8 is false. Static. */
const char *poolmap_glyph(enum poolmap_class c, bool utf8);
/* A short name for the legend ("used", "pinned+shared", ...). Static. */
const char *poolmap_name(enum poolmap_class c);

typedef struct poolmap_cell {
	uint8_t cls;             /* enum poolmap_class */
	int32_t conv;            /* conversation shown (its colour), -1 if none */
	int32_t last_conv;       /* cached blocks: the conversation that used them
	                            last (poolmap_cells' last[]), -1 if unknown */
	uint8_t origin;          /* the group's highest core_block_info.origin (1:
	                            back from host memory, 2: from disk), 0: none */
} poolmap_cell;

/* Blocks per cell so that n_blocks fit in max_cells cells (>= 1). */
int64_t poolmap_group(int64_t n_blocks, int max_cells);
/* Fills out[] with one cell per group of `group` blocks of map[n_blocks];
 * returns the number of cells (ceil(n_blocks / group)). out has room for it.
 * last (NULL: none) is the conversation that used each block last. */
int poolmap_cells(const core_block_info *map, int64_t n_blocks, int64_t group, const int32_t *last,
		  poolmap_cell *out);
/* Remembers in last[n_blocks] the conversation using each block now, so
 * cached blocks keep their tab's tint; last starts filled with -1. */
void poolmap_track(const core_block_info *map, int64_t n_blocks, int32_t *last);

/* What the UI remembers between snapshots for the figures (ui_rows.c fills
 * it): the waste of the last snapshot that had running sequences, so that
 * the figure stays on screen while all is idle, and the last block a copy
 * on write made. */
typedef struct poolmap_memo {
	bool has_busy;           /* waste/waste_contig below are from a busy snapshot */
	double waste, waste_contig;
	int32_t cow_block;       /* the last copy's block id, -1: none seen */
	int cow_tab;             /* its tab's number (1-based), 0: not a tab's */
} poolmap_memo;

/* Figures as the pool panel prints them: each line's long form, its
 * compact form (at most 33 columns, for a short or narrow panel) and
 * whether it is minor (dropped first where rows are few). */
enum { POOLMAP_MAX_LINES = 18 };
typedef struct poolmap_figures {
	char line[POOLMAP_MAX_LINES][96];
	char compact[POOLMAP_MAX_LINES][64];
	bool minor[POOLMAP_MAX_LINES];
	int n;
} poolmap_figures;
/* memo: NULL, or what the UI remembers (the waste when idle, the last copy). */
void poolmap_format(const link_snapshot *s, const poolmap_memo *memo, poolmap_figures *out);

/* The block tables' sums (link_snapshot.seqs: running sequences and idle
 * tabs' pins): *apart, their lengths added up (what as many independent
 * sequences would hold), and *held, the distinct blocks among them. */
void poolmap_table_sums(const link_snapshot *s, int64_t *apart, int64_t *held);
/* Blocks that sharing saves now: apart - held of the block tables; without
 * tables (a server's snapshot), the map's references less the distinct
 * blocks referenced (0 without a map either). */
int64_t poolmap_saved_blocks(const link_snapshot *s);

/* Speculative decoding against none, measured: the tokens per second of
 * decode steps that verified drafts over those of decode steps that did not
 * (core_stats.spec_dec_* / plain_dec_*, or their changes over a while):
 * (spec_tokens / spec_us) / (plain_tokens / plain_us). Below 1: the draft
 * slows decoding. -1 when either side has no tokens or no time. */
double poolmap_speedup(int64_t spec_tokens, int64_t spec_us, int64_t plain_tokens, int64_t plain_us);
/* The draft panel's speed-up lines from st's counters into line[0..2);
 * returns how many (1: no figure yet, and why). */
int poolmap_draft_lines(const core_stats *st, char (*line)[96]);

/* The prefix cache's hit rate so far: cached / prompt tokens (0 with none). */
double poolmap_hit_rate(const core_stats *st);

#endif
