/* tests/fuzz/fuzz_tmpl.c: chat templates on arbitrary conversations and
 * arbitrary template text.
 *
 * Input: byte 0 picks the family (low 7 bits, modulo TMPL_COUNT, so NONE
 * and UNKNOWN come up too) and bit 7 add_generation_prompt; byte 1 the
 * vocabulary tmpl_encode runs on (fuzz_vocab; one more value skips it);
 * byte 2 bit 0 says the rest is a JSON conversation (read with
 * tmpl_conversation_from_json), else the rest is messages split at FUZZ_SEP:
 * a role byte (0 system, 1 user, 2 assistant, else the role is the text up to
 * the first 0xFD) and the content. The whole input and every field also go
 * through tmpl_detect. Checked: rendering fails exactly for NONE and UNKNOWN,
 * the template's spans are sorted, disjoint, non-empty and inside the text,
 * and tmpl_encode's counts agree at every capacity with ids in range. */
#include "tests/fuzz/fuzz.h"

#include "models/json.h"
#include "models/tmpl.h"

#define MAX_MSGS 256

static const char *const std_roles[] = {"system", "user", "assistant"};

static void check_prompt(const tmpl_prompt *p)
{
	FUZZ_CHECK(p->text != NULL && p->text[p->len] == '\0');
	size_t end = 0;
	for (size_t i = 0; i < p->n_spans; i++) {
		const tok_span *s = &p->spans[i];
		FUZZ_CHECK(s->len > 0 && s->off >= end && s->off + s->len <= p->len);
		FUZZ_CHECK(i == 0 || s->off > end);       /* adjacent spans are joined */
		end = s->off + s->len;
	}
}

static void check_encode(const tmpl_prompt *p, const tok *t, enum tmpl_family fam)
{
	int need = tmpl_encode(p, t, NULL, 0);
	FUZZ_CHECK(need >= 0);
	int32_t *ids = xmalloc((size_t)MAX(need, 1) * sizeof *ids);
	FUZZ_CHECK(tmpl_encode(p, t, ids, need) == need);
	for (int i = 0; i < need; i++)
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
	int32_t few[3];
	int cap = MIN(need, 3);
	FUZZ_CHECK(tmpl_encode(p, t, few, cap) == need);
	FUZZ_CHECK(cap == 0 || memcmp(few, ids, (size_t)cap * sizeof *ids) == 0);
	int32_t stop[2];
	int n_stop = tmpl_stop_ids(fam, t, stop, 2);
	FUZZ_CHECK(n_stop >= 0 && n_stop <= 2);
	for (int i = 0; i < n_stop; i++)
		FUZZ_CHECK(stop[i] >= 0 && stop[i] < tok_n_vocab(t));
	free(ids);
}

static void render(enum tmpl_family fam, const tmpl_msg *msgs, size_t n, bool add_ass,
		   unsigned vocab)
{
	tmpl_prompt p;
	err e = {0};
	int rc = tmpl_render(fam, msgs, n, add_ass, &p, &e);
	FUZZ_CHECK((rc == 0) == (fam != TMPL_NONE && fam != TMPL_UNKNOWN));
	if (rc < 0) {
		FUZZ_CHECK(e.msg[0]);
		return;
	}
	check_prompt(&p);
	if (vocab < FUZZ_N_VOCABS)
		check_encode(&p, fuzz_vocab(vocab), fam);
	tmpl_prompt_deinit(&p);
}

static void from_json(fuzz_in in, enum tmpl_family fam, bool add_ass, unsigned vocab)
{
	err e = {0};
	json_doc *d = json_parse((const char *)in.p, in.n, &e);
	if (!d)
		return;
	tmpl_msg *msgs;
	size_t n;
	if (tmpl_conversation_from_json(json_root(d), &msgs, &n, &e) == 0) {
		render(fam, msgs, n, add_ass, vocab);
		free(msgs);
	} else {
		FUZZ_CHECK(e.msg[0]);
	}
	json_free(d);
}

static void from_fields(fuzz_in in, enum tmpl_family fam, bool add_ass, unsigned vocab)
{
	tmpl_msg msgs[MAX_MSGS] = {{0}};
	char *owned[2 * MAX_MSGS];
	size_t n = 0, n_owned = 0;
	while (in.n > 0 && n < MAX_MSGS) {
		fuzz_in f = fuzz_field(&in);
		FUZZ_CHECK(tmpl_detect((const char *)f.p, f.n) < TMPL_COUNT);
		uint8_t r = fuzz_byte(&f);
		const char *role = r < 3 ? std_roles[r] : NULL;
		if (!role) {
			const uint8_t *end = memchr(f.p, 0xfd, f.n);
			size_t k = end ? (size_t)(end - f.p) : 0;
			role = owned[n_owned++] = fuzz_copy(f.p, k, true);
			f.p += end ? k + 1 : 0;
			f.n -= end ? k + 1 : 0;
		}
		char *content = owned[n_owned++] = fuzz_copy(f.p, f.n, false);
		msgs[n++] = (tmpl_msg){.role = role, .content = content, .content_len = f.n};
	}
	render(fam, msgs, n, add_ass, vocab);
	for (size_t i = 0; i < n_owned; i++)
		free(owned[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FUZZ_CHECK(tmpl_detect((const char *)data, size) < TMPL_COUNT);
	fuzz_in in = {data, size};
	uint8_t b0 = fuzz_byte(&in), b1 = fuzz_byte(&in), b2 = fuzz_byte(&in);
	enum tmpl_family fam = (enum tmpl_family)((b0 & 0x7f) % TMPL_COUNT);
	bool add_ass = b0 & 0x80;
	unsigned vocab = b1 % (FUZZ_N_VOCABS + 1);
	const char *name = tmpl_name(fam);
	if (fam != TMPL_NONE && fam != TMPL_UNKNOWN)
		FUZZ_CHECK(tmpl_detect(name, strlen(name)) == fam);
	if (b2 & 1)
		from_json(in, fam, add_ass, vocab);
	else
		from_fields(in, fam, add_ass, vocab);
	return 0;
}
