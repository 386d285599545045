/*
 * job.h - a training job's scenario: the loaded configuration, and the element types of the
 * step program built from it.
 *
 * A scenario file holds the system (chip, node, cluster sections, or a system preset), the
 * model, the parallel plan and run options. wl_job_load reads and checks it into a struct
 * wl_job, which nothing changes afterwards except the report view below. wl_program_create
 * (program.h) turns it into a step program: the kernels of each segment (expand.c), each costed
 * through the operator cost cache (cost.c; the chip model is the only source of compute time),
 * the MoE routing and expert costs, and per stage the schedule's steps. wl_replay (replay.h)
 * builds the program and simulates it on the cluster's SimGrid platform; the results
 * (struct wl_result, results.c) feed the summaries (summary.c).
 */
#ifndef NPUSIM_WORKLOADS_JOB_H
#define NPUSIM_WORKLOADS_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/progress.h"
#include "common/diag.h"
#include "common/trace.h"
#include "cores/kernel.h"
#include "interconnect/coll.h"
#include "ops/op.h"
#include "workloads/model.h"
#include "workloads/plan.h"
#include "workloads/routing.h"

/* Where a rank's step time goes. Compute categories first, then exposed communication; host,
 * interference and offload last (they came later: summary.csv keeps its older columns in place
 * and adds theirs at its end). */
#define WL_CAT_MAP(XX)                                                        \
  XX(GEMM, "gemm", "matrix multiplications (linear layers)")                  \
  XX(ATTN, "attention", "attention kernels")                                  \
  XX(VEC, "vector", "norms, activations, rotary embedding, loss, embedding")  \
  XX(OPTIM, "optimizer", "the optimizer step")                                \
  XX(TP, "tp_comm", "tensor-parallel collectives (on the compute stream)")    \
  XX(CP, "cp_comm", "context-parallel communication, exposed")                \
  XX(EP, "ep_comm", "expert-parallel all-to-all, exposed")                    \
  XX(DP, "dp_comm", "data-parallel gradient reduction and gathers, exposed")  \
  XX(PP, "pp_comm", "pipeline send/receive, exposed")                         \
  XX(BUBBLE, "bubble", "waiting for another pipeline stage")                  \
  XX(IDLE, "idle", "done before the slowest rank (imbalance)")              \
  XX(HOST, "host", "waiting for the host to dispatch kernels (host-bound)")      \
  XX(INTERFERE, "interfere", "compute slowed by overlapped TP, DP and EP communication (cores, HBM it takes)") \
  XX(OFFLOAD, "offload", "waiting for activations moving to or from host memory (plan.offload_layers)")

enum wl_cat {
#define WL__CAT_ENUM(e, name, desc) WL_CAT_##e,
  WL_CAT_MAP(WL__CAT_ENUM)
#undef WL__CAT_ENUM
  WL_CAT_COUNT
};
const char *wl_cat_name(enum wl_cat c);
const char *wl_cat_desc(enum wl_cat c);
bool wl_cat_is_compute(enum wl_cat c);

/* How pipeline sends and EP all-to-alls are simulated (run.network). */
enum wl_network {
  WL_NETWORK_FLOWS,  /* as flows on the platform, contending */
  WL_NETWORK_FORMULA /* in closed form, alone on their routes (very large jobs) */
};

/* Run options (the "run" section). */
struct wl_run {
  int fidelity;             /* kernels: enum core_fidelity (analytic default) */
  int coll_fidelity;        /* in-situ collectives: enum ic_fidelity (bulk default) */
  int network;              /* enum wl_network */
  int seed;                 /* for anything random (reported) */
  char cost_cache[256];     /* persistent kernel cost cache file; "" none */
  int trace_detail;         /* enum wl_trace_detail */
};

/* How much of a training step a trace holds (run.trace_detail). */
enum wl_trace_detail { WL_TRACE_AUTO, WL_TRACE_ALL };

/* A stretch of one rank's compute stream: a layer's forward, its backward, the head, ... */
struct wl_seg {
  double time_s;                  /* on the compute stream, TP collectives included */
  double cat_s[WL_CAT_COUNT];     /* how time_s splits */
  double flops;                   /* executed FLOPs (recomputation included) */
  double model_flops;             /* FLOPs the model needs (no recomputation) */
  int first_item, nitems;         /* its kernels and collectives, in order (program->items) */
  /* the host: every item is one dispatch of d (node.host.dispatch, or graph_dispatch); with
   * the host clock at h and the stream free at t when the segment starts, the stream ends at
   * max(t + time_s, h + host_lead_s), and the host at h + launches x d (the replay's stream_end) */
  double host_lead_s;             /* max over items j of (j x d + the device time of items j..n) */
  double hidden_s[WL_CAT_COUNT];  /* communication that ran beside the compute, by kind: TP under
                                     its GEMM (plan.tp_overlap), CP's ring under its attention */
  int launches;                   /* host dispatches: nitems, or what the builder set (optimizer) */
  double dp_loss;                 /* the share of its throughput it loses while a data-parallel
                                     collective runs beside it: 1 - time_s / (time_s with every
                                     kernel on the chip the collective leaves); 0: none */
};


/* Segments. A backward is split into BI (gradients of the inputs: what the previous stage
 * waits for) and W (weight gradients), as zero-bubble schedules need; a full backward is BI
 * then W. An MoE layer is cut where its expert all-to-alls happen: PRE (attention, router,
 * permute) | dispatch | experts | combine | POST (unpermute, shared experts); its backward
 * runs POST_BI | combine^T | experts | dispatch^T | PRE_BI, then W. A backward that recomputes
 * the MoE block first runs RC_F | dispatch | experts | combine before POST_BI (which then
 * starts with POST's recomputation). */
enum wl_seg_kind {
  WL_SEG_EMBED_F, WL_SEG_EMBED_B,
  WL_SEG_LAYER_F, WL_SEG_LAYER_BI, WL_SEG_LAYER_W,
  WL_SEG_MOE_PRE_F, WL_SEG_MOE_POST_F, WL_SEG_MOE_POST_BI, WL_SEG_MOE_PRE_BI, WL_SEG_MOE_W,
  WL_SEG_HEAD_F, WL_SEG_HEAD_BI, WL_SEG_HEAD_W,
  WL_SEG_MTP_F, WL_SEG_MTP_BI, WL_SEG_MTP_W, /* an MTP module's own work before its layer */
  WL_SEG_LAYER_BI_KEEP, WL_SEG_MOE_POST_BI_KEEP, /* the BI segments of a layer a partial full
                                                    recompute leaves out (plan.recompute_layers) */
  WL_SEG_MOE_RC_F, /* the recomputed front of an MoE layer whose backward reruns its experts (a full
                      recompute, or the module moe): PRE's forward (full) or its router, permute and
                      TP gather (moe), before the rerun's dispatch, experts and combine */
  WL_SEG_KINDS
};

/* The routed experts' compute on one rank for a number of received token copies (bucketed). */
struct wl_expert_cost {
  double tokens;                  /* token copies the bucket was costed for */
  double f_s, bi_s, w_s;          /* forward, input-gradient and weight-gradient time */
  double f_flops, bi_flops, w_flops;
  double act_rc_flops;            /* the activation rerun in BI (recompute module moe_act) */
};

/* How a TP collective overlaps the GEMM item `hide` (plan.tp_overlap; docs/TRAINING.md,
 * "Overlapped TP communication"): the GEMM in n chunks beside the collective's n steps. */
enum wl_ovl {
  WL_OVL_NONE, /* hide >= 0: alongside item hide, for free (only the excess counts: CP's ring) */
  WL_OVL_RING, /* all-gather feeding the GEMM: the local chunk first, then one peer's per step */
  WL_OVL_PIPE, /* reduce-scatter of the GEMM's output, chunk by chunk as the chunks finish */
  WL_OVL_BULK, /* beside an independent GEMM (the weight gradient), start to end */
  WL_OVL_FUSED /* one MC2 kernel does both (plan.mc2_comm_mode = "aiv"): `slowed` is its call */
};

/* One kernel or memoised collective of a segment. */
struct wl_item {
  uint8_t cat;        /* enum wl_cat */
  uint8_t ovl;        /* enum wl_ovl (collectives) */
  bool recompute;     /* done again for recomputation (counts in HFU, not MFU) */
  bool coll;          /* a collective (index into colls) rather than a kernel (kernels) */
  bool wgrad;         /* a weight-gradient GEMM (kernels) */
  bool accum;         /* the add of a weight gradient into the gradient buffer (kernels) */
  int index;
  int hide;           /* >= 0: this collective overlaps item `hide` (see enum wl_ovl) */
  int nchunks;        /* WL_OVL_RING, PIPE: steps of the overlap */
  int chunk;          /* WL_OVL_PIPE: the collective of one chunk (colls) */
  int slowed;         /* ovl: the partner GEMM as it runs beside the collective, or (WL_OVL_FUSED)
                         the fused MC2 kernel that runs both (kernels) */
};

/* A distinct kernel (a typed operator call) and its cost. */
struct wl_kernel {
  struct op_call call;  /* the operator and its arguments, checked when the expansion built them */
  int sys;              /* the chip it runs on: 0 the system's, else program->slow_sys[sys - 1]
                           (HBM bandwidth taken by an overlapped collective) */
  const char *op;       /* call.name (static); wl_kernel_label gives "op args" */
  char args[256];       /* op_call_args_text(call), kept for the JSON kernel list (summary.c) */
  double time_s, flops;
  char bottleneck[24];
  bool costed;
  int dp_twin;          /* > 0: kernels[dp_twin - 1] is this kernel as it runs while a data-parallel
                           collective occupies its cores and HBM (wl__dp_twins); 0: none */
};

/* A distinct collective on a TP-like group, costed alone on its links (memoised). */
struct wl_coll {
  enum ic_op op;
  double bytes;        /* nccl-tests convention */
  int dim;             /* enum wl_dim of the group, or WL_GROUP_ETP */
  double time_s;
  char algo[24];
};

struct wl_job {
  char path[512];                 /* scenario file as given */
  struct npu_cfg *cfg;
  struct arch_system sys;
  struct wl_model model;
  struct wl_plan plan;
  struct wl_run run;
  struct wl_routing_cfg routing;  /* MoE token routing (the "routing" section) */
  int devices, microbatches;
  const struct npu_progress *progress; /* told of kernels costed and slots replayed (may be NULL) */
};

/* Register the "run" section's table (target: struct wl_run), zeroing it first. */
void wl_run_register(struct npu_cfg *cfg, struct wl_run *run);

/* Set up job's loader with every table of a training scenario (system, model, plan, routing,
 * run) and nothing loaded; wl_job_load() starts with this. Release with wl_job_release(). */
void wl_job_init(struct wl_job *job, const char *path);

/*
 * Load and check a scenario: path, then overrides "KEY=VALUE" in order. Returns 0, or
 * NPU_ECONFIG / NPU_EIO with diag naming file:line and the key.
 */
int wl_job_load(struct wl_job *job, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag);
void wl_job_release(struct wl_job *job);

/* Whether the loaded scenario describes a training job (a model section). */
bool wl_job_is_training(const struct wl_job *job);

#endif
