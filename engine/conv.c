/* engine/conv.c: conversations and their prompts. */
#include "engine/conv.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void conv_init(conv *c, const char *name, const char *prompt_name, const char *system)
{
	*c = (conv){.name = xstrdup(name), .prompt_name = xstrdup(prompt_name ? prompt_name : ""),
		    .system = xstrdup(system ? system : "")};
}

static void msg_deinit(conv_msg *m)
{
	free(m->text);
	free(m->error);
}

void conv_deinit(conv *c)
{
	for (int i = 0; i < c->n_msgs; i++)
		msg_deinit(&c->msgs[i]);
	free(c->msgs);
	free(c->name);
	free(c->prompt_name);
	free(c->system);
	memset(c, 0, sizeof *c);
}

void conv_copy(conv *dst, const conv *src)
{
	conv_init(dst, src->name, src->prompt_name, src->system);
	for (int i = 0; i < src->n_msgs; i++) {
		const conv_msg *m = &src->msgs[i];
		int j = conv_add(dst, m->role, m->text, m->len);
		conv_msg *d = &dst->msgs[j];
		d->error = m->error ? xstrdup(m->error) : NULL;
		memcpy(d->finish, m->finish, sizeof d->finish);
		d->n_gen = m->n_gen;
		d->ttft_ms = m->ttft_ms;
		d->tpot_ms = m->tpot_ms;
		d->n_proposed = m->n_proposed;
		d->n_accepted = m->n_accepted;
	}
}

int conv_add(conv *c, enum conv_role role, const char *text, size_t len)
{
	xgrow(&c->msgs, &c->cap_msgs, (int64_t)c->n_msgs + 1, sizeof *c->msgs);
	conv_msg *m = &c->msgs[c->n_msgs];
	*m = (conv_msg){.role = role, .cap = len + 1};
	m->text = xmalloc(m->cap);
	memcpy(m->text, text, len);
	m->text[len] = '\0';
	m->len = len;
	c->version++;
	return c->n_msgs++;
}

void conv_append(conv *c, int i, const char *text, size_t len)
{
	conv_msg *m = &c->msgs[i];
	xgrow_size(&m->text, &m->cap, m->len + len + 1, 1);
	memcpy(m->text + m->len, text, len);
	m->len += len;
	m->text[m->len] = '\0';
	c->version++;
}

void conv_pop(conv *c)
{
	if (c->n_msgs > 0)
		msg_deinit(&c->msgs[--c->n_msgs]);
	c->version++;
}

void conv_set_error(conv *c, int i, const char *msg)
{
	free(c->msgs[i].error);
	c->msgs[i].error = msg ? xstrdup(msg) : NULL;
	c->version++;
}

void conv_set_name(conv *c, const char *name)
{
	free(c->name);
	c->name = xstrdup(name);
	c->version++;
}

/* ---- completion mode ---- */

static bool ends_in_space(const char *s, size_t n)
{
	return n == 0 || isspace((unsigned char)s[n - 1]);
}

const char *conv_separator(const conv *c, int i)
{
	const conv_msg *m = &c->msgs[i];
	if (m->role != CONV_USER || m->len == 0 || isspace((unsigned char)m->text[0]))
		return "";
	/* the nearest text before it: a message, else the system prompt */
	for (int j = i - 1; j >= 0; j--)
		if (c->msgs[j].len > 0)
			return ends_in_space(c->msgs[j].text, c->msgs[j].len) ? "" : " ";
	return ends_in_space(c->system, strlen(c->system)) ? "" : " ";
}

char *conv_completion_text(const conv *c, int upto, size_t *len, size_t *sys_len)
{
	size_t n = strlen(c->system), cap = n + 1;
	for (int i = 0; i < upto; i++)
		cap += c->msgs[i].len + 1;
	char *s = xmalloc(cap);
	memcpy(s, c->system, n);
	*sys_len = n;
	for (int i = 0; i < upto; i++) {
		const char *sep = conv_separator(c, i);
		size_t k = strlen(sep);
		memcpy(s + n, sep, k);
		memcpy(s + n + k, c->msgs[i].text, c->msgs[i].len);
		n += k + c->msgs[i].len;
	}
	s[n] = '\0';
	*len = n;
	return s;
}

/* ---- prompts ---- */

/* Tokenizes text into out (resized); -1 with e for an over-long text. */
static int encode(const tok *t, const char *text, size_t len, unsigned flags, conv_prompt *out,
		  err *e)
{
	int cap = (int)MIN(len + 16, (size_t)1 << 20);
	out->ids = xrealloc(out->ids, (size_t)cap * sizeof *out->ids);
	int need = tok_encode(t, text, len, flags, out->ids, cap);
	if (need > cap) {
		out->ids = xrealloc(out->ids, (size_t)need * sizeof *out->ids);
		need = tok_encode(t, text, len, flags, out->ids, need);
	}
	if (need < 0) {
		err_set(e, "the conversation is %zu bytes, over the tokenizer's limit", len);
		return -1;
	}
	out->n = need;
	return 0;
}

static int encode_rendered(const tmpl_prompt *p, const tok *t, conv_prompt *out, err *e)
{
	int need = tmpl_encode(p, t, NULL, 0);
	if (need < 0) {
		err_set(e, "the conversation is %zu bytes, over the tokenizer's limit", p->len);
		return -1;
	}
	out->ids = xrealloc(out->ids, (size_t)MAX(need, 1) * sizeof *out->ids);
	out->n = tmpl_encode(p, t, out->ids, need);
	return 0;
}

static bool has_template(enum tmpl_family fam)
{
	return fam != TMPL_NONE && fam != TMPL_UNKNOWN;
}

/* Renders the system message plus msgs[0..upto) (non-empty ones) with fam. */
static int render(const conv *c, int upto, enum tmpl_family fam, bool gen, const tok *t,
		  conv_prompt *out, err *e)
{
	tmpl_msg *m = xmalloc((size_t)(upto + 1) * sizeof *m);
	size_t n = 0;
	if (*c->system)
		m[n++] = (tmpl_msg){"system", c->system, strlen(c->system)};
	for (int i = 0; i < upto; i++) {
		const conv_msg *x = &c->msgs[i];
		if (x->role == CONV_ASSISTANT && x->len == 0)
			continue;
		m[n++] = (tmpl_msg){x->role == CONV_USER ? "user" : "assistant", x->text, x->len};
	}
	tmpl_prompt p = {0};
	int rc = tmpl_render(fam, m, n, gen, &p, e);
	if (rc == 0)
		rc = encode_rendered(&p, t, out, e);
	tmpl_prompt_deinit(&p);
	free(m);
	return rc;
}

int conv_build_system(const conv *c, enum tmpl_family fam, const tok *t, conv_prompt *out,
		      err *e)
{
	*out = (conv_prompt){0};
	int rc;
	if (!has_template(fam))
		rc = encode(t, c->system, strlen(c->system), TOK_ADD_BOS, out, e);
	else if (!*c->system)
		rc = 0; /* nothing to share */
	else
		rc = render(c, 0, fam, false, t, out, e);
	if (rc)
		conv_prompt_deinit(out);
	out->n_pin = out->n;
	return rc;
}

static int common_prefix(const conv_prompt *a, const conv_prompt *b)
{
	int n = 0;
	while (n < a->n && n < b->n && a->ids[n] == b->ids[n])
		n++;
	return n;
}

/* Completion mode: the whole text at once when its ids start with the system
 * prompt's; otherwise the system ids followed by the rest's own. */
static int build_completion(const conv *c, int upto, const tok *t, const conv_prompt *sys,
			    conv_prompt *out, err *e)
{
	size_t len, sys_len;
	char *text = conv_completion_text(c, upto, &len, &sys_len);
	int rc = encode(t, text, len, TOK_ADD_BOS, out, e);
	if (rc == 0 && common_prefix(out, sys) < sys->n) {
		conv_prompt rest = {0};
		size_t skip = sys_len;
		/* the tokenizer's own leading space stands in for the separator */
		if (skip < len && text[skip] == ' ' && tok_kind_of(t) == TOK_SPM)
			skip++;
		rc = encode(t, text + skip, len - skip, 0, &rest, e);
		if (rc == 0) {
			out->ids = xrealloc(out->ids, (size_t)(sys->n + rest.n + 1) * sizeof *out->ids);
			memcpy(out->ids, sys->ids, (size_t)sys->n * sizeof *out->ids);
			memcpy(out->ids + sys->n, rest.ids, (size_t)rest.n * sizeof *out->ids);
			out->n = sys->n + rest.n;
		}
		conv_prompt_deinit(&rest);
	}
	free(text);
	return rc;
}

int conv_build(const conv *c, int upto, enum tmpl_family fam, const tok *t, conv_prompt *out,
	       err *e)
{
	*out = (conv_prompt){0};
	conv_prompt sys;
	if (conv_build_system(c, fam, t, &sys, e))
		return -1;
	int rc = has_template(fam) ? render(c, upto, fam, true, t, out, e)
				   : build_completion(c, upto, t, &sys, out, e);
	if (rc == 0)
		out->n_pin = common_prefix(out, &sys);
	else
		conv_prompt_deinit(out);
	conv_prompt_deinit(&sys);
	return rc;
}

void conv_prompt_deinit(conv_prompt *p)
{
	free(p->ids);
	*p = (conv_prompt){0};
}
