/* tests/test_beam.c: beam search in the engine (core_request.beams).
 * References: ../shared/testdata/beam.tsv (llama.cpp, full recomputation),
 * a brute-force beam search here that recomputes every beam from scratch
 * with gen_logits (no sharing, no engine), and greedy generation for W = 1.
 * The engine checks its pool invariants after every step (core_params.check). */
#include "engine/core.h"
#include "engine/gen.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "../shared/models/stories260K.gguf"
#define RAND256 "build/models/rand-256x4-f32.gguf"
#define MAXW 16
#define MAXN 64

typedef struct beam_out {
	int32_t ids[MAXW][MAXN];
	int n_ids[MAXW], n_finish[MAXW];
	double lp[MAXW];
	enum core_finish finish[MAXW];
} beam_out;

static beam_out outs[8];           /* by request id */
static char fin_text[256];         /* the last FIN_ERROR's message */
static int64_t peak_used;

static void on_event(void *ctx, const core_event *ev)
{
	(void)ctx;
	beam_out *o = &outs[ev->req];
	if (ev->index < 0 || ev->index >= MAXW) { /* a refused width above 16 ends each of its beams too */
		CHECK_(ev->kind == CORE_EV_FINISH && ev->finish == FIN_ERROR, "event for completion %d", ev->index);
		return;
	}
	if (ev->kind == CORE_EV_TOKEN) {
		if (o->n_ids[ev->index] < MAXN)
			o->ids[ev->index][o->n_ids[ev->index]++] = ev->token;
	} else {
		if (ev->finish == FIN_ERROR)
			snprintf(fin_text, sizeof fin_text, "%.*s", (int)ev->text_len, ev->text);
		o->n_finish[ev->index]++;
		o->finish[ev->index] = ev->finish;
		o->lp[ev->index] = ev->m.logprob;
	}
}

static core *make_core(llama_model *m, const tok *tk, int64_t blocks)
{
	core_params p = {.model = m, .tok = tk, .pool_blocks = blocks, .check = true};
	err e = {0};
	core *c = core_new(&p, on_event, NULL, &e);
	CHECK_(c != NULL, "%s", e.msg);
	return c;
}

static void run_all(core *c)
{
	err e = {0};
	peak_used = 0;
	int n = 0;
	while (!core_idle(c) && n >= 0) {
		n = core_step(c, &e);
		core_stats st;
		core_get_stats(c, &st);
		peak_used = MAX(peak_used, st.blocks_used);
	}
	CHECK_(n >= 0, "step: %s", e.msg);
}

/* Runs c until idle; the most sequences it ran at once. */
static int run_peak(core *c)
{
	err e = {0};
	int most = 0;
	while (!core_idle(c)) {
		if (core_step(c, &e) < 0) {
			CHECK_(false, "step: %s", e.msg);
			break;
		}
		core_stats st;
		core_get_stats(c, &st);
		most = MAX(most, st.n_running);
	}
	return most;
}

static core_request beam_req(int64_t id, const int32_t *p, int n, int width, int max_tokens)
{
	return (core_request){.id = id, .prompt = p, .n_prompt = n, .samp = samp_default_params(),
			      .max_tokens = max_tokens, .n = 1, .beams = width, .length_penalty = 1.0f};
}

/* ---- the brute-force reference ---- */

typedef struct hyp {
	int32_t ids[MAXN];
	int n, len;
	double lp;
} hyp;

typedef struct cand {
	double lp;
	int parent;
	int32_t tok;
} cand;

static int cmp_cand(const void *pa, const void *pb)
{
	const cand *a = pa, *b = pb;
	if (a->lp != b->lp)
		return a->lp > b->lp ? -1 : 1;
	if (a->parent != b->parent)
		return a->parent - b->parent;
	return a->tok - b->tok;
}

static double score(const hyp *h, double alpha)
{
	return h->lp / pow(h->len, alpha);
}

static void keep_best(hyp *fin, int *n_fin, int w, const hyp *h, double alpha)
{
	int at = *n_fin;
	while (at > 0 && score(&fin[at - 1], alpha) < score(h, alpha))
		at--;
	memmove(fin + at + 1, fin + at, (size_t)(*n_fin - at) * sizeof *fin);
	fin[at] = *h;
	if (++*n_fin > w)
		(*n_fin)--;
}

static bool is_end(const tok *tk, const int32_t *stops, int n_stops, int32_t t)
{
	for (int i = 0; i < n_stops; i++)
		if (stops[i] == t)
			return true;
	return tok_is_eog(tk, t);
}

/* Beam search by full recomputation: out[0..w) best first. False when the
 * model fails. */
static bool brute(llama_model *m, const tok *tk, const int32_t *prompt, int n_prompt, int w, int n_new,
		  const int32_t *stops, int n_stops, hyp *out)
{
	int V = llama_hp(m)->n_vocab;
	static hyp live[MAXW], next[MAXW], fin[MAXW + 1];
	static cand cands[MAXW * 600];
	float *logits = malloc((size_t)V * sizeof *logits);
	int32_t seq[512];
	int n_live = 1, n_fin = 0;
	live[0] = (hyp){.n = 0, .len = 0, .lp = 0};
	for (int step = 0; step < n_new; step++) {
		int nc = 0;
		for (int b = 0; b < n_live; b++) {
			memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
			memcpy(seq + n_prompt, live[b].ids, (size_t)live[b].n * sizeof *seq);
			err e = {0};
			if (gen_logits_kv(m, seq, n_prompt + live[b].n, 0, KV_F32, KV_F32, logits, &e)) {
				free(logits);
				return false;
			}
			double mx = -INFINITY, sum = 0;
			for (int i = 0; i < V; i++)
				mx = fmax(mx, logits[i]);
			for (int i = 0; i < V; i++)
				sum += exp((double)logits[i] - mx);
			for (int i = 0; i < V; i++)
				cands[nc++] = (cand){live[b].lp + (double)logits[i] - mx - log(sum), b, i};
		}
		qsort(cands, (size_t)nc, sizeof *cands, cmp_cand);
		int n_next = 0;
		for (int i = 0; i < nc && n_next < w; i++) {
			hyp h = live[cands[i].parent];
			h.lp = cands[i].lp;
			h.len++;
			if (is_end(tk, stops, n_stops, cands[i].tok)) {
				keep_best(fin, &n_fin, w, &h, 1.0);
				continue;
			}
			h.ids[h.n++] = cands[i].tok;
			next[n_next++] = h;
		}
		memcpy(live, next, (size_t)n_next * sizeof *live);
		n_live = n_next;
		if (n_fin >= w && score(&live[0], 1.0) <= score(&fin[n_fin - 1], 1.0))
			break;
	}
	hyp all[2 * MAXW + 1];
	int n = 0;
	for (int i = 0; i < n_fin; i++)
		all[n++] = fin[i];
	for (int i = 0; i < n_live; i++)
		all[n++] = live[i];
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && score(&all[j], 1.0) > score(&all[j - 1], 1.0); j--) {
			hyp t = all[j];
			all[j] = all[j - 1];
			all[j - 1] = t;
		}
	memcpy(out, all, (size_t)w * sizeof *out);
	free(logits);
	return true;
}

/* ---- tests ---- */

static int encode(const tok *tk, const char *text, int32_t *ids, int cap)
{
	int n = tok_encode(tk, text, strlen(text), TOK_ADD_BOS, ids, cap);
	CHECK_(n > 0 && n <= cap, "encode '%s'", text);
	return n;
}

static void test_reference_tsv(llama_model *m, const tok *tk)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/beam.tsv") == 0);
	int matched = 0;
	for (int i = 0; i < t.n_rows;) {
		char prompt[256];
		snprintf(prompt, sizeof prompt, "%.*s", (int)strlen(t.rows[i][0]) - 2, t.rows[i][0] + 1);
		int w = atoi(t.rows[i][1]), n = atoi(t.rows[i][2]);
		int32_t ids[256];
		int n_ids = encode(tk, prompt, ids, 256);
		memset(outs, 0, sizeof outs);
		core *c = make_core(m, tk, 256);
		core_request r = beam_req(1, ids, n_ids, w, n);
		err e = {0};
		CHECK(core_submit(c, &r, &e) == 0);
		run_all(c);
		for (int k = 0; k < w && i < t.n_rows; k++, i++) {
			int rank = atoi(t.rows[i][3]);
			char got[1024] = "";
			for (int j = 0; j < outs[1].n_ids[rank]; j++)
				snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", j ? " " : "",
					 outs[1].ids[rank][j]);
			bool ok = !strcmp(got, t.rows[i][5]) && fabs(outs[1].lp[rank] - atof(t.rows[i][4])) <= 1e-3;
			CHECK_(ok, "beam.tsv %s W%d rank %d: got %s (%.6f), want %s (%s)", prompt, w, rank, got,
			       outs[1].lp[rank], t.rows[i][5], t.rows[i][4]);
			matched += ok;
		}
		core_free(c);
	}
	printf("beam.tsv: %d/%d rows match\n", matched, t.n_rows);
	tsv_free(&t);
}

static void compare_with_brute(llama_model *m, const tok *tk, const char *prompt, int w, int n,
			       const int32_t *stops, int n_stops, const char *what)
{
	int32_t ids[256];
	int n_ids = encode(tk, prompt, ids, 256);
	hyp ref[MAXW];
	CHECK(brute(m, tk, ids, n_ids, w, n, stops, n_stops, ref));
	memset(outs, 0, sizeof outs);
	core *c = make_core(m, tk, 512);
	core_request r = beam_req(1, ids, n_ids, w, n);
	r.stop_ids = stops;
	r.n_stop_ids = n_stops;
	err e = {0};
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	bool ok = true;
	for (int k = 0; k < w; k++) {
		ok &= outs[1].n_finish[k] == 1 && outs[1].n_ids[k] == ref[k].n;
		ok &= fabs(outs[1].lp[k] - ref[k].lp) < 1e-9;
		for (int j = 0; ok && j < ref[k].n; j++)
			ok &= outs[1].ids[k][j] == ref[k].ids[j];
	}
	CHECK_(ok, "%s '%s' W%d n%d: engine differs from the brute-force search", what, prompt, w, n);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_used, 0);
	core_free(c);
}

/* A stop token that the model often ranks high, so hypotheses finish. */
static int32_t frequent_token(const tok *tk)
{
	int32_t ids[16];
	int n = tok_encode(tk, ".", 1, 0, ids, 16);
	return n > 0 ? ids[n - 1] : 13;
}

static void test_against_brute(llama_model *m, const tok *tk, const char *what)
{
	static const char *const prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went"};
	int32_t stop[1] = {frequent_token(tk)};
	int widths[] = {1, 2, 3, 5, 8};
	for (size_t p = 0; p < 3; p++)
		for (size_t i = 0; i < ARRAY_LEN(widths); i++) {
			compare_with_brute(m, tk, prompts[p], widths[i], 12, NULL, 0, what);
			compare_with_brute(m, tk, prompts[p], widths[i], 24, stop, 1, what);
		}
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

static void test_width1_is_greedy(llama_model *m, const tok *tk)
{
	int32_t ids[64], ref[40];
	int n_ids = encode(tk, "Once upon a time", ids, 64);
	gen_params gp = {.samp = samp_default_params(), .n_predict = 32, .n_ctx = 512, .block_tokens = 16};
	gp.samp.temp = 0;
	gen_stats st;
	err e = {0};
	int32_t got[40];
	got[0] = 0;
	CHECK(gen_run(m, tk, ids, n_ids, &gp, collect, got, &st, &e) == 0);
	memcpy(ref, got, sizeof ref);
	memset(outs, 0, sizeof outs);
	core *c = make_core(m, tk, 256);
	core_request r = beam_req(1, ids, n_ids, 1, 32);
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	bool same = outs[1].n_ids[0] == ref[0];
	for (int i = 0; same && i < ref[0]; i++)
		same &= outs[1].ids[0][i] == ref[1 + i];
	CHECK_(same, "W = 1 differs from greedy generation");
	core_free(c);
}

/* Beam requests under max_running: a request is admitted only where all its
 * beams (forked in running) fit, so three width-6 requests at max_running 8
 * run one at a time (they once ran 18 sequences and wrote past the
 * scheduler's arrays), each giving what it gives alone; a width above
 * max_running is refused. */
static void test_beams_fit(llama_model *m, const tok *tk)
{
	core_params p = {.model = m, .tok = tk, .pool_blocks = 256, .check = true, .max_running = 8};
	int32_t ids[64];
	int n = encode(tk, "Once upon a time", ids, 64);
	beam_out alone[3];
	for (int pass = 0; pass < 2; pass++) {
		memset(outs, 0, sizeof outs);
		err e = {0};
		core *c = core_new(&p, on_event, NULL, &e);
		CHECK_(c != NULL, "%s", e.msg);
		if (!c)
			return;
		int most = 0;
		for (int k = 0; k < 3; k++) {
			core_request r = beam_req(1 + k, ids, n - k, 6, 16);
			CHECK(core_submit(c, &r, &e) == 0);
			if (pass == 0 || k == 2) { /* each alone, then all three at once */
				int peak = run_peak(c);
				most = MAX(most, peak);
			}
		}
		CHECK_(most <= 8 && most >= 6, "running peaked at %d (max_running 8)", most);
		if (pass == 0) {
			memcpy(alone, outs + 1, sizeof alone);
		} else {
			for (int k = 0; k < 3; k++)
				CHECK_(!memcmp(&alone[k], &outs[1 + k], sizeof alone[k]), "request %d beside the others", k);
			core_request r = beam_req(4, ids, n, 9, 4);
			CHECK(core_submit(c, &r, &e) == -1 && strstr(e.msg, "must be 1..8"));
		}
		core_free(c);
	}
}

/* Pools of 1 to 64 blocks against widths 1 to 16, as beams and as n
 * sampled completions (#42 finding 6): every request ends, within a bounded
 * number of steps, with exactly one FINISH per completion (one per beam),
 * and a refusal says the arithmetic (what is needed, what the pool has).
 * A refusal at submit used to send one FINISH for a beam request whose
 * front-ends wait for one per beam (batch spun at 100% CPU). */
static bool said_why(const char *msg)
{
	return strstr(msg, "but the pool has") || strstr(msg, "can be freed") || strstr(msg, "must be 1..");
}

static void test_grid(llama_model *m, const tok *tk)
{
	int32_t a[64];
	int na = encode(tk, "Once upon a time there was", a, 64);
	int bad = 0, refused = 0, ran = 0;
	for (int64_t blocks = 1; blocks <= 64; blocks++)
		for (int w = 1; w <= MAXW; w++)
			for (int beams = 0; beams < 2; beams++) {
				core_params p = {.model = m, .tok = tk, .pool_blocks = blocks, .block_tokens = 4,
						 .check = true};
				err e = {0};
				core *c = core_new(&p, on_event, NULL, &e);
				if (!c) {
					bad += !strstr(e.msg, "block");
					continue;
				}
				memset(outs, 0, sizeof outs);
				fin_text[0] = '\0';
				core_request r = beams ? beam_req(1, a, na, w, 12)
						       : (core_request){.id = 1, .prompt = a, .n_prompt = na,
									.samp = samp_default_params(), .max_tokens = 12, .n = w};
				int rc = core_submit(c, &r, &e);
				if (rc)
					bad += !said_why(e.msg);
				int steps = 0;
				while (!core_idle(c) && steps < 5000 && core_step(c, &e) >= 0)
					steps++;
				bool idle = core_idle(c), once = true, err_said = true;
				for (int k = 0; k < w; k++) {
					once &= outs[1].n_finish[k] == 1;
					err_said &= outs[1].finish[k] != FIN_ERROR || said_why(fin_text);
				}
				for (int k = w; k < MAXW; k++)
					once &= outs[1].n_finish[k] == 0;
				CHECK_(idle && once && err_said, "pool %lld, %s %d: idle %d after %d steps, finishes %d %d "
				       ".. %d; '%s'", (long long)blocks, beams ? "beams" : "n", w, idle, steps,
				       outs[1].n_finish[0], outs[1].n_finish[1], outs[1].n_finish[w - 1], fin_text);
				refused += rc != 0;
				ran += rc == 0;
				core_free(c);
			}
	CHECK_(bad == 0, "%d refusals without the arithmetic", bad);
	printf("pools 1..64 x widths 1..16 x beams/n: %d refused at submit, %d ran\n", refused, ran);
}

/* A beam request among ordinary ones: nobody's output changes. */
static void test_beside_others(llama_model *m, const tok *tk)
{
	int32_t a[64], b[64];
	int na = encode(tk, "Once upon a time", a, 64), nb = encode(tk, "The cat sat", b, 64);
	beam_out alone[3];
	for (int pass = 0; pass < 2; pass++) {
		memset(outs, 0, sizeof outs);
		err e = {0};
		core *c = make_core(m, tk, 64);
		core_request r1 = beam_req(1, a, na, 4, 20);
		core_request r2 = {.id = 2, .prompt = b, .n_prompt = nb, .samp = samp_default_params(),
				   .max_tokens = 30, .n = 2};
		r2.samp.seed = 11;
		core_request r3 = r2;
		r3.id = 3;
		r3.n = 1;
		r3.samp.temp = 0;
		if (pass == 0) {
			/* each alone */
			for (int k = 0; k < 3; k++) {
				core_request *rq = k == 0 ? &r1 : k == 1 ? &r2 : &r3;
				CHECK(core_submit(c, rq, &e) == 0);
				run_all(c);
				alone[k] = outs[rq->id];
			}
		} else {
			CHECK(core_submit(c, &r2, &e) == 0);
			CHECK(core_submit(c, &r1, &e) == 0);
			CHECK(core_submit(c, &r3, &e) == 0);
			run_all(c);
			for (int k = 0; k < 3; k++)
				CHECK_(!memcmp(&alone[k], &outs[k + 1], sizeof alone[k]),
				       "request %d changed beside a beam request", k + 1);
		}
		core_free(c);
	}
}

/* W = 4 on a 500-token prompt holds at most prompt blocks + 4 x (answer + 1). */
static void test_memory(llama_model *m, const tok *tk)
{
	int32_t p[500];
	p[0] = 1;
	for (int i = 1; i < 500; i++)
		p[i] = 3 + (i * 37) % 400;
	int n_new = 40, bt = 16;
	memset(outs, 0, sizeof outs);
	err e = {0};
	core *c = make_core(m, tk, 1024);
	core_request r = beam_req(1, p, 500, 4, n_new);
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	int64_t bound = (500 + bt - 1) / bt + 4 * ((n_new + bt - 1) / bt + 1);
	CHECK_(peak_used <= bound, "W = 4 peaked at %lld blocks, bound %lld", (long long)peak_used,
	       (long long)bound);
	int64_t beam_peak = peak_used;
	core_free(c);
	c = make_core(m, tk, 1024);
	core_request s = {.id = 2, .prompt = p, .n_prompt = 500, .samp = samp_default_params(),
			  .max_tokens = n_new, .n = 4};
	CHECK(core_submit(c, &s, &e) == 0);
	run_all(c);
	printf("500-token prompt, 40 new tokens: W = 4 beams peak %lld blocks (bound %lld); n = 4 samples "
	       "%lld; 4 unshared sequences would hold %d\n", (long long)beam_peak, (long long)bound,
	       (long long)peak_used, 4 * ((500 + n_new + bt - 1) / bt));
	core_free(c);
}

/* A small pool: beams are preempted and recomputed, the result stays. */
static void test_preemption_and_cancel(llama_model *m, const tok *tk)
{
	int32_t a[64];
	int na = encode(tk, "Once upon a time there was", a, 64);
	memset(outs, 0, sizeof outs);
	err e = {0};
	core *c = make_core(m, tk, 256);
	core_request r = beam_req(1, a, na, 6, 40);
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	beam_out big = outs[1];
	memset(outs, 0, sizeof outs);
	core_free(c);
	c = make_core(m, tk, 16);
	core_request o = {.id = 2, .prompt = a, .n_prompt = na, .samp = samp_default_params(), .max_tokens = 100,
			  .n = 2};
	CHECK(core_submit(c, &o, &e) == 0);
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	core_stats st;
	core_get_stats(c, &st);
	CHECK_(!memcmp(&big, &outs[1], sizeof big), "beams differ in a small pool (%lld preemptions)",
	       (long long)st.preemptions);
	CHECK_(st.preemptions > 0, "no preemption in the small pool");
	core_free(c);
	/* a pool that cannot hold all the beams at once: a clear error, no hang */
	memset(outs, 0, sizeof outs);
	c = make_core(m, tk, 12);
	CHECK(core_submit(c, &o, &e) == 0);
	CHECK(core_submit(c, &r, &e) == 0);
	run_all(c);
	bool all_err = true;
	for (int k = 0; k < 6; k++)
		all_err &= outs[1].n_finish[k] == 1 && outs[1].finish[k] == FIN_ERROR;
	CHECK_(all_err, "beams in a too small pool did not end with an error");
	core_free(c);
	/* cancelled mid-way: one FINISH per completion, no block left */
	memset(outs, 0, sizeof outs);
	c = make_core(m, tk, 256);
	CHECK(core_submit(c, &r, &e) == 0);
	for (int i = 0; i < 8; i++)
		CHECK(core_step(c, &e) >= 0);
	core_cancel(c, 1);
	CHECK(core_idle(c));
	for (int k = 0; k < 6; k++)
		CHECK(outs[1].n_finish[k] == 1 && outs[1].finish[k] == FIN_CANCELLED);
	core_get_stats(c, &st);
	CHECK_EQ_INT(st.blocks_used, 0);
	CHECK(core_check(c, &e));
	/* bad widths are refused */
	core_request bad = beam_req(3, a, na, 17, 10);
	CHECK(core_submit(c, &bad, &e) == -1);
	CHECK(strstr(e.msg, "beams") != NULL);
	core_free(c);
}

int main(void)
{
	err e = {0};
	llama_params lp = {.max_tokens = 512};
	llama_model *m = llama_open(MODEL, &lp, &e);
	tok *tk = m ? tok_new(llama_file(m), &e) : NULL;
	CHECK_(m && tk, "%s", e.msg);
	if (!m || !tk)
		return TEST_DONE();
	test_reference_tsv(m, tk);
	test_width1_is_greedy(m, tk);
	test_against_brute(m, tk, "stories260K");
	test_beside_others(m, tk);
	test_beams_fit(m, tk);
	test_memory(m, tk);
	test_preemption_and_cancel(m, tk);
	test_grid(m, tk);
	llama_model *r = llama_open(RAND256, &lp, &e);
	CHECK_(r != NULL, "%s", e.msg);
	if (r)
		test_against_brute(r, tk, "rand-256x4");
	llama_free(r);
	tok_free(tk);
	llama_free(m);
	return TEST_DONE();
}
