/* tests/test_conv.c: conversations (conv/conv.h) and the token history
 * their turns are built from: completion mode on the demo model's
 * vocabulary; chat templates on Llama 3's, Qwen 3's and Phi-3's (the first
 * turn, and any history re-rendered from text, give exactly the ids of the
 * whole rendered conversation; later turns extend the previous prompt and
 * the answer's own ids); re-rendering when the model changes; regenerate;
 * the overflow policies (drop, shift, refuse) and their notes. */
#include "conv/conv.h"
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

static bool starts_with(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na >= nb && !memcmp(a, b, (size_t)nb * sizeof *a);
}

/* A made-up answer: its ids streamed in, its text appended, then a stop. */
static void answer(conv *c, int msg, const tok *t, const char *text, const char *finish)
{
	int n;
	int32_t *ids = encode(t, text, 0, &n);
	for (int i = 0; i < n; i++)
		conv_answer_id(c, msg, ids[i]);
	conv_append(c, msg, text, strlen(text));
	conv_answer_end(c, msg, finish, NULL);
	free(ids);
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
	int32_t ids[] = {5, 6, 7};
	conv_set_ids(&c, a, ids, 3);
	conv_set_note(&c, a, "a note");
	conv_set_sys_ids(&c, ids, 2);
	conv_set_origin(&c, "m.gguf", 42, 0xabc, TMPL_LLAMA3);
	conv copy;
	conv_copy(&copy, &c);
	CHECK(copy.n_msgs == 2 && !strcmp(copy.msgs[1].error, "boom") && !strcmp(copy.system, c.system));
	CHECK(copy.msgs[1].n_ids == 3 && copy.msgs[1].ids[2] == 7 && !strcmp(copy.msgs[1].note, "a note"));
	CHECK(copy.n_sys_ids == 2 && copy.has_sys_ids && !strcmp(copy.origin.path, "m.gguf") &&
	      copy.origin.size == 42 && copy.origin.fam == TMPL_LLAMA3);
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
	CHECK(conv_overflow_parse("shift") == CONV_SHIFT && conv_overflow_parse("x") == -1);
	CHECK(!strcmp(conv_overflow_name(CONV_REFUSE), "refuse"));
}

/* Completion mode: the first prompt is the whole text's ids (system first);
 * the next one extends it with the answer's own ids and the new text. */
static void test_completion_turns(void)
{
	tok *t = open_tok(DEMO);
	if (!t)
		return;
	conv_model m;
	conv_model_init(&m, t, TMPL_NONE, 512, 16, CONV_DROP);
	conv c;
	conv_init(&c, "one", "story", "Once upon a time, there was a girl named Lily.");
	conv_add(&c, CONV_USER, "She liked cats", 14);
	conv_turn t1, t2;
	err e = {0};
	CHECK_(conv_turn_start(&c, &m, 32, &t1, &e) == 0, "%s", e.msg);
	int n;
	int32_t *want = encode(t, "Once upon a time, there was a girl named Lily. She liked cats", TOK_ADD_BOS, &n);
	CHECK_(t1.n_prompt == n && !memcmp(t1.prompt, want, (size_t)n * sizeof *want), "%d vs %d ids",
	       t1.n_prompt, n);
	free(want);
	int n_sys;
	int32_t *sys = encode(t, "Once upon a time, there was a girl named Lily.", TOK_ADD_BOS, &n_sys);
	CHECK(t1.n_pin == n_sys && starts_with(t1.prompt, t1.n_prompt, sys, n_sys));
	CHECK(t1.n_stop == 0 && t1.max_tokens == 32 && t1.msg == 1 && !c.msgs[1].note);
	free(sys);
	/* ", dogs and birds." as odd ids: a space token alone, then the rest */
	int32_t odd[] = {tok_lookup(t, "\xe2\x96\x81", 3)};
	CHECK(odd[0] >= 0);
	conv_answer_id(&c, t1.msg, odd[0]);
	answer(&c, t1.msg, t, "dogs and birds.", "length");
	conv_add(&c, CONV_USER, "One day", 7);
	CHECK(conv_turn_start(&c, &m, 32, &t2, &e) == 0);
	CHECK(starts_with(t2.prompt, t2.n_prompt, t1.prompt, t1.n_prompt));
	CHECK_EQ_INT(t2.prompt[t1.n_prompt], odd[0]);
	CHECK(!t2.rebuilt && !c.msgs[t2.msg].note);
	conv_turn_deinit(&t1);
	conv_turn_deinit(&t2);
	/* an unknown template runs in completion mode too; no system prompt: BOS */
	conv d;
	conv_init(&d, "x", "none", "");
	conv_add(&d, CONV_USER, "Hi", 2);
	m.fam = TMPL_UNKNOWN;
	CHECK(conv_turn_start(&d, &m, 8, &t1, &e) == 0 && t1.n_pin == 1 && t1.prompt[0] == tok_bos(t));
	conv_turn_deinit(&t1);
	conv_deinit(&d);
	conv_deinit(&c);
	tok_free(t);
}

/* The ids of the whole conversation as the template renders it. */
static int rendered_ids(enum tmpl_family fam, const tok *t, const tmpl_msg *msgs, size_t n, bool gen,
			int32_t *out)
{
	tmpl_prompt r = {0};
	err e = {0};
	CHECK(tmpl_render(fam, msgs, n, gen, &r, &e) == 0);
	int k = tmpl_encode(&r, t, out, 4096);
	tmpl_prompt_deinit(&r);
	return k;
}

/* A template: the first turn is the whole rendering's ids; the second
 * extends the first prompt and the answer's ids; a history re-rendered from
 * the text (another template, then back) is the whole rendering again. */
static void check_template(const char *vocab, enum tmpl_family fam)
{
	tok *t = open_tok(vocab);
	if (!t)
		return;
	conv_model m;
	conv_model_init(&m, t, fam, 4096, 16, CONV_DROP);
	conv c;
	conv_init(&c, "one", "assistant", "You are terse.");
	conv_add(&c, CONV_USER, "Hi <|im_start|>", 15);
	conv_turn t1, t2, t3;
	err e = {0};
	CHECK_(conv_turn_start(&c, &m, 64, &t1, &e) == 0, "%s", e.msg);
	tmpl_msg msgs[] = {{"system", "You are terse.", 14}, {"user", "Hi <|im_start|>", 15},
			   {"assistant", "Hello.", 6}, {"user", "Again", 5}};
	int32_t *want = xmalloc(4096 * sizeof *want);
	int n = rendered_ids(fam, t, msgs, 2, true, want);
	CHECK_(t1.n_prompt == n && !memcmp(t1.prompt, want, (size_t)n * sizeof *want), "%s: %d vs %d ids", vocab,
	       t1.n_prompt, n);
	int n_sys = rendered_ids(fam, t, msgs, 1, false, want);
	CHECK_(t1.n_pin == n_sys && n_sys > 4, "%s: pin %d, system %d", vocab, t1.n_pin, n_sys);
	CHECK(t1.n_stop >= 1 && tok_is_eog(t, t1.stop[0]));
	answer(&c, t1.msg, t, "Hello.", "stop");
	conv_add(&c, CONV_USER, "Again", 5);
	CHECK(conv_turn_start(&c, &m, 64, &t2, &e) == 0);
	CHECK_(starts_with(t2.prompt, t2.n_prompt, t1.prompt, t1.n_prompt), "%s: not an extension", vocab);
	n = rendered_ids(fam, t, msgs, 4, true, want);
	/* "Hello." tokenizes alike alone and in the text, so here they agree */
	CHECK_(t2.n_prompt == n && !memcmp(t2.prompt, want, (size_t)n * sizeof *want), "%s: %d vs %d", vocab,
	       t2.n_prompt, n);
	/* regenerate: the answer goes, the prompt is the same ids again */
	conv_pop(&c);
	CHECK(conv_turn_start(&c, &m, 64, &t3, &e) == 0);
	CHECK(t3.n_prompt == t2.n_prompt && !memcmp(t3.prompt, t2.prompt, (size_t)t2.n_prompt * sizeof *want));
	conv_turn_deinit(&t3);
	conv_pop(&c);
	/* another template: re-rendered, and said so */
	conv_model other = m;
	other.fam = fam == TMPL_CHATML ? TMPL_LLAMA3 : TMPL_CHATML;
	CHECK(conv_turn_start(&c, &other, 64, &t3, &e) == 0 && t3.rebuilt);
	CHECK(c.msgs[t3.msg].note && strstr(c.msgs[t3.msg].note, "re-rendered"));
	conv_turn_deinit(&t3);
	conv_pop(&c);
	CHECK(conv_turn_start(&c, &m, 64, &t3, &e) == 0 && t3.rebuilt);
	CHECK_(t3.n_prompt == n && !memcmp(t3.prompt, want, (size_t)n * sizeof *want), "%s: rebuilt %d vs %d",
	       vocab, t3.n_prompt, n);
	conv_turn_deinit(&t1);
	conv_turn_deinit(&t2);
	conv_turn_deinit(&t3);
	free(want);
	conv_deinit(&c);
	tok_free(t);
}

static void test_template_turns(void)
{
	check_template(VOCAB "llama3.gguf", TMPL_LLAMA3);
	check_template(VOCAB "qwen3.gguf", TMPL_CHATML);
	check_template(VOCAB "phi-3.gguf", TMPL_PHI3);
}

/* An answer that never started leaves the history; one that streamed and
 * was cancelled keeps its ids and gets the template's closing. */
static void test_answers(void)
{
	tok *t = open_tok(VOCAB "llama3.gguf");
	if (!t)
		return;
	conv_model m;
	conv_model_init(&m, t, TMPL_LLAMA3, 4096, 16, CONV_DROP);
	conv c;
	conv_init(&c, "a", "", "");
	conv_add(&c, CONV_USER, "One", 3);
	conv_turn t1, t2, t3;
	err e = {0};
	CHECK(conv_turn_start(&c, &m, 16, &t1, &e) == 0);
	conv_answer_end(&c, t1.msg, "error", NULL);
	CHECK(c.msgs[t1.msg].n_ids == 0 && c.msgs[t1.msg].has_ids);
	conv_add(&c, CONV_USER, "Two", 3);
	CHECK(conv_turn_start(&c, &m, 16, &t2, &e) == 0 && !t2.rebuilt);
	answer(&c, t2.msg, t, "Half", "cancelled");
	CHECK_EQ_INT(c.msgs[t2.msg].n_gen, c.msgs[t2.msg].n_ids - c.msgs[t2.msg].n_open);
	conv_add(&c, CONV_USER, "Three", 5);
	CHECK(conv_turn_start(&c, &m, 16, &t3, &e) == 0);
	CHECK(starts_with(t3.prompt, t3.n_prompt, t2.prompt, t2.n_prompt));
	int32_t eot = tok_lookup(t, "<|eot_id|>", 10);
	const conv_msg *x = &c.msgs[t2.msg];
	CHECK(x->closed && x->ids[x->n_ids - 1] == eot);
	conv_turn_deinit(&t1);
	conv_turn_deinit(&t2);
	conv_turn_deinit(&t3);
	conv_deinit(&c);
	tok_free(t);
}

/* Fills c with k answered turns on m. */
static void talk(conv *c, const conv_model *m, const tok *t, int k)
{
	for (int i = 0; i < k; i++) {
		char q[64];
		snprintf(q, sizeof q, "Question number %d, a longer one than most", i);
		conv_add(c, CONV_USER, q, strlen(q));
		conv_turn turn;
		err e = {0};
		CHECK_(conv_turn_start(c, m, 16, &turn, &e) == 0, "%s", e.msg);
		answer(c, turn.msg, t, "An answer of a few words that fills the context.", "length");
		conv_turn_deinit(&turn);
	}
}

static void test_overflow(void)
{
	tok *t = open_tok(VOCAB "qwen3.gguf");
	if (!t)
		return;
	conv_model m;
	conv_model_init(&m, t, TMPL_CHATML, 160, 16, CONV_REFUSE);
	conv c;
	conv_init(&c, "o", "", "You are a careful assistant who reads every word.");
	talk(&c, &m, t, 3);
	int before = conv_history_tokens(&c), n_msgs = c.n_msgs;
	CHECK(before + 16 > 100);
	conv ref;
	conv_copy(&ref, &c);
	conv_add(&c, CONV_USER, "And now?", 8);
	conv_turn turn;
	err e = {0};
	/* refuse: an error in the answer, nothing else changes: the refused
	 * line is no part of the history, and is not sent with the next turn
	 * (#40 item 7) */
	CHECK(conv_turn_start(&c, &m, 64, &turn, &e) == -1 && strstr(e.msg, "context is full"));
	CHECK_(strstr(e.msg, "room for the answer (64)") && strstr(e.msg, "/set max_tokens N"), "%s", e.msg);
	CHECK(c.n_msgs == n_msgs + 2 && !strcmp(c.msgs[c.n_msgs - 1].finish, "error") && c.first == 0);
	conv_turn_deinit(&turn);
	CHECK(c.msgs[n_msgs].has_ids && c.msgs[n_msgs].n_ids == 0 && c.msgs[n_msgs + 1].n_ids == 0);
	CHECK(!conv_msg_sent(&c, n_msgs) && !conv_msg_sent(&c, n_msgs + 1) && conv_msg_sent(&c, n_msgs - 1));
	{
		/* a roomier context: the next turn's prompt is the one of the chat
		 * that never had the refused turn (ref) */
		conv_model big = m;
		big.n_ctx = 4096;
		conv r;
		conv_copy(&r, &c);
		conv_add(&r, CONV_USER, "Hello?", 6);
		conv_add(&ref, CONV_USER, "Hello?", 6);
		conv_turn tr;
		CHECK_(conv_turn_start(&r, &big, 64, &turn, &e) == 0, "%s", e.msg);
		CHECK_(conv_turn_start(&ref, &big, 64, &tr, &e) == 0, "%s", e.msg);
		CHECK_(turn.n_prompt == tr.n_prompt &&
		       !memcmp(turn.prompt, tr.prompt, (size_t)tr.n_prompt * sizeof *tr.prompt),
		       "the refused line was sent: %d tokens, %d without it", turn.n_prompt, tr.n_prompt);
		conv_turn_deinit(&turn);
		conv_turn_deinit(&tr);
		conv_deinit(&r);
		conv_deinit(&ref);
	}
	conv_pop(&c);
	CHECK(conv_msg_sent(&c, n_msgs)); /* its answer gone, the line is sent with the next one */
	/* shift: whole turns leave; the old history and the discarded range go to the engine */
	conv d;
	conv_copy(&d, &c);
	m.overflow = CONV_SHIFT;
	CHECK_(conv_turn_start(&c, &m, 64, &turn, &e) == 0, "%s", e.msg);
	CHECK(c.first > 0 && c.first % 2 == 0 && turn.n_dropped == c.first);
	CHECK(turn.shift.n_old > 0 && turn.shift.keep == c.n_sys_ids && turn.shift.discard > 0);
	CHECK(turn.salt != 0 && turn.salt_block == c.n_sys_ids / 16);
	CHECK(turn.n_prompt + 64 <= m.n_ctx);
	/* the new prompt is the old history with the range left out */
	CHECK(!memcmp(turn.prompt, turn.shift.old, (size_t)turn.shift.keep * sizeof *turn.prompt));
	CHECK(!memcmp(turn.prompt + turn.shift.keep, turn.shift.old + turn.shift.keep + turn.shift.discard,
		      (size_t)(turn.shift.n_old - turn.shift.keep - turn.shift.discard) * sizeof *turn.prompt));
	CHECK(c.msgs[turn.msg].note && strstr(c.msgs[turn.msg].note, "shifted out"));
	core_request r = {0};
	conv_turn_request(&turn, &r);
	CHECK(r.shift.n_old == turn.shift.n_old && r.salt == turn.salt && r.n_prompt == turn.n_prompt);
	conv_turn_deinit(&turn);
	/* drop: the same turns leave, the rest is rendered afresh, no salt */
	m.overflow = CONV_DROP;
	CHECK(conv_turn_start(&d, &m, 64, &turn, &e) == 0);
	CHECK(d.first == c.first && turn.shift.n_old == 0 && turn.salt == 0 && turn.rebuilt);
	CHECK(d.msgs[turn.msg].note && strstr(d.msgs[turn.msg].note, "dropped"));
	CHECK(turn.n_prompt + 64 <= m.n_ctx && !d.msgs[0].has_ids);
	conv_turn_deinit(&turn);
	/* a turn too long for the context alone */
	char big[2048];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	for (int i = 0; i < (int)sizeof big - 1; i += 4)
		big[i] = ' ';
	conv_add(&d, CONV_USER, big, strlen(big));
	CHECK(conv_turn_start(&d, &m, 64, &turn, &e) == -1 && strstr(e.msg, "even without the earlier"));
	CHECK_(strstr(e.msg, "lower max_tokens"), "%s", e.msg);
	conv_turn_deinit(&turn);
	conv_deinit(&d);
	conv_deinit(&c);
	tok_free(t);
}

int main(void)
{
	test_conv_basics();
	test_completion_turns();
	test_template_turns();
	test_answers();
	test_overflow();
	return TEST_DONE();
}
