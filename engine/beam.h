/* engine/beam.h: beam search's ranking, as pure functions.
 *
 * The engine runs a beam request (core_request.beams = W) as W sequences
 * whose block tables share blocks (engine/beam.c); these are the rules it
 * ranks by, exactly as ../shared/testdata/README.md states them: every live
 * beam is extended by every token; candidates are ranked by cumulative
 * log-probability (log-softmax of the raw logits, summed in double), ties by
 * the lower parent rank, then the lower token id; an end-of-generation
 * candidate becomes a finished hypothesis and the best W others stay live.
 * The final order is by lp / length^alpha over finished and live beams.
 * Any thread; no allocation. */
#ifndef PAGECHAT_BEAM_H
#define PAGECHAT_BEAM_H

#include <stdint.h>

#define BEAM_MAX_WIDTH 16
/* Candidates kept per beam and step: enough for W live ones after the
 * end-of-generation tokens among them are set aside. */
#define BEAM_TOP(w) ((w) + 8)

typedef struct beam_cand {
	double lp;               /* cumulative log-probability with this token */
	int32_t token;
	int parent;              /* rank of the beam it extends */
} beam_cand;

/* The k best next tokens of the beam of rank parent, whose cumulative
 * log-probability is base: log-softmax of logits[n_vocab] in double, ranked
 * by lp (ties: the lower token id). Writes min(k, n_vocab) candidates to
 * out and returns how many. NaN logits rank last. */
int beam_top(const float *logits, int n_vocab, double base, int parent, int k, beam_cand *out);
/* Sorts c[0..n) best first: lp descending, then parent rank, then token. */
void beam_rank(beam_cand *c, int n);
/* The length-normalised score lp / len^alpha (len >= 1). */
double beam_score(double lp, int len, float alpha);

#endif
