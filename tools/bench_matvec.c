/* tools/bench_matvec.c: how close one decoding matrix-vector product comes to
 * the memory bandwidth, apart from the rest of a model's step.
 *
 *   bench_matvec [--type TYPE] [--mib 256] [--threads N] [--reps 12] [--hot] [--tokens 1]
 *   (TYPE: f16 or a block format: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k,
 *   q3_k, q4_k, q5_k, q6_k, iq4_xs; default q4_k)
 *
 * Offers the CPU backend enough 14336 x 4096 matrices (an 8B shape's FFN) of
 * random blocks to fill MiB (so they stay far above the caches; packed as
 * the model's would be), then, reps times: one read pass over a buffer of the
 * same size (app/bench_bw.c's reader) and one product with every matrix, one
 * token. Prints the median GB/s of the products and the median of each
 * product's fraction of the read pass just before it: pairing them keeps a
 * shared machine's swings out of the fraction, which `pagechat bench` (a mean
 * over its runs against the best of its read passes) cannot.
 *
 * --hot: one thread, one 128 x 14336 matrix (2 MiB or less, so it stays in
 * the caches), the product repeated to stream --mib: the kernel's rate when
 * memory is not the limit, for telling whether a decode kernel is bound by
 * its instructions or by the memory system.
 *
 * --tokens N (1..64): each product is for N tokens at once, as a batch of N
 * decoding sequences or a draft of N - 1 being verified is (the weights
 * read once for all of them); the rate is also given in multiply-adds per
 * second, which tells a kernel bound by its arithmetic (the rate stops
 * growing with N) from one bound by the weights' stream. A benchmark:
 * nothing here is checked. */
#include "app/bench.h"
#include "base/base.h"
#include "kernels/dtype.h"
#include "kernels/kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 14336
#define COLS 4096
#define HOT_ROWS 128
#define HOT_COLS 14336

/* The block formats measured, and where each keeps its f16 scales (the
 * GGUF layouts, kernels/quant.h; -1: no second one). */
static const struct {
	const char *name;
	enum dtype t;
	int d_at, m_at;
} formats[] = {
	{"q8_0", DT_Q8_0, 0, -1},   {"q4_0", DT_Q4_0, 0, -1},   {"q4_1", DT_Q4_1, 0, 2},
	{"q5_0", DT_Q5_0, 0, -1},   {"q5_1", DT_Q5_1, 0, 2},    {"iq4_nl", DT_IQ4_NL, 0, -1},
	{"q2_k", DT_Q2_K, 80, 82},  {"q3_k", DT_Q3_K, 108, -1}, {"q4_k", DT_Q4_K, 0, 2},
	{"q5_k", DT_Q5_K, 0, 2},    {"q6_k", DT_Q6_K, 208, -1}, {"iq4_xs", DT_IQ4_XS, 0, -1},
};

/* Random bytes, with every block's f16 scales set to a small finite value
 * (random bits would make some infinite or NaN). */
static void fill_blocks(uint8_t *w, size_t bytes, enum dtype t, uint64_t seed)
{
	for (size_t i = 0; i + 8 <= bytes; i += 8) {
		uint64_t r = mix64(seed + i);
		memcpy(w + i, &r, 8);
	}
	const uint8_t small[2] = {0x00, 0x20}; /* f16 0x2000: 2^-7 */
	size_t bb = (size_t)dtype_block_bytes(t);
	for (size_t f = 0; f < ARRAY_LEN(formats); f++) {
		if (formats[f].t != t)
			continue;
		for (size_t b = 0; b + bb <= bytes; b += bb) {
			memcpy(w + b + formats[f].d_at, small, 2);
			if (formats[f].m_at >= 0)
				memcpy(w + b + formats[f].m_at, small, 2);
		}
	}
}

/* A whole decimal number in [lo, hi] into *v: 0, or -1. */
static int parse_int(const char *s, int lo, int hi, int *v)
{
	char *end;
	long x = strtol(s, &end, 10);
	if (end == s || *end || x < lo || x > hi)
		return -1;
	*v = (int)x;
	return 0;
}

typedef struct opts {
	enum dtype t;
	int mib, threads, reps, tokens;
	bool hot;
} opts;

/* The command line into *o: 0, or 2 after a message. */
static int parse_opts(int argc, char **argv, opts *o)
{
	const char *type = "q4_k";
	*o = (opts){.mib = 256, .reps = 12, .tokens = 1};
	for (int i = 1; i < argc; i++) {
		bool more = i + 1 < argc;
		if (!strcmp(argv[i], "--type") && more)
			type = argv[++i];
		else if (!strcmp(argv[i], "--mib") && more && !parse_int(argv[i + 1], 64, 1 << 20, &o->mib))
			i++;
		else if (!strcmp(argv[i], "--threads") && more && !parse_int(argv[i + 1], 0, 1024, &o->threads))
			i++;
		else if (!strcmp(argv[i], "--reps") && more && !parse_int(argv[i + 1], 1, 100, &o->reps))
			i++;
		else if (!strcmp(argv[i], "--tokens") && more && !parse_int(argv[i + 1], 1, 64, &o->tokens))
			i++;
		else if (!strcmp(argv[i], "--hot"))
			o->hot = true;
		else {
			fprintf(stderr, "bench_matvec: '%s' is not an option or lacks a valid value\n", argv[i]);
			fprintf(stderr, "usage: bench_matvec [--type TYPE] [--mib 256] [--threads N] "
				"[--reps 12] [--hot] [--tokens 1..64]\n");
			return 2;
		}
	}
	o->t = !strcmp(type, "f16") ? DT_F16 : DT_COUNT;
	for (size_t f = 0; f < ARRAY_LEN(formats); f++)
		if (!strcmp(type, formats[f].name))
			o->t = formats[f].t;
	if (o->t == DT_COUNT) {
		fprintf(stderr, "bench_matvec: --type f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, "
			"q6_k or iq4_xs, not '%s'\n", type);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	opts o;
	if (parse_opts(argc, argv, &o))
		return 2;
	const enum dtype t = o.t;
	const int mib = o.mib, reps = o.reps, nt = o.tokens;
	const bool hot = o.hot;
	int threads = o.threads;
	/* the matrices, the backend's packed copy of them and the read pass's
	 * buffer, checked before any of it is allocated */
	int64_t avail = mem_available();
	if (avail >= 0 && 3 * ((int64_t)mib << 20) > avail) {
		fprintf(stderr, "bench_matvec: --mib %d needs about %d MiB (matrices, their packed copy, the read "
			"buffer) and %lld MiB are available; use a smaller --mib\n", mib, 3 * mib,
			(long long)(avail >> 20));
		return 1;
	}
	const kern_ops *K = kern_cpu();
	threads = K->set_threads(hot ? 1 : threads);
	const int rows = hot ? HOT_ROWS : ROWS, cols = hot ? HOT_COLS : COLS;
	size_t bytes = (size_t)dtype_row_bytes(t, cols) * rows;
	int n = hot ? 1 : (int)(((size_t)mib << 20) / bytes) + 1;
	int per_rep = hot ? (int)(((size_t)mib << 20) / bytes) + 1 : 1; /* products of each matrix a rep */
	uint8_t **w = xcalloc((size_t)n, sizeof *w);
	int64_t packed = 0;
	for (int i = 0; i < n; i++) {
		w[i] = xmalloc_lines(bytes);
		fill_blocks(w[i], bytes, t, (uint64_t)i << 40);
		if (K->weights_add)
			packed += K->weights_add(w[i], t, cols, rows);
	}
	float *x = xmalloc((size_t)nt * cols * sizeof *x), *y = xmalloc((size_t)nt * rows * sizeof *y);
	for (int i = 0; i < nt * cols; i++)
		x[i] = (float)(mix64((uint64_t)i) % 2001) / 1000.0f - 1.0f;
	for (int i = 0; i < n; i++) /* a pass to warm up */
		K->matmul(y, x, w[i], t, nt, cols, rows);
	double *gbs = xcalloc((size_t)reps, sizeof *gbs), *frac = xcalloc((size_t)reps, sizeof *frac);
	double *macs = xcalloc((size_t)reps, sizeof *macs);
	double total = (double)bytes * n * per_rep;
	for (int r = 0; r < reps; r++) {
		double bw = bench_bw_host((size_t)n * per_rep * bytes, threads, 1);
		double t0 = now_s();
		for (int j = 0; j < per_rep; j++)
			for (int i = 0; i < n; i++)
				K->matmul(y, x, w[i], t, nt, cols, rows);
		double s = now_s() - t0;
		gbs[r] = total / s;
		macs[r] = (double)rows * cols * n * per_rep * nt / s / 1e9;
		frac[r] = bw > 0 ? gbs[r] / bw : 0;
		gbs[r] /= 1e9;
	}
	printf("%s, %d matrices of %d x %d%s (%.0f MiB, %s), %d token%s, %s, %d threads: median %.2f GB/s, "
	       "median %.1f%% of the read pass before each, %.1f G multiply-adds/s (%d reps)\n", dtype_name(t), n,
	       rows, cols, hot ? ", in cache, repeated" : "", total / 1048576.0, packed > 0 ? "packed" : "as stored",
	       nt, nt > 1 ? "s" : "", kern_cpu_isa(), threads, median_of(gbs, reps), 100 * median_of(frac, reps),
	       median_of(macs, reps), reps);
	for (int i = 0; i < n; i++) {
		if (K->weights_remove)
			K->weights_remove(w[i]);
		free(w[i]);
	}
	free(w);
	free(x);
	free(y);
	free(gbs);
	free(frac);
	free(macs);
	return 0;
}
