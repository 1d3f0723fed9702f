/* app/cmd_batch.c: `pagechat batch`, many requests through the engine core.
 *
 * Reads one JSON object per line ({"prompt": "...", "max_tokens": 64, "n": 1},
 * optionally "prompt_ids", "temperature", "seed", "stop"), validates every line
 * first (errors name FILE:LINE), then runs the requests with up to --parallel
 * in flight: continuously (a new request joins as soon as one finishes, and
 * every step is one batch) or, with --policy static, in request-level batches
 * (the next batch starts only when the whole previous one has finished).
 * Prints one JSON line per completion in input order, then a summary line;
 * exits 1 when any completion failed (saying how many). */
#include "app/cmds.h"

#include "app/batch_req.h"

#include "engine/core.h"
#include "kernels/kvq.h"
#include "models/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct breq {
	batch_req q;             /* the parsed line (owned) */
	/* results, per completion */
	char **text;             /* owned; [n] */
	size_t *text_len, *text_cap;
	int32_t **ids;           /* owned; [n] */
	int *n_ids, *cap_ids;
	int n_done;
	enum core_finish *finish;
	core_req_metrics *m;
	char **error;            /* owned; [n] */
} breq;

typedef struct batch_run {
	breq *reqs;              /* owned; [n_reqs] */
	int n_reqs;
	int n_in_flight;
} batch_run;

const char usage_batch[] =
	"usage: pagechat batch -m MODEL -f REQUESTS.jsonl [--parallel N] [-n N] [--temp T] [--top-k K]\n"
	"                      [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [-c CTX]\n"
	"                      [--block-size B] [--pool-blocks K] [--chunk T] [--policy continuous|static]\n"
	"                      [-md DRAFT.gguf | --draft ngram] [--draft-k K] [--draft-adaptive]\n"
	"                      [--kv-store DIR] [--kv-store-max SIZE] [--kv-host SIZE]\n"
	"                      [--preempt auto|swap|recompute]\n"
	"  Runs one request per JSON line ({\"prompt\": \"...\", \"max_tokens\": 64, \"n\": 1}; also\n"
	"  \"prompt_ids\", \"temperature\", \"seed\", \"stop\"; \"beams\": W for beam search, W completions\n"
	"  best first, with \"length_penalty\") with up to N in flight (default 16) and prints one\n"
	"  JSON line per completion in input order, then {\"summary\": ...} with the engine's\n"
	"  figures. -n is the default max_tokens (128). --chunk is the per-step token\n"
	"  budget (default 512). --policy static runs request-level batches for comparison.\n"
	"  Exits 1 when any completion failed (its line holds the \"error\").\n";

/* ---- parsing ---- */

/* Reads and validates every line; 1 after printing FILE:LINE: problem. */
static int load_requests(const char *path, const tok *tk, int n_vocab, const samp_params *sp,
			 int dflt_max, batch_run *b)
{
	err e = {0};
	size_t len;
	char *text = cli_read_file(path, &len, &e);
	if (!text)
		return cli_fail(&e);
	batch_req *q;
	int n, bad_line;
	int rc = batch_reqs_parse(text, len, tk, n_vocab, sp, dflt_max, &q, &n, &bad_line, &e);
	free(text);
	if (rc) {
		if (bad_line)
			fprintf(stderr, "pagechat: batch: %s:%d: %s\n", path, bad_line, e.msg);
		else
			fprintf(stderr, "pagechat: batch: %s: %s\n", path, e.msg);
		return 1;
	}
	b->reqs = xcalloc((size_t)n, sizeof *b->reqs);
	b->n_reqs = n;
	for (int i = 0; i < n; i++)
		b->reqs[i].q = q[i];             /* moved: q's arrays now belong to reqs */
	free(q);
	return 0;
}

static void alloc_results(breq *r)
{
	r->text = xcalloc((size_t)r->q.n, sizeof *r->text);
	r->text_len = xcalloc((size_t)r->q.n, sizeof *r->text_len);
	r->text_cap = xcalloc((size_t)r->q.n, sizeof *r->text_cap);
	r->ids = xcalloc((size_t)r->q.n, sizeof *r->ids);
	r->n_ids = xcalloc((size_t)r->q.n, sizeof *r->n_ids);
	r->cap_ids = xcalloc((size_t)r->q.n, sizeof *r->cap_ids);
	r->finish = xcalloc((size_t)r->q.n, sizeof *r->finish);
	r->m = xcalloc((size_t)r->q.n, sizeof *r->m);
	r->error = xcalloc((size_t)r->q.n, sizeof *r->error);
}

static void free_requests(batch_run *b)
{
	for (int i = 0; i < b->n_reqs; i++) {
		breq *r = &b->reqs[i];
		for (int k = 0; r->text && k < r->q.n; k++) {
			free(r->text[k]);
			free(r->ids[k]);
			free(r->error[k]);
		}
		batch_req_deinit(&r->q);
		free(r->text); free(r->text_len); free(r->text_cap); free(r->ids); free(r->n_ids);
		free(r->cap_ids); free(r->finish); free(r->m); free(r->error);
	}
	free(b->reqs);
}

/* ---- running ---- */

static void on_event(void *ctx, const core_event *ev)
{
	batch_run *b = ctx;
	breq *r = &b->reqs[ev->req];
	int k = ev->index;
	if (ev->kind == CORE_EV_TOKEN) {
		xgrow(&r->ids[k], &r->cap_ids[k], (int64_t)r->n_ids[k] + 1, sizeof *r->ids[k]);
		r->ids[k][r->n_ids[k]++] = ev->token;
		xgrow_size(&r->text[k], &r->text_cap[k], r->text_len[k] + ev->text_len + 1, 1);
		memcpy(r->text[k] + r->text_len[k], ev->text, ev->text_len);
		r->text_len[k] += ev->text_len;
		return;
	}
	r->finish[k] = ev->finish;
	r->m[k] = ev->m;
	if (ev->text_len)
		r->error[k] = xstrndup(ev->text, ev->text_len);
	if (++r->n_done == r->q.n)
		b->n_in_flight--;
}

static int submit(core *c, batch_run *b, int i)
{
	breq *r = &b->reqs[i];
	alloc_results(r);
	core_request cr = {
		.id = i, .conv = i, .prompt = r->q.prompt, .n_prompt = r->q.n_prompt, .samp = r->q.samp,
		.max_tokens = r->q.max_tokens, .n = r->q.beams ? 1 : r->q.n,
		.stop_strs = (const char *const *)r->q.stops, .n_stop_strs = r->q.n_stops,
		.beams = r->q.beams, .length_penalty = r->q.length_penalty,
	};
	err e;
	b->n_in_flight++;
	return core_submit(c, &cr, &e); /* a rejection arrives as FIN_ERROR events */
}

typedef struct waste_acc {
	double sum, sum_contig, peak, peak_contig;
	int64_t n;
	int64_t blocks_peak;     /* blocks in use at once, at most */
} waste_acc;

static int run_requests(core *c, batch_run *b, int parallel, bool is_static, waste_acc *w, err *e)
{
	int next = 0;
	while (next < b->n_reqs || b->n_in_flight > 0) {
		bool may_submit = is_static ? b->n_in_flight == 0 : true;
		while (may_submit && next < b->n_reqs && b->n_in_flight < parallel)
			submit(c, b, next++);
		if (core_idle(c))
			continue;
		if (core_step(c, e) < 0)
			return -1;
		core_stats st;
		core_get_stats(c, &st);
		if (st.n_running > 0) {
			w->sum += st.waste;
			w->sum_contig += st.waste_contig;
			w->peak = MAX(w->peak, st.waste);
			w->peak_contig = MAX(w->peak_contig, st.waste_contig);
			w->blocks_peak = MAX(w->blocks_peak, st.blocks_used);
			w->n++;
		}
	}
	return 0;
}

/* ---- output ---- */

static void print_completion(const breq *r, int i, int k)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;
	json_put_str(&buf, &n, &cap, r->text[k] ? r->text[k] : "", r->text_len[k]);
	printf("{\"index\": %d, \"completion\": %d, \"text\": %s, \"ids\": [", i, k, buf);
	for (int j = 0; j < r->n_ids[k]; j++)
		printf(j ? ", %d" : "%d", r->ids[k][j]);
	printf("], \"prompt_tokens\": %d, \"cached_tokens\": %d, \"ttft_ms\": %.3f, \"tpot_ms\": %.3f, "
	       "\"finish\": \"%s\"", r->q.n_prompt, r->m[k].n_cached, r->m[k].ttft_ms, r->m[k].tpot_ms,
	       core_finish_name(r->finish[k]));
	if (r->q.beams)
		printf(", \"beam\": %d, \"logprob\": %.6f", k, r->m[k].logprob);
	if (r->m[k].n_proposed)
		printf(", \"draft_proposed\": %d, \"draft_accepted\": %d", r->m[k].n_proposed,
		       r->m[k].n_accepted);
	if (r->error[k]) {
		n = 0;
		json_put_str(&buf, &n, &cap, r->error[k], strlen(r->error[k]));
		printf(", \"error\": %s", buf);
	}
	printf("}\n");
	free(buf);
}

/* Completions that ended in an error. */
static int count_failed(const batch_run *b)
{
	int n = 0;
	for (int i = 0; i < b->n_reqs; i++)
		for (int k = 0; k < b->reqs[i].q.n; k++)
			n += b->reqs[i].finish[k] == FIN_ERROR;
	return n;
}

/* Beam requests: what W unshared sequences would hold (each the prompt and
 * its own answer), to set against blocks_used_peak. */
static void print_beam_figures(const batch_run *b, int bt)
{
	int64_t unshared = 0;
	int n_beam = 0;
	for (int i = 0; i < b->n_reqs; i++) {
		const breq *r = &b->reqs[i];
		if (!r->q.beams)
			continue;
		n_beam++;
		for (int k = 0; k < r->q.n; k++)
			unshared += (r->q.n_prompt + r->n_ids[k] + bt - 1) / bt;
	}
	if (n_beam)
		printf(", \"beam_requests\": %d, \"beam_blocks_if_unshared\": %lld", n_beam, (long long)unshared);
}

static void print_summary(const core *c, const batch_run *b, const waste_acc *w, double wall,
			  bool is_static, int parallel, int bt)
{
	core_stats st;
	core_get_stats(c, &st);
	int n_comp = 0;
	int64_t gen = 0;
	double tpot_sum = 0;
	double *ttft = xmalloc(sizeof *ttft * (size_t)MAX(1, b->n_reqs * 64));
	for (int i = 0; i < b->n_reqs; i++)
		for (int k = 0; k < b->reqs[i].q.n; k++) {
			ttft[n_comp++] = b->reqs[i].m[k].ttft_ms;
			gen += b->reqs[i].m[k].n_gen;
			tpot_sum += b->reqs[i].m[k].tpot_ms;
		}
	qsort(ttft, (size_t)n_comp, sizeof *ttft, cmp_double);
	double ttft_mean = 0;
	for (int i = 0; i < n_comp; i++)
		ttft_mean += ttft[i] / n_comp;
	printf("{\"summary\": {\"policy\": \"%s\", \"parallel\": %d, \"requests\": %d, \"completions\": %d, "
	       "\"wall_s\": %.3f, \"steps\": %llu, \"prompt_tokens\": %lld, \"cached_tokens\": %lld, "
	       "\"prefix_hit_rate\": %.4f, \"generated_tokens\": %lld, \"gen_tok_per_s\": %.1f, "
	       "\"prefill_tokens\": %lld, \"decode_tokens\": %lld, \"ttft_ms_mean\": %.3f, "
	       "\"ttft_ms_p50\": %.3f, \"ttft_ms_p95\": %.3f, \"tpot_ms_mean\": %.3f, "
	       "\"waste_paged_mean\": %.4f, \"waste_paged_peak\": %.4f, "
	       "\"waste_contiguous_mean\": %.4f, \"waste_contiguous_peak\": %.4f, "
	       "\"preemptions\": %lld, \"pool_blocks\": %lld, \"block_tokens\": %d, \"kv_type_k\": \"%s\", "
	       "\"kv_type_v\": \"%s\", \"kv_tokens_vs_f16\": %.3f",
	       is_static ? "static" : "continuous", parallel, b->n_reqs, n_comp, wall,
	       (unsigned long long)st.steps, (long long)st.prompt_tokens, (long long)st.cached_tokens,
	       st.prompt_tokens ? (double)st.cached_tokens / (double)st.prompt_tokens : 0.0,
	       (long long)gen, gen / MAX(wall, 1e-9), (long long)st.prefill_tokens,
	       (long long)st.decode_tokens, ttft_mean, n_comp ? ttft[n_comp / 2] : 0,
	       n_comp ? ttft[(int)(0.95 * (n_comp - 1))] : 0, n_comp ? tpot_sum / n_comp : 0,
	       w->n ? w->sum / (double)w->n : 0, w->peak, w->n ? w->sum_contig / (double)w->n : 0,
	       w->peak_contig, (long long)st.preemptions, (long long)st.blocks_total, bt,
	       kv_type_name(st.kv_type_k), kv_type_name(st.kv_type_v), st.kv_vs_f16);
	printf(", \"blocks_used_peak\": %lld, \"failed\": %d", (long long)w->blocks_peak, count_failed(b));
	if (st.host_blocks || st.has_store)
		printf(", \"tiers\": {\"host_blocks\": %lld, \"cached_host\": %lld, \"cached_store\": %lld, "
		       "\"demoted\": %lld, \"swapped_out\": %lld, \"swapped_in\": %lld, \"bytes_up\": %lld, "
		       "\"bytes_down\": %lld, \"move_ms\": %.3f, \"store_written\": %lld, \"store_bytes\": %lld}",
		       (long long)st.host_blocks, (long long)st.cached_host, (long long)st.cached_store,
		       (long long)st.demoted, (long long)st.swapped_out, (long long)st.swapped_in,
		       (long long)st.bytes_up, (long long)st.bytes_down, st.move_s * 1e3,
		       (long long)st.store_written, (long long)st.store_bytes);
	print_beam_figures(b, bt);
	if (st.spec_steps) {
		printf(", \"draft\": {\"proposed\": %lld, \"accepted\": %lld, \"acceptance\": %.4f, "
		       "\"accepted_per_step\": %.3f, \"by_position\": [", (long long)st.spec_proposed,
		       (long long)st.spec_accepted, (double)st.spec_accepted / (double)MAX(1, st.spec_proposed),
		       (double)st.spec_accepted / (double)st.spec_steps);
		for (int j = 0; j < SPEC_MAX_K && st.spec_pos_proposed[j]; j++)
			printf(j ? ", %.4f" : "%.4f", (double)st.spec_pos_accepted[j] / (double)st.spec_pos_proposed[j]);
		printf("]}");
	}
	printf("}}\n");
	free(ttft);
}

/* What the command line asks for. */
typedef struct batch_args {
	const char *model, *file, *policy;   /* borrowed from argv */
	bool is_static;                      /* --policy static */
	int parallel, n_predict, ctx, bt, chunk, pool_blocks;
	samp_params sp;                      /* the requests' defaults */
	draft_opts draft;
	kv_opts kv;
	tier_opts tier;
} batch_args;

/* Parses batch's flags into *a: 0, or EXIT_USAGE after printing the
 * problem. */
static int parse_batch(int argc, char **argv, batch_args *a)
{
	*a = (batch_args){.policy = "continuous", .parallel = 16, .n_predict = 128, .bt = 16, .chunk = 512,
			  .sp = samp_default_params()};
	opt opts[] = {
		DRAFT_OPTS(&a->draft), KV_OPTS(&a->kv), TIER_OPTS(&a->tier),
		{"-m", "--model", OPT_PATH, &a->model, P_NONE}, {"-f", "--file", OPT_PATH, &a->file, P_NONE},
		{"--parallel", NULL, OPT_INT, &a->parallel, P_PARALLEL},
		{"-n", "--n-predict", OPT_INT, &a->n_predict, P_MAX_TOKENS},
		{"-c", "--ctx", OPT_INT, &a->ctx, P_CONTEXT}, {"--block-size", NULL, OPT_INT, &a->bt, P_BLOCK_SIZE},
		{"--pool-blocks", NULL, OPT_INT, &a->pool_blocks, P_POOL_BLOCKS},
		{"--chunk", NULL, OPT_INT, &a->chunk, P_CHUNK},
		{"--policy", NULL, OPT_STR, &a->policy, P_NONE}, SAMPLING_OPTS(&a->sp),
	};
	const char *pos[1];
	if (cli_parse_opts("batch", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	a->is_static = !strcmp(a->policy, "static");
	const char *bad = !a->model || !a->file ? "needs -m MODEL and -f REQUESTS.jsonl"
		: !a->is_static && strcmp(a->policy, "continuous") ? "--policy must be continuous or static"
		: cli_draft_check(&a->draft);
	if (bad) {
		fprintf(stderr, "pagechat: batch: %s (see pagechat batch --help)\n", bad);
		return EXIT_USAGE;
	}
	return 0;
}

/* The pool's bytes on a GPU: the --gpu-mem-fraction share left after the
 * weights; a draft's pool has as many blocks, so the share is split. -1 on
 * the CPU. */
static int64_t device_pool_bytes(cli_device *dev, const llama_plan *plan, const llama_model *m,
				 const llama_model *dm, const kv_opts *kv, int chunk)
{
	int64_t budget = cli_device_budget(dev);
	if (budget < 0 || llama_kern(m) != dev->kern || llama_host_layers(m) > 0)
		return -1; /* some layers on the CPU: the planned pool, not all the device's memory */
	int64_t tb = plan->kv_token_bytes, db = 0;
	if (dm) {
		llama_plan dp;
		llama_plan_memory(llama_hp(dm), 0, 1, kv->k_type, kv->v_type, chunk, &dp);
		db = dp.kv_token_bytes;
	}
	return (int64_t)((double)budget * (double)tb / (double)(tb + db));
}

static int run_batch(cli_device *dev, const batch_args *a)
{
	err e = {0};
	kv_opts kv = a->kv;
	if (cli_kv_types(&kv, &e))
		return cli_fail(&e);
	cli_plan_kv(dev, a->pool_blocks > 0 ? (int64_t)a->pool_blocks * a->bt : 0, 256ll << 20, &kv);
	llama_model *m = cli_open_model(dev, a->model, a->chunk, 0, &e), *dm = NULL;
	tok *dt = NULL;
	gguf_file *f = m ? gguf_open(a->model, &e) : NULL;
	tok *tk = f ? tok_new(f, &e) : NULL;
	gguf_close(f);
	batch_run b = {0};
	core *c = NULL;
	int rc = 1;
	if (!tk)
		goto fail;
	if (load_requests(a->file, tk, llama_hp(m)->n_vocab, &a->sp, a->n_predict, &b))
		goto out;
	llama_plan plan;
	llama_plan_memory(llama_hp(m), 0, 1, kv.k_type, kv.v_type, a->chunk, &plan);
	int64_t pool_tokens = a->pool_blocks > 0 ? (int64_t)a->pool_blocks * a->bt
						 : (256ll << 20) / plan.kv_token_bytes;
	if (cli_check_memory(dev, a->model, llama_hp(m), (int64_t)gguf_data_bytes(llama_file(m)), pool_tokens,
			     &kv, a->chunk, &e))
		goto fail;
	core_params cp = {.model = m, .tok = tk, .block_tokens = a->bt, .pool_blocks = a->pool_blocks,
			  .pool_bytes = 256ll << 20, .n_ctx = a->ctx, .step_tokens = a->chunk,
			  .max_running = MIN(256, a->chunk), .kv_type_k = kv.k_type,
			  .kv_type_v = kv.v_type};
	if (cli_setup_draft(dev, &a->draft, a->chunk, &cp, &dm, &dt, &e) ||
	    cli_tier_setup(&a->tier, plan.kv_token_bytes * a->bt, &cp, &e))
		goto fail;
	int64_t on_device = device_pool_bytes(dev, &plan, m, dm, &kv, a->chunk);
	if (on_device >= 0 && a->pool_blocks == 0)
		cp.pool_bytes = on_device;
	if (!(c = core_new(&cp, on_event, &b, &e)))
		goto fail;
	waste_acc w = {0};
	double t0 = now_s();
	if (run_requests(c, &b, a->parallel, a->is_static, &w, &e))
		goto fail;
	double wall = now_s() - t0;
	for (int i = 0; i < b.n_reqs; i++)
		for (int k = 0; k < b.reqs[i].q.n; k++)
			print_completion(&b.reqs[i], i, k);
	print_summary(c, &b, &w, wall, a->is_static, a->parallel, a->bt);
	core_stats st;
	core_get_stats(c, &st);
	cli_print_tiers(stderr, c, &st);
	int n_failed = count_failed(&b), n_comp = 0;
	for (int i = 0; i < b.n_reqs; i++)
		n_comp += b.reqs[i].q.n;
	if (n_failed)
		fprintf(stderr, "pagechat: batch: %d of %d completions failed (their lines hold the \"error\")\n",
			n_failed, n_comp);
	rc = n_failed ? 1 : 0;
	goto out;
fail:
	cli_fail(&e);
out:
	core_free(c);
	free_requests(&b);
	tok_free(dt);
	llama_free(dm);
	tok_free(tk);
	llama_free(m);
	return rc;
}

int cmd_batch(int argc, char **argv, cli_device *dev)
{
	batch_args a;
	int rc = parse_batch(argc, argv, &a);
	return rc ? rc : run_batch(dev, &a);
}
