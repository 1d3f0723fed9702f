/* models/tok_int.h: the tokenizer's internals, shared by the files of models/
 * that implement models/tok.h; only models/tok*.c include it.
 *
 * tok.c loads the vocabulary (token texts, types, scores, special ids), answers
 * the queries of tok.h and decodes; tok_encode.c cuts special tokens out of a
 * text and hands each plain fragment to the family's encoder, with the merge
 * heap both encoders use; tok_spm.c is the SentencePiece family ("llama"),
 * tok_bpe.c byte-level BPE ("gpt2": pre-tokenizers and merge ranks). A family
 * is one struct tok_family row; tok.c lists the rows. A tok is immutable once
 * tok_new() returns, so everything here reads it from any thread. */
#ifndef PAGECHAT_TOK_INT_H
#define PAGECHAT_TOK_INT_H

#include "models/tok.h"

#include <string.h>

/* tokenizer.ggml.token_type values. */
enum tok_type {
	TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
	TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6, TT_COUNT
};

/* One vocabulary entry. */
struct tok_entry {
	uint32_t text_off;       /* into text pool; the text is NUL-terminated there */
	uint32_t text_len;       /* bytes */
	uint32_t piece_off;      /* into piece pool */
	uint32_t piece_len;      /* bytes the token decodes to (0 for control) */
	float score;             /* tokenizer.ggml.scores (SPM merge priority) */
	uint8_t type;            /* enum tok_type, after the end-of-generation override */
	bool is_eog;
	bool rstrip;             /* a match swallows the ASCII whitespace after it */
};

/* Where encoded ids go: the first cap are stored, all are counted. */
struct id_sink {
	int32_t *out;            /* borrowed from the caller */
	size_t cap;
	size_t n;                /* ids produced so far */
};

/* A tokenizer family: metadata defaults plus its algorithms. */
struct tok_family {
	const char *model;           /* tokenizer.ggml.model value */
	enum tok_kind kind;
	int32_t def_bos, def_eos, def_unk;
	bool def_add_bos, def_add_space_prefix;
	bool needs_scores;
	/* Reads family-specific metadata after the texts and types (may be NULL). */
	int (*load)(tok *t, const gguf_file *f, err *e);
	/* The token that stands for raw byte b when nothing longer matches, -1 if none. */
	int32_t (*byte_token)(const tok *t, int b);
	/* Encodes one raw fragment; after_special is true at the start of the
	 * text and after a special token. */
	void (*encode_raw)(const tok *t, const char *s, size_t n, bool after_special,
			   struct id_sink *out);
	/* Writes token id's piece to dst (room for its text length); returns bytes. */
	size_t (*make_piece)(const tok *t, int32_t id, char *dst);
};

struct cp_text;               /* tok_bpe.c: a text as classed code points */

/* A pre-tokenizer: how tokenizer.ggml.pre values split text into words, plus
 * the settings llama.cpp ties to them. */
struct bpe_pre {
	const char *name;            /* canonical tokenizer.ggml.pre value */
	const char *aliases[6];      /* other values with the same rules */
	size_t (*word_end)(const struct cp_text *c, size_t pos, int max_digits);
	int max_digits;              /* longest run of digits in one word */
	bool ignore_merges;          /* a word that is a token is taken whole */
	bool clean_spaces;           /* detokenizing drops " ." etc. */
	bool def_add_bos;
};

/* Immutable once tok_new() returns. */
struct tok {
	const struct tok_family *fam;   /* borrowed: a family row (static) */
	int32_t n_vocab;
	uint32_t max_text_len;      /* longest token text, bytes */
	struct tok_entry *tokens;   /* owned; [n_vocab] */
	char *text_pool;            /* owned; token texts, each NUL-terminated */
	char *piece_pool;           /* owned; decoded pieces, back to back */
	int32_t *hash;              /* owned; [hash_mask + 1] ids, -1 empty */
	size_t hash_mask;
	int32_t *special;           /* owned; [n_special] control/user/unknown ids,
	                               longest text first */
	int32_t n_special;
	int32_t byte_id[256];       /* id that encodes a raw byte (byte fallback;
	                               BPE: the token of the byte's character) */
	int32_t bos, eos, eot, eom, unk, pad;   /* -1 when none */
	bool add_bos, add_space_prefix;
	/* byte-level BPE only */
	const struct bpe_pre *pre;  /* borrowed: a pre-tokenizer row (static) */
	struct bpe_merge *merges;   /* owned; [merge_mask + 1] slots, left -1 empty */
	size_t merge_mask;
	char warning[256];          /* "" or a note for the caller (tok_warning) */
};

/* ---- vocabulary lookup ---- */

static inline uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static inline const char *entry_text(const tok *t, int32_t id)
{
	return t->text_pool + t->tokens[id].text_off;
}

/* The id whose text is exactly s[0..n), or -1. */
static inline int32_t lookup(const tok *t, const char *s, size_t n)
{
	if (n > t->max_text_len)
		return -1;
	for (size_t i = hash_bytes(s, n) & t->hash_mask;; i = (i + 1) & t->hash_mask) {
		int32_t id = t->hash[i];
		if (id < 0)
			return -1;
		if (t->tokens[id].text_len == n && memcmp(entry_text(t, id), s, n) == 0)
			return id;
	}
}

/* ---- UTF-8 ---- */

/* Bytes a well-formed sequence starting with lead byte c needs, 0 if c cannot
 * start one. */
static inline int utf8_need(uint8_t c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

/* Whether c may be byte pos (1..3) of a sequence led by lead. The second byte's
 * range excludes overlong forms, surrogates and code points past U+10FFFF. */
static inline bool utf8_cont_ok(uint8_t lead, int pos, uint8_t c)
{
	uint8_t lo = 0x80, hi = 0xbf;
	if (pos == 1) {
		lo = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
		hi = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
	}
	return c >= lo && c <= hi;
}

/* Length of the well-formed UTF-8 sequence at s (n > 0 bytes available), or 1
 * when the byte at s does not start one (it then stands alone). */
static inline size_t utf8_len(const uint8_t *s, size_t n)
{
	int need = utf8_need(s[0]);
	if (need <= 1 || n < (size_t)need)
		return 1;
	for (int i = 1; i < need; i++)
		if (!utf8_cont_ok(s[0], i, s[i]))
			return 1;
	return (size_t)need;
}

/* ---- encoding ---- */

/* Counts id (none if negative) and stores it while there is room. */
static inline void sink_push(struct id_sink *s, int32_t id)
{
	if (id < 0)
		return;
	if (s->n < s->cap)
		s->out[s->n] = id;
	s->n++;
}

/* A binary heap of candidate merges (both families): elements of `size`
 * bytes (at most HEAP_MAX_ELEM); the top is the one that `before` puts
 * before all others. A zeroed heap with size and before set is empty. */
#define HEAP_MAX_ELEM 32
typedef struct merge_heap {
	unsigned char *a;  /* owned; free() it when done */
	size_t n, cap, size;
	bool (*before)(const void *a, const void *b);
} merge_heap;

/* Pushes the element e (h->size bytes). Cannot fail (grows the array). */
void tok_heap_push(merge_heap *h, const void *e);
/* Moves the top element to out; the heap must not be empty. */
void tok_heap_pop(merge_heap *h, void *out);

/* The families (tok_spm.c, tok_bpe.c). */
extern const struct tok_family tok_spm_family, tok_bpe_family;

#endif
