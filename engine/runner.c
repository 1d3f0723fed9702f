/* engine/runner.c: flat batches over paged block tables (see runner.h). */
#include "engine/runner.h"

#include "kv/pool.h"

#include <assert.h>
#include <stdlib.h>

struct runner {
	llama_model *m;          /* borrowed */
	kv_pool *pool;           /* borrowed or owned (own_pool) */
	bool own_pool;
	int max_rows, max_seqs, max_out, n_vocab;
	int n_rows, n_groups, n_out;
	int32_t *tok, *pos, *grp, *out, *ntab; /* owned; the batch being built */
	int64_t *slot;           /* owned; [max_rows] */
	const int32_t **tab;     /* owned; [max_seqs] borrowed tables */
	/* sliding windows (kv/pool.h; unused without): the windowed layers' */
	int64_t *slot_w;         /* owned; [max_rows] */
	const int32_t **tab_w;   /* owned; [max_seqs] pointers into wbuf, set by runner_run */
	int64_t *woff;           /* owned; [max_seqs] each group's table's offset in wbuf */
	int32_t *wbuf;           /* owned; [wcap] the groups' W tables (grows to the largest step) */
	int64_t wlen, wcap;
	float *logits;           /* owned; [max_out][n_vocab] */
	kv_seq *seqs;            /* owned; [n_seqs] private sequences */
	int n_seqs;
};

/* A private pool's W parts with sliding windows: each sequence's next rows
 * (at most max_rows) and the window before them, in whole blocks
 * (runner_append releases the rest first). */
static int64_t private_w_blocks(const runner_params *p, int bt)
{
	const llama_hparams *hp = llama_hp(p->model);
	int cap = llama_max_tokens(p->model), rows = p->max_rows > 0 ? MIN(p->max_rows, cap) : cap;
	int64_t per = (hp->swa_window + rows - 1 + bt - 1) / bt + 1;
	return per * (p->n_seqs > 0 ? p->n_seqs : 1);
}

static kv_pool *private_pool(const runner_params *p, err *e)
{
	const llama_hparams *hp = llama_hp(p->model);
	int bt = p->block_tokens > 0 ? p->block_tokens : 16;
	kv_pool_params pp = {
		.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim, .head_dim = hp->head_dim,
		.block_tokens = bt, .n_blocks = MAX((int64_t)1, (p->pool_tokens + bt - 1) / bt),
		.k_type = p->k_type, .v_type = p->v_type, .kern = llama_kern(p->model),
		.host_layers = llama_host_layers(p->model),
		.win_layers = p->windows_kept ? NULL : hp->swa_layer, .window = hp->swa_window,
		.w_blocks = hp->swa_window ? private_w_blocks(p, bt) : 0,
	};
	return kv_pool_new(&pp, e);
}

runner *runner_new(const runner_params *p, err *e)
{
	kv_pool *pool = p->pool ? p->pool : private_pool(p, e);
	if (!pool)
		return NULL;
	runner *r = xcalloc(1, sizeof *r);
	r->m = p->model;
	r->pool = pool;
	r->own_pool = !p->pool;
	int cap = llama_max_tokens(p->model);
	r->max_rows = p->max_rows > 0 ? MIN(p->max_rows, cap) : cap;
	r->max_seqs = p->max_seqs > 0 ? p->max_seqs : r->max_rows;
	r->max_out = p->max_out > 0 ? p->max_out : r->max_rows;
	r->n_vocab = llama_hp(p->model)->n_vocab;
	size_t R = (size_t)r->max_rows, S = (size_t)r->max_seqs;
	r->tok = xmalloc(R * sizeof *r->tok);
	r->pos = xmalloc(R * sizeof *r->pos);
	r->grp = xmalloc(R * sizeof *r->grp);
	r->slot = xmalloc(R * sizeof *r->slot);
	r->out = xmalloc((size_t)r->max_out * sizeof *r->out);
	r->ntab = xmalloc(S * sizeof *r->ntab);
	r->tab = xmalloc(S * sizeof *r->tab);
	if (kv_pool_window(pool)) {
		r->slot_w = xmalloc(R * sizeof *r->slot_w);
		r->tab_w = xmalloc(S * sizeof *r->tab_w);
		r->woff = xmalloc(S * sizeof *r->woff);
	}
	r->logits = xmalloc((size_t)r->max_out * (size_t)r->n_vocab * sizeof *r->logits);
	if (r->own_pool) {
		r->n_seqs = p->n_seqs > 0 ? p->n_seqs : 1;
		r->seqs = xcalloc((size_t)r->n_seqs, sizeof *r->seqs);
	}
	return r;
}

void runner_free(runner *r)
{
	if (!r)
		return;
	for (int h = 0; h < r->n_seqs; h++)
		kv_seq_release(r->pool, &r->seqs[h]);
	if (r->own_pool)
		kv_pool_free(r->pool);
	free(r->tok); free(r->pos); free(r->grp); free(r->slot); free(r->out);
	free(r->ntab); free(r->tab); free(r->logits); free(r->seqs);
	free(r->slot_w); free(r->tab_w); free(r->woff); free(r->wbuf);
	free(r);
}

int runner_max_rows(const runner *r)
{
	return r->max_rows;
}

int runner_rows(const runner *r)
{
	return r->n_rows;
}

/* Group g's table of W parts, for the windowed layers, into wbuf. */
static void add_w_table(runner *r, int g, const kv_seq *kv)
{
	if (r->wlen + kv->n_blocks > r->wcap) {
		int64_t cap = MAX(r->wlen + kv->n_blocks, 2 * r->wcap);
		r->wbuf = xrealloc(r->wbuf, (size_t)cap * sizeof *r->wbuf);
		r->wcap = cap;
	}
	r->woff[g] = r->wlen;
	kv_seq_w_table(r->pool, kv, r->wbuf + r->wlen);
	r->wlen += kv->n_blocks;
}

int runner_add(runner *r, const kv_seq *kv, int64_t pos0, const int32_t *tokens, int n,
	       int out_from, int n_out)
{
	assert(n >= 0 && r->n_rows + n <= r->max_rows && r->n_groups < r->max_seqs);
	assert(n_out >= 0 && r->n_out + n_out <= r->max_out && (n_out == 0 || out_from + n_out <= n));
	assert(pos0 + n <= (int64_t)kv->n_blocks * kv_pool_block_tokens(r->pool));
	int g = r->n_groups++, first = r->n_out;
	r->tab[g] = kv->blocks;
	r->ntab[g] = kv->n_blocks;
	if (r->slot_w)
		add_w_table(r, g, kv);
	for (int i = 0; i < n; i++) {
		int row = r->n_rows++;
		r->tok[row] = tokens[i];
		r->pos[row] = (int32_t)(pos0 + i);
		r->slot[row] = kv_seq_slot(r->pool, kv, pos0 + i);
		if (r->slot_w)
			r->slot_w[row] = kv_seq_slot_w(r->pool, kv, pos0 + i);
		r->grp[row] = g;
	}
	for (int i = 0; i < n_out; i++)
		r->out[r->n_out++] = r->n_rows - n + out_from + i;
	return first;
}

int runner_append(runner *r, int h, const int32_t *tokens, int n, int out_from, int n_out, err *e)
{
	assert(h >= 0 && h < r->n_seqs);
	kv_seq *s = &r->seqs[h];
	int64_t start = s->n_tokens;
	kv_seq_window_release(r->pool, s, start);
	if (kv_seq_reserve(r->pool, s, start + n)) {
		err_set(e, "KV pool exhausted at %lld tokens", (long long)(start + n));
		return -1;
	}
	s->n_tokens = start + n;
	return runner_add(r, s, start, tokens, n, out_from, n_out);
}

int runner_prefill(runner *r, int h, const int32_t *tokens, int n, err *e)
{
	for (int i = 0; i < n; i += r->max_rows) {
		int len = MIN(r->max_rows, n - i);
		bool last = i + len == n;
		if (runner_append(r, h, tokens + i, len, len - 1, last, e) < 0 || runner_run(r, e))
			return -1;
	}
	return 0;
}

int64_t runner_seq_len(const runner *r, int h)
{
	assert(h >= 0 && h < r->n_seqs);
	return r->seqs[h].n_tokens;
}

const kv_pool *runner_pool(const runner *r)
{
	return r->pool;
}

void runner_seq_reset(runner *r, int h)
{
	assert(h >= 0 && h < r->n_seqs);
	kv_seq_release(r->pool, &r->seqs[h]);
}

int runner_run(runner *r, err *e)
{
	if (r->n_rows == 0)
		return 0;
	for (int g = 0; r->slot_w && g < r->n_groups; g++)
		r->tab_w[g] = r->wbuf + r->woff[g];
	llama_batch b = {
		.n_tokens = r->n_rows, .token = r->tok, .pos = r->pos, .slot = r->slot, .seq = r->grp,
		.n_seqs = r->n_groups, .block_table = r->tab, .n_table = r->ntab,
		.n_out = r->n_out, .out_rows = r->out,
		.slot_w = r->slot_w, .block_table_w = r->slot_w ? r->tab_w : NULL,
	};
	kv_view kv = kv_pool_view(r->pool);
	r->n_rows = r->n_groups = r->n_out = 0;
	r->wlen = 0;
	return llama_forward(r->m, &b, &kv, r->logits, e);
}

const float *runner_logits(const runner *r, int i)
{
	assert(i >= 0 && i < r->max_out);
	return r->logits + (size_t)i * (size_t)r->n_vocab;
}
