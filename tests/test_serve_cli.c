/* tests/test_serve_cli.c: the server's two commands as a user runs them.
 * `pagechat serve`: its usage errors, the line that says where it listens,
 * answers over HTTP, and a clean exit on SIGTERM. `pagechat chat --serve 0`
 * in a pseudo-terminal (tests/pty.h): the status bar says where it serves;
 * an HTTP chat with a tab's system prompt reuses the tab's pinned blocks
 * (cached tokens in its usage), and the server's block map shows the tab's
 * conversation beside the HTTP request's. */
#include "link/link.h"
#include "tests/http_client.h"
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#define MODEL "../shared/models/stories260K.gguf"
#define RANDL3 "build/models/rand-llama3-vocab.gguf" /* the Llama 3 template (make test-models) */
#define DIR "build/test-serve-cli"
#define WAIT 30.0
#define STORY "Once upon a time, in a little town by the sea, there lived a girl named Lily. She loved to " \
	"play on the beach with her dog Max, and every morning they looked for shells in the sand."

static const char config[] =
	"model: " MODEL "\n"
	"context: 1024\n"
	"kv_cache: {block_size: 16, pool_blocks: 400}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"system_prompts:\n"
	"  story: " STORY "\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static void test_usage(void)
{
	static run_result r;
	run_pagechat(&r, "serve");
	CHECK(r.status == 2 && strstr(r.errout, "needs -m MODEL"));
	CHECK_(!strchr(strchr(r.errout, '\n') + 1, '\n'), "one line, no usage after it (#40): %s", r.errout);
	run_pagechat(&r, "serve -m " MODEL " --port 70000");
	CHECK(r.status == 2 && strstr(r.errout, "--port"));
	run_pagechat(&r, "serve -m " MODEL " --max-queue 0");
	CHECK(r.status == 2 && strstr(r.errout, "--max-queue"));
	run_pagechat(&r, "serve -m nothing-here.gguf");
	CHECK(r.status == 1 && strstr(r.errout, "nothing-here.gguf"));
	run_pagechat(&r, "serve -m " MODEL " --host no.such.host.invalid --port 0");
	CHECK_(r.status == 1 && strstr(r.errout, "no.such.host.invalid"), "%s", r.errout);
	run_pagechat(&r, "chat --serve 99999");
	CHECK(r.status == 2 && strstr(r.errout, "--serve"));
	run_pagechat(&r, "serve --help");
	CHECK(r.status == 0 && strstr(r.out, "/v1/chat/completions"));
}

/* The speculative decoding step counters, summed over their two kinds. */
static const char *const spec_counters[3] = {"pagechat:spec_decode_step_tokens_total",
					     "pagechat:spec_decode_steps_total",
					     "pagechat:spec_decode_step_seconds_total"};

static double both_kinds(int port, const char *auth, const char *name)
{
	char a[128], b[128];
	snprintf(a, sizeof a, "%s{kind=\"draft\"}", name);
	snprintf(b, sizeof b, "%s{kind=\"plain\"}", name);
	return hc_metric(port, auth, a) + hc_metric(port, auth, b);
}

static void test_serve_process(void)
{
	int err_pipe[2];
	CHECK(pipe(err_pipe) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(err_pipe[1], 2);
		close(err_pipe[0]);
		execl(PAGECHAT_BIN, "pagechat", "serve", "-m", MODEL, "--port", "0", "--api-key", "k", "-c", "256",
		      "--draft", "ngram", (char *)NULL);
		_exit(127);
	}
	close(err_pipe[1]);
	char log[4096];
	int port = hc_served_port(err_pipe[0], log, sizeof log, WAIT);
	CHECK_(port > 0 && strstr(log, "serving stories260K") && strstr(log, "API key required"), "%s", log);
	CHECK_(strstr(log, "(chat template none, context 256,"), "the template is labelled (#40): %s", log);
	hresp r;
	CHECK(port > 0 && hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200);
	hresp_free(&r);
	CHECK(port > 0 && hc_request(port, "POST", "/v1/completions", "Authorization: Bearer k\r\n",
				     "{\"prompt\":\"Once\",\"max_tokens\":4}", &r) && r.status == 200 &&
	      strstr(r.body, "\"completion_tokens\":4"));
	hresp_free(&r);
	/* with a draft: the decode-only steps' counters on /metrics take every
	 * token of an answer but its first, which its prompt's step made */
	const char *auth = "Authorization: Bearer k\r\n", *gen = "vllm:generation_tokens_total";
	double gen0 = 0, dec0[3];
	for (int i = 0; i < WAIT * 50 && gen0 != 4; i++, poll(NULL, 0, 20)) /* the snapshot lags up to 50 ms */
		gen0 = hc_metric(port, auth, gen);
	CHECK(gen0 == 4);
	for (int i = 0; i < 3; i++)
		dec0[i] = both_kinds(port, auth, spec_counters[i]);
	CHECK(port > 0 && hc_request(port, "POST", "/v1/completions", auth,
				     "{\"prompt\":\"Tom and his dog went to the park\",\"max_tokens\":40,"
				     "\"temperature\":0,\"ignore_eos\":true}", &r) && r.status == 200 &&
	      strstr(r.body, "\"completion_tokens\":40"));
	hresp_free(&r);
	double dgen = 0, d[3];
	for (int i = 0; i < WAIT * 50 && dgen != 40; i++, poll(NULL, 0, 20))
		dgen = hc_metric(port, auth, gen) - gen0;
	for (int i = 0; i < 3; i++)
		d[i] = both_kinds(port, auth, spec_counters[i]) - dec0[i];
	CHECK_(dgen == 40 && d[0] == 39 && d[1] >= 1 && d[1] <= 39 && d[2] > 0,
	       "generated %g, by decode-only steps %g, in %g steps, %g s", dgen, d[0], d[1], d[2]);
	kill(pid, SIGTERM);
	int st = -1;
	for (int i = 0; i < 300 && waitpid(pid, &st, WNOHANG) == 0; i++)
		poll(NULL, 0, 20);
	CHECK_(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ssize_t k = read(err_pipe[0], log, sizeof log - 1);
	log[k > 0 ? k : 0] = '\0';
	CHECK(strstr(log, "stopping") != NULL);
	close(err_pipe[0]);
}

/* The port in the status bar's "serving the OpenAI API on http://..:PORT". */
static int screen_port(const pty_app *a)
{
	const char *at = strstr(a->screen, "on http://127.0.0.1:");
	return at ? atoi(at + 20) : -1;
}

static void test_chat_serve(void)
{
	static pty_app app;
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	CHECK(pty_start(&app, DIR, "--config " DIR "/ui.yaml --serve 0", 30, 160));
	CHECK_(pty_wait_str(&app, "serving the OpenAI API on http://127.0.0.1:", WAIT), "%s", app.screen);
	int port = screen_port(&app);
	CHECK(port > 0);
	pty_send(&app, "Lily went to the park\r");
	CHECK(pty_wait_str(&app, " tok, ", WAIT));
	hresp r;
	CHECK(hc_request(port, "POST", "/v1/chat/completions", NULL, "{\"messages\":[{\"role\":\"system\","
			 "\"content\":\"" STORY "\"},{\"role\":\"user\",\"content\":\"Max ran\"}],\"max_tokens\":8}", &r));
	const char *cached = strstr(r.body, "\"cached_tokens\":");
	CHECK_(r.status == 200 && cached && atoi(cached + 16) >= 16, "the tab's system prompt is reused: %s", r.body);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/pagechat/v1/pool", NULL, NULL, &r) && r.status == 200);
	/* the tab's pinned prompt: state 5 (pinned) in a conversation of the default client */
	CHECK_(strstr(r.body, "[5,") != NULL, "no pinned block in the map");
	hresp_free(&r);
	pty_send(&app, "\004");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	int fd = hc_connect(port);
	CHECK_(fd < 0, "the server stopped with the chat");
	if (fd >= 0)
		close(fd);
}

/* --serve 0 when a previous session exists (the one before): its note takes
 * the status line, yet the tab bar keeps the URL, with the port, at 80x24
 * as at 160 columns (#40 item 8). */
static void test_chat_serve_again(int rows, int cols)
{
	static pty_app app;
	CHECK(pty_start(&app, DIR, "--config " DIR "/ui.yaml --serve 0", rows, cols));
	CHECK_(pty_wait_str(&app, "the last session's", WAIT), "no note of the last session:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, "API http://127.0.0.1:", WAIT), "%dx%d: no URL:\n%s", cols, rows, app.screen);
	const char *at = strstr(app.screen, "API http://127.0.0.1:");
	int port = at ? atoi(at + 21) : -1;
	const char *bar = strstr(app.screen, " 1:one"), *eol = bar ? strchr(bar, '\n') : NULL;
	CHECK_(port > 0 && bar && at > bar && at < eol, "%dx%d: the URL is not in the tab bar:\n%s", cols, rows,
	       app.screen);
	hresp r;
	CHECK_(port > 0 && hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200, "port %d", port);
	if (port > 0)
		hresp_free(&r);
	pty_send(&app, "Lily went\r"); /* a chat for the next run's session (empty tabs are not kept) */
	CHECK(pty_wait_str(&app, " tok, ", WAIT));
	pty_send(&app, "\004");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* Runs "timeout 20 pagechat ARGS" (a server that starts would serve until
 * killed): its status (124: it was still running). */
static int run_briefly(run_result *r, const char *args)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "timeout 20 %s %s >build/test-run.out 2>build/test-run.err </dev/null", PAGECHAT_BIN,
		 args);
	int st = system(cmd);
	slurp("build/test-run.err", r->errout, sizeof r->errout);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A `pagechat serve` child with extra arguments (NULL-terminated), its
 * stderr on *err_fd; its port in *port (-1 when it did not say). */
static pid_t start_serve(const char *const *extra, int *err_fd, int *port, char *log, size_t cap)
{
	int err_pipe[2];
	if (pipe(err_pipe))
		return -1;
	const char *argv[32] = {"pagechat", "serve", "--port", "0"};
	int n = 4;
	for (int i = 0; extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(err_pipe[1], 2);
		close(err_pipe[0]);
		execv(PAGECHAT_BIN, (char *const *)argv);
		_exit(127);
	}
	close(err_pipe[1]);
	*err_fd = err_pipe[0];
	*port = hc_served_port(err_pipe[0], log, cap, WAIT);
	return pid;
}

/* Waits up to ms for pid; its wait status, or -1 (still running). */
static int wait_for(pid_t pid, int ms)
{
	int st = -1;
	for (int i = 0; i < ms / 20 && waitpid(pid, &st, WNOHANG) == 0; i++)
		poll(NULL, 0, 20);
	return st;
}

/* The API key (#42 finding 11): an empty one silently disabled auth; on
 * the command line it stayed visible to every user in ps. Now an empty key
 * is refused from anywhere, --api-key-file reads one, and a key given with
 * --api-key is blanked in argv (with a warning). */
static void test_api_key(void)
{
	static run_result r;
	int st = run_briefly(&r, "serve -m " MODEL " --port 0 --api-key ''");
	CHECK_(st == 2 && strstr(r.errout, "empty"), "--api-key '': status %d, %s", st, r.errout);
	setenv("PAGECHAT_API_KEY", "", 1);
	st = run_briefly(&r, "serve -m " MODEL " --port 0");
	unsetenv("PAGECHAT_API_KEY");
	CHECK_(st == 2 && strstr(r.errout, "$PAGECHAT_API_KEY is empty"), "empty $PAGECHAT_API_KEY: status %d, %s", st,
	       r.errout);
	CHECK(system("mkdir -p " DIR " && printf '\\n' >" DIR "/empty.key && printf 'filekey\\n' >" DIR "/ok.key") == 0);
	st = run_briefly(&r, "serve -m " MODEL " --port 0 --api-key-file " DIR "/empty.key");
	CHECK_(st == 2 && strstr(r.errout, "--api-key-file is empty"), "an empty key file: status %d, %s", st, r.errout);
	st = run_briefly(&r, "serve -m " MODEL " --port 0 --api-key-file " DIR "/none.key");
	CHECK_(st == 2 && strstr(r.errout, DIR "/none.key"), "a missing key file: status %d, %s", st, r.errout);
	/* the file's key guards the API */
	char log[4096];
	int fd, port;
	pid_t pid = start_serve((const char *[]){"-m", MODEL, "--api-key-file", DIR "/ok.key", NULL}, &fd, &port, log,
				sizeof log);
	hresp h;
	CHECK_(port > 0 && strstr(log, "API key required"), "%s", log);
	CHECK(port > 0 && hc_request(port, "GET", "/v1/models", NULL, NULL, &h) && h.status == 401);
	hresp_free(&h);
	CHECK(port > 0 && hc_request(port, "GET", "/v1/models", "Authorization: Bearer filekey\r\n", NULL, &h) &&
	      h.status == 200);
	hresp_free(&h);
	kill(pid, SIGTERM);
	st = wait_for(pid, 15000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd);
	/* a key on the command line: gone from /proc/PID/cmdline once it serves */
	pid = start_serve((const char *[]){"-m", MODEL, "--api-key", "sekrit-in-argv", NULL}, &fd, &port, log,
			  sizeof log);
	char path[64], cmdline[4096] = "";
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	FILE *fp = fopen(path, "rb");
	size_t n = fp ? fread(cmdline, 1, sizeof cmdline - 1, fp) : 0;
	if (fp)
		fclose(fp);
	for (size_t i = 0; i < n; i++)
		cmdline[i] = cmdline[i] ? cmdline[i] : ' ';
	cmdline[n] = '\0';
	CHECK_(port > 0 && n > 0 && !strstr(cmdline, "sekrit") && strstr(cmdline, "--api-key"), "cmdline '%s'", cmdline);
	CHECK_(strstr(log, "visible to every user in ps"), "%s", log);
	CHECK(port > 0 && hc_request(port, "GET", "/v1/models", "Authorization: Bearer sekrit-in-argv\r\n", NULL, &h) &&
	      h.status == 200);
	hresp_free(&h);
	kill(pid, SIGTERM);
	st = wait_for(pid, 15000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd);
}

/* SIGTERM with the server tied up (#42 finding 5: a chat of 32,000
 * messages took minutes of CPU and SIGTERM waited for it): slow heads, a
 * stream whose client reads nothing, a stream read to the end, a chat of
 * 32,000 messages on a templated model. The process ends with status 0
 * within --shutdown-timeout 5 and a generous margin (20 s in all; before,
 * it was still running). */
static void test_sigterm_bounded(void)
{
	char log[4096];
	int fd, port;
	pid_t pid = start_serve((const char *[]){"-m", RANDL3, "-c", "512", "--timeout", "60", NULL}, &fd, &port, log,
				sizeof log);
	CHECK_(port > 0, "%s", log);
	if (port <= 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return;
	}
	int slow[2], stalled, big;
	for (int i = 0; i < 2; i++) {
		slow[i] = hc_connect(port);
		hc_send(slow[i], "POST /v1/completions HTTP/1.1\r\n", 31);
	}
	const char *sbody = "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"stream\":true,\"n\":4,\"ignore_eos\":true}";
	char req[512];
	int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
			 strlen(sbody), sbody);
	stalled = hc_connect(port);
	hc_send(stalled, req, (size_t)n);
	size_t cap = 32000 * 48 + 256, len = 0;
	char *body = xmalloc(cap), *head = xmalloc(256);
	len += (size_t)snprintf(body, cap, "{\"messages\":[");
	for (int i = 0; i < 32000; i++)
		len += (size_t)snprintf(body + len, cap - len, "%s{\"role\":\"%s\",\"content\":\"the cat sat\"}",
					i ? "," : "", i % 2 ? "assistant" : "user");
	len += (size_t)snprintf(body + len, cap - len, "]}");
	int hn = snprintf(head, 256, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", len);
	big = hc_connect(port);
	hc_send(big, head, (size_t)hn);
	hc_send(big, body, len);
	free(body);
	free(head);
	poll(NULL, 0, 500);
	kill(pid, SIGTERM);
	int st = wait_for(pid, 20000);
	CHECK_(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "after SIGTERM: %s (status %d)",
	       st == -1 ? "still running 20 s later" : "ended", st);
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	for (int i = 0; i < 2; i++)
		close(slow[i]);
	close(stalled);
	close(big);
	close(fd);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_usage();
	test_serve_process();
	test_api_key();
	test_sigterm_bounded();
	test_chat_serve();
	test_chat_serve_again(24, 80);
	test_chat_serve_again(40, 160);
	return TEST_DONE();
}
