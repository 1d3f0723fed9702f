/* engine/gen.h: one request from prompt to finish, without the engine thread.
 *
 * Runs a single sequence through the model over its own small paged KV pool:
 * prefill in chunks, then decode one token per step with the sampler. The
 * command-line `generate` and `logits` use it, and tests use it as the
 * one-request reference that batched runs must reproduce. Caller's thread. */
#ifndef PAGECHAT_GEN_H
#define PAGECHAT_GEN_H

#include "engine/sample.h"
#include "kernels/kvq.h"
#include "models/llama.h"
#include "models/tok.h"

enum gen_stop { GEN_STOP_LENGTH, GEN_STOP_EOS, GEN_STOP_CONTEXT, GEN_STOP_CALLER };

typedef struct gen_params {
	samp_params samp;
	int n_predict;           /* tokens to generate at most (< 0: until EOS/context) */
	int n_ctx;               /* context limit in tokens (prompt + generated) */
	int block_tokens;        /* KV block size (default 16) */
	int chunk_tokens;        /* prefill chunk size (default: the model's max batch) */
	enum kv_type kv_type_k, kv_type_v; /* the KV pool's row types (0: f32) */
} gen_params;

typedef struct gen_stats {
	int n_prompt, n_gen;
	double prompt_s, gen_s;  /* wall time of prefill and of decoding */
	enum gen_stop stop;
} gen_stats;

/* Called with every generated token; return true to stop. */
typedef bool (*gen_token_fn)(void *ctx, int32_t id);

/* Generates from prompt[n_prompt] (which must be non-empty and shorter than
 * n_ctx). tk may be NULL (then EOS is never detected). Returns 0, or -1 with e
 * filled (prompt too long for the context, model error). */
int gen_run(llama_model *m, const tok *tk, const int32_t *prompt, int n_prompt,
	    const gen_params *p, gen_token_fn fn, void *ctx, gen_stats *st, err *e);

/* Runs prompt[n_prompt] through the model in chunks of chunk_tokens (<= 0:
 * the model's max batch) and writes the last position's logits to
 * logits[n_vocab]. Returns 0 or -1 with e filled. */
int gen_logits(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
	       float *logits, err *e);
/* The same with a KV pool whose K and V rows are stored as k_type / v_type. */
int gen_logits_kv(llama_model *m, const int32_t *prompt, int n_prompt, int chunk_tokens,
		  enum kv_type k_type, enum kv_type v_type, float *logits, err *e);

#endif
