/* tools/greedy_ids.c: greedy continuations of prompts given as token ids.
 *
 *   greedy_ids MODEL PROMPTS [-n N] [-t THREADS]
 *
 * PROMPTS holds one prompt a line: its token ids, space-separated (BOS and
 * template tokens included, nothing is added). For each, prints one line:
 * the N greedy tokens that follow (argmax, the first on ties; default 64),
 * with F32 K/V and nothing stopping early, as llama.cpp's reference tables
 * were made (../shared/testdata/README.md). tools/fidelity.py reads it. A
 * measuring tool: nothing here is checked. */
#include "engine/gen.h"
#include "kernels/kern.h"
#include "models/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 8192

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* One line of ids into ids[]; returns the count (-1 at the end). */
static int read_prompt(FILE *f, int32_t *ids)
{
	static char line[MAX_IDS * 8];
	if (!fgets(line, sizeof line, f))
		return -1;
	int n = 0;
	for (char *p = line, *end; n < MAX_IDS; p = end) {
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		ids[n++] = (int32_t)v;
	}
	return n;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: greedy_ids MODEL PROMPTS [-n N] [-t THREADS]\n");
		return 2;
	}
	int n_gen = 64, threads = 0;
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-n"))
			n_gen = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-t"))
			threads = atoi(argv[i + 1]);
	}
	err e = {0};
	llama_model *m = llama_open(argv[1], &(llama_params){.n_threads = threads}, &e);
	FILE *f = m ? fopen(argv[2], "r") : NULL;
	if (!f) {
		fprintf(stderr, "greedy_ids: %s\n", m ? argv[2] : e.msg);
		llama_free(m);
		return 1;
	}
	static int32_t ids[MAX_IDS], out[MAX_IDS + 1];
	int n, rc = 0;
	while (!rc && (n = read_prompt(f, ids)) >= 0) {
		gen_params gp = {.samp = samp_default_params(), .n_predict = n_gen, .n_ctx = n + n_gen + 1,
				 .block_tokens = 16};
		gp.samp.temp = 0;
		gen_stats st;
		out[0] = 0;
		if (n == 0 || (rc = gen_run(m, NULL, ids, n, &gp, collect, out, &st, &e))) {
			fprintf(stderr, "greedy_ids: %s\n", n ? e.msg : "an empty prompt");
			rc = 1;
			break;
		}
		for (int i = 1; i <= out[0]; i++)
			printf("%s%d", i > 1 ? " " : "", out[i]);
		printf("\n");
	}
	fclose(f);
	llama_free(m);
	return rc;
}
