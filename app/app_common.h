/* app/app_common.h: what the commands share beyond their options: printing
 * an error, reading a file, tokenizing a text, the memory check, the backend
 * the device flags choose and opening a model on it, setting up a draft.
 * Errors come back in an err (library style); only cli_fail prints. Main
 * thread only. */
#ifndef PAGECHAT_APP_COMMON_H
#define PAGECHAT_APP_COMMON_H

#include "app/opts.h"
#include "base/base.h"
#include "models/place.h"

#include <stdio.h>

#define DEMO_MODEL "../shared/models/stories260K.gguf"
/* make run's chat model, where make deps or make run fetched it */
#define CHAT_MODEL "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"

struct core_params;
struct core_stats;
struct gguf_file;
struct kern_ops;
struct llama_hparams;
struct llama_model;
struct llama_params;
struct llama_plan;
struct tok;

/* Prints "pagechat: <e->msg>" and returns 1. */
int cli_fail(const err *e);
/* The first failed write to stdout: a command that flushes as it goes
 * records errno here (cli_main's last flush, which reports the failure,
 * would no longer see it). 0: none. */
extern int cli_stdout_errno;

/* The most a text input (a prompt, a batch file, a conversation, a text to
 * score) may hold: its tokens are allocated whole. */
#define CLI_MAX_TEXT_BYTES ((size_t)256 << 20)
/* Reads a whole regular file (base/files.h: a FIFO or a device is
 * refused, never read forever) of at most CLI_MAX_TEXT_BYTES into a new
 * NUL-terminated buffer (the caller frees it), its length in *len; NULL with
 * e filled. */
char *cli_read_file(const char *path, size_t *len, err *e);
/* The thread count for a -t/--threads value n: n itself, 0 for "one per
 * core", or, above PARAM_THREADS_PER_CORE per core, that many with a notice
 * on stderr naming flag. */
int cli_threads(int n, const char *flag);
/* Tokenizes text[0..len) with flags (TOK_*) into a new array (the caller
 * frees it); *n gets the count (negative when the text is too long). */
int32_t *cli_encode(const struct tok *tk, const char *text, size_t len, unsigned flags, int *n);

/* "1.25 MiB" style, into buf[cap]; returns buf. */
const char *cli_fmt_bytes(char *buf, size_t cap, double bytes);
/* One line into buf[cap]: "weights X + KV Y (N tokens x B/token) + scratch
 * Z = T". */
void cli_plan_line(char *buf, size_t cap, const struct llama_plan *p, int64_t kv_tokens);
/* Memory the machine has available (MemAvailable), in bytes. */
int64_t cli_mem_available(void);

/* Where a command computes: the device flags (taken out of argv by
 * cli_main, which owns this and passes it to the command) and the backend
 * they choose, picked on first use so that a command which opens no model
 * never looks for a GPU; what placement plans the KV pool as, and the last
 * placement made. */
typedef struct cli_device {
	device_opts opts;
	const struct kern_ops *kern;   /* borrowed (a static table); NULL until cli_kern */
	int64_t kv_tokens;       /* the pool placement plans for (cli_plan_kv; 0: ... */
	int64_t kv_bytes;        /* ... these bytes of all layers' K/V; 0 too: the
	                            model's training context) */
	enum kv_type kv_k, kv_v; /* its row types (f16 until cli_plan_kv) */
	bool kv_typed;
	int64_t kv_promised;     /* device bytes placed models' pools will take */
	place_plan place;        /* the last model placed on a device (n_layers 0: none) */
} cli_device;
/* The backend d's flags choose, decided once (a CUDA build without a GPU
 * prints a one-line note and takes the CPU; the fake device gets
 * --device-mem's size). NULL with e. */
const struct kern_ops *cli_kern(cli_device *d, err *e);
bool cli_on_device(cli_device *d);       /* the chosen backend is a device */
/* Device bytes the KV pool may take (the fraction's share still free, at
 * most --device-mem's), or -1 on the CPU. */
int64_t cli_device_budget(cli_device *d);
/* Tells placement the KV pool the command will make: tokens, or (tokens 0)
 * bytes of K/V for all layers; kv (NULL: f16) resolved by cli_kv_types. */
void cli_plan_kv(cli_device *d, int64_t tokens, int64_t bytes, const kv_opts *kv);
/* Where the model in f goes on d's device backend (models/place.h): -ngl
 * given, or automatically from the memory; fills lp->host_layers and
 * head_on_host, records it in d->place and prints it (one line, stderr).
 * -1 with e when it does not fit. Nothing to do on the CPU. */
int cli_place(cli_device *d, const struct gguf_file *f, int max_tokens, struct llama_params *lp, err *e);
/* The placement figures for f on d (dev_budget -1 without a device or
 * --device-mem); lb receives the layers' bytes (room for n_layers, or for
 * one per tensor: a file with more layers than tensors is refused). 0, or
 * -1 with e. */
int cli_place_params(cli_device *d, const struct gguf_file *f, int max_tokens, int64_t *lb,
		     place_params *p, err *e);
/* "N of L layers on DEV, the head on the device: device X (weights + KV +
 * scratch), host Y (...)" into buf[cap]. */
void cli_place_line(char *buf, size_t cap, const place_plan *pl, const char *dev_name);
/* llama_open on d's backend, placed there by cli_place; NULL with e. */
struct llama_model *cli_open_model(cli_device *d, const char *path, int max_tokens, int n_threads,
				   err *e);
/* Opens the model at path (batches of max_tokens) on d's backend, and its
 * tokenizer, into *m and *tk, owned by the caller (who frees them even on
 * failure). 0, or -1 with e. */
int cli_load(cli_device *d, const char *path, int max_tokens, struct llama_model **m, struct tok **tk,
	     err *e);

/* The memory plan's inputs, before anything is allocated: path's
 * hyperparameters and its weights' bytes, from the metadata alone (the file
 * is mapped and closed again). 0, or -1 with e. */
int cli_read_plan(const char *path, struct llama_hparams *hp, int64_t *weight_bytes, err *e);
/* Checks that weights + a KV pool of kv_tokens + scratch fit in the memory
 * of dev's backend (on a GPU: the pool in the --gpu-mem-fraction share); -1
 * with e spelling out the arithmetic when they do not. kv NULL: f16. On a
 * device before the model is placed it checks nothing: placement sizes the
 * pool's device part itself (cli_plan_kv). */
int cli_check_memory(cli_device *dev, const char *path, const struct llama_hparams *hp,
		     int64_t weight_bytes, int64_t kv_tokens, const kv_opts *kv, int max_tokens, err *e);

/* Fills cp's draft fields from d, loading a draft model on dev (returned in
 * *dm and *dt, owned by the caller) with batches of max_tokens. 0, or -1
 * with e. */
int cli_setup_draft(cli_device *dev, const draft_opts *d, int max_tokens, struct core_params *cp,
		    struct llama_model **dm, struct tok **dt, err *e);
/* Prints the acceptance figures of a run with drafts (nothing without). */
void cli_print_spec(FILE *out, const struct core_stats *st);
struct core;
/* Prints what the lower KV tiers did (nothing without them) and the
 * store's notice, if any. */
void cli_print_tiers(FILE *out, const struct core *c, const struct core_stats *st);

#endif
