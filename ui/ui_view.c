/* ui/ui_view.c: drawing the tabs: the active conversation laid out for
 * its window (chat mode: a paragraph per message, answers as Markdown;
 * completion mode: one running text), scrolled by the user or following
 * the bottom, and the tab bar. A tab's layout is rebuilt only when its
 * conversation or the width changed. */
#include "ui/ui_int.h"

#include "ui/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dim line in the view (notes about the context). */
static void add_notice(wrap_doc *d, const char *text)
{
	wrap_para(d, 2);
	wrap_text(d, "[", 1, ST_META);
	wrap_text(d, text, strlen(text), ST_META);
	wrap_text(d, "]", 1, ST_META);
}

/* Before message i: where the context starts, and how the prompt of
 * message `noted` (i, or the answer drawn with it) was made. */
static void add_context_notes(wrap_doc *d, const conv *c, int i, int noted)
{
	if (i == c->first && c->first > 0) {
		char buf[96];
		snprintf(buf, sizeof buf, "the %d messages above have left the context", c->first);
		wrap_para(d, 0);
		add_notice(d, buf);
	}
	if (noted < c->n_msgs && c->msgs[noted].note) {
		wrap_para(d, 0);
		add_notice(d, c->msgs[noted].note);
	}
}

static void add_meta(wrap_doc *d, const conv_msg *m)
{
	if (m->error) {
		wrap_para(d, 2);
		wrap_text(d, "error: ", 7, ST_ERROR);
		wrap_text(d, m->error, strlen(m->error), ST_ERROR);
	}
	if (m->role != CONV_ASSISTANT || !m->finish[0] || (m->error && m->n_gen == 0))
		return;
	char buf[160];
	size_t n = 0;
	bfmt(buf, sizeof buf, &n, "[%d tok, %s", m->n_gen, m->finish);
	if (m->ttft_ms > 0)
		bfmt(buf, sizeof buf, &n, ", TTFT %.*f ms", m->ttft_ms < 10 ? 1 : 0, m->ttft_ms);
	if (m->tpot_ms > 0)
		bfmt(buf, sizeof buf, &n, ", %.2f ms/tok", m->tpot_ms);
	if (m->n_prompt > 0) /* how much of the prompt the prefix cache gave */
		bfmt(buf, sizeof buf, &n, ", prompt %d tok: %d from the cache", m->n_prompt, m->n_cached);
	bfmt(buf, sizeof buf, &n, "]");
	wrap_para(d, 0);
	wrap_text(d, buf, n, ST_META);
}

static void add_cursor(const ui *u, wrap_doc *d, const tab *t, int i)
{
	if (tab_busy(t) && t->gen_msg == i) {
		const char *c = u->utf8 ? "\u258c" : "_";
		wrap_text(d, c, strlen(c), ST_CURSOR);
	}
}

/* The answer that several alternatives stand for is drawn by ui_beams.c. */
static bool hidden(const tab *t, int i)
{
	return t->alts && i == t->gen_msg;
}

/* The first time the chat runs, an empty tab says where the tour is. */
static void add_first_run(const ui *u, const tab *t, wrap_doc *d)
{
	static const char hint[] = "New here? Type below, or run `pagechat demo` (make demo) in a shell: a 30-second "
				   "tour of the KV pool (prefix sharing, copy-on-write, waste, preemption).";
	if (!u->first_run || t->chat.n_msgs > 0)
		return;
	wrap_para(d, 0);
	wrap_para(d, 0);
	wrap_text(d, hint, strlen(hint), ST_META);
}

/* Completion mode: the system prompt, then each turn as one paragraph (the
 * user's text in bold, the model's continuation after it, and what an
 * empty line made it add, with no break: words split between two answers
 * stay whole). The figures come once, after the last part. */
static void build_completion(const ui *u, const tab *t, wrap_doc *d)
{
	const conv *c = &t->chat;
	if (*c->system) {
		wrap_para(d, 0);
		wrap_text(d, c->system, strlen(c->system), ST_SYSTEM);
	}
	add_first_run(u, t, d);
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		if (hidden(t, i))
			continue;
		if (conv_continues(c, i)) {
			m = &c->msgs[++i];
			wrap_text(d, m->text, m->len, ST_PLAIN);
			add_cursor(u, d, t, i);
			if (!conv_continues(c, i + 1))
				add_meta(d, m);
			continue;
		}
		bool with_answer = m->role == CONV_USER && i + 1 < c->n_msgs &&
				   c->msgs[i + 1].role == CONV_ASSISTANT && !hidden(t, i + 1);
		add_context_notes(d, c, i, with_answer ? i + 1 : i);
		if (m->role == CONV_USER) {
			wrap_para(d, 0); /* a blank line between turns */
			wrap_para(d, 0);
			wrap_text(d, m->text, m->len, ST_USER);
			if (!with_answer) {
				add_meta(d, m);
				continue;
			}
			m = &c->msgs[++i];
		} else {
			wrap_para(d, 0);
		}
		wrap_text(d, m->text, m->len, ST_PLAIN);
		add_cursor(u, d, t, i);
		if (!conv_continues(c, i + 1))
			add_meta(d, m);
	}
}

/* Chat mode: one paragraph per message behind a label; answers are
 * Markdown (ui/md.h), without the model's leading blanks, their code
 * blocks numbered over the tab for /copy N. */
static void build_chat(const ui *u, const tab *t, wrap_doc *d)
{
	const conv *c = &t->chat;
	if (*c->system) {
		wrap_para(d, 8);
		wrap_text(d, "system: ", 8, ST_LABEL);
		wrap_text(d, c->system, strlen(c->system), ST_SYSTEM);
	}
	add_first_run(u, t, d);
	int blocks = 0;
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		if (hidden(t, i))
			continue;
		add_context_notes(d, c, i, i);
		wrap_para(d, 0);
		wrap_para(d, 5);
		wrap_text(d, m->role == CONV_USER ? "you> " : "bot> ", 5, ST_LABEL);
		if (m->role == CONV_USER) {
			wrap_text(d, m->text, m->len, ST_USER);
		} else {
			size_t skip = 0;
			while (skip < m->len && (m->text[skip] == ' ' || m->text[skip] == '\n'))
				skip++;
			md_opts o = {.indent = 5, .style0 = ST_MD, .utf8 = u->utf8, .join_first = true,
				     .first_block = blocks + 1};
			blocks += md_render(d, m->text + skip, m->len - skip, &o);
		}
		add_cursor(u, d, t, i);
		add_meta(d, m);
	}
}

/* A read-only tab: its note, a paragraph per line; the first in the error
 * style (what went wrong, or the list's title). */
static void build_note(const tab *t, wrap_doc *d)
{
	for (const char *s = t->note; *s;) {
		size_t n = strcspn(s, "\n");
		wrap_para(d, 0);
		wrap_text(d, s, n, s == t->note ? ST_ERROR : ST_PLAIN);
		s += n + (s[n] == '\n');
	}
}

static void build_view(const ui *u, tab *t, int width)
{
	uint64_t version = t->chat.version + (tab_busy(t) ? 1u << 31 : 0);
	if (t->view_version == version && t->view_width == width)
		return;
	wrap_clear(&t->view);
	if (t->note)
		build_note(t, &t->view);
	else if (conv_completion_mode(&u->cm))
		build_completion(u, t, &t->view);
	else
		build_chat(u, t, &t->view);
	beams_build_view(u, t, &t->view);
	if (t->locked) {
		wrap_para(&t->view, 0);
		add_notice(&t->view, t->locked);
	}
	wrap_layout(&t->view, width);
	t->view_version = version;
	t->view_width = width;
}

static int chat_height(const ui *u)
{
	return u->w_chat ? getmaxy(u->w_chat) : 1;
}

/* The first line shown, after clamping. */
static int view_top(const ui *u, tab *t)
{
	int h = chat_height(u), bottom = MAX(0, t->view.n_lines - h);
	if (t->follow || t->top >= bottom)
		return bottom;
	return MAX(0, t->top);
}

static int chat_width(const ui *u)
{
	return u->w_chat ? MAX(1, getmaxx(u->w_chat) - 1) : 1;
}

void tab_scroll(ui *u, tab *t, int lines)
{
	build_view(u, t, chat_width(u)); /* a tab not drawn yet has no lines */
	int h = chat_height(u), bottom = MAX(0, t->view.n_lines - h);
	int top = view_top(u, t) - lines;
	top = MAX(0, MIN(top, bottom));
	t->top = top;
	t->follow = top >= bottom;
	u->dirty = true;
}

void tab_page(ui *u, tab *t, int pages)
{
	tab_scroll(u, t, pages * MAX(1, chat_height(u) - 2));
}

/* An answer's Markdown: the MD_* flags as attributes. */
static attr_t md_attr(const ui *u, const tab *t, int flags)
{
	attr_t a = A_NORMAL;
	if (flags & MD_BOLD)
		a |= A_BOLD;
	if (flags & MD_ITALIC)
		a |= A_ITALIC;
	if (flags & MD_HEAD)
		a |= A_UNDERLINE;
	if (flags & (MD_QUOTE | MD_TAG))
		a |= A_DIM;
	if (flags & MD_MARK)
		a |= A_BOLD | (u->colors ? COLOR_PAIR(t->color + 1) : 0);
	if (flags & (MD_CODE | MD_PRE))
		a |= u->colors ? COLOR_PAIR(PAIR_CODE) : (flags & MD_CODE ? A_BOLD : 0);
	return a;
}

static attr_t style_attr(const ui *u, const tab *t, int style)
{
	short pair = (short)(t->color + 1);
	if (style >= ST_MD)
		return md_attr(u, t, style - ST_MD);
	switch (style) {
	case ST_SYSTEM:
	case ST_META:
		return A_DIM;
	case ST_USER:
		return A_BOLD;
	case ST_LABEL:
		return A_BOLD | (u->colors ? COLOR_PAIR(pair) : 0);
	case ST_ERROR:
		return A_BOLD | (u->colors ? COLOR_PAIR(PAIR_ERROR) : 0);
	case ST_CURSOR:
		return u->colors ? COLOR_PAIR(pair) : A_BOLD;
	case ST_CHOSEN: /* a label picked out from its bold peers: reversed too */
		return A_BOLD | A_REVERSE | (u->colors ? COLOR_PAIR(pair) : 0);
	default:
		return A_NORMAL;
	}
}

/* Draws s[len] at the cursor: tabs as spaces, other control characters not. */
static void put_text(WINDOW *w, const char *s, size_t len)
{
	wchar_t buf[256];
	int n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		i += (size_t)wrap_char(s + i, len - i, &cp);
		if (cp == '\t')
			cp = ' ';
		if (wrap_cp_width(cp) == 0 && cp < 0x300)
			continue;
		buf[n++] = (wchar_t)cp;
		if (n == (int)ARRAY_LEN(buf)) {
			waddnwstr(w, buf, n);
			n = 0;
		}
	}
	if (n)
		waddnwstr(w, buf, n);
}

/* Draws view line ln at row y: its segments, and a code block's background
 * on to the window's edge. */
static void draw_line(ui *u, tab *t, WINDOW *w, int y, const wrap_line *ln)
{
	wmove(w, y, ln->indent);
	attr_t pre = 0;
	for (int k = 0; k < ln->n_segs; k++) {
		const wrap_seg *sg = &t->view.segs[ln->seg + k];
		attr_t a = style_attr(u, t, sg->style);
		if (sg->style >= ST_MD && (sg->style - ST_MD) & MD_PRE)
			pre = a;
		wattrset(w, a);
		put_text(w, t->view.text + sg->off, sg->len);
	}
	if (pre && u->colors) {
		wattrset(w, pre);
		for (int x = getcurx(w); x < getmaxx(w) - 1 && getcury(w) == y; x++)
			waddch(w, ' ');
	}
	wattrset(w, A_NORMAL);
}

/* The view from its top line; when more follows below, the last row says
 * so instead of showing a line (never drawn over text). */
void tab_draw_chat(ui *u)
{
	WINDOW *w = u->w_chat;
	tab *t = ui_tab(u);
	werase(w);
	int h = getmaxy(w), width = getmaxx(w);
	build_view(u, t, chat_width(u));
	int top = view_top(u, t);
	bool more = !t->follow && top < MAX(0, t->view.n_lines - h);
	int rows = more ? h - 1 : h;
	for (int y = 0; y < rows && top + y < t->view.n_lines; y++)
		draw_line(u, t, w, y, &t->view.lines[top + y]);
	if (more) {
		const char *msg = " more below: PgDn ";
		wattrset(w, A_REVERSE);
		mvwaddstr(w, h - 1, MAX(0, width - (int)strlen(msg) - 1), msg);
		wattrset(w, A_NORMAL);
	}
	wnoutrefresh(w);
}

/* Tab i's label on the bar into buf; returns its width in columns. */
static int bar_label(const ui *u, const tab *t, int i, char *buf, size_t cap)
{
	/* a long name is cut to leave room for the marks after it */
	size_t n = 0, name_cap = cap > 48 ? cap - 40 : cap;
	bfmt(buf, name_cap, &n, " %d:%s", i + 1, t->chat.name);
	if (tab_busy(t) && t->t_first == 0 && t->prefill_frac >= 0)
		bfmt(buf, cap, &n, " %.0f%%", 100 * t->prefill_frac);
	else if (tab_busy(t))
		bfmt(buf, cap, &n, " *");
	int level = tab_context_level(u, t);
	if (level) /* the context gauge warns before the overflow policy acts */
		bfmt(buf, cap, &n, " ctx %d/%d%s", tab_context_used(t), u->cm.n_ctx, level > 1 ? "!" : "");
	if (t->unread)
		bfmt(buf, cap, &n, " +");
	bfmt(buf, cap, &n, " ");
	return wrap_width(buf, n);
}

/* Columns tabs [a, b] take on the bar: labels, blanks, and 2 for each
 * "<"/">" mark of tabs left off. */
static int bar_need(const int *width, int n, int a, int b)
{
	int need = (a > 0 ? 2 : 0) + (b < n - 1 ? 2 : 0);
	for (int i = a; i <= b; i++)
		need += width[i] + 1;
	return need;
}

/* The tabs [*first, *last] the bar shows: as many as fit in cols columns,
 * always with the active one. */
static void bar_window(const int *width, int n, int active, int cols, int *first, int *last)
{
	int a = active, b = active;
	for (bool grew = true; grew;) {
		grew = false;
		if (b + 1 < n && bar_need(width, n, a, b + 1) <= cols)
			b++, grew = true;
		if (a > 0 && bar_need(width, n, a - 1, b) <= cols)
			a--, grew = true;
	}
	*first = a;
	*last = b;
}

void tab_draw_bar(ui *u)
{
	WINDOW *w = u->w_bar;
	werase(w);
	wmove(w, 0, 0);
	char(*label)[160] = xmalloc((size_t)u->n_tabs * sizeof *label);
	int *width = xmalloc((size_t)u->n_tabs * sizeof *width), total = 0;
	for (int i = 0; i < u->n_tabs; i++)
		total += (width[i] = bar_label(u, u->tabs[i], i, label[i], sizeof label[i])) + 1;
	int first = 0, last = u->n_tabs - 1;
	if (total > u->cols)
		bar_window(width, u->n_tabs, u->active, u->cols, &first, &last);
	if (first > 0)
		waddstr(w, "< ");
	for (int i = first; i <= last; i++) {
		tab *t = u->tabs[i];
		wattrset(w, (u->colors ? COLOR_PAIR(t->color + 1) : 0) | (i == u->active ? A_REVERSE | A_BOLD : 0));
		waddnstr(w, label[i], -1);
		wattrset(w, A_NORMAL);
		waddch(w, ' ');
	}
	if (last < u->n_tabs - 1)
		waddstr(w, ">");
	free(label);
	free(width);
	/* the model and the mode, and where --serve listens: the URL goes first
	 * when both do not fit (it is shown nowhere else for long) */
	char right[256];
	int x = getcurx(w);
	snprintf(right, sizeof right, " %s  %s%s%s ", u->model_name, tab_mode_name(u),
		 u->serve_url[0] ? "  API " : "", u->serve_url);
	if (u->serve_url[0] && x + (int)strlen(right) >= u->cols)
		snprintf(right, sizeof right, " API %s ", u->serve_url);
	int rw = (int)strlen(right);
	if (x + rw < u->cols) {
		wattrset(w, A_DIM);
		mvwaddstr(w, 0, u->cols - rw, right);
		wattrset(w, A_NORMAL);
	}
	wnoutrefresh(w);
}
