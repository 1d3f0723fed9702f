/* tests/fuzz/fuzz_tok_vocab.c: the tokenizers on arbitrary vocabularies.
 *
 * The input describes tokenizer metadata; the target writes it as a GGUF
 * file (tests/fuzz/gguf_gen.h) and gives it to tok_new(), which must build
 * a tokenizer or fail with a message. Random bytes rarely make a readable
 * GGUF, so a description reaches far more of the tokenizer than raw files do
 * (fuzz_gguf covers those). Layout:
 *   byte 0: bit 0 model gpt2 (else llama); bit 1 write token_type; bit 2
 *           write scores; bit 3 write add_bos_token (value bit 4); bit 5 write
 *           add_space_prefix (value bit 6); bit 7 general.name "Phi-3"
 *   byte 1: bits 0-2 tokenizer.ggml.pre (none, llama-bpe, qwen2, gpt-2,
 *           llama3, an unknown name, a u32 instead of a string,
 *           deepseek-r1-qwen); bits 3-6 write the bos, eos, eot, unknown
 *           ids; bit 7 write merges
 *   byte 2: bit 0 add the 256 byte tokens after the others; bit 1 scores
 *           as f64; bit 2 token types as u8; bit 3 one score too few; bit 4
 *           also render and encode a chatml conversation; bit 5 padding id;
 *           bit 6 eom id
 *   bytes 3-6: the bos, eos, eot, unknown ids (0xff: none, 0xfe: n_vocab)
 *   then fields at FUZZ_SEP: the text to encode, then one per token (a type
 *   byte (low 3 bits; 7 is not a type), a score byte, the text) or, when the
 *   first byte has bit 7 set, a merge ("left right" after that byte). */
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/gguf_gen.h"

#include "models/tmpl.h"

#define MAX_FIELDS 4096

struct vocab {
	const uint8_t *text[MAX_FIELDS + 256];
	size_t len[MAX_FIELDS + 256];
	uint8_t type[MAX_FIELDS + 256];
	float score[MAX_FIELDS + 256];
	size_t n;
	const uint8_t *merge[MAX_FIELDS];
	size_t merge_len[MAX_FIELDS];
	size_t n_merges;
	char bytes[256][8];      /* texts of the added byte tokens */
};

static void add_byte_tokens(struct vocab *v, bool bpe)
{
	for (int b = 0; b < 256; b++) {
		size_t k = bpe ? gw_gpt2_byte_char(b, v->bytes[b])
			       : (size_t)snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
		v->text[v->n] = (const uint8_t *)v->bytes[b];
		v->len[v->n] = k;
		v->type[v->n] = bpe ? 1 : 6;
		v->score[v->n++] = 0;
	}
}

static void read_fields(fuzz_in *in, struct vocab *v)
{
	for (size_t i = 0; in->n > 0 && i < MAX_FIELDS; i++) {
		fuzz_in f = fuzz_field(in);
		uint8_t m = fuzz_byte(&f);
		if (m & 0x80) {
			v->merge[v->n_merges] = f.p;
			v->merge_len[v->n_merges++] = f.n;
			continue;
		}
		int8_t s = (int8_t)fuzz_byte(&f);
		v->text[v->n] = f.p;
		v->len[v->n] = f.n;
		v->type[v->n] = m & 7;
		v->score[v->n++] = s / 4.0f;
	}
}

static void write_id(gw *w, const char *key, uint8_t b, size_t n_vocab)
{
	gw_kv_u32(w, key, b == 0xff ? UINT32_MAX : b == 0xfe ? (uint32_t)n_vocab : b);
}

static void write_vocab(gw *w, const struct vocab *v, const uint8_t *fl, const uint8_t *ids)
{
	static const char *const pres[] = {NULL, "llama-bpe", "qwen2", "gpt-2", "llama3",
					   "no-such-pre", NULL, "deepseek-r1-qwen"};
	const char *model = fl[0] & 1 ? "gpt2" : "llama";
	gw_kv_str(w, "tokenizer.ggml.model", model, strlen(model));
	gw_kv_arr(w, "tokenizer.ggml.tokens", GGUF_STR, v->n);
	for (size_t i = 0; i < v->n; i++)
		gw_str(w, (const char *)v->text[i], v->len[i]);
	if (fl[0] & 2) {
		gw_kv_arr(w, "tokenizer.ggml.token_type", fl[2] & 4 ? GGUF_U8 : GGUF_I32, v->n);
		for (size_t i = 0; i < v->n; i++)
			gw_le(w, v->type[i], fl[2] & 4 ? 1 : 4);
	}
	if (fl[0] & 4) {
		size_t n = fl[2] & 8 && v->n ? v->n - 1 : v->n;
		gw_kv_arr(w, "tokenizer.ggml.scores", fl[2] & 2 ? GGUF_F64 : GGUF_F32, n);
		for (size_t i = 0; i < n; i++) {
			double d = v->score[i];
			uint64_t u;
			memcpy(&u, &d, 8);
			if (fl[2] & 2)
				gw_u64(w, u);
			else
				gw_f32(w, v->score[i]);
		}
	}
	if (fl[1] & 0x80) {
		gw_kv_arr(w, "tokenizer.ggml.merges", GGUF_STR, v->n_merges);
		for (size_t i = 0; i < v->n_merges; i++)
			gw_str(w, (const char *)v->merge[i], v->merge_len[i]);
	}
	unsigned pre = fl[1] & 7;
	if (pres[pre])
		gw_kv_str(w, "tokenizer.ggml.pre", pres[pre], strlen(pres[pre]));
	else if (pre == 6)
		gw_kv_u32(w, "tokenizer.ggml.pre", 3);
	static const char *const id_keys[] = {"tokenizer.ggml.bos_token_id",
		"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
		"tokenizer.ggml.unknown_token_id"};
	for (int i = 0; i < 4; i++)
		if (fl[1] & (8 << i))
			write_id(w, id_keys[i], ids[i], v->n);
	if (fl[2] & 0x20)
		write_id(w, "tokenizer.ggml.padding_token_id", ids[0] ^ ids[1], v->n);
	if (fl[2] & 0x40)
		write_id(w, "tokenizer.ggml.eom_token_id", ids[2] ^ ids[3], v->n);
	if (fl[0] & 8)
		gw_kv_bool(w, "tokenizer.ggml.add_bos_token", fl[0] & 0x10);
	if (fl[0] & 0x20)
		gw_kv_bool(w, "tokenizer.ggml.add_space_prefix", fl[0] & 0x40);
	if (fl[0] & 0x80)
		gw_kv_str(w, "general.name", "Phi-3 mini", 10);
}

/* Encodes text with flags; checks counts, ranges and decoding. */
static void exercise(const tok *t, const char *text, size_t len, unsigned flags)
{
	int need = tok_encode(t, text, len, flags, NULL, 0);
	FUZZ_CHECK(need >= 0);
	int32_t *ids = xmalloc((size_t)MAX(need, 1) * sizeof *ids);
	FUZZ_CHECK(tok_encode(t, text, len, flags, ids, need) == need);
	for (int i = 0; i < need; i++)
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
	int n_out = tok_detokenize(t, ids, need, true, NULL, 0);
	FUZZ_CHECK(n_out >= 0);
	char *out = xmalloc((size_t)MAX(n_out, 0) + 1);
	FUZZ_CHECK(tok_detokenize(t, ids, need, true, out, (size_t)n_out + 1) == n_out);
	int n_clean = tok_detokenize_text(t, ids, need, out, (size_t)n_out + 1);
	FUZZ_CHECK(n_clean >= 0 && n_clean <= n_out);
	tok_decoder d;
	tok_decoder_init(&d, true);
	static char piece[FUZZ_PIECE_CAP];
	for (int i = 0; i < need; i++) {
		int k = tok_decode(t, &d, ids[i], piece, sizeof piece);
		FUZZ_CHECK(k >= 0 && fuzz_utf8_ok(piece, (size_t)k));
	}
	int k = tok_decode_flush(t, &d, piece, sizeof piece);
	FUZZ_CHECK(k >= 0 && fuzz_utf8_ok(piece, (size_t)k));
	free(out);
	free(ids);
}

static void check_tok(const tok *t, const struct vocab *v, const char *text, size_t len, bool chat)
{
	int32_t n_vocab = tok_n_vocab(t);
	FUZZ_CHECK(n_vocab == (int32_t)v->n);
	FUZZ_CHECK(tok_bos(t) >= -1 && tok_bos(t) < n_vocab && tok_eos(t) >= -1 && tok_eos(t) < n_vocab);
	for (size_t i = 0; i < v->n; i++) {
		size_t n;
		const char *s = tok_text(t, (int32_t)i, &n);
		FUZZ_CHECK(s && n == v->len[i] && memcmp(s, v->text[i], n) == 0 && s[n] == '\0');
		int32_t id = tok_lookup(t, (const char *)v->text[i], v->len[i]);
		FUZZ_CHECK(v->len[i] == 0 ? id == -1 : id >= (int32_t)i);   /* duplicates: the last */
	}
	FUZZ_CHECK(tok_text(t, n_vocab, NULL) == NULL && tok_text(t, -1, NULL) == NULL);
	exercise(t, text, len, 0);
	exercise(t, text, len, TOK_ADD_BOS | TOK_PARSE_SPECIAL);
	if (!chat)
		return;
	tmpl_msg msgs[2] = {{"system", "Be brief.", 9}, {"user", text, len}};
	tmpl_prompt p;
	err e = {0};
	FUZZ_CHECK(tmpl_render(TMPL_CHATML, msgs, 2, true, &p, &e) == 0);
	int need = tmpl_encode(&p, t, NULL, 0);
	FUZZ_CHECK(need >= 0);
	int32_t *ids = xmalloc((size_t)MAX(need, 1) * sizeof *ids);
	FUZZ_CHECK(tmpl_encode(&p, t, ids, need) == need);
	free(ids);
	int32_t stop[2];
	FUZZ_CHECK(tmpl_stop_ids(TMPL_CHATML, t, stop, 2) <= 2);
	tmpl_prompt_deinit(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct vocab v;
	fuzz_in in = {data, size};
	uint8_t fl[3], ids[4];
	for (int i = 0; i < 3; i++)
		fl[i] = fuzz_byte(&in);
	for (int i = 0; i < 4; i++)
		ids[i] = fuzz_byte(&in);
	fuzz_in text = fuzz_field(&in);
	v.n = v.n_merges = 0;
	read_fields(&in, &v);
	if (fl[2] & 1)
		add_byte_tokens(&v, fl[0] & 1);
	gw w;
	gw_begin(&w, 3);
	write_vocab(&w, &v, fl, ids);
	gw_end(&w, 32, 0);
	err e = {0};
	gguf_file *f = gguf_open_mem(w.p, w.n, "vocab.gguf", &e);
	FUZZ_CHECK(f != NULL);       /* the writer makes well-formed files */
	tok *t = f ? tok_new(f, &e) : NULL;
	if (f && !t)
		FUZZ_CHECK(strncmp(e.msg, "vocab.gguf: ", 12) == 0);
	FUZZ_NOTE("%zu tokens, %zu merges: %s", v.n, v.n_merges, t ? "built" : e.msg);
	if (t) {
		char *s = fuzz_copy(text.p, text.n, false);
		check_tok(t, &v, s, text.n, fl[2] & 0x10);
		free(s);
	}
	tok_free(t);
	gguf_close(f);
	free(w.p);
	return 0;
}
