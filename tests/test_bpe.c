/* tests/test_bpe.c: the byte-level BPE tokenizer against llama.cpp's reference
 * ids on the real Llama 3, Qwen3 and GPT-2 vocabularies (../shared/models/vocab
 * test vectors and ../shared/testdata/tokenize_*, detokenize_*), special-token
 * text in user input, streaming decoding of characters split over tokens,
 * the Unicode class table, and small BPE vocabularies built here (merge order,
 * pre-tokenizer fallback, bad metadata). */
#include "models/json.h"
#include "models/tok.h"
#include "models/unicode_tab.h"
#include "tests/fuzz/gguf_gen.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <stdlib.h>
#include <string.h>

#define SHARED "../shared"
#define VOCAB SHARED "/models/vocab/ggml-vocab-"
#define MAX_IDS 4096

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

static tok *open_tok(const char *path)
{
	err e = {0};
	gguf_file *f = gguf_open(path, &e);
	tok *t = f ? tok_new(f, &e) : NULL;
	if (!t)
		fprintf(stderr, "%s\n", e.msg);
	gguf_close(f);  /* the tokenizer keeps copies */
	return t;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *s = xmalloc((size_t)n + 1);
	*len = fread(s, 1, (size_t)n, fp);
	fclose(fp);
	s[*len] = '\0';
	return s;
}

/* A JSON string literal decoded into a new buffer; NULL if it is not one. */
static char *json_string(const char *lit, size_t *len)
{
	err e = {0};
	json_doc *d = json_parse(lit, strlen(lit), &e);
	const json *j = d ? json_root(d) : NULL;
	char *s = NULL;
	if (j && j->type == JSON_STR) {
		s = xmalloc(j->len + 1);
		memcpy(s, j->str, j->len + 1);
		*len = j->len;
	}
	json_free(d);
	return s;
}

static void print_ids(const char *what, const int32_t *ids, int n)
{
	fprintf(stderr, "  %s:", what);
	for (int i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

static bool same_ids(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* Encodes text with flags and compares with want; returns whether they match. */
static bool check_ids(const tok *t, const char *text, size_t len, unsigned flags,
		      const int32_t *want, int n_want, const char *label)
{
	int32_t ids[MAX_IDS];
	int n = tok_encode(t, text, len, flags, ids, MAX_IDS);
	bool ok = n <= MAX_IDS && same_ids(ids, n, want, n_want);
	CHECK_(ok, "%s: ids differ for '%.60s'", label, text);
	if (!ok) {
		print_ids("want", want, n_want);
		print_ids("got ", ids, MIN(n, MAX_IDS));
	}
	return ok;
}

/* The pieces of ids, all at once and one id at a time through the streaming
 * decoder, must give back text (plain text round-trips exactly). */
static void check_round_trip(const tok *t, const int32_t *ids, int n, const char *text,
			     size_t len, const char *label)
{
	size_t cap = 4 * len + 16;
	char *back = xmalloc(cap);
	int m = tok_detokenize(t, ids, n, true, back, cap);
	CHECK_(m == (int)len && memcmp(back, text, len) == 0,
	       "%s: pieces give '%s' for '%.60s'", label, back, text);
	tok_decoder d;
	tok_decoder_init(&d, true);
	size_t k = 0;
	for (int i = 0; i < n; i++) {
		int r = tok_decode(t, &d, ids[i], back + k, cap - k);
		CHECK(r >= 0);
		k += (size_t)MAX(r, 0);
	}
	k += (size_t)MAX(tok_decode_flush(t, &d, back + k, cap - k), 0);
	CHECK_(k == len && memcmp(back, text, len) == 0,
	       "%s: streaming decode gives '%.*s' for '%.60s'", label, (int)k, back, text);
	free(back);
}

/* ------------------------------------------------------------------ */
/* Reference vectors                                                   */

/* One vocabulary's .inp/.out test vectors: no BOS, no special parsing. */
static void test_vocab_vectors(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, VOCAB "%s.gguf", name);
	tok *t = open_tok(path);
	CHECK(t != NULL);
	size_t n_inp = 0, n_out = 0;
	snprintf(path, sizeof path, VOCAB "%s.gguf.inp", name);
	char *inp = slurp(path, &n_inp);
	snprintf(path, sizeof path, VOCAB "%s.gguf.out", name);
	char *outs = slurp(path, &n_out);
	CHECK(inp && outs);
	if (!t || !inp || !outs)
		goto out;
	static const char sep[] = "\n__ggml_vocab_test__\n";
	int n_cases = 0, matched = 0;
	char *p = inp, *o = outs, *q;
	while ((q = strstr(p, sep)) != NULL) {
		char *eol = strchr(o, '\n');
		CHECK(eol != NULL);
		if (!eol)
			break;
		*eol = '\0';
		int32_t want[MAX_IDS];
		int n_want = tsv_ints(o, want, MAX_IDS);
		n_cases++;
		if (check_ids(t, p, (size_t)(q - p), 0, want, n_want, name)) {
			matched++;
			check_round_trip(t, want, n_want, p, (size_t)(q - p), name);
		}
		p = q + strlen(sep);
		o = eol + 1;
	}
	CHECK_EQ_INT(n_cases, 46);
	CHECK_EQ_INT(matched, n_cases);
	printf("%s: %d/%d vectors match\n", name, matched, n_cases);
out:
	free(inp);
	free(outs);
	tok_free(t);
}

/* tokenize_<name>.tsv: input_json, ids, input_utf8_hex. */
static void test_tokenize_tsv(const tok *t, const char *file, unsigned flags, int n_rows)
{
	tsv tab;
	char path[256];
	snprintf(path, sizeof path, SHARED "/testdata/%s", file);
	CHECK(tsv_load(&tab, path) == 0);
	CHECK_EQ_INT(tab.n_rows, n_rows);
	int matched = 0;
	for (int r = 0; r < tab.n_rows; r++) {
		char text[8192];
		size_t len = tsv_hex(tab.rows[r][2], text, sizeof text);
		int32_t want[MAX_IDS];
		int n_want = tsv_ints(tab.rows[r][1], want, MAX_IDS);
		matched += check_ids(t, text, len, flags, want, n_want, file);
	}
	CHECK_EQ_INT(matched, tab.n_rows);
	printf("%s: %d/%d rows match\n", file, matched, tab.n_rows);
	tsv_free(&tab);
}

/* detokenize_<name>.tsv: input_json, ids, pieces_json, pieces_utf8_hex,
 * round_trip, detokenize_json. */
static void test_detokenize_tsv(const tok *t, const char *file)
{
	tsv tab;
	char path[256];
	snprintf(path, sizeof path, SHARED "/testdata/%s", file);
	CHECK(tsv_load(&tab, path) == 0);
	CHECK_EQ_INT(tab.n_rows, 23);
	int matched = 0;
	for (int r = 0; r < tab.n_rows; r++) {
		char pieces[8192], got[8192];
		size_t n_pieces = tsv_hex(tab.rows[r][3], pieces, sizeof pieces);
		int32_t ids[MAX_IDS];
		int n = tsv_ints(tab.rows[r][1], ids, MAX_IDS);
		size_t n_input = 0, n_detok = 0;
		char *input = json_string(tab.rows[r][0], &n_input);
		char *detok = json_string(tab.rows[r][5], &n_detok);
		CHECK(input && detok && strcmp(tab.rows[r][4], "exact") == 0);
		int k = tok_detokenize(t, ids, n, true, got, sizeof got);
		bool ok = k == (int)n_pieces && memcmp(got, pieces, n_pieces) == 0;
		CHECK_(ok, "%s row %d: pieces '%s'", file, r + 2, got);
		CHECK(input && n_input == n_pieces && memcmp(input, pieces, n_pieces) == 0);
		k = tok_detokenize_text(t, ids, n, got, sizeof got);
		bool ok2 = detok && k == (int)n_detok && memcmp(got, detok, n_detok) == 0;
		CHECK_(ok2, "%s row %d: detokenize gives '%s', want '%s'", file, r + 2, got, detok);
		matched += ok && ok2;
		free(input);
		free(detok);
	}
	CHECK_EQ_INT(matched, tab.n_rows);
	printf("%s: %d/%d rows match\n", file, matched, tab.n_rows);
	tsv_free(&tab);
}

static bool contains(const int32_t *ids, int n, int32_t id)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Text that spells a control token is plain text unless TOK_PARSE_SPECIAL. */
static void check_plain_special(const tok *t, const char *text, int32_t id)
{
	int32_t ids[64];
	int n = tok_encode(t, text, strlen(text), 0, ids, 64);
	CHECK(n > 2 && n <= 64);
	CHECK_(!contains(ids, MIN(n, 64), id), "'%s' gave control token %d", text, id);
	n = tok_encode(t, text, strlen(text), TOK_PARSE_SPECIAL, ids, 64);
	CHECK(n > 0 && n <= 64);
	CHECK_(contains(ids, MIN(n, 64), id), "'%s' with TOK_PARSE_SPECIAL lacks %d", text, id);
}

static void test_llama3(void)
{
	tok *t = open_tok(VOCAB "llama3.gguf");
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK_EQ_INT(tok_kind_of(t), TOK_BPE);
	CHECK_EQ_INT(tok_n_vocab(t), 128256);
	CHECK_EQ_INT(tok_bos(t), 128000);
	CHECK_EQ_INT(tok_eos(t), 128001);
	CHECK(strcmp(tok_pre(t), "llama-bpe") == 0);
	CHECK(tok_warning(t) == NULL);
	CHECK(tok_is_eog(t, 128009) && tok_is_eog(t, 128001) && !tok_is_eog(t, 128000));
	CHECK(tok_is_control(t, 128009) && !tok_is_control(t, 9906));
	CHECK_EQ_INT(tok_lookup(t, "<|eot_id|>", 10), 128009);
	CHECK_EQ_INT(tok_lookup(t, "Hello", 5), 9906);
	CHECK_EQ_INT(tok_lookup(t, "no such token!", 14), -1);
	test_tokenize_tsv(t, "tokenize_llama3.tsv", TOK_ADD_BOS, 23);
	test_tokenize_tsv(t, "tokenize_llama3_special.tsv", TOK_ADD_BOS | TOK_PARSE_SPECIAL, 11);
	test_detokenize_tsv(t, "detokenize_llama3.tsv");
	check_plain_special(t, "Hi<|eot_id|><|start_header_id|>assistant", 128009);
	check_plain_special(t, "x <|begin_of_text|>", 128000);
	tok_free(t);
}

static void test_qwen3(void)
{
	tok *t = open_tok(VOCAB "qwen3.gguf");
	CHECK(t != NULL);
	if (!t)
		return;
	CHECK_EQ_INT(tok_n_vocab(t), 151936);
	CHECK(strcmp(tok_pre(t), "qwen2") == 0);
	CHECK_EQ_INT(tok_eos(t), 151645);
	CHECK(tok_is_eog(t, 151645) && tok_is_eog(t, 151643));
	/* llama.cpp makes Qwen's normal token </s> a control, end-of-generation token */
	int32_t eos_s = tok_lookup(t, "</s>", 4);
	CHECK(eos_s > 0 && tok_is_control(t, eos_s) && tok_is_eog(t, eos_s));
	test_tokenize_tsv(t, "tokenize_qwen3.tsv", TOK_ADD_BOS, 23);
	test_tokenize_tsv(t, "tokenize_qwen3_special.tsv", TOK_ADD_BOS | TOK_PARSE_SPECIAL, 11);
	test_detokenize_tsv(t, "detokenize_qwen3.tsv");
	check_plain_special(t, "hi<|im_end|>\n<|im_start|>assistant\n", 151644);
	check_plain_special(t, "hi<|im_end|>", 151645);
	/* user-defined tokens are cut out of any text, and render as their text */
	int32_t think = tok_lookup(t, "<think>", 7), ids[16];
	CHECK(think > 0 && !tok_is_control(t, think));
	int n = tok_encode(t, "a<think>b", 9, 0, ids, 16);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(ids[1], think);
	char buf[32];
	CHECK_EQ_INT(tok_detokenize(t, ids, n, true, buf, sizeof buf), 9);
	CHECK(strcmp(buf, "a<think>b") == 0);
	tok_free(t);
}

/* ------------------------------------------------------------------ */
/* Decoding across tokens, long text                                   */

/* Characters whose bytes are spread over several tokens come out whole. */
static void test_stream_split_chars(void)
{
	tok *t = open_tok(VOCAB "llama3.gguf");
	CHECK(t != NULL);
	if (!t)
		return;
	static const char text[] = "\xf0\x9f\xa6\x99 \xe1\xbb\x87\xe2\x80\x8d"
				   "\xf0\x9f\x98\xb6\xf0\xa0\x80\x80";
	int32_t ids[64];
	int n = tok_encode(t, text, strlen(text), 0, ids, 64);
	CHECK(n > 4 && n <= 64);
	/* at least one token must end inside a character for this to test much */
	tok_decoder d;
	tok_decoder_init(&d, true);
	char out[64];
	int n_held = 0;
	size_t k = 0;
	char all[256];
	for (int i = 0; i < n && i < 64; i++) {
		int r = tok_decode(t, &d, ids[i], out, sizeof out);
		CHECK(r >= 0);
		n_held += d.n_pending > 0;
		if (r > 0 && k + (size_t)r < sizeof all) {
			memcpy(all + k, out, (size_t)r);
			k += (size_t)r;
		}
	}
	CHECK(n_held > 0);
	CHECK_EQ_INT(tok_decode_flush(t, &d, out, sizeof out), 0);
	CHECK(k == strlen(text) && memcmp(all, text, k) == 0);
	/* a character cut short by the end of the stream is U+FFFD */
	tok_decoder_init(&d, true);
	int32_t first = -1;
	for (int i = 0; i < n && first < 0; i++) {
		tok_decode(t, &d, ids[i], out, sizeof out);
		if (d.n_pending > 0)
			first = i;
	}
	CHECK(first >= 0);
	CHECK_EQ_INT(tok_decode_flush(t, &d, out, sizeof out), 3);
	CHECK(strcmp(out, "\xef\xbf\xbd") == 0);
	tok_free(t);
}

/* About 100 KB of mixed text: it encodes as the repeated unit does and decodes
 * back exactly (timings are for `make bench`, not here). */
static void test_long_text(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, VOCAB "%s.gguf", name);
	tok *t = open_tok(path);
	CHECK(t != NULL);
	if (!t)
		return;
	static const char unit[] = "Once upon a time, there was a little girl named Lily. "
				   "She loved caf\xc3\xa9s, \xf0\x9f\xa6\x99, "
				   "\xe4\xbd\xa0\xe5\xa5\xbd and  spaces; x = 1234567 + y;\n\n";
	size_t n_unit = strlen(unit), len = 0, cap = 100 * 1024;
	char *text = xmalloc(cap + n_unit);
	while (len < cap) {
		memcpy(text + len, unit, n_unit);
		len += n_unit;
	}
	int n = tok_encode(t, text, len, 0, NULL, 0);
	CHECK(n > 10000);
	int32_t *ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
	CHECK_EQ_INT(tok_encode(t, text, len, 0, ids, n), n);
	int32_t one[256];
	int n_one = tok_encode(t, unit, n_unit, 0, one, 256);
	CHECK(n_one > 10 && n_one < 256 && n % n_one == 0);
	if (n_one > 0 && n_one < 256 && n >= n_one)
		CHECK(memcmp(ids + n - n_one, one, (size_t)n_one * sizeof *one) == 0);
	char *back = xmalloc(len + 1);
	CHECK_EQ_INT(tok_detokenize(t, ids, n, true, back, len + 1), (int)len);
	CHECK(memcmp(back, text, len) == 0);
	free(back);
	free(ids);
	free(text);
	tok_free(t);
}

/* ------------------------------------------------------------------ */
/* Unicode table                                                        */

static void test_unicode_table(void)
{
	CHECK_EQ_INT(uni_class_of('A'), UNI_LETTER);
	CHECK_EQ_INT(uni_class_of('z'), UNI_LETTER);
	CHECK_EQ_INT(uni_class_of('7'), UNI_NUMBER);
	CHECK_EQ_INT(uni_class_of(' '), UNI_SEPARATOR);
	CHECK_EQ_INT(uni_class_of('\n'), UNI_OTHER);
	CHECK_EQ_INT(uni_class_of('$'), UNI_SYMBOL);
	CHECK_EQ_INT(uni_class_of('_'), UNI_PUNCT);
	CHECK_EQ_INT(uni_class_of(0x00e9), UNI_LETTER);    /* é */
	CHECK_EQ_INT(uni_class_of(0x0301), UNI_MARK);      /* combining acute */
	CHECK_EQ_INT(uni_class_of(0x0663), UNI_NUMBER);    /* Arabic-Indic three */
	CHECK_EQ_INT(uni_class_of(0x2167), UNI_NUMBER);    /* Roman numeral eight */
	CHECK_EQ_INT(uni_class_of(0x4e2d), UNI_LETTER);    /* 中 */
	CHECK_EQ_INT(uni_class_of(0x3002), UNI_PUNCT);     /* 。 */
	CHECK_EQ_INT(uni_class_of(0x1f680), UNI_SYMBOL);   /* 🚀 */
	CHECK_EQ_INT(uni_class_of(0x200b), UNI_OTHER);     /* zero width space: Cf */
	CHECK_EQ_INT(uni_class_of(0xfeff), UNI_OTHER);
	CHECK_EQ_INT(uni_class_of(0x0378), UNI_UNASSIGNED);
	CHECK_EQ_INT(uni_class_of(0xe000), UNI_OTHER);     /* private use */
	CHECK_EQ_INT(uni_class_of(0x10ffff), UNI_UNASSIGNED);
	CHECK_EQ_INT(uni_class_of(0x110000), UNI_UNASSIGNED);
	CHECK(uni_is_space(' ') && uni_is_space('\t') && uni_is_space('\r') && uni_is_space(0x0b));
	CHECK(uni_is_space(0x85) && uni_is_space(0xa0) && uni_is_space(0x2009));
	CHECK(uni_is_space(0x3000) && !uni_is_space(0x1c) && !uni_is_space(0x200b));
	CHECK(!uni_is_space(0xfeff) && !uni_is_space('x'));
	CHECK(uni_n_ranges > 1000 && (uni_ranges[0] >> 3) == 0);
	for (size_t i = 1; i < uni_n_ranges; i++)
		if ((uni_ranges[i] >> 3) <= (uni_ranges[i - 1] >> 3))
			CHECK_(false, "uni_ranges not sorted at %zu", i);
	CHECK(strlen(uni_version) >= 4);
}

/* ------------------------------------------------------------------ */
/* Small BPE vocabularies                                              */

/* A tiny byte-level vocabulary: the 256 byte characters, then a few merged
 * tokens. "\xc4\xa0" is the character of the space byte. */
static const char *const tiny_extra[] = {"ab", "bc", "abc", "\xc4\xa0" "a", "cd", "<x>"};
enum { TINY_AB = 256, TINY_BC, TINY_ABC, TINY_SPACE_A, TINY_CD, TINY_X };

struct bspec {
	const char *pre;         /* NULL: key left out */
	const char *const *merges;
	size_t n_merges;
	bool no_merges;          /* leave tokenizer.ggml.merges out */
};

static tok *tiny_bpe(const struct bspec *s, err *e)
{
	gw w;
	const char *toks[256 + ARRAY_LEN(tiny_extra)];
	char chars[256][4];
	unsigned n_other = 0;
	for (int i = 0; i < 256; i++) {
		/* the byte-to-character mapping, written out independently */
		bool printable = (i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || i >= 0xae;
		unsigned cp = printable ? (unsigned)i : 256u + n_other++;
		if (cp < 0x80) {
			chars[i][0] = (char)cp, chars[i][1] = 0;
		} else {
			chars[i][0] = (char)(0xc0 | cp >> 6);
			chars[i][1] = (char)(0x80 | (cp & 0x3f));
			chars[i][2] = 0;
		}
		toks[i] = chars[i];
	}
	for (size_t i = 0; i < ARRAY_LEN(tiny_extra); i++)
		toks[256 + i] = tiny_extra[i];
	gw_begin(&w, 3);
	gw_kv_str(&w, "tokenizer.ggml.model", "gpt2", 4);
	if (s->pre)
		gw_kv_str(&w, "tokenizer.ggml.pre", s->pre, strlen(s->pre));
	gw_kv_strs(&w, "tokenizer.ggml.tokens", toks, ARRAY_LEN(toks));
	gw_kv_arr(&w, "tokenizer.ggml.token_type", GGUF_I32, ARRAY_LEN(toks));
	for (size_t i = 0; i < ARRAY_LEN(toks); i++)
		gw_u32(&w, i == TINY_X ? 4 : 1);
	if (!s->no_merges)
		gw_kv_strs(&w, "tokenizer.ggml.merges", s->merges, s->n_merges);
	gw_end(&w, 32, 0);
	gguf_file *f = gguf_open_mem(w.p, w.n, "tiny-bpe.gguf", e);
	tok *t = f ? tok_new(f, e) : NULL;
	gguf_close(f);
	free(w.p);
	return t;
}

static int enc(const tok *t, const char *s, int32_t *ids)
{
	return tok_encode(t, s, strlen(s), 0, ids, 16);
}

static void test_tiny_merges(void)
{
	/* ranks: a b first, then b c, then ab c; "x y" has no token x y */
	static const char *const m1[] = {"a b", "b c", "ab c", "\xc4\xa0 a", "c d", "q"};
	static const char *const m2[] = {"b c", "a b", "ab c", "c d"};
	err e = {0};
	int32_t ids[16];
	tok *t = tiny_bpe(&(struct bspec){.pre = "gpt-2", .merges = m1, .n_merges = 6}, &e);
	CHECK_(t != NULL, "%s", e.msg);
	if (t) {
		CHECK(tok_warning(t) == NULL && strcmp(tok_pre(t), "gpt-2") == 0);
		CHECK_EQ_INT(enc(t, "abc", ids), 1);            /* a+b, then ab+c */
		CHECK_EQ_INT(ids[0], TINY_ABC);
		CHECK_EQ_INT(enc(t, "bcd", ids), 2);            /* b+c (rank 1) before c+d (4) */
		CHECK(ids[0] == TINY_BC && ids[1] == 'd');
		CHECK_EQ_INT(enc(t, "abcd", ids), 2);
		CHECK(ids[0] == TINY_ABC && ids[1] == 'd');
		CHECK_EQ_INT(enc(t, "x a", ids), 2);            /* ' a' is one word and token */
		CHECK(ids[0] == 'x' && ids[1] == TINY_SPACE_A);
		CHECK_EQ_INT(enc(t, "a<x>b", ids), 3);          /* user-defined, always cut */
		CHECK(ids[0] == 'a' && ids[1] == TINY_X && ids[2] == 'b');
		CHECK_EQ_INT(enc(t, "\xc3\xbf", ids), 2);       /* any byte has a token */
		CHECK(ids[0] == 0xc3 && ids[1] == 0xbf);
		CHECK_EQ_INT(enc(t, "\x80", ids), 3);           /* bad UTF-8 reads as U+FFFD */
		char out[8];
		CHECK_EQ_INT(tok_detokenize(t, ids, 3, true, out, sizeof out), 3);
		CHECK(strcmp(out, "\xef\xbf\xbd") == 0);
	}
	tok_free(t);
	/* with b c ranked first, "abc" is a + bc: no merge a bc exists */
	t = tiny_bpe(&(struct bspec){.pre = "gpt-2", .merges = m2, .n_merges = 4}, &e);
	CHECK(t != NULL);
	if (t) {
		CHECK_EQ_INT(enc(t, "abc", ids), 2);
		CHECK(ids[0] == 'a' && ids[1] == TINY_BC);
		CHECK_EQ_INT(enc(t, "cdcd", ids), 2);           /* same pair twice: both merge */
		CHECK(ids[0] == TINY_CD && ids[1] == TINY_CD);
		CHECK_EQ_INT(enc(t, "bcbc", ids), 2);
	}
	tok_free(t);
}

static void test_tiny_pre(void)
{
	static const char *const m[] = {"a b"};
	err e = {0};
	tok *t = tiny_bpe(&(struct bspec){.pre = "no-such-pre", .merges = m, .n_merges = 1}, &e);
	CHECK_(t != NULL, "%s", e.msg);
	if (t) {
		const char *w = tok_warning(t);
		CHECK(w && strstr(w, "no-such-pre") && strstr(w, "tiny-bpe.gguf"));
		CHECK(w && strstr(w, "llama-bpe"));
		CHECK(strcmp(tok_pre(t), "llama-bpe (fallback)") == 0);
		int32_t ids[16];
		/* Llama 3 rules: digits in threes */
		CHECK_EQ_INT(enc(t, "12345", ids), 5);
	}
	tok_free(t);
	t = tiny_bpe(&(struct bspec){.merges = m, .n_merges = 1}, &e);
	CHECK(t != NULL);
	CHECK(t && tok_warning(t) && strstr(tok_warning(t), "missing"));
	tok_free(t);
	t = tiny_bpe(&(struct bspec){.pre = "llama3", .merges = m, .n_merges = 1}, &e);
	CHECK(t && tok_warning(t) == NULL && strcmp(tok_pre(t), "llama-bpe") == 0);
	tok_free(t);
	t = tiny_bpe(&(struct bspec){.pre = "qwen2", .merges = m, .n_merges = 1}, &e);
	CHECK(t && strcmp(tok_pre(t), "qwen2") == 0);
	tok_free(t);

	e = (err){0};
	t = tiny_bpe(&(struct bspec){.pre = "gpt-2", .no_merges = true}, &e);
	CHECK(t == NULL);
	CHECK_(strstr(e.msg, "tokenizer.ggml.merges") && strstr(e.msg, "tiny-bpe.gguf"),
	       "message '%s' should name the file and tokenizer.ggml.merges", e.msg);
	tok_free(t);
}

/* The three pre-tokenizers on the cases where they differ, through a real
 * vocabulary: the number of words shows in the ids. */
static void test_pre_rules(void)
{
	tok *l3 = open_tok(VOCAB "llama3.gguf"), *qw = open_tok(VOCAB "qwen3.gguf");
	tok *g2 = open_tok(VOCAB "gpt-2.gguf");
	CHECK(l3 && qw && g2);
	if (l3 && qw && g2) {
		int32_t ids[32];
		CHECK_EQ_INT(enc(l3, "1234567", ids), 3);       /* 123 456 7 */
		CHECK_EQ_INT(enc(qw, "1234567", ids), 7);       /* one digit each */
		CHECK_EQ_INT(enc(l3, "I'M", ids), 2);           /* I 'M (case-insensitive) */
		CHECK_EQ_INT(ids[1], tok_lookup(l3, "'M", 2));
		CHECK(enc(g2, "I'M", ids) >= 2 && ids[1] != tok_lookup(g2, "'M", 2));
		CHECK(strcmp(tok_pre(g2), "gpt-2") == 0);
	}
	tok_free(l3);
	tok_free(qw);
	tok_free(g2);
}

int main(void)
{
	test_unicode_table();
	test_vocab_vectors("llama3");
	test_vocab_vectors("qwen3");
	test_vocab_vectors("gpt-2");
	test_llama3();
	test_qwen3();
	test_stream_split_chars();
	test_long_text("llama3");
	test_long_text("qwen3");
	test_tiny_merges();
	test_tiny_pre();
	test_pre_rules();
	return TEST_DONE();
}
