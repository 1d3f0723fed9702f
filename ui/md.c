/* ui/md.c: Markdown answers laid out for the terminal (ui/md.h).
 *
 * A line-by-line block reader (fences, headings, rules, quotes, list items,
 * table rows, text) and, inside text, an inline reader for code spans,
 * emphasis and backslash escapes. Emphasis needs its closing delimiter on
 * the same line, searched for at most CLOSE_WINDOW bytes ahead and nested
 * at most MAX_DEPTH deep, so any input costs linear time and bounded stack. */
#include "ui/md.h"

#include <stdio.h>
#include <string.h>

#define CLOSE_WINDOW 1024
#define MAX_DEPTH 4
#define MAX_NEST 8               /* list levels shown as indentation */

enum kind { K_NONE, K_BLANK, K_TEXT, K_QUOTE, K_LIST, K_OTHER };

typedef struct md {
	wrap_doc *d;
	const md_opts *o;
	enum kind prev;          /* the block the last line belonged to */
	bool join;               /* the next paragraph continues the document's */
	int blocks;              /* code blocks seen */
} md;

static void put(md *m, const char *s, size_t n, int flags)
{
	if (n)
		wrap_text(m->d, s, n, m->o->style0 + flags);
}

static void spaces(md *m, int n)
{
	static const char sp[] = "                                ";
	while (n > 0) {
		int k = MIN(n, (int)sizeof sp - 1);
		put(m, sp, (size_t)k, 0);
		n -= k;
	}
}

/* A new paragraph whose first line starts at column first and whose
 * continuation lines at cont (the label's paragraph, if it may join). */
static void para(md *m, int first, int cont, bool may_join)
{
	bool join = m->join && may_join;
	m->join = false;
	if (join)
		return;
	wrap_para(m->d, cont);
	spaces(m, first);
}

/* ---- inline text ---- */

static void inline_text(md *m, const char *s, size_t n, int flags, int depth);

static bool is_punct(char c)
{
	return c && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c);
}

static bool is_alnum(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The closing run of k delimiters c for an opening at s[i] (run length k):
 * not after a space, not followed by another c; SIZE_MAX if none near. */
static size_t find_close(const char *s, size_t n, size_t from, char c, size_t k)
{
	size_t end = MIN(n, from + CLOSE_WINDOW);
	for (size_t j = from; j + k <= end; j++) {
		if (s[j] != c)
			continue;
		size_t r = 0;
		while (j + r < n && s[j + r] == c)
			r++;
		bool after_word = c != '_' || j + r >= n || !is_alnum(s[j + r]);
		if (r == k && j > from && s[j - 1] != ' ' && after_word)
			return j;
		j += r - 1;
	}
	return SIZE_MAX;
}

/* A code span at s[i] (a run of k backticks); returns the bytes it took,
 * 0 when it has no closing run. */
static size_t code_span(md *m, const char *s, size_t n, size_t i, int flags)
{
	size_t k = 0;
	while (i + k < n && s[i + k] == '`')
		k++;
	for (size_t j = i + k; j < n && j < i + k + CLOSE_WINDOW; j++) {
		if (s[j] != '`')
			continue;
		size_t r = 0;
		while (j + r < n && s[j + r] == '`')
			r++;
		if (r == k) {
			size_t a = i + k, b = j;
			if (b - a >= 2 && s[a] == ' ' && s[b - 1] == ' ')
				a++, b--;
			put(m, s + a, b - a, flags | MD_CODE);
			return j + r - i;
		}
		j += r - 1;
	}
	return 0;
}

/* Emphasis at s[i]; returns the bytes it took, 0 when it is literal. */
static size_t emphasis(md *m, const char *s, size_t n, size_t i, int flags, int depth)
{
	char c = s[i];
	size_t k = 0;
	while (i + k < n && s[i + k] == c)
		k++;
	if (k > 3 || depth >= MAX_DEPTH || i + k >= n || s[i + k] == ' ')
		return 0;
	if (c == '_' && i > 0 && is_alnum(s[i - 1]))
		return 0; /* snake_case_names stay as they are */
	size_t close = find_close(s, n, i + k, c, k);
	if (close == SIZE_MAX)
		return 0;
	int add = k == 1 ? MD_ITALIC : k == 2 ? MD_BOLD : MD_BOLD | MD_ITALIC;
	inline_text(m, s + i + k, close - i - k, flags | add, depth + 1);
	return close + k - i;
}

/* A link at s[i]: [text](url) shown as the text and the URL in brackets
 * (once where they are the same), <scheme://...> as the URL; returns the
 * bytes it took, 0 when it is no link (a task's "[ ]", a lone bracket). */
static size_t link(md *m, const char *s, size_t n, size_t i, int flags, int depth)
{
	size_t end = MIN(n, i + CLOSE_WINDOW);
	if (s[i] == '<') {
		size_t j = i + 1;
		while (j < end && s[j] != '>' && s[j] != ' ' && s[j] != '<')
			j++;
		if (j >= end || s[j] != '>' || !memmem(s + i + 1, j - i - 1, "://", 3))
			return 0;
		put(m, s + i + 1, j - i - 1, flags);
		return j + 1 - i;
	}
	if (depth >= MAX_DEPTH)
		return 0;
	size_t close = i + 1, nest = 0;
	for (; close < end; close++) {
		if (s[close] == '[')
			nest++;
		else if (s[close] == ']' && nest-- == 0)
			break;
	}
	if (close + 1 >= end || s[close] != ']' || s[close + 1] != '(' || close == i + 1)
		return 0;
	size_t u = close + 2, v = u;
	while (v < end && s[v] != ')' && s[v] != ' ')
		v++;
	if (v >= end || s[v] != ')' || v == u)
		return 0;
	size_t tn = close - i - 1;
	inline_text(m, s + i + 1, tn, flags, depth + 1);
	if (tn != v - u || memcmp(s + i + 1, s + u, tn)) {
		put(m, " (", 2, flags);
		put(m, s + u, v - u, flags);
		put(m, ")", 1, flags);
	}
	return v + 1 - i;
}

static void inline_text(md *m, const char *s, size_t n, int flags, int depth)
{
	size_t run = 0, i = 0;
	while (i < n) {
		char c = s[i];
		size_t took = 0;
		if (c == '\\' && i + 1 < n && is_punct(s[i + 1])) {
			put(m, s + run, i - run, flags);
			run = i + 1; /* the escaped character starts the next run */
			i += 2;
			continue;
		}
		if (c == '`' || c == '*' || c == '_') {
			put(m, s + run, i - run, flags);
			run = i;
			took = c == '`' ? code_span(m, s, n, i, flags) : emphasis(m, s, n, i, flags, depth);
		} else if (c == '[' || c == '<') {
			put(m, s + run, i - run, flags);
			run = i;
			took = link(m, s, n, i, flags, depth);
		}
		if (took) {
			i += took;
			run = i;
		} else if (c == '`' || c == '*' || c == '_') {
			while (i < n && s[i] == c) /* a literal run */
				i++;
		} else {
			i++;
		}
	}
	put(m, s + run, n - run, flags);
}

/* ---- blocks ---- */

/* Bytes at the start of s[n] that are (in: true) or are not in set. */
static size_t span(const char *s, size_t n, const char *set, bool in)
{
	size_t i = 0;
	while (i < n && (strchr(set, s[i]) != NULL && s[i] != '\0') == in)
		i++;
	return i;
}

/* The rest of s[n] is blanks only (a closing fence's tail). */
static bool blank_tail(const char *s, size_t n)
{
	return span(s, n, " \r", true) == n;
}

/* Leading columns of a line (a tab counts 4) and where its text starts. */
static int lead(const char *s, size_t n, size_t *at)
{
	int col = 0;
	size_t i = 0;
	for (; i < n && (s[i] == ' ' || s[i] == '\t'); i++)
		col += s[i] == '\t' ? 4 : 1;
	*at = i;
	return col;
}

/* The fence at the line's text (3+ backticks or tildes), 0 if none. */
static size_t fence_len(const char *s, size_t n, char *ch)
{
	size_t k = 0;
	if (n == 0 || (s[0] != '`' && s[0] != '~'))
		return 0;
	while (k < n && s[k] == s[0])
		k++;
	if (k < 3 || (s[0] == '`' && memchr(s + k, '`', n - k)))
		return 0;
	*ch = s[0];
	return k;
}

static bool is_rule(const char *s, size_t n)
{
	if (n < 3 || (s[0] != '-' && s[0] != '*' && s[0] != '_'))
		return false;
	int marks = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == s[0])
			marks++;
		else if (s[i] != ' ')
			return false;
	}
	return marks >= 3;
}

/* A list marker at s ("- ", "* ", "+ ", "12. ", "3) "): its length, else 0. */
static size_t list_marker(const char *s, size_t n)
{
	if (n >= 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && s[1] == ' ')
		return 2;
	size_t d = 0;
	while (d < n && d < 9 && s[d] >= '0' && s[d] <= '9')
		d++;
	if (d > 0 && d + 1 < n && (s[d] == '.' || s[d] == ')') && s[d + 1] == ' ')
		return d + 2;
	return 0;
}

/* A code block's tag line: its number (for /copy N) and language. */
static void fence_open(md *m, const char *info, size_t n)
{
	size_t i = 0;
	while (i < n && info[i] == ' ')
		i++;
	size_t w = i;
	while (w < n && w - i < 20 && info[w] != ' ' && info[w] != '`')
		w++;
	char tag[64];
	size_t k = 0;
	bfmt(tag, sizeof tag, &k, "[code %d]%s%.*s", m->o->first_block + m->blocks, w > i ? " " : "", (int)(w - i),
	     info + i);
	m->blocks++;
	para(m, m->o->indent, m->o->indent, false);
	put(m, tag, k, MD_TAG);
}

/* A line inside a code block: as written, tabs as 4 spaces; a line too
 * wide goes on under its own indentation, so the code's shape stays. */
static void code_line(md *m, const char *s, size_t n)
{
	int lead = 0;
	for (size_t i = 0; i < n && (s[i] == ' ' || s[i] == '\t'); i++)
		lead += s[i] == '\t' ? 4 : 1;
	para(m, m->o->indent, m->o->indent + lead, false);
	size_t run = 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\t' || s[i] == '\r') {
			put(m, s + run, i - run, MD_PRE);
			if (s[i] == '\t')
				put(m, "    ", 4, MD_PRE);
			run = i + 1;
		}
	put(m, s + run, n - run, MD_PRE);
	if (n == 0)
		put(m, " ", 1, MD_PRE);
}

static void heading(md *m, const char *s, size_t n)
{
	size_t h = 0;
	while (h < n && s[h] == '#')
		h++;
	size_t a = h;
	while (a < n && s[a] == ' ')
		a++;
	while (n > a && (s[n - 1] == '#' || s[n - 1] == ' '))
		n--; /* closing #s */
	para(m, m->o->indent, m->o->indent, true);
	inline_text(m, s + a, n - a, MD_HEAD | MD_BOLD, 0);
}

static void rule(md *m)
{
	para(m, m->o->indent, m->o->indent, false);
	const char *r = m->o->utf8 ? "\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500" : "------------";
	put(m, r, strlen(r), MD_MARK);
}

static void quote(md *m, const char *s, size_t n)
{
	size_t a = 1;
	if (a < n && s[a] == ' ')
		a++;
	const char *bar = m->o->utf8 ? "\u2502 " : "> ";
	/* each line of the quote its own paragraph, so each gets the bar;
	 * a long one wraps under its text */
	para(m, m->o->indent, m->o->indent + 2, false);
	put(m, bar, strlen(bar), MD_QUOTE | MD_MARK);
	inline_text(m, s + a, n - a, MD_QUOTE, 0);
}

static void list_item(md *m, int col, const char *s, size_t n, size_t mk)
{
	int nest = MIN(col / 2, MAX_NEST);
	int first = m->o->indent + 2 * nest;
	bool bullet = s[0] == '-' || s[0] == '*' || s[0] == '+';
	const char *b = m->o->utf8 ? "\u2022 " : "* ";
	int mw = bullet ? 2 : (int)mk;
	para(m, first, first + mw, false);
	if (bullet)
		put(m, b, strlen(b), MD_MARK);
	else
		put(m, s, mk, MD_MARK);
	inline_text(m, s + mk, n - mk, 0, 0);
}

/* One line outside code blocks. */
static enum kind block_line(md *m, const char *s, size_t n)
{
	size_t at;
	int col = lead(s, n, &at);
	const char *t = s + at;
	size_t tn = n - at;
	size_t mk;
	if (tn == 0 || (tn == 1 && t[0] == '\r'))
		return K_BLANK;
	if (tn && t[tn - 1] == '\r')
		tn--;
	size_t hashes = span(t, tn, "#", true);
	if (col <= 3 && hashes >= 1 && hashes <= 6 && (hashes == tn || t[hashes] == ' ')) {
		heading(m, t, tn);
	} else if (col <= 3 && is_rule(t, tn)) {
		rule(m);
	} else if (col <= 3 && t[0] == '>') {
		quote(m, t, tn);
		return K_QUOTE;
	} else if ((mk = list_marker(t, tn)) > 0) {
		list_item(m, col, t, tn, mk);
		return K_LIST;
	} else if (t[0] == '|') {
		para(m, m->o->indent, m->o->indent, false);
		put(m, t, tn, 0); /* a table row as written: its columns stay aligned */
	} else if (m->prev == K_TEXT || m->prev == K_LIST) {
		put(m, "\n", 1, 0);
		inline_text(m, t, tn, 0, 0);
		return m->prev;
	} else {
		para(m, m->o->indent, m->o->indent, true);
		inline_text(m, t, tn, 0, 0);
		return K_TEXT;
	}
	return K_OTHER;
}

int md_render(wrap_doc *d, const char *s, size_t len, const md_opts *o)
{
	md m = {.d = d, .o = o, .prev = K_NONE, .join = o->join_first};
	char fc = 0;
	size_t flen = 0; /* the open fence's length, 0 outside code */
	for (size_t ls = 0; ls < len || (ls == len && len == 0);) {
		size_t le = ls;
		while (le < len && s[le] != '\n')
			le++;
		const char *l = s + ls;
		size_t n = le - ls, at;
		int col = lead(l, n, &at);
		char c;
		size_t f = col <= 3 ? fence_len(l + at, n - at, &c) : 0;
		if (flen) {
			if (f >= flen && c == fc && blank_tail(l + at + f, n - at - f))
				flen = 0, m.prev = K_OTHER;
			else
				code_line(&m, l, n);
		} else if (f) {
			flen = f, fc = c;
			fence_open(&m, l + at + f, n - at - f);
		} else {
			enum kind k = block_line(&m, l, n);
			if (k == K_BLANK && m.prev != K_BLANK && m.prev != K_NONE) {
				wrap_para(d, 0); /* one blank line between blocks */
				m.join = false;
			}
			m.prev = k;
		}
		if (le >= len)
			break;
		ls = le + 1;
	}
	return m.blocks;
}

int md_blocks(const char *s, size_t len, md_block *out, int cap)
{
	int nb = 0;
	char fc = 0;
	size_t flen = 0;
	for (size_t ls = 0; ls < len;) {
		size_t le = ls;
		while (le < len && s[le] != '\n')
			le++;
		size_t n = le - ls, at;
		int col = lead(s + ls, n, &at);
		char c;
		size_t f = col <= 3 ? fence_len(s + ls + at, n - at, &c) : 0;
		size_t next = le < len ? le + 1 : len;
		if (flen && f >= flen && c == fc && blank_tail(s + ls + at + f, n - at - f)) {
			flen = 0;
			if (nb <= cap)
				out[nb - 1].len = ls - out[nb - 1].off;
		} else if (!flen && f) {
			flen = f, fc = c;
			if (nb < cap) {
				const char *info = s + ls + at + f;
				size_t in = n - at - f, i = span(info, in, " ", true);
				size_t w = span(info + i, in - i, " `\r", false);
				out[nb] = (md_block){.off = next, .len = len - next};
				snprintf(out[nb].lang, sizeof out[nb].lang, "%.*s", (int)MIN(w, 23), info + i);
			}
			nb++;
		}
		ls = next;
		if (le >= len)
			break;
	}
	return nb;
}
