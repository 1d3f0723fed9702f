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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "PCKVBLK1"
#define VERSION 1u
#define STALE_TMP_S 600          /* a temporary this old belongs to a dead writer */

typedef struct file_hdr {
	char magic[8];
	uint32_t version, block_tokens;
	uint64_t fingerprint, key, payload_bytes, checksum;
} file_hdr;

struct kv_store {
	char *dir;               /* owned; DIR/<fingerprint> */
	uint64_t fingerprint;
	int block_tokens;
	size_t block_bytes;
	int64_t max_bytes;
	int lock_fd;             /* the directory's lock file, or -1 */
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

static void drop_bad(kv_store *s, uint64_t key);

/* Opens key's file for reading if it is a regular file of the right size
 * whose header and tokens match; -1 otherwise (a file there that is not a
 * whole block file of this store is removed). */
static int open_checked(kv_store *s, uint64_t key, const int32_t *tokens, file_hdr *h)
{
	char path[4096];
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
	uint64_t sum = kv_hash_bytes(kv_hash_bytes(0, tokens, (size_t)s->block_tokens * sizeof(int32_t)),
				     dst, s->block_bytes);
	ok = ok && sum == h.checksum;
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
	h.checksum = kv_hash_bytes(kv_hash_bytes(0, tokens, tb), bytes, s->block_bytes);
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

/* ---- the size limit ---- */

typedef struct entry {
	char name[64];
	int64_t mtime, bytes;
} entry;

static int by_age(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* The directory's block files (and stale temporaries removed). */
static entry *scan(kv_store *s, int *n, int64_t *total)
{
	s->st.opens++;
	DIR *d = opendir(s->dir);
	entry *v = NULL;
	int cap = 0;
	*n = 0;
	*total = 0;
	if (!d)
		return NULL;
	int64_t now = (int64_t)time(NULL);
	for (struct dirent *de; (de = readdir(d));) {
		struct stat sb;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", s->dir, de->d_name);
		if (strlen(de->d_name) >= sizeof v->name || lstat(path, &sb) || !S_ISREG(sb.st_mode))
			continue;
		size_t len = strlen(de->d_name);
		if (de->d_name[0] == '.' && len > 5 && strstr(de->d_name, ".kvb.")) {
			/* a temporary of base/files (".KEY.kvb.RANDOM") */
			if (s->writable && now - (int64_t)sb.st_mtime > STALE_TMP_S)
				unlink(path);
			continue;
		}
		if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".kvb"))
			continue;
		xgrow(&v, &cap, (int64_t)*n + 1, sizeof *v);
		snprintf(v[*n].name, sizeof v->name, "%s", de->d_name);
		v[*n].mtime = (int64_t)sb.st_mtime;
		v[*n].bytes = (int64_t)sb.st_size;
		*total += v[(*n)++].bytes;
	}
	closedir(d);
	return v;
}

/* The index from a scan's n entries (those with bytes < 0 were removed):
 * every block file listed, none verified. */
static void index_entries(kv_store *s, const entry *v, int n)
{
	size_t cap = 1024;
	while (cap < 2 * (size_t)n)
		cap *= 2;
	index_clear(s, cap);
	for (int i = 0; i < n; i++)
		if (v[i].bytes >= 0)
			set_state(s, key_of_name(v[i].name), KEY_LISTED);
}

/* Removes the least recently used files down to 80% of the limit, once at
 * a time across processes (a busy lock: another process is at it). */
static void evict(kv_store *s)
{
	if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB))
		return;
	int n;
	int64_t total;
	entry *v = scan(s, &n, &total);
	qsort(v, (size_t)n, sizeof *v, by_age);
	for (int i = 0; i < n && total > s->max_bytes * 8 / 10; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", s->dir, v[i].name);
		if (!unlink(path)) {
			total -= v[i].bytes;
			v[i].bytes = -1;
		}
	}
	/* what is left, as listed now (other processes may have written or
	 * removed files too); files are checked whole when read */
	index_entries(s, v, n);
	free(v);
	s->st.bytes_on_disk = total;
	flock(s->lock_fd, LOCK_UN);
}

/* ---- life ---- */

static int make_dir(const char *path, err *e)
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
	if ((sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX)) {
		err_set(e, "KV store %s: the directory is writable by everyone: chmod o-w it or pick another",
			path);
		return -1;
	}
	return 0;
}

kv_store *kv_store_open(const char *dir, uint64_t fingerprint, int block_tokens, size_t block_bytes,
			int64_t max_bytes, err *e)
{
	char sub[4096];
	if (!dir || !*dir || strlen(dir) > 3000) {
		err_set(e, "KV store: %s directory name: pick another --kv-store", dir && *dir ? "too long a" : "an empty");
		return NULL;
	}
	snprintf(sub, sizeof sub, "%s/%016llx", dir, (unsigned long long)fingerprint);
	if (make_dir(dir, e) || make_dir(sub, e))
		return NULL;
	kv_store *s = xcalloc(1, sizeof *s);
	s->dir = xstrdup(sub);
	s->fingerprint = fingerprint;
	s->block_tokens = block_tokens;
	s->block_bytes = block_bytes;
	s->max_bytes = max_bytes;
	s->writable = access(sub, W_OK) == 0;
	if (!s->writable)
		snprintf(s->notice, sizeof s->notice, "KV store %.200s is read-only: blocks are read, not saved",
			 sub);
	char lock[sizeof sub + 8];
	snprintf(lock, sizeof lock, "%s/.lock", sub);
	s->st.opens++;
	s->lock_fd = open(lock, (s->writable ? O_RDWR | O_CREAT : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC, 0600);
	int n;
	entry *v = scan(s, &n, &s->st.bytes_on_disk);
	index_entries(s, v, n);
	free(v);
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
