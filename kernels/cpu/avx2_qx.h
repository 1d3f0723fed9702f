/* kernels/cpu/avx2_qx.h: the AVX2 set's kernels for the weight formats
 * q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K and iq4_xs, and for packed q5_K
 * (kernels/cpu/avx2_qx.c); internal to the AVX2 set (avx2.c), which calls
 * them from its table's entries, and the AVX-512 set, which hands these
 * types to the AVX2 set.
 *
 * Every matmul here gives the scalar set's bits (quant_dot_qact's chains on
 * the same exact integer sums), on the AVX2 route and on the AVX-512 VNNI
 * one (cpu_vnni_routes), packed or stored, whatever the tokens, rows and
 * threads. Weights are read from a packed layout of 8 rows interleaved
 * (qx_pack; stored rows are packed a chunk at a time into a buffer on the
 * stack, so both read the same way). Pure functions, any thread. */
#ifndef PAGECHAT_CPU_AVX2_QX_H
#define PAGECHAT_CPU_AVX2_QX_H

#include "kernels/cpu/simd.h"

/* True for the types whose packing and matmuls are here: the seven formats
 * above and q5_K (whose stored rows the AVX2 set reads itself). */
bool qx_takes(enum dtype t);
/* cpu_kernels.pack_bytes / pack for those types (0 bytes for others). */
int64_t qx_pack_bytes(enum dtype t, int64_t k, int64_t n_out);
void qx_pack(uint8_t *dst, const uint8_t *w, enum dtype t, int64_t k, int64_t n_out, int64_t o0, int64_t o1);
/* The matmul of cpu_kernels for rows [o0, o1) and tokens [t0, t1), when
 * this file takes it (every call on the seven formats, q5_K when packed):
 * then true, else false and nothing done. vnni: the vpdpbusd route (the
 * AVX2 set's choice, cpu_vnni_routes; passed in, as this file is below
 * avx2.c). Activation rows as qx_act_extra lays them out after the qact
 * part. */
bool qx_matmul(const mm_args *a, int64_t t0, int64_t t1, int64_t o0, int64_t o1, bool vnni);
/* Bytes the kernels here keep after an activation row's qact part (q4_1 and
 * q5_1: each block's activation scale times its sum, dx sum(x), as f32), a
 * multiple of 64; and the
 * quantize_act step that writes them from the qact part at dst. */
int64_t qx_act_extra(enum dtype wt, int64_t k);
void qx_act_fill(enum dtype wt, void *dst, int64_t k);

#endif
