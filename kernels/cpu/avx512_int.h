/* kernels/cpu/avx512_int.h: what the files of the AVX-512 kernel set share;
 * private to kernels/cpu/avx512*.c.
 *
 * The AVX-512 set (simd.h) is two files: avx512.c (its entry points, the
 * matmuls and the element-wise kernels) and avx512_attn.c (attention).
 * Here: their target and inlining attributes, the helpers both use (always
 * inlined), and attention's entry points. */
#ifndef PAGECHAT_CPU_AVX512_INT_H
#define PAGECHAT_CPU_AVX512_INT_H

#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TARGET
#define NOINL static __attribute__((noinline)) TARGET

/* ---- helpers ---- */

INL float hsum(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

/* e^x for 16 lanes: 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p of degree 6
 * (relative error about 2e-7). Below -104 the result is 0. */
INL __m512 exp16(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
	x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
	__m512 p = _mm512_set1_ps(1.0f / 720);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

INL __mmask16 mask_n(int64_t n)
{
	return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/* avx512_attn.c: cpu_kernels.attend and its chunked decoding. */
void avx512_attend(float *out, int64_t out_stride, const float *q, int64_t q_stride, int nq, const kern_attn *a,
		   const int32_t *table, const int32_t *n_ctx, int kv_head);
int avx512_attend_chunk_keys(const kern_attn *a);
void avx512_attend_chunk(float *res, const float *q, const kern_attn *a, const int32_t *table, int32_t n_ctx,
			 int c);
void avx512_attend_fold(float *out, const float *res, int n_chunks, const kern_attn *a);

#endif
#endif
