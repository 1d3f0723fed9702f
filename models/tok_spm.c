/* models/tok_spm.c: the SentencePiece-style family ("llama"): a plain
 * fragment is escaped with U+2581 for spaces (plus a leading one at the start
 * of a text and after a special token, when the vocabulary adds a space
 * prefix), split into characters, then merged pair by pair, always the
 * best-scoring merge first (tokenizer.ggml.scores); characters no token
 * covers fall back to their bytes (<0xNN> tokens). Pieces turn U+2581 back
 * into spaces. */
#include "models/tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TOK_MAX_TEXT_BYTES keeps symbol offsets inside 32 bits even after
 * SentencePiece's space escaping triples the size. */
_Static_assert(3 * (TOK_MAX_TEXT_BYTES + 1) < UINT32_MAX, "symbol offsets are 32-bit");

static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

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
	tok_heap_push(&w->heap, &(struct spm_bigram){.score = w->t->tokens[id].score,
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
		tok_heap_pop(&w->heap, &b);
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

/* SentencePiece byte fallback: the <0xNN> token, else the one-byte token. */
static int32_t spm_byte_token(const tok *t, int b)
{
	char hex[8], one = (char)b;
	snprintf(hex, sizeof hex, "<0x%02X>", b);
	int32_t id = lookup(t, hex, 6);
	return id >= 0 ? id : lookup(t, &one, 1);
}

const struct tok_family tok_spm_family = {
	.model = "llama", .kind = TOK_SPM, .def_bos = 1, .def_eos = 2, .def_unk = 0,
	.def_add_bos = true, .def_add_space_prefix = true, .needs_scores = true,
	.encode_raw = spm_encode_raw, .make_piece = spm_make_piece,
	.byte_token = spm_byte_token,
};
