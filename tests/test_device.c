/* tests/test_device.c: choosing the backend (kern_pick) and the device flags
 * every command takes (--device, --gpu-mem-fraction, -ngl), on any machine:
 * with or without a GPU, with or without CUDA built in. */
#include "kernels/kern.h"
#include "tests/run.h"
#include "tests/test.h"

#define MODEL "../shared/models/stories260K.gguf"

static void test_pick(void)
{
	err e = {0};
	const char *note = "unset";
	CHECK(kern_pick("cpu", &note, &e) == kern_cpu() && note == NULL);
	CHECK(kern_pick("tpu", &note, &e) == NULL);
	CHECK_(strstr(e.msg, "unknown device 'tpu'") != NULL, "%s", e.msg);
	err ce = {0};
	const kern_ops *gpu = kern_cuda(&ce);
	const kern_ops *a = kern_pick(NULL, &note, &e);
	CHECK(a == (gpu ? gpu : kern_cpu()));
	CHECK(kern_pick("auto", NULL, &e) == a && kern_pick("", NULL, &e) == a);
#ifdef HAVE_CUDA
	CHECK_(gpu || (note && strstr(note, "using the CPU backend")), "note: %s", note ? note : "(none)");
#else
	CHECK(!gpu && note == NULL && strstr(ce.msg, "without CUDA"));
#endif
	e.msg[0] = '\0';
	CHECK(kern_pick("cuda", NULL, &e) == gpu);
	CHECK_(gpu || strstr(e.msg, "--device cuda: ") == e.msg, "%s", e.msg);
	CHECK(kern_cpu()->buf_alloc == NULL); /* the CPU computes on host memory */
}

static void test_flags(void)
{
	run_result *r = xcalloc(1, sizeof *r), *ref = xcalloc(1, sizeof *ref);
	err ce = {0};
	bool gpu = kern_cuda(&ce) != NULL;
	run_pagechat(ref, "generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 24 --ids");
	CHECK_EQ_INT(ref->status, 0);
	run_pagechat(r, "generate --device cpu -m " MODEL " -p 'Once upon a time' --temp 0 -n 24 --ids");
	CHECK(r->status == 0 && !strcmp(r->out, ref->out));
	/* the flags go anywhere on the line, -ngl 0 means the CPU */
	run_pagechat(r, "generate -m " MODEL " -ngl 0 -p 'Once upon a time' --device cuda --temp 0 -n 24 --ids");
	CHECK(r->status == 0 && !strcmp(r->out, ref->out));
	run_pagechat(r, "generate --device cuda -m " MODEL " -p 'Once upon a time' --temp 0 -n 24 --ids");
	if (gpu)
		CHECK_EQ_INT(r->status, 0);
	else
		CHECK_(r->status == 1 && strstr(r->errout, "pagechat: --device cuda: "), "%d %s", r->status, r->errout);
	run_pagechat(r, "generate --device tpu -m " MODEL " -p x -n 1");
	CHECK_(r->status == 1 && strstr(r->errout, "unknown device 'tpu'"), "%d %s", r->status, r->errout);
	static const char *const bad[] = {"--gpu-mem-fraction 0", "--gpu-mem-fraction 1.5", "--gpu-mem-fraction x",
					  "-ngl -2", "-ngl many", "--device"};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		char args[256];
		snprintf(args, sizeof args, "generate -m " MODEL " -p x -n 1 %s", bad[i]);
		run_pagechat(r, args);
		const char *nl = strchr(r->errout, '\n');
		CHECK_(r->status == 2 && !strncmp(r->errout, "pagechat: ", 10) && nl && !nl[1],
		       "'%s': %d %s", bad[i], r->status, r->errout); /* one line */
	}
	run_pagechat(r, "--help");
	CHECK(r->status == 0 && strstr(r->out, "--device cuda|cpu|auto") && strstr(r->out, "-ngl N"));
	run_pagechat(r, "info --device cpu " MODEL);
	CHECK(r->status == 0 && !strstr(r->out, "GPU plan"));
	free(r);
	free(ref);
}

int main(void)
{
	test_pick();
	test_flags();
	return TEST_DONE();
}
