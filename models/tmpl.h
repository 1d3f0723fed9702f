/* models/tmpl.h: chat templates: a conversation turned into the prompt text a
 * model was trained on.
 *
 * Like llama.cpp's llama_chat_apply_template, this does not run the Jinja in
 * tokenizer.chat_template: it recognises the family by marker strings (in
 * llama.cpp's order, so a template is never taken for another family than
 * llama.cpp would take it for) and formats the chat itself, byte for byte as
 * llama.cpp does. The rendered text records which bytes the template wrote,
 * so that tmpl_encode() parses special tokens there and nowhere else: a user
 * who types "<|im_start|>" gets plain text, and otherwise the ids equal
 * llama.cpp's for the rendered text. A model without a template runs in
 * completion mode (TMPL_NONE). Pure functions; any thread. */
#ifndef PAGECHAT_TMPL_H
#define PAGECHAT_TMPL_H

#include "base/base.h"
#include "models/gguf.h"
#include "models/json.h"
#include "models/tok.h"

enum tmpl_family {
	TMPL_NONE,               /* no template: completion mode */
	TMPL_UNKNOWN,            /* a template, but not a family supported here */
	TMPL_CHATML,             /* Qwen 2/3 and others: <|im_start|>role\n...<|im_end|>\n */
	TMPL_LLAMA3,             /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
	TMPL_LLAMA2,             /* [INST] ... [/INST]; a system message is a plain line */
	TMPL_LLAMA2_SYS,         /* ... with <<SYS>>\n...\n<</SYS>>\n\n */
	TMPL_LLAMA2_SYS_BOS,     /* ... and <s> before each later [INST] */
	TMPL_LLAMA2_SYS_STRIP,   /* ... and contents trimmed (Llama 2 chat's own) */
	TMPL_MISTRAL_V1,         /* " [INST] ... [/INST]" */
	TMPL_MISTRAL_V3,         /* "[INST] ... [/INST]", assistant replies trimmed */
	TMPL_MISTRAL_V3_TEKKEN,  /* "[INST]...[/INST]" */
	TMPL_MISTRAL_V7,         /* [SYSTEM_PROMPT] ... [INST] ... [/INST] */
	TMPL_MISTRAL_V7_TEKKEN,  /* the same without the spaces (by name only) */
	TMPL_GEMMA,              /* <start_of_turn>user|model\n...<end_of_turn>\n */
	TMPL_PHI3,               /* <|role|>\n...<|end|>\n */
	TMPL_COUNT
};

/* One chat message. Roles are normally "system", "user" and "assistant";
 * others are rendered the way llama.cpp renders them. */
typedef struct tmpl_msg {
	const char *role;        /* NUL-terminated; borrowed */
	const char *content;     /* borrowed; content_len bytes, NULs allowed */
	size_t content_len;
} tmpl_msg;

/* The family of src[0..len): a template text, or a family name as
 * tmpl_name() gives it ("chatml", "llama3", "mistral-v7", ...). NULL or
 * empty gives TMPL_NONE, anything unrecognised TMPL_UNKNOWN. Cannot fail. */
enum tmpl_family tmpl_detect(const char *src, size_t len);
/* The family of f's tokenizer.chat_template (TMPL_NONE when absent). -1 with
 * e naming the file and key when the key is not a string. */
int tmpl_from_gguf(const gguf_file *f, enum tmpl_family *out, err *e);
/* Short name: "none", "unknown", "chatml", "llama3", "llama2-sys", ... */
const char *tmpl_name(enum tmpl_family fam);

/* A rendered conversation. */
typedef struct tmpl_prompt {
	char *text;              /* owned; NUL-terminated */
	size_t len;              /* bytes */
	tok_span *spans;         /* owned; [n_spans] ranges of text written by the
	                            template itself (not message content), in order */
	size_t n_spans;
} tmpl_prompt;

/* Renders msgs[0..n) into *out, plus with add_generation_prompt the opening
 * of the assistant's turn (the Llama 2 and Mistral families have none: their
 * prompt ends after [/INST] anyway). 0 on success (release with
 * tmpl_prompt_deinit); -1 with e filled for TMPL_NONE and TMPL_UNKNOWN. */
int tmpl_render(enum tmpl_family fam, const tmpl_msg *msgs, size_t n,
		bool add_generation_prompt, tmpl_prompt *out, err *e);
void tmpl_prompt_deinit(tmpl_prompt *p);    /* a zeroed prompt is fine */

/* Tokenizes p for t: BOS when the vocabulary asks for it, special-token text
 * parsed only inside the template's own spans (what a user typed stays plain
 * text). Output as tok_encode: at most cap ids written, the total needed
 * returned, -1 if p is over TOK_MAX_TEXT_BYTES. */
int tmpl_encode(const tmpl_prompt *p, const tok *t, int32_t *out, int cap);

/* The text of the token that ends a turn in fam ("<|eot_id|>", "<|im_end|>",
 * "<end_of_turn>", "<|end|>"), or NULL where EOS alone does (Llama 2,
 * Mistral) or there is no family. Static string. */
const char *tmpl_end_of_turn(enum tmpl_family fam);
/* The ids that stop generation in fam: its end-of-turn token when t has it,
 * then EOS (no duplicates). Writes at most cap ids; returns how many there
 * are (0..2). Cannot fail. */
int tmpl_stop_ids(enum tmpl_family fam, const tok *t, int32_t *out, int cap);

/* Reads a conversation: a JSON array of {"role": ..., "content": ...} with
 * roles system, user or assistant (other keys are ignored). On success *msgs
 * is a new array (caller frees it; the strings stay borrowed from root) and
 * *n its length; -1 with e naming the item and field otherwise. */
int tmpl_conversation_from_json(const json *root, tmpl_msg **msgs, size_t *n, err *e);

#endif
