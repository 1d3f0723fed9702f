/* tests/fuzz/fuzz.h: what every fuzz target shares. Header-only, tests only.
 *
 * A target is one file tests/fuzz/fuzz_NAME.c that defines
 * LLVMFuzzerTestOneInput (and, if it must, LLVMFuzzerInitialize). It is built
 * twice (tests/fuzz/fuzz.mk): with clang and libFuzzer for `make fuzz`, and
 * with the normal compiler, -DFUZZ_REPLAY and the entry points renamed to
 * fuzz_NAME_one / fuzz_NAME_init, into tests/test_fuzz_replay, which runs
 * every saved input under `make test`. Nothing else needs to know a target
 * exists: the Makefile finds the files, the replay driver its corpus
 * (tests/fuzz/corpus/NAME/) and regressions (tests/fuzz/regress/NAME/).
 *
 * Targets check properties with FUZZ_CHECK: under libFuzzer a failure aborts,
 * so the input is saved as a crash; in the replay driver it is counted and
 * reported with the input's name. Structured inputs are cut into fields at
 * the byte FUZZ_SEP (0xFE never occurs in UTF-8, so text fields can hold any
 * text and any other invalid byte). */
#ifndef PAGECHAT_FUZZ_H
#define PAGECHAT_FUZZ_H

#include "base/base.h"
#include "models/gguf.h"
#include "models/tok.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef FUZZ_REPLAY
extern int fuzz_failures;        /* tests/test_fuzz_replay.c */
#define FUZZ_FAILED() (fuzz_failures++)
#else
#define FUZZ_FAILED() abort()
#endif

#define FUZZ_CHECK(c) do { if (!(c)) { \
	fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #c); \
	FUZZ_FAILED(); } } while (0)

#define FUZZ_SEP 0xfe

/* Room for any one decoded piece: a token's text, plus the decoder's pending
 * bytes, with every byte possibly turned into U+FFFD (3 bytes). */
#define FUZZ_PIECE_CAP (3 * (TOK_MAX_TOKEN_BYTES + 8) + 1)

/* Prints a note about the input when FUZZ_DEBUG is set in the environment
 * (replaying one input to see what a target made of it). */
#define FUZZ_NOTE(...) do { if (getenv("FUZZ_DEBUG")) { \
	fprintf(stderr, "fuzz: " __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* A read position in the input. Reads past the end give zeros. */
typedef struct fuzz_in {
	const uint8_t *p;        /* borrowed from the fuzzer */
	size_t n;
} fuzz_in;

static inline uint8_t fuzz_byte(fuzz_in *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

/* The bytes up to the next FUZZ_SEP (which is consumed) or the end. */
static inline fuzz_in fuzz_field(fuzz_in *in)
{
	const uint8_t *sep = in->n ? memchr(in->p, FUZZ_SEP, in->n) : NULL;
	fuzz_in f = {in->p, sep ? (size_t)(sep - in->p) : in->n};
	size_t used = sep ? f.n + 1 : f.n;
	in->p += used;
	in->n -= used;
	return f;
}

/* An exact-size heap copy (ASan sees any read past n), NUL-terminated one
 * byte further only when nul is set. */
static inline char *fuzz_copy(const void *p, size_t n, bool nul)
{
	char *q = xmalloc(MAX(n + (nul ? 1 : 0), (size_t)1));
	if (n)
		memcpy(q, p, n);
	if (nul)
		q[n] = '\0';
	return q;
}

/* Whether s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF): an independent check of what decoders promise. */
static inline bool fuzz_utf8_ok(const char *s, size_t n)
{
	const uint8_t *u = (const uint8_t *)s;
	for (size_t i = 0; i < n;) {
		uint8_t c = u[i];
		size_t need = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
			: c >= 0xf0 && c <= 0xf4 ? 4 : 0;
		if (need == 0 || need > n - i)
			return false;
		uint32_t cp = need == 1 ? c : c & (0xffu >> (need + 1));
		for (size_t k = 1; k < need; k++) {
			if ((u[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (u[i + k] & 0x3f);
		}
		static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < min_cp[need] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
			return false;
		i += need;
	}
	return true;
}

/* The shared data directory: $PAGECHAT_SHARED, else ../shared (targets run
 * from the repository root). */
static inline const char *fuzz_shared(void)
{
	const char *s = getenv("PAGECHAT_SHARED");
	return s && *s ? s : "../shared";
}

/* A path in a private directory for targets that read files (made on first
 * use under $TMPDIR, else /dev/shm, else /tmp; emptied and removed at exit).
 * The result is a static buffer: copy it before the next call. */
static char fuzz_tmp_dir_[256];

static inline void fuzz_tmp_remove_(void)
{
	DIR *d = opendir(fuzz_tmp_dir_);
	char path[512];
	for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", fuzz_tmp_dir_, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(fuzz_tmp_dir_);
}

static inline const char *fuzz_tmp(const char *name)
{
	static char path[512];
	char *dir = fuzz_tmp_dir_;
	if (!dir[0]) {
		const char *base = getenv("TMPDIR");
		if (!base || !*base)
			base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(dir, sizeof fuzz_tmp_dir_, "%s/pagechat-fuzz-XXXXXX", base);
		if (!mkdtemp(dir)) {
			perror(dir);
			abort();
		}
		atexit(fuzz_tmp_remove_);
	}
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return path;
}

/* Writes data[n] to the file at path, or removes it when data is NULL. */
static inline void fuzz_write(const char *path, const void *data, size_t n)
{
	if (!data) {
		unlink(path);
		return;
	}
	FILE *fp = fopen(path, "wb");
	if (!fp || (n && fwrite(data, 1, n, fp) != n) || fclose(fp)) {
		perror(path);
		abort();
	}
}

/* The real vocabularies the text targets run on, by index (any int: taken
 * modulo FUZZ_N_VOCABS): SentencePiece (Llama 2, Phi-3, stories260K) and
 * byte-level BPE (Llama 3, Qwen3, GPT-2). Loaded on first use and kept for
 * the life of the process; a missing file aborts with its name. */
#define FUZZ_N_VOCABS 6

static inline const tok *fuzz_vocab(unsigned i)
{
	static const char *const files[FUZZ_N_VOCABS] = {
		"models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-phi-3.gguf",
		"models/stories260K.gguf", "models/vocab/ggml-vocab-llama3.gguf",
		"models/vocab/ggml-vocab-qwen3.gguf", "models/vocab/ggml-vocab-gpt-2.gguf",
	};
	static tok *toks[FUZZ_N_VOCABS];
	i %= FUZZ_N_VOCABS;
	if (!toks[i]) {
		char path[4096];
		err e = {0};
		snprintf(path, sizeof path, "%s/%s", fuzz_shared(), files[i]);
		gguf_file *f = gguf_open(path, &e);
		toks[i] = f ? tok_new(f, &e) : NULL;
		gguf_close(f);
		if (!toks[i]) {
			fprintf(stderr, "fuzz: %s (set PAGECHAT_SHARED to the shared directory)\n", e.msg);
			abort();
		}
	}
	return toks[i];
}

#endif
