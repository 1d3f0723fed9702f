/* ui/ui_set.c: a tab's settings from the input line: /set NAME VALUE for
 * its sampling and answer length (each value checked against the same
 * range as its flag and config key, config/params.h), /system TEXT for its
 * system prompt (the conversation's history is rendered again from its
 * text, and the tab says so), /prompts for the named system prompts; and
 * the settings' summary the status line shows. Settings belong to the tab
 * and last while it is open; a new tab starts from the configuration's. */
#include "ui/ui_int.h"

#include "config/params.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What /set knows: the name typed, its range's row, and where it goes. */
enum set_field { F_TEMP, F_TOP_P, F_TOP_K, F_MIN_P, F_REPEAT, F_MAX_TOKENS, F_SEED };

static const struct setting {
	const char *name;
	enum param_id range;     /* P_NONE: any unsigned 64-bit number (the seed) */
	enum set_field field;
} settings[] = {
	{"temp", P_TEMP, F_TEMP},       {"top_p", P_TOP_P, F_TOP_P},
	{"top_k", P_TOP_K, F_TOP_K},    {"min_p", P_MIN_P, F_MIN_P},
	{"repeat_penalty", P_REPEAT_PENALTY, F_REPEAT},
	{"max_tokens", P_MAX_TOKENS, F_MAX_TOKENS}, {"seed", P_NONE, F_SEED},
};

void set_summary(const tab *t, char *buf, size_t cap)
{
	const samp_params *s = &t->samp;
	size_t n = 0;
	bfmt(buf, cap, &n, "temp %g top-p %g top-k %d", s->temp, s->top_p, s->top_k);
	if (t->max_tokens > 0)
		bfmt(buf, cap, &n, " max %d", t->max_tokens);
	else
		bfmt(buf, cap, &n, " max ctx");
}

/* The value of v for s into t; false (with a status) when it is not one. */
static bool apply(ui *u, tab *t, const struct setting *s, const char *v)
{
	char *end;
	errno = 0;
	char who[48];
	snprintf(who, sizeof who, "/set %s", s->name);
	if (s->field == F_SEED) {
		uint64_t seed = strtoull(v, &end, 10);
		if (*v == '-' || end == v || *end || errno) {
			ui_status(u, true, "%s: '%.20s' is not a number 0..2^64-1", who, v);
			return false;
		}
		t->samp.seed = seed;
		return true;
	}
	double x = strtod(v, &end);
	if (end == v || *end || errno || !param_ok(s->range, x) ||
	    ((s->field == F_TOP_K || s->field == F_MAX_TOKENS) && x != floor(x))) {
		char msg[200];
		if (end == v || *end || errno)
			ui_status(u, true, "%s: '%.20s' is not a number", who, v);
		else
			ui_status(u, true, "%s", param_problem(s->range, who, x, msg, sizeof msg));
		return false;
	}
	switch (s->field) {
	case F_TEMP: t->samp.temp = (float)x; break;
	case F_TOP_P: t->samp.top_p = (float)x; break;
	case F_TOP_K: t->samp.top_k = (int)x; break;
	case F_MIN_P: t->samp.min_p = (float)x; break;
	case F_REPEAT: t->samp.repeat_penalty = (float)x; break;
	case F_MAX_TOKENS: t->max_tokens = x < 0 ? 0 : (int)x; break; /* -1, 0: until the context is full */
	default: break;
	}
	return true;
}

void cmd_set(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	char name[32], value[64];
	char summary[160];
	if (!*arg) {
		set_summary(t, summary, sizeof summary);
		ui_status(u, false, "%s min-p %g repeat-penalty %g seed %" PRIu64 " (/set NAME VALUE changes one)",
			  summary, t->samp.min_p, t->samp.repeat_penalty, t->samp.seed);
		return;
	}
	if (sscanf(arg, "%31s %63s", name, value) != 2) {
		ui_status(u, true, "usage: /set temp|top_p|top_k|min_p|repeat_penalty|max_tokens|seed VALUE");
		return;
	}
	for (size_t i = 0; i < ARRAY_LEN(settings); i++) {
		if (strcmp(settings[i].name, name))
			continue;
		if (apply(u, t, &settings[i], value)) {
			set_summary(t, summary, sizeof summary);
			ui_status(u, false, "%s: %s (this tab, from its next answer)", t->chat.name, summary);
		}
		return;
	}
	ui_status(u, true, "/set: no setting '%.20s' (temp, top_p, top_k, min_p, repeat_penalty, max_tokens, seed)",
		  name);
}

void cmd_system(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	if (!*arg) {
		ui_status(u, false, "system prompt '%s': %.160s (/system TEXT changes it)", t->chat.prompt_name,
			  t->chat.system);
		return;
	}
	if (t->note || t->locked) {
		ui_status(u, true, "this tab is read-only: its system prompt stays");
		return;
	}
	if (tab_busy(t)) {
		ui_status(u, true, "this tab is answering: Esc stops it, then /system");
		return;
	}
	const ui_prompt *pr = ui_find_prompt(u, arg);
	tab_set_system(u, t, pr ? pr->name : "custom", pr ? pr->text : arg);
	ui_status(u, false, "%s: system prompt %s; the conversation was rendered again from its text",
		  t->chat.name, pr ? pr->name : "set");
}

void cmd_prompts(ui *u, const char *arg)
{
	(void)arg;
	char names[240];
	size_t n = 0;
	names[0] = '\0';
	for (int i = 0; i < u->p->n_prompts; i++)
		bfmt(names, sizeof names, &n, "%s%s", i ? ", " : "", u->p->prompts[i].name);
	ui_status(u, false, "system prompts: %s (/new NAME: a tab with one; /system NAME: this tab)", names);
}
