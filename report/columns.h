/*
 * columns.h - result columns declared once, as data: name (with its unit suffix), type, where
 * the value comes from, one line of meaning (gem5's ADD_STAT, SST's statistics). One table per
 * kind of result drives the CSV header and row, flat JSON fields, and the documentation of
 * results (`npusim columns`, docs/OUTPUTS.md), so the three cannot drift apart.
 *
 * Usage sketch (a kind's table, its context being whatever the accessors read):
 *
 *     static double step_s(const void *ctx, int i) { return ((const struct x *)ctx)->res.step_s; }
 *     static const struct rpt_column cols[] = {
 *         {"step_time_s", RPT_REAL, "s", "time of one training step", .real = step_s},
 *         ...
 *         {NULL}};
 *     rpt_columns_csv_header(cols, &buf);  rpt_columns_csv_row(cols, &x, &buf);
 *
 * Numbers are printed in one format everywhere: the shortest decimal text that reads back to
 * the same double (rpt_fmt_number), integers as integers, so outputs are byte-identical across
 * runs and lose nothing.
 */
#ifndef NPUSIM_REPORT_COLUMNS_H
#define NPUSIM_REPORT_COLUMNS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/json.h"
#include "common/strutil.h"

enum rpt_type {
  RPT_STRING, /* text, CSV-quoted when needed; a JSON string */
  RPT_INT,    /* an integer (counts, flags 0/1, ids) */
  RPT_REAL,   /* a double, shortest round-trip form */
};

/*
 * One column, or a family of `count` columns (count > 0) whose names are `name` with "%s"
 * replaced by index_name(i), e.g. "%s_s" over the time categories. Exactly one accessor is
 * set, the one of the type; i is the family index (0 for a single column).
 */
struct rpt_column {
  const char *name;                                       /* "step_time_s"; the unit is the suffix */
  enum rpt_type type;
  const char *unit;                                       /* "s", "bytes", "FLOP/s", "" (a number), "text" */
  const char *desc;                                       /* one line; a family's may contain "%s" (index_desc(i)) */
  double (*real)(const void *ctx, int i);                 /* RPT_REAL */
  long long (*integer)(const void *ctx, int i);           /* RPT_INT */
  const char *(*text)(const void *ctx, int i);            /* RPT_STRING; lives as long as ctx */
  int count;                                              /* 0: one column; > 0: a family */
  const char *(*index_name)(int i);                       /* a family's name part */
  const char *(*index_desc)(int i);                       /* a family's description part */
};

/* A kind's columns: a NULL-named terminator ends the array. */

/* Write v in the shortest decimal form that reads back to the same double ("0.1", "5.97e-05"
 * beyond the plain range; "0" for zero); returns what snprintf returns. */
int rpt_fmt_number(double v, char *buf, size_t n);

/* Number of columns a table expands to (families counted per member). */
int rpt_columns_count(const struct rpt_column *cols);
/* The expanded column k (0-based): its name and description into the buffers; the column
 * declaration it comes from (and *index its family index), or NULL past the end. */
const struct rpt_column *rpt_columns_at(const struct rpt_column *cols, int k, int *index, char *name, size_t nname,
                                        char *desc, size_t ndesc);
/* Index of the expanded column called name, or -1. */
int rpt_columns_find(const struct rpt_column *cols, const char *name);

/* The CSV header line and one row (each ends with a newline). */
void rpt_columns_csv_header(const struct rpt_column *cols, struct npu_buf *out);
void rpt_columns_csv_row(const struct rpt_column *cols, const void *ctx, struct npu_buf *out);
/* One cell's text (unquoted) of expanded column k. */
void rpt_columns_cell(const struct rpt_column *cols, int k, const void *ctx, char *buf, size_t n);
/* Every column as a key and value of the JSON object being written (inside object_begin/end). */
void rpt_columns_json(const struct rpt_column *cols, const void *ctx, struct npu_json *j);
/* The columns called names[0..n) only, in that order (a flat part of a nested JSON report);
 * each must exist (a bug otherwise). */
void rpt_columns_json_some(const struct rpt_column *cols, const void *ctx, const char *const *names, int n,
                           struct npu_json *j);
/* The columns as a Markdown table: | `name` | type | unit | meaning |. */
void rpt_columns_markdown(const struct rpt_column *cols, struct npu_buf *out);

#endif
