/* kernels/kvq_fp8.h: how an fp8 (E4M3) KV head's scale is fitted, shared by
 * the C code (kernels/kvq.c, the AVX-512 twin in kernels/cpu/avx512.c) and
 * the CUDA kernels (kernels/cuda/kvrow.cuh), so that every backend writes the
 * same bytes for the same row.
 *
 * Candidates j = 0..31 are amax * 2^(j/32) / 448 rounded to f16 (the steps
 * below are the float values of 2^(j/32), written out so no exp2f of any
 * library enters); each is scored by the squared error of the head stored
 * with it (kvq_fp8_sse: element i summed in lane i % 16, the lanes then by
 * halves, every operation rounded on its own, never fused); the first
 * smallest wins. */
#ifndef PAGECHAT_KVQ_FP8_H
#define PAGECHAT_KVQ_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KVQ_FN static __host__ __device__ __forceinline__
#else
#define KVQ_FN static inline
#endif

/* Separately rounded arithmetic (CUDA would otherwise fuse a * b + c). */
#ifdef __CUDA_ARCH__
#define KVQ_MUL(a, b) __fmul_rn(a, b)
#define KVQ_ADD(a, b) __fadd_rn(a, b)
#define KVQ_SUB(a, b) __fsub_rn(a, b)
#define KVQ_DIV(a, b) __fdiv_rn(a, b)
#else
#define KVQ_MUL(a, b) ((a) * (b))
#define KVQ_ADD(a, b) ((a) + (b))
#define KVQ_SUB(a, b) ((a) - (b))
#define KVQ_DIV(a, b) ((a) / (b))
#endif

#define KVQ_FP8_SCALES 32

/* 2^(j/32) as a float. */
KVQ_FN float kvq_fp8_step(int j)
{
	const float t[KVQ_FP8_SCALES] = {
		1.0f, 1.0218972f, 1.04427373f, 1.06714046f, 1.09050775f, 1.1143868f, 1.13878858f, 1.1637249f,
		1.18920708f, 1.21524739f, 1.24185777f, 1.26905096f, 1.29683959f, 1.32523668f, 1.35425556f,
		1.38390994f, 1.41421354f, 1.44518077f, 1.47682619f, 1.50916445f, 1.54221082f, 1.5759809f,
		1.61049032f, 1.64575553f, 1.68179286f, 1.71861935f, 1.75625217f, 1.79470909f, 1.8340081f,
		1.87416768f, 1.91520655f, 1.95714414f};
	return t[j];
}

/* Candidate j's scale before rounding to f16. */
KVQ_FN float kvq_fp8_candidate(float amax, int j)
{
	return KVQ_DIV(KVQ_MUL(amax, kvq_fp8_step(j)), 448.0f);
}

/* a >= 0 on the E4M3 grid, saturating at 448 (what f32_to_e4m3 then
 * e4m3_to_f32 give): below 2^-6 steps of 2^-9 (adding 2^23 rounds a * 2^9
 * to an integer, to nearest even), above it the f32 mantissa rounded to 3
 * bits on the bit pattern. */
KVQ_FN float kvq_e4m3_grid(float a)
{
	a = a < 448.0f ? a : 448.0f;
	float sub = KVQ_MUL(KVQ_SUB(KVQ_ADD(KVQ_MUL(a, 512.0f), 0x1p23f), 0x1p23f), 1.0f / 512);
	uint32_t u;
	memcpy(&u, &a, 4);
	u = (u + 0x7ffffu + ((u >> 20) & 1u)) & ~0xfffffu;
	float nrm;
	memcpy(&nrm, &u, 4);
	return a < 1.0f / 64 ? sub : nrm;
}

/* The squared error of x[n] stored in E4M3 with scale s (> 0). */
KVQ_FN float kvq_fp8_sse(const float *x, int n, float s)
{
	float inv = KVQ_DIV(1.0f, s), lane[16];
	for (int i = 0; i < 16; i++)
		lane[i] = 0;
	for (int i = 0; i < n; i++) {
		float a = x[i] < 0 ? -x[i] : x[i];
		float d = KVQ_SUB(a, KVQ_MUL(s, kvq_e4m3_grid(KVQ_MUL(a, inv))));
		lane[i % 16] = KVQ_ADD(lane[i % 16], KVQ_MUL(d, d));
	}
	for (int w = 8; w >= 1; w /= 2)
		for (int i = 0; i < w; i++)
			lane[i] = KVQ_ADD(lane[i], lane[i + w]);
	return lane[0];
}

#endif
