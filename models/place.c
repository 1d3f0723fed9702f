/* models/place.c: the placement chooser (models/place.h). */
#include "models/place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bytes as "12.34 GiB" (or MiB, KiB: figures stay readable for tiny
 * models) into one of a few rotating buffers of the calling thread, for
 * several per message. */
static const char *sz(int64_t bytes)
{
	static _Thread_local char buf[8][24];
	static _Thread_local int i;
	char *b = buf[i++ % 8];
	const char *unit = "GiB";
	double v = (double)bytes / (double)(INT64_C(1) << 30);
	if (llabs(bytes) < (INT64_C(1) << 30))
		v *= 1024, unit = llabs(bytes) < (1 << 20) ? (v *= 1024, "KiB") : "MiB";
	snprintf(b, sizeof buf[0], "%.2f %s", v, unit);
	return b;
}

void place_figures(const place_params *p, int n_dev, bool head_dev, place_plan *out)
{
	const place_model *m = &p->m;
	int L = m->n_layers, N = MIN(MAX(n_dev, 0), L);
	bool head = N == L || (N > 0 && head_dev);
	int64_t dev_w = 0, host_w = 0, kv_layer = m->kv_layer_token_bytes * MAX(p->kv_tokens, 0);
	for (int l = 0; l < L; l++)
		*(l >= L - N ? &dev_w : &host_w) += m->layer_bytes[l];
	/* tied: head_bytes holds the embedding too, which the host has anyway */
	int64_t head_extra = m->tied ? m->head_bytes - m->embd_bytes : m->head_bytes;
	if (N == L) {
		dev_w += m->embd_bytes + m->other_bytes + head_extra;
	} else {
		host_w += m->embd_bytes + m->other_bytes + (head ? 0 : head_extra);
		dev_w += head ? m->head_bytes : 0;
	}
	*out = (place_plan){
		.n_layers = L, .n_dev_layers = N, .head_dev = head, .kv_tokens = p->kv_tokens,
		.dev_weights = dev_w, .dev_kv = kv_layer * N, .dev_scratch = N > 0 ? m->scratch_bytes : 0,
		.host_weights = host_w, .host_kv = kv_layer * (L - N), .host_scratch = N < L ? m->scratch_bytes : 0,
		.dev_budget = p->dev_budget, .host_avail = p->host_avail,
		.margin = p->margin_bytes >= 0 ? p->margin_bytes
					       : MAX(PLACE_MARGIN_MIN, MAX(p->dev_budget, 0) / PLACE_MARGIN_DIV),
	};
	out->dev_total = out->dev_weights + out->dev_kv + out->dev_scratch;
	out->host_total = out->host_weights + out->host_kv + out->host_scratch;
}

static bool dev_fits(const place_plan *pl)
{
	return pl->dev_total == 0 || pl->dev_total + pl->margin <= pl->dev_budget;
}

/* The largest N that fits the device, the head there when it fits too. */
static void choose(const place_params *p, place_plan *out)
{
	int L = p->m.n_layers;
	for (int N = L; N > 0 && p->dev_budget >= 0; N--) {
		place_figures(p, N, true, out);
		if (dev_fits(out))
			return;
		place_figures(p, N, false, out);
		if (N < L && dev_fits(out))
			return;
	}
	place_figures(p, 0, false, out);
}

int place_choose(const place_params *p, place_plan *out, err *e)
{
	int L = p->m.n_layers;
	if (p->n_dev_layers < 0) {
		choose(p, out);
	} else {
		place_figures(p, p->n_dev_layers, true, out);
		if (!dev_fits(out) && out->n_dev_layers < L)
			place_figures(p, p->n_dev_layers, false, out);
		if (out->n_dev_layers > 0 && out->dev_total > p->dev_budget) {
			err_set(e, "-ngl %d: %d of %d layers need %s of device memory (weights %s + KV %s for %lld "
				"tokens + scratch %s), but the budget is %s: lower -ngl, use -ngl auto, or raise "
				"--gpu-mem-fraction", p->n_dev_layers, out->n_dev_layers, L, sz(out->dev_total),
				sz(out->dev_weights), sz(out->dev_kv), (long long)p->kv_tokens, sz(out->dev_scratch),
				sz(MAX(p->dev_budget, 0)));
			return -1;
		}
	}
	if (out->host_total <= p->host_avail)
		return 0;
	err_set(e, "with %d of %d layers on the device (%s), the host's part needs %s (weights %s + KV %s for "
		"%lld tokens in %d layers + scratch %s), but %s is available: lower the context (-c) or the pool, "
		"a smaller --kv-type, or a smaller model or quantization", out->n_dev_layers, L,
		p->n_dev_layers < 0 ? (p->dev_budget < 0 ? "there is no device" : "all its memory holds")
				    : "as -ngl asks",
		sz(out->host_total), sz(out->host_weights), sz(out->host_kv), (long long)p->kv_tokens,
		L - out->n_dev_layers, sz(out->host_scratch), sz(p->host_avail));
	return -1;
}

void place_model_from_file(const gguf_file *f, const llama_hparams *hp, enum kv_type k_type,
			   enum kv_type v_type, int max_tokens, int64_t *layer_bytes, place_model *m)
{
	memset(layer_bytes, 0, (size_t)hp->n_layers * sizeof *layer_bytes);
	*m = (place_model){.n_layers = hp->n_layers, .layer_bytes = layer_bytes, .tied = true};
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		int64_t bytes = (t->n_bytes + 255) & ~(int64_t)255;
		int l = llama_tensor_layer(t->name);
		if (l >= 0 && l < hp->n_layers)
			layer_bytes[l] += bytes;
		else if (!strcmp(t->name, "token_embd.weight"))
			m->embd_bytes += bytes;
		else if (!strcmp(t->name, "output.weight") || !strcmp(t->name, "output_norm.weight"))
			m->head_bytes += bytes;
		else
			m->other_bytes += bytes;
		if (!strcmp(t->name, "output.weight"))
			m->tied = false;
	}
	if (m->tied)
		m->head_bytes += m->embd_bytes;
	m->kv_layer_token_bytes = llama_kv_token_bytes(hp, k_type, v_type) / hp->n_layers;
	llama_plan plan;
	llama_plan_memory(hp, 0, 0, k_type, v_type, max_tokens, &plan);
	m->scratch_bytes = plan.scratch_bytes;
}
