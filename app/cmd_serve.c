/* app/cmd_serve.c: `pagechat serve`: the model, its engine thread and the
 * OpenAI-compatible HTTP server on it (app/serve.h), until SIGINT or
 * SIGTERM. The main thread only waits for the signal: the engine and
 * libmicrohttpd's threads do the work, with every signal blocked. After
 * the signal, stopping is bounded: what has not ended --shutdown-timeout
 * seconds later (a request still making its prompt, say) is left, and the
 * process exits 0 all the same.
 *
 * The API key comes from $PAGECHAT_API_KEY, --api-key-file or --api-key; a
 * key on the command line is visible to every user in ps, so it is copied
 * and blanked in argv (a warning says so: the other two keep it private
 * from the start). An empty key is refused: it would let every client in. */
#include "app/cmds.h"

#include "app/serve.h"
#include "link/link.h"
#include "kernels/kvq.h"
#include "models/gguf.h"
#include "models/llama.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char usage_serve[] =
	"usage: pagechat serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key-file FILE] [--alias NAME]\n"
	"                      [-md DRAFT.gguf | --draft ngram] [--draft-k K] [--draft-adaptive] [--draft-cost C]\n"
	"                      [-c CTX] [--threads N] [--block-size B] [--pool-blocks N | --pool-mib N]\n"
	"                      [--chunk T] [--kv-type T] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
	"                      [--repeat-penalty R] [--max-connections N] [--timeout S]\n"
	"                      [--max-body BYTES] [--max-queue N] [--parallel N] [--shutdown-timeout S]\n"
	"  Serves the OpenAI API on one engine: POST /v1/chat/completions, /v1/completions\n"
	"  (\"stream\": true for server-sent events), GET /v1/models, /health, /metrics\n"
	"  (Prometheus), /pagechat/v1/pool (the KV block map). Until Ctrl-C or SIGTERM.\n"
	"  --host      address to listen on (default 127.0.0.1: this machine only)\n"
	"  --port      TCP port (default 8080; 0 picks a free one, printed at start)\n"
	"  --api-key-file FILE  clients must send 'Authorization: Bearer KEY', KEY the file's first\n"
	"              line (or $PAGECHAT_API_KEY; --api-key KEY works too, but ps shows it to\n"
	"              every user until it is blanked); an empty key is refused\n"
	"  --alias     the model's id in the API (default: the file's name without .gguf)\n"
	"  --temp ...  defaults for requests that do not set them (OpenAI's: temperature 1,\n"
	"              top_p 1; top-k and min-p off)\n"
	"  --max-connections N  connections at once (256)  --timeout S  idle connection timeout,\n"
	"  the time a request's head and body may take, and the time a stream's client may take\n"
	"  to read what it was sent (30)                    --max-body   body bytes (4194304)\n"
	"  --max-queue N  generation requests in flight at once; more get 429 (64)\n"
	"  --parallel N   sequences the engine runs at once (the rest wait; default 256, at\n"
	"              most --chunk): llama-server's parallel slots; a request's n may not pass it\n"
	"  --shutdown-timeout S  after SIGTERM or Ctrl-C, what has not ended in S seconds is\n"
	"              left and the server exits 0 (5)\n"
	"  -c, --block-size, --pool-*, --chunk, --kv-type, drafts: as for batch (pool 256 MiB).\n"
	"  --kv-store DIR, --kv-store-max SIZE, --kv-host SIZE, --preempt auto|swap|recompute:\n"
	"              the lower KV tiers, as for batch (blocks on disk outlive the server)\n";

typedef struct serve_args {
	const char *model, *host, *api_key, *api_key_file, *alias;
	char *key;               /* owned: the key, whichever way it came (NULL: none) */
	int port, ctx, threads, bt, chunk, pool_blocks, pool_mib;
	int max_conn, timeout, max_body, max_queue, parallel, shutdown_s;
	samp_params sp;
	draft_opts draft;
	kv_opts kv;
	tier_opts tier;
} serve_args;

/* The first line of path into *key (new); -1 with the reason printed. */
static int read_key_file(const char *path, char **key)
{
	FILE *fp = fopen(path, "r");
	if (!fp) {
		fprintf(stderr, "pagechat: serve: --api-key-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	char line[4096];
	bool got = fgets(line, sizeof line, fp) != NULL;
	fclose(fp);
	size_t n = got ? strcspn(line, "\r\n") : 0;
	line[n] = '\0';
	*key = xstrdup(line);
	return 0;
}

/* The key, from the flag (copied, then blanked in argv: ps shows argv to
 * every user), the file or the environment, into a->key; an empty one is
 * refused. 0, or EXIT_USAGE with the reason printed. */
static int take_key(int argc, char **argv, serve_args *a)
{
	const char *from = "--api-key";
	if (a->api_key) {
		a->key = xstrdup(a->api_key);
		for (int i = 1; i < argc; i++)
			if (argv[i] == a->api_key || (!strncmp(argv[i], "--api-key=", 10) && argv[i] + 10 == a->api_key))
				memset((char *)a->api_key, 'x', strlen(a->api_key));
		a->api_key = NULL;
		if (*a->key)
			fprintf(stderr, "pagechat: serve: warning: a key given with --api-key is visible to every "
				"user in ps until it is blanked; prefer --api-key-file or $PAGECHAT_API_KEY\n");
	} else if (a->api_key_file) {
		from = "--api-key-file";
		if (read_key_file(a->api_key_file, &a->key))
			return EXIT_USAGE;
	} else if (getenv("PAGECHAT_API_KEY")) {
		from = "$PAGECHAT_API_KEY";
		a->key = xstrdup(getenv("PAGECHAT_API_KEY"));
	}
	if (a->key && !*a->key) {
		fprintf(stderr, "pagechat: serve: the API key from %s is empty, which would let every client in: "
			"give a key, or none (unset $PAGECHAT_API_KEY) to serve without one\n", from);
		free(a->key);
		a->key = NULL;
		return EXIT_USAGE;
	}
	return 0;
}

static int parse_serve(int argc, char **argv, serve_args *a)
{
	samp_params sp = samp_default_params();
	sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
	*a = (serve_args){.port = 8080, .bt = 16, .chunk = 512, .max_conn = 256, .timeout = 30,
			  .max_body = 4 << 20, .max_queue = 64, .parallel = 256, .shutdown_s = 5, .sp = sp};
	opt opts[] = {
		DRAFT_OPTS(&a->draft), KV_OPTS(&a->kv), TIER_OPTS(&a->tier), SAMPLING_OPTS(&a->sp),
		{"-m", "--model", OPT_PATH, &a->model, P_NONE}, {"--host", NULL, OPT_STR, &a->host, P_NONE},
		{"--port", NULL, OPT_INT, &a->port, P_PORT}, {"--api-key", NULL, OPT_STR, &a->api_key, P_NONE},
		{"--api-key-file", NULL, OPT_PATH, &a->api_key_file, P_NONE},
		{"--shutdown-timeout", NULL, OPT_INT, &a->shutdown_s, P_SHUTDOWN_S},
		{"--alias", NULL, OPT_STR, &a->alias, P_NONE}, {"-c", "--ctx", OPT_INT, &a->ctx, P_CONTEXT},
		{"--threads", NULL, OPT_INT, &a->threads, P_THREADS},
		{"--block-size", NULL, OPT_INT, &a->bt, P_BLOCK_SIZE},
		{"--pool-blocks", NULL, OPT_INT, &a->pool_blocks, P_POOL_BLOCKS},
		{"--pool-mib", NULL, OPT_INT, &a->pool_mib, P_POOL_MIB}, {"--chunk", NULL, OPT_INT, &a->chunk, P_CHUNK},
		{"--max-connections", NULL, OPT_INT, &a->max_conn, P_MAX_CONN},
		{"--timeout", NULL, OPT_INT, &a->timeout, P_TIMEOUT_S},
		{"--max-body", NULL, OPT_INT, &a->max_body, P_MAX_BODY},
		{"--max-queue", NULL, OPT_INT, &a->max_queue, P_MAX_QUEUE},
		{"--parallel", NULL, OPT_INT, &a->parallel, P_PARALLEL},
	};
	const char *pos[1];
	if (cli_parse_opts("serve", argc, argv, opts, ARRAY_LEN(opts), pos, 0) < 0)
		return EXIT_USAGE;
	const char *bad = !a->model ? "needs -m MODEL"
		: a->pool_blocks && a->pool_mib ? "give --pool-blocks or --pool-mib, not both"
		: a->api_key && a->api_key_file ? "give --api-key or --api-key-file, not both"
		: cli_draft_check(&a->draft);
	if (bad) {
		fprintf(stderr, "pagechat: serve: %s (see pagechat serve --help)\n", bad);
		return EXIT_USAGE;
	}
	return take_key(argc, argv, a);
}

/* The model's id in the API: --alias, else the file name without .gguf. */
static void model_id(const serve_args *a, char *out, size_t cap)
{
	if (a->alias) {
		snprintf(out, cap, "%s", a->alias);
		return;
	}
	const char *base = strrchr(a->model, '/');
	base = base ? base + 1 : a->model;
	size_t n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".gguf"))
		n -= 5;
	snprintf(out, cap, "%.*s", (int)n, base);
}

/* Blocks SIGINT and SIGTERM (the threads started later inherit it) and
 * waits for one of them. */
static void wait_for_signal(const sigset_t *set)
{
	int sig;
	while (sigwait(set, &sig))
		;
}

/* The bound on stopping: a thread that ends the process (status 0) when
 * stopping has taken longer than its seconds. */
static void *stop_deadline(void *arg)
{
	int secs = *(const int *)arg;
	struct timespec t = {.tv_sec = secs};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) == EINTR)
		;
	fprintf(stderr, "pagechat: serve: still stopping after %d s (--shutdown-timeout): exiting\n", secs);
	_exit(0);
	return NULL;
}

/* The engine's parameters for a's model: the pool sized as batch does. */
static int engine_params(cli_device *dev, const serve_args *a, llama_model *m, tok *tk, kv_opts *kv,
			 core_params *cp, err *e)
{
	if (cli_kv_types(kv, e))
		return -1;
	llama_plan plan;
	llama_plan_memory(llama_hp(m), 0, 1, kv->k_type, kv->v_type, a->chunk, &plan);
	int64_t pool_bytes = a->pool_mib ? (int64_t)a->pool_mib << 20 : 256ll << 20;
	int64_t pool_tokens = a->pool_blocks > 0 ? (int64_t)a->pool_blocks * a->bt : pool_bytes / plan.kv_token_bytes;
	if (cli_check_memory(dev, a->model, llama_hp(m), (int64_t)gguf_data_bytes(llama_file(m)), pool_tokens, kv,
			     a->chunk, e))
		return -1;
	*cp = (core_params){.model = m, .tok = tk, .block_tokens = a->bt, .pool_blocks = a->pool_blocks,
			    .pool_bytes = pool_bytes, .n_ctx = a->ctx, .step_tokens = a->chunk,
			    .max_running = MIN(a->parallel, a->chunk), .kv_type_k = kv->k_type, .kv_type_v = kv->v_type};
	return cli_tier_setup(&a->tier, plan.kv_token_bytes * a->bt, cp, e);
}

static int run_serve(cli_device *dev, const serve_args *a)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	err e = {0};
	llama_model *m = NULL, *dm = NULL;
	tok *tk = NULL, *dt = NULL;
	elink *g = NULL;
	serve *s = NULL;
	kv_opts kv = a->kv;
	core_params cp;
	int rc = 1;
	if (cli_load(dev, a->model, a->chunk, &m, &tk, &e) || engine_params(dev, a, m, tk, &kv, &cp, &e) ||
	    cli_setup_draft(dev, &a->draft, a->chunk, &cp, &dm, &dt, &e))
		goto fail;
	if (!(g = link_start_local(&cp, &e)))
		goto fail;
	enum tmpl_family fam = TMPL_NONE;
	if (tmpl_from_gguf(llama_file(m), &fam, &e))
		goto fail;
	char name[256];
	model_id(a, name, sizeof name);
	serve_params sp = {.host = a->host, .port = a->port, .api_key = a->key,
			   .max_connections = a->max_conn, .timeout_s = a->timeout,
			   .max_body = (size_t)a->max_body, .max_queue = a->max_queue, .samp = a->sp};
	serve_engine x = {.link = g, .tok = tk, .fam = fam, .model_name = name};
	if (!(s = serve_start(&sp, &x, &e)))
		goto fail;
	link_view v = {0};
	link_view_get(g, &v);
	const link_snapshot snap = v.snap;
	fprintf(stderr, "pagechat: serving %s on http://%s:%d (chat template %s, context %d, %lld KV blocks of "
		"%d tokens%s)\n", name, a->host ? a->host : "127.0.0.1", serve_port(s), tmpl_name(fam), snap.n_ctx,
		(long long)snap.n_blocks, snap.block_tokens, a->key ? ", API key required" : "");
	link_view_deinit(&v);
	wait_for_signal(&set);
	fprintf(stderr, "pagechat: serve: stopping\n");
	pthread_t deadline;
	if (pthread_create(&deadline, NULL, stop_deadline, (void *)&a->shutdown_s) == 0)
		pthread_detach(deadline);
	rc = 0;
	goto out;
fail:
	cli_fail(&e);
out:
	serve_stop(s);
	link_free(g);
	tok_free(dt);
	llama_free(dm);
	tok_free(tk);
	llama_free(m);
	return rc;
}

int cmd_serve(int argc, char **argv, cli_device *dev)
{
	serve_args a;
	int rc = parse_serve(argc, argv, &a);
	if (rc == 0)
		rc = run_serve(dev, &a);
	free(a.key);
	return rc;
}
