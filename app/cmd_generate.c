/* app/cmd_generate.c: `pagechat generate`: one prompt through the engine
 * core, its continuation streamed to stdout and the speed to stderr. Its
 * flags are shared with `logits` (app/cmd_generate.h). */
#include "app/cmd_generate.h"

#include "app/cmds.h"

#include "engine/core.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "models/tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_generate[] =
	"usage: pagechat generate -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
	"                         [--min-p P] [--repeat-penalty R] [--seed S] [--ids] [-c CTX]\n"
	"                         [-md DRAFT.gguf | --draft ngram] [--draft-k K] [--draft-adaptive]\n"
	"                         [--beams W [--beams-all] [--length-penalty A]]\n"
	"  Prints the continuation of PROMPT (BOS added) and a timing line on stderr.\n"
	"  -n N      tokens to generate (default 128; -1 or 0: until EOS or the context is full)\n"
	"  --temp T  0 is greedy (default 0.8); --ids prints generated ids instead of text\n"
	"  -c CTX    context limit in tokens (default: the model's training context)\n"
	"  -f FILE   read the prompt from FILE instead of -p\n"
	"  -md FILE  speculative decoding with a draft model (same vocabulary; --draft FILE\n"
	"            too, as in the chat); --draft ngram drafts by prompt lookup instead;\n"
	"            --draft-k tokens per step (default 4)\n"
	"  --kv-type T  the KV cache's rows: f16 (default), f32, q8 or fp8; --kv-type-k and\n"
	"            --kv-type-v set K and V apart\n"
	"  --kv-store DIR  keep KV blocks on disk and reuse them across runs (--kv-store-max\n"
	"            SIZE, default 8GiB); --kv-host SIZE host memory for cached and swapped\n"
	"            blocks; --preempt auto|swap|recompute\n"
	"  --beams W beam search of width 1..16 on shared KV blocks (sampling flags do not\n"
	"            apply); prints the best beam, or with --beams-all W lines LOGPROB<TAB>text\n"
	"            (or ids), best first (\\n, \\t and \\\\ escaped in the text); the order is by\n"
	"            logprob / length^A (--length-penalty, default 1)\n";

int gen_cli_parse(const char *cmd, int argc, char **argv, gen_cli *g)
{
	g->sp = samp_default_params();
	g->n_predict = 128;
	g->chunk = 512;
	g->length_penalty = 1.0f;
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &g->model, P_NONE}, {"-p", "--prompt", OPT_STR, &g->prompt, P_NONE},
		{"-f", "--file", OPT_PATH, &g->file, P_NONE},
		{"-n", "--n-predict", OPT_INT, &g->n_predict, P_MAX_TOKENS},
		{"-c", "--ctx", OPT_INT, &g->ctx, P_CONTEXT}, {"--chunk", NULL, OPT_INT, &g->chunk, P_CHUNK},
		SAMPLING_OPTS(&g->sp), {"--repeat-last-n", NULL, OPT_INT, &g->sp.repeat_last_n, P_REPEAT_LAST_N},
		{"--ids", NULL, OPT_FLAG, &g->ids, P_NONE}, {"--beams", NULL, OPT_INT, &g->beams, P_BEAMS},
		{"--beams-all", NULL, OPT_FLAG, &g->beams_all, P_NONE},
		{"--length-penalty", NULL, OPT_FLOAT, &g->length_penalty, P_LENGTH_PENALTY},
		DRAFT_OPTS(&g->draft), KV_OPTS(&g->kv), TIER_OPTS(&g->tier),
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
	else if ((g->beams_all || g->length_penalty != 1.0f) && !g->beams)
		bad = "--beams-all and --length-penalty need --beams W";
	else if (g->beams && (g->draft.model || g->draft.kind))
		bad = "--beams and a draft (-md, --draft) do not go together";
	else
		bad = cli_draft_check(&g->draft);
	if (bad) {
		fprintf(stderr, "pagechat: %s: %s (see pagechat %s --help)\n", cmd, bad, cmd);
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

/* One beam's result (beam requests arrive whole, at their end). */
typedef struct beam_res {
	int32_t *ids;            /* owned */
	int n_ids, cap_ids;
	char *text;              /* owned */
	int text_len, text_cap;
	double logprob;
} beam_res;

typedef struct gen_out {
	const tok *tk;
	bool ids, done;
	int n;
	double t_first;
	enum core_finish fin;
	core_req_metrics m;
	char error[512];
	int beams, n_finished;   /* beam search: width, completions finished */
	bool write_failed;       /* stdout refused text (full disk, closed) */
	beam_res beam[16];
} gen_out;

static void collect_beam(gen_out *o, const core_event *ev)
{
	beam_res *b = &o->beam[ev->index];
	if (ev->kind == CORE_EV_TOKEN) {
		xgrow(&b->ids, &b->cap_ids, (int64_t)b->n_ids + 1, sizeof *b->ids);
		b->ids[b->n_ids++] = ev->token;
		xgrow(&b->text, &b->text_cap, (int64_t)b->text_len + (int64_t)ev->text_len + 1, 1);
		memcpy(b->text + b->text_len, ev->text, ev->text_len);
		b->text_len += (int)ev->text_len;
		return;
	}
	b->logprob = ev->m.logprob;
	if (ev->index == 0 || ev->finish == FIN_ERROR) {
		o->fin = ev->finish;
		o->m = ev->m;
		snprintf(o->error, sizeof o->error, "%.*s", (int)ev->text_len, ev->text);
	}
	o->done = ++o->n_finished == o->beams;
}

/* Writes text[0..n) on one line: newline, tab and backslash escaped. */
static void put_escaped(const char *s, int n)
{
	for (int i = 0; i < n; i++)
		if (s[i] == '\n' || s[i] == '\t' || s[i] == '\\')
			printf("\\%c", s[i] == '\n' ? 'n' : s[i] == '\t' ? 't' : '\\');
		else
			putchar(s[i]);
}

static void print_beams(const gen_out *o, bool all)
{
	for (int r = 0; r < (all ? o->beams : 1); r++) {
		const beam_res *b = &o->beam[r];
		if (all)
			printf("%.6f\t", b->logprob);
		for (int i = 0; i < b->n_ids; i++)
			if (o->ids)
				printf(i ? " %d" : "%d", b->ids[i]);
		if (!o->ids && all)
			put_escaped(b->text ? b->text : "", b->text_len);
		else if (!o->ids)
			fwrite(b->text ? b->text : "", 1, (size_t)b->text_len, stdout);
		if (all && r + 1 < o->beams)
			putchar('\n');
	}
}

static void free_beams(gen_out *o)
{
	for (int r = 0; r < o->beams; r++) {
		free(o->beam[r].ids);
		free(o->beam[r].text);
	}
}

/* The sampling flags given with --beams: they do not apply, say so. */
static void note_unused_sampling(const samp_params *p)
{
	samp_params d = samp_default_params();
	if (p->temp != d.temp || p->top_k != d.top_k || p->top_p != d.top_p || p->min_p != d.min_p ||
	    p->repeat_penalty != d.repeat_penalty || p->seed != d.seed)
		fprintf(stderr, "pagechat: generate: note: sampling flags (--temp, --top-k, --top-p, --min-p, "
			"--repeat-penalty, --seed) do not apply to beam search; ignored\n");
}

static void on_gen_event(void *ctx, const core_event *ev)
{
	gen_out *o = ctx;
	if (o->beams) {
		collect_beam(o, ev);
		return;
	}
	if (ev->kind == CORE_EV_TOKEN) {
		if (o->n++ == 0)
			o->t_first = now_s();
		if (o->ids)
			printf(o->n > 1 ? " %d" : "%d", ev->token);
		else
			fwrite(ev->text, 1, ev->text_len, stdout);
		if (fflush(stdout)) {
			o->write_failed = true;   /* the run stops: nobody reads this */
			cli_stdout_errno = errno;
		}
		return;
	}
	o->done = true;
	o->fin = ev->finish;
	o->m = ev->m;
	snprintf(o->error, sizeof o->error, "%.*s", (int)ev->text_len, ev->text);
}

/* The timing lines on stderr after a finished run. */
static void print_timing(core *c, const gen_out *o, const gen_cli *g, int n, int n_ctx, double t0)
{
	double t_end = now_s(), t_first = o->n ? o->t_first : t_end;
	if (g->beams)
		fprintf(stderr, "prompt: %d tokens, %.1f tok/s; %d beams of %d tokens: %.2f ms per round; "
			"stop: %s\n", n, n / MAX(o->m.ttft_ms / 1e3, 1e-9), g->beams, o->beam[0].n_ids,
			o->m.tpot_ms, core_finish_name(o->fin));
	else
		fprintf(stderr, "prompt: %d tokens, %.1f tok/s; generated: %d tokens, %.1f tok/s; stop: %s\n",
			n, n / MAX(t_first - t0, 1e-9), o->m.n_gen,
			MAX(o->m.n_gen - 1, 0) / MAX(t_end - t_first, 1e-9), core_finish_name(o->fin));
	core_stats st;
	core_get_stats(c, &st);
	cli_print_spec(stderr, &st);
	cli_print_tiers(stderr, c, &st);
	if (o->fin == FIN_CONTEXT)
		fprintf(stderr, "pagechat: generate: stopped at the context limit of %d tokens (raise -c)\n", n_ctx);
}

/* The engine's parameters for g once the model and prompt (n tokens) are
 * known; the pool holds the context (beams: what the beams need). */
static core_params gen_params(llama_model *m, tok *tk, const gen_cli *g, const kv_opts *kv, int n, int n_ctx)
{
	core_params cp = {.model = m, .tok = tk, .block_tokens = 16, .pool_blocks = n_ctx / 16 + 2,
			  .n_ctx = n_ctx, .step_tokens = g->chunk, .max_running = MAX(1, g->beams),
			  .kv_type_k = kv->k_type, .kv_type_v = kv->v_type};
	if (g->beams) {
		/* the prompt once, then each beam its answer and a copy of one block */
		int64_t answer = g->n_predict <= 0 ? n_ctx - n : MIN(g->n_predict, n_ctx - n);
		cp.pool_blocks = (n + 15) / 16 + (int64_t)g->beams * ((answer + 15) / 16 + 2);
	}
	return cp;
}

/* Steps c until the request is done; -1 with e when it fails, or with e
 * empty when stdout cannot take the text (a full disk, a closed pipe: the
 * run stops, and cli_main's last flush reports it). */
static int run_request(core *c, const core_request *r, gen_out *o, err *e)
{
	if (core_submit(c, r, e))
		return -1;
	while (!o->done && !o->write_failed)
		if (core_step(c, e) < 0)
			return -1;
	if (o->write_failed)
		return -1;
	if (o->fin == FIN_ERROR) {
		err_set(e, "%s", o->error);
		return -1;
	}
	return 0;
}

static int run_generate(cli_device *dev, const gen_cli *g)
{
	err e = {0};
	llama_model *m = NULL, *dm = NULL;
	tok *tk = NULL, *dt = NULL;
	core *c = NULL;
	int32_t *ids = NULL;
	int n = 0, rc = 1;
	gen_out o = {0};
	kv_opts kv = g->kv;
	llama_hparams hp;
	int64_t weights;
	/* the memory plan first: nothing is allocated for a context that cannot fit */
	if (cli_kv_types(&kv, &e) || cli_read_plan(g->model, &hp, &weights, &e))
		goto out;
	cli_plan_kv(dev, g->ctx > 0 ? g->ctx : 0, 0, &kv);
	int n_ctx = g->ctx > 0 ? g->ctx : hp.n_ctx_train;
	if (cli_check_memory(dev, g->model, &hp, weights, n_ctx, &kv, g->chunk, &e) ||
	    cli_load(dev, g->model, g->chunk, &m, &tk, &e) || !(ids = gen_cli_prompt_ids(tk, g, &n, &e)))
		goto out;
	core_params cp = gen_params(m, tk, g, &kv, n, n_ctx);
	if (cli_tier_setup(&g->tier, llama_kv_token_bytes(&hp, kv.k_type, kv.v_type) * cp.block_tokens, &cp, &e))
		goto out;
	if (g->beams)
		note_unused_sampling(&g->sp);
	if (cli_setup_draft(dev, &g->draft, g->chunk, &cp, &dm, &dt, &e))
		goto out;
	o = (gen_out){.tk = tk, .ids = g->ids, .beams = g->beams};
	if (!(c = core_new(&cp, on_gen_event, &o, &e)))
		goto out;
	core_request r = {.prompt = ids, .n_prompt = n, .samp = g->sp, .n = 1,
			  .max_tokens = MAX(g->n_predict, 0), .beams = g->beams, .length_penalty = g->length_penalty};
	double t0 = now_s();
	if (run_request(c, &r, &o, &e))
		goto out;
	if (g->beams)
		print_beams(&o, g->beams_all);
	putchar('\n');
	fflush(stdout);
	print_timing(c, &o, g, n, n_ctx, t0);
	rc = 0;
out:
	if (rc && e.msg[0])
		cli_fail(&e);
	free_beams(&o);
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
	if (gen_cli_parse("generate", argc, argv, &g))
		return EXIT_USAGE;
	return run_generate(dev, &g);
}
