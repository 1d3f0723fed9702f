/* kv/store.h: KV blocks on disk (the cache's tier 2).
 *
 * A directory of block files, content-addressed: DIR/<fingerprint>/<key>.kvb,
 * where key is the prefix cache's chained key of the block (equal keys mean
 * equal whole prefixes) and the fingerprint covers everything else that
 * changes a block's bytes (every byte of the model file, K/V row types,
 * block size; see kv_tier_fingerprint). A file holds a header (magic,
 * version, block size, fingerprint, key, payload size), the block's token ids
 * and its K/V bytes, and a checksum: SipHash-2-4 of all of it under the
 * store's secret (DIR/.key, 16 random bytes, mode 0600, made with the store).
 * Reading checks every field and the checksum: a missing, short, corrupt,
 * foreign or mismatched file, or one signed with another secret (planted, or
 * copied from another store), is a miss (and is removed when the directory
 * is writable), never wrong bytes.
 * Trust: DIR and its folders must belong to this user and be writable by
 * nobody else (kv_store_check_dir); a store another account owns or may
 * write to is refused with the reason, since whoever can write there could
 * hand this process their blocks.
 * Files are written to a temporary name created exclusively in the same
 * directory, then renamed, so a reader (or a second process) sees a whole
 * file or none; temporaries left by a killed writer are removed later. The
 * whole directory (every fingerprint's folder) is kept under the size limit
 * by removing the least recently used files (a lock file, DIR/.lock,
 * serializes that between processes). A full disk or a read-only directory
 * turns writing off with one notice; reading goes on where it can. The store
 * keeps an index of its own folder's files by key (their names, read at open
 * and after the size limit removed some; its own writes, reads and checks),
 * so a lookup is answered from memory (kv_store_lists) and files are opened
 * only to be checked, read or written. Engine thread only. */
#ifndef PAGECHAT_KV_STORE_H
#define PAGECHAT_KV_STORE_H

#include "base/base.h"
#include "models/gguf.h"

typedef struct kv_store kv_store;

/* Whether path may hold a store (or be one of its folders): made (mode
 * 0700) when missing, then a directory owned by this user that neither its
 * group nor other users may write to. 0, or -1 with e naming the directory,
 * what is wrong (the owner, the mode) and the fix. */
int kv_store_check_dir(const char *path, err *e);

/* Opens (creating, mode 0700) dir and its subdirectory for fingerprint, and
 * the store's secret (made when missing). NULL with e when dir cannot be
 * used at all (not a directory, no access, another user's or writable by
 * others, a secret file that is not this user's private one). */
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

/* Removes from the store directory dir (every fingerprint's folder) each
 * block file whose tokens are a run of ids[0..n) at any offset: a deleted
 * conversation's blocks (pass its whole token history). Blocks only its
 * system prompt fills go too (others using that prompt compute them again).
 * A block mixing these ids with ids not given (turns the chat no longer
 * has ids for) stays. Returns the files removed (0 when dir does not
 * exist), or -1 with e when dir is not a store this user may trust. A
 * process with the store open finds the files gone when it reads them. */
int64_t kv_store_forget(const char *dir, const int32_t *ids, int64_t n, err *e);

typedef struct kv_store_stats {
	int64_t files_written, files_read, bad_files; /* since open */
	int64_t bytes_written, bytes_read;
	int64_t bytes_on_disk;   /* the whole directory (every fingerprint's folder), as last counted */
	int64_t opens;           /* open() and opendir() calls so far (files, the directory, its lock) */
	bool writable;
} kv_store_stats;
kv_store_stats kv_store_get_stats(const kv_store *s);
/* Why writing is off (one line, for the app or the UI to show once), or NULL. */
const char *kv_store_notice(const kv_store *s);

/* The hash of a model file's bytes (kv_tier_fingerprint) cached in the store's directory dir
 * (one kv_store_check_dir accepted) under the file's identity: its device,
 * inode, size, and modification and change times in nanoseconds. The change
 * time moves on every write and cannot be set back by the user (touch sets
 * only the others), so an edit that keeps size and mtime still misses.
 * get: whether an entry for exactly id is there (its hash to *hash); put:
 * records one (a failure to write is ignored: the next load hashes again). */
bool kv_store_weights_get(const char *dir, const gguf_ident *id, uint64_t *hash);
void kv_store_weights_put(const char *dir, const gguf_ident *id, uint64_t hash);

/* A 64-bit hash of n bytes continuing from h (not cryptographic: anyone can
 * make a file that matches it, so it only finds damage). */
uint64_t kv_hash_bytes(uint64_t h, const void *p, size_t n);

/* SipHash-2-4 under a 128-bit key, fed in pieces (init, add any number of
 * times, end once): the block files' checksum, keyed by the store's secret. */
typedef struct kv_sip {
	uint64_t v[4];
	uint8_t buf[8];          /* bytes of a word not yet complete */
	unsigned n_buf;
	uint64_t len;            /* bytes added */
} kv_sip;
void kv_sip_init(kv_sip *s, const uint8_t key[16]);
void kv_sip_add(kv_sip *s, const void *p, size_t n);
uint64_t kv_sip_end(kv_sip *s);

#endif
