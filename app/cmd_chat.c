/* app/cmd_chat.c: `pagechat [chat] [flags]`: the configuration (file, then
 * flags) turned into the UI's parameters, then the full-screen chat. */
#include "app/cmds.h"

#include "app/serve.h"
#include "config/cfg.h"
#include "kernels/kern.h"
#include "kv/store.h"
#include "base/files.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "ui/ui.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char usage_chat[] =
	"usage: pagechat [chat] [--config FILE] [--resume] [-m MODEL] [flags]\n"
	"  The full-screen chat: tabs on one model sharing one paged KV-cache pool.\n"
	"  Reads ~/.config/pagechat/config.yaml (or FILE; config/default.yaml documents\n"
	"  every key); these flags override it:\n"
	"  -m, --model FILE    the model (default: " DEMO_MODEL ")\n"
	"  --draft FILE|ngram  speculative decoding: a draft model, or prompt lookup\n"
	"  -md FILE            the same as --draft FILE (as in pagechat generate)\n"
	"  --resume            reopen the tabs of the last session\n"
	"  --threads N         compute threads (0: one per core)\n"
	"  -c, --ctx N         context limit per conversation (0: the model's)\n"
	"  --overflow P        a full context: drop the oldest turns, shift them out\n"
	"                      keeping the rest's K/V (CPU only), or refuse the turn\n"
	"  --block-size N      tokens per KV block\n"
	"  --pool-blocks N     KV pool size in blocks   --pool-mib N   ... in MiB\n"
	"  --chunk N           prefill token budget per engine step\n"
	"  --draft-k N         draft tokens per step (1..16); --draft-adaptive varies it\n"
	"  --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --seed S\n"
	"  -n, --max-tokens N  tokens per answer (-1 or 0: until the context is full)\n"
	"  --prompt NAME       system prompt of new tabs (a name in system_prompts)\n"
	"  --no-panels         start with the side panels hidden (F2 shows them)\n"
	"  --kv-store DIR|off  the disk tier of cached KV blocks (default: kv_cache.store,\n"
	"                      else $XDG_CACHE_HOME/pagechat); --kv-store-max SIZE its limit\n"
	"  --kv-host SIZE      host memory for cached and swapped blocks (tier 1)\n"
	"  --preempt P         auto, swap or recompute a preempted answer\n"
	"  --serve PORT        also serve the OpenAI API on this engine (pagechat serve --help),\n"
	"                      so HTTP clients share the tabs' KV pool; --host H (127.0.0.1),\n"
	"                      --api-key KEY (default: $PAGECHAT_API_KEY)\n"
	"  --server URL        no local model: every tab talks to an OpenAI-compatible\n"
	"                      server (vLLM, SGLang, llama-server, Ollama, pagechat serve);\n"
	"                      -m NAME is then its model (default: the first it lists),\n"
	"                      --api-key KEY its key; --completion sends each turn as\n"
	"                      completion text (/v1/completions) instead of chat messages\n"
	"  Chats are saved in $XDG_DATA_HOME/pagechat (~/.local/share/pagechat).\n"
	"  The ranges of every number: pagechat --help.\n";

/* Flags as given; unset values stay at their "not given" markers. */
typedef struct chat_flags {
	const char *config, *model, *draft, *prompt, *overflow;
	const char *host, *api_key;  /* --serve's (the key also --server's) */
	const char *server;          /* --server URL, or NULL */
	bool completion;             /* --completion (with --server) */
	int serve_port;              /* UNSET_I: no server */
	bool resume, no_panels, draft_adaptive;
	int threads, ctx, block, chunk, draft_k, max_tokens;
	int pool_blocks, pool_mib;
	samp_params samp;        /* the sampling flags, UNSET_* where not given */
	tier_opts tier;          /* --kv-store, --kv-store-max, --kv-host, --preempt */
	bool seed_given;
} chat_flags;

/* Outside every range (config/params.h), so never a given value. */
#define UNSET_I INT_MIN
#define UNSET_F (-INFINITY)

/* --server excludes what needs a local model; --completion needs it. */
static int check_server_flags(const chat_flags *f)
{
	const char *clash = !f->server ? NULL : f->serve_port != UNSET_I ? "--serve" : f->draft ? "--draft" : NULL;
	if (clash) {
		fprintf(stderr, "pagechat: chat: --server runs no local model, so %s cannot go with it\n", clash);
		return -1;
	}
	if (f->server && strncmp(f->server, "http://", 7) && strncmp(f->server, "https://", 8)) {
		fprintf(stderr, "pagechat: chat: --server wants an http:// or https:// URL, not '%s'\n", f->server);
		return -1;
	}
	if (f->completion && !f->server) {
		fprintf(stderr, "pagechat: chat: --completion is for --server (a local model without a chat template "
			"is in completion mode already)\n");
		return -1;
	}
	return 0;
}

static int parse_flags(int argc, char **argv, chat_flags *f)
{
	*f = (chat_flags){.threads = UNSET_I, .ctx = UNSET_I, .block = UNSET_I, .chunk = UNSET_I,
			  .draft_k = UNSET_I, .max_tokens = UNSET_I, .pool_blocks = UNSET_I,
			  .pool_mib = UNSET_I, .serve_port = UNSET_I,
			  .samp = {.temp = UNSET_F, .top_k = UNSET_I, .top_p = UNSET_F, .min_p = UNSET_F,
				   .repeat_penalty = UNSET_F, .seed = UINT64_MAX}};
	opt opts[] = {
		{"--config", NULL, OPT_PATH, &f->config, P_NONE}, {"-m", "--model", OPT_PATH, &f->model, P_NONE},
		{"--draft", "-md", OPT_PATH, &f->draft, P_NONE}, {"--resume", NULL, OPT_FLAG, &f->resume, P_NONE},
		{"--threads", NULL, OPT_INT, &f->threads, P_THREADS}, {"-c", "--ctx", OPT_INT, &f->ctx, P_CONTEXT},
		{"--block-size", NULL, OPT_INT, &f->block, P_BLOCK_SIZE},
		{"--pool-blocks", NULL, OPT_INT, &f->pool_blocks, P_POOL_BLOCKS},
		{"--pool-mib", NULL, OPT_INT, &f->pool_mib, P_POOL_MIB}, {"--chunk", NULL, OPT_INT, &f->chunk, P_CHUNK},
		{"--draft-k", NULL, OPT_INT, &f->draft_k, P_DRAFT_K}, SAMPLING_OPTS(&f->samp),
		{"-n", "--max-tokens", OPT_INT, &f->max_tokens, P_MAX_TOKENS},
		{"--prompt", NULL, OPT_STR, &f->prompt, P_NONE}, {"--no-panels", NULL, OPT_FLAG, &f->no_panels, P_NONE},
		{"--draft-adaptive", NULL, OPT_FLAG, &f->draft_adaptive, P_NONE},
		{"--overflow", NULL, OPT_STR, &f->overflow, P_NONE},
		{"--serve", NULL, OPT_INT, &f->serve_port, P_PORT}, {"--host", NULL, OPT_STR, &f->host, P_NONE},
		{"--api-key", NULL, OPT_STR, &f->api_key, P_NONE}, {"--server", NULL, OPT_STR, &f->server, P_NONE},
		TIER_OPTS(&f->tier),
		{"--completion", NULL, OPT_FLAG, &f->completion, P_NONE},
	};
	const char *pos[1];
	int n = cli_parse_opts("chat", argc, argv, opts, ARRAY_LEN(opts), pos, 0);
	f->seed_given = f->samp.seed != UINT64_MAX;
	if (n >= 0 && f->serve_port != UNSET_I && (f->serve_port < 0 || f->serve_port > 65535)) {
		fprintf(stderr, "pagechat: chat: --serve must be a TCP port 0..65535\n");
		return -1;
	}
	if (!f->api_key)
		f->api_key = getenv("PAGECHAT_API_KEY");
	if (n < 0)
		return -1;
	return check_server_flags(f);
}

static void set_str(char **dst, const char *v)
{
	if (!v)
		return;
	free(*dst);
	*dst = xstrdup(v);
}

/* Sampling flags go to the defaults and to every configured tab. */
static void override_sampling(cfg_sampling *s, const chat_flags *f)
{
	if (f->samp.temp != UNSET_F) s->temperature = f->samp.temp;
	if (f->samp.top_k != UNSET_I) s->top_k = f->samp.top_k;
	if (f->samp.top_p != UNSET_F) s->top_p = f->samp.top_p;
	if (f->samp.min_p != UNSET_F) s->min_p = f->samp.min_p;
	if (f->samp.repeat_penalty != UNSET_F) s->repeat_penalty = f->samp.repeat_penalty;
	if (f->max_tokens != UNSET_I) s->max_tokens = f->max_tokens;
	if (f->seed_given) s->seed = f->samp.seed;
}

static int apply_flags(cfg *c, const chat_flags *f, err *e)
{
	set_str(&c->model, f->model);
	set_str(&c->draft_model, f->draft);
	set_str(&c->default_prompt, f->prompt);
	set_str(&c->kv_store, f->tier.store);
	if (f->threads != UNSET_I) c->threads = f->threads;
	if (f->ctx != UNSET_I) c->context = f->ctx;
	if (f->overflow && conv_overflow_parse(f->overflow) < 0) {
		err_set(e, "chat: --overflow must be drop, shift or refuse, not '%s'", f->overflow);
		return -1;
	}
	if (f->overflow)
		snprintf(c->overflow, sizeof c->overflow, "%s", f->overflow);
	if (f->block != UNSET_I) c->block_size = f->block;
	if (f->chunk != UNSET_I) c->chunk_tokens = f->chunk;
	if (f->draft_k != UNSET_I) c->draft_k = f->draft_k;
	if (f->pool_blocks != UNSET_I && f->pool_mib != UNSET_I) {
		err_set(e, "chat: give --pool-blocks or --pool-mib, not both");
		return -1;
	}
	if (f->pool_blocks != UNSET_I)
		c->pool_blocks = f->pool_blocks, c->pool_mib = 0;
	if (f->pool_mib != UNSET_I)
		c->pool_mib = f->pool_mib, c->pool_blocks = 0;
	if (f->no_panels)
		c->panels = false;
	if (f->draft_adaptive)
		c->draft_adaptive = true;
	override_sampling(&c->sampling, f);
	for (int i = 0; i < c->n_tabs; i++)
		override_sampling(&c->tabs[i].sampling, f);
	if (cfg_check(c, e)) {
		err_prefix(e, "chat");
		return -1;
	}
	return 0;
}

/* The config file: --config FILE (must exist), else the user's (if any). */
static int load_config(cfg *c, const char *path, err *e)
{
	if (path)
		return cfg_load(c, path, e);
	char buf[4096];
	const char *user = cfg_user_path(buf, sizeof buf);
	if (user && access(user, F_OK) == 0)
		return cfg_load(c, user, e);
	return 0;
}

static samp_params to_samp(const cfg_sampling *s)
{
	samp_params p = samp_default_params();
	p.temp = s->temperature;
	p.top_k = s->top_k;
	p.top_p = s->top_p;
	p.min_p = s->min_p;
	p.repeat_penalty = s->repeat_penalty;
	p.repeat_last_n = s->repeat_last_n;
	p.seed = s->seed;
	return p;
}

/* Where the model's layers go on a device (cli_place), for the pool the
 * configuration asks for; printed before the screen opens. */
static int place_chat(cli_device *dev, const cfg *c, ui_params *p, err *e)
{
	if (!p->kern->buf_alloc)
		return 0;
	kv_opts kv = {.k_type = c->kv_type_k, .v_type = c->kv_type_v};
	cli_plan_kv(dev, c->pool_blocks * c->block_size, c->pool_mib << 20, &kv);
	gguf_file *f = gguf_open(p->model_path, e);
	llama_params lp = {.kern = p->kern};
	int rc = f ? cli_place(dev, f, MAX(64, c->chunk_tokens), &lp, e) : -1;
	gguf_close(f);
	p->host_layers = lp.host_layers;
	p->head_on_host = lp.head_on_host;
	return rc;
}

/* Whether path is a regular file that opens for reading (a FIFO is refused
 * at once instead of blocking the loader). */
static bool readable(const char *path, err *e)
{
	int fd = file_open_read(path, NULL, e);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

/* `--serve`: the HTTP server on the chat's engine (ui_params.attach). */
typedef struct chat_server {
	serve_params p;
	serve *s;                /* owned while attached */
} chat_server;

static int server_attach(void *ctx, const ui_engine *x, char *note, size_t cap, err *e)
{
	chat_server *cs = ctx;
	char name[64];
	size_t n = strlen(x->model_name);
	snprintf(name, sizeof name, "%.*s", (int)(n > 5 && !strcmp(x->model_name + n - 5, ".gguf") ? n - 5 : n),
		 x->model_name);
	serve_engine se = {.link = x->link, .tok = x->tok, .fam = x->fam, .model_name = name};
	if (!(cs->s = serve_start(&cs->p, &se, e)))
		return -1;
	snprintf(note, cap, "serving the OpenAI API on http://%s:%d", cs->p.host ? cs->p.host : "127.0.0.1",
		 serve_port(cs->s));
	return 0;
}

static void server_detach(void *ctx)
{
	chat_server *cs = ctx;
	serve_stop(cs->s);
	cs->s = NULL;
}

/* The disk tier's directory: kv_cache.store (or --kv-store), "off" for
 * none, else $XDG_CACHE_HOME/pagechat. The default one is made here; when
 * it cannot be, or is not private (another user's, or writable by group or
 * others), the chat runs without it (one line says why). */
static const char *store_dir(const cfg *c, char *buf, size_t cap)
{
	if (c->kv_store)
		return strcmp(c->kv_store, "off") && *c->kv_store ? c->kv_store : NULL;
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (xdg && *xdg)
		snprintf(buf, cap, "%s/pagechat", xdg);
	else if (home && *home)
		snprintf(buf, cap, "%s/.cache/pagechat", home);
	else
		return NULL;
	err e = {0};
	if (file_private_dir(buf, &e) || kv_store_check_dir(buf, &e)) {
		fprintf(stderr, "pagechat: note: no disk tier for the KV cache: %s\n", e.msg);
		return NULL;
	}
	return buf;
}

/* The lower tiers into p (host blocks are sized from the model's K/V). */
static int tier_setup(const cfg *c, const chat_flags *f, ui_params *p, char *buf, size_t cap, err *e)
{
	tier_opts to = f->tier;
	to.store = store_dir(c, buf, cap);
	int64_t block_bytes = 0;
	if (to.host > 0) {
		llama_hparams hp;
		int64_t weights;
		if (cli_read_plan(p->model_path, &hp, &weights, e))
			return -1;
		block_bytes = llama_kv_token_bytes(&hp, c->kv_type_k, c->kv_type_v) * c->block_size;
	}
	core_params cp = {0};
	if (cli_tier_setup(&to, block_bytes, &cp, e)) {
		err_prefix(e, "chat");
		return -1;
	}
	p->kv_host_blocks = cp.host_blocks;
	p->kv_store = cp.kv_store;
	p->kv_store_max = cp.kv_store_max;
	p->preempt = cp.preempt;
	return 0;
}

static int run_ui(const cfg *c, const chat_flags *f, cli_device *dev)
{
	bool resume = f->resume;
	ui_prompt *prompts = xcalloc((size_t)c->n_prompts, sizeof *prompts);
	for (int i = 0; i < c->n_prompts; i++)
		prompts[i] = (ui_prompt){c->prompts[i].name, c->prompts[i].text};
	ui_tab_spec *tabs = xcalloc((size_t)c->n_tabs, sizeof *tabs);
	for (int i = 0; i < c->n_tabs; i++)
		tabs[i] = (ui_tab_spec){c->tabs[i].name, c->tabs[i].system_prompt,
					to_samp(&c->tabs[i].sampling), c->tabs[i].sampling.max_tokens};
	ui_params p = {
		.model_path = c->model ? c->model : DEMO_MODEL, .draft_path = c->draft_model,
		.threads = cli_threads(c->threads, "--threads"), .context = c->context, .block_tokens = c->block_size,
		.overflow = (enum conv_overflow)conv_overflow_parse(c->overflow),
		.kv_type_k = c->kv_type_k, .kv_type_v = c->kv_type_v,
		.pool_blocks = c->pool_blocks, .pool_bytes = c->pool_mib << 20,
		.chunk_tokens = c->chunk_tokens, .draft_k = c->draft_k, .draft_adaptive = c->draft_adaptive,
		.samp = to_samp(&c->sampling), .max_tokens = c->sampling.max_tokens,
		.prompts = prompts, .n_prompts = c->n_prompts, .default_prompt = c->default_prompt,
		.tabs = tabs, .n_tabs = c->n_tabs, .panels = c->panels, .refresh_ms = c->refresh_ms,
		.tab_colors = c->tab_colors, .n_tab_colors = c->n_tab_colors, .resume = resume,
		.model_given = f->model != NULL,
	};
	samp_params sp = samp_default_params();
	sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f; /* OpenAI's defaults */
	chat_server cs = {.p = {.host = f->host, .port = f->serve_port, .api_key = f->api_key, .samp = sp}};
	if (f->serve_port != UNSET_I) {
		p.attach = server_attach;
		p.detach = server_detach;
		p.attach_ctx = &cs;
	}
	err e = {0};
	int rc = 0;
	char store[4200];
	if (f->server) {
		p.server = f->server;
		p.server_key = f->api_key;
		p.server_model = f->model;
		p.server_completion = f->completion;
		p.draft_path = NULL;
		if (ui_run(&p, &e))
			rc = cli_fail(&e);
	} else if (!(resume && !f->model) && !readable(p.model_path, &e)) {
		err why = e;
		if (!c->model)
			err_set(&e, "%s (the demo model; run from the repository root, or give -m MODEL)", why.msg);
		rc = cli_fail(&e);
	} else if (p.draft_path && strcmp(p.draft_path, "ngram") && !readable(p.draft_path, &e)) {
		err_prefix(&e, "the draft model");
		rc = cli_fail(&e);
	} else if (tier_setup(c, f, &p, store, sizeof store, &e) || !(p.kern = cli_kern(dev, &e)) ||
		   place_chat(dev, c, &p, &e)) {
		rc = cli_fail(&e);
	} else if (p.overflow == CONV_SHIFT && !p.kern->kv_shift) {
		err_set(&e, "context.overflow shift rotates stored K rows (kv_shift), which the %s backend cannot "
			"do yet: use drop or refuse, or --device cpu", p.kern->name);
		rc = cli_fail(&e);
	} else if (ui_run(&p, &e)) {
		rc = cli_fail(&e);
	}
	free(prompts);
	free(tabs);
	return rc;
}

int cmd_chat(int argc, char **argv, cli_device *dev)
{
	chat_flags f;
	if (parse_flags(argc, argv, &f))
		return EXIT_USAGE;
	cfg c;
	cfg_init(&c);
	err e = {0};
	int rc;
	if (load_config(&c, f.config, &e) || apply_flags(&c, &f, &e)) {
		rc = cli_fail(&e);
	} else if (!isatty(0) || !isatty(1)) {
		fprintf(stderr, "pagechat: the chat needs a terminal (stdin and stdout); "
			"the headless commands are listed by pagechat --help\n");
		rc = EXIT_USAGE;
	} else if (ui_term_check(&e)) { /* before the device probe can print its notes */
		rc = cli_fail(&e);
	} else {
		rc = run_ui(&c, &f, dev);
	}
	cfg_deinit(&c);
	return rc;
}
