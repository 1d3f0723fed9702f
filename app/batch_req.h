/* app/batch_req.h: the request lines of `pagechat batch` (JSONL), parsed and
 * validated before anything runs.
 *
 * One JSON object per line: {"prompt": "...", "max_tokens": 64, "n": 1},
 * or "prompt_ids" (an array of token ids) instead of "prompt", plus optional
 * "temperature", "seed", "stop" (a string or an array of strings) and
 * "beams" (beam search of that width: that many completions, best first). Blank
 * lines are skipped; any other key is an error. Split out of cmd_batch.c so
 * tests and the fuzz targets can call it. Pure functions; any thread. */
#ifndef PAGECHAT_BATCH_REQ_H
#define PAGECHAT_BATCH_REQ_H

#include "base/base.h"
#include "engine/sample.h"
#include "models/tok.h"

/* Requests one file may hold: more is a mistake, not a workload (and it
 * keeps the per-request bookkeeping in int range). */
#define BATCH_MAX_REQUESTS (1 << 20)

/* One parsed request. */
typedef struct batch_req {
	int32_t *prompt;         /* owned; [n_prompt] token ids */
	int n_prompt;
	int max_tokens;          /* per completion, 1..2^20 */
	int n;                   /* completions, 1..64 (beams: the width) */
	int beams;               /* beam search width 1..16, or 0 */
	float length_penalty;    /* beams: final order by logprob / length^this (default 1) */
	samp_params samp;        /* the defaults with "temperature" and "seed" applied */
	char **stops;            /* owned; [n_stops] NUL-terminated stop strings */
	int n_stops;
} batch_req;

/* Parses line[0..len) (one JSON object) into *r, tokenizing "prompt" with tk
 * (BOS added as the vocabulary asks) and checking "prompt_ids" against
 * 0..n_vocab-1; dflt and dflt_max give the values of absent fields. 0 on
 * success (release with batch_req_deinit); -1 with e saying what is wrong
 * (no line number) and *r zeroed. */
int batch_req_parse(const char *line, size_t len, const tok *tk, int n_vocab,
		    const samp_params *dflt, int dflt_max, batch_req *r, err *e);
void batch_req_deinit(batch_req *r);        /* a zeroed request is fine */

/* Parses a whole JSONL text[0..len), line by line, stopping at the first bad
 * line. On success *reqs is a new array of 1..BATCH_MAX_REQUESTS requests
 * (*n of them; release with batch_reqs_free). -1 with e and *bad_line the
 * 1-based line at fault, or 0 when no line is (the text holds no request). */
int batch_reqs_parse(const char *text, size_t len, const tok *tk, int n_vocab,
		     const samp_params *dflt, int dflt_max, batch_req **reqs, int *n,
		     int *bad_line, err *e);
void batch_reqs_free(batch_req *reqs, int n);   /* NULL is a no-op */

#endif
