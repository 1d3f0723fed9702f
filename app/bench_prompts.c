/* app/bench_prompts.c: the prompt file of `bench --spec --prompts FILE`
 * (format in app/bench.h). */
#include "app/bench.h"

#include <stdlib.h>
#include <string.h>

/* The line starting at p (up to its '\n' or end), its length without '\r'. */
static size_t line_len(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	size_t n = (size_t)((nl ? nl : end) - p);
	return n > 0 && p[n - 1] == '\r' ? n - 1 : n;
}

static const char *next_line(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	return nl ? nl + 1 : end;
}

/* Ends the prompt being read (text from start to end) and checks it. */
static int close_prompt(bench_prompts *ps, const char *path, const char *start, const char *end, err *e)
{
	while (end > start && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	while (start < end && (*start == '\n' || *start == '\r'))
		start++;
	bench_prompt *bp = &ps->v[ps->n - 1];
	if (start == end) {
		err_set(e, "%s:%d: prompt of category '%s' is empty: write its text on the lines after the '==' line",
			path, bp->line, bp->category);
		return -1;
	}
	bp->text = xstrndup(start, (size_t)(end - start));
	return 0;
}

/* A "== CATEGORY" line: a new prompt. */
static int open_prompt(bench_prompts *ps, const char *path, int line, const char *p, size_t n, err *e)
{
	size_t i = 2;
	while (i < n && (p[i] == ' ' || p[i] == '\t'))
		i++;
	size_t m = n - i;
	while (m > 0 && (p[i + m - 1] == ' ' || p[i + m - 1] == '\t'))
		m--;
	if (m == 0 || m >= sizeof ps->v[0].category) {
		err_set(e, "%s:%d: '==' must be followed by a category name of 1..%zu characters", path, line,
			sizeof ps->v[0].category - 1);
		return -1;
	}
	if (ps->n == BENCH_MAX_PROMPTS) {
		err_set(e, "%s:%d: more than %d prompts: split the file", path, line, BENCH_MAX_PROMPTS);
		return -1;
	}
	bench_prompt *bp = &ps->v[ps->n++];
	bp->line = line;
	memcpy(bp->category, p + i, m);
	bp->category[m] = '\0';
	return 0;
}

int bench_prompts_load(bench_prompts *ps, const char *path, err *e)
{
	*ps = (bench_prompts){0};
	size_t len;
	char *buf = cli_read_file(path, &len, e);
	if (!buf)
		return -1;
	const char *end = buf + len, *text = NULL;
	int line = 0, rc = 0;
	for (const char *p = buf; p < end && !rc; p = next_line(p, end)) {
		size_t n = line_len(p, end);
		line++;
		if (n >= 2 && p[0] == '=' && p[1] == '=') {
			if (text)
				rc = close_prompt(ps, path, text, p, e);
			if (!rc)
				rc = open_prompt(ps, path, line, p, n, e);
			text = next_line(p, end);
		} else if (text || n == 0 || p[0] == '#') {
			continue; /* prompt text, or a blank or comment line before the first */
		} else if (n > 7 && !strncmp(p, "system:", 7)) {
			free(ps->system);
			size_t i = 7;
			while (i < n && p[i] == ' ')
				i++;
			ps->system = xstrndup(p + i, n - i);
		} else {
			err_set(e, "%s:%d: before the first '== CATEGORY' line only comments ('#'), blank lines and "
				"'system: TEXT' may come", path, line);
			rc = -1;
		}
	}
	if (!rc && text)
		rc = close_prompt(ps, path, text, end, e);
	else if (!rc)
		rc = (err_set(e, "%s: no prompts (each starts with a line '== CATEGORY')", path), -1);
	free(buf);
	if (rc)
		bench_prompts_free(ps);
	return rc;
}

void bench_prompts_free(bench_prompts *ps)
{
	for (int i = 0; i < ps->n; i++)
		free(ps->v[i].text);
	free(ps->system);
	*ps = (bench_prompts){0};
}
