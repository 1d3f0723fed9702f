/* ui/ui_saved.c: the chats on disk beyond the open tabs.
 *
 * Nothing saved may become unreachable or be written over by accident
 * (issue #25):
 * - --resume opens the session's tabs; a chat that cannot be loaded
 *   (missing, truncated, not JSON, not a regular file) opens as a damaged
 *   tab: read-only, showing why, never saved (its file stays as it was) and
 *   kept in the session until the user closes it; /raw shows the file's
 *   text. A file the session names twice opens once.
 * - A plain run starts a new session; the last one's chats stay in the
 *   data directory, and /open lists every saved chat (newest first) and
 *   opens one by its file name.
 * - /save FILE exports the tab as Markdown atomically, and asks before it
 *   replaces a file that exists.
 * The UI thread only. */
#include "ui/ui_int.h"

#include "kernels/files.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define RAW_MAX_BYTES ((size_t)1 << 20)  /* what /raw shows of a file at most */
#define LIST_MAX 200                     /* chats /open lists */
#define LIST_NAME "saved chats"

/* ---- read-only tabs ---- */

static tab *find_file(ui *u, const char *file)
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
static tab *open_note(ui *u, const char *name, const char *file, char *note)
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
		 "/raw shows the file's text; Ctrl-W closes this tab (the file stays).", why, file);
	return s;
}

/* Opens file (a name in the data directory) as a tab: the chat, or a
 * damaged tab saying why it cannot be loaded. */
static tab *open_saved(ui *u, const char *file)
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
	return open_note(u, name, file, damaged_note(file, e.msg));
}

/* ---- --resume and the plain run ---- */

int saved_resume(ui *u)
{
	char **files;
	int n, active, opened = 0;
	err e = {0};
	if (store_session_load(u->data_dir, &files, &n, &active, &e)) {
		ui_status(u, true, "%s", e.msg);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (find_file(u, files[i]))
			ui_status(u, true, "the session names %s twice: it is open once", files[i]);
		else {
			open_saved(u, files[i]);
			opened++;
		}
		free(files[i]);
	}
	free(files);
	return opened ? MIN(MAX(active, 0), u->n_tabs - 1) : -1;
}

void saved_note_previous(ui *u)
{
	char **files;
	int n, active;
	if (store_session_load(u->data_dir, &files, &n, &active, NULL))
		return;
	for (int i = 0; i < n; i++)
		free(files[i]);
	free(files);
	if (n > 0)
		ui_status(u, false, "the last session's %d chat%s stay saved: /open lists them, "
			  "pagechat --resume reopens a session", n, n == 1 ? "" : "s");
}

/* ---- /open ---- */

typedef struct saved_item {
	char *file;              /* owned */
	time_t mtime;
} saved_item;

static int newest_first(const void *a, const void *b)
{
	const saved_item *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime > y->mtime ? -1 : 1;
	return strcmp(x->file, y->file);
}

/* The chat files of the data directory (every *.json but the session),
 * newest first, into a new array of *n (the caller frees it and each file). */
static saved_item *list_files(const ui *u, int *n)
{
	saved_item *v = NULL;
	int cap = 0;
	*n = 0;
	DIR *d = opendir(u->data_dir);
	for (struct dirent *de; d && (de = readdir(d));) {
		size_t len = strlen(de->d_name);
		if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") ||
		    !strcmp(de->d_name, "session.json"))
			continue;
		char path[8300];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", u->data_dir, de->d_name);
		if (lstat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		xgrow(&v, &cap, (int64_t)*n + 1, sizeof *v);
		v[(*n)++] = (saved_item){xstrdup(de->d_name), st.st_mtime};
	}
	if (d)
		closedir(d);
	if (*n)
		qsort(v, (size_t)*n, sizeof *v, newest_first);
	return v;
}

/* One line of the list: file, date, name and length, or why it is damaged. */
static void list_line(ui *u, const saved_item *it, char *buf, size_t cap)
{
	char path[8300], when[32];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, it->file);
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime_r(&it->mtime, &tm));
	conv c;
	err e = {0};
	const char *open = find_file(u, it->file) ? "  (open)" : "";
	if (store_load(&c, path, &e)) {
		snprintf(buf, cap, "%s  %s  damaged%s", it->file, when, open);
		return;
	}
	snprintf(buf, cap, "%s  %s  '%.40s', %d messages%s", it->file, when, c.name, c.n_msgs, open);
	conv_deinit(&c);
}

static char *list_note(ui *u)
{
	int n;
	saved_item *v = list_files(u, &n);
	size_t cap = 256 + (size_t)MIN(n, LIST_MAX) * 200, len = 0;
	char *s = xmalloc(cap);
	len += (size_t)snprintf(s, cap, "Saved chats in %.150s, newest first: /open FILE opens one", u->data_dir);
	if (n == 0)
		len += (size_t)snprintf(s + len, cap - len, "\n(none yet)");
	for (int i = 0; i < n; i++) {
		if (i < LIST_MAX) {
			char line[200];
			list_line(u, &v[i], line, sizeof line);
			len += (size_t)snprintf(s + len, cap - len, "\n%s", line);
		}
		free(v[i].file);
	}
	if (n > LIST_MAX)
		snprintf(s + len, cap - len, "\n... and %d older", n - LIST_MAX);
	free(v);
	return s;
}

static void show(ui *u, tab *t)
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

void saved_cmd_open(ui *u, const char *arg)
{
	tab *t;
	if (!*arg) {
		/* the list: one tab, refreshed each time (the new one first, so
		 * that closing the old never closes the last tab) */
		t = open_note(u, LIST_NAME, "", list_note(u));
		for (int i = 0; i < u->n_tabs; i++)
			if (u->tabs[i] != t && u->tabs[i]->note && !u->tabs[i]->file[0])
				tab_close(u, i--);
	} else if (strchr(arg, '/') || !strcmp(arg, "session.json") || arg[0] == '.') {
		ui_status(u, true, "/open takes a file name from the list (/open alone shows it)");
		return;
	} else if (!(t = find_file(u, arg))) {
		t = open_saved(u, arg);
	}
	show(u, t);
	tab_save_session(u);
}

/* ---- /raw ---- */

/* The bytes as text the view can show: control bytes (but newline and tab)
 * as '?'. */
static void printable(char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 && s[i] != '\n' && s[i] != '\t')
			s[i] = '?';
}

void saved_cmd_raw(ui *u, const char *arg)
{
	(void)arg;
	tab *t = ui_tab(u);
	if (!t->note || !t->file[0]) {
		ui_status(u, true, "/raw shows the file of a damaged chat; this tab's chat loaded fine");
		return;
	}
	char path[8300];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, t->file);
	size_t len;
	err e = {0};
	char *raw = file_read_all(path, RAW_MAX_BYTES, "damaged chat to show", &len, &e);
	if (!raw) {
		ui_status(u, true, "%s", e.msg);
		return;
	}
	printable(raw, len);
	size_t cap = strlen(t->note) + len + 128;
	char *note = xmalloc(cap);
	int head = (int)strcspn(t->note, "\n");
	snprintf(note, cap, "%.*s\n%s, %zu bytes, as it is (read-only):\n%s", head, t->note, t->file, len, raw);
	free(raw);
	free(t->note);
	t->note = note;
	t->chat.version++;
	u->dirty = true;
}

/* ---- /save ---- */

static void export_md(ui *u, const char *file)
{
	err e = {0};
	if (store_export_md(&ui_tab(u)->chat, file, &e))
		ui_status(u, true, "%s", e.msg);
	else
		ui_status(u, false, "saved this tab to %s", file);
}

void saved_cmd_save(ui *u, const char *arg)
{
	if (!*arg) {
		ui_status(u, true, "usage: /save FILE (Markdown)");
		return;
	}
	struct stat st;
	if (lstat(arg, &st) != 0) {
		export_md(u, arg);
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		ui_status(u, true, "%s is %s, not a regular file: choose another name", arg, file_kind(arg));
		return;
	}
	free(u->pending_save);
	u->pending_save = xstrdup(arg);
	u->mode = MODE_CONFIRM_SAVE;
	u->dirty = true;
}

void saved_confirm_save(ui *u, bool yes)
{
	u->mode = MODE_NORMAL;
	u->dirty = true;
	if (yes && u->pending_save)
		export_md(u, u->pending_save);
	else
		ui_status(u, false, "not saved: %s stays as it was", u->pending_save ? u->pending_save : "the file");
	free(u->pending_save);
	u->pending_save = NULL;
}
