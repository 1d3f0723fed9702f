/* models/gguf_write.h: writing GGUF v3 files (the layout models/gguf.h
 * describes).
 *
 * A gguf_writer collects metadata entries and tensor descriptions; then
 * gguf_writer_write() lays the file out (header, metadata, tensor infos,
 * padding to the alignment, data) and asks a caller callback for each
 * tensor's bytes in turn, so a large model never has to sit in memory whole.
 * The file is written through base/files.h: into an exclusive temporary
 * file beside PATH, renamed into place only when complete; a PATH that is not
 * a regular file (a link, a device) is refused.
 * Metadata keeps insertion order; setting a key that exists replaces its value
 * where it stands. The alignment is general.alignment when that key holds a
 * u32 power of two, else 32. A writer belongs to one thread. */
#ifndef PAGECHAT_GGUF_WRITE_H
#define PAGECHAT_GGUF_WRITE_H

#include "base/base.h"
#include "kernels/dtype.h"
#include "models/gguf.h"

typedef struct gguf_writer gguf_writer;
/* Where a tensor's bytes go during gguf_writer_write. */
typedef struct gguf_out gguf_out;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);                  /* NULL is a no-op */

/* Copies metadata entry i of f (any type, arrays included) byte for byte. */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f, int64_t i);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bools(gguf_writer *w, const char *key, const bool *v, size_t n); /* a bool array */
int64_t gguf_writer_n_kv(const gguf_writer *w);

/* Declares the next tensor: shape ne[0..n_dims) (ne[0] is the row length,
 * which must be a whole number of type t's blocks). Returns its index, or -1
 * with e filled (bad shape, unknown type, duplicate name). */
int64_t gguf_writer_add_tensor(gguf_writer *w, const char *name, enum dtype t, int n_dims,
			       const int64_t *ne, err *e);
/* Bytes tensor i takes in the file (without padding). */
int64_t gguf_writer_tensor_bytes(const gguf_writer *w, int64_t i);

/* Supplies tensor i's bytes: calls gguf_out_write until exactly
 * gguf_writer_tensor_bytes(w, i) bytes are given. Returns 0 or -1 with e. */
typedef int (*gguf_fill_fn)(void *ctx, int64_t i, gguf_out *out, err *e);
/* Appends n bytes to the tensor being written; -1 with e filled on a write
 * error or more bytes than the tensor holds. */
int gguf_out_write(gguf_out *out, const void *p, size_t n, err *e);

/* Writes the file. Returns 0, or -1 with e naming the path and the problem
 * (the partial temporary file is removed; PATH is untouched). */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, err *e);

#endif
