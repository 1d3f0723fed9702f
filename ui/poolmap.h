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

/* Figures as the pool panel prints them, each line at most width columns. */
enum { POOLMAP_MAX_LINES = 16 };
typedef struct poolmap_figures {
	char line[POOLMAP_MAX_LINES][96];
	int n;
} poolmap_figures;
void poolmap_format(const link_snapshot *s, poolmap_figures *out);

/* Blocks that sharing saves now: the references to blocks (sequences' and
 * pins') less the distinct blocks referenced, from the map (0 without one). */
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
