/* kv/seq.c: a sequence's block table over the pool (kv_seq_*, see
 * kv_pool.h), through the pool's public functions only. */
#include "kv/pool.h"

#include <assert.h>
#include <stdlib.h>

void kv_seq_init(kv_seq *s)
{
	*s = (kv_seq){ 0 };
}

/* Grows s's table to hold at least need entries (need <= the pool's
 * blocks, so the capacity stays in int32 range). */
static void seq_grow(kv_seq *s, int64_t need)
{
	xgrow(&s->blocks, &s->cap, need, sizeof *s->blocks);
}

int kv_seq_reserve(kv_pool *pool, kv_seq *s, int64_t n_tokens)
{
	assert(n_tokens >= 0);
	int bt = kv_pool_block_tokens(pool);
	int64_t need = n_tokens / bt + (n_tokens % bt != 0);
	int64_t more = need - s->n_blocks;
	if (more <= 0)
		return 0;
	/* Checking up front means a failed reserve takes nothing, so neither the
	 * table nor the free list's LRU order is disturbed. */
	if (more > kv_pool_n_free(pool))
		return -1;
	seq_grow(s, need);
	while (s->n_blocks < need) {
		int32_t b = kv_pool_alloc(pool);
		assert(b >= 0);
		s->blocks[s->n_blocks++] = b;
	}
	return 0;
}

void kv_seq_push(kv_pool *pool, kv_seq *s, int32_t block)
{
	assert(kv_pool_refcount(pool, block) > 0);
	seq_grow(s, (int64_t)s->n_blocks + 1);
	if (kv_pool_window(pool) && kv_pool_w_of(pool, block) < 0) {
		/* no window will reach it, so none reaches the blocks before it */
		for (; s->w_lo < s->n_blocks; s->w_lo++)
			kv_pool_wunref(pool, s->blocks[s->w_lo]);
		s->w_lo++;
	} else {
		kv_pool_wref(pool, block);
	}
	s->blocks[s->n_blocks++] = block;
}

void kv_seq_push_fresh(kv_pool *pool, kv_seq *s, int32_t block)
{
	assert(kv_pool_refcount(pool, block) > 0 && (!kv_pool_window(pool) || kv_pool_wrc(pool, block) > 0));
	seq_grow(s, (int64_t)s->n_blocks + 1);
	s->blocks[s->n_blocks++] = block;
}

void kv_seq_share(kv_pool *pool, kv_seq *dst, const kv_seq *src)
{
	assert(dst->n_blocks == 0);
	seq_grow(dst, src->n_blocks);
	for (int32_t i = 0; i < src->n_blocks; i++) {
		kv_pool_ref(pool, src->blocks[i]);
		if (i >= src->w_lo)
			kv_pool_wref(pool, src->blocks[i]);
		dst->blocks[i] = src->blocks[i];
	}
	dst->n_blocks = src->n_blocks;
	dst->n_tokens = src->n_tokens;
	dst->w_lo = src->w_lo;
}

int kv_seq_own(kv_pool *pool, kv_seq *s, int64_t pos)
{
	int64_t i = pos / kv_pool_block_tokens(pool);
	if (i >= s->n_blocks || kv_pool_refcount(pool, s->blocks[i]) <= 1)
		return 0;
	int32_t fresh = kv_pool_alloc(pool);
	if (fresh < 0)
		return -1;
	int32_t old = s->blocks[i];
	kv_pool_copy_block(pool, fresh, old);
	/* fresh came as a full reference; the entry keeps the kind it had */
	kv_pool_wunref(pool, i < s->w_lo ? fresh : old);
	kv_pool_unref(pool, old);
	s->blocks[i] = fresh;
	return 0;
}

int kv_seq_truncate(kv_pool *pool, kv_seq *s, int64_t n_tokens)
{
	assert(n_tokens >= 0);
	int bt = kv_pool_block_tokens(pool);
	int64_t keep = n_tokens / bt + (n_tokens % bt != 0);
	int dropped = 0;
	/* Unref from the end, so the last block of the sequence is freed last and
	 * the earlier (more reusable, prefix) blocks become the most recent. */
	while (s->n_blocks > keep) {
		int32_t j = --s->n_blocks;
		if (j >= s->w_lo)
			kv_pool_wunref(pool, s->blocks[j]);
		kv_pool_unref(pool, s->blocks[j]);
		dropped++;
	}
	s->w_lo = MIN(s->w_lo, s->n_blocks);
	if (s->n_tokens > n_tokens)
		s->n_tokens = n_tokens;
	return dropped;
}

int kv_seq_window_release(kv_pool *pool, kv_seq *s, int64_t pos)
{
	int64_t lo = MIN(kv_pool_window_first(pool, pos), (int64_t)s->n_blocks);
	int n = 0;
	for (; s->w_lo < lo; s->w_lo++, n++)
		kv_pool_wunref(pool, s->blocks[s->w_lo]);
	return n;
}

int64_t kv_seq_slot_w(const kv_pool *pool, const kv_seq *s, int64_t pos)
{
	int bt = kv_pool_block_tokens(pool);
	assert(pos >= 0 && pos < (int64_t)s->n_blocks * bt && pos / bt >= s->w_lo);
	int32_t w = kv_pool_w_of(pool, s->blocks[pos / bt]);
	assert(w >= 0);
	return (int64_t)w * bt + pos % bt;
}

void kv_seq_w_table(const kv_pool *pool, const kv_seq *s, int32_t *w)
{
	/* Entries before w_lo hold a W part of the table's own (its first full
	 * one), not -1: the SIMD sets read whole segments around a window's
	 * first key and mask the keys before it, so those rows must exist. */
	int32_t fill = s->w_lo < s->n_blocks ? kv_pool_w_of(pool, s->blocks[s->w_lo]) : 0;
	for (int32_t j = 0; j < s->n_blocks; j++)
		w[j] = j < s->w_lo ? fill : kv_pool_w_of(pool, s->blocks[j]);
}

void kv_seq_release(kv_pool *pool, kv_seq *s)
{
	kv_seq_truncate(pool, s, 0);
	free(s->blocks);
	kv_seq_init(s);
}

int64_t kv_seq_slot(const kv_pool *pool, const kv_seq *s, int64_t pos)
{
	int bt = kv_pool_block_tokens(pool);
	assert(pos >= 0 && pos < (int64_t)s->n_blocks * bt);
	int32_t b = s->blocks[pos / bt];
	return (int64_t)b * bt + pos % bt;
}
