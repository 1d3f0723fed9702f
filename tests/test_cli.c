/* tests/test_cli.c: the command-line front end, run as a user would: reference
 * outputs through `tokenize`, `generate --ids` and `logits`, the `info`
 * figures, and a clear message plus a non-zero exit for every kind of misuse. */
#include "tests/run.h"
#include "tests/test.h"
#include "tests/tsv.h"

#define MODEL "../shared/models/stories260K.gguf"

static run_result r;

static void test_tokenize_reference(void)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/tokenize.tsv") == 0);
	CHECK(t.n_rows >= 20);
	for (int i = 0; i < t.n_rows; i++) {
		char text[4096];
		size_t n = tsv_hex(t.rows[i][2], text, sizeof text);
		CHECK(write_file("build/test-input.txt", text, n) == 0);
		run_pagechat(&r, "tokenize -m " MODEL " -f build/test-input.txt");
		char *nl = strchr(r.out, '\n');
		if (nl)
			*nl = '\0';
		CHECK_(r.status == 0 && !strcmp(r.out, t.rows[i][1]), "tokenize row %d %s: got '%s' want '%s' (%s)",
		       i, t.rows[i][0], r.out, t.rows[i][1], r.errout);
	}
	tsv_free(&t);
	run_pagechat(&r, "tokenize -m " MODEL " --no-bos 'Once upon a time'");
	CHECK(r.status == 0 && !strcmp(r.out, "403 407 261 378\n"));
}

static void test_generate_reference(void)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/greedy.tsv") == 0);
	for (int i = 0; i < t.n_rows; i++) {
		char text[4096], args[8192];
		size_t n = strlen(t.rows[i][0]);
		/* prompt_json is a JSON string without escapes for these rows */
		CHECK(n >= 2 && !strchr(t.rows[i][0] + 1, '\\'));
		snprintf(text, sizeof text, "%.*s", (int)n - 2, t.rows[i][0] + 1);
		CHECK(write_file("build/test-input.txt", text, strlen(text)) == 0);
		snprintf(args, sizeof args, "generate -m %s -f build/test-input.txt --temp 0 -n 64 --ids", MODEL);
		run_pagechat(&r, args);
		char *nl = strchr(r.out, '\n');
		if (nl)
			*nl = '\0';
		CHECK_(r.status == 0 && !strcmp(r.out, t.rows[i][2]), "generate row %d: got '%s' (%s)", i,
		       r.out, r.errout);
		CHECK(strstr(r.errout, "tok/s") != NULL);
	}
	tsv_free(&t);
	/* the text form of the first row's continuation */
	run_pagechat(&r, "generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 12");
	CHECK_(r.status == 0 && !strncmp(r.out, ", there was a little girl named Lily.", 37), "got '%s'", r.out);
	/* --draft FILE as the chat takes it (#40): the model as its own draft,
	 * greedy, gives the same text and accepts every drafted token */
	run_pagechat(&r, "generate -m " MODEL " --draft " MODEL " -p 'Once upon a time' --temp 0 -n 12");
	CHECK_(r.status == 0 && !strncmp(r.out, ", there was a little girl named Lily.", 37) &&
	       strstr(r.errout, "accepted (100.0%)"), "--draft FILE: status %d, '%s' (%s)", r.status, r.out, r.errout);
}

static void test_logits_reference(void)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/logits.tsv") == 0);
	float ref[512], got[512];
	CHECK_EQ_INT(tsv_floats(t.rows[0][2], ref, 512), 512);
	/* the reference was made with an f32 KV cache; pagechat's default f16
	 * lands within the README's 2e-2 */
	run_pagechat(&r, "logits -m " MODEL " -p 'Once upon a time' --kv-type f32");
	CHECK_EQ_INT(r.status, 0);
	CHECK_EQ_INT(tsv_floats(r.out, got, 512), 512);
	float d = 0;
	for (int i = 0; i < 512; i++)
		d = MAX(d, fabsf(got[i] - ref[i]));
	CHECK_(d <= 1e-3f, "logits max abs diff %g", d);
	run_pagechat(&r, "logits -m " MODEL " -p 'Once upon a time'");
	CHECK_EQ_INT(r.status, 0);
	CHECK_EQ_INT(tsv_floats(r.out, got, 512), 512);
	d = 0;
	for (int i = 0; i < 512; i++)
		d = MAX(d, fabsf(got[i] - ref[i]));
	CHECK_(d <= 2e-2f && d > 0, "f16 KV: logits max abs diff %g", d);
	tsv_free(&t);
}

static void test_info(void)
{
	run_pagechat(&r, "info " MODEL);
	CHECK_EQ_INT(r.status, 0);
	CHECK(strstr(r.out, "architecture llama"));
	CHECK(strstr(r.out, "dims 64, layers 5, heads 8, KV heads 4, head dim 8, FFN 172, vocab 512"));
	CHECK(strstr(r.out, "KV f16: 640 bytes/token, 10 KiB per 16-token block, 1.25 MiB for 2048 tokens"));
	CHECK(strstr(r.out, "KV f32: 1280 bytes/token"));
	CHECK(strstr(r.out, "parameters 292800"));
	run_pagechat(&r, "info " MODEL " -c 100");
	CHECK(strstr(r.out, "62.5 KiB for 100 tokens"));
	CHECK(strstr(r.out, "memory plan") && strstr(r.out, ": fits"));
	/* the lower KV tiers in the plan: 1 MiB of host memory is 102 blocks of 10 KiB */
	run_pagechat(&r, "info " MODEL " --kv-host 1MiB --kv-store build/test-info-store");
	CHECK_(r.status == 0 && strstr(r.out, "KV tier 1 (host memory, --kv-host): 1 MiB = 102 blocks of 16 tokens") &&
	       strstr(r.out, "KV tier 2 (disk, --kv-store build/test-info-store): limit 8 GiB; 0 files"),
	       "%d %s%s", r.status, r.out, r.errout);
	/* an 8B-shaped file (sparse, no weights): the Llama-3-8B figures */
	run_pagechat(&r, "info build/models/shape-8b.gguf -c 8192");
	CHECK_(r.status == 0 && strstr(r.out, "dims 4096, layers 32, heads 32, KV heads 8, head dim 128"), "%s", r.errout);
	CHECK(strstr(r.out, "KV f16: 131072 bytes/token, 2 MiB per 16-token block, 1 GiB for 8192 tokens"));
	/* 8-bit rows: 32 layers x 2 x 8 heads x (128 + 2 scale bytes) = 66560 bytes, 1.97x f16 */
	CHECK(strstr(r.out, "KV q8: 66560 bytes/token") && strstr(r.out, "(1.97x f16)"));
	CHECK(strstr(r.out, "parameters 8030261248 (8.03 B)"));
	CHECK(strstr(r.out, "memory plan (f16 KV, the default; --kv-type changes it): weights 4.33 GiB + KV 1 GiB"));
	/* a context no machine here holds is refused with the arithmetic */
	run_pagechat(&r, "info build/models/shape-8b.gguf -c 2000000");
	CHECK_(r.status == 1 && strstr(r.errout, "does not fit in memory: needs weights 4.33 GiB + KV 244.14 GiB"),
	       "%s", r.errout);
	/* past the range of -c: a usage error; in range but too big: the plan
	 * refuses it before the model is loaded */
	run_pagechat(&r, "generate -m " MODEL " -p hi -c 2000000000");
	CHECK_(r.status == 2 && strstr(r.errout, "-c: 2000000000 is out of range (0..16777216"), "%s", r.errout);
	run_pagechat(&r, "generate -m build/models/shape-8b.gguf -p hi -c 2000000");
	CHECK_(r.status == 1 && strstr(r.errout, "does not fit in memory") && strstr(r.errout, "lower the context"),
	       "%s", r.errout);
}

/* Each misuse: exit status and a word the one-line message must contain. */
static void expect_error(const char *args, int status, const char *want)
{
	run_pagechat(&r, args);
	CHECK_(r.status == status && strstr(r.errout, want) && !strstr(r.errout, "fatal"),
	       "'%s': status %d, stderr '%s' (want %d, '%s')", args, r.status, r.errout, status, want);
}

static void test_errors(void)
{
	/* one line, no usage text after it (issue #25) */
	expect_error("", 2, "the chat needs a terminal");
	CHECK(!strchr(strchr(r.errout, '\n') + 1, '\n'));
	expect_error("frobnicate", 2, "unknown command 'frobnicate'");
	expect_error("tokenize -m " MODEL " --bogus x", 2, "unknown flag '--bogus'");
	expect_error("tokenize -m", 2, "-m needs a value");
	expect_error("tokenize 'hi'", 2, "needs -m MODEL");
	expect_error("generate -m " MODEL " -p hi -n abc", 2, "-n expects an integer, got 'abc'");
	expect_error("generate -m " MODEL " -p hi --temp x1", 2, "--temp expects a number");
	expect_error("generate -m " MODEL, 2, "-p PROMPT");
	expect_error("generate -m " MODEL " -p hi --top-p 0", 2, "--top-p");
	expect_error("info", 2, "needs one MODEL");
	/* usage errors exit 2 with one line (#40) */
	expect_error("generate -m " MODEL " -p hi --kv-type-k zz", 2, "--kv-type-k 'zz': must be f32, f16, q8 or fp8");
	expect_error("batch -m " MODEL " -f x --kv-type q5", 2, "--kv-type 'q5'");
	expect_error("generate -m " MODEL " -p hi --draft " MODEL " -md " MODEL, 2, "give one");
	expect_error("generate -m " MODEL " -p hi --draft ngram -md " MODEL, 2, "exclude each other");
	expect_error("serve -m " MODEL " --draft model", 2, "--draft model needs -md");
	expect_error("replay -m " MODEL " -f x --overflow zz", 2, "--overflow must be drop, shift or refuse");
	CHECK_(!strchr(strchr(r.errout, '\n') + 1, '\n'), "one line, no usage after it: %s", r.errout);
	expect_error("generate -m " MODEL " -p hi --draft no/such.gguf", 1, "no/such.gguf");
	expect_error("info no/such.gguf", 1, "no/such.gguf: cannot open");
	expect_error("generate -m no/such.gguf -p hi", 1, "no/such.gguf");
	expect_error("generate -m " MODEL " -p 'Once upon a time there was' -c 4", 1, "context holds 4");
	/* a truncated model: a clear error, not a crash */
	FILE *in = fopen(MODEL, "rb");
	static char buf[200000];
	size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
	if (in)
		fclose(in);
	CHECK(write_file("build/test-trunc.gguf", buf, n) == 0);
	expect_error("info build/test-trunc.gguf", 1, "build/test-trunc.gguf");
	expect_error("generate -m build/test-trunc.gguf -p hi", 1, "past end of file");
	CHECK(write_file("build/test-trunc.gguf", "GGUF\x03\0\0\0", 8) == 0);
	expect_error("tokenize -m build/test-trunc.gguf hi", 1, "truncated");
	run_pagechat(&r, "generate -m " MODEL " -p 'Once upon a time' -n 20 -c 12 --temp 0");
	CHECK_(r.status == 0 && strstr(r.errout, "context limit of 12"), "%s", r.errout);
	run_pagechat(&r, "--help");
	CHECK(r.status == 0 && strstr(r.out, "generate") && strstr(r.out, "tokenize"));
	run_pagechat(&r, "generate --help");
	CHECK(r.status == 0 && strstr(r.out, "--repeat-penalty"));
	run_pagechat(&r, "replay --help");
	CHECK_(r.status == 0 && strstr(r.out, "history_tokens"), "%s", r.out);
}

/* generate --beams-all --ids against beam.tsv, and batch's "beams". */
static void test_beams_reference(void)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/beam.tsv") == 0);
	for (int i = 0; i < t.n_rows;) {
		char args[1024], prompt[256];
		snprintf(prompt, sizeof prompt, "%.*s", (int)strlen(t.rows[i][0]) - 2, t.rows[i][0] + 1);
		int w = atoi(t.rows[i][1]);
		snprintf(args, sizeof args, "generate -m %s -p '%s' --beams %d --beams-all --ids -n %s --kv-type f32",
			 MODEL, prompt, w, t.rows[i][2]);
		run_pagechat(&r, args);
		CHECK_(r.status == 0, "generate --beams: %s", r.errout);
		char *line = r.out;
		for (int k = 0; k < w && i < t.n_rows; k++, i++) {
			char *nl = strchr(line, '\n'), *tab = strchr(line, '\t');
			if (nl)
				*nl = '\0';
			bool ok = tab && !strcmp(tab + 1, t.rows[i][5]) && fabs(atof(line) - atof(t.rows[i][4])) <= 1e-3;
			CHECK_(ok, "beam.tsv '%s' rank %d: got '%s', want %s\t%s", prompt, k, line, t.rows[i][4],
			       t.rows[i][5]);
			line = nl ? nl + 1 : line + strlen(line);
		}
	}
	tsv_free(&t);
	/* the best beam alone, and the same search through batch */
	run_pagechat(&r, "generate -m " MODEL " -p 'Once upon a time' --beams 4 -n 16 --ids --kv-type f32");
	CHECK_(r.status == 0 && !strncmp(r.out, "432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337\n",
					 64), "best beam: '%s'", r.out);
	const char *req = "{\"prompt\": \"Once upon a time\", \"beams\": 4, \"max_tokens\": 16}\n";
	CHECK(write_file("build/test-beams.jsonl", req, strlen(req)) == 0);
	run_pagechat(&r, "batch -m " MODEL " -f build/test-beams.jsonl --kv-type f32");
	CHECK_(r.status == 0 && strstr(r.out, "\"beam\": 3, \"logprob\": -4.553") &&
	       strstr(r.out, "\"ids\": [432, 383, 286, 261, 376, 268, 414, 422") &&
	       strstr(r.out, "\"beam_blocks_if_unshared\": 8"), "batch beams: %s %s", r.out, r.errout);
	run_pagechat(&r, "generate -m " MODEL " -p 'x' --beams 17");
	CHECK_(r.status == 2 && strstr(r.errout, "--beams: 17 is out of range (0..16"), "%s", r.errout);
	run_pagechat(&r, "generate -m " MODEL " -p 'x' --beams 2 --temp 0.3 -n 4");
	CHECK(r.status == 0 && strstr(r.errout, "do not apply to beam search"));
	run_pagechat(&r, "generate -m " MODEL " -p 'x' --beams-all");
	CHECK(r.status == 2 && strstr(r.errout, "need --beams"));
}

/* The CPU backend's notes (kern_cpu_notice) reach stderr once, from the app,
 * and change nothing else. */
static void test_cpu_notice(void)
{
	run_result r;
	setenv("PAGECHAT_ISA", "bogus", 1);
	run_pagechat(&r, "generate -m " MODEL " -p 'Once upon a time' --temp 0 -n 12");
	unsetenv("PAGECHAT_ISA");
	const char *note = "pagechat: PAGECHAT_ISA: unknown instruction set 'bogus' (auto, scalar, avx2, "
			   "avx512); using the best available\n";
	const char *at = strstr(r.errout, note);
	CHECK_(r.status == 0 && at && !strstr(at + strlen(note), "PAGECHAT_ISA"), "stderr '%s'", r.errout);
	CHECK_(!strncmp(r.out, ", there was a little girl named Lily.", 37), "got '%s'", r.out);
}

int main(void)
{
	test_tokenize_reference();
	test_beams_reference();
	test_generate_reference();
	test_logits_reference();
	test_info();
	test_errors();
	test_cpu_notice();
	return TEST_DONE();
}
