/* conv/conv.h: a conversation, its token history, and the turns it asks of
 * the engine.
 *
 * A conv is a system prompt plus a list of messages (user, assistant); an
 * assistant message grows while its answer streams and records how it ended.
 * It is a front-end's saved source of truth (the chat UI's tabs write it with
 * ui/store.h; `pagechat replay` keeps it in memory) and the one place the
 * tab's turn logic lives, so every front-end sends the engine the same ids.
 *
 * The token history: beside its text, each message keeps the exact ids it
 * added to the model's context (conv_msg.ids), and the conversation keeps
 * the ids of BOS and the system prompt's turn (sys_ids, the pinned prefix).
 * A user message's ids are its turn as the chat template renders it; an
 * assistant message's are the template's opening of the answer, then the ids
 * the model generated (exactly those, never a re-tokenization of their text),
 * then the template's closing. The prompt of the next answer is the history
 * (sys_ids, then the ids of msgs[first..]) plus the new user turn and the
 * opening, so the previous prompt and answer are an exact prefix of it and
 * the engine's prefix cache reuses every full block of them. The template is
 * rendered for the new pieces only, each tokenized in the context of the text
 * before it. The whole history is re-rendered from the text only when it
 * changes: messages without ids (an old file), ids made for another
 * vocabulary or template, turns dropped for the context. A model without a
 * known template runs in completion mode: the system prompt, then each
 * message's text in order (a space before a user message that would run into
 * the text before it), the answers' ids as generated.
 *
 * When the next turn would not fit the context, its overflow policy applies:
 * refuse (an error; nothing changes), drop (the oldest whole turns after the
 * system prompt leave the context, and the rest is re-rendered) or shift
 * (they leave, and the engine rotates the K/V of what stays to its new
 * positions instead of recomputing it: engine/core.h, core_shift). Either way
 * the dropped messages stay in the conversation (first counts them) and the
 * answer carries a note saying so.
 *
 * Pure data over models/ (template, tokenizer) and the engine's request
 * type: no terminal, no engine thread. A conv belongs to one thread (its
 * front-end's). */
#ifndef PAGECHAT_CONV_H
#define PAGECHAT_CONV_H

#include "engine/core.h"
#include "base/base.h"
#include "models/tmpl.h"
#include "models/tok.h"

enum conv_role { CONV_USER, CONV_ASSISTANT };

typedef struct conv_msg {
	enum conv_role role;
	char *text;              /* owned; NUL-terminated, len bytes */
	size_t len, cap;
	char *error;             /* owned; why the answer failed, or NULL */
	char *note;              /* owned; how the answer's prompt was made when that is
	                            news (history re-rendered, turns dropped), or NULL */
	char finish[12];         /* how the answer ended ("stop", "length", "context",
	                            "cancelled", "error"); "" while streaming or for users */
	int n_gen;               /* tokens generated (assistant) */
	double ttft_ms, tpot_ms; /* the answer's time to first token, per token after */
	int n_proposed, n_accepted; /* draft tokens (speculative decoding) */
	int n_prompt, n_cached;  /* assistant: its prompt's tokens, and how many of them
	                            the prefix cache gave (0 and 0: not known) */
	/* its part of the token history */
	int32_t *ids;            /* owned; [n_ids] */
	int n_ids, cap_ids;
	bool has_ids;            /* ids are known (possibly none: an answer that never
	                            started is no part of the history) */
	int n_open;              /* assistant: leading ids that open the turn */
	bool closed;             /* assistant: the template's closing ids end ids */
} conv_msg;

/* The model a conversation was made on (saved with it, for --resume). */
typedef struct conv_origin {
	char *path;              /* owned; the model file as it was opened, or NULL: unknown */
	int64_t size;            /* bytes */
	uint64_t header;         /* fingerprint of the file's header (models/gguf.h) */
	enum tmpl_family fam;    /* its chat template */
} conv_origin;

typedef struct conv {
	char *name;              /* owned; its name (a tab's title) */
	char *prompt_name;       /* owned; the system prompt's name in the config */
	char *system;            /* owned; its text (saved, so a resume needs no config) */
	conv_msg *msgs;          /* owned; [n_msgs] */
	int n_msgs, cap_msgs;
	uint64_t version;        /* bumped by every change (views cache on it) */
	conv_origin origin;      /* the model it was made on (path NULL: not known yet) */
	/* the token history (see the top of this file) */
	int32_t *sys_ids;        /* owned; [n_sys_ids] BOS and the system prompt's turn */
	int n_sys_ids, cap_sys_ids;
	bool has_sys_ids;
	uint64_t ids_vocab;      /* the vocabulary the ids belong to (tok_fingerprint); 0: none */
	enum tmpl_family ids_fam;/* ... and the template they were rendered with */
	int first;               /* messages before it have left the context */
	uint64_t salt;           /* a shifted context's key salt (core_request.salt), 0: none */
	int salt_block;
} conv;

/* Empty conversation; the strings are copied. Release with conv_deinit. */
void conv_init(conv *c, const char *name, const char *prompt_name, const char *system);
void conv_deinit(conv *c);                  /* a zeroed conv is fine */
/* Deep copy of src into dst (uninitialised), the token history included. */
void conv_copy(conv *dst, const conv *src);

/* Appends a message with text[len]; returns its index. Cannot fail. */
int conv_add(conv *c, enum conv_role role, const char *text, size_t len);
/* Appends len bytes to message i. */
void conv_append(conv *c, int i, const char *text, size_t len);
/* Removes the last message (and its ids); an answer's turn is then sent
 * with the next answer again. */
void conv_pop(conv *c);
/* Sets message i's error text (copied; NULL clears). */
void conv_set_error(conv *c, int i, const char *msg);
/* Sets message i's note (copied; NULL clears). */
void conv_set_note(conv *c, int i, const char *msg);
/* Renames c (name is copied). */
void conv_set_name(conv *c, const char *name);
/* Sets message i's ids to ids[n] (copied; has_ids becomes true). */
void conv_set_ids(conv *c, int i, const int32_t *ids, int n);
/* Appends ids[n] to message i's ids (has_ids becomes true). */
void conv_append_ids(conv *c, int i, const int32_t *ids, int n);
/* Sets the system prompt's ids (copied). */
void conv_set_sys_ids(conv *c, const int32_t *ids, int n);
/* Records the model c is made on (path copied; NULL clears). */
void conv_set_origin(conv *c, const char *path, int64_t size, uint64_t header, enum tmpl_family fam);

/* Whether message i is sent to the model with the next turns: not an answer
 * that never started (no text), nor the user messages of its turn (a turn
 * refused, or failed before its first token, is shown but never sent
 * again). */
bool conv_msg_sent(const conv *c, int i);

/* The text completion mode feeds the model: the system prompt, then each of
 * msgs[0..upto) that is sent (conv_msg_sent) with a space before a user
 * message that would otherwise run into the text before it. Returns a new string (caller frees); *len its
 * length. *sys_len gets the length of the system part. */
char *conv_completion_text(const conv *c, int upto, size_t *len, size_t *sys_len);
/* Message i is an empty user turn that asks the answer before it to go on
 * (completion mode's empty line): that answer and the next are one text,
 * shown and exported without a break (a word may run across them). */
bool conv_continues(const conv *c, int i);
/* The separator completion mode puts before message i (" " or ""). */
const char *conv_separator(const conv *c, int i);

/* ---- the model's side: conv/hist.c ---- */

/* What a full context does to the next turn (config context.overflow). */
enum conv_overflow { CONV_DROP, CONV_SHIFT, CONV_REFUSE };
/* "drop", "shift", "refuse"; conv_overflow_parse gives -1 for anything else. */
const char *conv_overflow_name(enum conv_overflow o);
int conv_overflow_parse(const char *s);

/* The model conversations are rendered for. */
typedef struct conv_model {
	const tok *tok;          /* borrowed */
	enum tmpl_family fam;    /* TMPL_NONE, TMPL_UNKNOWN: completion mode */
	uint64_t vocab;          /* tok_fingerprint(tok) */
	int n_ctx;               /* the engine's context limit per conversation */
	int block_tokens;        /* the KV block size (the shift keys whole blocks) */
	enum conv_overflow overflow;
} conv_model;

/* Fills m for tok and fam (vocab computed) with the given limits. */
void conv_model_init(conv_model *m, const tok *tok, enum tmpl_family fam, int n_ctx, int block_tokens,
		     enum conv_overflow overflow);
/* Whether m runs conversations in completion mode. */
bool conv_completion_mode(const conv_model *m);

/* The system prompt's ids alone (what the history starts with: BOS and the
 * template's system turn, or the system text in completion mode) into a
 * new array *ids (caller frees), *n of them. 0, or -1 with e filled (a text
 * too long to tokenize). */
int conv_system_ids(const conv *c, const conv_model *m, int32_t **ids, int *n, err *e);

/* Tokens the history holds now (the system prompt and msgs[first..]): the
 * context the next turn starts from. */
int conv_history_tokens(const conv *c);

/* Re-renders the history of msgs[first..] from their text for m (the ids
 * the answers were generated with are replaced by their text's). 0, or -1
 * with e filled (then the history is left without ids). */
int conv_rebuild(conv *c, const conv_model *m, err *e);

/* ---- turns: conv/turn.c ---- */

/* One answer's request, built by conv_turn_start. */
typedef struct conv_turn {
	int msg;                 /* the assistant message the answer streams into */
	int32_t *prompt;         /* owned; [n_prompt] */
	int n_prompt;
	int n_pin;               /* leading ids that are the system prompt's own */
	int32_t stop[4];         /* stop ids: the tokenizer's end of generation, the template's */
	int n_stop;
	int max_tokens;          /* the answer's limit: the caller's, within the context */
	uint64_t salt;           /* core_request.salt / salt_block */
	int salt_block;
	core_shift shift;        /* n_old > 0: the context shifted (old owned) */
	int n_dropped;           /* messages that left the context for this turn */
	bool rebuilt;            /* the history was re-rendered from the text */
} conv_turn;

/* Starts an answer to c's messages so far: appends the assistant message it
 * will stream into and builds its prompt from the token history (see the
 * top). max_tokens is the answer's limit (0: until the context is full);
 * the prompt must leave it that much room (at most half the context; with
 * 0, a quarter). When it does not, m->overflow applies and the answer's note
 * says what happened. 0 on success (release with conv_turn_deinit);
 * -1 with e filled (a text too long to tokenize, a full context under
 * refuse, a turn too long for the context on its own): the assistant
 * message is still appended, finished as "error" with e's text, and the
 * turn's user messages leave the history (conv_msg_sent). */
int conv_turn_start(conv *c, const conv_model *m, int max_tokens, conv_turn *t, err *e);
/* The engine request for t into *r (borrowing t's arrays until t is
 * released): prompt, pin, stop ids, max_tokens, salt and shift. The caller
 * sets id, conv and samp. Cannot fail. */
void conv_turn_request(const conv_turn *t, core_request *r);
void conv_turn_deinit(conv_turn *t);        /* a zeroed turn is fine */

/* Records id as the next id of the answer in message i (from an engine
 * TOKEN event; its text goes through conv_append). Cannot fail. */
void conv_answer_id(conv *c, int i, int32_t id);
/* Records how the answer in message i ended: finish ("stop", ...) and the
 * engine's figures (m may be NULL: then n_gen counts its ids). An answer
 * that produced nothing and did not stop leaves the history. */
void conv_answer_end(conv *c, int i, const char *finish, const core_req_metrics *m);
/* Empties answer i again (its text, its generated ids, how it ended), keeping
 * the ids that open the turn, so another answer can stream into it (a
 * choice among alternatives). */
void conv_answer_clear(conv *c, int i);

#endif
