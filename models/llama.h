/* models/llama.h: the Llama-family transformer over a paged KV cache.
 *
 * llama_open() reads the hyperparameters from GGUF metadata ({arch}.*), checks
 * that every tensor the architecture needs is present with the right shape and
 * a type the backend supports, and allocates all scratch once for batches of up
 * to max_tokens tokens: llama_forward() never allocates. Weights are views into
 * the file's map. Architectures: llama (also Mistral, TinyLlama; any of the
 * optional attention and MLP biases), qwen2 (QKV biases), qwen3 (Q/K RMS
 * norms). A model is used by one thread at a time (the engine thread); its
 * hyperparameters may be read from any thread. gemma3 (Gemma 3): embeddings
 * scaled by sqrt(dim), norms after attention and FFN as well as before, Q/K
 * norms, a GELU-gated FFN, windowed attention on most layers with a rope base
 * of their own (llama_layer_window), and optionally soft-capped logits.
 * With a device backend (kern_ops.buf_alloc set) the weights are uploaded once
 * at open, the scratch lives on the device, each forward sends the batch's
 * rows and block tables in one upload and brings back only the wanted logits;
 * the kv_view given to llama_forward must then be device memory of the same
 * backend (kv_pool_params.kern).
 * Partial offload (llama_params.host_layers): the token embedding and the
 * first host_layers layers run on the CPU backend, the rest (and the head,
 * unless head_on_host) on the device; only the device's tensors go up. Each
 * layer's K/V live in the memory of the backend that computes it (the pool is
 * made with kv_pool_params.host_layers = llama_host_layers). A step crosses
 * once each way: the activations up after the CPU's layers, the wanted rows'
 * logits (or hidden states, head on the CPU) down. Results are the CPU's bit
 * for bit wherever the device computes as the CPU does (the fake device). */
#ifndef PAGECHAT_LLAMA_H
#define PAGECHAT_LLAMA_H

#include "base/base.h"
#include "kernels/kern.h"
#include "models/batch.h"
#include "models/gguf.h"

/* Most layers a model with windowed attention may have (the per-layer flags
 * are a fixed bitmap in the hyperparameters). */
#define LLAMA_MAX_SWA_LAYERS 512

typedef struct llama_hparams {
	char arch[32];           /* general.architecture */
	int n_vocab;
	int dim;                 /* embedding length */
	int n_layers;
	int n_heads, n_kv_heads;
	int head_dim;
	int ffn_dim;
	int n_rot;               /* rotated dims per head */
	int n_ctx_train;         /* {arch}.context_length */
	float eps;               /* RMSNorm epsilon */
	float rope_base;
	bool rope_neox;          /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
	float rope_freq_scale;   /* 1 / linear scaling factor (1: none) */
	bool has_qkv_bias, has_qk_norm, tied_output;
	/* Gemma 3 (the defaults give every other architecture's behaviour): */
	bool post_norms;         /* post_attention_norm / post_ffw_norm after each block */
	bool ffn_gelu;           /* FFN gate through GELU (tanh form), else SiLU */
	float embd_scale;        /* token embeddings multiplied by this (1: none) */
	float attn_scale;        /* scores = q.k * attn_scale ({arch}.attention.scale,
	                            else 1/sqrt(head_dim)) */
	float logit_softcap;     /* > 0: logits = cap * tanh(logits / cap)
	                            ({arch}.final_logit_softcapping); 0: none */
	int swa_window;          /* tokens a windowed layer attends to, the query's own
	                            included ({arch}.attention.sliding_window; 0: none) */
	int n_swa_layers;        /* how many layers are windowed */
	float rope_base_swa;     /* the windowed layers' rope base ({arch}.rope.freq_base_swa;
	                            they take no position scaling) */
	uint8_t swa_layer[LLAMA_MAX_SWA_LAYERS / 8]; /* bit l: layer l is windowed */
} llama_hparams;

/* Layer l's attention window in tokens: a query at position p sees keys
 * p - window + 1 .. p. 0: all keys (a full-attention layer). Pure. */
static inline int llama_layer_window(const llama_hparams *hp, int l)
{
	return hp->swa_window > 0 && l >= 0 && l < LLAMA_MAX_SWA_LAYERS && (hp->swa_layer[l / 8] >> (l % 8) & 1)
		       ? hp->swa_window : 0;
}

typedef struct llama_params {
	const kern_ops *kern;    /* NULL: the CPU backend (kern_pick chooses by name) */
	int max_tokens;          /* largest batch llama_forward will get (default 512) */
	int n_threads;           /* > 0: the backend's thread count (kern_ops.set_threads); 0: leave it */
	int host_layers;         /* with a device kern: the first host_layers layers run on
				  * the CPU (0: none; n_layers or more: the whole model,
				  * and kern is not used) */
	bool head_on_host;       /* with 0 < host_layers < n_layers: the output norm and
				  * head run on the CPU too */
} llama_params;

typedef struct llama_model llama_model;

/* Opens path and builds the model. NULL with e naming the file and the problem
 * (unsupported architecture, missing or misshapen tensor, unsupported type). */
llama_model *llama_open(const char *path, const llama_params *p, err *e);
/* The same over an already open file, which the model takes over (closed by
 * llama_free, or here on failure). */
llama_model *llama_from_gguf(gguf_file *f, const llama_params *p, err *e);
void llama_free(llama_model *m);                       /* NULL is a no-op */

const llama_hparams *llama_hp(const llama_model *m);
const gguf_file *llama_file(const llama_model *m);
/* The backend the model computes with (a KV pool for it must use its memory):
 * the device's when any part runs on one. */
const kern_ops *llama_kern(const llama_model *m);
/* Layers computed on the CPU before the rest on llama_kern, a device (their
 * K/V in host memory); 0 when the whole model runs on llama_kern. */
int llama_host_layers(const llama_model *m);
bool llama_head_on_device(const llama_model *m);       /* output norm and head */
int64_t llama_device_weight_bytes(const llama_model *m); /* uploaded (0: none) */
int64_t llama_packed_bytes(const llama_model *m); /* weights the CPU packed for its kernels, whose
                                                     file pages it let go (0: none) */
/* The layer a tensor name belongs to ("blk.12.attn_q.weight": 12), or -1.
 * Pure. */
int llama_tensor_layer(const char *name);
int64_t llama_n_params(const llama_model *m);
int llama_max_tokens(const llama_model *m);            /* largest batch */
/* Reads the hyperparameters alone (for info on files the backend can't run). */
int llama_read_hparams(const gguf_file *f, llama_hparams *hp, err *e);

/* What running a model takes, in bytes (the memory plan). */
typedef struct llama_plan {
	int64_t weight_bytes;    /* tensor data, mapped from the file */
	int64_t kv_token_bytes;  /* K and V of one token, all layers */
	int64_t kv_bytes;        /* the KV pool for kv_tokens tokens */
	int64_t scratch_bytes;   /* activations for max_tokens rows and 64 rows of logits */
	int64_t total_bytes;
} llama_plan;

/* Bytes of one token's K and V in every layer, stored as k_type / v_type
 * (enum kv_type, kernels/kvq.h). Pure. */
int64_t llama_kv_token_bytes(const llama_hparams *hp, enum kv_type k_type, enum kv_type v_type);
/* Computes the plan for a KV pool of kv_tokens tokens stored as k_type /
 * v_type and batches of max_tokens. Pure; cannot fail. */
void llama_plan_memory(const llama_hparams *hp, int64_t weight_bytes, int64_t kv_tokens,
		       enum kv_type k_type, enum kv_type v_type, int max_tokens, llama_plan *out);

/* Runs one step: writes every batch token's K/V into kv, and fills
 * logits[b->n_out][n_vocab] for the requested rows. Returns 0, or -1 with e
 * filled for a batch that breaks the contract (too many tokens, token id or
 * slot out of range, a position past its block table) or a device backend's
 * failure (kern_ops.status: the device stays failed). */
int llama_forward(llama_model *m, const llama_batch *b, const kv_view *kv, float *logits, err *e);

/* Whether the model's backend can shift a context (kern_ops.kv_shift). */
bool llama_can_shift(const llama_model *m);
/* Moves n K/V rows of every layer of kv from slot src[i] to slot dst[i] (host
 * arrays), turning each K row by delta[i] positions with the model's RoPE
 * (kern_ops.kv_shift; engine/core.h, core_shift). 0, or -1 with e filled (a
 * backend without kv_shift, a slot out of range, a device failure). */
int llama_kv_shift(llama_model *m, const kv_view *kv, const int64_t *src, const int64_t *dst,
		   const int32_t *delta, int64_t n, err *e);

#endif
