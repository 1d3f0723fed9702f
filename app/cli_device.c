/* app/cli_device.c: the device flags every command takes (--device,
 * --gpu-mem-fraction, -ngl), the backend they choose, and opening a model on
 * it. cli_main takes the flags out of argv before a command parses the rest. */
#include "app/cmds.h"

#include "models/llama.h"

#include <stdlib.h>
#include <string.h>

device_opts cli_dev = {.mem_fraction = 0.9f, .n_gpu_layers = -1};

/* Parses a float or int flag value; false when s is not a whole number. */
static bool parse_num(const char *s, bool is_float, float *f, int *i)
{
	char *end;
	if (is_float)
		*f = strtof(s, &end);
	else
		*i = (int)strtol(s, &end, 10);
	return *s && !*end;
}

int cli_take_device_flags(int *argc, char **argv)
{
	int out = 0;
	for (int i = 0; i < *argc; i++) {
		const char *a = argv[i];
		bool dev = !strcmp(a, "--device"), frac = !strcmp(a, "--gpu-mem-fraction");
		bool ngl = !strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers");
		if (!dev && !frac && !ngl) {
			argv[out++] = argv[i];
			continue;
		}
		if (i + 1 >= *argc) {
			fprintf(stderr, "pagechat: %s needs a value\n", a);
			return -1;
		}
		const char *v = argv[++i];
		if (dev) {
			cli_dev.device = v;
		} else if (!parse_num(v, frac, &cli_dev.mem_fraction, &cli_dev.n_gpu_layers) ||
			   (frac && !(cli_dev.mem_fraction > 0 && cli_dev.mem_fraction <= 1)) ||
			   (ngl && cli_dev.n_gpu_layers < -1)) {
			fprintf(stderr, "pagechat: %s '%s': %s\n", a, v,
				frac ? "must be a fraction in (0, 1]" : "must be a layer count (-1: all)");
			return -1;
		}
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}

const kern_ops *cli_kern(err *e)
{
	static const kern_ops *chosen;
	if (chosen)
		return chosen;
	const char *dev = cli_dev.device ? cli_dev.device : getenv("PAGECHAT_DEVICE");
	if (cli_dev.n_gpu_layers == 0) /* no layer on the GPU: the CPU, whatever --device says */
		dev = "cpu";
	const char *note = NULL;
	chosen = kern_pick(dev, &note, e);
	if (note)
		fprintf(stderr, "pagechat: %s\n", note);
	for (int i = 0; chosen == kern_cpu() && (note = kern_cpu_notice(i)); i++)
		fprintf(stderr, "pagechat: %s\n", note);
	return chosen;
}

bool cli_on_device(void)
{
	err e = {0};
	const kern_ops *k = cli_kern(&e);
	return k && k->buf_alloc;
}

llama_model *cli_open_model(const char *path, int max_tokens, int n_threads, err *e)
{
	const kern_ops *k = cli_kern(e);
	if (!k)
		return NULL;
	llama_model *m = llama_open(path, &(llama_params){.max_tokens = max_tokens, .n_threads = n_threads,
							   .kern = k}, e);
	int n_layers = m ? llama_hp(m)->n_layers : 0, ngl = cli_dev.n_gpu_layers;
	if (m && k->buf_alloc && ngl > 0 && ngl < n_layers) {
		err_set(e, "-ngl %d: partial offload (some of the %d layers on the GPU) is not implemented yet; "
			"use -ngl -1 (all) or --device cpu", ngl, n_layers);
		llama_free(m);
		return NULL;
	}
	return m;
}

int64_t cli_device_budget(void)
{
	err e = {0};
	const kern_ops *k = cli_kern(&e);
	if (!k || !k->buf_alloc)
		return -1;
	int64_t fr = 0, tot = 0;
	k->mem_info(&fr, &tot);
	/* what the fraction of the whole device leaves, within what is free now */
	int64_t used = tot - fr, allowed = (int64_t)((double)tot * cli_dev.mem_fraction) - used;
	return MAX(0, MIN(allowed, fr));
}
