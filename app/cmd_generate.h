/* app/cmd_generate.h: the flags of `generate`, which `logits` takes too:
 * parsed and checked into a gen_cli, and the prompt they name tokenized.
 * Main thread only. */
#ifndef PAGECHAT_CMD_GENERATE_H
#define PAGECHAT_CMD_GENERATE_H

#include "app/opts.h"

struct tok;

typedef struct gen_cli {
	const char *model, *prompt, *file;   /* borrowed from argv */
	int n_predict, ctx, chunk;           /* -n (<= 0: unlimited), -c (0: the model's), --chunk */
	bool ids;                            /* --ids: print ids, not text */
	int beams;                           /* --beams W: beam search (0: sampling) */
	bool beams_all;                      /* --beams-all: every beam, best first */
	float length_penalty;                /* --length-penalty A (default 1) */
	samp_params sp;                      /* the sampling flags over the defaults */
	draft_opts draft;
	kv_opts kv;
	tier_opts tier;
} gen_cli;

/* Parses cmd's flags (argv[0..argc)) into *g, which starts zeroed; -1 after
 * printing the problem as one line "pagechat: CMD: ...". */
int gen_cli_parse(const char *cmd, int argc, char **argv, gen_cli *g);
/* The ids of g's prompt (-p, or the file of -f), BOS first, in a new array
 * (the caller frees it) of *n; NULL with e when the file cannot be read. */
int32_t *gen_cli_prompt_ids(const struct tok *tk, const gen_cli *g, int *n, err *e);

#endif
