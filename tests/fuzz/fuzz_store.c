/* tests/fuzz/fuzz_store.c: saved conversations (ui/store.h) on arbitrary bytes.
 *
 * Input: byte 0 options (bit 0 write a streaming journal beside the chat
 * file, bit 1 write a session file, bit 2 build the next turn's prompt with
 * conv_turn_start, from the saved token history), byte 1 the template family for that (modulo TMPL_COUNT); then
 * fields at FUZZ_SEP: the chat file, the journal, the session file. The files
 * go to a private temporary directory and are read back with store_load()
 * and store_session_load(), which must load or fail with a message naming
 * the file. A chat that loads must be well formed, and saving it and loading
 * the copy must give the same conversation (where its text is UTF-8: saving
 * writes U+FFFD for bytes that are not). */
#include "tests/fuzz/fuzz.h"

#include "models/tmpl.h"
#include "ui/store.h"

#define STORIES 2            /* fuzz_vocab index of stories260K */

static bool utf8(const char *s)
{
	return fuzz_utf8_ok(s, strlen(s));
}

static void check_chat(const conv *c)
{
	FUZZ_CHECK(c->name && c->prompt_name && c->system);
	FUZZ_CHECK(c->n_msgs >= 0 && c->n_msgs <= c->cap_msgs);
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		FUZZ_CHECK(m->role == CONV_USER || m->role == CONV_ASSISTANT);
		FUZZ_CHECK(m->text && m->len < m->cap && m->text[m->len] == '\0');
		FUZZ_CHECK(memchr(m->finish, '\0', sizeof m->finish) != NULL);
		FUZZ_CHECK(m->role == CONV_USER || m->finish[0]);
	}
}

/* b was saved from a and loaded back. */
static void check_same(const conv *a, const conv *b)
{
	FUZZ_CHECK(!utf8(a->name) || strcmp(a->name, b->name) == 0);
	FUZZ_CHECK(!utf8(a->prompt_name) || strcmp(a->prompt_name, b->prompt_name) == 0);
	FUZZ_CHECK(!utf8(a->system) || strcmp(a->system, b->system) == 0);
	FUZZ_CHECK(a->n_msgs == b->n_msgs);
	for (int i = 0; i < a->n_msgs && i < b->n_msgs; i++) {
		const conv_msg *x = &a->msgs[i], *y = &b->msgs[i];
		FUZZ_CHECK(x->role == y->role);
		/* only answers save their figures (a user message's are ignored) */
		FUZZ_CHECK(x->role == CONV_USER || x->n_gen == y->n_gen);
		if (fuzz_utf8_ok(x->text, x->len))
			FUZZ_CHECK(x->len == y->len && memcmp(x->text, y->text, x->len) == 0);
		if (x->role == CONV_ASSISTANT && utf8(x->finish))
			FUZZ_CHECK(strcmp(x->finish, y->finish) == 0);
		FUZZ_CHECK((x->error == NULL) == (y->error == NULL));
		if (x->error && y->error && utf8(x->error))
			FUZZ_CHECK(strcmp(x->error, y->error) == 0);
	}
}

static void build(const conv *c, enum tmpl_family fam)
{
	conv d;
	conv_copy(&d, c);
	conv_model m;
	conv_model_init(&m, fuzz_vocab(STORIES), fam, 4096, 16, (enum conv_overflow)(c->n_msgs % 3));
	conv_turn t;
	err e = {0};
	if (conv_turn_start(&d, &m, 64, &t, &e) == 0) {
		FUZZ_CHECK(t.n_prompt >= 0 && t.n_pin >= 0 && t.n_pin <= t.n_prompt && t.n_prompt < m.n_ctx);
		/* saved ids may be anything; the engine refuses those out of range */
		FUZZ_CHECK(t.msg == d.n_msgs - 1 && d.msgs[t.msg].role == CONV_ASSISTANT);
	} else {
		FUZZ_CHECK(e.msg[0] && !strcmp(d.msgs[d.n_msgs - 1].finish, "error"));
	}
	conv_turn_deinit(&t);
	conv_deinit(&d);
}

static void load_chat(const char *path, uint8_t opt, enum tmpl_family fam)
{
	conv c, again;
	err e = {0};
	if (store_load(&c, path, &e) < 0) {
		FUZZ_CHECK(strstr(e.msg, path) != NULL);
		FUZZ_NOTE("%s", e.msg);
		return;
	}
	check_chat(&c);
	char copy[512];
	snprintf(copy, sizeof copy, "%s", fuzz_tmp("copy.json"));
	FUZZ_CHECK(store_save(&c, copy, &e) == 0);
	if (store_load(&again, copy, &e) == 0) {
		check_same(&c, &again);
		conv_deinit(&again);
	} else {
		FUZZ_CHECK(!"a saved chat loads again");
		FUZZ_NOTE("%s", e.msg);
	}
	if (opt & 4)
		build(&c, fam);
	conv_deinit(&c);
}

static void load_session(void)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s", fuzz_tmp(""));
	char **files;
	int n, active;
	err e = {0};
	if (store_session_load(dir, &files, &n, &active, &e) < 0) {
		FUZZ_CHECK(e.msg[0]);
		return;
	}
	FUZZ_CHECK(n >= 0 && (n == 0 || files != NULL));
	for (int i = 0; i < n; i++) {
		FUZZ_CHECK(files[i] && !strchr(files[i], '/'));
		free(files[i]);
	}
	free(files);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	uint8_t opt = fuzz_byte(&in);
	enum tmpl_family fam = (enum tmpl_family)(fuzz_byte(&in) % TMPL_COUNT);
	fuzz_in file = fuzz_field(&in), journal = fuzz_field(&in), session = fuzz_field(&in);
	char path[512], jpath[600];
	snprintf(path, sizeof path, "%s", fuzz_tmp("chat.json"));
	snprintf(jpath, sizeof jpath, "%s.stream", path);
	fuzz_write(path, file.p, file.n);
	fuzz_write(jpath, opt & 1 ? journal.p : NULL, journal.n);
	fuzz_write(fuzz_tmp("session.json"), opt & 2 ? session.p : NULL, session.n);
	load_chat(path, opt, fam);
	load_session();
	return 0;
}
