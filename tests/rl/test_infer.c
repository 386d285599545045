/*
 * test_infer.c - the inference cost model against closed forms: decode is memory-bound (weights
 * and KV cache read once per step), prefill of long prompts is compute-bound, and the memory
 * arithmetic of the rollout engine.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "arch/derived.h"
#include "rl/rl_int.h"
#include "tests/rl/helpers.h"
#include "tests/support/support.h"

static const char *sys1 = "preset = \"atlas-800t-a2\";";
static const char *plan1 = "tp = 1; zero = 1; recompute = \"full\";";
/* the kernel model alone: no engine time beyond the kernels (tested on its own below) */
static const char *rl1 = "prompts = 8; group_size = 4; prompt_len = 4096; response = { mean = 256; max = 256; }; "
                         "rollout = { tp = 1; step_overhead = \"0s\"; seq_overhead = \"0s\"; };";

static void setup(struct rl_job *job, struct rl_infer *x, struct op_cache **cache, struct rl_colls *colls,
                  int max_batch, int chunk)
{
  char *path = tr_scenario(sys1, 4, plan1, rl1);
  tr_load(job, path, NULL);
  free(path);
  *cache = op_cache_open(NULL, NULL);
  memset(colls, 0, sizeof *colls);
  struct npu_diag d;
  int rc = rl__infer_init(x, job, *cache, colls, RL_GROUP_ROLLOUT_TP, 1, false, max_batch, chunk, 4096, 0, &d);
  cr_assert_eq(rc, 0, "%s", d.msg);
  cr_assert_eq(colls->n, 0, "tp 1 has no collectives");
}

Test(rl_infer, kv_reads_cost_bytes_over_hbm_bandwidth, .timeout = 60)
{
  struct rl_job job;
  struct rl_infer x;
  struct op_cache *c;
  struct rl_colls colls;
  setup(&job, &x, &c, &colls, 64, 0);
  double bw = job.sys.chip.hbm.bw_bytes_per_s * job.sys.chip.calib.hbm.value;
  /* K and V of 4 layers x 8 KV heads x 128 x bf16 per token */
  tr_close(x.kv_token_bytes, 4.0 * 2 * 8 * 128 * 2, 1e-12, "KV bytes per token");
  for (int b = 1; b <= 64; b *= 4) {
    double ctx = 1e5 * b;
    tr_close(rl__decode_step_s(&x, b, ctx) - rl__decode_step_s(&x, b, 0), ctx * x.kv_token_bytes / bw, 1e-9,
             "KV read time");
  }
  op_cache_close(c);
  rl_job_release(&job);
}

Test(rl_infer, decode_step_reads_every_weight_once, .timeout = 60)
{
  struct rl_job job;
  struct rl_infer x;
  struct op_cache *c;
  struct rl_colls colls;
  setup(&job, &x, &c, &colls, 64, 0);
  double bw = job.sys.chip.hbm.bw_bytes_per_s * job.sys.chip.calib.hbm.value;
  /* a step at batch 1 and 16 sequences of 2048 context tokens: (weights + KV bytes) / bandwidth,
   * within what the chip model's kernels lose to tiles, launch gaps and vector kernels; the input
   * embedding is not read (a gather of one row per sequence) */
  const struct wl_model *m = &job.model;
  double read = x.weight_bytes - 2.0 * m->vocab * m->hidden;
  for (int b = 1; b <= 16; b *= 16) {
    double ctx = 2048.0 * b;
    double floor_s = (read + ctx * x.kv_token_bytes) / bw;
    double t = rl__decode_step_s(&x, b, ctx);
    cr_assert(t >= floor_s && t <= 1.6 * floor_s, "batch %d: step %.6g s, bytes / bandwidth %.6g s", b, t, floor_s);
  }
  /* memory-bound: batch 16 costs hardly more than batch 1 */
  cr_assert_lt(rl__decode_step_s(&x, 16, 0), 1.3 * rl__decode_step_s(&x, 1, 0));
  /* interpolation between buckets is monotone */
  double prev = 0;
  for (int b = 1; b <= 64; b++) {
    double t = rl__decode_step_s(&x, b, 0);
    cr_assert_geq(t, prev * (1 - 1e-12), "batch %d", b);
    prev = t;
  }
  op_cache_close(c);
  rl_job_release(&job);
}

/* The engine's time beyond its kernels: step_overhead + batch x seq_overhead on every decode step,
 * whatever the batch and context; the defaults are the measured ones (rl/spec.c). */
Test(rl_infer, decode_step_adds_the_engine_overhead, .timeout = 60)
{
  struct rl_job job;
  struct rl_infer x, y;
  struct op_cache *c;
  struct rl_colls colls;
  setup(&job, &x, &c, &colls, 64, 0);
  cr_assert_eq(x.step_overhead_s, 0);
  char *path = tr_scenario(sys1, 4, plan1, rl1);
  const char *sets[] = {"rl.rollout.step_overhead=3ms", "rl.rollout.seq_overhead=50us", NULL};
  struct rl_job job2;
  tr_load(&job2, path, sets);
  free(path);
  struct rl_colls colls2 = {0};
  struct npu_diag d;
  cr_assert_eq(rl__infer_init(&y, &job2, c, &colls2, RL_GROUP_ROLLOUT_TP, 1, false, 64, 0, 4096, 0, &d), 0, "%s",
               d.msg);
  const int batch[] = {1, 16, 48};
  for (int i = 0; i < 3; i++) {
    int b = batch[i];
    double ctx = 3000.0 * b;
    tr_close(rl__decode_step_s(&y, b, ctx) - rl__decode_step_s(&x, b, ctx), 3e-3 + b * 50e-6, 1e-9,
             "step overhead");
  }
  rl_job_release(&job2);
  /* defaults: 2.36 ms + 29 us per running sequence */
  path = tr_scenario(sys1, 4, plan1, "prompts = 8; group_size = 4; prompt_len = 256; response = { mean = 256; max = 256; };");
  tr_load(&job2, path, NULL);
  free(path);
  tr_close(job2.spec.rollout.step_overhead_s, 2.36e-3, 1e-12, "default step overhead");
  tr_close(job2.spec.rollout.seq_overhead_s, 29e-6, 1e-12, "default sequence overhead");
  rl_job_release(&job2);
  op_cache_close(c);
  rl_job_release(&job);
}

Test(rl_infer, long_prefill_is_compute_bound, .timeout = 60)
{
  struct rl_job job;
  struct rl_infer x;
  struct op_cache *c;
  struct rl_colls colls;
  setup(&job, &x, &c, &colls, 0, 8192);
  struct arch_derived dv;
  arch_derive(&job.sys, &dv);
  double peak = dv.peak_flops_per_s[NPU_DT_BF16];
  cr_assert_eq(x.chunk_tokens, 8192, "two prompts of 4096 per chunk");
  double t = rl__cost_s(&x, &x.prefill);
  /* model FLOPs of the chunk: 2 x matmul parameters per token (4 layers + the head for 2 rows) +
   * causal attention */
  const struct wl_model *m = &job.model;
  double layer_mm = wl_model_layer_params(m, 0);
  double flops = 8192.0 * 2 * 4 * layer_mm + 2.0 * 2 * m->vocab * m->hidden;
  double ideal = flops / peak;
  cr_assert(t >= ideal, "prefill %.6g s faster than the peak allows (%.6g s)", t, ideal);
  cr_assert(t <= 2.0 * ideal, "prefill %.6g s, compute-bound %.6g s: not compute-bound", t, ideal);
  op_cache_close(c);
  rl_job_release(&job);
}

Test(rl_infer, memory_arithmetic, .timeout = 30)
{
  char *path = tr_scenario(sys1, 0, plan1, rl1);
  struct rl_job job;
  tr_load(&job, path, NULL);
  free(path);
  const struct wl_model *m = &job.model;
  tr_close(rl__weight_bytes(m, 4), 2.0 * wl_model_params(m) / 4, 1e-12, "weights per device");
  /* more TP ranks than KV heads: the heads are replicated, one per rank */
  tr_close(rl__kv_token_bytes(m, 16), 32.0 * 2 * 1 * 128 * 2, 1e-12, "replicated KV heads");
  tr_close(rl__kv_token_bytes(m, 2), 32.0 * 2 * 4 * 128 * 2, 1e-12, "sharded KV heads");
  /* per token: 2 x the matmul parameters (no input embedding) + 4 l s a d of attention */
  double mm = wl_model_params(m) - (double)m->vocab * m->hidden - (m->layers * 2.0 + 1) * m->hidden;
  tr_close(rl__token_flops(m, 0), 2 * mm, 1e-3, "flops per token");
  tr_close(rl__token_flops(m, 1000) - rl__token_flops(m, 0), 4.0 * 32 * 1000 * 32 * 128, 1e-12, "attention flops");
  rl_job_release(&job);
}

/* MoE decode reads the experts the batch touches: top-8 of 128 at batch 1, nearly all at 128. */
Test(rl_infer, moe_decode_reads_the_touched_experts, .timeout = 60)
{
  char *dir = ts_tmpdir();
  char *path = ts_write(dir, "moe.cfg",
                        "preset = \"dgx-h100\";\nmodel = { preset = \"qwen3-30b-a3b\"; layers = 4; };\n"
                        "plan = { tp = 1; ep = 8; zero = 1; recompute = \"full\"; };\n"
                        "rl = { prompts = 8; group_size = 4; prompt_len = 256; response = { mean = 64; max = 64; };\n"
                        "rollout = { tp = 2; step_overhead = \"0s\"; seq_overhead = \"0s\"; }; };\n");
  struct rl_job job;
  tr_load(&job, path, NULL);
  struct op_cache *c = op_cache_open(NULL, NULL);
  for (int ep = 0; ep < 2; ep++) {
    struct rl_colls colls = {0};
    struct rl_infer x;
    struct npu_diag d;
    cr_assert_eq(rl__infer_init(&x, &job, c, &colls, RL_GROUP_ROLLOUT_TP, 2, ep, 256, 0, 0, 0, &d), 0, "%s", d.msg);
    for (int i = 0; i < colls.n; i++) colls.v[i].time_s = 0; /* kernels only */
    const struct wl_model *m = &job.model;
    double bw = job.sys.chip.hbm.bw_bytes_per_s * job.sys.chip.calib.hbm.value;
    double experts = 4.0 * 128 * 3 * m->hidden * m->moe.ffn * 2 / 2; /* bf16, per rank of TP2 */
    double t1 = rl__decode_step_s(&x, 1, 0), t256 = rl__decode_step_s(&x, 256, 0);
    /* batch 256 touches every expert: at least the expert bytes over the bandwidth; batch 1 touches 8 of 128 */
    cr_assert_geq(t256, experts / bw, "ep %d: %.6g s below the expert bytes %.6g s", ep, t256, experts / bw);
    cr_assert_lt(t1, t256 - 0.8 * experts / bw, "ep %d: batch 1 %.6g s should skip most experts (batch 256: %.6g s)",
                 ep, t1, t256);
    rl__colls_release(&colls);
  }
  op_cache_close(c);
  rl_job_release(&job);
  ts_rmtree(dir);
  free(dir);
  free(path);
}
