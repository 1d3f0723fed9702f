/* engine/core_post.c: the step after the forward pass. For each item of the
 * plan: count its rows as computed, publish the blocks that became full (and
 * pin those inside a conversation's pinned prefix), and where the item
 * reached the end of its sequence, sample (or verify drafts), stream the
 * token's text and finish the sequence when it must stop. Finishing requests
 * and emitting events happens here and in core.c's submit/cancel only. */
#include "engine/core_int.h"

#include <string.h>

/* ---- finishing ---- */

static void emit_finish(core *c, seq *s, enum core_finish f, const char *msg)
{
	core_event ev = {
		.kind = CORE_EV_FINISH, .req = s->req, .conv = s->conv, .index = s->index,
		.step = c->st.steps, .token = -1, .text = msg ? msg : "", .text_len = msg ? strlen(msg) : 0,
		.finish = f, .m = seq_metrics(s),
	};
	if (!s->common->prefill_only) { /* a warm-up is no request the user made */
		c->st.finished++;
		c->st.finished_by[f]++;
		core_hist_add(&c->st.e2e, now_s() - s->t_submit);
	}
	if (c->emit)
		c->emit(c->emit_ctx, &ev);
}

void finish_seq(core *c, seq *s, enum core_finish f, const char *msg)
{
	if (beam_group_of(s)) {
		beam_abort(c, s, f, msg);
		return;
	}
	int i = seqs_index(&c->running, s);
	if (i >= 0)
		seqs_remove(&c->running, i);
	else if ((i = seqs_index(&c->waiting, s)) >= 0)
		seqs_remove(&c->waiting, i);
	emit_finish(c, s, f, msg);
	/* completions that were never spawned end with their first one */
	req_common *rc = s->common;
	if (s->index == 0 && !rc->spawned && rc->n_completions > 1) {
		rc->spawned = true;
		int n = rc->n_completions;
		for (int k = 1; k < n; k++) {
			s->index = k;
			emit_finish(c, s, f, msg);
		}
	}
	spec_release(c, s);
	tier_swap_release(c, s);
	seq_free(c, s);
}

/* ---- pins and publishing ---- */

static bool is_pinned_by(const core *c, int conv, int32_t block)
{
	for (int i = 0; i < c->n_pins; i++)
		if (c->pins[i].conv == conv && c->pins[i].block == block)
			return true;
	return false;
}

void pin_block(core *c, int conv, int32_t block)
{
	if (is_pinned_by(c, conv, block))
		return;
	xgrow(&c->pins, &c->cap_pins, (int64_t)c->n_pins + 1, sizeof *c->pins);
	kv_pool_ref(c->pool, block);
	c->pins[c->n_pins++] = (pin){conv, block};
}

/* s's block j holds the same tokens under the same key as the published
 * block twin: s takes twin instead (its own copy is dropped). */
static void take_twin(core *c, seq *s, int j, int32_t twin)
{
	int32_t own = s->kv.blocks[j];
	bool full = j >= s->kv.w_lo; /* the entry needs the W part (kv/pool.h) */
	if (full && kv_pool_w_of(c->pool, twin) < 0)
		return;
	kv_prefix_take(c->prefix, twin);
	if (full) {
		kv_pool_wref(c->pool, twin);
		kv_pool_wunref(c->pool, own);
	}
	s->kv.blocks[j] = twin;
	kv_pool_unref(c->pool, own);
}

void publish_full_blocks(core *c, seq *s)
{
	int before = s->n_keyed;
	int64_t full = MIN((int64_t)s->n_computed / c->bt, (int64_t)s->kv.n_blocks);
	for (; s->n_keyed < full; s->n_keyed++) {
		int j = s->n_keyed;
		const int32_t *toks = s->tokens + (size_t)j * c->bt;
		uint64_t key = kv_prefix_chain_key(c->prefix, s->last_key, j, toks, &s->chain);
		bool pinned = (int64_t)(j + 1) * c->bt <= s->pin_tokens;
		if (!kv_prefix_publish(c->prefix, s->kv.blocks[j], key, toks) && pinned) {
			int32_t twin = kv_prefix_find(c->prefix, key, toks);
			if (twin >= 0 && twin != s->kv.blocks[j])
				take_twin(c, s, j, twin);
		}
		s->last_key = key;
		if (pinned)
			pin_block(c, s->conv, s->kv.blocks[j]);
	}
	if (s->n_keyed > before)
		tier_persist(c, s, before);
}

/* ---- text and stops ---- */

/* Holds back a suffix of s's text that may be the start of a stop string:
 * returns how much of the text can be released. */
static size_t releasable(const seq *s)
{
	const req_common *rc = s->common;
	size_t hold = 0;
	for (int i = 0; i < rc->n_stop_strs; i++) {
		size_t L = strlen(rc->stop_strs[i]);
		for (size_t k = MIN(L - 1, s->text_len); k > hold; k--)
			if (!memcmp(s->text + s->text_len - k, rc->stop_strs[i], k)) {
				hold = k;
				break;
			}
	}
	return s->text_len - hold;
}

/* Appends text to s->text; returns true when a stop string now occurs (the
 * text is cut before it). *release_to: how much text can be streamed. */
static bool append_text(seq *s, const char *piece, size_t n, size_t *release_to)
{
	xgrow_size(&s->text, &s->text_cap, s->text_len + n + 1, 1);
	memcpy(s->text + s->text_len, piece, n);
	s->text_len += n;
	s->text[s->text_len] = '\0';
	req_common *rc = s->common;
	size_t from = s->text_len - n > rc->max_stop_len ? s->text_len - n - rc->max_stop_len : 0;
	for (int i = 0; i < rc->n_stop_strs; i++) {
		char *hit = strstr(s->text + from, rc->stop_strs[i]);
		if (hit) {
			s->text_len = (size_t)(hit - s->text);
			*release_to = s->text_len;
			return true;
		}
	}
	*release_to = releasable(s);
	return false;
}

/* Takes the sampled token t for s: stream it, then finish s if it must stop.
 * Returns true when s finished (and was freed). */
static bool accept_token(core *c, seq *s, int32_t t)
{
	double now = now_s();
	c->st.generated_tokens++;
	if (s->n_gen == 0)
		s->t_first = now;
	if (s->n_gen == 0 && s->index == 0)
		core_hist_add(&c->st.ttft, now - s->t_submit);
	else if (s->n_gen > 0)
		core_hist_add(&c->st.itl, now - s->t_last);
	s->t_last = now;
	if (seq_is_stop(c, s, t)) {
		s->n_gen++;
		finish_seq(c, s, FIN_STOP, NULL);
		return true;
	}
	seq_push_token(s, t);
	s->n_gen++;
	char piece[512];
	int n = c->tok ? tok_decode(c->tok, &s->dec, t, piece, sizeof piece) : 0;
	size_t release_to = s->text_len;
	bool stopped = append_text(s, piece, n > 0 ? (size_t)n : 0, &release_to);
	core_event ev = {
		.kind = CORE_EV_TOKEN, .req = s->req, .conv = s->conv, .index = s->index,
		.step = c->st.steps, .token = t,
		.text = s->text + s->text_sent, .text_len = release_to - s->text_sent,
		.m = seq_metrics(s),
	};
	s->text_sent = release_to;
	if (c->emit)
		c->emit(c->emit_ctx, &ev);
	enum core_finish f = FIN_STOP;
	if (!stopped && s->max_tokens > 0 && s->n_gen >= s->max_tokens)
		f = FIN_LENGTH, stopped = true;
	else if (!stopped && s->n_tokens >= c->n_ctx)
		f = FIN_CONTEXT, stopped = true;
	if (stopped)
		finish_seq(c, s, f, NULL);
	return stopped;
}

/* ---- sampling ---- */

/* A verified speculative item: keep the target's K/V of the accepted drafts,
 * drop the rest, then stream the committed tokens. */
static void commit_spec(core *c, const step_item *p)
{
	seq *s = p->s;
	int32_t commit[SPEC_MAX_K + 1];
	int n_commit = spec_verify(c, p, commit);
	s->n_computed = s->n_tokens + n_commit - 1;
	kv_seq_truncate(c->pool, &s->kv, s->n_computed);
	s->kv.n_tokens = s->n_computed;
	c->st.decode_tokens += p->count;
	publish_full_blocks(c, s);
	kv_seq_window_release(c->pool, &s->kv, s->n_computed);
	spec_commit(c, s, p->n_draft, n_commit - 1);
	for (int i = 0; i < n_commit; i++)
		if (accept_token(c, s, commit[i]))
			break; /* finished (and freed) */
}

/* For a request with n > 1 completions: at the first sample, the others are
 * made as clones that share every block (copy-on-write), placed right after
 * s so that siblings decode in order; each samples the same logits. */
static void sample_with_siblings(core *c, seq *s, const float *lg)
{
	seq *sib[64];
	int n_sib = 0;
	req_common *rc = s->common;
	if (s->n_gen == 0 && s->index == 0 && !rc->spawned && rc->n_completions > 1) {
		int at = seqs_index(&c->running, s);
		n_sib = MIN(rc->n_completions - 1, (int)ARRAY_LEN(sib));
		for (int i = 1; i < rc->n_completions; i++) {
			seq *k = seq_clone(c, s, s->req, s->conv, i, s->sampler.p.seed + (uint64_t)i);
			k->state = SEQ_RUNNING;
			seqs_insert(&c->running, at + i, k);
			if (i <= n_sib)
				sib[i - 1] = k;
		}
		rc->spawned = true;
	}
	accept_token(c, s, samp_sample(&s->sampler, lg, s->tokens, s->n_tokens));
	for (int i = 0; i < n_sib; i++)
		accept_token(c, sib[i], samp_sample(&sib[i]->sampler, lg, sib[i]->tokens, sib[i]->n_tokens));
}

void post_step(core *c)
{
	for (int p = 0; p < c->n_plan; p++) {
		step_item *it = &c->plan[p];
		seq *s = it->s;
		if (it->n_draft > 0) {
			commit_spec(c, it);
			continue;
		}
		s->n_computed += it->count;
		s->kv.n_tokens = s->n_computed;
		if (s->n_computed > s->n_prompt || s->n_gen > 0)
			c->st.decode_tokens += it->count;
		else
			c->st.prefill_tokens += it->count;
		publish_full_blocks(c, s);
		/* its windows now start from the next position (accepted tokens only) */
		kv_seq_window_release(c->pool, &s->kv, s->n_computed);
		if (s->n_computed != s->n_tokens)
			continue;
		if (s->common->prefill_only) /* its K/V is cached: done, without a token */
			finish_seq(c, s, FIN_STOP, NULL);
		else if (beam_group_of(s))
			beam_on_logits(c, s, runner_logits(c->run, it->out));
		else
			sample_with_siblings(c, s, runner_logits(c->run, it->out));
	}
	beam_select_ready(c);
}
