/* ui/ui_int.h: the chat UI's state, shared by the files of ui/ (not a public
 * header). Everything here belongs to the UI thread.
 *
 * The files form a tree: each calls only files listed before it below (the
 * same order as the prototypes), never one after it; what must reach up does
 * so through a callback (ui.on_line) or by handing a result back
 * (ui.next_line). At the bottom: wrap.c, md.c (over wrap.c), store.c,
 * poolmap.c and ui_status.c (the status line, the active tab, prompts by
 * name). Then ui_term.c the terminal, ui_hist.c the figures' sparklines,
 * ui_rows.c each running sequence's block table under the map, ui_help.c the
 * F1 help, snapshot.c /snapshot, ui_server.c the side panel of a server's
 * view (--server), ui_edit.c the input box and $EDITOR, ui_input.c readline,
 * ui_load.c the model loading and the engine's start, ui_resume.c which
 * model --resume opens and which chats it can continue, ui_copy.c /copy,
 * ui_tab.c a tab's basics (saving, its answer's start and end), ui_beams.c
 * several answers to one turn (/n, /beams) and the choice among them,
 * ui_tabs.c the tabs (open, close, show, fork, the answers and their
 * events), ui_view.c the conversation view and the tab bar, ui_panel.c the
 * side panels, ui_open.c chats opened from disk as tabs, ui_chats.c the
 * saved-chat list, ui_saved.c the chats on disk beyond the open tabs
 * (--resume, damaged chats, /open, /raw, /save), ui_set.c /set and the
 * prompts, ui_model.c /model and /draft, ui_demo.c `pagechat demo`'s tour,
 * ui_cmd.c the slash commands' table, and ui.c, the root: the loop, the keys
 * and the frames. */
#ifndef PAGECHAT_UI_INT_H
#define PAGECHAT_UI_INT_H

#define NCURSES_WIDECHAR 1
#include <ncurses.h>
#include <signal.h>

#include "link/link.h"
#include "conv/conv.h"
#include "ui/store.h"
#include "ui/poolmap.h"
#include "ui/ui.h"
#include "ui/wrap.h"

/* Styles of the conversation view's text (wrap runs). */
enum ui_style { ST_PLAIN, ST_SYSTEM, ST_USER, ST_LABEL, ST_META, ST_ERROR, ST_CURSOR, ST_CHOSEN,
	ST_MD = 0x100 /* + the MD_* flags of ui/md.h: an answer's Markdown */ };

/* Private key codes (ui_term.c defines them), above anything terminfo hands out. */
#define KEY_ALT_DIGIT 0x6000 /* + 1..9: Alt-1..9 */
#define KEY_TAB_PREV  0x6010 /* Ctrl-PgUp, Alt-Left */
#define KEY_TAB_NEXT  0x6011 /* Ctrl-PgDn, Alt-Right */
#define KEY_NEWLINE   0x6012 /* Alt-Enter, Shift-Enter where the terminal tells */
#define KEY_PASTE     0x6013 /* bracketed paste begins (ESC [ 200 ~) */
#define KEY_PASTE_END 0x6014 /* ... ends (ESC [ 201 ~) */
#define KEY_META      0x6100 /* + c: Esc c within the escape delay (Alt-c), c < 0x80 */

/* Colour pairs: 1..n for the tabs, then these. */
enum { PAIR_ERROR = 16, PAIR_SHARED, PAIR_HOST, PAIR_DISK, PAIR_CODE };

typedef struct tab {
	conv chat;               /* the conversation (saved) */
	char file[96];           /* its file name in the data directory */
	int conv;                /* engine conversation id (unique, never reused) */
	int color;               /* index into the tab colours */
	samp_params samp;
	int max_tokens;
	uint64_t n_turns;        /* answers asked for (seeds vary with it) */
	int64_t gen_req;         /* the request streaming into gen_msg, or -1 */
	int gen_msg;
	int64_t warm_req;        /* the system-prompt prefill, or -1 */
	bool warm_waiting;       /* its prefill waits for another tab's of the same
	                            prompt, so that it finds those blocks cached */
	int n_prompt;            /* tokens of gen_req's prompt (0: not known, an engine
	                            without LINK_TOKENS counts it) */
	double t_submit, t_first;/* of gen_req (s); t_first 0 before the first token */
	int n_live;              /* tokens streamed into gen_msg */
	core_req_metrics live;   /* gen_req's figures so far, from its last TOKEN
	                            event (the engine's clock, as the final ones) */
	double prefill_frac;     /* prefill progress from the block map, -1 unknown */
	bool unread;             /* text arrived while another tab was shown */
	char *locked;            /* owned; why the tab cannot answer (a chat made on
	                            another model, opened to be read), or NULL */
	bool follow;             /* the view sticks to the bottom */
	int top;                 /* first line shown when not following */
	wrap_doc view;           /* laid-out conversation */
	uint64_t view_version;   /* chat.version it was built from (+1: never) */
	int view_width;
	char *draft;             /* owned; the input line while the tab is hidden */
	int draft_point;
	store_journal journal;
	double last_save;        /* s */
	bool unsaved;            /* streamed text only the journal holds */
	struct alts *alts;       /* owned; several answers to the last turn (/n, /beams)
	                            streaming or waiting for a pick, or NULL */
	int next_n, next_beams;  /* the next turn asks for this many answers (/n N
	                            or /beams W without a prompt); 0: one */
	char *note;              /* owned; when set the tab is read-only and shows this
	                            text instead of a chat, and is never saved (a
	                            damaged chat, whose file stays as it is, or the
	                            saved-chat list, which has no file) */
} tab;

enum ui_mode { MODE_NORMAL, MODE_HELP, MODE_CONFIRM_CLOSE, MODE_CONFIRM_SAVE, MODE_CONFIRM_DELETE };

/* Why closing the active tab is asked about (MODE_CONFIRM_CLOSE). */
enum ui_close_why { CLOSE_BUSY, CLOSE_DRAFT };

enum { STATUS_MAX_ROWS = 3 };

typedef struct ui {
	const ui_params *p;
	/* the model and the engine */
	llama_model *model;      /* owned */
	tok *tok;                /* owned */
	llama_model *draft;      /* owned; the draft model, or NULL */
	tok *draft_tok;          /* owned; its vocabulary */
	enum tmpl_family fam;
	conv_model cm;           /* how tabs render their conversations (tok borrowed) */
	char *model_path;        /* owned; the model file in use (resume may pick it) */
	char *draft_path;        /* owned; the draft in use (a file, "ngram"), or NULL */
	int64_t model_size;      /* its identity (models/gguf.h, gguf_file_id) */
	uint64_t model_header;
	char model_name[64];
	elink *link;             /* owned; the engine the tabs talk to: the local one on
	                            model (ui_load.c), or a server's (--server) */
	link_view view;          /* its latest view drawn (snap: the local engine's;
	                            server: what a server tells) */
	poolmap_memo server_memo;/* a server's pool: its last busy waste (ui_server.c) */
	int32_t *block_last;     /* owned; [snap.n_blocks] the conversation that used
	                            each block last (cached blocks keep its tint) */
	struct ui_hist *hist;    /* owned; the figures' history (ui_hist.c), or NULL */
	bool store_noted;        /* the disk tier's turning off was said */
	bool first_run;          /* no chat ran in this data folder before: empty tabs
	                            point at `pagechat demo` (not in the tour itself) */
	struct rows_prev *rows_prev; /* owned; the tables of the snapshot before (ui_rows.c) */
	const char *default_prompt;
	/* tabs */
	tab **tabs;              /* owned; [n_tabs] in bar order */
	int n_tabs, cap_tabs;
	int active;
	int next_conv;
	int64_t next_req;
	char data_dir[4096];
	/* the screen */
	WINDOW *w_bar, *w_chat, *w_side, *w_status, *w_input;
	int rows, cols;
	bool panels, utf8, colors;
	bool dirty;              /* something to draw */
	enum ui_mode mode;
	int help_page;           /* MODE_HELP: 0 the keys, 1 the figures */
	struct ui_demo_run *demo;/* owned; the tour running (ui_demo.c), or NULL */
	char status[256];        /* a timed message, "" when none */
	double status_until;
	int status_h;            /* the status line's rows now: a message wider than
	                            the screen goes on over up to STATUS_MAX_ROWS */
	bool status_error;
	int status_conv;         /* the tab it belongs to (the active one when
	                            it was set): another tab does not show it */
	enum ui_close_why close_why;
	int help_top;            /* the help's first line shown (MODE_HELP) */
	double next_snapshot, last_frame;
	const char *dump_path;   /* PAGECHAT_SCREEN_DUMP: the screen as text after each frame */
	bool quit;
	char serve_url[128];     /* where --serve listens (the tab bar shows it), "" none */
	char fatal[512];         /* why the chat ends on its own ("" none): no engine
	                            could be started again (ui_run returns it) */
	char *pending_save;      /* owned; /save's or /snapshot's file while its overwrite is asked */
	bool pending_snapshot;   /* ... and it is /snapshot's */
	char *pending_delete;    /* owned; /delete's file while it is asked */
	char pending_title[100]; /* ... and its chat's title, as the list shows it */
	char **listed;           /* owned; [n_listed] the files of the last chat list */
	int n_listed;
	char last_closed[96];    /* the file of the tab closed last ("" none) */
	int last_closed_at;      /* ... and where it stood in the tab bar (0-based) */
	char *restore_line;      /* owned; input to put back after readline's accept */
	bool in_accept;          /* inside readline's line handler: the line is taken */
	/* The line handler (ui.c's): readline's accept and the tour's typing
	 * reach the UI through it; NULL at end of input. */
	void (*on_line)(struct ui *u, const char *line);
	char *next_line;         /* owned; a line a /command handed back to be entered
	                            after it (/n N TEXT: TEXT), or NULL */
} ui;

/* ---- ui_status.c (a leaf) ---- */
/* Shows a message in the status line for a few seconds (error: in bold). */
void ui_status(ui *u, bool error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
tab *ui_tab(ui *u);                          /* the active tab; never NULL after start */
/* The system prompt named name, or NULL. */
const ui_prompt *ui_find_prompt(const ui *u, const char *name);
/* arg with a leading ~ or ~/ as the home directory, and a relative name
 * under the working directory, into buf (so a message names the file that
 * was written); false (with a status naming cmd) when HOME is unset, the
 * working directory unknown or the name too long. */
bool ui_expand_home(ui *u, const char *cmd, const char *arg, char *buf, size_t cap);

/* ---- ui_termcheck.c ---- */
/* e says the terminal term cannot move the cursor (the one wording). */
void term_too_dumb(const char *term, err *e);

/* ---- ui_term.c ---- */
/* The terminal while the UI has it. */
typedef struct ui_term {
	SCREEN *scr;
	int saved_stderr;        /* the real stderr while the screen is ours, or -1 */
	FILE *err_log;           /* what was written to stderr meanwhile */
	char log_path[4200];
	sigset_t old_mask;
} ui_term;
/* Takes the terminal: locale, signals, ncurses (raw, keypad, colours, the
 * private key codes, the mouse wheel), stderr into a log. -1 with e filled
 * when the terminal cannot be used (nothing to undo then). */
int term_open(ui *u, ui_term *t, err *e);
/* Gives the terminal back and replays what went to stderr. */
void term_close(ui *u, ui_term *t);
/* A quit signal (TERM, HUP, INT, QUIT) arrived. */
bool term_quit_requested(void);
/* The signal mask for ppoll: the current one with SIGWINCH and the quit
 * signals let through. */
void term_sleep_mask(sigset_t *mask);
/* Writes the screen as text to u->dump_path (and appends it to .log). */
void term_dump(ui *u);

/* ---- ui_hist.c ---- */
/* Samples the new snapshot's figures (once a second) for the sparklines. */
void hist_on_snapshot(ui *u);
void hist_free(ui *u);
/* The history panel: its rows (0 before the first sample) and drawing. */
int hist_panel_rows(const ui *u);
int hist_panel_draw(const ui *u, WINDOW *w, int y, int x, int width, int room);

/* ---- ui_rows.c ---- */
/* The side panel of block tables: a row per running sequence (its blocks in
 * order, shared ones in one bright colour), then per idle tab that pins
 * blocks, and who shares which blocks. rows_panel_tables: the tables to draw,
 * every running one and the idle ones that fit in extra more rows;
 * rows_panel_rows: the rows n_tables take; rows_panel_draw draws them (fewer
 * when room is short) and returns the rows it took. share_rows: the rows of
 * "shared by" under two tables or more (ROWS_SHARE_ROWS, or where rows are
 * short rows_panel_share_rows: those the lines take at width, up to most). */
#define ROWS_SHARE_ROWS 3
int rows_panel_tables(const ui *u, int extra, int share_rows);
int rows_panel_rows(int n_tables, int share_rows);
int rows_panel_draw(const ui *u, WINDOW *w, int y, int x, int width, int room, int n_tables, int share_rows);
int rows_panel_share_rows(const ui *u, int width, int most);
/* Whether block is a copy on write made in the last moment (it flashes). */
bool rows_is_copy(const ui *u, int32_t block);
/* What the figures remember between snapshots (ui/poolmap.h), or NULL
 * before the first snapshot. */
/* ui_panel.c: a row per chat tab from row y, at most rows: its answer's
 * latency (the running one's so far, else the last), kept to width (no name
 * padding, fewer decimals where the full line is wider). Returns the rows. */
int panel_tab_figures(const ui *u, WINDOW *w, int y, int x, int width, int rows);
const struct poolmap_memo *rows_memo(const ui *u);
/* line from row y, column x, broken at spaces over rows of width columns
 * (the rows after the first indented by two), max_rows at most; returns
 * the rows it takes. w NULL: only counts them. */
int rows_wrap_line(WINDOW *w, int y, int x, int width, const char *line, int max_rows);
/* The colour pair of a conversation's tab (0 when none or no colours). */
short rows_conv_pair(const ui *u, int conv);
/* A new snapshot arrived: remembers who used each block (block_last) and
 * records the figures' history. rows_deinit frees what it keeps. */
void rows_on_snapshot(ui *u);
void rows_deinit(ui *u);
/* F1's second page: what each figure means. */
extern const char *const rows_figure_help[];
extern const int rows_n_figure_help;

/* ---- ui_help.c ---- */
void help_open(ui *u);                       /* shows the help (MODE_HELP) */
void help_draw(ui *u);                       /* the help box (wnoutrefresh only) */
void help_scroll(ui *u, int lines);          /* down (+) or up (-), clamped */
/* F1 in the help: to the figures' part, or closes it when that is shown. */
void help_again(ui *u);

/* ---- snapshot.c ---- */
/* /snapshot FILE: the map, the figures and the block tables as text, or as
 * an SVG picture when FILE ends in .svg. */
void snapshot_cmd(ui *u, const char *arg);
/* The text snapshot (the map, figures, tables and the counters they come
 * from) to path, atomically. -1 with e filled. */
int snapshot_write_text(const ui *u, const char *path, err *e);
/* Writes the snapshot to path (replacing it) and says so in the status. */
void snapshot_write(ui *u, const char *path);

/* ---- ui_server.c ---- */
/* A newer view with a server part arrived (was: the state before): a status
 * line when the server goes down or comes back, the model's name. */
void server_on_view(ui *u, enum link_state was);
void server_panel_draw(ui *u);               /* the side panel (wnoutrefresh only) */

/* ---- ui_edit.c ---- */
/* Rows the input box needs now (its lines, wrapped), at most a few. */
int input_rows(const ui *u);
/* Draws the input box and leaves the cursor there (wnoutrefresh only; last). */
void input_draw(ui *u);
/* Ctrl-X Ctrl-E: the input line edited in $VISUAL / $EDITOR. */
void input_edit_external(ui *u);

/* ---- ui_input.c ---- */
/* Sets readline up inside the windows (they must exist); an accepted line goes
 * to u->on_line. input_deinit undoes it. */
void input_init(ui *u);
void input_deinit(ui *u);
/* Gives a key the UI did not take to readline (which may call ui.on_line). */
void input_feed(ui *u, int r, wint_t ch);
/* Whether readline binds Alt-c (c < 0x80). */
bool input_meta_bound(int c);
/* Moves the input: saves from's line (from may be NULL), loads to's, sets
 * to's prompt. */
void input_switch(ui *u, tab *from, tab *to);
/* Adds a new tab's user messages to the history (one for all tabs). */
void input_tab_history(ui *u, tab *t);
void input_tab_free(ui *u, tab *t);          /* t closes (its lines stay) */
/* Adds line to the history (not twice in a row). */
void input_history_add(const char *line);
bool input_has_text(void);                   /* the input line is not empty */
/* Leaves a pending search or argument in readline; false if there was none. */
bool input_abort(void);
/* Inserts a newline at the cursor (the input grows a row). */
void input_insert_newline(ui *u);

/* ---- ui_load.c ---- */
/* Loads the model (and the draft) on a helper thread, drawing the progress.
 * -1 with e naming the file and the problem. */
int ui_load_model(ui *u, err *e);
/* Starts the engine thread on the loaded model (what the view and the
 * panels kept of an earlier engine is dropped). -1 with e filled. */
int ui_start_engine(ui *u, err *e);
/* --server: a link to the server in place of the model and the engine
 * thread (the server is not waited for). -1 with e filled. */
int ui_start_server(ui *u, err *e);

/* ---- ui_resume.c ---- */
/* Before the model loads: the model the session's chats agree on, or the
 * one the user picks among theirs, becomes u->model_path (else it stays);
 * a model that is missing or changed gets one status message. */
void resume_pick_model(ui *u);
/* After: why chat c (made on another model) opens read-only, as a new
 * string, or NULL when it goes on here (c's origin may then be updated). */
char *resume_lock(ui *u, conv *c);

/* ---- ui_copy.c ---- */
/* /copy [N]: the active tab's last answer (or its code block N) to the
 * terminal's clipboard with OSC 52. */
void cmd_copy(ui *u, const char *arg);

/* ---- ui_tab.c ---- */
bool tab_busy(const tab *t);                 /* an answer is running */
/* Tokens t's conversation holds in the context now (its token history). */
int tab_context_used(const tab *t);
/* The gauge's warning level: 0 fine, 1 above 3/4 of the context, 2 the next
 * turn will not fit without the overflow policy (context.overflow). */
int tab_context_level(const ui *u, const tab *t);
/* How the tabs' turns are rendered: the template's name, "completion", or
 * "server chat" / "server completion" for an engine that renders them. */
const char *tab_mode_name(const ui *u);
/* Saves t now (JSON), restarting its journal if it streams. Errors go to
 * the status line. */
void tab_save(ui *u, tab *t);
void tab_save_session(ui *u);                /* the open tabs and the active one */
void tab_tick(ui *u, double now);            /* periodic saves while streaming */
/* Starts t's next answer: appends the assistant message it streams into
 * and, for an engine that reads ids (LINK_TOKENS), builds the prompt from
 * the token history (conv_turn_start; -1 with e as it says). An engine that
 * reads text gets the conversation itself (tab_send): turn has no ids. */
int tab_turn_start(ui *u, tab *t, conv_turn *turn, err *e);
/* Submits r, the request of turn, as t's answer (with the turn's text: its
 * messages, or the completion text): t follows it from now on (its
 * request, message, prompt size and clocks); releases turn, saves t. */
void tab_send(ui *u, tab *t, conv_turn *turn, const core_request *r);
/* Records how t's answer ended (how: "stop", ...; error: its line, or NULL;
 * m: the engine's figures, NULL: t's own clocks) and saves; t is idle. */
void tab_finish(ui *u, tab *t, const char *how, const char *error, const core_req_metrics *m);
/* Cancels t's answer, keeping its text (finish "cancelled"); no-op when idle. */
void tab_stop(ui *u, tab *t);

/* ---- ui_beams.c ---- */
/* /n N [TEXT] and /beams W [TEXT]: the turn TEXT (or the next one) gets N
 * sampled answers, or the W best beams, shown one under the other. */
void beams_cmd_n(ui *u, const char *arg);
void beams_cmd_beams(ui *u, const char *arg);
/* /pick [K]: continues with answer K (default: the highlighted one). */
void beams_cmd_pick(ui *u, const char *arg);
/* F5: highlights the next answer. */
void beams_key_next(ui *u);
/* Submits t's turn with its pending /n or /beams; false when it has none
 * (then tab_submit answers as usual). */
bool beams_submit(ui *u, tab *t);
/* Routes an event of t's alternatives' request; false when it is not theirs. */
bool beams_on_event(ui *u, tab *t, const link_event *ev);
/* Draws the alternatives into t's view (after its messages). */
void beams_build_view(const ui *u, const tab *t, wrap_doc *d);
/* A tab answering anew: drops its alternatives (cancelling them). */
void beams_drop(ui *u, tab *t);
void beams_free(struct alts *x);             /* the memory only; NULL is a no-op */
/* While t's alternatives run: the figures of the first so far (or final,
 * where it ended before the others): it stands in the conversation when all
 * end, with those figures. False when none run or it has none yet (beams
 * send their tokens at the end). */
bool beams_live(const tab *t, core_req_metrics *m);

/* ---- ui_tabs.c ---- */
/* Appends a tab for conversation c (taken over: c is left zeroed) with file name
 * file (NULL: a new one) and starts its system prompt's prefill. locked (taken;
 * NULL: none) makes it read-only (tab.locked). Cannot fail. */
tab *tab_open(ui *u, conv *c, const char *file, const samp_params *sp, int max_tokens, char *locked);
/* Closes tab i: cancels its answer, releases its pins (its blocks turn cached),
 * saves it, and shows the next tab if it was the active one. */
void tab_close(ui *u, int i);
void tab_free(tab *t);                       /* the memory only; NULL is a no-op */
/* Makes tab i the active one (out of range: nothing); a message about the
 * tab left behind goes with it. */
void tab_show(ui *u, int i);
/* Opens a new tab with system prompt pr and shows it. */
void tab_new(ui *u, const ui_prompt *pr);
/* After the engine restarted on another model: t gets a new engine
 * conversation and goes on with that model (its history is rendered again
 * at its next turn), its system prompt prefilled. t is idle. */
void tab_restart(ui *u, tab *t);
/* Gives t (idle, writable) another system prompt: a new engine
 * conversation, its history rendered again, its prompt prefilled. */
void tab_set_system(ui *u, tab *t, const char *name, const char *text);
/* Starts an answer in t for its messages so far (the last is the user's):
 * appends the assistant message it streams into and saves. An error (a
 * conversation too long to tokenize) is recorded in that message. */
void tab_submit(ui *u, tab *t);
/* Drops the last answer and asks again (stops it first if running). */
void tab_regenerate(ui *u, tab *t);
/* A new tab with t's messages; a running answer goes on in both (link_fork). */
void tab_fork(ui *u, tab *t);
void tab_on_event(ui *u, const link_event *ev);  /* routes one engine event */
void tab_on_snapshot(ui *u);                 /* prefill progress from the new map */

/* ---- ui_view.c ---- */
void tab_scroll(ui *u, tab *t, int lines);   /* lines up (+) or down (-); the bottom follows */
void tab_page(ui *u, tab *t, int pages);     /* pages up (+) or down (-) */
void tab_draw_bar(ui *u);                    /* the tab bar (wnoutrefresh only) */
void tab_draw_chat(ui *u);                   /* the active conversation (wnoutrefresh only) */

/* ---- ui_panel.c ---- */
void panel_draw(ui *u);                      /* the side panels (wnoutrefresh only) */
int panel_width(const ui *u);                /* columns the panels take, 0 when hidden */

/* ---- ui_open.c ---- */
/* The tab showing file, or NULL. */
tab *saved_find_file(ui *u, const char *file);
/* Opens file (a name in the data directory) as a tab: the chat, or a
 * damaged tab saying why it cannot be loaded. */
tab *saved_open_file(ui *u, const char *file);
/* A read-only tab named name showing note (taken), for file ("": none). */
tab *saved_open_note(ui *u, const char *name, const char *file, char *note);
void saved_show(ui *u, tab *t);              /* makes t the active tab */

/* ---- ui_chats.c ---- */
/* The saved-chat list in a tab (only those holding filter, if not NULL). */
void chats_list(ui *u, const char *filter);
/* The file numbered num in the last list, or NULL (with a status). */
const char *chats_listed(ui *u, const char *num);
void cmd_find(ui *u, const char *arg);       /* /find TEXT */
void cmd_rename(ui *u, const char *arg);     /* /rename N TITLE */
void cmd_delete(ui *u, const char *arg);     /* /delete N: asks (MODE_CONFIRM_DELETE) */
void chats_confirm_delete(ui *u, bool yes);  /* the answer */
void chats_reopen(ui *u);                    /* the tab closed last, again */
void cmd_reopen(ui *u, const char *arg);     /* /reopen */

/* ---- ui_saved.c ---- */
/* Opens the saved session's tabs (--resume): a chat that cannot be loaded
 * (missing, truncated, not JSON, a FIFO) opens as a damaged tab that keeps
 * its place in the session; a file named twice opens once. Returns the tab
 * to show, or -1 when there was nothing to resume. */
int saved_resume(ui *u);
/* A plain run: if the last session had chats, says where they are now
 * (/open lists every saved chat), so none becomes unreachable. */
void saved_note_previous(ui *u);
/* /open: without FILE, a tab listing the saved chats; with FILE (a name in
 * the data directory), that chat in a tab (damaged if it cannot load). */
void saved_cmd_open(ui *u, const char *arg);
/* /raw: a damaged tab shows its file's text (read-only). */
void saved_cmd_raw(ui *u, const char *arg);
/* /save FILE: the tab as Markdown, atomically; an existing FILE is
 * replaced only after a y to the question (MODE_CONFIRM_SAVE). */
void saved_cmd_save(ui *u, const char *arg);
void saved_confirm_save(ui *u, bool yes);    /* the answer to that question */

/* ---- ui_set.c ---- */
void cmd_set(ui *u, const char *arg);        /* /set [NAME VALUE] */
void cmd_system(ui *u, const char *arg);     /* /system [TEXT|NAME] */
void cmd_prompts(ui *u, const char *arg);    /* /prompts */
/* The tab's sampling settings in a few words, for the status line. */
void set_summary(const tab *t, char *buf, size_t cap);

/* ---- ui_model.c ---- */
void cmd_model(ui *u, const char *arg);      /* /model FILE: every tab on another model */
void cmd_draft(ui *u, const char *arg);      /* /draft FILE|ngram|off */

/* ---- ui_demo.c ---- */
/* Starts u->p's tour, if it has one (after the start tabs opened). */
void demo_start(ui *u);
/* Runs the tour's next steps that are due; false once there is none. */
bool demo_tick(ui *u, double now);
/* A key (wget_wch's r and ch) while the tour runs: ends it, unless it is
 * F1, a key the help takes, a resize or the mouse; never takes the key. */
void demo_key(ui *u, int r, wint_t ch);
/* With PAGECHAT_SCREEN_DUMP (the tests'): the tour waits at a step's end
 * (and at a fork) until the screen is drawn; demo_record then writes that
 * screen and the snapshot it shows (DUMP.stepN[-fork].screen and .txt). */
bool demo_record_pending(const ui *u);
void demo_record(ui *u);
/* The tour's caption for the status bar, or NULL. */
const char *demo_caption(const ui *u);
void demo_free(ui *u);

/* ---- ui_cmd.c ---- */
/* Runs the /command in line (it starts with '/'). */
void cmd_run(ui *u, const char *line);

#endif
