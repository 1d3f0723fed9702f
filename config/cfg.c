/* config/cfg.c: the YAML configuration, read with libyaml's document loader.
 *
 * libyaml types nothing, accepts duplicate keys and leaves "<<" merge keys
 * alone, so every value is checked here against a schema: one table of fields
 * per section, each with its kind, destination and range. The document is
 * walked once, without recursion into anything the schema does not name, so
 * aliases cannot blow up. Marks are 0-based in libyaml; messages are 1-based. */
#include "config/cfg.h"

#include "config/params.h"
#include "base/files.h"
#include "kernels/kvq.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

/* ---- defaults ---- */

static const char STORY_PROMPT[] =
	"Once upon a time, in a little town by the sea, there lived a girl named Lily. "
	"She loved to play on the beach with her dog Max, and every morning they looked "
	"for shells in the sand.";
static const char ASSISTANT_PROMPT[] =
	"You are a helpful assistant. Answer briefly and precisely.";

static const char *const color_names[] = {
	"black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
};

int cfg_color(const char *name)
{
	for (size_t i = 0; i < ARRAY_LEN(color_names); i++)
		if (!strcmp(name, color_names[i]))
			return (int)i;
	return -1;
}

const char *cfg_color_name(int color)
{
	return color >= 0 && color < (int)ARRAY_LEN(color_names) ? color_names[color] : "?";
}

static void add_prompt(cfg *c, const char *name, const char *text)
{
	c->prompts = xrealloc(c->prompts, (size_t)(c->n_prompts + 1) * sizeof *c->prompts);
	c->prompts[c->n_prompts++] = (cfg_prompt){xstrdup(name), xstrdup(text)};
}

static void add_tab(cfg *c, const char *name, const char *prompt)
{
	c->tabs = xrealloc(c->tabs, (size_t)(c->n_tabs + 1) * sizeof *c->tabs);
	c->tabs[c->n_tabs++] = (cfg_tab){xstrdup(name), prompt ? xstrdup(prompt) : NULL, c->sampling};
}

static void clear_prompts(cfg *c)
{
	for (int i = 0; i < c->n_prompts; i++) {
		free(c->prompts[i].name);
		free(c->prompts[i].text);
	}
	free(c->prompts);
	c->prompts = NULL;
	c->n_prompts = 0;
}

static void clear_tabs(cfg *c)
{
	for (int i = 0; i < c->n_tabs; i++) {
		free(c->tabs[i].name);
		free(c->tabs[i].system_prompt);
	}
	free(c->tabs);
	c->tabs = NULL;
	c->n_tabs = 0;
}

void cfg_init(cfg *c)
{
	*c = (cfg){
		.block_size = 16, .pool_blocks = 256, .chunk_tokens = 512, .draft_k = 4,
		.kv_type_k = KV_F16, .kv_type_v = KV_F16,
		.sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
			     .repeat_penalty = 1.0f, .repeat_last_n = 64, .max_tokens = 256, .seed = 0},
		.panels = true, .refresh_ms = 250, .overflow = "drop",
		.tab_colors = {6, 2, 5, 4, 1}, .n_tab_colors = 5,
	};
	add_prompt(c, "story", STORY_PROMPT);
	add_prompt(c, "assistant", ASSISTANT_PROMPT);
	add_prompt(c, "none", "");
	add_tab(c, "one", NULL);
	add_tab(c, "two", NULL);
}

void cfg_deinit(cfg *c)
{
	free(c->model);
	free(c->draft_model);
	free(c->kv_store);
	free(c->default_prompt);
	clear_prompts(c);
	clear_tabs(c);
	memset(c, 0, sizeof *c);
}

const cfg_prompt *cfg_find_prompt(const cfg *c, const char *name)
{
	for (int i = 0; name && i < c->n_prompts; i++)
		if (!strcmp(c->prompts[i].name, name))
			return &c->prompts[i];
	return NULL;
}

char *cfg_user_path(char *buf, size_t cap)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	bool x = xdg && *xdg;
	if (!x && !(home && *home))
		return NULL;
	/* a path cut short would name another file: none then */
	const char *rest = x ? "pagechat/config.yaml" : ".config/pagechat/config.yaml";
	if ((size_t)snprintf(buf, cap, "%s/%s", x ? xdg : home, rest) >= cap)
		return NULL;
	return buf;
}

/* ---- the loader ---- */

#define CFG_MAX_BYTES ((size_t)1 << 20)  /* a configuration is a few KiB */
#define CFG_MAX_DEPTH 32

typedef struct loader {
	const char *path;
	yaml_document_t *doc;
	cfg *c;
	err *e;
	const yaml_node_t *pool_key;  /* first pool_blocks / pool_mib key seen */
	bool tabs_given;              /* the file has its own tabs list */
} loader;

/* Fills e with "path:line:col: key: message" at node n; returns -1. */
static int fail(loader *L, const yaml_node_t *n, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(loader *L, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	err_set(L->e, "%s:%zu:%zu: %s%s%s", L->path, n->start_mark.line + 1, n->start_mark.column + 1,
		key ? key : "", key ? ": " : "", msg);
	return -1;
}

static const char *node_kind(const yaml_node_t *n)
{
	if (n->type == YAML_MAPPING_NODE)
		return "a mapping";
	if (n->type == YAML_SEQUENCE_NODE)
		return "a list";
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return "a quoted string";
	return NULL;
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	const char *s = scalar(n);
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* A plain scalar (numbers and booleans must not be quoted); NULL after
 * filling e with what was found instead. */
static const char *plain(loader *L, const yaml_node_t *n, const char *key, const char *want)
{
	const char *kind = node_kind(n);
	if (kind) {
		fail(L, n, key, "expected %s, got %s", want, kind);
		return NULL;
	}
	return scalar(n);
}

static int get_int64(loader *L, const yaml_node_t *n, const char *key, enum param_id range, int64_t *out)
{
	const char *s = plain(L, n, key, "an integer");
	if (!s)
		return -1;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno)
		return fail(L, n, key, "expected an integer, got '%s'", s);
	if (!param_ok(range, (double)v)) {
		char r[160];
		return fail(L, n, key, "%lld is out of range (%s)", v, param_range_text(range, r, sizeof r));
	}
	*out = v;
	return 0;
}

static int get_u64(loader *L, const yaml_node_t *n, const char *key, uint64_t *out)
{
	const char *s = plain(L, n, key, "an unsigned integer");
	if (!s)
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || *s == '-' || *s == '+')
		return fail(L, n, key, "expected an unsigned integer, got '%s'", s);
	*out = v;
	return 0;
}

static int get_float(loader *L, const yaml_node_t *n, const char *key, enum param_id range, float *out)
{
	const char *s = plain(L, n, key, "a number");
	if (!s)
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v))
		return fail(L, n, key, "expected a number, got '%s'", s);
	if (!param_ok(range, v)) {
		char r[160];
		return fail(L, n, key, "%g is out of range (%s)", v, param_range_text(range, r, sizeof r));
	}
	*out = (float)v;
	return 0;
}

static int get_bool(loader *L, const yaml_node_t *n, const char *key, bool *out)
{
	const char *s = plain(L, n, key, "true or false");
	if (!s)
		return -1;
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
		*out = true;
	else if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
		*out = false;
	else
		return fail(L, n, key, "expected true or false, got '%s'", s);
	return 0;
}

/* A string (any style); with nullable, null gives NULL. Replaces *out. */
static int get_str(loader *L, const yaml_node_t *n, const char *key, bool nullable, char **out)
{
	if (nullable && is_null(n)) {
		free(*out);
		*out = NULL;
		return 0;
	}
	if (n->type != YAML_SCALAR_NODE)
		return fail(L, n, key, "expected a string, got %s", node_kind(n));
	if (strlen(scalar(n)) != n->data.scalar.length)
		return fail(L, n, key, "the string contains a NUL byte");
	free(*out);
	*out = xstrdup(scalar(n));
	return 0;
}

/* ---- schema ---- */

enum kind { K_INT, K_I64, K_FLOAT, K_U64, K_BOOL, K_STR, K_NSTR, K_FN };

struct field;
typedef int (*field_fn)(loader *L, const yaml_node_t *v, const char *key, void *base);

typedef struct field {
	const char *key;
	enum kind kind;
	size_t off;              /* into the section's base struct (K_FN: the base
	                            its function gets) */
	enum param_id range;     /* numbers: their row of config/params.h, shared
	                            with the flags */
	field_fn fn;             /* K_FN: a section of its own */
} field;

static int walk(loader *L, const yaml_node_t *map, const char *section, const field *fields,
		size_t n_fields, void *base);

static int set_field(loader *L, const field *f, const yaml_node_t *v, const char *key, void *base)
{
	char *p = (char *)base + f->off;
	int64_t i;
	switch (f->kind) {
	case K_INT:
		if (get_int64(L, v, key, f->range, &i))
			return -1;
		*(int *)p = (int)i;
		return 0;
	case K_I64:
		return get_int64(L, v, key, f->range, (int64_t *)p);
	case K_FLOAT:
		return get_float(L, v, key, f->range, (float *)p);
	case K_U64:
		return get_u64(L, v, key, (uint64_t *)p);
	case K_BOOL:
		return get_bool(L, v, key, (bool *)p);
	case K_STR:
	case K_NSTR:
		return get_str(L, v, key, f->kind == K_NSTR, (char **)p);
	case K_FN:
		return f->fn(L, v, key, p);
	}
	return -1;
}

#define SAMP(k, kind, m, range) {k, kind, offsetof(cfg_sampling, m), range, NULL}
static const field sampling_fields[] = {
	SAMP("temperature", K_FLOAT, temperature, P_TEMP),
	SAMP("top_k", K_INT, top_k, P_TOP_K),
	SAMP("top_p", K_FLOAT, top_p, P_TOP_P),
	SAMP("min_p", K_FLOAT, min_p, P_MIN_P),
	SAMP("repeat_penalty", K_FLOAT, repeat_penalty, P_REPEAT_PENALTY),
	SAMP("repeat_last_n", K_INT, repeat_last_n, P_REPEAT_LAST_N),
	SAMP("max_tokens", K_INT, max_tokens, P_MAX_TOKENS),
	SAMP("seed", K_U64, seed, P_NONE),
};

static int section_sampling(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, sampling_fields, ARRAY_LEN(sampling_fields), base);
}

/* kv_cache.pool_blocks and pool_mib exclude each other within one file; the
 * one given replaces the other's default. */
static int pool_size(loader *L, const yaml_node_t *v, const char *key, void *base, bool mib)
{
	cfg *c = base;
	if (L->pool_key)
		return fail(L, v, key, "give pool_blocks or pool_mib, not both (the other is at line %zu)",
			    L->pool_key->start_mark.line + 1);
	L->pool_key = v;
	int64_t x;
	if (get_int64(L, v, key, mib ? P_POOL_MIB : P_POOL_BLOCKS, &x))
		return -1;
	c->pool_blocks = mib ? 0 : x;
	c->pool_mib = mib ? x : 0;
	return 0;
}

static int pool_blocks_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return pool_size(L, v, key, base, false);
}

static int pool_mib_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return pool_size(L, v, key, base, true);
}

/* kv_cache.type_k / type_v: f32, f16, q8 or fp8. */
static int kv_type_fn(loader *L, const yaml_node_t *v, const char *key, enum kv_type *dst)
{
	char *s = NULL;
	if (get_str(L, v, key, false, &s))
		return -1;
	int t = kv_type_parse(s);
	free(s);
	if (t < 0)
		return fail(L, v, key, "must be f32, f16, q8 or fp8");
	*dst = (enum kv_type)t;
	return 0;
}

static int kv_type_k_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return kv_type_fn(L, v, key, &((cfg *)base)->kv_type_k);
}

static int kv_type_v_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return kv_type_fn(L, v, key, &((cfg *)base)->kv_type_v);
}

static const field kv_fields[] = {
	{"block_size", K_INT, offsetof(cfg, block_size), P_BLOCK_SIZE, NULL},
	{"type_k", K_FN, 0, P_NONE, kv_type_k_fn},
	{"type_v", K_FN, 0, P_NONE, kv_type_v_fn},
	{"pool_blocks", K_FN, 0, P_NONE, pool_blocks_fn},
	{"pool_mib", K_FN, 0, P_NONE, pool_mib_fn},
	{"store", K_NSTR, offsetof(cfg, kv_store), P_NONE, NULL},
};

static int section_kv(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, kv_fields, ARRAY_LEN(kv_fields), base);
}

static const field prefill_fields[] = {
	{"chunk_tokens", K_INT, offsetof(cfg, chunk_tokens), P_CHUNK, NULL},
};

static int section_prefill(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, prefill_fields, ARRAY_LEN(prefill_fields), base);
}

static const field spec_fields[] = {
	{"draft_k", K_INT, offsetof(cfg, draft_k), P_DRAFT_K, NULL},
	{"adaptive", K_BOOL, offsetof(cfg, draft_adaptive), P_NONE, NULL},
};

static int section_spec(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, spec_fields, ARRAY_LEN(spec_fields), base);
}

static int tab_colors_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	cfg *c = base;
	if (v->type != YAML_SEQUENCE_NODE)
		return fail(L, v, key, "expected a list of colour names, got %s",
			    node_kind(v) ? node_kind(v) : "a single value");
	int n = 0;
	for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
		const yaml_node_t *x = yaml_document_get_node(L->doc, *it);
		if (n == CFG_MAX_COLORS)
			return fail(L, x, key, "at most %d colours", CFG_MAX_COLORS);
		int col = x->type == YAML_SCALAR_NODE ? cfg_color(scalar(x)) : -1;
		if (col < 0)
			return fail(L, x, key, "unknown colour%s%s%s (black, red, green, blue, magenta, "
				    "cyan, white)", x->type == YAML_SCALAR_NODE ? " '" : "",
				    x->type == YAML_SCALAR_NODE ? scalar(x) : "",
				    x->type == YAML_SCALAR_NODE ? "'" : "");
		if (col == 3) /* COLOR_YELLOW */
			return fail(L, x, key, "yellow marks shared blocks; a tab may not use it");
		c->tab_colors[n++] = col;
	}
	if (n == 0)
		return fail(L, v, key, "the list is empty");
	c->n_tab_colors = n;
	return 0;
}

static const field ui_fields[] = {
	{"panels", K_BOOL, offsetof(cfg, panels), P_NONE, NULL},
	{"refresh_ms", K_INT, offsetof(cfg, refresh_ms), P_REFRESH_MS, NULL},
	{"tab_colors", K_FN, 0, P_NONE, tab_colors_fn},
};

static int section_ui(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, ui_fields, ARRAY_LEN(ui_fields), base);
}

/* A model path must name a readable file; null means none; the draft may
 * also be "ngram". */
static int model_fn(loader *L, const yaml_node_t *v, const char *key, void *base, char **dst)
{
	bool draft = dst == &((cfg *)base)->draft_model;
	if (get_str(L, v, key, true, dst))
		return -1;
	if (*dst && !(draft && !strcmp(*dst, "ngram")) && access(*dst, R_OK))
		return fail(L, v, key, "cannot read '%s': %s", *dst, strerror(errno));
	return 0;
}

static int model_main_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return model_fn(L, v, key, base, &((cfg *)base)->model);
}

static int model_draft_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return model_fn(L, v, key, base, &((cfg *)base)->draft_model);
}

static int prompts_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	cfg *c = base;
	if (v->type != YAML_MAPPING_NODE)
		return fail(L, v, key, "expected a mapping of names to texts, got %s",
			    node_kind(v) ? node_kind(v) : "a single value");
	clear_prompts(c);
	/* walk() has no schema for free-form names: check them here */
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
		const yaml_node_t *k = yaml_document_get_node(L->doc, p->key);
		const yaml_node_t *t = yaml_document_get_node(L->doc, p->value);
		if (k->type != YAML_SCALAR_NODE || !*scalar(k))
			return fail(L, k, key, "a prompt name must be a non-empty string");
		for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < p; q++) {
			const yaml_node_t *k2 = yaml_document_get_node(L->doc, q->key);
			if (k2->type == YAML_SCALAR_NODE && !strcmp(scalar(k2), scalar(k)))
				return fail(L, k, key, "duplicate key '%s' (first at line %zu)", scalar(k),
					    k2->start_mark.line + 1);
		}
		char sub[160];
		snprintf(sub, sizeof sub, "%s.%s", key, scalar(k));
		char *text = NULL;
		if (is_null(t))
			text = xstrdup("");
		else if (get_str(L, t, sub, false, &text))
			return -1;
		add_prompt(c, scalar(k), text);
		free(text);
	}
	if (c->n_prompts == 0)
		return fail(L, v, key, "at least one system prompt is needed");
	return 0;
}

static const field tab_fields[] = {
	{"name", K_STR, offsetof(cfg_tab, name), P_NONE, NULL},
	{"system_prompt", K_NSTR, offsetof(cfg_tab, system_prompt), P_NONE, NULL},
	{"sampling", K_FN, offsetof(cfg_tab, sampling), P_NONE, NULL},
};

static int tab_sampling_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	return walk(L, v, key, sampling_fields, ARRAY_LEN(sampling_fields), base);
}

/* Reads the tabs list; runs after the rest of the file, so that tabs start
 * from the file's sampling defaults wherever the keys stand. */
static int tabs_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	cfg *c = base;
	if (v->type != YAML_SEQUENCE_NODE)
		return fail(L, v, key, "expected a list of tabs, got %s",
			    node_kind(v) ? node_kind(v) : "a single value");
	clear_tabs(c);
	L->tabs_given = true;
	field fields[ARRAY_LEN(tab_fields)];
	memcpy(fields, tab_fields, sizeof fields);
	fields[2].fn = tab_sampling_fn;
	int i = 0;
	for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++, i++) {
		const yaml_node_t *x = yaml_document_get_node(L->doc, *it);
		char sub[64];
		snprintf(sub, sizeof sub, "%s[%d]", key, i);
		add_tab(c, "", NULL);
		cfg_tab *t = &c->tabs[c->n_tabs - 1];
		free(t->name);
		t->name = NULL;
		if (walk(L, x, sub, fields, ARRAY_LEN(fields), t))
			return -1;
		if (!t->name || !*t->name)
			return fail(L, x, sub, "a tab needs a non-empty name");
		if (t->system_prompt && !cfg_find_prompt(c, t->system_prompt)) {
			const yaml_node_t *at = x;
			for (yaml_node_pair_t *p = x->data.mapping.pairs.start; p < x->data.mapping.pairs.top; p++)
				if (!strcmp(scalar(yaml_document_get_node(L->doc, p->key)), "system_prompt"))
					at = yaml_document_get_node(L->doc, p->value);
			return fail(L, at, sub, "system_prompt '%s' is not among system_prompts",
				    t->system_prompt);
		}
	}
	if (c->n_tabs == 0)
		return fail(L, v, key, "at least one tab is needed");
	return 0;
}

static int default_prompt_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	cfg *c = base;
	if (get_str(L, v, key, true, &c->default_prompt))
		return -1;
	if (c->default_prompt && !cfg_find_prompt(c, c->default_prompt))
		return fail(L, v, key, "'%s' is not among system_prompts", c->default_prompt);
	return 0;
}

/* context.overflow: drop, shift or refuse. */
static int overflow_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	cfg *c = base;
	char *s = NULL;
	if (get_str(L, v, key, false, &s))
		return -1;
	bool ok = !strcmp(s, "drop") || !strcmp(s, "shift") || !strcmp(s, "refuse");
	if (ok)
		snprintf(c->overflow, sizeof c->overflow, "%s", s);
	free(s);
	return ok ? 0 : fail(L, v, key, "must be drop, shift or refuse");
}

static const field context_fields[] = {
	{"limit", K_INT, offsetof(cfg, context), P_CONTEXT, NULL},
	{"overflow", K_FN, 0, P_NONE, overflow_fn},
};

/* context: a number (the limit), or {limit, overflow}. */
static int context_fn(loader *L, const yaml_node_t *v, const char *key, void *base)
{
	if (v->type == YAML_MAPPING_NODE)
		return walk(L, v, key, context_fields, ARRAY_LEN(context_fields), base);
	return set_field(L, &context_fields[0], v, key, base);
}

/* Top level; the last two run after everything else (see walk_top). */
static const field top_fields[] = {
	{"model", K_FN, 0, P_NONE, model_main_fn},
	{"draft_model", K_FN, 0, P_NONE, model_draft_fn},
	{"threads", K_INT, offsetof(cfg, threads), P_THREADS, NULL},
	{"context", K_FN, 0, P_NONE, context_fn},
	{"kv_cache", K_FN, 0, P_NONE, section_kv},
	{"prefill", K_FN, 0, P_NONE, section_prefill},
	{"speculative", K_FN, 0, P_NONE, section_spec},
	{"sampling", K_FN, offsetof(cfg, sampling), P_NONE, section_sampling},
	{"system_prompts", K_FN, 0, P_NONE, prompts_fn},
	{"ui", K_FN, 0, P_NONE, section_ui},
	{"default_system_prompt", K_FN, 0, P_NONE, default_prompt_fn},
	{"tabs", K_FN, 0, P_NONE, tabs_fn},
};
#define N_LATE 2

/* Lists the keys of fields[] into buf, for "unknown key" messages. */
static void key_list(char *buf, size_t cap, const field *fields, size_t n)
{
	size_t k = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++)
		bfmt(buf, cap, &k, "%s%s", i ? ", " : "", fields[i].key);
}

/* Finds the field of key node k in map's pair p; checks duplicates among
 * the pairs before p. NULL with e filled. */
static const field *lookup(loader *L, const yaml_node_t *map, yaml_node_pair_t *p,
			   const char *section, const field *fields, size_t n_fields)
{
	const yaml_node_t *k = yaml_document_get_node(L->doc, p->key);
	if (k->type != YAML_SCALAR_NODE) {
		fail(L, k, section, "keys must be plain names, got %s", node_kind(k));
		return NULL;
	}
	const char *name = scalar(k);
	if (!strcmp(name, "<<")) {
		fail(L, k, section, "merge keys (<<) are not supported; write the keys out");
		return NULL;
	}
	for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
		const yaml_node_t *k2 = yaml_document_get_node(L->doc, q->key);
		if (k2->type == YAML_SCALAR_NODE && !strcmp(scalar(k2), name)) {
			fail(L, k, section, "duplicate key '%s' (first at line %zu)", name,
			     k2->start_mark.line + 1);
			return NULL;
		}
	}
	for (size_t i = 0; i < n_fields; i++)
		if (!strcmp(fields[i].key, name))
			return &fields[i];
	char known[400];
	key_list(known, sizeof known, fields, n_fields);
	if (section)
		fail(L, k, section, "unknown key '%s' (known: %s)", name, known);
	else
		fail(L, k, name, "unknown top-level key (known: %s)", known);
	return NULL;
}

/* Applies each key of map to base through fields. The first keys_late
 * fields (counted from the end) are applied after the others. */
static int walk_late(loader *L, const yaml_node_t *map, const char *section, const field *fields,
		     size_t n_fields, void *base, size_t n_late)
{
	if (map->type != YAML_MAPPING_NODE)
		return fail(L, map, section, "expected a mapping of keys, got %s",
			    node_kind(map) ? node_kind(map) : "a single value");
	for (int pass = 0; pass < 2; pass++) {
		for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
			const field *f = lookup(L, map, p, section, fields, n_fields);
			if (!f)
				return -1;
			bool late = (size_t)(f - fields) >= n_fields - n_late;
			if (late != (pass == 1))
				continue;
			char key[160];
			snprintf(key, sizeof key, "%s%s%s", section ? section : "", section ? "." : "", f->key);
			if (set_field(L, f, yaml_document_get_node(L->doc, p->value), key, base))
				return -1;
		}
		/* with nothing late, one pass does it */
		if (n_late == 0)
			break;
	}
	return 0;
}

static int walk(loader *L, const yaml_node_t *map, const char *section, const field *fields,
		size_t n_fields, void *base)
{
	return walk_late(L, map, section, fields, n_fields, base, 0);
}

/* The column (from 0) of a tab in the indentation of the line that starts
 * at or before byte at of text[len], or -1. */
static long indent_tab(const char *text, size_t len, size_t at)
{
	size_t b = MIN(at, len);
	while (b > 0 && text[b - 1] != '\n')
		b--;
	for (size_t i = b; i < len && (text[i] == ' ' || text[i] == '\t'); i++)
		if (text[i] == '\t')
			return (long)(i - b);
	return -1;
}

/* Reports a libyaml parse failure. A tab in the indentation gets its own
 * message: libyaml's ("found character that cannot start any token", "a tab
 * character that violates indentation") do not say what to do. */
static void parse_error(const yaml_parser_t *p, const char *path, const char *text, size_t len, err *e)
{
	static const char *const what[] = {
		[YAML_MEMORY_ERROR] = "out of memory", [YAML_READER_ERROR] = "reader error",
		[YAML_SCANNER_ERROR] = "scanner error", [YAML_PARSER_ERROR] = "parser error",
		[YAML_COMPOSER_ERROR] = "composer error",
	};
	const char *kind = p->error < (int)ARRAY_LEN(what) && what[p->error] ? what[p->error] : "error";
	const char *problem = p->problem ? p->problem : "malformed YAML";
	if (p->error == YAML_READER_ERROR) {
		/* reader errors carry no mark, only a byte offset */
		err_set(e, "%s: %s: %s at byte %zu", path, kind, problem, p->problem_offset);
		return;
	}
	long tab = p->error == YAML_SCANNER_ERROR ? indent_tab(text, len, p->problem_mark.index) : -1;
	if (tab >= 0) {
		err_set(e, "%s:%zu:%ld: tabs are not allowed for indentation: indent with spaces", path,
			p->problem_mark.line + 1, tab + 1);
		return;
	}
	char ctx[160] = "";
	if (p->context)
		snprintf(ctx, sizeof ctx, " (%s at %zu:%zu)", p->context, p->context_mark.line + 1,
			 p->context_mark.column + 1);
	err_set(e, "%s:%zu:%zu: %s: %s%s", path, p->problem_mark.line + 1, p->problem_mark.column + 1,
		kind, problem, ctx);
}

/* Walks the events of the document in text[0..len) and fails at the first
 * collection nested deeper than CFG_MAX_DEPTH (libyaml's loader takes time
 * quadratic in the depth; a configuration needs 4 levels). Parse errors are
 * left to the loader, which reports them. */
static int check_depth(const char *path, const char *text, size_t len, err *e)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	int depth = 0, rc = 0;
	for (bool done = false; !done && rc == 0;) {
		if (!yaml_parser_parse(&parser, &ev))
			break;
		if (ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_SEQUENCE_START_EVENT) {
			if (++depth > CFG_MAX_DEPTH) {
				err_set(e, "%s:%zu:%zu: nested deeper than %d levels (a configuration needs 4): "
					"flatten it", path, ev.start_mark.line + 1, ev.start_mark.column + 1,
					CFG_MAX_DEPTH);
				rc = -1;
			}
		} else if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
			depth--;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	return rc;
}

int cfg_load(cfg *c, const char *path, err *e)
{
	size_t len;
	char *text = file_read_all(path, CFG_MAX_BYTES, "configuration file", &len, e);
	if (!text)
		return -1;
	if (check_depth(path, text, len, e)) {
		free(text);
		return -1;
	}
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	int rc = -1;
	if (!yaml_parser_load(&parser, &doc)) {
		parse_error(&parser, path, text, len, e);
		goto out_parser;
	}
	yaml_node_t *root = yaml_document_get_root_node(&doc);
	loader L = {.path = path, .doc = &doc, .c = c, .e = e};
	if (!root)
		rc = 0; /* an empty file: the defaults */
	else if (root->type != YAML_MAPPING_NODE)
		rc = fail(&L, root, NULL, "the top level must be a mapping of keys, not %s",
			  node_kind(root) ? node_kind(root) : "a single value");
	else
		rc = walk_late(&L, root, NULL, top_fields, ARRAY_LEN(top_fields), c, N_LATE);
	/* the built-in tabs follow the file's sampling defaults */
	for (int i = 0; rc == 0 && !L.tabs_given && i < c->n_tabs; i++)
		c->tabs[i].sampling = c->sampling;
	yaml_document_delete(&doc);
out_parser:
	yaml_parser_delete(&parser);
	free(text);
	return rc;
}

/* A number of c outside its row of the ranges table: fills e, returns -1. */
static int check_ranges(const cfg *c, err *e)
{
	const struct { enum param_id id; double v; } v[] = {
		{P_THREADS, c->threads}, {P_CONTEXT, c->context}, {P_BLOCK_SIZE, c->block_size},
		{P_POOL_BLOCKS, (double)c->pool_blocks}, {P_POOL_MIB, (double)c->pool_mib},
		{P_CHUNK, c->chunk_tokens}, {P_DRAFT_K, c->draft_k}, {P_REFRESH_MS, c->refresh_ms},
		{P_TEMP, c->sampling.temperature}, {P_TOP_K, c->sampling.top_k}, {P_TOP_P, c->sampling.top_p},
		{P_MIN_P, c->sampling.min_p}, {P_REPEAT_PENALTY, c->sampling.repeat_penalty},
		{P_REPEAT_LAST_N, c->sampling.repeat_last_n}, {P_MAX_TOKENS, c->sampling.max_tokens},
	};
	for (size_t i = 0; i < ARRAY_LEN(v); i++)
		if (!param_ok(v[i].id, v[i].v)) {
			char msg[300];
			err_set(e, "%s", param_problem(v[i].id, param_get(v[i].id)->key, v[i].v, msg, sizeof msg));
			return -1;
		}
	return 0;
}

int cfg_check(const cfg *c, err *e)
{
	if (check_ranges(c, e))
		return -1;
	const char *bad = NULL;
	if ((c->pool_blocks > 0) == (c->pool_mib > 0))
		bad = "kv_cache: give exactly one of pool_blocks and pool_mib";
	else if (c->n_tabs < 1 || c->n_prompts < 1 || c->n_tab_colors < 1)
		bad = "at least one tab, one system prompt and one tab colour are needed";
	if (bad) {
		err_set(e, "%s", bad);
		return -1;
	}
	for (int i = 0; i < c->n_tabs; i++)
		if (c->tabs[i].system_prompt && !cfg_find_prompt(c, c->tabs[i].system_prompt)) {
			err_set(e, "tabs[%d]: system_prompt '%s' is not among system_prompts", i,
				c->tabs[i].system_prompt);
			return -1;
		}
	if (c->default_prompt && !cfg_find_prompt(c, c->default_prompt)) {
		err_set(e, "default_system_prompt '%s' is not among system_prompts", c->default_prompt);
		return -1;
	}
	return 0;
}
