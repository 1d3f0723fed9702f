/* engine/sched.h: the scheduling policy, a pure function.
 *
 * Given the running sequences (in admission order) and the head of the
 * waiting queue (in queue order), each as a small descriptor, the number of
 * free KV blocks and the step's limits, sched_plan_step() decides what one
 * engine step does. It touches no pool, cache or model (the scheduler as
 * policy, as in nano-vllm); core_step carries the plan out. The rules:
 * - Decodes first: each running sequence with one token left computes it,
 *   oldest first, plus its draft tokens when they fit the budget and the free
 *   blocks without preempting anyone.
 * - A decode whose blocks are not free preempts the newest running sequence
 *   (its blocks are freed; it is requeued at the front, to be recomputed).
 *   The plan then names only that victim: the caller preempts it and asks
 *   again with the new state, so block counts are always exact. A sequence
 *   that is alone and still does not fit can never run: the plan fails it.
 * - Then prefill chunks of running sequences in admission order, each the
 *   largest that fits the free blocks and the remaining token budget.
 * - Then waiting sequences in queue order, each admitted while all of its
 *   blocks fit (after its prefix-cache hits), with a first chunk; admission
 *   stops at the first that does not fit, so nobody overtakes the head and
 *   nobody starves.
 * - Running sequences with nothing to compute (beams waiting for their
 *   siblings, engine/beam.c) still hold blocks. When nothing is planned and
 *   the head of the queue does not fit, the newest of them is preempted,
 *   unless it belongs to the head's own beam request or an older one.
 * - When nothing else runs and the head does not fit, it never will (pinned
 *   blocks, or its own beam siblings, hold the rest): the plan fails it.
 * - Sliding windows (win_span > 0, docs/architecture.md "Sliding windows in
 *   the pool"): a second resource, W parts. Every block a step takes
 *   (growth, copy-on-write) takes a W part too, and the W parts the windows
 *   pass come back only at the step's end, so decodes, drafts and chunks
 *   fit min(free blocks, free W parts): prefill chunks shrink when W parts
 *   are short. A sequence holds at most win_span of them between steps (its
 *   window plus one block crossing), whatever its length, so admission asks
 *   the W parts of one span (or of its whole table when shorter), not of the
 *   prompt, beyond what the running sequences may still take to fill their
 *   spans; the blocks rule is unchanged.
 * - A step that plans nothing while a running sequence has tokens to compute
 *   (a prefill whose blocks or W parts others hold) preempts the newest
 *   running sequence, or fails it when it is alone, so nothing waits for
 *   room that never comes.
 * Pure: any thread, no allocation. */
#ifndef PAGECHAT_SCHED_H
#define PAGECHAT_SCHED_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sched_seq {
	int n_todo;              /* tokens to compute (tokens - computed); 0: a running
	                            beam waiting for its siblings */
	int n_computed;          /* tokens whose K/V are written (waiting: its prefix hits') */
	int n_blocks;            /* blocks in its table (waiting: its prefix hits) */
	bool shared_next;        /* the block position n_computed falls in is shared, so
	                            writing it first takes a free block (copy-on-write) */
	int want_draft;          /* running decodes: draft tokens it would verify (0: none) */
	int n_free_hits;         /* waiting: prefix hits that are cached on the free list */
	int group;               /* > 0: shared by the beams of one request, higher for
	                            younger requests; 0: none */
	int n_wheld;             /* sliding windows, running: table entries holding W
	                            parts (kv_seq n_blocks - w_lo) */
	int n_wadmit;            /* sliding windows, waiting: W parts its table holds once
	                            admitted (the entries the window of n_computed reaches) */
} sched_seq;

typedef struct sched_limits {
	int block_tokens;
	int64_t free_blocks;     /* on the free list (cached ones included) */
	int64_t free_w;          /* sliding windows: W parts no table needs */
	int win_span;            /* sliding windows: W parts a sequence holds at most
	                            between steps plus one block crossing,
	                            sched_win_span(); 0: no windows (free_w ignored) */
	int token_budget;        /* rows per step */
	int max_items;           /* sequences per step */
	int max_running;         /* running sequences at most (admission stops there) */
	int max_drafting;        /* sequences verifying drafts per step */
} sched_limits;

typedef struct sched_item {
	int seq;                 /* index into running, or into waiting when admit */
	bool admit;              /* admitted this step (the waiting head each time) */
	int count;               /* tokens to compute, from position n_computed */
	int n_draft;             /* of those, the last n_draft are draft tokens to verify */
} sched_item;

typedef struct sched_plan {
	sched_item *items;       /* borrowed: the caller's [max_items] */
	int n_items;
	int n_admit;             /* waiting sequences admitted: the first n_admit */
	int preempt;             /* running index to preempt before anything else, or -1;
	                            when set, nothing else is planned */
	int fail_running;        /* running index that can never fit (ends with an error),
	                            or -1; when set, nothing else is planned */
	bool fail_head;          /* nothing runs and the waiting head can never fit */
	bool short_w;            /* with fail_running or fail_head: W parts, not blocks,
	                            are what is missing */
	int64_t free_after;      /* free blocks once the items have their room */
	int64_t free_w_after;    /* free W parts so (free_after without windows) */
} sched_plan;

/* W parts a sequence holds at most between steps, entries
 * [(pos + 1 - window) / bt, ceil(pos / bt)), plus one for the block its next
 * token may start: ceil(window / block_tokens) + 2. Pure. */
int sched_win_span(int window, int block_tokens);

/* Blocks s needs taken from the free list to write positions
 * [n_computed, n_computed + n). Pure. */
int64_t sched_blocks_needed(const sched_seq *s, int block_tokens, int n);

/* Plans one step (see above) into plan, whose items array the caller
 * provides with lim->max_items entries. waiting may be only the head of the
 * queue: the first n_waiting. Cannot fail. */
void sched_plan_step(const sched_seq *running, int n_running, const sched_seq *waiting, int n_waiting,
		     const sched_limits *lim, sched_plan *plan);

#endif
