/* kv/pool.h: the paged KV-cache pool.
 *
 * Owns n_blocks blocks of block_tokens token slots each, for all layers, K and
 * V. Storage layout per layer: [n_blocks * block_tokens][kv_dim] floats, so the
 * slot of a token is block * block_tokens + offset, the same slot in every
 * layer. Sequences refer to blocks through a kv_seq block table that grows one
 * block at a time; every block has a reference count (> 1 means shared).
 * Free blocks sit on an intrusive doubly linked list (O(1) take, unlink and
 * append): allocation takes from the head, freeing appends to the tail, so the
 * head is the least recently freed block. A block is free exactly when its
 * refcount is 0, and then it is on the free list. kv_pool_check() verifies
 * that refcounts equal the references held by the given block tables.
 * Bad block ids, refcount underflow and refs to free blocks are asserts.
 *
 * Sliding windows (docs/architecture.md, "Sliding windows in the pool"):
 * with win_layers set, a block's rows in the windowed layers (its window
 * part, "W part") live at a slot of their own, w * block_tokens + offset,
 * where w is the W part the block holds (kv_pool_w_of). A table reference
 * to a block either needs its W part (a full reference) or not (a block the
 * holder's windows have passed: kv_seq.w_lo); a block's wrc counts its full
 * references, and a W part no full reference needs goes on a second free
 * list, still attached to its block (still findable with it) until
 * kv_pool_alloc takes it for a new block. Without win_layers every path is
 * as above and the W functions are no-ops.
 * Engine thread only. */
#ifndef PAGECHAT_KV_POOL_H
#define PAGECHAT_KV_POOL_H

#include "base/base.h"
#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "models/batch.h"

typedef struct kv_pool kv_pool;

typedef struct kv_pool_params {
	int n_layers;
	int kv_dim;              /* n_kv_heads * head_dim */
	int head_dim;            /* for the per-head scales of 8-bit rows (0: kv_dim) */
	enum kv_type k_type, v_type; /* row types (kernels/kvq.h); 0 is f32 */
	int block_tokens;        /* token slots per block (default 16) */
	int64_t n_blocks;        /* when > 0: exactly this many blocks */
	int64_t max_bytes;       /* when n_blocks == 0: as many blocks as fit */
	const kern_ops *kern;    /* borrowed; a device backend allocates the K/V storage
				  * (NULL or a host backend: host memory) */
	int host_layers;         /* partial offload, with a device kern: the first
				  * host_layers layers' K/V in host memory, the rest on
				  * the device (llama_host_layers); 0: all on kern */
	const uint8_t *win_layers; /* borrowed for the call; NULL, or bit l % 8 of byte
				  * l / 8 set for a layer l with a sliding window
				  * (llama_hparams.swa_layer), whose blocks' W parts
				  * are released (kv_seq_window_release) */
	int window;              /* those layers' window in tokens (> 0 with win_layers;
				  * 0: no windows, win_layers ignored) */
	int64_t w_blocks;        /* with windows: how many W parts (the windowed layers
				  * hold w_blocks * block_tokens slots); 0 or more than
				  * the blocks: one per block. With max_bytes, the
				  * blocks are what the budget holds beside them */
} kv_pool_params;

/* Sanity limits: a pool past these is a configuration mistake, reported as an
 * error rather than attempted. */
#define KV_POOL_MAX_BLOCKS (INT64_C(1) << 30)
#define KV_POOL_MAX_BYTES  (INT64_C(1) << 40)   /* K + V, all layers */

/* A snapshot of the pool's accounting (see kv_pool_get_stats). */
typedef struct kv_pool_stats {
	int64_t n_blocks;        /* total */
	int64_t n_used;          /* refcount > 0 */
	int64_t n_free;          /* on the free list */
	int64_t n_shared;        /* refcount > 1 */
	int64_t bytes_per_block;
	int64_t n_slots_alloc;   /* sum over the given seqs of n_blocks * block_tokens */
	int64_t n_slots_filled;  /* sum over the given seqs of n_tokens */
	int64_t dev_bytes;       /* K/V storage in device memory (all blocks) */
	int64_t host_bytes;      /* ... in host memory */
	int dev_layers;          /* layers whose K/V are in device memory */
	/* sliding windows (all 0 without): */
	int n_win_layers;        /* layers with a window (of n_layers) */
	int window;              /* their window in tokens */
	int64_t w_blocks;        /* W parts (the windowed layers' capacity in blocks) */
	int64_t n_win_held;      /* blocks in use whose W parts a table still needs */
	int64_t n_win_freed;     /* blocks in use whose W parts no table needs (windows passed) */
} kv_pool_stats;

/* A sequence's block table: blocks[i] holds its tokens i*block_tokens ...
 * Caller-placed; init with kv_seq_init, release with kv_seq_release. */
typedef struct kv_seq {
	int32_t *blocks;         /* owned; [cap] physical block ids, n_blocks used */
	int32_t n_blocks;
	int32_t cap;
	int64_t n_tokens;        /* token slots filled (written) */
	int32_t w_lo;            /* sliding windows: entries [0, w_lo) are references that
				  * do not need the blocks' W parts (0 without windows) */
} kv_seq;

/* Returns a new pool, or NULL with e filled (bad sizes, sizes past the limits
 * above, a budget that holds no block, or K/V storage that cannot be
 * allocated). Bytes per block = n_layers * block_tokens * (K row + V row bytes),
 * the rows as kernels/kvq.h sizes them (f32: 4 * kv_dim).
 * The K/V storage starts zeroed. Release with kv_pool_free(). */
kv_pool *kv_pool_new(const kv_pool_params *p, err *e);
void kv_pool_free(kv_pool *pool);                      /* NULL is a no-op */

int     kv_pool_block_tokens(const kv_pool *pool);
int64_t kv_pool_n_blocks(const kv_pool *pool);
/* Blocks kv_pool_alloc can hand out now: the free list's, and with windows
 * at most the W parts no table needs. */
int64_t kv_pool_n_free(const kv_pool *pool);
/* The two resources apart: blocks on the free list (cached ones included),
 * and W parts no full reference needs (each kv_pool_alloc takes one of
 * each). Without windows both are the free list's blocks. */
int64_t kv_pool_n_free_blocks(const kv_pool *pool);
int64_t kv_pool_n_free_w(const kv_pool *pool);
/* W parts in all (kv_pool_params.w_blocks as sized); the blocks without windows. */
int64_t kv_pool_n_wparts(const kv_pool *pool);
int64_t kv_pool_bytes_per_block(const kv_pool *pool);

/* Takes the free block at the head of the free list with refcount 1 (and,
 * with windows, a W part and wrc 1: a full reference). Returns its id, or -1
 * when none is free (not an error: the caller waits/preempts). */
int32_t kv_pool_alloc(kv_pool *pool);
/* Registers hook(ctx, block), called whenever kv_pool_alloc hands out a free
 * block for new contents (the prefix cache forgets the block's old key then).
 * NULL clears it. */
void    kv_pool_set_reuse_hook(kv_pool *pool, void (*hook)(void *ctx, int32_t block), void *ctx);
void    kv_pool_ref(kv_pool *pool, int32_t block);     /* refcount++; cannot fail */
void    kv_pool_unref(kv_pool *pool, int32_t block);   /* cannot fail; frees at 0 */
int32_t kv_pool_refcount(const kv_pool *pool, int32_t block);
/* Whether block is free (refcount 0, on the free list). */
bool    kv_pool_is_free(const kv_pool *pool, int32_t block);
/* Changes whenever a block joins or leaves the free list (so whenever
 * kv_pool_is_free may answer differently for some block). */
uint64_t kv_pool_version(const kv_pool *pool);
/* Takes the given free block out of the free list, wherever it sits, and
 * gives it refcount 1, as kv_pool_alloc does for the head (a prefix-cache hit
 * on a freed block), wrc 0 (kv_pool_wref makes it full). O(1). Asserts that
 * block is free. */
void    kv_pool_unlink_free(kv_pool *pool, int32_t block);
/* Sliding windows. Whether the pool has windowed layers, and the window. */
int     kv_pool_window(const kv_pool *pool);             /* 0: none */
/* Block b's W part (its windowed layers' rows start at slot w * block_tokens),
 * or -1 when it has none (released and taken for another block). Without
 * windows: b. */
int32_t kv_pool_w_of(const kv_pool *pool, int32_t block);
/* A full reference: wrc++ of a block in use that has its W part (taking the
 * W part off its free list when it was on it). Asserts both. No-op without
 * windows. */
void    kv_pool_wref(kv_pool *pool, int32_t block);
/* wrc--; at 0 the W part joins the W free list (still attached). */
void    kv_pool_wunref(kv_pool *pool, int32_t block);
int32_t kv_pool_wrc(const kv_pool *pool, int32_t block);
/* How many of hits[0..n) (a prefix lookup's blocks 0..n-1) can be taken:
 * the largest m <= n such that every block the window of position
 * m * block_tokens reaches, [w_first(m), m), still has its W part. n without
 * windows. Pure. */
int     kv_pool_window_hits(const kv_pool *pool, const int32_t *hits, int n);
/* The first table entry the window of a query at position pos reaches:
 * (pos + 1 - window) / block_tokens, 0 before that or without windows. */
int64_t kv_pool_window_first(const kv_pool *pool, int64_t pos);

/* Copies block src's K and V, every layer, into block dst (copy-on-write).
 * Both must be in use and distinct; the windowed layers are copied when
 * both have W parts. Cannot fail. */
void    kv_pool_copy_block(kv_pool *pool, int32_t dst, int32_t src);

/* A block's K and V rows, every layer, as host bytes (kv_pool_bytes_per_block
 * of them; per layer the K rows then the V rows): read copies block b out
 * to dst, write copies src into block b (which the caller holds). For moving
 * blocks between the pool and the lower tiers (kv/tier.h); device
 * pools download and upload. A block without its W part reads zeros for the
 * windowed layers and writes none. Cannot fail. */
void    kv_pool_read_block(kv_pool *pool, int32_t block, void *dst);
void    kv_pool_write_block(kv_pool *pool, int32_t block, const void *src);

/* Block counts of the pool, plus slot usage summed over seqs[0..n_seqs)
 * (seqs may be NULL when n_seqs is 0; a block shared by two seqs counts for
 * each). Cannot fail. */
kv_pool_stats kv_pool_get_stats(const kv_pool *pool, const kv_seq *const *seqs, int n_seqs);

/* The storage as the forward pass sees it (pointers stay valid until free;
 * device memory when the pool was made for a device backend; with
 * host_layers, those layers in host memory and the rest on the device). */
kv_view kv_pool_view(kv_pool *pool);

void kv_seq_init(kv_seq *s);
/* Makes room for n_tokens slots in total (n_tokens is not changed), taking
 * blocks from the free list as needed. Returns 0, or -1 when the pool has too
 * few free blocks: then nothing is taken, so the sequence and the free list
 * are unchanged (not an error: the caller waits or preempts). */
int  kv_seq_reserve(kv_pool *pool, kv_seq *s, int64_t n_tokens);
/* Appends block to s's table; the caller already holds the plain reference
 * the table now owns (a prefix-cache hit taken with kv_prefix_take). With
 * windows the entry becomes a full reference (kv_pool_wref); a block
 * without its W part becomes a plain one, and so do the entries before it
 * (w_lo moves past it: a window that does not reach it reaches none of
 * them; kv_pool_window_hits gives hits for which that holds). Cannot fail. */
void kv_seq_push(kv_pool *pool, kv_seq *s, int32_t block);
/* Appends a block from kv_pool_alloc, whose reference (full with windows)
 * the table now owns. Cannot fail. */
void kv_seq_push_fresh(kv_pool *pool, kv_seq *s, int32_t block);
/* Makes dst, which must be empty, a table sharing every block of src (each
 * block gains a reference; n_tokens copied). Cannot fail. */
void kv_seq_share(kv_pool *pool, kv_seq *dst, const kv_seq *src);
/* Copy-on-write: makes the block holding position pos private to s (when
 * its refcount is above 1, its K/V are copied into a fresh block that takes
 * its place in the table). Returns 0 (also when pos is past the table or the
 * block is already private), or -1 when no block is free (nothing changed). */
int  kv_seq_own(kv_pool *pool, kv_seq *s, int64_t pos);
/* Keeps the first n_tokens positions: sets s->n_tokens to at most n_tokens and
 * unrefs every block wholly past it (speculative rollback). Returns the number
 * of blocks dropped (>= 0); cannot fail. */
int  kv_seq_truncate(kv_pool *pool, kv_seq *s, int64_t n_tokens);
/* Sliding windows: the next query of s is at position pos or later, so its
 * windows no longer reach the entries before kv_pool_window_first(pos):
 * their full references become plain ones (w_lo advances, kv_pool_wunref).
 * Returns how many were released (0 without windows); cannot fail. */
int  kv_seq_window_release(kv_pool *pool, kv_seq *s, int64_t pos);
/* The windowed layers' slot of position pos (kv_seq_slot without windows);
 * pos's block must be at or past w_lo. */
int64_t kv_seq_slot_w(const kv_pool *pool, const kv_seq *s, int64_t pos);
/* Writes the table's W parts into w[n_blocks]: the table the windowed
 * layers read. Entries before w_lo name some W part of the table (rows the
 * kernels may read and mask, never use). */
void kv_seq_w_table(const kv_pool *pool, const kv_seq *s, int32_t *w);

/* Drops every block reference, frees the table and zeroes the counts; the
 * struct is then as after kv_seq_init. */
void kv_seq_release(kv_pool *pool, kv_seq *s);
/* Slot of token position pos (0 <= pos < n_blocks * block_tokens). */
int64_t kv_seq_slot(const kv_pool *pool, const kv_seq *s, int64_t pos);

/* Checks: every refcount equals the number of references in seqs[0..n_seqs)
 * (plus extra_refs[b] when given: references held elsewhere, e.g. a cache;
 * with windows every wrc equals the tables' full references, every block
 * with wrc > 0 has its W part, W parts and their free list agree),
 * every free block has refcount 0 and is on the free list exactly once, and
 * the counts agree; each table is well formed (ids in range, n_tokens within
 * its capacity). Returns true, or false with e describing the first
 * violation. O(n_blocks + table sizes); allocates scratch. */
bool kv_pool_check(const kv_pool *pool, const kv_seq *const *seqs, int n_seqs,
		   const int32_t *extra_refs, err *e);

#endif
