/*
 * program.h - the step program of a training job: everything one optimizer step does, per
 * replay rank, built and costed before the SimGrid engine starts.
 *
 * A scenario (struct wl_job, read-only) is turned into a program by wl_program_create: the
 * kernels and memoised TP/CP collectives of every segment (expand.c), each kernel costed
 * through the operator cost cache (the chip model is the only source of compute time), the
 * MoE routing of every (layer, micro-batch) drawn (seeded: routing.c) and the routed experts of
 * every (layer, micro-batch, EP rank) costed from their token counts, and per pipeline stage the
 * schedule's slots with their steps. The replay (replay.h) receives the program as data, the way
 * ASTRA-sim receives a Chakra graph, and only simulates it: it never costs a kernel, so the
 * event-fidelity cost model (which forks a child per kernel) never runs inside the engine.
 *
 * The memoised collectives are the one part the program leaves open: they are costed on the
 * cluster's platform, alone, by the replay's probe phase (wl_program_set_coll_time), before the
 * step's clock starts; wl_program_sum_segments then closes each segment's time.
 *
 * Usage:
 *   struct wl_program *p;
 *   int rc = wl_program_create(&p, &job, diag);     (expansion, kernel and expert costs)
 *   rc = wl_replay_program(p, trace, &res, diag);    (probe, then the step; res->program = p)
 *   wl_result_release(&res);                          (destroys p)
 */
#ifndef NPUSIM_WORKLOADS_PROGRAM_H
#define NPUSIM_WORKLOADS_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/diag.h"
#include "workloads/job.h"
#include "workloads/routing.h"
#include "workloads/schedule.h"

/* What a step of a slot does. One enum, one union member per kind (never a field whose
 * meaning depends on the kind). */
enum wl_step_kind {
  WL_STEP_SEG,     /* the compute stream runs a segment (its kernels and TP/CP collectives) */
  WL_STEP_EXPERTS, /* the compute stream runs this rank's routed experts for the token copies it
                      received in (layer, micro-batch): a pass of program->expert_s */
  WL_STEP_A2A,     /* join the EP all-to-all of (layer, micro-batch, which) and wait for it now
                      or, inside an F&B pair, at the WL_STEP_A2A_WAIT of the same which */
  WL_STEP_A2A_WAIT,/* inside an F&B pair: wait for the all-to-all `which` posted before (the
                      compute beside it is charged what the collective took from it) */
  WL_STEP_BUCKET,  /* post gradient buckets (dense over DP x CP, experts over expert DP) */
  WL_STEP_GATHER,  /* ZeRO-3: the all-gather of a piece's parameters (posted by the piece before,
                      or now for a slot's first piece), post the next piece's, wait for this one */
  WL_STEP_OFFLOAD, /* activation offload, after a layer's forward: wait for the copy to host memory
                      in flight (the previous layer's), then post this layer's (bytes > 0) */
  WL_STEP_RELOAD,  /* activation offload, before a layer's backward: wait for its copy back (posted
                      by the layer before it in the backward), then post the next layer's */
};

/* The passes of a rank's routed experts (program->expert_s). */
enum wl_expert_pass { WL_EXPERT_F, WL_EXPERT_BI, WL_EXPERT_W, WL_EXPERT_PASSES };
/* The FLOPs recomputation adds to a rank's routed experts (program->expert_rc_flops): a rerun
 * of their forward (a full recompute, the module moe), the activation rerun in BI (moe_act). */
enum wl_expert_rc { WL_EXPERT_RC_RERUN, WL_EXPERT_RC_ACT, WL_EXPERT_RC_KINDS };

/* One step of a slot. The micro-batch is the slot's (half: which slot of an F&B pair). */
struct wl_step {
  uint8_t kind;  /* enum wl_step_kind */
  uint8_t cat;   /* enum wl_cat: where waiting in this step counts (compute: by its segment) */
  uint8_t half;  /* 0, or 1: the step belongs to the second slot of an F&B pair */
  union {
    struct {
      const struct wl_seg *seg; /* costed segment of the program (nitems > 0) */
    } seg;                      /* WL_STEP_SEG */
    struct {
      int layer;                /* MoE layer */
      uint8_t pass;             /* enum wl_expert_pass */
      bool rerun;               /* WL_EXPERT_F rerun by the backward's recomputation */
    } experts;                  /* WL_STEP_EXPERTS */
    struct {
      int layer;                /* MoE layer */
      uint8_t which;            /* enum wl_a2a_which */
      bool defer;               /* in an F&B pair: waited for by a later WL_STEP_A2A_WAIT */
    } a2a;                      /* WL_STEP_A2A */
    struct {
      uint8_t which;            /* the deferred all-to-all's which (one in flight per which) */
    } a2a_wait;                 /* WL_STEP_A2A_WAIT */
    struct {
      double params;            /* dense parameters in the bucket (fp32 gradients) */
      double eparams;           /* routed-expert parameters in the bucket */
    } bucket;                   /* WL_STEP_BUCKET */
    struct {
      double params;            /* parameters of the piece (bf16), experts over their group */
      int piece;                /* position of the piece in its slot: 0 posts its own gather */
      bool next;                /* a next piece follows in the slot (its gather is posted now) */
    } gather;                   /* WL_STEP_GATHER */
    struct {
      double bytes;             /* the layer's activations to copy out (0: only wait) */
    } offload;                  /* WL_STEP_OFFLOAD */
    struct {
      bool wait;                /* this layer's copy back was posted: wait for it */
      double next;              /* the next layer's activations to copy back now (0: none) */
    } reload;                   /* WL_STEP_RELOAD */
  } u;
};

/* A run of steps: what a slot (or an F&B pair of slots) does, shared by every slot
 * with the same chunk, phase and pairing (the micro-batch is the slot's). */
struct wl_step_list {
  int first, n;  /* steps first .. first + n - 1 of the stage's steps */
};

/* One slot of a stage's schedule and the communications around it. */
struct wl_prog_slot {
  struct wl_slot slot;  /* phase, chunk, micro-batch, F&B pairing (schedule.h) */
  int list;             /* its steps (with its partner's, if it opens a pair): stage's lists[] */
  int recv, send;       /* pipeline transfer it waits for first / posts when done: index of
                           wl_program_p2p_index (times EP, plus EP index), or -1 */
};

/* Per pipeline stage: the schedule and the steps its slots run (the same for every EP index). */
struct wl_prog_stage {
  struct wl_prog_slot *slots;
  size_t nslots;
  struct wl_step *steps;        /* every distinct slot's steps, back to back */
  int nsteps, cap_steps;
  struct wl_step_list *lists;
  int nlists, cap_lists;
};

struct wl_program {
  const struct wl_job *job;     /* the scenario (borrowed, read-only; outlives the program) */
  struct wl_model model;        /* job's model and plan, copied: what expansion reads */
  struct wl_plan plan;
  int pp, mb;                   /* pipeline stages, micro-batches per step */
  int E;                        /* EP ranks per stage (1: dense, or ep 1) */
  int edp;                      /* expert data-parallel size: tp cp dp / (etp E) (dense: dp cp) */
  int nranks;                   /* replay ranks: pp x E, index stage x E + EP index */
  int mchunks;                  /* model chunks: pp x vpp */
  /* expansion (expand.c) and its costs */
  struct wl_item *items;
  int nitems, cap_items;
  struct wl_kernel *kernels;    /* every distinct kernel, costed (the experts' included) */
  int nkernels, cap_kernels;
  struct wl_coll *colls;        /* memoised TP/CP collectives: time_s after the probe */
  int ncolls, cap_colls;
  struct arch_system *slow_sys; /* [nslow_sys] the system with HBM bandwidth taken by overlapped
                                   TP collectives (plan.tp_overlap): what wl_kernel.sys names */
  int nslow_sys;
  int dp_sys;                   /* > 0: slow_sys[dp_sys - 1] is the chip a data-parallel collective
                                   leaves to compute beside it (node.ccl cores, its HBM traffic) */
  double dp_loss;               /* the step's compute-weighted dp_loss (for the routed experts) */
  /* [k]: the segment of kind k; [WL_SEG_KINDS + k]: its variant in the layers of a model's second
   * kind (wl_model_layer_is_variant: local among global, linear among softmax attention) */
  struct wl_seg seg[2 * WL_SEG_KINDS];
  int seg_off;                  /* expansion: where seg_begin and seg_end write (0, WL_SEG_KINDS) */
  struct wl_expert_cost *experts; /* costed expert buckets (see wl__expert_cost) */
  int nexperts, cap_experts;
  struct wl_seg *optim;         /* per stage: the optimizer step */
  double *stage_params;         /* per stage: non-expert parameters one rank holds (TP-sharded,
                                   before ZeRO), replicated over dp x cp */
  double *stage_eparams;        /* per stage: routed-expert parameters one rank holds (experts /
                                   ep), replicated over the expert data-parallel group */
  double layer_params;          /* one layer's parameters on one rank (TP-sharded) */
  /* MoE: routing and the experts' times, every (layer, micro-batch, EP rank) */
  struct wl_route *routes;      /* [layer x mb], drawn for MoE layers (NULL for dense models) */
  double *expert_s;             /* [((layer x mb + m) x E + e) x WL_EXPERT_PASSES] seconds */
  double *expert_rc_flops;      /* [((layer x mb + m) x E + e) x WL_EXPERT_RC_KINDS] FLOPs per rank */
  double tokens_per_rank;       /* token copies one EP rank routes per micro-batch */
  /* the schedule */
  struct wl_prog_stage *stages; /* [pp] */
  /* cost cache statistics of building it */
  size_t kernels_costed, kernel_cache_hits;
};

/*
 * Build and cost job's step program (*out, owned by the caller: wl_program_destroy). The
 * kernels go through the operator cost cache (job->run.cost_cache: loaded and saved) at the
 * run's fidelity; nothing here starts the SimGrid engine. Returns 0, or an error with diag
 * naming the kernel or key.
 */
int wl_program_create(struct wl_program **out, const struct wl_job *job, struct npu_diag *diag);
void wl_program_destroy(struct wl_program *p);
/* The expansion alone (kernels, items, segments; nothing costed, no stages), for looking at
 * the operator calls a scenario builds. Destroy with wl_program_destroy. */
struct wl_program *wl_program_expand(const struct wl_job *job);

/* The routing of MoE layer `layer` and micro-batch m (owned by p), or NULL for a dense layer. */
const struct wl_route *wl_program_route(const struct wl_program *p, int layer, int m);

/* Seconds of EP rank e's routed experts in pass `pass` of (layer, micro-batch m). */
double wl_program_expert_s(const struct wl_program *p, int layer, int m, int e, enum wl_expert_pass pass);
/* FLOPs (per physical rank) that recomputation `k` adds to EP rank e's routed experts in (layer, m). */
double wl_program_expert_rc_flops(const struct wl_program *p, int layer, int m, int e, enum wl_expert_rc k);

/* The pipeline transfer of direction dir (0 forward, 1 backward) across chunk boundary b for
 * micro-batch m, as an index 0 .. 2 x (mchunks - 1) x mb - 1 (per EP index). */
int wl_program_p2p_index(const struct wl_program *p, int dir, int b, int m);

/* Probe results: collective c takes time_s seconds alone on its group (algo: its algorithm). */
void wl_program_set_coll_time(struct wl_program *p, int c, double time_s, const char *algo);

/* Sum each segment's items into its time and breakdown (after the collectives' probe). */
void wl_program_sum_segments(struct wl_program *p);

#endif
