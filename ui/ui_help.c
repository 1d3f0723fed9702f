/* ui/ui_help.c: the F1 help: every key, command and mark of the screen, in
 * a box that fits the terminal. Each entry is wrapped to the box's width
 * (its text indented past the key column), and when the entries need more
 * rows than the box has, PgUp/PgDn (and the arrows) scroll them; F1 again
 * goes to what the side panel's figures mean; any other key closes the
 * help. README.md's key table lists the same entries (the tests compare
 * the two). */
#include "ui/ui_int.h"

#include <stdio.h>
#include <string.h>

#define KEY_COL 18 /* the text's column after the key, when the box is wide */

typedef struct help_entry {
	const char *key;         /* NULL: a heading (text alone) */
	const char *text;
} help_entry;

static const help_entry help[] = {
	{NULL, "pagechat: tabs on one model, one shared KV-cache pool"},
	{NULL, ""},
	{NULL, "Keys"},
	{"Enter", "send (completion mode: an empty line continues the text)"},
	{"Alt-Enter", "a new line in the input (also Shift-Enter where the terminal tells it apart)"},
	{"Ctrl-X Ctrl-E", "write the input in $EDITOR"},
	{"Esc, Ctrl-C", "stop the answer"},
	{"Alt-o", "new tab (/new PROMPT: with that system prompt)"},
	{"Alt-w", "close the tab (asks when it is answering or has typed text)"},
	{"Alt-z", "reopen the tab closed last"},
	{"Alt-1..9", "go to tab N"},
	{"Alt-Left/Right", "previous / next tab (also Ctrl-PgUp / Ctrl-PgDn)"},
	{"F1", "this help (F1 again: what the side panel's figures mean)"},
	{"F2", "side panels on/off (80 columns and wider)"},
	{"F3", "regenerate the last answer (stops a running one first)"},
	{"F4", "fork the tab (a running answer goes on in both)"},
	{"F5", "copy the last answer to the clipboard (OSC 52; /copy N: code block N)"},
	{"F6", "the saved chats (as /open)"},
	{"F7", "after /n or /beams: highlight the next answer (/pick takes it)"},
	{"PgUp/PgDn", "scroll the chat (also the mouse wheel)"},
	{"Ctrl-L", "redraw the screen"},
	{"Ctrl-R", "search the input history (all tabs)"},
	{"Ctrl-D", "on an empty line: quit"},
	{"Ctrl-W, Ctrl-T", "delete the word before the cursor, swap two characters (readline)"},
	{"Ctrl-A/E, Alt-b/f", "start / end of the line, a word back / forward (readline)"},
	{"Ctrl-U/K, Ctrl-Y", "cut before / after the cursor, paste it back (readline)"},
	{NULL, ""},
	{NULL, "Commands"},
	{"/copy [N]", "copy the last answer, or its code block N (numbered in the view)"},
	{"/save FILE", "the tab as Markdown (asks before replacing FILE; ~ is your home)"},
	{"/open [N|FILE]", "the saved chats: title, date, model, size (N or FILE: open that one)"},
	{"/find TEXT", "the saved chats that hold TEXT"},
	{"/rename N TITLE", "rename saved chat N"},
	{"/delete N", "delete saved chat N (asks first)"},
	{"/reopen", "reopen the tab closed last (Alt-z)"},
	{"/raw", "a damaged chat's file as it is"},
	{"/name NAME", "rename the tab"},
	{"/set [NAME VALUE]", "this tab's temp, top_p, top_k, min_p, repeat_penalty, max_tokens or seed"},
	{"/system [TEXT]", "this tab's system prompt (a name from /prompts, or the text)"},
	{"/prompts", "the named system prompts"},
	{"/model [FILE]", "every tab goes on with another model (the chats stay)"},
	{"/draft [FILE|ngram|off]", "speculative decoding with a draft model, prompt lookup, or none"},
	{"/new [PROMPT]", "a new tab with a system prompt (config system_prompts)"},
	{"/n N [TEXT]", "N sampled answers to TEXT (or the next turn), one under the other"},
	{"/beams W [TEXT]", "the W best beams of a beam search, with their logprobs"},
	{"/pick [K]", "continue with answer K of /n or /beams (the others are dropped)"},
	{"/snapshot FILE", "the pool's map, figures and block tables as text (FILE.svg: a picture)"},
	{"/help", "this help"},
	{"/quit", "leave (chats are saved; pagechat --resume reopens them)"},
	{"//text", "send text that starts with a /"},
	{NULL, ""},
	{NULL, "Tab bar"},
	{"*", "the tab is answering (N% while its prompt is read)"},
	{"+", "new text in a tab not shown"},
	{"ctx U/L", "context used / limit, shown above 3/4 (! the next turn overflows)"},
	{"< >", "more tabs off the bar on that side"},
	{NULL, ""},
	{NULL, "Side panel map: one cell per KV block (or group), coloured by tab."},
};

/* The help laid out for a box of width cols (the text's columns); the
 * line where the figures' part begins goes to *figures (NULL: not wanted). */
static void build(wrap_doc *d, int cols, int *figures)
{
	int kc = cols >= 2 * KEY_COL + 10 ? KEY_COL : 0;
	wrap_clear(d);
	for (size_t i = 0; i < ARRAY_LEN(help); i++) {
		const help_entry *h = &help[i];
		if (!h->key) {
			wrap_para(d, 0);
			wrap_text(d, h->text, strlen(h->text), i == 0 || !*h->text ? ST_PLAIN : ST_LABEL);
			continue;
		}
		wrap_para(d, kc ? kc : 4);
		wrap_text(d, h->key, strlen(h->key), ST_USER);
		int pad = kc ? MAX(1, kc - wrap_width(h->key, strlen(h->key))) : 2;
		if (!kc) { /* narrow: the text on its own lines, indented */
			wrap_text(d, "\n", 1, ST_PLAIN);
			pad = 4;
		}
		wrap_text(d, "                    ", (size_t)MIN(pad, 20), ST_PLAIN);
		wrap_text(d, h->text, strlen(h->text), ST_PLAIN);
	}
	/* what the side panel's figures mean (ui_rows.c), without its own
	 * first and last lines (a title and how to close); paragraphs are laid
	 * out on their own, so the keys' part alone gives its first line */
	if (figures) {
		wrap_layout(d, cols);
		*figures = d->n_lines;
	}
	for (int i = 1; i + 1 < rows_n_figure_help; i++) {
		wrap_para(d, 0);
		wrap_text(d, rows_figure_help[i], strlen(rows_figure_help[i]), i == 1 ? ST_LABEL : ST_PLAIN);
	}
	wrap_layout(d, cols);
}

/* The box: h x w at (y, x), its text width w - 4, rows h - 3 (a footer). */
static void box_size(const ui *u, int *h, int *w)
{
	*w = MIN(u->cols - 2, 100);
	*h = u->rows - 2;
}

void help_open(ui *u)
{
	u->mode = MODE_HELP;
	u->help_top = 0;
	u->dirty = true;
}

void help_scroll(ui *u, int lines)
{
	int h, w;
	box_size(u, &h, &w);
	wrap_doc d = {0};
	build(&d, MAX(1, w - 4), NULL);
	int room = MAX(1, h - 3);
	u->help_top = MAX(0, MIN(u->help_top + lines, d.n_lines - room));
	wrap_free(&d);
	u->dirty = true;
}

void help_again(ui *u)
{
	int h, w, figures = 0;
	box_size(u, &h, &w);
	wrap_doc d = {0};
	build(&d, MAX(1, w - 4), &figures);
	int top = MAX(0, MIN(figures, d.n_lines - MAX(1, h - 3)));
	wrap_free(&d);
	if (u->help_top < top)
		u->help_top = top;
	else
		u->mode = MODE_NORMAL;
	u->dirty = true;
}

void help_draw(ui *u)
{
	int h, w;
	box_size(u, &h, &w);
	if (h < 4 || w < 12)
		return;
	wrap_doc d = {0};
	build(&d, w - 4, NULL);
	int room = h - 3;
	h = MIN(h, d.n_lines + 3);
	room = h - 3;
	u->help_top = MAX(0, MIN(u->help_top, d.n_lines - room));
	WINDOW *win = newwin(h, w, (u->rows - h) / 2, (u->cols - w) / 2);
	werase(win);
	box(win, 0, 0);
	for (int y = 0; y < room && u->help_top + y < d.n_lines; y++) {
		const wrap_line *ln = &d.lines[u->help_top + y];
		wmove(win, 1 + y, 2 + ln->indent);
		for (int k = 0; k < ln->n_segs; k++) {
			const wrap_seg *sg = &d.segs[ln->seg + k];
			wattrset(win, sg->style == ST_USER || sg->style == ST_LABEL ? A_BOLD : A_NORMAL);
			wchar_t buf[256];
			int n = 0;
			for (size_t i = 0; i < sg->len && n < 255;) {
				uint32_t cp;
				i += (size_t)wrap_char(d.text + sg->off + i, sg->len - i, &cp);
				if (cp >= 0x20)
					buf[n++] = (wchar_t)cp;
			}
			waddnwstr(win, buf, n);
		}
	}
	wattrset(win, A_DIM);
	char foot[96] = "any key closes this help";
	if (d.n_lines > room) /* where we are, for the reader (and the tests) */
		snprintf(foot, sizeof foot, "any key closes this help (PgUp/PgDn: lines %d-%d of %d)",
			 u->help_top + 1, MIN(d.n_lines, u->help_top + room), d.n_lines);
	mvwaddnstr(win, h - 2, 2, foot, w - 4);
	wattrset(win, A_NORMAL);
	wnoutrefresh(win);
	delwin(win);
	wrap_free(&d);
}
