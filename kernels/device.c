/* kernels/device.c: choosing a backend by name, and finding the CUDA one:
 * in a CUDA build it lives in libpagechat_cuda.so, loaded on first request
 * (the one place outside kernels/cuda/ that knows HAVE_CUDA). */
#include "kernels/kern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#define CUDA_LIB "libpagechat_cuda.so"

/* The library's one entry point (kernels/cuda/backend.cu). */
typedef const kern_ops *(*cuda_entry)(err *e);

static void *open_at(const char *path, char *why, size_t cap)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(why, cap, "cannot load the CUDA backend: %s", dlerror());
	return h;
}

/* CUDA_LIB where PAGECHAT_CUDA_LIB names it, else beside the running
 * program or one or two folders above it (the test programs sit in
 * build/<cfg>/tests/ and build/<cfg>/tests/cuda/). */
static void *open_lib(char *why, size_t cap)
{
	const char *env = getenv("PAGECHAT_CUDA_LIB");
	if (env && *env)
		return open_at(env, why, cap);
	char dir[PATH_MAX], path[PATH_MAX + sizeof CUDA_LIB + 1];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
	if (n <= 0) {
		snprintf(why, cap, "cannot find the CUDA backend: /proc/self/exe unreadable (set PAGECHAT_CUDA_LIB)");
		return NULL;
	}
	dir[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
		snprintf(path, sizeof path, "%s/" CUDA_LIB, dir);
		if (!access(path, F_OK))
			return open_at(path, why, cap);
	}
	snprintf(why, cap, "cannot find the CUDA backend (" CUDA_LIB " beside the program; rebuild with `make CUDA=1` "
		 "or set PAGECHAT_CUDA_LIB)");
	return NULL;
}

const kern_ops *kern_cuda(err *e)
{
	static bool tried;
	static cuda_entry entry;
	static char why[sizeof e->msg];
	if (!tried) {
		tried = true;
		void *h = open_lib(why, sizeof why);
		/* through a void * (POSIX's way: C has no object-to-function cast) */
		if (h)
			*(void **)&entry = dlsym(h, "pagechat_cuda_backend");
		if (h && !entry)
			snprintf(why, sizeof why, "the CUDA backend library lacks its entry point: %s", dlerror());
	}
	if (!entry) {
		err_set(e, "%s", why);
		return NULL;
	}
	return entry(e);
}

bool kern_cuda_present(void)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	bool any = false;
	for (struct dirent *en; d && !any && (en = readdir(d));)
		any = en->d_name[0] != '.';
	if (d)
		closedir(d);
	return any || !access("/dev/nvidia0", F_OK) || !access("/dev/dxg", F_OK);
}
#else
const kern_ops *kern_cuda(err *e)
{
	err_set(e, "this pagechat was built without CUDA (rebuild with `make CUDA=1`)");
	return NULL;
}

bool kern_cuda_present(void)
{
	return false;
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
	/* auto: the CUDA libraries are loaded only when a device looks present */
	const kern_ops *k = NULL;
	if (want_cuda || kern_cuda_present())
		k = kern_cuda(&ce);
	else
		err_set(&ce, "no NVIDIA GPU found (no /proc/driver/nvidia/gpus entry or /dev/nvidia0)");
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
