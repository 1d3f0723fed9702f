/* tests/fuzz/fuzz_tok_text.c: arbitrary bytes through the real tokenizers.
 *
 * Input: byte 0 picks the vocabulary (fuzz_vocab), byte 1 the options
 * (bit 0 TOK_ADD_BOS, bit 1 TOK_PARSE_SPECIAL, bit 2 control tokens only
 * inside spans, bit 3 also decode the text's bytes as token ids), byte 2
 * seeds the spans; the rest is the text. Checked: the snprintf-like counts
 * agree at every capacity, ids are in range, plain text never yields control
 * tokens, the streaming decoder gives well-formed UTF-8 and consumes nothing
 * when its buffer is too small, and UTF-8 text read without special tokens
 * comes back byte for byte (but U+2581, which SentencePiece reads as a space).
 * That last holds for these vocabularies: none has a user-defined token left
 * after the end-of-generation override, after which SentencePiece would add a
 * space, as llama.cpp does. */
#include "tests/fuzz/fuzz.h"

#include "models/tok.h"

/* Spans over [0, len) from a small LCG seeded by seed: sorted, disjoint. */
static tok_span *make_spans(size_t len, uint8_t seed, size_t *n)
{
	tok_span *s = xmalloc((len / 2 + 2) * sizeof *s);
	uint32_t x = seed * 2654435761u + 1;
	size_t at = 0;
	*n = 0;
	while (at < len) {
		x = x * 1103515245u + 12345u;
		size_t gap = (x >> 16) % 8, run = 1 + (x >> 20) % 24;
		if (at + gap >= len)
			break;
		at += gap;
		run = MIN(run, len - at);
		s[(*n)++] = (tok_span){.off = at, .len = run};
		at += run + 1;
	}
	return s;
}

/* Streams ids through tok_decode: every piece fits its exact size after a
 * refusal at one byte less, and the whole output is UTF-8. Returns the text
 * (caller frees), length in *len. */
static char *stream_decode(const tok *t, const int32_t *ids, int n, size_t *len)
{
	size_t cap = 64, used = 0;
	char *all = xmalloc(cap);
	tok_decoder d;
	tok_decoder_init(&d, true);
	static char piece[FUZZ_PIECE_CAP], small[FUZZ_PIECE_CAP];
	for (int i = 0; i <= n; i++) {
		tok_decoder before = d;
		int k = i < n ? tok_decode(t, &d, ids[i], piece, sizeof piece)
			      : tok_decode_flush(t, &d, piece, sizeof piece);
		FUZZ_CHECK(k >= 0);
		if (k < 0)
			break;
		if (k > 0) {     /* one byte less is refused and leaves the state as it was */
			tok_decoder again = before;
			int r = i < n ? tok_decode(t, &again, ids[i], small, (size_t)k)
				      : tok_decode_flush(t, &again, small, (size_t)k);
			FUZZ_CHECK(r == -1 && memcmp(&again, &before, sizeof before) == 0);
		}
		xgrow_size(&all, &cap, used + (size_t)k + 1, 1);
		memcpy(all + used, piece, (size_t)k);
		used += (size_t)k;
	}
	FUZZ_CHECK(fuzz_utf8_ok(all, used));
	*len = used;
	return all;
}

/* tok_detokenize at a full and a short capacity: same count, a prefix. */
static char *detokenize(const tok *t, const int32_t *ids, int n, size_t *len)
{
	int need = tok_detokenize(t, ids, n, true, NULL, 0);
	FUZZ_CHECK(need >= 0);
	char *s = xmalloc((size_t)MAX(need, 0) + 1);
	FUZZ_CHECK(tok_detokenize(t, ids, n, true, s, (size_t)need + 1) == need);
	FUZZ_CHECK(s[need] == '\0');
	size_t half = (size_t)need / 2 + 1;
	char *h = xmalloc(half);
	FUZZ_CHECK(tok_detokenize(t, ids, n, true, h, half) == need);
	FUZZ_CHECK(memcmp(h, s, half - 1) == 0 && h[half - 1] == '\0');
	free(h);
	int clean = tok_detokenize_text(t, ids, n, NULL, 0);
	FUZZ_CHECK(clean >= 0 && clean <= need);
	char *c = xmalloc((size_t)MAX(clean, 0) + 1);
	FUZZ_CHECK(tok_detokenize_text(t, ids, n, c, (size_t)clean + 1) == clean);
	free(c);
	*len = (size_t)need;
	return s;
}

/* Ids decoded from raw bytes (two per id), some outside the vocabulary. */
static void decode_raw_ids(const tok *t, const uint8_t *p, size_t n)
{
	int n_ids = (int)MIN(n / 2, 512);
	int32_t *ids = xmalloc((size_t)MAX(n_ids, 1) * sizeof *ids);
	int32_t v = tok_n_vocab(t);
	for (int i = 0; i < n_ids; i++) {
		int32_t x = (int32_t)(p[2 * i] | p[2 * i + 1] << 8);
		ids[i] = p[2 * i + 1] == 0xff ? (p[2 * i] & 1 ? -1 - x % 4 : v + x % 4) : x % v;
	}
	size_t len;
	free(stream_decode(t, ids, n_ids, &len));
	free(detokenize(t, ids, n_ids, &len));
	free(ids);
}

/* SentencePiece spells a space as U+2581, so text holding that character
 * comes back with spaces: the one loss the round trip allows. */
static bool spm_ambiguous(const tok *t, const char *text, size_t n)
{
	return tok_kind_of(t) == TOK_SPM && memmem(text, n, "\xe2\x96\x81", 3) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	unsigned vocab = fuzz_byte(&in), opt = fuzz_byte(&in);
	uint8_t seed = fuzz_byte(&in);
	const tok *t = fuzz_vocab(vocab);
	unsigned flags = (opt & 1 ? TOK_ADD_BOS : 0) | (opt & 2 ? TOK_PARSE_SPECIAL : 0);
	char *text = fuzz_copy(in.p, in.n, false);
	size_t n_spans = 0;
	tok_span *spans = opt & 4 ? make_spans(in.n, seed, &n_spans) : NULL;
	int need = spans ? tok_encode_spans(t, text, in.n, flags, spans, n_spans, NULL, 0)
			 : tok_encode(t, text, in.n, flags, NULL, 0);
	FUZZ_CHECK(need >= 0);
	int32_t *ids = xmalloc((size_t)MAX(need, 1) * sizeof *ids);
	int got = spans ? tok_encode_spans(t, text, in.n, flags, spans, n_spans, ids, need)
			: tok_encode(t, text, in.n, flags, ids, need);
	FUZZ_CHECK(got == need);
	int32_t few[4];
	int cap = MIN(need / 2, 4);
	int again = tok_encode(t, text, in.n, flags, few, cap);
	if (!spans) {
		FUZZ_CHECK(again == need);
		FUZZ_CHECK(cap == 0 || memcmp(few, ids, (size_t)cap * sizeof *ids) == 0);
	}
	bool bos = (flags & TOK_ADD_BOS) && need > 0 && ids[0] == tok_bos(t);
	for (int i = 0; i < need; i++) {
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
		if (!(flags & TOK_PARSE_SPECIAL) && !(bos && i == 0))
			FUZZ_CHECK(!tok_is_control(t, ids[i]));
	}
	size_t n_out, n_stream;
	char *out = detokenize(t, ids, need, &n_out);
	char *stream = stream_decode(t, ids, need, &n_stream);
	if (!(flags & TOK_PARSE_SPECIAL) && fuzz_utf8_ok(text, in.n)) {
		/* the streaming decoder agrees with the batch one on UTF-8 */
		FUZZ_CHECK(n_stream == n_out && memcmp(stream, out, n_out) == 0);
		if (!spm_ambiguous(t, text, in.n))
			FUZZ_CHECK(n_out == in.n && memcmp(out, text, in.n) == 0);
	}
	if (opt & 8)
		decode_raw_ids(t, in.p, in.n);
	free(stream);
	free(out);
	free(ids);
	free(spans);
	free(text);
	return 0;
}
