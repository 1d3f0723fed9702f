/* tests/test_tier.c: the lower KV tiers. The disk store and the host tier on
 * their own (round trips, every kind of bad file, a read-only and a full
 * directory, a writer killed mid-write, two processes writing the same
 * blocks, the size limit), then the engine with tiers on stories260K: greedy
 * output identical with tiers off and on, with swap and recompute
 * preemption, in a tiny pool (invariants checked every step, no block left
 * in any tier), and a second engine over the same store that reads the
 * first one's blocks instead of computing them; scheduling with a hundred
 * requests waiting on blocks that are on disk opens no file. */
#include "engine/core.h"
#include "kv/store.h"
#include "kv/tier.h"
#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL "../shared/models/stories260K.gguf"
#define BT 16
#define BYTES 4096
#define DIR_ROOT "build/test-tier"

static void fill(uint8_t *b, int32_t *t, int seed)
{
	for (int i = 0; i < BYTES; i++)
		b[i] = (uint8_t)(i * 31 + seed * 7);
	for (int i = 0; i < BT; i++)
		t[i] = seed * 100 + i;
}

static void rm_rf(const char *path)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	if (system(cmd) != 0)
		fprintf(stderr, "rm -rf %s failed\n", path);
}

/* The one block file in store dir/<fp>/ for key. */
static void file_of(const char *dir, uint64_t fp, uint64_t key, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%016llx/%016llx.kvb", dir, (unsigned long long)fp, (unsigned long long)key);
}

static void test_store_round_trip(void)
{
	const char *dir = DIR_ROOT "/rt";
	rm_rf(dir);
	err e = {0};
	kv_store *s = kv_store_open(dir, 0xabc, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "%s", e.msg);
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT], u[BT];
	fill(b, t, 1);
	CHECK(!kv_store_has(s, 42, t));
	CHECK(kv_store_write(s, 42, t, b));
	CHECK(kv_store_has(s, 42, t));
	CHECK(kv_store_read(s, 42, t, got) && !memcmp(got, b, BYTES));
	memcpy(u, t, sizeof u);
	u[3]++;
	CHECK(!kv_store_read(s, 42, u, got));    /* other tokens under the key: a miss */
	kv_store_close(s);
	/* another process (a second open) finds it; another fingerprint does not */
	s = kv_store_open(dir, 0xabc, BT, BYTES, 0, &e);
	CHECK(s && kv_store_read(s, 42, t, got) && !memcmp(got, b, BYTES));
	kv_store_close(s);
	s = kv_store_open(dir, 0xabd, BT, BYTES, 0, &e);
	CHECK(s && !kv_store_has(s, 42, t));
	kv_store_close(s);
}

/* Writes one block with a fresh store, damages its file with f, and
 * checks that the block reads as a miss and the file goes. */
static void damaged(const char *what, void (*f)(const char *path))
{
	const char *dir = DIR_ROOT "/bad";
	rm_rf(dir);
	err e = {0};
	kv_store *s = kv_store_open(dir, 7, BT, BYTES, 0, &e);
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT];
	fill(b, t, 2);
	CHECK(s && kv_store_write(s, 9, t, b));
	kv_store_close(s);
	char path[512];
	file_of(dir, 7, 9, path, sizeof path);
	f(path);
	s = kv_store_open(dir, 7, BT, BYTES, 0, &e);
	bool miss = !kv_store_read(s, 9, t, got);
	CHECK_(miss && access(path, F_OK) != 0 && kv_store_get_stats(s).bad_files == 1,
	       "%s file: read as a hit or kept", what);
	kv_store_close(s);
}

static void truncate_it(const char *p) { CHECK(truncate(p, 100) == 0); }
static void flip_payload(const char *p)
{
	int fd = open(p, O_RDWR);
	uint8_t x;
	CHECK(fd >= 0 && pread(fd, &x, 1, 1000) == 1);
	x ^= 0x10;
	CHECK(pwrite(fd, &x, 1, 1000) == 1);
	close(fd);
}
static void flip_header(const char *p)
{
	int fd = open(p, O_RDWR);
	uint8_t x = 0x55;
	CHECK(fd >= 0 && pwrite(fd, &x, 1, 20) == 1); /* inside the fingerprint */
	close(fd);
}
static void grow_it(const char *p)
{
	int fd = open(p, O_WRONLY | O_APPEND);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1);
	close(fd);
}
static void fifo_it(const char *p)
{
	unlink(p);
	CHECK(mkfifo(p, 0600) == 0);
}

static void test_bad_files(void)
{
	damaged("truncated", truncate_it);
	damaged("bit-flipped", flip_payload);
	damaged("foreign-header", flip_header);
	damaged("over-long", grow_it);
	/* a FIFO in place of a file: a miss, no hang */
	const char *dir = DIR_ROOT "/bad";
	err e = {0};
	kv_store *s = kv_store_open(dir, 7, BT, BYTES, 0, &e);
	uint8_t got[BYTES];
	int32_t t[BT];
	fill(got, t, 2);
	char path[512];
	file_of(dir, 7, 9, path, sizeof path);
	fifo_it(path);
	CHECK(!kv_store_read(s, 9, t, got));
	kv_store_close(s);
	/* a directory everyone may write to is refused */
	rm_rf(DIR_ROOT "/open");
	CHECK(mkdir(DIR_ROOT "/open", 0777) == 0 && chmod(DIR_ROOT "/open", 0777) == 0);
	CHECK(kv_store_open(DIR_ROOT "/open", 1, BT, BYTES, 0, &e) == NULL && strstr(e.msg, "writable by its group and every user"));
	CHECK(kv_store_open("", 1, BT, BYTES, 0, &e) == NULL);
}

/* SipHash-2-4 against the paper's vectors (key 00..0f: the message 00..0e
 * gives a129ca6149be45e5, the empty one 726fdb47dd0e0e31), fed whole and in
 * pieces that split its words. */
static void test_siphash(void)
{
	uint8_t key[16], msg[15];
	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	memcpy(msg, key, sizeof msg);
	kv_sip s;
	kv_sip_init(&s, key);
	kv_sip_add(&s, msg, 15);
	CHECK(kv_sip_end(&s) == 0xa129ca6149be45e5ull);
	kv_sip_init(&s, key);
	kv_sip_add(&s, msg, 3);
	kv_sip_add(&s, msg + 3, 9);
	kv_sip_add(&s, msg + 12, 0);
	kv_sip_add(&s, msg + 12, 3);
	CHECK(kv_sip_end(&s) == 0xa129ca6149be45e5ull);
	kv_sip_init(&s, key);
	CHECK(kv_sip_end(&s) == 0x726fdb47dd0e0e31ull);
}

/* One line naming the directory and the cause. */
static bool refused(const char *dir, uint64_t fp, const char *why)
{
	err e = {0};
	kv_store *s = kv_store_open(dir, fp, BT, BYTES, 0, &e);
	kv_store_close(s);
	bool ok = !s && strstr(e.msg, why) && strstr(e.msg, dir) && !strchr(e.msg, '\n');
	CHECK_(ok, "%s: %s", dir, s ? "opened" : e.msg);
	return ok;
}

/* Trust (issue 42, finding 9): a store directory, or a fingerprint's folder
 * in it, that another account owns, or that its group or every user may
 * write to (a sticky shared one included), is refused with the reason. As
 * root another account is a chown away; otherwise "/" is root's. */
static void test_trust_dir(void)
{
	const char *dir = DIR_ROOT "/trust";
	rm_rf(dir);
	CHECK(mkdir(dir, 0700) == 0);
	CHECK(chmod(dir, 0770) == 0 && refused(dir, 1, "writable by its group (mode 0770)"));
	CHECK(chmod(dir, 0702) == 0 && refused(dir, 1, "writable by every user (mode 0702)"));
	CHECK(chmod(dir, 01777) == 0 && refused(dir, 1, "writable by its group and every user (mode 1777)"));
	CHECK(chmod(dir, 0700) == 0);
	char sub[256];
	snprintf(sub, sizeof sub, "%s/%016llx", dir, 2ull);
	CHECK(mkdir(sub, 0700) == 0 && chmod(sub, 0720) == 0 && refused(sub, 2, "writable by its group"));
	CHECK(chmod(sub, 0700) == 0);
	if (geteuid() == 0) {
		CHECK(chown(dir, 4242, 4242) == 0 && refused(dir, 1, "owned by uid 4242, not by this user (uid 0)"));
		CHECK(chown(dir, 0, 0) == 0);
		CHECK(chown(sub, 4242, 4242) == 0 && refused(sub, 2, "owned by uid 4242"));
		CHECK(chown(sub, 0, 0) == 0);
	} else {
		char me[64];
		snprintf(me, sizeof me, "not by this user (uid %u)", (unsigned)geteuid());
		refused("/", 1, me);
	}
	err e = {0};
	kv_store *s = kv_store_open(dir, 2, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "a private store: %s", e.msg);
	kv_store_close(s);
}

/* Writes a block file for key and tokens with payload b and the checksum
 * sum into dir's folder fp, as an account that can write there would. */
static void plant(const char *dir, uint64_t fp, uint64_t key, const int32_t *t, const uint8_t *b,
		  uint64_t sum, uint32_t version)
{
	struct {
		char magic[8];
		uint32_t version, block_tokens;
		uint64_t fingerprint, key, payload_bytes, checksum;
	} h = {"PCKVBLK1", version, BT, fp, key, BYTES, sum};
	char path[512];
	file_of(dir, fp, key, path, sizeof path);
	unlink(path);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(t, sizeof *t, BT, f) == BT &&
	      fwrite(b, 1, BYTES, f) == BYTES);
	if (f)
		fclose(f);
}

/* Block checksums are keyed by the store's own secret (DIR/.key, 0600): a
 * block re-signed with an unkeyed hash (the old checksum, which anyone
 * could compute) or signed by another store is a miss and is removed; a
 * secret other users may read is refused. */
static void test_planted(void)
{
	const char *dir = DIR_ROOT "/plant", *other = DIR_ROOT "/plant2";
	rm_rf(dir);
	rm_rf(other);
	err e = {0};
	kv_store *s = kv_store_open(dir, 3, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "%s", e.msg);
	if (!s)
		return;
	uint8_t b[BYTES], evil[BYTES], got[BYTES];
	int32_t t[BT];
	fill(b, t, 5);
	CHECK(kv_store_write(s, 9, t, b));
	kv_store_close(s);
	struct stat sb;
	CHECK(stat(DIR_ROOT "/plant/.key", &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 07777) == 0600 &&
	      sb.st_size == 16 && sb.st_uid == geteuid());
	memset(evil, 0x42, sizeof evil);
	uint64_t unkeyed = kv_hash_bytes(kv_hash_bytes(0, t, sizeof t), evil, BYTES);
	for (uint32_t v = 1; v <= 2; v++) {
		plant(dir, 3, 9, t, evil, unkeyed, v);
		s = kv_store_open(dir, 3, BT, BYTES, 0, &e);
		CHECK_(s && !kv_store_read(s, 9, t, got), "a block re-signed with an unkeyed hash (version %u) was read",
		       (unsigned)v);
		CHECK(s && !kv_store_lists(s, 9) && kv_store_get_stats(s).bad_files == 1);
		kv_store_close(s);
	}
	/* a block another store signed, copied in */
	kv_store *o = kv_store_open(other, 3, BT, BYTES, 0, &e);
	CHECK(o && kv_store_write(o, 9, t, evil));
	kv_store_close(o);
	char from[512], to[512];
	file_of(other, 3, 9, from, sizeof from);
	file_of(dir, 3, 9, to, sizeof to);
	CHECK(rename(from, to) == 0);
	s = kv_store_open(dir, 3, BT, BYTES, 0, &e);
	CHECK_(s && !kv_store_read(s, 9, t, got), "a block signed by another store was read");
	CHECK(s && kv_store_write(s, 9, t, b) && kv_store_read(s, 9, t, got) && !memcmp(got, b, BYTES));
	kv_store_close(s);
	/* the secret must stay private */
	CHECK(chmod(DIR_ROOT "/plant/.key", 0644) == 0);
	CHECK(refused(dir, 3, "the checksums' secret is open to other users (mode 0644): chmod 600 it"));
	CHECK(chmod(DIR_ROOT "/plant/.key", 0600) == 0);
}

/* A read-only store (a read-only mount as root, else a mode without write):
 * blocks are read, writing is off with a notice, nothing fails. */
static void test_read_only(void)
{
	const char *dir = DIR_ROOT "/ro";
	rm_rf(dir);
	err e = {0};
	kv_store *s = kv_store_open(dir, 5, BT, BYTES, 0, &e);
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT];
	fill(b, t, 3);
	CHECK(s && kv_store_write(s, 1, t, b));
	kv_store_close(s);
	bool mounted = geteuid() == 0 && mount(dir, dir, NULL, MS_BIND, NULL) == 0 &&
		       mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0;
	char sub[256];
	snprintf(sub, sizeof sub, "%s/%016llx", dir, 5ull);
	if (!mounted)
		CHECK(chmod(sub, 0500) == 0);
	s = kv_store_open(dir, 5, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "%s", e.msg);
	fill(b, t, 4);
	CHECK(s && kv_store_read(s, 1, (fill(got, t, 3), t), got));
	fill(b, t, 4);
	CHECK(s && !kv_store_write(s, 2, t, b) && kv_store_notice(s) && strstr(kv_store_notice(s), "read-only"));
	kv_store_close(s);
	if (mounted)
		CHECK(umount(dir) == 0);
	chmod(sub, 0700);
}

/* A link planted where a block file goes (kv_store writes through
 * base/files): the link's target is never written, and whatever is at
 * the path afterwards is a regular block file or nothing. */
static void test_planted_link(void)
{
	const char *dir = DIR_ROOT "/link";
	rm_rf(dir);
	err e = {0};
	kv_store *s = kv_store_open(dir, 9, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "%s", e.msg);
	FILE *v = fopen(DIR_ROOT "/victim", "w");
	CHECK(v && fputs("keep", v) >= 0 && fclose(v) == 0);
	char path[256], victim[256];
	snprintf(path, sizeof path, "%s/%016llx/%016llx.kvb", dir, 9ull, 7ull);
	CHECK(realpath(DIR_ROOT "/victim", victim) && symlink(victim, path) == 0);
	uint8_t b[BYTES];
	int32_t t[BT];
	fill(b, t, 7);
	kv_store_write(s, 7, t, b);
	char got[16] = "";
	v = fopen(DIR_ROOT "/victim", "r");
	CHECK(v && fgets(got, sizeof got, v) && !strcmp(got, "keep"));
	if (v)
		fclose(v);
	struct stat sb;
	CHECK(lstat(path, &sb) != 0 || S_ISREG(sb.st_mode) || !kv_store_get_stats(s).writable);
	kv_store_close(s);
}

/* A full disk: writes fail in the middle, writing turns off with one
 * notice, no partial file is left to read. (A file size limit stands in for
 * a full disk; as root a 64 KiB tmpfs is the real thing.) */
static void test_full(void)
{
	const char *dir = DIR_ROOT "/full";
	rm_rf(dir);
	CHECK(mkdir(dir, 0700) == 0);
	bool mounted = geteuid() == 0 && mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700") == 0;
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGXFSZ, SIG_IGN);
		struct rlimit r = {2000, 2000};
		if (!mounted)
			setrlimit(RLIMIT_FSIZE, &r);
		err e = {0};
		kv_store *s = kv_store_open(dir, 6, BT, BYTES, 0, &e);
		uint8_t b[BYTES];
		int32_t t[BT];
		int ok = 0;
		for (int i = 0; s && i < 40; i++) {
			fill(b, t, i);
			ok += kv_store_write(s, (uint64_t)i + 1, t, b);
		}
		bool off = s && !kv_store_get_stats(s).writable && strstr(kv_store_notice(s), "no longer saved");
		_exit(off && ok < 40 ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	CHECK_(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a full store did not turn writing off");
	/* whatever was written reads back whole */
	err e = {0};
	kv_store *s = kv_store_open(dir, 6, BT, BYTES, 0, &e);
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT];
	int whole = 0, bad = 0;
	for (int i = 0; s && i < 40; i++) {
		fill(b, t, i);
		if (kv_store_read(s, (uint64_t)i + 1, t, got))
			whole += !memcmp(got, b, BYTES), bad += !!memcmp(got, b, BYTES);
	}
	CHECK(bad == 0 && kv_store_get_stats(s).bad_files == 0);
	kv_store_close(s);
	if (mounted)
		CHECK(umount(dir) == 0);
	(void)whole;
}

/* Killed while writing, and two writers of the same blocks at once. */
static void test_processes(void)
{
	const char *dir = DIR_ROOT "/proc";
	rm_rf(dir);
	pid_t w[3];
	for (int k = 0; k < 3; k++)
		if ((w[k] = fork()) == 0) {
			err e = {0};
			kv_store *s = kv_store_open(dir, 8, BT, BYTES, 0, &e);
			uint8_t b[BYTES];
			int32_t t[BT];
			for (int round = 0; s && (k < 2 ? round < 50 : 1); round++)
				for (int i = 0; i < 20; i++) {
					fill(b, t, i);
					kv_store_write(s, (uint64_t)i + 1, t, b);
					kv_store_close(s);
					s = kv_store_open(dir, 8, BT, BYTES, 0, &e); /* forget what it wrote */
				}
			_exit(0);
		}
	usleep(100000);
	kill(w[2], SIGKILL);
	for (int k = 0; k < 3; k++)
		waitpid(w[k], NULL, 0);
	err e = {0};
	kv_store *s = kv_store_open(dir, 8, BT, BYTES, 0, &e);
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT];
	int whole = 0;
	for (int i = 0; s && i < 20; i++) {
		fill(b, t, i);
		whole += kv_store_read(s, (uint64_t)i + 1, t, got) && !memcmp(got, b, BYTES);
	}
	CHECK_EQ_INT(whole, 20);
	CHECK_EQ_INT(kv_store_get_stats(s).bad_files, 0);
	kv_store_close(s);
}

static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.' && strstr(de->d_name, ".kvb") != NULL;
	if (d)
		closedir(d);
	return n;
}

static void test_size_limit(void)
{
	const char *dir = DIR_ROOT "/lim";
	rm_rf(dir);
	err e = {0};
	int64_t file = (int64_t)(48 + BT * 4 + BYTES);
	kv_store *s = kv_store_open(dir, 3, BT, BYTES, 10 * file, &e);
	uint8_t b[BYTES];
	int32_t t[BT];
	for (int i = 0; i < 30; i++) {
		fill(b, t, i);
		CHECK(kv_store_write(s, (uint64_t)i + 1, t, b));
	}
	char sub[256];
	snprintf(sub, sizeof sub, "%s/%016llx", dir, 3ull);
	int n = count_files(sub);
	CHECK_(n >= 5 && n <= 10, "%d files under a limit of 10", n);
	int listed = 0;
	for (int i = 0; i < 30; i++)
		listed += kv_store_lists(s, (uint64_t)i + 1);
	CHECK_EQ_INT(listed, n);                 /* the index lists what is left */
	CHECK(kv_store_get_stats(s).bytes_on_disk <= 10 * file);
	fill(b, t, 29);
	CHECK(kv_store_has(s, 30, t));          /* the newest stays */
	kv_store_close(s);
}

/* The size limit covers the whole directory (issue 42, finding 11): two
 * models' folders under a limit of 10 files keep 10 at most between them,
 * the least recently used going first, whichever folder they are in. */
static void test_size_limit_dir(void)
{
	const char *dir = DIR_ROOT "/lim2";
	rm_rf(dir);
	err e = {0};
	int64_t file = (int64_t)(48 + BT * 4 + BYTES);
	uint8_t b[BYTES];
	int32_t t[BT];
	for (uint64_t fp = 1; fp <= 2; fp++) {
		kv_store *s = kv_store_open(dir, fp, BT, BYTES, 10 * file, &e);
		CHECK_(s != NULL, "%s", e.msg);
		for (int i = 0; s && i < 8; i++) {
			fill(b, t, i + (int)fp * 10);
			CHECK(kv_store_write(s, (uint64_t)i + 1, t, b));
		}
		if (s && fp == 2)
			CHECK(kv_store_get_stats(s).bytes_on_disk <= 10 * file);
		kv_store_close(s);
		if (fp == 1)
			sleep(1); /* file times are compared in seconds */
	}
	char sub1[256], sub2[256];
	snprintf(sub1, sizeof sub1, "%s/%016llx", dir, 1ull);
	snprintf(sub2, sizeof sub2, "%s/%016llx", dir, 2ull);
	int n1 = count_files(sub1), n2 = count_files(sub2);
	CHECK_(n1 + n2 <= 10 && n1 + n2 >= 5, "%d + %d files under a limit of 10 for the directory", n1, n2);
	CHECK_(n1 < 8 && n2 >= 1, "the older folder lost %d files, the newer kept %d", 8 - n1, n2);
}

/* A block file of bt tokens (ids) and zero bytes into store dir/fp. */
static void write_ids(const char *dir, uint64_t fp, int bt, uint64_t key, const int32_t *ids)
{
	err e = {0};
	kv_store *s = kv_store_open(dir, fp, bt, BYTES, 0, &e);
	static uint8_t zero[BYTES];
	CHECK_(s && kv_store_write(s, key, ids, zero), "%s", e.msg);
	kv_store_close(s);
}

/* Forgetting a conversation (issue 42, finding 10: /delete): every block
 * file, in any model's folder and of any block size, whose tokens are a run
 * of the conversation's ids at any offset is removed; one of other ids, or
 * mixing them with others, stays. */
static void test_forget(void)
{
	const char *dir = DIR_ROOT "/forget";
	rm_rf(dir);
	int32_t conv[100], other[16], mixed[16];
	for (int i = 0; i < 100; i++)
		conv[i] = 1000 + i * 7;
	for (int i = 0; i < 16; i++)
		other[i] = 5 + i, mixed[i] = i < 10 ? conv[90 + i] : other[i];
	write_ids(dir, 1, BT, 1, conv);           /* blocks of its prompts */
	write_ids(dir, 1, BT, 2, conv + 16);
	write_ids(dir, 1, BT, 3, conv + 5);       /* another alignment (after a shift) */
	write_ids(dir, 2, BT, 4, conv + 32);      /* another model's folder */
	write_ids(dir, 3, 8, 5, conv + 40);       /* another block size */
	write_ids(dir, 1, BT, 6, other);
	write_ids(dir, 1, BT, 7, mixed);
	char path[512];
	int left[] = {6, 7}, gone[] = {1, 2, 3};
	err e = {0};
	CHECK_EQ_INT(kv_store_forget(dir, conv, 100, &e), 5);
	for (int i = 0; i < 2; i++) {
		file_of(dir, 1, (uint64_t)left[i], path, sizeof path);
		CHECK_(access(path, F_OK) == 0, "block %d of other ids was removed", left[i]);
	}
	for (int i = 0; i < 3; i++) {
		file_of(dir, 1, (uint64_t)gone[i], path, sizeof path);
		CHECK_(access(path, F_OK) != 0, "block %d of the conversation's ids stayed", gone[i]);
	}
	CHECK_EQ_INT(kv_store_forget(dir, conv, 100, &e), 0);
	CHECK_EQ_INT(kv_store_forget(DIR_ROOT "/nosuch", conv, 100, &e), 0);
	CHECK(access(DIR_ROOT "/nosuch", F_OK) != 0);
	CHECK(chmod(dir, 0770) == 0);
	CHECK(kv_store_forget(dir, conv, 100, &e) == -1 && strstr(e.msg, "writable by its group"));
	CHECK(chmod(dir, 0700) == 0);
}

/* The store's index: a lookup (kv_store_lists) opens no file; it lists what
 * the directory held at open and what this process writes; a file found
 * bad or gone when read leaves it, one another process wrote joins it when
 * checked; every change moves the version. */
static void test_store_index(void)
{
	const char *dir = DIR_ROOT "/index";
	rm_rf(dir);
	err e = {0};
	kv_store *s = kv_store_open(dir, 4, BT, BYTES, 0, &e);
	CHECK_(s != NULL, "%s", e.msg);
	if (!s)
		return;
	uint8_t b[BYTES], got[BYTES];
	int32_t t[BT];
	fill(b, t, 1);
	uint64_t v = kv_store_version(s);
	CHECK(!kv_store_lists(s, 5));
	CHECK(kv_store_write(s, 5, t, b) && kv_store_lists(s, 5) && kv_store_version(s) != v);
	fill(b, t, 2);
	CHECK(kv_store_write(s, 6, t, b));
	kv_store_close(s);
	/* a second store over the directory lists both from their names */
	s = kv_store_open(dir, 4, BT, BYTES, 0, &e);
	int64_t opens = kv_store_get_stats(s).opens;
	CHECK(kv_store_lists(s, 5) && kv_store_lists(s, 6) && !kv_store_lists(s, 7));
	CHECK_EQ_INT(kv_store_get_stats(s).opens, opens);
	/* a file damaged since is listed until it is read, then it goes */
	char path[512];
	file_of(dir, 4, 6, path, sizeof path);
	truncate_it(path);
	v = kv_store_version(s);
	CHECK(!kv_store_read(s, 6, t, got));
	CHECK(!kv_store_lists(s, 6) && kv_store_version(s) != v);
	/* a file another process wrote since is found by a check */
	kv_store *other = kv_store_open(dir, 4, BT, BYTES, 0, &e);
	fill(b, t, 3);
	CHECK(other && kv_store_write(other, 7, t, b));
	kv_store_close(other);
	CHECK(!kv_store_lists(s, 7));
	v = kv_store_version(s);
	CHECK(kv_store_has(s, 7, t) && kv_store_lists(s, 7) && kv_store_version(s) != v);
	/* one removed from under it is a miss when read, and leaves the index */
	file_of(dir, 4, 5, path, sizeof path);
	CHECK(unlink(path) == 0);
	fill(b, t, 1);
	CHECK(kv_store_lists(s, 5) && !kv_store_read(s, 5, t, got) && !kv_store_lists(s, 5));
	kv_store_close(s);
}

static void test_host_tier(void)
{
	const char *dir = DIR_ROOT "/host";
	rm_rf(dir);
	err e = {0};
	kv_tier_params p = {.block_bytes = BYTES, .block_tokens = BT, .host_blocks = 4, .store_dir = dir,
			    .fingerprint = 11};
	kv_tier *t = kv_tier_new(&p, &e);
	CHECK_(t != NULL, "%s", e.msg);
	uint8_t b[BYTES], got[BYTES];
	int32_t tk[BT];
	for (int i = 0; i < 6; i++) {
		uint64_t v = kv_tier_version(t);
		fill(b, tk, i);
		kv_tier_demote(t, (uint64_t)i + 1, tk, b);
		CHECK_(kv_tier_version(t) != v, "demoting block %d left the version", i);
	}
	enum kv_tier_where from;
	uint64_t v = kv_tier_version(t);
	fill(b, tk, 5);
	CHECK(kv_tier_find(t, 6, tk) == TIER_HOST);
	fill(b, tk, 0);                          /* the oldest fell to the store */
	CHECK(kv_tier_find(t, 1, tk) == TIER_STORE);
	CHECK(kv_tier_load(t, 1, tk, got, &from) && from == TIER_STORE && !memcmp(got, b, BYTES));
	CHECK(kv_tier_version(t) == v);          /* finding and loading change no answer */
	/* swapped blocks stay until swapped back; a full tier refuses more */
	int32_t sw[4];
	for (int i = 0; i < 4; i++) {
		v = kv_tier_version(t);
		CHECK((sw[i] = kv_tier_swap_out(t, b)) >= 0);
		CHECK_(kv_tier_version(t) != v, "a swap-out that evicted a cached block left the version");
	}
	CHECK(kv_tier_swap_out(t, b) == -1);
	kv_tier_swap_in(t, sw[0], got);
	CHECK(!memcmp(got, b, BYTES));
	for (int i = 1; i < 4; i++)
		kv_tier_swap_drop(t, sw[i]);
	kv_tier_stats st = kv_tier_get_stats(t);
	CHECK_EQ_INT(st.host_swapped, 0);
	CHECK_EQ_INT(st.hits_store, 1);
	kv_tier_free(t);
	/* host memory alone: a cached block a swap-out pushes out is gone */
	p = (kv_tier_params){.block_bytes = BYTES, .block_tokens = BT, .host_blocks = 1};
	t = kv_tier_new(&p, &e);
	CHECK_(t != NULL, "%s", e.msg);
	fill(b, tk, 1);
	kv_tier_demote(t, 1, tk, b);
	v = kv_tier_version(t);
	CHECK(kv_tier_find(t, 1, tk) == TIER_HOST && (sw[0] = kv_tier_swap_out(t, b)) >= 0);
	CHECK(kv_tier_find(t, 1, tk) == TIER_MISS && kv_tier_version(t) != v);
	kv_tier_swap_drop(t, sw[0]);
	kv_tier_free(t);
}

/* ---- the engine with tiers ---- */

typedef struct out {
	int32_t ids[64][96];
	int n[64];
} out;

static out res;

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	if (ev->kind == CORE_EV_TOKEN && ev->req < 64 && res.n[ev->req] < 96)
		res.ids[ev->req][res.n[ev->req]++] = ev->token;
}

/* 48 requests with shared prefixes through a core; st gets its figures. */
static void run_requests(llama_model *m, const tok *tk, core_params p, out *o, core_stats *st)
{
	memset(&res, 0, sizeof res);
	p.model = m;
	p.tok = tk;
	p.check = true;
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c)
		return;
	int32_t prompt[200];
	for (int r = 0; r < 48; r++) {
		int n = 40 + (r % 5) * 30;
		prompt[0] = 1;
		for (int i = 1; i < n; i++)
			prompt[i] = 3 + (i * 13 + (i > 20 ? r % 4 : 0)) % 400;
		samp_params sp = samp_default_params();
		sp.temp = 0;
		core_request q = {.id = r, .conv = r, .prompt = prompt, .n_prompt = n, .samp = sp,
				  .max_tokens = 40, .n = 1};
		core_submit(c, &q, &e);
	}
	int rc = 0;
	while (!core_idle(c) && rc >= 0)
		rc = core_step(c, &e);
	CHECK_(rc >= 0, "step: %s", e.msg);
	core_get_stats(c, st);
	CHECK_EQ_INT(st->blocks_used, 0);
	CHECK_EQ_INT(st->host_swapped, 0);       /* no swapped block left behind */
	*o = res;
	core_free(c);
}

static void test_engine(void)
{
	err e = {0};
	llama_params lp = {.max_tokens = 512};
	llama_model *m = llama_open(MODEL, &lp, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	CHECK_(tk != NULL, "%s", e.msg);
	if (!tk)
		return;
	static out ref, got;
	core_stats st, st_ref;
	run_requests(m, tk, (core_params){.pool_blocks = 4096}, &ref, &st_ref);
	struct { const char *what; core_params p; } cases[] = {
		{"tiny pool, recompute", {.pool_blocks = 24, .preempt = PREEMPT_RECOMPUTE}},
		{"tiny pool, host tier, swap", {.pool_blocks = 24, .host_blocks = 64, .preempt = PREEMPT_SWAP}},
		{"tiny pool, host tier, auto", {.pool_blocks = 24, .host_blocks = 64}},
		{"tiny pool, host + store", {.pool_blocks = 24, .host_blocks = 16, .kv_store = DIR_ROOT "/eng"}},
	};
	rm_rf(DIR_ROOT "/eng");
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		run_requests(m, tk, cases[i].p, &got, &st);
		CHECK_(!memcmp(&ref, &got, sizeof ref), "%s: greedy output differs", cases[i].what);
		CHECK_(st.preemptions > 0, "%s: no preemption", cases[i].what);
		if (cases[i].p.host_blocks)
			CHECK_(st.demoted > 0 && st.cached_host + st.cached_store >= 0, "%s: nothing demoted",
			       cases[i].what);
		if (cases[i].p.preempt == PREEMPT_SWAP)
			CHECK_(st.swapped_out > 0 && st.swapped_in > 0, "%s: nothing swapped", cases[i].what);
	}
	/* a second engine over the same store: its prompts' full blocks are read */
	core_stats st2;
	run_requests(m, tk, (core_params){.pool_blocks = 4096, .kv_store = DIR_ROOT "/eng"}, &got, &st2);
	CHECK_(!memcmp(&ref, &got, sizeof ref), "store reuse: greedy output differs");
	CHECK_(st2.cached_store > 0 && st2.store_bad == 0, "store reuse: %lld tokens read from disk",
	       (long long)st2.cached_store);
	printf("engine with a store over a finished one: %lld of %lld prompt tokens cached (%lld read from "
	       "disk); without the store %lld\n", (long long)st2.cached_tokens, (long long)st2.prompt_tokens,
	       (long long)st2.cached_store, (long long)st_ref.cached_tokens);
	CHECK(st2.cached_tokens > st_ref.cached_tokens);
	tok_free(tk);
	llama_free(m);
}

/* ---- scheduling does no I/O ---- */

static int n_errors, n_finished;

static void count_finish(void *ctx, const core_event *ev)
{
	(void)ctx;
	if (ev->kind == CORE_EV_FINISH) {
		n_finished++;
		n_errors += ev->finish == FIN_ERROR;
	}
}

static void submit(core *c, int64_t id, const int32_t *prompt, int n, int max_tokens)
{
	samp_params sp = samp_default_params();
	sp.temp = 0;
	core_request q = {.id = id, .conv = (int)id, .prompt = prompt, .n_prompt = n, .samp = sp,
			  .max_tokens = max_tokens, .n = 1, .ignore_eos = true};
	err e = {0};
	CHECK_(core_submit(c, &q, &e) == 0, "submit %lld: %s", (long long)id, e.msg);
}

static core_stats stats_of(const core *c)
{
	core_stats st;
	core_get_stats(c, &st);
	return st;
}

/* A first engine leaves a prompt's 6 full blocks on disk. A second one over
 * the same store runs one long request that holds most of its 24-block pool
 * and has 100 requests waiting that each start with those 6 blocks and need
 * 8: every step describes 63 of them to the scheduler (lower-tier hits from
 * the store included) and admits none. Their files are checked at submit;
 * in the steps where the running request only decodes inside its last block
 * (nothing published, nothing allocated) no file is opened and no lookup is
 * made again. A lookup that asked the disk would open a file per request
 * and step. */
static void test_no_io_in_planning(void)
{
	err e = {0};
	llama_params lp = {.max_tokens = 512};
	llama_model *m = llama_open(MODEL, &lp, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (!m)
		return;
	const char *dir = DIR_ROOT "/plan";
	rm_rf(dir);
	int32_t shared[96 + 20], other[273];
	for (int i = 0; i < 116; i++)
		shared[i] = 3 + (i * 7) % 300;
	for (int i = 0; i < 273; i++)
		other[i] = 5 + (i * 11) % 400;
	core_params p = {.model = m, .pool_blocks = 256, .kv_store = dir, .check = true};
	core *a = core_new(&p, count_finish, NULL, &e);
	CHECK_(a != NULL, "%s", e.msg);
	submit(a, 0, shared, 97, 1);
	while (a && !core_idle(a))
		core_step(a, &e);
	CHECK(a && stats_of(a).store_written == 6);
	core_free(a);

	p.pool_blocks = 24;
	core *c = core_new(&p, count_finish, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	if (!c) {
		llama_free(m);
		return;
	}
	n_errors = n_finished = 0;
	int64_t opens0 = stats_of(c).store_opens;
	submit(c, 1000, other, 273, 40);
	for (int r = 0; r < 100; r++) {
		for (int i = 96; i < 116; i++)
			shared[i] = 3 + (r * 31 + i) % 400;
		submit(c, r, shared, 116, 4);
	}
	core_stats st = stats_of(c);
	CHECK_(st.store_opens - opens0 >= 100, "%lld opens at submit: the files were not checked",
	       (long long)(st.store_opens - opens0));
	printf("101 requests submitted over a store: %lld files opened to check them\n",
	       (long long)(st.store_opens - opens0));
	for (int step = 1; step <= 11; step++) {
		core_stats before = stats_of(c);
		CHECK_(core_step(c, &e) > 0, "step %d: %s", step, e.msg);
		st = stats_of(c);
		CHECK_EQ_INT(st.n_waiting, 100);
		if (step == 2)
			CHECK_EQ_INT(st.lookups - before.lookups, 63);
		if (step >= 2)
			CHECK_(st.store_opens == before.store_opens, "step %d with 100 waiting opened %lld files",
			       step, (long long)(st.store_opens - before.store_opens));
		if (step >= 3)
			CHECK_(st.lookups == before.lookups, "step %d looked up %lld waiting requests again", step,
			       (long long)(st.lookups - before.lookups));
	}
	/* the waiting ones still find the store's blocks once there is room */
	core_cancel(c, 1000);
	while (!core_idle(c))
		CHECK_(core_step(c, &e) >= 0, "%s", e.msg);
	st = stats_of(c);
	CHECK_EQ_INT(n_finished, 101);
	CHECK_EQ_INT(n_errors, 0);
	CHECK_(st.cached_store >= 96, "%lld tokens read from the store", (long long)st.cached_store);
	core_free(c);
	llama_free(m);
}

int main(void)
{
	mkdir("build", 0755);
	rm_rf(DIR_ROOT);
	CHECK(mkdir(DIR_ROOT, 0700) == 0);
	test_siphash();
	test_store_round_trip();
	test_bad_files();
	test_trust_dir();
	test_planted();
	test_read_only();
	test_full();
	test_planted_link();
	test_processes();
	test_size_limit();
	test_size_limit_dir();
	test_forget();
	test_store_index();
	test_host_tier();
	test_engine();
	test_no_io_in_planning();
	return TEST_DONE();
}
