/* ui/ui_model.c: /model FILE and /draft FILE|ngram|off: every tab goes on
 * with another model, or another draft for speculative decoding.
 *
 * The new model loads while the old one still serves (ui_load_model draws
 * its progress); then the engine stops and starts again on it, and each
 * tab gets a new engine conversation: its chat stays, and its history is
 * rendered again for the new vocabulary at its next turn (the tab says so).
 * Anything that fails leaves the old model and engine in place, with one
 * line saying why. Answers must be stopped first, and a chat that shares
 * its engine with the HTTP server (--serve) keeps it. */
#include "ui/ui_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* What a restart may have to put back. */
typedef struct saved_model {
	llama_model *model, *draft;
	tok *tok, *draft_tok;
	enum tmpl_family fam;
	conv_model cm;
	char *model_path, *draft_path;
	int64_t size;
	uint64_t header;
	char name[64];
} saved_model;

static void keep(const ui *u, saved_model *s)
{
	*s = (saved_model){u->model, u->draft, u->tok, u->draft_tok, u->fam, u->cm, u->model_path,
			   u->draft_path, u->model_size, u->model_header, ""};
	memcpy(s->name, u->model_name, sizeof s->name);
}

static void put_back(ui *u, const saved_model *s)
{
	u->model = s->model, u->draft = s->draft, u->tok = s->tok, u->draft_tok = s->draft_tok;
	u->fam = s->fam, u->cm = s->cm, u->model_size = s->size, u->model_header = s->header;
	u->model_path = s->model_path, u->draft_path = s->draft_path;
	memcpy(u->model_name, s->name, sizeof u->model_name);
}

static void free_models(llama_model *m, tok *t, llama_model *d, tok *dt)
{
	tok_free(dt);
	llama_free(d);
	tok_free(t);
	llama_free(m);
}

static bool can_restart(ui *u, const char *cmd)
{
	if (!u->model) { /* no model of ours to swap */
		ui_status(u, true, "%s: the tabs run on a server (--server); its model is chosen there (--model NAME)",
			  cmd);
		return false;
	}
	if (u->p->attach) {
		ui_status(u, true, "%s: the HTTP server (--serve) shares this engine: restart pagechat instead", cmd);
		return false;
	}
	for (int i = 0; i < u->n_tabs; i++)
		if (tab_busy(u->tabs[i])) {
			ui_status(u, true, "%s: '%s' is answering: Esc stops it first", cmd, u->tabs[i]->chat.name);
			return false;
		}
	return true;
}

/* Loads model_path and draft_path (taken) and restarts the engine on them;
 * false with e when the old ones stay. */
static bool restart(ui *u, char *model_path, char *draft_path, err *e)
{
	saved_model old;
	keep(u, &old);
	u->model_path = model_path, u->draft_path = draft_path;
	u->model = NULL, u->tok = NULL, u->draft = NULL, u->draft_tok = NULL;
	if (ui_load_model(u, e)) {
		free_models(u->model, u->tok, u->draft, u->draft_tok);
		free(u->model_path);
		free(u->draft_path);
		put_back(u, &old);
		return false;
	}
	elink *running = u->link;
	for (int i = 0; i < u->n_tabs; i++)
		link_close_conv(running, u->tabs[i]->conv);
	link_free(running);
	u->link = NULL;
	if (ui_start_engine(u, e)) {
		char tried[64];
		snprintf(tried, sizeof tried, "%s", u->model_name);
		free_models(u->model, u->tok, u->draft, u->draft_tok);
		free(u->model_path);
		free(u->draft_path);
		put_back(u, &old);
		err e2 = {0};
		if (ui_start_engine(u, &e2)) { /* the old one again; without it nothing can go on */
			snprintf(u->fatal, sizeof u->fatal, "the engine did not start on %.48s: %.130s; nor again on "
				 "%.48s: %.130s. The chats are saved (pagechat --resume reopens them)", tried, e->msg,
				 u->model_name, e2.msg);
			u->quit = true; /* the chats are saved on the way out */
			return false;
		}
		for (int i = 0; i < u->n_tabs; i++)
			tab_restart(u, u->tabs[i]);
		return false;
	}
	free_models(old.model, old.tok, old.draft, old.draft_tok);
	free(old.model_path);
	free(old.draft_path);
	for (int i = 0; i < u->n_tabs; i++)
		tab_restart(u, u->tabs[i]);
	return true;
}

/* path (arg as typed) is a regular file, or false with a status saying
 * what it is instead. */
static bool model_file(ui *u, const char *cmd, const char *arg, const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		return true;
	if (stat(path, &st) != 0)
		ui_status(u, true, "%s: %s %s", cmd, arg,
			  errno == ENOENT ? "does not exist (give a .gguf file's path)" : strerror(errno));
	else
		ui_status(u, true, "%s: %s is %s, not a model file (a .gguf path)", cmd, arg,
			  S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
	return false;
}

void cmd_model(ui *u, const char *arg)
{
	if (!*arg) {
		ui_status(u, false, "model: %s (/model FILE switches every tab to another)", u->model_path);
		return;
	}
	char path[4096];
	if (!ui_expand_home(u, "/model", arg, path, sizeof path) || !model_file(u, "/model", arg, path) ||
	    !can_restart(u, "/model"))
		return;
	err e = {0};
	char *dp = u->draft_path ? xstrdup(u->draft_path) : NULL;
	if (restart(u, xstrdup(path), dp, &e))
		ui_status(u, false, "every tab goes on with %s (%s); their chats stay", u->model_name,
			  conv_completion_mode(&u->cm) ? "completion" : tmpl_name(u->fam));
	else
		ui_status(u, true, "/model: %s stays: %s", u->model_name, e.msg);
	clearok(curscr, TRUE);
	u->dirty = true;
}

void cmd_draft(ui *u, const char *arg)
{
	if (!*arg) {
		ui_status(u, false, "draft: %s (/draft FILE|ngram|off)", u->draft_path ? u->draft_path : "off");
		return;
	}
	bool off = !strcmp(arg, "off"), ngram = !strcmp(arg, "ngram");
	char path[4096];
	if (!ui_expand_home(u, "/draft", arg, path, sizeof path) ||
	    (!off && !ngram && !model_file(u, "/draft", arg, path)) || !can_restart(u, "/draft"))
		return;
	err e = {0};
	if (restart(u, xstrdup(u->model_path), off ? NULL : xstrdup(ngram ? "ngram" : path), &e))
		ui_status(u, false, "speculative decoding: %s", off ? "off" : arg);
	else
		ui_status(u, true, "/draft: the draft stays %s: %s", u->draft_path ? u->draft_path : "off", e.msg);
	clearok(curscr, TRUE);
	u->dirty = true;
}
