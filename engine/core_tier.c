/* engine/core_tier.c: the engine's side of the lower KV tiers (kv_tier.h).
 *
 * Demotion rides on the prefix cache's evict hook: when the pool hands out a
 * cached block, its bytes are copied to tier 1 first. Publication writes
 * newly keyed blocks to the store. A lookup goes on below the pool where the
 * prefix cache stops, and admission brings those blocks back into fresh
 * pool blocks (the scheduler counted them as blocks to take).
 * Swapping a preempted sequence moves only its unpublished blocks (usually
 * the last, partial one) to tier 1: its published blocks are cached and come
 * back through the lookup like anyone's. If they do not all come back, the
 * swapped blocks are useless (a sequence's blocks must be contiguous) and the
 * sequence recomputes from what did. */
#include "engine/core_int.h"

#include "kv/store.h"

#include <stdlib.h>
#include <string.h>

/* Bytes per second a block copy is assumed to move (host memory); only the
 * swap-or-recompute choice uses it. */
#define COPY_BPS 8e9

static void on_evict(void *ctx, int32_t b, uint64_t key, const int32_t *tokens)
{
	core *c = ctx;
	c->origin[b] = 0;
	/* a block without its W part (kv/pool.h) is not whole: not kept */
	if (!key || !c->tier || kv_pool_w_of(c->pool, b) < 0)
		return;
	kv_pool_read_block(c->pool, b, c->blk_out);
	kv_tier_demote(c->tier, key, tokens, c->blk_out);
}

int tier_init(core *c, const core_params *p, err *e)
{
	size_t nb = (size_t)kv_pool_n_blocks(c->pool), bb = (size_t)kv_pool_bytes_per_block(c->pool);
	c->origin = xcalloc(nb, 1);
	c->cow_step = xcalloc(nb, sizeof *c->cow_step);
	c->preempt = p->preempt;
	if (p->host_blocks <= 0 && !p->kv_store)
		return 0;
	/* the store's directory is checked before the model is hashed for it
	 * (a refused one costs no read of the weights) */
	if (p->kv_store && kv_store_check_dir(p->kv_store, e))
		return -1;
	kv_tier_params tp = {
		.block_bytes = bb, .block_tokens = c->bt, .host_blocks = p->host_blocks,
		.store_dir = p->kv_store, .store_max_bytes = p->kv_store_max,
		.fingerprint = p->kv_store ? kv_tier_fingerprint(p->model, p->kv_type_k, p->kv_type_v, c->bt,
								 p->kv_store) : 0,
	};
	if (!(c->tier = kv_tier_new(&tp, e)))
		return -1;
	c->lower = xmalloc(nb * sizeof *c->lower);
	c->blk_in = xmalloc(bb);
	c->blk_out = xmalloc(bb);
	kv_prefix_set_evict_hook(c->prefix, on_evict, c);
	return 0;
}

void tier_free(core *c)
{
	if (c->prefix)
		kv_prefix_set_evict_hook(c->prefix, NULL, NULL);
	kv_tier_free(c->tier);
	free(c->origin);
	free(c->cow_step);
	free(c->lower);
	free(c->blk_in);
	free(c->blk_out);
}

/* Blocks of s from block `from` on (key: the chained key of block from - 1)
 * found in the lower tiers, consecutively; their keys to c->lower. From
 * memory (kv_tier_find), or with the store's files checked (probe). */
static int lookup_lower(core *c, const seq *s, int from, uint64_t key, bool probe)
{
	if (!c->tier)
		return 0;
	int n = 0;
	for (int b = from; (int64_t)(b + 1) * c->bt <= s->n_tokens - 1; b++) {
		const int32_t *toks = s->tokens + (size_t)b * c->bt;
		key = kv_prefix_chain_key(c->prefix, key, b, toks, &s->chain);
		enum kv_tier_where w = probe ? kv_tier_probe(c->tier, key, toks) : kv_tier_find(c->tier, key, toks);
		if (w == TIER_MISS)
			break;
		c->lower[n++] = key;
	}
	return n;
}

/* f with s's swapped blocks counted, when the cache gives back at least the
 * blocks before them (and not already all that was computed): the hits
 * stop there. */
static void count_swapped(const core *c, const seq *s, found *f)
{
	const seq_swap *w = &s->swap;
	int got = f->hits + f->lower;
	if (w->n == 0 || got < w->keyed || got * c->bt >= w->computed)
		return;
	f->swap = true;
	if (f->hits >= w->keyed) {
		f->hits = w->keyed;
		f->lower = 0;
		f->free_hits = 0;
		for (int i = 0; i < f->hits; i++)
			f->free_hits += kv_pool_is_free(c->pool, c->hits[i]);
	} else {
		f->lower = w->keyed - f->hits;
	}
}

/* Sliding windows: the pool hits a window can use (kv_pool_window_hits),
 * the rest left to the lower tiers or to computing. */
static void window_cut(core *c, found *f)
{
	int m = kv_pool_window_hits(c->pool, c->hits, f->hits);
	if (m == f->hits)
		return;
	f->hits = m;
	f->free_hits = 0;
	for (int i = 0; i < m; i++)
		f->free_hits += kv_pool_is_free(c->pool, c->hits[i]);
	f->last_key = kv_prefix_root(c->prefix);
	if (m)
		kv_prefix_key_of(c->prefix, c->hits[m - 1], &f->last_key);
}

found tier_look(core *c, const seq *s)
{
	found f = {0};
	f.hits = kv_prefix_lookup_chain(c->prefix, s->tokens, s->n_tokens, &s->chain, c->hits, &f.free_hits,
					&f.last_key);
	window_cut(c, &f);
	f.lower = lookup_lower(c, s, f.hits, f.last_key, false);
	count_swapped(c, s, &f);
	f.computed = f.swap ? s->swap.computed : (f.hits + f.lower) * c->bt;
	f.from_free = f.lower + (f.swap ? s->swap.n : 0);
	return f;
}

/* The versions of everything a lookup reads, summed (each only grows, so
 * the sum changes when any of them does); never 0. */
static uint64_t look_stamp(const core *c)
{
	return 1 + kv_prefix_version(c->prefix) + kv_pool_version(c->pool) +
	       (c->tier ? kv_tier_version(c->tier) : 0);
}

static bool same_found(const found *a, const found *b)
{
	return a->hits == b->hits && a->free_hits == b->free_hits && a->lower == b->lower &&
	       a->swap == b->swap && a->last_key == b->last_key && a->computed == b->computed &&
	       a->from_free == b->from_free;
}

found tier_look_kept(core *c, seq *s)
{
	uint64_t now = look_stamp(c);
	if (s->look.stamp != now) {
		s->look.f = tier_look(c, s);
		s->look.stamp = now;
		c->st.lookups++;
	} else if (c->check && !c->look_bad) {
		found f = tier_look(c, s);
		if (!same_found(&f, &s->look.f))
			c->look_bad = s->req + 1;
	}
	return s->look.f;
}

void tier_probe(core *c, const seq *s)
{
	if (!c->tier)
		return;
	int free_hits;
	uint64_t key;
	int hits = kv_prefix_lookup_chain(c->prefix, s->tokens, s->n_tokens, &s->chain, c->hits, &free_hits, &key);
	lookup_lower(c, s, hits, key, true);
}

int tier_take(core *c, seq *s, int n)
{
	for (int i = 0; i < n; i++) {
		int b = s->kv.n_blocks;
		const int32_t *toks = s->tokens + (size_t)b * c->bt;
		enum kv_tier_where from;
		if (!kv_tier_load(c->tier, c->lower[i], toks, c->blk_in, &from))
			return i;
		int32_t blk = kv_pool_alloc(c->pool);
		if (blk < 0)
			return i;
		double t0 = now_s();
		kv_pool_write_block(c->pool, blk, c->blk_in);
		kv_tier_add_time(c->tier, now_s() - t0, 0, 0);
		kv_prefix_publish(c->prefix, blk, c->lower[i], toks);
		kv_seq_push_fresh(c->pool, &s->kv, blk);
		/* whole blocks, all computed: the next query is past them */
		kv_seq_window_release(c->pool, &s->kv, (int64_t)s->kv.n_blocks * c->bt);
		c->origin[blk] = from == TIER_HOST ? 1 : 2;
		if (!s->counted)
			*(from == TIER_HOST ? &c->st.cached_host : &c->st.cached_store) += c->bt;
	}
	return n;
}

/* Whether moving s's unpublished blocks is cheaper than computing them. */
static bool swap_pays(const core *c, const seq *s)
{
	if (c->preempt == PREEMPT_SWAP)
		return true;
	if (c->preempt == PREEMPT_RECOMPUTE)
		return false;
	int64_t tokens = c->st.prefill_tokens + c->st.decode_tokens;
	double per_token = tokens > 0 ? c->st.busy_s / (double)tokens : 1e-4;
	int tail = s->n_computed - s->n_keyed * c->bt;
	double bytes = 2.0 * (double)(s->kv.n_blocks - s->n_keyed) * (double)kv_pool_bytes_per_block(c->pool);
	return tail * per_token > bytes / COPY_BPS;
}

/* Forgets s's swapped blocks (they are not needed after all). */
static void swap_drop(core *c, seq *s)
{
	for (int i = 0; i < s->swap.n; i++)
		kv_tier_swap_drop(c->tier, s->swap.slots[i]);
	s->swap.n = 0;
}

bool tier_preempt(core *c, seq *s)
{
	s->look.stamp = 0;
	if (!c->tier || s->n_computed <= s->n_keyed * c->bt || !swap_pays(c, s))
		return false;
	seq_swap *w = &s->swap;
	int n = s->kv.n_blocks - s->n_keyed;
	xgrow(&w->slots, &w->cap, n, sizeof *w->slots);
	double t0 = now_s();
	for (int i = 0; i < n; i++) {
		kv_pool_read_block(c->pool, s->kv.blocks[s->n_keyed + i], c->blk_out);
		w->slots[i] = kv_tier_swap_out(c->tier, c->blk_out);
		if (w->slots[i] < 0) {
			w->n = i;
			swap_drop(c, s);
			return false;
		}
	}
	kv_tier_add_time(c->tier, now_s() - t0, 0, 0);
	w->n = n;
	w->keyed = s->n_keyed;
	w->computed = s->n_computed;
	return true;
}

/* Admission of a swapped s whose leading swap.keyed blocks are back: its
 * swapped blocks return into fresh pool blocks and n_computed is restored. */
static void swap_in(core *c, seq *s)
{
	double t0 = now_s();
	for (int i = 0; i < s->swap.n; i++) {
		kv_tier_swap_in(c->tier, s->swap.slots[i], c->blk_in);
		int32_t blk = kv_pool_alloc(c->pool);
		kv_pool_write_block(c->pool, blk, c->blk_in);
		kv_seq_push_fresh(c->pool, &s->kv, blk);
		c->origin[blk] = 1;
		kv_seq_window_release(c->pool, &s->kv, MIN((int64_t)s->kv.n_blocks * c->bt, s->swap.computed));
	}
	kv_tier_add_time(c->tier, now_s() - t0, 0, 0);
	s->swap.n = 0;
	s->n_computed = s->swap.computed;
	s->kv.n_tokens = s->n_computed;
}

void tier_swap_back(core *c, seq *s, const found *f, int got)
{
	if (f->swap && got == s->swap.keyed)
		swap_in(c, s);
	else if (s->swap.n)
		swap_drop(c, s);
}

void tier_swap_release(core *c, seq *s)
{
	swap_drop(c, s);
	free(s->swap.slots);
	s->swap = (seq_swap){0};
}

void tier_persist(core *c, seq *s, int from)
{
	if (!c->tier || !kv_tier_persists(c->tier))
		return;
	for (int j = from; j < s->n_keyed; j++) {
		uint64_t key;
		int32_t b = s->kv.blocks[j];
		if (!kv_prefix_key_of(c->prefix, b, &key) || c->origin[b] == 2 || kv_pool_w_of(c->pool, b) < 0)
			continue; /* keyed by another block (already written), read from disk, or not whole */
		kv_pool_read_block(c->pool, b, c->blk_out);
		kv_tier_persist(c->tier, key, s->tokens + (size_t)j * c->bt, c->blk_out);
	}
}

void tier_stats(const core *c, core_stats *st)
{
	if (!c->tier)
		return;
	kv_tier_stats t = kv_tier_get_stats(c->tier);
	st->host_blocks = t.host_blocks;
	st->host_keyed = t.host_keyed;
	st->host_swapped = t.host_swapped;
	st->demoted = t.demoted;
	st->swapped_out = t.swapped_out;
	st->swapped_in = t.swapped_in;
	st->bytes_up = t.bytes_up;
	st->bytes_down = t.bytes_down;
	st->move_s = t.move_s;
	st->store_written = t.store_files_written;
	st->store_bytes = t.store_bytes;
	st->store_bad = t.store_bad_files;
	st->store_opens = t.store_opens;
	st->has_store = t.has_store;
	st->store_writable = t.store_writable;
}
