/*
 * test_attn_options.c - options of the softmax attention that live inside the FlashAttention
 * kernel: ALiBi (model.position = "alibi") and attention sinks (model.sinks) reach every
 * attention call of the step, sinks add a logit per head and layer, and what the kernels cannot
 * cost is refused.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "ops/op.h"
#include "workloads/job.h"
#include "workloads/program.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

static void expect_flag(const char *set, const char *flag)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){set}, 1);
  struct wl_program *p = wl_program_expand(&job);
  struct op_call c;
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_F, "flash_attention", &c), 1);
  cr_expect(op_call_u(&c, flag), "%s: the forward's call has %s", set, flag);
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_BI, "flash_attention", &c), 1);
  cr_expect(op_call_u(&c, flag), "%s: the backward's call has %s", set, flag);
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "rope", NULL), strcmp(flag, "alibi") ? 1 : 0, "ALiBi has no RoPE");
  wl_program_destroy(p);
  wl_job_release(&job);
}

Test(attn_options, alibi_and_sinks_reach_the_attention_kernel, .timeout = 30)
{
  expect_flag("model.position=\"alibi\"", "alibi");
  expect_flag("model.sinks=true", "sinks");
}

/* gpt-oss-20b: a sink per head (64) in each of its 24 layers. */
Test(attn_options, sinks_add_a_logit_per_head_and_layer, .timeout = 30)
{
  const char *with[] = {"plan.global_batch=16", NULL}, *without[] = {"plan.global_batch=16", "model.sinks=false", NULL};
  struct tw a, b;
  tw_load(&a, "gpt-oss-20b", 8, with);
  tw_load(&b, "gpt-oss-20b", 8, without);
  cr_expect(a.m.sinks, "the preset has its sinks");
  tw_close(wl_model_params(&a.m) - wl_model_params(&b.m), 24 * 64.0, 1e-12, "sinks");
  tw_fini(&a);
  tw_fini(&b);
}

Test(attn_options, what_the_kernels_cannot_cost_is_refused, .timeout = 30)
{
  tw_job_refused(SCN "tiny.cfg", (const char *const[]){"model.sinks=true", "model.attention=\"standard\""}, 2,
                 "model.sinks", "standard");
  struct wl_model m;
  memset(&m, 0, sizeof m);
  m.pos = WL_POS_ALIBI;
  const char *key = NULL;
  cr_expect_not_null(wl_model_inference_gap(&m, &key), "no ALiBi in the decode kernel");
  cr_expect_str_eq(key, "model.position");
}
