/* ui/ui_tabs.c: the tabs: opening, closing and showing them, their
 * system prompts, and the answers they ask for and the events that stream
 * back.
 *
 * A tab owns one engine conversation id for its whole life. When it opens,
 * it prefills its system prompt with a one-token request that pins those
 * blocks (the "warm-up"), so a second tab with the same prompt finds them
 * in the prefix cache at once. Events are matched by request id, so a
 * cancelled or regenerated answer's late events fall on the floor. */
#include "ui/ui_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The tab of engine conversation conv, or NULL. */
static tab *find_conv(ui *u, int conv)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i]->conv == conv)
			return u->tabs[i];
	return NULL;
}

/* A different seed per tab and per answer, reproducible from the config's. */
static uint64_t answer_seed(const tab *t)
{
	return mix64(t->samp.seed + 0x9E3779B97F4A7C15ull * ((uint64_t)t->conv << 20 ^ t->n_turns));
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
			.samp = t->samp, .n = 1, .pin_tokens = n, .prefill_only = true,
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
	if (!t->note) { /* Alt-z brings it back, where it was */
		snprintf(u->last_closed, sizeof u->last_closed, "%s", t->file);
		u->last_closed_at = i;
	}
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
		t->gen_req = 0; /* so tab_finish saves it as an answer that failed */
		t->n_live = 0, t->t_first = 0; /* no figures: not the last answer's */
		tab_finish(u, t, "error", e.msg, NULL);
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
		f->live = t->live;
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
		t->live = ev->m;
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
		tab_finish(u, t, core_finish_name(ev->finish),
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

/* ---- showing ---- */

void tab_show(ui *u, int i)
{
	if (i < 0 || i >= u->n_tabs || i == u->active)
		return;
	tab *from = ui_tab(u);
	u->active = i;
	input_switch(u, from, u->tabs[i]);
	u->tabs[i]->unread = false;
	u->mode = MODE_NORMAL;
	if (u->status[0] && u->status_conv != u->tabs[i]->conv)
		u->status[0] = '\0'; /* a message about the tab left behind goes with it */
	u->dirty = true;
	tab_save_session(u);
}

void tab_new(ui *u, const ui_prompt *pr)
{
	char name[32];
	snprintf(name, sizeof name, "tab%d", u->next_conv);
	conv c;
	conv_init(&c, name, pr->name, pr->text);
	tab_open(u, &c, NULL, &u->p->samp, u->p->max_tokens, NULL);
	tab_show(u, u->n_tabs - 1);
	tab_save_session(u);
}
