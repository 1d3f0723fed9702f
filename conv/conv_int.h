/* conv/conv_int.h: what conv/hist.c gives conv/turn.c (folder-
 * internal: only the conv/ files include this). The files of conv/ call one
 * way: turn.c -> hist.c -> conv.c. The calling thread owns c. */
#ifndef PAGECHAT_CONV_INT_H
#define PAGECHAT_CONV_INT_H

#include "conv/conv.h"

/* Computes message i's ids from its text and the history before it (the
 * template's rendering of it; completion mode: its text). 0, or -1 with e. */
int conv_fill_ids(conv *c, const conv_model *m, int i, err *e);
/* The ids that open an answer after msgs[..upto) (the template's generation
 * prompt; none in completion mode) into a new array. 0, or -1 with e. */
int conv_opening_ids(const conv *c, const conv_model *m, int upto, int32_t **ids, int *n, err *e);
/* Appends the template's closing to every answer of the history that lacks
 * it; one that produced nothing and did not stop leaves the history. 0, or
 * -1 with e. */
int conv_close_answers(conv *c, const conv_model *m, err *e);

#endif
