/* tests/test_limits.c: the resource limits of the readers of untrusted input.
 *
 * Each limit (GGUF_MAX_*, TOK_MAX_*, JSON_MAX_*, BATCH_MAX_REQUESTS) is
 * checked on both sides where that is cheap: a file just past it fails with a
 * message naming the field and the limit, one at it still works. Files that
 * claim huge sizes they do not have are refused before anything is allocated
 * for them (the fuzz targets run with libFuzzer's -malloc_limit_mb to catch
 * any allocation that is not). Run from the repository root. */
#include "app/batch_req.h"
#include "models/gguf.h"
#include "models/json.h"
#include "models/tmpl.h"
#include "models/tok.h"
#include "tests/fuzz/gguf_gen.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define NAME "limits.gguf"

static bool has(const err *e, const char *word)
{
	return word == NULL || strstr(e->msg, word) != NULL;
}

/* Opening w's file must fail with a message naming the file and both words. */
static void expect_fail(const gw *w, const char *w1, const char *w2, int line)
{
	err e = {""};
	gguf_file *f = gguf_open_mem(w->p, w->n, NAME, &e);
	CHECK_(f == NULL, "line %d: opened", line);
	CHECK_(strncmp(e.msg, NAME ": ", strlen(NAME) + 2) == 0 && has(&e, w1) && has(&e, w2),
	       "line %d: message '%s' should name '%s' and '%s'", line, e.msg, w1, w2 ? w2 : "");
	gguf_close(f);
}

/* tok_new on w's file must fail naming both words. */
static void expect_tok_fail(const gw *w, const char *w1, const char *w2, int line)
{
	err e = {""};
	gguf_file *f = gguf_open_mem(w->p, w->n, NAME, &e);
	CHECK_(f != NULL, "line %d: %s", line, e.msg);
	tok *t = f ? tok_new(f, &e) : NULL;
	CHECK_(f == NULL || (t == NULL && has(&e, w1) && has(&e, w2)),
	       "line %d: message '%s' should name '%s' and '%s'", line, e.msg, w1, w2);
	tok_free(t);
	gguf_close(f);
}

static void test_gguf_counts(void)
{
	gw w;
	gw_begin(&w, 3);
	w.n_kv = GGUF_MAX_KV + 1;        /* claimed, not there */
	gw_end(&w, 32, 0);
	expect_fail(&w, "metadata entries", "limit", __LINE__);
	free(w.p);
	gw_begin(&w, 3);
	w.n_tensors = GGUF_MAX_TENSORS + 1;
	gw_end(&w, 32, 0);
	expect_fail(&w, "tensors", "limit", __LINE__);
	free(w.p);
	/* exactly GGUF_MAX_KV entries open */
	gw_begin(&w, 3);
	for (int i = 0; i < GGUF_MAX_KV; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%05x", i);
		gw_key(&w, key, GGUF_U8);
		gw_u8(&w, (uint8_t)i);
	}
	gw_end(&w, 32, 0);
	err e = {""};
	gguf_file *f = gguf_open_mem(w.p, w.n, NAME, &e);
	CHECK_(f != NULL, "%s", e.msg);
	if (f)
		CHECK_EQ_INT(gguf_n_kv(f), GGUF_MAX_KV);
	gguf_close(f);
	free(w.p);
}

static void test_gguf_arrays(void)
{
	gw w;
	gw_begin(&w, 3);
	gw_kv_arr(&w, "big.numbers", GGUF_U8, GGUF_MAX_ARR_ITEMS + 1);
	gw_end(&w, 32, 0);
	expect_fail(&w, "big.numbers", "limit", __LINE__);
	free(w.p);
	gw_begin(&w, 3);
	gw_kv_arr(&w, "big.strings", GGUF_STR, GGUF_MAX_STR_ITEMS + 1);
	gw_end(&w, 32, 0);
	expect_fail(&w, "big.strings", "limit", __LINE__);
	free(w.p);
	/* under the limit but more than the file holds: refused before the
	 * offsets table is allocated */
	gw_begin(&w, 3);
	gw_kv_arr(&w, "short.strings", GGUF_STR, GGUF_MAX_STR_ITEMS);
	gw_str(&w, "x", 1);
	gw_end(&w, 32, 0);
	expect_fail(&w, "short.strings", "past the end", __LINE__);
	free(w.p);
}

static void test_gguf_strings(void)
{
	gw w;
	gw_begin(&w, 3);
	gw_key(&w, "big.string", GGUF_STR);
	size_t at = w.n;
	gw_u64(&w, GGUF_MAX_STR_BYTES + 1);
	size_t n = w.n + GGUF_MAX_STR_BYTES + 1;
	w.p = xrealloc(w.p, n);
	memset(w.p + w.n, 'a', n - w.n);
	w.n = w.cap = n;
	gw_end(&w, 32, 0);
	expect_fail(&w, "big.string", "limit", __LINE__);
	/* one byte less opens (the byte after it is ignored) */
	for (int i = 0; i < 8; i++)
		w.p[at + i] = (uint8_t)((GGUF_MAX_STR_BYTES >> (8 * i)) & 0xff);
	err e = {""};
	gguf_file *f = gguf_open_mem(w.p, w.n, NAME, &e);
	CHECK_(f != NULL, "%s", e.msg);
	gguf_str s = {0};
	CHECK(f && gguf_get_str(f, "big.string", &s, &e) == 0 && s.len == GGUF_MAX_STR_BYTES);
	gguf_close(f);
	free(w.p);
	/* claimed, not there: truncated */
	gw_begin(&w, 3);
	gw_kv_str(&w, "short.string", "abc", 3);
	w.p[w.n - 3 - 8 + 6] = 0x7f;     /* length 2^54-ish */
	gw_end(&w, 32, 0);
	expect_fail(&w, "short.string", "truncated", __LINE__);
	free(w.p);
}

/* A byte-level BPE vocabulary: n_empty empty tokens after "a" and "b", one
 * token of long_len bytes when long_len > 0, n_merges empty merges plus
 * "a b". */
static void bpe_vocab(gw *w, uint64_t n_empty, size_t long_len, uint64_t n_merges)
{
	gw_begin(w, 3);
	gw_kv_str(w, "tokenizer.ggml.model", "gpt2", 4);
	gw_kv_str(w, "tokenizer.ggml.pre", "qwen2", 5);
	gw_kv_arr(w, "tokenizer.ggml.tokens", GGUF_STR, 3 + n_empty + (long_len > 0));
	gw_str(w, "a", 1);
	gw_str(w, "b", 1);
	gw_str(w, "ab", 2);
	if (long_len) {
		char *s = xmalloc(long_len);
		memset(s, 'x', long_len);
		gw_str(w, s, long_len);
		free(s);
	}
	size_t at = w->n;
	w->p = xrealloc(w->p, w->n + 8 * n_empty + 64);
	memset(w->p + at, 0, 8 * n_empty);
	w->n += 8 * n_empty;
	w->cap = w->n + 64;
	gw_kv_arr(w, "tokenizer.ggml.merges", GGUF_STR, 1 + n_merges);
	gw_str(w, "a b", 3);
	at = w->n;
	w->p = xrealloc(w->p, w->n + 8 * n_merges + 64);
	memset(w->p + at, 0, 8 * n_merges);
	w->n += 8 * n_merges;
	w->cap = w->n + 64;
	gw_end(w, 32, 0);
}

static void test_tok_limits(void)
{
	gw w;
	bpe_vocab(&w, TOK_MAX_VOCAB - 3 + 1, 0, 0);
	expect_tok_fail(&w, "tokenizer.ggml.tokens", "limit", __LINE__);
	free(w.p);
	bpe_vocab(&w, 0, 0, TOK_MAX_MERGES);
	expect_tok_fail(&w, "tokenizer.ggml.merges", "limit", __LINE__);
	free(w.p);
	bpe_vocab(&w, 0, TOK_MAX_TOKEN_BYTES + 1, 0);
	expect_tok_fail(&w, "tokenizer.ggml.tokens[3]", "limit", __LINE__);
	free(w.p);
	/* at the limits: a token of TOK_MAX_TOKEN_BYTES works, and so does text
	 * that spells it */
	bpe_vocab(&w, 0, TOK_MAX_TOKEN_BYTES, 0);
	err e = {""};
	gguf_file *f = gguf_open_mem(w.p, w.n, NAME, &e);
	tok *t = f ? tok_new(f, &e) : NULL;
	CHECK_(t != NULL, "%s", e.msg);
	if (t) {
		int32_t ids[4];
		CHECK_EQ_INT(tok_encode(t, "ab", 2, 0, ids, 4), 1);
		CHECK_EQ_INT(ids[0], 2);
		size_t n;
		CHECK(tok_text(t, 3, &n) && n == TOK_MAX_TOKEN_BYTES);
		/* a text over TOK_MAX_TEXT_BYTES is refused unread (the buffer is
		 * one byte: ASan would see a read) */
		char one = 'a';
		CHECK_EQ_INT(tok_encode(t, &one, TOK_MAX_TEXT_BYTES + 1, 0, NULL, 0), -1);
		tmpl_prompt p = {.text = &one, .len = TOK_MAX_TEXT_BYTES + 1};
		CHECK_EQ_INT(tmpl_encode(&p, t, NULL, 0), -1);
	}
	tok_free(t);
	gguf_close(f);
	free(w.p);
}

/* "[0,0,...]" with n values in all (the array counts as one). */
static char *zeros(size_t n_values, size_t *len)
{
	size_t n = n_values - 1, k = 0;
	char *s = xmalloc(2 * n + 2);
	s[k++] = '[';
	for (size_t i = 0; i < n; i++) {
		s[k++] = '0';
		s[k++] = i + 1 < n ? ',' : ']';
	}
	*len = k;
	return s;
}

static void test_json_limits(void)
{
	char deep[2 * JSON_MAX_DEPTH + 4];
	for (int depth = JSON_MAX_DEPTH; depth <= JSON_MAX_DEPTH + 1; depth++) {
		memset(deep, '[', (size_t)depth);
		memset(deep + depth, ']', (size_t)depth);
		err e = {""};
		json_doc *d = json_parse(deep, 2 * (size_t)depth, &e);
		if (depth <= JSON_MAX_DEPTH)
			CHECK_(d != NULL, "depth %d: %s", depth, e.msg);
		else
			CHECK_(d == NULL && has(&e, "deep"), "depth %d: '%s'", depth, e.msg);
		json_free(d);
	}
	for (size_t n = JSON_MAX_VALUES; n <= JSON_MAX_VALUES + 1; n++) {
		size_t len;
		char *s = zeros(n, &len);
		err e = {""};
		json_doc *d = json_parse(s, len, &e);
		if (n <= JSON_MAX_VALUES)
			CHECK_(d != NULL && json_root(d)->n == n - 1, "%zu values: %s", n, e.msg);
		else
			CHECK_(d == NULL && has(&e, "values") && has(&e, "line 1"), "%zu values: '%s'", n,
			       e.msg);
		json_free(d);
		free(s);
	}
}

static void test_batch_limits(void)
{
	static const char line[] = "{\"prompt_ids\": []}\n";
	size_t k = sizeof line - 1, n = (size_t)BATCH_MAX_REQUESTS + 1;
	char *text = xmalloc(n * k);
	for (size_t i = 0; i < n; i++)
		memcpy(text + i * k, line, k);
	samp_params sp = {.temp = 1, .top_p = 1, .repeat_penalty = 1};
	batch_req *reqs;
	int n_reqs, bad_line;
	err e = {""};
	int rc = batch_reqs_parse(text, n * k, NULL, 512, &sp, 16, &reqs, &n_reqs, &bad_line, &e);
	CHECK_(rc == -1 && bad_line == BATCH_MAX_REQUESTS + 1 && has(&e, "requests"),
	       "rc %d, line %d: '%s'", rc, bad_line, e.msg);
	free(text);
}

int main(void)
{
	test_gguf_counts();
	test_gguf_arrays();
	test_gguf_strings();
	test_tok_limits();
	test_json_limits();
	test_batch_limits();
	return TEST_DONE();
}
