/* kv/pool.c: the paged KV-cache pool (see kv_pool.h). */
#include "kv/pool.h"

#include "kernels/kvq.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_pool {
	int n_layers;
	int kv_dim;
	int block_tokens;
	int32_t n_blocks;
	int64_t n_slots;         /* n_blocks * block_tokens */
	int64_t bytes_per_block; /* K + V, all layers */
	enum kv_type k_type, v_type;
	size_t k_row, v_row;     /* bytes per K / V row */
	uint8_t *k, *v;          /* owned; per layer its slots' rows (n_slots; with windows, a
	                          * windowed layer n_wparts * block_tokens), one layer after
	                          * the other: device memory when dev, else zalloc_huge; with
	                          * n_lo, layers [0, n_lo) in zalloc_huge */
	uint8_t *k_hi, *v_hi;    /* owned, device; layers [n_lo, n_layers) so; NULL without n_lo */
	int n_lo;                /* partial offload: layers in host memory before the device's; 0: none */
	const kern_ops *dev;     /* borrowed; the device backend holding k and v, or NULL */
	int32_t *refcount;       /* owned; [n_blocks] */
	int32_t *prev, *next;    /* owned; [n_blocks] free-list links, -1 = none;
				  * meaningful only while the block is free */
	int32_t head, tail;      /* free list ends (head = least recently freed), -1 if empty */
	int32_t n_free;          /* blocks on the free list */
	int32_t n_shared;        /* blocks with refcount > 1 */
	uint64_t version;        /* bumped by every change of the free list */
	void (*reuse_hook)(void *ctx, int32_t block); /* see kv_pool_set_reuse_hook */
	void *reuse_ctx;
	/* Sliding windows (kv/pool.h); all 0 / NULL without. W part w is the
	 * windowed layers' rows at slots w * block_tokens ..., so the storage is
	 * the one above and a W part is always held by exactly one block (each
	 * block starts with its own): taking one for a new block detaches it
	 * from a block whose tables no longer need it. */
	int window, n_win;       /* the window; windowed layers */
	int32_t n_wparts;        /* W parts (kv_pool_params.w_blocks) */
	int64_t *row0;           /* owned; [n_layers] layer l's first row in its part (kv_view.row0) */
	int64_t rows_lo, rows_hi; /* rows of every layer in k (v) and in k_hi (v_hi) */
	uint8_t *win;            /* owned; [n_layers] 1: layer l is windowed */
	int32_t *w_of;           /* owned; [n_blocks] block b's W part, -1: none */
	int32_t *w_owner;        /* owned; [n_wparts] the block holding W part w */
	int32_t *wrc;            /* owned; [n_blocks] full references of block b */
	int32_t *wprev, *wnext;  /* owned; [n_wparts] W free list links, by W part, -1 = none */
	int32_t whead, wtail;    /* W free list ends (head: released longest ago) */
	int32_t n_wfree;         /* W parts on it: those whose block has wrc 0 */
};

/* Limits on single dimensions, so that every product below fits in int64. */
enum { MAX_LAYERS = 1 << 12, MAX_KV_DIM = 1 << 20, MAX_BLOCK_TOKENS = 1 << 16 };

/* ---- free list ---------------------------------------------------------- */

static void list_append(kv_pool *pool, int32_t b)
{
	pool->prev[b] = pool->tail;
	pool->next[b] = -1;
	if (pool->tail >= 0)
		pool->next[pool->tail] = b;
	else
		pool->head = b;
	pool->tail = b;
	pool->n_free++;
	pool->version++;
}

static void list_unlink(kv_pool *pool, int32_t b)
{
	int32_t p = pool->prev[b], n = pool->next[b];
	if (p >= 0)
		pool->next[p] = n;
	else
		pool->head = n;
	if (n >= 0)
		pool->prev[n] = p;
	else
		pool->tail = p;
	pool->prev[b] = pool->next[b] = -1;
	pool->n_free--;
	pool->version++;
}

/* The W free list: W parts whose blocks' tables no longer need them, in the
 * order they were released. */
static void wlist_append(kv_pool *pool, int32_t w)
{
	pool->wprev[w] = pool->wtail;
	pool->wnext[w] = -1;
	if (pool->wtail >= 0)
		pool->wnext[pool->wtail] = w;
	else
		pool->whead = w;
	pool->wtail = w;
	pool->n_wfree++;
}

static void wlist_unlink(kv_pool *pool, int32_t w)
{
	int32_t p = pool->wprev[w], n = pool->wnext[w];
	if (p >= 0)
		pool->wnext[p] = n;
	else
		pool->whead = n;
	if (n >= 0)
		pool->wprev[n] = p;
	else
		pool->wtail = p;
	pool->wprev[w] = pool->wnext[w] = -1;
	pool->n_wfree--;
}

static void assert_block(const kv_pool *pool, int32_t b)
{
	(void)pool;
	(void)b;
	assert(b >= 0 && b < pool->n_blocks && "kv block id out of range");
}

/* ---- construction ------------------------------------------------------- */

static int count_windowed(const kv_pool_params *p);

/* With max_bytes and a w_blocks for windowed layers: the blocks the budget
 * holds beside w_blocks W parts (gb: a block's rows in the other layers),
 * or 0 when it holds none (then the pool is sized as without). */
static int64_t blocks_beside(const kv_pool_params *p, int64_t bpb, int64_t *n_w)
{
	int nw = count_windowed(p);
	if (!nw || p->w_blocks <= 0)
		return 0;
	int64_t wb = bpb / p->n_layers * nw, gb = bpb - wb;
	if (p->w_blocks > p->max_bytes / wb)
		return 0;
	int64_t left = p->max_bytes - p->w_blocks * wb;
	int64_t n = gb ? left / gb : p->max_bytes / bpb;
	if (n < p->w_blocks)
		return 0;
	*n_w = p->w_blocks;
	return n;
}

/* Validates p and works out the block count (and *n_w, the W parts).
 * Returns it (> 0), or -1 with e. */
static int64_t size_pool(const kv_pool_params *p, int64_t *bytes_per_block, int64_t *n_w, err *e)
{
	if (p->n_layers < 1 || p->n_layers > MAX_LAYERS) {
		err_set(e, "kv pool: n_layers must be in 1..%d (got %d)", MAX_LAYERS, p->n_layers);
		return -1;
	}
	if (p->kv_dim < 1 || p->kv_dim > MAX_KV_DIM) {
		err_set(e, "kv pool: kv_dim must be in 1..%d (got %d)", MAX_KV_DIM, p->kv_dim);
		return -1;
	}
	if (p->block_tokens < 1 || p->block_tokens > MAX_BLOCK_TOKENS) {
		err_set(e, "kv pool: block_tokens must be in 1..%d (got %d)", MAX_BLOCK_TOKENS,
			p->block_tokens);
		return -1;
	}
	if (p->host_layers < 0) {
		err_set(e, "kv pool: host_layers must not be negative (got %d)", p->host_layers);
		return -1;
	}
	if (p->n_blocks < 0 || p->max_bytes < 0) {
		err_set(e, "kv pool: n_blocks and max_bytes must not be negative (got %lld, %lld)",
			(long long)p->n_blocks, (long long)p->max_bytes);
		return -1;
	}
	int hd = p->head_dim > 0 ? p->head_dim : p->kv_dim;
	if (p->kv_dim % hd || (unsigned)p->k_type >= KV_TYPE_COUNT || (unsigned)p->v_type >= KV_TYPE_COUNT) {
		err_set(e, "kv pool: bad head_dim %d or K/V types %d/%d", p->head_dim, p->k_type, p->v_type);
		return -1;
	}
	/* At most 2^12 * 2^16 * (2 * 2^22) = 2^51: no overflow. */
	int64_t rows = (int64_t)kv_row_bytes(p->k_type, p->kv_dim / hd, hd) +
		       (int64_t)kv_row_bytes(p->v_type, p->kv_dim / hd, hd);
	int64_t bpb = (int64_t)p->n_layers * p->block_tokens * rows;
	*bytes_per_block = bpb;
	int64_t n = p->n_blocks;
	*n_w = 0;
	if (n == 0 && p->max_bytes > 0 && p->max_bytes <= KV_POOL_MAX_BYTES)
		n = blocks_beside(p, bpb, n_w);
	if (n == 0) {
		if (p->max_bytes == 0) {
			err_set(e, "kv pool: set n_blocks or max_bytes");
			return -1;
		}
		if (p->max_bytes > KV_POOL_MAX_BYTES) {
			err_set(e, "kv pool: max_bytes %lld is past the limit of %lld bytes; lower it",
				(long long)p->max_bytes, (long long)KV_POOL_MAX_BYTES);
			return -1;
		}
		n = p->max_bytes / bpb;
		if (n == 0) {
			err_set(e, "kv pool: max_bytes %lld holds no block (one block needs %lld bytes)",
				(long long)p->max_bytes, (long long)bpb);
			return -1;
		}
	}
	if (n > KV_POOL_MAX_BLOCKS) {
		err_set(e, "kv pool: %lld blocks is past the limit of %lld; lower n_blocks",
			(long long)n, (long long)KV_POOL_MAX_BLOCKS);
		return -1;
	}
	if (*n_w == 0)
		*n_w = p->w_blocks > 0 ? MIN(p->w_blocks, n) : n;
	/* n <= 2^30 and bpb <= 2^51 may still overflow int64: divide to compare. */
	if (n > KV_POOL_MAX_BYTES / bpb) {
		err_set(e, "kv pool: %lld blocks of %lld bytes is past the limit of %lld bytes; "
			"lower n_blocks", (long long)n, (long long)bpb, (long long)KV_POOL_MAX_BYTES);
		return -1;
	}
	return n;
}

static void storage_free(kv_pool *pool)
{
	size_t rows = (size_t)pool->rows_lo;
	if (pool->dev && !pool->n_lo) {
		pool->dev->buf_free(pool->k);
		pool->dev->buf_free(pool->v);
	} else {
		huge_free(pool->k, rows * pool->k_row);
		huge_free(pool->v, rows * pool->v_row);
	}
	if (pool->dev && pool->n_lo) {
		pool->dev->buf_free(pool->k_hi);
		pool->dev->buf_free(pool->v_hi);
	}
}

/* Host rows for layers [0, n_lo) (all, without a device), zeroed and
 * committed as blocks are first written, in huge pages where the kernel gives
 * them: decoding reads every cached row of a sequence per token, like the
 * weights. Device rows for the rest. False when one does not fit. */
static bool storage_alloc(kv_pool *pool)
{
	size_t n = (size_t)pool->n_layers, lo = pool->dev ? (size_t)pool->n_lo : n;
	size_t rlo = (size_t)pool->rows_lo, rhi = (size_t)pool->rows_hi;
	if (lo) {
		pool->k = zalloc_huge(rlo * pool->k_row);
		pool->v = pool->k ? zalloc_huge(rlo * pool->v_row) : NULL;
		if (!pool->v)
			return false;
	}
	if (lo == n)
		return true;
	uint8_t **k = lo ? &pool->k_hi : &pool->k, **v = lo ? &pool->v_hi : &pool->v;
	*k = pool->dev->buf_alloc(rhi * pool->k_row);
	*v = *k ? pool->dev->buf_alloc(rhi * pool->v_row) : NULL;
	return *v != NULL;
}

/* Where each layer's rows start in its part (host layers, device layers),
 * and the parts' sizes: layer by layer, each n_slots rows, a windowed one
 * n_wparts * block_tokens. row0 stays NULL without windows. */
static void layout_rows(kv_pool *pool)
{
	int64_t r = 0, lo = pool->dev ? pool->n_lo : pool->n_layers;
	if (pool->n_win)
		pool->row0 = xmalloc((size_t)pool->n_layers * sizeof *pool->row0);
	for (int l = 0; l < pool->n_layers; l++) {
		if (l == lo) {
			pool->rows_lo = r;
			r = 0;
		}
		if (pool->row0)
			pool->row0[l] = r;
		r += pool->n_win && pool->win[l] ? (int64_t)pool->n_wparts * pool->block_tokens : pool->n_slots;
	}
	if (lo == pool->n_layers)
		pool->rows_lo = r;
	else
		pool->rows_hi = r;
}

/* Sliding windows: how many layers of p have one (0 when p has none). */
static int count_windowed(const kv_pool_params *p)
{
	int n = 0;
	for (int l = 0; p->win_layers && p->window > 0 && l < p->n_layers; l++)
		n += p->win_layers[l / 8] >> (l % 8) & 1;
	return n;
}

/* Sliding windows: which layers, and the W parts: blocks [0, n_wparts)
 * start with their own, the rest with none; all on the W free list (no
 * table needs them yet). */
static void windows_init(kv_pool *pool, const kv_pool_params *p, int64_t n_wparts)
{
	pool->whead = pool->wtail = -1;
	pool->n_win = count_windowed(p);
	if (!pool->n_win)
		return;
	pool->window = p->window;
	pool->n_wparts = (int32_t)n_wparts;
	pool->win = xcalloc((size_t)pool->n_layers, 1);
	for (int l = 0; l < pool->n_layers; l++)
		pool->win[l] = p->win_layers[l / 8] >> (l % 8) & 1;
	size_t n = (size_t)pool->n_blocks, w = (size_t)n_wparts;
	pool->w_of = xmalloc(n * sizeof(int32_t));
	pool->w_owner = xmalloc(w * sizeof(int32_t));
	pool->wrc = xcalloc(n, sizeof(int32_t));
	pool->wprev = xmalloc(w * sizeof(int32_t));
	pool->wnext = xmalloc(w * sizeof(int32_t));
	for (int32_t b = 0; b < pool->n_blocks; b++) {
		pool->w_of[b] = b < pool->n_wparts ? b : -1;
		if (b < pool->n_wparts) {
			pool->w_owner[b] = b;
			wlist_append(pool, b);
		}
	}
}

kv_pool *kv_pool_new(const kv_pool_params *p, err *e)
{
	int64_t bpb, n_w, n = size_pool(p, &bpb, &n_w, e);
	if (n < 0)
		return NULL;
	kv_pool *pool = xcalloc(1, sizeof *pool);
	pool->n_layers = p->n_layers;
	pool->kv_dim = p->kv_dim;
	pool->block_tokens = p->block_tokens;
	pool->n_blocks = (int32_t)n;
	pool->n_slots = n * p->block_tokens;
	pool->bytes_per_block = bpb;
	int hd = p->head_dim > 0 ? p->head_dim : p->kv_dim;
	pool->k_type = p->k_type;
	pool->v_type = p->v_type;
	pool->k_row = kv_row_bytes(p->k_type, p->kv_dim / hd, hd);
	pool->v_row = kv_row_bytes(p->v_type, p->kv_dim / hd, hd);
	/* The storage is the one allocation sized by the user's budget, so its
	 * failure is reported, not fatal (unlike xcalloc). Total <= 2^40 bytes. */
	pool->dev = p->kern && p->kern->buf_alloc && p->host_layers < p->n_layers ? p->kern : NULL;
	pool->n_lo = pool->dev ? MAX(0, p->host_layers) : 0;
	windows_init(pool, p, n_w);
	layout_rows(pool);
	if (!storage_alloc(pool)) {
		err_set(e, "kv pool: cannot allocate %lld bytes for %lld blocks in %s memory; make the pool smaller "
			"(-c, --pool-blocks, --pool-mib, or kv_cache.pool_blocks / pool_mib in the config)",
			(long long)(n * bpb), (long long)n,
			pool->dev ? (pool->n_lo ? "host and device" : pool->dev->name) : "host");
		storage_free(pool);
		free(pool->win); free(pool->w_of); free(pool->w_owner); free(pool->wrc);
		free(pool->wprev); free(pool->wnext); free(pool->row0);
		free(pool);
		return NULL;
	}
	pool->refcount = xcalloc((size_t)n, sizeof(int32_t));
	pool->prev = xmalloc((size_t)n * sizeof(int32_t));
	pool->next = xmalloc((size_t)n * sizeof(int32_t));
	pool->head = pool->tail = -1;
	for (int32_t b = 0; b < pool->n_blocks; b++)
		list_append(pool, b);
	return pool;
}

void kv_pool_free(kv_pool *pool)
{
	if (!pool)
		return;
	storage_free(pool);
	free(pool->refcount);
	free(pool->prev);
	free(pool->next);
	free(pool->win);
	free(pool->w_of);
	free(pool->w_owner);
	free(pool->wrc);
	free(pool->wprev);
	free(pool->wnext);
	free(pool->row0);
	free(pool);
}

int kv_pool_block_tokens(const kv_pool *pool)
{
	return pool->block_tokens;
}

int64_t kv_pool_n_blocks(const kv_pool *pool)
{
	return pool->n_blocks;
}

int64_t kv_pool_n_free(const kv_pool *pool)
{
	return pool->n_win ? MIN(pool->n_free, pool->n_wfree) : pool->n_free;
}

int64_t kv_pool_n_free_blocks(const kv_pool *pool)
{
	return pool->n_free;
}

int64_t kv_pool_n_free_w(const kv_pool *pool)
{
	return pool->n_win ? pool->n_wfree : pool->n_free;
}

int64_t kv_pool_n_wparts(const kv_pool *pool)
{
	return pool->n_win ? pool->n_wparts : pool->n_blocks;
}

int64_t kv_pool_bytes_per_block(const kv_pool *pool)
{
	return pool->bytes_per_block;
}

/* ---- blocks ------------------------------------------------------------- */

/* Gives block b (just taken for new contents) a W part: its own when it
 * still has it, else the one released longest ago, detached from its block
 * (whose tables no longer need it). There is always one: the W parts off
 * the list belong to blocks in use other than b. */
static void attach_w(kv_pool *pool, int32_t b)
{
	if (pool->w_of[b] < 0) {
		int32_t w = pool->whead;
		assert(w >= 0 && "no W part free for a free block");
		pool->w_of[pool->w_owner[w]] = -1;
		pool->w_owner[w] = b;
		pool->w_of[b] = w;
	}
	kv_pool_wref(pool, b);
}

int32_t kv_pool_alloc(kv_pool *pool)
{
	int32_t b = pool->head;
	if (b < 0 || (pool->n_win && pool->n_wfree == 0))
		return -1;
	kv_pool_unlink_free(pool, b);
	/* the hook sees the block's old bytes, W part included (tier demotion) */
	if (pool->reuse_hook)
		pool->reuse_hook(pool->reuse_ctx, b);
	if (pool->n_win)
		attach_w(pool, b);
	return b;
}

void kv_pool_set_reuse_hook(kv_pool *pool, void (*hook)(void *ctx, int32_t block), void *ctx)
{
	pool->reuse_hook = hook;
	pool->reuse_ctx = ctx;
}

void kv_pool_ref(kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	assert(pool->refcount[block] > 0 && "kv_pool_ref on a free block (use kv_pool_unlink_free)");
	assert(pool->refcount[block] < INT32_MAX);
	if (++pool->refcount[block] == 2)
		pool->n_shared++;
}

void kv_pool_unref(kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	assert(pool->refcount[block] > 0 && "kv block refcount underflow");
	int32_t rc = --pool->refcount[block];
	assert((!pool->n_win || pool->wrc[block] <= rc) && "kv block: a full reference dropped as a plain one");
	if (rc == 1)
		pool->n_shared--;
	else if (rc == 0)
		list_append(pool, block);
}

int kv_pool_window(const kv_pool *pool)
{
	return pool->window;
}

int32_t kv_pool_w_of(const kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	return pool->n_win ? pool->w_of[block] : block;
}

void kv_pool_wref(kv_pool *pool, int32_t block)
{
	if (!pool->n_win)
		return;
	assert_block(pool, block);
	assert(pool->refcount[block] > pool->wrc[block] && pool->w_of[block] >= 0 &&
	       "kv_pool_wref on a block not in use or without its W part");
	if (pool->wrc[block]++ == 0)
		wlist_unlink(pool, pool->w_of[block]);
}

void kv_pool_wunref(kv_pool *pool, int32_t block)
{
	if (!pool->n_win)
		return;
	assert_block(pool, block);
	assert(pool->wrc[block] > 0 && "kv block wrc underflow");
	if (--pool->wrc[block] == 0)
		wlist_append(pool, pool->w_of[block]);
}

int32_t kv_pool_wrc(const kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	return pool->n_win ? pool->wrc[block] : 0;
}

int64_t kv_pool_window_first(const kv_pool *pool, int64_t pos)
{
	int64_t first = pos + 1 - pool->window;
	return pool->n_win && first > 0 ? first / pool->block_tokens : 0;
}

int kv_pool_window_hits(const kv_pool *pool, const int32_t *hits, int n)
{
	if (!pool->n_win)
		return n;
	for (int m = n; m > 0; m--) {
		int64_t j = kv_pool_window_first(pool, (int64_t)m * pool->block_tokens);
		while (j < m && pool->w_of[hits[j]] >= 0)
			j++;
		if (j == m)
			return m;
	}
	return 0;
}

int32_t kv_pool_refcount(const kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	return pool->refcount[block];
}

bool kv_pool_is_free(const kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	return pool->refcount[block] == 0;
}

uint64_t kv_pool_version(const kv_pool *pool)
{
	return pool->version;
}

void kv_pool_unlink_free(kv_pool *pool, int32_t block)
{
	assert_block(pool, block);
	assert(pool->refcount[block] == 0 && "kv_pool_unlink_free on a block in use");
	list_unlink(pool, block);
	pool->refcount[block] = 1;
}

/* Where block b's rows sit in layer l (its W part's in a windowed layer),
 * or -1 when a windowed layer's W part is gone. */
static int64_t layer_block(const kv_pool *pool, int l, int32_t b)
{
	return pool->n_win && pool->win[l] ? pool->w_of[b] : b;
}

static void copy_host(void *dst, const void *src, size_t bytes)
{
	memcpy(dst, src, bytes);
}

void kv_pool_copy_block(kv_pool *pool, int32_t dst, int32_t src)
{
	assert_block(pool, dst);
	assert_block(pool, src);
	assert(dst != src);
	assert(pool->refcount[dst] > 0 && pool->refcount[src] > 0);
	size_t bt = (size_t)pool->block_tokens;
	kv_view kv = kv_pool_view(pool);
	for (int l = 0; l < pool->n_layers; l++) {
		bool on_dev = pool->dev && l >= pool->n_lo;
		void (*cp)(void *, const void *, size_t) = on_dev ? pool->dev->copy : copy_host;
		int64_t d = layer_block(pool, l, dst), s = layer_block(pool, l, src);
		if (d < 0 || s < 0)
			continue;
		void *kp, *vp;
		kv_view_layer(&kv, l, &kp, &vp);
		uint8_t *k = kp, *v = vp;
		cp(k + (size_t)d * bt * pool->k_row, k + (size_t)s * bt * pool->k_row, bt * pool->k_row);
		cp(v + (size_t)d * bt * pool->v_row, v + (size_t)s * bt * pool->v_row, bt * pool->v_row);
	}
}

/* Block b's rows of one layer, K then V, to or from host bytes at h (b is
 * where they sit in that layer: layer_block). */
static void move_layer(kv_pool *pool, size_t l, int64_t b, uint8_t *h, bool to_host)
{
	size_t bt = (size_t)pool->block_tokens;
	size_t kb = bt * pool->k_row, vb = bt * pool->v_row;
	if (b < 0) {
		if (to_host)
			memset(h, 0, kb + vb);
		return;
	}
	kv_view kv = kv_pool_view(pool);
	void *kp, *vp;
	kv_view_layer(&kv, (int)l, &kp, &vp);
	uint8_t *k = (uint8_t *)kp + (size_t)b * kb, *v = (uint8_t *)vp + (size_t)b * vb;
	bool on_dev = pool->dev && (int)l >= pool->n_lo;
	if (on_dev && to_host) {
		pool->dev->download(h, k, kb);
		pool->dev->download(h + kb, v, vb);
	} else if (on_dev) {
		pool->dev->upload(k, h, kb);
		pool->dev->upload(v, h + kb, vb);
	} else if (to_host) {
		memcpy(h, k, kb);
		memcpy(h + kb, v, vb);
	} else {
		memcpy(k, h, kb);
		memcpy(v, h + kb, vb);
	}
}

/* Block b's rows of every layer to or from host bytes at h. */
static void move_block(kv_pool *pool, int32_t b, uint8_t *h, bool to_host)
{
	assert_block(pool, b);
	size_t per = (size_t)pool->block_tokens * (pool->k_row + pool->v_row);
	for (size_t l = 0; l < (size_t)pool->n_layers; l++)
		move_layer(pool, l, layer_block(pool, (int)l, b), h + l * per, to_host);
}

void kv_pool_read_block(kv_pool *pool, int32_t b, void *dst)
{
	move_block(pool, b, dst, true);
}

void kv_pool_write_block(kv_pool *pool, int32_t b, const void *src)
{
	move_block(pool, b, (uint8_t *)src, false);
}

kv_view kv_pool_view(kv_pool *pool)
{
	return (kv_view){
		.k = pool->k,
		.v = pool->v,
		.n_slots = pool->n_slots,
		.block_tokens = pool->block_tokens,
		.n_layers = pool->n_layers,
		.kv_dim = pool->kv_dim,
		.k_type = pool->k_type,
		.v_type = pool->v_type,
		.k_row = pool->k_row,
		.v_row = pool->v_row,
		.n_lo = pool->n_lo,
		.k_hi = pool->k_hi,
		.v_hi = pool->v_hi,
		.row0 = pool->row0,
		.n_slots_w = pool->n_win ? (int64_t)pool->n_wparts * pool->block_tokens : pool->n_slots,
	};
}

kv_pool_stats kv_pool_get_stats(const kv_pool *pool, const kv_seq *const *seqs, int n_seqs)
{
	kv_pool_stats st = {
		.n_blocks = pool->n_blocks,
		.n_used = pool->n_blocks - pool->n_free,
		.n_free = pool->n_free,
		.n_shared = pool->n_shared,
		.bytes_per_block = pool->bytes_per_block,
		.dev_layers = pool->dev ? pool->n_layers - pool->n_lo : 0,
	};
	int64_t row = (int64_t)(pool->k_row + pool->v_row);
	st.dev_bytes = pool->rows_hi * row;
	st.host_bytes = pool->rows_lo * row;
	if (pool->n_win) {
		st.n_win_layers = pool->n_win;
		st.window = pool->window;
		st.w_blocks = pool->n_wparts;
		st.n_win_held = pool->n_wparts - pool->n_wfree;
		st.n_win_freed = st.n_used - st.n_win_held;
	}
	for (int i = 0; i < n_seqs; i++) {
		st.n_slots_alloc += (int64_t)seqs[i]->n_blocks * pool->block_tokens;
		st.n_slots_filled += seqs[i]->n_tokens;
	}
	return st;
}

/* ---- checker ------------------------------------------------------------ */

/* Adds seq i's references to refs (its full ones to wrefs); false with e on
 * a malformed table. */
static bool count_seq(const kv_pool *pool, const kv_seq *s, int i, int64_t *refs, int64_t *wrefs, err *e)
{
	if (s->w_lo < 0 || s->w_lo > s->n_blocks || (!pool->n_win && s->w_lo)) {
		err_set(e, "kv check: seq %d: w_lo %d outside 0..%d", i, s->w_lo, pool->n_win ? s->n_blocks : 0);
		return false;
	}
	if (s->n_blocks < 0 || s->n_blocks > s->cap || (s->n_blocks > 0 && !s->blocks)) {
		err_set(e, "kv check: seq %d: bad table (n_blocks %d, cap %d)", i, s->n_blocks, s->cap);
		return false;
	}
	if (s->n_tokens < 0 || s->n_tokens > (int64_t)s->n_blocks * pool->block_tokens) {
		err_set(e, "kv check: seq %d: n_tokens %lld outside 0..%lld", i,
			(long long)s->n_tokens, (long long)s->n_blocks * pool->block_tokens);
		return false;
	}
	for (int32_t j = 0; j < s->n_blocks; j++) {
		int32_t b = s->blocks[j];
		if (b < 0 || b >= pool->n_blocks) {
			err_set(e, "kv check: seq %d: entry %d is block %d, out of range", i, j, b);
			return false;
		}
		refs[b]++;
		wrefs[b] += j >= s->w_lo;
	}
	return true;
}

/* Sliding windows: wrc against the tables' full references, W parts and
 * their owners inverse, the W free list exactly the W parts of blocks with
 * wrc 0. */
static bool check_windows(const kv_pool *pool, const int64_t *wrefs, bool *on, err *e)
{
	memset(on, 0, (size_t)pool->n_blocks);
	int32_t n = 0;
	for (int32_t w = pool->whead; w >= 0; w = pool->wnext[w], n++) {
		if (n >= pool->n_wfree || on[w] || pool->wrc[pool->w_owner[w]]) {
			err_set(e, "kv check: W free list broken at W part %d (entry %d)", w, n);
			return false;
		}
		on[w] = true;
	}
	for (int32_t b = 0; b < pool->n_blocks; b++) {
		int32_t w = pool->w_of[b];
		if (pool->wrc[b] != wrefs[b] || (wrefs[b] && w < 0) || (w >= 0 && pool->w_owner[w] != b)) {
			err_set(e, "kv check: block %d has wrc %d, W part %d, but %lld full references", b,
				pool->wrc[b], w, (long long)wrefs[b]);
			return false;
		}
	}
	for (int32_t w = 0; w < pool->n_wparts; w++) {
		int32_t o = pool->w_owner[w];
		if (o < 0 || o >= pool->n_blocks || pool->w_of[o] != w || on[w] != (pool->wrc[o] == 0)) {
			err_set(e, "kv check: W part %d (of block %d) is %s the W free list", w, o,
				on[w] ? "on" : "not on");
			return false;
		}
	}
	if (n != pool->n_wfree) {
		err_set(e, "kv check: W free list has %d parts, counted %d", n, pool->n_wfree);
		return false;
	}
	return true;
}

/* Walks the free list, marking on[b]; false with e on a broken list. */
static bool walk_free_list(const kv_pool *pool, bool *on, err *e)
{
	int32_t prev = -1, n = 0;
	for (int32_t b = pool->head; b >= 0; b = pool->next[b]) {
		if (b >= pool->n_blocks || on[b] || n >= pool->n_free) {
			err_set(e, "kv check: free list broken at block %d (entry %d, n_free %d)", b, n,
				pool->n_free);
			return false;
		}
		if (pool->prev[b] != prev) {
			err_set(e, "kv check: free block %d has prev %d, expected %d", b, pool->prev[b], prev);
			return false;
		}
		on[b] = true;
		prev = b;
		n++;
	}
	if (n != pool->n_free || pool->tail != prev) {
		err_set(e, "kv check: free list has %d blocks ending at %d; counted %d ending at %d",
			n, prev, pool->n_free, pool->tail);
		return false;
	}
	return true;
}

/* Compares each block's refcount with refs and its free-list membership. */
static bool check_blocks(const kv_pool *pool, const int64_t *refs, const int32_t *extra_refs,
			 const bool *on, err *e)
{
	int32_t n_shared = 0;
	for (int32_t b = 0; b < pool->n_blocks; b++) {
		int64_t want = refs[b] + (extra_refs ? extra_refs[b] : 0);
		int32_t rc = pool->refcount[b];
		if (rc != want) {
			err_set(e, "kv check: block %d has refcount %d but %lld references", b, rc,
				(long long)want);
			return false;
		}
		if (on[b] != (rc == 0)) {
			err_set(e, "kv check: block %d has refcount %d but is %s the free list", b, rc,
				on[b] ? "on" : "not on");
			return false;
		}
		n_shared += rc > 1;
	}
	if (n_shared != pool->n_shared) {
		err_set(e, "kv check: %d shared blocks, counted %d", n_shared, pool->n_shared);
		return false;
	}
	return true;
}

bool kv_pool_check(const kv_pool *pool, const kv_seq *const *seqs, int n_seqs,
		   const int32_t *extra_refs, err *e)
{
	int64_t *refs = xcalloc((size_t)pool->n_blocks, sizeof *refs);
	int64_t *wrefs = xcalloc((size_t)pool->n_blocks, sizeof *wrefs);
	bool *on = xcalloc((size_t)pool->n_blocks, sizeof *on);
	bool ok = true;
	for (int i = 0; ok && i < n_seqs; i++)
		ok = count_seq(pool, seqs[i], i, refs, wrefs, e);
	ok = ok && walk_free_list(pool, on, e);
	ok = ok && check_blocks(pool, refs, extra_refs, on, e);
	ok = ok && (!pool->n_win || check_windows(pool, wrefs, on, e));
	free(refs);
	free(wrefs);
	free(on);
	return ok;
}
