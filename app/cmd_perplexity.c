/* app/cmd_perplexity.c: `pagechat perplexity -m MODEL -f TEXT [-c CTX]`.
 *
 * The text is tokenized whole (BOS first) and cut into consecutive windows
 * of CTX tokens; each window starts a fresh context whose first token is BOS
 * (as llama.cpp's perplexity does). Only the second half of each window is
 * scored: the tokens at positions CTX/2 .. CTX-1, each predicted from all the
 * window's tokens before it, so every scored token sees at least CTX/2 tokens
 * of context. Perplexity = exp(mean negative log-likelihood), with the
 * standard error of that mean carried through. Progress goes to stderr. */
#include "app/cmds.h"

#include "engine/runner.h"
#include "engine/sample.h"
#include "models/llama.h"
#include "models/tok.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_perplexity[] =
	"usage: pagechat perplexity -m MODEL -f TEXT [-c CTX] [-b BATCH] [-t N]\n"
	"  Perplexity of MODEL over the text file TEXT, in windows of CTX tokens (default\n"
	"  512, or the whole text if shorter); each window scores its second half, each\n"
	"  token predicted from the window's tokens before it.\n"
	"  -b BATCH  tokens per forward step (default 512)\n"
	"  -t N      threads (default: one per core)\n";

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
			if (!samp_check_logits(runner_logits(r->run, j), r->n_vocab, i0 + lo + j, e))
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
	};
	const char *pos[1];
	if (cli_parse_opts("perplexity", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	if (!a->model || !a->file) {
		fprintf(stderr, "pagechat: perplexity: needs -m MODEL and -f TEXT (see pagechat perplexity --help)\n");
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

/* Scores the n_windows windows of ctx tokens that ids[] holds, each with its
 * first token replaced by bos (when the vocabulary has one), into *s;
 * progress to stderr. 0, or -1 with e. */
static int score_windows(ppl_run *r, const int32_t *ids, int n_windows, int ctx, int32_t bos, ppl_sums *s,
			 err *e)
{
	double t0 = now_s();
	int32_t *w = xmalloc((size_t)ctx * sizeof *w);
	int rc = 0;
	for (int k = 0; k < n_windows; k++) {
		memcpy(w, ids + (size_t)k * ctx, (size_t)ctx * sizeof *w);
		if (bos >= 0)
			w[0] = bos;
		if ((rc = score_window(r, w, ctx, &s->sum, &s->sum2, &s->count, e)))
			break;
		fprintf(stderr, "[%d/%d] perplexity %.4f, %.1f tokens/s\n", k + 1, n_windows,
			exp(s->sum / (double)s->count), (double)(k + 1) * ctx / (now_s() - t0));
	}
	free(w);
	return rc;
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

static int run_perplexity(cli_device *dev, const ppl_args *a)
{
	const char *file = a->file;
	int ctx = a->ctx, batch = a->batch;
	kv_opts kv = a->kv;
	err e = {0};
	size_t len;
	char *text = cli_read_file(file, &len, &e);
	if (!text)
		return cli_fail(&e);
	if (check_plan(dev, a, &kv, &e)) {
		free(text);
		return cli_fail(&e);
	}
	cli_plan_kv(dev, ctx, 0, &kv);
	llama_model *m = cli_open_model(dev, a->model, batch, a->n_threads, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	int32_t *ids = NULL;
	ppl_run r = {.batch = batch};
	int rc = 1, n;
	if (!tk)
		goto out;
	ids = cli_encode(tk, text, len, TOK_ADD_BOS, &n);
	if (n < 0) {
		err_set(&e, "%s: text too long to tokenize", file);
		goto out;
	}
	if (n < 4) {
		err_set(&e, "%s: only %d tokens; perplexity needs at least 4", file, n);
		goto out;
	}
	if (ctx > n)
		ctx = n;
	int n_windows = n / ctx;
	const llama_hparams *hp = llama_hp(m);
	batch = MIN(batch, ctx);
	runner_params rp = {.model = m, .max_rows = batch, .max_seqs = 1, .pool_tokens = ctx, .block_tokens = 16,
			    .k_type = kv.k_type, .v_type = kv.v_type};
	if (!(r.run = runner_new(&rp, &e)))
		goto out;
	r.batch = runner_max_rows(r.run);
	r.n_vocab = hp->n_vocab;
	fprintf(stderr, "perplexity: %d tokens, %d windows of %d (scoring the second half of each)\n", n,
		n_windows, ctx);
	ppl_sums sums = {0};
	if (score_windows(&r, ids, n_windows, ctx, tok_bos(tk), &sums, &e))
		goto out;
	print_perplexity(&sums, n_windows, ctx);
	rc = 0;
out:
	if (rc)
		cli_fail(&e);
	runner_free(r.run);
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
