/* tests/test_place.c: the placement chooser (models/place.h) over synthetic
 * memory figures: Llama 3 8B, 70B and 405B shapes in Q4_K (the output in
 * Q6_K, f16 KV for 8192 tokens, batches of 512) on 8, 24, 48, 80 and 141 GB
 * devices (90% of each to fill, the default --gpu-mem-fraction) with 64 GB of
 * host memory; then layers of uneven sizes, -ngl given, and the figures read
 * from a real file. Every choice: never over the budget (with the margin),
 * never a layer short of what fits, the head on the device only when it
 * fits, a refusal that spells out the arithmetic when the host's part does
 * not fit. `test_place -v` prints the table (stderr). */
#include "models/place.h"
#include "tests/test.h"

#include <stdio.h>
#include <string.h>

#define GB INT64_C(1000000000)
#define KV_TOKENS 8192

typedef struct shape {
	const char *name;
	int dim, layers, heads, kv_heads, ffn, vocab;
} shape;

static const shape shapes[] = {
	{"8B", 4096, 32, 32, 8, 14336, 128256},
	{"70B", 8192, 80, 64, 8, 28672, 128256},
	{"405B", 16384, 126, 128, 8, 53248, 128256},
};

/* Bytes of n weights in Q4_K (144 per 256) and Q6_K (210 per 256). */
static int64_t q4k(int64_t n) { return n / 256 * 144; }
static int64_t q6k(int64_t n) { return n / 256 * 210; }

/* The figures of shape s, its layers' bytes into lb[]. */
static place_model model_of(const shape *s, int64_t *lb)
{
	llama_hparams hp = {.dim = s->dim, .n_layers = s->layers, .n_heads = s->heads, .n_kv_heads = s->kv_heads,
			    .head_dim = s->dim / s->heads, .ffn_dim = s->ffn, .n_vocab = s->vocab};
	int64_t d = s->dim, kvd = (int64_t)s->kv_heads * hp.head_dim;
	int64_t layer = q4k(d * d * 2 + d * kvd * 2 + d * s->ffn * 3) + 2 * d * 4;
	for (int l = 0; l < s->layers; l++)
		lb[l] = layer;
	llama_plan plan;
	llama_plan_memory(&hp, 0, 0, KV_F16, KV_F16, 512, &plan);
	return (place_model){.n_layers = s->layers, .layer_bytes = lb, .embd_bytes = q4k(d * s->vocab),
			     .head_bytes = q6k(d * s->vocab) + d * 4,
			     .kv_layer_token_bytes = llama_kv_token_bytes(&hp, KV_F16, KV_F16) / s->layers,
			     .scratch_bytes = plan.scratch_bytes};
}

/* The rules every automatic choice keeps. */
static void check_choice(const place_params *p, const place_plan *pl, int rc, const err *e, const char *what)
{
	int L = p->m.n_layers, N = pl->n_dev_layers;
	place_plan more, with_head;
	CHECK_(N >= 0 && N <= L, "%s: %d layers", what, N);
	CHECK_(N == 0 || pl->dev_total + pl->margin <= p->dev_budget, "%s: %lld + margin %lld over the budget %lld",
	       what, (long long)pl->dev_total, (long long)pl->margin, (long long)p->dev_budget);
	if (N < L && p->dev_budget >= 0) {
		place_figures(p, N + 1, false, &more);
		CHECK_(more.dev_total + more.margin > p->dev_budget, "%s: %d layers fit, %d chosen", what, N + 1, N);
	}
	if (N > 0 && N < L && !pl->head_dev) {
		place_figures(p, N, true, &with_head);
		CHECK_(with_head.dev_total + with_head.margin > p->dev_budget, "%s: the head fits but stays", what);
	}
	CHECK_(pl->dev_total + pl->host_total >= pl->dev_weights + pl->host_weights, "%s", what);
	if (rc == 0) {
		CHECK_(pl->host_total <= p->host_avail, "%s: host part over what is available", what);
	} else {
		CHECK_(pl->host_total > p->host_avail && strstr(e->msg, "GiB is available") &&
		       strstr(e->msg, "weights") && strstr(e->msg, "KV"), "%s: refusal '%s'", what, e->msg);
	}
}

static bool verbose;

static void test_shapes(void)
{
	static const int dev_gb[] = {8, 24, 48, 80, 141};
	static int64_t lb[256];
	char line[512];
	if (verbose)
		fprintf(stderr, "placement (Q4_K, f16 KV for %d tokens, 90%% of the device, 64 GB host):\n", KV_TOKENS);
	for (size_t s = 0; s < ARRAY_LEN(shapes); s++)
		for (size_t d = 0; d < ARRAY_LEN(dev_gb); d++) {
			place_params p = {.m = model_of(&shapes[s], lb), .kv_tokens = KV_TOKENS,
					  .dev_budget = dev_gb[d] * GB / 10 * 9, .host_avail = 64 * GB,
					  .margin_bytes = -1, .n_dev_layers = -1};
			place_plan pl;
			err e = {""};
			int rc = place_choose(&p, &pl, &e);
			snprintf(line, sizeof line, "%s on %d GB", shapes[s].name, dev_gb[d]);
			check_choice(&p, &pl, rc, &e, line);
			if (verbose)
				fprintf(stderr, "  %-5s %3d GB: %3d/%3d layers, head on %-6s  device %6.2f GiB, host "
					"%6.2f GiB%s%s\n", shapes[s].name, dev_gb[d], pl.n_dev_layers, pl.n_layers,
					pl.head_dev ? "device" : "host", (double)pl.dev_total / (1 << 30),
					(double)pl.host_total / (1 << 30), rc ? "; refused: " : "", rc ? e.msg : "");
			/* what the shapes must give */
			if (s == 0)
				CHECK_(rc == 0 && pl.n_dev_layers == 32, "%s", line);
			if (s == 1 && dev_gb[d] >= 80)
				CHECK_(rc == 0 && pl.n_dev_layers == 80, "%s", line);
			if (s == 1 && dev_gb[d] <= 48)
				CHECK_(rc == 0 && pl.n_dev_layers > 0 && pl.n_dev_layers < 80, "%s", line);
			if (s == 2)
				CHECK_(rc == -1, "%s: 405B in Q4_K needs more than 141 + 64 GB", line);
		}
}

/* Layers of uneven sizes (a mixed quantization): the last N are counted. */
static void test_uneven(void)
{
	int64_t lb[40];
	uint64_t rng = 99;
	for (int l = 0; l < 40; l++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		lb[l] = (int64_t)(100 + (rng >> 40) % 400) << 20;
	}
	place_model m = {.n_layers = 40, .layer_bytes = lb, .embd_bytes = 300 << 20, .head_bytes = 400 << 20,
			 .kv_layer_token_bytes = 4096, .scratch_bytes = 200 << 20};
	for (int64_t budget = 0; budget <= 16 * GB; budget += GB / 4) {
		place_params p = {.m = m, .kv_tokens = 4096, .dev_budget = budget, .host_avail = 64 * GB,
				  .margin_bytes = -1, .n_dev_layers = -1};
		place_plan pl;
		err e = {""};
		int rc = place_choose(&p, &pl, &e);
		char what[64];
		snprintf(what, sizeof what, "uneven layers, budget %lld", (long long)budget);
		check_choice(&p, &pl, rc, &e, what);
		int64_t w = 0;
		for (int l = 40 - pl.n_dev_layers; l < 40; l++)
			w += lb[l];
		CHECK_(pl.dev_weights == w + (pl.head_dev ? m.head_bytes : 0) +
					     (pl.n_dev_layers == 40 ? m.embd_bytes : 0), "%s", what);
	}
}

/* -ngl given: that many, refused with the figures past the budget; no
 * device: nothing there; the host alone too small: refused. */
static void test_given_and_edges(void)
{
	static int64_t lb[256];
	place_params p = {.m = model_of(&shapes[1], lb), .kv_tokens = KV_TOKENS, .dev_budget = 24 * GB,
			  .host_avail = 64 * GB, .margin_bytes = -1};
	place_plan pl;
	err e = {""};
	p.n_dev_layers = 10;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == 10 && pl.head_dev);
	p.n_dev_layers = 1000;
	CHECK_(place_choose(&p, &pl, &e) == -1 && pl.n_dev_layers == 80 && strstr(e.msg, "-ngl 1000") &&
	       strstr(e.msg, "budget"), "%s", e.msg);
	p.n_dev_layers = 0;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == 0 && !pl.head_dev && pl.dev_total == 0);
	p.n_dev_layers = -1;
	p.dev_budget = -1;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == 0);
	p.host_avail = 8 * GB;
	CHECK_(place_choose(&p, &pl, &e) == -1 && strstr(e.msg, "no device") && strstr(e.msg, "7.45 GiB"), "%s",
	       e.msg);
	/* a margin given: the budget less exactly that */
	p = (place_params){.m = model_of(&shapes[0], lb), .kv_tokens = KV_TOKENS, .host_avail = 64 * GB,
			   .margin_bytes = 0, .n_dev_layers = -1};
	place_figures(&p, 32, true, &pl);
	p.dev_budget = pl.dev_total;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == 32);
	p.dev_budget--;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == 31 && pl.head_dev);
}

/* From a real file: every tensor's bytes land in exactly one figure. */
static void test_from_file(void)
{
	err e = {""};
	gguf_file *f = gguf_open("../shared/models/stories260K.gguf", &e);
	CHECK_(f != NULL, "%s", e.msg);
	if (!f)
		return;
	llama_hparams hp;
	CHECK(llama_read_hparams(f, &hp, &e) == 0);
	int64_t lb[8], sum = 0, all = 0;
	place_model m;
	place_model_from_file(f, &hp, KV_F16, KV_F16, 64, lb, &m);
	for (int l = 0; l < m.n_layers; l++)
		sum += lb[l];
	for (int64_t i = 0; i < gguf_n_tensors(f); i++)
		all += (gguf_tensor_at(f, i)->n_bytes + 255) & ~(int64_t)255;
	CHECK_EQ_INT(m.n_layers, hp.n_layers);
	CHECK(lb[0] > 0 && lb[0] == lb[hp.n_layers - 1]);
	CHECK_EQ_INT(sum + m.embd_bytes + m.other_bytes + (m.tied ? m.head_bytes - m.embd_bytes : m.head_bytes), all);
	CHECK_EQ_INT(m.kv_layer_token_bytes, 2 * hp.n_kv_heads * hp.head_dim * 2);
	place_params p = {.m = m, .kv_tokens = 512, .dev_budget = INT64_C(1) << 30, .host_avail = INT64_C(1) << 30,
			  .margin_bytes = -1, .n_dev_layers = -1};
	place_plan pl;
	CHECK(place_choose(&p, &pl, &e) == 0 && pl.n_dev_layers == hp.n_layers && pl.head_dev && pl.host_total == 0);
	CHECK_EQ_INT(pl.dev_weights, all);
	gguf_close(f);
}

int main(int argc, char **argv)
{
	verbose = argc > 1 && !strcmp(argv[1], "-v");
	test_shapes();
	test_uneven();
	test_given_and_edges();
	test_from_file();
	return TEST_DONE();
}
