/* tests/fuzz/fuzz_http_server.c: the whole HTTP server (app/serve.h) and
 * every endpoint behind it, on arbitrary bytes from a client.
 *
 * Set-up (once): the engine on stories260K (context 128, 64 blocks) and the
 * server on a free loopback port (1 s timeout, 16 KiB bodies, 8 requests in
 * flight). Input: byte 0 bit 0 says whether to half-close the connection
 * after sending (the request ends there; a generation then sees its client
 * leave and is cancelled), else the connection stays open and is read until
 * the server closes it or goes silent (100 ms before a first answer, 10 ms
 * after one); bits 1-2 cut the rest into 1-4 writes. The rest is what the client sends: requests, pipelined or
 * not, as malformed as the fuzzer likes. Checked: everything the server
 * answers parses as HTTP responses, each with a 1xx-5xx status, and the
 * server's own JSON answers parse (errors as {"error": {...}}); afterwards
 * the server still answers /health, and once the connection is gone every
 * request has ended and no KV block is held. */
#include "tests/fuzz/fuzz.h"

#include "app/serve.h"
#include "models/json.h"
#include "models/llama.h"
#include "tests/http_client.h"

#include <signal.h>

static elink *g;
static serve *srv;
static int port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	signal(SIGPIPE, SIG_IGN);
	char path[4096];
	snprintf(path, sizeof path, "%s/models/stories260K.gguf", fuzz_shared());
	err e = {0};
	llama_model *m = llama_open(path, &(llama_params){.max_tokens = 128}, &e);
	const tok *t = fuzz_vocab(2);
	core_params cp = {.model = m, .tok = t, .pool_blocks = 64, .block_tokens = 16, .n_ctx = 128,
			  .step_tokens = 128};
	g = m ? link_start_local(&cp, &e) : NULL;
	samp_params sp = samp_default_params();
	serve_params p = {.port = 0, .timeout_s = 1, .max_body = 16 << 10, .max_queue = 8, .max_connections = 32,
			  .samp = sp};
	srv = g ? serve_start(&p, &(serve_engine){.link = g, .tok = t, .fam = TMPL_NONE, .model_name = "m"}, &e)
		: NULL;
	if (!srv) {
		fprintf(stderr, "fuzz_http_server: %s\n", e.msg);
		abort();
	}
	port = serve_port(srv);
	return 0; /* the engine and the server live as long as the process */
}

/* One response read: its status is sane and a JSON answer of ours parses
 * (unless a HEAD request was sent: its answer has no body, so the reader
 * cannot tell where the next one starts). */
static void check_response(const hresp *r, bool head)
{
	FUZZ_CHECK(r->status >= 100 && r->status <= 599);
	const char *ct = hc_header(r->head, "Content-Type");
	if (head || !ct || strncmp(ct, "application/json", 16))
		return;
	err e = {0};
	json_doc *d = json_parse(r->body, r->body_len, &e);
	FUZZ_CHECK(d != NULL);
	if (d && r->status >= 400) {
		const json *er = json_get(json_root(d), "error");
		FUZZ_CHECK(er && er->type == JSON_OBJ && json_get(er, "message"));
	}
	json_free(d);
}

static void send_input(int fd, const uint8_t *p, size_t n, int pieces)
{
	for (int i = 0; i < pieces && n > 0; i++) {
		size_t k = i == pieces - 1 ? n : n / (size_t)(pieces - i);
		if (!hc_send(fd, p, k))
			return;
		p += k;
		n -= k;
	}
}

/* Waits until nothing runs and no block is held; false after 5 s. */
static bool settled(void)
{
	link_view v = {0};
	bool ok = false;
	for (int i = 0; i < 500 && !ok; i++) {
		link_view_get(g, &v);
		const core_stats *st = &v.snap.st;
		ok = st->n_running == 0 && st->n_waiting == 0 && st->blocks_used == 0;
		if (!ok)
			poll(NULL, 0, 10);
	}
	link_view_deinit(&v);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	bool half_close = data[0] & 1;
	int pieces = 1 + ((data[0] >> 1) & 3);
	int fd = hc_connect(port);
	FUZZ_CHECK(fd >= 0);
	if (fd < 0)
		return 0;
	send_input(fd, data + 1, size - 1, pieces);
	if (half_close)
		shutdown(fd, SHUT_WR);
	hresp r;
	/* open: 100 ms for a first answer, then 10 ms of silence ends the reading
	 * (the connection stays alive; more would only cost time) */
	for (int k = 0; k < 64 && hc_read(fd, &r, half_close ? 3000 : k ? 10 : 100); k++) {
		check_response(&r, memmem(data, size, "HEAD", 4) != NULL);
		hresp_free(&r);
	}
	hresp_free(&r);
	close(fd);
	bool alive = hc_request(port, "GET", "/health", NULL, NULL, &r) && r.status == 200;
	if (!alive) {
		char st[4096] = "";
		FILE *fp = fopen("/proc/self/status", "r");
		size_t n = fp ? fread(st, 1, sizeof st - 1, fp) : 0;
		st[n] = '\0';
		if (fp)
			fclose(fp);
		const char *th = strstr(st, "Threads:");
		fprintf(stderr, "fuzz_http_server: /health: status %d, errno %d (%s), %.14s\n", r.status, errno,
			strerror(errno), th ? th : "?");
	}
	FUZZ_CHECK(alive);
	hresp_free(&r);
	FUZZ_CHECK(settled());
	return 0;
}
