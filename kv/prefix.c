/* kv/prefix.c: chained block keys in an open-addressing hash table
 * (linear probing, backward-shift deletion, capacity a power of two at least
 * twice the pool's block count, so it never fills). */
#include "kv/prefix.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMPTY (-1)

struct kv_prefix {
	kv_pool *pool;           /* borrowed */
	int block_tokens;
	int32_t n_blocks;
	uint64_t root;           /* key seed: derived from the model id */
	uint64_t *key;           /* owned; [n_blocks] key of each block */
	bool *keyed;             /* owned; [n_blocks] whether key[b] is published */
	int32_t *tokens;         /* owned; [n_blocks][block_tokens] tokens of keyed blocks */
	int32_t *slots;          /* owned; [cap] block ids, EMPTY when unused */
	uint64_t mask;           /* cap - 1 */
	int64_t n_keys;
	uint64_t version;        /* bumped by every publication and forgotten key */
	kv_prefix_evict_fn evict; /* see kv_prefix_set_evict_hook */
	void *evict_ctx;
};

uint64_t kv_prefix_key(const kv_prefix *c, uint64_t prev, const int32_t *tokens)
{
	uint64_t h = mix64(prev ^ 0x9e3779b97f4a7c15ull);
	for (int i = 0; i < c->block_tokens; i++)
		h = mix64(h ^ (uint32_t)tokens[i]) + (uint64_t)i;
	return h;
}

uint64_t kv_prefix_root(const kv_prefix *c)
{
	return c->root;
}

uint64_t kv_prefix_chain_key(const kv_prefix *c, uint64_t prev, int j, const int32_t *tokens,
			     const kv_chain *ch)
{
	if (ch && ch->salt && j == ch->salt_block)
		prev = mix64(prev ^ mix64(ch->salt));
	return kv_prefix_key(c, prev, tokens);
}

static void forget(void *ctx, int32_t block);

kv_prefix *kv_prefix_new(kv_pool *pool, uint64_t model_id)
{
	kv_prefix *c = xcalloc(1, sizeof *c);
	c->pool = pool;
	c->block_tokens = kv_pool_block_tokens(pool);
	c->n_blocks = (int32_t)kv_pool_n_blocks(pool);
	c->root = mix64(model_id + 0x51ed270b27f5ull);
	c->key = xcalloc((size_t)c->n_blocks, sizeof *c->key);
	c->keyed = xcalloc((size_t)c->n_blocks, sizeof *c->keyed);
	c->tokens = xmalloc((size_t)c->n_blocks * (size_t)c->block_tokens * sizeof *c->tokens);
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)c->n_blocks)
		cap *= 2;
	c->slots = xmalloc(cap * sizeof *c->slots);
	memset(c->slots, 0xff, cap * sizeof *c->slots); /* EMPTY */
	c->mask = cap - 1;
	kv_pool_set_reuse_hook(pool, forget, c);
	return c;
}

void kv_prefix_free(kv_prefix *c)
{
	if (!c)
		return;
	kv_pool_set_reuse_hook(c->pool, NULL, NULL);
	free(c->key);
	free(c->keyed);
	free(c->tokens);
	free(c->slots);
	free(c);
}

/* Slot holding key, or the empty slot where it would go. */
static uint64_t probe(const kv_prefix *c, uint64_t key)
{
	uint64_t i = key & c->mask;
	while (c->slots[i] != EMPTY && c->key[c->slots[i]] != key)
		i = (i + 1) & c->mask;
	return i;
}

int32_t kv_prefix_find(const kv_prefix *c, uint64_t key, const int32_t *tokens)
{
	int32_t b = c->slots[probe(c, key)];
	if (b == EMPTY)
		return -1;
	const int32_t *stored = c->tokens + (size_t)b * c->block_tokens;
	return memcmp(stored, tokens, (size_t)c->block_tokens * sizeof *tokens) ? -1 : b;
}

void kv_prefix_take(kv_prefix *c, int32_t block)
{
	assert(c->keyed[block]);
	if (kv_pool_is_free(c->pool, block))
		kv_pool_unlink_free(c->pool, block);
	else
		kv_pool_ref(c->pool, block);
}

bool kv_prefix_publish(kv_prefix *c, int32_t block, uint64_t key, const int32_t *tokens)
{
	assert(block >= 0 && block < c->n_blocks && !kv_pool_is_free(c->pool, block));
	if (c->keyed[block])
		return false;
	uint64_t i = probe(c, key);
	if (c->slots[i] != EMPTY)
		return false;
	c->slots[i] = block;
	c->key[block] = key;
	c->keyed[block] = true;
	memcpy(c->tokens + (size_t)block * c->block_tokens, tokens,
	       (size_t)c->block_tokens * sizeof *tokens);
	c->n_keys++;
	c->version++;
	return true;
}

/* Removes block's key (the pool is reusing it). Backward-shift deletion keeps
 * every remaining key reachable from its home slot without tombstones. */
static void forget(void *ctx, int32_t block)
{
	kv_prefix *c = ctx;
	if (c->evict)
		c->evict(c->evict_ctx, block, c->keyed[block] ? c->key[block] : 0,
			 c->keyed[block] ? c->tokens + (size_t)block * c->block_tokens : NULL);
	if (!c->keyed[block])
		return;
	uint64_t i = probe(c, c->key[block]);
	assert(c->slots[i] == block);
	c->keyed[block] = false;
	c->n_keys--;
	c->version++;
	for (uint64_t j = (i + 1) & c->mask;; j = (j + 1) & c->mask) {
		int32_t b = c->slots[j];
		if (b == EMPTY)
			break;
		uint64_t home = c->key[b] & c->mask;
		/* b may move into the hole at i if its home is not in (i, j] */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			c->slots[i] = b;
			i = j;
		}
	}
	c->slots[i] = EMPTY;
}

void kv_prefix_set_evict_hook(kv_prefix *c, kv_prefix_evict_fn fn, void *ctx)
{
	c->evict = fn;
	c->evict_ctx = ctx;
}

bool kv_prefix_key_of(const kv_prefix *c, int32_t block, uint64_t *key)
{
	if (!c->keyed[block])
		return false;
	*key = c->key[block];
	return true;
}

bool kv_prefix_has_key(const kv_prefix *c, int32_t block)
{
	return c->keyed[block];
}

uint64_t kv_prefix_version(const kv_prefix *c)
{
	return c->version;
}

int64_t kv_prefix_n_cached(const kv_prefix *c)
{
	int64_t n = 0;
	for (int32_t b = 0; b < c->n_blocks; b++)
		n += c->keyed[b] && kv_pool_is_free(c->pool, b);
	return n;
}

int kv_prefix_lookup(const kv_prefix *c, const int32_t *tokens, int64_t n_tokens, int32_t *hits,
		     int *n_free_hits, uint64_t *last_key)
{
	return kv_prefix_lookup_chain(c, tokens, n_tokens, NULL, hits, n_free_hits, last_key);
}

int kv_prefix_lookup_chain(const kv_prefix *c, const int32_t *tokens, int64_t n_tokens, const kv_chain *ch,
			   int32_t *hits, int *n_free_hits, uint64_t *last_key)
{
	uint64_t key = c->root;
	int n = 0;
	*n_free_hits = 0;
	*last_key = key;
	while ((int64_t)(n + 1) * c->block_tokens <= n_tokens - 1) {
		const int32_t *toks = tokens + (size_t)n * c->block_tokens;
		key = kv_prefix_chain_key(c, key, n, toks, ch);
		int32_t b = kv_prefix_find(c, key, toks);
		if (b < 0)
			break;
		*n_free_hits += kv_pool_is_free(c->pool, b);
		*last_key = key;
		hits[n++] = b;
	}
	return n;
}

void kv_prefix_publish_table(kv_prefix *c, const kv_seq *kv, const int32_t *tokens, int64_t n_valid,
			     int *n_keyed, uint64_t *last_key)
{
	kv_prefix_publish_chain(c, kv, tokens, n_valid, NULL, n_keyed, last_key);
}

void kv_prefix_publish_chain(kv_prefix *c, const kv_seq *kv, const int32_t *tokens, int64_t n_valid,
			     const kv_chain *ch, int *n_keyed, uint64_t *last_key)
{
	int64_t full = MIN(n_valid / c->block_tokens, (int64_t)kv->n_blocks);
	for (; *n_keyed < full; (*n_keyed)++) {
		const int32_t *toks = tokens + (size_t)*n_keyed * c->block_tokens;
		uint64_t key = kv_prefix_chain_key(c, *last_key, *n_keyed, toks, ch);
		kv_prefix_publish(c, kv->blocks[*n_keyed], key, toks);
		*last_key = key;
	}
}

bool kv_prefix_check(const kv_prefix *c, err *e)
{
	int64_t in_table = 0;
	for (uint64_t i = 0; i <= c->mask; i++) {
		int32_t b = c->slots[i];
		if (b == EMPTY)
			continue;
		in_table++;
		if (b < 0 || b >= c->n_blocks || !c->keyed[b]) {
			err_set(e, "prefix slot %llu holds block %d without a key", (unsigned long long)i, b);
			return false;
		}
		if (c->slots[probe(c, c->key[b])] != b) {
			err_set(e, "prefix key of block %d is not reachable", b);
			return false;
		}
	}
	if (in_table != c->n_keys) {
		err_set(e, "prefix table holds %lld keys, counter says %lld", (long long)in_table,
			(long long)c->n_keys);
		return false;
	}
	return true;
}
