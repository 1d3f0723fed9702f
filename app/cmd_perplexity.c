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

#include "engine/kv_pool.h"
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
	llama_model *m;
	kv_pool *pool;
	int batch;
	int32_t *pos, *seq_of, *out_rows;
	int64_t *slot;
	float *logits;           /* [batch][n_vocab] */
} ppl_run;

/* Runs window w[0..n) and adds the NLL of tokens n/2 .. n-1 to *sum, *sum2,
 * *count. */
static int score_window(ppl_run *r, const int32_t *w, int n, double *sum, double *sum2,
			int64_t *count, err *e)
{
	int nv = llama_hp(r->m)->n_vocab, first = n / 2;
	kv_seq seq;
	kv_seq_init(&seq);
	int rc = 0;
	for (int i0 = 0; i0 < n && !rc; i0 += r->batch) {
		int len = MIN(r->batch, n - i0);
		if (kv_seq_reserve(r->pool, &seq, i0 + len)) {
			err_set(e, "perplexity: KV pool exhausted");
			rc = -1;
			break;
		}
		int n_out = 0;
		for (int i = 0; i < len; i++) {
			r->pos[i] = i0 + i;
			r->slot[i] = kv_seq_slot(r->pool, &seq, i0 + i);
			/* position p's logits predict token p + 1 */
			if (i0 + i + 1 >= first && i0 + i + 1 < n)
				r->out_rows[n_out++] = i;
		}
		seq.n_tokens = i0 + len;
		const int32_t *table = seq.blocks;
		llama_batch b = {
			.n_tokens = len, .token = w + i0, .pos = r->pos, .slot = r->slot, .seq = r->seq_of,
			.n_seqs = 1, .block_table = &table, .n_table = &seq.n_blocks, .n_out = n_out,
			.out_rows = r->out_rows,
		};
		kv_view kv = kv_pool_view(r->pool);
		if ((rc = llama_forward(r->m, &b, &kv, r->logits, e)))
			break;
		for (int j = 0; j < n_out; j++) {
			double v = nll(r->logits + (size_t)j * nv, nv, w[i0 + r->out_rows[j] + 1]);
			*sum += v;
			*sum2 += v * v;
			(*count)++;
		}
	}
	kv_seq_release(r->pool, &seq);
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
		{"-m", "--model", OPT_STR, &a->model}, {"-f", "--file", OPT_STR, &a->file},
		{"-c", "--ctx", OPT_INT, &a->ctx}, {"-b", "--batch", OPT_INT, &a->batch},
		{"-t", "--threads", OPT_INT, &a->n_threads}, KV_OPTS(&a->kv),
	};
	const char *pos[1];
	if (cli_parse_opts("perplexity", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	if (!a->model || !a->file || a->ctx < 4 || a->batch < 1 || a->n_threads < 0) {
		fprintf(stderr, "pagechat: perplexity: needs -m MODEL and -f TEXT (-c >= 4, -b >= 1)\n%s",
			usage_perplexity);
		return EXIT_USAGE;
	}
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
	llama_model *m = cli_open_model(dev, a->model, batch, a->n_threads, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	int32_t *ids = NULL;
	ppl_run r = {.m = m, .batch = batch};
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
	if (cli_kv_types(&kv, &e))
		goto out;
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .block_tokens = 16, .n_blocks = (ctx + 15) / 16, .head_dim = hp->head_dim,
			     .k_type = (uint8_t)kv.k_type, .v_type = (uint8_t)kv.v_type, .kern = llama_kern(m)};
	if (!(r.pool = kv_pool_new(&pp, &e)))
		goto out;
	batch = MIN(batch, ctx);
	r.batch = batch;
	r.pos = xmalloc((size_t)batch * sizeof *r.pos);
	r.seq_of = xcalloc((size_t)batch, sizeof *r.seq_of);
	r.out_rows = xmalloc((size_t)batch * sizeof *r.out_rows);
	r.slot = xmalloc((size_t)batch * sizeof *r.slot);
	r.logits = xmalloc((size_t)batch * hp->n_vocab * sizeof *r.logits);
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
	free(r.pos);
	free(r.seq_of);
	free(r.out_rows);
	free(r.slot);
	free(r.logits);
	kv_pool_free(r.pool);
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
