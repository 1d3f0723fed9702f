/* tests/test_md.c: Markdown answers (ui/md.h) on a corpus of real-looking
 * model answers (tests/fuzz/corpus/md/answer-*: code in two languages,
 * nested lists, a table, long lines, wide characters, every block kind,
 * and broken Markdown as it streams in): each laid out at widths 10 to 200
 * fits the width; headings, emphasis, bullets, quotes and rules are drawn
 * as such, delimiters gone; code and table lines are kept as written (tabs
 * as spaces); code blocks are numbered and found again by md_blocks. */
#include "tests/run.h"
#include "tests/test.h"
#include "ui/md.h"

#include <locale.h>
#include <string.h>

#define CORPUS "tests/fuzz/corpus/md/"

static wrap_doc doc;
static char text[1 << 16];     /* the answer */
static size_t n_text;

/* Loads corpus file name (its 2 header bytes skipped). */
static void load(const char *name)
{
	static char buf[1 << 16];
	char path[256];
	snprintf(path, sizeof path, CORPUS "%s", name);
	slurp(path, buf, sizeof buf);
	n_text = strlen(buf + 2);
	memcpy(text, buf + 2, n_text + 1);
}

static int render(int width, bool utf8)
{
	wrap_clear(&doc);
	md_opts o = {.indent = 0, .style0 = 0, .utf8 = utf8, .first_block = 1};
	int n = md_render(&doc, text, n_text, &o);
	wrap_layout(&doc, width);
	return n;
}

/* Line i as text (its indent as blanks). */
static const char *line(int i, char *buf, size_t cap)
{
	const wrap_line *ln = &doc.lines[i];
	size_t n = (size_t)snprintf(buf, cap, "%*s", ln->indent, "");
	for (int k = 0; k < ln->n_segs && n < cap; k++) {
		const wrap_seg *s = &doc.segs[ln->seg + k];
		n += (size_t)snprintf(buf + n, cap - n, "%.*s", (int)s->len, doc.text + s->off);
	}
	return buf;
}

static bool has_line(const char *want)
{
	char buf[4096];
	for (int i = 0; i < doc.n_lines; i++)
		if (!strcmp(line(i, buf, sizeof buf), want))
			return true;
	return false;
}

#define LINE(want) CHECK_(has_line(want), "no line '%s'", want)

/* The style of the run holding text s (-1 if none holds it whole). */
static int style_of(const char *s)
{
	for (int i = 0; i < doc.n_runs; i++)
		if (doc.runs[i].len >= strlen(s) &&
		    memmem(doc.text + doc.runs[i].off, doc.runs[i].len, s, strlen(s)))
			return doc.runs[i].style;
	return -1;
}

static int widest(void)
{
	int most = 0;
	for (int i = 0; i < doc.n_lines; i++) {
		const wrap_line *ln = &doc.lines[i];
		int w = ln->indent;
		for (int k = 0; k < ln->n_segs; k++)
			w += wrap_width(doc.text + doc.segs[ln->seg + k].off, doc.segs[ln->seg + k].len);
		most = MAX(most, w);
	}
	return most;
}

static void test_widths(void)
{
	static const char *const names[] = {"answer-code", "answer-lists", "answer-table", "answer-long",
					    "answer-wide", "answer-mixed", "answer-edge"};
	static const int widths[] = {10, 20, 40, 80, 200};
	for (size_t i = 0; i < ARRAY_LEN(names); i++) {
		load(names[i]);
		for (size_t w = 0; w < ARRAY_LEN(widths); w++) {
			int blocks = render(widths[w], w % 2);
			CHECK_(widest() <= widths[w], "%s at %d columns: a line of %d", names[i], widths[w], widest());
			CHECK_EQ_INT(blocks, md_blocks(text, n_text, NULL, 0));
		}
	}
}

static void test_code(void)
{
	load("answer-code");
	CHECK_EQ_INT(render(200, true), 2);
	LINE("Here is a small function that reverses a string in Python:");
	CHECK_EQ_INT(style_of("Python"), MD_BOLD);
	CHECK_EQ_INT(style_of("list(reversed(xs))"), MD_CODE);
	LINE("[code 1] python");
	LINE("def reverse(s: str) -> str:");
	LINE("    return s[::-1]");
	LINE("print(reverse(\"hello\"))  # olleh");
	CHECK_EQ_INT(style_of("return s[::-1]"), MD_PRE);
	LINE("[code 2] c");
	LINE("        char t = s[i];"); /* two tabs, 4 columns each */
	md_block b[2];
	CHECK_EQ_INT(md_blocks(text, n_text, b, 2), 2);
	CHECK(!strcmp(b[0].lang, "python") && !strcmp(b[1].lang, "c"));
	CHECK(!strncmp(text + b[0].off, "def reverse", 11));
	CHECK(b[0].len > 20 && !strncmp(text + b[0].off + b[0].len - 33, "print(reverse(\"hello\"))  # olleh\n", 33));
	CHECK(!strncmp(text + b[1].off + b[1].len - 2, "}\n", 2));
	/* narrow: code lines wrap, never join */
	render(20, true);
	CHECK(!has_line("def reverse(s: str) -> str: \"\"\"Return"));
}

static void set_text(const char *s)
{
	n_text = strlen(s);
	memcpy(text, s, n_text + 1);
}

/* A code line too wide goes on under its own indentation (#40 item 16: the
 * continuation started at the left edge); links show their text and URL,
 * not the Markdown around them. */
static void test_wrapped_code_and_links(void)
{
	set_text("```c\nint f(void) {\n        if (x) { return compute(alpha, beta); }\n}\n```\n");
	render(24, true);
	LINE("        if (x) { return");
	LINE("        compute(alpha,");
	LINE("        beta); }");
	set_text("See [the docs](https://example.com/d) and <https://x.org/a>, [https://y.io](https://y.io),\n"
		 "- [ ] a task, [not a link] (x), [x](no space), a[1](2) list\n");
	render(200, true);
	LINE("See the docs (https://example.com/d) and https://x.org/a, https://y.io,");
	LINE("\u2022 [ ] a task, [not a link] (x), [x](no space), a1 (2) list");
}

static void test_lists(void)
{
	load("answer-lists");
	render(200, true);
	LINE("1. Install the dependencies:");
	LINE("  \u2022 gcc 12 or newer");
	LINE("    \u2022 on Debian: apt install libyaml-dev libncursesw5-dev");
	LINE("2. Build with make -j.");
	LINE("\u2022 a quantized model is much faster");
	LINE("\u2022 plus-sign bullets work too");
	CHECK_EQ_INT(style_of("libyaml"), MD_ITALIC);
	render(200, false);
	LINE("  * gcc 12 or newer");
	/* wrapped items continue under their text, not under the bullet */
	render(24, true);
	LINE("    \u2022 on Debian: apt");
	LINE("      install");
}

static void test_table(void)
{
	load("answer-table");
	render(80, true);
	LINE("| Model | Params | Context | Speed (tok/s) |");
	LINE("|:------|-------:|:-------:|--------------:|");
	LINE("| stories260K | 0.26M | 512 | 12000 |");
	LINE("The table above is approximate.");
}

static void test_wide(void)
{
	load("answer-wide");
	render(200, true);
	LINE("\u4f60\u597d\uff0c\u4e16\u754c");
	CHECK_EQ_INT(style_of("\u4f60\u597d"), MD_HEAD | MD_BOLD);
	LINE("\u3053\u308c\u306f\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002"
	     "\u5f37\u8abf\u3082\u4f7f\u3048\u307e\u3059\u3002");
	LINE("\u2022 Ti\u1ebfng Vi\u1ec7t: Lily \u0103n ph\u1edf \U0001f35c r\u1ea5t ngon");
	LINE("\u2502 \u5f15\u7528\uff1a\u4e00\u5207\u90fd\u597d\u3002");
	LINE("\u2502 second line of the quote");
	render(11, true);
	CHECK_(widest() <= 11, "wide text at 11 columns: %d", widest());
}

static void test_mixed(void)
{
	load("answer-mixed");
	CHECK_EQ_INT(render(200, true), 2);
	LINE("Title");
	LINE("Subtitle");
	LINE("Third level");
	LINE("Text with a *literal star* and snake_case_name and 2 * 3 * 4 = 24.");
	LINE("\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500\u2500");
	LINE("\u2502 A quote with bold inside");
	LINE("[code 1] bash");
	LINE("    echo \"$f\"");
	LINE("bold and italic and also bold and italic.");
	CHECK_EQ_INT(style_of("bold and italic"), MD_BOLD | MD_ITALIC);
	LINE("[code 2] js");
	LINE("console.log(\"**not bold**\")");
}

static void test_edge(void)
{
	load("answer-edge");
	render(80, true);
	LINE("**unclosed bold");
	LINE("`unclosed code");
	LINE("#no-space heading");
	LINE("####### seven");
	LINE("1) paren list");
	LINE("10. ten");
	LINE("four ticks ``` inside");
	CHECK_EQ_INT(md_blocks(text, n_text, NULL, 0), 2);
	/* nothing at all */
	wrap_clear(&doc);
	md_opts o = {.first_block = 1};
	CHECK_EQ_INT(md_render(&doc, "", 0, &o), 0);
}

int main(void)
{
	setlocale(LC_ALL, "C.UTF-8");
	test_widths();
	test_code();
	test_wrapped_code_and_links();
	test_lists();
	test_table();
	test_wide();
	test_mixed();
	test_edge();
	wrap_free(&doc);
	return TEST_DONE();
}
