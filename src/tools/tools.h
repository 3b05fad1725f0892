/* Subcommands that are more than a call into the public API. Each returns a process exit code. */
#ifndef QRT_TOOLS_H
#define QRT_TOOLS_H
#include <stdio.h>

int qrt_tool_inspect(const char *dir, int json, FILE *out);
#endif
