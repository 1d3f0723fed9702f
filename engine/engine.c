/* engine/engine.c: the engine thread, its command queue, event queue and
 * snapshot. Locks are held only to copy data in or out; no lock is held while
 * stepping the model, and no two locks are ever nested. */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_FORK, CMD_CLOSE, CMD_STOP };

typedef struct cmd {
	enum cmd_kind kind;
	core_request r;          /* SUBMIT: prompt, stop lists owned by the cmd */
	int64_t id, new_id;
	int index, conv;
	uint64_t seed;
	struct cmd *next;
} cmd;

typedef struct ev_node {
	eng_event ev;
	struct ev_node *next;
} ev_node;

struct eng {
	core *core;              /* owned; touched only by the engine thread after start */
	pthread_t thread;
	int wake[2];             /* pipe: [0] read end for the UI, [1] written by the engine */
	pthread_mutex_t cmd_mu;
	pthread_cond_t cmd_cv;
	cmd *cmd_head, *cmd_tail;/* owned; under cmd_mu */
	pthread_mutex_t ev_mu;
	ev_node *ev_head, *ev_tail; /* owned; under ev_mu */
	bool ev_signalled;       /* under ev_mu: a wake byte is unread */
	pthread_mutex_t snap_mu;
	eng_snapshot snap;       /* under snap_mu */
	/* engine-thread-only state */
	eng_snapshot work;       /* built each step, then copied into snap */
	double rate_t;           /* start of the rate window (0: none yet) */
	int64_t rate_prefill, rate_decode; /* the counters at its start */
	double last_publish;
};

/* ---- events (engine thread pushes, any thread pops) ---- */

static void push_event(void *ctx, const core_event *ce)
{
	eng *g = ctx;
	ev_node *n = xcalloc(1, sizeof *n);
	n->ev = (eng_event){
		.kind = ce->kind, .req = ce->req, .conv = ce->conv, .index = ce->index,
		.step = ce->step, .token = ce->token, .text = xstrndup(ce->text ? ce->text : "", ce->text_len),
		.text_len = ce->text_len, .finish = ce->finish, .m = ce->m,
	};
	pthread_mutex_lock(&g->ev_mu);
	if (g->ev_tail)
		g->ev_tail->next = n;
	else
		g->ev_head = n;
	g->ev_tail = n;
	pthread_mutex_unlock(&g->ev_mu);
}

/* Writes the wake byte if events wait and none is pending. */
static void wake_ui(eng *g)
{
	pthread_mutex_lock(&g->ev_mu);
	bool need = g->ev_head && !g->ev_signalled;
	if (need)
		g->ev_signalled = true;
	pthread_mutex_unlock(&g->ev_mu);
	if (need) {
		ssize_t w;
		do
			w = write(g->wake[1], "e", 1);
		while (w < 0 && errno == EINTR);
	}
}

bool eng_poll(eng *g, eng_event *ev)
{
	pthread_mutex_lock(&g->ev_mu);
	ev_node *n = g->ev_head;
	if (n) {
		g->ev_head = n->next;
		if (!g->ev_head)
			g->ev_tail = NULL;
	} else {
		/* queue drained: consume wake bytes so poll() sleeps again (a byte
		 * written just after this costs one spurious wake-up, never a lost one) */
		char buf[16];
		while (read(g->wake[0], buf, sizeof buf) > 0)
			;
		g->ev_signalled = false;
	}
	pthread_mutex_unlock(&g->ev_mu);
	if (!n)
		return false;
	*ev = n->ev;
	free(n);
	return true;
}

void eng_event_clear(eng_event *ev)
{
	free(ev->text);
	ev->text = NULL;
}

int eng_wake_fd(const eng *g)
{
	return g->wake[0];
}

/* ---- commands (any thread pushes, engine thread pops) ---- */

static void push_cmd(eng *g, cmd *c)
{
	pthread_mutex_lock(&g->cmd_mu);
	if (g->cmd_tail)
		g->cmd_tail->next = c;
	else
		g->cmd_head = c;
	g->cmd_tail = c;
	pthread_cond_signal(&g->cmd_cv);
	pthread_mutex_unlock(&g->cmd_mu);
}

void eng_submit(eng *g, const core_request *r)
{
	cmd *c = xcalloc(1, sizeof *c);
	c->kind = CMD_SUBMIT;
	c->r = *r;
	int32_t *p = xmalloc((size_t)MAX(1, r->n_prompt) * sizeof *p);
	memcpy(p, r->prompt, (size_t)MAX(0, r->n_prompt) * sizeof *p);
	c->r.prompt = p;
	c->r.stop_ids = NULL; /* the command owns its copies only */
	c->r.stop_strs = NULL;
	c->r.n_stop_ids = MAX(0, r->n_stop_ids);
	c->r.n_stop_strs = MAX(0, r->n_stop_strs);
	if (r->n_stop_ids > 0) {
		int32_t *s = xmalloc((size_t)r->n_stop_ids * sizeof *s);
		memcpy(s, r->stop_ids, (size_t)r->n_stop_ids * sizeof *s);
		c->r.stop_ids = s;
	}
	if (r->shift.n_old > 0) {
		int32_t *o = xmalloc((size_t)r->shift.n_old * sizeof *o);
		memcpy(o, r->shift.old, (size_t)r->shift.n_old * sizeof *o);
		c->r.shift.old = o;
	} else {
		c->r.shift = (core_shift){0};
	}
	if (r->n_stop_strs > 0) {
		char **s = xcalloc((size_t)r->n_stop_strs, sizeof *s);
		for (int i = 0; i < r->n_stop_strs; i++)
			s[i] = xstrdup(r->stop_strs[i] ? r->stop_strs[i] : "");
		c->r.stop_strs = (const char *const *)s;
	}
	push_cmd(g, c);
}

static void cmd_free(cmd *c)
{
	if (c->kind == CMD_SUBMIT) {
		free((void *)c->r.prompt);
		free((void *)c->r.stop_ids);
		free((void *)c->r.shift.old);
		for (int i = 0; i < c->r.n_stop_strs; i++)
			free((void *)c->r.stop_strs[i]);
		free((void *)c->r.stop_strs);
	}
	free(c);
}

void eng_cancel(eng *g, int64_t id)
{
	cmd *c = xcalloc(1, sizeof *c);
	c->kind = CMD_CANCEL;
	c->id = id;
	push_cmd(g, c);
}

void eng_fork(eng *g, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed)
{
	cmd *c = xcalloc(1, sizeof *c);
	*c = (cmd){.kind = CMD_FORK, .id = id, .index = index, .new_id = new_id, .conv = new_conv,
		   .seed = seed};
	push_cmd(g, c);
}

void eng_close_conv(eng *g, int conv)
{
	cmd *c = xcalloc(1, sizeof *c);
	c->kind = CMD_CLOSE;
	c->conv = conv;
	push_cmd(g, c);
}

/* ---- snapshot ---- */

static void copy_snapshot(eng_snapshot *dst, const eng_snapshot *src)
{
	core_block_info *map = dst->map;
	int64_t cap = dst->map_cap;
	if (cap < src->n_blocks) {
		cap = src->n_blocks;
		map = xrealloc(map, (size_t)cap * sizeof *map);
	}
	*dst = *src;
	dst->map = map;
	dst->map_cap = cap;
	memcpy(map, src->map, (size_t)src->n_blocks * sizeof *map);
}

/* Builds the snapshot in the engine's own buffer, then copies it under the
 * lock; at most every 50 ms while busy, always when idle. */
static void publish(eng *g, bool force)
{
	double now = now_s();
	if (!force && now - g->last_publish < 0.05)
		return;
	g->last_publish = now;
	eng_snapshot *w = &g->work;
	core_get_stats(g->core, &w->st);
	/* rates over wall-time windows of at least half a second (a short window
	 * at the end of a burst would inflate them) */
	double dt = now - g->rate_t;
	if (g->rate_t > 0 && dt >= 0.5) {
		w->prefill_tps = (double)(w->st.prefill_tokens - g->rate_prefill) / dt;
		w->decode_tps = (double)(w->st.generated_tokens - g->rate_decode) / dt;
	}
	if (g->rate_t == 0 || dt >= 0.5) {
		g->rate_t = now;
		g->rate_prefill = w->st.prefill_tokens;
		g->rate_decode = w->st.generated_tokens;
	}
	core_block_map(g->core, w->map);
	w->seq++;
	pthread_mutex_lock(&g->snap_mu);
	copy_snapshot(&g->snap, w);
	pthread_mutex_unlock(&g->snap_mu);
}

bool eng_snapshot_get(eng *g, eng_snapshot *out)
{
	bool copied = false;
	pthread_mutex_lock(&g->snap_mu);
	if (g->snap.seq > out->seq) {
		copy_snapshot(out, &g->snap);
		copied = true;
	}
	pthread_mutex_unlock(&g->snap_mu);
	return copied;
}

void eng_snapshot_deinit(eng_snapshot *s)
{
	free(s->map);
	memset(s, 0, sizeof *s);
}

/* ---- the thread ---- */

/* Applies c; returns false for STOP. */
static bool apply(eng *g, cmd *c)
{
	err e;
	switch (c->kind) {
	case CMD_SUBMIT:
		core_submit(g->core, &c->r, &e); /* a rejection arrives as an event */
		break;
	case CMD_CANCEL:
		core_cancel(g->core, c->id);
		break;
	case CMD_FORK:
		if (core_fork(g->core, c->id, c->index, c->new_id, c->conv, c->seed)) {
			const char *msg = "nothing to fork: that request has finished";
			push_event(g, &(core_event){.kind = CORE_EV_FINISH, .req = c->new_id, .conv = c->conv,
					       .token = -1, .text = msg, .text_len = strlen(msg),
					       .finish = FIN_ERROR});
		}
		break;
	case CMD_CLOSE:
		core_close_conv(g->core, c->conv);
		break;
	case CMD_STOP:
		return false;
	}
	return true;
}

/* Idle with rates still to bring down (or a window still open): the engine
 * wakes every half second to publish them until they are 0. */
static bool rates_pending(const eng *g)
{
	return g->work.prefill_tps > 0 || g->work.decode_tps > 0 ||
	       g->work.st.prefill_tokens != g->rate_prefill || g->work.st.generated_tokens != g->rate_decode;
}

/* Waits for a command while idle; false when it woke for the rates only. */
static bool wait_idle(eng *g)
{
	bool woken = true;
	pthread_mutex_lock(&g->cmd_mu);
	while (!g->cmd_head && core_idle(g->core) && woken) {
		if (!rates_pending(g)) {
			pthread_cond_wait(&g->cmd_cv, &g->cmd_mu);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		woken = pthread_cond_timedwait(&g->cmd_cv, &g->cmd_mu, &ts) != ETIMEDOUT;
	}
	pthread_mutex_unlock(&g->cmd_mu);
	return woken;
}

static void *engine_main(void *arg)
{
	eng *g = arg;
	bool running = true;
	while (running) {
		if (!wait_idle(g)) {
			publish(g, true);
			wake_ui(g);
			continue;
		}
		pthread_mutex_lock(&g->cmd_mu);
		cmd *list = g->cmd_head;
		g->cmd_head = g->cmd_tail = NULL;
		pthread_mutex_unlock(&g->cmd_mu);
		while (list) {
			cmd *next = list->next;
			running = running && apply(g, list);
			cmd_free(list);
			list = next;
		}
		if (!running)
			break;
		err e;
		if (!core_idle(g->core))
			core_step(g->core, &e); /* a model failure finishes requests with events */
		publish(g, core_idle(g->core));
		wake_ui(g);
	}
	return NULL;
}

eng *eng_start(const core_params *p, err *e)
{
	eng *g = xcalloc(1, sizeof *g);
	g->core = core_new(p, push_event, g, e);
	if (!g->core) {
		free(g);
		return NULL;
	}
	if (pipe(g->wake)) {
		err_set(e, "cannot create the engine's wake-up pipe: %s", strerror(errno));
		core_free(g->core);
		free(g);
		return NULL;
	}
	for (int i = 0; i < 2; i++)
		fcntl(g->wake[i], F_SETFL, fcntl(g->wake[i], F_GETFL) | O_NONBLOCK);
	pthread_mutex_init(&g->cmd_mu, NULL);
	pthread_cond_init(&g->cmd_cv, NULL);
	pthread_mutex_init(&g->ev_mu, NULL);
	pthread_mutex_init(&g->snap_mu, NULL);
	g->work.n_blocks = core_n_blocks(g->core);
	g->work.block_tokens = p->block_tokens > 0 ? p->block_tokens : 16;
	g->work.map = xcalloc((size_t)g->work.n_blocks, sizeof *g->work.map);
	g->work.map_cap = g->work.n_blocks;
	publish(g, true);
	if (pthread_create(&g->thread, NULL, engine_main, g)) {
		err_set(e, "cannot start the engine thread");
		g->thread = pthread_self();
		eng_stop(g);
		return NULL;
	}
	return g;
}

void eng_stop(eng *g)
{
	if (!g)
		return;
	if (!pthread_equal(g->thread, pthread_self())) {
		cmd *c = xcalloc(1, sizeof *c);
		c->kind = CMD_STOP;
		push_cmd(g, c);
		pthread_join(g->thread, NULL);
	}
	while (g->cmd_head) {
		cmd *n = g->cmd_head->next;
		cmd_free(g->cmd_head);
		g->cmd_head = n;
	}
	eng_event ev;
	while (eng_poll(g, &ev))
		eng_event_clear(&ev);
	core_free(g->core);
	close(g->wake[0]);
	close(g->wake[1]);
	pthread_mutex_destroy(&g->cmd_mu);
	pthread_cond_destroy(&g->cmd_cv);
	pthread_mutex_destroy(&g->ev_mu);
	pthread_mutex_destroy(&g->snap_mu);
	eng_snapshot_deinit(&g->work);
	eng_snapshot_deinit(&g->snap);
	free(g);
}
