/* engine/spec_len.c: the adaptive draft length (the rules are in spec_len.h). */
#include "engine/spec_len.h"

#include "base/base.h"

int spec_len_best(double a, double cost, int k_max)
{
	int best = 0;
	double best_v = 1.0, tokens = 1.0, ak = 1.0;
	for (int k = 1; k <= k_max; k++) {
		ak *= a;
		tokens += ak;
		double v = tokens / (1.0 + cost * k);
		if (v > best_v + 1e-9) {
			best = k;
			best_v = v;
		}
	}
	return best;
}

static int estimate_best(const spec_len *l, const spec_len_params *p)
{
	return spec_len_best(l->acc / (l->acc + l->rej), p->cost, p->k_max);
}

static int cur_backoff(const spec_len *l, const spec_len_params *p)
{
	return l->backoff > 0 ? l->backoff : p->wait0;
}

int spec_len_want(const spec_len *l, const spec_len_params *p)
{
	if (!l->seen)
		return MIN(p->k0, p->k_max);
	if (l->paused)
		return !p->lookup && l->wait <= 0 ? 1 : 0;
	return estimate_best(l, p);
}

/* Adds one verification's evidence, then decides whether l is paused (and
 * when a draft model's next trial comes). */
static void observe(spec_len *l, const spec_len_params *p, double acc, double rej)
{
	if (!l->seen) {
		l->seen = true;
		l->acc = l->rej = 1.0;
	}
	l->acc = p->decay * l->acc + acc;
	l->rej = p->decay * l->rej + rej;
	bool was_paused = l->paused;
	l->paused = estimate_best(l, p) == 0;
	if (!l->paused) {
		l->backoff = 0;
	} else if (!p->lookup) {
		if (was_paused) /* a failed trial */
			l->backoff = MIN(2 * cur_backoff(l, p), p->wait_max);
		l->wait = cur_backoff(l, p);
	}
}

void spec_len_update(spec_len *l, const spec_len_params *p, int n_draft, int n_accepted)
{
	if (n_draft <= 0)
		return;
	observe(l, p, n_accepted, n_accepted < n_draft ? 1.0 : 0.0);
}

void spec_len_paused_step(spec_len *l, const spec_len_params *p, bool hit)
{
	if (!l->paused)
		return;
	if (p->lookup)
		observe(l, p, hit ? 1.0 : 0.0, hit ? 0.0 : 1.0);
	else if (l->wait > 0)
		l->wait--;
}
