/* models/batch.h: the contract between the engine and the model.
 *
 * One forward step runs a flat list of n_tokens tokens that may belong to
 * several sequences: prefill chunks, decodes and speculative verification rows
 * are all just rows. Each token writes its K/V into kv slot slot[i] (block *
 * block_tokens + offset) and attends to positions 0..pos[i] of its sequence,
 * read through that sequence's block table (so earlier tokens of the same
 * batch are visible to later ones); layers with a sliding window may have
 * slots and tables of their own (slot_w, block_table_w). Logits come back for the rows listed in
 * out_rows, in that order. All arrays are borrowed for the call. */
#ifndef PAGECHAT_BATCH_H
#define PAGECHAT_BATCH_H

#include "kernels/kvq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kv_view {
	void *k, *v;             /* borrowed; per layer [n_slots] rows of k_row / v_row bytes */
	int64_t n_slots;         /* n_blocks * block_tokens */
	int block_tokens;
	int n_layers;
	int kv_dim;
	enum kv_type k_type, v_type; /* how a row is stored (kernels/kvq.h) */
	size_t k_row, v_row;     /* bytes per row */
	/* Partial offload: 0, or layers [0, n_lo) are in k/v (host memory) and
	 * layers [n_lo, n_layers) in k_hi/v_hi (the device's), each part laid
	 * out as above from its first layer. A slot is the same in every layer. */
	int n_lo;
	void *k_hi, *v_hi;       /* borrowed; NULL when n_lo is 0 */
	/* Sliding windows kept apart (kv/pool.h): layers may hold different
	 * numbers of rows (the windowed ones n_slots_w). NULL: every layer
	 * n_slots rows; else row0[l] is layer l's first row within its part. */
	const int64_t *row0;     /* borrowed; [n_layers] */
	int64_t n_slots_w;       /* the windowed layers' rows (n_slots without) */
} kv_view;

/* Layer l's K and V rows (slot 0) in kv. Pure. */
static inline void kv_view_layer(const kv_view *kv, int l, void **k, void **v)
{
	bool hi = kv->n_lo > 0 && l >= kv->n_lo;
	size_t i = (size_t)(hi ? l - kv->n_lo : l), n = (size_t)kv->n_slots;
	size_t r = kv->row0 ? (size_t)kv->row0[l] : i * n;
	*k = (uint8_t *)(hi ? kv->k_hi : kv->k) + r * kv->k_row;
	*v = (uint8_t *)(hi ? kv->v_hi : kv->v) + r * kv->v_row;
}

typedef struct llama_batch {
	int n_tokens;
	const int32_t *token;    /* [n_tokens] token ids */
	const int32_t *pos;      /* [n_tokens] position within its sequence */
	const int64_t *slot;     /* [n_tokens] kv slot the token's K/V are written to */
	const int32_t *seq;      /* [n_tokens] index into block_table */
	int n_seqs;
	const int32_t *const *block_table; /* [n_seqs] -> physical block ids */
	const int32_t *n_table;  /* [n_seqs] entries in each block table */
	int n_out;
	const int32_t *out_rows; /* [n_out] rows (0..n_tokens-1) whose logits are wanted */
	/* Sliding windows kept apart (kv/pool.h): the slots and block tables the
	 * layers with a window write and read through (entries their windows do
	 * not reach may be -1); NULL: those layers use slot and block_table too. */
	const int64_t *slot_w;   /* [n_tokens] */
	const int32_t *const *block_table_w; /* [n_seqs], n_table entries each */
} llama_batch;

#endif
