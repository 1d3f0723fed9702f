/* tests/test_remote.c: the chat as a client of OpenAI-compatible servers
 * (`pagechat chat --server URL`, link/remote.h, ui/ui_server.c).
 *
 * - What the remote engine reads: /metrics texts in vLLM's, SGLang's and
 *   llama.cpp's names (each figure with its source, the missing ones left
 *   out), pagechat's block map, error bodies, and the request body it sends.
 * - Against `pagechat serve` on the demo model (started here on a free
 *   port), in a pseudo-terminal: a greedy answer streams into the tab and
 *   equals the server's own answer to the same messages; the panel shows
 *   the server's block map and its /metrics figures labelled "pagechat";
 *   a second turn finds the first in the server's prefix cache; quit and
 *   --resume bring the chat back and it goes on; a wrong key and a killed
 *   server each give one line in the tab, the app stays up, and the chat is
 *   saved with the question that failed.
 * - Against a stand-in server (a thread here) that speaks vLLM's metric names
 *   and cuts a stream off in the middle: the figures and the "not given"
 *   line, the text kept and the one error line; then without /metrics (as
 *   Ollama): the panel says the server gives none.
 * - With PAGECHAT_LLAMA_SERVER (make test-remote-llamacpp): llama.cpp's
 *   llama-server on the demo model: an answer streams, its figures show. */
#include "link/remote.h"
#include "tests/http_client.h"
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>

#define MODEL "../shared/models/stories260K.gguf"
#define DIR "build/test-remote"
#define WAIT 30.0
#define STORY "Once upon a time, in a little town by the sea, there lived a girl named Lily."

static const char config[] =
	"sampling: {temperature: 0, max_tokens: 24, seed: 7}\n"
	"system_prompts:\n"
	"  story: " STORY "\n"
	"default_system_prompt: story\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 100}\n";

/* ---- what the remote engine reads ---- */

static const char vllm_text[] =
	"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
	"# TYPE vllm:num_requests_running gauge\n"
	"vllm:num_requests_running{model_name=\"m\"} 3.0\n"
	"vllm:num_requests_waiting{model_name=\"m\"} 1.0\n"
	"vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"
	"vllm:prefix_cache_queries_total{model_name=\"m\"} 200.0\n"
	"vllm:prefix_cache_hits_total{model_name=\"m\"} 50.0\n"
	"vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 0.5\n"
	"vllm:time_to_first_token_seconds_count{model_name=\"m\"} 10.0\n"
	"vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 4.0\n"
	"vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 6.0\n"
	"vllm:generation_tokens_total{model_name=\"m\"} 1000.0\n";

static void test_parse_metrics(void)
{
	link_figure fig[LF_N];
	char kind[32];
	rem_counters ctr = {.gen_tokens = -1};
	rem_parse_metrics(vllm_text, strlen(vllm_text), fig, kind, sizeof kind, &ctr);
	CHECK(!strcmp(kind, "vLLM"));
	CHECK(fig[LF_RUNNING].have && fig[LF_RUNNING].value == 3 && fig[LF_WAITING].value == 1);
	CHECK(fig[LF_KV_USAGE].have && fig[LF_KV_USAGE].value == 0.25);
	CHECK(!strcmp(fig[LF_KV_USAGE].source, "vllm:kv_cache_usage_perc"));
	CHECK(fig[LF_PREFIX_HIT].have && fig[LF_PREFIX_HIT].value == 0.25);
	CHECK_NEAR(fig[LF_TTFT_MS].value, 50.0, 1e-9);
	CHECK(!fig[LF_ITL_MS].have && !fig[LF_KV_TOKENS].have);
	CHECK(fig[LF_GEN_TPS].have && ctr.gen_tokens == 1000);
	static const char sglang[] = "sglang:num_running_reqs{name=\"x\"} 2\nsglang:num_queue_reqs 5\n"
				     "sglang:token_usage 0.5\nsglang:cache_hit_rate 0.75\n";
	rem_parse_metrics(sglang, strlen(sglang), fig, kind, sizeof kind, &ctr);
	CHECK(!strcmp(kind, "SGLang") && fig[LF_RUNNING].value == 2 && fig[LF_WAITING].value == 5);
	CHECK(fig[LF_KV_USAGE].value == 0.5 && fig[LF_PREFIX_HIT].value == 0.75 && !fig[LF_TTFT_MS].have);
	static const char llamacpp[] = "llamacpp:requests_processing 1\r\nllamacpp:requests_deferred 0\r\n"
				       "llamacpp:kv_cache_tokens 300\r\nllamacpp:predicted_tokens_seconds 50\r\n";
	rem_parse_metrics(llamacpp, strlen(llamacpp), fig, kind, sizeof kind, &ctr);
	CHECK(!strcmp(kind, "llama.cpp") && fig[LF_RUNNING].value == 1 && fig[LF_WAITING].have);
	CHECK(fig[LF_KV_TOKENS].value == 300 && fig[LF_ITL_MS].value == 20 && !fig[LF_KV_USAGE].have);
	CHECK(!fig[LF_PREFIX_HIT].have);
	rem_parse_metrics("garbage {\nnot a metric\n", 24, fig, kind, sizeof kind, &ctr);
	CHECK(!kind[0] && !fig[LF_RUNNING].have);
}

static void test_parse_other(void)
{
	char line[256];
	static const char e401[] = "{\"error\":{\"message\":\"Invalid API key\",\"type\":\"invalid_request_error\"}}";
	rem_error_text(e401, strlen(e401), line, sizeof line);
	CHECK(!strcmp(line, "Invalid API key"));
	rem_error_text("Not Found\nmore", 14, line, sizeof line);
	CHECK(!strcmp(line, "Not Found"));
	static const char pool[] = "{\"object\":\"pagechat.pool\",\"seq\":3,\"block_tokens\":16,\"n_blocks\":3,"
				   "\"n_ctx\":256,\"counts\":{\"free\":1,\"cached\":1,\"used\":1},\"running\":1,"
				   "\"waiting\":0,\"prefix_queries\":10,\"prefix_hits\":4,"
				   "\"blocks\":[[0,0,-1],[1,0,-1],[2,1,1048577]]}";
	link_snapshot s = {0};
	err e = {0};
	CHECK(rem_parse_pool(pool, strlen(pool), &s, &e) == 0);
	CHECK(s.n_blocks == 3 && s.block_tokens == 16 && s.map[2].state == BLK_USED && s.map[2].conv == 1048577);
	CHECK(s.st.blocks_used == 1 && s.st.blocks_cached == 1 && s.st.cached_tokens == 4);
	CHECK(rem_parse_pool("{\"object\":\"list\"}", 17, &s, &e) == -1 && strstr(e.msg, "block map"));
	link_snapshot_deinit(&s);
	link_msg msgs[] = {{"system", "Be \"kind\"", 9}, {"user", "Hi", 2}};
	link_request q = {.r = {.samp = samp_default_params(), .max_tokens = 5}, .msgs = msgs, .n_msgs = 2};
	q.r.samp.temp = 0;
	size_t len;
	char *body = rem_request_body(&q, &len);
	CHECK_(strstr(body, "\"messages\":[{\"role\":\"system\",\"content\":\"Be \\\"kind\\\"\"},{\"role\":\"user\","
			    "\"content\":\"Hi\"}]") && strstr(body, "\"stream\":true") &&
	       strstr(body, "\"max_tokens\":5") && body[len - 1] == '}', "%s", body);
	free(body);
}

/* ---- a stand-in server: vLLM's metric names, a stream cut off ---- */

typedef struct fake {
	int fd, port;
	atomic_bool stop;
	atomic_bool no_metrics;    /* /metrics answers 404, as Ollama's server does */
	pthread_mutex_t mu;        /* guards last_body */
	pthread_t th;
	char last_body[4096];    /* the last generation request's body */
} fake;

static void fake_send(int fd, const char *status, const char *type, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", status, type, strlen(body));
	hc_send(fd, head, (size_t)n);
	hc_send(fd, body, strlen(body));
}

#define CHUNK(t) "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" t "\"},\"finish_reason\":null}]}\n\n"

static void fake_stream(fake *f, int fd, const char *body)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->last_body, sizeof f->last_body, "%s", body);
	pthread_mutex_unlock(&f->mu);
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
	hc_send(fd, head, strlen(head));
	hc_send(fd, CHUNK("Hello"), strlen(CHUNK("Hello")));
	poll(NULL, 0, 400); /* the chat draws "Hello" alone meanwhile: it streams */
	hc_send(fd, CHUNK(" there"), strlen(CHUNK(" there")));
	if (!strstr(body, "finish please"))
		return; /* the connection closes: the server "died" mid-answer */
	static const char end[] = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
				  "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n"
				  "data: [DONE]\n\n";
	hc_send(fd, end, strlen(end));
}

/* Reads one request (head and Content-Length body) and answers it. */
static void fake_serve(fake *f, int fd)
{
	char req[8192];
	size_t n = 0;
	char *body = NULL;
	while (n + 1 < sizeof req) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 2000) <= 0)
			return;
		ssize_t k = recv(fd, req + n, sizeof req - n - 1, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
		req[n] = '\0';
		char *end = strstr(req, "\r\n\r\n");
		const char *cl = strcasestr(req, "content-length:");
		if (end && (!cl || strlen(end + 4) >= (size_t)atoi(cl + 15))) {
			body = end + 4;
			break;
		}
	}
	if (!body)
		return;
	if (!strncmp(req, "GET /v1/models", 14))
		fake_send(fd, "200 OK", "application/json", "{\"object\":\"list\",\"data\":[{\"id\":\"fake-model\"}]}");
	else if (!strncmp(req, "GET /metrics", 12) && !f->no_metrics)
		fake_send(fd, "200 OK", "text/plain", vllm_text);
	else if (!strncmp(req, "POST /v1/chat/completions", 25))
		fake_stream(f, fd, body);
	else
		fake_send(fd, "404 Not Found", "application/json", "{\"error\":{\"message\":\"no such path\"}}");
}

static void *fake_main(void *arg)
{
	fake *f = arg;
	while (!f->stop) {
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept(f->fd, NULL, NULL);
		if (c < 0)
			continue;
		fake_serve(f, c);
		close(c);
	}
	return NULL;
}

/* A copy of the last generation request's body. */
static void fake_body(fake *f, char *out, size_t cap)
{
	pthread_mutex_lock(&f->mu);
	snprintf(out, cap, "%s", f->last_body);
	pthread_mutex_unlock(&f->mu);
}

static bool fake_start(fake *f)
{
	pthread_mutex_init(&f->mu, NULL);
	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	if (f->fd < 0 || bind(f->fd, (struct sockaddr *)&a, sizeof a) || listen(f->fd, 16) ||
	    getsockname(f->fd, (struct sockaddr *)&a, &al))
		return false;
	f->port = ntohs(a.sin_port);
	return pthread_create(&f->th, NULL, fake_main, f) == 0;
}

/* ---- the chat in a pseudo-terminal ---- */

static pty_app app;

static void start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void start(const char *fmt, ...)
{
	char args[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	if (app.pid > 0 && app.status < 0)
		pty_kill(&app);
	CHECK(pty_start(&app, DIR, args, 40, 130));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar; screen:\n%s", app.screen);
}

static void quit(void)
{
	pty_send(&app, "/quit\r");
	CHECK_(pty_wait_exit(&app, WAIT) == 0, "status %d", app.status);
}

static bool all_of(const char *screen, const void *ctx)
{
	for (const char *const *s = ctx; *s; s++)
		if (!strstr(screen, *s))
			return false;
	return true;
}

static int count(const char *screen, const char *s)
{
	int n = 0;
	for (const char *p = screen; (p = strstr(p, s)); p += strlen(s))
		n++;
	return n;
}

typedef struct at_least {
	const char *s;
	int n;
} at_least;

static bool shows_n(const char *screen, const void *ctx)
{
	const at_least *a = ctx;
	return count(screen, a->s) >= a->n;
}

/* The number after label on the screen, or -1. */
static double figure(const char *screen, const char *label)
{
	const char *s = strstr(screen, label);
	return s ? atof(s + strlen(label)) : -1;
}

static bool hits_above_zero(const char *screen, const void *ctx)
{
	(void)ctx;
	return figure(screen, "cache skipped ") > 0;
}

static bool answered(const char *screen, const void *ctx);

static bool lacks_str(const char *screen, const void *s)
{
	return !strstr(screen, s);
}

/* The server's block map keeps the answers' blocks cached ("used N  cached M"). */
static bool blocks_cached(const char *screen, const void *ctx)
{
	(void)ctx;
	return figure(screen, "  cached ") > 0 && strstr(screen, "blocks 256 x 16 tokens");
}

static void test_fake_server(void)
{
	static fake f;
	CHECK(fake_start(&f));
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d/v1", f.port);
	const char *figs[] = {"/metrics (vLLM names)", "KV usage", "25.0%", "50.0ms", "kv_cache_usage",
			      "not given: ITL mean, KV tokens", "block map: only pagechat serve", "fake-model", NULL};
	CHECK_(pty_wait(&app, all_of, figs, WAIT), "no vLLM figures:\n%s", app.screen);
	pty_send(&app, "Say hi\r");
	CHECK_(pty_wait_ever(&app, has_str, "bot> Hello\u258c", WAIT), "no streaming:\n%s", app.screen);
	const char *cut[] = {"Hello there", "the server closed the stream before the answer ended",
			     "the server sends no token counts", NULL};
	CHECK_(pty_wait(&app, all_of, cut, WAIT), "no cut-off line:\n%s", app.screen);
	char body[4096];
	fake_body(&f, body, sizeof body);
	CHECK_(strstr(body, "\"model\":\"fake-model\"") && strstr(body, STORY) &&
	       strstr(body, "\"content\":\"Say hi\""), "%s", body);
	pty_send(&app, "finish please\r");
	CHECK_(pty_wait_str(&app, "[2 tok, stop", WAIT), "no finished answer:\n%s", app.screen);
	CHECK_(pty_wait(&app, lacks_str, "no token counts", WAIT), "counted tokens, still 'pieces':\n%s", app.screen);
	fake_body(&f, body, sizeof body);
	CHECK(strstr(body, "\"role\":\"assistant\",\"content\":\"Hello there\""));
	CHECK(pty_alive(&app));
	quit();
	f.no_metrics = true;
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d", f.port);
	const char *none[] = {"/metrics: none (HTTP 404)", "the server gives no KV usage", NULL};
	CHECK_(pty_wait(&app, all_of, none, WAIT), "no 'none' line:\n%s", app.screen);
	quit();
	f.stop = true;
	pthread_join(f.th, NULL);
	close(f.fd);
}

static pid_t start_server(int *port)
{
	int err_pipe[2];
	if (pipe(err_pipe))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(err_pipe[1], 2);
		close(err_pipe[0]);
		execl(PAGECHAT_BIN, "pagechat", "serve", "-m", MODEL, "--port", "0", "--api-key", "k", "-c", "512",
		      "--pool-blocks", "256", (char *)NULL);
		_exit(127);
	}
	close(err_pipe[1]);
	char log[4096];
	*port = hc_served_port(err_pipe[0], log, sizeof log, WAIT);
	close(err_pipe[0]);
	return pid;
}

/* The server's own greedy answer to the tab's first turn (its first 12 bytes). */
static void server_answer(int port, char *out, size_t cap)
{
	hresp r;
	out[0] = '\0';
	if (!hc_request(port, "POST", "/v1/chat/completions", "Authorization: Bearer k\r\n",
			"{\"messages\":[{\"role\":\"system\",\"content\":\"" STORY "\"},{\"role\":\"user\",\"content\":"
			"\"Lily went to the park\"}],\"max_tokens\":24,\"temperature\":0}", &r))
		return;
	const char *c = r.status == 200 ? strstr(r.body, "\"content\":\"") : NULL;
	if (c)
		snprintf(out, cap, "%.12s", c + 11);
	hresp_free(&r);
}

static void test_pagechat_server(void)
{
	int port = -1;
	pid_t server = start_server(&port);
	CHECK_(server > 0 && port > 0, "no server port");
	if (port <= 0)
		return;
	char want[32];
	server_answer(port, want, sizeof want);
	CHECK(want[0] != '\0');
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d --api-key k", port);
	const char *panel[] = {"/metrics (pagechat names)", "KV pool (server's", "blocks ", "model stories260K  ctx 512",
			       NULL};
	CHECK_(pty_wait(&app, all_of, panel, WAIT), "no server panel:\n%s", app.screen);
	pty_send(&app, "Lily went to the park\r");
	CHECK_(pty_wait_str(&app, " tok, length", WAIT), "no answer:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, want, WAIT), "answer differs from the server's '%s':\n%s", want, app.screen);
	pty_send(&app, "She saw a dog\r");
	at_least two = {" tok, length", 2};
	CHECK_(pty_wait(&app, shows_n, &two, WAIT), "no second answer:\n%s", app.screen);
	CHECK_(pty_wait(&app, hits_above_zero, NULL, WAIT), "no prefix hits:\n%s", app.screen);
	CHECK_(pty_wait(&app, blocks_cached, NULL, WAIT), "no cached blocks in the map:\n%s", app.screen);
	CHECK_(strstr(app.screen, "\u2593 pinned\n") || strstr(app.screen, "\u2593 pinned "), "legend cut:\n%s",
	       app.screen);
	/* the local panel's words for the pool, metric names whole */
	const char *metr[] = {"KV usage", "TTFT mean", "running", "measured here", "waste", "copy-on-write",
			      "sharing saves", "tok/s", "kv_cache_usage_perc", "time_to_first_token_seconds", NULL};
	CHECK_(pty_wait(&app, all_of, metr, WAIT), "figures missing:\n%s", app.screen);
	quit();

	/* --resume: the chat comes back and goes on */
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d --api-key k --resume", port);
	CHECK_(pty_wait_str(&app, "She saw a dog", WAIT), "not resumed:\n%s", app.screen);
	pty_send(&app, "They ran home\r");
	at_least three = {" tok, length", 3};
	CHECK_(pty_wait(&app, shows_n, &three, WAIT), "no answer after resume:\n%s", app.screen);
	quit();

	/* completion mode: the turns go as one text to /v1/completions (the chat
	 * of before, resumed) */
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d --api-key k --completion --resume", port);
	CHECK(pty_wait_str(&app, "server completion", WAIT) && pty_wait_str(&app, "They ran home", WAIT));
	pty_send(&app, "The sun came out\r");
	at_least four = {" tok, length", 4};
	CHECK_(pty_wait(&app, shows_n, &four, WAIT), "no completion:\n%s", app.screen);
	quit();

	/* a wrong key: one line, the app stays up (the chat of before, resumed) */
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d --api-key wrong --resume", port);
	CHECK(pty_wait_str(&app, "They ran home", WAIT));
	pty_send(&app, "Hi there\r");
	CHECK_(pty_wait_str(&app, "HTTP 401", WAIT), "no 401 line:\n%s", app.screen);
	CHECK(pty_wait_str(&app, "give --api-key KEY", WAIT) && pty_alive(&app));
	/* the panel says the server is up and refused the key, not that it is down */
	CHECK_(pty_wait_str(&app, "(refused the key)", WAIT) && !strstr(app.screen, "(down)"), "panel:\n%s",
	       app.screen);
	quit();

	/* the server dies: the next turn says it cannot reach it; the chat is kept */
	start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d --api-key k --resume", port);
	CHECK(pty_wait_str(&app, "Hi there", WAIT));
	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	pty_send(&app, "Where is Max\r");
	char gone[64];
	snprintf(gone, sizeof gone, "cannot reach http://127.0.0.1:%d", port);
	CHECK_(pty_wait_str(&app, gone, WAIT), "no unreachable line:\n%s", app.screen);
	CHECK_(pty_wait_str(&app, "(down)", WAIT), "panel not down:\n%s", app.screen);
	CHECK(pty_alive(&app));
	quit();
	CHECK(system("grep -rqs 'Where is Max' " DIR "/data/pagechat") == 0);
}

/* A free TCP port on 127.0.0.1 (bound and let go), or -1. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	int port = fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
			   !getsockname(fd, (struct sockaddr *)&a, &al) ? ntohs(a.sin_port) : -1;
	if (fd >= 0)
		close(fd);
	return port;
}

static bool answered(const char *screen, const void *ctx)
{
	(void)ctx;
	return strstr(screen, " tok, length") || strstr(screen, " tok, stop");
}

/* llama.cpp's llama-server (PAGECHAT_LLAMA_SERVER; make test-remote-llamacpp):
 * an answer streams, the panel shows its /metrics under llama.cpp's names. */
static void test_llama_server(const char *bin)
{
	int port = free_port();
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(DIR "/llama-server.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		execl(bin, "llama-server", "-m", MODEL, "--host", "127.0.0.1", "--port", ps, "--metrics", "-c", "512",
		      "-np", "1", (char *)NULL);
		_exit(127);
	}
	bool up = false;
	for (double t0 = pty_now(); !up && pty_now() - t0 < 120; poll(NULL, 0, 200)) {
		hresp r;
		up = hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
		hresp_free(&r);
	}
	CHECK_(up, "llama-server did not come up (see " DIR "/llama-server.log)");
	if (up) {
		start("--config " DIR "/remote.yaml --server http://127.0.0.1:%d", port);
		pty_send(&app, "Lily went to the park\r");
		CHECK_(pty_wait(&app, answered, NULL, WAIT), "no answer from llama-server:\n%s", app.screen);
		const char *figs[] = {"/metrics (llama.cpp names)", "running", "block map: only pagechat serve", NULL};
		CHECK_(pty_wait(&app, all_of, figs, WAIT), "no llama.cpp figures:\n%s", app.screen);
		printf("test_remote: llama-server's screen:\n%s\n", app.screen);
		quit();
	}
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static void test_usage(void)
{
	static run_result r;
	run_pagechat(&r, "chat --server ftp://example.org");
	CHECK_(r.status == 2 && strstr(r.errout, "http://"), "%s", r.errout);
	run_pagechat(&r, "chat --server http://127.0.0.1:9 --serve 0");
	CHECK(r.status == 2 && strstr(r.errout, "--serve cannot go with it"));
	run_pagechat(&r, "chat --completion");
	CHECK(r.status == 2 && strstr(r.errout, "--completion is for --server"));
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/remote.yaml", config, strlen(config)) == 0);
	test_parse_metrics();
	test_parse_other();
	test_usage();
	test_fake_server();
	test_pagechat_server();
	const char *llama = getenv("PAGECHAT_LLAMA_SERVER");
	if (llama && *llama)
		test_llama_server(llama);
	if (app.status < 0 && app.pid > 0)
		pty_kill(&app);
	return TEST_DONE();
}
