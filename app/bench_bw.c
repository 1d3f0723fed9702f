/* app/bench_bw.c: the memory bandwidth `pagechat bench` measures decode speed
 * against (app/bench.h): many threads streaming over a buffer far larger
 * than the caches, with the widest loads the CPU has, or copies between two
 * device buffers. */
#include "app/bench.h"

#include "kernels/kern.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

typedef struct bw_part {
	const uint8_t *p;
	size_t n;
	uint64_t sink;
	pthread_t th;
} bw_part;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n)
{
	__m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
	for (size_t i = 0; i + 256 <= n; i += 256) {
		a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
		b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
		c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
		d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
	}
	/* summed as unsigned lanes: _mm512_reduce_add_epi64 adds signed 64-bit
	 * values, which a long buffer overflows (undefined behaviour) */
	uint64_t lane[8];
	_mm512_storeu_si512(lane, _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
	uint64_t sum = 0;
	for (int i = 0; i < 8; i++)
		sum += lane[i];
	return sum;
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
	__m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
		b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
		c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
		d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
	return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 2);
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n)
{
	const uint64_t *q = (const uint64_t *)(const void *)p;
	uint64_t s[8] = {0};
	for (size_t i = 0; i + 8 <= n / 8; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += q[i + j];
	return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void *bw_thread(void *arg)
{
	bw_part *b = arg;
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx512f"))
		b->sink = read_avx512(b->p, b->n);
	else if (__builtin_cpu_supports("avx2"))
		b->sink = read_avx2(b->p, b->n);
	else
#endif
		b->sink = read_plain(b->p, b->n);
	return NULL;
}

double bench_bw_host(size_t bytes, int n_threads, int reps)
{
	/* in 2 MiB pages where the kernel gives them: the best reads the machine
	 * does, as weights mapped in huge pages get (models/gguf.c) */
	const size_t huge = (size_t)2 << 20;
	bytes = (bytes + huge - 1) / huge * huge;
	uint8_t *buf = NULL;
	if (posix_memalign((void **)&buf, huge, bytes))
		return 0;
#ifdef MADV_HUGEPAGE
	madvise(buf, bytes, MADV_HUGEPAGE);
#endif
	memset(buf, 1, bytes);
	bw_part parts[256];
	n_threads = MAX(1, MIN(n_threads, 256));
	size_t per = bytes / (size_t)n_threads / 4096 * 4096;
	double best = 0;
	uint64_t sink = 0;
	for (int r = 0; r < reps + 1; r++) {
		double t0 = now_s();
		for (int i = 0; i < n_threads; i++) {
			parts[i] = (bw_part){.p = buf + (size_t)i * per, .n = per};
			if (pthread_create(&parts[i].th, NULL, bw_thread, &parts[i]))
				bw_thread(&parts[i]), parts[i].th = 0;
		}
		for (int i = 0; i < n_threads; i++) {
			if (parts[i].th)
				pthread_join(parts[i].th, NULL);
			sink += parts[i].sink;
		}
		double t = now_s() - t0;
		if (r > 0) /* the first pass warms up */
			best = MAX(best, (double)per * n_threads / t);
	}
	free(buf);
	if (sink == 42) /* keep the reads */
		fputc(' ', stderr);
	return best;
}

/* The download of one word waits for the copy. */
double bench_bw_device(const kern_ops *K, size_t bytes, int reps)
{
	uint8_t *a = K->buf_alloc(bytes), *b = a ? K->buf_alloc(bytes) : NULL;
	double best = 0;
	uint32_t word;
	for (int r = 0; b && r < reps + 1; r++) {
		K->download(&word, a, sizeof word);
		double t0 = now_s();
		K->copy(b, a, bytes);
		K->download(&word, b, sizeof word);
		double t = now_s() - t0;
		if (r > 0)
			best = MAX(best, 2.0 * (double)bytes / t);
	}
	if (a)
		K->buf_free(a);
	if (b)
		K->buf_free(b);
	return best;
}

double bench_bw_cache_bytes(void)
{
	double best = 0;
	for (int i = 0; i < 8; i++) {
		char path[96], buf[32];
		snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		FILE *fp = fopen(path, "r");
		if (!fp)
			continue;
		double v = 0;
		char unit = 0;
		if (fgets(buf, sizeof buf, fp) && sscanf(buf, "%lf%c", &v, &unit) >= 1) {
			v *= unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : 1.0;
			best = MAX(best, v);
		}
		fclose(fp);
	}
	return best;
}
