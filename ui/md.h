/* ui/md.h: Markdown answers laid out for the terminal.
 *
 * md_render() reads an answer's Markdown line by line and adds it to a
 * wrap_doc (ui/wrap.h) as styled runs: headings, bold and italic, inline
 * code, links (the text, then the URL in brackets), bullet and numbered
 * lists (nested by their indentation), block quotes, rules, tables (kept as
 * written, so their columns stay aligned) and fenced code blocks (each line
 * its own paragraph, never joined with the next, going on under its own
 * indentation where it wraps, under a tag line naming the block's number
 * and language). Line
 * breaks inside a paragraph are kept, as chat models mean them. Text that
 * is not (yet) valid Markdown, such as an emphasis still streaming in, is
 * shown as written. A run's style is o->style0 plus MD_* flags.
 *
 * md_blocks() finds the fenced code blocks' contents (for /copy N). Both
 * are pure, total over any bytes, and allocate only through the wrap_doc;
 * no curses. One thread at a time per document. */
#ifndef PAGECHAT_MD_H
#define PAGECHAT_MD_H

#include "ui/wrap.h"

/* Style flags added to md_opts.style0. */
enum {
	MD_BOLD = 1,
	MD_ITALIC = 2,
	MD_CODE = 4,             /* inline code */
	MD_HEAD = 8,             /* a heading */
	MD_PRE = 16,             /* a line of a code block */
	MD_TAG = 32,             /* a code block's tag line */
	MD_QUOTE = 64,           /* a block quote */
	MD_MARK = 128,           /* a list bullet or number, a rule */
	MD_ALL = 255
};

typedef struct md_opts {
	int indent;              /* columns every paragraph starts at */
	int style0;              /* added to the MD_* flags (the plain text's style) */
	bool utf8;               /* bullets and rules may use non-ASCII glyphs */
	bool join_first;         /* the first paragraph continues the document's
	                            current one (after a label) */
	int first_block;         /* the number the first code block's tag shows */
} md_opts;

/* Adds s[len] to d. Returns the number of fenced code blocks it held. */
int md_render(wrap_doc *d, const char *s, size_t len, const md_opts *o);

typedef struct md_block {
	size_t off, len;         /* the code between the fences, in s */
	char lang[24];           /* the info string's first word, "" if none */
} md_block;

/* The fenced code blocks of s[len], in order, into out[cap] (the first cap
 * of them). Returns how many there are. An unclosed fence runs to the end. */
int md_blocks(const char *s, size_t len, md_block *out, int cap);

#endif
