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

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_usage();
	test_serve_process();
	test_chat_serve();
	return TEST_DONE();
}
