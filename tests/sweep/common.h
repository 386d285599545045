/* common.h - helpers of the sweep tests: a tiny training scenario and sweep files around it. */
#ifndef NPUSIM_TESTS_SWEEP_COMMON_H
#define NPUSIM_TESTS_SWEEP_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

/*
 * dir/tiny.cfg: Llama 2 7B cut to 4 layers of 1K tokens on one Atlas 800T A2 server, its kernel
 * costs shared through dir/costs.cache: a point takes about a tenth of a second.
 */
static inline void sweep_base(const char *dir)
{
  char text[1024];
  snprintf(text, sizeof text,
           "preset = \"atlas-800t-a2\";\n"
           "model = { preset = \"llama2-7b\"; layers = 4; seq_len = 1024; };\n"
           "plan = { tp = 1; pp = 2; zero = 1; micro_batch = 1; global_batch = 16; };\n"
           "run = { cost_cache = \"%s/costs.cache\"; };\n",
           dir);
  free(ts_write(dir, "tiny.cfg", text));
}

/* dir/NAME with `sweep = { base = "tiny.cfg"; BODY };`; returns the path (owned). */
static inline char *sweep_file(const char *dir, const char *name, const char *body)
{
  char text[8192];
  snprintf(text, sizeof text, "sweep = {\n  base = \"tiny.cfg\";\n%s};\n", body);
  return ts_write(dir, name, text);
}

/* Count lines of a text. */
static inline int count_lines(const char *s)
{
  int n = 0;
  for (; s && *s; s++) n += *s == '\n';
  return n;
}

#endif
