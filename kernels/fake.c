/* kernels/fake.c: the fake device (kern_fake, kern.h): a device backend
 * whose "device memory" is host memory and whose operations are the CPU
 * kernels. Everything above the kernels (weights uploaded once, scratch and
 * K/V in device buffers, the batch staged in one upload, logits downloaded,
 * recorded steps, a memory size that runs out) runs here exactly as it does
 * on a GPU, so placement and partial offload are exercised on every
 * machine. It proves nothing about the CUDA kernels.
 *
 * Each buffer carries a header with its size, so that the memory in use is
 * known (mem_info) and a buffer past what is left is refused (NULL, as on a
 * GPU). Recording keeps each operation's arguments by value and calls them
 * again on replay. Buffer calls while recording are counted as misuse (a
 * GPU backend would fail them), for the tests to check. */
#include "kernels/kern.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 64 bytes in front of each buffer: its size, and 16-byte alignment kept. */
#define HDR 64

enum {
	FK_MATMUL, FK_EMBED, FK_RMSNORM, FK_ROPE, FK_SILU, FK_GELU, FK_SCALE, FK_ADD, FK_BIAS, FK_KV_WRITE,
	FK_ATTENTION
};

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
	int misuse;              /* buffer calls while recording */
	int recorded, replayed;
	int64_t uploads, downloads;
	const char *fail;        /* injected failure (kern_fake_fail), or NULL */
	int64_t mem;             /* capacity in bytes */
} F = {.mem = KERN_FAKE_DEFAULT_MEM};

static _Atomic int64_t used_bytes;

/* ---- operations: the CPU's, or recorded ---- */

static fake_op *rec(int kind)
{
	if (!F.on)
		return NULL;
	kern_graph *g = F.g;
	xgrow(&g->ops, &F.cap, (int64_t)g->n + 1, sizeof *g->ops);
	fake_op *o = &g->ops[g->n++];
	memset(o, 0, sizeof *o);
	o->kind = kind;
	return o;
}

static void fk_matmul(float *y, const float *x, const void *w, enum dtype wt, int64_t n, int64_t k, int64_t n_out)
{
	fake_op *o = rec(FK_MATMUL);
	if (o)
		*o = (fake_op){.kind = FK_MATMUL, .p = {y, x, w}, .i = {n, k, n_out}, .t = wt};
	else
		kern_cpu()->matmul(y, x, w, wt, n, k, n_out);
}

static void fk_embed(float *y, const void *table, enum dtype t, const int32_t *ids, int64_t n, int64_t dim)
{
	fake_op *o = rec(FK_EMBED);
	if (o)
		*o = (fake_op){.kind = FK_EMBED, .p = {y, table, ids}, .i = {n, dim}, .t = t};
	else
		kern_cpu()->embed(y, table, t, ids, n, dim);
}

static void fk_rmsnorm(float *y, const float *x, const float *w, int64_t n, int64_t dim, float eps)
{
	fake_op *o = rec(FK_RMSNORM);
	if (o)
		*o = (fake_op){.kind = FK_RMSNORM, .p = {y, x, w}, .i = {n, dim}, .f = eps};
	else
		kern_cpu()->rmsnorm(y, x, w, n, dim, eps);
}

static void fk_rope(float *x, const int32_t *pos, int64_t n, int n_heads, int head_dim, int n_rot,
		    const float *inv_freq, bool neox)
{
	fake_op *o = rec(FK_ROPE);
	if (o)
		*o = (fake_op){.kind = FK_ROPE, .p = {x, pos, inv_freq}, .i = {n, n_heads, head_dim, n_rot}, .b = neox};
	else
		kern_cpu()->rope(x, pos, n, n_heads, head_dim, n_rot, inv_freq, neox);
}

static void fk_silu_mul(float *g, const float *u, int64_t n)
{
	fake_op *o = rec(FK_SILU);
	if (o)
		*o = (fake_op){.kind = FK_SILU, .p = {g, u}, .i = {n}};
	else
		kern_cpu()->silu_mul(g, u, n);
}

static void fk_gelu_mul(float *g, const float *u, int64_t n)
{
	fake_op *o = rec(FK_GELU);
	if (o)
		*o = (fake_op){.kind = FK_GELU, .p = {g, u}, .i = {n}};
	else
		kern_cpu()->gelu_mul(g, u, n);
}

static void fk_scale(float *x, float s, int64_t n)
{
	fake_op *o = rec(FK_SCALE);
	if (o)
		*o = (fake_op){.kind = FK_SCALE, .p = {x}, .i = {n}, .f = s};
	else
		kern_cpu()->scale(x, s, n);
}

static void fk_add(float *y, const float *x, int64_t n)
{
	fake_op *o = rec(FK_ADD);
	if (o)
		*o = (fake_op){.kind = FK_ADD, .p = {y, x}, .i = {n}};
	else
		kern_cpu()->add(y, x, n);
}

static void fk_add_bias(float *y, const float *b, int64_t n, int64_t dim)
{
	fake_op *o = rec(FK_BIAS);
	if (o)
		*o = (fake_op){.kind = FK_BIAS, .p = {y, b}, .i = {n, dim}};
	else
		kern_cpu()->add_bias(y, b, n, dim);
}

static void fk_kv_write(void *kc, void *vc, const float *k, const float *v, const int64_t *slot, int64_t n,
			const kern_attn *fmt)
{
	fake_op *o = rec(FK_KV_WRITE);
	if (o)
		*o = (fake_op){.kind = FK_KV_WRITE, .p = {kc, vc, k, v, slot}, .i = {n}, .a = *fmt};
	else
		kern_cpu()->kv_write(kc, vc, k, v, slot, n, fmt);
}

static void fk_attention(float *out, const float *q, int64_t n, const kern_attn *a)
{
	fake_op *o = rec(FK_ATTENTION);
	if (o)
		*o = (fake_op){.kind = FK_ATTENTION, .p = {out, q}, .i = {n}, .a = *a};
	else
		kern_cpu()->attention(out, q, n, a);
}

static bool fk_supports(enum dtype t) { return kern_cpu()->supports(t); }
static int fk_set_threads(int n) { return kern_cpu()->set_threads(n); }

/* ---- recording ---- */

static bool fk_record_begin(void)
{
	if (F.on)
		return false;
	F.on = true;
	F.g = xcalloc(1, sizeof *F.g);
	F.cap = 0;
	return true;
}

static kern_graph *fk_record_end(void)
{
	kern_graph *g = F.g;
	F.on = false;
	F.g = NULL;
	F.recorded++;
	return g;
}

/* Runs a recording's operations again, as the kernels' own calls would (the
 * casts give back the const the recording dropped). */
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
		case FK_GELU: C->gelu_mul(p0, o->p[1], o->i[0]); break;
		case FK_SCALE: C->scale(p0, o->f, o->i[0]); break;
		case FK_ADD: C->add(p0, o->p[1], o->i[0]); break;
		case FK_BIAS: C->add_bias(p0, o->p[1], o->i[0], o->i[1]); break;
		case FK_KV_WRITE:
			C->kv_write((void *)o->p[0], (void *)o->p[1], o->p[2], o->p[3], o->p[4], o->i[0], &o->a);
			break;
		case FK_ATTENTION: C->attention(p0, o->p[1], o->i[0], &o->a); break;
		}
	}
	F.replayed++;
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
	if (!F.fail)
		return 0;
	err_set(e, "%s", F.fail);
	return -1;
}

/* ---- memory ---- */

static void *fk_alloc(size_t bytes)
{
	F.misuse += F.on;
	int64_t want = (int64_t)MIN(bytes, (size_t)INT64_MAX / 2);
	if (F.fail || want > F.mem - atomic_load(&used_bytes))
		return NULL;
	/* calloc: large buffers come as fresh zero pages, committed when touched */
	uint8_t *p = calloc(1, bytes + HDR);
	if (!p)
		return NULL;
	memcpy(p, &bytes, sizeof bytes);
	atomic_fetch_add(&used_bytes, want);
	return p + HDR;
}

static void fk_free(void *q)
{
	F.misuse += F.on;
	if (!q)
		return;
	uint8_t *p = (uint8_t *)q - HDR;
	size_t bytes;
	memcpy(&bytes, p, sizeof bytes);
	atomic_fetch_sub(&used_bytes, (int64_t)bytes);
	free(p);
}

static void fk_copy(void *dst, const void *src, size_t bytes)
{
	F.misuse += F.on;
	memmove(dst, src, bytes);
}

static void fk_upload(void *dst, const void *src, size_t bytes)
{
	F.uploads++;
	fk_copy(dst, src, bytes);
}

static void fk_download(void *dst, const void *src, size_t bytes)
{
	F.downloads++;
	fk_copy(dst, src, bytes);
}

static void fk_mem_info(int64_t *free_bytes, int64_t *total_bytes)
{
	*total_bytes = F.mem;
	*free_bytes = MAX(0, F.mem - atomic_load(&used_bytes));
}

static const kern_ops fake_ops = {
	.name = "fake",
	.supports = fk_supports,
	.set_threads = fk_set_threads,
	.matmul = fk_matmul,
	.embed = fk_embed,
	.rmsnorm = fk_rmsnorm,
	.rope = fk_rope,
	.silu_mul = fk_silu_mul,
	.gelu_mul = fk_gelu_mul,
	.scale = fk_scale,
	.add = fk_add,
	.add_bias = fk_add_bias,
	.kv_write = fk_kv_write,
	.attention = fk_attention,
	.buf_alloc = fk_alloc,
	.buf_free = fk_free,
	.upload = fk_upload,
	.download = fk_download,
	.copy = fk_copy,
	.mem_info = fk_mem_info,
	.status = fk_status,
	.record_begin = fk_record_begin,
	.record_end = fk_record_end,
	.replay = fk_replay,
	.graph_free = fk_graph_free,
};

const kern_ops *kern_fake(void)
{
	return &fake_ops;
}

void kern_fake_set_mem(int64_t bytes)
{
	F.mem = bytes > 0 ? bytes : KERN_FAKE_DEFAULT_MEM;
}

void kern_fake_fail(const char *msg)
{
	F.fail = msg;
}

kern_fake_counts kern_fake_get_counts(void)
{
	return (kern_fake_counts){.recorded = F.recorded, .replayed = F.replayed, .misuse = F.misuse,
				  .uploads = F.uploads, .downloads = F.downloads,
				  .used_bytes = atomic_load(&used_bytes)};
}
