/* app/nohttp.c: the HTTP server's entry points in a build without HTTP
 * (make HTTP=0, for a machine without libmicrohttpd, such as the GPU
 * check's): `pagechat serve` and `chat --serve` are refused with the reason.
 * The Makefile compiles this file instead of app/serve.c and app/http_*.c
 * that need libmicrohttpd. */
#include "app/serve.h"

#include <stdlib.h>

serve *serve_start(const serve_params *p, const serve_engine *x, err *e)
{
	(void)p, (void)x;
	err_set(e, "the HTTP server: this pagechat was built without HTTP (make HTTP=0); rebuild with make HTTP=1");
	return NULL;
}

int serve_port(const serve *s)
{
	(void)s;
	return 0;
}

void serve_stop(serve *s)
{
	(void)s;
}
