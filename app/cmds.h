/* app/cmds.h: the headless commands, one function each, and the option parser
 * they share. Every command takes the arguments after its name and returns
 * the process exit status (0 ok, 1 failure, 2 usage error), printing errors
 * as one line "pagechat: ...". Main thread only. */
#ifndef PAGECHAT_CMDS_H
#define PAGECHAT_CMDS_H

#include "kernels/base.h"

#include <stdio.h>

#define EXIT_USAGE 2

enum opt_kind { OPT_STR, OPT_INT, OPT_FLOAT, OPT_FLAG, OPT_U64 };

typedef struct opt {
	const char *name;        /* "-m" */
	const char *alt;         /* "--model" or NULL */
	enum opt_kind kind;
	void *dst;               /* const char ** / int * / float * / bool * / uint64_t * */
} opt;

/* Parses argv[0..argc) against opts; other words go to pos[] (at most
 * max_pos). Returns the number of positionals, or -1 after printing the
 * problem ("pagechat: CMD: unknown flag '--x'"). */
int cli_parse_opts(const char *cmd, int argc, char **argv, const opt *opts, int n_opts,
		   const char **pos, int max_pos);
/* Prints "pagechat: <e->msg>" and returns 1. */
int cli_fail(const err *e);
/* Reads a whole file (NUL-terminated); NULL with e filled. */
char *cli_read_file(const char *path, size_t *len, err *e);

/* `pagechat template -m MODEL -f CONVERSATION.json`: prints the rendered chat
 * prompt (as a JSON string) and its token ids (app/cmd_template.c). */
int cmd_template(int argc, char **argv);
extern const char cmd_template_usage[];

/* Speculative-decoding flags shared by generate, batch and the chat. */
typedef struct draft_opts {
	const char *model;       /* -md FILE */
	const char *kind;        /* --draft ngram|model */
	int k;                   /* --draft-k (0: default 4) */
	bool adaptive;           /* --draft-adaptive */
} draft_opts;
#define DRAFT_OPTS(d) {"-md", "--model-draft", OPT_STR, &(d)->model}, \
	{"--draft", NULL, OPT_STR, &(d)->kind}, {"--draft-k", NULL, OPT_INT, &(d)->k}, \
	{"--draft-adaptive", NULL, OPT_FLAG, &(d)->adaptive}

struct core_params;
struct core_stats;
struct llama_model;
struct tok;
/* Fills cp's draft fields from d, loading a draft model (returned in *dm and
 * *dt, owned by the caller) with batches of max_tokens. 0, or -1 with e. */
int cli_setup_draft(const draft_opts *d, int max_tokens, struct core_params *cp,
		    struct llama_model **dm, struct tok **dt, err *e);
/* Prints the acceptance figures of a run with drafts (nothing without). */
void cli_print_spec(FILE *out, const struct core_stats *st);

/* The KV cache's row types (--kv-type, --kv-type-k, --kv-type-v). */
typedef struct kv_opts {
	const char *both, *k, *v;  /* type names: f32, f16, q8, fp8 */
	int k_type, v_type;        /* resolved by cli_kv_types */
} kv_opts;
#define KV_OPTS(o) {"--kv-type", NULL, OPT_STR, &(o)->both}, {"--kv-type-k", NULL, OPT_STR, &(o)->k}, \
	{"--kv-type-v", NULL, OPT_STR, &(o)->v}
/* Resolves o's names (default f16); -1 with e naming the bad flag. */
int cli_kv_types(kv_opts *o, err *e);
struct llama_hparams;
/* Memory the machine has available (MemAvailable), in bytes. */
int64_t cli_mem_available(void);
/* Checks that weights + a KV pool of kv_tokens + scratch fit in available
 * memory; -1 with e spelling out the arithmetic when they do not. */
int cli_check_memory(const char *path, const struct llama_hparams *hp, int64_t weight_bytes,
		     int64_t kv_tokens, const kv_opts *kv, int max_tokens, err *e);

/* The device flags, global to every command (app/cli_device.c):
 * --device cuda|cpu|auto (default $PAGECHAT_DEVICE, else auto: CUDA when a
 * GPU is found), --gpu-mem-fraction F (the share of the GPU's memory the
 * process may fill, default 0.9), -ngl N (layers on the GPU: -1 all, the
 * default; 0 none; partial offload is not implemented yet). */
typedef struct device_opts {
	const char *device;
	float mem_fraction;
	int n_gpu_layers;
} device_opts;
extern device_opts cli_dev;
/* Takes the device flags out of argv[0..*argc) into cli_dev; -1 after
 * printing the problem. */
int cli_take_device_flags(int *argc, char **argv);
struct kern_ops;
/* The backend the flags choose, decided once (a CUDA build without a GPU
 * prints a one-line note and takes the CPU). NULL with e. */
const struct kern_ops *cli_kern(err *e);
bool cli_on_device(void);                /* the chosen backend is a GPU */
/* Device bytes the KV pool may take (the fraction's share still free), or
 * -1 on the CPU. */
int64_t cli_device_budget(void);
/* llama_open on the chosen backend; NULL with e. */
struct llama_model *cli_open_model(const char *path, int max_tokens, int n_threads, err *e);

/* `pagechat [chat] [flags]`: the full-screen chat (app/cmd_chat.c); what
 * cli_main runs with no command. */
int cmd_chat(int argc, char **argv);
extern const char usage_chat[];

/* The commands beyond the basic ones in cli.c, with their usage texts. */
int cmd_batch(int argc, char **argv);
extern const char usage_batch[];

/* Speed, quantization and quality: `bench` (app/cmd_bench.c), `quantize`
 * (app/cmd_quantize.c), `perplexity` (app/cmd_perplexity.c). */
int cmd_bench(int argc, char **argv);
/* bench --spec: greedy generation with and without the draft d, in one run
 * (app/cmd_bench_spec.c). 0, or -1 with e filled. */
int bench_spec(const char *model, const draft_opts *d, int n_gen, int reps, int n_threads, err *e);
extern const char usage_bench[];
int cmd_quantize(int argc, char **argv);
extern const char usage_quantize[];
int cmd_perplexity(int argc, char **argv);
extern const char usage_perplexity[];

#endif
