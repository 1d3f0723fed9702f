/* tests/test_crash.c: crash recovery. The chat is killed with SIGKILL at a
 * random moment while an answer streams, 20 times over; after each kill every
 * saved conversation file is complete JSON (saves are atomic: no half-written
 * file) and `--resume` brings back every message sent so far. The kill
 * moments come from a fixed seed (the delays are not assertions). */
#include "models/json.h"
#include "tests/pty.h"
#include "tests/run.h"
#include "tests/test.h"

#include <dirent.h>
#include <signal.h>
#include <string.h>

#define TDIR "build/test-crash"
#define ARGS "--config " TDIR "/crash.yaml"
#define WAIT 30.0
#define KILLS 20

static const char config[] =
	"model: ../shared/models/stories260K.gguf\n"
	"context: 2048\n"
	"kv_cache: {block_size: 16, pool_blocks: 400}\n"
	"sampling: {temperature: 0.8, max_tokens: 0, seed: 7}\n"
	"tabs:\n"
	"  - name: one\n"
	"ui: {refresh_ms: 50}\n";

static pty_app app;

/* Every file in the chats folder parses as JSON (journals are line files and
 * skipped); returns how many chat files there are, or -1 on a broken one. */
static int check_saved(char *all, size_t cap)
{
	char path[sizeof app.dir + 32];
	snprintf(path, sizeof path, "%s/data/pagechat", app.dir);
	DIR *d = opendir(path);
	int n = 0;
	all[0] = '\0';
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".json"))
			continue;
		char f[sizeof path + 300];
		snprintf(f, sizeof f, "%s/%s", path, de->d_name);
		static char buf[1 << 20];
		slurp(f, buf, sizeof buf);
		err e = {0};
		json_doc *doc = json_parse(buf, strlen(buf), &e);
		if (!doc) {
			fprintf(stderr, "%s: %s\n", f, e.msg);
			n = -1;
			break;
		}
		json_free(doc);
		strncat(all, buf, cap - strlen(all) - 1);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static bool shows(const char *screen, const void *s)
{
	return strstr(screen, s) != NULL;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	CHECK(system("rm -rf " TDIR " && mkdir -p " TDIR "/home") == 0);
	CHECK(write_file(TDIR "/crash.yaml", config, strlen(config)) == 0);
	uint64_t rng = 2026;
	static char saved[1 << 21];
	int resumed = 0, intact = 0;
	for (int i = 0; i < KILLS; i++) {
		CHECK(pty_start(&app, TDIR, i ? ARGS " --resume" : ARGS, 40, 120));
		if (!pty_wait(&app, shows, "1:one", WAIT)) {
			CHECK_(0, "kill %d: the app did not come back:\n%s", i, app.screen);
			pty_kill(&app);
			break;
		}
		char msg[64];
		snprintf(msg, sizeof msg, "Turn %d of the story\r", i);
		pty_send(&app, msg);
		/* let it stream for a random while, then SIGKILL */
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		double until = pty_now() + 0.05 + (double)(rng >> 40) / (double)(1 << 24) * 0.4;
		while (pty_now() < until) {
			pty_drain(&app);
			usleep(5000);
		}
		pty_kill(&app);
		int n = check_saved(saved, sizeof saved);
		intact += n >= 1;
		/* every message sent so far was saved before the kill */
		bool all = n >= 1;
		for (int k = 0; k <= i && all; k++) {
			snprintf(msg, sizeof msg, "Turn %d of the story", k);
			all = strstr(saved, msg) != NULL;
		}
		resumed += all;
		CHECK_(all, "kill %d: a sent message is missing from the saved chats", i);
	}
	/* a last clean start shows the conversation: the last question, above
	 * the answer that streamed until the kill (scrolled to when that answer
	 * is longer than the screen: how long it grew depends on the machine) */
	CHECK(pty_start(&app, TDIR, ARGS " --resume", 40, 120));
	CHECK(pty_wait(&app, shows, "1:one", WAIT));
	bool seen = pty_wait(&app, shows, "Turn 19 of the story", 1.0);
	for (int up = 0; up < 40 && !seen; up++) {
		pty_send(&app, "\033[5~");
		seen = pty_wait(&app, shows, "Turn 19 of the story", 0.5);
	}
	CHECK_(seen, "not resumed:\n%s", app.screen);
	pty_send(&app, "/quit\r");
	CHECK_EQ_INT(pty_wait_exit(&app, WAIT), 0);
	CHECK_EQ_INT(intact, KILLS);
	CHECK_EQ_INT(resumed, KILLS);
	printf("crash recovery: %d kills, %d intact saves, %d resumes with every message\n", KILLS, intact,
	       resumed);
	return TEST_DONE();
}
