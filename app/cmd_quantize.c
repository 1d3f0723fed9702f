/* app/cmd_quantize.c: `pagechat quantize IN.gguf OUT.gguf TYPE`.
 *
 * Every metadata entry is copied (general.file_type and, for block formats,
 * general.quantization_version are set to what llama.cpp writes for the
 * type). Tensors of two or more dimensions are converted row by row to TYPE
 * (the source dequantized to f32 first, so any supported source works);
 * one-dimensional tensors (norms, biases) are copied as they are. A tensor
 * whose rows are not a whole number of TYPE's blocks, or whose source type
 * cannot be read, is copied unchanged with a note on stderr. When no matrix
 * converts at all, nothing is written and the command fails with one line
 * saying why. Rows are converted by a few threads a slab at a time, so
 * memory stays bounded. */
#include "app/cmds.h"

#include "kernels/kern.h"
#include "kernels/quant.h"
#include "models/gguf.h"
#include "models/gguf_write.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

const char usage_quantize[] =
	"usage: pagechat quantize IN.gguf OUT.gguf TYPE [-t N]\n"
	"  Writes IN with its weight matrices in TYPE: f32, f16, bf16, q8_0, q4_0, q4_1,\n"
	"  q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs. Matrices of any type\n"
	"  pagechat reads convert. Metadata is copied; 1-D tensors (norms) stay as they are,\n"
	"  and so do matrices whose rows do not divide into TYPE's blocks (noted on stderr);\n"
	"  when no matrix converts, nothing is written and the exit status is 1.\n"
	"  -t N  threads (default: one per core)\n";

#define SLAB_BYTES ((size_t)64 << 20)   /* output bytes converted per round */
#define MAX_THREADS 64

static const struct {
	const char *name;
	enum dtype type;
	uint32_t file_type;      /* llama.cpp's general.file_type for a model mostly of this type */
} targets[] = {
	{"f32", DT_F32, 0}, {"f16", DT_F16, 1}, {"bf16", DT_BF16, 32}, {"q8_0", DT_Q8_0, 7},
	{"q4_0", DT_Q4_0, 2}, {"q4_1", DT_Q4_1, 3}, {"q5_0", DT_Q5_0, 8}, {"q5_1", DT_Q5_1, 9},
	{"iq4_nl", DT_IQ4_NL, 25}, {"q2_k", DT_Q2_K, 10}, {"q3_k", DT_Q3_K, 11}, {"q4_k", DT_Q4_K, 14},
	{"q5_k", DT_Q5_K, 16}, {"q6_k", DT_Q6_K, 18}, {"iq4_xs", DT_IQ4_XS, 30},
};

typedef struct plan {
	const gguf_file *in;
	enum dtype *out_type;    /* [n_tensors] */
	int n_threads;
	uint8_t *slab;           /* owned; SLAB_BYTES (or one row if larger) */
	size_t slab_cap;
} plan;

typedef struct slab_job {
	const gguf_tensor *t;
	enum dtype to;
	int64_t row0, n_rows, in_row, out_row;
	uint8_t *dst;
	int part, n_parts;
	pthread_t th;
} slab_job;

static void *convert_rows(void *arg)
{
	slab_job *j = arg;
	int64_t k = j->t->ne[0];
	float *buf = xmalloc((size_t)k * sizeof *buf);
	int64_t lo = j->n_rows * j->part / j->n_parts, hi = j->n_rows * (j->part + 1) / j->n_parts;
	for (int64_t r = lo; r < hi; r++) {
		const uint8_t *src = (const uint8_t *)j->t->data + (j->row0 + r) * j->in_row;
		quant_dequantize_row(j->t->type, src, buf, k);
		quant_quantize_row(j->to, buf, j->dst + r * j->out_row, k);
	}
	free(buf);
	return NULL;
}

static int fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	plan *p = ctx;
	const gguf_tensor *t = gguf_tensor_at(p->in, i);
	enum dtype to = p->out_type[i];
	if (to == t->type)
		return gguf_out_write(out, t->data, (size_t)t->n_bytes, e);
	int64_t k = t->ne[0], rows = t->n_elems / k;
	int64_t in_row = dtype_row_bytes(t->type, k), out_row = dtype_row_bytes(to, k);
	int64_t per_slab = MAX(1, (int64_t)(p->slab_cap / (size_t)out_row));
	for (int64_t r0 = 0; r0 < rows; r0 += per_slab) {
		int64_t n = MIN(per_slab, rows - r0);
		int n_parts = (int)MIN((int64_t)p->n_threads, n);
		slab_job jobs[MAX_THREADS];
		for (int q = 0; q < n_parts; q++) {
			jobs[q] = (slab_job){.t = t, .to = to, .row0 = r0, .n_rows = n, .in_row = in_row,
					     .out_row = out_row, .dst = p->slab, .part = q, .n_parts = n_parts};
			if (q == 0 || pthread_create(&jobs[q].th, NULL, convert_rows, &jobs[q]))
				jobs[q].th = 0;
		}
		for (int q = 0; q < n_parts; q++)
			if (!jobs[q].th)
				convert_rows(&jobs[q]);
		for (int q = 0; q < n_parts; q++)
			if (jobs[q].th)
				pthread_join(jobs[q].th, NULL);
		if (gguf_out_write(out, p->slab, (size_t)(n * out_row), e))
			return -1;
	}
	return 0;
}

/* What the command line asks for. */
typedef struct quant_args {
	const char *in, *out;    /* borrowed from argv */
	size_t target;           /* index into targets[] */
	int n_threads;           /* -t (0: one per core) */
} quant_args;

/* Parses quantize's arguments into *a: 0, or EXIT_USAGE after printing the
 * problem. */
static int parse_quantize(int argc, char **argv, quant_args *a)
{
	const char *pos[3];
	*a = (quant_args){0};
	opt opts[] = {{"-t", "--threads", OPT_INT, &a->n_threads, P_THREADS}};
	int n_pos = cli_parse_opts("quantize", argc, argv, opts, ARRAY_LEN(opts), pos, 3);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (n_pos != 3) {
		fprintf(stderr, "pagechat: quantize: needs IN.gguf OUT.gguf TYPE, got %d of them "
			"(see pagechat quantize --help)\n", n_pos);
		return EXIT_USAGE;
	}
	a->n_threads = cli_threads(a->n_threads, "-t");
	for (a->target = 0; a->target < ARRAY_LEN(targets); a->target++)
		if (!strcasecmp(pos[2], targets[a->target].name))
			break;
	if (a->target == ARRAY_LEN(targets)) {
		fprintf(stderr, "pagechat: quantize: unknown type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
			"q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)\n", pos[2]);
		return EXIT_USAGE;
	}
	a->in = pos[0];
	a->out = pos[1];
	return 0;
}

/* Why matrices stay as they are, counted, with an example of each. */
typedef struct kept_why {
	int64_t same, unreadable, rows;          /* already TYPE; a type not read; rows off the blocks */
	const gguf_tensor *ex_unreadable, *ex_rows;
} kept_why;

/* The type tensor t is written in when TYPE is want: want for a matrix that
 * converts, else its own (why counted in k; note != 0 prints a note on
 * stderr saying so). */
static enum dtype out_type_of(const gguf_tensor *t, enum dtype want, kept_why *k, bool note)
{
	if (t->n_dims < 2)
		return t->type;
	if (t->type == want) {
		k->same++;
		return t->type;
	}
	if (!quant_supported(t->type)) {
		if (note)
			fprintf(stderr, "pagechat: quantize: note: %s is %s, which cannot be converted; "
				"copied as it is\n", t->name, dtype_name(t->type));
		k->unreadable++;
		k->ex_unreadable = t;
		return t->type;
	}
	if (t->ne[0] % dtype_block_elems(want)) {
		if (note)
			fprintf(stderr, "pagechat: quantize: note: %s has rows of %lld values, not a multiple "
				"of %s's %lld; kept as %s\n", t->name, (long long)t->ne[0], dtype_name(want),
				(long long)dtype_block_elems(want), dtype_name(t->type));
		k->rows++;
		k->ex_rows = t;
		return t->type;
	}
	return want;
}

/* Fills e with why no matrix of the file at path converts to want. */
static void explain_nothing(err *e, const char *path, enum dtype want, const kept_why *k)
{
	if (k->rows)
		err_set(e, "%s: no matrix converts to %s: %lld have rows not a multiple of %s's block of %lld "
			"(e.g. %s, rows of %lld)%s; nothing written", path, dtype_name(want), (long long)k->rows,
			dtype_name(want), (long long)dtype_block_elems(want), k->ex_rows->name,
			(long long)k->ex_rows->ne[0], k->unreadable || k->same ? ", the rest cannot convert either" : "");
	else if (k->unreadable)
		err_set(e, "%s: no matrix converts to %s: %lld are of types pagechat cannot read (e.g. %s, %s)%s; "
			"nothing written", path, dtype_name(want), (long long)k->unreadable, k->ex_unreadable->name,
			dtype_name(k->ex_unreadable->type), k->same ? ", the rest are already that type" : "");
	else if (k->same)
		err_set(e, "%s: every matrix is already %s; nothing to convert, nothing written", path,
			dtype_name(want));
	else
		err_set(e, "%s: the file has no matrices (tensors of two or more dimensions) to convert; nothing "
			"written", path);
}

static int run_quantize(const quant_args *a)
{
	enum dtype want = targets[a->target].type;
	err e = {0};
	gguf_file *in = gguf_open(a->in, &e);
	if (!in)
		return cli_fail(&e);
	gguf_writer *w = gguf_writer_new();
	for (int64_t i = 0; i < gguf_n_kv(in); i++)
		gguf_writer_copy_kv(w, in, i);
	gguf_writer_set_u32(w, "general.file_type", targets[a->target].file_type);
	if (dtype_block_elems(want) > 1)
		gguf_writer_set_u32(w, "general.quantization_version", 2);

	int64_t nt = gguf_n_tensors(in);
	plan p = {.in = in, .out_type = xmalloc((size_t)MAX(nt, 1) * sizeof *p.out_type)};
	p.n_threads = MIN(MAX_THREADS, a->n_threads > 0 ? a->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
	p.n_threads = MAX(1, p.n_threads);
	int64_t bytes_in = 0, bytes_out = 0, n_conv = 0, n_kept = 0;
	size_t max_row = 0;
	kept_why why = {0};
	int rc = 1;
	for (int64_t i = 0; i < nt; i++) {
		const gguf_tensor *t = gguf_tensor_at(in, i);
		enum dtype to = out_type_of(t, want, &why, false);
		p.out_type[i] = to;
		if (gguf_writer_add_tensor(w, t->name, to, t->n_dims, t->ne, &e) < 0)
			goto out;
		if (to != t->type) {
			n_conv++;
			max_row = MAX(max_row, (size_t)dtype_row_bytes(to, t->ne[0]));
		} else if (t->n_dims >= 2) {
			n_kept++;
		}
		bytes_in += t->n_bytes;
		bytes_out += gguf_writer_tensor_bytes(w, i);
	}
	if (n_conv == 0) {
		explain_nothing(&e, a->in, want, &why);
		goto out;
	}
	for (int64_t i = 0; i < nt; i++) /* the notes, now that the file will be written */
		out_type_of(gguf_tensor_at(in, i), want, &(kept_why){0}, true);
	p.slab_cap = MAX(SLAB_BYTES, max_row);
	p.slab = xmalloc(p.slab_cap);
	double t0 = now_s();
	if (gguf_writer_write(w, a->out, fill, &p, &e))
		goto out;
	fprintf(stderr, "%s: %lld tensors converted to %s, %lld matrices kept; %.2f MiB -> %.2f MiB "
		"in %.1f s\n", a->out, (long long)n_conv, dtype_name(want), (long long)n_kept,
		(double)bytes_in / 1048576.0, (double)bytes_out / 1048576.0, now_s() - t0);
	rc = 0;
out:
	if (rc)
		cli_fail(&e);
	free(p.slab);
	free(p.out_type);
	gguf_writer_free(w);
	gguf_close(in);
	return rc;
}

int cmd_quantize(int argc, char **argv, cli_device *dev)
{
	(void)dev;
	quant_args a;
	int rc = parse_quantize(argc, argv, &a);
	return rc ? rc : run_quantize(&a);
}
