/* config/params.c: the ranges of the user's settings (see params.h). */
#include "config/params.h"

#include "engine/beam.h"
#include "engine/core.h"
#include "kv/pool.h"
#include "kernels/kern.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const param_range rows[P_COUNT] = {
	[P_THREADS] = {"--threads", "threads", 0, 65536, false,
		       "0: one per core; more than 4 per core are capped"},
	[P_CONTEXT] = {"--ctx", "context", 0, 1 << 24, false, "0: the model's training context"},
	[P_BLOCK_SIZE] = {"--block-size", "kv_cache.block_size", 1, KERN_MAX_BLOCK_TOKENS, false,
			  "the attention kernels' limit"},
	[P_POOL_BLOCKS] = {"--pool-blocks", "kv_cache.pool_blocks", 0, (double)KV_POOL_MAX_BLOCKS, false,
			   "0: sized in MiB instead"},
	[P_POOL_MIB] = {"--pool-mib", "kv_cache.pool_mib", 0, 1 << 20, false, "0: sized in blocks instead"},
	[P_CHUNK] = {"--chunk", "prefill.chunk_tokens", 1, PARAM_MAX_BATCH, false, NULL},
	[P_DRAFT_K] = {"--draft-k", "speculative.draft_k", 1, SPEC_MAX_K, false, NULL},
	[P_TEMP] = {"--temp", "sampling.temperature", 0, 100, false, "0: greedy"},
	[P_TOP_K] = {"--top-k", "sampling.top_k", 0, 1 << 20, false, "0: off"},
	[P_TOP_P] = {"--top-p", "sampling.top_p", 0, 1, true, "1: off"},
	[P_MIN_P] = {"--min-p", "sampling.min_p", 0, 1, false, "0: off"},
	[P_REPEAT_PENALTY] = {"--repeat-penalty", "sampling.repeat_penalty", 0.01, 100, false, "1: off"},
	[P_REPEAT_LAST_N] = {"--repeat-last-n", "sampling.repeat_last_n", 0, 1 << 20, false, NULL},
	[P_MAX_TOKENS] = {"-n", "sampling.max_tokens", -1, 1 << 24, false,
			  "-1 or 0: until the end of the text or a full context"},
	[P_REFRESH_MS] = {NULL, "ui.refresh_ms", 20, 10000, false, NULL},
	[P_PARALLEL] = {"--parallel", NULL, 1, 1024, false, NULL},
	[P_BEAMS] = {"--beams", NULL, 0, BEAM_MAX_WIDTH, false, "0: sampling, no beams"},
	[P_LENGTH_PENALTY] = {"--length-penalty", NULL, 0, 10, false, NULL},
	[P_BENCH_PROMPT] = {"bench -p", NULL, 0, PARAM_MAX_BATCH, false, "0: skips the test"},
	[P_BENCH_GEN] = {"bench -n", NULL, 0, 1 << 20, false, "0: skips the test"},
	[P_BENCH_DEPTH] = {"bench -d", NULL, 0, 1 << 24, false, NULL},
	[P_BENCH_REPS] = {"bench -r", NULL, 1, 64, false, NULL},
	[P_BENCH_BW_MIB] = {"bench --bw-mib", NULL, 1, 1 << 20, false, NULL},
	[P_PPL_CTX] = {"perplexity -c", NULL, 4, 1 << 24, false, "at most the model's training context"},
	[P_PPL_BATCH] = {"perplexity -b", NULL, 1, PARAM_MAX_BATCH, false, NULL},
	[P_PPL_CHUNKS] = {"perplexity --chunks", NULL, 0, 1 << 24, false, "0: every window of the text"},
	[P_PORT] = {"--port", NULL, 0, 65535, false, "0: any free port (printed at start)"},
	[P_MAX_CONN] = {"--max-connections", NULL, 1, 1000, false, NULL},
	[P_TIMEOUT_S] = {"--timeout", NULL, 1, 86400, false, "seconds"},
	[P_MAX_BODY] = {"--max-body", NULL, 1, 1 << 30, false, "bytes"},
	[P_MAX_QUEUE] = {"--max-queue", NULL, 1, 1 << 20, false, NULL},
	[P_SHUTDOWN_S] = {"--shutdown-timeout", NULL, 1, 3600, false, "seconds"},
	[P_CHAT_N] = {"/n", NULL, 1, 16, false, "the chat's sampled answers to pick from; 1: one"},
	[P_DEMO_SPEED] = {"demo --speed", NULL, 0.1, 100, false, "1: the tour's own pace; 2: twice as fast"},
	[P_PEAK_GBS] = {"bench --peak-gbs", NULL, 0, 1e6, false, "0: measure the bandwidth"},
};

const param_range *param_get(enum param_id id)
{
	static const param_range none = {0};
	return id > P_NONE && id < P_COUNT ? &rows[id] : &none;
}

bool param_ok(enum param_id id, double v)
{
	const param_range *r = param_get(id);
	if (id <= P_NONE || id >= P_COUNT)
		return true;
	if (isnan(v) || v > r->hi)
		return false;
	return r->lo_open ? v > r->lo : v >= r->lo;
}

const char *param_range_text(enum param_id id, char *buf, size_t cap)
{
	const param_range *r = param_get(id);
	if (r->lo_open)
		snprintf(buf, cap, "%.10g..%.10g, not %.10g", r->lo, r->hi, r->lo);
	else
		snprintf(buf, cap, "%.10g..%.10g", r->lo, r->hi);
	size_t n = strlen(buf);
	if (r->note && n < cap)
		snprintf(buf + n, cap - n, "; %s", r->note);
	return buf;
}

const char *param_problem(enum param_id id, const char *who, double v, char *buf, size_t cap)
{
	char range[160];
	snprintf(buf, cap, "%s: %.10g is out of range (%s)", who, v, param_range_text(id, range, sizeof range));
	return buf;
}
