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

#include "base/files.h"
#include "kernels/kern.h"
#include "ui/store.h"
#include "ui/ui.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char usage_demo[] =
	"usage: pagechat demo [-m MODEL] [--speed S] [--script]\n"
	"  A scripted tour of the KV-cache pool in the full-screen chat: three tabs\n"
	"  sharing a long system prompt, a fork mid-answer (copy-on-write), three\n"
	"  answers to one prompt, a squeeze that evicts and preempts. Each step is\n"
	"  captioned in the status bar; any key stops the tour and the chat is yours.\n"
	"  -m, --model FILE  the model (default: " CHAT_MODEL " where make deps\n"
	"                    fetched it, so the tabs chat; else " DEMO_MODEL ")\n"
	"  --speed S         faster (2: twice as fast) or slower (0.5) than the tour's pace\n"
	"  --script          print the tour's steps and its system prompt, and exit\n"
	"  --threads N       compute threads (0: one per core)\n";

/* The system prompts: a story to go on for a model without a chat template,
 * a help desk's facts for a chat model. Each is long enough for 25 blocks
 * and more of 16 tokens (stories260K's vocabulary; SmolLM2's, Llama 3's and
 * Qwen3's), so that sharing them shows. */
static const char demo_story[] =
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

static const char demo_assistant[] =
	"You are Pip, the friendly help desk assistant of the Riverside Public Library. Answer visitors in "
	"two or three short sentences, using only the facts below; when something is not covered, say so and "
	"suggest asking at the front desk.\n"
	"Opening hours: Monday to Friday 9:00 to 20:00, Saturday 10:00 to 17:00, closed on Sundays and "
	"public holidays.\n"
	"Borrowing: a library card is free for anyone living in the county; bring a photo ID and a letter "
	"with your address. Adults may borrow up to 15 items for three weeks, children up to 10. Items can "
	"be renewed twice online unless someone has reserved them. Late returns cost 20 cents a day per item, "
	"at most 5 euros.\n"
	"Spaces: the quiet reading room is on the first floor. Group study rooms for up to six people can be "
	"booked for two hours a day at the front desk or online. The reading garden by the river is open "
	"from April to October when the weather allows. Only assistance dogs may come inside; other pets may "
	"wait in the garden on a lead.\n"
	"Events this week: Tuesday at 16:00, story time for children aged 3 to 6; Wednesday at 18:00, a "
	"beginners' class on e-books; Thursday at 19:00, a local author's talk on the history of the river "
	"mills; Saturday at 11:00, a family board-game morning.\n"
	"Other services: free Wi-Fi (the network RiversideGuest, no password), printing at 10 cents a page, "
	"a scanner, four public computers for an hour at a time, and a lost-and-found box at the entrance. "
	"The library cat, Biscuit, lives in the children's corner; please do not feed him.\n"
	"Getting here: buses 4 and 12 stop at Mill Bridge, two minutes' walk away; there are bicycle racks "
	"by the main door, and the car park behind the building is free for the first two hours.";

/* The tour. Tabs: 0 one, 1 two, 2 three (the start tabs), then the fork.
 * Every key a caption names is in the F1 help and docs/usage.md, followed
 * by a word of its row there (tests/test_demo.c checks). */
static const ui_demo_step demo_steps[] = {
	{DEMO_CAPTION, 0, 0, "demo 1/6: three tabs share one long system prompt: computed once, its blocks "
			     "pinned for all three (pinned+shared in the map, \"shared by 1,2,3\" under the "
			     "block tables). F1 help; F1 again: the figures.", NULL},
	{DEMO_WAIT, 0, 0, NULL, NULL}, {DEMO_PAUSE, 0, 30, NULL, NULL},
	{DEMO_CAPTION, 0, 0, "demo 2/6: the three tabs answer at once, each writing its own blocks after the "
			     "shared ones. Paged, only an answer's last block is part empty: \"waste\" against "
			     "a whole context reserved per answer.", NULL},
	{DEMO_LINE, 0, 0, "Lily looked up", "When is the library open on Saturday?"},
	{DEMO_LINE, 1, 0, "Tom said", "Can I bring my dog to the reading garden?"},
	{DEMO_LINE, 2, 0, "Max jumped", "What is on for children this week?"},
	{DEMO_WAIT, 0, 0, NULL, NULL}, {DEMO_PAUSE, 0, 30, NULL, NULL},
	{DEMO_CAPTION, 0, 0, "demo 3/6: F4 fork of tab 1 mid-answer: tab 4 reads the same blocks. The part-full "
			     "block both write next is copied first: copy-on-write (the panel names the copy).",
	 NULL},
	{DEMO_LINE, 0, 0, "The kite was", "Write a short welcome note for a new visitor."},
	{DEMO_FORK, 0, 24, NULL, NULL},
	{DEMO_WAIT, 0, 0, NULL, NULL}, {DEMO_PAUSE, 0, 30, NULL, NULL},
	{DEMO_CAPTION, 0, 0, "demo 4/6: /n 3: three sampled answers read one prompt's blocks; their tables part "
			     "where the answers differ, each first token copying the shared last block "
			     "(copy-on-write).", NULL},
	{DEMO_LINE, 1, 0, "/n 3 Then the wind", "/n 3 Suggest a friendly name for a new study room."},
	{DEMO_WAIT, 0, 0, NULL, NULL}, {DEMO_PAUSE, 0, 20, NULL, NULL},
	{DEMO_LINE, 1, 0, "/pick 2", NULL}, {DEMO_PAUSE, 0, 20, NULL, NULL},
	{DEMO_CAPTION, 0, 0, "demo 5/6: a squeeze: /n 8 in tab 3 while tab 1 answers, on a 60-block pool: "
			     "cached blocks are evicted first, then the newest answers are preempted (they "
			     "come back and recompute).", NULL},
	{DEMO_LINE, 0, 0, "In the morning", "How do I get there by bus?"},
	{DEMO_LINE, 2, 0, "/n 8 At night", "/n 8 Give me one tip for my first visit."},
	{DEMO_WAIT, 0, 0, NULL, NULL}, {DEMO_PAUSE, 0, 30, NULL, NULL},
	{DEMO_CAPTION, 0, 0, "demo 6/6: your turn: /pick 1..8: keep one answer; type to chat; Alt-o new tab, "
			     "F4 fork, /n 3 or /beams 3: several answers, F1 help. A key ends the tour.", NULL},
	{DEMO_PAUSE, 0, 40, NULL, NULL},
	{DEMO_END, 0, 0, "the tour is over: the chat is yours (the demo's chats stay apart from yours)", NULL},
};

/* The demo's own folder for its chats and session, DATA/demo (DATA: the
 * chat's, ui/store.h), emptied of the last demo's files: a demo leaves the
 * user's session and saved chats as they were. -1 with e filled. */
static int demo_data_dir(char *buf, size_t cap, err *e)
{
	if (store_data_dir(buf, cap, e))
		return -1;
	size_t n = strlen(buf);
	if (n + sizeof "/demo" > cap) {
		err_set(e, "%s: the data directory's path is too long", buf);
		return -1;
	}
	memcpy(buf + n, "/demo", sizeof "/demo");
	if (file_private_dir(buf, e))
		return -1;
	DIR *d = opendir(buf);
	for (struct dirent *de; d && (de = readdir(d));) {
		char path[8300];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", buf, de->d_name);
		if (de->d_name[0] != '.' && !lstat(path, &st) && S_ISREG(st.st_mode))
			unlink(path);
	}
	if (d)
		closedir(d);
	return 0;
}

/* --script: each step as a line. */
static void print_script(void)
{
	static const char *const names[] = {"caption", "type", "fork", "wait", "pause", "end"};
	printf("system\t%s\n", demo_story);
	printf("system-chat\t");
	for (const char *c = demo_assistant; *c; c++) /* one line: newlines as \n */
		fputs(*c == '\n' ? "\\n" : (char[2]){*c, 0}, stdout);
	printf("\n");
	for (size_t i = 0; i < ARRAY_LEN(demo_steps); i++) {
		const ui_demo_step *s = &demo_steps[i];
		printf("%s\t%d\t%d\t%s", names[s->kind], s->tab + 1, s->count, s->text ? s->text : "");
		printf(s->chat_text ? "\t%s\n" : "\n", s->chat_text);
	}
}

int cmd_demo(int argc, char **argv, cli_device *dev)
{
	const char *model = access(CHAT_MODEL, R_OK) == 0 ? CHAT_MODEL : DEMO_MODEL;
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
	static const int colors[] = {6, 2, 5, 4, 1}; /* no yellow: the shared blocks' colour */
	/* the names the chat picks by: "story" without a chat template, "assistant" with */
	static const ui_prompt prompts[] = {{"story", demo_story}, {"assistant", demo_assistant}};
	samp_params sp = samp_default_params();
	sp.temp = 0.8f, sp.seed = 42;
	ui_tab_spec tabs[] = {{"one", NULL, sp, 48}, {"two", NULL, sp, 48}, {"three", NULL, sp, 48}};
	ui_params p = {
		.model_path = model, .threads = cli_threads(threads, "--threads"), .context = 1024,
		.block_tokens = 16, .kv_type_k = KV_F16, .kv_type_v = KV_F16, .pool_blocks = 60,
		.chunk_tokens = 512, .samp = sp, .max_tokens = 48, .prompts = prompts,
		.n_prompts = (int)ARRAY_LEN(prompts), .tabs = tabs, .n_tabs = (int)ARRAY_LEN(tabs), .panels = true,
		.refresh_ms = 50, .tab_colors = colors, .n_tab_colors = (int)ARRAY_LEN(colors),
		.demo = demo_steps, .n_demo = (int)ARRAY_LEN(demo_steps), .demo_speed = speed,
		.min_step_ms = (int)(40 / speed),
	};
	err e = {0};
	char dir[4096];
	if (demo_data_dir(dir, sizeof dir, &e))
		return cli_fail(&e);
	p.data_dir = dir;
	if (!(p.kern = cli_kern(dev, &e)) || ui_run(&p, &e))
		return cli_fail(&e);
	return 0;
}
