/*
 * chrome.h - a recorded timeline (common/trace.h) as a Chrome trace: JSON that Perfetto
 * (ui.perfetto.dev) and chrome://tracing load. One complete ("X") event per interval, times in
 * microseconds with six decimals (picoseconds: instruction traces need below a nanosecond);
 * process and thread names as metadata ("M") events from the trace's named tracks.
 *
 * Compact: no indentation, one event per line, so a multi-million-event trace stays as small
 * as the format allows and tools that read line by line (grep, head) still work.
 */
#ifndef NPUSIM_REPORT_CHROME_H
#define NPUSIM_REPORT_CHROME_H

#include <stdint.h>

#include "common/strutil.h"
#include "common/trace.h"

/* The opening and the closing of the document around its events. */
#define RPT_CHROME_HEAD "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"
#define RPT_CHROME_TAIL "\n]}\n"

/* Append seconds as microseconds with six decimals ("12.345678"). */
void rpt_chrome_us(struct npu_buf *b, double seconds);
/* Append one event object (no separator). */
void rpt_chrome_event(struct npu_buf *b, const struct npu_trace_event *e);
/* Append one track-name metadata object (no separator). */
void rpt_chrome_track(struct npu_buf *b, const struct npu_trace_track *k);

/* Append the whole kept trace as a Chrome trace JSON document to out. Deterministic. */
void rpt_chrome_write(const struct npu_trace *t, struct npu_buf *out);

#endif
