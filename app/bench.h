/* app/bench.h: the parts of `pagechat bench` (app/cmd_bench.c) that live in
 * files of their own: the memory bandwidth tests (app/bench_bw.c) and the
 * speculative-decoding comparison (app/cmd_bench_spec.c). Main thread only
 * (the host bandwidth test starts and joins its own threads). */
#ifndef PAGECHAT_BENCH_H
#define PAGECHAT_BENCH_H

#include "app/app_common.h"
#include "app/opts.h"
#include "base/base.h"

struct kern_ops;

/* The host's memory read bandwidth: the best of reps passes (after one to
 * warm up) of n_threads readers over a fresh buffer of bytes (rounded up to
 * 2 MiB pages), in bytes per second; 0 if the buffer cannot be had. */
double bench_bw_host(size_t bytes, int n_threads, int reps);
/* A device backend's bandwidth: the best of reps device-to-device copies of
 * bytes (each reads and writes bytes), in bytes per second; 0 if the buffers
 * cannot be had. */
double bench_bw_device(const struct kern_ops *K, size_t bytes, int reps);
/* Size of the largest CPU cache Linux reports (sysfs), or 0 if unknown. */
double bench_bw_cache_bytes(void);

/* bench --spec: greedy generation of n_gen tokens with and without the
 * draft d, reps times each, on dev's backend; prints the speeds and the
 * acceptance figures. With prompts (a file, bench_prompts_load's format)
 * every prompt goes through the model's chat template and runs without the
 * draft, with it at a fixed k and with the adaptive k, in rounds that
 * alternate the three; the figures are per category (medians over the
 * rounds), and drafted tokens that differ from the plain run's are reported
 * and fail the bench. 0, or -1 with e filled. */
int bench_spec(cli_device *dev, const char *model, const draft_opts *d, const char *prompts, int n_gen, int reps,
	       int n_threads, err *e);

/* ---- the prompt file (app/bench_prompts.c) ----
 * Comment lines ('#') and blank lines, optionally "system: TEXT" (the system
 * message), then prompts: each starts with a line "== CATEGORY" and takes
 * the lines up to the next such line (leading and trailing blank lines
 * dropped). */
#define BENCH_MAX_PROMPTS 64

typedef struct bench_prompt {
	char category[32];
	char *text;              /* owned */
	int line;                /* of its "==" line */
} bench_prompt;

typedef struct bench_prompts {
	char *system;            /* owned; NULL: none */
	bench_prompt v[BENCH_MAX_PROMPTS];
	int n;
} bench_prompts;

/* Reads path into *ps: 0, or -1 with e naming the file and line (ps is then
 * empty). Release with bench_prompts_free. */
int bench_prompts_load(bench_prompts *ps, const char *path, err *e);
void bench_prompts_free(bench_prompts *ps);

#endif
