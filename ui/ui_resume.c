/* ui/ui_resume.c: --resume knows each chat's model.
 *
 * Every saved chat records the model file it was made on (path, size, a
 * fingerprint of its header) and its template family (conv/conv.h,
 * conv_origin). Before the model loads, --resume without -m reads the
 * session's chats: when they agree on one model that is still there, it is
 * the one loaded; when they were made on several, the user picks one (a
 * short menu); when theirs is missing or has changed, the configured model
 * loads and one message says why. After loading, a chat made on another
 * model opens read-only (its text stays readable; -m with its model
 * continues it), except where -m chose a model with the same kind of
 * prompt (a chat template, or completion mode on both): then it goes on,
 * its history re-rendered if the vocabulary differs. A chat never silently
 * turns into completion text under another model. UI thread only. */
#include "ui/ui_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MODELS 9

typedef struct origin_count {
	const conv_origin *o;    /* borrowed from the loaded chats */
	int n_chats;
	bool present;            /* the file is there, unchanged */
} origin_count;

static bool same_origin(const conv_origin *a, const conv_origin *b)
{
	return a->size == b->size && a->header == b->header;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Whether the file at o->path is the one the chat was made on. */
static bool present(const conv_origin *o)
{
	int64_t size;
	uint64_t header;
	err e = {0};
	return gguf_file_id(o->path, &size, &header, &e) == 0 && size == o->size && header == o->header;
}

/* The distinct models of chats[n] into out (at most MAX_MODELS). */
static int count_origins(const conv *chats, int n, origin_count *out)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		const conv_origin *o = &chats[i].origin;
		if (!o->path)
			continue;
		int j = 0;
		while (j < k && !same_origin(out[j].o, o))
			j++;
		if (j == k && k < MAX_MODELS)
			out[k++] = (origin_count){.o = o, .present = present(o)};
		if (j < k)
			out[j].n_chats++;
	}
	return k;
}

/* Asks which of the models to open; returns its index. */
static int ask(ui *u, const origin_count *m, int n)
{
	for (;;) {
		getmaxyx(stdscr, u->rows, u->cols);
		werase(stdscr);
		int y = MAX(0, u->rows / 2 - n / 2 - 2);
		mvprintw(y++, 2, "The chats to resume were made on %d models:", n);
		for (int i = 0; i < n; i++)
			mvprintw(++y, 4, "%d  %s  (%d chat%s)%s", i + 1, base_name(m[i].o->path), m[i].n_chats,
				 m[i].n_chats == 1 ? "" : "s", m[i].present ? "" : "  missing");
		mvprintw(y + 2, 2, "Open which? (1-%d; the other chats open read-only)", n);
		wnoutrefresh(stdscr);
		doupdate();
		if (u->dump_path)
			term_dump(u);
		wint_t ch;
		int r = wget_wch(stdscr, &ch);
		if (r == OK && ch >= '1' && ch < '1' + (wint_t)n && m[ch - '1'].present)
			return (int)(ch - '1');
		if (r == OK && (ch == '\r' || ch == '\n') && m[0].present)
			return 0;
		if (r == ERR && term_quit_requested())
			return -1;
	}
}

/* The session's chats, loaded (n of them; free with conv_deinit each). */
static conv *load_session_chats(const ui *u, int *n)
{
	char **files;
	int n_files, active;
	err e = {0};
	*n = 0;
	if (store_session_load(u->data_dir, &files, &n_files, &active, &e))
		return NULL;
	conv *chats = xcalloc((size_t)MAX(n_files, 1), sizeof *chats);
	for (int i = 0; i < n_files; i++) {
		char path[8300];
		snprintf(path, sizeof path, "%s/%s", u->data_dir, files[i]);
		if (store_load(&chats[*n], path, &e) == 0)
			(*n)++;
		free(files[i]);
	}
	free(files);
	return chats;
}

void resume_pick_model(ui *u)
{
	int n;
	conv *chats = load_session_chats(u, &n);
	origin_count m[MAX_MODELS];
	int k = chats ? count_origins(chats, n, m) : 0, n_present = 0, pick = -1;
	for (int i = 0; i < k; i++)
		n_present += m[i].present;
	if (k == 1 && m[0].present)
		pick = 0;
	else if (n_present == 1)
		for (int i = 0; i < k; i++)
			pick = m[i].present ? i : pick;
	else if (n_present > 1)
		pick = ask(u, m, k);
	if (pick >= 0) {
		free(u->model_path);
		u->model_path = xstrdup(m[pick].o->path);
	}
	if (k > n_present) /* one message, naming the first model that is gone */
		for (int i = 0; i < k; i++)
			if (!m[i].present) {
				ui_status(u, true, "chats made on %s cannot continue: the file is missing or has "
					  "changed; they open read-only", m[i].o->path);
				break;
			}
	for (int i = 0; i < n; i++)
		conv_deinit(&chats[i]);
	free(chats);
}

char *resume_lock(ui *u, conv *c)
{
	if (!(link_caps(u->link) & LINK_TOKENS))
		return NULL; /* an engine that reads text (a server) continues any chat */
	const conv_origin *o = &c->origin;
	conv_origin now = {.size = u->model_size, .header = u->model_header};
	if (!o->path || same_origin(o, &now))
		return NULL;
	bool chat_then = o->fam != TMPL_NONE && o->fam != TMPL_UNKNOWN;
	bool chat_now = !conv_completion_mode(&u->cm);
	char buf[512];
	if (u->p->model_given && chat_then == chat_now) {
		/* -m chose this model for the session: the chat goes on with it */
		conv_set_origin(c, u->model_path, u->model_size, u->model_header, u->fam);
		return NULL;
	}
	if (chat_then != chat_now)
		snprintf(buf, sizeof buf, "read-only: made on %s with %s; %s is in %s mode (pagechat --resume -m "
			 "%s continues it)", base_name(o->path), chat_then ? "a chat template" : "no template",
			 u->model_name, chat_now ? "chat" : "completion", o->path);
	else
		snprintf(buf, sizeof buf, "read-only: made on %s%s (pagechat --resume -m %s continues it)",
			 base_name(o->path), present(o) ? "" : ", which is missing or has changed", o->path);
	return xstrdup(buf);
}
