/* app/cmd_logits.c: `pagechat logits`: the logits of a prompt's last
 * position, for checking the forward pass against a reference. Takes
 * generate's flags (app/cmd_generate.h). */
#include "app/cmd_generate.h"

#include "app/cmds.h"

#include "engine/gen.h"
#include "models/llama.h"
#include "models/tok.h"

#include <stdio.h>
#include <stdlib.h>

const char usage_logits[] =
	"usage: pagechat logits -m MODEL -p PROMPT [-f FILE] [-c CTX] [--chunk N] [--kv-type T]\n"
	"  Prints the logits of the last prompt position (BOS added) on one line, %.6g.\n"
	"  The prompt must fit the context (-c, default: the model's training context).\n";

int cmd_logits(int argc, char **argv, cli_device *dev)
{
	gen_cli g = {0};
	if (gen_cli_parse("logits", argc, argv, &g))
		return EXIT_USAGE;
	err e = {0};
	llama_model *m = NULL;
	tok *tk = NULL;
	int32_t *ids = NULL;
	float *logits = NULL;
	int n = 0, rc = 1;
	llama_hparams hp;
	int64_t weights;
	if (cli_kv_types(&g.kv, &e) || cli_read_plan(g.model, &hp, &weights, &e))
		goto out;
	int n_ctx = g.ctx > 0 ? g.ctx : hp.n_ctx_train;
	/* the prompt's KV is the pool: planned for the context, never the prompt's length */
	if (cli_check_memory(dev, g.model, &hp, weights, n_ctx, &g.kv, g.chunk, &e) ||
	    cli_load(dev, g.model, g.chunk, &m, &tk, &e) || !(ids = gen_cli_prompt_ids(tk, &g, &n, &e)))
		goto out;
	if (n > n_ctx) {
		err_set(&e, "logits: the prompt is %d tokens but the context holds %d: shorten it or raise -c",
			n, n_ctx);
		goto out;
	}
	logits = xmalloc((size_t)llama_hp(m)->n_vocab * sizeof *logits);
	if (gen_logits_kv(m, ids, n, g.chunk, g.kv.k_type, g.kv.v_type, logits, &e))
		goto out;
	for (int i = 0; i < llama_hp(m)->n_vocab; i++)
		printf(i ? " %.6g" : "%.6g", logits[i]);
	putchar('\n');
	rc = 0;
out:
	if (rc)
		cli_fail(&e);
	free(logits);
	free(ids);
	tok_free(tk);
	llama_free(m);
	return rc;
}
