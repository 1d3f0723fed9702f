/* app/app_common.c: the helpers the commands share (app/app_common.h). */
#include "app/app_common.h"

#include "engine/core.h"
#include "base/files.h"
#include "kernels/kvq.h"
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

int cli_stdout_errno;

int cli_fail(const err *e)
{
	fprintf(stderr, "pagechat: %s\n", e->msg);
	return 1;
}

char *cli_read_file(const char *path, size_t *len, err *e)
{
	return file_read_all(path, CLI_MAX_TEXT_BYTES, "text input", len, e);
}

int cli_threads(int n, const char *flag)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int most = (int)MIN(MAX(cores, 1L) * PARAM_THREADS_PER_CORE, 1024L);
	if (n <= most)
		return n;
	fprintf(stderr, "pagechat: note: %s %d is more than %d threads per core on this machine's %ld cores; "
		"using %d\n", flag, n, PARAM_THREADS_PER_CORE, MAX(cores, 1L), most);
	return most;
}

int cli_read_plan(const char *path, llama_hparams *hp, int64_t *weight_bytes, err *e)
{
	gguf_file *f = gguf_open(path, e);
	if (!f)
		return -1;
	int rc = llama_read_hparams(f, hp, e);
	*weight_bytes = (int64_t)gguf_data_bytes(f);
	gguf_close(f);
	return rc;
}

int32_t *cli_encode(const tok *tk, const char *text, size_t len, unsigned flags, int *n)
{
	int cap = (int)MIN(len + 16, (size_t)INT_MAX / 8);
	int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
	int need = tok_encode(tk, text, len, flags, ids, cap);
	if (need > cap) {
		ids = xrealloc(ids, (size_t)need * sizeof *ids);
		tok_encode(tk, text, len, flags, ids, need);
	}
	*n = need;
	return ids;
}

const char *cli_fmt_bytes(char *buf, size_t cap, double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	double v = bytes;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	snprintf(buf, cap, "%.6g %s", u ? round(v * 100) / 100 : v, unit[u]);
	return buf;
}

int64_t cli_mem_available(void)
{
	int64_t a = mem_available();
	return a >= 0 ? a : (int64_t)sysconf(_SC_AVPHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
}

void cli_plan_line(char *buf, size_t cap, const llama_plan *p, int64_t kv_tokens)
{
	char w[32], kv[32], per[32], sc[32], t[32];
	snprintf(buf, cap, "weights %s + KV %s (%lld tokens x %s) + scratch %s = %s",
		 cli_fmt_bytes(w, sizeof w, (double)p->weight_bytes), cli_fmt_bytes(kv, sizeof kv, (double)p->kv_bytes),
		 (long long)kv_tokens, cli_fmt_bytes(per, sizeof per, (double)p->kv_token_bytes),
		 cli_fmt_bytes(sc, sizeof sc, (double)p->scratch_bytes), cli_fmt_bytes(t, sizeof t, (double)p->total_bytes));
}

/* The error for a KV pool whose device part does not fit. */
static void kv_over_budget(err *e, cli_device *dev, const char *path, int64_t kv_tokens, int64_t kv_dev,
			   int n_dev, int n_layers, int64_t budget)
{
	char kvb[32], b[32], part[64] = "";
	if (n_dev < n_layers)
		snprintf(part, sizeof part, " (its %d of %d layers there)", n_dev, n_layers);
	err_set(e, "%s: the KV cache for %lld tokens needs %s of device memory%s, but --gpu-mem-fraction %.2f "
		"leaves %s: lower the context (-c), the pool or --kv-type, put fewer layers there (-ngl), or raise "
		"the fraction", path, (long long)kv_tokens, cli_fmt_bytes(kvb, sizeof kvb, (double)kv_dev), part,
		dev->opts.mem_fraction, cli_fmt_bytes(b, sizeof b, (double)budget));
}

int cli_check_memory(cli_device *dev, const char *path, const llama_hparams *hp, int64_t weight_bytes,
		     int64_t kv_tokens, const kv_opts *kv, int max_tokens, err *e)
{
	llama_plan p;
	llama_plan_memory(hp, weight_bytes, kv_tokens, kv ? kv->k_type : KV_F16, kv ? kv->v_type : KV_F16,
			  max_tokens, &p);
	int64_t budget = cli_device_budget(dev), avail = cli_mem_available();
	if (budget >= 0) {
		/* on a device the model (weights, scratch) is already there: the
		 * pool's device part (its layers' share) must fit the rest, and
		 * with a split the host part the host */
		int L = hp->n_layers;
		if (dev->place.n_layers != L)
			return 0; /* not placed yet: placement budgets the pool's device part itself (cli_plan_kv) */
		int n_dev = dev->place.n_dev_layers;
		int64_t kv_dev = p.kv_bytes / L * n_dev, kv_host = p.kv_bytes - kv_dev;
		if (kv_dev > budget) {
			kv_over_budget(e, dev, path, kv_tokens, kv_dev, n_dev, L, budget);
			return -1;
		}
		if (kv_host <= avail)
			return 0;
		char kvb[32], a[32];
		err_set(e, "%s: the KV cache of the %d layers on the CPU needs %s for %lld tokens, but %s is available: "
			"lower the context (-c) or the pool", path, L - n_dev, cli_fmt_bytes(kvb, sizeof kvb, (double)kv_host),
			(long long)kv_tokens, cli_fmt_bytes(a, sizeof a, (double)avail));
		return -1;
	}
	if (p.total_bytes <= avail)
		return 0;
	char line[256], a[32];
	cli_plan_line(line, sizeof line, &p, kv_tokens);
	err_set(e, "%s does not fit in memory: needs %s, but %s is available: lower the context (-c) "
		"or the KV pool size", path, line, cli_fmt_bytes(a, sizeof a, (double)avail));
	return -1;
}

int cli_load(cli_device *d, const char *path, int max_tokens, llama_model **m, tok **tk, err *e)
{
	*m = cli_open_model(d, path, max_tokens, 0, e);
	if (!*m)
		return -1;
	*tk = tok_new(llama_file(*m), e);
	return *tk ? 0 : -1;
}

int cli_setup_draft(cli_device *dev, const draft_opts *d, int max_tokens, core_params *cp, llama_model **dm,
		    tok **dt, err *e)
{
	*dm = NULL;
	*dt = NULL;
	if (d->kind && strcmp(d->kind, "ngram") && strcmp(d->kind, "model")) {
		err_set(e, "--draft must be 'ngram' (or 'model' with -md FILE), not '%s'", d->kind);
		return -1;
	}
	bool ngram = d->kind && !strcmp(d->kind, "ngram");
	if (ngram && d->model) {
		err_set(e, "--draft ngram and -md FILE exclude each other");
		return -1;
	}
	if (d->k < 0 || d->k > SPEC_MAX_K) {
		err_set(e, "--draft-k must be 1..%d", SPEC_MAX_K);
		return -1;
	}
	cp->draft_k = d->k;
	cp->draft_adaptive = d->adaptive;
	cp->draft_cost = d->cost;
	if (ngram) {
		cp->draft_kind = DRAFT_NGRAM;
		return 0;
	}
	if (!d->model) {
		if (d->kind) {
			err_set(e, "--draft model needs -md DRAFT.gguf");
			return -1;
		}
		return 0;
	}
	if (cli_load(dev, d->model, max_tokens, dm, dt, e)) {
		err_prefix(e, "draft model");
		return -1;
	}
	cp->draft_kind = DRAFT_MODEL;
	cp->draft = *dm;
	cp->draft_tok = *dt;
	return 0;
}

void cli_print_tiers(FILE *out, const core *c, const core_stats *st)
{
	const char *note = core_notice(c);
	if (note)
		fprintf(out, "pagechat: %s\n", note);
	if (!st->host_blocks && !st->has_store)
		return;
	fprintf(out, "kv tiers: %lld prompt tokens from host memory, %lld from disk; %lld blocks demoted, "
		"%lld swapped out, %lld in; %.1f MB moved up, %.1f MB down in %.1f ms; %lld block files "
		"written (%.1f MB on disk)\n", (long long)st->cached_host, (long long)st->cached_store,
		(long long)st->demoted, (long long)st->swapped_out, (long long)st->swapped_in,
		(double)st->bytes_up / 1e6, (double)st->bytes_down / 1e6, st->move_s * 1e3,
		(long long)st->store_written, (double)st->store_bytes / 1e6);
}

void cli_print_spec(FILE *out, const core_stats *st)
{
	if (st->spec_steps == 0)
		return;
	fprintf(out, "draft: %lld proposed, %lld accepted (%.1f%%), %.2f accepted per step; by position:",
		(long long)st->spec_proposed, (long long)st->spec_accepted,
		100.0 * (double)st->spec_accepted / (double)MAX(1, st->spec_proposed),
		(double)st->spec_accepted / (double)st->spec_steps);
	for (int j = 0; j < SPEC_MAX_K && st->spec_pos_proposed[j]; j++)
		fprintf(out, " %.0f%%", 100.0 * (double)st->spec_pos_accepted[j] / (double)st->spec_pos_proposed[j]);
	fputc('\n', out);
}

const kern_ops *cli_kern(cli_device *d, err *e)
{
	if (d->kern)
		return d->kern;
	const char *dev = d->opts.device ? d->opts.device : getenv("PAGECHAT_DEVICE");
	if (d->opts.n_gpu_layers == 0) /* no layer on the GPU: the CPU, whatever --device says */
		dev = "cpu";
	const char *note = NULL;
	d->kern = kern_pick(dev, &note, e);
	if (note)
		fprintf(stderr, "pagechat: %s\n", note);
	for (int i = 0; d->kern == kern_cpu() && (note = kern_cpu_notice(i)); i++)
		fprintf(stderr, "pagechat: %s\n", note);
	if (d->kern == kern_fake())
		kern_fake_set_mem(d->opts.device_mem);
	return d->kern;
}

bool cli_on_device(cli_device *d)
{
	err e = {0};
	const kern_ops *k = cli_kern(d, &e);
	return k && k->buf_alloc;
}

void cli_plan_kv(cli_device *d, int64_t tokens, int64_t bytes, const kv_opts *kv)
{
	d->kv_tokens = tokens;
	d->kv_bytes = bytes;
	d->kv_k = kv ? kv->k_type : KV_F16;
	d->kv_v = kv ? kv->v_type : KV_F16;
	d->kv_typed = true;
}

/* What placement may fill: the device's budget less the pools already
 * promised; without a device, a device of --device-mem bytes (info), else
 * -1. */
static int64_t place_budget(cli_device *d)
{
	int64_t b = cli_device_budget(d);
	if (b >= 0)
		return MAX(0, b - d->kv_promised);
	return d->opts.device_mem > 0 ? (int64_t)((double)d->opts.device_mem * d->opts.mem_fraction) : -1;
}

int cli_place_params(cli_device *d, const gguf_file *f, int max_tokens, int64_t *lb, place_params *p, err *e)
{
	llama_hparams hp;
	if (llama_read_hparams(f, &hp, e))
		return -1;
	if (hp.n_layers > gguf_n_tensors(f)) { /* lb has room for one per tensor at most */
		err_set(e, "%s: %d layers but %lld tensors", gguf_name(f), hp.n_layers, (long long)gguf_n_tensors(f));
		return -1;
	}
	enum kv_type kt = d->kv_typed ? d->kv_k : KV_F16, vt = d->kv_typed ? d->kv_v : KV_F16;
	*p = (place_params){.dev_budget = place_budget(d), .host_avail = cli_mem_available(), .margin_bytes = -1};
	place_model_from_file(f, &hp, kt, vt, max_tokens, lb, &p->m);
	int64_t per_token = p->m.kv_layer_token_bytes * hp.n_layers;
	p->kv_tokens = d->kv_tokens > 0 ? d->kv_tokens : d->kv_bytes > 0 ? d->kv_bytes / per_token : hp.n_ctx_train;
	int ngl = d->opts.n_gpu_layers;
	p->n_dev_layers = ngl == NGL_AUTO ? -1 : ngl < 0 ? hp.n_layers : ngl;
	return 0;
}

void cli_place_line(char *buf, size_t cap, const place_plan *pl, const char *dev_name)
{
	char dw[32], dk[32], ds[32], dt[32], hw[32], hk[32], hs[32], ht[32];
	snprintf(buf, cap, "%d of %d layers on %s, the head on the %s: device %s (weights %s + KV %s + scratch %s), "
		 "host %s (weights %s + KV %s + scratch %s); KV for %lld tokens", pl->n_dev_layers, pl->n_layers,
		 dev_name, pl->head_dev ? "device" : "CPU", cli_fmt_bytes(dt, sizeof dt, (double)pl->dev_total),
		 cli_fmt_bytes(dw, sizeof dw, (double)pl->dev_weights), cli_fmt_bytes(dk, sizeof dk, (double)pl->dev_kv),
		 cli_fmt_bytes(ds, sizeof ds, (double)pl->dev_scratch), cli_fmt_bytes(ht, sizeof ht, (double)pl->host_total),
		 cli_fmt_bytes(hw, sizeof hw, (double)pl->host_weights), cli_fmt_bytes(hk, sizeof hk, (double)pl->host_kv),
		 cli_fmt_bytes(hs, sizeof hs, (double)pl->host_scratch), (long long)pl->kv_tokens);
}

int cli_place(cli_device *d, const gguf_file *f, int max_tokens, llama_params *lp, err *e)
{
	if (!lp->kern || !lp->kern->buf_alloc)
		return 0;
	place_params p;
	place_plan pl;
	int64_t *lb = xmalloc((size_t)MAX(1, gguf_n_tensors(f)) * sizeof *lb); /* >= n_layers: one tensor each */
	int rc = cli_place_params(d, f, max_tokens, lb, &p, e);
	if (!rc && (rc = place_choose(&p, &pl, e)))
		err_prefix(e, "%s", gguf_name(f));
	free(lb);
	if (rc)
		return -1;
	d->place = pl;
	d->kv_promised += pl.dev_kv;
	lp->host_layers = pl.n_layers - pl.n_dev_layers;
	lp->head_on_host = !pl.head_dev;
	char line[512];
	cli_place_line(line, sizeof line, &pl, lp->kern->name);
	const char *base = strrchr(gguf_name(f), '/');
	fprintf(stderr, "pagechat: %s: %s\n", base ? base + 1 : gguf_name(f), line);
	return 0;
}

llama_model *cli_open_model(cli_device *d, const char *path, int max_tokens, int n_threads, err *e)
{
	const kern_ops *k = cli_kern(d, e);
	if (!k)
		return NULL;
	gguf_file *f = gguf_open(path, e);
	llama_params lp = {.max_tokens = max_tokens, .n_threads = n_threads, .kern = k};
	if (f && cli_place(d, f, max_tokens, &lp, e)) {
		gguf_close(f);
		return NULL;
	}
	return f ? llama_from_gguf(f, &lp, e) : NULL;
}

int64_t cli_device_budget(cli_device *d)
{
	err e = {0};
	const kern_ops *k = cli_kern(d, &e);
	if (!k || !k->buf_alloc)
		return -1;
	int64_t fr = 0, tot = 0;
	k->mem_info(&fr, &tot);
	if (d->opts.device_mem > 0 && d->opts.device_mem < tot) {
		/* a smaller device than there is: what it would leave free */
		fr = MAX(0, fr - (tot - d->opts.device_mem));
		tot = d->opts.device_mem;
	}
	/* what the fraction of the whole device leaves, within what is free now */
	int64_t used = tot - fr, allowed = (int64_t)((double)tot * d->opts.mem_fraction) - used;
	return MAX(0, MIN(allowed, fr));
}
