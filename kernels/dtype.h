/* kernels/dtype.h: tensor element types as GGUF numbers them.
 *
 * The enum values are the ggml type ids stored in GGUF tensor infos, so a
 * value read from a file can be cast after dtype_is_known() says yes. Block
 * formats pack block_elems values into block_bytes bytes; a row of n values
 * needs n to be a multiple of block_elems. Pure functions; any thread. */
#ifndef PAGECHAT_DTYPE_H
#define PAGECHAT_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

enum dtype {
	DT_F32 = 0, DT_F16 = 1, DT_Q4_0 = 2, DT_Q4_1 = 3, DT_Q5_0 = 6, DT_Q5_1 = 7,
	DT_Q8_0 = 8, DT_Q8_1 = 9, DT_Q2_K = 10, DT_Q3_K = 11, DT_Q4_K = 12,
	DT_Q5_K = 13, DT_Q6_K = 14, DT_Q8_K = 15, DT_IQ4_NL = 20, DT_IQ4_XS = 23,
	DT_I8 = 24, DT_I16 = 25, DT_I32 = 26, DT_I64 = 27, DT_F64 = 28, DT_BF16 = 30,
	DT_COUNT = 31
};

/* True when id names a type whose block layout we know (not necessarily one
 * we can compute with). */
bool dtype_is_known(uint32_t id);
/* "f32", "q4_K", ...; "?" for unknown ids. Never NULL. */
const char *dtype_name(uint32_t id);
/* Values per block (1 for plain types); 0 for unknown ids. */
int64_t dtype_block_elems(enum dtype t);
/* Bytes per block; 0 for unknown ids. */
int64_t dtype_block_bytes(enum dtype t);
/* Bytes for n values, or -1 when n is not a whole number of blocks or the
 * type is unknown. */
int64_t dtype_row_bytes(enum dtype t, int64_t n);

#endif
