/* engine/spec_len.h: the adaptive draft length of one sequence, a pure policy.
 *
 * A sequence drafting with --draft-adaptive proposes k0 drafts at its first
 * decode step; after that, k is the length that pays best under a simple
 * model. Drafts are taken to be accepted one after the other with the same
 * probability a, so k of them yield 1 + a + a^2 + .. + a^k tokens a step,
 * while a step with k drafts costs 1 + cost * k plain steps (verifying k
 * more rows, and for a draft model running it k times). k is the one in
 * 0..k_max with the most tokens per cost, the smaller on a tie; 0 (no
 * drafts, "paused") when even one draft does not pay, i.e. a < cost.
 * a is estimated from the sequence's own verifications: the drafts accepted
 * over the drafts accepted plus the rejections (a proposal that ends in a
 * rejection counts one), each earlier verification weighted by decay per
 * later one, starting from one accepted and one rejected (a = 1/2).
 * A paused sequence needs evidence to come back:
 * - prompt lookup has it for free: every paused decode step checks whether
 *   its lookup would have guessed the sampled token, which counts as a
 *   draft accepted or rejected at position 1;
 * - a draft model has none, so after wait0 paused steps it proposes one
 *   draft as a trial; when that leaves it paused, the next trial comes after
 *   twice as many steps (up to wait_max), and once it drafts again the wait
 *   is wait0 again.
 * The policy only chooses how many drafts to verify; what is accepted stays
 * the exact rejection rule's (engine/spec.c), so the output distribution does
 * not depend on it. A zeroed spec_len is a fresh sequence. Pure: any thread,
 * no allocation. */
#ifndef PAGECHAT_SPEC_LEN_H
#define PAGECHAT_SPEC_LEN_H

#include <stdbool.h>

typedef struct spec_len_params {
	int k0;                  /* drafts at the first step (>= 1) */
	int k_max;               /* drafts at most (>= 1) */
	double cost;             /* one draft's cost in plain decode steps (> 0) */
	double decay;            /* an older verification's weight per newer one (0..1] */
	bool lookup;             /* paused steps bring evidence (prompt lookup) */
	int wait0;               /* no lookup: paused steps before the first trial (>= 1) */
	int wait_max;            /* ... at most, after failed trials (>= wait0) */
} spec_len_params;

typedef struct spec_len {
	bool seen;               /* any evidence yet (else k0 drafts) */
	double acc, rej;         /* weighted drafts accepted, rejections */
	bool paused;             /* the estimate says 0 drafts */
	int wait;                /* paused without lookup: steps before the trial */
	int backoff;             /* the wait after the next failed trial (0: wait0) */
} spec_len;

/* The k in 0..k_max with the most tokens per cost at acceptance a (see
 * above). Cannot fail. */
int spec_len_best(double a, double cost, int k_max);
/* Drafts l proposes at its next decode step: k0 before any evidence, 1 for
 * a due trial, else the best k for its estimate (0: none). Cannot fail. */
int spec_len_want(const spec_len *l, const spec_len_params *p);
/* After verifying n_draft > 0 drafts, n_accepted of them accepted. */
void spec_len_update(spec_len *l, const spec_len_params *p, int n_draft, int n_accepted);
/* A decode step without drafts of a paused sequence: with p->lookup, hit
 * says whether the lookup guessed the token sampled; without, the step
 * brings the trial one step nearer. No-op when l is not paused. */
void spec_len_paused_step(spec_len *l, const spec_len_params *p, bool hit);

#endif
