/* engine/core_stats.c: the engine's figures, the block map for the panels,
 * and the invariant check. */
#include "engine/core_int.h"

#include <string.h>
#include <stdlib.h>

bool core_idle(const core *c)
{
	return c->running.n == 0 && c->waiting.n == 0;
}

int64_t core_n_blocks(const core *c)
{
	return kv_pool_n_blocks(c->pool);
}

int core_n_ctx(const core *c)
{
	return c->n_ctx;
}

/* Seconds; from half a millisecond (a small model's decode step) to the
 * minutes a long answer on a big one takes. */
const double core_hist_le[CORE_HIST_N] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
	0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80,
};

void core_hist_add(core_hist *h, double seconds)
{
	int i = 0;
	while (i < CORE_HIST_N && seconds > core_hist_le[i])
		i++;
	h->count[i]++;
	h->sum_s += seconds;
}

/* ---- figures ---- */

void core_get_stats(const core *c, core_stats *out)
{
	*out = c->st;
	out->max_running = c->max_running;
	int64_t nb = kv_pool_n_blocks(c->pool);
	memset(c->seen, 0, (size_t)nb);
	memset(c->fill, 0, (size_t)nb * sizeof *c->fill);
	int64_t filled_per_seq = 0;
	for (int i = 0; i < c->running.n; i++) {
		const seq *s = c->running.v[i];
		filled_per_seq += s->n_computed;
		for (int j = 0; j < s->kv.n_blocks; j++) {
			int32_t b = s->kv.blocks[j];
			int f = (int)MIN((int64_t)c->bt, MAX(0, (int64_t)s->n_computed - (int64_t)j * c->bt));
			c->seen[b] = 1;
			c->fill[b] = MAX(c->fill[b], f);
		}
	}
	out->slots_alloc = out->slots_filled = 0;
	for (int64_t b = 0; b < nb; b++)
		if (c->seen[b]) {
			out->slots_alloc += c->bt;
			out->slots_filled += c->fill[b];
		}
	out->waste = out->slots_alloc ? 1.0 - (double)out->slots_filled / (double)out->slots_alloc : 0;
	double contig = (double)c->running.n * c->n_ctx;
	out->waste_contig = contig > 0 ? 1.0 - (double)filled_per_seq / contig : 0;
	out->n_running = c->running.n;
	out->n_waiting = c->waiting.n;
	out->blocks_total = nb;
	out->blocks_free = kv_pool_n_free_blocks(c->pool);
	out->blocks_used = nb - out->blocks_free;
	out->blocks_cached = kv_prefix_n_cached(c->prefix);
	out->blocks_shared = 0;
	for (int64_t b = 0; b < nb; b++)
		out->blocks_shared += kv_pool_refcount(c->pool, (int32_t)b) > 1;
	/* blocks, not pins: conversations with one system prompt pin the same ones */
	memset(c->seen, 0, (size_t)nb);
	out->blocks_pinned = 0;
	for (int i = 0; i < c->n_pins; i++) {
		out->blocks_pinned += !c->seen[c->pins[i].block];
		c->seen[c->pins[i].block] = 1;
	}
	const llama_hparams *hp = llama_hp(c->model);
	out->kv_type_k = c->kv_type_k;
	out->kv_type_v = c->kv_type_v;
	out->kv_vs_f16 = (double)llama_kv_token_bytes(hp, KV_F16, KV_F16) /
			 (double)llama_kv_token_bytes(hp, c->kv_type_k, c->kv_type_v);
	tier_stats(c, out);
	kv_pool_stats ps = kv_pool_get_stats(c->pool, NULL, 0);
	out->kv_dev_bytes = ps.dev_bytes;
	out->kv_host_bytes = ps.host_bytes;
	out->kv_dev_layers = ps.dev_layers;
	out->n_layers = hp->n_layers;
	out->window = ps.window;
	out->win_layers = ps.n_win_layers;
	out->blocks_win_freed = ps.n_win_freed;
	out->blocks_win_held = ps.n_win_held;
}

/* ---- timing speculative decoding against plain decoding ---- */

enum step_kind step_kind(const core *c)
{
	bool drafted = false;
	for (int p = 0; p < c->n_plan; p++) {
		const step_item *it = &c->plan[p];
		if (it->count != 1 + it->n_draft || it->start + it->count != it->s->n_tokens + it->n_draft)
			return STEP_MIXED;
		drafted |= it->n_draft > 0;
	}
	return drafted ? STEP_SPEC : STEP_PLAIN;
}

void stats_decode_step(core *c, enum step_kind kind, double t0, int64_t gen0)
{
	if (kind == STEP_MIXED)
		return;
	/* whole microseconds, so that a figure made of them can be recomputed exactly */
	int64_t us = (int64_t)((now_s() - t0) * 1e6 + 0.5), got = c->st.generated_tokens - gen0;
	if (kind == STEP_SPEC) {
		c->st.spec_dec_steps++;
		c->st.spec_dec_us += us;
		c->st.spec_dec_tokens += got;
		c->probe_in--;
	} else {
		c->st.plain_dec_steps++;
		c->st.plain_dec_us += us;
		c->st.plain_dec_tokens += got;
		c->probe_in = c->draft_probe - 1;
	}
}

/* ---- the panels' views ---- */

void core_block_map(const core *c, core_block_info *map)
{
	int64_t nb = kv_pool_n_blocks(c->pool);
	for (int64_t b = 0; b < nb; b++) {
		int32_t rc = kv_pool_refcount(c->pool, (int32_t)b);
		map[b] = (core_block_info){
			.state = rc == 0 ? (kv_prefix_has_key(c->prefix, (int32_t)b) ? BLK_CACHED : BLK_FREE)
				: rc > 1 ? BLK_SHARED : BLK_USED,
			.conv = -1, .refcount = rc, .origin = c->origin[b], .cow_step = c->cow_step[b],
		};
	}
	for (int i = 0; i < c->n_pins; i++) {
		map[c->pins[i].block].state = BLK_PINNED;
		map[c->pins[i].block].conv = c->pins[i].conv;
	}
	for (int i = 0; i < c->running.n; i++) {
		const seq *s = c->running.v[i];
		for (int j = 0; j < s->kv.n_blocks; j++) {
			core_block_info *m = &map[s->kv.blocks[j]];
			if (m->conv < 0)
				m->conv = s->conv;
			bool partial = (int64_t)(j + 1) * c->bt > s->n_computed;
			if (partial && m->state == BLK_USED)
				m->state = BLK_PARTIAL;
		}
	}
}

static bool conv_running(const core *c, int conv)
{
	for (int i = 0; i < c->running.n; i++)
		if (c->running.v[i]->conv == conv)
			return true;
	return false;
}

/* Appends a table of pinned blocks (index -1) for each conversation that
 * pins blocks but runs no sequence, after the n tables so far; returns the
 * tables in all. */
static int pin_tables(const core *c, int n, int64_t nb, core_seq_info **seqs, int *cap_seqs, int32_t **blocks,
		      int *cap_blocks)
{
	for (int i = 0; i < c->n_pins; i++) {
		int conv = c->pins[i].conv, k = 0;
		while (k < i && c->pins[k].conv != conv)
			k++;
		if (k < i || conv_running(c, conv))
			continue; /* listed with its first pin, or it has a running table */
		xgrow(seqs, cap_seqs, n + 1, sizeof **seqs);
		core_seq_info *q = &(*seqs)[n++];
		*q = (core_seq_info){.conv = conv, .index = -1, .first = nb};
		for (int j = i; j < c->n_pins; j++)
			if (c->pins[j].conv == conv) {
				xgrow(blocks, cap_blocks, MAX(1, nb + 1), sizeof **blocks);
				(*blocks)[nb++] = c->pins[j].block;
				q->n_blocks++;
			}
		q->n_tokens = q->n_blocks * c->bt;
	}
	return n;
}

int core_seq_tables(const core *c, core_seq_info **seqs, int *cap_seqs, int32_t **blocks, int *cap_blocks)
{
	int64_t nb = 0;
	xgrow(seqs, cap_seqs, MAX(1, c->running.n), sizeof **seqs);
	for (int i = 0; i < c->running.n; i++) {
		const seq *s = c->running.v[i];
		xgrow(blocks, cap_blocks, MAX(1, nb + s->kv.n_blocks), sizeof **blocks);
		(*seqs)[i] = (core_seq_info){.conv = s->conv, .index = s->index, .n_blocks = s->kv.n_blocks,
					     .n_tokens = s->n_computed, .first = nb};
		memcpy(*blocks + nb, s->kv.blocks, (size_t)s->kv.n_blocks * sizeof **blocks);
		nb += s->kv.n_blocks;
	}
	return pin_tables(c, c->running.n, nb, seqs, cap_seqs, blocks, cap_blocks);
}

const char *core_notice(const core *c)
{
	return c->tier ? kv_tier_notice(c->tier) : NULL;
}

bool core_check(const core *c, err *e)
{
	int n = c->running.n + c->waiting.n;
	const kv_seq **seqs = xmalloc((size_t)MAX(1, n) * sizeof *seqs);
	for (int i = 0; i < c->running.n; i++)
		seqs[i] = &c->running.v[i]->kv;
	for (int i = 0; i < c->waiting.n; i++)
		seqs[c->running.n + i] = &c->waiting.v[i]->kv;
	int64_t nb = kv_pool_n_blocks(c->pool);
	int32_t *extra = xcalloc((size_t)nb, sizeof *extra);
	for (int i = 0; i < c->n_pins; i++)
		extra[c->pins[i].block]++;
	bool ok = kv_pool_check(c->pool, seqs, n, extra, e) && kv_prefix_check(c->prefix, e) &&
		  (!c->sp || spec_check(c, e));
	for (int i = 0; ok && i < c->waiting.n; i++)
		if (c->waiting.v[i]->kv.n_blocks != 0 && c->waiting.v[i]->n_computed == 0) {
			err_set(e, "waiting request %lld holds blocks", (long long)c->waiting.v[i]->req);
			ok = false;
		}
	if (ok && c->look_bad) {
		err_set(e, "waiting request %lld: its kept lookup differs from a fresh one (a cache changed "
			"without its version)", (long long)(c->look_bad - 1));
		ok = false;
	}
	free(extra);
	free(seqs);
	return ok;
}
