/* ui/wrap.c: greedy word wrap over styled runs. */
#include "ui/wrap.h"

#include <stdlib.h>
#include <string.h>
#include <wchar.h>

void wrap_clear(wrap_doc *d)
{
	d->n_text = 0;
	d->n_runs = d->n_para = d->n_segs = d->n_lines = 0;
}

void wrap_free(wrap_doc *d)
{
	free(d->text);
	free(d->runs);
	free(d->para);
	free(d->segs);
	free(d->lines);
	memset(d, 0, sizeof *d);
}

#define GROW(p, n, cap) xgrow(&(p), &(cap), (int64_t)(n) + 1, sizeof *(p))

void wrap_para(wrap_doc *d, int indent)
{
	GROW(d->para, d->n_para, d->cap_para);
	d->para[d->n_para++] = (struct wrap_para){d->n_runs, MAX(0, indent)};
}

void wrap_text(wrap_doc *d, const char *s, size_t len, int style)
{
	if (d->n_para == 0)
		wrap_para(d, 0);
	xgrow_size(&d->text, &d->cap_text, d->n_text + len + 1, 1);
	memcpy(d->text + d->n_text, s, len);
	GROW(d->runs, d->n_runs, d->cap_runs);
	d->runs[d->n_runs++] = (wrap_seg){d->n_text, len, style};
	d->n_text += len;
	d->text[d->n_text] = '\0';
}

/* ---- characters ---- */

int wrap_char(const char *s, size_t len, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	int n = u[0] < 0x80 ? 1 : u[0] >= 0xC2 && u[0] < 0xE0 ? 2 : u[0] >= 0xE0 && u[0] < 0xF0 ? 3
		: u[0] >= 0xF0 && u[0] < 0xF5 ? 4 : 0;
	if (n == 1) {
		*cp = u[0];
		return 1;
	}
	if (n == 0 || (size_t)n > len)
		goto bad;
	uint32_t c = u[0] & (0x7F >> n);
	for (int i = 1; i < n; i++) {
		if ((u[i] & 0xC0) != 0x80)
			goto bad;
		c = c << 6 | (u[i] & 0x3F);
	}
	/* overlong forms, surrogates and values past U+10FFFF are not UTF-8 */
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
	    (c >= 0xD800 && c <= 0xDFFF))
		goto bad;
	*cp = c;
	return n;
bad:
	*cp = 0xFFFD;
	return 1;
}

int wrap_cp_width(uint32_t cp)
{
	if (cp == '\t')
		return 1;
	if (cp < 0x20 || cp == 0x7F)
		return 0;
	int w = wcwidth((wchar_t)cp);
	return w < 0 ? (cp < 0xA0 ? 0 : 1) : w;
}

int wrap_width(const char *s, size_t len)
{
	int w = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		i += (size_t)wrap_char(s + i, len - i, &cp);
		w += wrap_cp_width(cp);
	}
	return w;
}

/* ---- layout ---- */

/* One character of a paragraph being laid out. */
typedef struct cell {
	size_t off;              /* byte offset in d->text */
	int run;                 /* index into d->runs */
	uint8_t bytes, width;
	bool space, newline;
} cell;

typedef struct layout {
	wrap_doc *d;
	cell *cells;             /* scratch */
	size_t n_cells, cap_cells;
} layout;

static void collect(layout *L, int run0, int run1)
{
	L->n_cells = 0;
	for (int r = run0; r < run1; r++) {
		const wrap_seg *run = &L->d->runs[r];
		for (size_t i = 0; i < run->len;) {
			uint32_t cp;
			int n = wrap_char(L->d->text + run->off + i, run->len - i, &cp);
			xgrow_size(&L->cells, &L->cap_cells, L->n_cells + 1, sizeof *L->cells);
			L->cells[L->n_cells++] = (cell){
				.off = run->off + i, .run = r, .bytes = (uint8_t)n,
				.width = (uint8_t)wrap_cp_width(cp), .space = cp == ' ' || cp == '\t',
				.newline = cp == '\n',
			};
			i += (size_t)n;
		}
	}
}

/* Emits cells [a, b) as one line: segments split where the run changes. */
static void emit(layout *L, size_t a, size_t b, int indent)
{
	wrap_doc *d = L->d;
	GROW(d->lines, d->n_lines, d->cap_lines);
	wrap_line *ln = &d->lines[d->n_lines++];
	*ln = (wrap_line){.seg = d->n_segs, .n_segs = 0, .indent = indent};
	for (size_t i = a; i < b; i++) {
		const cell *c = &L->cells[i];
		wrap_seg *last = ln->n_segs ? &d->segs[d->n_segs - 1] : NULL;
		if (last && last->style == d->runs[c->run].style && last->off + last->len == c->off) {
			last->len += c->bytes;
			continue;
		}
		GROW(d->segs, d->n_segs, d->cap_segs);
		d->segs[d->n_segs++] = (wrap_seg){c->off, c->bytes, d->runs[c->run].style};
		ln->n_segs++;
	}
}

static void layout_para(layout *L, int width, int indent)
{
	size_t start = 0, space = SIZE_MAX;
	int col = 0, lead = 0; /* lead: the current line's indent */
	for (size_t i = 0; i < L->n_cells; i++) {
		const cell *c = &L->cells[i];
		if (c->newline) {
			emit(L, start, i, lead);
			start = i + 1, space = SIZE_MAX, lead = col = indent;
			continue;
		}
		/* a break at an earlier space can leave the word's start too wide
		 * for the next line as well: then break again, inside the word */
		while (col + c->width > width && i > start) {
			/* break at this space, else at the last one, else inside the word */
			size_t cut = c->space ? i : space != SIZE_MAX && space > start ? space : i;
			emit(L, start, cut, lead);
			/* the space broken at is dropped */
			start = L->cells[cut].space ? cut + 1 : cut;
			space = SIZE_MAX;
			lead = col = indent;
			if (start > i)
				break;
			for (size_t k = start; k < i; k++)
				col += L->cells[k].width;
		}
		if (start > i)
			continue;
		col += c->width;
		if (c->space)
			space = i;
	}
	emit(L, start, L->n_cells, lead);
}

void wrap_layout(wrap_doc *d, int width)
{
	layout L = {.d = d};
	d->n_segs = d->n_lines = 0;
	d->width = width = MAX(1, width);
	for (int p = 0; p < d->n_para; p++) {
		int run1 = p + 1 < d->n_para ? d->para[p + 1].run : d->n_runs;
		collect(&L, d->para[p].run, run1);
		int indent = d->para[p].indent < width / 2 ? d->para[p].indent : 0;
		layout_para(&L, width, indent);
	}
	free(L.cells);
}
