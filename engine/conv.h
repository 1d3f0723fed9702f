/* engine/conv.h: a conversation and the prompt it turns into.
 *
 * A conv is a system prompt plus a list of messages (user, assistant); an
 * assistant message grows while its answer streams and records how it ended.
 * It is a front-end's saved source of truth (the chat UI's tabs write it with
 * ui/store.h). conv_build() turns the whole conversation into prompt ids for
 * the engine each turn, either through the model's chat template
 * (models/tmpl.h) or, for a model without one, in completion mode: the system
 * prompt, then each message's text in order, one continuous text the model
 * continues. The ids always start with the system prompt's own ids (n_pin of
 * them), so conversations with the same system prompt share, and pin, those
 * KV blocks. Pure data over models/ (template, tokenizer): no terminal, no
 * engine thread. A conv belongs to one thread (its front-end's). */
#ifndef PAGECHAT_CONV_H
#define PAGECHAT_CONV_H

#include "kernels/base.h"
#include "models/tmpl.h"
#include "models/tok.h"

enum conv_role { CONV_USER, CONV_ASSISTANT };

typedef struct conv_msg {
	enum conv_role role;
	char *text;              /* owned; NUL-terminated, len bytes */
	size_t len, cap;
	char *error;             /* owned; why the answer failed, or NULL */
	char finish[12];         /* how the answer ended ("stop", "length", "context",
	                            "cancelled", "error"); "" while streaming or for users */
	int n_gen;               /* tokens generated (assistant) */
	double ttft_ms, tpot_ms; /* the answer's time to first token, per token after */
	int n_proposed, n_accepted; /* draft tokens (speculative decoding) */
} conv_msg;

typedef struct conv {
	char *name;              /* owned; its name (a tab's title) */
	char *prompt_name;       /* owned; the system prompt's name in the config */
	char *system;            /* owned; its text (saved, so a resume needs no config) */
	conv_msg *msgs;          /* owned; [n_msgs] */
	int n_msgs, cap_msgs;
	uint64_t version;        /* bumped by every change (views cache on it) */
} conv;

/* Empty conversation; the strings are copied. Release with conv_deinit. */
void conv_init(conv *c, const char *name, const char *prompt_name, const char *system);
void conv_deinit(conv *c);                  /* a zeroed conv is fine */
/* Deep copy of src into dst (uninitialised). */
void conv_copy(conv *dst, const conv *src);

/* Appends a message with text[len]; returns its index. Cannot fail. */
int conv_add(conv *c, enum conv_role role, const char *text, size_t len);
/* Appends len bytes to message i. */
void conv_append(conv *c, int i, const char *text, size_t len);
/* Removes the last message. */
void conv_pop(conv *c);
/* Sets message i's error text (copied; NULL clears). */
void conv_set_error(conv *c, int i, const char *msg);
/* Renames c (name is copied). */
void conv_set_name(conv *c, const char *name);

/* The text completion mode feeds the model: the system prompt, then each of
 * msgs[0..upto) with a space before a user message that would otherwise run
 * into the text before it. Returns a new string (caller frees); *len its
 * length. *sys_len gets the length of the system part. */
char *conv_completion_text(const conv *c, int upto, size_t *len, size_t *sys_len);
/* The separator completion mode puts before message i (" " or ""). */
const char *conv_separator(const conv *c, int i);

/* A turn's prompt. */
typedef struct conv_prompt {
	int32_t *ids;            /* owned; [n] */
	int n;
	int n_pin;               /* leading ids that are the system prompt's own */
} conv_prompt;

/* Builds the prompt for generating message `upto` (the messages before it,
 * skipping empty assistant messages), with fam's template and the opening
 * of the assistant's turn, or in completion mode for TMPL_NONE/UNKNOWN.
 * 0, or -1 with e filled (a text too long to tokenize). Release with
 * conv_prompt_deinit. */
int conv_build(const conv *c, int upto, enum tmpl_family fam, const tok *t, conv_prompt *out,
	       err *e);
/* The system prompt's ids alone (what conv_build's ids start with); n_pin = n. */
int conv_build_system(const conv *c, enum tmpl_family fam, const tok *t, conv_prompt *out,
		      err *e);
void conv_prompt_deinit(conv_prompt *p);    /* a zeroed prompt is fine */

#endif
