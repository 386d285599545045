/* trace.c - recording timeline intervals; see trace.h. */
#include "common/trace.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"

static void push(struct npu_trace *t, const struct npu_trace_event *e)
{
  if (t->sink) {
    t->sink(t->sink_ctx, e);
    t->streamed++;
    return;
  }
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 1024;
    t->ev = npu_xrealloc(t->ev, t->cap * sizeof *t->ev);
  }
  t->ev[t->n++] = *e;
}

void npu_trace_add(struct npu_trace *t, int pid, int tid, const char *name, double start_s,
                   double dur_s)
{
  push(t, &(struct npu_trace_event){start_s, dur_s, pid, tid, name, 'X', 0, 0, NULL});
}

void npu_trace_add_args(struct npu_trace *t, int pid, int tid, const char *name, double start_s, double dur_s,
                        const char *args_json)
{
  push(t, &(struct npu_trace_event){start_s, dur_s, pid, tid, name, 'X', 0, 0, args_json});
}

void npu_trace_counter(struct npu_trace *t, int pid, const char *name, double ts, double value)
{
  push(t, &(struct npu_trace_event){ts, 0, pid, 0, name, 'C', value, 0, NULL});
}

void npu_trace_flow(struct npu_trace *t, int pid, int tid, const char *name, double ts, unsigned long long id,
                    bool finish)
{
  push(t, &(struct npu_trace_event){ts, 0, pid, tid, name, finish ? 'f' : 's', 0, id, NULL});
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

static uint64_t fnv(const char *s)
{
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

const char *npu_trace_intern(struct npu_trace *t, const char *name)
{
  if (2 * (t->nnames + 1) > t->names_cap) { /* grow: at most half full */
    size_t cap = t->names_cap ? 2 * t->names_cap : 64;
    char **v = npu_xcalloc(cap, sizeof *v);
    for (size_t i = 0; i < t->names_cap; i++) {
      if (!t->names[i]) continue;
      size_t k = fnv(t->names[i]) & (cap - 1);
      while (v[k]) k = (k + 1) & (cap - 1);
      v[k] = t->names[i];
    }
    free(t->names);
    t->names = v;
    t->names_cap = cap;
  }
  size_t k = fnv(name) & (t->names_cap - 1);
  for (; t->names[k]; k = (k + 1) & (t->names_cap - 1))
    if (!strcmp(t->names[k], name)) return t->names[k];
  t->names[k] = npu_xstrdup(name);
  t->nnames++;
  return t->names[k];
}

void npu_trace_release(struct npu_trace *t)
{
  for (size_t i = 0; i < t->names_cap; i++) free(t->names[i]);
  free(t->names);
  free(t->ev);
  free(t->tracks);
  *t = (struct npu_trace){0};
}
