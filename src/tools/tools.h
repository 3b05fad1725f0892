/* Subcommands that are more than a call into the public API. Each returns a process exit code. */
#ifndef QRT_TOOLS_H
#define QRT_TOOLS_H
#include <stdio.h>

int qrt_tool_inspect(const char *dir, int json, FILE *out);
#ifdef QRT_HAVE_CUDA
/* qwenrt tilebench: NVFP4 GEMV variants at the 27B decode shapes vs measured read bandwidth. */
int qrt_tool_tilebench(int argc, char **argv);
#endif
#endif
