/*
 * isolate.c - a scenario of any kind run in a child process (workloads/isolate.h's wl_isolate),
 * its columns' numbers brought back; see scenario.h.
 */
#include "scenario/scenario.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "workloads/isolate.h"

struct isolated {
  const struct scn_kind *kind;
  const char *path;
  const char *const *sets;
  int nsets;
  const char *csv_path; /* NULL, or where to write summary.csv */
};

/* Write the run's summary.csv to path, whole (a temporary file renamed); 0 or NPU_EIO. */
static int write_csv(const struct scn_scenario *s, const char *path, struct npu_diag *diag)
{
  struct npu_buf csv = {0};
  scn_csv(s, &csv);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fwrite(csv.data, 1, csv.len, f) == csv.len;
  if (f && fclose(f)) ok = false;
  if (ok && rename(tmp, path)) ok = false;
  npu_buf_release(&csv);
  if (ok) return 0;
  remove(tmp);
  return npu_diag_set(diag, path, 0, NULL, "cannot write the summary: %s", strerror(errno)), NPU_EIO;
}

static void child(void *ctx, void *record)
{
  const struct isolated *c = ctx;
  struct scn_outcome *o = record;
  struct npu_diag diag;
  npu_diag_clear(&diag);
  struct scn_scenario *s = NULL;
  int rc = scn_load(&s, c->kind, c->path, c->sets, c->nsets, &diag);
  if (!rc) rc = scn_run(s, false, &diag);
  if (!rc && c->csv_path) rc = write_csv(s, c->csv_path, &diag);
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
  struct isolated c = {kind, path, sets, nsets, NULL};
  return wl_isolate(child, &c, out, sizeof *out, path, diag);
}

int scn_run_isolated_all(struct scn_isolated_run *runs, int n, int jobs, void (*done)(void *dctx, int index),
                         void *dctx, struct npu_diag *diag)
{
  struct isolated *c = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *c);
  struct wl_isolate_task *t = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *t);
  for (int i = 0; i < n; i++) {
    c[i] = (struct isolated){runs[i].kind, runs[i].path, runs[i].sets, runs[i].nsets, runs[i].csv_path};
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
