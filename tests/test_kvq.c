/* tests/test_kvq.c: KV row formats: E4M3 against its definition, every row
 * type's round trip within its format's error bound, and sizes. */
#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

static void test_e4m3(void)
{
	CHECK_NEAR(e4m3_to_f32(0x00), 0.0, 0);
	CHECK_NEAR(e4m3_to_f32(0x01), ldexp(1, -9), 0);   /* smallest subnormal */
	CHECK_NEAR(e4m3_to_f32(0x07), 7 * ldexp(1, -9), 0);
	CHECK_NEAR(e4m3_to_f32(0x08), ldexp(1, -6), 0);   /* smallest normal */
	CHECK_NEAR(e4m3_to_f32(0x38), 1.0, 0);
	CHECK_NEAR(e4m3_to_f32(0x3c), 1.5, 0);
	CHECK_NEAR(e4m3_to_f32(0x7e), 448.0, 0);
	CHECK_NEAR(e4m3_to_f32(0xb8), -1.0, 0);
	CHECK(isnan(e4m3_to_f32(0x7f)) && isnan(e4m3_to_f32(0xff)));
	/* every finite code round-trips, and the values increase with the code */
	int bad = 0;
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7f) == 0x7f)
			continue;
		bad += f32_to_e4m3(e4m3_to_f32((uint8_t)c)) != c && c != 0x80; /* -0 encodes as 0x80 */
		if ((c & 0x7f) > 0 && (c & 0x7f) < 0x7f && c < 0x80)
			bad += !(e4m3_to_f32((uint8_t)c) > e4m3_to_f32((uint8_t)(c - 1)));
	}
	CHECK_EQ_INT(bad, 0);
	/* ties go to the even code */
	CHECK_EQ_INT(f32_to_e4m3(1.0625f), 0x38); /* between 1.0 (0x38) and 1.125 (0x39) */
	CHECK_EQ_INT(f32_to_e4m3(1.1875f), 0x3a); /* between 1.125 and 1.25 (0x3a) */
	CHECK_EQ_INT(f32_to_e4m3(1.07f), 0x39);
	CHECK_EQ_INT(f32_to_e4m3(1000.0f), 0x7e); /* saturates */
	CHECK_EQ_INT(f32_to_e4m3(-1000.0f), 0xfe);
	CHECK_EQ_INT(f32_to_e4m3(ldexpf(1, -11)), 0x00); /* below half the smallest subnormal */
}

static float frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(*s >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}

/* Stores random rows (one head scaled up, one all zero) and checks each
 * loaded value against the format's bound. */
static void test_rows(enum kv_type t, int n_heads, int head_dim)
{
	uint64_t rng = 77 + (uint64_t)t;
	int n = n_heads * head_dim;
	float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)head_dim * sizeof *y);
	uint8_t *row = malloc(kv_row_bytes(t, n_heads, head_dim));
	int bad = 0;
	for (int trial = 0; trial < 200; trial++) {
		for (int i = 0; i < n; i++)
			x[i] = frand(&rng) * (i / head_dim == 1 ? 50.0f : 1.0f) * (trial % 7 == 0 ? 1e-3f : 1.0f);
		if (n_heads > 2)
			memset(x + 2 * head_dim, 0, (size_t)head_dim * sizeof *x);
		kv_store_row(row, x, t, n_heads, head_dim);
		for (int h = 0; h < n_heads; h++) {
			kv_load_head(y, row, t, n_heads, head_dim, h);
			float amax = 0;
			for (int i = 0; i < head_dim; i++)
				amax = fmaxf(amax, fabsf(x[h * head_dim + i]));
			for (int i = 0; i < head_dim; i++) {
				float v = x[h * head_dim + i], d = fabsf(y[i] - v);
				float bound = t == KV_F32 ? 0
					: t == KV_F16 ? fabsf(v) * 0x1p-11f + 0x1p-24f
					: t == KV_Q8 ? amax / 127 * 0.5f + amax * 0x1p-10f
					: fabsf(v) * 0x1p-4f + amax / 448 * 0x1p-9f + amax * 0x1p-10f;
				bad += !(d <= bound * 1.0001f);
			}
		}
	}
	CHECK_(bad == 0, "%s rows (%d heads x %d): %d values outside the bound", kv_type_name(t), n_heads,
	       head_dim, bad);
	free(x);
	free(y);
	free(row);
}

int main(void)
{
	test_e4m3();
	for (int t = 0; t < KV_TYPE_COUNT; t++) {
		test_rows(t, 4, 8);
		test_rows(t, 2, 64);
		test_rows(t, 8, 128);
	}
	CHECK_EQ_INT(kv_row_bytes(KV_F16, 2, 64), 256);
	CHECK_EQ_INT(kv_row_bytes(KV_Q8, 2, 64), 132);
	CHECK_EQ_INT(kv_row_bytes(KV_FP8, 8, 128), 1040);
	CHECK_EQ_INT(kv_type_parse("q8"), KV_Q8);
	CHECK_EQ_INT(kv_type_parse("fp8"), KV_FP8);
	CHECK_EQ_INT(kv_type_parse("int4"), -1);
	return TEST_DONE();
}
