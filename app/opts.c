/* app/opts.c: the option parser, the one number parser behind every flag,
 * and the checks of the shared option groups. */
#include "app/opts.h"

#include "app/app_common.h"
#include "engine/core.h"
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
	} else if (kind == OPT_SIZE) {
		double v = strtod(s, &end);
		const char *units = "KMGT";
		const char *u = *end ? strchr(units, end[0] & ~0x20) : NULL;
		double scale = u ? (double)(1ull << (10 * (u - units + 1))) : 1;
		if (u)
			end += !strcmp(end + 1, "iB") || !strcmp(end + 1, "B") ? strlen(end) : 1;
		if (!*s || *end || errno || !(v >= 0) || v * scale >= 0x1p62)
			return false;
		*(int64_t *)dst = (int64_t)(v * scale);
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

/* Reads v into o's destination, checked against o's range; false after
 * printing the problem. */
static bool take_value(const char *cmd, const char *flag, const opt *o, const char *v)
{
	if (o->kind == OPT_KV_TYPE && kv_type_parse(v) < 0) {
		fprintf(stderr, "pagechat: %s: %s '%s': must be f32, f16, q8 or fp8\n", cmd, flag, v);
		return false;
	}
	if (o->kind == OPT_STR || o->kind == OPT_PATH || o->kind == OPT_KV_TYPE) {
		if (o->kind == OPT_PATH && !*v) {
			fprintf(stderr, "pagechat: %s: %s needs a file name, got an empty one\n", cmd, flag);
			return false;
		}
		*(const char **)o->dst = v;
		return true;
	}
	double got;
	union { int i; float f; uint64_t u; int64_t z; } tmp;
	if (!cli_parse_number(o->kind, v, &tmp)) {
		fprintf(stderr, "pagechat: %s: %s expects %s, got '%s'\n", cmd, flag,
			o->kind == OPT_FLOAT ? "a number" : o->kind == OPT_U64 ? "a non-negative integer"
			: o->kind == OPT_SIZE ? "a size (e.g. 512MiB, 4G)" : "an integer", v);
		return false;
	}
	got = o->kind == OPT_FLOAT ? tmp.f : o->kind == OPT_U64 ? (double)tmp.u
	      : o->kind == OPT_SIZE ? (double)tmp.z : tmp.i;
	if (!param_ok(o->range, got)) {
		char msg[300];
		fprintf(stderr, "pagechat: %s: %s\n", cmd, param_problem(o->range, flag, got, msg, sizeof msg));
		return false;
	}
	if (o->kind == OPT_FLOAT)
		*(float *)o->dst = tmp.f;
	else if (o->kind == OPT_U64)
		*(uint64_t *)o->dst = tmp.u;
	else if (o->kind == OPT_SIZE)
		*(int64_t *)o->dst = tmp.z;
	else
		*(int *)o->dst = tmp.i;
	return true;
}

/* Where cli_parse_opts puts the device flags it meets (cli_take_device_flags
 * sets it), or NULL. */
static device_opts *device_sink;
static int device_flag(const char *a);
static int take_device_flag(device_opts *d, const char *a, const char *v);

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
		if (!o && device_sink && device_flag(a) >= 0) { /* every command's (cli_take_device_flags) */
			if (i + 1 >= argc) {
				fprintf(stderr, "pagechat: %s: %s needs a value\n", cmd, a);
				return -1;
			}
			if (take_device_flag(device_sink, a, argv[++i]))
				return -1;
			continue;
		}
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
		if (!take_value(cmd, a, o, argv[++i]))
			return -1;
	}
	return n_pos;
}

const char *cli_draft_check(draft_opts *d)
{
	bool ngram = d->kind && !strcmp(d->kind, "ngram"), model = d->kind && !strcmp(d->kind, "model");
	if (d->kind && !ngram && !model) { /* --draft FILE */
		if (!*d->kind)
			return "--draft needs ngram, model or a draft model's file";
		if (d->model)
			return "--draft FILE and -md FILE both name a draft model: give one";
		d->model = d->kind;
		d->kind = NULL;
	}
	if (ngram && d->model)
		return "--draft ngram and -md FILE exclude each other";
	if (model && !d->model)
		return "--draft model needs -md DRAFT.gguf";
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

static const char *const device_flags[] = {"--device", "--gpu-mem-fraction", "-ngl", "--n-gpu-layers",
					   "--device-mem"};

/* Which device flag a is (index into device_flags), or -1. */
static int device_flag(const char *a)
{
	for (int f = 0; f < (int)ARRAY_LEN(device_flags); f++)
		if (!strcmp(a, device_flags[f]))
			return f;
	return -1;
}

static const char *device_flag_range(const char *flag);

/* Device flag a with value v into d; -1 after printing the problem. */
static int take_device_flag(device_opts *d, const char *a, const char *v)
{
	if (device_flag(a) == 0) {
		d->device = v;
		return 0;
	}
	if (set_device_flag(d, a, v))
		return 0;
	fprintf(stderr, "pagechat: %s '%s': %s\n", a, v, device_flag_range(a));
	return -1;
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
	device_sink = d;
	int i = 1;
	while (i < *argc && device_flag(argv[i]) >= 0) {
		if (i + 1 >= *argc) {
			fprintf(stderr, "pagechat: %s needs a value\n", argv[i]);
			return -1;
		}
		if (take_device_flag(d, argv[i], argv[i + 1]))
			return -1;
		i += 2;
	}
	int taken = i - 1;
	for (int k = i; k <= *argc; k++) /* argv[*argc] is NULL */
		argv[k - taken] = argv[k];
	*argc -= taken;
	return 0;
}

int cli_tier_setup(const tier_opts *o, int64_t block_bytes, core_params *cp, err *e)
{
	static const char *const modes[] = {"auto", "recompute", "swap"};
	cp->preempt = PREEMPT_AUTO;
	for (int i = 0; o->preempt && i <= (int)ARRAY_LEN(modes); i++) {
		if (i == (int)ARRAY_LEN(modes)) {
			err_set(e, "--preempt '%s': must be auto, recompute or swap", o->preempt);
			return -1;
		}
		if (!strcmp(o->preempt, modes[i])) {
			cp->preempt = (enum core_preempt)i;
			break;
		}
	}
	if (o->store && !*o->store) {
		err_set(e, "--kv-store: empty directory name");
		return -1;
	}
	cp->kv_store = o->store;
	cp->kv_store_max = o->store_max > 0 ? o->store_max : (int64_t)8 << 30;
	cp->host_blocks = block_bytes > 0 ? o->host / block_bytes : 0;
	if (o->host > 0 && o->host > cli_mem_available()) {
		err_set(e, "--kv-host %lld MiB is more than the %lld MiB of memory available: lower it",
			(long long)(o->host >> 20), (long long)(cli_mem_available() >> 20));
		return -1;
	}
	if (o->host > 0 && cp->host_blocks == 0) {
		err_set(e, "--kv-host %lld bytes holds no KV block (%lld bytes each): raise it",
			(long long)o->host, (long long)block_bytes);
		return -1;
	}
	if (cp->preempt == PREEMPT_SWAP && cp->host_blocks == 0) {
		err_set(e, "--preempt swap needs host memory for the blocks: add --kv-host SIZE");
		return -1;
	}
	return 0;
}
