/* tests/test_fuzz_replay.c: every saved fuzz input, replayed through the
 * fuzz targets' own entry points with the normal compiler (and under
 * `make test SANITIZE=1` with ASan/UBSan), so the corpus guards against
 * regressions without clang or libFuzzer.
 *
 * The Makefile (tests/fuzz/fuzz.mk) compiles each tests/fuzz/fuzz_NAME.c with
 * its entry points renamed to fuzz_NAME_one / fuzz_NAME_init and passes the
 * list of names as FUZZ_TARGETS (X(NAME) X(NAME) ...). For each target this
 * runs the empty input, then every file in tests/fuzz/corpus/NAME/ and
 * tests/fuzz/regress/NAME/, each as an exact-size heap copy; an input passes
 * when the target returns 0 and no FUZZ_CHECK fails on it. A target with no
 * corpus at all fails. Run from the repository root; with arguments
 * (TARGET FILE...) it replays only those files. */
#include "tests/test.h"

#include "base/base.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_TARGETS
#define FUZZ_TARGETS
#endif

int fuzz_failures;

typedef int fuzz_one_fn(const uint8_t *data, size_t size);
typedef int fuzz_init_fn(int *argc, char ***argv);

#define X(name) fuzz_one_fn fuzz_##name##_one; \
	__attribute__((weak)) fuzz_init_fn fuzz_##name##_init;
FUZZ_TARGETS
#undef X

struct target {
	const char *name;
	fuzz_one_fn *one;
	fuzz_init_fn *init;      /* NULL when the target has none */
};

#define X(name) {#name, fuzz_##name##_one, fuzz_##name##_init},
static const struct target targets[] = {FUZZ_TARGETS {NULL, NULL, NULL}};
#undef X

static uint8_t *read_all(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	size_t cap = 4096, len = 0, got;
	uint8_t *buf = xmalloc(cap);
	while ((got = fread(buf + len, 1, cap - len, fp)) > 0)
		if ((len += got) == cap)
			xgrow_size(&buf, &cap, len + 1, 1);
	fclose(fp);
	uint8_t *exact = xmalloc(len ? len : 1);   /* exact size: ASan sees overreads */
	memcpy(exact, buf, len);
	free(buf);
	*n = len;
	return exact;
}

/* Runs one input; true when it passed. */
static bool run_one(const struct target *t, const char *label, const uint8_t *data, size_t n)
{
	int before = fuzz_failures;
	int rc = t->one(data, n);
	bool ok = rc == 0 && fuzz_failures == before;
	CHECK_(ok, "fuzz target %s: input %s (%zu bytes) failed", t->name, label, n);
	return ok;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of dir (sorted, for stable output); returns how
 * many there were. A missing directory holds none. */
static int run_dir(const struct target *t, const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	char **names = NULL;
	size_t n = 0, cap = 0;
	for (struct dirent *de; (de = readdir(d)) != NULL;) {
		if (de->d_name[0] == '.')
			continue;
		xgrow_size(&names, &cap, n + 1, sizeof *names);
		names[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmp_str);
	int count = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		size_t len;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		uint8_t *data = read_all(path, &len);
		if (data) {
			run_one(t, path, data, len);
			count++;
		}
		free(data);
		free(names[i]);
	}
	free(names);
	return count;
}

/* test_fuzz_replay TARGET FILE...: replays just those inputs (with
 * FUZZ_DEBUG=1 in the environment, targets say what they made of them). */
static int replay_files(const char *name, int n, char **files)
{
	for (const struct target *t = targets; t->name; t++) {
		if (strcmp(t->name, name))
			continue;
		for (int i = 0; i < n; i++) {
			size_t len;
			uint8_t *data = read_all(files[i], &len);
			CHECK_(data != NULL, "%s: cannot read", files[i]);
			if (data)
				run_one(t, files[i], data, len);
			free(data);
		}
		return TEST_DONE();
	}
	fprintf(stderr, "no fuzz target '%s'\n", name);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc >= 3)
		return replay_files(argv[1], argc - 2, argv + 2);
	int n_targets = 0;
	for (const struct target *t = targets; t->name; t++, n_targets++) {
		if (t->init)
			t->init(&argc, &argv);
		char dir[512];
		uint8_t none = 0;
		run_one(t, "(empty)", &none, 0);
		snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", t->name);
		int n_corpus = run_dir(t, dir);
		snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", t->name);
		int n_regress = run_dir(t, dir);
		CHECK_(n_corpus > 0, "fuzz target %s has no corpus in tests/fuzz/corpus/%s/", t->name,
		       t->name);
		printf("fuzz %s: %d corpus and %d regression inputs replayed\n", t->name, n_corpus,
		       n_regress);
	}
	CHECK_(n_targets > 0, "no fuzz targets were compiled in (FUZZ_TARGETS is empty)");
	return TEST_DONE();
}
