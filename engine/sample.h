/* engine/sample.h: turning logits into the next token.
 *
 * The pipeline, in order, identical in samp_probs() and samp_sample():
 *  1. repetition penalty: each distinct token among the last repeat_last_n of
 *     the history gets logit / penalty if logit > 0, else logit * penalty;
 *  2. temp <= 0: greedy, argmax of the penalized logits (ties to the lowest id),
 *     one-hot distribution; nothing below applies and no RNG is drawn;
 *  3. top-k: keep the k largest logits (ties to the lower id);
 *  4. softmax of logit / temp over the kept tokens;
 *  5. top-p: keep the smallest set of most probable tokens whose cumulative
 *     probability (step 4's) is >= top_p, at least one;
 *  6. min-p: keep tokens with p >= min_p * p_max (step 4's p), at least one;
 *  7. renormalize the kept set and draw with xoshiro256** (seeded from seed
 *     through splitmix64).
 * samp_probs() exposes that distribution so speculative decoding can use the
 * same p and q. No allocation after samp_init. Any logits are safe: NaN
 * counts as -inf, several +inf share the mass, all -inf give a uniform
 * choice, and the token drawn is always in 0..n_vocab-1 (a model's logits
 * that are not finite are an error its caller reports: samp_check_logits).
 * A samp belongs to one request (one thread). */
#ifndef PAGECHAT_SAMPLE_H
#define PAGECHAT_SAMPLE_H

#include "base/base.h"

typedef struct samp_params {
	float temp;              /* <= 0: greedy */
	int top_k;               /* <= 0: off */
	float top_p;             /* >= 1: off */
	float min_p;             /* <= 0: off */
	float repeat_penalty;    /* 1: off */
	int repeat_last_n;       /* history window for the penalty */
	uint64_t seed;
} samp_params;

/* llama.cpp-like defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
 * repeat penalty 1.0 (off) over the last 64 tokens, seed 0. */
samp_params samp_default_params(void);

/* One candidate token: its (penalized) logit, later its probability. */
typedef struct samp_cand {
	float v;
	int32_t id;
} samp_cand;

typedef struct samp {
	samp_params p;
	uint64_t rng[4];         /* xoshiro256** state */
	int32_t n_vocab;
	samp_cand *cand;         /* owned; [n_vocab] scratch */
} samp;

/* Copies p, seeds the RNG and allocates the scratch (n_vocab > 0). Values
 * without a meaning act as the nearest one: temp NaN greedy, top_p NaN off,
 * min_p NaN off, repeat_penalty NaN, infinite or <= 0 off. Cannot fail (out
 * of memory is fatal). Release with samp_deinit(). */
void samp_init(samp *s, const samp_params *p, int32_t n_vocab);
/* Frees the scratch; s can then be initialised again. */
void samp_deinit(samp *s);

/* Writes the processed distribution into probs[n_vocab] (zeros outside the
 * kept set, sums to 1, never NaN). Greedy gives a one-hot distribution.
 * logits are not modified and no RNG is drawn. history: the tokens so far
 * (for the penalty; ids outside 0..n_vocab-1 are ignored; may be NULL when
 * n_history is 0). Cannot fail. */
void samp_probs(samp *s, const float *logits, const int32_t *history, int n_history,
		float *probs);
/* Samples the next token from the distribution samp_probs() gives, drawing one
 * samp_uniform() unless greedy. Cannot fail. */
int32_t samp_sample(samp *s, const float *logits, const int32_t *history, int n_history);
/* A uniform draw in [0, 1) from the request's RNG. */
double samp_uniform(samp *s);
/* Draws an index from probs[n_vocab] (non-negative, not necessarily
 * normalised) with the request's RNG; the last non-zero index if rounding
 * runs past the end; 0 if all are zero. Cannot fail. */
int32_t samp_draw(samp *s, const float *probs);
/* Speculative decoding's rejection rule: a draft token with draft probability
 * qx and target probability px is kept with probability min(1, px / qx)
 * (1 when qx is 0). Pure. */
double samp_accept_prob(float px, float qx);
/* The residual distribution after a rejection: out[i] = max(0, p[i] - q[i]),
 * normalised to sum 1. q may be NULL with one_hot >= 0 meaning a one-hot q at
 * that index. Returns false (out = p) when the residual is all zero. Pure. */
bool samp_residual(const float *p, const float *q, int32_t one_hot, int32_t n, float *out);
/* Index of the largest value, lowest index on ties. */
int32_t samp_argmax(const float *x, int32_t n);

/* Checks that a model's logits[0..n) are all finite: NaN or Inf there means
 * its weights (or a kernel) are broken, and sampling from them would be
 * noise. true, or false with e naming pos (the position whose logits these
 * are), the first bad entry, and the fix. Cannot fail otherwise. */
bool samp_check_logits(const float *logits, int32_t n, int64_t pos, err *e);

#endif
