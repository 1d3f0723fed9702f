/* app/http_req.c: OpenAI request bodies (app/http_req.h). Every field is
 * checked for its type and range here, so what reaches the engine is always
 * something it can run; an error names the field the way the API spells it
 * ("messages[2].content", "stop[1]"). */
#include "app/http_req.h"

#include "models/json.h"

#include <math.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* A problem with field `param`: fills e and param, returns -1. */
static int bad(err *e, char *param, size_t cap, const char *field, const char *msg)
{
	snprintf(param, cap, "%s", field);
	err_set(e, "'%s' %s", field, msg);
	return -1;
}

/* A context for the field readers: the object, where to report. */
typedef struct rd {
	const json *o;
	char *param;
	size_t cap;
	err *e;
} rd;

/* The member key, or NULL when absent or null. */
static const json *get(const rd *x, const char *key)
{
	const json *v = json_get(x->o, key);
	return v && v->type != JSON_NULL ? v : NULL;
}

/* Reads number key in [lo, hi] (an integer when integral) into *out: 1 when
 * given, 0 when absent, -1 when wrong. */
static int num(const rd *x, const char *key, double lo, double hi, bool integral, double *out)
{
	const json *v = get(x, key);
	if (!v)
		return 0;
	char msg[96];
	if (v->type != JSON_NUM || (integral && floor(v->num) != v->num) || !(v->num >= lo && v->num <= hi)) {
		snprintf(msg, sizeof msg, "must be %s from %.17g to %.17g", integral ? "an integer" : "a number",
			 lo, hi);
		return bad(x->e, x->param, x->cap, key, msg);
	}
	*out = v->num;
	return 1;
}

static int boolean(const rd *x, const char *key, bool *out)
{
	const json *v = get(x, key);
	if (!v)
		return 0;
	if (v->type != JSON_BOOL)
		return bad(x->e, x->param, x->cap, key, "must be true or false");
	*out = v->b;
	return 1;
}

/* ---- features this server does not have ---- */

static bool is_set(const json *v)
{
	switch (v->type) {
	case JSON_NULL: return false;
	case JSON_BOOL: return v->b;
	case JSON_NUM: return v->num != 0;
	case JSON_STR: return v->len > 0;
	default: return v->n > 0;
	}
}

static int refuse_unsupported(const rd *x, enum http_kind kind)
{
	static const char *const keys[] = {"tools", "functions", "function_call", "logprobs",
					   "top_logprobs", "echo", "suffix", "logit_bias",
					   "presence_penalty", "frequency_penalty", "prediction", "audio"};
	for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
		const json *v = json_get(x->o, keys[i]);
		if (v && is_set(v))
			return bad(x->e, x->param, x->cap, keys[i], "is not supported by this server");
	}
	const json *tc = get(x, "tool_choice");
	if (tc && !(tc->type == JSON_STR && !strcmp(tc->str, "none")))
		return bad(x->e, x->param, x->cap, "tool_choice", "is not supported by this server");
	const json *rf = get(x, "response_format"), *t = rf ? json_get(rf, "type") : NULL;
	if (rf && !(t && t->type == JSON_STR && !strcmp(t->str, "text")))
		return bad(x->e, x->param, x->cap, "response_format", "only {\"type\": \"text\"} is supported");
	double best_of = 1;
	if (kind == HTTP_COMPLETION && num(x, "best_of", 1, 1, true, &best_of) < 0)
		return -1;
	return 0;
}

/* ---- sampling and limits ---- */

static int parse_sampling(const rd *x, http_req *r)
{
	double v;
	int rc;
	if ((rc = num(x, "temperature", 0, 100, false, &v)) < 0)
		return -1;
	if (rc)
		r->samp.temp = (float)v;
	if ((rc = num(x, "top_p", 1e-9, 1, false, &v)) < 0)
		return -1;
	if (rc)
		r->samp.top_p = (float)v;
	if ((rc = num(x, "min_p", 0, 1, false, &v)) < 0)
		return -1;
	if (rc)
		r->samp.min_p = (float)v;
	if ((rc = num(x, "top_k", -1, 1 << 30, true, &v)) < 0)
		return -1;
	if (rc)
		r->samp.top_k = v < 0 ? 0 : (int)v;
	if ((rc = num(x, "repetition_penalty", 1e-6, 100, false, &v)) < 0)
		return -1;
	if (rc)
		r->samp.repeat_penalty = (float)v;
	/* OpenAI's seed is a 64-bit signed integer: negative ones wrap */
	if ((rc = num(x, "seed", -9223372036854775808.0, 18446744073709551615.0, true, &v)) < 0)
		return -1;
	if (rc) {
		r->samp.seed = v < 0 ? (uint64_t)(int64_t)v : v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
		r->seed_given = true;
	}
	return 0;
}

static int parse_limits(const rd *x, http_req *r)
{
	double v = 1;
	if (num(x, "n", 1, HTTP_MAX_N, true, &v) < 0)
		return -1;
	r->n = (int)v;
	int rc = num(x, "max_completion_tokens", 1, 1 << 30, true, &v);
	if (rc == 0)
		rc = num(x, "max_tokens", 1, 1 << 30, true, &v);
	if (rc < 0)
		return -1;
	r->max_tokens = rc ? (int)v : 0;
	if (boolean(x, "stream", &r->stream) < 0 || boolean(x, "ignore_eos", &r->ignore_eos) < 0)
		return -1;
	const json *so = get(x, "stream_options");
	if (so && so->type != JSON_OBJ)
		return bad(x->e, x->param, x->cap, "stream_options", "must be an object");
	if (so && r->stream) {
		rd sx = *x;
		sx.o = so;
		if (boolean(&sx, "include_usage", &r->include_usage) < 0)
			return bad(x->e, x->param, x->cap, "stream_options.include_usage", "must be true or false");
		if (boolean(&sx, "continuous_usage_stats", &r->continuous_usage) < 0)
			return bad(x->e, x->param, x->cap, "stream_options.continuous_usage_stats",
				   "must be true or false");
	}
	return 0;
}

static int add_stop(const rd *x, http_req *r, const json *s, const char *field)
{
	if (s->type != JSON_STR)
		return bad(x->e, x->param, x->cap, field, "must be a string");
	if (memchr(s->str, '\0', s->len) || s->len > HTTP_MAX_STOP_BYTES)
		return bad(x->e, x->param, x->cap, field, "must hold no NUL and at most 256 bytes");
	if (s->len > 0) /* an empty stop string would end every answer at once */
		r->stop[r->n_stop++] = xstrndup(s->str, s->len);
	return 0;
}

static int parse_stop(const rd *x, http_req *r)
{
	const json *s = get(x, "stop");
	if (!s)
		return 0;
	if (s->type == JSON_STR)
		return add_stop(x, r, s, "stop");
	if (s->type != JSON_ARR || s->n > HTTP_MAX_STOP)
		return bad(x->e, x->param, x->cap, "stop", "must be a string or an array of up to 4 strings");
	for (size_t i = 0; i < s->n; i++) {
		char field[32];
		snprintf(field, sizeof field, "stop[%zu]", i);
		if (add_stop(x, r, &s->items[i], field))
			return -1;
	}
	return 0;
}

/* ---- chat messages ---- */

/* The text of a message's content into *text (new, NUL-terminated, *len):
 * a string, an array of {"type": "text", "text": ...} parts, or null. */
static int content_text(const rd *x, const json *c, const char *field, char **text, size_t *len)
{
	*text = NULL;
	*len = 0;
	if (!c || c->type == JSON_NULL || c->type == JSON_STR) {
		*text = c && c->type == JSON_STR ? xstrndup(c->str, c->len) : xstrdup("");
		*len = c && c->type == JSON_STR ? c->len : 0;
		return 0;
	}
	if (c->type != JSON_ARR)
		return bad(x->e, x->param, x->cap, field, "must be a string or an array of text parts");
	size_t cap = 0;
	for (size_t i = 0; i < c->n; i++) {
		const json *p = &c->items[i], *t = json_get(p, "type"), *s = json_get(p, "text");
		if (!t || t->type != JSON_STR || strcmp(t->str, "text") || !s || s->type != JSON_STR) {
			free(*text);
			*text = NULL;
			return bad(x->e, x->param, x->cap, field, "parts must be {\"type\": \"text\", \"text\": "
				   "\"...\"} (only text is supported)");
		}
		xgrow_size(text, &cap, *len + s->len + 1, 1);
		memcpy(*text + *len, s->str, s->len);
		*len += s->len;
		(*text)[*len] = '\0';
	}
	if (!*text)
		*text = xstrdup("");
	return 0;
}

/* Leading system (or developer) messages joined by blank lines into *sys. */
static int take_system(const rd *x, const json *msgs, size_t *i, char **sys)
{
	size_t n = 0, cap = 0;
	*sys = NULL;
	for (; *i < msgs->n; (*i)++) {
		const json *role = json_get(&msgs->items[*i], "role");
		if (!role || role->type != JSON_STR || (strcmp(role->str, "system") && strcmp(role->str, "developer")))
			break;
		char field[48], *text;
		size_t len;
		snprintf(field, sizeof field, "messages[%zu].content", *i);
		if (content_text(x, json_get(&msgs->items[*i], "content"), field, &text, &len)) {
			free(*sys);
			return -1;
		}
		size_t L = strnlen(text, len); /* the system prompt is a C string */
		xgrow_size(sys, &cap, n + L + 3, 1);
		if (n) {
			memcpy(*sys + n, "\n\n", 2);
			n += 2;
		}
		memcpy(*sys + n, text, L);
		n += L;
		(*sys)[n] = '\0';
		free(text);
	}
	if (!*sys)
		*sys = xstrdup("");
	return 0;
}

static int parse_message(const rd *x, const json *m, size_t i, http_req *r)
{
	char field[48];
	snprintf(field, sizeof field, "messages[%zu]", i);
	const json *role = json_get(m, "role");
	if (m->type != JSON_OBJ || !role || role->type != JSON_STR)
		return bad(x->e, x->param, x->cap, field, "must be an object with a \"role\"");
	bool user = !strcmp(role->str, "user"), asst = !strcmp(role->str, "assistant");
	snprintf(field, sizeof field, "messages[%zu].role", i);
	if (!strcmp(role->str, "system") || !strcmp(role->str, "developer"))
		return bad(x->e, x->param, x->cap, field, "a system message must come before the others");
	if (!user && !asst)
		return bad(x->e, x->param, x->cap, field, "must be system, developer, user or assistant "
			   "(tools are not supported)");
	const json *tc = json_get(m, "tool_calls");
	if (tc && is_set(tc))
		return bad(x->e, x->param, x->cap, "tool_calls", "is not supported by this server");
	snprintf(field, sizeof field, "messages[%zu].content", i);
	const json *c = json_get(m, "content");
	if (user && (!c || c->type == JSON_NULL))
		return bad(x->e, x->param, x->cap, field, "is required for a user message");
	char *text;
	size_t len;
	if (content_text(x, c, field, &text, &len))
		return -1;
	conv_add(&r->chat, user ? CONV_USER : CONV_ASSISTANT, text, len);
	free(text);
	return 0;
}

static int parse_messages(const rd *x, http_req *r)
{
	const json *msgs = get(x, "messages");
	if (!msgs || msgs->type != JSON_ARR || msgs->n == 0)
		return bad(x->e, x->param, x->cap, "messages", "is required: a non-empty array of messages");
	size_t i = 0;
	char *sys;
	if (take_system(x, msgs, &i, &sys))
		return -1;
	conv_init(&r->chat, "http", "", sys);
	free(sys);
	if (i == msgs->n)
		return bad(x->e, x->param, x->cap, "messages", "holds only a system message: add a user message");
	for (; i < msgs->n; i++)
		if (parse_message(x, &msgs->items[i], i, r))
			return -1;
	return 0;
}

/* ---- completion prompts ---- */

static int parse_ids(const rd *x, const json *a, http_req *r)
{
	if (a->n == 0)
		return bad(x->e, x->param, x->cap, "prompt", "is empty");
	r->prompt_ids = xmalloc(a->n * sizeof *r->prompt_ids);
	for (size_t i = 0; i < a->n; i++) {
		const json *v = &a->items[i];
		if (v->type != JSON_NUM || floor(v->num) != v->num || !(v->num >= 0 && v->num < (1 << 30)))
			return bad(x->e, x->param, x->cap, "prompt", "token ids must be integers >= 0");
		r->prompt_ids[i] = (int32_t)v->num;
	}
	r->n_prompt_ids = (int)a->n;
	return 0;
}

static int parse_prompt(const rd *x, http_req *r)
{
	const json *p = get(x, "prompt");
	if (p && p->type == JSON_ARR && p->n == 1 && (p->items[0].type == JSON_STR || p->items[0].type == JSON_ARR))
		p = &p->items[0]; /* a batch of one */
	if (p && p->type == JSON_STR) {
		r->prompt = xstrndup(p->str, p->len);
		r->prompt_len = p->len;
		return 0;
	}
	if (p && p->type == JSON_ARR && (p->n == 0 || p->items[0].type == JSON_NUM))
		return parse_ids(x, p, r);
	if (p && p->type == JSON_ARR)
		return bad(x->e, x->param, x->cap, "prompt", "holds several prompts: send one per request");
	return bad(x->e, x->param, x->cap, "prompt", "is required: a string or an array of token ids");
}

/* ---- the request ---- */

static int parse_fields(const rd *x, enum http_kind kind, http_req *r)
{
	const json *model = get(x, "model");
	if (model && model->type != JSON_STR)
		return bad(x->e, x->param, x->cap, "model", "must be a string");
	r->model = model ? xstrndup(model->str, model->len) : xstrdup("");
	if (refuse_unsupported(x, kind) || parse_sampling(x, r) || parse_limits(x, r) || parse_stop(x, r))
		return -1;
	return kind == HTTP_CHAT ? parse_messages(x, r) : parse_prompt(x, r);
}

int http_req_parse(const char *body, size_t len, enum http_kind kind, const samp_params *dflt,
		   http_req *r, char *param, size_t param_cap, err *e)
{
	*r = (http_req){.kind = kind, .samp = *dflt, .n = 1};
	if (param_cap)
		param[0] = '\0';
	json_doc *d = json_parse(body, len, e);
	if (!d) {
		err_prefix(e, "the body is not valid JSON");
		return -1;
	}
	rd x = {json_root(d), param, param_cap, e};
	int rc = -1;
	if (x.o->type != JSON_OBJ)
		err_set(e, "the body must be a JSON object");
	else
		rc = parse_fields(&x, kind, r);
	json_free(d);
	if (rc)
		http_req_deinit(r);
	return rc;
}

void http_req_deinit(http_req *r)
{
	free(r->model);
	conv_deinit(&r->chat);
	free(r->prompt);
	free(r->prompt_ids);
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	*r = (http_req){0};
}

int http_req_prompt(const http_req *r, const tok *t, enum tmpl_family fam, int32_t **ids, int *n, err *e)
{
	*ids = NULL;
	*n = 0;
	if (r->kind == HTTP_CHAT) {
		/* the tabs' own turn logic on a copy: the history's ids, then the
		 * answer's opening (the server checks the context itself) */
		conv c;
		conv_model m;
		conv_turn turn = {0};
		conv_copy(&c, &r->chat);
		conv_model_init(&m, t, fam, INT_MAX / 2, 16, CONV_REFUSE);
		int rc = conv_turn_start(&c, &m, 0, &turn, e);
		if (rc == 0) {
			*ids = turn.prompt;
			*n = turn.n_prompt;
			turn.prompt = NULL;
		}
		conv_turn_deinit(&turn);
		conv_deinit(&c);
		return rc;
	}
	if (r->prompt_ids) {
		for (int i = 0; i < r->n_prompt_ids; i++)
			if (r->prompt_ids[i] >= tok_n_vocab(t)) {
				err_set(e, "'prompt' token id %d is outside the vocabulary (%d tokens)", r->prompt_ids[i],
					tok_n_vocab(t));
				return -1;
			}
		*ids = xmalloc((size_t)r->n_prompt_ids * sizeof **ids);
		memcpy(*ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof **ids);
		*n = r->n_prompt_ids;
		return 0;
	}
	int cap = (int)MIN(r->prompt_len + 16, (size_t)1 << 20);
	*ids = xmalloc((size_t)cap * sizeof **ids);
	int need = tok_encode(t, r->prompt, r->prompt_len, TOK_ADD_BOS, *ids, cap);
	if (need > cap) {
		*ids = xrealloc(*ids, (size_t)need * sizeof **ids);
		need = tok_encode(t, r->prompt, r->prompt_len, TOK_ADD_BOS, *ids, need);
	}
	if (need < 0) {
		free(*ids);
		*ids = NULL;
		err_set(e, "'prompt' is %zu bytes, over the tokenizer's limit", r->prompt_len);
		return -1;
	}
	*n = need;
	return 0;
}
