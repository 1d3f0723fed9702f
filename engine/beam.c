/* engine/beam.c: beam search on shared KV blocks.
 *
 * A beam request starts as one sequence (the prompt, prefilled once like any
 * other). Whenever a live beam's last position has logits, its best next
 * tokens are kept as candidates and it waits (it has nothing to compute)
 * until every live beam of the request has them; then one round of
 * selection (beam.h's rules) makes the next W beams: a beam chosen by one
 * child keeps its sequence, a beam chosen by several is cloned (the clones
 * share its blocks; the scheduler copies the shared partial block on the
 * first write), a beam chosen by none is freed at once. Beams therefore
 * never need to run in the same step: a preempted beam recomputes and the
 * round waits for it. The request ends at max_tokens, at the context limit,
 * or once W hypotheses are finished and no live beam scores above the worst
 * of them; then the W best by lp / length^alpha are emitted as completions
 * 0..W-1 (their tokens, then FINISH with the log-probability). */
#include "engine/beam.h"

#include "engine/core_int.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ranking (pure) ---- */

static bool better(const beam_cand *a, const beam_cand *b)
{
	if (a->lp != b->lp)
		return a->lp > b->lp || isnan(b->lp);
	if (a->parent != b->parent)
		return a->parent < b->parent;
	return a->token < b->token;
}

int beam_top(const float *logits, int n_vocab, double base, int parent, int k, beam_cand *out)
{
	double mx = -INFINITY;
	for (int i = 0; i < n_vocab; i++)
		if (logits[i] > mx)
			mx = logits[i];
	double sum = 0;
	for (int i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	double lse = mx + log(sum);
	int n = 0;
	k = k < n_vocab ? k : n_vocab;
	for (int32_t i = 0; i < n_vocab; i++) {
		beam_cand c = {base + ((double)logits[i] - lse), i, parent};
		if (n == k && !better(&c, &out[n - 1]))
			continue;
		int j = n < k ? n++ : n - 1;
		for (; j > 0 && better(&c, &out[j - 1]); j--)
			out[j] = out[j - 1];
		out[j] = c;
	}
	return n;
}

static int cmp_cand(const void *pa, const void *pb)
{
	const beam_cand *a = pa, *b = pb;
	return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

void beam_rank(beam_cand *c, int n)
{
	qsort(c, (size_t)n, sizeof *c, cmp_cand);
}

double beam_score(double lp, int len, float alpha)
{
	return alpha == 0 ? lp : lp / pow((double)(len > 0 ? len : 1), alpha);
}

/* ---- the request's shared state ---- */

typedef struct beam_hyp {
	int32_t *ids;            /* owned; generated tokens, the final EOS excluded */
	int n_ids, len;          /* len counts the EOS of a finished hypothesis */
	double lp;
	enum core_finish finish;
} beam_hyp;

struct beam_group {
	int refs;                /* member sequences */
	int id;                  /* the scheduler's group number (> 0) */
	int width;
	float alpha;
	beam_hyp fin[BEAM_MAX_WIDTH + 1]; /* finished hypotheses, best first */
	int n_fin;
	bool ready;              /* a member got its candidates this step */
};

void beam_start(core *c, seq *s, int width, float alpha)
{
	beam_group *g = xcalloc(1, sizeof *g);
	g->id = ++c->n_groups;
	g->width = width;
	g->alpha = alpha;
	g->refs = 1;
	s->beam.g = g;
	s->beam.rank = 0;
	s->beam.cand = xmalloc((size_t)BEAM_TOP(width) * sizeof *s->beam.cand);
}

int beam_group_of(const seq *s)
{
	return s->beam.g ? s->beam.g->id : 0;
}

int beam_width_of(const seq *s)
{
	return s->beam.g ? s->beam.g->width : 0;
}

static void hyp_free(beam_hyp *h)
{
	free(h->ids);
	h->ids = NULL;
}

void beam_preempted(seq *s)
{
	s->beam.ready = false;
}

void beam_release(seq *s)
{
	beam_group *g = s->beam.g;
	free(s->beam.cand);
	s->beam.cand = NULL;
	s->beam.g = NULL;
	if (!g || --g->refs > 0)
		return;
	for (int i = 0; i < g->n_fin; i++)
		hyp_free(&g->fin[i]);
	free(g);
}

/* A sequence of the same group for a new beam (shares s's blocks). */
static seq *beam_clone(core *c, seq *s)
{
	seq *k = seq_clone(c, s, s->req, s->conv, 0, 0);
	k->beam.g = s->beam.g;
	k->beam.g->refs++;
	k->beam.cand = xmalloc((size_t)BEAM_TOP(s->beam.g->width) * sizeof *k->beam.cand);
	k->beam.lp = s->beam.lp;
	return k;
}

void beam_on_logits(core *c, seq *s, const float *logits)
{
	seq_beam *b = &s->beam;
	b->n_cand = beam_top(logits, c->n_vocab, b->lp, b->rank, BEAM_TOP(b->g->width), b->cand);
	b->ready = true;
	b->g->ready = true;
}

/* ---- selection ---- */

/* The group's live beams (running or waiting), by rank; their count. */
static int members(core *c, beam_group *g, seq **out)
{
	int n = 0;
	for (int l = 0; l < 2; l++) {
		const seq_list *list = l ? &c->waiting : &c->running;
		for (int i = 0; i < list->n; i++)
			if (list->v[i]->beam.g == g && n < BEAM_MAX_WIDTH)
				out[n++] = list->v[i];
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j]->beam.rank < out[j - 1]->beam.rank; j--) {
			seq *t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Keeps hypothesis h among the best width finished ones (h's ids owned). */
static void add_finished(beam_group *g, beam_hyp h)
{
	double sc = beam_score(h.lp, h.len, g->alpha);
	int at = g->n_fin;
	while (at > 0 && beam_score(g->fin[at - 1].lp, g->fin[at - 1].len, g->alpha) < sc)
		at--;
	memmove(g->fin + at + 1, g->fin + at, (size_t)(g->n_fin - at) * sizeof *g->fin);
	g->fin[at] = h;
	if (++g->n_fin > g->width)
		hyp_free(&g->fin[--g->n_fin]);
}

static beam_hyp hyp_of(const seq *s, double lp, int extra, enum core_finish f)
{
	beam_hyp h = {.n_ids = s->n_tokens - s->n_prompt, .lp = lp, .finish = f};
	h.len = h.n_ids + extra;
	h.ids = xmalloc((size_t)MAX(1, h.n_ids) * sizeof *h.ids);
	memcpy(h.ids, s->tokens + s->n_prompt, (size_t)h.n_ids * sizeof *h.ids);
	return h;
}

/* Emits hypothesis h as completion r: its tokens' text, then FINISH. */
static void emit_hyp(core *c, const seq *s, int r, const beam_hyp *h)
{
	tok_decoder d;
	tok_decoder_init(&d, false);
	char piece[512];
	for (int i = 0; i < h->n_ids; i++) {
		int n = c->tok ? tok_decode(c->tok, &d, h->ids[i], piece, sizeof piece) : 0;
		core_event ev = {.kind = CORE_EV_TOKEN, .req = s->req, .conv = s->conv, .index = r,
				 .step = c->st.steps, .token = h->ids[i], .text = piece,
				 .text_len = n > 0 ? (size_t)n : 0};
		if (c->emit)
			c->emit(c->emit_ctx, &ev);
	}
	core_event ev = {.kind = CORE_EV_FINISH, .req = s->req, .conv = s->conv, .index = r,
			 .step = c->st.steps, .token = -1, .text = "", .finish = h->finish, .m = seq_metrics(s)};
	ev.m.n_gen = h->len;
	ev.m.logprob = h->lp;
	c->st.finished++;
	c->st.finished_by[h->finish]++;
	c->st.generated_tokens += h->n_ids;
	if (c->emit)
		c->emit(c->emit_ctx, &ev);
}

/* Ends beam s (out of its list already): every part of it released, then
 * the sequence freed. */
static void end_beam(core *c, seq *s)
{
	beam_release(s);
	spec_release(c, s);
	tier_swap_release(c, s);
	seq_free(c, s);
}

static void free_members(core *c, seq **mem, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		int k = seqs_index(&c->running, mem[i]);
		if (k >= 0)
			seqs_remove(&c->running, k);
		else if ((k = seqs_index(&c->waiting, mem[i])) >= 0)
			seqs_remove(&c->waiting, k);
		end_beam(c, mem[i]);
	}
}

/* Ends the request: the best width of the finished and the live beams,
 * emitted as completions 0..width-1 (ref gives the request's figures); the
 * live beams are freed. */
static void finalize(core *c, beam_group *g, const seq *ref, seq **live, int n_live, enum core_finish live_f)
{
	beam_hyp all[2 * BEAM_MAX_WIDTH + 1];
	double sc[2 * BEAM_MAX_WIDTH + 1];
	int n = 0;
	for (int i = 0; i < g->n_fin; i++)
		all[n++] = g->fin[i];
	g->n_fin = 0;
	for (int i = 0; i < n_live; i++)
		all[n++] = hyp_of(live[i], live[i]->beam.lp, 0, live_f);
	for (int i = 0; i < n; i++)
		sc[i] = beam_score(all[i].lp, all[i].len, g->alpha);
	/* stable: at equal scores finished ones (added first) stay ahead */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && sc[j] > sc[j - 1]; j--) {
			beam_hyp t = all[j];
			all[j] = all[j - 1];
			all[j - 1] = t;
			double u = sc[j];
			sc[j] = sc[j - 1];
			sc[j - 1] = u;
		}
	for (int r = 0; r < g->width; r++) {
		beam_hyp none = {.finish = FIN_ERROR};
		emit_hyp(c, ref, r, r < n ? &all[r] : &none);
	}
	for (int i = 0; i < n; i++)
		hyp_free(&all[i]);
	free_members(c, live, n_live);
}

/* Applies the chosen candidates: children of each beam in rank order. */
static int make_children(core *c, seq **mem, int n_mem, const beam_cand *chosen, int n_chosen, seq **kids)
{
	for (int m = 0; m < n_mem; m++) {
		seq *s = mem[m];
		int at = seqs_index(&c->running, s), first = -1;
		for (int j = 0; j < n_chosen; j++) {
			if (chosen[j].parent != s->beam.rank)
				continue;
			if (first < 0) {
				first = j;
				continue;
			}
			kids[j] = beam_clone(c, s);
			kids[j]->state = SEQ_RUNNING;
			seqs_insert(&c->running, ++at, kids[j]);
		}
		if (first >= 0) {
			kids[first] = s;
		} else {
			seqs_remove(&c->running, seqs_index(&c->running, s));
			end_beam(c, s);  /* pruned: its blocks go back at once */
		}
	}
	double now = now_s();
	for (int j = 0; j < n_chosen; j++) {
		seq *k = kids[j];
		seq_push_token(k, chosen[j].token);
		k->n_gen++;
		k->beam.lp = chosen[j].lp;
		k->beam.rank = j;
		k->beam.ready = false;
		if (k->t_first == 0)
			k->t_first = now;
		k->t_last = now;
	}
	return n_chosen;
}

static void select_round(core *c, beam_group *g, seq **mem, int n_mem)
{
	beam_cand all[BEAM_MAX_WIDTH * BEAM_TOP(BEAM_MAX_WIDTH)], chosen[BEAM_MAX_WIDTH];
	int n = 0, n_chosen = 0;
	for (int m = 0; m < n_mem; m++) {
		assert(mem[m]->beam.rank == m);
		for (int i = 0; i < mem[m]->beam.n_cand; i++)
			all[n++] = mem[m]->beam.cand[i];
	}
	beam_rank(all, n);
	for (int i = 0; i < n && n_chosen < g->width; i++) {
		seq *p = mem[all[i].parent];
		if (seq_is_stop(c, p, all[i].token))
			add_finished(g, hyp_of(p, all[i].lp, 1, FIN_STOP));
		else
			chosen[n_chosen++] = all[i];
	}
	if (n_chosen == 0) {
		finalize(c, g, mem[0], NULL, 0, FIN_STOP);
		free_members(c, mem, n_mem);
		return;
	}
	seq *kids[BEAM_MAX_WIDTH];
	make_children(c, mem, n_mem, chosen, n_chosen, kids);
	seq *s = kids[0];
	enum core_finish f = FIN_STOP;
	bool done = false;
	if (s->max_tokens > 0 && s->n_gen >= s->max_tokens)
		f = FIN_LENGTH, done = true;
	else if (s->n_tokens >= c->n_ctx)
		f = FIN_CONTEXT, done = true;
	else if (g->n_fin >= g->width)
		done = beam_score(s->beam.lp, s->n_gen, g->alpha) <=
		       beam_score(g->fin[g->n_fin - 1].lp, g->fin[g->n_fin - 1].len, g->alpha);
	if (done)
		finalize(c, g, s, kids, n_chosen, f);
}

void beam_select_ready(core *c)
{
	for (int i = 0; i < c->running.n; i++) {
		beam_group *g = c->running.v[i]->beam.g;
		if (!g || !g->ready)
			continue;
		g->ready = false;
		seq *mem[BEAM_MAX_WIDTH];
		int n = members(c, g, mem);
		bool all = true;
		for (int m = 0; m < n; m++)
			all &= mem[m]->beam.ready;
		if (!all)
			continue;
		select_round(c, g, mem, n);
		i = -1; /* the list changed: start over (rounds done clear g->ready) */
	}
}

void beam_abort(core *c, seq *s, enum core_finish f, const char *msg)
{
	beam_group *g = s->beam.g;
	seq *mem[BEAM_MAX_WIDTH];
	int n = members(c, g, mem);
	for (int r = 0; r < g->width; r++) {
		core_event ev = {.kind = CORE_EV_FINISH, .req = s->req, .conv = s->conv, .index = r,
				 .step = c->st.steps, .token = -1, .text = msg ? msg : "",
				 .text_len = msg ? strlen(msg) : 0, .finish = f, .m = seq_metrics(s)};
		c->st.finished++;
		c->st.finished_by[f]++;
		if (c->emit)
			c->emit(c->emit_ctx, &ev);
	}
	free_members(c, mem, n);
}
