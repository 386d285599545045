/*
 * test_memory.c - per-rank memory: Korthikanti et al. 2022's per-layer activations (Table 2)
 * and per-GPU memory (Fig. 1), ZeRO sharding, micro-batches in flight per schedule, parameter
 * placement over pipeline stages, the GQA / SwiGLU / FlashAttention extensions; MoE (experts
 * over EP and expert TP, expert data parallelism), MLA, QK and sandwich norms, DualPipe,
 * context parallelism and fp8, each against a closed form.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/workloads/helpers.h"
#include "workloads/memory.h"

#define GIB 1073741824.0

/* GPT-3 175B shape on 8-way TP, one stage, one micro-batch: the per-layer rows of Table 2. */
Test(memory, layer_activations_follow_korthikanti_table_2, .timeout = 30)
{
  static const struct {
    const char *sp, *recompute;
    int tp;
    double sbh_factor_fixed, score_factor; /* act = sbh (fixed + score x 5as/h) */
  } rows[] = {
      /* no parallelism: sbh (34 + 5as/h) */
      {"false", "none", 1, 34, 1},
      /* TP: sbh (10 + 24/t + 5as/ht) */
      {"false", "none", 8, 10 + 24.0 / 8, 1.0 / 8},
      /* TP + SP: sbh (34/t + 5as/ht) */
      {"true", "none", 8, 34.0 / 8, 1.0 / 8},
      /* TP + selective: sbh (10 + 24/t) */
      {"false", "selective", 8, 10 + 24.0 / 8, 0},
      /* TP + SP + selective: sbh 34/t */
      {"true", "selective", 8, 34.0 / 8, 0},
      /* full recompute: 2 sbh, sharded by SP */
      {"false", "full", 8, 2, 0},
      {"true", "full", 8, 2.0 / 8, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char sp[64], rc[64], tp[64];
    snprintf(sp, sizeof sp, "plan.sp=%s", rows[i].sp);
    snprintf(rc, sizeof rc, "plan.recompute=%s", rows[i].recompute);
    snprintf(tp, sizeof tp, "plan.tp=%d", rows[i].tp);
    const char *sets[] = {tp, sp, rc, "plan.micro_batch=2", "plan.global_batch=2", NULL};
    struct tw w;
    tw_load(&w, "gpt3-175b", rows[i].tp, sets);
    double s = w.m.seq_len, b = 2, h = w.m.hidden, a = w.m.heads;
    double want = s * b * h * (rows[i].sbh_factor_fixed + rows[i].score_factor * 5 * a * s / h);
    char what[128];
    snprintf(what, sizeof what, "tp %d sp %s recompute %s", rows[i].tp, rows[i].sp, rows[i].recompute);
    for (int l = 0; l < w.m.layers; l += 37) tw_close(wl_memory_layer_activations(&w.m, &w.p, l), want, 1e-12, what);
    tw_fini(&w);
  }
}

/*
 * Korthikanti et al. 2022, Fig. 1 (as in ../shared/reference/calibration.md): per-GPU memory of
 * the 22B / 175B / 530B / 1T configurations, TP 8, DP 1, sequence 2048, standard attention.
 * Conventions the published numbers follow (derived, see docs/MEMORY.md):
 *   - "parameters and optimizer state" = 18 bytes x the transformer layers' parameters of one
 *     stage, 12 l h^2 / (t p): no embedding, so it is compared with a stage that holds none
 *     (stage 1; the only stage of the 22B run, whose embedding adds 1.9%);
 *   - "activations" = the first stage, p micro-batches of L / p layers (x (1 + (p-1)/(pm))
 *     interleaved): compared with stage 0, whose embedding dropout mask and (22B) output layer
 *     inputs come on top.
 */
static const struct {
  const char *model;
  int pp, vpp, mb, gb, gpus;
  double params_opt_gib, act_none_gib, act_sp_sel_gib; /* published */
} fig1[] = {
    {"gpt3-22b", 1, 1, 4, 4, 8, 45.56, 59.25, 9.56},
    {"gpt3-175b", 8, 3, 1, 64, 64, 45.56, 66.84, 12.35},
    {"gpt3-530b", 35, 3, 1, 280, 280, 31.64, 114.02, 23.08},
    {"gpt3-1t", 64, 1, 1, 512, 512, 32.96, 131.25, 26.56},
};

static void fig1_load(struct tw *w, int i, bool sp_selective)
{
  char pp[32], vpp[32], mb[48], gb[48];
  snprintf(pp, sizeof pp, "plan.pp=%d", fig1[i].pp);
  snprintf(vpp, sizeof vpp, "plan.vpp=%d", fig1[i].vpp);
  snprintf(mb, sizeof mb, "plan.micro_batch=%d", fig1[i].mb);
  snprintf(gb, sizeof gb, "plan.global_batch=%d", fig1[i].gb);
  const char *sets[] = {"model.attention=standard",
                        "plan.tp=8",
                        "plan.dp=1",
                        pp,
                        vpp,
                        fig1[i].vpp > 1 ? "plan.schedule=interleaved" : "plan.schedule=1f1b",
                        mb,
                        gb,
                        sp_selective ? "plan.sp=true" : "plan.sp=false",
                        sp_selective ? "plan.recompute=selective" : "plan.recompute=none",
                        NULL};
  tw_load(w, fig1[i].model, fig1[i].gpus, sets);
}

Test(memory, korthikanti_figure_1, .timeout = 60)
{
  printf("\nKorthikanti et al. 2022 Fig. 1, per-GPU memory (GiB): npusim vs published\n");
  printf("%-10s %-26s %10s %10s %8s\n", "model", "quantity", "npusim", "published", "error");
  for (size_t i = 0; i < sizeof fig1 / sizeof fig1[0]; i++) {
    struct tw w;
    struct wl_mem first, mid;
    for (int v = 0; v < 2; v++) {
      fig1_load(&w, (int)i, v == 1);
      wl_memory_stage(&w.m, &w.p, 0, &first);
      wl_memory_stage(&w.m, &w.p, w.p.pp > 1 ? 1 : 0, &mid);
      double got[2] = {(mid.weights_bytes + mid.grads_bytes + mid.optimizer_bytes) / GIB,
                       first.activations_bytes / GIB};
      double want[2] = {fig1[i].params_opt_gib, v ? fig1[i].act_sp_sel_gib : fig1[i].act_none_gib};
      const char *what[2] = {"params + optimizer", v ? "activations, SP + selective" : "activations, no recompute"};
      for (int k = v; k < 2; k++) { /* parameters do not depend on SP or recompute: print once */
        printf("%-10s %-26s %10.2f %10.2f %+7.2f%%\n", fig1[i].model, what[k], got[k], want[k],
               100 * (got[k] / want[k] - 1));
        char msg[128];
        snprintf(msg, sizeof msg, "%s %s (GiB)", fig1[i].model, what[k]);
        tw_close(got[k], want[k], 0.05, msg);
      }
      tw_fini(&w);
    }
  }
  fflush(stdout);
}

/* The published figures are Korthikanti's formulas exactly: the transformer layers alone. */
Test(memory, korthikanti_figure_1_layers_alone_match_exactly, .timeout = 60)
{
  for (size_t i = 0; i < sizeof fig1 / sizeof fig1[0]; i++) {
    struct tw w;
    for (int v = 0; v < 2; v++) {
      fig1_load(&w, (int)i, v == 1);
      double L = w.m.layers, h = w.m.hidden, p = w.p.pp, t = w.p.tp, m = w.p.vpp;
      /* 18 bytes x 12 l h^2 / (t p) */
      tw_close(18 * 12 * L * h * h / (t * p) / GIB, fig1[i].params_opt_gib, 0.0005, fig1[i].model);
      /* first stage: L layers' worth, x (1 + (p-1)/(pm)) interleaved */
      double factor = m > 1 ? 1 + (p - 1) / (p * m) : 1;
      double per_layer = wl_memory_layer_activations(&w.m, &w.p, 0);
      tw_close(L * factor * per_layer / GIB, v ? fig1[i].act_sp_sel_gib : fig1[i].act_none_gib, 0.0005,
               fig1[i].model);
      tw_fini(&w);
    }
  }
}

/* Megatron's mixed precision: 2 + 4 + 12 = 18 bytes per parameter; ZeRO shards over dp. */
Test(memory, zero_stages_shard_over_dp, .timeout = 30)
{
  struct wl_mem z[4];
  for (int zero = 0; zero < 4; zero++) {
    char zs[32];
    snprintf(zs, sizeof zs, "plan.zero=%d", zero);
    const char *sets[] = {zs, "plan.global_batch=32", NULL};
    struct tw w;
    tw_load(&w, "llama2-7b", 8, sets); /* tp 1, pp 1, dp 8 */
    cr_assert_eq(w.p.dp, 8);
    wl_memory_stage(&w.m, &w.p, 0, &z[zero]);
    if (zero == 0) {
      double n = wl_model_params(&w.m);
      tw_close(z[0].weights_bytes, 2 * n, 1e-12, "bf16 weights");
      tw_close(z[0].grads_bytes, 4 * n, 1e-12, "fp32 grads");
      tw_close(z[0].optimizer_bytes, 12 * n, 1e-12, "Adam states");
    }
    tw_fini(&w);
  }
  tw_close(z[1].optimizer_bytes, z[0].optimizer_bytes / 8, 1e-12, "ZeRO-1 optimizer");
  tw_close(z[1].grads_bytes, z[0].grads_bytes, 1e-12, "ZeRO-1 grads");
  tw_close(z[1].weights_bytes, z[0].weights_bytes, 1e-12, "ZeRO-1 weights");
  tw_close(z[2].grads_bytes, z[0].grads_bytes / 8, 1e-12, "ZeRO-2 grads");
  tw_close(z[2].weights_bytes, z[0].weights_bytes, 1e-12, "ZeRO-2 weights");
  tw_close(z[3].weights_bytes, z[0].weights_bytes / 8, 1e-12, "ZeRO-3 weights");
  tw_close(z[3].grads_bytes, z[0].grads_bytes / 8, 1e-12, "ZeRO-3 grads");
  tw_close(z[3].optimizer_bytes, z[0].optimizer_bytes / 8, 1e-12, "ZeRO-3 optimizer");
  cr_assert_eq(z[3].activations_bytes, z[0].activations_bytes);
  cr_assert_gt(z[3].comm_bytes, z[2].comm_bytes, "ZeRO-3 gathers layers into a buffer");
}

/* Megatron's distributed optimizer shards over dp x cp. */
Test(memory, zero_shards_over_dp_and_cp, .timeout = 30)
{
  const char *sets[] = {"plan.zero=1", "plan.cp=2", "plan.global_batch=32", NULL};
  struct tw w;
  tw_load(&w, "llama2-7b", 8, sets);
  cr_assert_eq(w.p.dp, 4);
  struct wl_mem mem;
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  tw_close(mem.optimizer_bytes, 12 * wl_model_params(&w.m) / 8, 1e-12, "optimizer over dp x cp");
  tw_fini(&w);
}

Test(memory, one_f_one_b_holds_pp_minus_stage_micro_batches, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.pp=8", "plan.global_batch=64", NULL};
  struct tw w;
  tw_load(&w, "gpt3-175b", 64, sets);
  struct wl_mem mem;
  for (int s = 0; s < 8; s++) {
    wl_memory_stage(&w.m, &w.p, s, &mem);
    cr_assert_eq(mem.stage, s);
    cr_assert_eq(mem.inflight, 8 - s, "stage %d holds %d", s, mem.inflight);
    /* 12 layers per stage, every layer alike */
    double layers = 12 * wl_memory_layer_activations(&w.m, &w.p, 0) * (8 - s);
    double extra = mem.activations_bytes - layers;
    if (s == 0 || s == 7)
      cr_assert_gt(extra, 0, "stage %d: embedding or output layer activations", s);
    else
      cr_assert_eq(extra, 0, "stage %d: transformer layers only", s);
    if (s == 7)
      tw_close(mem.logits_bytes, 4.0 * 2048 * 1 * 51200 / 8, 1e-12, "fp32 logits, one micro-batch");
    else
      cr_assert_eq(mem.logits_bytes, 0);
  }
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  cr_assert_eq(mem.inflight, 8);
  wl_memory_stage(&w.m, &w.p, 7, &mem);
  cr_assert_eq(mem.inflight, 1);
  tw_fini(&w);

  /* fewer micro-batches than stages: every stage holds them all */
  const char *few[] = {"plan.tp=8", "plan.pp=8", "plan.global_batch=3", NULL};
  tw_load(&w, "gpt3-175b", 64, few);
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  cr_assert_eq(mem.inflight, 3);
  tw_fini(&w);
}

/* Activation offload (plan.offload_layers = 5 of a stage's 12 GPT-3 175B layers): the offloaded
 * layers' activations leave the device for every micro-batch in flight, two layers' stay (the
 * one being copied out or in beside the one computing): (5 x in flight - 2) layers fewer. */
Test(memory, offloaded_layers_leave_two_on_the_device, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.pp=8", "plan.global_batch=64", NULL};
  struct tw w;
  tw_load(&w, "gpt3-175b", 64, sets);
  struct wl_mem kept, off;
  double layer = wl_memory_layer_activations(&w.m, &w.p, 0);
  for (int s = 0; s < 8; s++) {
    w.p.offload_layers = 0;
    wl_memory_stage(&w.m, &w.p, s, &kept);
    w.p.offload_layers = 5;
    wl_memory_stage(&w.m, &w.p, s, &off);
    tw_close(kept.activations_bytes - off.activations_bytes, (5.0 * kept.inflight - 2) * layer, 1e-12,
             "activations offloaded");
    cr_assert_eq(off.weights_bytes, kept.weights_bytes);
  }
  tw_fini(&w);
}

Test(memory, gpipe_holds_every_micro_batch, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.pp=8", "plan.global_batch=64", "plan.schedule=gpipe", NULL};
  struct tw w;
  tw_load(&w, "gpt3-175b", 64, sets);
  struct wl_mem mem;
  for (int s = 0; s < 8; s++) {
    wl_memory_stage(&w.m, &w.p, s, &mem);
    cr_assert_eq(mem.inflight, 64);
  }
  tw_close(mem.logits_bytes, 64 * 4.0 * 2048 * 51200 / 8, 1e-12, "GPipe: every micro-batch's logits");
  tw_fini(&w);
}

/* Megatron's interleaved warm-up: stage r holds 2 (p - r - 1) + (v - 1) p + 1 chunks. */
Test(memory, interleaved_warmup, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8",          "plan.pp=8",          "plan.vpp=3",
                        "plan.global_batch=64", "plan.schedule=interleaved", NULL};
  struct tw w;
  tw_load(&w, "gpt3-175b", 64, sets);
  struct wl_mem mem;
  for (int r = 0; r < 8; r++) {
    wl_memory_stage(&w.m, &w.p, r, &mem);
    cr_assert_eq(mem.inflight, 2 * (8 - r - 1) + 2 * 8 + 1, "stage %d", r);
  }
  /* only as many as exist: 8 micro-batches x 3 chunks */
  tw_fini(&w);
  const char *few[] = {"plan.tp=8", "plan.pp=8", "plan.vpp=3", "plan.global_batch=8", "plan.schedule=interleaved",
                       NULL};
  tw_load(&w, "gpt3-175b", 64, few);
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  cr_assert_eq(mem.inflight, 24);
  tw_fini(&w);
}

/* Parameters over the stages add up to the model, tied embeddings counted on both ends. */
Test(memory, stage_parameters_add_up, .timeout = 30)
{
  static const char *const models[] = {"gpt3-1.7b", "llama2-7b", "llama3-8b"};
  for (size_t i = 0; i < 3; i++) {
    for (int pp = 1; pp <= 4; pp *= 2) {
      char pps[32];
      snprintf(pps, sizeof pps, "plan.pp=%d", pp);
      const char *sets[] = {pps, "plan.global_batch=16", NULL};
      struct tw w;
      tw_load(&w, models[i], pp, sets);
      double sum = 0;
      for (int s = 0; s < pp; s++) {
        struct wl_mem mem;
        wl_memory_stage(&w.m, &w.p, s, &mem);
        sum += mem.weights_bytes / 2;
      }
      double want = wl_model_params(&w.m);
      if (w.m.tied_embeddings && pp > 1) want += (double)w.m.vocab * w.m.hidden; /* last stage's copy */
      char what[96];
      snprintf(what, sizeof what, "%s pp %d parameters", models[i], pp);
      tw_close(sum, want, 1e-12, what);
      tw_fini(&w);
    }
  }
}

/* TP splits matrices and the vocabulary, and keeps norms (and row-parallel biases) whole. */
Test(memory, tensor_parallel_split, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.global_batch=8", NULL};
  struct tw w;
  tw_load(&w, "llama2-7b", 8, sets);
  struct wl_mem mem;
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  double h = w.m.hidden, L = w.m.layers, V = w.m.vocab;
  double norms = (2 * L + 1) * h, rest = wl_model_params(&w.m) - norms;
  tw_close(mem.weights_bytes / 2, rest / 8 + norms, 1e-12, "llama2-7b on tp 8");
  (void)V;
  tw_fini(&w);
}

/* GQA with FlashAttention stores K and V at kv_heads: 4 s b (q - kv) / t bytes less per layer
 * than MHA; the standard attention saves K and V repeated to every head. */
Test(memory, gqa_shrinks_k_and_v, .timeout = 30)
{
  const char *mha_sets[] = {"plan.tp=8", "plan.global_batch=8", "model.kv_heads=64", NULL};
  const char *gqa_sets[] = {"plan.tp=8", "plan.global_batch=8", NULL};
  struct tw mha, gqa;
  tw_load(&mha, "llama2-70b", 8, mha_sets);
  tw_load(&gqa, "llama2-70b", 8, gqa_sets);
  double s = 4096, b = 1, q = 8192, kv = 8 * 128;
  double diff = wl_memory_layer_activations(&mha.m, &mha.p, 0) - wl_memory_layer_activations(&gqa.m, &gqa.p, 0);
  tw_close(diff, 2 * 2 * s * b * (q - kv) / 8, 1e-12, "flash: K and V at kv_heads");
  tw_fini(&mha);
  tw_fini(&gqa);

  const char *mha_std[] = {"plan.tp=8", "plan.global_batch=8", "model.kv_heads=64", "model.attention=standard", NULL};
  const char *gqa_std[] = {"plan.tp=8", "plan.global_batch=8", "model.attention=standard", NULL};
  tw_load(&mha, "llama2-70b", 8, mha_std);
  tw_load(&gqa, "llama2-70b", 8, gqa_std);
  cr_assert_eq(wl_memory_layer_activations(&mha.m, &mha.p, 0), wl_memory_layer_activations(&gqa.m, &gqa.p, 0),
               "standard attention saves the repeated K and V");
  tw_fini(&mha);
  tw_fini(&gqa);
}

/* SwiGLU stores the gate and up outputs (2f) and its output (f): 6 s b f bytes against GeLU's
 * 4 s b f at the same inner size; FlashAttention stores the fp32 LSE instead of 5 a s^2 b. */
Test(memory, swiglu_and_flash, .timeout = 30)
{
  const char *gelu_sets[] = {"plan.global_batch=8", "model.activation=gelu", NULL};
  const char *swiglu_sets[] = {"plan.global_batch=8", NULL};
  struct tw g, sw;
  tw_load(&g, "llama2-7b", 1, gelu_sets);
  tw_load(&sw, "llama2-7b", 1, swiglu_sets);
  double s = 4096, b = 1, h = 4096, f = 11008, a = 32;
  tw_close(wl_memory_layer_activations(&sw.m, &sw.p, 0) - wl_memory_layer_activations(&g.m, &g.p, 0),
           2 * s * b * f, 1e-12, "SwiGLU - GeLU");
  /* Korthikanti's 34 sbh with the MLP's 16 sbh replaced by 6 s b f, the scores by the LSE, and
   * no dropout masks (Llama trains without dropout: 2 sbh less) */
  tw_close(wl_memory_layer_activations(&sw.m, &sw.p, 0), s * b * h * 16 + 6 * s * b * f + 4 * s * b * a, 1e-12,
           "llama2-7b layer, flash");
  tw_fini(&g);
  tw_fini(&sw);
}

/* Routed experts are split over ep and sharded over the expert data-parallel group. */
Test(memory, moe_experts_split_over_ep, .timeout = 30)
{
  struct wl_mem e1, e4;
  struct tw w;
  const char *ep1[] = {"model.moe.experts=8", "model.moe.top_k=2", "model.moe.ffn=4096", "plan.global_batch=8",
                       "plan.ep=1", NULL};
  const char *ep4[] = {"model.moe.experts=8", "model.moe.top_k=2", "model.moe.ffn=4096", "plan.global_batch=8",
                       "plan.ep=4", NULL};
  tw_load(&w, "llama2-7b", 4, ep1);
  wl_memory_stage(&w.m, &w.p, 0, &e1);
  tw_fini(&w);
  tw_load(&w, "llama2-7b", 4, ep4);
  wl_memory_stage(&w.m, &w.p, 0, &e4);
  double experts = 32.0 * 8 * 3 * 4096 * 4096; /* layers x experts x 3 matrices */
  tw_close(e1.weights_bytes - e4.weights_bytes, 2 * experts * 3 / 4, 1e-9, "expert weights over ep 4");
  cr_assert_eq(e1.activations_bytes, e4.activations_bytes);
  tw_fini(&w);
}

Test(memory, peak_is_the_largest_stage, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.pp=4", "plan.global_batch=64", "plan.sp=true", NULL};
  struct tw w;
  tw_load(&w, "llama3-70b", 32, sets);
  struct wl_mem peak, mem;
  wl_memory_peak(&w.m, &w.p, &peak);
  for (int s = 0; s < 4; s++) {
    wl_memory_stage(&w.m, &w.p, s, &mem);
    cr_assert_leq(mem.total_bytes, peak.total_bytes);
    tw_close(mem.total_bytes,
             mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.activations_bytes + mem.logits_bytes +
                 mem.comm_bytes,
             1e-12, "total");
  }
  wl_memory_stage(&w.m, &w.p, peak.stage, &mem);
  cr_assert_eq(mem.total_bytes, peak.total_bytes);
  tw_fini(&w);
}

/* ---- MoE, MLA, norms, DualPipe, CP, fp8 ------------------------------------------------- */

#define ACT 2.0 /* bytes of a bf16 activation */

/* Routed experts split over EP and expert TP (= tp); their gradients and optimizer states shard
 * over the expert data-parallel group dp x cp / ep, the rest over dp x cp. Mixtral on 16 ranks:
 * tp 2, cp 2, dp 4, ep 4: expert data parallelism 2, dense 8. */
Test(memory, moe_experts_shard_over_ep_and_expert_tp, .timeout = 30)
{
  double h = 4096, q = 4096, kv = 1024, f = 14336, E = 8, V = 32000, L = 32, t = 2;
  /* per rank: attention / t, 2 norms and the router replicated, 8/4 experts / t, embedding
   * and output projection / t, final norm */
  double dense = L * ((h * (q + 2 * kv) + q * h) / t + 2 * h + h * E) + 2 * V * h / t + h;
  double expert = L * (E / 4) * 3 * h * f / t;
  for (int zero = 0; zero <= 3; zero++) {
    char zs[32];
    snprintf(zs, sizeof zs, "plan.zero=%d", zero);
    const char *sets[] = {"plan.tp=2", "plan.cp=2", "plan.ep=4", "plan.global_batch=8", zs, NULL};
    struct tw w;
    tw_load(&w, "mixtral-8x7b", 16, sets);
    cr_assert_eq(w.p.dp, 4);
    struct wl_mem mem;
    wl_memory_stage(&w.m, &w.p, 0, &mem);
    double d = 8, e = 2; /* dp x cp, dp x cp / ep */
    tw_close(mem.weights_bytes, 2 * (zero >= 3 ? dense / d + expert / e : dense + expert), 1e-12, "weights");
    tw_close(mem.grads_bytes, 4 * (zero >= 2 ? dense / d + expert / e : dense + expert), 1e-12, "gradients");
    tw_close(mem.optimizer_bytes, 12 * (zero >= 1 ? dense / d + expert / e : dense + expert), 1e-12, "optimizer");
    tw_fini(&w);
  }
}

/* An MoE layer keeps [MOE]: the router's fp32 scores (4 s b E, / t with SP), per token copy
 * (top_k x capacity factor per token, gathered over TP) the expert input (2 h) and its fp32
 * probability (4), and the expert MLP's fc1 output and fc2 input (6 f / t); not the expert
 * output. Mixtral, sequence 4096, flash attention, no recompute. */
Test(memory, moe_layer_activations, .timeout = 30)
{
  double s = 4096, b = 1, h = 4096, q = 4096, kv = 1024, a = 32, E = 8, k = 2, f = 14336;
  struct {
    const char *tp, *sp, *cf;
    double t, whole, cf_v;
  } rows[] = {
      {"plan.tp=1", "plan.sp=false", "model.moe.capacity_factor=0", 1, 1, 1},
      {"plan.tp=2", "plan.sp=true", "model.moe.capacity_factor=0", 2, 2, 1},
      {"plan.tp=2", "plan.sp=false", "model.moe.capacity_factor=1.25", 2, 1, 1.25},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *sets[] = {rows[i].tp, rows[i].sp, rows[i].cf, "model.seq_len=4096", "plan.global_batch=4", NULL};
    struct tw w;
    tw_load(&w, "mixtral-8x7b", (int)rows[i].t, sets);
    double t = rows[i].t, W = rows[i].whole, copies = s * b * k * rows[i].cf_v;
    double want = (2 + 1 + 1) * ACT * s * b * h / W         /* 2 norm inputs, attention and router input */
                  + ACT * s * b * (q + 2 * kv) / t + ACT * s * b * q / t /* Q, K, V; attention output */
                  + 4 * s * b * a / t                            /* LSE */
                  + 4 * s * b * E / W                            /* router scores */
                  + copies * (ACT * h + 4)                       /* expert input, probability */
                  + copies * 6 * f / t;                          /* fc1 output 2f, fc2 input f */
    char what[64];
    snprintf(what, sizeof what, "Mixtral layer, row %zu", i);
    tw_close(wl_memory_layer_activations(&w.m, &w.p, 5), want, 1e-12, what);
    tw_fini(&w);
  }
}

/* MLA [MLA]: the attention input (kept by both down projections, one bf16 tensor), each latent
 * and its normalised copy (2 + 2 bytes x (q_lora + kv_lora), / t with SP), Q and K of heads x 192,
 * V of heads x 128, the attention output heads x 128, the LSE. DeepSeek-V3 on tp 8, sequence
 * parallel; layer 0 dense (f = 18432), layer 3 MoE (256 experts, 8 per token, 1 shared). */
Test(memory, mla_layer_activations, .timeout = 30)
{
  double s = 4096, b = 1, h = 7168, a = 128, ql = 1536, kl = 512, t = 8;
  for (int sp = 0; sp < 2; sp++) {
    const char *sets[] = {"plan.tp=8", sp ? "plan.sp=true" : "plan.sp=false", "plan.global_batch=1", NULL};
    struct tw w;
    tw_load(&w, "deepseek-v3", 8, sets);
    double W = sp ? t : 1;
    double attn = (2 + 1 + 1) * ACT * s * b * h / W + (ACT + ACT) * s * b * (ql + kl) / W +
                  ACT * s * b * a * (192 + 192 + 128) / t + ACT * s * b * a * 128 / t + 4 * s * b * a / t;
    tw_close(wl_memory_layer_activations(&w.m, &w.p, 0), attn + s * b * 6 * 18432 / t, 1e-12, "MLA dense layer");
    double moe = attn + 4 * s * b * 256 / W + s * b * 8 * (ACT * h + 4) + s * b * 8 * 6 * 2048 / t +
                 s * b * 1 * 6 * 2048 / t;
    tw_close(wl_memory_layer_activations(&w.m, &w.p, 3), moe, 1e-12, "MLA MoE layer");
    tw_fini(&w);
  }
  /* no query compression: the q latent and its norm are gone */
  const char *sets[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", NULL};
  const char *noq[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "model.mla.q_lora_rank=0", NULL};
  struct tw w, wq;
  tw_load(&w, "deepseek-v3", 8, sets);
  tw_load(&wq, "deepseek-v3", 8, noq);
  tw_close(wl_memory_layer_activations(&w.m, &w.p, 0) - wl_memory_layer_activations(&wq.m, &wq.p, 0),
           2 * ACT * s * b * ql / t, 1e-12, "q latent");
  tw_fini(&w);
  tw_fini(&wq);
}

/* MLA parameters on a TP rank [MLA]: W_dq, W_dkv and the latent norms whole on every rank,
 * W_uq, W_ukv, W_o split. DeepSeek-V3 on tp 8 and ep 8 (dp 8). */
Test(memory, mla_down_projections_whole_on_every_tp_rank, .timeout = 30)
{
  const char *sets[] = {"plan.tp=8", "plan.ep=8", "plan.global_batch=8", "model.mtp_layers=0", NULL};
  struct tw w;
  tw_load(&w, "deepseek-v3", 64, sets);
  struct wl_mem mem;
  wl_memory_stage(&w.m, &w.p, 0, &mem);
  double h = 7168, a = 128, ql = 1536, kl = 512, V = 129280, t = 8;
  double whole = h * ql + h * (kl + 64) + ql + kl + 2 * h, split = ql * a * 192 + kl * a * 256 + a * 128 * h;
  double attn = whole + split / t;
  double dense = 3 * (attn + 3 * h * 18432 / t) + 58 * (attn + 3 * h * 2048 / t + 256 * h) + 2 * V * h / t + h;
  double expert = 58 * (256 / 8) * 3 * h * 2048 / t;
  tw_close(mem.weights_bytes, 2 * (dense + expert), 1e-12, "DeepSeek-V3 weights on a tp 8, ep 8 rank");
  tw_fini(&w);
}

/* With tp = pp = ep = 1 a rank holds the whole model, as model.c counts it, with its MTP modules
 * (DeepSeek-V3's one: 11.6B parameters). */
Test(memory, one_rank_holds_the_model, .timeout = 30)
{
  static const char *const models[] = {"mixtral-8x7b",     "deepseek-v3",      "qwen3-30b-a3b",
                                       "qwen3-235b-a22b", "pangu-ultra-135b", "pangu-ultra-moe"};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    const char *sets[] = {"plan.global_batch=1", NULL};
    struct tw w;
    tw_load(&w, models[i], 1, sets);
    struct wl_mem mem;
    wl_memory_stage(&w.m, &w.p, 0, &mem);
    tw_close(mem.weights_bytes / 2, wl_model_params(&w.m) + wl_model_mtp_params(&w.m), 1e-12, models[i]);
    tw_fini(&w);
  }
}

/* Sandwich norm: two more norm inputs per layer (2 + 2 s b h, / t with SP) and two more norms
 * of h, replicated over TP. Pangu Ultra on tp 8 with SP. */
Test(memory, sandwich_norm_keeps_the_sublayer_outputs, .timeout = 30)
{
  const char *on[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", NULL};
  const char *off[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "model.sandwich_norm=false", NULL};
  struct tw a, b;
  tw_load(&a, "pangu-ultra-135b", 8, on);
  tw_load(&b, "pangu-ultra-135b", 8, off);
  double s = 4096, h = 12288;
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&b.m, &b.p, 0),
           2 * ACT * s * h / 8, 1e-12, "two output norms' inputs");
  struct wl_mem ma, mb;
  wl_memory_stage(&a.m, &a.p, 0, &ma);
  wl_memory_stage(&b.m, &b.p, 0, &mb);
  tw_close(ma.weights_bytes - mb.weights_bytes, 2 * 2 * h * 94, 1e-12, "two norms per layer on every TP rank");
  tw_fini(&a);
  tw_fini(&b);
}

/* QK norm keeps the query and key before the norm: 2 s b (q + kv) / t. Qwen3-30B-A3B, tp 4. */
Test(memory, qk_norm_keeps_query_and_key, .timeout = 30)
{
  const char *on[] = {"plan.tp=4", "plan.global_batch=1", NULL};
  const char *off[] = {"plan.tp=4", "plan.global_batch=1", "model.qk_norm=false", NULL};
  struct tw a, b;
  tw_load(&a, "qwen3-30b-a3b", 4, on);
  tw_load(&b, "qwen3-30b-a3b", 4, off);
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&b.m, &b.p, 0),
           ACT * 4096 * (32 * 128 + 4 * 128) / 4, 1e-12, "query and key before the norm");
  tw_fini(&a);
  tw_fini(&b);
}

/* DualPipe [DSV3] [DPS]: rank r holds model chunks r and pp-1-r, both chunks' parameters (twice a
 * 1F1B stage's), and pp + 1 micro-batches: pp - r of chunk r and r + 1 of chunk pp-1-r, as the
 * schedule's program has them at its peak. Llama 2 7B, pp 4, 8 micro-batches. */
Test(memory, dualpipe_holds_two_chunks, .timeout = 30)
{
  const char *dual[] = {"plan.pp=4", "plan.global_batch=8", "plan.schedule=dualpipe", NULL};
  const char *one[] = {"plan.pp=4", "plan.global_batch=8", NULL};
  struct tw w, w1;
  tw_load(&w, "llama2-7b", 4, dual);
  tw_load(&w1, "llama2-7b", 4, one);
  double s = 4096, b = 1, h = 4096, V = 32000, layer = wl_model_layer_params(&w.m, 0);
  double act = wl_memory_layer_activations(&w.m, &w.p, 0);
  struct wl_mem mem, mem1;
  for (int r = 0; r < 4; r++) {
    wl_memory_stage(&w.m, &w.p, r, &mem);
    wl_memory_stage(&w1.m, &w1.p, r, &mem1);
    cr_assert_eq(mem.inflight, 5, "rank %d holds pp + 1", r);
    bool ends = r == 0 || r == 3;
    /* 16 layers; the ends hold the embedding, the final norm and the output projection */
    tw_close(mem.weights_bytes, 2 * (16 * layer + (ends ? 2 * V * h + h : 0)), 1e-12, "both chunks' weights");
    if (!ends) tw_close(mem.weights_bytes, 2 * mem1.weights_bytes, 1e-12, "twice a 1F1B stage");
    /* chunk r: pp - r micro-batches; chunk pp-1-r: r + 1; the head chunk (3) adds its inputs and logits */
    double n_head = r == 0 ? 1 : r == 3 ? 4 - 3 : 0;
    double want = 5 * 8 * act + n_head * 2 * ACT * s * b * h;
    tw_close(mem.activations_bytes, want, 1e-12, "activations");
    tw_close(mem.logits_bytes, n_head * 4 * s * b * V, 1e-12, "logits");
  }
  tw_fini(&w);
  tw_fini(&w1);
}

/* Context parallelism divides the sequence a rank's activations hold (exactly, with
 * FlashAttention), and ring attention adds K/V buffers [TE]: in the backward two buffers, each
 * a K/V block of the local chunk and its gradient, 4 x 2 (s / cp) b kv_heads (qk + v) / t. */
Test(memory, context_parallel_divides_activations_and_adds_kv_blocks, .timeout = 30)
{
  static const struct { const char *model; double kvh, qk_v; int tp; } rows[] = {
      {"llama2-7b", 32, 256, 1}, {"llama3-8b", 8, 256, 1}, {"deepseek-v3", 128, 192 + 128, 8}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char tp[32];
    snprintf(tp, sizeof tp, "plan.tp=%d", rows[i].tp);
    const char *cp1[] = {tp, "plan.cp=1", "plan.global_batch=8", NULL};
    const char *cp2[] = {tp, "plan.cp=2", "plan.global_batch=8", NULL};
    struct tw a, b;
    tw_load(&a, rows[i].model, 8 * rows[i].tp, cp1);
    tw_load(&b, rows[i].model, 8 * rows[i].tp, cp2);
    cr_assert_eq(a.p.dp * a.p.cp, b.p.dp * b.p.cp);
    for (int l = 0; l < 4; l += 3)
      tw_close(wl_memory_layer_activations(&b.m, &b.p, l), wl_memory_layer_activations(&a.m, &a.p, l) / 2, 1e-12,
               rows[i].model);
    struct wl_mem ma, mb;
    wl_memory_stage(&a.m, &a.p, 0, &ma);
    wl_memory_stage(&b.m, &b.p, 0, &mb);
    double s = a.m.seq_len / 2.0;
    tw_close(mb.comm_bytes - ma.comm_bytes, 4 * ACT * s * rows[i].kvh * rows[i].qk_v / rows[i].tp, 1e-12,
             "ring-attention K/V blocks");
    tw_fini(&a);
    tw_fini(&b);
  }
}

/* fp8 training [TE] [DSV3]: linear layers keep their inputs in fp8 (1 byte) where no other op
 * keeps them in bf16; each linear layer caches fp8 weights (rowwise + columnwise, 2 bytes per
 * matrix parameter) next to the bf16 weights; gradients, optimizer, logits unchanged. */
Test(memory, fp8_keeps_gemm_inputs_in_fp8, .timeout = 30)
{
  double s = 4096, b = 1, h = 4096, f = 11008;
  const char *bf[] = {"plan.global_batch=1", NULL};
  const char *f8[] = {"plan.global_batch=1", "plan.dtype=fp8", NULL};
  const char *bf_std[] = {"plan.global_batch=1", "model.attention=standard", NULL};
  const char *f8_std[] = {"plan.global_batch=1", "plan.dtype=fp8", "model.attention=standard", NULL};
  struct tw a, c;
  tw_load(&a, "llama2-7b", 1, bf);
  tw_load(&c, "llama2-7b", 1, f8);
  /* QKV input, fc1 input, fc2 input: s b (h + h + f) bytes saved; FlashAttention's output stays */
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&c.m, &c.p, 0),
           s * b * (2 * h + f), 1e-12, "llama2-7b layer, fp8");
  struct wl_mem ma, mc;
  wl_memory_stage(&a.m, &a.p, 0, &ma);
  wl_memory_stage(&c.m, &c.p, 0, &mc);
  tw_close(mc.weights_bytes - ma.weights_bytes, 2 * 32 * (4 * h * h + 3 * h * f), 1e-12, "fp8 weight copies");
  cr_assert_eq(mc.grads_bytes, ma.grads_bytes);
  cr_assert_eq(mc.optimizer_bytes, ma.optimizer_bytes);
  cr_assert_eq(mc.logits_bytes, ma.logits_bytes);
  tw_fini(&a);
  tw_fini(&c);

  /* the unfused attention's output is the projection's input alone: fp8 too */
  tw_load(&a, "llama2-7b", 1, bf_std);
  tw_load(&c, "llama2-7b", 1, f8_std);
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&c.m, &c.p, 0),
           s * b * (3 * h + f), 1e-12, "standard attention, fp8");
  tw_fini(&a);
  tw_fini(&c);

  /* MoE (Mixtral, no shared expert): the router keeps its bf16 input; dispatched tokens and the
   * experts' fc2 inputs in fp8, 2 copies per token */
  const char *mbf[] = {"plan.global_batch=1", "model.seq_len=4096", NULL};
  const char *mf8[] = {"plan.global_batch=1", "model.seq_len=4096", "plan.dtype=fp8", NULL};
  tw_load(&a, "mixtral-8x7b", 1, mbf);
  tw_load(&c, "mixtral-8x7b", 1, mf8);
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&c.m, &c.p, 0),
           s * b * h + s * b * 2 * (h + 14336), 1e-12, "Mixtral layer, fp8");
  tw_fini(&a);
  tw_fini(&c);

  /* MLA (DeepSeek-V3, tp 8, SP): the attention input feeds two GEMMs (two fp8 copies = one
   * bf16), the normalised latents in fp8; dense layer: fc1 and fc2 inputs in fp8; MoE layer:
   * the router's bf16 input plus the shared expert's fp8 copy, 8 dispatched copies in fp8 */
  const char *dbf[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", NULL};
  const char *df8[] = {"plan.tp=8", "plan.sp=true", "plan.global_batch=1", "plan.dtype=fp8", NULL};
  tw_load(&a, "deepseek-v3", 8, dbf);
  tw_load(&c, "deepseek-v3", 8, df8);
  double hd = 7168, lat = 1536 + 512, t = 8;
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 0) - wl_memory_layer_activations(&c.m, &c.p, 0),
           s * b * hd / t + s * b * lat / t + s * b * 18432 / t, 1e-12, "DeepSeek-V3 dense layer, fp8");
  tw_close(wl_memory_layer_activations(&a.m, &a.p, 3) - wl_memory_layer_activations(&c.m, &c.p, 3),
           -s * b * hd / t + s * b * lat / t + s * b * 8 * hd + s * b * 8 * 2048 / t + s * b * 2048 / t, 1e-12,
           "DeepSeek-V3 MoE layer, fp8");
  tw_fini(&a);
  tw_fini(&c);
}

/* Hybrid sharding (plan.zero_shard): ZeRO-3 in shards of 8 on 16 ranks keeps per rank the
 * weights, gradients and optimizer states of full sharding on 8; a bf16 gradient reduction
 * (plan.grad_reduce_dtype) halves the gradient buffer and the bucket in flight. */
Test(memory, hybrid_sharding_keeps_the_shard_groups_states, .timeout = 30)
{
  const char *h[] = {"plan.zero=3", "plan.zero_shard=8", "plan.global_batch=16", NULL};
  const char *f[] = {"plan.zero=3", "plan.global_batch=8", NULL};
  const char *b[] = {"plan.zero=3", "plan.zero_shard=8", "plan.global_batch=16", "plan.grad_reduce_dtype=bf16", NULL};
  struct tw wh, wf, wb;
  tw_load(&wh, "llama2-7b", 16, h);
  tw_load(&wf, "llama2-7b", 8, f);
  tw_load(&wb, "llama2-7b", 16, b);
  cr_assert_eq(wh.p.dp, 16);
  cr_assert_eq(wf.p.dp, 8);
  struct wl_mem mh, mf, mb;
  wl_memory_stage(&wh.m, &wh.p, 0, &mh);
  wl_memory_stage(&wf.m, &wf.p, 0, &mf);
  wl_memory_stage(&wb.m, &wb.p, 0, &mb);
  tw_close(mh.weights_bytes, mf.weights_bytes, 1e-12, "weights");
  tw_close(mh.grads_bytes, mf.grads_bytes, 1e-12, "gradients");
  tw_close(mh.optimizer_bytes, mf.optimizer_bytes, 1e-12, "optimizer");
  tw_close(mb.grads_bytes, 0.5 * mh.grads_bytes, 1e-12, "bf16 gradients");
  tw_close(mh.comm_bytes - mb.comm_bytes, 2.0 * wh.p.bucket_params, 1e-12, "bf16 bucket");
  tw_fini(&wh);
  tw_fini(&wf);
  tw_fini(&wb);
}
