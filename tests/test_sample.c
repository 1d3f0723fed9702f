/* tests/test_sample.c: the sampler against a slow reference written here. */
#include "engine/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

/* ---- test data ---------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252u;
static double rnd01(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) * 0x1.0p-53;
}

static void random_logits(float *x, int n, float lo, float hi)
{
	for (int i = 0; i < n; i++)
		x[i] = lo + (float)rnd01() * (hi - lo);
}

/* ---- the reference: the documented steps, one by one, in double ---- */

static const float *ref_key; /* qsort has no context argument */
static int ref_cmp(const void *pa, const void *pb)
{
	int a = *(const int *)pa, b = *(const int *)pb;
	if (ref_key[a] != ref_key[b])
		return ref_key[a] > ref_key[b] ? -1 : 1;
	return a < b ? -1 : 1;
}

static void ref_probs(const samp_params *p, const float *logits, int n, const int32_t *hist,
		      int n_hist, double *out)
{
	float *l = malloc((size_t)n * sizeof *l);
	int *order = malloc((size_t)n * sizeof *order);
	double *pr = calloc((size_t)n, sizeof *pr);
	memcpy(l, logits, (size_t)n * sizeof *l);
	/* 1. penalty on the distinct tokens of the window */
	int start = p->repeat_last_n > 0 ? (n_hist > p->repeat_last_n ? n_hist - p->repeat_last_n : 0) : n_hist;
	for (int j = start; j < n_hist && p->repeat_penalty != 1.0f; j++) {
		float x = logits[hist[j]];
		l[hist[j]] = x > 0 ? x / p->repeat_penalty : x * p->repeat_penalty;
	}
	for (int i = 0; i < n; i++)
		out[i] = 0;
	for (int i = 0; i < n; i++)
		order[i] = i;
	ref_key = l;
	qsort(order, (size_t)n, sizeof *order, ref_cmp);
	if (p->temp <= 0) { /* 2. greedy */
		out[order[0]] = 1;
		goto done;
	}
	/* 3. top-k */
	int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
	/* 4. softmax with temperature over the kept */
	double sum = 0;
	for (int i = 0; i < k; i++)
		sum += pr[i] = exp(((double)l[order[i]] - l[order[0]]) / p->temp);
	for (int i = 0; i < k; i++)
		pr[i] /= sum;
	/* 5. top-p: smallest prefix reaching top_p */
	int keep = k;
	double cum = 0;
	for (int i = 0; i < k && p->top_p < 1; i++) {
		cum += pr[i];
		if (cum >= p->top_p) {
			keep = i + 1;
			break;
		}
	}
	/* 6. min-p: p >= min_p * p_max, at least one (pr[0] is p_max) */
	for (int i = 0; i < keep; i++)
		if (p->min_p <= 0 || pr[i] >= p->min_p * pr[0])
			out[order[i]] = pr[i];
	if (out[order[0]] == 0)
		out[order[0]] = pr[0];
	/* 7. renormalize */
	sum = 0;
	for (int i = 0; i < n; i++)
		sum += out[i];
	for (int i = 0; i < n; i++)
		out[i] /= sum;
done:
	free(l);
	free(order);
	free(pr);
}

/* ---- tests ---------------------------------------------------------------- */

static samp_params plain(float temp)
{
	samp_params p = { .temp = temp, .top_k = 0, .top_p = 1, .min_p = 0,
			  .repeat_penalty = 1, .repeat_last_n = 64, .seed = 1 };
	return p;
}

static void test_greedy(void)
{
	const float x[] = { 1, 3, 3, 2, -5 };
	CHECK_EQ_INT(samp_argmax(x, 5), 1);
	CHECK_EQ_INT(samp_argmax(x, 1), 0);
	samp_params p = plain(0);
	samp s, fresh;
	samp_init(&s, &p, 5);
	samp_init(&fresh, &p, 5);
	CHECK_EQ_INT(samp_sample(&s, x, NULL, 0), 1);
	float probs[5];
	samp_probs(&s, x, NULL, 0, probs);
	CHECK(probs[0] == 0 && probs[1] == 1 && probs[2] == 0 && probs[3] == 0 && probs[4] == 0);
	/* greedy draws nothing from the RNG */
	CHECK(samp_uniform(&s) == samp_uniform(&fresh));

	/* with a penalty, greedy takes the argmax of the penalized logits */
	samp_deinit(&s);
	p.repeat_penalty = 4;
	samp_init(&s, &p, 5);
	const int32_t hist[] = { 1 };
	CHECK_EQ_INT(samp_sample(&s, x, hist, 1), 2);
	samp_deinit(&s);
	samp_deinit(&fresh);
}

static void test_top_k_1_is_greedy(void)
{
	enum { N = 1000 };
	static float x[N];
	samp_params p = samp_default_params();
	p.top_k = 1;
	p.seed = 5;
	samp s;
	samp_init(&s, &p, N);
	int bad = 0;
	for (int t = 0; t < 200; t++) {
		random_logits(x, N, -10, 10);
		if (t % 10 == 0) /* a tie for the top: the lower id wins */
			x[700] = x[123] = 11;
		bad += samp_sample(&s, x, NULL, 0) != samp_argmax(x, N);
	}
	CHECK_EQ_INT(bad, 0);
	samp_deinit(&s);
}

static void test_seeds(void)
{
	enum { N = 64, T = 300 };
	float x[N];
	random_logits(x, N, -2, 2);
	samp_params p = samp_default_params();
	p.top_k = 0;
	p.min_p = 0;
	p.temp = 1.5f;
	int32_t a[T], b[T], c[T];
	samp s;
	for (int run = 0; run < 3; run++) {
		p.seed = run == 2 ? 43 : 42;
		samp_init(&s, &p, N);
		int32_t *out = run == 0 ? a : run == 1 ? b : c;
		for (int t = 0; t < T; t++)
			out[t] = samp_sample(&s, x, NULL, 0);
		samp_deinit(&s);
	}
	CHECK(memcmp(a, b, sizeof a) == 0);
	int differ = 0;
	for (int t = 0; t < T; t++)
		differ += a[t] != c[t];
	CHECK(differ > T / 2);

	/* samp_uniform is in [0, 1) with mean 1/2 */
	samp_init(&s, &p, N);
	double sum = 0, lo = 1, hi = 0;
	for (int i = 0; i < 100000; i++) {
		double u = samp_uniform(&s);
		sum += u;
		lo = u < lo ? u : lo;
		hi = u > hi ? u : hi;
	}
	CHECK(lo >= 0 && hi < 1);
	CHECK_NEAR(sum / 100000, 0.5, 0.005);
	samp_deinit(&s);
}

/* Compares samp_probs with the reference for one parameter set; returns the
 * largest absolute difference and checks the sum and that logits are intact. */
static double compare_one(samp *s, const float *x, int n, const int32_t *hist, int n_hist,
			  float *probs, double *ref)
{
	float *copy = malloc((size_t)n * sizeof *copy);
	memcpy(copy, x, (size_t)n * sizeof *copy);
	uint64_t rng[4];
	memcpy(rng, s->rng, sizeof rng);
	samp_probs(s, x, hist, n_hist, probs);
	ref_probs(&s->p, x, n, hist, n_hist, ref);
	double err_max = 0, sum = 0;
	for (int i = 0; i < n; i++) {
		err_max = fmax(err_max, fabs(probs[i] - ref[i]));
		sum += probs[i];
	}
	if (fabs(sum - 1) > 1e-5 || memcmp(copy, x, (size_t)n * sizeof *copy) != 0 ||
	    memcmp(rng, s->rng, sizeof rng) != 0)
		err_max = 1; /* counted as a mismatch */
	free(copy);
	return err_max;
}

static void test_against_reference(void)
{
	enum { N = 300, H = 50 };
	static float x[N], probs[N];
	static double ref[N];
	int32_t hist[H];
	const float temps[] = { 0, 0.3f, 0.8f, 1, 1.7f };
	const int top_ks[] = { 0, 1, 5, 40, N, N + 5 };
	const float top_ps[] = { 1, 0.95f, 0.5f, 0.1f, 0 };
	const float min_ps[] = { 0, 0.05f, 0.3f, 1.5f };
	const float pens[] = { 1, 1.3f, 0.8f };
	const int last_ns[] = { 0, 8, 64 };
	int n_cases = 0, n_bad = 0;
	double worst = 0;
	for (int t = 0; t < 5; t++)
	for (int k = 0; k < 6; k++)
	for (int tp = 0; tp < 5; tp++)
	for (int mp = 0; mp < 4; mp++)
	for (int pe = 0; pe < 3; pe++)
	for (int ln = 0; ln < 3; ln++) {
		random_logits(x, N, -6, 6);
		for (int i = 0; i < H; i++)
			hist[i] = (int32_t)(rnd01() * 40); /* repeats within the window */
		samp_params p = { .temp = temps[t], .top_k = top_ks[k], .top_p = top_ps[tp],
				  .min_p = min_ps[mp], .repeat_penalty = pens[pe],
				  .repeat_last_n = last_ns[ln], .seed = 9 };
		samp s;
		samp_init(&s, &p, N);
		double d = compare_one(&s, x, N, hist, H, probs, ref);
		samp_deinit(&s);
		n_cases++;
		worst = fmax(worst, d);
		if (d > 1e-6 && n_bad++ == 0)
			fprintf(stderr, "first mismatch %g: temp %g top_k %d top_p %g min_p %g pen %g last_n %d\n",
				d, p.temp, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n);
	}
	CHECK_EQ_INT(n_cases, 5 * 6 * 5 * 4 * 3 * 3);
	CHECK_EQ_INT(n_bad, 0);
	CHECK(worst <= 1e-6);
}

/* Large vocabularies: the partial selection paths, and flat distributions
 * where top-p needs many sorting rounds. */
static void test_large_vocab(void)
{
	enum { N = 150000 };
	float *x = malloc(N * sizeof *x), *probs = malloc(N * sizeof *probs);
	double *ref = malloc(N * sizeof *ref);
	const struct { float temp; int top_k; float top_p, min_p, lo, hi; } cases[] = {
		{ 0.8f, 40, 0.95f, 0.05f, -10, 10 },  /* the defaults */
		{ 1.0f, 0, 0.9f, 0, 0, 1 },         /* flat: top-p keeps ~90% of 150K */
		{ 1.0f, 0, 0.5f, 0, -3, 3 },
		{ 0.7f, 2000, 0.99f, 0, -1, 1 },
		{ 1.2f, 0, 1, 0.2f, -4, 4 },
		{ 1.0f, 0, 1, 0, -20, 20 },
	};
	samp s;
	for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
		samp_params p = { .temp = cases[c].temp, .top_k = cases[c].top_k,
				  .top_p = cases[c].top_p, .min_p = cases[c].min_p,
				  .repeat_penalty = 1, .repeat_last_n = 64, .seed = 3 };
		random_logits(x, N, cases[c].lo, cases[c].hi);
		x[N - 1] = -INFINITY; /* a masked token */
		samp_init(&s, &p, N);
		double d = compare_one(&s, x, N, NULL, 0, probs, ref);
		CHECK_(d <= 1e-6, "vocab %d case %zu: max diff %g", N, c, d);
		CHECK(probs[N - 1] == 0);
		samp_deinit(&s);
	}
	free(x);
	free(probs);
	free(ref);
}

static void test_penalty_window(void)
{
	enum { N = 16 };
	const float x[N] = { 0.5f, 2, -1, 1.5f, -0.25f, 3, 0, -2, 1, 0.75f, -3, 2.5f, 1.25f, -0.5f, 0.1f, 4 };
	/* Window of the last 6: { 5, 2, 5, 9, 11, 0 }; 3, 7 and 15 are older. */
	const int32_t hist[] = { 3, 7, 15, 5, 2, 5, 9, 11, 0 };
	samp_params p = plain(1);
	p.repeat_penalty = 1.5f;
	p.repeat_last_n = 6;
	samp s;
	samp_init(&s, &p, N);
	float pen[N], base[N];
	samp_probs(&s, x, hist, 9, pen);
	samp_probs(&s, x, NULL, 0, base);
	bool in_window[N] = { false };
	for (int j = 3; j < 9; j++)
		in_window[hist[j]] = true;
	/* log p_pen - log p_base = c + (penalized - original) logit */
	double c = log(pen[1]) - log(base[1]);
	int bad = 0;
	for (int i = 0; i < N; i++) {
		double want = c;
		if (in_window[i])
			want += (x[i] > 0 ? x[i] / 1.5 : x[i] * 1.5) - x[i];
		double got = log(pen[i]) - log(base[i]);
		if (fabs(got - want) > 1e-5) {
			bad++;
			fprintf(stderr, "token %d: log ratio %g, want %g\n", i, got, want);
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK(pen[5] < base[5] && pen[2] < base[2] && pen[3] > base[3]);
	samp_deinit(&s);
}

/* Empirical frequencies of samp_sample against samp_probs (chi-square). */
static void chi_square(const samp_params *p, const float *x, int n, const int32_t *hist, int n_hist)
{
	enum { DRAWS = 200000 };
	samp s;
	samp_init(&s, p, n);
	float *probs = malloc((size_t)n * sizeof *probs);
	long *count = calloc((size_t)n, sizeof *count);
	samp_probs(&s, x, hist, n_hist, probs);
	for (int i = 0; i < DRAWS; i++)
		count[samp_sample(&s, x, hist, n_hist)]++;
	double chi2 = 0;
	int df = -1, outside = 0;
	for (int i = 0; i < n; i++) {
		if (probs[i] == 0) {
			outside += count[i] != 0;
			continue;
		}
		double e = probs[i] * (double)DRAWS;
		chi2 += (count[i] - e) * (count[i] - e) / e;
		df++;
	}
	CHECK_EQ_INT(outside, 0);
	CHECK(df >= 3);
	/* mean df, sd sqrt(2 df): 8 standard deviations is far beyond chance */
	CHECK_(chi2 < df + 8 * sqrt(2.0 * df), "chi2 %g with %d degrees of freedom", chi2, df);
	free(probs);
	free(count);
	samp_deinit(&s);
}

static void test_frequencies(void)
{
	enum { N = 40 };
	float x[N];
	random_logits(x, N, -2, 2);
	int32_t hist[] = { 1, 2, 3, 4, 5, 6, 7 };
	samp_params p = { .temp = 1.2f, .top_k = 25, .top_p = 0.9f, .min_p = 0.05f,
			  .repeat_penalty = 1.2f, .repeat_last_n = 4, .seed = 11 };
	chi_square(&p, x, N, hist, 7);
	samp_params q = plain(0.9f); /* every token, no filter */
	q.seed = 12;
	chi_square(&q, x, N, NULL, 0);
}

/* Logits a damaged model gives (issue #25: all NaN once made samp_sample read
 * before its buffer): every draw stays in the vocabulary, the distribution
 * stays finite, and samp_check_logits names the position. */
static void test_non_finite(void)
{
	enum { N = 64 };
	float x[N], probs[N];
	const float specials[] = {NAN, INFINITY, -INFINITY, 3e38f, -3e38f, 0};
	const samp_params ps[] = {
		samp_default_params(), plain(0.9f), {.temp = 0},
		{.temp = NAN, .top_p = NAN, .min_p = NAN, .repeat_penalty = NAN, .repeat_last_n = 4},
		{.temp = 1e-38f, .top_k = -3, .top_p = -1, .min_p = INFINITY, .repeat_penalty = 0,
		 .repeat_last_n = 8},
		{.temp = INFINITY, .top_k = 1000, .top_p = 2, .min_p = 0.5f, .repeat_penalty = 1e30f,
		 .repeat_last_n = 8},
	};
	int32_t hist[4] = {0, 5, -7, 1000};   /* out-of-range ids are ignored */
	samp s;
	for (size_t k = 0; k < ARRAY_LEN(ps); k++)
		for (size_t a = 0; a < ARRAY_LEN(specials); a++)
			for (int shape = 0; shape < 3; shape++) {
				for (int i = 0; i < N; i++)
					x[i] = shape == 0 ? specials[a] : shape == 1 ? (float)(i % 5)
					       : (i % 2 ? specials[a] : specials[(a + 1) % ARRAY_LEN(specials)]);
				if (shape == 1)
					x[17] = specials[a];
				samp_init(&s, &ps[k], N);
				samp_probs(&s, x, hist, 4, probs);
				double sum = 0;
				bool finite = true;
				for (int i = 0; i < N; i++) {
					finite &= isfinite(probs[i]) && probs[i] >= 0;
					sum += probs[i];
				}
				int32_t id = samp_sample(&s, x, hist, 4);
				CHECK_(finite && fabs(sum - 1) < 1e-4 && id >= 0 && id < N && probs[id] > 0,
				       "params %zu, special %g, shape %d: id %d, sum %g", k, specials[a], shape, id, sum);
				samp_deinit(&s);
			}
	/* NaN counts as -inf: the finite one wins; +inf ones share the mass */
	for (int i = 0; i < N; i++)
		x[i] = NAN;
	x[9] = -5;
	samp_init(&s, &(samp_params){.temp = 0}, N);
	CHECK_EQ_INT(samp_sample(&s, x, NULL, 0), 9);
	samp_deinit(&s);
	x[3] = INFINITY;
	x[40] = INFINITY;
	samp_init(&s, &(samp_params){.temp = 1, .top_p = 1, .repeat_penalty = 1}, N);
	samp_probs(&s, x, NULL, 0, probs);
	CHECK(probs[3] == 0.5f && probs[40] == 0.5f && probs[9] == 0);
	samp_deinit(&s);
	err e = {0};
	for (int i = 0; i < N; i++)
		x[i] = (float)i;
	CHECK(samp_check_logits(x, N, 3, &e));
	x[33] = NAN;
	CHECK(!samp_check_logits(x, N, 12, &e) && strstr(e.msg, "position 12") && strstr(e.msg, "token 33: NaN"));
	x[33] = -INFINITY;
	CHECK(!samp_check_logits(x, N, 12, &e) && strstr(e.msg, "-Inf"));
}

int main(void)
{
	test_greedy();
	test_top_k_1_is_greedy();
	test_seeds();
	test_against_reference();
	test_large_vocab();
	test_penalty_window();
	test_frequencies();
	test_non_finite();
	return TEST_DONE();
}
