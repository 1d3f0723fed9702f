/* kernels/cpu/quant.c: the scalar reference for every weight format:
 * dequantization, quantization, dot products against f32 and against
 * quantized activations. The SIMD kernels are tested against this file. */
#include "kernels/quant.h"

#include "kernels/kern.h"

#include <assert.h>
#include <math.h>
#include <string.h>

bool quant_supported(enum dtype t)
{
	switch (t) {
	case DT_F32: case DT_F16: case DT_BF16: case DT_Q8_0: case DT_Q4_0:
	case DT_Q4_K: case DT_Q5_K: case DT_Q6_K:
		return true;
	default:
		return false;
	}
}

bool quant_uses_qact(enum dtype t)
{
	return t == DT_Q8_0 || t == DT_Q4_0 || t == DT_Q4_K || t == DT_Q5_K || t == DT_Q6_K;
}

/* Round to nearest, ties to even, for |v| < 2^22: the same result as the
 * SIMD float-to-int conversions in the default rounding mode. */
static inline int round_even(float v)
{
	return (int)((v + 12582912.0f) - 12582912.0f);
}

static inline int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* ---- dequantization ---- */

static void deq_q8_0(const blk_q8_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < 32; j++)
			y[j] = d * (float)b[i].qs[j];
	}
}

static void deq_q4_0(const blk_q4_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < 16; j++) {
			y[j] = d * (float)((b[i].qs[j] & 15) - 8);
			y[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
		}
	}
}

static void deq_q4_k(const blk_q4_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		for (int c = 0; c < 4; c++, y += 64) {
			uint8_t sc0, m0, sc1, m1;
			quant_k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
			quant_k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
			float d0 = d * sc0, n0 = dmin * m0, d1 = d * sc1, n1 = dmin * m1;
			const uint8_t *q = b[i].qs + 32 * c;
			for (int l = 0; l < 32; l++) {
				y[l] = d0 * (float)(q[l] & 15) - n0;
				y[l + 32] = d1 * (float)(q[l] >> 4) - n1;
			}
		}
	}
}

static void deq_q5_k(const blk_q5_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		for (int c = 0; c < 4; c++, y += 64) {
			uint8_t sc0, m0, sc1, m1;
			quant_k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
			quant_k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
			float d0 = d * sc0, n0 = dmin * m0, d1 = d * sc1, n1 = dmin * m1;
			const uint8_t *q = b[i].qs + 32 * c, *qh = b[i].qh;
			for (int l = 0; l < 32; l++) {
				int lo = (q[l] & 15) | ((qh[l] >> (2 * c)) & 1) << 4;
				int hi = (q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
				y[l] = d0 * (float)lo - n0;
				y[l + 32] = d1 * (float)hi - n1;
			}
		}
	}
}

/* The four 6-bit values at position l of half h of a q6_K block. */
static inline void q6_k_values(const blk_q6_k *b, int h, int l, int q[4])
{
	const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
	q[0] = (ql[l] & 15) | ((qh[l] >> 0) & 3) << 4;
	q[1] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4;
	q[2] = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
	q[3] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
}

static void deq_q6_k(const blk_q6_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++) {
		float d = f16_to_f32(b[i].d);
		for (int h = 0; h < 2; h++, y += 128)
			for (int l = 0; l < 32; l++) {
				int q[4];
				q6_k_values(&b[i], h, l, q);
				for (int r = 0; r < 4; r++) {
					int s = 8 * h + 2 * r + l / 16;
					y[32 * r + l] = d * (float)b[i].scales[s] * (float)(q[r] - 32);
				}
			}
	}
}

void quant_dequantize_row(enum dtype t, const void *x, float *y, int64_t k)
{
	const uint16_t *h = x;
	switch (t) {
	case DT_F32: memcpy(y, x, (size_t)k * sizeof(float)); break;
	case DT_F16: for (int64_t i = 0; i < k; i++) y[i] = f16_to_f32(h[i]); break;
	case DT_BF16: for (int64_t i = 0; i < k; i++) y[i] = bf16_to_f32(h[i]); break;
	case DT_Q8_0: deq_q8_0(x, y, k / 32); break;
	case DT_Q4_0: deq_q4_0(x, y, k / 32); break;
	case DT_Q4_K: deq_q4_k(x, y, k / 256); break;
	case DT_Q5_K: deq_q5_k(x, y, k / 256); break;
	case DT_Q6_K: deq_q6_k(x, y, k / 256); break;
	default: assert(!"quant_dequantize_row: unsupported type");
	}
}

double quant_dot_f32(enum dtype t, const void *w, const float *x, int64_t k)
{
	float buf[256];
	int64_t be = dtype_block_elems(t) > 1 ? dtype_block_elems(t) : 256;
	int64_t bb = dtype_block_elems(t) > 1 ? dtype_block_bytes(t) : 256 * dtype_block_bytes(t);
	double s = 0;
	for (int64_t i = 0; i < k; i += be) {
		int64_t n = MIN(be, k - i);
		quant_dequantize_row(t, (const uint8_t *)w + i / be * bb, buf, n);
		for (int64_t j = 0; j < n; j++)
			s += (double)buf[j] * x[i + j];
	}
	return s;
}

/* ---- scale search ---- */

/* Scale for x[n] as scale * q with integer q in [nmin, nmax] (nmin < 0 <
 * nmax). Candidates map the largest-magnitude value near nmin or near nmax;
 * each is refit by least squares for its integers and the one with the
 * smallest squared error wins. 0 for an all-zero block. */
static float fit_symmetric(const float *x, int n, int nmin, int nmax)
{
	float amax = 0, v = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax)
			amax = fabsf(x[i]), v = x[i];
	if (amax == 0)
		return 0;
	float best = v / (float)nmin, best_err = INFINITY;
	for (int side = 0; side < 2; side++)
		for (int j = 0; j <= 6; j++) {
			float target = side ? (float)nmax - 0.25f * j : (float)nmin + 0.25f * j;
			float is = target / v;
			double sqx = 0, sqq = 0;
			for (int i = 0; i < n; i++) {
				int q = clampi(round_even(x[i] * is), nmin, nmax);
				sqx += (double)q * x[i];
				sqq += (double)q * q;
			}
			if (sqq <= 0)
				continue;
			float s = (float)(sqx / sqq);
			double e = 0;
			for (int i = 0; i < n; i++) {
				int q = clampi(round_even(x[i] * is), nmin, nmax);
				double r = (double)s * q - x[i];
				e += r * r;
			}
			if (e < best_err)
				best_err = e, best = s;
		}
	return best;
}

/* x[n] ~ scale * q - min with q in [0, nmax], scale >= 0, min >= 0: tries
 * grids that stretch the range [min(x, 0), max(x)] a little either way and
 * refits scale and offset by least squares, keeping the smallest error. */
static void fit_scale_min(const float *x, int n, int nmax, float *scale, float *min)
{
	float lo = 0, hi = x[0];
	for (int i = 0; i < n; i++)
		lo = MIN(lo, x[i]), hi = MAX(hi, x[i]);
	*scale = 0;
	*min = -lo;
	if (!(hi > lo))
		return;
	double best_err = INFINITY;
	for (int j = -4; j <= 8; j++) {
		float is = ((float)nmax + 0.1f * j) / (hi - lo);
		double sq = 0, sqq = 0, sx = 0, sqx = 0;
		for (int i = 0; i < n; i++) {
			int q = clampi(round_even((x[i] - lo) * is), 0, nmax);
			sq += q, sqq += (double)q * q, sx += x[i], sqx += (double)q * x[i];
		}
		double det = n * sqq - sq * sq, a, c;
		if (det > 0) {
			a = (n * sqx - sq * sx) / det;
			c = (sqq * sx - sq * sqx) / det;
		} else {
			a = sqq > 0 ? sqx / sqq : 0;
			c = 0;
		}
		if (c > 0) { /* the offset must not be positive: refit the scale alone */
			c = 0;
			a = sqq > 0 ? sqx / sqq : 0;
		}
		if (a < 0)
			continue;
		double e = 0;
		for (int i = 0; i < n; i++) {
			int q = clampi(round_even((x[i] - lo) * is), 0, nmax);
			double r = a * q + c - x[i];
			e += r * r;
		}
		if (e < best_err)
			best_err = e, *scale = (float)a, *min = (float)-c;
	}
}

/* ---- quantization ---- */

static void qz_q8_0(const float *x, blk_q8_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32) {
		float amax = 0;
		for (int j = 0; j < 32; j++)
			amax = MAX(amax, fabsf(x[j]));
		b[i].d = f32_to_f16(amax / 127.0f);
		float d = f16_to_f32(b[i].d), id = d > 0 ? 1.0f / d : 0;
		for (int j = 0; j < 32; j++)
			b[i].qs[j] = (int8_t)clampi(round_even(x[j] * id), -127, 127);
	}
}

static void qz_q4_0(const float *x, blk_q4_0 *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32) {
		b[i].d = f32_to_f16(fit_symmetric(x, 32, -8, 7));
		float d = f16_to_f32(b[i].d), id = d != 0 ? 1.0f / d : 0;
		for (int j = 0; j < 16; j++) {
			int lo = clampi(round_even(x[j] * id), -8, 7) + 8;
			int hi = clampi(round_even(x[j + 16] * id), -8, 7) + 8;
			b[i].qs[j] = (uint8_t)(lo | hi << 4);
		}
	}
}

/* Packs eight 6-bit scales and mins into the 12-byte q4_K/q5_K layout. */
static void pack_k_scales(uint8_t *b, const uint8_t *sc, const uint8_t *m)
{
	for (int j = 0; j < 4; j++) {
		b[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		b[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
		b[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
}

/* Shared by q4_K (nmax 15) and q5_K (nmax 31): per 32-value sub-block a
 * fitted scale and min, both quantized to 6 bits against the block's d and
 * dmin, then every value rounded against the stored scales. q[256] out. */
static void qz_k_scales(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
			uint8_t *scales, uint8_t *q)
{
	float sc[8], mn[8], max_sc = 0, max_mn = 0;
	for (int s = 0; s < 8; s++) {
		fit_scale_min(x + 32 * s, 32, nmax, &sc[s], &mn[s]);
		max_sc = MAX(max_sc, sc[s]);
		max_mn = MAX(max_mn, mn[s]);
	}
	*d_out = f32_to_f16(max_sc / 63.0f);
	*dmin_out = f32_to_f16(max_mn / 63.0f);
	float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
	uint8_t isc[8], imn[8];
	for (int s = 0; s < 8; s++) {
		isc[s] = (uint8_t)(d > 0 ? clampi(round_even(sc[s] / d), 0, 63) : 0);
		imn[s] = (uint8_t)(dmin > 0 ? clampi(round_even(mn[s] / dmin), 0, 63) : 0);
	}
	pack_k_scales(scales, isc, imn);
	for (int s = 0; s < 8; s++) {
		float ds = d * isc[s], dm = dmin * imn[s];
		for (int l = 0; l < 32; l++)
			q[32 * s + l] = (uint8_t)(ds > 0 ? clampi(round_even((x[32 * s + l] + dm) / ds), 0, nmax) : 0);
	}
}

static void qz_q4_k(const float *x, blk_q4_k *b, int64_t nb)
{
	uint8_t q[256];
	for (int64_t i = 0; i < nb; i++, x += 256) {
		qz_k_scales(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++)
				b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
	}
}

static void qz_q5_k(const float *x, blk_q5_k *b, int64_t nb)
{
	uint8_t q[256];
	for (int64_t i = 0; i < nb; i++, x += 256) {
		qz_k_scales(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
		memset(b[i].qh, 0, sizeof b[i].qh);
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l++) {
				int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
				b[i].qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
				b[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
			}
	}
}

static void qz_q6_k(const float *x, blk_q6_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 256) {
		float sc[16], amax = 0;
		for (int s = 0; s < 16; s++) {
			sc[s] = fit_symmetric(x + 16 * s, 16, -32, 31);
			amax = MAX(amax, fabsf(sc[s]));
		}
		b[i].d = f32_to_f16(amax / 127.0f);
		float d = f16_to_f32(b[i].d);
		uint8_t q[256];
		for (int s = 0; s < 16; s++) {
			int is = d > 0 ? clampi(round_even(sc[s] / d), -127, 127) : 0;
			b[i].scales[s] = (int8_t)is;
			float ds = d * (float)is;
			for (int l = 0; l < 16; l++)
				q[16 * s + l] = (uint8_t)(ds != 0 ? clampi(round_even(x[16 * s + l] / ds), -32, 31) + 32 : 32);
		}
		for (int h = 0; h < 2; h++) {
			uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
			const uint8_t *v = q + 128 * h;
			for (int l = 0; l < 32; l++) {
				ql[l] = (uint8_t)((v[l] & 15) | (v[l + 64] & 15) << 4);
				ql[l + 32] = (uint8_t)((v[l + 32] & 15) | (v[l + 96] & 15) << 4);
				qh[l] = (uint8_t)((v[l] >> 4) | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 |
						  (v[l + 96] >> 4) << 6);
			}
		}
	}
}

void quant_quantize_row(enum dtype t, const float *x, void *y, int64_t k)
{
	uint16_t *h = y;
	switch (t) {
	case DT_F32: memcpy(y, x, (size_t)k * sizeof(float)); break;
	case DT_F16: for (int64_t i = 0; i < k; i++) h[i] = f32_to_f16(x[i]); break;
	case DT_BF16: for (int64_t i = 0; i < k; i++) h[i] = f32_to_bf16(x[i]); break;
	case DT_Q8_0: qz_q8_0(x, y, k / 32); break;
	case DT_Q4_0: qz_q4_0(x, y, k / 32); break;
	case DT_Q4_K: qz_q4_k(x, y, k / 256); break;
	case DT_Q5_K: qz_q5_k(x, y, k / 256); break;
	case DT_Q6_K: qz_q6_k(x, y, k / 256); break;
	default: assert(!"quant_quantize_row: unsupported type");
	}
}

/* ---- quantized activations ---- */

#define ALIGN64(n) (((n) + 63) & ~(int64_t)63)

typedef struct qact_offsets {
	int64_t d, ns, bs, total;
} qact_offsets;

static qact_offsets qact_layout(enum dtype wt, int64_t k)
{
	qact_offsets o;
	o.d = ALIGN64(k);
	o.ns = o.bs = o.d + ALIGN64(k / qact_block(wt) * 4);
	o.total = o.ns + (qact_block(wt) == 32 ? ALIGN64(k / 32 * 4) : ALIGN64(k / 16 * 2));
	return o;
}

int64_t qact_row_bytes(enum dtype wt, int64_t k)
{
	return qact_layout(wt, k).total;
}

void qact_quantize_row(enum dtype wt, const float *x, void *dst, int64_t k)
{
	qact_view v = qact_view_of(wt, dst, k);
	int8_t *q = (int8_t *)dst;
	float *d = (float *)v.d;
	int32_t *ns = (int32_t *)v.ns;
	int16_t *bs = (int16_t *)v.bs;
	int bl = qact_block(wt);
	for (int64_t b = 0; b < k / bl; b++) {
		const float *xb = x + bl * b;
		float amax = 0;
		for (int j = 0; j < bl; j++)
			amax = MAX(amax, fabsf(xb[j]));
		float id = amax > 0 ? 127.0f / amax : 0;
		d[b] = amax / 127.0f;
		for (int j = 0; j < bl; j++)
			q[bl * b + j] = (int8_t)clampi(round_even(xb[j] * id), -127, 127);
	}
	for (int64_t g = 0; g < k / 16; g++) {
		int s = 0;
		for (int j = 0; j < 16; j++)
			s += q[16 * g + j];
		if (bl == 32)
			ns[g / 2] = (g % 2 ? ns[g / 2] : 0) - s;
		else
			bs[g] = (int16_t)s;
	}
}

/* The 256 integer values of a k-quant block (q4_K/q5_K: 0..31, q6_K: -32..31). */
static void k_ints(enum dtype t, const void *blk, int qv[256])
{
	if (t == DT_Q6_K) {
		for (int h = 0; h < 2; h++)
			for (int l = 0; l < 32; l++) {
				int q[4];
				q6_k_values(blk, h, l, q);
				for (int r = 0; r < 4; r++)
					qv[128 * h + 32 * r + l] = q[r] - 32;
			}
		return;
	}
	const uint8_t *qs = t == DT_Q4_K ? ((const blk_q4_k *)blk)->qs : ((const blk_q5_k *)blk)->qs;
	const uint8_t *qh = t == DT_Q5_K ? ((const blk_q5_k *)blk)->qh : NULL;
	for (int c = 0; c < 4; c++)
		for (int l = 0; l < 32; l++) {
			qv[64 * c + l] = qs[32 * c + l] & 15;
			qv[64 * c + 32 + l] = qs[32 * c + l] >> 4;
			if (qh) {
				qv[64 * c + l] |= ((qh[l] >> (2 * c)) & 1) << 4;
				qv[64 * c + 32 + l] |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
			}
		}
}

float quant_dot_qact(enum dtype t, const void *w, const void *a, int64_t k)
{
	qact_view v = qact_view_of(t, a, k);
	float acc = 0;
	if (t == DT_Q8_0 || t == DT_Q4_0) {
		for (int64_t i = 0; i < k / 32; i++) {
			const int8_t *x = v.q + 32 * i;
			int s = 0;
			float dw;
			if (t == DT_Q8_0) {
				const blk_q8_0 *b = (const blk_q8_0 *)w + i;
				for (int j = 0; j < 32; j++)
					s += b->qs[j] * x[j];
				dw = f16_to_f32(b->d);
			} else {
				const blk_q4_0 *b = (const blk_q4_0 *)w + i;
				for (int j = 0; j < 16; j++)
					s += ((b->qs[j] & 15) - 8) * x[j] + ((b->qs[j] >> 4) - 8) * x[16 + j];
				dw = f16_to_f32(b->d);
			}
			acc += dw * v.d[i] * (float)s;
		}
		return acc;
	}
	assert(t == DT_Q4_K || t == DT_Q5_K || t == DT_Q6_K);
	int64_t bb = dtype_block_bytes(t);
	for (int64_t i = 0; i < k / 256; i++) {
		const uint8_t *blk = (const uint8_t *)w + i * bb;
		const int8_t *x = v.q + 256 * i;
		int qv[256];
		k_ints(t, blk, qv);
		int64_t isum = 0, msum = 0;
		if (t == DT_Q6_K) {
			const blk_q6_k *b = (const blk_q6_k *)blk;
			for (int s = 0; s < 16; s++) {
				int sub = 0;
				for (int l = 0; l < 16; l++)
					sub += qv[16 * s + l] * x[16 * s + l];
				isum += (int64_t)b->scales[s] * sub;
			}
			acc += f16_to_f32(b->d) * v.d[i] * (float)isum;
			continue;
		}
		const blk_q4_k *b = (const blk_q4_k *)blk; /* q5_K starts the same */
		for (int s = 0; s < 8; s++) {
			uint8_t sc, m;
			quant_k_scale_min(b->scales, s, &sc, &m);
			int sub = 0;
			for (int l = 0; l < 32; l++)
				sub += qv[32 * s + l] * x[32 * s + l];
			isum += (int64_t)sc * sub;
			msum += (int64_t)m * (v.bs[16 * i + 2 * s] + v.bs[16 * i + 2 * s + 1]);
		}
		acc += f16_to_f32(b->d) * v.d[i] * (float)isum - f16_to_f32(b->dmin) * v.d[i] * (float)msum;
	}
	return acc;
}
