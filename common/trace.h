/*
 * trace.h - a timeline of named intervals on tracks, as models record it. Plain data: the
 * Chrome trace writers (report/) turn it into a file Perfetto and chrome://tracing load.
 *
 * Events are kept in memory, or, with a sink, handed to it as they are added and not kept (a
 * trace streamed to disk: report/trace_file.h); track names are always kept. Nothing is ever
 * dropped: a trace is whole or the command that wanted it fails.
 */
#ifndef NPUSIM_COMMON_TRACE_H
#define NPUSIM_COMMON_TRACE_H

#include <stdbool.h>
#include <stddef.h>

struct npu_trace_event {
  double start_s, dur_s;
  int pid, tid;          /* track: process (e.g. a core) and thread (e.g. a pipe) */
  const char *name;      /* static string */
  char ph;               /* 0 or 'X': a slice; 'C': a counter of the process (value at start_s);
                            's' / 'f': a flow arrow's start / finish (id), bound to the slice of the
                            track at start_s */
  double value;
  unsigned long long id;
  const char *args;      /* a slice's arguments: a JSON object's text (interned), or NULL */
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
  /* if set, each event goes to sink(sink_ctx, event) instead of ev; streamed counts them */
  void (*sink)(void *ctx, const struct npu_trace_event *e);
  void *sink_ctx;
  size_t streamed;
  char **names;          /* interned event names (npu_trace_intern), a hash set */
  size_t nnames, names_cap;
};

void npu_trace_add(struct npu_trace *t, int pid, int tid, const char *name, double start_s,
                   double dur_s);
/* Name a track (pid, tid); tid -1 names the process. Later names replace earlier ones. */
/* npu_trace_add with the slice's arguments: args_json a JSON object's text ({"k": v, ...}),
 * kept as given (intern it, or give a static string). */
void npu_trace_add_args(struct npu_trace *t, int pid, int tid, const char *name, double start_s, double dur_s,
                        const char *args_json);
/* A counter track of process pid named name (with its unit) taking value from ts on. */
void npu_trace_counter(struct npu_trace *t, int pid, const char *name, double ts, double value);
/* An arrow from the slice of track (pid, tid) at ts (finish = false) to the slice of another
 * track at its ts (finish = true), both events carrying the same id. */
void npu_trace_flow(struct npu_trace *t, int pid, int tid, const char *name, double ts, unsigned long long id,
                    bool finish);
void npu_trace_name(struct npu_trace *t, int pid, int tid, const char *name);
/* A copy of name that lives as long as t, for event names built at run time ("F mb 3"); the
 * same text gives the same pointer. */
const char *npu_trace_intern(struct npu_trace *t, const char *name);
/* Events recorded so far, kept or streamed. */
size_t npu_trace_events(const struct npu_trace *t);
void npu_trace_release(struct npu_trace *t);

#endif
