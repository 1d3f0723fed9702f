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
	case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_Q4_1: case DT_Q5_0:
	case DT_Q5_1: case DT_IQ4_NL: case DT_Q2_K: case DT_Q3_K: case DT_IQ4_XS:
		return true;
	default:
		return false;
	}
}

bool quant_uses_qact(enum dtype t)
{
	return quant_supported(t) && dtype_block_elems(t) > 1;
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

/* The 5-bit value j (0..31) of a q5_0/q5_1 block: its nibble (q4_0's
 * place) and bit j of the 32-bit qh. */
static inline int q5_value(const uint8_t *qs, const uint8_t *qh, int j)
{
	uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
	int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
	return nib | (int)((h >> j) & 1) << 4;
}

/* The nibble of value j (0..31) in a q4_0-style 16-byte group. */
static inline int nib32(const uint8_t *qs, int j)
{
	return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

static void deq_q4_1(const blk_q4_1 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
		for (int j = 0; j < 32; j++)
			y[j] = (float)nib32(b[i].qs, j) * d + m;
	}
}

static void deq_q5_0(const blk_q5_0 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < 32; j++)
			y[j] = (float)(q5_value(b[i].qs, b[i].qh, j) - 16) * d;
	}
}

static void deq_q5_1(const blk_q5_1 *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
		for (int j = 0; j < 32; j++)
			y[j] = (float)q5_value(b[i].qs, b[i].qh, j) * d + m;
	}
}

static void deq_iq4_nl(const blk_iq4_nl *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 32) {
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < 32; j++)
			y[j] = d * (float)quant_iq4_values[nib32(b[i].qs, j)];
	}
}

/* The 2-bit value i (0..255) of a q2_K or q3_K block's qs. */
static inline int k2_low(const uint8_t *qs, int i)
{
	int h = i / 128, j = i % 128 / 32, l = i % 32;
	return (qs[32 * h + l] >> (2 * j)) & 3;
}

static void deq_q2_k(const blk_q2_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 256) {
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		for (int v = 0; v < 256; v++) {
			int s = v / 16;  /* 8h + 2j + l / 16 for v = 128h + 32j + l */
			float dl = d * (float)(b[i].scales[s] & 15), ml = dmin * (float)(b[i].scales[s] >> 4);
			y[v] = dl * (float)k2_low(b[i].qs, v) - ml;
		}
	}
}

/* The value i (0..255) of a q3_K block, -4..3. */
static inline int q3_k_value(const blk_q3_k *b, int i)
{
	int h = i / 128, j = i % 128 / 32, l = i % 32;
	return k2_low(b->qs, i) - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
}

static void deq_q3_k(const blk_q3_k *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, y += 256) {
		float d = f16_to_f32(b[i].d);
		for (int v = 0; v < 256; v++) {
			float dl = d * (float)(quant_q3_k_scale(b[i].scales, v / 16) - 32);
			y[v] = dl * (float)q3_k_value(&b[i], v);
		}
	}
}

static void deq_iq4_xs(const blk_iq4_xs *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++)
		for (int s = 0; s < 8; s++, y += 32) {
			float dl = f16_to_f32(b[i].d) * (float)(quant_iq4_xs_scale(&b[i], s) - 32);
			for (int j = 0; j < 32; j++)
				y[j] = dl * (float)quant_iq4_values[nib32(b[i].qs + 16 * s, j)];
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
	case DT_Q4_1: deq_q4_1(x, y, k / 32); break;
	case DT_Q5_0: deq_q5_0(x, y, k / 32); break;
	case DT_Q5_1: deq_q5_1(x, y, k / 32); break;
	case DT_IQ4_NL: deq_iq4_nl(x, y, k / 32); break;
	case DT_Q2_K: deq_q2_k(x, y, k / 256); break;
	case DT_Q3_K: deq_q3_k(x, y, k / 256); break;
	case DT_IQ4_XS: deq_iq4_xs(x, y, k / 256); break;
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

/* x[n] ~ scale * q + off with q in [0, nmax] and no sign constraint on the
 * offset: fit_scale_min's grids over [min(x), max(x)], refit by least
 * squares, the smallest squared error kept. */
static void fit_affine(const float *x, int n, int nmax, float *scale, float *off)
{
	float lo = x[0], hi = x[0];
	for (int i = 0; i < n; i++)
		lo = MIN(lo, x[i]), hi = MAX(hi, x[i]);
	*scale = 0;
	*off = lo;
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
		double det = n * sqq - sq * sq;
		if (det <= 0)
			continue;
		double a = (n * sqx - sq * sx) / det, c = (sqq * sx - sq * sqx) / det, e = 0;
		if (a < 0)
			continue;
		for (int i = 0; i < n; i++) {
			int q = clampi(round_even((x[i] - lo) * is), 0, nmax);
			double r = a * q + c - x[i];
			e += r * r;
		}
		if (e < best_err)
			best_err = e, *scale = (float)a, *off = (float)c;
	}
}

/* Writes 32 values q[j] as q4_0-style nibbles (low: 0..15, high: 16..31). */
static void put_nibbles(uint8_t *qs, const int *q)
{
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

/* q4_1 (nmax 15) and q5_1 (nmax 31): per block a fitted scale and offset,
 * stored as halves, then every value rounded against the stored pair. */
static void qz_affine32(const float *x, uint16_t *d_out, uint16_t *m_out, int nmax, int *q)
{
	float sc, off;
	fit_affine(x, 32, nmax, &sc, &off);
	*d_out = f32_to_f16(sc);
	*m_out = f32_to_f16(off);
	float d = f16_to_f32(*d_out), m = f16_to_f32(*m_out), id = d > 0 ? 1.0f / d : 0;
	for (int j = 0; j < 32; j++)
		q[j] = clampi(round_even((x[j] - m) * id), 0, nmax);
}

static void put_q5_high(uint8_t *qh, const int *q)
{
	uint32_t h = 0;
	for (int j = 0; j < 32; j++)
		h |= (uint32_t)(q[j] >> 4) << j;
	for (int i = 0; i < 4; i++)
		qh[i] = (uint8_t)(h >> (8 * i));
}

static void qz_q4_1(const float *x, blk_q4_1 *b, int64_t nb)
{
	int q[32];
	for (int64_t i = 0; i < nb; i++, x += 32) {
		qz_affine32(x, &b[i].d, &b[i].m, 15, q);
		put_nibbles(b[i].qs, q);
	}
}

static void qz_q5_1(const float *x, blk_q5_1 *b, int64_t nb)
{
	int q[32];
	for (int64_t i = 0; i < nb; i++, x += 32) {
		qz_affine32(x, &b[i].d, &b[i].m, 31, q);
		put_nibbles(b[i].qs, q);
		put_q5_high(b[i].qh, q);
	}
}

static void qz_q5_0(const float *x, blk_q5_0 *b, int64_t nb)
{
	int q[32];
	for (int64_t i = 0; i < nb; i++, x += 32) {
		b[i].d = f32_to_f16(fit_symmetric(x, 32, -16, 15));
		float d = f16_to_f32(b[i].d), id = d != 0 ? 1.0f / d : 0;
		for (int j = 0; j < 32; j++)
			q[j] = clampi(round_even(x[j] * id), -16, 15) + 16;
		put_nibbles(b[i].qs, q);
		put_q5_high(b[i].qh, q);
	}
}

/* The index of the table value nearest v (the table is sorted; a tie goes
 * to the lower one): a binary search over the midpoints. */
static int iq4_nearest(float v)
{
	int lo = 0, hi = 15;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (v > 0.5f * (float)(quant_iq4_values[mid] + quant_iq4_values[mid + 1]))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The scale s for x[n] ~ s * T[q]: candidates that map the largest-magnitude
 * value onto either end of the table, nudged, each refit by least squares;
 * the smallest squared error wins. 0 for an all-zero block. */
static float fit_iq4(const float *x, int n)
{
	float amax = 0, v = 0;
	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax)
			amax = fabsf(x[i]), v = x[i];
	if (amax == 0)
		return 0;
	float best = v / -127.0f;
	double best_err = INFINITY;
	for (int side = 0; side < 2; side++)
		for (int j = -6; j <= 6; j++) {
			float s = v / ((side ? 113.0f : -127.0f) + 2.0f * j);
			double stx = 0, stt = 0, e = 0;
			for (int i = 0; i < n; i++) {
				float t = quant_iq4_values[iq4_nearest(x[i] / s)];
				stx += (double)t * x[i];
				stt += (double)t * t;
			}
			float r = stt > 0 ? (float)(stx / stt) : s;
			for (int i = 0; i < n; i++) {
				double dv = (double)r * quant_iq4_values[iq4_nearest(x[i] / r)] - x[i];
				e += dv * dv;
			}
			if (e < best_err)
				best_err = e, best = r;
		}
	return best;
}

static void qz_iq4_nl(const float *x, blk_iq4_nl *b, int64_t nb)
{
	int q[32];
	for (int64_t i = 0; i < nb; i++, x += 32) {
		b[i].d = f32_to_f16(fit_iq4(x, 32));
		float d = f16_to_f32(b[i].d);
		for (int j = 0; j < 32; j++)
			q[j] = d != 0 ? iq4_nearest(x[j] / d) : 8;
		put_nibbles(b[i].qs, q);
	}
}

/* A super-block scale d for signed integer sub-block scales in [-32, 31]
 * (q3_K, iq4_xs): the largest-magnitude sub-block scale maps to -32. *l[n]
 * gets each sub-block's integer. Returns d as a half. */
static uint16_t fit_signed6(const float *sc, int n, int *l)
{
	float amax = 0, v = 0;
	for (int s = 0; s < n; s++)
		if (fabsf(sc[s]) > amax)
			amax = fabsf(sc[s]), v = sc[s];
	uint16_t h = f32_to_f16(v / -32.0f);
	float d = f16_to_f32(h);
	for (int s = 0; s < n; s++)
		l[s] = d != 0 ? clampi(round_even(sc[s] / d), -32, 31) : 0;
	return h;
}

static void qz_iq4_xs(const float *x, blk_iq4_xs *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 256) {
		float sc[8];
		int l[8], q[32];
		for (int s = 0; s < 8; s++)
			sc[s] = fit_iq4(x + 32 * s, 32);
		b[i].d = fit_signed6(sc, 8, l);
		float d = f16_to_f32(b[i].d);
		b[i].scales_h = 0;
		memset(b[i].scales_l, 0, sizeof b[i].scales_l);
		for (int s = 0; s < 8; s++) {
			int ls = l[s] + 32;
			b[i].scales_l[s / 2] |= (uint8_t)((ls & 15) << (4 * (s % 2)));
			b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * s));
			float ds = d * (float)l[s];
			for (int j = 0; j < 32; j++)
				q[j] = ds != 0 ? iq4_nearest(x[32 * s + j] / ds) : 8;
			put_nibbles(b[i].qs + 16 * s, q);
		}
	}
}

/* Stores 256 values u[v] (0..3) in the q2_K/q3_K qs layout. */
static void put_k2_low(uint8_t *qs, const int *u)
{
	memset(qs, 0, 64);
	for (int v = 0; v < 256; v++) {
		int h = v / 128, j = v % 128 / 32, l = v % 32;
		qs[32 * h + l] |= (uint8_t)((u[v] & 3) << (2 * j));
	}
}

static void qz_q2_k(const float *x, blk_q2_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 256) {
		float sc[16], mn[16], max_sc = 0, max_mn = 0;
		for (int s = 0; s < 16; s++) {
			fit_scale_min(x + 16 * s, 16, 3, &sc[s], &mn[s]);
			max_sc = MAX(max_sc, sc[s]);
			max_mn = MAX(max_mn, mn[s]);
		}
		b[i].d = f32_to_f16(max_sc / 15.0f);
		b[i].dmin = f32_to_f16(max_mn / 15.0f);
		float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
		int u[256];
		for (int s = 0; s < 16; s++) {
			int is = d > 0 ? clampi(round_even(sc[s] / d), 0, 15) : 0;
			int im = dmin > 0 ? clampi(round_even(mn[s] / dmin), 0, 15) : 0;
			b[i].scales[s] = (uint8_t)(is | im << 4);
			float ds = d * (float)is, dm = dmin * (float)im;
			for (int l = 0; l < 16; l++)
				u[16 * s + l] = ds > 0 ? clampi(round_even((x[16 * s + l] + dm) / ds), 0, 3) : 0;
		}
		put_k2_low(b[i].qs, u);
	}
}

static void qz_q3_k(const float *x, blk_q3_k *b, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 256) {
		float sc[16];
		int l[16], u[256];
		for (int s = 0; s < 16; s++)
			sc[s] = fit_symmetric(x + 16 * s, 16, -4, 3);
		b[i].d = fit_signed6(sc, 16, l);
		float d = f16_to_f32(b[i].d);
		memset(b[i].scales, 0, sizeof b[i].scales);
		memset(b[i].hmask, 0, sizeof b[i].hmask);
		for (int s = 0; s < 16; s++) {
			int ls = l[s] + 32;
			b[i].scales[s % 8] |= (uint8_t)((ls & 15) << (s < 8 ? 0 : 4));
			b[i].scales[8 + s % 4] |= (uint8_t)((ls >> 4) << (2 * (s / 4)));
			float ds = d * (float)l[s];
			for (int j = 0; j < 16; j++)
				u[16 * s + j] = (ds != 0 ? clampi(round_even(x[16 * s + j] / ds), -4, 3) : 0) + 4;
		}
		for (int v = 0; v < 256; v++) {
			int h = v / 128, j = v % 128 / 32;
			b[i].hmask[v % 32] |= (uint8_t)((u[v] >> 2) << (4 * h + j));
		}
		put_k2_low(b[i].qs, u);
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
	case DT_Q4_1: qz_q4_1(x, y, k / 32); break;
	case DT_Q5_0: qz_q5_0(x, y, k / 32); break;
	case DT_Q5_1: qz_q5_1(x, y, k / 32); break;
	case DT_IQ4_NL: qz_iq4_nl(x, y, k / 32); break;
	case DT_Q2_K: qz_q2_k(x, y, k / 256); break;
	case DT_Q3_K: qz_q3_k(x, y, k / 256); break;
	case DT_IQ4_XS: qz_iq4_xs(x, y, k / 256); break;
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

/* The 32 integer values of a q4_1/q5_0/q5_1/iq4_nl block as the dot takes
 * them (q5_0 less 16, iq4_nl through the table); *d, *m its scale and offset. */
static void ints32(enum dtype t, const uint8_t *blk, int q[32], float *d, float *m)
{
	*m = 0;
	if (t == DT_Q4_1) {
		const blk_q4_1 *b = (const blk_q4_1 *)blk;
		for (int j = 0; j < 32; j++)
			q[j] = nib32(b->qs, j);
		*d = f16_to_f32(b->d), *m = f16_to_f32(b->m);
	} else if (t == DT_Q5_0) {
		const blk_q5_0 *b = (const blk_q5_0 *)blk;
		for (int j = 0; j < 32; j++)
			q[j] = q5_value(b->qs, b->qh, j) - 16;
		*d = f16_to_f32(b->d);
	} else if (t == DT_Q5_1) {
		const blk_q5_1 *b = (const blk_q5_1 *)blk;
		for (int j = 0; j < 32; j++)
			q[j] = q5_value(b->qs, b->qh, j);
		*d = f16_to_f32(b->d), *m = f16_to_f32(b->m);
	} else {
		const blk_iq4_nl *b = (const blk_iq4_nl *)blk;
		for (int j = 0; j < 32; j++)
			q[j] = quant_iq4_values[nib32(b->qs, j)];
		*d = f16_to_f32(b->d);
	}
}

/* q4_1, q5_0, q5_1, iq4_nl: per block the exact sum of q x, then the chain
 * in fused multiply-adds (q4_1/q5_1 the offset times the block's dx sum(x)
 * first). */
static float dot_qact32(enum dtype t, const void *w, qact_view v, int64_t k)
{
	int64_t bb = dtype_block_bytes(t);
	float acc = 0;
	for (int64_t i = 0; i < k / 32; i++) {
		int q[32], s = 0;
		float d, m;
		ints32(t, (const uint8_t *)w + i * bb, q, &d, &m);
		for (int j = 0; j < 32; j++)
			s += q[j] * v.q[32 * i + j];
		if (t == DT_Q4_1 || t == DT_Q5_1) /* the offset first, its product dx sum(x) per token */
			acc = fmaf(m, v.d[i] * (float)-v.ns[i], acc);
		acc = fmaf(d * v.d[i], (float)s, acc);
	}
	return acc;
}

/* q2_K, q3_K, iq4_xs: per super-block the sub-blocks' exact sums times
 * their integer scales (q2_K: minus its mins times the 16-value sums), then
 * one f32 step. */
static float dot_qact_k2(enum dtype t, const void *w, qact_view v, int64_t k)
{
	int64_t bb = dtype_block_bytes(t);
	float acc = 0;
	for (int64_t i = 0; i < k / 256; i++) {
		const uint8_t *blk = (const uint8_t *)w + i * bb;
		const int8_t *x = v.q + 256 * i;
		int64_t isum = 0, msum = 0;
		if (t == DT_IQ4_XS) {
			const blk_iq4_xs *b = (const blk_iq4_xs *)blk;
			for (int s = 0; s < 8; s++) {
				int sub = 0;
				for (int j = 0; j < 32; j++)
					sub += quant_iq4_values[nib32(b->qs + 16 * s, j)] * x[32 * s + j];
				isum += (int64_t)(quant_iq4_xs_scale(b, s) - 32) * sub;
			}
			acc += f16_to_f32(b->d) * v.d[i] * (float)isum;
		} else if (t == DT_Q3_K) {
			const blk_q3_k *b = (const blk_q3_k *)blk;
			for (int s = 0; s < 16; s++) {
				int sub = 0;
				for (int l = 0; l < 16; l++)
					sub += q3_k_value(b, 16 * s + l) * x[16 * s + l];
				isum += (int64_t)(quant_q3_k_scale(b->scales, s) - 32) * sub;
			}
			acc += f16_to_f32(b->d) * v.d[i] * (float)isum;
		} else {
			const blk_q2_k *b = (const blk_q2_k *)blk;
			for (int s = 0; s < 16; s++) {
				int sub = 0;
				for (int l = 0; l < 16; l++)
					sub += k2_low(b->qs, 16 * s + l) * x[16 * s + l];
				isum += (int64_t)(b->scales[s] & 15) * sub;
				msum += (int64_t)(b->scales[s] >> 4) * v.bs[16 * i + s];
			}
			acc += f16_to_f32(b->d) * v.d[i] * (float)isum - f16_to_f32(b->dmin) * v.d[i] * (float)msum;
		}
	}
	return acc;
}

float quant_dot_qact(enum dtype t, const void *w, const void *a, int64_t k)
{
	qact_view v = qact_view_of(t, a, k);
	if (t == DT_Q4_1 || t == DT_Q5_0 || t == DT_Q5_1 || t == DT_IQ4_NL)
		return dot_qact32(t, w, v, k);
	if (t == DT_Q2_K || t == DT_Q3_K || t == DT_IQ4_XS)
		return dot_qact_k2(t, w, v, k);
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
