/* tests/real/real.h: checking a real model's F32 copy against llama.cpp's
 * reference table (../shared/testdata/NAME_f32.tsv: prompt_json, prompt_ids,
 * greedy_ids, top32_logits). Header-only, for tests/real/test_*.c.
 *
 * The measures (../shared/testdata/README.md): with F32 weights and F32 K/V
 * both engines compute in f32, so the greedy ids must be equal and the 32
 * largest logits at the last prompt position within a relative tolerance
 * (1e-4 unless a model's test says why not). Relative here: |pagechat -
 * llama.cpp| <= tol x the largest |logit| of the 32 (a logit near zero has
 * no scale of its own; the table prints 6 digits, 5e-6 of the largest at
 * worst). */
#ifndef PAGECHAT_TESTS_REAL_H
#define PAGECHAT_TESTS_REAL_H

#include "engine/gen.h"
#include "engine/sample.h"
#include "models/llama.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <string.h>

#define REAL_MAX_IDS 1024
#define REAL_TOP 32

typedef struct real_row {
	const char *prompt_json;
	int32_t prompt[REAL_MAX_IDS], greedy[REAL_MAX_IDS];
	int n_prompt, n_greedy;
	int32_t top_id[REAL_TOP];
	float top[REAL_TOP];
	int n_top;
} real_row;

/* Row r of table t (columns as above) into *row; false when malformed. */
static inline bool real_row_read(const tsv *t, int r, real_row *row)
{
	row->prompt_json = t->rows[r][0];
	row->n_prompt = tsv_ints(t->rows[r][1], row->prompt, REAL_MAX_IDS);
	row->n_greedy = tsv_ints(t->rows[r][2], row->greedy, REAL_MAX_IDS);
	row->n_top = 0;
	for (const char *p = t->rows[r][3]; p && *p && row->n_top < REAL_TOP;) {
		char *end;
		long id = strtol(p, &end, 10);
		if (*end != ':')
			return false;
		row->top_id[row->n_top] = (int32_t)id;
		row->top[row->n_top++] = strtof(end + 1, &end);
		p = *end ? end + 1 : end;
	}
	return row->n_prompt > 0 && row->n_greedy > 0 && row->n_top == REAL_TOP;
}

/* Every tensor of m's file is f32: else the copy is not what the references
 * were made on, and the test says how to make it. */
static inline bool real_all_f32(const llama_model *m, const char *remake)
{
	const gguf_file *f = llama_file(m);
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		if (t->type != DT_F32) {
			CHECK_(0, "%s: tensor '%s' is %s, not f32: this is not an F32 copy (%s)", gguf_name(f), t->name,
			       dtype_name(t->type), remake);
			return false;
		}
	}
	CHECK(1);
	return true;
}

/* The logits after row's prompt, fed in chunks of chunk tokens (0: whole),
 * against the reference's top 32: the same argmax, and each within tol of
 * the largest. Returns the worst |diff| / largest. */
static inline double real_check_top(llama_model *m, const real_row *row, int chunk, double tol, const char *what)
{
	int nv = llama_hp(m)->n_vocab;
	float *got = xmalloc((size_t)nv * sizeof *got);
	err e = {0};
	double worst = 0, scale = 0;
	CHECK_(gen_logits(m, row->prompt, row->n_prompt, chunk, got, &e) == 0, "%s: %s", what, e.msg);
	for (int i = 0; i < row->n_top; i++)
		scale = fmax(scale, fabs(row->top[i]));
	for (int i = 0; i < row->n_top; i++) {
		int32_t id = row->top_id[i];
		CHECK_(id >= 0 && id < nv, "%s: reference id %d out of the vocabulary", what, id);
		if (id >= 0 && id < nv)
			worst = fmax(worst, fabs(got[id] - row->top[i]) / scale);
	}
	CHECK_(worst <= tol, "%s (chunk %d): top-32 logits differ by %.3g of the largest (> %g)", what, chunk, worst,
	       tol);
	CHECK_(samp_argmax(got, nv) == row->top_id[0], "%s (chunk %d): argmax %d, llama.cpp's %d", what, chunk,
	       samp_argmax(got, nv), row->top_id[0]);
	free(got);
	return worst;
}

static inline bool real_collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* Greedy decoding of row's prompt (F32 K/V, prefill in chunks of chunk
 * tokens, 0: whole) for as many tokens as the reference has: the same ids.
 * Returns the index of the first difference, or -1. */
static inline int real_check_greedy(llama_model *m, const real_row *row, int chunk, const char *what)
{
	int32_t got[REAL_MAX_IDS + 1] = {0};
	gen_params gp = {.samp = samp_default_params(), .n_predict = row->n_greedy, .n_ctx = 2048,
			 .block_tokens = 16, .chunk_tokens = chunk};
	gp.samp.temp = 0;
	gen_stats st;
	err e = {0};
	CHECK_(gen_run(m, NULL, row->prompt, row->n_prompt, &gp, real_collect, got, &st, &e) == 0, "%s: %s", what,
	       e.msg);
	int diff = got[0] == row->n_greedy ? -1 : got[0];
	for (int i = 0; i < MIN(got[0], row->n_greedy) && diff < 0; i++)
		if (got[1 + i] != row->greedy[i])
			diff = i;
	CHECK_(diff < 0, "%s (chunk %d): greedy ids differ from llama.cpp's at token %d of %d", what, chunk, diff,
	       row->n_greedy);
	return diff;
}

#endif
