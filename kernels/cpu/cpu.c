/* kernels/cpu/cpu.c: the CPU backend: picks a kernel set (scalar, AVX2,
 * AVX-512) from the processor's features at first use and spreads the heavy
 * operations over a persistent thread pool.
 *
 * Work is split so that no output element depends on the split: matmuls by
 * weight rows (each thread runs the whole batch over its rows), attention by
 * (query, head) pairs, row-wise operations by rows, element-wise ones by
 * element ranges of kernels whose tails use the same arithmetic as their
 * bodies. Small operations run on the calling thread. Weight matrices the
 * model offers (weights_add) are packed for the kernel set in use, when it
 * has a layout of its own, and matmuls on them read the packed copy (the
 * same bits). What the user should
 * hear about the setup (an unusable PAGECHAT_ISA, threads that cannot start)
 * is kept for the app to print (kern_cpu_notice); this file never prints. */
#include "kernels/kern.h"
#include "kernels/kvq.h"

#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work (multiply-adds or elements) below which an operation stays on the
 * calling thread: waking the pool costs about a microsecond. */
#define PAR_MIN_MACS  (1 << 17)
#define PAR_MIN_ELEMS (1 << 14)
/* Attention reads its K/V rows scattered over the cache (a few times slower
 * per multiply-add than a matmul), so it pays to split it sooner. */
#define PAR_MIN_ATTN  (1 << 14)

/* A weight matrix packed for a kernel set (cpu_kernels.pack). */
typedef struct packed {
	const void *w;           /* the stored matrix it was made from (borrowed) */
	enum dtype t;
	int64_t k, n_out;
	enum cpu_isa isa;        /* the set whose layout it is */
	uint8_t *p;              /* owned (huge_free) */
	size_t bytes;
} packed;

static struct cpu_state {
	const cpu_kernels *k;    /* the chosen kernel set (static) */
	enum cpu_isa isa;
	tpool *pool;             /* owned; lives until the process ends */
	int n_threads;           /* wanted size; 0: one per CPU */
	uint8_t *qa;             /* owned scratch for quantized activations */
	size_t qa_cap;
	float *att;              /* chunk states of a decoding sequence's attention */
	size_t att_cap;
	packed *packs;           /* owned; [n_packs] sorted by w */
	int n_packs, packs_cap;
	char notes[4][600];      /* [n_notes] notes for the app (kern_cpu_notice),
	                            each an err message and a few words */
	int n_notes;
} S;

static const char *const isa_names[ISA_COUNT] = {"scalar", "avx2", "avx512"};

const cpu_kernels *cpu_kernels_for(enum cpu_isa isa)
{
	switch (isa) {
	case ISA_SCALAR: return cpu_kernels_scalar();
	case ISA_AVX2: return cpu_kernels_avx2();
	case ISA_AVX512: return cpu_kernels_avx512();
	default: return NULL;
	}
}

/* Records a note for the app to show (kern_cpu_notice): the library never
 * prints. Past the last slot, notes are dropped. */
static void add_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void add_note(const char *fmt, ...)
{
	if (S.n_notes == (int)ARRAY_LEN(S.notes))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(S.notes[S.n_notes++], sizeof S.notes[0], fmt, ap);
	va_end(ap);
}

static void pick_best(void)
{
	S.k = NULL;
	for (int i = ISA_COUNT - 1; !S.k && i >= 0; i--)
		if ((S.k = cpu_kernels_for((enum cpu_isa)i)))
			S.isa = (enum cpu_isa)i;
}

/* First use: the best set, or the one PAGECHAT_ISA names. */
static void pick_isa(void)
{
	if (S.k)
		return;
	const char *want = getenv("PAGECHAT_ISA");
	err e = {0};
	if (want && *want && kern_cpu_set_isa(want, &e))
		add_note("PAGECHAT_ISA: %s; using the best available", e.msg);
	if (!S.k)
		pick_best();
}

int kern_cpu_set_isa(const char *name, err *e)
{
	if (!strcmp(name, "auto")) {
		pick_best();
		return 0;
	}
	for (int i = 0; i < ISA_COUNT; i++) {
		if (strcmp(name, isa_names[i]))
			continue;
		const cpu_kernels *k = cpu_kernels_for((enum cpu_isa)i);
		if (!k) {
			err_set(e, "this CPU (or build) has no %s kernels", name);
			return -1;
		}
		S.k = k;
		S.isa = (enum cpu_isa)i;
		return 0;
	}
	err_set(e, "unknown instruction set '%s' (auto, scalar, avx2, avx512)", name);
	return -1;
}

const char *kern_cpu_isa(void)
{
	pick_isa();
	return isa_names[S.isa];
}

static tpool *pool(void)
{
	if (!S.pool) {
		int n = S.n_threads > 0 ? S.n_threads : tpool_n_cpus();
		err e = {0};
		S.pool = tpool_new(n, &e);
		if (!S.pool) {
			add_note("%s; running single-threaded", e.msg);
			S.pool = tpool_new(1, &e);
		}
	}
	return S.pool;
}

typedef struct spin_job {
	int64_t rounds;          /* per chunk */
	int64_t macs[TPOOL_MAX_CHUNKS > 256 ? 256 : TPOOL_MAX_CHUNKS];
} spin_job;

static void spin_part(void *ctx, int i, int n)
{
	(void)n;
	spin_job *j = ctx;
	j->macs[i] = S.k->int8_spin(j->rounds);
}

double kern_cpu_int8_peak(void)
{
	pick_isa();
	if (!S.k->int8_spin)
		return 0;
	tpool *p = pool();
	int chunks = MIN(8 * tpool_size(p), 256);
	static spin_job j;
	/* about 13 ms a pass on two Zen 3 threads; passes of 1 ms (20000) timed
	 * the pool's wake-up too and gave half the rate */
	j.rounds = 400000;
	double best = 0;
	for (int pass = 0; pass < 4; pass++) { /* the first one warms the clocks up */
		double t0 = now_s();
		tpool_run(p, chunks, spin_part, &j);
		double dt = now_s() - t0, macs = 0;
		for (int i = 0; i < chunks; i++)
			macs += (double)j.macs[i];
		if (pass > 0 && dt > 0)
			best = MAX(best, macs / dt);
	}
	return best;
}

const char *kern_cpu_notice(int i)
{
	pick_isa();
	pool();
	return i >= 0 && i < S.n_notes ? S.notes[i] : NULL;
}

static int cpu_set_threads(int n)
{
	int want = n > 0 ? n : tpool_n_cpus();
	if (S.pool && tpool_size(S.pool) != want) {
		tpool_free(S.pool);
		S.pool = NULL;
	}
	S.n_threads = want;
	return tpool_size(pool());
}

/* Runs fn over n_chunks chunks, across the pool when parallel (else on this
 * thread, as one chunk). Chunks are a few per thread, so a thread the OS
 * holds back costs little; the split never changes a result. */
static void run(tpool_fn fn, void *ctx, bool parallel)
{
	if (parallel) {
		tpool *p = pool();
		tpool_run(p, 4 * tpool_size(p), fn, ctx);
	} else {
		fn(ctx, 0, 1);
	}
}

/* [*lo, *hi) is part i of n of [0, total) in units of unit. */
static void split(int64_t total, int64_t unit, int i, int n, int64_t *lo, int64_t *hi)
{
	int64_t units = (total + unit - 1) / unit;
	*lo = MIN(total, units * i / n * unit);
	*hi = MIN(total, units * (i + 1) / n * unit);
}

static bool cpu_supports(enum dtype t)
{
	return quant_supported(t);
}

/* ---- packed weights ---- */

/* The index of w in S.packs, or where it would go (*found false). */
static int pack_find(const void *w, bool *found)
{
	int lo = 0, hi = S.n_packs;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if ((uintptr_t)S.packs[mid].w < (uintptr_t)w)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < S.n_packs && S.packs[lo].w == w;
	return lo;
}

/* The packed copy of w for the set in use, or NULL. */
static const uint8_t *packed_of(const void *w, enum dtype t, int64_t k, int64_t n_out)
{
	bool found;
	int i = S.n_packs ? pack_find(w, &found) : 0;
	if (!S.n_packs || !found)
		return NULL;
	const packed *p = &S.packs[i];
	return p->isa == S.isa && p->t == t && p->k == k && p->n_out == n_out ? p->p : NULL;
}

typedef struct pack_job {
	const packed *p;
} pack_job;

static void pack_part(void *ctx, int i, int n)
{
	const packed *p = ((pack_job *)ctx)->p;
	int64_t o0, o1;
	split(p->n_out, PACK_ROWS, i, n, &o0, &o1);
	if (o0 < o1)
		S.k->pack(p->p, p->w, p->t, p->k, p->n_out, o0, o1);
}

/* A packed copy is made only while this much memory stays available after
 * it (mem_available: the model file's cached pages count, as a packed
 * matrix's stored rows are let go and not read again). */
#define PACK_MEM_RESERVE ((int64_t)1 << 30)
/* Q8_0 matrices smaller than this stay as stored: measured with AVX2 on 2
 * cores, the packed layout decodes 8% slower on 768 x 2048 matrices and 12%
 * faster on the 8B shape's (4096 x 1024 and up). */
#define PACK_MIN_Q8_0 ((int64_t)4 << 20)

static int64_t cpu_weights_add(const void *w, enum dtype t, int64_t k, int64_t n_out)
{
	pick_isa();
	if (!S.k->pack_bytes || !quant_supported(t) || k % dtype_block_elems(t) ||
	    (t == DT_Q8_0 && k * n_out < PACK_MIN_Q8_0))
		return 0;
	int64_t bytes = S.k->pack_bytes(t, k, n_out);
	bool found;
	int i = pack_find(w, &found);
	int64_t avail = bytes > 0 && !found ? mem_available() : -1;
	if (bytes <= 0 || found || (avail >= 0 && avail < bytes + PACK_MEM_RESERVE))
		return 0; /* nothing to gain, or no room: the stored rows are read instead */
	packed p = {.w = w, .t = t, .k = k, .n_out = n_out, .isa = S.isa, .bytes = (size_t)bytes};
	if (!(p.p = zalloc_huge(p.bytes)))
		return 0; /* the kernels read the stored rows instead: the same results */
	pack_job j = {&p};
	run(pack_part, &j, bytes >= PAR_MIN_ELEMS);
	xgrow(&S.packs, &S.packs_cap, S.n_packs + 1, sizeof *S.packs);
	memmove(&S.packs[i + 1], &S.packs[i], (size_t)(S.n_packs - i) * sizeof *S.packs);
	S.packs[i] = p;
	S.n_packs++;
	return bytes;
}

static void cpu_weights_remove(const void *w)
{
	bool found;
	int i = pack_find(w, &found);
	if (!found)
		return;
	huge_free(S.packs[i].p, S.packs[i].bytes);
	memmove(&S.packs[i], &S.packs[i + 1], (size_t)(S.n_packs - i - 1) * sizeof *S.packs);
	if (--S.n_packs == 0) {
		free(S.packs);
		S.packs = NULL;
		S.packs_cap = 0;
	}
}

/* ---- matmul ---- */

/* A group of matmuls on one input (one alone for matmul): the weight rows
 * of all of them are one range, each matrix's starting on a PACK_ROWS
 * boundary, split over the pool in one job. The input is quantized once per
 * activation format (weight type) the group needs. */
typedef struct mm_job {
	mm_args a[KERN_MM_GROUP_MAX];
	int64_t start[KERN_MM_GROUP_MAX + 1];  /* matrix m's rows are [start[m], start[m] + n_out[m]) */
	int64_t n_out[KERN_MM_GROUP_MAX];
	int n_mm;
	int qa_of[KERN_MM_GROUP_MAX];          /* the matrices whose activation rows are quantized */
	int n_qa;
	const float *x;
	int64_t n;
} mm_job;

/* Items are (format, token) pairs. */
static void qa_part(void *ctx, int i, int n)
{
	mm_job *j = ctx;
	int64_t i0, i1;
	split(j->n_qa * j->n, 1, i, n, &i0, &i1);
	for (int64_t it = i0; it < i1; it++) {
		const mm_args *a = &j->a[j->qa_of[it / j->n]];
		int64_t t = it % j->n;
		S.k->quantize_act(a->wt, j->x + t * a->k, (uint8_t *)a->qa + t * a->lda, a->k);
	}
}

static void mm_part(void *ctx, int i, int n)
{
	mm_job *j = ctx;
	int64_t lo, hi;
	split(j->start[j->n_mm], PACK_ROWS, i, n, &lo, &hi);
	for (int m = 0; m < j->n_mm; m++) {
		int64_t o0 = MAX(lo, j->start[m]) - j->start[m];
		int64_t o1 = MIN(hi, j->start[m] + j->n_out[m]) - j->start[m];
		if (o0 < o1)
			S.k->matmul(&j->a[m], 0, j->n, o0, o1);
	}
}

static uint8_t *qa_scratch(size_t bytes)
{
	if (bytes > S.qa_cap) {
		free(S.qa);
		void *p = NULL;
		if (posix_memalign(&p, 64, bytes))
			fatal("out of memory (%zu bytes of activation scratch)", bytes);
		S.qa = p;
		S.qa_cap = bytes;
	}
	return S.qa;
}

/* Sets each quantized-activation matrix's rows in the scratch: one region
 * per weight type, shared by the matrices of that type. */
static void mm_job_qa(mm_job *j)
{
	int64_t off[KERN_MM_GROUP_MAX], total = 0;
	for (int m = 0; m < j->n_mm; m++) {
		mm_args *a = &j->a[m];
		off[m] = -1;
		if (!quant_uses_qact(a->wt))
			continue;
		a->lda = S.k->act_row_bytes ? S.k->act_row_bytes(a->wt, a->k) : qact_row_bytes(a->wt, a->k);
		for (int q = 0; q < j->n_qa && off[m] < 0; q++)
			if (j->a[j->qa_of[q]].wt == a->wt)
				off[m] = off[j->qa_of[q]];
		if (off[m] < 0) {
			off[m] = total;
			total += j->n * a->lda;
			j->qa_of[j->n_qa++] = m;
		}
	}
	uint8_t *qa = total ? qa_scratch((size_t)total) : NULL;
	for (int m = 0; m < j->n_mm; m++)
		if (off[m] >= 0)
			j->a[m].qa = qa + off[m];
}

static void cpu_matmul_group(const kern_mm *mm, int n_mm, const float *x, int64_t n, int64_t k)
{
	pick_isa();
	if (n_mm < 1 || n_mm > KERN_MM_GROUP_MAX)
		fatal("matmul_group: %d matrices (1 to %d)", n_mm, KERN_MM_GROUP_MAX);
	mm_job j = {.n_mm = n_mm, .x = x, .n = n};
	for (int m = 0; m < n_mm; m++) {
		j.a[m] = (mm_args){.y = mm[m].y, .ldy = mm[m].n_out, .x = x, .ldx = k, .w = mm[m].w,
				   .ldw = dtype_row_bytes(mm[m].wt, k),
				   .pw = packed_of(mm[m].w, mm[m].wt, k, mm[m].n_out), .wt = mm[m].wt, .k = k};
		j.n_out[m] = mm[m].n_out;
		j.start[m + 1] = j.start[m] + (mm[m].n_out + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS;
	}
	bool par = n * k * j.start[n_mm] >= PAR_MIN_MACS;
	mm_job_qa(&j);
	if (j.n_qa)
		run(qa_part, &j, par && j.n_qa * n * k >= PAR_MIN_ELEMS);
	run(mm_part, &j, par);
}

static void cpu_matmul(float *y, const float *x, const void *w, enum dtype wt,
		       int64_t n, int64_t k, int64_t n_out)
{
	kern_mm m = {.y = y, .w = w, .wt = wt, .n_out = n_out};
	cpu_matmul_group(&m, 1, x, n, k);
}

/* ---- attention ---- */

/* Decoding sequences one attention call takes by chunks at most. */
#define ATTN_MAX_CHUNK_SEQS 256

typedef struct attn_job {
	float *out;
	const float *q;
	int64_t n;
	const kern_attn *a;
} attn_job;

/* Items are (head, query) pairs, head-major, so a thread's queries mostly
 * share one head's K/V (in L2); consecutive queries of one sequence go to
 * the kernel together and share its K/V reads. */
static void attn_part(void *ctx, int i, int n)
{
	attn_job *j = ctx;
	const kern_attn *a = j->a;
	int group = a->n_heads / a->n_kv_heads;
	int64_t q_dim = (int64_t)a->n_heads * a->head_dim, lo, hi;
	split(j->n * a->n_heads, 1, i, n, &lo, &hi);
	for (int64_t it = lo; it < hi;) {
		int h = (int)(it / j->n);
		int64_t t = it % j->n;
		int g = 1;
		while (g < ATTN_MAX_GROUP && it + g < hi && t + g < j->n && a->table[t + g] == a->table[t])
			g++;
		int64_t at = t * q_dim + (int64_t)h * a->head_dim;
		bool f32 = a->k_type == KV_F32 && a->v_type == KV_F32;
		(f32 || S.k->attend_typed ? S.k->attend : cpu_attend_typed)(j->out + at, q_dim, j->q + at, q_dim, g, a, a->table[t],
						       a->n_ctx + t, h / group);
		it += g;
	}
}

/* Decoding sequences (one query each): chunks of their keys, all heads
 * each, across the threads (attend_chunk); every K/V row is then read whole
 * by one thread, where a split by heads has each thread read slices of
 * every row. Unit u is chunk u - first[t] of query t. */
typedef struct chunk_job {
	float *res;
	const float *q;
	const kern_attn *a;
	const int32_t *first;    /* [n + 1] */
	int64_t n;
} chunk_job;

static void chunk_part(void *ctx, int i, int n)
{
	chunk_job *j = ctx;
	const kern_attn *a = j->a;
	int64_t lo, hi, t = 0, per = (int64_t)a->n_heads * (a->head_dim + 2);
	split(j->first[j->n], 1, i, n, &lo, &hi);
	for (int64_t u = lo; u < hi; u++) {
		while (j->first[t + 1] <= u)
			t++;
		S.k->attend_chunk(j->res + u * per, j->q + t * (int64_t)a->n_heads * a->head_dim, a, a->table[t],
				  a->n_ctx[t], (int)(u - j->first[t]));
	}
}

/* The chunks of ck keys query t's keys fall in: from the one holding its
 * first key (attn_first_key) to the one holding its last. */
static int32_t chunks_of(const kern_attn *a, int64_t t, int ck)
{
	return (a->n_ctx[t] - 1) / ck - attn_first_key(a, a->n_ctx[t]) / ck + 1;
}

/* The chunked route when every query is a sequence of its own (decoding),
 * and one alone has keys in two chunks at least. */
static bool use_chunks(int64_t n, const kern_attn *a)
{
	int ck = S.k->attend_chunk_keys ? S.k->attend_chunk_keys(a) : 0;
	if (ck <= 0 || n > ATTN_MAX_CHUNK_SEQS)
		return false;
	for (int64_t t = 1; t < n; t++)
		if (a->table[t] == a->table[t - 1])
			return false;
	return n > 1 || chunks_of(a, 0, ck) > 1;
}

static void cpu_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	pick_isa();
	int64_t work = 0;
	for (int64_t t = 0; t < n && work < PAR_MIN_ATTN; t++)
		work += (int64_t)a->n_ctx[t] * a->n_heads * a->head_dim * 2;
	if (use_chunks(n, a)) {
		int ck = S.k->attend_chunk_keys(a);
		int32_t first[ATTN_MAX_CHUNK_SEQS + 1];
		first[0] = 0;
		for (int64_t t = 0; t < n; t++)
			first[t + 1] = first[t] + chunks_of(a, t, ck);
		chunk_job c = {.q = q, .a = a, .first = first, .n = n};
		int64_t per = (int64_t)a->n_heads * (a->head_dim + 2);
		size_t floats = (size_t)first[n] * (size_t)per;
		if (floats > S.att_cap) { /* doubling: a growing context reallocates rarely */
			free(S.att);
			S.att_cap = MAX(floats, 2 * S.att_cap);
			S.att = xmalloc_lines(S.att_cap * sizeof *S.att);
		}
		c.res = S.att;
		run(chunk_part, &c, work >= PAR_MIN_ATTN);
		int64_t q_dim = (int64_t)a->n_heads * a->head_dim;
		for (int64_t t = 0; t < n; t++)
			S.k->attend_fold(out + t * q_dim, c.res + first[t] * per, first[t + 1] - first[t], a);
		return;
	}
	attn_job j = {out, q, n, a};
	run(attn_part, &j, work >= PAR_MIN_ATTN);
}

/* ---- row-wise and element-wise ---- */

typedef struct rows_job {
	float *y;
	const float *x, *w, *u;
	int64_t n, dim;
	float eps;
	const int32_t *pos;
	int n_heads, head_dim, n_rot;
	const float *inv_freq;
	bool neox;
} rows_job;

static void rmsnorm_part(void *ctx, int i, int n)
{
	rows_job *j = ctx;
	int64_t t0, t1;
	split(j->n, 1, i, n, &t0, &t1);
	for (int64_t t = t0; t < t1; t++) {
		const float *xr = j->x + t * j->dim;
		float *yr = j->y + t * j->dim;
		double ss = 0;
		for (int64_t d = 0; d < j->dim; d++)
			ss += (double)xr[d] * xr[d];
		float scale = (float)(1.0 / sqrt(ss / (double)j->dim + j->eps));
		for (int64_t d = 0; d < j->dim; d++)
			yr[d] = xr[d] * scale * j->w[d];
	}
}

static void cpu_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	rows_job j = {.y = y, .x = x, .w = w, .n = n, .dim = dim, .eps = eps};
	run(rmsnorm_part, &j, n > 1 && n * dim >= PAR_MIN_ELEMS);
}

static void rope_part(void *ctx, int i, int n)
{
	rows_job *j = ctx;
	int half = j->n_rot / 2;
	int64_t t0, t1;
	split(j->n, 1, i, n, &t0, &t1);
	for (int64_t t = t0; t < t1; t++) {
		for (int f = 0; f < half; f++) {
			float theta = (float)j->pos[t] * j->inv_freq[f];
			float c = cosf(theta), s = sinf(theta);
			for (int h = 0; h < j->n_heads; h++) {
				float *v = j->y + (t * j->n_heads + h) * j->head_dim;
				int a = j->neox ? f : 2 * f, b = j->neox ? f + half : 2 * f + 1;
				float x0 = v[a], x1 = v[b];
				v[a] = x0 * c - x1 * s;
				v[b] = x0 * s + x1 * c;
			}
		}
	}
}

static void cpu_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim,
		     int n_rot, const float *inv_freq, bool neox)
{
	rows_job j = {.y = x, .pos = pos, .n = n, .n_heads = n_heads, .head_dim = head_dim,
		      .n_rot = n_rot, .inv_freq = inv_freq, .neox = neox};
	run(rope_part, &j, n > 1 && n * n_heads * n_rot >= PAR_MIN_ELEMS);
}

static void silu_part(void *ctx, int i, int n)
{
	rows_job *j = ctx;
	int64_t lo, hi;
	split(j->n, 64, i, n, &lo, &hi);
	if (lo < hi)
		S.k->silu_mul(j->y + lo, j->u + lo, hi - lo);
}

static void cpu_silu_mul(float *g, const float *u, int64_t n)
{
	pick_isa();
	rows_job j = {.y = g, .u = u, .n = n};
	run(silu_part, &j, n >= PAR_MIN_ELEMS);
}

/* GELU, tanh form, in f32. */
static inline float gelu_tanh(float x)
{
	const float c = 0.7978845608028654f;    /* sqrt(2 / pi) */
	return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static void gelu_part(void *ctx, int i, int n)
{
	rows_job *j = ctx;
	int64_t lo, hi;
	split(j->n, 64, i, n, &lo, &hi);
	for (int64_t k = lo; k < hi; k++)
		j->y[k] = gelu_tanh(j->y[k]) * j->u[k];
}

static void cpu_gelu_mul(float *g, const float *u, int64_t n)
{
	rows_job j = {.y = g, .u = u, .n = n};
	run(gelu_part, &j, n >= PAR_MIN_ELEMS);
}

static void cpu_scale(float *x, float s, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= s;
}

static void cpu_add(float *y, const float *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] += x[i];
}

static void cpu_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	for (int64_t t = 0; t < n; t++)
		cpu_add(y + t * dim, b, dim);
}

static void cpu_embed(float *y, const void *table, enum dtype t, const int32_t *ids,
		      int64_t n, int64_t dim)
{
	int64_t row = dtype_row_bytes(t, dim);
	for (int64_t i = 0; i < n; i++)
		quant_dequantize_row(t, (const uint8_t *)table + ids[i] * row, y + i * dim, dim);
}

static void cpu_kv_write(void *kc, void *vc, const float *k, const float *v,
			 const int64_t *slot, int64_t n, const kern_attn *f)
{
	pick_isa();
	int64_t kv_dim = (int64_t)f->n_kv_heads * f->head_dim;
	kv_sse_fn sse = S.k->fp8_sse ? S.k->fp8_sse : kv_fp8_sse;
	for (int64_t t = 0; t < n; t++) {
		kv_store_row_with((uint8_t *)kc + (size_t)slot[t] * f->k_row, k + t * kv_dim,
				  f->k_type, f->n_kv_heads, f->head_dim, sse);
		kv_store_row_with((uint8_t *)vc + (size_t)slot[t] * f->v_row, v + t * kv_dim,
				  f->v_type, f->n_kv_heads, f->head_dim, sse);
	}
}

static const kern_ops cpu_ops = {
	.name = "cpu",
	.supports = cpu_supports,
	.set_threads = cpu_set_threads,
	.matmul = cpu_matmul,
	.matmul_group = cpu_matmul_group,
	.embed = cpu_embed,
	.rmsnorm = cpu_rmsnorm,
	.rope = cpu_rope,
	.silu_mul = cpu_silu_mul,
	.gelu_mul = cpu_gelu_mul,
	.scale = cpu_scale,
	.add = cpu_add,
	.add_bias = cpu_add_bias,
	.kv_write = cpu_kv_write,
	.attention = cpu_attention,
	.weights_add = cpu_weights_add,
	.weights_remove = cpu_weights_remove,
	.kv_shift = cpu_kv_shift,
};

const kern_ops *kern_cpu(void)
{
	return &cpu_ops;
}
