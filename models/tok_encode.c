/* models/tok_encode.c: text to ids. Special tokens are cut out of the text
 * first (user-defined tokens always, control and unknown ones only with
 * TOK_PARSE_SPECIAL; longest text first, each one over every remaining plain
 * fragment), then each plain fragment goes to the family's encoder. This
 * mirrors llama.cpp's behaviour, which the reference test vectors come from.
 * Also the merge heap both families' encoders use. */
#include "models/tok_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The merge heap (both families)                                      */

#define HEAP_AT(h, i) ((h)->a + (i) * (h)->size)

void tok_heap_push(merge_heap *h, const void *e)
{
	xgrow_size(&h->a, &h->cap, h->n + 1, h->size);
	size_t i = h->n++;
	while (i > 0 && h->before(e, HEAP_AT(h, (i - 1) / 2))) {
		memcpy(HEAP_AT(h, i), HEAP_AT(h, (i - 1) / 2), h->size);
		i = (i - 1) / 2;
	}
	memcpy(HEAP_AT(h, i), e, h->size);
}

void tok_heap_pop(merge_heap *h, void *out)
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
/* Special-token splitting                                             */

/* One piece of the input once special tokens are cut out: a special token or
 * the plain text between two of them. */
struct frag {
	size_t off, len;         /* bytes of the input text (raw fragment) */
	int32_t id;              /* the special token, or -1 for raw text */
};

struct frag_list {
	struct frag *p;          /* owned */
	size_t n, cap;
};

static void frag_push(struct frag_list *l, size_t off, size_t len, int32_t id)
{
	xgrow_size(&l->p, &l->cap, l->n + 1, sizeof *l->p);
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
		xgrow_size(&c->cut, &c->cap_cut, c->n_cut + 1, sizeof *c->cut);
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
