/*
 * cmd_validate.c - `npusim validate [--json] [--only SUBSTRING]`: run the shipped validation
 * scenarios and print predicted vs published with the relative error.
 *
 * Each case is a scenario in scenarios/validation/ (with overrides), one metric, the published
 * value and where it comes from. Every case runs in its own process (one SimGrid engine per
 * process). The published values are not inputs of the model: no preset parameter was fitted
 * to any of them (calibration knobs carry their own sources; see docs/VALIDATION.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/err.h"
#include "common/json.h"
#include "scenario/scenario.h"

/* A metric is a result column of the case's kind (`npusim columns`). */
enum metric { M_STEP, M_MFU, M_TOKENS_DEV, M_MEM_STATIC, M_MEM_ACT, M_BUBBLE, M_RL_ITER };
static const char *const metric_names[] = {"step_time_s", "mfu", "tokens_per_s_per_device",
                                           "memory_weights_optimizer_bytes", "memory_activations_bytes",
                                           "bubble_fraction", "iteration_time_s"};

struct vcase {
  const char *name;
  const char *scenario;      /* under scenarios/validation/ */
  const char *sets[6];       /* overrides, NULL-terminated */
  enum metric metric;
  double published;
  const char *source;
};

#define KOR "Korthikanti et al. 2022, Table 5"
#define KORM "Korthikanti et al. 2022, Fig. 1"
#define MS "MindSpeed-LLM README (Atlas 900 A2 PoDc)"
#define FULL {"plan.sp=false", "plan.recompute=full", NULL}
#define NOREC {"plan.sp=false", "plan.recompute=none", NULL}
#define GIB (1024.0 * 1024.0 * 1024.0)
#define NEMO5 "NeMo-RL docs/about/performance-summary.md, v0.5 (commit 9dbd9ad)"
#define MIXTRAL_CP4 {"plan.pp=1", "plan.cp=4", "plan.global_batch=32", NULL}
#define PANGU "Yin et al. 2025 (arXiv 2504.07866), sec. 4.2: pipeline bubble ratio"
/* 48 model chunks: 1 layer with the embedding, 1 with the head, 2 in each of the other 46 */
#define PANGU_VPP6                                                                                                    \
  {"plan.first_stage_layers=1", "plan.last_stage_layers=1", "plan.schedule=\"interleaved\"", "plan.vpp=6", NULL}

static const struct vcase cases[] = {
    {"gpt3-22b a100 full recompute", "korthikanti_gpt3_22b.cfg", FULL, M_STEP, 1.42, KOR},
    {"gpt3-22b a100 sp+selective", "korthikanti_gpt3_22b.cfg", {NULL}, M_STEP, 1.10, KOR},
    {"gpt3-22b a100 sp+selective", "korthikanti_gpt3_22b.cfg", {NULL}, M_MFU, 0.415, KOR},
    {"gpt3-175b a100 full recompute", "korthikanti_gpt3_175b.cfg", FULL, M_STEP, 18.13, KOR},
    {"gpt3-175b a100 sp+selective", "korthikanti_gpt3_175b.cfg", {NULL}, M_STEP, 13.75, KOR},
    {"gpt3-175b a100 sp+selective", "korthikanti_gpt3_175b.cfg", {NULL}, M_MFU, 0.514, KOR},
    {"gpt3-530b a100 full recompute", "korthikanti_gpt3_530b.cfg", FULL, M_STEP, 49.05, KOR},
    {"gpt3-530b a100 sp+selective", "korthikanti_gpt3_530b.cfg", {NULL}, M_STEP, 37.83, KOR},
    {"gpt3-530b a100 sp+selective", "korthikanti_gpt3_530b.cfg", {NULL}, M_MFU, 0.560, KOR},
    {"gpt3-1t a100 full recompute", "korthikanti_gpt3_1t.cfg", FULL, M_STEP, 94.42, KOR},
    {"gpt3-1t a100 sp+selective", "korthikanti_gpt3_1t.cfg", {NULL}, M_STEP, 71.49, KOR},
    {"gpt3-1t a100 sp+selective", "korthikanti_gpt3_1t.cfg", {NULL}, M_MFU, 0.563, KOR},
    {"gpt3-22b a100 params+optimizer", "korthikanti_gpt3_22b.cfg", {NULL}, M_MEM_STATIC, 45.56 * GIB, KORM},
    {"gpt3-175b a100 params+optimizer", "korthikanti_gpt3_175b.cfg", {NULL}, M_MEM_STATIC, 45.56 * GIB, KORM},
    {"gpt3-530b a100 params+optimizer", "korthikanti_gpt3_530b.cfg", {NULL}, M_MEM_STATIC, 31.64 * GIB, KORM},
    {"gpt3-1t a100 params+optimizer", "korthikanti_gpt3_1t.cfg", {NULL}, M_MEM_STATIC, 32.96 * GIB, KORM},
    {"gpt3-22b a100 activations, no recompute", "korthikanti_gpt3_22b.cfg", NOREC, M_MEM_ACT, 59.25 * GIB, KORM},
    {"gpt3-175b a100 activations, no recompute", "korthikanti_gpt3_175b.cfg", NOREC, M_MEM_ACT, 66.84 * GIB, KORM},
    {"gpt3-530b a100 activations, no recompute", "korthikanti_gpt3_530b.cfg", NOREC, M_MEM_ACT, 114.02 * GIB, KORM},
    {"gpt3-1t a100 activations, no recompute", "korthikanti_gpt3_1t.cfg", NOREC, M_MEM_ACT, 131.25 * GIB, KORM},
    {"gpt3-22b a100 activations, sp+selective", "korthikanti_gpt3_22b.cfg", {NULL}, M_MEM_ACT, 9.56 * GIB, KORM},
    {"gpt3-175b a100 activations, sp+selective", "korthikanti_gpt3_175b.cfg", {NULL}, M_MEM_ACT, 12.35 * GIB, KORM},
    {"gpt3-530b a100 activations, sp+selective", "korthikanti_gpt3_530b.cfg", {NULL}, M_MEM_ACT, 23.08 * GIB, KORM},
    {"gpt3-1t a100 activations, sp+selective", "korthikanti_gpt3_1t.cfg", {NULL}, M_MEM_ACT, 26.56 * GIB, KORM},
    {"llama2-7b 910b tokens/s per NPU", "mindspeed_llama2_7b.cfg", {NULL}, M_TOKENS_DEV, 4672, MS},
    {"llama2-13b 910b tokens/s per NPU", "mindspeed_llama2_13b.cfg", {NULL}, M_TOKENS_DEV, 2016, MS},
    {"llama2-70b 910b tokens/s per NPU", "mindspeed_llama2_70b.cfg", {NULL}, M_TOKENS_DEV, 420, MS},
    {"llama3-8b 8k 910b tokens/s per NPU", "mindspeed_llama3_8b.cfg", {NULL}, M_TOKENS_DEV, 2483, MS},
    /* 180K H800 GPU hours per trillion tokens: 1e12 / (180e3 x 3600 s) = 1,543 tokens/s per GPU */
    {"deepseek-v3 2048 h800 tokens/s per GPU", "deepseek_v3_h800.cfg", {NULL}, M_TOKENS_DEV, 1543.2,
     "DeepSeek-V3 Technical Report (arXiv 2412.19437), sec. 1: 180K H800 GPU hours per trillion tokens"},
    {"mixtral-8x7b 32k cp2 910b tokens/s per NPU", "mindspeed_mixtral_8x7b_32k.cfg", {NULL}, M_TOKENS_DEV, 706,
     "MindSpeed-LLM README, branch 1.0.RC3 (7acd2296), long-sequence table"},
    {"mixtral-8x7b 32k tp8 cp4 910b", "mindspeed_mixtral_8x7b_32k.cfg", MIXTRAL_CP4, M_MFU, 0.317,
     "MindSpeed-LLM README MFU table (since 1bdf66d2): TP8 PP1 CP4 ring, GBS 32"},
    {"pangu-ultra-135b 8192 910b 1f1b", "pangu_ultra_135b.cfg", {NULL}, M_BUBBLE, 0.3045, PANGU},
    {"pangu-ultra-135b 8192 910b vpp6", "pangu_ultra_135b.cfg", PANGU_VPP6, M_BUBBLE, 0.068, PANGU},
    {"pangu-ultra-135b 8192 910b vpp6", "pangu_ultra_135b.cfg", PANGU_VPP6, M_MFU, 0.52,
     "Yin et al. 2025 (arXiv 2504.07866), sec. 4.2: MFU over 52% after its optimisations"},
    {"grpo llama3.1-8b 16 h100 colocated", "rl_nemo_llama8b_colocated.cfg", {NULL}, M_RL_ITER, 92.8, NEMO5},
    {"grpo llama3.1-8b 8+8 h100 async", "rl_nemo_llama8b_async.cfg", {NULL}, M_RL_ITER, 64.8, NEMO5},
    {"grpo llama3.1-8b 8+8 h100 async pp2 (v0.4)", "rl_nemo_v04_llama8b_async_pp2.cfg", {NULL}, M_RL_ITER, 74.6,
     "NeMo-RL docs/about/performance-summary.md, v0.4 (commit cff17f8)"},
    {"grpo qwen3-30b-a3b 32 h100 colocated", "rl_nemo_qwen3_30b_a3b_colocated.cfg", {NULL}, M_RL_ITER, 198, NEMO5},
    {"grpo qwen3-30b-a3b 16+16 h100 async", "rl_nemo_qwen3_30b_a3b_async.cfg", {NULL}, M_RL_ITER, 154, NEMO5},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const char usage[] =
    "usage: npusim validate [--json] [--only TEXT]\n"
    "\n"
    "Run the validation scenarios (scenarios/validation/) and print, for each published\n"
    "measurement, the predicted value and the relative error, then the mean absolute\n"
    "percentage error. Each case runs in its own process.\n"
    "\n"
    "  --json       .cases[] with .name, .metric, .published, .predicted, .error (relative),\n"
    "               .source; and .mape\n"
    "  --only TEXT  run the cases whose name contains TEXT\n";

static void fmt_value(char *buf, size_t n, enum metric m, double v)
{
  if (m == M_MEM_STATIC || m == M_MEM_ACT) snprintf(buf, n, "%.2f GiB", v / GIB);
  else if (m == M_MFU || m == M_BUBBLE) snprintf(buf, n, "%.1f%%", 100 * v);
  else if (m == M_STEP || m == M_RL_ITER) snprintf(buf, n, "%.3g s", v);
  else snprintf(buf, n, "%.0f", v);
}

static bool same_run(const struct vcase *a, const struct vcase *b)
{
  if (strcmp(a->scenario, b->scenario)) return false;
  for (int i = 0; i < 6; i++) {
    if (!a->sets[i] || !b->sets[i]) return a->sets[i] == b->sets[i];
    if (strcmp(a->sets[i], b->sets[i])) return false;
  }
  return true;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  bool json = false;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else return cli_bad_arg(diag, "validate", argv[i]);
  }
  struct npu_json j;
  if (json) {
    npu_json_init(&j, out);
    npu_json_object_begin(&j);
    npu_json_key(&j, "cases");
    npu_json_array_begin(&j);
  } else {
    npu_buf_printf(out, "%-44s %-24s %12s %12s %8s\n", "case", "metric", "published", "predicted", "error");
  }
  double sum = 0;
  int n = 0;
  const struct vcase *last = NULL;
  struct scn_outcome o;
  for (size_t c = 0; c < NCASES; c++) {
    const struct vcase *v = &cases[c];
    if (only && !strstr(v->name, only)) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/scenarios/validation/%s", arch_source_root(), v->scenario);
    int ns = 0;
    while (ns < 6 && v->sets[ns]) ns++;
    /* cases of the same scenario and overrides (other metrics) share one run */
    if (!last || !same_run(last, v)) {
      /* any kind, in a child process (one engine per process) */
      int rc = scn_run_isolated(NULL, path, v->sets, ns, &o, diag);
      if (rc) return rc;
      if (o.status) return npu_diag_set(diag, path, 0, NULL, "%s", o.message);
      last = v;
    }
    double pred;
    if (!scn_outcome_number(&o, metric_names[v->metric], &pred))
      return npu_diag_set(diag, path, 0, NULL, "a %s scenario has no column %s", o.kind, metric_names[v->metric]),
             NPU_EINTERNAL;
    double err = (pred - v->published) / v->published;
    sum += fabs(err);
    n++;
    if (json) {
      npu_json_object_begin(&j);
      npu_json_key(&j, "name");
      npu_json_string(&j, v->name);
      npu_json_key(&j, "metric");
      npu_json_string(&j, metric_names[v->metric]);
      npu_json_key(&j, "published");
      npu_json_number(&j, v->published);
      npu_json_key(&j, "predicted");
      npu_json_number(&j, pred);
      npu_json_key(&j, "error");
      npu_json_number(&j, err);
      npu_json_key(&j, "source");
      npu_json_string(&j, v->source);
      npu_json_key(&j, "scenario");
      npu_json_string(&j, v->scenario);
      npu_json_object_end(&j);
    } else {
      char a[32], b[32];
      fmt_value(a, sizeof a, v->metric, v->published);
      fmt_value(b, sizeof b, v->metric, pred);
      npu_buf_printf(out, "%-44s %-24s %12s %12s %+7.1f%%\n", v->name, metric_names[v->metric], a, b, 100 * err);
    }
  }
  double mape = n ? sum / n : 0;
  if (json) {
    npu_json_array_end(&j);
    npu_json_key(&j, "mape");
    npu_json_number(&j, mape);
    npu_json_object_end(&j);
    npu_json_finish(&j);
  } else {
    npu_buf_printf(out, "mean absolute percentage error over %d cases: %.1f%%\n", n, 100 * mape);
  }
  return 0;
}

const struct npu_cmd npu_cmd_validate = {
    .name = "validate",
    .summary = "run the validation scenarios: predicted vs published, with errors",
    .usage = usage,
    .run = run,
};
