/*
 * replay.h - one training step replayed on the cluster's SimGrid platform.
 *
 * Ranks that do the same work at the same time are replayed once: in a dense model every rank
 * of a pipeline stage computes the same kernels on the same shapes, so one replay rank stands
 * for the tp x cp x dp ranks of its stage. What is simulated as flows on the platform, with
 * all the ranks that take part: pipeline sends (one flow per TP rank of the sending stage, to
 * its counterpart), data-parallel gradient reductions and parameter gathers (one collective
 * per DP group of the stage, all of them at once). Tensor-parallel collectives sit on the
 * compute stream; each distinct one is costed once on its group's links, alone (memoised).
 * See docs/TRAINING.md for what each shortcut gives up.
 */
#ifndef NPUSIM_WORKLOADS_REPLAY_H
#define NPUSIM_WORKLOADS_REPLAY_H

#include "common/trace.h"
#include "workloads/job.h"
#include "workloads/memory.h"

struct wl_program;

/* Per replay rank (pipeline stage) results. */
struct wl_stage_result {
  int stage, ep;                 /* pipeline stage and EP index of this replay rank */
  double end_s;                  /* when its step work ended (optimizer and gathers done) */
  double cat_s[WL_CAT_COUNT];    /* step time split; sums to the step time */
  double flops, model_flops;     /* per rank of the stage */
  double launches;               /* kernels and communication calls its host dispatched */
  /* communication of each kind (tp, cp, ep, dp, pp) that ran beside the compute instead of
   * being waited for: TP under its GEMM (plan.tp_overlap), CP's ring under its attention, an
   * F&B pair's all-to-alls (plan.ep_overlap, dualpipe), DP buckets and gathers (the span of
   * their union less the wait for them), pipeline transfers (less the wait for them) */
  double hidden_s[WL_CAT_COUNT];
  struct wl_mem mem;
};

struct wl_result {
  double step_s;
  double tokens_per_s;
  double model_flops;            /* whole step, all ranks (the model's formula) */
  double hw_flops;               /* model FLOPs + the recomputed kernels' FLOPs, all ranks */
  double peak_flops_per_s;       /* per device, dense, training dtype */
  double mfu, hfu;
  double cat_s[WL_CAT_COUNT];    /* of the slowest stage */
  double hidden_s[WL_CAT_COUNT]; /* of the slowest stage: communication hidden (wl_stage_result) */
  int slowest_stage;
  double bubble_fraction;        /* the busiest rank's (bubble + idle) / step: the least over the ranks */
  struct wl_stage_result *stages;  /* per replay rank: stage x EP index */
  int nstages, ep;
  /* MoE routing over the step: mean over layers and micro-batches of max/mean kept token
   * copies per expert and per EP rank, and the share of copies dropped by the capacity */
  double moe_max_mean_expert, moe_max_mean_rank, moe_dropped_fraction;
  struct wl_mem peak_mem;        /* largest rank */
  bool oom;                      /* peak above the chip's HBM */
  char bottleneck[256];
  /* replay statistics */
  size_t flows, collectives;
  double wall_s;
  size_t kernels_costed, kernel_cache_hits;
  double probe_s;                /* simulated time spent costing collectives before the step */
  /* the step program replayed (owned: wl_result_release destroys it), and its tables */
  struct wl_program *program;
  const struct wl_kernel *kernels; /* every distinct kernel with its cost (program's) */
  int nkernels;
  const struct wl_coll *colls;   /* every memoised collective with its probed time (program's) */
  int ncolls;
};

/*
 * Simulate step program p (program.h): probe its memoised collectives, then replay the step;
 * trace (may be NULL) gets a track per replay rank and stream. Takes p over (res->program, also
 * on failure). Starts the process's SimGrid engine. Returns 0 or an error with diag.
 */
int wl_replay_program(struct wl_program *p, struct npu_trace *trace, struct wl_result *res,
                      struct npu_diag *diag);

/*
 * Build job's step program (wl_program_create, before the engine) and simulate it
 * (wl_replay_program). The job is not changed, so it can be replayed again (in another
 * process: one engine per process). Returns 0 or an error with diag.
 */
int wl_replay(const struct wl_job *job, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag);

/* Free res's per-rank results and its program. */
void wl_result_release(struct wl_result *res);

#endif
