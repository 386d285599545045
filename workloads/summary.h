/*
 * summary.h - the results of a training step as a readable report, summary.json and a CSV row.
 *
 * JSON keys and CSV columns are a contract scripts rely on: names carry their units
 * (step_time_s, memory_peak_bytes), fractions are fractions (mfu 0.41, not 41), and columns
 * keep their order; new ones are added at the end.
 */
#ifndef NPUSIM_WORKLOADS_SUMMARY_H
#define NPUSIM_WORKLOADS_SUMMARY_H

#include "common/strutil.h"
#include "workloads/replay.h"

struct rpt_column;

/* What a training step's columns read: the job and its result (both borrowed). */
struct wl_report {
  const struct wl_job *job;
  const struct wl_result *res;
};

/* The columns of summary.csv (report/columns.h), read from a struct wl_report; static. */
const struct rpt_column *wl_summary_columns(void);

void wl_summary_text(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);
void wl_summary_json(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);
/* One self-contained HTML page (report/html.h): the key figures, the step breakdown and the
 * memory per stage as charts, the slowest stage's operators (summary_html.c). */
void wl_summary_html(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);
/* The plan in a line: "TP8 (SP) CP1 PP4 DP2, 1f1b, ZeRO-1, ...". */
void wl_plan_text(const struct wl_plan *p, char *buf, size_t n);
/* The CSV header line and one row of wl_summary_columns (each ends with a newline). */
void wl_summary_csv_header(struct npu_buf *out);
void wl_summary_csv_row(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);

#endif
