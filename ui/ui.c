/* ui/ui.c: the chat's event loop, keys, commands and frames.
 *
 * The loop (ui_loop) sleeps in ppoll() on the keyboard and on the engine's
 * wake-up fd, with SIGWINCH and the quit signals unblocked only while it
 * sleeps; then it drains every key ncurses holds (its look-ahead buffer is
 * invisible to poll), every engine event, the latest snapshot when one is due,
 * and draws at most ~30 frames a second: windows with wnoutrefresh, the input
 * line last (it owns the cursor), one doupdate. Keys go through a table; what
 * the table does not take goes to readline. Signal handlers only set a flag. */
#include "ui/ui_int.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define FRAME_S (1.0 / 30)
#define STATUS_S 5.0

/* ---- status line and small helpers ---- */

void ui_status(ui *u, bool error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->status, sizeof u->status, fmt, ap);
	va_end(ap);
	u->status_until = now_s() + STATUS_S;
	u->status_error = error;
	u->dirty = true;
}

tab *ui_tab(ui *u)
{
	return u->n_tabs ? u->tabs[u->active] : NULL;
}

static void switch_tab(ui *u, int i)
{
	if (i < 0 || i >= u->n_tabs || i == u->active)
		return;
	tab *from = ui_tab(u);
	u->active = i;
	input_switch(u, from, u->tabs[i]);
	u->tabs[i]->unread = false;
	u->mode = MODE_NORMAL;
	u->dirty = true;
	tab_save_session(u);
}

void ui_show_tab(ui *u, int i)
{
	switch_tab(u, i);
}

/* ---- commands: keys ---- */

static const ui_prompt *find_prompt(const ui *u, const char *name);

static void key_new_tab(ui *u)
{
	const ui_prompt *pr = find_prompt(u, u->default_prompt);
	if (!pr)
		pr = &u->p->prompts[0];
	char name[32];
	snprintf(name, sizeof name, "tab%d", u->next_conv);
	conv c;
	conv_init(&c, name, pr->name, pr->text);
	tab *t = tab_open(u, &c, NULL, &u->p->samp, u->p->max_tokens, NULL);
	(void)t;
	switch_tab(u, u->n_tabs - 1);
	tab_save_session(u);
}

static void key_close_tab(ui *u)
{
	if (u->n_tabs == 1) {
		ui_status(u, true, "this is the last tab: Ctrl-D on an empty line or /quit leaves");
		return;
	}
	if (tab_busy(ui_tab(u))) {
		u->mode = MODE_CONFIRM_CLOSE;
		u->dirty = true;
		return;
	}
	tab_close(u, u->active);
}

static void key_stop(ui *u)
{
	tab *t = ui_tab(u);
	if (tab_busy(t))
		tab_stop(u, t);
	else
		ui_status(u, false, "nothing to stop");
}

static void relayout(ui *u);

static void key_help(ui *u)
{
	u->mode = MODE_HELP;
	u->dirty = true;
}

static void key_panels(ui *u)
{
	u->panels = !u->panels;
	relayout(u);
	if (u->panels && !u->w_side)
		ui_status(u, false, "the panels need a terminal 80 columns wide");
}

static void key_regenerate(ui *u)
{
	tab_regenerate(u, ui_tab(u));
}

static void key_fork(ui *u)
{
	if (ui_tab(u)->note)
		ui_status(u, true, "this tab is read-only: there is no chat to fork");
	else
		tab_fork(u, ui_tab(u));
}

static void key_prev_tab(ui *u)
{
	switch_tab(u, (u->active + u->n_tabs - 1) % u->n_tabs);
}

static void key_next_tab(ui *u)
{
	switch_tab(u, (u->active + 1) % u->n_tabs);
}

static void key_page_up(ui *u)
{
	tab_page(u, ui_tab(u), 1);
}

static void key_page_down(ui *u)
{
	tab_page(u, ui_tab(u), -1);
}

static void key_redraw(ui *u)
{
	clearok(curscr, TRUE);
	u->dirty = true;
}

static void key_mouse(ui *u)
{
	MEVENT ev;
	if (getmouse(&ev) != OK)
		return;
	if (ev.bstate & BUTTON4_PRESSED)
		tab_scroll(u, ui_tab(u), 3);
	else if (ev.bstate & BUTTON5_PRESSED)
		tab_scroll(u, ui_tab(u), -3);
}

static void key_resize(ui *u)
{
	relayout(u);
}

typedef struct keybind {
	bool code;               /* a KEY_ code (else a character) */
	wint_t key;
	void (*fn)(ui *u);
} keybind;

static const keybind keys[] = {
	{false, 0x14, key_new_tab},          /* Ctrl-T */
	{false, 0x17, key_close_tab},        /* Ctrl-W */
	{false, 0x03, key_stop},             /* Ctrl-C */
	{false, 0x0c, key_redraw},           /* Ctrl-L */
	{true, KEY_F(1), key_help},
	{true, KEY_F(2), key_panels},
	{true, KEY_F(3), key_regenerate},
	{true, KEY_F(4), key_fork},
	{true, KEY_F(5), beams_key_next},
	{true, KEY_PPAGE, key_page_up},
	{true, KEY_NPAGE, key_page_down},
	{true, KEY_TAB_PREV, key_prev_tab},
	{true, KEY_TAB_NEXT, key_next_tab},
	{true, KEY_MOUSE, key_mouse},
	{true, KEY_RESIZE, key_resize},
};

/* Esc alone stops the answer; Esc followed at once by another key is a Meta
 * prefix for readline (Alt-b and the like). */
static void key_escape(ui *u)
{
	wint_t ch;
	int r = wget_wch(u->w_input, &ch);
	if (r == ERR) {
		key_stop(u);
		return;
	}
	input_feed(u, OK, 033);
	input_feed(u, r, ch);
}

static void handle_key(ui *u, int r, wint_t ch)
{
	if (!(r == KEY_CODE_YES && (ch == KEY_RESIZE || ch == KEY_MOUSE)) && demo_key(u))
		return; /* a key stops the tour */
	if (u->mode == MODE_HELP) {
		u->dirty = true;
		if (r == KEY_CODE_YES && ch == KEY_F(1) && !u->help_page) {
			u->help_page = 1; /* the figures' page */
			return;
		}
		u->mode = MODE_NORMAL;
		u->help_page = 0;
		if (!(r == KEY_CODE_YES && ch == KEY_RESIZE))
			return;
	}
	if (u->mode == MODE_CONFIRM_CLOSE) {
		u->mode = MODE_NORMAL;
		u->dirty = true;
		if (r == OK && (ch == 'y' || ch == 'Y'))
			tab_close(u, u->active);
		else
			ui_status(u, false, "the tab stays open");
		return;
	}
	if (u->mode == MODE_CONFIRM_SAVE) {
		saved_confirm_save(u, r == OK && (ch == 'y' || ch == 'Y'));
		return;
	}
	bool code = r == KEY_CODE_YES;
	if (code && ch > KEY_ALT_DIGIT && ch <= KEY_ALT_DIGIT + 9) {
		switch_tab(u, (int)(ch - KEY_ALT_DIGIT) - 1);
		return;
	}
	if (!code && ch == 033) {
		key_escape(u);
		return;
	}
	for (size_t i = 0; i < ARRAY_LEN(keys); i++)
		if (keys[i].code == code && keys[i].key == ch) {
			keys[i].fn(u);
			return;
		}
	input_feed(u, r, ch);
}

/* ---- commands: lines ---- */

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

static void cmd_new(ui *u, const char *arg)
{
	const char *keep = u->default_prompt;
	if (*arg) {
		bool found = false;
		for (int i = 0; i < u->p->n_prompts; i++)
			found |= !strcmp(u->p->prompts[i].name, arg);
		if (!found) {
			ui_status(u, true, "no system prompt named '%s'", arg);
			return;
		}
		u->default_prompt = arg;
	}
	key_new_tab(u);
	u->default_prompt = keep;
}

static void cmd_quit(ui *u, const char *arg)
{
	(void)arg;
	u->quit = true;
}

static void cmd_help(ui *u, const char *arg)
{
	(void)arg;
	key_help(u);
}

static const struct command {
	const char *name;
	void (*fn)(ui *u, const char *arg);
} commands[] = {
	{"save", saved_cmd_save}, {"name", cmd_name}, {"new", cmd_new}, {"quit", cmd_quit}, {"help", cmd_help},
	{"open", saved_cmd_open}, {"raw", saved_cmd_raw},
	{"n", beams_cmd_n}, {"beams", beams_cmd_beams}, {"pick", beams_cmd_pick}, {"snapshot", snapshot_cmd},
};

static void run_command(ui *u, const char *line)
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
	ui_status(u, true, "unknown command /%s (/save FILE, /name NAME, /new [PROMPT], /open [FILE], /quit)",
		  name);
}

void ui_on_line(ui *u, const char *line)
{
	if (!line) {
		u->quit = true;
		return;
	}
	tab *t = ui_tab(u);
	if (line[0] == '/' && line[1] != '/') {
		input_history_add(line);
		run_command(u, line);
		return;
	}
	if (line[0] == '/')
		line++; /* "//x" sends "/x" */
	if (t->note) {
		ui_status(u, true, "this tab is read-only%s; Ctrl-T opens a new one",
			  t->file[0] ? " (a damaged chat: /raw shows its file)" : "");
		free(u->restore_line);
		u->restore_line = xstrdup(line);
		return;
	}
	bool completion = conv_completion_mode(&u->cm);
	if (!*line && !completion)
		return;
	if (t->locked) {
		ui_status(u, true, "%s", t->locked);
		free(u->restore_line);
		u->restore_line = xstrdup(line);
		return;
	}
	if (tab_busy(t)) {
		ui_status(u, true, "this tab is still answering: Esc stops it");
		free(u->restore_line);
		u->restore_line = xstrdup(line);
		return;
	}
	if (*line)
		input_history_add(line);
	conv_add(&t->chat, CONV_USER, line, strlen(line));
	tab_submit(u, t);
}

/* ---- the screen ---- */

static void make_windows(ui *u)
{
	int side = panel_width(u);
	int body = MAX(1, u->rows - 3);
	u->w_bar = newwin(1, u->cols, 0, 0);
	u->w_chat = newwin(body, MAX(1, u->cols - side), 1, 0);
	u->w_side = side ? newwin(body, side, 1, u->cols - side) : NULL;
	u->w_status = newwin(1, u->cols, MAX(1, u->rows - 2), 0);
	u->w_input = newwin(1, u->cols, MAX(2, u->rows - 1), 0);
	keypad(u->w_input, TRUE);
	nodelay(u->w_input, TRUE);
}

static void free_windows(ui *u)
{
	WINDOW **w[] = {&u->w_bar, &u->w_chat, &u->w_side, &u->w_status, &u->w_input};
	for (size_t i = 0; i < ARRAY_LEN(w); i++) {
		if (*w[i])
			delwin(*w[i]);
		*w[i] = NULL;
	}
}

/* Re-creates the windows for the terminal's size (after a resize, or when
 * the panels are toggled). */
static void relayout(ui *u)
{
	getmaxyx(stdscr, u->rows, u->cols);
	free_windows(u);
	make_windows(u);
	clearok(curscr, TRUE);
	u->dirty = true;
}

static void draw_status(ui *u)
{
	WINDOW *w = u->w_status;
	werase(w);
	wbkgdset(w, ' ' | A_REVERSE);
	werase(w);
	tab *t = ui_tab(u);
	char right[128] = "";
	if (t && tab_busy(t) && t->t_first > 0) {
		double dt = now_s() - t->t_first;
		snprintf(right, sizeof right, " %d tok  %.0f tok/s ", t->n_live,
			 dt > 0.05 ? (t->n_live - 1) / dt : 0.0);
	} else if (t && tab_busy(t)) {
		snprintf(right, sizeof right, " prefill %d tok ", t->n_prompt);
	} else if (t) {
		snprintf(right, sizeof right, " %s  %s ", t->chat.prompt_name,
			 u->fam == TMPL_NONE || u->fam == TMPL_UNKNOWN ? "completion" : tmpl_name(u->fam));
	}
	const char *left;
	char buf[300];
	if (u->mode == MODE_CONFIRM_CLOSE) {
		snprintf(buf, sizeof buf, " '%s' is answering: close it? (y/n)", t->chat.name);
		left = buf;
		wattron(w, A_BOLD);
	} else if (u->mode == MODE_CONFIRM_SAVE) {
		snprintf(buf, sizeof buf, " %.200s exists: replace it? (y/n)", u->pending_save);
		left = buf;
		wattron(w, A_BOLD);
	} else if (u->status[0] && now_s() < u->status_until) {
		snprintf(buf, sizeof buf, " %s", u->status);
		left = buf;
		if (u->status_error)
			wattron(w, A_BOLD);
	} else {
		left = " F1 help  Ctrl-T new tab  Ctrl-W close  Alt-1..9 switch  Esc stop  F2 panels";
	}
	mvwaddnstr(w, 0, 0, left, u->cols);
	wattroff(w, A_BOLD);
	int rw = (int)strlen(right);
	if (rw < u->cols / 2)
		mvwaddstr(w, 0, u->cols - rw, right);
	wnoutrefresh(w);
}

static const char *const help_lines[] = {
	"pagechat: tabs on one model, one shared KV-cache pool",
	"",
	"Enter        send (completion mode: empty line continues)",
	"Ctrl-T       new tab          Ctrl-W     close tab",
	"Alt-1..9     go to tab N      Ctrl-PgUp/PgDn  previous/next",
	"Esc, Ctrl-C  stop the answer  F3         regenerate the last answer",
	"F4           fork the tab     F2         side panels on/off",
	"PgUp/PgDn    scroll (also the mouse wheel)",
	"Ctrl-R       search history   Ctrl-D     on an empty line: quit",
	"/save FILE   export the tab as Markdown (asks before replacing FILE)",
	"/open [FILE] the saved chats (FILE: open one)   /raw  a damaged chat's file",
	"/name NAME   rename the tab   /new [PROMPT]  tab with a system prompt",
	"/n N [TEXT]  N sampled answers  /beams W [TEXT]  the W best beams",
	"/pick [K]    continue with answer K (F5 highlights the next one)",
	"/snapshot F  the pool's map and figures as text (F.svg: a picture)",
	"/quit        leave (chats are saved; pagechat --resume reopens them)",
	"",
	"Map: one cell per KV block (or group), coloured by tab.",
	"F1 again: what the figures mean; any other key closes this help",
};

static void draw_help(ui *u)
{
	const char *const *lines = u->help_page ? rows_figure_help : help_lines;
	int n = u->help_page ? rows_n_figure_help : (int)ARRAY_LEN(help_lines);
	int h = n + 2, w = 74;
	if (h > u->rows - 2 || w > u->cols - 2) {
		h = MIN(h, u->rows - 2);
		w = MIN(w, u->cols - 2);
	}
	if (h < 3 || w < 10)
		return;
	WINDOW *win = newwin(h, w, (u->rows - h) / 2, (u->cols - w) / 2);
	werase(win);
	box(win, 0, 0);
	for (int i = 0; i < n && i < h - 2; i++)
		mvwaddnstr(win, 1 + i, 2, lines[i], w - 4);
	wnoutrefresh(win);
	delwin(win);
}

/* The tour's caption over the chat's first row (`pagechat demo`). */
static void draw_caption(ui *u)
{
	const char *c = demo_caption(u);
	if (!c)
		return;
	WINDOW *w = u->w_chat;
	int width = getmaxx(w) - 2;
	wattrset(w, A_REVERSE | A_BOLD);
	for (int y = 0; y < 2 && *c && width > 10; y++) { /* two rows at most, cut at a blank */
		int n = (int)strlen(c);
		if (n > width) {
			n = width;
			while (n > width / 2 && c[n] != ' ')
				n--;
		}
		wmove(w, y, 0);
		wclrtoeol(w);
		mvwaddnstr(w, y, 1, c, n);
		c += n;
		while (*c == ' ')
			c++;
	}
	wattrset(w, A_NORMAL);
	wnoutrefresh(w);
}

static void draw(ui *u)
{
	if (u->rows < 6 || u->cols < 30) {
		werase(stdscr);
		mvaddstr(0, 0, "window too small");
		wnoutrefresh(stdscr);
		doupdate();
		return;
	}
	tab_draw_bar(u);
	tab_draw_chat(u);
	draw_caption(u);
	if (u->w_side)
		panel_draw(u);
	draw_status(u);
	if (u->mode == MODE_HELP)
		draw_help(u);
	input_draw(u);
	doupdate();
	if (u->dump_path)
		term_dump(u);
	u->dirty = false;
	u->last_frame = now_s();
}

/* ---- start-up tabs ---- */

static const ui_prompt *find_prompt(const ui *u, const char *name)
{
	for (int i = 0; name && i < u->p->n_prompts; i++)
		if (!strcmp(u->p->prompts[i].name, name))
			return &u->p->prompts[i];
	return NULL;
}

static void pick_default_prompt(ui *u)
{
	bool chat_model = u->fam != TMPL_NONE && u->fam != TMPL_UNKNOWN;
	const ui_prompt *p = find_prompt(u, u->p->default_prompt);
	if (!p)
		p = find_prompt(u, chat_model ? "assistant" : "story");
	if (!p)
		p = &u->p->prompts[0];
	u->default_prompt = p->name;
}

static void open_start_tabs(ui *u)
{
	int show = u->p->resume ? saved_resume(u) : -1;
	if (u->p->resume && show < 0 && !u->status[0])
		ui_status(u, false, "nothing to resume: new tabs");
	if (!u->p->resume)
		saved_note_previous(u); /* before this run's session replaces it */
	bool fresh = u->n_tabs == 0;
	for (int i = 0; fresh && i < u->p->n_tabs; i++) {
		const ui_tab_spec *s = &u->p->tabs[i];
		const ui_prompt *pr = find_prompt(u, s->prompt ? s->prompt : u->default_prompt);
		if (!pr)
			pr = find_prompt(u, u->default_prompt);
		conv c;
		conv_init(&c, s->name, pr->name, pr->text);
		tab_open(u, &c, NULL, &s->samp, s->max_tokens, NULL);
	}
	for (int i = 0; i < u->n_tabs; i++)
		tab_save(u, u->tabs[i]);
	input_switch(u, NULL, ui_tab(u));
	switch_tab(u, MAX(show, 0));
	tab_save_session(u);
}

/* ---- the loop ---- */

static void drain_events(ui *u)
{
	eng_event ev;
	while (eng_poll(u->eng, &ev)) {
		tab_on_event(u, &ev);
		eng_event_clear(&ev);
	}
}

static void take_snapshot(ui *u, double now)
{
	if (now < u->next_snapshot)
		return;
	u->next_snapshot = now + u->p->refresh_ms / 1000.0;
	if (eng_snapshot_get(u->eng, &u->snap)) {
		rows_on_snapshot(u);
		tab_on_snapshot(u);
		u->dirty = true;
	}
}

/* Milliseconds ppoll may sleep: until the next frame, snapshot or status expiry. */
static int sleep_ms(const ui *u, double now)
{
	double until = u->next_snapshot;
	if (u->dirty)
		until = MIN(until, u->last_frame + FRAME_S);
	if (u->status[0] && u->status_until > now)
		until = MIN(until, u->status_until);
	bool busy = false;
	for (int i = 0; i < u->n_tabs; i++)
		busy |= tab_busy(u->tabs[i]);
	if (busy) /* the status line's rate, the periodic saves */
		until = MIN(until, now + 0.5);
	if (u->demo) /* the tour's next step */
		until = MIN(until, now + 0.05);
	double ms = (until - now) * 1000;
	return ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms + 1;
}

static void ui_loop(ui *u, const sigset_t *sleep_mask)
{
	while (!u->quit) {
		double now = now_s();
		if (u->dirty && now - u->last_frame >= FRAME_S)
			draw(u);
		if (u->status[0] && now >= u->status_until) {
			u->status[0] = '\0';
			u->dirty = true;
		}
		struct pollfd pfd[2] = {{.fd = 0, .events = POLLIN}, {.fd = eng_wake_fd(u->eng), .events = POLLIN}};
		int ms = sleep_ms(u, now);
		struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
		ppoll(pfd, 2, &ts, sleep_mask);
		/* a signal to quit, or the terminal went away: save and leave */
		if (term_quit_requested() || (pfd[0].revents & (POLLHUP | POLLERR | POLLNVAL)))
			break;
		wint_t ch;
		int r;
		while (!u->quit && (r = wget_wch(u->w_input, &ch)) != ERR)
			handle_key(u, r, ch);
		drain_events(u);
		now = now_s();
		take_snapshot(u, now);
		demo_tick(u, now);
		tab_tick(u, now);
	}
}

static void shutdown_tabs(ui *u)
{
	for (int i = 0; i < u->n_tabs; i++) {
		tab *t = u->tabs[i];
		if (tab_busy(t))
			tab_stop(u, t); /* keeps the text so far, marked cancelled */
	}
	tab_save_session(u);
	for (int i = 0; i < u->n_tabs; i++) {
		tab_save(u, u->tabs[i]);
		store_journal_end(&u->tabs[i]->journal);
		input_tab_free(u, u->tabs[i]);
		tab_free(u->tabs[i]);
	}
	free(u->tabs);
	u->tabs = NULL;
	u->n_tabs = 0;
}

/* Lets the other front-end (if any) onto the engine; false with e. */
static bool attach(ui *u, err *e)
{
	if (!u->p->attach)
		return true;
	char note[200] = "";
	ui_engine x = {.eng = u->eng, .tok = u->tok, .fam = u->fam, .model_name = u->model_name};
	if (u->p->attach(u->p->attach_ctx, &x, note, sizeof note, e))
		return false;
	if (note[0])
		ui_status(u, false, "%s", note);
	return true;
}

int ui_run(const ui_params *p, err *e)
{
	ui u = {.p = p, .panels = p->panels, .next_conv = 1, .next_req = 1, .dirty = true};
	u.dump_path = getenv("PAGECHAT_SCREEN_DUMP");
	if (u.dump_path && !*u.dump_path)
		u.dump_path = NULL;
	if (store_data_dir(u.data_dir, sizeof u.data_dir, e))
		return -1;
	u.model_path = xstrdup(p->model_path);
	ui_term t = {0};
	if (term_open(&u, &t, e))
		return -1;
	int rc = -1;
	if (p->resume && !p->model_given)
		resume_pick_model(&u);
	bool attached = false;
	if (ui_load_model(&u, e) || ui_start_engine(&u, e) || !(attached = attach(&u, e)))
		goto out;
	pick_default_prompt(&u);
	relayout(&u);
	input_init(&u);
	open_start_tabs(&u);
	demo_start(&u);
	sigset_t sleep_mask;
	term_sleep_mask(&sleep_mask);
	ui_loop(&u, &sleep_mask);
	shutdown_tabs(&u);
	input_deinit(&u);
	rc = 0;
out:
	if (attached && p->detach)
		p->detach(p->attach_ctx);
	eng_stop(u.eng);
	eng_snapshot_deinit(&u.snap);
	rows_deinit(&u);
	demo_free(&u);
	free_windows(&u);
	term_close(&u, &t);
	tok_free(u.draft_tok);
	llama_free(u.draft);
	tok_free(u.tok);
	llama_free(u.model);
	free(u.restore_line);
	free(u.model_path);
	free(u.pending_save);
	return rc;
}
