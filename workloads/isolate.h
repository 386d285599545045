/*
 * isolate.h - run a scenario in a child process and bring back its headline results.
 *
 * SimGrid allows one engine per process (design decision 1), so anything that runs several
 * scenarios (`npusim validate`, sweeps) runs each in a fork()ed child. The child loads and
 * replays the scenario and writes a fixed-size record into a pipe; a child that crashes or
 * writes nothing is reported as such, never as a result.
 */
#ifndef NPUSIM_WORKLOADS_ISOLATE_H
#define NPUSIM_WORKLOADS_ISOLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/diag.h"
#include "workloads/job.h"

struct wl_outcome {
  int status;                 /* 0 ok, else the npu_err of the failure */
  char message[512];          /* the error, formatted (status != 0) */
  double step_time_s, tokens_per_s, tokens_per_s_per_device, mfu, hfu, bubble_fraction;
  double memory_peak_bytes;
  double memory_weights_optimizer_bytes; /* of stage 1 (transformer layers only), or 0 */
  double memory_activations_bytes;       /* of stage 0 */
  double wall_s;
  int devices;
  bool oom;
  char bottleneck[256];
  double cat_s[WL_CAT_COUNT];  /* the slowest stage's breakdown */
  double hidden_s[WL_CAT_COUNT]; /* the slowest stage's communication hidden, by kind */
};

/*
 * Run fn(ctx, record) in a fork()ed child and bring its record (size bytes, plain data, no
 * pointers) back: record is zeroed, the child fills its copy, the parent reads it. Returns 0
 * when the child reported, NPU_EINTERNAL with diag (naming path) when it died or wrote nothing.
 * The one place npusim forks to keep one SimGrid engine per process (the scenario layer's
 * isolated runs and wl_run_isolated use it).
 */
int wl_isolate(void (*fn)(void *ctx, void *record), void *ctx, void *record, size_t size, const char *path,
               struct npu_diag *diag);

/* One piece of work for wl_isolate_all: fn(ctx, record) in a child, as for wl_isolate. */
struct wl_isolate_task {
  void (*fn)(void *ctx, void *record);
  void *ctx;
  void *record;
  size_t size;
  const char *path;           /* named in errors */
};

/*
 * Run the n tasks in children, up to jobs at a time (jobs < 1 means 1), each record brought
 * back as by wl_isolate; done(dctx, i), if not NULL, is called in the parent as task i's record
 * arrives (in the order they finish). 0, or the first failure (NPU_EINTERNAL with diag); the children still
 * running then are waited for and their records dropped.
 */
int wl_isolate_all(struct wl_isolate_task *t, int n, int jobs, void (*done)(void *dctx, int index), void *dctx,
                   struct npu_diag *diag);

/* Load path with overrides sets[0..n) and replay it in a child; fills *out (status included).
 * Returns 0 when the child reported (whatever its status), NPU_EINTERNAL when it did not. */
int wl_run_isolated(const char *path, const char *const *sets, int n, struct wl_outcome *out,
                    struct npu_diag *diag);

#endif
