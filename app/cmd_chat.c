/* app/cmd_chat.c: `pagechat [chat] [flags]`: the configuration (file, then
 * flags) turned into the UI's parameters, then the full-screen chat. */
#include "app/cmds.h"

#include "config/cfg.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "ui/ui.h"

#include <errno.h>
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
	"  --resume            reopen the tabs of the last session\n"
	"  --threads N         compute threads (0: one per core)\n"
	"  -c, --ctx N         context limit per conversation (0: the model's)\n"
	"  --block-size N      tokens per KV block\n"
	"  --pool-blocks N     KV pool size in blocks   --pool-mib N   ... in MiB\n"
	"  --chunk N           prefill token budget per engine step\n"
	"  --draft-k N         draft tokens per step (1..16); --draft-adaptive varies it\n"
	"  --temp T  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --seed S\n"
	"  -n, --max-tokens N  tokens per answer (0: until the context is full)\n"
	"  --prompt NAME       system prompt of new tabs (a name in system_prompts)\n"
	"  --no-panels         start with the side panels hidden (F2 shows them)\n"
	"  Chats are saved in $XDG_DATA_HOME/pagechat (~/.local/share/pagechat).\n";

/* Flags as given; unset values stay at their "not given" markers. */
typedef struct chat_flags {
	const char *config, *model, *draft, *prompt;
	bool resume, no_panels, draft_adaptive;
	int threads, ctx, block, chunk, draft_k, max_tokens;
	int pool_blocks, pool_mib;
	samp_params samp;        /* the sampling flags, UNSET_* where not given */
	bool seed_given;
} chat_flags;

#define UNSET_I (-1)
#define UNSET_F (-1.0f)

static int parse_flags(int argc, char **argv, chat_flags *f)
{
	*f = (chat_flags){.threads = UNSET_I, .ctx = UNSET_I, .block = UNSET_I, .chunk = UNSET_I,
			  .draft_k = UNSET_I, .max_tokens = UNSET_I, .pool_blocks = UNSET_I,
			  .pool_mib = UNSET_I,
			  .samp = {.temp = UNSET_F, .top_k = UNSET_I, .top_p = UNSET_F, .min_p = UNSET_F,
				   .repeat_penalty = UNSET_F, .seed = UINT64_MAX}};
	opt opts[] = {
		{"--config", NULL, OPT_STR, &f->config}, {"-m", "--model", OPT_STR, &f->model},
		{"--draft", NULL, OPT_STR, &f->draft}, {"--resume", NULL, OPT_FLAG, &f->resume},
		{"--threads", NULL, OPT_INT, &f->threads}, {"-c", "--ctx", OPT_INT, &f->ctx},
		{"--block-size", NULL, OPT_INT, &f->block}, {"--pool-blocks", NULL, OPT_INT, &f->pool_blocks},
		{"--pool-mib", NULL, OPT_INT, &f->pool_mib}, {"--chunk", NULL, OPT_INT, &f->chunk},
		{"--draft-k", NULL, OPT_INT, &f->draft_k}, SAMPLING_OPTS(&f->samp),
		{"-n", "--max-tokens", OPT_INT, &f->max_tokens},
		{"--prompt", NULL, OPT_STR, &f->prompt}, {"--no-panels", NULL, OPT_FLAG, &f->no_panels},
		{"--draft-adaptive", NULL, OPT_FLAG, &f->draft_adaptive},
	};
	const char *pos[1];
	int n = cli_parse_opts("chat", argc, argv, opts, ARRAY_LEN(opts), pos, 0);
	f->seed_given = f->samp.seed != UINT64_MAX;
	return n < 0 ? -1 : 0;
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
	if (f->threads != UNSET_I) c->threads = f->threads;
	if (f->ctx != UNSET_I) c->context = f->ctx;
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
	if (c->pool_blocks < 0 || c->pool_mib < 0) {
		err_set(e, "chat: the pool size must be positive");
		return -1;
	}
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

static int run_ui(const cfg *c, bool resume, cli_device *dev)
{
	ui_prompt *prompts = xcalloc((size_t)c->n_prompts, sizeof *prompts);
	for (int i = 0; i < c->n_prompts; i++)
		prompts[i] = (ui_prompt){c->prompts[i].name, c->prompts[i].text};
	ui_tab_spec *tabs = xcalloc((size_t)c->n_tabs, sizeof *tabs);
	for (int i = 0; i < c->n_tabs; i++)
		tabs[i] = (ui_tab_spec){c->tabs[i].name, c->tabs[i].system_prompt,
					to_samp(&c->tabs[i].sampling), c->tabs[i].sampling.max_tokens};
	ui_params p = {
		.model_path = c->model ? c->model : DEMO_MODEL, .draft_path = c->draft_model,
		.threads = c->threads, .context = c->context, .block_tokens = c->block_size,
		.kv_type_k = c->kv_type_k, .kv_type_v = c->kv_type_v,
		.pool_blocks = c->pool_blocks, .pool_bytes = c->pool_mib << 20,
		.chunk_tokens = c->chunk_tokens, .draft_k = c->draft_k, .draft_adaptive = c->draft_adaptive,
		.samp = to_samp(&c->sampling), .max_tokens = c->sampling.max_tokens,
		.prompts = prompts, .n_prompts = c->n_prompts, .default_prompt = c->default_prompt,
		.tabs = tabs, .n_tabs = c->n_tabs, .panels = c->panels, .refresh_ms = c->refresh_ms,
		.tab_colors = c->tab_colors, .n_tab_colors = c->n_tab_colors, .resume = resume,
	};
	err e = {0};
	int rc = 0;
	if (access(p.model_path, R_OK)) {
		err_set(&e, "%s: cannot open: %s%s", p.model_path, strerror(errno),
			c->model ? "" : " (the demo model; run from the repository root, or give -m MODEL)");
		rc = cli_fail(&e);
	} else if (p.draft_path && strcmp(p.draft_path, "ngram") && access(p.draft_path, R_OK)) {
		err_set(&e, "%s: cannot open the draft model: %s", p.draft_path, strerror(errno));
		rc = cli_fail(&e);
	} else if (!(p.kern = cli_kern(dev, &e)) || place_chat(dev, c, &p, &e)) {
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
	if (parse_flags(argc, argv, &f)) {
		fputs(usage_chat, stderr);
		return EXIT_USAGE;
	}
	cfg c;
	cfg_init(&c);
	err e = {0};
	int rc;
	if (load_config(&c, f.config, &e) || apply_flags(&c, &f, &e)) {
		rc = cli_fail(&e);
	} else if (!isatty(0) || !isatty(1)) {
		fprintf(stderr, "pagechat: the chat needs a terminal (stdin and stdout); "
			"the headless commands are listed by pagechat --help\n%s", usage_chat);
		rc = EXIT_USAGE;
	} else {
		rc = run_ui(&c, f.resume, dev);
	}
	cfg_deinit(&c);
	return rc;
}
