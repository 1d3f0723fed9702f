/* tests/test_misuse.c: the command line against an attacker and a careless
 * user (issue #25), each finding's scenario and its class:
 * - writing: quantize onto a device, through a planted link, onto a link,
 *   into a full disk (a tmpfs, where mounting is allowed);
 * - NaN/Inf in a model's output weights: generate, batch and logits end
 *   with an error naming the position, never print noise with status 0;
 * - plans before allocations: every size flag at INT_MAX, a model claiming
 *   2^30 layers, logits on a prompt far past the context, tokenize -f
 *   /dev/zero, -t 10000 (capped with a notice);
 * - no hang: every file opener against a FIFO (under a timeout);
 * - exit codes: output to /dev/full and to a closed stdout;
 * - one meaning per flag: negative values refused the same way by the
 *   flags and the config;
 * - messages: one line naming the flag or file and the fix;
 * - deeply nested YAML refused at once.
 * No check here waits on timing beyond a generous timeout. Run from the
 * repository root (after `make test-models`). */
#include "models/gguf.h"
#include "models/gguf_write.h"
#include "tests/fulldisk.h"
#include "tests/run.h"
#include "tests/test.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORIES "../shared/models/stories260K.gguf"
#define RAND256 "build/models/rand-256x4-f32.gguf"
#define TDIR "build/test-misuse"
#define LIMIT "timeout 30 "

static run_result r;

/* Runs a shell line with BIN standing for the pagechat binary (so the line
 * may redirect as it likes); stderr is captured. */
static void run_sh(const char *line)
{
	char cmd[4096], *o = cmd;
	for (const char *p = line; *p && o < cmd + sizeof cmd - 200; p++) {
		if (!strncmp(p, "BIN", 3)) {
			o += sprintf(o, "%s", PAGECHAT_BIN);
			p += 2;
		} else {
			*o++ = *p;
		}
	}
	snprintf(o, (size_t)(cmd + sizeof cmd - o), " 2>build/test-run.err </dev/null");
	int st = system(cmd);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	slurp("build/test-run.err", r.errout, sizeof r.errout);
	r.out[0] = '\0';
}

static int put_text(const char *path, const char *text)
{
	return write_file(path, text, strlen(text));
}

static bool err_has(const char *a, const char *b)
{
	return strstr(r.errout, a) && (!b || strstr(r.errout, b)) && !strstr(r.errout, "fatal");
}

/* The one error line: no usage text after it (notes such as the CUDA
 * fallback may come before). */
static bool one_line_error(void)
{
	const char *last = strstr(r.errout, "pagechat: ");
	for (const char *p; last && (p = strstr(last + 1, "\npagechat: "));)
		last = p + 1;
	return last && strchr(last, '\n') && strchr(last, '\n')[1] == '\0';
}

/* ---- models made for the scenarios ---- */

typedef struct poison {
	const gguf_file *f;
	const char *tensor;      /* whose values become value */
	float value;
} poison;

static int poison_fill(void *ctx, int64_t i, gguf_out *out, err *e)
{
	const poison *p = ctx;
	const gguf_tensor *t = gguf_tensor_at(p->f, i);
	if (strcmp(t->name, p->tensor) || t->type != DT_F32)
		return gguf_out_write(out, t->data, (size_t)t->n_bytes, e);
	float *x = xmalloc((size_t)t->n_bytes);
	memcpy(x, t->data, (size_t)t->n_bytes);
	for (int64_t k = 0; k < t->n_elems; k += 3)
		x[k] = p->value;
	int rc = gguf_out_write(out, x, (size_t)t->n_bytes, e);
	free(x);
	return rc;
}

/* A copy of stories260K with tensor's values poisoned (NULL: none) and
 * block_count set (0: kept). */
static bool make_model(const char *path, const char *tensor, float value, uint32_t layers)
{
	err e = {0};
	gguf_file *f = gguf_open(STORIES, &e);
	if (!f)
		return false;
	gguf_writer *w = gguf_writer_new();
	for (int64_t i = 0; i < gguf_n_kv(f); i++)
		gguf_writer_copy_kv(w, f, i);
	if (layers)
		gguf_writer_set_u32(w, "llama.block_count", layers);
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e);
	}
	poison p = {f, tensor ? tensor : "", value};
	int rc = gguf_writer_write(w, path, poison_fill, &p, &e);
	gguf_writer_free(w);
	gguf_close(f);
	return rc == 0;
}

/* ---- 1. writing files ---- */

static void test_quantize_targets(void)
{
	run_pagechat(&r, "quantize " STORIES " /dev/null q8_0");
	CHECK_(r.status == 1 && err_has("/dev/null is a device", "refusing"), "%d %s", r.status, r.errout);
	struct stat st;
	CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
	/* a link planted at the old temporary name: its target stays intact */
	CHECK(system("rm -rf " TDIR "/q && mkdir -p " TDIR "/q && echo precious > " TDIR "/q/victim && "
		     "ln -s victim " TDIR "/q/out.gguf.tmp") == 0);
	run_pagechat(&r, "quantize " STORIES " " TDIR "/q/out.gguf q8_0");
	CHECK_(r.status == 0, "%s", r.errout);
	char buf[64];
	slurp(TDIR "/q/victim", buf, sizeof buf);
	CHECK(!strcmp(buf, "precious\n"));
	/* the output itself a link: refused, not written through */
	CHECK(system("ln -s victim " TDIR "/q/link.gguf") == 0);
	run_pagechat(&r, "quantize " STORIES " " TDIR "/q/link.gguf q8_0");
	CHECK_(r.status == 1 && err_has("link.gguf is a symbolic link", NULL), "%s", r.errout);
	slurp(TDIR "/q/victim", buf, sizeof buf);
	CHECK(!strcmp(buf, "precious\n"));
	run_pagechat(&r, "quantize " STORIES " " TDIR "/q q8_0");
	CHECK_(r.status == 1 && err_has("is a directory", NULL), "%s", r.errout);
	/* a full disk: an error naming it, nothing left behind */
	if (full_disk_mount(TDIR "/full")) {
		run_pagechat(&r, "quantize " RAND256 " " TDIR "/full/out.gguf q8_0");
		CHECK_(r.status == 1 && err_has(TDIR "/full/out.gguf", "No space left"), "%s", r.errout);
		CHECK(system("test -z \"$(ls -A " TDIR "/full)\"") == 0);
		full_disk_umount(TDIR "/full");
	}
}

/* ---- 2. NaN and Inf in the logits ---- */

static void test_nan_model(void)
{
	const float bad[] = {NAN, INFINITY};
	for (int i = 0; i < 2; i++) {
		CHECK(make_model(TDIR "/nan.gguf", "output.weight", bad[i], 0) ||
		      make_model(TDIR "/nan.gguf", "token_embd.weight", bad[i], 0));
		run_pagechat(&r, "generate -m " TDIR "/nan.gguf -p 'Once upon a time' -n 8");
		CHECK_(r.status == 1 && err_has("not finite", "position 4"), "%d %s", r.status, r.errout);
		run_pagechat(&r, "generate -m " TDIR "/nan.gguf -p 'Once upon a time' -n 8 --temp 0 --beams 2");
		CHECK_(r.status == 1 && err_has("not finite", "position"), "%d %s", r.status, r.errout);
		run_pagechat(&r, "logits -m " TDIR "/nan.gguf -p 'Once upon a time'");
		CHECK_(r.status == 1 && err_has("not finite", "position 4"), "%d %s", r.status, r.errout);
		CHECK(put_text(TDIR "/nan.jsonl", "{\"prompt\": \"Hi\"}\n{\"prompt\": \"Once\", \"n\": 2}\n") == 0);
		run_pagechat(&r, "batch -m " TDIR "/nan.gguf -f " TDIR "/nan.jsonl");
		CHECK_(r.status == 1 && strstr(r.out, "not finite") && strstr(r.errout, "3 of 3 completions failed"),
		       "%d %s", r.status, r.errout);
	}
}

/* ---- 3. plans before allocations ---- */

/* Each size flag at INT_MAX: a one-line refusal (a usage error, or the
 * memory plan), never an allocation that aborts, in seconds. */
static void test_int_max_flags(void)
{
	static const char *const lines[] = {
		"generate -m " STORIES " -p hi -n", "generate -m " STORIES " -p hi -c",
		"generate -m " STORIES " -p hi --chunk", "generate -m " STORIES " -p hi --top-k",
		"generate -m " STORIES " -p hi --repeat-last-n", "generate -m " STORIES " -p hi --beams",
		"generate -m " STORIES " -p hi --draft ngram --draft-k", "logits -m " STORIES " -p hi --chunk",
		"batch -m " STORIES " -f x.jsonl --parallel", "batch -m " STORIES " -f x.jsonl -n",
		"batch -m " STORIES " -f x.jsonl -c", "batch -m " STORIES " -f x.jsonl --block-size",
		"batch -m " STORIES " -f x.jsonl --pool-blocks", "batch -m " STORIES " -f x.jsonl --chunk",
		"bench -m " STORIES " -p", "bench -m " STORIES " -n", "bench -m " STORIES " -d",
		"bench -m " STORIES " -r", "bench -m " STORIES " --bw-mib",
		"perplexity -m " STORIES " -f x.txt -c", "perplexity -m " STORIES " -f x.txt -b",
		"info " STORIES " -c", "chat --threads", "chat -c", "chat --block-size", "chat --pool-blocks",
		"chat --pool-mib", "chat --chunk", "chat --draft-k", "chat -n",
	};
	for (size_t i = 0; i < ARRAY_LEN(lines); i++) {
		char args[512];
		snprintf(args, sizeof args, "%s 2147483647", lines[i]);
		double t0 = now_s();
		run_pagechat(&r, args);
		CHECK_(r.status == 2 && err_has("2147483647 is out of range", NULL) && one_line_error() &&
		       now_s() - t0 < 20, "'%s': %d %s", args, r.status, r.errout);
	}
	/* in range, but more than memory holds: the plan refuses before anything is allocated */
	run_pagechat(&r, "bench -m build/models/shape-8b.gguf -p 65536 -n 0 -r 1 --batch 1");
	CHECK_(r.status == 1 && err_has("does not fit in memory", NULL), "%d %s", r.status, r.errout);
	run_pagechat(&r, "perplexity -m " STORIES " -f " STORIES " -c 100000");
	CHECK_(r.status == 1 && err_has("-c 100000 is more than", "context of 2048"), "%s", r.errout);
}

static void test_huge_claims(void)
{
	CHECK(make_model(TDIR "/layers.gguf", NULL, 0, 1u << 30));
	run_pagechat(&r, "generate -m " TDIR "/layers.gguf -p hi");
	CHECK_(r.status == 1 && err_has("claims 1073741824 layers", NULL), "%d %s", r.status, r.errout);
	run_pagechat(&r, "info " TDIR "/layers.gguf");
	CHECK_(r.status == 1 && err_has("claims 1073741824 layers", NULL), "%d %s", r.status, r.errout);
	/* logits on a 10 MB prompt: refused by the context, not given 47 GB of KV */
	FILE *fp = fopen(TDIR "/big.txt", "wb");
	for (int i = 0; fp && i < 200000; i++)
		fputs("Once upon a time there was a dog. ", fp);
	if (fp)
		fclose(fp);
	double t0 = now_s();
	run_pagechat(&r, "logits -m " STORIES " -f " TDIR "/big.txt");
	CHECK_(r.status == 1 && err_has("context holds 2048", "shorten it") && now_s() - t0 < 60, "%d %s",
	       r.status, r.errout);
	run_pagechat(&r, "tokenize -m " STORIES " -f /dev/zero");
	CHECK_(r.status == 1 && err_has("/dev/zero is a device", NULL), "%d %s", r.status, r.errout);
}

static void test_threads(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	char want[64];
	snprintf(want, sizeof want, "using %ld", 4 * cores);
	run_pagechat(&r, "bench -m " STORIES " -p 8 -n 2 -r 1 --batch 1 --bw-mib 8 -t 10000");
	CHECK_(r.status == 0 && strstr(r.errout, "-t 10000 is more than 4 threads per core") &&
	       strstr(r.errout, want), "%d %s", r.status, r.errout);
	snprintf(want, sizeof want, "%ld threads", 4 * cores);
	CHECK_(strstr(r.out, want) != NULL, "%s", r.out);
	run_pagechat(&r, "quantize " STORIES " " TDIR "/t.gguf q8_0 -t 10000");
	CHECK_(r.status == 0 && strstr(r.errout, "-t 10000 is more than"), "%d %s", r.status, r.errout);
}

/* ---- 4. no hang on a FIFO ---- */

static void test_fifos(void)
{
	unlink(TDIR "/fifo");
	CHECK(mkfifo(TDIR "/fifo", 0600) == 0);
	static const char *const lines[] = {
		"generate -m " TDIR "/fifo -p hi", "generate -m " STORIES " -f " TDIR "/fifo",
		"info " TDIR "/fifo", "tokenize -m " TDIR "/fifo hi", "tokenize -m " STORIES " -f " TDIR "/fifo",
		"batch -m " STORIES " -f " TDIR "/fifo", "template -m " STORIES " -f " TDIR "/fifo",
		"perplexity -m " STORIES " -f " TDIR "/fifo", "quantize " TDIR "/fifo " TDIR "/o.gguf q8_0",
		"quantize " STORIES " " TDIR "/fifo q8_0", "chat --config " TDIR "/fifo",
		"bench -m " TDIR "/fifo",
	};
	for (size_t i = 0; i < ARRAY_LEN(lines); i++) {
		char line[512];
		snprintf(line, sizeof line, LIMIT "BIN %s >/dev/null", lines[i]);
		run_sh(line);
		CHECK_(r.status == 1 && err_has("fifo is a FIFO", NULL) && one_line_error(), "'%s': %d %s",
		       lines[i], r.status, r.errout);
	}
}

/* ---- 5. exit codes ---- */

static void test_output_errors(void)
{
	CHECK(put_text(TDIR "/conv.json", "[{\"role\": \"user\", \"content\": \"hi\"}]") == 0);
	CHECK(put_text(TDIR "/one.jsonl", "{\"prompt\": \"Hi\", \"max_tokens\": 2}\n") == 0);
	static const char *const lines[] = {
		"generate -m " STORIES " -p hi -n 4", "tokenize -m " STORIES " hello", "info " STORIES,
		"template -m " STORIES " --template chatml -f " TDIR "/conv.json", "batch -m " STORIES " -f " TDIR "/one.jsonl",
		"--help",
	};
	for (size_t i = 0; i < ARRAY_LEN(lines); i++) {
		char line[512];
		snprintf(line, sizeof line, LIMIT "BIN %s >/dev/full", lines[i]);
		run_sh(line);
		CHECK_(r.status == 1 && err_has("cannot write the output", "No space left on device"), "'%s': %d %s",
		       lines[i], r.status, r.errout);
		snprintf(line, sizeof line, LIMIT "BIN %s >&-", lines[i]);
		run_sh(line);
		CHECK_(r.status == 1 && err_has("cannot write the output", NULL), "'%s' >&-: %d %s", lines[i],
		       r.status, r.errout);
	}
}

/* ---- 6. one meaning per flag ---- */

static void test_flag_meanings(void)
{
	static const struct { const char *args, *want; } cases[] = {
		{"generate -m " STORIES " -p hi --temp -1", "--temp: -1 is out of range (0..100; 0: greedy)"},
		{"generate -m " STORIES " -p hi -c -1", "-c: -1 is out of range"},
		{"generate -m " STORIES " -p hi --top-k -5", "--top-k: -5 is out of range (0..1048576; 0: off)"},
		{"generate -m " STORIES " -p hi --min-p 2", "--min-p: 2 is out of range (0..1; 0: off)"},
		{"generate -m " STORIES " -p hi --draft ngram --draft-k 0", "--draft-k: 0 is out of range (1..16)"},
		{"generate -m " STORIES " -p hi --draft ngram --draft-cost -1", "--draft-cost: -1 is out of range (0..16"},
		{"generate -m " STORIES " -p hi -n -2", "-n: -2 is out of range"},
		{"chat --threads -1", "--threads: -1 is out of range"},
		{"chat --pool-blocks -1", "--pool-blocks: -1 is out of range"},
		{"chat --block-size 512", "--block-size: 512 is out of range (1..256"},
		{"chat --temp -0.5", "--temp: -0.5 is out of range"},
		{"bench -m " STORIES " --peak-gbs -4", "--peak-gbs: -4 is out of range"},
		{"quantize -t -3 " STORIES " " TDIR "/x.gguf q8_0", "-t: -3 is out of range (0..65536"},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		run_pagechat(&r, cases[i].args);
		CHECK_(r.status == 2 && err_has(cases[i].want, NULL) && one_line_error(), "'%s': %d %s",
		       cases[i].args, r.status, r.errout);
	}
	/* the config says the same about the same values */
	CHECK(put_text(TDIR "/topk.yaml", "sampling: {top_k: -5}\n") == 0);
	run_pagechat(&r, "chat --config " TDIR "/topk.yaml");
	CHECK_(r.status == 1 && err_has("sampling.top_k: -5 is out of range (0..1048576; 0: off)", NULL), "%s",
	       r.errout);
	CHECK(put_text(TDIR "/minp.yaml", "sampling: {min_p: 2}\n") == 0);
	run_pagechat(&r, "chat --config " TDIR "/minp.yaml");
	CHECK_(r.status == 1 && err_has("sampling.min_p: 2 is out of range (0..1; 0: off)", NULL), "%s", r.errout);
	/* -n -1 means "until the context is full" in the chat too: accepted */
	CHECK(put_text(TDIR "/n.yaml", "sampling: {max_tokens: -1}\n") == 0);
	run_pagechat(&r, "chat --config " TDIR "/n.yaml -n -1");
	CHECK_(r.status == 2 && err_has("the chat needs a terminal", NULL), "%s", r.errout);
	/* and -n 0 in generate is the same: no limit (it used to print nothing) */
	run_pagechat(&r, "generate -m " STORIES " -p 'Once upon a time' -n 0 -c 24 --temp 0");
	CHECK_(r.status == 0 && strstr(r.errout, "stop: context"), "%s", r.errout);
}

/* ---- 7. messages ---- */

static void test_messages(void)
{
	static const struct { const char *args, *want; int status; } cases[] = {
		{"chat --config " TDIR, TDIR " is a directory, not a regular file", 1},
		{"generate -m '' -p hi", "-m needs a file name, got an empty one", 2},
		{"info ''", "the file name is empty", 1},
		{"quantize " STORIES " '' q8_0", "the output file name is empty", 1},
		{"tokenize -m " STORIES, "needs -m MODEL and either TEXT or -f FILE", 2},
		{"generate -m " STORIES " --bogus", "unknown flag '--bogus'", 2},
		{"quantize " STORIES, "needs IN.gguf OUT.gguf TYPE, got 1", 2},
		{"frobnicate", "unknown command 'frobnicate'", 2},
	};
	for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
		run_pagechat(&r, cases[i].args);
		CHECK_(r.status == cases[i].status && err_has(cases[i].want, NULL) && one_line_error() &&
		       !strstr(r.errout, "usage:"), "'%s': %d %s", cases[i].args, r.status, r.errout);
	}
}

/* ---- 9. deeply nested YAML ---- */

static void test_nested_yaml(void)
{
	enum { DEPTH = 100000 };
	char *y = xmalloc(2 * DEPTH + 16);
	size_t n = (size_t)sprintf(y, "tabs: ");
	for (int i = 0; i < DEPTH; i++)
		y[n++] = '[';
	for (int i = 0; i < DEPTH; i++)
		y[n++] = ']';
	y[n++] = '\n';
	CHECK(write_file(TDIR "/deep.yaml", y, n) == 0);
	free(y);
	double t0 = now_s();
	run_pagechat(&r, "chat --config " TDIR "/deep.yaml");
	CHECK_(r.status == 1 && err_has("nested deeper than 32 levels", "deep.yaml:1:") && now_s() - t0 < 10,
	       "%d %s (%.1f s)", r.status, r.errout, now_s() - t0);
}

int main(void)
{
	if (system("mkdir -p " TDIR) != 0)
		return 1;
	test_quantize_targets();
	test_nan_model();
	test_int_max_flags();
	test_huge_claims();
	test_threads();
	test_fifos();
	test_output_errors();
	test_flag_meanings();
	test_messages();
	test_nested_yaml();
	return TEST_DONE();
}
