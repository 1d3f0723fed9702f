/* tests/test_resume.c: --resume knows each chat's model, through a
 * pseudo-terminal (tests/pty.h). Model A is a random model with Llama 2's
 * SentencePiece vocabulary and no template (completion mode), model B one
 * with Llama 3's vocabulary and template (chat mode); the configured
 * default is the demo model. A chat made on A and one made on B each
 * reopen on their own model with --resume alone; a session holding both
 * asks which to open, and the other chat opens read-only (its text shown,
 * typing refused); with A's file gone, one message says so and A's chat
 * stays readable on the default model; -m B does not turn A's completion
 * chat into a chat. */
#include "models/json.h"
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <string.h>

#define DIR "build/test-resume"
#define ARGS "--config " DIR "/c.yaml"
#define WAIT 30.0

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 512\n"
	"sampling: {temperature: 0, max_tokens: 12, seed: 1}\n"
	"default_system_prompt: none\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;

static bool all_of(const char *screen, const void *ctx)
{
	for (const char *const *s = ctx; *s; s++)
		if (!strstr(screen, *s))
			return false;
	return true;
}

static void start(const char *args)
{
	char a[512];
	snprintf(a, sizeof a, ARGS " %s", args);
	CHECK(pty_start(&app, DIR, a, 30, 120));
}

static void quit(void)
{
	pty_send(&app, "\025/quit\r"); /* Ctrl-U first: a refused line is put back */
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* A chat on model (its file name), one turn; returns the session's chat file. */
static void make_chat(const char *model, const char *line, char *file, size_t cap)
{
	char args[256];
	snprintf(args, sizeof args, "-m " DIR "/%s", model);
	start(args);
	const char *up[] = {"1:one", model, NULL};
	CHECK_(pty_wait(&app, all_of, up, WAIT), "no start on %s:\n%s", model, app.screen);
	pty_send(&app, line);
	pty_send(&app, "\r");
	CHECK_(pty_wait_str(&app, " tok, length", WAIT), "no answer on %s:\n%s", model, app.screen);
	quit();
	static char text[4096];
	slurp(DIR "/data/pagechat/session.json", text, sizeof text);
	err e = {0};
	json_doc *d = json_parse(text, strlen(text), &e);
	const json *tabs = d ? json_get(json_root(d), "tabs") : NULL;
	CHECK(tabs && tabs->n == 1);
	snprintf(file, cap, "%s", tabs && tabs->n ? tabs->items[0].str : "");
	json_free(d);
}

static void write_session(const char *a, const char *b)
{
	char s[1024];
	int n = snprintf(s, sizeof s, "{\"format\": \"pagechat-session 1\", \"active\": 0, \"tabs\": [\"%s\"%s%s%s]}\n",
			 a, b ? ", \"" : "", b ? b : "", b ? "\"" : "");
	CHECK(write_file(DIR "/data/pagechat/session.json", s, (size_t)n) == 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home && cp build/models/rand-spm-vocab.gguf " DIR
		     "/a.gguf && cp build/models/rand-llama3-vocab.gguf " DIR "/b.gguf") == 0);
	CHECK(write_file(DIR "/c.yaml", config, strlen(config)) == 0);
	char chat_a[128], chat_b[128];
	make_chat("a.gguf", "Alpha words", chat_a, sizeof chat_a);
	make_chat("b.gguf", "Bravo words", chat_b, sizeof chat_b);

	/* each chat alone reopens on its own model, not the configured one */
	start("--resume");
	const char *on_b[] = {"b.gguf  llama3", "Bravo words", NULL};
	CHECK_(pty_wait(&app, all_of, on_b, WAIT), "chat B not on b.gguf:\n%s", app.screen);
	CHECK(!strstr(app.screen, "read-only"));
	quit();
	write_session(chat_a, NULL);
	start("--resume");
	const char *on_a[] = {"a.gguf  completion", "Alpha words", NULL};
	CHECK_(pty_wait(&app, all_of, on_a, WAIT), "chat A not on a.gguf:\n%s", app.screen);
	quit();

	/* both: asked; the other opens read-only */
	write_session(chat_a, chat_b);
	start("--resume");
	const char *menu[] = {"made on 2 models", "1  a.gguf  (1 chat)", "2  b.gguf  (1 chat)", NULL};
	CHECK_(pty_wait(&app, all_of, menu, WAIT), "no question:\n%s", app.screen);
	pty_send(&app, "2");
	const char *picked[] = {"b.gguf  llama3", "1:one", "2:one", NULL};
	CHECK_(pty_wait(&app, all_of, picked, WAIT), "not on b.gguf:\n%s", app.screen);
	pty_send(&app, "\0331");
	const char *locked[] = {"Alpha words", "read-only: made on a.gguf", NULL};
	CHECK_(pty_wait(&app, all_of, locked, WAIT), "chat A not read-only:\n%s", app.screen);
	pty_send(&app, "More\r");
	CHECK_(pty_wait_str(&app, "pagechat --resume -m", WAIT), "typing not refused:\n%s", app.screen);
	quit();

	/* A's file gone: one message, the chat readable on the default model */
	CHECK(system("rm " DIR "/a.gguf") == 0);
	write_session(chat_a, NULL);
	start("--resume");
	const char *gone[] = {"stories260K.gguf", "Alpha words", "cannot continue: the file is missing", NULL};
	CHECK_(pty_wait(&app, all_of, gone, WAIT), "no message for the missing model:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, "which is missing or has changed", WAIT), "chat A not read-only:\n%s", app.screen);
	quit();

	/* -m another kind of model does not turn A's completion text into a chat */
	start("--resume -m " DIR "/b.gguf");
	const char *kind[] = {"Alpha words", "read-only: made on a.gguf with no template", NULL};
	CHECK_(pty_wait(&app, all_of, kind, WAIT), "chat A continued under b.gguf:\n%s", app.screen);
	quit();
	return TEST_DONE();
}
