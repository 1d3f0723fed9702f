/* kernels/cpu/kv_shift.c: a context shift's move of K/V cache rows
 * (kern_ops.kv_shift). Rotations compose: a K row stored at position p is
 * rope(k, p), and turning each of its pairs by delta * inv_freq more gives
 * rope(k, p + delta), up to rounding. The row is decoded from its stored
 * type (f16; q8 and fp8 with their per-head scales), turned in f32 and
 * encoded again, so 8-bit rows pick new scales; rows that do not move are
 * copied byte for byte. One thread: a shift moves a context's rows once. */
#include "kernels/cpu/simd.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define MAX_ROW (KERN_MAX_HEAD_DIM * 64)  /* K values of one row, at most (64 KV heads) */

/* Turns x[n_heads][head_dim] by delta positions (the pairs rope uses). */
static void turn(float *x, int n_heads, int head_dim, int n_rot, const float *inv_freq, bool neox,
		 int32_t delta)
{
	int half = n_rot / 2;
	for (int f = 0; f < half; f++) {
		float theta = (float)delta * inv_freq[f];
		float c = cosf(theta), s = sinf(theta);
		for (int h = 0; h < n_heads; h++) {
			float *v = x + (size_t)h * head_dim;
			int a = neox ? f : 2 * f, b = neox ? f + half : 2 * f + 1;
			float x0 = v[a], x1 = v[b];
			v[a] = x0 * c - x1 * s;
			v[b] = x0 * s + x1 * c;
		}
	}
}

void cpu_kv_shift(void *kc, void *vc, const int64_t *src, const int64_t *dst, const int32_t *delta,
		  int64_t n, const kern_attn *fmt, int n_rot, const float *inv_freq, bool neox)
{
	int nh = fmt->n_kv_heads, hd = fmt->head_dim;
	static _Thread_local float row[MAX_ROW];
	assert((size_t)nh * (size_t)hd <= MAX_ROW);
	for (int64_t i = 0; i < n; i++) {
		uint8_t *kd = (uint8_t *)kc + (size_t)dst[i] * fmt->k_row;
		const uint8_t *ks = (const uint8_t *)kc + (size_t)src[i] * fmt->k_row;
		memcpy((uint8_t *)vc + (size_t)dst[i] * fmt->v_row, (const uint8_t *)vc + (size_t)src[i] * fmt->v_row,
		       fmt->v_row);
		if (delta[i] == 0) {
			memcpy(kd, ks, fmt->k_row);
			continue;
		}
		for (int h = 0; h < nh; h++) {
			if (fmt->k_type == KV_F32)
				memcpy(row + (size_t)h * hd, (const float *)ks + (size_t)h * hd, (size_t)hd * sizeof(float));
			else
				kv_load_head(row + (size_t)h * hd, ks, fmt->k_type, nh, hd, h);
		}
		turn(row, nh, hd, n_rot, inv_freq, neox, delta[i]);
		kv_store_row(kd, row, fmt->k_type, nh, hd);
	}
}
