/* helpers.c - see helpers.h. */
#include "tests/rl/helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/support/support.h"

char *tr_scenario(const char *system, int layers, const char *plan, const char *rl)
{
  char *dir = ts_tmpdir();
  char text[4096];
  char lay[64] = "";
  if (layers) snprintf(lay, sizeof lay, " layers = %d;", layers);
  snprintf(text, sizeof text, "%s\nmodel = { preset = \"llama3.1-8b\";%s };\nplan = { %s };\nrl = { %s };\n", system,
           lay, plan, rl);
  char *path = ts_write(dir, "rl.cfg", text);
  free(dir);
  return path;
}

void tr_load(struct rl_job *job, const char *path, const char *const *sets)
{
  int n = 0;
  while (sets && sets[n]) n++;
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = rl_job_load(job, path, sets, n, &d);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
}

void tr_close(double got, double want, double rel, const char *what)
{
  cr_assert(fabs(got - want) <= rel * fabs(want) + 1e-15, "%s: got %.12g, want %.12g (rel %g)", what, got, want, rel);
}
