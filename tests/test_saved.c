/* tests/test_saved.c: saved chats that must never be lost or written over
 * (issue #25, findings 1 and 4), through a pseudo-terminal (tests/pty.h):
 * - --resume with the chat file truncated, replaced by a FIFO, or missing:
 *   no hang; a read-only tab says why; typing is refused; /raw shows the
 *   file; after /quit the file is byte for byte what it was and the session
 *   still names it;
 * - a session naming one file twice: it opens once, nothing is lost;
 * - a plain run: the earlier session's chats are listed by /open and open
 *   again by name;
 * - /save asks before replacing a file, refuses a link;
 * - a link planted at stderr.log: its target is not touched;
 * - a data directory every user may write in: refused at start.
 * Every check polls the screen with a timeout; nothing sleeps. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/test-saved"
#define DATA DIR "/data/pagechat"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 30.0

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"kv_cache: {block_size: 16, pool_blocks: 64}\n"
	"sampling: {temperature: 0, max_tokens: 8, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50, panels: false}\n";

static pty_app app;
static char chat_file[128];       /* the chat the first run saved */
static char chat_bytes[1 << 16];  /* its contents then */

/* s on the screen, where it may be wrapped over rows (the rows joined by
 * spaces). */
static bool shows_wrapped(const char *screen, const void *s)
{
	static char flat[sizeof app.screen];
	size_t n = strlen(screen);
	memcpy(flat, screen, n + 1);
	for (size_t i = 0; i < n; i++)
		if (flat[i] == '\n')
			flat[i] = ' ';
	return strstr(flat, s) != NULL;
}

static bool start(const char *args)
{
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app);
	return pty_start(&app, DIR, args, 30, 120) && pty_wait_str(&app, "1:", WAIT);
}

static int quit(void)
{
	pty_send(&app, "\025/quit\r"); /* Ctrl-U: a refused line stays in the input */
	return pty_wait_exit(&app, WAIT);
}

static void read_session(char *buf, size_t cap)
{
	slurp(DATA "/session.json", buf, cap);
}

/* The first chat file the session names, into chat_file. */
static bool find_chat_file(void)
{
	char s[4096];
	read_session(s, sizeof s);
	const char *p = strstr(s, "\"chat-");
	size_t n = p ? strcspn(p + 1, "\"") : 0;
	if (!p || n >= sizeof chat_file)
		return false;
	snprintf(chat_file, sizeof chat_file, "%.*s", (int)n, p + 1);
	return true;
}

static void chat_path(char *buf, size_t cap)
{
	snprintf(buf, cap, DATA "/%s", chat_file);
}

static bool chat_unchanged(void)
{
	char path[256];
	static char now[sizeof chat_bytes];
	chat_path(path, sizeof path);
	slurp(path, now, sizeof now);
	return !strcmp(now, chat_bytes);
}

static bool session_names_chat(void)
{
	char s[4096];
	read_session(s, sizeof s);
	return strstr(s, chat_file) != NULL;
}

/* A first run: one answer, saved. */
static void test_first_run(void)
{
	CHECK(start(ARGS));
	pty_send(&app, "Lily went to the park\r");
	CHECK_(pty_wait_str(&app, "tok, length", WAIT), "no answer:\n%s", app.screen);
	CHECK_EQ_INT(quit(), 0);
	CHECK(find_chat_file());
	char path[256];
	chat_path(path, sizeof path);
	slurp(path, chat_bytes, sizeof chat_bytes);
	CHECK(strstr(chat_bytes, "Lily went to the park") != NULL);
}

/* What is at path: a regular file's text, or its kind (the test itself
 * must not block on a FIFO). */
static void state_of(const char *path, char *buf, size_t cap)
{
	struct stat st;
	if (lstat(path, &st))
		snprintf(buf, cap, "(missing)");
	else if (!S_ISREG(st.st_mode))
		snprintf(buf, cap, "(mode %o)", (unsigned)st.st_mode);
	else
		slurp(path, buf, cap);
}

/* --resume over a damaged chat: shown read-only, kept in the session and on
 * disk exactly as it was. setup damages it; why is what the tab must say. */
static void resume_damaged(const char *setup, const char *why, bool raw)
{
	char cmd[1024], path[256];
	chat_path(path, sizeof path);
	snprintf(cmd, sizeof cmd, "cp %s " DIR "/keep.json && %s", path, setup);
	CHECK(system(cmd) == 0);
	static char before[sizeof chat_bytes];
	state_of(path, before, sizeof before);
	CHECK(start(ARGS " --resume"));
	CHECK_(pty_wait_str(&app, "could not be loaded", WAIT) && pty_wait(&app, shows_wrapped, why, WAIT),
	       "'%s':\n%s", setup, app.screen);
	pty_send(&app, "more text\r");
	CHECK_(pty_wait_str(&app, "read-only", WAIT), "typing in a damaged tab:\n%s", app.screen);
	if (raw) {
		pty_send(&app, "\025/raw\r");
		CHECK_(pty_wait_str(&app, "as it is (read-only)", WAIT), "/raw:\n%s", app.screen);
	}
	CHECK_EQ_INT(quit(), 0);
	CHECK_(session_names_chat(), "the session dropped %s", chat_file);
	static char after[sizeof chat_bytes];
	state_of(path, after, sizeof after);
	CHECK_(!strcmp(before, after), "the damaged file changed");
	snprintf(cmd, sizeof cmd, "rm -f %s && cp " DIR "/keep.json %s", path, path);
	CHECK(system(cmd) == 0);
}

static void test_damaged(void)
{
	char path[256], cmd[600];
	chat_path(path, sizeof path);
	snprintf(cmd, sizeof cmd, "truncate -s 40 %s", path);
	resume_damaged(cmd, "unterminated string", true);
	snprintf(cmd, sizeof cmd, "rm %s && mkfifo %s", path, path);
	resume_damaged(cmd, "FIFO, not a regular file", false);
	snprintf(cmd, sizeof cmd, "rm %s", path);
	resume_damaged(cmd, "No such file", false);
	CHECK(chat_unchanged());
}

/* A session naming the file twice: one tab, the chat whole. */
static void test_named_twice(void)
{
	char s[512];
	snprintf(s, sizeof s, "{\"format\": \"pagechat-session 1\", \"active\": 1, \"tabs\": [\"%s\", \"%s\"]}\n",
		 chat_file, chat_file);
	CHECK(write_file(DATA "/session.json", s, strlen(s)) == 0);
	CHECK(start(ARGS " --resume"));
	CHECK_(pty_wait_str(&app, "names", WAIT) && pty_wait_str(&app, "Lily went to the park", WAIT),
	       "%s", app.screen);
	CHECK(!strstr(app.screen, "2:"));
	CHECK_EQ_INT(quit(), 0);
	CHECK(chat_unchanged());
}

/* A plain run: the earlier chat stays reachable through /open. */
static void test_plain_run(void)
{
	CHECK(start(ARGS));
	CHECK_(pty_wait_str(&app, "/open lists them", WAIT), "no note of the last session:\n%s", app.screen);
	pty_send(&app, "/open\r");
	CHECK_(pty_wait_str(&app, "Saved chats in", WAIT) && pty_wait_str(&app, chat_file, WAIT), "%s", app.screen);
	char line[256];
	snprintf(line, sizeof line, "/open %s\r", chat_file);
	pty_send(&app, line);
	CHECK_(pty_wait_str(&app, "Lily went to the park", WAIT), "%s", app.screen);
	CHECK_EQ_INT(quit(), 0);
	CHECK(session_names_chat());
}

/* /save: asks before replacing, refuses a link. */
static void test_save(void)
{
	CHECK(write_file(DIR "/out.md", "keep", 4) == 0);
	CHECK(system("ln -sf out.md " DIR "/link.md") == 0);
	CHECK(start(ARGS));
	pty_send(&app, "/save " DIR "/out.md\r");
	CHECK_(pty_wait_str(&app, "exists: replace it? (y/n)", WAIT), "%s", app.screen);
	pty_send(&app, "n");
	CHECK(pty_wait_str(&app, "not saved", WAIT));
	char buf[256];
	slurp(DIR "/out.md", buf, sizeof buf);
	CHECK(!strcmp(buf, "keep"));
	pty_send(&app, "/save " DIR "/link.md\r");
	CHECK_(pty_wait_str(&app, "is a symbolic link", WAIT), "%s", app.screen);
	pty_send(&app, "/save " DIR "/out.md\ry");
	CHECK(pty_wait_str(&app, "saved this tab to", WAIT));
	slurp(DIR "/out.md", buf, sizeof buf);
	CHECK(strstr(buf, "# one") != NULL);
	struct stat st;
	CHECK(lstat(DIR "/link.md", &st) == 0 && S_ISLNK(st.st_mode));
	CHECK_EQ_INT(quit(), 0);
}

/* /snapshot (#40 item 12): ~ is the home directory; a relative name is
 * under the working directory and the status names the whole path; a file
 * that is there is replaced only after a y (n keeps it); a link is refused. */
static void test_snapshot(void)
{
	CHECK(write_file(DIR "/snap.txt", "keep", 4) == 0);
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app);
	CHECK(pty_start(&app, DIR, ARGS, 30, 240) && pty_wait_str(&app, "1:", WAIT)); /* room for a long path */
	char want[1300], buf[4096];
	pty_send(&app, "/snapshot ~/pool.txt\r");
	snprintf(want, sizeof want, "wrote the pool's snapshot to %s/home/pool.txt", app.dir);
	CHECK_(pty_wait_str(&app, want, WAIT), "%s", app.screen);
	slurp(DIR "/home/pool.txt", buf, sizeof buf);
	CHECK_(strstr(buf, "pagechat KV pool, stories260K.gguf") == buf, "%s", buf);
	pty_send(&app, "/snapshot " DIR "/rel.txt\r");
	snprintf(want, sizeof want, "wrote the pool's snapshot to %s/rel.txt", app.dir);
	CHECK_(pty_wait_str(&app, want, WAIT), "%s", app.screen);
	slurp(DIR "/rel.txt", buf, sizeof buf);
	CHECK(strstr(buf, "pagechat KV pool") == buf);
	pty_send(&app, "/snapshot " DIR "/snap.txt\r");
	CHECK_(pty_wait_str(&app, "snap.txt exists: replace it? (y/n)", WAIT), "%s", app.screen);
	pty_send(&app, "n");
	CHECK_(pty_wait_str(&app, "not saved", WAIT), "%s", app.screen);
	slurp(DIR "/snap.txt", buf, sizeof buf);
	CHECK_(!strcmp(buf, "keep"), "n replaced it: %s", buf);
	pty_send(&app, "/snapshot " DIR "/snap.txt\r");
	CHECK(pty_wait_str(&app, "snap.txt exists: replace it? (y/n)", WAIT));
	pty_send(&app, "y");
	snprintf(want, sizeof want, "wrote the pool's snapshot to %s/snap.txt", app.dir);
	CHECK_(pty_wait_str(&app, want, WAIT), "%s", app.screen);
	slurp(DIR "/snap.txt", buf, sizeof buf);
	CHECK(strstr(buf, "pagechat KV pool") == buf);
	pty_send(&app, "/snapshot " DIR "/link.md\r");
	CHECK_(pty_wait_str(&app, "is a symbolic link", WAIT), "%s", app.screen);
	CHECK_EQ_INT(quit(), 0);
}

/* A link planted at stderr.log: never followed. */
static void test_log_link(void)
{
	CHECK(write_file(DIR "/victim", "precious", 8) == 0);
	CHECK(system("ln -sf ../../victim " DATA "/stderr.log") == 0);
	CHECK(start(ARGS));
	CHECK_EQ_INT(quit(), 0);
	char buf[64];
	slurp(DIR "/victim", buf, sizeof buf);
	CHECK_(!strcmp(buf, "precious"), "stderr.log's link target became '%s'", buf);
}

/* A data directory anyone may write in: refused before anything is saved. */
static void test_open_dir(void)
{
	CHECK(chmod(DATA, 0777) == 0);
	CHECK(pty_start(&app, DIR, ARGS, 30, 120));
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 1);
	CHECK(chmod(DATA, 0700) == 0);
	CHECK(start(ARGS));
	CHECK_EQ_INT(quit(), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	test_first_run();
	test_damaged();
	test_named_twice();
	test_plain_run();
	test_save();
	test_snapshot();
	test_log_link();
	test_open_dir();
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
