/*
 * test_sparse.c - DeepSeek sparse attention (model.dsa): the lightning indexer's parameters in
 * closed form, the step's calls (the indexer's projections, its fp8 logits GEMM over the causal
 * half, two selection passes over the scores, FlashAttention's band of topk keys, their
 * backward), the attention length model FLOPs count, and what cannot be costed refused.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "workloads/job.h"
#include "workloads/program.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

/* DeepSeek-V3.2: W_qI 1536 x 64 x 128 from the query latent, W_kI 7168 x 128 with a LayerNorm
 * (weight and bias of 128), W_w 7168 x 64; every layer has one, on top of DeepSeek-V3's. */
Test(sparse, the_indexer_adds_its_parameters_to_every_layer, .timeout = 30)
{
  double mats = 1536.0 * 64 * 128 + 7168.0 * 128 + 7168.0 * 64;
  const char *sets[] = {"plan.global_batch=16", NULL};
  struct tw v3, v32;
  tw_load(&v3, "deepseek-v3", 16, sets);
  tw_load(&v32, "deepseek-v3.2", 16, sets);
  cr_expect_eq(v32.m.dsa.topk, 2048);
  tw_close(wl_model_dsa_params(&v32.m, true), mats, 1e-15, "indexer matrices");
  tw_close(wl_model_dsa_params(&v32.m, false), mats + 256, 1e-15, "indexer parameters");
  cr_expect_eq(wl_model_dsa_params(&v3.m, false), 0);
  for (int l = 0; l < 61; l += 30)
    tw_close(wl_model_layer_params(&v32.m, l) - wl_model_layer_params(&v3.m, l), mats + 256, 1e-9, "layer");
  /* each query of 4K attends 2048 keys at most: 2 W - W^2 / n of n's causal count */
  tw_close(wl_model_layer_attn_len(&v32.m, 5), 2 * 2048.0 - 2048.0 * 2048 / 4096, 1e-15, "attended length");
  tw_close(wl_model_layer_attn_len(&v3.m, 5), 4096, 1e-15, "dense length");
  tw_fini(&v3);
  tw_fini(&v32);
}

/* tiny (8 heads of 128, 1024 tokens) with topk 256 and an indexer of 4 heads of 64: the layer's
 * forward has the indexer's logits GEMM (1 sequence: 1024 x 512 x 256, bf16 on the 910B2, which
 * has no fp8 cube), its two selection passes over 1024 x 512 fp32 scores, and FlashAttention with
 * a band of 256 keys; its backward the logits GEMM's gradients and the same attention's. */
Test(sparse, the_step_runs_the_indexer_and_attends_a_band_of_topk_keys, .timeout = 30)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"model.dsa.topk=256", "model.dsa.heads=4", "model.dsa.dim=64"},
              3);
  struct wl_program *p = wl_program_expand(&job);
  struct op_call c;
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_F, "grouped_gemm", &c), 1, "one logits GEMM");
  cr_expect_eq(op_call_u(&c, "groups"), 1);
  cr_expect_eq(op_call_u(&c, "m"), 1024);
  cr_expect_eq(op_call_u(&c, "n"), 512, "the causal half");
  cr_expect_eq(op_call_u(&c, "k"), 4 * 64, "heads x dim");
  cr_expect_eq(op_call_u(&c, "dtype"), NPU_DT_BF16);
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_F, "eltwise", &c), 2, "two selection passes");
  cr_expect_eq(op_call_u(&c, "n"), 1024 * 512);
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_F, "flash_attention", &c), 1);
  cr_expect_eq(op_call_u(&c, "window"), 256);
  cr_expect_gt(tw_count_op(p, WL_SEG_LAYER_BI, "grouped_gemm", NULL), 0, "the indexer learns");
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_BI, "flash_attention", NULL), 1);
  wl_program_destroy(p);
  wl_job_release(&job);

  /* on an H100 the logits GEMM runs in fp8 */
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"preset=dgx-h100", "model.dsa.topk=256"}, 2);
  p = wl_program_expand(&job);
  cr_assert_eq(tw_count_op(p, WL_SEG_LAYER_F, "grouped_gemm", &c), 1);
  cr_expect_eq(op_call_u(&c, "dtype"), NPU_DT_FP8_E4M3);
  wl_program_destroy(p);
  wl_job_release(&job);
}

static void load_fails(const char *const *sets, int n, const char *key, const char *words)
{
  tw_job_refused(SCN "tiny.cfg", sets, n, key, words);
}

Test(sparse, what_the_band_cannot_stand_for_is_refused, .timeout = 30)
{
  load_fails((const char *const[]){"model.dsa.topk=200"}, 1, "model.dsa.topk", "multiple of 128");
  load_fails((const char *const[]){"model.dsa.topk=256", "model.window=256"}, 2, "model.dsa.topk", "sliding window");
  load_fails((const char *const[]){"model.dsa.topk=256", "model.attention=\"standard\""}, 2, "model.dsa.topk",
             "standard");
  load_fails((const char *const[]){"model.dsa.topk=256", "plan.cp=2", "plan.pp=1"}, 3, "plan.cp", "sparse attention");
}
