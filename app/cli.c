/* app/cli.c: flag parsing and the headless commands.
 *
 * Each command is a row in a table (name, handler, usage). Flags are parsed by
 * one table-driven parser so every command reports unknown flags, missing
 * values and malformed numbers the same way: "pagechat: <cmd>: <problem>" on
 * one line, exit status 2 for usage errors and 1 for failures. */
#include "app/cli.h"

#include "app/cmds.h"

#include "engine/core.h"
#include "kernels/kvq.h"
#include "engine/gen.h"
#include "engine/sample.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "models/tok.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
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

/* ---- tokenize ---- */

static const char usage_tokenize[] =
	"usage: pagechat tokenize -m MODEL [--no-bos] [--special] [-f FILE | TEXT]\n"
	"  Prints the token ids of TEXT (or of FILE's contents), space-separated.\n"
	"  --no-bos   do not add the BOS token\n"
	"  --special  parse special-token text such as <s> (templates only)\n";

static int cmd_tokenize(int argc, char **argv, cli_device *dev)
{
	(void)dev;
	const char *model = NULL, *file = NULL, *pos[1];
	bool no_bos = false, special = false;
	opt opts[] = {
		{"-m", "--model", OPT_STR, &model}, {"-f", "--file", OPT_STR, &file},
		{"--no-bos", NULL, OPT_FLAG, &no_bos}, {"--special", NULL, OPT_FLAG, &special},
	};
	int n_pos = cli_parse_opts("tokenize", argc, argv, opts, ARRAY_LEN(opts), pos, 1);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (!model || (n_pos == 0) == (file == NULL)) {
		fprintf(stderr, "pagechat: tokenize: needs -m MODEL and either TEXT or -f FILE\n%s",
			usage_tokenize);
		return EXIT_USAGE;
	}
	err e = {0};
	size_t len = n_pos ? strlen(pos[0]) : 0;
	char *owned = file ? cli_read_file(file, &len, &e) : NULL;
	if (file && !owned)
		return cli_fail(&e);
	gguf_file *f = gguf_open(model, &e);
	tok *tk = f ? tok_new(f, &e) : NULL;
	int rc = 0;
	if (!tk) {
		rc = cli_fail(&e);
	} else {
		int n;
		unsigned flags = (no_bos ? 0 : TOK_ADD_BOS) | (special ? TOK_PARSE_SPECIAL : 0);
		int32_t *ids = cli_encode(tk, owned ? owned : pos[0], len, flags, &n);
		for (int i = 0; i < n; i++)
			printf(i ? " %d" : "%d", ids[i]);
		putchar('\n');
		free(ids);
	}
	tok_free(tk);
	gguf_close(f);
	free(owned);
	return rc;
}

/* ---- info ---- */

static const char usage_info[] =
	"usage: pagechat info MODEL [-c CTX] [-v]\n"
	"  Prints the architecture, dimensions, parameter count, tensor types and sizes,\n"
	"  and the KV-cache memory per token, per 16-token block and for CTX tokens\n"
	"  (default: the model's training context). -v lists every tensor.\n";

static void print_bytes(const char *label, double bytes)
{
	char b[32];
	printf("%s%s", label, cli_fmt_bytes(b, sizeof b, bytes));
}

static void print_tensor_summary(const gguf_file *f, bool verbose)
{
	int64_t count[DT_COUNT] = {0}, bytes[DT_COUNT] = {0};
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		count[t->type]++;
		bytes[t->type] += t->n_bytes;
		if (verbose)
			printf("  %-32s %-6s {%lld, %lld, %lld, %lld} %lld bytes\n", t->name,
			       dtype_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
			       (long long)t->ne[2], (long long)t->ne[3], (long long)t->n_bytes);
	}
	for (int t = 0; t < DT_COUNT; t++)
		if (count[t]) {
			printf("tensors %-6s %lld, ", dtype_name((uint32_t)t), (long long)count[t]);
			print_bytes("", (double)bytes[t]);
			putchar('\n');
		}
}

static void print_kv_plan(const llama_hparams *hp, int64_t ctx)
{
	static const int order[] = {KV_F16, KV_F32, KV_Q8, KV_FP8};
	printf("KV cache = 2 x %d layers x %d KV heads x %d head dim x bytes per element "
	       "(8-bit types add an f16 scale per head and row)\n", hp->n_layers, hp->n_kv_heads, hp->head_dim);
	int64_t f16 = llama_kv_token_bytes(hp, KV_F16, KV_F16);
	for (size_t i = 0; i < ARRAY_LEN(order); i++) {
		int64_t tok = llama_kv_token_bytes(hp, order[i], order[i]);
		printf("KV %s: %lld bytes/token, ", kv_type_name(order[i]), (long long)tok);
		print_bytes("", (double)tok * 16);
		printf(" per 16-token block, ");
		print_bytes("", (double)tok * (double)ctx);
		printf(" for %lld tokens, %lld tokens/GiB (%.2fx f16)\n", (long long)ctx,
		       (long long)((1ll << 30) / tok), (double)f16 / (double)tok);
	}
}

/* What fits on the GPU: weights (all layers, or how many), then KV tokens in
 * the rest of the --gpu-mem-fraction share. */
static void print_gpu_plan(cli_device *dev, const gguf_file *f, const llama_hparams *hp, const llama_plan *plan)
{
	err e = {0};
	const kern_ops *K = cli_kern(dev, &e);
	int64_t fr = 0, tot = 0;
	K->mem_info(&fr, &tot);
	int64_t share = MIN(fr, (int64_t)((double)tot * dev->opts.mem_fraction) - (tot - fr));
	int64_t layer_bytes = 0, other = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		*(strncmp(t->name, "blk.", 4) ? &other : &layer_bytes) += (int64_t)t->n_bytes;
	}
	int64_t per_layer = layer_bytes / MAX(1, hp->n_layers), room = share - plan->scratch_bytes - other;
	int fit = per_layer > 0 ? (int)MIN((int64_t)hp->n_layers, MAX(0, room) / per_layer) : hp->n_layers;
	char a[32], b[32], c[32];
	printf("GPU (%s): %s free of %s; --gpu-mem-fraction %.2f gives %s\n", K->name,
	       cli_fmt_bytes(a, sizeof a, (double)fr), cli_fmt_bytes(b, sizeof b, (double)tot), dev->opts.mem_fraction,
	       cli_fmt_bytes(c, sizeof c, (double)MAX(0, share)));
	if (fit < hp->n_layers) {
		printf("GPU plan: %d of %d layers fit (%s each, plus %s outside the layers and %s scratch); "
		       "partial offload (-ngl) is not implemented yet: use --device cpu\n", fit, hp->n_layers,
		       cli_fmt_bytes(a, sizeof a, (double)per_layer), cli_fmt_bytes(b, sizeof b, (double)other),
		       cli_fmt_bytes(c, sizeof c, (double)plan->scratch_bytes));
		return;
	}
	int64_t kv_room = room - per_layer * hp->n_layers;
	printf("GPU plan: all %d layers fit; the rest holds %lld tokens of f16 KV (%lld of f32, %lld of q8)\n",
	       hp->n_layers, (long long)(kv_room / llama_kv_token_bytes(hp, KV_F16, KV_F16)),
	       (long long)(kv_room / llama_kv_token_bytes(hp, KV_F32, KV_F32)),
	       (long long)(kv_room / llama_kv_token_bytes(hp, KV_Q8, KV_Q8)));
}

static int cmd_info(int argc, char **argv, cli_device *dev)
{
	const char *pos[1];
	int ctx = 0;
	bool verbose = false;
	opt opts[] = {{"-c", "--ctx", OPT_INT, &ctx}, {"-v", "--verbose", OPT_FLAG, &verbose}};
	int n_pos = cli_parse_opts("info", argc, argv, opts, ARRAY_LEN(opts), pos, 1);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (n_pos != 1 || ctx < 0) {
		fprintf(stderr, "pagechat: info: needs one MODEL file (and CTX >= 0)\n%s", usage_info);
		return EXIT_USAGE;
	}
	err e = {0};
	gguf_file *f = gguf_open(pos[0], &e);
	if (!f)
		return cli_fail(&e);
	llama_hparams hp;
	int rc = 0;
	if (llama_read_hparams(f, &hp, &e)) {
		rc = cli_fail(&e);
		goto out;
	}
	int64_t n_params = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f); i++)
		n_params += gguf_tensor_at(f, i)->n_elems;
	printf("file %s (GGUF v%u, %lld tensors, %lld metadata keys)\n", gguf_name(f),
	       gguf_version(f), (long long)gguf_n_tensors(f), (long long)gguf_n_kv(f));
	printf("architecture %s\n", hp.arch);
	printf("dims %d, layers %d, heads %d, KV heads %d, head dim %d, FFN %d, vocab %d\n",
	       hp.dim, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn_dim, hp.n_vocab);
	printf("rope dims %d, base %g, %s; RMSNorm eps %g\n", hp.n_rot, hp.rope_base,
	       hp.rope_neox ? "neox pairs" : "adjacent pairs", hp.eps);
	printf("parameters %lld (%.3g %s), ", (long long)n_params,
	       (double)n_params / (n_params >= 1000000000 ? 1e9 : 1e6), n_params >= 1000000000 ? "B" : "M");
	print_bytes("weights ", (double)gguf_data_bytes(f));
	putchar('\n');
	print_tensor_summary(f, verbose);
	printf("context length %d (training)\n", hp.n_ctx_train);
	print_kv_plan(&hp, ctx ? ctx : hp.n_ctx_train);
	int64_t tokens = ctx ? ctx : hp.n_ctx_train;
	llama_plan plan;
	llama_plan_memory(&hp, (int64_t)gguf_data_bytes(f), tokens, KV_F16, KV_F16, 512, &plan);
	char line[256], a[32];
	cli_plan_line(line, sizeof line, &plan, tokens);
	printf("memory plan (f16 KV, the default; --kv-type changes it): %s\n", line);
	printf("memory available %s: %s\n", cli_fmt_bytes(a, sizeof a, (double)cli_mem_available()),
	       plan.total_bytes <= cli_mem_available() ? "fits" : "does NOT fit");
	if (cli_on_device(dev))
		print_gpu_plan(dev, f, &hp, &plan);
	else if (cli_check_memory(dev, gguf_name(f), &hp, (int64_t)gguf_data_bytes(f), tokens, NULL, 512, &e))
		rc = cli_fail(&e);
out:
	gguf_close(f);
	return rc;
}

/* ---- generate and logits ---- */

static const char usage_generate[] =
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

typedef struct gen_cli {
	const char *model, *prompt, *file;
	int n_predict, ctx, chunk;
	bool ids;
	samp_params sp;
	draft_opts draft;
	kv_opts kv;
} gen_cli;

static int32_t *prompt_ids(const tok *tk, const gen_cli *g, int *n, err *e)
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
	if (cli_load(dev, g->model, chunk, &m, &tk, &e) || !(ids = prompt_ids(tk, g, &n, &e)))
		goto out;
	int n_ctx = g->ctx > 0 ? g->ctx : llama_hp(m)->n_ctx_train;
	if (cli_kv_types((kv_opts *)&g->kv, &e) ||
	    cli_check_memory(dev, g->model, llama_hp(m), (int64_t)gguf_data_bytes(llama_file(m)), n_ctx, &g->kv, chunk, &e))
		goto out;
	core_params cp = {.model = m, .tok = tk, .block_tokens = 16, .pool_blocks = n_ctx / 16 + 2,
			  .n_ctx = n_ctx, .step_tokens = chunk, .max_running = 1,
			  .kv_type_k = (uint8_t)g->kv.k_type, .kv_type_v = (uint8_t)g->kv.v_type};
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

static int parse_gen_cli(const char *cmd, int argc, char **argv, gen_cli *g)
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

static int cmd_generate(int argc, char **argv, cli_device *dev)
{
	gen_cli g = {0};
	if (parse_gen_cli("generate", argc, argv, &g)) {
		fputs(usage_generate, stderr);
		return EXIT_USAGE;
	}
	return run_generate(dev, &g);
}

static const char usage_logits[] =
	"usage: pagechat logits -m MODEL -p PROMPT [--chunk N]\n"
	"  Prints the logits of the last prompt position (BOS added) on one line, %.6g.\n";

static int cmd_logits(int argc, char **argv, cli_device *dev)
{
	gen_cli g = {0};
	if (parse_gen_cli("logits", argc, argv, &g)) {
		fputs(usage_logits, stderr);
		return EXIT_USAGE;
	}
	err e = {0};
	llama_model *m = NULL;
	tok *tk = NULL;
	int32_t *ids = NULL;
	float *logits = NULL;
	int n = 0, rc = 1;
	if (cli_load(dev, g.model, 512, &m, &tk, &e) || !(ids = prompt_ids(tk, &g, &n, &e)))
		goto out;
	logits = xmalloc((size_t)llama_hp(m)->n_vocab * sizeof *logits);
	if (cli_kv_types(&g.kv, &e) ||
	    gen_logits_kv(m, ids, n, g.chunk, (uint8_t)g.kv.k_type, (uint8_t)g.kv.v_type, logits, &e))
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

/* ---- dispatch ---- */

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv, cli_device *dev);
	const char *usage;
	const char *summary;
} commands[] = {
	{"chat", cmd_chat, usage_chat, "the full-screen chat (what pagechat alone runs)"},
	{"generate", cmd_generate, usage_generate, "continue a prompt"},
	{"logits", cmd_logits, usage_logits, "print the last position's logits"},
	{"batch", cmd_batch, usage_batch, "run many requests through the engine (JSONL)"},
	{"tokenize", cmd_tokenize, usage_tokenize, "print the token ids of a text"},
	{"template", cmd_template, cmd_template_usage, "render a conversation with the chat template"},
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
	fprintf(out, "Every command also takes --device cuda|cpu|auto (default auto: the GPU when one is\n"
		     "found), --gpu-mem-fraction F (share of GPU memory to fill, default 0.9) and -ngl N\n"
		     "(layers on the GPU: -1 all, 0 none).\n");
	fprintf(out, "The demo model is %s.\n", DEMO_MODEL);
}

int cli_main(int argc, char **argv)
{
	cli_device dev = {.opts = DEVICE_OPTS_DEFAULT};
	if (cli_take_device_flags(&argc, argv, &dev.opts))
		return EXIT_USAGE;
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))) {
		print_usage(stdout);
		return 0;
	}
	/* no command, or flags first: the chat */
	if (argc < 2 || argv[1][0] == '-') {
		if (wants_help(argc - 1, argv + 1)) {
			fputs(usage_chat, stdout);
			return 0;
		}
		return cmd_chat(argc - 1, argv + 1, &dev);
	}
	for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
		if (strcmp(argv[1], commands[i].name))
			continue;
		if (wants_help(argc - 2, argv + 2)) {
			fputs(commands[i].usage, stdout);
			return 0;
		}
		return commands[i].run(argc - 2, argv + 2, &dev);
	}
	fprintf(stderr, "pagechat: unknown command '%s'\n", argv[1]);
	print_usage(stderr);
	return EXIT_USAGE;
}
