/* app/cmd_info.c: `pagechat info`: a model file's architecture, tensors and
 * sizes, and what its KV cache needs in memory (and where its layers go on a
 * device, when the device flags choose one or --device-mem describes one). */
#include "app/cmds.h"

#include "kernels/kern.h"
#include "kernels/kvq.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "models/place.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char usage_info[] =
	"usage: pagechat info MODEL [-c CTX] [-v] [--device-mem SIZE] [-ngl N|auto]\n"
	"  Prints the architecture, dimensions, parameter count, tensor types and sizes,\n"
	"  and the KV-cache memory per token, per 16-token block and for CTX tokens\n"
	"  (default: the model's training context). -v lists every tensor.\n"
	"  On a device (or with --device-mem SIZE, a device of that size, without one):\n"
	"  where the layers go (-ngl auto: the most that fit), and the bytes and KV on each side.\n"
	"  --kv-host SIZE, --kv-store DIR [--kv-store-max SIZE]: the lower KV tiers in the plan.\n";

static void print_bytes(const char *label, double bytes)
{
	char b[32];
	printf("%s%s", label, cli_fmt_bytes(b, sizeof b, bytes));
}

static void print_tensor_summary(const gguf_file *f, bool verbose)
{
	int64_t count[DT_COUNT] = {0}, bytes[DT_COUNT] = {0};
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		count[t->type]++;
		bytes[t->type] += t->n_bytes;
		if (verbose)
			printf("  %-32s %-6s {%lld, %lld, %lld, %lld} %lld bytes\n", t->name,
			       dtype_name(t->type), (long long)t->ne[0], (long long)t->ne[1],
			       (long long)t->ne[2], (long long)t->ne[3], (long long)t->n_bytes);
	}
	for (int t = 0; t < DT_COUNT; t++)
		if (count[t]) {
			printf("tensors %-6s %lld, ", dtype_name((uint32_t)t), (long long)count[t]);
			print_bytes("", (double)bytes[t]);
			putchar('\n');
		}
}

static void print_kv_plan(const llama_hparams *hp, int64_t ctx)
{
	static const int order[] = {KV_F16, KV_F32, KV_Q8, KV_FP8};
	printf("KV cache = 2 x %d layers x %d KV heads x %d head dim x bytes per element "
	       "(8-bit types add an f16 scale per head and row)\n", hp->n_layers, hp->n_kv_heads, hp->head_dim);
	int64_t f16 = llama_kv_token_bytes(hp, KV_F16, KV_F16);
	for (size_t i = 0; i < ARRAY_LEN(order); i++) {
		int64_t tok = llama_kv_token_bytes(hp, order[i], order[i]);
		printf("KV %s: %lld bytes/token, ", kv_type_name(order[i]), (long long)tok);
		print_bytes("", (double)tok * 16);
		printf(" per 16-token block, ");
		print_bytes("", (double)tok * (double)ctx);
		printf(" for %lld tokens, %lld tokens/GiB (%.2fx f16)\n", (long long)ctx,
		       (long long)((1ll << 30) / tok), (double)f16 / (double)tok);
	}
}

/* A sliding window's K/V (kv/pool.h): the windowed layers keep their last
 * window tokens only, so past it a token costs the global layers' bytes. */
static void print_window_kv(const llama_hparams *hp, int64_t ctx)
{
	if (hp->swa_window <= 0 || hp->n_swa_layers <= 0)
		return;
	int64_t all = llama_kv_token_bytes(hp, KV_F16, KV_F16), layer = all / hp->n_layers;
	int64_t global = layer * (hp->n_layers - hp->n_swa_layers), win = layer * hp->n_swa_layers;
	int64_t kept = MIN(ctx, (int64_t)hp->swa_window);
	double with = (double)global * (double)ctx + (double)win * (double)kept, without = (double)all * (double)ctx;
	printf("KV f16 with the sliding window: %lld bytes/token without the window (every layer), %lld bytes/token "
	       "with it (the %d global layer%s; the %d windowed ones keep %d tokens: ", (long long)all,
	       (long long)global, hp->n_layers - hp->n_swa_layers, hp->n_layers - hp->n_swa_layers == 1 ? "" : "s",
	       hp->n_swa_layers, hp->swa_window);
	print_bytes("", (double)win * hp->swa_window);
	printf(" per sequence); for %lld tokens ", (long long)ctx);
	print_bytes("", with);
	printf(" instead of ");
	print_bytes("", without);
	printf(" (%.1f%%)\n", 100.0 * with / without);
}

/* What a Gemma 3 file sets beyond Llama's hyperparameters, one line each. */
static void print_gemma(const llama_hparams *hp)
{
	if (!hp->post_norms && !hp->ffn_gelu && hp->swa_window == 0 && hp->logit_softcap == 0)
		return;
	printf("norms after attention and FFN too: %s; FFN gate: %s; embeddings x%g; attention scale %g\n",
	       hp->post_norms ? "yes" : "no", hp->ffn_gelu ? "GELU (tanh)" : "SiLU", hp->embd_scale, hp->attn_scale);
	if (hp->swa_window > 0)
		printf("sliding window %d tokens on %d of %d layers (the others attend to everything); windowed layers' "
		       "rope base %g\n", hp->swa_window, hp->n_swa_layers, hp->n_layers, hp->rope_base_swa);
	if (hp->logit_softcap > 0)
		printf("logits soft-capped at %g (cap x tanh(logit / cap))\n", hp->logit_softcap);
}

/* The device's figures as placement sees them: the backend's (at most
 * --device-mem), or a device of --device-mem bytes planned without one. */
static void print_device(cli_device *dev, const place_params *p)
{
	int64_t fr = dev->opts.device_mem, tot = dev->opts.device_mem;
	const char *name = "planned (--device-mem; none used here)";
	if (cli_on_device(dev)) {
		err e = {0};
		const kern_ops *K = cli_kern(dev, &e);
		K->mem_info(&fr, &tot);
		if (dev->opts.device_mem > 0 && dev->opts.device_mem < tot)
			fr = MAX(0, fr - (tot - dev->opts.device_mem)), tot = dev->opts.device_mem;
		name = K->name;
	}
	char a[32], b[32], c[32], d[32];
	place_plan pl;
	place_figures(p, 0, false, &pl);
	printf("device %s: %s free of %s; --gpu-mem-fraction %.2f leaves %s to fill, %s of it kept free\n", name,
	       cli_fmt_bytes(a, sizeof a, (double)fr), cli_fmt_bytes(b, sizeof b, (double)tot), dev->opts.mem_fraction,
	       cli_fmt_bytes(c, sizeof c, (double)MAX(0, p->dev_budget)), cli_fmt_bytes(d, sizeof d, (double)pl.margin));
}

/* Bytes of the regular files under dir and one level of folders below it
 * (a KV store: one folder per model fingerprint), and how many. */
static int64_t dir_bytes(const char *dir, int depth, int64_t *files)
{
	DIR *d = opendir(dir);
	int64_t sum = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		char path[4096];
		struct stat sb;
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		if (de->d_name[0] == '.' || lstat(path, &sb))
			continue;
		if (S_ISDIR(sb.st_mode) && depth > 0)
			sum += dir_bytes(path, depth - 1, files);
		else if (S_ISREG(sb.st_mode))
			sum += sb.st_size, ++*files;
	}
	if (d)
		closedir(d);
	return sum;
}

/* The lower KV tiers the flags ask for (kv/tier.h), next to the plan:
 * host memory in blocks of 16 tokens, the disk store's limit and contents. */
static void print_tiers(const tier_opts *t, const llama_plan *plan)
{
	char a[32], b[32], c[32];
	int64_t block = plan->kv_token_bytes * 16;
	if (t->host > 0)
		printf("KV tier 1 (host memory, --kv-host): %s = %lld blocks of 16 tokens (%lld tokens), counted in the "
		       "memory below\n", cli_fmt_bytes(a, sizeof a, (double)t->host), (long long)(t->host / block),
		       (long long)(t->host / block * 16));
	if (t->store) {
		int64_t files = 0, bytes = dir_bytes(t->store, 1, &files);
		printf("KV tier 2 (disk, --kv-store %s): limit %s; %lld files, %s there now (every model); "
		       "a block file holds %s\n", t->store,
		       cli_fmt_bytes(a, sizeof a, (double)(t->store_max > 0 ? t->store_max : (int64_t)8 << 30)),
		       (long long)files, cli_fmt_bytes(b, sizeof b, (double)bytes),
		       cli_fmt_bytes(c, sizeof c, (double)block));
	}
}

/* Where the layers go on the device the flags choose or --device-mem
 * describes (models/place.h), for f16 KV of tokens tokens and batches of
 * 512; 1 when it does not fit. */
static int print_placement(cli_device *dev, const gguf_file *f, int64_t tokens)
{
	err e = {0};
	int64_t *lb = xmalloc((size_t)MAX(1, gguf_n_tensors(f)) * sizeof *lb);
	place_params p;
	place_plan pl;
	cli_plan_kv(dev, tokens, 0, NULL);
	int rc = cli_place_params(dev, f, 512, lb, &p, &e);
	if (!rc) {
		print_device(dev, &p);
		rc = place_choose(&p, &pl, &e);
		char line[512], ngl[16], a[32], b[32];
		snprintf(ngl, sizeof ngl, "%d", dev->opts.n_gpu_layers);
		cli_place_line(line, sizeof line, &pl, cli_on_device(dev) ? cli_kern(dev, &e)->name : "the device");
		printf("placement (-ngl %s): %s\n", dev->opts.n_gpu_layers == NGL_AUTO ? "auto" : ngl, line);
		printf("KV per token: %s on the device, %s on the host\n",
		       cli_fmt_bytes(a, sizeof a, (double)p.m.kv_layer_token_bytes * pl.n_dev_layers),
		       cli_fmt_bytes(b, sizeof b, (double)p.m.kv_layer_token_bytes * (pl.n_layers - pl.n_dev_layers)));
	}
	free(lb);
	if (rc)
		err_prefix(&e, "placement does NOT fit: %s", gguf_name(f));
	return rc ? cli_fail(&e) : 0;
}

int cmd_info(int argc, char **argv, cli_device *dev)
{
	const char *pos[1];
	int ctx = 0;
	bool verbose = false;
	tier_opts tier = {0};
	opt opts[] = {{"-c", "--ctx", OPT_INT, &ctx, P_CONTEXT}, {"-v", "--verbose", OPT_FLAG, &verbose, P_NONE},
		      TIER_OPTS(&tier)};
	int n_pos = cli_parse_opts("info", argc, argv, opts, ARRAY_LEN(opts), pos, 1);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (n_pos != 1) {
		fprintf(stderr, "pagechat: info: needs one MODEL file (see pagechat info --help)\n");
		return EXIT_USAGE;
	}
	err e = {0};
	gguf_file *f = gguf_open(pos[0], &e);
	if (!f)
		return cli_fail(&e);
	llama_hparams hp;
	int rc = 0;
	if (llama_read_hparams(f, &hp, &e)) {
		rc = cli_fail(&e);
		goto out;
	}
	int64_t n_params = 0;
	for (int64_t i = 0; i < gguf_n_tensors(f); i++)
		n_params += gguf_tensor_at(f, i)->n_elems;
	printf("file %s (GGUF v%u, %lld tensors, %lld metadata keys)\n", gguf_name(f),
	       gguf_version(f), (long long)gguf_n_tensors(f), (long long)gguf_n_kv(f));
	printf("architecture %s\n", hp.arch);
	printf("dims %d, layers %d, heads %d, KV heads %d, head dim %d, FFN %d, vocab %d\n",
	       hp.dim, hp.n_layers, hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.ffn_dim, hp.n_vocab);
	printf("rope dims %d, base %g, %s; RMSNorm eps %g\n", hp.n_rot, hp.rope_base,
	       hp.rope_neox ? "neox pairs" : "adjacent pairs", hp.eps);
	print_gemma(&hp);
	printf("parameters %lld (%.3g %s), ", (long long)n_params,
	       (double)n_params / (n_params >= 1000000000 ? 1e9 : 1e6), n_params >= 1000000000 ? "B" : "M");
	print_bytes("weights ", (double)gguf_data_bytes(f));
	putchar('\n');
	print_tensor_summary(f, verbose);
	printf("context length %d (training)\n", hp.n_ctx_train);
	print_kv_plan(&hp, ctx ? ctx : hp.n_ctx_train);
	print_window_kv(&hp, ctx ? ctx : hp.n_ctx_train);
	int64_t tokens = ctx ? ctx : hp.n_ctx_train;
	llama_plan plan;
	llama_plan_memory(&hp, (int64_t)gguf_data_bytes(f), tokens, KV_F16, KV_F16, 512, &plan);
	char line[256], a[32];
	cli_plan_line(line, sizeof line, &plan, tokens);
	printf("memory plan (f16 KV, the default; --kv-type changes it): %s\n", line);
	print_tiers(&tier, &plan);
	printf("memory available %s: %s\n", cli_fmt_bytes(a, sizeof a, (double)cli_mem_available()),
	       plan.total_bytes + MAX(tier.host, 0) <= cli_mem_available() ? "fits" : "does NOT fit");
	if (cli_on_device(dev) || dev->opts.device_mem > 0)
		rc = print_placement(dev, f, tokens);
	else if (cli_check_memory(dev, gguf_name(f), &hp, (int64_t)gguf_data_bytes(f), tokens, NULL, 512, &e))
		rc = cli_fail(&e);
out:
	gguf_close(f);
	return rc;
}
