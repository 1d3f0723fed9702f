/* ui/ui_load.c: loading the model on a helper thread while the screen shows
 * the progress (the file is read once ahead, so the figure is real), then
 * starting the engine thread on it; or, with --server, the link to a
 * server instead. Every thread starts with every signal blocked (the
 * engines' do so themselves): signals belong to the UI thread. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* With a draft, one decode step in this many runs without it: the panel's
 * speed-up compares the two (core_params.draft_probe); it costs a
 * sixteenth of what the draft gains. */
#define DRAFT_PROBE 16

typedef struct loader {
	const ui_params *p;
	const char *path;        /* borrowed: the model file (u->model_path) */
	const char *draft_path;  /* borrowed: u->draft_path */
	pthread_t thread;
	int wake[2];             /* written once when done */
	_Atomic int64_t done, total; /* bytes of the file read ahead */
	_Atomic bool finished;
	llama_model *model;      /* results, read after the join */
	tok *tok;
	llama_model *draft;
	tok *draft_tok;
	enum tmpl_family fam;
	err e;
} loader;

/* Reads a big file once so its pages are cached: the progress the user sees
 * is real, and the model's first steps do not stall on page faults. */
static void read_ahead(loader *L)
{
	int64_t size;
	int fd = file_open_read(L->path, &size, NULL); /* regular files only: never blocks */
	if (fd < 0)
		return;
	atomic_store(&L->total, size);
	if (size >= (32 << 20)) {
		size_t cap = 8 << 20;
		char *buf = xmalloc(cap);
		ssize_t got;
		while ((got = read(fd, buf, cap)) > 0)
			atomic_fetch_add(&L->done, got);
		free(buf);
	}
	atomic_store(&L->done, size);
	close(fd);
}

static void *loader_main(void *arg)
{
	loader *L = arg;
	read_ahead(L);
	if (L->p->threads > 0)
		kern_cpu()->set_threads(L->p->threads);
	llama_params lp = {.max_tokens = MAX(64, L->p->chunk_tokens), .kern = L->p->kern};
	llama_params target = lp;
	target.host_layers = L->p->host_layers;
	target.head_on_host = L->p->head_on_host;
	L->model = llama_open(L->path, &target, &L->e);
	if (L->model)
		L->tok = tok_new(llama_file(L->model), &L->e);
	if (L->tok && tmpl_from_gguf(llama_file(L->model), &L->fam, &L->e) < 0) {
		tok_free(L->tok);
		L->tok = NULL;
	}
	const char *dp = L->draft_path;
	if (L->tok && dp && strcmp(dp, "ngram")) {
		L->draft = llama_open(dp, &lp, &L->e);
		L->draft_tok = L->draft ? tok_new(llama_file(L->draft), &L->e) : NULL;
		if (!L->draft_tok) {
			err_prefix(&L->e, "draft model");
			tok_free(L->tok);
			L->tok = NULL;
		}
	}
	atomic_store(&L->finished, true);
	ssize_t w = write(L->wake[1], "x", 1);
	(void)w;
	return NULL;
}

/* Starts thread fn with every signal blocked (signals belong to the UI thread). */
static int start_thread(pthread_t *th, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(th, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

static void draw_loading(ui *u, const loader *L, double t0)
{
	werase(stdscr);
	int64_t total = atomic_load(&L->total), done = atomic_load(&L->done);
	const char *name = strrchr(u->model_path, '/');
	name = name ? name + 1 : u->model_path;
	int y = u->rows / 2 - 1, w = MIN(60, u->cols - 4);
	mvprintw(y, 2, "loading %s (%.1f MiB)", name, (double)total / (1 << 20));
	if (w > 10) {
		double f = total > 0 ? (double)done / (double)total : 0;
		int fill = (int)(f * (w - 2));
		mvaddch(y + 1, 2, '[');
		for (int i = 0; i < w - 2; i++)
			addch(i < fill ? '#' : ' ');
		addch(']');
		printw(" %3.0f%%  %.1fs", 100 * f, now_s() - t0);
	}
	wnoutrefresh(stdscr);
	doupdate();
	if (u->dump_path)
		term_dump(u);
}

/* Loads the model while drawing the progress; -1 with e filled. */
int ui_load_model(ui *u, err *e)
{
	loader L = {.p = u->p, .path = u->model_path, .draft_path = u->draft_path};
	if (pipe(L.wake)) {
		err_set(e, "cannot create a pipe: %s", strerror(errno));
		return -1;
	}
	if (start_thread(&L.thread, loader_main, &L)) {
		err_set(e, "cannot start the model loader thread");
		close(L.wake[0]);
		close(L.wake[1]);
		return -1;
	}
	double t0 = now_s();
	/* keys typed meanwhile (a question typed ahead) are kept for the chat */
	enum { TYPED_MAX = 512 };
	wint_t typed[TYPED_MAX];
	bool typed_code[TYPED_MAX];
	int n_typed = 0;
	while (!atomic_load(&L.finished)) {
		getmaxyx(stdscr, u->rows, u->cols);
		draw_loading(u, &L, t0);
		struct pollfd pfd = {.fd = L.wake[0], .events = POLLIN};
		poll(&pfd, 1, 100);
		wint_t ch;
		int r;
		while ((r = wget_wch(stdscr, &ch)) != ERR)
			if (!(r == KEY_CODE_YES && ch == KEY_RESIZE) && n_typed < TYPED_MAX) {
				typed[n_typed] = ch;
				typed_code[n_typed++] = r == KEY_CODE_YES;
			}
	}
	/* back into the input queue, which gives the last one pushed first */
	for (int i = n_typed - 1; i >= 0; i--) {
		if (typed_code[i])
			ungetch((int)typed[i]);
		else
			unget_wch((wchar_t)typed[i]);
	}
	pthread_join(L.thread, NULL);
	close(L.wake[0]);
	close(L.wake[1]);
	if (!L.tok) {
		*e = L.e;
		llama_free(L.draft);
		llama_free(L.model);
		return -1;
	}
	u->model = L.model;
	u->tok = L.tok;
	u->draft = L.draft;
	u->draft_tok = L.draft_tok;
	u->fam = L.fam;
	const char *name = strrchr(u->model_path, '/');
	snprintf(u->model_name, sizeof u->model_name, "%s", name ? name + 1 : u->model_path);
	if (gguf_file_id(u->model_path, &u->model_size, &u->model_header, e))
		return -1;
	char *abs = realpath(u->model_path, NULL); /* chats record where the model is */
	if (abs) {
		free(u->model_path);
		u->model_path = abs;
	}
	const llama_hparams *hp = llama_hp(u->model);
	conv_model_init(&u->cm, u->tok, u->fam, u->p->context > 0 ? u->p->context : hp->n_ctx_train,
			u->p->block_tokens, u->p->overflow);
	if (u->fam == TMPL_UNKNOWN)
		ui_status(u, true, "the model's chat template is not a known family: completion mode");
	return 0;
}

int ui_start_engine(ui *u, err *e)
{
	core_params cp = {
		.model = u->model, .tok = u->tok, .block_tokens = u->p->block_tokens,
		.kv_type_k = u->p->kv_type_k, .kv_type_v = u->p->kv_type_v,
		.pool_blocks = u->p->pool_blocks, .pool_bytes = u->p->pool_bytes, .n_ctx = u->p->context,
		.step_tokens = u->p->chunk_tokens, .draft_k = u->p->draft_k,
		.draft_adaptive = u->p->draft_adaptive, .draft_probe = DRAFT_PROBE, .min_step_ms = u->p->min_step_ms,
		.host_blocks = u->p->kv_host_blocks, .kv_store = u->p->kv_store,
		.kv_store_max = u->p->kv_store_max, .preempt = u->p->preempt,
	};
	if (u->draft) {
		cp.draft_kind = DRAFT_MODEL;
		cp.draft = u->draft;
		cp.draft_tok = u->draft_tok;
	} else if (u->draft_path) {
		cp.draft_kind = DRAFT_NGRAM;
	}
	/* a new engine numbers its snapshots afresh and may have another pool:
	 * what was kept of the old one's goes */
	link_view_deinit(&u->view);
	u->view = (link_view){0};
	rows_deinit(u);
	u->link = link_start_local(&cp, e);
	if (!u->link)
		return -1;
	link_view_get(u->link, &u->view);
	return 0;
}

int ui_start_server(ui *u, err *e)
{
	const ui_params *p = u->p;
	link_server_params sp = {.url = p->server, .api_key = p->server_key, .model = p->server_model,
				 .refresh_ms = p->refresh_ms};
	u->link = link_start_server(&sp, e);
	if (!u->link)
		return -1;
	/* the server renders chats with its own template; completion mode sends text */
	u->fam = p->server_completion ? TMPL_NONE : TMPL_CHATML;
	u->cm.fam = u->fam;
	link_view_get(u->link, &u->view);
	const link_server *v = &u->view.server;
	snprintf(u->model_name, sizeof u->model_name, "%.63s", p->server_model ? p->server_model : v->url);
	ui_status(u, false, "talking to %s (%s)", v->url, p->server_completion ? "completion text" : "chat messages");
	return 0;
}
