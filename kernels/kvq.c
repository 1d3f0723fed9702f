/* kernels/kvq.c: KV row formats (see kvq.h). */
#include "kernels/kvq.h"

#include "kernels/kern.h"

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
	int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
	float v;
	if (exp == 15 && man == 7)
		v = NAN;
	else if (exp == 0)
		v = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
	else
		v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
	return sign ? -v : v;
}

/* Codes 0x00..0x7e are the non-negative finite values in increasing order:
 * a binary search finds the nearest, ties going to the even code (even
 * mantissa), which is round-to-nearest-even. */
uint8_t f32_to_e4m3(float x)
{
	uint8_t sign = signbit(x) ? 0x80 : 0;
	float a = fabsf(x);
	if (isnan(a))
		return 0x7f;
	int lo = 0, hi = 0x7e;
	if (a >= e4m3_to_f32(0x7e))
		return sign | 0x7e; /* saturate at 448 */
	while (hi - lo > 1) { /* invariant: value(lo) <= a < value(hi) */
		int mid = (lo + hi) / 2;
		if (e4m3_to_f32((uint8_t)mid) <= a)
			lo = mid;
		else
			hi = mid;
	}
	float dl = a - e4m3_to_f32((uint8_t)lo), dh = e4m3_to_f32((uint8_t)hi) - a;
	int code = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
	return sign | (uint8_t)code;
}

static float head_amax(const float *x, int n)
{
	float m = 0;
	for (int i = 0; i < n; i++)
		m = fmaxf(m, fabsf(x[i]));
	return m;
}

void kv_store_row(void *dst, const float *src, enum kv_type t, int n_heads, int head_dim)
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
	float top = t == KV_Q8 ? 127.0f : 448.0f;
	for (int h = 0; h < n_heads; h++) {
		const float *x = src + (size_t)h * head_dim;
		uint16_t s16 = f32_to_f16(head_amax(x, head_dim) / top);
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
