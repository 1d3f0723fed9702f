/* models/tok.c: vocabularies from GGUF metadata, SentencePiece-style and
 * byte-level BPE encoding, streaming decoding.
 *
 * tok_new() copies every token text into one pool, builds a hash table from
 * text to id (open addressing, built once), and precomputes each token's
 * decoded piece (the bytes it stands for in output text), so decoding is a
 * table lookup. A tokenizer family (SentencePiece "llama", byte-level BPE
 * "gpt2") is a row of `families`: its metadata defaults, how to encode one
 * run of plain text and how to render a token as a piece. The BPE family
 * also has a pre-tokenizer (a row of `bpe_pres`, chosen by tokenizer.ggml.pre)
 * and a hash table from token-id pairs to merge ranks.
 *
 * Encoding splits special tokens out of the text first (user-defined tokens
 * always, control and unknown ones only with TOK_PARSE_SPECIAL; longest text
 * first, each one over every remaining plain fragment), then encodes each plain
 * fragment with the family's algorithm. This mirrors llama.cpp's behaviour,
 * which the reference test vectors come from. */
#include "models/tok.h"

#include "models/unicode_tab.h"

#include <assert.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tokenizer.ggml.token_type values. */
enum tok_type {
	TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
	TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6, TT_COUNT
};

/* TOK_MAX_TEXT_BYTES keeps symbol offsets inside 32 bits even after
 * SentencePiece's space escaping triples the size. */
_Static_assert(3 * (TOK_MAX_TEXT_BYTES + 1) < UINT32_MAX, "symbol offsets are 32-bit");

static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

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

/* One piece of the input once special tokens are cut out: a special token or
 * the plain text between two of them. */
struct frag {
	size_t off, len;         /* bytes of the input text (raw fragment) */
	int32_t id;              /* the special token, or -1 for raw text */
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

/* Immutable once tok_new() returns. */
struct tok {
	const struct tok_family *fam;   /* borrowed: a row of families */
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
	const struct bpe_pre *pre;  /* borrowed: a row of bpe_pres */
	struct bpe_merge *merges;   /* owned; [merge_mask + 1] slots, left -1 empty */
	size_t merge_mask;
	char warning[256];          /* "" or a note for the caller (tok_warning) */
};

/* ------------------------------------------------------------------ */
/* Vocabulary lookup                                                   */

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static const char *entry_text(const tok *t, int32_t id)
{
	return t->text_pool + t->tokens[id].text_off;
}

/* The id whose text is exactly s[0..n), or -1. */
static int32_t lookup(const tok *t, const char *s, size_t n)
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

/* Duplicate texts map to the highest id, as in llama.cpp. Empty texts are
 * never looked up and stay out of the table. */
static void build_hash(tok *t)
{
	size_t n_slots = 16;
	while (n_slots < 2 * (size_t)t->n_vocab)
		n_slots *= 2;
	t->hash = xmalloc(n_slots * sizeof *t->hash);
	memset(t->hash, 0xff, n_slots * sizeof *t->hash);
	t->hash_mask = n_slots - 1;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t n = t->tokens[id].text_len;
		if (n == 0)
			continue;
		size_t i = hash_bytes(entry_text(t, id), n) & t->hash_mask;
		while (t->hash[i] >= 0 && (t->tokens[t->hash[i]].text_len != n ||
		       memcmp(entry_text(t, t->hash[i]), entry_text(t, id), n) != 0))
			i = (i + 1) & t->hash_mask;
		t->hash[i] = id;
	}
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */

/* Bytes a well-formed sequence starting with lead byte c needs, 0 if c cannot
 * start one. */
static int utf8_need(uint8_t c)
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
static bool utf8_cont_ok(uint8_t lead, int pos, uint8_t c)
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
static size_t utf8_len(const uint8_t *s, size_t n)
{
	int need = utf8_need(s[0]);
	if (need <= 1 || n < (size_t)need)
		return 1;
	for (int i = 1; i < need; i++)
		if (!utf8_cont_ok(s[0], i, s[i]))
			return 1;
	return (size_t)need;
}

/* ------------------------------------------------------------------ */
/* A binary heap of candidate merges (both tokenizers)                 */

/* Elements of `size` bytes (at most HEAP_MAX_ELEM); the top is the one that
 * `before` puts before all others. */
#define HEAP_MAX_ELEM 32
typedef struct merge_heap {
	unsigned char *a;  /* owned */
	size_t n, cap, size;
	bool (*before)(const void *a, const void *b);
} merge_heap;

#define HEAP_AT(h, i) ((h)->a + (i) * (h)->size)

static void heap_push(merge_heap *h, const void *e)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 64;
		h->a = xrealloc(h->a, h->cap * h->size);
	}
	size_t i = h->n++;
	while (i > 0 && h->before(e, HEAP_AT(h, (i - 1) / 2))) {
		memcpy(HEAP_AT(h, i), HEAP_AT(h, (i - 1) / 2), h->size);
		i = (i - 1) / 2;
	}
	memcpy(HEAP_AT(h, i), e, h->size);
}

/* Moves the top to out; the heap must not be empty. */
static void heap_pop(merge_heap *h, void *out)
{
	unsigned char last[HEAP_MAX_ELEM];
	memcpy(out, HEAP_AT(h, 0), h->size);
	memcpy(last, HEAP_AT(h, --h->n), h->size);
	size_t i = 0, n = h->n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && h->before(HEAP_AT(h, c + 1), HEAP_AT(h, c)))
			c++;
		if (!h->before(HEAP_AT(h, c), last))
			break;
		memcpy(HEAP_AT(h, i), HEAP_AT(h, c), h->size);
		i = c;
	}
	if (n > 0)
		memcpy(HEAP_AT(h, i), last, h->size);
}

/* ------------------------------------------------------------------ */
/* SentencePiece encoding                                              */

struct spm_sym {
	int32_t prev, next;      /* neighbours in the symbol list, -1 at the ends */
	uint32_t off, len;       /* bytes of the escaped text; len 0: merged away */
};

struct spm_bigram {
	float score;             /* of the merged token */
	int32_t left, right;     /* symbol indices */
	uint32_t len;            /* left.len + right.len when queued (stale check) */
};
_Static_assert(sizeof(struct spm_bigram) <= HEAP_MAX_ELEM, "a heap element");

struct spm_work {
	const tok *t;
	const char *buf;         /* escaped text */
	struct spm_sym *sym;
	merge_heap heap;         /* of spm_bigram: best score, then leftmost */
};

/* Merges may only form ordinary tokens: text that happens to spell a control,
 * unknown, byte or unused token stays plain (SentencePiece keeps those out of
 * its piece table). */
static bool can_match(const tok *t, int32_t id)
{
	uint8_t ty = t->tokens[id].type;
	return ty == TT_NORMAL || ty == TT_USER || ty == TT_UNDEFINED;
}

static bool bigram_before(const void *pa, const void *pb)
{
	const struct spm_bigram *a = pa, *b = pb;
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Queues the merge of adjacent symbols l and r if their text is a token. */
static void try_bigram(struct spm_work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0)
		return;
	uint32_t len = w->sym[l].len + w->sym[r].len;
	int32_t id = lookup(w->t, w->buf + w->sym[l].off, len);
	if (id < 0 || !can_match(w->t, id))
		return;
	heap_push(&w->heap, &(struct spm_bigram){.score = w->t->tokens[id].score,
		  .left = l, .right = r, .len = len});
}

/* Escapes s for SentencePiece: optional leading space, ' ' -> U+2581.
 * Returns the escaped length; dst has room for 3 * (n + 1) bytes. */
static size_t spm_escape(char *dst, const char *s, size_t n, bool space_prefix)
{
	size_t k = 0;
	if (space_prefix) {
		memcpy(dst, SPM_SPACE, 3);
		k = 3;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(dst + k, SPM_SPACE, 3);
			k += 3;
		} else {
			dst[k++] = s[i];
		}
	}
	return k;
}

/* Splits buf into UTF-8 characters, one symbol each. Returns the count. */
static int32_t spm_split(struct spm_sym *sym, const char *buf, size_t n)
{
	int32_t n_sym = 0;
	for (size_t off = 0; off < n;) {
		size_t len = utf8_len((const uint8_t *)buf + off, n - off);
		sym[n_sym] = (struct spm_sym){.prev = n_sym - 1, .next = n_sym + 1,
			.off = (uint32_t)off, .len = (uint32_t)len};
		n_sym++;
		off += len;
	}
	if (n_sym > 0)
		sym[n_sym - 1].next = -1;
	return n_sym;
}

/* The merge loop: always apply the best-scoring merge available (leftmost on
 * ties). Stale queue entries (a side merged elsewhere) are skipped. */
static void spm_merge(struct spm_work *w, int32_t n_sym)
{
	for (int32_t i = 0; i + 1 < n_sym; i++)
		try_bigram(w, i, i + 1);
	while (w->heap.n > 0) {
		struct spm_bigram b;
		heap_pop(&w->heap, &b);
		struct spm_sym *l = &w->sym[b.left], *r = &w->sym[b.right];
		if (l->len == 0 || r->len == 0 || l->len + r->len != b.len)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = b.left;
		try_bigram(w, l->prev, b.left);
		try_bigram(w, b.left, l->next);
	}
}

static void sink_push(struct id_sink *s, int32_t id)
{
	if (id < 0)
		return;
	if (s->n < s->cap)
		s->out[s->n] = id;
	s->n++;
}

static void spm_encode_raw(const tok *t, const char *s, size_t n, bool after_special,
			   struct id_sink *out)
{
	char *buf = xmalloc(3 * (n + 1));
	size_t n_buf = spm_escape(buf, s, n, after_special && t->add_space_prefix);
	struct spm_work w = {.t = t, .buf = buf, .sym = xmalloc((n_buf + 1) * sizeof *w.sym),
			     .heap = {.size = sizeof(struct spm_bigram), .before = bigram_before}};
	int32_t n_sym = spm_split(w.sym, buf, n_buf);
	spm_merge(&w, n_sym);
	/* Every merged symbol is a token; single characters that are not fall
	 * back to their bytes (<0xNN> tokens). */
	for (int32_t i = n_sym > 0 ? 0 : -1; i >= 0; i = w.sym[i].next) {
		int32_t id = lookup(t, buf + w.sym[i].off, w.sym[i].len);
		if (id >= 0 && can_match(t, id)) {
			sink_push(out, id);
			continue;
		}
		for (uint32_t k = 0; k < w.sym[i].len; k++)
			sink_push(out, t->byte_id[(uint8_t)buf[w.sym[i].off + k]]);
	}
	free(w.heap.a);
	free(w.sym);
	free(buf);
}

/* Normal tokens show U+2581 as a space, byte tokens are their byte, user and
 * unknown tokens their text; control and unused tokens render nothing. */
static size_t spm_make_piece(const tok *t, int32_t id, char *dst)
{
	const struct tok_entry *e = &t->tokens[id];
	const char *s = entry_text(t, id);
	switch (e->type) {
	case TT_USER:
	case TT_UNKNOWN:
		memcpy(dst, s, e->text_len);
		return e->text_len;
	case TT_BYTE:
		dst[0] = (char)strtol(s + 3, NULL, 16); /* "<0xNN>", checked at load */
		return 1;
	case TT_NORMAL:
	case TT_UNDEFINED:
		break;
	default:
		return 0;
	}
	size_t k = 0;
	for (size_t i = 0; i < e->text_len; i++) {
		if (i + 3 <= e->text_len && memcmp(s + i, SPM_SPACE, 3) == 0) {
			dst[k++] = ' ';
			i += 2;
		} else {
			dst[k++] = s[i];
		}
	}
	return k;
}

/* ------------------------------------------------------------------ */
/* Byte-level BPE: the byte <-> character mapping                       */

/* GPT-2's byte-level vocabularies spell every byte as one printable
 * character: the printable Latin-1 bytes (! to ~, U+00A1 to U+00AC, U+00AE to
 * U+00FF) stand for themselves, the other 68 bytes (0x00-0x20, 0x7F-0xA0,
 * 0xAD) for U+0100 onwards in byte order. So a space is U+0120 'G with dot'. */
static bool byte_is_printable(int b)
{
	return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

static uint32_t char_of_byte(int b)
{
	if (byte_is_printable(b))
		return (uint32_t)b;
	if (b <= 0x20)
		return 0x100 + (uint32_t)b;
	if (b <= 0xa0)
		return 0x100 + 33 + (uint32_t)(b - 0x7f);
	return 0x100 + 67;                      /* 0xAD, the soft hyphen */
}

/* The byte that character cp stands for, or -1 if it stands for none. */
static int byte_of_char(uint32_t cp)
{
	if (cp < 0x100)
		return byte_is_printable((int)cp) ? (int)cp : -1;
	uint32_t k = cp - 0x100;
	if (k <= 32)
		return (int)k;
	if (k <= 66)
		return 0x7f + (int)(k - 33);
	return k == 67 ? 0xad : -1;
}

/* Writes cp as UTF-8 (any value below 2^21, surrogates included, as llama.cpp
 * does); returns 1..4 bytes. */
static size_t put_cp(char *dst, uint32_t cp)
{
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		dst[0] = (char)(0xc0 | cp >> 6);
		dst[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		dst[0] = (char)(0xe0 | cp >> 12);
		dst[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		dst[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	dst[0] = (char)(0xf0 | cp >> 18);
	dst[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	dst[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	dst[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Reads one code point the way llama.cpp does before pre-tokenizing: the lead
 * byte says the length and continuation bytes must be 10xxxxxx, but overlong
 * forms and surrogates pass. A byte that starts nothing valid becomes U+FFFD
 * on its own. Returns the bytes consumed (1..4). */
static size_t get_cp_lenient(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint8_t c = s[0];
	size_t need = c < 0x80 ? 1 : c < 0xc0 ? 0 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : c < 0xf8 ? 4 : 0;
	*cp = 0xfffd;
	if (need == 0 || need > n)
		return 1;
	uint32_t v = need == 1 ? c : c & (0x7fu >> need);
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 1;
		v = v << 6 | (s[i] & 0x3f);
	}
	*cp = v > 0x10ffff ? 0xfffd : v;
	return need;
}

/* The text of token id as bytes: each character mapped back to its byte.
 * Characters outside the mapping (not in real vocabularies) are kept as they
 * are. Returns the byte count (never more than the text length). */
static size_t bpe_make_piece(const tok *t, int32_t id, char *dst)
{
	const struct tok_entry *e = &t->tokens[id];
	const uint8_t *s = (const uint8_t *)entry_text(t, id);
	if (e->type == TT_USER) {
		memcpy(dst, s, e->text_len);
		return e->text_len;
	}
	if (e->type != TT_NORMAL)
		return 0;                       /* control, unknown, unused: no text */
	size_t k = 0;
	for (size_t i = 0; i < e->text_len;) {
		size_t len = utf8_len(s + i, e->text_len - i);
		uint32_t cp;
		get_cp_lenient(s + i, len, &cp);
		int b = len > 1 || s[i] < 0x80 ? byte_of_char(cp) : -1;
		if (b >= 0) {
			dst[k++] = (char)b;
		} else {
			memcpy(dst + k, s + i, len);
			k += len;
		}
		i += len;
	}
	return k;
}

/* The token spelled by byte b's character (e.g. "\xc4\xa0" for a space). */
static int32_t bpe_byte_token(const tok *t, int b)
{
	char buf[4];
	return lookup(t, buf, put_cp(buf, char_of_byte(b)));
}

/* ------------------------------------------------------------------ */
/* Byte-level BPE: pre-tokenizers                                      */

/* A fragment of text as code points with their classes. */
struct cp_text {
	uint32_t *cp;            /* owned; [n] (bad UTF-8 bytes read as U+FFFD) */
	uint8_t *fl;             /* owned; [n] enum uni_class | CP_SPACE */
	uint32_t *off;           /* owned; [n + 1] offsets into bytes */
	char *bytes;             /* owned; the code points re-encoded as UTF-8 */
	size_t n;
};

enum { CP_SPACE = 8 };

/* Out-of-range positions have no class at all (as past the end of text). */
static bool cp_letter(const struct cp_text *c, size_t i)
{
	return i < c->n && (c->fl[i] & 7) == UNI_LETTER;
}

static bool cp_number(const struct cp_text *c, size_t i)
{
	return i < c->n && (c->fl[i] & 7) == UNI_NUMBER;
}

static bool cp_space(const struct cp_text *c, size_t i)
{
	return i < c->n && (c->fl[i] & CP_SPACE);
}

/* [^\s\p{L}\p{N}]: anything but whitespace, letters and numbers. */
static bool cp_other(const struct cp_text *c, size_t i)
{
	return i < c->n && !cp_space(c, i) && !cp_letter(c, i) && !cp_number(c, i);
}

static bool cp_newline(const struct cp_text *c, size_t i)
{
	return i < c->n && (c->cp[i] == '\r' || c->cp[i] == '\n');
}

static void cp_text_init(struct cp_text *c, const char *s, size_t n)
{
	c->cp = xmalloc((n + 1) * sizeof *c->cp);
	c->fl = xmalloc(n + 1);
	c->off = xmalloc((n + 1) * sizeof *c->off);
	c->bytes = xmalloc(3 * n + 1);      /* U+FFFD for a lone byte: 3 bytes */
	c->n = 0;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += get_cp_lenient((const uint8_t *)s + i, n - i, &cp);
		c->cp[c->n] = cp;
		c->fl[c->n] = (uint8_t)(uni_class_of(cp) | (uni_is_space(cp) ? CP_SPACE : 0));
		c->off[c->n++] = (uint32_t)k;
		k += put_cp(c->bytes + k, cp);
	}
	c->off[c->n] = (uint32_t)k;
}

static void cp_text_deinit(struct cp_text *c)
{
	free(c->cp);
	free(c->fl);
	free(c->off);
	free(c->bytes);
}

static uint32_t ascii_lower(uint32_t c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for cl100k): the end, or 0. */
static size_t contraction_end(const struct cp_text *c, size_t pos, bool icase)
{
	if (c->cp[pos] != '\'' || pos + 1 >= c->n)
		return 0;
	uint32_t a = c->cp[pos + 1], b = pos + 2 < c->n ? c->cp[pos + 2] : 0;
	if (icase) {
		a = ascii_lower(a);
		b = ascii_lower(b);
	}
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return pos + 2;
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
		return pos + 3;
	return 0;
}

/* Whitespace at pos: \s*[\r\n]+ (when newlines_first), then \s+(?!\S) (the
 * run less its last character when text follows), then \s+; a position that
 * matches nothing at all is a word of one character. */
static size_t space_end(const struct cp_text *c, size_t pos, bool newlines_first)
{
	size_t k = pos, last_nl = 0;
	for (; cp_space(c, k); k++)
		if (cp_newline(c, k))
			last_nl = k + 1;
	if (newlines_first && last_nl)
		return last_nl;
	if (k - pos > 1 && k < c->n)
		return k - 1;
	return k > pos ? k : pos + 1;
}

/* Llama 3 / Qwen 2 (the cl100k pattern): alternatives tried in order,
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,max}
 *   | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static size_t cl100k_word_end(const struct cp_text *c, size_t pos, int max_digits)
{
	size_t e = contraction_end(c, pos, true);
	if (e)
		return e;
	bool may_lead = !cp_newline(c, pos) && !cp_number(c, pos);
	if (may_lead && (cp_letter(c, pos) || cp_letter(c, pos + 1))) {
		for (e = pos + 1; cp_letter(c, e); e++)
			;
		return e;
	}
	if (cp_number(c, pos)) {
		for (e = pos; cp_number(c, e) && e - pos < (size_t)max_digits; e++)
			;
		return e;
	}
	size_t s = c->cp[pos] == ' ' ? pos + 1 : pos;
	if (cp_other(c, s)) {
		for (e = s; cp_other(c, e); e++)
			;
		while (cp_newline(c, e))
			e++;
		return e;
	}
	return space_end(c, pos, true);
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d | ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+
 *   | \s+(?!\S) | \s+ */
static size_t gpt2_word_end(const struct cp_text *c, size_t pos, int max_digits)
{
	(void)max_digits;
	size_t e = contraction_end(c, pos, false);
	if (e)
		return e;
	size_t s = c->cp[pos] == ' ' ? pos + 1 : pos;
	bool (*const runs[])(const struct cp_text *, size_t) = {cp_letter, cp_number, cp_other};
	for (size_t r = 0; r < ARRAY_LEN(runs); r++) {
		if (!runs[r](c, s))
			continue;
		for (e = s; runs[r](c, e); e++)
			;
		return e;
	}
	return space_end(c, pos, false);
}

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

static const struct bpe_pre bpe_pres[] = {
	{.name = "llama-bpe", .aliases = {"llama3", "llama-v3", "falcon3", "pixtral"},
	 .word_end = cl100k_word_end, .max_digits = 3, .ignore_merges = true,
	 .clean_spaces = true, .def_add_bos = true},
	{.name = "qwen2", .aliases = {"deepseek-r1-qwen"}, .word_end = cl100k_word_end,
	 .max_digits = 1},
	{.name = "gpt-2", .aliases = {"phi-2"}, .word_end = gpt2_word_end, .clean_spaces = true},
};

/* Used for a missing or unknown tokenizer.ggml.pre: the Llama 3 splitting
 * rules (the cl100k pattern most recent byte-level vocabularies share) with
 * llama.cpp's defaults for the rest. */
static const struct bpe_pre bpe_pre_fallback = {
	.name = "llama-bpe (fallback)", .word_end = cl100k_word_end, .max_digits = 3,
	.clean_spaces = true,
};

static const struct bpe_pre *find_pre(gguf_str name)
{
	for (size_t i = 0; i < ARRAY_LEN(bpe_pres); i++) {
		const struct bpe_pre *p = &bpe_pres[i];
		if (gguf_str_eq(name, p->name))
			return p;
		for (size_t k = 0; k < ARRAY_LEN(p->aliases) && p->aliases[k]; k++)
			if (gguf_str_eq(name, p->aliases[k]))
				return p;
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Byte-level BPE: merges                                              */

/* One slot of the merge table: the pair (left, right) of token ids merges
 * into result with priority rank (lower first). */
struct bpe_merge {
	int32_t left, right;     /* left -1: empty slot */
	int32_t rank;            /* index in tokenizer.ggml.merges */
	int32_t result;          /* the token left+right spells, -1 if none */
};

static size_t hash_pair(int32_t l, int32_t r)
{
	uint64_t h = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 31));
}

static const struct bpe_merge *find_merge(const tok *t, int32_t l, int32_t r)
{
	for (size_t i = hash_pair(l, r) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
		const struct bpe_merge *m = &t->merges[i];
		if (m->left < 0)
			return NULL;
		if (m->left == l && m->right == r)
			return m;
	}
}

/* Adds a merge unless the pair is already there (the first, lowest rank wins). */
static void add_merge(tok *t, struct bpe_merge m)
{
	size_t i = hash_pair(m.left, m.right) & t->merge_mask;
	while (t->merges[i].left >= 0) {
		if (t->merges[i].left == m.left && t->merges[i].right == m.right)
			return;
		i = (i + 1) & t->merge_mask;
	}
	t->merges[i] = m;
}

/* Reads tokenizer.ggml.merges ("left right", rank = index). Both sides must
 * be tokens; a merge of text that is not a token can never apply to token
 * ids, so it is left out (real vocabularies have none). */
static int load_merges(tok *t, const gguf_file *f, err *e)
{
	const char *key = "tokenizer.ggml.merges";
	gguf_arr a;
	if (gguf_get_arr(f, key, &a, e) < 0)
		return -1;
	if (a.type != GGUF_STR) {
		err_set(e, "%s: %s must be an array of strings \"left right\" (has %llu %s items)",
			gguf_name(f), key, (unsigned long long)a.n, gguf_vtype_name(a.type));
		return -1;
	}
	if (a.n > TOK_MAX_MERGES) {
		err_set(e, "%s: %s has %llu entries (limit %d)", gguf_name(f), key,
			(unsigned long long)a.n, TOK_MAX_MERGES);
		return -1;
	}
	size_t n_slots = 16;
	while (n_slots < a.n + a.n / 3 + 1)
		n_slots *= 2;
	t->merges = xmalloc(n_slots * sizeof *t->merges);
	for (size_t i = 0; i < n_slots; i++)
		t->merges[i].left = -1;
	t->merge_mask = n_slots - 1;
	char *both = xmalloc((size_t)t->max_text_len * 2 + 1);
	for (uint64_t i = 0; i < a.n; i++) {
		gguf_str s = gguf_arr_str(&a, i);
		const char *sp = s.len > 1 ? memchr(s.p + 1, ' ', s.len - 1) : NULL;
		if (!sp)
			continue;
		size_t n_l = (size_t)(sp - s.p), n_r = s.len - n_l - 1;
		int32_t l = lookup(t, s.p, n_l), r = lookup(t, sp + 1, n_r);
		if (l < 0 || r < 0)
			continue;
		memcpy(both, s.p, n_l);
		memcpy(both + n_l, sp + 1, n_r);
		add_merge(t, (struct bpe_merge){.left = l, .right = r, .rank = (int32_t)i,
			  .result = lookup(t, both, n_l + n_r)});
	}
	free(both);
	return 0;
}

/* Picks the pre-tokenizer; an unknown or missing name falls back with a note. */
static int load_pre(tok *t, const gguf_file *f, err *e)
{
	gguf_str name = {"", 0};
	bool has = gguf_find_key(f, "tokenizer.ggml.pre") >= 0;
	if (has && gguf_get_str(f, "tokenizer.ggml.pre", &name, e) < 0)
		return -1;
	t->pre = find_pre(name);
	if (t->pre)
		return 0;
	t->pre = &bpe_pre_fallback;
	if (has)
		snprintf(t->warning, sizeof t->warning, "%s: tokenizer.ggml.pre '%.*s' is not "
			 "known; splitting text with the llama-bpe (Llama 3) rules", gguf_name(f),
			 (int)MIN(name.len, 64), name.p);
	else
		snprintf(t->warning, sizeof t->warning, "%s: tokenizer.ggml.pre is missing; "
			 "splitting text with the llama-bpe (Llama 3) rules", gguf_name(f));
	return 0;
}

static int bpe_load(tok *t, const gguf_file *f, err *e)
{
	return load_pre(t, f, e) < 0 || load_merges(t, f, e) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* Byte-level BPE: encoding                                            */

struct bpe_sym {
	int32_t prev, next;      /* neighbours, -1 at the ends of the word */
	int32_t id;              /* the token this symbol spells, -1 if none */
	uint32_t off, len;       /* bytes of the word; len 0: merged away */
};

struct bpe_pair {
	int32_t rank;
	int32_t left, right;     /* symbol indices */
	int32_t l_id, r_id;      /* their tokens when queued (stale check) */
	int32_t result;
};
_Static_assert(sizeof(struct bpe_pair) <= HEAP_MAX_ELEM, "a heap element");

struct bpe_work {
	const tok *t;
	struct bpe_sym *sym;     /* owned; one per byte of the longest word */
	merge_heap heap;         /* of bpe_pair: lowest rank, then leftmost */
	char *enc;               /* owned; a word spelled in mapped characters */
};

static bool pair_before(const void *pa, const void *pb)
{
	const struct bpe_pair *a = pa, *b = pb;
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

/* Queues the merge of adjacent symbols l and r if their tokens have one. */
static void try_pair(struct bpe_work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0 || w->sym[l].id < 0 || w->sym[r].id < 0)
		return;
	const struct bpe_merge *m = find_merge(w->t, w->sym[l].id, w->sym[r].id);
	if (m)
		heap_push(&w->heap, &(struct bpe_pair){.rank = m->rank, .left = l, .right = r,
			  .l_id = m->left, .r_id = m->right, .result = m->result});
}

/* The token spelling the whole word s[0..n), -1 if none. */
static int32_t whole_word(struct bpe_work *w, const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += put_cp(w->enc + k, char_of_byte((uint8_t)s[i]));
	return lookup(w->t, w->enc, k);
}

/* One word: start from one symbol per byte and apply the lowest-ranked merge
 * available (leftmost on ties) until none is left. */
static void bpe_word(struct bpe_work *w, const char *s, size_t n, struct id_sink *out)
{
	const tok *t = w->t;
	int32_t id = t->pre->ignore_merges ? whole_word(w, s, n) : -1;
	if (id >= 0) {
		sink_push(out, id);
		return;
	}
	for (size_t i = 0; i < n; i++)
		w->sym[i] = (struct bpe_sym){.prev = (int32_t)i - 1,
			.next = i + 1 < n ? (int32_t)i + 1 : -1,
			.id = t->byte_id[(uint8_t)s[i]], .off = (uint32_t)i, .len = 1};
	w->heap.n = 0;
	for (size_t i = 0; i + 1 < n; i++)
		try_pair(w, (int32_t)i, (int32_t)i + 1);
	while (w->heap.n > 0) {
		struct bpe_pair p;
		heap_pop(&w->heap, &p);
		struct bpe_sym *l = &w->sym[p.left], *r = &w->sym[p.right];
		if (l->len == 0 || r->len == 0 || l->id != p.l_id || r->id != p.r_id)
			continue;
		l->id = p.result;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = p.left;
		try_pair(w, l->prev, p.left);
		try_pair(w, p.left, l->next);
	}
	/* a symbol that spells no token (a merge into a non-token: malformed
	 * vocabularies only) goes out as its bytes */
	for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = w->sym[i].next) {
		if (w->sym[i].id >= 0) {
			sink_push(out, w->sym[i].id);
			continue;
		}
		for (uint32_t k = 0; k < w->sym[i].len; k++)
			sink_push(out, t->byte_id[(uint8_t)s[w->sym[i].off + k]]);
	}
}

static void bpe_encode_raw(const tok *t, const char *s, size_t n, bool after_special,
			   struct id_sink *out)
{
	(void)after_special;
	struct cp_text c;
	cp_text_init(&c, s, n);
	struct bpe_work w = {.t = t, .heap = {.size = sizeof(struct bpe_pair), .before = pair_before}};
	size_t n_bytes = c.off[c.n];
	w.sym = xmalloc((n_bytes + 1) * sizeof *w.sym);
	w.enc = xmalloc(2 * n_bytes + 1);
	for (size_t pos = 0; pos < c.n;) {
		size_t end = t->pre->word_end(&c, pos, t->pre->max_digits);
		bpe_word(&w, c.bytes + c.off[pos], c.off[end] - c.off[pos], out);
		pos = end;
	}
	free(w.enc);
	free(w.heap.a);
	free(w.sym);
	cp_text_deinit(&c);
}

/* SentencePiece byte fallback: the <0xNN> token, else the one-byte token. */
static int32_t spm_byte_token(const tok *t, int b)
{
	char hex[8], one = (char)b;
	snprintf(hex, sizeof hex, "<0x%02X>", b);
	int32_t id = lookup(t, hex, 6);
	return id >= 0 ? id : lookup(t, &one, 1);
}

static const struct tok_family families[] = {
	{.model = "llama", .kind = TOK_SPM, .def_bos = 1, .def_eos = 2, .def_unk = 0,
	 .def_add_bos = true, .def_add_space_prefix = true, .needs_scores = true,
	 .encode_raw = spm_encode_raw, .make_piece = spm_make_piece,
	 .byte_token = spm_byte_token},
	/* llama.cpp's defaults for "gpt2" (BOS/EOS 11) apply only to files
	 * without the keys; converters always write them */
	{.model = "gpt2", .kind = TOK_BPE, .def_bos = 11, .def_eos = 11, .def_unk = -1,
	 .load = bpe_load, .encode_raw = bpe_encode_raw, .make_piece = bpe_make_piece,
	 .byte_token = bpe_byte_token},
};

/* ------------------------------------------------------------------ */
/* Special-token splitting                                             */

struct frag_list {
	struct frag *p;          /* owned */
	size_t n, cap;
};

static void frag_push(struct frag_list *l, size_t off, size_t len, int32_t id)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->p = xrealloc(l->p, l->cap * sizeof *l->p);
	}
	l->p[l->n++] = (struct frag){.off = off, .len = len, .id = id};
}

/* C isspace in the "C" locale (what llama.cpp's strip attributes use). */
static bool c_isspace(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Where control tokens may be matched: anywhere, or (restricted) only
 * inside the given sorted, disjoint byte ranges. */
struct special_where {
	bool restricted;
	const tok_span *spans;   /* borrowed from the caller; [n_spans] */
	size_t n_spans;
};

static bool in_spans(const struct special_where *w, size_t pos, size_t n)
{
	if (!w->restricted)
		return true;
	size_t lo = 0, hi = w->n_spans;      /* first span starting after pos */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (w->spans[mid].off <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && pos + n <= w->spans[lo - 1].off + w->spans[lo - 1].len;
}

/* The bytes of a text already cut out: by a special token, or as whitespace
 * a right-stripping token swallowed. What is not claimed is raw text, and a
 * raw fragment is a maximal unclaimed run. */
struct claims {
	uint64_t *bit;           /* owned; one bit per byte of the text */
	struct frag *cut;        /* owned; the special tokens cut so far, any order */
	size_t n_cut, cap_cut;
};

static bool claimed(const struct claims *c, size_t i)
{
	return c->bit[i >> 6] >> (i & 63) & 1;
}

static bool any_claimed(const struct claims *c, size_t pos, size_t n)
{
	for (size_t i = pos; i < pos + n;) {
		if ((i & 63) == 0 && i + 64 <= pos + n) {
			if (c->bit[i >> 6])
				return true;
			i += 64;
		} else if (claimed(c, i++)) {
			return true;
		}
	}
	return false;
}

static void claim(struct claims *c, size_t pos, size_t n)
{
	for (size_t i = pos; i < pos + n; i++)
		c->bit[i >> 6] |= 1ull << (i & 63);
}

/* Cuts every occurrence of token id out of the raw text, leftmost first, as
 * if each raw fragment were searched from its start: an occurrence counts
 * when none of its bytes is claimed yet (user-defined tokens anywhere, others
 * only where w allows). Overlapping occurrences are all found, so one that a
 * claim or w rules out does not hide the next. */
static void cut_token(const tok *t, const char *text, size_t len, int32_t id,
		      const struct special_where *w, struct claims *c)
{
	const char *s = entry_text(t, id);
	size_t n = t->tokens[id].text_len;
	bool anywhere = t->tokens[id].type == TT_USER;
	for (size_t from = 0; len - from >= n;) {
		const char *m = memmem(text + from, len - from, s, n);
		if (!m)
			break;
		size_t pos = (size_t)(m - text);
		from = pos + 1;
		if (any_claimed(c, pos, n) || (!anywhere && !in_spans(w, pos, n)))
			continue;
		claim(c, pos, n);
		if (c->n_cut == c->cap_cut) {
			c->cap_cut = c->cap_cut ? 2 * c->cap_cut : 16;
			c->cut = xrealloc(c->cut, c->cap_cut * sizeof *c->cut);
		}
		c->cut[c->n_cut++] = (struct frag){.off = pos, .len = n, .id = id};
		size_t at = pos + n;
		while (t->tokens[id].rstrip && at < len && !claimed(c, at) && c_isspace(text[at]))
			claim(c, at++, 1);
		from = at;
	}
}

static int cmp_frag(const void *pa, const void *pb)
{
	const struct frag *a = pa, *b = pb;
	return (a->off > b->off) - (a->off < b->off);
}

/* The fragments in text order: each cut, and the unclaimed run before it
 * (whitespace swallowed after a cut is claimed, so it is in no fragment). */
static void claims_to_frags(struct claims *c, size_t len, struct frag_list *l)
{
	if (c->n_cut > 1)
		qsort(c->cut, c->n_cut, sizeof *c->cut, cmp_frag);
	size_t at = 0;
	for (size_t i = 0; i <= c->n_cut; i++) {
		size_t end = i < c->n_cut ? c->cut[i].off : len;
		while (at < end && claimed(c, at))
			at++;
		if (at < end)
			frag_push(l, at, end - at, -1);
		if (i < c->n_cut) {
			frag_push(l, c->cut[i].off, c->cut[i].len, c->cut[i].id);
			at = c->cut[i].off + c->cut[i].len;
		}
	}
}

/* Which bytes and byte pairs occur in a text: a cheap filter that spares most
 * special tokens a full search (vocabularies may have thousands of them). */
struct text_pairs {
	uint64_t byte[256 / 64];
	uint64_t pair[65536 / 64];
};

static void note_pairs(struct text_pairs *tp, const uint8_t *s, size_t n)
{
	memset(tp, 0, sizeof *tp);
	for (size_t i = 0; i < n; i++) {
		tp->byte[s[i] >> 6] |= 1ull << (s[i] & 63);
		if (i + 1 < n) {
			unsigned p = (unsigned)s[i] << 8 | s[i + 1];
			tp->pair[p >> 6] |= 1ull << (p & 63);
		}
	}
}

static bool may_occur(const struct text_pairs *tp, const uint8_t *s, size_t n)
{
	if (n == 1)
		return tp->byte[s[0] >> 6] >> (s[0] & 63) & 1;
	for (size_t i = 0; i + 1 < n; i++) {
		unsigned p = (unsigned)s[i] << 8 | s[i + 1];
		if (!(tp->pair[p >> 6] >> (p & 63) & 1))
			return false;
	}
	return true;
}

/* Splits text into raw fragments and special tokens. User-defined tokens are
 * always special; control and unknown ones only with parse_special. Tokens
 * are cut longest text first (ties by id), each from whatever raw text the
 * ones before it left, as llama.cpp does; claims (a bitmap) stand for that
 * raw text, so each token costs a search of the text and not a pass over
 * every fragment made so far (vocabularies may have thousands of them). */
static void partition(const tok *t, const char *text, size_t len, bool parse_special,
		      const struct special_where *w, struct frag_list *l)
{
	struct claims c = {.bit = xcalloc(len / 64 + 1, sizeof *c.bit)};
	struct text_pairs *tp = xmalloc(sizeof *tp);
	note_pairs(tp, (const uint8_t *)text, len);
	for (int32_t i = 0; i < t->n_special; i++) {
		int32_t id = t->special[i];
		const char *s = entry_text(t, id);
		size_t n = t->tokens[id].text_len;
		if (!parse_special && t->tokens[id].type != TT_USER)
			continue;
		if (n > len || !may_occur(tp, (const uint8_t *)s, n))
			continue;
		cut_token(t, text, len, id, w, &c);
	}
	claims_to_frags(&c, len, l);
	free(tp);
	free(c.cut);
	free(c.bit);
}

static int encode(const tok *t, const char *text, size_t len, unsigned flags,
		  const struct special_where *w, int32_t *out, int cap)
{
	if (len > TOK_MAX_TEXT_BYTES)
		return -1;
	struct id_sink sink = {.out = out, .cap = cap > 0 ? (size_t)cap : 0};
	if ((flags & TOK_ADD_BOS) && t->add_bos)
		sink_push(&sink, t->bos);
	if (len > 0) {
		struct frag_list l = {0};
		partition(t, text, len, flags & TOK_PARSE_SPECIAL, w, &l);
		bool after_special = true;
		for (size_t i = 0; i < l.n; i++) {
			if (l.p[i].id >= 0) {
				sink_push(&sink, l.p[i].id);
				after_special = true;
				continue;
			}
			t->fam->encode_raw(t, text + l.p[i].off, l.p[i].len, after_special, &sink);
			after_special = false;
		}
		free(l.p);
	}
	return sink.n > INT_MAX ? -1 : (int)sink.n;
}

int tok_encode(const tok *t, const char *text, size_t len, unsigned flags,
	       int32_t *out, int cap)
{
	return encode(t, text, len, flags, &(struct special_where){0}, out, cap);
}

int tok_encode_spans(const tok *t, const char *text, size_t len, unsigned flags,
		     const tok_span *spans, size_t n_spans, int32_t *out, int cap)
{
	struct special_where w = {.restricted = true, .spans = spans, .n_spans = n_spans};
	return encode(t, text, len, flags, &w, out, cap);
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */

/* Token texts llama.cpp treats as end of generation whatever their type; they
 * are made control tokens too (so plain text never produces them). */
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
	"<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
	"<|end_of_text|>", "<end_of_utterance>", "</s>",
};

static const struct tok_family *find_family(const gguf_file *f, err *e)
{
	gguf_str model;
	if (gguf_get_str(f, "tokenizer.ggml.model", &model, e) < 0)
		return NULL;
	for (size_t i = 0; i < ARRAY_LEN(families); i++)
		if (gguf_str_eq(model, families[i].model))
			return &families[i];
	err_set(e, "%s: tokenizer.ggml.model '%.*s' is not a known tokenizer "
		"(supported: llama, gpt2)", gguf_name(f), (int)MIN(model.len, 64), model.p);
	return NULL;
}

/* Copies tokenizer.ggml.tokens into the text pool. */
static int load_texts(tok *t, const gguf_file *f, err *e)
{
	gguf_arr a;
	if (gguf_get_arr(f, "tokenizer.ggml.tokens", &a, e) < 0)
		return -1;
	if (a.type != GGUF_STR || a.n == 0) {
		err_set(e, "%s: tokenizer.ggml.tokens must be a non-empty array of strings "
			"(has %llu %s items)", gguf_name(f), (unsigned long long)a.n,
			gguf_vtype_name(a.type));
		return -1;
	}
	if (a.n > TOK_MAX_VOCAB) {
		err_set(e, "%s: tokenizer.ggml.tokens has %llu entries (limit %d)", gguf_name(f),
			(unsigned long long)a.n, TOK_MAX_VOCAB);
		return -1;
	}
	uint64_t total = 0;
	for (uint64_t i = 0; i < a.n; i++) {
		uint64_t len = gguf_arr_str(&a, i).len;
		if (len > TOK_MAX_TOKEN_BYTES) {
			err_set(e, "%s: tokenizer.ggml.tokens[%llu] is %llu bytes long (limit %d)",
				gguf_name(f), (unsigned long long)i, (unsigned long long)len,
				TOK_MAX_TOKEN_BYTES);
			return -1;
		}
		total += len + 1;
	}
	if (total > UINT32_MAX) {
		err_set(e, "%s: tokenizer.ggml.tokens holds %llu bytes of text (limit 4 GiB)",
			gguf_name(f), (unsigned long long)total);
		return -1;
	}
	t->n_vocab = (int32_t)a.n;
	t->tokens = xcalloc(a.n, sizeof *t->tokens);
	t->text_pool = xmalloc(total);
	uint32_t off = 0;
	for (uint64_t i = 0; i < a.n; i++) {
		gguf_str s = gguf_arr_str(&a, i);
		memcpy(t->text_pool + off, s.p, s.len);
		t->text_pool[off + s.len] = '\0';
		t->tokens[i] = (struct tok_entry){.text_off = off, .text_len = (uint32_t)s.len,
			.type = TT_NORMAL};
		t->max_text_len = MAX(t->max_text_len, (uint32_t)s.len);
		off += (uint32_t)s.len + 1;
	}
	return 0;
}

/* Gets an optional array that must have one entry per token. 1 if present,
 * 0 if absent, -1 on error. */
static int get_per_token(const tok *t, const gguf_file *f, const char *key, gguf_arr *a, err *e)
{
	if (gguf_find_key(f, key) < 0)
		return 0;
	if (gguf_get_arr(f, key, a, e) < 0)
		return -1;
	if (a->n != (uint64_t)t->n_vocab) {
		err_set(e, "%s: %s has %llu entries but tokenizer.ggml.tokens has %d",
			gguf_name(f), key, (unsigned long long)a->n, t->n_vocab);
		return -1;
	}
	return 1;
}

static int load_scores(tok *t, const gguf_file *f, err *e)
{
	const char *key = "tokenizer.ggml.scores";
	gguf_arr a;
	int r = get_per_token(t, f, key, &a, e);
	if (r < 0)
		return -1;
	if (r == 0) {
		if (!t->fam->needs_scores)
			return 0;
		err_set(e, "%s: metadata key '%s' is missing (a '%s' tokenizer needs merge scores)",
			gguf_name(f), key, t->fam->model);
		return -1;
	}
	if (a.type != GGUF_F32 && a.type != GGUF_F64) {
		err_set(e, "%s: %s is an array of %s, expected f32", gguf_name(f), key,
			gguf_vtype_name(a.type));
		return -1;
	}
	for (int32_t i = 0; i < t->n_vocab; i++) {
		t->tokens[i].score = gguf_arr_f32(&a, (uint64_t)i);
		if (isnan(t->tokens[i].score)) {
			err_set(e, "%s: %s[%d] is NaN", gguf_name(f), key, i);
			return -1;
		}
	}
	return 0;
}

/* Byte tokens must spell their byte as "<0xNN>" (decoding relies on it). */
static bool is_byte_text(const char *s, size_t n)
{
	return n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
	       isxdigit((unsigned char)s[3]) && isxdigit((unsigned char)s[4]);
}

static int load_types(tok *t, const gguf_file *f, err *e)
{
	const char *key = "tokenizer.ggml.token_type";
	gguf_arr a;
	int r = get_per_token(t, f, key, &a, e);
	if (r <= 0)
		return r;
	if (a.type == GGUF_STR || a.type == GGUF_F32 || a.type == GGUF_F64 || a.type == GGUF_BOOL) {
		err_set(e, "%s: %s is an array of %s, expected i32", gguf_name(f), key,
			gguf_vtype_name(a.type));
		return -1;
	}
	for (int32_t i = 0; i < t->n_vocab; i++) {
		int64_t ty = gguf_arr_int(&a, (uint64_t)i);
		if (ty < 0 || ty >= TT_COUNT) {
			err_set(e, "%s: %s[%d] = %lld is not a token type (0..6)", gguf_name(f), key,
				i, (long long)ty);
			return -1;
		}
		t->tokens[i].type = (uint8_t)ty;
		if (ty == TT_BYTE && !is_byte_text(entry_text(t, i), t->tokens[i].text_len)) {
			err_set(e, "%s: %s[%d] says byte token but its text is '%.*s', not <0xNN>",
				gguf_name(f), key, i, (int)MIN(t->tokens[i].text_len, 32u),
				entry_text(t, i));
			return -1;
		}
	}
	return 0;
}

/* Reads an optional token id; UINT32_MAX (what converters write for "none")
 * gives -1, an id outside the vocabulary is an error. */
static int load_id(const tok *t, const gguf_file *f, const char *key, int32_t *id, err *e)
{
	uint32_t v = *id < 0 ? UINT32_MAX : (uint32_t)*id;
	if (gguf_opt_u32(f, key, &v, e) < 0)
		return -1;
	if (v == UINT32_MAX) {
		*id = -1;
		return 0;
	}
	if (v >= (uint32_t)t->n_vocab) {
		err_set(e, "%s: %s = %u is out of range (the vocabulary has %d tokens)",
			gguf_name(f), key, v, t->n_vocab);
		return -1;
	}
	*id = (int32_t)v;
	return 0;
}

static int load_special_ids(tok *t, const gguf_file *f, err *e)
{
	t->bos = t->fam->def_bos;
	t->eos = t->fam->def_eos;
	t->unk = t->fam->def_unk;
	t->eot = t->eom = t->pad = -1;
	/* defaults beyond a tiny vocabulary mean "none" */
	int32_t *defaulted[] = {&t->bos, &t->eos, &t->unk};
	for (size_t i = 0; i < ARRAY_LEN(defaulted); i++)
		if (*defaulted[i] >= t->n_vocab)
			*defaulted[i] = -1;
	t->add_bos = t->pre ? t->pre->def_add_bos : t->fam->def_add_bos;
	t->add_space_prefix = t->fam->def_add_space_prefix;
	if (load_id(t, f, "tokenizer.ggml.bos_token_id", &t->bos, e) < 0 ||
	    load_id(t, f, "tokenizer.ggml.eos_token_id", &t->eos, e) < 0 ||
	    load_id(t, f, "tokenizer.ggml.eot_token_id", &t->eot, e) < 0 ||
	    load_id(t, f, "tokenizer.ggml.eom_token_id", &t->eom, e) < 0 ||
	    load_id(t, f, "tokenizer.ggml.unknown_token_id", &t->unk, e) < 0 ||
	    load_id(t, f, "tokenizer.ggml.padding_token_id", &t->pad, e) < 0 ||
	    gguf_opt_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, e) < 0 ||
	    gguf_opt_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, e) < 0)
		return -1;
	return 0;
}

/* End of generation: EOS, EOT, EOM and the tokens named in eog_texts. */
static void mark_eog(tok *t)
{
	for (size_t i = 0; i < ARRAY_LEN(eog_texts); i++) {
		int32_t id = lookup(t, eog_texts[i], strlen(eog_texts[i]));
		if (id < 0)
			continue;
		t->tokens[id].is_eog = true;
		t->tokens[id].type = TT_CONTROL;
	}
	int32_t ids[] = {t->eos, t->eot, t->eom};
	for (size_t i = 0; i < ARRAY_LEN(ids); i++)
		if (ids[i] >= 0)
			t->tokens[ids[i]].is_eog = true;
}

static void build_pieces(tok *t)
{
	size_t total = 0;
	for (int32_t i = 0; i < t->n_vocab; i++)
		total += t->tokens[i].text_len;
	t->piece_pool = xmalloc(total + 1);
	uint32_t off = 0;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		size_t n = t->fam->make_piece(t, i, t->piece_pool + off);
		assert(n <= t->tokens[i].text_len);
		t->tokens[i].piece_off = off;
		t->tokens[i].piece_len = (uint32_t)n;
		off += (uint32_t)n;
	}
}

/* Byte fallback: the family's token for the byte, else unknown. */
static void build_byte_ids(tok *t)
{
	for (int b = 0; b < 256; b++) {
		int32_t id = t->fam->byte_token(t, b);
		t->byte_id[b] = id >= 0 ? id : t->unk;
	}
}

struct special_key {
	uint32_t len;            /* text bytes */
	int32_t id;
};

/* Longest text first (so "<|end|>" is cut before a shorter prefix of it). */
static int cmp_special(const void *pa, const void *pb)
{
	const struct special_key *a = pa, *b = pb;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

static void build_special(tok *t)
{
	struct special_key *k = xmalloc(((size_t)t->n_vocab + 1) * sizeof *k);
	for (int32_t i = 0; i < t->n_vocab; i++) {
		uint8_t ty = t->tokens[i].type;
		if ((ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) && t->tokens[i].text_len)
			k[t->n_special++] = (struct special_key){t->tokens[i].text_len, i};
	}
	qsort(k, (size_t)t->n_special, sizeof *k, cmp_special);
	t->special = xmalloc(((size_t)t->n_special + 1) * sizeof *t->special);
	for (int32_t i = 0; i < t->n_special; i++)
		t->special[i] = k[i].id;
	free(k);
}

/* llama.cpp gives Phi-3's special tokens (all but <unk>, <s> and
 * <|endoftext|>; plus </s>) the right-strip attribute, keyed on the model's
 * name: the newline a template writes after <|user|> is dropped, and the
 * text after it starts a fresh SentencePiece fragment. */
static int mark_rstrip(tok *t, const gguf_file *f, err *e)
{
	gguf_str name = {"", 0};
	if (gguf_opt_str(f, "general.name", &name, e) < 0)
		return -1;
	char low[128];
	size_t n = MIN(name.len, sizeof low - 1);
	for (size_t i = 0; i < n; i++)
		low[i] = (char)tolower((unsigned char)name.p[i]);
	low[n] = '\0';
	if (!strstr(low, "phi-3") && !strstr(low, "phi3"))
		return 0;
	for (int32_t i = 0; i < t->n_special; i++)
		t->tokens[t->special[i]].rstrip = true;
	static const char *const on[] = {"</s>"}, *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
	for (size_t i = 0; i < ARRAY_LEN(on); i++) {
		int32_t id = lookup(t, on[i], strlen(on[i]));
		if (id >= 0)
			t->tokens[id].rstrip = true;
	}
	for (size_t i = 0; i < ARRAY_LEN(off); i++) {
		int32_t id = lookup(t, off[i], strlen(off[i]));
		if (id >= 0)
			t->tokens[id].rstrip = false;
	}
	return 0;
}

tok *tok_new(const gguf_file *f, err *e)
{
	tok *t = xcalloc(1, sizeof *t);
	t->fam = find_family(f, e);
	if (!t->fam || load_texts(t, f, e) < 0 || load_scores(t, f, e) < 0 ||
	    load_types(t, f, e) < 0)
		goto fail;
	build_hash(t);
	if ((t->fam->load && t->fam->load(t, f, e) < 0) || load_special_ids(t, f, e) < 0)
		goto fail;
	mark_eog(t);
	build_pieces(t);
	build_byte_ids(t);
	build_special(t);
	if (mark_rstrip(t, f, e) < 0)
		goto fail;
	return t;
fail:
	tok_free(t);
	return NULL;
}

void tok_free(tok *t)
{
	if (!t)
		return;
	free(t->merges);
	free(t->special);
	free(t->hash);
	free(t->piece_pool);
	free(t->text_pool);
	free(t->tokens);
	free(t);
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */

enum tok_kind tok_kind_of(const tok *t) { return t->fam->kind; }
int32_t tok_n_vocab(const tok *t) { return t->n_vocab; }
int32_t tok_bos(const tok *t) { return t->bos; }
int32_t tok_eos(const tok *t) { return t->eos; }

static bool in_range(const tok *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab;
}

bool tok_is_eog(const tok *t, int32_t id)
{
	return in_range(t, id) && t->tokens[id].is_eog;
}

bool tok_is_control(const tok *t, int32_t id)
{
	return in_range(t, id) && t->tokens[id].type == TT_CONTROL;
}

const char *tok_warning(const tok *t)
{
	return t->warning[0] ? t->warning : NULL;
}

const char *tok_pre(const tok *t)
{
	return t->pre ? t->pre->name : NULL;
}

int32_t tok_lookup(const tok *t, const char *text, size_t len)
{
	return len > 0 ? lookup(t, text, len) : -1;
}

const char *tok_text(const tok *t, int32_t id, size_t *len)
{
	if (!in_range(t, id))
		return NULL;
	if (len)
		*len = t->tokens[id].text_len;
	return entry_text(t, id);
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */

/* The piece of id, without the leading space SentencePiece adds to a text
 * when it is the first piece. Empty for control tokens and bad ids. */
static const char *piece_of(const tok *t, int32_t id, bool at_start, size_t *n)
{
	*n = 0;
	if (!in_range(t, id))
		return "";
	const struct tok_entry *te = &t->tokens[id];
	const char *p = t->piece_pool + te->piece_off;
	*n = te->piece_len;
	if (at_start && t->add_space_prefix && *n > 0 && p[0] == ' ') {
		p++;
		(*n)--;
	}
	return p;
}

struct out_buf {
	char *p;                 /* borrowed from the caller */
	size_t cap, n;           /* n bytes written; room for a NUL is kept */
	bool overflow;
};

static void out_put(struct out_buf *o, const void *s, size_t n)
{
	if (o->cap == 0 || o->n + n > o->cap - 1) {
		o->overflow = true;
		return;
	}
	memcpy(o->p + o->n, s, n);
	o->n += n;
}

static void put_replacement(struct out_buf *o)
{
	out_put(o, "\xef\xbf\xbd", 3);  /* U+FFFD */
}

/* Feeds one byte to the decoder's UTF-8 assembler. A sequence broken off by a
 * byte that cannot continue it becomes one U+FFFD, and that byte starts over;
 * a byte that cannot start a sequence is one U+FFFD. */
static void feed_byte(tok_decoder *d, uint8_t c, struct out_buf *o)
{
	if (d->n_pending > 0) {
		int need = utf8_need(d->pending[0]);
		if (utf8_cont_ok(d->pending[0], d->n_pending, c)) {
			d->pending[d->n_pending++] = c;
			if (d->n_pending == need) {
				out_put(o, d->pending, (size_t)need);
				d->n_pending = 0;
			}
			return;
		}
		put_replacement(o);
		d->n_pending = 0;
	}
	int need = utf8_need(c);
	if (need == 1)
		out_put(o, &c, 1);
	else if (need == 0)
		put_replacement(o);
	else
		d->pending[d->n_pending++] = c;
}

void tok_decoder_init(tok_decoder *d, bool at_start)
{
	memset(d, 0, sizeof *d);
	d->at_start = at_start;
}

int tok_decode(const tok *t, tok_decoder *d, int32_t id, char *out, size_t cap)
{
	size_t n;
	const char *p = piece_of(t, id, d->at_start, &n);
	struct out_buf o = {.p = out, .cap = cap};
	if (in_range(t, id) && t->tokens[id].piece_len > 0) {
		tok_decoder saved = *d;
		d->at_start = false;
		for (size_t i = 0; i < n; i++)
			feed_byte(d, (uint8_t)p[i], &o);
		if (o.overflow) {
			*d = saved;
			return -1;
		}
	}
	if (cap > 0)
		out[o.n] = '\0';
	return (int)o.n;
}

int tok_decode_flush(const tok *t, tok_decoder *d, char *out, size_t cap)
{
	(void)t;
	struct out_buf o = {.p = out, .cap = cap};
	if (d->n_pending > 0) {
		put_replacement(&o);
		if (o.overflow)
			return -1;
		d->n_pending = 0;
	}
	if (cap > 0)
		out[o.n] = '\0';
	return (int)o.n;
}

int tok_detokenize(const tok *t, const int32_t *ids, int n, bool at_start,
		   char *out, size_t cap)
{
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		size_t len;
		const char *p = piece_of(t, ids[i], at_start, &len);
		if (in_range(t, ids[i]) && t->tokens[ids[i]].piece_len > 0)
			at_start = false;
		if (cap > 0 && total < cap - 1)
			memcpy(out + total, p, MIN(len, cap - 1 - total));
		total += len;
	}
	if (cap > 0)
		out[MIN(total, cap - 1)] = '\0';
	return total > INT_MAX ? -1 : (int)total;
}

/* Hugging Face's clean_up_tokenization_spaces as llama.cpp applies it, in
 * place; returns the new length. Three passes, each over the previous one's
 * output: the space before ? ! . , goes; " ' " becomes "'"; the space before
 * the contractions 's 'm 're 've goes (not before 't 'd 'll). */
static size_t clean_spaces(char *s, size_t n)
{
	size_t k = n ? 1 : 0;
	for (size_t i = 1; i < n; i++) {
		if (s[i - 1] == ' ' && (s[i] == '?' || s[i] == '!' || s[i] == '.' || s[i] == ','))
			k--;
		s[k++] = s[i];
	}
	n = k;
	k = n ? 1 : 0;
	for (size_t i = 1; i < n; i++) {
		char x = s[i];
		if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
			k--;
			s[++i] = '\0';  /* dropped, and no longer a space before the next one */
		}
		s[k++] = x;
	}
	n = k;
	k = n ? 1 : 0;
	for (size_t i = 1; i < n; i++) {
		if (s[i - 1] == ' ' && s[i] == '\'' && i + 1 < n) {
			char a = s[i + 1], b = i + 2 < n ? s[i + 2] : '\0';
			bool two = i + 2 < n && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e'));
			if (a == 's' || a == 'm' || two)
				k--;
		}
		s[k++] = s[i];
	}
	return k;
}

int tok_detokenize_text(const tok *t, const int32_t *ids, int n, char *out, size_t cap)
{
	int need = tok_detokenize(t, ids, n, true, NULL, 0);
	if (need < 0)
		return -1;
	char *buf = xmalloc((size_t)need + 1);
	tok_detokenize(t, ids, n, true, buf, (size_t)need + 1);
	size_t len = (size_t)need;
	if (t->pre && t->pre->clean_spaces)
		len = clean_spaces(buf, len);
	if (cap > 0) {
		memcpy(out, buf, MIN(len, cap - 1));
		out[MIN(len, cap - 1)] = '\0';
	}
	free(buf);
	return (int)len;
}
