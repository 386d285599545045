/*
 * plan.h - the parallel plan of a training job (the "plan" section of a scenario) and the
 * mapping of ranks to parallel coordinates.
 *
 * World = tp x cp x pp x dp devices; ep (experts) subdivides dp x cp as in Megatron. The rank
 * order is a string of dimension names from fastest- to slowest-varying, Megatron's
 * "tp-cp-ep-dp-pp" by default: with it consecutive ranks form a TP group (one server), and
 * pipeline stages are the slowest dimension.
 */
#ifndef NPUSIM_WORKLOADS_PLAN_H
#define NPUSIM_WORKLOADS_PLAN_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/dtype.h"
#include "workloads/model.h"

enum wl_recompute { WL_RECOMPUTE_NONE, WL_RECOMPUTE_SELECTIVE, WL_RECOMPUTE_FULL };
/* What a selective recompute covers (Megatron-Core --recompute-modules), bits of
 * wl_plan.rc_modules; 0 there means the default, the core attention alone. */
enum wl_rc_module {
  WL_RCM_CORE_ATTN = 1u << 0,   /* the attention core (softmax and its inputs) */
  WL_RCM_LAYERNORM = 1u << 1,   /* the layer's two norms: their outputs are not kept */
  WL_RCM_MLA_UP_PROJ = 1u << 2, /* MLA's up projections (with their latent norms and RoPE): Q, K, V not kept */
  WL_RCM_MOE_ACT = 1u << 3,     /* the routed experts' activation: its output not kept */
  WL_RCM_MLP = 1u << 4,         /* a dense layer's MLP (fc1, activation, fc2): only its input kept */
  WL_RCM_SHARED_EXPERTS = 1u << 5, /* an MoE layer's shared experts: only their input kept */
  WL_RCM_MOE = 1u << 6,         /* an MoE layer's whole MoE block (router, dispatch, experts, combine,
                                   shared experts): only its input kept; the backward reruns it,
                                   all-to-alls included */
};
/* Which layers a full recompute covers (Megatron --recompute-method with --recompute-num-layers). */
enum wl_recompute_method {
  WL_RCM_UNIFORM, /* every layer, checkpointed in groups of recompute_layers */
  WL_RCM_BLOCK    /* the first recompute_layers of each model chunk; the others keep everything */
};
enum wl_schedule {
  WL_SCHED_GPIPE,
  WL_SCHED_1F1B,
  WL_SCHED_INTERLEAVED, /* interleaved 1F1B (virtual stages) */
  WL_SCHED_ZB_H1,       /* zero bubble H1 (MoE issue) */
  WL_SCHED_DUALPIPE,    /* DeepSeek DualPipe (MoE issue) */
  WL_SCHED_COUNT
};

/* Training precision (plan.dtype): the linear layers' input type; fp8 keeps bf16 elsewhere. */
enum wl_dtype { WL_DTYPE_BF16, WL_DTYPE_FP16, WL_DTYPE_FP8 };
/* fp8 scaling (plan.fp8_recipe). */
enum wl_fp8_recipe {
  WL_FP8_TENSOR, /* one scale per tensor */
  WL_FP8_BLOCK,  /* 1x128 activation blocks, 128x128 weight blocks (DeepSeek-V3) */
  WL_FP8_MX      /* OCP MXFP8: blocks of 32 with E8M0 scales */
};
/* Tensor-parallel communication overlapped with the GEMMs next to it (plan.tp_overlap). */
enum wl_tp_overlap {
  WL_TPO_NONE,     /* every TP collective exposed on the compute stream */
  WL_TPO_MEGATRON, /* Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers, its defaults) */
  WL_TPO_MC2       /* MindSpeed --use-ascend-mc2 (CANN AllGatherMatmul / MatmulReduceScatter) */
};
/* Who moves MC2's data (plan.mc2_comm_mode: torch_npu's comm_mode of the MC2 operators). */
enum wl_mc2_comm {
  WL_MC2_AI_CPU, /* HCCL driven from the AI CPU beside the GEMM (torch_npu's default) */
  WL_MC2_AIV     /* the operators' own vector cores (ops/mc2.c's kernels, their closed forms) */
};

/* MoE all-to-alls overlapped across micro-batches (plan.ep_overlap): in the steady state the
 * forward of micro-batch i+1 and the backward of micro-batch i run as one pair, each one's
 * dispatch and combine under the other's computation (docs/TRAINING.md, "Overlapped EP
 * communication"). */
enum wl_ep_overlap {
  WL_EPO_NONE,      /* every all-to-all waited for where its micro-batch needs it */
  WL_EPO_MEGATRON,  /* Megatron-Core --overlap-moe-expert-parallel-comm (combined 1F1B) */
  WL_EPO_MINDSPEED  /* MindSpeed --moe-fb-overlap (the same pairing on Ascend) */
};

/* How the framework's model code launches the norms, rotary embedding, activation and residual
 * adds (plan.fusion). */
enum wl_fusion {
  WL_FUSION_FUSED, /* one kernel each (Megatron-Core with Transformer Engine or apex, MindSpeed) */
  WL_FUSION_EAGER  /* PyTorch modules without a compiler: a kernel per tensor operation */
};

/* Parallel dimensions, in the order of enum values used by wl_coord. */
enum wl_dim { WL_DIM_TP, WL_DIM_CP, WL_DIM_EP, WL_DIM_DP, WL_DIM_PP, WL_DIM_COUNT };
/* Model chunks (pp x vpp) a pipeline layout (plan.layout) may list. */
#define WL_MAX_CHUNKS 512
/* A collective's group beyond the world's dimensions: the expert TP group when etp != tp (the
 * ranks of expert grid points 0..etp-1 of one (e, g), wl_plan_expert_rank). */
#define WL_GROUP_ETP WL_DIM_COUNT

struct wl_plan {
  int tp, cp, pp, dp, ep;
  int vpp;                  /* model chunks per pipeline rank (interleaving); 1: none */
  int first_layers;         /* layers of the first stage (0: an even split); vpp 1 only */
  int last_layers;          /* layers of the last stage (0: an even split); vpp 1 only */
  bool sp;                  /* sequence parallelism with TP */
  int zero;                 /* 0: plain DP; 1: optimizer states sharded (distributed optimizer);
                               2: + gradients; 3: + parameters */
  int recompute;            /* enum wl_recompute */
  int micro_batch;
  int global_batch;
  int schedule;             /* enum wl_schedule */
  char order[32];           /* rank order, fastest first: "tp-cp-ep-dp-pp" */
  bool overlap_grad_reduce; /* DP gradient reduction overlapped with backward */
  bool graph;               /* kernels replayed from a captured graph (host: graph_dispatch) */
  bool overlap_param_gather;/* ZeRO parameter all-gathers overlapped with compute */
  double bucket_params;     /* gradient bucket size, parameters */
  int dtype;                /* enum wl_dtype */
  int fp8_recipe;           /* enum wl_fp8_recipe */
  int tp_overlap;           /* enum wl_tp_overlap */
  int mc2_comm;             /* enum wl_mc2_comm (plan.mc2_comm_mode) */
  int ep_overlap;           /* enum wl_ep_overlap */
  int etp;                  /* expert tensor-parallel size (0 in the file: tp; see wl_plan_edp) */
  int recompute_method;     /* enum wl_recompute_method (recompute full) */
  int recompute_layers;     /* its group (uniform) or layers per chunk (block); 0 in the file: 1 / all */
  char recompute_modules[96]; /* plan.recompute_modules as written */
  unsigned rc_modules;      /* its enum wl_rc_module bits (wl_plan_finish); 0: core_attn */
  int optimizer_moments;    /* Adam's moments: 0 fp32, 1 bf16 (plan.optimizer_moments) */
  bool fp8_moe_act_input;   /* the routed experts keep their activation's input in fp8 */
  bool fp8_dispatch;        /* MoE dispatch (and its transposed gradient) sent in fp8 */
  int ep_dispatch;          /* enum wl_ep_dispatch */
  int zero_shard;           /* data-parallel ranks a ZeRO shard spans (hybrid sharding: PyTorch
                               HYBRID_SHARD, DeepSpeed MiCS); 0: dp x cp (wl_plan_shard) */
  int grad_reduce;          /* the gradient reduction's type: 0 fp32 (main_grad), 1 bf16 */
  bool grad_accum_fusion;   /* weight gradients accumulated into the gradient buffer by their GEMM
                               (Megatron's default), else by an add kernel after it */
  int fusion;               /* enum wl_fusion */
  int zero3_impl;           /* enum wl_zero3_impl (plan.zero = 3) */
  int offload_layers;       /* activation offload: the first N layers of each model chunk */
  char layout[256];         /* plan.layout as written ("" none): Megatron's pipeline layout */
  int nlayout;              /* its model chunks (wl_plan_finish); 0 without a layout */
  short layout_layers[WL_MAX_CHUNKS]; /* decoder layers of each model chunk under the layout */
};

/* How ZeRO-3 holds a piece's parameters (plan.zero3_impl). */
enum wl_zero3_impl {
  WL_Z3_FLAT,      /* one flat buffer per piece (PyTorch FSDP1's FlatParameter): gathered into it,
                      reduced from it, no copies on the compute stream */
  WL_Z3_PER_PARAM  /* per-parameter shards (PyTorch FSDP2's fully_shard): each gather copied out
                      into the parameters and each reduction's input copied in (chunk_cat) */
};

/* How the expert all-to-alls reach the experts' ranks (plan.ep_dispatch). */
enum wl_ep_dispatch {
  WL_EPD_DIRECT,       /* every token copy to its expert's rank, whatever the link */
  WL_EPD_NODE_LIMITED  /* DeepEP's internode kernels: one scale-out crossing per token and node */
};

/* The "plan" section's table (target: struct wl_plan). */
const struct npu_table *wl_plan_table(void);
void wl_plan_register(struct npu_cfg *cfg, struct wl_plan *p);
/*
 * Check the plan against the model and the system: tp x cp x pp x dp = devices (dp = 0 is
 * derived), heads and kv_heads divisible by tp, layers by pp x vpp, the global batch by
 * micro_batch x dp, the order string; errors name the keys. 0 or NPU_ECONFIG.
 */
int wl_plan_finish(struct npu_cfg *cfg, struct wl_plan *p, const struct wl_model *m,
                   const struct arch_system *sys, struct npu_diag *diag);

/* Devices of the system: nodes x devices per node (1 node when no node section). */
int wl_system_devices(const struct arch_system *sys);
/* Layers of model chunk `chunk` (0 .. pp x chunks - 1, in layer order) and the first layer
 * of it: an even split, or first_layers / last_layers at the ends and the rest evenly. */
int wl_plan_chunk_layers(const struct wl_plan *p, int layers, int chunks, int chunk);
int wl_plan_chunk_first_layer(const struct wl_plan *p, int layers, int chunks, int chunk);
/* Micro-batches per step and pipeline: global_batch / (micro_batch x dp). */
int wl_plan_microbatches(const struct wl_plan *p);
/* Size of dimension d. */
int wl_plan_dim(const struct wl_plan *p, enum wl_dim d);

/* Coordinates of a rank, and the rank of coordinates. */
struct wl_coord { int c[WL_DIM_COUNT]; };
void wl_plan_coord(const struct wl_plan *p, int rank, struct wl_coord *out);
int wl_plan_rank(const struct wl_plan *p, const struct wl_coord *c);
/* The ranks of rank's group along d (size wl_plan_dim(d)), in coordinate order. */
void wl_plan_group(const struct wl_plan *p, int rank, enum wl_dim d, int *ranks);

/* Whether parameters are sharded (ZeRO-3 / FSDP) over a data-parallel group of more than one. */
bool wl_plan_zero3(const struct wl_plan *p);
/* The data-parallel ranks one ZeRO shard spans: plan.zero_shard, or dp x cp when it is 0 (full
 * sharding). With fewer, the shard groups are consecutive in the data-parallel group and their
 * counterparts (the replicas) all-reduce the gradient shards between them. */
int wl_plan_shard(const struct wl_plan *p);
/*
 * MoE parallel folding (Megatron-Core's expert rank generator, order tp-ep-dp-pp with tp = etp):
 * a stage's tp x cp x dp ranks, taken in tp-cp-dp order (tp fastest) as the index a, also form
 * the expert grid etp x ep x edp, etp fastest: a = et + etp (e + ep g). With etp = tp the EP
 * group lies across the data-parallel ranks of a TP rank; with etp < tp it spans TP ranks.
 * wl_plan_etp: the expert TP size (plan.etp, its 0 read as tp before wl_plan_finish resolves it);
 * wl_plan_edp: the expert data-parallel size tp cp dp / (etp ep);
 * wl_plan_expert_rank: the physical rank of grid point (et, e, g) of stage `stage`;
 * wl_plan_expert_index: the EP index e of the rank at (tp, cp, dp) of a stage.
 */
int wl_plan_etp(const struct wl_plan *p);
int wl_plan_edp(const struct wl_plan *p);
/* Whether each rank routes tokens of its own to the experts (sequence parallelism, or tp 1),
 * which its expert TP group then gathers: etp / tp of the TP group's; else every TP rank holds
 * the same tokens (etp = tp, an all-reduce after the experts). */
bool wl_plan_moe_own_tokens(const struct wl_plan *p);
int wl_plan_expert_rank(const struct wl_plan *p, int stage, int et, int e, int g);
int wl_plan_expert_index(const struct wl_plan *p, int tp, int cp, int dp);
/* The EP all-to-alls of an MoE layer and micro-batch: the forward's, the backward's (their
 * transposes) and the recomputation's (a backward that reruns the MoE block first). */
enum wl_a2a_which {
  WL_A2A_DISPATCH, WL_A2A_COMBINE, WL_A2A_COMBINE_T, WL_A2A_DISPATCH_T, WL_A2A_RC_DISPATCH, WL_A2A_RC_COMBINE,
  WL_A2A_KINDS
};

/* Whether all-to-all `which` sends token copies back to their owners (the combine's direction:
 * the combine, its rerun, the dispatch's gradient); else it sends them to the experts. */
bool wl_plan_a2a_back(enum wl_a2a_which which);

/* Bytes per hidden element of MoE all-to-all `which`: 2 (bf16), or with plan.fp8_dispatch
 * 1 + 4/128 (fp8 with an fp32 scale per 128) in the dispatch direction (the dispatch, its
 * rerun, the combine's gradient). */
double wl_plan_a2a_bytes(const struct wl_plan *p, enum wl_a2a_which which);
/* Bytes per parameter of the data-parallel gradient reduction: 4 (fp32) or 2 (bf16). */
double wl_plan_grad_reduce_bytes(const struct wl_plan *p);
/* Whether a full recompute covers layer `layer` (global index) under p (chunks: pp x vpp). */
bool wl_plan_layer_recomputed(const struct wl_plan *p, int layers, int chunks, int layer);
/* The modules of p's selective recompute, blank-separated in enum wl_rc_module order ("core_attn"
 * when the plan did not pass wl_plan_finish), or "" without a selective recompute. */
const char *wl_plan_recompute_modules(const struct wl_plan *p);
/* Whether a selective recompute covers module m (enum wl_rc_module) under p. */
bool wl_plan_recomputes(const struct wl_plan *p, unsigned m);
/* plan.fusion's name: "fused", "eager". */
const char *wl_fusion_name(enum wl_fusion f);

/* plan.zero3_impl's name: "flat", "per_param". */
const char *wl_zero3_impl_name(enum wl_zero3_impl z);

/* plan.tp_overlap's name: "none", "megatron", "mc2". */
const char *wl_tp_overlap_name(enum wl_tp_overlap o);

/* plan.mc2_comm_mode's name: "ai_cpu", "aiv". */
const char *wl_mc2_comm_name(enum wl_mc2_comm c);

/* plan.ep_overlap's name: "none", "megatron", "mindspeed". */
const char *wl_ep_overlap_name(enum wl_ep_overlap o);
const char *wl_schedule_name(enum wl_schedule s);

/* The 16-bit type of everything but fp8 GEMMs: fp16 for an fp16 plan, else bf16 (also the
 * type whose dense peak MFU is judged against: fp8 runs are judged against bf16). */
enum npu_dtype wl_plan_wide_dtype(const struct wl_plan *p);
/* Whether the linear layers run in fp8. */
bool wl_plan_is_fp8(const struct wl_plan *p);
/* The fp8 GEMM input type of the plan's recipe: NPU_DT_MXFP8 or NPU_DT_FP8_E4M3. */
enum npu_dtype wl_plan_fp8_dtype(const struct wl_plan *p);

#endif
