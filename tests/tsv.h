/* tests/tsv.h: reading the reference tables in ../shared/testdata.
 * Header-only helpers for tests: a table is loaded whole, rows split on tabs. */
#ifndef PAGECHAT_TSV_H
#define PAGECHAT_TSV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define TSV_MAX_COLS 8

typedef struct tsv {
	char *buf;                    /* owned: the file, tabs/newlines replaced by NULs */
	int n_rows;                   /* data rows (header excluded) */
	char *(*rows)[TSV_MAX_COLS];  /* owned: [n_rows][col] pointers into buf */
} tsv;

/* Loads path; returns 0, or -1 (message printed) when it cannot be read. */
static inline int tsv_load(tsv *t, const char *path)
{
	memset(t, 0, sizeof *t);
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		fprintf(stderr, "cannot open %s\n", path);
		return -1;
	}
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	t->buf = xmalloc((size_t)n + 1);
	size_t got = fread(t->buf, 1, (size_t)n, fp);
	fclose(fp);
	t->buf[got] = '\0';
	int lines = 0;
	for (size_t i = 0; i < got; i++)
		lines += t->buf[i] == '\n';
	t->rows = xcalloc((size_t)lines + 1, sizeof *t->rows);
	char *p = t->buf;
	for (int line = 0; *p; line++) {
		char *end = strchr(p, '\n');
		if (end)
			*end = '\0';
		if (line > 0 && *p) {
			int c = 0;
			for (char *f = p; f && c < TSV_MAX_COLS; c++) {
				t->rows[t->n_rows][c] = f;
				f = strchr(f, '\t');
				if (f)
					*f++ = '\0';
			}
			t->n_rows++;
		}
		if (!end)
			break;
		p = end + 1;
	}
	return 0;
}

static inline void tsv_free(tsv *t)
{
	free(t->buf);
	free(t->rows);
}

/* Parses space-separated integers; returns the count (at most cap). */
static inline int tsv_ints(const char *s, int32_t *out, int cap)
{
	int n = 0;
	char *end;
	while (n < cap) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		out[n++] = (int32_t)v;
		s = end;
	}
	return n;
}

static inline int tsv_floats(const char *s, float *out, int cap)
{
	int n = 0;
	char *end;
	while (n < cap) {
		float v = strtof(s, &end);
		if (end == s)
			break;
		out[n++] = v;
		s = end;
	}
	return n;
}

/* Decodes a hex string into out (NUL-terminated); returns the byte count. */
static inline size_t tsv_hex(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	while (s[0] && s[1] && n + 1 < cap) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			break;
		out[n++] = (char)v;
		s += 2;
	}
	out[n] = '\0';
	return n;
}

#endif
