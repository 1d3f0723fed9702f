/* tests/test_gguf.c: the GGUF reader.
 *
 * Real files (the stories260K model, the vocab-only tokenizers) are checked
 * against a minimal independent parser in this file; generated files (an
 * in-memory writer below) cover every value type, arrays of each type, several
 * tensor types, custom alignments and v2. Corrupt input (every truncation,
 * targeted field damage, seeded random mutation, random buffers) must fail
 * with a message naming the file and the problem, never crash, and never give
 * a view outside the buffer: buffers are malloc'd at their exact size so ASan
 * sees any overread. Run from the repository root. */
#include "models/gguf.h"
#include "tests/fuzz/gguf_gen.h"
#include "tests/test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL     "../shared/models/stories260K.gguf"
#define VOCAB_DIR "../shared/models/vocab"
#define GEN_NAME  "gen.gguf"
#define MAXK      64          /* kv entries a layout records */
#define MAXT      64          /* tensors a layout records */
#define MAXF      4096        /* structural fields a layout records */

/* ---- small helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)        /* xorshift64* */
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* An exact-size heap copy, so that ASan catches any read past n. */
static uint8_t *copy_of(const void *p, size_t n)
{
	uint8_t *q = malloc(n ? n : 1);
	if (n)
		memcpy(q, p, n);
	return q;
}

static uint8_t *read_all(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long sz = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
	if (sz < 0 || fread(p, 1, (size_t)sz, fp) != (size_t)sz) {
		free(p);
		p = NULL;
	}
	fclose(fp);
	*n = sz > 0 ? (size_t)sz : 0;
	return p;
}

static bool has(const err *e, const char *word)
{
	return word == NULL || strstr(e->msg, word) != NULL;
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- reference tables (GGUF spec / ggml type traits), independent of the reader ---- */

static const int ref_vsize[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static const struct { uint32_t id; int64_t blk, bytes; } ref_types[] = {
	{0, 1, 4}, {1, 1, 2}, {2, 32, 18}, {3, 32, 20}, {6, 32, 22}, {7, 32, 24},
	{8, 32, 34}, {9, 32, 36}, {10, 256, 84}, {11, 256, 110}, {12, 256, 144},
	{13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {20, 32, 18}, {23, 256, 136},
	{24, 1, 1}, {25, 1, 2}, {26, 1, 4}, {27, 1, 8}, {28, 1, 8}, {30, 1, 2},
};

static bool ref_type(uint32_t id, int64_t *blk, int64_t *bytes)
{
	for (size_t i = 0; i < ARRAY_LEN(ref_types); i++)
		if (ref_types[i].id == id) {
			*blk = ref_types[i].blk;
			*bytes = ref_types[i].bytes;
			return true;
		}
	return false;
}

/* Bytes of a tensor of n elements (n a whole number of blocks). */
static uint64_t ref_bytes(uint32_t type, uint64_t n)
{
	int64_t blk, bytes;
	if (!ref_type(type, &blk, &bytes))
		return 0;
	return n / (uint64_t)blk * (uint64_t)bytes;
}

/* ---- layout: where each field of a file lies (from the writer or the reference parser) ---- */

struct lay {
	uint32_t version, alignment;
	uint64_t n_kv, n_tensors;
	size_t n_t_at, n_kv_at;
	size_t key_at[MAXK], type_at[MAXK], val_at[MAXK]; /* key length field, type field, value */
	size_t name_at[MAXT], ndims_at[MAXT], ne_at[MAXT], ttype_at[MAXT], off_at[MAXT];
	uint64_t off[MAXT], bytes[MAXT];
	uint64_t info_end, data_off, data_end;             /* data_end: end of the last tensor */
	size_t n_fields;
	size_t field_at[MAXF];                             /* counts, lengths, types, offsets */
	uint8_t field_w[MAXF];
};

static void lay_field(struct lay *L, size_t at, int w)
{
	if (L->n_fields < MAXF) {
		L->field_at[L->n_fields] = at;
		L->field_w[L->n_fields++] = (uint8_t)w;
	}
}

/* Index of the kv or tensor whose key/name (at key_at/name_at) is s, or -1. */
static int lay_find(const uint8_t *buf, const size_t *at, uint64_t n, const char *s)
{
	for (uint64_t i = 0; i < n && i < MAXK; i++) {
		uint64_t len = get_le(buf + at[i], 8);
		if (len == strlen(s) && !memcmp(buf + at[i] + 8, s, len))
			return (int)i;
	}
	return -1;
}

/* ---- the reference parser: enough of GGUF to find every field of a valid file ---- */

typedef struct rcur {
	const uint8_t *p;
	size_t n, pos;
	bool bad;
	struct lay *L;
} rcur;

static uint64_t r_get(rcur *c, int w, bool field)
{
	if (c->bad || (size_t)w > c->n - c->pos) {
		c->bad = true;
		return 0;
	}
	if (field)
		lay_field(c->L, c->pos, w);
	uint64_t v = get_le(c->p + c->pos, w);
	c->pos += (size_t)w;
	return v;
}

static void r_skip(rcur *c, uint64_t n)
{
	if (c->bad || n > c->n - c->pos)
		c->bad = true;
	else
		c->pos += n;
}

static void r_value(rcur *c, uint32_t t)
{
	if (t == GGUF_STR) {
		r_skip(c, r_get(c, 8, true));
	} else if (t == GGUF_ARR) {
		uint32_t et = (uint32_t)r_get(c, 4, true);
		uint64_t n = r_get(c, 8, true);
		if (et == GGUF_ARR || et > 12)
			c->bad = true;
		else if (et != GGUF_STR)
			r_skip(c, n > c->n ? c->n + 1 : n * (uint64_t)ref_vsize[et]);
		for (uint64_t i = 0; et == GGUF_STR && i < n && !c->bad; i++)
			r_value(c, et);
	} else if (t > 12) {
		c->bad = true;
	} else {
		r_skip(c, (uint64_t)ref_vsize[t]);
	}
}

static void r_tensor(rcur *c, uint64_t i)
{
	struct lay *L = c->L;
	size_t name_at = c->pos;
	r_skip(c, r_get(c, 8, true));
	size_t ndims_at = c->pos;
	uint32_t nd = (uint32_t)r_get(c, 4, true);
	size_t ne_at = c->pos;
	uint64_t n = 1;
	for (uint32_t d = 0; d < nd && d < 4; d++)
		n *= r_get(c, 8, true);
	size_t ttype_at = c->pos;
	uint32_t type = (uint32_t)r_get(c, 4, true);
	size_t off_at = c->pos;
	uint64_t off = r_get(c, 8, true);
	uint64_t bytes = ref_bytes(type, n);
	if (nd < 1 || nd > 4)
		c->bad = true;
	if (i < MAXT) {
		L->name_at[i] = name_at, L->ndims_at[i] = ndims_at, L->ne_at[i] = ne_at;
		L->ttype_at[i] = ttype_at, L->off_at[i] = off_at;
		L->off[i] = off, L->bytes[i] = bytes;
	}
	L->data_end = MAX(L->data_end, off + bytes);
}

/* Fills L from a valid file; returns false when the file does not parse. */
static bool ref_parse(const uint8_t *p, size_t n, struct lay *L)
{
	memset(L, 0, sizeof *L);
	rcur c = {.p = p, .n = n, .L = L};
	L->alignment = 32;
	if (n < 4 || memcmp(p, "GGUF", 4))
		return false;
	c.pos = 4;
	L->version = (uint32_t)r_get(&c, 4, true);
	L->n_t_at = c.pos;
	L->n_tensors = r_get(&c, 8, true);
	L->n_kv_at = c.pos;
	L->n_kv = r_get(&c, 8, true);
	for (uint64_t i = 0; i < L->n_kv && !c.bad; i++) {
		size_t key_at = c.pos;
		uint64_t klen = r_get(&c, 8, true);
		bool is_align = klen == 17 && klen <= n - c.pos && !memcmp(p + c.pos, "general.alignment", 17);
		r_skip(&c, klen);
		size_t type_at = c.pos;
		uint32_t t = (uint32_t)r_get(&c, 4, true);
		if (i < MAXK)
			L->key_at[i] = key_at, L->type_at[i] = type_at, L->val_at[i] = c.pos;
		if (is_align && t == GGUF_U32 && !c.bad && c.pos + 4 <= n)
			L->alignment = (uint32_t)get_le(p + c.pos, 4);
		r_value(&c, t);
	}
	for (uint64_t i = 0; i < L->n_tensors && !c.bad; i++)
		r_tensor(&c, i);
	L->info_end = c.pos;
	L->data_off = align_up(c.pos, L->alignment);
	L->data_end += L->data_off;
	return !c.bad;
}

/* ---- the writer: GGUF files from a spec (on gguf_gen.h), and where each field lies ---- */

static uint64_t f64_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, 8);
	return u;
}

struct gval {
	uint32_t type;           /* enum gguf_vtype */
	uint32_t elem;           /* arrays: element type; items come from item_*() */
	uint64_t n;              /* arrays: item count */
	uint64_t bits;           /* integers and bool (two's complement) */
	double f;                /* f32, f64 */
	const char *s;           /* strings */
	size_t s_len;
};

struct gkv {
	const char *key;
	struct gval v;
};

struct gten {
	const char *name;
	uint32_t n_dims;
	uint64_t ne[4];
	uint32_t type;           /* ggml type id */
};

struct gspec {
	uint32_t version;
	uint32_t align;          /* 0: no general.alignment key (the default 32 applies) */
	const struct gkv *kv;
	size_t n_kv;
	const struct gten *t;
	size_t n_t;
};

static uint64_t item_bits(uint64_t i)
{
	return (i + 1) * 0x9e3779b97f4a7c15ull;
}

static double item_f(uint64_t i)
{
	return (double)i * 0.25 - 3.5; /* exact in f32 */
}

/* Array string item i: item 0 is empty, some hold a NUL byte. */
static size_t item_str(uint64_t i, char buf[48])
{
	if (i == 0)
		return 0;
	int n = snprintf(buf, 48, "%.*s%llu", (int)(i % 5), "~!~!~", (unsigned long long)i);
	if (i % 7 == 3)
		buf[0] = '\0';
	return (size_t)n;
}

/* The value the reader should give for integer bits stored in type t. */
static int64_t expect_int(uint32_t t, uint64_t bits)
{
	if (t == GGUF_BOOL)
		return (int64_t)(bits & 1);
	int w = ref_vsize[t];
	uint64_t v = w == 8 ? bits : bits & ((1ull << (8 * w)) - 1);
	bool is_signed = t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
	if (is_signed && w < 8 && (v >> (8 * w - 1)))
		v |= ~0ull << (8 * w);
	return (int64_t)v;
}

static void gen_scalar(gw *b, uint32_t t, uint64_t bits, double f)
{
	if (t == GGUF_F32)
		gw_f32(b, (float)f);
	else if (t == GGUF_F64)
		gw_le(b, f64_bits(f), 8);
	else if (t == GGUF_BOOL)
		gw_le(b, bits & 1, 1);
	else
		gw_le(b, bits, ref_vsize[t]);
}

static void gen_kv(gw *b, const struct gkv *kv, struct lay *L, size_t i)
{
	const struct gval *v = &kv->v;
	size_t key_at = b->n;
	lay_field(L, b->n, 8);
	gw_str(b, kv->key, strlen(kv->key));
	if (i < MAXK)
		L->key_at[i] = key_at, L->type_at[i] = b->n, L->val_at[i] = b->n + 4;
	lay_field(L, b->n, 4);
	gw_le(b, v->type, 4);
	if (v->type == GGUF_STR) {
		lay_field(L, b->n, 8);
		gw_str(b, v->s, v->s_len);
	} else if (v->type == GGUF_ARR) {
		lay_field(L, b->n, 4);
		gw_le(b, v->elem, 4);
		lay_field(L, b->n, 8);
		gw_le(b, v->n, 8);
		for (uint64_t k = 0; k < v->n; k++) {
			char s[48];
			if (v->elem == GGUF_STR) {
				lay_field(L, b->n, 8);
				size_t len = item_str(k, s);
				gw_str(b, s, len);
			} else {
				gen_scalar(b, v->elem, item_bits(k), item_f(k));
			}
		}
	} else {
		gen_scalar(b, v->type, v->bits, v->f);
	}
}

static uint64_t gten_elems(const struct gten *t)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
		n *= t->ne[d];
	return n;
}

static uint8_t pattern(size_t tensor, uint64_t j)
{
	return (uint8_t)(tensor * 37 + j * 11 + 1);
}

/* Writes the info of tensor i placed at *off (advanced past it, aligned to A). */
static void gen_tensor_info(gw *b, const struct gten *t, uint32_t A, uint64_t *off, struct lay *L,
			    size_t i)
{
	size_t name_at = b->n, ndims_at, ne_at, ttype_at, off_at;
	uint64_t bytes = ref_bytes(t->type, gten_elems(t));
	lay_field(L, b->n, 8);
	gw_str(b, t->name, strlen(t->name));
	ndims_at = b->n, lay_field(L, b->n, 4);
	gw_le(b, t->n_dims, 4);
	ne_at = b->n;
	for (uint32_t d = 0; d < t->n_dims; d++)
		lay_field(L, b->n, 8), gw_le(b, t->ne[d], 8);
	ttype_at = b->n, lay_field(L, b->n, 4);
	gw_le(b, t->type, 4);
	off_at = b->n, lay_field(L, b->n, 8);
	gw_le(b, *off, 8);
	if (i < MAXT) {
		L->name_at[i] = name_at, L->ndims_at[i] = ndims_at, L->ne_at[i] = ne_at;
		L->ttype_at[i] = ttype_at, L->off_at[i] = off_at;
		L->off[i] = *off, L->bytes[i] = bytes;
	}
	*off = align_up(*off + bytes, A);
}

/* Writes the file for s into b (b->n reset) and its layout into L. Tensors are
 * packed in order at aligned offsets; with no tensors there is no padding and
 * no data section (like the vocab-only files). */
static void gen(gw *b, const struct gspec *s, struct lay *L)
{
	uint32_t A = s->align ? s->align : 32;
	memset(L, 0, sizeof *L);
	b->n = 0;
	gw_bytes(b, "GGUF", 4);
	gw_le(b, s->version, 4);
	L->version = s->version, L->alignment = A;
	L->n_kv = s->n_kv + (s->align != 0), L->n_tensors = s->n_t;
	L->n_t_at = b->n;
	gw_le(b, s->n_t, 8);
	L->n_kv_at = b->n;
	gw_le(b, L->n_kv, 8);
	for (size_t i = 0; i < s->n_kv; i++)
		gen_kv(b, &s->kv[i], L, i);
	if (s->align) {
		struct gkv a = {"general.alignment", {.type = GGUF_U32, .bits = s->align}};
		gen_kv(b, &a, L, s->n_kv);
	}
	uint64_t off = 0;
	for (size_t i = 0; i < s->n_t; i++)
		gen_tensor_info(b, &s->t[i], A, &off, L, i);
	L->info_end = b->n;
	if (s->n_t == 0)
		return;
	while (b->n % A)
		gw_le(b, 0, 1);
	L->data_off = b->n;
	off = 0;
	for (size_t i = 0; i < s->n_t; i++) {
		uint64_t bytes = ref_bytes(s->t[i].type, gten_elems(&s->t[i]));
		while (b->n < L->data_off + off)
			gw_le(b, 0, 1);
		for (uint64_t j = 0; j < bytes; j++)
			gw_le(b, pattern(i, j), 1);
		L->data_end = b->n;
		off = align_up(off + bytes, A);
	}
}

/* ---- walking an opened file: every view must lie inside the buffer ---- */

static volatile unsigned sink;

static bool inside(const void *p, uint64_t n, const uint8_t *buf, size_t size)
{
	const uint8_t *q = p;
	return q >= buf && q <= buf + size && n <= (uint64_t)(buf + size - q);
}

static int walk_arr(const gguf_file *f, const char *key, const uint8_t *buf, size_t size)
{
	gguf_arr a;
	int bad = 0;
	err e = {""};
	if (gguf_get_arr(f, key, &a, &e))
		return 1;
	if (a.type >= GGUF_VTYPE_COUNT || a.type == GGUF_ARR)
		return 1;
	if (a.type != GGUF_STR)
		bad += !inside(a.data, a.n * (uint64_t)ref_vsize[a.type], buf, size);
	for (uint64_t i = 0; i < a.n && !bad; i++) {
		if (a.type == GGUF_STR) {
			gguf_str s = gguf_arr_str(&a, i);
			bad += !inside(s.p, s.len, buf, size);
			if (s.len && !bad)
				sink += (unsigned char)s.p[0] + (unsigned char)s.p[s.len - 1];
		} else if (a.type == GGUF_F32 || a.type == GGUF_F64) {
			sink += gguf_arr_f32(&a, i) > 0;
		} else {
			sink += (unsigned)gguf_arr_int(&a, i);
		}
	}
	return bad;
}

static int walk_kv(const gguf_file *f, int64_t i, const uint8_t *buf, size_t size)
{
	gguf_str k = gguf_kv_key(f, i);
	enum gguf_vtype t = gguf_kv_type(f, i);
	if (!inside(k.p, k.len, buf, size) || t >= GGUF_VTYPE_COUNT)
		return 1;
	char key[70000];
	if (k.len >= sizeof key || memchr(k.p, 0, k.len))
		return 0;                          /* not addressable by name */
	memcpy(key, k.p, k.len);
	key[k.len] = '\0';
	if (gguf_find_key(f, key) != i)        /* keys are unique */
		return 1;
	err e = {""};
	gguf_str s;
	int64_t v;
	uint32_t u;
	float x;
	bool b;
	if (t == GGUF_STR) {
		if (gguf_get_str(f, key, &s, &e) || !inside(s.p, s.len, buf, size))
			return 1;
		if (s.len)
			sink += (unsigned char)s.p[s.len - 1];
	} else if (t == GGUF_ARR) {
		return walk_arr(f, key, buf, size);
	} else if (t == GGUF_F32 || t == GGUF_F64) {
		/* a float may be refused only for not being a finite number */
		return gguf_get_f32(f, key, &x, &e) != 0 && !strstr(e.msg, "not a finite number");
	} else if (t == GGUF_BOOL) {
		return gguf_get_bool(f, key, &b, &e) != 0;
	} else {
		sink += gguf_get_i64(f, key, &v, &e) == 0;
		sink += gguf_get_u32(f, key, &u, &e) == 0;
	}
	return 0;
}

static int walk_tensor(const gguf_file *f, int64_t i, const uint8_t *buf, size_t size)
{
	const gguf_tensor *t = gguf_tensor_at(f, i);
	int64_t blk, bytes;
	if (!ref_type(t->type, &blk, &bytes) || t->n_dims < 1 || t->n_dims > 4)
		return 1;
	int64_t n = 1;
	for (int d = 0; d < 4; d++) {
		if (t->ne[d] < 0 || (d >= t->n_dims && t->ne[d] != 1))
			return 1;
		if (t->ne[d] && n > INT64_MAX / t->ne[d])
			return 1;
		n *= t->ne[d];
	}
	if (n != t->n_elems || t->ne[0] % blk || n / blk > INT64_MAX / bytes || t->n_bytes != n / blk * bytes)
		return 1;
	if (!inside(t->data, (uint64_t)t->n_bytes, buf, size) || t->offset % gguf_alignment(f))
		return 1;
	if (gguf_find_tensor(f, t->name) != t)  /* names are unique */
		return 1;
	if (t->n_bytes)
		sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->n_bytes - 1];
	return 0;
}

/* Non-zero-sized tensors must not overlap (quadratic: small files only). */
static int walk_overlap(const gguf_file *f)
{
	int64_t n = gguf_n_tensors(f);
	for (int64_t i = 0; i < n && n <= 256; i++)
		for (int64_t j = 0; j < i; j++) {
			const gguf_tensor *a = gguf_tensor_at(f, i), *b = gguf_tensor_at(f, j);
			const uint8_t *pa = a->data, *pb = b->data;
			if (a->n_bytes && b->n_bytes && pa < pb + b->n_bytes && pb < pa + a->n_bytes)
				return 1;
		}
	return 0;
}

/* Reads every view of f; returns the number of violations found. */
static int walk(const gguf_file *f, const uint8_t *buf, size_t size)
{
	int bad = 0;
	uint32_t a = gguf_alignment(f);
	bad += a == 0 || (a & (a - 1)) || (gguf_version(f) != 2 && gguf_version(f) != 3);
	bad += gguf_file_bytes(f) != size || gguf_data_bytes(f) > size;
	for (int64_t i = 0; i < gguf_n_kv(f); i++)
		bad += walk_kv(f, i, buf, size);
	for (int64_t i = 0; i < gguf_n_tensors(f); i++)
		bad += walk_tensor(f, i, buf, size);
	return bad + walk_overlap(f);
}

/* Opens an exact-size copy of p[0..n); a success is walked, a failure must
 * carry a message starting with the name. Adds to *bad; returns whether it
 * opened. */
static bool try_open(const uint8_t *p, size_t n, const char *name, int *bad)
{
	uint8_t *q = copy_of(p, n);
	err e = {""};
	gguf_file *f = gguf_open_mem(q, n, name, &e);
	bool ok = f != NULL;
	if (f)
		*bad += walk(f, q, n);
	else
		*bad += !starts_with(e.msg, name) || strlen(e.msg) <= strlen(name) + 2;
	gguf_close(f);
	free(q);
	return ok;
}

/* ---- 1. the real model ---- */

static void test_model_metadata(gguf_file *f)
{
	err e = {""};
	uint32_t u = 0;
	int64_t v = 0;
	float x = 0;
	gguf_str s = {0};
	CHECK_EQ_INT(gguf_version(f), 3);
	CHECK_EQ_INT(gguf_n_kv(f), 19);
	CHECK_EQ_INT(gguf_n_tensors(f), 48);
	CHECK_EQ_INT(gguf_alignment(f), 32);
	CHECK_EQ_INT(gguf_file_bytes(f), 1185376);
	CHECK_EQ_INT(gguf_data_bytes(f), 1185376 - 14176);
	CHECK(gguf_get_u32(f, "llama.embedding_length", &u, &e) == 0 && u == 64);
	CHECK(gguf_get_u32(f, "llama.block_count", &u, &e) == 0 && u == 5);
	CHECK(gguf_get_u32(f, "llama.attention.head_count", &u, &e) == 0 && u == 8);
	CHECK(gguf_get_u32(f, "llama.attention.head_count_kv", &u, &e) == 0 && u == 4);
	CHECK(gguf_get_u32(f, "llama.feed_forward_length", &u, &e) == 0 && u == 172);
	CHECK(gguf_get_u32(f, "llama.context_length", &u, &e) == 0 && u == 2048);
	CHECK(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u, &e) == 0 && u == UINT32_MAX);
	CHECK(gguf_get_i64(f, "tokenizer.ggml.padding_token_id", &v, &e) == 0 && v == 4294967295ll);
	CHECK(gguf_get_i64(f, "tokenizer.ggml.eos_token_id", &v, &e) == 0 && v == 2);
	CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &x, &e) == 0);
	CHECK_NEAR(x, 1e-5, 1e-11);
	CHECK(gguf_get_str(f, "general.architecture", &s, &e) == 0 && gguf_str_eq(s, "llama"));
	CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s, &e) == 0 && gguf_str_eq(s, "llama"));
	CHECK(!gguf_str_eq(s, "llam") && !gguf_str_eq(s, "llamas"));
	CHECK_EQ_INT(gguf_kv_type(f, gguf_find_key(f, "general.architecture")), GGUF_STR);
	CHECK(gguf_str_eq(gguf_kv_key(f, 0), "tokenizer.ggml.tokens"));
	CHECK_EQ_INT(gguf_find_key(f, "llama.block_count"), 16);
	CHECK_EQ_INT(gguf_find_key(f, "llama.block_coun"), -1);
	CHECK_EQ_INT(gguf_find_key(f, "llama.block_count.x"), -1);
}

static void test_model_arrays(gguf_file *f)
{
	err e = {""};
	gguf_arr a;
	CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &e) == 0);
	CHECK_EQ_INT(a.type, GGUF_STR);
	CHECK_EQ_INT(a.n, 512);
	CHECK(gguf_str_eq(gguf_arr_str(&a, 0), "<unk>"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 1), "<s>"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 2), "</s>"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 3), "<0x00>"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 259), "\xe2\x96\x81t"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 300), "\xe2\x96\x81ha"));
	CHECK(gguf_str_eq(gguf_arr_str(&a, 511), "\xe2\x80\x8a"));
	CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &a, &e) == 0);
	CHECK_EQ_INT(a.type, GGUF_F32);
	CHECK_EQ_INT(a.n, 512);
	CHECK_NEAR(gguf_arr_f32(&a, 0), 0.0, 0);
	CHECK_NEAR(gguf_arr_f32(&a, 300), -41.0, 0);
	CHECK_NEAR(gguf_arr_f32(&a, 511), -252.0, 0);
	CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &a, &e) == 0);
	CHECK_EQ_INT(a.type, GGUF_I32);
	CHECK_EQ_INT(a.n, 512);
	CHECK_EQ_INT(gguf_arr_int(&a, 0), 2);
	CHECK_EQ_INT(gguf_arr_int(&a, 1), 3);
}

static void check_err(const err *e, const char *w1, const char *w2, const char *w3)
{
	CHECK_(has(e, w1) && has(e, w2) && has(e, w3), "message '%s' should name '%s', '%s', '%s'",
	       e->msg, w1, w2 ? w2 : "", w3 ? w3 : "");
}

static void test_model_errors(gguf_file *f)
{
	err e = {""};
	uint32_t u = 777;
	int64_t v = 777;
	float x = 7.5f;
	bool b = true;
	gguf_str s = {"keep", 4};
	gguf_arr a;
	CHECK(gguf_get_u32(f, "general.architecture", &u, &e) == -1 && u == 777);
	check_err(&e, MODEL, "'general.architecture'", "string");
	CHECK(gguf_get_i64(f, "tokenizer.ggml.scores", &v, &e) == -1 && v == 777);
	check_err(&e, MODEL, "'tokenizer.ggml.scores'", "array");
	CHECK(gguf_get_f32(f, "llama.block_count", &x, &e) == -1);
	check_err(&e, MODEL, "'llama.block_count'", "u32");
	CHECK(gguf_get_bool(f, "llama.block_count", &b, &e) == -1);
	check_err(&e, MODEL, "'llama.block_count'", "bool");
	CHECK(gguf_get_str(f, "llama.block_count", &s, &e) == -1);
	check_err(&e, MODEL, "'llama.block_count'", "string");
	CHECK(gguf_get_arr(f, "general.name", &a, &e) == -1);
	check_err(&e, MODEL, "'general.name'", "array");
	e.msg[0] = '\0';
	CHECK(gguf_get_u32(f, "llama.no_such_key", &u, &e) == -1);
	check_err(&e, MODEL, "'llama.no_such_key'", "missing");
	e.msg[0] = '\0';
	CHECK(gguf_get_str(f, "general.nothing", &s, &e) == -1);
	check_err(&e, MODEL, "'general.nothing'", "missing");
	e.msg[0] = '\0';
	CHECK(gguf_get_i64(f, "general.nothing", &v, &e) == -1 && v == 777);
	check_err(&e, MODEL, "'general.nothing'", "missing");
	CHECK(gguf_get_f32(f, "general.nothing", &x, &e) == -1 && x == 7.5f);
	CHECK(gguf_get_bool(f, "general.nothing", &b, &e) == -1 && b);
	e.msg[0] = '\0';
	CHECK(gguf_get_arr(f, "tokenizer.ggml.merges", &a, &e) == -1);
	check_err(&e, MODEL, "'tokenizer.ggml.merges'", "missing");
	/* optional getters: a missing key keeps the default and is not an error */
	CHECK(gguf_opt_u32(f, "llama.expert_count", &u, &e) == 0 && u == 777);
	CHECK(gguf_opt_f32(f, "llama.rope.freq_base", &x, &e) == 0 && x == 7.5f);
	CHECK(gguf_opt_bool(f, "tokenizer.ggml.add_bos_token", &b, &e) == 0 && b);
	CHECK(gguf_opt_str(f, "tokenizer.chat_template", &s, &e) == 0 && gguf_str_eq(s, "keep"));
	CHECK(gguf_opt_u32(f, "llama.block_count", &u, &e) == 0 && u == 5);
	CHECK(gguf_opt_f32(f, "llama.attention.layer_norm_rms_epsilon", &x, &e) == 0 && x < 1e-4f);
	CHECK(gguf_opt_str(f, "general.name", &s, &e) == 0 && gguf_str_eq(s, "llama"));
	/* ... but a present key of the wrong type is */
	CHECK(gguf_opt_u32(f, "general.name", &u, &e) == -1);
	check_err(&e, MODEL, "'general.name'", NULL);
	CHECK(gguf_opt_str(f, "llama.block_count", &s, &e) == -1);
	check_err(&e, MODEL, "'llama.block_count'", NULL);
	CHECK(gguf_opt_bool(f, "llama.block_count", &b, &e) == -1);
	CHECK(gguf_opt_f32(f, "general.name", &x, &e) == -1);
	CHECK(gguf_get_i64(f, "llama.block_count", &v, &e) == 0 && v == 5);
}

static void check_shape(const gguf_file *f, const char *name, int n_dims, int64_t ne0, int64_t ne1)
{
	const gguf_tensor *t = gguf_find_tensor(f, name);
	CHECK_(t != NULL, "tensor %s is missing", name);
	if (!t)
		return;
	CHECK(!strcmp(t->name, name));
	CHECK_EQ_INT(t->type, DT_F32);
	CHECK_EQ_INT(t->n_dims, n_dims);
	CHECK_EQ_INT(t->ne[0], ne0);
	CHECK_EQ_INT(t->ne[1], ne1);
	CHECK_EQ_INT(t->ne[2], 1);
	CHECK_EQ_INT(t->ne[3], 1);
	CHECK_EQ_INT(t->n_elems, ne0 * ne1);
	CHECK_EQ_INT(t->n_bytes, 4 * ne0 * ne1);
}

/* Tensors of the model opened from buf (size n) or by path (buf NULL). */
static void test_model_tensors(gguf_file *f, const uint8_t *buf, size_t n, const struct lay *L)
{
	check_shape(f, "token_embd.weight", 2, 64, 512);
	check_shape(f, "output.weight", 2, 64, 512);
	check_shape(f, "output_norm.weight", 1, 64, 1);
	check_shape(f, "blk.0.attn_q.weight", 2, 64, 64);
	check_shape(f, "blk.0.attn_k.weight", 2, 64, 32);
	check_shape(f, "blk.0.attn_v.weight", 2, 64, 32);
	check_shape(f, "blk.4.attn_output.weight", 2, 64, 64);
	check_shape(f, "blk.0.ffn_gate.weight", 2, 64, 172);
	check_shape(f, "blk.2.ffn_down.weight", 2, 172, 64);
	check_shape(f, "blk.3.ffn_up.weight", 2, 64, 172);
	check_shape(f, "blk.4.ffn_norm.weight", 1, 64, 1);
	check_shape(f, "blk.1.attn_norm.weight", 1, 64, 1);
	CHECK(gguf_find_tensor(f, "blk.5.attn_q.weight") == NULL);
	CHECK(gguf_find_tensor(f, "token_embd") == NULL);
	CHECK(gguf_find_tensor(f, "") == NULL);
	const gguf_tensor *t0 = gguf_tensor_at(f, 0);
	CHECK(!strcmp(t0->name, "token_embd.weight"));
	CHECK_EQ_INT(t0->offset, 0);
	int wrong_place = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f) && i < MAXT; i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		const uint8_t *d = t->data;
		wrong_place += t->offset != L->off[i] || (uint64_t)t->n_bytes != L->bytes[i];
		wrong_place += d - (const uint8_t *)t0->data != (ptrdiff_t)t->offset;
		if (buf)
			wrong_place += d != buf + L->data_off + L->off[i] || !inside(d, L->bytes[i], buf, n);
	}
	CHECK_EQ_INT(wrong_place, 0);
	const gguf_tensor *last = gguf_tensor_at(f, 47);
	CHECK(!strcmp(last->name, "blk.4.ffn_norm.weight"));
	CHECK_EQ_INT(L->data_off + last->offset + (uint64_t)last->n_bytes, 1185376);
}

/* The first and last tensors' bytes equal what fread finds at data offset +
 * tensor offset, with the data offset computed by the reference parser. */
static void test_model_fread(gguf_file *f, const struct lay *L)
{
	FILE *fp = fopen(MODEL, "rb");
	CHECK(fp != NULL);
	if (!fp)
		return;
	for (int k = 0; k < 2; k++) {
		const gguf_tensor *t = gguf_tensor_at(f, k ? gguf_n_tensors(f) - 1 : 0);
		size_t n = (size_t)t->n_bytes;
		uint8_t *want = malloc(n);
		CHECK(fseek(fp, (long)(L->data_off + t->offset), SEEK_SET) == 0);
		CHECK(fread(want, 1, n, fp) == n);
		CHECK(memcmp(want, t->data, n) == 0);
		free(want);
	}
	fclose(fp);
	const float *w = gguf_find_tensor(f, "output_norm.weight")->data;
	CHECK(w[0] == w[0] && w[0] != 0.0f); /* real, finite-looking weights */
}

static void test_model(const uint8_t *buf, size_t n, const struct lay *L)
{
	err e = {""};
	gguf_file *f = gguf_open(MODEL, &e);
	CHECK_(f != NULL, "gguf_open: %s", e.msg);
	if (!f)
		return;
	CHECK(!strcmp(gguf_name(f), MODEL));
	test_model_metadata(f);
	test_model_arrays(f);
	test_model_errors(f);
	test_model_tensors(f, NULL, 0, L);
	test_model_fread(f, L);
	int bad = walk(f, (const uint8_t *)gguf_tensor_at(f, 0)->data - L->data_off, n);
	CHECK_EQ_INT(bad, 0);
	gguf_close(f);
	/* the same file from memory */
	f = gguf_open_mem(buf, n, "mem-model", &e);
	CHECK_(f != NULL, "gguf_open_mem: %s", e.msg);
	if (!f)
		return;
	CHECK(!strcmp(gguf_name(f), "mem-model"));
	test_model_metadata(f);
	test_model_arrays(f);
	test_model_tensors(f, buf, n, L);
	CHECK_EQ_INT(walk(f, buf, n), 0);
	gguf_close(f);
}

/* ---- 2. vocab-only files ---- */

static void test_vocab_file(const char *path)
{
	size_t n;
	uint8_t *buf = read_all(path, &n);
	struct lay *L = malloc(sizeof *L);
	CHECK_(buf != NULL, "cannot read %s", path);
	if (!buf)
		goto out;
	CHECK_(ref_parse(buf, n, L), "reference parser fails on %s", path);
	err e = {""};
	gguf_file *f = gguf_open(path, &e);
	CHECK_(f != NULL, "%s: %s", path, e.msg);
	if (f) {
		gguf_arr a;
		gguf_str s;
		CHECK_EQ_INT(gguf_n_tensors(f), 0);
		CHECK_EQ_INT(gguf_data_bytes(f), 0);
		CHECK_EQ_INT(gguf_n_kv(f), (int64_t)L->n_kv);
		CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &a, &e) == 0 && a.type == GGUF_STR && a.n > 1000);
		CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s, &e) == 0 && s.len > 0);
		CHECK(gguf_find_tensor(f, "token_embd.weight") == NULL);
		gguf_close(f);
	}
	/* from memory, walked; and a spread of truncations */
	int bad = 0, opened = 0;
	CHECK(try_open(buf, n, path, &bad));
	for (int k = 0; k < 24; k++) {
		size_t cut = k < 4 ? n - 1 - (size_t)k : (size_t)rnd_below(L->info_end);
		opened += try_open(buf, cut, path, &bad);
	}
	CHECK_EQ_INT(opened, 0);
	CHECK_EQ_INT(bad, 0);
out:
	free(L);
	free(buf);
}

static void test_vocab(void)
{
	DIR *d = opendir(VOCAB_DIR);
	CHECK_(d != NULL, "cannot list %s", VOCAB_DIR);
	if (!d)
		return;
	int n_files = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		if (len < 5 || strcmp(de->d_name + len - 5, ".gguf"))
			continue;
		char path[512];
		snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, de->d_name);
		test_vocab_file(path);
		n_files++;
	}
	closedir(d);
	CHECK(n_files >= 5);
}

/* ---- 3. generated files round-trip ---- */

#define STRV(lit) .s = (lit), .s_len = sizeof(lit) - 1
#define ARRV(t, count) .type = GGUF_ARR, .elem = (t), .n = (count)

static const struct gkv all_kv[] = {
	{"v.u8", {.type = GGUF_U8, .bits = 200}},
	{"v.i8", {.type = GGUF_I8, .bits = (uint64_t)-100}},
	{"v.u16", {.type = GGUF_U16, .bits = 60000}},
	{"v.i16", {.type = GGUF_I16, .bits = (uint64_t)-30000}},
	{"v.u32", {.type = GGUF_U32, .bits = 4000000000u}},
	{"v.i32", {.type = GGUF_I32, .bits = (uint64_t)-2000000000}},
	{"v.f32", {.type = GGUF_F32, .f = 1.5}},
	{"v.bool", {.type = GGUF_BOOL, .bits = 1}},
	{"v.str", {.type = GGUF_STR, STRV("hello, world")}},
	{"v.u64", {.type = GGUF_U64, .bits = 0xfedcba9876543210ull}},
	{"v.i64", {.type = GGUF_I64, .bits = (uint64_t)-5000000000000000000ll}},
	{"v.f64", {.type = GGUF_F64, .f = 3.25}},
	{"v.false", {.type = GGUF_BOOL, .bits = 0}},
	{"v.empty", {.type = GGUF_STR, STRV("")}},
	{"v.nul", {.type = GGUF_STR, STRV("a\0b")}},
	{"v.u64small", {.type = GGUF_U64, .bits = 7}},
	{"v.i8pos", {.type = GGUF_I8, .bits = 5}},
	{"", {.type = GGUF_U8, .bits = 1}},
	{"a.u8", {ARRV(GGUF_U8, 5)}},
	{"a.i8", {ARRV(GGUF_I8, 7)}},
	{"a.u16", {ARRV(GGUF_U16, 3)}},
	{"a.i16", {ARRV(GGUF_I16, 9)}},
	{"a.u32", {ARRV(GGUF_U32, 100)}},
	{"a.i32", {ARRV(GGUF_I32, 4)}},
	{"a.f32", {ARRV(GGUF_F32, 33)}},
	{"a.bool", {ARRV(GGUF_BOOL, 6)}},
	{"a.str", {ARRV(GGUF_STR, 300)}},
	{"a.u64", {ARRV(GGUF_U64, 5)}},
	{"a.i64", {ARRV(GGUF_I64, 5)}},
	{"a.f64", {ARRV(GGUF_F64, 8)}},
	{"a.empty", {ARRV(GGUF_U32, 0)}},
	{"a.sempty", {ARRV(GGUF_STR, 0)}},
};

static const struct gten all_t[] = {
	{"f32.vec", 1, {5}, DT_F32},
	{"f16.mat", 2, {3, 2}, DT_F16},
	{"q8_0.mat", 2, {64, 3}, DT_Q8_0},
	{"q4_K.row", 1, {256}, DT_Q4_K},
	{"i8.vec", 1, {7}, DT_I8},
	{"bf16.4d", 4, {4, 1, 1, 2}, DT_BF16},
	{"empty", 2, {0, 4}, DT_F32},
	{"q4_0.3d", 3, {32, 2, 3}, DT_Q4_0},
	{"q6_K.mat", 2, {256, 2}, DT_Q6_K},
	{"f64.x", 1, {3}, DT_F64},
	/* the formats real files also hold (issue #37) */
	{"q4_1.mat", 2, {64, 2}, DT_Q4_1},
	{"q5_0.mat", 2, {96, 1}, DT_Q5_0},
	{"q5_1.mat", 2, {32, 3}, DT_Q5_1},
	{"iq4_nl.mat", 2, {576, 1}, DT_IQ4_NL},
	{"q2_K.mat", 2, {256, 2}, DT_Q2_K},
	{"q3_K.row", 1, {512}, DT_Q3_K},
	{"iq4_xs.mat", 2, {256, 3}, DT_IQ4_XS},
};

/* Checks an array kv against the item formulas; returns mismatches. */
static int check_arr_items(const gguf_arr *a, const struct gval *v)
{
	int bad = 0;
	for (uint64_t i = 0; i < a->n; i++) {
		char s[48];
		if (v->elem == GGUF_STR) {
			size_t len = item_str(i, s);
			gguf_str got = gguf_arr_str(a, i);
			bad += got.len != len || (len && memcmp(got.p, s, len));
		} else if (v->elem == GGUF_F32 || v->elem == GGUF_F64) {
			bad += gguf_arr_f32(a, i) != (float)item_f(i);
		} else {
			bad += gguf_arr_int(a, i) != expect_int(v->elem, item_bits(i));
		}
	}
	return bad;
}

static void check_int_kv(const gguf_file *f, const char *key, const struct gval *v)
{
	err e = {""};
	int64_t want = expect_int(v->type, v->bits), got = 0;
	uint32_t u = 0;
	bool big = v->type == GGUF_U64 && v->bits > (uint64_t)INT64_MAX;
	int rc = gguf_get_i64(f, key, &got, &e);
	CHECK_(big ? rc == -1 && has(&e, key) : rc == 0 && got == want, "get_i64 %s: %s", key, e.msg);
	bool fits = !big && want >= 0 && want <= (int64_t)UINT32_MAX;
	rc = gguf_get_u32(f, key, &u, &e);
	CHECK_(fits ? rc == 0 && u == (uint32_t)want : rc == -1 && has(&e, key), "get_u32 %s: %s", key, e.msg);
}

static void check_kv(const gguf_file *f, int64_t i, const struct gkv *kv)
{
	err e = {""};
	const struct gval *v = &kv->v;
	CHECK_(gguf_str_eq(gguf_kv_key(f, i), kv->key), "key %lld is not '%s'", (long long)i, kv->key);
	CHECK_EQ_INT(gguf_kv_type(f, i), v->type);
	CHECK_EQ_INT(gguf_find_key(f, kv->key), i);
	float x;
	bool b;
	gguf_str s;
	gguf_arr a;
	switch (v->type) {
	case GGUF_F32: case GGUF_F64:
		CHECK(gguf_get_f32(f, kv->key, &x, &e) == 0 && x == (float)v->f);
		break;
	case GGUF_BOOL:
		CHECK(gguf_get_bool(f, kv->key, &b, &e) == 0 && b == (v->bits != 0));
		break;
	case GGUF_STR:
		CHECK(gguf_get_str(f, kv->key, &s, &e) == 0 && s.len == v->s_len);
		CHECK(s.len == 0 || !memcmp(s.p, v->s, s.len));
		break;
	case GGUF_ARR:
		CHECK(gguf_get_arr(f, kv->key, &a, &e) == 0 && a.type == v->elem && a.n == v->n);
		CHECK_(check_arr_items(&a, v) == 0, "array %s items differ", kv->key);
		break;
	default:
		check_int_kv(f, kv->key, v);
	}
}

static void check_tensors(const gguf_file *f, const struct gspec *s, const struct lay *L,
			  const uint8_t *buf)
{
	for (size_t i = 0; i < s->n_t; i++) {
		const struct gten *g = &s->t[i];
		const gguf_tensor *t = gguf_tensor_at(f, (int64_t)i);
		CHECK(gguf_find_tensor(f, g->name) == t);
		CHECK(!strcmp(t->name, g->name));
		CHECK_EQ_INT(t->type, g->type);
		CHECK_EQ_INT(t->n_dims, g->n_dims);
		for (int d = 0; d < 4; d++)
			CHECK_EQ_INT(t->ne[d], d < (int)g->n_dims ? (int64_t)g->ne[d] : 1);
		CHECK_EQ_INT(t->n_elems, gten_elems(g));
		CHECK_EQ_INT(t->n_bytes, L->bytes[i]);
		CHECK_EQ_INT(t->offset, L->off[i]);
		CHECK(t->data == buf + L->data_off + L->off[i]);
		int wrong = 0;
		for (uint64_t j = 0; j < L->bytes[i]; j++)
			wrong += ((const uint8_t *)t->data)[j] != pattern(i, j);
		CHECK_EQ_INT(wrong, 0);
	}
}

/* Writes s, opens it from an exact-size copy and checks everything. */
static void round_trip(const struct gspec *s)
{
	gw b = {0};
	struct lay *L = malloc(sizeof *L), *R = malloc(sizeof *R);
	gen(&b, s, L);
	uint8_t *buf = copy_of(b.p, b.n);
	CHECK(ref_parse(buf, b.n, R) && R->data_off == (s->n_t ? L->data_off : R->data_off));
	err e = {""};
	gguf_file *f = gguf_open_mem(buf, b.n, GEN_NAME, &e);
	CHECK_(f != NULL, "v%u align %u: %s", s->version, s->align, e.msg);
	if (f) {
		CHECK_EQ_INT(gguf_version(f), s->version);
		CHECK_EQ_INT(gguf_alignment(f), s->align ? s->align : 32);
		CHECK_EQ_INT(gguf_n_kv(f), (int64_t)L->n_kv);
		CHECK_EQ_INT(gguf_n_tensors(f), (int64_t)s->n_t);
		CHECK_EQ_INT(gguf_file_bytes(f), b.n);
		CHECK_EQ_INT(gguf_data_bytes(f), s->n_t ? b.n - L->data_off : 0);
		for (size_t i = 0; i < s->n_kv; i++)
			check_kv(f, (int64_t)i, &s->kv[i]);
		uint32_t u = 0;
		if (s->align)
			CHECK(gguf_get_u32(f, "general.alignment", &u, &e) == 0 && u == s->align);
		check_tensors(f, s, L, buf);
		CHECK_EQ_INT(walk(f, buf, b.n), 0);
		gguf_close(f);
	}
	free(buf);
	free(b.p);
	free(L);
	free(R);
}

static void test_generated(void)
{
	static const uint32_t aligns[] = {0, 1, 2, 8, 64, 256, 4096};
	for (uint32_t v = 2; v <= 3; v++)
		for (size_t k = 0; k < ARRAY_LEN(aligns); k++) {
			struct gspec s = {v, aligns[k], all_kv, ARRAY_LEN(all_kv), all_t, ARRAY_LEN(all_t)};
			round_trip(&s);
		}
	struct gspec no_tensors = {3, 0, all_kv, ARRAY_LEN(all_kv), NULL, 0};
	struct gspec no_kv = {3, 0, NULL, 0, all_t, ARRAY_LEN(all_t)};
	struct gspec nothing = {2, 0, NULL, 0, NULL, 0};
	round_trip(&no_tensors);
	round_trip(&no_kv);
	round_trip(&nothing);
	/* tensors all of size zero still need the (empty) data section to start in the file */
	static const struct gten zeros[] = {{"z0", 1, {0}, DT_F32}, {"z1", 2, {32, 0}, DT_Q8_0}};
	struct gspec only_zeros = {3, 0, NULL, 0, zeros, 2};
	round_trip(&only_zeros);
}

/* Getter semantics on the generated file that the round trip does not reach. */
static void test_getters(void)
{
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	struct gspec s = {3, 0, all_kv, ARRAY_LEN(all_kv), NULL, 0};
	gen(&b, &s, L);
	err e = {""};
	gguf_file *f = gguf_open_mem(b.p, b.n, GEN_NAME, &e);
	CHECK(f != NULL);
	if (f) {
		uint32_t u = 5;
		int64_t v = 5;
		float x = 0;
		gguf_str str;
		CHECK(gguf_get_u32(f, "v.i8", &u, &e) == -1 && u == 5);
		check_err(&e, GEN_NAME, "'v.i8'", "range");
		CHECK(gguf_get_i64(f, "v.u64", &v, &e) == -1 && v == 5);
		check_err(&e, GEN_NAME, "'v.u64'", "range");
		CHECK(gguf_get_u32(f, "v.u64small", &u, &e) == 0 && u == 7);
		CHECK(gguf_get_u32(f, "v.i8pos", &u, &e) == 0 && u == 5);
		CHECK(gguf_get_u32(f, "v.bool", &u, &e) == -1);
		check_err(&e, GEN_NAME, "'v.bool'", "bool");
		CHECK(gguf_get_f32(f, "v.f64", &x, &e) == 0 && x == 3.25f);
		CHECK(gguf_get_f32(f, "v.u8", &x, &e) == -1);
		check_err(&e, GEN_NAME, "'v.u8'", "u8");
		CHECK(gguf_get_str(f, "v.nul", &str, &e) == 0 && str.len == 3 && str.p[1] == '\0');
		CHECK(!gguf_str_eq(str, "a"));
		CHECK(gguf_get_u32(f, "", &u, &e) == 0 && u == 1);
		gguf_close(f);
	}
	for (int t = 0; t < GGUF_VTYPE_COUNT; t++)
		CHECK(strcmp(gguf_vtype_name((enum gguf_vtype)t), "?") != 0);
	CHECK(!strcmp(gguf_vtype_name(GGUF_STR), "string"));
	CHECK(!strcmp(gguf_vtype_name(GGUF_VTYPE_COUNT), "?"));
	gguf_close(NULL);
	free(b.p);
	free(L);
}

/* Float keys that are not finite numbers (#42.11): NaN, infinities, and a
 * double past float's range are refused with the key named; a model's
 * hyperparameters come through these getters. */
static void test_float_not_finite(void)
{
	static const struct gkv kv[] = {
		{"v.nan", {.type = GGUF_F32, .f = NAN}},
		{"v.inf", {.type = GGUF_F32, .f = -INFINITY}},
		{"v.big", {.type = GGUF_F64, .f = 1e300}},
		{"v.ok", {.type = GGUF_F64, .f = -0.5}},
	};
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	struct gspec s = {3, 0, kv, ARRAY_LEN(kv), NULL, 0};
	gen(&b, &s, L);
	err e = {""};
	gguf_file *f = gguf_open_mem(b.p, b.n, GEN_NAME, &e);
	CHECK(f != NULL);
	if (f) {
		float x = 7;
		CHECK(gguf_get_f32(f, "v.nan", &x, &e) == -1 && x == 7);
		check_err(&e, GEN_NAME, "'v.nan'", "not a finite number");
		CHECK(gguf_opt_f32(f, "v.inf", &x, &e) == -1 && x == 7);
		check_err(&e, GEN_NAME, "'v.inf'", "-inf");
		CHECK(gguf_get_f32(f, "v.big", &x, &e) == -1 && x == 7);
		check_err(&e, GEN_NAME, "'v.big'", "1e+300");
		CHECK(gguf_get_f32(f, "v.ok", &x, &e) == 0 && x == -0.5f);
		gguf_close(f);
	}
	free(b.p);
	free(L);
}

/* Many entries: lookups by name, and a duplicate hidden at the very end. */
static void test_many_entries(void)
{
	enum { N = 20000 };
	struct gkv *kv = calloc(N, sizeof *kv);
	struct gten *t = calloc(N, sizeof *t);
	char (*names)[2][16] = calloc(N, sizeof *names);
	for (int i = 0; i < N; i++) {
		snprintf(names[i][0], 16, "k.%05d", i);
		snprintf(names[i][1], 16, "t.%05d", i);
		kv[i] = (struct gkv){names[i][0], {.type = GGUF_U32, .bits = (uint64_t)i}};
		t[i] = (struct gten){names[i][1], 1, {8}, DT_F32};
	}
	struct gspec s = {3, 0, kv, N, t, N};
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	gen(&b, &s, L);
	err e = {""};
	gguf_file *f = gguf_open_mem(b.p, b.n, GEN_NAME, &e);
	CHECK_(f != NULL, "%s", e.msg);
	if (f) {
		uint32_t u = 0;
		CHECK_EQ_INT(gguf_n_kv(f), N);
		CHECK_EQ_INT(gguf_n_tensors(f), N);
		CHECK(gguf_get_u32(f, "k.12345", &u, &e) == 0 && u == 12345);
		CHECK(gguf_find_tensor(f, "t.19999") && gguf_find_tensor(f, "t.19999")->offset == 19999 * 32);
		gguf_close(f);
	}
	for (int k = 0; k < 2; k++) {
		memcpy(names[N - 1][k], names[7][k], 16);
		gen(&b, &s, L);
		f = gguf_open_mem(b.p, b.n, GEN_NAME, &e);
		CHECK(f == NULL);
		check_err(&e, GEN_NAME, "duplicate", names[7][k]);
		gguf_close(f);
		memcpy(names[N - 1][k], k ? "t.19999" : "k.19999", 8);
	}
	free(b.p);
	free(L);
	free(names);
	free(t);
	free(kv);
}

/* ---- 4a. truncation ---- */

/* The cut after cut: every size below all_below, then about n_spread random
 * sizes over [all_below, end), always including end - 1. */
static size_t next_cut(size_t cut, size_t all_below, size_t end, int n_spread)
{
	if (cut + 1 < all_below || cut + 1 >= end)
		return cut + 1;
	size_t step = (end - all_below) / (size_t)n_spread + 1;
	return MIN(cut + 1 + (size_t)rnd_below(step), end - 1);
}

/* Every cut below end (where the last tensor, or the metadata, ends) must fail
 * with a message naming the file and saying "truncated". */
static void truncations(const uint8_t *buf, size_t n, size_t all_below, size_t end, int n_spread,
			const char *name)
{
	int opened = 0, bad = 0, vague = 0;
	err example = {""};
	for (size_t cut = 0; cut < end; cut = next_cut(cut, all_below, end, n_spread)) {
		uint8_t *p = copy_of(buf, cut);
		err e = {""};
		gguf_file *f = gguf_open_mem(p, cut, name, &e);
		opened += f != NULL;
		bad += f == NULL && !starts_with(e.msg, name);
		if (f == NULL && !has(&e, "truncated") && vague++ == 0)
			example = e;
		gguf_close(f);
		free(p);
	}
	CHECK_EQ_INT(opened, 0);
	CHECK_EQ_INT(bad, 0);
	CHECK_(vague == 0, "%d messages lack 'truncated', e.g. '%s'", vague, example.msg);
	/* the cuts past the last tensor's end (trailing padding) still open */
	for (size_t cut = end; cut <= n; cut++)
		CHECK(try_open(buf, cut, name, &bad));
	CHECK_EQ_INT(bad, 0);
}

/* Truncated copies on disk go through gguf_open's mmap path and size check. */
static void disk_truncations(const uint8_t *buf, size_t n, const struct lay *L)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/test_gguf.%d.gguf", (int)getpid());
	size_t cuts[] = {0, 1, 4, 23, 24, 25, 57, 1000, (size_t)L->info_end - 1, (size_t)L->data_off,
			 (size_t)L->data_off + 100, n / 2, n - 1, n};
	for (size_t k = 0; k < ARRAY_LEN(cuts); k++) {
		FILE *fp = fopen(path, "wb");
		CHECK(fp != NULL);
		if (!fp)
			return;
		CHECK(fwrite(buf, 1, cuts[k], fp) == cuts[k]);
		fclose(fp);
		err e = {""};
		gguf_file *f = gguf_open(path, &e);
		if (cuts[k] == n) {
			CHECK_(f != NULL, "%s", e.msg);
			if (f)
				CHECK_EQ_INT(gguf_n_tensors(f), 48);
		} else {
			CHECK_(f == NULL, "cut at %zu opened", cuts[k]);
			check_err(&e, path, "truncated", cuts[k] < 24 ? "too small" : NULL);
		}
		gguf_close(f);
	}
	unlink(path);
}

/* ---- 4b. targeted corruption ---- */

/* Which fields of a file to damage (indices into its layout). */
struct victims {
	const char *name;        /* file name for messages */
	int kv_scalar;           /* a u32 key */
	int kv_str;              /* a string key */
	int kv_arr;              /* a numeric array */
	int kv_sarr;             /* a string array */
	int kv_dup_a, kv_dup_b;  /* keys of equal length: b is renamed to a */
	int t_a, t_b;            /* tensors with names of equal length, both with data; b is damaged */
	int t_last;              /* the tensor that ends the file */
};

/* Opens a copy of buf with up to two fields changed; it must fail with a
 * message naming the file and containing w1 and w2. */
static void expect_fail2(const uint8_t *buf, size_t n, const char *name, size_t at1, int w1, uint64_t v1,
			 size_t at2, int w2, uint64_t v2, const char *word1, const char *word2, int line)
{
	uint8_t *p = copy_of(buf, n);
	put_le(p + at1, v1, w1);
	if (w2)
		put_le(p + at2, v2, w2);
	err e = {""};
	gguf_file *f = gguf_open_mem(p, n, name, &e);
	CHECK_(f == NULL, "line %d: corrupt file opened", line);
	CHECK_(f != NULL || (starts_with(e.msg, name) && has(&e, word1) && has(&e, word2)),
	       "line %d: message '%s' should name '%s' and '%s'", line, e.msg, word1, word2 ? word2 : "");
	gguf_close(f);
	free(p);
}

#define FAIL1(at, w, v, w1, w2) expect_fail2(buf, n, V->name, (at), (w), (v), 0, 0, 0, (w1), (w2), __LINE__)
#define FAIL2(at, w, v, at2, w2_, v2, w1, w2) \
	expect_fail2(buf, n, V->name, (at), (w), (v), (at2), (w2_), (v2), (w1), (w2), __LINE__)

static char *key_of(const uint8_t *buf, size_t at, char *out)
{
	uint64_t len = get_le(buf + at, 8);
	memcpy(out, buf + at + 8, len);
	out[len] = '\0';
	return out;
}

static void corrupt_header(const uint8_t *buf, size_t n, const struct lay *L, const struct victims *V)
{
	FAIL1(0, 1, 'g', "magic", NULL);
	FAIL1(3, 1, 'G' ^ 0x20, "magic", NULL);
	FAIL1(4, 4, 1, "version", NULL);
	FAIL1(4, 4, 0, "version", NULL);
	FAIL1(4, 4, 4, "version", NULL);
	FAIL1(4, 4, 0x03000000, "version", NULL);
	FAIL1(4, 4, 0x02000000, "version", NULL);
	FAIL1(4, 4, UINT32_MAX, "version", NULL);
	FAIL1(L->n_t_at, 8, 1ull << 62, "tensors", NULL);
	FAIL1(L->n_t_at, 8, UINT64_MAX, "tensors", NULL);
	FAIL1(L->n_kv_at, 8, 1ull << 62, "metadata", NULL);
	FAIL1(L->n_kv_at, 8, UINT64_MAX, "metadata", NULL);
	FAIL1(L->n_kv_at, 8, L->n_kv + 1, NULL, NULL);
	FAIL1(L->n_t_at, 8, L->n_tensors + 1, NULL, NULL);
}

static void corrupt_metadata(const uint8_t *buf, size_t n, const struct lay *L, const struct victims *V)
{
	char k1[256], k2[256], k3[256], k4[256];
	const char *scalar = key_of(buf, L->key_at[V->kv_scalar], k1);
	const char *str = key_of(buf, L->key_at[V->kv_str], k2);
	const char *arr = key_of(buf, L->key_at[V->kv_arr], k3);
	const char *sarr = key_of(buf, L->key_at[V->kv_sarr], k4);
	FAIL1(L->key_at[V->kv_scalar], 8, 1ull << 62, "key", NULL);
	FAIL1(L->key_at[V->kv_scalar], 8, 65536, "key", NULL);
	FAIL1(L->key_at[V->kv_scalar], 8, UINT64_MAX, "key", NULL);
	FAIL1(L->type_at[V->kv_scalar], 4, 13, scalar, "type");
	FAIL1(L->type_at[V->kv_scalar], 4, UINT32_MAX, scalar, "type");
	FAIL1(L->val_at[V->kv_str], 8, 1ull << 62, str, "truncated");
	FAIL1(L->val_at[V->kv_str], 8, UINT64_MAX, str, "truncated");
	FAIL1(L->val_at[V->kv_str], 8, n - L->val_at[V->kv_str] - 7, str, "truncated");
	FAIL1(L->val_at[V->kv_arr] + 4, 8, 1ull << 62, arr, NULL);
	FAIL1(L->val_at[V->kv_arr] + 4, 8, UINT64_MAX, arr, NULL);
	FAIL1(L->val_at[V->kv_arr] + 4, 8, (n - L->val_at[V->kv_arr]) / 4 + 1, arr, NULL);
	FAIL1(L->val_at[V->kv_arr], 4, GGUF_ARR, arr, "array");
	FAIL1(L->val_at[V->kv_arr], 4, 13, arr, "type");
	FAIL1(L->val_at[V->kv_sarr] + 4, 8, 1ull << 62, sarr, NULL);
	FAIL1(L->val_at[V->kv_sarr] + 4, 8, n / 8, sarr, NULL);
	FAIL1(L->val_at[V->kv_sarr] + 12, 8, 1ull << 62, sarr, "truncated");
	FAIL1(L->val_at[V->kv_sarr] + 12, 8, UINT64_MAX, sarr, "truncated");
	FAIL1(L->val_at[V->kv_sarr], 4, GGUF_ARR, sarr, "array");
	/* duplicate key: rename b (same length) to a */
	char dup[256];
	key_of(buf, L->key_at[V->kv_dup_a], dup);
	uint8_t *p = copy_of(buf, n);
	memcpy(p + L->key_at[V->kv_dup_b] + 8, dup, strlen(dup));
	err e = {""};
	gguf_file *f = gguf_open_mem(p, n, V->name, &e);
	CHECK(f == NULL);
	check_err(&e, V->name, "duplicate", dup);
	gguf_close(f);
	free(p);
}

static void corrupt_tensors(const uint8_t *buf, size_t n, const struct lay *L, const struct victims *V)
{
	char na[256], nb[256], nl[256];
	const char *a = key_of(buf, L->name_at[V->t_a], na);
	const char *b = key_of(buf, L->name_at[V->t_b], nb);
	const char *last = key_of(buf, L->name_at[V->t_last], nl);
	size_t nd = L->ndims_at[V->t_b], ne = L->ne_at[V->t_b], ty = L->ttype_at[V->t_b];
	size_t off = L->off_at[V->t_b];
	uint32_t A = L->alignment;
	FAIL1(L->name_at[V->t_b], 8, 1ull << 62, "tensor name", NULL);
	FAIL1(L->name_at[V->t_b], 8, 1025, "tensor name", NULL);
	FAIL1(L->name_at[V->t_b] + 8, 1, 0, "NUL", NULL);
	FAIL1(nd, 4, 0, b, "dimensions");
	FAIL1(nd, 4, 5, b, "dimensions");
	FAIL1(nd, 4, UINT32_MAX, b, "dimensions");
	FAIL1(ty, 4, 99, b, "type");
	FAIL1(ty, 4, 4, b, "type");          /* removed Q4_2 */
	FAIL1(ty, 4, DT_COUNT, b, "type");
	FAIL1(off, 8, L->off[V->t_b] + 1, b, "align");
	FAIL1(off, 8, L->off[V->t_b] + A / 2, A > 1 ? b : NULL, A > 1 ? "align" : NULL);
	FAIL1(off, 8, 1ull << 63, b, "past");
	FAIL1(off, 8, align_up(n, A), b, "past");
	FAIL1(L->off_at[V->t_last], 8, L->off[V->t_last] + A, last, "past");
	FAIL1(off, 8, L->off[V->t_a], "overlap", NULL);
	if (L->bytes[V->t_a] > A)
		FAIL1(off, 8, L->off[V->t_a] + A, "overlap", NULL);
	FAIL1(ne, 8, 1ull << 62, b, "shape");
	FAIL1(ne, 8, UINT64_MAX, b, "shape");
	FAIL1(ne + 8, 8, 1ull << 40, b, NULL);
	/* an f64 tensor of 2^61 + 2 values: 8 bytes each would wrap to 16 bytes */
	uint8_t *p = copy_of(buf, n);
	put_le(p + ty, DT_F64, 4);
	put_le(p + ne, (1ull << 61) + 2, 8);
	put_le(p + ne + 8, 1, 8);
	err e = {""};
	gguf_file *f = gguf_open_mem(p, n, V->name, &e);
	CHECK_(f == NULL, "f64 tensor of 2^61+2 values opened (%lld bytes)",
	       f ? (long long)gguf_tensor_at(f, V->t_b)->n_bytes : 0ll);
	check_err(&e, V->name, b, NULL);
	gguf_close(f);
	free(p);
	/* a row length that is not a whole number of q8_0 blocks */
	FAIL2(ty, 4, DT_Q8_0, ne, 8, 33, b, "block");
	FAIL2(ty, 4, DT_Q4_K, ne, 8, 128, b, "block");
	/* the other k-quants and iq4_xs take whole 256-value super-blocks, the
	 * 32-value formats whole blocks: a clear refusal naming both */
	FAIL2(ty, 4, DT_Q3_K, ne, 8, 576, b, "row length 576 is not a multiple of q3_K's block of 256");
	FAIL2(ty, 4, DT_Q2_K, ne, 8, 288, b, "q2_K's block of 256");
	FAIL2(ty, 4, DT_IQ4_XS, ne, 8, 64, b, "iq4_xs's block of 256");
	FAIL2(ty, 4, DT_Q5_1, ne, 8, 40, b, "q5_1's block of 32");
	FAIL2(ty, 4, DT_IQ4_NL, ne, 8, 48, b, "iq4_nl's block of 32");
	/* duplicate tensor name */
	p = copy_of(buf, n);
	memcpy(p + L->name_at[V->t_b] + 8, a, strlen(a));
	f = gguf_open_mem(p, n, V->name, &e);
	CHECK(f == NULL);
	check_err(&e, V->name, "duplicate", a);
	gguf_close(f);
	free(p);
}

static void corrupt_all(const uint8_t *buf, size_t n, const struct lay *L, const struct victims *V)
{
	corrupt_header(buf, n, L, V);
	corrupt_metadata(buf, n, L, V);
	corrupt_tensors(buf, n, L, V);
}

static const struct gkv base_kv[] = {
	{"a.u32", {.type = GGUF_U32, .bits = 7}},
	{"b.str", {.type = GGUF_STR, STRV("text")}},
	{"c.arr", {ARRV(GGUF_U32, 4)}},
	{"d.sarr", {ARRV(GGUF_STR, 3)}},
	{"e.u32", {.type = GGUF_U32, .bits = 9}},
};

static const struct gten base_t[] = {
	{"t.aa", 2, {16, 4}, DT_F32},
	{"t.bb", 2, {64, 2}, DT_Q8_0},
	{"t.cc", 1, {8}, DT_F32},
};

static const struct gspec base_spec = {3, 64, base_kv, ARRAY_LEN(base_kv), base_t, ARRAY_LEN(base_t)};
static const struct victims base_victims = {GEN_NAME, 0, 1, 2, 3, 0, 4, 0, 1, 2};

/* A spec like base_spec with general.alignment of another type. */
static void alignment_of_type(const struct gval *v, const char *word)
{
	struct gkv kv[ARRAY_LEN(base_kv) + 1];
	memcpy(kv, base_kv, sizeof base_kv);
	kv[ARRAY_LEN(base_kv)] = (struct gkv){"general.alignment", *v};
	struct gspec s = {3, 0, kv, ARRAY_LEN(kv), base_t, ARRAY_LEN(base_t)};
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	gen(&b, &s, L);
	uint8_t *p = copy_of(b.p, b.n);
	err e = {""};
	gguf_file *f = gguf_open_mem(p, b.n, GEN_NAME, &e);
	if (word) {
		CHECK_(f == NULL, "general.alignment of type %s accepted", gguf_vtype_name(v->type));
		check_err(&e, GEN_NAME, "general.alignment", word);
		CHECK_(strstr(e.msg + strlen(GEN_NAME), GEN_NAME) == NULL, "name repeated: %s", e.msg);
	} else {
		CHECK_(f != NULL, "%s", e.msg);
	}
	gguf_close(f);
	free(p);
	free(b.p);
	free(L);
}

static void test_corrupt_generated(void)
{
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	gen(&b, &base_spec, L);
	const uint8_t *buf = b.p;
	size_t n = b.n;
	const struct victims *V = &base_victims;
	CHECK_EQ_INT(L->data_end, n);
	corrupt_all(buf, n, L, V);
	size_t al = L->val_at[ARRAY_LEN(base_kv)];
	FAIL1(al, 4, 0, "alignment", NULL);
	FAIL1(al, 4, 3, "alignment", NULL);
	FAIL1(al, 4, 96, "alignment", NULL);
	FAIL1(al, 4, 1u << 31, "alignment", NULL);
	alignment_of_type(&(struct gval){.type = GGUF_STR, STRV("32")}, "string");
	alignment_of_type(&(struct gval){.type = GGUF_F32, .f = 32}, "f32");
	alignment_of_type(&(struct gval){.type = GGUF_I32, .bits = (uint64_t)-32}, "range");
	alignment_of_type(&(struct gval){.type = GGUF_U64, .bits = 1ull << 40}, "range");
	alignment_of_type(&(struct gval){.type = GGUF_U64, .bits = 32}, NULL); /* any integer type */
	/* a data section cut inside the last tensor */
	expect_fail2(buf, n - 1, GEN_NAME, 0, 1, 'G', 0, 0, 0, "t.cc", "past", __LINE__);
	free(b.p);
	free(L);
}

/* A zero-sized tensor between two overlapping ones must not hide the overlap. */
static void test_overlap_behind_empty(void)
{
	static const struct gten t[] = {
		{"big", 1, {64}, DT_F32}, {"nil", 2, {0, 4}, DT_F32}, {"small", 1, {16}, DT_F32},
	};
	struct gspec s = {3, 32, NULL, 0, t, 3};
	gw b = {0};
	struct lay *L = malloc(sizeof *L);
	gen(&b, &s, L);
	uint8_t *p = copy_of(b.p, b.n);
	put_le(p + L->off_at[1], 32, 8);   /* nil at 32, inside big */
	put_le(p + L->off_at[2], 128, 8);  /* small at 128, inside big (0..256) */
	err e = {""};
	gguf_file *f = gguf_open_mem(p, b.n, GEN_NAME, &e);
	CHECK_(f == NULL, "overlap of 'big' and 'small' behind an empty tensor not found");
	check_err(&e, GEN_NAME, "overlap", "small");
	gguf_close(f);
	free(p);
	free(b.p);
	free(L);
}

/* The same damage to the fields of the real model. */
static void test_corrupt_model(const uint8_t *buf, size_t n, const struct lay *L)
{
	struct victims V = {"model.gguf",
		lay_find(buf, L->key_at, L->n_kv, "llama.block_count"),
		lay_find(buf, L->key_at, L->n_kv, "general.architecture"),
		lay_find(buf, L->key_at, L->n_kv, "tokenizer.ggml.scores"),
		lay_find(buf, L->key_at, L->n_kv, "tokenizer.ggml.tokens"),
		lay_find(buf, L->key_at, L->n_kv, "general.architecture"),
		lay_find(buf, L->key_at, L->n_kv, "tokenizer.ggml.model"),
		lay_find(buf, L->name_at, L->n_tensors, "blk.0.attn_q.weight"),
		lay_find(buf, L->name_at, L->n_tensors, "blk.1.attn_q.weight"),
		47};
	CHECK(V.kv_scalar >= 0 && V.kv_str >= 0 && V.kv_arr >= 0 && V.kv_sarr >= 0);
	CHECK(V.kv_dup_b >= 0 && V.t_a >= 0 && V.t_b >= 0);
	if (V.kv_scalar < 0 || V.kv_str < 0 || V.kv_arr < 0 || V.kv_sarr < 0 || V.kv_dup_b < 0 ||
	    V.t_a < 0 || V.t_b < 0)
		return;
	corrupt_all(buf, n, L, &V);
}

/* ---- 4c, 4d. random damage ---- */

static const uint64_t interesting[] = {
	0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 32, 33, 64, 255, 256, 0x7fff, 0xffff, 0x10000,
	0x7fffffff, 0x80000000u, 0xffffffffu, 1ull << 32, 1ull << 40, 1ull << 61, 1ull << 62,
	1ull << 63, UINT64_MAX, UINT64_MAX - 7,
};

/* Damages one place of p (header region, a structural field, or anywhere);
 * saves the bytes it changes in undo (at most 8 at *undo_at). */
static void mutate(uint8_t *p, size_t n, const struct lay *L, size_t *undo_at, uint8_t undo[8], int *undo_w)
{
	uint64_t kind = rnd_below(10);
	size_t at;
	int w = 1;
	if (kind < 4 && L->n_fields) {
		size_t k = rnd_below(L->n_fields);
		at = L->field_at[k], w = L->field_w[k];
	} else if (kind < 8) {
		at = rnd_below(MIN(n, (size_t)4096));
	} else {
		at = rnd_below(n);
	}
	if (at + (size_t)w > n)
		w = 1;
	*undo_at = at, *undo_w = w;
	memcpy(undo, p + at, (size_t)w);
	uint64_t v;
	if (w == 1)
		v = rnd_below(4) ? (uint64_t)p[at] ^ (1u << rnd_below(8)) : rnd();
	else if (rnd_below(2))
		v = interesting[rnd_below(ARRAY_LEN(interesting))];
	else
		v = get_le(p + at, w) + rnd_below(17) - 8;
	put_le(p + at, v, w);
}

/* iters seeded mutations of buf (1..4 damaged places each), in place and undone. */
static void fuzz_mutations(const uint8_t *orig, size_t n, const struct lay *L, int iters, const char *name)
{
	uint8_t *p = copy_of(orig, n);
	int bad = 0, opened = 0;
	for (int it = 0; it < iters; it++) {
		size_t at[4];
		uint8_t undo[4][8];
		int w[4], k = 1 + (int)rnd_below(4);
		for (int j = 0; j < k; j++)
			mutate(p, n, L, &at[j], undo[j], &w[j]);
		err e = {""};
		gguf_file *f = gguf_open_mem(p, n, name, &e);
		if (f) {
			opened++;
			bad += walk(f, p, n);
		} else {
			bad += !starts_with(e.msg, name) || strlen(e.msg) <= strlen(name) + 2;
		}
		gguf_close(f);
		for (int j = k - 1; j >= 0; j--)
			memcpy(p + at[j], undo[j], (size_t)w[j]);
	}
	CHECK(memcmp(p, orig, n) == 0);
	CHECK_EQ_INT(bad, 0);
	CHECK_(opened > 0 && opened < iters, "%s: %d of %d mutants opened", name, opened, iters);
	free(p);
}

/* Random buffers: uniform bytes, or mostly-zero bytes after a valid header
 * so that the parse gets further. */
static void fuzz_random_buffers(int iters)
{
	int bad = 0;
	for (int it = 0; it < iters; it++) {
		size_t n = rnd_below(it % 4 == 0 ? 4096 : 300);
		uint8_t *p = malloc(n ? n : 1);
		bool sparse = it % 2;
		for (size_t i = 0; i < n; i++)
			p[i] = (uint8_t)(sparse && rnd_below(4) ? rnd_below(3) : rnd());
		if (it % 3 && n >= 24) {
			memcpy(p, "GGUF", 4);
			put_le(p + 4, 2 + rnd_below(2), 4);
			put_le(p + 8, rnd_below(4), 8);
			put_le(p + 16, rnd_below(6), 8);
		}
		err e = {""};
		gguf_file *f = gguf_open_mem(p, n, "rand", &e);
		if (f)
			bad += walk(f, p, n);
		else
			bad += !starts_with(e.msg, "rand: ");
		gguf_close(f);
		free(p);
	}
	CHECK_EQ_INT(bad, 0);
}

/* ---- 6. paths ---- */

static void test_paths(void)
{
	err e = {""};
	const char *missing = "../shared/models/no-such-model.gguf";
	CHECK(gguf_open(missing, &e) == NULL);
	check_err(&e, missing, NULL, NULL);
	e.msg[0] = '\0';
	CHECK(gguf_open("../shared/models", &e) == NULL);
	check_err(&e, "../shared/models", NULL, NULL);
	e.msg[0] = '\0';
	CHECK(gguf_open("", &e) == NULL);
	CHECK(e.msg[0] != '\0');
	CHECK(gguf_open(missing, NULL) == NULL);  /* a NULL err is allowed */
}

int main(void)
{
	size_t n;
	uint8_t *model = read_all(MODEL, &n);
	struct lay *L = malloc(sizeof *L);
	CHECK_(model != NULL, "cannot read %s (run from the repository root)", MODEL);
	if (!model)
		return TEST_DONE();
	CHECK(ref_parse(model, n, L));
	CHECK_EQ_INT(L->data_off, 14176);
	CHECK_EQ_INT(L->data_end, n);
	test_model(model, n, L);
	test_vocab();
	test_generated();
	test_getters();
	test_float_not_finite();
	test_many_entries();

	gw b = {0};
	struct lay *G = malloc(sizeof *G);
	gen(&b, &base_spec, G);
	truncations(model, n, (size_t)L->data_off + 1, (size_t)L->data_end, 300, "model.gguf");
	truncations(b.p, b.n, b.n, (size_t)G->data_end, 1, GEN_NAME);
	disk_truncations(model, n, L);
	test_corrupt_generated();
	test_overlap_behind_empty();
	test_corrupt_model(model, n, L);

	fuzz_mutations(model, n, L, 20000, "model.gguf");
	fuzz_mutations(b.p, b.n, G, 20000, GEN_NAME);
	struct gspec all = {3, 64, all_kv, ARRAY_LEN(all_kv), all_t, ARRAY_LEN(all_t)};
	gen(&b, &all, G);
	fuzz_mutations(b.p, b.n, G, 20000, GEN_NAME);
	fuzz_random_buffers(20000);
	test_paths();

	free(b.p);
	free(G);
	free(L);
	free(model);
	return TEST_DONE();
}
