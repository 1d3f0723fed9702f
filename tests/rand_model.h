/* tests/rand_model.h: random-weight models of the llama, qwen2, qwen3 and
 * gemma3 architectures, written with models/gguf_write.h. Header-only, tests
 * only.
 *
 * rm_write() writes the GGUF file a spec describes: general.architecture, the
 * {arch}.* hyperparameters as llama.cpp's converter names them, the tokenizer
 * (every tokenizer.* key of spec->vocab_from, copied as it is, chat template
 * included) and weights drawn from a fixed seed: uniform values scaled so that
 * activations stay near unit size; norm weights 1 + 0.1 u, Qwen3's Q/K norm
 * weights 1 + 0.4 u (far enough from 1 that skipping them shows), biases
 * 0.5 u, Llama 3 rope_freqs factors in [1, 8]; Gemma 3's norms after
 * attention and FFN 1 + 0.4 u too (its files store 1 + w: these are the
 * multipliers themselves). Q8_0 matrices hold the
 * quantized values of the same f32 draws. The same spec always gives the same
 * bytes. */
#ifndef PAGECHAT_TESTS_RAND_MODEL_H
#define PAGECHAT_TESTS_RAND_MODEL_H

#include "kernels/quant.h"
#include "models/gguf_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rm_spec {
	const char *arch;        /* "llama", "qwen2", "qwen3" or "gemma3" */
	const char *vocab_from;  /* GGUF whose tokenizer.* keys are copied, or NULL */
	int n_vocab;             /* without vocab_from (else the vocabulary's size) */
	int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
	int n_rot;               /* rope.dimension_count (0: head_dim) */
	float eps;               /* layer_norm_rms_epsilon */
	float rope_base;         /* rope.freq_base (0: key not written) */
	float linear_scale;      /* > 0: rope.scaling.type "linear" with this factor */
	float old_scale;         /* > 0: the older key rope.scale_linear (no type key) */
	bool rope_freqs;         /* a rope_freqs.weight tensor (Llama 3 factors) */
	bool qkv_bias;           /* attn_q/k/v.bias (implied by qwen2) */
	bool more_bias;          /* attn_output and ffn_gate/up/down biases (llama's optional ones) */
	bool qk_norm;            /* attn_q_norm/attn_k_norm (implied by qwen3) */
	bool tied;               /* no output.weight: the head is token_embd */
	/* gemma3 (which implies the Q/K norms and the post norms): keys written
	 * only when set */
	int swa_window;          /* > 0: attention.sliding_window */
	int swa_period;          /* > 0: attention.sliding_window_pattern, a period */
	const bool *swa_layers;  /* non-NULL: the pattern as one bool per layer */
	float rope_base_swa;     /* > 0: rope.freq_base_swa */
	float attn_scale;        /* > 0: attention.scale */
	float softcap;           /* > 0: final_logit_softcapping */
	int value_length;        /* > 0: attention.value_length (else key_length) */
	int swa_layers_n;        /* > 0: how many bools swa_layers has (else n_layers) */
	const char *extra_key;   /* non-NULL: {arch}.extra_key = extra_value (f32), for error tests */
	float extra_value;
	enum dtype wtype;        /* matrices: DT_F32 or DT_Q8_0 (norms stay f32) */
	const char *omit;        /* a tensor name to leave out (error tests), or NULL */
	int32_t swap_out[2];     /* two rows of output.weight to exchange (equal: none) */
	uint64_t seed;
} rm_spec;

/* How one tensor's values are drawn: offset + scale * u, u uniform in [-1, 1). */
typedef struct rm_tensor {
	char name[64];
	int64_t ne0, ne1;        /* ne1 0: a vector */
	enum dtype type;
	float offset, scale;
} rm_tensor;

typedef struct rm_ctx {
	const rm_spec *s;
	rm_tensor *t;            /* owned */
	int n, cap;
} rm_ctx;

static inline uint64_t rm_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);   /* splitmix64 */
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1), 24 bits (exact in f32). */
static inline float rm_uniform(uint64_t *state)
{
	return (float)(rm_next(state) >> 40) / (float)(1 << 23) - 1.0f;
}

static inline void rm_add(rm_ctx *c, const char *name, int64_t ne0, int64_t ne1, enum dtype type,
			  float offset, float scale)
{
	if (c->s->omit && !strcmp(c->s->omit, name))
		return;
	xgrow(&c->t, &c->cap, (int64_t)c->n + 1, sizeof *c->t);
	rm_tensor *t = &c->t[c->n++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->ne0 = ne0, t->ne1 = ne1, t->type = ne1 ? type : DT_F32;
	t->offset = offset, t->scale = scale;
}

static inline void rm_add_layer(rm_ctx *c, int l)
{
	const rm_spec *s = c->s;
	int64_t q = (int64_t)s->n_heads * s->head_dim, kv = (int64_t)s->n_kv_heads * s->head_dim;
	float in_dim = sqrtf(3.0f / (float)s->dim), in_q = sqrtf(3.0f / (float)q);
	float in_ffn = sqrtf(3.0f / (float)s->ffn_dim);
	bool gemma = !strcmp(s->arch, "gemma3"), bias = s->qkv_bias || !strcmp(s->arch, "qwen2");
	bool qk = s->qk_norm || !strcmp(s->arch, "qwen3") || gemma;
	char n[64];
#define L(suffix, ne0, ne1, off, sc) \
	(snprintf(n, sizeof n, "blk.%d.%s", l, suffix), rm_add(c, n, ne0, ne1, s->wtype, off, sc))
	L("attn_norm.weight", s->dim, 0, 1.0f, 0.1f);
	/* Q and K twice the unit scale: sharper attention, so positions matter */
	L("attn_q.weight", s->dim, q, 0.0f, 2.0f * in_dim);
	L("attn_k.weight", s->dim, kv, 0.0f, 2.0f * in_dim);
	L("attn_v.weight", s->dim, kv, 0.0f, in_dim);
	if (bias) {
		L("attn_q.bias", q, 0, 0.0f, 0.5f);
		L("attn_k.bias", kv, 0, 0.0f, 0.5f);
		L("attn_v.bias", kv, 0, 0.0f, 0.5f);
	}
	if (qk) {
		L("attn_q_norm.weight", s->head_dim, 0, 1.0f, 0.4f);
		L("attn_k_norm.weight", s->head_dim, 0, 1.0f, 0.4f);
	}
	L("attn_output.weight", q, s->dim, 0.0f, in_q);
	if (s->more_bias)
		L("attn_output.bias", s->dim, 0, 0.0f, 0.5f);
	if (gemma)
		L("post_attention_norm.weight", s->dim, 0, 1.0f, 0.4f);
	L("ffn_norm.weight", s->dim, 0, 1.0f, 0.1f);
	L("ffn_gate.weight", s->dim, s->ffn_dim, 0.0f, in_dim);
	L("ffn_up.weight", s->dim, s->ffn_dim, 0.0f, in_dim);
	L("ffn_down.weight", s->ffn_dim, s->dim, 0.0f, in_ffn);
	if (gemma)
		L("post_ffw_norm.weight", s->dim, 0, 1.0f, 0.4f);
	if (s->more_bias) {
		L("ffn_gate.bias", s->ffn_dim, 0, 0.0f, 0.5f);
		L("ffn_up.bias", s->ffn_dim, 0, 0.0f, 0.5f);
		L("ffn_down.bias", s->dim, 0, 0.0f, 0.5f);
	}
#undef L
}

static inline void rm_set_hparams(gguf_writer *w, const rm_spec *s)
{
	char k[128];
#define U32(suffix, v) (snprintf(k, sizeof k, "%s.%s", s->arch, suffix), gguf_writer_set_u32(w, k, (uint32_t)(v)))
#define F32(suffix, v) (snprintf(k, sizeof k, "%s.%s", s->arch, suffix), gguf_writer_set_f32(w, k, (v)))
	gguf_writer_set_str(w, "general.architecture", s->arch);
	snprintf(k, sizeof k, "rand-%s", s->arch);
	gguf_writer_set_str(w, "general.name", k);
	U32("context_length", 4096);
	U32("embedding_length", s->dim);
	U32("block_count", s->n_layers);
	U32("feed_forward_length", s->ffn_dim);
	U32("attention.head_count", s->n_heads);
	U32("attention.head_count_kv", s->n_kv_heads);
	U32("attention.key_length", s->head_dim);
	U32("attention.value_length", s->value_length ? s->value_length : s->head_dim);
	U32("rope.dimension_count", s->n_rot ? s->n_rot : s->head_dim);
	F32("attention.layer_norm_rms_epsilon", s->eps);
	if (s->rope_base > 0)
		F32("rope.freq_base", s->rope_base);
	if (s->linear_scale > 0) {
		snprintf(k, sizeof k, "%s.rope.scaling.type", s->arch);
		gguf_writer_set_str(w, k, "linear");
		F32("rope.scaling.factor", s->linear_scale);
	}
	if (s->old_scale > 0)
		F32("rope.scale_linear", s->old_scale);
	if (s->swa_window > 0)
		U32("attention.sliding_window", s->swa_window);
	if (s->swa_period > 0)
		U32("attention.sliding_window_pattern", s->swa_period);
	if (s->swa_layers) {
		snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", s->arch);
		gguf_writer_set_bools(w, k, s->swa_layers, (size_t)(s->swa_layers_n ? s->swa_layers_n : s->n_layers));
	}
	if (s->rope_base_swa > 0)
		F32("rope.freq_base_swa", s->rope_base_swa);
	if (s->attn_scale > 0)
		F32("attention.scale", s->attn_scale);
	if (s->softcap > 0)
		F32("final_logit_softcapping", s->softcap);
	if (s->extra_key)
		F32(s->extra_key, s->extra_value);
#undef U32
#undef F32
}

/* Draws each row r of tensor i from a stream of its own (seed, i, r) and
 * writes it, quantized when the tensor is. The output head's rows swap_out
 * trade places (and nothing else changes: the streams are per row). */
static inline int rm_fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	rm_ctx *c = ctx;
	const rm_tensor *t = &c->t[i];
	bool swap = !strcmp(t->name, "output.weight");
	int64_t rows = t->ne1 ? t->ne1 : 1;
	size_t row_bytes = (size_t)dtype_row_bytes(t->type, t->ne0);
	float *row = xmalloc((size_t)t->ne0 * sizeof *row);
	void *q = xmalloc(row_bytes);
	int rc = 0;
	for (int64_t r = 0; r < rows && !rc; r++) {
		int64_t from = r;
		if (swap && r == c->s->swap_out[0])
			from = c->s->swap_out[1];
		else if (swap && r == c->s->swap_out[1])
			from = c->s->swap_out[0];
		uint64_t st = c->s->seed * 0x100000001B3ull + (uint64_t)i * 0x9E3779B9ull +
			      (uint64_t)from * 0xD6E8FEB86659FD93ull;
		for (int64_t j = 0; j < t->ne0; j++)
			row[j] = t->offset + t->scale * rm_uniform(&st);
		if (t->type == DT_F32)
			rc = gguf_out_write(out, row, row_bytes, e);
		else {
			quant_quantize_row(t->type, row, q, t->ne0);
			rc = gguf_out_write(out, q, row_bytes, e);
		}
	}
	free(row);
	free(q);
	return rc;
}

/* Writes the model s describes to path. 0, or -1 with e filled (the vocabulary
 * file cannot be read, a shape does not fit the weight type, a write error). */
static inline int rm_write(const rm_spec *s, const char *path, err *e)
{
	rm_ctx c = {.s = s};
	gguf_writer *w = gguf_writer_new();
	gguf_file *vf = NULL;
	int n_vocab = s->n_vocab, rc = -1;
	if (s->vocab_from) {
		gguf_arr toks;
		vf = gguf_open(s->vocab_from, e);
		if (!vf || gguf_get_arr(vf, "tokenizer.ggml.tokens", &toks, e))
			goto done;
		n_vocab = (int)toks.n;
		for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
			gguf_str key = gguf_kv_key(vf, i);
			if (key.len > 10 && !memcmp(key.p, "tokenizer.", 10))
				gguf_writer_copy_kv(w, vf, i);
		}
	}
	rm_set_hparams(w, s);
	rm_add(&c, "token_embd.weight", s->dim, n_vocab, s->wtype, 0.0f, 1.0f);
	rm_add(&c, "output_norm.weight", s->dim, 0, DT_F32, 1.0f, 0.1f);
	if (!s->tied)
		rm_add(&c, "output.weight", s->dim, n_vocab, s->wtype, 0.0f, sqrtf(3.0f / (float)s->dim));
	if (s->rope_freqs)
		rm_add(&c, "rope_freqs.weight", (s->n_rot ? s->n_rot : s->head_dim) / 2, 0, DT_F32, 4.5f, 3.5f);
	for (int l = 0; l < s->n_layers; l++)
		rm_add_layer(&c, l);
	for (int i = 0; i < c.n; i++) {
		int64_t ne[2] = {c.t[i].ne0, c.t[i].ne1};
		if (gguf_writer_add_tensor(w, c.t[i].name, c.t[i].type, c.t[i].ne1 ? 2 : 1, ne, e) < 0)
			goto done;
	}
	rc = gguf_writer_write(w, path, rm_fill, &c, e);
done:
	free(c.t);
	gguf_writer_free(w);
	gguf_close(vf);
	return rc;
}

#endif
