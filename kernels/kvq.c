/* kernels/kvq.c: KV row formats (see kvq.h). */
#include "kernels/kvq.h"

#include "kernels/kern.h"
#include "kernels/kvq_fp8.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static const char *const names[KV_TYPE_COUNT] = {"f32", "f16", "q8", "fp8"};

const char *kv_type_name(enum kv_type t)
{
	return (unsigned)t < KV_TYPE_COUNT ? names[t] : "?";
}

int kv_type_parse(const char *s)
{
	for (int t = 0; t < KV_TYPE_COUNT; t++)
		if (!strcmp(s, names[t]))
			return t;
	return -1;
}

size_t kv_row_bytes(enum kv_type t, int n_heads, int head_dim)
{
	size_t n = (size_t)n_heads * (size_t)head_dim;
	switch (t) {
	case KV_F32:
		return 4 * n;
	case KV_F16:
		return 2 * n;
	default:
		return n + 2 * (size_t)n_heads;
	}
}

float e4m3_to_f32(uint8_t b)
{
	int exp = (b >> 3) & 15, man = b & 7;
	float v;
	if (exp == 15 && man == 7)
		return NAN;
	if (exp == 0) {
		v = (float)man * (1.0f / 512); /* subnormal: man/8 * 2^-6 */
	} else {
		uint32_t u = (uint32_t)(exp - 7 + 127) << 23 | (uint32_t)man << 20;
		memcpy(&v, &u, 4);
	}
	return b & 0x80 ? -v : v;
}

/* Round to nearest even, saturating at 448: below 2^-6 (subnormals) in steps
 * of 2^-9; above, the f32 mantissa rounded to 3 bits on the bit pattern (the
 * carry may raise the exponent, which is right). tests/test_kvq.c checks it
 * against a search over the code table. */
uint8_t f32_to_e4m3(float x)
{
	uint8_t sign = signbit(x) ? 0x80 : 0;
	float a = fabsf(x);
	if (isnan(a))
		return 0x7f;
	if (a >= 448.0f)
		return sign | 0x7e;
	if (a < 1.0f / 64)
		return sign | (uint8_t)lrintf(a * 512.0f); /* 8 is 0x08, the smallest normal */
	uint32_t u;
	memcpy(&u, &a, 4);
	u += 0x7ffff + ((u >> 20) & 1);
	int code = (int)(((u >> 23) - 127 + 7) << 3 | ((u >> 20) & 7));
	return sign | (uint8_t)(code > 0x7e ? 0x7e : code);
}

static float head_amax(const float *x, int n)
{
	float m = 0;
	for (int i = 0; i < n; i++)
		m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
	return m;
}

float kv_fp8_sse(const float *x, int n, float s)
{
	return kvq_fp8_sse(x, n, s);
}

/* The scale (an f16) for one head. int8 maps the largest magnitude to 127.
 * E4M3 maps it to 448 or, when that fits the row better, to a point up to an
 * octave lower: the values have 8 steps per octave, so scales between one
 * and two times amax/448 place the row's values at other points of the grid
 * (none saturates). Of 32 candidates spread over the octave the one with the
 * least squared error is kept (kernels/kvq_fp8.h; ties: the plainest). On
 * stories260K this halves fp8's perplexity cost (see the README). The same
 * row always gives the same bytes, whatever the batch or the backend. */
static uint16_t head_scale(const float *x, int n, enum kv_type t, kv_sse_fn sse)
{
	float amax = head_amax(x, n);
	if (t == KV_Q8)
		return f32_to_f16(amax / 127.0f);
	uint16_t best = f32_to_f16(kvq_fp8_candidate(amax, 0));
	if (amax == 0)
		return best;
	float best_e = sse(x, n, f16_to_f32(best));
	for (int j = 1; j < KVQ_FP8_SCALES; j++) {
		uint16_t c = f32_to_f16(kvq_fp8_candidate(amax, j));
		float e = sse(x, n, f16_to_f32(c));
		if (e < best_e)
			best_e = e, best = c;
	}
	return best;
}

void kv_store_row(void *dst, const float *src, enum kv_type t, int n_heads, int head_dim)
{
	kv_store_row_with(dst, src, t, n_heads, head_dim, kv_fp8_sse);
}

void kv_store_row_with(void *dst, const float *src, enum kv_type t, int n_heads, int head_dim, kv_sse_fn sse)
{
	int n = n_heads * head_dim;
	if (t == KV_F32) {
		memcpy(dst, src, (size_t)n * sizeof(float));
		return;
	}
	if (t == KV_F16) {
		uint16_t *h = dst;
		for (int i = 0; i < n; i++)
			h[i] = f32_to_f16(src[i]);
		return;
	}
	uint8_t *q = dst;
	for (int h = 0; h < n_heads; h++) {
		const float *x = src + (size_t)h * head_dim;
		uint16_t s16 = head_scale(x, head_dim, t, sse);
		float s = f16_to_f32(s16), inv = s > 0 ? 1.0f / s : 0.0f;
		memcpy(q + n + 2 * (size_t)h, &s16, 2); /* scales follow the values, maybe unaligned */
		for (int i = 0; i < head_dim; i++) {
			float v = x[i] * inv;
			if (t == KV_Q8) {
				long r = lrintf(fminf(fmaxf(v, -127.0f), 127.0f));
				q[h * head_dim + i] = (uint8_t)(int8_t)r;
			} else {
				q[h * head_dim + i] = f32_to_e4m3(v);
			}
		}
	}
}

/* The 256 E4M3 values, decoded once (loads read it instead of ldexpf). */
static float e4m3_values[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void fill_e4m3(void)
{
	for (int c = 0; c < 256; c++)
		e4m3_values[c] = e4m3_to_f32((uint8_t)c);
}

void kv_load_head(float *dst, const void *row, enum kv_type t, int n_heads, int head_dim, int h)
{
	size_t off = (size_t)h * head_dim;
	if (t == KV_F32) {
		memcpy(dst, (const float *)row + off, (size_t)head_dim * sizeof(float));
		return;
	}
	if (t == KV_F16) {
		const uint16_t *x = (const uint16_t *)row + off;
		for (int i = 0; i < head_dim; i++)
			dst[i] = f16_to_f32(x[i]);
		return;
	}
	const uint8_t *q = row;
	uint16_t s16;
	memcpy(&s16, q + (size_t)n_heads * head_dim + 2 * (size_t)h, 2);
	float s = f16_to_f32(s16);
	if (t == KV_Q8) {
		for (int i = 0; i < head_dim; i++)
			dst[i] = s * (float)(int8_t)q[off + i];
		return;
	}
	pthread_once(&e4m3_once, fill_e4m3);
	for (int i = 0; i < head_dim; i++)
		dst[i] = s * e4m3_values[q[off + i]];
}
