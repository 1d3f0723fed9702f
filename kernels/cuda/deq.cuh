/* kernels/cuda/deq.cuh: reading 8 consecutive values of a weight row of any
 * type the CUDA backend takes, dequantized in registers (GGUF block layouts:
 * kernels/quant.h). Host and device code, so tests/cuda/test_cuda_deq.cu can
 * hold it to the CPU's dequantization on a machine without a GPU. Rows must
 * start on a 16-byte boundary (GGUF's alignment and cudaMalloc give that). */
#ifndef PAGECHAT_CUDA_DEQ_CUH
#define PAGECHAT_CUDA_DEQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/dtype.h"
}

/* An IEEE half or a bfloat16 from its bits (exact). */
static __host__ __device__ __forceinline__ float f16_bits(unsigned short u)
{
	__half_raw r;
	r.x = u;
	return __half2float(__half(r));
}

static __host__ __device__ __forceinline__ float bf16_bits(unsigned short u)
{
	uint32_t b = (uint32_t)u << 16;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

/* The f16 at p (2-byte aligned at best). */
static __host__ __device__ __forceinline__ float h2f(const uint8_t *p)
{
	return f16_bits((unsigned short)(p[0] | p[1] << 8));
}

/* The 6-bit scale and min of sub-block s of a q4_K/q5_K block's 12 bytes. */
static __host__ __device__ __forceinline__ void k_scale_min(const uint8_t *b, int s, int *sc, int *m)
{
	if (s < 4) {
		*sc = b[s] & 63;
		*m = b[s + 4] & 63;
	} else {
		*sc = (b[s + 4] & 15) | (b[s - 4] >> 6) << 4;
		*m = (b[s + 4] >> 4) | (b[s] >> 6) << 4;
	}
}

/* v[0..8) = values 8g .. 8g+7 of the row at r (type WT). */
template <int WT>
static __host__ __device__ __forceinline__ void load8(const uint8_t *r, int64_t g, float v[8])
{
	if (WT == DT_F32) {
		const float4 *p = (const float4 *)r + 2 * g;
		float4 a = p[0], b = p[1];
		v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
		v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
	} else if (WT == DT_F16 || WT == DT_BF16) {
		uint4 u = ((const uint4 *)r)[g];
		uint32_t w[4] = {u.x, u.y, u.z, u.w};
		for (int i = 0; i < 4; i++) {
			unsigned short lo = (unsigned short)(w[i] & 0xffff), hi = (unsigned short)(w[i] >> 16);
			v[2 * i] = WT == DT_F16 ? f16_bits(lo) : bf16_bits(lo);
			v[2 * i + 1] = WT == DT_F16 ? f16_bits(hi) : bf16_bits(hi);
		}
	} else if (WT == DT_Q8_0) {
		const uint8_t *b = r + g / 4 * 34;
		const int8_t *q = (const int8_t *)b + 2 + 8 * (g % 4);
		float d = h2f(b);
		for (int i = 0; i < 8; i++)
			v[i] = d * (float)q[i];
	} else if (WT == DT_Q4_0) {
		const uint8_t *b = r + g / 4 * 18;
		int j = (int)(g % 4);
		const uint8_t *q = b + 2 + 8 * (j % 2);
		float d = h2f(b);
		for (int i = 0; i < 8; i++)
			v[i] = d * (float)((j < 2 ? q[i] & 15 : q[i] >> 4) - 8);
	} else if (WT == DT_Q4_K || WT == DT_Q5_K) {
		const int bb = WT == DT_Q4_K ? 144 : 176;
		const uint8_t *b = r + g / 32 * bb;
		int j = (int)(g % 32), c = j / 8, l0 = 8 * (j % 8) % 32;
		bool high = j % 8 >= 4;
		int sc, m;
		k_scale_min(b + 4, 2 * c + high, &sc, &m);
		float d = h2f(b) * (float)sc, mn = h2f(b + 2) * (float)m;
		/* 8 bytes on an 8-byte boundary (blocks are 16-byte multiples in
		 * rows of whole blocks), read at once */
		uint2 u = *(const uint2 *)(b + (WT == DT_Q4_K ? 16 : 48) + 32 * c + l0);
		uint8_t q[8];
		for (int i = 0; i < 4; i++) {
			q[i] = (uint8_t)(u.x >> (8 * i));
			q[i + 4] = (uint8_t)(u.y >> (8 * i));
		}
		for (int i = 0; i < 8; i++) {
			int x = high ? q[i] >> 4 : q[i] & 15;
			if (WT == DT_Q5_K)
				x |= ((b[16 + l0 + i] >> (2 * c + high)) & 1) << 4;
			v[i] = d * (float)x - mn;
		}
	} else if (WT == DT_Q6_K) {
		const uint8_t *b = r + g / 32 * 210;
		int i0 = 8 * (int)(g % 32), h = i0 / 128, rr = i0 % 128 / 32, l0 = i0 % 32;
		const uint8_t *ql = b + 64 * h + 32 * (rr % 2) + l0, *qh = b + 128 + 32 * h + l0;
		float d = h2f(b + 208) * (float)(int8_t)b[192 + 8 * h + 2 * rr + l0 / 16];
		for (int i = 0; i < 8; i++) {
			int x = (rr < 2 ? ql[i] & 15 : ql[i] >> 4) | ((qh[i] >> (2 * rr)) & 3) << 4;
			v[i] = d * (float)(x - 32);
		}
	}
}

#endif
