/*
 * isolate.c - a scenario of any kind run in a child process (workloads/isolate.h's wl_isolate),
 * its columns' numbers brought back; see scenario.h.
 */
#include "scenario/scenario.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/isolate.h"

struct isolated {
  const struct scn_kind *kind;
  const char *path;
  const char *const *sets;
  int nsets;
};

static void child(void *ctx, void *record)
{
  const struct isolated *c = ctx;
  struct scn_outcome *o = record;
  struct npu_diag diag;
  npu_diag_clear(&diag);
  struct scn_scenario *s = NULL;
  int rc = scn_load(&s, c->kind, c->path, c->sets, c->nsets, &diag);
  if (!rc) rc = scn_run(s, false, &diag);
  o->status = rc;
  if (rc) {
    npu_diag_format(&diag, o->message, sizeof o->message);
  } else {
    snprintf(o->kind, sizeof o->kind, "%s", s->kind->name);
    const struct rpt_column *cols = s->kind->columns();
    const void *row = s->kind->row(s);
    int n = rpt_columns_count(cols);
    o->ncolumns = n < SCN_OUTCOME_MAX_COLUMNS ? n : SCN_OUTCOME_MAX_COLUMNS;
    for (int k = 0; k < o->ncolumns; k++) {
      int i;
      const struct rpt_column *col = rpt_columns_at(cols, k, &i, NULL, 0, NULL, 0);
      o->value[k] = col->type == RPT_REAL  ? col->real(row, i)
                    : col->type == RPT_INT ? (double)col->integer(row, i)
                                           : NAN;
    }
  }
  scn_destroy(s);
}

int scn_run_isolated(const struct scn_kind *kind, const char *path, const char *const *sets, int nsets,
                     struct scn_outcome *out, struct npu_diag *diag)
{
  struct isolated c = {kind, path, sets, nsets};
  return wl_isolate(child, &c, out, sizeof *out, path, diag);
}

int scn_run_isolated_all(struct scn_isolated_run *runs, int n, int jobs, void (*done)(void *dctx, int index),
                         void *dctx, struct npu_diag *diag)
{
  struct isolated *c = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *c);
  struct wl_isolate_task *t = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *t);
  for (int i = 0; i < n; i++) {
    c[i] = (struct isolated){runs[i].kind, runs[i].path, runs[i].sets, runs[i].nsets};
    t[i] = (struct wl_isolate_task){child, &c[i], &runs[i].out, sizeof runs[i].out, runs[i].path};
  }
  int rc = wl_isolate_all(t, n, jobs, done, dctx, diag);
  free(t);
  free(c);
  return rc;
}

bool scn_outcome_number(const struct scn_outcome *o, const char *name, double *out)
{
  const struct scn_kind *kind = o->status ? NULL : scn_kind_find(o->kind);
  if (!kind) return false;
  int k = rpt_columns_find(kind->columns(), name);
  if (k < 0 || k >= o->ncolumns || isnan(o->value[k])) return false;
  *out = o->value[k];
  return true;
}
