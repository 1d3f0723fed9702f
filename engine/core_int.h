/* engine/core_int.h: the engine core's records, shared by core.c and spec.c
 * only (folder-internal: nothing outside engine/ includes this).
 * Engine thread only. */
#ifndef PAGECHAT_CORE_INT_H
#define PAGECHAT_CORE_INT_H

#include "engine/core.h"
#include "engine/kv_pool.h"
#include "engine/kv_prefix.h"

typedef struct spec spec;

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
} req_common;

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
	int n_keyed;             /* leading blocks already hashed */
	int pin_tokens;
	samp sampler;
	int max_tokens, n_gen;
	tok_decoder dec;
	char *text;              /* owned; generated text (for stop strings) */
	size_t text_len, text_cap, text_sent;
	double t_submit, t_sched, t_first, t_last;
	int n_cached, n_preempt;
	bool counted;            /* prompt/cached tokens added to the stats */
	/* speculative decoding (engine/spec.c) */
	kv_seq dkv;              /* the draft model's block table */
	int d_computed;          /* tokens whose draft K/V are written */
	int d_keyed;
	uint64_t d_last_key;
	int k_cur;               /* draft tokens to propose next (adaptive) */
	int n_proposed, n_accepted;
} seq;

typedef struct pin {
	int conv;
	int32_t block;
} pin;

typedef struct sched_item {
	seq *s;
	int start, count;        /* rows tokens[start .. start + count) */
	int n_draft;             /* of those, the last n_draft are draft tokens
	                            (stored in tokens[n_tokens ..]) to verify */
	float *q;                /* [n_draft][n_vocab] draft distributions, or NULL
	                            for n-gram drafts (one-hot) */
} sched_item;

struct core {
	llama_model *model;      /* borrowed */
	const tok *tok;          /* borrowed, may be NULL */
	core_event_fn emit;
	void *emit_ctx;
	kv_pool *pool;           /* owned */
	kv_prefix *prefix;       /* owned */
	int bt;                  /* block tokens */
	uint8_t kv_type_k, kv_type_v; /* enum kv_type of the pool */
	int n_ctx, step_tokens, max_running, n_vocab;
	bool check;
	seq **running;           /* owned array, admission order; seqs owned */
	int n_running, cap_running;
	seq **waiting;           /* owned array, FIFO (preempted go first); seqs owned */
	int n_waiting, cap_waiting;
	pin *pins;               /* owned; blocks held for conversations */
	int n_pins, cap_pins;
	/* per-step scratch, sized once */
	sched_item *plan;        /* [max_running] */
	int n_plan;
	int32_t *b_tok, *b_pos, *b_seq, *b_out, *b_ntab;
	int64_t *b_slot;
	const int32_t **b_tab;
	float *logits;           /* [max_out][n_vocab] */
	int max_out;             /* logit rows per step */
	spec *sp;                /* owned; NULL without speculative decoding */
	int32_t *hits;           /* [n_blocks] prefix lookup scratch */
	uint8_t *seen;           /* [n_blocks] stats scratch */
	int32_t *fill;           /* [n_blocks] stats scratch */
	core_stats st;
};


/* ---- engine/spec.c: speculative decoding ---- */

/* Sets up c->sp from p (draft model pool and prefix cache, scratch). 0, or -1
 * with e filled (vocabularies differ, pool too large). No-op without a draft. */
int spec_init(core *c, const core_params *p, err *e);
void spec_free(core *c);
/* Draft tokens s may propose this step (0: decode normally). */
int spec_want(const core *c, const seq *s, int budget);
/* Runs the draft for this step's plan: mirrors prefill chunks into the draft's
 * KV and fills every decode item's draft tokens and distributions (items
 * whose draft could not run get n_draft = 0). */
void spec_propose(core *c);
/* Verifies item p against the target's logits rows[n_draft + 1][n_vocab]:
 * writes the tokens to commit (accepted drafts, then one corrected or bonus
 * token) to out and returns their count (1 .. n_draft + 1). */
int spec_verify(core *c, const sched_item *p, const float *rows, int32_t *out);
/* After verification: rolls the draft KV back to committed tokens, publishes
 * its full blocks, counts acceptance and adapts k. */
void spec_commit(core *c, seq *s, int n_draft, int n_accepted);
/* Drops s's draft KV (preemption, finish). */
void spec_release(core *c, seq *s);
/* At admission: reuse the draft's cached prefix for s. */
void spec_admit(core *c, seq *s);
/* Pool and prefix checks of the draft side. */
bool spec_check(const core *c, err *e);

/* Shared helper (core.c): cached blocks of s's leading full blocks in
 * prefix (leaving at least one token to compute). */
int prefix_lookup(const kv_prefix *prefix, const kv_pool *pool, const seq *s, int bt,
		  int32_t *hits, int *n_free_hits, uint64_t *last_key);
/* Publishes kv's blocks that are full below n_valid tokens (chained keys). */
void prefix_publish(kv_prefix *prefix, kv_seq *kv, const int32_t *tokens, int bt, int n_valid,
		    int *n_keyed, uint64_t *last_key);

#endif
