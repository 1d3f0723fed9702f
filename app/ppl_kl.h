/* app/ppl_kl.h: perplexity's KL divergence against a saved run.
 *
 * A base run (`perplexity --kl-base FILE`, usually on an F32 model) saves the
 * log-probabilities of every next-token distribution it scores; a later run
 * over the same text (`--kl FILE`, a quantized copy) reads them back and
 * measures KL(base || this) = sum_i p_i (log p_i - log q_i) per scored token,
 * in double, with the fraction of tokens whose most likely next token is the
 * same. The file (little-endian, never in the repository):
 *   "PCKLD001", u32 n_vocab, u32 ctx, u32 n_windows, u32 scored rows per
 *   window (ctx - ctx/2), i32 tokens[n_windows * ctx] (the windows as run,
 *   BOS in front), then f32 log-probabilities [n_windows * rows][n_vocab]
 *   in the order the rows are scored.
 * --kl also reads llama-perplexity's --kl-divergence-base files ("_logits_",
 * u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk * n_ctx] as
 * tokenized, then per chunk n_ctx - 1 - n_ctx/2 rows of f32 scale, f32 min,
 * u16 q[n_vocab] padded to even, log p = min + scale * q): the KL then runs
 * against llama.cpp's distributions, on the rows both score (llama.cpp
 * scores from position n_ctx/2 + 1, one after this command; its terms below
 * log p = -16 are left out, as it leaves them out).
 * Main thread only. */
#ifndef PAGECHAT_PPL_KL_H
#define PAGECHAT_PPL_KL_H

#include "base/base.h"

#include <stdio.h>

typedef struct ppl_kl {
	FILE *f;                 /* owned */
	const char *path;        /* borrowed */
	bool save;               /* writing the base (else reading it) */
	bool llama;              /* the base is llama-perplexity's */
	int n_vocab;
	int rows, at;            /* scored rows per window; this window's next row */
	float *row;              /* owned; [n_vocab] */
	uint16_t *qrow;          /* owned; llama.cpp's row: [4 + n_vocab rounded to even] */
	double sum, sum2;        /* of the per-token KL */
	int64_t count, same_top;
} ppl_kl;

/* The windows' shape a base file holds. */
typedef struct ppl_kl_shape {
	int n_vocab, ctx, n_windows;
} ppl_kl_shape;

/* Creates path for a base run over tokens[n_windows * ctx]: 0, or -1 with e. */
int ppl_kl_create(ppl_kl *k, const char *path, const ppl_kl_shape *s, const int32_t *tokens, err *e);
/* Opens a base file and reads its shape into *s: 0, or -1 with e naming the
 * file (not a base file, cut short). */
int ppl_kl_open(ppl_kl *k, const char *path, ppl_kl_shape *s, err *e);
/* After ppl_kl_open: the file's tokens must be tokens[n] (the same text,
 * tokenizer and windows of ctx; llama.cpp's files keep each window's first
 * token as the text has it); -1 with e saying which differs. */
int ppl_kl_check_tokens(ppl_kl *k, const int32_t *tokens, int64_t n, int ctx, err *e);
/* The next scored row's logits[n_vocab]: saved (base run) or compared with
 * the saved row. 0, or -1 with e (a write or read failure). */
int ppl_kl_row(ppl_kl *k, const float *logits, err *e);
/* Finishes (a base file is flushed and closed): 0, or -1 with e; frees
 * everything either way. A zeroed k is fine. */
int ppl_kl_close(ppl_kl *k, err *e);
/* The line with the mean KL, its standard error and the same-top fraction. */
void ppl_kl_print(const ppl_kl *k, FILE *out);

#endif
