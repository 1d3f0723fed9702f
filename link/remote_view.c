/* link/remote_view.c: what the remote engine reads from a server and
 * writes to it, as pure functions: the figures a panel shows from /metrics
 * (Prometheus text), pagechat's block map from /pagechat/v1/pool, the line
 * an error response comes down to, and a request's JSON body.
 *
 * Servers name the same figure differently; each figure has a list of the
 * sources known for it (vLLM's names, which pagechat serve shares, SGLang's,
 * llama.cpp's), tried in order, and keeps the name of the one it came from.
 * A metric with labels (model_name, finished_reason) is summed over them. */
#include "link/remote_int.h"

#include "kernels/kvq.h"
#include "models/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- /metrics ---- */

typedef struct prom_val {
	char name[96];
	double sum;              /* over every label set */
} prom_val;

typedef struct prom {
	prom_val *v;
	int n, cap;
} prom;

static prom_val *prom_find(const prom *p, const char *name)
{
	for (int i = 0; i < p->n; i++)
		if (!strcmp(p->v[i].name, name))
			return &p->v[i];
	return NULL;
}

/* One sample line "name{labels} value [timestamp]"; comments and lines
 * that do not parse are skipped. */
static void prom_line(prom *p, const char *s, size_t len)
{
	size_t i = 0;
	while (i < len && s[i] != '{' && s[i] != ' ' && s[i] != '\t')
		i++;
	if (i == 0 || i >= 96 || s[0] == '#')
		return;
	size_t name_len = i;
	if (i < len && s[i] == '{') { /* label values are quoted and may hold braces */
		bool quoted = false;
		for (; i < len && (quoted || s[i] != '}'); i++)
			if (s[i] == '"' && s[i - 1] != '\\')
				quoted = !quoted;
		i++;
	}
	char num[64];
	while (i < len && (s[i] == ' ' || s[i] == '\t'))
		i++;
	size_t k = 0;
	while (i < len && s[i] != ' ' && k + 1 < sizeof num)
		num[k++] = s[i++];
	num[k] = '\0';
	char *end;
	double v = strtod(num, &end);
	if (k == 0 || *end)
		return;
	char name[96];
	memcpy(name, s, name_len);
	name[name_len] = '\0';
	prom_val *x = prom_find(p, name);
	if (!x) {
		xgrow(&p->v, &p->cap, (int64_t)p->n + 1, sizeof *p->v);
		x = &p->v[p->n++];
		snprintf(x->name, sizeof x->name, "%s", name);
		x->sum = 0;
	}
	x->sum += v;
}

enum fig_how { F_GAUGE, F_RATIO, F_HIST_MEAN, F_RATE, F_INVERSE };

typedef struct fig_src {
	enum link_fig fig;
	enum fig_how how;
	const char *a, *b;       /* the metric (ratio: hits; histogram: the base name) and
	                            the ratio's denominator */
	double scale;
} fig_src;

/* In order of preference for each figure. */
static const fig_src sources[] = {
	{LF_KV_USAGE, F_GAUGE, "vllm:kv_cache_usage_perc", NULL, 1},
	{LF_KV_USAGE, F_GAUGE, "vllm:gpu_cache_usage_perc", NULL, 1},
	{LF_KV_USAGE, F_GAUGE, "sglang:token_usage", NULL, 1},
	{LF_KV_USAGE, F_GAUGE, "llamacpp:kv_cache_usage_ratio", NULL, 1},
	{LF_PREFIX_HIT, F_RATIO, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", 1},
	{LF_PREFIX_HIT, F_RATIO, "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total", 1},
	{LF_PREFIX_HIT, F_GAUGE, "vllm:gpu_prefix_cache_hit_rate", NULL, 1},
	{LF_PREFIX_HIT, F_GAUGE, "sglang:cache_hit_rate", NULL, 1},
	{LF_RUNNING, F_GAUGE, "vllm:num_requests_running", NULL, 1},
	{LF_RUNNING, F_GAUGE, "sglang:num_running_reqs", NULL, 1},
	{LF_RUNNING, F_GAUGE, "llamacpp:requests_processing", NULL, 1},
	{LF_WAITING, F_GAUGE, "vllm:num_requests_waiting", NULL, 1},
	{LF_WAITING, F_GAUGE, "sglang:num_queue_reqs", NULL, 1},
	{LF_WAITING, F_GAUGE, "llamacpp:requests_deferred", NULL, 1},
	{LF_TTFT_MS, F_HIST_MEAN, "vllm:time_to_first_token_seconds", NULL, 1000},
	{LF_TTFT_MS, F_HIST_MEAN, "sglang:time_to_first_token_seconds", NULL, 1000},
	{LF_ITL_MS, F_HIST_MEAN, "vllm:inter_token_latency_seconds", NULL, 1000},
	{LF_ITL_MS, F_HIST_MEAN, "vllm:time_per_output_token_seconds", NULL, 1000},
	{LF_ITL_MS, F_HIST_MEAN, "sglang:inter_token_latency_seconds", NULL, 1000},
	{LF_ITL_MS, F_HIST_MEAN, "sglang:time_per_output_token_seconds", NULL, 1000},
	{LF_ITL_MS, F_INVERSE, "llamacpp:predicted_tokens_seconds", NULL, 1000},
	{LF_GEN_TPS, F_RATE, "vllm:generation_tokens_total", NULL, 1},
	{LF_GEN_TPS, F_RATE, "sglang:generation_tokens_total", NULL, 1},
	{LF_GEN_TPS, F_RATE, "llamacpp:tokens_predicted_total", NULL, 1},
	{LF_KV_TOKENS, F_GAUGE, "llamacpp:kv_cache_tokens", NULL, 1},
	{LF_KV_TOKENS, F_GAUGE, "sglang:num_used_tokens", NULL, 1},
};

/* One source's value into *out; false when the text lacks it. */
static bool fig_value(const prom *p, const fig_src *s, rem_counters *ctr, double *out)
{
	char buf[128];
	const prom_val *a = NULL, *b = NULL;
	switch (s->how) {
	case F_GAUGE:
	case F_INVERSE:
		if (!(a = prom_find(p, s->a)))
			return false;
		*out = s->how == F_GAUGE ? a->sum * s->scale : a->sum > 0 ? s->scale / a->sum : 0;
		return s->how == F_GAUGE || a->sum > 0;
	case F_RATIO:
		if (!(a = prom_find(p, s->a)) || !(b = prom_find(p, s->b)))
			return false;
		*out = b->sum > 0 ? a->sum / b->sum : 0;
		return true;
	case F_HIST_MEAN:
		snprintf(buf, sizeof buf, "%s_sum", s->a);
		a = prom_find(p, buf);
		snprintf(buf, sizeof buf, "%s_count", s->a);
		if (!a || !(b = prom_find(p, buf)))
			return false;
		*out = b->sum > 0 ? s->scale * a->sum / b->sum : 0;
		return true;
	case F_RATE:
		if (!(a = prom_find(p, s->a)))
			return false;
		double now = now_s();
		*out = ctr->gen_tokens >= 0 && now > ctr->t && a->sum >= ctr->gen_tokens ?
			       (a->sum - ctr->gen_tokens) / (now - ctr->t) : 0;
		ctr->gen_tokens = a->sum;
		ctr->t = now;
		return true;
	}
	return false;
}

/* Whose names the text uses: pagechat's own names win (it also has vLLM's). */
static void metrics_kind(const prom *p, char *kind, size_t cap)
{
	static const char *const prefix[][2] = {
		{"pagechat:", "pagechat"}, {"vllm:", "vLLM"}, {"sglang:", "SGLang"}, {"llamacpp:", "llama.cpp"},
	};
	kind[0] = '\0';
	for (size_t k = 0; k < ARRAY_LEN(prefix); k++)
		for (int i = 0; i < p->n; i++)
			if (!strncmp(p->v[i].name, prefix[k][0], strlen(prefix[k][0]))) {
				snprintf(kind, cap, "%s", prefix[k][1]);
				return;
			}
}

void rem_parse_metrics(const char *text, size_t len, link_figure *fig, char *kind, size_t kind_cap,
		       rem_counters *ctr)
{
	prom p = {0};
	for (size_t i = 0; i < len;) {
		size_t n = 0;
		while (i + n < len && text[i + n] != '\n')
			n++;
		prom_line(&p, text + i, n - (n > 0 && text[i + n - 1] == '\r'));
		i += n + 1;
	}
	for (int f = 0; f < LF_N; f++)
		fig[f] = (link_figure){0};
	for (size_t i = 0; i < ARRAY_LEN(sources); i++) {
		const fig_src *s = &sources[i];
		double v;
		if (fig[s->fig].have || !fig_value(&p, s, ctr, &v))
			continue;
		fig[s->fig].have = true;
		fig[s->fig].value = v;
		snprintf(fig[s->fig].source, sizeof fig[s->fig].source, "%s", s->a);
	}
	metrics_kind(&p, kind, kind_cap);
	free(p.v);
}

/* ---- /pagechat/v1/pool ---- */

/* A number, or dflt (also for one that is not finite). */
static double num_or(const json *o, const char *key, double dflt)
{
	const json *v = json_get(o, key);
	return v && v->type == JSON_NUM && v->num - v->num == 0 ? v->num : dflt;
}

/* A count, clamped to what a double holds exactly, or 0. */
static int64_t count_or(const json *o, const char *key)
{
	double v = num_or(o, key, 0), lim = 9007199254740992.0;
	return (int64_t)(v < -lim ? -lim : v > lim ? lim : v);
}

/* The block array into s->map; -1 when an entry is not [state, refcount, conv]. */
static int pool_blocks(const json *blocks, link_snapshot *s)
{
	if ((int64_t)blocks->n > s->map_cap) {
		free(s->map);
		s->map = xmalloc(MAX(1, blocks->n) * sizeof *s->map);
		s->map_cap = (int64_t)blocks->n;
	}
	for (size_t i = 0; i < blocks->n; i++) {
		const json *b = &blocks->items[i];
		if (b->type != JSON_ARR || b->n != 3 || b->items[0].type != JSON_NUM || b->items[0].num < 0 ||
		    b->items[0].num > BLK_PINNED || b->items[1].type != JSON_NUM || b->items[2].type != JSON_NUM)
			return -1;
		s->map[i] = (core_block_info){.state = (uint8_t)b->items[0].num, .refcount = rem_int(b->items[1].num),
					      .conv = rem_int(b->items[2].num)};
	}
	s->n_blocks = (int64_t)blocks->n;
	return 0;
}

/* A K/V row type by its name (kv_type_name); f16, the default, when absent or unknown. */
static enum kv_type kv_type_of(const json *v)
{
	char name[16] = "";
	if (v && v->type == JSON_STR && v->len < sizeof name)
		memcpy(name, v->str, v->len);
	int t = kv_type_parse(name);
	return t < 0 ? KV_F16 : (enum kv_type)t;
}

int rem_parse_pool(const char *text, size_t len, link_snapshot *s, err *e)
{
	json_doc *d = json_parse(text, len, e);
	if (!d)
		return -1;
	const json *o = json_root(d), *obj = json_get(o, "object"), *blocks = json_get(o, "blocks");
	const json *counts = json_get(o, "counts");
	int rc = -1;
	if (!obj || obj->type != JSON_STR || strcmp(obj->str, "pagechat.pool") || !blocks || blocks->type != JSON_ARR)
		err_set(e, "not a pagechat block map");
	else if (pool_blocks(blocks, s))
		err_set(e, "a block of the map is not [state, refcount, conv]");
	else
		rc = 0;
	if (rc == 0) {
		core_stats *st = &s->st;
		s->seq = (uint64_t)count_or(o, "seq");
		s->block_tokens = rem_int(num_or(o, "block_tokens", 0));
		s->n_ctx = rem_int(num_or(o, "n_ctx", 0));
		st->blocks_total = s->n_blocks;
		st->blocks_free = count_or(counts, "free") + count_or(counts, "cached");
		st->blocks_cached = count_or(counts, "cached");
		st->blocks_used = s->n_blocks - st->blocks_free;
		st->blocks_shared = count_or(counts, "shared");
		st->blocks_pinned = count_or(counts, "pinned");
		st->n_running = rem_int(num_or(o, "running", 0));
		st->n_waiting = rem_int(num_or(o, "waiting", 0));
		st->waste = num_or(o, "waste_paged", 0);
		st->waste_contig = num_or(o, "waste_contiguous", 0);
		st->prompt_tokens = count_or(o, "prefix_queries");
		st->cached_tokens = count_or(o, "prefix_hits");
		st->slots_filled = count_or(o, "held_tokens");
		st->slots_alloc = count_or(o, "slots");
		st->cow_copies = count_or(o, "copies");
		st->preemptions = count_or(o, "preemptions");
		st->finished = count_or(o, "finished");
		st->kv_type_k = kv_type_of(json_get(o, "kv_type_k"));
		st->kv_type_v = kv_type_of(json_get(o, "kv_type_v"));
		st->kv_vs_f16 = num_or(o, "kv_vs_f16", 1);
		s->prefill_tps = num_or(o, "prefill_tps", 0);
		s->decode_tps = num_or(o, "decode_tps", 0);
		st->n_layers = rem_int(num_or(o, "n_layers", 0));
		st->window = rem_int(num_or(o, "window", 0));
		st->win_layers = rem_int(num_or(o, "window_layers", 0));
		st->blocks_win_freed = count_or(o, "window_freed");
		st->blocks_win_held = count_or(o, "window_held");
	}
	json_free(d);
	return rc;
}

/* ---- errors ---- */

/* Copies s[n] into out as one line (control characters as spaces). */
static void one_line(char *out, size_t cap, const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++)
		out[k++] = (unsigned char)s[i] < ' ' ? ' ' : s[i];
	while (k > 0 && out[k - 1] == ' ')
		k--;
	out[k] = '\0';
}

void rem_error_text(const char *body, size_t len, char *out, size_t cap)
{
	out[0] = '\0';
	err e = {0};
	json_doc *d = len ? json_parse(body, len, &e) : NULL;
	if (d) {
		const json *o = json_root(d), *er = json_get(o, "error");
		const json *m = er && er->type == JSON_OBJ ? json_get(er, "message") : er ? er : json_get(o, "message");
		if (m && m->type == JSON_STR)
			one_line(out, cap, m->str, m->len);
		json_free(d);
		if (out[0])
			return;
	}
	size_t n = 0;
	while (n < len && body[n] != '\n')
		n++;
	one_line(out, cap, body, MIN(n, (size_t)200));
}

/* ---- requests ---- */

char *rem_request_body(const link_request *q, size_t *len)
{
	sbuf b = {0};
	if (q->msgs) {
		sb_printf(&b, "\"messages\":[");
		for (int i = 0; i < q->n_msgs; i++) {
			sb_printf(&b, "%s{\"role\":\"%s\",\"content\":", i ? "," : "", q->msgs[i].role);
			json_put_str(&b.p, &b.n, &b.cap, q->msgs[i].text, q->msgs[i].len);
			sb_printf(&b, "}");
		}
		sb_printf(&b, "]");
	} else {
		sb_printf(&b, "\"prompt\":");
		json_put_str(&b.p, &b.n, &b.cap, q->text ? q->text : "", q->text_len);
	}
	const samp_params *sp = &q->r.samp;
	sb_printf(&b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true,"
		  "\"continuous_usage_stats\":true},\"temperature\":%.6g",
	    sp->temp > 0 ? sp->temp : 0.0);
	if (sp->top_p < 1)
		sb_printf(&b, ",\"top_p\":%.6g", sp->top_p);
	if (sp->top_k > 0)
		sb_printf(&b, ",\"top_k\":%d", sp->top_k);
	if (sp->min_p > 0)
		sb_printf(&b, ",\"min_p\":%.6g", sp->min_p);
	if (sp->repeat_penalty != 1)
		sb_printf(&b, ",\"repetition_penalty\":%.6g", sp->repeat_penalty);
	sb_printf(&b, ",\"seed\":%llu", (unsigned long long)(sp->seed & 0x7fffffff));
	if (q->r.max_tokens > 0)
		sb_printf(&b, ",\"max_tokens\":%d", q->r.max_tokens);
	sb_printf(&b, "}");
	*len = b.n;
	return b.p;
}
