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

/* The header of llama-perplexity's base file, after its magic. */
static int open_llama(ppl_kl *k, ppl_kl_shape *s, int64_t size, err *e)
{
	int32_t h[3];
	if (fread(h, sizeof h, 1, k->f) != 1 || h[0] < 4 || h[0] > (1 << 24) || h[1] < 1 || h[1] > (1 << 24) ||
	    h[2] < 1 || h[2] > (1 << 20)) {
		err_set(e, "%s: a llama-perplexity base file with a header out of range", k->path);
		return -1;
	}
	*s = (ppl_kl_shape){.n_vocab = h[1], .ctx = h[0], .n_windows = h[2]};
	int64_t nv = 2 * (((int64_t)h[1] + 1) / 2) + 4, rows = h[0] - 1 - h[0] / 2;
	if (8 + (int64_t)sizeof h + 4 * (int64_t)h[0] * h[2] + 2 * nv * rows * h[2] != size) {
		err_set(e, "%s: %lld bytes, not what its header (%d windows of %d, vocabulary %d) makes: cut short?",
			k->path, (long long)size, h[2], h[0], h[1]);
		return -1;
	}
	k->llama = true;
	k->n_vocab = s->n_vocab;
	k->rows = s->ctx - s->ctx / 2;
	k->qrow = xmalloc((size_t)nv * sizeof *k->qrow);
	return 0;
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
	if (fread(magic, 8, 1, k->f) == 1 && !memcmp(magic, "_logits_", 8))
		return open_llama(k, s, (int64_t)st.st_size, e);
	if (memcmp(magic, MAGIC, 8) || fread(h, sizeof h, 1, k->f) != 1) {
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

int ppl_kl_check_tokens(ppl_kl *k, const int32_t *tokens, int64_t n, int ctx, err *e)
{
	int32_t buf[4096];
	for (int64_t i = 0; i < n;) {
		size_t m = (size_t)MIN(n - i, (int64_t)ARRAY_LEN(buf));
		if (fread(buf, sizeof *buf, m, k->f) != m) {
			err_set(e, "%s: cut short in its tokens", k->path);
			return -1;
		}
		for (size_t j = 0; j < m; j++, i++)
			if (buf[j] != tokens[i] && !(k->llama && i % ctx == 0)) {
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

/* KL(llama.cpp's row || this row's log-probabilities lq[i] = logits[i] -
 * mx - lse), over llama.cpp's terms above log p = -16; *top its argmax. */
static double kl_llama_row(const ppl_kl *k, const float *logits, float mx, double lse, int *top)
{
	float scale, min;
	memcpy(&scale, k->qrow, 4);
	memcpy(&min, k->qrow + 2, 4);
	const uint16_t *q = k->qrow + 4;
	double kl = 0;
	*top = 0;
	for (int i = 0; i < k->n_vocab; i++) {
		double lp = (double)scale * q[i] + min;
		if (lp > -16)
			kl += exp(lp) * (lp - ((double)logits[i] - mx - lse));
		if (q[i] > q[*top])
			*top = i;
	}
	return kl;
}

/* The next row of llama.cpp's base into k->qrow; false for this window's
 * first row, which llama.cpp does not score. -1 on a short read. */
static int next_llama_row(ppl_kl *k, err *e)
{
	int first = k->at == 0;
	k->at = (k->at + 1) % k->rows;
	if (first)
		return 0;
	size_t nv = 2 * (((size_t)k->n_vocab + 1) / 2) + 4;
	if (fread(k->qrow, sizeof *k->qrow, nv, k->f) != nv) {
		err_set(e, "%s: cut short in its log-probabilities", k->path);
		return -1;
	}
	return 1;
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
	double kl = 0;
	int base_top = 0, got = k->llama ? next_llama_row(k, e) : 1;
	if (got <= 0)
		return got;
	if (k->llama)
		kl = kl_llama_row(k, logits, mx, lse, &base_top);
	else if (fread(k->row, sizeof *k->row, n, k->f) != n) {
		err_set(e, "%s: cut short in its log-probabilities", k->path);
		return -1;
	}
	for (size_t i = 0; !k->llama && i < n; i++) {
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
	free(k->qrow);
	k->f = NULL;
	k->row = NULL;
	k->qrow = NULL;
	return rc;
}

void ppl_kl_print(const ppl_kl *k, FILE *out)
{
	if (k->count < 1)
		return;
	double n = (double)k->count, mean = k->sum / n;
	double var = k->count > 1 ? (k->sum2 / n - mean * mean) * n / (n - 1) : 0;
	fprintf(out, "KL divergence %.6g +- %.2g against %s%s (%lld tokens; same top token %.2f%%)\n", mean,
		sqrt(MAX(var, 0) / n), k->llama ? "llama.cpp's " : "", k->path, (long long)k->count,
		100.0 * (double)k->same_top / n);
}
