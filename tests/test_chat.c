/* tests/test_chat.c: the chat UI's logic without a terminal: saving and
 * loading conversations (atomic JSON, the streaming journal a kill -9 leaves,
 * the session, Markdown), word wrapping of styled UTF-8, and the block map's
 * classes, grouping and figures. (Conversations and their prompts:
 * tests/test_conv.c.) */
#include "conv/conv.h"
#include "kernels/kvq.h"
#include "tests/fulldisk.h"
#include "tests/run.h"
#include "tests/test.h"
#include "ui/poolmap.h"
#include "ui/store.h"
#include "ui/wrap.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR "build/test-chat"

/* ---- saving ---- */

static void make_chat(conv *c)
{
	conv_init(c, "n\u00e4me \"q\"", "story", "Line one\nline two \u65e5\u672c");
	conv_add(c, CONV_USER, "hi\tthere", 8);
	int a = conv_add(c, CONV_ASSISTANT, "well, \"yes\"\n", 12);
	snprintf(c->msgs[a].finish, sizeof c->msgs[a].finish, "length");
	c->msgs[a].n_gen = 12;
	c->msgs[a].ttft_ms = 4.5;
	c->msgs[a].tpot_ms = 0.25;
	conv_add(c, CONV_USER, "again", 5);
	a = conv_add(c, CONV_ASSISTANT, "", 0);
	conv_set_error(c, a, "KV pool full");
	snprintf(c->msgs[a].finish, sizeof c->msgs[a].finish, "error");
}

static bool same_chat(const conv *a, const conv *b)
{
	if (strcmp(a->name, b->name) || strcmp(a->system, b->system) || strcmp(a->prompt_name, b->prompt_name) ||
	    a->n_msgs != b->n_msgs)
		return false;
	for (int i = 0; i < a->n_msgs; i++) {
		const conv_msg *x = &a->msgs[i], *y = &b->msgs[i];
		if (x->role != y->role || x->len != y->len || memcmp(x->text, y->text, x->len) ||
		    strcmp(x->finish, y->finish) || (x->error == NULL) != (y->error == NULL) ||
		    (x->error && strcmp(x->error, y->error)) || x->n_gen != y->n_gen ||
		    x->ttft_ms != y->ttft_ms || x->tpot_ms != y->tpot_ms)
			return false;
	}
	return true;
}

static void test_save_load(void)
{
	conv c, d;
	make_chat(&c);
	err e = {0};
	CHECK_(store_save(&c, DIR "/a.json", &e) == 0, "%s", e.msg);
	CHECK_(store_load(&d, DIR "/a.json", &e) == 0, "%s", e.msg);
	CHECK(same_chat(&c, &d));
	conv_deinit(&d);
	/* readable: one message a line, plain keys */
	static char text[8192];
	slurp(DIR "/a.json", text, sizeof text);
	CHECK(strstr(text, "\"format\": \"pagechat-chat 1\""));
	CHECK(strstr(text, "    {\"role\": \"user\", \"content\": \"hi\\tthere\"}"));
	/* no temporary file is left behind */
	CHECK(access(DIR "/a.json.tmp.0", F_OK) != 0);

	/* damaged files name the file and what is wrong */
	write_file(DIR "/bad1.json", "{\"format\": \"other\"}", 19);
	CHECK(store_load(&d, DIR "/bad1.json", &e) == -1 && strstr(e.msg, "bad1.json: format"));
	const char *bad2 = "{\"format\": \"pagechat-chat 1\", \"name\": \"x\", \"system_prompt\": \"\", "
			   "\"system\": \"\", \"messages\": [{\"role\": \"robot\", \"content\": \"\"}]}";
	write_file(DIR "/bad2.json", bad2, strlen(bad2));
	CHECK(store_load(&d, DIR "/bad2.json", &e) == -1 && strstr(e.msg, "messages[0].role"));
	write_file(DIR "/bad3.json", "{", 1);
	CHECK(store_load(&d, DIR "/bad3.json", &e) == -1 && strstr(e.msg, "bad3.json: line 1"));
	CHECK(store_load(&d, DIR "/none.json", &e) == -1 && strstr(e.msg, "none.json: cannot open"));
	conv_deinit(&c);
}

/* Saved figures out of range (#42.2: "ttft_ms": 1e120 once overflowed the
 * answer's figures line): the chat loads, each damaged number is left out
 * and named in the answer's note, the good ones stay, and saving it again
 * writes a file that loads without the note growing. */
static void test_damaged_figures(void)
{
	const char *text = "{\"format\": \"pagechat-chat 1\", \"name\": \"x\", \"system_prompt\": \"\", "
			   "\"system\": \"\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
			   "{\"role\": \"assistant\", \"content\": \"yes\", \"finish\": \"stop\", \"tokens\": -3, "
			   "\"ttft_ms\": 1e120, \"tpot_ms\": 12.5, \"draft_proposed\": 2.5e10, \"draft_accepted\": 2, "
			   "\"prompt_tokens\": 40, \"cached_tokens\": 41}]}";
	write_file(DIR "/figures.json", text, strlen(text));
	conv d;
	err e = {0};
	CHECK_(store_load(&d, DIR "/figures.json", &e) == 0, "%s", e.msg);
	if (d.n_msgs != 2)
		return;
	const conv_msg *m = &d.msgs[1];
	CHECK_EQ_INT(m->n_gen, 0);
	CHECK_NEAR(m->ttft_ms, 0, 0);
	CHECK_NEAR(m->tpot_ms, 12.5, 0);
	CHECK_EQ_INT(m->n_proposed, 0);
	CHECK_EQ_INT(m->n_accepted, 0); /* above the (left out) proposals */
	CHECK_EQ_INT(m->n_prompt, 40);
	CHECK_EQ_INT(m->n_cached, 0);   /* above the prompt */
	CHECK_(m->note && strstr(m->note, "damaged") && strstr(m->note, "ttft_ms 1e+120") &&
	       strstr(m->note, "tokens -3") && strstr(m->note, "draft_proposed 2.5e+10") &&
	       strstr(m->note, "cached_tokens 41") && !strstr(m->note, "tpot_ms"), "note '%s'", m->note);
	CHECK(d.msgs[0].note == NULL);
	CHECK_(store_save(&d, DIR "/figures2.json", &e) == 0, "%s", e.msg);
	conv f;
	CHECK_(store_load(&f, DIR "/figures2.json", &e) == 0, "%s", e.msg);
	CHECK(f.n_msgs == 2 && f.msgs[1].note && !strcmp(f.msgs[1].note, m->note));
	if (f.n_msgs == 2)
		conv_deinit(&f);
	conv_deinit(&d);
}

/* The journal: what streamed after the last save comes back after a crash,
 * exactly once, whichever of the two writes the crash fell between. */
static void test_journal(void)
{
	conv c, d;
	err e = {0};
	conv_init(&c, "j", "story", "S");
	conv_add(&c, CONV_USER, "Go", 2);
	int a = conv_add(&c, CONV_ASSISTANT, "", 0);
	const char *path = DIR "/j.json";
	CHECK(store_save(&c, path, &e) == 0);
	store_journal j = {0};
	CHECK(store_journal_begin(&j, path, &c, a, &e) == 0);
	const char *pieces[] = {" The", " dog", " \u00e9t\u00e9", " ran"};
	for (int i = 0; i < 2; i++) {
		conv_append(&c, a, pieces[i], strlen(pieces[i]));
		store_journal_append(&j, pieces[i], strlen(pieces[i]));
	}
	/* kill -9 here: the file has "", the journal " The dog" */
	CHECK(store_load(&d, path, &e) == 0);
	CHECK_(!strcmp(d.msgs[1].text, " The dog") && !strcmp(d.msgs[1].finish, "interrupted"), "'%s'",
	       d.msgs[1].text);
	conv_deinit(&d);
	/* a periodic save, then more text; a crash right after the save but
	 * before the journal restarts replays nothing twice */
	CHECK(store_save(&c, path, &e) == 0);
	CHECK(store_load(&d, path, &e) == 0 && !strcmp(d.msgs[1].text, " The dog"));
	conv_deinit(&d);
	CHECK(store_journal_begin(&j, path, &c, a, &e) == 0);
	for (int i = 2; i < 4; i++) {
		conv_append(&c, a, pieces[i], strlen(pieces[i]));
		store_journal_append(&j, pieces[i], strlen(pieces[i]));
	}
	CHECK(store_load(&d, path, &e) == 0);
	CHECK_(!strcmp(d.msgs[1].text, " The dog \u00e9t\u00e9 ran"), "'%s'", d.msgs[1].text);
	conv_deinit(&d);
	/* the end: saved, journal gone */
	snprintf(c.msgs[a].finish, sizeof c.msgs[a].finish, "stop");
	CHECK(store_save(&c, path, &e) == 0);
	store_journal_end(&j);
	CHECK(access(DIR "/j.json.stream", F_OK) != 0);
	CHECK(store_load(&d, path, &e) == 0 && same_chat(&c, &d));
	conv_deinit(&d);
	/* a journal for another message is ignored */
	write_file(DIR "/j.json.stream", "pagechat-stream 1 0 0\nzzz", 25);
	CHECK(store_load(&d, path, &e) == 0 && same_chat(&c, &d));
	conv_deinit(&d);
	store_journal_remove(path);
	CHECK(access(DIR "/j.json.stream", F_OK) != 0);
	conv_deinit(&c);
}

static void test_markdown_session(void)
{
	conv c;
	make_chat(&c);
	err e = {0};
	CHECK(store_export_md(&c, DIR "/c.md", &e) == 0);
	static char md[8192];
	slurp(DIR "/c.md", md, sizeof md);
	CHECK(!strncmp(md, "# n\u00e4me \"q\"\n\n> **System prompt (story):** Line one", 40));
	CHECK(strstr(md, "## You\n\nhi\tthere\n\n## Assistant\n\nwell, \"yes\"\n"));
	CHECK(strstr(md, "*(length)*") && strstr(md, "*Error: KV pool full*"));
	CHECK(store_export_md(&c, DIR "/no/such/dir.md", &e) == -1 && strstr(e.msg, "cannot write"));
	conv_deinit(&c);
	/* completion mode: an answer an empty line made go on is one text, its
	 * word whole, the note once after the last part */
	conv_init(&c, "cont", "story", "");
	conv_add(&c, CONV_USER, "Lily", 4);
	int a = conv_add(&c, CONV_ASSISTANT, " went to the pa", 15);
	snprintf(c.msgs[a].finish, sizeof c.msgs[a].finish, "length");
	conv_add(&c, CONV_USER, "", 0);
	a = conv_add(&c, CONV_ASSISTANT, "rk and", 6);
	snprintf(c.msgs[a].finish, sizeof c.msgs[a].finish, "length");
	conv_add(&c, CONV_USER, "", 0);
	a = conv_add(&c, CONV_ASSISTANT, " sang.", 6);
	snprintf(c.msgs[a].finish, sizeof c.msgs[a].finish, "stop");
	CHECK(store_export_md(&c, DIR "/cont.md", &e) == 0);
	slurp(DIR "/cont.md", md, sizeof md);
	CHECK_(!strcmp(md, "# cont\n\n## You\n\nLily\n\n## Assistant\n\n went to the park and sang.\n\n"), "%s", md);
	conv_deinit(&c);

	const char *files[] = {"a.json", "b \u00e9.json"};
	CHECK(store_session_save(DIR, files, 2, 1, &e) == 0);
	char **got;
	int n, active;
	CHECK(store_session_load(DIR, &got, &n, &active, &e) == 0);
	CHECK(n == 2 && active == 1 && !strcmp(got[1], files[1]));
	for (int i = 0; i < n; i++)
		free(got[i]);
	free(got);
	CHECK(store_session_load(DIR "/no", &got, &n, &active, &e) == 0 && n == 0);
	mkdir(DIR "/s", 0700);
	const char *bad = "{\"format\": \"pagechat-session 1\", \"tabs\": [\"../x\"]}";
	write_file(DIR "/s/session.json", bad, strlen(bad));
	CHECK(store_session_load(DIR "/s", &got, &n, &active, &e) == -1 && strstr(e.msg, "tabs[0]"));

	/* the data directory follows XDG_DATA_HOME, then HOME */
	char dir[4096];
	setenv("XDG_DATA_HOME", DIR "/xdg", 1);
	CHECK(store_data_dir(dir, sizeof dir, &e) == 0 && !strcmp(dir, DIR "/xdg/pagechat"));
	CHECK(access(DIR "/xdg/pagechat", F_OK) == 0);
	unsetenv("XDG_DATA_HOME");
	setenv("HOME", DIR "/home", 1);
	CHECK(store_data_dir(dir, sizeof dir, &e) == 0 && !strcmp(dir, DIR "/home/.local/share/pagechat"));
}

/* Every writer of the store against what must never be written through or
 * over (issue #25), and a FIFO where a chat should be (never waited on). */
static void test_store_hardening(void)
{
	conv c, d;
	make_chat(&c);
	err e = {0};
	write_file(DIR "/victim", "precious", 8);
	CHECK(symlink("victim", DIR "/link.json") == 0);
	CHECK(store_save(&c, DIR "/link.json", &e) == -1 && strstr(e.msg, "symbolic link"));
	CHECK(store_export_md(&c, DIR "/link.json", &e) == -1 && strstr(e.msg, "symbolic link"));
	CHECK(store_export_md(&c, "/dev/null", &e) == -1 && strstr(e.msg, "device"));
	/* a journal's name planted as a link: refused, the target intact */
	CHECK(store_save(&c, DIR "/k.json", &e) == 0);
	CHECK(symlink("victim", DIR "/k.json.stream") == 0);
	store_journal j = {0};
	CHECK(store_journal_begin(&j, DIR "/k.json", &c, 3, &e) == -1 && strstr(e.msg, "symbolic link"));
	static char buf[64];
	slurp(DIR "/victim", buf, sizeof buf);
	CHECK(!strcmp(buf, "precious"));
	/* a FIFO instead of a chat, a journal or a session: an error at once */
	CHECK(mkfifo(DIR "/fifo.json", 0600) == 0);
	double t0 = now_s();
	CHECK(store_load(&d, DIR "/fifo.json", &e) == -1 && strstr(e.msg, "FIFO"));
	unlink(DIR "/k.json.stream");
	CHECK(mkfifo(DIR "/k.json.stream", 0600) == 0);
	CHECK(store_load(&d, DIR "/k.json", &e) == 0 && same_chat(&c, &d));
	conv_deinit(&d);
	mkdir(DIR "/f", 0700);
	CHECK(mkfifo(DIR "/f/session.json", 0600) == 0);
	char **got;
	int n, active;
	CHECK(store_session_load(DIR "/f", &got, &n, &active, &e) == -1 && strstr(e.msg, "FIFO"));
	CHECK(now_s() - t0 < 5);
	/* a data directory any user may write in */
	mkdir(DIR "/open", 0700);
	chmod(DIR "/open", 0777);
	setenv("XDG_DATA_HOME", DIR "/open", 1);
	char dir[4096];
	CHECK(store_data_dir(dir, sizeof dir, &e) == 0);
	chmod(DIR "/open/pagechat", 0777);
	CHECK(store_data_dir(dir, sizeof dir, &e) == -1 && strstr(e.msg, "writable by every user"));
	unsetenv("XDG_DATA_HOME");
	/* a full disk: the save fails naming the file; the old one stays whole */
	if (full_disk_mount(DIR "/full")) {
		CHECK(store_save(&c, DIR "/full/c.json", &e) == 0);
		static char before[8192], after[8192];
		slurp(DIR "/full/c.json", before, sizeof before);
		for (int i = 0; i < 600; i++) /* 31 KiB: more than the disk holds */
			conv_append(&c, 2, "and on and on, and on and on, and on and on, and on ", 52);
		CHECK(store_save(&c, DIR "/full/c.json", &e) == -1 && strstr(e.msg, "No space left"));
		slurp(DIR "/full/c.json", after, sizeof after);
		CHECK(!strcmp(before, after));
		CHECK(system("test \"$(ls -A " DIR "/full)\" = c.json") == 0);
		full_disk_umount(DIR "/full");
	}
	conv_deinit(&c);
}

/* ---- wrapping ---- */

static void line_text(const wrap_doc *d, int i, char *out, size_t cap)
{
	size_t n = 0;
	const wrap_line *l = &d->lines[i];
	for (int k = 0; k < l->n_segs && n + 1 < cap; k++) {
		const wrap_seg *s = &d->segs[l->seg + k];
		size_t m = MIN(s->len, cap - n - 1);
		memcpy(out + n, d->text + s->off, m);
		n += m;
	}
	out[n] = '\0';
}

static void test_wrap(void)
{
	wrap_doc d = {0};
	char buf[256];
	wrap_para(&d, 5);
	wrap_text(&d, "you> ", 5, 1);
	wrap_text(&d, "the quick brown fox jumps", 25, 2);
	wrap_layout(&d, 14);
	CHECK_EQ_INT(d.n_lines, 3);
	line_text(&d, 0, buf, sizeof buf);
	CHECK_(!strcmp(buf, "you> the quick"), "'%s'", buf);
	CHECK(d.lines[0].n_segs == 2 && d.segs[0].style == 1 && d.segs[1].style == 2);
	line_text(&d, 1, buf, sizeof buf);
	CHECK_(!strcmp(buf, "brown fox") && d.lines[1].indent == 5, "'%s'", buf);
	line_text(&d, 2, buf, sizeof buf);
	CHECK(!strcmp(buf, "jumps") && d.lines[2].indent == 5);

	/* wide characters take two columns; a long word breaks inside; '\n' breaks */
	wrap_clear(&d);
	wrap_para(&d, 0);
	const char *s = "\u65e5\u672c\u8a9e\u306e\u6587 abcdefghij\nx";
	wrap_text(&d, s, strlen(s), 0);
	wrap_para(&d, 0);
	wrap_para(&d, 0);
	wrap_text(&d, "end", 3, 0);
	wrap_layout(&d, 6);
	const char *want[] = {"\u65e5\u672c\u8a9e", "\u306e\u6587", "abcdef", "ghij", "x", "", "end"};
	CHECK_EQ_INT(d.n_lines, (int)ARRAY_LEN(want));
	for (int i = 0; i < d.n_lines && i < (int)ARRAY_LEN(want); i++) {
		line_text(&d, i, buf, sizeof buf);
		CHECK_(!strcmp(buf, want[i]), "line %d: '%s' vs '%s'", i, buf, want[i]);
	}
	CHECK_EQ_INT(wrap_width("h\u00e9llo \u4e16\u754c", strlen("h\u00e9llo \u4e16\u754c")), 10);
	/* bytes that are not UTF-8 take a column each and never split a line wrongly */
	uint32_t cp;
	CHECK(wrap_char("\xe2\x82", 2, &cp) == 1 && cp == 0xFFFD);
	CHECK(wrap_char("\xc0\xaf", 2, &cp) == 1 && cp == 0xFFFD);
	CHECK(wrap_char("\xf0\x9f\x98\x80", 4, &cp) == 4 && cp == 0x1F600);
	wrap_clear(&d);
	wrap_text(&d, "\xff\xfe\xfd\xfc", 4, 0);
	wrap_layout(&d, 2);
	CHECK_EQ_INT(d.n_lines, 2);
	wrap_free(&d);
}

/* ---- the block map ---- */

static void test_poolmap(void)
{
	core_block_info b[] = {
		{BLK_FREE, -1, 0}, {BLK_CACHED, -1, 0}, {BLK_USED, 1, 1}, {BLK_PARTIAL, 1, 1},
		{BLK_SHARED, 2, 2}, {BLK_PINNED, 1, 1}, {BLK_PINNED, 1, 3}, {BLK_PARTIAL, 2, 2},
	};
	enum poolmap_class want[] = {PM_FREE, PM_CACHED, PM_USED, PM_PARTIAL, PM_SHARED, PM_PINNED,
				     PM_PINNED_SHARED, PM_SHARED};
	for (size_t i = 0; i < ARRAY_LEN(b); i++)
		CHECK_EQ_INT(poolmap_classify(&b[i]), want[i]);
	/* every class has its own glyph, in UTF-8 and in ASCII */
	for (int i = 0; i < PM_N_CLASSES; i++)
		for (int j = 0; j < i; j++) {
			CHECK(strcmp(poolmap_glyph(i, true), poolmap_glyph(j, true)));
			CHECK(strcmp(poolmap_glyph(i, false), poolmap_glyph(j, false)));
		}
	CHECK_EQ_INT(poolmap_group(256, 300), 1);
	CHECK_EQ_INT(poolmap_group(600, 280), 3);
	poolmap_cell cells[8];
	CHECK_EQ_INT(poolmap_cells(b, 8, 1, NULL, cells), 8);
	CHECK(cells[6].cls == PM_PINNED_SHARED && cells[6].conv == 1 && cells[0].conv == -1);
	/* a group shows its most notable block, in its majority owner's colour */
	CHECK_EQ_INT(poolmap_cells(b, 8, 3, NULL, cells), 3);
	CHECK(cells[0].cls == PM_USED && cells[0].conv == 1);
	CHECK(cells[1].cls == PM_SHARED);
	CHECK(cells[2].cls == PM_PINNED_SHARED && cells[2].conv == 1);

	link_snapshot s = {.n_blocks = 256, .block_tokens = 16, .n_ctx = 2048, .prefill_tps = 1234.4, .decode_tps = 99};
	s.st = (core_stats){.blocks_used = 10, .blocks_cached = 20, .blocks_free = 246, .slots_filled = 150,
			    .slots_alloc = 160, .blocks_shared = 4, .blocks_pinned = 8, .waste = 0.031,
			    .waste_contig = 0.912, .prompt_tokens = 200, .cached_tokens = 96, .n_waiting = 1,
			    .n_running = 2, .kv_type_k = KV_F16, .kv_type_v = KV_F16, .kv_vs_f16 = 1};
	poolmap_figures f;
	poolmap_format(&s, NULL, &f);
	const char *lines[] = {"blocks 256 x 16 tokens", "KV f16/f16: 1.00x the tokens of f16",
			       "used 10  cached 20  free 226", "pinned 8 blocks  held 150 tok",
			       "sharing saves nothing now", "cache skipped 96/200 prompt tok",
			       "waste: paged 3.1% of held slots; 91.2% if each reserved 2048 tok",
			       "copy-on-write: 0 blocks copied", "tok/s  prefill 1234  decode 99",
			       "queue 1 waiting  2 running"};
	for (size_t i = 0; i < ARRAY_LEN(lines); i++)
		CHECK_(!strcmp(f.line[i], lines[i]), "'%s' vs '%s'", f.line[i], lines[i]);
	/* every compact form fits a 33-column panel */
	for (int i = 0; i < f.n; i++)
		CHECK_(strlen(f.compact[i]) <= 33, "'%s'", f.compact[i]);
	CHECK_NEAR(poolmap_hit_rate(&s.st), 0.48, 1e-12);
	/* the line with the types shows 8-bit rows' capacity against f16 */
	s.st.kv_type_k = KV_Q8, s.st.kv_type_v = KV_FP8, s.st.kv_vs_f16 = 1.94;
	poolmap_format(&s, NULL, &f);
	CHECK_(!strcmp(f.line[1], "KV q8/fp8: 1.94x the tokens of f16") && !strcmp(f.line[2], lines[2]), "'%s'",
	       f.line[1]);
	/* K/V on a device: where they live, one more line (none on the CPU),
	 * "CPU" for its host memory (not the host tier's "RAM") */
	CHECK_EQ_INT(f.n, 11);
	s.st.kv_dev_bytes = INT64_C(3) << 30, s.st.kv_host_bytes = 900 << 20;
	s.st.kv_dev_layers = 60, s.st.n_layers = 80;
	poolmap_format(&s, NULL, &f);
	CHECK_(f.n == 12 && !strcmp(f.line[11], "KV on GPU 3.0G (60/80 layers), CPU 900M"), "'%s'", f.line[11]);
	/* idle: the waste of the last answers (remembered), the last copy named;
	 * one pinned block, one copy: no plural (#40 items 5 and 15) */
	poolmap_memo memo = {.has_busy = true, .waste = 0.05, .waste_contig = 0.5, .cow_block = 7, .cow_tab = 2};
	s.st.n_running = 0, s.st.slots_alloc = 0, s.st.cow_copies = 1, s.st.blocks_pinned = 1;
	poolmap_format(&s, &memo, &f);
	CHECK_(!strcmp(f.line[6], "waste (last answers): paged 5.0% of held slots; 50.0% if each reserved 2048 tok"),
	       "'%s'", f.line[6]);
	CHECK_(!strcmp(f.line[7], "copy-on-write: 1 block copied (last #7, tab 2)"), "'%s'", f.line[7]);
	CHECK_(!strcmp(f.line[3], "pinned 1 block  held 150 tok"), "'%s'", f.line[3]);
	/* idle, nothing ran yet: the pinned prompts' tables against a whole
	 * context each (two tables of 32 tokens: 1 - 64/4096) */
	core_seq_info pins[] = {{.conv = 1, .index = -1, .n_blocks = 2, .n_tokens = 32, .first = 0},
				{.conv = 2, .index = -1, .n_blocks = 2, .n_tokens = 32, .first = 2}};
	int32_t pin_blocks[] = {0, 1, 0, 1};
	s.seqs = pins, s.n_seqs = 2, s.seq_blocks = pin_blocks;
	poolmap_format(&s, NULL, &f);
	CHECK_(!strcmp(f.line[6], "waste (pinned prompts): paged 0.0% of held slots; 98.4% if each reserved 2048 tok"),
	       "'%s'", f.line[6]);
	/* sharing: the tables' lengths added up less their distinct blocks (4 - 2) */
	CHECK_(!strcmp(f.line[4], "sharing saves 32 tokens = 2 blocks (0.8% of the pool)"), "'%s'", f.line[4]);
	/* a running tab's own pin is no second copy: with a table per consumer,
	 * refcounts that count the pin too (3 on block 0) do not change it */
	core_block_info m[64] = {{BLK_PINNED, 1, 3, 0, 0}, {BLK_PINNED, 1, 2, 0, 0}, {BLK_USED, 1, 1, 0, 0},
				 {BLK_FREE, -1, 0, 0, 0}};
	for (int i = 4; i < 64; i++)
		m[i] = m[3];
	s.map = m, s.n_blocks = 4;
	CHECK_EQ_INT(poolmap_saved_blocks(&s), 2);
	s.n_seqs = 1, s.st.blocks_pinned = 2; /* one table left: it shares with none */
	poolmap_format(&s, NULL, &f);
	CHECK_(!strcmp(f.line[4], "sharing saves nothing now"), "'%s'", f.line[4]);
	/* without tables (a server's snapshot): references less distinct blocks */
	s.n_seqs = 0;
	CHECK_EQ_INT(poolmap_saved_blocks(&s), 3);
	poolmap_format(&s, NULL, &f);
	CHECK_(!strcmp(f.line[4], "sharing saves 48 tokens = 3 blocks (75.0% of the pool)"), "'%s'", f.line[4]);
	s.n_blocks = 64;
	poolmap_format(&s, NULL, &f);
	CHECK_(!strcmp(f.line[4], "sharing saves 48 tokens = 3 blocks (4.7% of the pool)"), "'%s'", f.line[4]);
	s.n_blocks = 4;
	/* the lower tiers: cached blocks per tier and each tier's share of the
	 * prompt tokens (200: 96 cached, 16 from host memory, 32 from disk);
	 * blocks and the disk's bytes said apart */
	s.st.host_blocks = 64, s.st.host_keyed = 5, s.st.host_swapped = 1, s.st.has_store = true;
	s.st.store_writable = true, s.st.store_bytes = 3 << 20, s.st.cached_host = 16, s.st.cached_store = 32;
	poolmap_format(&s, NULL, &f);
	CHECK_(f.n == 14 && !strcmp(f.line[12], "cached blocks: pool 20  RAM 6; disk 3.0M bytes"), "'%s'", f.line[12]);
	CHECK_(!strcmp(f.line[13], "hit pool 24.0% RAM 8.0% disk 16.0%"), "'%s'", f.line[13]);
	s.seqs = NULL, s.seq_blocks = NULL;
	s.map = NULL;
}

/* The draft's speed-up against no draft from the decode steps' counters:
 * drafted steps that take 600 tokens in 0.5 s (1200 t/s) against plain ones
 * that take 100 in 0.05 s (2000 t/s) are slower: 0.60x. */
static void test_speedup(void)
{
	core_stats st = {.spec_dec_steps = 150, .spec_dec_tokens = 600, .spec_dec_us = 500000,
			 .plain_dec_steps = 100, .plain_dec_tokens = 100, .plain_dec_us = 50000};
	double want = (600 / 0.5) / (100 / 0.05);
	CHECK_NEAR(poolmap_speedup(600, 500000, 100, 50000), want, 1e-12);
	char line[2][96];
	CHECK_EQ_INT(poolmap_draft_lines(&st, line), 2);
	CHECK_(!strcmp(line[0], "speed-up 0.60x vs no draft: slower"), "'%s'", line[0]);
	CHECK_(!strcmp(line[1], "drafted 1200 t/s, plain 2000 t/s"), "'%s'", line[1]);
	/* three tokens a step at 1.5x a plain step's time: 2x */
	st.spec_dec_tokens = 150 * 3, st.spec_dec_us = 150 * 750; /* plain steps of 500 us, drafted of 750 */
	CHECK_NEAR(poolmap_speedup(st.spec_dec_tokens, st.spec_dec_us, 100, 50000), 2.0, 1e-12);
	poolmap_draft_lines(&st, line);
	CHECK_(!strcmp(line[0], "speed-up 2.00x vs no draft"), "'%s'", line[0]);
	/* no plain step (or no drafted one) yet: no figure, and why */
	st.plain_dec_steps = st.plain_dec_tokens = st.plain_dec_us = 0;
	CHECK_NEAR(poolmap_speedup(450, 112500, 0, 0), -1, 0);
	CHECK_EQ_INT(poolmap_draft_lines(&st, line), 1);
	CHECK_(!strcmp(line[0], "speed-up -  (no plain step yet)"), "'%s'", line[0]);
	st = (core_stats){0};
	CHECK_EQ_INT(poolmap_draft_lines(&st, line), 1);
	CHECK_(!strcmp(line[0], "speed-up -  (no drafted step yet)"), "'%s'", line[0]);
}

int main(void)
{
	setlocale(LC_ALL, "C.UTF-8");
	CHECK(system("rm -rf " DIR " && mkdir -p " DIR) == 0);
	test_save_load();
	test_damaged_figures();
	test_journal();
	test_markdown_session();
	test_store_hardening();
	test_wrap();
	test_poolmap();
	test_speedup();
	return TEST_DONE();
}
