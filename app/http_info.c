/* app/http_info.c: the endpoints that only read: GET /health, /v1/models,
 * /metrics (Prometheus text format 0.0.4) and /pagechat/v1/pool (the block
 * map). They draw the engine's latest snapshot, copied by value; none of
 * them waits for the engine.
 *
 * Metric names: where a figure means what vLLM's does, it has vLLM's name
 * (vllm:num_requests_running, vllm:kv_cache_usage_perc, ...; labelled with
 * model_name as vLLM's are), so dashboards made for vLLM read it; figures
 * of pagechat's own are pagechat:*. */
#include "app/http.h"

#include "kernels/kvq.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const state_names[] = {"free", "cached", "used", "partial", "shared", "pinned"};

enum MHD_Result http_health(call *c)
{
	sbuf b = {0};
	sb_printf(&b, "{\"status\":\"ok\"}\n");
	return http_reply(c, 200, "application/json", &b);
}

static void model_json(const serve *s, sbuf *b)
{
	sb_put(b, "{\"id\":", 6);
	sb_json(b, s->model_name, strlen(s->model_name));
	sb_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"pagechat\",\"max_model_len\":%d}",
		  (long long)time(NULL), s->n_ctx);
}

enum MHD_Result http_models(call *c)
{
	serve *s = c->s;
	sbuf b = {0};
	const char *id = c->path + strlen("/v1/models");
	if (*id == '/') {
		if (strcmp(id + 1, s->model_name))
			return http_error(c, 404, "invalid_request_error", "model", "model_not_found",
					  "The model '%s' does not exist; this server serves '%s'", id + 1, s->model_name);
		model_json(s, &b);
	} else {
		sb_put(&b, "{\"object\":\"list\",\"data\":[", 25);
		model_json(s, &b);
		sb_put(&b, "]}", 2);
	}
	sb_put(&b, "\n", 1);
	return http_reply(c, 200, "application/json", &b);
}

/* ---- /metrics ---- */

typedef struct prom {
	sbuf b;
	char model[256];         /* the model_name label, escaped */
} prom;

static void head(prom *p, const char *name, const char *type, const char *help)
{
	sb_printf(&p->b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample; vllm: names carry the model_name label. */
static void sample(prom *p, const char *name, const char *labels, double v)
{
	bool vllm = !strncmp(name, "vllm:", 5);
	bool any = vllm || (labels && *labels);
	sb_printf(&p->b, "%s%s", name, any ? "{" : "");
	if (vllm)
		sb_printf(&p->b, "model_name=\"%s\"%s", p->model, labels && *labels ? "," : "");
	sb_printf(&p->b, "%s%s %.17g\n", labels ? labels : "", any ? "}" : "", v);
}

static void metric(prom *p, const char *name, const char *type, const char *help, double v)
{
	head(p, name, type, help);
	sample(p, name, NULL, v);
}

static void histogram(prom *p, const char *name, const char *help, const core_hist *h)
{
	head(p, name, "histogram", help);
	char n[128], lab[48];
	snprintf(n, sizeof n, "%s_bucket", name);
	int64_t cum = 0;
	for (int i = 0; i <= CORE_HIST_N; i++) {
		cum += h->count[i];
		if (i < CORE_HIST_N)
			snprintf(lab, sizeof lab, "le=\"%g\"", core_hist_le[i]);
		else
			snprintf(lab, sizeof lab, "le=\"+Inf\"");
		sample(p, n, lab, (double)cum);
	}
	snprintf(n, sizeof n, "%s_sum", name);
	sample(p, n, NULL, h->sum_s);
	snprintf(n, sizeof n, "%s_count", name);
	sample(p, n, NULL, (double)cum);
}

static void vllm_metrics(prom *p, const link_snapshot *sn)
{
	const core_stats *st = &sn->st;
	metric(p, "vllm:num_requests_running", "gauge", "Sequences in the engine's running batch.", st->n_running);
	metric(p, "vllm:num_requests_waiting", "gauge", "Sequences waiting to be admitted.", st->n_waiting);
	metric(p, "vllm:kv_cache_usage_perc", "gauge", "Fraction of KV blocks in use (0-1; cached free blocks "
	       "count as free).", st->blocks_total ? (double)st->blocks_used / (double)st->blocks_total : 0);
	metric(p, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
	       (double)st->prompt_tokens);
	metric(p, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
	       (double)st->cached_tokens);
	metric(p, "vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
	       (double)st->prompt_tokens);
	metric(p, "vllm:generation_tokens_total", "counter", "Tokens generated.", (double)st->generated_tokens);
	metric(p, "vllm:num_preemptions_total", "counter", "Sequences preempted (blocks freed, recomputed "
	       "later).", (double)st->preemptions);
	head(p, "vllm:request_success_total", "counter", "Completions finished, by reason.");
	sample(p, "vllm:request_success_total", "finished_reason=\"stop\"", (double)st->finished_by[FIN_STOP]);
	sample(p, "vllm:request_success_total", "finished_reason=\"length\"",
	       (double)(st->finished_by[FIN_LENGTH] + st->finished_by[FIN_CONTEXT]));
	sample(p, "vllm:request_success_total", "finished_reason=\"abort\"",
	       (double)st->finished_by[FIN_CANCELLED]);
	histogram(p, "vllm:time_to_first_token_seconds", "Submit to first token, per request.", &st->ttft);
	histogram(p, "vllm:inter_token_latency_seconds", "Time between a completion's tokens.", &st->itl);
	histogram(p, "vllm:e2e_request_latency_seconds", "Submit to finish, per completion.", &st->e2e);
	histogram(p, "vllm:request_queue_time_seconds", "Submit to first scheduled, per request.", &st->queue);
	metric(p, "vllm:spec_decode_num_drafts_total", "counter", "Draft verifications (one per sequence and "
	       "step).", (double)st->spec_steps);
	metric(p, "vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.",
	       (double)st->spec_proposed);
	metric(p, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
	       (double)st->spec_accepted);
	head(p, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
	     "Draft tokens accepted, by position in the draft.");
	for (int j = 0; j < SPEC_MAX_K; j++) {
		char lab[32];
		snprintf(lab, sizeof lab, "position=\"%d\"", j);
		sample(p, "vllm:spec_decode_num_accepted_tokens_per_pos_total", lab, (double)st->spec_pos_accepted[j]);
	}
}

static void pool_metrics(prom *p, const link_snapshot *sn)
{
	const core_stats *st = &sn->st;
	int64_t by_state[ARRAY_LEN(state_names)] = {0};
	for (int64_t b = 0; b < sn->n_blocks; b++)
		if (sn->map[b].state < ARRAY_LEN(state_names))
			by_state[sn->map[b].state]++;
	head(p, "pagechat:kv_blocks", "gauge", "KV blocks by state (free, cached: free but findable by the "
	     "prefix cache, used, partial: still filling, shared: refcount > 1, pinned: a system prompt's).");
	for (size_t i = 0; i < ARRAY_LEN(state_names); i++) {
		char lab[32];
		snprintf(lab, sizeof lab, "state=\"%s\"", state_names[i]);
		sample(p, "pagechat:kv_blocks", lab, (double)by_state[i]);
	}
	metric(p, "pagechat:kv_blocks_total", "gauge", "KV blocks in the pool.", (double)sn->n_blocks);
	metric(p, "pagechat:kv_block_size_tokens", "gauge", "Tokens per KV block.", sn->block_tokens);
	head(p, "pagechat:kv_waste_ratio", "gauge", "Unfilled share of the slots live sequences hold: paged "
	     "(blocks) vs contiguous (a whole context reserved per sequence).");
	sample(p, "pagechat:kv_waste_ratio", "layout=\"paged\"", st->waste);
	sample(p, "pagechat:kv_waste_ratio", "layout=\"contiguous\"", st->waste_contig);
	head(p, "pagechat:spec_decode_draft_tokens_per_pos_total", "counter",
	     "Draft tokens proposed, by position in the draft.");
	for (int j = 0; j < SPEC_MAX_K; j++) {
		char lab[32];
		snprintf(lab, sizeof lab, "position=\"%d\"", j);
		sample(p, "pagechat:spec_decode_draft_tokens_per_pos_total", lab, (double)st->spec_pos_proposed[j]);
	}
}

/* With a draft, its decode-only steps by kind: the draft's speed-up against
 * none is the tokens per second of the one kind over the other's. */
static void spec_step_metrics(prom *p, const link_snapshot *sn)
{
	const core_stats *st = &sn->st;
	const struct {
		const char *name, *help;
		double v[2]; /* draft, plain */
	} m[] = {
		{"pagechat:spec_decode_steps_total", "With a draft: decode-only steps, by kind (draft: drafts "
		 "verified; plain: none, for want of a draft).", {(double)st->spec_dec_steps, (double)st->plain_dec_steps}},
		{"pagechat:spec_decode_step_seconds_total", "With a draft: time in decode-only steps (drafting, "
		 "verifying and sampling included), by kind.", {st->spec_dec_us / 1e6, st->plain_dec_us / 1e6}},
		{"pagechat:spec_decode_step_tokens_total", "With a draft: tokens generated by decode-only steps, by "
		 "kind.", {(double)st->spec_dec_tokens, (double)st->plain_dec_tokens}},
	};
	for (size_t i = 0; i < ARRAY_LEN(m); i++) {
		head(p, m[i].name, "counter", m[i].help);
		sample(p, m[i].name, "kind=\"draft\"", m[i].v[0]);
		sample(p, m[i].name, "kind=\"plain\"", m[i].v[1]);
	}
}

static void engine_metrics(prom *p, const link_snapshot *sn, serve *s)
{
	const core_stats *st = &sn->st;
	metric(p, "pagechat:prefill_tokens_total", "counter", "Prompt tokens computed.", (double)st->prefill_tokens);
	metric(p, "pagechat:decode_tokens_total", "counter", "Decode rows computed (drafts verified included).",
	       (double)st->decode_tokens);
	metric(p, "pagechat:engine_steps_total", "counter", "Engine steps run.", (double)st->steps);
	metric(p, "pagechat:engine_busy_seconds_total", "counter", "Time spent stepping.", st->busy_s);
	metric(p, "pagechat:request_errors_total", "counter", "Completions that ended with an error.",
	       (double)st->finished_by[FIN_ERROR]);
	metric(p, "pagechat:http_requests_in_flight", "gauge", "Generation requests this server is answering.",
	       atomic_load(&s->in_flight));
	head(p, "pagechat:http_responses_total", "counter", "HTTP responses, by status.");
	static const unsigned codes[] = {
#define X(c) c,
		HTTP_STATUSES(X)
#undef X
	};
	for (int i = 0; i < HTTP_N_STATUSES; i++) {
		char lab[32];
		snprintf(lab, sizeof lab, "code=\"%u\"", codes[i]);
		sample(p, "pagechat:http_responses_total", lab, (double)atomic_load(&s->responses[i]));
	}
	metric(p, "pagechat:http_stalled_streams_total", "counter", "Streams cancelled for a client that took no "
	       "bytes within the timeout.", (double)atomic_load(&s->stalled));
	metric(p, "pagechat:http_slow_requests_total", "counter", "Requests closed for arriving too slowly.",
	       (double)atomic_load(&s->refused_slow));
	metric(p, "pagechat:http_oversized_bodies_total", "counter", "Connections closed for a body that grew past "
	       "the limit.", (double)atomic_load(&s->refused_big));
	metric(p, "pagechat:http_disconnects_total", "counter", "Generations whose client left before the end "
	       "(cancelled).", (double)atomic_load(&s->disconnects));
}

/* The label value: backslash, quote and newline escaped. */
static void escape_label(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	for (; *s && n + 3 < cap; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			out[n++] = '\\';
		out[n++] = *s == '\n' ? 'n' : *s;
	}
	out[n] = '\0';
}

/* The engine's latest snapshot into sn (taken from its view; zeroed when
 * the engine publishes none). Release with link_snapshot_deinit. */
static void view_snap(serve *s, link_snapshot *sn)
{
	link_view v = {0};
	link_view_get(s->x.link, &v);
	*sn = v.snap;
	link_snapshot_deinit(&v.server.pool);
}

enum MHD_Result http_metrics(call *c)
{
	serve *s = c->s;
	link_snapshot sn = {0};
	view_snap(s, &sn);
	prom p = {0};
	escape_label(s->model_name, p.model, sizeof p.model);
	vllm_metrics(&p, &sn);
	pool_metrics(&p, &sn);
	spec_step_metrics(&p, &sn);
	engine_metrics(&p, &sn, s);
	link_snapshot_deinit(&sn);
	return http_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", &p.b);
}

/* ---- /pagechat/v1/pool ---- */

enum MHD_Result http_pool(call *c)
{
	serve *s = c->s;
	link_snapshot sn = {0};
	view_snap(s, &sn);
	const core_stats *st = &sn.st;
	int64_t by_state[ARRAY_LEN(state_names)] = {0};
	for (int64_t b = 0; b < sn.n_blocks; b++)
		if (sn.map[b].state < ARRAY_LEN(state_names))
			by_state[sn.map[b].state]++;
	sbuf b = {0};
	sb_printf(&b, "{\"object\":\"pagechat.pool\",\"seq\":%llu,\"block_tokens\":%d,\"n_blocks\":%lld,"
		  "\"n_ctx\":%d,\"conv_ids_per_client\":%d,\"states\":[", (unsigned long long)sn.seq,
		  sn.block_tokens, (long long)sn.n_blocks, sn.n_ctx, LINK_CONV_IDS);
	for (size_t i = 0; i < ARRAY_LEN(state_names); i++)
		sb_printf(&b, "%s\"%s\"", i ? "," : "", state_names[i]);
	sb_put(&b, "],\"counts\":{", 12);
	for (size_t i = 0; i < ARRAY_LEN(state_names); i++)
		sb_printf(&b, "%s\"%s\":%lld", i ? "," : "", state_names[i], (long long)by_state[i]);
	sb_printf(&b, "},\"running\":%d,\"waiting\":%d,\"waste_paged\":%.6g,\"waste_contiguous\":%.6g,"
		  "\"prefix_queries\":%lld,\"prefix_hits\":%lld,", st->n_running, st->n_waiting,
		  st->waste, st->waste_contig, (long long)st->prompt_tokens, (long long)st->cached_tokens);
	sb_printf(&b, "\"held_tokens\":%lld,\"slots\":%lld,\"copies\":%lld,\"preemptions\":%lld,\"finished\":%lld,"
		  "\"kv_type_k\":\"%s\",\"kv_type_v\":\"%s\",\"kv_vs_f16\":%.6g,\"prefill_tps\":%.6g,\"decode_tps\":%.6g,",
		  (long long)st->slots_filled, (long long)st->slots_alloc, (long long)st->cow_copies,
		  (long long)st->preemptions, (long long)st->finished, kv_type_name(st->kv_type_k),
		  kv_type_name(st->kv_type_v), st->kv_vs_f16, sn.prefill_tps, sn.decode_tps);
	sb_printf(&b, "\"n_layers\":%d,\"window\":%d,\"window_layers\":%d,\"window_freed\":%lld,"
		  "\"window_held\":%lld,\"blocks\":[", st->n_layers, st->window, st->win_layers,
		  (long long)st->blocks_win_freed, (long long)st->blocks_win_held);
	for (int64_t i = 0; i < sn.n_blocks; i++)
		sb_printf(&b, "%s[%d,%d,%d]", i ? "," : "", sn.map[i].state, sn.map[i].refcount, sn.map[i].conv);
	sb_put(&b, "]}\n", 3);
	link_snapshot_deinit(&sn);
	return http_reply(c, 200, "application/json", &b);
}
