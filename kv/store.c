/* kv/store.c: KV blocks on disk (see kv_store.h).
 *
 * The store keeps an index of the block files in its directory, by key: a
 * file seen by name (at open, or after the size limit removed some) is
 * listed; one this process wrote, read or checked whole is verified. A
 * lookup (kv_store_lists) asks only the index, so the engine's scheduling
 * never touches the disk; kv_store_has checks the file itself (and learns
 * of files other processes wrote since), and kv_store_read checks
 * everything, so a listed file that turns out bad or gone is a miss then. */
#include "kv/store.h"

#include "base/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "PCKVBLK1"
#define VERSION 2u               /* 2: the checksum is keyed (SipHash-2-4 under the store's secret) */
#define STALE_TMP_S 600          /* a temporary this old belongs to a dead writer */
#define SECRET_FILE ".key"       /* DIR/.key: the store's secret, 0600, SECRET_BYTES bytes */
#define SECRET_BYTES 16

typedef struct file_hdr {
	char magic[8];
	uint32_t version, block_tokens;
	uint64_t fingerprint, key, payload_bytes, checksum;
} file_hdr;

struct kv_store {
	char *top;               /* owned; DIR */
	char *dir;               /* owned; DIR/<fingerprint> */
	uint8_t secret[SECRET_BYTES]; /* the checksums' key (DIR/.key) */
	bool keyed;              /* the secret is known: without it nothing is read */
	uint64_t fingerprint;
	int block_tokens;
	size_t block_bytes;
	int64_t max_bytes;
	int lock_fd;             /* the store's lock file (DIR/.lock), or -1 */
	bool writable;
	char notice[300];
	uint64_t *keys;          /* owned; [cap] open-addressing index by key (0: empty slot) */
	uint8_t *state;          /* owned; [cap] enum key_state of keys[i] */
	size_t cap, n_keys;      /* slots, slots used (a key once seen keeps its slot) */
	uint64_t version;        /* bumped whenever a key becomes listed or unlisted */
	kv_store_stats st;
};

enum key_state { KEY_GONE, KEY_LISTED, KEY_VERIFIED };

uint64_t kv_hash_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	h ^= 0x9e3779b97f4a7c15ull + n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h * 0x94d049bb133111ebull ^ (h >> 29);
}

/* ---- SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input
 * PRF", 2012): a keyed 64-bit function an attacker without the key cannot
 * forge, unlike kv_hash_bytes. Written from the paper, fed in pieces. ---- */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

/* 8 bytes as a little-endian word (the hosts pagechat runs on are
 * little-endian, as its GGUF reading assumes). */
static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void sip_rounds(kv_sip *s, int n)
{
	for (int i = 0; i < n; i++) {
		s->v[0] += s->v[1], s->v[1] = ROTL(s->v[1], 13), s->v[1] ^= s->v[0], s->v[0] = ROTL(s->v[0], 32);
		s->v[2] += s->v[3], s->v[3] = ROTL(s->v[3], 16), s->v[3] ^= s->v[2];
		s->v[0] += s->v[3], s->v[3] = ROTL(s->v[3], 21), s->v[3] ^= s->v[0];
		s->v[2] += s->v[1], s->v[1] = ROTL(s->v[1], 17), s->v[1] ^= s->v[2], s->v[2] = ROTL(s->v[2], 32);
	}
}

static void sip_word(kv_sip *s, uint64_t m)
{
	s->v[3] ^= m;
	sip_rounds(s, 2);
	s->v[0] ^= m;
}

void kv_sip_init(kv_sip *s, const uint8_t key[16])
{
	uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);
	*s = (kv_sip){.v = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
			   k1 ^ 0x7465646279746573ull}};
}

void kv_sip_add(kv_sip *s, const void *p, size_t n)
{
	const uint8_t *b = p;
	s->len += n;
	while (n && s->n_buf) { /* finish a word begun by an earlier piece */
		s->buf[s->n_buf++] = *b++, n--;
		if (s->n_buf == 8)
			sip_word(s, load_le64(s->buf)), s->n_buf = 0;
	}
	if (s->n_buf)
		return; /* all of p went into the word begun */
	for (; n >= 8; b += 8, n -= 8)
		sip_word(s, load_le64(b));
	memcpy(s->buf, b, n);
	s->n_buf = (unsigned)n;
}

uint64_t kv_sip_end(kv_sip *s)
{
	uint8_t last[8] = {0};
	memcpy(last, s->buf, s->n_buf);
	last[7] = (uint8_t)s->len;
	sip_word(s, load_le64(last));
	s->v[2] ^= 0xff;
	sip_rounds(s, 4);
	return s->v[0] ^ s->v[1] ^ s->v[2] ^ s->v[3];
}

/* ---- the index of keys on disk ---- */

static size_t key_slot(const kv_store *s, uint64_t key)
{
	size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull) & (s->cap - 1);
	while (s->keys[i] && s->keys[i] != key)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static enum key_state key_state(const kv_store *s, uint64_t key)
{
	size_t i = key_slot(s, key);
	return key && s->keys[i] == key ? (enum key_state)s->state[i] : KEY_GONE;
}

static void index_clear(kv_store *s, size_t cap)
{
	free(s->keys);
	free(s->state);
	s->cap = cap;
	s->n_keys = 0;
	s->keys = xcalloc(cap, sizeof *s->keys);
	s->state = xcalloc(cap, sizeof *s->state);
	s->version++;
}

/* Records key's state (key 0, which no block has, is never recorded). */
static void set_state(kv_store *s, uint64_t key, enum key_state st)
{
	if (!key || key_state(s, key) == st)
		return;
	if (s->keys[key_slot(s, key)] != key && 2 * (s->n_keys + 1) > s->cap) {
		uint64_t *keys = s->keys;
		uint8_t *state = s->state;
		size_t n = s->cap;
		s->keys = xcalloc(2 * n, sizeof *s->keys);
		s->state = xcalloc(2 * n, sizeof *s->state);
		s->cap = 2 * n;
		for (size_t i = 0; i < n; i++)
			if (keys[i]) {
				size_t j = key_slot(s, keys[i]);
				s->keys[j] = keys[i];
				s->state[j] = state[i];
			}
		free(keys);
		free(state);
	}
	size_t i = key_slot(s, key);
	s->n_keys += s->keys[i] != key;
	if ((s->keys[i] != key || s->state[i] == KEY_GONE) != (st == KEY_GONE))
		s->version++;    /* listed or not: a lookup's answer changes */
	s->keys[i] = key;
	s->state[i] = (uint8_t)st;
}

/* The key a block file's name gives ("<16 hex digits>.kvb"), or 0. */
static uint64_t key_of_name(const char *name)
{
	uint64_t key = 0;
	for (int i = 0; i < 16; i++) {
		char ch = name[i];
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		if (d < 0)
			return 0;
		key = key << 4 | (uint64_t)d;
	}
	return strcmp(name + 16, ".kvb") ? 0 : key;
}

/* ---- files ---- */

static void path_of(const kv_store *s, uint64_t key, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%016llx.kvb", s->dir, (unsigned long long)key);
}

static size_t file_bytes(const kv_store *s)
{
	return sizeof(file_hdr) + (size_t)s->block_tokens * sizeof(int32_t) + s->block_bytes;
}

/* A file's checksum: SipHash-2-4 under the store's secret over the header
 * (its checksum field zero), the tokens and the K/V bytes. Only a process
 * that can read DIR/.key makes one that matches, so a block planted by
 * another account, or copied from another store, is a miss. */
static uint64_t block_mac(const kv_store *s, const file_hdr *h, const int32_t *tokens, const void *bytes)
{
	file_hdr z = *h;
	z.checksum = 0;
	kv_sip sip;
	kv_sip_init(&sip, s->secret);
	kv_sip_add(&sip, &z, sizeof z);
	kv_sip_add(&sip, tokens, (size_t)s->block_tokens * sizeof *tokens);
	kv_sip_add(&sip, bytes, s->block_bytes);
	return kv_sip_end(&sip);
}

static void drop_bad(kv_store *s, uint64_t key);

/* Opens key's file for reading if it is a regular file of the right size
 * whose header and tokens match; -1 otherwise (a file there that is not a
 * whole block file of this store is removed). */
static int open_checked(kv_store *s, uint64_t key, const int32_t *tokens, file_hdr *h)
{
	char path[4096];
	if (!s->keyed)
		return -1; /* no secret (a read-only store without one): nothing can be checked */
	path_of(s, key, path, sizeof path);
	s->st.opens++;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			set_state(s, key, KEY_GONE);
		return -1;
	}
	struct stat sb;
	int32_t toks[256];
	size_t tb = (size_t)s->block_tokens * sizeof *toks;
	bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size == file_bytes(s) &&
		  s->block_tokens <= 256 && pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h &&
		  !memcmp(h->magic, MAGIC, 8) && h->version == VERSION &&
		  h->block_tokens == (uint32_t)s->block_tokens && h->fingerprint == s->fingerprint &&
		  h->key == key && h->payload_bytes == s->block_bytes &&
		  pread(fd, toks, tb, sizeof *h) == (ssize_t)tb;
	if (!ok || memcmp(toks, tokens, tb)) {
		close(fd);
		if (!ok) /* other tokens under the key are a collision, not a bad file */
			drop_bad(s, key);
		return -1;
	}
	return fd;
}

static void drop_bad(kv_store *s, uint64_t key)
{
	char path[4096];
	path_of(s, key, path, sizeof path);
	s->st.bad_files++;
	if (s->writable)
		unlink(path);
	set_state(s, key, KEY_GONE);
}

bool kv_store_lists(const kv_store *s, uint64_t key)
{
	return key_state(s, key) != KEY_GONE;
}

uint64_t kv_store_version(const kv_store *s)
{
	return s->version;
}

bool kv_store_has(kv_store *s, uint64_t key, const int32_t *tokens)
{
	if (key_state(s, key) == KEY_VERIFIED)
		return true;
	file_hdr h;
	int fd = open_checked(s, key, tokens, &h);
	if (fd < 0)
		return false;
	close(fd);
	set_state(s, key, KEY_VERIFIED);
	return true;
}

bool kv_store_read(kv_store *s, uint64_t key, const int32_t *tokens, void *dst)
{
	file_hdr h;
	int fd = open_checked(s, key, tokens, &h);
	if (fd < 0)
		return false;
	size_t off = sizeof h + (size_t)s->block_tokens * sizeof(int32_t);
	bool ok = pread(fd, dst, s->block_bytes, (off_t)off) == (ssize_t)s->block_bytes;
	ok = ok && block_mac(s, &h, tokens, dst) == h.checksum;
	if (ok)
		futimens(fd, NULL); /* recently used: the last to be evicted */
	close(fd);
	if (!ok) {
		drop_bad(s, key);
		return false;
	}
	s->st.files_read++;
	s->st.bytes_read += (int64_t)s->block_bytes;
	set_state(s, key, KEY_VERIFIED);
	return true;
}

/* ---- writing ---- */

/* Turns writing off with one notice: why (from base/files: it names the
 * file and the cause). */
static void writing_off(kv_store *s, const char *why)
{
	s->writable = false;
	snprintf(s->notice, sizeof s->notice, "KV store: %.250s; blocks are no longer saved to disk", why);
}

static void evict(kv_store *s);

bool kv_store_write(kv_store *s, uint64_t key, const int32_t *tokens, const void *bytes)
{
	if (kv_store_has(s, key, tokens))
		return true; /* written before, by this process or another */
	if (!s->writable)
		return false;
	/* through base/files: an exclusive temporary with an unpredictable
	 * name beside the target, never over anything but a regular file,
	 * fsync, then rename */
	char path[4096];
	path_of(s, key, path, sizeof path);
	size_t tb = (size_t)s->block_tokens * sizeof(int32_t);
	file_hdr h = {.version = VERSION, .block_tokens = (uint32_t)s->block_tokens,
		      .fingerprint = s->fingerprint, .key = key, .payload_bytes = s->block_bytes};
	memcpy(h.magic, MAGIC, 8);
	h.checksum = block_mac(s, &h, tokens, bytes);
	file_out f;
	err e = {0};
	s->st.opens++;
	if (file_out_open(&f, path, 0600, sizeof h + tb + s->block_bytes, &e) || file_out_write(&f, &h, sizeof h, &e) ||
	    file_out_write(&f, tokens, tb, &e) || file_out_write(&f, bytes, s->block_bytes, &e) ||
	    file_out_commit(&f, &e)) {
		file_out_abort(&f);
		writing_off(s, e.msg);
		return false;
	}
	set_state(s, key, KEY_VERIFIED);
	s->st.files_written++;
	s->st.bytes_written += (int64_t)file_bytes(s);
	s->st.bytes_on_disk += (int64_t)file_bytes(s);
	if (s->max_bytes > 0 && s->st.bytes_on_disk > s->max_bytes)
		evict(s);
	return true;
}

/* ---- the size limit: the whole directory ---- */

typedef struct entry {
	char name[40];           /* "<fingerprint>/<key>.kvb" */
	int64_t mtime, bytes;    /* bytes < 0: removed */
	bool mine;               /* in this store's own folder */
} entry;

static int by_age(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Whether name is a fingerprint's folder ("<16 hex digits>"). */
static bool is_fp_name(const char *name)
{
	for (int i = 0; i < 16; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return false;
	return name[16] == '\0';
}

typedef struct scan_list {
	entry *v;                /* owned */
	int n, cap;
	int64_t total;           /* bytes of the block files listed */
} scan_list;

/* The block files of folder DIR/fp into l (stale temporaries removed). */
static void scan_folder(kv_store *s, const char *fp, scan_list *l)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/%s", s->top, fp);
	s->st.opens++;
	DIR *d = opendir(dir);
	if (!d)
		return;
	bool mine = !strcmp(dir, s->dir);
	int64_t now = (int64_t)time(NULL);
	for (struct dirent *de; (de = readdir(d));) {
		struct stat sb;
		char path[4200];
		size_t len = strlen(de->d_name);
		if (len > 64)
			continue;
		snprintf(path, sizeof path, "%s/%.64s", dir, de->d_name);
		if (lstat(path, &sb) || !S_ISREG(sb.st_mode))
			continue;
		if (de->d_name[0] == '.' && len > 5 && strstr(de->d_name, ".kvb.")) {
			/* a temporary of base/files (".KEY.kvb.RANDOM") */
			if (s->writable && now - (int64_t)sb.st_mtime > STALE_TMP_S)
				unlink(path);
			continue;
		}
		if (!key_of_name(de->d_name))
			continue;
		xgrow(&l->v, &l->cap, (int64_t)l->n + 1, sizeof *l->v);
		entry *x = &l->v[l->n++];
		snprintf(x->name, sizeof x->name, "%.16s/%.20s", fp, de->d_name); /* key_of_name: 20 bytes */
		x->mtime = (int64_t)sb.st_mtime;
		x->bytes = (int64_t)sb.st_size;
		x->mine = mine;
		l->total += x->bytes;
	}
	closedir(d);
}

/* The block files of every fingerprint's folder in the store's directory:
 * the size limit is the directory's, whichever models wrote them. */
static scan_list scan(kv_store *s)
{
	scan_list l = {0};
	s->st.opens++;
	DIR *d = opendir(s->top);
	if (!d)
		return l;
	for (struct dirent *de; (de = readdir(d));) {
		struct stat sb;
		char path[4096];
		snprintf(path, sizeof path, "%s/%.20s", s->top, de->d_name);
		if (is_fp_name(de->d_name) && !lstat(path, &sb) && S_ISDIR(sb.st_mode))
			scan_folder(s, de->d_name, &l);
	}
	closedir(d);
	return l;
}

/* The index from a scan (entries with bytes < 0 were removed): every block
 * file of this store's folder listed, none verified. */
static void index_entries(kv_store *s, const scan_list *l)
{
	size_t cap = 1024;
	while (cap < 2 * (size_t)l->n)
		cap *= 2;
	index_clear(s, cap);
	for (int i = 0; i < l->n; i++)
		if (l->v[i].bytes >= 0 && l->v[i].mine)
			set_state(s, key_of_name(l->v[i].name + 17), KEY_LISTED);
}

/* Removes the least recently used files of the whole directory down to 80%
 * of the limit, once at a time across processes (a busy lock: another
 * process is at it). */
static void evict(kv_store *s)
{
	if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB))
		return;
	scan_list l = scan(s);
	qsort(l.v, (size_t)l.n, sizeof *l.v, by_age);
	for (int i = 0; i < l.n && l.total > s->max_bytes * 8 / 10; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", s->top, l.v[i].name);
		if (!unlink(path)) {
			l.total -= l.v[i].bytes;
			l.v[i].bytes = -1;
		}
	}
	/* what is left, as listed now (other processes may have written or
	 * removed files too); files are checked whole when read */
	index_entries(s, &l);
	free(l.v);
	s->st.bytes_on_disk = l.total;
	flock(s->lock_fd, LOCK_UN);
}

/* ---- trust: the directory and the secret ---- */

int kv_store_check_dir(const char *path, err *e)
{
	struct stat sb;
	if (mkdir(path, 0700) && errno != EEXIST) {
		err_set(e, "KV store %s: cannot create the directory (%s): pick another --kv-store", path,
			strerror(errno));
		return -1;
	}
	if (lstat(path, &sb) || !S_ISDIR(sb.st_mode)) {
		err_set(e, "KV store %s: not a directory: pick another --kv-store", path);
		return -1;
	}
	if (sb.st_uid != geteuid()) {
		err_set(e, "KV store %s: owned by uid %u, not by this user (uid %u): its blocks could come from "
			"another account; pick a directory of your own (--kv-store)", path, (unsigned)sb.st_uid,
			(unsigned)geteuid());
		return -1;
	}
	if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
		err_set(e, "KV store %s: writable by %s (mode %04o): chmod go-w it, or pick another --kv-store",
			path, (sb.st_mode & S_IWGRP) ? (sb.st_mode & S_IWOTH) ? "its group and every user" : "its group"
			: "every user", (unsigned)(sb.st_mode & 07777));
		return -1;
	}
	return 0;
}

/* The secret from an open DIR/.key: a regular file of this user's, private,
 * of SECRET_BYTES bytes. */
static int read_secret(kv_store *s, int fd, const char *path, err *e)
{
	struct stat sb = {0};
	const char *bad = NULL, *fix = "remove it (the store's blocks are then recomputed)";
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size != SECRET_BYTES)
		bad = "not a regular file of 16 bytes";
	else if (sb.st_uid != geteuid())
		bad = "owned by another user";
	else if (sb.st_mode & 077)
		bad = "open to other users", fix = "chmod 600 it, or remove it (the store's blocks are then recomputed)";
	else if (pread(fd, s->secret, SECRET_BYTES, 0) != SECRET_BYTES)
		bad = "unreadable";
	close(fd);
	if (bad) {
		err_set(e, "KV store %s: the checksums' secret is %s (mode %04o): %s", path, bad,
			(unsigned)(sb.st_mode & 07777), fix);
		return -1;
	}
	s->keyed = true;
	return 0;
}

/* A new secret at path (written beside it, then linked there, so a second
 * process making one at once never sees half of it): 0; 1 when another
 * process made one first; -1 with e. */
static int make_secret(kv_store *s, const char *path, err *e)
{
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
	uint8_t k[SECRET_BYTES];
	if (getrandom(k, sizeof k, 0) != (ssize_t)sizeof k) {
		err_set(e, "KV store %s: no random bytes for the checksums' secret (%s)", path, strerror(errno));
		return -1;
	}
	int fd = mkstemp(tmp); /* 0600, created exclusively */
	bool ok = fd >= 0 && write(fd, k, sizeof k) == (ssize_t)sizeof k && fsync(fd) == 0;
	if (fd >= 0)
		close(fd);
	int rc = ok ? link(tmp, path) : -1, why = errno;
	if (fd >= 0)
		unlink(tmp);
	if (rc == 0) {
		memcpy(s->secret, k, sizeof k);
		s->keyed = true;
		return 0;
	}
	if (ok && why == EEXIST)
		return 1;
	err_set(e, "KV store %s: cannot write the checksums' secret (%s): pick another --kv-store", path,
		strerror(why));
	return -1;
}

/* The store's secret (DIR/.key), made when the directory is writable and
 * has none; a read-only store without one is opened unkeyed (nothing in it
 * can be checked, so nothing is read). */
static int load_secret(kv_store *s, err *e)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/" SECRET_FILE, s->top);
	for (int tries = 0; tries < 3; tries++) {
		s->st.opens++;
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0)
			return read_secret(s, fd, path, e);
		if (errno != ENOENT) {
			err_set(e, "KV store %s: the checksums' secret cannot be opened (%s): remove it (the store's "
				"blocks are then recomputed)", path, errno == ELOOP ? "a symbolic link" : strerror(errno));
			return -1;
		}
		if (access(s->top, W_OK))
			return 0;
		int rc = make_secret(s, path, e);
		if (rc <= 0)
			return rc;
	}
	err_set(e, "KV store %s: the checksums' secret keeps changing: pick another --kv-store", path);
	return -1;
}

/* ---- the weights' hash of model files, by file identity ---- */

static void weights_path(const char *dir, const gguf_ident *id, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/.weights-%016llx", dir, (unsigned long long)mix64(id->dev ^ mix64(id->ino)));
}

bool kv_store_weights_get(const char *dir, const gguf_ident *id, uint64_t *hash)
{
	char path[4096];
	weights_path(dir, id, path, sizeof path);
	err e = {0};
	size_t len;
	char *t = file_read_all(path, 512, "a model's weights hash", &len, &e);
	if (!t)
		return false;
	unsigned long long dev, ino, h;
	long long size, mtime, ctime;
	bool ok = sscanf(t, "pagechat-weights 1 %llu %llu %lld %lld %lld %llx", &dev, &ino, &size, &mtime, &ctime,
			 &h) == 6 && dev == id->dev && ino == id->ino && size == id->size && mtime == id->mtime_ns &&
		  ctime == id->ctime_ns;
	free(t);
	if (ok)
		*hash = h;
	return ok;
}

void kv_store_weights_put(const char *dir, const gguf_ident *id, uint64_t hash)
{
	char path[4096], line[256];
	weights_path(dir, id, path, sizeof path);
	int n = snprintf(line, sizeof line, "pagechat-weights 1 %llu %llu %lld %lld %lld %016llx\n",
			 (unsigned long long)id->dev, (unsigned long long)id->ino, (long long)id->size,
			 (long long)id->mtime_ns, (long long)id->ctime_ns, (unsigned long long)hash);
	err e = {0};
	file_write_atomic(path, line, (size_t)n, 0600, &e); /* a cache: without it the next load hashes again */
}

/* ---- forgetting a conversation ---- */

/* The runs of bt ids in ids[0..n) (every offset), by hash: an open-
 * addressing table of their first positions. */
typedef struct run_set {
	uint64_t *hash;          /* owned; [cap] (0: empty) */
	int64_t *pos;            /* owned; [cap] */
	size_t cap;
	const int32_t *ids;      /* borrowed */
	int bt;
} run_set;

static uint64_t run_hash(const int32_t *ids, int bt)
{
	return kv_hash_bytes(0x0f0e, ids, (size_t)bt * sizeof *ids) | 1;
}

static void runs_build(run_set *r, const int32_t *ids, int64_t n, int bt)
{
	*r = (run_set){.ids = ids, .bt = bt};
	for (r->cap = 64; r->cap < 2 * (size_t)MAX(n, 1); r->cap *= 2)
		;
	r->hash = xcalloc(r->cap, sizeof *r->hash);
	r->pos = xcalloc(r->cap, sizeof *r->pos);
	for (int64_t i = 0; i + bt <= n; i++) {
		uint64_t h = run_hash(ids + i, bt);
		size_t j = (size_t)h & (r->cap - 1);
		while (r->hash[j] && r->hash[j] != h)
			j = (j + 1) & (r->cap - 1);
		if (!r->hash[j])
			r->hash[j] = h, r->pos[j] = i;
	}
}

static bool runs_has(const run_set *r, const int32_t *toks)
{
	uint64_t h = run_hash(toks, r->bt);
	for (size_t j = (size_t)h & (r->cap - 1); r->hash[j]; j = (j + 1) & (r->cap - 1))
		if (r->hash[j] == h)
			return !memcmp(r->ids + r->pos[j], toks, (size_t)r->bt * sizeof *toks);
	return false;
}

/* Whether the block file at path holds a run of r's ids (r rebuilt for the
 * file's block size when it differs). */
static bool holds_run(const char *path, run_set *r, int64_t n)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	file_hdr h;
	int32_t toks[256];
	bool ok = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && !memcmp(h.magic, MAGIC, 8) &&
		  h.block_tokens >= 1 && h.block_tokens <= 256 &&
		  pread(fd, toks, h.block_tokens * sizeof *toks, sizeof h) == (ssize_t)(h.block_tokens * sizeof *toks);
	close(fd);
	if (!ok || (int64_t)h.block_tokens > n)
		return false;
	if ((int)h.block_tokens != r->bt) {
		const int32_t *ids = r->ids;
		free(r->hash);
		free(r->pos);
		runs_build(r, ids, n, (int)h.block_tokens);
	}
	return runs_has(r, toks);
}

int64_t kv_store_forget(const char *dir, const int32_t *ids, int64_t n, err *e)
{
	struct stat sb;
	if (!dir || lstat(dir, &sb))
		return 0; /* no store there: nothing to forget */
	if (kv_store_check_dir(dir, e))
		return -1;
	/* scan() reads only these fields: every folder's files, none "mine" */
	kv_store s = {.top = (char *)dir, .dir = (char *)"", .writable = true};
	scan_list l = scan(&s);
	run_set r;
	runs_build(&r, ids, n, 16);
	int64_t removed = 0;
	for (int i = 0; i < l.n; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, l.v[i].name);
		if (holds_run(path, &r, n) && unlink(path) == 0)
			removed++;
	}
	free(r.hash);
	free(r.pos);
	free(l.v);
	return removed;
}

/* ---- life ---- */

kv_store *kv_store_open(const char *dir, uint64_t fingerprint, int block_tokens, size_t block_bytes,
			int64_t max_bytes, err *e)
{
	char sub[4096];
	if (!dir || !*dir || strlen(dir) > 3000) {
		err_set(e, "KV store: %s directory name: pick another --kv-store", dir && *dir ? "too long a" : "an empty");
		return NULL;
	}
	snprintf(sub, sizeof sub, "%s/%016llx", dir, (unsigned long long)fingerprint);
	if (kv_store_check_dir(dir, e) || kv_store_check_dir(sub, e))
		return NULL;
	kv_store *s = xcalloc(1, sizeof *s);
	s->top = xstrdup(dir);
	s->dir = xstrdup(sub);
	s->lock_fd = -1;
	s->fingerprint = fingerprint;
	s->block_tokens = block_tokens;
	s->block_bytes = block_bytes;
	s->max_bytes = max_bytes;
	if (load_secret(s, e)) {
		kv_store_close(s);
		return NULL;
	}
	s->writable = access(sub, W_OK) == 0 && s->keyed;
	if (!s->keyed)
		snprintf(s->notice, sizeof s->notice, "KV store %.200s is read-only and has no secret (.key): "
			 "its blocks cannot be checked, so none are read", dir);
	else if (!s->writable)
		snprintf(s->notice, sizeof s->notice, "KV store %.200s is read-only: blocks are read, not saved",
			 sub);
	char lock[sizeof sub + 8];
	snprintf(lock, sizeof lock, "%s/.lock", dir);
	s->st.opens++;
	s->lock_fd = open(lock, (s->writable ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0600);
	scan_list l = scan(s);
	index_entries(s, &l);
	s->st.bytes_on_disk = l.total;
	free(l.v);
	s->st.writable = s->writable;
	return s;
}

void kv_store_close(kv_store *s)
{
	if (!s)
		return;
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s->keys);
	free(s->state);
	free(s->top);
	free(s->dir);
	free(s);
}

kv_store_stats kv_store_get_stats(const kv_store *s)
{
	kv_store_stats st = s->st;
	st.writable = s->writable;
	return st;
}

const char *kv_store_notice(const kv_store *s)
{
	return s->notice[0] ? s->notice : NULL;
}
