/* conv/hist.c: the token history's pieces (conv/conv.h).
 *
 * The template is rendered for whole prefixes of the conversation, and a
 * message's piece is what its rendering adds to the one before it (every
 * family here renders message by message, so one is a prefix of the other).
 * A piece is tokenized in the context of the text before it: the two are
 * tokenized together and the context's own ids are taken off the front;
 * where the context's ids are not a prefix of the joint ones (a merge across
 * the boundary) the piece is tokenized alone. Pieces that start with a
 * special token, as the turns of most families do, give the same ids either
 * way. The answer's closing is found by rendering a marker as its content. */
#include "conv/conv.h"

#include "conv/conv_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define CTX_TAIL_BYTES 512   /* context a piece is tokenized after, at most */
#define MARK "\x01pagechat-answer\x01"

const char *conv_overflow_name(enum conv_overflow o)
{
	static const char *const names[] = {"drop", "shift", "refuse"};
	return (unsigned)o < ARRAY_LEN(names) ? names[o] : "?";
}

int conv_overflow_parse(const char *s)
{
	for (int o = CONV_DROP; o <= CONV_REFUSE; o++)
		if (!strcmp(s, conv_overflow_name(o)))
			return o;
	return -1;
}

void conv_model_init(conv_model *m, const tok *tok, enum tmpl_family fam, int n_ctx, int block_tokens,
		     enum conv_overflow overflow)
{
	*m = (conv_model){.tok = tok, .fam = fam, .vocab = tok_fingerprint(tok), .n_ctx = n_ctx,
			  .block_tokens = block_tokens > 0 ? block_tokens : 16, .overflow = overflow};
}

bool conv_completion_mode(const conv_model *m)
{
	return m->fam == TMPL_NONE || m->fam == TMPL_UNKNOWN;
}

/* ---- ids ---- */

typedef struct idbuf {
	int32_t *v;              /* owned */
	int n, cap;
} idbuf;

static void ids_put(idbuf *b, const int32_t *ids, int n)
{
	xgrow(&b->v, &b->cap, (int64_t)b->n + MAX(n, 1), sizeof *b->v);
	if (n > 0)
		memcpy(b->v + b->n, ids, (size_t)n * sizeof *ids);
	b->n += n;
}

/* A text with the template's own ranges (where special tokens are read). */
typedef struct piece {
	const char *text;        /* borrowed */
	size_t len;
	const tok_span *spans;   /* borrowed; [n_spans] relative to text */
	size_t n_spans;
} piece;

/* Tokenizes p into a new buffer; -1 with e for an over-long text. */
static int encode(const conv_model *m, const piece *p, bool bos, idbuf *out, err *e)
{
	unsigned flags = TOK_PARSE_SPECIAL | (bos ? TOK_ADD_BOS : 0);
	*out = (idbuf){0};
	int need = tok_encode_spans(m->tok, p->text, p->len, flags, p->spans, p->n_spans, NULL, 0);
	if (need < 0) {
		err_set(e, "the conversation has a text of %zu bytes, over the tokenizer's limit", p->len);
		return -1;
	}
	out->cap = MAX(need, 1);
	out->v = xmalloc((size_t)out->cap * sizeof *out->v);
	out->n = tok_encode_spans(m->tok, p->text, p->len, flags, p->spans, p->n_spans, out->v, need);
	return 0;
}

/* The last part of ctx that add is tokenized after: from the start of its
 * last template span (or its last CTX_TAIL_BYTES, at a character start). */
static piece tail_of(const piece *ctx)
{
	if (ctx->len == 0)
		return (piece){"", 0, NULL, 0};
	size_t from = ctx->len > CTX_TAIL_BYTES ? ctx->len - CTX_TAIL_BYTES : 0;
	if (ctx->n_spans > 0 && ctx->spans[ctx->n_spans - 1].off >= from)
		from = ctx->spans[ctx->n_spans - 1].off;
	while (from < ctx->len && ((unsigned char)ctx->text[from] & 0xC0) == 0x80)
		from++;
	piece p = {ctx->text + from, ctx->len - from, ctx->spans, 0};
	if (ctx->n_spans == 0)
		return p; /* spans may be NULL: no arithmetic on it (NULL + 0 is undefined) */
	while (p.spans < ctx->spans + ctx->n_spans && p.spans->off < from)
		p.spans++;
	p.n_spans = (size_t)(ctx->spans + ctx->n_spans - p.spans);
	return p;
}

/* Appends to out the ids of add as it tokenizes after ctx (see the top). */
static int encode_after(const conv_model *m, const piece *ctx, const piece *add, idbuf *out, err *e)
{
	piece c = tail_of(ctx);
	size_t n = c.len + add->len;
	char *text = xmalloc(n + 1);
	memcpy(text, c.text, c.len);
	memcpy(text + c.len, add->text, add->len);
	tok_span *sp = xmalloc((c.n_spans + add->n_spans + 1) * sizeof *sp);
	size_t k = 0;
	for (size_t i = 0; i < c.n_spans; i++)
		sp[k++] = (tok_span){c.spans[i].off - (size_t)(c.text - ctx->text), c.spans[i].len};
	for (size_t i = 0; i < add->n_spans; i++)
		sp[k++] = (tok_span){add->spans[i].off + c.len, add->spans[i].len};
	piece joint = {text, n, sp, k};
	idbuf a = {0}, b = {0};
	int rc = encode(m, &joint, false, &a, e);
	if (rc == 0)
		rc = encode(m, &c, false, &b, e);
	if (rc == 0 && b.n <= a.n && !memcmp(a.v, b.v, (size_t)b.n * sizeof *a.v)) {
		ids_put(out, a.v + b.n, a.n - b.n);
	} else if (rc == 0) {
		free(a.v);
		rc = encode(m, add, false, &a, e);
		if (rc == 0)
			ids_put(out, a.v, a.n);
	}
	free(a.v);
	free(b.v);
	free(sp);
	free(text);
	return rc;
}

/* ---- rendering ---- */

/* Whether message i is part of the history (by its ids once it has them,
 * else as conv_msg_sent says: answers that never started and their turns'
 * user messages are left out). */
static bool in_history(const conv *c, int i)
{
	const conv_msg *x = &c->msgs[i];
	return x->has_ids ? x->n_ids > 0 : conv_msg_sent(c, i);
}

/* Renders the system message and the history's msgs[first..upto), plus an
 * answer whose content is MARK when mark is set. */
static int render(const conv *c, const conv_model *m, int upto, bool gen, bool mark, tmpl_prompt *out,
		  err *e)
{
	tmpl_msg *v = xmalloc((size_t)(upto - c->first + 2) * sizeof *v);
	size_t n = 0;
	if (*c->system)
		v[n++] = (tmpl_msg){"system", c->system, strlen(c->system)};
	for (int i = c->first; i < upto; i++) {
		const conv_msg *x = &c->msgs[i];
		if (in_history(c, i))
			v[n++] = (tmpl_msg){x->role == CONV_USER ? "user" : "assistant", x->text, x->len};
	}
	if (mark)
		v[n++] = (tmpl_msg){"assistant", MARK, strlen(MARK)};
	int rc = tmpl_render(m->fam, v, n, gen, out, e);
	free(v);
	return rc;
}

static piece whole(const tmpl_prompt *p)
{
	return (piece){p->text, p->len, p->spans, p->n_spans};
}

/* What b adds to a (a must be its prefix): text and spans, into *out
 * (spans owned by *spans). -1 with e when a is not b's prefix. */
static int added(const tmpl_prompt *a, const tmpl_prompt *b, piece *out, tok_span **spans, err *e)
{
	if (a->len > b->len || memcmp(a->text, b->text, a->len)) {
		err_set(e, "the chat template does not render message by message");
		return -1;
	}
	*spans = xmalloc((b->n_spans + 1) * sizeof **spans);
	size_t k = 0;
	for (size_t i = 0; i < b->n_spans; i++) {
		size_t lo = b->spans[i].off, hi = lo + b->spans[i].len;
		if (hi > a->len)
			(*spans)[k++] = (tok_span){MAX(lo, a->len) - a->len, hi - MAX(lo, a->len)};
	}
	*out = (piece){b->text + a->len, b->len - a->len, *spans, k};
	return 0;
}

/* Chat mode: the ids of what the history up to upto (+ the generation
 * prompt with gen) adds to the history before `from`, in out. */
static int chat_piece(const conv *c, const conv_model *m, int from, int upto, bool gen, idbuf *out, err *e)
{
	tmpl_prompt a = {0}, b = {0};
	tok_span *spans = NULL;
	piece p;
	int rc = render(c, m, from, false, false, &a, e);
	if (rc == 0)
		rc = render(c, m, upto, gen, false, &b, e);
	if (rc == 0)
		rc = added(&a, &b, &p, &spans, e);
	if (rc == 0) {
		piece ctx = whole(&a);
		rc = encode_after(m, &ctx, &p, out, e);
	}
	free(spans);
	tmpl_prompt_deinit(&a);
	tmpl_prompt_deinit(&b);
	return rc;
}

/* Chat mode: the template's closing of the answer msgs[upto] would be. */
static int chat_closing(const conv *c, const conv_model *m, int upto, idbuf *out, err *e)
{
	tmpl_prompt r = {0};
	if (render(c, m, upto, false, true, &r, e))
		return -1;
	const char *at = NULL;
	for (const char *p = r.text; (p = memmem(p, r.len - (size_t)(p - r.text), MARK, strlen(MARK))); p++)
		at = p;
	int rc = 0;
	if (at) {
		tmpl_prompt head = {.text = r.text, .len = (size_t)(at - r.text) + strlen(MARK)};
		tok_span *spans = NULL;
		piece p, none = {"", 0, NULL, 0};
		rc = added(&head, &r, &p, &spans, e);
		if (rc == 0)
			rc = encode_after(m, &none, &p, out, e);
		free(spans);
	}
	tmpl_prompt_deinit(&r);
	return rc;
}

/* Completion mode: the text before message i (the system prompt and the
 * history's messages), for the context and the separator. */
static piece completion_before(const conv *c, int i)
{
	for (int j = i - 1; j >= c->first; j--)
		if (c->msgs[j].len > 0 && in_history(c, j))
			return (piece){c->msgs[j].text, c->msgs[j].len, NULL, 0};
	return (piece){c->system, strlen(c->system), NULL, 0};
}

/* Completion mode: message i's ids (a separator before a user's text). */
static int completion_piece(const conv *c, const conv_model *m, int i, idbuf *out, err *e)
{
	const conv_msg *x = &c->msgs[i];
	piece ctx = completion_before(c, i);
	bool sep = x->role == CONV_USER && x->len > 0 && !isspace((unsigned char)x->text[0]) &&
		   ctx.len > 0 && !isspace((unsigned char)ctx.text[ctx.len - 1]);
	char *text = xmalloc(x->len + 2);
	text[0] = ' ';
	memcpy(text + sep, x->text, x->len);
	piece p = {text, x->len + sep, NULL, 0};
	int rc = p.len ? encode_after(m, &ctx, &p, out, e) : 0;
	free(text);
	return rc;
}

/* ---- the history ---- */

int conv_system_ids(const conv *c, const conv_model *m, int32_t **ids, int *n, err *e)
{
	idbuf b = {0};
	int rc;
	if (conv_completion_mode(m)) {
		rc = encode(m, &(piece){c->system, strlen(c->system), NULL, 0}, true, &b, e);
	} else {
		conv sys = {.system = c->system};
		tmpl_prompt r = {0};
		rc = render(&sys, m, 0, false, false, &r, e);
		if (rc == 0)
			rc = encode(m, &(piece){r.text, r.len, r.spans, r.n_spans}, true, &b, e);
		tmpl_prompt_deinit(&r);
	}
	*ids = b.v;
	*n = rc ? 0 : b.n;
	return rc;
}

int conv_history_tokens(const conv *c)
{
	int64_t n = c->n_sys_ids;
	for (int i = c->first; i < c->n_msgs; i++)
		n += c->msgs[i].n_ids;
	return (int)MIN(n, INT32_MAX);
}

/* Computes the ids of message i from its text (and the history before it). */
int conv_fill_ids(conv *c, const conv_model *m, int i, err *e)
{
	idbuf b = {0};
	int rc = 0;
	conv_msg *x = &c->msgs[i];
	bool ans = x->role == CONV_ASSISTANT;
	if (!in_history(c, i))
		;
	else if (conv_completion_mode(m))
		rc = completion_piece(c, m, i, &b, e);
	else
		rc = chat_piece(c, m, i, i + 1, false, &b, e);
	if (rc == 0) {
		conv_set_ids(c, i, b.v, b.n);
		x->n_open = 0;
		x->closed = ans;
	}
	free(b.v);
	return rc;
}

/* The ids that open the answer to msgs[..upto) (the generation prompt). */
int conv_opening_ids(const conv *c, const conv_model *m, int upto, int32_t **ids, int *n, err *e)
{
	idbuf b = {0};
	int rc = conv_completion_mode(m) ? 0 : chat_piece(c, m, upto, upto, true, &b, e);
	*ids = b.v;
	*n = b.n;
	return rc;
}

/* Appends the template's closing to every answer of the history that lacks
 * it; an answer that produced nothing and did not stop leaves the history. */
int conv_close_answers(conv *c, const conv_model *m, err *e)
{
	for (int i = c->first; i < c->n_msgs; i++) {
		conv_msg *x = &c->msgs[i];
		if (x->role != CONV_ASSISTANT || !x->has_ids || x->closed)
			continue;
		x->closed = true;
		if (x->n_ids <= x->n_open && strcmp(x->finish, "stop")) {
			x->n_ids = 0;
			continue;
		}
		idbuf b = {0};
		if (!conv_completion_mode(m) && chat_closing(c, m, i, &b, e)) {
			free(b.v);
			return -1;
		}
		conv_append_ids(c, i, b.v, b.n);
		free(b.v);
	}
	return 0;
}

int conv_rebuild(conv *c, const conv_model *m, err *e)
{
	for (int i = 0; i < c->n_msgs; i++)
		c->msgs[i].has_ids = false, c->msgs[i].n_ids = 0;
	c->has_sys_ids = false;
	c->ids_vocab = 0;
	int32_t *sys;
	int n_sys;
	if (conv_system_ids(c, m, &sys, &n_sys, e))
		return -1;
	conv_set_sys_ids(c, sys, n_sys);
	free(sys);
	for (int i = c->first; i < c->n_msgs; i++)
		if (conv_fill_ids(c, m, i, e)) {
			for (int j = 0; j <= i; j++)
				c->msgs[j].has_ids = false;
			c->has_sys_ids = false;
			return -1;
		}
	c->ids_vocab = m->vocab;
	c->ids_fam = m->fam;
	c->version++;
	return 0;
}
