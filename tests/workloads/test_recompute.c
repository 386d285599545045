/*
 * test_recompute.c - partial full recomputation (plan.recompute_method, plan.recompute_layers,
 * Megatron's --recompute-method and --recompute-num-layers): which layers a backward recomputes,
 * what each keeps in memory, and the plan checks.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "tests/workloads/helpers.h"
#include "workloads/job.h"
#include "workloads/memory.h"
#include "workloads/program.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

TestSuite(recompute, .timeout = 120);

/* tiny.cfg: 8 layers on pp 2, 4 per stage. Block method with 1 layer: per stage the first layer
 * recomputes, the other three keep their activations. */
Test(recompute, block_recomputes_the_first_layers_of_each_chunk)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg",
              (const char *const[]){"plan.recompute=\"full\"", "plan.recompute_method=\"block\"", "plan.recompute_layers=1"},
              3);
  for (int l = 0; l < job.model.layers; l++)
    cr_expect_eq(wl_plan_layer_recomputed(&job.plan, job.model.layers, 2, l), l % 4 == 0, "layer %d", l);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p;
  cr_assert_eq(wl_program_create(&p, &job, &d), 0);
  const struct wl_seg *rc = &p->seg[WL_SEG_LAYER_BI], *keep = &p->seg[WL_SEG_LAYER_BI_KEEP], *f = &p->seg[WL_SEG_LAYER_F];
  cr_assert(keep->nitems > 0);
  /* the recomputing backward is the kept one plus a forward's kernels (FLOPs exactly) */
  cr_expect(fabs(rc->flops - keep->flops - f->flops) <= 1e-9 * rc->flops, "%g = %g + %g", rc->flops, keep->flops,
            f->flops);
  cr_expect_eq(rc->model_flops, keep->model_flops, "recomputation is not model work");
  /* per stage, one backward slot's steps: one recomputing layer and three kept ones */
  for (int s = 0; s < p->pp; s++) {
    const struct wl_prog_stage *st = &p->stages[s];
    int nrc = 0, nkeep = 0;
    for (size_t i = 0; i < st->nslots; i++) {
      if (st->slots[i].slot.phase == WL_PH_F) continue;
      const struct wl_step_list *li = &st->lists[st->slots[i].list];
      for (int k = li->first; k < li->first + li->n; k++) {
        if (st->steps[k].kind != WL_STEP_SEG) continue;
        nrc += st->steps[k].u.seg.seg == rc;
        nkeep += st->steps[k].u.seg.seg == keep;
      }
      break;
    }
    cr_expect(nrc == 1 && nkeep == 3, "stage %d: %d recomputed, %d kept", s, nrc, nkeep);
  }
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* What a layer keeps: block leaves the others as without recomputation; uniform in groups of n
 * keeps one layer input per group. */
Test(recompute, memory_follows_the_method)
{
  const char *none[] = {"plan.recompute=\"none\""}, *full[] = {"plan.recompute=\"full\""};
  const char *block[] = {"plan.recompute=\"full\"", "plan.recompute_method=\"block\"", "plan.recompute_layers=2"};
  const char *uni[] = {"plan.recompute=\"full\"", "plan.recompute_layers=4"};
  struct wl_job jn, jf, jb, ju;
  tw_job_load(&jn, SCN "tiny.cfg", none, 1);
  tw_job_load(&jf, SCN "tiny.cfg", full, 1);
  tw_job_load(&jb, SCN "tiny.cfg", block, 3);
  tw_job_load(&ju, SCN "tiny.cfg", uni, 2);
  for (int l = 0; l < 8; l++) {
    double n = wl_memory_layer_activations(&jn.model, &jn.plan, l);
    double f = wl_memory_layer_activations(&jf.model, &jf.plan, l);
    double b = wl_memory_layer_activations(&jb.model, &jb.plan, l);
    double u = wl_memory_layer_activations(&ju.model, &ju.plan, l);
    cr_expect(f < n, "layer %d", l);
    cr_expect_eq(b, l % 4 < 2 ? f : n, "block, layer %d", l);
    cr_expect(fabs(u - f / 4) <= 1e-12 * f, "uniform in 4s, layer %d: %g vs %g", l, u, f / 4);
  }
  struct wl_mem mf, mu;
  wl_memory_peak(&jf.model, &jf.plan, &mf);
  wl_memory_peak(&ju.model, &ju.plan, &mu);
  cr_expect(mu.activations_bytes > 0 && mu.activations_bytes != mf.activations_bytes);
  wl_job_release(&jn);
  wl_job_release(&jf);
  wl_job_release(&jb);
  wl_job_release(&ju);
}

Test(recompute, which_layers_needs_full_recompute_and_fits_a_chunk)
{
  const char *a[] = {"plan.recompute_layers=2"}, *b[] = {"plan.recompute=\"full\"", "plan.recompute_layers=5"};
  for (int c = 0; c < 2; c++) {
    struct wl_job job;
    struct npu_diag d;
    npu_diag_clear(&d);
    char msg[1024];
    int rc = wl_job_load(&job, SCN "tiny.cfg", c ? b : a, c ? 2 : 1, &d);
    npu_diag_format(&d, msg, sizeof msg);
    cr_expect_eq(rc, NPU_ECONFIG, "%s", msg);
    cr_expect(strstr(msg, "plan.recompute_layers") && strstr(msg, c ? "at most 4" : "recompute = \"full\""), "%s", msg);
    if (!rc) wl_job_release(&job);
  }
}
