/* ui/ui_input.c: GNU readline inside ncurses, for the input line.
 *
 * ncurses owns the keyboard (keypad on, wget_wch); keys the UI does not take
 * are turned back into the bytes readline expects (KEY_LEFT -> ESC [ D, ...)
 * and pushed into a small queue, whole characters at a time, which readline
 * reads through rl_getc_function; then rl_callback_read_char() runs until the
 * queue is empty. Readline never touches the terminal: no signal handlers,
 * no terminal preparation, no LINES/COLUMNS export, output to /dev/null; the
 * line is drawn by ui_edit.c from rl_line_buffer and rl_point. Each tab keeps
 * its own draft line; the history is one for all tabs (Ctrl-R finds a line
 * typed in any of them). Readline has no context pointer, hence the one
 * static `cur`: UI thread only. */
#include "ui/ui_int.h"

#include <readline/history.h>
#include <readline/readline.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ui *cur;              /* the UI readline's callbacks act on */
static unsigned char queue[512];
static int q_head, q_len;
static FILE *devnull;

static void push_bytes(const char *s, int n)
{
	for (int i = 0; i < n && q_len < (int)sizeof queue; i++, q_len++)
		queue[(q_head + q_len) % sizeof queue] = (unsigned char)s[i];
}

/* The bytes readline binds for key r/ch (its default arrow and keypad
 * sequences); 0 for keys it has no use for. */
static int key_bytes(int r, wint_t ch, char *out)
{
	if (r == OK) {
		mbstate_t st = {0};
		size_t n = wcrtomb(out, (wchar_t)ch, &st);
		return n == (size_t)-1 ? 0 : (int)n;
	}
	if (ch >= KEY_META && ch < KEY_META + 0x80) { /* Alt-c: readline's Meta prefix */
		out[0] = '\033';
		out[1] = (char)(ch - KEY_META);
		return 2;
	}
	static const struct {
		int key;
		const char *seq;
	} map[] = {
		{KEY_LEFT, "\033[D"}, {KEY_RIGHT, "\033[C"}, {KEY_UP, "\033[A"}, {KEY_DOWN, "\033[B"},
		{KEY_HOME, "\033[H"}, {KEY_END, "\033[F"}, {KEY_DC, "\033[3~"}, {KEY_BACKSPACE, "\177"},
		{KEY_ENTER, "\r"}, {KEY_PASTE, "\033[200~"}, {KEY_PASTE_END, "\033[201~"},
	};
	for (size_t i = 0; i < ARRAY_LEN(map); i++)
		if (map[i].key == (int)ch) {
			size_t n = strlen(map[i].seq);
			memcpy(out, map[i].seq, n + 1);
			return (int)n;
		}
	/* Ctrl-Left/Right: a word back / forward (their codes vary by TERM) */
	const char *name = keyname((int)ch);
	if (name && (!strcmp(name, "kLFT5") || !strcmp(name, "kRIT5"))) {
		memcpy(out, name[1] == 'L' ? "\033b" : "\033f", 3);
		return 2;
	}
	return 0;
}

/* Readline asks for bytes within one call (a bracketed paste, quoted
 * insert): then wait for the next key here. */
static int getc_hook(FILE *f)
{
	(void)f;
	while (q_len == 0) {
		wint_t ch;
		nodelay(cur->w_input, FALSE);
		int r = wget_wch(cur->w_input, &ch);
		nodelay(cur->w_input, TRUE);
		char b[16];
		if (r == ERR) { /* the terminal is gone */
			cur->quit = true;
			return EOF;
		}
		push_bytes(b, key_bytes(r, ch, b));
	}
	unsigned char c = queue[q_head];
	q_head = (q_head + 1) % (int)sizeof queue;
	q_len--;
	return c;
}

static int input_available(void)
{
	return q_len > 0;
}

static void redisplay(void)
{
	cur->dirty = true;
}

static void prep_noop(int meta)
{
	(void)meta;
}

static void deprep_noop(void)
{
}

static void on_line(char *line)
{
	cur->in_accept = true;
	cur->on_line(cur, line);
	cur->in_accept = false;
	free(line);
}

static int edit_external(int count, int key)
{
	(void)count, (void)key;
	input_edit_external(cur);
	return 0;
}

static void set_prompt(const tab *t)
{
	char prompt[64];
	snprintf(prompt, sizeof prompt, "%.40s> ", t ? t->chat.name : "");
	rl_set_prompt(prompt);
}

void input_init(ui *u)
{
	cur = u;
	q_head = q_len = 0;
	devnull = fopen("/dev/null", "w");
	rl_readline_name = "pagechat";
	rl_catch_signals = 0;
	rl_catch_sigwinch = 0;
	rl_change_environment = 0;  /* else readline exports LINES/COLUMNS and resizes stop */
	rl_prep_term_function = prep_noop;
	rl_deprep_term_function = deprep_noop;
	rl_getc_function = getc_hook;
	rl_input_available_hook = input_available;
	rl_redisplay_function = redisplay;
	rl_outstream = devnull;
	rl_instream = stdin;
	rl_callback_handler_install("> ", on_line);
	rl_bind_key('\t', rl_insert);   /* no file-name completion in a chat */
	rl_bind_keyseq("\\C-x\\C-e", edit_external);
	rl_variable_bind("bell-style", "none");
	using_history();
}

void input_deinit(ui *u)
{
	(void)u;
	rl_callback_handler_remove();
	HIST_ENTRY **list = history_list();
	clear_history();
	free(list);
	history_set_history_state(&(HISTORY_STATE){0});
	if (devnull)
		fclose(devnull);
	devnull = NULL;
	cur = NULL;
}

void input_feed(ui *u, int r, wint_t ch)
{
	char b[16];
	int n = key_bytes(r, ch, b);
	if (n == 0)
		return;
	push_bytes(b, n);
	while (q_len > 0)
		rl_callback_read_char();
	if (u->restore_line) {
		/* a line the UI refused goes back into the input */
		rl_replace_line(u->restore_line, 1);
		rl_point = rl_end;
		free(u->restore_line);
		u->restore_line = NULL;
	}
	u->dirty = true;
}

void input_history_add(const char *line)
{
	HIST_ENTRY *last = history_length > 0 ? history_get(history_base + history_length - 1) : NULL;
	if (!last || strcmp(last->line, line))
		add_history(line);
}

/* Leaves any half-typed i-search or numeric argument (Ctrl-G). */
static bool abort_pending(void)
{
	if (!RL_ISSTATE(RL_STATE_ISEARCH | RL_STATE_NSEARCH | RL_STATE_NUMERICARG | RL_STATE_MULTIKEY))
		return false;
	push_bytes("\007", 1);
	while (q_len > 0)
		rl_callback_read_char();
	return true;
}

bool input_abort(void)
{
	bool was = abort_pending();
	if (was)
		cur->dirty = true;
	return was;
}

/* Whether readline does something with Meta-c (Esc c), by its own bindings
 * or the user's inputrc: ESC-c in one read is Alt-c to a terminal, but where
 * nothing takes Alt-c it was an Esc typed with the next key. */
bool input_meta_bound(int c)
{
	char seq[3] = {'\033', (char)c, 0};
	int type = 0;
	rl_command_func_t *f = rl_function_of_keyseq(seq, rl_get_keymap(), &type);
	if (f == rl_do_lowercase_version && c >= 'A' && c <= 'Z') {
		seq[1] = (char)(c - 'A' + 'a');
		f = rl_function_of_keyseq(seq, rl_get_keymap(), &type);
	}
	return f != NULL && f != rl_do_lowercase_version;
}

bool input_has_text(void)
{
	return rl_line_buffer && rl_line_buffer[0];
}

void input_insert_newline(ui *u)
{
	rl_insert_text("\n");
	u->dirty = true;
}

void input_switch(ui *u, tab *from, tab *to)
{
	abort_pending();
	if (from != to) {
		if (from) {
			/* a line being accepted is the tab's no more */
			free(from->draft);
			from->draft = xstrdup(u->in_accept || !rl_line_buffer ? "" : rl_line_buffer);
			from->draft_point = u->in_accept ? 0 : rl_point;
		}
		const char *draft = to->draft ? to->draft : "";
		if (u->in_accept) {
			/* readline empties the line after the handler: put it back then */
			free(u->restore_line);
			u->restore_line = *draft ? xstrdup(draft) : NULL;
		} else {
			rl_replace_line(draft, 1);
			rl_point = MIN(to->draft_point, rl_end);
		}
	}
	set_prompt(to);
	u->dirty = true;
}

/* The history is shared: a tab's user messages join it when it opens. */
void input_tab_history(ui *u, tab *t)
{
	(void)u;
	for (int i = 0; i < t->chat.n_msgs; i++)
		if (t->chat.msgs[i].role == CONV_USER && t->chat.msgs[i].len)
			input_history_add(t->chat.msgs[i].text);
}

void input_tab_free(ui *u, tab *t)
{
	(void)u, (void)t; /* its lines stay in the shared history */
}
