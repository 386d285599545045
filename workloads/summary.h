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

void wl_summary_text(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);
void wl_summary_json(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);
/* The CSV header line and one row (each ends with a newline). */
void wl_summary_csv_header(struct npu_buf *out);
void wl_summary_csv_row(const struct wl_job *job, const struct wl_result *res, struct npu_buf *out);

#endif
