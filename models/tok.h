/* models/tok.h: text <-> token ids for the vocabularies GGUF files carry.
 *
 * tok_new() reads tokenizer.ggml.* metadata and copies what it needs, so the
 * tokenizer does not depend on the gguf_file afterwards. Kinds:
 *   - "llama": SentencePiece-style (leading space, U+2581 for spaces, merges
 *     by tokenizer.ggml.scores, byte fallback to <0xNN> tokens);
 *   - "gpt2": byte-level BPE (GPT-2's byte-to-character mapping, merges by
 *     rank from tokenizer.ggml.merges, text first split into words by the
 *     pre-tokenizer tokenizer.ggml.pre names: llama-bpe, qwen2 or gpt-2;
 *     others fall back to the llama-bpe rules with a tok_warning()).
 * Control tokens are never produced from user text unless TOK_PARSE_SPECIAL
 * is given (and tok_encode_spans() confines them to a template's own text).
 * As in llama.cpp, Phi-3 vocabularies (general.name) drop the whitespace
 * that follows a special token, and text that cannot be UTF-8 goes to the
 * BPE pre-tokenizer as U+FFFD. A tok is immutable after creation: any thread may use it; a
 * tok_decoder is per stream and belongs to its caller. */
#ifndef PAGECHAT_TOK_H
#define PAGECHAT_TOK_H

#include "base/base.h"
#include "models/gguf.h"

typedef struct tok tok;

enum tok_flags {
	TOK_ADD_BOS = 1 << 0,        /* prepend BOS when the vocabulary asks for it
	                                (tokenizer.ggml.add_bos_token; default true,
	                                for BPE only with llama-bpe) */
	TOK_PARSE_SPECIAL = 1 << 1,  /* match control-token text (templates only);
	                                user-defined tokens are matched always */
};

/* Longest text tok_encode() takes, in bytes. */
#define TOK_MAX_TEXT_BYTES ((size_t)256 << 20)

/* Bounds on the vocabularies tok_new() accepts (real ones have below 2^18
 * tokens of below 2^10 bytes, and below 2^20 merges); past them it fails
 * with the key and the limit named. */
#define TOK_MAX_VOCAB       (1 << 22)    /* tokenizer.ggml.tokens entries */
#define TOK_MAX_TOKEN_BYTES (1 << 16)    /* bytes of one token's text */
#define TOK_MAX_MERGES      (1 << 22)    /* tokenizer.ggml.merges entries */

enum tok_kind { TOK_SPM, TOK_BPE };

/* Builds the tokenizer of f. NULL with e naming the file and key on missing or
 * malformed metadata. Release with tok_free(). */
tok *tok_new(const gguf_file *f, err *e);
void tok_free(tok *t);                                  /* NULL is a no-op */

enum tok_kind tok_kind_of(const tok *t);
int32_t tok_n_vocab(const tok *t);
int32_t tok_bos(const tok *t);                          /* -1 if none */
int32_t tok_eos(const tok *t);                          /* -1 if none */
bool tok_is_eog(const tok *t, int32_t id);              /* EOS, EOT or other end-of-generation */
bool tok_is_control(const tok *t, int32_t id);
/* The id whose vocabulary text is exactly text[0..len) (e.g. "<|eot_id|>"),
 * or -1 (also for len 0). */
int32_t tok_lookup(const tok *t, const char *text, size_t len);
/* BPE: the pre-tokenizer in use ("llama-bpe", "qwen2", "gpt-2" or
 * "llama-bpe (fallback)"); NULL for SentencePiece. Borrowed, static. */
const char *tok_pre(const tok *t);
/* A note for the user about how the file was read (an unknown pre-tokenizer
 * and the fallback taken), or NULL. Borrowed from t; the library never prints. */
const char *tok_warning(const tok *t);
/* A 64-bit fingerprint of the vocabulary: token texts and types, the special
 * ids, BOS and space-prefix settings, the kind and pre-tokenizer. Two
 * tokenizers with the same one encode alike (ids saved for one are valid for
 * the other). Never 0. Cannot fail. */
uint64_t tok_fingerprint(const tok *t);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled via byte
 * fallback, or for BPE read as U+FFFD as llama.cpp does). Writes at most cap ids to out and returns the total number of ids
 * the text needs (like snprintf: a result > cap means out was too small), or
 * -1 when len is over TOK_MAX_TEXT_BYTES. */
int tok_encode(const tok *t, const char *text, size_t len, unsigned flags,
	       int32_t *out, int cap);

/* A byte range of a text. */
typedef struct tok_span {
	size_t off, len;
} tok_span;

/* tok_encode, except that control-token text (TOK_PARSE_SPECIAL) is matched
 * only where it lies wholly inside one of spans[0..n_spans) (sorted, disjoint;
 * borrowed): a chat template marks its own text this way, so special-token
 * text inside message contents stays plain text. User-defined tokens are
 * matched anywhere, as always. */
int tok_encode_spans(const tok *t, const char *text, size_t len, unsigned flags,
		     const tok_span *spans, size_t n_spans, int32_t *out, int cap);

/* The token's raw vocabulary string (e.g. "\xe2\x96\x81the", "<0x0A>"), borrowed
 * from t; NULL for an out-of-range id. */
const char *tok_text(const tok *t, int32_t id, size_t *len);

/* Streaming decoder: turns ids into UTF-8 text, joining byte tokens that form
 * one character across token boundaries. */
typedef struct tok_decoder {
	uint8_t pending[8];        /* bytes of an incomplete UTF-8 sequence */
	int n_pending;
	bool at_start;             /* true before the first text piece (SPM drops
	                              the leading space of the first piece) */
} tok_decoder;

/* at_start: whether the stream begins a text (strip SPM's leading space). */
void tok_decoder_init(tok_decoder *d, bool at_start);
/* Writes the text of id to out[0..] (capacity cap, NUL-terminated when cap > 0).
 * Returns the number of bytes the piece produced (pieces that end mid-character
 * produce 0 until completed; bytes that cannot form UTF-8 become U+FFFD), or -1
 * if cap is too small (nothing consumed). Control tokens (BOS/EOS) and ids
 * outside the vocabulary produce no text and leave at_start set. */
int tok_decode(const tok *t, tok_decoder *d, int32_t id, char *out, size_t cap);
/* Flushes bytes of a character that never completed as U+FFFD. Returns bytes
 * written (0..3) or -1 if cap is too small. */
int tok_decode_flush(const tok *t, tok_decoder *d, char *out, size_t cap);

/* Decodes n ids at once (the piece concatenation llama.cpp calls
 * token_to_piece): raw bytes, no UTF-8 repair; at_start as for the decoder.
 * Writes at most cap - 1 bytes plus a NUL (when cap > 0) and returns the byte
 * count needed (snprintf-like), or -1 if that exceeds INT_MAX. */
int tok_detokenize(const tok *t, const int32_t *ids, int n, bool at_start,
		   char *out, size_t cap);
/* The text of n ids as llama.cpp's llama_detokenize gives it (special tokens
 * kept as ids, rendered as nothing): tok_detokenize from the start of a text,
 * then, for vocabularies that ask for it (llama-bpe, gpt-2), Hugging Face's
 * clean-up of spaces (" ?" -> "?", " 's" -> "'s", ...). Output and result as
 * for tok_detokenize. */
int tok_detokenize_text(const tok *t, const int32_t *ids, int n, char *out, size_t cap);

#endif
