/* ui/store.c: JSON files for chats and the session, the streaming journal,
 * Markdown export. */
#include "ui/store.h"

#include "base/files.h"
#include "models/json.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHAT_FORMAT "pagechat-chat 1"
#define SESSION_FORMAT "pagechat-session 1"
#define SESSION_FILE "session.json"

/* ---- paths and atomic writes ---- */

/* The largest chat, journal or session file read back (a long chat is a few
 * MiB): anything bigger is damaged, and is refused before it is read. */
#define STORE_MAX_BYTES ((size_t)256 << 20)

int store_data_dir(char *buf, size_t cap, err *e)
{
	const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
	bool x = xdg && *xdg;
	if (!x && !(home && *home)) {
		err_set(e, "neither XDG_DATA_HOME nor HOME is set: nowhere to save chats");
		return -1;
	}
	if ((size_t)snprintf(buf, cap, "%s/%s", x ? xdg : home, x ? "pagechat" : ".local/share/pagechat") >= cap) {
		err_set(e, "the data directory's path is too long");
		return -1;
	}
	/* 0700, ours, and nobody else may plant files in it */
	return file_private_dir(buf, e);
}

static int write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

int store_write_atomic(const char *path, const char *data, size_t len, err *e)
{
	return file_write_atomic(path, data, len, FILE_MODE_PRIVATE, e);
}

/* ---- JSON text (into base/base.h's sbuf) ---- */

static void put_str(sbuf *b, const char *s, size_t len)
{
	json_put_str(&b->p, &b->n, &b->cap, s, len);
}

/* ---- chats ---- */

static void put_ids(sbuf *b, const char *key, const int32_t *ids, int n)
{
	sb_printf(b, ", \"%s\": [", key);
	for (int i = 0; i < n; i++)
		sb_printf(b, i ? ",%d" : "%d", ids[i]);
	sb_printf(b, "]");
}

static void put_msg(sbuf *b, const conv_msg *m)
{
	sb_printf(b, "    {\"role\": \"%s\", \"content\": ", m->role == CONV_USER ? "user" : "assistant");
	put_str(b, m->text, m->len);
	if (m->role == CONV_ASSISTANT) {
		sb_printf(b, ", \"finish\": ");
		put_str(b, m->finish, strlen(m->finish));
		sb_printf(b, ", \"tokens\": %d, \"ttft_ms\": %.3f, \"tpot_ms\": %.3f", m->n_gen, m->ttft_ms,
		    m->tpot_ms);
		if (m->n_proposed)
			sb_printf(b, ", \"draft_proposed\": %d, \"draft_accepted\": %d", m->n_proposed, m->n_accepted);
		if (m->n_prompt)
			sb_printf(b, ", \"prompt_tokens\": %d, \"cached_tokens\": %d", m->n_prompt, m->n_cached);
	}
	if (m->error) {
		sb_printf(b, ", \"error\": ");
		put_str(b, m->error, strlen(m->error));
	}
	if (m->note) {
		sb_printf(b, ", \"note\": ");
		put_str(b, m->note, strlen(m->note));
	}
	if (m->has_ids) {
		put_ids(b, "ids", m->ids, m->n_ids);
		if (m->role == CONV_ASSISTANT)
			sb_printf(b, ", \"ids_open\": %d, \"ids_closed\": %s", m->n_open, m->closed ? "true" : "false");
	}
	sb_printf(b, "}");
}

/* The model the chat was made on, and what its ids belong to. */
static void put_model(sbuf *b, const conv *c)
{
	const conv_origin *o = &c->origin;
	if (o->path) {
		sb_printf(b, ",\n  \"model\": {\"path\": ");
		put_str(b, o->path, strlen(o->path));
		sb_printf(b, ", \"size\": %lld, \"header\": \"%016llx\", \"template\": \"%s\"}", (long long)o->size,
		    (unsigned long long)o->header, tmpl_name(o->fam));
	}
	if (c->has_sys_ids && c->ids_vocab) {
		sb_printf(b, ",\n  \"ids_vocab\": \"%016llx\", \"ids_template\": \"%s\"", (unsigned long long)c->ids_vocab,
		    tmpl_name(c->ids_fam));
		put_ids(b, "system_ids", c->sys_ids, c->n_sys_ids);
	}
	if (c->first)
		sb_printf(b, ",\n  \"context_from\": %d", c->first);
}

int store_save(const conv *c, const char *path, err *e)
{
	sbuf b = {0};
	sb_printf(&b, "{\n  \"format\": \"%s\",\n  \"name\": ", CHAT_FORMAT);
	put_str(&b, c->name, strlen(c->name));
	sb_printf(&b, ",\n  \"system_prompt\": ");
	put_str(&b, c->prompt_name, strlen(c->prompt_name));
	sb_printf(&b, ",\n  \"system\": ");
	put_str(&b, c->system, strlen(c->system));
	put_model(&b, c);
	sb_printf(&b, ",\n  \"messages\": [");
	for (int i = 0; i < c->n_msgs; i++) {
		sb_printf(&b, "%s\n", i ? "," : "");
		put_msg(&b, &c->msgs[i]);
	}
	sb_printf(&b, "%s]\n}\n", c->n_msgs ? "\n  " : "");
	int rc = store_write_atomic(path, b.p, b.n, e);
	free(b.p);
	return rc;
}

static char *read_file(const char *path, size_t *len, err *e)
{
	/* regular files only: a FIFO in a chat's place must not hang --resume */
	return file_read_all(path, STORE_MAX_BYTES, "saved chat", len, e);
}

static const json *get_typed(const json *o, const char *key, enum json_type t)
{
	const json *v = json_get(o, key);
	return v && v->type == t ? v : NULL;
}

/* An array of token ids into a new array (*n of them); false when v is not
 * one (then nothing is allocated). */
static bool get_ids(const json *v, int32_t **ids, int *n)
{
	*ids = NULL;
	*n = 0;
	if (!v || v->type != JSON_ARR || v->n > INT32_MAX)
		return false;
	for (size_t i = 0; i < v->n; i++)
		if (v->items[i].type != JSON_NUM || !(v->items[i].num >= 0) || v->items[i].num > INT32_MAX ||
		    v->items[i].num != (double)(int32_t)v->items[i].num)
			return false;
	*ids = xmalloc((v->n + 1) * sizeof **ids);
	for (size_t i = 0; i < v->n; i++)
		(*ids)[i] = (int32_t)v->items[i].num;
	*n = (int)v->n;
	return true;
}

/* A message's ids, if it has valid ones (damaged ones are dropped: the
 * history is then re-rendered from the text). */
static void load_msg_ids(conv *c, int k, const json *m)
{
	int32_t *ids;
	int n;
	if (!get_ids(json_get(m, "ids"), &ids, &n))
		return;
	conv_set_ids(c, k, ids, n);
	free(ids);
	conv_msg *x = &c->msgs[k];
	const json *v = get_typed(m, "ids_open", JSON_NUM), *cl = get_typed(m, "ids_closed", JSON_BOOL);
	x->n_open = v && v->num >= 0 && v->num <= n ? (int)v->num : 0;
	x->closed = x->role == CONV_ASSISTANT && (!cl || cl->b);
}

/* Times saved with an answer, at most (11.6 days: more is a damaged file). */
#define MAX_SAVED_MS 1e9

/* Number key of message m into *out when it lies in [lo, hi]; one out of
 * range (or not a number) is named in bad and left out. False when it is
 * absent or left out. */
static bool saved_num(const json *m, const char *key, double lo, double hi, double *out, sbuf *bad)
{
	const json *v = json_get(m, key);
	if (!v)
		return false;
	if (v->type == JSON_NUM && v->num >= lo && v->num <= hi) { /* NaN fails both */
		*out = v->num;
		return true;
	}
	sb_printf(bad, "%s%s ", bad->n ? ", " : "", key);
	if (v->type == JSON_NUM)
		sb_printf(bad, "%.6g (not in %g..%g)", v->num, lo, hi);
	else
		sb_printf(bad, "(not a number)");
	return false;
}

static int load_msg(conv *c, const json *m, int i, err *e)
{
	const json *role = get_typed(m, "role", JSON_STR), *text = get_typed(m, "content", JSON_STR);
	if (m->type != JSON_OBJ || !role || !text) {
		err_set(e, "messages[%d]: needs \"role\" and \"content\" strings", i);
		return -1;
	}
	bool user = !strcmp(role->str, "user");
	if (!user && strcmp(role->str, "assistant")) {
		err_set(e, "messages[%d].role: expected \"user\" or \"assistant\", got \"%s\"", i, role->str);
		return -1;
	}
	int k = conv_add(c, user ? CONV_USER : CONV_ASSISTANT, text->str, text->len);
	conv_msg *x = &c->msgs[k];
	const json *v;
	if ((v = get_typed(m, "finish", JSON_STR)))
		snprintf(x->finish, sizeof x->finish, "%s", v->str);
	if (!user && !x->finish[0])
		snprintf(x->finish, sizeof x->finish, "interrupted");
	if ((v = get_typed(m, "error", JSON_STR)))
		x->error = xstrdup(v->str);
	if ((v = get_typed(m, "note", JSON_STR)))
		x->note = xstrdup(v->str);
	/* numbers are range-checked: one out of range is a damaged file, left
	 * out and said so in the message's note (the chat still opens) */
	sbuf bad = {0};
	double num;
	if (saved_num(m, "tokens", 0, INT_MAX, &num, &bad))
		x->n_gen = (int)num;
	if (saved_num(m, "ttft_ms", 0, MAX_SAVED_MS, &num, &bad))
		x->ttft_ms = num;
	if (saved_num(m, "tpot_ms", 0, MAX_SAVED_MS, &num, &bad))
		x->tpot_ms = num;
	if (saved_num(m, "draft_proposed", 0, INT_MAX, &num, &bad))
		x->n_proposed = (int)num;
	if (saved_num(m, "draft_accepted", 0, x->n_proposed, &num, &bad))
		x->n_accepted = (int)num;
	if (saved_num(m, "prompt_tokens", 0, INT_MAX, &num, &bad))
		x->n_prompt = (int)num;
	if (saved_num(m, "cached_tokens", 0, x->n_prompt, &num, &bad))
		x->n_cached = (int)num;
	if (bad.n) {
		sbuf note = {0};
		sb_printf(&note, "%s%sthe saved file is damaged here: %s left out", x->note ? x->note : "",
			  x->note ? "; " : "", bad.p);
		conv_set_note(c, k, note.p);
		sb_free(&note);
	}
	sb_free(&bad);
	load_msg_ids(c, k, m);
	return 0;
}

/* A template family by its saved name (tmpl_name's). */
static enum tmpl_family fam_named(const json *v)
{
	if (!v || !strcmp(v->str, "none"))
		return TMPL_NONE;
	return tmpl_detect(v->str, v->len);
}

static uint64_t get_hex(const json *o, const char *key)
{
	const json *v = get_typed(o, key, JSON_STR);
	char *end;
	unsigned long long x = v ? strtoull(v->str, &end, 16) : 0;
	return v && v->len == 16 && !*end ? (uint64_t)x : 0;
}

/* The model the chat was made on and its token history's identity (all
 * optional: older files have none). */
static void load_model(conv *c, const json *root)
{
	const json *m = get_typed(root, "model", JSON_OBJ), *v;
	const json *path = get_typed(m, "path", JSON_STR), *size = get_typed(m, "size", JSON_NUM);
	const json *fam = get_typed(m, "template", JSON_STR);
	if (path && size && size->num >= 0 && size->num < 9e18)
		conv_set_origin(c, path->str, (int64_t)size->num, get_hex(m, "header"),
				fam_named(fam));
	int32_t *ids;
	int n;
	const json *ifam = get_typed(root, "ids_template", JSON_STR);
	if ((c->ids_vocab = get_hex(root, "ids_vocab")) && ifam && get_ids(json_get(root, "system_ids"), &ids, &n)) {
		conv_set_sys_ids(c, ids, n);
		c->ids_fam = fam_named(ifam);
		free(ids);
	} else {
		c->ids_vocab = 0;
	}
	if ((v = get_typed(root, "context_from", JSON_NUM)) && v->num >= 0 && v->num <= c->n_msgs)
		c->first = (int)v->num;
}

static int load_json(conv *c, const json *root, err *e)
{
	const json *fmt = get_typed(root, "format", JSON_STR);
	const json *name = get_typed(root, "name", JSON_STR);
	const json *pname = get_typed(root, "system_prompt", JSON_STR);
	const json *sys = get_typed(root, "system", JSON_STR);
	const json *msgs = get_typed(root, "messages", JSON_ARR);
	if (!fmt || strcmp(fmt->str, CHAT_FORMAT)) {
		err_set(e, "format: expected \"%s\"", CHAT_FORMAT);
		return -1;
	}
	if (!name || !pname || !sys || !msgs) {
		err_set(e, "needs \"name\", \"system_prompt\", \"system\" and \"messages\"");
		return -1;
	}
	conv_init(c, name->str, pname->str, sys->str);
	for (size_t i = 0; i < msgs->n; i++)
		if (load_msg(c, &msgs->items[i], (int)i, e)) {
			conv_deinit(c);
			return -1;
		}
	load_model(c, root);
	return 0;
}

/* Replays the journal of path into c (see the header for the protocol). */
static void replay_journal(conv *c, const char *path)
{
	char jpath[4200];
	snprintf(jpath, sizeof jpath, "%s.stream", path);
	size_t len;
	char *j = read_file(jpath, &len, NULL);
	if (!j)
		return;
	int msg;
	size_t base;
	const char *nl = memchr(j, '\n', len);
	size_t head = nl ? (size_t)(nl - j) + 1 : 0;
	if (nl && sscanf(j, "pagechat-stream 1 %d %zu", &msg, &base) == 2 &&
	    msg >= 0 && msg < c->n_msgs && c->msgs[msg].role == CONV_ASSISTANT) {
		conv_msg *m = &c->msgs[msg];
		size_t got = len - head;
		/* the saved text already holds (m->len - base) of the journal's bytes */
		if (base <= m->len && m->len - base < got) {
			conv_append(c, msg, j + head + (m->len - base), got - (m->len - base));
			if (!strcmp(m->finish, ""))
				snprintf(m->finish, sizeof m->finish, "interrupted");
		}
	}
	free(j);
}

/* Replays the ids journal of path (FILE.ids: a header line naming the
 * message and how many of its ids the file held, then 4-byte little-endian
 * ids; a torn last one is ignored), then counts the interrupted answer's
 * tokens from its ids. */
static void replay_ids(conv *c, const char *path)
{
	char jpath[4200];
	snprintf(jpath, sizeof jpath, "%s.ids", path);
	size_t len;
	char *j = read_file(jpath, &len, NULL);
	int msg, base;
	const char *nl = j ? memchr(j, '\n', len) : NULL;
	if (nl && sscanf(j, "pagechat-ids 1 %d %d", &msg, &base) == 2 && msg >= 0 && msg < c->n_msgs &&
	    c->msgs[msg].role == CONV_ASSISTANT && c->msgs[msg].has_ids) {
		conv_msg *m = &c->msgs[msg];
		const uint8_t *p = (const uint8_t *)nl + 1;
		int got = (int)MIN((len - (size_t)(p - (const uint8_t *)j)) / 4, (size_t)INT_MAX);
		for (int k = m->n_ids - base; base >= 0 && base <= m->n_ids && k < got; k++)
			conv_answer_id(c, msg, (int32_t)((uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 |
							 (uint32_t)p[4 * k + 2] << 16 | (uint32_t)p[4 * k + 3] << 24));
	}
	free(j);
	for (int i = 0; i < c->n_msgs; i++) {
		conv_msg *m = &c->msgs[i];
		if (!strcmp(m->finish, "interrupted") && m->has_ids && !m->closed)
			m->n_gen = MAX(m->n_gen, m->n_ids - m->n_open);
	}
}

int store_load(conv *c, const char *path, err *e)
{
	memset(c, 0, sizeof *c);
	size_t len;
	char *text = read_file(path, &len, e);
	if (!text)
		return -1;
	json_doc *d = json_parse(text, len, e);
	free(text);
	int rc = d ? load_json(c, json_root(d), e) : -1;
	json_free(d);
	if (rc) {
		err_prefix(e, "%s", path);
		return -1;
	}
	replay_journal(c, path);
	replay_ids(c, path);
	return 0;
}

/* ---- the journal ---- */

int store_journal_begin(store_journal *j, const char *chat_path, const conv *c, int msg, err *e)
{
	if (j->is_open)
		close(j->fd);
	j->is_open = false;
	snprintf(j->path, sizeof j->path, "%s.stream", chat_path);
	int fd = file_create_fresh(j->path, FILE_MODE_PRIVATE, false, e); /* never through a link */
	char head[64];
	size_t n = 0;
	bfmt(head, sizeof head, &n, "pagechat-stream 1 %d %zu\n", msg, c->msgs[msg].len);
	if (fd < 0)
		return -1;
	if (write_all(fd, head, n)) {
		err_set(e, "%s: cannot write: %s", j->path, strerror(errno));
		close(fd);
		return -1;
	}
	j->fd = fd;
	j->is_open = true;
	const conv_msg *m = &c->msgs[msg];
	snprintf(j->ids_path, sizeof j->ids_path, "%s.ids", chat_path);
	if (j->ids_is_open)
		close(j->ids_fd);
	j->ids_fd = m->has_ids ? open(j->ids_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
	n = 0;
	bfmt(head, sizeof head, &n, "pagechat-ids 1 %d %d\n", msg, m->n_ids);
	j->ids_is_open = j->ids_fd >= 0 && !write_all(j->ids_fd, head, n);
	if (j->ids_fd >= 0 && !j->ids_is_open)
		close(j->ids_fd);
	return 0;
}

void store_journal_append_id(store_journal *j, int32_t id)
{
	if (!j->ids_is_open)
		return;
	uint8_t b[4] = {(uint8_t)id, (uint8_t)((uint32_t)id >> 8), (uint8_t)((uint32_t)id >> 16),
			(uint8_t)((uint32_t)id >> 24)};
	if (write_all(j->ids_fd, (const char *)b, 4)) {
		close(j->ids_fd);
		j->ids_is_open = false;
	}
}

void store_journal_append(store_journal *j, const char *text, size_t len)
{
	if (!j->is_open || len == 0)
		return;
	if (write_all(j->fd, text, len)) {
		close(j->fd);
		j->is_open = false;
	}
}

void store_journal_end(store_journal *j)
{
	if (j->is_open)
		close(j->fd);
	if (j->ids_is_open)
		close(j->ids_fd);
	if (j->path[0])
		unlink(j->path);
	if (j->ids_path[0])
		unlink(j->ids_path);
	j->is_open = j->ids_is_open = false;
	j->path[0] = j->ids_path[0] = '\0';
}

void store_journal_remove(const char *chat_path)
{
	char path[4200];
	snprintf(path, sizeof path, "%s.stream", chat_path);
	unlink(path);
	snprintf(path, sizeof path, "%s.ids", chat_path);
	unlink(path);
}

/* ---- Markdown ---- */

int store_export_md(const conv *c, const char *path, err *e)
{
	sbuf b = {0};
	sb_printf(&b, "# %s\n\n", c->name);
	if (*c->system)
		sb_printf(&b, "> **System prompt (%s):** %s\n\n", c->prompt_name, c->system);
	for (int i = 0; i < c->n_msgs; i++) {
		const conv_msg *m = &c->msgs[i];
		if (conv_continues(c, i)) {
			/* the answer goes on: no heading, no break (the last one
			 * ended in "\n\n" and had no note) */
			m = &c->msgs[++i];
			b.n -= 2;
			sb_printf(&b, "%.*s\n\n", (int)m->len, m->text);
		} else {
			sb_printf(&b, "## %s\n\n%.*s\n\n", m->role == CONV_USER ? "You" : "Assistant", (int)m->len,
				  m->text);
		}
		if (conv_continues(c, i + 1))
			continue; /* its note comes after the last part */
		if (m->error)
			sb_printf(&b, "*Error: %s*\n\n", m->error);
		else if (m->role == CONV_ASSISTANT && m->finish[0] && strcmp(m->finish, "stop"))
			sb_printf(&b, "*(%s)*\n\n", m->finish);
	}
	int rc = file_write_atomic(path, b.p, b.n, FILE_MODE_SHARED, e);
	free(b.p);
	return rc;
}

/* ---- the session ---- */

int store_session_save(const char *dir, const char *const *files, int n, int active, err *e)
{
	sbuf b = {0};
	sb_printf(&b, "{\n  \"format\": \"%s\",\n  \"active\": %d,\n  \"tabs\": [", SESSION_FORMAT, active);
	for (int i = 0; i < n; i++) {
		sb_printf(&b, "%s\n    ", i ? "," : "");
		put_str(&b, files[i], strlen(files[i]));
	}
	sb_printf(&b, "%s]\n}\n", n ? "\n  " : "");
	char path[4200];
	snprintf(path, sizeof path, "%s/" SESSION_FILE, dir);
	int rc = store_write_atomic(path, b.p, b.n, e);
	free(b.p);
	return rc;
}

bool store_session_exists(const char *dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/" SESSION_FILE, dir);
	return access(path, F_OK) == 0;
}

int store_session_load(const char *dir, char ***files, int *n, int *active, err *e)
{
	*files = NULL;
	*n = 0;
	*active = 0;
	char path[4200];
	snprintf(path, sizeof path, "%s/" SESSION_FILE, dir);
	if (access(path, F_OK))
		return 0;
	size_t len;
	char *text = read_file(path, &len, e);
	if (!text)
		return -1;
	json_doc *d = json_parse(text, len, e);
	free(text);
	const json *root = d ? json_root(d) : NULL;
	const json *fmt = get_typed(root, "format", JSON_STR), *tabs = get_typed(root, "tabs", JSON_ARR);
	const json *act = get_typed(root, "active", JSON_NUM);
	int rc = -1;
	if (!d)
		err_prefix(e, "%s", path);
	else if (!fmt || strcmp(fmt->str, SESSION_FORMAT) || !tabs)
		err_set(e, "%s: not a pagechat session (format, tabs)", path);
	else
		rc = 0;
	for (size_t i = 0; rc == 0 && i < tabs->n; i++) {
		const json *f = &tabs->items[i];
		if (f->type != JSON_STR || strchr(f->str, '/')) {
			err_set(e, "%s: tabs[%zu]: expected a file name", path, i);
			rc = -1;
			break;
		}
		*files = xrealloc(*files, (size_t)(*n + 1) * sizeof **files);
		(*files)[(*n)++] = xstrdup(f->str);
	}
	if (rc == 0 && act && act->num >= INT_MIN && act->num <= INT_MAX)
		*active = (int)act->num;
	if (rc) {
		for (int i = 0; i < *n; i++)
			free((*files)[i]);
		free(*files);
		*files = NULL;
		*n = 0;
	}
	json_free(d);
	return rc;
}
