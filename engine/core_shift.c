/* engine/core_shift.c: a context shift (engine/core.h, core_shift) carried
 * out at submit. The earlier prompt's blocks are found in the prefix cache
 * (on its own chain), and the new prompt's blocks from the request's salt
 * block on are built from them in fresh blocks: row q of the new prompt
 * comes from old position q below keep, else q + discard, its K rotated by
 * the difference (models/llama.h, llama_kv_shift). The new blocks are
 * published under the request's chain and released, so they wait in the
 * cache (at the recently-freed end) for the request's own admission, which
 * takes them like any other hit. Only full blocks are built; the rest of
 * the prompt is computed as usual. */
#include "engine/core_int.h"

#include <stdlib.h>
#include <string.h>

/* The old position new position q comes from. */
static int64_t source_of(const core_shift *sh, int64_t q)
{
	return q < sh->keep ? q : q + sh->discard;
}

/* Whether the new prompt's tokens [0, n) are the old ones moved (they are
 * when the caller built them so; anything else is refused). */
static bool tokens_match(const core_request *r, int64_t n)
{
	const core_shift *sh = &r->shift;
	for (int64_t q = 0; q < n; q++) {
		int64_t p = source_of(sh, q);
		if (p >= sh->n_old || sh->old[p] != r->prompt[q])
			return false;
	}
	return true;
}

/* The key of the new prompt's block j0 - 1 (the root when j0 is 0). */
static uint64_t key_before(const core *c, const core_request *r, const kv_chain *ch, int j0)
{
	uint64_t key = kv_prefix_root(c->prefix);
	for (int j = 0; j < j0; j++)
		key = kv_prefix_chain_key(c->prefix, key, j, r->prompt + (size_t)j * c->bt, ch);
	return key;
}

/* Rotates old rows into blocks[0..n) (new blocks j0 .. j0 + n). 0, or -1. */
static int move_rows(core *c, const core_shift *sh, const int32_t *old_blocks, const int32_t *blocks,
		     int j0, int n)
{
	int64_t rows = (int64_t)n * c->bt;
	int64_t *src = xmalloc((size_t)rows * sizeof *src), *dst = xmalloc((size_t)rows * sizeof *dst);
	int32_t *delta = xmalloc((size_t)rows * sizeof *delta);
	for (int64_t i = 0; i < rows; i++) {
		int64_t q = (int64_t)j0 * c->bt + i, p = source_of(sh, q);
		src[i] = (int64_t)old_blocks[p / c->bt] * c->bt + p % c->bt;
		dst[i] = (int64_t)blocks[i / c->bt] * c->bt + i % c->bt;
		delta[i] = (int32_t)(q - p);
	}
	kv_view v = kv_pool_view(c->pool);
	err e;
	int rc = llama_kv_shift(c->model, &v, src, dst, delta, rows, &e);
	free(src);
	free(dst);
	free(delta);
	return rc;
}

/* Builds and publishes new blocks j0 .. j1 - 1, then lets go of the h old
 * blocks and of the new ones (in that order: the new ones are the most
 * recently freed, the last to be evicted); returns the tokens it placed. */
static int build_blocks(core *c, const core_request *r, const int32_t *old_blocks, int h, int j0, int j1)
{
	kv_chain ch = {r->salt, r->salt_block};
	int n = j1 - j0;
	if (n <= 0 || kv_pool_n_free(c->pool) < n)
		n = 0;
	int32_t *blocks = xmalloc((size_t)MAX(n, 1) * sizeof *blocks);
	for (int i = 0; i < n; i++)
		blocks[i] = kv_pool_alloc(c->pool);
	int placed = 0;
	if (n > 0 && move_rows(c, &r->shift, old_blocks, blocks, j0, n) == 0) {
		uint64_t key = key_before(c, r, &ch, j0);
		for (int i = 0; i < n; i++) {
			const int32_t *toks = r->prompt + (size_t)(j0 + i) * c->bt;
			key = kv_prefix_chain_key(c->prefix, key, j0 + i, toks, &ch);
			placed += kv_prefix_publish(c->prefix, blocks[i], key, toks);
		}
	}
	for (int i = 0; i < h; i++)
		kv_pool_unref(c->pool, old_blocks[i]);
	for (int i = 0; i < n; i++)
		kv_pool_unref(c->pool, blocks[i]);
	free(blocks);
	return placed * c->bt;
}

int shift_materialize(core *c, const core_request *r)
{
	const core_shift *sh = &r->shift;
	if (!llama_can_shift(c->model) || kv_pool_window(c->pool) || !r->salt || sh->keep < 0 || sh->discard <= 0 ||
	    sh->keep + sh->discard > sh->n_old || r->salt_block != sh->keep / c->bt)
		return 0;
	kv_chain old = {sh->old_salt, sh->old_salt_block};
	int n_free;
	uint64_t last;
	/* every full block of the old tokens (none left uncovered: nothing runs on them) */
	int h = kv_prefix_lookup_chain(c->prefix, sh->old, (int64_t)sh->n_old + 1, &old, c->hits, &n_free, &last);
	int64_t avail = MIN((int64_t)h * c->bt - sh->discard, (int64_t)r->n_prompt - 1);
	int j0 = r->salt_block, j1 = (int)(MAX(avail, 0) / c->bt);
	if (j1 <= j0 || !tokens_match(r, (int64_t)j1 * c->bt))
		return 0;
	/* hold the old blocks while the new ones are taken from the free list */
	int32_t *old_blocks = xmalloc((size_t)h * sizeof *old_blocks);
	memcpy(old_blocks, c->hits, (size_t)h * sizeof *old_blocks);
	for (int i = 0; i < h; i++)
		kv_prefix_take(c->prefix, old_blocks[i]);
	int placed = build_blocks(c, r, old_blocks, h, j0, j1);
	free(old_blocks);
	c->st.shifted_tokens += placed;
	return placed;
}
