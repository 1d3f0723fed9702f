/* tests/cuda/test_cuda_deq.cu: the CUDA backend's in-register dequantization
 * (kernels/cuda/deq.cuh, compiled for the host here) against the CPU's
 * quant_dequantize_row, for every weight type, on random rows. Needs no GPU:
 * `make test` runs it in CUDA builds. */
#include "kernels/cuda/deq.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* the C headers, with C11's keywords spelled for C++ */
#define _Noreturn __attribute__((noreturn))
#define _Static_assert static_assert
extern "C" {
#include "kernels/quant.h"
}
#undef _Static_assert
#undef _Noreturn

static int pass, fail;

template <int WT>
static void check_type(uint64_t *rng)
{
	const int64_t k = 1024, rows = 5;
	int64_t rb = dtype_row_bytes((enum dtype)WT, k);
	float *x = (float *)malloc(sizeof(float) * k), *ref = (float *)malloc(sizeof(float) * k);
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)((rb * rows + 63) / 64 * 64));
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
		fprintf(stderr, "%s:%d: FAIL: load8<%s>: %d values differ from quant_dequantize_row (worst %g)\n",
			__FILE__, __LINE__, dtype_name(WT), bad, worst);
	} else {
		pass++;
	}
	free(x);
	free(ref);
	free(w);
}

int main(void)
{
	uint64_t rng = 12345;
	for (int rep = 0; rep < 4; rep++) {
		check_type<DT_F32>(&rng);
		check_type<DT_F16>(&rng);
		check_type<DT_BF16>(&rng);
		check_type<DT_Q8_0>(&rng);
		check_type<DT_Q4_0>(&rng);
		check_type<DT_Q4_K>(&rng);
		check_type<DT_Q5_K>(&rng);
		check_type<DT_Q6_K>(&rng);
	}
	printf("%s: %d passed, %d failed\n", __FILE__, pass, fail);
	return fail != 0;
}
