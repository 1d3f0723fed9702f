/* config/params.h: the one table of ranges for every number a user sets.
 *
 * Each row is one setting: the command-line flag that sets it, the config
 * key that sets it (config/cfg.c), its range and what its special values
 * mean. app/opts.c checks every numeric flag against its row as it parses
 * it, config/cfg.c every numeric key, and `pagechat --help` prints the
 * table, so a setting has one range and one meaning everywhere (issue #25:
 * negative values were silently ignored in one place and refused in another,
 * block_size 512 passed the config but not the kernels). Ranges are the
 * values that can work, no wider: block sizes stop at the attention
 * kernels' limit, batches at PARAM_MAX_BATCH, draft lengths at SPEC_MAX_K.
 * Here rather than in app/ because config/ may not include app/. Pure data;
 * any thread. */
#ifndef PAGECHAT_PARAMS_H
#define PAGECHAT_PARAMS_H

#include "base/base.h"

/* The largest batch (tokens per forward step) a command may ask for: the
 * activations of a batch are allocated whole. */
#define PARAM_MAX_BATCH 65536
/* Threads beyond this many per core only add switching; more is capped
 * (with a notice) to this multiple of the cores. */
#define PARAM_THREADS_PER_CORE 4

enum param_id {
	P_NONE,                  /* no range (a flag row without a check) */
	P_THREADS, P_CONTEXT, P_BLOCK_SIZE, P_POOL_BLOCKS, P_POOL_MIB, P_CHUNK, P_DRAFT_K,
	P_TEMP, P_TOP_K, P_TOP_P, P_MIN_P, P_REPEAT_PENALTY, P_REPEAT_LAST_N, P_MAX_TOKENS,
	P_REFRESH_MS, P_PARALLEL, P_BEAMS, P_LENGTH_PENALTY, P_BENCH_PROMPT, P_BENCH_GEN,
	P_BENCH_DEPTH, P_BENCH_REPS, P_BENCH_BW_MIB, P_PEAK_GBS, P_PPL_CTX, P_PPL_BATCH, P_PPL_CHUNKS, P_PORT,
	P_MAX_CONN, P_TIMEOUT_S, P_MAX_BODY, P_MAX_QUEUE, P_SHUTDOWN_S, P_CHAT_N, P_DEMO_SPEED,
	P_COUNT
};

typedef struct param_range {
	const char *flag;        /* "--temp" (the long form when there are two) */
	const char *key;         /* "sampling.temperature", or NULL: no config key */
	double lo, hi;           /* the allowed values, both included ... */
	bool lo_open;            /* ... except lo itself when set */
	const char *note;        /* what special values mean ("0: greedy"), or NULL */
} param_range;

/* Row id (P_NONE < id < P_COUNT). Never NULL. */
const param_range *param_get(enum param_id id);
/* Whether v is in id's range (NaN never is). */
bool param_ok(enum param_id id, double v);
/* The range as text: "0..100; 0: greedy", "0..1, not 0; 1: off"; returns
 * buf. */
const char *param_range_text(enum param_id id, char *buf, size_t cap);
/* The problem with v as one line, naming who (the flag as typed, or the
 * config key): "--temp: -1 is out of range (0..100; 0: greedy)"; returns
 * buf. The same words for the flag and the key. */
const char *param_problem(enum param_id id, const char *who, double v, char *buf, size_t cap);

#endif
