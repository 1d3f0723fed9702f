/* models/place.h: where a model's layers go (partial offload), worked out
 * from memory figures alone, so that it is tested without a device and
 * `info` plans for a device that is not there.
 *
 * The device takes the last N layers (llama_params.host_layers = n_layers -
 * N); the CPU the embedding and the rest. The output norm and head go to the
 * device when they fit beside the N layers; with every layer there, the whole
 * model is (embedding and head included). Each layer's K/V live with the
 * layer: the pool's kv_tokens tokens cost N layers' worth on the device and
 * the rest on the host. A side that computes anything holds a batch's
 * scratch. place_choose takes the largest N whose device part fits the
 * budget less a safety margin, and refuses, spelling out the arithmetic,
 * when the host part with that N does not fit the host.
 * Pure functions; any thread. */
#ifndef PAGECHAT_PLACE_H
#define PAGECHAT_PLACE_H

#include "base/base.h"
#include "kernels/kvq.h"
#include "models/gguf.h"
#include "models/llama.h"

/* What a model needs, in bytes. */
typedef struct place_model {
	int n_layers;
	const int64_t *layer_bytes;  /* borrowed; [n_layers] each layer's weights */
	int64_t embd_bytes;          /* the token embedding */
	int64_t head_bytes;          /* output norm and output matrix (the embedding's
	                                bytes again when tied) */
	bool tied;                   /* the head is the embedding (on the host they are
	                                the same pages) */
	int64_t other_bytes;         /* tensors outside those (rope_freqs) */
	int64_t kv_layer_token_bytes; /* one token's K and V in one layer */
	int64_t scratch_bytes;       /* a side's activations for a batch (and logits) */
} place_model;

/* Kept free on the device beyond the plan, for what the plan cannot see (the
 * backend's library workspaces, recordings, fragmentation): the larger of
 * PLACE_MARGIN_MIN and PLACE_MARGIN_DIV-th of the budget. */
#define PLACE_MARGIN_MIN (INT64_C(256) << 20)
#define PLACE_MARGIN_DIV 50

typedef struct place_params {
	place_model m;
	int64_t kv_tokens;           /* the KV pool's tokens (every layer holds them all) */
	int64_t dev_budget;          /* device bytes this process may fill (< 0: no device) */
	int64_t host_avail;          /* host bytes available */
	int64_t margin_bytes;        /* < 0: the default margin (above) */
	int n_dev_layers;            /* < 0: choose; else exactly min(this, n_layers) */
} place_params;

/* A placement and its bytes on each side. */
typedef struct place_plan {
	int n_layers, n_dev_layers;  /* the last n_dev_layers on the device */
	bool head_dev;               /* output norm and head on the device */
	int64_t kv_tokens;
	int64_t dev_weights, dev_kv, dev_scratch, dev_total;
	int64_t host_weights, host_kv, host_scratch, host_total;
	int64_t dev_budget, margin, host_avail; /* what it was planned against */
} place_plan;

/* The bytes of n_dev layers on the device, the head there or not (n_dev is
 * clamped to 0..n_layers; all of them put the head there, none keep it on
 * the host). Cannot fail. */
void place_figures(const place_params *p, int n_dev, bool head_dev, place_plan *out);

/* The placement for p: with n_dev_layers < 0 the largest N whose device part
 * plus the margin fits dev_budget (the head there when it fits too; N = 0
 * without a device); otherwise that N, the head there when it fits. 0, or -1
 * with e spelling out the figures when the device part of a given N exceeds
 * the budget or the host part exceeds host_avail. *out is filled either way. */
int place_choose(const place_params *p, place_plan *out, err *e);

/* Fills *m from a model file: each layer's bytes (layer_bytes[n_layers],
 * caller-provided), the embedding, head and other tensors (each rounded up to
 * 256 bytes as a device copy lays them out), a layer's K/V bytes per token as
 * k_type/v_type, the scratch of batches of max_tokens. Cannot fail. */
void place_model_from_file(const gguf_file *f, const llama_hparams *hp, enum kv_type k_type,
			   enum kv_type v_type, int max_tokens, int64_t *layer_bytes, place_model *m);

#endif
