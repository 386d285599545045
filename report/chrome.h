/*
 * chrome.h - write a recorded timeline (common/trace.h) as a Chrome trace: JSON that Perfetto
 * (ui.perfetto.dev) and chrome://tracing load. One complete ("X") event per interval, times in
 * microseconds; process and thread names from the trace's named tracks.
 */
#ifndef NPUSIM_REPORT_CHROME_H
#define NPUSIM_REPORT_CHROME_H

#include "common/strutil.h"
#include "common/trace.h"

/* Append the trace as a Chrome trace JSON document to out. Deterministic. */
void rpt_chrome_write(const struct npu_trace *t, struct npu_buf *out);

#endif
