/* helpers.c - see helpers.h. */
#include "tests/rl/helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/support.h"

/* The scratch directories of this test process, removed when it exits. */
static char *dirs[64];
static int ndirs;

static void remove_dirs(void)
{
  for (int i = 0; i < ndirs; i++) {
    ts_rmtree(dirs[i]);
    free(dirs[i]);
  }
  ndirs = 0;
}

char *tr_scenario(const char *system, int layers, const char *plan, const char *rl)
{
  char *dir = ts_tmpdir();
  if (!ndirs) atexit(remove_dirs);
  cr_assert(ndirs < 64, "more scratch directories than tr_scenario keeps");
  dirs[ndirs++] = strdup(dir);
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
