/* app/cmd_bench_spec.c: `pagechat bench --spec`, generation with and without
 * a draft in the same run. Every run goes through the engine core with the
 * same greedy request, so the tokens must be identical and the ratio of the
 * speeds is what speculative decoding buys on this machine. With --prompts,
 * a prompt set through the chat template: per category, no draft against
 * the draft at a fixed k and at the adaptive k, in alternating rounds. */
#include "app/bench.h"

#include "engine/core.h"
#include "models/tmpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec_run {
	double t_first, t_last;
	int n;
	bool done;
	int32_t *ids;            /* borrowed; [cap] the tokens, or NULL */
	int cap;
} spec_run;

static void on_event(void *ctx, const core_event *ev)
{
	spec_run *r = ctx;
	if (ev->kind == CORE_EV_TOKEN) {
		double t = now_s();
		if (r->n == 0)
			r->t_first = t;
		if (r->ids && r->n < r->cap)
			r->ids[r->n] = ev->token;
		r->n++;
		r->t_last = t;
	} else {
		r->done = true;
	}
}

/* Runs req to its end on a new core; *r gets the tokens and their times. */
static int run_req(core_params *cp, const core_request *req, spec_run *r, core_stats *st, err *e)
{
	int32_t *ids = r->ids;
	int cap = r->cap;
	*r = (spec_run){.ids = ids, .cap = cap};
	core *c = core_new(cp, on_event, r, e);
	if (!c)
		return -1;
	int rc = core_submit(c, req, e);
	while (!rc && !r->done)
		rc = core_step(c, e) < 0 ? -1 : 0;
	core_get_stats(c, st);
	core_free(c);
	return rc;
}

/* Decode tokens/s after the first token. */
static double tps_of(const spec_run *r)
{
	return r->n > 1 ? (r->n - 1) / MAX(r->t_last - r->t_first, 1e-9) : 0;
}

static void add_stats(core_stats *sum, const core_stats *st)
{
	sum->spec_steps += st->spec_steps;
	sum->spec_proposed += st->spec_proposed;
	sum->spec_accepted += st->spec_accepted;
	for (int j = 0; j < SPEC_MAX_K; j++) {
		sum->spec_pos_proposed[j] += st->spec_pos_proposed[j];
		sum->spec_pos_accepted[j] += st->spec_pos_accepted[j];
	}
	sum->spec_dec_steps += st->spec_dec_steps;
	sum->spec_dec_tokens += st->spec_dec_tokens;
	sum->plain_dec_steps += st->plain_dec_steps;
	sum->plain_dec_tokens += st->plain_dec_tokens;
}

/* ---- one prompt, with and without the draft ---- */

static int bench_one_prompt(core_params *cp, int32_t *prompt, int n_prompt, int n_gen, int reps, err *e)
{
	samp_params sp = samp_default_params();
	sp.temp = 0;
	core_request req = {.prompt = prompt, .n_prompt = n_prompt, .samp = sp, .max_tokens = n_gen, .n = 1};
	core_params plain = *cp;
	plain.draft_kind = DRAFT_NONE;
	double with = 0, without = 0;
	core_stats st = {0}, st1;
	for (int i = 0; i < reps; i++) {
		spec_run a = {0}, b = {0};
		if (run_req(&plain, &req, &a, &st1, e) || run_req(cp, &req, &b, &st1, e))
			return -1;
		without += tps_of(&a) / reps;
		with += tps_of(&b) / reps;
		add_stats(&st, &st1);
	}
	printf("tg without draft %.1f t/s, with draft %.1f t/s: speed-up %.2fx\n", without, with,
	       with / MAX(without, 1e-9));
	cli_print_spec(stdout, &st);
	return 0;
}

/* ---- a prompt set ---- */

enum { CFG_PLAIN, CFG_FIXED, CFG_ADAPTIVE, N_CFG };

/* One prompt's runs: ids of the first plain run (the reference), tokens and
 * decode seconds per configuration and round, the draft's figures summed. */
typedef struct prompt_runs {
	int32_t *prompt;         /* owned; [n_prompt] */
	int n_prompt;
	int cat;                 /* index into the category names */
	int32_t *ref;            /* owned; [n_gen] */
	int n_ref;
	double *tokens, *secs;   /* owned; [N_CFG][reps] */
	core_stats st[N_CFG];
} prompt_runs;

typedef struct set_bench {
	core_params cfg[N_CFG];
	bench_prompts ps;
	prompt_runs *runs;       /* owned; [ps.n] */
	const char *cats[BENCH_MAX_PROMPTS]; /* borrowed from ps */
	int n_cats;
	int n_gen, reps;
	int32_t *ids;            /* owned; [n_gen] a run's tokens */
	int32_t stop[2];
	int n_stop;
	int mismatches;
} set_bench;

/* Renders prompt i (system message, user message, the assistant's turn
 * opened) and tokenizes it; without a chat template, the texts joined. */
static int32_t *encode_prompt(const set_bench *b, enum tmpl_family fam, const tok *tk, int i, int *n, err *e)
{
	const bench_prompt *bp = &b->ps.v[i];
	if (fam == TMPL_NONE || fam == TMPL_UNKNOWN) {
		sbuf t = {0};
		sb_printf(&t, "%s%s%s", b->ps.system ? b->ps.system : "", b->ps.system ? "\n\n" : "", bp->text);
		int32_t *ids = cli_encode(tk, t.p, t.n, TOK_ADD_BOS, n);
		sb_free(&t);
		return ids;
	}
	tmpl_msg m[2];
	size_t k = 0;
	if (b->ps.system)
		m[k++] = (tmpl_msg){"system", b->ps.system, strlen(b->ps.system)};
	m[k++] = (tmpl_msg){"user", bp->text, strlen(bp->text)};
	tmpl_prompt p = {0};
	if (tmpl_render(fam, m, k, true, &p, e))
		return NULL;
	*n = tmpl_encode(&p, tk, NULL, 0);
	int32_t *ids = *n > 0 ? xmalloc((size_t)*n * sizeof *ids) : NULL;
	if (ids)
		tmpl_encode(&p, tk, ids, *n);
	tmpl_prompt_deinit(&p);
	return ids;
}

/* Reads the prompts, tokenizes them, sizes the engine and the three
 * configurations from cp (its draft). */
static int set_up(set_bench *b, const char *path, const core_params *cp, const tok *tk, enum tmpl_family fam,
		  err *e)
{
	if (bench_prompts_load(&b->ps, path, e))
		return -1;
	b->runs = xcalloc((size_t)b->ps.n, sizeof *b->runs);
	int n_max = 0;
	for (int i = 0; i < b->ps.n; i++) {
		prompt_runs *r = &b->runs[i];
		r->prompt = encode_prompt(b, fam, tk, i, &r->n_prompt, e);
		if (!r->prompt || r->n_prompt <= 0) {
			err_prefix(e, "%s:%d: prompt", path, b->ps.v[i].line);
			return -1;
		}
		n_max = MAX(n_max, r->n_prompt);
		int c = 0;
		while (c < b->n_cats && strcmp(b->cats[c], b->ps.v[i].category))
			c++;
		if (c == b->n_cats)
			b->cats[b->n_cats++] = b->ps.v[i].category;
		r->cat = c;
		r->ref = xmalloc((size_t)b->n_gen * sizeof *r->ref);
		r->tokens = xcalloc((size_t)N_CFG * (size_t)b->reps, sizeof *r->tokens);
		r->secs = xcalloc((size_t)N_CFG * (size_t)b->reps, sizeof *r->secs);
	}
	b->ids = xmalloc((size_t)b->n_gen * sizeof *b->ids);
	int n_ctx = n_max + b->n_gen + SPEC_MAX_K + 2;
	for (int c = 0; c < N_CFG; c++) {
		b->cfg[c] = *cp;
		b->cfg[c].n_ctx = n_ctx;
		b->cfg[c].pool_blocks = n_ctx / 16 + 8;
		b->cfg[c].draft_adaptive = c == CFG_ADAPTIVE;
	}
	b->cfg[CFG_PLAIN].draft_kind = DRAFT_NONE;
	b->n_stop = fam == TMPL_NONE || fam == TMPL_UNKNOWN ? 0 : tmpl_stop_ids(fam, tk, b->stop, 2);
	return 0;
}

static void set_free(set_bench *b)
{
	for (int i = 0; b->runs && i < b->ps.n; i++) {
		free(b->runs[i].prompt);
		free(b->runs[i].ref);
		free(b->runs[i].tokens);
		free(b->runs[i].secs);
	}
	free(b->runs);
	free(b->ids);
	bench_prompts_free(&b->ps);
}

static const char *cfg_name(int c)
{
	static const char *const names[N_CFG] = {"no draft", "fixed k", "adaptive k"};
	return names[c];
}

/* Prompt i under configuration c in round r: timed, and its tokens checked
 * against the first plain run's (loudly on stderr when they differ). */
static int run_prompt(set_bench *b, int i, int c, int r, err *e)
{
	prompt_runs *pr = &b->runs[i];
	samp_params sp = samp_default_params();
	sp.temp = 0;
	core_request req = {.prompt = pr->prompt, .n_prompt = pr->n_prompt, .samp = sp, .max_tokens = b->n_gen,
			    .n = 1, .stop_ids = b->stop, .n_stop_ids = b->n_stop};
	spec_run run = {.ids = b->ids, .cap = b->n_gen};
	core_stats st;
	if (run_req(&b->cfg[c], &req, &run, &st, e))
		return -1;
	int n = MIN(run.n, b->n_gen);
	pr->tokens[c * b->reps + r] = MAX(run.n - 1, 0);
	pr->secs[c * b->reps + r] = run.n > 1 ? run.t_last - run.t_first : 0;
	add_stats(&pr->st[c], &st);
	if (r == 0 && c == CFG_PLAIN && pr->n_ref == 0) {
		memcpy(pr->ref, b->ids, (size_t)n * sizeof *b->ids);
		pr->n_ref = n;
		return 0;
	}
	int at = 0;
	while (at < n && at < pr->n_ref && b->ids[at] == pr->ref[at])
		at++;
	if (at < n || n != pr->n_ref) {
		b->mismatches++;
		fprintf(stderr, "pagechat: MISMATCH: prompt %d (%s, line %d), %s, round %d: %d tokens, the first plain "
			"run %d; they differ from token %d on (%d here, %d there)\n", i + 1, b->ps.v[i].category,
			b->ps.v[i].line, cfg_name(c), r + 1, n, pr->n_ref, at, at < n ? b->ids[at] : -1,
			at < pr->n_ref ? pr->ref[at] : -1);
	}
	return 0;
}

/* Category k's decode tokens/s under configuration c in round r (all its
 * prompts' tokens over all their seconds). */
static double cat_tps(const set_bench *b, int k, int c, int r)
{
	double t = 0, s = 0;
	for (int i = 0; i < b->ps.n; i++)
		if (b->runs[i].cat == k) {
			t += b->runs[i].tokens[c * b->reps + r];
			s += b->runs[i].secs[c * b->reps + r];
		}
	return s > 0 ? t / s : 0;
}

/* Medians over the rounds of the category's tokens/s under c, and of its
 * ratio to no draft in the same round. */
static void cat_medians(const set_bench *b, int k, int c, double *tps, double *ratio)
{
	double v[64], q[64];
	int n = MIN(b->reps, 64);
	for (int r = 0; r < n; r++) {
		v[r] = cat_tps(b, k, c, r);
		double p = cat_tps(b, k, CFG_PLAIN, r);
		q[r] = p > 0 ? v[r] / p : 0;
	}
	*tps = median_of(v, n);
	*ratio = median_of(q, n);
}

/* The median over the rounds of prompt i's tokens/s under c over no draft's. */
static double prompt_ratio(const set_bench *b, int i, int c)
{
	const prompt_runs *r = &b->runs[i];
	double q[64];
	int n = MIN(b->reps, 64);
	for (int k = 0; k < n; k++) {
		double p = r->secs[CFG_PLAIN * b->reps + k] > 0 ? r->tokens[CFG_PLAIN * b->reps + k] /
								   r->secs[CFG_PLAIN * b->reps + k] : 0;
		double v = r->secs[c * b->reps + k] > 0 ? r->tokens[c * b->reps + k] / r->secs[c * b->reps + k] : 0;
		q[k] = p > 0 ? v / p : 0;
	}
	return median_of(q, n);
}

/* Load-independent figures of s: acceptance (%) and tokens per decode step. */
static void draft_figures(const core_stats *s, double *acc, double *per_step)
{
	*acc = 100.0 * (double)s->spec_accepted / (double)MAX(1, s->spec_proposed);
	int64_t steps = s->spec_dec_steps + s->plain_dec_steps;
	*per_step = (double)(s->spec_dec_tokens + s->plain_dec_tokens) / (double)MAX(1, steps);
}

static void print_set(const set_bench *b)
{
	printf("%-10s %7s %6s | %9s | %9s %7s %6s %8s | %9s %7s %6s %8s\n", "category", "prompts", "tokens",
	       "plain t/s", "fixed t/s", "speed", "acc", "tok/step", "adapt t/s", "speed", "acc", "tok/step");
	for (int k = 0; k < b->n_cats; k++) {
		core_stats st[N_CFG] = {0};
		int n_prompts = 0;
		double tokens = 0;
		for (int i = 0; i < b->ps.n; i++)
			if (b->runs[i].cat == k) {
				n_prompts++;
				tokens += b->runs[i].n_ref;
				for (int c = 0; c < N_CFG; c++)
					add_stats(&st[c], &b->runs[i].st[c]);
			}
		double tps[N_CFG], ratio[N_CFG];
		for (int c = 0; c < N_CFG; c++)
			cat_medians(b, k, c, &tps[c], &ratio[c]);
		printf("%-10s %7d %6.0f | %9.1f", b->cats[k], n_prompts, tokens, tps[CFG_PLAIN]);
		for (int c = CFG_FIXED; c < N_CFG; c++) {
			double acc, per_step;
			draft_figures(&st[c], &acc, &per_step);
			printf(" | %9.1f %6.2fx %5.1f%% %8.2f", tps[c], ratio[c], acc, per_step);
		}
		putchar('\n');
	}
	printf("per prompt: acceptance, tokens per decode step, median speed-up; fixed k | adaptive k\n");
	for (int i = 0; i < b->ps.n; i++) {
		const prompt_runs *r = &b->runs[i];
		printf("  %2d %-10s %4d prompt, %4d answer tokens:", i + 1, b->ps.v[i].category, r->n_prompt, r->n_ref);
		for (int c = CFG_FIXED; c < N_CFG; c++) {
			double acc, per_step;
			draft_figures(&r->st[c], &acc, &per_step);
			printf(" %s %5.1f%% %5.2f %5.2fx", c == CFG_FIXED ? "" : "|", acc, per_step, prompt_ratio(b, i, c));
		}
		putchar('\n');
	}
}

/* Rounds of every prompt under the three configurations, alternating their
 * order (plain first, then last), after one untimed warm-up run. */
static int run_set(set_bench *b, err *e)
{
	if (run_prompt(b, 0, CFG_PLAIN, 0, e))
		return -1;
	b->runs[0].n_ref = 0; /* the warm-up's tokens are checked again by the first round */
	memset(&b->runs[0].st, 0, sizeof b->runs[0].st);
	for (int r = 0; r < b->reps; r++) {
		for (int i = 0; i < b->ps.n; i++)
			for (int j = 0; j < N_CFG; j++)
				if (run_prompt(b, i, r % 2 ? N_CFG - 1 - j : j, r, e))
					return -1;
		fprintf(stderr, "bench --spec: round %d of %d done\n", r + 1, b->reps);
	}
	return 0;
}

static int bench_set(const char *model, const char *path, const core_params *cp, const tok *tk,
		     enum tmpl_family fam, const draft_opts *d, int n_gen, int reps, err *e)
{
	set_bench b = {.n_gen = n_gen, .reps = MIN(reps, 64)};
	int rc = -1;
	if (set_up(&b, path, cp, tk, fam, e) || run_set(&b, e))
		goto out;
	printf("model %s, draft %s, k %d fixed and adaptive (%d..%d, pausing), %s, %d prompts, <= %d tokens each, "
	       "greedy, %d rounds alternating; speeds are medians over the rounds, speed-ups the median of each "
	       "round's ratio to no draft\n", model, d->model ? d->model : "ngram", cp->draft_k > 0 ? cp->draft_k : 4,
	       0, MIN(2 * (cp->draft_k > 0 ? cp->draft_k : 4), SPEC_MAX_K),
	       fam == TMPL_NONE || fam == TMPL_UNKNOWN ? "no chat template" : tmpl_name(fam), b.ps.n, n_gen,
	       b.reps);
	print_set(&b);
	if (b.mismatches) {
		err_set(e, "bench --spec: %d runs gave other tokens than the first run without a draft (see the "
			"MISMATCH lines): greedy decoding with drafts must equal decoding without", b.mismatches);
		goto out;
	}
	printf("tokens: every run equals the first run without a draft (%d runs checked)\n", b.ps.n * N_CFG * b.reps);
	rc = 0;
out:
	set_free(&b);
	return rc;
}

int bench_spec(cli_device *dev, const char *model, const draft_opts *d, const char *prompts, int n_gen, int reps,
	       int n_threads, err *e)
{
	llama_model *m = cli_open_model(dev, model, 64, n_threads, e);
	tok *tk = m ? tok_new(llama_file(m), e) : NULL;
	llama_model *dm = NULL;
	tok *dt = NULL;
	int rc = -1;
	if (!tk)
		goto out;
	core_params cp = {.model = m, .tok = tk, .block_tokens = 16, .pool_blocks = (n_gen + 64) / 16 + 8,
			  .n_ctx = n_gen + 64, .step_tokens = 64, .max_running = 1};
	if (cli_setup_draft(dev, d, 64, &cp, &dm, &dt, e))
		goto out;
	if (cp.draft_kind == DRAFT_NONE) {
		err_set(e, "bench --spec needs -md DRAFT.gguf or --draft ngram");
		goto out;
	}
	if (prompts) {
		enum tmpl_family fam;
		if (tmpl_from_gguf(llama_file(m), &fam, e) == 0)
			rc = bench_set(model, prompts, &cp, tk, fam, d, n_gen, reps, e);
		goto out;
	}
	const char *text = "Once upon a time, there was a little girl named Lily. She liked to play in the park.";
	int32_t prompt[128];
	int n_prompt = MIN(tok_encode(tk, text, strlen(text), TOK_ADD_BOS, prompt, 128), 128);
	printf("model %s, draft %s, k %d%s, %d tokens greedy, %d reps\n", model,
	       d->model ? d->model : "ngram", d->k > 0 ? d->k : 4, d->adaptive ? " adaptive" : "", n_gen, reps);
	rc = bench_one_prompt(&cp, prompt, n_prompt, n_gen, reps, e);
out:
	tok_free(dt);
	llama_free(dm);
	tok_free(tk);
	llama_free(m);
	return rc;
}
