/* tests/fuzz/fuzz_chat_view.c: a saved chat through everything the chat
 * does with it before anyone types: loaded (ui/store.h, its journal
 * replayed), laid out as its tab's view (chat mode with Markdown answers,
 * or completion mode) and drawn with the tab bar into a virtual screen
 * (ncurses writing to /dev/null), at a width the input picks. The damage
 * #42 found was here: a long name ran past the bar's label, a saved TTFT of
 * 1e120 past the answer's figures line.
 *
 * Input: fuzz_store's layout, so its corpus seeds this one: byte 0 options
 * (bit 0 write the journal, bit 1 a second tab, bit 2 mark the tab busy and
 * unread), byte 1 the template family (modulo TMPL_COUNT; TMPL_NONE and
 * TMPL_UNKNOWN are completion mode) and the screen's width (40 + byte % 160
 * columns), then fields at FUZZ_SEP: the chat file, the journal.
 *
 * Properties: nothing is read or written out of bounds (ASan, UBSan); a
 * chat that loads is drawn, its bar starts with the tab's number, every
 * view line fits the width it was laid out for, and a note the loader
 * made (a damaged figure) is in the view.
 *
 * The ui (no engine, a virtual screen) is tests/fuzz/fuzz_ui.h's. */
#include "tests/fuzz/fuzz_ui.h"

#include "models/tmpl.h"

/* Each message's note (a damaged figure the loader left out, a dropped
 * turn) is in t's view: chat mode draws each message's own. */
static void check_notes(const tab *t)
{
	const wrap_doc *d = &t->view;
	for (int i = 0; i < t->chat.n_msgs; i++) {
		const char *note = t->chat.msgs[i].note;
		if (note && fuzz_utf8_ok(note, strlen(note)))
			FUZZ_CHECK(memmem(d->text, d->n_text, note, strlen(note)) != NULL);
	}
}

static void draw(conv *c, uint8_t opt, enum tmpl_family fam, int cols)
{
	elink link = {.caps = LINK_TOKENS};
	tab *tabs[2];
	ui u;
	fuzz_ui(&u, &link, tabs, fam, cols);
	conv second;
	if (opt & 2)
		conv_copy(&second, c);
	tabs[u.n_tabs++] = fuzz_tab(c, 0);
	if (opt & 2)
		tabs[u.n_tabs++] = fuzz_tab(&second, 1);
	if (opt & 4) { /* an answer streaming into the last message (never sent anywhere) */
		tabs[0]->gen_req = 1;
		tabs[0]->gen_msg = tabs[0]->chat.n_msgs - 1;
		tabs[0]->unread = true;
	}
	bool chat_mode = !conv_completion_mode(&u.cm);
	fuzz_draw_tabs(&u);
	FUZZ_NOTE("%d messages, %d view lines at %d columns, %s mode", tabs[0]->chat.n_msgs, tabs[0]->view.n_lines,
		  cols, chat_mode ? "chat" : "completion");
	if (chat_mode)
		check_notes(tabs[0]);
	/* the same chat at a quarter of the width, scrolled to its top */
	wresize(u.w_chat, FUZZ_ROWS - 2, MAX(2, cols / 4));
	tab_scroll(&u, tabs[0], 1 << 20);
	fuzz_draw_tabs(&u);
	doupdate();
	fuzz_ui_end(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_in in = {data, size};
	uint8_t opt = fuzz_byte(&in), b1 = fuzz_byte(&in);
	enum tmpl_family fam = (enum tmpl_family)(b1 % TMPL_COUNT);
	fuzz_in file = fuzz_field(&in), journal = fuzz_field(&in);
	char path[512], jpath[600];
	snprintf(path, sizeof path, "%s", fuzz_tmp("view.json"));
	snprintf(jpath, sizeof jpath, "%s.stream", path);
	fuzz_write(path, file.p, file.n);
	fuzz_write(jpath, opt & 1 ? journal.p : NULL, journal.n);
	conv c;
	err e = {0};
	if (store_load(&c, path, &e) < 0) {
		FUZZ_CHECK(strstr(e.msg, path) != NULL);
		return 0;
	}
	draw(&c, opt, fam, 40 + b1 % 160);
	conv_deinit(&c);
	return 0;
}
