/* models/json.h: a small strict JSON reader and a string escaper.
 *
 * json_parse() builds a tree in one arena owned by the returned json_doc:
 * objects keep their keys in file order; strings are decoded UTF-8 (with \u
 * escapes and surrogate pairs), NUL bytes allowed (use len). Depth, size and
 * numbers are checked; errors give line:column. Used for batch requests,
 * conversations and saved chats. A document may nest JSON_MAX_DEPTH deep and
 * hold JSON_MAX_VALUES values, so whatever the text, a document takes at
 * most about 110 bytes a value (115 MiB at the limit) besides its strings,
 * which are never longer than the text. Pure functions; any thread. */
#ifndef PAGECHAT_JSON_H
#define PAGECHAT_JSON_H

#include "base/base.h"

#define JSON_MAX_DEPTH  64           /* nested arrays and objects */
#define JSON_MAX_VALUES (1 << 20)    /* values of all kinds in one document */

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

typedef struct json json;
struct json {
	enum json_type type;
	bool b;
	double num;
	char *str;               /* JSON_STR: decoded, NUL-terminated; len below */
	size_t len;
	json *items;             /* JSON_ARR / JSON_OBJ: [n] children */
	char **keys;             /* JSON_OBJ: [n] keys (NUL-terminated) */
	size_t n;
};

typedef struct json_doc json_doc;

/* Parses text[len] (one value, surrounded by whitespace only). NULL with e
 * "line L, column C: problem" on malformed input. Free with json_free(). */
json_doc *json_parse(const char *text, size_t len, err *e);
void json_free(json_doc *d);                    /* NULL is a no-op */
const json *json_root(const json_doc *d);

/* Member of an object by key, or NULL (also for non-objects). */
const json *json_get(const json *obj, const char *key);

/* Appends s[len] to *buf (xrealloc'd, *n bytes used, *cap capacity) as a JSON
 * string literal with quotes; invalid UTF-8 becomes U+FFFD. Cannot fail. */
void json_put_str(char **buf, size_t *n, size_t *cap, const char *s, size_t len);

#endif
