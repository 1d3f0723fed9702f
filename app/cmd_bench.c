/* app/cmd_bench.c: `pagechat bench`, throughput like llama-bench.
 *
 * pp N: one forward over N prompt tokens (one batch, logits of the last row);
 * tg N: N single-token decode steps from an empty context; tg N xS: S
 * sequences decoding together, one batch of S tokens per step (total tokens
 * per second). Each test runs once to warm up, then REPS times; figures are
 * mean +- standard deviation (and the median). The machine's memory read
 * bandwidth is measured in the same run, before and after the tests (the
 * better of the two), by streaming over a buffer far larger than the caches
 * with the same number of threads; decode speed is shown against the limit
 * it implies: bandwidth / bytes read per generated token (weights plus the
 * average KV cache the step attends to; S sequences decoding together share
 * one read of the weights per step). On the CPU, prompt speed is shown
 * against the int8 limit: the rate of the kernel set's int8 multiply-add
 * instruction on all threads (kern_cpu_int8_peak, timed in the same run) /
 * the multiply-adds per token of the quantized weight matrices (the output
 * matrix once per prompt; attention and the float matrices left out, so the
 * true limit is a little lower). */
#include "app/bench.h"
#include "app/cmds.h"

#include "engine/runner.h"
#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "models/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A sanitizer build names itself in the backend ("cpu/avx512+asan"), so a
 * benchmark script can refuse its timings (tools/bench_llamacpp.sh does). */
#if defined(__SANITIZE_THREAD__)
#define SAN_TAG "+tsan"
#elif defined(__SANITIZE_ADDRESS__)
#define SAN_TAG "+asan"
#else
#define SAN_TAG ""
#endif

const char usage_bench[] =
	"usage: pagechat bench -m MODEL [-p 512] [-n 128] [-d 0] [-t N] [-r REPS] [--batch 1,4,16]\n"
	"                     [--kv-type T] [--json]\n"
	"  Measures prompt processing (pp: -p tokens in one batch) and generation (tg: -n\n"
	"  tokens one at a time) in tokens/s, mean +- stddev over REPS runs (default 5),\n"
	"  and batched decoding of -n tokens for each listed number of sequences.\n"
	"  Also measures the memory read bandwidth and prints decode speed as a fraction\n"
	"  of the limit it sets (bandwidth / bytes read per generated token), and on\n"
	"  the CPU prompt speed as a fraction of the int8 multiply-add rate's limit.\n"
	"  -t N     threads (default: one per core); -p 0 or -n 0 skips that test\n"
	"  -d D     depth: every test starts with D tokens of context already in the KV\n"
	"           cache of each sequence (filled untimed), e.g. -d 2048 for decoding at 2k\n"
	"  --kv-type T  the KV cache's rows: f16 (default), f32, q8 or fp8; --kv-type-k and\n"
	"           --kv-type-v set K and V apart\n"
	"  --peak-gbs G  use G GB/s (a GPU's nominal HBM bandwidth, e.g. 4800 on an H200)\n"
	"            as the limit instead of measuring it\n"
	"  --bw-mib N  size of the bandwidth test's buffer (default 512; keep it far above\n"
	"           the caches)\n"
	"  --json   one JSON object on stdout instead of the table\n"
	"  --spec -md DRAFT.gguf | --spec --draft ngram [--draft-k K] [--draft-adaptive] [--draft-cost C]\n"
	"           greedy generation of -n tokens with and without the draft: speed-up and\n"
	"           acceptance figures\n"
	"  --spec ... --prompts FILE  the prompts of FILE (e.g. tools/spec_prompts.txt)\n"
	"           through the chat template, each answer up to -n tokens, in -r rounds\n"
	"           that alternate no draft, the draft at k and at the adaptive k: per\n"
	"           category medians; drafted tokens that differ from no draft's fail it\n";

#define MAX_BATCHES 16

/* ---- statistics ---- */

typedef struct stats {
	double mean, sd, median;
} stats;

static stats stats_of(double *v, int n)
{
	stats s = {0};
	for (int i = 0; i < n; i++)
		s.mean += v[i] / n;
	for (int i = 0; i < n; i++)
		s.sd += (v[i] - s.mean) * (v[i] - s.mean);
	s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
	s.median = median_of(v, n);
	return s;
}

/* ---- the runs ---- */

typedef struct bench_ctx {
	runner *run;     /* owned; a private pool with a sequence per batch slot */
	int n_vocab;
	int32_t *tok;    /* owned; [max_batch] the step's tokens */
	int depth;      /* context each sequence holds before a test */
	int max_batch;  /* tokens one forward step may take */
} bench_ctx;

static int32_t token_at(const bench_ctx *c, int i)
{
	return (int32_t)((i * 7919 + 3) % c->n_vocab);
}

/* One forward step of n tokens spread over sequences [s0, s0 + n_seqs):
 * each gets per tokens of the step; logits for each sequence's last token
 * when want_all, else only the very last. */
static int step(bench_ctx *c, int s0, int n_seqs, int per, int base, bool want_all, err *e)
{
	for (int s = s0, n = 0; s < s0 + n_seqs; s++) {
		for (int i = 0; i < per; i++)
			c->tok[n + i] = token_at(c, base + i + s);
		bool out = want_all || s == s0 + n_seqs - 1;
		if (runner_append(c->run, s, c->tok + n, per, per - 1, out, e) < 0) {
			err_prefix(e, "bench");
			return -1;
		}
		n += per;
	}
	return runner_run(c->run, e);
}

static void reset(bench_ctx *c, int n_seqs)
{
	for (int s = 0; s < n_seqs; s++)
		runner_seq_reset(c->run, s);
}

/* Tokens per second of one run: pp (n_prompt > 0) or n_gen decode steps of
 * n_seqs sequences, each after c->depth tokens of context (not timed). */
static int run_once(bench_ctx *c, int n_prompt, int n_gen, int n_seqs, double *tps, err *e)
{
	reset(c, n_seqs);
	for (int s = 0; s < n_seqs; s++)
		for (int done = 0; done < c->depth; done += c->max_batch)
			if (step(c, s, 1, MIN(c->max_batch, c->depth - done), done, false, e))
				return -1;
	double t0 = now_s();
	if (n_prompt > 0) {
		if (step(c, 0, 1, n_prompt, c->depth, false, e))
			return -1;
		*tps = n_prompt / (now_s() - t0);
		return 0;
	}
	for (int i = 0; i < n_gen; i++)
		if (step(c, 0, n_seqs, 1, c->depth + i, true, e))
			return -1;
	*tps = (double)n_gen * n_seqs / (now_s() - t0);
	return 0;
}

typedef struct result {
	char name[32];
	int n_seqs;
	stats s;
} result;

static int run_test(bench_ctx *c, int n_prompt, int n_gen, int n_seqs, int reps, result *r, err *e)
{
	double v[64], warm;
	reps = MIN(reps, 64);
	if (run_once(c, n_prompt, n_prompt ? 0 : MIN(n_gen, 8), n_seqs, &warm, e))
		return -1;
	for (int i = 0; i < reps; i++)
		if (run_once(c, n_prompt, n_gen, n_seqs, &v[i], e))
			return -1;
	r->n_seqs = n_seqs;
	r->s = stats_of(v, reps);
	size_t at = 0;
	if (n_prompt)
		bfmt(r->name, sizeof r->name, &at, "pp%d", n_prompt);
	else if (n_seqs == 1)
		bfmt(r->name, sizeof r->name, &at, "tg%d", n_gen);
	else
		bfmt(r->name, sizeof r->name, &at, "tg%d x%d", n_gen, n_seqs);
	if (c->depth)
		bfmt(r->name, sizeof r->name, &at, " @d%d", c->depth);
	return 0;
}

/* Weight bytes one decode step reads: every tensor once, except the token
 * embedding table, of which one row is read (all of it when it doubles as the
 * output matrix). */
static double weight_bytes_per_token(const llama_model *m)
{
	const gguf_file *f = llama_file(m);
	double total = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		if (!strcmp(t->name, "token_embd.weight") && !llama_hp(m)->tied_output)
			total += (double)t->n_bytes / (double)MAX(t->ne[1], 1);
		else
			total += (double)t->n_bytes;
	}
	return total;
}

/* Multiply-adds per token of an n_prompt-token prompt in the weight
 * matrices stored quantized (the int8 dot products): every such matrix but
 * the embedding's table, which is read one row per token unless it is the
 * tied output too; the output matrix once per prompt, as a prompt's logits
 * are its last token's. */
static double int8_macs_per_token(const llama_model *m, int n_prompt)
{
	const gguf_file *f = llama_file(m);
	bool tied = llama_hp(m)->tied_output;
	double total = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		bool embd = !strcmp(t->name, "token_embd.weight");
		bool out = !strcmp(t->name, "output.weight") || (embd && tied);
		if ((embd && !tied) || t->ne[1] <= 1 || dtype_block_elems(t->type) <= 1)
			continue;
		total += (double)t->ne[0] * (double)t->ne[1] / (out ? MAX(n_prompt, 1) : 1);
	}
	return total;
}

static void print_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	putchar('"');
}

/* What the command line asks for. */
typedef struct bench_args {
	const char *model;                      /* borrowed from argv */
	int n_prompt, n_gen, n_threads, reps;   /* -p, -n, -t (0: one per core), -r */
	int bw_mib, depth;                      /* --bw-mib, -d */
	bool json, spec;
	float peak_gbs;                         /* --peak-gbs (0: measure) */
	draft_opts draft;                       /* for --spec */
	const char *prompts;                    /* --prompts (--spec) */
	kv_opts kv;                             /* resolved */
	int batches[MAX_BATCHES], n_batches;    /* --batch */
} bench_args;

/* Parses bench's flags into *a and resolves the KV types: 0, EXIT_USAGE
 * after printing a usage problem, or 1 after printing a bad KV type. */
static int parse_bench(int argc, char **argv, bench_args *a)
{
	const char *batch_list = "1,4,16";
	*a = (bench_args){.n_prompt = 512, .n_gen = 128, .reps = 5, .bw_mib = 512};
	opt opts[] = {
		{"--spec", NULL, OPT_FLAG, &a->spec, P_NONE}, DRAFT_OPTS(&a->draft),
		{"--prompts", NULL, OPT_PATH, &a->prompts, P_NONE},
		{"-m", "--model", OPT_PATH, &a->model, P_NONE},
		{"-p", "--n-prompt", OPT_INT, &a->n_prompt, P_BENCH_PROMPT},
		{"-n", "--n-gen", OPT_INT, &a->n_gen, P_BENCH_GEN}, {"-t", "--threads", OPT_INT, &a->n_threads, P_THREADS},
		{"-r", "--repetitions", OPT_INT, &a->reps, P_BENCH_REPS},
		{"--batch", NULL, OPT_STR, &batch_list, P_NONE}, {"--json", NULL, OPT_FLAG, &a->json, P_NONE},
		{"--bw-mib", NULL, OPT_INT, &a->bw_mib, P_BENCH_BW_MIB},
		{"-d", "--depth", OPT_INT, &a->depth, P_BENCH_DEPTH}, KV_OPTS(&a->kv),
		{"--peak-gbs", NULL, OPT_FLOAT, &a->peak_gbs, P_PEAK_GBS},
	};
	const char *pos[1];
	if (cli_parse_opts("bench", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	const char *bad = NULL;
	if (!a->model)
		bad = "needs -m MODEL";
	else if (a->prompts && !a->spec)
		bad = "--prompts goes with --spec";
	else if (cli_parse_int_list(batch_list, 1, 256, a->batches, MAX_BATCHES, &a->n_batches))
		bad = "--batch wants a comma-separated list of 1..256 (at most 16 entries)";
	else
		bad = cli_draft_check(&a->draft);
	if (bad) {
		fprintf(stderr, "pagechat: bench: %s (see pagechat bench --help)\n", bad);
		return EXIT_USAGE;
	}
	a->n_threads = cli_threads(a->n_threads, "-t");
	err e = {0};
	return cli_kv_types(&a->kv, &e) ? cli_fail(&e) : 0;
}

/* What a run measured and the limits the bandwidth sets. */
typedef struct bench_report {
	char backend[64];                       /* "cpu/avx2", "cuda/device" */
	int used_threads;
	bool dev;                               /* a device backend */
	size_t bw_bytes;                        /* the bandwidth test's buffer */
	double bw;                              /* bytes/s: --peak-gbs, or the better of two tests */
	result res[MAX_BATCHES + 2];
	double lim[MAX_BATCHES + 2];            /* each test's limit in tokens/s (0: none) */
	int n_res;
	double wbytes, kv_bytes, bytes_tok;     /* bytes read per generated token */
	double limit;                           /* tg limit of one sequence, tokens/s (0: none) */
	double int8_peak, int8_macs;            /* multiply-adds/s, per token (0: none) */
	double pp_limit;                        /* their ratio, tokens/s (0: none) */
} bench_report;

static double bandwidth(const kern_ops *K, const bench_args *a, const bench_report *r)
{
	if (a->peak_gbs > 0)
		return a->peak_gbs * 1e9;
	return r->dev ? bench_bw_device(K, r->bw_bytes, 3) : bench_bw_host(r->bw_bytes, r->used_threads, 3);
}

/* The tests a asks for, between two bandwidth measurements: the better of
 * the one after the tests and the one before them counts, so a busy moment
 * on a shared machine does not lower the limit. 0, or -1 with e. */
static int measure(bench_ctx *c, const kern_ops *K, const bench_args *a, int max_seqs, bench_report *r,
		   err *e)
{
	r->bw_bytes = (size_t)a->bw_mib << 20;
	if (r->dev && a->bw_mib == 512)
		r->bw_bytes = (size_t)2 << 30; /* far above a GPU's L2 */
	double bw_before = bandwidth(K, a, r);
	if (a->n_prompt > 0 && run_test(c, a->n_prompt, 0, 1, a->reps, &r->res[r->n_res++], e))
		return -1;
	if (a->n_gen > 0 && run_test(c, 0, a->n_gen, 1, a->reps, &r->res[r->n_res++], e))
		return -1;
	for (int i = 0; a->n_gen > 0 && i < a->n_batches; i++)
		if (a->batches[i] > 1 && run_test(c, 0, a->n_gen, a->batches[i], a->reps, &r->res[r->n_res++], e))
			return -1;
	reset(c, max_seqs);
	r->bw = MAX(bw_before, bandwidth(K, a, r));
	r->int8_peak = r->dev ? 0 : kern_cpu_int8_peak();
	return 0;
}

static void set_limits(bench_report *r, const llama_model *m, const bench_args *a)
{
	r->wbytes = weight_bytes_per_token(m);
	/* tg attends to depth + n_gen / 2 positions on average, K and V, every
	 * layer, in the pool's row types */
	r->kv_bytes = (double)llama_kv_token_bytes(llama_hp(m), a->kv.k_type, a->kv.v_type) *
		      (a->depth + a->n_gen / 2.0);
	r->bytes_tok = r->wbytes + r->kv_bytes;
	r->limit = r->bw > 0 ? r->bw / r->bytes_tok : 0;
	/* S sequences decoding together read the weights once per step and each
	 * its own KV: S * bw / (weights + S * kv) tokens per second at most */
	for (int i = 0; i < r->n_res; i++)
		r->lim[i] = r->bw > 0 ? r->res[i].n_seqs * r->bw / (r->wbytes + r->res[i].n_seqs * r->kv_bytes) : 0;
	r->int8_macs = int8_macs_per_token(m, a->n_prompt);
	r->pp_limit = r->int8_peak > 0 && r->int8_macs > 0 ? r->int8_peak / r->int8_macs : 0;
	for (int i = 0; i < r->n_res; i++)
		if (r->res[i].name[0] == 'p')
			r->lim[i] = r->pp_limit;
}

/* Bytes of the weights mapped in 2 MiB pages (at most all of them), or -1
 * on a device. */
static int64_t huge_bytes(const llama_model *m, bool dev)
{
	const gguf_file *f = llama_file(m);
	int64_t huge = dev ? -1 : gguf_huge_mapped_bytes(f);
	return MIN(huge, (int64_t)gguf_data_bytes(f));
}

static void print_json(const bench_report *r, const bench_args *a, const llama_model *m)
{
	printf("{\"model\": ");
	print_json_str(a->model);
	printf(", \"params\": %.0f, \"weights_bytes\": %.0f, \"backend\": \"%s\", \"threads\": %d, "
	       "\"bandwidth_gbs\": %.3f, \"bytes_per_token\": %.0f, \"kv_bytes_per_token\": %.0f, "
	       "\"tg_limit_tps\": %.3f, \"kv_type_k\": \"%s\", \"kv_type_v\": \"%s\", \"depth\": %d, "
	       "\"weights_huge_bytes\": %lld, \"weights_packed_bytes\": %lld, \"int8_macs_per_s\": %.4g, "
	       "\"int8_macs_per_token\": %.4g, \"pp_limit_tps\": %.3f, \"tests\": [",
	       (double)llama_n_params(m), (double)gguf_data_bytes(llama_file(m)), r->backend, r->used_threads,
	       r->bw / 1e9, r->bytes_tok, r->kv_bytes, r->limit, kv_type_name(a->kv.k_type),
	       kv_type_name(a->kv.v_type), a->depth, (long long)huge_bytes(m, r->dev),
	       (long long)llama_packed_bytes(m), r->int8_peak, r->int8_macs, r->pp_limit);
	for (int i = 0; i < r->n_res; i++) {
		printf("%s{\"test\": \"%s\", \"seqs\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f, "
		       "\"tps_median\": %.3f", i ? ", " : "", r->res[i].name, r->res[i].n_seqs, r->res[i].s.mean,
		       r->res[i].s.sd, r->res[i].s.median);
		if (r->lim[i] > 0 && (r->res[i].name[0] == 'p' || r->limit > 0))
			printf(", \"limit_tps\": %.3f, \"of_limit\": %.4f", r->lim[i], r->res[i].s.mean / r->lim[i]);
		printf("}");
	}
	printf("]}\n");
}

/* A note when a tg test ran above its limit: why that can be. */
static void print_above_limit(const bench_report *r)
{
	double llc = bench_bw_cache_bytes();
	for (int i = 0; i < r->n_res; i++)
		if (r->res[i].name[0] == 't' && r->limit > 0 && r->res[i].s.mean > r->lim[i]) {
			if (llc > 0 && r->wbytes < 2 * llc)
				printf("note: above 100%% of the limit: the %.1f MiB of weights fit in the %.0f MiB "
				       "cache, so decoding is not bound by memory bandwidth\n", r->wbytes / 1048576.0,
				       llc / 1048576.0);
			else
				printf("note: above 100%% of the limit: the bandwidth test ran slower than decoding "
				       "(other processes competing?); repeat on a quiet machine\n");
			break;
		}
}

static void print_table(const bench_report *r, const bench_args *a, const llama_model *m)
{
	double file_mib = (double)gguf_data_bytes(llama_file(m)) / 1048576.0;
	int64_t huge = huge_bytes(m, r->dev);
	printf("model %s: %s, %.2f M params, %.1f MiB of weights\n", a->model, llama_hp(m)->arch,
	       (double)llama_n_params(m) / 1e6, file_mib);
	printf("backend %s, %d threads, %d reps, KV %s/%s\n", r->backend, r->used_threads, a->reps,
	       kv_type_name(a->kv.k_type), kv_type_name(a->kv.v_type));
	printf("| %-16s | %10s | %8s | %10s | %20s |\n", "test", "t/s", "+-", "median", "of limit (t/s)");
	printf("|------------------|------------|----------|------------|----------------------|\n");
	for (int i = 0; i < r->n_res; i++) {
		char frac[32] = "";
		if (r->lim[i] > 0 && (r->res[i].name[0] == 'p' || r->limit > 0))
			snprintf(frac, sizeof frac, "%.1f%% of %.*f", 100 * r->res[i].s.mean / r->lim[i],
				 r->lim[i] < 10 ? 1 : 0, r->lim[i]);
		printf("| %-16s | %10.2f | %8.2f | %10.2f | %20s |\n", r->res[i].name, r->res[i].s.mean,
		       r->res[i].s.sd, r->res[i].s.median, frac);
	}
	if (a->peak_gbs > 0)
		printf("memory bandwidth %.2f GB/s (--peak-gbs)\n", r->bw / 1e9);
	else if (r->dev)
		printf("device memory bandwidth %.2f GB/s (read + write, best of 6 copies of %zu MiB)\n",
		       r->bw / 1e9, r->bw_bytes >> 20);
	else
		printf("memory read bandwidth %.2f GB/s (%d threads, best of 6 passes over %zu MiB)\n",
		       r->bw / 1e9, r->used_threads, r->bw_bytes >> 20);
	double packed_mib = (double)llama_packed_bytes(m) / 1048576.0;
	if (packed_mib > 0)
		printf("weights packed for the CPU kernels: %.1f of %.1f MiB (their own memory, in 2 MiB pages where "
		       "the system gives them; the file's copy of those is let go)\n", packed_mib, file_mib);
	if (huge >= 0)
		printf("weights read from the file in 2 MiB pages: %.1f of %.1f MiB (the rest in 4 KiB pages: "
		       "slower reads)\n", (double)huge / 1048576.0, file_mib - packed_mib);
	printf("bytes read per generated token %.2f MB (weights %.2f MB + KV %.2f MB at the average "
	       "tg context)\n", r->bytes_tok / 1e6, r->wbytes / 1e6, r->kv_bytes / 1e6);
	if (r->limit > 0)
		printf("decode limit at that bandwidth %.1f t/s per sequence\n", r->limit);
	if (r->pp_limit > 0)
		printf("prompt limit %.1f t/s: int8 multiply-adds %.1f G/s (%s, %d threads) / %.2f G per token "
		       "(quantized matrices)\n", r->pp_limit, r->int8_peak / 1e9, kern_cpu_isa(), r->used_threads,
		       r->int8_macs / 1e9);
	print_above_limit(r);
}

static int run_bench(cli_device *device, const bench_args *a)
{
	int n_prompt = a->n_prompt, n_gen = a->n_gen, depth = a->depth, max_seqs = 1;
	kv_opts kv = a->kv;
	err e = {0};
	for (int i = 0; i < a->n_batches; i++)
		max_seqs = MAX(max_seqs, a->batches[i]);
	int max_tokens = MAX(MAX(n_prompt, max_seqs), depth > 0 ? MIN(depth, 512) : 1);
	int64_t need_tokens = MAX((int64_t)n_prompt + depth, ((int64_t)n_gen + depth) * max_seqs) + 16 * max_seqs;
	int64_t pool_tokens = (need_tokens / 16 + max_seqs + 1) * 16;
	llama_hparams plan_hp;
	int64_t weights;
	cli_plan_kv(device, pool_tokens, 0, &kv);
	/* the memory plan before the model's buffers and the pool exist */
	if (cli_read_plan(a->model, &plan_hp, &weights, &e) ||
	    cli_check_memory(device, a->model, &plan_hp, weights, pool_tokens, &kv, max_tokens, &e))
		return cli_fail(&e);
	llama_model *m = cli_open_model(device, a->model, max_tokens, a->n_threads, &e);
	if (!m)
		return cli_fail(&e);
	const llama_hparams *hp = llama_hp(m);
	const kern_ops *K = llama_kern(m);
	bench_report rep = {.dev = K->buf_alloc != NULL, .used_threads = K->set_threads(a->n_threads)};
	snprintf(rep.backend, sizeof rep.backend, "%s/%s%s", K->name, rep.dev ? "device" : kern_cpu_isa(), SAN_TAG);
	if (SAN_TAG[0])
		fprintf(stderr, "bench: this pagechat is a sanitizer build (%s): its timings say nothing about "
			"speed; build it with make (no SANITIZE)\n", SAN_TAG + 1);
	bench_ctx c = {.n_vocab = hp->n_vocab, .depth = depth, .max_batch = max_tokens};
	runner_params rp = {
		.model = m, .max_rows = max_tokens, .max_seqs = max_seqs, .max_out = max_seqs, .n_seqs = max_seqs,
		.pool_tokens = pool_tokens, .block_tokens = 16,
		.k_type = kv.k_type, .v_type = kv.v_type,
	};
	if (!(c.run = runner_new(&rp, &e))) {
		llama_free(m);
		return cli_fail(&e);
	}
	c.tok = xmalloc((size_t)max_tokens * sizeof *c.tok);

	int rc = 0;
	if (measure(&c, K, a, max_seqs, &rep, &e)) {
		rc = cli_fail(&e);
		goto out;
	}
	set_limits(&rep, m, a);
	if (a->json)
		print_json(&rep, a, m);
	else
		print_table(&rep, a, m);
out:
	runner_free(c.run);
	free(c.tok);
	llama_free(m);
	return rc;
}

int cmd_bench(int argc, char **argv, cli_device *device)
{
	bench_args a;
	int rc = parse_bench(argc, argv, &a);
	if (rc)
		return rc;
	if (a.spec) {
		err e = {0};
		return bench_spec(device, a.model, &a.draft, a.prompts, a.n_gen, a.reps, a.n_threads, &e) ? cli_fail(&e) : 0;
	}
	return run_bench(device, &a);
}
