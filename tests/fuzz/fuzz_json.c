/* tests/fuzz/fuzz_json.c: the JSON reader on arbitrary bytes.
 *
 * A document that parses is written back out (strings through
 * json_put_str, numbers with 17 digits) and must parse again into the same
 * tree; strings that are not UTF-8 come back with U+FFFD, so for those only
 * the shape is compared. json_get must find each key at or before its own
 * position (the first of equal keys). A failure must say where. */
#include "tests/fuzz/fuzz.h"

#include "models/json.h"

#include <math.h>

struct out {
	char *p;                 /* owned */
	size_t n, cap;
};

static void put(struct out *o, const char *s)
{
	size_t k = strlen(s);
	xgrow_size(&o->p, &o->cap, o->n + k + 1, 1);
	memcpy(o->p + o->n, s, k + 1);
	o->n += k;
}

static void write_value(struct out *o, const json *v)
{
	char num[64];
	switch (v->type) {
	case JSON_NULL: put(o, "null"); break;
	case JSON_BOOL: put(o, v->b ? "true" : "false"); break;
	case JSON_NUM:
		snprintf(num, sizeof num, "%.17g", v->num);
		put(o, num);
		break;
	case JSON_STR: json_put_str(&o->p, &o->n, &o->cap, v->str, v->len); break;
	case JSON_ARR:
	case JSON_OBJ:
		put(o, v->type == JSON_ARR ? "[" : "{");
		for (size_t i = 0; i < v->n; i++) {
			if (i)
				put(o, ",");
			if (v->type == JSON_OBJ) {
				json_put_str(&o->p, &o->n, &o->cap, v->keys[i], strlen(v->keys[i]));
				put(o, ":");
			}
			write_value(o, &v->items[i]);
		}
		put(o, v->type == JSON_ARR ? "]" : "}");
		break;
	}
}

/* Same tree; strings (and keys) compared only where a is valid UTF-8 and has
 * no NUL in a key (keys are written up to their first NUL). */
static bool same(const json *a, const json *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case JSON_NULL: return true;
	case JSON_BOOL: return a->b == b->b;
	case JSON_NUM: return a->num == b->num;
	case JSON_STR:
		return !fuzz_utf8_ok(a->str, a->len) ||
		       (a->len == b->len && memcmp(a->str, b->str, a->len) == 0);
	case JSON_ARR:
	case JSON_OBJ:
		if (a->n != b->n)
			return false;
		for (size_t i = 0; i < a->n; i++) {
			if (a->type == JSON_OBJ && fuzz_utf8_ok(a->keys[i], strlen(a->keys[i])) &&
			    strcmp(a->keys[i], b->keys[i]) != 0)
				return false;
			if (!same(&a->items[i], &b->items[i]))
				return false;
		}
		return true;
	}
	return false;
}

static void check_tree(const json *v, int depth)
{
	FUZZ_CHECK(depth <= 64);
	if (v->type == JSON_STR)
		FUZZ_CHECK(v->str[v->len] == '\0');
	if (v->type == JSON_NUM)
		FUZZ_CHECK(isfinite(v->num));
	if (v->type != JSON_ARR && v->type != JSON_OBJ)
		return;
	for (size_t i = 0; i < v->n; i++) {
		if (v->type == JSON_OBJ) {
			const json *found = json_get(v, v->keys[i]);
			FUZZ_CHECK(found && found >= v->items && found <= &v->items[i]);
		}
		check_tree(&v->items[i], depth + 1);
	}
	FUZZ_CHECK(v->type == JSON_OBJ || json_get(v, "x") == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	err e = {0};
	json_doc *d = json_parse((const char *)data, size, &e);
	if (!d) {
		FUZZ_CHECK(strncmp(e.msg, "line ", 5) == 0);
		return 0;
	}
	const json *root = json_root(d);
	check_tree(root, 0);
	struct out o = {0};
	write_value(&o, root);
	json_doc *again = json_parse(o.p, o.n, &e);
	FUZZ_CHECK(again != NULL);
	if (again)
		FUZZ_CHECK(same(root, json_root(again)));
	json_free(again);
	free(o.p);
	json_free(d);
	return 0;
}
