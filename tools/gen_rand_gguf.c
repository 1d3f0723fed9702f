/* tools/gen_rand_gguf.c: writes a Llama-shaped GGUF with random weights, fast
 * (a GiB a second or more with several cores), for benchmarks at real sizes:
 * an 8B shape by default.
 *
 *   gen_rand_gguf --type f16|q4_k|q4_k_m|q8_0|q3_k_m|q5_k_m|iq4_xs --out FILE
 *                 [--vocab-from VOCAB.gguf]
 *                 [--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336
 *                 --vocab 128256 --rope-base 500000 --seed 1
 *                 --threads N (default: every core)]
 *
 * Each 64 KiB unit of a tensor (whole blocks) draws from its own stream,
 * seeded by (seed, tensor, unit): the threads fill a 64 MiB chunk's units at
 * once, and the file is the same whatever the thread count.
 * Quantized blocks are made directly from random bits (no quantization
 * search): q4_K blocks get small random super-block scales and random 6-bit
 * sub-block scales, mins and nibbles (every format: random bits with its
 * scales set small). The output matrix is q6_K when the type is q4_k; the
 * _m types and iq4_xs lay the file out as llama.cpp's files of that name are
 * (its rules for a Llama with 4 query heads per KV head, no importance
 * matrix): q4_k_m: q4_K, with q6_K for attn_v and ffn_down in the layers that
 * get more bits (the first and last eighth, and every third one between);
 * q5_k_m: the same on q5_K; q3_k_m: q3_K, with q4_K for attn_output, attn_v
 * and ffn_down, but q5_K for attn_v in layers 0-1 and ffn_down in the first
 * sixteenth; iq4_xs: iq4_xs, with q5_K for every attn_v and the first
 * eighth's ffn_down. The output matrix is q6_K in all of them, the
 * embedding table the main type. f16 values are uniform in
 * +-0.5/sqrt(row length). Norms are 1.
 * --vocab-from copies every tokenizer.* key of a GGUF file (a vocabulary such
 * as ../shared/models/vocab/ggml-vocab-llama3.gguf) and takes the vocabulary
 * size from it; with the hyperparameter keys llama.cpp requires (the RMS norm
 * epsilon, RoPE dimensions and base) llama.cpp's tools then load the file too,
 * so both programs can be measured on it. Without a vocabulary the file is for
 * `pagechat bench` and the memory plan only. */
#include "base/base.h"
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

/* Where a block format keeps its f16 scale d (and its min or offset, -1:
 * none), and the largest integer a block's value is d times (top) or the
 * min's factor (min_top): scales that keep values within about 2/sqrt(k). */
typedef struct block_scales {
	enum dtype t;
	int d_at, dmin_at;
	float top, min_top;
	bool signed_min;          /* q4_1/q5_1: an offset of either sign, -1/sqrt(k) */
} block_scales;

static const block_scales *scales_of(enum dtype t)
{
	static const block_scales tab[] = {
		{DT_Q8_0, 0, -1, 127, 0, false},         {DT_Q4_0, 0, -1, 8, 0, false},
		{DT_Q4_1, 0, 2, 15, 0, true},            {DT_Q5_0, 0, -1, 16, 0, false},
		{DT_Q5_1, 0, 2, 31, 0, true},            {DT_IQ4_NL, 0, -1, 127, 0, false},
		{DT_Q2_K, 80, 82, 15 * 3, 15, false},    {DT_Q3_K, 108, -1, 32 * 4, 0, false},
		{DT_Q4_K, 0, 2, 63 * 15, 63, false},     {DT_Q5_K, 0, 2, 63 * 31, 63, false},
		{DT_Q6_K, 208, -1, 127 * 32, 0, false},  {DT_IQ4_XS, 0, -1, 32 * 127, 0, false},
	};
	for (size_t i = 0; i < ARRAY_LEN(tab); i++)
		if (tab[i].t == t)
			return &tab[i];
	return &tab[0];
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
		const block_scales *sc = scales_of(t);
		uint16_t d = f32_to_f16(2.0f / sqrtf((float)k) / sc->top);
		float m = sc->signed_min ? -1.0f / sqrtf((float)k) : sc->min_top > 0 ? 1.0f / sqrtf((float)k) / sc->min_top : 0;
		uint16_t dmin = f32_to_f16(m);
		for (size_t b = 0; b + bb <= n; b += bb) {
			memcpy(p + b + sc->d_at, &d, 2);
			if (sc->dmin_at >= 0)
				memcpy(p + b + sc->dmin_at, &dmin, 2);
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

/* What the command line asks for. */
typedef struct args {
	int dim, layers, heads, kv_heads, ffn, vocab, threads;
	float rope_base;
	unsigned long long seed;
	const char *type, *out, *vocab_from;  /* borrowed from argv */
	enum dtype mat;                       /* the matrices' main type */
	enum layout { PLAIN, K_M, Q3_K_M, IQ4_XS } layout;   /* which matrices get other types */
} args;

/* 0, or -1 after printing the usage. */
static int parse_args(int argc, char **argv, args *a)
{
	*a = (args){.dim = 4096, .layers = 32, .heads = 32, .kv_heads = 8, .ffn = 14336, .vocab = 128256,
		    .threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .rope_base = 500000.0f, .seed = 1,
		    .type = "q4_k"};
	bool bad = argc % 2 == 0;
	for (int i = 1; !bad && i + 1 < argc; i += 2) {
		const char *o = argv[i], *v = argv[i + 1];
		int *ip = !strcmp(o, "--dim") ? &a->dim : !strcmp(o, "--layers") ? &a->layers
			: !strcmp(o, "--heads") ? &a->heads : !strcmp(o, "--kv-heads") ? &a->kv_heads
			: !strcmp(o, "--ffn") ? &a->ffn : !strcmp(o, "--vocab") ? &a->vocab
			: !strcmp(o, "--threads") ? &a->threads : NULL;
		if (ip)
			*ip = atoi(v);
		else if (!strcmp(o, "--type"))
			a->type = v;
		else if (!strcmp(o, "--out"))
			a->out = v;
		else if (!strcmp(o, "--vocab-from"))
			a->vocab_from = v;
		else if (!strcmp(o, "--seed"))
			a->seed = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--rope-base"))
			a->rope_base = strtof(v, NULL);
		else
			bad = true;
	}
	static const struct { const char *name; enum dtype mat; enum layout layout; } types[] = {
		{"f16", DT_F16, PLAIN}, {"q4_k", DT_Q4_K, PLAIN}, {"q8_0", DT_Q8_0, PLAIN}, {"q4_k_m", DT_Q4_K, K_M},
		{"q5_k_m", DT_Q5_K, K_M}, {"q3_k_m", DT_Q3_K, Q3_K_M}, {"iq4_xs", DT_IQ4_XS, IQ4_XS},
	};
	a->mat = DT_COUNT;
	for (size_t i = 0; i < ARRAY_LEN(types); i++)
		if (!strcmp(a->type, types[i].name))
			a->mat = types[i].mat, a->layout = types[i].layout;
	if (bad || !a->out || a->mat == DT_COUNT || a->dim <= 0 || a->heads <= 0 || a->dim % a->heads ||
	    a->kv_heads <= 0 || a->heads % a->kv_heads || a->layers <= 0 || a->ffn <= 0 || a->vocab <= 0 ||
	    !(a->rope_base > 0)) {
		fprintf(stderr, "usage: gen_rand_gguf --type f16|q4_k|q4_k_m|q8_0|q3_k_m|q5_k_m|iq4_xs --out FILE "
			"[--vocab-from VOCAB.gguf --dim N --layers N --heads N --kv-heads N --ffn N --vocab N --rope-base B --seed S "
			"--threads N]\n");
		return -1;
	}
	return 0;
}

/* Copies every tokenizer.* key of the file at path into w; *n_vocab gets its
 * token count. 0, or -1 with e filled. */
static int copy_vocab(gguf_writer *w, const char *path, int *n_vocab, err *e)
{
	gguf_file *f = gguf_open(path, e);
	if (!f)
		return -1;
	gguf_arr toks;
	int rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &toks, e);
	if (!rc && (toks.n == 0 || toks.n > INT32_MAX)) {
		err_set(e, "%s: tokenizer.ggml.tokens holds %llu tokens", path, (unsigned long long)toks.n);
		rc = -1;
	}
	for (int64_t i = 0; !rc && i < gguf_n_kv(f); i++) {
		gguf_str k = gguf_kv_key(f, i);
		if (k.len > 10 && !memcmp(k.p, "tokenizer.", 10))
			gguf_writer_copy_kv(w, f, i);
	}
	if (!rc)
		*n_vocab = (int)toks.n;
	gguf_close(f);
	return rc;
}

/* The hyperparameters (every key llama.cpp requires for "llama"). */
static void set_hparams(gguf_writer *w, const args *a)
{
	/* llama.cpp's file types: mostly F16, Q8_0, Q4_K_S, Q4_K_M, Q5_K_M, Q3_K_M, IQ4_XS */
	uint32_t ftype = a->mat == DT_F16 ? 1 : a->mat == DT_Q8_0 ? 7 : a->layout == PLAIN ? 14
		       : a->mat == DT_Q4_K ? 15 : a->mat == DT_Q5_K ? 17 : a->mat == DT_Q3_K ? 12 : 30;
	gguf_writer_set_str(w, "general.architecture", "llama");
	gguf_writer_set_str(w, "general.name", "random weights (gen_rand_gguf)");
	gguf_writer_set_u32(w, "general.file_type", ftype);
	gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)a->dim);
	gguf_writer_set_u32(w, "llama.block_count", (uint32_t)a->layers);
	gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)a->ffn);
	gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)a->heads);
	gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)a->kv_heads);
	gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
	gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(a->dim / a->heads));
	gguf_writer_set_f32(w, "llama.rope.freq_base", a->rope_base);
	gguf_writer_set_u32(w, "llama.context_length", 8192);
	gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)a->vocab);
}

/* Q4_K_M's layers with more bits in attn_v and ffn_down: the first and last
 * eighth, and every third layer between them. */
static bool more_bits(int layer, int n_layers)
{
	return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

enum role { NORM, OTHER, ATTN_V, ATTN_OUT, FFN_DOWN };

/* The type of a layer's matrix of this role in layer l, as the layout has it. */
static enum dtype layer_type(const args *a, enum role r, int l)
{
	int n = a->layers;
	if (r == NORM)
		return DT_F32;
	switch (a->layout) {
	case K_M:
		return (r == ATTN_V || r == FFN_DOWN) && more_bits(l, n) ? DT_Q6_K : a->mat;
	case Q3_K_M:
		if (r == ATTN_V)
			return l < 2 ? DT_Q5_K : DT_Q4_K;
		if (r == FFN_DOWN)
			return l < n / 16 ? DT_Q5_K : DT_Q4_K;
		return r == ATTN_OUT ? DT_Q4_K : a->mat;
	case IQ4_XS:
		return r == ATTN_V || (r == FFN_DOWN && l < n / 8) ? DT_Q5_K : a->mat;
	default:
		return a->mat;
	}
}

/* Declares every tensor; 0, or -1 with e. */
static int add_tensors(plan *p, const args *a, int64_t *n, err *e)
{
	static const struct { const char *s; int in, out; enum role role; } T[] = {
		{"attn_norm", 0, -1, NORM}, {"ffn_norm", 0, -1, NORM}, {"attn_q", 0, 1, OTHER},
		{"attn_k", 0, 2, OTHER}, {"attn_v", 0, 2, ATTN_V}, {"attn_output", 1, 0, ATTN_OUT},
		{"ffn_gate", 0, 3, OTHER}, {"ffn_up", 0, 3, OTHER}, {"ffn_down", 3, 0, FFN_DOWN},
	};
	int64_t hd = a->dim / a->heads, sz[4] = {a->dim, a->heads * hd, a->kv_heads * hd, a->ffn};
	char name[96];
	if (add(p, n, "token_embd.weight", a->mat, a->dim, a->vocab, e) ||
	    add(p, n, "output_norm.weight", DT_F32, a->dim, 0, e) ||
	    add(p, n, "output.weight", a->mat == DT_F16 || a->mat == DT_Q8_0 ? a->mat : DT_Q6_K, a->dim, a->vocab, e))
		return -1;
	for (int l = 0; l < a->layers; l++)
		for (size_t j = 0; j < ARRAY_LEN(T); j++) {
			enum dtype t = layer_type(a, T[j].role, l);
			snprintf(name, sizeof name, "blk.%d.%s.weight", l, T[j].s);
			if (add(p, n, name, t, sz[T[j].in], T[j].out < 0 ? 0 : sz[T[j].out], e))
				return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	args a;
	if (parse_args(argc, argv, &a))
		return 2;
	err e = {0};
	plan p = {.g = {.seed = a.seed, .n_threads = MAX(1, MIN(a.threads, MAX_THREADS))}, .w = gguf_writer_new()};
	p.g.buf = xmalloc(CHUNK);
	int64_t n = 0;
	int rc = 1;
	if (a.vocab_from && copy_vocab(p.w, a.vocab_from, &a.vocab, &e))
		goto out;
	set_hparams(p.w, &a);
	if (add_tensors(&p, &a, &n, &e))
		goto out;
	double t0 = now_s();
	if (gguf_writer_write(p.w, a.out, fill_tensor, &p, &e))
		goto out;
	fprintf(stderr, "%s: %lld tensors, %s%s, vocabulary %d%s, %.1f s (%d threads)\n", a.out, (long long)n,
		dtype_name(a.mat), a.layout != PLAIN ? " (llama.cpp's layout of that name)" : "", a.vocab,
		a.vocab_from ? "" : " (no tokenizer)",
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
