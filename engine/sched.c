/* engine/sched.c: the scheduling policy (see sched.h). */
#include "engine/sched.h"

#include "base/base.h"

typedef struct planner {
	const sched_limits *lim;
	sched_plan *plan;
	int64_t free;            /* free blocks not yet promised to an item */
	int64_t free_w;          /* free W parts so (windows only) */
	int64_t reserve_w;       /* W parts the running sequences may still take to fill
	                            their spans (windows only) */
	bool head_short_w;       /* the waiting head stopped admission for want of W parts */
	int budget;              /* rows left */
	int n_drafting;
} planner;

int sched_win_span(int window, int block_tokens)
{
	return (window + block_tokens - 1) / block_tokens + 2;
}

/* Blocks the plan may still take: each takes a W part too with windows. */
static int64_t room(const planner *p)
{
	return p->lim->win_span ? MIN(p->free, p->free_w) : p->free;
}

int64_t sched_blocks_needed(const sched_seq *s, int block_tokens, int n)
{
	int64_t want = ((int64_t)s->n_computed + n + block_tokens - 1) / block_tokens;
	int64_t need = MAX((int64_t)0, want - s->n_blocks);
	if (s->shared_next && s->n_computed / block_tokens < s->n_blocks)
		need++;
	return need;
}

static void add_item(planner *p, int seq, bool admit, const sched_seq *s, int count, int n_draft)
{
	int64_t need = sched_blocks_needed(s, p->lim->block_tokens, count);
	p->free -= need;
	p->free_w -= need;
	p->budget -= count;
	p->n_drafting += n_draft > 0;
	p->plan->items[p->plan->n_items++] = (sched_item){seq, admit, count, n_draft};
}

static bool full(const planner *p)
{
	return p->budget <= 0 || p->plan->n_items == p->lim->max_items;
}

/* Draft tokens s verifies: what it wants, within the budget and the free
 * blocks (drafts never preempt anyone). */
static int drafts_for(const planner *p, const sched_seq *s)
{
	if (s->want_draft <= 0 || p->n_drafting >= p->lim->max_drafting)
		return 0;
	int k = MIN(s->want_draft, p->budget - 1);
	if (k <= 0 || sched_blocks_needed(s, p->lim->block_tokens, 1 + k) > room(p))
		return 0;
	return k;
}

/* Decodes, oldest first. False when the plan is a preemption or a failure. */
static bool plan_decodes(planner *p, const sched_seq *run, int n_run)
{
	for (int i = 0; i < n_run && !full(p); i++) {
		const sched_seq *s = &run[i];
		if (s->n_todo != 1)
			continue;
		int k = drafts_for(p, s);
		if (sched_blocks_needed(s, p->lim->block_tokens, 1 + k) > room(p)) {
			if (n_run == 1) {
				p->plan->fail_running = i;
				p->plan->short_w = p->free_w < p->free && p->lim->win_span;
			} else {
				p->plan->preempt = n_run - 1;
			}
			return false;
		}
		add_item(p, i, false, s, 1 + k, k);
	}
	return true;
}

/* The largest chunk (<= want) of s whose blocks (and their W parts) are free. */
static int fit_chunk(const planner *p, const sched_seq *s, int want)
{
	int bt = p->lim->block_tokens;
	int64_t blocks = s->n_blocks + room(p);
	if (s->shared_next && s->n_computed / bt < s->n_blocks)
		blocks--;
	int64_t room = blocks * bt - s->n_computed;
	return (int)MAX((int64_t)0, MIN((int64_t)want, room));
}

static void plan_prefills(planner *p, const sched_seq *run, int n_run)
{
	for (int i = 0; i < n_run && !full(p); i++) {
		const sched_seq *s = &run[i];
		if (s->n_todo <= 1)
			continue;
		int n = fit_chunk(p, s, MIN(s->n_todo, p->budget));
		if (n > 0)
			add_item(p, i, false, s, n, 0);
	}
}

static void plan_admissions(planner *p, const sched_seq *wait, int n_wait, int n_run)
{
	int bt = p->lim->block_tokens;
	for (int j = 0; j < n_wait && !full(p) && n_run + j < p->lim->max_running; j++) {
		const sched_seq *s = &wait[j];
		int64_t total = ((int64_t)s->n_computed + s->n_todo + bt - 1) / bt;
		/* hits in use by others cost nothing; cached ones leave the free list */
		if (total - (s->n_blocks - s->n_free_hits) > p->free)
			break;
		/* windows: one span of W parts (fewer for a short table), past
		 * what the running sequences may still take */
		int64_t span = MIN((int64_t)p->lim->win_span, total + 1);
		if (p->lim->win_span && p->free_w - p->reserve_w < span) {
			p->head_short_w = j == 0;
			break;
		}
		p->free -= s->n_free_hits;
		p->free_w -= s->n_wadmit;
		p->reserve_w += MAX((int64_t)0, span - s->n_wadmit);
		p->plan->n_admit++;
		int n = fit_chunk(p, s, MIN(s->n_todo, p->budget));
		if (n > 0)
			add_item(p, j, true, s, n, 0);
	}
}

/* Nothing was planned and the head of the queue waits: preempt a running
 * sequence that only holds blocks (outside the head's group), or fail the
 * head when nothing else could ever free them. */
static void unblock(const sched_seq *run, int n_run, const sched_seq *head, sched_plan *plan)
{
	int idle = -1;
	bool busy = false;
	for (int i = 0; i < n_run; i++) {
		if (run[i].n_todo > 0)
			busy = true;
		else if (head->group == 0 || run[i].group > head->group)
			idle = i; /* only younger groups yield, so two never take turns */
	}
	if (idle >= 0)
		plan->preempt = idle;
	else
		plan->fail_head = !busy;
}

/* Nothing was planned, yet running sequence stuck has tokens to compute:
 * what it waits for is held by the others (preempt the newest), or by
 * nobody that will give it back (fail it when alone). */
static void unstick(const planner *p, int n_run, int stuck)
{
	if (n_run > 1) {
		p->plan->preempt = n_run - 1;
		return;
	}
	p->plan->fail_running = stuck;
	p->plan->short_w = p->lim->win_span && p->free_w < p->free;
}

/* What the running sequences may still take to fill their spans of W parts. */
static int64_t span_reserve(const sched_limits *lim, const sched_seq *run, int n_run)
{
	int64_t r = 0;
	for (int i = 0; lim->win_span && i < n_run; i++)
		r += MAX(0, lim->win_span - run[i].n_wheld);
	return r;
}

void sched_plan_step(const sched_seq *running, int n_running, const sched_seq *waiting, int n_waiting,
		     const sched_limits *lim, sched_plan *plan)
{
	plan->n_items = plan->n_admit = 0;
	plan->preempt = plan->fail_running = -1;
	plan->fail_head = plan->short_w = false;
	planner p = {.lim = lim, .plan = plan, .free = lim->free_blocks, .budget = lim->token_budget,
		     .free_w = lim->win_span ? lim->free_w : lim->free_blocks,
		     .reserve_w = span_reserve(lim, running, n_running)};
	if (plan_decodes(&p, running, n_running)) {
		plan_prefills(&p, running, n_running);
		plan_admissions(&p, waiting, n_waiting, n_running);
		int stuck = -1;
		for (int i = 0; i < n_running && stuck < 0 && plan->n_items == 0; i++)
			if (running[i].n_todo > 0 && p.budget > 0 && lim->max_items > 0)
				stuck = i;
		if (stuck >= 0)
			unstick(&p, n_running, stuck);
		else if (plan->n_items == 0 && n_waiting > 0)
			unblock(running, n_running, &waiting[0], plan);
		plan->short_w |= plan->fail_head && p.head_short_w;
	} else {
		plan->n_items = 0;
	}
	plan->free_after = p.free;
	plan->free_w_after = p.free_w;
}
