/* app/opts.h: the command line's options, parsed one way for every command.
 *
 * A command lists its flags in a table of opt rows and hands argv to
 * cli_parse_opts(); every number any flag takes goes through the one parser,
 * cli_parse_number(), so malformed values are refused the same way
 * everywhere. The groups of flags several commands share are defined here
 * once: sampling (generate, batch, the chat), drafts and KV row types
 * (generate, batch, bench, perplexity), and the device flags every command
 * accepts. Parse errors are printed as one line "pagechat: ..." naming the
 * flag; the callers exit with status 2. Main thread only. */
#ifndef PAGECHAT_OPTS_H
#define PAGECHAT_OPTS_H

#include "base/base.h"
#include "kernels/kvq.h"
#include "config/params.h"
#include "engine/sample.h"

/* OPT_PATH is a string that must not be empty (a file name); OPT_SIZE a
 * byte count with an optional unit (512MiB, 4G); OPT_KV_TYPE a KV row
 * type's name (f32, f16, q8, fp8), kept as the string. */
enum opt_kind { OPT_STR, OPT_INT, OPT_FLOAT, OPT_FLAG, OPT_U64, OPT_PATH, OPT_SIZE, OPT_KV_TYPE };

typedef struct opt {
	const char *name;        /* "-m" */
	const char *alt;         /* "--model" or NULL */
	enum opt_kind kind;
	void *dst;               /* const char ** / int * / float * / bool * / uint64_t * /
	                            int64_t * (OPT_SIZE) */
	enum param_id range;     /* numbers: their row of config/params.h (P_NONE: any) */
} opt;

/* Parses all of s as a number of kind into dst: OPT_INT a decimal int
 * (int *), OPT_U64 a non-negative decimal integer below 2^64 (uint64_t *),
 * OPT_FLOAT a finite number as strtod reads it (float *), OPT_SIZE a byte
 * count (int64_t *): a non-negative number with an optional K, M, G or T
 * suffix (powers of 1024; "KiB", "KB" and "k" too), below 2^62; leading
 * blanks are allowed. Returns false, with dst untouched, when s is anything else. The
 * only number parser of app/. */
bool cli_parse_number(enum opt_kind kind, const char *s, void *dst);

/* Parses a comma-separated list of ints in lo..hi ("1,4,16"; an empty list
 * and a trailing comma are fine) into out[0..*n), at most max of them.
 * 0, or -1 when an entry is not such a number or there are too many. */
int cli_parse_int_list(const char *s, int lo, int hi, int *out, int max, int *n);

/* Parses argv[0..argc) against opts; other words go to pos[] (at most
 * max_pos; after "--" every word is one). Every number is checked against
 * its row's range (config/params.h) as it is read. Returns the number of
 * positionals, or -1 after printing the problem as one line ("pagechat: CMD:
 * unknown flag '--x' (see pagechat CMD --help)", "pagechat: CMD: --temp: -1
 * is out of range (0..100; 0: greedy)"). */
int cli_parse_opts(const char *cmd, int argc, char **argv, const opt *opts, int n_opts,
		   const char **pos, int max_pos);

/* Sampling flags shared by generate, batch and the chat, parsed into a
 * samp_params the caller fills first (with the defaults, or with markers
 * that tell given flags from absent ones). */
#define SAMPLING_OPTS(p) {"--temp", NULL, OPT_FLOAT, &(p)->temp, P_TEMP}, \
	{"--top-k", NULL, OPT_INT, &(p)->top_k, P_TOP_K}, {"--top-p", NULL, OPT_FLOAT, &(p)->top_p, P_TOP_P}, \
	{"--min-p", NULL, OPT_FLOAT, &(p)->min_p, P_MIN_P}, \
	{"--repeat-penalty", NULL, OPT_FLOAT, &(p)->repeat_penalty, P_REPEAT_PENALTY}, \
	{"--seed", NULL, OPT_U64, &(p)->seed, P_NONE}

/* Speculative-decoding flags shared by generate, batch and bench. */
typedef struct draft_opts {
	const char *model;       /* -md FILE */
	const char *kind;        /* --draft ngram|model */
	int k;                   /* --draft-k (0: not given, the engine's default 4) */
	bool adaptive;           /* --draft-adaptive */
} draft_opts;
/* --draft takes ngram, model (with -md) or a file (as the chat's --draft
 * FILE: the same as -md FILE). cli_draft_check settles d after parsing:
 * NULL, or the usage problem of the combination. */
#define DRAFT_OPTS(d) {"-md", "--model-draft", OPT_PATH, &(d)->model, P_NONE}, \
	{"--draft", NULL, OPT_STR, &(d)->kind, P_NONE}, {"--draft-k", NULL, OPT_INT, &(d)->k, P_DRAFT_K}, \
	{"--draft-adaptive", NULL, OPT_FLAG, &(d)->adaptive, P_NONE}
const char *cli_draft_check(draft_opts *d);

/* The lower KV tiers (kv/tier.h), shared by generate, batch and the
 * chat: --kv-store DIR (block files on disk), --kv-store-max SIZE (its size
 * limit, default 8 GiB), --kv-host SIZE (host memory for cached and swapped
 * blocks), --preempt auto|swap|recompute. */
typedef struct tier_opts {
	const char *store;       /* borrowed from argv */
	int64_t store_max, host;
	const char *preempt;
} tier_opts;
#define TIER_OPTS(o) {"--kv-store", NULL, OPT_PATH, &(o)->store, P_NONE}, \
	{"--kv-store-max", NULL, OPT_SIZE, &(o)->store_max, P_NONE}, \
	{"--kv-host", NULL, OPT_SIZE, &(o)->host, P_NONE}, {"--preempt", NULL, OPT_STR, &(o)->preempt, P_NONE}
struct core_params;
/* Puts o into cp (host blocks from the pool's block size bb); -1 with e
 * naming the bad flag. */
int cli_tier_setup(const tier_opts *o, int64_t block_bytes, struct core_params *cp, err *e);

/* The KV cache's row types (--kv-type, --kv-type-k, --kv-type-v). */
typedef struct kv_opts {
	const char *both, *k, *v;  /* type names: f32, f16, q8, fp8 */
	enum kv_type k_type, v_type; /* resolved by cli_kv_types */
} kv_opts;
#define KV_OPTS(o) {"--kv-type", NULL, OPT_KV_TYPE, &(o)->both, P_NONE}, \
	{"--kv-type-k", NULL, OPT_KV_TYPE, &(o)->k, P_NONE}, {"--kv-type-v", NULL, OPT_KV_TYPE, &(o)->v, P_NONE}
/* Resolves o's names (default f16); -1 with e naming the bad flag. */
int cli_kv_types(kv_opts *o, err *e);

/* The device flags, which every command accepts, wherever they stand in
 * the command line: --device cuda|cpu|fake|auto (default $PAGECHAT_DEVICE,
 * else auto: CUDA when a GPU is found; fake: the CPU kernels behind device
 * buffers in host memory, for trying placement without a GPU),
 * --gpu-mem-fraction F (the share of the device's memory the process may
 * fill), -ngl N|auto (layers on the device, the last ones: -1 all, 0 none,
 * auto the most that fit, the default), --device-mem SIZE (the device's
 * memory to plan with: the fake device's size, a cap on a GPU's, or for
 * `info` without a device a device of that size; SIZE as cli_parse_bytes). */
#define NGL_AUTO (-2)
typedef struct device_opts {
	const char *device;      /* borrowed from argv; NULL: not given */
	float mem_fraction;      /* in (0, 1] */
	int n_gpu_layers;        /* -1: all; NGL_AUTO: chosen from the memory */
	int64_t device_mem;      /* bytes; 0: not given */
} device_opts;
#define DEVICE_OPTS_DEFAULT {.mem_fraction = 0.9f, .n_gpu_layers = NGL_AUTO}
/* Parses a byte size: a non-negative number with an optional unit, K/M/G/T
 * with or without "iB" or "B" (powers of 1024 either way: "24GiB", "24G",
 * "512MiB", "1.5G"), or plain bytes. False, *out untouched, for anything
 * else or past 2^62. */
bool cli_parse_bytes(const char *s, int64_t *out);
/* The device flags (--device, --gpu-mem-fraction, -ngl, --n-gpu-layers,
 * --device-mem) go into *d: those before the command's name are taken out
 * of argv[0..*argc) here (argv keeps the other words in order,
 * NULL-terminated); those after it are read by cli_parse_opts in their
 * place, so that a word after a flag that takes a value is that value
 * (generate -p --device is the prompt "--device"). 0, or -1 after printing
 * the problem. */
int cli_take_device_flags(int *argc, char **argv, device_opts *d);

#endif
