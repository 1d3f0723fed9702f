/* models/json.c: recursive-descent JSON (RFC 8259) with an arena per document. */
#include "models/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct json_doc {
	json root;
	void **allocs;           /* owned: every block handed out */
	size_t n_allocs, cap_allocs;
};

typedef struct parser {
	const char *s;
	size_t pos, len;
	json_doc *doc;
	err *e;
	int depth;
	size_t n_values;         /* parsed so far (JSON_MAX_VALUES) */
} parser;

static void *doc_alloc(json_doc *d, size_t n)
{
	xgrow_size(&d->allocs, &d->cap_allocs, d->n_allocs + 1, sizeof *d->allocs);
	return d->allocs[d->n_allocs++] = xcalloc(1, n ? n : 1);
}

static int fail_at(parser *p, const char *what)
{
	int line = 1, col = 1;
	for (size_t i = 0; i < p->pos && i < p->len; i++) {
		if (p->s[i] == '\n')
			line++, col = 1;
		else
			col++;
	}
	err_set(p->e, "line %d, column %d: %s", line, col, what);
	return -1;
}

static void skip_ws(parser *p)
{
	while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
		p->pos++;
}

static int peek(parser *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int parse_value(parser *p, json *out);

static int hex4(parser *p, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		int c = peek(p);
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return fail_at(p, "bad \\u escape (4 hex digits expected)");
		*v = *v * 16 + (unsigned)d;
		p->pos++;
	}
	return 0;
}

static size_t put_utf8(char *out, unsigned cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int parse_escape(parser *p, char *out, size_t *n)
{
	int c = peek(p);
	p->pos++;
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k = c > 0 ? strchr(from, c) : NULL;
	if (k && *k) {
		out[(*n)++] = to[k - from];
		return 0;
	}
	if (c != 'u')
		return p->pos--, fail_at(p, "bad escape in string");
	unsigned cp, lo;
	if (hex4(p, &cp))
		return -1;
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (peek(p) != '\\' || p->pos + 1 >= p->len || p->s[p->pos + 1] != 'u')
			return fail_at(p, "unpaired surrogate in \\u escape");
		p->pos += 2;
		if (hex4(p, &lo))
			return -1;
		if (lo < 0xdc00 || lo >= 0xe000)
			return fail_at(p, "bad low surrogate in \\u escape");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	} else if (cp >= 0xdc00 && cp < 0xe000) {
		return fail_at(p, "unpaired surrogate in \\u escape");
	}
	*n += put_utf8(out + *n, cp);
	return 0;
}

static int parse_string(parser *p, char **out, size_t *out_len)
{
	p->pos++; /* opening quote */
	size_t start = p->pos;
	/* decoded text is never longer than the source */
	size_t end = start;
	while (end < p->len && p->s[end] != '"')
		end += p->s[end] == '\\' ? 2 : 1;
	if (end >= p->len)
		return fail_at(p, "unterminated string");
	char *buf = doc_alloc(p->doc, end - start + 1);
	size_t n = 0;
	while (peek(p) != '"') {
		int c = peek(p);
		if (c < 0x20)
			return fail_at(p, "control character in string (escape it)");
		if (c == '\\') {
			p->pos++;
			if (parse_escape(p, buf, &n))
				return -1;
			continue;
		}
		buf[n++] = (char)c;
		p->pos++;
	}
	p->pos++;
	buf[n] = '\0';
	*out = buf;
	*out_len = n;
	return 0;
}

static int parse_number(parser *p, json *out)
{
	size_t start = p->pos;
	if (peek(p) == '-')
		p->pos++;
	if (peek(p) == '0')
		p->pos++;
	else if (peek(p) >= '1' && peek(p) <= '9')
		while (peek(p) >= '0' && peek(p) <= '9')
			p->pos++;
	else
		return fail_at(p, "bad number");
	if (peek(p) == '.') {
		p->pos++;
		if (!(peek(p) >= '0' && peek(p) <= '9'))
			return fail_at(p, "bad number (digit expected after '.')");
		while (peek(p) >= '0' && peek(p) <= '9')
			p->pos++;
	}
	if (peek(p) == 'e' || peek(p) == 'E') {
		p->pos++;
		if (peek(p) == '+' || peek(p) == '-')
			p->pos++;
		if (!(peek(p) >= '0' && peek(p) <= '9'))
			return fail_at(p, "bad number exponent");
		while (peek(p) >= '0' && peek(p) <= '9')
			p->pos++;
	}
	char tmp[64];
	size_t n = p->pos - start;
	if (n >= sizeof tmp)
		return fail_at(p, "number too long");
	memcpy(tmp, p->s + start, n);
	tmp[n] = '\0';
	out->type = JSON_NUM;
	out->num = strtod(tmp, NULL);
	if (!isfinite(out->num))
		return fail_at(p, "number out of range");
	return 0;
}

static int parse_literal(parser *p, json *out)
{
	static const struct { const char *word; enum json_type t; bool b; } lits[] = {
		{"true", JSON_BOOL, true}, {"false", JSON_BOOL, false}, {"null", JSON_NULL, false}};
	for (size_t i = 0; i < ARRAY_LEN(lits); i++) {
		size_t n = strlen(lits[i].word);
		if (p->len - p->pos >= n && !memcmp(p->s + p->pos, lits[i].word, n)) {
			p->pos += n;
			out->type = lits[i].t;
			out->b = lits[i].b;
			return 0;
		}
	}
	return fail_at(p, "unexpected character (a value was expected)");
}

/* Makes room for element n of a block of the arena (elements of size bytes,
 * capacity *cap, doubled when full). The block is reallocated where the arena
 * lists it (slot *at, set when the block is first made), so a document holds
 * no dead copies. */
static void *grow(json_doc *d, void *block, size_t n, size_t *cap, size_t size, size_t *at)
{
	if (n < *cap)
		return block;
	*cap = *cap ? 2 * *cap : 1;
	if (!block) {
		*at = d->n_allocs;
		return doc_alloc(d, *cap * size);
	}
	return d->allocs[*at] = xrealloc(block, *cap * size);
}

static int parse_container(parser *p, json *out, bool is_obj)
{
	if (++p->depth > JSON_MAX_DEPTH)
		return fail_at(p, "nesting too deep");
	p->pos++;
	out->type = is_obj ? JSON_OBJ : JSON_ARR;
	size_t cap = 0, kcap = 0, at = 0, kat = 0;
	char close = is_obj ? '}' : ']';
	skip_ws(p);
	if (peek(p) == close) {
		p->pos++;
		p->depth--;
		return 0;
	}
	for (;;) {
		skip_ws(p);
		if (is_obj) {
			if (peek(p) != '"')
				return fail_at(p, "object key (a string) expected");
			out->keys = grow(p->doc, out->keys, out->n, &kcap, sizeof *out->keys, &kat);
			size_t klen;
			if (parse_string(p, &out->keys[out->n], &klen))
				return -1;
			skip_ws(p);
			if (peek(p) != ':')
				return fail_at(p, "':' expected after object key");
			p->pos++;
		}
		out->items = grow(p->doc, out->items, out->n, &cap, sizeof *out->items, &at);
		if (parse_value(p, &out->items[out->n]))
			return -1;
		out->n++;
		skip_ws(p);
		if (peek(p) == ',') {
			p->pos++;
			continue;
		}
		if (peek(p) == close) {
			p->pos++;
			p->depth--;
			return 0;
		}
		return fail_at(p, is_obj ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int parse_value(parser *p, json *out)
{
	skip_ws(p);
	int c = peek(p);
	memset(out, 0, sizeof *out);
	if (c < 0)
		return fail_at(p, "unexpected end of input");
	if (++p->n_values > JSON_MAX_VALUES) {
		char msg[64];
		snprintf(msg, sizeof msg, "more than %d values in one document", JSON_MAX_VALUES);
		return fail_at(p, msg);
	}
	if (c == '{' || c == '[')
		return parse_container(p, out, c == '{');
	if (c == '"') {
		out->type = JSON_STR;
		return parse_string(p, &out->str, &out->len);
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return parse_number(p, out);
	return parse_literal(p, out);
}

json_doc *json_parse(const char *text, size_t len, err *e)
{
	json_doc *d = xcalloc(1, sizeof *d);
	parser p = {.s = text, .len = len, .doc = d, .e = e};
	if (parse_value(&p, &d->root))
		goto bad;
	skip_ws(&p);
	if (p.pos != len) {
		fail_at(&p, "trailing characters after the value");
		goto bad;
	}
	return d;
bad:
	json_free(d);
	return NULL;
}

void json_free(json_doc *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n_allocs; i++)
		free(d->allocs[i]);
	free(d->allocs);
	free(d);
}

const json *json_root(const json_doc *d)
{
	return &d->root;
}

const json *json_get(const json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}

static void put(char **buf, size_t *n, size_t *cap, const char *s, size_t len)
{
	xgrow_size(buf, cap, *n + len + 1, 1);
	memcpy(*buf + *n, s, len);
	*n += len;
	(*buf)[*n] = '\0';
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t left)
{
	unsigned c = s[0];
	size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
	if (n == 0 || n > left)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 2 && c < 0xc2) || (n == 3 && c == 0xe0 && s[1] < 0xa0) ||
	    (n == 3 && c == 0xed && s[1] >= 0xa0) || (n == 4 && c == 0xf0 && s[1] < 0x90) ||
	    (n == 4 && (c > 0xf4 || (c == 0xf4 && s[1] >= 0x90))))
		return 0;
	return n;
}

void json_put_str(char **buf, size_t *n, size_t *cap, const char *s, size_t len)
{
	put(buf, n, cap, "\"", 1);
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\', esc[1] = (char)c;
			put(buf, n, cap, esc, 2);
			i++;
		} else if (c < 0x20) {
			const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
			if (named) {
				put(buf, n, cap, named, 2);
			} else {
				size_t k = 0;
				bfmt(esc, sizeof esc, &k, "\\u%04x", c);
				put(buf, n, cap, esc, k);
			}
			i++;
		} else {
			size_t k = utf8_len((const unsigned char *)s + i, len - i);
			if (k)
				put(buf, n, cap, s + i, k), i += k;
			else
				put(buf, n, cap, "\xef\xbf\xbd", 3), i++;
		}
	}
	put(buf, n, cap, "\"", 1);
}
