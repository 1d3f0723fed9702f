/* ui/ui_edit.c: the input box: readline's line laid out on as many rows as
 * its newlines and its width need (Alt-Enter adds a newline, a bracketed
 * paste keeps its own), the box growing to INPUT_MAX_ROWS and then
 * scrolling to the cursor; and Ctrl-X Ctrl-E, which hands the line to
 * $VISUAL or $EDITOR (vi when neither is set) and takes back what was
 * saved. Continuation rows start under the text, past the prompt. */
#include "ui/ui_int.h"

#include "base/files.h"

#include <readline/readline.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define INPUT_MAX_ROWS 6
#define EDIT_MAX_BYTES (1 << 20)

/* One character as drawn: itself, or "^X" for a control character. */
typedef struct glyph {
	wchar_t wc[3];
	int n, width;
} glyph;

static int to_glyph(const char *s, size_t len, glyph *g)
{
	uint32_t cp;
	int n = wrap_char(s, len, &cp);
	if (cp < 0x20 || cp == 0x7F)
		*g = (glyph){{L'^', (wchar_t)(cp == 0x7F ? '?' : cp + '@')}, 2, 2};
	else
		*g = (glyph){{(wchar_t)cp}, 1, wrap_cp_width(cp)};
	return n;
}

/* Walks prompt + line as laid out in cols columns; with w set, draws the
 * rows [top, top + getmaxy(w)). Returns the rows used; *cy, *cx get the
 * cursor's place (rl_point). */
static int layout(WINDOW *w, int top, int cols, int *cy, int *cx)
{
	const char *prompt = rl_display_prompt ? rl_display_prompt : "";
	const char *line = rl_line_buffer ? rl_line_buffer : "";
	int pw = wrap_width(prompt, strlen(prompt));
	int indent = pw < cols / 2 ? pw : 0, y = 0, x = 0, h = w ? getmaxy(w) : 0;
	*cy = *cx = 0;
	for (int part = 0; part < 2; part++) {
		const char *s = part ? line : prompt;
		size_t n = strlen(s);
		if (w)
			wattrset(w, part ? A_NORMAL : A_BOLD);
		for (size_t i = 0; i <= n; ) {
			if (part && (int)i == rl_point)
				*cy = y, *cx = x;
			if (i == n)
				break;
			if (part && s[i] == '\n') { /* a newline in the text: the next row */
				y++, x = indent, i++;
				continue;
			}
			glyph g;
			i += (size_t)to_glyph(s + i, n - i, &g);
			if (x + g.width > cols && x > indent)
				y++, x = indent;
			if (w && y >= top && y < top + h)
				mvwaddnwstr(w, y - top, x, g.wc, g.n);
			x += g.width;
		}
	}
	if (x >= cols) /* the cursor after a full row goes to the next */
		if (*cy == y && *cx >= cols)
			*cy = ++y, *cx = indent;
	return y + 1;
}

int input_rows(const ui *u)
{
	int cy, cx;
	int rows = layout(NULL, 0, MAX(1, u->cols), &cy, &cx);
	return MAX(1, MIN(rows, MIN(INPUT_MAX_ROWS, MAX(1, (u->rows - 4) / 3))));
}

void input_draw(ui *u)
{
	WINDOW *w = u->w_input;
	werase(w);
	int cols = getmaxx(w), h = getmaxy(w), cy, cx;
	int rows = layout(NULL, 0, cols, &cy, &cx);
	int top = rows <= h ? 0 : MAX(0, MIN(cy - h + 1, rows - h));
	layout(w, top, cols, &cy, &cx);
	wattrset(w, A_NORMAL);
	wmove(w, MAX(0, MIN(h - 1, cy - top)), MAX(0, MIN(cols - 1, cx)));
	wnoutrefresh(w);
}

/* ---- $EDITOR ---- */

/* Runs the editor on path with the terminal given back; its exit status,
 * or -1 if it could not start. */
static int run_editor(const char *path)
{
	const char *ed = getenv("VISUAL");
	if (!ed || !*ed)
		ed = getenv("EDITOR");
	if (!ed || !*ed)
		ed = "vi";
	def_prog_mode();
	endwin();
	fputs("\033[?2004l", stdout);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL); /* the UI's are blocked */
		execl("/bin/sh", "sh", "-c", "exec $PAGECHAT_EDITOR \"$1\"", "sh", path, (char *)NULL);
		_exit(127);
	}
	int st = -1;
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0)
			;
	fputs("\033[?2004h", stdout);
	fflush(stdout);
	reset_prog_mode();
	clearok(curscr, TRUE);
	return pid < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void input_edit_external(ui *u)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/input-%ld.md", u->data_dir, (long)getpid());
	const char *line = rl_line_buffer ? rl_line_buffer : "";
	err e = {0};
	if (file_write_atomic(path, line, strlen(line), FILE_MODE_PRIVATE, &e)) {
		ui_status(u, true, "%s", e.msg);
		return;
	}
	const char *ed = getenv("VISUAL") && *getenv("VISUAL") ? getenv("VISUAL") : getenv("EDITOR");
	setenv("PAGECHAT_EDITOR", ed && *ed ? ed : "vi", 1);
	int rc = run_editor(path);
	size_t len = 0;
	char *text = rc == 0 ? file_read_all(path, EDIT_MAX_BYTES, "edited input", &len, &e) : NULL;
	unlink(path);
	u->dirty = true;
	if (!text && rc == 0)
		ui_status(u, true, "%s", e.msg);
	else if (!text)
		ui_status(u, true, "the editor (%s) ended with status %d: the input stays as it was",
			  getenv("PAGECHAT_EDITOR"), rc);
	if (!text)
		return;
	while (len > 0 && text[len - 1] == '\n') /* editors end files with one */
		text[--len] = '\0';
	rl_replace_line(text, 0);
	rl_point = rl_end;
	free(text);
}
