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
 *   data directory, and /open lists every saved chat (ui_chats.c) and
 *   opens one by its number in the list or its file name.
 * - /save FILE exports the tab as Markdown atomically, and asks before it
 *   replaces a file that exists.
 * The UI thread only. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define RAW_MAX_BYTES ((size_t)1 << 20)  /* what /raw shows of a file at most */

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
		if (saved_find_file(u, files[i]))
			ui_status(u, true, "the session names %s twice: it is open once", files[i]);
		else {
			saved_open_file(u, files[i]);
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

void saved_cmd_open(ui *u, const char *arg)
{
	tab *t;
	if (!*arg) {
		chats_list(u, NULL);
		return;
	}
	if (arg[strspn(arg, "0123456789")] == '\0') { /* N: the Nth of the last list */
		arg = chats_listed(u, arg);
		if (!arg)
			return;
	}
	if (strchr(arg, '/') || !strcmp(arg, "session.json") || arg[0] == '.') {
		ui_status(u, true, "/open takes a file name from the list (/open alone shows it)");
		return;
	} else if (!(t = saved_find_file(u, arg))) {
		t = saved_open_file(u, arg);
	}
	saved_show(u, t);
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

void saved_cmd_save(ui *u, const char *name)
{
	if (!*name) {
		ui_status(u, true, "usage: /save FILE (Markdown)");
		return;
	}
	char arg[4096];
	if (!ui_expand_home(u, "/save", name, arg, sizeof arg))
		return;
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
	u->pending_snapshot = false;
	u->mode = MODE_CONFIRM_SAVE;
	u->dirty = true;
}

void saved_confirm_save(ui *u, bool yes)
{
	u->mode = MODE_NORMAL;
	u->dirty = true;
	if (yes && u->pending_save && u->pending_snapshot)
		snapshot_write(u, u->pending_save);
	else if (yes && u->pending_save)
		export_md(u, u->pending_save);
	else
		ui_status(u, false, "not saved: %s stays as it was", u->pending_save ? u->pending_save : "the file");
	free(u->pending_save);
	u->pending_save = NULL;
}
