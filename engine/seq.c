/* engine/seq.c: a sequence's life (create, clone, free), its predicates,
 * its request's shared part, and the ordered lists the core keeps them in.
 * It knows no feature: their parts of a seq are theirs (core_int.h). */
#include "engine/core_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- the request's shared part ---- */

static void set_stops(req_common *rc, const int32_t *ids, int n_ids, const char *const *strs, int n_strs)
{
	if (n_ids > 0) {
		rc->stop_ids = xmalloc((size_t)n_ids * sizeof *rc->stop_ids);
		memcpy(rc->stop_ids, ids, (size_t)n_ids * sizeof *rc->stop_ids);
		rc->n_stop_ids = n_ids;
	}
	if (n_strs > 0)
		rc->stop_strs = xcalloc((size_t)n_strs, sizeof *rc->stop_strs);
	for (int i = 0; i < n_strs; i++) {
		if (!strs[i] || !strs[i][0])
			continue;
		rc->stop_strs[rc->n_stop_strs++] = xstrdup(strs[i]);
		rc->max_stop_len = MAX(rc->max_stop_len, strlen(strs[i]));
	}
}

req_common *common_new(const core_request *r)
{
	req_common *rc = xcalloc(1, sizeof *rc);
	rc->n_completions = r->n;
	rc->ignore_eos = r->ignore_eos;
	rc->prefill_only = r->prefill_only;
	set_stops(rc, r->stop_ids, r->n_stop_ids, r->stop_strs, r->n_stop_strs);
	return rc;
}

req_common *common_copy(const req_common *src)
{
	req_common *rc = xcalloc(1, sizeof *rc);
	rc->refs = 1;
	rc->n_completions = 1;
	rc->spawned = true;
	rc->ignore_eos = src->ignore_eos;
	set_stops(rc, src->stop_ids, src->n_stop_ids, (const char *const *)src->stop_strs, src->n_stop_strs);
	return rc;
}

void common_unref(req_common *rc)
{
	if (--rc->refs > 0)
		return;
	for (int i = 0; i < rc->n_stop_strs; i++)
		free(rc->stop_strs[i]);
	free(rc->stop_strs);
	free(rc->stop_ids);
	free(rc);
}

/* ---- sequences ---- */

seq *seq_new(core *c, int64_t req, int conv, int index, req_common *rc, const samp_params *sp,
	     int max_tokens, int pin_tokens)
{
	seq *s = xcalloc(1, sizeof *s);
	s->req = req;
	s->conv = conv;
	s->index = index;
	s->common = rc;
	rc->refs++;
	kv_seq_init(&s->kv);
	s->last_key = kv_prefix_root(c->prefix);
	samp_init(&s->sampler, sp, c->n_vocab);
	s->max_tokens = max_tokens;
	s->pin_tokens = pin_tokens;
	tok_decoder_init(&s->dec, false);
	s->t_submit = now_s();
	return s;
}

seq *seq_clone(core *c, const seq *src, int64_t req, int conv, int index, uint64_t seed)
{
	samp_params sp = src->sampler.p;
	sp.seed = seed;
	seq *s = seq_new(c, req, conv, index, src->common, &sp, src->max_tokens, src->pin_tokens);
	seq_reserve_tokens(s, src->n_tokens);
	memcpy(s->tokens, src->tokens, (size_t)src->n_tokens * sizeof *s->tokens);
	s->n_tokens = src->n_tokens;
	s->n_prompt = src->n_prompt;
	s->n_computed = src->n_computed;
	s->n_keyed = src->n_keyed;
	s->last_key = src->last_key;
	s->chain = src->chain;
	s->n_shifted = src->n_shifted;
	s->n_gen = src->n_gen;
	s->dec = src->dec;
	s->t_submit = src->t_submit;
	s->t_sched = src->t_sched;
	s->t_first = src->t_first;
	s->n_cached = src->n_cached;
	s->counted = src->counted;
	if (src->text_len) {
		s->text = xstrndup(src->text, src->text_len);
		s->text_len = s->text_cap = src->text_len;
		s->text_sent = src->text_sent;
	}
	kv_seq_share(c->pool, &s->kv, &src->kv);
	return s;
}

void seq_free(core *c, seq *s)
{
	kv_seq_release(c->pool, &s->kv);
	samp_deinit(&s->sampler);
	common_unref(s->common);
	free(s->tokens);
	free(s->text);
	free(s);
}

void seq_reserve_tokens(seq *s, int n)
{
	xgrow(&s->tokens, &s->cap, (int64_t)s->n_tokens + n, sizeof *s->tokens);
}

void seq_push_token(seq *s, int32_t t)
{
	seq_reserve_tokens(s, 1);
	s->tokens[s->n_tokens++] = t;
}

core_req_metrics seq_metrics(const seq *s)
{
	core_req_metrics m = {
		.n_prompt = s->n_prompt, .n_cached = s->n_cached, .n_gen = s->n_gen,
		.n_preempt = s->n_preempt, .n_proposed = s->n_proposed, .n_accepted = s->n_accepted,
		.n_shifted = s->n_shifted,
	};
	if (s->t_sched > 0)
		m.queue_ms = (s->t_sched - s->t_submit) * 1e3;
	if (s->t_first > 0)
		m.ttft_ms = (s->t_first - s->t_submit) * 1e3;
	if (s->n_gen > 1)
		m.tpot_ms = (s->t_last - s->t_first) * 1e3 / (s->n_gen - 1);
	return m;
}

bool seq_is_stop(const core *c, const seq *s, int32_t t)
{
	if (c->tok && !s->common->ignore_eos && tok_is_eog(c->tok, t))
		return true;
	for (int i = 0; i < s->common->n_stop_ids; i++)
		if (s->common->stop_ids[i] == t)
			return true;
	return false;
}

/* ---- lists ---- */

void seqs_insert(seq_list *l, int at, seq *s)
{
	xgrow(&l->v, &l->cap, (int64_t)l->n + 1, sizeof *l->v);
	memmove(l->v + at + 1, l->v + at, (size_t)(l->n - at) * sizeof *l->v);
	l->v[at] = s;
	l->n++;
}

void seqs_remove(seq_list *l, int i)
{
	memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
	l->n--;
}

int seqs_index(const seq_list *l, const seq *s)
{
	for (int i = 0; i < l->n; i++)
		if (l->v[i] == s)
			return i;
	return -1;
}
