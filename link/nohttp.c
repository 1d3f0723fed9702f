/* link/nohttp.c: link_start_server in a build without HTTP (make HTTP=0,
 * for a machine without libcurl, such as the GPU check's): the chat's
 * --server is refused with the reason, and everything else links as usual.
 * The Makefile compiles this file instead of link/remote*.c. */
#include "link/link.h"

elink *link_start_server(const link_server_params *p, err *e)
{
	err_set(e, "--server %s: this pagechat was built without HTTP (make HTTP=0); rebuild with make HTTP=1",
		p->url ? p->url : "");
	return NULL;
}
