/* tests/cuda/test_cuda_deq.cu: the CUDA backend's value arithmetic, compiled
 * for the host: the in-register dequantization (kernels/cuda/deq.cuh) against
 * quant_dequantize_row for every weight type, and the KV row reads and
 * writes (kernels/cuda/kvrow.cuh) against kv_load_head / kv_store_row for
 * every KV type, on random rows (with NaN, infinities and values whose fp8
 * candidate scales overflow f16), including the warp's pick of an fp8 scale
 * (kv_write_k's butterfly, lane by lane). Rows of an odd number of blocks
 * start off a 4-byte boundary for q8_0, q4_0 and q6_K, as in a tensor.
 * Needs no GPU: `make test` runs it in CUDA builds. (The kernels' thread
 * layout is checked only by make test-cuda.) */
#include "kernels/cuda/deq.cuh"
#include "kernels/cuda/kvrow.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the C headers, with C11's keywords spelled for C++ */
#define _Noreturn __attribute__((noreturn))
#define _Static_assert static_assert
extern "C" {
#include "kernels/kvq.h"
#include "kernels/quant.h"
}
#undef _Static_assert
#undef _Noreturn

static int pass, fail;

/* k: 1024, or a width of an odd number of blocks (rows then start 2 bytes
 * off a word for q8_0, q4_0 and q6_K); 64 bytes after the rows, as a device
 * tensor has its padding (load8 may read 2 bytes past a row's end). */
template <int WT>
static void check_type(uint64_t *rng, bool odd)
{
	bool kq = WT == DT_Q4_K || WT == DT_Q5_K || WT == DT_Q6_K, plain = WT == DT_F32 || WT == DT_F16 || WT == DT_BF16;
	const int64_t k = !odd ? 1024 : kq ? 1280 : plain ? 1032 : 1056, rows = 5;
	int64_t rb = dtype_row_bytes((enum dtype)WT, k);
	float *x = (float *)malloc(sizeof(float) * k), *ref = (float *)malloc(sizeof(float) * k);
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)((rb * rows + 64 + 63) / 64 * 64));
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < k; i++) {
			*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
			x[i] = ((float)((*rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f) * (1.0f + (float)r);
		}
		quant_quantize_row((enum dtype)WT, x, w + r * rb, k);
	}
	int bad = 0;
	double worst = 0;
	for (int64_t r = 0; r < rows; r++) {
		quant_dequantize_row((enum dtype)WT, w + r * rb, ref, k);
		for (int64_t g = 0; g < k / 8; g++) {
			float v[8];
			load8<WT>(w + r * rb, g, v);
			for (int i = 0; i < 8; i++) {
				double d = fabs((double)v[i] - ref[8 * g + i]);
				worst = fmax(worst, d);
				bad += !(d <= 1e-6 * fmax(1.0, fabs(ref[8 * g + i])));
			}
		}
	}
	if (bad) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: load8<%s> k=%lld: %d values differ from quant_dequantize_row (worst %g)\n",
			__FILE__, __LINE__, dtype_name(WT), (long long)k, bad, worst);
	} else {
		pass++;
	}
	free(x);
	free(ref);
	free(w);
}

/* kv_write_k's pick of an fp8 head's scale, lane by lane: lane j scores
 * candidate j, then the butterfly keeps kv_fp8_before's winner. The
 * candidate every lane ends with, or -1 when the lanes disagree. */
static int warp_pick(const float *xh, int hd, float amax)
{
	float e[32], e2[32];
	int j[32], j2[32];
	for (int l = 0; l < 32; l++) {
		__half c;
		e[l] = kv_fp8_key(kv_fp8_try(xh, hd, amax, l, &c));
		j[l] = l;
	}
	for (int o = 16; o > 0; o /= 2) {
		for (int l = 0; l < 32; l++) {
			bool take = kv_fp8_before(e[l ^ o], j[l ^ o], e[l], j[l]);
			e2[l] = take ? e[l ^ o] : e[l];
			j2[l] = take ? j[l ^ o] : j[l];
		}
		memcpy(e, e2, sizeof e);
		memcpy(j, j2, sizeof j);
	}
	for (int l = 1; l < 32; l++)
		if (j[l] != j[0])
			return -1;
	return j[0];
}

/* A row written as kv_write_k does (per head: max |x|, scale, codes) equals
 * kv_store_row's bytes; kv_at reads back what kv_load_head does. special:
 * head 3 holds a NaN (1), an infinity (2), or values so large that the
 * higher fp8 candidate scales overflow f16 (3). */
static void check_kv(int t, uint64_t *rng, int special)
{
	const int n_heads = 4, hd = 64, n = n_heads * hd;
	float x[n_heads * hd], ref[hd];
	uint8_t want[1024], got[1024];
	int bad_pick = 0;
	for (int i = 0; i < n; i++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = ((float)((*rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f) * (float)(1 + i / hd * 3);
	}
	x[5] = 0; /* exact zero, and a head of zeros (scale 0) */
	for (int i = 2 * hd; i < 3 * hd; i++)
		x[i] = 0;
	if (special == 1)
		x[3 * hd + 7] = NAN;
	if (special == 2)
		x[3 * hd + 1] = -INFINITY;
	for (int i = 3 * hd; special == 3 && i < 4 * hd; i++)
		x[i] *= 2.5e7f;
	size_t rb = kv_row_bytes((enum kv_type)t, n_heads, hd);
	kv_store_row(want, x, (enum kv_type)t, n_heads, hd);
	memset(got, 0xee, sizeof got);
	if (t == KV_F32) {
		memcpy(got, x, sizeof x);
	} else if (t == KV_F16) {
		for (int i = 0; i < n; i++)
			((unsigned short *)got)[i] = kv_f16(x[i]);
	} else {
		for (int h = 0; h < n_heads; h++) {
			float amax = 0;
			for (int i = 0; i < hd; i++)
				amax = fmaxf(amax, fabsf(x[h * hd + i]));
			__half s16 = kv_scale_fit(x + h * hd, hd, amax, t), c;
			if (t == KV_FP8 && amax > 0) {
				int j = warp_pick(x + h * hd, hd, amax);
				kv_fp8_try(x + h * hd, hd, amax, j < 0 ? 0 : j, &c);
				bad_pick += j < 0 || __half_as_ushort(c) != __half_as_ushort(s16);
			}
			float sc = __half2float(s16), inv = sc > 0 ? 1.0f / sc : 0.0f;
			__half_raw raw = s16;
			got[n + 2 * h] = (uint8_t)(raw.x & 0xff);
			got[n + 2 * h + 1] = (uint8_t)(raw.x >> 8);
			for (int i = 0; i < hd; i++)
				got[h * hd + i] = kv_code(x[h * hd + i], inv, t);
		}
	}
	int bad = (memcmp(want, got, rb) != 0) + bad_pick;
	for (int h = 0; h < n_heads; h++) {
		kv_load_head(ref, want, (enum kv_type)t, n_heads, hd, h);
		for (int d = 0; d < hd; d++) {
			float a = kv_at(want, t, n, hd, h, d);
			bad += !(a == ref[d] || (isnan(a) && isnan(ref[d])));
		}
	}
	if (bad) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: kv row %s (case %d): written bytes, read values or the warp's "
			"scale pick differ (%d)\n", __FILE__, __LINE__, kv_type_name((enum kv_type)t), special, bad);
	} else {
		pass++;
	}
}

int main(void)
{
	uint64_t rng = 12345;
	for (int rep = 0; rep < 4; rep++) {
		bool odd = rep % 2;
		check_type<DT_F32>(&rng, odd);
		check_type<DT_F16>(&rng, odd);
		check_type<DT_BF16>(&rng, odd);
		check_type<DT_Q8_0>(&rng, odd);
		check_type<DT_Q4_0>(&rng, odd);
		check_type<DT_Q4_K>(&rng, odd);
		check_type<DT_Q5_K>(&rng, odd);
		check_type<DT_Q6_K>(&rng, odd);
		for (int t = KV_F32; t < KV_TYPE_COUNT; t++)
			check_kv(t, &rng, rep);
	}
	printf("%s: %d passed, %d failed\n", __FILE__, pass, fail);
	return fail != 0;
}
