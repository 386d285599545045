/*
 * summary.c - training results as text, JSON and CSV.
 */
#include "workloads/summary.h"
#include "workloads/opstats.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"
#include "common/strutil.h"
#include "common/units.h"
#include "ops/op.h"
#include "ops/plugin.h"
#include "report/columns.h"
#include "workloads/expand.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *dtype_name(const struct wl_plan *p)
{
  return p->dtype == WL_DTYPE_FP16 ? "fp16" : "bf16";
}

/* plan.tp_overlap's name, "mc2/aiv" for MC2 whose own vector cores move the data. */
static const char *tp_overlap_label(const struct wl_plan *p)
{
  if (p->tp_overlap == WL_TPO_MC2 && p->mc2_comm == WL_MC2_AIV) return "mc2/aiv";
  return wl_tp_overlap_name((enum wl_tp_overlap)p->tp_overlap);
}

void wl_plan_text(const struct wl_plan *p, char *buf, size_t n)
{
  char rc[128];
  snprintf(rc, sizeof rc, "%s", (const char *[]){"none", "selective", "full"}[p->recompute]);
  if (p->recompute == WL_RECOMPUTE_FULL && p->recompute_layers)
    npu_appendf(rc, sizeof rc, " (%s, %d layers)", p->recompute_method == WL_RCM_BLOCK ? "block" : "uniform",
            p->recompute_layers);
  if (p->recompute == WL_RECOMPUTE_SELECTIVE) npu_appendf(rc, sizeof rc, " (%s)", wl_plan_recompute_modules(p));
  snprintf(buf, n, "TP%d%s CP%d PP%d%s DP%d, %s, ZeRO-%d, recompute %s, micro-batch %d, global batch %d", p->tp,
           p->sp ? " (SP)" : "", p->cp, p->pp, p->vpp > 1 ? "" : "", p->dp, wl_schedule_name((enum wl_schedule)p->schedule),
           p->zero, rc, p->micro_batch, p->global_batch);
  if (p->vpp > 1) npu_appendf(buf, n, ", %d chunks per stage", p->vpp);
  if (p->zero >= 1 && wl_plan_shard(p) < p->dp * p->cp)
    npu_appendf(buf, n, ", hybrid sharding in groups of %d", wl_plan_shard(p));
  if (p->grad_reduce) npu_appendf(buf, n, ", gradients reduced in bf16");
  if (p->zero3_impl == WL_Z3_PER_PARAM) npu_appendf(buf, n, ", per-parameter shards (FSDP2)");
  if (p->fusion == WL_FUSION_EAGER) npu_appendf(buf, n, ", eager modules");
  if (p->ep > 1) /* the expert grid (MoE parallel folding, plan.h) */
    npu_appendf(buf, n, ", EP%d (expert TP %d, expert DP %d%s)", p->ep, p->etp, wl_plan_edp(p),
                p->etp < p->tp ? ", EP across TP ranks" : "");
  else if (p->etp != p->tp)
    npu_appendf(buf, n, ", expert TP %d", p->etp);
  if (p->tp_overlap != WL_TPO_NONE)
    npu_appendf(buf, n, ", TP overlap %s", tp_overlap_label(p));
  if (p->ep_overlap != WL_EPO_NONE)
    npu_appendf(buf, n, ", EP overlap %s", wl_ep_overlap_name((enum wl_ep_overlap)p->ep_overlap));
  if (p->optimizer_moments) npu_appendf(buf, n, ", Adam moments in bf16");
  if (p->fp8_moe_act_input) npu_appendf(buf, n, ", experts' activation input in fp8");
  if (p->fp8_dispatch) npu_appendf(buf, n, ", fp8 dispatch");
  if (p->offload_layers)
    npu_appendf(buf, n, ", activations of %d layer%s per chunk offloaded", p->offload_layers,
                p->offload_layers > 1 ? "s" : "");
}

/* The communication kinds, in the breakdown's order. */
static const enum wl_cat comm_cats[] = {WL_CAT_TP, WL_CAT_CP, WL_CAT_EP, WL_CAT_DP, WL_CAT_PP, WL_CAT_OFFLOAD};
static const char *const comm_names[] = {"tp", "cp", "ep", "dp", "pp", "offload"};

/* What of each kind of communication the slowest stage hid beside its compute and what it
 * waited for; the kinds the step has. */
static void comm_line(const struct wl_result *r, struct npu_buf *out)
{
  char line[512] = "";
  size_t n = 0;
  for (size_t k = 0; k < sizeof comm_cats / sizeof comm_cats[0]; k++) {
    double e = r->cat_s[comm_cats[k]], h = r->hidden_s[comm_cats[k]];
    if (e <= 0 && h <= 0) continue;
    n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %.3g / %.3g", n ? ", " : "", comm_names[k], h, e);
    if (n >= sizeof line) break;
  }
  if (line[0])
    npu_buf_printf(out, "  communication  hidden beside the compute / exposed, s (slowest stage): %s\n", line);
}

void wl_summary_text(const struct wl_job *job, const struct wl_result *r, struct npu_buf *out)
{
  const struct wl_model *m = &job->model;
  const struct wl_plan *p = &job->plan;
  char plan[512];
  wl_plan_text(p, plan, sizeof plan);
  char mtp[96] = "";
  if (m->mtp_layers)
    snprintf(mtp, sizeof mtp, ", with %d MTP module%s of %.1fB", m->mtp_layers, m->mtp_layers > 1 ? "s" : "",
             wl_model_mtp_params(m) / 1e9);
  npu_buf_printf(out, "%s (%.1fB parameters%s) on %d x %s (%s)\n", m->title[0] ? m->title : m->name,
                 wl_model_params(m) / 1e9, mtp, job->devices, job->sys.chip.name,
                 job->sys.has_cluster ? job->sys.cluster.name : job->sys.has_node ? job->sys.node.name : "one chip");
  npu_buf_printf(out, "  plan           %s, %d micro-batches\n", plan, job->microbatches);
  if (p->recompute == WL_RECOMPUTE_SELECTIVE && m->attention == WL_ATTN_FLASH && !(p->rc_modules & ~WL_RCM_CORE_ATTN))
    npu_buf_printf(out, "                 (selective recompute of core_attn alone changes nothing with FlashAttention: its "
                        "backward recomputes the scores anyway; plan.recompute_modules names others)\n");
  npu_buf_printf(out, "  step time      %.4g s\n", r->step_s);
  npu_buf_printf(out, "  throughput     %.6g tokens/s (%.4g per device)\n", r->tokens_per_s, r->tokens_per_s / job->devices);
  npu_buf_printf(out, "  MFU            %.1f%%  = model FLOPs / (step x devices x peak)\n", 100 * r->mfu);
  npu_buf_printf(out, "                 model FLOPs %.4g = 72 B s l h^2 (1 + s/6h + V/12lh) generalised (6 x matmul "
                      "params + 12 l s a d per token%s%s)\n", r->model_flops,
                 job->model.linear.heads ? "; linear layers 18 k_dim v_dim per value head" : "",
                 job->model.vision.layers ? "; the vision encoder's per image token" : "");
  npu_buf_printf(out, "                 peak %.4g FLOP/s per device (dense %s)\n", r->peak_flops_per_s, dtype_name(p));
  npu_buf_printf(out, "  HFU            %.1f%%  (model FLOPs + recomputation: %.4g)\n", 100 * r->hfu,
                 r->hw_flops);
  npu_buf_printf(out, "  bottleneck     %s\n", r->bottleneck);
  npu_buf_printf(out, "  memory         %.2f GiB peak per device (stage %d): weights %.2f, gradients %.2f, optimizer "
                      "%.2f, activations %.2f (%d micro-batches in flight), logits %.2f, buffers %.2f; HBM %.0f GiB%s\n",
                 r->peak_mem.total_bytes / GIB, r->peak_mem.stage, r->peak_mem.weights_bytes / GIB,
                 r->peak_mem.grads_bytes / GIB, r->peak_mem.optimizer_bytes / GIB, r->peak_mem.activations_bytes / GIB,
                 r->peak_mem.inflight, r->peak_mem.logits_bytes / GIB, r->peak_mem.comm_bytes / GIB,
                 (double)job->sys.chip.hbm.size_bytes / GIB, r->oom ? "  OUT OF MEMORY" : "");
  if (job->model.moe.experts)
    npu_buf_printf(out, "  experts        load max/mean %.2f per expert, %.2f per EP rank (mean over layers and "
                        "micro-batches); %.2f%% of token copies dropped; exposed all-to-all %.3g s, hidden %.3g s\n",
                   r->moe_max_mean_expert, r->moe_max_mean_rank, 100 * r->moe_dropped_fraction, r->cat_s[WL_CAT_EP],
                   r->hidden_s[WL_CAT_EP]);
  if (p->tp_overlap != WL_TPO_NONE)
    npu_buf_printf(out, "  TP overlap     %s: %.3g s of TP communication hidden under GEMMs, %.3g s exposed, GEMMs "
                        "%.3g s slower beside it (slowest stage)\n",
                   tp_overlap_label(p), r->hidden_s[WL_CAT_TP], r->cat_s[WL_CAT_TP],
                   r->cat_s[WL_CAT_INTERFERE]);
  comm_line(r, out);
  bool ep = r->ep > 1;
  npu_buf_printf(out, "  breakdown (per %s, %% of the step)\n    %s ", ep ? "stage and EP rank" : "stage",
                 ep ? "stage.ep" : "   stage");
  for (int c = 0; c < WL_CAT_COUNT; c++) npu_buf_printf(out, " %9s", wl_cat_name((enum wl_cat)c));
  npu_buf_printf(out, "\n");
  for (int s = 0; s < r->nstages; s++) {
    if (ep) npu_buf_printf(out, "    %5d.%-3d", r->stages[s].stage, r->stages[s].ep);
    else npu_buf_printf(out, "    %8d ", s);
    for (int c = 0; c < WL_CAT_COUNT; c++) npu_buf_printf(out, " %9.1f", 100 * r->stages[s].cat_s[c] / r->step_s);
    npu_buf_printf(out, "\n");
  }
  wl_op_stats_text(r, 8, out);
  npu_buf_printf(out, "  kernels        %d distinct (%zu costed by the chip model, %zu from the cost cache), %d "
                      "memoised collectives\n", r->nkernels, r->kernels_costed, r->kernel_cache_hits, r->ncolls);
  for (int i = 0; i < WL_NSUBST; i++) {
    const char *op = wl_model_subst_op(i), *to = wl_model_kernel_for(&job->model, op);
    if (strcmp(to, op))
      npu_buf_printf(out, "  substituted    every %s call costed by %s%s%s\n", op, to,
                     op_origin(op_find(to)) ? ", loaded from " : "", op_origin(op_find(to)) ? op_origin(op_find(to)) : "");
  }
  npu_buf_printf(out, "  replay         %zu collectives simulated as flows, %.3g s wall\n", r->collectives, r->wall_s);
}

static void num(struct npu_json *j, const char *k, double v)
{
  npu_json_key(j, k);
  npu_json_number(j, v);
}

void wl_summary_json(const struct wl_job *job, const struct wl_result *r, struct npu_buf *out)
{
  struct npu_json j;
  npu_json_init(&j, out);
  npu_json_object_begin(&j);
  npu_json_key(&j, "scenario");
  npu_json_string(&j, job->path);
  npu_json_key(&j, "model");
  npu_json_string(&j, job->model.name);
  npu_json_key(&j, "system");
  npu_json_string(&j, job->sys.chip.name);
  npu_json_key(&j, "devices");
  npu_json_int(&j, job->devices);
  npu_json_key(&j, "seed");
  npu_json_int(&j, job->run.seed);
  char plan[512];
  wl_plan_text(&job->plan, plan, sizeof plan);
  npu_json_key(&j, "plan");
  npu_json_string(&j, plan);
  num(&j, "step_time_s", r->step_s);
  num(&j, "tokens_per_s", r->tokens_per_s);
  num(&j, "mfu", r->mfu);
  num(&j, "hfu", r->hfu);
  num(&j, "model_flops", r->model_flops);
  num(&j, "hardware_flops", r->hw_flops);
  num(&j, "peak_flops_per_s", r->peak_flops_per_s);
  npu_json_key(&j, "mfu_formula");
  npu_json_string(&j, "model_flops / (step_time_s x devices x peak_flops_per_s); model_flops = tokens x (6 x matmul "
                      "parameters + 12 x layers x seq x heads x head_dim), Korthikanti et al. 2022");
  npu_json_key(&j, "bottleneck");
  npu_json_string(&j, r->bottleneck);
  num(&j, "bubble_fraction", r->bubble_fraction);
  if (job->model.moe.experts) {
    npu_json_key(&j, "moe");
    npu_json_object_begin(&j);
    num(&j, "load_max_over_mean_expert", r->moe_max_mean_expert);
    num(&j, "load_max_over_mean_ep_rank", r->moe_max_mean_rank);
    num(&j, "dropped_fraction", r->moe_dropped_fraction);
    num(&j, "exposed_all_to_all_s", r->cat_s[WL_CAT_EP]);
    num(&j, "hidden_all_to_all_s", r->hidden_s[WL_CAT_EP]);
    npu_json_key(&j, "ep_overlap");
    npu_json_string(&j, wl_ep_overlap_name((enum wl_ep_overlap)job->plan.ep_overlap));
    npu_json_object_end(&j);
  }
  npu_json_key(&j, "breakdown_s");
  npu_json_object_begin(&j);
  for (int c = 0; c < WL_CAT_COUNT; c++) num(&j, wl_cat_name((enum wl_cat)c), r->cat_s[c]);
  npu_json_object_end(&j);
  npu_json_key(&j, "tp_overlap");
  npu_json_object_begin(&j);
  npu_json_key(&j, "method");
  npu_json_string(&j, tp_overlap_label(&job->plan));
  num(&j, "hidden_s", r->hidden_s[WL_CAT_TP]);
  num(&j, "exposed_s", r->cat_s[WL_CAT_TP]);
  num(&j, "interference_s", r->cat_s[WL_CAT_INTERFERE]);
  npu_json_object_end(&j);
  npu_json_key(&j, "communication");
  npu_json_object_begin(&j);
  for (size_t k = 0; k < sizeof comm_cats / sizeof comm_cats[0]; k++) {
    npu_json_key(&j, comm_names[k]);
    npu_json_object_begin(&j);
    num(&j, "exposed_s", r->cat_s[comm_cats[k]]);
    num(&j, "hidden_s", r->hidden_s[comm_cats[k]]);
    npu_json_object_end(&j);
  }
  npu_json_object_end(&j);
  npu_json_key(&j, "operators"); /* of the slowest stage, heaviest first (workloads/opstats.h) */
  wl_op_stats_json(r, &j);
  npu_json_key(&j, "memory");
  npu_json_object_begin(&j);
  num(&j, "peak_bytes", r->peak_mem.total_bytes);
  npu_json_key(&j, "peak_stage");
  npu_json_int(&j, r->peak_mem.stage);
  num(&j, "weights_bytes", r->peak_mem.weights_bytes);
  num(&j, "grads_bytes", r->peak_mem.grads_bytes);
  num(&j, "optimizer_bytes", r->peak_mem.optimizer_bytes);
  num(&j, "activations_bytes", r->peak_mem.activations_bytes);
  num(&j, "logits_bytes", r->peak_mem.logits_bytes);
  num(&j, "comm_bytes", r->peak_mem.comm_bytes);
  num(&j, "hbm_bytes", (double)job->sys.chip.hbm.size_bytes);
  npu_json_key(&j, "oom");
  npu_json_bool(&j, r->oom);
  npu_json_object_end(&j);
  npu_json_key(&j, "stages");
  npu_json_array_begin(&j);
  for (int s = 0; s < r->nstages; s++) {
    const struct wl_stage_result *sr = &r->stages[s];
    npu_json_object_begin(&j);
    npu_json_key(&j, "stage");
    npu_json_int(&j, sr->stage);
    npu_json_key(&j, "ep_rank");
    npu_json_int(&j, sr->ep);
    num(&j, "end_s", sr->end_s);
    num(&j, "memory_bytes", sr->mem.total_bytes);
    npu_json_key(&j, "breakdown_s");
    npu_json_object_begin(&j);
    for (int c = 0; c < WL_CAT_COUNT; c++) num(&j, wl_cat_name((enum wl_cat)c), sr->cat_s[c]);
    npu_json_object_end(&j);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  npu_json_key(&j, "kernels");
  npu_json_array_begin(&j);
  for (int k = 0; k < r->nkernels; k++) {
    const struct wl_kernel *kn = &r->kernels[k];
    npu_json_object_begin(&j);
    npu_json_key(&j, "op");
    npu_json_string(&j, kn->op);
    npu_json_key(&j, "args");
    npu_json_string(&j, kn->args);
    num(&j, "time_s", kn->time_s);
    num(&j, "flops", kn->flops);
    npu_json_key(&j, "bottleneck");
    npu_json_string(&j, kn->bottleneck);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  npu_json_key(&j, "collectives");
  npu_json_array_begin(&j);
  for (int c = 0; c < r->ncolls; c++) {
    const struct wl_coll *cl = &r->colls[c];
    npu_json_object_begin(&j);
    npu_json_key(&j, "op");
    npu_json_string(&j, ic_op_name(cl->op));
    num(&j, "bytes", cl->bytes);
    npu_json_key(&j, "algorithm");
    npu_json_string(&j, cl->algo);
    num(&j, "time_s", cl->time_s);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
}

/* ------------------------------------------------------------------ columns */

#define J(ctx) (((const struct wl_report *)(ctx))->job)
#define R(ctx) (((const struct wl_report *)(ctx))->res)

static const char *c_scenario(const void *x, int i) { (void)i; return J(x)->path; }
static const char *c_model(const void *x, int i) { (void)i; return J(x)->model.name; }
static const char *c_system(const void *x, int i) { (void)i; return J(x)->sys.chip.name; }
static long long c_devices(const void *x, int i) { (void)i; return J(x)->devices; }
static long long c_tp(const void *x, int i) { (void)i; return J(x)->plan.tp; }
static long long c_cp(const void *x, int i) { (void)i; return J(x)->plan.cp; }
static long long c_pp(const void *x, int i) { (void)i; return J(x)->plan.pp; }
static long long c_dp(const void *x, int i) { (void)i; return J(x)->plan.dp; }
static long long c_vpp(const void *x, int i) { (void)i; return J(x)->plan.vpp; }
static long long c_micro_batch(const void *x, int i) { (void)i; return J(x)->plan.micro_batch; }
static long long c_global_batch(const void *x, int i) { (void)i; return J(x)->plan.global_batch; }
static double c_step(const void *x, int i) { (void)i; return R(x)->step_s; }
static double c_tokens(const void *x, int i) { (void)i; return R(x)->tokens_per_s; }
static double c_mfu(const void *x, int i) { (void)i; return R(x)->mfu; }
static double c_hfu(const void *x, int i) { (void)i; return R(x)->hfu; }
static double c_mem_peak(const void *x, int i) { (void)i; return R(x)->peak_mem.total_bytes; }
static long long c_oom(const void *x, int i) { (void)i; return R(x)->oom ? 1 : 0; }
static double c_bubble(const void *x, int i) { (void)i; return R(x)->bubble_fraction; }
static double c_moe_expert(const void *x, int i) { (void)i; return R(x)->moe_max_mean_expert; }
static double c_moe_dropped(const void *x, int i) { (void)i; return R(x)->moe_dropped_fraction; }
static double c_cat(const void *x, int i) { return R(x)->cat_s[i]; }
static double c_host(const void *x, int i) { (void)i; return R(x)->cat_s[WL_CAT_HOST]; }
static const char *c_schedule(const void *x, int i)
{
  (void)i;
  return wl_schedule_name((enum wl_schedule)J(x)->plan.schedule);
}
static const char *c_recompute(const void *x, int i)
{
  (void)i;
  return (const char *[]){"none", "selective", "full"}[J(x)->plan.recompute];
}
static const char *c_recompute_modules(const void *x, int i)
{
  (void)i;
  return wl_plan_recompute_modules(&J(x)->plan);
}
static long long c_zero(const void *x, int i) { (void)i; return J(x)->plan.zero; }
static long long c_zero_shard(const void *x, int i) { (void)i; return wl_plan_shard(&J(x)->plan); }
static const char *c_fusion(const void *x, int i)
{
  (void)i;
  return wl_fusion_name((enum wl_fusion)J(x)->plan.fusion);
}
static const char *c_grad_reduce(const void *x, int i)
{
  (void)i;
  return J(x)->plan.grad_reduce ? "bf16" : "fp32";
}
static long long c_sp(const void *x, int i) { (void)i; return J(x)->plan.sp ? 1 : 0; }
static long long c_ep(const void *x, int i) { (void)i; return J(x)->plan.ep; }
static long long c_etp(const void *x, int i) { (void)i; return J(x)->plan.etp; }
static long long c_seq(const void *x, int i) { (void)i; return J(x)->model.seq_len; }
static long long c_doc(const void *x, int i) { (void)i; return wl_model_attn_len(&J(x)->model); }
static long long c_mtp(const void *x, int i) { (void)i; return J(x)->model.mtp_layers; }
static long long c_offload_layers(const void *x, int i) { (void)i; return J(x)->plan.offload_layers; }
static long long c_accum(const void *x, int i) { (void)i; return J(x)->plan.grad_accum_fusion; }
static const char *c_zero3_impl(const void *x, int i)
{
  (void)i;
  return wl_zero3_impl_name((enum wl_zero3_impl)J(x)->plan.zero3_impl);
}
static const char *c_dtype(const void *x, int i)
{
  (void)i;
  return (const char *[]){"bf16", "fp16", "fp8"}[J(x)->plan.dtype];
}
static double c_interfere(const void *x, int i) { (void)i; return R(x)->cat_s[WL_CAT_INTERFERE]; }
static double c_offload(const void *x, int i) { (void)i; return R(x)->cat_s[WL_CAT_OFFLOAD]; }
static double c_offload_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_OFFLOAD]; }
static double c_tp_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_TP]; }
static double c_ep_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_EP]; }
static double c_cp_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_CP]; }
static double c_dp_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_DP]; }
static double c_pp_hidden(const void *x, int i) { (void)i; return R(x)->hidden_s[WL_CAT_PP]; }
static const char *c_tp_overlap(const void *x, int i)
{
  (void)i;
  return tp_overlap_label(&J(x)->plan);
}
static const char *c_ep_overlap(const void *x, int i)
{
  (void)i;
  return wl_ep_overlap_name((enum wl_ep_overlap)J(x)->plan.ep_overlap);
}
static double c_launches(const void *x, int i)
{
  (void)i;
  const struct wl_result *r = R(x);
  double most = 0; /* a rank of the slowest stage: the most launches among its EP ranks */
  for (int k = 0; k < r->nstages; k++)
    if (r->stages[k].stage == r->slowest_stage && r->stages[k].launches > most) most = r->stages[k].launches;
  return most;
}
static const char *cat_name(int i) { return wl_cat_name((enum wl_cat)i); }
static const char *cat_desc(int i) { return wl_cat_desc((enum wl_cat)i); }
static const char *c_bottleneck(const void *x, int i) { (void)i; return R(x)->bottleneck; }
static double c_tokens_dev(const void *x, int i) { (void)i; return R(x)->tokens_per_s / J(x)->devices; }
/* as Korthikanti et al. report them: the weights, gradients and optimizer states of a stage of
 * transformer layers only (stage 1 when there are several), stage 0's activations */
static double c_mem_static(const void *x, int i)
{
  (void)i;
  const struct wl_result *r = R(x);
  const struct wl_mem *m = &r->stages[r->nstages > 1 ? 1 : 0].mem;
  return m->weights_bytes + m->grads_bytes + m->optimizer_bytes;
}
static double c_mem_act(const void *x, int i) { (void)i; return R(x)->stages[0].mem.activations_bytes; }

/* summary.csv of a training step; the order is the contract (new columns at the end). */
static const struct rpt_column columns[] = {
    {"scenario", RPT_STRING, "text", "the scenario file (or the sweep point's name)", .text = c_scenario},
    {"model", RPT_STRING, "text", "model name (model.name or its preset)", .text = c_model},
    {"system", RPT_STRING, "text", "the chip's name", .text = c_system},
    {"devices", RPT_INT, "", "devices of the system", .integer = c_devices},
    {"tp", RPT_INT, "", "tensor-parallel size", .integer = c_tp},
    {"cp", RPT_INT, "", "context-parallel size", .integer = c_cp},
    {"pp", RPT_INT, "", "pipeline stages", .integer = c_pp},
    {"dp", RPT_INT, "", "data-parallel size (derived when not set)", .integer = c_dp},
    {"vpp", RPT_INT, "", "model chunks per pipeline stage (interleaved schedules)", .integer = c_vpp},
    {"micro_batch", RPT_INT, "", "sequences per micro-batch", .integer = c_micro_batch},
    {"global_batch", RPT_INT, "", "sequences per step", .integer = c_global_batch},
    {"step_time_s", RPT_REAL, "s", "time of one training step", .real = c_step},
    {"tokens_per_s", RPT_REAL, "tokens/s", "tokens trained per second, all devices", .real = c_tokens},
    {"mfu", RPT_REAL, "fraction", "model FLOPs / (step time x devices x dense peak of the training dtype)",
     .real = c_mfu},
    {"hfu", RPT_REAL, "fraction", "as mfu, with the recomputed kernels' FLOPs counted", .real = c_hfu},
    {"memory_peak_bytes", RPT_REAL, "bytes", "peak memory of the largest device", .real = c_mem_peak},
    {"oom", RPT_INT, "0/1", "1 when the peak memory is above the chip's HBM", .integer = c_oom},
    {"bubble_fraction", RPT_REAL, "fraction", "the schedule's bubble: least (bubble + idle) / step over the replay ranks",
     .real = c_bubble},
    {"moe_load_max_over_mean_expert", RPT_REAL, "ratio",
     "MoE: max/mean token copies per expert (mean over layers and micro-batches); 0 for dense models",
     .real = c_moe_expert},
    {"moe_dropped_fraction", RPT_REAL, "fraction", "MoE: share of token copies dropped by the capacity factor",
     .real = c_moe_dropped},
    {"%s_s", RPT_REAL, "s", "time of the slowest stage in: %s", .real = c_cat, .count = WL_CAT_HOST,
     .index_name = cat_name, .index_desc = cat_desc},
    {"bottleneck", RPT_STRING, "text", "what bounds the step, in words", .text = c_bottleneck},
    {"tokens_per_s_per_device", RPT_REAL, "tokens/s", "tokens_per_s / devices", .real = c_tokens_dev},
    {"memory_weights_optimizer_bytes", RPT_REAL, "bytes",
     "weights, gradients and optimizer states of a device of stage 1 (stage 0 with one stage)", .real = c_mem_static},
    {"memory_activations_bytes", RPT_REAL, "bytes", "activations of a device of stage 0", .real = c_mem_act},
    {"host_s", RPT_REAL, "s", "time of the slowest stage waiting for the host to dispatch kernels (host-bound)",
     .real = c_host},
    {"host_launches", RPT_REAL, "", "kernels and communication calls the host of a device of the slowest stage "
     "dispatched in the step", .real = c_launches},
    {"tp_overlap", RPT_STRING, "text", "plan.tp_overlap: none, megatron or mc2 (mc2/aiv with plan.mc2_comm_mode = aiv)",
     .text = c_tp_overlap},
    {"tp_hidden_s", RPT_REAL, "s", "TP communication of the slowest stage hidden under GEMMs (plan.tp_overlap)",
     .real = c_tp_hidden},
    {"ep_overlap", RPT_STRING, "text", "plan.ep_overlap: none, megatron or mindspeed", .text = c_ep_overlap},
    {"ep_hidden_s", RPT_REAL, "s", "all-to-all time of the slowest stage that ran beside its compute in F&B pairs "
     "(plan.ep_overlap, dualpipe) rather than being waited for", .real = c_ep_hidden},
    {"interference_s", RPT_REAL, "s",
     "time of the slowest stage in: compute slowed by overlapped TP, DP and EP communication (the cores and HBM it takes)",
     .real = c_interfere},
    {"schedule", RPT_STRING, "text", "plan.schedule", .text = c_schedule},
    {"recompute", RPT_STRING, "text", "plan.recompute: none, selective or full", .text = c_recompute},
    {"recompute_modules", RPT_STRING, "text", "plan.recompute_modules of a selective recompute, blank-separated (\"\" otherwise)",
     .text = c_recompute_modules},
    {"zero", RPT_INT, "", "ZeRO stage (plan.zero)", .integer = c_zero},
    {"zero_shard", RPT_INT, "ranks", "data-parallel ranks a ZeRO shard spans (plan.zero_shard, resolved: dp x cp for "
     "full sharding)", .integer = c_zero_shard},
    {"grad_reduce_dtype", RPT_STRING, "text", "type of the data-parallel gradient reduction (plan.grad_reduce_dtype)",
     .text = c_grad_reduce},
    {"fusion", RPT_STRING, "text", "plan.fusion: fused or eager (the norms', RoPE's, activation's and residual adds' "
     "kernels)", .text = c_fusion},
    {"sp", RPT_INT, "0/1", "sequence parallelism (plan.sp)", .integer = c_sp},
    {"ep", RPT_INT, "", "expert-parallel size (plan.ep; 1 for dense models)", .integer = c_ep},
    {"etp", RPT_INT, "", "expert tensor-parallel size (plan.etp, resolved)", .integer = c_etp},
    {"seq_len", RPT_INT, "tokens", "sequence length (model.seq_len)", .integer = c_seq},
    {"doc_len", RPT_INT, "tokens", "tokens a query attends over: model.doc_len of packed documents, else seq_len",
     .integer = c_doc},
    {"dtype", RPT_STRING, "text", "training precision (plan.dtype)", .text = c_dtype},
    {"grad_accum_fusion", RPT_INT, "0/1", "weight gradients accumulated into the gradient buffer by their GEMM "
     "(plan.grad_accum_fusion; 0: by an add kernel)", .integer = c_accum},
    {"mtp_layers", RPT_INT, "", "multi-token prediction modules (model.mtp_layers)", .integer = c_mtp},
    {"cp_hidden_s", RPT_REAL, "s", "context-parallel ring exchange of the slowest stage that ran under its attention",
     .real = c_cp_hidden},
    {"dp_hidden_s", RPT_REAL, "s", "data-parallel communication of the slowest stage (gradient buckets, parameter "
     "gathers) that ran beside its compute: the span of the collectives' union less the wait for them",
     .real = c_dp_hidden},
    {"pp_hidden_s", RPT_REAL, "s", "pipeline transfer time of the slowest stage's inputs that ran while it computed "
     "(their transfer time less the wait for them)", .real = c_pp_hidden},
    {"zero3_impl", RPT_STRING, "text", "how ZeRO-3 holds the sharded parameters (plan.zero3_impl): flat (FSDP1) or "
     "per_param (FSDP2's copies)", .text = c_zero3_impl},
    {"offload_layers", RPT_INT, "", "layers per model chunk whose activations are offloaded to host memory "
     "(plan.offload_layers)", .integer = c_offload_layers},
    {"offload_s", RPT_REAL, "s", "time of the slowest stage in: waiting for activations moving to or from host memory "
     "(plan.offload_layers)", .real = c_offload},
    {"offload_hidden_s", RPT_REAL, "s", "activation copies to and from host memory of the slowest stage that ran "
     "beside its compute", .real = c_offload_hidden},
    {NULL},
};

#undef J
#undef R

const struct rpt_column *wl_summary_columns(void)
{
  return columns;
}

void wl_summary_csv_header(struct npu_buf *out)
{
  rpt_columns_csv_header(columns, out);
}

void wl_summary_csv_row(const struct wl_job *job, const struct wl_result *r, struct npu_buf *out)
{
  struct wl_report x = {job, r};
  rpt_columns_csv_row(columns, &x, out);
}
