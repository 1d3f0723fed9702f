/* engine/gen.c: single-sequence generation over a private paged KV pool. */
#include "engine/gen.h"

#include "engine/kv_pool.h"

#include <stdlib.h>

typedef struct runner {
	llama_model *m;
	kv_pool *pool;           /* owned */
	kv_seq seq;
	int chunk;               /* tokens per forward step */
	int64_t *slot;           /* owned; [chunk] */
	int32_t *pos;            /* owned; [chunk] */
	int32_t *seq_of;         /* owned; [chunk], all 0 */
} runner;

static int runner_init(runner *r, llama_model *m, int n_ctx, int block_tokens, int chunk,
		       uint8_t k_type, uint8_t v_type, err *e)
{
	const llama_hparams *hp = llama_hp(m);
	*r = (runner){.m = m};
	r->chunk = chunk > 0 ? MIN(chunk, llama_max_tokens(m)) : llama_max_tokens(m);
	int bt = block_tokens > 0 ? block_tokens : 16;
	kv_pool_params pp = {
		.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
		.block_tokens = bt, .n_blocks = (n_ctx + bt - 1) / bt, .head_dim = hp->head_dim,
		.k_type = k_type, .v_type = v_type, .kern = llama_kern(m),
	};
	r->pool = kv_pool_new(&pp, e);
	if (!r->pool)
		return -1;
	kv_seq_init(&r->seq);
	r->slot = xmalloc((size_t)r->chunk * sizeof *r->slot);
	r->pos = xmalloc((size_t)r->chunk * sizeof *r->pos);
	r->seq_of = xcalloc((size_t)r->chunk, sizeof *r->seq_of);
	return 0;
}

static void runner_deinit(runner *r)
{
	if (r->pool)
		kv_seq_release(r->pool, &r->seq);
	kv_pool_free(r->pool);
	free(r->slot);
	free(r->pos);
	free(r->seq_of);
}

/* Appends toks[n] (n <= chunk) to the sequence; logits of the last one go to
 * logits when it is not NULL. */
static int runner_step(runner *r, const int32_t *toks, int n, float *logits, err *e)
{
	int64_t start = r->seq.n_tokens;
	if (kv_seq_reserve(r->pool, &r->seq, start + n)) {
		err_set(e, "KV pool exhausted at %lld tokens", (long long)(start + n));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		r->pos[i] = (int32_t)(start + i);
		r->slot[i] = kv_seq_slot(r->pool, &r->seq, start + i);
	}
	int32_t last = n - 1;
	const int32_t *table = r->seq.blocks;
	llama_batch b = {
		.n_tokens = n, .token = toks, .pos = r->pos, .slot = r->slot, .seq = r->seq_of,
		.n_seqs = 1, .block_table = &table, .n_table = &r->seq.n_blocks,
		.n_out = logits ? 1 : 0, .out_rows = &last,
	};
	kv_view kv = kv_pool_view(r->pool);
	if (llama_forward(r->m, &b, &kv, logits, e))
		return -1;
	r->seq.n_tokens = start + n;
	return 0;
}

static int prefill(runner *r, const int32_t *prompt, int n_prompt, float *logits, err *e)
{
	for (int i = 0; i < n_prompt; i += r->chunk) {
		int n = MIN(r->chunk, n_prompt - i);
		if (runner_step(r, prompt + i, n, i + n == n_prompt ? logits : NULL, e))
			return -1;
	}
	return 0;
}

int gen_logits(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
	       float *logits, err *e)
{
	return gen_logits_kv(m, prompt, n_prompt, chunk_tokens, 0, 0, logits, e);
}

int gen_logits_kv(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
		  uint8_t k_type, uint8_t v_type, float *logits, err *e)
{
	if (n_prompt <= 0) {
		err_set(e, "empty prompt");
		return -1;
	}
	runner r;
	int rc = runner_init(&r, m, n_prompt, 16, chunk_tokens, k_type, v_type, e);
	if (!rc)
		rc = prefill(&r, prompt, n_prompt, logits, e);
	runner_deinit(&r);
	return rc;
}

static int decode_loop(runner *r, const tok *tk, const gen_params *p, int32_t *hist, int n_hist,
		       float *logits, gen_token_fn fn, void *ctx, gen_stats *st, err *e)
{
	samp s;
	samp_init(&s, &p->samp, llama_hp(r->m)->n_vocab);
	int rc = 0;
	st->stop = GEN_STOP_LENGTH;
	while (p->n_predict < 0 || st->n_gen < p->n_predict) {
		int32_t id = samp_sample(&s, logits, hist, n_hist);
		hist[n_hist++] = id;
		st->n_gen++;
		if (tk && tok_is_eog(tk, id)) {
			st->stop = GEN_STOP_EOS;
			break;
		}
		if (fn && fn(ctx, id)) {
			st->stop = GEN_STOP_CALLER;
			break;
		}
		if (p->n_predict >= 0 && st->n_gen >= p->n_predict)
			break;
		if (n_hist >= p->n_ctx) {
			st->stop = GEN_STOP_CONTEXT;
			break;
		}
		if ((rc = runner_step(r, &id, 1, logits, e)))
			break;
	}
	samp_deinit(&s);
	return rc;
}

int gen_run(llama_model *m, const tok *tk, const int32_t *prompt, int n_prompt,
	    const gen_params *p, gen_token_fn fn, void *ctx, gen_stats *st, err *e)
{
	*st = (gen_stats){.n_prompt = n_prompt};
	if (n_prompt <= 0) {
		err_set(e, "empty prompt: nothing to continue");
		return -1;
	}
	if (n_prompt >= p->n_ctx) {
		err_set(e, "prompt is %d tokens but the context holds %d: shorten it or raise -c",
			n_prompt, p->n_ctx);
		return -1;
	}
	runner r;
	if (runner_init(&r, m, p->n_ctx, p->block_tokens, p->chunk_tokens, p->kv_type_k, p->kv_type_v, e)) {
		runner_deinit(&r);
		return -1;
	}
	float *logits = xmalloc((size_t)llama_hp(m)->n_vocab * sizeof(float));
	int32_t *hist = xmalloc((size_t)p->n_ctx * sizeof(int32_t));
	for (int i = 0; i < n_prompt; i++)
		hist[i] = prompt[i];
	double t0 = now_s();
	int rc = prefill(&r, prompt, n_prompt, logits, e);
	double t1 = now_s();
	st->prompt_s = t1 - t0;
	if (!rc)
		rc = decode_loop(&r, tk, p, hist, n_prompt, logits, fn, ctx, st, e);
	st->gen_s = now_s() - t1;
	free(hist);
	free(logits);
	runner_deinit(&r);
	return rc;
}
