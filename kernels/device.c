/* kernels/device.c: choosing a backend by name, and kern_cuda() in builds
 * without CUDA (the one place outside kernels/cuda/ that knows HAVE_CUDA). */
#include "kernels/kern.h"

#include <stdio.h>
#include <string.h>

#ifndef HAVE_CUDA
const kern_ops *kern_cuda(err *e)
{
	err_set(e, "this pagechat was built without CUDA (rebuild with `make CUDA=1`)");
	return NULL;
}
#endif

const kern_ops *kern_pick(const char *device, const char **note, err *e)
{
	static char why[600];
	if (note)
		*note = NULL;
	if (device && !strcmp(device, "cpu"))
		return kern_cpu();
	if (device && !strcmp(device, "fake"))
		return kern_fake();
	err ce = {0};
	bool want_cuda = device && !strcmp(device, "cuda");
	if (!want_cuda && device && *device && strcmp(device, "auto")) {
		err_set(e, "unknown device '%s' (cuda, cpu, fake or auto)", device);
		return NULL;
	}
	const kern_ops *k = kern_cuda(&ce);
	if (k)
		return k;
	if (want_cuda) {
		err_set(e, "--device cuda: %s", ce.msg);
		return NULL;
	}
#ifdef HAVE_CUDA
	/* only a CUDA build has something to explain when it falls back */
	snprintf(why, sizeof why, "%s; using the CPU backend", ce.msg);
	if (note)
		*note = why;
#else
	(void)why;
#endif
	return kern_cpu();
}
