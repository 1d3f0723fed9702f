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
#include "kernels/cuda/mvq.cuh"

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

/* ---- decode attention's pieces (attn.cu attn_dec_k) ----
 * A head's row of K or V is read in 16-byte chunks (one 128-bit load each):
 * 4 f32, 8 f16 or 16 8-bit values. L lanes share a key (a power of two: the
 * larger of the two types' chunk counts rounded up, at most 32; 32 / L keys
 * per warp at a time); lane li takes the row's values li * kv .. li * kv +
 * kv - 1 (kv: one chunk, or two for f32 rows of more than 128 values), and
 * lanes past the row's end none. */

/* attn_dec_k's shape: warps a block, query heads a block (of one GQA
 * group), keys in flight per lane group (test_cuda_deq emulates it). */
#define AD_WARPS 4
#define AD_GM 4
#define AD_U 2

typedef struct att_layout {
	int L;                   /* lanes per key */
	int kk, kv;              /* K and V values per lane */
	int nk, nv;              /* lanes that read K, V */
} att_layout;

/* Values per 16-byte chunk of type t. */
static __host__ __device__ __forceinline__ int kv_chunk_vals(int t)
{
	return t == KVR_F32 ? 4 : t == KVR_F16 ? 8 : 16;
}

/* The layout for heads of hd values; false when a row does not split into
 * whole chunks among the lanes. */
static __host__ __device__ __forceinline__ bool att_layout_of(int hd, int kt, int vt, att_layout *o)
{
	int ek = kv_chunk_vals(kt), ev = kv_chunk_vals(vt);
	if (hd <= 0 || hd % ek || hd % ev)
		return false;
	int ck = hd / ek, cv = hd / ev, c = ck > cv ? ck : cv, pk, pv;
	o->L = 1;
	while (o->L < c && o->L < 32)
		o->L *= 2;
	pk = (ck + o->L - 1) / o->L;
	pv = (cv + o->L - 1) / o->L;
	if (ck % pk || cv % pv || pk * ek > 16 || pv * ev > 16)
		return false;
	o->kk = pk * ek;
	o->kv = pv * ev;
	o->nk = ck / pk;
	o->nv = cv / pv;
	return true;
}

/* A float from its bits. */
static __host__ __device__ __forceinline__ float f32_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;
	memcpy(&f, &u, 4);
	return f;
#endif
}

/* The row's f16 scale of head h (8-bit types). */
static __host__ __device__ __forceinline__ float kv_head_scale(const uint8_t *row, int n, int h)
{
	return f16_bits((unsigned short)ld_u16(row + n + 2 * h));
}

/* Values d0 .. d0 + cnt - 1 (cnt: 0 or the layout's per lane, at most VPL)
 * of head h of a row of type t (n = n_heads * hd values before the 8-bit
 * types' per-head f16 scales) into v[0 .. cnt), the rest of v zero; 128-bit
 * loads, or for 8-bit rows not on 16 bytes (a16 false: rows of n + 2 n_heads
 * bytes) realigned 32-bit ones. */
template <int VPL>
static __host__ __device__ __forceinline__ void kv_lane(const uint8_t *row, int t, int n, int hd, int h, int d0,
							int cnt, bool a16, float v[VPL])
{
	for (int i = 0; i < VPL; i++)
		v[i] = 0;
	if (t == KVR_F32) {
		const uint8_t *p = row + (size_t)(h * hd + d0) * 4;
		for (int c = 0; c < VPL / 4; c++) {
			if (4 * c >= cnt)
				break;
			u32x4 u = ld16(p + 16 * c);
			uint32_t w[4] = {u.x, u.y, u.z, u.w};
			for (int i = 0; i < 4; i++)
				v[4 * c + i] = f32_bits(w[i]);
		}
		return;
	}
	if (t == KVR_F16) {
		const uint8_t *p = row + (size_t)(h * hd + d0) * 2;
		for (int c = 0; c < VPL / 8; c++) {
			if (8 * c >= cnt)
				break;
			u32x4 u = ld16(p + 16 * c);
			uint32_t w[4] = {u.x, u.y, u.z, u.w};
			for (int i = 0; i < 8; i++)
				v[8 * c + i] = f16_bits((unsigned short)(w[i / 2] >> 16 * (i % 2)));
		}
		return;
	}
	if (VPL < 16 || cnt == 0)
		return;
	const uint8_t *p = row + h * hd + d0;
	uint32_t w[4];
	if (a16) {
		u32x4 u = ld16(p);
		w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
	} else {
		ld_a2<4>(p, w);
	}
	float s = kv_head_scale(row, n, h);
	for (int i = 0; i < 16 && i < VPL; i++) {
		uint8_t b = (uint8_t)(w[i / 4] >> 8 * (i % 4));
		if (t == KVR_Q8) {
			v[i] = s * (float)(int8_t)b;
		} else {
			__half_raw hr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
			v[i] = s * __half2float(__half(hr));
		}
	}
}

/* One lane's running softmax state for one query head, scores in the log2
 * domain (the query is scaled by log2(e)): the largest score m, the sum l of
 * 2^(score - m) and the weighted V sum (the lane's dims) in acc. */
typedef struct att_run {
	float m, l;
} att_run;

/* Folds score s (-inf: none) into r; returns the factor the lane's acc is
 * multiplied by and sets *p to the weight of s's V row. */
static __host__ __device__ __forceinline__ float att_fold(att_run *r, float s, float *p)
{
	float m = fmaxf(r->m, s);
	if (m == -INFINITY) { /* nothing yet */
		*p = 0;
		return 1.0f;
	}
	float corr = exp2f(r->m - m);
	*p = exp2f(s - m);
	r->l = r->l * corr + *p;
	r->m = m;
	return corr;
}

/* Merges state b into a: the factors a's and b's sums are scaled by. */
static __host__ __device__ __forceinline__ void att_join(att_run *a, att_run b, float *fa, float *fb)
{
	float m = fmaxf(a->m, b.m);
	*fa = a->m == -INFINITY ? 0.0f : exp2f(a->m - m);
	*fb = b.m == -INFINITY ? 0.0f : exp2f(b.m - m);
	a->l = a->l * *fa + b.l * *fb;
	a->m = m;
}

#endif
