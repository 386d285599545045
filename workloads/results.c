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
  int top = 0;
  for (int c = 1; c < WL_CAT_COUNT; c++)
    if (res->cat_s[c] > res->cat_s[top]) top = c;
  double compute = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (wl_cat_is_compute((enum wl_cat)c)) compute += res->cat_s[c];
  const struct wl_stage_result *sl = &res->stages[res->slowest_stage];
  char where[32];
  if (p->E > 1) snprintf(where, sizeof where, "stage %d EP rank %d", sl->stage, sl->ep);
  else snprintf(where, sizeof where, "stage %d", sl->stage);
  int n = snprintf(res->bottleneck, sizeof res->bottleneck, "%s (%.0f%% of the step on %s; compute %.0f%%, bubble %.0f%%)",
                   wl_cat_name((enum wl_cat)top), 100 * res->cat_s[top] / step, where, 100 * compute / step,
                   100 * res->cat_s[WL_CAT_BUBBLE] / step);
  /* what to act on when compute leads: the largest overhead of the slowest stage (exposed
   * communication, bubble, interference), from 5% of the step */
  int over = -1;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (!wl_cat_is_compute((enum wl_cat)c) && c != WL_CAT_IDLE && c != WL_CAT_HOST &&
        (over < 0 || res->cat_s[c] > res->cat_s[over]))
      over = c;
  if (wl_cat_is_compute((enum wl_cat)top) && over >= 0 && over != top && res->cat_s[over] >= 0.05 * step && n > 0 &&
      (size_t)n < sizeof res->bottleneck)
    n += snprintf(res->bottleneck + n, sizeof res->bottleneck - (size_t)n, "; largest overhead %s %.0f%%",
                  wl_cat_name((enum wl_cat)over), 100 * res->cat_s[over] / step);
  /* a host-bound rank elsewhere makes the others wait (as bubble): say where the host binds */
  int hb = 0;
  for (int i = 1; i < nr; i++)
    if (res->stages[i].cat_s[WL_CAT_HOST] > res->stages[hb].cat_s[WL_CAT_HOST]) hb = i;
  double hs = res->stages[hb].cat_s[WL_CAT_HOST] / step;
  if (hs >= 0.05 && n > 0 && (size_t)n < sizeof res->bottleneck)
    snprintf(res->bottleneck + n, sizeof res->bottleneck - (size_t)n, "; host-bound: stage %d waits %.0f%% for dispatch",
             res->stages[hb].stage, 100 * hs);
}
