/* engine/core.h: the serving engine's step loop, synchronous.
 *
 * Owns the KV pool, the prefix cache and every request's sequences; borrows
 * the model and tokenizer. core_step() runs one iteration: schedule (decodes
 * first, one token each, then prefill chunks in arrival order under a token
 * budget), build one flat batch, run the model, then postprocess (sample,
 * publish full blocks to the prefix cache, stream events, finish requests).
 * Continuous batching: requests join and leave between any two steps. Under
 * block shortage the newest running sequence is preempted (its blocks freed,
 * it is re-queued to be recomputed; its prefix usually survives in the cache).
 * Scheduling does no I/O: a waiting request's lookup (prefix cache, lower
 * tiers) is answered from memory and kept until one of them changes; the
 * disk store's files are checked at submit, read when a request is admitted
 * with blocks from them and written as blocks are published or fall from
 * host memory. Events go to a callback during core_step/submit/cancel, on
 * the caller's thread. The engine thread (engine.h) wraps this for the UI;
 * `batch` and the tests drive it directly. One thread at a time. */
#ifndef PAGECHAT_CORE_H
#define PAGECHAT_CORE_H

#include "engine/sample.h"
#include "kernels/kvq.h"
#include "models/llama.h"
#include "models/tok.h"

typedef struct core core;

/* Speculative decoding: where draft tokens come from. */
enum core_draft {
	DRAFT_NONE,
	DRAFT_MODEL,             /* a small model with the same vocabulary */
	DRAFT_NGRAM,             /* prompt lookup: continue the last earlier match */
};
#define SPEC_MAX_K    16     /* draft tokens per sequence and step, at most */
#define SPEC_MAX_SEQS 32     /* sequences speculating in one step, at most */

/* Preemption: recompute the sequence later, or swap its private blocks out
 * to tier 1 and back (its published blocks come back through the cache);
 * AUTO swaps when moving the bytes costs less than computing the tokens. */
enum core_preempt { PREEMPT_AUTO, PREEMPT_RECOMPUTE, PREEMPT_SWAP };

typedef struct core_params {
	llama_model *model;      /* borrowed */
	const tok *tok;          /* borrowed; NULL: no text pieces, no EOS */
	int block_tokens;        /* KV block size (default 16) */
	int64_t pool_blocks;     /* pool size in blocks (0: from pool_bytes) */
	int64_t pool_bytes;      /* pool size in bytes when pool_blocks is 0 (0: 64 MiB) */
	int64_t pool_wparts;     /* sliding windows: W parts (the windowed layers' room, in
	                            blocks; kv_pool_params.w_blocks); 0: make_pool's rule
	                            (docs/architecture.md), at least the blocks: one each */
	int n_ctx;               /* per-sequence context limit (0: the model's) */
	int step_tokens;         /* token budget per step (0: 512; capped by the model) */
	int max_running;         /* sequences running at once (0: 64; at most step_tokens) */
	bool check;              /* verify pool/prefix invariants after every step */
	enum core_draft draft_kind;
	llama_model *draft;      /* borrowed; DRAFT_MODEL */
	const tok *draft_tok;    /* borrowed; must equal tok's vocabulary */
	int draft_k;             /* draft tokens per step (default 4) */
	bool draft_adaptive;     /* raise/lower k per sequence from its acceptance
	                            (engine/spec_len.h) */
	float draft_cost;        /* adaptive: one draft's cost in plain decode steps;
	                            0: 0.2 for n-gram, 0.2 + draft/target size
	                            for a draft model */
	int ngram_n;             /* DRAFT_NGRAM match length (default 3) */
	int draft_probe;         /* with a draft: one decode step in this many runs
	                            without it, so core_stats times plain decoding
	                            beside drafted decoding in the same run (the
	                            speed-up against no draft); 0: never */
	enum kv_type kv_type_k, kv_type_v; /* the pools' row types; 0 is f32 */
	/* Lower KV tiers (kv/tier.h): cached blocks fall from the pool to
	 * host memory to disk instead of being dropped, and come back on a hit. */
	int64_t host_blocks;     /* tier 1: host blocks (cached and swapped); 0: none */
	const char *kv_store;    /* tier 2: a directory of block files (borrowed); NULL: none */
	int64_t kv_store_max;    /* its size limit in bytes (0: none) */
	enum core_preempt preempt; /* how a preempted sequence comes back */
	int min_step_ms;         /* the engine thread (engine.h) makes each step last at
	                            least this long and publishes after each, so a demo
	                            can be watched; 0: full speed. core_step ignores it */
} core_params;

/* A context shift (llama.cpp's): the K/V of an earlier prompt, still in the
 * prefix cache, reused for a prompt that leaves part of it out. Old
 * positions [0, keep) stay where they are; [keep, keep + discard) are
 * dropped; the rest move down by discard, their K rows rotated by the RoPE
 * angle of the move in their stored type (f16, q8 and fp8 rows are decoded,
 * rotated and encoded again; V rows are copied). An approximation: the moved
 * rows were computed with the dropped tokens in their context. The rotated
 * blocks are keyed under the new request's salt, so only requests with the
 * same salt (the same conversation after the same shifts) find them. */
typedef struct core_shift {
	const int32_t *old;      /* borrowed for the call; the earlier tokens */
	int n_old;               /* 0: no shift */
	uint64_t old_salt;       /* the earlier request's salt and salt_block */
	int old_salt_block;
	int keep, discard;
} core_shift;

typedef struct core_request {
	int64_t id;              /* caller's request id, unique among live requests */
	int conv;                /* conversation id (pins, panels) */
	const int32_t *prompt;   /* borrowed for the call; copied */
	int n_prompt;
	samp_params samp;
	int max_tokens;          /* new tokens at most per completion (<= 0: until context) */
	int n;                   /* completions sharing the prompt (>= 1) */
	const int32_t *stop_ids; /* extra stop tokens (copied) */
	int n_stop_ids;
	const char *const *stop_strs; /* stop strings (copied); the text ends before them */
	int n_stop_strs;
	int pin_tokens;          /* keep the prompt's first pin_tokens cached while the
	                            conversation lives (system prompt); 0: none */
	bool ignore_eos;         /* end-of-generation tokens do not end it (fixed-length
	                            answers for load tests: vLLM's and llama-server's
	                            ignore_eos); stop_ids and stop_strs still do */
	int beams;               /* beam search of this width (1..16; engine/beam.h's
	                            rules, samp and n ignored); 0: sampling */
	float length_penalty;    /* beams: final order by logprob / length^this */
	uint64_t salt;           /* nonzero: blocks from salt_block on are keyed with it
	                            (a shifted context: K/V only its own requests share) */
	int salt_block;
	core_shift shift;        /* n_old > 0: materialize the shifted K/V at submit */
	bool prefill_only;       /* compute (and cache, pin) the prompt's K/V, then end
	                            with FIN_STOP and no token: a system prompt's
	                            warm-up. Not a finished request in the figures
	                            (finished, e2e); n = 1, no beams */
} core_request;

enum core_finish { FIN_STOP, FIN_LENGTH, FIN_CONTEXT, FIN_CANCELLED, FIN_ERROR };
const char *core_finish_name(enum core_finish f);

typedef struct core_req_metrics {
	double queue_ms;         /* submit -> first scheduled */
	double ttft_ms;          /* submit -> first token */
	double tpot_ms;          /* mean time per output token after the first */
	int n_prompt, n_cached;  /* prompt tokens; of those, reused from the prefix cache */
	int n_gen;
	int n_preempt;
	int n_proposed, n_accepted; /* draft tokens proposed and accepted */
	double logprob;          /* beams: the completion's cumulative log-probability */
	int n_shifted;           /* prompt tokens whose K/V a context shift rotated */
} core_req_metrics;

enum core_event_kind { CORE_EV_TOKEN, CORE_EV_FINISH };

typedef struct core_event {
	enum core_event_kind kind;
	int64_t req;
	int conv;
	int index;               /* completion index (0..n-1) */
	uint64_t step;           /* engine step that produced it */
	int32_t token;           /* TOKEN: the id */
	const char *text;        /* TOKEN: complete UTF-8 text released by this token
	                            (borrowed for the callback); FINISH: error message or "" */
	size_t text_len;
	enum core_finish finish; /* FINISH */
	core_req_metrics m;      /* FINISH: the request's figures; TOKEN: the same
	                            figures so far (a beam's tokens: none), so a
	                            live figure means what the final one does */
} core_event;

typedef void (*core_event_fn)(void *ctx, const core_event *ev);

/* A latency histogram: count[i] observations in (le[i-1], le[i]] seconds
 * (core_hist_le), count[CORE_HIST_N] those above the last bound. */
#define CORE_HIST_N 20
extern const double core_hist_le[CORE_HIST_N];
typedef struct core_hist {
	int64_t count[CORE_HIST_N + 1];
	double sum_s;            /* of every observation */
} core_hist;
void core_hist_add(core_hist *h, double seconds);     /* cannot fail */

/* Engine-wide figures, counted where they happen. */
typedef struct core_stats {
	uint64_t steps;
	int n_running, n_waiting;
	int max_running;         /* sequences it runs at once at most (a request's n or
	                            beams above it are refused) */
	int64_t blocks_total, blocks_used, blocks_cached, blocks_free, blocks_shared;
	int64_t blocks_pinned;   /* distinct blocks pinned (by one conversation or more) */
	int64_t slots_alloc, slots_filled;   /* unique blocks of live sequences */
	double waste;            /* (alloc - filled) / alloc, paged, now */
	double waste_contig;     /* same for a max-context reservation per live sequence */
	int64_t prompt_tokens, cached_tokens; /* over admitted requests */
	int64_t prefill_tokens, decode_tokens; /* rows computed so far (decode: with the
	                            drafts verified, accepted or not) */
	int64_t generated_tokens;/* tokens sequences took (sampled, or drafts accepted) */
	double busy_s;           /* time inside core_step */
	int64_t preemptions;
	int64_t lookups;         /* waiting requests looked up anew for the scheduler (one
	                            whose caches did not change since keeps its last) */
	int64_t cow_copies;      /* blocks copied before a shared one was written */
	int64_t finished;        /* completions, by any reason */
	int64_t finished_by[FIN_ERROR + 1]; /* completions by enum core_finish */
	core_hist ttft;          /* submit -> first token, per request */
	core_hist itl;           /* between a completion's successive tokens */
	core_hist e2e;           /* submit -> finish, per completion */
	core_hist queue;         /* submit -> first scheduled, per request */
	int64_t shifted_tokens;  /* tokens placed by context shifts (rotated, not recomputed) */
	int64_t spec_steps;      /* verifications (one per sequence and step) */
	int64_t spec_proposed, spec_accepted;
	int64_t spec_pos_proposed[SPEC_MAX_K], spec_pos_accepted[SPEC_MAX_K]; /* by draft position */
	/* with a draft: decode-only steps (no prompt rows), timed inside core_step
	 * (drafting, verifying and sampling included), and the tokens they took;
	 * "spec" ones verified drafts, "plain" ones did not (no draft found, or a
	 * core_params.draft_probe step) */
	int64_t spec_dec_steps, spec_dec_us, spec_dec_tokens;
	int64_t plain_dec_steps, plain_dec_us, plain_dec_tokens;
	enum kv_type kv_type_k, kv_type_v; /* the pool's row types */
	double kv_vs_f16;        /* tokens the pool holds / tokens an f16 pool of its size would */
	/* lower tiers (all 0 without them) */
	int64_t host_blocks, host_keyed, host_swapped; /* tier 1: capacity, cached, swapped */
	int64_t cached_host, cached_store;   /* of cached_tokens: brought back from tier 1 / 2 */
	int64_t demoted, swapped_out, swapped_in; /* blocks */
	int64_t bytes_up, bytes_down;        /* moved into / out of the pool */
	double move_s;                       /* time spent moving them */
	int64_t store_written, store_bytes, store_bad; /* files written, bytes on disk, bad files */
	int64_t store_opens;     /* the store's open() calls (its files, directory, lock) */
	bool has_store, store_writable;
	int64_t kv_dev_bytes;    /* the pool's K/V in device memory ... */
	int64_t kv_host_bytes;   /* ... and in host memory */
	int kv_dev_layers, n_layers; /* layers computed (their K/V kept) on the device, of all */
	/* sliding windows (kv/pool.h; all 0 without) */
	int window, win_layers;  /* the window in tokens; layers that have it (of n_layers) */
	int64_t blocks_win_freed; /* blocks in use whose windowed layers' K/V no window
	                            reaches any more (their W parts released) */
	int64_t blocks_win_held; /* blocks in use whose windowed layers' K/V are still needed */
} core_stats;

/* Per-block state for the pool map. */
enum core_block_state {
	BLK_FREE, BLK_CACHED, BLK_USED, BLK_PARTIAL, BLK_SHARED, BLK_PINNED
};

typedef struct core_block_info {
	uint8_t state;           /* enum core_block_state */
	int32_t conv;            /* a conversation using it, -1 if none */
	int32_t refcount;
	uint8_t origin;          /* 0: computed here; 1: brought back from host memory;
	                            2: read from the disk store */
	uint32_t cow_step;       /* the engine step (+1) whose copy on write made this
	                            block, 0: none (a newer value: a new copy) */
} core_block_info;

/* One running sequence's block table, for the panels (core_seq_tables), or
 * the blocks an idle conversation pins (index -1). */
typedef struct core_seq_info {
	int32_t conv, index;     /* its conversation and completion index (beams: slot;
	                            -1: no sequence, the conversation's pinned blocks) */
	int32_t n_blocks;        /* its block table's length */
	int32_t n_tokens;        /* tokens whose K/V are in the pool */
	int64_t first;           /* its block ids: blocks[first .. first + n_blocks) */
} core_seq_info;

/* Builds the engine. NULL with e filled (pool too large or empty, bad sizes). */
core *core_new(const core_params *p, core_event_fn fn, void *ctx, err *e);
void core_free(core *c);                               /* NULL is a no-op */

/* Queues a request. A request that can never run (empty prompt, prompt not
 * shorter than the context, more blocks than the pool has) is answered with a
 * FIN_ERROR event per completion and -1 (e filled); 0 otherwise. With a disk
 * store, the files of the prompt's blocks below the pool are checked here
 * (kv_tier_probe), so that scheduling can trust the store's index. */
int core_submit(core *c, const core_request *r, err *e);
/* Finishes every completion of request id with FIN_CANCELLED (no-op if unknown). */
void core_cancel(core *c, int64_t id);
/* Branches completion `index` of request id into a new request new_id in
 * conversation new_conv: the same tokens so far, sharing its KV blocks
 * (copy-on-write), with its own sampler seeded by seed. -1 if id is unknown,
 * -2 if the engine already runs its most sequences (max_running). */
int core_fork(core *c, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
/* Releases the pins held for conversation conv. */
void core_close_conv(core *c, int conv);

/* Runs one step. Returns the number of tokens computed (0 when idle), or -1
 * with e filled on a model failure (every running request then finishes with
 * FIN_ERROR). */
int core_step(core *c, err *e);
bool core_idle(const core *c);                         /* nothing running or waiting */

void core_get_stats(const core *c, core_stats *out);
int64_t core_n_blocks(const core *c);
int core_n_ctx(const core *c);                         /* the context limit, tokens */
/* Fills map[core_n_blocks] with each block's state. */
void core_block_map(const core *c, core_block_info *map);
/* The running sequences' block tables in admission order, then for each
 * conversation that pins blocks but runs no sequence its pinned blocks (a
 * table with index -1): *seqs gets one entry each and *blocks their block
 * ids back to back (both grown with xgrow as needed; caps in *cap_seqs and
 * *cap_blocks). Returns how many tables it wrote. Cannot fail. */
int core_seq_tables(const core *c, core_seq_info **seqs, int *cap_seqs, int32_t **blocks, int *cap_blocks);
/* A line for the user about the lower tiers (the disk store turned off and
 * why), or NULL. Borrowed, valid until the next step. */
const char *core_notice(const core *c);
/* Full invariant check (pool refcounts vs tables + pins, prefix index). */
bool core_check(const core *c, err *e);

#endif
