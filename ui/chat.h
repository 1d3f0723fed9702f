/* ui/chat.h: one tab's conversation and the prompt it turns into.
 *
 * A chat is a system prompt plus a list of messages (user, assistant); an
 * assistant message grows while its answer streams and records how it ended.
 * It is the saved source of truth (ui/store.h writes it). chat_build() turns
 * the whole conversation into prompt ids for the engine each turn, either
 * through the model's chat template (models/tmpl.h) or, for a model without
 * one, in completion mode: the system prompt, then each message's text in
 * order, one continuous text the model continues. The ids always start with
 * the system prompt's own ids (n_pin of them), so tabs with the same system
 * prompt share, and pin, those KV blocks. Pure data; no curses. A chat belongs
 * to one thread (the UI's). */
#ifndef PAGECHAT_CHAT_H
#define PAGECHAT_CHAT_H

#include "kernels/base.h"
#include "models/tmpl.h"
#include "models/tok.h"

enum chat_role { CHAT_USER, CHAT_ASSISTANT };

typedef struct chat_msg {
	enum chat_role role;
	char *text;              /* owned; NUL-terminated, len bytes */
	size_t len, cap;
	char *error;             /* owned; why the answer failed, or NULL */
	char finish[12];         /* how the answer ended ("stop", "length", "context",
	                            "cancelled", "error"); "" while streaming or for users */
	int n_gen;               /* tokens generated (assistant) */
	double ttft_ms, tpot_ms; /* the answer's time to first token, per token after */
	int n_proposed, n_accepted; /* draft tokens (speculative decoding) */
} chat_msg;

typedef struct chat {
	char *name;              /* owned; the tab's name */
	char *prompt_name;       /* owned; the system prompt's name in the config */
	char *system;            /* owned; its text (saved, so a resume needs no config) */
	chat_msg *msgs;          /* owned; [n_msgs] */
	int n_msgs, cap_msgs;
	uint64_t version;        /* bumped by every change (views cache on it) */
} chat;

/* Empty conversation; the strings are copied. Release with chat_deinit. */
void chat_init(chat *c, const char *name, const char *prompt_name, const char *system);
void chat_deinit(chat *c);                  /* a zeroed chat is fine */
/* Deep copy of src into dst (uninitialised). */
void chat_copy(chat *dst, const chat *src);

/* Appends a message with text[len]; returns its index. Cannot fail. */
int chat_add(chat *c, enum chat_role role, const char *text, size_t len);
/* Appends len bytes to message i. */
void chat_append(chat *c, int i, const char *text, size_t len);
/* Removes the last message. */
void chat_pop(chat *c);
/* Sets message i's error text (copied; NULL clears). */
void chat_set_error(chat *c, int i, const char *msg);
void chat_set_name(chat *c, const char *name);

/* The text completion mode feeds the model: the system prompt, then each of
 * msgs[0..upto) with a space before a user message that would otherwise run
 * into the text before it. Returns a new string (caller frees); *len its
 * length. *sys_len gets the length of the system part. */
char *chat_completion_text(const chat *c, int upto, size_t *len, size_t *sys_len);
/* The separator completion mode puts before message i (" " or ""). */
const char *chat_separator(const chat *c, int i);

/* A turn's prompt. */
typedef struct chat_prompt {
	int32_t *ids;            /* owned; [n] */
	int n;
	int n_pin;               /* leading ids that are the system prompt's own */
} chat_prompt;

/* Builds the prompt for generating message `upto` (the messages before it,
 * skipping empty assistant messages), with fam's template and the opening
 * of the assistant's turn, or in completion mode for TMPL_NONE/UNKNOWN.
 * 0, or -1 with e filled (a text too long to tokenize). Release with
 * chat_prompt_deinit. */
int chat_build(const chat *c, int upto, enum tmpl_family fam, const tok *t, chat_prompt *out,
	       err *e);
/* The system prompt's ids alone (what chat_build's ids start with); n_pin = n. */
int chat_build_system(const chat *c, enum tmpl_family fam, const tok *t, chat_prompt *out,
		      err *e);
void chat_prompt_deinit(chat_prompt *p);    /* a zeroed prompt is fine */

#endif
