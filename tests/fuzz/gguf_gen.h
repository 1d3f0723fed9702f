/* tests/fuzz/gguf_gen.h: a tiny in-memory GGUF writer for fuzz targets, the
 * seed generator and the tests' small GGUF images. Header-only, tests only.
 *
 * Usage: gw_begin(), then metadata (gw_kv_* for scalars, strings and string
 * arrays; gw_kv_arr() followed by exactly n items written with gw_u32/gw_f32/
 * gw_str ...), then tensor infos (gw_tensor) and gw_end(), which patches the
 * counts into the header, pads to the alignment and appends data_bytes zero
 * bytes of tensor data. Values are written as given: nothing here validates,
 * so a writer can produce corrupt files on purpose. Cannot fail (xrealloc). */
#ifndef PAGECHAT_FUZZ_GGUF_GEN_H
#define PAGECHAT_FUZZ_GGUF_GEN_H

#include "base/base.h"
#include "models/gguf.h"

#include <stdlib.h>
#include <string.h>

typedef struct gw {
	uint8_t *p;              /* owned; the file so far */
	size_t n, cap;
	uint64_t n_kv, n_tensors;
} gw;

static inline void gw_bytes(gw *w, const void *s, size_t n)
{
	xgrow_size(&w->p, &w->cap, w->n + n, 1);
	if (n)
		memcpy(w->p + w->n, s, n);
	w->n += n;
}

static inline void gw_le(gw *w, uint64_t v, int n)
{
	uint8_t b[8];
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	gw_bytes(w, b, (size_t)n);
}

static inline void gw_u8(gw *w, uint8_t v) { gw_le(w, v, 1); }
static inline void gw_u32(gw *w, uint32_t v) { gw_le(w, v, 4); }
static inline void gw_u64(gw *w, uint64_t v) { gw_le(w, v, 8); }

static inline void gw_f32(gw *w, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	gw_u32(w, u);
}

static inline void gw_str(gw *w, const char *s, size_t n)
{
	gw_u64(w, n);
	gw_bytes(w, s, n);
}

static inline void gw_begin(gw *w, uint32_t version)
{
	memset(w, 0, sizeof *w);
	gw_bytes(w, "GGUF", 4);
	gw_u32(w, version);
	gw_u64(w, 0);            /* tensor count, patched by gw_end */
	gw_u64(w, 0);            /* metadata count, patched by gw_end */
}

static inline void gw_key(gw *w, const char *key, enum gguf_vtype t)
{
	gw_str(w, key, strlen(key));
	gw_u32(w, t);
	w->n_kv++;
}

static inline void gw_kv_u32(gw *w, const char *key, uint32_t v)
{
	gw_key(w, key, GGUF_U32);
	gw_u32(w, v);
}

static inline void gw_kv_f32(gw *w, const char *key, float v)
{
	gw_key(w, key, GGUF_F32);
	gw_f32(w, v);
}

static inline void gw_kv_bool(gw *w, const char *key, bool v)
{
	gw_key(w, key, GGUF_BOOL);
	gw_u8(w, v);
}

static inline void gw_kv_str(gw *w, const char *key, const char *s, size_t n)
{
	gw_key(w, key, GGUF_STR);
	gw_str(w, s, n);
}

/* An array header; the caller writes the n items next. */
static inline void gw_kv_arr(gw *w, const char *key, enum gguf_vtype elem, uint64_t n)
{
	gw_key(w, key, GGUF_ARR);
	gw_u32(w, elem);
	gw_u64(w, n);
}

/* An array of n NUL-terminated strings. */
static inline void gw_kv_strs(gw *w, const char *key, const char *const *v, size_t n)
{
	gw_kv_arr(w, key, GGUF_STR, n);
	for (size_t i = 0; i < n; i++)
		gw_str(w, v[i], strlen(v[i]));
}

/* A tensor info of type ggml type id `type` at data offset off. */
static inline void gw_tensor(gw *w, const char *name, int n_dims, const int64_t *ne,
			     uint32_t type, uint64_t off)
{
	gw_str(w, name, strlen(name));
	gw_u32(w, (uint32_t)n_dims);
	for (int d = 0; d < n_dims; d++)
		gw_u64(w, (uint64_t)ne[d]);
	gw_u32(w, type);
	gw_u64(w, off);
	w->n_tensors++;
}

/* Patches the counts, pads to align (with tensors only) and appends
 * data_bytes zeros. The file is w->p[0..w->n); free it with free(w->p). */
static inline void gw_end(gw *w, uint32_t align, size_t data_bytes)
{
	for (int i = 0; i < 8; i++) {
		w->p[8 + i] = (uint8_t)(w->n_tensors >> (8 * i));
		w->p[16 + i] = (uint8_t)(w->n_kv >> (8 * i));
	}
	if (w->n_tensors == 0)
		return;
	static const uint8_t zero[64];
	while (w->n % align)
		gw_bytes(w, zero, 1);
	for (size_t k = 0; k < data_bytes; k += sizeof zero)
		gw_bytes(w, zero, MIN(sizeof zero, data_bytes - k));
}

/* GPT-2's byte-level alphabet, written out apart from models/tok.c: the
 * character that spells byte b, as UTF-8 in out[0..2); returns its length. */
static inline size_t gw_gpt2_byte_char(int b, char *out)
{
	bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
	unsigned cp = (unsigned)b;
	if (!printable)
		cp = b <= 0x20 ? 0x100 + (unsigned)b : b <= 0xa0 ? 0x121 + (unsigned)(b - 0x7f) : 0x143;
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	out[0] = (char)(0xc0 | cp >> 6);
	out[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

#endif
