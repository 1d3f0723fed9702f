/* tests/fuzz/seed.c: writes the generated seed inputs of the fuzz corpora
 * (`make fuzz-seed`): small synthetic GGUF files (a model-like file in v2
 * and v3, two tokenizer-only files, truncated and damaged headers), vocabulary
 * descriptions for fuzz_tok_vocab, texts for fuzz_tok_text, JSON documents,
 * batch files, conversations, saved chats and config files. No model weights
 * and nothing copied from other projects: every seed is spelled out here (but
 * config/default.yaml, read as shipped), a few KB at most. Run from the
 * repository root. Files are
 * named seed-*, so rerunning replaces them and leaves the inputs the fuzzers
 * merged in alone.
 *
 * usage: seed CORPUS_DIR   (writes CORPUS_DIR/TARGET/seed-NAME) */
#include "tests/fuzz/gguf_gen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SEP "\xfe"           /* FUZZ_SEP */

static const char *root;

static void put(const char *target, const char *name, const void *data, size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", root, target);
	if (mkdir(path, 0777) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof path, "%s/%s/seed-%s", root, target, name);
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(data, 1, n, fp) != n || fclose(fp)) {
		perror(path);
		exit(1);
	}
}

static void put_str(const char *target, const char *name, const char *s, size_t n)
{
	put(target, name, s, n);
}

#define PUT_LIT(target, name, lit) put_str(target, name, lit, sizeof lit - 1)

/* ---- GGUF ---- */

/* A model-like file: every scalar type, arrays of several types, tensors of
 * plain and block types. */
static void model_file(gw *w, uint32_t version, uint32_t align)
{
	gw_begin(w, version);
	gw_kv_str(w, "general.architecture", "llama", 5);
	gw_kv_u32(w, "general.alignment", align);
	gw_kv_u32(w, "llama.block_count", 1);
	gw_kv_f32(w, "llama.rope.freq_base", 10000.0f);
	gw_kv_bool(w, "general.flag", true);
	static const enum gguf_vtype scalars[] = {GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16,
		GGUF_I32, GGUF_U64, GGUF_I64, GGUF_F64};
	static const int sizes[] = {1, 1, 2, 2, 4, 8, 8, 8};
	for (size_t i = 0; i < ARRAY_LEN(scalars); i++) {
		char key[32];
		snprintf(key, sizeof key, "test.scalar%zu", i);
		gw_key(w, key, scalars[i]);
		gw_le(w, 0x80 + i, sizes[i]);
	}
	gw_kv_arr(w, "test.arr_i32", GGUF_I32, 3);
	gw_u32(w, 1);
	gw_u32(w, (uint32_t)-2);
	gw_u32(w, 3);
	gw_kv_arr(w, "test.arr_f32", GGUF_F32, 2);
	gw_f32(w, 0.5f);
	gw_f32(w, -1.0f);
	gw_kv_arr(w, "test.arr_str", GGUF_STR, 2);
	gw_str(w, "a", 1);
	gw_str(w, "", 0);
	gw_kv_arr(w, "test.arr_empty", GGUF_U8, 0);
	int64_t ne_f32[2] = {4, 2}, ne_f16[1] = {8}, ne_q8[1] = {32}, ne_q4[2] = {32, 2};
	gw_tensor(w, "a.weight", 2, ne_f32, 0, 0);                 /* 32 bytes */
	gw_tensor(w, "b.weight", 1, ne_f16, 1, align > 32 ? align : 32);
	gw_tensor(w, "c.weight", 1, ne_q8, 8, 2 * (align > 32 ? align : 32)); /* 34 bytes */
	gw_tensor(w, "d.weight", 2, ne_q4, 2, 4 * (align > 32 ? align : 32)); /* 36 bytes */
	gw_end(w, align, 4 * (align > 32 ? align : 32) + 36);
}

static const char *const spm_words[] = {
	"\xe2\x96\x81", "\xe2\x96\x81t", "he", "\xe2\x96\x81the", "\xe2\x96\x81" "a", "ll", "lo",
	"\xe2\x96\x81H", "\xe2\x96\x81Hello", "\xe2\x96\x81world", "or", "ld", "in", "\xe2\x96\x81in",
	"e", "l", "o", "r", "d", "w", "H", "t", "h", "a", "n", "i",
};

/* A SentencePiece vocabulary with a few byte tokens and a chat template. */
static void spm_vocab_file(gw *w)
{
	static const int bytes[] = {0x00, 0x0a, 0x20, 0x41, 0x80, 0x96, 0xe2, 0xff};
	size_t n = 3 + ARRAY_LEN(bytes) + ARRAY_LEN(spm_words);
	gw_begin(w, 3);
	gw_kv_str(w, "tokenizer.ggml.model", "llama", 5);
	gw_kv_arr(w, "tokenizer.ggml.tokens", GGUF_STR, n);
	gw_str(w, "<unk>", 5);
	gw_str(w, "<s>", 3);
	gw_str(w, "</s>", 4);
	for (size_t i = 0; i < ARRAY_LEN(bytes); i++) {
		char b[8];
		snprintf(b, sizeof b, "<0x%02X>", bytes[i]);
		gw_str(w, b, 6);
	}
	for (size_t i = 0; i < ARRAY_LEN(spm_words); i++)
		gw_str(w, spm_words[i], strlen(spm_words[i]));
	gw_kv_arr(w, "tokenizer.ggml.scores", GGUF_F32, n);
	for (size_t i = 0; i < n; i++)
		gw_f32(w, -(float)i);
	gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_I32, n);
	for (size_t i = 0; i < n; i++)
		gw_u32(w, i == 0 ? 2 : i < 3 ? 3 : i < 3 + ARRAY_LEN(bytes) ? 6 : 1);
	gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
	gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
	gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	gw_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
	static const char tmpl[] = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
	gw_kv_str(w, "tokenizer.chat_template", tmpl, sizeof tmpl - 1);
	gw_end(w, 32, 0);
}

static const char *const bpe_specials[] = {"<|begin_of_text|>", "<|eot_id|>",
	"<|start_header_id|>", "<|end_header_id|>"};
static const char *const bpe_words[] = {"\xc4\xa0t", "he", "\xc4\xa0the", "ll", "He", "Hell",
	"Hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "\xc4\xa0world", "\xc4\x8a"};
static const char *const bpe_merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "H e",
	"He ll", "Hell o", "\xc4\xa0 w", "o r", "\xc4\xa0w or", "l d", "\xc4\xa0wor ld"};

/* A byte-level BPE vocabulary: the printable ASCII characters, the space and
 * newline characters, some words and their merges, Llama 3 specials. */
static void bpe_vocab_file(gw *w, const char *pre, const char *tmpl)
{
	size_t n = ARRAY_LEN(bpe_specials) + 95 + ARRAY_LEN(bpe_words);
	gw_begin(w, 3);
	gw_kv_str(w, "tokenizer.ggml.model", "gpt2", 4);
	gw_kv_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
	gw_kv_arr(w, "tokenizer.ggml.tokens", GGUF_STR, n);
	for (size_t i = 0; i < ARRAY_LEN(bpe_specials); i++)
		gw_str(w, bpe_specials[i], strlen(bpe_specials[i]));
	for (int b = 0x20; b <= 0x7e; b++) {
		char c[2];
		gw_str(w, c, gw_gpt2_byte_char(b, c));
	}
	for (size_t i = 0; i < ARRAY_LEN(bpe_words); i++)
		gw_str(w, bpe_words[i], strlen(bpe_words[i]));
	gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_I32, n);
	for (size_t i = 0; i < n; i++)
		gw_u32(w, i < ARRAY_LEN(bpe_specials) ? 3 : 1);
	gw_kv_arr(w, "tokenizer.ggml.merges", GGUF_STR, ARRAY_LEN(bpe_merges));
	for (size_t i = 0; i < ARRAY_LEN(bpe_merges); i++)
		gw_str(w, bpe_merges[i], strlen(bpe_merges[i]));
	gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 0);
	gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 1);
	gw_kv_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl));
	gw_end(w, 32, 0);
}

static void put_gw(const char *target, const char *name, gw *w, size_t n)
{
	put(target, name, w->p, MIN(n, w->n));
}

static void gguf_seeds(void)
{
	gw w;
	model_file(&w, 3, 32);
	put_gw("gguf", "model-v3", &w, w.n);
	put_gw("gguf", "trunc-magic", &w, 4);
	put_gw("gguf", "trunc-header", &w, 20);
	put_gw("gguf", "trunc-kv", &w, 200);
	put_gw("gguf", "trunc-data", &w, w.n - 16);
	w.p[16] = 0xff;                  /* metadata count far beyond the file */
	w.p[23] = 0x7f;
	put_gw("gguf", "huge-kv-count", &w, w.n);
	free(w.p);
	model_file(&w, 2, 64);
	put_gw("gguf", "model-v2-align64", &w, w.n);
	w.p[8] = 0xff;                   /* tensor count beyond the file */
	put_gw("gguf", "huge-tensor-count", &w, w.n);
	free(w.p);
	spm_vocab_file(&w);
	put_gw("gguf", "vocab-spm", &w, w.n);
	free(w.p);
	bpe_vocab_file(&w, "llama-bpe", "<|start_header_id|>{{ role }}<|end_header_id|>");
	put_gw("gguf", "vocab-bpe", &w, w.n);
	free(w.p);
}

/* ---- vocabulary descriptions (fuzz_tok_vocab) ---- */

struct buf {
	char p[4096];
	size_t n;
};

static void add(struct buf *b, const void *s, size_t n)
{
	if (b->n + n > sizeof b->p) {
		fprintf(stderr, "seed: buffer too small\n");
		exit(1);
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void add_s(struct buf *b, const char *s)
{
	add(b, s, strlen(s));
}

/* A token field: separator, type, score byte, text. */
static void add_tok(struct buf *b, int type, int score, const char *text)
{
	uint8_t h[3] = {0xfe, (uint8_t)type, (uint8_t)score};
	add(b, h, 3);
	add_s(b, text);
}

static void add_merge(struct buf *b, const char *text)
{
	uint8_t h[2] = {0xfe, 0x80};
	add(b, h, 2);
	add_s(b, text);
}

static void vocab_seeds(void)
{
	struct buf b = {0};
	/* SentencePiece: types, scores, bos/eos/unk ids, byte tokens, chat */
	uint8_t spm[7] = {0x1e, 0x58, 0x11, 1, 2, 0xff, 0};
	add(&b, spm, 7);
	add_s(&b, "Hello world, the  in\n\xe2\x82\xac <s>x</s>");
	add_tok(&b, 2, 0, "<unk>");
	add_tok(&b, 3, 0, "<s>");
	add_tok(&b, 3, 0, "</s>");
	for (size_t i = 0; i < ARRAY_LEN(spm_words); i++)
		add_tok(&b, 1, (int)(256 - 4 * i) & 0xff, spm_words[i]);
	add_tok(&b, 4, 0, "<|user|>");
	put("tok_vocab", "spm", b.p, b.n);
	/* the same as Phi-3 (rstrip on specials) without space prefix */
	b.p[0] = (char)(0x0e | 0x20 | 0x80);
	put("tok_vocab", "spm-phi3", b.p, b.n);

	/* byte-level BPE with merges, for each pre-tokenizer */
	static const char *const pre_names[] = {"none", "llama-bpe", "qwen2", "gpt-2"};
	for (int pre = 0; pre < 4; pre++) {
		b.n = 0;
		uint8_t bpe[7] = {0x03, (uint8_t)(0x98 | pre), 0x11, 0, 1, 0xff, 0xff};
		add(&b, bpe, 7);
		add_s(&b, "Hello world! I'm 12345 \xf0\x9f\xa6\x99  \n\n x<|eot_id|>");
		for (size_t i = 0; i < ARRAY_LEN(bpe_specials); i++)
			add_tok(&b, 3, 0, bpe_specials[i]);
		add_tok(&b, 4, 0, "<think>");
		for (size_t i = 0; i < ARRAY_LEN(bpe_words); i++)
			add_tok(&b, 1, 0, bpe_words[i]);
		for (size_t i = 0; i < ARRAY_LEN(bpe_merges); i++)
			add_merge(&b, bpe_merges[i]);
		char name[32];
		snprintf(name, sizeof name, "bpe-%s", pre_names[pre]);
		put("tok_vocab", name, b.p, b.n);
	}
	/* damaged: a byte type on a non-byte text, and a NaN-free bad score count */
	b.n = 0;
	uint8_t bad[7] = {0x06, 0x08, 0x08, 0, 0, 0, 0};
	add(&b, bad, 7);
	add_s(&b, "abc");
	add_tok(&b, 6, 0, "<0xZZ>");
	add_tok(&b, 1, 0, "a");
	put("tok_vocab", "bad", b.p, b.n);
}

/* ---- texts for the real vocabularies (fuzz_tok_text) ---- */

static void text_seeds(void)
{
	static const struct { const char *name, *text; size_t len; } texts[] = {
#define T(name, s) {name, s, sizeof s - 1}
		T("plain", "Hello world"),
		T("spaces", "  leading spaces,   runs\t\ttabs \n\n\r\n trailing  "),
		T("contractions", "I'm sure they'll say we've done what's right, didn't we? 'S"),
		T("digits", "1234567890 3.14159 -42 1,000,000"),
		T("cyrillic", "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80"),
		T("cjk", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad"),
		T("emoji", "llama \xf0\x9f\xa6\x99 rocket \xf0\x9f\x9a\x80 flag \xf0\x9f\x87\xab\xf0\x9f\x87\xb7"),
		T("chatml", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n"),
		T("llama3", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"),
		T("inst", "<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nhi [/INST] ok</s>"),
		T("phi3", "<|user|>\nhi<|end|>\n<|assistant|>\n"),
		T("invalid", "bad \xff\xfd\xc0\x80 \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82 end \x80"),
		T("nul", "a\0b\0\0c"),
		T("whitespace", "\n\n\n   \t \xc2\xa0\xe3\x80\x80 x"),
		T("think", "<think>\nreasoning</think> answer <tool_call>"),
#undef T
	};
	/* options: 0 plain, 1 BOS, 2 special, 3 BOS + special, 6 spans, 9 raw ids */
	static const uint8_t opts[] = {0, 1, 3, 6, 9, 2};
	for (unsigned v = 0; v < 6; v++)
		for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
			if ((i + v) % 3 != 0 && i != 0)  /* a spread, not every pair */
				continue;
			struct buf b = {0};
			uint8_t head[3] = {(uint8_t)v, opts[(i + v) % ARRAY_LEN(opts)], (uint8_t)i};
			add(&b, head, 3);
			add(&b, texts[i].text, texts[i].len);
			char name[64];
			snprintf(name, sizeof name, "v%u-%s", v, texts[i].name);
			put("tok_text", name, b.p, b.n);
		}
}

/* ---- JSON, batch files, conversations ---- */

static void json_seeds(void)
{
	PUT_LIT("json", "object", "{\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"d\"}}");
	PUT_LIT("json", "escapes", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\ud83e\\udd99\\u0000x\"]");
	PUT_LIT("json", "numbers", "[0, -0, 1e308, -1e-308, 123456789012345678901234567890, 0.5E+2]");
	PUT_LIT("json", "nested", "[[[[[[[[[[{\"k\": [[[]]]}]]]]]]]]]]");
	PUT_LIT("json", "dup-keys", "{\"k\": 1, \"k\": 2, \"\": {}, \"k\\u0000x\": 3}");
	PUT_LIT("json", "bad-surrogate", "[\"\\ud800\", \"\\udc00\"]");
	PUT_LIT("json", "conversation",
		"[{\"role\": \"system\", \"content\": \"Be brief.\"},\n"
		" {\"role\": \"user\", \"content\": \"Hi \\u00e9\"}]\n");
	PUT_LIT("json", "utf8", "\"caf\xc3\xa9 \xf0\x9f\xa6\x99 \xff\"");
}

static void batch_seeds(void)
{
	PUT_LIT("batch", "prompts",
		"{\"prompt\": \"Once upon a time\", \"max_tokens\": 16}\n"
		"\n"
		"{\"prompt\": \"Lily\", \"n\": 3, \"temperature\": 0.7, \"seed\": 5, \"stop\": [\".\", \"!\"]}\n"
		"   \t\r\n"
		"{\"prompt_ids\": [1, 400, 2], \"stop\": \"x\"}\n");
	PUT_LIT("batch", "bad-key", "{\"prompt\": \"x\", \"max_token\": 3}\n");
	PUT_LIT("batch", "bad-range", "{\"prompt_ids\": [1, 512]}\n{\"prompt\": \"a\", \"n\": 65}\n");
	PUT_LIT("batch", "both", "{\"prompt\": \"a\", \"prompt_ids\": []}\n");
	PUT_LIT("batch", "empty", "\n \n\t\n");
	PUT_LIT("batch", "not-object", "[1, 2]\n{\"prompt\": \"a\", \"temperature\": 101}\n");
}

static void tmpl_seeds(void)
{
	/* every family with a system, user, assistant, user conversation */
	for (int fam = 0; fam < 15; fam++) {
		struct buf b = {0};
		uint8_t head[3] = {(uint8_t)(fam | (fam & 1 ? 0x80 : 0)), (uint8_t)(fam % 7), 0};
		add(&b, head, 3);
		static const char msgs[] = "\x00You are helpful. " SEP "\x01  Hi <|im_end|> there  "
			SEP "\x02Hello!\n" SEP "\x01" "again" SEP "\x05tool\xfd" "result";
		add(&b, msgs, sizeof msgs - 1);
		char name[32];
		snprintf(name, sizeof name, "fam%d", fam);
		put("tmpl", name, b.p, b.n);
	}
	PUT_LIT("tmpl", "json", "\x02\x03\x01[{\"role\": \"system\", \"content\": \"s\"}, "
		"{\"role\": \"user\", \"content\": \"<|eot_id|> hi\"}, "
		"{\"role\": \"assistant\", \"content\": \" ok \"}]");
	PUT_LIT("tmpl", "json-bad", "\x04\x01\x01[{\"role\": \"robot\", \"content\": \"s\"}, 3]");
	PUT_LIT("tmpl", "detect-llama3",
		"\x01\x00\x00{% set m = '<|start_header_id|>' + role + '<|end_header_id|>' %}");
	PUT_LIT("tmpl", "detect-mistral",
		"\x01\x00\x00{{ bos_token }}[INST] ' [INST] ' + system_message [AVAILABLE_TOOLS]");
}

static void store_seeds(void)
{
	/* options byte, template byte, then chat file / journal / session */
	PUT_LIT("store", "chat",
		"\x04\x02{\n  \"format\": \"pagechat-chat 1\",\n  \"name\": \"one\",\n"
		"  \"system_prompt\": \"story\",\n  \"system\": \"Once upon a time\",\n"
		"  \"messages\": [\n    {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},\n"
		"    {\"role\": \"assistant\", \"content\": \"Hello\", \"finish\": \"stop\", "
		"\"tokens\": 3, \"ttft_ms\": 1.5, \"tpot_ms\": 0.25}\n  ]\n}\n");
	PUT_LIT("store", "journal",
		"\x01\x00{\"format\": \"pagechat-chat 1\", \"name\": \"a\", \"system_prompt\": \"\", "
		"\"system\": \"\", \"messages\": [{\"role\": \"user\", \"content\": \"q\"}, "
		"{\"role\": \"assistant\", \"content\": \"ab\", \"error\": \"x\"}]}"
		SEP "pagechat-stream 1 1 1\nbcdef");
	PUT_LIT("store", "session",
		"\x02\x00{}" SEP SEP "{\"format\": \"pagechat-session 1\", \"active\": 1, "
		"\"tabs\": [\"one.json\", \"two.json\"]}");
	PUT_LIT("store", "bad-role",
		"\x00\x00{\"format\": \"pagechat-chat 1\", \"name\": \"a\", \"system_prompt\": \"\", "
		"\"system\": \"\", \"messages\": [{\"role\": \"system\", \"content\": \"q\"}]}");
}

static void cfg_seeds(void)
{
	/* the documented defaults, as shipped */
	FILE *fp = fopen("config/default.yaml", "rb");
	char text[8192];
	size_t n = fp ? fread(text, 1, sizeof text, fp) : 0;
	if (fp)
		fclose(fp);
	if (n)
		put("cfg", "default", text, n);
	PUT_LIT("cfg", "small",
		"model: m.gguf\nthreads: 2\nkv_cache: {block_size: 32, pool_mib: 64, pool_blocks: 0, "
		"type_k: q8, type_v: fp8}\n"
		"sampling: {temperature: 0, seed: 7}\nsystem_prompts: {a: hi, b: \"\"}\n"
		"default_system_prompt: a\ntabs:\n  - {name: x, system_prompt: b, sampling: {top_k: 5}}\n"
		"ui: {panels: false, tab_colors: [red, blue]}\n");
	PUT_LIT("cfg", "anchors", "sampling: &s {top_k: 1}\ntabs: [{name: a, sampling: *s}, "
		"{name: b, <<: *s}]\n");
	PUT_LIT("cfg", "errors", "threads: -1\nthreads: 2\nunknown: 1\nkv_cache: [1, 2]\n");
	PUT_LIT("cfg", "not-mapping", "- a\n- b\n");
	PUT_LIT("cfg", "tags", "%YAML 1.1\n---\nthreads: !!int \"3\"\ncontext: 0x10\n...\n");
}

/* fuzz_http_req: byte 0 picks the kind (bit 0: completions), the
 * vocabulary (bits 1-3) and the template family (bits 4-7). */
static void http_req_seeds(void)
{
	PUT_LIT("http_req", "chat",
		"\x24{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
		" {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": null},"
		" {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"more\"}]}],"
		" \"n\": 2, \"max_completion_tokens\": 9, \"temperature\": 0.5, \"top_p\": 0.9, \"seed\": -3,"
		" \"stop\": [\"x\", \"\"], \"stream\": true, \"stream_options\": {\"include_usage\": true}}");
	PUT_LIT("http_req", "chat-errors",
		"\x00{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"system\"}],"
		" \"tools\": [], \"logprobs\": false, \"response_format\": {\"type\": \"text\"}}");
	PUT_LIT("http_req", "completion",
		"\x05{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"min_p\": 0.1, \"top_k\": 40,"
		" \"repetition_penalty\": 1.1, \"stop\": \"\\n\", \"best_of\": 1, \"echo\": false}");
	PUT_LIT("http_req", "completion-ids", "\x07{\"prompt\": [[1, 400, 2]], \"n\": 64, \"seed\": 1e19}");
	PUT_LIT("http_req", "completion-bad", "\x01{\"prompt\": [\"a\", \"b\"], \"n\": 65, \"top_p\": 0}");
}

/* fuzz_http_server: byte 0 bit 0 half-closes after sending; bits 1-2 cut
 * the request into writes. */
static void http_server_seeds(void)
{
	PUT_LIT("http_server", "get", "\x01GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	PUT_LIT("http_server", "pool", "\x00GET /pagechat/v1/pool HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	PUT_LIT("http_server", "completion",
		"\x02POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		"Content-Length: 46\r\n\r\n{\"prompt\": \"Once\", \"max_tokens\": 4, \"n\": 2}   ");
	PUT_LIT("http_server", "chat-stream",
		"\x06POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		"41\r\n{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"stream\": true}\r\n"
		"0\r\n\r\n");
	PUT_LIT("http_server", "hang-up",
		"\x01POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 68\r\n\r\n"
		"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 100}");
	PUT_LIT("http_server", "errors",
		"\x00POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n"
		"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\nBAD\r\n\r\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: seed CORPUS_DIR\n");
		return 2;
	}
	root = argv[1];
	mkdir(root, 0777);
	gguf_seeds();
	vocab_seeds();
	text_seeds();
	json_seeds();
	batch_seeds();
	tmpl_seeds();
	store_seeds();
	cfg_seeds();
	http_req_seeds();
	http_server_seeds();
	return 0;
}
