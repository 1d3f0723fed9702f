/* ui/ui_beams.c: several answers to one turn, and the choice among them.
 *
 * `/n N` asks the engine for N sampled completions of one prompt (one
 * request, n = N), `/beams W` for beam search of width W (beams = W): either
 * way the completions share the prompt's KV blocks by refcount and split
 * only where their tokens differ, which the block tables panel (ui_rows.c)
 * shows while they run. The answers are drawn one under the other in the
 * tab, numbered; when all have ended the best (beams: rank 1; sampled: the
 * first) stands in the conversation, so nothing is lost if the user leaves,
 * and `/pick K` (or F7 to highlight, then `/pick`) puts answer K there
 * instead: its token ids become the history the next turn's prompt is built
 * from, so the prefix cache finds its blocks. UI thread only. */
#include "ui/ui_int.h"

#include "engine/beam.h"
#include "config/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALT_MAX 16
/* Sampled answers of a greedy tab would all be the same: they get this. */
#define ALT_TEMP 0.8f

typedef struct alt {
	char *text;              /* owned; [len] */
	size_t len, cap;
	int32_t *ids;            /* owned; [n_ids] the tokens it generated */
	int n_ids, cap_ids;
	char finish[12];         /* "" while it runs */
	double logprob;          /* beams: cumulative log-probability */
	core_req_metrics m;
} alt;

struct alts {
	int n;                   /* answers */
	int beams;               /* 0: sampled */
	float temp;              /* sampled: the temperature used */
	int64_t req;
	int msg;                 /* the assistant message they stand for */
	int shown;               /* highlighted (F7), 0-based */
	int n_done;
	alt a[ALT_MAX];
};

void beams_free(struct alts *x)
{
	if (!x)
		return;
	for (int i = 0; i < x->n; i++) {
		free(x->a[i].text);
		free(x->a[i].ids);
	}
	free(x);
}

void beams_drop(ui *u, tab *t)
{
	if (!t->alts)
		return;
	if (t->alts->n_done < t->alts->n)
		link_cancel(u->link, t->alts->req);
	beams_free(t->alts);
	t->alts = NULL;
	t->chat.version++;
}

/* "3" -> 3 within [lo, hi]; -1 with a status message otherwise. The rest of
 * the argument (the prompt, maybe empty) goes to *rest. */
static int parse_count(ui *u, const char *arg, const char *cmd, enum param_id id, const char **rest)
{
	char *end;
	long v = strtol(arg, &end, 10);
	if (end == arg || (*end && *end != ' ') || !param_ok(id, (double)v)) {
		char range[96];
		ui_status(u, true, "usage: /%s N [PROMPT] with N in %s", cmd,
			  param_range_text(id, range, sizeof range));
		return -1;
	}
	if (v > (id == P_BEAMS ? 0 : 1) && !(link_caps(u->link) & LINK_SEVERAL)) {
		ui_status(u, true, "/%s: this engine (a server) gives one answer per turn", cmd);
		return -1;
	}
	while (*end == ' ')
		end++;
	*rest = end;
	return (int)v;
}

/* Hands TEXT back to be entered as the turn now (ui.next_line), or keeps
 * the setting for the next turn. */
static void start_or_keep(ui *u, const char *text, const char *what)
{
	if (!*text) {
		ui_status(u, false, "the next prompt in this tab gets %s", what);
		return;
	}
	free(u->next_line);
	u->next_line = xstrdup(text);
}

void beams_cmd_n(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	const char *rest;
	int n = parse_count(u, arg, "n", P_CHAT_N, &rest);
	if (n < 0)
		return;
	t->next_n = n > 1 ? n : 0;
	t->next_beams = 0;
	char what[64];
	snprintf(what, sizeof what, n > 1 ? "%d sampled answers to pick from" : "one answer", n);
	start_or_keep(u, rest, what);
}

void beams_cmd_beams(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	const char *rest;
	int w = parse_count(u, arg, "beams", P_BEAMS, &rest);
	if (w < 0)
		return;
	t->next_beams = w;
	t->next_n = 0;
	char what[64];
	snprintf(what, sizeof what, w ? "beam search: the %d best beams to pick from" : "one sampled answer", w);
	start_or_keep(u, rest, what);
}

bool beams_submit(ui *u, tab *t)
{
	int n = t->next_beams ? t->next_beams : t->next_n;
	if (n < 1 || (n == 1 && !t->next_beams))
		return false;
	conv_turn turn;
	err e = {0};
	t->follow = true;
	if (tab_turn_start(u, t, &turn, &e)) {
		conv_answer_end(&t->chat, turn.msg, "error", NULL);
		conv_set_error(&t->chat, turn.msg, e.msg);
		ui_status(u, true, "%s", e.msg);
		tab_save(u, t);
		return true;
	}
	struct alts *x = xcalloc(1, sizeof *x);
	x->n = n;
	x->beams = t->next_beams;
	x->msg = turn.msg;
	core_request r = {.id = u->next_req++, .conv = t->conv, .samp = t->samp};
	conv_turn_request(&turn, &r);
	if (x->beams) {
		r.beams = x->beams;
		r.length_penalty = 1.0f;
	} else {
		r.n = n;
		if (r.samp.temp <= 0)
			r.samp.temp = ALT_TEMP;
		x->temp = r.samp.temp;
		r.samp.seed = t->samp.seed ^ (0x9E3779B97F4A7C15ull * (t->n_turns + 1) + (uint64_t)t->conv);
	}
	x->req = r.id;
	t->alts = x;
	tab_send(u, t, &turn, &r);
	return true;
}

/* Puts answer k into the conversation's message (its text and ids). */
static void apply(tab *t, int k, const char *finish)
{
	const struct alts *x = t->alts;
	const alt *a = &x->a[k];
	conv_answer_clear(&t->chat, x->msg);
	for (int i = 0; i < a->n_ids; i++)
		conv_answer_id(&t->chat, x->msg, a->ids[i]);
	if (a->len)
		conv_append(&t->chat, x->msg, a->text, a->len);
	conv_answer_end(&t->chat, x->msg, finish ? finish : a->finish, a->finish[0] ? &a->m : NULL);
}

static void on_token(ui *u, tab *t, alt *a, const link_event *ev)
{
	xgrow(&a->ids, &a->cap_ids, (int64_t)a->n_ids + 1, sizeof *a->ids);
	a->ids[a->n_ids++] = ev->token;
	xgrow_size(&a->text, &a->cap, a->len + ev->text_len + 1, 1);
	memcpy(a->text + a->len, ev->text, ev->text_len);
	a->len += ev->text_len;
	a->text[a->len] = '\0';
	if (t->t_first == 0)
		t->t_first = now_s();
	t->n_live++;
	if (ev->m.n_gen > 0) /* a sampled answer's figures so far (none for beams) */
		a->m = ev->m;
	t->prefill_frac = -1;
	t->chat.version++;
	(void)u;
}

bool beams_live(const tab *t, core_req_metrics *m)
{
	const struct alts *x = t->alts;
	if (!x || x->n_done == x->n || x->a[0].m.n_gen <= 0)
		return false;
	*m = x->a[0].m;
	return true;
}

/* Every answer has ended: the first stands in the conversation until a pick. */
static void all_done(ui *u, tab *t)
{
	struct alts *x = t->alts;
	bool stopped = t->gen_req != x->req; /* Esc ended the turn already */
	apply(t, 0, stopped ? "cancelled" : NULL);
	t->gen_req = -1;
	t->prefill_frac = -1;
	t->chat.version++;
	tab_save(u, t);
	bool all_failed = true; /* then the status keeps the engine's reason (a pool too small, ...) */
	for (int k = 0; k < x->n; k++)
		all_failed = all_failed && !strcmp(x->a[k].finish, "error");
	if (!stopped && !all_failed)
		ui_status(u, false, "%d answers: /pick 1..%d continues with one (F7 highlights the next)", x->n,
			  x->n);
}

bool beams_on_event(ui *u, tab *t, const link_event *ev)
{
	struct alts *x = t->alts;
	if (!x || ev->req != x->req)
		return false;
	if (ev->index < 0 || ev->index >= x->n)
		return true;
	alt *a = &x->a[ev->index];
	if (ev->kind == CORE_EV_TOKEN) {
		on_token(u, t, a, ev);
	} else if (!a->finish[0]) {
		snprintf(a->finish, sizeof a->finish, "%s", core_finish_name(ev->finish));
		a->m = ev->m;
		a->logprob = ev->m.logprob;
		if (ev->finish == FIN_ERROR)
			ui_status(u, true, "%s: %.*s", t->chat.name, (int)ev->text_len, ev->text);
		if (++x->n_done == x->n)
			all_done(u, t);
	}
	u->dirty = true;
	return true;
}

void beams_cmd_pick(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	struct alts *x = t->alts;
	if (!x) {
		ui_status(u, true, "no answers to pick from: /n N or /beams W first");
		return;
	}
	if (x->n_done < x->n) {
		ui_status(u, true, "the answers are still coming: wait, or Esc to stop them");
		return;
	}
	int k = x->shown + 1;
	if (*arg) {
		char *end;
		long v = strtol(arg, &end, 10);
		if (end == arg || *end || v < 1 || v > x->n) {
			ui_status(u, true, "usage: /pick K with K in 1..%d", x->n);
			return;
		}
		k = (int)v;
	}
	apply(t, k - 1, NULL);
	ui_status(u, false, "continuing with answer %d of %d", k, x->n);
	beams_free(x);
	t->alts = NULL;
	t->chat.version++;
	tab_save(u, t);
	u->dirty = true;
}

void beams_key_next(ui *u)
{
	tab *t = ui_tab(u);
	if (!t->alts) {
		ui_status(u, false, "F7 highlights the next of several answers (/n N, /beams W)");
		return;
	}
	t->alts->shown = (t->alts->shown + 1) % t->alts->n;
	t->chat.version++;
	ui_status(u, false, "answer %d highlighted: /pick continues with it", t->alts->shown + 1);
}

static void add_line(wrap_doc *d, int indent, const char *s, int style)
{
	wrap_para(d, indent);
	wrap_text(d, s, strlen(s), style);
}

void beams_build_view(const ui *u, const tab *t, wrap_doc *d)
{
	const struct alts *x = t->alts;
	if (!x)
		return;
	char buf[200];
	wrap_para(d, 0);
	if (x->beams)
		snprintf(buf, sizeof buf, "-- the %d best beams, sharing the prompt's KV blocks --", x->n);
	else
		snprintf(buf, sizeof buf, "-- %d sampled answers (temperature %.2g), sharing the prompt's KV blocks --",
			 x->n, x->temp);
	add_line(d, 0, buf, ST_META);
	for (int k = 0; k < x->n; k++) {
		const alt *a = &x->a[k];
		wrap_para(d, 0);
		wrap_para(d, 4);
		snprintf(buf, sizeof buf, "[%d] ", k + 1);
		wrap_text(d, buf, strlen(buf), k == x->shown && x->n_done == x->n ? ST_CHOSEN : ST_LABEL);
		size_t skip = 0; /* without the model's leading blanks, as an answer is shown */
		while (skip < a->len && (a->text[skip] == ' ' || a->text[skip] == '\n'))
			skip++;
		wrap_text(d, a->text ? a->text + skip : "", a->len - skip, ST_PLAIN);
		if (!a->finish[0] && tab_busy(t)) {
			const char *c = u->utf8 ? "\u258c" : "_";
			wrap_text(d, c, strlen(c), ST_CURSOR);
			continue;
		}
		size_t m = 0;
		bfmt(buf, sizeof buf, &m, "[%d tok, %s", a->n_ids, a->finish[0] ? a->finish : "cancelled");
		if (x->beams)
			bfmt(buf, sizeof buf, &m, ", logprob %.2f", a->logprob);
		bfmt(buf, sizeof buf, &m, "]");
		add_line(d, 4, buf, ST_META);
	}
	if (x->n_done == x->n) {
		size_t m = 0;
		buf[0] = '\0';
		if (x->beams && x->a[0].m.tpot_ms > 0) /* the engine's time per round of all beams */
			bfmt(buf, sizeof buf, &m, "%.2f ms per beam step; ", x->a[0].m.tpot_ms);
		bfmt(buf, sizeof buf, &m, "/pick 1..%d continues with one (now: %d; F7 highlights the next)",
			 x->n, x->shown + 1);
		wrap_para(d, 0);
		add_line(d, 0, buf, ST_META);
	}
}
