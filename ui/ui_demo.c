/* ui/ui_demo.c: a scripted tour of the chat (`pagechat demo`).
 *
 * The steps come from ui_params.demo (app/cmd_demo.c writes them): captions
 * for the status bar, lines typed into a tab (turns, /n, /pick), a fork
 * once an answer has so many tokens, waits until everything is idle and
 * pauses. The tour does nothing the user could not do by hand: it types
 * through the same line handler readline reaches (ui.on_line) and forks
 * through the same tab_fork, so what the panels show is the engine's own
 * counting. A line has a chat model's version (a question for an assistant)
 * beside the completion model's (a story to go on). A key ends the tour and
 * then does what it always does (nothing typed is lost); F1 and the help's
 * keys leave it running. The chat is then the user's as usual. UI thread
 * only. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ui_demo_run {
	int next;                /* the step to run next */
	int n_captions;          /* captions shown so far */
	/* with PAGECHAT_SCREEN_DUMP: the next step waits for its record (the
	 * screen drawn at that moment and the snapshot, demo_record) */
	bool record_pending, recorded;
	const char *record_tag;  /* static: "" (a step's end) or "-fork" */
	double until;            /* a pause ends then (s) */
	const char *caption;     /* borrowed from the script */
};

void demo_start(ui *u)
{
	if (!u->p->demo || u->p->n_demo <= 0)
		return;
	u->demo = xcalloc(1, sizeof *u->demo);
}

void demo_free(ui *u)
{
	free(u->demo);
	u->demo = NULL;
}

const char *demo_caption(const ui *u)
{
	return u->demo ? u->demo->caption : NULL;
}

void demo_key(ui *u, int r, wint_t ch)
{
	bool code = r == KEY_CODE_YES;
	if (!u->demo || u->mode == MODE_HELP ||
	    (code && (ch == KEY_F(1) || ch == KEY_RESIZE || ch == KEY_MOUSE)))
		return;
	demo_free(u);
	ui_status(u, false, "the tour stopped: the chat is yours (F1 help)");
}

/* Whether the step due must wait for its record first (with PAGECHAT_SCREEN_DUMP
 * only): a step's end is recorded before the next caption, or the end;
 * tag names a moment within a step. */
static bool wait_record(ui *u, const char *tag)
{
	struct ui_demo_run *d = u->demo;
	if (!u->dump_path || d->recorded || (!*tag && d->n_captions == 0))
		return false;
	d->record_pending = true;
	d->record_tag = tag;
	return true;
}

bool demo_record_pending(const ui *u)
{
	return u->demo && u->demo->record_pending;
}

void demo_record(ui *u)
{
	struct ui_demo_run *d = u->demo;
	if (!d || !d->record_pending || !u->dump_path)
		return;
	d->record_pending = false;
	d->recorded = true;
	char path[4200];
	err e = {0};
	snprintf(path, sizeof path, "%s.step%d%s.txt", u->dump_path, d->n_captions, d->record_tag);
	snapshot_write_text(u, path, &e);
	size_t len = 0;
	char *screen = file_read_all(u->dump_path, (size_t)64 << 20, "the screen dump", &len, &e);
	snprintf(path, sizeof path, "%s.step%d%s.screen", u->dump_path, d->n_captions, d->record_tag);
	if (screen)
		file_write_atomic(path, screen, len, 0600, &e);
	free(screen);
}

/* Nothing answers, nothing waits to prefill, and the engine agrees. */
static bool all_idle(const ui *u)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (tab_busy(u->tabs[i]) || u->tabs[i]->warm_req >= 0 || u->tabs[i]->warm_waiting)
			return false;
	return u->view.snap.st.n_running == 0 && u->view.snap.st.n_waiting == 0;
}

/* Runs step s if it can run now; false when it must wait. */
static bool run_step(ui *u, const ui_demo_step *s, double now)
{
	struct ui_demo_run *d = u->demo;
	tab *t = s->tab >= 0 && s->tab < u->n_tabs ? u->tabs[s->tab] : ui_tab(u);
	switch (s->kind) {
	case DEMO_CAPTION:
		if (wait_record(u, ""))
			return false;
		d->n_captions++;
		d->caption = s->text;
		u->dirty = true;
		return true;
	case DEMO_LINE:
		if (tab_busy(t))
			return false;
		tab_show(u, s->tab < u->n_tabs ? s->tab : u->active);
		u->on_line(u, s->chat_text && !conv_completion_mode(&u->cm) ? s->chat_text : s->text);
		return true;
	case DEMO_FORK:
		if (tab_busy(t) && t->n_live < s->count)
			return false;
		tab_show(u, s->tab < u->n_tabs ? s->tab : u->active);
		if (tab_busy(t) && wait_record(u, "-fork")) /* a moment with a sequence running */
			return false;
		if (tab_busy(t))
			tab_fork(u, t);
		return true;
	case DEMO_WAIT:
		return all_idle(u);
	case DEMO_PAUSE:
		if (d->until == 0)
			d->until = now + s->count / 10.0 / (u->p->demo_speed > 0 ? u->p->demo_speed : 1);
		if (now < d->until)
			return false;
		d->until = 0;
		return true;
	default:
		return true;
	}
}

bool demo_tick(ui *u, double now)
{
	while (u->demo && u->demo->next < u->p->n_demo) {
		const ui_demo_step *s = &u->p->demo[u->demo->next];
		if (s->kind == DEMO_END && wait_record(u, ""))
			return true;
		if (s->kind == DEMO_END) {
			demo_free(u);
			ui_status(u, false, "%s", s->text ? s->text : "the tour is over: the chat is yours");
			return false;
		}
		if (!run_step(u, s, now))
			return true;
		u->demo->next++;
		u->demo->recorded = false;
	}
	if (u->demo)
		demo_free(u);
	return false;
}
