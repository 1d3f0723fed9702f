/* ui/ui_cmd.c: the slash commands typed in the input line: a table from the
 * name to its handler, which gets the rest of the line (leading blanks
 * skipped). Errors go to the status line; the chat is never touched by a
 * command that fails. */
#include "ui/ui_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cmd_name(ui *u, const char *arg)
{
	if (!*arg || strlen(arg) > 24) {
		ui_status(u, true, "usage: /name NAME (at most 24 bytes)");
		return;
	}
	conv_set_name(&ui_tab(u)->chat, arg);
	input_switch(u, NULL, ui_tab(u)); /* the prompt shows the name */
	tab_save(u, ui_tab(u));
}

/* The system prompts' names, "a, b, c", into buf. */
static void prompt_names(const ui *u, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (int i = 0; i < u->p->n_prompts; i++)
		bfmt(buf, cap, &n, "%s%s", i ? ", " : "", u->p->prompts[i].name);
}

static void cmd_new(ui *u, const char *arg)
{
	const ui_prompt *pr = ui_find_prompt(u, *arg ? arg : u->default_prompt);
	if (!pr && *arg) {
		char names[200];
		prompt_names(u, names, sizeof names);
		ui_status(u, true, "no system prompt named '%.40s' (there are: %s)", arg, names);
		return;
	}
	tab_new(u, pr ? pr : &u->p->prompts[0]);
}

static void cmd_quit(ui *u, const char *arg)
{
	(void)arg;
	u->quit = true;
}

static void cmd_help(ui *u, const char *arg)
{
	(void)arg;
	help_open(u);
}

static const struct command {
	const char *name;
	void (*fn)(ui *u, const char *arg);
} commands[] = {
	{"save", saved_cmd_save}, {"name", cmd_name}, {"new", cmd_new},   {"quit", cmd_quit},
	{"help", cmd_help},       {"open", saved_cmd_open}, {"raw", saved_cmd_raw}, {"copy", cmd_copy},
	{"set", cmd_set},         {"system", cmd_system}, {"prompts", cmd_prompts},
	{"model", cmd_model},     {"draft", cmd_draft},
	{"find", cmd_find},       {"rename", cmd_rename}, {"delete", cmd_delete}, {"reopen", cmd_reopen},
	{"n", beams_cmd_n},       {"beams", beams_cmd_beams}, {"pick", beams_cmd_pick}, {"snapshot", snapshot_cmd},
};

void cmd_run(ui *u, const char *line)
{
	char name[16];
	size_t n = strcspn(line + 1, " ");
	snprintf(name, sizeof name, "%.*s", (int)MIN(n, sizeof name - 1), line + 1);
	const char *arg = line + 1 + n;
	while (*arg == ' ')
		arg++;
	for (size_t i = 0; i < ARRAY_LEN(commands); i++)
		if (!strcmp(commands[i].name, name)) {
			commands[i].fn(u, arg);
			return;
		}
	ui_status(u, true, "unknown command /%s (/help lists them; //text sends a line starting with /)", name);
}
