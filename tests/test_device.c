/* tests/test_device.c: choosing the backend (kern_pick) and the device flags
 * every command takes (--device, --gpu-mem-fraction, -ngl, --device-mem), on
 * any machine: with or without a GPU, with or without CUDA built in; partial
 * offload and placement on the fake device from the command line; the
 * default build in a small address space. */
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
	CHECK(r->status == 0 && strstr(r->out, "--device cuda|cpu|fake|auto") && strstr(r->out, "-ngl N|auto") &&
	      strstr(r->out, "--device-mem SIZE"));
	run_pagechat(r, "info --device cpu " MODEL);
	CHECK(r->status == 0 && !strstr(r->out, "GPU plan") && !strstr(r->out, "placement"));
	free(r);
	free(ref);
}

/* A device flag's name as another flag's value is that value (#42.11): the
 * prompt "--device" (or "-ngl") gives the ids the same prompt read from a
 * file gives; flags before the command's name still count. */
static void test_flag_as_value(void)
{
	run_result *r = xcalloc(1, sizeof *r), *ref = xcalloc(1, sizeof *ref);
	static const char *const words[] = {"--device", "-ngl", "--device-mem", "--gpu-mem-fraction"};
	for (size_t i = 0; i < ARRAY_LEN(words); i++) {
		FILE *fp = fopen("build/test-device-prompt.txt", "w");
		CHECK(fp && fputs(words[i], fp) >= 0 && fclose(fp) == 0);
		run_pagechat(ref, "generate --device cpu -m " MODEL " -f build/test-device-prompt.txt --temp 0 -n 8 --ids");
		CHECK_(ref->status == 0, "%s: %d %s", words[i], ref->status, ref->errout);
		char args[256];
		snprintf(args, sizeof args, "generate -m " MODEL " -p %s --temp 0 -n 8 --ids --device cpu", words[i]);
		run_pagechat(r, args);
		CHECK_(r->status == 0 && !strcmp(r->out, ref->out), "-p %s: %d '%s' vs '%s': %s", words[i], r->status,
		       r->out, ref->out, r->errout);
	}
	remove("build/test-device-prompt.txt");
	run_pagechat(r, "--device cpu -ngl 0 generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 8 --ids");
	run_pagechat(ref, "generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 8 --ids --device cpu");
	CHECK_(r->status == 0 && ref->status == 0 && !strcmp(r->out, ref->out), "%d %d %s", r->status, ref->status,
	       r->errout);
	run_pagechat(r, "--device tpu generate -m " MODEL " -p x -n 1");
	CHECK_(r->status == 1 && strstr(r->errout, "unknown device 'tpu'"), "%d %s", r->status, r->errout);
	free(r);
	free(ref);
}

/* Partial offload on the fake device from the command line: every -ngl N
 * (and auto, and -1) gives the CPU's greedy ids; auto on a device too small
 * for every layer splits; -ngl past the budget is refused with the figures;
 * the size flag's bad values are usage errors. */
static void test_fake_ngl(void)
{
	run_result *r = xcalloc(1, sizeof *r), *ref = xcalloc(1, sizeof *ref);
	run_pagechat(ref, "generate --device cpu -m " MODEL " -p 'Once upon a time' --temp 0 -n 60 --ids");
	CHECK_EQ_INT(ref->status, 0);
	static const char *const ngl[] = {"0", "1", "2", "3", "4", "5", "-1", "auto"};
	for (size_t i = 0; i < ARRAY_LEN(ngl); i++) {
		char args[512];
		snprintf(args, sizeof args, "generate --device fake -ngl %s -m " MODEL " -p 'Once upon a time' "
			 "--temp 0 -n 60 --ids", ngl[i]);
		run_pagechat(r, args);
		CHECK_(r->status == 0 && !strcmp(r->out, ref->out), "-ngl %s: %d %s", ngl[i], r->status, r->errout);
		int n = atoi(ngl[i]);
		if (n > 0)
			CHECK_(strstr(r->errout, "layers on fake") && atoi(strstr(r->errout, "stories260K.gguf: ") + 18) == n,
			       "-ngl %s: %s", ngl[i], r->errout);
	}
	/* 256 MiB of margin and about 3 MiB more: some layers, not all */
	run_pagechat(r, "generate --device fake --device-mem 259MiB --gpu-mem-fraction 1 -m " MODEL
		     " -p 'Once upon a time' --temp 0 -n 60 --ids");
	const char *at = strstr(r->errout, "stories260K.gguf: ");
	int placed = at ? atoi(at + 18) : -1;
	CHECK_(r->status == 0 && !strcmp(r->out, ref->out) && placed > 0 && placed < 5, "auto split: %d %s", r->status,
	       r->errout);
	run_pagechat(r, "generate --device fake --device-mem 1MiB -ngl 3 -m " MODEL " -p hi -n 2");
	CHECK_(r->status == 1 && strstr(r->errout, "-ngl 3: 3 of 5 layers need") && strstr(r->errout, "budget"),
	       "%d %s", r->status, r->errout);
	static const char *const bad[] = {"--device-mem x", "--device-mem 0", "--device-mem 12Q", "-ngl autox"};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		char args[256];
		snprintf(args, sizeof args, "generate -m " MODEL " -p x -n 1 %s", bad[i]);
		run_pagechat(r, args);
		const char *nl = strchr(r->errout, '\n');
		CHECK_(r->status == 2 && !strncmp(r->errout, "pagechat: ", 10) && nl && !nl[1], "'%s': %d %s", bad[i],
		       r->status, r->errout);
	}
	free(r);
	free(ref);
}

/* info plans for a device that is not there: a 70B-shaped file (sparse, no
 * weights) on 24 GiB. The host part fits or is refused with its figures,
 * depending on this machine's memory. */
static void test_info_plan(void)
{
	run_result *r = xcalloc(1, sizeof *r);
	run_pagechat(r, "info --device cpu --device-mem 24GiB build/models/shape-70b.gguf");
	const char *at = strstr(r->out, "placement (-ngl auto): ");
	int n = at ? atoi(at + 23) : -1;
	CHECK_(n > 20 && n < 80 && strstr(r->out, "of 80 layers on the device") && strstr(r->out, "device planned") &&
	       strstr(r->out, "KV per token"), "%s", r->out);
	CHECK_(r->status == 0 || (r->status == 1 && strstr(r->errout, "is available")), "%d %s", r->status, r->errout);
	run_pagechat(r, "info --device fake --device-mem 8GiB -ngl 70 build/models/shape-70b.gguf");
	CHECK_(r->status == 1 && strstr(r->out, "placement (-ngl 70): 70 of 80") && strstr(r->errout, "-ngl 70: 70 of 80"),
	       "%d %s", r->status, r->errout);
	free(r);
}

/* One binary for every machine: the default build runs in 400 MB of address
 * space (no CUDA library mapped unless a GPU is used). Not under the
 * sanitizers, whose shadow memory needs terabytes of address space. */
static void test_small_address_space(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	CHECK(1);
#else
	static const char *const cmds[] = {
		"--help",
		"generate --device cpu -m " MODEL " -p 'Once upon a time' --temp 0 -n 16 --ids",
		"generate --device fake -ngl 2 -m " MODEL " -p 'Once upon a time' --temp 0 -n 16 --ids",
	};
	for (size_t i = 0; i < ARRAY_LEN(cmds) + !kern_cuda_present(); i++) {
		char cmd[1024];
		/* without a GPU, auto must not load CUDA either */
		snprintf(cmd, sizeof cmd, "sh -c 'ulimit -v 400000; exec env -u PAGECHAT_DEVICE %s %s' >/dev/null "
			 "2>build/test-ulimit.err </dev/null", PAGECHAT_BIN,
			 i < ARRAY_LEN(cmds) ? cmds[i] : "generate -m " MODEL " -p hi -n 8");
		int st = system(cmd);
		char err[2048];
		slurp("build/test-ulimit.err", err, sizeof err);
		CHECK_(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ulimit -v 400000: %s: status %d: %s", cmd, st, err);
	}
	/* too small for the Llama 3 vocabulary's model (#42.11): each run answers
	 * or ends with one line and status 1, never an abort; some fail for want
	 * of memory and say so (the plan's check, or an allocation naming the
	 * limit) */
	int oom = 0;
	for (int kib = 40000; kib <= 110000; kib += 10000) {
		char cmd[1024], err[2048];
		snprintf(cmd, sizeof cmd, "sh -c 'ulimit -v %d; exec %s generate --device cpu -m "
			 "build/models/rand-llama3-vocab.gguf -p hi -n 2' >/dev/null 2>build/test-ulimit.err </dev/null",
			 kib, PAGECHAT_BIN);
		int st = system(cmd);
		slurp("build/test-ulimit.err", err, sizeof err);
		const char *nl = strchr(err, '\n');
		bool ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || (WEXITSTATUS(st) == 1 && !strncmp(err, "pagechat: ", 10) &&
									 nl && !nl[1]));
		CHECK_(ok, "ulimit -v %d: status %d: %s", kib, st, err);
		oom += (strstr(err, "out of memory allocating") && strstr(err, "(ulimit -v)")) ||
		       strstr(err, "does not fit in memory");
	}
	CHECK_(oom > 0, "no run under ulimit -v 40000..110000 ran out of memory");
#endif
}

int main(void)
{
	test_pick();
	test_flags();
	test_flag_as_value();
	test_fake_ngl();
	test_info_plan();
	test_small_address_space();
	return TEST_DONE();
}
