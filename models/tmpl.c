/* models/tmpl.c: chat-template families: detection by marker strings and
 * rendering, as llama.cpp's llm_chat_detect_template and
 * llm_chat_apply_template do it for the families supported here.
 *
 * Each family is a row of `families`: its name, renderer, end-of-turn token
 * and the variant switches its renderer reads. Renderers append to a prompt
 * buffer through two calls: put_tmpl() for text the template writes (recorded
 * as a span, where special tokens may be parsed) and put_text() for message
 * contents. */
#include "models/tmpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Prompt buffer                                                       */

struct pbuf {
	tmpl_prompt *p;          /* borrowed: the prompt being written */
	size_t cap, cap_spans;
};

static void put(struct pbuf *b, const char *s, size_t n)
{
	tmpl_prompt *p = b->p;
	xgrow_size(&p->text, &b->cap, p->len + n + 1, 1);
	memcpy(p->text + p->len, s, n);
	p->len += n;
	p->text[p->len] = '\0';
}

/* Message content: plain text. */
static void put_text(struct pbuf *b, const char *s, size_t n)
{
	put(b, s, n);
}

/* Template text: extends the last span when it ends here, else opens one. */
static void put_tmpl(struct pbuf *b, const char *s)
{
	tmpl_prompt *p = b->p;
	size_t n = strlen(s), at = p->len;
	if (n == 0)
		return;
	put(b, s, n);
	if (p->n_spans > 0 && p->spans[p->n_spans - 1].off + p->spans[p->n_spans - 1].len == at) {
		p->spans[p->n_spans - 1].len += n;
		return;
	}
	xgrow_size(&p->spans, &b->cap_spans, p->n_spans + 1, sizeof *p->spans);
	p->spans[p->n_spans++] = (tok_span){.off = at, .len = n};
}

/* llama.cpp trims with C isspace: space, \t, \n, \v, \f, \r at both ends. */
static bool c_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Length of s[0..n) once trimmed; *s moves to its first byte. */
static size_t trimmed(const char **s, size_t n)
{
	while (n > 0 && c_space((*s)[0]))
		(*s)++, n--;
	while (n > 0 && c_space((*s)[n - 1]))
		n--;
	return n;
}

static void put_trimmed(struct pbuf *b, const char *s, size_t n)
{
	n = trimmed(&s, n);
	put_text(b, s, n);
}

static bool is_role(const tmpl_msg *m, const char *role)
{
	return strcmp(m->role, role) == 0;
}

/* ------------------------------------------------------------------ */
/* Renderers                                                           */

struct tmpl_fam;
typedef void render_fn(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
		       size_t n, bool add_ass);

/* A supported family: the row of `families` tmpl_render dispatches through. */
struct tmpl_fam {
	enum tmpl_family fam;
	const char *name;            /* llama.cpp's name for it */
	render_fn *render;
	const char *eot;             /* text of the end-of-turn token, NULL: EOS */
	/* variant switches (Llama 2 / Mistral) */
	bool system_tags;            /* Llama 2: <<SYS>> around the system message */
	bool bos_in_history;         /* Llama 2: <s>[INST] for later turns */
	bool strip;                  /* Llama 2: trim every content */
	const char *lead, *trail;    /* Mistral: spaces around [INST] / replies */
	bool trim_replies;           /* Mistral v3: trim assistant contents */
};

/* <|im_start|>role\ncontent<|im_end|>\n per message. */
static void render_chatml(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			  size_t n, bool add_ass)
{
	(void)f;
	for (size_t i = 0; i < n; i++) {
		put_tmpl(b, "<|im_start|>");
		put_tmpl(b, msgs[i].role);
		put_tmpl(b, "\n");
		put_text(b, msgs[i].content, msgs[i].content_len);
		put_tmpl(b, "<|im_end|>\n");
	}
	if (add_ass)
		put_tmpl(b, "<|im_start|>assistant\n");
}

/* Contents trimmed; no <|begin_of_text|> (tokenization adds BOS). */
static void render_llama3(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			  size_t n, bool add_ass)
{
	(void)f;
	for (size_t i = 0; i < n; i++) {
		put_tmpl(b, "<|start_header_id|>");
		put_tmpl(b, msgs[i].role);
		put_tmpl(b, "<|end_header_id|>\n\n");
		put_trimmed(b, msgs[i].content, msgs[i].content_len);
		put_tmpl(b, "<|eot_id|>");
	}
	if (add_ass)
		put_tmpl(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* [INST] opens a turn, a user message closes the instruction with [/INST],
 * anything else (the reply) ends the turn with </s>. */
static void render_llama2(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			  size_t n, bool add_ass)
{
	(void)add_ass;
	bool in_turn = true;             /* the first [INST] comes without <s> */
	put_tmpl(b, "[INST] ");
	for (size_t i = 0; i < n; i++) {
		const tmpl_msg *m = &msgs[i];
		void (*content)(struct pbuf *, const char *, size_t) =
			f->strip ? put_trimmed : put_text;
		if (!in_turn) {
			in_turn = true;
			put_tmpl(b, f->bos_in_history ? "<s>[INST] " : "[INST] ");
		}
		if (is_role(m, "system")) {
			put_tmpl(b, f->system_tags ? "<<SYS>>\n" : "");
			content(b, m->content, m->content_len);
			put_tmpl(b, f->system_tags ? "\n<</SYS>>\n\n" : "\n");
		} else if (is_role(m, "user")) {
			content(b, m->content, m->content_len);
			put_tmpl(b, " [/INST]");
		} else {
			content(b, m->content, m->content_len);
			put_tmpl(b, "</s>");
			in_turn = false;
		}
	}
}

/* Mistral v1, v3 and v3-tekken: the same shape, spaces differ. */
static void render_mistral(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			   size_t n, bool add_ass)
{
	(void)add_ass;
	bool in_turn = false;
	for (size_t i = 0; i < n; i++) {
		const tmpl_msg *m = &msgs[i];
		if (!in_turn) {
			put_tmpl(b, f->lead);
			put_tmpl(b, "[INST]");
			put_tmpl(b, f->trail);
			in_turn = true;
		}
		if (is_role(m, "system")) {
			put_text(b, m->content, m->content_len);
			put_tmpl(b, "\n\n");
		} else if (is_role(m, "user")) {
			put_text(b, m->content, m->content_len);
			put_tmpl(b, f->lead);
			put_tmpl(b, "[/INST]");
		} else {
			put_tmpl(b, f->trail);
			(f->trim_replies ? put_trimmed : put_text)(b, m->content, m->content_len);
			put_tmpl(b, "</s>");
			in_turn = false;
		}
	}
}

/* Mistral v7: [SYSTEM_PROMPT] and [INST] blocks, replies end with </s>. */
static void render_mistral_v7(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			      size_t n, bool add_ass)
{
	(void)add_ass;
	for (size_t i = 0; i < n; i++) {
		const tmpl_msg *m = &msgs[i];
		if (is_role(m, "system")) {
			put_tmpl(b, "[SYSTEM_PROMPT]");
			put_tmpl(b, f->trail);
			put_text(b, m->content, m->content_len);
			put_tmpl(b, "[/SYSTEM_PROMPT]");
		} else if (is_role(m, "user")) {
			put_tmpl(b, "[INST]");
			put_tmpl(b, f->trail);
			put_text(b, m->content, m->content_len);
			put_tmpl(b, "[/INST]");
		} else {
			put_tmpl(b, f->trail);
			put_text(b, m->content, m->content_len);
			put_tmpl(b, "</s>");
		}
	}
}

/* Gemma has no system turn: system texts (trimmed, joined as they are) open
 * the next user turn, when they are not empty. The assistant is "model";
 * contents are trimmed. */
static void render_gemma(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			 size_t n, bool add_ass)
{
	(void)f;
	size_t from = 0;                 /* system messages before i not yet used */
	for (size_t i = 0; i < n; i++) {
		const tmpl_msg *m = &msgs[i];
		if (is_role(m, "system"))
			continue;
		bool model = is_role(m, "assistant");
		put_tmpl(b, "<start_of_turn>");
		put_tmpl(b, model ? "model" : m->role);
		put_tmpl(b, "\n");
		if (!model) {
			size_t at = b->p->len;
			for (; from < i; from++) {
				const char *s = msgs[from].content;
				size_t k = trimmed(&s, msgs[from].content_len);
				if (is_role(&msgs[from], "system"))
					put_text(b, s, k);
			}
			if (b->p->len > at)
				put_tmpl(b, "\n\n");
		}
		put_trimmed(b, m->content, m->content_len);
		put_tmpl(b, "<end_of_turn>\n");
	}
	if (add_ass)
		put_tmpl(b, "<start_of_turn>model\n");
}

/* <|role|>\ncontent<|end|>\n per message. */
static void render_phi3(struct pbuf *b, const struct tmpl_fam *f, const tmpl_msg *msgs,
			size_t n, bool add_ass)
{
	(void)f;
	for (size_t i = 0; i < n; i++) {
		put_tmpl(b, "<|");
		put_tmpl(b, msgs[i].role);
		put_tmpl(b, "|>\n");
		put_text(b, msgs[i].content, msgs[i].content_len);
		put_tmpl(b, "<|end|>\n");
	}
	if (add_ass)
		put_tmpl(b, "<|assistant|>\n");
}

static const struct tmpl_fam families[] = {
	{.fam = TMPL_CHATML, .name = "chatml", .render = render_chatml, .eot = "<|im_end|>"},
	{.fam = TMPL_LLAMA3, .name = "llama3", .render = render_llama3, .eot = "<|eot_id|>"},
	{.fam = TMPL_LLAMA2, .name = "llama2", .render = render_llama2},
	{.fam = TMPL_LLAMA2_SYS, .name = "llama2-sys", .render = render_llama2,
	 .system_tags = true},
	{.fam = TMPL_LLAMA2_SYS_BOS, .name = "llama2-sys-bos", .render = render_llama2,
	 .system_tags = true, .bos_in_history = true},
	{.fam = TMPL_LLAMA2_SYS_STRIP, .name = "llama2-sys-strip", .render = render_llama2,
	 .system_tags = true, .strip = true},
	{.fam = TMPL_MISTRAL_V1, .name = "mistral-v1", .render = render_mistral,
	 .lead = " ", .trail = " "},
	{.fam = TMPL_MISTRAL_V3, .name = "mistral-v3", .render = render_mistral,
	 .lead = "", .trail = " ", .trim_replies = true},
	{.fam = TMPL_MISTRAL_V3_TEKKEN, .name = "mistral-v3-tekken", .render = render_mistral,
	 .lead = "", .trail = ""},
	{.fam = TMPL_MISTRAL_V7, .name = "mistral-v7", .render = render_mistral_v7, .trail = " "},
	{.fam = TMPL_MISTRAL_V7_TEKKEN, .name = "mistral-v7-tekken", .render = render_mistral_v7,
	 .trail = ""},
	{.fam = TMPL_GEMMA, .name = "gemma", .render = render_gemma, .eot = "<end_of_turn>"},
	{.fam = TMPL_PHI3, .name = "phi3", .render = render_phi3, .eot = "<|end|>"},
};

static const struct tmpl_fam *fam_of(enum tmpl_family fam)
{
	for (size_t i = 0; i < ARRAY_LEN(families); i++)
		if (families[i].fam == fam)
			return &families[i];
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Detection                                                           */

struct src {
	const char *p;
	size_t n;
};

static bool has(struct src s, const char *needle)
{
	return memmem(s.p, s.n, needle, strlen(needle)) != NULL;
}

/* The Llama 2 / Mistral branch: "[INST]" templates (or a name starting with
 * "mistral"). */
static enum tmpl_family detect_inst(struct src s)
{
	if (has(s, "[SYSTEM_PROMPT]"))
		return TMPL_MISTRAL_V7;
	/* Mistral's official v1 and v3(-tekken) templates */
	if (has(s, "' [INST] ' + system_message") || has(s, "[AVAILABLE_TOOLS]")) {
		if (has(s, " [INST]"))
			return TMPL_MISTRAL_V1;
		if (has(s, "\"[INST]\""))
			return TMPL_MISTRAL_V3_TEKKEN;
		return TMPL_MISTRAL_V3;
	}
	if (has(s, "content.strip()"))
		return TMPL_LLAMA2_SYS_STRIP;
	if (has(s, "bos_token + '[INST]"))
		return TMPL_LLAMA2_SYS_BOS;
	return has(s, "<<SYS>>") ? TMPL_LLAMA2_SYS : TMPL_LLAMA2;
}

/* The marker tests of llama.cpp's llm_chat_detect_template, in its order.
 * Families llama.cpp knows and pagechat does not (Phi-4, Zephyr, ChatGLM,
 * Command-R, ...) are tested too, so their templates are UNKNOWN rather than
 * mistaken for a later family. */
enum tmpl_family tmpl_detect(const char *src, size_t len)
{
	if (!src || len == 0)
		return TMPL_NONE;
	for (size_t i = 0; i < ARRAY_LEN(families); i++)
		if (strlen(families[i].name) == len && memcmp(families[i].name, src, len) == 0)
			return families[i].fam;
	struct src s = {src, len};
	if (has(s, "<|im_start|>")) {
		/* not Phi-4 (<|im_sep|>) or SmolVLM (<end_of_utterance>) */
		bool other = has(s, "<|im_sep|>") || has(s, "<end_of_utterance>");
		return other ? TMPL_UNKNOWN : TMPL_CHATML;
	}
	if ((len >= 7 && memcmp(src, "mistral", 7) == 0) || has(s, "[INST]"))
		return detect_inst(s);
	if (has(s, "<|assistant|>") && has(s, "<|end|>"))
		return TMPL_PHI3;
	static const char *const others[][2] = {
		{"[gMASK]<sop>", NULL},                          /* ChatGLM 4 */
		{"<|assistant|>", "<|user|>"},                   /* Falcon 3, GLM-Edge */
		{"<|{{ item['role'] }}|>", "<|begin_of_image|>"},/* GLM-Edge */
		{"<|user|>", "<|endoftext|>"},                   /* Zephyr */
		{"bos_token + message['role']", NULL},           /* Monarch */
	};
	for (size_t i = 0; i < ARRAY_LEN(others); i++)
		if (has(s, others[i][0]) && (!others[i][1] || has(s, others[i][1])))
			return TMPL_UNKNOWN;
	if (has(s, "<start_of_turn>"))
		return TMPL_GEMMA;
	static const char *const others2[][2] = {
		{"'\\n\\nAssistant: ' + eos_token", NULL},       /* Orion */
		{"GPT4 Correct ", NULL},                         /* OpenChat */
		{"USER: ", "ASSISTANT: "},                       /* Vicuna */
		{"### Instruction:", "<|EOT|>"},                 /* DeepSeek Coder */
		{"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>"},   /* Command-R */
	};
	for (size_t i = 0; i < ARRAY_LEN(others2); i++)
		if (has(s, others2[i][0]) && (!others2[i][1] || has(s, others2[i][1])))
			return TMPL_UNKNOWN;
	if (has(s, "<|start_header_id|>") && has(s, "<|end_header_id|>"))
		return TMPL_LLAMA3;
	return TMPL_UNKNOWN;
}

int tmpl_from_gguf(const gguf_file *f, enum tmpl_family *out, err *e)
{
	gguf_str s = {NULL, 0};
	if (gguf_opt_str(f, "tokenizer.chat_template", &s, e) < 0)
		return -1;
	*out = tmpl_detect(s.p, (size_t)s.len);
	return 0;
}

const char *tmpl_name(enum tmpl_family fam)
{
	const struct tmpl_fam *f = fam_of(fam);
	return f ? f->name : fam == TMPL_NONE ? "none" : "unknown";
}

/* ------------------------------------------------------------------ */
/* Rendering, tokens                                                   */

int tmpl_render(enum tmpl_family fam, const tmpl_msg *msgs, size_t n,
		bool add_generation_prompt, tmpl_prompt *out, err *e)
{
	memset(out, 0, sizeof *out);
	const struct tmpl_fam *f = fam_of(fam);
	if (!f) {
		err_set(e, "%s", fam == TMPL_NONE ?
			"the model has no chat template (tokenizer.chat_template): "
			"completion mode only" :
			"the model's chat template is not one of the supported families "
			"(chatml, llama3, llama2, mistral, gemma, phi3)");
		return -1;
	}
	struct pbuf b = {.p = out};
	put(&b, "", 0);                  /* text is never NULL */
	f->render(&b, f, msgs, n, add_generation_prompt);
	return 0;
}

void tmpl_prompt_deinit(tmpl_prompt *p)
{
	free(p->text);
	free(p->spans);
	memset(p, 0, sizeof *p);
}

int tmpl_encode(const tmpl_prompt *p, const tok *t, int32_t *out, int cap)
{
	return tok_encode_spans(t, p->text, p->len, TOK_ADD_BOS | TOK_PARSE_SPECIAL, p->spans,
				p->n_spans, out, cap);
}

const char *tmpl_end_of_turn(enum tmpl_family fam)
{
	const struct tmpl_fam *f = fam_of(fam);
	return f ? f->eot : NULL;
}

int tmpl_stop_ids(enum tmpl_family fam, const tok *t, int32_t *out, int cap)
{
	int32_t ids[2];
	int n = 0;
	const char *eot = tmpl_end_of_turn(fam);
	int32_t id = eot ? tok_lookup(t, eot, strlen(eot)) : -1;
	if (id >= 0)
		ids[n++] = id;
	if (tok_eos(t) >= 0 && tok_eos(t) != id)
		ids[n++] = tok_eos(t);
	for (int i = 0; i < n && i < cap; i++)
		out[i] = ids[i];
	return n;
}

/* ------------------------------------------------------------------ */
/* Conversations from JSON                                             */

static const json *string_field(const json *item, const char *key, size_t i, err *e)
{
	const json *v = json_get(item, key);
	if (!v || v->type != JSON_STR) {
		err_set(e, "conversation item %zu: \"%s\" %s", i + 1, key,
			v ? "must be a string" : "is missing");
		return NULL;
	}
	return v;
}

int tmpl_conversation_from_json(const json *root, tmpl_msg **msgs, size_t *n, err *e)
{
	*msgs = NULL;
	*n = 0;
	if (!root || root->type != JSON_ARR) {
		err_set(e, "a conversation must be a JSON array of "
			"{\"role\": ..., \"content\": ...}");
		return -1;
	}
	tmpl_msg *m = xcalloc(root->n + 1, sizeof *m);
	for (size_t i = 0; i < root->n; i++) {
		const json *item = &root->items[i];
		if (item->type != JSON_OBJ) {
			err_set(e, "conversation item %zu: must be an object with \"role\" "
				"and \"content\"", i + 1);
			goto fail;
		}
		const json *role = string_field(item, "role", i, e);
		const json *content = role ? string_field(item, "content", i, e) : NULL;
		if (!content)
			goto fail;
		if (strcmp(role->str, "system") && strcmp(role->str, "user") &&
		    strcmp(role->str, "assistant")) {
			err_set(e, "conversation item %zu: role '%.32s' is not system, user "
				"or assistant", i + 1, role->str);
			goto fail;
		}
		m[i] = (tmpl_msg){.role = role->str, .content = content->str,
				  .content_len = content->len};
	}
	*msgs = m;
	*n = root->n;
	return 0;
fail:
	free(m);
	return -1;
}
