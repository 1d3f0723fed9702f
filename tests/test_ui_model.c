/* tests/test_ui_model.c: /model in the full-screen chat, through a
 * pseudo-terminal (tests/pty.h), when things go wrong (issue #40, items 1
 * and 13):
 * - a failed /model (a file that is no model), then a good one: the panel
 *   shows the new engine's pool at once (its block count, from the model's
 *   K/V size: pool_mib, so the two models' pools differ), not the old
 *   engine's figures until the new one has published as many snapshots;
 * - /model on a file that does not exist says so;
 * - the new engine cannot start and neither can the old one again (the disk
 *   tier's directory replaced by a file meanwhile): the chat ends with one
 *   line naming both reasons and exit status 1, the chats saved, and
 *   --resume brings them back.
 * Every check polls the screen with a timeout. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/test-ui-model"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 30.0
#define OTHER "build/models/replay-qwen3-vocab.gguf"

/* The pool is 1 MiB: stories260K's K/V (5 layers of 4 KV heads x 8 f16
 * values each for K and V, 640 bytes a token) fills 102 blocks of 16 tokens
 * (1048576 / 10240), the Qwen3 stand-in's (2 layers of 32: 256 bytes a
 * token) 256. The first answer runs to the end of the
 * context, so the old engine publishes many snapshots. */
static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 512\n"
	"kv_cache: {block_size: 16, pool_mib: 1}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;
static char out[1 << 16];

static void start(const char *args)
{
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app);
	app.out = out;
	app.cap_out = sizeof out;
	CHECK(pty_start(&app, DIR, args, 40, 120));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s\n%s", app.screen, out);
}

/* Tab one answers no more. */
static bool one_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *s = strstr(screen, "1:one");
	return s && !(s[5] == ' ' && (s[6] == '*' || (s[6] >= '0' && s[6] <= '9')));
}

static void test_failed_then_good(void)
{
	CHECK(system("rm -rf " DIR "/data") == 0);
	start(ARGS);
	CHECK_(pty_wait_str(&app, "blocks 102 x 16 tokens", WAIT), "stories260K's pool:\n%s", app.screen);
	pty_send(&app, "Lily went to the park\r");
	CHECK_(pty_wait_str(&app, " tok, context", WAIT), "no long answer:\n%s", app.screen);
	pty_send(&app, "/model /nonexistent.gguf\r");
	CHECK_(pty_wait_str(&app, "/model: /nonexistent.gguf does not exist", WAIT), "%s", app.screen);
	pty_send(&app, "/model ~/x.md\r");
	CHECK_(pty_wait_str(&app, "/model: ", WAIT), "%s", app.screen);
	CHECK_(pty_wait_str(&app, "stories260K.gguf stays", WAIT), "the failed /model:\n%s", app.screen);
	pty_send(&app, "/model " OTHER "\r");
	CHECK_(pty_wait_str(&app, "every tab goes on with replay-qwen3-vocab.gguf", WAIT), "%s", app.screen);
	pty_send(&app, "/set max_tokens 8\rHello there\r");
	CHECK_(pty_wait_str(&app, "you> Hello there", WAIT), "%s", app.screen);
	CHECK(pty_wait(&app, one_idle, NULL, WAIT));
	CHECK_(pty_wait_str(&app, "blocks 256 x 16 tokens", 5.0), "the panel kept the old engine's pool:\n%s",
	       app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* Neither engine starts: one line, status 1, the chats kept. */
static void test_no_engine(void)
{
	CHECK(system("rm -rf " DIR "/data " DIR "/kvs && mkdir -m 700 " DIR "/kvs") == 0);
	start(ARGS " --kv-store " DIR "/kvs -n 8");
	pty_send(&app, "Lily went\r");
	CHECK_(pty_wait_str(&app, "[8 tok, length", WAIT), "%s", app.screen);
	CHECK(system("rm -rf " DIR "/kvs && touch " DIR "/kvs") == 0);
	pty_send(&app, "/model " OTHER "\r");
	int rc = pty_wait_exit(&app, WAIT);
	CHECK_(rc == 1, "exit %d; output:\n%s", rc, out);
	CHECK_(strstr(out, "pagechat: the engine did not start on replay-qwen3-vocab.gguf: KV store") &&
	       strstr(out, "nor again on stories260K.gguf") && strstr(out, "pagechat --resume reopens them"),
	       "output:\n%s", out);
	CHECK(system("rm -f " DIR "/kvs") == 0);
	start(ARGS " --resume --kv-store off");
	CHECK_(pty_wait_str(&app, "Lily went", WAIT), "the chat was lost:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	CHECK(write_file(DIR "/home/x.md", "# notes\n", 8) == 0);
	test_failed_then_good();
	test_no_engine();
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
