/* tests/fuzz/fuzz_batch.c: `pagechat batch` request files on arbitrary bytes.
 *
 * The input is a whole JSONL file for batch_reqs_parse() with the
 * stories260K tokenizer (a model vocabulary of 512). What it accepts must be
 * in range for the engine (ids, counts, sampling values); what it refuses
 * must say why and, for a bad line, which line that is. */
#include "tests/fuzz/fuzz.h"

#include "app/batch_req.h"

#include <math.h>

#define STORIES 2            /* fuzz_vocab index of stories260K */

static size_t count_lines(const uint8_t *p, size_t n)
{
	size_t k = 1;
	for (size_t i = 0; i < n; i++)
		k += p[i] == '\n';
	return k;
}

static void check_req(const batch_req *r, int n_vocab, const samp_params *dflt)
{
	FUZZ_CHECK(r->n >= 1 && r->n <= 64);
	FUZZ_CHECK(r->max_tokens >= 1 && r->max_tokens <= 1 << 20);
	FUZZ_CHECK(r->n_prompt >= 0 && (r->prompt != NULL));
	for (int i = 0; i < r->n_prompt; i++)
		FUZZ_CHECK(r->prompt[i] >= 0 && r->prompt[i] < n_vocab);
	FUZZ_CHECK(isfinite(r->samp.temp) && r->samp.temp >= 0 && r->samp.temp <= 100);
	FUZZ_CHECK(r->samp.top_k == dflt->top_k && r->samp.top_p == dflt->top_p);
	FUZZ_CHECK(r->n_stops >= 0 && (r->n_stops == 0 || r->stops != NULL));
	for (int i = 0; i < r->n_stops; i++)
		FUZZ_CHECK(r->stops[i] != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const tok *t = fuzz_vocab(STORIES);
	samp_params dflt = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
			    .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 7};
	int n_vocab = tok_n_vocab(t);
	batch_req *reqs;
	int n, bad_line;
	err e = {0};
	if (batch_reqs_parse((const char *)data, size, t, n_vocab, &dflt, 128, &reqs, &n,
			     &bad_line, &e) < 0) {
		FUZZ_CHECK(e.msg[0] && reqs == NULL && n == 0);
		FUZZ_CHECK(bad_line >= 0 && (size_t)bad_line <= count_lines(data, size));
		return 0;
	}
	FUZZ_CHECK(n >= 1 && (size_t)n <= count_lines(data, size));
	for (int i = 0; i < n; i++)
		check_req(&reqs[i], n_vocab, &dflt);
	batch_reqs_free(reqs, n);
	return 0;
}
