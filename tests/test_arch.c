/* tests/test_arch.c: the forward pass of every architecture path (qwen3 Q/K
 * norms, qwen2 biases, NEOX RoPE, Llama 3 rope_freqs, linear RoPE scaling,
 * freq_base, GQA, partial rotary dims, tied heads; Gemma 3's sliding windows
 * with their own rope base, norms after attention and FFN, GELU, embedding
 * scale, attention scale and logit soft-cap) against a deliberately
 * plain reference written here from the architecture definitions: double
 * precision, contiguous K/V, one loop per equation, hyperparameters taken
 * from the generator's spec rather than from the engine's parsing.
 *
 * Models are random-weight f32 files written by tests/rand_model.h into
 * build/models/. Each case compares the logits of every position of a prompt
 * plus its greedy continuation, computed by the engine as one prefill, as
 * decode steps one token at a time, and in chunks across small KV blocks, on
 * every CPU kernel set; then the greedy continuation itself. The Gemma cases'
 * windows are shorter than the prompt, so windowed layers see less than
 * everything, and the reference applies them as a plain mask over full
 * attention. A reference with
 * the case's feature switched off must miss by far more than the tolerance,
 * so a test that passes shows the feature is both present and right. */
#include "engine/gen.h"
#include "kv/pool.h"
#include "engine/sample.h"
#include "models/llama.h"
#include "tests/rand_model.h"
#include "tests/run.h"
#include "tests/test.h"

#include <string.h>
#include <sys/stat.h>

#define N_PROMPT 20
#define N_GEN 6
#define N_SEQ (N_PROMPT + N_GEN)
/* Worst |engine - reference| over a row, as a fraction of that row's logit
 * range (max - min). The engine computes in f32 (rounding 6e-8 relative), with
 * reductions of at most 128 terms and two layers: its error is around 1e-6 of
 * the range. A missing feature (a norm, a bias, a rotation) moves logits by a
 * sizeable fraction of the range, so 1e-4 leaves two orders of magnitude on
 * both sides. */
#define REL_TOL 1e-4

/* Reference switches: each leaves one feature out. */
enum {
	REF_NO_BIAS = 1,         /* every bias (Qwen2's Q/K/V ones, Llama's optional ones) */
	REF_NO_QK_NORM = 2,      /* Qwen3's per-head norms */
	REF_FLIP_ROPE = 4,       /* adjacent pairs for NEOX and the other way round */
	REF_NO_FREQS = 8,        /* Llama 3 frequency factors */
	REF_NO_SCALE = 16,       /* linear position scaling */
	REF_BASE_10K = 32,       /* freq_base ignored */
	REF_NO_WINDOW = 64,      /* every layer attends to everything */
	REF_NO_POST_NORM = 128,  /* Gemma's norms after attention and FFN */
	REF_SILU = 256,          /* SiLU in the FFN instead of GELU */
	REF_NO_SOFTCAP = 512,    /* the final logit soft-cap */
	REF_ONE_BASE = 1024,     /* windowed layers rotate with the global base */
	REF_NO_EMBD_SCALE = 2048, /* embeddings not multiplied by sqrt(dim) */
};

typedef struct arch_case {
	const char *name;
	rm_spec spec;
	bool neox;               /* the architecture's RoPE style (qwen: NEOX) */
	int breaks;              /* REF_* features this case must be sensitive to */
} arch_case;

/* ---- the reference ---- */

typedef struct ref {
	const rm_spec *s;
	const gguf_file *f;
	int n_vocab, n_rot, q_dim, kv_dim, flags;
	bool neox, gemma;
} ref;

/* Whether layer l is one of Gemma's windowed layers (the spec's pattern; a
 * period of 6 when the file gives none). */
static bool ref_windowed(const ref *r, int l)
{
	const rm_spec *s = r->s;
	if (!r->gemma || s->swa_window <= 0)
		return false;
	if (s->swa_layers)
		return s->swa_layers[l];
	int period = s->swa_period > 0 ? s->swa_period : 6;
	return l % period < period - 1;
}

static const float *tensor(const ref *r, int l, const char *suffix)
{
	char name[96];
	if (l >= 0)
		snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
	else
		snprintf(name, sizeof name, "%s", suffix);
	const gguf_tensor *t = gguf_find_tensor(r->f, name);
	if (!t)
		return NULL;
	if (t->type != DT_F32)
		CHECK_(0, "%s is %s; the reference reads f32 only", name, dtype_name(t->type));
	return t->data;
}

/* y = x / sqrt(mean(x^2) + eps) * w */
static void ref_rmsnorm(double *y, const double *x, const float *w, int n, double eps)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	double s = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		y[i] = x[i] * s * w[i];
}

/* y[out] = W x (+ b); W holds out rows of in values */
static void ref_matvec(double *y, const float *w, const float *b, const double *x, int in, int out)
{
	for (int o = 0; o < out; o++) {
		double acc = b ? b[o] : 0.0;
		for (int i = 0; i < in; i++)
			acc += (double)w[(size_t)o * in + i] * x[i];
		y[o] = acc;
	}
}

/* Rotates pair i of one head by pos * base^(-2i/n_rot), the position divided
 * by the linear factor and the frequency by Llama 3's factor. NEOX pairs
 * element i with i + n_rot/2, the original style 2i with 2i+1; dims past
 * n_rot are left alone. */
static void ref_rope(const ref *r, double *v, int pos, const float *factors, int l)
{
	double base = r->s->rope_base > 0 && !(r->flags & REF_BASE_10K) ? r->s->rope_base : 10000.0;
	/* rope.scaling.factor wins over the older rope.scale_linear */
	double p = pos, factor = r->s->linear_scale > 0 ? r->s->linear_scale : r->s->old_scale;
	bool local = ref_windowed(r, l) && !(r->flags & REF_ONE_BASE);
	if (local) /* Gemma's windowed layers: their own base (10000 unless given), no scaling */
		base = r->s->rope_base_swa > 0 ? r->s->rope_base_swa : 10000.0;
	if (factor > 0 && !(r->flags & REF_NO_SCALE) && !local)
		p /= factor;
	bool neox = r->neox != !!(r->flags & REF_FLIP_ROPE);
	int half = r->n_rot / 2;
	for (int i = 0; i < half; i++) {
		double freq = pow(base, -2.0 * i / r->n_rot);
		if (factors && !(r->flags & REF_NO_FREQS))
			freq /= factors[i];
		double th = p * freq, c = cos(th), s = sin(th);
		int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
		double x0 = v[a], x1 = v[b];
		v[a] = x0 * c - x1 * s;
		v[b] = x0 * s + x1 * c;
	}
}

/* Q, K, V of one token in layer l: projections, biases, per-head norms, RoPE. */
static void ref_qkv(const ref *r, int l, const double *xb, int pos, double *q, double *k, double *v)
{
	const rm_spec *s = r->s;
	bool nb = r->flags & REF_NO_BIAS;
	ref_matvec(q, tensor(r, l, "attn_q.weight"), nb ? NULL : tensor(r, l, "attn_q.bias"), xb, s->dim, r->q_dim);
	ref_matvec(k, tensor(r, l, "attn_k.weight"), nb ? NULL : tensor(r, l, "attn_k.bias"), xb, s->dim, r->kv_dim);
	ref_matvec(v, tensor(r, l, "attn_v.weight"), nb ? NULL : tensor(r, l, "attn_v.bias"), xb, s->dim, r->kv_dim);
	const float *qn = tensor(r, l, "attn_q_norm.weight"), *kn = tensor(r, l, "attn_k_norm.weight");
	const float *factors = tensor(r, -1, "rope_freqs.weight");
	for (int h = 0; h < s->n_heads; h++) {
		double *qh = q + h * s->head_dim;
		if (qn && !(r->flags & REF_NO_QK_NORM))
			ref_rmsnorm(qh, qh, qn, s->head_dim, s->eps);
		ref_rope(r, qh, pos, factors, l);
	}
	for (int h = 0; h < s->n_kv_heads; h++) {
		double *kh = k + h * s->head_dim;
		if (kn && !(r->flags & REF_NO_QK_NORM))
			ref_rmsnorm(kh, kh, kn, s->head_dim, s->eps);
		ref_rope(r, kh, pos, factors, l);
	}
}

/* out[q_dim] for the query at position t over keys/values 0..t, the keys
 * before t - window + 1 masked out in a windowed layer; query head h reads
 * KV head h / (n_heads / n_kv_heads). */
static void ref_attend(const ref *r, const double *q, const double *K, const double *V, int t, int l,
		       double *out)
{
	const rm_spec *s = r->s;
	double *w = xmalloc((size_t)(t + 1) * sizeof *w);
	double scale = s->attn_scale > 0 ? s->attn_scale : 1.0 / sqrt((double)s->head_dim);
	bool masked = ref_windowed(r, l) && !(r->flags & REF_NO_WINDOW);
	for (int h = 0; h < s->n_heads; h++) {
		int g = h / (s->n_heads / s->n_kv_heads);
		const double *qh = q + h * s->head_dim;
		double mx = -INFINITY, sum = 0;
		for (int j = 0; j <= t; j++) {
			const double *kj = K + (size_t)j * r->kv_dim + g * s->head_dim;
			double d = 0;
			for (int i = 0; i < s->head_dim; i++)
				d += qh[i] * kj[i];
			w[j] = masked && j <= t - s->swa_window ? -INFINITY : d * scale;
			mx = fmax(mx, w[j]);
		}
		for (int j = 0; j <= t; j++)
			sum += w[j] = exp(w[j] - mx);
		for (int i = 0; i < s->head_dim; i++) {
			double acc = 0;
			for (int j = 0; j <= t; j++)
				acc += w[j] * V[(size_t)j * r->kv_dim + g * s->head_dim + i];
			out[h * s->head_dim + i] = acc / sum;
		}
	}
	free(w);
}

/* x[d] = norm(x) * w, Gemma's norm after a block (when the model has it). */
static void ref_post_norm(const ref *r, int l, const char *name, double *x)
{
	const float *w = tensor(r, l, name);
	if (w && !(r->flags & REF_NO_POST_NORM))
		ref_rmsnorm(x, x, w, r->s->dim, r->s->eps);
}

/* The FFN's gate: SwiGLU's SiLU, or Gemma's GELU (tanh form). */
static double ref_act(const ref *r, double g)
{
	if (r->gemma && !(r->flags & REF_SILU))
		return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
	return g / (1.0 + exp(-g));
}

/* logits[n][n_vocab] for every position of ids[n]. */
static void ref_forward(const ref *r, const int32_t *ids, int n, double *logits)
{
	const rm_spec *s = r->s;
	int d = s->dim;
	double *x = xmalloc((size_t)n * d * sizeof *x), *xb = xmalloc((size_t)d * sizeof *xb);
	double *K = xmalloc((size_t)n * r->kv_dim * sizeof *K), *V = xmalloc((size_t)n * r->kv_dim * sizeof *V);
	double *Q = xmalloc((size_t)n * r->q_dim * sizeof *Q), *att = xmalloc((size_t)r->q_dim * sizeof *att);
	double *g = xmalloc((size_t)s->ffn_dim * sizeof *g), *u = xmalloc((size_t)s->ffn_dim * sizeof *u);
	const float *emb = tensor(r, -1, "token_embd.weight");
#define B(l, name) (r->flags & REF_NO_BIAS ? NULL : tensor(r, l, name))
	double es = r->gemma && !(r->flags & REF_NO_EMBD_SCALE) ? sqrt((double)d) : 1.0;
	for (int t = 0; t < n; t++)
		for (int i = 0; i < d; i++)
			x[(size_t)t * d + i] = emb[(size_t)ids[t] * d + i] * es;
	for (int l = 0; l < s->n_layers; l++) {
		/* Q/K/V of every position first; causality comes from attending to 0..t */
		for (int t = 0; t < n; t++) {
			ref_rmsnorm(xb, x + (size_t)t * d, tensor(r, l, "attn_norm.weight"), d, s->eps);
			ref_qkv(r, l, xb, t, Q + (size_t)t * r->q_dim, K + (size_t)t * r->kv_dim,
				V + (size_t)t * r->kv_dim);
		}
		for (int t = 0; t < n; t++) {
			double *xt = x + (size_t)t * d;
			ref_attend(r, Q + (size_t)t * r->q_dim, K, V, t, l, att);
			ref_matvec(xb, tensor(r, l, "attn_output.weight"), B(l, "attn_output.bias"), att, r->q_dim, d);
			ref_post_norm(r, l, "post_attention_norm.weight", xb);
			for (int i = 0; i < d; i++)
				xt[i] += xb[i];
			/* gated FFN: down(act(gate x) * up x) */
			ref_rmsnorm(xb, xt, tensor(r, l, "ffn_norm.weight"), d, s->eps);
			ref_matvec(g, tensor(r, l, "ffn_gate.weight"), B(l, "ffn_gate.bias"), xb, d, s->ffn_dim);
			ref_matvec(u, tensor(r, l, "ffn_up.weight"), B(l, "ffn_up.bias"), xb, d, s->ffn_dim);
			for (int i = 0; i < s->ffn_dim; i++)
				g[i] = ref_act(r, g[i]) * u[i];
			ref_matvec(xb, tensor(r, l, "ffn_down.weight"), B(l, "ffn_down.bias"), g, s->ffn_dim, d);
			ref_post_norm(r, l, "post_ffw_norm.weight", xb);
			for (int i = 0; i < d; i++)
				xt[i] += xb[i];
		}
	}
	const float *head = tensor(r, -1, "output.weight");
	if (!head)
		head = emb;
	double cap = s->softcap > 0 && !(r->flags & REF_NO_SOFTCAP) ? s->softcap : 0;
	for (int t = 0; t < n; t++) {
		double *lt = logits + (size_t)t * r->n_vocab;
		ref_rmsnorm(xb, x + (size_t)t * d, tensor(r, -1, "output_norm.weight"), d, s->eps);
		ref_matvec(lt, head, NULL, xb, d, r->n_vocab);
		for (int i = 0; cap > 0 && i < r->n_vocab; i++)
			lt[i] = cap * tanh(lt[i] / cap);
	}
	free(x); free(xb); free(K); free(V); free(Q); free(att); free(g); free(u);
#undef B
}

static int ref_argmax(const double *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* ---- the engine ---- */

/* logits[n][n_vocab] for every position of ids[n], fed to llama_forward in
 * chunks of chunk tokens over a pool of block_tokens-token blocks (f32 K/V). */
static int engine_logits(llama_model *m, const int32_t *ids, int n, int chunk, int block_tokens, float *logits)
{
	const llama_hparams *hp = llama_hp(m);
	err e = {0};
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .head_dim = hp->head_dim, .block_tokens = block_tokens,
			     .n_blocks = (n + block_tokens - 1) / block_tokens};
	kv_pool *pool = kv_pool_new(&pp, &e);
	kv_seq seq;
	kv_seq_init(&seq);
	int rc = pool && !kv_seq_reserve(pool, &seq, n) ? 0 : -1;
	for (int at = 0; at < n && !rc; at += chunk) {
		int k = MIN(chunk, n - at);
		int32_t pos[N_SEQ], rows[N_SEQ], seq_of[N_SEQ], n_table = (int32_t)seq.n_blocks;
		int64_t slot[N_SEQ];
		for (int i = 0; i < k; i++) {
			pos[i] = at + i, rows[i] = i, seq_of[i] = 0;
			slot[i] = kv_seq_slot(pool, &seq, at + i);
		}
		const int32_t *table = seq.blocks;
		llama_batch b = {.n_tokens = k, .token = ids + at, .pos = pos, .slot = slot, .seq = seq_of,
				 .n_seqs = 1, .block_table = &table, .n_table = &n_table, .n_out = k,
				 .out_rows = rows};
		kv_view kv = kv_pool_view(pool);
		rc = llama_forward(m, &b, &kv, logits + (size_t)at * hp->n_vocab, &e);
		CHECK_(rc == 0, "%s", e.msg);
	}
	if (pool)
		kv_seq_release(pool, &seq);
	kv_pool_free(pool);
	return rc;
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* Worst row of |got - want| as a fraction of the row's range. */
static double worst_rel(const float *got, const double *want, int n_rows, int nv, double *abs_out)
{
	double worst = 0, worst_abs = 0;
	for (int t = 0; t < n_rows; t++) {
		const double *w = want + (size_t)t * nv;
		double lo = w[0], hi = w[0], d = 0;
		for (int i = 0; i < nv; i++) {
			lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
			d = fmax(d, fabs(got[(size_t)t * nv + i] - w[i]));
		}
		worst = fmax(worst, d / (hi - lo));
		worst_abs = fmax(worst_abs, d);
	}
	if (abs_out)
		*abs_out = worst_abs;
	return worst;
}

static const char *const ref_names[] = {"bias", "q/k norm", "rope style", "rope_freqs", "linear scaling",
					 "freq_base", "the window", "post norms", "GELU", "soft-cap",
					 "the windowed layers' base", "embedding scale"};

/* Every position's logits of ids[N_SEQ] on every kernel set, fed as one
 * prefill, as decode steps of one token, and in chunks of 5 over 4-token
 * blocks, against want. Returns the worst fraction of the logit range. */
static double check_logits(llama_model *m, const char *name, const int32_t *ids, const double *want,
			   double *worst_abs)
{
	int nv = llama_hp(m)->n_vocab;
	float *got = xmalloc((size_t)N_SEQ * nv * sizeof *got);
	const char *isas[] = {"scalar", "avx2", "avx512"};
	const int chunks[][2] = {{N_SEQ, 16}, {1, 16}, {5, 4}};
	double worst = 0;
	err e = {0};
	for (size_t k = 0; k < ARRAY_LEN(isas); k++) {
		if (kern_cpu_set_isa(isas[k], &e))
			continue;            /* a set this CPU lacks */
		for (size_t j = 0; j < ARRAY_LEN(chunks); j++) {
			if (engine_logits(m, ids, N_SEQ, chunks[j][0], chunks[j][1], got))
				continue;
			double a, rel = worst_rel(got, want, N_SEQ, nv, &a);
			CHECK_(rel < REL_TOL, "%s on %s, chunk %d: max |diff| %g = %g of the logit range",
			       name, isas[k], chunks[j][0], a, rel);
			worst = fmax(worst, rel), *worst_abs = fmax(*worst_abs, a);
		}
	}
	CHECK(kern_cpu_set_isa("auto", &e) == 0);
	free(got);
	return worst;
}

/* The reference without each of the case's features must miss the engine by
 * far. Returns the smallest miss (a fraction of the logit range). */
static double check_sensitive(llama_model *m, const arch_case *c, const ref *r, const int32_t *ids)
{
	int nv = r->n_vocab;
	float *got = xmalloc((size_t)N_SEQ * nv * sizeof *got);
	double *off = xmalloc((size_t)N_SEQ * nv * sizeof *off), least = INFINITY;
	engine_logits(m, ids, N_SEQ, N_SEQ, 16, got);
	for (int b = 0; b < (int)ARRAY_LEN(ref_names); b++) {
		if (!(c->breaks & 1 << b))
			continue;
		ref rb = *r;
		rb.flags = 1 << b;
		ref_forward(&rb, ids, N_SEQ, off);
		double rel = worst_rel(got, off, N_SEQ, nv, NULL);
		least = fmin(least, rel);
		CHECK_(rel > 100 * REL_TOL, "%s: leaving out %s changes the logits by only %g of the range",
		       c->name, ref_names[b], rel);
	}
	free(off);
	free(got);
	return least;
}

static void run_case(const arch_case *c)
{
	char path[128];
	snprintf(path, sizeof path, "build/models/arch-%s.gguf", c->name);
	err e = {0};
	CHECK_(rm_write(&c->spec, path, &e) == 0, "%s", e.msg);
	llama_model *m = llama_open(path, &(llama_params){.max_tokens = N_SEQ}, &e);
	CHECK_(m != NULL, "%s: %s", c->name, e.msg);
	if (!m)
		return;
	const rm_spec *s = &c->spec;
	ref r = {.s = s, .f = llama_file(m), .n_vocab = llama_hp(m)->n_vocab,
		 .n_rot = s->n_rot ? s->n_rot : s->head_dim, .q_dim = s->n_heads * s->head_dim,
		 .kv_dim = s->n_kv_heads * s->head_dim, .neox = c->neox, .gemma = !strcmp(s->arch, "gemma3")};
	int nv = r.n_vocab;
	/* the prompt, then the reference's greedy continuation */
	int32_t ids[N_SEQ];
	uint64_t st = s->seed;
	for (int i = 0; i < N_PROMPT; i++)
		ids[i] = (int32_t)(rm_next(&st) % (uint64_t)nv);
	double *want = xmalloc((size_t)N_SEQ * nv * sizeof *want);
	for (int n = N_PROMPT; n < N_SEQ; n++) {
		ref_forward(&r, ids, n, want);
		ids[n] = ref_argmax(want + (size_t)(n - 1) * nv, nv);
	}
	ref_forward(&r, ids, N_SEQ, want);
	double worst_abs = 0, worst = check_logits(m, c->name, ids, want, &worst_abs);
	/* the engine's own greedy generation continues the same way */
	int32_t gen[N_GEN + 1] = {0};
	gen_params gp = {.samp = samp_default_params(), .n_predict = N_GEN, .n_ctx = 64, .block_tokens = 4};
	gp.samp.temp = 0;
	gen_stats gs;
	CHECK_(gen_run(m, NULL, ids, N_PROMPT, &gp, collect, gen, &gs, &e) == 0, "%s", e.msg);
	CHECK_(gen[0] == N_GEN && !memcmp(gen + 1, ids + N_PROMPT, N_GEN * sizeof *ids),
	       "%s: greedy continuation differs from the reference", c->name);
	double least = check_sensitive(m, c, &r, ids);
	printf("arch %s: max |engine - reference| %.3g (%.3g of the logit range); a feature left out: >= %.3g\n",
	       c->name, worst_abs, worst, least);
	free(want);
	llama_free(m);
}

/* ---- load errors ---- */

/* A model of spec s is refused with want in the message. */
static void expect_bad(rm_spec s, const char *want)
{
	err e = {0};
	CHECK_(rm_write(&s, "build/models/arch-broken.gguf", &e) == 0, "%s", e.msg);
	llama_model *m = llama_open("build/models/arch-broken.gguf", NULL, &e);
	CHECK_(m == NULL && strstr(e.msg, want), "error '%s' lacks '%s'", m ? "(none)" : e.msg, want);
	llama_free(m);
}

static void expect_refused(rm_spec s, const char *omit, const char *want)
{
	err e = {0};
	s.omit = omit;
	CHECK_(rm_write(&s, "build/models/arch-broken.gguf", &e) == 0, "%s", e.msg);
	llama_model *m = llama_open("build/models/arch-broken.gguf", NULL, &e);
	CHECK_(m == NULL && strstr(e.msg, want), "without %s: error '%s' lacks '%s'", omit, e.msg, want);
	llama_free(m);
}

/* pagechat info names Gemma 3's keys. */
static void test_gemma3_info(void)
{
	run_result *r = xmalloc(sizeof *r);
	run_pagechat(r, "info build/models/arch-gemma3.gguf");
	const char *want[] = {"sliding window 8 tokens on 1 of 2 layers", "windowed layers' rope base 10000",
			      "attention scale 0.25", "logits soft-capped at 10", "embeddings x8", "GELU"};
	for (size_t i = 0; i < ARRAY_LEN(want); i++)
		CHECK_(r->status == 0 && strstr(r->out, want[i]), "info lacks '%s':\n%s%s", want[i], r->out, r->errout);
	run_pagechat(r, "info build/models/arch-gemma3-bools.gguf");
	CHECK_(strstr(r->out, "sliding window 5 tokens on 1 of 2 layers") && strstr(r->out, "attention scale 0.15"),
	       "%s", r->out);
	free(r);
}

/* Keys that contradict each other, or values no model has, are refused by
 * name. */
static void test_gemma3_refused(rm_spec s)
{
	s.swa_layers = NULL;
	rm_spec no_window = s, short_bools = s, value = s, scale = s, cap = s, base = s;
	no_window.swa_window = 0;
	no_window.swa_period = 3;
	expect_bad(no_window, "'gemma3.attention.sliding_window_pattern' is set but 'gemma3.attention.sliding_window'");
	short_bools.swa_period = 0;
	short_bools.swa_layers = (const bool[]){true, false, true};
	short_bools.swa_layers_n = 3;
	expect_bad(short_bools, "'gemma3.attention.sliding_window_pattern' has 3 items");
	value.value_length = 8;
	expect_bad(value, "'gemma3.attention.value_length' = 8 differs");
	scale.extra_key = "attention.scale", scale.extra_value = -1;
	expect_bad(scale, "'gemma3.attention.scale' = -1 must be a positive number");
	cap.extra_key = "final_logit_softcapping", cap.extra_value = 0;
	expect_bad(cap, "'gemma3.final_logit_softcapping' = 0");
	base.extra_key = "rope.freq_base_swa", base.extra_value = NAN;
	expect_bad(base, "'gemma3.rope.freq_base_swa' = nan");
}

#define SHAPE .vocab_from = "../shared/models/stories260K.gguf", .dim = 64, .n_layers = 2, .n_heads = 4, \
	.n_kv_heads = 2, .head_dim = 16, .ffn_dim = 128, .wtype = DT_F32

int main(void)
{
	mkdir("build/models", 0755);         /* the generated models go here */
	const arch_case cases[] = {
		{"qwen3", {.arch = "qwen3", SHAPE, .eps = 1e-6f, .rope_base = 1e6f, .tied = true, .seed = 11},
		 true, REF_NO_QK_NORM | REF_FLIP_ROPE | REF_BASE_10K},
		{"qwen2", {.arch = "qwen2", SHAPE, .eps = 1e-6f, .rope_base = 1e6f, .seed = 12},
		 true, REF_NO_BIAS | REF_FLIP_ROPE | REF_BASE_10K},
		{"llama3-freqs", {.arch = "llama", SHAPE, .eps = 1e-5f, .rope_base = 5e5f, .rope_freqs = true, .seed = 13},
		 false, REF_NO_FREQS | REF_FLIP_ROPE | REF_BASE_10K},
		/* no freq_base key: the default 10000 */
		{"llama-linear", {.arch = "llama", SHAPE, .eps = 1e-5f, .linear_scale = 4.0f, .seed = 14},
		 false, REF_NO_SCALE | REF_FLIP_ROPE},
		/* the older key alone, then both keys (the newer one counts) */
		{"llama-scale-old", {.arch = "llama", SHAPE, .eps = 1e-5f, .old_scale = 3.0f, .seed = 17},
		 false, REF_NO_SCALE},
		{"qwen2-scale-both", {.arch = "qwen2", SHAPE, .eps = 1e-6f, .rope_base = 1e6f, .linear_scale = 4.0f,
				      .old_scale = 2.0f, .seed = 18},
		 true, REF_NO_SCALE | REF_NO_BIAS},
		/* heads wider than dim / n_heads, half of each rotated */
		{"llama-partial", {.arch = "llama", .vocab_from = "../shared/models/stories260K.gguf", .dim = 64,
				   .n_layers = 2, .n_heads = 4, .n_kv_heads = 1, .head_dim = 32, .ffn_dim = 96,
				   .n_rot = 16, .eps = 1e-5f, .rope_base = 2e4f, .tied = true, .wtype = DT_F32,
				   .seed = 15},
		 false, REF_FLIP_ROPE | REF_BASE_10K},
		/* Llama's optional biases, any subset: layer 1 has no attn_k.bias */
		{"llama-bias", {.arch = "llama", SHAPE, .eps = 1e-5f, .rope_base = 1e4f, .qkv_bias = true,
				.more_bias = true, .omit = "blk.1.attn_k.bias", .seed = 16},
		 false, REF_NO_BIAS | REF_FLIP_ROPE},
		/* Gemma 3: a window of 8 (the prompt is 26) on layer 0 (period 2: layer 1
		 * attends to everything), whose base is the default 10000 against the
		 * global 1e6; a soft-cap of 10 */
		{"gemma3", {.arch = "gemma3", SHAPE, .eps = 1e-6f, .rope_base = 1e6f, .tied = true, .swa_window = 8,
			    .swa_period = 2, .softcap = 10.0f, .seed = 19},
		 true, REF_NO_QK_NORM | REF_FLIP_ROPE | REF_NO_WINDOW | REF_NO_POST_NORM | REF_SILU | REF_NO_SOFTCAP |
			       REF_ONE_BASE | REF_NO_EMBD_SCALE},
		/* the pattern as bools (layer 1 windowed, by 5), the windowed base and
		 * the attention scale from the file, linear scaling on the global layer */
		{"gemma3-bools", {.arch = "gemma3", SHAPE, .eps = 1e-6f, .rope_base = 1e6f, .swa_window = 5,
				  .swa_layers = (const bool[]){false, true}, .rope_base_swa = 5e4f, .attn_scale = 0.15f,
				  .linear_scale = 4.0f, .seed = 20},
		 true, REF_NO_WINDOW | REF_ONE_BASE | REF_NO_SCALE},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++)
		run_case(&cases[i]);
	test_gemma3_info();
	test_gemma3_refused(cases[ARRAY_LEN(cases) - 2].spec);

	expect_refused(cases[0].spec, "blk.1.attn_k_norm.weight", "blk.1.attn_k_norm.weight");
	expect_refused(cases[0].spec, "blk.0.attn_q_norm.weight", "blk.0.attn_q_norm.weight");
	expect_refused(cases[1].spec, "blk.0.attn_v.bias", "blk.0.attn_v.bias");
	return TEST_DONE();
}
