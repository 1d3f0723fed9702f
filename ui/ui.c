/* ui/ui.c: the chat's event loop, keys, commands and frames.
 *
 * The loop (ui_loop) sleeps in ppoll() on the keyboard and on the link's
 * wake-up fd, with SIGWINCH and the quit signals unblocked only while it
 * sleeps; then it drains every key ncurses holds (its look-ahead buffer is
 * invisible to poll), every engine event, the latest snapshot when one is due,
 * and draws at most ~30 frames a second: windows with wnoutrefresh, the input
 * line last (it owns the cursor), one doupdate. Keys go through a table; what
 * the table does not take goes to readline. Signal handlers only set a flag. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define FRAME_S (1.0 / 30)

/* ---- commands: keys ---- */

static void key_new_tab(ui *u)
{
	const ui_prompt *pr = ui_find_prompt(u, u->default_prompt);
	tab_new(u, pr ? pr : &u->p->prompts[0]);
}

static void key_close_tab(ui *u)
{
	if (u->n_tabs == 1) {
		ui_status(u, true, "this is the last tab: Ctrl-D on an empty line or /quit leaves");
		return;
	}
	bool draft = input_has_text();
	if (tab_busy(ui_tab(u)) || draft) {
		u->mode = MODE_CONFIRM_CLOSE;
		u->close_why = tab_busy(ui_tab(u)) ? CLOSE_BUSY : CLOSE_DRAFT;
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
	else if (!input_abort())
		ui_status(u, false, "nothing to stop");
}

static void relayout(ui *u);

/* The panels need 80 columns: below that F2 says so and changes nothing. */
static void key_panels(ui *u)
{
	if (u->cols < 80) {
		ui_status(u, true, "the side panels need a terminal 80 columns wide (this one has %d)", u->cols);
		return;
	}
	u->panels = !u->panels;
	relayout(u);
}

static void key_regenerate(ui *u)
{
	tab *t = ui_tab(u);
	bool busy = tab_busy(t);
	tab_regenerate(u, t);
	if (busy && tab_busy(t))
		ui_status(u, false, "the running answer was stopped and is being asked again");
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
	tab_show(u, (u->active + u->n_tabs - 1) % u->n_tabs);
}

static void key_next_tab(ui *u)
{
	tab_show(u, (u->active + 1) % u->n_tabs);
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

static void key_copy(ui *u)
{
	cmd_copy(u, "");
}

static void key_chats(ui *u)
{
	chats_list(u, NULL);
}

static void key_newline(ui *u)
{
	input_insert_newline(u);
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

/* Ctrl-W, Ctrl-T and the other control keys readline uses stay readline's:
 * tab actions are on Alt keys readline leaves unbound, and F-keys. */
static const keybind keys[] = {
	{true, KEY_META + 'o', key_new_tab},
	{true, KEY_META + 'w', key_close_tab},
	{true, KEY_META + 'z', chats_reopen},
	{false, 0x03, key_stop},             /* Ctrl-C */
	{true, KEY_META + 033, key_stop},    /* Esc Esc */
	{false, 0x0c, key_redraw},           /* Ctrl-L */
	{true, KEY_F(1), help_open},
	{true, KEY_F(2), key_panels},
	{true, KEY_F(3), key_regenerate},
	{true, KEY_F(4), key_fork},
	{true, KEY_F(5), key_copy},
	{true, KEY_F(6), key_chats},
	{true, KEY_NEWLINE, key_newline},
	{true, KEY_F(7), beams_key_next},
	{true, KEY_PPAGE, key_page_up},
	{true, KEY_NPAGE, key_page_down},
	{true, KEY_TAB_PREV, key_prev_tab},
	{true, KEY_TAB_NEXT, key_next_tab},
	{true, KEY_MOUSE, key_mouse},
	{true, KEY_RESIZE, key_resize},
};

/* In the help: the scroll keys scroll it, F1 goes to the figures, any
 * other key closes it. */
static bool help_key(ui *u, int r, wint_t ch)
{
	static const struct {
		int key, lines;
	} scroll[] = {{KEY_NPAGE, 10}, {KEY_PPAGE, -10}, {KEY_DOWN, 1}, {KEY_UP, -1}};
	if (r == KEY_CODE_YES && ch == KEY_RESIZE)
		return false;
	if (r == KEY_CODE_YES && ch == KEY_F(1)) {
		help_again(u);
		return true;
	}
	for (size_t i = 0; r == KEY_CODE_YES && i < ARRAY_LEN(scroll); i++)
		if ((int)ch == scroll[i].key) {
			help_scroll(u, scroll[i].lines);
			return true;
		}
	u->mode = MODE_NORMAL;
	u->dirty = true;
	return true;
}

/* The y/n questions; true when the key answered one. */
static bool question_key(ui *u, int r, wint_t ch)
{
	bool yes = r == OK && (ch == 'y' || ch == 'Y');
	if (u->mode == MODE_CONFIRM_CLOSE) {
		u->mode = MODE_NORMAL;
		u->dirty = true;
		if (yes)
			tab_close(u, u->active);
		else
			ui_status(u, false, "the tab stays open");
		return true;
	}
	if (u->mode == MODE_CONFIRM_SAVE) {
		saved_confirm_save(u, yes);
		return true;
	}
	if (u->mode == MODE_CONFIRM_DELETE) {
		chats_confirm_delete(u, yes);
		return true;
	}
	return false;
}

static void handle_key(ui *u, int r, wint_t ch)
{
	demo_key(u, r, ch); /* a key ends the tour, and does what it does */
	if (u->mode == MODE_HELP && help_key(u, r, ch))
		return;
	if (question_key(u, r, ch))
		return;
	bool code = r == KEY_CODE_YES;
	if (code && ch > KEY_ALT_DIGIT && ch <= KEY_ALT_DIGIT + 9) {
		tab_show(u, (int)(ch - KEY_ALT_DIGIT) - 1);
		return;
	}
	if (!code && ch == 033) { /* Esc alone: Alt keys arrive as KEY_META codes */
		key_stop(u);
		return;
	}
	for (size_t i = 0; i < ARRAY_LEN(keys); i++)
		if (keys[i].code == code && keys[i].key == ch) {
			keys[i].fn(u);
			return;
		}
	if (code && ch >= KEY_META + 0x20 && ch < KEY_META + 0x7f && !input_meta_bound((int)(ch - KEY_META))) {
		/* Esc and a key in one read (typed quickly, or a paste), as Alt-c
		 * to the terminal, but nothing takes Alt-c: the Esc, then the key */
		key_stop(u);
		input_feed(u, OK, ch - KEY_META);
		return;
	}
	input_feed(u, r, ch);
}

/* ---- lines ---- */

/* A line the tab cannot take now goes back into the input, with why. */
static void refuse_line(ui *u, const char *line, const char *why)
{
	ui_status(u, true, "%s", why);
	free(u->restore_line);
	u->restore_line = xstrdup(line);
}

/* A line the user entered (ui.on_line: readline's accept and the tour
 * reach it): a /command, else a turn for the active tab; NULL at end of
 * input, which quits. A command may hand back a line to enter next. */
static void on_line(ui *u, const char *line)
{
	if (!line) {
		u->quit = true;
		return;
	}
	tab *t = ui_tab(u);
	if (line[0] == '/' && line[1] != '/') {
		input_history_add(line);
		cmd_run(u, line);
		char *next = u->next_line;
		u->next_line = NULL;
		if (next)
			on_line(u, next);
		free(next);
		return;
	}
	if (line[0] == '/')
		line++; /* "//x" sends "/x" */
	if (t->note) {
		refuse_line(u, line, t->file[0] ? "this tab is read-only (a damaged chat: /raw shows its file); "
						  "Alt-o opens a new one"
						: "this tab is read-only; Alt-o opens a new one");
		return;
	}
	bool completion = conv_completion_mode(&u->cm);
	if (!*line && !completion)
		return;
	if (t->locked) {
		refuse_line(u, line, t->locked);
		return;
	}
	if (tab_busy(t)) {
		refuse_line(u, line, "this tab is still answering: Esc stops it");
		return;
	}
	if (*line)
		input_history_add(line);
	conv_add(&t->chat, CONV_USER, line, strlen(line));
	tab_submit(u, t);
}

/* ---- the screen ---- */

/* The bar, the chat (and the panels), the status line, and the input box
 * of input_rows() rows at the bottom. */
static void make_windows(ui *u)
{
	int side = panel_width(u), in = u->n_tabs ? input_rows(u) : 1, sh = MAX(1, u->status_h);
	int body = MAX(1, u->rows - 1 - sh - in);
	u->w_bar = newwin(1, u->cols, 0, 0);
	u->w_chat = newwin(body, MAX(1, u->cols - side), 1, 0);
	u->w_side = side ? newwin(body, side, 1, u->cols - side) : NULL;
	u->w_status = newwin(sh, u->cols, MAX(1, u->rows - sh - in), 0);
	u->w_input = newwin(in, u->cols, MAX(2, u->rows - in), 0);
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

/* The status line's right-hand text: the answer's progress, or the tab's
 * prompt and mode. */
static void status_right(ui *u, const tab *t, char *right, size_t cap)
{
	right[0] = '\0';
	if (t && tab_busy(t) && t->t_first > 0) {
		double dt = now_s() - t->t_first;
		snprintf(right, cap, " %d tok  %.0f tok/s ", t->n_live, dt > 0.05 ? (t->n_live - 1) / dt : 0.0);
	} else if (t && tab_busy(t) && t->n_prompt <= 0) { /* the engine counts the prompt */
		snprintf(right, cap, " waiting for the server ");
	} else if (t && tab_busy(t)) {
		snprintf(right, cap, " prefill %d tok ", t->n_prompt);
	} else if (t) {
		char set[160];
		set_summary(t, set, sizeof set);
		snprintf(right, cap, " %s  %s  %s ", set, t->chat.prompt_name, tab_mode_name(u));
	}
}

/* The key hints that fit in cols columns, most useful first. */
static void status_hints(const ui *u, char *buf, size_t cap, int cols)
{
	static const char *const hints[] = {
		"F1 help", "F2 panels", "Esc stop", "Alt-o new tab", "Alt-w close", "Alt-1..9 switch",
	};
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_LEN(hints); i++) {
		if (i == 1 && u->cols < 80)
			continue; /* no panels there */
		size_t need = strlen(hints[i]) + 2;
		if ((int)(n + need) > cols || n + need >= cap)
			continue;
		bfmt(buf, cap, &n, " %s ", hints[i]);
	}
}

/* The message of the moment: a question, the active tab's timed message,
 * else NULL (the hints). */
static const char *status_message(ui *u, const tab *t, char *buf, size_t cap)
{
	if (u->mode == MODE_CONFIRM_CLOSE) {
		snprintf(buf, cap, " '%s' %s: close it? (y/n)", t->chat.name,
			 u->close_why == CLOSE_BUSY ? "is answering" : "has typed text in its input");
		return buf;
	}
	if (u->mode == MODE_CONFIRM_SAVE) {
		snprintf(buf, cap, " %.200s exists: replace it? (y/n)", u->pending_save);
		return buf;
	}
	if (u->mode == MODE_CONFIRM_DELETE) {
		/* the question first: a long title is what gets cut */
		snprintf(buf, cap, " delete this chat for good? (y/n) %.100s", u->pending_title);
		return buf;
	}
	bool mine = u->status_conv < 0 || !t || u->status_conv == t->conv;
	if (u->status[0] && now_s() < u->status_until && mine) {
		snprintf(buf, cap, " %s", u->status);
		return buf;
	}
	return NULL;
}

/* The bytes of text that go on a row of cols columns: all of it when it
 * fits, else up to the last blank that fits (a cut at a character's start
 * where there is none). */
static int status_take(const char *text, int cols)
{
	int n = (int)strlen(text);
	if (wrap_width(text, (size_t)n) <= cols)
		return n;
	int take = 0, last_blank = 0;
	while (take < n && wrap_width(text, (size_t)take + 1) <= cols) {
		take++;
		while (take < n && ((unsigned char)text[take] & 0xc0) == 0x80)
			take++; /* a character's continuation bytes */
		if (text[take] == ' ')
			last_blank = take;
	}
	return last_blank > cols / 3 ? last_blank : MAX(1, take);
}

/* The rows a message takes at cols columns (STATUS_MAX_ROWS at most). */
static int status_rows_of(const char *text, int cols)
{
	int rows = 1;
	while (rows < STATUS_MAX_ROWS) {
		int take = status_take(text, cols);
		text += take;
		while (*text == ' ')
			text++;
		if (!*text)
			break;
		rows++;
	}
	return rows;
}

/* The rows the status line needs now: more than one only for a message
 * wider than the screen, which then goes on over them whole. */
static int status_need(ui *u)
{
	char buf[300];
	const char *m = status_message(u, ui_tab(u), buf, sizeof buf);
	return m && u->cols > 10 ? status_rows_of(m, u->cols) : 1;
}

/* A message first; the right-hand text only where it leaves the message
 * whole (it never covers a message or a hint). A message wider than the
 * screen goes on over the status line's rows (status_need). */
static void draw_status(ui *u)
{
	WINDOW *w = u->w_status;
	wbkgdset(w, ' ' | A_REVERSE);
	werase(w);
	tab *t = ui_tab(u);
	char right[256], buf[300];
	status_right(u, t, right, sizeof right);
	int rw = (int)strlen(right);
	const char *left = status_message(u, t, buf, sizeof buf);
	bool bold = left && (u->mode != MODE_NORMAL || u->status_error);
	if (!left) {
		status_hints(u, buf, sizeof buf, rw + 10 <= u->cols ? u->cols - rw - 1 : u->cols);
		left = buf;
	}
	int lw = wrap_width(left, strlen(left));
	if (bold)
		wattron(w, A_BOLD);
	const char *p = left;
	for (int y = 0; y < getmaxy(w) && *p; y++) {
		int take = status_take(p, u->cols);
		mvwaddnstr(w, y, 0, p, take);
		p += take;
		while (*p == ' ')
			p++;
	}
	wattroff(w, A_BOLD);
	if (lw + rw < u->cols)
		mvwaddstr(w, 0, u->cols - rw, right);
	wnoutrefresh(w);
}

/* The tour's caption over the chat's first rows (`pagechat demo`), whole:
 * broken at blanks over as many rows as it takes (the chat's rows less
 * three at most). */
static void draw_caption(ui *u)
{
	const char *c = demo_caption(u);
	if (!c)
		return;
	WINDOW *w = u->w_chat;
	int width = getmaxx(w) - 2, rows = getmaxy(w) - 3;
	wattrset(w, A_REVERSE | A_BOLD);
	for (int y = 0; y < rows && *c && width > 10; y++) {
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
	if (u->n_tabs && input_rows(u) != getmaxy(u->w_input))
		relayout(u); /* the input box grew or shrank */
	if (status_need(u) != MAX(1, u->status_h)) {
		u->status_h = status_need(u); /* a long message, or its end */
		relayout(u);
	}
	tab_draw_bar(u);
	tab_draw_chat(u);
	draw_caption(u);
	if (u->w_side && u->view.has_server)
		server_panel_draw(u); /* a server's figures (ui_server.c) */
	else if (u->w_side)
		panel_draw(u);
	draw_status(u);
	if (u->mode == MODE_HELP)
		help_draw(u);
	input_draw(u);
	doupdate();
	if (u->dump_path)
		term_dump(u);
	u->dirty = false;
	u->last_frame = now_s();
}

/* ---- start-up tabs ---- */

static void pick_default_prompt(ui *u)
{
	bool chat_model = u->fam != TMPL_NONE && u->fam != TMPL_UNKNOWN;
	const ui_prompt *p = ui_find_prompt(u, u->p->default_prompt);
	if (!p)
		p = ui_find_prompt(u, chat_model ? "assistant" : "story");
	if (!p)
		p = &u->p->prompts[0];
	u->default_prompt = p->name;
}

static void open_start_tabs(ui *u)
{
	u->first_run = !u->p->demo && !store_session_exists(u->data_dir);
	int show = u->p->resume ? saved_resume(u) : -1;
	if (u->p->resume && show < 0 && !u->status[0])
		ui_status(u, false, "nothing to resume: new tabs");
	if (!u->p->resume)
		saved_note_previous(u); /* before this run's session replaces it */
	bool fresh = u->n_tabs == 0;
	for (int i = 0; fresh && i < u->p->n_tabs; i++) {
		const ui_tab_spec *s = &u->p->tabs[i];
		const ui_prompt *pr = ui_find_prompt(u, s->prompt ? s->prompt : u->default_prompt);
		if (!pr)
			pr = ui_find_prompt(u, u->default_prompt);
		conv c;
		conv_init(&c, s->name, pr->name, pr->text);
		tab_open(u, &c, NULL, &s->samp, s->max_tokens, NULL);
	}
	for (int i = 0; i < u->n_tabs; i++)
		tab_save(u, u->tabs[i]);
	input_switch(u, NULL, ui_tab(u));
	tab_show(u, MAX(show, 0));
	tab_save_session(u);
}

/* ---- the loop ---- */

static void drain_events(ui *u)
{
	link_event ev;
	while (link_poll(u->link, &ev)) {
		tab_on_event(u, &ev);
		link_event_clear(&ev);
	}
}

static void take_snapshot(ui *u, double now)
{
	if (now < u->next_snapshot)
		return;
	u->next_snapshot = now + u->p->refresh_ms / 1000.0;
	enum link_state was = u->view.server.state;
	if (!link_view_get(u->link, &u->view))
		return;
	if (u->view.has_snap) {
		rows_on_snapshot(u);
		tab_on_snapshot(u);
	}
	if (u->view.has_server)
		server_on_view(u, was);
	u->dirty = true;
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
		int wake = link_wake_fd(u->link);
		struct pollfd pfd[2] = {{.fd = 0, .events = POLLIN}, {.fd = wake, .events = POLLIN}};
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
		if (u->quit) /* a command may have left no engine (u->fatal) */
			break;
		drain_events(u);
		now = now_s();
		take_snapshot(u, now);
		demo_tick(u, now);
		if (demo_record_pending(u)) { /* the tests' record of this moment, drawn now */
			draw(u);
			demo_record(u);
		}
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
	ui_engine x = {.link = u->link, .tok = u->tok, .fam = u->fam, .model_name = u->model_name};
	if (u->p->attach(u->p->attach_ctx, &x, note, sizeof note, e))
		return false;
	if (note[0])
		ui_status(u, false, "%s", note);
	const char *url = strstr(note, "http://"); /* kept in the tab bar: the status goes */
	if (url)
		snprintf(u->serve_url, sizeof u->serve_url, "%.*s", (int)strcspn(url, " ;,"), url);
	return true;
}

/* The folder of the chats: the given one (made private), else the user's. */
static int open_data_dir(ui *u, err *e)
{
	const char *d = u->p->data_dir;
	if (!d)
		return store_data_dir(u->data_dir, sizeof u->data_dir, e);
	if (snprintf(u->data_dir, sizeof u->data_dir, "%s", d) >= (int)sizeof u->data_dir) {
		err_set(e, "%s: the data directory's path is too long", d);
		return -1;
	}
	return file_private_dir(u->data_dir, e);
}

int ui_run(const ui_params *p, err *e)
{
	ui u = {.p = p, .panels = p->panels, .next_conv = 1, .next_req = 1, .dirty = true, .on_line = on_line};
	u.dump_path = getenv("PAGECHAT_SCREEN_DUMP");
	if (u.dump_path && !*u.dump_path)
		u.dump_path = NULL;
	if (open_data_dir(&u, e))
		return -1;
	u.model_path = xstrdup(p->server ? p->server : p->model_path);
	u.draft_path = p->draft_path ? xstrdup(p->draft_path) : NULL;
	ui_term t = {0};
	if (term_open(&u, &t, e)) {
		free(u.model_path);
		free(u.draft_path);
		return -1;
	}
	int rc = -1;
	if (p->resume && !p->model_given && !p->server)
		resume_pick_model(&u);
	bool attached = false;
	if (p->server ? ui_start_server(&u, e) != 0
		      : ui_load_model(&u, e) || ui_start_engine(&u, e) || !(attached = attach(&u, e)))
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
	if (u.fatal[0]) {
		err_set(e, "%s", u.fatal);
		rc = -1;
	}
out:
	if (attached && p->detach)
		p->detach(p->attach_ctx);
	link_free(u.link);
	link_view_deinit(&u.view);
	rows_deinit(&u);
	demo_free(&u);
	free_windows(&u);
	term_close(&u, &t);
	tok_free(u.draft_tok);
	llama_free(u.draft);
	tok_free(u.tok);
	llama_free(u.model);
	free(u.restore_line);
	free(u.next_line);
	free(u.model_path);
	free(u.draft_path);
	free(u.pending_save);
	free(u.pending_delete);
	for (int i = 0; i < u.n_listed; i++)
		free(u.listed[i]);
	free(u.listed);
	return rc;
}
