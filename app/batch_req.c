/* app/batch_req.c: parsing and validating `pagechat batch` request lines. */
#include "app/batch_req.h"

#include "models/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int field_int(const json *o, const char *key, int lo, int hi, int *out, err *e)
{
	const json *v = json_get(o, key);
	if (!v)
		return 0;
	if (v->type != JSON_NUM || v->num != floor(v->num) || v->num < lo || v->num > hi) {
		err_set(e, "\"%s\" must be an integer in %d..%d", key, lo, hi);
		return -1;
	}
	*out = (int)v->num;
	return 0;
}

static int parse_prompt(const json *o, const tok *tk, int n_vocab, batch_req *r, err *e)
{
	const json *p = json_get(o, "prompt"), *ids = json_get(o, "prompt_ids");
	if ((p != NULL) == (ids != NULL) || (p && p->type != JSON_STR) || (ids && ids->type != JSON_ARR)) {
		err_set(e, "needs either \"prompt\" (a string) or \"prompt_ids\" (an array)");
		return -1;
	}
	if (ids) {
		r->prompt = xmalloc((ids->n ? ids->n : 1) * sizeof *r->prompt);
		for (size_t i = 0; i < ids->n; i++) {
			const json *v = &ids->items[i];
			if (v->type != JSON_NUM || v->num < 0 || v->num >= n_vocab || v->num != floor(v->num)) {
				err_set(e, "\"prompt_ids\"[%zu] is not a token id (0..%d)", i, n_vocab - 1);
				return -1;
			}
			r->prompt[r->n_prompt++] = (int32_t)v->num;
		}
		return 0;
	}
	int need = tok_encode(tk, p->str, p->len, TOK_ADD_BOS, NULL, 0);
	if (need < 0) {
		err_set(e, "\"prompt\" is too long");
		return -1;
	}
	r->prompt = xmalloc((size_t)MAX(1, need) * sizeof *r->prompt);
	r->n_prompt = tok_encode(tk, p->str, p->len, TOK_ADD_BOS, r->prompt, need);
	return 0;
}

static int parse_stops(const json *o, batch_req *r, err *e)
{
	const json *s = json_get(o, "stop");
	if (!s)
		return 0;
	if (s->type == JSON_STR) {
		r->stops = xcalloc(1, sizeof *r->stops);
		r->stops[r->n_stops++] = xstrdup(s->str);
		return 0;
	}
	if (s->type != JSON_ARR) {
		err_set(e, "\"stop\" must be a string or an array of strings");
		return -1;
	}
	r->stops = xcalloc(s->n ? s->n : 1, sizeof *r->stops);
	for (size_t i = 0; i < s->n; i++) {
		if (s->items[i].type != JSON_STR) {
			err_set(e, "\"stop\"[%zu] is not a string", i);
			return -1;
		}
		r->stops[r->n_stops++] = xstrdup(s->items[i].str);
	}
	return 0;
}

static int check_keys(const json *o, err *e)
{
	static const char *const known[] = {"prompt", "prompt_ids", "max_tokens", "n", "temperature",
					    "seed", "stop", "beams", "length_penalty"};
	for (size_t i = 0; i < o->n; i++) {
		bool ok = false;
		for (size_t k = 0; k < ARRAY_LEN(known); k++)
			ok |= !strcmp(o->keys[i], known[k]);
		if (!ok) {
			err_set(e, "unknown key \"%s\"", o->keys[i]);
			return -1;
		}
	}
	return 0;
}

static int parse_fields(const json *o, const tok *tk, int n_vocab, batch_req *r, err *e)
{
	int seed = -1;
	if (o->type != JSON_OBJ) {
		err_set(e, "a JSON object is expected");
		return -1;
	}
	if (check_keys(o, e))
		return -1;
	const json *t = json_get(o, "temperature");
	if (t && (t->type != JSON_NUM || t->num < 0 || t->num > 100)) {
		err_set(e, "\"temperature\" must be a number in 0..100");
		return -1;
	}
	if (t)
		r->samp.temp = (float)t->num;
	if (parse_prompt(o, tk, n_vocab, r, e) ||
	    field_int(o, "max_tokens", 1, 1 << 20, &r->max_tokens, e) ||
	    field_int(o, "n", 1, 64, &r->n, e) ||
	    field_int(o, "seed", 0, 0x7fffffff, &seed, e) || parse_stops(o, r, e) ||
	    field_int(o, "beams", 1, 16, &r->beams, e))
		return -1;
	if (r->beams && json_get(o, "n") && r->n != r->beams) {
		err_set(e, "\"n\" and \"beams\" differ: beam search gives one completion per beam");
		return -1;
	}
	if (r->beams)
		r->n = r->beams;
	const json *lp = json_get(o, "length_penalty");
	if (lp && (lp->type != JSON_NUM || !(lp->num >= 0 && lp->num <= 10) || !r->beams)) {
		err_set(e, "\"length_penalty\" must be a number in 0..10, with \"beams\"");
		return -1;
	}
	r->length_penalty = lp ? (float)lp->num : 1.0f;
	if (seed >= 0)
		r->samp.seed = (uint64_t)seed;
	return 0;
}

int batch_req_parse(const char *line, size_t len, const tok *tk, int n_vocab,
		    const samp_params *dflt, int dflt_max, batch_req *r, err *e)
{
	memset(r, 0, sizeof *r);
	json_doc *d = json_parse(line, len, e);
	if (!d)
		return -1;
	r->samp = *dflt;
	r->max_tokens = dflt_max;
	r->n = 1;
	r->length_penalty = 1.0f;
	int rc = parse_fields(json_root(d), tk, n_vocab, r, e);
	json_free(d);
	if (rc)
		batch_req_deinit(r);
	return rc;
}

void batch_req_deinit(batch_req *r)
{
	for (int k = 0; k < r->n_stops; k++)
		free(r->stops[k]);
	free(r->stops);
	free(r->prompt);
	memset(r, 0, sizeof *r);
}

/* The next line that is not blank (spaces, tabs, CRs and NULs only); *line_no
 * counts every line passed. */
static bool next_line(const char *text, size_t len, size_t *pos, int *line_no,
		      const char **line, size_t *n)
{
	while (*pos < len) {
		const char *p = text + *pos;
		const char *nl = memchr(p, '\n', len - *pos);
		size_t k = 0, m = nl ? (size_t)(nl - p) : len - *pos;
		*pos += m + 1;
		(*line_no)++;
		while (k < m && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r' || p[k] == '\0'))
			k++;
		if (k < m) {
			*line = p;
			*n = m;
			return true;
		}
	}
	return false;
}

int batch_reqs_parse(const char *text, size_t len, const tok *tk, int n_vocab,
		     const samp_params *dflt, int dflt_max, batch_req **reqs, int *n,
		     int *bad_line, err *e)
{
	batch_req *a = NULL;
	int cap = 0, count = 0, line_no = 0;
	size_t pos = 0, m;
	const char *line;
	*reqs = NULL;
	*n = 0;
	*bad_line = 0;
	while (next_line(text, len, &pos, &line_no, &line, &m))   /* count first: cheap */
		if (++count > BATCH_MAX_REQUESTS) {
			err_set(e, "more than %d requests: split the file", BATCH_MAX_REQUESTS);
			*bad_line = line_no;
			return -1;
		}
	pos = 0;
	line_no = 0;
	count = 0;
	while (next_line(text, len, &pos, &line_no, &line, &m)) {
		xgrow(&a, &cap, (int64_t)count + 1, sizeof *a);
		if (batch_req_parse(line, m, tk, n_vocab, dflt, dflt_max, &a[count], e)) {
			*bad_line = line_no;
			goto fail;
		}
		count++;
	}
	if (count == 0) {
		err_set(e, "no requests (one JSON object per line)");
		goto fail;
	}
	*reqs = a;
	*n = count;
	return 0;
fail:
	batch_reqs_free(a, count);
	return -1;
}

void batch_reqs_free(batch_req *reqs, int n)
{
	for (int i = 0; reqs && i < n; i++)
		batch_req_deinit(&reqs[i]);
	free(reqs);
}
