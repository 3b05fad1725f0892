/* Subcommands that are more than a call into the public API. Each returns a process exit code. */
#ifndef QRT_TOOLS_H
#define QRT_TOOLS_H
#include <stdio.h>

int qrt_tool_inspect(const char *dir, int json, FILE *out);
/* qwenrt quantize / synth: argv holds the arguments after the subcommand name. */
int qrt_tool_quantize(int argc, char **argv);
int qrt_tool_synth(int argc, char **argv);
#endif
