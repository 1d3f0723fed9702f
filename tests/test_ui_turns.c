/* tests/test_ui_turns.c: turns that fail, in the full-screen chat through a
 * pseudo-terminal (tests/pty.h) (issue #40 item 7): lines the context
 * refuses stay on screen but are no part of the conversation: the next turn
 * that fits sends the same prompt as a chat that never had them (its
 * "prompt N tok" against a second run without the refused lines).
 * Every check polls the screen with a timeout. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DIR "build/test-ui-turns"
#define ARGS "--config " DIR "/ui.yaml --kv-store off"
#define WAIT 30.0

/* 256 tokens, refuse: the story prompt (65 tokens) and two 60-token
 * answers fit (a turn needs its prompt and 60 tokens of room), a third
 * does not. */
static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: {limit: 256, overflow: refuse}\n"
	"sampling: {temperature: 0, max_tokens: 60, seed: 7}\n"
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
	CHECK(system("rm -rf " DIR "/data") == 0);
	CHECK(pty_start(&app, DIR, args, 40, 120));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s\n%s", app.screen, out);
}

/* Tab one answers no more: "1:one *" streams, "1:one N%" reads its prompt. */
static bool one_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *s = strstr(screen, "1:one");
	return s && !(s[5] == ' ' && (s[6] == '*' || (s[6] >= '0' && s[6] <= '9')));
}

/* Sends line and waits for its answer to end. */
static void ask(const char *line)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s\r", line);
	pty_send(&app, buf);
	snprintf(buf, sizeof buf, "%s", line);
	CHECK_(pty_wait_str(&app, buf, WAIT), "%s not shown:\n%s", line, app.screen);
	CHECK_(pty_wait(&app, one_idle, NULL, WAIT), "no end to the answer to %s:\n%s", line, app.screen);
}

/* The N of the last "prompt N tok" on the screen, or -1. */
static int last_prompt(void)
{
	int n = -1;
	for (const char *s = app.screen; (s = strstr(s, ", prompt ")); s++)
		n = atoi(s + 9);
	return n;
}

/* Two answers, the refused lines when refused is set, then a short
 * answer: the N of its "prompt N tok". */
static int session(bool refused)
{
	start(ARGS);
	ask("Lily went to the park");
	ask("Tom saw a dog");
	if (refused) {
		pty_send(&app, "Then the sun came out and everyone was happy\r");
		CHECK_(pty_wait_str(&app, "context is full", WAIT), "not refused:\n%s", app.screen);
		pty_send(&app, "Max ran home to his mother\r");
		CHECK_(pty_wait_str(&app, "Max ran home", WAIT), "%s", app.screen);
		CHECK(pty_wait(&app, one_idle, NULL, WAIT));
	}
	pty_send(&app, "/set max_tokens 8\r");
	CHECK_(pty_wait_str(&app, "top-k 40 max 8 ", WAIT), "%s", app.screen);
	ask("The end");
	CHECK_(pty_wait_str(&app, "[8 tok, length", WAIT), "no 8-token answer:\n%s", app.screen);
	int n = last_prompt();
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	return n;
}

static void test_refused_not_sent(void)
{
	int plain = session(false), after = session(true);
	CHECK_(plain > 0 && after == plain, "the last prompt: %d tokens after two refused lines, %d without them",
	       after, plain);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	test_refused_not_sent();
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
