/* ui/ui.h: the full-screen chat: tabs on one model, streaming answers, live
 * panels of the shared KV pool.
 *
 * ui_run() takes over the terminal (ncurses, with GNU readline for the input
 * line), loads the model on a helper thread while it shows the progress,
 * starts the engine thread, opens the tabs and runs the event loop until the
 * user quits: poll() on the keyboard and on its link's wake-up fd; every
 * drawing call happens on the calling thread. Each tab's conversation is
 * saved under the data directory as it changes (ui/store.h). This module and
 * the files it uses in ui/ are the only code that calls ncurses or readline.
 * Main thread only; one ui_run at a time. */
#ifndef PAGECHAT_UI_H
#define PAGECHAT_UI_H

#include "conv/conv.h"
#include "link/link.h"
#include "engine/sample.h"
#include "base/base.h"
#include "kernels/kvq.h"
#include "models/tmpl.h"

typedef struct ui_prompt {
	const char *name, *text;     /* borrowed */
} ui_prompt;

typedef struct ui_tab_spec {
	const char *name;            /* borrowed */
	const char *prompt;          /* a name among the prompts; NULL: the default */
	samp_params samp;
	int max_tokens;              /* per answer; 0: until the context is full */
} ui_tab_spec;

/* The running engine, as another front-end that shares it needs it. */
typedef struct ui_engine {
	elink *link;                 /* borrowed: the chat's link (open more with
	                                link_open); the engine stops after detach */
	const tok *tok;              /* borrowed; the model's vocabulary */
	enum tmpl_family fam;        /* its chat template */
	const char *model_name;      /* borrowed; the file's name */
} ui_engine;

/* A scripted tour (`pagechat demo`): steps run one after another, each when
 * the one before is done; a key ends the tour (F1 and the help's keys
 * aside) and then does what it does, and the chat goes on as usual. */
enum ui_demo_kind {
	DEMO_CAPTION,                /* text: the line the status bar shows from now on */
	DEMO_LINE,                   /* text typed into tab `tab` (a turn, or a /command) */
	DEMO_FORK,                   /* F4 on tab `tab` once its answer has `count` tokens */
	DEMO_WAIT,                   /* until no tab answers and the engine is idle */
	DEMO_PAUSE,                  /* `count` tenths of a second (at speed 1) */
	DEMO_END,                    /* the tour is over: the chat is the user's */
};
typedef struct ui_demo_step {
	enum ui_demo_kind kind;
	int tab;                     /* 0-based */
	int count;
	const char *text;            /* borrowed */
	const char *chat_text;       /* borrowed; DEMO_LINE on a model with a chat
	                                template: this line instead (NULL: text) */
} ui_demo_step;

typedef struct ui_params {
	const char *model_path;      /* borrowed; must exist */
	const char *draft_path;      /* borrowed; speculative decoding's draft model,
	                                "ngram" (prompt lookup) or NULL (off) */
	int threads;                 /* 0: one per core */
	const struct kern_ops *kern; /* borrowed; the backend (NULL: the CPU) */
	int host_layers;             /* the model's first layers on the CPU (partial
	                                offload, llama_params); the draft has none */
	bool head_on_host;
	int context;                 /* per-conversation limit; 0: the model's */
	enum conv_overflow overflow; /* what a full context does to the next turn */
	int block_tokens;            /* KV block size */
	enum kv_type kv_type_k, kv_type_v; /* the pool's K and V row types */
	int64_t pool_blocks;         /* pool in blocks, or 0 ... */
	int64_t pool_bytes;          /* ... in bytes */
	int chunk_tokens;            /* prefill budget per engine step */
	int draft_k;                 /* draft tokens per step */
	bool draft_adaptive;
	samp_params samp;            /* defaults for new tabs */
	int max_tokens;
	const ui_prompt *prompts;    /* borrowed; [n_prompts] named system prompts (>= 1) */
	int n_prompts;
	const char *default_prompt;  /* NULL: "story" without a chat template, "assistant" with */
	const ui_tab_spec *tabs;     /* borrowed; [n_tabs] opened at start (>= 1) */
	int n_tabs;
	bool panels;                 /* side panels shown at start */
	int refresh_ms;              /* panel refresh period */
	const int *tab_colors;       /* borrowed; [n_tab_colors] curses colours 0..7 (>= 1) */
	int n_tab_colors;
	bool resume;                 /* reopen the previous session's tabs */
	const char *data_dir;        /* borrowed; where the chats and the session are
	                                saved, or NULL: store_data_dir's (the demo
	                                keeps its own, apart from the user's) */
	/* A server instead of a model (`chat --server URL`): model_path, the
	 * draft and the engine's sizes are then unused. */
	const char *server;          /* borrowed; its URL, or NULL */
	const char *server_key;      /* borrowed; its API key, or NULL */
	const char *server_model;    /* borrowed; the model to ask for, or NULL: its first */
	bool server_completion;      /* send completion text, not chat messages */
	bool model_given;            /* model_path was chosen on the command line (-m):
	                                resumed chats continue on it when they can */
	/* Another front-end on the same engine (the app's HTTP server for
	 * `chat --serve`), or NULL: attach runs on this thread once the engine
	 * has started and returns 0 with a line for the status bar in note, or
	 * -1 with e (the chat then ends with that error); detach runs before
	 * the engine stops. */
	int (*attach)(void *ctx, const ui_engine *x, char *note, size_t cap, err *e);
	void (*detach)(void *ctx);
	void *attach_ctx;
	const ui_demo_step *demo;    /* borrowed; [n_demo] a tour to run, or NULL */
	int n_demo;
	double demo_speed;           /* the tour's pauses are divided by this (> 0) */
	int min_step_ms;             /* the engine's pace (core_params.min_step_ms) */
	/* the lower KV tiers (core_params): host memory, the disk store */
	int64_t kv_host_blocks;      /* 0: none */
	const char *kv_store;        /* borrowed; a directory, or NULL: none */
	int64_t kv_store_max;        /* bytes (0: no limit) */
	enum core_preempt preempt;
} ui_params;

/* Runs the chat on the terminal (stdin and stdout must be one). Returns 0
 * when the user quits, -1 with e filled when the terminal, the model or the
 * engine cannot be set up (the terminal is restored first). Anything written
 * to stderr meanwhile is replayed when the screen is given back. */
int ui_run(const ui_params *p, err *e);

/* Whether the terminal TERM names can draw the chat (it moves the cursor),
 * without taking the screen: 0, or -1 with e saying what to set. Lets the
 * caller refuse before it loads anything or prints a line of its own. */
int ui_term_check(err *e);

#endif
