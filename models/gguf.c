/* models/gguf.c: GGUF parsing and validation over one read-only mmap.
 *
 * Parsing walks a bounds-checked cursor; any read past the end is "truncated".
 * Counts read from the file are checked against the bytes that remain, and the
 * entry tables grow as entries are actually parsed, so allocations stay
 * proportional to the bytes read whatever the header claims. Duplicate checks
 * sort, so no input makes parsing quadratic. */
#include "models/gguf.h"

#include "base/files.h"

#include <assert.h>
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_KEY_BYTES   65535
#define GGUF_MAX_NAME_BYTES  1024
#define GGUF_DEFAULT_ALIGN   32

struct kv {
	gguf_str key;
	enum gguf_vtype type;
	const uint8_t *val;      /* scalar payload in the map (string: its length field) */
	gguf_arr arr;            /* when type == GGUF_ARR; str_off owned */
};

struct gguf_file {
	char *name;              /* owned */
	const uint8_t *base;     /* the map, or the caller's buffer */
	uint64_t size;
	bool mapped;             /* base came from mmap and is unmapped on close */
	uint32_t version;
	uint32_t alignment;
	int64_t n_kv;
	struct kv *kv;           /* owned; [n_kv] */
	int64_t n_tensors;
	gguf_tensor *tensors;    /* owned; [n_tensors], names owned */
	uint64_t data_off;       /* file offset of the data section */
	uint64_t data_bytes;
	gguf_ident ident;        /* the opened file's (size 0: over memory) */
};

typedef struct cursor {
	const uint8_t *p;
	uint64_t pos, size;
	const char *what;        /* what is being read, for truncation messages */
} cursor;

static const size_t vtype_size[GGUF_VTYPE_COUNT] = {
	[GGUF_U8] = 1, [GGUF_I8] = 1, [GGUF_U16] = 2, [GGUF_I16] = 2,
	[GGUF_U32] = 4, [GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1,
	[GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
	"u64", "i64", "f64",
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
	return (unsigned)t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

/* ---- little-endian loads (the map may be unaligned) ---- */

static uint64_t load_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static int64_t sign_extend(uint64_t v, size_t n)
{
	if (n == 8)
		return (int64_t)v;
	uint64_t m = 1ull << (8 * n - 1);
	return (int64_t)((v ^ m) - m);
}

static float load_f32(const uint8_t *p)
{
	uint32_t u = (uint32_t)load_le(p, 4);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static double load_f64(const uint8_t *p)
{
	uint64_t u = load_le(p, 8);
	double d;
	memcpy(&d, &u, 8);
	return d;
}

/* ---- cursor ---- */

static uint64_t remaining(const cursor *c)
{
	return c->size - c->pos;
}

static int take(cursor *c, uint64_t n, const uint8_t **out, err *e)
{
	if (n > remaining(c)) {
		err_set(e, "truncated file: %s needs %llu bytes at offset %llu, only %llu left",
			c->what, (unsigned long long)n, (unsigned long long)c->pos,
			(unsigned long long)remaining(c));
		return -1;
	}
	*out = c->p + c->pos;
	c->pos += n;
	return 0;
}

static int read_u32(cursor *c, uint32_t *v, err *e)
{
	const uint8_t *p;
	if (take(c, 4, &p, e))
		return -1;
	*v = (uint32_t)load_le(p, 4);
	return 0;
}

static int read_u64(cursor *c, uint64_t *v, err *e)
{
	const uint8_t *p;
	if (take(c, 8, &p, e))
		return -1;
	*v = load_le(p, 8);
	return 0;
}

static int read_str(cursor *c, gguf_str *s, uint64_t max_len, err *e)
{
	uint64_t len;
	const uint8_t *p;
	uint64_t at = c->pos;
	if (read_u64(c, &len, e) || take(c, len, &p, e))
		return -1;
	if (len > max_len) {
		err_set(e, "%s at offset %llu is %llu bytes long (limit %llu): corrupt file",
			c->what, (unsigned long long)at, (unsigned long long)len,
			(unsigned long long)max_len);
		return -1;
	}
	s->p = (const char *)p;
	s->len = len;
	return 0;
}

/* ---- metadata ---- */

static int parse_array(cursor *c, struct kv *kv, err *e)
{
	uint32_t et;
	uint64_t n;
	if (read_u32(c, &et, e) || read_u64(c, &n, e))
		return -1;
	if (et >= GGUF_VTYPE_COUNT || et == GGUF_ARR) {
		err_set(e, "array of %s (type %u) is not supported",
			et == GGUF_ARR ? "arrays" : "unknown type", et);
		return -1;
	}
	uint64_t max = et == GGUF_STR ? GGUF_MAX_STR_ITEMS : GGUF_MAX_ARR_ITEMS;
	if (n > max) {
		err_set(e, "array of %llu %s items at offset %llu is over the limit of %llu: "
			"corrupt file", (unsigned long long)n, vtype_names[et],
			(unsigned long long)c->pos, (unsigned long long)max);
		return -1;
	}
	kv->arr.type = et;
	kv->arr.n = n;
	kv->arr.data = c->p + c->pos;
	if (et != GGUF_STR) {
		const uint8_t *p;
		if (n > remaining(c) / vtype_size[et]) {
			err_set(e, "truncated or corrupt file: array of %llu %s items at offset %llu "
				"runs past the end", (unsigned long long)n, vtype_names[et],
				(unsigned long long)c->pos);
			return -1;
		}
		return take(c, n * vtype_size[et], &p, e);
	}
	/* every string needs at least its 8-byte length: bounds the allocation */
	if (n > remaining(c) / 8) {
		err_set(e, "truncated or corrupt file: array of %llu strings at offset %llu runs "
			"past the end", (unsigned long long)n, (unsigned long long)c->pos);
		return -1;
	}
	uint64_t *off = xmalloc((n ? n : 1) * sizeof *off);
	kv->arr.str_off = off;
	for (uint64_t i = 0; i < n; i++) {
		gguf_str s;
		off[i] = c->pos - (uint64_t)(kv->arr.data - c->p);
		if (read_str(c, &s, GGUF_MAX_STR_BYTES, e)) {
			err_prefix(e, "item %llu", (unsigned long long)i);
			return -1;
		}
	}
	return 0;
}

static int parse_value(cursor *c, struct kv *kv, err *e)
{
	uint32_t t;
	if (read_u32(c, &t, e))
		return -1;
	if (t >= GGUF_VTYPE_COUNT) {
		err_set(e, "unknown value type %u", t);
		return -1;
	}
	kv->type = t;
	kv->val = c->p + c->pos;
	if (t == GGUF_ARR)
		return parse_array(c, kv, e);
	if (t == GGUF_STR) {
		gguf_str s;
		return read_str(c, &s, GGUF_MAX_STR_BYTES, e);
	}
	const uint8_t *p;
	return take(c, vtype_size[t], &p, e);
}

/* Errors after the key is known name it. */
static int parse_kv(cursor *c, struct kv *kv, err *e)
{
	c->what = "metadata key";
	if (read_str(c, &kv->key, GGUF_MAX_KEY_BYTES, e))
		return -1;
	c->what = "metadata value";
	if (parse_value(c, kv, e)) {
		err_prefix(e, "key '%.*s'", (int)kv->key.len, kv->key.p);
		return -1;
	}
	return 0;
}

static int cmp_key(const void *a, const void *b)
{
	const gguf_str *x = *(const gguf_str *const *)a, *y = *(const gguf_str *const *)b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->p, y->p, x->len);
}

static int check_unique_keys(gguf_file *f, err *e)
{
	if (f->n_kv < 2)
		return 0;
	const gguf_str **keys = xmalloc((size_t)f->n_kv * sizeof *keys);
	for (int64_t i = 0; i < f->n_kv; i++)
		keys[i] = &f->kv[i].key;
	qsort(keys, (size_t)f->n_kv, sizeof *keys, cmp_key);
	int rc = 0;
	for (int64_t i = 1; i < f->n_kv && rc == 0; i++)
		if (cmp_key(&keys[i - 1], &keys[i]) == 0) {
			err_set(e, "duplicate metadata key '%.*s'", (int)keys[i]->len, keys[i]->p);
			rc = -1;
		}
	free(keys);
	return rc;
}

/* ---- tensors ---- */

static int parse_tensor_info(cursor *c, gguf_tensor *t, err *e)
{
	gguf_str name;
	uint32_t n_dims, type;
	c->what = "tensor name";
	if (read_str(c, &name, GGUF_MAX_NAME_BYTES, e))
		return -1;
	t->name = xstrndup(name.p, name.len);
	if (strlen(t->name) != name.len) {
		err_set(e, "tensor name '%s' contains a NUL byte", t->name);
		return -1;
	}
	c->what = "tensor info";
	if (read_u32(c, &n_dims, e))
		goto truncated;
	if (n_dims < 1 || n_dims > 4) {
		err_set(e, "tensor '%s' has %u dimensions (must be 1..4)", t->name, n_dims);
		return -1;
	}
	t->n_dims = (int)n_dims;
	t->n_elems = 1;
	for (int d = 0; d < 4; d++) {
		uint64_t ne = 1;
		if (d < t->n_dims && read_u64(c, &ne, e))
			goto truncated;
		if (ne > (uint64_t)INT64_MAX / 2 || (ne && (uint64_t)t->n_elems > (uint64_t)INT64_MAX / 2 / ne)) {
			err_set(e, "tensor '%s' has an absurd shape (dimension %d is %llu)", t->name, d,
				(unsigned long long)ne);
			return -1;
		}
		t->ne[d] = (int64_t)ne;
		t->n_elems *= (int64_t)ne;
	}
	if (read_u32(c, &type, e) || read_u64(c, &t->offset, e))
		goto truncated;
	if (!dtype_is_known(type)) {
		err_set(e, "tensor '%s' has unknown type %u", t->name, type);
		return -1;
	}
	t->type = (enum dtype)type;
	if (t->ne[0] % dtype_block_elems(t->type)) {
		err_set(e, "tensor '%s': row length %lld is not a multiple of %s's block of %lld",
			t->name, (long long)t->ne[0], dtype_name(type),
			(long long)dtype_block_elems(t->type));
		return -1;
	}
	/* the byte count must not wrap (2^61 f64 values are "16 bytes" mod 2^64) */
	int64_t n_blocks = t->n_elems / dtype_block_elems(t->type);
	if (n_blocks > INT64_MAX / 2 / dtype_block_bytes(t->type)) {
		err_set(e, "tensor '%s' has an absurd shape (%lld %s values)", t->name,
			(long long)t->n_elems, dtype_name(type));
		return -1;
	}
	t->n_bytes = n_blocks * dtype_block_bytes(t->type);
	return 0;
truncated:
	err_prefix(e, "tensor '%s'", t->name);
	return -1;
}

static int cmp_offset(const void *a, const void *b)
{
	const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_name(const void *a, const void *b)
{
	const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
	return strcmp(x->name, y->name);
}

/* order: the tensors sorted by offset. A tensor that starts before the end of
 * any earlier one overlaps it; empty tensors overlap nothing (and must not
 * hide an overlap between their neighbours). */
static int check_overlap(gguf_tensor **order, int64_t n, err *e)
{
	const gguf_tensor *last = NULL;  /* the non-empty tensor reaching furthest so far */
	uint64_t end = 0;
	for (int64_t i = 0; i < n; i++) {
		const gguf_tensor *t = order[i];
		if (t->n_bytes == 0)
			continue;
		if (last && t->offset < end) {
			err_set(e, "tensors '%s' and '%s' overlap in the data section", last->name, t->name);
			return -1;
		}
		if (t->offset + (uint64_t)t->n_bytes > end) {
			end = t->offset + (uint64_t)t->n_bytes;
			last = t;
		}
	}
	return 0;
}

/* order: the tensors sorted by name. */
static int check_unique_names(gguf_tensor **order, int64_t n, err *e)
{
	for (int64_t i = 1; i < n; i++)
		if (!strcmp(order[i - 1]->name, order[i]->name)) {
			err_set(e, "duplicate tensor name '%s'", order[i]->name);
			return -1;
		}
	return 0;
}

/* Checks bounds, alignment, unique names and that no two tensors overlap. */
static int place_tensors(gguf_file *f, err *e)
{
	if (f->n_tensors == 0)
		return 0;
	if (f->data_off > f->size) {
		err_set(e, "truncated file: data section would start at %llu, file is %llu bytes",
			(unsigned long long)f->data_off, (unsigned long long)f->size);
		return -1;
	}
	f->data_bytes = f->size - f->data_off;
	gguf_tensor **order = xmalloc((size_t)f->n_tensors * sizeof *order);
	int rc = -1;
	for (int64_t i = 0; i < f->n_tensors; i++) {
		gguf_tensor *t = &f->tensors[i];
		order[i] = t;
		if (t->offset % f->alignment) {
			err_set(e, "tensor '%s' data offset %llu is not a multiple of the alignment %u",
				t->name, (unsigned long long)t->offset, f->alignment);
			goto out;
		}
		if (t->offset > f->data_bytes || (uint64_t)t->n_bytes > f->data_bytes - t->offset) {
			err_set(e, "tensor '%s' runs past end of file (needs %lld bytes at data offset %llu, "
				"data section is %llu bytes): file truncated or corrupt, re-download it",
				t->name, (long long)t->n_bytes, (unsigned long long)t->offset,
				(unsigned long long)f->data_bytes);
			goto out;
		}
		t->data = f->base + f->data_off + t->offset;
	}
	qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_offset);
	if (check_overlap(order, f->n_tensors, e))
		goto out;
	qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_name);
	if (check_unique_names(order, f->n_tensors, e))
		goto out;
	rc = 0;
out:
	free(order);
	return rc;
}

/* ---- open ---- */

static int parse_header(gguf_file *f, cursor *c, uint64_t *n_tensors, uint64_t *n_kv, err *e)
{
	const uint8_t *magic;
	c->what = "header";
	if (take(c, 4, &magic, e))
		return -1;
	if (memcmp(magic, "GGUF", 4)) {
		err_set(e, "not a GGUF file (bad magic %02x %02x %02x %02x)", magic[0], magic[1],
			magic[2], magic[3]);
		return -1;
	}
	if (read_u32(c, &f->version, e))
		return -1;
	if (f->version == 1 || (f->version > 3 && (f->version & 0xffff) == 0)) {
		err_set(e, "GGUF version %u is not supported (%s): convert the model again with a current tool",
			f->version, f->version == 1 ? "too old" : "big-endian file");
		return -1;
	}
	if (f->version != 2 && f->version != 3) {
		err_set(e, "GGUF version %u is not supported (2 and 3 are)", f->version);
		return -1;
	}
	if (read_u64(c, n_tensors, e) || read_u64(c, n_kv, e))
		return -1;
	if (*n_kv > GGUF_MAX_KV || *n_tensors > GGUF_MAX_TENSORS) {
		err_set(e, "header claims %llu metadata entries and %llu tensors (limits %d and %d): "
			"corrupt file", (unsigned long long)*n_kv, (unsigned long long)*n_tensors,
			GGUF_MAX_KV, GGUF_MAX_TENSORS);
		return -1;
	}
	/* a metadata entry takes >= 12 bytes, a tensor info >= 28 */
	if (*n_kv > remaining(c) / 12 || *n_tensors > remaining(c) / 28) {
		err_set(e, "header claims %llu metadata entries and %llu tensors, more than a %llu-byte "
			"file can hold: truncated or corrupt file", (unsigned long long)*n_kv,
			(unsigned long long)*n_tensors, (unsigned long long)f->size);
		return -1;
	}
	return 0;
}

static int get_u32(const gguf_file *f, const char *key, bool optional, uint32_t *out, err *e);

static int read_alignment(gguf_file *f, err *e)
{
	f->alignment = GGUF_DEFAULT_ALIGN;
	if (get_u32(f, "general.alignment", true, &f->alignment, e))
		return -1;
	if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) || f->alignment > (1u << 20)) {
		err_set(e, "general.alignment is %u: must be a power of two (default 32)", f->alignment);
		return -1;
	}
	return 0;
}

/* Makes room for entry i in an array of *cap entries of size bytes, growing
 * it geometrically and zeroing new entries. The tables grow with the entries
 * parsed, not with the counts a corrupt header claims. */
static void *reserve(void *a, uint64_t i, uint64_t *cap, size_t size)
{
	if (i < *cap)
		return a;
	size_t old = *cap, n = old;
	xgrow_size(&a, &n, i + 1, size);
	memset((char *)a + old * size, 0, (n - old) * size);
	*cap = n;
	return a;
}

static int parse(gguf_file *f, err *e)
{
	cursor c = {.p = f->base, .pos = 0, .size = f->size, .what = "header"};
	uint64_t n_tensors, n_kv, cap = 0;
	if (parse_header(f, &c, &n_tensors, &n_kv, e))
		return -1;
	for (uint64_t i = 0; i < n_kv; i++) {
		f->kv = reserve(f->kv, i, &cap, sizeof *f->kv);
		f->n_kv = (int64_t)i + 1; /* so close() frees what this entry allocated */
		if (parse_kv(&c, &f->kv[i], e))
			return -1;
	}
	if (check_unique_keys(f, e) || read_alignment(f, e))
		return -1;
	cap = 0;
	for (uint64_t i = 0; i < n_tensors; i++) {
		f->tensors = reserve(f->tensors, i, &cap, sizeof *f->tensors);
		f->n_tensors = (int64_t)i + 1;
		if (parse_tensor_info(&c, &f->tensors[i], e))
			return -1;
	}
	f->n_tensors = (int64_t)n_tensors;
	f->data_off = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
	return place_tensors(f, e);
}

static gguf_file *open_over(const uint8_t *base, uint64_t size, bool mapped, const char *name, err *e)
{
	gguf_file *f = xcalloc(1, sizeof *f);
	f->name = xstrdup(name);
	f->base = base;
	f->size = size;
	f->mapped = mapped;
	if (parse(f, e)) {
		err_prefix(e, "%s", name);
		gguf_close(f);
		return NULL;
	}
	return f;
}

gguf_file *gguf_open_mem(const void *buf, size_t n_bytes, const char *name, err *e)
{
	return open_over(buf, n_bytes, false, name, e);
}

/* Maps a file read-only at a 2 MiB-aligned address and asks for huge pages
 * there. Where the kernel keeps the file's page cache in 2 MiB folios (a
 * cold read through this mapping, or a file written with large folios,
 * as ext4 does from Linux 6.16), they are then mapped one TLB entry per
 * 2 MiB instead of 512: decoding streams every weight once per token, and
 * the reads run about 10-15% faster (bench shows how much of the weights got
 * huge pages). Anywhere else this is a plain mapping. */
static void *map_file(int fd, size_t size)
{
	void *at = size >= ((size_t)2 << 20) ? map_aligned(size, PROT_NONE) : NULL;
	if (!at)
		return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	void *map = mmap(at, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
	if (map == MAP_FAILED) {
		munmap(at, size);
		return mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	}
#ifdef MADV_HUGEPAGE
	madvise(map, size, MADV_HUGEPAGE);
#endif
	return map;
}

gguf_file *gguf_open(const char *path, err *e)
{
	int64_t size;
	int fd = file_open_read(path, &size, e); /* a FIFO or a device is refused, never waited on */
	if (fd < 0)
		return NULL;
	if (size < 24) {
		err_set(e, "%s: truncated file: %lld bytes is too small for a GGUF header", path, (long long)size);
		close(fd);
		return NULL;
	}
	struct stat sb;
	gguf_ident id = {0};
	if (fstat(fd, &sb) == 0)
		id = (gguf_ident){.dev = (uint64_t)sb.st_dev, .ino = (uint64_t)sb.st_ino, .size = size,
				  .mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec,
				  .ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec};
	void *map = map_file(fd, (size_t)size);
	close(fd);
	if (map == MAP_FAILED) {
		err_set(e, "%s: cannot map %lld bytes: %s", path, (long long)size, strerror(errno));
		return NULL;
	}
	/* a file cut short while mapped then ends the process naming it */
	file_map_add(map, (size_t)size, path);
	gguf_file *f = open_over(map, (uint64_t)size, true, path, e);
	if (f)
		f->ident = id;
	return f;
}

void gguf_close(gguf_file *f)
{
	if (!f)
		return;
	for (int64_t i = 0; i < f->n_kv; i++)
		free((void *)f->kv[i].arr.str_off);
	for (int64_t i = 0; i < f->n_tensors; i++)
		free((void *)f->tensors[i].name);
	free(f->kv);
	free(f->tensors);
	if (f->mapped) {
		file_map_remove(f->base);
		munmap((void *)f->base, f->size);
	}
	free(f->name);
	free(f);
}

/* ---- accessors ---- */

const char *gguf_name(const gguf_file *f) { return f->name; }
uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_file_bytes(const gguf_file *f) { return f->size; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
uint64_t gguf_data_bytes(const gguf_file *f) { return f->data_bytes; }

const void *gguf_bytes(const gguf_file *f) { return f->base; }

bool gguf_identity(const gguf_file *f, gguf_ident *id)
{
	*id = f->ident;
	return f->ident.size > 0;
}

/* The sum of smaps' fields (kB) named in fields over the file's mapping. */
static int64_t smaps_sum(const gguf_file *f, const char *const *fields, int n_fields)
{
	if (!f->mapped)
		return -1;
	FILE *sm = fopen("/proc/self/smaps", "r");
	if (!sm)
		return -1;
	uintptr_t lo = (uintptr_t)f->base, hi = lo + f->size;
	char line[512];
	bool in = false;
	int64_t kib = 0;
	while (fgets(line, sizeof line, sm)) {
		unsigned long a, b;
		long long v;
		char c;
		if (sscanf(line, "%lx-%lx %c", &a, &b, &c) == 3) {
			in = a < hi && b > lo;
			continue;
		}
		for (int i = 0; in && i < n_fields; i++) {
			size_t len = strlen(fields[i]);
			if (!strncmp(line, fields[i], len) && line[len] == ':' && sscanf(line + len + 1, "%lld", &v) == 1)
				kib += v;
		}
	}
	fclose(sm);
	return kib * 1024;
}

int64_t gguf_huge_mapped_bytes(const gguf_file *f)
{
	static const char *const fields[] = {"FilePmdMapped", "AnonHugePages"};
	return smaps_sum(f, fields, 2);
}

int64_t gguf_resident_bytes(const gguf_file *f)
{
	static const char *const fields[] = {"Rss"};
	return smaps_sum(f, fields, 1);
}

void gguf_release(const gguf_file *f, const void *p, size_t n)
{
	if (!f->mapped || n == 0)
		return;
	uintptr_t lo = (uintptr_t)p, hi = lo + n, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	assert(lo >= (uintptr_t)f->base && hi <= (uintptr_t)f->base + f->size);
	lo = (lo + pg - 1) / pg * pg;
	hi = hi / pg * pg;
	/* a private, never written file mapping: the pages come back from the file */
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

gguf_str gguf_kv_key(const gguf_file *f, int64_t i)
{
	assert(i >= 0 && i < f->n_kv);
	return f->kv[i].key;
}

enum gguf_vtype gguf_kv_type(const gguf_file *f, int64_t i)
{
	assert(i >= 0 && i < f->n_kv);
	return f->kv[i].type;
}

bool gguf_str_eq(gguf_str s, const char *c)
{
	size_t n = strlen(c);
	return s.len == n && !memcmp(s.p, c, n);
}

int64_t gguf_find_key(const gguf_file *f, const char *key)
{
	for (int64_t i = 0; i < f->n_kv; i++)
		if (gguf_str_eq(f->kv[i].key, key))
			return i;
	return -1;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i)
{
	assert(i >= 0 && i < f->n_tensors);
	return &f->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
	for (int64_t i = 0; i < f->n_tensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

/* Finds key; -1 with a message when missing (unless optional). */
static const struct kv *lookup(const gguf_file *f, const char *key, bool optional, err *e)
{
	int64_t i = gguf_find_key(f, key);
	if (i < 0) {
		if (!optional)
			err_set(e, "metadata key '%s' is missing", key);
		return NULL;
	}
	return &f->kv[i];
}

static int wrong_type(const struct kv *kv, const char *want, err *e)
{
	err_set(e, "metadata key '%.*s' is %s, expected %s", (int)kv->key.len, kv->key.p,
		gguf_vtype_name(kv->type), want);
	return -1;
}

static bool is_int_type(enum gguf_vtype t)
{
	return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static bool is_signed(enum gguf_vtype t)
{
	return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

/* Reads an integer value as int64 (u64 above INT64_MAX sets *big). */
static int64_t int_value(enum gguf_vtype t, const uint8_t *p, bool *big)
{
	uint64_t v = load_le(p, vtype_size[t]);
	*big = false;
	if (is_signed(t))
		return sign_extend(v, vtype_size[t]);
	if (v > (uint64_t)INT64_MAX)
		*big = true;
	return (int64_t)v;
}

/* The getters below leave the file name out of their messages: the public
 * wrappers add it, open_over() adds it for general.alignment. */
static int get_i64(const gguf_file *f, const char *key, int64_t *out, err *e)
{
	const struct kv *kv = lookup(f, key, false, e);
	if (!kv)
		return -1;
	bool big;
	if (!is_int_type(kv->type))
		return wrong_type(kv, "an integer", e);
	int64_t v = int_value(kv->type, kv->val, &big);
	if (big) {
		err_set(e, "metadata key '%s' is out of range for a signed 64-bit value", key);
		return -1;
	}
	*out = v;
	return 0;
}

static int get_u32(const gguf_file *f, const char *key, bool optional, uint32_t *out, err *e)
{
	const struct kv *kv = lookup(f, key, optional, e);
	if (!kv)
		return optional ? 0 : -1;
	if (!is_int_type(kv->type))
		return wrong_type(kv, "an integer", e);
	bool big;
	int64_t v = int_value(kv->type, kv->val, &big);
	if (big || v < 0 || v > (int64_t)UINT32_MAX) {
		if (big)
			err_set(e, "metadata key '%s' = %llu is out of range for an unsigned 32-bit value",
				key, (unsigned long long)v);
		else
			err_set(e, "metadata key '%s' = %lld is out of range for an unsigned 32-bit value",
				key, (long long)v);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int get_f32(const gguf_file *f, const char *key, bool optional, float *out, err *e)
{
	const struct kv *kv = lookup(f, key, optional, e);
	if (!kv)
		return optional ? 0 : -1;
	double v;
	if (kv->type == GGUF_F32)
		v = load_f32(kv->val);
	else if (kv->type == GGUF_F64)
		v = load_f64(kv->val);
	else
		return wrong_type(kv, "a float", e);
	/* NaN, an infinity, or a double past float's range: a damaged file
	 * (every float key sizes or scales something: eps, RoPE bases, factors) */
	if (!(v >= -FLT_MAX && v <= FLT_MAX)) {
		err_set(e, "metadata key '%.*s' is %g, not a finite number; the file is damaged", (int)kv->key.len,
			kv->key.p, v);
		return -1;
	}
	*out = (float)v;
	return 0;
}

static int get_bool(const gguf_file *f, const char *key, bool optional, bool *out, err *e)
{
	const struct kv *kv = lookup(f, key, optional, e);
	if (!kv)
		return optional ? 0 : -1;
	if (kv->type != GGUF_BOOL)
		return wrong_type(kv, "a bool", e);
	*out = kv->val[0] != 0;
	return 0;
}

static int get_str(const gguf_file *f, const char *key, bool optional, gguf_str *out, err *e)
{
	const struct kv *kv = lookup(f, key, optional, e);
	if (!kv)
		return optional ? 0 : -1;
	if (kv->type != GGUF_STR)
		return wrong_type(kv, "a string", e);
	out->len = load_le(kv->val, 8);
	out->p = (const char *)kv->val + 8;
	return 0;
}

static int get_arr(const gguf_file *f, const char *key, gguf_arr *out, err *e)
{
	const struct kv *kv = lookup(f, key, false, e);
	if (!kv)
		return -1;
	if (kv->type != GGUF_ARR)
		return wrong_type(kv, "an array", e);
	*out = kv->arr;
	return 0;
}

static int named(const gguf_file *f, int rc, err *e)
{
	if (rc)
		err_prefix(e, "%s", f->name);
	return rc;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, err *e)
{ return named(f, get_i64(f, key, out, e), e); }
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, err *e)
{ return named(f, get_u32(f, key, false, out, e), e); }
int gguf_opt_u32(const gguf_file *f, const char *key, uint32_t *out, err *e)
{ return named(f, get_u32(f, key, true, out, e), e); }
int gguf_get_f32(const gguf_file *f, const char *key, float *out, err *e)
{ return named(f, get_f32(f, key, false, out, e), e); }
int gguf_opt_f32(const gguf_file *f, const char *key, float *out, err *e)
{ return named(f, get_f32(f, key, true, out, e), e); }
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, err *e)
{ return named(f, get_bool(f, key, false, out, e), e); }
int gguf_opt_bool(const gguf_file *f, const char *key, bool *out, err *e)
{ return named(f, get_bool(f, key, true, out, e), e); }
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, err *e)
{ return named(f, get_str(f, key, false, out, e), e); }
int gguf_opt_str(const gguf_file *f, const char *key, gguf_str *out, err *e)
{ return named(f, get_str(f, key, true, out, e), e); }
int gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out, err *e)
{ return named(f, get_arr(f, key, out, e), e); }

gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i)
{
	assert(a->type == GGUF_STR && i < a->n);
	const uint8_t *p = a->data + a->str_off[i];
	return (gguf_str){.p = (const char *)p + 8, .len = load_le(p, 8)};
}

float gguf_arr_f32(const gguf_arr *a, uint64_t i)
{
	assert(i < a->n && (a->type == GGUF_F32 || a->type == GGUF_F64));
	return a->type == GGUF_F32 ? load_f32(a->data + 4 * i) : (float)load_f64(a->data + 8 * i);
}

int64_t gguf_arr_int(const gguf_arr *a, uint64_t i)
{
	assert(i < a->n && (is_int_type(a->type) || a->type == GGUF_BOOL));
	size_t sz = vtype_size[a->type];
	bool big;
	return int_value(a->type, a->data + sz * i, &big);
}

/* ---- identity ---- */

int gguf_file_id(const char *path, int64_t *size, uint64_t *header, err *e)
{
	FILE *fp = fopen(path, "rb");
	struct stat st;
	if (!fp || fstat(fileno(fp), &st)) {
		err_set(e, "%s: cannot open: %s", path, strerror(errno));
		if (fp)
			fclose(fp);
		return -1;
	}
	uint8_t *buf = xmalloc(GGUF_ID_BYTES);
	size_t n = fread(buf, 1, GGUF_ID_BYTES, fp);
	fclose(fp);
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ buf[i]) * 1099511628211ull;
	free(buf);
	*size = (int64_t)st.st_size;
	*header = h ^ (uint64_t)st.st_size;
	return 0;
}
