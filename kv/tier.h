/* kv/tier.h: the KV cache's lower tiers, under the pool's block table.
 *
 * Tier 0 is the pool (compute memory: the CPU's sized pool, or device
 * memory). Tier 1 is a region of host memory with room for host_blocks
 * blocks; tier 2 is a directory on disk (kv/store.h). Tiers 1 and 2
 * are caches of published blocks, keyed like the prefix cache (chained
 * keys, tokens compared on every hit):
 * - a cached block that the pool hands out for new contents falls to tier 1
 *   (kv_tier_demote), whose least recently used entry falls to the store;
 * - with a store, every block published to the prefix cache is written to
 *   disk at once (kv_tier_persist), so a restart or a second process finds it;
 * - a prefix lookup that misses the pool goes on in tier 1, then tier 2
 *   (kv_tier_find, from memory: tier 2 through the store's index), and a hit
 *   there is copied back up into a fresh pool block by the caller
 *   (kv_tier_load, which checks a store file whole), counted per tier.
 * Tier 1 also holds preempted sequences swapped out of the pool (their
 * blocks, unkeyed, held until swapped back in or dropped); swapped blocks
 * are never evicted, so swapping out fails when tier 1 is full of them.
 * Engine thread only. */
#ifndef PAGECHAT_KV_TIER_H
#define PAGECHAT_KV_TIER_H

#include "kernels/kvq.h"
#include "models/llama.h"

typedef struct kv_tier kv_tier;

typedef struct kv_tier_params {
	size_t block_bytes;      /* kv_pool_bytes_per_block */
	int block_tokens;
	int64_t host_blocks;     /* tier 1 capacity in blocks (0: no tier 1) */
	const char *store_dir;   /* tier 2 directory (NULL: no tier 2) */
	int64_t store_max_bytes; /* tier 2 size limit (0: none) */
	uint64_t fingerprint;    /* kv_tier_fingerprint of the pool's contents */
} kv_tier_params;

/* NULL with e filled (the store's directory cannot be used, tier 1 cannot
 * be allocated). */
kv_tier *kv_tier_new(const kv_tier_params *p, err *e);
void kv_tier_free(kv_tier *t);                             /* NULL is a no-op */

/* What identifies the bytes of a block besides its tokens: the model (its
 * hyperparameters and every byte of its file: the weights, the metadata and
 * tensor infos), the K/V row types and the block size. Hashing the file
 * reads the whole model once; the result is cached in cache_dir (the store's
 * directory, one kv_store_check_dir accepted; NULL: none) under the file's
 * identity (device, inode, size, modification and change times), so a
 * later load of the same file reads nothing. A hash stored in the GGUF
 * itself is not used: nothing checks it against the bytes, so an edited
 * file that kept it would read the original's blocks. */
uint64_t kv_tier_fingerprint(const llama_model *m, enum kv_type k_type, enum kv_type v_type,
			     int block_tokens, const char *cache_dir);

enum kv_tier_where { TIER_POOL, TIER_HOST, TIER_STORE, TIER_MISS };

/* Where key's block (with these tokens) is below the pool, or TIER_MISS:
 * tier 1's table, then the store's index (kv_store_lists). Memory only,
 * moves nothing; a store file is checked when it is loaded. */
enum kv_tier_where kv_tier_find(const kv_tier *t, uint64_t key, const int32_t *tokens);
/* kv_tier_find, but a store file the index does not know as checked is
 * opened and checked now (kv_store_has: a bad one is removed, one another
 * process wrote is found). */
enum kv_tier_where kv_tier_probe(kv_tier *t, uint64_t key, const int32_t *tokens);
/* Changes whenever kv_tier_find may answer differently for some key. */
uint64_t kv_tier_version(const kv_tier *t);
/* Copies key's block into dst[block_bytes] from the highest tier holding it
 * and counts the hit; *from says which. False when it is gone or its file is
 * bad (then the caller computes the block instead). */
bool kv_tier_load(kv_tier *t, uint64_t key, const int32_t *tokens, void *dst, enum kv_tier_where *from);
/* A keyed block leaving the pool: keep a copy in tier 1 (a no-op without). */
void kv_tier_demote(kv_tier *t, uint64_t key, const int32_t *tokens, const void *bytes);
/* Whether published blocks are written to a store now (kv_tier_persist). */
bool kv_tier_persists(const kv_tier *t);
/* Writes a published block to the store (a no-op when it is already there). */
void kv_tier_persist(kv_tier *t, uint64_t key, const int32_t *tokens, const void *bytes);

/* Swapping: a block's bytes into a tier-1 slot (its number), or -1 when
 * tier 1 has no room; back into dst (the slot is freed); or dropped. */
int32_t kv_tier_swap_out(kv_tier *t, const void *bytes);
void kv_tier_swap_in(kv_tier *t, int32_t slot, void *dst);
void kv_tier_swap_drop(kv_tier *t, int32_t slot);

typedef struct kv_tier_stats {
	int64_t host_blocks, host_keyed, host_swapped; /* tier 1: capacity, in use */
	int64_t hits_host, hits_store;                 /* blocks brought back up */
	int64_t demoted, dropped;                      /* blocks that fell to tier 1; fell out */
	int64_t swapped_out, swapped_in;               /* blocks */
	int64_t bytes_up, bytes_down;                  /* moved to / from the pool */
	double move_s;                                 /* time spent moving */
	int64_t store_files_written, store_bytes, store_bad_files;
	int64_t store_opens;                           /* kv_store_stats.opens */
	bool has_store, store_writable;
} kv_tier_stats;
kv_tier_stats kv_tier_get_stats(const kv_tier *t);
/* A line for the user about the store (writing turned off and why), or NULL. */
const char *kv_tier_notice(const kv_tier *t);
/* Adds seconds spent moving bytes for the tier (the caller's copies). */
void kv_tier_add_time(kv_tier *t, double s, int64_t up, int64_t down);

#endif
