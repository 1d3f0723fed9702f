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
	"usage: pagechat logits -m MODEL -p PROMPT [--chunk N]\n"
	"  Prints the logits of the last prompt position (BOS added) on one line, %.6g.\n";

int cmd_logits(int argc, char **argv, cli_device *dev)
{
	gen_cli g = {0};
	if (gen_cli_parse("logits", argc, argv, &g)) {
		fputs(usage_logits, stderr);
		return EXIT_USAGE;
	}
	err e = {0};
	llama_model *m = NULL;
	tok *tk = NULL;
	int32_t *ids = NULL;
	float *logits = NULL;
	int n = 0, rc = 1;
	if (cli_load(dev, g.model, 512, &m, &tk, &e) || !(ids = gen_cli_prompt_ids(tk, &g, &n, &e)))
		goto out;
	logits = xmalloc((size_t)llama_hp(m)->n_vocab * sizeof *logits);
	if (cli_kv_types(&g.kv, &e) ||
	    gen_logits_kv(m, ids, n, g.chunk, g.kv.k_type, g.kv.v_type, logits, &e))
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
