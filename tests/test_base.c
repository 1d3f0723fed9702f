/* tests/test_base.c: base/base.h's printing into a fixed buffer (bfmt):
 * a run of calls never writes past the buffer whatever is printed, a cut
 * never splits a UTF-8 character, and the result says when text was cut.
 * The buffers sit between guard bytes that must stay untouched; the
 * expected texts are written out by hand. */
#include "tests/test.h"

#include "base/base.h"

#include <string.h>

#define GUARD 0x5a

/* buf[1..cap] inside guards at [0] and [cap + 1]. */
static bool guards_ok(const unsigned char *g, size_t cap)
{
	return g[0] == GUARD && g[cap + 1] == GUARD;
}

static void test_fits(void)
{
	char buf[32];
	size_t at = 0;
	CHECK(bfmt(buf, sizeof buf, &at, "[%d tok, %s", 12, "stop"));
	CHECK(bfmt(buf, sizeof buf, &at, "]"));
	CHECK(!strcmp(buf, "[12 tok, stop]"));
	CHECK_EQ_INT(at, 14);
}

/* The sum of snprintf results that add_meta once made: each call here may
 * be cut, and the buffer's end is never passed. */
static void test_run_of_calls(void)
{
	unsigned char g[16 + 2];
	memset(g, GUARD, sizeof g);
	char *buf = (char *)g + 1;
	size_t at = 0, cap = 16;
	CHECK(bfmt(buf, cap, &at, "[%d tok", 5));
	CHECK(!bfmt(buf, cap, &at, ", TTFT %.0f ms", 1e120));
	CHECK_EQ_INT(at, 15);
	CHECK(!strcmp(buf, "[5 tok, TTFT 99")); /* 1e120 prints as 9999...8e119 */
	CHECK(!bfmt(buf, cap, &at, "]"));
	CHECK_EQ_INT(at, 15);
	CHECK_EQ_INT(strlen(buf), 15);
	CHECK(guards_ok(g, cap));
}

static void test_utf8_cut(void)
{
	/* "é" is 2 bytes, "€" 3, "😀" 4: a cut lands before a whole character */
	static const struct {
		const char *text;
		size_t cap;
		const char *want;
	} cases[] = {
		{"ab\xc3\xa9", 4, "ab"},            /* é would need bytes 3 and 4 */
		{"ab\xc3\xa9", 5, "ab\xc3\xa9"},
		{"a\xe2\x82\xac", 3, "a"},          /* € cut after its first byte */
		{"a\xe2\x82\xac", 4, "a"},          /* ... after its second */
		{"a\xf0\x9f\x98\x80z", 5, "a"},     /* 😀 after its third */
		{"a\xf0\x9f\x98\x80z", 6, "a\xf0\x9f\x98\x80"},
		{"\x80\x80\x80\x80", 3, "\x80\x80"}, /* not UTF-8: cut where it falls */
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		unsigned char g[16 + 2];
		memset(g, GUARD, sizeof g);
		char *buf = (char *)g + 1;
		size_t at = 0, cap = cases[i].cap;
		bool whole = bfmt(buf, cap, &at, "%s", cases[i].text);
		CHECK_(!whole == (strlen(cases[i].text) >= cap), "case %zu: cut reported %d", i, !whole);
		CHECK_(!strcmp(buf, cases[i].want), "case %zu: '%s', want '%s'", i, buf, cases[i].want);
		CHECK_EQ_INT(at, strlen(cases[i].want));
		CHECK(guards_ok(g, cap));
	}
}

/* A position already at (or past) the end, and a zero capacity. */
static void test_edges(void)
{
	unsigned char g[8 + 2];
	memset(g, GUARD, sizeof g);
	char *buf = (char *)g + 1;
	size_t at = 0;
	CHECK(!bfmt(buf, 8, &at, "%s", "0123456789"));
	CHECK(!strcmp(buf, "0123456"));
	at = 100;
	CHECK(!bfmt(buf, 8, &at, "x"));
	CHECK_EQ_INT(at, 7);
	CHECK(!strcmp(buf, "0123456"));
	CHECK(guards_ok(g, 8));
	at = 0;
	CHECK(!bfmt(buf, 0, &at, "x"));
	CHECK_EQ_INT(at, 0);
	CHECK(guards_ok(g, 8) && buf[0] == '0');
	at = 0;
	CHECK(bfmt(buf, 8, &at, "%s", ""));
	CHECK_EQ_INT(at, 0);
	CHECK(buf[0] == '\0');
}

int main(void)
{
	test_fits();
	test_run_of_calls();
	test_utf8_cut();
	test_edges();
	return TEST_DONE();
}
