/* engine/gen.c: single-sequence generation over a private paged KV pool. */
#include "engine/gen.h"

#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

static runner *gen_runner(llama_model *m, int64_t n_ctx, int block_tokens, int chunk,
			  enum kv_type k_type, enum kv_type v_type, err *e)
{
	runner_params rp = {
		.model = m, .max_rows = chunk, .max_out = 1, .max_seqs = 1, .pool_tokens = n_ctx,
		.block_tokens = block_tokens, .k_type = k_type, .v_type = v_type,
	};
	return runner_new(&rp, e);
}

int gen_logits(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
	       float *logits, err *e)
{
	return gen_logits_kv(m, prompt, n_prompt, chunk_tokens, KV_F32, KV_F32, logits, e);
}

int gen_logits_kv(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
		  enum kv_type k_type, enum kv_type v_type, float *logits, err *e)
{
	if (n_prompt <= 0) {
		err_set(e, "empty prompt");
		return -1;
	}
	runner *r = gen_runner(m, n_prompt, 16, chunk_tokens, k_type, v_type, e);
	if (!r)
		return -1;
	int rc = runner_prefill(r, 0, prompt, n_prompt, e);
	if (!rc && !samp_check_logits(runner_logits(r, 0), llama_hp(m)->n_vocab, n_prompt - 1, e))
		rc = -1;
	if (!rc)
		memcpy(logits, runner_logits(r, 0), (size_t)llama_hp(m)->n_vocab * sizeof *logits);
	runner_free(r);
	return rc;
}

static int decode_loop(runner *r, int n_vocab, const tok *tk, const gen_params *p, int32_t *hist,
		       int n_hist, gen_token_fn fn, void *ctx, gen_stats *st, err *e)
{
	samp s;
	samp_init(&s, &p->samp, n_vocab);
	int rc = 0;
	st->stop = GEN_STOP_LENGTH;
	while (p->n_predict < 0 || st->n_gen < p->n_predict) {
		if (!samp_check_logits(runner_logits(r, 0), n_vocab, n_hist - 1, e)) {
			rc = -1;
			break;
		}
		int32_t id = samp_sample(&s, runner_logits(r, 0), hist, n_hist);
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
		if ((rc = runner_prefill(r, 0, &id, 1, e)))
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
	runner *r = gen_runner(m, p->n_ctx, p->block_tokens, p->chunk_tokens, p->kv_type_k, p->kv_type_v, e);
	if (!r)
		return -1;
	int32_t *hist = xmalloc((size_t)p->n_ctx * sizeof(int32_t));
	memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
	double t0 = now_s();
	int rc = runner_prefill(r, 0, prompt, n_prompt, e);
	double t1 = now_s();
	st->prompt_s = t1 - t0;
	if (!rc)
		rc = decode_loop(r, llama_hp(m)->n_vocab, tk, p, hist, n_prompt, fn, ctx, st, e);
	st->gen_s = now_s() - t1;
	free(hist);
	runner_free(r);
	return rc;
}
