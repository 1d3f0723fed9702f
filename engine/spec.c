/* engine/spec.c: speculative decoding inside the engine step.
 *
 * For every decoding sequence the draft proposes k tokens (draft forwards are
 * batched across sequences: pass 0 also catches the draft's KV up with the
 * target, passes 1..k-1 feed one draft token each). The target then scores
 * all k+1 positions in the step's single batch, and each sequence keeps a
 * prefix of the drafts by modified rejection sampling (Leviathan et al. 2023;
 * Chen et al. 2023): draft token x is accepted with probability
 * min(1, p(x)/q(x)); at the first rejection a token is drawn from
 * normalize(max(0, p - q)) and the rest is dropped; when all k are accepted a
 * bonus token is drawn from p. p and q are the sampler's processed
 * distributions (penalties, temperature, top-k/p, min-p), so the output
 * follows the target's distribution exactly; greedy reduces to "accept while
 * the argmax agrees". Rejected positions are rolled back in both pools and
 * never published. N-gram drafts (prompt lookup) use a one-hot q. */
#include "engine/core_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spec {
	enum core_draft kind;
	llama_model *draft;      /* borrowed; DRAFT_MODEL */
	kv_pool *pool;           /* owned; the draft's KV */
	kv_prefix *prefix;       /* owned; the draft's prefix cache */
	runner *run;             /* owned; the draft's batches */
	int k, k_max, ngram_n;
	bool adaptive;
	spec_len_params len;     /* the adaptive policy's (engine/spec_len.h) */
	int max_rows;            /* the draft model's batch size */
	int n_vocab;
	float *q;                /* owned; [SPEC_MAX_SEQS][k_max][n_vocab] */
	float *p, *r;            /* owned; [n_vocab] verification scratch */
	int32_t *hits;           /* owned; [n_blocks] */
	step_item **items;       /* owned; [SPEC_MAX_SEQS] items drafting this step */
};

/* ---- set-up ---- */

static int check_vocab(const core_params *p, err *e)
{
	int nt = llama_hp(p->model)->n_vocab, nd = llama_hp(p->draft)->n_vocab;
	if (nt != nd) {
		err_set(e, "draft model vocabulary has %d tokens, the target's has %d: a draft must use "
			"the target's tokenizer", nd, nt);
		return -1;
	}
	if (!p->tok || !p->draft_tok)
		return 0;
	for (int32_t i = 0; i < tok_n_vocab(p->tok); i++) {
		size_t la, lb;
		const char *a = tok_text(p->tok, i, &la), *b = tok_text(p->draft_tok, i, &lb);
		if (!b || la != lb || memcmp(a, b, la)) {
			err_set(e, "draft model vocabulary differs at token %d ('%.*s' in the target, '%.*s' in "
				"the draft): a draft must use the target's tokenizer", i, (int)MIN(la, 40), a,
				b ? (int)MIN(lb, 40) : 0, b ? b : "");
			return -1;
		}
	}
	return 0;
}

int spec_init(core *c, const core_params *p, err *e)
{
	c->sp = NULL;
	if (p->draft_kind == DRAFT_NONE)
		return 0;
	if (p->draft_kind == DRAFT_MODEL && (!p->draft || check_vocab(p, e)))
		return p->draft ? -1 : (err_set(e, "speculative decoding needs a draft model"), -1);
	spec *sp = xcalloc(1, sizeof *sp);
	c->sp = sp;
	sp->kind = p->draft_kind;
	sp->draft = p->draft;
	sp->k = MIN(MAX(p->draft_k > 0 ? p->draft_k : 4, 1), SPEC_MAX_K);
	sp->adaptive = p->draft_adaptive;
	sp->k_max = sp->adaptive ? MIN(2 * sp->k, SPEC_MAX_K) : sp->k;
	sp->ngram_n = p->ngram_n > 0 ? p->ngram_n : 3;
	/* a draft costs a verified row, about a tenth of a decode step at one
	 * sequence on the CPU (docs/performance.md), taken as 0.2 to err on the
	 * side of drafting less, plus for a draft model its own forward (its
	 * weights over the target's); evidence older by 5 verifications counts
	 * a third; paused, a draft model tries again after 4 steps (8 .. 64
	 * after failed trials) */
	double cost = p->draft_cost > 0 ? p->draft_cost : 0.2;
	if (p->draft_cost <= 0 && sp->kind == DRAFT_MODEL)
		cost += (double)llama_n_params(p->draft) / (double)MAX(1, llama_n_params(p->model));
	sp->len = (spec_len_params){.k0 = sp->k, .k_max = sp->k_max, .cost = cost, .decay = 0.8,
				    .lookup = sp->kind == DRAFT_NGRAM, .wait0 = 4, .wait_max = 64};
	sp->n_vocab = c->n_vocab;
	sp->p = xmalloc((size_t)c->n_vocab * sizeof *sp->p);
	sp->r = xmalloc((size_t)c->n_vocab * sizeof *sp->r);
	sp->items = xcalloc(SPEC_MAX_SEQS, sizeof *sp->items);
	if (sp->kind != DRAFT_MODEL)
		return 0;
	const llama_hparams *hp = llama_hp(p->draft);
	kv_pool_params pp = {
		.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim, .block_tokens = c->bt,
		.head_dim = hp->head_dim, .k_type = p->kv_type_k, .v_type = p->kv_type_v,
		.n_blocks = kv_pool_n_blocks(c->pool), .kern = llama_kern(p->draft),
		.host_layers = llama_host_layers(p->draft),
	};
	sp->pool = kv_pool_new(&pp, e);
	if (!sp->pool) {
		err_prefix(e, "draft KV pool");
		return -1;
	}
	sp->prefix = kv_prefix_new(sp->pool, (uint64_t)llama_n_params(p->draft) * 31 + (uint64_t)hp->dim);
	sp->max_rows = llama_max_tokens(p->draft);
	runner_params rp = {.model = p->draft, .pool = sp->pool, .max_seqs = c->max_running,
			    .max_out = SPEC_MAX_SEQS};
	if (!(sp->run = runner_new(&rp, e)))
		return -1;
	sp->q = xmalloc((size_t)SPEC_MAX_SEQS * (size_t)sp->k_max * (size_t)c->n_vocab * sizeof *sp->q);
	sp->hits = xmalloc((size_t)kv_pool_n_blocks(sp->pool) * sizeof *sp->hits);
	return 0;
}

void spec_free(core *c)
{
	spec *sp = c->sp;
	if (!sp)
		return;
	runner_free(sp->run);
	kv_prefix_free(sp->prefix);
	kv_pool_free(sp->pool);
	free(sp->q); free(sp->p); free(sp->r); free(sp->items); free(sp->hits);
	free(sp);
	c->sp = NULL;
}

/* ---- per sequence ---- */

static void reset_draft(spec *sp, seq *s)
{
	s->draft.computed = 0;
	s->draft.keyed = 0;
	s->draft.last_key = sp->prefix ? kv_prefix_root(sp->prefix) : 0;
}

void spec_release(core *c, seq *s)
{
	if (!c->sp)
		return;
	if (c->sp->pool)
		kv_seq_release(c->sp->pool, &s->draft.kv);
	reset_draft(c->sp, s);
}

void spec_admit(core *c, seq *s)
{
	spec *sp = c->sp;
	if (!sp->pool || s->draft.kv.n_blocks > 0)
		return;
	reset_draft(sp, s);
	int n_free_hits;
	int hits = kv_prefix_lookup(sp->prefix, s->tokens, s->n_tokens, sp->hits, &n_free_hits, &s->draft.last_key);
	for (int i = 0; i < hits; i++) {
		kv_prefix_take(sp->prefix, sp->hits[i]);
		kv_seq_push(sp->pool, &s->draft.kv, sp->hits[i]);
	}
	s->draft.computed = s->draft.keyed = hits;
	s->draft.computed *= c->bt;
	s->draft.kv.n_tokens = s->draft.computed;
}

int spec_want(const core *c, const seq *s)
{
	const spec *sp = c->sp;
	int k = sp->adaptive ? spec_len_want(&s->draft.len, &sp->len) : sp->k;
	if (s->max_tokens > 0)
		k = MIN(k, s->max_tokens - s->n_gen - 1);
	k = MIN(k, c->n_ctx - s->n_tokens - 1);
	return MAX(k, 0);
}

/* ---- proposing ---- */

/* Prompt lookup: the continuation of the latest earlier occurrence of the
 * last n tokens (n = ngram_n down to 1). Returns the drafts found (<= k). */
static int ngram_propose(const spec *sp, seq *s, int k)
{
	const int32_t *t = s->tokens;
	int n_tok = s->n_tokens;
	for (int n = MIN(sp->ngram_n, n_tok - 1); n >= 1; n--) {
		const int32_t *tail = t + n_tok - n;
		for (int i = n_tok - n - 1; i >= 0; i--) {
			if (memcmp(t + i, tail, (size_t)n * sizeof *t))
				continue;
			int m = MIN(k, n_tok - (i + n));
			memmove(s->tokens + n_tok, t + i + n, (size_t)m * sizeof *t);
			return m;
		}
	}
	return 0;
}

/* Runs the draft's batch; false when it fails (a draft failure only costs speed). */
static bool draft_forward(spec *sp)
{
	err e;
	return runner_run(sp->run, &e) == 0;
}

/* Drafts the next token of item it from the draft's logits row o: q into the
 * item's distribution slot j, the draw into tokens[n_tokens + j]. */
static void draw_draft(spec *sp, step_item *it, int o, int j)
{
	seq *s = it->s;
	float *q = it->q + (size_t)j * sp->n_vocab;
	samp_probs(&s->sampler, runner_logits(sp->run, o), s->tokens, s->n_tokens + j, q);
	s->tokens[s->n_tokens + j] = samp_draw(&s->sampler, q);
}

/* Pass 0: catch every planned sequence's draft KV up with the target (prefill
 * chunks mirrored, decodes up to their last token) and draw the first draft
 * token of the drafting ones. */
static int draft_pass0(core *c, int *n_items)
{
	spec *sp = c->sp;
	int outs[SPEC_MAX_SEQS];
	for (int p = 0; p < c->n_plan; p++) {
		step_item *it = &c->plan[p];
		seq *s = it->s;
		if (s->draft.computed == 0 && s->draft.keyed == 0)
			reset_draft(sp, s);
		bool decode = it->start + it->count == s->n_tokens + it->n_draft && it->count == 1 + it->n_draft;
		int end = decode ? s->n_tokens : it->start + it->count;
		int feed = end - s->draft.computed;
		int extra = it->n_draft > 0 ? it->n_draft - 1 : 0;
		if (feed <= 0 || feed > sp->max_rows - runner_rows(sp->run) ||
		    kv_seq_reserve(sp->pool, &s->draft.kv, (int64_t)end + extra)) {
			it->n_draft = 0; /* the draft cannot keep up this step: plain decode */
			if (decode)
				it->count = 1;
			continue;
		}
		bool drafting = it->n_draft > 0 && *n_items < SPEC_MAX_SEQS;
		int from = s->draft.computed;
		int o = runner_add(sp->run, &s->draft.kv, from, s->tokens + from, feed, feed - 1, drafting);
		s->draft.computed = end;
		s->draft.kv.n_tokens = end;
		if (drafting) {
			it->q = sp->q + (size_t)*n_items * sp->k_max * sp->n_vocab;
			outs[*n_items] = o;
			sp->items[(*n_items)++] = it;
		} else if (decode) {
			it->n_draft = 0;
			it->count = 1;
		}
	}
	if (!draft_forward(sp))
		return -1;
	for (int i = 0; i < *n_items; i++) {
		seq_reserve_tokens(sp->items[i]->s, sp->items[i]->n_draft + 1);
		draw_draft(sp, sp->items[i], outs[i], 0);
	}
	return 0;
}

/* Passes 1..k-1: feed draft j, draw draft j+1, for the items that want more. */
static int draft_more(core *c, int n_items)
{
	spec *sp = c->sp;
	for (int j = 1; j < sp->k_max; j++) {
		int n = 0;
		for (int i = 0; i < n_items; i++) {
			step_item *it = sp->items[i];
			if (it->n_draft <= j)
				continue;
			seq *s = it->s;
			int pos = s->n_tokens + j - 1;
			runner_add(sp->run, &s->draft.kv, pos, s->tokens + pos, 1, 0, 1);
			n++;
			s->draft.computed = s->n_tokens + j;
			s->draft.kv.n_tokens = s->draft.computed;
		}
		if (n == 0)
			break;
		if (!draft_forward(sp))
			return -1;
		for (int i = 0, o = 0; i < n_items; i++)
			if (sp->items[i]->n_draft > j)
				draw_draft(sp, sp->items[i], o++, j);
	}
	return 0;
}

/* Whether plan item it decodes s's last token (with or without drafts). */
static bool is_decode(const step_item *it)
{
	return it->count == 1 + it->n_draft && it->start + it->count == it->s->n_tokens + it->n_draft;
}

/* A paused sequence's decode step without drafts: evidence for its way back
 * (engine/spec_len.h). Prompt lookup guesses the token this step samples
 * (into the scratch after tokens[], not proposed) and checks the guess at
 * the next step; a draft model has no free evidence, so the step counts
 * towards its next trial. */
static void paused_step(spec *sp, step_item *it)
{
	seq *s = it->s;
	spec_len *l = &s->draft.len;
	if (sp->kind != DRAFT_NGRAM) {
		spec_len_paused_step(l, &sp->len, false);
		return;
	}
	int pos = s->draft.shadow_pos;
	if (pos > 0 && pos < s->n_tokens)
		spec_len_paused_step(l, &sp->len, s->tokens[pos] == s->draft.shadow);
	s->draft.shadow_pos = 0;
	if (!l->paused)
		return;
	/* nothing found is no evidence: a step without drafts costs nothing */
	seq_reserve_tokens(s, 1);
	if (ngram_propose(sp, s, 1) == 1) {
		s->draft.shadow_pos = s->n_tokens;
		s->draft.shadow = s->tokens[s->n_tokens];
	}
}

void spec_propose(core *c)
{
	spec *sp = c->sp;
	for (int p = 0; p < c->n_plan; p++) {
		step_item *it = &c->plan[p];
		if (sp->adaptive && it->n_draft == 0 && it->s->draft.len.paused && is_decode(it))
			paused_step(sp, it);
	}
	if (sp->kind == DRAFT_NGRAM) {
		for (int p = 0; p < c->n_plan; p++) {
			step_item *it = &c->plan[p];
			if (it->n_draft == 0)
				continue;
			seq_reserve_tokens(it->s, it->n_draft + 1);
			it->n_draft = ngram_propose(sp, it->s, it->n_draft);
			it->count = 1 + it->n_draft;
			it->q = NULL;
		}
		return;
	}
	int n_items = 0;
	if (draft_pass0(c, &n_items) || draft_more(c, n_items)) {
		/* a draft failure only costs speed: verify nothing this step */
		for (int p = 0; p < c->n_plan; p++)
			if (c->plan[p].n_draft > 0) {
				c->plan[p].n_draft = 0;
				c->plan[p].count = 1;
				spec_release(c, c->plan[p].s);
			}
		return;
	}
	/* publish the draft's blocks of committed tokens (prefill mirrors) */
	for (int p = 0; p < c->n_plan; p++) {
		seq *s = c->plan[p].s;
		kv_prefix_publish_table(sp->prefix, &s->draft.kv, s->tokens, MIN(s->draft.computed, s->n_tokens),
					&s->draft.keyed, &s->draft.last_key);
	}
}

/* ---- verifying ---- */

int spec_verify(core *c, const step_item *it, int32_t *out)
{
	spec *sp = c->sp;
	const float *rows = runner_logits(c->run, it->out);
	seq *s = it->s;
	int V = sp->n_vocab;
	for (int j = 0; j < it->n_draft; j++) {
		int32_t x = s->tokens[s->n_tokens + j];
		samp_probs(&s->sampler, rows + (size_t)j * V, s->tokens, s->n_tokens + j, sp->p);
		const float *q = it->q ? it->q + (size_t)j * V : NULL;
		float px = sp->p[x], qx = q ? q[x] : 1.0f;
		/* no random draw when acceptance is certain (greedy stays draw-free) */
		double a = samp_accept_prob(px, qx);
		if (a >= 1.0 || samp_uniform(&s->sampler) < a) {
			out[j] = x;
			continue;
		}
		samp_residual(sp->p, q, x, V, sp->r);
		out[j] = samp_draw(&s->sampler, sp->r);
		return j + 1;
	}
	int k = it->n_draft;
	samp_probs(&s->sampler, rows + (size_t)k * V, s->tokens, s->n_tokens + k, sp->p);
	out[k] = samp_draw(&s->sampler, sp->p);
	return k + 1;
}

void spec_commit(core *c, seq *s, int n_draft, int n_accepted)
{
	spec *sp = c->sp;
	c->st.spec_steps++;
	c->st.spec_proposed += n_draft;
	c->st.spec_accepted += n_accepted;
	for (int j = 0; j < n_draft; j++) {
		c->st.spec_pos_proposed[j]++;
		c->st.spec_pos_accepted[j] += j < n_accepted;
	}
	s->n_proposed += n_draft;
	s->n_accepted += n_accepted;
	if (sp->adaptive)
		spec_len_update(&s->draft.len, &sp->len, n_draft, n_accepted);
	if (!sp->pool)
		return;
	/* the draft fed drafts 1..n_draft-1: keep those that were accepted */
	int valid = MIN(s->draft.computed, s->n_tokens + MIN(n_accepted, n_draft - 1));
	s->draft.computed = valid;
	kv_seq_truncate(sp->pool, &s->draft.kv, valid);
	s->draft.kv.n_tokens = valid;
	kv_prefix_publish_table(sp->prefix, &s->draft.kv, s->tokens, valid, &s->draft.keyed, &s->draft.last_key);
}

bool spec_check(const core *c, err *e)
{
	const spec *sp = c->sp;
	if (!sp->pool)
		return true;
	int n = c->running.n + c->waiting.n;
	const kv_seq **seqs = xmalloc((size_t)MAX(1, n) * sizeof *seqs);
	for (int i = 0; i < c->running.n; i++)
		seqs[i] = &c->running.v[i]->draft.kv;
	for (int i = 0; i < c->waiting.n; i++)
		seqs[c->running.n + i] = &c->waiting.v[i]->draft.kv;
	bool ok = kv_pool_check(sp->pool, seqs, n, NULL, e) && kv_prefix_check(sp->prefix, e);
	if (!ok)
		err_prefix(e, "draft pool");
	free(seqs);
	return ok;
}
