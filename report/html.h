/*
 * html.h - a self-contained HTML report page: text, tables and horizontal stacked-bar charts
 * drawn as inline SVG, with the style in the page (no script, no font, no request to any
 * network: the file opens anywhere, offline). Writers of a kind's report (`npusim run --html`)
 * build a page from these pieces.
 *
 *     rpt_html_begin(&b, "Llama 2 7B on 16 x 910B");
 *     rpt_html_heading(&b, "Step breakdown per stage");
 *     rpt_html_bars(&b, &chart);                 // rows of stacked segments, a legend
 *     rpt_html_end(&b);
 *
 * Text given to these functions is escaped; numbers are formatted by the caller.
 */
#ifndef NPUSIM_REPORT_HTML_H
#define NPUSIM_REPORT_HTML_H

#include <stdbool.h>

#include "common/strutil.h"

/* Append s with &, <, >, " and ' escaped. */
void rpt_html_text(struct npu_buf *b, const char *s);

void rpt_html_begin(struct npu_buf *b, const char *title);
void rpt_html_end(struct npu_buf *b);
void rpt_html_heading(struct npu_buf *b, const char *text);
/* A paragraph of (escaped) text. */
void rpt_html_para(struct npu_buf *b, const char *text);
/* A two-column table of names and values (n pairs). */
void rpt_html_facts(struct npu_buf *b, const char *const *names, const char *const *values, int n);

/* A table: header cells, then rpt_html_row per row, then rpt_html_table_end. */
void rpt_html_table_begin(struct npu_buf *b, const char *const *head, int ncols);
void rpt_html_row(struct npu_buf *b, const char *const *cells, int ncols);
void rpt_html_table_end(struct npu_buf *b);

/*
 * Horizontal stacked bars: row r's segment s is values[r * nseries + s] (>= 0), drawn to the
 * scale of `full` (the largest row when full <= 0); each row labelled, its total printed with
 * `unit` after the bar; a legend of the series that have any value; series colours fixed by
 * index. A marker line at `mark` (> 0) on the same scale, labelled mark_label (e.g. the HBM
 * capacity).
 */
struct rpt_html_chart {
  const char *const *series;
  int nseries;
  const char *const *rows;
  int nrows;
  const double *values;
  double full;
  const char *unit;      /* appended to each total ("s", "GiB") */
  double scale;          /* totals printed as value x scale */
  double mark;
  const char *mark_label;
};
void rpt_html_bars(struct npu_buf *b, const struct rpt_html_chart *c);

/* Preformatted text (a command's text report as it prints it). */
void rpt_html_pre(struct npu_buf *b, const char *text);

/*
 * A scatter plot of n points (x[i], y[i]) with axes labelled xlabel and ylabel (with their
 * units), the points where mark[i] is true drawn larger in colour and joined in x order (a
 * Pareto front), the others grey; each point's title is label[i] when labels is not NULL.
 */
struct rpt_html_scatter {
  const double *x, *y;
  const bool *mark;
  const char *const *labels;
  int n;
  const char *xlabel, *ylabel;
};
void rpt_html_scatter(struct npu_buf *b, const struct rpt_html_scatter *s);

#endif
