/* app/cmd_tokenize.c: `pagechat tokenize`, the token ids of a text. */
#include "app/cmds.h"

#include "models/gguf.h"
#include "models/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char usage_tokenize[] =
	"usage: pagechat tokenize -m MODEL [--no-bos] [--special] [-f FILE | TEXT]\n"
	"  Prints the token ids of TEXT (or of FILE's contents), space-separated.\n"
	"  --no-bos   do not add the BOS token\n"
	"  --special  parse special-token text such as <s> (templates only)\n";

int cmd_tokenize(int argc, char **argv, cli_device *dev)
{
	(void)dev;
	const char *model = NULL, *file = NULL, *pos[1];
	bool no_bos = false, special = false;
	opt opts[] = {
		{"-m", "--model", OPT_PATH, &model, P_NONE}, {"-f", "--file", OPT_PATH, &file, P_NONE},
		{"--no-bos", NULL, OPT_FLAG, &no_bos, P_NONE}, {"--special", NULL, OPT_FLAG, &special, P_NONE},
	};
	int n_pos = cli_parse_opts("tokenize", argc, argv, opts, ARRAY_LEN(opts), pos, 1);
	if (n_pos < 0)
		return EXIT_USAGE;
	if (!model || (n_pos == 0) == (file == NULL)) {
		fprintf(stderr, "pagechat: tokenize: needs -m MODEL and either TEXT or -f FILE "
			"(see pagechat tokenize --help)\n");
		return EXIT_USAGE;
	}
	err e = {0};
	size_t len = n_pos ? strlen(pos[0]) : 0;
	char *owned = file ? cli_read_file(file, &len, &e) : NULL;
	if (file && !owned)
		return cli_fail(&e);
	gguf_file *f = gguf_open(model, &e);
	tok *tk = f ? tok_new(f, &e) : NULL;
	int rc = 0;
	if (!tk) {
		rc = cli_fail(&e);
	} else {
		int n;
		unsigned flags = (no_bos ? 0 : TOK_ADD_BOS) | (special ? TOK_PARSE_SPECIAL : 0);
		int32_t *ids = cli_encode(tk, owned ? owned : pos[0], len, flags, &n);
		for (int i = 0; i < n; i++)
			printf(i ? " %d" : "%d", ids[i]);
		putchar('\n');
		free(ids);
	}
	tok_free(tk);
	gguf_close(f);
	free(owned);
	return rc;
}
