/* ui/ui_status.c: the lookups every file of ui/ uses, and nothing else:
 * the status line's timed message, the active tab, a system prompt by name.
 * A leaf: it calls no other file of ui/. UI thread only. */
#include "ui/ui_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
