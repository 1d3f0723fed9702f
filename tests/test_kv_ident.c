/* tests/test_kv_ident.c: what a block in the disk store is keyed by, checked
 * by the tokens that come out (issue 42, findings 7 and 8).
 * - The model fingerprint covers every byte of the weights: a copy of the
 *   random 256x4 model runs once with a store, then is edited in place in
 *   the middle of each layer's K projection (same size, same inode, the
 *   modification time set back) and run again over the same store; its
 *   greedy tokens must equal a run of the edited file without a store, so
 *   none of the original's blocks was read. The hash is cached by file
 *   identity in the store (an entry planted for the file's identity is what
 *   the fingerprint then uses).
 * - A context shift's salt covers the conversation's ids: conversations A
 *   and B on the demo model differ only in their first question (the same
 *   number of tokens), which the shift drops, so their shifted prompts are
 *   the same ids. A shifts on an engine over a store; B then runs on a
 *   second engine over the same store and must answer as B does on an
 *   engine without one (not with the rows A rotated). */
#include "base/files.h"
#include "conv/conv.h"
#include "engine/core.h"
#include "kv/store.h"
#include "kv/tier.h"
#include "models/gguf.h"
#include "tests/test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RAND "build/models/rand-256x4-f32.gguf"
#define DEMO "../shared/models/stories260K.gguf"
#define ROOT "build/test-kv-ident"
#define GEN 16

typedef struct answer {
	int32_t ids[GEN];
	int n;
} answer;

static answer got[16];

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	if (ev->kind == CORE_EV_TOKEN && ev->req >= 0 && ev->req < 16 && got[ev->req].n < GEN)
		got[ev->req].ids[got[ev->req].n++] = ev->token;
}

static core_request greedy_request(int64_t id, const int32_t *prompt, int n)
{
	samp_params sp = samp_default_params();
	sp.temp = 0;
	return (core_request){.id = id, .conv = (int)id, .prompt = prompt, .n_prompt = n, .samp = sp,
			      .max_tokens = GEN, .n = 1, .ignore_eos = true};
}

static void run_all(core *c)
{
	err e = {0};
	int rc = 0;
	while (!core_idle(c) && rc >= 0)
		rc = core_step(c, &e);
	CHECK_(rc >= 0, "step: %s", e.msg);
}

static bool same(const answer *a, const answer *b)
{
	return a->n == b->n && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids);
}

/* ---- the fingerprint covers every weight ---- */

/* Greedy tokens for a fixed 100-token prompt on the model at path, with the
 * store at dir (NULL: none); *from_disk gets the prompt tokens read from it. */
static answer run_model(const char *path, const char *dir, int64_t *from_disk)
{
	memset(got, 0, sizeof got);
	err e = {0};
	llama_params lp = {.max_tokens = 256};
	llama_model *m = llama_open(path, &lp, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (!m)
		return got[0];
	core_params p = {.model = m, .pool_blocks = 64, .kv_store = dir, .check = true};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	int32_t prompt[100];
	for (int i = 0; i < 100; i++)
		prompt[i] = i ? 3 + (i * 37) % 500 : 1;
	core_request r = greedy_request(0, prompt, 100);
	CHECK(c && core_submit(c, &r, &e) == 0);
	if (c) {
		run_all(c);
		core_stats st;
		core_get_stats(c, &st);
		*from_disk = st.cached_store;
		core_free(c);
	}
	llama_free(m);
	CHECK_EQ_INT(got[0].n, GEN);
	return got[0];
}

/* Flips the sign of the middle three quarters of every blk.N.attn_k.weight
 * (f32) in the file at path, in place, then sets its modification time back:
 * the same size, inode and mtime, other weights. */
static void edit_in_place(const char *path)
{
	err e = {0};
	size_t len;
	char *buf = file_read_all(path, (size_t)1 << 27, "the model", &len, &e);
	gguf_file *f = buf ? gguf_open_mem(buf, len, path, &e) : NULL;
	CHECK_(f != NULL, "%s", e.msg);
	struct stat before;
	CHECK(stat(path, &before) == 0);
	int fd = open(path, O_WRONLY);
	int edited = 0;
	for (int l = 0; f && fd >= 0; l++) {
		char name[64];
		snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
		const gguf_tensor *t = gguf_find_tensor(f, name);
		if (!t)
			break;
		CHECK(t->type == DT_F32 && t->n_bytes >= 32768);
		size_t off = (size_t)((const char *)t->data - buf), lo = (size_t)t->n_bytes / 8 & ~(size_t)3,
		       hi = (size_t)t->n_bytes * 7 / 8 & ~(size_t)3;
		for (size_t i = lo + 3; i < hi; i += 4) /* little-endian f32: the sign is byte 3's top bit */
			buf[off + i] ^= (char)0x80;
		CHECK(pwrite(fd, buf + off + lo, hi - lo, (off_t)(off + lo)) == (ssize_t)(hi - lo));
		edited++;
	}
	CHECK(fd >= 0 && edited >= 4);
	if (fd >= 0)
		close(fd);
	struct timespec ts[2] = {before.st_atim, before.st_mtim};
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
	struct stat after;
	CHECK(stat(path, &after) == 0 && after.st_size == before.st_size && after.st_ino == before.st_ino &&
	      after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
	gguf_close(f);
	free(buf);
}

static void test_edited_model(void)
{
	const char *model = ROOT "/model.gguf", *dir = ROOT "/store";
	CHECK(system("cp " RAND " " ROOT "/model.gguf") == 0);
	int64_t disk = 0;
	answer orig = run_model(model, NULL, &disk);
	answer first = run_model(model, dir, &disk);
	CHECK(same(&orig, &first));
	answer again = run_model(model, dir, &disk);
	CHECK_(same(&orig, &again) && disk >= 96, "the same model over its store: %lld tokens read", (long long)disk);

	edit_in_place(model);
	answer want = run_model(model, NULL, &disk);
	CHECK_(!same(&want, &orig), "the edit did not change the greedy tokens: it shows nothing");
	answer edited = run_model(model, dir, &disk);
	CHECK_(same(&edited, &want), "an edited model of the same size and mtime answered with other tokens than "
	       "without a store");
	CHECK_(disk == 0, "an edited model of the same size and mtime read %lld tokens of the original's blocks",
	       (long long)disk);
	answer edited2 = run_model(model, dir, &disk);
	CHECK_(same(&edited2, &want) && disk >= 96, "the edited model over its own blocks: %lld tokens read",
	       (long long)disk);

	/* the hash is taken from the cache under the file's identity */
	err e = {0};
	llama_params lp = {.max_tokens = 256};
	llama_model *m = llama_open(model, &lp, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (!m)
		return;
	uint64_t fp = kv_tier_fingerprint(m, KV_F16, KV_F16, 16, dir), w;
	CHECK(fp == kv_tier_fingerprint(m, KV_F16, KV_F16, 16, NULL));
	gguf_ident id;
	CHECK(gguf_identity(llama_file(m), &id) && kv_store_weights_get(dir, &id, &w));
	kv_store_weights_put(dir, &id, w ^ 1);
	CHECK(kv_tier_fingerprint(m, KV_F16, KV_F16, 16, dir) != fp);
	id.ctime_ns++;                          /* another identity: not found */
	CHECK(!kv_store_weights_get(dir, &id, &w));
	llama_free(m);
}

/* ---- a shift's salt covers the conversation's ids ---- */

static void add_answer(conv *c, int msg, const tok *t, const char *text)
{
	int32_t ids[256];
	int n = tok_encode(t, text, strlen(text), 0, ids, 256);
	for (int i = 0; i < n; i++)
		conv_answer_id(c, msg, ids[i]);
	conv_append(c, msg, text, strlen(text));
	conv_answer_end(c, msg, "length", NULL);
}

/* Three answered turns (fixed answers), the first one q0 and a0; then a
 * fourth question, whose turn (in *last) overflows the context. */
static void three_turns(conv *c, const conv_model *m, const tok *t, const char *q0, const char *a0,
			conv_turn *last)
{
	static const char *const answers[] = {
		NULL,
		" The sun was warm and the birds sang in the tall green trees.",
		" At night they went home and had a big bowl of soup together.",
	};
	conv_init(c, "x", "", "Once upon a time there was a little girl named Lily.");
	for (int i = 0; i < 3; i++) {
		char q[128];
		snprintf(q, sizeof q, " What happened next, number %d?", i);
		conv_add(c, CONV_USER, i ? q : q0, strlen(i ? q : q0));
		conv_turn turn;
		err e = {0};
		CHECK_(conv_turn_start(c, m, GEN, &turn, &e) == 0, "%s", e.msg);
		CHECK(turn.shift.n_old == 0);
		add_answer(c, turn.msg, t, i ? answers[i] : a0);
		conv_turn_deinit(&turn);
	}
	conv_add(c, CONV_USER, " And then?", 10);
	err e = {0};
	CHECK_(conv_turn_start(c, m, GEN, last, &e) == 0, "%s", e.msg);
}

static answer run_turn(core *c, int64_t id, const conv_turn *t)
{
	core_request r = greedy_request(id, NULL, 0);
	conv_turn_request(t, &r);
	r.max_tokens = GEN;
	err e = {0};
	CHECK_(core_submit(c, &r, &e) == 0, "%s", e.msg);
	run_all(c);
	return got[id];
}

static core *engine(llama_model *m, const tok *tk, const char *dir, int64_t host_blocks)
{
	core_params p = {.model = m, .tok = tk, .pool_blocks = 40, .host_blocks = host_blocks, .kv_store = dir,
			 .check = true};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	return c;
}

/* t's turn on c after its old history (so the shift finds it cached);
 * returns the answer and checks that the turn shifted. */
static answer shifted_turn(core *c, int64_t id, const conv_turn *t)
{
	core_request old = greedy_request(id, t->shift.old, t->shift.n_old);
	old.max_tokens = 1;
	err e = {0};
	CHECK(core_submit(c, &old, &e) == 0);
	run_all(c);
	core_stats before, after;
	core_get_stats(c, &before);
	answer a = run_turn(c, id + 1, t);
	core_get_stats(c, &after);
	CHECK_(after.shifted_tokens > before.shifted_tokens, "turn %lld shifted no tokens", (long long)id + 1);
	return a;
}

/* Pushes every block out of c's pool (and through its host tier to the
 * store) with unrelated prompts. */
static void flush(core *c)
{
	int32_t p[150];
	for (int r = 0; r < 6; r++) {
		for (int i = 0; i < 150; i++)
			p[i] = i ? 3 + (i * 7 + r * 101) % 500 : 1;
		core_request q = greedy_request(7, p, 150);
		q.max_tokens = 1;
		err e = {0};
		CHECK(core_submit(c, &q, &e) == 0);
		run_all(c);
	}
}

static void test_shift_salt(void)
{
	err e = {0};
	llama_params lp = {.max_tokens = 512};
	llama_model *m = llama_open(RAND, &lp, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	CHECK_(tk != NULL, "%s", e.msg);
	if (!tk)
		return;
	conv_model cm;
	conv_model_init(&cm, tk, TMPL_NONE, 150, 16, CONV_SHIFT);
	conv a, b;
	conv_turn ta, tb;
	three_turns(&a, &cm, tk, " Lily saw a cat in the garden.",
		    " She ran to the park and played with her friends all day long.", &ta);
	three_turns(&b, &cm, tk, " Tom saw a dog by the river.",
		    " He jumped in water and swam with a fish.", &tb);
	/* what makes the case: both shift the same way to the same prompt, and
	 * what they dropped differs */
	CHECK_(ta.shift.n_old > 0 && ta.n_dropped >= 2, "no shift (%d old tokens, %d dropped)", ta.shift.n_old,
	       ta.n_dropped);
	CHECK(tb.shift.n_old == ta.shift.n_old && tb.shift.keep == ta.shift.keep &&
	      tb.shift.discard == ta.shift.discard && tb.salt_block == ta.salt_block);
	CHECK(tb.n_prompt == ta.n_prompt && !memcmp(tb.prompt, ta.prompt, (size_t)ta.n_prompt * sizeof *ta.prompt));
	CHECK(memcmp(tb.shift.old, ta.shift.old, (size_t)ta.shift.n_old * sizeof *ta.shift.old) != 0);
	CHECK(ta.salt != tb.salt);

	/* the references: B's shifted turn, and B's prompt computed afresh,
	 * each on an engine of its own without a store */
	memset(got, 0, sizeof got);
	core *r1 = engine(m, tk, NULL, 0), *r2 = engine(m, tk, NULL, 0);
	if (!r1 || !r2)
		return;
	answer b_shift = shifted_turn(r1, 0, &tb), b_fresh = run_turn(r2, 2, &tb);
	core_free(r1);
	core_free(r2);

	/* A shifts on an engine over a store (host tier 4 blocks); its shifted
	 * blocks go down to the store */
	const char *dir = ROOT "/shift";
	core *c1 = engine(m, tk, dir, 4);
	if (!c1)
		return;
	answer ans_a = shifted_turn(c1, 3, &ta);
	CHECK_(!same(&ans_a, &b_shift) && !same(&ans_a, &b_fresh), "A's answer equals B's: the case shows nothing");
	flush(c1);
	core_stats st;
	core_get_stats(c1, &st);
	CHECK_(st.store_written > 0, "nothing went down to the store");
	core_free(c1);
	/* B on another engine over the store (its old history is not cached
	 * there: nothing to shift) finds none of them and computes afresh */
	core *c2 = engine(m, tk, dir, 0);
	answer ans_b = c2 ? run_turn(c2, 8, &tb) : (answer){0};
	CHECK_(same(&ans_b, &b_fresh), "B after A on a shared store answered %s A's tokens",
	       same(&ans_b, &ans_a) ? "with" : "unlike B but not with");
	core_free(c2);
	/* A then B on one engine: B's shift makes its own blocks, A's stay A's */
	core *c3 = engine(m, tk, NULL, 0);
	if (c3) {
		shifted_turn(c3, 9, &ta);
		answer ans_b3 = shifted_turn(c3, 11, &tb);
		CHECK_(same(&ans_b3, &b_shift), "B after A on one engine answered %s A's tokens",
		       same(&ans_b3, &ans_a) ? "with" : "unlike B but not with");
		core_free(c3);
	}
	conv_turn_deinit(&ta);
	conv_turn_deinit(&tb);
	conv_deinit(&a);
	conv_deinit(&b);
	tok_free(tk);
	llama_free(m);
}

int main(void)
{
	mkdir("build", 0755);
	CHECK(system("rm -rf " ROOT " && mkdir -p " ROOT " && chmod 700 " ROOT) == 0);
	test_edited_model();
	test_shift_salt();
	return TEST_DONE();
}
