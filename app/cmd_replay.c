/* app/cmd_replay.c: `pagechat replay`, one conversation without a terminal.
 *
 * Each line of TURNS.jsonl is a user message ({"user": "..."}); each goes
 * through exactly the chat tab's path: conv/conv.h builds the turn from
 * the token history (template, stop tokens, pinned system prompt, overflow
 * policy), the engine core answers it, and the answer's ids go back into the
 * history. One JSON line per turn on stdout: turn, prompt_tokens,
 * cached_tokens (from the prefix cache), gen_tokens, finish, text, and the
 * note when the context overflowed or the history was re-rendered. The
 * chat's tests and benchmarks use it; --fresh runs every turn on an empty
 * cache (the from-scratch reference for the same prompt ids). */
#include "app/cmds.h"

#include "conv/conv.h"
#include "engine/core.h"
#include "models/gguf.h"
#include "models/json.h"
#include "models/llama.h"
#include "models/tmpl.h"
#include "models/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_replay[] =
	"usage: pagechat replay -m MODEL -f TURNS.jsonl [--system TEXT] [-n N] [--temp T] [--seed S]\n"
	"                       [-c CTX] [--overflow drop|shift|refuse] [--block-size B]\n"
	"                       [--pool-blocks K] [--kv-type T] [--ids] [--fresh]\n"
	"  Runs one conversation through the chat tab's own code (template, token history,\n"
	"  engine, stop tokens): TURNS.jsonl holds one {\"user\": \"...\"} per line. Prints one\n"
	"  JSON line per turn: turn, prompt_tokens, cached_tokens, shifted_tokens, gen_tokens,\n"
	"  history_tokens (the conversation's tokens after the turn), finish, text (and note:\n"
	"  how a full context was handled).\n"
	"  -n N         tokens per answer (default 64; 0: until the context is full)\n"
	"  --temp T     sampling temperature (default 0: greedy); --seed S\n"
	"  -c CTX       context per conversation (default: the model's)\n"
	"  --overflow P what a full context does to the next turn: drop the oldest turns\n"
	"               (default), shift them out keeping the rest's K/V, or refuse\n"
	"  --ids        also print each turn's prompt_ids and the answer's ids\n"
	"  --fresh      every turn on an empty prefix cache (a from-scratch reference)\n"
	"  --kv-store DIR, --kv-store-max SIZE, --kv-host SIZE, --preempt P: the lower KV\n"
	"               tiers, as for batch (a second replay reads the first one's blocks)\n";

typedef struct replay_args {
	const char *model, *file, *system, *overflow;   /* borrowed from argv */
	int n_predict, ctx, bt, pool_blocks;
	samp_params sp;
	kv_opts kv;
	tier_opts tier;
	bool ids, fresh;
} replay_args;

/* One turn's answer as the events bring it. */
typedef struct replay_turn {
	conv *c;                 /* borrowed */
	int msg;
	bool done;
	enum core_finish finish;
	core_req_metrics m;
	char *error;             /* owned */
} replay_turn;

/* ---- input ---- */

/* Reads TURNS.jsonl into texts[*n] (new strings); 1 after printing FILE:LINE. */
static int load_turns(const char *path, char ***texts, int *n)
{
	err e = {0};
	size_t len;
	char *text = cli_read_file(path, &len, &e);
	if (!text)
		return cli_fail(&e);
	*texts = NULL;
	*n = 0;
	int line = 0, rc = 0;
	for (char *p = text, *end; rc == 0 && p < text + len; p = end + 1) {
		end = memchr(p, '\n', (size_t)(text + len - p));
		end = end ? end : text + len;
		line++;
		size_t k = (size_t)(end - p);
		while (k > 0 && (p[k - 1] == ' ' || p[k - 1] == '\r' || p[k - 1] == '\t'))
			k--;
		if (k == 0)
			continue;
		json_doc *d = json_parse(p, k, &e);
		const json *root = d ? json_root(d) : NULL, *u = json_get(root, "user");
		if (!d || !u || u->type != JSON_STR || root->n != 1) {
			fprintf(stderr, "pagechat: replay: %s:%d: %s\n", path, line,
				d ? "expected {\"user\": \"...\"}" : e.msg);
			rc = 1;
		} else {
			*texts = xrealloc(*texts, (size_t)(*n + 1) * sizeof **texts);
			(*texts)[(*n)++] = xstrndup(u->str, u->len);
		}
		json_free(d);
	}
	free(text);
	if (rc == 0 && *n == 0) {
		fprintf(stderr, "pagechat: replay: %s: no turns\n", path);
		rc = 1;
	}
	if (rc) { /* the lines read before a bad one */
		for (int i = 0; i < *n; i++)
			free((*texts)[i]);
		free(*texts);
		*texts = NULL;
		*n = 0;
	}
	return rc;
}

static int parse_replay(int argc, char **argv, replay_args *a)
{
	*a = (replay_args){.n_predict = 64, .bt = 16, .overflow = "drop", .sp = samp_default_params()};
	a->sp.temp = 0;
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &a->model, P_NONE}, {"-f", "--file", OPT_PATH, &a->file, P_NONE},
		{"--system", NULL, OPT_STR, &a->system, P_NONE},
		{"-n", "--n-predict", OPT_INT, &a->n_predict, P_MAX_TOKENS},
		{"-c", "--ctx", OPT_INT, &a->ctx, P_CONTEXT}, {"--overflow", NULL, OPT_STR, &a->overflow, P_NONE},
		{"--block-size", NULL, OPT_INT, &a->bt, P_BLOCK_SIZE},
		{"--pool-blocks", NULL, OPT_INT, &a->pool_blocks, P_POOL_BLOCKS},
		{"--ids", NULL, OPT_FLAG, &a->ids, P_NONE}, {"--fresh", NULL, OPT_FLAG, &a->fresh, P_NONE},
		SAMPLING_OPTS(&a->sp), KV_OPTS(&a->kv), TIER_OPTS(&a->tier),
	};
	const char *pos[1];
	if (cli_parse_opts("replay", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	const char *bad = !a->model || !a->file ? "needs -m MODEL and -f TURNS.jsonl"
		: conv_overflow_parse(a->overflow) < 0 ? "--overflow must be drop, shift or refuse" : NULL;
	if (bad) {
		fprintf(stderr, "pagechat: replay: %s (see pagechat replay --help)\n", bad);
		return EXIT_USAGE;
	}
	return 0;
}

/* ---- running ---- */

/* What one replay holds. */
typedef struct replay {
	const replay_args *a;
	core_params cp;
	conv_model cm;
	conv c;
	core *core;              /* owned; NULL between turns with --fresh */
	replay_turn *cur;        /* borrowed: the turn being answered */
	int n_failed;            /* turns that ended in an error */
	char first_error[256];   /* the first one's */
} replay;

static void on_event(void *ctx, const core_event *ev)
{
	replay_turn *t = ((replay *)ctx)->cur;
	if (ev->kind == CORE_EV_TOKEN) {
		conv_answer_id(t->c, t->msg, ev->token);
		conv_append(t->c, t->msg, ev->text, ev->text_len);
		return;
	}
	t->done = true;
	t->finish = ev->finish;
	t->m = ev->m;
	if (ev->finish == FIN_ERROR)
		t->error = xstrndup(ev->text, ev->text_len);
	conv_answer_end(t->c, t->msg, core_finish_name(ev->finish), &ev->m);
}

static void put_ids(const char *key, const int32_t *ids, int n)
{
	printf(", \"%s\": [", key);
	for (int i = 0; i < n; i++)
		printf(i ? ",%d" : "%d", ids[i]);
	printf("]");
}

static void put_string(const char *key, const char *s, size_t len)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;
	json_put_str(&buf, &n, &cap, s, len);
	printf(", \"%s\": %s", key, buf);
	free(buf);
}

static void print_turn(int k, const conv_turn *turn, const replay_turn *t, bool ids)
{
	const conv_msg *x = &t->c->msgs[t->msg];
	printf("{\"turn\": %d, \"prompt_tokens\": %d, \"cached_tokens\": %d, \"shifted_tokens\": %d, "
	       "\"gen_tokens\": %d, \"history_tokens\": %d, \"finish\": \"%s\"", k, turn->n_prompt, t->m.n_cached,
	       t->m.n_shifted, t->m.n_gen, conv_history_tokens(t->c), x->finish);
	put_string("text", x->text, x->len);
	if (x->note)
		put_string("note", x->note, strlen(x->note));
	if (x->error)
		put_string("error", x->error, strlen(x->error));
	if (ids) {
		put_ids("prompt_ids", turn->prompt, turn->n_prompt);
		put_ids("ids", x->ids + x->n_open, MAX(0, x->n_ids - x->n_open));
	}
	printf("}\n");
	fflush(stdout);
}

/* Runs core until the turn's answer is done; -1 with e on a model failure. */
static int run_turn(core *c, const replay_turn *t, err *e)
{
	while (!t->done)
		if (core_step(c, e) < 0)
			return -1;
	return 0;
}

/* Asks one turn: the user's text, the engine's answer, one output line. */
static int ask(replay *r, int k, const char *text, err *e)
{
	conv_add(&r->c, CONV_USER, text, strlen(text));
	conv_turn turn;
	replay_turn t = {.c = &r->c};
	int rc = 0;
	r->cur = &t;
	if (conv_turn_start(&r->c, &r->cm, MAX(r->a->n_predict, 0), &turn, e) == 0) {
		if (!r->core && !(r->core = core_new(&r->cp, on_event, r, e))) {
			conv_turn_deinit(&turn);
			return -1;
		}
		core_request q = {.id = k, .conv = 1, .samp = r->a->sp};
		conv_turn_request(&turn, &q);
		q.samp.seed = r->a->sp.seed + (uint64_t)k;
		t.msg = turn.msg;
		err sub;
		core_submit(r->core, &q, &sub); /* a refusal arrives as a FIN_ERROR event */
		rc = run_turn(r->core, &t, e);
	} else {
		t.msg = turn.msg; /* the answer carries the error; the conversation goes on */
	}
	if (rc == 0)
		print_turn(k, &turn, &t, r->a->ids);
	const conv_msg *x = &r->c.msgs[t.msg];
	if (rc == 0 && !strcmp(x->finish, "error") && r->n_failed++ == 0)
		snprintf(r->first_error, sizeof r->first_error, "%s",
			 x->error ? x->error : t.error ? t.error : "(no message)");
	conv_turn_deinit(&turn);
	free(t.error);
	if (r->a->fresh) {
		core_free(r->core);
		r->core = NULL;
	}
	return rc;
}

/* Every turn in order; -1 with e on a model failure, or when every turn
 * failed (nothing was answered: a run to fail, not to pass). */
static int replay_all(replay *r, char **turns, int n, err *e)
{
	for (int k = 0; k < n; k++)
		if (ask(r, k + 1, turns[k], e))
			return -1;
	if (r->n_failed == n) {
		err_set(e, "replay: every turn failed (%d of %d); the first: %s", n, n, r->first_error);
		return -1;
	}
	return 0;
}

static int setup(cli_device *dev, replay *r, llama_model **m, tok **tk, err *e)
{
	const replay_args *a = r->a;
	kv_opts kv = a->kv;
	enum tmpl_family fam;
	if (cli_kv_types(&kv, e) || cli_load(dev, a->model, 512, m, tk, e) ||
	    tmpl_from_gguf(llama_file(*m), &fam, e) < 0)
		return -1;
	enum conv_overflow ov = (enum conv_overflow)conv_overflow_parse(a->overflow);
	if (ov == CONV_SHIFT && !llama_can_shift(*m)) {
		err_set(e, "replay: --overflow shift needs a backend that can rotate stored K rows (kv_shift); "
			"the %s backend cannot: use --overflow drop or refuse, or --device cpu", llama_kern(*m)->name);
		return -1;
	}
	const llama_hparams *hp = llama_hp(*m);
	r->cp = (core_params){.model = *m, .tok = *tk, .block_tokens = a->bt, .pool_blocks = a->pool_blocks,
			      .n_ctx = a->ctx, .kv_type_k = kv.k_type, .kv_type_v = kv.v_type};
	if (cli_tier_setup(&a->tier, llama_kv_token_bytes(hp, kv.k_type, kv.v_type) * a->bt, &r->cp, e))
		return -1;
	conv_model_init(&r->cm, *tk, fam, a->ctx > 0 ? a->ctx : hp->n_ctx_train, a->bt, ov);
	conv_init(&r->c, "replay", "", a->system ? a->system : "");
	return 0;
}

int cmd_replay(int argc, char **argv, cli_device *dev)
{
	replay_args a;
	int rc = parse_replay(argc, argv, &a);
	if (rc)
		return rc;
	char **turns = NULL;
	int n = 0;
	if (load_turns(a.file, &turns, &n))
		return 1;
	replay r = {.a = &a};
	llama_model *m = NULL;
	tok *tk = NULL;
	err e = {0};
	rc = setup(dev, &r, &m, &tk, &e) || replay_all(&r, turns, n, &e) ? cli_fail(&e) : 0;
	if (r.core) {
		core_stats st;
		core_get_stats(r.core, &st);
		cli_print_tiers(stderr, r.core, &st);
	}
	core_free(r.core);
	conv_deinit(&r.c);
	tok_free(tk);
	llama_free(m);
	for (int i = 0; i < n; i++)
		free(turns[i]);
	free(turns);
	return rc;
}
