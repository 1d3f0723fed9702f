/* tests/fuzz/fuzz_md.c: the Markdown renderer (ui/md.h) and the wrapper it
 * feeds (ui/wrap.h) on arbitrary bytes.
 *
 * Input: byte 0 the width (1..256), byte 1 options (bit 0 UTF-8 glyphs,
 * bit 1 join the first paragraph to a label, bits 2-4 the indent); the rest
 * is the answer. Properties: no line is wider than the width (past the
 * indent the wrapper honours: less than half the width); every segment lies
 * inside the document's text; md_render and md_blocks count the same code
 * blocks, and each block's bytes lie inside the input, in order. */
#include "tests/fuzz/fuzz.h"

#include "ui/md.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	int width = 1 + fuzz_byte(&in);
	uint8_t opt = fuzz_byte(&in);
	const char *s = (const char *)in.p;
	size_t n = in.n;
	wrap_doc d = {0};
	wrap_para(&d, 5);
	wrap_text(&d, "bot> ", 5, 0);
	md_opts o = {.indent = (opt >> 2) & 7, .style0 = 0x100, .utf8 = opt & 1, .join_first = opt & 2,
		     .first_block = 1};
	int blocks = md_render(&d, s, n, &o);
	wrap_layout(&d, width);
	for (int i = 0; i < d.n_lines; i++) {
		const wrap_line *ln = &d.lines[i];
		int w = ln->indent;
		FUZZ_CHECK(ln->seg >= 0 && ln->seg + ln->n_segs <= d.n_segs);
		for (int k = 0; k < ln->n_segs; k++) {
			const wrap_seg *sg = &d.segs[ln->seg + k];
			FUZZ_CHECK(sg->off + sg->len <= d.n_text);
			FUZZ_CHECK(sg->style >= 0 && sg->style <= 0x100 + MD_ALL);
			w += wrap_width(d.text + sg->off, sg->len);
		}
		/* a line holds one character at least, which may be wide */
		FUZZ_CHECK(w <= width || (w <= ln->indent + 2 && ln->n_segs <= 1) || width < 2);
	}
	md_block b[16];
	int nb = md_blocks(s, n, b, 16);
	FUZZ_CHECK(nb == blocks);
	size_t end = 0;
	for (int i = 0; i < MIN(nb, 16); i++) {
		FUZZ_CHECK(b[i].off >= end && b[i].off + b[i].len <= n);
		FUZZ_CHECK(memchr(b[i].lang, '\0', sizeof b[i].lang) != NULL);
		end = b[i].off + b[i].len;
	}
	wrap_free(&d);
	return 0;
}
