/* tests/test_ui_ctx.c: a conversation's context and the panel's figures in
 * the full-screen chat, through a pseudo-terminal (tests/pty.h): tabs that
 * never answered show no latency; pinned blocks never outnumber used and
 * cached ones; held counts live sequences' tokens (none when idle); decode tok/s with drafts stays near the tab's own rate and
 * comes down to 0 once idle; the context gauge in the tab bar and the panel
 * warns before a turn overflows, then the tab drops (or, with --overflow
 * shift, shifts out) the oldest turn and says so; after kill -9 the partial
 * answer shows its real token count; with Qwen3's template a system prompt
 * of exactly one block is pinned once and shared by two tabs. */
#include "models/json.h"
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#define TDIR "build/test-ui-ctx"
#define WAIT 30.0

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"draft_model: ngram\n"
	"context: {limit: 224, overflow: drop}\n"
	"sampling: {temperature: 0, max_tokens: 60, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"  - name: two\n"
	"ui: {refresh_ms: 50}\n";

static const char long_config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"draft_model: ngram\n"
	"context: 8192\n"
	"kv_cache: {pool_blocks: 600}\n"
	"sampling: {temperature: 0, max_tokens: 0, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static const char qwen_config[] =
	"model: build/models/replay-qwen3-vocab.gguf\n"
	"sampling: {temperature: 0, max_tokens: 8, seed: 7}\n"
	"system_prompts:\n"
	"  block: You are a helpful assistant who answers all questions briefly.\n"
	"default_system_prompt: block\n"
	"tabs:\n"
	"  - name: one\n"
	"  - name: two\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;

/* The number right after label (the first place a digit follows it), or -1. */
static double figure(const char *screen, const char *label)
{
	size_t n = strlen(label);
	for (const char *s = screen; (s = strstr(s, label)); s += n)
		if (s[n] >= '0' && s[n] <= '9')
			return atof(s + n);
	return -1;
}

static bool all_of(const char *screen, const void *ctx)
{
	for (const char *const *s = ctx; *s; s++)
		if (!strstr(screen, *s))
			return false;
	return true;
}

/* The tab bar shows no busy tab. */
static bool bar_idle(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *row = strchr(screen, '\n');
	row = row ? strchr(row + 1, '\n') : NULL;
	if (!row)
		return false;
	row++;
	size_t n = strcspn(row, "\n");
	return !memchr(row, '*', n) && !memchr(row, '%', n);
}

static bool rates_zero(const char *screen, const void *ctx)
{
	(void)ctx;
	return strstr(screen, "tok/s  prefill 0  decode 0") != NULL;
}

/* A frame while tab 1 streams, with the tab's own rate on the status line
 * and the panel's decode rate measured (the rate window is half a second). */
/* The status line's " N tok  R tok/s" (the active tab's own rate), or -1. */
static double tab_rate(const char *screen)
{
	for (const char *p = screen; (p = strstr(p, " tok/s")); p++) {
		const char *q = p;
		while (q > screen && q[-1] >= '0' && q[-1] <= '9')
			q--;
		if (q < p && q - screen >= 5 && !strncmp(q - 5, "tok  ", 5))
			return atof(q);
	}
	return -1;
}

/* The figures of the frame streaming_rate matched. */
typedef struct stream_figures {
	double tab, decode, held, used;
} stream_figures;

static bool streaming_rate(const char *screen, const void *ctx)
{
	stream_figures *f = (stream_figures *)ctx;
	*f = (stream_figures){tab_rate(screen), figure(screen, "decode "), figure(screen, "held "),
			      figure(screen, "used ")};
	return f->tab > 100 && f->decode > 0 && f->used >= 0;
}

typedef struct above {
	const char *label;
	double value;
} above;

static bool figure_above(const char *screen, const void *ctx)
{
	const above *a = ctx;
	return figure(screen, a->label) > a->value;
}

static void start(const char *yaml, const char *args)
{
	char a[512];
	snprintf(a, sizeof a, "--config " TDIR "/%s %s", yaml, args);
	CHECK(pty_start(&app, TDIR, a, 36, 120));
	CHECK_(pty_wait_str(&app, "1:one", WAIT), "no tab bar:\n%s", app.screen);
}

static void quit(void)
{
	pty_send(&app, "\025/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
}

/* One turn in the active tab, to its end (the panel's finished count goes
 * up: a short answer may be over before a frame shows it running). */
static void ask(const char *line)
{
	const char *idle[] = {"queue 0 waiting  0 running", NULL};
	CHECK(pty_wait(&app, all_of, idle, WAIT)); /* the warm-ups too */
	above f = {"finished ", figure(app.screen, "finished ")};
	char keys[256];
	snprintf(keys, sizeof keys, "%s\r", line);
	pty_send(&app, keys);
	CHECK_(pty_wait(&app, figure_above, &f, WAIT), "'%s' not answered:\n%s", line, app.screen);
	CHECK(pty_wait(&app, all_of, idle, WAIT));
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
}

static void test_figures(void)
{
	start("c.yaml", "");
	/* never answered: no latency; pins within the pool's used and cached blocks */
	const char *none[] = {"1:one    ttft       - tpot      -", "2:two    ttft       - tpot      -", NULL};
	CHECK_(pty_wait(&app, all_of, none, WAIT), "latency shown before any answer:\n%s", app.screen);
	CHECK(!strstr(app.screen, "0.0ms"));
	CHECK_(pty_wait(&app, figure_above, &(above){"pinned ", 0}, WAIT), "nothing pinned:\n%s", app.screen);
	double used = figure(app.screen, "used "), cached = figure(app.screen, "cached "),
	       pinned = figure(app.screen, "pinned ");
	CHECK_(pinned > 0 && pinned <= used + cached, "pinned %g, used %g, cached %g", pinned, used, cached);
	ask("Lily went to the park");
	CHECK_(pty_wait(&app, rates_zero, NULL, WAIT), "rates stayed up while idle:\n%s", app.screen);
	CHECK_(strstr(app.screen, "held 0 tok"), "idle, yet tokens held:\n%s", app.screen);
	/* the gauge: high, then full (the next turn will not fit), then the drop */
	ask("They played with a ball");
	const char *full[] = {"1:one ctx ", "/224!", " full", NULL};
	CHECK_(pty_wait(&app, all_of, full, WAIT), "no full gauge:\n%s", app.screen);
	ask("Then it rained");
	const char *dropped[] = {"[context full: 2 earlier messages dropped", NULL};
	CHECK_(pty_wait_ever(&app, all_of, dropped, WAIT), "no drop notice:\n%s", app.screen);
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	quit();
	/* shift: the same turns go, the rest keeps its K/V */
	start("c.yaml", "--overflow shift");
	CHECK(pty_wait_str(&app, "(full: shift)", WAIT));
	ask("Lily went to the park");
	ask("They played with a ball");
	ask("Then it rained");
	const char *shifted[] = {"[context full: 2 earlier messages", "shifted out", NULL};
	CHECK_(pty_wait_ever(&app, all_of, shifted, WAIT), "no shift notice:\n%s", app.screen);
	CHECK(pty_wait(&app, bar_idle, NULL, WAIT));
	quit();
}

/* The saved answer's generated ids (ids after ids_open) and its "tokens". */
static void saved_counts(int *n_ids, int *tokens)
{
	*n_ids = *tokens = -1;
	DIR *d = opendir(TDIR "/data/pagechat");
	struct dirent *de;
	static char text[1 << 20];
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "chat-", 5) || !strstr(de->d_name, ".json") || strstr(de->d_name, ".json."))
			continue;
		char path[512];
		snprintf(path, sizeof path, TDIR "/data/pagechat/%s", de->d_name);
		slurp(path, text, sizeof text);
		err e = {0};
		json_doc *doc = json_parse(text, strlen(text), &e);
		const json *msgs = doc ? json_get(json_root(doc), "messages") : NULL;
		for (size_t i = 0; msgs && i < msgs->n; i++) {
			const json *m = &msgs->items[i], *f = json_get(m, "finish"), *ids = json_get(m, "ids");
			const json *open = json_get(m, "ids_open"), *tok = json_get(m, "tokens");
			if (f && !strcmp(f->str, "interrupted") && ids && open && tok) {
				*n_ids = (int)ids->n - (int)open->num;
				*tokens = (int)tok->num;
			}
		}
		json_free(doc);
	}
	if (d)
		closedir(d);
}

static bool interrupted_count(const char *screen, const void *ctx)
{
	int *n = (int *)ctx;
	const char *s = strstr(screen, " tok, interrupted]");
	if (!s)
		return false;
	while (s > screen && s[-1] >= '0' && s[-1] <= '9')
		s--;
	*n = atoi(s);
	return true;
}

static void test_kill(void)
{
	CHECK(system("rm -rf " TDIR "/data") == 0);
	start("long.yaml", "");
	pty_send(&app, "Keep going\r");
	/* decode tok/s with drafts: target tokens over wall time, near the tab's own rate */
	stream_figures f;
	if (pty_wait_ever(&app, streaming_rate, &f, WAIT)) {
		/* held: the live sequence's tokens, within the blocks in use */
		CHECK_(f.held > 0 && f.held <= 16 * f.used, "held %g tokens in %g blocks", f.held, f.used);
		printf("while streaming with n-gram drafts: decode %.0f tok/s, the tab's own rate %.0f\n", f.decode,
		       f.tab);
		CHECK_(f.decode <= 3 * f.tab + 100, "decode %g tok/s against the tab's %g", f.decode, f.tab);
	}
	pty_kill(&app);
	start("long.yaml", "--resume");
	int shown = 0;
	CHECK_(pty_wait(&app, interrupted_count, &shown, WAIT), "no interrupted answer:\n%s", app.screen);
	quit();
	int n_ids, tokens;
	saved_counts(&n_ids, &tokens);
	printf("kill -9 after streaming: the answer shows %d tokens, %d ids saved\n", shown, n_ids);
	CHECK_(shown > 0 && shown == n_ids && tokens == n_ids, "shown %d tokens, saved %d, ids %d", shown, tokens, n_ids);
}

static bool pinned_shared_in_map(const char *screen, const void *ctx)
{
	(void)ctx;
	const char *g = "\u25a0";
	int n = 0;
	for (const char *p = screen; (p = strstr(p, g)); p += strlen(g))
		n++;
	return n >= 2;
}

static void test_one_block_prompt(void)
{
	start("qwen.yaml", "");
	/* the map shows it pinned and shared (the legend shows the glyph once) */
	CHECK_(pty_wait(&app, pinned_shared_in_map, NULL, WAIT), "not shared:\n%s", app.screen);
	/* both tabs' warm-ups done (the block shared by both), and neither is a
	 * finished request nor decoded a token (#40 item 16: "finished 2" and
	 * "decode 4" before any question); one block held, in the singular */
	const char *once[] = {"2:two", "pinned 1", "shared by 1,2", "finished 0", "decode 0", "they hold 1 block;",
			      NULL};
	CHECK_(pty_wait(&app, all_of, once, WAIT), "the one-block prompt is not pinned once:\n%s", app.screen);
	quit();
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " TDIR " && mkdir -p " TDIR "/home") == 0);
	CHECK(write_file(TDIR "/c.yaml", config, strlen(config)) == 0);
	CHECK(write_file(TDIR "/long.yaml", long_config, strlen(long_config)) == 0);
	CHECK(write_file(TDIR "/qwen.yaml", qwen_config, strlen(qwen_config)) == 0);
	test_figures();
	test_kill();
	test_one_block_prompt();
	return TEST_DONE();
}
