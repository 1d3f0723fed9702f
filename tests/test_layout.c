/* tests/test_layout.c: the tree's structural rules, checked on the sources
 * and objects (run from the repository root, after the build):
 * - includes point one way, in the order the data travels: app -> ui ->
 *   link, conv, config -> engine -> kv -> models -> kernels -> base (a folder
 *   includes only lower ones; link/, conv/ and config/ not each other);
 * - engine/ is the synchronous step and kv/ the block memory: no thread,
 *   socket, HTTP or libcurl header or call in either (link/ owns those), and
 *   no file opened in engine/ (the disk tier's files are kv/store.c's);
 * - ui/ holds a link (link/link.h) and names neither engine's own API;
 * - no call circle between the files of one folder: from the objects' symbol
 *   tables (nm), file A depends on file B when A uses a symbol B defines; a
 *   group of files that reach each other is one module cut in halves (or a
 *   layer missing), which the design does not allow;
 * - no function over 80 lines outside the SIMD kernels (kernels/cpu/avx*.c);
 * - one batch runner: only engine/runner.c calls llama_forward outside models/;
 * - one number parser for flags: only app/opts.c calls strtol and friends in app/;
 * - nothing printed into a fixed buffer can run past it: no sprintf,
 *   vsprintf, strcpy, strcat, stpcpy or gets, and snprintf's result is used
 *   only in a comparison with the buffer's size (a text whose length
 *   matters is built with bfmt or an sbuf, base/base.h; base/ builds them).
 * A function is counted from its opening brace in column 0 to the closing
 * brace in column 0 (the house style's layout). */
#include "tests/test.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const folders[] = {"base", "kernels", "kernels/cpu", "kernels/cuda", "models", "kv",
				      "engine", "conv", "link", "config", "ui", "app", "tools"};

/* The folders in the order the data travels, lowest first; folders of one
 * rank (conv/, link/, config/) may not include each other. */
static int rank_of(const char *folder)
{
	static const struct {
		const char *name;
		int rank;
	} order[] = {{"base", 0},   {"kernels", 1}, {"models", 2}, {"kv", 3},  {"engine", 4}, {"conv", 5},
		     {"link", 5},   {"config", 5},  {"ui", 6},     {"app", 7}, {"tools", 8}};
	for (int i = 0; i < (int)(sizeof order / sizeof *order); i++)
		if (!strcmp(folder, order[i].name))
			return order[i].rank;
	return -1;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	size_t got = fread(s, 1, (size_t)n, f);
	s[got] = '\0';
	fclose(f);
	return s;
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

/* The top folder of path ("engine" for "engine/core.c"). */
static void top_of(const char *path, char *out, size_t cap)
{
	size_t n = strcspn(path, "/");
	n = n < cap - 1 ? n : cap - 1;
	memcpy(out, path, n);
	out[n] = '\0';
}

static void check_includes(const char *path, const char *text)
{
	char top[32];
	top_of(path, top, sizeof top);
	int mine = rank_of(top);
	for (const char *l = text; (l = strstr(l, "#include \"")); l++) {
		const char *inc = l + 10;
		char to[32];
		top_of(inc, to, sizeof to);
		int theirs = rank_of(to);
		if (theirs < 0)
			continue;
		bool up = theirs > mine || (theirs == mine && strcmp(top, to));
		int len = (int)strcspn(inc, "\"");
		if (up) {
			CHECK_(0, "%s includes %.*s (a folder may include only lower ones)", path, len, inc);
			return;
		}
	}
	CHECK(1);
}

/* Functions: from a line "{" to the next line "}" (both in column 0). */
static void check_functions(const char *path, const char *text)
{
	if (strstr(path, "kernels/cpu/avx"))
		return; /* SIMD kernels: long straight-line register code is allowed */
	int line = 1, open_line = 0, bad = 0;
	for (const char *p = text; *p; p++) {
		bool bol = p == text || p[-1] == '\n';
		if (bol && p[0] == '{' && (p[1] == '\n' || p[1] == '\0'))
			open_line = line;
		else if (bol && p[0] == '}' && (p[1] == '\n' || p[1] == '\0') && open_line) {
			int body = line - open_line - 1;
			if (body > 80 && ++bad)
				fprintf(stderr, "%s:%d: function of %d lines (at most 80)\n", path, open_line, body);
			open_line = 0;
		}
		line += *p == '\n';
	}
	CHECK_(bad == 0, "%s: %d functions over 80 lines", path, bad);
}

static bool calls(const char *text, const char *fn)
{
	size_t n = strlen(fn);
	for (const char *p = text; (p = strstr(p, fn)); p += n) {
		bool word_start = p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
						 (p[-1] >= '0' && p[-1] <= '9'));
		if (word_start && p[n] == '(')
			return true;
	}
	return false;
}

/* A copy of text with comments and string literals blanked (newlines
 * kept), so that a comment naming open() is not a call. */
static char *code_only(const char *text)
{
	char *c = strdup(text);
	for (char *p = c; *p; p++) {
		if (p[0] == '/' && p[1] == '*') {
			char *e = strstr(p + 2, "*/");
			char *stop = e ? e + 2 : p + strlen(p);
			for (; p < stop; p++)
				*p = *p == '\n' ? '\n' : ' ';
			p--;
		} else if (p[0] == '/' && p[1] == '/') {
			for (; *p && *p != '\n'; p++)
				*p = ' ';
			p--;
		} else if (*p == '\'') {
			for (p++; *p && *p != '\'' && *p != '\n'; p++)
				if (*p == '\\' && p[1])
					p++;
			if (!*p)
				break;
		} else if (*p == '"') {
			for (p++; *p && *p != '"' && *p != '\n'; p++) {
				if (*p == '\\' && p[1])
					*p++ = ' ';
				*p = ' ';
			}
			if (!*p)
				break;
		}
	}
	return c;
}

/* engine/ and kv/: no threads, sockets, HTTP or libcurl (link/ owns every
 * thread, pipe and network call), and engine/ opens no file. */
static void check_step_only(const char *path, const char *source)
{
	char *text = code_only(source);
	static const char *const headers[] = {"<pthread.h>", "<sys/socket.h>", "<netinet/", "<arpa/inet.h>",
					      "<netdb.h>", "<curl/", "<microhttpd.h>", "<poll.h>", "<sys/epoll.h>"};
	static const char *const fns[] = {"pthread_create", "pthread_mutex_lock", "pthread_cond_wait", "socket",
					  "connect", "accept", "pipe", "poll", "curl_easy_init", "MHD_start_daemon"};
	static const char *const files[] = {"open", "openat", "fopen", "opendir", "unlink", "rename", "mkdir"};
	for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
		char inc[64];
		snprintf(inc, sizeof inc, "#include %s", headers[i]);
		CHECK_(!strstr(text, inc), "%s includes %s (threads, sockets and HTTP live in link/)", path,
		       headers[i]);
	}
	for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
		CHECK_(!calls(text, fns[i]), "%s calls %s (threads, sockets and HTTP live in link/)", path, fns[i]);
	for (size_t i = 0; !strncmp(path, "engine/", 7) && i < sizeof files / sizeof *files; i++)
		CHECK_(!calls(text, files[i]), "%s calls %s (engine/ does no file I/O: kv/store.c does)", path,
		       files[i]);
	free(text);
}

/* ---- printing into fixed buffers ---- */

static bool ident_char(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* The last character before p (from text on) that is not blank, or 0. */
static const char *prev_char(const char *text, const char *p)
{
	while (p > text && (p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n'))
		p--;
	return p > text ? p - 1 : NULL;
}

/* Whether the parenthesised text (open, close) is a type: a cast. */
static bool is_cast(const char *open, const char *close)
{
	bool any = false;
	for (const char *q = open + 1; q < close; q++) {
		if (!ident_char(*q) && *q != ' ' && *q != '*')
			return false;
		any = any || ident_char(*q);
	}
	return any;
}

static const char *match_open(const char *text, const char *close)
{
	int depth = 0;
	for (const char *q = close; q >= text; q--)
		if (*q == ')')
			depth++;
		else if (*q == '(' && --depth == 0)
			return q;
	return NULL;
}

static const char *match_close(const char *open)
{
	int depth = 0;
	for (const char *q = open; *q; q++)
		if (*q == '(')
			depth++;
		else if (*q == ')' && --depth == 0)
			return q;
	return NULL;
}

/* Whether the word that ends at the character before p is w. */
static bool word_before(const char *text, const char *p, const char *w)
{
	const char *e = prev_char(text, p);
	if (!e || !ident_char(*e))
		return false;
	const char *s = e;
	while (s > text && ident_char(s[-1]))
		s--;
	return (size_t)(e + 1 - s) == strlen(w) && !strncmp(s, w, strlen(w));
}

/* Whether the parenthesised text at o is a condition or a macro's
 * arguments (if (x), while (x), F(x)) rather than a cast: a word before it
 * other than return. */
static bool is_head(const char *text, const char *o)
{
	const char *e = prev_char(text, o);
	return e && ident_char(*e) && !word_before(text, o, "return");
}

/* Whether c is the last character of a preprocessor line or a macro
 * line's backslash: what follows starts a statement. */
static bool ends_directive(const char *text, const char *c)
{
	if (*c == '\\')
		return true;
	const char *l = c;
	while (l > text && l[-1] != '\n')
		l--;
	while (*l == ' ' || *l == '\t')
		l++;
	return *l == '#';
}

/* Whether the call at p (its name n characters long) uses its result
 * only in a comparison, or not at all. */
static bool result_checked(const char *text, const char *p, size_t n)
{
	const char *b = prev_char(text, p);
	bool cast = false;
	if (b && ends_directive(text, b))
		return true;
	while (b && *b == ')') { /* a cast, or the end of a condition or macro head */
		const char *o = match_open(text, b);
		if (!o || !is_cast(o, b) || (o > text && ident_char(o[-1])) || is_head(text, o))
			break;
		if (!strncmp(o, "(void)", 6))
			return true;
		cast = true;
		b = prev_char(text, o);
	}
	if (!b || (!cast && strchr(";{}):", *b)))
		return true; /* a statement of its own: the result is dropped */
	if (!cast && b >= text + 3 && !strncmp(b - 3, "else", 4))
		return true;
	if (*b != '(' && *b != '!' && *b != '&' && *b != '|')
		return false;
	const char *c = match_close(p + n);
	const char *a = c ? c + 1 : NULL;
	while (a && (*a == ' ' || *a == '\n' || *a == '\t'))
		a++;
	return a && (*a == '<' || *a == '>' || !strncmp(a, "==", 2) || !strncmp(a, "!=", 2));
}

static void check_prints(const char *path, const char *source)
{
	char *text = code_only(source);
	static const char *const banned[] = {"sprintf", "vsprintf", "strcpy", "strcat", "stpcpy", "gets"};
	for (size_t i = 0; i < sizeof banned / sizeof *banned; i++)
		CHECK_(!calls(text, banned[i]), "%s calls %s: use snprintf with its cut handled, bfmt or an sbuf "
		       "(base/base.h)", path, banned[i]);
	static const char *const fmts[] = {"snprintf", "vsnprintf"};
	for (size_t f = 0; strncmp(path, "base/", 5) && f < 2; f++) {
		size_t n = strlen(fmts[f]);
		for (const char *p = text; (p = strstr(p, fmts[f])); p += n) {
			if ((p > text && ident_char(p[-1])) || p[n] != '(')
				continue;
			int line = 1;
			for (const char *q = text; q < p; q++)
				line += *q == '\n';
			CHECK_(result_checked(text, p, n), "%s:%d: %s's result used other than in a comparison with "
			       "the buffer's size (a sum of them runs past the buffer): use bfmt or an sbuf", path,
			       line, fmts[f]);
		}
	}
	free(text);
}

/* ---- call circles between the files of one folder, from nm ---- */

#define MAX_UNITS 128

typedef struct unit {
	char name[64];           /* "core_post" for engine/core_post.c */
	char **defs, **uses;     /* owned; external symbols defined / used */
	int n_defs, n_uses, cap_defs, cap_uses;
	int idx, low;            /* Tarjan's numbering; idx -1: not yet visited */
	bool on_stack;
} unit;

typedef struct folder_graph {
	unit u[MAX_UNITS];
	int n;
	bool edge[MAX_UNITS][MAX_UNITS]; /* edge[a][b]: a uses what b defines */
	int stack[MAX_UNITS], sp, counter, circles;
	const char *folder;
} folder_graph;

static void push_sym(char ***v, int *n, int *cap, const char *s)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		*v = realloc(*v, (size_t)*cap * sizeof **v);
	}
	(*v)[(*n)++] = strdup(s);
}

/* Reads obj's symbols with nm; false when nm cannot read it. */
static bool read_symbols(unit *u, const char *obj)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "nm -g '%s' 2>/dev/null", obj);
	FILE *p = popen(cmd, "r");
	if (!p)
		return false;
	char line[512];
	int lines = 0;
	while (fgets(line, sizeof line, p)) {
		char a[256], b[256], c[256];
		int k = sscanf(line, "%255s %255s %255s", a, b, c);
		lines++;
		if (k == 2 && !strcmp(a, "U"))
			push_sym(&u->uses, &u->n_uses, &u->cap_uses, b);
		else if (k == 3 && strchr("TDBRVW", b[0]))
			push_sym(&u->defs, &u->n_defs, &u->cap_defs, c);
	}
	return pclose(p) == 0 && lines > 0;
}

static bool defines(const unit *u, const char *sym)
{
	for (int i = 0; i < u->n_defs; i++)
		if (!strcmp(u->defs[i], sym))
			return true;
	return false;
}

static void strongconnect(folder_graph *g, int v)
{
	unit *u = &g->u[v];
	u->idx = u->low = g->counter++;
	g->stack[g->sp++] = v;
	u->on_stack = true;
	for (int w = 0; w < g->n; w++) {
		if (!g->edge[v][w])
			continue;
		if (g->u[w].idx < 0) {
			strongconnect(g, w);
			u->low = u->low < g->u[w].low ? u->low : g->u[w].low;
		} else if (g->u[w].on_stack) {
			u->low = u->low < g->u[w].idx ? u->low : g->u[w].idx;
		}
	}
	if (u->low != u->idx)
		return;
	char names[1024] = "";
	int n = 0, w;
	do {
		w = g->stack[--g->sp];
		g->u[w].on_stack = false;
		size_t len = strlen(names);
		snprintf(names + len, sizeof names - len, "%s%s", n ? ", " : "", g->u[w].name);
		n++;
	} while (w != v);
	if (n > 1) {
		g->circles++;
		fprintf(stderr, "%s/: files that call each other in a circle: %s\n", g->folder, names);
	}
}

/* Whether folder/file is one this build leaves out (the Makefile's
 * HTTP_OUT: the HTTP files with HTTP=0, their stand-ins otherwise). */
static bool left_out(const char *folder, const char *file)
{
#ifdef LAYOUT_LEFT_OUT
	static const char list[] = LAYOUT_LEFT_OUT;
	char path[200];
	snprintf(path, sizeof path, "%s/%s", folder, file);
	size_t n = strlen(path);
	for (const char *p = list; (p = strstr(p, path)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return true;
#else
	(void)folder, (void)file;
#endif
	return false;
}

/* Loads folder's objects from build (only those whose .c source exists, so
 * stale objects of moved files do not count). */
static void load_folder(folder_graph *g, const char *build, const char *folder)
{
	DIR *d = opendir(folder);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) && g->n < MAX_UNITS) {
		size_t len = strlen(de->d_name);
		if (len < 3 || len > 60 || !has_suffix(de->d_name, ".c"))
			continue;
		unit *u = &g->u[g->n];
		memcpy(u->name, de->d_name, len - 2);
		u->name[len - 2] = '\0';
		if (left_out(folder, de->d_name))
			continue;
		char obj[800];
		snprintf(obj, sizeof obj, "%s/%s/%s.o", build, folder, u->name);
		CHECK_(read_symbols(u, obj), "cannot read the symbols of %s (build it first)", obj);
		u->idx = -1;
		g->n++;
	}
	closedir(d);
}

static void free_units(folder_graph *g)
{
	for (int i = 0; i < g->n; i++) {
		for (int k = 0; k < g->u[i].n_defs; k++)
			free(g->u[i].defs[k]);
		for (int k = 0; k < g->u[i].n_uses; k++)
			free(g->u[i].uses[k]);
		free(g->u[i].defs);
		free(g->u[i].uses);
	}
}

/* The number of circles among folder's files (each printed). */
static int folder_circles(const char *build, const char *folder)
{
	folder_graph *g = calloc(1, sizeof *g);
	g->folder = folder;
	load_folder(g, build, folder);
	for (int a = 0; a < g->n; a++)
		for (int k = 0; k < g->u[a].n_uses; k++)
			for (int b = 0; b < g->n; b++)
				if (b != a && defines(&g->u[b], g->u[a].uses[k]))
					g->edge[a][b] = true;
	for (int v = 0; v < g->n; v++)
		if (g->u[v].idx < 0)
			strongconnect(g, v);
	int circles = g->circles;
	free_units(g);
	free(g);
	return circles;
}

static void check_circles(void)
{
	char build[512];
	snprintf(build, sizeof build, "%s", PAGECHAT_BIN);
	char *slash = strrchr(build, '/');
	if (slash)
		*slash = '\0';
	for (size_t f = 0; f < sizeof folders / sizeof *folders; f++) {
		if (!strcmp(folders[f], "kernels/cuda") || !strcmp(folders[f], "tools"))
			continue; /* .cu objects; tools are one program each */
		int n = folder_circles(build, folders[f]);
		CHECK_(n == 0, "%s/: %d call circles between its files (see above)", folders[f], n);
	}
}

/* True when text uses an identifier starting with prefix. */
static bool uses_prefix(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);
	for (const char *p = text; (p = strstr(p, prefix)); p += n)
		if (p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
				   (p[-1] >= '0' && p[-1] <= '9')))
			return true;
	return false;
}

/* ui/ holds a link and never asks which engine is behind it: from link/ it
 * includes only link/link.h, and it names nothing of either engine's own API
 * (eng_*, rem_*: the engine thread's and the remote engine's). */
static void check_ui_link(const char *path, const char *source)
{
	for (const char *l = source; (l = strstr(l, "#include \"link/")); l++) {
		int len = (int)strcspn(l + 10, "\"");
		CHECK_(!strncmp(l + 10, "link/link.h\"", 12), "%s includes %.*s (ui/ reaches an engine through link/link.h)",
		       path, len, l + 10);
	}
	char *text = code_only(source);
	CHECK_(!uses_prefix(text, "rem_") && !uses_prefix(text, "eng_"),
	       "%s uses an engine's own API (eng_*, rem_*): ui/ holds a link and never asks its kind", path);
	free(text);
}

static void check_file(const char *path, int *n_files)
{
	char *text = slurp(path);
	if (!text) {
		CHECK_(0, "cannot read %s", path);
		return;
	}
	(*n_files)++;
	check_includes(path, text);
	bool code = has_suffix(path, ".c");
	if (!strncmp(path, "engine/", 7) || !strncmp(path, "kv/", 3))
		check_step_only(path, text);
	if (!strncmp(path, "ui/", 3))
		check_ui_link(path, text);
	if (code)
		check_functions(path, text);
	check_prints(path, text);
	if (code && strncmp(path, "models/", 7) && strcmp(path, "engine/runner.c"))
		CHECK_(!calls(text, "llama_forward"), "%s calls llama_forward (use engine/runner.h)", path);
	static const char *const parsers[] = {"strtol", "strtoll", "strtoul", "strtoull", "strtod",
					      "strtof", "atoi", "atol", "atof"};
	if (code && !strncmp(path, "app/", 4) && strcmp(path, "app/opts.c"))
		for (size_t i = 0; i < sizeof parsers / sizeof *parsers; i++)
			CHECK_(!calls(text, parsers[i]), "%s calls %s (flags parse in app/opts.c)", path,
			       parsers[i]);
	free(text);
}

int main(void)
{
	int n_files = 0;
	for (size_t f = 0; f < sizeof folders / sizeof *folders; f++) {
		DIR *d = opendir(folders[f]);
		CHECK_(d != NULL, "cannot open %s/ (run from the repository root)", folders[f]);
		if (!d)
			continue;
		struct dirent *de;
		while ((de = readdir(d))) {
			const char *n = de->d_name;
			if (!has_suffix(n, ".c") && !has_suffix(n, ".h") && !has_suffix(n, ".cu") &&
			    !has_suffix(n, ".cuh"))
				continue;
			char path[512];
			snprintf(path, sizeof path, "%s/%s", folders[f], n);
			check_file(path, &n_files);
		}
		closedir(d);
	}
	CHECK(n_files > 50);
	check_circles();
	return TEST_DONE();
}
