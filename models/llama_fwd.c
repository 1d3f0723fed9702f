/* models/llama_fwd.c: the forward pass over a flat batch (models/llama.h).
 *
 * One step: the batch is checked, its rows and block tables are staged where
 * the kernels read them, the layers run on their sides (llama_int.h), and
 * the final norm and head run for the wanted rows only. With partial offload
 * the batch crosses from the CPU to the device once, as one upload of the
 * activations after the CPU's layers, and back once, as one download of the
 * wanted rows' logits (head on the device) or hidden states (head on the
 * CPU). */
#include "models/llama_int.h"

#include <math.h>
#include <string.h>

static int check_rows(const llama_model *m, const llama_batch *b, const kv_view *kv, err *e)
{
	for (int i = 0; i < b->n_tokens; i++) {
		int s = b->seq[i];
		if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab) {
			err_set(e, "token id %d out of range (vocab %d)", b->token[i], m->hp.n_vocab);
			return -1;
		}
		if (s < 0 || s >= b->n_seqs || b->pos[i] < 0 || b->slot[i] < 0 || b->slot[i] >= kv->n_slots ||
		    (b->slot_w && (b->slot_w[i] < 0 || b->slot_w[i] >= kv->n_slots_w)) ||
		    (int64_t)b->pos[i] / kv->block_tokens >= b->n_table[s]) {
			err_set(e, "batch row %d: sequence, position or KV slot out of range", i);
			return -1;
		}
	}
	if (b->n_out < 0 || b->n_out > m->max_tokens) {
		err_set(e, "batch asks for %d rows of logits (this model was set up for 0..%d)", b->n_out,
			m->max_tokens);
		return -1;
	}
	for (int i = 0; i < b->n_out; i++)
		if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n_tokens) {
			err_set(e, "batch output row %d out of range", b->out_rows[i]);
			return -1;
		}
	return 0;
}

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
	if (kv->n_lo != m->host_layers) {
		err_set(e, "KV cache keeps %d layers in host memory, the model computes %d on the CPU "
			"(make the pool with host_layers = llama_host_layers)", kv->n_lo, m->host_layers);
		return -1;
	}
	return check_rows(m, b, kv, e);
}

/* x[n][dim] += b when the model has that bias. Each bias stands alone: a
 * llama file may carry any subset of them. */
static void bias(const llama_model *m, const side *s, float *x, const gguf_tensor *b, int n, int64_t dim)
{
	if (b)
		s->k->add_bias(x, llama_wp(m, s, b), n, dim);
}

/* Per-head RMSNorm (Qwen3's Q/K norm): rows of head_dim with one weight vector. */
static void head_norm(const llama_model *m, const side *s, float *x, int64_t n_rows, const gguf_tensor *w)
{
	s->k->rmsnorm(x, x, llama_wp(m, s, w), n_rows, m->hp.head_dim, m->hp.eps);
}

/* The matmuls mm[0..n) of one input x[T][k]: in one pass where the backend
 * offers it (the same bits), else one by one. */
static void matmul_group(const kern_ops *K, kern_mm *mm, int n, const float *x, int T, int64_t k)
{
	if (K->matmul_group) {
		K->matmul_group(mm, n, x, T, k);
		return;
	}
	for (int i = 0; i < n; i++)
		K->matmul(mm[i].y, x, mm[i].w, mm[i].wt, T, k, mm[i].n_out);
}

static void attention_block(const llama_model *m, const side *s, const layer *L, int l, int T,
			    const fwd_rows *r, const kv_view *kv)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = s->k;
	int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim, kv_dim = kv->kv_dim;

	K->rmsnorm(s->xb, s->x, llama_wp(m, s, L->attn_norm), T, hp->dim, hp->eps);
	kern_mm qkv[3] = {
		{s->q, llama_wp(m, s, L->wq), L->wq->type, q_dim},
		{s->kb, llama_wp(m, s, L->wk), L->wk->type, kv_dim},
		{s->vb, llama_wp(m, s, L->wv), L->wv->type, kv_dim},
	};
	matmul_group(K, qkv, 3, s->xb, T, hp->dim);
	bias(m, s, s->q, L->bq, T, q_dim);
	bias(m, s, s->kb, L->bk, T, kv_dim);
	bias(m, s, s->vb, L->bv, T, kv_dim);
	if (L->q_norm) {
		head_norm(m, s, s->q, (int64_t)T * hp->n_heads, L->q_norm);
		head_norm(m, s, s->kb, (int64_t)T * hp->n_kv_heads, L->k_norm);
	}
	const float *freqs = llama_layer_freqs(m, s, l);
	int window = llama_layer_window(hp, l);
	bool apart = window > 0 && r->slot_w; /* its own slots and tables (batch.h) */
	K->rope(s->q, r->pos, T, hp->n_heads, hp->head_dim, hp->n_rot, freqs, hp->rope_neox);
	K->rope(s->kb, r->pos, T, hp->n_kv_heads, hp->head_dim, hp->n_rot, freqs, hp->rope_neox);
	void *kc, *vc;
	kv_view_layer(kv, l, &kc, &vc);
	kern_attn a = {
		.k = kc, .v = vc, .k_type = kv->k_type, .v_type = kv->v_type,
		.k_row = kv->k_row, .v_row = kv->v_row,
		.n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
		.block_tokens = kv->block_tokens, .scale = hp->attn_scale,
		.table = apart ? r->tables_w : r->tables, .n_ctx = r->n_ctx, .window = window,
	};
	/* all of the batch's K/V go in first, so later rows see earlier ones */
	K->kv_write(kc, vc, s->kb, s->vb, apart ? r->slot_w : r->slot, T, &a);
	K->attention(s->att, s->q, T, &a);
	K->matmul(s->xb, s->att, llama_wp(m, s, L->wo), L->wo->type, T, q_dim, hp->dim);
	bias(m, s, s->xb, L->bo, T, hp->dim);
	if (L->post_attn_norm)
		K->rmsnorm(s->xb, s->xb, llama_wp(m, s, L->post_attn_norm), T, hp->dim, hp->eps);
	K->add(s->x, s->xb, (int64_t)T * hp->dim);
}

static void ffn_block(const llama_model *m, const side *s, const layer *L, int T)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = s->k;
	K->rmsnorm(s->xb, s->x, llama_wp(m, s, L->ffn_norm), T, hp->dim, hp->eps);
	kern_mm gate_up[2] = {
		{s->hb, llama_wp(m, s, L->w_gate), L->w_gate->type, hp->ffn_dim},
		{s->hb2, llama_wp(m, s, L->w_up), L->w_up->type, hp->ffn_dim},
	};
	matmul_group(K, gate_up, 2, s->xb, T, hp->dim);
	bias(m, s, s->hb, L->b_gate, T, hp->ffn_dim);
	bias(m, s, s->hb2, L->b_up, T, hp->ffn_dim);
	(hp->ffn_gelu ? K->gelu_mul : K->silu_mul)(s->hb, s->hb2, (int64_t)T * hp->ffn_dim);
	K->matmul(s->xb, s->hb, llama_wp(m, s, L->w_down), L->w_down->type, T, hp->ffn_dim, hp->dim);
	bias(m, s, s->xb, L->b_down, T, hp->dim);
	if (L->post_ffn_norm)
		K->rmsnorm(s->xb, s->xb, llama_wp(m, s, L->post_ffn_norm), T, hp->dim, hp->eps);
	K->add(s->x, s->xb, (int64_t)T * hp->dim);
}

/* Layers [l0, l1) on side s, after the token embedding when l0 is 0. */
static void run_layers(const llama_model *m, const side *s, int l0, int l1, int T, const fwd_rows *r,
		       const kv_view *kv)
{
	if (l0 == 0) {
		s->k->embed(s->x, llama_wp(m, s, m->tok_embd), m->tok_embd->type, r->token, T, m->hp.dim);
		if (m->hp.embd_scale != 1.0f)
			s->k->scale(s->x, m->hp.embd_scale, (int64_t)T * m->hp.dim);
	}
	for (int l = l0; l < l1; l++) {
		attention_block(m, s, &m->layers[l], l, T, r, kv);
		ffn_block(m, s, &m->layers[l], T);
	}
}

/* Device backends: the windowed layers' slots, row table pointers and
 * tables packed into the host staging buffer at the given offsets. */
static void stage_windows(llama_model *m, const llama_batch *b, size_t o_w, size_t o_wptr, size_t o_wtab)
{
	size_t T = (size_t)b->n_tokens;
	uint8_t *h = m->meta_host, *d = m->meta;
	const int32_t **ptr = (const int32_t **)(void *)(h + o_wptr);
	int32_t *tab = (int32_t *)(void *)(h + o_wtab);
	memcpy(h + o_w, b->slot_w, T * sizeof(int64_t));
	for (size_t i = 0; i < T; i++)
		ptr[i] = (const int32_t *)(void *)(d + o_wtab) + m->seq_off[b->seq[i]];
	for (int s = 0; s < b->n_seqs; s++)
		memcpy(tab + m->seq_off[s], b->block_table_w[s], (size_t)b->n_table[s] * 4);
}

/* Device backends: the batch's per-row arrays and its sequences' block
 * tables, packed on the host and sent in one upload; the row table pointers
 * are device addresses into it. The buffers grow when a batch's tables
 * outgrow them (rare: they keep the largest size seen). */
static int stage_batch(llama_model *m, const llama_batch *b, fwd_rows *r, err *e)
{
	size_t T = (size_t)b->n_tokens, n_tab = 0, W = b->slot_w != NULL;
	xgrow(&m->seq_off, &m->seq_cap, b->n_seqs, sizeof *m->seq_off);
	for (int s = 0; s < b->n_seqs; s++) {
		m->seq_off[s] = n_tab;
		n_tab += (size_t)b->n_table[s];
	}
	/* slots, row table pointers, tokens, positions, n_ctx; with windows
	 * apart the windowed layers' slots and row table pointers; the tables
	 * (then the windowed layers'). Every per-row array sits at an offset
	 * that depends on T only, so a recorded step replays (layers_replayed). */
	size_t o_ptr = T * sizeof(int64_t), o_tok = o_ptr + T * sizeof(void *);
	size_t o_pos = o_tok + T * 4, o_ctx = o_pos + T * 4, o_w = (o_ctx + T * 4 + 7) / 8 * 8;
	size_t o_wptr = o_w + T * sizeof(int64_t);
	size_t o_tab = W ? o_wptr + T * sizeof(void *) : o_ctx + T * 4, o_wtab = o_tab + n_tab * 4;
	size_t size = W ? o_wtab + n_tab * 4 : o_wtab;
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
	if (W)
		stage_windows(m, b, o_w, o_wptr, o_wtab);
	m->kern->upload(d, h, size);
	*r = (fwd_rows){
		.token = (const int32_t *)(void *)(d + o_tok), .pos = (const int32_t *)(void *)(d + o_pos),
		.n_ctx = (const int32_t *)(void *)(d + o_ctx), .slot = (const int64_t *)(void *)d,
		.tables = (const int32_t *const *)(void *)(d + o_ptr),
		.slot_w = W ? (const int64_t *)(void *)(d + o_w) : NULL,
		.tables_w = W ? (const int32_t *const *)(void *)(d + o_wptr) : NULL,
	};
	return 0;
}

/* Device backends: the wanted rows i0 .. i0+n of the device's x gathered
 * into rows 0..n of its xb. */
static void gather_rows(const llama_model *m, const llama_batch *b, int i0, int n)
{
	size_t row = (size_t)m->hp.dim * sizeof(float);
	for (int i = 0; i < n; i++)
		m->kern->copy((uint8_t *)m->dev.xb + i * row, (uint8_t *)m->dev.x + (size_t)b->out_rows[i0 + i] * row,
			      row);
}

/* Device backends: final norm and head over LOGIT_ROWS wanted rows at a
 * time, each batch of logits downloaded into place. */
static void device_logits(llama_model *m, const llama_batch *b, float *logits)
{
	const llama_hparams *hp = &m->hp;
	const kern_ops *K = m->kern;
	const side *s = &m->dev;
	int step = MIN(LOGIT_ROWS, m->max_tokens);
	for (int i0 = 0; i0 < b->n_out; i0 += step) {
		int n = MIN(step, b->n_out - i0);
		gather_rows(m, b, i0, n);
		K->rmsnorm(s->xb, s->xb, llama_wp(m, s, m->out_norm), n, hp->dim, hp->eps);
		K->matmul(m->logits_dev, s->xb, llama_wp(m, s, m->output), m->output->type, n, hp->dim, hp->n_vocab);
		K->download(logits + (size_t)i0 * hp->n_vocab, m->logits_dev, (size_t)n * hp->n_vocab * sizeof(float));
	}
}

/* The CPU's final norm and head over the n rows already in its xb. */
static void host_head(const llama_model *m, int n, float *logits)
{
	const side *s = &m->host;
	s->k->rmsnorm(s->xb, s->xb, llama_wp(m, s, m->out_norm), n, m->hp.dim, m->hp.eps);
	s->k->matmul(logits, s->xb, llama_wp(m, s, m->output), m->output->type, n, m->hp.dim, m->hp.n_vocab);
}

static bool same_step(const step_graph *g, int T, const fwd_rows *r, const kv_view *kv)
{
	const kv_view *a = &g->kv;
	return g->g && g->n_tokens == T && !memcmp(&g->r, r, sizeof *r) && a->k == kv->k && a->v == kv->v &&
	       a->n_slots == kv->n_slots && a->block_tokens == kv->block_tokens && a->n_layers == kv->n_layers &&
	       a->kv_dim == kv->kv_dim && a->k_type == kv->k_type && a->v_type == kv->v_type &&
	       a->k_row == kv->k_row && a->v_row == kv->v_row && a->n_lo == kv->n_lo && a->k_hi == kv->k_hi &&
	       a->v_hi == kv->v_hi && a->row0 == kv->row0 && a->n_slots_w == kv->n_slots_w;
}

/* Device backends that record (kern_ops.record_begin): a decode-sized step's
 * device layers (from l0; the embedding too when l0 is 0) as one recording,
 * made on the first step of its shape and replayed on the next ones: the
 * batch's rows come from the same device addresses (stage_batch), the
 * activations from the same buffer and the cache is the same, only their
 * contents change. False when the caller must issue the operations itself. */
static bool layers_replayed(llama_model *m, int l0, int T, const fwd_rows *r, const kv_view *kv)
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
	run_layers(m, &m->dev, l0, m->hp.n_layers, T, r, kv);
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

/* The device's part of a step: the CPU's activations up (when split), its
 * layers, then the wanted rows' logits down, or their hidden states into the
 * CPU's xb for its head. */
static int device_part(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e)
{
	int T = b->n_tokens, l0 = m->host_layers;
	fwd_rows r;
	if (stage_batch(m, b, &r, e))
		return -1;
	if (l0)
		m->kern->upload(m->dev.x, m->host.x, (size_t)T * m->hp.dim * sizeof(float));
	if (!layers_replayed(m, l0, T, &r, kv))
		run_layers(m, &m->dev, l0, m->hp.n_layers, T, &r, kv);
	if (m->head_dev) {
		device_logits(m, b, logits);
		return llama_device_status(m, e);
	}
	gather_rows(m, b, 0, b->n_out);
	m->kern->download(m->host.xb, m->dev.xb, (size_t)b->n_out * m->hp.dim * sizeof(float));
	if (llama_device_status(m, e))
		return -1;
	host_head(m, b->n_out, logits);
	return 0;
}

/* Gemma's soft cap on the n rows of logits (on the host, where they end). */
static void softcap(const llama_model *m, float *logits, int n)
{
	float cap = m->hp.logit_softcap;
	for (int64_t i = 0; cap > 0 && i < (int64_t)n * m->hp.n_vocab; i++)
		logits[i] = cap * tanhf(logits[i] / cap);
}

static int forward(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e)
{
	const llama_hparams *hp = &m->hp;
	if (check_batch(m, b, kv, e) || llama_device_status(m, e))
		return -1;
	int T = b->n_tokens;
	if (!llama_on_device(m) || llama_is_split(m)) {
		for (int i = 0; i < T; i++) {
			m->tables[i] = b->block_table[b->seq[i]];
			m->tables_w[i] = b->block_table_w ? b->block_table_w[b->seq[i]] : NULL;
			m->n_ctx[i] = b->pos[i] + 1;
		}
		fwd_rows r = {.token = b->token, .pos = b->pos, .n_ctx = m->n_ctx, .slot = b->slot, .tables = m->tables,
			      .slot_w = b->slot_w, .tables_w = b->slot_w ? m->tables_w : NULL};
		run_layers(m, &m->host, 0, llama_is_split(m) ? m->host_layers : hp->n_layers, T, &r, kv);
	}
	if (llama_on_device(m))
		return device_part(m, b, kv, logits, e);
	/* final norm and head only for the rows whose logits are wanted */
	for (int i = 0; i < b->n_out; i++)
		memcpy(m->host.xb + (size_t)i * hp->dim, m->host.x + (size_t)b->out_rows[i] * hp->dim,
		       (size_t)hp->dim * sizeof(float));
	host_head(m, b->n_out, logits);
	return 0;
}

int llama_forward(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e)
{
	if (forward(m, b, kv, logits, e))
		return -1;
	softcap(m, logits, b->n_out);
	return 0;
}
