/* models/llama_int.h: the model's record, shared by models/llama.c (loading,
 * weights, scratch, the memory plan) and models/llama_fwd.c (the forward
 * pass). Nothing outside models/ includes it.
 *
 * Where the work runs: a model computes on one backend (side host, the
 * CPU; or side dev, a device backend) or, with partial offload, on both:
 * the token embedding and layers [0, host_layers) on the CPU, layers
 * [host_layers, n_layers) on the device, and the output norm and head on the
 * device unless head_dev is false. Each side has its own scratch in its own
 * memory; a step crosses from one to the other once: the activations go up
 * after the CPU's layers, and the wanted rows (or their logits) come down. */
#ifndef PAGECHAT_LLAMA_INT_H
#define PAGECHAT_LLAMA_INT_H

#include "models/llama.h"

/* The per-row arrays the kernels read: the batch's own (host backend) or
 * their device copies. */
typedef struct fwd_rows {
	const int32_t *token, *pos, *n_ctx;
	const int64_t *slot;
	const int32_t *const *tables;
	const int64_t *slot_w;           /* the windowed layers' (batch.h); NULL: slot, tables */
	const int32_t *const *tables_w;
} fwd_rows;

/* A device backend's recording of a step's device layers, and what its
 * arguments came from (a step with the same is replayed). */
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

/* Rows of logits a device backend computes per download. */
#define LOGIT_ROWS 64

/* The tensors' offset table marks those not on the device with this. */
#define WDEV_NONE UINT64_MAX

typedef struct layer {
	const gguf_tensor *attn_norm, *wq, *wk, *wv, *wo;
	const gguf_tensor *bq, *bk, *bv;          /* Q/K/V biases (qwen2 always), or NULL */
	const gguf_tensor *bo;                    /* attn_output bias (llama, optional), or NULL */
	const gguf_tensor *b_gate, *b_up, *b_down; /* MLP biases (llama, optional), or NULL */
	const gguf_tensor *q_norm, *k_norm;       /* qwen3 per-head norms, else NULL */
	const gguf_tensor *ffn_norm, *w_gate, *w_up, *w_down;
	const gguf_tensor *post_attn_norm, *post_ffn_norm; /* gemma3, else NULL */
} layer;

/* One backend's part of the work: its kernels and its scratch, allocated
 * once for max_tokens rows (all NULL for a side the model does not use). */
typedef struct side {
	const kern_ops *k;       /* borrowed, static */
	bool dev;                /* k is a device backend: buffers are its memory and
	                            weights come from the model's device copy */
	float *x, *xb;           /* owned, k's memory; [max_tokens][dim] */
	float *q, *att;          /* [max_tokens][heads*hd] */
	float *kb, *vb;          /* [max_tokens][kv_heads*hd] */
	float *hb, *hb2;         /* [max_tokens][ffn] */
	const float *inv_freq;   /* borrowed: the model's [n_rot/2], in k's memory */
	const float *inv_freq_swa; /* the same for windowed layers (inv_freq without windows) */
} side;

struct llama_model {
	gguf_file *file;         /* owned; every tensor is a view into it */
	const kern_ops *kern;    /* borrowed, static; the device backend when any part
	                            runs on one, else the CPU's */
	llama_hparams hp;
	int max_tokens;
	int host_layers;         /* layers [0, host_layers) on the CPU while the rest
	                            are on the device (0 < host_layers < n_layers);
	                            0: the whole model on kern */
	bool head_dev;           /* output norm and head on the device */
	const gguf_tensor *tok_embd, *out_norm, *output;
	const gguf_tensor *rope_freqs;   /* Llama 3.x per-pair frequency factors, or NULL */
	layer *layers;           /* owned; [n_layers] */
	float *inv_freq;         /* owned; [2][n_rot/2] rope pair frequencies: full-attention
	                            layers', then windowed layers' (rope_base_swa, unscaled) */
	side host, dev;          /* the CPU's part and the device's (see above) */
	/* A device backend's copies (all NULL with a host backend, which reads the
	 * map and the batch directly): */
	uint8_t *wdev;           /* owned, device; the device's tensors, each on a
	                            256-byte boundary */
	uint64_t *wdev_off;      /* owned; [n_tensors] offset in wdev, or WDEV_NONE */
	int64_t wdev_bytes;      /* size of wdev */
	int64_t packed_bytes;    /* weights the CPU keeps packed (offer_weights) */
	const gguf_tensor **packed; /* owned array of borrowed: the matrices packed */
	int n_packed, packed_cap;
	float *inv_freq_dev;     /* owned, device; [2][n_rot/2] */
	uint8_t *meta, *meta_host; /* owned, device / host; one batch's rows and tables */
	size_t meta_cap;         /* bytes of each */
	size_t *seq_off;         /* owned, host; [seq_cap] table offsets within meta */
	int seq_cap;
	float *logits_dev;       /* owned, device; [LOGIT_ROWS][n_vocab] */
	const int32_t **tables;  /* owned, host; [max_tokens] per-row block table */
	const int32_t **tables_w; /* owned, host; [max_tokens] per-row windowed layers' table */
	int32_t *n_ctx;          /* owned, host; [max_tokens] */
	step_graph graphs[GRAPH_SLOTS]; /* device backends that record */
	unsigned graph_clock;
};

/* The rope frequencies of layer l on side s. */
static inline const float *llama_layer_freqs(const llama_model *m, const side *s, int l)
{
	return llama_layer_window(&m->hp, l) ? s->inv_freq_swa : s->inv_freq;
}

/* Whether any part of m runs on a device backend. */
static inline bool llama_on_device(const llama_model *m)
{
	return m->kern->buf_alloc != NULL;
}

/* Whether m is split between the CPU and a device. */
static inline bool llama_is_split(const llama_model *m)
{
	return m->host_layers > 0;
}

/* Where side s's kernels find tensor t: its view in the map, or its place
 * in the device copy. */
const void *llama_wp(const llama_model *m, const side *s, const gguf_tensor *t);
/* -1 with e filled when the device backend has failed (kern_ops.status),
 * else 0. */
int llama_device_status(const llama_model *m, err *e);

#endif
