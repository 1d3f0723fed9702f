/* kernels/dtype.c: the table of tensor element types (ggml ids, GGUF spec). */
#include "kernels/dtype.h"

#include <stddef.h>

static const struct {
	const char *name;
	int64_t block_elems, block_bytes;
} types[DT_COUNT] = {
	[DT_F32] = {"f32", 1, 4},        [DT_F16] = {"f16", 1, 2},
	[DT_Q4_0] = {"q4_0", 32, 18},    [DT_Q4_1] = {"q4_1", 32, 20},
	[DT_Q5_0] = {"q5_0", 32, 22},    [DT_Q5_1] = {"q5_1", 32, 24},
	[DT_Q8_0] = {"q8_0", 32, 34},    [DT_Q8_1] = {"q8_1", 32, 36},
	[DT_Q2_K] = {"q2_K", 256, 84},   [DT_Q3_K] = {"q3_K", 256, 110},
	[DT_Q4_K] = {"q4_K", 256, 144},  [DT_Q5_K] = {"q5_K", 256, 176},
	[DT_Q6_K] = {"q6_K", 256, 210},  [DT_Q8_K] = {"q8_K", 256, 292},
	[DT_IQ4_NL] = {"iq4_nl", 32, 18}, [DT_IQ4_XS] = {"iq4_xs", 256, 136},
	[DT_I8] = {"i8", 1, 1},          [DT_I16] = {"i16", 1, 2},
	[DT_I32] = {"i32", 1, 4},        [DT_I64] = {"i64", 1, 8},
	[DT_F64] = {"f64", 1, 8},        [DT_BF16] = {"bf16", 1, 2},
};

bool dtype_is_known(uint32_t id)
{
	return id < DT_COUNT && types[id].name != NULL;
}

const char *dtype_name(uint32_t id)
{
	return dtype_is_known(id) ? types[id].name : "?";
}

int64_t dtype_block_elems(enum dtype t)
{
	return dtype_is_known(t) ? types[t].block_elems : 0;
}

int64_t dtype_block_bytes(enum dtype t)
{
	return dtype_is_known(t) ? types[t].block_bytes : 0;
}

int64_t dtype_row_bytes(enum dtype t, int64_t n)
{
	if (!dtype_is_known(t) || n < 0 || n % types[t].block_elems)
		return -1;
	return n / types[t].block_elems * types[t].block_bytes;
}
