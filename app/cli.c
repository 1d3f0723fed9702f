/* app/cli.c: the command dispatcher.
 *
 * Each command is a row in a table (name, handler, usage, summary); the
 * commands live in app/cmd_*.c and parse their flags through app/opts.h, so
 * every command reports unknown flags, missing values and malformed numbers
 * the same way: "pagechat: <cmd>: <problem>" on one line, exit status 2 for
 * usage errors and 1 for failures. The device flags are taken out of argv
 * first, wherever they stand, and handed to the command. */
#include "app/cli.h"

#include "app/cmds.h"

#include "base/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool wants_help(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return false;
}

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv, cli_device *dev);
	const char *usage;
	const char *summary;
} commands[] = {
	{"chat", cmd_chat, usage_chat, "the full-screen chat (what pagechat alone runs)"},
	{"demo", cmd_demo, usage_demo, "a scripted tour of KV block sharing in the chat"},
	{"generate", cmd_generate, usage_generate, "continue a prompt"},
	{"logits", cmd_logits, usage_logits, "print the last position's logits"},
	{"batch", cmd_batch, usage_batch, "run many requests through the engine (JSONL)"},
	{"serve", cmd_serve, usage_serve, "serve the OpenAI HTTP API on the engine"},
	{"tokenize", cmd_tokenize, usage_tokenize, "print the token ids of a text"},
	{"template", cmd_template, usage_template, "render a conversation with the chat template"},
	{"replay", cmd_replay, usage_replay, "run a conversation through the chat's turn logic (JSONL)"},
	{"info", cmd_info, usage_info, "describe a model file and its KV-cache needs"},
	{"bench", cmd_bench, usage_bench, "measure prompt and generation speed"},
	{"quantize", cmd_quantize, usage_quantize, "write a model with quantized weights"},
	{"perplexity", cmd_perplexity, usage_perplexity, "perplexity of a model over a text file"},
};

static void print_usage(FILE *out)
{
	fputs("usage: pagechat [chat] [options]    the full-screen chat (pagechat chat --help)\n"
	      "       pagechat COMMAND [options]   (pagechat COMMAND --help for details)\n"
	      "commands:\n", out);
	for (size_t i = 0; i < ARRAY_LEN(commands); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "Every command also takes --device cuda|cpu|fake|auto (default auto: the GPU when one\n"
		     "is found; fake: the CPU kernels behind device buffers in host memory, to try placement\n"
		     "without a GPU), --gpu-mem-fraction F (share of device memory to fill, default 0.9),\n"
		     "-ngl N|auto (layers on the device, the last ones: -1 all, 0 none, auto the most that\n"
		     "fit, the default; the rest run on the CPU) and --device-mem SIZE (the device memory to\n"
		     "plan with: the fake device's size, a cap on a GPU's, or for info a device not there).\n");
	fprintf(out, "The demo model is %s.\n", DEMO_MODEL);
	/* one table (config/params.h) for the flags, the config and this */
	fputs("Ranges of the numbers (flag / config.yaml key: range; the same everywhere):\n", out);
	for (int id = P_NONE + 1; id < P_COUNT; id++) {
		const param_range *r = param_get((enum param_id)id);
		char range[160];
		fprintf(out, "  %-18s %-26s %s\n", r->flag ? r->flag : "-", r->key ? r->key : "-",
			param_range_text((enum param_id)id, range, sizeof range));
	}
}

/* print_usage to stdout in one write: past stdio's buffer (4 KiB) a failed
 * write would come from an intermediate flush, whose errno is gone by the
 * time cli_close_stdout reports it. */
static void print_usage_stdout(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (!m) {
		print_usage(stdout);
		return;
	}
	print_usage(m);
	fclose(m);
	if (fwrite(buf, 1, len, stdout) != len || fflush(stdout))
		cli_stdout_errno = errno;
	free(buf);
}

/* A closed descriptor 0, 1 or 2 would be taken by the next file opened (a
 * model, an output): the text meant for stdout would land there. Each is
 * held by /dev/null opened read-only, so writes to it fail and are
 * reported (cli_close_stdout) instead of vanishing. */
static void hold_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int got = open("/dev/null", O_RDONLY);
			if (got >= 0 && got != fd) {
				dup2(got, fd);
				close(got);
			}
		}
}

/* Flushes and closes stdout: a write that failed (a full disk, a closed
 * descriptor, a broken pipe) turns status 0 into 1 with a message. */
static int cli_close_stdout(int status)
{
	bool bad = ferror(stdout) != 0;
	int er = 0;
	if (fflush(stdout))
		bad = true, er = errno;
	if (fclose(stdout) && !bad)
		bad = true, er = errno;
	if (!bad)
		return status;
	er = er ? er : cli_stdout_errno;
	fprintf(stderr, "pagechat: cannot write the output (standard output): %s\n",
		er ? strerror(er) : "a write failed (a full disk, or the output closed?)");
	return status ? status : 1;
}

static int dispatch(int argc, char **argv, cli_device *dev);

int cli_main(int argc, char **argv)
{
	hold_std_fds();
	file_cleanup_on_signals();
	cli_device dev = {.opts = DEVICE_OPTS_DEFAULT};
	int status = dispatch(argc, argv, &dev);
	return cli_close_stdout(status);
}

static int dispatch(int argc, char **argv, cli_device *dev)
{
	if (cli_take_device_flags(&argc, argv, &dev->opts))
		return EXIT_USAGE;
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))) {
		print_usage_stdout();
		return 0;
	}
	/* no command, or flags first: the chat */
	if (argc < 2 || argv[1][0] == '-') {
		if (wants_help(argc - 1, argv + 1)) {
			fputs(usage_chat, stdout);
			return 0;
		}
		return cmd_chat(argc - 1, argv + 1, dev);
	}
	for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
		if (strcmp(argv[1], commands[i].name))
			continue;
		if (wants_help(argc - 2, argv + 2)) {
			fputs(commands[i].usage, stdout);
			return 0;
		}
		return commands[i].run(argc - 2, argv + 2, dev);
	}
	fprintf(stderr, "pagechat: unknown command '%s' (pagechat --help lists them)\n", argv[1]);
	return EXIT_USAGE;
}
