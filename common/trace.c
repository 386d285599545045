/* trace.c - recording timeline intervals; see trace.h. */
#include "common/trace.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/strutil.h"

void npu_trace_add(struct npu_trace *t, int pid, int tid, const char *name, double start_s,
                   double dur_s)
{
  if (t->sink) {
    struct npu_trace_event e = {start_s, dur_s, pid, tid, name};
    t->sink(t->sink_ctx, &e);
    t->streamed++;
    return;
  }
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 1024;
    t->ev = npu_xrealloc(t->ev, t->cap * sizeof *t->ev);
  }
  t->ev[t->n++] = (struct npu_trace_event){start_s, dur_s, pid, tid, name};
}

void npu_trace_name(struct npu_trace *t, int pid, int tid, const char *name)
{
  for (size_t i = 0; i < t->ntracks; i++) {
    if (t->tracks[i].pid == pid && t->tracks[i].tid == tid) {
      npu_strlcpy(t->tracks[i].name, name, sizeof t->tracks[i].name);
      return;
    }
  }
  if (t->ntracks == t->tracks_cap) {
    t->tracks_cap = t->tracks_cap ? 2 * t->tracks_cap : 64;
    t->tracks = npu_xrealloc(t->tracks, t->tracks_cap * sizeof *t->tracks);
  }
  struct npu_trace_track *k = &t->tracks[t->ntracks++];
  k->pid = pid;
  k->tid = tid;
  npu_strlcpy(k->name, name, sizeof k->name);
}

size_t npu_trace_events(const struct npu_trace *t)
{
  return t->n + t->streamed;
}

void npu_trace_release(struct npu_trace *t)
{
  free(t->ev);
  free(t->tracks);
  *t = (struct npu_trace){0};
}
