/* app/cmd_demo.c: `pagechat demo`: a watchable tour of KV block reuse.
 *
 * The full-screen chat on the demo model with a script (ui_params.demo):
 * three tabs share one long system prompt, answer at once, a fork
 * mid-answer shares its blocks until they differ (copy-on-write), three
 * sampled answers share one prompt, and a squeeze on a small pool evicts
 * cached blocks and preempts. The engine is paced (each step lasts at least
 * a few milliseconds) so blocks are seen filling; --speed scales the pace
 * and the pauses. Any key ends the tour; the chat then goes on as usual.
 * `--script` prints the steps instead (for slides and for the tests). */
#include "app/cmds.h"

#include "kernels/kern.h"
#include "ui/ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char usage_demo[] =
	"usage: pagechat demo [-m MODEL] [--speed S] [--script]\n"
	"  A scripted tour of the KV-cache pool in the full-screen chat: three tabs\n"
	"  sharing a long system prompt, a fork mid-answer (copy-on-write), three\n"
	"  answers to one prompt, a squeeze that evicts and preempts. Each step is\n"
	"  captioned in the status bar; any key stops the tour and the chat is yours.\n"
	"  -m, --model FILE  the model (default: " DEMO_MODEL ")\n"
	"  --speed S         faster (2: twice as fast) or slower (0.5) than the tour's pace\n"
	"  --script          print the tour's steps and its system prompt, and exit\n"
	"  --threads N       compute threads (0: one per core)\n";

/* Long enough for 16 blocks and more on the demo model's vocabulary. */
static const char demo_system[] =
	"Once upon a time, in a small town near a big green forest, there lived a little girl named Lily. "
	"Lily had a red ball, a brown dog named Max and a best friend named Tom. Every morning Lily and Max "
	"walked to the park by the river. They liked to watch the ducks swim and the birds sing in the tall "
	"trees. One sunny day, Lily's mom gave her a basket with apples, bread and a jar of honey. \"Share it "
	"with your friends,\" she said with a big smile. Lily was happy. She ran to the park with Max and "
	"the basket. At the park, Tom was sitting on the swing. He looked sad because he had lost his blue "
	"kite in the wind. Lily gave him an apple and said, \"Don't be sad, Tom. We can look for your kite "
	"together.\" So Lily, Tom and Max looked under the slide, behind the big rock and near the pond. "
	"They asked the old man who fed the ducks, and the girl who sold ice cream. Nobody had seen the kite. "
	"Then Max barked and ran to the tallest tree in the park. ";

/* The tour. Tabs: 0 one, 1 two, 2 three (the start tabs), then the fork. */
static const ui_demo_step demo_steps[] = {
	{DEMO_CAPTION, 0, 0, "demo 1/6: three tabs, one long system prompt: computed once, pinned, "
			     "shared by all three (F1 twice: what the figures mean)"},
	{DEMO_WAIT, 0, 0, NULL}, {DEMO_PAUSE, 0, 30, NULL},
	{DEMO_CAPTION, 0, 0, "demo 2/6: the three tabs answer at once: each fills its own blocks "
			     "after the shared ones (block tables, right)"},
	{DEMO_LINE, 0, 0, "Lily looked up"}, {DEMO_LINE, 1, 0, "Tom said"}, {DEMO_LINE, 2, 0, "Max jumped"},
	{DEMO_WAIT, 0, 0, NULL}, {DEMO_PAUSE, 0, 30, NULL},
	{DEMO_CAPTION, 0, 0, "demo 3/6: a fork mid-answer (F4): the new tab reads the same blocks; "
			     "only the block being written is copied (copy-on-write)"},
	{DEMO_LINE, 0, 0, "The kite was"}, {DEMO_FORK, 0, 24, NULL},
	{DEMO_WAIT, 0, 0, NULL}, {DEMO_PAUSE, 0, 30, NULL},
	{DEMO_CAPTION, 0, 0, "demo 4/6: three answers to one prompt (/n 3): one prompt's blocks, "
			     "three block tables that split where the answers differ"},
	{DEMO_LINE, 1, 0, "/n 3 Then the wind"},
	{DEMO_WAIT, 0, 0, NULL}, {DEMO_PAUSE, 0, 20, NULL},
	{DEMO_LINE, 1, 0, "/pick 2"}, {DEMO_PAUSE, 0, 20, NULL},
	{DEMO_CAPTION, 0, 0, "demo 5/6: a squeeze: eight answers at once on a small pool: cached "
			     "blocks are evicted first, then the newest sequences are preempted"},
	{DEMO_LINE, 2, 0, "/n 8 At night"}, {DEMO_LINE, 0, 0, "In the morning"},
	{DEMO_WAIT, 0, 0, NULL}, {DEMO_PAUSE, 0, 30, NULL},
	{DEMO_CAPTION, 0, 0, "demo 6/6: your turn: type to chat; Ctrl-T new tab, F4 fork, /n 3, "
			     "/beams 3, F1 help"},
	{DEMO_PAUSE, 0, 40, NULL},
	{DEMO_END, 0, 0, "the tour is over: the chat is yours"},
};

/* --script: each step as a line. */
static void print_script(void)
{
	static const char *const names[] = {"caption", "type", "fork", "wait", "pause", "end"};
	printf("system\t%s\n", demo_system);
	for (size_t i = 0; i < ARRAY_LEN(demo_steps); i++) {
		const ui_demo_step *s = &demo_steps[i];
		printf("%s\t%d\t%d\t%s\n", names[s->kind], s->tab + 1, s->count, s->text ? s->text : "");
	}
}

int cmd_demo(int argc, char **argv, cli_device *dev)
{
	const char *model = DEMO_MODEL;
	float speed = 1.0f;
	bool script = false;
	int threads = 0;
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &model, P_NONE}, {"--speed", NULL, OPT_FLOAT, &speed, P_DEMO_SPEED},
		{"--script", NULL, OPT_FLAG, &script, P_NONE}, {"--threads", NULL, OPT_INT, &threads, P_THREADS},
	};
	if (cli_parse_opts("demo", argc, argv, opts, ARRAY_LEN(opts), NULL, 0) < 0)
		return EXIT_USAGE;
	if (script) {
		print_script();
		return 0;
	}
	if (!isatty(0) || !isatty(1)) {
		fprintf(stderr, "pagechat: demo: the tour needs a terminal (stdin and stdout); "
			"pagechat demo --script prints its steps\n");
		return EXIT_USAGE;
	}
	static const int colors[] = {6, 3, 2, 5, 4, 1};
	ui_prompt prompt = {"demo", demo_system};
	samp_params sp = samp_default_params();
	sp.temp = 0.8f, sp.seed = 42;
	ui_tab_spec tabs[] = {{"one", NULL, sp, 48}, {"two", NULL, sp, 48}, {"three", NULL, sp, 48}};
	ui_params p = {
		.model_path = model, .threads = cli_threads(threads, "--threads"), .context = 1024,
		.block_tokens = 16, .kv_type_k = KV_F16, .kv_type_v = KV_F16, .pool_blocks = 60,
		.chunk_tokens = 512, .samp = sp, .max_tokens = 48, .prompts = &prompt, .n_prompts = 1,
		.default_prompt = "demo", .tabs = tabs, .n_tabs = (int)ARRAY_LEN(tabs), .panels = true,
		.refresh_ms = 50, .tab_colors = colors, .n_tab_colors = (int)ARRAY_LEN(colors),
		.demo = demo_steps, .n_demo = (int)ARRAY_LEN(demo_steps), .demo_speed = speed,
		.min_step_ms = (int)(40 / speed),
	};
	err e = {0};
	if (!(p.kern = cli_kern(dev, &e)) || ui_run(&p, &e))
		return cli_fail(&e);
	return 0;
}
