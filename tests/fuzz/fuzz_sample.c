/* tests/fuzz/fuzz_sample.c: the sampler (engine/sample.h) on arbitrary
 * logits and sampling parameters (issue #25: NaN and Inf logits once made
 * samp_sample read past its buffer).
 *
 * Input: byte 0 the vocabulary size (1..256, or that times 32 when bit 7 of
 * byte 1 is set), byte 1 the logits' shape (bits 0-1: each its own value /
 * all equal / all one special / one special among equal ones), then the
 * parameters as raw bytes (temp, top_p, min_p, repeat_penalty as float bit
 * patterns, so NaN, Inf, negative and huge values all come up; top_k and
 * repeat_last_n as int32; the seed), then up to 8 history ids (raw int32,
 * out of range ones included), then the logits: one byte each picks a value
 * from a palette of specials (NaN, +-Inf, +-FLT_MAX, the smallest
 * denormal, 0, ...) or, for 0xff, the next 4 bytes are the float's bits.
 *
 * Properties: the token drawn is always in the vocabulary and has a
 * non-zero probability in samp_probs' distribution, which is finite,
 * non-negative and sums to 1; the same seed draws the same token; with a
 * greedy temperature the token is the argmax of the logits (NaN as -inf,
 * no penalty); samp_check_logits says false exactly when some logit is not
 * finite; samp_draw and samp_residual stay in range. */
#include "tests/fuzz/fuzz.h"

#include "engine/sample.h"

#include <float.h>
#include <math.h>

static float raw_float(fuzz_in *in)
{
	uint32_t b = 0;
	for (int i = 0; i < 4; i++)
		b |= (uint32_t)fuzz_byte(in) << (8 * i);
	float f;
	memcpy(&f, &b, 4);
	return f;
}

static int32_t raw_int(fuzz_in *in)
{
	uint32_t b = 0;
	for (int i = 0; i < 4; i++)
		b |= (uint32_t)fuzz_byte(in) << (8 * i);
	return (int32_t)b;
}

static float pick(fuzz_in *in)
{
	static const float palette[] = {
		NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f,
		FLT_MIN, 88.0f, -88.0f, 1e30f, -1e30f, 3.5f, 0.25f, 20.0f, -20.0f,
	};
	uint8_t c = fuzz_byte(in);
	if (c == 0xff)
		return raw_float(in);
	return palette[c % ARRAY_LEN(palette)];
}

static void fill_logits(fuzz_in *in, uint8_t shape, float *x, int32_t n)
{
	switch (shape & 3) {
	case 0:
		for (int32_t i = 0; i < n; i++)
			x[i] = pick(in);
		break;
	case 1:
		x[0] = pick(in);
		for (int32_t i = 1; i < n; i++)
			x[i] = x[0];
		break;
	case 2: {
		float v = pick(in);
		for (int32_t i = 0; i < n; i++)
			x[i] = v;
		x[fuzz_byte(in) % n] = pick(in);
		break;
	}
	default: {
		float v = pick(in);
		for (int32_t i = 0; i < n; i++)
			x[i] = i % 3 ? v : pick(in);
	}
	}
}

/* The greedy choice as documented: argmax, NaN as -inf, lowest id on ties. */
static int32_t greedy_ref(const float *x, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++) {
		float a = isnan(x[i]) ? -INFINITY : x[i], b = isnan(x[best]) ? -INFINITY : x[best];
		if (a > b)
			best = i;
	}
	return best;
}

static void check_probs(const float *p, int32_t n)
{
	double sum = 0;
	bool any = false;
	for (int32_t i = 0; i < n; i++) {
		FUZZ_CHECK(isfinite(p[i]) && p[i] >= 0);
		sum += p[i];
		any |= p[i] > 0;
	}
	FUZZ_CHECK(any && fabs(sum - 1.0) < 1e-3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	uint8_t nv = fuzz_byte(&in), shape = fuzz_byte(&in);
	int32_t n = (int32_t)nv % 256 + 1;
	if (shape & 0x80)
		n *= 32;
	/* one field at a time: an initializer list's order of evaluation is unspecified */
	samp_params p;
	p.temp = raw_float(&in);
	p.top_p = raw_float(&in);
	p.min_p = raw_float(&in);
	p.repeat_penalty = raw_float(&in);
	p.top_k = raw_int(&in);
	p.repeat_last_n = raw_int(&in);
	p.seed = (uint64_t)(uint32_t)raw_int(&in);
	if (shape & 0x40) /* now and then the parameters the CLI would give */
		p = (samp_params){.temp = fabsf(p.temp) < 100 ? fabsf(p.temp) : 0.8f, .top_k = p.top_k & 255,
				  .top_p = 0.9f, .min_p = 0.05f, .repeat_penalty = 1.1f, .repeat_last_n = 8};
	int32_t hist[8];
	int n_hist = fuzz_byte(&in) % 9;
	for (int i = 0; i < n_hist; i++)
		hist[i] = shape & 0x20 ? raw_int(&in) : (int32_t)(fuzz_byte(&in) % n);
	float *x = xmalloc((size_t)n * sizeof *x), *probs = xmalloc((size_t)n * sizeof *probs);
	float *r = xmalloc((size_t)n * sizeof *r);
	fill_logits(&in, shape, x, n);

	samp s;
	samp_init(&s, &p, n);
	samp_probs(&s, x, hist, n_hist, probs);
	check_probs(probs, n);
	int32_t id = samp_sample(&s, x, hist, n_hist);
	FUZZ_CHECK(id >= 0 && id < n);
	FUZZ_CHECK(id < 0 || id >= n || probs[id] > 0);
	bool greedy = !(p.temp > 0);
	if (greedy && (p.repeat_penalty == 1.0f || p.repeat_last_n <= 0 || n_hist == 0))
		FUZZ_CHECK(id == greedy_ref(x, n));
	samp_deinit(&s);
	/* the same seed, the same token */
	samp_init(&s, &p, n);
	FUZZ_CHECK(samp_sample(&s, x, hist, n_hist) == id);
	int32_t d = samp_draw(&s, probs);
	FUZZ_CHECK(d >= 0 && d < n && probs[d] > 0);
	samp_residual(probs, NULL, id, n, r);
	check_probs(r, n);
	samp_deinit(&s);

	bool finite = true;
	for (int32_t i = 0; i < n; i++)
		finite &= isfinite(x[i]) != 0;
	err e = {0};
	FUZZ_CHECK(samp_check_logits(x, n, 7, &e) == finite);
	FUZZ_CHECK(finite || strstr(e.msg, "position 7"));
	free(x);
	free(probs);
	free(r);
	return 0;
}
