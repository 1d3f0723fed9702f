/* link/remote.h: the remote engine: a link to an OpenAI-compatible server
 * (vLLM, SGLang, llama.cpp's llama-server, Ollama, another `pagechat
 * serve`), started with link_start_server (link/link.h).
 *
 * One background thread does all the network work with libcurl (one multi
 * handle: every stream and every scrape at once), so the front-end never
 * waits on the network. Requests go in as chat messages (POST
 * /v1/chat/completions: the server applies its own template) or as one
 * completion text (/v1/completions), always streamed (server-sent events);
 * what comes back are link events: TOKEN events carry text (token -1: a
 * server sends text, not ids), FINISH ends every request exactly once
 * (stop, length, cancelled, or error with one line saying what went wrong:
 * unreachable, refused key, a stream cut off).
 *
 * Beside the requests the thread scrapes the server every refresh period:
 * /metrics (Prometheus text; the figures a panel shows are picked from the
 * names vLLM, SGLang and llama.cpp use, each kept with the metric it came
 * from) and, while the server has it, /pagechat/v1/pool (pagechat's block
 * map). The link's view is the server part of link_view (link_server).
 *
 * This header gives what the thread reads and writes as pure functions
 * (link/remote_view.c), tested alone. */
#ifndef PAGECHAT_REMOTE_H
#define PAGECHAT_REMOTE_H

#include "link/link.h"

/* Fills fig[LF_N] and kind from a /metrics body; ctr (the previous scrape's
 * counters, updated) gives the counters' rates. Figures the text lacks stay
 * have = false. */
typedef struct rem_counters {
	double gen_tokens;       /* the generated-tokens counter's value, -1 none */
	double t;                /* when it was read (s) */
} rem_counters;
void rem_parse_metrics(const char *text, size_t len, link_figure *fig, char *kind, size_t kind_cap,
		       rem_counters *ctr);
/* Fills s (map grown as needed, st's pool figures) from a /pagechat/v1/pool
 * body; -1 with e when it is not one. */
int rem_parse_pool(const char *text, size_t len, link_snapshot *s, err *e);
/* The error line of a failed response: the OpenAI error object's message
 * when the body has one, else the first line of the body; "" when empty. */
void rem_error_text(const char *body, size_t len, char *out, size_t cap);
/* The request's JSON body after its opening brace, without "model" (the
 * thread puts that first): a new string starting "messages" (q->msgs) or
 * "prompt" (q->text), then q->r's sampling and max_tokens. */
char *rem_request_body(const link_request *q, size_t *len);

#endif
