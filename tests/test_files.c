/* tests/test_files.c: base/files.h, the one way files are written and
 * opened (issue #25, findings 1 and 4).
 *
 * Every writer (file_out, file_write_atomic, file_create_fresh,
 * file_open_append) is tried against what an attacker or a careless user
 * leaves at the target: a symbolic link (to a file that must stay intact), a
 * link planted at the old predictable temporary names, a device, a FIFO, a
 * directory, and a full disk (a tmpfs of 16 KiB, where mounting is allowed);
 * each is refused or fails with a message naming the file, leaves no
 * temporary file, and never blocks. The readers are tried against a FIFO, a
 * directory, a device and an empty name. A signal in the middle of a write
 * removes the temporary file. Run from the repository root. */
#include "base/files.h"
#include "models/gguf.h"
#include "tests/fulldisk.h"
#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIR_ "build/test-files"
#define FULL DIR_ "/full"

static bool has(const err *e, const char *word)
{
	return strstr(e->msg, word) != NULL;
}

static void put(const char *path, const char *text)
{
	FILE *fp = fopen(path, "wb");
	if (fp) {
		fputs(text, fp);
		fclose(fp);
	}
}

static bool holds(const char *path, const char *text)
{
	char buf[256] = "";
	FILE *fp = fopen(path, "rb");
	size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
	buf[n] = '\0';
	if (fp)
		fclose(fp);
	return fp && !strcmp(buf, text);
}

/* Entries of dir whose names start with '.' (other than . and ..): the
 * temporary files. */
static int temps_in(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	if (d)
		closedir(d);
	return n;
}

static void fresh_dir(void)
{
	if (system("rm -rf " DIR_ "/w && mkdir -p " DIR_ "/w") != 0)
		fprintf(stderr, "cannot reset " DIR_ "/w\n");
}

static void test_write_atomic(void)
{
	fresh_dir();
	err e = {0};
	CHECK_(file_write_atomic(DIR_ "/w/a.txt", "one", 3, FILE_MODE_PRIVATE, &e) == 0, "%s", e.msg);
	CHECK(holds(DIR_ "/w/a.txt", "one"));
	CHECK_(file_write_atomic(DIR_ "/w/a.txt", "two", 3, FILE_MODE_PRIVATE, &e) == 0, "%s", e.msg);
	CHECK(holds(DIR_ "/w/a.txt", "two"));
	struct stat st;
	CHECK(stat(DIR_ "/w/a.txt", &st) == 0 && (st.st_mode & 077) == 0);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
	/* an empty name, a missing directory */
	CHECK(file_write_atomic("", "x", 1, FILE_MODE_PRIVATE, &e) == -1 && has(&e, "empty"));
	CHECK(file_write_atomic(DIR_ "/w/no/such/b.txt", "x", 1, FILE_MODE_PRIVATE, &e) == -1 &&
	      has(&e, "b.txt") && has(&e, "No such file"));
}

/* A link at the target: refused, the link and what it points to untouched. */
static void test_symlink_target(void)
{
	fresh_dir();
	err e = {0};
	put(DIR_ "/w/victim", "precious");
	CHECK(symlink("victim", DIR_ "/w/out") == 0);
	CHECK(file_write_atomic(DIR_ "/w/out", "evil", 4, FILE_MODE_PRIVATE, &e) == -1 &&
	      has(&e, "out is a symbolic link") && has(&e, "refusing"));
	CHECK(holds(DIR_ "/w/victim", "precious"));
	char to[64] = "";
	CHECK(readlink(DIR_ "/w/out", to, sizeof to - 1) == 6 && !strcmp(to, "victim"));
	CHECK(file_create_fresh(DIR_ "/w/out", FILE_MODE_PRIVATE, false, &e) == -1 && has(&e, "symbolic link"));
	CHECK(file_open_append(DIR_ "/w/out", FILE_MODE_PRIVATE, &e) == -1 && has(&e, "symbolic link"));
	CHECK(holds(DIR_ "/w/victim", "precious"));
	/* a dangling link: nothing is created through it either */
	CHECK(symlink("nowhere", DIR_ "/w/dangling") == 0);
	CHECK(file_create_fresh(DIR_ "/w/dangling", FILE_MODE_PRIVATE, false, &e) == -1);
	CHECK(file_open_append(DIR_ "/w/dangling", FILE_MODE_PRIVATE, &e) == -1);
	CHECK(access(DIR_ "/w/nowhere", F_OK) != 0);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
}

/* Links planted at the names the old writers used (OUT.tmp, OUT.tmp.PID):
 * the temporary file's name cannot be guessed, so they are never touched. */
static void test_planted_temp(void)
{
	fresh_dir();
	err e = {0};
	put(DIR_ "/w/victim", "precious");
	char planted[128];
	CHECK(symlink("victim", DIR_ "/w/m.gguf.tmp") == 0);
	snprintf(planted, sizeof planted, DIR_ "/w/m.gguf.tmp.%ld", (long)getpid());
	CHECK(symlink("victim", planted) == 0);
	CHECK_(file_write_atomic(DIR_ "/w/m.gguf", "model", 5, FILE_MODE_SHARED, &e) == 0, "%s", e.msg);
	CHECK(holds(DIR_ "/w/m.gguf", "model"));
	CHECK(holds(DIR_ "/w/victim", "precious"));
	struct stat st;
	CHECK(lstat(DIR_ "/w/m.gguf.tmp", &st) == 0 && S_ISLNK(st.st_mode));
}

/* Devices, FIFOs, directories: refused by every writer, without blocking. */
static void test_special_targets(void)
{
	fresh_dir();
	err e = {0};
	/* as root the old quantize replaced /dev/null with a regular file */
	CHECK(file_write_atomic("/dev/null", "x", 1, FILE_MODE_SHARED, &e) == -1 && has(&e, "/dev/null is a device"));
	file_out f;
	CHECK(file_out_open(&f, "/dev/null", FILE_MODE_SHARED, 0, &e) == -1);
	CHECK(file_create_fresh("/dev/null", FILE_MODE_PRIVATE, false, &e) == -1 && has(&e, "device"));
	struct stat st;
	CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(mkfifo(DIR_ "/w/fifo", 0600) == 0);
	CHECK(file_write_atomic(DIR_ "/w/fifo", "x", 1, FILE_MODE_PRIVATE, &e) == -1 && has(&e, "a FIFO"));
	CHECK(file_create_fresh(DIR_ "/w/fifo", FILE_MODE_PRIVATE, false, &e) == -1 && has(&e, "a FIFO"));
	CHECK(file_open_append(DIR_ "/w/fifo", FILE_MODE_PRIVATE, &e) == -1);
	CHECK(mkdir(DIR_ "/w/dir", 0700) == 0);
	CHECK(file_write_atomic(DIR_ "/w/dir", "x", 1, FILE_MODE_PRIVATE, &e) == -1 && has(&e, "a directory"));
	CHECK(file_open_append(DIR_ "/w/dir", FILE_MODE_PRIVATE, &e) == -1);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
}

/* A full disk: the error says so and names the file; the old file stays
 * whole and no temporary file is left. */
static void test_full_disk(void)
{
	if (!full_disk_mount(FULL))
		return;
	err e = {0};
	put(FULL "/chat.json", "old");
	static char big[FULL_DISK_BYTES * 2];
	memset(big, 'x', sizeof big);
	CHECK(file_write_atomic(FULL "/chat.json", big, sizeof big, FILE_MODE_PRIVATE, &e) == -1 &&
	      has(&e, FULL "/chat.json") && has(&e, "No space left"));
	CHECK(holds(FULL "/chat.json", "old"));
	CHECK_EQ_INT(temps_in(FULL), 0);
	/* streamed in pieces */
	file_out f;
	CHECK(file_out_open(&f, FULL "/model.gguf", FILE_MODE_SHARED, 4096, &e) == 0);
	int rc = 0;
	for (int i = 0; i < 64 && rc == 0; i++)
		rc = file_out_write(&f, big, 1000, &e);
	CHECK(rc == -1 && has(&e, "No space left"));
	file_out_abort(&f);     /* already abandoned: a no-op */
	CHECK(access(FULL "/model.gguf", F_OK) != 0);
	CHECK_EQ_INT(temps_in(FULL), 0);
	full_disk_umount(FULL);
}

static void test_out_abort(void)
{
	fresh_dir();
	err e = {0};
	file_out f;
	CHECK(file_out_open(&f, DIR_ "/w/x", FILE_MODE_PRIVATE, 16, &e) == 0);
	CHECK(file_out_printf(&f, &e, "%s %d", "hello", 42) == 0 && f.written == 8);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0); /* unnamed while it is written (O_TMPFILE) */
	file_out_abort(&f);
	file_out_abort(&f);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
	CHECK(access(DIR_ "/w/x", F_OK) != 0);
	/* a long text through the buffer */
	CHECK(file_out_open(&f, DIR_ "/w/y", FILE_MODE_PRIVATE, 16, &e) == 0);
	CHECK(file_out_printf(&f, &e, "%0600d", 7) == 0 && file_out_commit(&f, &e) == 0);
	struct stat st;
	CHECK(stat(DIR_ "/w/y", &st) == 0 && st.st_size == 600);
	CHECK(file_out_commit(&f, &e) == -1);
}

static void test_fresh_and_append(void)
{
	fresh_dir();
	err e = {0};
	put(DIR_ "/w/log", "old text");
	int fd = file_create_fresh(DIR_ "/w/log", FILE_MODE_PRIVATE, true, &e);
	CHECK_(fd >= 0, "%s", e.msg);
	if (fd >= 0) {
		CHECK(write(fd, "new", 3) == 3);
		close(fd);
	}
	CHECK(holds(DIR_ "/w/log", "new"));
	fd = file_open_append(DIR_ "/w/log", FILE_MODE_PRIVATE, &e);
	CHECK_(fd >= 0, "%s", e.msg);
	if (fd >= 0) {
		CHECK(write(fd, "+", 1) == 1);
		close(fd);
	}
	CHECK(holds(DIR_ "/w/log", "new+"));
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
}

/* Readers: regular files only, and nothing blocks. */
static void test_readers(void)
{
	fresh_dir();
	err e = {0};
	CHECK(mkfifo(DIR_ "/w/fifo", 0600) == 0);
	double t0 = now_s();
	CHECK(file_open_read(DIR_ "/w/fifo", NULL, &e) == -1 && has(&e, "fifo is a FIFO, not a regular file"));
	CHECK(file_fopen_read(DIR_ "/w/fifo", &e) == NULL);
	size_t n;
	CHECK(file_read_all(DIR_ "/w/fifo", 100, NULL, &n, &e) == NULL);
	CHECK(now_s() - t0 < 5);
	CHECK(file_open_read(DIR_ "/w", NULL, &e) == -1 && has(&e, "a directory"));
	CHECK(file_read_all("/dev/zero", 1 << 20, "prompt", &n, &e) == NULL && has(&e, "/dev/zero is a device"));
	CHECK(file_open_read("", NULL, &e) == -1 && has(&e, "empty"));
	CHECK(file_open_read(DIR_ "/w/none", NULL, &e) == -1 && has(&e, "none: cannot open"));
	put(DIR_ "/w/text", "0123456789");
	char *s = file_read_all(DIR_ "/w/text", 10, "text", &n, &e);
	CHECK(s && n == 10 && !strcmp(s, "0123456789"));
	free(s);
	CHECK(file_read_all(DIR_ "/w/text", 9, "prompt", &n, &e) == NULL && has(&e, "at most 9 bytes") &&
	      has(&e, "prompt"));
	int64_t size = -1;
	int fd = file_open_read(DIR_ "/w/text", &size, &e);
	CHECK(fd >= 0 && size == 10 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
	if (fd >= 0)
		close(fd);
}

static void test_private_dir(void)
{
	fresh_dir();
	err e = {0};
	CHECK_(file_private_dir(DIR_ "/w/a/b/pagechat", &e) == 0, "%s", e.msg);
	struct stat st;
	CHECK(stat(DIR_ "/w/a/b/pagechat", &st) == 0 && (st.st_mode & 0777) == 0700);
	CHECK(file_private_dir(DIR_ "/w/a/b/pagechat", &e) == 0);
	CHECK(mkdir(DIR_ "/w/open", 0700) == 0 && chmod(DIR_ "/w/open", 0777) == 0);
	CHECK(file_private_dir(DIR_ "/w/open", &e) == -1 && has(&e, "writable by every user") &&
	      has(&e, "chmod 700"));
	put(DIR_ "/w/file", "x");
	CHECK(file_private_dir(DIR_ "/w/file", &e) == -1 && has(&e, "not a directory"));
	CHECK(file_private_dir("", &e) == -1);
}

/* SIGTERM (and SIGINT) in the middle of a write: the temporary goes, and the
 * process still ends by the signal. */
static void test_signal_cleanup(int sig)
{
	fresh_dir();
	int pfd[2];
	if (pipe(pfd))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		/* as in a process started from a terminal: a shell's background job
		 * (sh -c '... &') starts with SIGINT ignored, and ignored signals stay
		 * ignored (as under nohup), so the kill below would never end it */
		signal(sig, SIG_DFL);
		file_cleanup_on_signals();
		file_cleanup_on_signals();
		file_out f;
		err e = {0};
		if (file_out_open(&f, DIR_ "/w/big", FILE_MODE_SHARED, 0, &e) || file_out_write(&f, "x", 1, &e))
			_exit(3);
		if (write(pfd[1], "r", 1) != 1)
			_exit(4);
		for (;;)
			pause();
	}
	char c;
	CHECK(read(pfd[0], &c, 1) == 1);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0); /* unnamed while it is written */
	kill(pid, sig);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == sig);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
	close(pfd[0]);
	close(pfd[1]);
}

/* Killed in the middle of a write by a signal no handler sees (SIGKILL, as
 * an OOM kill or kill -9 of quantize; #42.11): no file is left behind, the
 * target holds what it held. The file system must have O_TMPFILE (ext4,
 * xfs, btrfs, tmpfs; overlayfs from Linux 6.6). */
static void test_kill9_leaves_nothing(void)
{
	fresh_dir();
	put(DIR_ "/w/m.gguf", "old");
	int pfd[2];
	if (pipe(pfd))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		file_out f;
		err e = {0};
		static char block[1 << 16];
		if (file_out_open(&f, DIR_ "/w/m.gguf", FILE_MODE_SHARED, 0, &e))
			_exit(3);
		for (int i = 0; i < 64; i++) /* 4 MiB through the buffer: most of it on disk */
			if (file_out_write(&f, block, sizeof block, &e))
				_exit(3);
		if (write(pfd[1], "r", 1) != 1)
			_exit(4);
		for (;;)
			pause();
	}
	char c;
	CHECK(read(pfd[0], &c, 1) == 1);
	kill(pid, SIGKILL);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK_EQ_INT(temps_in(DIR_ "/w"), 0);
	CHECK(holds(DIR_ "/w/m.gguf", "old"));
	close(pfd[0]);
	close(pfd[1]);
}

/* A signal the process was started with ignored (SIGHUP under nohup) stays
 * ignored: the cleanup handler goes only where the default was. */
static void test_signal_ignored_stays(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGHUP, SIG_IGN);
		signal(SIGTERM, SIG_DFL);
		file_cleanup_on_signals();
		struct sigaction hup, term;
		sigaction(SIGHUP, NULL, &hup);
		sigaction(SIGTERM, NULL, &term);
		_exit(hup.sa_handler == SIG_IGN && term.sa_handler != SIG_IGN && term.sa_handler != SIG_DFL ? 0 : 1);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	CHECK_(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
}

/* A model file cut short while mapped: reading past the new end raises
 * SIGBUS, and the process ends with a line naming the file (issue #25). */
static void test_sigbus(void)
{
	fresh_dir();
	if (system("cp ../shared/models/stories260K.gguf " DIR_ "/w/m.gguf") != 0)
		return;
	int pfd[2];
	if (pipe(pfd))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 2);
		err e = {0};
		gguf_file *f = gguf_open(DIR_ "/w/m.gguf", &e);
		if (!f)
			_exit(3);
		const gguf_tensor *t = gguf_tensor_at(f, gguf_n_tensors(f) - 1);
		if (truncate(DIR_ "/w/m.gguf", 4096))
			_exit(4);
		volatile uint8_t sum = 0;
		for (int64_t i = 0; i < t->n_bytes; i++)
			sum += ((const uint8_t *)t->data)[i];
		_exit(5 + sum % 2);  /* not reached: the read faults */
	}
	close(pfd[1]);
	char msg[1024] = "";
	size_t n = 0;
	for (ssize_t got; n < sizeof msg - 1 && (got = read(pfd[0], msg + n, sizeof msg - 1 - n)) > 0;)
		n += (size_t)got;
	msg[n] = '\0';
	int st = 0;
	waitpid(pid, &st, 0);
	close(pfd[0]);
	CHECK_(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %d", st);
	CHECK_(strstr(msg, "pagechat: fatal: " DIR_ "/w/m.gguf: the file shrank") != NULL, "stderr: %s", msg);
}

int main(void)
{
	if (system("mkdir -p " DIR_) != 0)
		return 1;
	test_write_atomic();
	test_symlink_target();
	test_planted_temp();
	test_special_targets();
	test_full_disk();
	test_out_abort();
	test_fresh_and_append();
	test_readers();
	test_private_dir();
	test_signal_cleanup(SIGTERM);
	test_signal_cleanup(SIGINT);
	test_signal_ignored_stays();
	test_kill9_leaves_nothing();
	test_sigbus();
	return TEST_DONE();
}
