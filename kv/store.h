/* kv/store.h: KV blocks on disk (the cache's tier 2).
 *
 * A directory of block files, content-addressed: DIR/<fingerprint>/<key>.kvb,
 * where key is the prefix cache's chained key of the block (equal keys mean
 * equal whole prefixes) and the fingerprint covers everything else that
 * changes a block's bytes (the model file's identity, K/V row types, block
 * size; see kv_tier_fingerprint). A file holds a header (magic, version,
 * block size, fingerprint, key, payload size), the block's token ids and
 * its K/V bytes, and a 64-bit checksum of tokens and bytes. Reading checks
 * every field and the checksum: a missing, short, corrupt, foreign or
 * mismatched file is a miss (and is removed when the directory is
 * writable), never wrong bytes. Files are written to a temporary name
 * created exclusively in the same directory, then renamed, so a reader (or
 * a second process) sees a whole file or none; temporaries left by a killed
 * writer are removed later. The directory is kept under a size limit by
 * removing the least recently used files (a lock file serializes that
 * between processes). A full disk or a read-only directory turns writing
 * off with one notice; reading goes on where it can. The store keeps an index
 * of the files by key (their names, read at open and after the size limit
 * removed some; its own writes, reads and checks), so a lookup is answered
 * from memory (kv_store_lists) and files are opened only to be checked,
 * read or written. Engine thread only. */
#ifndef PAGECHAT_KV_STORE_H
#define PAGECHAT_KV_STORE_H

#include "base/base.h"

typedef struct kv_store kv_store;

/* Opens (creating, mode 0700) dir and its subdirectory for fingerprint.
 * NULL with e when dir cannot be used at all (not a directory, no access). */
kv_store *kv_store_open(const char *dir, uint64_t fingerprint, int block_tokens, size_t block_bytes,
			int64_t max_bytes, err *e);
void kv_store_close(kv_store *s);                          /* NULL is a no-op */

/* Whether the index lists a file for key (one seen in the directory or
 * written, read or checked by this process, not found bad or gone since).
 * Memory only: the file is checked when it is read. */
bool kv_store_lists(const kv_store *s, uint64_t key);
/* Changes whenever kv_store_lists may answer differently for some key. */
uint64_t kv_store_version(const kv_store *s);
/* Whether a whole, matching file for key with these tokens is there: one
 * this process wrote, read or checked is taken on trust, any other is
 * opened and its header and tokens checked (not the checksum), which updates
 * the index (a bad file is removed, one another process wrote is listed). */
bool kv_store_has(kv_store *s, uint64_t key, const int32_t *tokens);
/* Reads the block under key into dst[block_bytes], checking everything
 * (checksum included); false on any mismatch (the file is removed). */
bool kv_store_read(kv_store *s, uint64_t key, const int32_t *tokens, void *dst);
/* Writes the block (a no-op when this process already wrote or found it).
 * False when writing is off or failed (then it is off: see kv_store_notice). */
bool kv_store_write(kv_store *s, uint64_t key, const int32_t *tokens, const void *bytes);

typedef struct kv_store_stats {
	int64_t files_written, files_read, bad_files; /* since open */
	int64_t bytes_written, bytes_read;
	int64_t bytes_on_disk;   /* this fingerprint's directory, as last counted */
	int64_t opens;           /* open() and opendir() calls so far (files, the directory, its lock) */
	bool writable;
} kv_store_stats;
kv_store_stats kv_store_get_stats(const kv_store *s);
/* Why writing is off (one line, for the app or the UI to show once), or NULL. */
const char *kv_store_notice(const kv_store *s);

/* A 64-bit hash of n bytes continuing from h (not cryptographic). */
uint64_t kv_hash_bytes(uint64_t h, const void *p, size_t n);

#endif
