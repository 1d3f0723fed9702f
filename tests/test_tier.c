/* tests/test_tier.c: the lower KV tiers. The disk store and the host tier on
 * their own (round trips, every kind of bad file, a read-only and a full
 * directory, a writer killed mid-write, two processes writing the same
 * blocks, the size limit), then the engine with tiers on stories260K: greedy
 * output identical with tiers off and on, with swap and recompute
 * preemption, in a tiny pool (invariants checked every step, no block left
 * in any tier), and a second engine over the same store that reads the
 * first one's blocks instead of computing them. */
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
	CHECK(kv_store_open(DIR_ROOT "/open", 1, BT, BYTES, 0, &e) == NULL && strstr(e.msg, "writable by everyone"));
	CHECK(kv_store_open("", 1, BT, BYTES, 0, &e) == NULL);
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
	CHECK(kv_store_get_stats(s).bytes_on_disk <= 10 * file);
	fill(b, t, 29);
	CHECK(kv_store_has(s, 30, t));          /* the newest stays */
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
		fill(b, tk, i);
		kv_tier_demote(t, (uint64_t)i + 1, tk, b);
	}
	enum kv_tier_where from;
	fill(b, tk, 5);
	CHECK(kv_tier_find(t, 6, tk) == TIER_HOST);
	fill(b, tk, 0);                          /* the oldest fell to the store */
	CHECK(kv_tier_find(t, 1, tk) == TIER_STORE);
	CHECK(kv_tier_load(t, 1, tk, got, &from) && from == TIER_STORE && !memcmp(got, b, BYTES));
	/* swapped blocks stay until swapped back; a full tier refuses more */
	int32_t sw[4];
	for (int i = 0; i < 4; i++)
		CHECK((sw[i] = kv_tier_swap_out(t, b)) >= 0);
	CHECK(kv_tier_swap_out(t, b) == -1);
	kv_tier_swap_in(t, sw[0], got);
	CHECK(!memcmp(got, b, BYTES));
	for (int i = 1; i < 4; i++)
		kv_tier_swap_drop(t, sw[i]);
	kv_tier_stats st = kv_tier_get_stats(t);
	CHECK_EQ_INT(st.host_swapped, 0);
	CHECK_EQ_INT(st.hits_store, 1);
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

int main(void)
{
	mkdir("build", 0755);
	rm_rf(DIR_ROOT);
	CHECK(mkdir(DIR_ROOT, 0700) == 0);
	test_store_round_trip();
	test_bad_files();
	test_read_only();
	test_full();
	test_planted_link();
	test_processes();
	test_size_limit();
	test_host_tier();
	test_engine();
	return TEST_DONE();
}
