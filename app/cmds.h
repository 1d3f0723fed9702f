/* app/cmds.h: the headless commands, one function each, and the helpers
 * they share (their options are in app/opts.h). Every command takes the
 * arguments after its name and returns the process exit status (0 ok, 1
 * failure, 2 usage error), printing errors as one line "pagechat: ...".
 * Main thread only. */
#ifndef PAGECHAT_CMDS_H
#define PAGECHAT_CMDS_H

#include "app/opts.h"
#include "kernels/base.h"

#include <stdio.h>

#define EXIT_USAGE 2

/* Prints "pagechat: <e->msg>" and returns 1. */
int cli_fail(const err *e);
/* Reads a whole file (NUL-terminated); NULL with e filled. */
char *cli_read_file(const char *path, size_t *len, err *e);

/* `pagechat template -m MODEL -f CONVERSATION.json`: prints the rendered chat
 * prompt (as a JSON string) and its token ids (app/cmd_template.c). */
int cmd_template(int argc, char **argv);
extern const char cmd_template_usage[];

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

struct llama_hparams;
/* Memory the machine has available (MemAvailable), in bytes. */
int64_t cli_mem_available(void);
/* Checks that weights + a KV pool of kv_tokens + scratch fit in available
 * memory; -1 with e spelling out the arithmetic when they do not. */
int cli_check_memory(const char *path, const struct llama_hparams *hp, int64_t weight_bytes,
		     int64_t kv_tokens, const kv_opts *kv, int max_tokens, err *e);

/* The device flags cli_main takes out of argv (app/cli_device.c). */
extern device_opts cli_dev;
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
