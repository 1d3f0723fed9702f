/* app/cmds.h: the commands, one entry point and one usage text each.
 *
 * Every command takes the arguments after its name and the device the
 * device flags chose (app/app_common.h; commands that open no model ignore
 * it), and returns the process exit status (0 ok, 1 failure, 2 usage error),
 * printing errors as one line "pagechat: ...". The usage texts are what
 * `pagechat COMMAND --help` prints. Main thread only. */
#ifndef PAGECHAT_CMDS_H
#define PAGECHAT_CMDS_H

#include "app/app_common.h"
#include "app/opts.h"
#include "base/base.h"

#define EXIT_USAGE 2

/* `pagechat [chat] [flags]`: the full-screen chat (app/cmd_chat.c); what
 * cli_main runs with no command. */
int cmd_chat(int argc, char **argv, cli_device *dev);
extern const char usage_chat[];

/* `pagechat demo`: the chat with a scripted tour of the KV pool
 * (app/cmd_demo.c). */
int cmd_demo(int argc, char **argv, cli_device *dev);
extern const char usage_demo[];

/* `pagechat generate`: continue a prompt (app/cmd_generate.c). */
int cmd_generate(int argc, char **argv, cli_device *dev);
extern const char usage_generate[];

/* `pagechat logits`: the last prompt position's logits (app/cmd_logits.c). */
int cmd_logits(int argc, char **argv, cli_device *dev);
extern const char usage_logits[];

/* `pagechat batch`: JSONL requests through the engine (app/cmd_batch.c). */
int cmd_batch(int argc, char **argv, cli_device *dev);
extern const char usage_batch[];

/* `pagechat serve`: the OpenAI-compatible HTTP server (app/cmd_serve.c). */
int cmd_serve(int argc, char **argv, cli_device *dev);
extern const char usage_serve[];

/* `pagechat tokenize`: the token ids of a text (app/cmd_tokenize.c). */
int cmd_tokenize(int argc, char **argv, cli_device *dev);
extern const char usage_tokenize[];

/* `pagechat template -m MODEL -f CONVERSATION.json`: prints the rendered chat
 * prompt (as a JSON string) and its token ids (app/cmd_template.c). */
int cmd_template(int argc, char **argv, cli_device *dev);
extern const char usage_template[];

/* `pagechat info`: a model file and its KV-cache needs (app/cmd_info.c). */
int cmd_info(int argc, char **argv, cli_device *dev);
extern const char usage_info[];

/* Speed, quantization and quality: `bench` (app/cmd_bench.c), `quantize`
 * (app/cmd_quantize.c), `perplexity` (app/cmd_perplexity.c). */
int cmd_bench(int argc, char **argv, cli_device *dev);
extern const char usage_bench[];
int cmd_quantize(int argc, char **argv, cli_device *dev);
extern const char usage_quantize[];
int cmd_perplexity(int argc, char **argv, cli_device *dev);
extern const char usage_perplexity[];

/* `pagechat replay`: one conversation through the chat tab's turn logic,
 * without a terminal (app/cmd_replay.c). */
int cmd_replay(int argc, char **argv, cli_device *dev);
extern const char usage_replay[];

#endif
