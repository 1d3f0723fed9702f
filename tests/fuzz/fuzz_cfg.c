/* tests/fuzz/fuzz_cfg.c: the YAML configuration loader on arbitrary bytes.
 *
 * The input is a config file, written to a private temporary directory and
 * read with cfg_load() over the defaults. It must load or fail with a message
 * that starts with the file's name; either way the struct must stay one that
 * cfg_check() can judge and cfg_deinit() can free, and what loads must hold
 * the lists the rest of the app relies on (at least one tab, named prompts). */
#include "tests/fuzz/fuzz.h"

#include "config/cfg.h"

static void check_cfg(const cfg *c)
{
	FUZZ_CHECK(c->n_tabs >= 1 && c->tabs != NULL);
	for (int i = 0; i < c->n_tabs; i++)
		FUZZ_CHECK(c->tabs[i].name != NULL);
	FUZZ_CHECK(c->n_prompts >= 0);
	for (int i = 0; i < c->n_prompts; i++) {
		FUZZ_CHECK(c->prompts[i].name && c->prompts[i].text);
		FUZZ_CHECK(cfg_find_prompt(c, c->prompts[i].name) != NULL);
	}
	FUZZ_CHECK(c->n_tab_colors >= 0 && c->n_tab_colors <= CFG_MAX_COLORS);
	for (int i = 0; i < c->n_tab_colors; i++)
		FUZZ_CHECK(cfg_color(cfg_color_name(c->tab_colors[i])) == c->tab_colors[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[512];
	snprintf(path, sizeof path, "%s", fuzz_tmp("config.yaml"));
	fuzz_write(path, data, size);
	cfg c;
	cfg_init(&c);
	err e = {0};
	if (cfg_load(&c, path, &e) == 0) {
		check_cfg(&c);
		err e2 = {0};
		if (cfg_check(&c, &e2) < 0)
			FUZZ_CHECK(e2.msg[0]);
	} else {
		FUZZ_CHECK(strncmp(e.msg, path, strlen(path)) == 0);
		FUZZ_NOTE("%s", e.msg);
	}
	cfg_deinit(&c);
	return 0;
}
