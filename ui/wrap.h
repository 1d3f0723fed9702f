/* ui/wrap.h: word wrapping of styled UTF-8 text into screen lines.
 *
 * A document is a list of paragraphs, each a list of runs (text + a style
 * number the caller defines). wrap_layout() breaks paragraphs into lines of
 * at most `width` columns, at spaces where it can, inside words where it
 * must, and at every '\n'; continuation lines start `indent` columns in.
 * Widths come from wcwidth() (so the caller sets a UTF-8 locale): wide
 * characters take two columns, control characters none (a tab counts as one
 * space); bytes that are not UTF-8 take one column each. The document copies
 * its text, so the caller's buffers may change afterwards. Pure; no curses.
 * One thread at a time. */
#ifndef PAGECHAT_WRAP_H
#define PAGECHAT_WRAP_H

#include "base/base.h"

typedef struct wrap_seg {
	size_t off, len;         /* bytes of the document's text */
	int style;
} wrap_seg;

typedef struct wrap_line {
	int seg, n_segs;         /* segs[seg .. seg + n_segs) */
	int indent;              /* columns before the first segment */
} wrap_line;

typedef struct wrap_doc {
	char *text;              /* owned; all runs' bytes */
	size_t n_text, cap_text;
	wrap_seg *runs;          /* owned; [n_runs] the runs as added */
	int n_runs, cap_runs;
	struct wrap_para {
		int run;         /* its first run */
		int indent;      /* of its continuation lines */
	} *para;                 /* owned; [n_para] */
	int n_para, cap_para;
	wrap_seg *segs;          /* owned; [n_segs] after wrap_layout */
	int n_segs, cap_segs;
	wrap_line *lines;        /* owned; [n_lines] after wrap_layout */
	int n_lines, cap_lines;
	int width;               /* of the last layout */
} wrap_doc;

/* Empties d for a new document, keeping its buffers. A zeroed doc is empty. */
void wrap_clear(wrap_doc *d);
void wrap_free(wrap_doc *d);                 /* leaves it zeroed */
/* Starts a paragraph whose continuation lines begin indent columns in. */
void wrap_para(wrap_doc *d, int indent);
/* Adds s[len] (copied) with style to the current paragraph (starting one if
 * there is none). */
void wrap_text(wrap_doc *d, const char *s, size_t len, int style);
/* Breaks the paragraphs into lines of at most width columns (>= 1). An empty
 * paragraph is one empty line. */
void wrap_layout(wrap_doc *d, int width);

/* Decodes the character at s[0..len) (len > 0): *cp gets the code point
 * (U+FFFD for a byte that does not start valid UTF-8); returns its byte count. */
int wrap_char(const char *s, size_t len, uint32_t *cp);
/* Display columns of code point cp as wrap_layout counts them (0..2). */
int wrap_cp_width(uint32_t cp);
/* Display columns of s[len]. */
int wrap_width(const char *s, size_t len);

#endif
