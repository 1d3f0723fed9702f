/* tests/test_cfg.c: the YAML configuration: config/default.yaml equals the
 * built-in defaults key by key; a file using every key loads as written; and
 * each kind of bad file (malformed YAML, unknown, duplicate and merge keys,
 * wrong types, values out of range, names that refer to nothing, a missing
 * file) gives its exact "file:line:column: key: problem" message, also
 * through the command line. */
#include "config/cfg.h"
#include "tests/run.h"
#include "tests/test.h"

#include <string.h>

#define DIR "build/test-cfg"

static void write_text(const char *name, const char *text)
{
	char path[256];
	snprintf(path, sizeof path, DIR "/%s", name);
	CHECK(write_file(path, text, strlen(text)) == 0);
}

static bool same_sampling(const cfg_sampling *a, const cfg_sampling *b)
{
	return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p &&
	       a->min_p == b->min_p && a->repeat_penalty == b->repeat_penalty &&
	       a->repeat_last_n == b->repeat_last_n && a->max_tokens == b->max_tokens &&
	       a->seed == b->seed;
}

/* The documented defaults are the code's defaults. */
static void test_default_file(void)
{
	cfg a, b;
	cfg_init(&a);
	cfg_init(&b);
	err e = {0};
	CHECK_(cfg_load(&b, "config/default.yaml", &e) == 0, "%s", e.msg);
	CHECK(cfg_check(&b, &e) == 0);
	CHECK(!b.model && !b.draft_model && !b.default_prompt);
	CHECK_EQ_INT(b.threads, a.threads);
	CHECK_EQ_INT(b.context, a.context);
	CHECK(!strcmp(b.overflow, a.overflow) && !strcmp(a.overflow, "drop"));
	CHECK_EQ_INT(b.block_size, a.block_size);
	CHECK_EQ_INT(b.pool_blocks, a.pool_blocks);
	CHECK_EQ_INT(b.pool_mib, a.pool_mib);
	CHECK_EQ_INT(b.chunk_tokens, a.chunk_tokens);
	CHECK_EQ_INT(b.draft_k, a.draft_k);
	CHECK(same_sampling(&a.sampling, &b.sampling));
	CHECK_EQ_INT(b.n_prompts, a.n_prompts);
	for (int i = 0; i < a.n_prompts && i < b.n_prompts; i++)
		CHECK_(!strcmp(a.prompts[i].name, b.prompts[i].name) && !strcmp(a.prompts[i].text, b.prompts[i].text),
		       "prompt %d: '%s' vs '%s'", i, a.prompts[i].text, b.prompts[i].text);
	CHECK_EQ_INT(b.n_tabs, a.n_tabs);
	for (int i = 0; i < a.n_tabs && i < b.n_tabs; i++) {
		CHECK(!strcmp(a.tabs[i].name, b.tabs[i].name) && !b.tabs[i].system_prompt);
		CHECK(same_sampling(&a.tabs[i].sampling, &b.tabs[i].sampling));
	}
	CHECK(b.panels == a.panels);
	CHECK_EQ_INT(b.refresh_ms, a.refresh_ms);
	CHECK_EQ_INT(b.n_tab_colors, a.n_tab_colors);
	CHECK(!memcmp(a.tab_colors, b.tab_colors, sizeof a.tab_colors));
	cfg_deinit(&a);
	cfg_deinit(&b);
}

static const char full[] =
	"model: ../shared/models/stories260K.gguf\n"
	"draft_model: ../shared/models/stories260K.gguf\n"
	"threads: 3\n"
	"context: 1024\n"
	"kv_cache:\n"
	"  block_size: 32\n"
	"  type_k: f16\n"
	"  type_v: q8\n"
	"  pool_mib: 48\n"
	"prefill: {chunk_tokens: 128}\n"
	"speculative: {draft_k: 6}\n"
	"tabs:\n"
	"  - name: first\n"
	"  - name: second\n"
	"    system_prompt: coder\n"
	"    sampling: {temperature: 0.2, max_tokens: 64}\n"
	"sampling:\n"
	"  temperature: 0.5\n"
	"  top_k: 0\n"
	"  top_p: 1\n"
	"  min_p: 0\n"
	"  repeat_penalty: 1.1\n"
	"  repeat_last_n: 32\n"
	"  max_tokens: 100\n"
	"  seed: 18446744073709551615\n"
	"system_prompts:\n"
	"  plain: \"\"\n"
	"  coder: |-\n"
	"    You are a terse C programmer.\n"
	"    Code first.\n"
	"default_system_prompt: plain\n"
	"ui:\n"
	"  panels: false\n"
	"  refresh_ms: 100\n"
	"  tab_colors: [red, blue]\n";

/* Every key, some in flow style, tabs before the sampling they inherit. */
static void test_full_file(void)
{
	write_text("full.yaml", full);
	cfg c;
	cfg_init(&c);
	err e = {0};
	CHECK_(cfg_load(&c, DIR "/full.yaml", &e) == 0, "%s", e.msg);
	CHECK(cfg_check(&c, &e) == 0);
	CHECK(c.model && !strcmp(c.model, "../shared/models/stories260K.gguf") && c.draft_model);
	CHECK(c.threads == 3 && c.context == 1024 && c.block_size == 32);
	CHECK(c.pool_blocks == 0 && c.pool_mib == 48);
	CHECK(c.kv_type_k == 1 && c.kv_type_v == 2); /* f16, q8 */
	CHECK(c.chunk_tokens == 128 && c.draft_k == 6);
	CHECK(c.sampling.temperature == 0.5f && c.sampling.top_k == 0 && c.sampling.top_p == 1.0f);
	CHECK(c.sampling.repeat_penalty == 1.1f && c.sampling.repeat_last_n == 32);
	CHECK(c.sampling.max_tokens == 100 && c.sampling.seed == UINT64_MAX);
	CHECK_EQ_INT(c.n_prompts, 2);
	CHECK(!strcmp(c.prompts[0].name, "plain") && !strcmp(c.prompts[0].text, ""));
	CHECK(!strcmp(c.prompts[1].text, "You are a terse C programmer.\nCode first."));
	CHECK(c.default_prompt && !strcmp(c.default_prompt, "plain"));
	CHECK_EQ_INT(c.n_tabs, 2);
	CHECK(!strcmp(c.tabs[0].name, "first") && !c.tabs[0].system_prompt);
	CHECK(same_sampling(&c.tabs[0].sampling, &c.sampling));
	CHECK(!strcmp(c.tabs[1].system_prompt, "coder"));
	CHECK(c.tabs[1].sampling.temperature == 0.2f && c.tabs[1].sampling.max_tokens == 64);
	CHECK(c.tabs[1].sampling.top_k == 0 && c.tabs[1].sampling.repeat_last_n == 32);
	CHECK(!c.panels && c.refresh_ms == 100);
	CHECK(c.n_tab_colors == 2 && c.tab_colors[0] == 1 && c.tab_colors[1] == 4);
	cfg_deinit(&c);

	/* an empty file keeps the defaults; the built-in tabs follow a file's sampling */
	write_text("empty.yaml", "# nothing\n");
	write_text("samp.yaml", "sampling: {temperature: 0}\nkv_cache: {pool_blocks: 64}\n");
	cfg_init(&c);
	CHECK(cfg_load(&c, DIR "/empty.yaml", &e) == 0 && c.n_tabs == 2 && c.pool_blocks == 256);
	CHECK(cfg_load(&c, DIR "/samp.yaml", &e) == 0);
	CHECK(c.tabs[0].sampling.temperature == 0 && c.tabs[1].sampling.temperature == 0);
	CHECK(c.pool_blocks == 64 && c.pool_mib == 0);
	cfg_deinit(&c);
	CHECK(cfg_color("magenta") == 5 && cfg_color("pink") == -1);
	CHECK(!strcmp(cfg_color_name(6), "cyan"));
}

/* Each bad file and the message it must give, whole. */
static const struct bad {
	const char *name, *text, *msg;
} bad[] = {
	{"tab.yaml", "kv_cache:\n  block_size: 16\n\tpool_blocks: 4\n",
	 DIR "/tab.yaml:3:1: tabs are not allowed for indentation: indent with spaces"},
	{"tab2.yaml", "kv_cache:\n\tblock_size: 16\n",
	 DIR "/tab2.yaml:2:1: tabs are not allowed for indentation: indent with spaces"},
	{"flow.yaml", "kv_cache: {block_size: 16\nthreads: 2\n",
	 DIR "/flow.yaml:2:8: parser error: did not find expected ',' or '}' (while parsing a flow "
	 "mapping at 1:11)"},
	{"alias.yaml", "threads: *nothing\n", DIR "/alias.yaml:1:10: composer error: found undefined alias"},
	{"utf8.yaml", "threads: 2\nmodel: \"\x80\"\n",
	 DIR "/utf8.yaml: reader error: invalid leading UTF-8 octet at byte 19"},
	{"list.yaml", "- a\n- b\n", DIR "/list.yaml:1:1: the top level must be a mapping of keys, not a list"},
	{"unknown.yaml", "threads: 2\nbogus: 1\n",
	 DIR "/unknown.yaml:2:1: bogus: unknown top-level key (known: model, draft_model, threads, context, "
	 "kv_cache, prefill, speculative, sampling, system_prompts, ui, default_system_prompt, tabs)"},
	{"nested.yaml", "kv_cache:\n  blocksize: 16\n",
	 DIR "/nested.yaml:2:3: kv_cache: unknown key 'blocksize' (known: block_size, type_k, type_v, pool_blocks, pool_mib, store)"},
	{"dup.yaml", "kv_cache:\n  block_size: 16\n  block_size: 32\n",
	 DIR "/dup.yaml:3:3: kv_cache: duplicate key 'block_size' (first at line 2)"},
	{"duptop.yaml", "threads: 1\ncontext: 5\nthreads: 2\n",
	 DIR "/duptop.yaml:3:1: duplicate key 'threads' (first at line 1)"},
	{"quoted.yaml", "kv_cache:\n  block_size: \"16\"\n",
	 DIR "/quoted.yaml:2:15: kv_cache.block_size: expected an integer, got a quoted string"},
	{"word.yaml", "threads: many\n", DIR "/word.yaml:1:10: threads: expected an integer, got 'many'"},
	{"float.yaml", "sampling:\n  temperature: hot\n",
	 DIR "/float.yaml:2:16: sampling.temperature: expected a number, got 'hot'"},
	{"kvtype.yaml", "kv_cache:\n  type_v: int4\n",
	 DIR "/kvtype.yaml:2:11: kv_cache.type_v: must be f32, f16, q8 or fp8"},
	{"range.yaml", "kv_cache: {block_size: 0}\n",
	 DIR "/range.yaml:1:24: kv_cache.block_size: 0 is out of range (1..256; the attention kernels' limit)"},
	/* issue #25: 512 passed here, and the kernels refused it at every answer */
	{"block512.yaml", "kv_cache: {block_size: 512}\n",
	 DIR "/block512.yaml:1:24: kv_cache.block_size: 512 is out of range (1..256; the attention kernels' limit)"},
	{"toplow.yaml", "sampling: {top_p: 1.5}\n",
	 DIR "/toplow.yaml:1:19: sampling.top_p: 1.5 is out of range (0..1, not 0; 1: off)"},
	{"seed.yaml", "sampling: {seed: -1}\n",
	 DIR "/seed.yaml:1:18: sampling.seed: expected an unsigned integer, got '-1'"},
	{"pools.yaml", "kv_cache:\n  pool_blocks: 10\n  pool_mib: 10\n",
	 DIR "/pools.yaml:3:13: kv_cache.pool_mib: give pool_blocks or pool_mib, not both (the other is at "
	 "line 2)"},
	{"bool.yaml", "ui:\n  panels: yes\n", DIR "/bool.yaml:2:11: ui.panels: expected true or false, got 'yes'"},
	{"map.yaml", "kv_cache: 5\n",
	 DIR "/map.yaml:1:11: kv_cache: expected a mapping of keys, got a single value"},
	{"seq.yaml", "threads: [1, 2]\n", DIR "/seq.yaml:1:10: threads: expected an integer, got a list"},
	{"color.yaml", "ui: {tab_colors: [red, pink]}\n",
	 DIR "/color.yaml:1:24: ui.tab_colors: unknown colour 'pink' (black, red, green, blue, magenta, "
	 "cyan, white)"},
	/* #40 item 15: yellow is the shared blocks' colour, no tab's */
	{"yellow.yaml", "ui: {tab_colors: [red, yellow]}\n",
	 DIR "/yellow.yaml:1:24: ui.tab_colors: yellow marks shared blocks; a tab may not use it"},
	{"merge.yaml", "base: &b {block_size: 8}\nkv_cache:\n  <<: *b\n",
	 DIR "/merge.yaml:1:1: base: unknown top-level key (known: model, draft_model, threads, context, "
	 "kv_cache, prefill, speculative, sampling, system_prompts, ui, default_system_prompt, tabs)"},
	{"merge2.yaml", "kv_cache:\n  <<: {block_size: 8}\n",
	 DIR "/merge2.yaml:2:3: kv_cache: merge keys (<<) are not supported; write the keys out"},
	{"tabprompt.yaml", "tabs:\n  - name: a\n  - name: b\n    system_prompt: poet\n",
	 DIR "/tabprompt.yaml:4:20: tabs[1]: system_prompt 'poet' is not among system_prompts"},
	{"tabname.yaml", "tabs:\n  - system_prompt: story\n",
	 DIR "/tabname.yaml:2:5: tabs[0]: a tab needs a non-empty name"},
	{"tabkey.yaml", "tabs:\n  - name: a\n    colour: red\n",
	 DIR "/tabkey.yaml:3:5: tabs[0]: unknown key 'colour' (known: name, system_prompt, sampling)"},
	{"tabsamp.yaml", "tabs:\n  - name: a\n    sampling: {top_k: x}\n",
	 DIR "/tabsamp.yaml:3:23: tabs[0].sampling.top_k: expected an integer, got 'x'"},
	{"notabs.yaml", "tabs: []\n", DIR "/notabs.yaml:1:7: tabs: at least one tab is needed"},
	{"defprompt.yaml", "default_system_prompt: poet\n",
	 DIR "/defprompt.yaml:1:24: default_system_prompt: 'poet' is not among system_prompts"},
	{"prompts.yaml", "system_prompts:\n  a: x\n  a: y\n",
	 DIR "/prompts.yaml:3:3: system_prompts: duplicate key 'a' (first at line 2)"},
	{"prompttype.yaml", "system_prompts:\n  a: [x]\n",
	 DIR "/prompttype.yaml:2:6: system_prompts.a: expected a string, got a list"},
	{"overflow.yaml", "context: {limit: 512, overflow: wrap}\n",
	 DIR "/overflow.yaml:1:33: context.overflow: must be drop, shift or refuse"},
	{"ctxkey.yaml", "context: {size: 512}\n",
	 DIR "/ctxkey.yaml:1:11: context: unknown key 'size' (known: limit, overflow)"},
	{"ctxneg.yaml", "context: -1\n", DIR "/ctxneg.yaml:1:10: context: -1 is out of range (0..16777216; 0: the model's training context)"},
	{"model.yaml", "threads: 1\nmodel: no/such.gguf\n",
	 DIR "/model.yaml:2:8: model: cannot read 'no/such.gguf': No such file or directory"},
};

static void test_bad_files(void)
{
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		write_text(bad[i].name, bad[i].text);
		char path[256];
		snprintf(path, sizeof path, DIR "/%s", bad[i].name);
		cfg c;
		cfg_init(&c);
		err e = {0};
		CHECK_(cfg_load(&c, path, &e) == -1 && !strcmp(e.msg, bad[i].msg),
		       "%s:\n  got  '%s'\n  want '%s'", bad[i].name, e.msg, bad[i].msg);
		cfg_deinit(&c);
	}
	cfg c;
	cfg_init(&c);
	err e = {0};
	CHECK(cfg_load(&c, DIR "/missing.yaml", &e) == -1);
	CHECK_(!strcmp(e.msg, DIR "/missing.yaml: cannot open: No such file or directory"), "%s", e.msg);
	cfg_deinit(&c);
}

/* context: a number alone is the limit; the mapping also sets the overflow. */
static void test_context_forms(void)
{
	cfg c;
	cfg_init(&c);
	err e = {0};
	write_text("ctx1.yaml", "context: 300\n");
	CHECK(cfg_load(&c, DIR "/ctx1.yaml", &e) == 0 && c.context == 300 && !strcmp(c.overflow, "drop"));
	write_text("ctx2.yaml", "context:\n  overflow: shift\n  limit: 512\n");
	CHECK_(cfg_load(&c, DIR "/ctx2.yaml", &e) == 0 && c.context == 512 && !strcmp(c.overflow, "shift"), "%s",
	       e.msg);
	write_text("ctx3.yaml", "context: {overflow: refuse}\n");
	CHECK(cfg_load(&c, DIR "/ctx3.yaml", &e) == 0 && c.context == 512 && !strcmp(c.overflow, "refuse"));
	cfg_deinit(&c);
}

/* kv_cache.store: a directory, off, or ~ for the chat's default (NULL). */
static void test_store(void)
{
	cfg c;
	cfg_init(&c);
	err e = {0};
	CHECK(c.kv_store == NULL);
	write_text("store1.yaml", "kv_cache: {store: /tmp/kv}\n");
	CHECK_(cfg_load(&c, DIR "/store1.yaml", &e) == 0 && c.kv_store && !strcmp(c.kv_store, "/tmp/kv"), "%s",
	       e.msg);
	write_text("store2.yaml", "kv_cache: {store: off}\n");
	CHECK(cfg_load(&c, DIR "/store2.yaml", &e) == 0 && c.kv_store && !strcmp(c.kv_store, "off"));
	write_text("store3.yaml", "kv_cache: {store: ~}\n");
	CHECK(cfg_load(&c, DIR "/store3.yaml", &e) == 0 && c.kv_store == NULL);
	write_text("store4.yaml", "kv_cache: {store: [a]}\n");
	CHECK(cfg_load(&c, DIR "/store4.yaml", &e) == -1 && strstr(e.msg, "kv_cache.store"));
	cfg_deinit(&c);
}

/* cfg_check after flags: what a file cannot say by itself. */
static void test_check(void)
{
	cfg c;
	cfg_init(&c);
	err e = {0};
	CHECK(cfg_check(&c, &e) == 0);
	c.pool_mib = 8;
	CHECK(cfg_check(&c, &e) == -1 && strstr(e.msg, "exactly one of pool_blocks and pool_mib"));
	c.pool_mib = 0;
	free(c.tabs[0].system_prompt);
	c.tabs[0].system_prompt = xstrdup("nope");
	CHECK(cfg_check(&c, &e) == -1 && strstr(e.msg, "tabs[0]: system_prompt 'nope'"));
	cfg_deinit(&c);
}

/* The command line reports the same messages and overrides the file. */
static void test_cli(void)
{
	static run_result r;
	run_pagechat(&r, "--config " DIR "/dup.yaml");
	CHECK_(r.status == 1 && strstr(r.errout, "pagechat: " DIR "/dup.yaml:3:3: kv_cache: duplicate key"),
	       "status %d: %s", r.status, r.errout);
	run_pagechat(&r, "--config " DIR "/missing.yaml");
	CHECK(r.status == 1 && strstr(r.errout, "missing.yaml: cannot open"));
	run_pagechat(&r, "--config " DIR "/full.yaml --pool-blocks 10 --pool-mib 5");
	CHECK(r.status == 1 && strstr(r.errout, "not both"));
	run_pagechat(&r, "--config " DIR "/full.yaml --prompt nope");
	CHECK(r.status == 1 && strstr(r.errout, "default_system_prompt 'nope'"));
	run_pagechat(&r, "--bogus");
	CHECK(r.status == 2 && strstr(r.errout, "unknown flag '--bogus'"));
	/* a valid setup without a terminal: the usage, not the chat */
	run_pagechat(&r, "--config " DIR "/full.yaml --temp 0.1 --pool-blocks 32");
	CHECK(r.status == 2 && strstr(r.errout, "needs a terminal"));
	run_pagechat(&r, "chat --help");
	CHECK(r.status == 0 && strstr(r.out, "--resume"));
}

int main(void)
{
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR) == 0);
	test_default_file();
	test_full_file();
	test_bad_files();
	test_check();
	test_context_forms();
	test_store();
	test_cli();
	return TEST_DONE();
}
