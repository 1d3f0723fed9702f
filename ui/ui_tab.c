/* ui/ui_tab.c: tabs: their requests to the engine, the events that stream
 * back, saving, and drawing the tab bar and the conversation view.
 *
 * A tab owns one engine conversation id for its whole life. When it opens,
 * it prefills its system prompt with a one-token request that pins those
 * blocks (the "warm-up"), so a second tab with the same prompt finds them
 * in the prefix cache at once. Each turn is built by conv/conv.h from the
 * conversation's token history (the ids sent and received so far, plus the
 * new turn), so the prefix cache finds every earlier turn; the answer's ids
 * go back into the history as they stream. Events are matched by request
 * id, so a cancelled or regenerated answer's late events fall on the
 * floor. */
#include "ui/ui_int.h"

#include "ui/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static tab *find_conv(ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return u->tabs[i];
	return NULL;
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

/* A different seed per tab and per answer, reproducible from the config's. */
static uint64_t answer_seed(const tab *t)
{
	return mix64(t->samp.seed + 0x9E3779B97F4A7C15ull * ((uint64_t)t->conv << 20 ^ t->n_turns));
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
	err e = {0};
	if (store_save(&t->chat, path, &e)) {
		ui_status(u, true, "%s", e.msg);
		return;
	}
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
		if (u->tabs[i]->file[0]) /* the saved-chat list has no file */
			names[n++] = u->tabs[i]->file;
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

/* ---- opening and closing ---- */

/* Prefills and pins the system prompt, so tabs sharing it share its blocks.
 * Blocks enter the prefix cache only once computed: while another tab's
 * prefill of the same prompt runs, this one waits for it (kick_waiting). */
static void warm_up(ui *u, tab *t)
{
	for (int i = 0; i < u->n_tabs; i++) {
		const tab *o = u->tabs[i];
		if (o != t && o->warm_req >= 0 && !strcmp(o->chat.system, t->chat.system)) {
			t->warm_waiting = true;
			return;
		}
	}
	t->warm_waiting = false;
	int32_t *ids;
	int n;
	err e = {0};
	if (t->locked || !(link_caps(u->link) & LINK_TOKENS))
		return; /* an engine that reads text (a server) caches prefixes its own way */
	if (conv_system_ids(&t->chat, &u->cm, &ids, &n, &e)) {
		ui_status(u, true, "%s: %s", t->chat.name, e.msg);
		return;
	}
	/* a prompt of exactly one block is worth it too: the prefill's block is pinned */
	if (n >= u->view.snap.block_tokens && n < u->cm.n_ctx) {
		core_request r = {
			.id = u->next_req++, .conv = t->conv, .prompt = ids, .n_prompt = n,
			.samp = t->samp, .max_tokens = 1, .n = 1, .pin_tokens = n,
		};
		r.samp.temp = 0;
		link_submit(u->link, &(link_request){.r = r});
		t->warm_req = r.id;
	}
	free(ids);
}

/* Starts the prefills that waited for one of system's to finish. */
static void kick_waiting(ui *u, const char *system)
{
	for (int i = 0; i < u->n_tabs; i++) {
		tab *t = u->tabs[i];
		if (t->warm_waiting && !strcmp(t->chat.system, system))
			warm_up(u, t);
	}
}

tab *tab_open(ui *u, conv *c, const char *file, const samp_params *sp, int max_tokens, char *locked)
{
	tab *t = xcalloc(1, sizeof *t);
	t->locked = locked;
	t->chat = *c;
	memset(c, 0, sizeof *c);
	t->conv = u->next_conv++;
	if (file) {
		snprintf(t->file, sizeof t->file, "%s", file);
	} else {
		char stamp[32];
		time_t now = time(NULL);
		struct tm tm;
		strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
		snprintf(t->file, sizeof t->file, "chat-%s-%ld-%d.json", stamp, (long)getpid(), t->conv);
	}
	t->color = (t->conv - 1) % u->p->n_tab_colors;
	t->samp = *sp;
	t->max_tokens = max_tokens;
	t->gen_req = t->warm_req = -1;
	t->prefill_frac = -1;
	t->follow = true;
	t->view_version = ~(uint64_t)0;
	if (!t->chat.origin.path && (link_caps(u->link) & LINK_TOKENS)) /* else text any model continues */
		conv_set_origin(&t->chat, u->model_path, u->model_size, u->model_header, u->fam);
	xgrow(&u->tabs, &u->cap_tabs, (int64_t)u->n_tabs + 1, sizeof *u->tabs);
	u->tabs[u->n_tabs++] = t;
	input_tab_history(u, t);
	warm_up(u, t);
	u->dirty = true;
	return t;
}

void tab_restart(ui *u, tab *t)
{
	t->conv = u->next_conv++;
	t->warm_req = t->gen_req = -1;
	t->warm_waiting = false;
	if (!t->note && !t->locked)
		conv_set_origin(&t->chat, u->model_path, u->model_size, u->model_header, u->fam);
	t->chat.version++;
	warm_up(u, t);
	tab_save(u, t);
}

void tab_set_system(ui *u, tab *t, const char *name, const char *text)
{
	if (t->warm_req >= 0)
		link_cancel(u->link, t->warm_req);
	t->warm_req = -1;
	link_close_conv(u->link, t->conv); /* the old prompt's pins go (its blocks stay cached) */
	char *old = t->chat.system;
	t->chat.system = xstrdup(text);
	free(t->chat.prompt_name);
	t->chat.prompt_name = xstrdup(name);
	kick_waiting(u, old);
	free(old);
	t->conv = u->next_conv++; /* a new engine conversation for the new prefix */
	err e = {0};
	if ((link_caps(u->link) & LINK_TOKENS) && conv_rebuild(&t->chat, &u->cm, &e))
		ui_status(u, true, "%s: %s", t->chat.name, e.msg);
	t->chat.version++;
	warm_up(u, t);
	tab_save(u, t);
	u->dirty = true;
}

void tab_free(tab *t)
{
	if (!t)
		return;
	conv_deinit(&t->chat);
	beams_free(t->alts);
	free(t->locked);
	wrap_free(&t->view);
	free(t->draft);
	free(t->note);
	free(t);
}

void tab_close(ui *u, int i)
{
	tab *t = u->tabs[i];
	if (tab_busy(t))
		tab_stop(u, t);
	if (t->warm_req >= 0)
		link_cancel(u->link, t->warm_req);
	/* its pins go: blocks only it used turn into cached ones */
	if (u->link)
		link_close_conv(u->link, t->conv);
	tab_save(u, t);
	store_journal_end(&t->journal);
	bool was_active = i == u->active;
	char *system = xstrdup(t->chat.system);
	input_tab_free(u, t);
	if (!t->note) /* Alt-z brings it back */
		snprintf(u->last_closed, sizeof u->last_closed, "%s", t->file);
	if (!t->note)
		ui_status(u, false, "closed '%s' (saved as %s)", t->chat.name, t->file);
	else if (t->file[0])
		ui_status(u, false, "closed '%s' (%s stays on disk as it was)", t->chat.name, t->file);
	else
		ui_status(u, false, "closed '%s'", t->chat.name);
	u->status_conv = -1; /* news for whichever tab shows next */
	tab_free(t);
	memmove(&u->tabs[i], &u->tabs[i + 1], (size_t)(u->n_tabs - i - 1) * sizeof *u->tabs);
	u->n_tabs--;
	kick_waiting(u, system);
	free(system);
	if (was_active) {
		u->active = MIN(i, u->n_tabs - 1);
		input_switch(u, NULL, u->tabs[u->active]);
		u->tabs[u->active]->unread = false;
	} else if (i < u->active) {
		u->active--;
	}
	tab_save_session(u);
	u->dirty = true;
}

/* ---- answers ---- */

/* Records how the answer ended and saves. */
static void finish_answer(ui *u, tab *t, const char *how, const char *error, const core_req_metrics *m)
{
	conv_answer_end(&t->chat, t->gen_msg, how, m);
	conv_msg *msg = &t->chat.msgs[t->gen_msg];
	if (!m) {
		double now = now_s();
		msg->n_gen = t->n_live;
		msg->ttft_ms = t->t_first > 0 ? 1000 * (t->t_first - t->t_submit) : 0;
		msg->tpot_ms = t->n_live > 1 ? 1000 * (now - t->t_first) / (t->n_live - 1) : 0;
	}
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
		if (cm->role == CONV_ASSISTANT && cm->len == 0)
			continue; /* an answer that never started */
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
	t->prefill_frac = turn->n_prompt > 0 ? 0 : -1; /* from the block map, when its prompt is known */
	conv_turn_deinit(turn);
	tab_save(u, t);
	u->dirty = true;
}

void tab_submit(ui *u, tab *t)
{
	beams_drop(u, t);
	bool several = beams_submit(u, t);
	t->next_n = t->next_beams = 0; /* /n and /beams are for one turn */
	if (several)
		return;
	conv_turn turn;
	err e = {0};
	t->follow = true;
	if (tab_turn_start(u, t, &turn, &e)) {
		t->gen_msg = turn.msg;
		t->gen_req = 0; /* so finish_answer saves it as an answer that failed */
		finish_answer(u, t, "error", e.msg, NULL);
		ui_status(u, true, "%s", e.msg);
		return;
	}
	t->gen_msg = turn.msg;
	core_request r = {.id = u->next_req++, .conv = t->conv, .samp = t->samp};
	conv_turn_request(&turn, &r);
	r.samp.seed = answer_seed(t);
	const char *note = t->chat.msgs[turn.msg].note;
	if (note)
		ui_status(u, false, "%s: %s", t->chat.name, note);
	tab_send(u, t, &turn, &r);
}

void tab_stop(ui *u, tab *t)
{
	if (!tab_busy(t))
		return;
	link_cancel(u->link, t->gen_req);
	finish_answer(u, t, "cancelled", NULL, NULL);
}

void tab_regenerate(ui *u, tab *t)
{
	if (tab_busy(t))
		tab_stop(u, t);
	if (t->chat.n_msgs == 0 || t->chat.msgs[t->chat.n_msgs - 1].role != CONV_ASSISTANT) {
		ui_status(u, true, "no answer to regenerate yet");
		return;
	}
	conv_pop(&t->chat);
	tab_submit(u, t);
}

void tab_fork(ui *u, tab *t)
{
	if (!(link_caps(u->link) & LINK_FORK) && tab_busy(t)) {
		ui_status(u, true, "a server cannot branch a running answer: fork when it ends (Esc stops it)");
		return;
	}
	conv c;
	conv_copy(&c, &t->chat);
	char name[64];
	snprintf(name, sizeof name, "%.20s'", t->chat.name);
	conv_set_name(&c, name);
	tab *f = tab_open(u, &c, NULL, &t->samp, t->max_tokens, t->locked ? xstrdup(t->locked) : NULL);
	if (tab_busy(t)) {
		/* the engine branches the running answer: same tokens, shared blocks */
		f->gen_req = u->next_req++;
		f->gen_msg = t->gen_msg;
		f->n_prompt = t->n_prompt;
		f->t_submit = t->t_submit;
		f->t_first = t->t_first;
		f->n_live = t->n_live;
		f->n_turns = 1;
		link_fork(u->link, t->gen_req, 0, f->gen_req, f->conv, answer_seed(f));
	}
	tab_save(u, f);
	ui_status(u, false, "forked '%s' into '%s'", t->chat.name, f->chat.name);
	u->status_conv = -1;
	/* show it */
	int i = u->n_tabs - 1;
	tab *from = u->tabs[u->active];
	u->active = i;
	input_switch(u, from, f);
	tab_save_session(u);
	u->dirty = true;
}

void tab_on_event(ui *u, const link_event *ev)
{
	tab *t = find_conv(u, ev->conv);
	if (!t)
		return;
	if (ev->req == t->warm_req) {
		if (ev->kind == CORE_EV_FINISH) {
			t->warm_req = -1;
			if (ev->finish == FIN_ERROR)
				ui_status(u, true, "%s: system prompt: %s", t->chat.name, ev->text);
			kick_waiting(u, t->chat.system);
		}
		return;
	}
	if (beams_on_event(u, t, ev)) {
		t->unread |= t != ui_tab(u);
		return;
	}
	if (ev->req != t->gen_req)
		return;
	if (ev->kind == CORE_EV_TOKEN) {
		if (t->t_first == 0)
			t->t_first = now_s();
		t->n_live++;
		t->prefill_frac = -1;
		if (ev->token >= 0) { /* a server sends text without ids */
			conv_answer_id(&t->chat, t->gen_msg, ev->token);
			store_journal_append_id(&t->journal, ev->token);
		}
		t->chat.msgs[t->gen_msg].n_gen = t->n_live;
		if (ev->text_len) {
			conv_append(&t->chat, t->gen_msg, ev->text, ev->text_len);
			store_journal_append(&t->journal, ev->text, ev->text_len);
			t->unsaved = true;
		}
	} else {
		finish_answer(u, t, core_finish_name(ev->finish),
			      ev->finish == FIN_ERROR ? ev->text : NULL, &ev->m);
		if (ev->finish == FIN_ERROR)
			ui_status(u, true, "%s: %s", t->chat.name, ev->text);
	}
	if (t != ui_tab(u))
		t->unread = true;
	u->dirty = true;
}

void tab_on_snapshot(ui *u)
{
	const link_snapshot *s = &u->view.snap;
	for (int i = 0; i < u->n_tabs; i++) {
		tab *t = u->tabs[i];
		if (!tab_busy(t) || t->t_first > 0 || t->n_prompt <= 0)
			continue;
		int64_t held = 0;
		for (int64_t b = 0; b < s->n_blocks; b++)
			held += s->map[b].conv == t->conv && s->map[b].state != BLK_FREE &&
				s->map[b].state != BLK_CACHED;
		t->prefill_frac = MIN(1.0, (double)(held * s->block_tokens) / t->n_prompt);
	}
}

/* ---- the conversation view ---- */

/* A dim line in the view (notes about the context). */
static void add_notice(wrap_doc *d, const char *text)
{
	wrap_para(d, 2);
	wrap_text(d, "[", 1, ST_META);
	wrap_text(d, text, strlen(text), ST_META);
	wrap_text(d, "]", 1, ST_META);
}

/* Before message i: where the context starts, and how the prompt of
 * message `noted` (i, or the answer drawn with it) was made. */
static void add_context_notes(wrap_doc *d, const conv *c, int i, int noted)
{
	if (i == c->first && c->first > 0) {
		char buf[96];
		snprintf(buf, sizeof buf, "the %d messages above have left the context", c->first);
		wrap_para(d, 0);
		add_notice(d, buf);
	}
	if (noted < c->n_msgs && c->msgs[noted].note) {
		wrap_para(d, 0);
		add_notice(d, c->msgs[noted].note);
	}
}

static void add_meta(wrap_doc *d, const conv_msg *m)
{
	if (m->error) {
		wrap_para(d, 2);
		wrap_text(d, "error: ", 7, ST_ERROR);
		wrap_text(d, m->error, strlen(m->error), ST_ERROR);
	}
	if (m->role != CONV_ASSISTANT || !m->finish[0] || (m->error && m->n_gen == 0))
		return;
	char buf[160];
	int n = snprintf(buf, sizeof buf, "[%d tok, %s", m->n_gen, m->finish);
	if (m->ttft_ms > 0)
		n += snprintf(buf + n, sizeof buf - (size_t)n, ", TTFT %.*f ms", m->ttft_ms < 10 ? 1 : 0,
			      m->ttft_ms);
	if (m->tpot_ms > 0)
		n += snprintf(buf + n, sizeof buf - (size_t)n, ", %.2f ms/tok", m->tpot_ms);
	if (m->n_prompt > 0) /* how much of the prompt the prefix cache gave */
		n += snprintf(buf + n, sizeof buf - (size_t)n, ", prompt %d tok: %d from the cache", m->n_prompt,
			      m->n_cached);
	n += snprintf(buf + n, sizeof buf - (size_t)n, "]");
	wrap_para(d, 0);
	wrap_text(d, buf, (size_t)n, ST_META);
}

static void add_cursor(const ui *u, wrap_doc *d, const tab *t, int i)
{
	if (tab_busy(t) && t->gen_msg == i) {
		const char *c = u->utf8 ? "\u258c" : "_";
		wrap_text(d, c, strlen(c), ST_CURSOR);
	}
}

/* Message i is an empty user turn that asks the answer before it to go on
 * (completion mode's empty line): that answer and the next are one text. */
static bool continues(const conv *c, int i)
{
	return i > 0 && i + 1 < c->n_msgs && i != c->first && c->msgs[i].role == CONV_USER &&
	       c->msgs[i].len == 0 && c->msgs[i - 1].role == CONV_ASSISTANT &&
	       c->msgs[i + 1].role == CONV_ASSISTANT && !c->msgs[i + 1].note;
}

/* The answer that several alternatives stand for is drawn by ui_beams.c. */
static bool hidden(const tab *t, int i)
{
	return t->alts && i == t->gen_msg;
}

/* Completion mode: the system prompt, then each turn as one paragraph (the
 * user's text in bold, the model's continuation after it, and what an
 * empty line made it add, with no break: words split between two answers
 * stay whole). The figures come once, after the last part. */
static void build_completion(const ui *u, const tab *t, wrap_doc *d)
{
	const conv *c = &t->chat;
	if (*c->system) {
		wrap_para(d, 0);
		wrap_text(d, c->system, strlen(c->system), ST_SYSTEM);
	}
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		if (hidden(t, i))
			continue;
		if (continues(c, i)) {
			m = &c->msgs[++i];
			wrap_text(d, m->text, m->len, ST_PLAIN);
			add_cursor(u, d, t, i);
			if (!continues(c, i + 1))
				add_meta(d, m);
			continue;
		}
		bool with_answer = m->role == CONV_USER && i + 1 < c->n_msgs &&
				   c->msgs[i + 1].role == CONV_ASSISTANT && !hidden(t, i + 1);
		add_context_notes(d, c, i, with_answer ? i + 1 : i);
		if (m->role == CONV_USER) {
			wrap_para(d, 0); /* a blank line between turns */
			wrap_para(d, 0);
			wrap_text(d, m->text, m->len, ST_USER);
			if (!with_answer) {
				add_meta(d, m);
				continue;
			}
			m = &c->msgs[++i];
		} else {
			wrap_para(d, 0);
		}
		wrap_text(d, m->text, m->len, ST_PLAIN);
		add_cursor(u, d, t, i);
		if (!continues(c, i + 1))
			add_meta(d, m);
	}
}

/* Chat mode: one paragraph per message behind a label; answers are
 * Markdown (ui/md.h), without the model's leading blanks, their code
 * blocks numbered over the tab for /copy N. */
static void build_chat(const ui *u, const tab *t, wrap_doc *d)
{
	const conv *c = &t->chat;
	if (*c->system) {
		wrap_para(d, 8);
		wrap_text(d, "system: ", 8, ST_LABEL);
		wrap_text(d, c->system, strlen(c->system), ST_SYSTEM);
	}
	int blocks = 0;
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		if (hidden(t, i))
			continue;
		add_context_notes(d, c, i, i);
		wrap_para(d, 0);
		wrap_para(d, 5);
		wrap_text(d, m->role == CONV_USER ? "you> " : "bot> ", 5, ST_LABEL);
		if (m->role == CONV_USER) {
			wrap_text(d, m->text, m->len, ST_USER);
		} else {
			size_t skip = 0;
			while (skip < m->len && (m->text[skip] == ' ' || m->text[skip] == '\n'))
				skip++;
			md_opts o = {.indent = 5, .style0 = ST_MD, .utf8 = u->utf8, .join_first = true,
				     .first_block = blocks + 1};
			blocks += md_render(d, m->text + skip, m->len - skip, &o);
		}
		add_cursor(u, d, t, i);
		add_meta(d, m);
	}
}

/* A read-only tab: its note, a paragraph per line; the first in the error
 * style (what went wrong, or the list's title). */
static void build_note(const tab *t, wrap_doc *d)
{
	for (const char *s = t->note; *s;) {
		size_t n = strcspn(s, "\n");
		wrap_para(d, 0);
		wrap_text(d, s, n, s == t->note ? ST_ERROR : ST_PLAIN);
		s += n + (s[n] == '\n');
	}
}

static void build_view(const ui *u, tab *t, int width)
{
	uint64_t version = t->chat.version + (tab_busy(t) ? 1u << 31 : 0);
	if (t->view_version == version && t->view_width == width)
		return;
	wrap_clear(&t->view);
	if (t->note)
		build_note(t, &t->view);
	else if (completion_mode(u))
		build_completion(u, t, &t->view);
	else
		build_chat(u, t, &t->view);
	beams_build_view(u, t, &t->view);
	if (t->locked) {
		wrap_para(&t->view, 0);
		add_notice(&t->view, t->locked);
	}
	wrap_layout(&t->view, width);
	t->view_version = version;
	t->view_width = width;
}

static int chat_height(const ui *u)
{
	return u->w_chat ? getmaxy(u->w_chat) : 1;
}

/* The first line shown, after clamping. */
static int view_top(const ui *u, tab *t)
{
	int h = chat_height(u), bottom = MAX(0, t->view.n_lines - h);
	if (t->follow || t->top >= bottom)
		return bottom;
	return MAX(0, t->top);
}

static int chat_width(const ui *u)
{
	return u->w_chat ? MAX(1, getmaxx(u->w_chat) - 1) : 1;
}

void tab_scroll(ui *u, tab *t, int lines)
{
	build_view(u, t, chat_width(u)); /* a tab not drawn yet has no lines */
	int h = chat_height(u), bottom = MAX(0, t->view.n_lines - h);
	int top = view_top(u, t) - lines;
	top = MAX(0, MIN(top, bottom));
	t->top = top;
	t->follow = top >= bottom;
	u->dirty = true;
}

void tab_page(ui *u, tab *t, int pages)
{
	tab_scroll(u, t, pages * MAX(1, chat_height(u) - 2));
}

/* An answer's Markdown: the MD_* flags as attributes. */
static attr_t md_attr(const ui *u, const tab *t, int flags)
{
	attr_t a = A_NORMAL;
	if (flags & MD_BOLD)
		a |= A_BOLD;
	if (flags & MD_ITALIC)
		a |= A_ITALIC;
	if (flags & MD_HEAD)
		a |= A_UNDERLINE;
	if (flags & (MD_QUOTE | MD_TAG))
		a |= A_DIM;
	if (flags & MD_MARK)
		a |= A_BOLD | (u->colors ? COLOR_PAIR(t->color + 1) : 0);
	if (flags & (MD_CODE | MD_PRE))
		a |= u->colors ? COLOR_PAIR(PAIR_CODE) : (flags & MD_CODE ? A_BOLD : 0);
	return a;
}

static attr_t style_attr(const ui *u, const tab *t, int style)
{
	short pair = (short)(t->color + 1);
	if (style >= ST_MD)
		return md_attr(u, t, style - ST_MD);
	switch (style) {
	case ST_SYSTEM:
	case ST_META:
		return A_DIM;
	case ST_USER:
		return A_BOLD;
	case ST_LABEL:
		return A_BOLD | (u->colors ? COLOR_PAIR(pair) : 0);
	case ST_ERROR:
		return A_BOLD | (u->colors ? COLOR_PAIR(PAIR_ERROR) : 0);
	case ST_CURSOR:
		return u->colors ? COLOR_PAIR(pair) : A_BOLD;
	default:
		return A_NORMAL;
	}
}

/* Draws s[len] at the cursor: tabs as spaces, other control characters not. */
static void put_text(WINDOW *w, const char *s, size_t len)
{
	wchar_t buf[256];
	int n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		i += (size_t)wrap_char(s + i, len - i, &cp);
		if (cp == '\t')
			cp = ' ';
		if (wrap_cp_width(cp) == 0 && cp < 0x300)
			continue;
		buf[n++] = (wchar_t)cp;
		if (n == (int)ARRAY_LEN(buf)) {
			waddnwstr(w, buf, n);
			n = 0;
		}
	}
	if (n)
		waddnwstr(w, buf, n);
}

/* Draws view line ln at row y: its segments, and a code block's background
 * on to the window's edge. */
static void draw_line(ui *u, tab *t, WINDOW *w, int y, const wrap_line *ln)
{
	wmove(w, y, ln->indent);
	attr_t pre = 0;
	for (int k = 0; k < ln->n_segs; k++) {
		const wrap_seg *sg = &t->view.segs[ln->seg + k];
		attr_t a = style_attr(u, t, sg->style);
		if (sg->style >= ST_MD && (sg->style - ST_MD) & MD_PRE)
			pre = a;
		wattrset(w, a);
		put_text(w, t->view.text + sg->off, sg->len);
	}
	if (pre && u->colors) {
		wattrset(w, pre);
		for (int x = getcurx(w); x < getmaxx(w) - 1 && getcury(w) == y; x++)
			waddch(w, ' ');
	}
	wattrset(w, A_NORMAL);
}

/* The view from its top line; when more follows below, the last row says
 * so instead of showing a line (never drawn over text). */
void tab_draw_chat(ui *u)
{
	WINDOW *w = u->w_chat;
	tab *t = ui_tab(u);
	werase(w);
	int h = getmaxy(w), width = getmaxx(w);
	build_view(u, t, chat_width(u));
	int top = view_top(u, t);
	bool more = !t->follow && top < MAX(0, t->view.n_lines - h);
	int rows = more ? h - 1 : h;
	for (int y = 0; y < rows && top + y < t->view.n_lines; y++)
		draw_line(u, t, w, y, &t->view.lines[top + y]);
	if (more) {
		const char *msg = " more below: PgDn ";
		wattrset(w, A_REVERSE);
		mvwaddstr(w, h - 1, MAX(0, width - (int)strlen(msg) - 1), msg);
		wattrset(w, A_NORMAL);
	}
	wnoutrefresh(w);
}

/* Tab i's label on the bar into buf; returns its width in columns. */
static int bar_label(const ui *u, const tab *t, int i, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, " %d:%s", i + 1, t->chat.name);
	if (tab_busy(t) && t->t_first == 0 && t->prefill_frac >= 0)
		n += snprintf(buf + n, cap - (size_t)n, " %.0f%%", 100 * t->prefill_frac);
	else if (tab_busy(t))
		n += snprintf(buf + n, cap - (size_t)n, " *");
	int level = tab_context_level(u, t);
	if (level) /* the context gauge warns before the overflow policy acts */
		n += snprintf(buf + n, cap - (size_t)n, " ctx %d/%d%s", tab_context_used(t), u->cm.n_ctx,
			      level > 1 ? "!" : "");
	if (t->unread)
		n += snprintf(buf + n, cap - (size_t)n, " +");
	snprintf(buf + n, cap - (size_t)n, " ");
	return wrap_width(buf, strlen(buf));
}

/* Columns tabs [a, b] take on the bar: labels, blanks, and 2 for each
 * "<"/">" mark of tabs left off. */
static int bar_need(const int *width, int n, int a, int b)
{
	int need = (a > 0 ? 2 : 0) + (b < n - 1 ? 2 : 0);
	for (int i = a; i <= b; i++)
		need += width[i] + 1;
	return need;
}

/* The tabs [*first, *last] the bar shows: as many as fit in cols columns,
 * always with the active one. */
static void bar_window(const int *width, int n, int active, int cols, int *first, int *last)
{
	int a = active, b = active;
	for (bool grew = true; grew;) {
		grew = false;
		if (b + 1 < n && bar_need(width, n, a, b + 1) <= cols)
			b++, grew = true;
		if (a > 0 && bar_need(width, n, a - 1, b) <= cols)
			a--, grew = true;
	}
	*first = a;
	*last = b;
}

void tab_draw_bar(ui *u)
{
	WINDOW *w = u->w_bar;
	werase(w);
	wmove(w, 0, 0);
	char(*label)[160] = xmalloc((size_t)u->n_tabs * sizeof *label);
	int *width = xmalloc((size_t)u->n_tabs * sizeof *width), total = 0;
	for (int i = 0; i < u->n_tabs; i++)
		total += (width[i] = bar_label(u, u->tabs[i], i, label[i], sizeof label[i])) + 1;
	int first = 0, last = u->n_tabs - 1;
	if (total > u->cols)
		bar_window(width, u->n_tabs, u->active, u->cols, &first, &last);
	if (first > 0)
		waddstr(w, "< ");
	for (int i = first; i <= last; i++) {
		tab *t = u->tabs[i];
		wattrset(w, (u->colors ? COLOR_PAIR(t->color + 1) : 0) | (i == u->active ? A_REVERSE | A_BOLD : 0));
		waddnstr(w, label[i], -1);
		wattrset(w, A_NORMAL);
		waddch(w, ' ');
	}
	if (last < u->n_tabs - 1)
		waddstr(w, ">");
	free(label);
	free(width);
	char right[96];
	snprintf(right, sizeof right, " %s  %s ", u->model_name, tab_mode_name(u));
	int x = getcurx(w), rw = (int)strlen(right);
	if (x + rw < u->cols) {
		wattrset(w, A_DIM);
		mvwaddstr(w, 0, u->cols - rw, right);
		wattrset(w, A_NORMAL);
	}
	wnoutrefresh(w);
}
