/*
 * test_layout.c - pipeline layouts (plan.layout, Megatron's --pipeline-model-parallel-layout):
 * the chunks' layer counts as written, chunks with no decoder layer (an embedding-only first
 * chunk, a head-and-loss-only last one) that run and hold what they should, the even layout
 * giving the even split's step to the bit, and every malformed layout refused naming the key.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/err.h"
#include "workloads/isolate.h"
#include "workloads/job.h"
#include "workloads/memory.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

Test(layout, chunks_hold_the_layers_the_layout_gives_them, .timeout = 30)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"plan.pp=4", "plan.layout=\"E|(t*4|)*2L\""}, 2);
  const int want[] = {0, 4, 4, 0};
  cr_assert_eq(job.plan.nlayout, 4);
  for (int k = 0; k < 4; k++) {
    cr_expect_eq(wl_plan_chunk_layers(&job.plan, 8, 4, k), want[k], "chunk %d", k);
    cr_expect_eq(wl_plan_chunk_first_layer(&job.plan, 8, 4, k), k == 0 ? 0 : k == 1 ? 0 : k == 2 ? 4 : 8);
  }
  /* the embedding-only first stage keeps no layer's weights or activations; a middle one does */
  struct wl_mem s0, s1;
  wl_memory_stage(&job.model, &job.plan, 0, &s0);
  wl_memory_stage(&job.model, &job.plan, 1, &s1);
  cr_expect_lt(s0.activations_bytes, 0.05 * s1.activations_bytes, "stage 0 %g, stage 1 %g bytes",
               s0.activations_bytes, s1.activations_bytes);
  cr_expect_lt(s0.weights_bytes, s1.weights_bytes);
  wl_job_release(&job);

  /* interleaved: pp 2 x vpp 2 chunks of 1, 3, 3 and 1 layers */
  tw_job_load(&job, SCN "tiny.cfg",
              (const char *const[]){"plan.pp=2", "plan.vpp=2", "plan.schedule=\"interleaved\"",
                                    "plan.layout=\"Et|t*3|t*3|tL\""},
              4);
  const int il[] = {1, 3, 3, 1};
  for (int k = 0; k < 4; k++) cr_expect_eq(wl_plan_chunk_layers(&job.plan, 8, 4, k), il[k], "chunk %d", k);
  wl_job_release(&job);
}

/* The even layout is the even split: the same step to the bit; a layout with an embedding-only
 * first stage and a loss-only last one runs, and moves the layers' work onto two stages. */
Test(layout, the_even_layout_is_the_even_split_and_empty_chunks_run, .timeout = 120)
{
  struct wl_outcome even, same, ends;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", (const char *const[]){"plan.pp=4"}, 1, &even, &d), 0, "%s", d.msg);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", (const char *const[]){"plan.pp=4", "plan.layout=\"Et*2|t*2|t*2|t*2L\""},
                               2, &same, &d),
               0, "%s", d.msg);
  cr_assert_eq(wl_run_isolated(SCN "tiny.cfg", (const char *const[]){"plan.pp=4", "plan.layout=\"E|t*4|t*4|L\""}, 2,
                               &ends, &d),
               0, "%s", d.msg);
  cr_assert_eq(even.status, 0, "%s", even.message);
  cr_assert_eq(same.status, 0, "%s", same.message);
  cr_assert_eq(ends.status, 0, "%s", ends.message);
  cr_expect_eq(same.step_time_s, even.step_time_s, "even layout %.9g s, even split %.9g s", same.step_time_s,
               even.step_time_s);
  cr_expect_gt(ends.step_time_s, even.step_time_s, "two stages of 4 layers are slower than four of 2");
}

static void load_fails(const char *layout, const char *more, const char *words)
{
  struct wl_job job;
  struct npu_diag d;
  npu_diag_clear(&d);
  char set[300];
  snprintf(set, sizeof set, "plan.layout=\"%s\"", layout);
  const char *sets[] = {"plan.pp=4", set, more};
  int rc = wl_job_load(&job, SCN "tiny.cfg", sets, more ? 3 : 2, &d);
  cr_expect_eq(rc, NPU_ECONFIG, "%s refused", layout);
  cr_expect_str_eq(d.key, "plan.layout");
  cr_expect(strstr(d.msg, words) != NULL, "'%s' in: %s", words, d.msg);
  wl_job_release(&job);
}

Test(layout, malformed_layouts_are_refused_naming_the_key, .timeout = 30)
{
  load_fails("Et*3|t*5|L", NULL, "3 model chunks");
  load_fails("E|t*4|t*3|L", NULL, "7 decoder layers");
  load_fails("t*2|Et*2|t*2|t*2L", NULL, "embedding (E)");
  load_fails("Et*2|t*2L|t*2|t*2", NULL, "head and loss (L)");
  load_fails("Et*2|t*2m|t*2|t*2L", NULL, "MTP modules (m) sit in the last chunk");
  load_fails("Et*2|t*2|t*2|t*2mL", NULL, "1 MTP modules");
  load_fails("Et*2|tx|t*2|t*2L", NULL, "cannot read it");
  load_fails("E(t*2|*3t*2L", NULL, "cannot read it");
  load_fails("Et*2|t*2|t*2|t*2L", "plan.first_stage_layers=2", "leave plan.first_stage_layers");
}
