/*
 * kineto.h - reading the events of a PyTorch profiler trace (Kineto's Chrome trace JSON:
 * torch.profiler's export_chrome_trace or tensorboard_trace_handler), so a measured step can be
 * set beside a simulated one (`npusim compare`).
 *
 * The file is one JSON object whose "traceEvents" array holds the events; a complete event
 * ("ph": "X") has a "cat" (cpu_op, cuda_runtime, kernel, gpu_memcpy, gpu_memset, ...), a
 * "name", a start "ts" and a duration "dur" in microseconds, and more ("args", ids) that are
 * passed over. The reader scans the text once and hands every complete event to a callback;
 * other keys and events are skipped whatever they hold. Malformed JSON is refused with its
 * file:line. gzip-compressed traces are not read: decompress them first.
 */
#ifndef NPUSIM_REPORT_KINETO_H
#define NPUSIM_REPORT_KINETO_H

#include <stdbool.h>

#include "common/diag.h"

struct kineto_event {
  const char *cat;  /* "" when the event has none */
  const char *name;
  double ts_us, dur_us;
};

/* Whether path looks like such a trace: a JSON object naming "traceEvents" near its start. */
bool kineto_sniff(const char *path);

/* Call each(ev, ctx) for every complete event of path, in file order. 0 or an error naming
 * path:line. The event's strings live until each returns. */
int kineto_read(const char *path, void (*each)(const struct kineto_event *ev, void *ctx), void *ctx,
                struct npu_diag *diag);

#endif
