/* app/main.c: the entry point; everything happens in cli_main(). */
#include "app/cli.h"

int main(int argc, char **argv)
{
	return cli_main(argc, argv);
}
