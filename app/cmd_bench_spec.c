/* app/cmd_bench_spec.c: `pagechat bench --spec`, generation with and without
 * a draft in the same run. Both runs go through the engine core with the same
 * greedy request, so the tokens are identical and the ratio of the two speeds
 * is what speculative decoding buys on this machine. */
#include "app/bench.h"

#include "engine/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spec_run {
	double t_first, t_last;
	int n;
	bool done;
} spec_run;

static void on_event(void *ctx, const core_event *ev)
{
	spec_run *r = ctx;
	if (ev->kind == CORE_EV_TOKEN) {
		double t = now_s();
		if (r->n++ == 0)
			r->t_first = t;
		r->t_last = t;
	} else {
		r->done = true;
	}
}

/* Generates n_gen tokens greedily; decode tokens/s after the first token. */
static int run_once(core_params *cp, const int32_t *prompt, int n_prompt, int n_gen, double *tps,
		    core_stats *st, err *e)
{
	spec_run r = {0};
	core *c = core_new(cp, on_event, &r, e);
	if (!c)
		return -1;
	samp_params sp = samp_default_params();
	sp.temp = 0;
	core_request req = {.prompt = prompt, .n_prompt = n_prompt, .samp = sp, .max_tokens = n_gen, .n = 1};
	int rc = core_submit(c, &req, e);
	while (!rc && !r.done)
		rc = core_step(c, e) < 0 ? -1 : 0;
	*tps = r.n > 1 ? (r.n - 1) / MAX(r.t_last - r.t_first, 1e-9) : 0;
	core_get_stats(c, st);
	core_free(c);
	return rc;
}

int bench_spec(cli_device *dev, const char *model, const draft_opts *d, int n_gen, int reps, int n_threads,
	       err *e)
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
	const char *text = "Once upon a time, there was a little girl named Lily. She liked to play in the park.";
	int32_t prompt[128];
	int n_prompt = MIN(tok_encode(tk, text, strlen(text), TOK_ADD_BOS, prompt, 128), 128);
	core_params plain = cp;
	plain.draft_kind = DRAFT_NONE;
	double with = 0, without = 0;
	core_stats st = {0}, st1;
	for (int i = 0; i < reps; i++) {
		double a, b;
		if (run_once(&plain, prompt, n_prompt, n_gen, &a, &st1, e) ||
		    run_once(&cp, prompt, n_prompt, n_gen, &b, &st1, e))
			goto out;
		without += a / reps;
		with += b / reps;
		st.spec_steps += st1.spec_steps;
		st.spec_proposed += st1.spec_proposed;
		st.spec_accepted += st1.spec_accepted;
		for (int j = 0; j < SPEC_MAX_K; j++) {
			st.spec_pos_proposed[j] += st1.spec_pos_proposed[j];
			st.spec_pos_accepted[j] += st1.spec_pos_accepted[j];
		}
	}
	printf("model %s, draft %s, k %d%s, %d tokens greedy, %d reps\n", model,
	       d->model ? d->model : "ngram", d->k > 0 ? d->k : 4, d->adaptive ? " adaptive" : "", n_gen, reps);
	printf("tg without draft %.1f t/s, with draft %.1f t/s: speed-up %.2fx\n", without, with,
	       with / MAX(without, 1e-9));
	cli_print_spec(stdout, &st);
	rc = 0;
out:
	tok_free(dt);
	llama_free(dm);
	tok_free(tk);
	llama_free(m);
	return rc;
}
