/*
 * test_program.c - the step program: built and fully costed before the SimGrid engine starts
 * (MoE expert buckets included), so an MoE scenario runs at event fidelity (the cost model
 * forks a child per kernel, which must not inherit a started engine); a program is data built
 * from a read-only scenario, so two builds of one job agree.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "workloads/expand.h"
#include "workloads/isolate.h"
#include "tests/workloads/helpers.h"
#include "workloads/job.h"
#include "workloads/program.h"
#include "workloads/replay.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"


/* The regression of "a second SimGrid engine in one process": tiny_moe at event fidelity. */
Test(program, moe_runs_at_event_fidelity, .timeout = 120)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_outcome an; /* analytic, in a child process, before this process starts its engine */
  cr_assert_eq(wl_run_isolated(SCN "tiny_moe.cfg", NULL, 0, &an, &d), 0);
  cr_assert_eq(an.status, 0, "%s", an.message);
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"run.fidelity=event"}, 1);
  struct wl_result res;
  char msg[1024];
  int rc = wl_replay(&job, NULL, &res, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  cr_expect(res.step_s > 0 && isfinite(res.step_s), "step %g s", res.step_s);
  cr_expect(res.moe_max_mean_expert >= 1 && res.moe_max_mean_rank >= 1, "expert load max/mean %g, %g",
            res.moe_max_mean_expert, res.moe_max_mean_rank);
  cr_expect(res.moe_dropped_fraction >= 0 && res.moe_dropped_fraction < 1);
  cr_expect(res.cat_s[WL_CAT_EP] > 0, "exposed all-to-all %g s", res.cat_s[WL_CAT_EP]);
  /* the two fidelities of the chip model agree within 20% on this step (9.7% when written) */
  cr_expect(fabs(res.step_s / an.step_time_s - 1) < 0.2, "event %g s, analytic %g s", res.step_s, an.step_time_s);
  wl_result_release(&res);
  wl_job_release(&job);
}

/* The program of an MoE scenario: experts costed for every (MoE layer, micro-batch, EP rank),
 * steps of every kind an MoE 1F1B step has, and a second build of the same job identical. */
Test(program, moe_program_is_costed_data, .timeout = 60)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", NULL, 0);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *a, *b;
  cr_assert_eq(wl_program_create(&a, &job, &d), 0);
  cr_assert_eq(wl_program_create(&b, &job, &d), 0);
  cr_assert_eq(a->E, 4);
  for (int l = 0; l < job.model.layers; l++) {
    cr_expect_eq(wl_program_route(a, l, 0) != NULL, wl_model_layer_is_moe(&job.model, l), "layer %d", l);
    if (!wl_model_layer_is_moe(&job.model, l)) continue;
    for (int m = 0; m < a->mb; m++)
      for (int e = 0; e < a->E; e++)
        for (int q = 0; q < WL_EXPERT_PASSES; q++) {
          double t = wl_program_expert_s(a, l, m, e, (enum wl_expert_pass)q);
          cr_expect(t > 0, "layer %d mb %d EP rank %d pass %d: %g s", l, m, e, q, t);
          cr_expect_eq(t, wl_program_expert_s(b, l, m, e, (enum wl_expert_pass)q));
        }
  }
  int kinds[8] = {0};
  for (int s = 0; s < a->pp; s++)
    for (int i = 0; i < a->stages[s].nsteps; i++) kinds[a->stages[s].steps[i].kind]++;
  cr_expect(kinds[WL_STEP_SEG] > 0 && kinds[WL_STEP_EXPERTS] > 0 && kinds[WL_STEP_A2A] > 0);
  cr_expect_eq(kinds[WL_STEP_GATHER], 0, "no ZeRO-3 gathers with zero = 1");
  cr_expect_eq(a->nkernels, b->nkernels);
  for (int k = 0; k < a->nkernels; k++) cr_expect_eq(a->kernels[k].time_s, b->kernels[k].time_s, "kernel %d", k);
  /* slots alike share their steps: fewer step lists than slots */
  cr_expect(a->stages[0].nlists < (int)a->stages[0].nslots);
  wl_program_destroy(a);
  wl_program_destroy(b);
  wl_job_release(&job);
}

/* ZeRO-3 (FSDP, DeepSpeed stage 3): every backward reduce-scatters each piece's gradients as
 * they are computed, every micro-batch (neither keeps unsharded gradients across micro-batches
 * by default): per stage, the backward slots' buckets add up to the stage's parameters times
 * the micro-batches. With ZeRO-1 they add up to the parameters once (the last micro-batch). */
Test(program, zero3_reduce_scatters_every_micro_batch, .timeout = 60)
{
  for (int z = 0; z < 2; z++) {
    struct wl_job job;
    tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){z ? "plan.zero=3" : "plan.zero=1", "plan.dp=4"}, 2);
    struct npu_diag d;
    npu_diag_clear(&d);
    struct wl_program *p;
    cr_assert_eq(wl_program_create(&p, &job, &d), 0);
    cr_assert(p->mb > 1, "the case needs gradient accumulation");
    for (int s = 0; s < p->pp; s++) {
      const struct wl_prog_stage *st = &p->stages[s];
      double sum = 0;
      for (size_t i = 0; i < st->nslots; i++) {
        const struct wl_step_list *l = &st->lists[st->slots[i].list];
        for (int k = l->first; k < l->first + l->n; k++)
          if (st->steps[k].kind == WL_STEP_BUCKET) sum += st->steps[k].u.bucket.params;
      }
      double want = p->stage_params[s] * (z ? p->mb : 1);
      cr_expect(fabs(sum - want) <= 1e-9 * want, "zero %d, stage %d: buckets of %g parameters, want %g", z ? 3 : 1, s,
                sum, want);
    }
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* ZeRO-3 with expert parallelism: each piece's gather brings a rank what it lacks of its dense
 * parameters from the DP group (n ranks: (n - 1) / n of them) and of its routed experts from their
 * own data-parallel group (e = n / ep ranks: (e - 1) / e), posted as one gather over the DP group:
 * a forward slot's gathers times (n - 1) / n add up to those bytes. tiny_moe: ep 4, dp 8. */
Test(program, zero3_gathers_experts_over_their_own_group, .timeout = 60)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", (const char *const[]){"plan.zero=3", "plan.pp=1", "plan.dp=8"}, 3);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p;
  cr_assert_eq(wl_program_create(&p, &job, &d), 0, "%s", d.msg);
  double n = 8, e = n / 4, want = 0;
  for (int l = 0; l < job.model.layers; l++) {
    double dense, expert;
    wl_layer_rank_params(p, l, &dense, &expert);
    want += dense * (n - 1) / n + expert * (e - 1) / e;
  }
  want += 2 * (double)job.model.vocab * job.model.hidden * (n - 1) / n + job.model.hidden * (n - 1) / n; /* embedding, head */
  const struct wl_prog_stage *st = &p->stages[0];
  double got = -1;
  for (size_t i = 0; i < st->nslots && got < 0; i++) {
    if (st->slots[i].slot.phase != WL_PH_F) continue;
    const struct wl_step_list *li = &st->lists[st->slots[i].list];
    got = 0;
    for (int k = li->first; k < li->first + li->n; k++)
      if (st->steps[k].kind == WL_STEP_GATHER) got += st->steps[k].u.gather.params * (n - 1) / n;
  }
  cr_expect(fabs(got - want) <= 1e-9 * want, "a forward slot gathers %g parameters' worth, want %g", got, want);
  wl_program_destroy(p);
  wl_job_release(&job);
}
