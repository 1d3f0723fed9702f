/* ui/ui_chats.c: the saved-chat list (F6, /open, /find TEXT) and what can
 * be done from it: /open N reopens chat N, /rename N TITLE, /delete N
 * (asked first), /reopen (Alt-z) the tab closed last.
 *
 * The list is a read-only tab (no file), numbered newest first: each chat's
 * title (its name, which /rename sets, then its first user message), its
 * size, the model it was made on and its date; chats without a message are not
 * listed; /find keeps the chats whose name or messages hold the text
 * (case-insensitively). The numbers refer to the list shown last. A chat
 * open in a tab is renamed there; one open cannot be deleted. Deleting a
 * chat removes its journals and, from the disk KV store, the blocks that
 * hold its token ids (kv_store_forget). */
#include "ui/ui_int.h"

#include "base/files.h"
#include "kv/store.h"

#include <ctype.h>
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LIST_MAX 200             /* chats the list shows */
#define LIST_NAME "saved chats"

typedef struct entry {
	char *file;              /* owned */
	time_t mtime;
	int64_t bytes;
} entry;

static int newest_first(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime > y->mtime ? -1 : 1;
	return strcmp(x->file, y->file);
}

/* The chat files of the data directory (every *.json but the session),
 * newest first, into a new array of *n (the caller frees it and each file). */
static entry *list_files(const ui *u, int *n)
{
	entry *v = NULL;
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
		v[(*n)++] = (entry){xstrdup(de->d_name), st.st_mtime, st.st_size};
	}
	if (d)
		closedir(d);
	if (*n)
		qsort(v, (size_t)*n, sizeof *v, newest_first);
	return v;
}

/* needle in hay[n], ignoring ASCII case. */
static bool contains(const char *hay, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = 0; k && i + k <= n; i++) {
		size_t j = 0;
		while (j < k && tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j]))
			j++;
		if (j == k)
			return true;
	}
	return !k;
}

static bool matches(const conv *c, const char *text)
{
	if (!text || contains(c->name, strlen(c->name), text))
		return true;
	for (int i = 0; i < c->n_msgs; i++)
		if (contains(c->msgs[i].text, c->msgs[i].len, text))
			return true;
	return false;
}

/* A chat's title: its name (what /rename sets), then its first user
 * message's first line. */
static void title_of(const conv *c, char *buf, size_t cap)
{
	for (int i = 0; i < c->n_msgs; i++)
		if (c->msgs[i].role == CONV_USER && c->msgs[i].len) {
			int n = (int)strcspn(c->msgs[i].text, "\n");
			snprintf(buf, cap, "'%.24s'  %.*s%s", c->name, MIN(n, 48), c->msgs[i].text, n > 48 ? "..." : "");
			return;
		}
	snprintf(buf, cap, "'%.24s'", c->name);
}

/* The title of the chat in file (of the data directory), into buf; the
 * file's name when it cannot be read. */
static void file_title(const ui *u, const char *file, char *buf, size_t cap)
{
	char path[8300];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, file);
	conv c;
	err e = {0};
	if (store_load(&c, path, &e)) {
		snprintf(buf, cap, "%s", file);
		return;
	}
	title_of(&c, buf, cap);
	conv_deinit(&c);
}

/* One line of the list; false when the chat does not match filter. */
static bool list_line(ui *u, const entry *it, int no, const char *filter, char *buf, size_t cap)
{
	char path[8300], when[32], title[100];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, it->file);
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime_r(&it->mtime, &tm));
	conv c;
	err e = {0};
	const char *open = saved_find_file(u, it->file) ? "  (open)" : "";
	if (store_load(&c, path, &e)) {
		if (filter)
			return false;
		snprintf(buf, cap, "%3d. (damaged)  %s  %s%s", no, it->file, when, open);
		return true;
	}
	bool ok = c.n_msgs > 0 && matches(&c, filter); /* an empty tab is no chat to reopen */
	if (ok) {
		title_of(&c, title, sizeof title);
		const char *model = c.origin.path ? strrchr(c.origin.path, '/') : NULL;
		model = model ? model + 1 : c.origin.path ? c.origin.path : "?";
		snprintf(buf, cap, "%3d. %s\n     %d messages, %.1f KB  %.40s  %s  %s%s", no, title, c.n_msgs,
			 (double)it->bytes / 1024, model, when, it->file, open);
	}
	conv_deinit(&c);
	return ok;
}

static void forget_list(ui *u)
{
	for (int i = 0; i < u->n_listed; i++)
		free(u->listed[i]);
	free(u->listed);
	u->listed = NULL;
	u->n_listed = 0;
}

/* The list's text; its files (in its order) become u->listed. */
static char *list_note(ui *u, const char *filter)
{
	int n;
	entry *v = list_files(u, &n);
	size_t cap = 512 + (size_t)MIN(n, LIST_MAX) * 300, len = 0;
	char *s = xmalloc(cap);
	forget_list(u);
	u->listed = xmalloc((size_t)MAX(1, MIN(n, LIST_MAX)) * sizeof *u->listed);
	bfmt(s, cap, &len, "Saved chats in %.150s%s%.60s%s, newest first: /open N opens one, "
				"/rename N TITLE, /delete N, /find TEXT", u->data_dir, filter ? " with '" : "",
				filter ? filter : "", filter ? "'" : "");
	for (int i = 0; i < n; i++) {
		char line[300];
		if (u->n_listed < LIST_MAX && list_line(u, &v[i], u->n_listed + 1, filter, line, sizeof line)) {
			bfmt(s, cap, &len, "\n%s", line);
			u->listed[u->n_listed++] = xstrdup(v[i].file);
		}
		free(v[i].file);
	}
	if (u->n_listed == 0)
		bfmt(s, cap, &len, "\n(%s)", filter ? "none matches" : "none yet");
	if (n > LIST_MAX)
		bfmt(s, cap, &len, "\n(only the newest %d are listed)", LIST_MAX);
	free(v);
	return s;
}

void chats_list(ui *u, const char *filter)
{
	/* one list tab, made anew (the new one first, so that closing the
	 * old never closes the last tab) */
	tab *t = saved_open_note(u, LIST_NAME, "", list_note(u, filter));
	bool replaced = false;
	for (int i = 0; i < u->n_tabs; i++)
		if (u->tabs[i] != t && u->tabs[i]->note && !u->tabs[i]->file[0])
			tab_close(u, i--), replaced = true;
	if (replaced)
		u->status[0] = '\0'; /* not news: the list is shown anew */
	saved_show(u, t);
	tab_save_session(u);
}

const char *chats_listed(ui *u, const char *num)
{
	long n = strtol(num, NULL, 10);
	if (n < 1 || n > u->n_listed) {
		ui_status(u, true, "no chat %.12s in the list (/open shows it)", num);
		return NULL;
	}
	return u->listed[n - 1];
}

void cmd_find(ui *u, const char *arg)
{
	if (!*arg) {
		ui_status(u, true, "usage: /find TEXT (the saved chats that hold it)");
		return;
	}
	chats_list(u, arg);
}

void cmd_rename(ui *u, const char *arg)
{
	char num[16];
	int at = 0;
	if (sscanf(arg, "%15[0-9] %n", num, &at) != 1 || !arg[at] || strlen(arg + at) > 24) {
		ui_status(u, true, "usage: /rename N TITLE (N from /open; at most 24 bytes)");
		return;
	}
	const char *file = chats_listed(u, num), *title = arg + at;
	if (!file)
		return;
	tab *t = saved_find_file(u, file);
	char path[8300];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, file);
	conv c;
	err e = {0};
	if (t) {
		conv_set_name(&t->chat, title);
		tab_save(u, t);
	} else if (store_load(&c, path, &e) == 0) {
		conv_set_name(&c, title);
		if (store_save(&c, path, &e))
			ui_status(u, true, "%s", e.msg);
		conv_deinit(&c);
	} else {
		ui_status(u, true, "cannot rename: %s", e.msg);
		return;
	}
	ui_status(u, false, "chat %s is now '%s'", num, title);
	u->dirty = true;
}

void cmd_delete(ui *u, const char *arg)
{
	const char *file = *arg ? chats_listed(u, arg) : NULL;
	if (!*arg)
		ui_status(u, true, "usage: /delete N (N from /open)");
	if (!file)
		return;
	if (saved_find_file(u, file)) {
		ui_status(u, true, "%s is open in a tab: close it first (Alt-w)", file);
		return;
	}
	free(u->pending_delete);
	u->pending_delete = xstrdup(file);
	file_title(u, file, u->pending_title, sizeof u->pending_title);
	u->mode = MODE_CONFIRM_DELETE;
	u->dirty = true;
}

/* Removes the KV store's blocks that hold the token ids of the chat at
 * path (its system prompt's and every message's, in order): how many went,
 * or -1 with e (the chat or the store unreadable). */
static int64_t forget_blocks(const ui *u, const char *path, err *e)
{
	if (!u->p->kv_store)
		return 0;
	conv c;
	if (store_load(&c, path, e))
		return -1;
	int64_t n = c.n_sys_ids;
	for (int i = 0; i < c.n_msgs; i++)
		n += c.msgs[i].n_ids;
	int32_t *ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
	int64_t k = c.n_sys_ids;
	memcpy(ids, c.sys_ids, (size_t)c.n_sys_ids * sizeof *ids);
	for (int i = 0; i < c.n_msgs; i++) {
		memcpy(ids + k, c.msgs[i].ids, (size_t)c.msgs[i].n_ids * sizeof *ids);
		k += c.msgs[i].n_ids;
	}
	int64_t removed = kv_store_forget(u->p->kv_store, ids, n, e);
	free(ids);
	conv_deinit(&c);
	return removed;
}

void chats_confirm_delete(ui *u, bool yes)
{
	u->mode = MODE_NORMAL;
	u->dirty = true;
	char path[8300], what[600];
	snprintf(path, sizeof path, "%s/%s", u->data_dir, u->pending_delete);
	bool error = false;
	err e = {0};
	int64_t blocks = yes ? forget_blocks(u, path, &e) : 0; /* read before the file goes */
	if (!yes) {
		snprintf(what, sizeof what, "not deleted: %.100s stays", u->pending_title);
	} else if (unlink(path)) {
		snprintf(what, sizeof what, "cannot delete %.100s (%.100s): %s", u->pending_title, u->pending_delete,
			 strerror(errno));
		error = true;
	} else {
		store_journal_remove(path); /* journals a crash left, if any */
		if (blocks >= 0)
			snprintf(what, sizeof what, "deleted %.100s (%.100s) and %lld KV blocks holding its tokens",
				 u->pending_title, u->pending_delete, (long long)blocks);
		else
			snprintf(what, sizeof what, "deleted %.100s (%.100s); its KV blocks stay: %.300s",
				 u->pending_title, u->pending_delete, e.msg);
		error = blocks < 0;
		if (ui_tab(u)->note && !ui_tab(u)->file[0])
			chats_list(u, NULL); /* the list without it */
	}
	ui_status(u, error, "%s", what);
	free(u->pending_delete);
	u->pending_delete = NULL;
}

void chats_reopen(ui *u)
{
	if (!u->last_closed[0]) {
		ui_status(u, true, "no tab closed yet in this session");
		return;
	}
	tab *t = saved_find_file(u, u->last_closed);
	if (!t) {
		t = saved_open_file(u, u->last_closed); /* the last tab: moved to where it stood */
		int at = MIN(u->last_closed_at, u->n_tabs - 1);
		memmove(&u->tabs[at + 1], &u->tabs[at], (size_t)(u->n_tabs - 1 - at) * sizeof *u->tabs);
		u->tabs[at] = t;
		if (u->active >= at && u->active < u->n_tabs - 1)
			u->active++;
	}
	u->last_closed[0] = '\0';
	saved_show(u, t);
	tab_save_session(u);
}

void cmd_reopen(ui *u, const char *arg)
{
	(void)arg;
	chats_reopen(u);
}
