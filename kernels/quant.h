/* kernels/quant.h: weight formats as GGUF stores them, and the scalar
 * reference code for each.
 *
 * Block layouts (little-endian, no padding; d and dmin are IEEE halves):
 *   q8_0:  32 values, 34 bytes: d, int8 q[32];             value = d * q
 *   q4_0:  32 values, 18 bytes: d, 16 bytes of nibbles; byte j holds value j
 *          in its low nibble and value j + 16 in its high one; value = d * (q - 8)
 *   q4_K: 256 values, 144 bytes: d, dmin, 12 bytes of eight 6-bit scales and
 *          eight 6-bit mins, 128 bytes of nibbles. Sub-block s (32 values) has
 *          value = d * sc[s] * q - dmin * m[s]. Each 64 values 64c..64c+63 use
 *          bytes qs[32c .. 32c+31]: low nibbles are the first 32 values, high
 *          nibbles the next 32. Scales: for s < 4, sc = b[s] & 63 and
 *          m = b[s+4] & 63; for s >= 4, sc = (b[s+4] & 15) | (b[s-4] >> 6) << 4
 *          and m = (b[s+4] >> 4) | (b[s] >> 6) << 4.
 *   q5_K: 256 values, 176 bytes: as q4_K plus qh[32] before qs; the fifth
 *          bit of value 64c + l (l < 32) is bit 2c of qh[l], of value
 *          64c + 32 + l bit 2c + 1.
 *   q6_K: 256 values, 210 bytes: ql[128], qh[64], int8 scales[16], d.
 *          Sub-block s (16 values) has value = d * scales[s] * (q - 32). Each
 *          half h (128 values) uses ql[64h..], qh[32h..]: for l < 32, values
 *          l, l+32, l+64, l+96 take the low nibble of ql[l], of ql[l+32], the
 *          high nibble of ql[l], of ql[l+32], and qh[l] bits 0-1, 2-3, 4-5, 6-7
 *          as their top two bits.
 *   q4_1:  32 values, 20 bytes: d, m, 16 bytes of nibbles as q4_0's;
 *          value = d * q + m (q = 0..15)
 *   q5_0:  32 values, 22 bytes: d, qh[4], 16 bytes of nibbles as q4_0's; the
 *          fifth bit of value j is bit j of the little-endian 32-bit qh;
 *          value = d * (q - 16) (q = 0..31)
 *   q5_1:  32 values, 24 bytes: d, m, qh[4], nibbles; q as q5_0's;
 *          value = d * q + m
 *   iq4_nl: 32 values, 18 bytes: d, nibbles as q4_0's; value = d * T[q] with
 *          the non-uniform table T = {-127, -104, -83, -65, -49, -35, -22,
 *          -10, 1, 13, 25, 38, 53, 69, 89, 113}
 *   q2_K: 256 values, 84 bytes: scales[16], qs[64], d, dmin. Sub-block s
 *          (16 values) has value = d * (scales[s] & 15) * q - dmin *
 *          (scales[s] >> 4), q = 0..3. Each half h (128 values) uses
 *          qs[32h .. 32h+31]: value 128h + 32j + l (j = 0..3, l < 32) is bits
 *          2j, 2j+1 of qs[32h + l]; its sub-block is 8h + 2j + l / 16.
 *   q3_K: 256 values, 110 bytes: hmask[32], qs[64], scales[12], d. Value
 *          128h + 32j + l takes bits 2j, 2j+1 of qs[32h + l] as its low two
 *          bits; it is q = low - 4 where bit 4h + j of hmask[l] is clear, q =
 *          low where it is set (-4..3); sub-block s = 8h + 2j + l / 16 has
 *          value = d * (sc[s] - 32) * q with the 6-bit sc[s]: low 4 bits from
 *          scales[s] & 15 (s < 8) or scales[s - 8] >> 4 (s >= 8), top 2 bits
 *          (scales[8 + s % 4] >> 2 (s / 4)) & 3.
 *   iq4_xs: 256 values, 136 bytes: d, scales_h (16 bits), scales_l[4], qs[128].
 *          Sub-block s (32 values) has value = d * (ls - 32) * T[q], ls =
 *          (scales_l[s / 2] >> 4 (s % 2)) & 15 | ((scales_h >> 2s) & 3) << 4;
 *          its nibbles are qs[16s .. 16s+15] as q4_0's (low: values 0..15 of
 *          the sub-block, high: 16..31).
 *
 * Quantized activations ("qact"): for integer dot products a row of k f32
 * values is quantized to int8 with f32 scales: d = max|x| / 127 and q =
 * round-to-nearest-even(x * 127 / max|x|) over blocks of 32 values for q8_0
 * and q4_0 weights, of 256 values (a super-block) for the k-quants, whose
 * integer sub-block scales can then be applied in integer arithmetic. The
 * rounding is the same on every instruction set, so every code path sees the
 * same integers. A qact row also carries block sums the kernels need.
 * The other 32-value formats (q4_1, q5_0, q5_1, iq4_nl) take q4_0's rows: one
 * f32 weight scale per block meets one activation scale, and the block's
 * activation sum gives q4_1/q5_1 their offset m (m * dx * sum) and q5_0 its
 * -16 in integers (the kernels also feed iq4_nl's table shifted by 128 to
 * unsigned-by-signed byte products and take 128 times the sum back). q2_K,
 * q3_K and iq4_xs take the k-quants' rows: their integer sub-block scales
 * apply to exact integer sums over the whole super-block before its one f32
 * step, and the 16-value sums give q2_K its mins, q3_K its -4 offset and
 * iq4_xs the 128 of its shifted table, per sub-block, in integers. With
 * 32-value activation blocks those formats would take 8 f32 steps per
 * super-block instead of 1, and the f32 rounding of each.
 *
 * Everything here is pure and thread-safe. Rows hold k values, k a multiple
 * of dtype_block_elems(t); callers check that. */
#ifndef PAGECHAT_QUANT_H
#define PAGECHAT_QUANT_H

#include "base/base.h"
#include "kernels/dtype.h"

typedef struct blk_q8_0 { uint16_t d; int8_t qs[32]; } blk_q8_0;
typedef struct blk_q4_0 { uint16_t d; uint8_t qs[16]; } blk_q4_0;
typedef struct blk_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_k;
typedef struct blk_q5_k {
	uint16_t d, dmin;
	uint8_t scales[12];
	uint8_t qh[32];
	uint8_t qs[128];
} blk_q5_k;
typedef struct blk_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_k;
typedef struct blk_q4_1 { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;
typedef struct blk_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0;
typedef struct blk_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1;
typedef struct blk_iq4_nl { uint16_t d; uint8_t qs[16]; } blk_iq4_nl;
typedef struct blk_q2_k { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } blk_q2_k;
typedef struct blk_q3_k { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } blk_q3_k;
typedef struct blk_iq4_xs { uint16_t d, scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } blk_iq4_xs;

_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(blk_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(blk_q4_k) == 144, "q4_K block");
_Static_assert(sizeof(blk_q5_k) == 176, "q5_K block");
_Static_assert(sizeof(blk_q6_k) == 210, "q6_K block");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(blk_q2_k) == 84, "q2_K block");
_Static_assert(sizeof(blk_q3_k) == 110, "q3_K block");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs block");

/* The iq4_nl / iq4_xs value table (the GGUF format's). */
static const int8_t quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
					    1, 13, 25, 38, 53, 69, 89, 113};

/* Unpacks the 6-bit scale and min of sub-block s (0..7) of a q4_K/q5_K block. */
static inline void quant_k_scale_min(const uint8_t *b, int s, uint8_t *sc, uint8_t *m)
{
	if (s < 4) {
		*sc = b[s] & 63;
		*m = b[s + 4] & 63;
	} else {
		*sc = (uint8_t)((b[s + 4] & 15) | (b[s - 4] >> 6) << 4);
		*m = (uint8_t)((b[s + 4] >> 4) | (b[s] >> 6) << 4);
	}
}

/* The 6-bit scale of sub-block s (0..15) of a q3_K block, 0..63 (the
 * value's factor is this less 32). */
static inline int quant_q3_k_scale(const uint8_t *b, int s)
{
	int lo = s < 8 ? b[s] & 15 : b[s - 8] >> 4;
	return lo | ((b[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

/* The 6-bit scale of sub-block s (0..7) of an iq4_xs block, 0..63. */
static inline int quant_iq4_xs_scale(const blk_iq4_xs *b, int s)
{
	return ((b->scales_l[s / 2] >> (4 * (s % 2))) & 15) | ((b->scales_h >> (2 * s)) & 3) << 4;
}

/* True when t is a weight type the CPU backend computes with. */
bool quant_supported(enum dtype t);

/* y[k] = the values of row x (type t). */
void quant_dequantize_row(enum dtype t, const void *x, float *y, int64_t k);
/* Writes x[k] as a row of type t into y (dtype_row_bytes(t, k) bytes):
 * round to nearest, with per-block scales chosen to minimise the squared
 * error over a small search (q4_0, k-quants). t must be one quant_supported
 * accepts (asserted). */
void quant_quantize_row(enum dtype t, const float *x, void *y, int64_t k);
/* Reference dot product of row w (type t) with f32 x: the dequantized
 * values times x, accumulated in double. */
double quant_dot_f32(enum dtype t, const void *w, const float *x, int64_t k);

/* ---- quantized activations ----
 * Row layout for k values, offsets from the row start, each region on a
 * 64-byte boundary, rows qact_row_bytes apart:
 *   int8   q[k]          the quantized values
 *   float  d[k / B]      block scales (B = 32 for the 32-value formats, 256
 *                        for the k-quants and iq4_xs: qact_block)
 *   int32  ns[k / 32]    B = 32: -(sum of each 32-value block's q)
 *   int16  bs[k / 16]    B = 256: sum of q over each 16 values */
typedef struct qact_view {
	const int8_t *q;
	const float *d;
	const int32_t *ns;
	const int16_t *bs;
} qact_view;

/* True when matmuls with weights of type t use quantized activations. */
bool quant_uses_qact(enum dtype t);
/* Values per activation scale for weights of type wt (32 or 256). */
static inline int qact_block(enum dtype wt)
{
	return wt == DT_Q4_K || wt == DT_Q5_K || wt == DT_Q6_K || wt == DT_Q2_K || wt == DT_Q3_K ||
	       wt == DT_IQ4_XS ? 256 : 32;
}
/* Bytes of one quantized row of k values (a multiple of 64). */
int64_t qact_row_bytes(enum dtype wt, int64_t k);
/* Quantizes x[k] (k a multiple of qact_block) into the row at dst. */
void qact_quantize_row(enum dtype wt, const float *x, void *dst, int64_t k);
/* The regions of the row at src. */
static inline qact_view qact_view_of(enum dtype wt, const void *src, int64_t k)
{
	const uint8_t *p = (const uint8_t *)src;
	int64_t bl = qact_block(wt);
	int64_t d = (k + 63) & ~(int64_t)63;
	int64_t ns = d + ((k / bl * 4 + 63) & ~(int64_t)63);
	return (qact_view){.q = (const int8_t *)p, .d = (const float *)(p + d), .ns = (const int32_t *)(p + ns),
			   .bs = (const int16_t *)(p + ns)};
}
/* Reference integer dot of row w (any type quant_uses_qact takes) with the
 * quantized row a: exact integer sums per block (k-quants and iq4_xs: per
 * super-block, sub-block scales, mins and offsets applied in integers),
 * combined with the f32 scales in f32, block after block:
 *   q8_0, q4_0, q6_K, q3_K, iq4_xs: acc += d * dx * isum
 *   q4_K, q5_K, q2_K:               acc += d * dx * isum - dmin * dx * msum
 * (each product and sum rounded to f32 in that order, no fused operations),
 * and in fused multiply-adds (fmaf: one rounding each):
 *   q5_0, iq4_nl:                   acc = fma(d * dx, isum, acc)
 *   q4_1, q5_1:                     acc = fma(d * dx, isum, fma(m, dx * sum(x), acc))
 * (the 32-value formats take an f32 step per 32 values, as many operations
 * as the integer sums of a token's block with vpdpbusd, so they fuse them);
 * the SIMD kernels reproduce these chains bit for bit. */
float quant_dot_qact(enum dtype t, const void *w, const void *a, int64_t k);

#endif
