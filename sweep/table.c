/*
 * table.c - results CSV files read back; see table.h.
 */
#include "sweep/table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sweep/sweep.h"

int sw_table_read(const char *path, struct sw_table *t, struct npu_diag *diag)
{
  memset(t, 0, sizeof *t);
  t->status_col = -1;
  snprintf(t->path, sizeof t->path, "%s", path);
  FILE *f = fopen(path, "r");
  /* an input the user named that cannot be read is bad input (exit 2), as for `run` */
  if (!f) return npu_diag_set(diag, path, 0, NULL, "cannot read: %s", strerror(errno)), NPU_EINVAL;
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int lineno = 0, rc = 0;
  while ((n = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    if (!t->header) {
      t->header = npu_xstrdup(line);
      t->ncols = sw_csv_split(line, &t->cols);
      for (int c = 0; c < t->ncols; c++)
        if (!strcmp(t->cols[c], "status")) t->status_col = c;
      continue;
    }
    if (!n) continue;
    char **fl;
    int k = sw_csv_split(line, &fl);
    if (k != t->ncols) {
      sw_csv_free(fl, k);
      rc = (npu_diag_set(diag, path, lineno, NULL, "%d fields where the header has %d", k, t->ncols), NPU_ECONFIG);
      break;
    }
    t->rows = npu_xrealloc(t->rows, (size_t)(t->nrows + 1) * sizeof *t->rows);
    t->lines = npu_xrealloc(t->lines, (size_t)(t->nrows + 1) * sizeof *t->lines);
    t->rows[t->nrows] = fl;
    t->lines[t->nrows++] = npu_xstrdup(line);
  }
  free(line);
  fclose(f);
  if (!rc && !t->header) rc = (npu_diag_set(diag, path, 0, NULL, "empty file: no CSV header"), NPU_ECONFIG);
  if (rc) sw_table_free(t);
  return rc;
}

void sw_table_free(struct sw_table *t)
{
  for (int i = 0; i < t->nrows; i++) {
    sw_csv_free(t->rows[i], t->ncols);
    free(t->lines[i]);
  }
  free(t->rows);
  free(t->lines);
  if (t->cols) sw_csv_free(t->cols, t->ncols);
  free(t->header);
  memset(t, 0, sizeof *t);
  t->status_col = -1;
}

int sw_table_col(const struct sw_table *t, const char *name)
{
  for (int c = 0; c < t->ncols; c++)
    if (!strcmp(t->cols[c], name)) return c;
  static const char *const sfx[] = {"_bytes_per_s", "_hz", "_s", "_bytes", "_flops_per_s", NULL};
  size_t n = strlen(name);
  for (int c = 0; c < t->ncols; c++)
    if (!strncmp(t->cols[c], name, n))
      for (int k = 0; sfx[k]; k++)
        if (!strcmp(t->cols[c] + n, sfx[k])) return c;
  return -1;
}

void sw_table_params(const struct sw_table *t, int *first, int *end)
{
  *first = t->ncols > 0 && !strcmp(t->cols[0], "point") ? 1 : 0;
  *end = t->status_col >= 0 ? t->status_col : *first;
}
