/* kernels/cpu/pool.h: a persistent pool of worker threads for the CPU
 * kernels.
 *
 * tpool_run(p, n, fn, ctx) calls fn(ctx, i, n) once for every chunk i in
 * 0..n-1 and returns when all have returned. Chunks are claimed one at a time
 * by whichever thread is free, the caller included, so a worker the OS has
 * not scheduled yet never holds the others up (what fn computes must not
 * depend on which thread runs a chunk). Workers are created once by
 * tpool_new and wait between jobs, first spinning briefly (the jobs of one
 * forward pass come microseconds apart), then asleep on a condition
 * variable, so an idle pool costs no CPU. One thread at a time may call
 * tpool_run on a pool (the engine thread). */
#ifndef PAGECHAT_CPU_POOL_H
#define PAGECHAT_CPU_POOL_H

#include "base/base.h"

typedef struct tpool tpool;
typedef void (*tpool_fn)(void *ctx, int i, int n);

/* A pool of n threads in all (n - 1 workers plus the caller); n >= 1.
 * Returns NULL with e filled when a thread cannot be created. */
tpool *tpool_new(int n, err *e);
/* Stops and joins the workers; NULL is a no-op. No job may be running. */
void tpool_free(tpool *p);
int tpool_size(const tpool *p);
/* Runs fn(ctx, i, n_chunks) for i in 0..n_chunks-1 (1 <= n_chunks <=
 * TPOOL_MAX_CHUNKS) across the pool; returns when all are done. */
#define TPOOL_MAX_CHUNKS 65535
void tpool_run(tpool *p, int n_chunks, tpool_fn fn, void *ctx);

/* Processors this process may run on (at least 1). */
int tpool_n_cpus(void);

#endif
