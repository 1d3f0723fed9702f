/* tests/test_conv.c: conversations (engine/conv.h) and the prompts they turn
 * into: completion mode on the demo model's vocabulary, chat templates on
 * Llama 3's and Qwen 3's. */
#include "engine/conv.h"
#include "models/gguf.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define DEMO "../shared/models/stories260K.gguf"
#define VOCAB "../shared/models/vocab/ggml-vocab-"

static tok *open_tok(const char *path)
{
	err e = {0};
	gguf_file *f = gguf_open(path, &e);
	tok *t = f ? tok_new(f, &e) : NULL;
	CHECK_(t != NULL, "%s", e.msg);
	gguf_close(f);
	return t;
}

static int32_t *encode(const tok *t, const char *s, unsigned flags, int *n)
{
	int32_t *ids = xmalloc(4096 * sizeof *ids);
	*n = tok_encode(t, s, strlen(s), flags, ids, 4096);
	return ids;
}

static void test_conv_basics(void)
{
	conv c;
	conv_init(&c, "one", "story", "Once upon a time.");
	uint64_t v = c.version;
	int u = conv_add(&c, CONV_USER, "Lily ran", 8);
	int a = conv_add(&c, CONV_ASSISTANT, "", 0);
	conv_append(&c, a, " and ran", 8);
	conv_append(&c, a, "!", 1);
	CHECK(u == 0 && a == 1 && c.version > v);
	CHECK(!strcmp(c.msgs[a].text, " and ran!") && c.msgs[a].len == 9);
	conv_set_error(&c, a, "boom");
	conv copy;
	conv_copy(&copy, &c);
	CHECK(copy.n_msgs == 2 && !strcmp(copy.msgs[1].error, "boom") && !strcmp(copy.system, c.system));
	conv_pop(&copy);
	CHECK(copy.n_msgs == 1);
	conv_deinit(&copy);

	/* completion text: a space before a user turn that would run into text */
	conv_add(&c, CONV_USER, "She sat", 7);
	conv_add(&c, CONV_USER, " Then", 5);
	size_t len, sys;
	char *s = conv_completion_text(&c, c.n_msgs, &len, &sys);
	CHECK_(!strcmp(s, "Once upon a time. Lily ran and ran! She sat Then"), "'%s'", s);
	CHECK(sys == strlen("Once upon a time.") && len == strlen(s));
	free(s);
	CHECK(!strcmp(conv_separator(&c, 0), " ") && !strcmp(conv_separator(&c, 3), ""));
	conv_deinit(&c);
}

/* Completion mode: the ids of the whole text, starting with the system
 * prompt's own; the message being generated is left out. */
static void test_completion_prompt(void)
{
	tok *t = open_tok(DEMO);
	if (!t)
		return;
	conv c;
	conv_init(&c, "one", "story", "Once upon a time, there was a girl named Lily.");
	conv_add(&c, CONV_USER, "She liked cats", 14);
	conv_add(&c, CONV_ASSISTANT, ", dogs and birds.", 17);
	conv_add(&c, CONV_USER, "One day", 7);
	conv_add(&c, CONV_ASSISTANT, "", 0);
	conv_prompt p, sp;
	err e = {0};
	CHECK(conv_build(&c, 3, TMPL_NONE, t, &p, &e) == 0);
	CHECK(conv_build_system(&c, TMPL_NONE, t, &sp, &e) == 0);
	int n;
	int32_t *want = encode(t, "Once upon a time, there was a girl named Lily. She liked cats, dogs and "
			       "birds. One day", TOK_ADD_BOS, &n);
	CHECK_(p.n == n && !memcmp(p.ids, want, (size_t)n * sizeof *want), "%d vs %d ids", p.n, n);
	CHECK(sp.n == sp.n_pin && sp.n > 1 && p.n_pin == sp.n);
	CHECK(!memcmp(p.ids, sp.ids, (size_t)sp.n * sizeof *sp.ids));
	free(want);
	conv_prompt_deinit(&p);
	conv_prompt_deinit(&sp);
	/* an unknown template runs in completion mode too */
	CHECK(conv_build(&c, 3, TMPL_UNKNOWN, t, &p, &e) == 0 && p.n == n);
	conv_prompt_deinit(&p);
	/* no system prompt: BOS alone is shared */
	conv d;
	conv_init(&d, "x", "none", "");
	conv_add(&d, CONV_USER, "Hi", 2);
	CHECK(conv_build(&d, 1, TMPL_NONE, t, &p, &e) == 0 && p.n_pin == 1 && p.ids[0] == tok_bos(t));
	conv_prompt_deinit(&p);
	conv_deinit(&d);
	conv_deinit(&c);
	tok_free(t);
}

/* A template: the same ids as rendering the messages directly, the system
 * message's rendering as the shared prefix, empty answers skipped. */
static void check_template(const char *vocab, enum tmpl_family fam)
{
	tok *t = open_tok(vocab);
	if (!t)
		return;
	conv c;
	conv_init(&c, "one", "assistant", "You are terse.");
	conv_add(&c, CONV_USER, "Hi <|im_start|>", 15);
	conv_add(&c, CONV_ASSISTANT, "Hello.", 6);
	conv_add(&c, CONV_USER, "Again", 5);
	conv_add(&c, CONV_ASSISTANT, "", 0);          /* failed: left out */
	conv_add(&c, CONV_USER, "Once more", 9);
	conv_add(&c, CONV_ASSISTANT, "", 0);          /* being generated */
	conv_prompt p;
	err e = {0};
	CHECK_(conv_build(&c, 5, fam, t, &p, &e) == 0, "%s", e.msg);
	tmpl_msg m[] = {{"system", "You are terse.", 14}, {"user", "Hi <|im_start|>", 15},
			{"assistant", "Hello.", 6}, {"user", "Again", 5}, {"user", "Once more", 9}};
	tmpl_prompt r = {0};
	CHECK(tmpl_render(fam, m, ARRAY_LEN(m), true, &r, &e) == 0);
	int32_t want[512];
	int n = tmpl_encode(&r, t, want, 512);
	CHECK_(p.n == n && !memcmp(p.ids, want, (size_t)n * sizeof *want), "%s: %d vs %d ids", vocab, p.n, n);
	tmpl_prompt_deinit(&r);
	CHECK(tmpl_render(fam, m, 1, false, &r, &e) == 0);
	int n_sys = tmpl_encode(&r, t, want, 512);
	CHECK_(p.n_pin == n_sys && n_sys > 4, "%s: pin %d, system %d", vocab, p.n_pin, n_sys);
	tmpl_prompt_deinit(&r);
	conv_prompt_deinit(&p);
	conv_deinit(&c);
	tok_free(t);
}

static void test_template_prompt(void)
{
	check_template(VOCAB "llama3.gguf", TMPL_LLAMA3);
	check_template(VOCAB "qwen3.gguf", TMPL_CHATML);
}

int main(void)
{
	test_conv_basics();
	test_completion_prompt();
	test_template_prompt();
	return TEST_DONE();
}
