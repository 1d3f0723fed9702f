/* engine/sample.c: logits -> processed distribution -> token (see sample.h). */
#include "engine/sample.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

samp_params samp_default_params(void)
{
	return (samp_params){
		.temp = 0.8f,
		.top_k = 40,
		.top_p = 0.95f,
		.min_p = 0.05f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.seed = 0,
	};
}

/* ---- RNG: xoshiro256** (Blackman & Vigna), seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t st[4])
{
	uint64_t out = rotl(st[1] * 5, 7) * 9;
	uint64_t t = st[1] << 17;
	st[2] ^= st[0];
	st[3] ^= st[1];
	st[1] ^= st[2];
	st[0] ^= st[3];
	st[2] ^= t;
	st[3] = rotl(st[3], 45);
	return out;
}

double samp_uniform(samp *s)
{
	/* The top 53 bits give every double in [0, 1) on a 2^-53 grid. */
	return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

double samp_accept_prob(float px, float qx)
{
	if (qx <= 0 || px >= qx)
		return 1.0;
	return (double)px / (double)qx;
}

bool samp_residual(const float *p, const float *q, int32_t one_hot, int32_t n, float *out)
{
	double sum = 0;
	for (int32_t i = 0; i < n; i++) {
		float qi = q ? q[i] : (i == one_hot ? 1.0f : 0.0f);
		out[i] = p[i] > qi ? p[i] - qi : 0.0f;
		sum += out[i];
	}
	if (sum <= 0) {
		memcpy(out, p, (size_t)n * sizeof *out);
		return false;
	}
	for (int32_t i = 0; i < n; i++)
		out[i] = (float)(out[i] / sum);
	return true;
}

int32_t samp_draw(samp *s, const float *probs)
{
	double total = 0;
	int32_t last = 0;
	for (int32_t i = 0; i < s->n_vocab; i++)
		if (probs[i] > 0) {
			total += probs[i];
			last = i;
		}
	double u = samp_uniform(s) * total, acc = 0;
	for (int32_t i = 0; i < s->n_vocab; i++) {
		if (probs[i] <= 0)
			continue;
		acc += probs[i];
		if (u < acc)
			return i;
	}
	return last;
}

void samp_init(samp *s, const samp_params *p, int32_t n_vocab)
{
	assert(n_vocab > 0);
	s->p = *p;
	/* values outside their ranges act as the nearest meaningful one */
	if (!(s->p.temp > 0))
		s->p.temp = 0;                  /* NaN too: greedy */
	if (isnan(s->p.top_p))
		s->p.top_p = 1;
	if (isnan(s->p.min_p))
		s->p.min_p = 0;
	if (!(s->p.repeat_penalty > 0) || isinf(s->p.repeat_penalty))
		s->p.repeat_penalty = 1;
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	s->n_vocab = n_vocab;
	s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
}

void samp_deinit(samp *s)
{
	free(s->cand);
	s->cand = NULL;
	s->n_vocab = 0;
}

int32_t samp_argmax(const float *x, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* ---- ordering: by value descending, then id ascending (a total order) ---- */

static bool before(samp_cand a, samp_cand b)
{
	return a.v > b.v || (a.v == b.v && a.id < b.id);
}

static void swap(samp_cand *a, samp_cand *b)
{
	samp_cand t = *a;
	*a = *b;
	*b = t;
}

/* Partitions a[lo..hi] (lo < hi) around a median-of-three pivot: a[lo..p)
 * come before a[p], a(p..hi] after. Returns p. */
static int32_t partition(samp_cand *a, int32_t lo, int32_t hi)
{
	int32_t mid = lo + (hi - lo) / 2;
	if (before(a[mid], a[lo]))
		swap(&a[mid], &a[lo]);
	if (before(a[hi], a[lo]))
		swap(&a[hi], &a[lo]);
	if (before(a[mid], a[hi]))
		swap(&a[mid], &a[hi]);
	samp_cand pivot = a[hi];  /* the median of the three */
	int32_t store = lo;
	for (int32_t i = lo; i < hi; i++)
		if (before(a[i], pivot))
			swap(&a[i], &a[store++]);
	swap(&a[store], &a[hi]);
	return store;
}

/* Rearranges a[0..n) so that a[0..k) holds its k first elements in the order
 * above, unsorted (quickselect: O(n) expected). Ids are distinct, so equal
 * values cannot degrade it. */
static void select_top(samp_cand *a, int32_t n, int32_t k)
{
	int32_t lo = 0, hi = n - 1;
	if (k <= 0 || k >= n)
		return;
	while (lo < hi) {
		int32_t p = partition(a, lo, hi);
		if (p == k || p == k - 1)
			return;
		if (p > k)
			hi = p - 1;
		else
			lo = p + 1;
	}
}

/* ---- the pipeline ------------------------------------------------------- */

/* Step 1: cand[i] = (penalized logit of i, i). Reads the original logit, so a
 * token repeated in the window is penalized once. NaN becomes -inf (never
 * chosen while anything else can be); history ids out of range are skipped. */
static void load_logits(samp *s, const float *logits, const int32_t *hist, int n_hist)
{
	for (int32_t i = 0; i < s->n_vocab; i++)
		s->cand[i] = (samp_cand){ isnan(logits[i]) ? -INFINITY : logits[i], i };
	float pen = s->p.repeat_penalty;
	if (pen == 1.0f || s->p.repeat_last_n <= 0)
		return;
	for (int j = MAX(0, n_hist - s->p.repeat_last_n); j < n_hist; j++) {
		int32_t t = hist[j];
		if (t < 0 || t >= s->n_vocab)
			continue;
		float l = logits[t], v = l > 0 ? l / pen : l * pen;
		s->cand[t].v = isnan(v) ? -INFINITY : v;
	}
}

/* Step 4: cand[0..n).v becomes softmax(v / temp); returns the largest p.
 * Limits stand in where the arithmetic would give NaN: when some values are
 * +inf they share all the mass; when all are -inf, all share it. No value
 * is NaN on entry (load_logits). */
static float softmax(samp_cand *c, int32_t n, float temp)
{
	float max = c[0].v;
	for (int32_t i = 1; i < n; i++)
		max = MAX(max, c[i].v);
	bool flat = isinf(max);        /* +inf: only those; -inf: everyone */
	double sum = 0;
	for (int32_t i = 0; i < n; i++) {
		double e;
		if (flat)
			e = max < 0 || c[i].v == max ? 1.0 : 0.0;
		else
			e = c[i].v == -INFINITY ? 0.0 : exp(((double)c[i].v - max) / temp);
		c[i].v = (float)e;
		sum += e;
	}
	/* sum >= 1: the largest value contributes exp(0) (or 1 when flat) */
	float p_max = 0;
	for (int32_t i = 0; i < n; i++) {
		c[i].v = (float)(c[i].v / sum);
		p_max = MAX(p_max, c[i].v);
	}
	return p_max;
}

/* Step 6: keeps (in place, order kept) the tokens with p >= min_p * p_max.
 * p_max is one of the values and min(min_p, 1) * p_max rounds to <= p_max,
 * so the most probable token always stays. Returns the new count. */
static int32_t keep_min_p(samp_cand *c, int32_t n, float min_p, float p_max)
{
	float thr = MIN(min_p, 1.0f) * p_max;
	int32_t m = 0;
	for (int32_t i = 0; i < n; i++)
		if (c[i].v >= thr)
			c[m++] = c[i];
	return m;
}

/* Step 5: moves the smallest prefix (in the order above) whose probability
 * reaches top_p to c[0..return), unsorted, and returns its length (>= 1; all
 * n when rounding leaves the total short of top_p). A weighted quickselect:
 * O(n) expected, so a flat distribution over 150K tokens needs no full sort.
 * Invariant: the last kept index j lies in [lo, hi], c[0..lo) come first in
 * the order and hold mass cum, and cum < top_p unless lo == 0. */
static int32_t keep_top_p(samp_cand *c, int32_t n, float top_p)
{
	double cum = 0;
	int32_t lo = 0, hi = n - 1;
	while (lo < hi) {
		int32_t p = partition(c, lo, hi);
		double mass = 0;
		for (int32_t i = lo; i < p; i++)
			mass += c[i].v;
		if (p > lo && cum + mass >= top_p) {
			hi = p - 1;
		} else if (cum + mass + c[p].v >= top_p) {
			return p + 1;
		} else {
			cum += mass + c[p].v;
			lo = p + 1;
		}
	}
	/* lo == hi: that one is the last kept; lo == n: the whole set is. */
	return MIN(lo + 1, n);
}

/* Runs steps 1-6. Leaves the kept tokens in s->cand[0..return) with their
 * step-4 probabilities, and their sum in *total (step 7 divides by it). */
static int32_t process(samp *s, const float *logits, const int32_t *hist, int n_hist, double *total)
{
	const samp_params *p = &s->p;
	load_logits(s, logits, hist, n_hist);
	int32_t n = s->n_vocab;
	if (p->temp <= 0) {
		int32_t best = 0;
		for (int32_t i = 1; i < n; i++)
			if (s->cand[i].v > s->cand[best].v)
				best = i;
		s->cand[0] = (samp_cand){ 1.0f, best };
		*total = 1.0;
		return 1;
	}
	if (p->top_k > 0 && p->top_k < n) {
		select_top(s->cand, n, p->top_k);
		n = p->top_k;
	}
	float p_max = softmax(s->cand, n, p->temp);
	/* min-p runs before top-p here, which gives the same set as the documented
	 * order: each keeps a prefix of the tokens in the order above (min-p keeps
	 * or drops equal values together), and both judge the step-4
	 * probabilities, so the result is the shorter prefix either way. Filtering
	 * first leaves top-p less to scan. */
	if (p->min_p > 0)
		n = keep_min_p(s->cand, n, p->min_p, p_max);
	if (p->top_p < 1)
		n = keep_top_p(s->cand, n, p->top_p);
	double sum = 0;
	for (int32_t i = 0; i < n; i++)
		sum += s->cand[i].v;
	*total = sum;
	return MAX(n, 1);  /* the filters keep the most probable one; never none */
}

void samp_probs(samp *s, const float *logits, const int32_t *history, int n_history, float *probs)
{
	double total;
	int32_t n = process(s, logits, history, n_history, &total);
	memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
	for (int32_t i = 0; i < n; i++)
		probs[s->cand[i].id] = (float)(s->cand[i].v / total);
}

int32_t samp_sample(samp *s, const float *logits, const int32_t *history, int n_history)
{
	double total;
	int32_t n = process(s, logits, history, n_history, &total);
	if (s->p.temp <= 0)
		return s->cand[0].id;
	double u = samp_uniform(s) * total, acc = 0;
	for (int32_t i = 0; i < n; i++) {
		acc += s->cand[i].v;
		if (u < acc)
			return s->cand[i].id;
	}
	/* u rounded up to total: the last token with any probability. */
	while (n > 1 && s->cand[n - 1].v == 0)
		n--;
	return s->cand[n - 1].id;
}

bool samp_check_logits(const float *logits, int32_t n, int64_t pos, err *e)
{
	/* exponent bits all set: Inf or NaN; an OR over the row vectorizes */
	uint32_t bad = 0;
	for (int32_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &logits[i], 4);
		bad |= (b & 0x7f800000u) == 0x7f800000u;
	}
	if (!bad)
		return true;
	int32_t i = 0;
	while (i < n && isfinite(logits[i]))
		i++;
	err_set(e, "the model's logits at position %lld are not finite (token %d: %s): its weights hold "
		"NaN or Inf values; re-download or re-convert the model", (long long)pos, i,
		isnan(logits[i]) ? "NaN" : logits[i] > 0 ? "+Inf" : "-Inf");
	return false;
}
