/* engine/runner.h: one forward step's batch, built from sequences, and its run.
 *
 * Every caller of the model's forward pass (the engine step, the draft model
 * of speculative decoding, generate, logits, bench, perplexity) builds its
 * batch here: rows of tokens, each from one sequence's block table at given
 * positions, plus the rows whose logits are wanted. runner_run() runs the
 * model and leaves one logits row per wanted row, in the order the rows were
 * added.
 *
 * A runner either borrows a pool whose block tables the caller owns (the
 * engine: runner_add with its own kv_seq), or owns a private pool with n_seqs
 * sequences addressed by index (the commands: runner_append), so that code
 * outside engine/ never handles a block table. One thread at a time. */
#ifndef PAGECHAT_RUNNER_H
#define PAGECHAT_RUNNER_H

#include "kernels/kvq.h"
#include "models/llama.h"

struct kv_pool;
struct kv_seq;
typedef struct runner runner;

typedef struct runner_params {
	llama_model *model;      /* borrowed */
	int max_rows;            /* rows per step (0: the model's largest batch; capped by it) */
	int max_seqs;            /* sequence groups per step (0: max_rows) */
	int max_out;             /* logits rows per step (0: max_rows) */
	struct kv_pool *pool;    /* borrowed; NULL: the runner owns a private pool, below */
	int n_seqs;              /* private sequences, handles 0 .. n_seqs - 1 (0: one) */
	int64_t pool_tokens;     /* private pool size in tokens (rounded up to whole blocks) */
	int block_tokens;        /* private pool block size (0: 16) */
	enum kv_type k_type, v_type; /* private pool row types */
	bool windows_kept;       /* private pool: no sliding-window layout (kv/pool.h), every
				  * layer keeps every block (the reference the released
				  * layout must reproduce bit for bit) */
} runner_params;

/* A runner for p. NULL with e filled (the private pool cannot be made). */
runner *runner_new(const runner_params *p, err *e);
void runner_free(runner *r);                             /* NULL is a no-op */

int runner_max_rows(const runner *r);
int runner_rows(const runner *r);                         /* rows added since the last run */

/* Adds n rows: tokens[i] at position pos0 + i of the sequence whose block
 * table is kv (its slots up to pos0 + n reserved by the caller). Logits are
 * wanted for rows out_from .. out_from + n_out - 1 of these (n_out 0: none).
 * Returns the index the first of them will have among the run's logits rows.
 * The table must not change before runner_run. Exceeding max_rows, max_seqs
 * or max_out is a programmer error (assert). */
int runner_add(runner *r, const struct kv_seq *kv, int64_t pos0, const int32_t *tokens, int n,
	       int out_from, int n_out);

/* Private sequences: appends tokens[0..n) to sequence h, taking its blocks
 * from the runner's pool, and adds them as rows as runner_add does; with
 * sliding windows, first releases the W parts its windows no longer reach
 * (kv_seq_window_release). Returns that index, or -1 with e filled when the
 * pool has too few free blocks. */
int runner_append(runner *r, int h, const int32_t *tokens, int n, int out_from, int n_out, err *e);
/* Runs tokens[0..n) through private sequence h in steps of at most max_rows
 * rows; afterwards runner_logits(r, 0) is the last token's. 0 or -1 with e. */
int runner_prefill(runner *r, int h, const int32_t *tokens, int n, err *e);
int64_t runner_seq_len(const runner *r, int h);           /* positions written */
const struct kv_pool *runner_pool(const runner *r);       /* borrowed or owned; for its figures */
void runner_seq_reset(runner *r, int h);                  /* drops its blocks */

/* Runs the rows added since the last run (none: a no-op) and starts a new
 * batch. 0, or -1 with e filled when the model fails. */
int runner_run(runner *r, err *e);
/* Logits row i ([n_vocab] floats) of the last run; valid until the next. */
const float *runner_logits(const runner *r, int i);

#endif
