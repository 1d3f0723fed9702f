/* tests/test_ui_tier.c: the chat on the tiered KV cache, through a
 * pseudo-terminal (tests/pty.h): a first run writes the system prompt's
 * blocks to the disk tier (--kv-store); a second run finds them there: the
 * pool panel's disk hit rate rises above 0, the map draws those blocks in
 * the disk colour, and the figures equal what `pagechat batch` counts for
 * the same prompt on the same store. --kv-host shows the host tier's
 * blocks, --kv-store off shows no tiers, the default store is made under
 * $XDG_CACHE_HOME (here HOME/.cache), and a bad --preempt fails. Every check
 * polls the screen with a timeout. */
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "build/test-ui-tier"
#define ARGS "--config " DIR "/ui.yaml"
#define WAIT 60.0
#define PAIR_DISK 'J' /* ui_int.h's PAIR_DISK (19) as the dump writes it */
#define SYSTEM "Once upon a time, in a little town by the sea, there lived a girl named Lily. " \
	"She loved to play on the beach with her dog Max, and every morning they looked for shells in the sand."

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 512\n"
	"kv_cache: {block_size: 16, pool_blocks: 64}\n"
	"sampling: {temperature: 0, max_tokens: 32, seed: 7}\n"
	"system_prompts:\n"
	"  story: \"" SYSTEM "\"\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;
static run_result res;

static long figure(const char *screen, const char *label)
{
	const char *s = strstr(screen, label);
	return s ? atol(s + strlen(label)) : -1;
}

static bool settled(const char *screen, const void *ctx)
{
	(void)ctx;
	return figure(screen, "pinned ") > 0 && strstr(screen, "0 waiting  0 running");
}

/* Cells of the map (the panel's rows under "KV pool") in the disk colour. */
static int disk_cells(const char *screen)
{
	int col, row = pty_find_cell(screen, "KV pool", &col), n = 0;
	for (int y = row + 1; row >= 0 && y < row + 4; y++)
		for (int x = col; x < col + 36; x++)
			n += pty_frame_pair(screen, y, x) == PAIR_DISK;
	return n;
}

static void start(const char *args)
{
	CHECK(pty_start(&app, DIR, args, 40, 130));
	CHECK_(pty_wait(&app, settled, NULL, WAIT), "never settled:\n%s", app.screen);
}

static void quit(void)
{
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

static void test_restart(void)
{
	start(ARGS " --kv-store " DIR "/store");
	CHECK_(strstr(app.screen, "cached: pool") && strstr(app.screen, "hit pool 0.0% RAM 0.0% disk 0.0%"),
	       "no tier lines:\n%s", app.screen);
	CHECK_EQ_INT(disk_cells(app.screen), 0);
	pty_send(&app, "Lily ran\r");
	CHECK(pty_wait_str(&app, " tok, length", WAIT));
	quit();
	/* again: the system prompt's blocks come from the disk */
	start(ARGS " --kv-store " DIR "/store");
	long cached = figure(app.screen, "cache skipped "), prompt = figure(strstr(app.screen, "cache skipped "), "/");
	CHECK_(cached >= 48 && prompt > cached, "cache skipped %ld/%ld:\n%s", cached, prompt, app.screen);
	const char *hit = strstr(app.screen, "hit pool 0.0% RAM 0.0% disk ");
	double disk = hit ? atof(hit + strlen("hit pool 0.0% RAM 0.0% disk ")) : -1;
	CHECK_(hit && disk > 99.9 * cached / prompt - 0.1 && disk < 100.0 * cached / prompt + 0.1,
	       "disk hits %.1f%% for %ld/%ld:\n%s", disk, cached, prompt, app.screen);
	CHECK_(disk_cells(app.screen) > 0, "no block in the disk colour:\n%s", app.screen);
	quit();
	/* batch on the same store and prompt counts the same */
	CHECK(write_file(DIR "/reqs.jsonl", "{\"prompt\": \"" SYSTEM "\", \"max_tokens\": 1}\n",
			 strlen("{\"prompt\": \"" SYSTEM "\", \"max_tokens\": 1}\n")) == 0);
	run_pagechat(&res, "batch -m ../shared/models/stories260K.gguf -f " DIR "/reqs.jsonl --block-size 16 "
			   "--temp 0 --kv-store " DIR "/store");
	CHECK_(res.status == 0, "%s", res.errout);
	const char *s = strstr(res.out, "\"summary\"");
	CHECK(s != NULL);
	if (s) {
		long bp = figure(s, "\"prompt_tokens\": "), bc = figure(s, "\"cached_tokens\": ");
		long bs = figure(s, "\"cached_store\": ");
		CHECK_(bp == prompt && bc == cached && bs == cached, "chat %ld/%ld, batch %ld/%ld (disk %ld)", cached,
		       prompt, bc, bp, bs);
	}
}

static void test_flags(void)
{
	start(ARGS " --kv-store off");
	CHECK_(!strstr(app.screen, "cached: pool"), "tiers with --kv-store off:\n%s", app.screen);
	quit();
	start(ARGS " --kv-host 1MiB --preempt swap --kv-store off");
	CHECK_(strstr(app.screen, "cached: pool") && strstr(app.screen, "disk -"), "%s", app.screen);
	quit();
	/* the default store: $XDG_CACHE_HOME/pagechat, here $HOME/.cache/pagechat */
	start(ARGS);
	struct stat sb;
	CHECK_(stat(DIR "/home/.cache/pagechat", &sb) == 0 && S_ISDIR(sb.st_mode), "no default store");
	CHECK(strstr(app.screen, "cached: pool") != NULL);
	quit();
	CHECK(pty_start(&app, DIR, ARGS " --preempt sometimes", 40, 130));
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 1);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR "/home") == 0);
	CHECK(write_file(DIR "/ui.yaml", config, strlen(config)) == 0);
	test_restart();
	test_flags();
	return TEST_DONE();
}
