/* tests/real/test_run.c: what `make run` opens, driven through a terminal:
 * the chat on SmolLM2-135M-Instruct (the file make run fetches;
 * PAGECHAT_RUN_MODEL names another, such as its F32 copy), in chat mode with
 * the model's own template (ChatML), answers "What is the capital of
 * France?" greedily with a sentence naming Paris. The time to the answer is
 * printed, never checked. A missing model fails, never skips. */
#include "tests/pty.h"
#include "tests/test.h"

#include <stdlib.h>

#define DIR "build/test-real-run"
#define WAIT 120.0 /* seconds: a ceiling for a loaded machine */

static pty_app app;
static char wrote[4096];  /* the app's last terminal output (its error, if it dies) */

int main(void)
{
	const char *model = getenv("PAGECHAT_RUN_MODEL") ? getenv("PAGECHAT_RUN_MODEL")
							 : "build/models/SmolLM2-135M-Instruct.Q4_1.gguf";
	char args[1024];
	CHECK_(access(model, R_OK) == 0, "%s is missing (make models-smollm2 fetches it)", model);
	snprintf(args, sizeof args, "-m %s --temp 0 --no-panels", model);
	double t0 = pty_now();
	app.out = wrote;
	app.cap_out = sizeof wrote;
	CHECK(pty_start(&app, DIR, args, 30, 120));
	if (!pty_wait_str(&app, "1:one", WAIT)) {
		CHECK_(0, "no tab bar (the app %s); it wrote: %s", pty_alive(&app) ? "runs" : "ended", wrote);
		pty_kill(&app);
		return TEST_DONE();
	}
	CHECK_(strstr(app.screen, "chatml") != NULL, "not in chat mode with ChatML:\n%s", app.screen);
	double t1 = pty_now();
	pty_send(&app, "What is the capital of France?\r");
	CHECK_(pty_wait_str(&app, "Paris", WAIT), "no Paris in the answer:\n%s", app.screen);
	const char *bot = strstr(app.screen, "bot> ");
	CHECK_(bot && strstr(bot, "Paris"), "Paris is not in the answer:\n%s", app.screen);
	printf("make run's chat: open in %.2f s, Paris %.2f s after the question\n", t1 - t0, pty_now() - t1);
	pty_kill(&app);
	return TEST_DONE();
}
