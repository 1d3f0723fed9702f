/* app/cmds.h: the headless commands, one function each, and the helpers
 * they share (their options are in app/opts.h). Every command takes the
 * arguments after its name and returns the process exit status (0 ok, 1
 * failure, 2 usage error), printing errors as one line "pagechat: ...".
 * Each gets the device (app/app_common.h) the device flags chose; those
 * that open no model ignore it. Main thread only. */
#ifndef PAGECHAT_CMDS_H
#define PAGECHAT_CMDS_H

#include "app/app_common.h"
#include "app/opts.h"
#include "kernels/base.h"

#include <stdio.h>

#define EXIT_USAGE 2

/* `pagechat template -m MODEL -f CONVERSATION.json`: prints the rendered chat
 * prompt (as a JSON string) and its token ids (app/cmd_template.c). */
int cmd_template(int argc, char **argv, cli_device *dev);
extern const char cmd_template_usage[];

/* `pagechat [chat] [flags]`: the full-screen chat (app/cmd_chat.c); what
 * cli_main runs with no command. */
int cmd_chat(int argc, char **argv, cli_device *dev);
extern const char usage_chat[];

/* The commands beyond the basic ones in cli.c, with their usage texts. */
int cmd_batch(int argc, char **argv, cli_device *dev);
extern const char usage_batch[];

/* Speed, quantization and quality: `bench` (app/cmd_bench.c), `quantize`
 * (app/cmd_quantize.c), `perplexity` (app/cmd_perplexity.c). */
int cmd_bench(int argc, char **argv, cli_device *dev);
/* bench --spec: greedy generation with and without the draft d, in one run
 * (app/cmd_bench_spec.c). 0, or -1 with e filled. */
int bench_spec(cli_device *dev, const char *model, const draft_opts *d, int n_gen, int reps, int n_threads, err *e);
extern const char usage_bench[];
int cmd_quantize(int argc, char **argv, cli_device *dev);
extern const char usage_quantize[];
int cmd_perplexity(int argc, char **argv, cli_device *dev);
extern const char usage_perplexity[];

#endif
