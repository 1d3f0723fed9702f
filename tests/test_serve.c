/* tests/test_serve.c: the HTTP server (app/serve.h) on a real engine over
 * loopback sockets: every endpoint, every error it answers with, greedy
 * answers equal to the solo generation of the same prompt ids, streaming
 * equal to whole answers, n, seeds, stop strings, usage; a client that hangs
 * up mid-stream frees its blocks; the queue limit; and slow, oversized and
 * malformed requests refused without stalling anyone else. Run under TSan
 * by make test-threads (the engine, libmicrohttpd's threads and this one). */
#include "app/http_req.h"
#include "app/serve.h"
#include "engine/gen.h"
#include "models/json.h"
#include "tests/http_client.h"
#include "tests/test.h"

#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#define MODEL "../shared/models/stories260K.gguf"
#define KEY "Authorization: Bearer sekrit\r\n"
#define TIMEOUT_S 2          /* the server's idle and body timeout */
#define MAX_QUEUE 4
#define MAX_CONN 12

static int port;
static llama_model *model;
static tok *tk;

/* ---- helpers ---- */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* POST body to path with the key; the parsed JSON answer (NULL if none). */
static json_doc *post(const char *path, const char *body, int *status)
{
	hresp r;
	*status = hc_request(port, "POST", path, KEY, body, &r) ? r.status : 0;
	err e = {0};
	json_doc *d = json_parse(r.body, r.body_len, &e);
	hresp_free(&r);
	return d;
}

static const json *at(const json *o, const char *key, size_t i)
{
	const json *v = json_get(o, key);
	return v && v->type == JSON_ARR && i < v->n ? &v->items[i] : NULL;
}

static const char *str_of(const json *o, const char *key)
{
	const json *v = o ? json_get(o, key) : NULL;
	return v && v->type == JSON_STR ? v->str : "";
}

static double num_of(const json *o, const char *key)
{
	const json *v = o ? json_get(o, key) : NULL;
	return v && v->type == JSON_NUM ? v->num : -1;
}

/* The error of a response: its param and code, checked, and its message. */
static void check_error(const char *what, const char *path, const char *body, int want, const char *param,
			const char *needle)
{
	int status;
	json_doc *d = post(path, body, &status);
	const json *er = d ? json_get(json_root(d), "error") : NULL;
	CHECK_(status == want && er, "%s: status %d, want %d", what, status, want);
	const char *msg = str_of(er, "message");
	CHECK_(!param || !strcmp(str_of(er, "param"), param), "%s: param '%s', want '%s'", what,
	       str_of(er, "param"), param);
	CHECK_(!needle || strstr(msg, needle), "%s: message '%s' lacks '%s'", what, msg, needle);
	json_free(d);
}

/* A metric's value from /metrics (the first line starting with name). */
static double metric(const char *name)
{
	return hc_metric(port, NULL, name);
}

/* Waits until nothing runs and no block is in use (everything freed). */
/* Whether metric name reaches v within 4 s. */
static bool at_least(const char *name, double v)
{
	for (int i = 0; i < 400; i++) {
		if (metric(name) >= v)
			return true;
		poll(NULL, 0, 10);
	}
	return false;
}

static bool settled(void)
{
	for (int i = 0; i < 400; i++) {
		if (metric("vllm:num_requests_running") == 0 && metric("vllm:num_requests_waiting") == 0 &&
		    metric("vllm:kv_cache_usage_perc") == 0)
			return true;
		poll(NULL, 0, 10);
	}
	return false;
}

/* ---- references ---- */

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* The greedy text of ids (n_gen tokens at most), as the engine would stream it. */
static void greedy_text(const int32_t *ids, int n, int n_gen, char *out, size_t cap)
{
	static int32_t got[1024];
	samp_params sp = samp_default_params();
	sp.temp = 0;
	gen_params gp = {.samp = sp, .n_predict = n_gen, .n_ctx = 512, .block_tokens = 16};
	gen_stats st;
	err e = {0};
	got[0] = 0;
	CHECK(gen_run(model, tk, ids, n, &gp, collect, got, &st, &e) == 0);
	int k = tok_detokenize(tk, got + 1, got[0], false, out, cap);
	CHECK(k >= 0);
}

static char ref_completion[4096], ref_chat[4096];
static int n_chat_prompt;

static void make_refs(void)
{
	int32_t ids[256];
	const char *p = "Once upon a time, a little dog";
	int n = tok_encode(tk, p, strlen(p), TOK_ADD_BOS, ids, 256);
	greedy_text(ids, n, 40, ref_completion, sizeof ref_completion);
	conv c;
	conv_init(&c, "t", "", "Tom liked trains.");
	conv_add(&c, CONV_USER, "One day Tom", 11);
	conv_model cm;
	conv_turn turn = {0};
	err e = {0};
	conv_model_init(&cm, tk, TMPL_NONE, 1 << 20, 16, CONV_REFUSE);
	CHECK(conv_turn_start(&c, &cm, 0, &turn, &e) == 0);
	n_chat_prompt = turn.n_prompt;
	greedy_text(turn.prompt, turn.n_prompt, 30, ref_chat, sizeof ref_chat);
	conv_turn_deinit(&turn);
	conv_deinit(&c);
}

/* ---- the read-only endpoints ---- */

static void test_info(void)
{
	hresp r;
	CHECK(hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200 && strstr(r.body, "\"ok\""));
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v1/models", NULL, NULL, &r) && r.status == 401);
	CHECK(strstr(r.body, "invalid_api_key") != NULL);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v1/models", "Authorization: Bearer sekrix\r\n", NULL, &r) && r.status == 401);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v1/models", KEY, NULL, &r) && r.status == 200);
	CHECK(strstr(r.body, "\"id\":\"stories260K\"") && strstr(r.body, "\"max_model_len\":512"));
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v1/models/stories260K", KEY, NULL, &r) && r.status == 200);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v1/models/gpt-4", KEY, NULL, &r) && r.status == 404);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/metrics", NULL, NULL, &r) && r.status == 200);
	CHECK(strstr(r.body, "# TYPE vllm:time_to_first_token_seconds histogram") &&
	      strstr(r.body, "vllm:inter_token_latency_seconds_bucket{model_name=\"stories260K\",le=\"+Inf\"}") &&
	      strstr(r.body, "pagechat:kv_waste_ratio{layout=\"contiguous\"}") &&
	      strstr(r.body, "pagechat:kv_blocks{state=\"cached\"}") &&
	      strstr(r.body, "vllm:spec_decode_num_accepted_tokens_per_pos_total"));
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/pagechat/v1/pool", NULL, NULL, &r) && r.status == 401);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/pagechat/v1/pool", KEY, NULL, &r) && r.status == 200);
	err e = {0};
	json_doc *d = json_parse(r.body, r.body_len, &e);
	const json *o = d ? json_root(d) : NULL, *blocks = o ? json_get(o, "blocks") : NULL;
	const json *counts = o ? json_get(o, "counts") : NULL;
	CHECK_(blocks && blocks->type == JSON_ARR && counts, "%s", e.msg);
	double sum = 0;
	for (size_t i = 0; counts && i < counts->n; i++)
		sum += counts->items[i].num;
	CHECK(blocks && num_of(o, "n_blocks") == (double)blocks->n && sum == (double)blocks->n);
	CHECK(num_of(o, "block_tokens") == 16 && blocks && blocks->n > 0 && blocks->items[0].n == 3);
	json_free(d);
	hresp_free(&r);
}

/* ---- generation ---- */

static const char *choice_text(const json *o, size_t i, bool chat)
{
	const json *c = at(o, "choices", i);
	return chat ? str_of(c ? json_get(c, "message") : NULL, "content") : str_of(c, "text");
}

static void test_greedy(void)
{
	int st;
	json_doc *d = post("/v1/completions", "{\"model\":\"stories260K\",\"prompt\":\"Once upon a time, a little "
			   "dog\",\"max_tokens\":40,\"temperature\":0}", &st);
	const json *o = d ? json_root(d) : NULL;
	CHECK_(st == 200 && !strcmp(choice_text(o, 0, false), ref_completion), "completion '%s' vs '%s'",
	       choice_text(o, 0, false), ref_completion);
	CHECK(o && !strcmp(str_of(o, "object"), "text_completion") && !strncmp(str_of(o, "id"), "cmpl-", 5));
	const json *u = o ? json_get(o, "usage") : NULL;
	CHECK(num_of(u, "completion_tokens") == 40 && num_of(u, "total_tokens") == num_of(u, "prompt_tokens") + 40);
	CHECK(!strcmp(str_of(at(o, "choices", 0), "finish_reason"), "length"));
	json_free(d);
	d = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"system\",\"content\":\"Tom liked trains.\"},"
		 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"One day \"},{\"type\":\"text\","
		 "\"text\":\"Tom\"}]}],\"max_tokens\":30,\"temperature\":0}", &st);
	o = d ? json_root(d) : NULL;
	CHECK_(st == 200 && !strcmp(choice_text(o, 0, true), ref_chat), "chat '%s' vs '%s'", choice_text(o, 0, true),
	       ref_chat);
	u = o ? json_get(o, "usage") : NULL;
	CHECK_EQ_INT((long long)num_of(u, "prompt_tokens"), n_chat_prompt);
	const json *det = u ? json_get(u, "prompt_tokens_details") : NULL;
	CHECK(num_of(det, "cached_tokens") >= 0);
	CHECK(!strcmp(str_of(at(o, "choices", 0) ? json_get(at(o, "choices", 0), "message") : NULL, "role"),
		      "assistant"));
	json_free(d);
}

/* The SSE events of a streamed answer: the joined text of choice 0, the
 * number of choices that finished, whether [DONE] came, the usage seen. */
typedef struct sse {
	char text[2][4096];
	int n_finished, n_role;
	bool done;
	double completion_tokens;
	int n_events, n_counted;  /* chunks; those with a usage object */
	bool counts_rise;         /* the usage's completion_tokens never went down */
} sse;

static void parse_sse(const char *body, bool chat, sse *s)
{
	memset(s, 0, sizeof *s);
	s->completion_tokens = -1;
	s->counts_rise = true;
	for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
		const char *end = strstr(p, "\n\n");
		if (!end)
			break;
		if (!strncmp(p + 6, "[DONE]", 6)) {
			s->done = true;
			continue;
		}
		err e = {0};
		json_doc *d = json_parse(p + 6, (size_t)(end - p - 6), &e);
		const json *o = d ? json_root(d) : NULL, *c = o ? at(o, "choices", 0) : NULL;
		int i = (int)num_of(c, "index");
		const json *delta = c ? json_get(c, chat ? "delta" : "text") : NULL;
		const char *t = chat ? str_of(delta, "content") : delta && delta->type == JSON_STR ? delta->str : "";
		if (i >= 0 && i < 2)
			strncat(s->text[i], t, sizeof s->text[i] - strlen(s->text[i]) - 1);
		s->n_role += chat && *str_of(delta, "role");
		s->n_finished += c && json_get(c, "finish_reason")->type == JSON_STR;
		const json *u = o ? json_get(o, "usage") : NULL;
		s->n_events++;
		if (u && u->type == JSON_OBJ) {
			double k = num_of(u, "completion_tokens");
			s->counts_rise &= k >= s->completion_tokens;
			s->completion_tokens = k;
			s->n_counted++;
		}
		json_free(d);
	}
}

static void test_stream(void)
{
	hresp r;
	CHECK(hc_request(port, "POST", "/v1/chat/completions", KEY, "{\"messages\":[{\"role\":\"system\",\"content\":"
			 "\"Tom liked trains.\"},{\"role\":\"user\",\"content\":\"One day Tom\"}],\"max_tokens\":30,"
			 "\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &r));
	CHECK(r.status == 200 && strstr(r.head, "text/event-stream"));
	sse s;
	parse_sse(r.body, true, &s);
	CHECK_(!strcmp(s.text[0], ref_chat), "streamed '%s' vs '%s'", s.text[0], ref_chat);
	CHECK(s.done && s.n_finished == 1 && s.n_role == 1 && s.completion_tokens == 30);
	hresp_free(&r);
	CHECK(hc_request(port, "POST", "/v1/completions", KEY, "{\"prompt\":\"Once upon a time, a little dog\","
			 "\"max_tokens\":40,\"temperature\":0,\"stream\":true}", &r));
	parse_sse(r.body, false, &s);
	CHECK_(!strcmp(s.text[0], ref_completion), "streamed '%s' vs '%s'", s.text[0], ref_completion);
	CHECK(s.done && s.n_finished == 1 && s.completion_tokens == -1);
	hresp_free(&r);
	/* vLLM's continuous_usage_stats: every chunk counts the tokens so far
	 * (the chat's client reads tokens, not pieces of text) */
	CHECK(hc_request(port, "POST", "/v1/completions", KEY, "{\"prompt\":\"Once upon a time, a little dog\","
			 "\"max_tokens\":40,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true,"
			 "\"continuous_usage_stats\":true}}", &r));
	parse_sse(r.body, false, &s);
	CHECK_(!strcmp(s.text[0], ref_completion), "streamed '%s' vs '%s'", s.text[0], ref_completion);
	CHECK_(s.n_events > 2 && s.n_counted == s.n_events && s.counts_rise && s.completion_tokens == 40,
	       "%d chunks, %d with usage, rising %d, last %g", s.n_events, s.n_counted, s.counts_rise,
	       s.completion_tokens);
	hresp_free(&r);
	CHECK(hc_request(port, "POST", "/v1/completions", KEY, "{\"prompt\":\"x\",\"stream\":true,"
			 "\"stream_options\":{\"continuous_usage_stats\":3}}", &r));
	CHECK_(r.status == 400 && strstr(r.body, "stream_options.continuous_usage_stats"), "%d %s", r.status, r.body);
	hresp_free(&r);
}

static void test_n_seed_stop(void)
{
	const char *body = "{\"prompt\":\"The cat\",\"max_tokens\":24,\"n\":2,\"seed\":42,\"temperature\":1.0}";
	int st1, st2, st3;
	json_doc *a = post("/v1/completions", body, &st1), *b = post("/v1/completions", body, &st2);
	json_doc *c = post("/v1/completions", "{\"prompt\":\"The cat\",\"max_tokens\":24,\"n\":2,\"seed\":43}", &st3);
	const json *oa = a ? json_root(a) : NULL, *ob = b ? json_root(b) : NULL, *oc = c ? json_root(c) : NULL;
	CHECK(st1 == 200 && st2 == 200 && st3 == 200);
	CHECK(oa && json_get(oa, "choices")->n == 2 && num_of(at(oa, "choices", 1), "index") == 1);
	CHECK_(!strcmp(choice_text(oa, 0, false), choice_text(ob, 0, false)) &&
	       !strcmp(choice_text(oa, 1, false), choice_text(ob, 1, false)), "the same seed, the same answers");
	CHECK(strcmp(choice_text(oa, 0, false), choice_text(oa, 1, false)) ||
	      strcmp(choice_text(oa, 0, false), choice_text(oc, 0, false)));
	CHECK(num_of(json_get(oa, "usage"), "completion_tokens") == 48);
	json_free(a);
	json_free(b);
	json_free(c);
	/* a stop string from the greedy answer cuts it there */
	char stop[16], body2[256];
	const char *cut = strstr(ref_completion + 5, " ");
	CHECK(cut != NULL);
	if (!cut)
		return;
	snprintf(stop, sizeof stop, "%.6s", cut);
	snprintf(body2, sizeof body2, "{\"prompt\":\"Once upon a time, a little dog\",\"max_tokens\":40,"
		 "\"temperature\":0,\"stop\":[\"zzzz\",\"%s\"]}", stop);
	a = post("/v1/completions", body2, &st1);
	oa = a ? json_root(a) : NULL;
	size_t keep = (size_t)(strstr(ref_completion, stop) - ref_completion);
	CHECK_(st1 == 200 && strlen(choice_text(oa, 0, false)) == keep &&
	       !strncmp(choice_text(oa, 0, false), ref_completion, keep), "stop '%s': '%s'", stop,
	       choice_text(oa, 0, false));
	CHECK(!strcmp(str_of(at(oa, "choices", 0), "finish_reason"), "stop"));
	json_free(a);
}

/* ---- errors ---- */

static void test_errors(void)
{
	const char *C = "/v1/completions", *CH = "/v1/chat/completions";
	check_error("bad JSON", C, "{\"prompt\": \"x\",", 400, NULL, "not valid JSON");
	check_error("not an object", C, "[1,2]", 400, NULL, "JSON object");
	check_error("unknown model", C, "{\"model\":\"gpt-4\",\"prompt\":\"x\"}", 404, "model", "gpt-4");
	check_error("no prompt", C, "{\"max_tokens\":3}", 400, "prompt", NULL);
	check_error("no messages", CH, "{\"messages\":[]}", 400, "messages", NULL);
	check_error("a tool message", CH, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400,
		    "messages[0].role", NULL);
	check_error("a late system message", CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
		    "{\"role\":\"system\",\"content\":\"y\"}]}", 400, "messages[1].role", NULL);
	check_error("an image part", CH, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
		    400, "messages[0].content", "text");
	check_error("temperature", C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature", NULL);
	check_error("n", C, "{\"prompt\":\"x\",\"n\":0}", 400, "n", NULL);
	check_error("max_tokens", C, "{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "max_tokens", NULL);
	check_error("stop", C, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop", NULL);
	check_error("stop[1]", C, "{\"prompt\":\"x\",\"stop\":[\"a\",7]}", 400, "stop[1]", NULL);
	check_error("tools", CH, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", 400,
		    "tools", "not supported");
	check_error("logprobs", C, "{\"prompt\":\"x\",\"logprobs\":3}", 400, "logprobs", NULL);
	check_error("ignore_eos", C, "{\"prompt\":\"x\",\"ignore_eos\":1}", 400, "ignore_eos", "true or false");
	check_error("a token id", C, "{\"prompt\":[1,2,99999]}", 400, "prompt", "vocabulary");
	char big[8000];
	int n = snprintf(big, sizeof big, "{\"prompt\":\"");
	for (int i = 0; i < 200; i++)
		n += snprintf(big + n, sizeof big - (size_t)n, "cat ran ");
	snprintf(big + n, sizeof big - (size_t)n, "\"}");
	check_error("context", C, big, 400, "prompt", "maximum context length is 512 tokens");
	check_error("context with max_tokens", C, "{\"prompt\":\"x\",\"max_tokens\":600}", 400, "max_tokens",
		    "512 tokens");
	/* bodies over the limit: said in Content-Length, or just sent */
	char huge[6000];
	memset(huge, ' ', sizeof huge - 1);
	huge[sizeof huge - 1] = '\0';
	huge[0] = '{';
	huge[sizeof huge - 2] = '}';
	check_error("body size", C, huge, 413, NULL, "4096");
	hresp r;
	CHECK(hc_request(port, "DELETE", "/v1/models", KEY, NULL, &r) && r.status == 405);
	hresp_free(&r);
	CHECK(hc_request(port, "GET", "/v2/nothing", KEY, NULL, &r) && r.status == 404 && strstr(r.body, "\"error\""));
	hresp_free(&r);
	CHECK(hc_request(port, "POST", C, NULL, "{\"prompt\":\"x\"}", &r) && r.status == 401);
	hresp_free(&r);
}

/* A streaming request on a connection of its own; its fd after the first
 * event arrived (the request runs), or -1. */
static int open_stream(int max_tokens)
{
	char body[256], req[512];
	/* ignore_eos and 8 answers of 480 tokens: no request ends before its
	 * client hangs up (the engine does not wait for a client that reads
	 * nothing) */
	int bn = snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":%d,\"stream\":true,"
			  "\"n\":8,\"temperature\":1.0,\"ignore_eos\":true}", max_tokens);
	int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY
			 "Content-Length: %d\r\n\r\n%s", bn, body);
	int fd = hc_connect(port);
	if (fd < 0 || !hc_send(fd, req, (size_t)n)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* until an event: the headers alone can come before the engine has the
	 * request, and a hang-up then cancels nothing that ran (this check
	 * failed about once in five make test runs) */
	char buf[4096];
	size_t got = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (got < sizeof buf - 1 && poll(&p, 1, 10000) > 0) {
		ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
		buf[got] = '\0';
		if (strstr(buf, "\ndata: "))
			return fd;
	}
	close(fd);
	return -1;
}

static void test_queue_and_cancel(void)
{
	int fds[MAX_QUEUE];
	for (int i = 0; i < MAX_QUEUE; i++)
		CHECK((fds[i] = open_stream(480)) >= 0);
	CHECK(metric("pagechat:http_requests_in_flight") == MAX_QUEUE);
	check_error("queue", "/v1/completions", "{\"prompt\":\"x\"}", 429, NULL, "in flight");
	const char *aborts = "vllm:request_success_total{model_name=\"stories260K\",finished_reason=\"abort\"}";
	double before = metric("pagechat:http_disconnects_total");
	for (int i = 0; i < MAX_QUEUE; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	/* the engine's figures are a snapshot it refreshes as it goes: one
	 * taken before the requests ran can still say "idle" (settled() alone
	 * passed then, about once in ten runs), so first wait for the aborts */
	CHECK_(at_least(aborts, MAX_QUEUE), "the hung-up clients' requests were cancelled");
	CHECK_(settled(), "hung-up clients' requests were cancelled and their blocks freed");
	CHECK(metric("pagechat:http_disconnects_total") >= before + MAX_QUEUE);
	CHECK(metric("pagechat:http_requests_in_flight") == 0);
	/* a whole (not streamed) answer's client hanging up is noticed too */
	int fd = hc_connect(port);
	const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"n\":8,\"ignore_eos\":true}";
	char req[512];
	int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY
			 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	CHECK(hc_send(fd, req, (size_t)n));
	bool ran = false;
	for (int i = 0; i < 200 && !ran; i++) {
		ran = metric("vllm:num_requests_running") > 0;
		poll(NULL, 0, 5);
	}
	close(fd);
	CHECK_(ran && settled(), "a non-streaming request whose client left was cancelled");
}

/* ---- slow, oversized, malformed ---- */

static void test_slow(void)
{
	/* headers that never end, and a body that trickles */
	int slow[3];
	for (int i = 0; i < 3; i++) {
		slow[i] = hc_connect(port);
		const char *part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
		CHECK(slow[i] >= 0 && hc_send(slow[i], part, strlen(part)));
	}
	int trickle = hc_connect(port);
	const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY "Content-Length: 100\r\n\r\n{";
	CHECK(hc_send(trickle, head, strlen(head)));
	double t0 = now();
	hresp r;
	CHECK(hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200);
	hresp_free(&r);
	CHECK_(now() - t0 < 0.75 * TIMEOUT_S, "other clients are served while slow ones hang (%.2f s)", now() - t0);
	bool closed = false;
	for (int i = 0; i < 30 && !closed; i++) {
		poll(NULL, 0, 150);
		closed = !hc_send(trickle, " ", 1) || hc_closed_within(trickle, 0);
	}
	CHECK_(closed, "a body still trickling in after the timeout gets the connection closed");
	close(trickle);
	for (int i = 0; i < 3; i++) {
		CHECK_(hc_closed_within(slow[i], 3000 * TIMEOUT_S), "unfinished headers are dropped after the timeout");
		close(slow[i]);
	}
	CHECK(metric("pagechat:http_slow_requests_total") >= 1);
}

static void test_limits(void)
{
	/* more connections than allowed: the extra one is closed at once. The
	 * allowed ones must all still be open when it was (each has sent part
	 * of a request); if one was not, it was refused for an earlier test's
	 * connection still being let go (seen under heavy load), and the round
	 * is made again. */
	const char *part = "GET /health HTTP/1.1\r\n";
	bool all_open = false, refused = false;
	for (int round = 0; round < 5 && !all_open; round++) {
		int fds[MAX_CONN];
		for (int i = 0; i < MAX_CONN; i++)
			if ((fds[i] = hc_connect(port)) >= 0)
				hc_send(fds[i], part, strlen(part));
		poll(NULL, 0, 100);
		int extra = hc_connect(port);
		refused = extra < 0 || hc_closed_within(extra, 1000);
		all_open = true;
		for (int i = 0; i < MAX_CONN; i++)
			all_open = all_open && fds[i] >= 0 && !hc_closed_within(fds[i], 0);
		if (extra >= 0)
			close(extra);
		for (int i = 0; i < MAX_CONN; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		poll(NULL, 0, 200);
	}
	CHECK_(all_open, "%d connections stay open together", MAX_CONN);
	CHECK_(refused, "connection %d is refused", MAX_CONN + 1);
	hresp r;
	CHECK(hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200);
	hresp_free(&r);
	/* headers past the connection's memory, and garbage */
	static char hdr[100000];
	memcpy(hdr, "X-Big: ", 7);
	memset(hdr + 7, 'a', sizeof hdr - 10);
	memcpy(hdr + sizeof hdr - 3, "\r\n", 3);
	CHECK(hc_request(port, "GET", "/health", hdr, NULL, &r) && (r.status == 431 || r.status == 413));
	hresp_free(&r);
	/* malformed requests are refused: 400, or the connection closed */
	const char *bad[] = {"GARBAGE\r\n\r\n", "GET /health HTTP/1.1\r\nNo colon here\r\n\r\n",
			     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
			     "GET /health HTTP/9.9\r\n\r\n"};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		int fd = hc_connect(port);
		bool sent = hc_send(fd, bad[i], strlen(bad[i]));
		bool refused = hc_read(fd, &r, 2000) ? r.status >= 400 : hc_closed_within(fd, 0) || !sent;
		CHECK_(refused, "malformed request %zu: status %d", i, r.status);
		hresp_free(&r);
		close(fd);
	}
	/* a chunked body that grows past the limit: the connection is closed */
	int fd = hc_connect(port);
	const char *h = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY "Transfer-Encoding: chunked\r\n\r\n";
	bool ok = hc_send(fd, h, strlen(h));
	static char chunk[1100];
	memset(chunk, ' ', sizeof chunk);
	for (int i = 0; i < 6 && ok; i++)
		ok = hc_send(fd, "400\r\n", 5) && hc_send(fd, chunk, 0x400) && hc_send(fd, "\r\n", 2);
	CHECK(hc_closed_within(fd, 2000));
	close(fd);
	CHECK(metric("pagechat:http_oversized_bodies_total") == 1);
}

/* ---- clients that hold the server (#42 findings 3, 4, 11) ---- */

/* Slowloris: heads sent a byte every 100 ms are never idle for
 * libmicrohttpd's timeout (they were held open for as long as the bytes
 * came), but a whole head must come within TIMEOUT_S of the connection's
 * opening: each is closed by then (the bound here is twice that and more,
 * only to prove "not held for ever"), and the server answers again. */
static void test_slowloris(void)
{
	enum { N = MAX_CONN - 2 }; /* most of the connections the server takes (the last test's may still
	                              be let go) */
	int fd[N];
	bool closed[N] = {false};
	const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
	double t0 = now(), before = metric("pagechat:http_slow_requests_total");
	for (int i = 0; i < N; i++)
		CHECK((fd[i] = hc_connect(port)) >= 0 && hc_send(fd[i], head, strlen(head)));
	int n_closed = 0;
	while (n_closed < N && now() - t0 < 4 * TIMEOUT_S + 2) {
		poll(NULL, 0, 100);
		for (int i = 0; i < N; i++)
			if (!closed[i] && (fd[i] < 0 || hc_closed_within(fd[i], 0) || !hc_send(fd[i], "a", 1))) {
				closed[i] = true;
				n_closed++;
			}
	}
	CHECK_(n_closed == N, "%d of %d heads trickling a byte per 100 ms closed within %d s (their deadline: %d s)",
	       n_closed, N, 4 * TIMEOUT_S + 2, TIMEOUT_S);
	for (int i = 0; i < N; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	CHECK(metric("pagechat:http_slow_requests_total") >= before + N);
	/* the server answers again once it has let the connections go */
	bool ok = false;
	for (int i = 0; i < 100 && !ok; i++) {
		hresp r;
		ok = hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
		hresp_free(&r);
		if (!ok)
			poll(NULL, 0, 50);
	}
	CHECK_(ok, "/health after the slow heads were closed");
}

/* A connection whose receive buffer is small (a stalled reader fills it at once). */
static int connect_small(int port_)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 2048;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) ||
			connect(fd, (struct sockaddr *)&a, sizeof a))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Streams whose clients stop reading: every --max-queue slot was held for
 * as long as they stayed connected (other requests got 429). Each is
 * cancelled once it has not taken its bytes for TIMEOUT_S: the slots and
 * the blocks come back. On the second server, whose long model name (in
 * every event) makes a stream of 4 x 480 tokens larger than the kernel's
 * socket buffers (4 MiB here): a smaller one is taken whole by them, and
 * its request ends. */
static void test_stalled_streams(int port2)
{
	int saved = port;
	port = port2;
	const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"stream\":true,\"n\":4,"
			   "\"temperature\":1.0,\"ignore_eos\":true}";
	char req[512];
	int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY
			 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	double before = metric("pagechat:http_stalled_streams_total");
	double slow_before = metric("pagechat:http_slow_requests_total");
	int fds[MAX_QUEUE];
	for (int i = 0; i < MAX_QUEUE; i++)
		CHECK((fds[i] = connect_small(port)) >= 0 && hc_send(fds[i], req, (size_t)n));
	CHECK_(at_least("pagechat:http_requests_in_flight", MAX_QUEUE), "the stalled streams run");
	check_error("queue held by stalled streams", "/v1/completions", "{\"prompt\":\"x\"}", 429, NULL, "in flight");
	bool freed = false;
	double t0 = now();
	while (!freed && now() - t0 < 5 * TIMEOUT_S + 5) {
		poll(NULL, 0, 100);
		freed = metric("pagechat:http_requests_in_flight") == 0;
	}
	CHECK_(freed, "streams whose clients read nothing still hold %g slots after %d s (the write deadline: %d s)",
	       metric("pagechat:http_requests_in_flight"), 5 * TIMEOUT_S + 5, TIMEOUT_S);
	CHECK_(settled(), "the stalled streams' blocks went back to the pool");
	/* a stream whose last bytes are handed over has libmicrohttpd's own idle
	 * timeout again, which may close it first (then counted as slow) */
	double stalled = metric("pagechat:http_stalled_streams_total") - before;
	double slow = metric("pagechat:http_slow_requests_total") - slow_before;
	CHECK_(stalled >= 1 && stalled + slow >= MAX_QUEUE, "stalled streams counted: %g, and as slow %g", stalled, slow);
	int st;
	json_doc *d = post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", &st);
	CHECK_(st == 200, "a request after the stalled streams: status %d", st);
	json_free(d);
	for (int i = 0; i < MAX_QUEUE; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	port = saved;
}

/* A client that shuts down its sending side after its request (TCP
 * half-close: nc -N, some HTTP/1.0 clients) is answered, whole and
 * streamed: its end-of-stream was taken for a hang-up and the request
 * cancelled (an empty reply). The half-close follows the request at once;
 * the server decides when the generation starts, so a test client
 * descheduled between the two sends may lose the race: three tries. */
static void test_half_close(void)
{
	for (int stream = 0; stream < 2; stream++) {
		char body[256], req[512];
		snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time, a little dog\",\"max_tokens\":40,"
			 "\"temperature\":0%s}", stream ? ",\"stream\":true" : "");
		int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" KEY
				 "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
		bool answered = false;
		int status = 0;
		for (int attempt = 0; attempt < 3 && !answered; attempt++) {
			int fd = hc_connect(port);
			hresp r = {0};
			if (fd >= 0 && hc_send(fd, req, (size_t)n) && !shutdown(fd, SHUT_WR) && hc_read(fd, &r, 20000)) {
				status = r.status;
				if (stream) {
					sse e;
					parse_sse(r.body, false, &e);
					answered = r.status == 200 && e.done && !strcmp(e.text[0], ref_completion);
				} else {
					err er = {0};
					json_doc *d = json_parse(r.body, r.body_len, &er);
					answered = r.status == 200 && d && !strcmp(choice_text(json_root(d), 0, false),
										   ref_completion);
					json_free(d);
				}
			}
			hresp_free(&r);
			if (fd >= 0)
				close(fd);
		}
		CHECK_(answered, "a half-closed client's %s request: status %d", stream ? "streamed" : "whole", status);
	}
}

/* ---- limits checked before any tokens are made (#42 finding 5, 11) ---- */

/* On a second server: a chat template (rendering is per message), 4
 * sequences at once, bodies up to 4 MiB. */
static void test_limits_before_tokens(int port2)
{
	int saved = port;
	port = port2;
	/* n above --parallel: the engine's refusal came back as HTTP 500 */
	check_error("n above the engine's sequences", "/v1/completions", "{\"prompt\":\"x\",\"n\":8}", 400, "n",
		    "at most 4");
	/* 32,000 messages (1.2 MB) were rendered and tokenized before the
	 * context was checked: 97-126 s of CPU. Refused now at once; before, the
	 * read below (20 s) ran out first. */
	enum { N_MSGS = 32000 };
	size_t cap = (size_t)N_MSGS * 48 + 64, len = 0;
	char *big = xmalloc(cap);
	len += (size_t)snprintf(big, cap, "{\"messages\":[");
	for (int i = 0; i < N_MSGS; i++)
		len += (size_t)snprintf(big + len, cap - len, "%s{\"role\":\"%s\",\"content\":\"the cat sat\"}",
					i ? "," : "", i % 2 ? "assistant" : "user");
	snprintf(big + len, cap - len, "]}");
	check_error("32000 messages", "/v1/chat/completions", big, 400, "messages", "32000 messages");
	/* a megabyte of text: at least its bytes / the longest token's tokens */
	len = (size_t)snprintf(big, cap, "{\"prompt\":\"");
	for (int i = 0; i < 250000; i++)
		len += (size_t)snprintf(big + len, cap - len, "cat ");
	snprintf(big + len, cap - len, "\"}");
	check_error("a megabyte of prompt", "/v1/completions", big, 400, "prompt", "bytes of text");
	len = (size_t)snprintf(big, cap, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
	for (int i = 0; i < 250000; i++)
		len += (size_t)snprintf(big + len, cap - len, "dog ");
	snprintf(big + len, cap - len, "\"}]}");
	check_error("a megabyte in one message", "/v1/chat/completions", big, 400, "messages", "bytes of text");
	free(big);
	/* within the limits, the same server answers */
	int st;
	json_doc *d = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
			   "\"max_tokens\":3,\"n\":4}", &st);
	CHECK_(st == 200, "a chat within the limits: %d", st);
	json_free(d);
	port = saved;
}

/* ---- n against the pool (#42 finding 6) ---- */

/* Engines with pools of 1 to 64 blocks (of 4 tokens), 16 sequences at
 * once, and requests with n = 1 to 16 (the server has no beams: n is its
 * width): every request is answered (a read that waits 20 s would fail it),
 * with its n choices or a refusal that says what is needed and what the
 * pool has. */
static void test_pool_grid(void)
{
	int saved = port, answered = 0, refused = 0, unsaid = 0;
	for (int64_t blocks = 1; blocks <= 64; blocks++) {
		core_params cp = {.model = model, .tok = tk, .pool_blocks = blocks, .block_tokens = 4, .n_ctx = 512,
				  .step_tokens = 64, .max_running = 16};
		err e = {0};
		elink *g = link_start_local(&cp, &e);
		if (!g) {
			unsaid += !strstr(e.msg, "block");
			continue;
		}
		serve_params p = {.port = 0, .api_key = "sekrit", .timeout_s = TIMEOUT_S, .max_queue = 4,
				  .samp = samp_default_params()};
		serve *s = serve_start(&p, &(serve_engine){.link = g, .tok = tk, .fam = TMPL_NONE,
							   .model_name = "stories260K"}, &e);
		CHECK_(s != NULL, "%s", e.msg);
		port = s ? serve_port(s) : 0;
		for (int n = 1; s && n <= 16; n++) {
			char body[160];
			snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time there was\",\"max_tokens\":12,\"n\":%d}",
				 n);
			int st;
			json_doc *d = post("/v1/completions", body, &st);
			const json *o = d ? json_root(d) : NULL, *ch = o ? json_get(o, "choices") : NULL;
			const char *msg = str_of(o ? json_get(o, "error") : NULL, "message");
			bool ok = st == 200 && ch && ch->type == JSON_ARR && ch->n == (size_t)n;
			bool said = (st == 400 || st == 500) && (strstr(msg, "but the pool has") ||
								 strstr(msg, "can be freed") || strstr(msg, "KV blocks"));
			CHECK_(ok || said, "pool %lld, n %d: status %d, '%s'", (long long)blocks, n, st, msg);
			answered += ok;
			refused += said;
			unsaid += !ok && !said;
			json_free(d);
		}
		serve_stop(s);
		link_free(g);
	}
	port = saved;
	CHECK_(unsaid == 0, "%d requests neither answered nor refused with the arithmetic", unsaid);
	printf("pools 1..64 x n 1..16 over HTTP: %d answered, %d refused\n", answered, refused);
}

int main(void)
{
	err e = {0};
	model = llama_open(MODEL, &(llama_params){.max_tokens = 256}, &e);
	gguf_file *f = gguf_open(MODEL, &e);
	tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	CHECK_(model && tk, "%s", e.msg);
	if (!model || !tk)
		return TEST_DONE();
	make_refs();
	core_params cp = {.model = model, .tok = tk, .pool_blocks = 256, .block_tokens = 16, .n_ctx = 512,
			  .step_tokens = 256, .check = true};
	elink *g = link_start_local(&cp, &e);
	samp_params sp = samp_default_params();
	sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.temp = 1;
	serve_params p = {.port = 0, .api_key = "sekrit", .max_connections = MAX_CONN, .timeout_s = TIMEOUT_S,
			  .max_body = 4096, .max_queue = MAX_QUEUE, .samp = sp};
	serve *s = g ? serve_start(&p, &(serve_engine){.link = g, .tok = tk, .fam = TMPL_NONE,
							 .model_name = "stories260K"}, &e) : NULL;
	CHECK_(s != NULL, "%s", e.msg);
	if (s) {
		port = serve_port(s);
		test_info();
		test_greedy();
		test_stream();
		test_n_seed_stop();
		test_errors();
		test_queue_and_cancel();
		test_slow();
		test_limits();
		test_slowloris();
		test_half_close();
		CHECK(settled());
	}
	/* a second engine and server: a chat template, 4 sequences at once */
	cp.max_running = 4;
	elink *g2 = link_start_local(&cp, &e);
	p.max_body = 4 << 20;
	static char long_name[4001];
	memset(long_name, 'm', sizeof long_name - 1);
	serve *s2 = g2 ? serve_start(&p, &(serve_engine){.link = g2, .tok = tk, .fam = TMPL_CHATML,
							   .model_name = long_name}, &e) : NULL;
	CHECK_(s2 != NULL, "%s", e.msg);
	if (s2) {
		test_limits_before_tokens(serve_port(s2));
		test_stalled_streams(serve_port(s2));
	}
	serve_stop(s2);
	link_free(g2);
	test_pool_grid();
	serve_stop(s);
	link_free(g);
	tok_free(tk);
	llama_free(model);
	return TEST_DONE();
}
