/* tests/fuzz/fuzz_http_req.c: the OpenAI request bodies (app/http_req.h) on
 * arbitrary bytes.
 *
 * Input: byte 0 bit 0 picks chat completions or completions, bits 1-3 the
 * vocabulary (fuzz_vocab), bits 4-7 the template family (modulo TMPL_COUNT);
 * the rest is the body. What the parser accepts must be runnable as it
 * stands: counts and sampling values in range, stop strings non-empty,
 * NUL-free and short, a chat with at least one message; its prompt must
 * build into ids inside the vocabulary (or fail with a reason). What it
 * refuses must say why and leave the request zeroed. */
#include "tests/fuzz/fuzz.h"

#include "app/http_req.h"

#include <math.h>

static void check_ok(const http_req *r, enum http_kind kind, const samp_params *dflt)
{
	FUZZ_CHECK(r->kind == kind && r->model != NULL);
	FUZZ_CHECK(r->n >= 1 && r->n <= HTTP_MAX_N && r->max_tokens >= 0);
	FUZZ_CHECK(r->n_stop >= 0 && r->n_stop <= HTTP_MAX_STOP);
	for (int i = 0; i < r->n_stop; i++)
		FUZZ_CHECK(r->stop[i] && r->stop[i][0] && strlen(r->stop[i]) <= HTTP_MAX_STOP_BYTES);
	const samp_params *s = &r->samp;
	FUZZ_CHECK(isfinite(s->temp) && s->temp >= 0 && s->temp <= 100);
	FUZZ_CHECK(s->top_p > 0 && s->top_p <= 1 && s->min_p >= 0 && s->min_p <= 1);
	FUZZ_CHECK(s->repeat_penalty > 0 && isfinite(s->repeat_penalty) && s->top_k >= 0);
	FUZZ_CHECK(r->seed_given || s->seed == dflt->seed);
	FUZZ_CHECK(!r->include_usage || r->stream);
	if (kind == HTTP_CHAT)
		FUZZ_CHECK(r->chat.n_msgs >= 1 && r->chat.system != NULL);
	else
		FUZZ_CHECK((r->prompt != NULL) != (r->prompt_ids != NULL) && (r->prompt || r->n_prompt_ids > 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	enum http_kind kind = data[0] & 1 ? HTTP_COMPLETION : HTTP_CHAT;
	const tok *t = fuzz_vocab((data[0] >> 1) & 7);
	enum tmpl_family fam = (enum tmpl_family)((data[0] >> 4) % TMPL_COUNT);
	char *body = fuzz_copy(data + 1, size - 1, false);
	samp_params dflt = {.temp = 1, .top_k = 0, .top_p = 1, .min_p = 0, .repeat_penalty = 1,
			    .repeat_last_n = 64, .seed = 12345};
	http_req r;
	char param[64];
	err e = {0};
	if (http_req_parse(body, size - 1, kind, &dflt, &r, param, sizeof param, &e)) {
		FUZZ_CHECK(e.msg[0] && r.model == NULL && r.n_stop == 0 && r.prompt == NULL);
		FUZZ_CHECK(memchr(param, '\0', sizeof param) != NULL);
		free(body);
		return 0;
	}
	check_ok(&r, kind, &dflt);
	int32_t *ids;
	int n;
	if (http_req_prompt(&r, t, fam, &ids, &n, &e) == 0) {
		FUZZ_CHECK(n >= 0 && (n == 0 || ids));
		for (int i = 0; i < n; i++)
			FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
		free(ids);
	} else {
		FUZZ_CHECK(e.msg[0] && ids == NULL);
	}
	FUZZ_NOTE("kind %d: %d ids", kind, n);
	http_req_deinit(&r);
	free(body);
	return 0;
}
