/* tests/cuda/cuda_test.h: what the CUDA comparison tests share: the backend
 * (or a one-line "no CUDA device: ..." and a failing exit: these tests never
 * pass without a GPU), device buffers and seeded random data.
 *
 * PAGECHAT_FAKE_DEVICE=1 swaps in the fake device (kern_fake, kernels/fake.c)
 * for checking the tests themselves and the device paths of the model, pool
 * and engine on a machine without a GPU: the CPU kernels behind "device"
 * buffers in host memory. It records too, so the model's recorded steps run
 * here, and its status() reports a failure a test injects (kern_fake_fail).
 * It says so on stderr; it proves nothing about the CUDA kernels. */
#ifndef PAGECHAT_CUDA_TEST_H
#define PAGECHAT_CUDA_TEST_H

#include "kernels/kern.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

static const kern_ops *G; /* the CUDA backend */
static bool fake_device;  /* G is the PAGECHAT_FAKE_DEVICE stand-in */

static void need_cuda(const char *file)
{
	err e = {0};
	const char *fake = getenv("PAGECHAT_FAKE_DEVICE");
	if (fake && !strcmp(fake, "1")) {
		G = kern_fake();
		fake_device = true;
		fprintf(stderr, "%s: PAGECHAT_FAKE_DEVICE=1: CPU kernels behind host \"device\" buffers, "
			"not CUDA\n", file);
		return;
	}
	G = kern_cuda(&e);
	if (!G) {
		fprintf(stderr, "%s\n", e.msg);
		printf("%s: 0 passed, 1 failed\n", file);
		exit(1);
	}
}

/* A device copy of host bytes, in a buffer of whole 256-byte units (as a
 * model's weights are laid out: kernels may read a word past a row). */
static inline void *dev_put(const void *h, size_t bytes)
{
	void *d = G->buf_alloc((bytes + 255) & ~(size_t)255);
	if (!d) {
		fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
		exit(1);
	}
	if (h)
		G->upload(d, h, bytes);
	return d;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline float frand(void) /* uniform in [-1, 1) */
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static inline float *rand_floats(size_t n, float scale)
{
	float *p = xmalloc(n * sizeof *p);
	for (size_t i = 0; i < n; i++)
		p[i] = frand() * scale;
	return p;
}

#endif
