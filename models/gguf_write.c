/* models/gguf_write.c: the GGUF writer.
 *
 * Metadata values are kept as their encoded bytes (type word excluded), so
 * copying an entry from an open file is a byte copy: in a GGUF file an entry
 * is its key string, then a u32 type, then the value, and gguf_kv_key()'s
 * view points at the key inside the file's map, so the value starts 4 bytes
 * after the key's text ends. */
#include "models/gguf_write.h"

#include "base/files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_ALIGN 32

typedef struct wkv {
	char *key;               /* owned, NUL-terminated */
	uint32_t type;           /* enum gguf_vtype */
	uint8_t *val;            /* owned encoded value */
	size_t n;
} wkv;

typedef struct wtensor {
	char *name;              /* owned */
	enum dtype type;
	int n_dims;
	int64_t ne[4];
	int64_t n_bytes;
	uint64_t offset;         /* in the data section */
} wtensor;

struct gguf_writer {
	wkv *kv;
	int64_t n_kv;
	size_t cap_kv;
	wtensor *t;
	int64_t n_t;
	size_t cap_t;
};

struct gguf_out {
	file_out *f;             /* the file being written */
	int64_t left;            /* bytes the current tensor still needs */
};

static const size_t scalar_size[GGUF_VTYPE_COUNT] = {
	[GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2, [GGUF_U32] = 4,
	[GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_U64] = 8, [GGUF_I64] = 8,
	[GGUF_F64] = 8,
};

static uint64_t load_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

gguf_writer *gguf_writer_new(void)
{
	return xcalloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w)
{
	if (!w)
		return;
	for (int64_t i = 0; i < w->n_kv; i++) {
		free(w->kv[i].key);
		free(w->kv[i].val);
	}
	for (int64_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->kv);
	free(w->t);
	free(w);
}

int64_t gguf_writer_n_kv(const gguf_writer *w)
{
	return w->n_kv;
}

/* Stores key = (type, val[n]) (taking val), replacing an existing value. */
static void put_kv(gguf_writer *w, const char *key, size_t key_len, uint32_t type, uint8_t *val, size_t n)
{
	for (int64_t i = 0; i < w->n_kv; i++)
		if (strlen(w->kv[i].key) == key_len && !memcmp(w->kv[i].key, key, key_len)) {
			free(w->kv[i].val);
			w->kv[i].type = type;
			w->kv[i].val = val;
			w->kv[i].n = n;
			return;
		}
	xgrow_size(&w->kv, &w->cap_kv, (size_t)w->n_kv + 1, sizeof *w->kv);
	w->kv[w->n_kv++] = (wkv){.key = xstrndup(key, key_len), .type = type, .val = val, .n = n};
}

/* Encoded size of a value of type t at p (the file is validated, so the
 * lengths inside are trusted). */
static size_t value_size(uint32_t t, const uint8_t *p)
{
	if (t == GGUF_STR)
		return 8 + (size_t)load_u64(p);
	if (t != GGUF_ARR)
		return scalar_size[t];
	uint32_t et = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	uint64_t n = load_u64(p + 4);
	size_t k = 12;
	if (et != GGUF_STR)
		return k + (size_t)n * scalar_size[et];
	for (uint64_t i = 0; i < n; i++)
		k += 8 + (size_t)load_u64(p + k);
	return k;
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i)
{
	gguf_str key = gguf_kv_key(f, i);
	uint32_t t = gguf_kv_type(f, i);
	const uint8_t *p = (const uint8_t *)key.p + key.len + 4;
	size_t n = value_size(t, p);
	uint8_t *val = xmalloc(n ? n : 1);
	memcpy(val, p, n);
	put_kv(w, key.p, (size_t)key.len, t, val, n);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v)
{
	uint8_t *val = xmalloc(4);
	put_le(val, v, 4);
	put_kv(w, key, strlen(key), GGUF_U32, val, 4);
}

void gguf_writer_set_f32(gguf_writer *w, const char *key, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	uint8_t *val = xmalloc(4);
	put_le(val, u, 4);
	put_kv(w, key, strlen(key), GGUF_F32, val, 4);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
	size_t len = strlen(v);
	uint8_t *val = xmalloc(8 + len);
	put_le(val, len, 8);
	memcpy(val + 8, v, len);
	put_kv(w, key, strlen(key), GGUF_STR, val, 8 + len);
}

void gguf_writer_set_bools(gguf_writer *w, const char *key, const bool *v, size_t n)
{
	uint8_t *val = xmalloc(12 + n);
	put_le(val, GGUF_BOOL, 4);
	put_le(val + 4, n, 8);
	for (size_t i = 0; i < n; i++)
		val[12 + i] = v[i];
	put_kv(w, key, strlen(key), GGUF_ARR, val, 12 + n);
}

int64_t gguf_writer_add_tensor(gguf_writer *w, const char *name, enum dtype t, int n_dims,
			       const int64_t *ne, err *e)
{
	if (!dtype_is_known(t) || n_dims < 1 || n_dims > 4) {
		err_set(e, "tensor '%s': bad type %d or %d dimensions", name, (int)t, n_dims);
		return -1;
	}
	int64_t rows = 1;
	for (int d = 1; d < n_dims; d++) {
		if (ne[d] < 1) {
			err_set(e, "tensor '%s': dimension %d is %lld", name, d, (long long)ne[d]);
			return -1;
		}
		rows *= ne[d];
	}
	int64_t row = ne[0] > 0 ? dtype_row_bytes(t, ne[0]) : -1;
	if (row < 0) {
		err_set(e, "tensor '%s': rows of %lld values do not fit %s blocks of %lld", name,
			(long long)ne[0], dtype_name(t), (long long)dtype_block_elems(t));
		return -1;
	}
	for (int64_t i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name)) {
			err_set(e, "tensor '%s' declared twice", name);
			return -1;
		}
	xgrow_size(&w->t, &w->cap_t, (size_t)w->n_t + 1, sizeof *w->t);
	wtensor *wt = &w->t[w->n_t];
	*wt = (wtensor){.name = xstrdup(name), .type = t, .n_dims = n_dims, .n_bytes = row * rows};
	for (int d = 0; d < 4; d++)
		wt->ne[d] = d < n_dims ? ne[d] : 1;
	return w->n_t++;
}

int64_t gguf_writer_tensor_bytes(const gguf_writer *w, int64_t i)
{
	return w->t[i].n_bytes;
}

int gguf_out_write(gguf_out *out, const void *p, size_t n, err *e)
{
	if ((int64_t)n > out->left) {
		err_set(e, "%s: tensor data longer than declared", out->f->path);
		return -1;
	}
	if (file_out_write(out->f, p, n, e))
		return -1;
	out->left -= (int64_t)n;
	return 0;
}

static uint32_t alignment(const gguf_writer *w)
{
	for (int64_t i = 0; i < w->n_kv; i++) {
		const wkv *kv = &w->kv[i];
		if (strcmp(kv->key, "general.alignment"))
			continue;
		if (kv->type != GGUF_U32)
			break;
		uint32_t a = (uint32_t)kv->val[0] | (uint32_t)kv->val[1] << 8 | (uint32_t)kv->val[2] << 16 |
			     (uint32_t)kv->val[3] << 24;
		if (a && !(a & (a - 1)))
			return a;
	}
	return DEFAULT_ALIGN;
}

/* A little-endian integer / a length-prefixed string / zeros up to the
 * alignment. Each is 0, or -1 with e (the write is then abandoned). */
static int put_int(file_out *f, uint64_t v, int n, err *e)
{
	uint8_t b[8];
	put_le(b, v, n);
	return file_out_write(f, b, (size_t)n, e);
}

static int put_str(file_out *f, const char *s, size_t len, err *e)
{
	return put_int(f, len, 8, e) || file_out_write(f, s, len, e) ? -1 : 0;
}

static int put_pad(file_out *f, uint32_t align, err *e)
{
	static const uint8_t zeros[256];
	size_t pad = (align - f->written % align) % align;
	while (pad > 0) {
		size_t k = MIN(pad, sizeof zeros);
		if (file_out_write(f, zeros, k, e))
			return -1;
		pad -= k;
	}
	return 0;
}

static int write_header(const gguf_writer *w, file_out *f, uint32_t align, err *e)
{
	int rc = file_out_write(f, "GGUF", 4, e) || put_int(f, 3, 4, e) || put_int(f, (uint64_t)w->n_t, 8, e) ||
		 put_int(f, (uint64_t)w->n_kv, 8, e);
	for (int64_t i = 0; !rc && i < w->n_kv; i++) {
		const wkv *kv = &w->kv[i];
		rc = put_str(f, kv->key, strlen(kv->key), e) || put_int(f, kv->type, 4, e) ||
		     file_out_write(f, kv->val, kv->n, e);
	}
	for (int64_t i = 0; !rc && i < w->n_t; i++) {
		const wtensor *t = &w->t[i];
		rc = put_str(f, t->name, strlen(t->name), e) || put_int(f, (uint64_t)t->n_dims, 4, e);
		for (int d = 0; !rc && d < t->n_dims; d++)
			rc = put_int(f, (uint64_t)t->ne[d], 8, e);
		rc = rc || put_int(f, (uint64_t)t->type, 4, e) || put_int(f, t->offset, 8, e);
	}
	return rc || put_pad(f, align, e) ? -1 : 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, err *e)
{
	uint32_t align = alignment(w);
	uint64_t off = 0;
	for (int64_t i = 0; i < w->n_t; i++) {
		w->t[i].offset = off;
		off += ((uint64_t)w->t[i].n_bytes + align - 1) / align * align;
	}
	/* writes in whole 4 MiB blocks: the page cache then keeps the file in
	 * 2 MiB folios, which a model mapping maps 2 MiB at a time (gguf.c) */
	file_out f;
	if (file_out_open(&f, path, FILE_MODE_SHARED, (size_t)4 << 20, e))
		return -1;
	if (write_header(w, &f, align, e))
		return -1;
	uint64_t data_start = f.written;
	for (int64_t i = 0; i < w->n_t; i++) {
		gguf_out o = {.f = &f, .left = w->t[i].n_bytes};
		if (fill(ctx, i, &o, e))
			goto fail;
		if (o.left) {
			err_set(e, "%s: tensor '%s' got %lld bytes fewer than its %lld", path, w->t[i].name,
				(long long)o.left, (long long)w->t[i].n_bytes);
			goto fail;
		}
		if (put_pad(&f, align, e))
			return -1;
	}
	if (f.written - data_start != off) {
		err_set(e, "%s: data section is %llu bytes, expected %llu", path,
			(unsigned long long)(f.written - data_start), (unsigned long long)off);
		goto fail;
	}
	return file_out_commit(&f, e);
fail:
	file_out_abort(&f);
	return -1;
}
