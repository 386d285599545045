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
#include "workloads/isolate.h"

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
  wl_program_sum_segments(p); /* the segments' times and FLOPs (the collectives' unprobed: 0) */
  cr_assert_gt(p->seg[WL_SEG_LAYER_F].flops, 0);
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

/* Selective recompute by module (plan.recompute_modules, Megatron-Core --recompute-modules):
 * each keeps less by what it recomputes. DeepSeek-V3 on tp 8 with SP, bf16; layer 0 dense,
 * layer 3 MoE (8 experts per token over etp 8). layernorm: the two norm outputs kept as GEMM
 * inputs (the attention's, the MLP's or the router's), 2 x 2 s b h / t; mla_up_proj: the
 * normalised latents (2 s b (q_lora + kv_lora) / t) and Q, K, V (2 s b heads (192 + 192 + 128)
 * / t); moe_act: each expert copy's activation output (2 s b 8 ffn / t). With fp8 and
 * plan.fp8_moe_act_input the experts' activation input (2 ffn wide) takes 1 byte instead of 2;
 * plan.optimizer_moments = bf16 keeps 8 bytes of optimizer state per parameter instead of 12. */
Test(recompute, selective_modules_keep_less_by_what_they_recompute)
{
  double s = 4096, b = 1, h = 7168, a = 128, lat = 1536 + 512, f = 2048, t = 8;
  const char *base[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "plan.recompute=\"selective\"", NULL};
  struct {
    const char *modules;
    double dense, moe;
  } rows[] = {
      {"plan.recompute_modules=\"core_attn layernorm\"", 2 * 2 * s * b * h / t, 2 * 2 * s * b * h / t},
      {"plan.recompute_modules=\"core_attn mla_up_proj\"", 2 * s * b * lat / t + 2 * s * b * a * (192 + 192 + 128) / t,
       2 * s * b * lat / t + 2 * s * b * a * (192 + 192 + 128) / t},
      {"plan.recompute_modules=\"core_attn,moe_act\"", 0, 2 * s * b * 8 * f / t},
      /* mlp: a dense layer keeps its MLP input (bf16, as before) and none of the 6 ffn inside */
      {"plan.recompute_modules=\"core_attn mlp\"", s * b * 6 * 18432 / t, 0},
      /* shared_experts: the shared expert's 6 ffn inside (its input is the router's, kept) */
      {"plan.recompute_modules=\"core_attn shared_experts\"", 0, s * b * 6 * f / t},
  };
  struct tw w0;
  tw_load(&w0, "deepseek-v3", 8, base);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *sets[] = {base[0], base[1], base[2], base[3], rows[i].modules, NULL};
    struct tw w;
    tw_load(&w, "deepseek-v3", 8, sets);
    tw_close(wl_memory_layer_activations(&w0.m, &w0.p, 0) - wl_memory_layer_activations(&w.m, &w.p, 0),
             rows[i].dense, 1e-12, rows[i].modules);
    tw_close(wl_memory_layer_activations(&w0.m, &w0.p, 3) - wl_memory_layer_activations(&w.m, &w.p, 3),
             rows[i].moe, 1e-12, rows[i].modules);
    tw_fini(&w);
  }
  tw_fini(&w0);

  const char *f8[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "plan.dtype=fp8", NULL};
  const char *f8in[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "plan.dtype=fp8", "plan.fp8_moe_act_input=true",
                        "plan.optimizer_moments=\"bf16\"", NULL};
  struct tw a8, b8;
  tw_load(&a8, "deepseek-v3", 8, f8);
  tw_load(&b8, "deepseek-v3", 8, f8in);
  tw_close(wl_memory_layer_activations(&a8.m, &a8.p, 3) - wl_memory_layer_activations(&b8.m, &b8.p, 3),
           s * b * 8 * 2 * f / t, 1e-12, "fp8 activation input");
  cr_expect_eq(wl_memory_layer_activations(&a8.m, &a8.p, 0), wl_memory_layer_activations(&b8.m, &b8.p, 0),
               "a dense layer has no routed experts");
  struct wl_mem ma, mb;
  wl_memory_stage(&a8.m, &a8.p, 0, &ma);
  wl_memory_stage(&b8.m, &b8.p, 0, &mb);
  tw_close(mb.optimizer_bytes, ma.optimizer_bytes * 8 / 12, 1e-12, "bf16 moments");
  tw_fini(&a8);
  tw_fini(&b8);
}

/* The backward reruns what a module recompute dropped: tiny_moe.cfg (one dense layer, then MoE
 * layers with a shared expert) with layernorm and moe_act adds recompute FLOPs to the backward's
 * segments (HFU) but not model FLOPs (MFU), and the step is longer; mlp reruns the dense layer's
 * two MLP GEMMs (forward FLOPs of fc1 and fc2: 2 T h (2 ffn) + 2 T ffn h, T = 1024 tokens). */
Test(recompute, selective_modules_rerun_their_kernels_in_the_backward)
{
  const char *rc[] = {"plan.recompute=\"selective\"", "plan.recompute_modules=\"layernorm moe_act\""};
  struct wl_job j0, j1;
  tw_job_load(&j0, SCN "tiny_moe.cfg", NULL, 0);
  tw_job_load(&j1, SCN "tiny_moe.cfg", rc, 2);
  struct npu_diag d;
  npu_diag_clear(&d);
  struct wl_program *p0, *p1;
  cr_assert_eq(wl_program_create(&p0, &j0, &d), 0, "%s", d.msg);
  cr_assert_eq(wl_program_create(&p1, &j1, &d), 0, "%s", d.msg);
  wl_program_sum_segments(p0);
  wl_program_sum_segments(p1);
  for (int k = 0; k < WL_SEG_KINDS; k++) {
    cr_expect_eq(p1->seg[k].model_flops, p0->seg[k].model_flops, "segment %d: recomputation is not model work", k);
    cr_expect_geq(p1->seg[k].time_s, p0->seg[k].time_s * (1 - 1e-12), "segment %d", k);
  }
  cr_expect_gt(p1->seg[WL_SEG_LAYER_BI].flops, p0->seg[WL_SEG_LAYER_BI].flops, "the dense layer's norms rerun");
  cr_expect_gt(p1->seg[WL_SEG_LAYER_BI].time_s, p0->seg[WL_SEG_LAYER_BI].time_s);
  cr_expect_gt(p1->seg[WL_SEG_MOE_POST_BI].time_s, p0->seg[WL_SEG_MOE_POST_BI].time_s, "the MoE layer's norms rerun");
  cr_expect_eq(p1->seg[WL_SEG_LAYER_F].time_s, p0->seg[WL_SEG_LAYER_F].time_s, "the forward is unchanged");
  wl_program_destroy(p1);
  wl_job_release(&j1);

  const char *mlp[] = {"plan.recompute=\"selective\"", "plan.recompute_modules=\"mlp shared_experts\""};
  tw_job_load(&j1, SCN "tiny_moe.cfg", mlp, 2);
  cr_assert_eq(wl_program_create(&p1, &j1, &d), 0, "%s", d.msg);
  wl_program_sum_segments(p1);
  double T = 1024, h = 1024, ffn = 2816, sffn = 704;
  double dense = p1->seg[WL_SEG_LAYER_BI].flops - p0->seg[WL_SEG_LAYER_BI].flops;
  cr_expect(dense >= 2 * T * h * 2 * ffn + 2 * T * ffn * h && dense < 1.01 * (2 * T * h * 2 * ffn + 2 * T * ffn * h),
            "mlp: %g recomputed FLOPs", dense);
  double shared = p1->seg[WL_SEG_MOE_POST_BI].flops - p0->seg[WL_SEG_MOE_POST_BI].flops;
  cr_expect(shared >= 2 * T * h * 2 * sffn + 2 * T * sffn * h && shared < 1.01 * (2 * T * h * 2 * sffn + 2 * T * sffn * h),
            "shared_experts: %g recomputed FLOPs", shared);
  wl_program_destroy(p0);
  wl_program_destroy(p1);
  wl_job_release(&j0);
  wl_job_release(&j1);
}

/* Refusals, at the key: modules without a selective recompute, an unknown module, MLA's and the
 * experts' modules on a model without them, an fp8 activation cache without fp8 training. */
Test(recompute, module_recompute_refusals_name_the_key)
{
  static const struct {
    const char *sets[2];
    const char *key, *why;
  } cases[] = {
      {{"plan.recompute_modules=\"layernorm\"", NULL}, "plan.recompute_modules", "need plan.recompute = \"selective\""},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"layernorms\""}, "plan.recompute_modules", "unknown module 'layernorms'"},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"mla_up_proj\""}, "plan.recompute_modules", "multi-latent attention"},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"moe_act\""}, "plan.recompute_modules", "needs an MoE model"},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\" , \""}, "plan.recompute_modules", "no module"},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"shared_experts\""}, "plan.recompute_modules", "shared experts"},
      {{"plan.fp8_moe_act_input=true", NULL}, "plan.fp8_moe_act_input", "needs fp8 training"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct wl_job job;
    struct npu_diag d;
    npu_diag_clear(&d);
    char msg[1024];
    int n = cases[i].sets[1] ? 2 : 1;
    int rc = wl_job_load(&job, SCN "tiny.cfg", cases[i].sets, n, &d);
    npu_diag_format(&d, msg, sizeof msg);
    cr_expect_eq(rc, NPU_ECONFIG, "case %zu: %s", i, msg);
    cr_expect(strstr(msg, cases[i].key) && strstr(msg, cases[i].why), "case %zu: %s", i, msg);
    if (!rc) wl_job_release(&job);
  }
}

/* The steps of the first backward slot of stage 0 that are of `kind` (and, for all-to-alls,
 * of `which`; for experts, reruns when which is 1). */
static int count_bwd_steps(const struct wl_program *p, enum wl_step_kind kind, int which)
{
  const struct wl_prog_stage *st = &p->stages[0];
  for (size_t i = 0; i < st->nslots; i++) {
    if (st->slots[i].slot.phase == WL_PH_F) continue;
    const struct wl_step_list *li = &st->lists[st->slots[i].list];
    int n = 0;
    for (int k = li->first; k < li->first + li->n; k++) {
      const struct wl_step *s = &st->steps[k];
      if (s->kind != kind) continue;
      if (kind == WL_STEP_A2A) n += s->u.a2a.which == which;
      else if (kind == WL_STEP_EXPERTS) n += s->u.experts.rerun == (which == 1);
      else n++;
    }
    return n;
  }
  return -1;
}

/* A backward that recomputes an MoE layer whole (a full recompute, or Megatron-Core's module
 * moe) reruns its routed experts and both all-to-alls before the layer's backward, as the
 * checkpointed forward does; a partial recompute reruns only the layers it covers, and none
 * other. tiny_moe.cfg: 4 layers, the first dense, on one stage (EP 4). The FLOPs the module moe
 * adds to HFU are the MoE block's forward: per MoE layer and token, the routed experts' 6 h f
 * per copy (top 2, dropless), the shared expert's 6 h f and the router's 2 h E. */
Test(recompute, a_backward_that_recomputes_an_moe_block_reruns_its_experts_and_all_to_alls)
{
  static const struct {
    const char *sets[3];
    int reruns;
  } cases[] = {
      {{"plan.recompute=\"none\"", NULL, NULL}, 0},
      {{"plan.recompute=\"full\"", NULL, NULL}, 3},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"moe\"", NULL}, 3},
      {{"plan.recompute=\"selective\"", "plan.recompute_modules=\"moe_act shared_experts\"", NULL}, 0},
      {{"plan.recompute=\"full\"", "plan.recompute_method=\"block\"", "plan.recompute_layers=2"}, 1},
  };
  struct npu_diag d;
  npu_diag_clear(&d);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    struct wl_job job;
    int n = cases[c].sets[2] ? 3 : cases[c].sets[1] ? 2 : 1;
    tw_job_load(&job, SCN "tiny_moe.cfg", cases[c].sets, n);
    struct wl_program *p;
    cr_assert_eq(wl_program_create(&p, &job, &d), 0, "%s", d.msg);
    int r = cases[c].reruns;
    cr_expect_eq(count_bwd_steps(p, WL_STEP_A2A, WL_A2A_RC_DISPATCH), r, "case %zu: dispatch reruns", c);
    cr_expect_eq(count_bwd_steps(p, WL_STEP_A2A, WL_A2A_RC_COMBINE), r, "case %zu: combine reruns", c);
    cr_expect_eq(count_bwd_steps(p, WL_STEP_EXPERTS, 1), r, "case %zu: expert reruns", c);
    cr_expect_eq(count_bwd_steps(p, WL_STEP_A2A, WL_A2A_COMBINE_T), 3, "case %zu: the backward's own", c);
    cr_expect_eq(count_bwd_steps(p, WL_STEP_EXPERTS, 0), 6, "case %zu: BI and W of each MoE layer", c);
    cr_expect_eq(p->seg[WL_SEG_MOE_RC_F].nitems > 0, r > 0, "case %zu: the recomputed front", c);
    wl_program_destroy(p);
    wl_job_release(&job);
  }

  struct wl_outcome o0, o1;
  cr_assert_eq(wl_run_isolated(SCN "tiny_moe.cfg", NULL, 0, &o0, &d), 0, "%s", d.msg);
  cr_assert_eq(wl_run_isolated(SCN "tiny_moe.cfg", cases[2].sets, 2, &o1, &d), 0, "%s", d.msg);
  cr_assert(o0.status == 0 && o1.status == 0, "%s %s", o0.message, o1.message);
  struct wl_job job;
  tw_job_load(&job, SCN "tiny_moe.cfg", NULL, 0);
  double T = 16.0 * 1024, h = 1024, f = 704, E = 16, moe_layers = 3;
  double want = moe_layers * T * (2 * 6 * h * f + 6 * h * f + 2 * h * E);
  double got = (o1.hfu / o1.mfu - 1) * wl_model_flops(&job.model, T, false);
  cr_expect_eq(o0.hfu, o0.mfu, "no recomputation, no extra FLOPs");
  cr_expect(got >= want && got < 1.01 * want, "module moe reruns %g FLOPs, the block's forward is %g", got, want);
  cr_expect_gt(o1.step_time_s, o0.step_time_s, "the rerun takes time");
  cr_expect_gt(o1.cat_s[WL_CAT_EP], o0.cat_s[WL_CAT_EP], "and all-to-alls");
  wl_job_release(&job);

  /* memory: a recomputed MoE block keeps its input alone, as a recomputed dense MLP does, so
   * with both modules the dense first layer and an MoE layer keep the same bytes */
  const char *both[] = {"plan.recompute=\"selective\"", "plan.recompute_modules=\"mlp moe\""};
  tw_job_load(&job, SCN "tiny_moe.cfg", both, 2);
  double dense = wl_memory_layer_activations(&job.model, &job.plan, 0);
  double moe = wl_memory_layer_activations(&job.model, &job.plan, 1);
  cr_expect(dense > 0 && fabs(moe - dense) <= 1e-12 * dense, "MoE layer %g, dense layer %g", moe, dense);
  wl_job_release(&job);
}
