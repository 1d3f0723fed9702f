/* tests/test_layout.c: the tree's structural rules, checked on the sources
 * (run from the repository root):
 * - includes point one way, in the order the data travels: app -> ui ->
 *   link, conv, config -> engine -> kv -> models -> kernels -> base (a folder
 *   includes only lower ones; link/, conv/ and config/ not each other);
 * - no file in engine/ or app/ is over 600 lines;
 * - no function over 80 lines outside the SIMD kernels (kernels/cpu/avx*.c);
 * - one batch runner: only engine/runner.c calls llama_forward outside models/;
 * - one number parser for flags: only app/opts.c calls strtol and friends in app/.
 * A function is counted from its opening brace in column 0 to the closing
 * brace in column 0 (the house style's layout). */
#include "tests/test.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const folders[] = {"base", "kernels", "kernels/cpu", "kernels/cuda", "models", "kv",
				      "engine", "conv", "link", "config", "ui", "app", "tools"};

/* The folders in the order the data travels, lowest first; folders of one
 * rank (conv/, link/, config/) may not include each other. */
static int rank_of(const char *folder)
{
	static const struct {
		const char *name;
		int rank;
	} order[] = {{"base", 0},   {"kernels", 1}, {"models", 2}, {"kv", 3},  {"engine", 4}, {"conv", 5},
		     {"link", 5},   {"config", 5},  {"ui", 6},     {"app", 7}, {"tools", 8}};
	for (int i = 0; i < (int)(sizeof order / sizeof *order); i++)
		if (!strcmp(folder, order[i].name))
			return order[i].rank;
	return -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	size_t got = fread(s, 1, (size_t)n, f);
	s[got] = '\0';
	fclose(f);
	return s;
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* The top folder of path ("engine" for "engine/core.c"). */
static void top_of(const char *path, char *out, size_t cap)
{
	size_t n = strcspn(path, "/");
	n = n < cap - 1 ? n : cap - 1;
	memcpy(out, path, n);
	out[n] = '\0';
}

static void check_includes(const char *path, const char *text)
{
	char top[32];
	top_of(path, top, sizeof top);
	int mine = rank_of(top);
	for (const char *l = text; (l = strstr(l, "#include \"")); l++) {
		const char *inc = l + 10;
		char to[32];
		top_of(inc, to, sizeof to);
		int theirs = rank_of(to);
		if (theirs < 0)
			continue;
		bool up = theirs > mine || (theirs == mine && strcmp(top, to));
		int len = (int)strcspn(inc, "\"");
		if (up) {
			CHECK_(0, "%s includes %.*s (a folder may include only lower ones)", path, len, inc);
			return;
		}
	}
	CHECK(1);
}

static int count_lines(const char *text)
{
	int n = 0;
	for (const char *p = text; *p; p++)
		n += *p == '\n';
	return n;
}

/* Functions: from a line "{" to the next line "}" (both in column 0). */
static void check_functions(const char *path, const char *text)
{
	if (strstr(path, "kernels/cpu/avx"))
		return; /* SIMD kernels: long straight-line register code is allowed */
	int line = 1, open_line = 0, bad = 0;
	for (const char *p = text; *p; p++) {
		bool bol = p == text || p[-1] == '\n';
		if (bol && p[0] == '{' && (p[1] == '\n' || p[1] == '\0'))
			open_line = line;
		else if (bol && p[0] == '}' && (p[1] == '\n' || p[1] == '\0') && open_line) {
			int body = line - open_line - 1;
			if (body > 80 && ++bad)
				fprintf(stderr, "%s:%d: function of %d lines (at most 80)\n", path, open_line, body);
			open_line = 0;
		}
		line += *p == '\n';
	}
	CHECK_(bad == 0, "%s: %d functions over 80 lines", path, bad);
}

static bool calls(const char *text, const char *fn)
{
	size_t n = strlen(fn);
	for (const char *p = text; (p = strstr(p, fn)); p += n) {
		bool word_start = p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
						 (p[-1] >= '0' && p[-1] <= '9'));
		if (word_start && p[n] == '(')
			return true;
	}
	return false;
}

static void check_file(const char *path, int *n_files)
{
	char *text = slurp(path);
	if (!text) {
		CHECK_(0, "cannot read %s", path);
		return;
	}
	(*n_files)++;
	check_includes(path, text);
	bool code = has_suffix(path, ".c");
	if (code && (!strncmp(path, "engine/", 7) || !strncmp(path, "app/", 4)))
		CHECK_(count_lines(text) <= 600, "%s has %d lines (at most 600 in engine/ and app/)", path,
		       count_lines(text));
	if (code)
		check_functions(path, text);
	if (code && strncmp(path, "models/", 7) && strcmp(path, "engine/runner.c"))
		CHECK_(!calls(text, "llama_forward"), "%s calls llama_forward (use engine/runner.h)", path);
	static const char *const parsers[] = {"strtol", "strtoll", "strtoul", "strtoull", "strtod",
					      "strtof", "atoi", "atol", "atof"};
	if (code && !strncmp(path, "app/", 4) && strcmp(path, "app/opts.c"))
		for (size_t i = 0; i < sizeof parsers / sizeof *parsers; i++)
			CHECK_(!calls(text, parsers[i]), "%s calls %s (flags parse in app/opts.c)", path,
			       parsers[i]);
	free(text);
}

int main(void)
{
	int n_files = 0;
	for (size_t f = 0; f < sizeof folders / sizeof *folders; f++) {
		DIR *d = opendir(folders[f]);
		CHECK_(d != NULL, "cannot open %s/ (run from the repository root)", folders[f]);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			const char *n = de->d_name;
			if (!has_suffix(n, ".c") && !has_suffix(n, ".h") && !has_suffix(n, ".cu") &&
			    !has_suffix(n, ".cuh"))
				continue;
			char path[512];
			snprintf(path, sizeof path, "%s/%s", folders[f], n);
			check_file(path, &n_files);
		}
		closedir(d);
	}
	CHECK(n_files > 50);
	return TEST_DONE();
}
