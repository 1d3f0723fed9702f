/* app/opts.c: the option parser, the one number parser behind every flag,
 * and the checks of the shared option groups. */
#include "app/opts.h"

#include "kernels/kvq.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_number(enum opt_kind kind, const char *s, void *dst)
{
	char *end;
	errno = 0;
	if (kind == OPT_FLOAT) {
		double v = strtod(s, &end);
		if (!*s || *end || errno || !isfinite(v))
			return false;
		*(float *)dst = (float)v;
	} else if (kind == OPT_U64) {
		unsigned long long v = strtoull(s, &end, 10);
		if (!*s || *end || errno || *s == '-')
			return false;
		*(uint64_t *)dst = v;
	} else {
		long v = strtol(s, &end, 10);
		if (!*s || *end || errno || v < INT_MIN || v > INT_MAX)
			return false;
		*(int *)dst = (int)v;
	}
	return true;
}

int cli_parse_int_list(const char *s, int lo, int hi, int *out, int max, int *n)
{
	*n = 0;
	while (s && *s) {
		size_t len = strcspn(s, ",");
		char *item = xstrndup(s, len);
		int v;
		bool ok = cli_parse_number(OPT_INT, item, &v) && v >= lo && v <= hi && *n < max;
		free(item);
		if (!ok)
			return -1;
		out[(*n)++] = v;
		s += len + (s[len] == ',');
	}
	return 0;
}

static const opt *find_opt(const char *a, const opt *opts, int n_opts)
{
	for (int j = 0; j < n_opts; j++)
		if (!strcmp(a, opts[j].name) || (opts[j].alt && !strcmp(a, opts[j].alt)))
			return &opts[j];
	return NULL;
}

int cli_parse_opts(const char *cmd, int argc, char **argv, const opt *opts, int n_opts,
		   const char **pos, int max_pos)
{
	int n_pos = 0;
	bool only_pos = false;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (only_pos || a[0] != '-' || !a[1]) {
			if (n_pos == max_pos) {
				fprintf(stderr, "pagechat: %s: unexpected argument '%s' (see pagechat %s --help)\n",
					cmd, a, cmd);
				return -1;
			}
			pos[n_pos++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = true;
			continue;
		}
		const opt *o = find_opt(a, opts, n_opts);
		if (!o) {
			fprintf(stderr, "pagechat: %s: unknown flag '%s' (see pagechat %s --help)\n", cmd, a, cmd);
			return -1;
		}
		if (o->kind == OPT_FLAG) {
			*(bool *)o->dst = true;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "pagechat: %s: %s needs a value\n", cmd, a);
			return -1;
		}
		const char *v = argv[++i];
		if (o->kind == OPT_STR) {
			*(const char **)o->dst = v;
		} else if (!cli_parse_number(o->kind, v, o->dst)) {
			fprintf(stderr, "pagechat: %s: %s expects %s, got '%s'\n", cmd, o->name,
				o->kind == OPT_FLOAT ? "a number" : "an integer", v);
			return -1;
		}
	}
	return n_pos;
}

const char *cli_sampling_check(const samp_params *p)
{
	if (p->top_p <= 0 || p->min_p < 0 || p->min_p > 1 || p->repeat_penalty <= 0)
		return "--top-p must be > 0, --min-p in [0, 1], --repeat-penalty > 0";
	return NULL;
}

int cli_kv_types(kv_opts *o, err *e)
{
	const char *names[2] = {o->k ? o->k : o->both, o->v ? o->v : o->both};
	enum kv_type *types[2] = {&o->k_type, &o->v_type};
	for (int i = 0; i < 2; i++) {
		int t = names[i] ? kv_type_parse(names[i]) : KV_F16;
		if (t < 0) {
			err_set(e, "--kv-type%s '%s': must be f32, f16, q8 or fp8", o->k || o->v ? (i ? "-v" : "-k") : "",
				names[i]);
			return -1;
		}
		*types[i] = (enum kv_type)t;
	}
	return 0;
}

bool cli_parse_bytes(const char *s, int64_t *out)
{
	static const char *const units[] = {"K", "M", "G", "T"};
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !(v >= 0))
		return false;
	double scale = 1;
	if (*end) {
		size_t i;
		for (i = 0; i < ARRAY_LEN(units) && *end != units[i][0] && *end != units[i][0] + 32; i++)
			;
		if (i == ARRAY_LEN(units) || (strcmp(end + 1, "") && strcmp(end + 1, "iB") && strcmp(end + 1, "B")))
			return false;
		scale = (double)(INT64_C(1) << (10 * (i + 1)));
	}
	if (v * scale >= 0x1p62)
		return false;
	*out = (int64_t)(v * scale);
	return true;
}

/* One device flag's value into d; false when it is out of range. */
static bool set_device_flag(device_opts *d, const char *flag, const char *v)
{
	if (!strcmp(flag, "--gpu-mem-fraction"))
		return cli_parse_number(OPT_FLOAT, v, &d->mem_fraction) &&
		       d->mem_fraction > 0 && d->mem_fraction <= 1;
	if (!strcmp(flag, "--device-mem"))
		return cli_parse_bytes(v, &d->device_mem) && d->device_mem > 0;
	if (!strcmp(v, "auto")) {
		d->n_gpu_layers = NGL_AUTO;
		return true;
	}
	return cli_parse_number(OPT_INT, v, &d->n_gpu_layers) && d->n_gpu_layers >= -1;
}

static const char *device_flag_range(const char *flag)
{
	if (!strcmp(flag, "--gpu-mem-fraction"))
		return "must be a fraction in (0, 1]";
	if (!strcmp(flag, "--device-mem"))
		return "must be a size such as 24GiB, 512MiB or a byte count";
	return "must be a layer count (-1: all) or auto";
}

int cli_take_device_flags(int *argc, char **argv, device_opts *d)
{
	static const char *const flags[] = {"--device", "--gpu-mem-fraction", "-ngl", "--n-gpu-layers",
					    "--device-mem"};
	int out = 0;
	for (int i = 0; i < *argc; i++) {
		const char *a = argv[i];
		size_t f;
		for (f = 0; f < ARRAY_LEN(flags) && strcmp(a, flags[f]); f++)
			;
		if (f == ARRAY_LEN(flags)) {
			argv[out++] = argv[i];
			continue;
		}
		if (i + 1 >= *argc) {
			fprintf(stderr, "pagechat: %s needs a value\n", a);
			return -1;
		}
		const char *v = argv[++i];
		if (f == 0) {
			d->device = v;
		} else if (!set_device_flag(d, a, v)) {
			fprintf(stderr, "pagechat: %s '%s': %s\n", a, v, device_flag_range(a));
			return -1;
		}
	}
	argv[out] = NULL;
	*argc = out;
	return 0;
}
