/* ui/poolmap.c: block classes, grouping and the pool figures. */
#include "ui/poolmap.h"

#include "kernels/kvq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum poolmap_class poolmap_classify(const core_block_info *b)
{
	switch (b->state) {
	case BLK_CACHED:
		return PM_CACHED;
	case BLK_USED:
		return PM_USED;
	case BLK_PARTIAL:
		return b->refcount > 1 ? PM_SHARED : PM_PARTIAL;
	case BLK_SHARED:
		return PM_SHARED;
	case BLK_PINNED:
		return b->refcount > 1 ? PM_PINNED_SHARED : PM_PINNED;
	default:
		return PM_FREE;
	}
}

static const struct {
	const char *utf8, *ascii, *name;
} classes[PM_N_CLASSES] = {
	[PM_FREE] = {"\u00b7", ".", "free"},
	[PM_CACHED] = {"\u2591", "o", "cached"},
	[PM_USED] = {"\u2588", "#", "used"},
	[PM_PARTIAL] = {"\u2584", "_", "filling"},
	[PM_SHARED] = {"\u2592", "=", "shared"},
	[PM_PINNED] = {"\u2593", "p", "pinned"},
	[PM_PINNED_SHARED] = {"\u25a0", "P", "pinned+shared"},
};

const char *poolmap_glyph(enum poolmap_class c, bool utf8)
{
	return utf8 ? classes[c].utf8 : classes[c].ascii;
}

const char *poolmap_name(enum poolmap_class c)
{
	return classes[c].name;
}

/* How notable a class is when a cell stands for several blocks. */
static int rank(enum poolmap_class c)
{
	static const int r[PM_N_CLASSES] = {
		[PM_FREE] = 0, [PM_CACHED] = 1, [PM_USED] = 2, [PM_PARTIAL] = 3,
		[PM_PINNED] = 4, [PM_SHARED] = 5, [PM_PINNED_SHARED] = 6,
	};
	return r[c];
}

int64_t poolmap_group(int64_t n_blocks, int max_cells)
{
	if (max_cells < 1)
		max_cells = 1;
	return MAX(1, (n_blocks + max_cells - 1) / max_cells);
}

void poolmap_track(const core_block_info *map, int64_t n_blocks, int32_t *last)
{
	for (int64_t b = 0; b < n_blocks; b++)
		if (map[b].conv >= 0)
			last[b] = map[b].conv;
		else if (map[b].state == BLK_FREE)
			last[b] = -1;
}

int poolmap_cells(const core_block_info *map, int64_t n_blocks, int64_t group, const int32_t *last,
		  poolmap_cell *out)
{
	int n = 0;
	for (int64_t b0 = 0; b0 < n_blocks; b0 += group, n++) {
		int64_t b1 = MIN(n_blocks, b0 + group);
		enum poolmap_class best = PM_FREE;
		int32_t last_conv = -1;
		uint8_t origin = 0;
		/* the owner: the conversation holding most of the group (few distinct
		 * ones, so a small linear table does) */
		int32_t conv[8];
		int count[8], n_conv = 0;
		for (int64_t b = b0; b < b1; b++) {
			enum poolmap_class c = poolmap_classify(&map[b]);
			if (rank(c) > rank(best))
				best = c;
			origin = MAX(origin, map[b].origin);
			if (last && last[b] >= 0)
				last_conv = last[b];
			if (map[b].conv < 0)
				continue;
			int k = 0;
			while (k < n_conv && conv[k] != map[b].conv)
				k++;
			if (k == n_conv && n_conv < 8)
				conv[n_conv] = map[b].conv, count[n_conv++] = 0;
			if (k < n_conv)
				count[k]++;
		}
		int top = -1;
		for (int k = 0; k < n_conv; k++)
			if (top < 0 || count[k] > count[top])
				top = k;
		out[n] = (poolmap_cell){.cls = (uint8_t)best, .conv = top < 0 ? -1 : conv[top],
					.last_conv = last_conv, .origin = origin};
	}
	return n;
}

double poolmap_hit_rate(const core_stats *st)
{
	return st->prompt_tokens > 0 ? (double)st->cached_tokens / (double)st->prompt_tokens : 0;
}

double poolmap_speedup(int64_t spec_tokens, int64_t spec_us, int64_t plain_tokens, int64_t plain_us)
{
	if (spec_tokens <= 0 || spec_us <= 0 || plain_tokens <= 0 || plain_us <= 0)
		return -1;
	return ((double)spec_tokens * (double)plain_us) / ((double)spec_us * (double)plain_tokens);
}

int poolmap_draft_lines(const core_stats *st, char (*line)[96])
{
	double x = poolmap_speedup(st->spec_dec_tokens, st->spec_dec_us, st->plain_dec_tokens, st->plain_dec_us);
	if (x < 0) {
		snprintf(line[0], sizeof line[0], "speed-up -  (%s)",
			 st->spec_dec_steps ? "no plain step yet" : "no drafted step yet");
		return 1;
	}
	snprintf(line[0], sizeof line[0], "speed-up %.2fx vs no draft%s", x, x < 1 ? ": slower" : "");
	snprintf(line[1], sizeof line[1], "drafted %.0f t/s, plain %.0f t/s",
		 1e6 * (double)st->spec_dec_tokens / (double)st->spec_dec_us,
		 1e6 * (double)st->plain_dec_tokens / (double)st->plain_dec_us);
	return 2;
}

/* "12K", "3.4M", "1.2G": bytes in at most five columns. */
static const char *short_bytes(char *buf, size_t cap, int64_t bytes)
{
	static const char units[] = "BKMGT";
	double v = (double)bytes;
	int u = 0;
	while (v >= 1000 && u < 4)
		v /= 1024, u++;
	snprintf(buf, cap, v < 10 && u ? "%.1f%c" : "%.0f%c", v, units[u]);
	return buf;
}

void poolmap_table_sums(const link_snapshot *s, int64_t *apart, int64_t *held)
{
	*apart = *held = 0;
	if (s->n_seqs <= 0 || s->n_blocks <= 0)
		return;
	uint8_t *seen = xcalloc((size_t)s->n_blocks, 1);
	for (int k = 0; k < s->n_seqs; k++) {
		const core_seq_info *q = &s->seqs[k];
		*apart += q->n_blocks;
		for (int j = 0; j < q->n_blocks; j++) {
			int32_t b = s->seq_blocks[q->first + j];
			if (b >= 0 && b < s->n_blocks && !seen[b]) {
				seen[b] = 1;
				(*held)++;
			}
		}
	}
	free(seen);
}

int64_t poolmap_saved_blocks(const link_snapshot *s)
{
	int64_t refs = 0, held = 0;
	if (s->n_seqs > 0) {
		poolmap_table_sums(s, &refs, &held);
		return refs - held;
	}
	for (int64_t b = 0; s->map && b < s->n_blocks; b++)
		if (s->map[b].refcount > 0) {
			refs += s->map[b].refcount;
			held++;
		}
	return refs - held;
}

/* The lower tiers: cached blocks in each and the prompt tokens each gave
 * back (kv/tier.h); nothing without them. */
static int format_tiers(const core_stats *st, poolmap_figures *out, int n)
{
	if (st->host_blocks <= 0 && !st->has_store)
		return n;
	char b[16];
	const char *disk = st->has_store ? short_bytes(b, sizeof b, st->store_bytes) : "-";
	const char *off = st->has_store && !st->store_writable ? " off" : "";
	snprintf(out->line[n], sizeof out->line[0], "cached blocks: pool %lld  RAM %lld; disk %s bytes%s",
		 (long long)st->blocks_cached, (long long)(st->host_keyed + st->host_swapped), disk, off);
	snprintf(out->compact[n++], sizeof out->compact[0], "cached: pool %lld RAM %lld disk %s%s",
		 (long long)st->blocks_cached, (long long)(st->host_keyed + st->host_swapped), disk, off);
	double p = (double)MAX(1, st->prompt_tokens);
	int64_t pool = st->cached_tokens - st->cached_host - st->cached_store;
	snprintf(out->line[n], sizeof out->line[0], "hit pool %.1f%% RAM %.1f%% disk %.1f%%", 100 * pool / p,
		 100 * st->cached_host / p, 100 * st->cached_store / p);
	snprintf(out->compact[n++], sizeof out->compact[0], "hit pool %.0f%% RAM %.0f%% disk %.0f%%", 100 * pool / p,
		 100 * st->cached_host / p, 100 * st->cached_store / p);
	return n;
}

static const char *plural(int64_t n)
{
	return n == 1 ? "" : "s";
}

/* Nothing runs and nothing ran yet: the waste of the tables held now, idle
 * tabs' pins, which are whole blocks (paged: none), against a whole context
 * reserved per table. false without tables. */
static bool pins_waste(const link_snapshot *s, double *w, double *wc)
{
	int64_t tokens = 0;
	for (int k = 0; k < s->n_seqs; k++)
		tokens += s->seqs[k].n_tokens;
	if (s->n_seqs <= 0 || s->n_ctx <= 0)
		return false;
	*w = 0;
	*wc = 1.0 - (double)tokens / ((double)s->n_seqs * s->n_ctx);
	return true;
}

/* The waste line: now while sequences run, else the last busy snapshot's
 * (memo), so the comparison stays on screen between answers; before any
 * answer, that of the pinned prompts' tables. */
static void format_waste(const link_snapshot *s, const poolmap_memo *memo, poolmap_figures *out, int n)
{
	const core_stats *st = &s->st;
	bool live = st->n_running > 0 && st->slots_alloc > 0;
	bool last = !live && memo && memo->has_busy;
	double w = last ? memo->waste : st->waste, wc = last ? memo->waste_contig : st->waste_contig;
	const char *when = last ? " (last answers)" : "", *brief = last ? " (last)" : "";
	if (!live && !last) {
		if (!pins_waste(s, &w, &wc)) {
			snprintf(out->line[n], sizeof out->line[0], "waste: none yet (nothing held)");
			snprintf(out->compact[n], sizeof out->compact[0], "waste: none yet (nothing held)");
			return;
		}
		when = " (pinned prompts)", brief = " (pins)";
	}
	snprintf(out->line[n], sizeof out->line[0], "waste%s: paged %.1f%% of held slots; %.1f%% if each reserved "
		 "%d tok", when, 100 * w, 100 * wc, s->n_ctx);
	snprintf(out->compact[n], sizeof out->compact[0], "waste%s %.1f%%, reserved %.0f%%", brief, 100 * w,
		 100 * wc);
}

/* Copies on write: the engine's count, and the block made last. */
static void format_cow(const core_stats *st, const poolmap_memo *memo, poolmap_figures *out, int n)
{
	long long c = (long long)st->cow_copies;
	char last[48] = "";
	if (c > 0 && memo && memo->cow_block >= 0) {
		if (memo->cow_tab > 0)
			snprintf(last, sizeof last, " (last #%d, tab %d)", memo->cow_block, memo->cow_tab);
		else
			snprintf(last, sizeof last, " (last #%d)", memo->cow_block);
	}
	snprintf(out->line[n], sizeof out->line[0], "copy-on-write: %lld block%s copied%s", c, plural(c), last);
	snprintf(out->compact[n], sizeof out->compact[0], "copy-on-write %lld%s", c, last);
}

/* Sliding windows (kv/pool.h): the blocks whose windowed layers no window
 * reaches any more, and what the pool holds of the K/V that full attention
 * in every layer would hold for the same blocks. */
static int format_windows(const core_stats *st, poolmap_figures *out, int n)
{
	int64_t used = st->blocks_win_freed + st->blocks_win_held;
	int64_t full = used * MAX(1, st->n_layers);
	int64_t held = used * (st->n_layers - st->win_layers) + st->blocks_win_held * st->win_layers;
	double pct = full ? 100.0 * (double)held / (double)full : 100.0;
	snprintf(out->line[n], sizeof out->line[0], "window %d tok: %lld blocks freed in %d/%d layers", st->window,
		 (long long)st->blocks_win_freed, st->win_layers, st->n_layers);
	snprintf(out->compact[n++], sizeof out->compact[0], "window %d tok: %lld freed", st->window,
		 (long long)st->blocks_win_freed);
	snprintf(out->line[n], sizeof out->line[0], "K/V held %.1f%% of full attention's", pct);
	snprintf(out->compact[n++], sizeof out->compact[0], "K/V held %.1f%% of full attn", pct);
	return n;
}

void poolmap_format(const link_snapshot *s, const poolmap_memo *memo, poolmap_figures *out)
{
	const core_stats *st = &s->st;
	int n = 0;
	memset(out->minor, 0, sizeof out->minor);
	/* a line's long form, then its compact one */
#define LINE(...) snprintf(out->line[n], sizeof out->line[0], __VA_ARGS__)
#define COMPACT(...) snprintf(out->compact[n++], sizeof out->compact[0], __VA_ARGS__)
	LINE("blocks %lld x %d tokens", (long long)s->n_blocks, s->block_tokens);
	out->minor[n] = true;
	COMPACT("blocks %lld x %d tok", (long long)s->n_blocks, s->block_tokens);
	LINE("KV %s/%s: %.2fx the tokens of f16", kv_type_name(st->kv_type_k), kv_type_name(st->kv_type_v),
	     st->kv_vs_f16);
	out->minor[n] = true;
	COMPACT("KV %s/%s: %.2fx f16's tok", kv_type_name(st->kv_type_k), kv_type_name(st->kv_type_v), st->kv_vs_f16);
	/* the pool's free list holds the cached blocks too: show them apart */
	LINE("used %lld  cached %lld  free %lld", (long long)st->blocks_used,
	     (long long)st->blocks_cached, (long long)(st->blocks_free - st->blocks_cached));
	COMPACT("used %lld cached %lld free %lld", (long long)st->blocks_used, (long long)st->blocks_cached,
		(long long)(st->blocks_free - st->blocks_cached));
	LINE("pinned %lld block%s  held %lld tok", (long long)st->blocks_pinned, plural(st->blocks_pinned),
	     (long long)st->slots_filled);
	COMPACT("pinned %lld  held %lld tok", (long long)st->blocks_pinned, (long long)st->slots_filled);
	int64_t saved = poolmap_saved_blocks(s);
	double pct = 100.0 * (double)saved / (double)MAX(1, s->n_blocks);
	if (saved > 0) {
		LINE("sharing saves %lld tokens = %lld block%s (%.1f%% of the pool)",
		     (long long)saved * s->block_tokens, (long long)saved, plural(saved), pct);
		COMPACT("sharing saves %lld block%s (%.1f%%)", (long long)saved, plural(saved), pct);
	} else {
		LINE("sharing saves nothing now");
		COMPACT("sharing saves nothing now");
	}
	if (st->window > 0)
		n = format_windows(st, out, n);
	LINE("cache skipped %lld/%lld prompt tok", (long long)st->cached_tokens, (long long)st->prompt_tokens);
	COMPACT("cache skipped %lld/%lld tok", (long long)st->cached_tokens, (long long)st->prompt_tokens);
	format_waste(s, memo, out, n++);
	format_cow(st, memo, out, n++);
	LINE("tok/s  prefill %.0f  decode %.0f", s->prefill_tps, s->decode_tps);
	COMPACT("tok/s prefill %.0f decode %.0f", s->prefill_tps, s->decode_tps);
	LINE("queue %d waiting  %d running", st->n_waiting, st->n_running);
	COMPACT("queue %d waiting  %d running", st->n_waiting, st->n_running);
	LINE("preempted %lld  finished %lld", (long long)st->preemptions, (long long)st->finished);
	COMPACT("preempted %lld finished %lld", (long long)st->preemptions, (long long)st->finished);
	if (st->kv_dev_bytes > 0) {
		/* where the K/V live: the device's layers and the CPU's (partial offload) */
		char d[16], h[16];
		short_bytes(d, sizeof d, st->kv_dev_bytes), short_bytes(h, sizeof h, st->kv_host_bytes);
		LINE("KV on GPU %s (%d/%d layers), CPU %s", d, st->kv_dev_layers, st->n_layers, h);
		COMPACT("KV GPU %s (%d/%d) CPU %s", d, st->kv_dev_layers, st->n_layers, h);
	}
#undef LINE
#undef COMPACT
	out->n = format_tiers(st, out, n);
}
