/*
 * results.c - what a replayed step's per-rank times add up to: step time, tokens/s, MFU and
 * HFU (docs/TRAINING.md, "MFU and HFU"), memory per stage and the peak, the schedule's bubble
 * fraction, MoE routing statistics and the bottleneck line.
 */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch/derived.h"
#include "workloads/memory.h"

/* Routing statistics over every MoE layer and micro-batch of the step (one EP group). */
static void moe_stats(const struct wl_program *p, struct wl_result *res)
{
  const struct wl_job *j = p->job;
  if (!j->model.moe.experts) return;
  double me = 0, mr = 0, dropped = 0, routed = 0;
  int n = 0;
  for (int l = 0; l < j->model.layers; l++) {
    if (!wl_model_layer_is_moe(&j->model, l)) continue;
    for (int m = 0; m < p->mb; m++) {
      const struct wl_route *rt = wl_program_route(p, l, m);
      me += rt->max_mean_expert;
      mr += rt->max_mean_rank;
      dropped += rt->dropped;
      routed += p->tokens_per_rank * p->E * j->model.moe.top_k;
      n++;
    }
  }
  res->moe_max_mean_expert = n ? me / n : 0;
  res->moe_max_mean_rank = n ? mr / n : 0;
  res->moe_dropped_fraction = routed > 0 ? dropped / routed : 0;
}

/* The rank's name in a line: "stage 2", or "stage 2 EP rank 5". */
static void rank_name(const struct wl_program *p, const struct wl_stage_result *r, char *buf, size_t n)
{
  if (p->E > 1) snprintf(buf, n, "stage %d EP rank %d", r->stage, r->ep);
  else snprintf(buf, n, "stage %d", r->stage);
}

/*
 * The bottleneck line: what to act on (issue 18). The three largest shares of the slowest
 * rank's step among its categories (compute, exposed communication per dimension, bubble,
 * host, interference), the compute and bubble totals; the imbalance between ranks when their
 * compute differs by 5% of the step or more; the largest overhead when compute leads and it is
 * not among the three; and where the host binds when a rank waits for it.
 */
static void bottleneck_line(const struct wl_program *p, struct wl_result *res, double step)
{
  int nr = res->nstages, rank[WL_CAT_COUNT], nrank = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++) {
    if (c == WL_CAT_IDLE) continue;
    int k = nrank++;
    while (k > 0 && res->cat_s[rank[k - 1]] < res->cat_s[c]) rank[k] = rank[k - 1], k--;
    rank[k] = c;
  }
  double compute = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (wl_cat_is_compute((enum wl_cat)c)) compute += res->cat_s[c];
  char where[48], *b = res->bottleneck;
  size_t cap = sizeof res->bottleneck, n = 0;
  rank_name(p, &res->stages[res->slowest_stage], where, sizeof where);
  n += (size_t)snprintf(b, cap, "%s (%.0f%% of the step on %s", wl_cat_name((enum wl_cat)rank[0]),
                        100 * res->cat_s[rank[0]] / step, where);
  for (int k = 1; k < 3 && n < cap; k++)
    if (res->cat_s[rank[k]] >= 0.005 * step)
      n += (size_t)snprintf(b + n, cap - n, "%s %s %.0f%%", k == 1 ? ", then" : ",", wl_cat_name((enum wl_cat)rank[k]),
                            100 * res->cat_s[rank[k]] / step);
  if (n < cap)
    n += (size_t)snprintf(b + n, cap - n, "; compute %.0f%%, bubble %.0f%%)", 100 * compute / step,
                          100 * res->cat_s[WL_CAT_BUBBLE] / step);
  /* imbalance: the ranks' compute (their busy streams) apart by 5% of the step or more */
  int hi = 0, lo = 0;
  double busy[2] = {0, 0};
  for (int i = 0; i < nr; i++) {
    double c = 0;
    for (int k = 0; k < WL_CAT_COUNT; k++)
      if (wl_cat_is_compute((enum wl_cat)k)) c += res->stages[i].cat_s[k];
    if (i == 0 || c > busy[0]) busy[0] = c, hi = i;
    if (i == 0 || c < busy[1]) busy[1] = c, lo = i;
  }
  if (busy[0] - busy[1] >= 0.05 * step && n < cap) {
    char a[48], z[48];
    rank_name(p, &res->stages[hi], a, sizeof a);
    rank_name(p, &res->stages[lo], z, sizeof z);
    n += (size_t)snprintf(b + n, cap - n, "; imbalance: %s computes %.0f%% of the step, %s %.0f%%", a,
                          100 * busy[0] / step, z, 100 * busy[1] / step);
  }
  /* what to act on when compute leads: the largest overhead (exposed communication, bubble,
   * interference), from 5% of the step, unless named above */
  int over = -1;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (!wl_cat_is_compute((enum wl_cat)c) && c != WL_CAT_IDLE && c != WL_CAT_HOST &&
        (over < 0 || res->cat_s[c] > res->cat_s[over]))
      over = c;
  bool named = over == rank[0] || over == rank[1] || over == rank[2];
  if (wl_cat_is_compute((enum wl_cat)rank[0]) && over >= 0 && !named && res->cat_s[over] >= 0.05 * step && n < cap)
    n += (size_t)snprintf(b + n, cap - n, "; largest overhead %s %.0f%%", wl_cat_name((enum wl_cat)over),
                          100 * res->cat_s[over] / step);
  /* a host-bound rank elsewhere makes the others wait (as bubble): say where the host binds */
  int hb = 0;
  for (int i = 1; i < nr; i++)
    if (res->stages[i].cat_s[WL_CAT_HOST] > res->stages[hb].cat_s[WL_CAT_HOST]) hb = i;
  double hs = res->stages[hb].cat_s[WL_CAT_HOST] / step;
  if (hs >= 0.05 && n < cap)
    snprintf(b + n, cap - n, "; host-bound: stage %d waits %.0f%% for dispatch",
             res->stages[hb].stage, 100 * hs);
}

void wl__results_finish(const struct wl_program *p, struct wl_result *res)
{
  const struct wl_job *j = p->job;
  int nr = p->nranks;
  double step = 0;
  for (int i = 0; i < nr; i++)
    if (res->stages[i].end_s > step) {
      step = res->stages[i].end_s;
      res->slowest_stage = i;
    }
  res->step_s = step;
  /* each replay rank stands for tp x cp x dp / E physical ranks */
  double per = (double)j->plan.tp * j->plan.cp * j->plan.dp / p->E;
  for (int i = 0; i < nr; i++) {
    struct wl_stage_result *sr = &res->stages[i];
    sr->cat_s[WL_CAT_IDLE] += step - sr->end_s;
    res->hw_flops += (sr->flops - sr->model_flops) * per; /* recomputation */
    wl_memory_stage(&j->model, &j->plan, sr->stage, &sr->mem);
  }
  memcpy(res->cat_s, res->stages[res->slowest_stage].cat_s, sizeof res->cat_s);
  memcpy(res->hidden_s, res->stages[res->slowest_stage].hidden_s, sizeof res->hidden_s);
  /* the bubble fraction (docs/TRAINING.md, the one definition tests/workloads/test_schedule.c
   * checks): the share of the step the busiest rank spends without work (waiting for another
   * stage, or finished early): the least over the ranks, since every rank's waiting is the step
   * less its work; more waiting on a rank is its lighter load, not the schedule's */
  double least = INFINITY;
  for (int i = 0; i < nr; i++) {
    double w = res->stages[i].cat_s[WL_CAT_BUBBLE] + res->stages[i].cat_s[WL_CAT_IDLE];
    if (w < least) least = w;
  }
  res->bubble_fraction = step > 0 && isfinite(least) ? least / step : 0;
  double tokens = (double)j->plan.global_batch * j->model.seq_len;
  res->tokens_per_s = tokens / step;
  res->model_flops = wl_model_flops(&j->model, tokens, false);
  res->hw_flops += res->model_flops; /* HFU: the model's FLOPs plus what recomputation adds */
  struct arch_derived dv;
  arch_derive(&j->sys, &dv);
  enum npu_dtype pd = wl_plan_wide_dtype(&j->plan); /* fp8 runs are judged against bf16 */
  res->peak_flops_per_s = dv.peak_flops_per_s[pd];
  res->mfu = res->model_flops / (step * j->devices * res->peak_flops_per_s);
  res->hfu = res->hw_flops / (step * j->devices * res->peak_flops_per_s);
  wl_memory_peak(&j->model, &j->plan, &res->peak_mem);
  res->oom = res->peak_mem.total_bytes > (double)j->sys.chip.hbm.size_bytes;
  moe_stats(p, res);
  bottleneck_line(p, res, step);
}
