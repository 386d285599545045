/*
 * columns.c - the column-table writer; see columns.h.
 */
#include "report/columns.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

int rpt_fmt_number(double v, char *buf, size_t n)
{
  return npu_fmt_double(v, buf, n);
}

static int width(const struct rpt_column *c)
{
  return c->count > 0 ? c->count : 1;
}

int rpt_columns_count(const struct rpt_column *cols)
{
  int n = 0;
  for (const struct rpt_column *c = cols; c->name; c++) n += width(c);
  return n;
}

/* "%s" in fmt replaced by part (fmt has at most one). */
static void subst(char *buf, size_t n, const char *fmt, const char *part)
{
  const char *p = strstr(fmt, "%s");
  if (!p || !part) {
    snprintf(buf, n, "%s", fmt);
    return;
  }
  snprintf(buf, n, "%.*s%s%s", (int)(p - fmt), fmt, part, p + 2);
}

const struct rpt_column *rpt_columns_at(const struct rpt_column *cols, int k, int *index, char *name, size_t nname,
                                        char *desc, size_t ndesc)
{
  for (const struct rpt_column *c = cols; c->name; c++) {
    if (k >= width(c)) {
      k -= width(c);
      continue;
    }
    *index = c->count > 0 ? k : 0;
    if (name) subst(name, nname, c->name, c->count > 0 ? c->index_name(k) : NULL);
    if (desc) subst(desc, ndesc, c->desc, c->count > 0 && c->index_desc ? c->index_desc(k) : NULL);
    return c;
  }
  return NULL;
}

int rpt_columns_find(const struct rpt_column *cols, const char *name)
{
  char nm[128];
  int idx, n = rpt_columns_count(cols);
  for (int k = 0; k < n; k++) {
    rpt_columns_at(cols, k, &idx, nm, sizeof nm, NULL, 0);
    if (!strcmp(nm, name)) return k;
  }
  return -1;
}

void rpt_columns_csv_header(const struct rpt_column *cols, struct npu_buf *out)
{
  char nm[128];
  int idx, n = rpt_columns_count(cols);
  for (int k = 0; k < n; k++) {
    rpt_columns_at(cols, k, &idx, nm, sizeof nm, NULL, 0);
    npu_buf_printf(out, "%s%s", k ? "," : "", nm);
  }
  npu_buf_puts(out, "\n");
}

void rpt_columns_cell(const struct rpt_column *cols, int k, const void *ctx, char *buf, size_t n)
{
  int i;
  const struct rpt_column *c = rpt_columns_at(cols, k, &i, NULL, 0, NULL, 0);
  NPU_ASSERT(c != NULL);
  switch (c->type) {
  case RPT_STRING: {
    const char *s = c->text(ctx, i);
    snprintf(buf, n, "%s", s ? s : "");
    break;
  }
  case RPT_INT: snprintf(buf, n, "%lld", c->integer(ctx, i)); break;
  case RPT_REAL: rpt_fmt_number(c->real(ctx, i), buf, n); break;
  }
}

void rpt_columns_csv_row(const struct rpt_column *cols, const void *ctx, struct npu_buf *out)
{
  char cell[2048];
  int n = rpt_columns_count(cols);
  for (int k = 0; k < n; k++) {
    rpt_columns_cell(cols, k, ctx, cell, sizeof cell);
    if (k) npu_buf_puts(out, ",");
    npu_csv_field(out, cell);
  }
  npu_buf_puts(out, "\n");
}

/* Expanded column k as a key and value. */
static void json_field(const struct rpt_column *cols, int k, const void *ctx, struct npu_json *j)
{
  char nm[128];
  int i;
  const struct rpt_column *c = rpt_columns_at(cols, k, &i, nm, sizeof nm, NULL, 0);
  NPU_ASSERT(c != NULL);
  npu_json_key(j, nm);
  switch (c->type) {
  case RPT_STRING: {
    const char *s = c->text(ctx, i);
    npu_json_string(j, s ? s : "");
    break;
  }
  case RPT_INT: npu_json_int(j, c->integer(ctx, i)); break;
  case RPT_REAL: npu_json_number(j, c->real(ctx, i)); break; /* npu_json_number formats as rpt_fmt_number */
  }
}

void rpt_columns_json(const struct rpt_column *cols, const void *ctx, struct npu_json *j)
{
  int n = rpt_columns_count(cols);
  for (int k = 0; k < n; k++) json_field(cols, k, ctx, j);
}

void rpt_columns_json_some(const struct rpt_column *cols, const void *ctx, const char *const *names, int n,
                           struct npu_json *j)
{
  for (int i = 0; i < n; i++) {
    int k = rpt_columns_find(cols, names[i]);
    NPU_ASSERT(k >= 0);
    json_field(cols, k, ctx, j);
  }
}

void rpt_columns_markdown(const struct rpt_column *cols, struct npu_buf *out)
{
  static const char *const types[] = {"string", "integer", "real"};
  char nm[128], desc[512];
  int i, n = rpt_columns_count(cols);
  npu_buf_puts(out, "| column | type | unit | meaning |\n|---|---|---|---|\n");
  for (int k = 0; k < n; k++) {
    const struct rpt_column *c = rpt_columns_at(cols, k, &i, nm, sizeof nm, desc, sizeof desc);
    npu_buf_printf(out, "| `%s` | %s | %s | %s |\n", nm, types[c->type], c->unit && c->unit[0] ? c->unit : "-", desc);
  }
}
