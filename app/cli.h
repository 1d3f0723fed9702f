/* app/cli.h: command-line front end. cli_main() parses argv, runs one command
 * (or the chat) and returns the process exit status. Main thread only. */
#ifndef PAGECHAT_CLI_H
#define PAGECHAT_CLI_H
int cli_main(int argc, char **argv);
#endif
