/* tests/test_ui_md.c: Markdown answers and /copy in the full-screen chat,
 * through a pseudo-terminal (tests/pty.h), at 80x24 and 200x60, on a model
 * with a chat template (Qwen3's, random weights): a saved chat whose answer
 * is Markdown (tests/fuzz/corpus/md/answer-code) opens with /open and shows
 * without its delimiters, its code blocks under their tags and its lines as
 * written, and without the model's leading space after "bot> "; /copy N and
 * F5 send the code block and the whole answer to the terminal as OSC 52;
 * /copy with no such block says so; /save keeps the Markdown as written. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DIR "build/test-ui-md"
#define DATA DIR "/data/pagechat"
#define WAIT 30.0

static const char config[] =
	"model: build/models/replay-qwen3-vocab.gguf\n"
	"sampling: {temperature: 0, max_tokens: 8, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;
static char out[1 << 17];
static char answer[1 << 15];

static void json_str(char *dst, size_t cap, const char *s)
{
	size_t n = 0;
	dst[n++] = '"';
	for (; *s && n + 8 < cap; s++) {
		if (*s == '"' || *s == '\\')
			n += (size_t)snprintf(dst + n, cap - n, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			n += (size_t)snprintf(dst + n, cap - n, "\\u%04x", *s);
		else
			dst[n++] = *s;
	}
	dst[n++] = '"';
	dst[n] = '\0';
}

static void base64(const char *s, size_t n, char *dst)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned char)s[i] << 16 | (i + 1 < n ? (unsigned char)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? (unsigned char)s[i + 2] : 0);
		dst[o++] = b64[v >> 18 & 63];
		dst[o++] = b64[v >> 12 & 63];
		dst[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		dst[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	dst[o] = '\0';
}

static void write_chat(void)
{
	static char buf[1 << 15], text[1 << 16];
	slurp("tests/fuzz/corpus/md/answer-code", buf, sizeof buf);
	snprintf(answer, sizeof answer, "%s", buf + 2);
	char with_space[(1 << 15) + 2];
	snprintf(with_space, sizeof with_space, " %s", answer); /* as SentencePiece models answer */
	static char esc[1 << 15];
	json_str(esc, sizeof esc, with_space);
	snprintf(text, sizeof text,
		 "{\"format\": \"pagechat-chat 1\", \"name\": \"md\", \"system_prompt\": \"assistant\", "
		 "\"system\": \"\", \"messages\": [{\"role\": \"user\", \"content\": \"Reverse a string\"}, "
		 "{\"role\": \"assistant\", \"content\": %s, \"finish\": \"stop\", \"tokens\": 90, "
		 "\"ttft_ms\": 1, \"tpot_ms\": 1}]}\n",
		 esc);
	CHECK(system("mkdir -p " DATA " && chmod 700 " DIR "/data " DATA) == 0);
	CHECK(write_file(DATA "/md.json", text, strlen(text)) == 0);
}

/* The OSC 52 sequence for s[n] was written to the terminal. */
static bool copied(const char *s, size_t n)
{
	static char b[1 << 15], want[(1 << 15) + 16];
	base64(s, n, b);
	snprintf(want, sizeof want, "\033]52;c;%s\007", b);
	for (int i = 0; i < 500 && !strstr(out, want); i++) {
		struct pollfd p = {.fd = app.fd, .events = POLLIN};
		poll(&p, 1, 10);
		pty_drain(&app);
	}
	return strstr(out, want) != NULL;
}

static void test_size(int rows, int cols)
{
	app.out = out;
	app.cap_out = sizeof out;
	CHECK(pty_start(&app, DIR, "--config " DIR "/ui.yaml", rows, cols));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
	pty_send(&app, "/open md.json\r");
	CHECK_(pty_wait_str(&app, "2:md", WAIT), "not opened:\n%s", app.screen);
	pty_send(&app, "\033[5~\033[5~\033[5~\033[5~\033[5~\033[5~");
	const char *top[] = {"bot> Here is a small function that", "string in Python:", NULL};
	for (const char *const *s = top; *s; s++)
		CHECK_(pty_wait_str(&app, *s, WAIT), "%dx%d: no '%s':\n%s", cols, rows, *s, app.screen);
	CHECK_(!strstr(app.screen, "**Python**") && !strstr(app.screen, "bot>  Here"), "%dx%d:\n%s", cols, rows,
	       app.screen);
	const char *code[] = {"[code 1] python", "     def reverse(s: str) -> str:", "         return s[::-1]", NULL};
	for (const char *const *s = code; *s; s++)
		CHECK_(pty_wait_str(&app, *s, WAIT), "%dx%d: no '%s':\n%s", cols, rows, *s, app.screen);
	CHECK_(!strstr(app.screen, "```"), "%dx%d: fences drawn:\n%s", cols, rows, app.screen);
	/* /copy 1: the first code block; /copy 2: the second; F5: the answer */
	out[0] = '\0';
	app.n_out = 0;
	pty_send(&app, "/copy 1\r");
	const char *b1 = strstr(answer, "def reverse"), *e1 = strstr(answer, "```\n\nCall");
	CHECK(b1 && e1);
	CHECK_(b1 && e1 && copied(b1, (size_t)(e1 - b1)), "%dx%d: /copy 1 sent no OSC 52", cols, rows);
	CHECK(pty_wait_str(&app, "copied code block 1 python", WAIT));
	pty_send(&app, "/copy 2\r");
	const char *b2 = strstr(answer, "void reverse");
	CHECK_(b2 && copied(b2, strlen(b2) - 4), "%dx%d: /copy 2 sent no OSC 52", cols, rows);
	pty_send(&app, "\033[15~");
	CHECK_(copied(answer, strlen(answer)), "%dx%d: F5 sent no OSC 52", cols, rows);
	pty_send(&app, "/copy 3\r");
	CHECK(pty_wait_str(&app, "no code block 3 in this tab", WAIT));
	/* /save keeps the Markdown as written */
	char cmd[160];
	snprintf(cmd, sizeof cmd, "/save " DIR "/md-%d.md\r", cols);
	pty_send(&app, cmd);
	CHECK(pty_wait_str(&app, "saved this tab to", WAIT));
	static char saved[1 << 15];
	snprintf(cmd, sizeof cmd, DIR "/md-%d.md", cols);
	slurp(cmd, saved, sizeof saved);
	CHECK_(strstr(saved, "```python\ndef reverse(s: str) -> str:\n") && strstr(saved, "**Python**"),
	       "/save changed the Markdown:\n%s", saved);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	write_chat();
	test_size(24, 80);
	test_size(60, 200);
	return TEST_DONE();
}
