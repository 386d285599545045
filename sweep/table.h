/*
 * table.h - a results CSV read back (npusim merge, report, plot): columns, rows as fields.
 */
#ifndef NPUSIM_SWEEP_TABLE_H
#define NPUSIM_SWEEP_TABLE_H

#include "common/diag.h"

struct sw_table {
  char path[1024];
  char *header;      /* the header line as written */
  char **cols;
  int ncols;
  char ***rows;      /* rows[i][c] */
  char **lines;      /* each row's line as written */
  int nrows;
  int status_col;    /* index of "status", -1 if none */
};

/* Read a CSV with a header; every row must have the header's field count. 0 or NPU_EIO/ECONFIG. */
int sw_table_read(const char *path, struct sw_table *t, struct npu_diag *diag);
void sw_table_free(struct sw_table *t);
/* A column by name: exact, or the name plus a unit suffix ("chip.hbm.bandwidth" finds
 * "chip.hbm.bandwidth_bytes_per_s"). -1 if none. */
int sw_table_col(const struct sw_table *t, const char *name);
/* The parameter columns: those between "point" and "status" ([*first, *end)). */
void sw_table_params(const struct sw_table *t, int *first, int *end);

#endif
