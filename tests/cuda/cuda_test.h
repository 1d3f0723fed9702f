/* tests/cuda/cuda_test.h: what the CUDA comparison tests share: the backend
 * (or a one-line "no CUDA device: ..." and a failing exit: these tests never
 * pass without a GPU), device buffers and seeded random data.
 *
 * PAGECHAT_FAKE_DEVICE=1 swaps in a stand-in for checking the tests
 * themselves and the device paths of the model, pool and engine on a machine
 * without a GPU: the CPU kernels behind "device" buffers in host memory. It
 * records too (kern_ops.record_begin ... replay: each operation's arguments
 * kept by value, called again on replay), so the model's recorded steps run
 * here, and its status() reports a failure a test injects (fake_fail). It
 * says so on stderr; it proves nothing about the CUDA kernels. */
#ifndef PAGECHAT_CUDA_TEST_H
#define PAGECHAT_CUDA_TEST_H

#include "kernels/kern.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

static const kern_ops *G; /* the CUDA backend */
static bool fake_device;  /* G is the PAGECHAT_FAKE_DEVICE stand-in */

/* ---- the fake device's recorder ---- */

enum { FK_MATMUL, FK_EMBED, FK_RMSNORM, FK_ROPE, FK_SILU, FK_ADD, FK_BIAS, FK_KV_WRITE, FK_ATTENTION };

typedef struct fake_op {
	int kind;
	const void *p[6];        /* pointer arguments in order */
	int64_t i[4];            /* integer arguments in order */
	float f;
	bool b;
	enum dtype t;
	kern_attn a;             /* kv_write's format, attention's arguments */
} fake_op;

struct kern_graph {
	fake_op *ops;            /* owned */
	int n;
};

static struct {
	bool on;                 /* recording */
	kern_graph *g;           /* the recording under way (owned) */
	int cap;
	int misuse;              /* buffer calls while recording (a test failure) */
	int recorded, replayed;  /* counts, for the tests */
	const char *fail;        /* injected failure for status(), or NULL */
} fake_rec;

static fake_op *fake_push(int kind)
{
	kern_graph *g = fake_rec.g;
	xgrow(&g->ops, &fake_rec.cap, (int64_t)g->n + 1, sizeof *g->ops);
	fake_op *o = &g->ops[g->n++];
	memset(o, 0, sizeof *o);
	o->kind = kind;
	return o;
}

#define FAKE_REC(kind) fake_op *o = fake_rec.on ? fake_push(kind) : NULL; if (o)

static void fk_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out)
{
	FAKE_REC(FK_MATMUL) {
		*o = (fake_op){.kind = FK_MATMUL, .p = {y, x, w}, .i = {n, k, n_out}, .t = wt};
		return;
	}
	kern_cpu()->matmul(y, x, w, wt, n, k, n_out);
}

static void fk_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim)
{
	FAKE_REC(FK_EMBED) {
		*o = (fake_op){.kind = FK_EMBED, .p = {y, table, ids}, .i = {n, dim}, .t = t};
		return;
	}
	kern_cpu()->embed(y, table, t, ids, n, dim);
}

static void fk_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	FAKE_REC(FK_RMSNORM) {
		*o = (fake_op){.kind = FK_RMSNORM, .p = {y, x, w}, .i = {n, dim}, .f = eps};
		return;
	}
	kern_cpu()->rmsnorm(y, x, w, n, dim, eps);
}

static void fk_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim, int n_rot,
		    const float *inv_freq, bool neox)
{
	FAKE_REC(FK_ROPE) {
		*o = (fake_op){.kind = FK_ROPE, .p = {x, pos, inv_freq}, .i = {n, n_heads, head_dim, n_rot}, .b = neox};
		return;
	}
	kern_cpu()->rope(x, pos, n, n_heads, head_dim, n_rot, inv_freq, neox);
}

static void fk_silu_mul(float *g, const float *u, int64_t n)
{
	FAKE_REC(FK_SILU) {
		*o = (fake_op){.kind = FK_SILU, .p = {g, u}, .i = {n}};
		return;
	}
	kern_cpu()->silu_mul(g, u, n);
}

static void fk_add(float *y, const float *x, int64_t n)
{
	FAKE_REC(FK_ADD) {
		*o = (fake_op){.kind = FK_ADD, .p = {y, x}, .i = {n}};
		return;
	}
	kern_cpu()->add(y, x, n);
}

static void fk_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	FAKE_REC(FK_BIAS) {
		*o = (fake_op){.kind = FK_BIAS, .p = {y, b}, .i = {n, dim}};
		return;
	}
	kern_cpu()->add_bias(y, b, n, dim);
}

static void fk_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
			const kern_attn *fmt)
{
	FAKE_REC(FK_KV_WRITE) {
		*o = (fake_op){.kind = FK_KV_WRITE, .p = {kc, vc, k, v, slot}, .i = {n}, .a = *fmt};
		return;
	}
	kern_cpu()->kv_write(kc, vc, k, v, slot, n, fmt);
}

static void fk_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	FAKE_REC(FK_ATTENTION) {
		*o = (fake_op){.kind = FK_ATTENTION, .p = {out, q}, .i = {n}, .a = *a};
		return;
	}
	kern_cpu()->attention(out, q, n, a);
}

static bool fk_record_begin(void)
{
	if (fake_rec.on)
		return false;
	fake_rec.on = true;
	fake_rec.g = xcalloc(1, sizeof *fake_rec.g);
	fake_rec.cap = 0;
	return true;
}

static kern_graph *fk_record_end(void)
{
	kern_graph *g = fake_rec.g;
	fake_rec.on = false;
	fake_rec.g = NULL;
	fake_rec.recorded++;
	return g;
}

/* Runs a recording's operations again, as the kernels' own calls would
 * (the casts give back the const the recording dropped). */
static int fk_replay(kern_graph *g)
{
	const kern_ops *C = kern_cpu();
	for (int i = 0; i < g->n; i++) {
		const fake_op *o = &g->ops[i];
		float *p0 = (float *)o->p[0];
		switch (o->kind) {
		case FK_MATMUL: C->matmul(p0, o->p[1], o->p[2], o->t, o->i[0], o->i[1], o->i[2]); break;
		case FK_EMBED: C->embed(p0, o->p[1], o->t, o->p[2], o->i[0], o->i[1]); break;
		case FK_RMSNORM: C->rmsnorm(p0, o->p[1], o->p[2], o->i[0], o->i[1], o->f); break;
		case FK_ROPE:
			C->rope(p0, o->p[1], o->i[0], (int)o->i[1], (int)o->i[2], (int)o->i[3], o->p[2], o->b);
			break;
		case FK_SILU: C->silu_mul(p0, o->p[1], o->i[0]); break;
		case FK_ADD: C->add(p0, o->p[1], o->i[0]); break;
		case FK_BIAS: C->add_bias(p0, o->p[1], o->i[0], o->i[1]); break;
		case FK_KV_WRITE:
			C->kv_write((void *)o->p[0], (void *)o->p[1], o->p[2], o->p[3], o->p[4], o->i[0], &o->a);
			break;
		case FK_ATTENTION: C->attention(p0, o->p[1], o->i[0], &o->a); break;
		}
	}
	fake_rec.replayed++;
	return 0;
}

static void fk_graph_free(kern_graph *g)
{
	if (g)
		free(g->ops);
	free(g);
}

static int fk_status(err *e)
{
	if (!fake_rec.fail)
		return 0;
	err_set(e, "%s", fake_rec.fail);
	return -1;
}

/* The fake device's memory: buffers past it do not fit (NULL, as on a GPU). */
#define FAKE_DEVICE_BYTES ((size_t)1 << 34)

static void *fake_alloc(size_t bytes)
{
	fake_rec.misuse += fake_rec.on;
	return fake_rec.fail || bytes > FAKE_DEVICE_BYTES ? NULL : calloc(1, bytes ? bytes : 1);
}

static void fake_free(void *p)
{
	fake_rec.misuse += fake_rec.on;
	free(p);
}

static void fake_copy(void *dst, const void *src, size_t bytes)
{
	fake_rec.misuse += fake_rec.on;
	memmove(dst, src, bytes);
}

static void fake_mem_info(int64_t *f, int64_t *t) { *f = *t = (int64_t)FAKE_DEVICE_BYTES; }

static void need_cuda(const char *file)
{
	err e = {0};
	const char *fake = getenv("PAGECHAT_FAKE_DEVICE");
	if (fake && !strcmp(fake, "1")) {
		static kern_ops f;
		f = *kern_cpu();
		f.name = "fake-device";
		f.matmul = fk_matmul;
		f.embed = fk_embed;
		f.rmsnorm = fk_rmsnorm;
		f.rope = fk_rope;
		f.silu_mul = fk_silu_mul;
		f.add = fk_add;
		f.add_bias = fk_add_bias;
		f.kv_write = fk_kv_write;
		f.attention = fk_attention;
		f.buf_alloc = fake_alloc;
		f.buf_free = fake_free;
		f.upload = f.download = f.copy = fake_copy;
		f.mem_info = fake_mem_info;
		f.status = fk_status;
		f.record_begin = fk_record_begin;
		f.record_end = fk_record_end;
		f.replay = fk_replay;
		f.graph_free = fk_graph_free;
		G = &f;
		fake_device = true;
		fprintf(stderr, "%s: PAGECHAT_FAKE_DEVICE=1: CPU kernels behind host \"device\" buffers, "
			"not CUDA\n", file);
		return;
	}
	G = kern_cuda(&e);
	if (!G) {
		fprintf(stderr, "%s\n", e.msg);
		printf("%s: 0 passed, 1 failed\n", file);
		exit(1);
	}
}

/* A device copy of host bytes, in a buffer of whole 256-byte units (as a
 * model's weights are laid out: kernels may read a word past a row). */
static inline void *dev_put(const void *h, size_t bytes)
{
	void *d = G->buf_alloc((bytes + 255) & ~(size_t)255);
	if (!d) {
		fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
		exit(1);
	}
	if (h)
		G->upload(d, h, bytes);
	return d;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline float frand(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static inline float *rand_floats(size_t n, float scale)
{
	float *p = xmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand() * scale;
	return p;
}

#endif
