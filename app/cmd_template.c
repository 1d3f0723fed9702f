/* app/cmd_template.c: `pagechat template`: a conversation rendered with the
 * model's chat template, and the ids it tokenizes to, for checking a model's
 * prompt format. Works on vocabulary-only GGUF files (no tensors needed). */
#include "app/cmds.h"

#include "models/gguf.h"
#include "models/json.h"
#include "models/tmpl.h"
#include "models/tok.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_template[] =
	"usage: pagechat template -m MODEL -f CONVERSATION.json [--template NAME] [--no-gen]\n"
	"  Renders the conversation (a JSON array of {\"role\", \"content\"}, roles system,\n"
	"  user, assistant) with the model's chat template and prints two lines: the\n"
	"  prompt as a JSON string, then its token ids (BOS as the vocabulary asks;\n"
	"  special tokens parsed in the template's text only). The family and the\n"
	"  tokens that stop generation go to stderr.\n"
	"  --template NAME  use a family instead of the model's template: chatml, llama3,\n"
	"                   llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1,\n"
	"                   mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken,\n"
	"                   gemma, phi3\n"
	"  --no-gen         leave out the opening of the assistant's turn\n";

/* Reads and checks the conversation file; *doc owns the strings. */
static int read_conversation(const char *path, json_doc **doc, tmpl_msg **msgs, size_t *n,
			     err *e)
{
	size_t len;
	char *text = cli_read_file(path, &len, e);
	if (!text)
		return -1;
	*doc = json_parse(text, len, e);
	free(text);
	if (!*doc || tmpl_conversation_from_json(json_root(*doc), msgs, n, e) < 0) {
		err_prefix(e, "%s", path);
		return -1;
	}
	return 0;
}

/* The family: --template NAME, else the model's own. */
static int pick_family(const gguf_file *f, const char *name, enum tmpl_family *fam, err *e)
{
	if (name) {
		*fam = tmpl_detect(name, strlen(name));
		if (*fam == TMPL_NONE || *fam == TMPL_UNKNOWN) {
			err_set(e, "template: --template '%s' is not a supported family "
				"(see --help)", name);
			return -1;
		}
		return 0;
	}
	if (tmpl_from_gguf(f, fam, e) < 0)
		return -1;
	if (*fam == TMPL_NONE || *fam == TMPL_UNKNOWN) {
		err_set(e, "%s: %s; try --template NAME", gguf_name(f), *fam == TMPL_NONE ?
			"no tokenizer.chat_template (completion mode only)" :
			"tokenizer.chat_template is not a supported family");
		return -1;
	}
	return 0;
}

/* Prints the prompt line, the ids line, and the summary on stderr. -1 with
 * e filled if the prompt is too long to tokenize. */
static int print_result(const tmpl_prompt *p, const tok *tk, enum tmpl_family fam, err *e)
{
	int n = tmpl_encode(p, tk, NULL, 0);
	if (n < 0) {
		err_set(e, "template: the prompt is %zu bytes, over the tokenizer's limit", p->len);
		return -1;
	}
	int32_t *ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
	tmpl_encode(p, tk, ids, n);
	char *js = NULL;
	size_t n_js = 0, cap_js = 0;
	json_put_str(&js, &n_js, &cap_js, p->text, p->len);
	printf("%s\n", js);
	free(js);
	for (int i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	putchar('\n');
	free(ids);
	int32_t stop[2];
	int n_stop = tmpl_stop_ids(fam, tk, stop, 2);
	fprintf(stderr, "template %s, %d tokens, stop on", tmpl_name(fam), n);
	for (int i = 0; i < n_stop; i++)
		fprintf(stderr, " %d", stop[i]);
	fputc('\n', stderr);
	return 0;
}

int cmd_template(int argc, char **argv, cli_device *dev)
{
	(void)dev;
	const char *model = NULL, *file = NULL, *name = NULL, *pos[1];
	bool no_gen = false;
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &model, P_NONE}, {"-f", "--file", OPT_PATH, &file, P_NONE},
		{"--template", NULL, OPT_STR, &name, P_NONE}, {"--no-gen", NULL, OPT_FLAG, &no_gen, P_NONE},
	};
	int n_pos = cli_parse_opts("template", argc, argv, opts, ARRAY_LEN(opts), pos, 0);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (!model || !file) {
		fprintf(stderr, "pagechat: template: needs -m MODEL and -f CONVERSATION.json "
			"(see pagechat template --help)\n");
		return EXIT_USAGE;
	}
	err e = {0};
	json_doc *doc = NULL;
	tmpl_msg *msgs = NULL;
	size_t n_msgs = 0;
	gguf_file *f = NULL;
	tok *tk = NULL;
	tmpl_prompt p = {0};
	enum tmpl_family fam;
	int rc = 1;
	if (read_conversation(file, &doc, &msgs, &n_msgs, &e) < 0 || !(f = gguf_open(model, &e)) ||
	    !(tk = tok_new(f, &e)) || pick_family(f, name, &fam, &e) < 0 ||
	    tmpl_render(fam, msgs, n_msgs, !no_gen, &p, &e) < 0)
		goto out;
	if (tok_warning(tk))
		fprintf(stderr, "pagechat: warning: %s\n", tok_warning(tk));
	if (print_result(&p, tk, fam, &e) < 0)
		goto out;
	rc = 0;
out:
	if (rc)
		cli_fail(&e);
	tmpl_prompt_deinit(&p);
	tok_free(tk);
	gguf_close(f);
	free(msgs);
	json_free(doc);
	return rc;
}
