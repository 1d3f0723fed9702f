/* tests/fuzz/fuzz_remote.c: what the chat's remote engine reads from a
 * server (link/remote.h), on arbitrary bytes: the first byte picks the
 * reader, the rest is the server's body.
 *
 * - /metrics text: never fails; every figure it gives has a source name and
 *   the server kind is a short NUL-terminated name;
 * - /pagechat/v1/pool: a map that parses has as many blocks as its array,
 *   each in a known state; one that does not says why;
 * - an error body: one line, no control characters, within its buffer. */
#include "tests/fuzz/fuzz.h"

#include "link/remote.h"

static void metrics(const char *s, size_t n)
{
	link_figure fig[LF_N];
	char kind[32];
	rem_counters ctr = {.gen_tokens = -1};
	rem_parse_metrics(s, n, fig, kind, sizeof kind, &ctr);
	FUZZ_CHECK(strlen(kind) < sizeof kind);
	for (int f = 0; f < LF_N; f++)
		FUZZ_CHECK(!fig[f].have || fig[f].source[0]);
}

static void pool(const char *s, size_t n)
{
	link_snapshot snap = {0};
	err e = {0};
	if (rem_parse_pool(s, n, &snap, &e) == 0) {
		FUZZ_CHECK(snap.n_blocks >= 0 && snap.n_blocks <= snap.map_cap);
		for (int64_t b = 0; b < snap.n_blocks; b++)
			FUZZ_CHECK(snap.map[b].state <= BLK_PINNED);
	} else {
		FUZZ_CHECK(e.msg[0] != '\0');
	}
	link_snapshot_deinit(&snap);
}

static void error_text(const char *s, size_t n)
{
	char line[64];
	rem_error_text(s, n, line, sizeof line);
	size_t k = strlen(line);
	FUZZ_CHECK(k < sizeof line);
	for (size_t i = 0; i < k; i++)
		FUZZ_CHECK((unsigned char)line[i] >= ' ');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 3) {
	case 0: metrics(s, n); break;
	case 1: pool(s, n); break;
	default: error_text(s, n); break;
	}
	return 0;
}
