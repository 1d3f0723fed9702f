/* models/tok.c: vocabularies from GGUF metadata, the queries of models/tok.h
 * and streaming decoding (the encoders live in tok_encode.c, tok_spm.c and
 * tok_bpe.c; models/tok_int.h says who does what).
 *
 * tok_new() copies every token text into one pool, builds a hash table from
 * text to id (open addressing, built once), and precomputes each token's
 * decoded piece (the bytes it stands for in output text), so decoding is a
 * table lookup. A tokenizer family (SentencePiece "llama", byte-level BPE
 * "gpt2") is a row of `families`: its metadata defaults, how to encode one
 * run of plain text and how to render a token as a piece. */
#include "models/tok_int.h"

#include <assert.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Vocabulary lookup                                                   */

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
/* Loading                                                             */

/* Token texts llama.cpp treats as end of generation whatever their type; they
 * are made control tokens too (so plain text never produces them). */
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
	"<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
	"<|end_of_text|>", "<end_of_utterance>", "</s>",
};

static const struct tok_family *const families[] = {&tok_spm_family, &tok_bpe_family};

static const struct tok_family *find_family(const gguf_file *f, err *e)
{
	gguf_str model;
	if (gguf_get_str(f, "tokenizer.ggml.model", &model, e) < 0)
		return NULL;
	for (size_t i = 0; i < ARRAY_LEN(families); i++)
		if (gguf_str_eq(model, families[i]->model))
			return families[i];
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

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *s = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 1099511628211ull;
	return h;
}

uint64_t tok_fingerprint(const tok *t)
{
	uint64_t h = 1469598103934665603ull;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		const struct tok_entry *x = &t->tokens[id];
		h = fnv(h, entry_text(t, id), x->text_len + 1);
		h = fnv(h, &x->type, 1);
	}
	int32_t v[] = {t->n_vocab, t->bos, t->eos, t->eot, t->eom, t->unk, t->pad, t->add_bos,
		       t->add_space_prefix, (int32_t)t->fam->kind};
	h = fnv(h, v, sizeof v);
	h = fnv(h, t->fam->model, strlen(t->fam->model));
	if (t->pre)
		h = fnv(h, t->pre->name, strlen(t->pre->name));
	return h ? h : 1;
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
