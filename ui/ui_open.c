/* ui/ui_open.c: chats from the data directory opened as tabs: a chat that
 * loads opens as itself (read-only when made on another model: resume_lock);
 * one that does not opens as a damaged tab, read-only, saying why and never
 * saved over; a note (the saved-chat list) opens read-only with no file.
 * UI thread only. */
#include "ui/ui_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tab *saved_find_file(ui *u, const char *file)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (!strcmp(u->tabs[i]->file, file))
			return u->tabs[i];
	return NULL;
}

static int index_of(const ui *u, const tab *t)
{
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i] == t)
			return i;
	return -1;
}

/* A read-only tab named name showing note (taken over), for file (""
 * for none). */
tab *saved_open_note(ui *u, const char *name, const char *file, char *note)
{
	conv c;
	conv_init(&c, name, "", "");
	tab *t = tab_open(u, &c, file[0] ? file : NULL, &u->p->samp, u->p->max_tokens, NULL);
	if (!file[0])
		t->file[0] = '\0';
	t->note = note;
	return t;
}

static char *damaged_note(const char *file, const char *why)
{
	size_t cap = strlen(file) + strlen(why) + 400;
	char *s = xmalloc(cap);
	snprintf(s, cap, "This chat could not be loaded: %s\n"
		 "It is shown read-only, never saved over: %s stays on disk as it is, and in the session.\n"
		 "/raw shows the file's text; Alt-w closes this tab (the file stays).", why, file);
	return s;
}

/* Opens file (a name in the data directory) as a tab: the chat, or a
 * damaged tab saying why it cannot be loaded. */
tab *saved_open_file(ui *u, const char *file)
{
	char path[8300];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, file);
	conv c;
	err e = {0};
	if (store_load(&c, path, &e) == 0)
		return tab_open(u, &c, file, &u->p->samp, u->p->max_tokens, resume_lock(u, &c));
	ui_status(u, true, "cannot load a chat: %s", e.msg);
	char name[32];
	snprintf(name, sizeof name, "damaged %.16s", file);
	return saved_open_note(u, name, file, damaged_note(file, e.msg));
}

void saved_show(ui *u, tab *t)
{
	int i = index_of(u, t);
	if (i < 0 || i == u->active)
		return;
	tab *from = ui_tab(u);
	u->active = i;
	input_switch(u, from, t);
	t->unread = false;
	u->dirty = true;
}
