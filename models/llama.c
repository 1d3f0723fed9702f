/* models/llama.c: hyperparameters, tensor checks and the forward pass.
 *
 * Tensor names and shapes follow the GGUF "llama" convention (ne[0] is the
 * input width): token_embd {dim, vocab}, blk.L.attn_q {dim, heads*hd},
 * attn_k/attn_v {dim, kv_heads*hd}, attn_output {heads*hd, dim}, ffn_gate and
 * ffn_up {dim, ffn}, ffn_down {ffn, dim}, norms {dim}; output {dim, vocab} or
 * tied to token_embd. */
#include "models/llama.h"

#include "kernels/kvq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
	const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo;
	const gguf_tensor *bq, *bk, *bv;          /* qwen2 biases, else NULL */
	const gguf_tensor *q_norm, *k_norm;       /* qwen3 per-head norms, else NULL */
	const gguf_tensor *ffn_norm, *w_gate, *w_up, *w_down;
} layer;

struct llama_model {
	gguf_file *file;         /* owned; every tensor is a view into it */
	const kern_ops *kern;    /* borrowed, static */
	llama_hparams hp;
	int max_tokens;
	const gguf_tensor *tok_embd, *out_norm, *output;
	const gguf_tensor *rope_freqs;   /* Llama 3.x per-pair frequency factors, or NULL */
	layer *layers;           /* owned; [n_layers] */
	float *inv_freq;         /* owned; [n_rot/2] rope pair frequencies */
	/* scratch, owned, allocated once for max_tokens rows */
	float *x, *xb;           /* [max_tokens][dim] */
	float *q, *att;          /* [max_tokens][heads*hd] */
	float *k, *v;            /* [max_tokens][kv_heads*hd] */
	float *hb, *hb2;         /* [max_tokens][ffn] */
	const int32_t **tables;  /* [max_tokens] per-row block table */
	int32_t *n_ctx;          /* [max_tokens] */
};

/* ---- hyperparameters ---- */

static const struct {
	const char *arch;
	bool neox, qkv_bias, qk_norm;
} known_archs[] = {
	{"llama", false, false, false},
	{"mistral", false, false, false},
	{"qwen2", true, true, false},
	{"qwen3", true, false, true},
};

static int key_u32(const gguf_file *f, const char *arch, const char *suffix, bool optional,
		   int *out, err *e)
{
	char key[128];
	uint32_t v = (uint32_t)*out;
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	if ((optional ? gguf_opt_u32 : gguf_get_u32)(f, key, &v, e))
		return -1;
	if (v > (1u << 30)) {
		err_set(e, "%s: metadata key '%s' = %u is absurd", gguf_name(f), key, v);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int key_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, err *e)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	return gguf_opt_f32(f, key, out, e);
}

/* RoPE scaling: "linear" divides positions by the factor; Llama 3.x's
 * frequency factors come as the rope_freqs tensor (bound with the weights). */
static int read_rope_scaling(const gguf_file *f, llama_hparams *hp, err *e)
{
	char key[128];
	gguf_str type = {0};
	float factor = 1.0f;
	hp->rope_freq_scale = 1.0f;
	snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
	if (gguf_opt_str(f, key, &type, e) || key_f32(f, hp->arch, "rope.scaling.factor", &factor, e) ||
	    key_f32(f, hp->arch, "rope.scale_linear", &factor, e))
		return -1;
	bool linear = gguf_str_eq(type, "linear") || (!type.p && factor != 1.0f);
	if (type.p && !linear && !gguf_str_eq(type, "none")) {
		err_set(e, "%s: RoPE scaling '%.*s' (%s) is not supported (none, linear and Llama 3 "
			"frequency factors are)", gguf_name(f), (int)MIN(type.len, 32), type.p, key);
		return -1;
	}
	if (linear && factor > 0)
		hp->rope_freq_scale = 1.0f / factor;
	return 0;
}

static int check_dims(const gguf_file *f, const llama_hparams *hp, err *e)
{
	const char *bad = NULL;
	if (hp->dim <= 0) bad = "embedding_length";
	else if (hp->n_layers <= 0) bad = "block_count";
	else if (hp->n_heads <= 0) bad = "attention.head_count";
	else if (hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads) bad = "attention.head_count_kv";
	else if (hp->head_dim <= 0 || hp->head_dim % 2) bad = "attention.key_length";
	else if (hp->ffn_dim <= 0) bad = "feed_forward_length";
	else if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2) bad = "rope.dimension_count";
	else if (hp->n_vocab <= 0) bad = "vocab_size";
	else if (!(hp->eps > 0) || !(hp->rope_base > 0)) bad = "layer_norm_rms_epsilon/rope.freq_base";
	if (bad) {
		err_set(e, "%s: metadata '%s.%s' is missing or invalid for this model shape",
			gguf_name(f), hp->arch, bad);
		return -1;
	}
	return 0;
}

int llama_read_hparams(const gguf_file *f, llama_hparams *hp, err *e)
{
	gguf_str arch;
	memset(hp, 0, sizeof *hp);
	if (gguf_get_str(f, "general.architecture", &arch, e))
		return -1;
	size_t i;
	for (i = 0; i < ARRAY_LEN(known_archs); i++)
		if (gguf_str_eq(arch, known_archs[i].arch))
			break;
	if (i == ARRAY_LEN(known_archs)) {
		err_set(e, "%s: architecture '%.*s' is not supported (llama, mistral, qwen2, qwen3 are)",
			gguf_name(f), (int)MIN(arch.len, 64), arch.p);
		return -1;
	}
	snprintf(hp->arch, sizeof hp->arch, "%s", known_archs[i].arch);
	hp->rope_neox = known_archs[i].neox;
	hp->has_qkv_bias = known_archs[i].qkv_bias;
	hp->has_qk_norm = known_archs[i].qk_norm;
	const char *a = hp->arch;
	hp->eps = 1e-5f;
	hp->rope_base = 10000.0f;
	if (key_u32(f, a, "embedding_length", false, &hp->dim, e) ||
	    key_u32(f, a, "block_count", false, &hp->n_layers, e) ||
	    key_u32(f, a, "feed_forward_length", false, &hp->ffn_dim, e) ||
	    key_u32(f, a, "attention.head_count", false, &hp->n_heads, e))
		return -1;
	hp->n_kv_heads = hp->n_heads;
	hp->head_dim = hp->n_heads ? hp->dim / hp->n_heads : 0;
	hp->n_ctx_train = 2048;
	if (key_u32(f, a, "attention.head_count_kv", true, &hp->n_kv_heads, e) ||
	    key_u32(f, a, "attention.key_length", true, &hp->head_dim, e) ||
	    key_u32(f, a, "context_length", true, &hp->n_ctx_train, e) ||
	    key_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->eps, e) ||
	    key_f32(f, a, "rope.freq_base", &hp->rope_base, e))
		return -1;
	hp->n_rot = hp->head_dim;
	if (key_u32(f, a, "rope.dimension_count", true, &hp->n_rot, e) || read_rope_scaling(f, hp, e))
		return -1;
	gguf_arr toks;
	const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
	if (gguf_find_key(f, "tokenizer.ggml.tokens") >= 0 &&
	    !gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, e) && toks.n <= (1u << 24))
		hp->n_vocab = (int)toks.n;
	if (emb && emb->ne[1] > hp->n_vocab && emb->ne[1] <= (1 << 24))
		hp->n_vocab = (int)emb->ne[1];
	if (key_u32(f, a, "vocab_size", true, &hp->n_vocab, e))
		return -1;
	return check_dims(f, hp, e);
}

/* ---- tensors ---- */

/* Looks up a tensor and checks its shape ({ne0} for a vector when ne1 is 0)
 * and type. *out is NULL for an absent optional tensor. Returns 0 or -1. */
static int need(const llama_model *m, const char *name, int64_t ne0, int64_t ne1,
		bool optional, const gguf_tensor **out, err *e)
{
	const gguf_tensor *t = gguf_find_tensor(m->file, name);
	*out = NULL;
	if (!t) {
		if (optional)
			return 0;
		err_set(e, "%s: tensor '%s' is missing (architecture %s needs it)",
			gguf_name(m->file), name, m->hp.arch);
		return -1;
	}
	int64_t want_ne1 = ne1 ? ne1 : 1;
	if (t->ne[0] != ne0 || t->ne[1] != want_ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
		err_set(e, "%s: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld}",
			gguf_name(m->file), name, (long long)t->ne[0], (long long)t->ne[1],
			(long long)t->ne[2], (long long)t->ne[3], (long long)ne0, (long long)want_ne1);
		return -1;
	}
	bool is_vec = ne1 == 0;
	if (is_vec ? t->type != DT_F32 : !m->kern->supports(t->type)) {
		err_set(e, "%s: tensor '%s' has type %s, which the %s backend cannot use%s",
			gguf_name(m->file), name, dtype_name(t->type), m->kern->name,
			is_vec ? " (norms and biases must be f32)" : "");
		return -1;
	}
	*out = t;
	return 0;
}

#define NEED(dst, ne0, ne1, opt) do { \
	if (need(m, name, (ne0), (ne1), (opt), &(dst), e)) return -1; } while (0)

static int bind_layer(llama_model *m, int l, err *e)
{
	const llama_hparams *hp = &m->hp;
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim;
	int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
	layer *L = &m->layers[l];
	char name[96];
	bool bias = hp->has_qkv_bias;
#define T(field, suffix, ne0, ne1, opt) \
	snprintf(name, sizeof name, "blk.%d.%s", l, suffix); NEED(L->field, ne0, ne1, opt)
	T(attn_norm, "attn_norm.weight", hp->dim, 0, false);
	T(wq, "attn_q.weight", hp->dim, q_dim, false);
	T(wk, "attn_k.weight", hp->dim, kv_dim, false);
	T(wv, "attn_v.weight", hp->dim, kv_dim, false);
	T(wo, "attn_output.weight", q_dim, hp->dim, false);
	T(bq, "attn_q.bias", q_dim, 0, !bias);
	T(bk, "attn_k.bias", kv_dim, 0, !bias);
	T(bv, "attn_v.bias", kv_dim, 0, !bias);
	if (hp->has_qk_norm) {
		T(q_norm, "attn_q_norm.weight", hp->head_dim, 0, false);
		T(k_norm, "attn_k_norm.weight", hp->head_dim, 0, false);
	}
	T(ffn_norm, "ffn_norm.weight", hp->dim, 0, false);
	T(w_gate, "ffn_gate.weight", hp->dim, hp->ffn_dim, false);
	T(w_up, "ffn_up.weight", hp->dim, hp->ffn_dim, false);
	T(w_down, "ffn_down.weight", hp->ffn_dim, hp->dim, false);
#undef T
	return 0;
}

static int bind_tensors(llama_model *m, err *e)
{
	const llama_hparams *hp = &m->hp;
	const char *name;
	name = "token_embd.weight";
	NEED(m->tok_embd, hp->dim, hp->n_vocab, false);
	name = "output_norm.weight";
	NEED(m->out_norm, hp->dim, 0, false);
	name = "output.weight";
	NEED(m->output, hp->dim, hp->n_vocab, true);
	name = "rope_freqs.weight";
	NEED(m->rope_freqs, hp->n_rot / 2, 0, true);
	m->hp.tied_output = m->output == NULL;
	if (!m->output)
		m->output = m->tok_embd;
	m->layers = xcalloc((size_t)hp->n_layers, sizeof *m->layers);
	for (int l = 0; l < hp->n_layers; l++)
		if (bind_layer(m, l, e))
			return -1;
	return 0;
}

static void alloc_scratch(llama_model *m)
{
	const llama_hparams *hp = &m->hp;
	size_t T = (size_t)m->max_tokens;
	size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
	m->x = xmalloc(T * hp->dim * sizeof(float));
	m->xb = xmalloc(T * hp->dim * sizeof(float));
	m->q = xmalloc(T * q_dim * sizeof(float));
	m->att = xmalloc(T * q_dim * sizeof(float));
	m->k = xmalloc(T * kv_dim * sizeof(float));
	m->v = xmalloc(T * kv_dim * sizeof(float));
	m->hb = xmalloc(T * hp->ffn_dim * sizeof(float));
	m->hb2 = xmalloc(T * hp->ffn_dim * sizeof(float));
	m->tables = xmalloc(T * sizeof *m->tables);
	m->n_ctx = xmalloc(T * sizeof *m->n_ctx);
	m->inv_freq = xmalloc((size_t)hp->n_rot / 2 * sizeof(float));
	const float *factors = m->rope_freqs ? m->rope_freqs->data : NULL;
	for (int i = 0; i < hp->n_rot / 2; i++) {
		m->inv_freq[i] = powf(hp->rope_base, -2.0f * (float)i / (float)hp->n_rot) * hp->rope_freq_scale;
		if (factors)
			m->inv_freq[i] /= factors[i];
	}
}

llama_model *llama_from_gguf(gguf_file *f, const llama_params *p, err *e)
{
	llama_model *m = xcalloc(1, sizeof *m);
	m->file = f;
	m->kern = p && p->kern ? p->kern : kern_cpu();
	m->max_tokens = p && p->max_tokens > 0 ? p->max_tokens : 512;
	if (p && p->n_threads > 0 && m->kern->set_threads)
		m->kern->set_threads(p->n_threads);
	if (llama_read_hparams(f, &m->hp, e) || bind_tensors(m, e)) {
		llama_free(m);
		return NULL;
	}
	alloc_scratch(m);
	return m;
}

llama_model *llama_open(const char *path, const llama_params *p, err *e)
{
	gguf_file *f = gguf_open(path, e);
	return f ? llama_from_gguf(f, p, e) : NULL;
}

void llama_free(llama_model *m)
{
	if (!m)
		return;
	free(m->x); free(m->xb); free(m->q); free(m->att); free(m->k); free(m->v);
	free(m->hb); free(m->hb2); free(m->tables); free(m->n_ctx); free(m->inv_freq);
	free(m->layers);
	gguf_close(m->file);
	free(m);
}

const llama_hparams *llama_hp(const llama_model *m) { return &m->hp; }
const gguf_file *llama_file(const llama_model *m) { return m->file; }
int llama_max_tokens(const llama_model *m) { return m->max_tokens; }

int64_t llama_n_params(const llama_model *m)
{
	int64_t n = 0;
	for (int64_t i = 0; i < gguf_n_tensors(m->file); i++)
		n += gguf_tensor_at(m->file, i)->n_elems;
	return n;
}

/* ---- memory plan ---- */

int64_t llama_kv_token_bytes(const llama_hparams *hp, int k_type, int v_type)
{
	return (int64_t)hp->n_layers * (int64_t)(kv_row_bytes((enum kv_type)k_type, hp->n_kv_heads, hp->head_dim) +
						 kv_row_bytes((enum kv_type)v_type, hp->n_kv_heads, hp->head_dim));
}

void llama_plan_memory(const llama_hparams *hp, int64_t weight_bytes, int64_t kv_tokens,
		       int k_type, int v_type, int max_tokens, llama_plan *out)
{
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
	out->weight_bytes = weight_bytes;
	out->kv_token_bytes = llama_kv_token_bytes(hp, k_type, v_type);
	out->kv_bytes = out->kv_token_bytes * kv_tokens;
	int64_t per_row = 2 * (int64_t)hp->dim + 2 * q_dim + 2 * kv_dim + 2 * (int64_t)hp->ffn_dim;
	out->scratch_bytes = (int64_t)sizeof(float) * (per_row * max_tokens + 64 * (int64_t)hp->n_vocab);
	out->total_bytes = out->weight_bytes + out->kv_bytes + out->scratch_bytes;
}

/* ---- forward ---- */

static int check_batch(const llama_model *m, const llama_batch *b, const kv_view *kv, err *e)
{
	if (b->n_tokens <= 0 || b->n_tokens > m->max_tokens) {
		err_set(e, "batch of %d tokens (this model was set up for 1..%d)", b->n_tokens, m->max_tokens);
		return -1;
	}
	if (kv->block_tokens < 1 || kv->block_tokens > KERN_MAX_BLOCK_TOKENS) {
		err_set(e, "KV block size %d is outside 1..%d", kv->block_tokens, KERN_MAX_BLOCK_TOKENS);
		return -1;
	}
	if (kv->n_layers != m->hp.n_layers || kv->kv_dim != m->hp.n_kv_heads * m->hp.head_dim) {
		err_set(e, "KV cache shape (%d layers x %d) does not match the model (%d x %d)",
			kv->n_layers, kv->kv_dim, m->hp.n_layers, m->hp.n_kv_heads * m->hp.head_dim);
		return -1;
	}
	for (int i = 0; i < b->n_tokens; i++) {
		int s = b->seq[i];
		if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) {
			err_set(e, "token id %d out of range (vocab %d)", b->token[i], m->hp.n_vocab);
			return -1;
		}
		if (s < 0 || s >= b->n_seqs || b->pos[i] < 0 || b->slot[i] < 0 || b->slot[i] >= kv->n_slots ||
		    (int64_t)b->pos[i] / kv->block_tokens >= b->n_table[s]) {
			err_set(e, "batch row %d: sequence, position or KV slot out of range", i);
			return -1;
		}
	}
	for (int i = 0; i < b->n_out; i++)
		if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n_tokens) {
			err_set(e, "batch output row %d out of range", b->out_rows[i]);
			return -1;
		}
	return 0;
}

/* Per-head RMSNorm (Qwen3's Q/K norm): rows of head_dim with one weight vector. */
static void head_norm(const llama_model *m, float *x, int64_t n_rows, const gguf_tensor *w)
{
	m->kern->rmsnorm(x, x, w->data, n_rows, m->hp.head_dim, m->hp.eps);
}

static void attention_block(llama_model *m, const layer *L, int l, const llama_batch *b,
			    const kv_view *kv)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	int T = b->n_tokens;
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = kv->kv_dim;

	K->rmsnorm(m->xb, m->x, L->attn_norm->data, T, hp->dim, hp->eps);
	K->matmul(m->q, m->xb, L->wq->data, L->wq->type, T, hp->dim, q_dim);
	K->matmul(m->k, m->xb, L->wk->data, L->wk->type, T, hp->dim, kv_dim);
	K->matmul(m->v, m->xb, L->wv->data, L->wv->type, T, hp->dim, kv_dim);
	if (L->bq) {
		K->add_bias(m->q, L->bq->data, T, q_dim);
		K->add_bias(m->k, L->bk->data, T, kv_dim);
		K->add_bias(m->v, L->bv->data, T, kv_dim);
	}
	if (L->q_norm) {
		head_norm(m, m->q, (int64_t)T * hp->n_heads, L->q_norm);
		head_norm(m, m->k, (int64_t)T * hp->n_kv_heads, L->k_norm);
	}
	K->rope(m->q, b->pos, T, hp->n_heads, hp->head_dim, hp->n_rot, m->inv_freq, hp->rope_neox);
	K->rope(m->k, b->pos, T, hp->n_kv_heads, hp->head_dim, hp->n_rot, m->inv_freq, hp->rope_neox);
	uint8_t *kc = (uint8_t *)kv->k + (size_t)l * (size_t)kv->n_slots * kv->k_row;
	uint8_t *vc = (uint8_t *)kv->v + (size_t)l * (size_t)kv->n_slots * kv->v_row;
	kern_attn a = {
		.k = kc, .v = vc, .k_type = kv->k_type, .v_type = kv->v_type,
		.k_row = kv->k_row, .v_row = kv->v_row,
		.n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
		.block_tokens = kv->block_tokens, .scale = 1.0f / sqrtf((float)hp->head_dim),
		.table = m->tables, .n_ctx = m->n_ctx,
	};
	/* all of the batch's K/V go in first, so later rows see earlier ones */
	K->kv_write(kc, vc, m->k, m->v, b->slot, T, &a);
	K->attention(m->att, m->q, T, &a);
	K->matmul(m->xb, m->att, L->wo->data, L->wo->type, T, q_dim, hp->dim);
	K->add(m->x, m->xb, (int64_t)T * hp->dim);
}

static void ffn_block(llama_model *m, const layer *L, int T)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	K->rmsnorm(m->xb, m->x, L->ffn_norm->data, T, hp->dim, hp->eps);
	K->matmul(m->hb, m->xb, L->w_gate->data, L->w_gate->type, T, hp->dim, hp->ffn_dim);
	K->matmul(m->hb2, m->xb, L->w_up->data, L->w_up->type, T, hp->dim, hp->ffn_dim);
	K->silu_mul(m->hb, m->hb2, (int64_t)T * hp->ffn_dim);
	K->matmul(m->xb, m->hb, L->w_down->data, L->w_down->type, T, hp->ffn_dim, hp->dim);
	K->add(m->x, m->xb, (int64_t)T * hp->dim);
}

int llama_forward(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	if (check_batch(m, b, kv, e))
		return -1;
	int T = b->n_tokens;
	for (int i = 0; i < T; i++) {
		m->tables[i] = b->block_table[b->seq[i]];
		m->n_ctx[i] = b->pos[i] + 1;
	}
	K->embed(m->x, m->tok_embd->data, m->tok_embd->type, b->token, T, hp->dim);
	for (int l = 0; l < hp->n_layers; l++) {
		attention_block(m, &m->layers[l], l, b, kv);
		ffn_block(m, &m->layers[l], T);
	}
	/* final norm and head only for the rows whose logits are wanted */
	for (int i = 0; i < b->n_out; i++)
		memcpy(m->xb + (size_t)i * hp->dim, m->x + (size_t)b->out_rows[i] * hp->dim,
		       (size_t)hp->dim * sizeof(float));
	K->rmsnorm(m->xb, m->xb, m->out_norm->data, b->n_out, hp->dim, hp->eps);
	K->matmul(logits, m->xb, m->output->data, m->output->type, b->n_out, hp->dim, hp->n_vocab);
	return 0;
}
