/* tools/gen_rand_gguf.c: writes a Llama-shaped GGUF with random weights, fast
 * (a GiB a second or more with several cores), for benchmarks at real sizes:
 * an 8B shape by default.
 *
 *   gen_rand_gguf --type f16|q4_k|q8_0 --out FILE [--dim 4096 --layers 32
 *                 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --seed 1
 *                 --threads N (default: every core)]
 *
 * Each 64 KiB unit of a tensor (whole blocks) draws from its own stream,
 * seeded by (seed, tensor, unit): the threads fill a 64 MiB chunk's units at
 * once, and the file is the same whatever the thread count.
 * Quantized blocks are made directly from random bits (no quantization
 * search): q4_K blocks get small random super-block scales and random 6-bit
 * sub-block scales, mins and nibbles; the output matrix is q6_K when the type
 * is q4_k, as in the usual Q4_K_M files. f16 values are uniform in
 * +-0.5/sqrt(row length). Norms are 1. There is no tokenizer: the file is
 * for `pagechat bench` and the memory plan, not for text. */
#include "kernels/base.h"
#include "kernels/dtype.h"
#include "kernels/kern.h"
#include "models/gguf_write.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gen {
	uint64_t seed;
	int n_threads;
	enum dtype *types;       /* [n_tensors] */
	int64_t *row;            /* [n_tensors] values per row */
	uint8_t *buf;            /* owned; one chunk */
} gen;

#define UNIT ((size_t)1 << 16)
#define CHUNK ((size_t)64 << 20)
#define MAX_THREADS 64

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The stream of unit u of tensor i (splitmix64 of the three). */
static uint64_t unit_seed(uint64_t seed, int64_t i, int64_t u)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull + (uint64_t)u * 0x94d049bb133111ebull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (z ^ (z >> 31)) | 1;
}

/* n bytes of blocks (or f16/f32 values) of type t with rows of k values,
 * from stream s. */
static void fill_random(uint64_t s, enum dtype t, int64_t k, uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t r = next(&s);
		memcpy(p + i, &r, 8);
	}
	if (t == DT_F32) {
		for (size_t i = 0; i < n / 4; i++)
			((float *)(void *)p)[i] = 1.0f; /* only norms are f32 */
	} else if (t == DT_F16) {
		float a = 0.5f / sqrtf((float)k);
		for (size_t i = 0; i < n / 2; i++) {
			uint16_t h = f32_to_f16(a * ((float)(next(&s) & 0xffff) / 32768.0f - 1.0f));
			memcpy(p + 2 * i, &h, 2);
		}
	} else {
		/* scales so that values stay within about +-2/sqrt(k): the largest
		 * integer a block can hold times d is 2/sqrt(k) */
		size_t bb = (size_t)dtype_block_bytes(t);
		float top = t == DT_Q8_0 ? 127.0f : t == DT_Q6_K ? 127.0f * 32.0f : 63.0f * 15.0f;
		uint16_t d = f32_to_f16(2.0f / sqrtf((float)k) / top), dmin = f32_to_f16(1.0f / sqrtf((float)k) / 63.0f);
		for (size_t b = 0; b + bb <= n; b += bb) {
			size_t at = t == DT_Q6_K ? bb - 2 : 0; /* q6_K keeps d at the end */
			memcpy(p + b + at, &d, 2);
			if (t == DT_Q4_K)
				memcpy(p + b + 2, &dmin, 2);
		}
	}
}

typedef struct plan {
	gen g;
	gguf_writer *w;
} plan;

/* One thread's share of a chunk: units part, part + n_parts, ... */
typedef struct job {
	const gen *g;
	int64_t tensor, unit0;   /* the chunk's first unit in the tensor */
	size_t unit, n;          /* bytes per unit, bytes in the chunk */
	int part, n_parts;
} job;

static void *fill_part(void *arg)
{
	const job *j = arg;
	enum dtype t = j->g->types[j->tensor];
	for (size_t u = (size_t)j->part; u * j->unit < j->n; u += (size_t)j->n_parts) {
		size_t off = u * j->unit;
		fill_random(unit_seed(j->g->seed, j->tensor, j->unit0 + (int64_t)u), t, j->g->row[j->tensor],
			    j->g->buf + off, MIN(j->unit, j->n - off));
	}
	return NULL;
}

/* Fills n bytes of the buffer (units from unit0 on) with every thread. */
static void fill_chunk(const gen *g, int64_t tensor, int64_t unit0, size_t unit, size_t n)
{
	pthread_t th[MAX_THREADS];
	job jobs[MAX_THREADS];
	int n_th = 0;
	for (int p = 0; p < g->n_threads; p++) {
		jobs[p] = (job){.g = g, .tensor = tensor, .unit0 = unit0, .unit = unit, .n = n, .part = p,
				.n_parts = g->n_threads};
		if (p > 0 && pthread_create(&th[n_th], NULL, fill_part, &jobs[p]) == 0)
			n_th++;
		else if (p > 0) /* no thread: this one does that share too */
			fill_part(&jobs[p]);
	}
	fill_part(&jobs[0]);
	for (int i = 0; i < n_th; i++)
		pthread_join(th[i], NULL);
}

static int fill_tensor(void *ctx, int64_t i, gguf_out *out, err *e)
{
	plan *p = ctx;
	int64_t left = gguf_writer_tensor_bytes(p->w, i), unit0 = 0;
	enum dtype t = p->g.types[i];
	size_t bb = t == DT_F32 ? 4 : t == DT_F16 ? 2 : (size_t)dtype_block_bytes(t);
	size_t unit = UNIT / bb * bb, per = CHUNK / unit * unit;
	while (left > 0) {
		size_t n = (size_t)MIN(left, (int64_t)per);
		fill_chunk(&p->g, i, unit0, unit, n);
		if (gguf_out_write(out, p->g.buf, n, e))
			return -1;
		left -= (int64_t)n;
		unit0 += (int64_t)(per / unit);
	}
	return 0;
}

static int add(plan *p, int64_t *n, const char *name, enum dtype t, int64_t ne0, int64_t ne1, err *e)
{
	int64_t ne[2] = {ne0, ne1};
	int64_t i = gguf_writer_add_tensor(p->w, name, t, ne1 ? 2 : 1, ne, e);
	if (i < 0)
		return -1;
	p->g.types = xrealloc(p->g.types, (size_t)(i + 1) * sizeof *p->g.types);
	p->g.row = xrealloc(p->g.row, (size_t)(i + 1) * sizeof *p->g.row);
	p->g.types[i] = t;
	p->g.row[i] = ne0;
	*n = i + 1;
	return 0;
}

int main(int argc, char **argv)
{
	int dim = 4096, layers = 32, heads = 32, kv_heads = 8, ffn = 14336, vocab = 128256;
	int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	unsigned long long seed = 1;
	const char *type = "q4_k", *outp = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		int *ip = !strcmp(a, "--dim") ? &dim : !strcmp(a, "--layers") ? &layers : !strcmp(a, "--heads") ? &heads
			: !strcmp(a, "--kv-heads") ? &kv_heads : !strcmp(a, "--ffn") ? &ffn
			: !strcmp(a, "--vocab") ? &vocab : !strcmp(a, "--threads") ? &threads : NULL;
		if (ip)
			*ip = atoi(v);
		else if (!strcmp(a, "--type"))
			type = v;
		else if (!strcmp(a, "--out"))
			outp = v;
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 10);
		else
			outp = NULL, i = argc;
	}
	enum dtype mat = !strcmp(type, "f16") ? DT_F16 : !strcmp(type, "q4_k") ? DT_Q4_K
		: !strcmp(type, "q8_0") ? DT_Q8_0 : DT_COUNT;
	if (!outp || mat == DT_COUNT || argc % 2 == 0 || dim <= 0 || heads <= 0 || dim % heads || kv_heads <= 0) {
		fprintf(stderr, "usage: gen_rand_gguf --type f16|q4_k|q8_0 --out FILE [--dim N --layers N "
			"--heads N --kv-heads N --ffn N --vocab N --seed S --threads N]\n");
		return 2;
	}
	err e = {0};
	plan p = {.g = {.seed = seed, .n_threads = MAX(1, MIN(threads, MAX_THREADS))}, .w = gguf_writer_new()};
	p.g.buf = xmalloc(CHUNK);
	gguf_writer_set_str(p.w, "general.architecture", "llama");
	gguf_writer_set_str(p.w, "general.name", "random weights (gen_rand_gguf)");
	gguf_writer_set_u32(p.w, "llama.embedding_length", (uint32_t)dim);
	gguf_writer_set_u32(p.w, "llama.block_count", (uint32_t)layers);
	gguf_writer_set_u32(p.w, "llama.feed_forward_length", (uint32_t)ffn);
	gguf_writer_set_u32(p.w, "llama.attention.head_count", (uint32_t)heads);
	gguf_writer_set_u32(p.w, "llama.attention.head_count_kv", (uint32_t)kv_heads);
	gguf_writer_set_u32(p.w, "llama.context_length", 8192);
	gguf_writer_set_u32(p.w, "llama.vocab_size", (uint32_t)vocab);
	int64_t hd = dim / heads, n = 0;
	int rc = 1;
	char name[96];
	if (add(&p, &n, "token_embd.weight", mat, dim, vocab, &e) ||
	    add(&p, &n, "output_norm.weight", DT_F32, dim, 0, &e) ||
	    add(&p, &n, "output.weight", mat == DT_Q4_K ? DT_Q6_K : mat, dim, vocab, &e))
		goto out;
	for (int l = 0; l < layers; l++) {
		static const struct { const char *s; int in, out; } T[] = {
			{"attn_norm", 0, -1}, {"ffn_norm", 0, -1}, {"attn_q", 0, 1}, {"attn_k", 0, 2}, {"attn_v", 0, 2},
			{"attn_output", 1, 0}, {"ffn_gate", 0, 3}, {"ffn_up", 0, 3}, {"ffn_down", 3, 0},
		};
		for (size_t j = 0; j < ARRAY_LEN(T); j++) {
			int64_t sz[4] = {dim, heads * hd, kv_heads * hd, ffn};
			snprintf(name, sizeof name, "blk.%d.%s.weight", l, T[j].s);
			if (add(&p, &n, name, T[j].out < 0 ? DT_F32 : mat, sz[T[j].in], T[j].out < 0 ? 0 : sz[T[j].out], &e))
				goto out;
		}
	}
	double t0 = now_s();
	if (gguf_writer_write(p.w, outp, fill_tensor, &p, &e))
		goto out;
	fprintf(stderr, "%s: %lld tensors, %s, %.1f s (%d threads)\n", outp, (long long)n, dtype_name(mat),
		now_s() - t0, p.g.n_threads);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "gen_rand_gguf: %s\n", e.msg);
	gguf_writer_free(p.w);
	free(p.g.buf);
	free(p.g.types);
	free(p.g.row);
	return rc;
}
