/* kernels/cuda/mm.cu: matmuls and embedding rows for every weight type.
 *
 * All weight types are read through one device function per type, load8,
 * which dequantizes 8 consecutive values of a row in registers (GGUF block
 * layouts as kernels/quant.h describes them). Two paths:
 *  - few rows (decode, small verification batches): a matrix-vector kernel.
 *    A block computes MV_R consecutive weight rows for up to MV_ROWS
 *    activation rows, its threads spread over the input width (8 values
 *    each per step) and their sums added through shared memory. Every
 *    activation load serves MV_R weight rows: at batch 1 the f32
 *    activations, not the weights, would otherwise be most of what the
 *    multiprocessors load (7 bytes of x per byte of q4_K), and a 4096-wide
 *    row is read by 128 threads at once. f32 activations and accumulation.
 *  - many rows (prefill): cuBLAS GEMM with FP32 accumulation: f32 weights in
 *    plain FP32; bf16 weights with the activations as bf16; f16 weights, and
 *    quantized ones dequantized to f16 in slices of output rows, with the
 *    activations scaled by the power of two that brings the batch's largest
 *    |value| into [2^14, 2^15) before they are rounded to f16, and the
 *    product scaled back by the GEMM's alpha (read from device memory, so no
 *    wait): f16 ends at 65504, and a power of two changes no value's bits
 *    (subnormals aside), so results are what unscaled f16 would give where
 *    that does not overflow.
 * Unlike the CPU backend, the two paths round differently, so a row's result
 * can change with the number of rows in the call (within float rounding). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/mvq.cuh"

/* Rows up to which the matrix-vector kernels are used: 8 per pass, and for
 * quantized weights up to 4 passes before dequantizing for cuBLAS pays. */
#define MV_ROWS 8
#define MV_MAX_ROWS_F 8
#define MV_MAX_ROWS_Q 32
#define MV_THREADS 128
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
	case DT_Q4_1: return k / 32 * 20;
	case DT_Q5_0: return k / 32 * 22;
	case DT_Q5_1: return k / 32 * 24;
	case DT_IQ4_NL: return k / 32 * 18;
	case DT_Q2_K: return k / 256 * 84;
	case DT_Q3_K: return k / 256 * 110;
	case DT_IQ4_XS: return k / 256 * 136;
	default: return -1;
	}
}

bool cu_supports(enum dtype t)
{
	return row_bytes(t, 256) > 0;
}

/* ---- float matrix-vector: y[t][o] for t in [t0, t0 + NC), o in [o0, o0 + R) ---- */

/* Weight rows per matrix-vector block (f32 rows are big enough with two). */
template <int WT> struct mv_r {
	enum { R = WT == DT_F32 ? 2 : 4 };
};

/* f32, f16 and bf16 weights with f32 activations. Rows past n_out read the
 * last row again (no branch per row) and are not stored. */
template <int WT, int NC, int R>
__global__ void __launch_bounds__(MV_THREADS)
matvec_k(float *y, const float *x, const uint8_t *w, int64_t ldw, int64_t k, int64_t n, int64_t n_out)
{
	__shared__ float part[MV_THREADS / 32][R * NC];
	int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	int64_t o0 = (int64_t)blockIdx.x * R, t0 = (int64_t)blockIdx.y * NC;
	int nr = (int)min((int64_t)R, n_out - o0), nc = (int)min((int64_t)NC, n - t0);
	const float *xs = x + t0 * k;
	const uint8_t *wr[R];
	float acc[R][NC];
#pragma unroll
	for (int r = 0; r < R; r++) {
		wr[r] = w + min(o0 + r, n_out - 1) * ldw;
#pragma unroll
		for (int c = 0; c < NC; c++)
			acc[r][c] = 0;
	}
#pragma unroll 2
	for (int64_t g = tid; g < k / 8; g += MV_THREADS) {
		float v[R][8];
#pragma unroll
		for (int r = 0; r < R; r++)
			load8<WT>(wr[r], g, v[r]);
#pragma unroll
		for (int c = 0; c < NC; c++) {
			if (c >= nc)
				break;
			const float4 *xp = (const float4 *)(xs + c * k) + 2 * g;
			float4 a = xp[0], b = xp[1];
#pragma unroll
			for (int r = 0; r < R; r++)
				acc[r][c] += v[r][0] * a.x + v[r][1] * a.y + v[r][2] * a.z + v[r][3] * a.w +
					     v[r][4] * b.x + v[r][5] * b.y + v[r][6] * b.z + v[r][7] * b.w;
		}
	}
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int c = 0; c < NC; c++) {
			float s = acc[r][c];
			for (int off = 16; off > 0; off /= 2)
				s += __shfl_xor_sync(0xffffffffu, s, off);
			if (lane == 0)
				part[warp][r * NC + c] = s;
		}
	__syncthreads();
	if (tid < R * NC) {
		int r = tid / NC, c = tid % NC;
		float s = 0;
		for (int i = 0; i < MV_THREADS / 32; i++)
			s += part[i][tid];
		if (r < nr && c < nc)
			y[(t0 + c) * n_out + o0 + r] = s;
	}
}

template <int WT>
static void matvec(float *y, const float *x, const void *w, int64_t n, int64_t k, int64_t n_out)
{
	const int R = mv_r<WT>::R;
	dim3 grid(cu_blocks(n_out, R), 1);
	const uint8_t *wb = (const uint8_t *)w;
	int64_t ldw = row_bytes((enum dtype)WT, k);
	if (n == 1) {
		matvec_k<WT, 1, R><<<grid, MV_THREADS, 0, cu_stream()>>>(y, x, wb, ldw, k, n, n_out);
	} else {
		grid.y = cu_blocks(n, MV_ROWS);
		matvec_k<WT, MV_ROWS, R><<<grid, MV_THREADS, 0, cu_stream()>>>(y, x, wb, ldw, k, n, n_out);
	}
	CU_LAUNCHED();
}

/* ---- quantized matrix-vector: int8 activations, dp4a (mvq.cuh) ----
 * A block of MV_THREADS threads computes MVQ_R weight rows (of one of up to
 * KERN_MM_GROUP_MAX matrices sharing the input: Q/K/V, gate/up) for NC
 * activation rows. Its threads take consecutive positions of the rows
 * (mvq.cuh), MV_THREADS apart: a row is split over the whole block (split-K:
 * a 4096-wide q4_K row is one position per thread), and each thread issues
 * the loads of all its MVQ_R rows before it uses the first. Rows past n_out
 * read the last row again (no branch per row) and are not stored. The
 * partial sums meet through warp shuffles and shared memory. */

#define MVQ_R 4

typedef struct mvq_mat {
	float *y;                /* [n][n_out] */
	const uint8_t *w;
	int64_t n_out, ldw;
	unsigned b0;             /* the matrix's first block */
} mvq_mat;

typedef struct mvq_args {
	mvq_mat m[KERN_MM_GROUP_MAX];
	int n_m;
	const int8_t *xq;        /* [n][k] */
	const float *xd;         /* [n][k / B] */
	int64_t k, n;
} mvq_args;

template <int WT, int NC>
__global__ void __launch_bounds__(MV_THREADS) mv_q(mvq_args a)
{
	typedef mvq<WT> T;
	__shared__ float part[MV_THREADS / 32][MVQ_R * NC];
	int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, mi = 0;
	for (int i = 1; i < a.n_m; i++)
		mi = blockIdx.x >= a.m[i].b0 ? i : mi;
	const mvq_mat M = a.m[mi];
	int64_t o0 = (int64_t)(blockIdx.x - M.b0) * MVQ_R, t0 = (int64_t)blockIdx.y * NC;
	int nc = (int)min((int64_t)NC, a.n - t0), P = (int)(a.k * T::P / 256), B = xq_block(WT);
	const uint8_t *wr[MVQ_R];
	xq_row xr[NC];
	float acc[MVQ_R][NC];
#pragma unroll
	for (int r = 0; r < MVQ_R; r++) {
		wr[r] = M.w + min(o0 + r, M.n_out - 1) * M.ldw;
#pragma unroll
		for (int c = 0; c < NC; c++)
			acc[r][c] = 0;
	}
#pragma unroll
	for (int c = 0; c < NC; c++) {
		int64_t t = t0 + min(c, nc - 1);
		xr[c].q = a.xq + t * a.k;
		xr[c].d = a.xd + t * (a.k / B);
	}
#pragma unroll 1
	for (int p = tid; p < P; p += MV_THREADS) {
		typename T::W w[MVQ_R];
#pragma unroll
		for (int r = 0; r < MVQ_R; r++)
			T::load(wr[r], p, &w[r]);
#pragma unroll
		for (int c = 0; c < NC; c++) {
			if (c >= nc)
				break;
			typename T::X x;
			T::xload(xr[c], p, &x);
#pragma unroll
			for (int r = 0; r < MVQ_R; r++)
				acc[r][c] += T::dot(&w[r], &x, p);
		}
	}
#pragma unroll
	for (int r = 0; r < MVQ_R; r++)
#pragma unroll
		for (int c = 0; c < NC; c++) {
			float s = acc[r][c];
			for (int off = 16; off > 0; off /= 2)
				s += __shfl_xor_sync(0xffffffffu, s, off);
			if (lane == 0)
				part[warp][r * NC + c] = s;
		}
	__syncthreads();
	if (tid < MVQ_R * NC) {
		int r = tid / NC, c = tid % NC;
		float s = 0;
		for (int i = 0; i < MV_THREADS / 32; i++)
			s += part[i][tid];
		if (o0 + r < M.n_out && c < nc)
			M.y[(t0 + c) * M.n_out + o0 + r] = s;
	}
}

/* One thread per 8 activations: x[n * k] (k a multiple of B) quantized in
 * blocks of B (B / 8 neighbouring lanes find a block's largest |x|). */
template <int B>
__global__ void xq_quant_k(int8_t *q, float *d, const float *x, int64_t n8)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	float v[8] = {0, 0, 0, 0, 0, 0, 0, 0}, amax = 0;
	if (i < n8) {
		float4 a = ((const float4 *)x)[2 * i], b = ((const float4 *)x)[2 * i + 1];
		v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
	}
	for (int j = 0; j < 8; j++)
		amax = fmaxf(amax, fabsf(v[j]));
	for (int o = B / 16; o > 0; o /= 2)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
	uint32_t c[2];
	xq_code8(v, amax, c);
	if (i < n8) {
		((uint2 *)q)[i] = make_uint2(c[0], c[1]);
		if (i % (B / 8) == 0)
			d[i / (B / 8)] = xq_scale(amax);
	}
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

/* *amax (float bits, 0 before) = the largest |x[i]|; NaN is passed over. */
__global__ void amax_k(unsigned *amax, const float *x, int64_t n)
{
	float m = 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		m = fmaxf(m, fabsf(x[i]));
	for (int o = 16; o > 0; o /= 2)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if (threadIdx.x % 32 == 0)
		atomicMax(amax, __float_as_uint(m)); /* non-negative floats order as their bits */
}

/* The power of two that brings amax into [2^14, 2^15); 1 for 0, inf, NaN. */
static __device__ float f16_fit(float amax)
{
	if (!(amax > 0) || isinf(amax))
		return 1.0f;
	int e;
	frexpf(amax, &e); /* amax = m 2^e, m in [0.5, 1) */
	return ldexpf(1.0f, max(-126, min(126, 15 - e)));
}

/* dst[i] = x[i] times f16_fit(*amax) as f16; *alpha = the inverse factor. */
__global__ void to_f16_k(__half *dst, float *alpha, const unsigned *amax, const float *x, int64_t n)
{
	float f = f16_fit(__uint_as_float(*amax));
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i == 0)
		*alpha = 1.0f / f;
	if (i < n)
		dst[i] = __float2half_rn(x[i] * f);
}

/* dst[i] = x[i] as bf16 (f32's range: no scaling), round to nearest even. */
__global__ void to_bf16_k(__nv_bfloat16 *dst, const float *x, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		dst[i] = __float2bfloat16_rn(x[i]);
}

/* y[n][ldy] (columns [0, m)) = alpha * x[n][k] . w[m][k]^T, FP32 accumulation. */
static void gemm(float *y, int64_t ldy, const void *x, const void *w, cudaDataType t, int64_t n, int64_t k,
		 int64_t m, const float *alpha)
{
	cu_blas_ok(cublasGemmEx(cu_blas(), CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)k, alpha, w, t, (int)k, x,
				t, (int)k, cu_consts() + 1, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
				CUBLAS_GEMM_DEFAULT),
		   "cublasGemmEx");
}

typedef void (*deq_fn)(__half *, const uint8_t *, int64_t, int64_t, int64_t);

template <int WT>
static void deq_launch(__half *dst, const uint8_t *w, int64_t ldw, int64_t k, int64_t rows)
{
	deq_f16_k<WT><<<cu_blocks(rows * (k / 8), 256), 256, 0, cu_stream()>>>(dst, w, ldw, k, rows);
	CU_LAUNCHED();
}

static deq_fn deq_for(enum dtype wt)
{
	switch (wt) {
	case DT_Q8_0: return deq_launch<DT_Q8_0>;
	case DT_Q4_0: return deq_launch<DT_Q4_0>;
	case DT_Q4_K: return deq_launch<DT_Q4_K>;
	case DT_Q5_K: return deq_launch<DT_Q5_K>;
	case DT_Q6_K: return deq_launch<DT_Q6_K>;
	case DT_Q4_1: return deq_launch<DT_Q4_1>;
	case DT_Q5_0: return deq_launch<DT_Q5_0>;
	case DT_Q5_1: return deq_launch<DT_Q5_1>;
	case DT_IQ4_NL: return deq_launch<DT_IQ4_NL>;
	case DT_Q2_K: return deq_launch<DT_Q2_K>;
	case DT_Q3_K: return deq_launch<DT_Q3_K>;
	case DT_IQ4_XS: return deq_launch<DT_IQ4_XS>;
	default: return NULL;
	}
}

static size_t align256(size_t n)
{
	return (n + 255) & ~(size_t)255;
}

/* Scratch of the GEMM path: n rows of k 16-bit activations, 256 bytes for
 * the scale, slice rows of k dequantized weights. */
static size_t gemm_bytes(int64_t n, int64_t k, int64_t slice)
{
	return align256((size_t)(n * k) * 2) + 256 + (size_t)(slice * k) * 2;
}

size_t cu_matmul_scratch(const kern_sizes *s)
{
	int64_t k = MAX(s->max_k, 1);
	return gemm_bytes(s->max_rows, k, MAX(1, DEQ_SLICE_ELEMS / k));
}

/* The activations as f16 scaled to fit (alpha: the factor back) or as bf16
 * (alpha: 1), into xh. */
static const float *to_16bit(void *xh, uint8_t *words, const float *x, int64_t n, bool bf)
{
	unsigned blocks = cu_blocks(n, 256);
	if (bf) {
		to_bf16_k<<<blocks, 256, 0, cu_stream()>>>((__nv_bfloat16 *)xh, x, n);
		CU_LAUNCHED();
		return cu_consts();
	}
	unsigned *amax = (unsigned *)(void *)words;
	float *alpha = (float *)(void *)(words + 4);
	cu_ok(cudaMemsetAsync(amax, 0, sizeof *amax, cu_stream()), "cudaMemsetAsync");
	amax_k<<<MIN(blocks, 4u * (unsigned)cu_n_sm()), 256, 0, cu_stream()>>>(amax, x, n);
	CU_LAUNCHED();
	to_f16_k<<<blocks, 256, 0, cu_stream()>>>((__half *)xh, alpha, amax, x, n);
	CU_LAUNCHED();
	return alpha;
}

static void gemm_path(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k,
		      int64_t n_out)
{
	if (wt == DT_F32) {
		gemm(y, n_out, x, w, CUDA_R_32F, n, k, n_out, cu_consts());
		return;
	}
	bool bf = wt == DT_BF16, plain = wt == DT_F16 || bf;
	int64_t slice = plain ? 0 : MAX(1, MIN(n_out, DEQ_SLICE_ELEMS / k));
	uint8_t *s = (uint8_t *)cu_scratch(gemm_bytes(n, k, slice));
	if (!s)
		return;
	uint8_t *words = s + align256((size_t)(n * k) * 2), *wh = words + 256;
	const float *alpha = to_16bit(s, words, x, n * k, bf);
	cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_16F;
	if (plain) {
		gemm(y, n_out, s, w, t, n, k, n_out, alpha);
		return;
	}
	deq_fn fn = deq_for(wt);
	assert(fn && "cu_supports lets only these types through");
	int64_t ldw = row_bytes(wt, k);
	for (int64_t o0 = 0; o0 < n_out; o0 += slice) {
		int64_t m = MIN(slice, n_out - o0);
		fn((__half *)(void *)wh, (const uint8_t *)w + o0 * ldw, ldw, k, m);
		gemm(y + o0, n_out, s, wh, t, n, k, m, alpha);
	}
}

/* ---- the quantized activations of the last input (cuda_int.cuh) ---- */

static struct act_cache {
	const float *src;        /* the f32 values xq holds quantized; NULL: none */
	int64_t total;           /* how many */
	int blk;                 /* in blocks of */
	int want;                /* the block of the last quantized matvec (0: none yet) */
} AC;

static size_t xq_bytes(int64_t total)
{
	return align256((size_t)total) + align256((size_t)(total / 32) * 4);
}

size_t cu_act_scratch_bytes(const kern_sizes *s)
{
	return xq_bytes(MIN(s->max_rows, (int64_t)MV_MAX_ROWS_Q) * MAX(s->max_k, 1));
}

void cu_act_touch(const void *p, size_t bytes)
{
	const uint8_t *a = (const uint8_t *)p, *s = (const uint8_t *)AC.src;
	if (s && a < s + AC.total * 4 && s < a + bytes)
		AC.src = NULL;
}

void cu_act_forget(void)
{
	AC.src = NULL;
}

/* The buffer of total quantized values in blocks of blk, or false (the
 * failure kept) when there is no room. */
static bool xq_buf(int64_t total, int blk, cu_xq *out)
{
	uint8_t *b = (uint8_t *)cu_act_scratch(xq_bytes(total));
	if (!b)
		return false;
	out->q = (int8_t *)b;
	out->d = (float *)(void *)(b + align256((size_t)total));
	out->blk = blk;
	return true;
}

bool cu_act_fuse(const float *y, int64_t total, cu_xq *out)
{
	int blk = AC.want;
	cu_act_touch(y, (size_t)total * 4);
	/* only into the room set aside (never growing it while recording) */
	if (!blk || total % blk || xq_bytes(total) > cu_act_scratch_cap() || !xq_buf(total, blk, out))
		return false;
	AC.src = y;
	AC.total = total;
	AC.blk = blk;
	return true;
}

/* x[n][k] quantized in blocks of blk: the cached copy when it holds x, else
 * quantized now (and cached). False when there is no room (failure kept). */
static bool xq_of(const float *x, int64_t n, int64_t k, int blk, cu_xq *out)
{
	int64_t total = n * k;
	AC.want = blk;
	if (!xq_buf(total, blk, out))
		return false;
	if (AC.src == x && AC.total == total && AC.blk == blk)
		return true;
	unsigned blocks = cu_blocks(total / 8, 256);
	if (blk == 256)
		xq_quant_k<256><<<blocks, 256, 0, cu_stream()>>>(out->q, out->d, x, total / 8);
	else
		xq_quant_k<32><<<blocks, 256, 0, cu_stream()>>>(out->q, out->d, x, total / 8);
	CU_LAUNCHED();
	AC.src = x;
	AC.total = total;
	AC.blk = blk;
	return true;
}

template <int WT>
static void mvq_launch(mvq_args *a)
{
	unsigned blocks = a->m[a->n_m - 1].b0 + cu_blocks(a->m[a->n_m - 1].n_out, MVQ_R);
	if (a->n == 1)
		mv_q<WT, 1><<<blocks, MV_THREADS, 0, cu_stream()>>>(*a);
	else
		mv_q<WT, MV_ROWS><<<dim3(blocks, cu_blocks(a->n, MV_ROWS)), MV_THREADS, 0, cu_stream()>>>(*a);
	CU_LAUNCHED();
}

static bool is_quant(enum dtype t)
{
	return t != DT_F32 && t != DT_F16 && t != DT_BF16 && row_bytes(t, 256) > 0;
}

/* The matmuls mm[0..n_mm) of type wt (quantized), all of x[n][k] with n <=
 * MV_MAX_ROWS_Q, in one launch. */
static void mvq_group(const kern_mm *mm, int n_mm, enum dtype wt, const float *x, int64_t n, int64_t k)
{
	cu_xq xq;
	if (!xq_of(x, n, k, xq_block(wt), &xq))
		return;
	mvq_args a = {};
	a.xq = xq.q;
	a.xd = xq.d;
	a.k = k;
	a.n = n;
	for (int i = 0; i < n_mm; i++) {
		cu_act_touch(mm[i].y, (size_t)(n * mm[i].n_out) * 4);
		a.m[i] = (mvq_mat){mm[i].y, (const uint8_t *)mm[i].w, mm[i].n_out, row_bytes(wt, k),
				   i ? a.m[i - 1].b0 + cu_blocks(a.m[i - 1].n_out, MVQ_R) : 0u};
	}
	a.n_m = n_mm;
	switch (wt) {
	case DT_Q8_0: mvq_launch<DT_Q8_0>(&a); break;
	case DT_Q4_0: mvq_launch<DT_Q4_0>(&a); break;
	case DT_Q4_K: mvq_launch<DT_Q4_K>(&a); break;
	case DT_Q5_K: mvq_launch<DT_Q5_K>(&a); break;
	case DT_Q6_K: mvq_launch<DT_Q6_K>(&a); break;
	case DT_Q4_1: mvq_launch<DT_Q4_1>(&a); break;
	case DT_Q5_0: mvq_launch<DT_Q5_0>(&a); break;
	case DT_Q5_1: mvq_launch<DT_Q5_1>(&a); break;
	case DT_IQ4_NL: mvq_launch<DT_IQ4_NL>(&a); break;
	case DT_Q2_K: mvq_launch<DT_Q2_K>(&a); break;
	case DT_Q3_K: mvq_launch<DT_Q3_K>(&a); break;
	case DT_IQ4_XS: mvq_launch<DT_IQ4_XS>(&a); break;
	default: assert(0 && "is_quant lets only these types through");
	}
}

void cu_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out)
{
	if (n <= 0 || n_out <= 0 || cu_failed())
		return;
	/* vector loads: weights on 16 bytes (models/llama.c lays them out so),
	 * activations from buf_alloc */
	assert(((uintptr_t)w & 15) == 0 && ((uintptr_t)x & 15) == 0);
	if (is_quant(wt) && n <= MV_MAX_ROWS_Q) {
		kern_mm m = {y, w, wt, n_out};
		mvq_group(&m, 1, wt, x, n, k);
		return;
	}
	cu_act_touch(y, (size_t)(n * n_out) * 4);
	/* the vector kernel reads 8 values at a time */
	if (is_quant(wt) || n > MV_MAX_ROWS_F || k % 8) {
		gemm_path(y, x, w, wt, n, k, n_out);
		return;
	}
	switch (wt) {
	case DT_F32: matvec<DT_F32>(y, x, w, n, k, n_out); break;
	case DT_F16: matvec<DT_F16>(y, x, w, n, k, n_out); break;
	case DT_BF16: matvec<DT_BF16>(y, x, w, n, k, n_out); break;
	default: assert(0 && "cu_supports lets only these types through");
	}
}

void cu_matmul_group(const kern_mm *mm, int n_mm, const float *x, int64_t n, int64_t k)
{
	if (n <= 0 || cu_failed())
		return;
	bool done[KERN_MM_GROUP_MAX] = {false};
	assert(n_mm <= KERN_MM_GROUP_MAX && ((uintptr_t)x & 15) == 0);
	/* decode-sized: one launch per weight type over its matrices */
	for (int i = 0; i < n_mm && n <= MV_MAX_ROWS_Q; i++) {
		kern_mm same[KERN_MM_GROUP_MAX];
		int n_same = 0;
		for (int j = i; j < n_mm && is_quant(mm[i].wt); j++)
			if (!done[j] && mm[j].wt == mm[i].wt) {
				same[n_same++] = mm[j];
				done[j] = true;
			}
		if (n_same)
			mvq_group(same, n_same, mm[i].wt, x, n, k);
	}
	for (int i = 0; i < n_mm; i++)
		if (!done[i])
			cu_matmul(mm[i].y, x, mm[i].w, mm[i].wt, n, k, mm[i].n_out);
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
	embed8_k<WT><<<cu_blocks(n * (dim / 8), 256), 256, 0, cu_stream()>>>(y, (const uint8_t *)table,
									     row_bytes((enum dtype)WT, dim), ids, n, dim);
	CU_LAUNCHED();
}

void cu_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim)
{
	if (n <= 0 || cu_failed())
		return;
	cu_act_touch(y, (size_t)(n * dim) * 4);
	assert(((uintptr_t)table & 15) == 0);
	switch (t) {
	case DT_F32: case DT_F16: case DT_BF16:
		embed1_k<<<cu_blocks(n * dim, 256), 256, 0, cu_stream()>>>(y, (const uint8_t *)table, t, ids, n, dim);
		CU_LAUNCHED();
		break;
	case DT_Q8_0: embed8<DT_Q8_0>(y, table, ids, n, dim); break;
	case DT_Q4_0: embed8<DT_Q4_0>(y, table, ids, n, dim); break;
	case DT_Q4_K: embed8<DT_Q4_K>(y, table, ids, n, dim); break;
	case DT_Q5_K: embed8<DT_Q5_K>(y, table, ids, n, dim); break;
	case DT_Q6_K: embed8<DT_Q6_K>(y, table, ids, n, dim); break;
	case DT_Q4_1: embed8<DT_Q4_1>(y, table, ids, n, dim); break;
	case DT_Q5_0: embed8<DT_Q5_0>(y, table, ids, n, dim); break;
	case DT_Q5_1: embed8<DT_Q5_1>(y, table, ids, n, dim); break;
	case DT_IQ4_NL: embed8<DT_IQ4_NL>(y, table, ids, n, dim); break;
	case DT_Q2_K: embed8<DT_Q2_K>(y, table, ids, n, dim); break;
	case DT_Q3_K: embed8<DT_Q3_K>(y, table, ids, n, dim); break;
	case DT_IQ4_XS: embed8<DT_IQ4_XS>(y, table, ids, n, dim); break;
	default: assert(0 && "cu_supports lets only these types through");
	}
}
