/* tests/test_sched.c: the scheduling policy (engine/sched.h) on synthetic
 * sequences, without a model or a pool: decodes first, the token budget,
 * admission only when blocks fit and in queue order, copy-on-write blocks,
 * drafts that never preempt, the preemption order, failures that would
 * otherwise hang, and a simulated engine in which every request finishes
 * (no starvation) while the free-block count never goes negative.
 * Sliding windows: W parts as a second resource (chunks shrink to them,
 * admission asks one window's span, not the prompt's, decodes short of them
 * preempt, a stuck prefill preempts or fails with short_w), and the
 * simulation again with W parts released as windows pass. */
#include "base/base.h"
#include "engine/sched.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define BT 16

static sched_item items[64];

static sched_limits limits(int64_t free_blocks, int budget)
{
	return (sched_limits){.block_tokens = BT, .free_blocks = free_blocks, .token_budget = budget,
			      .max_items = 64, .max_running = 64, .max_drafting = 32};
}

static sched_seq running_seq(int computed, int todo, int n_blocks)
{
	return (sched_seq){.n_todo = todo, .n_computed = computed, .n_blocks = n_blocks};
}

static sched_plan plan_of(const sched_seq *run, int n_run, const sched_seq *wait, int n_wait,
			  sched_limits lim)
{
	sched_plan p = {.items = items};
	sched_plan_step(run, n_run, wait, n_wait, &lim, &p);
	return p;
}

static void test_blocks_needed(void)
{
	sched_seq s = running_seq(16, 1, 1);       /* block 0 full: the next token opens block 1 */
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 1), 1);
	s = running_seq(17, 1, 2);                 /* inside block 1, already held */
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 1), 0);
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 15), 0);
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 16), 1);
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 40), 2);
	s.shared_next = true;                      /* block 1 is shared: copied first */
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 1), 1);
	s = (sched_seq){.n_todo = 100, .n_computed = 32, .n_blocks = 2, .shared_next = true};
	/* the shared flag only costs when the written block is in the table */
	CHECK_EQ_INT(sched_blocks_needed(&s, BT, 1), 1);
}

static void test_decodes_first(void)
{
	sched_seq run[3] = {running_seq(0, 200, 0), running_seq(20, 1, 2), running_seq(40, 1, 3)};
	sched_plan p = plan_of(run, 3, NULL, 0, limits(100, 64));
	CHECK_EQ_INT(p.n_items, 3);
	CHECK_EQ_INT(p.items[0].seq, 1);
	CHECK_EQ_INT(p.items[0].count, 1);
	CHECK_EQ_INT(p.items[1].seq, 2);
	CHECK_EQ_INT(p.items[2].seq, 0);
	CHECK_EQ_INT(p.items[2].count, 62);        /* the rest of the budget */
	CHECK_EQ_INT(p.preempt, -1);
	CHECK_EQ_INT(p.fail_running, -1);
}

static void test_budget(void)
{
	sched_seq run[3] = {running_seq(0, 100, 0), running_seq(0, 100, 0), running_seq(5, 1, 1)};
	sched_plan p = plan_of(run, 3, NULL, 0, limits(100, 130));
	int total = 0;
	for (int i = 0; i < p.n_items; i++)
		total += p.items[i].count;
	CHECK_EQ_INT(total, 130);
	CHECK_EQ_INT(p.n_items, 3);
	CHECK_EQ_INT(p.items[1].count, 100);
	CHECK_EQ_INT(p.items[2].count, 29);
	/* max_items caps the sequences per step */
	sched_limits lim = limits(100, 512);
	lim.max_items = 2;
	p = plan_of(run, 3, NULL, 0, lim);
	CHECK_EQ_INT(p.n_items, 2);
	CHECK_EQ_INT(p.items[0].seq, 2);
}

static void test_chunk_fits_blocks(void)
{
	/* 3 free blocks: a 100-token prefill gets 48 tokens */
	sched_seq run[1] = {running_seq(0, 100, 0)};
	sched_plan p = plan_of(run, 1, NULL, 0, limits(3, 512));
	CHECK_EQ_INT(p.n_items, 1);
	CHECK_EQ_INT(p.items[0].count, 48);
	CHECK_EQ_INT(p.free_after, 0);
	/* inside a held block the chunk may end anywhere */
	run[0] = running_seq(10, 100, 1);
	p = plan_of(run, 1, NULL, 0, limits(1, 512));
	CHECK_EQ_INT(p.items[0].count, 22);
	/* no free block at all: nothing could ever give one to a prefill that
	 * is alone (it fails, with the blocks named), and with two the newest
	 * yields, instead of a step that plans nothing forever */
	run[0] = running_seq(16, 100, 1);
	p = plan_of(run, 1, NULL, 0, limits(0, 512));
	CHECK_EQ_INT(p.n_items, 0);
	CHECK_EQ_INT(p.preempt, -1);
	CHECK_EQ_INT(p.fail_running, 0);
	CHECK(!p.short_w);
	CHECK(!p.fail_head);
	sched_seq two[2] = {running_seq(16, 100, 1), running_seq(32, 100, 2)};
	p = plan_of(two, 2, NULL, 0, limits(0, 512));
	CHECK_EQ_INT(p.preempt, 1);
	CHECK_EQ_INT(p.fail_running, -1);
}

static void test_admission(void)
{
	sched_seq wait[3] = {
		{.n_todo = 150, .n_computed = 0, .n_blocks = 0},         /* 10 blocks */
		{.n_todo = 10, .n_computed = 64, .n_blocks = 4},         /* hits in use: 1 more */
		{.n_todo = 10, .n_computed = 64, .n_blocks = 4, .n_free_hits = 4}, /* 5 */
	};
	sched_plan p = plan_of(NULL, 0, wait, 3, limits(9, 512));
	CHECK_EQ_INT(p.n_admit, 0);                /* the head does not fit: nobody overtakes it */
	CHECK_EQ_INT(p.n_items, 0);
	CHECK(p.fail_head);                         /* and nothing runs that could free blocks */
	sched_seq run[1] = {running_seq(16, 1, 1)};
	p = plan_of(run, 1, wait, 3, limits(9, 512));
	CHECK_EQ_INT(p.n_admit, 0);
	CHECK(!p.fail_head);                        /* the running one may free blocks */
	p = plan_of(NULL, 0, wait, 3, limits(16, 512));
	CHECK_EQ_INT(p.n_admit, 3);
	CHECK_EQ_INT(p.n_items, 3);
	CHECK(p.items[0].admit && p.items[0].seq == 0 && p.items[0].count == 150);
	CHECK(p.items[1].admit && p.items[1].seq == 1 && p.items[1].count == 10);
	CHECK_EQ_INT(p.free_after, 0);             /* 10 + 1 + 5 */
	p = plan_of(NULL, 0, wait, 3, limits(15, 512));
	CHECK_EQ_INT(p.n_admit, 2);                /* the third needs 5, 4 are left */
	/* max_running stops admission */
	sched_limits lim = limits(100, 512);
	lim.max_running = 2;
	p = plan_of(run, 1, wait, 3, lim);
	CHECK_EQ_INT(p.n_admit, 1);
	/* the budget runs out: the admitted head gets what is left */
	p = plan_of(run, 1, wait, 3, limits(100, 50));
	CHECK_EQ_INT(p.n_admit, 1);
	CHECK_EQ_INT(p.items[1].count, 49);
}

static void test_preemption(void)
{
	/* three decodes, each at a block boundary, one free block */
	sched_seq run[3] = {running_seq(16, 1, 1), running_seq(32, 1, 2), running_seq(48, 1, 3)};
	sched_plan p = plan_of(run, 3, NULL, 0, limits(1, 512));
	CHECK_EQ_INT(p.preempt, 2);                /* the newest goes */
	CHECK_EQ_INT(p.n_items, 0);
	p = plan_of(run, 2, NULL, 0, limits(1, 512));
	CHECK_EQ_INT(p.preempt, 1);                /* the second decode may preempt itself */
	p = plan_of(run, 2, NULL, 0, limits(2, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK_EQ_INT(p.n_items, 2);
	p = plan_of(run, 1, NULL, 0, limits(0, 512));
	CHECK_EQ_INT(p.fail_running, 0);           /* alone and no room: it can never run */
	CHECK_EQ_INT(p.preempt, -1);
	/* copy-on-write needs a block too */
	sched_seq cow[2] = {running_seq(20, 1, 2), running_seq(20, 1, 2)};
	cow[0].shared_next = cow[1].shared_next = true;
	p = plan_of(cow, 2, NULL, 0, limits(1, 512));
	CHECK_EQ_INT(p.preempt, 1);
	p = plan_of(cow, 2, NULL, 0, limits(2, 512));
	CHECK_EQ_INT(p.n_items, 2);
}

static void test_drafts(void)
{
	sched_seq run[2] = {running_seq(20, 1, 2), running_seq(40, 1, 3)};
	run[0].want_draft = run[1].want_draft = 4;
	sched_plan p = plan_of(run, 2, NULL, 0, limits(10, 512));
	CHECK_EQ_INT(p.items[0].n_draft, 4);
	CHECK_EQ_INT(p.items[0].count, 5);
	/* the budget caps the drafts (one row stays for the real token) */
	p = plan_of(run, 2, NULL, 0, limits(10, 7));
	CHECK_EQ_INT(p.items[0].n_draft, 4);
	CHECK_EQ_INT(p.items[1].n_draft, 1);
	/* drafts that need a block that is not free are dropped, nobody is preempted */
	run[1] = running_seq(46, 1, 3);
	run[1].want_draft = 4;
	p = plan_of(run, 2, NULL, 0, limits(0, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK_EQ_INT(p.n_items, 2);
	CHECK_EQ_INT(p.items[1].n_draft, 0);       /* 4 drafts would open block 3: none */
	sched_limits lim = limits(10, 512);
	lim.max_drafting = 1;
	p = plan_of(run, 2, NULL, 0, lim);
	CHECK_EQ_INT(p.items[0].n_draft, 4);
	CHECK_EQ_INT(p.items[1].n_draft, 0);
}

static void test_idle_holders(void)
{
	/* a beam (group 1) waits for its sibling and holds 3 blocks; the pool is full */
	sched_seq run[2] = {running_seq(40, 0, 3), running_seq(40, 0, 3)};
	run[0].group = run[1].group = 1;
	sched_seq wait[1] = {{.n_todo = 30, .n_blocks = 0}};
	sched_plan p = plan_of(run, 2, wait, 1, limits(0, 512));
	CHECK_EQ_INT(p.preempt, 1);                /* an ordinary head: the newest holder yields */
	wait[0].group = 1;                          /* the head is their own sibling */
	p = plan_of(run, 2, wait, 1, limits(0, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK(p.fail_head);                         /* the group can never fit at once */
	wait[0].group = 2;                          /* a younger beam request: it waits... */
	p = plan_of(run, 2, wait, 1, limits(0, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK(p.fail_head);                         /* ...but nothing else runs: it fails */
	sched_seq busy[3] = {run[0], run[1], running_seq(20, 1, 2)};
	p = plan_of(busy, 3, wait, 1, limits(0, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK(!p.fail_head);                        /* a decode can still finish and free blocks */
	run[1].group = 3;                           /* a younger group yields to group 2 */
	p = plan_of(run, 2, wait, 1, limits(0, 512));
	CHECK_EQ_INT(p.preempt, 1);
	/* when something was planned, holders are left alone */
	p = plan_of(busy, 3, wait, 1, limits(1, 512));
	CHECK_EQ_INT(p.preempt, -1);
	CHECK_EQ_INT(p.n_items, 1);
}

/* ---- sliding windows: W parts ---- */

enum { WIN = 512 };

static sched_limits wlimits(int64_t free_blocks, int64_t free_w, int budget)
{
	sched_limits lim = limits(free_blocks, budget);
	lim.free_w = free_w;
	lim.win_span = sched_win_span(WIN, BT);
	return lim;
}

/* A running sequence past the window: its table holds the window's W parts. */
static sched_seq long_seq(int computed, int todo)
{
	sched_seq s = running_seq(computed, todo, (computed + BT - 1) / BT);
	s.n_wheld = s.n_blocks - (computed + 1 - WIN) / BT;
	return s;
}

static void test_windows(void)
{
	CHECK_EQ_INT(sched_win_span(WIN, BT), 34);
	CHECK_EQ_INT(sched_win_span(500, BT), 34);
	/* a prefill gets the chunk its free W parts allow, not its free blocks' */
	sched_seq run[2] = {long_seq(1024, 3000), long_seq(2048, 1)};
	sched_plan p = plan_of(run, 1, NULL, 0, wlimits(500, 10, 512));
	CHECK_EQ_INT(p.n_items, 1);
	CHECK_EQ_INT(p.items[0].count, 160);
	CHECK_EQ_INT(p.free_w_after, 0);
	CHECK_EQ_INT(p.free_after, 490);
	/* without win_span, free_w means nothing */
	sched_limits lim = wlimits(500, 10, 512);
	lim.win_span = 0;
	p = plan_of(run, 1, NULL, 0, lim);
	CHECK_EQ_INT(p.items[0].count, 512);
	/* a decode first, then the prefill takes what is left */
	p = plan_of((sched_seq[]){run[1], run[0]}, 2, NULL, 0, wlimits(500, 10, 512));
	CHECK_EQ_INT(p.n_items, 2);
	CHECK_EQ_INT(p.items[0].count, 1);
	CHECK_EQ_INT(p.items[1].count, 144);      /* the decode opened a block: 9 W parts left */
	/* a 4,096-token prompt with free blocks for it but W parts for one
	 * span and a chunk is admitted: the W parts of a window, not of 256
	 * blocks; its first chunk is what the W parts allow */
	sched_seq wait[2] = {{.n_todo = 4096}, {.n_todo = 40}};
	p = plan_of(NULL, 0, wait, 1, wlimits(300, 40, 1024));
	CHECK_EQ_INT(p.n_admit, 1);
	CHECK_EQ_INT(p.items[0].count, 640);
	CHECK(!p.fail_head);
	/* the running sequences' spans come first: one that holds 5 W parts may
	 * take 29 more, so 40 free leave too few for another span */
	sched_seq young = running_seq(80, 1, 5);
	young.n_wheld = 5;
	p = plan_of(&young, 1, wait, 2, wlimits(300, 40, 512));
	CHECK_EQ_INT(p.n_admit, 0);
	CHECK(!p.fail_head);
	p = plan_of(&young, 1, wait, 2, wlimits(300, 64, 512));
	CHECK_EQ_INT(p.n_admit, 1);
	/* a short prompt needs only its own blocks' W parts (and one more) */
	p = plan_of(&young, 1, wait + 1, 1, wlimits(300, 34, 512));
	CHECK_EQ_INT(p.n_admit, 1);
	/* decodes short of W parts preempt the newest; alone, one fails, W named */
	sched_seq dec[2] = {long_seq(1024, 1), long_seq(2048, 1)};
	p = plan_of(dec, 2, NULL, 0, wlimits(100, 1, 512));
	CHECK_EQ_INT(p.preempt, 1);
	p = plan_of(dec, 1, NULL, 0, wlimits(100, 0, 512));
	CHECK_EQ_INT(p.fail_running, 0);
	CHECK(p.short_w);
	/* prefills that find no W part: the newest yields; alone, it fails */
	sched_seq pre[2] = {long_seq(1024, 3000), long_seq(1536, 3000)};
	p = plan_of(pre, 2, NULL, 0, wlimits(100, 0, 512));
	CHECK_EQ_INT(p.n_items, 0);
	CHECK_EQ_INT(p.preempt, 1);
	p = plan_of(pre, 1, NULL, 0, wlimits(100, 0, 512));
	CHECK_EQ_INT(p.fail_running, 0);
	CHECK(p.short_w);
	/* a pool whose W parts cannot hold one span fails the long head (W
	 * named) and still runs a short one */
	p = plan_of(NULL, 0, wait, 1, wlimits(300, 20, 512));
	CHECK(p.fail_head);
	CHECK(p.short_w);
	p = plan_of(NULL, 0, wait + 1, 1, wlimits(300, 20, 512));
	CHECK_EQ_INT(p.n_admit, 1);
	CHECK(!p.fail_head);
	/* admitted prefix hits that keep W parts count against the chunk */
	sched_seq hit = {.n_todo = 1000, .n_computed = 1024, .n_blocks = 64, .n_free_hits = 64, .n_wadmit = 33};
	p = plan_of(NULL, 0, &hit, 1, wlimits(300, 43, 512));
	CHECK_EQ_INT(p.n_admit, 1);
	CHECK_EQ_INT(p.items[0].count, 160);
	CHECK_EQ_INT(p.free_after, 300 - 64 - 10);
}

/* ---- a simulated engine ---- */

/* Per-step conditions are collected here and checked once per simulation. */
static int sim_bad;
#define SIM_EXPECT(c, ...) do { if (!(c) && sim_bad++ == 0) { \
	fprintf(stderr, "%s:%d: simulation: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

typedef struct sim_req {
	int id, prompt, max_gen;
	int tokens, computed, blocks, gen;
	int w_lo;                /* windows: entries before it hold no W part */
	int admitted_at;         /* step of first admission, -1 before */
	bool done;
} sim_req;

typedef struct sim {
	sim_req r[300];
	int run[300], n_run, wait[300], n_wait;
	int64_t free, total;
	int window;              /* > 0: sliding windows of this many tokens */
	int64_t free_w, total_w; /* their W parts */
	int n_admitted, admit_order[300];
} sim;

static sched_seq desc(const sim_req *q, bool waiting)
{
	if (waiting)
		return (sched_seq){.n_todo = q->tokens, .n_computed = 0, .n_blocks = 0};
	sched_seq d = running_seq(q->computed, q->tokens - q->computed, q->blocks);
	d.n_wheld = q->blocks - q->w_lo;
	return d;
}

static void sim_remove(int *arr, int *n, int i)
{
	memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
	(*n)--;
}

static void sim_release(sim *s, sim_req *q)
{
	s->free += q->blocks;
	s->free_w += s->window ? q->blocks - q->w_lo : 0;
	q->blocks = q->w_lo = 0;
	q->computed = 0;
}

/* Carries out one planned item; finishes the request at its last token. */
static void sim_apply(sim *s, sim_req *q, int count)
{
	int64_t need = sched_blocks_needed(&(sched_seq){.n_computed = q->computed, .n_blocks = q->blocks},
					   BT, count);
	s->free -= need;
	s->free_w -= s->window ? need : 0;
	q->blocks += (int)need;
	SIM_EXPECT(s->free >= 0, "free blocks went negative (%lld)", (long long)s->free);
	SIM_EXPECT(s->free_w >= 0, "free W parts went negative (%lld)", (long long)s->free_w);
	q->computed += count;
	if (q->computed < q->tokens)
		return;
	if (q->gen++ < q->max_gen) {
		q->tokens++;
		return;
	}
	q->done = true;
}

static int sim_step(sim *s, int budget, int *n_preempt)
{
	static sched_seq d_run[300], d_wait[300];
	sched_plan p;
	for (;;) {
		for (int i = 0; i < s->n_run; i++)
			d_run[i] = desc(&s->r[s->run[i]], false);
		for (int i = 0; i < s->n_wait; i++)
			d_wait[i] = desc(&s->r[s->wait[i]], true);
		sched_limits lim = limits(s->free, budget);
		if (s->window)
			lim.free_w = s->free_w, lim.win_span = sched_win_span(s->window, BT);
		p = plan_of(d_run, s->n_run, d_wait, s->n_wait, lim);
		if (p.preempt < 0)
			break;
		int v = s->run[p.preempt];
		SIM_EXPECT(p.preempt == s->n_run - 1, "preempted %d of %d, not the newest", p.preempt, s->n_run);
		sim_release(s, &s->r[v]);
		sim_remove(s->run, &s->n_run, p.preempt);
		memmove(s->wait + 1, s->wait, (size_t)s->n_wait * sizeof *s->wait);
		s->wait[0] = v;
		s->n_wait++;
		(*n_preempt)++;
	}
	SIM_EXPECT(p.fail_running == -1 && !p.fail_head, "a request that fits the pool failed");
	int rows = 0, n_run0 = s->n_run;
	bool seen_prefill = false;
	for (int i = 0; i < p.n_items; i++) {
		const sched_item *it = &p.items[i];
		sim_req *q = &s->r[it->admit ? s->wait[it->seq] : s->run[it->seq]];
		bool decode = q->tokens - q->computed == 1 && !it->admit;
		SIM_EXPECT(!(decode && seen_prefill), "a decode planned after a prefill");
		seen_prefill |= !decode;
		SIM_EXPECT(!it->admit || it->seq < p.n_admit, "item of a waiting sequence not admitted");
		rows += it->count;
	}
	SIM_EXPECT(rows <= budget, "%d rows planned, budget %d", rows, budget);
	for (int j = 0; j < p.n_admit; j++) {
		sim_req *q = &s->r[s->wait[j]];
		if (q->admitted_at < 0)
			s->admit_order[s->n_admitted++] = q->id;
		q->admitted_at = 0;
		s->run[s->n_run++] = s->wait[j];
	}
	if (p.n_admit > 0) {
		memmove(s->wait, s->wait + p.n_admit, (size_t)(s->n_wait - p.n_admit) * sizeof *s->wait);
		s->n_wait -= p.n_admit;
	}
	for (int i = 0; i < p.n_items; i++) {
		const sched_item *it = &p.items[i];
		int idx = it->admit ? n_run0 + it->seq : it->seq;
		sim_apply(s, &s->r[s->run[idx]], it->count);
	}
	/* the step's end: W parts no window reaches go back */
	for (int i = 0; s->window && i < s->n_run; i++) {
		sim_req *q = &s->r[s->run[i]];
		int lo = MIN(q->blocks, MAX(0, q->computed + 1 - s->window) / BT);
		s->free_w += MAX(0, lo - q->w_lo);
		q->w_lo = MAX(q->w_lo, lo);
	}
	for (int i = s->n_run - 1; i >= 0; i--)
		if (s->r[s->run[i]].done) {
			sim_release(s, &s->r[s->run[i]]);
			sim_remove(s->run, &s->n_run, i);
		}
	return rows;
}

/* Requests arrive over time into a small pool; every one must finish, the
 * first admissions come in arrival order, and the pool stays consistent.
 * With window > 0, w_parts W parts beside the blocks. */
static void test_simulation(uint64_t seed, int64_t pool, int budget, int window, int64_t w_parts)
{
	static sim s;
	memset(&s, 0, sizeof s);
	sim_bad = 0;
	s.free = s.total = pool;
	s.window = window;
	s.free_w = s.total_w = w_parts;
	uint64_t x = seed;
	int n_req = 200, next = 0, n_preempt = 0, steps = 0;
	for (int i = 0; i < n_req; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		s.r[i] = (sim_req){.id = i, .prompt = 1 + (int)(x >> 33) % 90, .max_gen = (int)(x >> 45) % 60,
				   .admitted_at = -1};
		s.r[i].tokens = s.r[i].prompt;
	}
	while (steps < 20000) {
		/* up to 3 arrivals per step */
		for (int a = 0; a < 3 && next < n_req; a++)
			s.wait[s.n_wait++] = next++;
		if (next == n_req && s.n_run == 0 && s.n_wait == 0)
			break;
		sim_step(&s, budget, &n_preempt);
		steps++;
	}
	int finished = 0;
	for (int i = 0; i < n_req; i++)
		finished += s.r[i].done;
	CHECK_(sim_bad == 0, "%d step conditions failed (seed %llu)", sim_bad, (unsigned long long)seed);
	CHECK_EQ_INT(finished, n_req);
	CHECK_EQ_INT(s.free, s.total);
	CHECK_EQ_INT(s.free_w, s.total_w);
	bool in_order = s.n_admitted == n_req;
	for (int i = 1; i < s.n_admitted; i++)
		in_order &= s.admit_order[i] > s.admit_order[i - 1];
	CHECK_(in_order, "first admissions out of arrival order (seed %llu)", (unsigned long long)seed);
	if (seed == 1)
		printf("simulation: %d requests in %d steps, %d preemptions (pool %lld blocks, budget %d, "
		       "window %d, %lld W parts)\n", n_req, steps, n_preempt, (long long)pool, budget, window,
		       (long long)w_parts);
}

int main(void)
{
	test_blocks_needed();
	test_decodes_first();
	test_budget();
	test_chunk_fits_blocks();
	test_admission();
	test_preemption();
	test_drafts();
	test_idle_holders();
	test_windows();
	for (uint64_t seed = 1; seed <= 20; seed++) {
		test_simulation(seed, 12 + (int64_t)seed % 5 * 8, 64, 0, 0);
		test_simulation(seed, 400, 512, 0, 0);
		/* windows of 32 and 64 tokens (spans 4 and 6) over prompts of up
		 * to 150 tokens: W parts for one span to a few, blocks to spare */
		test_simulation(seed, 60, 64, 32 << (seed % 2), 6 + (int64_t)seed % 4 * 5);
	}
	return TEST_DONE();
}
