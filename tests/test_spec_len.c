/* tests/test_spec_len.c: the adaptive draft length (engine/spec_len.h) step
 * by step against schedules the test computes from the header's rules with
 * its own arithmetic (closed forms for the weighted counts and the geometric
 * sums): the best length at hand-checked acceptances; drafts always rejected
 * stop after three steps, then a draft model's trials come after waits that
 * double up to wait_max; drafts always accepted grow to k_max; an accepted
 * trial brings a draft model back; prompt lookup comes back on its lookups'
 * evidence alone and never proposes a trial. */
#include "engine/spec_len.h"
#include "tests/test.h"

#include <math.h>
#include <stdbool.h>

#define DECAY 0.8
#define COST 0.2

/* Tokens per cost of k drafts at acceptance a: the geometric sum in closed form. */
static double value(double a, int k)
{
	double tokens = a < 1 ? (1 - pow(a, k + 1)) / (1 - a) : k + 1;
	return tokens / (1 + COST * k);
}

/* The expected best k: the largest value, the smaller k unless clearly above. */
static int expect_best(double a, int k_max)
{
	int best = 0;
	for (int k = 1; k <= k_max; k++)
		if (value(a, k) > value(a, best) + 1e-9)
			best = k;
	return best;
}

static void test_best(void)
{
	/* a = 0.5: 1.5/1.2 = 1.75/1.4 = 1.25 (a tie: 1), 1.875/1.6 below */
	CHECK_EQ_INT(spec_len_best(0.5, 0.2, 8), 1);
	/* a = cost: one draft gives 1.2/1.2, no better than none */
	CHECK_EQ_INT(spec_len_best(0.2, 0.2, 8), 0);
	CHECK_EQ_INT(spec_len_best(0.25, 0.2, 8), 1);
	CHECK_EQ_INT(spec_len_best(0.0, 0.01, 8), 0);
	/* a = 0.9 at cost 0.1: 6.13/1.8 at 8 beats 5.70/1.7 at 7 */
	CHECK_EQ_INT(spec_len_best(0.9, 0.1, 8), 8);
	CHECK_EQ_INT(spec_len_best(1.0, 0.5, 5), 5);
	for (int i = 0; i <= 100; i++)
		CHECK_EQ_INT(spec_len_best(i / 100.0, COST, 8), expect_best(i / 100.0, 8));
}

static spec_len_params params(bool lookup)
{
	return (spec_len_params){.k0 = 4, .k_max = 8, .cost = COST, .decay = DECAY, .lookup = lookup,
				 .wait0 = 4, .wait_max = 16};
}

/* Weighted counts after n verifications that all accepted acc and rejected
 * rej, from the start (1, 1): x_n = d^n + v (1 - d^n) / (1 - d). */
static double counted(int n, double v)
{
	return pow(DECAY, n) + v * (1 - pow(DECAY, n)) / (1 - DECAY);
}

static void test_always_rejected(void)
{
	spec_len_params p = params(false);
	spec_len l = {0};
	enum { N = 100 };
	int want[N], n = 0, verified = 0;
	/* k0, then the best k for a_n = counted(n, 0) / (counted(n, 0) + counted(n, 1)) while it is not 0 */
	want[n++] = 4;
	verified = 1;
	for (;;) {
		int k = expect_best(counted(verified, 0) / (counted(verified, 0) + counted(verified, 1)), 8);
		if (k == 0)
			break;
		want[n++] = k;
		verified++;
	}
	int first_zero = n;
	/* paused: trials (each another rejection) after 4, 8, 16, 16, ... steps */
	for (int wait = 4; n < N; wait = wait * 2 < 16 ? wait * 2 : 16) {
		for (int i = 0; i < wait && n < N; i++)
			want[n++] = 0;
		if (n < N)
			want[n++] = 1;
	}
	int bad = -1, got_k = 0;
	for (int i = 0; i < N; i++) {
		int k = spec_len_want(&l, &p);
		if (k != want[i] && bad < 0)
			bad = i, got_k = k;
		if (k > 0)
			spec_len_update(&l, &p, k, 0);
		else
			spec_len_paused_step(&l, &p, false);
	}
	CHECK_(bad < 0, "always rejected: step %d proposes %d, the schedule says %d", bad, got_k,
	       bad >= 0 ? want[bad] : 0);
	/* by hand: a = 0.31 and 0.21 give one draft, 0.15 none */
	CHECK_EQ_INT(first_zero, 3);
	CHECK(l.paused);
}

static void test_always_accepted(void)
{
	spec_len_params p = params(false);
	spec_len l = {0};
	double acc = 1, rej = 1;
	int k_want = 4, reached = -1;
	for (int i = 0; i < 30; i++) {
		int k = spec_len_want(&l, &p);
		CHECK_(k == k_want, "always accepted: step %d proposes %d, the schedule says %d", i, k, k_want);
		spec_len_update(&l, &p, k, k);
		acc = DECAY * acc + k;
		rej = DECAY * rej;
		k_want = expect_best(acc / (acc + rej), 8);
		if (k_want == 8 && reached < 0)
			reached = i + 1;
	}
	CHECK_(reached >= 1 && reached <= 3, "always accepted: k_max after %d steps", reached);
	CHECK(!l.paused);
}

/* A draft model paused by rejections whose trial is accepted drafts again,
 * and waits wait0 again the next time it pauses. */
static void test_model_way_back(void)
{
	spec_len_params p = params(false);
	spec_len l = {0};
	int k, steps = 0;
	/* to the second trial: three rejected verifications, 4 paused steps, the
	 * first trial (rejected), 8 paused steps */
	for (int trials = 0; steps < 100; steps++) {
		k = spec_len_want(&l, &p);
		if (l.paused && k == 1 && ++trials == 2)
			break;
		if (k > 0)
			spec_len_update(&l, &p, k, 0);
		else
			spec_len_paused_step(&l, &p, false);
	}
	CHECK_EQ_INT(steps, 3 + 4 + 1 + 8);
	spec_len_update(&l, &p, 1, 1);
	CHECK(!l.paused);
	k = spec_len_want(&l, &p);
	CHECK_(k >= 1, "after an accepted trial: %d drafts", k);
	/* rejected until paused again: the wait is 4, not 16 */
	for (int i = 0; i < 20 && !l.paused; i++)
		spec_len_update(&l, &p, spec_len_want(&l, &p), 0);
	CHECK(l.paused && l.wait == 4);
}

/* Prompt lookup: paused, it never proposes a trial while its lookups miss,
 * and comes back after as many right lookups as the estimate needs. */
static void test_lookup(void)
{
	spec_len_params p = params(true);
	spec_len l = {0};
	int verified = 0;
	while (!l.paused && verified < 20) {
		spec_len_update(&l, &p, spec_len_want(&l, &p), 0);
		verified++;
	}
	CHECK_EQ_INT(verified, 3);
	for (int i = 0; i < 200; i++) {
		CHECK_(spec_len_want(&l, &p) == 0, "lookup paused: step %d proposes", i);
		spec_len_paused_step(&l, &p, false);
	}
	/* the counts the test expects: 203 rejections so far, then hits */
	double acc = counted(203, 0), rej = counted(203, 1);
	int hits = 0;
	while (expect_best(acc / (acc + rej), 8) == 0) {
		CHECK_EQ_INT(spec_len_want(&l, &p), 0);
		spec_len_paused_step(&l, &p, true);
		acc = DECAY * acc + 1;
		rej = DECAY * rej;
		hits++;
	}
	CHECK_(hits >= 1 && hits <= 5, "lookup came back after %d right lookups", hits);
	CHECK(!l.paused);
	CHECK_EQ_INT(spec_len_want(&l, &p), expect_best(acc / (acc + rej), 8));
	/* not paused: the evidence of a paused step is ignored */
	spec_len before = l;
	spec_len_paused_step(&l, &p, false);
	CHECK(l.acc == before.acc && l.rej == before.rej);
	/* a proposal of none tells nothing */
	spec_len_update(&l, &p, 0, 0);
	CHECK(l.acc == before.acc && l.rej == before.rej);
}

int main(void)
{
	test_best();
	test_always_rejected();
	test_always_accepted();
	test_model_way_back();
	test_lookup();
	return TEST_DONE();
}
