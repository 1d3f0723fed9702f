/* ui/ui_termcheck.c: whether TERM can draw the chat, asked of terminfo
 * before the screen is taken (ui_term_check), and the message that says it
 * cannot. A file of its own: <term.h> defines macros (tab, lines, ...)
 * that the rest of ui/ uses as names. A leaf. Main thread only. */
#include "ui/ui.h"
#include "ui/ui_int.h"

#include <stdlib.h>
#include <term.h>

void term_too_dumb(const char *term, err *e)
{
	err_set(e, "the terminal (TERM=%s) cannot move the cursor: the chat needs a full-screen "
		"terminal such as TERM=xterm-256color (pagechat generate works anywhere)", term);
}

int ui_term_check(err *e)
{
	const char *term = getenv("TERM") && *getenv("TERM") ? getenv("TERM") : "unset";
	int why = 0;
	if (setupterm(NULL, 1, &why) != OK) {
		err_set(e, "cannot use the terminal (TERM=%s): terminfo has no entry for it; set TERM to one "
			"it has, such as TERM=xterm-256color", term);
		return -1;
	}
	const char *cup = tigetstr("cup");
	bool moves = cup && cup != (const char *)-1;
	del_curterm(cur_term);
	if (!moves)
		term_too_dumb(term, e);
	return moves ? 0 : -1;
}
