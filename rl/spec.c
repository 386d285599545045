/*
 * spec.c - the `rl` section of a scenario: its keys as data (common/cfg.h), and names.
 *
 * Defaults follow the frameworks where they have one: vLLM's max_num_seqs 256,
 * max_num_batched_tokens 8192 and gpu_memory_utilization 0.9; one PPO epoch and one mini-batch.
 * The engine's time per step beyond its kernels is the serving engine's (serve/spec.c, struct
 * sv_engine_time): vLLM's offline latency of Llama-3-8B on H100 at TP 1, 2 and 4 (Chitty-Venkata
 * et al., LLM-Inference-Bench, arXiv 2411.00136; calibration/data/engine.csv) minus npusim's own
 * prediction of the same runs, per step (docs/SERVING.md, "Engine time").
 */
#include "rl/rl.h"

#include <stddef.h>
#include <string.h>

#define NPU_PARAM_STRUCT struct rl_spec

static const char *const algo_names[] = {"grpo", "ppo", NULL};
static const char *const place_names[] = {"colocated", "disaggregated", NULL};
static const char *const mode_names[] = {"sync", "async", NULL};
static const char *const dist_names[] = {"fixed", "uniform", "lognormal", "histogram", NULL};
static const char *const reward_names[] = {"rule", "model", NULL};

static const struct npu_section sections[] = {
    {"rl", false, "an RL post-training iteration (docs/RL.md)"},
};

static const struct npu_param params[] = {
    NPU_PARAM_ENUM("rl.algorithm", algorithm, "grpo", algo_names,
         "grpo: n responses per prompt, group-normalised rewards, no critic; ppo: actor, critic, reference, reward"),
    NPU_PARAM_ENUM("rl.placement", placement, "colocated", place_names,
         "colocated: every role time-shares all devices; disaggregated: a rollout pool and a training pool"),
    NPU_PARAM_ENUM("rl.mode", mode, "sync", mode_names,
         "sync: rollout, then training; async: one-step off-policy, rollout of i+1 overlaps training of i "
         "(disaggregated only)"),
    NPU_PARAM_INT("rl.prompts", prompts, NULL, NPU_PF_POSITIVE, "prompts per iteration"),
    NPU_PARAM_INT("rl.group_size", group_size, "1", NPU_PF_POSITIVE, "responses per prompt (GRPO's n, at least 2)"),
    NPU_PARAM_INT("rl.prompt_len", prompt_len, NULL, NPU_PF_POSITIVE, "tokens per prompt"),
    NPU_PARAM_ENUM("rl.response.distribution", response.distribution, "fixed", dist_names,
         "response lengths: fixed (all = mean), uniform in [min, 2 mean - min], lognormal (long tail) of median "
         "mean and sigma, histogram (measured: rl.response.histogram); every draw clipped to [min, max]"),
    NPU_PARAM_INT("rl.response.mean", response.mean, "0", NPU_PF_NONNEG,
        "tokens: the length (fixed), the mean (uniform), the median (lognormal); not used by histogram"),
    NPU_PARAM_INT("rl.response.min", response.min, "1", NPU_PF_POSITIVE, "shortest response, tokens"),
    NPU_PARAM_INT("rl.response.max", response.max, NULL, NPU_PF_POSITIVE, "longest response (generation limit), tokens"),
    {"rl.response.sigma", NPU_PT_REAL, NPU_PARAM_OFF(response.sigma), 0, "1.0", NPU_PF_NONNEG, 0, 0, NULL,
     "lognormal: standard deviation of ln(length)"},
    {"rl.response.histogram", NPU_PT_STRING, NPU_PARAM_OFF(response.histogram), NPU_PARAM_SZ(response.histogram),
     "", 0, 0, 0, NULL,
     "histogram: measured response lengths as \"LEN:WEIGHT, ...\" (tokens and relative frequency of each bin)"},
    NPU_PARAM_INT("rl.seed", seed, "1", NPU_PF_NONNEG, "seed of the response lengths (gsl mt19937; reported)"),
    NPU_PARAM_INT("rl.rollout.devices", rollout.devices, "0", NPU_PF_NONNEG,
        "rollout pool, devices (disaggregated); 0: what rl.train.devices leaves; colocated: all"),
    NPU_PARAM_INT("rl.rollout.tp", rollout.tp, "1", NPU_PF_POSITIVE, "tensor-parallel size of one inference engine"),
    NPU_PARAM_BOOL("rl.rollout.expert_parallel", rollout.expert_parallel, "false",
         "MoE: an engine spreads whole experts over its ranks (vLLM enable_expert_parallel) instead of TP-sharding "
         "each"),
    NPU_PARAM_INT("rl.rollout.max_num_seqs", rollout.max_num_seqs, "256", NPU_PF_POSITIVE,
        "concurrent sequences per engine (vLLM max_num_seqs); the KV cache may allow fewer"),
    NPU_PARAM_INT("rl.rollout.max_batched_tokens", rollout.max_batched_tokens, "8192", NPU_PF_POSITIVE,
        "prompt tokens per prefill chunk (vLLM max_num_batched_tokens)"),
    {"rl.rollout.memory_utilization", NPU_PT_REAL, NPU_PARAM_OFF(rollout.memory_utilization), 0, "0.9", NPU_PF_FRACTION, 0, 0,
     NULL, "share of HBM the engine may use for weights, activations and KV cache (vLLM gpu_memory_utilization)"},
    NPU_PARAM_BOOL("rl.rollout.custom_allreduce", rollout.custom_allreduce, "true",
        "TP all-reduces of an inference engine run as vLLM's custom all-reduce (disable_custom_all_reduce = false) where vLLM "
         "takes it: GPUs of one server on NVLink, 2, 4, 6 or 8 of them, under 8 MiB; one-shot (each device reads its "
         "peers' buffers) on 2 devices, on 4 under 512 KiB, on 8 under 256 KiB, else two-shot; false, or Ascend "
         "(HCCL), the collective library's choice"),
    {"rl.rollout.step_overhead", NPU_PT_TIME, NPU_PARAM_OFF(rollout.engine.step_s), 0, "0.67ms", NPU_PF_NONNEG, 0, 0,
     NULL, "engine time per step beyond the kernels (scheduler, input preparation, sampling, output processing); "
     "default: vLLM V0 on H100, fitted to LLM-Inference-Bench (docs/SERVING.md, Engine time)"},
    {"rl.rollout.seq_overhead", NPU_PT_TIME, NPU_PARAM_OFF(rollout.engine.seq_s), 0, "41us", NPU_PF_NONNEG, 0, 0, NULL,
     "engine time per step and running sequence beyond the kernels; default: as rl.rollout.step_overhead"},
    {"rl.rollout.worker_overhead", NPU_PT_TIME, NPU_PARAM_OFF(rollout.engine.worker_s), 0, "1.99ms", NPU_PF_NONNEG, 0,
     0, NULL, "engine time per step added on an engine of more than one device (the multi-GPU executor); default: "
     "as rl.rollout.step_overhead, fitted at TP 2 and 4"},
    {"rl.rollout.worker_rank_overhead", NPU_PT_TIME, NPU_PARAM_OFF(rollout.engine.worker_rank_s), 0, "0.24ms",
     NPU_PF_NONNEG, 0, 0, NULL, "engine time per step added for each device of an engine beyond the second; "
     "default: as rl.rollout.worker_overhead"},
    NPU_PARAM_INT("rl.train.devices", train.devices, "0", NPU_PF_NONNEG,
        "training pool, devices (disaggregated); 0: what rl.rollout.devices leaves; colocated: all"),
    NPU_PARAM_INT("rl.train.seq_len", train.seq_len, "0", NPU_PF_NONNEG,
        "training sequences are packed to this many tokens; 0: prompt_len + response.max rounded up to 128"),
    NPU_PARAM_INT("rl.train.mini_batches", train.mini_batches, "1", NPU_PF_POSITIVE,
        "optimizer steps per epoch over the iteration's data (PPO mini-batches)"),
    NPU_PARAM_INT("rl.train.epochs", train.epochs, "1", NPU_PF_POSITIVE, "passes over the iteration's data (PPO epochs)"),
    NPU_PARAM_ENUM("rl.reward", reward, "rule", reward_names,
         "rule: a verifier on the host (rl.reward_rule_time per response); model: a reward model of the policy's "
         "architecture"),
    {"rl.reward_rule_time", NPU_PT_TIME, NPU_PARAM_OFF(reward_rule_s), 0, "0s", NPU_PF_NONNEG, 0, 0, NULL,
     "host time of the rule-based reward per response (rl.reward = rule)"},
    NPU_PARAM_BOOL("rl.reference", reference, "true", "a reference policy's log-probs (KL penalty or loss)"),
    NPU_PARAM_BOOL("rl.old_logprob", old_logprob, "true",
         "recompute the rollout policy's log-probs with the actor before training (veRL, OpenRLHF)"),
    {"rl.host_bandwidth", NPU_PT_BANDWIDTH, NPU_PARAM_OFF(host_bw_bytes_per_s), 0, "64GBps", NPU_PF_POSITIVE, 0, 0, NULL,
     "host <-> device link per device, one direction (colocated offload and reload); PCIe 5.0 x16 by default"},
    NPU_PARAM_BOOL("rl.offload_weights", offload_weights, "true",
         "colocated: the training copy of the weights leaves HBM during rollout (optimizer states and gradients "
         "always do)"),
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *rl_spec_table(void)
{
  return &table;
}

void rl_spec_register(struct npu_cfg *cfg, struct rl_spec *s)
{
  memset(s, 0, sizeof *s);
  npu_cfg_add_table(cfg, &table, s);
}

const char *rl_algo_name(int a)
{
  return a >= 0 && a < 2 ? algo_names[a] : "?";
}

const char *rl_placement_name(int p)
{
  return p >= 0 && p < 2 ? place_names[p] : "?";
}

const char *rl_mode_name(int m)
{
  return m >= 0 && m < 2 ? mode_names[m] : "?";
}
