/* models/gguf.h: read-only access to a GGUF (v2/v3) model file.
 *
 * The format, little-endian throughout:
 *   1. magic "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count;
 *   2. metadata: per entry a string key (u64 length + bytes, no NUL), a u32
 *      value type and the value; arrays are u32 element type + u64 count + items;
 *   3. tensor infos: name string, u32 n_dims (1..4), u64 ne[n_dims] (ne[0] is the
 *      row length, the fastest axis), u32 ggml type, u64 offset into the data;
 *   4. padding to general.alignment (default 32), then the data section; each
 *      tensor's offset is relative to it and a multiple of the alignment.
 * gguf_open() maps the file once and validates everything before returning:
 * every length, count and offset is checked against the file size, so a
 * tensor's data pointer is always inside the map. Metadata strings and arrays
 * are views into the map too (not NUL-terminated: use the lengths).
 * Counts and lengths also have fixed upper bounds (GGUF_MAX_*, far above any
 * real model's), so whatever a file claims, opening it allocates no more than
 * a small multiple of its size and never more than the bounds allow.
 * Only regular files are opened (a FIFO or a device is refused at once,
 * base/files.h). A file cut short while mapped would make reading its
 * weights raise SIGBUS: the mapping is registered with base/files.h, so
 * the process then ends with a line naming the file.
 * A gguf_file is immutable after open: any thread may read it concurrently. */
#ifndef PAGECHAT_GGUF_H
#define PAGECHAT_GGUF_H

#include "base/base.h"
#include "kernels/dtype.h"

/* Upper bounds on what a file may declare; past them gguf_open fails with the
 * field and the limit named. Real models have tens of metadata entries, a few
 * thousand tensors, vocabularies below 2^18 strings and templates of kilobytes. */
#define GGUF_MAX_KV          (1 << 16)           /* metadata entries */
#define GGUF_MAX_TENSORS     (1 << 18)           /* tensor infos */
#define GGUF_MAX_STR_BYTES   ((uint64_t)1 << 26) /* one metadata string (64 MiB) */
#define GGUF_MAX_ARR_ITEMS   ((uint64_t)1 << 30) /* items of one numeric array */
#define GGUF_MAX_STR_ITEMS   ((uint64_t)1 << 24) /* items of one string array */

enum gguf_vtype {
	GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
	GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9,
	GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12, GGUF_VTYPE_COUNT
};

typedef struct gguf_file gguf_file;

typedef struct gguf_str {
	const char *p;          /* borrowed from the map; not NUL-terminated */
	uint64_t len;           /* bytes */
} gguf_str;

typedef struct gguf_arr {
	enum gguf_vtype type;   /* element type (never GGUF_ARR: nested arrays are refused) */
	uint64_t n;             /* element count */
	const uint8_t *data;    /* numeric/bool: n packed little-endian items, maybe unaligned */
	const uint64_t *str_off;/* GGUF_STR only: offset of item i's length field from data
	                           (owned by the gguf_file) */
} gguf_arr;

typedef struct gguf_tensor {
	const char *name;       /* NUL-terminated copy, owned by the gguf_file */
	enum dtype type;
	int n_dims;             /* 1..4 */
	int64_t ne[4];          /* shape, ne[0] fastest; unused dims are 1 */
	int64_t n_elems;
	int64_t n_bytes;
	uint64_t offset;        /* from the start of the data section */
	const void *data;       /* borrowed view into the map */
} gguf_tensor;

/* Maps and validates path. Returns NULL with e naming the file and problem
 * (bad magic, version, truncation, absurd counts, bad tensor type, misaligned,
 * out-of-bounds or overlapping tensor data). Close with gguf_close(). */
gguf_file *gguf_open(const char *path, err *e);
/* The same over a caller-owned buffer that must outlive the result (tests,
 * fuzzing); name is used in messages. */
gguf_file *gguf_open_mem(const void *buf, size_t n_bytes, const char *name, err *e);
void gguf_close(gguf_file *f);                      /* NULL is a no-op */

const char *gguf_name(const gguf_file *f);          /* path or name given to open */
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_file_bytes(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);

/* Metadata by index (0 .. gguf_n_kv-1) or key. */
int64_t gguf_n_kv(const gguf_file *f);
int64_t gguf_find_key(const gguf_file *f, const char *key);   /* index or -1 */
gguf_str gguf_kv_key(const gguf_file *f, int64_t i);
enum gguf_vtype gguf_kv_type(const gguf_file *f, int64_t i);
const char *gguf_vtype_name(enum gguf_vtype t);

/* Typed getters: 0 on success; -1 when the key is missing or holds another
 * type, with e naming the file, key and the types involved. Integer getters
 * accept any integer type whose value fits the destination. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, err *e);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, err *e);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, err *e);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out, err *e);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, err *e);
int gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out, err *e);
/* Optional variants: a missing key leaves *out untouched and returns 0; a key
 * of the wrong type is still an error (-1). */
int gguf_opt_u32(const gguf_file *f, const char *key, uint32_t *out, err *e);
int gguf_opt_f32(const gguf_file *f, const char *key, float *out, err *e);
int gguf_opt_bool(const gguf_file *f, const char *key, bool *out, err *e);
int gguf_opt_str(const gguf_file *f, const char *key, gguf_str *out, err *e);

/* Array element access; i must be < a->n and the type must match (asserted). */
gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i);
float    gguf_arr_f32(const gguf_arr *a, uint64_t i);
int64_t  gguf_arr_int(const gguf_arr *a, uint64_t i);   /* any integer or bool type */

/* Tensors by index or name. */
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

/* What the file was when opened (fstat of the descriptor it was mapped
 * from): caches of what its bytes hash to key on it. */
typedef struct gguf_ident {
	uint64_t dev, ino;
	int64_t size;            /* bytes */
	int64_t mtime_ns, ctime_ns; /* modification and status change times, ns since the epoch */
} gguf_ident;
/* false (and *id zeroed) for a file opened over memory (gguf_open_mem). */
bool gguf_identity(const gguf_file *f, gguf_ident *id);
/* The whole file as mapped (gguf_file_bytes of them): header, metadata,
 * tensor infos and data. */
const void *gguf_bytes(const gguf_file *f);

/* Size of the whole data section in bytes. */
uint64_t gguf_data_bytes(const gguf_file *f);

/* Bytes of the file's mapping that the kernel maps in 2 MiB pages now
 * (Linux /proc/self/smaps); -1 where that cannot be read or the file is not
 * mapped. */
int64_t gguf_huge_mapped_bytes(const gguf_file *f);

/* Bytes of the file's mapping resident in this process now (smaps' Rss); -1
 * as above. */
int64_t gguf_resident_bytes(const gguf_file *f);

/* Lets this process's pages of the mapped range [p, p + n) go (the whole
 * pages inside it): for tensors the kernels no longer read, as after the CPU
 * packed its own copy. The mapping stays valid: a later read pages the same
 * bytes back in from the file. Nothing for a file held in memory. */
void gguf_release(const gguf_file *f, const void *p, size_t n);

/* True when s equals the NUL-terminated c. */
bool gguf_str_eq(gguf_str s, const char *c);

/* A model file's identity without opening it as a model: its size and a
 * 64-bit fingerprint of its first GGUF_ID_BYTES bytes (the header, with the
 * metadata and vocabulary of most models). 0, or -1 with e naming the file. */
#define GGUF_ID_BYTES (1 << 20)
int gguf_file_id(const char *path, int64_t *size, uint64_t *header, err *e);

#endif
