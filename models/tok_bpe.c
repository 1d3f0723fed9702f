/* models/tok_bpe.c: the byte-level BPE family ("gpt2"): every byte spelled
 * as one printable character (GPT-2's mapping), text split into words by a
 * pre-tokenizer (a row of bpe_pres, chosen by tokenizer.ggml.pre), and each
 * word merged pair by pair, lowest merge rank first (tokenizer.ggml.merges,
 * kept in a hash table from token-id pairs to ranks). */
#include "models/tok_int.h"

#include "models/unicode_tab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* SmolLM: \p{N} first (every digit a piece of its own), then GPT-2's pattern
 * without its last \s+ inside the stretches between digits, each stretch's
 * end taken as the text's end: a space run before a digit stays whole, and
 * no space joins a number. */
static size_t smollm_word_end(const struct cp_text *c, size_t pos, int max_digits)
{
	(void)max_digits;
	if (cp_number(c, pos))
		return pos + 1;
	size_t e = contraction_end(c, pos, false);
	if (e)
		return e;
	size_t s = c->cp[pos] == ' ' ? pos + 1 : pos;
	bool (*const runs[])(const struct cp_text *, size_t) = {cp_letter, cp_other};
	for (size_t r = 0; r < ARRAY_LEN(runs); r++) {
		if (!runs[r](c, s))
			continue;
		for (e = s; runs[r](c, e); e++)
			;
		return e;
	}
	size_t k = pos;
	while (cp_space(c, k))
		k++;
	if (k - pos > 1 && k < c->n && !cp_number(c, k))
		return k - 1;                /* \s+(?!\S): the last space goes with what follows */
	return k > pos ? k : pos + 1;
}

static const struct bpe_pre bpe_pres[] = {
	{.name = "llama-bpe", .aliases = {"llama3", "llama-v3", "falcon3", "pixtral"},
	 .word_end = cl100k_word_end, .max_digits = 3, .ignore_merges = true,
	 .clean_spaces = true, .def_add_bos = true},
	{.name = "qwen2", .aliases = {"deepseek-r1-qwen"}, .word_end = cl100k_word_end,
	 .max_digits = 1},
	{.name = "gpt-2", .aliases = {"phi-2"}, .word_end = gpt2_word_end, .clean_spaces = true},
	{.name = "smollm", .word_end = smollm_word_end},
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
		tok_heap_push(&w->heap, &(struct bpe_pair){.rank = m->rank, .left = l, .right = r,
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
		tok_heap_pop(&w->heap, &p);
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

/* llama.cpp's defaults for "gpt2" (BOS/EOS 11) apply only to files without
 * the keys; converters always write them. */
const struct tok_family tok_bpe_family = {
	.model = "gpt2", .kind = TOK_BPE, .def_bos = 11, .def_eos = 11, .def_unk = -1,
	.load = bpe_load, .encode_raw = bpe_encode_raw, .make_piece = bpe_make_piece,
	.byte_token = bpe_byte_token,
};
