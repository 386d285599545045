/*
 * trace.h - a timeline of named intervals on tracks, as models record it. Plain data: the
 * Chrome trace writer (report/) turns it into a file Perfetto and chrome://tracing load.
 */
#ifndef NPUSIM_COMMON_TRACE_H
#define NPUSIM_COMMON_TRACE_H

#include <stddef.h>

struct npu_trace_event {
  double start_s, dur_s;
  int pid, tid;          /* track: process (e.g. a core) and thread (e.g. a pipe) */
  const char *name;      /* static string */
};

struct npu_trace_track {
  int pid, tid;
  char name[64];
};

struct npu_trace {
  struct npu_trace_event *ev;
  size_t n, cap;
  struct npu_trace_track *tracks;
  size_t ntracks, tracks_cap;
  size_t limit;          /* stop recording after this many events (0: no limit) */
  size_t dropped;
};

void npu_trace_add(struct npu_trace *t, int pid, int tid, const char *name, double start_s,
                   double dur_s);
/* Name a track (pid, tid); tid -1 names the process. Later names replace earlier ones. */
void npu_trace_name(struct npu_trace *t, int pid, int tid, const char *name);
void npu_trace_release(struct npu_trace *t);

#endif
