/* engine/core.c: requests, scheduling, the batched step and postprocessing.
 *
 * A sequence's tokens[] holds the prompt and everything sampled so far;
 * n_computed of them have their K/V in the pool. Every step feeds a sequence
 * tokens[n_computed .. n_computed + count): a decode is count 1, a prefill
 * chunk is larger, and a preempted sequence simply recomputes from 0. When a
 * step's rows reach the end of tokens[], that row's logits give the next
 * token. Full blocks are published to the prefix cache after their K/V are
 * written (postprocess), never before. */
#include "engine/core.h"

#include "engine/core_int.h"
#include "kernels/kvq.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *core_finish_name(enum core_finish f)
{
	static const char *const names[] = {"stop", "length", "context", "cancelled", "error"};
	return (unsigned)f < ARRAY_LEN(names) ? names[f] : "?";
}

/* ---- sequences ---- */

static void common_unref(req_common *rc)
{
	if (--rc->refs > 0)
		return;
	for (int i = 0; i < rc->n_stop_strs; i++)
		free(rc->stop_strs[i]);
	free(rc->stop_strs);
	free(rc->stop_ids);
	free(rc);
}

static void seq_push_token(seq *s, int32_t t)
{
	if (s->n_tokens == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->tokens = xrealloc(s->tokens, (size_t)s->cap * sizeof *s->tokens);
	}
	s->tokens[s->n_tokens++] = t;
}

static void seq_free(core *c, seq *s)
{
	kv_seq_release(c->pool, &s->kv);
	if (c->sp)
		spec_release(c, s);
	samp_deinit(&s->sampler);
	common_unref(s->common);
	free(s->tokens);
	free(s->text);
	free(s);
}

static core_req_metrics seq_metrics(const seq *s)
{
	core_req_metrics m = {
		.n_prompt = s->n_prompt, .n_cached = s->n_cached, .n_gen = s->n_gen,
		.n_preempt = s->n_preempt, .n_proposed = s->n_proposed, .n_accepted = s->n_accepted,
	};
	if (s->t_sched > 0)
		m.queue_ms = (s->t_sched - s->t_submit) * 1e3;
	if (s->t_first > 0)
		m.ttft_ms = (s->t_first - s->t_submit) * 1e3;
	if (s->n_gen > 1)
		m.tpot_ms = (s->t_last - s->t_first) * 1e3 / (s->n_gen - 1);
	return m;
}

static void emit_finish(core *c, seq *s, enum core_finish f, const char *msg)
{
	core_event ev = {
		.kind = CORE_EV_FINISH, .req = s->req, .conv = s->conv, .index = s->index,
		.step = c->st.steps, .token = -1, .text = msg ? msg : "", .text_len = msg ? strlen(msg) : 0,
		.finish = f, .m = seq_metrics(s),
	};
	c->st.finished++;
	if (c->emit)
		c->emit(c->emit_ctx, &ev);
}

static void remove_at(seq **arr, int *n, int i)
{
	memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
	(*n)--;
}

static int index_of(seq **arr, int n, const seq *s)
{
	for (int i = 0; i < n; i++)
		if (arr[i] == s)
			return i;
	return -1;
}

/* Ends s: emits FINISH, frees its blocks and the seq. */
static void finish_seq(core *c, seq *s, enum core_finish f, const char *msg)
{
	int i = index_of(c->running, c->n_running, s);
	if (i >= 0)
		remove_at(c->running, &c->n_running, i);
	else if ((i = index_of(c->waiting, c->n_waiting, s)) >= 0)
		remove_at(c->waiting, &c->n_waiting, i);
	emit_finish(c, s, f, msg);
	/* completions that were never spawned end with their first one */
	req_common *rc = s->common;
	if (s->index == 0 && !rc->spawned && rc->n_completions > 1) {
		rc->spawned = true;
		int n = rc->n_completions;
		for (int i = 1; i < n; i++) {
			s->index = i;
			emit_finish(c, s, f, msg);
		}
	}
	seq_free(c, s);
}

/* Inserts s into the running list at position at (forks and siblings may
 * take the list past max_running for a while; only admission checks it). */
static void running_insert(core *c, int at, seq *s)
{
	if (c->n_running == c->cap_running) {
		c->cap_running = c->cap_running ? 2 * c->cap_running : 64;
		c->running = xrealloc(c->running, (size_t)c->cap_running * sizeof *c->running);
	}
	memmove(c->running + at + 1, c->running + at, (size_t)(c->n_running - at) * sizeof *c->running);
	c->running[at] = s;
	c->n_running++;
	s->state = SEQ_RUNNING;
}

static void waiting_insert(core *c, seq *s, bool front)
{
	if (c->n_waiting == c->cap_waiting) {
		c->cap_waiting = c->cap_waiting ? 2 * c->cap_waiting : 16;
		c->waiting = xrealloc(c->waiting, (size_t)c->cap_waiting * sizeof *c->waiting);
	}
	if (front) {
		memmove(c->waiting + 1, c->waiting, (size_t)c->n_waiting * sizeof *c->waiting);
		c->waiting[0] = s;
	} else {
		c->waiting[c->n_waiting] = s;
	}
	c->n_waiting++;
	s->state = SEQ_WAITING;
}

/* ---- pins ---- */

static bool is_pinned_by(const core *c, int conv, int32_t block)
{
	for (int i = 0; i < c->n_pins; i++)
		if (c->pins[i].conv == conv && c->pins[i].block == block)
			return true;
	return false;
}

/* Pins block (in use) for conv: the pin holds its own reference. */
static void pin_block(core *c, int conv, int32_t block)
{
	if (is_pinned_by(c, conv, block))
		return;
	if (c->n_pins == c->cap_pins) {
		c->cap_pins = c->cap_pins ? 2 * c->cap_pins : 16;
		c->pins = xrealloc(c->pins, (size_t)c->cap_pins * sizeof *c->pins);
	}
	kv_pool_ref(c->pool, block);
	c->pins[c->n_pins++] = (pin){conv, block};
}

void core_close_conv(core *c, int conv)
{
	for (int i = 0; i < c->n_pins;) {
		if (c->pins[i].conv == conv) {
			kv_pool_unref(c->pool, c->pins[i].block);
			c->pins[i] = c->pins[--c->n_pins];
		} else {
			i++;
		}
	}
}

/* ---- prefix cache ---- */

void prefix_publish(kv_prefix *prefix, kv_seq *kv, const int32_t *tokens, int bt, int n_valid,
		    int *n_keyed, uint64_t *last_key)
{
	int full = MIN(n_valid / bt, kv->n_blocks);
	for (; *n_keyed < full; (*n_keyed)++) {
		const int32_t *toks = tokens + (size_t)*n_keyed * bt;
		uint64_t key = kv_prefix_key(prefix, *last_key, toks);
		kv_prefix_publish(prefix, kv->blocks[*n_keyed], key, toks);
		*last_key = key;
	}
}

/* Publishes s's blocks that became full; pins those inside the pinned prefix. */
static void publish_full_blocks(core *c, seq *s)
{
	int before = s->n_keyed;
	prefix_publish(c->prefix, &s->kv, s->tokens, c->bt, s->n_computed, &s->n_keyed, &s->last_key);
	for (int j = before; j < s->n_keyed && (j + 1) * c->bt <= s->pin_tokens; j++)
		pin_block(c, s->conv, s->kv.blocks[j]);
}

int prefix_lookup(const kv_prefix *prefix, const kv_pool *pool, const seq *s, int bt,
		  int32_t *hits, int *n_free_hits, uint64_t *last_key)
{
	uint64_t key = kv_prefix_root(prefix);
	int n = 0;
	*n_free_hits = 0;
	*last_key = key;
	while ((n + 1) * bt <= s->n_tokens - 1) {
		const int32_t *toks = s->tokens + (size_t)n * bt;
		key = kv_prefix_key(prefix, key, toks);
		int32_t b = kv_prefix_find(prefix, key, toks);
		if (b < 0)
			break;
		*n_free_hits += kv_pool_is_free(pool, b);
		*last_key = key;
		hits[n++] = b;
	}
	return n;
}

/* ---- scheduling ---- */

/* Free blocks needed so that s can write positions [n_computed, upto). */
static int64_t blocks_needed(const core *c, const seq *s, int upto)
{
	int64_t have = s->kv.n_blocks, want = ((int64_t)upto + c->bt - 1) / c->bt;
	int64_t n = MAX(0, want - have);
	int first = s->n_computed / c->bt;
	if (first < have && kv_pool_refcount(c->pool, s->kv.blocks[first]) > 1)
		n++; /* copy-on-write of the shared block written first */
	return n;
}

/* Makes s writable up to position upto: copy-on-write of a shared first
 * block, then new blocks. Caller checked blocks_needed against the free count. */
static void make_room(core *c, seq *s, int upto)
{
	int first = s->n_computed / c->bt;
	if (first < s->kv.n_blocks) {
		int32_t old = s->kv.blocks[first];
		if (kv_pool_refcount(c->pool, old) > 1) {
			int32_t fresh = kv_pool_alloc(c->pool);
			assert(fresh >= 0);
			kv_pool_copy_block(c->pool, fresh, old);
			kv_pool_unref(c->pool, old);
			s->kv.blocks[first] = fresh;
		}
	}
	int rc = kv_seq_reserve(c->pool, &s->kv, upto);
	assert(rc == 0);
	(void)rc;
}

/* Sends s back to the head of the queue, to be recomputed. */
static void preempt(core *c, seq *s)
{
	int i = index_of(c->running, c->n_running, s);
	assert(i >= 0);
	remove_at(c->running, &c->n_running, i);
	kv_seq_release(c->pool, &s->kv);
	if (c->sp)
		spec_release(c, s);
	s->n_computed = 0;
	s->n_keyed = 0;
	s->last_key = kv_prefix_root(c->prefix);
	s->n_preempt++;
	c->st.preemptions++;
	waiting_insert(c, s, true);
}

static void plan_add(core *c, seq *s, int count, int n_draft)
{
	c->plan[c->n_plan++] = (sched_item){s, s->n_computed, count, n_draft, NULL};
	if (s->t_sched == 0)
		s->t_sched = now_s();
}

/* Room for n more tokens of decoding s, preempting the newest other running
 * sequences if needed. Returns false when s itself was preempted or failed. */
static bool room_for_decode(core *c, seq *s, int n)
{
	while (blocks_needed(c, s, s->n_computed + n) > kv_pool_n_free(c->pool)) {
		seq *victim = c->running[c->n_running - 1];
		if (victim == s && c->n_running == 1) {
			char msg[200];
			snprintf(msg, sizeof msg, "KV pool full: %lld blocks cannot hold this sequence's "
				 "%d tokens (enlarge the pool or shorten the chat)",
				 (long long)kv_pool_n_blocks(c->pool), s->n_computed + 1);
			finish_seq(c, s, FIN_ERROR, msg);
			return false;
		}
		preempt(c, victim);
		if (victim == s)
			return false;
	}
	make_room(c, s, s->n_computed + n);
	return true;
}

/* Largest chunk (<= want) that fits the free blocks for s. */
static int fit_chunk(const core *c, const seq *s, int want)
{
	int n = want;
	while (n > 0 && blocks_needed(c, s, s->n_computed + n) > kv_pool_n_free(c->pool))
		n = n > c->bt ? n - c->bt : n - 1;
	return n;
}

/* Admits the head of the queue if its remaining tokens fit; true if admitted. */
static bool admit_head(core *c)
{
	seq *s = c->waiting[0];
	int n_free_hits;
	uint64_t last_key;
	int hits = prefix_lookup(c->prefix, c->pool, s, c->bt, c->hits, &n_free_hits, &last_key);
	int64_t need = ((int64_t)s->n_tokens + c->bt - 1) / c->bt - (hits - n_free_hits);
	if (need > kv_pool_n_free(c->pool))
		return false;
	for (int i = 0; i < hits; i++) {
		kv_prefix_take(c->prefix, c->hits[i]);
		if (s->kv.n_blocks == s->kv.cap) {
			s->kv.cap = s->kv.cap ? 2 * s->kv.cap : 8;
			s->kv.blocks = xrealloc(s->kv.blocks, (size_t)s->kv.cap * sizeof *s->kv.blocks);
		}
		s->kv.blocks[s->kv.n_blocks++] = c->hits[i];
	}
	s->n_computed = hits * c->bt;
	s->kv.n_tokens = s->n_computed;
	s->n_keyed = hits;
	s->last_key = last_key;
	if (!s->counted) {
		s->n_cached = s->n_computed;
		c->st.prompt_tokens += s->n_prompt;
		c->st.cached_tokens += MIN(s->n_cached, s->n_prompt);
		s->counted = true;
	}
	for (int j = 0; j < hits && (j + 1) * c->bt <= s->pin_tokens; j++)
		pin_block(c, s->conv, s->kv.blocks[j]);
	if (c->sp)
		spec_admit(c, s);
	remove_at(c->waiting, &c->n_waiting, 0);
	running_insert(c, c->n_running, s);
	return true;
}

/* Decodes first (one token each, oldest first), then prefill chunks of
 * running sequences, then newly admitted ones, under the token budget. */
static void schedule(core *c)
{
	int budget = c->step_tokens;
	c->n_plan = 0;
	for (int i = 0; i < c->n_running && budget > 0; i++) {
		seq *s = c->running[i];
		if (s->n_tokens - s->n_computed != 1)
			continue;
		if (c->n_plan == c->max_running)
			break;
		/* draft tokens only where they fit without preempting anyone */
		int k = c->sp ? spec_want(c, s, budget) : 0;
		if (k > 0 && blocks_needed(c, s, s->n_computed + 1 + k) > kv_pool_n_free(c->pool))
			k = 0;
		if (!room_for_decode(c, s, 1 + k)) {
			i--; /* s left the running list; the next one moved into slot i */
			continue;
		}
		plan_add(c, s, 1 + k, k);
		budget -= 1 + k;
	}
	for (int i = 0; i < c->n_running && budget > 0; i++) {
		seq *s = c->running[i];
		if (s->n_tokens - s->n_computed <= 1)
			continue;
		if (c->n_plan == c->max_running)
			break;
		int n = fit_chunk(c, s, MIN(s->n_tokens - s->n_computed, budget));
		if (n > 0) {
			make_room(c, s, s->n_computed + n);
			plan_add(c, s, n, 0);
			budget -= n;
		}
	}
	while (budget > 0 && c->n_waiting > 0 && c->n_running < c->max_running &&
	       c->n_plan < c->max_running && admit_head(c)) {
		seq *s = c->running[c->n_running - 1];
		int n = fit_chunk(c, s, MIN(s->n_tokens - s->n_computed, budget));
		if (n > 0) {
			make_room(c, s, s->n_computed + n);
			plan_add(c, s, n, 0);
			budget -= n;
		}
	}
	/* Nothing runs and the head still does not fit: what it needs is held by
	 * pins, so it would wait forever. Answer it instead of hanging. */
	if (c->n_running == 0 && c->n_plan == 0 && c->n_waiting > 0) {
		seq *s = c->waiting[0];
		char msg[256];
		snprintf(msg, sizeof msg, "needs %lld KV blocks but only %lld can be freed (%d are pinned for "
			 "conversations' system prompts): close a tab or enlarge the pool",
			 (long long)(((int64_t)s->n_tokens + c->bt - 1) / c->bt), (long long)kv_pool_n_free(c->pool),
			 c->n_pins);
		finish_seq(c, s, FIN_ERROR, msg);
	}
}

/* ---- postprocess ---- */

/* Appends text to s->text; returns true when a stop string now occurs (the
 * text is cut before it). Releases what can no longer start a stop string. */
static bool append_text(seq *s, const char *piece, size_t n, size_t *release_to)
{
	if (s->text_len + n + 1 > s->text_cap) {
		s->text_cap = MAX(2 * s->text_cap, s->text_len + n + 64);
		s->text = xrealloc(s->text, s->text_cap);
	}
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
	/* hold back a suffix that may be the start of a stop string */
	size_t hold = 0;
	for (int i = 0; i < rc->n_stop_strs; i++) {
		size_t L = strlen(rc->stop_strs[i]);
		for (size_t k = MIN(L - 1, s->text_len); k > hold; k--)
			if (!memcmp(s->text + s->text_len - k, rc->stop_strs[i], k)) {
				hold = k;
				break;
			}
	}
	*release_to = s->text_len - hold;
	return false;
}

static bool is_stop_token(const core *c, const seq *s, int32_t t)
{
	if (c->tok && tok_is_eog(c->tok, t))
		return true;
	for (int i = 0; i < s->common->n_stop_ids; i++)
		if (s->common->stop_ids[i] == t)
			return true;
	return false;
}

/* Takes the sampled token t for s: stream it, then finish s if it must stop.
 * Returns true when s finished (and was freed). */
static bool accept_token(core *c, seq *s, int32_t t)
{
	double now = now_s();
	if (s->n_gen == 0)
		s->t_first = now;
	s->t_last = now;
	if (is_stop_token(c, s, t)) {
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

static seq *clone_seq(core *c, const seq *src, int64_t req, int conv, int index, uint64_t seed);

/* For a request with n > 1 completions: at the first sample, the others are
 * made as clones that share every block (copy-on-write). */
static void spawn_siblings(core *c, seq *s, int n_total, int at)
{
	for (int i = 1; i < n_total; i++) {
		seq *k = clone_seq(c, s, s->req, s->conv, i, s->sampler.p.seed + (uint64_t)i);
		running_insert(c, at + i, k); /* after s, so siblings decode in order */
	}
}

/* A verified speculative item: keep the target's K/V of the accepted drafts,
 * drop the rest, then stream the committed tokens. */
static void commit_spec(core *c, const sched_item *p, const float *rows)
{
	seq *s = p->s;
	int32_t commit[SPEC_MAX_K + 1];
	int n_commit = spec_verify(c, p, rows, commit);
	s->n_computed = s->n_tokens + n_commit - 1;
	kv_seq_truncate(c->pool, &s->kv, s->n_computed);
	s->kv.n_tokens = s->n_computed;
	c->st.decode_tokens += p->count;
	publish_full_blocks(c, s);
	spec_commit(c, s, p->n_draft, n_commit - 1);
	for (int i = 0; i < n_commit; i++)
		if (accept_token(c, s, commit[i]))
			break; /* finished (and freed) */
}

static void postprocess(core *c)
{
	int out = 0;
	for (int p = 0; p < c->n_plan; p++) {
		seq *s = c->plan[p].s;
		if (c->plan[p].n_draft > 0) {
			commit_spec(c, &c->plan[p], c->logits + (size_t)out * c->n_vocab);
			out += c->plan[p].n_draft + 1;
			continue;
		}
		s->n_computed += c->plan[p].count;
		s->kv.n_tokens = s->n_computed;
		if (s->n_computed > s->n_prompt || s->n_gen > 0)
			c->st.decode_tokens += c->plan[p].count;
		else
			c->st.prefill_tokens += c->plan[p].count;
		publish_full_blocks(c, s);
		if (s->n_computed != s->n_tokens)
			continue;
		const float *lg = c->logits + (size_t)out++ * c->n_vocab;
		int n_sib = 0;
		if (s->n_gen == 0 && s->index == 0 && !s->common->spawned && s->common->n_completions > 1) {
			n_sib = s->common->n_completions - 1;
			spawn_siblings(c, s, s->common->n_completions, index_of(c->running, c->n_running, s));
			s->common->spawned = true;
		}
		int at = index_of(c->running, c->n_running, s);
		seq *sib[64];
		n_sib = MIN(n_sib, (int)ARRAY_LEN(sib));
		for (int i = 0; i < n_sib; i++)
			sib[i] = c->running[at + 1 + i];
		accept_token(c, s, samp_sample(&s->sampler, lg, s->tokens, s->n_tokens));
		for (int i = 0; i < n_sib; i++)
			accept_token(c, sib[i], samp_sample(&sib[i]->sampler, lg, sib[i]->tokens,
							     sib[i]->n_tokens));
	}
}

/* ---- the step ---- */

static void build_batch(core *c, int *n_rows, int *n_out)
{
	int n = 0, o = 0;
	for (int p = 0; p < c->n_plan; p++) {
		seq *s = c->plan[p].s;
		c->b_tab[p] = s->kv.blocks;
		c->b_ntab[p] = s->kv.n_blocks;
		for (int i = 0; i < c->plan[p].count; i++, n++) {
			int pos = c->plan[p].start + i;
			c->b_tok[n] = s->tokens[pos];
			c->b_pos[n] = pos;
			c->b_slot[n] = kv_seq_slot(c->pool, &s->kv, pos);
			c->b_seq[n] = p;
		}
		/* logits for every verified position, or for a chunk's last row */
		if (c->plan[p].start + c->plan[p].count == s->n_tokens + c->plan[p].n_draft)
			for (int k = c->plan[p].n_draft; k >= 0; k--)
				c->b_out[o++] = n - 1 - k;
	}
	*n_rows = n;
	*n_out = o;
}

int core_step(core *c, err *e)
{
	double t0 = now_s();
	schedule(c);
	if (c->n_plan == 0)
		return 0;
	if (c->sp)
		spec_propose(c);
	int n_rows, n_out;
	build_batch(c, &n_rows, &n_out);
	llama_batch b = {
		.n_tokens = n_rows, .token = c->b_tok, .pos = c->b_pos, .slot = c->b_slot,
		.seq = c->b_seq, .n_seqs = c->n_plan, .block_table = c->b_tab, .n_table = c->b_ntab,
		.n_out = n_out, .out_rows = c->b_out,
	};
	kv_view kv = kv_pool_view(c->pool);
	c->st.steps++;
	if (llama_forward(c->model, &b, &kv, c->logits, e)) {
		while (c->n_running > 0)
			finish_seq(c, c->running[0], FIN_ERROR, e->msg);
		return -1;
	}
	postprocess(c);
	c->st.busy_s += now_s() - t0;
	if (c->check && !core_check(c, e))
		return -1;
	return n_rows;
}


/* ---- requests ---- */

static seq *new_seq(core *c, int64_t req, int conv, int index, req_common *rc,
		    const samp_params *sp, int max_tokens, int pin_tokens)
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

/* A copy of src's state sharing its KV blocks (each block gains a reference). */
static seq *clone_seq(core *c, const seq *src, int64_t req, int conv, int index, uint64_t seed)
{
	samp_params sp = src->sampler.p;
	sp.seed = seed;
	seq *s = new_seq(c, req, conv, index, src->common, &sp, src->max_tokens, src->pin_tokens);
	for (int i = 0; i < src->n_tokens; i++)
		seq_push_token(s, src->tokens[i]);
	s->n_prompt = src->n_prompt;
	s->n_computed = src->n_computed;
	s->n_keyed = src->n_keyed;
	s->last_key = src->last_key;
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
	s->kv.cap = s->kv.n_blocks = src->kv.n_blocks;
	s->kv.n_tokens = src->kv.n_tokens;
	s->kv.blocks = xmalloc((size_t)MAX(1, s->kv.cap) * sizeof *s->kv.blocks);
	for (int i = 0; i < src->kv.n_blocks; i++) {
		s->kv.blocks[i] = src->kv.blocks[i];
		kv_pool_ref(c->pool, src->kv.blocks[i]);
	}
	return s;
}

static req_common *new_common(const core_request *r)
{
	req_common *rc = xcalloc(1, sizeof *rc);
	rc->n_completions = r->n;
	if (r->n_stop_ids > 0) {
		rc->stop_ids = xmalloc((size_t)r->n_stop_ids * sizeof *rc->stop_ids);
		memcpy(rc->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof *rc->stop_ids);
		rc->n_stop_ids = r->n_stop_ids;
	}
	if (r->n_stop_strs > 0)
		rc->stop_strs = xcalloc((size_t)r->n_stop_strs, sizeof *rc->stop_strs);
	for (int i = 0; i < r->n_stop_strs; i++) {
		if (!r->stop_strs[i] || !r->stop_strs[i][0])
			continue;
		rc->stop_strs[rc->n_stop_strs++] = xstrdup(r->stop_strs[i]);
		rc->max_stop_len = MAX(rc->max_stop_len, strlen(r->stop_strs[i]));
	}
	return rc;
}

static const char *request_problem(const core *c, const core_request *r, char *buf, size_t cap)
{
	int64_t blocks = ((int64_t)r->n_prompt + 1 + c->bt - 1) / c->bt;
	if (r->n_prompt <= 0)
		snprintf(buf, cap, "empty prompt: nothing to continue");
	else if (r->n_prompt >= c->n_ctx)
		snprintf(buf, cap, "prompt is %d tokens but the context holds %d: shorten it or raise the "
			 "context size", r->n_prompt, c->n_ctx);
	else if (blocks > kv_pool_n_blocks(c->pool))
		snprintf(buf, cap, "prompt needs %lld KV blocks but the pool has %lld: enlarge the pool",
			 (long long)blocks, (long long)kv_pool_n_blocks(c->pool));
	else if (r->n < 1 || r->n > 64)
		snprintf(buf, cap, "n = %d completions (must be 1..64)", r->n);
	else
		return NULL;
	return buf;
}

int core_submit(core *c, const core_request *r, err *e)
{
	char problem[256];
	for (int i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= c->n_vocab) {
			snprintf(problem, sizeof problem, "prompt token %d is out of range (vocab %d)",
				 r->prompt[i], c->n_vocab);
			goto reject;
		}
	if (request_problem(c, r, problem, sizeof problem))
		goto reject;
	req_common *rc = new_common(r);
	seq *s = new_seq(c, r->id, r->conv, 0, rc, &r->samp, r->max_tokens, MIN(r->pin_tokens, r->n_prompt));
	for (int i = 0; i < r->n_prompt; i++)
		seq_push_token(s, r->prompt[i]);
	s->n_prompt = r->n_prompt;
	waiting_insert(c, s, false);
	return 0;
reject:
	err_set(e, "%s", problem);
	for (int i = 0; i < MAX(1, r->n); i++) {
		core_event ev = {.kind = CORE_EV_FINISH, .req = r->id, .conv = r->conv, .index = i,
				 .step = c->st.steps, .token = -1, .text = problem,
				 .text_len = strlen(problem), .finish = FIN_ERROR,
				 .m = {.n_prompt = r->n_prompt}};
		if (c->emit)
			c->emit(c->emit_ctx, &ev);
	}
	return -1;
}

void core_cancel(core *c, int64_t id)
{
	for (int i = c->n_running - 1; i >= 0; i--)
		if (c->running[i]->req == id)
			finish_seq(c, c->running[i], FIN_CANCELLED, NULL);
	for (int i = c->n_waiting - 1; i >= 0; i--)
		if (c->waiting[i]->req == id)
			finish_seq(c, c->waiting[i], FIN_CANCELLED, NULL);
}

static seq *find_seq(core *c, int64_t id, int index)
{
	for (int i = 0; i < c->n_running; i++)
		if (c->running[i]->req == id && c->running[i]->index == index)
			return c->running[i];
	for (int i = 0; i < c->n_waiting; i++)
		if (c->waiting[i]->req == id && c->waiting[i]->index == index)
			return c->waiting[i];
	return NULL;
}

int core_fork(core *c, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	seq *src = find_seq(c, id, index);
	if (!src)
		return -1;
	/* the branch is a request of its own: it gets its own stop lists */
	seq *s = clone_seq(c, src, new_id, new_conv, 0, seed);
	req_common *rc = xcalloc(1, sizeof *rc);
	rc->refs = 1;
	rc->n_completions = 1;
	rc->spawned = true;
	rc->max_stop_len = src->common->max_stop_len;
	rc->n_stop_ids = src->common->n_stop_ids;
	if (rc->n_stop_ids) {
		rc->stop_ids = xmalloc((size_t)rc->n_stop_ids * sizeof *rc->stop_ids);
		memcpy(rc->stop_ids, src->common->stop_ids, (size_t)rc->n_stop_ids * sizeof *rc->stop_ids);
	}
	rc->n_stop_strs = src->common->n_stop_strs;
	rc->stop_strs = xcalloc((size_t)MAX(1, rc->n_stop_strs), sizeof *rc->stop_strs);
	for (int i = 0; i < rc->n_stop_strs; i++)
		rc->stop_strs[i] = xstrdup(src->common->stop_strs[i]);
	common_unref(s->common);
	s->common = rc;
	s->pin_tokens = 0;
	if (src->state == SEQ_RUNNING) {
		running_insert(c, index_of(c->running, c->n_running, src) + 1, s);
	} else {
		waiting_insert(c, s, false);
	}
	return 0;
}

/* ---- life cycle ---- */

core *core_new(const core_params *p, core_event_fn fn, void *ctx, err *e)
{
	const llama_hparams *hp = llama_hp(p->model);
	int bt = p->block_tokens > 0 ? p->block_tokens : 16;
	kv_pool_params pp = {
		.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim, .block_tokens = bt,
		.head_dim = hp->head_dim, .k_type = p->kv_type_k, .v_type = p->kv_type_v,
		.n_blocks = p->pool_blocks,
		.max_bytes = p->pool_blocks > 0 ? 0 : p->pool_bytes > 0 ? p->pool_bytes : 64ll << 20,
		.kern = llama_kern(p->model),
	};
	kv_pool *pool = kv_pool_new(&pp, e);
	if (!pool)
		return NULL;
	core *c = xcalloc(1, sizeof *c);
	c->model = p->model;
	c->tok = p->tok;
	c->emit = fn;
	c->emit_ctx = ctx;
	c->pool = pool;
	c->bt = bt;
	c->kv_type_k = p->kv_type_k;
	c->kv_type_v = p->kv_type_v;
	c->n_vocab = hp->n_vocab;
	c->n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
	c->step_tokens = MIN(p->step_tokens > 0 ? p->step_tokens : 512, llama_max_tokens(p->model));
	c->max_running = MIN(p->max_running > 0 ? p->max_running : 64, c->step_tokens);
	c->check = p->check;
	uint64_t model_id = (uint64_t)hp->n_vocab * 1000003u ^ (uint64_t)hp->dim << 20 ^
			    (uint64_t)hp->n_layers << 40 ^ (uint64_t)llama_n_params(p->model);
	c->prefix = kv_prefix_new(pool, model_id);
	if (spec_init(c, p, e)) {
		core_free(c);
		return NULL;
	}
	c->plan = xcalloc((size_t)c->max_running, sizeof *c->plan);
	size_t T = (size_t)c->step_tokens, S = (size_t)c->max_running;
	c->max_out = c->max_running + (c->sp ? SPEC_MAX_SEQS * SPEC_MAX_K : 0);
	c->b_tok = xmalloc(T * sizeof *c->b_tok);
	c->b_pos = xmalloc(T * sizeof *c->b_pos);
	c->b_seq = xmalloc(T * sizeof *c->b_seq);
	c->b_slot = xmalloc(T * sizeof *c->b_slot);
	c->b_out = xmalloc((size_t)c->max_out * sizeof *c->b_out);
	c->b_ntab = xmalloc(S * sizeof *c->b_ntab);
	c->b_tab = xmalloc(S * sizeof *c->b_tab);
	c->logits = xmalloc((size_t)c->max_out * (size_t)c->n_vocab * sizeof *c->logits);
	size_t nb = (size_t)kv_pool_n_blocks(pool);
	c->hits = xmalloc(nb * sizeof *c->hits);
	c->seen = xmalloc(nb);
	c->fill = xmalloc(nb * sizeof *c->fill);
	return c;
}

void core_free(core *c)
{
	if (!c)
		return;
	while (c->n_running > 0)
		seq_free(c, c->running[--c->n_running]);
	while (c->n_waiting > 0)
		seq_free(c, c->waiting[--c->n_waiting]);
	for (int i = 0; i < c->n_pins; i++)
		kv_pool_unref(c->pool, c->pins[i].block);
	spec_free(c);
	kv_prefix_free(c->prefix);
	kv_pool_free(c->pool);
	free(c->running); free(c->waiting); free(c->pins); free(c->plan);
	free(c->b_tok); free(c->b_pos); free(c->b_seq); free(c->b_slot); free(c->b_out);
	free(c->b_ntab); free(c->b_tab); free(c->logits); free(c->hits); free(c->seen); free(c->fill);
	free(c);
}

bool core_idle(const core *c)
{
	return c->n_running == 0 && c->n_waiting == 0;
}

int64_t core_n_blocks(const core *c)
{
	return kv_pool_n_blocks(c->pool);
}

/* ---- figures ---- */

void core_get_stats(const core *c, core_stats *out)
{
	*out = c->st;
	int64_t nb = kv_pool_n_blocks(c->pool);
	memset(c->seen, 0, (size_t)nb);
	memset(c->fill, 0, (size_t)nb * sizeof *c->fill);
	int64_t filled_per_seq = 0;
	for (int i = 0; i < c->n_running; i++) {
		const seq *s = c->running[i];
		filled_per_seq += s->n_computed;
		for (int j = 0; j < s->kv.n_blocks; j++) {
			int32_t b = s->kv.blocks[j];
			int f = (int)MIN((int64_t)c->bt, MAX(0, (int64_t)s->n_computed - (int64_t)j * c->bt));
			c->seen[b] = 1;
			c->fill[b] = MAX(c->fill[b], f);
		}
	}
	out->slots_alloc = out->slots_filled = 0;
	for (int64_t b = 0; b < nb; b++)
		if (c->seen[b]) {
			out->slots_alloc += c->bt;
			out->slots_filled += c->fill[b];
		}
	out->waste = out->slots_alloc ? 1.0 - (double)out->slots_filled / (double)out->slots_alloc : 0;
	double contig = (double)c->n_running * c->n_ctx;
	out->waste_contig = contig > 0 ? 1.0 - (double)filled_per_seq / contig : 0;
	out->n_running = c->n_running;
	out->n_waiting = c->n_waiting;
	out->blocks_total = nb;
	out->blocks_free = kv_pool_n_free(c->pool);
	out->blocks_used = nb - out->blocks_free;
	out->blocks_cached = kv_prefix_n_cached(c->prefix);
	out->blocks_shared = 0;
	for (int64_t b = 0; b < nb; b++)
		out->blocks_shared += kv_pool_refcount(c->pool, (int32_t)b) > 1;
	out->blocks_pinned = c->n_pins;
	const llama_hparams *hp = llama_hp(c->model);
	out->kv_type_k = c->kv_type_k;
	out->kv_type_v = c->kv_type_v;
	out->kv_vs_f16 = (double)llama_kv_token_bytes(hp, KV_F16, KV_F16) /
			 (double)llama_kv_token_bytes(hp, c->kv_type_k, c->kv_type_v);
}

void core_block_map(const core *c, core_block_info *map)
{
	int64_t nb = kv_pool_n_blocks(c->pool);
	for (int64_t b = 0; b < nb; b++) {
		int32_t rc = kv_pool_refcount(c->pool, (int32_t)b);
		map[b] = (core_block_info){
			.state = rc == 0 ? (kv_prefix_has_key(c->prefix, (int32_t)b) ? BLK_CACHED : BLK_FREE)
				: rc > 1 ? BLK_SHARED : BLK_USED,
			.conv = -1, .refcount = rc,
		};
	}
	for (int i = 0; i < c->n_pins; i++) {
		map[c->pins[i].block].state = BLK_PINNED;
		map[c->pins[i].block].conv = c->pins[i].conv;
	}
	for (int i = 0; i < c->n_running; i++) {
		const seq *s = c->running[i];
		for (int j = 0; j < s->kv.n_blocks; j++) {
			core_block_info *m = &map[s->kv.blocks[j]];
			if (m->conv < 0)
				m->conv = s->conv;
			bool partial = (int64_t)(j + 1) * c->bt > s->n_computed;
			if (partial && m->state == BLK_USED)
				m->state = BLK_PARTIAL;
		}
	}
}

bool core_check(const core *c, err *e)
{
	int n = c->n_running + c->n_waiting;
	const kv_seq **seqs = xmalloc((size_t)MAX(1, n) * sizeof *seqs);
	for (int i = 0; i < c->n_running; i++)
		seqs[i] = &c->running[i]->kv;
	for (int i = 0; i < c->n_waiting; i++)
		seqs[c->n_running + i] = &c->waiting[i]->kv;
	int64_t nb = kv_pool_n_blocks(c->pool);
	int32_t *extra = xcalloc((size_t)nb, sizeof *extra);
	for (int i = 0; i < c->n_pins; i++)
		extra[c->pins[i].block]++;
	bool ok = kv_pool_check(c->pool, seqs, n, extra, e) && kv_prefix_check(c->prefix, e) &&
		  (!c->sp || spec_check(c, e));
	for (int i = 0; ok && i < c->n_waiting; i++)
		if (c->waiting[i]->kv.n_blocks != 0 && c->waiting[i]->n_computed == 0) {
			err_set(e, "waiting request %lld holds blocks", (long long)c->waiting[i]->req);
			ok = false;
		}
	free(extra);
	free(seqs);
	return ok;
}
