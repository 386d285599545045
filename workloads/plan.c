/*
 * plan.c - the "plan" section: table, checks against the model and system, rank mapping.
 */
#include "workloads/plan.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/err.h"
#include "workloads/schedule.h"

#define NPU_PARAM_STRUCT struct wl_plan

static const char *const recompute_names[] = {"none", "selective", "full", NULL};
static const char *const sched_names[] = {"gpipe", "1f1b", "interleaved", "zb_h1", "dualpipe", NULL};
static const char *const dtype_names[] = {"bf16", "fp16", "fp8", NULL};
static const char *const fp8_recipe_names[] = {"tensor", "block", "mxfp8", NULL};
static const char *const moment_names[] = {"fp32", "bf16", NULL};
static const char *const grad_reduce_names[] = {"fp32", "bf16", NULL};
static const char *const ep_dispatch_names[] = {"direct", "node_limited", NULL};
static const char *const fusion_names[] = {"fused", "eager", NULL};
static const char *const zero3_impl_names[] = {"flat", "per_param", NULL};
static const char *const recompute_method_names[] = {"uniform", "block", NULL};
static const char *const tp_overlap_names[] = {"none", "megatron", "mc2", NULL};
static const char *const mc2_comm_names[] = {"ai_cpu", "aiv", NULL};
static const char *const ep_overlap_names[] = {"none", "megatron", "mindspeed", NULL};
static const char *const dim_names[WL_DIM_COUNT] = {"tp", "cp", "ep", "dp", "pp"};

static const struct npu_section sections[] = {
    {"plan", false, "how the training job is parallelised"},
};

static const struct npu_param params[] = {
    NPU_PARAM_INT("plan.tp", tp, "1", NPU_PF_POSITIVE, "tensor-parallel size"),
    NPU_PARAM_INT("plan.cp", cp, "1", NPU_PF_POSITIVE, "context-parallel size"),
    NPU_PARAM_INT("plan.pp", pp, "1", NPU_PF_POSITIVE, "pipeline stages"),
    NPU_PARAM_INT("plan.dp", dp, "0", NPU_PF_NONNEG, "data-parallel size; 0: devices / (tp x cp x pp)"),
    NPU_PARAM_INT("plan.ep", ep, "1", NPU_PF_POSITIVE,
        "expert-parallel size (MoE; etp x ep divides a stage's tp x cp x dp ranks, MoE parallel folding)"),
    NPU_PARAM_INT("plan.etp", etp, "0", NPU_PF_NONNEG,
        "expert tensor-parallel size (MoE, Megatron --expert-tensor-parallel-size; 0: tp): each expert split over "
        "etp ranks, which gather their token copies for it. The expert grid etp x ep x expert-dp folds onto a "
        "stage's ranks in order (etp fastest): with etp < tp the EP group spans TP ranks (needs plan.sp)"),
    NPU_PARAM_INT("plan.vpp", vpp, "1", NPU_PF_POSITIVE, "model chunks per pipeline rank (interleaved schedule); 1: none"),
    NPU_PARAM_INT("plan.first_stage_layers", first_layers, "0", NPU_PF_NONNEG,
        "layers of the first pipeline stage, or of its first model chunk with vpp > 1 (Megatron --decoder-first-pipeline-num-layers); 0: an even split"),
    NPU_PARAM_INT("plan.last_stage_layers", last_layers, "0", NPU_PF_NONNEG,
        "layers of the last pipeline stage, or of its last model chunk with vpp > 1 (--decoder-last-pipeline-num-layers); 0: an even split"),
    NPU_PARAM_BOOL("plan.sp", sp, "false", "sequence parallelism: norms and dropout sharded over the TP group"),
    NPU_PARAM_INT("plan.zero", zero, "0", 0, "ZeRO stage: 0 none, 1 optimizer states (distributed optimizer), 2 + gradients, 3 + parameters"),
    NPU_PARAM_INT("plan.zero_shard", zero_shard, "0", NPU_PF_NONNEG,
        "with plan.zero >= 1, the data-parallel ranks one shard spans (hybrid sharding: PyTorch FSDP HYBRID_SHARD's "
        "shard group, DeepSpeed MiCS's mics_shard_size): ZeRO's states are sharded over groups of this many "
        "consecutive data-parallel ranks and replicated across the groups, whose gradient shards are all-reduced "
        "after each reduce-scatter; divides dp x cp; 0: dp x cp (full sharding)"),
    NPU_PARAM_ENUM("plan.grad_reduce_dtype", grad_reduce, "fp32", grad_reduce_names,
         "type of the data-parallel gradient reduction and its buffer: fp32 (Megatron's default main_grad) or bf16 "
         "(Megatron --grad-reduce-in-bf16; PyTorch FSDP's MixedPrecision(reduce_dtype=torch.bfloat16))"),
    NPU_PARAM_BOOL("plan.grad_accum_fusion", grad_accum_fusion, "true",
         "with plan.zero <= 2 (a gradient buffer: Megatron's main_grad): each weight-gradient GEMM accumulates into "
         "the buffer, writing its type (Megatron's default gradient_accumulation_fusion); false (Megatron "
         "--no-gradient-accumulation-fusion, as MindSpeed-LLM's scripts set it): the GEMM writes the training type "
         "and an add kernel accumulates it into the buffer, every micro-batch (docs/TRAINING.md)"),
    NPU_PARAM_ENUM("plan.zero3_impl", zero3_impl, "flat", zero3_impl_names,
         "with plan.zero = 3, how the framework holds a piece's parameters: flat (PyTorch FSDP1's FlatParameter: "
         "gathered into one buffer the layer reads, its gradients reduced from one; no copies) or per_param (PyTorch "
         "FSDP2's fully_shard, as torchtitan runs it: every gather is copied out into the parameters, and every "
         "gradient reduction's input copied in, in the reduction's type, by a kernel each; docs/TRAINING.md)"),
    NPU_PARAM_INT("plan.offload_layers", offload_layers, "0", NPU_PF_NONNEG,
        "activation offload (Megatron-Core --cpu-offloading with --cpu-offloading-num-layers, Transformer Engine's "
        "CPU offload): in each model chunk the activations of its first N transformer layers move to host memory "
        "after their forward and come back before their backward, over node.host.bandwidth, on copy streams beside "
        "the compute (the compute waits where a copy is late: at the end of the next layer's forward, at the start "
        "of the layer's backward); fewer than the chunk's layers; 0: none"),
    NPU_PARAM_ENUM("plan.fusion", fusion, "fused", fusion_names,
         "how the model code launches the norms, rotary embedding, activation and residual adds: fused (one kernel "
         "each: Megatron-Core with Transformer Engine or apex, MindSpeed) or eager (PyTorch modules without a "
         "compiler, a kernel per tensor operation, as Hugging Face transformers' Llama runs them: RMSNorm in fp32 "
         "through casts, a square, a mean and multiplies; RoPE through rotate_half; SiLU and the multiply apart; "
         "residual adds apart; docs/TRAINING.md)"),
    NPU_PARAM_ENUM("plan.recompute", recompute, "none", recompute_names,
         "activation recomputation: none, selective (the modules of plan.recompute_modules), full (every layer)"),
    {"plan.recompute_modules", NPU_PT_STRING, NPU_PARAM_OFF(recompute_modules), NPU_PARAM_SZ(recompute_modules),
     "core_attn", 0, 0, 0, NULL,
     "with plan.recompute = selective (Megatron-Core --recompute-modules), the modules whose outputs the backward "
     "recomputes instead of keeping, separated by blanks or commas: core_attn (the attention core), layernorm (the "
     "layer's two norms), mla_up_proj (MLA's up projections, their latent norms and RoPE), moe_act (the routed "
     "experts' activation), mlp (a dense layer's MLP), shared_experts (an MoE layer's shared experts), moe (an MoE "
     "layer's whole MoE block: router, dispatch, experts, combine and shared experts, rerun with its all-to-alls)"},
    NPU_PARAM_ENUM("plan.recompute_method", recompute_method, "uniform", recompute_method_names,
         "with plan.recompute = full (Megatron --recompute-method): uniform (every layer, checkpointed in groups "
         "of plan.recompute_layers) or block (only the first plan.recompute_layers of each model chunk)"),
    NPU_PARAM_INT("plan.recompute_layers", recompute_layers, "0", NPU_PF_NONNEG,
        "with plan.recompute = full (Megatron --recompute-num-layers): the group size (uniform; 0: 1) or the "
        "recomputed layers per model chunk (block; 0: all)"),
    NPU_PARAM_INT("plan.micro_batch", micro_batch, "1", NPU_PF_POSITIVE, "sequences per micro-batch"),
    NPU_PARAM_INT("plan.global_batch", global_batch, NULL, NPU_PF_POSITIVE, "sequences per optimizer step"),
    NPU_PARAM_ENUM("plan.schedule", schedule, "1f1b", sched_names, "pipeline schedule: gpipe, 1f1b, interleaved, zb_h1, dualpipe"),
    {"plan.layout", NPU_PT_STRING, NPU_PARAM_OFF(layout), NPU_PARAM_SZ(layout), "", 0, 0, 0, NULL,
     "pipeline layout (Megatron --pipeline-model-parallel-layout): the pp x vpp model chunks in order, separated "
     "by '|', each a run of E (the embedding: first chunk, first), t (a decoder layer), m (an MTP module: last "
     "chunk) and L (the head and loss: last chunk, last), X*N repeating X and (...)*N a group, e.g. "
     "\"E|(tt|)*30L\"; a chunk may hold no layer. \"\": plan.first_stage_layers / last_stage_layers or an even split"},
    {"plan.order", NPU_PT_STRING, NPU_PARAM_OFF(order), NPU_PARAM_SZ(order), "tp-cp-ep-dp-pp", 0, 0, 0, NULL,
     "rank order, fastest-varying dimension first (Megatron's default tp-cp-ep-dp-pp)"},
    NPU_PARAM_BOOL("plan.overlap_grad_reduce", overlap_grad_reduce, "true", "reduce gradient buckets while the backward runs"),
    NPU_PARAM_BOOL("plan.graph", graph, "false",
         "the step's kernels replayed from a captured graph (CUDA graphs, aclgraph): each costs the host "
         "node.host.graph_dispatch instead of node.host.dispatch (eager PyTorch, the frameworks' default)"),
    NPU_PARAM_BOOL("plan.overlap_param_gather", overlap_param_gather, "true", "gather ZeRO parameters ahead of use, overlapped"),
    {"plan.bucket_params", NPU_PT_REAL, NPU_PARAM_OFF(bucket_params), 0, "40000000", NPU_PF_POSITIVE, 0, 0, NULL,
     "gradient bucket size for the data-parallel reduction, parameters (Megatron DDP: 40M)"},
    NPU_PARAM_ENUM("plan.dtype", dtype, "bf16", dtype_names, "training precision: bf16 or fp16 mixed precision (fp8 on fp8 chips)"),
    NPU_PARAM_ENUM("plan.fp8_recipe", fp8_recipe, "block", fp8_recipe_names,
         "fp8 scaling with plan.dtype = fp8: tensor (per-tensor amax), block (1x128 activation blocks, DeepSeek-V3), "
         "mxfp8 (32-element blocks, E8M0 scales)"),
    NPU_PARAM_ENUM("plan.optimizer_moments", optimizer_moments, "fp32", moment_names,
         "type of Adam's first and second moments: fp32, or bf16 (Megatron-Core --use-precision-aware-optimizer "
         "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; DeepSeek-V3 report, Low-Precision Storage): 8 bytes of optimizer state per "
         "parameter with the fp32 master weight instead of 12"),
    NPU_PARAM_BOOL("plan.fp8_moe_act_input", fp8_moe_act_input, "false",
                   "with plan.dtype = fp8: the routed experts keep their activation's input (the first projection's "
                   "output) in fp8 for the backward, not in the training precision (DeepSeek-V3 report, Low-Precision Storage)"),
    NPU_PARAM_ENUM("plan.ep_dispatch", ep_dispatch, "direct", ep_dispatch_names,
         "how the MoE all-to-alls travel: direct (every token copy to its expert's rank, as NCCL's all-to-all and "
         "Megatron's dispatchers send it) or node_limited (DeepEP's internode kernels, DeepSeek-V3 report sec. 3.2.2: "
         "a token crosses the scale-out network once per node it is routed to, to the rank of the same local index "
         "there, which forwards its copies over the scale-up links; the combine in reverse). Needs group-limited "
         "routing whose groups are the EP group's nodes and run.network = formula"),
    NPU_PARAM_BOOL("plan.fp8_dispatch", fp8_dispatch, "false",
                   "with plan.dtype = fp8 and MoE layers: the dispatch all-to-all and, in the backward, the "
                   "gradient sent to the experts travel in fp8 with a scale per 128 elements, the combine and the "
                   "gradient sent back in bf16 (DeepSeek-V3 report, Low-Precision Communication; DeepEP's fp8 "
                   "dispatch)"),
    NPU_PARAM_ENUM("plan.tp_overlap", tp_overlap, "none", tp_overlap_names,
         "TP collectives overlapped with the GEMMs that produce or consume them: none (exposed), megatron "
         "(Megatron-Core --tp-comm-overlap, Transformer Engine userbuffers on GPUs), mc2 (MindSpeed "
         "--use-ascend-mc2, CANN's fused matmul-communication kernels on Ascend); needs plan.sp with tp > 1"),
    NPU_PARAM_ENUM("plan.mc2_comm_mode", mc2_comm, "ai_cpu", mc2_comm_names,
         "with plan.tp_overlap = \"mc2\": who moves the fused operators' data, torch_npu's comm_mode: ai_cpu "
         "(HCCL driven from the AI CPU beside the GEMM, no AI core taken; torch_npu's default) or aiv (the "
         "operators' own vector cores: each pair costed as CANN's AllGatherMatmul or MatmulReduceScatter kernel "
         "on the TP group's server, the closed form of npusim's MC2 kernels, docs/KERNELS.md); aiv needs the TP "
         "group within one full-mesh server and fp16 or bf16 GEMMs"),
    NPU_PARAM_ENUM("plan.ep_overlap", ep_overlap, "none", ep_overlap_names,
         "MoE all-to-alls overlapped across micro-batches: none, megatron (Megatron-Core "
         "--overlap-moe-expert-parallel-comm, GPUs) or mindspeed (MindSpeed --moe-fb-overlap, Ascend): the "
         "steady state's forward of one micro-batch and backward of the one before run as a pair, each one's "
         "dispatch and combine under the other's computation; needs ep > 1, and with pp > 1 the interleaved "
         "schedule"),
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *wl_plan_table(void)
{
  return &table;
}

void wl_plan_register(struct npu_cfg *cfg, struct wl_plan *p)
{
  memset(p, 0, sizeof *p);
  npu_cfg_add_table(cfg, &table, p);
}

bool wl_plan_zero3(const struct wl_plan *p)
{
  return p->zero >= 3 && wl_plan_shard(p) > 1;
}

int wl_plan_shard(const struct wl_plan *p)
{
  return p->zero_shard ? p->zero_shard : p->dp * p->cp;
}

int wl_plan_etp(const struct wl_plan *p)
{
  return p->etp ? p->etp : p->tp;
}

bool wl_plan_moe_own_tokens(const struct wl_plan *p)
{
  return p->sp || p->tp == 1;
}

int wl_plan_edp(const struct wl_plan *p)
{
  return p->tp * p->cp * p->dp / (wl_plan_etp(p) * p->ep);
}

int wl_plan_expert_rank(const struct wl_plan *p, int stage, int et, int e, int g)
{
  int a = et + wl_plan_etp(p) * (e + p->ep * g); /* the stage's index in tp-cp-dp order */
  struct wl_coord c = {{0}};
  c.c[WL_DIM_TP] = a % p->tp;
  c.c[WL_DIM_CP] = a / p->tp % p->cp;
  c.c[WL_DIM_DP] = a / (p->tp * p->cp);
  c.c[WL_DIM_PP] = stage;
  return wl_plan_rank(p, &c);
}

int wl_plan_expert_index(const struct wl_plan *p, int tp, int cp, int dp)
{
  return (tp + p->tp * (cp + p->cp * dp)) / wl_plan_etp(p) % p->ep;
}

bool wl_plan_a2a_back(enum wl_a2a_which which)
{
  return which == WL_A2A_COMBINE || which == WL_A2A_DISPATCH_T || which == WL_A2A_RC_COMBINE;
}

double wl_plan_a2a_bytes(const struct wl_plan *p, enum wl_a2a_which which)
{
  return p->fp8_dispatch && !wl_plan_a2a_back(which) ? 1 + 4.0 / 128 : 2;
}

double wl_plan_grad_reduce_bytes(const struct wl_plan *p)
{
  return p->grad_reduce ? 2.0 : 4.0;
}

const char *wl_plan_recompute_modules(const struct wl_plan *p)
{
  if (p->recompute != WL_RECOMPUTE_SELECTIVE) return "";
  return p->rc_modules && p->recompute_modules[0] ? p->recompute_modules : "core_attn";
}

bool wl_plan_recomputes(const struct wl_plan *p, unsigned m)
{
  if (p->recompute != WL_RECOMPUTE_SELECTIVE) return false;
  return ((p->rc_modules ? p->rc_modules : WL_RCM_CORE_ATTN) & m) != 0;
}

static const char *const rc_module_names[] = {"core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts",
                                              "moe", NULL};

/* plan.recompute_modules into p->rc_modules, checked against the model. */
static int parse_rc_modules(struct npu_cfg *cfg, struct wl_plan *p, const struct wl_model *m, struct npu_diag *diag)
{
  const char *key = "plan.recompute_modules";
  p->rc_modules = 0;
  char buf[sizeof p->recompute_modules];
  snprintf(buf, sizeof buf, "%s", p->recompute_modules);
  for (char *save = NULL, *w = strtok_r(buf, " ,\t", &save); w; w = strtok_r(NULL, " ,\t", &save)) {
    int i = 0;
    while (rc_module_names[i] && strcmp(rc_module_names[i], w)) i++;
    if (!rc_module_names[i])
      return npu_cfg_fail(cfg, diag, key,
                          "unknown module '%s' (core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts, moe)", w);
    p->rc_modules |= 1u << i;
  }
  /* written back in one form, the modules in their order, for the reports and the effective
   * configuration */
  size_t len = 0;
  for (int i = 0; rc_module_names[i]; i++)
    if (p->rc_modules >> i & 1u)
      len += (size_t)snprintf(p->recompute_modules + len, sizeof p->recompute_modules - len, "%s%s", len ? " " : "",
                              rc_module_names[i]);
  /* anything but the default (which an effective configuration writes back) needs selective */
  if (p->recompute != WL_RECOMPUTE_SELECTIVE && p->rc_modules != WL_RCM_CORE_ATTN)
    return npu_cfg_fail(cfg, diag, key, "the recomputed modules need plan.recompute = \"selective\"");
  if (p->recompute == WL_RECOMPUTE_SELECTIVE && !p->rc_modules)
    return npu_cfg_fail(cfg, diag, key, "a selective recompute of no module: name at least one");
  if ((p->rc_modules & WL_RCM_MLA_UP_PROJ) && !wl_model_is_mla(m))
    return npu_cfg_fail(cfg, diag, key, "mla_up_proj needs a model with multi-latent attention (model.mla)");
  if ((p->rc_modules & WL_RCM_MOE_ACT) && m->moe.experts <= 1)
    return npu_cfg_fail(cfg, diag, key, "moe_act needs an MoE model (model.moe.experts)");
  if ((p->rc_modules & WL_RCM_SHARED_EXPERTS) && (m->moe.experts <= 1 || !m->moe.shared))
    return npu_cfg_fail(cfg, diag, key, "shared_experts needs an MoE model with shared experts (model.moe.shared)");
  if ((p->rc_modules & WL_RCM_MOE) && m->moe.experts <= 1)
    return npu_cfg_fail(cfg, diag, key, "moe needs an MoE model (model.moe.experts)");
  return 0;
}

bool wl_plan_layer_recomputed(const struct wl_plan *p, int layers, int chunks, int layer)
{
  if (p->recompute != WL_RECOMPUTE_FULL) return false;
  if (p->recompute_method != WL_RCM_BLOCK || !p->recompute_layers) return true;
  int first = 0;
  for (int c = 0; c < chunks; c++) {
    int n = wl_plan_chunk_layers(p, layers, chunks, c);
    if (layer < first + n) return layer - first < p->recompute_layers;
    first += n;
  }
  return false;
}

const char *wl_tp_overlap_name(enum wl_tp_overlap o)
{
  NPU_ASSERT(o >= WL_TPO_NONE && o <= WL_TPO_MC2);
  return tp_overlap_names[o];
}

const char *wl_mc2_comm_name(enum wl_mc2_comm c)
{
  NPU_ASSERT(c >= WL_MC2_AI_CPU && c <= WL_MC2_AIV);
  return mc2_comm_names[c];
}

const char *wl_ep_overlap_name(enum wl_ep_overlap o)
{
  NPU_ASSERT(o >= WL_EPO_NONE && o <= WL_EPO_MINDSPEED);
  return ep_overlap_names[o];
}

const char *wl_fusion_name(enum wl_fusion f)
{
  return fusion_names[f];
}

const char *wl_zero3_impl_name(enum wl_zero3_impl z)
{
  NPU_ASSERT(z >= WL_Z3_FLAT && z <= WL_Z3_PER_PARAM);
  return zero3_impl_names[z];
}

const char *wl_schedule_name(enum wl_schedule s)
{
  NPU_ASSERT(s >= 0 && s < WL_SCHED_COUNT);
  return sched_names[s];
}

int wl_system_devices(const struct arch_system *sys)
{
  int per = sys->has_node ? sys->node.devices : 1;
  int nodes = sys->has_cluster ? sys->cluster.nodes : 1;
  return per * nodes;
}

int wl_plan_dim(const struct wl_plan *p, enum wl_dim d)
{
  switch (d) {
  case WL_DIM_TP: return p->tp;
  case WL_DIM_CP: return p->cp;
  case WL_DIM_EP: return 1; /* the expert grid folds onto tp x cp x dp (wl_plan_expert_rank) */
  case WL_DIM_DP: return p->dp;
  case WL_DIM_PP: return p->pp;
  default: NPU_PANIC("bad dimension %d", (int)d);
  }
}

int wl_plan_chunk_layers(const struct wl_plan *p, int layers, int chunks, int chunk)
{
  if (p->nlayout) return chunk < p->nlayout ? p->layout_layers[chunk] : 0;
  if (!p->first_layers && !p->last_layers) return layers / chunks;
  if (chunk == 0 && p->first_layers) return p->first_layers;
  if (chunk == chunks - 1 && p->last_layers) return p->last_layers;
  int mid = chunks - (p->first_layers ? 1 : 0) - (p->last_layers ? 1 : 0);
  return (layers - p->first_layers - p->last_layers) / mid;
}

int wl_plan_chunk_first_layer(const struct wl_plan *p, int layers, int chunks, int chunk)
{
  int l = 0;
  for (int c = 0; c < chunk; c++) l += wl_plan_chunk_layers(p, layers, chunks, c);
  return l;
}

int wl_plan_microbatches(const struct wl_plan *p)
{
  return p->global_batch / (p->micro_batch * p->dp);
}

/* Expand a layout's repetitions (X*N, (...)*N) into out (n bytes, NUL-terminated); the position
 * of the first error in *bad. Returns 0, or -1. */
static int layout_expand(const char *s, const char **end, char *out, size_t n, size_t *len, const char **bad)
{
  while (*s && *s != ')') {
    size_t at = *len;
    if (*s == '(') {
      if (layout_expand(s + 1, &s, out, n, len, bad)) return -1;
      if (*s != ')') return *bad = s, -1;
      s++;
    } else if (strchr("EtmL|", *s)) {
      if (*len + 1 >= n) return *bad = s, -1;
      out[(*len)++] = *s++;
    } else {
      return *bad = s, -1;
    }
    if (*s == '*') {
      char *e;
      long k = strtol(s + 1, &e, 10);
      if (e == s + 1 || k < 1 || k > WL_MAX_CHUNKS * 64) return *bad = s, -1;
      s = e;
      size_t unit = *len - at;
      if (*len + unit * (size_t)(k - 1) >= n) return *bad = s, -1;
      for (long r = 1; r < k; r++, *len += unit) memcpy(out + *len, out + at, unit);
    }
  }
  out[*len] = 0;
  *end = s;
  return 0;
}

/* plan.layout into p->layout_layers: pp x vpp chunks, every decoder layer once, the embedding
 * first and the head and loss last, MTP modules in the last chunk. */
static int layout_finish(struct npu_cfg *cfg, struct wl_plan *p, const struct wl_model *m, struct npu_diag *diag)
{
  p->nlayout = 0;
  if (!p->layout[0]) return 0;
  if (p->first_layers || p->last_layers)
    return npu_cfg_fail(cfg, diag, "plan.layout", "a layout places every layer: leave plan.first_stage_layers and "
                        "plan.last_stage_layers 0");
  int chunks = p->pp * p->vpp;
  if (chunks > WL_MAX_CHUNKS)
    return npu_cfg_fail(cfg, diag, "plan.layout", "a layout lists at most %d model chunks, not pp %d x vpp %d",
                        WL_MAX_CHUNKS, p->pp, p->vpp);
  char flat[WL_MAX_CHUNKS * 64];
  size_t len = 0;
  const char *end = NULL, *bad = NULL;
  if (layout_expand(p->layout, &end, flat, sizeof flat, &len, &bad) || *end)
    return npu_cfg_fail(cfg, diag, "plan.layout", "\"%s\": cannot read it at '%s' (E, t, m, L, '|', X*N, (...)*N)",
                        p->layout, bad ? bad : end);
  int k = 0, layers = 0, mtp = 0, n = (int)len;
  for (int i = 0; i <= n; i++) {
    char c = flat[i];
    if (c == '|' || c == 0) {
      if (k == WL_MAX_CHUNKS)
        return npu_cfg_fail(cfg, diag, "plan.layout", "more model chunks in the layout than pp %d x vpp %d", p->pp,
                            p->vpp);
      p->layout_layers[k++] = (short)layers;
      layers = 0;
      continue;
    }
    if (c == 'E' && i != 0)
      return npu_cfg_fail(cfg, diag, "plan.layout", "the embedding (E) opens the first chunk, once");
    if (c == 'L' && i + 1 != n)
      return npu_cfg_fail(cfg, diag, "plan.layout", "the head and loss (L) close the last chunk, once");
    if (c == 't') layers++;
    if (c == 'm') mtp++;
    if (c == 'm' && strchr(flat + i, '|'))
      return npu_cfg_fail(cfg, diag, "plan.layout", "MTP modules (m) sit in the last chunk");
  }
  if (flat[0] != 'E' || n < 1 || flat[n - 1] != 'L')
    return npu_cfg_fail(cfg, diag, "plan.layout", "\"%s\" must open with the embedding (E) and close with the head "
                        "and loss (L)", p->layout);
  if (k != chunks)
    return npu_cfg_fail(cfg, diag, "plan.layout", "%d model chunks in the layout, but pp %d x vpp %d = %d", k, p->pp,
                        p->vpp, chunks);
  int total = 0;
  for (int i = 0; i < k; i++) total += p->layout_layers[i];
  if (total != m->layers)
    return npu_cfg_fail(cfg, diag, "plan.layout", "%d decoder layers (t) in the layout, but the model has %d", total,
                        m->layers);
  if (mtp != m->mtp_layers)
    return npu_cfg_fail(cfg, diag, "plan.layout", "%d MTP modules (m) in the layout, but the model has %d "
                        "(model.mtp_layers)", mtp, m->mtp_layers);
  p->nlayout = k;
  return 0;
}

/* Parse the order string into dims[] (fastest first); returns how many, or -1. */
static int parse_order(const char *order, enum wl_dim dims[WL_DIM_COUNT])
{
  int n = 0, seen = 0;
  const char *s = order;
  while (*s) {
    int d;
    for (d = 0; d < WL_DIM_COUNT; d++)
      if (!strncmp(s, dim_names[d], 2)) break;
    if (d == WL_DIM_COUNT || (seen >> d & 1)) return -1;
    seen |= 1 << d;
    dims[n++] = (enum wl_dim)d;
    s += 2;
    if (*s == '-') s++;
    else if (*s) return -1;
  }
  /* every world dimension must appear; ep may be left out */
  for (int d = 0; d < WL_DIM_COUNT; d++)
    if (d != WL_DIM_EP && !(seen >> d & 1)) return -1;
  return n;
}

static void order_dims(const struct wl_plan *p, enum wl_dim dims[WL_DIM_COUNT], int *n)
{
  *n = parse_order(p->order, dims);
  NPU_ASSERT(*n > 0);
}

void wl_plan_coord(const struct wl_plan *p, int rank, struct wl_coord *out)
{
  enum wl_dim dims[WL_DIM_COUNT];
  int n;
  order_dims(p, dims, &n);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++) {
    int sz = wl_plan_dim(p, dims[i]);
    out->c[dims[i]] = rank % sz;
    rank /= sz;
  }
}

int wl_plan_rank(const struct wl_plan *p, const struct wl_coord *c)
{
  enum wl_dim dims[WL_DIM_COUNT];
  int n, rank = 0;
  order_dims(p, dims, &n);
  for (int i = n - 1; i >= 0; i--) rank = rank * wl_plan_dim(p, dims[i]) + c->c[dims[i]];
  return rank;
}

void wl_plan_group(const struct wl_plan *p, int rank, enum wl_dim d, int *ranks)
{
  struct wl_coord c;
  wl_plan_coord(p, rank, &c);
  for (int i = 0; i < wl_plan_dim(p, d); i++) {
    c.c[d] = i;
    ranks[i] = wl_plan_rank(p, &c);
  }
}

int wl_plan_finish(struct npu_cfg *cfg, struct wl_plan *p, const struct wl_model *m,
                   const struct arch_system *sys, struct npu_diag *diag)
{
  enum wl_dim dims[WL_DIM_COUNT];
  if (parse_order(p->order, dims) < 0)
    return npu_cfg_fail(cfg, diag, "plan.order",
                        "\"%s\" is not a rank order: name tp, cp, dp and pp (ep optional) once each, "
                        "separated by '-', fastest first", p->order);
  int devices = wl_system_devices(sys), inner = p->tp * p->cp * p->pp;
  if (!p->dp) {
    if (devices % inner)
      return npu_cfg_fail(cfg, diag, "plan.tp", "tp %d x cp %d x pp %d = %d does not divide the %d devices",
                          p->tp, p->cp, p->pp, inner, devices);
    p->dp = devices / inner;
  }
  if (inner * p->dp != devices)
    return npu_cfg_fail(cfg, diag, "plan.dp", "tp %d x cp %d x pp %d x dp %d = %d, but the system has %d devices",
                        p->tp, p->cp, p->pp, p->dp, inner * p->dp, devices);
  if (m->heads % p->tp || m->kv_heads % p->tp)
    return npu_cfg_fail(cfg, diag, "plan.tp", "tp %d must divide the %d heads and %d key/value heads", p->tp,
                        m->heads, m->kv_heads);
  if (m->linear.heads && m->linear.k_heads % p->tp)
    return npu_cfg_fail(cfg, diag, "plan.tp", "tp %d must divide the %d query/key heads of the linear-attention "
                        "layers (model.linear.k_heads)", p->tp, m->linear.k_heads);
  if (m->ffn % p->tp || (m->moe.ffn && m->moe.ffn % p->tp))
    return npu_cfg_fail(cfg, diag, "plan.tp", "tp %d must divide the MLP size %d", p->tp, m->ffn);
  int lrc = layout_finish(cfg, p, m, diag);
  if (lrc) return lrc;
  if ((p->first_layers || p->last_layers) && p->pp < 2)
    return npu_cfg_fail(cfg, diag, p->first_layers ? "plan.first_stage_layers" : "plan.last_stage_layers",
                        "uneven first or last stages need pp >= 2");
  if (p->first_layers || p->last_layers) {
    /* with virtual stages, the first and last model chunks (on the first and last ranks) */
    int mc = p->pp * p->vpp;
    int rest = m->layers - p->first_layers - p->last_layers, mid = mc - (p->first_layers ? 1 : 0) - (p->last_layers ? 1 : 0);
    if (rest <= 0 || (mid ? rest % mid : rest))
      return npu_cfg_fail(cfg, diag, p->first_layers ? "plan.first_stage_layers" : "plan.last_stage_layers",
                          "%d layers minus the first (%d) and last (%d) %s' do not split evenly over the other %d %s",
                          m->layers, p->first_layers, p->last_layers, p->vpp > 1 ? "chunks" : "stages", mid,
                          p->vpp > 1 ? "model chunks (pp x vpp)" : "stages");
  } else if (!p->nlayout && m->layers % (p->pp * p->vpp)) {
    return npu_cfg_fail(cfg, diag, p->vpp > 1 ? "plan.vpp" : "plan.pp",
                        "%d layers do not split into pp %d x vpp %d equal chunks (or set plan.first_stage_layers / "
                        "plan.last_stage_layers)", m->layers, p->pp, p->vpp);
  }
  if (p->vpp > 1 && p->schedule != WL_SCHED_INTERLEAVED)
    return npu_cfg_fail(cfg, diag, "plan.vpp", "virtual stages need plan.schedule = \"interleaved\"");
  if (p->schedule == WL_SCHED_INTERLEAVED && p->vpp < 2)
    return npu_cfg_fail(cfg, diag, "plan.schedule", "the interleaved schedule needs plan.vpp >= 2");
  if (m->doc_len && m->attention == WL_ATTN_FLASH && (m->doc_len % p->cp || (m->doc_len / p->cp) % 128))
    return npu_cfg_fail(cfg, diag, "model.doc_len", "documents of %d tokens over cp %d: FlashAttention takes "
                        "%s of a multiple of 128 tokens", m->doc_len, p->cp, p->cp > 1 ? "per-rank blocks" : "documents");
  if (m->window && p->cp > 1)
    return npu_cfg_fail(cfg, diag, "plan.cp", "context parallelism over sliding-window layers (model.window) is not "
                        "modelled: each rank's band would need the ring's neighbours only");
  if (m->dsa.topk && p->cp > 1)
    return npu_cfg_fail(cfg, diag, "plan.cp", "context parallelism with sparse attention (model.dsa.topk) is not "
                        "modelled: each query's keys are the indexer's choice over the whole prefix");
  if (m->vision.layers && p->cp > 1)
    return npu_cfg_fail(cfg, diag, "plan.cp", "context parallelism with a vision encoder (model.vision) is not "
                        "modelled: the encoder's images would split over the CP ranks");
  if (m->vision.layers && (m->vision.heads % p->tp || m->vision.ffn % p->tp || m->hidden % p->tp))
    return npu_cfg_fail(cfg, diag, "plan.tp", "tp %d must divide the vision encoder's %d heads and MLP size %d",
                        p->tp, m->vision.heads, m->vision.ffn);
  if (m->linear.heads && p->cp > 1)
    return npu_cfg_fail(cfg, diag, "plan.cp", "context parallelism over linear-attention layers (model.linear) is not "
                        "modelled: the gated delta rule's state would pass from rank to rank along the sequence");
  if (m->seq_len % (p->cp * (p->sp ? p->tp : 1)))
    return npu_cfg_fail(cfg, diag, "plan.cp", "sequence %d does not split over cp %d%s", m->seq_len, p->cp,
                        p->sp ? " x tp (sequence parallel)" : "");
  if (p->global_batch % (p->micro_batch * p->dp))
    return npu_cfg_fail(cfg, diag, "plan.global_batch",
                        "global batch %d does not split into micro-batches of %d over dp %d", p->global_batch,
                        p->micro_batch, p->dp);
  int mb = wl_plan_microbatches(p);
  if (p->schedule == WL_SCHED_INTERLEAVED && mb % p->pp)
    return npu_cfg_fail(cfg, diag, "plan.global_batch",
                        "the interleaved schedule needs the %d micro-batches to be a multiple of pp %d", mb, p->pp);
  if (p->zero < 0 || p->zero > 3) return npu_cfg_fail(cfg, diag, "plan.zero", "ZeRO stage 0..3, got %d", p->zero);
  if (p->zero_shard) {
    int n = p->dp * p->cp;
    if (p->zero_shard > n || n % p->zero_shard)
      return npu_cfg_fail(cfg, diag, "plan.zero_shard", "a shard of %d ranks does not divide the data-parallel "
                          "group dp x cp = %d", p->zero_shard, n);
    if (p->zero_shard < n && p->zero < 1)
      return npu_cfg_fail(cfg, diag, "plan.zero_shard", "sharding over %d of the %d data-parallel ranks needs a "
                          "ZeRO stage (plan.zero >= 1): without one nothing is sharded", p->zero_shard, n);
    if (p->zero_shard < n && p->ep > 1)
      return npu_cfg_fail(cfg, diag, "plan.zero_shard", "npusim shards the routed experts over their whole "
                          "data-parallel group: hybrid sharding (%d of %d ranks) with ep %d is not modelled",
                          p->zero_shard, n, p->ep);
  }
  if (m->moe.experts) {
    if (m->moe.experts % p->ep)
      return npu_cfg_fail(cfg, diag, "plan.ep", "ep %d must divide the %d experts", p->ep, m->moe.experts);
    if (!p->etp) p->etp = p->tp;
    int n = p->tp * p->cp * p->dp; /* a stage's ranks: the expert grid folds onto them */
    if (n % (p->etp * p->ep))
      return npu_cfg_fail(cfg, diag, p->etp != p->tp ? "plan.etp" : "plan.ep",
                          "expert TP %d x ep %d must divide a stage's tp x cp x dp = %d ranks (MoE parallel "
                          "folding: the expert grid etp x ep x expert-dp lies on the same ranks)", p->etp, p->ep, n);
    if (m->moe.ffn % p->etp)
      return npu_cfg_fail(cfg, diag, "plan.etp", "expert TP %d must divide the experts' MLP size %d", p->etp,
                          m->moe.ffn);
    if (p->etp != p->tp && p->tp > 1 && !p->sp)
      return npu_cfg_fail(cfg, diag, "plan.etp",
                          "expert TP %d differs from tp %d: the experts then take each TP rank's own tokens, "
                          "which needs sequence parallelism (plan.sp; Megatron requires it for MoE with TP)",
                          p->etp, p->tp);
  } else if (p->ep != 1) {
    return npu_cfg_fail(cfg, diag, "plan.ep", "expert parallelism needs an MoE model (model.moe.experts)");
  } else if (p->etp && p->etp != p->tp) {
    return npu_cfg_fail(cfg, diag, "plan.etp", "expert tensor parallelism needs an MoE model (model.moe.experts)");
  }
  if (!p->etp) p->etp = p->tp;
  int rcm = parse_rc_modules(cfg, p, m, diag);
  if (rcm) return rcm;
  if (p->fp8_moe_act_input && (p->dtype != WL_DTYPE_FP8 || m->moe.experts <= 1))
    return npu_cfg_fail(cfg, diag, "plan.fp8_moe_act_input",
                        "keeping the experts' activation input in fp8 needs fp8 training (plan.dtype = \"fp8\") and an "
                        "MoE model");
  if (p->fp8_dispatch && (p->dtype != WL_DTYPE_FP8 || m->moe.experts <= 1))
    return npu_cfg_fail(cfg, diag, "plan.fp8_dispatch",
                        "an fp8 dispatch needs fp8 training (plan.dtype = \"fp8\") and an MoE model");
  if (p->recompute != WL_RECOMPUTE_FULL && (p->recompute_layers || p->recompute_method != WL_RCM_UNIFORM))
    return npu_cfg_fail(cfg, diag, p->recompute_layers ? "plan.recompute_layers" : "plan.recompute_method",
                        "which layers to recompute needs plan.recompute = \"full\"");
  if (p->recompute == WL_RECOMPUTE_FULL) {
    int most = m->layers / (p->pp * p->vpp); /* the layers of an even chunk */
    for (int c = 0; c < p->pp * p->vpp; c++) {
      int n = wl_plan_chunk_layers(p, m->layers, p->pp * p->vpp, c);
      if (n > most) most = n;
    }
    if (p->recompute_layers > most)
      return npu_cfg_fail(cfg, diag, "plan.recompute_layers", "%d layers, but a model chunk has at most %d",
                          p->recompute_layers, most);
  }
  if (!p->grad_accum_fusion && wl_plan_zero3(p))
    return npu_cfg_fail(cfg, diag, "plan.grad_accum_fusion",
                        "false is Megatron's add of each weight gradient into its gradient buffer (main_grad); "
                        "with plan.zero = 3 (FSDP, DeepSpeed stage 3) the gradient is reduced as its GEMM writes it");
  if (p->zero3_impl != WL_Z3_FLAT && !wl_plan_zero3(p))
    return npu_cfg_fail(cfg, diag, "plan.zero3_impl",
                        "\"%s\" is how ZeRO-3 holds its sharded parameters; it needs plan.zero = 3 (here %d)",
                        zero3_impl_names[p->zero3_impl], p->zero);
  if (p->offload_layers) {
    int fewest = m->layers; /* the layers of the smallest chunk */
    for (int c = 0; c < p->pp * p->vpp; c++) {
      int n = wl_plan_chunk_layers(p, m->layers, p->pp * p->vpp, c);
      if (n < fewest) fewest = n;
    }
    if (p->offload_layers >= fewest)
      return npu_cfg_fail(cfg, diag, "plan.offload_layers", "%d layers offloaded per model chunk, but a chunk has %d: "
                          "offload fewer than its layers (Transformer Engine's CPU offload keeps the last on the "
                          "device)", p->offload_layers, fewest);
    if (!sys->has_node || sys->node.host.bandwidth_bytes_per_s <= 0)
      return npu_cfg_fail(cfg, diag, "plan.offload_layers", "activation offload moves over the host link: %s gives "
                          "no node.host.bandwidth (set it: a PCIe 5.0 x16 link moves about 64GBps each way)",
                          sys->has_node ? sys->node.name : "a single chip");
    if (p->schedule == WL_SCHED_DUALPIPE || p->ep_overlap != WL_EPO_NONE)
      return npu_cfg_fail(cfg, diag, "plan.offload_layers", "npusim does not offload the activations of F&B pairs "
                          "(dualpipe, plan.ep_overlap)");
  }
  if (p->tp_overlap != WL_TPO_NONE && p->tp > 1 && !p->sp)
    return npu_cfg_fail(cfg, diag, "plan.tp_overlap",
                        "overlapping TP communication needs sequence parallelism (plan.sp = true), as Megatron "
                        "and MindSpeed require: the overlapped collectives are SP's all-gathers and reduce-scatters");
  bool ascend = sys->chip.org == ARCH_ORG_SPLIT;
  if (p->tp_overlap == WL_TPO_MEGATRON && ascend)
    return npu_cfg_fail(cfg, diag, "plan.tp_overlap",
                        "\"megatron\" is Transformer Engine's userbuffers overlap, on GPUs; %s is an Ascend chip: "
                        "use \"mc2\"", sys->chip.name);
  if (p->tp_overlap == WL_TPO_MC2 && !ascend)
    return npu_cfg_fail(cfg, diag, "plan.tp_overlap",
                        "\"mc2\" is CANN's fused matmul-communication kernels, on Ascend; %s is not an Ascend chip: "
                        "use \"megatron\"", sys->chip.name);
  if (p->mc2_comm == WL_MC2_AIV) {
    if (p->tp_overlap != WL_TPO_MC2 || p->tp < 2)
      return npu_cfg_fail(cfg, diag, "plan.mc2_comm_mode", "\"aiv\" is how MC2 moves its data: it needs "
                          "plan.tp_overlap = \"mc2\" and plan.tp > 1");
    if (!sys->has_node || sys->node.topology != ARCH_NODE_FULL_MESH || sys->node.dies_per_package > 1)
      return npu_cfg_fail(cfg, diag, "plan.mc2_comm_mode", "npusim's MC2 kernels run on a server whose devices are "
                          "joined by a full mesh of links (as the Atlas 800T A2's); %s is not one: use \"ai_cpu\"",
                          sys->has_node ? sys->node.name : "a single chip");
    if (p->tp > sys->node.devices || p->tp > 16)
      return npu_cfg_fail(cfg, diag, "plan.mc2_comm_mode", "the MC2 kernels run the TP group on one server: tp %d, "
                          "but a %s server has %d devices (and the kernels at most 16)", p->tp, sys->node.name,
                          sys->node.devices);
    if (p->dtype == WL_DTYPE_FP8)
      return npu_cfg_fail(cfg, diag, "plan.mc2_comm_mode", "npusim's MC2 kernels take fp16 or bf16 GEMMs, not fp8: "
                          "use \"ai_cpu\"");
  }
  if (p->ep_overlap != WL_EPO_NONE) {
    const char *fw = p->ep_overlap == WL_EPO_MEGATRON ? "Megatron's combined 1F1B" : "MindSpeed's --moe-fb-overlap";
    if (p->ep < 2)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "overlapping the expert all-to-alls needs an MoE model with "
                          "plan.ep > 1 (ep %d: the tokens stay on the rank)", p->ep);
    if (p->ep_overlap == WL_EPO_MEGATRON && ascend)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "\"megatron\" is Megatron-Core's, on GPUs; %s is an Ascend "
                          "chip: use \"mindspeed\"", sys->chip.name);
    if (p->ep_overlap == WL_EPO_MINDSPEED && !ascend)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "\"mindspeed\" is MindSpeed's, on Ascend; %s is not an "
                          "Ascend chip: use \"megatron\"", sys->chip.name);
    if (p->schedule == WL_SCHED_DUALPIPE)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "the dualpipe schedule pairs its forwards and backwards "
                          "itself: leave plan.ep_overlap \"none\"");
    if (p->pp > 1 ? p->schedule != WL_SCHED_INTERLEAVED : p->schedule != WL_SCHED_1F1B)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "%s pairs the steady state of the interleaved schedule "
                          "(pp > 1, with vpp) or of 1F1B without pipeline stages; pp %d with the \"%s\" schedule "
                          "is neither", fw, p->pp, sched_names[p->schedule]);
    if (mb < 2)
      return npu_cfg_fail(cfg, diag, "plan.global_batch", "%s pairs the forward of one micro-batch with the "
                          "backward of another: %d micro-batch per step", fw, mb);
    if (wl_plan_zero3(p))
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "npusim does not pair slots that gather ZeRO-3 "
                          "parameters piece by piece: use plan.zero <= 2 with plan.ep_overlap");
    if (p->ep_overlap == WL_EPO_MINDSPEED && p->etp != 1)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "MindSpeed's --moe-fb-overlap needs "
                          "--expert-tensor-parallel-size 1: set plan.etp = 1 (now %d)", p->etp);
    if (p->ep_overlap == WL_EPO_MINDSPEED && p->overlap_grad_reduce)
      return npu_cfg_fail(cfg, diag, "plan.ep_overlap", "MindSpeed's --moe-fb-overlap does not run with "
                          "--overlap-grad-reduce: set plan.overlap_grad_reduce = false");
  }
  /* the schedule's own shape rules (DualPipe: even pp and micro-batches), located in the file */
  struct npu_diag sd;
  npu_diag_clear(&sd);
  if (wl_schedule_check((enum wl_schedule)p->schedule, p->pp, p->vpp, mb, &sd))
    return npu_cfg_fail(cfg, diag, sd.key, "%s", sd.msg);
  return 0;
}

enum npu_dtype wl_plan_wide_dtype(const struct wl_plan *p)
{
  return p->dtype == WL_DTYPE_FP16 ? NPU_DT_FP16 : NPU_DT_BF16;
}

bool wl_plan_is_fp8(const struct wl_plan *p)
{
  return p->dtype == WL_DTYPE_FP8;
}

enum npu_dtype wl_plan_fp8_dtype(const struct wl_plan *p)
{
  return p->fp8_recipe == WL_FP8_MX ? NPU_DT_MXFP8 : NPU_DT_FP8_E4M3;
}
