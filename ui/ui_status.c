/* ui/ui_status.c: the lookups every file of ui/ uses, and nothing else:
 * the status line's timed message, the active tab, a system prompt by name,
 * a file name's ~.
 * A leaf: it calls no other file of ui/. UI thread only. */
#include "ui/ui_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATUS_S 5.0

void ui_status(ui *u, bool error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->status, sizeof u->status, fmt, ap);
	va_end(ap);
	u->status_until = now_s() + STATUS_S;
	u->status_error = error;
	u->status_conv = u->n_tabs ? u->tabs[u->active]->conv : -1;
	u->dirty = true;
}

tab *ui_tab(ui *u)
{
	return u->n_tabs ? u->tabs[u->active] : NULL;
}

const ui_prompt *ui_find_prompt(const ui *u, const char *name)
{
	for (int i = 0; name && i < u->p->n_prompts; i++)
		if (!strcmp(u->p->prompts[i].name, name))
			return &u->p->prompts[i];
	return NULL;
}

bool ui_expand_home(ui *u, const char *cmd, const char *arg, char *buf, size_t cap)
{
	const char *home = getenv("HOME");
	bool tilde = arg[0] == '~' && (!arg[1] || arg[1] == '/');
	if (tilde && (!home || !*home)) {
		ui_status(u, true, "%s: ~ needs HOME set; give the whole path", cmd);
		return false;
	}
	char cwd[4096];
	const char *dir = tilde ? home : arg[0] == '/' ? "" : getcwd(cwd, sizeof cwd);
	if (!dir) {
		ui_status(u, true, "%s: the working directory is unknown (%s); give the whole path", cmd,
			  strerror(errno));
		return false;
	}
	if (snprintf(buf, cap, "%s%s%s", dir, *dir && !tilde ? "/" : "", tilde ? arg + 1 : arg) < (int)cap)
		return true;
	ui_status(u, true, "%s: the file name is too long", cmd);
	return false;
}
