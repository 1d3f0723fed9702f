/* kernels/cpu/pool.c: the worker pool.
 *
 * One 64-bit word describes the current job: generation (32 bits), chunk
 * count (16) and the next unclaimed chunk (16). A thread claims chunk i by a
 * compare-and-swap of that word, so a claim made with a stale view of a
 * finished job fails: a job finishes only after all its chunks are claimed,
 * which changed the word. fn and ctx are written before the word is
 * published, and a new job is published only after every chunk of the last
 * one is done, so a successful claim always pairs with its own job's fn/ctx.
 *
 * Waking: a worker that has spun for SPIN_S without a new generation counts
 * itself in `sleepers` under the mutex and re-checks the word before
 * waiting; the caller publishes and then, only if someone sleeps, broadcasts
 * under the mutex. Both sides use sequentially consistent atomics, so either
 * the caller sees the sleeper or the sleeper sees the new job. */
#include "kernels/cpu/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_S 0.002     /* how long an idle worker spins before sleeping */
#define YIELD_S 2e-5     /* how long the caller spins on others' chunks before yielding */

struct tpool {
	int n;
	pthread_t *threads;            /* [n - 1] workers */
	_Atomic(tpool_fn) fn;          /* the job; written before the word is published */
	_Atomic(void *) ctx;
	atomic_uint_fast64_t word;     /* generation << 32 | n_chunks << 16 | next chunk */
	atomic_int done;               /* chunks of the current job finished */
	uint32_t gen;                  /* caller's copy of the current generation */
	atomic_int sleepers;
	atomic_bool quit;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

typedef struct worker_arg {
	tpool *p;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static inline uint32_t word_gen(uint64_t w) { return (uint32_t)(w >> 32); }

/* Claims and runs chunks of generation gen until none is left. */
static void work(tpool *p, uint32_t gen)
{
	uint64_t w = atomic_load(&p->word);
	for (;;) {
		int n = (int)((w >> 16) & 0xffff), i = (int)(w & 0xffff);
		if (word_gen(w) != gen || i >= n)
			return;
		tpool_fn fn = atomic_load(&p->fn);
		void *ctx = atomic_load(&p->ctx);
		if (!atomic_compare_exchange_weak(&p->word, &w, w + 1))
			continue; /* w now holds the current word */
		fn(ctx, i, n);
		atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
		w = atomic_load(&p->word);
	}
}

/* Waits for a generation other than seen and returns it: spinning at
 * first, then yielding the processor between looks (so a thread of another
 * process, or the one this pool waits for, can run), then asleep. */
static uint32_t wait_job(tpool *p, uint32_t seen)
{
	double t0 = 0, t = 0;
	for (unsigned i = 0;; i++) {
		uint32_t g = word_gen(atomic_load(&p->word));
		if (g != seen)
			return g;
		cpu_relax();
		if (t - t0 > YIELD_S)
			sched_yield();
		if ((i & 63) != 63)
			continue;
		t = now_s();
		if (t0 == 0)
			t0 = t;
		else if (t - t0 > SPIN_S)
			break;
	}
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add(&p->sleepers, 1);
	uint32_t g;
	while ((g = word_gen(atomic_load(&p->word))) == seen)
		pthread_cond_wait(&p->cv, &p->mu);
	atomic_fetch_sub(&p->sleepers, 1);
	pthread_mutex_unlock(&p->mu);
	return g;
}

static void *worker(void *arg)
{
	tpool *p = ((worker_arg *)arg)->p;
	free(arg);
	uint32_t seen = 0;
	for (;;) {
		seen = wait_job(p, seen);
		if (atomic_load(&p->quit))
			break;
		work(p, seen);
	}
	return NULL;
}

int tpool_n_cpus(void)
{
	static atomic_int cached;
	int n = atomic_load(&cached);
	if (n > 0)
		return n;
#ifdef CPU_COUNT
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		n = CPU_COUNT(&set);
#endif
	if (n <= 0)
		n = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	atomic_store(&cached, n);
	return n;
}

/* Publishes a job of n chunks and wakes sleepers. */
static void publish(tpool *p, tpool_fn fn, void *ctx, int n)
{
	atomic_store(&p->fn, fn);
	atomic_store(&p->ctx, ctx);
	atomic_store(&p->done, 0);
	p->gen++;
	atomic_store(&p->word, (uint64_t)p->gen << 32 | (uint64_t)n << 16);
	if (atomic_load(&p->sleepers) > 0) {
		pthread_mutex_lock(&p->mu);
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
}

tpool *tpool_new(int n, err *e)
{
	tpool *p = xcalloc(1, sizeof *p);
	p->n = n < 1 ? 1 : n;
	atomic_init(&p->fn, NULL);
	atomic_init(&p->ctx, NULL);
	atomic_init(&p->word, 0);
	atomic_init(&p->done, 0);
	atomic_init(&p->sleepers, 0);
	atomic_init(&p->quit, false);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->threads = xcalloc((size_t)p->n, sizeof *p->threads);
	for (int i = 1; i < p->n; i++) {
		worker_arg *wa = xmalloc(sizeof *wa);
		wa->p = p;
		int rc = pthread_create(&p->threads[i - 1], NULL, worker, wa);
		if (rc) {
			free(wa);
			err_set(e, "cannot start worker thread %d of %d: %s", i, p->n - 1, strerror(rc));
			p->n = i; /* join the ones that started */
			tpool_free(p);
			return NULL;
		}
	}
	return p;
}

void tpool_free(tpool *p)
{
	if (!p)
		return;
	atomic_store(&p->quit, true);
	publish(p, NULL, NULL, 0);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->threads[i - 1], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->threads);
	free(p);
}

int tpool_size(const tpool *p)
{
	return p->n;
}

void tpool_run(tpool *p, int n_chunks, tpool_fn fn, void *ctx)
{
	n_chunks = MAX(1, MIN(n_chunks, TPOOL_MAX_CHUNKS));
	if (p->n == 1 || n_chunks == 1) {
		for (int i = 0; i < n_chunks; i++)
			fn(ctx, i, n_chunks);
		return;
	}
	publish(p, fn, ctx, n_chunks);
	work(p, p->gen);
	/* the rest are being run by workers that claimed them */
	double t0 = 0;
	for (unsigned i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks; i++) {
		cpu_relax();
		if ((i & 63) != 63)
			continue;
		double t = now_s();
		if (t0 == 0)
			t0 = t;
		else if (t - t0 > YIELD_S)
			sched_yield();
	}
}
