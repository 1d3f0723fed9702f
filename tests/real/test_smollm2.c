/* tests/real/test_smollm2.c: SmolLM2-135M-Instruct, a real chat model, in its
 * F32 copy (every weight of the Q4_1 file dequantized) against llama.cpp on
 * the same file (../shared/testdata/smollm2_chat_f32.tsv): the chat template
 * and tokenizer give llama.cpp's prompt ids (and its splitting of digits,
 * space runs and newlines), the greedy answers are llama.cpp's
 * ids exactly, and the top-32 logits after each prompt agree within 1e-4
 * relative, whole and in chunks. The model comes from `make test-real`
 * (fetched, then copied to F32; PAGECHAT_SMOLLM2_F32 names another copy); a
 * missing or non-F32 file fails, never skips. */
#include "models/json.h"
#include "models/tmpl.h"
#include "models/tok.h"
#include "tests/real/real.h"

#include <stdlib.h>
#include <unistd.h>

#define TABLE "../shared/testdata/smollm2_chat_f32.tsv"
#define REMAKE "make test-real makes it from the fetched Q4_1 file"

/* One user message rendered with the model's template and tokenized: the
 * table's prompt ids. */
static void check_prompt(const tok *tk, enum tmpl_family fam, const real_row *row, int r)
{
	err e = {0};
	json_doc *d = json_parse(row->prompt_json, strlen(row->prompt_json), &e);
	CHECK_(d && json_root(d)->type == JSON_STR, "row %d: prompt_json: %s", r, e.msg);
	if (!d)
		return;
	const json *s = json_root(d);
	tmpl_msg msg = {.role = "user", .content = s->str, .content_len = s->len};
	tmpl_prompt p = {0};
	int32_t ids[REAL_MAX_IDS];
	CHECK_(tmpl_render(fam, &msg, 1, true, &p, &e) == 0, "row %d: %s", r, e.msg);
	int n = tmpl_encode(&p, tk, ids, REAL_MAX_IDS);
	CHECK_(n == row->n_prompt && !memcmp(ids, row->prompt, (size_t)n * sizeof *ids),
	       "row %d: the rendered prompt gives %d ids, llama.cpp %d (or different ones)", r, n, row->n_prompt);
	tmpl_prompt_deinit(&p);
	json_free(d);
}

/* Texts whose splitting tells SmolLM2's pre-tokenizer ("smollm": every digit
 * alone, then GPT-2's pattern) from the Llama 3 rules: the ids llama.cpp
 * gives (its llama-server /tokenize on this file, no BOS). */
static const struct {
	const char *text;
	int32_t ids[32];
	int n;
} split_refs[] = {
	{"In 2007, 3.14159 and 1,000,000 items",
	 {788, 216, 34, 32, 32, 39, 28, 216, 35, 30, 33, 36, 33, 37, 41, 284, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32,
	  3723}, 27},
	{"  \n    Version 3, 29 June 2007\n\n  x",
	 {256, 472, 13867, 216, 35, 28, 216, 34, 41, 4019, 216, 34, 32, 32, 39, 8866, 1792}, 17},
	{"It's 12:30 -- they'll  42  go!", {1589, 506, 216, 33, 34, 42, 35, 32, 3009, 502, 3060, 256, 36, 34, 216, 685, 17},
	 17},
	{"def f(x):\n\treturn x  +  10\n", {1604, 275, 24, 104, 727, 198, 197, 5406, 1792, 216, 1232, 256, 33, 32, 198}, 15},
	{"a\n\n\n   b  \t 7", {81, 1116, 11181, 278, 256, 197, 216, 39}, 8},
};

static void check_splitting(const tok *tk)
{
	for (size_t i = 0; i < ARRAY_LEN(split_refs); i++) {
		int32_t ids[64];
		int n = tok_encode(tk, split_refs[i].text, strlen(split_refs[i].text), 0, ids, 64);
		CHECK_(n == split_refs[i].n && !memcmp(ids, split_refs[i].ids, (size_t)n * sizeof *ids),
		       "'%s': %d ids, llama.cpp %d (or other ones)", split_refs[i].text, n, split_refs[i].n);
	}
	CHECK_(tok_warning(tk) == NULL, "the tokenizer says: %s", tok_warning(tk));
}

int main(void)
{
	const char *path = getenv("PAGECHAT_SMOLLM2_F32") ? getenv("PAGECHAT_SMOLLM2_F32")
							   : "build/models/smollm2-f32.gguf";
	err e = {0};
	tsv t;
	CHECK_(tsv_load(&t, TABLE) == 0 && t.n_rows >= 4, "%s: cannot read the reference table", TABLE);
	CHECK_(access(path, R_OK) == 0, "%s is missing (%s)", path, REMAKE);
	llama_model *m = access(path, R_OK) == 0 ? llama_open(path, NULL, &e) : NULL;
	CHECK_(m || access(path, R_OK), "%s: %s", path, e.msg);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	enum tmpl_family fam = TMPL_NONE;
	if (!m || !tk || !real_all_f32(m, REMAKE) || tmpl_from_gguf(llama_file(m), &fam, &e))
		goto done;
	CHECK_EQ_INT(fam, TMPL_CHATML);
	check_splitting(tk);
	for (int r = 0; r < t.n_rows; r++) {
		real_row row;
		char what[64];
		snprintf(what, sizeof what, "smollm2 row %d", r);
		CHECK_(real_row_read(&t, r, &row), "%s: malformed", what);
		check_prompt(tk, fam, &row, r);
		double worst = real_check_top(m, &row, 0, 1e-4, what);
		real_check_top(m, &row, 5, 1e-4, what);
		int diff = real_check_greedy(m, &row, 0, what);
		printf("%s: %d prompt ids, %d greedy ids %s, top-32 logits within %.2g of the largest\n", what,
		       row.n_prompt, row.n_greedy, diff < 0 ? "equal" : "DIFFER", worst);
	}
done:
	tok_free(tk);
	llama_free(m);
	tsv_free(&t);
	return TEST_DONE();
}
