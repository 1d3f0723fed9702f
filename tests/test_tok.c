/* tests/test_tok.c: the tokenizer against llama.cpp's reference ids
 * (../shared/testdata/tokenize.tsv on stories260K, the Llama 2 and Phi-3
 * SentencePiece vocabularies with their test-tokenizer-0 vectors), round trips
 * through the decoders, the streaming UTF-8 decoder, and bad metadata in
 * small GGUF images built here. */
#include "models/tok.h"
#include "tests/fuzz/gguf_gen.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define SHARED "../shared"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

/* Whole file, NUL-terminated; NULL if unreadable. */
static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *s = xmalloc((size_t)n + 1);
	size_t got = fread(s, 1, (size_t)n, fp);
	fclose(fp);
	s[got] = '\0';
	*len = got;
	return s;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes n hex digits of s into dst; returns bytes or -1. */
static int unhex(char *dst, const char *s, size_t n)
{
	if (n % 2)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		dst[i / 2] = (char)(hi * 16 + lo);
	}
	return (int)(n / 2);
}

/* Parses space-separated decimal ids of s[0..n) into ids; returns the count. */
static int parse_ids(const char *s, size_t n, int32_t *ids, int cap)
{
	int k = 0;
	size_t i = 0;
	while (i < n) {
		while (i < n && s[i] == ' ')
			i++;
		if (i >= n)
			break;
		long v = 0;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			v = v * 10 + (s[i++] - '0');
		if (k < cap)
			ids[k] = (int32_t)v;
		k++;
		while (i < n && s[i] != ' ')
			i++;
	}
	return k;
}

static tok *open_tok(const char *path, gguf_file **fp)
{
	err e = {0};
	*fp = gguf_open(path, &e);
	if (!*fp) {
		fprintf(stderr, "%s\n", e.msg);
		return NULL;
	}
	tok *t = tok_new(*fp, &e);
	if (!t)
		fprintf(stderr, "%s\n", e.msg);
	return t;
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, int n)
{
	fprintf(stderr, "  %s:", what);
	for (int i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

/* Encodes text, compares with want, and checks that both decoders give the
 * text back. Returns whether the ids matched. */
static bool check_case(const tok *t, const char *text, size_t len, unsigned flags,
		       const int32_t *want, int n_want, const char *label)
{
	int32_t ids[4096];
	int n = tok_encode(t, text, len, flags, ids, (int)ARRAY_LEN(ids));
	bool ok = n <= (int)ARRAY_LEN(ids) && same_ids(ids, n, want, n_want);
	CHECK_(ok, "%s: ids differ for %.60s", label, text);
	if (!ok) {
		print_ids("want", want, n_want);
		print_ids("got ", ids, MIN(n, (int)ARRAY_LEN(ids)));
		return false;
	}
	/* round trip, all at once: at_start drops the space SPM added */
	char *back = xmalloc(4 * len + 16);
	int m = tok_detokenize(t, ids, n, true, back, 4 * len + 16);
	CHECK_(m == (int)len && memcmp(back, text, len) == 0,
	       "%s: detokenize gives '%s' for '%.60s'", label, back, text);
	/* and streaming, one id at a time */
	tok_decoder d;
	tok_decoder_init(&d, true);
	size_t k = 0;
	for (int i = 0; i < n; i++) {
		int r = tok_decode(t, &d, ids[i], back + k, 4 * len + 16 - k);
		CHECK(r >= 0);
		k += (size_t)MAX(r, 0);
	}
	k += (size_t)MAX(tok_decode_flush(t, &d, back + k, 4 * len + 16 - k), 0);
	CHECK_(k == len && memcmp(back, text, len) == 0,
	       "%s: streaming decode gives '%.*s' for '%.60s'", label, (int)k, back, text);
	free(back);
	return true;
}

/* ------------------------------------------------------------------ */
/* Reference vectors                                                   */

static void test_tokenize_tsv(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/stories260K.gguf", &f);
	CHECK(t != NULL);
	size_t len;
	char *s = slurp(SHARED "/testdata/tokenize.tsv", &len);
	CHECK(s != NULL);
	if (!t || !s)
		goto out;
	CHECK_EQ_INT(tok_kind_of(t), TOK_SPM);
	CHECK_EQ_INT(tok_n_vocab(t), 512);
	CHECK_EQ_INT(tok_bos(t), 1);
	CHECK_EQ_INT(tok_eos(t), 2);
	int rows = 0, matched = 0;
	char *line = strchr(s, '\n') + 1;  /* skip the header */
	while (*line) {
		char *end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line);
		char *tab1 = memchr(line, '\t', (size_t)(end - line));
		char *tab2 = tab1 ? memchr(tab1 + 1, '\t', (size_t)(end - tab1 - 1)) : NULL;
		CHECK(tab2 != NULL);
		if (!tab2)
			break;
		char text[1024];
		int n_text = unhex(text, tab2 + 1, (size_t)(end - tab2 - 1));
		int32_t want[1024];
		int n_want = parse_ids(tab1 + 1, (size_t)(tab2 - tab1 - 1), want, 1024);
		CHECK(n_text >= 0);
		rows++;
		matched += check_case(t, text, (size_t)MAX(n_text, 0), TOK_ADD_BOS, want,
				      n_want, "tokenize.tsv");
		line = *end ? end + 1 : end;
	}
	CHECK_EQ_INT(rows, 21);
	CHECK_EQ_INT(matched, rows);
out:
	free(s);
	tok_free(t);
	gguf_close(f);
}

/* One vocabulary's .inp/.out vectors: no BOS, no special parsing. */
static void test_vocab_vectors(const char *gguf_path)
{
	char path[512];
	gguf_file *f;
	tok *t = open_tok(gguf_path, &f);
	CHECK(t != NULL);
	size_t n_inp, n_out;
	snprintf(path, sizeof path, "%s.inp", gguf_path);
	char *inp = slurp(path, &n_inp);
	snprintf(path, sizeof path, "%s.out", gguf_path);
	char *outs = slurp(path, &n_out);
	CHECK(inp && outs);
	if (!t || !inp || !outs)
		goto out;
	static const char sep[] = "\n__ggml_vocab_test__\n";
	int n_cases = 0, matched = 0;
	char *p = inp, *o = outs;
	char *q;
	while ((q = strstr(p, sep)) != NULL) {
		char *eol = strchr(o, '\n');
		CHECK(eol != NULL);
		if (!eol)
			break;
		int32_t want[1024];
		int n_want = parse_ids(o, (size_t)(eol - o), want, 1024);
		n_cases++;
		matched += check_case(t, p, (size_t)(q - p), 0, want, n_want, gguf_path);
		p = q + strlen(sep);
		o = eol + 1;
	}
	CHECK_EQ_INT(n_cases, 46);
	CHECK_EQ_INT(matched, n_cases);
	printf("%s: %d/%d vectors match\n", gguf_path, matched, n_cases);
out:
	free(inp);
	free(outs);
	tok_free(t);
	gguf_close(f);
}

/* ------------------------------------------------------------------ */
/* Special tokens, capacity, long text                                 */

static bool contains(const int32_t *ids, int n, int32_t id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static void test_phi3_special(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/vocab/ggml-vocab-phi-3.gguf", &f);
	CHECK(t != NULL);
	if (!t)
		goto out;
	/* <|end|> ends a Phi-3 turn though the file's EOS is <|endoftext|> */
	CHECK(tok_is_eog(t, 32000));
	CHECK(tok_is_eog(t, 32007));
	CHECK(!tok_is_eog(t, 1));
	CHECK(tok_is_control(t, 32010));
	CHECK(!tok_is_control(t, 1000));
	CHECK(!tok_is_eog(t, -1) && !tok_is_control(t, 1 << 30));

	const char *chat = "<|user|>\nHi<|end|>\n<|assistant|>";
	int32_t ids[64], plain[64];
	int n = tok_encode(t, chat, strlen(chat), TOK_ADD_BOS | TOK_PARSE_SPECIAL, ids, 64);
	CHECK_EQ_INT(n, 5);       /* the newlines after special tokens are stripped */
	CHECK_EQ_INT(ids[0], 1);
	CHECK_EQ_INT(ids[1], 32010);
	CHECK_EQ_INT(ids[n - 1], 32001);
	CHECK(contains(ids, n, 32007));
	int m = tok_encode(t, chat, strlen(chat), TOK_ADD_BOS, plain, 64);
	CHECK(m > n && m <= 64);
	CHECK(!contains(plain, m, 32010) && !contains(plain, m, 32007) && !contains(plain, m, 32001));

	/* llama.cpp (named in its Phi-3 right-strip rule): whitespace after a
	 * special token goes, and the next fragment gets SentencePiece's space */
	static const char turn[] = "<|user|>\nSYS\nHI<|end|>\n<|assistant|>\n";
	static const int32_t turn_ids[] = {1, 32010, 317, 21554, 13, 17628, 32007, 32001};
	int32_t got[16];
	CHECK_EQ_INT(tok_encode(t, turn, strlen(turn), TOK_ADD_BOS | TOK_PARSE_SPECIAL, got, 16),
		     (int)ARRAY_LEN(turn_ids));
	CHECK(memcmp(got, turn_ids, sizeof turn_ids) == 0);

	/* control tokens render as nothing; the text between them is kept */
	char buf[256];
	int k = tok_detokenize(t, ids, n, true, buf, sizeof buf);
	CHECK(k >= 0 && strstr(buf, "Hi") && !strstr(buf, "<|"));
	k = tok_detokenize(t, plain, m, true, buf, sizeof buf);
	CHECK_EQ_INT(k, (int)strlen(chat));
	CHECK(strcmp(buf, chat) == 0);

	/* snprintf-like capacity: too small still reports the full count */
	int32_t few[3] = {-7, -7, -7};
	CHECK_EQ_INT(tok_encode(t, chat, strlen(chat), TOK_ADD_BOS | TOK_PARSE_SPECIAL, few, 2), n);
	CHECK(few[0] == 1 && few[1] == 32010 && few[2] == -7);
	CHECK_EQ_INT(tok_encode(t, chat, strlen(chat), TOK_ADD_BOS, NULL, 0), m);
	char small[4];
	CHECK_EQ_INT(tok_detokenize(t, plain, m, true, small, sizeof small), (int)strlen(chat));
	CHECK(strcmp(small, "<|u") == 0);
out:
	tok_free(t);
	gguf_close(f);
}

/* The right-strip rule is Phi-3's alone: Llama 2 keeps the newline. */
static void test_no_rstrip(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/vocab/ggml-vocab-llama-spm.gguf", &f);
	CHECK(t != NULL);
	if (!t)
		goto out;
	int32_t ids[16];
	int n = tok_encode(t, "</s>\nHI", 7, TOK_PARSE_SPECIAL, ids, 16);
	CHECK(n == 4 && ids[0] == 2 && ids[1] == 29871 && ids[2] == 13 && ids[3] == 17628);
out:
	tok_free(t);
	gguf_close(f);
}

/* A long text (about 100 KB) encodes in one go and decodes back exactly. */
static void test_long_text(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/vocab/ggml-vocab-llama-spm.gguf", &f);
	CHECK(t != NULL);
	if (!t)
		goto out;
	static const char unit[] = "Once upon a time, there was a little girl named Lily. "
				   "She loved caf\xc3\xa9s, \xf0\x9f\xa6\x99 and  spaces.\n";
	size_t n_unit = strlen(unit), len = 0, cap = 100 * 1024;
	char *text = xmalloc(cap + n_unit);
	while (len < cap) {
		memcpy(text + len, unit, n_unit);
		len += n_unit;
	}
	int n = tok_encode(t, text, len, TOK_ADD_BOS, NULL, 0);
	CHECK(n > 1000);
	int32_t *ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
	CHECK_EQ_INT(tok_encode(t, text, len, TOK_ADD_BOS, ids, n), n);
	/* the text repeats, so the ids of one unit repeat too (after BOS + first unit) */
	int32_t one[256];
	int n_one = tok_encode(t, unit, n_unit, 0, one, 256);
	CHECK(n_one > 10 && n_one < 256 && n > n_one);
	if (n_one > 0 && n_one < 256 && n > n_one)
		CHECK(memcmp(ids + 1, one, (size_t)n_one * sizeof *one) == 0);
	char *back = xmalloc(len + 1);
	CHECK_EQ_INT(tok_detokenize(t, ids, n, true, back, len + 1), (int)len);
	CHECK(memcmp(back, text, len) == 0);
	free(back);
	free(ids);
	free(text);
out:
	tok_free(t);
	gguf_close(f);
}

/* ------------------------------------------------------------------ */
/* Streaming decoder                                                   */

static void test_stream(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/stories260K.gguf", &f);
	CHECK(t != NULL);
	if (!t)
		goto out;
	/* "e" + U+0301 = 65 cc 81: ids 344 ("\xe2\x96\x81e"), <0xCC>, <0x81> */
	size_t len;
	CHECK(strcmp(tok_text(t, 207, &len), "<0xCC>") == 0 && len == 6);
	CHECK(tok_text(t, 512, &len) == NULL && tok_text(t, -1, NULL) == NULL);
	tok_decoder d;
	char out[16];
	tok_decoder_init(&d, true);
	CHECK_EQ_INT(tok_decode(t, &d, 1, out, sizeof out), 0);      /* BOS: no text */
	CHECK(d.at_start);
	CHECK_EQ_INT(tok_decode(t, &d, 344, out, sizeof out), 1);    /* space dropped */
	CHECK(strcmp(out, "e") == 0);
	CHECK_EQ_INT(tok_decode(t, &d, 207, out, sizeof out), 0);    /* held */
	CHECK(out[0] == '\0' && d.n_pending == 1);
	/* capacity errors consume nothing */
	CHECK_EQ_INT(tok_decode(t, &d, 132, out, 2), -1);
	CHECK_EQ_INT(d.n_pending, 1);
	CHECK_EQ_INT(tok_decode(t, &d, 132, out, 3), 2);
	CHECK(strcmp(out, "\xcc\x81") == 0 && d.n_pending == 0);

	/* not at start: the space stays */
	tok_decoder_init(&d, false);
	CHECK_EQ_INT(tok_decode(t, &d, 344, out, sizeof out), 2);
	CHECK(strcmp(out, " e") == 0);
	/* a truncated sequence flushes as U+FFFD */
	CHECK_EQ_INT(tok_decode(t, &d, 207, out, sizeof out), 0);
	CHECK_EQ_INT(tok_decode_flush(t, &d, out, 3), -1);
	CHECK_EQ_INT(d.n_pending, 1);
	CHECK_EQ_INT(tok_decode_flush(t, &d, out, 4), 3);
	CHECK(strcmp(out, "\xef\xbf\xbd") == 0);
	CHECK_EQ_INT(tok_decode_flush(t, &d, out, 4), 0);
	CHECK(out[0] == '\0');
	/* ... and one broken off by another piece becomes U+FFFD before it */
	CHECK_EQ_INT(tok_decode(t, &d, 207, out, sizeof out), 0);
	CHECK_EQ_INT(tok_decode(t, &d, 344, out, sizeof out), 5);
	CHECK(strcmp(out, "\xef\xbf\xbd e") == 0);
	/* a stray continuation byte is U+FFFD at once */
	CHECK_EQ_INT(tok_decode(t, &d, 132, out, sizeof out), 3);
	CHECK(strcmp(out, "\xef\xbf\xbd") == 0);
	/* cap 0 is fine for a piece with no text */
	CHECK_EQ_INT(tok_decode(t, &d, 2, NULL, 0), 0);
	CHECK_EQ_INT(tok_decode(t, &d, 344, NULL, 0), -1);
out:
	tok_free(t);
	gguf_close(f);
}

/* A four-byte character over four byte tokens (Llama 2: U+1F999). */
static void test_stream_4byte(void)
{
	gguf_file *f;
	tok *t = open_tok(SHARED "/models/vocab/ggml-vocab-llama-spm.gguf", &f);
	CHECK(t != NULL);
	if (!t)
		goto out;
	static const int32_t llama_ids[] = {243, 162, 169, 156};
	static const int want_bytes[] = {0, 0, 0, 4};
	tok_decoder d;
	char out[16];
	tok_decoder_init(&d, true);
	for (size_t i = 0; i < ARRAY_LEN(llama_ids); i++)
		CHECK_EQ_INT(tok_decode(t, &d, llama_ids[i], out, sizeof out), want_bytes[i]);
	CHECK(strcmp(out, "\xf0\x9f\xa6\x99") == 0);
out:
	tok_free(t);
	gguf_close(f);
}

/* ------------------------------------------------------------------ */
/* Small GGUF images                                                   */

/* A tiny SentencePiece vocabulary with knobs for breaking it. */
struct vspec {
	const char *model;
	bool no_tokens;
	int n_scores;            /* scores written (n_tokens normally) */
	int64_t bos;             /* -1: key left out */
	float score_ab, score_bc;
};

static const char *const tiny_tokens[] = {
	"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c", "ab", "bc",
	"\xe2\x96\x81" "a", "<0x64>", "<x>", "<", "s", ">", "<s",
};
static const int32_t tiny_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 4, 1, 1, 1, 1};

/* Builds the GGUF image of s in w (header included). */
static void build_vocab(gw *w, const struct vspec *s)
{
	int n = (int)ARRAY_LEN(tiny_tokens);
	gw_begin(w, 3);
	gw_kv_str(w, "tokenizer.ggml.model", s->model, strlen(s->model));
	if (!s->no_tokens)
		gw_kv_strs(w, "tokenizer.ggml.tokens", tiny_tokens, (size_t)n);
	gw_kv_arr(w, "tokenizer.ggml.scores", GGUF_F32, (uint64_t)s->n_scores);
	for (int i = 0; i < s->n_scores; i++)
		gw_f32(w, i == 7 ? s->score_ab : i == 8 ? s->score_bc : -10.0f - (float)i);
	gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_I32, (uint64_t)n);
	for (int i = 0; i < n; i++)
		gw_u32(w, (uint32_t)tiny_types[i]);
	if (s->bos >= 0)
		gw_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos);
	gw_kv_bool(w, "tokenizer.ggml.add_space_prefix", false);
	gw_end(w, 32, 0);
}

/* Opens s's image; returns the tokenizer or NULL with e filled. */
static tok *tiny_tok(const struct vspec *s, err *e)
{
	gw w;
	build_vocab(&w, s);
	gguf_file *f = gguf_open_mem(w.p, w.n, "tiny.gguf", e);
	tok *t = f ? tok_new(f, e) : NULL;
	gguf_close(f);  /* the tokenizer keeps copies */
	free(w.p);
	return t;
}

static struct vspec good_spec(void)
{
	return (struct vspec){.model = "llama", .n_scores = (int)ARRAY_LEN(tiny_tokens),
			      .bos = 1, .score_ab = -1, .score_bc = -2};
}

static void expect_fail(const struct vspec *s, const char *key, const char *label)
{
	err e = {0};
	tok *t = tiny_tok(s, &e);
	CHECK_(t == NULL, "%s: tok_new accepted it", label);
	tok_free(t);
	CHECK_(strstr(e.msg, key) != NULL && strstr(e.msg, "tiny.gguf") != NULL,
	       "%s: message '%s' should name tiny.gguf and %s", label, e.msg, key);
}

static void test_bad_metadata(void)
{
	struct vspec s = good_spec();
	s.no_tokens = true;
	expect_fail(&s, "tokenizer.ggml.tokens", "missing tokens");
	s = good_spec();
	s.n_scores--;
	expect_fail(&s, "tokenizer.ggml.scores", "short scores");
	s = good_spec();
	s.model = "gpt2";   /* byte-level BPE needs merges, which this file lacks */
	expect_fail(&s, "tokenizer.ggml.merges", "gpt2 without merges");
	s = good_spec();
	s.model = "bert?";
	expect_fail(&s, "tokenizer.ggml.model", "unknown model");
	s = good_spec();
	s.bos = (int64_t)ARRAY_LEN(tiny_tokens);
	expect_fail(&s, "tokenizer.ggml.bos_token_id", "bos out of range");
	tok_free(NULL);
}

/* Merge order on the tiny vocabulary: best score first, leftmost on ties. */
static void test_tiny_merges(void)
{
	err e = {0};
	struct vspec s = good_spec();
	int32_t ids[16];
	tok *t = tiny_tok(&s, &e);
	CHECK_(t != NULL, "%s", e.msg);
	if (!t)
		return;
	CHECK_EQ_INT(tok_encode(t, "abc", 3, 0, ids, 16), 2);   /* ab (-1) beats bc (-2) */
	CHECK(ids[0] == 7 && ids[1] == 6);
	/* byte fallback: d has only <0x64>; e has nothing, so <unk> */
	CHECK_EQ_INT(tok_encode(t, "de", 2, 0, ids, 16), 2);
	CHECK(ids[0] == 10 && ids[1] == 0);
	/* control text stays plain, even where merges could spell it ("<s" + ">");
	 * user-defined <x> is cut out without TOK_PARSE_SPECIAL */
	CHECK_EQ_INT(tok_encode(t, "<s>a<x>", 7, 0, ids, 16), 4);
	CHECK(ids[0] == 15 && ids[1] == 14 && ids[2] == 4 && ids[3] == 11);
	CHECK_EQ_INT(tok_encode(t, "<s>a", 4, TOK_PARSE_SPECIAL | TOK_ADD_BOS, ids, 16), 3);
	CHECK(ids[0] == 1 && ids[1] == 1 && ids[2] == 4);
	CHECK_EQ_INT(tok_encode(t, " a", 2, 0, ids, 16), 1);    /* no space prefix here */
	CHECK_EQ_INT(ids[0], 9);
	tok_free(t);

	s.score_bc = -1;                                          /* tie: leftmost */
	t = tiny_tok(&s, &e);
	CHECK(t != NULL);
	if (t) {
		CHECK_EQ_INT(tok_encode(t, "abc", 3, 0, ids, 16), 2);
		CHECK(ids[0] == 7 && ids[1] == 6);
	}
	tok_free(t);
	s.score_bc = 0;
	t = tiny_tok(&s, &e);
	CHECK(t != NULL);
	if (t) {
		CHECK_EQ_INT(tok_encode(t, "abc", 3, 0, ids, 16), 2);
		CHECK(ids[0] == 4 && ids[1] == 8);
	}
	tok_free(t);
}

int main(void)
{
	test_tokenize_tsv();
	test_vocab_vectors(SHARED "/models/vocab/ggml-vocab-llama-spm.gguf");
	test_vocab_vectors(SHARED "/models/vocab/ggml-vocab-phi-3.gguf");
	test_phi3_special();
	test_no_rstrip();
	test_long_text();
	test_stream();
	test_stream_4byte();
	test_bad_metadata();
	test_tiny_merges();
	return TEST_DONE();
}
