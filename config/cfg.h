/* config/cfg.h: the configuration file, read with libyaml into one plain struct.
 *
 * cfg_init() fills the built-in defaults (config/default.yaml documents the
 * same values, key by key); cfg_load() lays a YAML file over them. Every
 * problem is reported as "FILE:LINE:COLUMN: KEY: what is wrong" (the key as a
 * dotted path such as kv_cache.block_size): malformed YAML, unknown keys,
 * duplicate keys, wrong types, values out of range (the ranges are the
 * flags' own, config/params.h), names that refer to nothing, nesting deeper
 * than any configuration needs, and a missing file, a directory, a FIFO or
 * a file over 1 MiB (then just "FILE: ..."). After loading, the
 * struct is trusted by everything downstream; command-line flags may change
 * fields before cfg_check() validates the result once more. A cfg belongs to
 * one thread (the app's main thread builds it, then hands it down read-only). */
#ifndef PAGECHAT_CFG_H
#define PAGECHAT_CFG_H

#include "base/base.h"
#include "kernels/kvq.h"

/* Sampling values; a tab may override any of them. */
typedef struct cfg_sampling {
	float temperature;       /* <= 0: greedy */
	int top_k;               /* <= 0: off */
	float top_p;             /* (0, 1]; 1: off */
	float min_p;             /* [0, 1]; 0: off */
	float repeat_penalty;    /* > 0; 1: off */
	int repeat_last_n;       /* >= 0 */
	int max_tokens;          /* new tokens per answer; -1 or 0: until the context is full */
	uint64_t seed;
} cfg_sampling;

typedef struct cfg_prompt {
	char *name;              /* owned */
	char *text;              /* owned; may be "" */
} cfg_prompt;

typedef struct cfg_tab {
	char *name;              /* owned */
	char *system_prompt;     /* owned; a name in cfg.prompts, or NULL: the default */
	cfg_sampling sampling;   /* the global values with this tab's overrides */
} cfg_tab;

#define CFG_MAX_COLORS 8

typedef struct cfg {
	char *model;             /* owned; NULL: the demo model */
	char *draft_model;       /* owned; speculative decoding's draft: a GGUF file with
	                            the model's vocabulary, "ngram" (prompt lookup), or NULL */
	int threads;             /* compute threads; 0: one per core */
	int context;             /* per-conversation context limit in tokens; 0: the model's */
	char overflow[8];        /* what a full context does to the next turn: "drop"
	                            (the oldest turns), "shift" (them, keeping the rest's
	                            K/V) or "refuse" (conv/conv.h) */
	int block_size;          /* tokens per KV block */
	int64_t pool_blocks;     /* pool size in blocks, or 0 ... */
	int64_t pool_mib;        /* ... in MiB (exactly one of the two is > 0) */
	enum kv_type kv_type_k, kv_type_v; /* K and V row types (kernels/kvq.h) */
	char *kv_store;          /* owned; the disk tier's directory (kv_cache.store);
	                            NULL: the chat's default ($XDG_CACHE_HOME/pagechat),
	                            "off": none */
	int chunk_tokens;        /* prefill chunk budget: tokens per engine step */
	int draft_k;             /* draft tokens proposed per step (1..16) */
	bool draft_adaptive;     /* raise/lower k per sequence from its acceptance */
	cfg_sampling sampling;   /* defaults for every tab */
	cfg_prompt *prompts;     /* owned; [n_prompts] named system prompts, file order */
	int n_prompts;
	char *default_prompt;    /* owned; the prompt of new tabs, or NULL: automatic
	                            ("story" without a chat template, "assistant" with) */
	cfg_tab *tabs;           /* owned; [n_tabs] opened at start, in order (>= 1) */
	int n_tabs;
	bool panels;             /* side panels shown at start */
	int refresh_ms;          /* panel refresh period */
	int tab_colors[CFG_MAX_COLORS]; /* curses colour numbers 0..7, one per tab in turn */
	int n_tab_colors;
} cfg;

/* Fills c with the built-in defaults. Release with cfg_deinit(). Cannot fail. */
void cfg_init(cfg *c);
void cfg_deinit(cfg *c);                 /* a zeroed cfg is fine */

/* Reads the YAML file at path over c (keys present replace their values; a
 * system_prompts or tabs section replaces the whole list). 0 on success; -1
 * with e "path:line:col: key: problem" and c left with the defaults and
 * whatever came before the error (callers then stop). */
int cfg_load(cfg *c, const char *path, err *e);

/* Checks after command-line overrides: every number in its range (the
 * message names the key), exactly one pool size, tabs naming known prompts.
 * -1 with e naming the field. */
int cfg_check(const cfg *c, err *e);

/* The per-user file: $XDG_CONFIG_HOME/pagechat/config.yaml, else
 * $HOME/.config/pagechat/config.yaml, written into buf (cap bytes). Returns
 * buf, or NULL when neither variable is set or the path does not fit. */
char *cfg_user_path(char *buf, size_t cap);

/* The prompt named name, or NULL. Borrowed from c. */
const cfg_prompt *cfg_find_prompt(const cfg *c, const char *name);

/* Colour name ("red") to its curses number, -1 if unknown. */
int cfg_color(const char *name);
const char *cfg_color_name(int color);

#endif
