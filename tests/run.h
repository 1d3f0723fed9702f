/* tests/run.h: running the pagechat binary from a test and capturing what it
 * prints. Header-only, tests only. PAGECHAT_BIN comes from the Makefile. */
#ifndef PAGECHAT_RUN_H
#define PAGECHAT_RUN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/base.h"

typedef struct run_result {
	int status;              /* exit status, or 128 + signal */
	char out[1 << 21];       /* stdout, NUL-terminated (truncated if longer) */
	char errout[4096];       /* stderr */
} run_result;

static inline void slurp(const char *path, char *buf, size_t cap)
{
	FILE *fp = fopen(path, "rb");
	size_t n = fp ? fread(buf, 1, cap - 1, fp) : 0;
	buf[n] = '\0';
	if (fp)
		fclose(fp);
}

/* Runs "PAGECHAT_BIN args" through sh (args are shell words). */
static inline void run_pagechat(run_result *r, const char *args)
{
	char cmd[16384];
	snprintf(cmd, sizeof cmd, "%s %s >build/test-run.out 2>build/test-run.err </dev/null",
		 PAGECHAT_BIN, args);
	int st = system(cmd);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	slurp("build/test-run.out", r->out, sizeof r->out);
	slurp("build/test-run.err", r->errout, sizeof r->errout);
}

static inline int write_file(const char *path, const void *data, size_t n)
{
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return -1;
	size_t w = fwrite(data, 1, n, fp);
	return fclose(fp) == 0 && w == n ? 0 : -1;
}

#endif
