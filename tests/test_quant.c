/* tests/test_quant.c: the weight formats and every kernel set against the
 * scalar reference: known-answer blocks for each layout, every value of
 * random blocks of issue #37's formats against a decoding written here from
 * the GGUF definition, the Q8_0 layout
 * against a file written by another program, quantize -> dequantize error
 * bounds, integer dots against f32 dots, and SIMD matmuls, activation
 * quantization, attention and SiLU against the scalar set on awkward sizes. */
#include "kernels/cpu/simd.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "tests/test.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;

static float frand(void) /* uniform in [-1, 1) */
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* Roughly normal values with a few outliers, like trained weights. */
static void fill(float *x, int64_t n, float scale)
{
	for (int64_t i = 0; i < n; i++) {
		float v = (frand() + frand() + frand()) * scale;
		if (i % 97 == 13)
			v *= 6;
		x[i] = v;
	}
}

static const enum dtype quant_types[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_Q4_1, DT_Q5_0,
					  DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS};
static const enum dtype all_types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K,
				       DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS};

/* ---- known answers: blocks built by hand from the documented layouts ---- */

static void test_known_blocks(void)
{
	float y[256];
	blk_q8_0 b8 = {.d = f32_to_f16(0.5f)};
	for (int j = 0; j < 32; j++)
		b8.qs[j] = (int8_t)(j - 16);
	quant_dequantize_row(DT_Q8_0, &b8, y, 32);
	CHECK(y[0] == -8.0f && y[31] == 7.5f);

	blk_q4_0 b4 = {.d = f32_to_f16(2.0f)};
	b4.qs[0] = 0x1f;  /* value 0: 15 - 8 = 7; value 16: 1 - 8 = -7 */
	b4.qs[15] = 0x80; /* value 15: -8; value 31: 0 */
	quant_dequantize_row(DT_Q4_0, &b4, y, 32);
	CHECK(y[0] == 14.0f && y[16] == -14.0f && y[15] == -16.0f && y[31] == 0.0f && y[1] == -16.0f);

	/* q4_K: sub-block 1 (values 32..63, high nibbles of bytes 0..31) with
	 * scale 3 and min 2; sub-block 5 (values 160..191: high nibbles of bytes
	 * 64..95) with scale 33 and min 17, whose top bits live in bytes 1 and 5 */
	blk_q4_k k4;
	memset(&k4, 0, sizeof k4);
	k4.d = f32_to_f16(1.0f);
	k4.dmin = f32_to_f16(0.5f);
	k4.scales[1] = 3;                       /* sc[1] */
	k4.scales[5] = 2;                       /* m[1] */
	k4.scales[1] |= (33 >> 4) << 6;         /* sc[5] top bits */
	k4.scales[5] |= (17 >> 4) << 6;         /* m[5] top bits */
	k4.scales[9] = (33 & 15) | (17 & 15) << 4;
	k4.qs[0] = 0x50;                        /* value 32: q = 5 */
	k4.qs[64] = 0x90;                       /* value 160: q = 9 */
	quant_dequantize_row(DT_Q4_K, &k4, y, 256);
	CHECK(y[32] == 3 * 5 - 0.5f * 2 && y[33] == -1.0f);
	CHECK(y[160] == 33 * 9 - 0.5f * 17 && y[0] == 0.0f);
	uint8_t sc, m;
	quant_k_scale_min(k4.scales, 5, &sc, &m);
	CHECK(sc == 33 && m == 17);

	/* q5_K: value 64 + 32 + 3 = 99 takes the high nibble of qs[32 + 3] and bit 3 of qh[3] */
	blk_q5_k k5;
	memset(&k5, 0, sizeof k5);
	k5.d = f32_to_f16(1.0f);
	k5.scales[3] = 1;                       /* sc[3] = 1, m[3] = 0 */
	k5.qs[35] = 0x70;
	k5.qh[3] = 1 << 3;
	quant_dequantize_row(DT_Q5_K, &k5, y, 256);
	CHECK(y[99] == 23.0f && y[67] == 0.0f);

	/* q6_K: value 128 + 64 + 5 = 197 is the high nibble of ql[64 + 5] with
	 * bits 4-5 of qh[32 + 5]; its sub-block is 197 / 16 = 12 */
	blk_q6_k k6;
	memset(&k6, 0, sizeof k6);
	for (int i = 0; i < 128; i++)
		k6.ql[i] = 0;
	for (int i = 0; i < 64; i++)
		k6.qh[i] = 0xaa;                /* every top pair 2: q = 32 + low nibble */
	k6.d = f32_to_f16(0.25f);
	for (int s = 0; s < 16; s++)
		k6.scales[s] = (int8_t)(s - 8);
	k6.ql[69] = 0x30;
	k6.qh[37] = 0x3f;                      /* bits 4-5 = 3 for value 197 */
	quant_dequantize_row(DT_Q6_K, &k6, y, 256);
	CHECK(y[197] == 0.25f * 4 * (3 * 16 + 3 - 32));
	CHECK(y[0] == 0.0f && y[5 + 128] == 0.0f);
}

/* The formats added for real models' files, each block built bit by bit from
 * the GGUF definition (kernels/quant.h) and its values worked out here. */
static void test_known_blocks_more(void)
{
	float y[256];
	/* q4_1: value = d q + m, nibbles as q4_0's */
	blk_q4_1 a1 = {.d = f32_to_f16(0.5f), .m = f32_to_f16(-1.0f)};
	a1.qs[0] = 0x3a;  /* value 0: q 10; value 16: q 3 */
	a1.qs[15] = 0xf0; /* value 15: q 0; value 31: q 15 */
	quant_dequantize_row(DT_Q4_1, &a1, y, 32);
	CHECK(y[0] == 10 * 0.5f - 1 && y[16] == 3 * 0.5f - 1 && y[15] == -1.0f && y[31] == 15 * 0.5f - 1);
	CHECK(y[1] == -1.0f);

	/* q5_0: the fifth bit of value j is bit j of qh (little-endian); value = d (q - 16) */
	blk_q5_0 a5 = {.d = f32_to_f16(2.0f)};
	a5.qs[3] = 0x5c;  /* value 3: low bits 12; value 19: low bits 5 */
	a5.qh[0] = 1 << 3;  /* value 3's fifth bit; value 19's (qh bit 19) clear */
	a5.qh[3] = 0x80;  /* value 31's fifth bit (its low bits 0) */
	quant_dequantize_row(DT_Q5_0, &a5, y, 32);
	CHECK(y[3] == 2.0f * (28 - 16) && y[19] == 2.0f * (5 - 16) && y[31] == 0.0f && y[0] == -32.0f);

	/* q5_1: value = d q + m */
	blk_q5_1 b5 = {.d = f32_to_f16(0.25f), .m = f32_to_f16(1.0f)};
	b5.qs[7] = 0x21;  /* value 7: 1; value 23: 2 */
	b5.qh[0] = 0x80;  /* bit 7 */
	b5.qh[2] = 0x80;  /* bit 23 */
	quant_dequantize_row(DT_Q5_1, &b5, y, 32);
	CHECK(y[7] == 17 * 0.25f + 1 && y[23] == 18 * 0.25f + 1 && y[0] == 1.0f);

	/* iq4_nl: value = d T[q] */
	blk_iq4_nl n4 = {.d = f32_to_f16(0.5f)};
	memset(n4.qs, 0x88, sizeof n4.qs); /* T[8] = 1 */
	n4.qs[2] = 0xf0;  /* value 2: T[0] = -127; value 18: T[15] = 113 */
	quant_dequantize_row(DT_IQ4_NL, &n4, y, 32);
	CHECK(y[2] == -63.5f && y[18] == 56.5f && y[0] == 0.5f);

	/* q2_K: sub-block 5 = values 80..95 (h 0, j 2, l 16..31): bits 4-5 of
	 * qs[l]; sub-block 13 = values 208..223 (h 1, j 2): qs[32 + l] */
	blk_q2_k k2;
	memset(&k2, 0, sizeof k2);
	k2.d = f32_to_f16(1.0f);
	k2.dmin = f32_to_f16(0.5f);
	k2.scales[5] = 3 | 4 << 4;
	k2.scales[13] = 15 | 1 << 4;
	k2.qs[17] = 2 << 4;       /* value 81: q 2 */
	k2.qs[32 + 20] = 3 << 4;  /* value 212: q 3 */
	quant_dequantize_row(DT_Q2_K, &k2, y, 256);
	CHECK(y[81] == 3 * 2 - 0.5f * 4 && y[80] == -2.0f && y[212] == 15 * 3 - 0.5f && y[0] == 0.0f);

	/* q3_K: sub-block 10 = values 160..175 (h 1, j 1): low bits 2-3 of
	 * qs[32 + l], hmask bit 5; its scale 45 (less 32: 13) has low bits in
	 * scales[2]'s high nibble, top bits in scales[10] bits 4-5 */
	blk_q3_k k3;
	memset(&k3, 0, sizeof k3);
	k3.d = f32_to_f16(0.5f);
	k3.scales[2] = 13 << 4;
	k3.scales[10] = 2 << 4;
	k3.qs[32 + 5] = 3 << 2;   /* value 165: low 3, hmask bit set: q 3 */
	k3.hmask[5] = 1 << 5;
	k3.qs[32 + 6] = 1 << 2;   /* value 166: low 1, hmask bit clear: q -3 */
	quant_dequantize_row(DT_Q3_K, &k3, y, 256);
	CHECK(y[165] == 0.5f * 13 * 3 && y[166] == 0.5f * 13 * -3);
	CHECK(y[0] == 0.5f * -32 * -4 && quant_q3_k_scale(k3.scales, 10) == 45);

	/* iq4_xs: sub-block 5's scale 50 (less 32: 18): low nibble in
	 * scales_l[2]'s high half, top bits in scales_h bits 10-11 */
	blk_iq4_xs x4;
	memset(&x4, 0, sizeof x4);
	x4.d = f32_to_f16(0.25f);
	x4.scales_l[2] = 2 << 4;
	x4.scales_h = 3 << 10;
	x4.qs[16 * 5 + 4] = 0x90; /* value 164: T[0]; value 180: T[9] = 13 */
	quant_dequantize_row(DT_IQ4_XS, &x4, y, 256);
	CHECK(y[180] == 0.25f * 18 * 13 && y[164] == 0.25f * 18 * -127);
	CHECK(y[0] == 0.25f * -32 * -127 && quant_iq4_xs_scale(&x4, 5) == 50);
}

/* ---- every value of random blocks against the GGUF definition ----
 *
 * The format definitions (GGUF / ggml's block layouts) decoded again here,
 * written from the byte offsets the formats document rather than through
 * kernels/quant.h's structs or quant.c's helpers, and checked value by value
 * against quant_dequantize_row on blocks of random bytes (random scales).
 * Each value is computed with the definition's own operations (integer level
 * times the f32 scale, plus the offset or less the minimum), so the results
 * must be identical, not close. */

/* A half at p (little-endian), decoded from its fields. */
static float spec_f16(const uint8_t *p)
{
	unsigned h = p[0] | (unsigned)p[1] << 8, e = h >> 10 & 31, m = h & 1023;
	float v = e ? ldexpf((float)(1024 + m), (int)e - 25) : ldexpf((float)m, -24);
	return h >> 15 ? -v : v;
}

/* n bits from bit position pos of the little-endian bit string at p. */
static int spec_bits(const uint8_t *p, int pos, int n)
{
	int v = 0;
	for (int i = 0; i < n; i++)
		v |= (p[(pos + i) / 8] >> ((pos + i) % 8) & 1) << i;
	return v;
}

static const int spec_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Value j (0..31) of a 32-value block's 16 nibble bytes at qs: byte j % 16,
 * the low nibble for the first 16 values, the high one for the rest. */
static int spec_nib32(const uint8_t *qs, int j)
{
	return spec_bits(qs, 8 * (j % 16) + 4 * (j / 16), 4);
}

/* The block b's values, by type (bytes: q4_1 20 = d, m, qs[16]; q5_0 22 =
 * d, qh[4], qs[16]; q5_1 24 = d, m, qh[4], qs[16]; iq4_nl 18 = d, qs[16];
 * q2_K 84 = scales[16], qs[64], d, dmin; q3_K 110 = hmask[32], qs[64],
 * scales[12], d; iq4_xs 136 = d, scales_h (u16), scales_l[4], qs[128]). */
static void spec_decode(enum dtype t, const uint8_t *b, float *y)
{
	switch (t) {
	case DT_Q4_1:
		for (int j = 0; j < 32; j++)
			y[j] = (float)spec_nib32(b + 4, j) * spec_f16(b) + spec_f16(b + 2);
		break;
	case DT_Q5_0: /* the fifth bit of value j: bit j of the 32 bits qh */
		for (int j = 0; j < 32; j++)
			y[j] = (float)(spec_nib32(b + 6, j) + 16 * spec_bits(b + 2, j, 1) - 16) * spec_f16(b);
		break;
	case DT_Q5_1:
		for (int j = 0; j < 32; j++)
			y[j] = (float)(spec_nib32(b + 8, j) + 16 * spec_bits(b + 4, j, 1)) * spec_f16(b) + spec_f16(b + 2);
		break;
	case DT_IQ4_NL:
		for (int j = 0; j < 32; j++)
			y[j] = spec_f16(b) * (float)spec_iq4[spec_nib32(b + 2, j)];
		break;
	case DT_Q2_K: /* value 128h + 32j + l: bits 2j of qs[32h + l]; 16-value
		       * sub-block s's scale in scales[s]'s low nibble, min in the high */
		for (int v = 0; v < 256; v++) {
			int h = v / 128, j = v % 128 / 32, l = v % 32, s = v / 16, sc = b[s];
			float dl = spec_f16(b + 80) * (float)(sc & 15), ml = spec_f16(b + 82) * (float)(sc >> 4);
			y[v] = dl * (float)spec_bits(b + 16 + 32 * h + l, 2 * j, 2) - ml;
		}
		break;
	case DT_Q3_K: /* as q2_K's bits, less 4 where hmask[l] bit 4h + j is
		       * clear; 6-bit scales less 32: the low 4 bits in scales[s]
		       * (s < 8) or scales[s - 8]'s high nibble, the top 2 at bit
		       * 2 (s / 4) of scales[8 + s % 4] */
		for (int v = 0; v < 256; v++) {
			int h = v / 128, j = v % 128 / 32, l = v % 32, s = v / 16;
			int lo = s < 8 ? b[96 + s] & 15 : b[96 + s - 8] >> 4;
			int sc = lo | spec_bits(b + 96 + 8 + s % 4, 2 * (s / 4), 2) << 4;
			int q = spec_bits(b + 32 + 32 * h + l, 2 * j, 2) - (spec_bits(b + l, 4 * h + j, 1) ? 0 : 4);
			y[v] = spec_f16(b + 108) * (float)(sc - 32) * (float)q;
		}
		break;
	case DT_IQ4_XS: /* 32-value sub-block s: nibbles as iq4_nl's in
			 * qs[16s..]; its 6-bit scale less 32: nibble s of
			 * scales_l, the top 2 bits at 2s of scales_h */
		for (int v = 0; v < 256; v++) {
			int s = v / 32, sc = spec_bits(b + 4, 4 * s, 4) | spec_bits(b + 2, 2 * s, 2) << 4;
			y[v] = spec_f16(b) * (float)(sc - 32) * (float)spec_iq4[spec_nib32(b + 8 + 16 * s, v % 32)];
		}
		break;
	default:
		assert(!"spec_decode: not one of issue #37's formats");
	}
}

static void test_spec_decoding(void)
{
	static const enum dtype types[] = {DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_Q2_K, DT_Q3_K, DT_IQ4_XS};
	static const int scale_at[][2] = {{0, 2}, {0, -1}, {0, 2}, {0, -1}, {80, 82}, {108, -1}, {0, -1}};
	enum { NB = 48 };
	for (size_t ti = 0; ti < ARRAY_LEN(types); ti++) {
		enum dtype t = types[ti];
		int64_t bb = dtype_block_bytes(t), be = dtype_block_elems(t);
		uint8_t *w = xmalloc((size_t)(NB * bb));
		float *y = xmalloc((size_t)(NB * be) * sizeof *y), want[256];
		for (int64_t i = 0; i < NB * bb; i++)
			w[i] = (uint8_t)(frand() * 128 + 128);
		for (int i = 0; i < NB; i++) /* finite halves of either sign, some subnormal */
			for (int s = 0; s < 2; s++)
				if (scale_at[ti][s] >= 0) {
					uint16_t h = f32_to_f16(frand() * (i % 7 ? 0.1f : 2e-6f));
					memcpy(w + i * bb + scale_at[ti][s], &h, 2);
				}
		quant_dequantize_row(t, w, y, NB * be);
		int bad = -1;
		for (int i = 0; i < NB && bad < 0; i++) {
			spec_decode(t, w + i * bb, want);
			for (int j = 0; j < be && bad < 0; j++)
				if (memcmp(&want[j], &y[i * be + j], 4))
					bad = (int)(i * be + j);
		}
		CHECK_(bad < 0, "%s: value %d dequantizes to %g, the format's definition gives %g", dtype_name(t), bad,
		       bad < 0 ? 0 : y[bad], bad < 0 ? 0 : want[bad % be]);
		free(w);
		free(y);
	}
}

/* The Q8_0 and F32 random models hold the same weights (the generator says
 * so): dequantizing one must give the other exactly. */
static void test_q8_0_against_generator(void)
{
	err e = {0};
	gguf_file *f32 = gguf_open("build/models/rand-256x4-f32.gguf", &e);
	gguf_file *q8 = gguf_open("build/models/rand-256x4-q8_0.gguf", &e);
	CHECK_(f32 && q8, "%s (make test-models)", e.msg);
	if (f32 && q8) {
		int checked = 0;
		for (int64_t i = 0; i < gguf_n_tensors(q8); i++) {
			const gguf_tensor *tq = gguf_tensor_at(q8, i);
			const gguf_tensor *tf = gguf_find_tensor(f32, tq->name);
			if (tq->type != DT_Q8_0 || !tf)
				continue;
			float *y = xmalloc((size_t)tq->n_elems * sizeof *y);
			quant_dequantize_row(DT_Q8_0, tq->data, y, tq->n_elems);
			CHECK_(!memcmp(y, tf->data, (size_t)tq->n_elems * 4), "%s differs", tq->name);
			free(y);
			checked++;
		}
		CHECK(checked >= 28);
	}
	gguf_close(f32);
	gguf_close(q8);
}

/* ---- quantize -> dequantize ---- */

/* Relative RMS error bounds for data like fill()'s: a uniform quantizer with
 * step s errs by s / sqrt(12) on average; s follows from the block's range and
 * level count (q8_0: 2 * 127 levels over +-amax, about 2.6 sigma for 32
 * values; q4_0: 16 levels; q4_K/q5_K: 16/32 levels over a 32-value range
 * with 6-bit scales; q6_K: 64 levels over 16 values; q4_1/q5_1: 16/32
 * levels over a 32-value block's range, about 4.3 sigma; q5_0: 32 levels
 * over +-amax; iq4_nl/iq4_xs: 16 table levels over +-amax, denser near
 * zero, a little under q4_0's error; q2_K: 4 levels over a 16-value range,
 * about 3.5 sigma, with 4-bit scales; q3_K: 8 levels over +-amax of 16
 * values), plus rounding of the half-precision scales. The bounds are those
 * estimates with ~25% margin. */
static double rms_bound(enum dtype t)
{
	switch (t) {
	case DT_F16: return 4e-4;
	case DT_BF16: return 3e-3;
	case DT_Q8_0: return 0.009;
	case DT_Q4_0: return 0.14;
	case DT_Q4_K: return 0.10;
	case DT_Q5_K: return 0.05;
	case DT_Q6_K: return 0.027;
	case DT_Q4_1: return 0.10;
	case DT_Q5_0: return 0.07;
	case DT_Q5_1: return 0.05;
	case DT_IQ4_NL: return 0.12;
	case DT_Q2_K: return 0.36;
	case DT_Q3_K: return 0.22;
	case DT_IQ4_XS: return 0.12;
	default: return 0;
	}
}

static void test_round_trip(void)
{
	int64_t k = 4096;
	float *x = xmalloc(k * sizeof *x), *y = xmalloc(k * sizeof *y);
	uint8_t *q = xmalloc((size_t)dtype_row_bytes(DT_F32, k));
	fill(x, k, 0.02f);
	x[100] = 0; /* an exact zero and a zero block survive */
	for (int i = 512; i < 768; i++)
		x[i] = 0;
	for (size_t ti = 0; ti < ARRAY_LEN(all_types); ti++) {
		enum dtype t = all_types[ti];
		quant_quantize_row(t, x, q, k);
		quant_dequantize_row(t, q, y, k);
		double se = 0, sx = 0, max_zero = 0;
		for (int64_t i = 0; i < k; i++) {
			se += (double)(x[i] - y[i]) * (x[i] - y[i]);
			sx += (double)x[i] * x[i];
		}
		for (int i = 512; i < 768; i++)
			max_zero = MAX(max_zero, fabsf(y[i]));
		double rel = sqrt(se / sx);
		CHECK_(rel <= rms_bound(t), "%s: relative rms error %g > %g", dtype_name(t), rel, rms_bound(t));
		CHECK_(max_zero == 0, "%s: a zero block comes back as %g", dtype_name(t), max_zero);
		if (t == DT_F32)
			CHECK(rel == 0);
	}
	/* q8_0: every value within half a step of its block's scale */
	quant_quantize_row(DT_Q8_0, x, q, k);
	quant_dequantize_row(DT_Q8_0, q, y, k);
	for (int64_t b = 0; b < k / 32; b++) {
		float amax = 0, emax = 0;
		for (int j = 0; j < 32; j++) {
			amax = MAX(amax, fabsf(x[32 * b + j]));
			emax = MAX(emax, fabsf(x[32 * b + j] - y[32 * b + j]));
		}
		if (emax > amax / 127 * 0.5f * 1.01f + 1e-9f) {
			CHECK_(0, "q8_0 block %lld: error %g > half step %g", (long long)b, emax, amax / 254);
			break;
		}
	}
	free(x);
	free(y);
	free(q);
}

/* ---- integer dots against the f32 dot ---- */

static void test_qact_dot(void)
{
	int64_t k = 1024;
	float *w = xmalloc(k * sizeof *w), *x = xmalloc(k * sizeof *x), *wd = xmalloc(k * sizeof *wd);
	uint8_t *wq = xmalloc((size_t)k * 4);
	uint8_t *qa = NULL;
	CHECK(posix_memalign((void **)&qa, 64, (size_t)qact_row_bytes(DT_Q4_K, k) + 4096) == 0);
	fill(w, k, 0.05f);
	fill(x, k, 1.0f);
	for (size_t ti = 0; ti < ARRAY_LEN(quant_types); ti++) {
		enum dtype t = quant_types[ti];
		int bl = qact_block(t);
		qact_quantize_row(t, x, qa, k);
		qact_view v = qact_view_of(t, qa, k);
		quant_quantize_row(t, w, wq, k);
		quant_dequantize_row(t, wq, wd, k);
		/* the integer dot equals the dot of the dequantized weights with the
		 * dequantized activations, up to f32 rounding of the block sums */
		double exact = 0, bound = 0, mag = 0;
		for (int64_t i = 0; i < k; i++) {
			float xa = v.d[i / bl] * v.q[i];
			exact += (double)wd[i] * xa;
			mag += fabs((double)wd[i] * xa);
			bound += fabs((double)wd[i]) * fabsf(x[i] - xa);
		}
		float got = quant_dot_qact(t, wq, qa, k);
		CHECK_(fabs(got - exact) <= 1e-5 * mag, "%s: integer dot %g vs %g", dtype_name(t), got, exact);
		/* and stays within the activation rounding of the f32 dot */
		double ref = quant_dot_f32(t, wq, x, k);
		CHECK_(fabs(got - ref) <= bound * 1.01 + 1e-5 * mag, "%s: %g vs f32 dot %g (bound %g)",
		       dtype_name(t), got, ref, bound);
		/* the sums agree with the integers */
		bool ok = true;
		for (int64_t g = 0; g < k / 16; g++) {
			int s = 0;
			for (int j = 0; j < 16; j++)
				s += v.q[16 * g + j];
			if (bl == 256)
				ok = ok && v.bs[g] == s;
		}
		for (int64_t b = 0; bl == 32 && b < k / 32; b++) {
			int s = 0;
			for (int j = 0; j < 32; j++)
				s += v.q[32 * b + j];
			ok = ok && v.ns[b] == -s;
		}
		float amax = 0;
		for (int j = 0; j < bl; j++)
			amax = MAX(amax, fabsf(x[j]));
		ok = ok && v.d[0] == amax / 127.0f;
		CHECK_(ok, "%s: activation sums or scales wrong", dtype_name(t));
	}
	free(w);
	free(x);
	free(wd);
	free(wq);
	free(qa);
}

/* ---- every kernel set against the scalar set ---- */

typedef struct mm_case {
	enum dtype wt;
	int64_t k, n_out, n;
} mm_case;

/* Bytes of one activation row as set ks lays it out. */
static int64_t act_bytes(const cpu_kernels *ks, enum dtype wt, int64_t k)
{
	return ks->act_row_bytes ? ks->act_row_bytes(wt, k) : qact_row_bytes(wt, k);
}

/* Runs cpu kernel set ks over the whole case in one call, and again one token
 * and one row range at a time; the two must be bit-identical. */
static void run_mm(const cpu_kernels *ks, const mm_case *c, const uint8_t *w, const uint8_t *pw, const float *x,
		   uint8_t *qa, float *y, float *y_split)
{
	int64_t ldw = dtype_row_bytes(c->wt, c->k), lda = act_bytes(ks, c->wt, c->k);
	bool q = quant_uses_qact(c->wt);
	if (q)
		for (int64_t t = 0; t < c->n; t++)
			ks->quantize_act(c->wt, x + t * c->k, qa + t * lda, c->k);
	mm_args a = {.y = y, .ldy = c->n_out, .x = x, .ldx = c->k, .qa = qa, .lda = lda,
		     .w = w, .ldw = ldw, .pw = pw, .wt = c->wt, .k = c->k};
	ks->matmul(&a, 0, c->n, 0, c->n_out);
	a.y = y_split;
	int64_t cut = c->n_out / 3;
	for (int64_t t = 0; t < c->n; t++) {
		ks->matmul(&a, t, t + 1, 0, cut);
		ks->matmul(&a, t, t + 1, cut, c->n_out);
	}
}

/* The set's packed layout of the case's weights (where it has one) gives
 * the bits of the stored rows, whole and in pieces. */
static void check_packed(const cpu_kernels *ks, const mm_case *c, const uint8_t *w, const float *x,
			 const float *y)
{
	int64_t bytes = ks->pack_bytes ? ks->pack_bytes(c->wt, c->k, c->n_out) : 0;
	if (bytes <= 0)
		return;
	uint8_t *pw = NULL, *qa = NULL;
	CHECK(posix_memalign((void **)&pw, 64, (size_t)bytes) == 0);
	CHECK(posix_memalign((void **)&qa, 64, (size_t)(c->n * act_bytes(ks, c->wt, c->k)) + 64) == 0);
	/* in two ranges, as threads would */
	int64_t cut = c->n_out > PACK_ROWS ? PACK_ROWS : c->n_out;
	ks->pack(pw, w, c->wt, c->k, c->n_out, 0, cut);
	ks->pack(pw, w, c->wt, c->k, c->n_out, cut, c->n_out);
	float *yp = xmalloc((size_t)(c->n * c->n_out) * sizeof *yp);
	float *ys = xmalloc((size_t)(c->n * c->n_out) * sizeof *ys);
	run_mm(ks, c, w, pw, x, qa, yp, ys);
	size_t n = (size_t)(c->n * c->n_out) * sizeof *y;
	CHECK_(!memcmp(yp, y, n) && !memcmp(ys, y, n), "%s %s k=%lld n_out=%lld: packed weights differ from stored",
	       ks->name, dtype_name(c->wt), (long long)c->k, (long long)c->n_out);
	free(pw); free(qa); free(yp); free(ys);
}

static void test_kernel_sets(void)
{
	static const mm_case cases[] = {
		{DT_F32, 1, 3, 2}, {DT_F32, 15, 5, 7}, {DT_F32, 17, 9, 13}, {DT_F32, 172, 6, 11},
		{DT_F32, 768, 13, 8}, {DT_F32, 1300, 9, 11}, {DT_F16, 1100, 6, 7}, {DT_F16, 33, 7, 5}, {DT_F16, 200, 5, 9}, {DT_BF16, 47, 9, 3},
		{DT_BF16, 256, 4, 14}, {DT_Q8_0, 32, 5, 3}, {DT_Q8_0, 96, 9, 9}, {DT_Q8_0, 160, 13, 5},
		{DT_Q8_0, 1024, 8, 6}, {DT_Q4_0, 32, 3, 1}, {DT_Q4_0, 224, 11, 10}, {DT_Q4_0, 512, 5, 4},
		{DT_Q4_K, 256, 9, 5}, {DT_Q4_K, 768, 6, 9}, {DT_Q5_K, 256, 5, 6}, {DT_Q5_K, 512, 13, 3},
		{DT_Q6_K, 256, 7, 7}, {DT_Q6_K, 1024, 4, 5},
		/* past the k-chunks of the AVX2 prompt kernels, rows past a group of 8 */
		{DT_Q8_0, 1600, 19, 13}, {DT_Q4_K, 2048, 17, 11}, {DT_Q6_K, 1536, 19, 9},
		/* one partial group, 13 tokens (decoding tiles of 4 and 1); a full and a partial one */
		{DT_Q4_K, 512, 7, 13}, {DT_Q6_K, 512, 7, 13}, {DT_Q6_K, 768, 11, 3},
		/* the decoding tiles of 8 tokens on vpdpbusd (q8_0 over pairs of
		 * groups and the last group alone, q4_K over one) and their
		 * remainders, up to 64 tokens; rows off the groups */
		{DT_Q8_0, 512, 21, 16}, {DT_Q8_0, 288, 13, 15}, {DT_Q8_0, 256, 40, 45}, {DT_Q8_0, 1024, 16, 64},
		{DT_Q4_K, 512, 24, 37}, {DT_Q4_K, 256, 9, 6}, {DT_Q4_K, 768, 16, 64}, {DT_Q6_K, 512, 17, 16},
		/* the formats of kernels/cpu/avx2_qx.c: 32-value rows off the
		 * k-chunks and the 256-value super-blocks (576: SmolLM2's width),
		 * row counts off the groups of 8, prompts and decoding tiles */
		{DT_Q4_1, 32, 3, 1}, {DT_Q4_1, 576, 11, 10}, {DT_Q4_1, 1600, 19, 21},
		{DT_Q5_0, 96, 9, 9}, {DT_Q5_0, 1056, 17, 5}, {DT_Q5_1, 224, 13, 4}, {DT_Q5_1, 2080, 9, 21},
		{DT_IQ4_NL, 64, 7, 7}, {DT_IQ4_NL, 1120, 19, 13}, {DT_Q2_K, 256, 9, 5}, {DT_Q2_K, 1536, 17, 21},
		{DT_Q3_K, 512, 7, 13}, {DT_Q3_K, 2048, 19, 9}, {DT_IQ4_XS, 768, 11, 3}, {DT_IQ4_XS, 1280, 17, 21},
		{DT_Q5_K, 1536, 19, 9}, {DT_Q5_K, 512, 7, 21},
	};
	const cpu_kernels *ref = cpu_kernels_scalar();
	int n_sets = 0;
	/* where the CPU has AVX-512 VNNI, the sets run twice: prompts and q4_K /
	 * q6_K decoding on vpdpbusd, then on vpmaddubsw / vpmaddwd */
	cpu_kernels_for(ISA_AVX2);
	bool vnni = cpu_vnni_routes(-1);
	for (int pass = 0; pass < 1 + vnni; pass++)
	for (int isa = 0; isa < ISA_COUNT; isa++) {
		const cpu_kernels *ks = cpu_kernels_for((enum cpu_isa)isa);
		if (!ks)
			continue;
		cpu_vnni_routes(vnni && pass == 0);
		n_sets++;
		for (size_t ci = 0; ci < ARRAY_LEN(cases); ci++) {
			const mm_case *c = &cases[ci];
			float *wf = xmalloc((size_t)(c->n_out * c->k) * sizeof *wf);
			float *x = xmalloc((size_t)(c->n * c->k) * sizeof *x);
			uint8_t *w = xmalloc((size_t)(c->n_out * dtype_row_bytes(c->wt, c->k)));
			uint8_t *qa = NULL, *qa_ref = NULL;
			size_t qa_bytes = (size_t)(c->n * MAX(act_bytes(ks, c->wt, c->k), act_bytes(ref, c->wt, c->k)));
			CHECK(posix_memalign((void **)&qa, 64, qa_bytes + 64) == 0);
			CHECK(posix_memalign((void **)&qa_ref, 64, qa_bytes + 64) == 0);
			float *y = xmalloc((size_t)(c->n * c->n_out) * sizeof *y);
			float *y_split = xmalloc((size_t)(c->n * c->n_out) * sizeof *y);
			float *y_ref = xmalloc((size_t)(c->n * c->n_out) * sizeof *y);
			fill(wf, c->n_out * c->k, 0.05f);
			fill(x, c->n * c->k, 1.0f);
			for (int64_t o = 0; o < c->n_out; o++)
				quant_quantize_row(c->wt, wf + o * c->k, w + o * dtype_row_bytes(c->wt, c->k), c->k);
			run_mm(ks, c, w, NULL, x, qa, y, y_split);
			run_mm(ref, c, w, NULL, x, qa_ref, y_ref, y_ref);
			check_packed(ks, c, w, x, y);
			if (quant_uses_qact(c->wt)) {
				/* the integers and scales must match bit for bit */
				bool same = true;
				int64_t lda = act_bytes(ks, c->wt, c->k), ldr = act_bytes(ref, c->wt, c->k);
				int64_t nd = c->k / qact_block(c->wt);
				for (int64_t t = 0; t < c->n; t++) {
					qact_view a = qact_view_of(c->wt, qa + t * lda, c->k);
					qact_view b = qact_view_of(c->wt, qa_ref + t * ldr, c->k);
					same = same && !memcmp(a.q, b.q, (size_t)c->k) && !memcmp(a.d, b.d, (size_t)nd * 4);
					if (qact_block(c->wt) == 32)
						same = same && !memcmp(a.ns, b.ns, (size_t)c->k / 32 * 4);
					else
						same = same && !memcmp(a.bs, b.bs, (size_t)c->k / 16 * 2);
				}
				CHECK_(same, "%s %s k=%lld: quantized activations differ from scalar", ks->name,
				       dtype_name(c->wt), (long long)c->k);
			}
			float worst = 0;
			bool split_same = !memcmp(y, y_split, (size_t)(c->n * c->n_out) * sizeof *y);
			for (int64_t t = 0; t < c->n; t++)
				for (int64_t o = 0; o < c->n_out; o++) {
					/* tolerance relative to the sum of |terms| */
					double mag = 0;
					const uint8_t *wr = w + o * dtype_row_bytes(c->wt, c->k);
					float row[4096];
					quant_dequantize_row(c->wt, wr, row, c->k);
					for (int64_t i = 0; i < c->k; i++)
						mag += fabs((double)row[i] * x[t * c->k + i]);
					float d = fabsf(y[t * c->n_out + o] - y_ref[t * c->n_out + o]);
					worst = MAX(worst, (float)(d / (mag + 1e-30)));
				}
			CHECK_(worst <= 1e-5f, "%s %s k=%lld: relative difference %g from scalar", ks->name,
			       dtype_name(c->wt), (long long)c->k, worst);
			CHECK_(split_same, "%s %s k=%lld: tiles and single rows differ", ks->name,
			       dtype_name(c->wt), (long long)c->k);
			if (ks->qact_exact && quant_uses_qact(c->wt))
				CHECK_(!memcmp(y, y_ref, (size_t)(c->n * c->n_out) * sizeof *y),
				       "%s %s k=%lld: not the scalar set's bits", ks->name, dtype_name(c->wt),
				       (long long)c->k);
			free(wf); free(x); free(w); free(qa); free(qa_ref); free(y); free(y_split); free(y_ref);
		}
	}
	cpu_vnni_routes(vnni);
	CHECK(n_sets >= 1);
	printf("kernel sets tested: %d%s (", n_sets,
	       vnni ? ", q4_K/q6_K and avx2_qx's formats, decoding and prompts, with and without vpdpbusd" : "");
	for (int isa = 0; isa < ISA_COUNT; isa++)
		if (cpu_kernels_for((enum cpu_isa)isa))
			printf(" %s", cpu_kernels_for((enum cpu_isa)isa)->name);
	printf(" )\n");
}

/* Activations at every offset within a vector: the same value gives the same
 * result wherever it sits (tails use the bodies' arithmetic). */
static void test_silu(void)
{
	float g[77], u[77], ref[77];
	fill(g, 77, 4.0f);
	fill(u, 77, 1.0f);
	g[0] = -200;
	g[1] = 200;
	g[2] = 0;
	for (int isa = 0; isa < ISA_COUNT; isa++) {
		const cpu_kernels *ks = cpu_kernels_for((enum cpu_isa)isa);
		if (!ks)
			continue;
		memcpy(ref, g, sizeof g);
		cpu_kernels_scalar()->silu_mul(ref, u, 77);
		float all[77];
		memcpy(all, g, sizeof g);
		ks->silu_mul(all, u, 77);
		float worst = 0;
		bool same = true;
		for (int i = 0; i < 77; i++) {
			worst = MAX(worst, fabsf(all[i] - ref[i]) / MAX(fabsf(ref[i]), 1e-3f));
			float one = g[i];
			ks->silu_mul(&one, &u[i], 1);
			same = same && one == all[i];
		}
		CHECK_(worst <= 1e-5f, "%s silu: relative difference %g", ks->name, worst);
		CHECK_(same, "%s silu: a value's result depends on its position", ks->name);
	}
}

static void test_attend(void)
{
	static const int dims[] = {8, 20, 64, 100, 128};
	int bt = 4, n_blocks = 12;
	for (size_t di = 0; di < ARRAY_LEN(dims); di++) {
		int hd = dims[di], n_kv = 2, n_heads = 4;
		int64_t kv_dim = (int64_t)n_kv * hd, slots = (int64_t)bt * n_blocks;
		float *kc = xmalloc((size_t)(slots * kv_dim) * sizeof(float));
		float *vc = xmalloc((size_t)(slots * kv_dim) * sizeof(float));
		float q[128], out[128], ref[128];
		fill(kc, slots * kv_dim, 1.0f);
		fill(vc, slots * kv_dim, 1.0f);
		fill(q, hd, 1.0f);
		int32_t table[12] = {5, 2, 9, 0, 11, 7, 1, 3, 4, 6, 8, 10};
		const int32_t *tables[1] = {table};
		int32_t n_ctx[1] = {0};
		kern_attn a = {.k = kc, .v = vc, .n_heads = n_heads, .n_kv_heads = n_kv, .head_dim = hd,
			       .k_row = (size_t)kv_dim * sizeof(float), .v_row = (size_t)kv_dim * sizeof(float),
			       .block_tokens = bt, .scale = 1.0f / sqrtf((float)hd), .table = tables,
			       .n_ctx = n_ctx};
		for (int isa = 1; isa < ISA_COUNT; isa++) {
			const cpu_kernels *ks = cpu_kernels_for((enum cpu_isa)isa);
			if (!ks)
				continue;
			for (int ctx = 1; ctx <= 45; ctx += 11) {
				cpu_kernels_scalar()->attend(ref, 0, q, 0, 1, &a, table, &ctx, 1);
				ks->attend(out, 0, q, 0, 1, &a, table, &ctx, 1);
				float worst = 0;
				for (int d = 0; d < hd; d++)
					worst = MAX(worst, fabsf(out[d] - ref[d]) / MAX(fabsf(ref[d]), 0.05f));
				CHECK_(worst <= 1e-5f, "%s attention hd %d ctx %d: difference %g", ks->name, hd,
				       ctx, worst);
			}
		}
		free(kc);
		free(vc);
	}
}

int main(void)
{
	test_known_blocks();
	test_known_blocks_more();
	test_spec_decoding();
	test_q8_0_against_generator();
	test_round_trip();
	test_qact_dot();
	test_kernel_sets();
	test_silu();
	test_attend();
	return TEST_DONE();
}
