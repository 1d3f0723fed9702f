/* ui/ui_tab.c: one tab's basics: whether it answers, how full its context
 * is, saving it, and its answer's start (the request sent in the form the
 * engine reads) and end. The files above (ui_beams.c, ui_tabs.c, ui_view.c)
 * build on these; nothing here calls them.
 *
 * Each turn is built by conv/conv.h from the conversation's token history
 * (the ids sent and received so far, plus the new turn), so the prefix
 * cache finds every earlier turn; the answer's ids go back into the history
 * as they stream. An engine that renders turns itself (a server) gets the
 * conversation's text instead. */
#include "ui/ui_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAVE_EVERY_S 2.0

bool tab_busy(const tab *t)
{
	return t->gen_req >= 0;
}

int tab_context_used(const tab *t)
{
	return conv_history_tokens(&t->chat);
}

int tab_context_level(const ui *u, const tab *t)
{
	int64_t used = tab_context_used(t), n = u->cm.n_ctx;
	int64_t reserve = t->max_tokens > 0 ? MIN(t->max_tokens, n / 2) : n / 4;
	if (n <= 0)
		return 0;
	return used + MAX(reserve, 1) > n ? 2 : 4 * used > 3 * n ? 1 : 0;
}

static bool completion_mode(const ui *u)
{
	return conv_completion_mode(&u->cm);
}

const char *tab_mode_name(const ui *u)
{
	if (!(link_caps(u->link) & LINK_TOKENS)) /* the engine renders the turns: a server's */
		return completion_mode(u) ? "server completion" : "server chat";
	return completion_mode(u) ? "completion" : tmpl_name(u->fam);
}

/* ---- saving ---- */

static void tab_path(const ui *u, const tab *t, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s", u->data_dir, t->file);
}

void tab_save(ui *u, tab *t)
{
	if (t->note)
		return; /* read-only: a damaged chat's file stays exactly as it is */
	char path[8300];
	tab_path(u, t, path, sizeof path);
	bool fresh = access(path, F_OK) != 0;
	if (fresh && t->chat.n_msgs == 0) {
		t->unsaved = false; /* an empty tab gets no file until it has a message */
		return;
	}
	err e = {0};
	if (store_save(&t->chat, path, &e)) {
		ui_status(u, true, "%s", e.msg);
		return;
	}
	if (fresh) /* the session names it from now on */
		tab_save_session(u);
	t->last_save = now_s();
	t->unsaved = false;
	if (!tab_busy(t)) {
		store_journal_end(&t->journal);
		store_journal_remove(path); /* one a crash left, now folded in */
	} else if (store_journal_begin(&t->journal, path, &t->chat, t->gen_msg, &e))
		ui_status(u, true, "%s", e.msg);
}

void tab_save_session(ui *u)
{
	const char **names = xmalloc((size_t)MAX(1, u->n_tabs) * sizeof *names);
	int n = 0, active = 0;
	for (int i = 0; i < u->n_tabs; i++) {
		if (i == u->active)
			active = n;
		const tab *t = u->tabs[i];
		char path[8300];
		tab_path(u, t, path, sizeof path);
		/* the saved-chat list has no file, an empty tab none yet (a damaged
		 * chat's stays named, even when its file is gone) */
		bool empty = !t->note && t->chat.n_msgs == 0 && access(path, F_OK) != 0;
		if (t->file[0] && !empty)
			names[n++] = t->file;
	}
	err e = {0};
	if (store_session_save(u->data_dir, names, n, active, &e))
		ui_status(u, true, "%s", e.msg);
	free(names);
}

void tab_tick(ui *u, double now)
{
	for (int i = 0; i < u->n_tabs; i++) {
		tab *t = u->tabs[i];
		if (t->unsaved && now - t->last_save >= SAVE_EVERY_S)
			tab_save(u, t);
	}
}

/* ---- an answer's start and end ---- */

void tab_finish(ui *u, tab *t, const char *how, const char *error, const core_req_metrics *m)
{
	core_req_metrics live = t->live; /* an answer ended here (Esc) keeps its figures so far */
	live.n_gen = t->n_live;
	if (!m && t->n_live > 0)
		m = &live;
	conv_answer_end(&t->chat, t->gen_msg, how, m);
	if (error)
		conv_set_error(&t->chat, t->gen_msg, error);
	t->chat.version++;
	t->gen_req = -1;
	t->prefill_frac = -1;
	tab_save(u, t);
	u->dirty = true;
}

int tab_turn_start(ui *u, tab *t, conv_turn *turn, err *e)
{
	if (link_caps(u->link) & LINK_TOKENS)
		return conv_turn_start(&t->chat, &u->cm, t->max_tokens, turn, e);
	*turn = (conv_turn){.msg = conv_add(&t->chat, CONV_ASSISTANT, "", 0), .max_tokens = t->max_tokens};
	return 0;
}

/* The turn as text, into q: the conversation before the answer in message
 * msg as chat messages (into *msgs, the caller frees), or in completion
 * mode as one text (*text, the caller frees). */
static void turn_text(const ui *u, const conv *c, int msg, link_request *q, link_msg **msgs, char **text)
{
	*msgs = NULL;
	*text = NULL;
	if (completion_mode(u)) {
		size_t sys_len;
		*text = conv_completion_text(c, msg, &q->text_len, &sys_len);
		q->text = *text;
		return;
	}
	link_msg *m = *msgs = xcalloc((size_t)msg + 1, sizeof *m);
	int n = 0;
	if (*c->system)
		m[n++] = (link_msg){"system", c->system, strlen(c->system)};
	for (int i = c->first; i < msg; i++) {
		const conv_msg *cm = &c->msgs[i];
		if (!conv_msg_sent(c, i))
			continue; /* an answer that never started, or its turn */
		m[n++] = (link_msg){cm->role == CONV_USER ? "user" : "assistant", cm->text, cm->len};
	}
	q->msgs = m;
	q->n_msgs = n;
}

void tab_send(ui *u, tab *t, conv_turn *turn, const core_request *r)
{
	t->n_turns++;
	link_request q = {.r = *r};
	link_msg *msgs;
	char *text;
	turn_text(u, &t->chat, turn->msg, &q, &msgs, &text);
	link_submit(u->link, &q);
	free(msgs);
	free(text);
	t->gen_req = r->id;
	t->gen_msg = turn->msg;
	t->n_prompt = turn->n_prompt;
	t->t_submit = now_s();
	t->t_first = 0;
	t->n_live = 0;
	t->live = (core_req_metrics){0};
	t->prefill_frac = turn->n_prompt > 0 ? 0 : -1; /* from the block map, when its prompt is known */
	conv_turn_deinit(turn);
	tab_save(u, t);
	u->dirty = true;
}

void tab_stop(ui *u, tab *t)
{
	if (!tab_busy(t))
		return;
	link_cancel(u->link, t->gen_req);
	tab_finish(u, t, "cancelled", NULL, NULL);
}
