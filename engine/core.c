/* engine/core.c: requests, carrying out the scheduler's plan, and the step.
 *
 * A sequence's tokens[] holds the prompt and everything sampled so far;
 * n_computed of them have their K/V in the pool. Every step feeds a sequence
 * tokens[n_computed .. n_computed + count): a decode is count 1, a prefill
 * chunk is larger, and a preempted sequence simply recomputes from 0. When a
 * step's rows reach the end of tokens[], that row's logits give the next
 * token. core_step reads as the design says: describe the sequences, let the
 * policy (engine/sched.c) plan, carry the plan out (preempt, admit, make
 * room), run the batch, postprocess (engine/core_post.c). */
#include "engine/core.h"

#include "engine/core_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a user makes the pool larger, named in every message that says it is
 * too small (the flags of chat, generate, batch and serve, and the config). */
#define POOL_FLAGS "--pool-blocks N or --pool-mib N, kv_cache.pool_blocks in the config"

const char *core_finish_name(enum core_finish f)
{
	static const char *const names[] = {"stop", "length", "context", "cancelled", "error"};
	return (unsigned)f < ARRAY_LEN(names) ? names[f] : "?";
}

/* ---- the policy's view of the sequences ---- */

static sched_seq describe_running(const core *c, const seq *s)
{
	int first = s->n_computed / c->bt;
	return (sched_seq){
		.n_todo = s->n_tokens - s->n_computed, .n_computed = s->n_computed, .n_blocks = s->kv.n_blocks,
		.shared_next = first < s->kv.n_blocks && kv_pool_refcount(c->pool, s->kv.blocks[first]) > 1,
		.want_draft = c->sp && !c->probing && !beam_group_of(s) && s->n_tokens - s->n_computed == 1
			      ? spec_want(c, s) : 0,
		.group = beam_group_of(s), .n_wheld = s->kv.n_blocks - s->kv.w_lo,
	};
}

/* A waiting sequence as it would be admitted now. */
static sched_seq describe_waiting(core *c, seq *s)
{
	found f = tier_look_kept(c, s);
	int64_t entries = f.hits + f.from_free;
	return (sched_seq){
		.n_todo = s->n_tokens - f.computed, .n_computed = f.computed,
		.n_blocks = f.hits + f.from_free, .n_free_hits = f.free_hits + f.from_free,
		.group = beam_group_of(s),
		.n_wadmit = (int)(entries - MIN(entries, kv_pool_window_first(c->pool, f.computed))),
	};
}

/* Whether one of l's first n sequences is in beam group g. */
static bool group_in(const seq_list *l, int n, int g)
{
	for (int i = 0; i < n; i++)
		if (beam_group_of(l->v[i]) == g)
			return true;
	return false;
}

/* The running places sequence i of list l holds: a request's first
 * completion, before its siblings spawn (at its first sample, straight into
 * running), one for each of them; a beam request its width, counted at its
 * first sequence (running before waiting), as its beams fork in running. */
static int places(const core *c, const seq_list *l, int i)
{
	const seq *s = l->v[i];
	int g = beam_group_of(s);
	if (g > 0)
		return group_in(l, i, g) || (l == &c->waiting && group_in(&c->running, c->running.n, g))
			       ? 0 : beam_width_of(s);
	const req_common *rc = s->common;
	return rc && s->index == 0 && !rc->spawned && rc->n_completions > 1 ? rc->n_completions : 1;
}

static int running_places(const core *c)
{
	int n = 0;
	for (int i = 0; i < c->running.n; i++)
		n += places(c, &c->running, i);
	return n;
}

static void make_plan(core *c, sched_plan *plan)
{
	for (int i = 0; i < c->running.n; i++)
		c->d_run[i] = describe_running(c, c->running.v[i]);
	int free_places = c->max_running - running_places(c);
	/* only the head of the queue can be admitted this step, as far as its
	 * places (siblings to come included) fit under max_running */
	int n_wait = 0;
	while (n_wait < MIN(c->waiting.n, c->step_tokens) && places(c, &c->waiting, n_wait) <= free_places) {
		free_places -= places(c, &c->waiting, n_wait);
		c->d_wait[n_wait] = describe_waiting(c, c->waiting.v[n_wait]);
		n_wait++;
	}
	sched_limits lim = {
		.block_tokens = c->bt, .free_blocks = kv_pool_n_free_blocks(c->pool),
		.free_w = kv_pool_n_free_w(c->pool), .win_span = c->win_span, .token_budget = c->step_tokens,
		.max_items = c->max_running, .max_running = c->max_running, .max_drafting = SPEC_MAX_SEQS,
	};
	plan->items = c->items;
	sched_plan_step(c->d_run, c->running.n, c->d_wait, MAX(n_wait, 0), &lim, plan);
}

/* The chained key of s's block n - 1 (the root for n = 0). */
static uint64_t chain_key(const core *c, const seq *s, int n)
{
	uint64_t key = kv_prefix_root(c->prefix);
	for (int b = 0; b < n; b++)
		key = kv_prefix_chain_key(c->prefix, key, b, s->tokens + (size_t)b * c->bt, &s->chain);
	return key;
}

/* ---- carrying the plan out ---- */

/* Sends s back to the head of the queue, to be recomputed. */
static void preempt(core *c, seq *s)
{
	seqs_remove(&c->running, seqs_index(&c->running, s));
	tier_preempt(c, s);
	kv_seq_release(c->pool, &s->kv);
	spec_release(c, s);
	beam_preempted(s);
	s->n_computed = 0;
	s->n_keyed = 0;
	s->last_key = kv_prefix_root(c->prefix);
	s->n_preempt++;
	c->st.preemptions++;
	s->state = SEQ_WAITING;
	seqs_insert(&c->waiting, 0, s);
}

/* The W parts a sequence needs and the pool has, said as room for blocks
 * in the windowed layers. */
static void w_short_msg(const core *c, char *msg, size_t cap, const char *who)
{
	snprintf(msg, cap, "KV pool: %s sliding window (%d tokens) needs room for %d blocks in the windowed "
		 "layers but the pool has room for %lld (enlarge the pool: " POOL_FLAGS ")", who,
		 kv_pool_window(c->pool), c->win_span, (long long)kv_pool_n_wparts(c->pool));
}

static void fail_alone(core *c, seq *s, bool short_w)
{
	char msg[400];
	int n = s->n_computed + 1;
	if (short_w) {
		w_short_msg(c, msg, sizeof msg, "this sequence's");
		finish_seq(c, s, FIN_ERROR, msg);
		return;
	}
	snprintf(msg, sizeof msg, "KV pool full: this sequence's %d tokens need %lld blocks of %d but the pool "
		 "has %lld (enlarge the pool: " POOL_FLAGS "; or shorten the chat)", n, (long long)(((int64_t)n + c->bt - 1) / c->bt),
		 c->bt, (long long)kv_pool_n_blocks(c->pool));
	finish_seq(c, s, FIN_ERROR, msg);
}

static void fail_head(core *c, bool short_w)
{
	seq *s = c->waiting.v[0];
	char msg[400];
	int64_t own = ((int64_t)s->n_tokens + c->bt - 1) / c->bt;
	if (short_w && beam_group_of(s))
		snprintf(msg, sizeof msg, "beam search: %d beams past the sliding window (%d tokens) need room for %d "
			 "blocks each in the windowed layers but the pool has room for %lld: enlarge the pool ("
			 POOL_FLAGS ") or use fewer beams", beam_width_of(s), kv_pool_window(c->pool), c->win_span,
			 (long long)kv_pool_n_wparts(c->pool));
	else if (short_w)
		w_short_msg(c, msg, sizeof msg, "the request's");
	else if (beam_group_of(s))
		snprintf(msg, sizeof msg, "beam search: %d beams of %d tokens need up to %lld KV blocks of %d at "
			 "once but the pool has %lld: enlarge the pool (" POOL_FLAGS ") or use fewer beams", beam_width_of(s),
			 s->n_tokens, (long long)(own * beam_width_of(s)), c->bt, (long long)kv_pool_n_blocks(c->pool));
	else
		snprintf(msg, sizeof msg, "needs %lld KV blocks but only %lld can be freed (%d are pinned for "
		 "conversations' system prompts): close a tab or enlarge the pool (" POOL_FLAGS ")",
		 (long long)own, (long long)kv_pool_n_free_blocks(c->pool),
		 c->n_pins);
	finish_seq(c, s, FIN_ERROR, msg);
}

/* Admits the head of the queue, taking its prefix hits; false when its
 * blocks no longer fit (the cache changed since the plan). */
static bool admit_head(core *c)
{
	seq *s = c->waiting.v[0];
	found f = tier_look(c, s);
	int64_t total = ((int64_t)s->n_tokens + c->bt - 1) / c->bt, need = total - (f.hits - f.free_hits);
	if (need > kv_pool_n_free_blocks(c->pool) || (c->win_span && MIN(c->win_span, total + 1) >
							kv_pool_n_free_w(c->pool)))
		return false;
	for (int i = 0; i < f.hits; i++) {
		kv_prefix_take(c->prefix, c->hits[i]);
		kv_seq_push(c->pool, &s->kv, c->hits[i]);
	}
	/* the hits' W parts no window will reach go back before any block is
	 * taken, so admission holds one span of them at most */
	kv_seq_window_release(c->pool, &s->kv, (int64_t)f.hits * c->bt);
	int lower = f.lower ? tier_take(c, s, f.lower) : 0, got = f.hits + lower;
	s->n_keyed = got;
	s->last_key = lower ? c->lower[lower - 1] : f.swap ? chain_key(c, s, f.hits) : f.last_key;
	s->n_computed = got * c->bt;
	tier_swap_back(c, s, &f, got);
	s->kv.n_tokens = s->n_computed;
	kv_seq_window_release(c->pool, &s->kv, s->n_computed);
	int hits = got;
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
	seqs_remove(&c->waiting, 0);
	s->state = SEQ_RUNNING;
	seqs_insert(&c->running, c->running.n, s);
	return true;
}

/* Gives s room to write count tokens from n_computed (copy-on-write of a
 * shared block first) and adds it to the step's plan. */
static void run_item(core *c, seq *s, int count, int n_draft)
{
	int64_t i = s->n_computed / c->bt;
	int32_t before = i < s->kv.n_blocks ? s->kv.blocks[i] : -1;
	int rc = kv_seq_own(c->pool, &s->kv, s->n_computed);
	if (before >= 0 && s->kv.blocks[i] != before) { /* a copy on write: counted, shown */
		c->st.cow_copies++;
		c->cow_step[s->kv.blocks[i]] = (uint32_t)c->st.steps + 1;
	}
	rc |= kv_seq_reserve(c->pool, &s->kv, (int64_t)s->n_computed + count);
	assert(rc == 0 && "the plan promised these blocks");
	(void)rc;
	c->plan[c->n_plan++] = (step_item){s, s->n_computed, count, n_draft, NULL, 0, 0};
	if (s->t_sched == 0) {
		s->t_sched = now_s();
		core_hist_add(&c->st.queue, s->t_sched - s->t_submit);
	}
}

static void schedule(core *c)
{
	sched_plan plan;
	c->n_plan = 0;
	for (;;) {
		make_plan(c, &plan);
		if (plan.preempt >= 0)
			preempt(c, c->running.v[plan.preempt]);
		else if (plan.fail_running >= 0)
			fail_alone(c, c->running.v[plan.fail_running], plan.short_w);
		else
			break;
	}
	/* items of running sequences come first: their indices stay valid, as
	 * admissions only append to the running list */
	int admitted = 0;
	for (int i = 0; i < plan.n_items; i++) {
		const sched_item *it = &plan.items[i];
		if (!it->admit) {
			run_item(c, c->running.v[it->seq], it->count, it->n_draft);
			continue;
		}
		for (; admitted <= it->seq; admitted++)
			if (!admit_head(c))
				return;
		seq *s = c->running.v[c->running.n - 1];
		run_item(c, s, MIN(it->count, s->n_tokens - s->n_computed), 0);
	}
	for (; admitted < plan.n_admit; admitted++)
		if (!admit_head(c))
			return;
	if (plan.fail_head)
		fail_head(c, plan.short_w);
}

/* ---- the step ---- */

static void build_batch(core *c)
{
	for (int p = 0; p < c->n_plan; p++) {
		step_item *it = &c->plan[p];
		seq *s = it->s;
		/* logits for every verified position, or for a chunk's last row */
		bool ends = it->start + it->count == s->n_tokens + it->n_draft;
		int n_out = ends ? it->n_draft + 1 : 0;
		it->out = runner_add(c->run, &s->kv, it->start, s->tokens + it->start, it->count,
				     it->count - n_out, n_out);
		it->n_out = n_out;
	}
}

/* The first logits row of item it that is not finite, or -1. */
static int bad_row(const core *c, const step_item *it, err *e)
{
	for (int j = 0; j < it->n_out; j++) {
		int64_t pos = it->start + it->count - it->n_out + j;
		if (!samp_check_logits(runner_logits(c->run, it->out + j), c->n_vocab, pos, e))
			return j;
	}
	return -1;
}

/* Ends the requests whose logits are not finite (a damaged model) before
 * anything samples from them; their items leave the plan first (a beam's
 * whole group goes, and with it every item of the group). */
static void drop_nonfinite(core *c)
{
	for (int p = 0; p < c->n_plan; p++) {
		err e = {0};
		if (bad_row(c, &c->plan[p], &e) < 0)
			continue;
		seq *s = c->plan[p].s;
		int k = 0, g = beam_group_of(s);
		for (int q = 0; q < c->n_plan; q++) {
			seq *o = c->plan[q].s;
			if (o != s && !(g && beam_group_of(o) == g))
				c->plan[k++] = c->plan[q];
		}
		c->n_plan = k;
		finish_seq(c, s, FIN_ERROR, e.msg);
		p = -1; /* the plan changed: look again from the start */
	}
}

/* A probe (a decode step without the draft) is due, and this step will only
 * decode: nothing waits, every running sequence is at its last token. */
static bool probe_now(const core *c)
{
	if (!c->sp || c->draft_probe <= 0 || c->probe_in > 0 || c->waiting.n > 0)
		return false;
	for (int i = 0; i < c->running.n; i++)
		if (c->running.v[i]->n_tokens - c->running.v[i]->n_computed != 1)
			return false;
	return true;
}

int core_step(core *c, err *e)
{
	double t0 = now_s();
	int64_t gen0 = c->st.generated_tokens;
	c->probing = probe_now(c);
	schedule(c);
	if (c->n_plan == 0)
		return 0;
	if (c->sp && !c->probing)
		spec_propose(c);
	enum step_kind kind = c->sp ? step_kind(c) : STEP_MIXED;
	build_batch(c);
	int n_rows = runner_rows(c->run);
	c->st.steps++;
	if (runner_run(c->run, e)) {
		while (c->running.n > 0)
			finish_seq(c, c->running.v[0], FIN_ERROR, e->msg);
		return -1;
	}
	drop_nonfinite(c);
	post_step(c);
	c->st.busy_s += now_s() - t0;
	if (c->sp)
		stats_decode_step(c, kind, t0, gen0);
	if (c->check && !core_check(c, e))
		return -1;
	return n_rows;
}

/* ---- requests ---- */

static const char *request_problem(const core *c, const core_request *r, char *buf, size_t cap)
{
	int64_t blocks = ((int64_t)r->n_prompt + 1 + c->bt - 1) / c->bt;
	for (int i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= c->n_vocab) {
			snprintf(buf, cap, "prompt token %d is out of range (vocab %d)", r->prompt[i], c->n_vocab);
			return buf;
		}
	if (r->n_prompt <= 0)
		snprintf(buf, cap, "empty prompt: nothing to continue");
	else if (r->n_prompt >= c->n_ctx)
		snprintf(buf, cap, "prompt is %d tokens but the context holds %d: shorten it or raise the "
			 "context size", r->n_prompt, c->n_ctx);
	else if (blocks > kv_pool_n_blocks(c->pool))
		snprintf(buf, cap, "prompt needs %lld KV blocks but the pool has %lld: enlarge the pool (" POOL_FLAGS ")",
			 (long long)blocks, (long long)kv_pool_n_blocks(c->pool));
	else if (r->n < 1 || r->n > MIN(64, c->max_running))
		snprintf(buf, cap, "n = %d completions (must be 1..%d: the engine runs %d sequences at once)", r->n,
			 MIN(64, c->max_running), c->max_running);
	else if (r->beams < 0 || r->beams > MIN(BEAM_MAX_WIDTH, c->max_running))
		snprintf(buf, cap, "beams = %d (must be 1..%d, or 0 for sampling: the engine runs %d sequences at "
			 "once)", r->beams, MIN(BEAM_MAX_WIDTH, c->max_running), c->max_running);
	else if (r->beams > 0 && (int64_t)r->beams * ((r->n_prompt + c->bt) / c->bt + 1) > kv_pool_n_blocks(c->pool))
		snprintf(buf, cap, "%d beams need about %lld KV blocks but the pool has %lld: enlarge the pool "
			 "(" POOL_FLAGS ") or use fewer beams", r->beams, (long long)r->beams * ((r->n_prompt + c->bt) / c->bt + 1),
			 (long long)kv_pool_n_blocks(c->pool));
	else if (r->prefill_only && (r->n != 1 || r->beams > 0))
		snprintf(buf, cap, "a prefill-only request computes one prompt: n = 1 and no beams (got n = %d, beams "
			 "= %d)", r->n, r->beams);
	else
		return NULL;
	return buf;
}

/* A warm-up whose whole prompt sits in the prefix cache in full blocks (a
 * tab opened on a system prompt another tab computed) takes and pins those
 * blocks and ends at once: true when done. Otherwise the lookup leaves the
 * last token to compute (kv/prefix.h), the block holding it would be
 * computed again and its figures would say nothing was reused. Not with
 * sliding windows (a pinned block there needs its W part: admission's
 * rules) nor a shift. */
static bool prefill_cached(core *c, const core_request *r)
{
	if (!r->prefill_only || c->win_span || r->shift.n_old > 0 || r->n_prompt % c->bt ||
	    r->pin_tokens < r->n_prompt)
		return false;
	kv_chain ch = {r->salt, r->salt_block};
	int free_hits;
	uint64_t key;
	int hits = kv_prefix_lookup_chain(c->prefix, r->prompt, (int64_t)r->n_prompt + 1, &ch, c->hits, &free_hits,
					  &key);
	if ((int64_t)hits * c->bt != r->n_prompt)
		return false;
	for (int j = 0; j < hits; j++) {
		kv_prefix_take(c->prefix, c->hits[j]); /* off the free list, or one more holder */
		pin_block(c, r->conv, c->hits[j]);
		kv_pool_unref(c->pool, c->hits[j]); /* the pin's reference stays */
	}
	c->st.prompt_tokens += r->n_prompt;
	c->st.cached_tokens += r->n_prompt;
	core_event ev = {.kind = CORE_EV_FINISH, .req = r->id, .conv = r->conv, .step = c->st.steps, .token = -1,
			 .text = "", .finish = FIN_STOP, .m = {.n_prompt = r->n_prompt, .n_cached = r->n_prompt}};
	if (c->emit)
		c->emit(c->emit_ctx, &ev);
	return true;
}

int core_submit(core *c, const core_request *r, err *e)
{
	char problem[256];
	if (request_problem(c, r, problem, sizeof problem)) {
		err_set(e, "%s", problem);
		/* one FINISH per completion the front-end waits for: per beam for a
		 * beam request (its n is 1), else n */
		int n_fin = MAX(1, MIN(r->beams > 0 ? r->beams : r->n, 4096));
		for (int i = 0; i < n_fin; i++) {
			core_event ev = {.kind = CORE_EV_FINISH, .req = r->id, .conv = r->conv, .index = i,
					 .step = c->st.steps, .token = -1, .text = problem,
					 .text_len = strlen(problem), .finish = FIN_ERROR,
					 .m = {.n_prompt = r->n_prompt}};
			if (c->emit)
				c->emit(c->emit_ctx, &ev);
		}
		return -1;
	}
	if (prefill_cached(c, r))
		return 0;
	int n_shifted = r->shift.n_old > 0 ? shift_materialize(c, r) : 0;
	req_common *rc = common_new(r);
	seq *s = seq_new(c, r->id, r->conv, 0, rc, &r->samp, r->max_tokens, MIN(r->pin_tokens, r->n_prompt));
	s->chain = (kv_chain){r->salt, r->salt_block};
	s->n_shifted = n_shifted;
	seq_reserve_tokens(s, r->n_prompt);
	memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
	s->n_tokens = s->n_prompt = r->n_prompt;
	tier_probe(c, s);
	if (r->beams > 0)
		beam_start(c, s, r->beams, r->length_penalty);
	s->state = SEQ_WAITING;
	seqs_insert(&c->waiting, c->waiting.n, s);
	return 0;
}

/* Any sequence of request id, or NULL. */
static seq *any_of(core *c, int64_t id)
{
	for (int l = 0; l < 2; l++) {
		const seq_list *list = l ? &c->waiting : &c->running;
		for (int i = list->n - 1; i >= 0; i--)
			if (list->v[i]->req == id)
				return list->v[i];
	}
	return NULL;
}

void core_cancel(core *c, int64_t id)
{
	seq *s;
	while ((s = any_of(c, id)))
		finish_seq(c, s, FIN_CANCELLED, NULL);
}

static seq *find_seq(core *c, int64_t id, int index)
{
	for (int i = 0; i < c->running.n; i++)
		if (c->running.v[i]->req == id && c->running.v[i]->index == index)
			return c->running.v[i];
	for (int i = 0; i < c->waiting.n; i++)
		if (c->waiting.v[i]->req == id && c->waiting.v[i]->index == index)
			return c->waiting.v[i];
	return NULL;
}

int core_fork(core *c, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	seq *src = find_seq(c, id, index);
	if (!src)
		return -1;
	if (src->state == SEQ_RUNNING && running_places(c) >= c->max_running)
		return -2;
	/* the branch is a request of its own: it gets its own stop lists */
	seq *s = seq_clone(c, src, new_id, new_conv, 0, seed);
	common_unref(s->common);
	s->common = common_copy(src->common);
	s->pin_tokens = 0;
	s->state = src->state;
	if (src->state == SEQ_RUNNING)
		seqs_insert(&c->running, seqs_index(&c->running, src) + 1, s);
	else
		seqs_insert(&c->waiting, c->waiting.n, s);
	return 0;
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

/* ---- life cycle ---- */

/* Sliding windows: how many W parts (rooms for a block in the windowed
 * layers) the pool gets beside its blocks. A running sequence holds at most
 * a span of them (its window and a block crossing, sched_win_span) plus its
 * share of the step's chunk: R sequences hold R * (span + 1) +
 * ceil(step_tokens / bt) (the + 1 for a copy-on-write). The rule: that for
 * R = max_running, and a quarter more so that finished conversations keep
 * their windows in the cache; at most half the blocks the pool would have
 * without windows (so conversations shorter than the window, whose every
 * block needs its W part, keep at least half their room), but at least one
 * sequence's need; 0 (one per block: no saving) when that is not below the
 * blocks. With a byte budget the blocks then get what the W parts leave
 * (kv_pool_params.w_blocks), several times more for Gemma 3's 5-of-6
 * windowed layers; with pool_blocks the blocks stay and the bytes shrink. */
static int64_t window_parts(const core_params *p, const llama_hparams *hp, int bt, int step, int max_running,
			    int64_t max_bytes)
{
	if (hp->swa_window <= 0 || hp->n_swa_layers == 0)
		return 0;
	if (p->pool_wparts)
		return p->pool_wparts;
	int64_t blocks = p->pool_blocks > 0 ? p->pool_blocks
			 : max_bytes / (bt * llama_kv_token_bytes(hp, p->kv_type_k, p->kv_type_v));
	int64_t per = sched_win_span(hp->swa_window, bt) + 1, chunk = (step + bt - 1) / bt;
	int64_t want = max_running * per + chunk;
	want += want / 4;
	int64_t w = MIN(want, MAX(per + chunk, blocks / 2));
	return w < blocks ? w : 0;
}

static kv_pool *make_pool(const core_params *p, int bt, int step, int max_running, err *e)
{
	const llama_hparams *hp = llama_hp(p->model);
	int64_t max_bytes = p->pool_blocks > 0 ? 0 : p->pool_bytes > 0 ? p->pool_bytes : 64ll << 20;
	kv_pool_params pp = {
		.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim, .block_tokens = bt,
		.head_dim = hp->head_dim, .k_type = p->kv_type_k, .v_type = p->kv_type_v,
		.n_blocks = p->pool_blocks, .max_bytes = max_bytes,
		.kern = llama_kern(p->model), .host_layers = llama_host_layers(p->model),
		.win_layers = hp->swa_layer, .window = hp->swa_window,
		.w_blocks = window_parts(p, hp, bt, step, max_running, max_bytes),
	};
	return kv_pool_new(&pp, e);
}

/* The step's scratch, sized once (the runner's batch and logits included). */
static int make_scratch(core *c, err *e)
{
	size_t S = (size_t)c->max_running, nb = (size_t)kv_pool_n_blocks(c->pool);
	runner_params rp = {
		.model = c->model, .pool = c->pool, .max_rows = c->step_tokens, .max_seqs = c->max_running,
		.max_out = c->max_running + (c->sp ? SPEC_MAX_SEQS * SPEC_MAX_K : 0),
	};
	if (!(c->run = runner_new(&rp, e)))
		return -1;
	c->plan = xcalloc(S, sizeof *c->plan);
	c->d_run = xcalloc(S, sizeof *c->d_run);
	c->d_wait = xcalloc(S, sizeof *c->d_wait);
	c->items = xcalloc(S, sizeof *c->items);
	c->hits = xmalloc(nb * sizeof *c->hits);
	c->seen = xmalloc(nb);
	c->fill = xmalloc(nb * sizeof *c->fill);
	return 0;
}

core *core_new(const core_params *p, core_event_fn fn, void *ctx, err *e)
{
	const llama_hparams *hp = llama_hp(p->model);
	int bt = p->block_tokens > 0 ? p->block_tokens : 16;
	int step = MIN(p->step_tokens > 0 ? p->step_tokens : 512, llama_max_tokens(p->model));
	int max_running = MIN(p->max_running > 0 ? p->max_running : 64, step);
	kv_pool *pool = make_pool(p, bt, step, max_running, e);
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
	c->step_tokens = step;
	c->max_running = max_running;
	c->win_span = kv_pool_window(pool) ? sched_win_span(kv_pool_window(pool), bt) : 0;
	c->check = p->check;
	c->draft_probe = p->draft_probe;
	uint64_t model_id = (uint64_t)hp->n_vocab * 1000003u ^ (uint64_t)hp->dim << 20 ^
			    (uint64_t)hp->n_layers << 40 ^ (uint64_t)llama_n_params(p->model);
	c->prefix = kv_prefix_new(pool, model_id);
	if (tier_init(c, p, e) || spec_init(c, p, e) || make_scratch(c, e)) {
		core_free(c);
		return NULL;
	}
	return c;
}

void core_free(core *c)
{
	if (!c)
		return;
	for (int l = 0; l < 2; l++) {
		seq_list *list = l ? &c->waiting : &c->running;
		while (list->n > 0) {
			seq *s = list->v[--list->n];
			beam_release(s);
			spec_release(c, s);
			tier_swap_release(c, s);
			seq_free(c, s);
		}
	}
	for (int i = 0; i < c->n_pins; i++)
		kv_pool_unref(c->pool, c->pins[i].block);
	spec_free(c);
	runner_free(c->run);
	tier_free(c);
	kv_prefix_free(c->prefix);
	kv_pool_free(c->pool);
	free(c->running.v); free(c->waiting.v); free(c->pins); free(c->plan);
	free(c->d_run); free(c->d_wait); free(c->items);
	free(c->hits); free(c->seen); free(c->fill);
	free(c);
}
