/* models/llama.c: hyperparameters, tensor checks and the forward pass.
 *
 * Tensor names and shapes follow the GGUF "llama" convention (ne[0] is the
 * input width): token_embd {dim, vocab}, blk.L.attn_q {dim, heads*hd},
 * attn_k/attn_v {dim, kv_heads*hd}, attn_output {heads*hd, dim}, ffn_gate and
 * ffn_up {dim, ffn}, ffn_down {ffn, dim}, norms {dim}; output {dim, vocab} or
 * tied to token_embd. */
#include "models/llama.h"

#include "kernels/kvq.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The per-row arrays the kernels read: the batch's own (host backend) or
 * their device copies. */
typedef struct fwd_rows {
	const int32_t *token, *pos, *n_ctx;
	const int64_t *slot;
	const int32_t *const *tables;
} fwd_rows;

/* A device backend's recording of a step's embedding and layers, and what
 * its arguments came from (a step with the same is replayed). */
typedef struct step_graph {
	kern_graph *g;           /* owned (the backend frees it); NULL: unused */
	int n_tokens;
	fwd_rows r;              /* device addresses of the batch's rows */
	kv_view kv;
	unsigned used;           /* the model's graph_clock when last run */
} step_graph;

/* Steps of up to GRAPH_MAX_TOKENS tokens (decodes, small verifications) are
 * recorded where the backend records; the last GRAPH_SLOTS shapes are kept. */
#define GRAPH_MAX_TOKENS 64
#define GRAPH_SLOTS 8

typedef struct layer {
	const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo;
	const gguf_tensor *bq, *bk, *bv;          /* Q/K/V biases (qwen2 always), or NULL */
	const gguf_tensor *bo;                    /* attn_output bias (llama, optional), or NULL */
	const gguf_tensor *b_gate, *b_up, *b_down; /* MLP biases (llama, optional), or NULL */
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
	/* A device backend's copies (all NULL with a host backend, which reads the
	 * map and the batch directly): */
	uint8_t *wdev;           /* owned, device; every tensor on a 256-byte boundary */
	uint64_t *wdev_off;      /* owned; [n_tensors] each tensor's offset in wdev */
	float *inv_freq_dev;     /* owned, device; [n_rot/2] */
	uint8_t *meta, *meta_host; /* owned, device / host; one batch's rows and tables */
	size_t meta_cap;         /* bytes of each */
	size_t *seq_off;         /* owned, host; [seq_cap] table offsets within meta */
	int seq_cap;
	float *logits_dev;       /* owned, device; [LOGIT_ROWS][n_vocab] */
	/* scratch, owned (backend buffers), allocated once for max_tokens rows */
	float *x, *xb;           /* [max_tokens][dim] */
	float *q, *att;          /* [max_tokens][heads*hd] */
	float *k, *v;            /* [max_tokens][kv_heads*hd] */
	float *hb, *hb2;         /* [max_tokens][ffn] */
	const int32_t **tables;  /* [max_tokens] per-row block table */
	int32_t *n_ctx;          /* [max_tokens] */
	step_graph graphs[GRAPH_SLOTS]; /* device backends that record */
	unsigned graph_clock;
};

/* Rows of logits a device backend computes per download. */
#define LOGIT_ROWS 64

static bool on_device(const llama_model *m)
{
	return m->kern->buf_alloc != NULL;
}

/* Where the kernels find tensor t: its view in the map, or its place in the
 * device copy. */
static const void *wp(const llama_model *m, const gguf_tensor *t)
{
	if (!m->wdev)
		return t->data;
	int64_t i = t - gguf_tensor_at(m->file, 0);
	assert(i >= 0 && i < gguf_n_tensors(m->file) && gguf_tensor_at(m->file, i) == t);
	return m->wdev + m->wdev_off[i];
}

/* -1 with e filled when a device backend has failed (out of memory inside an
 * operation, a faulting kernel: kern_ops.status), else 0. */
static int device_status(const llama_model *m, err *e)
{
	return m->kern->status && m->kern->status(e) ? -1 : 0;
}

/* A scratch buffer of the backend (host: never NULL). */
static void *buf_new(const llama_model *m, size_t bytes)
{
	return on_device(m) ? m->kern->buf_alloc(bytes) : xmalloc_lines(bytes);
}

static void buf_del(const llama_model *m, void *p)
{
	if (on_device(m))
		m->kern->buf_free(p);
	else
		free(p);
}

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
 * frequency factors come as the rope_freqs tensor (bound with the weights).
 * The factor is rope.scaling.factor, or where that is absent the older key
 * rope.scale_linear (llama.cpp reads them in that order). */
static int read_rope_scaling(const gguf_file *f, llama_hparams *hp, err *e)
{
	char key[128];
	gguf_str type = {0};
	float factor = 1.0f;
	hp->rope_freq_scale = 1.0f;
	snprintf(key, sizeof key, "%s.rope.scaling.factor", hp->arch);
	const char *factor_key = gguf_find_key(f, key) >= 0 ? "rope.scaling.factor" : "rope.scale_linear";
	snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
	if (gguf_opt_str(f, key, &type, e) || key_f32(f, hp->arch, factor_key, &factor, e))
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
	T(bo, "attn_output.bias", hp->dim, 0, true);
	if (hp->has_qk_norm) {
		T(q_norm, "attn_q_norm.weight", hp->head_dim, 0, false);
		T(k_norm, "attn_k_norm.weight", hp->head_dim, 0, false);
	}
	T(ffn_norm, "ffn_norm.weight", hp->dim, 0, false);
	T(w_gate, "ffn_gate.weight", hp->dim, hp->ffn_dim, false);
	T(w_up, "ffn_up.weight", hp->dim, hp->ffn_dim, false);
	T(w_down, "ffn_down.weight", hp->ffn_dim, hp->dim, false);
	T(b_gate, "ffn_gate.bias", hp->ffn_dim, 0, true);
	T(b_up, "ffn_up.bias", hp->ffn_dim, 0, true);
	T(b_down, "ffn_down.bias", hp->dim, 0, true);
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

static void offer_one(llama_model *m, const gguf_tensor *t, bool add)
{
	if (!t)
		return;
	if (add)
		m->kern->weights_add(t->data, t->type, t->ne[0], t->ne[1]);
	else
		m->kern->weights_remove(t->data);
}

/* Host backends may keep the matrices laid out for their kernels
 * (kern_ops.weights_add: the CPU packs rows for its instruction set); the
 * results are the same either way. add false gives them back. */
static void offer_weights(llama_model *m, bool add)
{
	if (!m->kern->weights_add || on_device(m) || !m->layers)
		return;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const layer *L = &m->layers[l];
		const gguf_tensor *ts[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
		for (size_t i = 0; i < ARRAY_LEN(ts); i++)
			offer_one(m, ts[i], add);
	}
	offer_one(m, m->output, add);
}

/* Device backends: the weights go up once, every tensor on a 256-byte
 * boundary of its own (wp): the kernels read rows with 16-byte loads, and a
 * file's general.alignment may be smaller than that. The padding after each
 * tensor also leaves room for loads that round up to a word. */
static int upload_weights(llama_model *m, err *e)
{
	int64_t n = gguf_n_tensors(m->file);
	if (!on_device(m) || n == 0)
		return 0;
	uint64_t bytes = 0;
	m->wdev_off = xmalloc((size_t)n * sizeof *m->wdev_off);
	for (int64_t i = 0; i < n; i++) {
		m->wdev_off[i] = bytes;
		bytes += ((uint64_t)gguf_tensor_at(m->file, i)->n_bytes + 255) & ~(uint64_t)255;
	}
	m->wdev = m->kern->buf_alloc(bytes);
	if (!m->wdev && device_status(m, e)) {
		err_prefix(e, "%s: uploading the weights", gguf_name(m->file));
		return -1;
	}
	if (!m->wdev) {
		int64_t fr = 0, tot = 0;
		m->kern->mem_info(&fr, &tot);
		err_set(e, "%s: %.2f GiB of weights do not fit in %s memory (%.2f of %.2f GiB free); "
			"use --device cpu", gguf_name(m->file), (double)bytes / (1 << 30), m->kern->name,
			(double)fr / (1 << 30), (double)tot / (1 << 30));
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		const gguf_tensor *t = gguf_tensor_at(m->file, i);
		m->kern->upload(m->wdev + m->wdev_off[i], t->data, (size_t)t->n_bytes);
	}
	if (device_status(m, e)) {
		err_prefix(e, "%s: uploading the weights", gguf_name(m->file));
		return -1;
	}
	return 0;
}

static int alloc_scratch(llama_model *m, err *e)
{
	const llama_hparams *hp = &m->hp;
	size_t T = (size_t)m->max_tokens;
	size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
	size_t n_rope = (size_t)hp->n_rot / 2 * sizeof(float);
	bool ok = (m->x = buf_new(m, T * hp->dim * sizeof(float))) &&
		  (m->xb = buf_new(m, T * hp->dim * sizeof(float))) &&
		  (m->q = buf_new(m, T * q_dim * sizeof(float))) &&
		  (m->att = buf_new(m, T * q_dim * sizeof(float))) &&
		  (m->k = buf_new(m, T * kv_dim * sizeof(float))) &&
		  (m->v = buf_new(m, T * kv_dim * sizeof(float))) &&
		  (m->hb = buf_new(m, T * hp->ffn_dim * sizeof(float))) &&
		  (m->hb2 = buf_new(m, T * hp->ffn_dim * sizeof(float)));
	if (ok && on_device(m))
		ok = (m->inv_freq_dev = m->kern->buf_alloc(n_rope)) &&
		     (m->logits_dev = m->kern->buf_alloc((size_t)MIN(LOGIT_ROWS, m->max_tokens) *
							 (size_t)hp->n_vocab * sizeof(float)));
	if (!ok && device_status(m, e)) {
		err_prefix(e, "%s", gguf_name(m->file));
		return -1;
	}
	if (!ok) {
		err_set(e, "%s: activation buffers for batches of %d tokens do not fit in %s memory; "
			"lower the batch (chunk) size", gguf_name(m->file), m->max_tokens, m->kern->name);
		return -1;
	}
	/* the backend's own scratch for these shapes, now, inside the memory plan */
	kern_sizes ks = {.max_rows = (int64_t)T, .max_k = (int64_t)MAX(MAX((size_t)hp->dim, q_dim), (size_t)hp->ffn_dim),
			 .n_heads = hp->n_heads, .head_dim = hp->head_dim};
	if (m->kern->reserve && m->kern->reserve(&ks, e)) {
		err_prefix(e, "%s", gguf_name(m->file));
		return -1;
	}
	m->tables = xmalloc(T * sizeof *m->tables);
	m->n_ctx = xmalloc(T * sizeof *m->n_ctx);
	m->inv_freq = xmalloc((size_t)hp->n_rot / 2 * sizeof(float));
	const float *factors = m->rope_freqs ? m->rope_freqs->data : NULL;
	for (int i = 0; i < hp->n_rot / 2; i++) {
		m->inv_freq[i] = powf(hp->rope_base, -2.0f * (float)i / (float)hp->n_rot) * hp->rope_freq_scale;
		if (factors)
			m->inv_freq[i] /= factors[i];
	}
	if (m->inv_freq_dev)
		m->kern->upload(m->inv_freq_dev, m->inv_freq, n_rope);
	return 0;
}

/* What the backend cannot run is refused by name before anything is bound
 * or uploaded. */
static int check_backend(const llama_model *m, err *e)
{
	int max = m->kern->max_head_dim;
	if (max > 0 && m->hp.head_dim > max) {
		err_set(e, "%s: head_dim %d: the %s backend's attention handles up to %d; use --device cpu",
			gguf_name(m->file), m->hp.head_dim, m->kern->name, max);
		return -1;
	}
	return 0;
}

llama_model *llama_from_gguf(gguf_file *f, const llama_params *p, err *e)
{
	llama_model *m = xcalloc(1, sizeof *m);
	m->file = f;
	m->kern = p && p->kern ? p->kern : kern_cpu();
	m->max_tokens = p && p->max_tokens > 0 ? p->max_tokens : 512;
	if (p && p->n_threads > 0 && m->kern->set_threads)
		m->kern->set_threads(p->n_threads);
	if (llama_read_hparams(f, &m->hp, e) || check_backend(m, e) || bind_tensors(m, e) ||
	    upload_weights(m, e) || alloc_scratch(m, e)) {
		llama_free(m);
		return NULL;
	}
	offer_weights(m, true);
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
	for (int i = 0; i < GRAPH_SLOTS; i++)
		if (m->graphs[i].g)
			m->kern->graph_free(m->graphs[i].g);
	float *bufs[] = {m->x, m->xb, m->q, m->att, m->k, m->v, m->hb, m->hb2,
			 m->inv_freq_dev, m->logits_dev, (float *)m->meta, (float *)m->wdev};
	for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
		if (bufs[i])
			buf_del(m, bufs[i]);
	free(m->tables); free(m->n_ctx); free(m->inv_freq); free(m->meta_host); free(m->seq_off);
	free(m->wdev_off);
	offer_weights(m, false);
	free(m->layers);
	gguf_close(m->file);
	free(m);
}

const llama_hparams *llama_hp(const llama_model *m) { return &m->hp; }
const gguf_file *llama_file(const llama_model *m) { return m->file; }
const kern_ops *llama_kern(const llama_model *m) { return m->kern; }
int llama_max_tokens(const llama_model *m) { return m->max_tokens; }

int64_t llama_n_params(const llama_model *m)
{
	int64_t n = 0;
	for (int64_t i = 0; i < gguf_n_tensors(m->file); i++)
		n += gguf_tensor_at(m->file, i)->n_elems;
	return n;
}

/* ---- memory plan ---- */

int64_t llama_kv_token_bytes(const llama_hparams *hp, enum kv_type k_type, enum kv_type v_type)
{
	return (int64_t)hp->n_layers * (int64_t)(kv_row_bytes(k_type, hp->n_kv_heads, hp->head_dim) +
						 kv_row_bytes(v_type, hp->n_kv_heads, hp->head_dim));
}

void llama_plan_memory(const llama_hparams *hp, int64_t weight_bytes, int64_t kv_tokens,
		       enum kv_type k_type, enum kv_type v_type, int max_tokens, llama_plan *out)
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

/* x[n][dim] += b when the model has that bias. Each bias stands alone: a
 * llama file may carry any subset of them. */
static void bias(const llama_model *m, float *x, const gguf_tensor *b, int n, int64_t dim)
{
	if (b)
		m->kern->add_bias(x, wp(m, b), n, dim);
}

/* Per-head RMSNorm (Qwen3's Q/K norm): rows of head_dim with one weight vector. */
static void head_norm(const llama_model *m, float *x, int64_t n_rows, const gguf_tensor *w)
{
	m->kern->rmsnorm(x, x, wp(m, w), n_rows, m->hp.head_dim, m->hp.eps);
}

static void attention_block(llama_model *m, const layer *L, int l, int T, const fwd_rows *r,
			    const kv_view *kv)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = kv->kv_dim;
	const float *inv_freq = m->inv_freq_dev ? m->inv_freq_dev : m->inv_freq;

	K->rmsnorm(m->xb, m->x, wp(m, L->attn_norm), T, hp->dim, hp->eps);
	K->matmul(m->q, m->xb, wp(m, L->wq), L->wq->type, T, hp->dim, q_dim);
	K->matmul(m->k, m->xb, wp(m, L->wk), L->wk->type, T, hp->dim, kv_dim);
	K->matmul(m->v, m->xb, wp(m, L->wv), L->wv->type, T, hp->dim, kv_dim);
	bias(m, m->q, L->bq, T, q_dim);
	bias(m, m->k, L->bk, T, kv_dim);
	bias(m, m->v, L->bv, T, kv_dim);
	if (L->q_norm) {
		head_norm(m, m->q, (int64_t)T * hp->n_heads, L->q_norm);
		head_norm(m, m->k, (int64_t)T * hp->n_kv_heads, L->k_norm);
	}
	K->rope(m->q, r->pos, T, hp->n_heads, hp->head_dim, hp->n_rot, inv_freq, hp->rope_neox);
	K->rope(m->k, r->pos, T, hp->n_kv_heads, hp->head_dim, hp->n_rot, inv_freq, hp->rope_neox);
	uint8_t *kc = (uint8_t *)kv->k + (size_t)l * (size_t)kv->n_slots * kv->k_row;
	uint8_t *vc = (uint8_t *)kv->v + (size_t)l * (size_t)kv->n_slots * kv->v_row;
	kern_attn a = {
		.k = kc, .v = vc, .k_type = kv->k_type, .v_type = kv->v_type,
		.k_row = kv->k_row, .v_row = kv->v_row,
		.n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
		.block_tokens = kv->block_tokens, .scale = 1.0f / sqrtf((float)hp->head_dim),
		.table = r->tables, .n_ctx = r->n_ctx,
	};
	/* all of the batch's K/V go in first, so later rows see earlier ones */
	K->kv_write(kc, vc, m->k, m->v, r->slot, T, &a);
	K->attention(m->att, m->q, T, &a);
	K->matmul(m->xb, m->att, wp(m, L->wo), L->wo->type, T, q_dim, hp->dim);
	bias(m, m->xb, L->bo, T, hp->dim);
	K->add(m->x, m->xb, (int64_t)T * hp->dim);
}

static void ffn_block(llama_model *m, const layer *L, int T)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	K->rmsnorm(m->xb, m->x, wp(m, L->ffn_norm), T, hp->dim, hp->eps);
	K->matmul(m->hb, m->xb, wp(m, L->w_gate), L->w_gate->type, T, hp->dim, hp->ffn_dim);
	K->matmul(m->hb2, m->xb, wp(m, L->w_up), L->w_up->type, T, hp->dim, hp->ffn_dim);
	bias(m, m->hb, L->b_gate, T, hp->ffn_dim);
	bias(m, m->hb2, L->b_up, T, hp->ffn_dim);
	K->silu_mul(m->hb, m->hb2, (int64_t)T * hp->ffn_dim);
	K->matmul(m->xb, m->hb, wp(m, L->w_down), L->w_down->type, T, hp->ffn_dim, hp->dim);
	bias(m, m->xb, L->b_down, T, hp->dim);
	K->add(m->x, m->xb, (int64_t)T * hp->dim);
}

/* Device backends: the batch's per-row arrays and its sequences' block
 * tables, packed on the host and sent in one upload; the row table pointers
 * are device addresses into it. The buffers grow when a batch's tables
 * outgrow them (rare: they keep the largest size seen). */
static int stage_batch(llama_model *m, const llama_batch *b, fwd_rows *r, err *e)
{
	size_t T = (size_t)b->n_tokens, n_tab = 0;
	xgrow(&m->seq_off, &m->seq_cap, b->n_seqs, sizeof *m->seq_off);
	for (int s = 0; s < b->n_seqs; s++) {
		m->seq_off[s] = n_tab;
		n_tab += (size_t)b->n_table[s];
	}
	size_t o_ptr = T * sizeof(int64_t), o_tok = o_ptr + T * sizeof(void *);
	size_t o_pos = o_tok + T * 4, o_ctx = o_pos + T * 4, o_tab = o_ctx + T * 4, size = o_tab + n_tab * 4;
	if (size > m->meta_cap) {
		size_t cap = MAX(size, 2 * m->meta_cap);
		if (m->meta)
			m->kern->buf_free(m->meta);
		m->meta_cap = 0;
		if (!(m->meta = m->kern->buf_alloc(cap))) {
			err_set(e, "%s memory: no room for a batch's %zu bytes of block tables", m->kern->name, cap);
			return -1;
		}
		m->meta_host = xrealloc(m->meta_host, cap);
		m->meta_cap = cap;
	}
	uint8_t *h = m->meta_host, *d = m->meta;
	const int32_t **ptr = (const int32_t **)(void *)(h + o_ptr);
	int32_t *ctx = (int32_t *)(void *)(h + o_ctx), *tab = (int32_t *)(void *)(h + o_tab);
	memcpy(h, b->slot, T * sizeof(int64_t));
	memcpy(h + o_tok, b->token, T * 4);
	memcpy(h + o_pos, b->pos, T * 4);
	for (size_t i = 0; i < T; i++) {
		ptr[i] = (const int32_t *)(void *)(d + o_tab) + m->seq_off[b->seq[i]];
		ctx[i] = b->pos[i] + 1;
	}
	for (int s = 0; s < b->n_seqs; s++)
		memcpy(tab + m->seq_off[s], b->block_table[s], (size_t)b->n_table[s] * 4);
	m->kern->upload(d, h, size);
	*r = (fwd_rows){
		.token = (const int32_t *)(void *)(d + o_tok), .pos = (const int32_t *)(void *)(d + o_pos),
		.n_ctx = (const int32_t *)(void *)(d + o_ctx), .slot = (const int64_t *)(void *)d,
		.tables = (const int32_t *const *)(void *)(d + o_ptr),
	};
	return 0;
}

/* Device backends: final norm and head over LOGIT_ROWS wanted rows at a
 * time, each batch of logits downloaded into place. */
static void device_logits(llama_model *m, const llama_batch *b, float *logits)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	size_t row = (size_t)hp->dim * sizeof(float);
	int step = MIN(LOGIT_ROWS, m->max_tokens);
	for (int i0 = 0; i0 < b->n_out; i0 += step) {
		int n = MIN(step, b->n_out - i0);
		for (int i = 0; i < n; i++)
			K->copy((uint8_t *)m->xb + i * row, (uint8_t *)m->x + (size_t)b->out_rows[i0 + i] * row, row);
		K->rmsnorm(m->xb, m->xb, wp(m, m->out_norm), n, hp->dim, hp->eps);
		K->matmul(m->logits_dev, m->xb, wp(m, m->output), m->output->type, n, hp->dim, hp->n_vocab);
		K->download(logits + (size_t)i0 * hp->n_vocab, m->logits_dev,
			    (size_t)n * hp->n_vocab * sizeof(float));
	}
}

static void run_layers(llama_model *m, int T, const fwd_rows *r, const kv_view *kv)
{
	const llama_hparams *hp = &m->hp;
	m->kern->embed(m->x, wp(m, m->tok_embd), m->tok_embd->type, r->token, T, hp->dim);
	for (int l = 0; l < hp->n_layers; l++) {
		attention_block(m, &m->layers[l], l, T, r, kv);
		ffn_block(m, &m->layers[l], T);
	}
}

static bool same_step(const step_graph *g, int T, const fwd_rows *r, const kv_view *kv)
{
	const kv_view *a = &g->kv;
	return g->g && g->n_tokens == T && !memcmp(&g->r, r, sizeof *r) && a->k == kv->k && a->v == kv->v &&
	       a->n_slots == kv->n_slots && a->block_tokens == kv->block_tokens && a->n_layers == kv->n_layers &&
	       a->kv_dim == kv->kv_dim && a->k_type == kv->k_type && a->v_type == kv->v_type &&
	       a->k_row == kv->k_row && a->v_row == kv->v_row;
}

/* Device backends that record (kern_ops.record_begin): a decode-sized step's
 * embedding and layers as one recording, made on the first step of its shape
 * and replayed on the next ones: the batch's rows come from the same device
 * addresses (stage_batch) and the cache is the same, only their contents
 * change. False when the caller must issue the operations itself. */
static bool layers_replayed(llama_model *m, int T, const fwd_rows *r, const kv_view *kv)
{
	const kern_ops *K = m->kern;
	if (!K->record_begin || T > GRAPH_MAX_TOKENS)
		return false;
	step_graph *slot = &m->graphs[0];
	for (int i = 0; i < GRAPH_SLOTS; i++) {
		if (same_step(&m->graphs[i], T, r, kv)) {
			slot = &m->graphs[i];
			break;
		}
		if (m->graphs[i].used < slot->used)
			slot = &m->graphs[i]; /* the least recently run, for a new shape */
	}
	slot->used = ++m->graph_clock;
	if (same_step(slot, T, r, kv) && K->replay(slot->g) == 0)
		return true;
	K->graph_free(slot->g);
	slot->g = NULL;
	if (!K->record_begin())
		return false;
	run_layers(m, T, r, kv);
	slot->g = K->record_end();
	if (!slot->g || K->replay(slot->g)) {
		K->graph_free(slot->g);
		slot->g = NULL;
		return false;
	}
	slot->n_tokens = T;
	slot->r = *r;
	slot->kv = *kv;
	return true;
}

int llama_forward(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	if (check_batch(m, b, kv, e) || device_status(m, e))
		return -1;
	int T = b->n_tokens;
	fwd_rows r = {.token = b->token, .pos = b->pos, .n_ctx = m->n_ctx, .slot = b->slot, .tables = m->tables};
	if (on_device(m)) {
		if (stage_batch(m, b, &r, e))
			return -1;
	} else {
		for (int i = 0; i < T; i++) {
			m->tables[i] = b->block_table[b->seq[i]];
			m->n_ctx[i] = b->pos[i] + 1;
		}
	}
	if (!layers_replayed(m, T, &r, kv))
		run_layers(m, T, &r, kv);
	if (on_device(m)) {
		device_logits(m, b, logits);
		return device_status(m, e);
	}
	/* final norm and head only for the rows whose logits are wanted */
	for (int i = 0; i < b->n_out; i++)
		memcpy(m->xb + (size_t)i * hp->dim, m->x + (size_t)b->out_rows[i] * hp->dim,
		       (size_t)hp->dim * sizeof(float));
	K->rmsnorm(m->xb, m->xb, wp(m, m->out_norm), b->n_out, hp->dim, hp->eps);
	K->matmul(logits, m->xb, wp(m, m->output), m->output->type, b->n_out, hp->dim, hp->n_vocab);
	return 0;
}
