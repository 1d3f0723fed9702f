/* app/cmd_generate.c: `pagechat generate`: one prompt through the engine
 * core, its continuation streamed to stdout and the speed to stderr. Its
 * flags are shared with `logits` (app/cmd_generate.h). */
#include "app/cmd_generate.h"

#include "app/cmds.h"

#include "engine/core.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "models/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_generate[] =
	"usage: pagechat generate -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
	"                         [--min-p P] [--repeat-penalty R] [--seed S] [--ids] [-c CTX]\n"
	"                         [-md DRAFT.gguf | --draft ngram] [--draft-k K] [--draft-adaptive]\n"
	"  Prints the continuation of PROMPT (BOS added) and a timing line on stderr.\n"
	"  -n N      tokens to generate (default 128; -1: until EOS or the context is full)\n"
	"  --temp T  0 is greedy (default 0.8); --ids prints generated ids instead of text\n"
	"  -c CTX    context limit in tokens (default: the model's training context)\n"
	"  -f FILE   read the prompt from FILE instead of -p\n"
	"  -md FILE  speculative decoding with a draft model (same vocabulary); --draft ngram\n"
	"            drafts by prompt lookup instead; --draft-k tokens per step (default 4)\n"
	"  --kv-type T  the KV cache's rows: f16 (default), f32, q8 or fp8; --kv-type-k and\n"
	"            --kv-type-v set K and V apart\n";

int gen_cli_parse(const char *cmd, int argc, char **argv, gen_cli *g)
{
	g->sp = samp_default_params();
	g->n_predict = 128;
	opt opts[] = {
		{"-m", "--model", OPT_STR, &g->model}, {"-p", "--prompt", OPT_STR, &g->prompt},
		{"-f", "--file", OPT_STR, &g->file}, {"-n", "--n-predict", OPT_INT, &g->n_predict},
		{"-c", "--ctx", OPT_INT, &g->ctx}, {"--chunk", NULL, OPT_INT, &g->chunk},
		SAMPLING_OPTS(&g->sp), {"--repeat-last-n", NULL, OPT_INT, &g->sp.repeat_last_n},
		{"--ids", NULL, OPT_FLAG, &g->ids},
		DRAFT_OPTS(&g->draft), KV_OPTS(&g->kv),
	};
	const char *pos[1];
	int n_pos = cli_parse_opts(cmd, argc, argv, opts, ARRAY_LEN(opts), pos, 0);
	if (n_pos < 0)
		return -1;
	const char *bad = NULL;
	if (!g->model)
		bad = "needs -m MODEL";
	else if ((g->prompt == NULL) == (g->file == NULL))
		bad = "needs either -p PROMPT or -f FILE";
	else if (g->ctx < 0 || g->chunk < 0 || g->n_predict < -1)
		bad = "-c, --chunk and -n must not be negative (-n -1 means unlimited)";
	else
		bad = cli_sampling_check(&g->sp);
	if (bad) {
		fprintf(stderr, "pagechat: %s: %s\n", cmd, bad);
		return -1;
	}
	return 0;
}

int32_t *gen_cli_prompt_ids(const tok *tk, const gen_cli *g, int *n, err *e)
{
	size_t len = g->prompt ? strlen(g->prompt) : 0;
	char *owned = g->file ? cli_read_file(g->file, &len, e) : NULL;
	if (g->file && !owned)
		return NULL;
	int32_t *ids = cli_encode(tk, owned ? owned : g->prompt, len, TOK_ADD_BOS, n);
	free(owned);
	return ids;
}

typedef struct gen_out {
	const tok *tk;
	bool ids, done;
	int n;
	double t_first;
	enum core_finish fin;
	core_req_metrics m;
	char error[512];
} gen_out;

static void on_gen_event(void *ctx, const core_event *ev)
{
	gen_out *o = ctx;
	if (ev->kind == CORE_EV_TOKEN) {
		if (o->n++ == 0)
			o->t_first = now_s();
		if (o->ids)
			printf(o->n > 1 ? " %d" : "%d", ev->token);
		else
			fwrite(ev->text, 1, ev->text_len, stdout);
		fflush(stdout);
		return;
	}
	o->done = true;
	o->fin = ev->finish;
	o->m = ev->m;
	snprintf(o->error, sizeof o->error, "%.*s", (int)ev->text_len, ev->text);
}

static int run_generate(cli_device *dev, const gen_cli *g)
{
	err e = {0};
	llama_model *m = NULL, *dm = NULL;
	tok *tk = NULL, *dt = NULL;
	core *c = NULL;
	int32_t *ids = NULL;
	int n = 0, rc = 1, chunk = g->chunk > 0 ? g->chunk : 512;
	if (cli_load(dev, g->model, chunk, &m, &tk, &e) || !(ids = gen_cli_prompt_ids(tk, g, &n, &e)))
		goto out;
	int n_ctx = g->ctx > 0 ? g->ctx : llama_hp(m)->n_ctx_train;
	kv_opts kv = g->kv;
	if (cli_kv_types(&kv, &e) || cli_check_memory(dev, g->model, llama_hp(m), (int64_t)gguf_data_bytes(llama_file(m)),
						      n_ctx, &kv, chunk, &e))
		goto out;
	core_params cp = {.model = m, .tok = tk, .block_tokens = 16, .pool_blocks = n_ctx / 16 + 2,
			  .n_ctx = n_ctx, .step_tokens = chunk, .max_running = 1,
			  .kv_type_k = kv.k_type, .kv_type_v = kv.v_type};
	if (cli_setup_draft(dev, &g->draft, chunk, &cp, &dm, &dt, &e))
		goto out;
	gen_out o = {.tk = tk, .ids = g->ids};
	if (!(c = core_new(&cp, on_gen_event, &o, &e)))
		goto out;
	core_request r = {.prompt = ids, .n_prompt = n, .samp = g->sp, .n = 1,
			  .max_tokens = g->n_predict < 0 ? 0 : g->n_predict};
	double t0 = now_s();
	if (g->n_predict == 0)
		goto done;
	if (core_submit(c, &r, &e))
		goto out;
	while (!o.done)
		if (core_step(c, &e) < 0)
			goto out;
	if (o.fin == FIN_ERROR) {
		err_set(&e, "%s", o.error);
		goto out;
	}
done:
	putchar('\n');
	fflush(stdout);
	if (g->n_predict != 0 && o.fin != FIN_ERROR && o.done) {
		double t_end = now_s(), t_first = o.n ? o.t_first : t_end;
		fprintf(stderr, "prompt: %d tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s; stop: %s\n",
			n, n / MAX(t_first - t0, 1e-9), o.m.n_gen,
			MAX(o.m.n_gen - 1, 0) / MAX(t_end - t_first, 1e-9), core_finish_name(o.fin));
		core_stats st;
		core_get_stats(c, &st);
		cli_print_spec(stderr, &st);
		if (o.fin == FIN_CONTEXT)
			fprintf(stderr, "pagechat: generate: stopped at the context limit of %d tokens (raise -c)\n",
				n_ctx);
	}
	rc = g->n_predict == 0 || o.done ? 0 : 1;
out:
	if (rc)
		cli_fail(&e);
	core_free(c);
	free(ids);
	tok_free(dt);
	llama_free(dm);
	tok_free(tk);
	llama_free(m);
	return rc;
}

int cmd_generate(int argc, char **argv, cli_device *dev)
{
	gen_cli g = {0};
	if (gen_cli_parse("generate", argc, argv, &g)) {
		fputs(usage_generate, stderr);
		return EXIT_USAGE;
	}
	return run_generate(dev, &g);
}
