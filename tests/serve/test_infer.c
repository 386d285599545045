/*
 * test_infer.c - the inference step costs (serve/infer.c) against closed forms: decode is
 * memory-bound (weights read once per step, the KV cache at no more than the HBM bandwidth),
 * the engine's time beyond its kernels is exactly step_overhead + sequences x seq_overhead (and
 * worker_overhead + worker_rank_overhead x (tp - 2) more on an engine of several devices),
 * prefill of long prompts is compute-bound, MoE decode reads the experts it touches, and the
 * memory arithmetic of an engine.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/derived.h"
#include "ops/cost_cache.h"
#include "serve/serve.h"
#include "../support/support.h"

struct fix {
  struct sv_job job;
  struct sv_infer x;
  struct op_cache *cache;
  struct sv_colls colls;
};

/* Llama 3.1 8B cut to 4 layers on a 910B2 (or `system`), one engine of `tp`; extra in serve. */
static void fix_init(struct fix *f, const char *system, const char *model, int tp, bool ep, const char *extra)
{
  char *dir = ts_tmpdir();
  char text[2048];
  snprintf(text, sizeof text,
           "%s\nmodel = { %s };\nserve = { requests = 4; tp = %d; expert_parallel = %s; replicas = 1;\n"
           "  prompt = { distribution = \"fixed\"; mean = 4096; }; output = { distribution = \"fixed\"; mean = 256; };\n"
           "  %s };\n",
           system, model, tp, ep ? "true" : "false", extra);
  char *path = ts_write(dir, "s.cfg", text);
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(sv_job_load(&f->job, path, NULL, 0, &d), 0, "%s", d.msg);
  free(path);
  ts_rmtree(dir);
  free(dir);
  f->cache = op_cache_open(NULL, NULL);
  memset(&f->colls, 0, sizeof f->colls);
  const struct sv_spec *s = &f->job.spec;
  struct sv_target tg = {&f->job.model, &f->job.sys, f->job.run.fidelity, f->job.path, "serve.tp"};
  struct sv_infer_shape sh = {s->max_batched_tokens, 256, 4096 + 256, 64, 0};
  cr_assert_eq(sv_infer_init(&f->x, &tg, f->cache, &f->colls, 0, tp, ep, &sh, &s->engine, &d),
               0, "%s", d.msg);
  for (int i = 0; i < f->colls.n; i++) f->colls.v[i].time_s = 0; /* kernels only */
}

static void fix_fini(struct fix *f)
{
  sv_colls_release(&f->colls);
  op_cache_close(f->cache);
  sv_job_release(&f->job);
}

static const char *a2 = "preset = \"atlas-800t-a2\";";
static const char *llama4 = "preset = \"llama3.1-8b\"; layers = 4;";
static const char *no_overhead = "step_overhead = \"0s\"; seq_overhead = \"0s\";";

/* A decode step of b sequences reading ctx context tokens in all. */
static double decode(const struct sv_infer *x, int b, double ctx, double parts[SV_PART_COUNT])
{
  struct sv_step s = {b, b, b, b, ctx, 0, 0, 0, 0, 0, 0};
  return sv_step_s(x, &s, parts);
}

Test(infer, decode_attention_reads_the_kv_cache_no_faster_than_hbm_allows, .timeout = 60)
{
  struct fix f;
  fix_init(&f, a2, llama4, 1, false, no_overhead);
  const struct arch_chip *c = &f.job.sys.chip;
  double bw = c->hbm.bw_bytes_per_s * c->calib.hbm.value;
  /* K and V of 4 layers x 8 KV heads x 128 x bf16 per token */
  cr_expect_float_eq(sv_kv_token_bytes(&f.job.model, 1), 4.0 * 2 * 8 * 128 * 2, 1e-9);
  double p0[SV_PART_COUNT], p1[SV_PART_COUNT], p2[SV_PART_COUNT];
  for (int b = 1; b <= 64; b *= 4) {
    decode(&f.x, b, 0, p0);
    decode(&f.x, b, 1e5 * b, p1);
    decode(&f.x, b, 2e5 * b, p2);
    double read = 1e5 * b * sv_kv_token_bytes(&f.job.model, 1) / bw;
    double dt = p1[SV_PART_ATTENTION] - p0[SV_PART_ATTENTION];
    cr_expect_geq(dt, read, "batch %d: %g s for what HBM reads in %g s", b, dt, read);
    cr_expect(fabs((p2[SV_PART_ATTENTION] - p1[SV_PART_ATTENTION]) - dt) < 1e-9 * dt, "linear in the context");
  }
  fix_fini(&f);
}

Test(infer, a_decode_step_reads_every_weight_once, .timeout = 60)
{
  struct fix f;
  fix_init(&f, a2, llama4, 1, false, no_overhead);
  const struct arch_chip *c = &f.job.sys.chip;
  double bw = c->hbm.bw_bytes_per_s * c->calib.hbm.value;
  /* the linear work and head of a step at batch 1 and 16: the weights over the bandwidth (the
   * input embedding is not read: a gather of one row per sequence), within what the chip model's
   * kernels lose to tiles, launch gaps and vector kernels */
  const struct wl_model *m = &f.job.model;
  double read = sv_weight_bytes(m, 1) - 2.0 * m->vocab * m->hidden;
  double p[SV_PART_COUNT];
  for (int b = 1; b <= 16; b *= 16) {
    decode(&f.x, b, 0, p);
    double t = p[SV_PART_LINEAR] + p[SV_PART_HEAD];
    cr_expect(t >= read / bw && t <= 1.6 * read / bw, "batch %d: %.6g s, bytes / bandwidth %.6g s", b, t, read / bw);
  }
  /* memory-bound: batch 16 costs hardly more than batch 1; the interpolation is monotone */
  cr_expect_lt(decode(&f.x, 16, 0, NULL), 1.3 * decode(&f.x, 1, 0, NULL));
  double prev = 0;
  for (int b = 1; b <= 64; b++) {
    double t = decode(&f.x, b, 0, NULL);
    cr_expect_geq(t, prev * (1 - 1e-12), "batch %d", b);
    prev = t;
  }
  fix_fini(&f);
}

Test(infer, the_engine_time_is_step_overhead_plus_sequences_times_seq_overhead, .timeout = 60)
{
  struct fix f, g;
  fix_init(&f, a2, llama4, 1, false, no_overhead);
  fix_init(&g, a2, llama4, 1, false, "step_overhead = \"3ms\"; seq_overhead = \"50us\";");
  const int batch[] = {1, 16, 48};
  for (int i = 0; i < 3; i++) {
    int b = batch[i];
    double d = decode(&g.x, b, 3000.0 * b, NULL) - decode(&f.x, b, 3000.0 * b, NULL);
    cr_expect(fabs(d - (3e-3 + b * 50e-6)) < 1e-12, "batch %d: %g s more", b, d);
  }
  fix_fini(&g);
  fix_fini(&f);
  /* the defaults: vLLM V0 on H100 (docs/SERVING.md, Engine time) */
  fix_init(&f, a2, llama4, 1, false, "");
  cr_expect_float_eq(f.job.spec.engine.step_s, 0.67e-3, 1e-12);
  cr_expect_float_eq(f.job.spec.engine.seq_s, 41e-6, 1e-12);
  cr_expect_float_eq(f.job.spec.engine.worker_s, 1.99e-3, 1e-12);
  cr_expect_float_eq(f.job.spec.engine.worker_rank_s, 0.24e-3, 1e-12);
  fix_fini(&f);
}

Test(infer, an_engine_of_several_devices_adds_the_worker_time_to_every_step, .timeout = 60)
{
  /* step + worker + worker_rank x (tp - 2) at tp > 1; step alone at tp = 1 */
  const char *on = "step_overhead = \"1ms\"; seq_overhead = \"0s\"; worker_overhead = \"2ms\"; "
                   "worker_rank_overhead = \"0.5ms\";";
  const char *off = "step_overhead = \"0s\"; seq_overhead = \"0s\"; worker_overhead = \"0s\"; "
                    "worker_rank_overhead = \"0s\";";
  const int tps[] = {1, 2, 4};
  const double want[] = {1e-3, 3e-3, 4e-3};
  for (int i = 0; i < 3; i++) {
    struct fix f, g;
    fix_init(&f, a2, llama4, tps[i], false, off);
    fix_init(&g, a2, llama4, tps[i], false, on);
    double d = decode(&g.x, 8, 8 * 3000.0, NULL) - decode(&f.x, 8, 8 * 3000.0, NULL);
    cr_expect(fabs(d - want[i]) < 1e-12, "tp %d: %g s more, want %g", tps[i], d, want[i]);
    fix_fini(&g);
    fix_fini(&f);
  }
}

Test(infer, a_long_prefill_is_compute_bound, .timeout = 60)
{
  struct fix f;
  fix_init(&f, a2, llama4, 1, false, no_overhead);
  struct arch_derived dv;
  arch_derive(&f.job.sys, &dv);
  double peak = dv.peak_flops_per_s[NPU_DT_BF16];
  /* two prompts of 4096 in one step: 2 x matmul parameters per token (4 layers, the head for 2
   * rows) + causal attention 4 c (c / 2) d per layer and head */
  struct sv_step s = {8192, 2, 2, 0, 0, 2.0 * 4096 * 2048, 4096, 0, 0, 0, 0};
  double t = sv_step_s(&f.x, &s, NULL);
  const struct wl_model *m = &f.job.model;
  double flops = 8192.0 * 2 * 4 * wl_model_layer_params(m, 0) + 2.0 * 2 * m->vocab * m->hidden +
                 4.0 * s.prefill_pairs * 128 * 4 * m->heads;
  double ideal = flops / peak;
  cr_expect(t >= ideal, "prefill %.6g s faster than the peak allows (%.6g s)", t, ideal);
  cr_expect(t <= 2.0 * ideal, "prefill %.6g s, compute-bound %.6g s: not compute-bound", t, ideal);
  fix_fini(&f);
}

Test(infer, memory_arithmetic, .timeout = 30)
{
  struct fix f;
  fix_init(&f, a2, "preset = \"llama3.1-8b\";", 1, false, "");
  const struct wl_model *m = &f.job.model;
  cr_expect_float_eq(sv_weight_bytes(m, 4), 2.0 * wl_model_params(m) / 4, 1e-12);
  /* more TP ranks than KV heads: the heads are replicated, one per rank */
  cr_expect_float_eq(sv_kv_token_bytes(m, 16), 32.0 * 2 * 1 * 128 * 2, 1e-12);
  cr_expect_float_eq(sv_kv_token_bytes(m, 2), 32.0 * 2 * 4 * 128 * 2, 1e-12);
  /* per token: 2 x the matmul parameters (no input embedding) + 4 l s a d of attention */
  double mm = wl_model_params(m) - (double)m->vocab * m->hidden - (m->layers * 2.0 + 1) * m->hidden;
  cr_expect(fabs(sv_token_flops(m, 0) - 2 * mm) < 1e-3 * 2 * mm);
  cr_expect_float_eq(sv_token_flops(m, 1000) - sv_token_flops(m, 0), 4.0 * 32 * 1000 * 32 * 128, 1e-9);
  fix_fini(&f);
}

/* MoE decode reads the experts the batch touches: top-8 of 128 at batch 1, nearly all at 256. */
Test(infer, moe_decode_reads_the_touched_experts, .timeout = 60)
{
  for (int ep = 0; ep < 2; ep++) {
    struct fix f;
    fix_init(&f, "preset = \"dgx-h100\";", "preset = \"qwen3-30b-a3b\"; layers = 4;", 2, ep, no_overhead);
    const struct wl_model *m = &f.job.model;
    const struct arch_chip *c = &f.job.sys.chip;
    double bw = c->hbm.bw_bytes_per_s * c->calib.hbm.value;
    double experts = 4.0 * 128 * 3 * m->hidden * m->moe.ffn * 2 / 2; /* bf16, per rank of TP2 */
    double p1[SV_PART_COUNT], p256[SV_PART_COUNT];
    decode(&f.x, 1, 0, p1);
    decode(&f.x, 256, 0, p256);
    double t1 = p1[SV_PART_LINEAR], t256 = p256[SV_PART_LINEAR];
    cr_expect_geq(t256, experts / bw, "ep %d: %.6g s below the expert bytes %.6g s", ep, t256, experts / bw);
    cr_expect_lt(t1, t256 - 0.8 * experts / bw, "ep %d: batch 1 %.6g s should skip most experts (256: %.6g s)", ep,
                 t1, t256);
    fix_fini(&f);
  }
}
