/*
 * trace_file.h - a Chrome trace (report/chrome.h) written to disk while the simulation runs,
 * never held whole in memory and never cut: an instruction trace of a FlashAttention backward
 * (tens of millions of events) streams through a 1 MiB buffer.
 *
 * The file is written as PATH.partial<pid> and renamed to PATH by rpt_trace_file_close, so a
 * run that fails leaves no trace, or an earlier one, at PATH. A PATH ending in ".gz" is written
 * gzip-compressed (zlib; `zcat`, Perfetto and chrome://tracing read it). A write that fails
 * (a full disk) fails the close, with the path and the reason.
 *
 *   struct rpt_trace_file *f;
 *   if (rpt_trace_file_open(&f, path, "--trace", diag)) return ...;   // before the run
 *   rpt_trace_file_attach(f, &trace);                                // events go to f
 *   rc = simulate(&trace);
 *   rc = rc ? (rpt_trace_file_abort(f), rc) : rpt_trace_file_close(f, &trace, diag);
 */
#ifndef NPUSIM_REPORT_TRACE_FILE_H
#define NPUSIM_REPORT_TRACE_FILE_H

#include <stdint.h>

#include "common/diag.h"
#include "common/strutil.h"
#include "common/trace.h"

struct rpt_trace_file;

/* Create the partial file (gzip when path ends in ".gz") and write the document's head.
 * key names the option in messages. NPU_EIO, diag naming path, when it cannot be created. */
int rpt_trace_file_open(struct rpt_trace_file **out, const char *path, const char *key, struct npu_diag *diag);
/* Make t stream its events into f (t's sink). */
void rpt_trace_file_attach(struct rpt_trace_file *f, struct npu_trace *t);
/* Append one event, or one event object already formatted (JSON, no separator). */
void rpt_trace_file_event(struct rpt_trace_file *f, const struct npu_trace_event *e);
void rpt_trace_file_json(struct rpt_trace_file *f, const char *obj, size_t n);
/* Events written so far. */
uint64_t rpt_trace_file_count(const struct rpt_trace_file *f);
/* Write the track names of tracks (may be NULL), the tail, and rename into place; frees f. */
int rpt_trace_file_close(struct rpt_trace_file *f, const struct npu_trace *tracks, struct npu_diag *diag);
/* Remove the partial file; frees f. NULL is allowed. */
void rpt_trace_file_abort(struct rpt_trace_file *f);

#endif
