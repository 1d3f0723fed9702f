/* models/llama.c: hyperparameters, tensor checks, where each part runs, the
 * weights (a device's uploaded), scratch and the memory plan; the forward pass
 * is in models/llama_fwd.c.
 *
 * Tensor names and shapes follow the GGUF "llama" convention (ne[0] is the
 * input width): token_embd {dim, vocab}, blk.L.attn_q {dim, heads*hd},
 * attn_k/attn_v {dim, kv_heads*hd}, attn_output {heads*hd, dim}, ffn_gate and
 * ffn_up {dim, ffn}, ffn_down {ffn, dim}, norms {dim}; output {dim, vocab} or
 * tied to token_embd. */
#include "models/llama_int.h"

#include "kernels/kvq.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const void *llama_wp(const llama_model *m, const side *s, const gguf_tensor *t)
{
	if (!s->dev)
		return t->data;
	int64_t i = t - gguf_tensor_at(m->file, 0);
	assert(i >= 0 && i < gguf_n_tensors(m->file) && gguf_tensor_at(m->file, i) == t);
	assert(m->wdev_off[i] != WDEV_NONE && "tensor not on the device");
	return m->wdev + m->wdev_off[i];
}

int llama_device_status(const llama_model *m, err *e)
{
	return m->kern->status && m->kern->status(e) ? -1 : 0;
}

/* A scratch buffer of side s (host: never NULL). */
static void *buf_new(const side *s, size_t bytes)
{
	return s->dev ? s->k->buf_alloc(bytes) : xmalloc_lines(bytes);
}

static void buf_del(const side *s, void *p)
{
	if (s->dev)
		s->k->buf_free(p);
	else
		free(p);
}

/* ---- hyperparameters ---- */

static const struct {
	const char *arch;
	bool neox, qkv_bias, qk_norm, gemma;
} known_archs[] = {
	{"llama", false, false, false, false},
	{"mistral", false, false, false, false},
	{"qwen2", true, true, false, false},
	{"qwen3", true, false, true, false},
	{"gemma3", true, false, true, true},
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
	/* every layer has tensors of its own: a count past them is a lie, and
	 * would size per-layer tables before any tensor is looked up */
	if (hp->n_layers > gguf_n_tensors(f)) {
		err_set(e, "%s: metadata '%s.block_count' claims %d layers but the file holds %lld tensors; "
			"the file is damaged", gguf_name(f), hp->arch, hp->n_layers, (long long)gguf_n_tensors(f));
		return -1;
	}
	return 0;
}

/* A positive, finite value of key {arch}.suffix, when present. */
static int key_pos_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, err *e)
{
	if (key_f32(f, arch, suffix, out, e))
		return -1;
	if (!(*out > 0) || !isfinite(*out)) {
		err_set(e, "%s: metadata '%s.%s' = %g must be a positive number", gguf_name(f), arch, suffix,
			(double)*out);
		return -1;
	}
	return 0;
}

/* Which layers are windowed: {arch}.attention.sliding_window_pattern is a
 * period n (layer l is windowed unless l % n == n - 1, so every n-th layer
 * attends to everything; n = 0: all are windowed) or one bool per layer;
 * absent, Gemma 3's period of 6. */
static int read_swa_pattern(const gguf_file *f, llama_hparams *hp, const char *key, err *e)
{
	int64_t k = gguf_find_key(f, key);
	uint32_t period = 6;
	gguf_arr a = {0};
	bool arr = k >= 0 && gguf_kv_type(f, k) == GGUF_ARR;
	if (arr ? gguf_get_arr(f, key, &a, e) : gguf_opt_u32(f, key, &period, e))
		return -1;
	if (arr && (a.type != GGUF_BOOL || a.n != (uint64_t)hp->n_layers)) {
		err_set(e, "%s: metadata '%s' has %llu items of type %s; it needs one bool per layer "
			"(%s.block_count = %d)", gguf_name(f), key, (unsigned long long)a.n, gguf_vtype_name(a.type),
			hp->arch, hp->n_layers);
		return -1;
	}
	for (int l = 0; l < hp->n_layers; l++) {
		bool w = arr ? gguf_arr_int(&a, (uint64_t)l) != 0 : period == 0 || (uint32_t)l % period < period - 1;
		hp->swa_layer[l / 8] |= (uint8_t)(w << (l % 8));
		hp->n_swa_layers += w;
	}
	return 0;
}

/* Gemma 3's keys (llama.cpp's converter names them): the window and its
 * layers, the windowed layers' rope base (10000 when absent), the attention
 * scale (absent: 1/sqrt(head_dim), except the 27B shape, whose queries are
 * scaled by 1/sqrt(dim / heads)) and the logit soft-cap. Keys that
 * contradict each other are refused by name. */
static int read_gemma3(const gguf_file *f, llama_hparams *hp, err *e)
{
	const char *a = hp->arch;
	char wkey[128], pkey[128];
	snprintf(wkey, sizeof wkey, "%s.attention.sliding_window", a);
	snprintf(pkey, sizeof pkey, "%s.attention.sliding_window_pattern", a);
	hp->post_norms = hp->ffn_gelu = true;
	hp->embd_scale = sqrtf((float)hp->dim);
	hp->rope_base_swa = 10000.0f;
	if (hp->n_layers == 62 && hp->dim % hp->n_heads == 0)
		hp->attn_scale = 1.0f / sqrtf((float)(hp->dim / hp->n_heads));
	if (key_u32(f, a, "attention.sliding_window", true, &hp->swa_window, e) ||
	    key_pos_f32(f, a, "rope.freq_base_swa", &hp->rope_base_swa, e) ||
	    key_pos_f32(f, a, "attention.scale", &hp->attn_scale, e))
		return -1;
	hp->logit_softcap = 0;
	char ckey[128];
	snprintf(ckey, sizeof ckey, "%s.final_logit_softcapping", a);
	if (gguf_find_key(f, ckey) >= 0 && key_pos_f32(f, a, "final_logit_softcapping", &hp->logit_softcap, e))
		return -1;
	if (hp->swa_window == 0) {
		if (gguf_find_key(f, pkey) < 0)
			return 0;
		err_set(e, "%s: metadata '%s' is set but '%s' is 0 or missing: which layers are windowed, and by how "
			"much, contradict each other", gguf_name(f), pkey, wkey);
		return -1;
	}
	if (hp->n_layers > LLAMA_MAX_SWA_LAYERS) {
		err_set(e, "%s: %d layers with windowed attention ('%s'): at most %d are supported", gguf_name(f),
			hp->n_layers, wkey, LLAMA_MAX_SWA_LAYERS);
		return -1;
	}
	return read_swa_pattern(f, hp, pkey, e);
}

/* One head size for K and V (value_length, when present, is key_length). */
static int check_value_length(const gguf_file *f, const llama_hparams *hp, err *e)
{
	int v = hp->head_dim;
	if (key_u32(f, hp->arch, "attention.value_length", true, &v, e))
		return -1;
	if (v != hp->head_dim) {
		err_set(e, "%s: metadata '%s.attention.value_length' = %d differs from '%s.attention.key_length' = %d "
			"(heads of two sizes are not supported)", gguf_name(f), hp->arch, v, hp->arch, hp->head_dim);
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
		err_set(e, "%s: architecture '%.*s' is not supported (llama, mistral, qwen2, qwen3, gemma3 are)",
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
	if (key_u32(f, a, "vocab_size", true, &hp->n_vocab, e) || check_dims(f, hp, e) || check_value_length(f, hp, e))
		return -1;
	hp->embd_scale = 1.0f;
	hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
	return known_archs[i].gemma ? read_gemma3(f, hp, e) : 0;
}

/* ---- tensors ---- */

int llama_tensor_layer(const char *name)
{
	if (strncmp(name, "blk.", 4))
		return -1;
	int l = 0;
	const char *p = name + 4;
	for (; *p >= '0' && *p <= '9' && l < (1 << 20); p++)
		l = l * 10 + (*p - '0');
	return p > name + 4 && *p == '.' ? l : -1;
}

/* Whether the device reads the tensor called name (its copy goes up), and
 * whether the CPU does (it reads the map). Without partial offload one
 * backend reads everything; with it, each layer's tensors go with their
 * layer, the head with head_dev, the embedding stays on the CPU (and goes up
 * too when it is the tied head's), and the rest (rope_freqs) is read on the
 * host when the model is built. */
static bool dev_reads(const llama_model *m, const char *name)
{
	if (!llama_on_device(m) || !llama_is_split(m))
		return llama_on_device(m);
	int l = llama_tensor_layer(name);
	if (l >= 0)
		return l >= m->host_layers;
	if (!strcmp(name, "output.weight") || !strcmp(name, "output_norm.weight"))
		return m->head_dev;
	return !strcmp(name, "token_embd.weight") && m->head_dev && m->output == m->tok_embd;
}

static bool host_reads(const llama_model *m, const char *name)
{
	if (!llama_on_device(m) || !llama_is_split(m))
		return !llama_on_device(m);
	int l = llama_tensor_layer(name);
	if (l >= 0)
		return l < m->host_layers;
	if (!strcmp(name, "output.weight") || !strcmp(name, "output_norm.weight"))
		return !m->head_dev;
	return true;
}

/* Whether the backends that read tensor t can use its type. */
static bool type_ok(const llama_model *m, const gguf_tensor *t)
{
	return (!dev_reads(m, t->name) || m->dev.k->supports(t->type)) &&
	       (!host_reads(m, t->name) || m->host.k->supports(t->type));
}

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
	if (is_vec ? t->type != DT_F32 : !type_ok(m, t)) {
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
	if (hp->post_norms) {
		T(post_attn_norm, "post_attention_norm.weight", hp->dim, 0, false);
		T(post_ffn_norm, "post_ffw_norm.weight", hp->dim, 0, false);
	}
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
	if (!type_ok(m, m->output)) {
		err_set(e, "%s: tensor 'token_embd.weight' (the tied output) has type %s, which the %s backend "
			"cannot use", gguf_name(m->file), dtype_name(m->output->type), m->kern->name);
		return -1;
	}
	m->layers = xcalloc((size_t)hp->n_layers, sizeof *m->layers);
	for (int l = 0; l < hp->n_layers; l++)
		if (bind_layer(m, l, e))
			return -1;
	return 0;
}

static void offer_one(llama_model *m, const gguf_tensor *t, bool add)
{
	const kern_ops *k = m->host.k;
	if (!t || !host_reads(m, t->name))
		return;
	if (add) {
		int64_t packed = k->weights_add(t->data, t->type, t->ne[0], t->ne[1]);
		if (packed > 0) {
			m->packed_bytes += packed;
			xgrow(&m->packed, &m->packed_cap, m->n_packed + 1, sizeof *m->packed);
			m->packed[m->n_packed++] = t;
			gguf_release(m->file, t->data, (size_t)t->n_bytes); /* the peak stays near one copy */
		}
	} else
		k->weights_remove(t->data);
}

/* The CPU may keep the matrices it reads laid out for its kernels
 * (kern_ops.weights_add: it packs rows for its instruction set); the
 * results are the same either way. add false gives them back.
 *
 * A packed matrix's stored rows are not read again, so its pages of the
 * file go and the weights stay resident once, not twice (a later read
 * pages them back in). That comes after all the packing: a fault maps the
 * page cache's whole folio, so reading one matrix maps its neighbours too
 * (each is let go once packed as well, so the peak stays near one copy). */
static void offer_weights(llama_model *m, bool add)
{
	if (!m->host.k || !m->host.k->weights_add || !m->layers)
		return;
	for (int l = 0; l < m->hp.n_layers; l++) {
		const layer *L = &m->layers[l];
		const gguf_tensor *ts[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
		for (size_t i = 0; i < ARRAY_LEN(ts); i++)
			offer_one(m, ts[i], add);
	}
	offer_one(m, m->output, add);
	for (int i = 0; add && i < m->n_packed; i++)
		gguf_release(m->file, m->packed[i]->data, (size_t)m->packed[i]->n_bytes);
	if (!add) {
		free(m->packed);
		m->packed = NULL;
		m->n_packed = m->packed_cap = 0;
		m->packed_bytes = 0;
	}
}

/* Device backends: the device's tensors go up once, each on a 256-byte
 * boundary of its own (llama_wp): the kernels read rows with 16-byte loads,
 * and a file's general.alignment may be smaller than that. The padding after
 * each tensor also leaves room for loads that round up to a word. */
static int upload_weights(llama_model *m, err *e)
{
	int64_t n = gguf_n_tensors(m->file);
	if (!llama_on_device(m) || n == 0)
		return 0;
	uint64_t bytes = 0;
	m->wdev_off = xmalloc((size_t)n * sizeof *m->wdev_off);
	for (int64_t i = 0; i < n; i++) {
		const gguf_tensor *t = gguf_tensor_at(m->file, i);
		m->wdev_off[i] = dev_reads(m, t->name) ? bytes : WDEV_NONE;
		if (m->wdev_off[i] != WDEV_NONE)
			bytes += ((uint64_t)t->n_bytes + 255) & ~(uint64_t)255;
	}
	m->wdev_bytes = (int64_t)bytes;
	m->wdev = m->kern->buf_alloc(MAX(bytes, 256));
	if (!m->wdev && llama_device_status(m, e)) {
		err_prefix(e, "%s: uploading the weights", gguf_name(m->file));
		return -1;
	}
	if (!m->wdev) {
		int64_t fr = 0, tot = 0;
		m->kern->mem_info(&fr, &tot);
		err_set(e, "%s: %.2f GiB of weights do not fit in %s memory (%.2f of %.2f GiB free); "
			"put fewer layers there (-ngl) or use --device cpu", gguf_name(m->file), (double)bytes / (1 << 30),
			m->kern->name, (double)fr / (1 << 30), (double)tot / (1 << 30));
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		const gguf_tensor *t = gguf_tensor_at(m->file, i);
		if (m->wdev_off[i] != WDEV_NONE)
			m->kern->upload(m->wdev + m->wdev_off[i], t->data, (size_t)t->n_bytes);
	}
	if (llama_device_status(m, e)) {
		err_prefix(e, "%s: uploading the weights", gguf_name(m->file));
		return -1;
	}
	return 0;
}

/* Side s's activation buffers for max_tokens rows; false when one does not
 * fit. */
static bool side_alloc(const llama_model *m, side *s)
{
	const llama_hparams *hp = &m->hp;
	size_t T = (size_t)m->max_tokens, f = sizeof(float);
	size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
	return (s->x = buf_new(s, T * hp->dim * f)) && (s->xb = buf_new(s, T * hp->dim * f)) &&
	       (s->q = buf_new(s, T * q_dim * f)) && (s->att = buf_new(s, T * q_dim * f)) &&
	       (s->kb = buf_new(s, T * kv_dim * f)) && (s->vb = buf_new(s, T * kv_dim * f)) &&
	       (s->hb = buf_new(s, T * hp->ffn_dim * f)) && (s->hb2 = buf_new(s, T * hp->ffn_dim * f));
}

static void side_free(side *s)
{
	float *bufs[] = {s->x, s->xb, s->q, s->att, s->kb, s->vb, s->hb, s->hb2};
	for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
		if (bufs[i])
			buf_del(s, bufs[i]);
}

/* RoPE's pair frequencies, on the host and (for a device) in its memory:
 * n_rope bytes for the full-attention layers, then as many for the windowed
 * ones (their own base, no scaling). */
static void rope_freqs(llama_model *m, size_t n_rope)
{
	const llama_hparams *hp = &m->hp;
	int half = hp->n_rot / 2;
	m->inv_freq = xmalloc(2 * n_rope);
	const float *factors = m->rope_freqs ? m->rope_freqs->data : NULL;
	for (int i = 0; i < half; i++) {
		m->inv_freq[i] = powf(hp->rope_base, -2.0f * (float)i / (float)hp->n_rot) * hp->rope_freq_scale;
		if (factors)
			m->inv_freq[i] /= factors[i];
		m->inv_freq[half + i] = hp->swa_window ? powf(hp->rope_base_swa, -2.0f * (float)i / (float)hp->n_rot)
						       : m->inv_freq[i];
	}
	m->host.inv_freq = m->inv_freq;
	m->host.inv_freq_swa = m->inv_freq + half;
	if (m->inv_freq_dev)
		m->kern->upload(m->inv_freq_dev, m->inv_freq, 2 * n_rope);
	m->dev.inv_freq = m->inv_freq_dev;
	m->dev.inv_freq_swa = m->inv_freq_dev ? m->inv_freq_dev + half : NULL;
}

static int alloc_scratch(llama_model *m, err *e)
{
	const llama_hparams *hp = &m->hp;
	size_t T = (size_t)m->max_tokens, q_dim = (size_t)hp->n_heads * hp->head_dim;
	size_t n_rope = (size_t)hp->n_rot / 2 * sizeof(float);
	bool dev = llama_on_device(m), host = !dev || llama_is_split(m);
	bool ok = (!host || side_alloc(m, &m->host)) && (!dev || side_alloc(m, &m->dev));
	if (ok && dev)
		ok = (m->inv_freq_dev = m->kern->buf_alloc(2 * n_rope)) &&
		     (!m->head_dev || (m->logits_dev = m->kern->buf_alloc((size_t)MIN(LOGIT_ROWS, m->max_tokens) *
									  (size_t)hp->n_vocab * sizeof(float))));
	if (!ok && llama_device_status(m, e)) {
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
	m->tables_w = xmalloc(T * sizeof *m->tables_w);
	m->n_ctx = xmalloc(T * sizeof *m->n_ctx);
	rope_freqs(m, n_rope);
	return 0;
}

/* Where the work runs (llama_int.h): p's backend, or with p->host_layers
 * the CPU for those layers; a device given every layer's place on the CPU
 * is not used at all. */
static int place_sides(llama_model *m, const llama_params *p, err *e)
{
	int hl = p ? p->host_layers : 0;
	if (hl < 0) {
		err_set(e, "%s: host_layers %d is negative", gguf_name(m->file), hl);
		return -1;
	}
	if (llama_on_device(m) && hl >= m->hp.n_layers)
		m->kern = kern_cpu();
	m->host_layers = llama_on_device(m) ? hl : 0;
	m->head_dev = llama_on_device(m) && !(m->host_layers && p->head_on_host);
	m->host = (side){.k = llama_on_device(m) ? kern_cpu() : m->kern};
	if (llama_on_device(m))
		m->dev = (side){.k = m->kern, .dev = true};
	int n = p ? p->n_threads : 0;
	if (n > 0 && m->host.k->set_threads)
		m->host.k->set_threads(n);
	if (n > 0 && m->dev.k && m->dev.k->set_threads)
		m->dev.k->set_threads(n);
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
	if (llama_read_hparams(f, &m->hp, e) || place_sides(m, p, e) || check_backend(m, e) ||
	    bind_tensors(m, e) || upload_weights(m, e) || alloc_scratch(m, e)) {
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
	side_free(&m->host);
	side_free(&m->dev);
	void *bufs[] = {m->inv_freq_dev, m->logits_dev, m->meta, m->wdev};
	for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
		if (bufs[i])
			m->kern->buf_free(bufs[i]);
	free(m->tables); free(m->tables_w); free(m->n_ctx); free(m->inv_freq); free(m->meta_host); free(m->seq_off);
	free(m->wdev_off);
	offer_weights(m, false);
	free(m->layers);
	gguf_close(m->file);
	free(m);
}

const llama_hparams *llama_hp(const llama_model *m) { return &m->hp; }
const gguf_file *llama_file(const llama_model *m) { return m->file; }
const kern_ops *llama_kern(const llama_model *m) { return m->kern; }
int llama_host_layers(const llama_model *m) { return m->host_layers; }
bool llama_head_on_device(const llama_model *m) { return m->head_dev; }
int64_t llama_device_weight_bytes(const llama_model *m) { return m->wdev_bytes; }
int64_t llama_packed_bytes(const llama_model *m) { return m->packed_bytes; }
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

/* ---- context shifts ---- */

bool llama_can_shift(const llama_model *m)
{
	return m->kern->kv_shift != NULL;
}

/* Host arrays for the shift where the backend runs: themselves on the host,
 * else one device buffer holding the three (*buf, freed by the caller). */
static int shift_arrays(llama_model *m, const int64_t **src, const int64_t **dst, const int32_t **delta,
			int64_t n, void **buf, err *e)
{
	*buf = NULL;
	if (!llama_on_device(m))
		return 0;
	size_t b8 = (size_t)n * sizeof(int64_t), b4 = (size_t)n * sizeof(int32_t);
	uint8_t *d = m->kern->buf_alloc(2 * b8 + b4);
	if (!d) {
		llama_device_status(m, e);
		err_prefix(e, "context shift: %lld rows", (long long)n);
		return -1;
	}
	m->kern->upload(d, *src, b8);
	m->kern->upload(d + b8, *dst, b8);
	m->kern->upload(d + 2 * b8, *delta, b4);
	*src = (const int64_t *)d;
	*dst = (const int64_t *)(d + b8);
	*delta = (const int32_t *)(d + 2 * b8);
	*buf = d;
	return 0;
}

int llama_kv_shift(llama_model *m, const kv_view *kv, const int64_t *src, const int64_t *dst,
		   const int32_t *delta, int64_t n, err *e)
{
	const llama_hparams *hp = &m->hp;
	if (!m->kern->kv_shift) {
		err_set(e, "the %s backend cannot shift a context (no kv_shift)", m->kern->name);
		return -1;
	}
	if (kv->n_lo > 0) {
		err_set(e, "a context shift with the layers split between host and device is not supported");
		return -1;
	}
	for (int64_t i = 0; i < n; i++)
		if (src[i] < 0 || src[i] >= kv->n_slots || dst[i] < 0 || dst[i] >= kv->n_slots) {
			err_set(e, "context shift: row %lld: slot out of range", (long long)i);
			return -1;
		}
	void *buf;
	if (n <= 0 || shift_arrays(m, &src, &dst, &delta, n, &buf, e))
		return n <= 0 ? 0 : -1;
	kern_attn fmt = {.k_type = kv->k_type, .v_type = kv->v_type, .k_row = kv->k_row, .v_row = kv->v_row,
			 .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
			 .block_tokens = kv->block_tokens};
	const side *s = llama_on_device(m) ? &m->dev : &m->host;
	for (int l = 0; l < kv->n_layers; l++) {
		void *kc, *vc;
		kv_view_layer(kv, l, &kc, &vc);
		m->kern->kv_shift(kc, vc, src, dst, delta, n, &fmt, hp->n_rot, llama_layer_freqs(m, s, l),
				  hp->rope_neox);
	}
	if (buf)
		m->kern->buf_free(buf);
	return llama_device_status(m, e);
}
