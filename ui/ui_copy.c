/* ui/ui_copy.c: /copy [N] and F5: text to the terminal's clipboard.
 *
 * The text goes out as an OSC 52 sequence (ESC ] 52 ; c ; base64 BEL),
 * which xterm, kitty, iTerm2, WezTerm, foot, Windows Terminal and tmux
 * (set-clipboard on) understand, over ssh too; inside tmux it is also sent
 * wrapped for passthrough, for a tmux that forwards it only that way.
 * Nothing can tell whether the terminal took it, so the status line says
 * what was sent. The answer's Markdown is copied as written. */
#include "ui/ui_int.h"

#include "ui/md.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COPY_MAX (1 << 20) /* bytes: terminals cap OSC 52 around here */

/* The base64 of s[n] into out (4 * ((n + 2) / 3) + 1 bytes). */
static void base64(const unsigned char *s, size_t n, char *out)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? s[i + 2] : 0);
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
}

static bool write_all(const char *s, size_t n)
{
	while (n > 0) {
		ssize_t w = write(1, s, n);
		if (w <= 0)
			return false;
		s += w;
		n -= (size_t)w;
	}
	return true;
}

/* Sends s[n] to the clipboard; false if the terminal write failed. */
static bool osc52(const char *s, size_t n)
{
	char *b = xmalloc(4 * ((n + 2) / 3) + 1);
	base64((const unsigned char *)s, n, b);
	fflush(stdout); /* after what ncurses has drawn */
	bool ok = write_all("\033]52;c;", 7) && write_all(b, strlen(b)) && write_all("\007", 1);
	if (ok && getenv("TMUX"))
		ok = write_all("\033Ptmux;\033\033]52;c;", 16) && write_all(b, strlen(b)) &&
		     write_all("\007\033\\", 3);
	free(b);
	return ok;
}

/* The last answer with text, or NULL. */
static const conv_msg *last_answer(const tab *t)
{
	for (int i = t->chat.n_msgs - 1; i >= 0; i--)
		if (t->chat.msgs[i].role == CONV_ASSISTANT && t->chat.msgs[i].len)
			return &t->chat.msgs[i];
	return NULL;
}

/* Code block n (from 1, numbered over the tab's answers as the view shows
 * them) into *s, *len; false if there is none. */
static bool code_block(const tab *t, int n, const char **s, size_t *len, char *lang, size_t cap)
{
	int seen = 0;
	for (int i = 0; i < t->chat.n_msgs; i++) {
		const conv_msg *m = &t->chat.msgs[i];
		if (m->role != CONV_ASSISTANT)
			continue;
		md_block b[1];
		int k = md_blocks(m->text, m->len, NULL, 0);
		if (n <= seen + k) {
			md_block *all = xmalloc((size_t)k * sizeof *all);
			md_blocks(m->text, m->len, all, k);
			b[0] = all[n - seen - 1];
			free(all);
			*s = m->text + b[0].off;
			*len = b[0].len;
			snprintf(lang, cap, "%s", b[0].lang);
			return true;
		}
		seen += k;
	}
	return false;
}

void cmd_copy(ui *u, const char *arg)
{
	tab *t = ui_tab(u);
	const char *s;
	size_t len;
	char what[64] = "the last answer", lang[24] = "";
	if (*arg) {
		char *end;
		long n = strtol(arg, &end, 10);
		if (*end || n < 1 || n > 100000 || !code_block(t, (int)n, &s, &len, lang, sizeof lang)) {
			ui_status(u, true, "/copy N: no code block %.20s in this tab (the view numbers them: [code N])",
				  arg);
			return;
		}
		snprintf(what, sizeof what, "code block %ld%s%s", n, lang[0] ? " " : "", lang);
	} else {
		const conv_msg *m = last_answer(t);
		if (!m) {
			ui_status(u, true, "no answer to copy yet");
			return;
		}
		s = m->text, len = m->len;
		while (len && (*s == ' ' || *s == '\n'))
			s++, len--;
	}
	if (len > COPY_MAX) {
		ui_status(u, true, "%s is %zu bytes: more than terminals take (%d); /save FILE keeps it", what, len,
			  COPY_MAX);
		return;
	}
	if (!osc52(s, len))
		ui_status(u, true, "could not write to the terminal: nothing copied");
	else
		ui_status(u, false, "copied %s (%zu bytes) with OSC 52: the terminal must allow it", what, len);
}
