/* app/ppl_kl.c: the saved log-probabilities of a perplexity run and the KL
 * divergence against them (app/ppl_kl.h). */
#include "app/ppl_kl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAGIC "PCKLD001"

static int header_write(ppl_kl *k, const ppl_kl_shape *s, const int32_t *tokens, err *e)
{
	uint32_t h[4] = {(uint32_t)s->n_vocab, (uint32_t)s->ctx, (uint32_t)s->n_windows,
			 (uint32_t)(s->ctx - s->ctx / 2)};
	size_t n = (size_t)s->n_windows * (size_t)s->ctx;
	if (fwrite(MAGIC, 8, 1, k->f) != 1 || fwrite(h, sizeof h, 1, k->f) != 1 ||
	    fwrite(tokens, sizeof *tokens, n, k->f) != n) {
		err_set(e, "%s: cannot write: %s", k->path, strerror(errno));
		return -1;
	}
	return 0;
}

int ppl_kl_create(ppl_kl *k, const char *path, const ppl_kl_shape *s, const int32_t *tokens, err *e)
{
	*k = (ppl_kl){.path = path, .save = true, .n_vocab = s->n_vocab};
	if (!(k->f = fopen(path, "wb"))) {
		err_set(e, "%s: cannot create: %s", path, strerror(errno));
		return -1;
	}
	k->row = xmalloc((size_t)s->n_vocab * sizeof *k->row);
	return header_write(k, s, tokens, e);
}

int ppl_kl_open(ppl_kl *k, const char *path, ppl_kl_shape *s, err *e)
{
	*k = (ppl_kl){.path = path};
	char magic[8];
	uint32_t h[4];
	struct stat st;
	if (!(k->f = fopen(path, "rb")) || fstat(fileno(k->f), &st)) {
		err_set(e, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fread(magic, 8, 1, k->f) != 1 || memcmp(magic, MAGIC, 8) || fread(h, sizeof h, 1, k->f) != 1) {
		err_set(e, "%s: not a file of saved log-probabilities (make one with perplexity --kl-base)", path);
		return -1;
	}
	*s = (ppl_kl_shape){.n_vocab = (int)h[0], .ctx = (int)h[1], .n_windows = (int)h[2]};
	double want = 8.0 + sizeof h + 4.0 * h[2] * h[1] + 4.0 * h[2] * h[3] * h[0];
	if (h[0] < 1 || h[0] > (1u << 24) || h[1] < 4 || h[1] > (1u << 24) || h[3] != h[1] - h[1] / 2 ||
	    want != (double)st.st_size) {
		err_set(e, "%s: the header does not match the file's %lld bytes (cut short, or not a base file)", path,
			(long long)st.st_size);
		return -1;
	}
	k->n_vocab = s->n_vocab;
	k->row = xmalloc((size_t)s->n_vocab * sizeof *k->row);
	return 0;
}

int ppl_kl_check_tokens(ppl_kl *k, const int32_t *tokens, int64_t n, err *e)
{
	int32_t buf[4096];
	for (int64_t i = 0; i < n;) {
		size_t m = (size_t)MIN(n - i, (int64_t)ARRAY_LEN(buf));
		if (fread(buf, sizeof *buf, m, k->f) != m) {
			err_set(e, "%s: cut short in its tokens", k->path);
			return -1;
		}
		for (size_t j = 0; j < m; j++, i++)
			if (buf[j] != tokens[i]) {
				err_set(e, "%s: token %lld is %d here but %d in the base run: give the same text, "
					"a model with the same vocabulary and the same -c", k->path, (long long)i,
					(int)tokens[i], (int)buf[j]);
				return -1;
			}
	}
	return 0;
}

/* log softmax(logits)[i] = logits[i] - *mx - *lse (in double); returns the
 * argmax (the first on ties). */
static int softmax_terms(const float *logits, int n, float *mx, double *lse)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	double s = 0;
	for (int i = 0; i < n; i++)
		s += exp((double)logits[i] - logits[best]);
	*mx = logits[best];
	*lse = log(s);
	return best;
}

int ppl_kl_row(ppl_kl *k, const float *logits, err *e)
{
	double lse;
	float mx;
	int top = softmax_terms(logits, k->n_vocab, &mx, &lse);
	size_t n = (size_t)k->n_vocab;
	if (k->save) {
		for (size_t i = 0; i < n; i++)
			k->row[i] = (float)((double)logits[i] - mx - lse);
		if (fwrite(k->row, sizeof *k->row, n, k->f) != n) {
			err_set(e, "%s: cannot write: %s", k->path, strerror(errno));
			return -1;
		}
		return 0;
	}
	if (fread(k->row, sizeof *k->row, n, k->f) != n) {
		err_set(e, "%s: cut short in its log-probabilities", k->path);
		return -1;
	}
	double kl = 0;
	int base_top = 0;
	for (size_t i = 0; i < n; i++) {
		double lp = k->row[i], lq = (double)logits[i] - mx - lse;
		kl += exp(lp) * (lp - lq);
		if (k->row[i] > k->row[base_top])
			base_top = (int)i;
	}
	k->sum += kl;
	k->sum2 += kl * kl;
	k->count++;
	k->same_top += base_top == top;
	return 0;
}

int ppl_kl_close(ppl_kl *k, err *e)
{
	int rc = 0;
	if (k->f && fclose(k->f) && k->save) {
		err_set(e, "%s: cannot write: %s", k->path, strerror(errno));
		rc = -1;
	}
	free(k->row);
	k->f = NULL;
	k->row = NULL;
	return rc;
}

void ppl_kl_print(const ppl_kl *k, FILE *out)
{
	if (k->count < 1)
		return;
	double n = (double)k->count, mean = k->sum / n;
	double var = k->count > 1 ? (k->sum2 / n - mean * mean) * n / (n - 1) : 0;
	fprintf(out, "KL divergence %.6g +- %.2g against %s (%lld tokens; same top token %.2f%%)\n", mean,
		sqrt(MAX(var, 0) / n), k->path, (long long)k->count, 100.0 * (double)k->same_top / n);
}
