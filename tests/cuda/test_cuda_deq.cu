/* tests/cuda/test_cuda_deq.cu: the CUDA backend's value arithmetic, compiled
 * for the host: the in-register dequantization (kernels/cuda/deq.cuh) against
 * quant_dequantize_row for every weight type, and the KV row reads and
 * writes (kernels/cuda/kvrow.cuh) against kv_load_head / kv_store_row for
 * every KV type, on random rows (with NaN, infinities and values whose fp8
 * candidate scales overflow f16), including the warp's pick of an fp8 scale
 * (kv_write_k's butterfly, lane by lane). Rows of an odd number of blocks
 * start off a 4-byte boundary for q8_0, q4_0 and q6_K, as in a tensor.
 * The quantized matrix-vector arithmetic (kernels/cuda/mvq.cuh): the int8
 * activation codes and scales against qact_quantize_row (bit for bit), and
 * each type's position-by-position dot products, summed as a row, against
 * quant_dot_qact (the CPU's integer sums) on rows of even and odd block
 * counts, activations with a zero block and extreme values.
 * Needs no GPU: `make test` runs it in CUDA builds. (The kernels' thread
 * layout is checked only by make test-cuda.) */
#include "kernels/cuda/deq.cuh"
#include "kernels/cuda/kvrow.cuh"
#include "kernels/cuda/mvq.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the C headers, with C11's keywords spelled for C++ */
#define _Noreturn __attribute__((noreturn))
#define _Static_assert static_assert
extern "C" {
#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "kernels/quant.h"
}
#undef _Static_assert
#undef _Noreturn

static int pass, fail;

/* k: 1024, or a width of an odd number of blocks (rows then start 2 bytes
 * off a word for q8_0, q4_0 and q6_K); 64 bytes after the rows, as a device
 * tensor has its padding (load8 may read 2 bytes past a row's end). */
template <int WT>
static void check_type(uint64_t *rng, bool odd)
{
	bool kq = dtype_block_elems((enum dtype)WT) == 256, plain = WT == DT_F32 || WT == DT_F16 || WT == DT_BF16;
	const int64_t k = !odd ? 1024 : kq ? 1280 : plain ? 1032 : 1056, rows = 5;
	int64_t rb = dtype_row_bytes((enum dtype)WT, k);
	float *x = (float *)malloc(sizeof(float) * k), *ref = (float *)malloc(sizeof(float) * k);
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)((rb * rows + 64 + 63) / 64 * 64));
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < k; i++) {
			*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
			x[i] = ((float)((*rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f) * (1.0f + (float)r);
		}
		quant_quantize_row((enum dtype)WT, x, w + r * rb, k);
	}
	int bad = 0;
	double worst = 0;
	for (int64_t r = 0; r < rows; r++) {
		quant_dequantize_row((enum dtype)WT, w + r * rb, ref, k);
		for (int64_t g = 0; g < k / 8; g++) {
			float v[8];
			load8<WT>(w + r * rb, g, v);
			for (int i = 0; i < 8; i++) {
				double d = fabs((double)v[i] - ref[8 * g + i]);
				worst = fmax(worst, d);
				bad += !(d <= 1e-6 * fmax(1.0, fabs(ref[8 * g + i])));
			}
		}
	}
	if (bad) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: load8<%s> k=%lld: %d values differ from quant_dequantize_row (worst %g)\n",
			__FILE__, __LINE__, dtype_name(WT), (long long)k, bad, worst);
	} else {
		pass++;
	}
	free(x);
	free(ref);
	free(w);
}

/* kv_write_k's pick of an fp8 head's scale, lane by lane: lane j scores
 * candidate j, then the butterfly keeps kv_fp8_before's winner. The
 * candidate every lane ends with, or -1 when the lanes disagree. */
static int warp_pick(const float *xh, int hd, float amax)
{
	float e[32], e2[32];
	int j[32], j2[32];
	for (int l = 0; l < 32; l++) {
		__half c;
		e[l] = kv_fp8_key(kv_fp8_try(xh, hd, amax, l, &c));
		j[l] = l;
	}
	for (int o = 16; o > 0; o /= 2) {
		for (int l = 0; l < 32; l++) {
			bool take = kv_fp8_before(e[l ^ o], j[l ^ o], e[l], j[l]);
			e2[l] = take ? e[l ^ o] : e[l];
			j2[l] = take ? j[l ^ o] : j[l];
		}
		memcpy(e, e2, sizeof e);
		memcpy(j, j2, sizeof j);
	}
	for (int l = 1; l < 32; l++)
		if (j[l] != j[0])
			return -1;
	return j[0];
}

/* A row written as kv_write_k does (per head: max |x|, scale, codes) equals
 * kv_store_row's bytes; kv_at reads back what kv_load_head does. special:
 * head 3 holds a NaN (1), an infinity (2), or values so large that the
 * higher fp8 candidate scales overflow f16 (3). */
static void check_kv(int t, uint64_t *rng, int special)
{
	const int n_heads = 4, hd = 64, n = n_heads * hd;
	float x[n_heads * hd], ref[hd];
	uint8_t want[1024], got[1024];
	int bad_pick = 0;
	for (int i = 0; i < n; i++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = ((float)((*rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f) * (float)(1 + i / hd * 3);
	}
	x[5] = 0; /* exact zero, and a head of zeros (scale 0) */
	for (int i = 2 * hd; i < 3 * hd; i++)
		x[i] = 0;
	if (special == 1)
		x[3 * hd + 7] = NAN;
	if (special == 2)
		x[3 * hd + 1] = -INFINITY;
	for (int i = 3 * hd; special == 3 && i < 4 * hd; i++)
		x[i] *= 2.5e7f;
	size_t rb = kv_row_bytes((enum kv_type)t, n_heads, hd);
	kv_store_row(want, x, (enum kv_type)t, n_heads, hd);
	memset(got, 0xee, sizeof got);
	if (t == KV_F32) {
		memcpy(got, x, sizeof x);
	} else if (t == KV_F16) {
		for (int i = 0; i < n; i++)
			((unsigned short *)got)[i] = kv_f16(x[i]);
	} else {
		for (int h = 0; h < n_heads; h++) {
			float amax = 0;
			for (int i = 0; i < hd; i++)
				amax = fmaxf(amax, fabsf(x[h * hd + i]));
			__half s16 = kv_scale_fit(x + h * hd, hd, amax, t), c;
			if (t == KV_FP8 && amax > 0) {
				int j = warp_pick(x + h * hd, hd, amax);
				kv_fp8_try(x + h * hd, hd, amax, j < 0 ? 0 : j, &c);
				bad_pick += j < 0 || __half_as_ushort(c) != __half_as_ushort(s16);
			}
			float sc = __half2float(s16), inv = sc > 0 ? 1.0f / sc : 0.0f;
			__half_raw raw = s16;
			got[n + 2 * h] = (uint8_t)(raw.x & 0xff);
			got[n + 2 * h + 1] = (uint8_t)(raw.x >> 8);
			for (int i = 0; i < hd; i++)
				got[h * hd + i] = kv_code(x[h * hd + i], inv, t);
		}
	}
	int bad = (memcmp(want, got, rb) != 0) + bad_pick;
	for (int h = 0; h < n_heads; h++) {
		kv_load_head(ref, want, (enum kv_type)t, n_heads, hd, h);
		for (int d = 0; d < hd; d++) {
			float a = kv_at(want, t, n, hd, h, d);
			bad += !(a == ref[d] || (isnan(a) && isnan(ref[d])));
		}
	}
	if (bad) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: kv row %s (case %d): written bytes, read values or the warp's "
			"scale pick differ (%d)\n", __FILE__, __LINE__, kv_type_name((enum kv_type)t), special, bad);
	} else {
		pass++;
	}
}


/* ---- quantized matrix-vector arithmetic (mvq.cuh) ---- */

static float rnd(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((*rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* The activation codes of x[k] as the kernels make them (xq_code8 over each
 * block's largest |x|) equal qact_quantize_row's bytes and scales. */
static bool xq_matches(enum dtype wt, const float *x, int64_t k, const uint8_t *qa)
{
	int blk = xq_block(wt);
	qact_view v = qact_view_of(wt, qa, k);
	int bad = 0;
	for (int64_t b = 0; b < k / blk; b++) {
		float amax = 0;
		for (int i = 0; i < blk; i++)
			amax = fmaxf(amax, fabsf(x[b * blk + i]));
		float d = xq_scale(amax);
		bad += memcmp(&v.d[b], &d, 4) != 0;
		for (int i = 0; i < blk; i += 8) {
			uint32_t c[2];
			xq_code8(x + b * blk + i, amax, c);
			bad += memcmp(c, v.q + b * blk + i, 8) != 0;
		}
	}
	return bad == 0;
}

/* Row r's dot as the kernel's threads compute it: every position's share,
 * added up (in float, in another order than the CPU's). */
template <int WT>
static double mvq_row_dot(const uint8_t *row, xq_row x, int64_t k, double *mag)
{
	typedef mvq<WT> T;
	double s = 0;
	*mag = 0;
	for (int p = 0; p < (int)(k * T::P / 256); p++) {
		typename T::W w;
		typename T::X xr;
		T::load(row, p, &w);
		T::xload(x, p, &xr);
		float part = T::dot(&w, &xr, p);
		s += part;
		*mag += fabs(part);
	}
	return s;
}

/* Rows of type WT (k of an even and of an odd number of blocks: rows then
 * start 2 bytes off a word for the 2-byte-aligned types) against
 * quant_dot_qact on the CPU's own quantized activations. */
template <int WT>
static void check_mvq(uint64_t *rng, bool odd)
{
	bool kq = dtype_block_elems((enum dtype)WT) == 256;
	const int64_t k = kq ? (odd ? 768 : 1024) : (odd ? 1056 : 1024), rows = 6;
	int64_t rb = dtype_row_bytes((enum dtype)WT, k);
	float *x = (float *)malloc(sizeof(float) * k), *wf = (float *)malloc(sizeof(float) * k);
	uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)((rb * rows + 64 + 63) / 64 * 64));
	uint8_t *qa = (uint8_t *)aligned_alloc(64, (size_t)qact_row_bytes((enum dtype)WT, k));
	for (int64_t i = 0; i < k; i++)
		x[i] = rnd(rng) * (i < 256 ? 30.0f : 1.0f);
	for (int64_t i = 256; i < 288; i++)
		x[i] = 0; /* a zero block of 32: scale 0 */
	x[300] = 1e6f;
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t i = 0; i < k; i++)
			wf[i] = rnd(rng) * (0.1f + (float)r);
		quant_quantize_row((enum dtype)WT, wf, w + r * rb, k);
	}
	qact_quantize_row((enum dtype)WT, x, qa, k);
	qact_view v = qact_view_of((enum dtype)WT, qa, k);
	xq_row xr = {v.q, v.d};
	int bad = !xq_matches((enum dtype)WT, x, k, qa);
	double worst = 0;
	for (int64_t r = 0; r < rows; r++) {
		double mag, got = mvq_row_dot<WT>(w + r * rb, xr, k, &mag);
		double want = quant_dot_qact((enum dtype)WT, w + r * rb, qa, k);
		double d = fabs(got - want) / (mag + 1e-30);
		worst = fmax(worst, d);
		bad += !(d <= 1e-4); /* each part is a difference of float products (q4_K/q5_K mins) */
	}
	if (bad) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: mvq<%s> k=%lld: %d rows or codes differ from the CPU's (worst %g of the "
			"sum of |parts|)\n", __FILE__, __LINE__, dtype_name(WT), (long long)k, bad, worst);
	} else {
		pass++;
	}
	free(x);
	free(wf);
	free(w);
	free(qa);
}

/* ---- decode attention's pieces (kvrow.cuh) and arithmetic (attn.cu) ---- */

/* Every lane's kv_lane values, put together, are the head's row as
 * kv_load_head reads it, for K and V of the layout of (kt, vt). */
static int check_lanes(const uint8_t *row, int t, int n_heads, int hd, int kt, int vt, bool is_v)
{
	att_layout ly = {};
	if (!att_layout_of(hd, kt, vt, &ly))
		return 1;
	int n = n_heads * hd, per = is_v ? ly.kv : ly.kk, nl = is_v ? ly.nv : ly.nk, bad = 0;
	size_t rb = kv_row_bytes((enum kv_type)t, n_heads, hd);
	bool a16 = rb % 16 == 0 && hd % 16 == 0;
	float ref[256], got[256], v[16];
	for (int h = 0; h < n_heads; h++) {
		kv_load_head(ref, row, (enum kv_type)t, n_heads, hd, h);
		for (int i = 0; i < hd; i++)
			got[i] = NAN;
		for (int li = 0; li < ly.L; li++) {
			kv_lane<16>(row, t, n, hd, h, li * per, li < nl ? per : 0, a16, v);
			for (int i = 0; i < 16; i++) {
				if (li < nl && i < per)
					got[li * per + i] = v[i];
				else
					bad += v[i] != 0; /* idle lanes and values read zeros */
			}
		}
		for (int i = 0; i < hd; i++)
			bad += memcmp(&got[i], &ref[i], 4) != 0;
	}
	return bad;
}

/* The heads' rows of every K/V type split among the lanes of every head
 * size, on rows that are and are not on 16 bytes (8 and 2 KV heads). */
static void check_att_layouts(uint64_t *rng)
{
	static const int hds[] = {64, 80, 96, 112, 128, 256, 48, 8};
	for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++)
		for (int nh = 2; nh <= 8; nh += 6)
			for (int kt = KV_F32; kt < KV_TYPE_COUNT; kt++)
				for (int vt = KV_F32; vt < KV_TYPE_COUNT; vt++) {
					int hd = hds[i], n = nh * hd, bad = 0;
					att_layout ly = {};
					if (!att_layout_of(hd, kt, vt, &ly)) {
						/* only heads that are not whole 16-byte chunks go to attention_k */
						bool whole = hd % kv_chunk_vals(kt) == 0 && hd % kv_chunk_vals(vt) == 0;
						if (whole) {
							fail++;
							fprintf(stderr, "%s:%d: FAIL: no layout for hd %d %s/%s\n", __FILE__,
								__LINE__, hd, kv_type_name((enum kv_type)kt),
								kv_type_name((enum kv_type)vt));
						}
						continue;
					}
					float *x = (float *)malloc(sizeof(float) * n);
					uint8_t *rk = (uint8_t *)calloc(1, kv_row_bytes((enum kv_type)kt, nh, hd) + 64);
					uint8_t *rv = (uint8_t *)calloc(1, kv_row_bytes((enum kv_type)vt, nh, hd) + 64);
					for (int j = 0; j < n; j++)
						x[j] = rnd(rng) * 3.0f;
					kv_store_row(rk, x, (enum kv_type)kt, nh, hd);
					kv_store_row(rv, x, (enum kv_type)vt, nh, hd);
					bad += check_lanes(rk, kt, nh, hd, kt, vt, false);
					bad += check_lanes(rv, vt, nh, hd, kt, vt, true);
					bad += ly.L > 32 || 32 % ly.L || ly.nk > ly.L || ly.nv > ly.L;
					if (bad) {
						fail++;
						fprintf(stderr, "%s:%d: FAIL: lanes of hd %d, %d heads, %s/%s: %d values differ "
							"from kv_load_head\n", __FILE__, __LINE__, hd, nh,
							kv_type_name((enum kv_type)kt), kv_type_name((enum kv_type)vt), bad);
					} else {
						pass++;
					}
					free(x);
					free(rk);
					free(rv);
				}
}

/* attn_dec_k's arithmetic for one (row t, KV head, query head h): every
 * key slot (warp, lane group) folds its keys in the kernel's order
 * (att_fold, log2 domain), the slots are joined, then the splits (att_join);
 * out[hd]. */
static void emul_head(float *out, const float *qh, const kern_attn *a, int t, int kvh, int n_split)
{
	att_layout ly = {};
	att_layout_of(a->head_dim, a->k_type, a->v_type, &ly);
	int hd = a->head_dim, kpw = 32 / ly.L, n = a->n_kv_heads * hd, step = AD_WARPS * kpw * AD_U;
	bool a16k = a->k_row % 16 == 0 && hd % 16 == 0, a16v = a->v_row % 16 == 0 && hd % 16 == 0;
	att_run tot = {-INFINITY, 0};
	float acc_t[256] = {0}, kx[256], vx[256], v[16];
	int32_t n_ctx = a->n_ctx[t], per = (n_ctx + n_split - 1) / n_split;
	for (int sp = 0; sp < n_split; sp++) {
		int32_t lo = MIN(n_ctx, sp * per), hi = MIN(n_ctx, lo + per);
		for (int s = 0; s < AD_WARPS * kpw; s++) {
			att_run st = {-INFINITY, 0};
			float acc[256] = {0}, fa, fb;
			for (int32_t j0 = lo + s * AD_U; j0 - s * AD_U < hi; j0 += step)
				for (int u = 0; u < AD_U; u++) {
					int32_t p = j0 + u;
					float sc = -INFINITY, pw;
					if (p < hi) {
						int64_t slot = (int64_t)a->table[t][p / a->block_tokens] * a->block_tokens +
							       p % a->block_tokens;
						const uint8_t *kr = (const uint8_t *)a->k + slot * a->k_row;
						const uint8_t *vr = (const uint8_t *)a->v + slot * a->v_row;
						for (int li = 0; li < ly.nk; li++) {
							kv_lane<16>(kr, a->k_type, n, hd, kvh, li * ly.kk, ly.kk, a16k, v);
							memcpy(kx + li * ly.kk, v, sizeof(float) * ly.kk);
						}
						for (int li = 0; li < ly.nv; li++) {
							kv_lane<16>(vr, a->v_type, n, hd, kvh, li * ly.kv, ly.kv, a16v, v);
							memcpy(vx + li * ly.kv, v, sizeof(float) * ly.kv);
						}
						sc = 0;
						for (int i = 0; i < hd; i++)
							sc += qh[i] * (a->scale * 1.4426950408889634f) * kx[i];
					}
					float corr = att_fold(&st, sc, &pw);
					for (int i = 0; i < hd; i++)
						acc[i] = acc[i] * corr + (p < hi ? pw * vx[i] : 0.0f);
				}
			att_join(&tot, st, &fa, &fb);
			for (int i = 0; i < hd; i++)
				acc_t[i] = acc_t[i] * fa + acc[i] * fb;
		}
	}
	for (int i = 0; i < hd; i++)
		out[i] = acc_t[i] / tot.l;
}

/* Three sequences (a decode at 41, a 5-query chunk at 10..14, a long decode
 * of 700) of random K/V in shuffled blocks: the emulated kernel against the
 * CPU's attention, every query head, with 1 and 13 splits. */
static void check_att_emul(uint64_t *rng, int n_heads, int n_kv, int hd, int kt, int vt)
{
	const int bt = 16, n_blocks = 64, n = 7;
	size_t kr = kv_row_bytes((enum kv_type)kt, n_kv, hd), vr = kv_row_bytes((enum kv_type)vt, n_kv, hd);
	int64_t n_slots = (int64_t)n_blocks * bt;
	int kv_dim = n_kv * hd, q_dim = n_heads * hd;
	uint8_t *kc = (uint8_t *)calloc((size_t)n_slots * kr + 64, 1), *vc = (uint8_t *)calloc((size_t)n_slots * vr + 64, 1);
	float *x = (float *)malloc(sizeof(float) * kv_dim), *q = (float *)malloc(sizeof(float) * n * q_dim);
	float *ref = (float *)malloc(sizeof(float) * n * q_dim), o[256];
	for (int64_t s = 0; s < n_slots; s++) {
		for (int i = 0; i < kv_dim; i++)
			x[i] = rnd(rng) * 1.5f;
		kv_store_row(kc + s * kr, x, (enum kv_type)kt, n_kv, hd);
		kv_store_row(vc + s * vr, x, (enum kv_type)vt, n_kv, hd);
	}
	for (int i = 0; i < n * q_dim; i++)
		q[i] = rnd(rng);
	int32_t perm[64], n_ctx[7] = {41, 11, 12, 13, 14, 15, 500};
	for (int i = 0; i < n_blocks; i++)
		perm[i] = (i * 37 + 5) % n_blocks;
	const int32_t *tables[7] = {perm, perm + 16, perm + 16, perm + 16, perm + 16, perm + 16, perm + 32};
	kern_attn a = {kc, vc, (enum kv_type)kt, (enum kv_type)vt, kr, vr, n_heads, n_kv, hd, bt,
		       1.0f / sqrtf((float)hd), tables, n_ctx};
	kern_cpu()->attention(ref, q, n, &a);
	int group = n_heads / n_kv;
	double worst = 0;
	for (int split = 1; split <= 13; split += 12)
		for (int t = 0; t < n; t++)
			for (int h = 0; h < n_heads; h++) {
				emul_head(o, q + (size_t)t * q_dim + h * hd, &a, t, h / group, split);
				for (int i = 0; i < hd; i++)
					worst = fmax(worst, fabs((double)o[i] - ref[(size_t)t * q_dim + h * hd + i]));
			}
	if (!(worst <= 1e-4)) {
		fail++;
		fprintf(stderr, "%s:%d: FAIL: attention emulated, heads %d/%d hd %d %s/%s: max diff %g from the CPU\n",
			__FILE__, __LINE__, n_heads, n_kv, hd, kv_type_name((enum kv_type)kt),
			kv_type_name((enum kv_type)vt), worst);
	} else {
		pass++;
	}
	free(kc);
	free(vc);
	free(x);
	free(q);
	free(ref);
}

int main(void)
{
	uint64_t rng = 12345;
	for (int rep = 0; rep < 4; rep++) {
		bool odd = rep % 2;
		check_type<DT_F32>(&rng, odd);
		check_type<DT_F16>(&rng, odd);
		check_type<DT_BF16>(&rng, odd);
		check_type<DT_Q8_0>(&rng, odd);
		check_type<DT_Q4_0>(&rng, odd);
		check_type<DT_Q4_K>(&rng, odd);
		check_type<DT_Q5_K>(&rng, odd);
		check_type<DT_Q6_K>(&rng, odd);
		check_type<DT_Q4_1>(&rng, odd);
		check_type<DT_Q5_0>(&rng, odd);
		check_type<DT_Q5_1>(&rng, odd);
		check_type<DT_IQ4_NL>(&rng, odd);
		check_type<DT_Q2_K>(&rng, odd);
		check_type<DT_Q3_K>(&rng, odd);
		check_type<DT_IQ4_XS>(&rng, odd);
		for (int t = KV_F32; t < KV_TYPE_COUNT; t++)
			check_kv(t, &rng, rep);
		check_mvq<DT_Q8_0>(&rng, odd);
		check_mvq<DT_Q4_0>(&rng, odd);
		check_mvq<DT_Q4_K>(&rng, odd);
		check_mvq<DT_Q5_K>(&rng, odd);
		check_mvq<DT_Q6_K>(&rng, odd);
		check_mvq<DT_Q4_1>(&rng, odd);
		check_mvq<DT_Q5_0>(&rng, odd);
		check_mvq<DT_Q5_1>(&rng, odd);
		check_mvq<DT_IQ4_NL>(&rng, odd);
		check_mvq<DT_Q2_K>(&rng, odd);
		check_mvq<DT_Q3_K>(&rng, odd);
		check_mvq<DT_IQ4_XS>(&rng, odd);
	}
	check_att_layouts(&rng);
	static const int hds[] = {64, 80, 96, 112, 128, 256};
	for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++)
		for (int kt = KV_F32; kt < KV_TYPE_COUNT; kt++)
			check_att_emul(&rng, 8, 2, hds[i], kt, kt == KV_Q8 ? KV_F16 : kt);
	check_att_emul(&rng, 12, 1, 64, KV_F16, KV_FP8); /* a group of 12: three blocks of 4 heads */
	printf("%s: %d passed, %d failed\n", __FILE__, pass, fail);
	return fail != 0;
}
