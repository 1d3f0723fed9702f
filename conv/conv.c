/* conv/conv.c: conversations: messages, their ids, completion-mode text.
 * (The token history and the turns: conv/hist.c, conv/turn.c; the files
 * call one way, turn.c -> hist.c -> conv.c.) */
#include "conv/conv.h"

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
	free(m->note);
	free(m->ids);
}

void conv_deinit(conv *c)
{
	for (int i = 0; i < c->n_msgs; i++)
		msg_deinit(&c->msgs[i]);
	free(c->msgs);
	free(c->name);
	free(c->prompt_name);
	free(c->system);
	free(c->sys_ids);
	free(c->origin.path);
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
		d->note = m->note ? xstrdup(m->note) : NULL;
		if (m->has_ids)
			conv_set_ids(dst, j, m->ids, m->n_ids);
		d->n_open = m->n_open;
		d->closed = m->closed;
	}
	if (src->has_sys_ids)
		conv_set_sys_ids(dst, src->sys_ids, src->n_sys_ids);
	dst->ids_vocab = src->ids_vocab;
	dst->ids_fam = src->ids_fam;
	dst->first = src->first;
	dst->salt = src->salt;
	dst->salt_block = src->salt_block;
	const conv_origin *o = &src->origin;
	conv_set_origin(dst, o->path, o->size, o->header, o->fam);
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
	if (c->n_msgs == 0)
		return;
	bool ans = c->msgs[c->n_msgs - 1].role == CONV_ASSISTANT;
	msg_deinit(&c->msgs[--c->n_msgs]);
	/* a turn the answer took out of the history (conv_msg_sent) is to be
	 * sent again: its user messages' ids are made anew */
	for (int i = c->n_msgs - 1; ans && i >= c->first && c->msgs[i].role == CONV_USER; i--)
		if (c->msgs[i].has_ids && c->msgs[i].n_ids == 0)
			c->msgs[i].has_ids = false;
	c->first = MIN(c->first, c->n_msgs);
	c->version++;
}

void conv_set_error(conv *c, int i, const char *msg)
{
	free(c->msgs[i].error);
	c->msgs[i].error = msg ? xstrdup(msg) : NULL;
	c->version++;
}

void conv_set_note(conv *c, int i, const char *msg)
{
	free(c->msgs[i].note);
	c->msgs[i].note = msg ? xstrdup(msg) : NULL;
	c->version++;
}

void conv_set_name(conv *c, const char *name)
{
	free(c->name);
	c->name = xstrdup(name);
	c->version++;
}

void conv_set_ids(conv *c, int i, const int32_t *ids, int n)
{
	conv_msg *m = &c->msgs[i];
	xgrow(&m->ids, &m->cap_ids, MAX(n, 1), sizeof *m->ids);
	if (n > 0)
		memcpy(m->ids, ids, (size_t)n * sizeof *ids);
	m->n_ids = n;
	m->has_ids = true;
}

void conv_append_ids(conv *c, int i, const int32_t *ids, int n)
{
	conv_msg *m = &c->msgs[i];
	xgrow(&m->ids, &m->cap_ids, (int64_t)m->n_ids + MAX(n, 1), sizeof *m->ids);
	if (n > 0)
		memcpy(m->ids + m->n_ids, ids, (size_t)n * sizeof *ids);
	m->n_ids += n;
	m->has_ids = true;
}

void conv_set_sys_ids(conv *c, const int32_t *ids, int n)
{
	xgrow(&c->sys_ids, &c->cap_sys_ids, MAX(n, 1), sizeof *c->sys_ids);
	if (n > 0)
		memcpy(c->sys_ids, ids, (size_t)n * sizeof *ids);
	c->n_sys_ids = n;
	c->has_sys_ids = true;
}

void conv_set_origin(conv *c, const char *path, int64_t size, uint64_t header, enum tmpl_family fam)
{
	char *p = path ? xstrdup(path) : NULL;
	free(c->origin.path);
	c->origin = (conv_origin){.path = p, .size = size, .header = header, .fam = fam};
}

/* ---- completion mode ---- */

static bool ends_in_space(const char *s, size_t n)
{
	return n == 0 || isspace((unsigned char)s[n - 1]);
}

bool conv_msg_sent(const conv *c, int i)
{
	if (c->msgs[i].role == CONV_ASSISTANT)
		return c->msgs[i].len > 0;
	int j = i;
	while (j < c->n_msgs && c->msgs[j].role == CONV_USER)
		j++;
	return j == c->n_msgs || c->msgs[j].len > 0 || strcmp(c->msgs[j].finish, "error");
}

bool conv_continues(const conv *c, int i)
{
	return i > 0 && i + 1 < c->n_msgs && i != c->first && c->msgs[i].role == CONV_USER &&
	       c->msgs[i].len == 0 && c->msgs[i - 1].role == CONV_ASSISTANT &&
	       c->msgs[i + 1].role == CONV_ASSISTANT && !c->msgs[i + 1].note;
}

const char *conv_separator(const conv *c, int i)
{
	const conv_msg *m = &c->msgs[i];
	if (m->role != CONV_USER || m->len == 0 || isspace((unsigned char)m->text[0]))
		return "";
	/* the nearest text sent before it: a message, else the system prompt */
	for (int j = i - 1; j >= 0; j--)
		if (c->msgs[j].len > 0 && conv_msg_sent(c, j))
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
		if (!conv_msg_sent(c, i))
			continue;
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

