/* kernels/kvq.h: how the KV cache stores a token's K or V row.
 *
 * A row holds n_heads x head_dim values. Types:
 *   KV_F32  float values;
 *   KV_F16  IEEE half values;
 *   KV_Q8   int8 values, then one f16 scale per head: x = scale * q, with
 *           scale = max|x| / 127 over that head's head_dim values;
 *   KV_FP8  FP8 E4M3 values (1 sign, 4 exponent bits with bias 7, 3 mantissa
 *           bits, no infinities, largest 448), then one f16 scale per head:
 *           x = scale * e4m3, with scale = max|x| / 448.
 * The scale grouping is per row and per head (one token, one head): a row is
 * written once, when its token is computed, so its scales never change, and
 * per-head scales keep one loud head from flattening the others. With
 * head_dim 64 an 8-bit row is 66 bytes per head against 128 for F16 (1.94x);
 * with head_dim 128, 130 against 256 (1.97x).
 * Pure functions; any thread. */
#ifndef PAGECHAT_KVQ_H
#define PAGECHAT_KVQ_H

#include <stddef.h>
#include <stdint.h>

enum kv_type { KV_F32, KV_F16, KV_Q8, KV_FP8, KV_TYPE_COUNT };

/* "f32", "f16", "q8", "fp8". */
const char *kv_type_name(enum kv_type t);
/* The type named s, or -1. */
int kv_type_parse(const char *s);
/* Bytes of one row of n_heads x head_dim values (scales included). */
size_t kv_row_bytes(enum kv_type t, int n_heads, int head_dim);

/* Stores src[n_heads * head_dim] as a row of type t at dst. */
void kv_store_row(void *dst, const float *src, enum kv_type t, int n_heads, int head_dim);
/* The squared error of x[n] stored in E4M3 with scale s (no value past 448
 * after scaling), which picks fp8 rows' scales: element i is summed in
 * lane i % 16 and the 16 lanes by halves (i + 8, i + 4, i + 2, i + 1), so a
 * SIMD version gives the same bits and the same rows. */
float kv_fp8_sse(const float *x, int n, float s);
typedef float (*kv_sse_fn)(const float *x, int n, float s);
/* kv_store_row with another implementation of kv_fp8_sse. */
void kv_store_row_with(void *dst, const float *src, enum kv_type t, int n_heads, int head_dim, kv_sse_fn sse);
/* Loads head h of a row into dst[head_dim] (the reference decoder). */
void kv_load_head(float *dst, const void *row, enum kv_type t, int n_heads, int head_dim, int h);

/* E4M3 conversions (round to nearest even, saturating at +-448). */
uint8_t f32_to_e4m3(float x);
float   e4m3_to_f32(uint8_t b);

#endif
