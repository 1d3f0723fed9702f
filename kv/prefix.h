/* kv/prefix.h: the prefix cache over a kv_pool.
 *
 * A full block is identified by a chained key: hash(previous block's key,
 * the block's token ids), seeded with a model id, so equal keys mean equal
 * whole prefixes. The cache maps keys to physical blocks and keeps each keyed
 * block's token ids, so a hit is confirmed by comparing tokens (a hash
 * collision never reuses wrong KV). Keys are published only after the block's
 * K/V are written and its tokens accepted. A keyed block whose refcount drops
 * to 0 stays findable on the pool's free list ("cached") until the pool hands
 * it out again, which the cache learns through the pool's reuse hook; since
 * the pool allocates from the least recently freed end, eviction is LRU.
 * Engine thread only; the pool must outlive the cache. */
#ifndef PAGECHAT_KV_PREFIX_H
#define PAGECHAT_KV_PREFIX_H

#include "kv/pool.h"

typedef struct kv_prefix kv_prefix;

/* A cache over pool (borrowed); registers itself as the pool's reuse hook.
 * Cannot fail. */
kv_prefix *kv_prefix_new(kv_pool *pool, uint64_t model_id);
void kv_prefix_free(kv_prefix *c);                     /* NULL is a no-op; clears the hook */

/* The key of a block holding tokens[block_tokens] after a block with key prev
 * (use kv_prefix_root() for the first block). Pure. */
uint64_t kv_prefix_key(const kv_prefix *c, uint64_t prev, const int32_t *tokens);
uint64_t kv_prefix_root(const kv_prefix *c);

/* A salted chain: from block salt_block on, keys also depend on salt, so a
 * sequence whose blocks are not the exact K/V of their tokens (a shifted
 * context, engine/core.h) shares them only with sequences of the same salt.
 * salt 0 (or a NULL chain): plain keys. */
typedef struct kv_chain {
	uint64_t salt;
	int salt_block;
} kv_chain;
/* The key of block number j (0-based) holding tokens after a block with key
 * prev on chain ch. Pure. */
uint64_t kv_prefix_chain_key(const kv_prefix *c, uint64_t prev, int j, const int32_t *tokens,
			     const kv_chain *ch);

/* The block published under key whose tokens equal tokens[block_tokens], or -1. */
int32_t kv_prefix_find(const kv_prefix *c, uint64_t key, const int32_t *tokens);
/* Takes a reference to a found block for a sequence: refcount++ if in use,
 * or out of the free list (refcount 1) if cached. Cannot fail. */
void kv_prefix_take(kv_prefix *c, int32_t block);
/* Publishes block (in use, full, K/V written) under key. Returns true when
 * published; false when the key is already held by another block or the
 * block already has a key (both fine: the block then simply stays private). */
bool kv_prefix_publish(kv_prefix *c, int32_t block, uint64_t key, const int32_t *tokens);

/* Walks tokens[0..n_tokens)'s full blocks from the root while they are
 * published, leaving at least one token uncovered (so that the step after a
 * lookup yields logits): writes the found blocks to hits[] (capacity: the
 * pool's block count) and returns how many; *n_free_hits counts those that
 * sit cached on the free list, *last_key is the key of the last hit (the
 * root when none). Takes nothing. */
int kv_prefix_lookup(const kv_prefix *c, const int32_t *tokens, int64_t n_tokens, int32_t *hits,
		     int *n_free_hits, uint64_t *last_key);
/* kv_prefix_lookup on chain ch (NULL: plain keys). */
int kv_prefix_lookup_chain(const kv_prefix *c, const int32_t *tokens, int64_t n_tokens, const kv_chain *ch,
			   int32_t *hits, int *n_free_hits, uint64_t *last_key);
/* Publishes the blocks of table kv that are full below n_valid tokens and
 * not yet keyed: *n_keyed leading blocks are keyed already and *last_key is
 * the key of block *n_keyed - 1 (the root when none); both advance. */
void kv_prefix_publish_table(kv_prefix *c, const kv_seq *kv, const int32_t *tokens, int64_t n_valid,
			     int *n_keyed, uint64_t *last_key);
/* kv_prefix_publish_table on chain ch (NULL: plain keys). */
void kv_prefix_publish_chain(kv_prefix *c, const kv_seq *kv, const int32_t *tokens, int64_t n_valid,
			     const kv_chain *ch, int *n_keyed, uint64_t *last_key);

/* Called whenever the pool hands block out for new contents, before its key
 * is forgotten: key and tokens are the block's (it was cached), or 0 and
 * NULL (it was never keyed). The block's bytes are still intact then: the
 * lower tiers keep a copy (kv/tier.h). NULL clears it. */
typedef void (*kv_prefix_evict_fn)(void *ctx, int32_t block, uint64_t key, const int32_t *tokens);
void kv_prefix_set_evict_hook(kv_prefix *c, kv_prefix_evict_fn fn, void *ctx);
/* The key block is published under; false when it has none. */
bool kv_prefix_key_of(const kv_prefix *c, int32_t block, uint64_t *key);
bool kv_prefix_has_key(const kv_prefix *c, int32_t block);
/* Changes whenever a key is published or forgotten (so whenever a lookup
 * may find other blocks; whether a hit is free is kv_pool_version's). */
uint64_t kv_prefix_version(const kv_prefix *c);
/* Free blocks that are still findable (evictable cache). */
int64_t kv_prefix_n_cached(const kv_prefix *c);

/* Checks the index: every key maps to a block that records that key, counts
 * agree. True, or false with e filled. */
bool kv_prefix_check(const kv_prefix *c, err *e);

#endif
