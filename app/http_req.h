/* app/http_req.h: the bodies of the OpenAI API's generation requests, parsed
 * and checked before anything reaches the engine.
 *
 * POST /v1/chat/completions takes "messages" (an optional first "system" or
 * "developer" message, then "user" and "assistant" ones; content a string or
 * an array of text parts), POST /v1/completions a "prompt" (a string, an array
 * of token ids, or a one-element array of either). Both take "model", "n",
 * "max_tokens" ("max_completion_tokens" wins over it), "temperature",
 * "top_p", "seed", "stop" (a string or up to HTTP_MAX_STOP strings), "stream"
 * and "stream_options": {"include_usage": true} (vLLM's "continuous_usage_stats":
 * true puts the usage so far in every chunk, so a client counts tokens, not
 * pieces of text); as vLLM does, also "top_k",
 * "min_p", "repetition_penalty" and "ignore_eos". Keys the API defines for features this
 * server lacks (tools, logprobs, echo, best_of > 1, penalties other than
 * 0, ...) are refused by name; other unknown keys are ignored, as OpenAI's
 * own clients send extras. Pure functions; any thread. */
#ifndef PAGECHAT_HTTP_REQ_H
#define PAGECHAT_HTTP_REQ_H

#include "conv/conv.h"
#include "engine/sample.h"
#include "base/base.h"
#include "models/tmpl.h"
#include "models/tok.h"

#define HTTP_MAX_STOP 4      /* stop strings per request (OpenAI's limit) */
#define HTTP_MAX_N    64     /* completions per request (the engine's limit) */
#define HTTP_MAX_STOP_BYTES 256 /* bytes of one stop string */

enum http_kind { HTTP_CHAT, HTTP_COMPLETION };

typedef struct http_req {
	enum http_kind kind;
	char *model;             /* owned; "" when not given */
	conv chat;               /* HTTP_CHAT: the system prompt and the messages */
	char *prompt;            /* HTTP_COMPLETION: owned text, NUL-terminated ... */
	size_t prompt_len;
	int32_t *prompt_ids;     /* ... or owned token ids (prompt NULL) */
	int n_prompt_ids;
	samp_params samp;        /* the defaults with the request's values applied */
	bool seed_given;
	int n;                   /* completions, 1..HTTP_MAX_N */
	int max_tokens;          /* per completion; 0: not given (until the context) */
	char *stop[HTTP_MAX_STOP]; /* owned; non-empty, NUL-free */
	int n_stop;
	bool stream, include_usage, continuous_usage;
	bool ignore_eos;         /* vLLM's and llama-server's: the model's end-of-text and
	                            end-of-turn tokens do not end the answer */
} http_req;

/* Parses body[0..len) as a request of kind into *r, starting from the
 * sampling defaults dflt. 0 on success (release with http_req_deinit); -1
 * with e saying what is wrong, param[0..param_cap) naming the field at fault
 * ("" for the body as a whole), and *r zeroed. */
int http_req_parse(const char *body, size_t len, enum http_kind kind, const samp_params *dflt,
		   http_req *r, char *param, size_t param_cap, err *e);
void http_req_deinit(http_req *r);          /* a zeroed request is fine */

/* The prompt's token ids into *ids (new array, the caller frees it; *n of
 * them): a chat through conv/conv with the template family fam (completion
 * mode without one), a text with BOS as the vocabulary asks, ids as given
 * (checked against the vocabulary). 0, or -1 with e. */
int http_req_prompt(const http_req *r, const tok *t, enum tmpl_family fam, int32_t **ids, int *n,
		    err *e);

#endif
