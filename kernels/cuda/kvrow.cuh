/* kernels/cuda/kvrow.cuh: one KV row's values as the CUDA kernels read and
 * write them (kernels/kvq.h formats). Host and device code, so
 * tests/cuda/test_cuda_deq.cu can hold it to kv_store_row / kv_load_head on a
 * machine without a GPU. */
#ifndef PAGECHAT_CUDA_KVROW_CUH
#define PAGECHAT_CUDA_KVROW_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kvq_fp8.h"

/* enum kv_type's values (kernels/kvq.h), for code that cannot include it */
#define KVR_F32 0
#define KVR_F16 1
#define KVR_Q8 2
#define KVR_FP8 3

/* Value d of head h of a row of type t with n = n_heads * hd values before
 * the 8-bit types' per-head f16 scales. */
static __host__ __device__ __forceinline__ float kv_at(const uint8_t *row, int t, int n, int hd, int h, int d)
{
	int i = h * hd + d;
	switch (t) {
	case KVR_F32:
		return ((const float *)row)[i];
	case KVR_F16:
		return __half2float(((const __half *)row)[i]);
	default: {
		__half_raw sr;
		sr.x = (unsigned short)(row[n + 2 * h] | row[n + 2 * h + 1] << 8);
		float s = __half2float(__half(sr));
		if (t == KVR_Q8)
			return s * (float)(int8_t)row[i];
		__half_raw hr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)row[i], __NV_E4M3);
		return s * __half2float(__half(hr));
	}
	}
}

/* x as f16 bits the way f32_to_f16 (kernels/fp16.c) writes them: a NaN keeps
 * its sign and becomes the quiet 0x7e00 (CUDA's conversion gives 0x7fff), so
 * that f16 K/V rows hold the same bytes on both backends. */
static __host__ __device__ __forceinline__ unsigned short kv_f16(float x)
{
	if (x != x)
		return signbit(x) ? 0xfe00 : 0x7e00;
	return __half_as_ushort(__float2half_rn(x));
}

/* An 8-bit head's plain f16 scale from its largest |x| (type q8 or fp8;
 * fp8 then fits it, kv_scale_fit). */
static __host__ __device__ __forceinline__ __half kv_scale(float amax, int t)
{
	return __float2half_rn(t == KVR_Q8 ? amax / 127.0f : kvq_fp8_candidate(amax, 0));
}

/* Candidate j's f16 scale for an fp8 head and its squared error (kvq_fp8.h). */
static __host__ __device__ __forceinline__ float kv_fp8_try(const float *xh, int hd, float amax, int j,
							    __half *s16)
{
	*s16 = __float2half_rn(kvq_fp8_candidate(amax, j));
	return kvq_fp8_sse(xh, hd, __half2float(*s16));
}

/* An 8-bit head's f16 scale as kv_store_row picks it: q8 and an all-zero head
 * plain; fp8 the first of the 32 candidates with the least squared error
 * (one after another here; kv_write_k tries them a warp lane each). */
static __host__ __device__ __forceinline__ __half kv_scale_fit(const float *xh, int hd, float amax, int t)
{
	__half best = kv_scale(amax, t), c;
	if (t == KVR_Q8 || amax == 0)
		return best;
	float best_e = kv_fp8_try(xh, hd, amax, 0, &best);
	for (int j = 1; j < KVQ_FP8_SCALES; j++) {
		float e = kv_fp8_try(xh, hd, amax, j, &c);
		if (e < best_e)
			best_e = e, best = c;
	}
	return best;
}

/* How kv_write_k's warp ranks the fp8 candidates' errors: lane j's error as
 * kv_fp8_key gives it, the least first, then the lowest j. NaN (a NaN or an
 * infinity in the head, or a candidate scale that overflowed f16) counts as
 * +inf: compared as NaN it is neither less nor equal, and the lanes of a
 * butterfly would keep different candidates. The warp's pick is then
 * kv_scale_fit's (the first least error; 0 when every error is NaN). */
static __host__ __device__ __forceinline__ float kv_fp8_key(float e)
{
	return e != e ? INFINITY : e;
}

static __host__ __device__ __forceinline__ bool kv_fp8_before(float e2, int j2, float e, int j)
{
	return e2 < e || (e2 == e && j2 < j);
}

/* The code of x in an 8-bit row whose head scale is s (inv = 1/s, 0 for s = 0). */
static __host__ __device__ __forceinline__ uint8_t kv_code(float x, float inv, int t)
{
	float v = x * inv;
	if (t == KVR_Q8)
		return (uint8_t)(int8_t)rintf(fminf(fmaxf(v, -127.0f), 127.0f));
	return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

#endif
