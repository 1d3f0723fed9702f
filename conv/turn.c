/* conv/turn.c: a conversation's turns (conv/conv.h): the next
 * answer's prompt from the token history, the context's overflow policies,
 * the engine request, and the answer's ids as they stream back. */
#include "conv/conv.h"

#include "conv/conv_int.h"
#include "kv/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the history's state ---- */

/* Why the history must be re-rendered before the next turn, or NULL: no
 * ids saved, ids made for another vocabulary or template, or a message
 * without ids before the new ones (the user messages at the end that no
 * answer followed yet). */
static const char *stale_reason(const conv *c, const conv_model *m)
{
	if (!c->has_sys_ids || c->ids_vocab == 0)
		return "the chat has no saved ids";
	if (c->ids_vocab != m->vocab)
		return "its ids were made for another vocabulary";
	if (c->ids_fam != m->fam)
		return "its ids were rendered with another template";
	bool gap = false;
	int32_t n_vocab = tok_n_vocab(m->tok);
	for (int i = 0; i < c->n_sys_ids; i++)
		if (c->sys_ids[i] < 0 || c->sys_ids[i] >= n_vocab)
			return "a saved id is out of the vocabulary";
	for (int i = c->first; i < c->n_msgs; i++) {
		const conv_msg *x = &c->msgs[i];
		for (int k = 0; k < x->n_ids; k++)
			if (x->ids[k] < 0 || x->ids[k] >= n_vocab)
				return "a saved id is out of the vocabulary";
		if (!x->has_ids && x->role == CONV_ASSISTANT)
			return "a saved answer has no ids";
		if (!x->has_ids)
			gap = true;
		else if (gap)
			return "a saved message has no ids";
	}
	return NULL;
}

/* Makes the history current for m: a new conversation is rendered, a stale
 * one re-rendered (*why says why), a current one gets its answers closed
 * and its new messages' ids. */
static int bring_up_to_date(conv *c, const conv_model *m, const char **why, err *e)
{
	bool fresh = !c->has_sys_ids;
	for (int i = 0; fresh && i < c->n_msgs; i++)
		fresh = !c->msgs[i].has_ids && c->msgs[i].role == CONV_USER;
	*why = fresh ? NULL : stale_reason(c, m);
	if (fresh || *why)
		return conv_rebuild(c, m, e);
	if (conv_close_answers(c, m, e))
		return -1;
	for (int i = c->first; i < c->n_msgs; i++)
		if (!c->msgs[i].has_ids && conv_fill_ids(c, m, i, e))
			return -1;
	return 0;
}

/* Tokens of msgs[from..to). */
static int64_t ids_between(const conv *c, int from, int to)
{
	int64_t n = 0;
	for (int i = from; i < to; i++)
		n += c->msgs[i].n_ids;
	return n;
}

/* The first message of the turn after the one starting at i (a turn is a
 * user message and what follows it up to the next user message). */
static int next_turn(const conv *c, int i)
{
	do
		i++;
	while (i < c->n_msgs && c->msgs[i].role != CONV_USER);
	return i;
}

/* The first of the user messages at the end (the turn being answered). */
static int last_turn(const conv *c)
{
	int i = c->n_msgs;
	while (i > c->first && c->msgs[i - 1].role == CONV_USER)
		i--;
	return i;
}

/* ---- overflow ---- */

/* The history before the new turn (sys_ids, msgs[first..upto)) into t's
 * shift: what the engine may find in its cache. */
static void keep_old(const conv *c, int upto, conv_turn *t)
{
	int64_t n = c->n_sys_ids + ids_between(c, c->first, upto);
	int32_t *old = xmalloc((size_t)MAX(n, 1) * sizeof *old);
	memcpy(old, c->sys_ids, (size_t)c->n_sys_ids * sizeof *old);
	int64_t k = c->n_sys_ids;
	for (int i = c->first; i < upto; i++) {
		memcpy(old + k, c->msgs[i].ids, (size_t)c->msgs[i].n_ids * sizeof *old);
		k += c->msgs[i].n_ids;
	}
	t->shift = (core_shift){.old = old, .n_old = (int)n, .old_salt = c->salt,
				.old_salt_block = c->salt_block, .keep = c->n_sys_ids};
}

/* Messages before k leave the context (and their ids the history). */
static void forget_before(conv *c, int k)
{
	for (int i = c->first; i < k; i++)
		c->msgs[i].has_ids = false, c->msgs[i].n_ids = 0;
	c->first = k;
}

/* The salt of the blocks a shift makes: they hold rows computed with the
 * whole old history before them (the dropped turns included) and moved, so
 * they are keyed by all of it: the earlier salt, the cut, and every old id.
 * Two conversations that differ only in what they dropped never share them. */
static uint64_t shift_salt(uint64_t salt, const core_shift *sh)
{
	uint64_t h = mix64(salt ^ mix64((uint64_t)sh->keep << 32 ^ (uint64_t)sh->discard) ^ (uint64_t)sh->n_old);
	return kv_hash_bytes(h, sh->old, (size_t)sh->n_old * sizeof *sh->old) | 1;
}

/* The history no longer fits with room for the answer: applies m->overflow
 * (the turn's opening n_open ids and reserve counted). */
static int overflow(conv *c, const conv_model *m, int n_open, int reserve, conv_turn *t, err *e)
{
	int u = last_turn(c);
	int64_t need = conv_history_tokens(c) + n_open + reserve;
	if (m->overflow == CONV_REFUSE) {
		err_set(e, "the context is full: this turn needs %lld tokens with room for the answer (%d), the "
			"context holds %d (context.overflow is refuse: drop or shift would make room, or a "
			"smaller max_tokens: /set max_tokens N)", (long long)need, reserve, m->n_ctx);
		return -1;
	}
	int k = c->first;
	do
		k = next_turn(c, k);
	while (k < u && need - ids_between(c, c->first, k) > m->n_ctx);
	if (k > u || need - ids_between(c, c->first, k) > m->n_ctx) {
		k = MIN(k, u);
		err_set(e, "this turn needs %lld tokens with room for the answer (%d), more than the context's %d "
			"even without the earlier turns: shorten it, raise the context or lower max_tokens "
			"(/set max_tokens N)", (long long)(need - ids_between(c, c->first, k)), reserve, m->n_ctx);
		return -1;
	}
	t->n_dropped += k - c->first;
	if (m->overflow == CONV_SHIFT) {
		keep_old(c, u, t);
		t->shift.discard = (int)ids_between(c, c->first, k);
		c->salt = shift_salt(c->salt, &t->shift);
		c->salt_block = c->n_sys_ids / m->block_tokens;
		forget_before(c, k);
		return 0;
	}
	/* drop: what stays is recomputed anyway, so it is rendered afresh */
	forget_before(c, k);
	c->salt = 0;
	t->rebuilt = true;
	return conv_rebuild(c, m, e);
}

/* ---- the turn ---- */

/* The user messages of the turn answered by message ans leave the history
 * (the answer never started: the turn is not sent again; conv_msg_sent). */
static void unsend_turn(conv *c, int ans)
{
	for (int i = ans - 1; i >= c->first && c->msgs[i].role == CONV_USER; i--)
		conv_set_ids(c, i, NULL, 0);
}

/* Message i is an answer that never started: no part of the history, and
 * neither is its turn. */
static void finish_error(conv *c, int i, const err *e)
{
	snprintf(c->msgs[i].finish, sizeof c->msgs[i].finish, "error");
	conv_set_error(c, i, e->msg);
	conv_set_ids(c, i, NULL, 0);
	c->msgs[i].closed = true;
	unsend_turn(c, i);
}

/* The prompt: the history, then msgs[ai]'s opening. */
static void gather(const conv *c, conv_turn *t)
{
	int64_t n = conv_history_tokens(c);
	t->prompt = xmalloc((size_t)MAX(n, 1) * sizeof *t->prompt);
	memcpy(t->prompt, c->sys_ids, (size_t)c->n_sys_ids * sizeof *t->prompt);
	int k = c->n_sys_ids;
	for (int i = c->first; i < c->n_msgs; i++) {
		memcpy(t->prompt + k, c->msgs[i].ids, (size_t)c->msgs[i].n_ids * sizeof *t->prompt);
		k += c->msgs[i].n_ids;
	}
	t->n_prompt = k;
	t->n_pin = c->n_sys_ids;
}

static void set_note(conv *c, const conv_turn *t, const conv_model *m, int i, int64_t before,
		     const char *why)
{
	char note[200];
	if (t->n_dropped && t->shift.n_old)
		snprintf(note, sizeof note, "context full: %d earlier messages (%d tokens) shifted out; the "
			 "rest kept its K/V, rotated to the new positions", t->n_dropped, t->shift.discard);
	else if (t->n_dropped)
		snprintf(note, sizeof note, "context full: %d earlier messages dropped (%lld of %d tokens "
			 "were in use); the rest was recomputed", t->n_dropped, (long long)before, m->n_ctx);
	else if (why)
		snprintf(note, sizeof note, "history re-rendered from the text for %s: %s",
			 conv_completion_mode(m) ? "completion mode" : tmpl_name(m->fam), why);
	else
		return;
	conv_set_note(c, i, note);
}

int conv_turn_start(conv *c, const conv_model *m, int max_tokens, conv_turn *t, err *e)
{
	*t = (conv_turn){.max_tokens = max_tokens};
	int32_t *open = NULL;
	int n_open = 0;
	int64_t before = conv_history_tokens(c);
	int reserve = max_tokens > 0 ? MIN(max_tokens, m->n_ctx / 2) : m->n_ctx / 4;
	const char *why = NULL;
	int rc = bring_up_to_date(c, m, &why, e);
	t->rebuilt = why != NULL;
	if (rc == 0)
		rc = conv_opening_ids(c, m, c->n_msgs, &open, &n_open, e);
	/* a drop re-renders what stays, which may come out longer: try again */
	reserve = MAX(reserve, 1);
	while (rc == 0 && conv_history_tokens(c) + n_open + reserve > m->n_ctx && !t->shift.n_old)
		rc = overflow(c, m, n_open, reserve, t, e);
	t->msg = conv_add(c, CONV_ASSISTANT, "", 0);
	if (rc) {
		finish_error(c, t->msg, e);
		free(open);
		conv_turn_deinit(t);
		t->msg = c->n_msgs - 1;
		return -1;
	}
	conv_set_ids(c, t->msg, open, n_open);
	c->msgs[t->msg].n_open = n_open;
	c->msgs[t->msg].closed = false;
	free(open);
	gather(c, t);
	t->n_stop = conv_completion_mode(m) ? 0 : tmpl_stop_ids(m->fam, m->tok, t->stop, (int)ARRAY_LEN(t->stop));
	t->salt = c->salt;
	t->salt_block = c->salt_block;
	set_note(c, t, m, t->msg, before, why);
	return 0;
}

void conv_turn_request(const conv_turn *t, core_request *r)
{
	r->prompt = t->prompt;
	r->n_prompt = t->n_prompt;
	r->n = 1;
	r->max_tokens = t->max_tokens;
	r->stop_ids = t->n_stop ? t->stop : NULL;
	r->n_stop_ids = t->n_stop;
	r->pin_tokens = t->n_pin;
	r->salt = t->salt;
	r->salt_block = t->salt_block;
	r->shift = t->shift;
}

void conv_turn_deinit(conv_turn *t)
{
	free(t->prompt);
	free((void *)t->shift.old);
	int msg = t->msg;
	*t = (conv_turn){.msg = msg};
}

/* ---- the answer ---- */

void conv_answer_id(conv *c, int i, int32_t id)
{
	conv_append_ids(c, i, &id, 1);
}

void conv_answer_end(conv *c, int i, const char *finish, const core_req_metrics *m)
{
	conv_msg *x = &c->msgs[i];
	snprintf(x->finish, sizeof x->finish, "%s", finish);
	if (m) {
		x->n_gen = m->n_gen;
		x->ttft_ms = m->ttft_ms;
		x->tpot_ms = m->tpot_ms;
		x->n_proposed = m->n_proposed;
		x->n_accepted = m->n_accepted;
		x->n_prompt = m->n_prompt;
		x->n_cached = m->n_cached;
	} else {
		x->n_gen = MAX(0, x->n_ids - x->n_open);
	}
	if (x->has_ids && !x->closed && x->n_ids <= x->n_open && strcmp(finish, "stop")) {
		x->n_ids = 0;
		x->closed = true;
	}
	if (x->len == 0 && !strcmp(finish, "error"))
		unsend_turn(c, i);
	c->version++;
}

void conv_answer_clear(conv *c, int i)
{
	conv_msg *x = &c->msgs[i];
	x->len = 0;
	if (x->text)
		x->text[0] = '\0';
	x->n_ids = MIN(x->n_ids, x->n_open);
	x->closed = false;
	x->finish[0] = '\0';
	x->n_gen = 0;
	c->version++;
}
