/* app/cmd_perplexity.c: `pagechat perplexity -m MODEL -f TEXT [-c CTX]`.
 *
 * The text is tokenized whole (BOS first) and cut into consecutive windows
 * of CTX tokens; each window starts a fresh context whose first token is BOS
 * (as llama.cpp's perplexity does). Only the second half of each window is
 * scored: the tokens at positions CTX/2 .. CTX-1, each predicted from all the
 * window's tokens before it, so every scored token sees at least CTX/2 tokens
 * of context. Perplexity = exp(mean negative log-likelihood), with the
 * standard error of that mean carried through. Progress goes to stderr.
 * Each window's first token is BOS where the vocabulary adds one (as
 * llama.cpp's perplexity does); --chunks takes the first N windows only.
 * --kl-base FILE saves every scored distribution, --kl FILE compares this
 * model's with them: the KL divergence of the next-token distributions
 * against the base run's (app/ppl_kl.h; llama-perplexity's
 * --kl-divergence-base / --kl-divergence measure the same). */
#include "app/cmds.h"

#include "app/ppl_kl.h"
#include "engine/runner.h"
#include "engine/sample.h"
#include "models/llama.h"
#include "models/tok.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_perplexity[] =
	"usage: pagechat perplexity -m MODEL -f TEXT [-c CTX] [-b BATCH] [-t N] [--chunks N]\n"
	"                           [--kl-base FILE | --kl FILE]\n"
	"  Perplexity of MODEL over the text file TEXT, in windows of CTX tokens (default\n"
	"  512, or the whole text if shorter); each window scores its second half, each\n"
	"  token predicted from the window's tokens before it.\n"
	"  -b BATCH  tokens per forward step (default 512)\n"
	"  -t N      threads (default: one per core)\n"
	"  --chunks N      the first N windows only (default: all)\n"
	"  --kl-base FILE  save every scored next-token distribution into FILE (n_vocab\n"
	"                  floats a token: 200 MB for 1,000 tokens of a 49,152 vocabulary)\n"
	"  --kl FILE       compare with FILE's: the KL divergence of this model's\n"
	"                  distributions against the saved ones (same text, -c and windows);\n"
	"                  FILE may also be llama-perplexity's --kl-divergence-base file\n";

/* -log softmax(logits)[target], in double. */
static double nll(const float *logits, int n_vocab, int32_t target)
{
	float mx = logits[0];
	for (int i = 1; i < n_vocab; i++)
		mx = MAX(mx, logits[i]);
	double s = 0;
	for (int i = 0; i < n_vocab; i++)
		s += exp((double)logits[i] - mx);
	return log(s) - ((double)logits[target] - mx);
}

typedef struct ppl_run {
	runner *run;             /* owned; one private sequence of ctx tokens */
	int n_vocab;
	int batch;               /* tokens per forward step */
	ppl_kl *kl;              /* borrowed; NULL without --kl-base / --kl */
} ppl_run;

/* Runs window w[0..n) and adds the NLL of tokens n/2 .. n-1 to *sum, *sum2,
 * *count. */
static int score_window(ppl_run *r, const int32_t *w, int n, double *sum, double *sum2,
			int64_t *count, err *e)
{
	int first = n / 2, rc = 0;
	runner_seq_reset(r->run, 0);
	for (int i0 = 0; i0 < n && !rc; i0 += r->batch) {
		int len = MIN(r->batch, n - i0);
		/* position p's logits predict token p + 1: rows with first <= p + 1 < n */
		int lo = MAX(0, first - 1 - i0), hi = MIN(len, n - 1 - i0);
		int n_out = MAX(0, hi - lo);
		if (runner_append(r->run, 0, w + i0, len, lo, n_out, e) < 0) {
			err_prefix(e, "perplexity");
			return -1;
		}
		if ((rc = runner_run(r->run, e)))
			break;
		for (int j = 0; j < n_out; j++) {
			if (!samp_check_logits(runner_logits(r->run, j), r->n_vocab, i0 + lo + j, e) ||
			    (r->kl && ppl_kl_row(r->kl, runner_logits(r->run, j), e)))
				return -1;
			double v = nll(runner_logits(r->run, j), r->n_vocab, w[i0 + lo + j + 1]);
			*sum += v;
			*sum2 += v * v;
			(*count)++;
		}
	}
	return rc;
}

/* What the command line asks for. */
typedef struct ppl_args {
	const char *model, *file;  /* borrowed from argv */
	int ctx, batch, n_threads; /* -c, -b, -t (0: one per core) */
	int chunks;                /* --chunks (0: all windows) */
	const char *kl_base, *kl;  /* --kl-base, --kl (borrowed; NULL: not given) */
	kv_opts kv;
} ppl_args;

/* Parses perplexity's flags into *a: 0, or EXIT_USAGE after printing the
 * problem. */
static int parse_perplexity(int argc, char **argv, ppl_args *a)
{
	*a = (ppl_args){.ctx = 512, .batch = 512};
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &a->model, P_NONE}, {"-f", "--file", OPT_PATH, &a->file, P_NONE},
		{"-c", "--ctx", OPT_INT, &a->ctx, P_PPL_CTX}, {"-b", "--batch", OPT_INT, &a->batch, P_PPL_BATCH},
		{"-t", "--threads", OPT_INT, &a->n_threads, P_THREADS}, KV_OPTS(&a->kv),
		{"--chunks", NULL, OPT_INT, &a->chunks, P_PPL_CHUNKS}, {"--kl-base", NULL, OPT_PATH, &a->kl_base, P_NONE},
		{"--kl", NULL, OPT_PATH, &a->kl, P_NONE},
	};
	const char *pos[1];
	if (cli_parse_opts("perplexity", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	if (!a->model || !a->file) {
		fprintf(stderr, "pagechat: perplexity: needs -m MODEL and -f TEXT (see pagechat perplexity --help)\n");
		return EXIT_USAGE;
	}
	if (a->kl_base && a->kl) {
		fprintf(stderr, "pagechat: perplexity: --kl-base saves a run and --kl compares with one: give one\n");
		return EXIT_USAGE;
	}
	a->n_threads = cli_threads(a->n_threads, "-t");
	return 0;
}

/* The negative log-likelihoods of the tokens scored so far. */
typedef struct ppl_sums {
	double sum, sum2;
	int64_t count;
} ppl_sums;

/* Scores the n_windows windows of ctx tokens that w[] holds into *s;
 * progress to stderr. 0, or -1 with e. */
static int score_windows(ppl_run *r, const int32_t *w, int n_windows, int ctx, ppl_sums *s, err *e)
{
	double t0 = now_s();
	for (int k = 0; k < n_windows; k++) {
		if (score_window(r, w + (size_t)k * ctx, ctx, &s->sum, &s->sum2, &s->count, e))
			return -1;
		fprintf(stderr, "[%d/%d] perplexity %.4f, %.1f tokens/s\n", k + 1, n_windows,
			exp(s->sum / (double)s->count), (double)(k + 1) * ctx / (now_s() - t0));
	}
	return 0;
}

/* The windows as they run: ids[0 .. n_windows * ctx) with each window's first
 * token BOS where the vocabulary adds one (a new array, the caller frees it). */
static int32_t *make_windows(const tok *tk, const int32_t *ids, int n_windows, int ctx)
{
	int32_t *w = xmalloc((size_t)n_windows * (size_t)ctx * sizeof *w), probe[2];
	memcpy(w, ids, (size_t)n_windows * (size_t)ctx * sizeof *w);
	bool adds_bos = tok_bos(tk) >= 0 && tok_encode(tk, "", 0, TOK_ADD_BOS, probe, 2) == 1;
	for (int k = 0; adds_bos && k < n_windows; k++)
		w[(size_t)k * ctx] = tok_bos(tk);
	return w;
}

/* --kl FILE: its windows must be this run's (the same -c, and a text with
 * as many windows at least, the count then taken from the file). */
static int open_kl(ppl_kl *kl, const ppl_args *a, int n_vocab, int ctx, int *n_windows, err *e)
{
	ppl_kl_shape s;
	if (ppl_kl_open(kl, a->kl, &s, e))
		return -1;
	if (s.n_vocab != n_vocab || s.ctx != ctx || s.n_windows > *n_windows || (a->chunks && a->chunks != s.n_windows)) {
		err_set(e, "%s holds %d windows of %d tokens over a vocabulary of %d; this run has %d of %d over %d: "
			"give the same text and -c (and --chunks %d)", a->kl, s.n_windows, s.ctx, s.n_vocab, *n_windows, ctx,
			n_vocab, s.n_windows);
		return -1;
	}
	*n_windows = s.n_windows;
	return 0;
}

/* Sets up --kl-base / --kl for windows w of the run (r->kl stays NULL
 * without them). 0, or -1 with e. */
static int setup_kl(ppl_run *r, ppl_kl *kl, const ppl_args *a, const tok *tk, const int32_t *ids, int ctx,
		    int *n_windows, int32_t **w, err *e)
{
	if (a->kl && open_kl(kl, a, r->n_vocab, ctx, n_windows, e))
		return -1;
	*w = make_windows(tk, ids, *n_windows, ctx);
	ppl_kl_shape s = {.n_vocab = r->n_vocab, .ctx = ctx, .n_windows = *n_windows};
	if ((a->kl && ppl_kl_check_tokens(kl, *w, (int64_t)*n_windows * ctx, ctx, e)) ||
	    (a->kl_base && ppl_kl_create(kl, a->kl_base, &s, *w, e)))
		return -1;
	r->kl = a->kl || a->kl_base ? kl : NULL;
	return 0;
}

/* The result line: exp(mean NLL) and its standard error. */
static void print_perplexity(const ppl_sums *s, int n_windows, int ctx)
{
	double mean = s->sum / (double)s->count;
	double var = s->count > 1 ? (s->sum2 / (double)s->count - mean * mean) * s->count / (s->count - 1) : 0;
	double se = sqrt(MAX(var, 0) / (double)s->count);
	printf("perplexity %.4f +- %.4f (%lld tokens scored, %d windows of %d)\n", exp(mean), exp(mean) * se,
	       (long long)s->count, n_windows, ctx);
}

/* Before anything is allocated: the window fits the model's context, and
 * the model, a window's KV and a batch's scratch fit in memory. Resolves
 * kv's types. 0, or -1 with e. */
static int check_plan(cli_device *dev, const ppl_args *a, kv_opts *kv, err *e)
{
	llama_hparams hp;
	int64_t weights;
	if (cli_kv_types(kv, e) || cli_read_plan(a->model, &hp, &weights, e))
		return -1;
	if (a->ctx > hp.n_ctx_train) {
		err_set(e, "perplexity: -c %d is more than %s's context of %d tokens: give -c %d or less", a->ctx,
			a->model, hp.n_ctx_train, hp.n_ctx_train);
		return -1;
	}
	return cli_check_memory(dev, a->model, &hp, weights, a->ctx, kv, MIN(a->batch, a->ctx), e);
}

/* Scores ids[n] (tokenized with tk) with m over windows of ctx tokens,
 * saving or comparing with a base run as a asks; prints the results. 0, or
 * -1 with e. */
static int score_text(llama_model *m, const tok *tk, const ppl_args *a, const kv_opts *kv, const int32_t *ids,
		      int n, err *e)
{
	int ctx = MIN(a->ctx, n), n_windows = n / ctx, rc = -1;
	if (a->chunks > 0)
		n_windows = MIN(n_windows, a->chunks);
	runner_params rp = {.model = m, .max_rows = MIN(a->batch, ctx), .max_seqs = 1, .pool_tokens = ctx,
			    .block_tokens = 16, .k_type = kv->k_type, .v_type = kv->v_type};
	ppl_run r = {.n_vocab = llama_hp(m)->n_vocab};
	ppl_kl kl = {0};
	int32_t *w = NULL;
	if (!(r.run = runner_new(&rp, e)) || setup_kl(&r, &kl, a, tk, ids, ctx, &n_windows, &w, e))
		goto out;
	r.batch = runner_max_rows(r.run);
	fprintf(stderr, "perplexity: %d tokens, %d windows of %d (scoring the second half of each)\n", n,
		n_windows, ctx);
	ppl_sums sums = {0};
	if (score_windows(&r, w, n_windows, ctx, &sums, e) || ppl_kl_close(&kl, e))
		goto out;
	print_perplexity(&sums, n_windows, ctx);
	if (a->kl)
		ppl_kl_print(&kl, stdout);
	rc = 0;
out:
	if (rc && a->kl_base && kl.f)
		remove(a->kl_base);          /* never leave half a base file */
	ppl_kl_close(&kl, &(err){0});
	runner_free(r.run);
	free(w);
	return rc;
}

static int run_perplexity(cli_device *dev, const ppl_args *a)
{
	kv_opts kv = a->kv;
	err e = {0};
	size_t len;
	char *text = cli_read_file(a->file, &len, &e);
	if (!text)
		return cli_fail(&e);
	if (check_plan(dev, a, &kv, &e)) {
		free(text);
		return cli_fail(&e);
	}
	cli_plan_kv(dev, a->ctx, 0, &kv);
	llama_model *m = cli_open_model(dev, a->model, a->batch, a->n_threads, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	int32_t *ids = NULL;
	int rc = 1, n = 0;
	if (tk) {
		ids = cli_encode(tk, text, len, TOK_ADD_BOS, &n);
		if (n < 0)
			err_set(&e, "%s: text too long to tokenize", a->file);
		else if (n < 4)
			err_set(&e, "%s: only %d tokens; perplexity needs at least 4", a->file, n);
		else
			rc = score_text(m, tk, a, &kv, ids, n, &e) ? 1 : 0;
	}
	if (rc)
		cli_fail(&e);
	free(ids);
	tok_free(tk);
	llama_free(m);
	free(text);
	return rc;
}

int cmd_perplexity(int argc, char **argv, cli_device *dev)
{
	ppl_args a;
	int rc = parse_perplexity(argc, argv, &a);
	return rc ? rc : run_perplexity(dev, &a);
}
