/*
 * cost.c - the costs of a step program's kernels: every distinct kernel through the operator
 * cost cache (the chip model at the run's fidelity, the only source of compute time), the routed
 * experts of a rank by buckets of received token copies, and the segments' sums.
 *
 * Everything here runs before the SimGrid engine starts (wl_program_create): event-fidelity
 * costs fork a child process per kernel, which must not inherit a started engine.
 */
#include "workloads/expand.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "workloads/workloads_int.h"

/* Cost kernel k through the cache (the chip model at the run's fidelity). */
static int cost_kernel(struct wl_program *j, struct op_cache *cache, struct wl_kernel *k, struct npu_diag *diag)
{
  int rc = op_call_check(&k->call, diag);
  if (!rc) {
    struct op_cost c;
    const struct arch_system *sys = k->sys ? &j->slow_sys[k->sys - 1] : &j->job->sys;
    rc = op_cost_get(cache, k->call.desc, &k->call.args, sys, (enum core_fidelity)j->job->run.fidelity, &c, diag);
    if (!rc) {
      /* inside a step kernels are queued ahead: the stream gap replaces the launch overhead */
      k->time_s = c.time_s - c.launch_s + j->job->sys.chip.stream_gap_s;
      k->flops = c.flops;
      k->costed = true;
      snprintf(k->bottleneck, sizeof k->bottleneck, "%s", c.bottleneck);
    }
  }
  if (rc) {
    char msg[512];
    npu_diag_format(diag, msg, sizeof msg);
    return npu_diag_set(diag, j->job->path, 0, k->op, "kernel %s %s: %s", k->op, k->args, msg), rc;
  }
  return 0;
}

int wl__cost_kernels(struct wl_program *j, struct op_cache *cache, struct npu_diag *diag)
{
  for (int i = 0; i < j->nkernels; i++) {
    if (j->kernels[i].costed) continue;
    npu_progress_note(j->job->progress, "costing kernels", i, j->nkernels);
    int rc = cost_kernel(j, cache, &j->kernels[i], diag);
    if (rc) return rc;
  }
  return 0;
}

double wl__host_dispatch_s(const struct wl_program *j)
{
  const struct arch_node *n = &j->job->sys.node;
  return j->plan.graph ? n->host.graph_dispatch_s : n->host.dispatch_s;
}

double wl__host_lead(const double *t, int n, double d)
{
  double suffix = 0, lead = 0;
  for (int i = n - 1; i >= 0; i--) {
    suffix += t[i];
    double l = (i + 1) * d + suffix;
    if (l > lead) lead = l;
  }
  return lead;
}

double wl__host_lead_equal(double total_s, int n, double d)
{
  /* max over j of j d + (n - j + 1) total / n: linear in j, so at j = 1 or j = n */
  double first = d + total_s, last = n * d + total_s / n;
  return first > last ? first : last;
}

/* One step of an overlap: a GEMM part that takes gn alone and gr (>= gn) while communication of c
 * runs beside it. The step lasts *step; the GEMM loses *lost to the communication. */
static void ovl_step(double gn, double gr, double c, double *step, double *lost)
{
  if (c >= gr) {
    *step = c;
    *lost = gr - gn;
  } else {
    *step = c + gn * (1 - c / gr);
    *lost = c * (1 - gn / gr);
  }
}

double wl__overlap_time(enum wl_ovl m, int n, double g, double gr, double comm, double chunk, double *lost)
{
  double step, l;
  if (gr < g) gr = g;
  switch (m) {
  case WL_OVL_RING: /* the local chunk beside the first step, one peer's chunk per step after */
    ovl_step(g / n, gr / n, comm / (n - 1), &step, &l);
    *lost = (n - 1) * l;
    return (n - 1) * step + g / n;
  case WL_OVL_PIPE: /* chunk i's collective beside chunk i + 1's GEMM; the last one alone */
    ovl_step(g / n, gr / n, chunk, &step, &l);
    *lost = (n - 1) * l;
    return g / n + (n - 1) * step + chunk;
  case WL_OVL_BULK:
    ovl_step(g, gr, comm, &step, lost);
    return step;
  default: NPU_PANIC("overlap %d", (int)m);
  }
}

/* Item i's time on the compute stream: a kernel's time; a collective's, less what hides it
 * (CP's ring beside its attention: *hidden); an overlapped TP collective's interference (*lost)
 * plus its exposed part (*exposed), *hidden what its GEMM covered. */
static double item_time(const struct wl_program *j, int i, double *lost, double *exposed, double *hidden)
{
  const struct wl_item *it = &j->items[i];
  *lost = *hidden = 0;
  if (it->coll && it->ovl == WL_OVL_FUSED) {
    /* one MC2 kernel runs the GEMM and the collective: what it takes beyond the GEMM alone is
     * exposed communication (its vector cores' interference included), the rest hidden */
    double comm = j->colls[it->index].time_s, g = j->kernels[j->items[it->hide].index].time_s;
    *exposed = fmax(0, j->kernels[it->slowed].time_s - g);
    *hidden = fmax(0, comm - *exposed);
    return *exposed;
  }
  if (it->coll && it->ovl != WL_OVL_NONE) {
    /* with its GEMM (summed as it runs alone): what the pair adds, interference then exposed */
    double comm = j->colls[it->index].time_s, chunk = it->chunk >= 0 ? j->colls[it->chunk].time_s : 0;
    double g = j->kernels[j->items[it->hide].index].time_s, gr = j->kernels[it->slowed].time_s;
    double pair = wl__overlap_time((enum wl_ovl)it->ovl, it->nchunks, g, gr, comm, chunk, lost);
    *exposed = fmax(0, pair - g - *lost);
    *hidden = fmax(0, (it->ovl == WL_OVL_PIPE ? it->nchunks * chunk : comm) - *exposed);
    return *lost + *exposed;
  }
  double t;
  if (it->coll) {
    t = j->colls[it->index].time_s;
    if (it->hide >= 0) {
      const struct wl_item *h = &j->items[it->hide];
      double under = h->coll ? j->colls[h->index].time_s : j->kernels[h->index].time_s;
      *hidden = t < under ? t : under;
      t -= *hidden;
    }
  } else {
    t = j->kernels[it->index].time_s;
  }
  *exposed = t;
  return t;
}

double wl__item_time(const struct wl_program *j, int i)
{
  double lost, exposed, hidden;
  return item_time(j, i, &lost, &exposed, &hidden);
}

double wl__item_time_parts(const struct wl_program *j, int i, double *lost, double *exposed, double *hidden)
{
  return item_time(j, i, lost, exposed, hidden);
}

static void sum_seg(const struct wl_program *j, struct wl_seg *sg)
{
  int first = sg->first_item, n = sg->nitems, launches = sg->launches;
  memset(sg, 0, sizeof *sg);
  sg->first_item = first;
  sg->nitems = n;
  double *item_s = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *item_s), slow = 0;
  for (int i = first; i < first + n; i++) {
    const struct wl_item *it = &j->items[i];
    double lost, exposed, hidden, t = item_time(j, i, &lost, &exposed, &hidden);
    item_s[i - first] = t;
    sg->time_s += t;
    int twin = it->coll ? 0 : j->kernels[it->index].dp_twin;
    slow += twin ? j->kernels[twin - 1].time_s : t;
    sg->cat_s[WL_CAT_INTERFERE] += lost;
    sg->cat_s[it->cat] += exposed;
    sg->hidden_s[it->cat] += hidden;
    if (!it->coll) {
      double f = j->kernels[it->index].flops;
      sg->flops += f;
      if (!it->recompute) sg->model_flops += f;
    }
  }
  /* each item one dispatch, unless the builder counted the launches itself (the optimizer) */
  double d = wl__host_dispatch_s(j);
  if (launches > n && n == 1) { /* one costed call launched in equal parts (the optimizer) */
    sg->launches = launches;
    sg->host_lead_s = wl__host_lead_equal(sg->time_s, launches, d);
  } else {
    sg->launches = n;
    sg->host_lead_s = wl__host_lead(item_s, n, d);
  }
  free(item_s);
  sg->dp_loss = slow > sg->time_s ? 1 - sg->time_s / slow : 0;
}

void wl_program_sum_segments(struct wl_program *j)
{
  double t = 0, lost = 0;
  for (int k = 0; k < 2 * WL_SEG_KINDS; k++) { /* the local layers' variants too */
    sum_seg(j, &j->seg[k]);
    t += j->seg[k].time_s;
    lost += j->seg[k].time_s * j->seg[k].dp_loss;
  }
  for (int s = 0; s < j->plan.pp; s++) sum_seg(j, &j->optim[s]);
  j->dp_loss = t > 0 ? lost / t : 0;
}

/* Cost one kernel call through the cache: its time in a step and its FLOPs. */
static int cost_one(struct wl_program *j, struct op_cache *cache, const struct op_call *c, double *t, double *f,
                    struct npu_diag *diag)
{
  int i = wl__kernel_add(j, c);
  struct wl_kernel *k = &j->kernels[i];
  if (!k->costed) {
    int rc = cost_kernel(j, cache, k, diag);
    if (rc) return rc;
  }
  *t += k->time_s;
  *f += k->flops;
  return 0;
}

/* Buckets of expert token counts: multiples of 64 on a ladder of ratio 1.05; the cost of a
 * count is its bucket's scaled linearly (within 5%). */
static double bucket_of(double tokens)
{
  double b = 64;
  while (b < tokens) b = ceil(b * 1.05 / 64) * 64;
  return b;
}

int wl__expert_cost(struct wl_program *j, struct op_cache *cache, double tokens, double *out, double *flops,
                    struct npu_diag *diag)
{
  const struct wl_model *m = &j->model;
  /* TP-split experts (expand.c, moe_tp_gather): ffn / etp over the expert TP group's gathered
   * copies (each rank routing its own tokens: SP, or tp 1; else every TP rank has them all) */
  int tp = j->plan.etp;
  if (wl_plan_moe_own_tokens(&j->plan)) tokens *= tp;
  double b = bucket_of(tokens > 1 ? tokens : 1), scale = tokens / b;
  struct wl_expert_cost *e = NULL;
  for (int i = 0; i < j->nexperts && !e; i++)
    if (j->experts[i].tokens == b) e = &j->experts[i];
  if (!e) {
    if (j->nexperts == j->cap_experts) {
      j->cap_experts = j->cap_experts ? 2 * j->cap_experts : 32;
      j->experts = npu_xrealloc(j->experts, (size_t)j->cap_experts * sizeof *j->experts);
    }
    e = &j->experts[j->nexperts];
    memset(e, 0, sizeof *e);
    e->tokens = b;
    int groups = m->moe.experts / j->plan.ep, f = m->moe.ffn / tp, h = m->hidden, up = (m->act == WL_ACT_SWIGLU ? 2 : 1) * f;
    enum npu_dtype dt = wl_plan_is_fp8(&j->plan) ? NPU_DT_FP8_E4M3 : wl_plan_wide_dtype(&j->plan);
    enum npu_dtype vt = wl_plan_wide_dtype(&j->plan);
    int64_t mt = (int64_t)b;
    /* forward: up, activation, down; the backward calls are the operators' rules (struct
     * op_bwd): the grouped GEMM's input gradient, and its stand-in for the weight gradient */
    struct op_call fwd[3] = {wl__grouped_gemm_call(groups, mt, up, h, dt), wl__swiglu_call(mt, f, vt),
                             wl__grouped_gemm_call(groups, mt, h, f, dt)};
    struct op_call bwd[3][OP_MAX_BWD_CALLS];
    enum op_grad grad[3][OP_MAX_BWD_CALLS];
    int nb[3];
    int rc = 0;
    for (int i = 0; i < 3; i++) {
      rc = rc ? rc : cost_one(j, cache, &fwd[i], &e->f_s, &e->f_flops, diag);
      nb[i] = op_call_backward(&fwd[i], bwd[i], grad[i]);
    }
    /* input gradients (down, activation, up), then weight gradients (down, up) */
    /* a selective recompute of the activation (moe_act) reruns it before its backward */
    if (!rc && wl_plan_recomputes(&j->plan, WL_RCM_MOE_ACT)) rc = cost_one(j, cache, &fwd[1], &e->bi_s, &e->act_rc_flops, diag);
    for (int i = 2; i >= 0; i--)
      for (int k = 0; k < nb[i]; k++)
        if (grad[i][k] == OP_GRAD_INPUT) rc = rc ? rc : cost_one(j, cache, &bwd[i][k], &e->bi_s, &e->bi_flops, diag);
    for (int i = 2; i >= 0; i--)
      for (int k = 0; k < nb[i]; k++)
        if (grad[i][k] == OP_GRAD_WEIGHT) rc = rc ? rc : cost_one(j, cache, &bwd[i][k], &e->w_s, &e->w_flops, diag);
    if (rc) return rc;
    j->nexperts++;
  }
  out[WL_EXPERT_F] = e->f_s * scale;
  out[WL_EXPERT_BI] = e->bi_s * scale;
  out[WL_EXPERT_W] = e->w_s * scale;
  flops[WL_EXPERT_RC_RERUN] = e->f_flops * scale;
  flops[WL_EXPERT_RC_ACT] = e->act_rc_flops * scale;
  if (wl__grad_accum_add(&j->plan)) { /* the local experts' weight gradients added into the buffer */
    int up = m->act == WL_ACT_SWIGLU ? 2 : 1;
    int64_t elems = (int64_t)(m->moe.experts / j->plan.ep) * (up + 1) * (int64_t)(m->moe.ffn / tp) * m->hidden;
    struct op_call acc = wl__grad_accum_call(&j->plan, elems);
    double t = 0, f = 0;
    int rc = cost_one(j, cache, &acc, &t, &f, diag);
    if (rc) return rc;
    out[WL_EXPERT_W] += t; /* per micro-batch, whatever the tokens */
  }
  return 0;
}

void wl_kernel_label(const struct wl_kernel *k, char *buf, size_t n)
{
  op_call_label(&k->call, buf, n);
}

/* ------------------------------------------------------------------ data-parallel interference */

/* Whether call c sets its operator's "cores" parameter. */
static bool gives_cores(const struct op_call *c)
{
  for (int i = 0; c->desc && i < c->desc->nparams; i++)
    if (!strcmp(c->desc->params[i].name, "cores")) return c->given >> i & 1u;
  return false;
}

/* Whether the data-parallel group of stage 0, tp rank 0 spans more than one node. */
static bool dp_crosses_nodes(const struct wl_program *j)
{
  const struct wl_plan *p = &j->plan;
  int per = j->job->sys.node.devices > 0 ? j->job->sys.node.devices : 1;
  int first = wl__phys_rank(p, 0, 0, 0, 0) / per;
  for (int c = 0; c < p->cp; c++)
    for (int d = 0; d < p->dp; d++)
      if (wl__phys_rank(p, 0, 0, c, d) / per != first) return true;
  return false;
}

/*
 * Whether segment kind k can run while a data-parallel collective (or, in an F&B pair, an
 * expert all-to-all: the same library on the same links) is in flight: with ZeRO-3 (gathers
 * and reduce-scatters all through the step), DualPipe and plan.ep_overlap (forward and
 * backward chunks paired) every kind; with overlapped gradient buckets (posted by the last
 * micro-batch's backward, waited for before the optimizer) the backward kinds; else none.
 */
static bool seg_beside_dp(const struct wl_program *j, enum wl_seg_kind k)
{
  if (wl_plan_zero3(&j->plan) || j->plan.schedule == WL_SCHED_DUALPIPE || j->plan.ep_overlap != WL_EPO_NONE)
    return true;
  if (!j->plan.overlap_grad_reduce) return false;
  return k != WL_SEG_EMBED_F && k != WL_SEG_LAYER_F && k != WL_SEG_MOE_PRE_F && k != WL_SEG_MOE_POST_F &&
         k != WL_SEG_HEAD_F;
}

int wl__dp_twins(struct wl_program *j, struct op_cache *cache, struct npu_diag *diag)
{
  const struct wl_plan *p = &j->plan;
  const struct arch_system *sys = &j->job->sys;
  if ((p->dp * p->cp < 2 && j->edp < 2) || !sys->has_node) return 0;
  bool out = dp_crosses_nodes(j);
  const struct arch_node *n = &sys->node;
  int cores = out ? n->ccl.scaleout_cores : n->ccl.cores;
  const char *key = out ? "node.ccl.scaleout_cores" : "node.ccl.cores";
  if (cores >= sys->chip.aic_count)
    return npu_diag_set(diag, j->job->path, 0, key, "%d cores for a collective leave none of the chip's %d to compute",
                        cores, sys->chip.aic_count), NPU_ECONFIG;
  /* what the collective injects into its links, and so reads from and writes to HBM */
  double inj = out ? sys->cluster.scaleout.nic_bw_bytes_per_s * sys->cluster.scaleout.nics_per_device *
                         sys->cluster.scaleout.efficiency.value
                   : n->link.bw_bytes_per_s * n->link.ports * n->link_efficiency.value;
  double take = fmin(2 * inj, 0.5 * sys->chip.hbm.bw_bytes_per_s);
  if (cores <= 0 && !(take > 0)) return 0;
  struct arch_system v = *sys;
  /* an AI core is a cube core and its vector cores (one on coupled GPUs, two on Ascend A2/A3) */
  int per = v.chip.aiv_count / v.chip.aic_count;
  v.chip.aic_count -= cores;
  v.chip.aiv_count -= cores * per;
  v.chip.hbm.bw_bytes_per_s -= take;
  j->dp_sys = wl__slow_sys(j, &v);
  for (int k = 0; k < 2 * WL_SEG_KINDS; k++) {
    if (!seg_beside_dp(j, (enum wl_seg_kind)(k % WL_SEG_KINDS))) continue;
    const struct wl_seg *sg = &j->seg[k];
    for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
      const struct wl_item *it = &j->items[i];
      /* a GEMM already given its cores runs beside a TP collective (plan.tp_overlap): kept as is */
      if (it->coll || j->kernels[it->index].sys != 0 || j->kernels[it->index].dp_twin ||
          gives_cores(&j->kernels[it->index].call))
        continue;
      struct op_call c = j->kernels[it->index].call;
      int t = wl__kernel_add_on(j, &c, j->dp_sys); /* may move kernels: index them again */
      j->kernels[it->index].dp_twin = t + 1;
    }
  }
  return wl__cost_kernels(j, cache, diag);
}
