/* engine/core_int.h: the engine core's records and the functions its files
 * share (folder-internal: only engine/core*.c, seq.c, spec.c and beam.c
 * include this). The core is split by job, and its files call one way, from
 * the top: core.c (requests, carrying out the scheduler's plan, the step;
 * core_shift.c, a context shift at submit), core_post.c (after the forward
 * pass: sampling, streaming, finishing), core_stats.c (figures, the block
 * map, invariants), beam.c (beam search, which ends sequences of its own),
 * then the features that own a part of every sequence, spec.c (speculative
 * decoding) and core_tier.c (the lower tiers: lookups, swap, persistence),
 * and at the bottom seq.c (a sequence's life, its predicates, the lists).
 * Whoever ends a sequence releases its features' parts, then seq_free frees
 * the rest. The policy itself is engine/sched.c. Engine thread only. */
#ifndef PAGECHAT_CORE_INT_H
#define PAGECHAT_CORE_INT_H

#include "engine/beam.h"
#include "engine/core.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/tier.h"
#include "engine/runner.h"
#include "engine/sched.h"
#include "engine/spec_len.h"

typedef struct spec spec;
typedef struct beam_group beam_group;

enum seq_state { SEQ_WAITING, SEQ_RUNNING };

/* What the completions of one request share (refcounted by its seqs). */
typedef struct req_common {
	int refs;
	int n_completions;       /* n of the request (siblings spawn at the first sample) */
	bool spawned;
	int32_t *stop_ids;       /* owned */
	int n_stop_ids;
	char **stop_strs;        /* owned */
	int n_stop_strs;
	size_t max_stop_len;
	bool ignore_eos;         /* core_request.ignore_eos */
	bool prefill_only;       /* core_request.prefill_only */
} req_common;

/* A sequence's part for speculative decoding: engine/spec.c owns it (starts
 * zeroed; released with spec_release). */
typedef struct seq_draft {
	kv_seq kv;               /* the draft model's block table */
	int computed;            /* tokens whose draft K/V are written */
	int keyed;               /* leading draft blocks already hashed */
	uint64_t last_key;       /* chained key of draft block keyed - 1 */
	spec_len len;            /* the adaptive draft length (engine/spec_len.h) */
	int shadow_pos;          /* paused prompt lookup: position whose token the
	                            lookup guessed (shadow), checked once sampled; 0: none */
	int32_t shadow;
} seq_draft;

/* A sequence's part for beam search: engine/beam.c owns it (g NULL: not a
 * beam; released with beam_forget). */
typedef struct seq_beam {
	beam_group *g;           /* the request's beams' shared state, or NULL */
	int rank;                /* 0 = best, after the last round */
	double lp;               /* cumulative log-probability of its generated tokens */
	bool ready;              /* its candidates for the next round are in cand */
	beam_cand *cand;         /* owned; [BEAM_TOP(width)] */
	int n_cand;
} seq_beam;

/* A preempted sequence's blocks swapped out to tier 1: engine/core_tier.c
 * owns it (released with tier_swap_drop). */
typedef struct seq_swap {
	int32_t *slots;          /* owned; [n] tier-1 slots of blocks keyed.. */
	int n, cap;
	int keyed;               /* leading blocks the cache must give back first */
	int computed;            /* n_computed when it was swapped out */
} seq_swap;

/* What admitting a waiting sequence would find now (engine/core_tier.c,
 * tier_look). */
typedef struct found {
	int hits, free_hits;     /* pool blocks from the prefix cache (c->hits); of those, cached ones */
	int lower;               /* then blocks in the lower tiers (c->lower) */
	bool swap;               /* then its swapped-out blocks */
	uint64_t last_key;       /* the key of the last pool hit */
	int computed;            /* tokens whose K/V admission would give it */
	int from_free;           /* blocks admission takes from the free list (the lower
	                            tiers' and the swapped ones; cached hits not counted) */
} found;

typedef struct seq {
	int64_t req;
	int conv, index;
	enum seq_state state;
	req_common *common;      /* shared, refcounted */
	int32_t *tokens;         /* owned; [cap] prompt then generated */
	int n_tokens, cap;
	int n_prompt;
	int n_computed;          /* tokens whose K/V are in the pool */
	kv_seq kv;
	uint64_t last_key;       /* chained key of block n_keyed - 1 */
	kv_chain chain;          /* its request's salt (core_request.salt) */
	int n_shifted;           /* prompt tokens a context shift rotated for it */
	int n_keyed;             /* leading blocks already hashed */
	int pin_tokens;
	samp sampler;
	int max_tokens, n_gen;
	tok_decoder dec;
	char *text;              /* owned; generated text (for stop strings) */
	size_t text_len, text_cap, text_sent;
	double t_submit, t_sched, t_first, t_last;
	int n_cached, n_preempt;
	int n_proposed, n_accepted; /* draft tokens verified, accepted (its figures) */
	bool counted;            /* prompt/cached tokens added to the stats */
	/* each feature's part, released by whoever ends the sequence before
	 * seq_free (which frees only the sequence's own) */
	seq_draft draft;         /* engine/spec.c */
	seq_beam beam;           /* engine/beam.c */
	seq_swap swap;           /* engine/core_tier.c */
	struct {                 /* engine/core_tier.c: its last lookup while waiting */
		uint64_t stamp;  /* the caches' versions it was made at; 0: none */
		found f;
	} look;
} seq;

/* An ordered list of sequences (it owns them when the core says so). */
typedef struct seq_list {
	seq **v;                 /* owned array */
	int n, cap;
} seq_list;

typedef struct pin {
	int conv;
	int32_t block;
} pin;

/* One sequence's rows in this step. */
typedef struct step_item {
	seq *s;
	int start, count;        /* rows tokens[start .. start + count) */
	int n_draft;             /* of those, the last n_draft are draft tokens
	                            (stored in tokens[n_tokens ..]) to verify */
	float *q;                /* [n_draft][n_vocab] draft distributions, or NULL
	                            for n-gram drafts (one-hot) */
	int out;                 /* its first logits row in the step's run */
	int n_out;               /* its logits rows (0: a prefill chunk's middle) */
} step_item;

struct core {
	llama_model *model;      /* borrowed */
	const tok *tok;          /* borrowed, may be NULL */
	core_event_fn emit;
	void *emit_ctx;
	kv_pool *pool;           /* owned */
	kv_prefix *prefix;       /* owned */
	runner *run;             /* owned; the target model's batches */
	int bt;                  /* block tokens */
	int win_span;            /* sliding windows: sched_win_span (0: none) */
	enum kv_type kv_type_k, kv_type_v; /* the pool's row types */
	int n_ctx, step_tokens, max_running, n_vocab;
	bool check;
	seq_list running;        /* admission order; seqs owned */
	seq_list waiting;        /* FIFO (preempted go first); seqs owned */
	pin *pins;               /* owned; blocks held for conversations */
	int n_pins, cap_pins;
	int n_groups;            /* beam requests started (their group numbers) */
	/* per-step scratch, sized once */
	step_item *plan;         /* [max_running] this step's items */
	int n_plan;
	sched_seq *d_run, *d_wait; /* [max_running] descriptors for the policy */
	sched_item *items;       /* [max_running] the policy's plan */
	spec *sp;                /* owned; NULL without speculative decoding */
	int draft_probe;         /* core_params.draft_probe */
	int probe_in;            /* drafted decode steps before the next probe */
	bool probing;            /* this step decodes without the draft */
	int32_t *hits;           /* [n_blocks] prefix lookup scratch */
	kv_tier *tier;           /* owned; the lower tiers, or NULL */
	enum core_preempt preempt;
	uint8_t *origin;         /* [n_blocks] where each block's contents came from (0, 1, 2) */
	uint32_t *cow_step;      /* [n_blocks] the step (+1) whose copy on write made each
	                            block, 0: none yet (the block map shows it) */
	uint64_t *lower;         /* [n_blocks] keys of a lookup's lower-tier hits */
	int64_t look_bad;        /* check: a request whose kept lookup differed from a
	                            fresh one (its id + 1), 0: none */
	uint8_t *blk_in, *blk_out; /* [bytes_per_block] copies going up / down */
	uint8_t *seen;           /* [n_blocks] stats scratch */
	int32_t *fill;           /* [n_blocks] stats scratch */
	core_stats st;
};

/* ---- engine/seq.c: sequences ---- */

/* A request's shared part from r (stop lists copied), refs 0. */
req_common *common_new(const core_request *r);
/* A copy of rc for a new request (refs 1, spawned, one completion). */
req_common *common_copy(const req_common *rc);
void common_unref(req_common *rc);
/* A new sequence of request req (no tokens yet, no blocks; its features'
 * parts zeroed). */
seq *seq_new(core *c, int64_t req, int conv, int index, req_common *rc, const samp_params *sp,
	     int max_tokens, int pin_tokens);
/* A copy of src's state sharing its KV blocks (each block gains a reference;
 * the draft's blocks are not shared). */
seq *seq_clone(core *c, const seq *src, int64_t req, int conv, int index, uint64_t seed);
/* Frees s's own blocks and s. Its features' parts (beam, draft, swap) must
 * be released first, by whoever ends it (finish_seq, beam.c, core_free). */
void seq_free(core *c, seq *s);
void seq_push_token(seq *s, int32_t t);
/* Makes room for n more tokens after n_tokens (draft tokens go there). */
void seq_reserve_tokens(seq *s, int n);
core_req_metrics seq_metrics(const seq *s);
/* Whether t ends s: an end-of-generation token (unless its request ignores
 * them) or one of its stop ids. */
bool seq_is_stop(const core *c, const seq *s, int32_t t);

void seqs_insert(seq_list *l, int at, seq *s);
void seqs_remove(seq_list *l, int i);
int  seqs_index(const seq_list *l, const seq *s);  /* -1 if absent */

/* ---- engine/core_post.c: after the forward pass ---- */

/* Samples, verifies drafts, streams tokens and finishes sequences for every
 * item of the step's plan, from the runner's logits. */
void post_step(core *c);
/* Ends s: removes it from its list, emits FINISH (for every completion not
 * spawned yet), releases its parts, frees its blocks and the seq. A beam
 * ends with its whole request (beam_abort). */
void finish_seq(core *c, seq *s, enum core_finish f, const char *msg);
/* Pins block (in use) for conv: the pin holds its own reference. */
void pin_block(core *c, int conv, int32_t block);
/* Publishes s's blocks that became full; pins those inside its pinned prefix
 * (a pinned block whose key another block already holds is swapped for that
 * one, so conversations with the same system prompt share it). */
void publish_full_blocks(core *c, seq *s);

/* ---- engine/core_shift.c: context shifts ---- */

/* Before r is queued: builds the blocks of its shifted context (core_shift)
 * from the earlier prompt's cached blocks, rotated, and leaves them in the
 * prefix cache under r's salted keys for its admission to find. Returns the
 * tokens it placed (0 when nothing could be: blocks evicted, the pool full,
 * a backend without kv_shift; the request then recomputes, exactly). */
int shift_materialize(core *c, const core_request *r);

/* ---- engine/beam.c: beam search ---- */

/* Makes s, a new request's only sequence, the first beam of width beams. */
void beam_start(core *c, seq *s, int width, float alpha);
/* s's last position has logits: keep its candidates, mark it ready. */
void beam_on_logits(core *c, seq *s, const float *logits);
/* Runs a selection round for every request whose live beams are all ready
 * (may finish requests and free sequences). */
void beam_select_ready(core *c);
/* Ends s's whole beam request (FINISH f for every completion; all its
 * sequences freed). */
void beam_abort(core *c, seq *s, enum core_finish f, const char *msg);
/* The scheduler's group number of s (0 when s is not a beam). */
int beam_group_of(const seq *s);
/* The beams s's request keeps at most (0 when s is not a beam). */
int beam_width_of(const seq *s);
/* s was preempted: its candidates are void until it has logits again. */
void beam_preempted(seq *s);
/* Releases s's beam part (its candidates, its share of the request's
 * state); a no-op for a sequence that is no beam. */
void beam_release(seq *s);

/* ---- engine/core_tier.c: the lower tiers ---- */

/* Sets up c->tier from p (nothing without host blocks or a store). 0, or -1
 * with e filled. */
int tier_init(core *c, const core_params *p, err *e);
void tier_free(core *c);
/* What admitting waiting s would find now: the prefix cache's blocks (to
 * c->hits), then consecutive blocks in the lower tiers (their keys to
 * c->lower), then s's own swapped blocks, which count only when the cache
 * gives back exactly the blocks before them. Takes nothing; memory only. */
found tier_look(core *c, const seq *s);
/* tier_look for the scheduler's description of s, which needs only the
 * counts: the last one s kept while nothing it depends on has changed since
 * (the prefix cache's keys, the pool's free list, the lower tiers' blocks,
 * s itself), else a fresh one (counted in st.lookups), kept. With c->check,
 * a kept one is compared with a fresh one (core_check reports a difference). */
found tier_look_kept(core *c, seq *s);
/* At submit: checks the store's files of s's blocks below the pool, up to
 * the first that is not there (kv_tier_probe), so its index is right for
 * s's lookups. */
void tier_probe(core *c, const seq *s);
/* Brings the n lower-tier blocks c->lower[0..n) of s back into fresh pool
 * blocks (published, pushed onto s's table); returns how many came. */
int tier_take(core *c, seq *s, int n);
/* Preemption of s (before its blocks are released): swaps its unpublished
 * blocks out to tier 1 when the mode or the cost says so (true when it did)
 * and forgets its last lookup. */
bool tier_preempt(core *c, seq *s);
/* Admission of s, looked up as f, with its first got blocks back: when f
 * counted its swapped blocks and exactly the blocks before them came, those
 * return into fresh pool blocks and n_computed is restored; otherwise they
 * are dropped (a sequence's blocks must be contiguous). */
void tier_swap_back(core *c, seq *s, const found *f, int got);
/* Releases s's swap part (its swapped blocks dropped). */
void tier_swap_release(core *c, seq *s);
/* Writes s's blocks keyed since block `from` to the store. */
void tier_persist(core *c, seq *s, int from);
/* Adds the tiers' figures to st. */
void tier_stats(const core *c, core_stats *st);

/* ---- engine/core_stats.c ---- */

/* What a step's plan is, for timing speculative decoding: prompt rows in it
 * (STEP_MIXED), decodes verifying drafts (STEP_SPEC) or decodes only. */
enum step_kind { STEP_MIXED, STEP_PLAIN, STEP_SPEC };
enum step_kind step_kind(const core *c);
/* Counts a step of that kind that began at t0 (now_s) with gen0 tokens
 * generated so far into the decode timings, and schedules the next probe. */
void stats_decode_step(core *c, enum step_kind kind, double t0, int64_t gen0);

/* ---- engine/spec.c: speculative decoding ---- */

/* Sets up c->sp from p (draft model pool and prefix cache, scratch). 0, or -1
 * with e filled (vocabularies differ, pool too large). No-op without a draft. */
int spec_init(core *c, const core_params *p, err *e);
void spec_free(core *c);
/* Draft tokens s would verify next (0: decode normally); the scheduler caps
 * them by the step's budget and free blocks. */
int spec_want(const core *c, const seq *s);
/* Runs the draft for this step's plan: mirrors prefill chunks into the draft's
 * KV and fills every decode item's draft tokens and distributions (items
 * whose draft could not run get n_draft = 0). */
void spec_propose(core *c);
/* Verifies item p against the target's logits rows (row j of the item is
 * runner_logits(c->run, p->out + j)): writes the tokens to commit (accepted
 * drafts, then one corrected or bonus token) to out and returns their count
 * (1 .. n_draft + 1). */
int spec_verify(core *c, const step_item *p, int32_t *out);
/* After verification: rolls the draft KV back to committed tokens, publishes
 * its full blocks, counts acceptance and adapts k. */
void spec_commit(core *c, seq *s, int n_draft, int n_accepted);
/* Drops s's draft KV and resets its draft part (preemption, finish); a no-op
 * without speculative decoding. */
void spec_release(core *c, seq *s);
/* At admission: reuse the draft's cached prefix for s. */
void spec_admit(core *c, seq *s);
/* Pool and prefix checks of the draft side. */
bool spec_check(const core *c, err *e);

#endif
