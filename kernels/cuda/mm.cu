/* kernels/cuda/mm.cu: matmuls and embedding rows for every weight type.
 *
 * All weight types are read through one device function per type, load8,
 * which dequantizes 8 consecutive values of a row in registers (GGUF block
 * layouts as kernels/quant.h describes them). Two paths:
 *  - few rows (decode, small verification batches): a matrix-vector kernel,
 *    one warp per weight row, reading the row once per 8 activation rows,
 *    with f32 activations and f32 accumulation (bandwidth bound);
 *  - many rows (prefill): cuBLAS GEMM with FP32 accumulation: f32 weights in
 *    plain FP32; f16/bf16 weights with the activations converted to the same
 *    type; quantized weights dequantized to f16 in slices of output rows.
 * Unlike the CPU backend, the two paths round differently, so a row's result
 * can change with the number of rows in the call (within float rounding). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/deq.cuh"

/* Rows up to which the matrix-vector kernel is used: 8 per pass, and for
 * quantized weights up to 4 passes before dequantizing for cuBLAS pays. */
#define MV_ROWS 8
#define MV_MAX_ROWS_F 8
#define MV_MAX_ROWS_Q 32
#define MV_WARPS 4
/* Output rows dequantized to f16 per cuBLAS call (bounds the scratch). */
#define DEQ_SLICE_ELEMS ((int64_t)1 << 25)

/* Block bytes and values of the GGUF types we read (kernels/dtype.c). */
static inline int64_t row_bytes(enum dtype t, int64_t k)
{
	switch (t) {
	case DT_F32: return 4 * k;
	case DT_F16: case DT_BF16: return 2 * k;
	case DT_Q8_0: return k / 32 * 34;
	case DT_Q4_0: return k / 32 * 18;
	case DT_Q4_K: return k / 256 * 144;
	case DT_Q5_K: return k / 256 * 176;
	case DT_Q6_K: return k / 256 * 210;
	default: return -1;
	}
}

bool cu_supports(enum dtype t)
{
	return row_bytes(t, 256) > 0;
}

/* ---- matrix-vector: y[t][o] for t in [t0, t0 + NC), one warp per o ---- */

template <int WT, int NC>
__global__ void __launch_bounds__(32 * MV_WARPS)
matvec_k(float *y, const float *x, const uint8_t *w, int64_t ldw, int64_t k, int64_t n, int64_t n_out)
{
	int lane = threadIdx.x % 32;
	int64_t o = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x / 32;
	int64_t t0 = (int64_t)blockIdx.y * NC;
	if (o >= n_out)
		return;
	int nc = (int)min((int64_t)NC, n - t0);
	const uint8_t *row = w + o * ldw;
	const float *xs = x + t0 * k;
	float acc[NC];
	for (int c = 0; c < NC; c++)
		acc[c] = 0;
#pragma unroll 2
	for (int64_t g = lane; g < k / 8; g += 32) {
		float v[8];
		load8<WT>(row, g, v);
#pragma unroll
		for (int c = 0; c < NC; c++) {
			if (c >= nc)
				break;
			const float4 *xp = (const float4 *)(xs + c * k) + 2 * g;
			float4 a = xp[0], b = xp[1];
			acc[c] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w +
				  v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
		}
	}
#pragma unroll
	for (int c = 0; c < NC; c++) {
		float s = acc[c];
		for (int off = 16; off > 0; off /= 2)
			s += __shfl_xor_sync(0xffffffffu, s, off);
		if (lane == 0 && c < nc)
			y[(t0 + c) * n_out + o] = s;
	}
}

template <int WT>
static void matvec(float *y, const float *x, const void *w, int64_t n, int64_t k, int64_t n_out)
{
	dim3 grid(cu_blocks(n_out, MV_WARPS), 1);
	const uint8_t *wb = (const uint8_t *)w;
	int64_t ldw = row_bytes((enum dtype)WT, k);
	if (n == 1) {
		matvec_k<WT, 1><<<grid, 32 * MV_WARPS>>>(y, x, wb, ldw, k, n, n_out);
	} else {
		grid.y = cu_blocks(n, MV_ROWS);
		matvec_k<WT, MV_ROWS><<<grid, 32 * MV_WARPS>>>(y, x, wb, ldw, k, n, n_out);
	}
	CU_LAUNCHED();
}

/* ---- dequantization and conversions for cuBLAS ---- */

/* dst[r][k] f16 = rows [0, rows) of w; one thread per 8 values. */
template <int WT>
__global__ void deq_f16_k(__half *dst, const uint8_t *w, int64_t ldw, int64_t k, int64_t rows)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = k / 8;
	if (i >= rows * per)
		return;
	float v[8];
	load8<WT>(w + i / per * ldw, i % per, v);
	__align__(16) __half h[8];
	for (int j = 0; j < 8; j++)
		h[j] = __float2half_rn(v[j]);
	*(uint4 *)(dst + i * 8) = *(const uint4 *)h;
}

/* dst[i] = x[i] as f16 (bf = false) or bf16, round to nearest even. */
__global__ void to_half_k(void *dst, const float *x, int64_t n, bool bf)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	if (bf)
		((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x[i]);
	else
		((__half *)dst)[i] = __float2half_rn(x[i]);
}

/* y[n][ldy] (columns [0, m)) = x[n][k] . w[m][k]^T, FP32 accumulation. */
static void gemm(float *y, int64_t ldy, const void *x, const void *w, cudaDataType t,
		 int64_t n, int64_t k, int64_t m)
{
	const float one = 1.0f, zero = 0.0f;
	BLAS_CHECK(cublasGemmEx(cu_blas(), CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one,
				w, t, (int)k, x, t, (int)k, &zero, y, CUDA_R_32F, (int)ldy,
				CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

typedef void (*deq_fn)(__half *, const uint8_t *, int64_t, int64_t, int64_t);

template <int WT>
static void deq_launch(__half *dst, const uint8_t *w, int64_t ldw, int64_t k, int64_t rows)
{
	deq_f16_k<WT><<<cu_blocks(rows * (k / 8), 256), 256>>>(dst, w, ldw, k, rows);
	CU_LAUNCHED();
}

static void gemm_path(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k,
		      int64_t n_out)
{
	if (wt == DT_F32) {
		gemm(y, n_out, x, w, CUDA_R_32F, n, k, n_out);
		return;
	}
	bool bf = wt == DT_BF16;
	int64_t slice = wt == DT_F16 || bf ? 0 : MAX(1, MIN(n_out, DEQ_SLICE_ELEMS / k));
	uint8_t *s = (uint8_t *)cu_scratch((size_t)(n * k + slice * k) * 2 + 256);
	void *xh = s, *wh = s + ((n * k * 2 + 255) & ~(int64_t)255);
	to_half_k<<<cu_blocks(n * k, 256), 256>>>(xh, x, n * k, bf);
	CU_LAUNCHED();
	if (!slice) {
		gemm(y, n_out, xh, w, bf ? CUDA_R_16BF : CUDA_R_16F, n, k, n_out);
		return;
	}
	static const struct { enum dtype t; deq_fn fn; } deq[] = {
		{DT_Q8_0, deq_launch<DT_Q8_0>}, {DT_Q4_0, deq_launch<DT_Q4_0>}, {DT_Q4_K, deq_launch<DT_Q4_K>},
		{DT_Q5_K, deq_launch<DT_Q5_K>}, {DT_Q6_K, deq_launch<DT_Q6_K>},
	};
	deq_fn fn = NULL;
	for (size_t i = 0; i < ARRAY_LEN(deq); i++)
		if (deq[i].t == wt)
			fn = deq[i].fn;
	if (!fn)
		fatal("cuda matmul: weight type %s", dtype_name(wt));
	int64_t ldw = row_bytes(wt, k);
	for (int64_t o0 = 0; o0 < n_out; o0 += slice) {
		int64_t m = MIN(slice, n_out - o0);
		fn((__half *)wh, (const uint8_t *)w + o0 * ldw, ldw, k, m);
		gemm(y + o0, n_out, xh, wh, CUDA_R_16F, n, k, m);
	}
}

void cu_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out)
{
	if (n <= 0 || n_out <= 0)
		return;
	bool quant = wt != DT_F32 && wt != DT_F16 && wt != DT_BF16;
	int64_t mv_max = quant ? MV_MAX_ROWS_Q : MV_MAX_ROWS_F;
	/* the vector kernel reads 8 values at a time, 16-byte aligned for plain types */
	if (n > mv_max || k % 8) {
		gemm_path(y, x, w, wt, n, k, n_out);
		return;
	}
	switch (wt) {
	case DT_F32: matvec<DT_F32>(y, x, w, n, k, n_out); break;
	case DT_F16: matvec<DT_F16>(y, x, w, n, k, n_out); break;
	case DT_BF16: matvec<DT_BF16>(y, x, w, n, k, n_out); break;
	case DT_Q8_0: matvec<DT_Q8_0>(y, x, w, n, k, n_out); break;
	case DT_Q4_0: matvec<DT_Q4_0>(y, x, w, n, k, n_out); break;
	case DT_Q4_K: matvec<DT_Q4_K>(y, x, w, n, k, n_out); break;
	case DT_Q5_K: matvec<DT_Q5_K>(y, x, w, n, k, n_out); break;
	case DT_Q6_K: matvec<DT_Q6_K>(y, x, w, n, k, n_out); break;
	default: fatal("cuda matmul: weight type %s", dtype_name(wt));
	}
}

/* ---- embedding rows ---- */

/* Block types (and plain ones with dim % 8 == 0): one thread per 8 values. */
template <int WT>
__global__ void embed8_k(float *y, const uint8_t *table, int64_t ldt, const int32_t *ids, int64_t n, int64_t dim)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = dim / 8;
	if (i >= n * per)
		return;
	int64_t t = i / per, g = i % per;
	float v[8];
	load8<WT>(table + ids[t] * ldt, g, v);
	for (int j = 0; j < 8; j++)
		y[t * dim + 8 * g + j] = v[j];
}

/* Plain types of any width: one thread per value. */
__global__ void embed1_k(float *y, const uint8_t *table, int wt, const int32_t *ids, int64_t n, int64_t dim)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n * dim)
		return;
	int64_t t = i / dim, d = i % dim, id = ids[t];
	if (wt == DT_F32) {
		y[i] = ((const float *)table)[id * dim + d];
	} else {
		unsigned short u = ((const unsigned short *)table)[id * dim + d];
		y[i] = wt == DT_F16 ? f16_bits(u) : bf16_bits(u);
	}
}

template <int WT>
static void embed8(float *y, const void *table, const int32_t *ids, int64_t n, int64_t dim)
{
	embed8_k<WT><<<cu_blocks(n * (dim / 8), 256), 256>>>(y, (const uint8_t *)table,
							     row_bytes((enum dtype)WT, dim), ids, n, dim);
	CU_LAUNCHED();
}

void cu_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim)
{
	if (n <= 0)
		return;
	switch (t) {
	case DT_F32: case DT_F16: case DT_BF16:
		embed1_k<<<cu_blocks(n * dim, 256), 256>>>(y, (const uint8_t *)table, t, ids, n, dim);
		CU_LAUNCHED();
		break;
	case DT_Q8_0: embed8<DT_Q8_0>(y, table, ids, n, dim); break;
	case DT_Q4_0: embed8<DT_Q4_0>(y, table, ids, n, dim); break;
	case DT_Q4_K: embed8<DT_Q4_K>(y, table, ids, n, dim); break;
	case DT_Q5_K: embed8<DT_Q5_K>(y, table, ids, n, dim); break;
	case DT_Q6_K: embed8<DT_Q6_K>(y, table, ids, n, dim); break;
	default: fatal("cuda embed: type %s", dtype_name(t));
	}
}
