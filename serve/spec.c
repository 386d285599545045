/*
 * spec.c - the `serve` section of a scenario: its keys as data (common/cfg.h), and names.
 *
 * Defaults follow vLLM v1 where it has one: max_num_seqs 256, max_num_batched_tokens 8192,
 * block_size 16, chunked prefill and prefix caching on, gpu_memory_utilization 0.9, recompute
 * preemption, CUDA graphs on. Arrivals follow vLLM's benchmark_serving: gamma-distributed gaps
 * of shape `burstiness` and mean 1 / rate (Poisson at burstiness 1). The engine's time per step
 * beyond its kernels (serve/infer.h, struct sv_engine_time) is a measurement: vLLM's offline
 * latency of Llama-3-8B (fp16, input = output = 128 tokens, batch 1-64) on H100 at TP 1, 2 and
 * 4 (LLM-Inference-Bench, arXiv 2411.00136; calibration/data/engine.csv) minus npusim's
 * prediction of the same runs, per step, fitted as 0.67 ms + 41 us per sequence, and 1.99 ms +
 * 0.24 ms per device beyond two more on an engine of several devices (docs/SERVING.md, "Engine
 * time"); the RL rollout uses the same.
 */
#include "serve/serve.h"

#include <stddef.h>
#include <string.h>

#define NPU_PARAM_STRUCT struct sv_spec

static const char *const router_names[] = {"round_robin", "least_loaded", "prefix", NULL};
static const char *const preempt_names[] = {"recompute", "reserve", NULL};
static const char *const spec_names[] = {"none", "ngram", "mtp", NULL};

static const struct npu_section sections[] = {
    {"serve", false, "an LLM serving deployment and its request workload (docs/SERVING.md)"},
};

/* The keys of a length distribution under prefix P (serve.prompt, serve.output) into field F. */
#define DIST_PARAMS(P, F, WHAT, MAXDEF)                                                                              \
  NPU_PARAM_ENUM(P ".distribution", F.distribution, "fixed", sv_dist_names,                                         \
                 WHAT " lengths: fixed (all = mean), uniform in [min, 2 mean - min], lognormal of median mean and "  \
                      "sigma, histogram (" P ".histogram); every draw clipped to [min, max]"),                       \
      NPU_PARAM_INT(P ".mean", F.mean, "0", NPU_PF_NONNEG,                                                           \
                    "tokens: the length (fixed), the mean (uniform), the median (lognormal); not used by histogram"), \
      NPU_PARAM_INT(P ".min", F.min, "1", NPU_PF_POSITIVE, "shortest, tokens"),                                      \
      NPU_PARAM_INT(P ".max", F.max, MAXDEF, NPU_PF_NONNEG,                                                          \
                    "longest, tokens (draws are clipped to it); 0: the mean (fixed), the longest bin (histogram); "  \
                    "uniform and lognormal need it"),                                                                 \
      {P ".sigma", NPU_PT_REAL, NPU_PARAM_OFF(F.sigma), 0, "1.0", NPU_PF_NONNEG, 0, 0, NULL,                         \
       "lognormal: standard deviation of ln(length)"},                                                               \
      {P ".histogram", NPU_PT_STRING, NPU_PARAM_OFF(F.histogram), NPU_PARAM_SZ(F.histogram), "", 0, 0, 0, NULL,     \
       "histogram: measured lengths as \"LEN:WEIGHT, ...\" (tokens and relative frequency of each bin)"}

static const struct npu_param params[] = {
    NPU_PARAM_INT("serve.requests", requests, "0", NPU_PF_NONNEG,
        "requests to draw (without serve.trace); the run ends when the last one finishes"),
    {"serve.rate", NPU_PT_REAL, NPU_PARAM_OFF(rate), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "arrivals per second; 0: every request at t = 0 (an offline batch)"},
    {"serve.burstiness", NPU_PT_REAL, NPU_PARAM_OFF(burstiness), 0, "1.0", NPU_PF_POSITIVE, 0, 0, NULL,
     "shape of the gamma-distributed gaps between arrivals (vLLM benchmark_serving): 1 Poisson, below 1 burstier"},
    NPU_PARAM_STR("serve.trace", trace, "",
        "a request trace (CSV: arrival_s,prompt_tokens,output_tokens[,prefix_group]) instead of drawn requests; "
        "relative to the scenario file"),
    DIST_PARAMS("serve.prompt", prompt, "prompt (after a shared prefix)", "0"),
    DIST_PARAMS("serve.output", output, "output (generated)", "0"),
    NPU_PARAM_INT("serve.prefix.groups", prefix_groups, "0", NPU_PF_NONNEG,
        "drawn requests share one of this many prefixes (a system prompt, few-shot examples), picked uniformly; "
        "0 none"),
    NPU_PARAM_INT("serve.prefix.tokens", prefix_tokens, "0", NPU_PF_NONNEG,
        "tokens of a shared prefix: drawn prompts are the prefix then serve.prompt tokens; a trace's prompts "
        "include it"),
    NPU_PARAM_INT("serve.seed", seed, "1", NPU_PF_NONNEG, "seed of arrivals, lengths and prefix groups (gsl mt19937; "
        "reported)"),
    NPU_PARAM_INT("serve.tp", tp, "1", NPU_PF_POSITIVE, "tensor-parallel size of one engine"),
    NPU_PARAM_BOOL("serve.expert_parallel", expert_parallel, "false",
         "MoE: an engine spreads whole experts over its ranks (vLLM enable_expert_parallel) instead of TP-sharding "
         "each"),
    NPU_PARAM_INT("serve.replicas", replicas, "0", NPU_PF_NONNEG,
        "engines, each on tp devices (ranks r*tp .. r*tp+tp-1, after the prefill engines when disaggregated); 0: "
        "as many as the devices (left) hold"),
    NPU_PARAM_INT("serve.prefill.replicas", prefill_replicas, "0", NPU_PF_NONNEG,
        "prefill-decode disaggregation: this many prefill-only engines (ranks first), whose KV caches go to the "
        "decode engines (serve.replicas of serve.tp) over the platform; 0: every engine does both"),
    NPU_PARAM_INT("serve.prefill.tp", prefill_tp, "0", NPU_PF_NONNEG,
        "tensor-parallel size of a prefill engine; 0: serve.tp"),
    NPU_PARAM_ENUM("serve.router", router, "round_robin", router_names,
         "which engine a request goes to: round_robin, least_loaded (fewest running + queued), prefix (an engine "
         "that cached its prefix, else least_loaded)"),
    NPU_PARAM_INT("serve.max_num_seqs", max_num_seqs, "256", NPU_PF_POSITIVE,
        "running sequences per engine (vLLM max_num_seqs); the KV cache may allow fewer"),
    NPU_PARAM_INT("serve.max_batched_tokens", max_batched_tokens, "8192", NPU_PF_POSITIVE,
        "tokens per engine step, decodes and prefill chunks (vLLM max_num_batched_tokens)"),
    NPU_PARAM_INT("serve.block_size", block_size, "16", NPU_PF_POSITIVE, "tokens per KV cache block (paged attention)"),
    NPU_PARAM_BOOL("serve.chunked_prefill", chunked_prefill, "true",
         "true: decodes first, then prompt chunks fill the token budget (vLLM v1); false: steps of whole prompts "
         "first, else decodes (vLLM v0)"),
    NPU_PARAM_BOOL("serve.prefix_caching", prefix_caching, "true",
         "a request whose shared prefix its engine has computed skips its prefill (whole blocks)"),
    NPU_PARAM_ENUM("serve.preemption", preemption, "recompute", preempt_names,
         "when the KV cache is full: recompute (the newest running sequence is evicted and recomputed later, "
         "vLLM) or reserve (admission reserves prompt + output blocks, never preempts)"),
    {"serve.memory_utilization", NPU_PT_REAL, NPU_PARAM_OFF(memory_utilization), 0, "0.9", NPU_PF_FRACTION, 0, 0,
     NULL, "share of HBM an engine may use for weights, activations and KV cache (vLLM gpu_memory_utilization)"},
    NPU_PARAM_BOOL("serve.custom_allreduce", custom_allreduce, "true",
        "TP all-reduces of the engine run as vLLM's custom all-reduce (disable_custom_all_reduce = false) where vLLM "
         "takes it: GPUs of one server on NVLink, 2, 4, 6 or 8 of them, under 8 MiB; one-shot (each device reads its "
         "peers' buffers) on 2 devices, on 4 under 512 KiB, on 8 under 256 KiB, else two-shot; false, or Ascend "
         "(HCCL), the collective library's choice"),
    NPU_PARAM_BOOL("serve.graph", graph, "true",
         "decode-only steps run as captured graphs: padded up to the next capture size (1, 2, 4, 8, 16, ... "
         "vLLM's list up to 512); kernels are costed as queued on the stream either way"),
    {"serve.step_overhead", NPU_PT_TIME, NPU_PARAM_OFF(engine.step_s), 0, "0.67ms", NPU_PF_NONNEG, 0, 0, NULL,
     "engine time per step beyond the kernels (scheduler, input preparation, sampling, output processing); "
     "default: vLLM V0 on H100, fitted to LLM-Inference-Bench (docs/SERVING.md, Engine time)"},
    {"serve.seq_overhead", NPU_PT_TIME, NPU_PARAM_OFF(engine.seq_s), 0, "41us", NPU_PF_NONNEG, 0, 0, NULL,
     "engine time per step and scheduled sequence beyond the kernels; default: as serve.step_overhead"},
    {"serve.worker_overhead", NPU_PT_TIME, NPU_PARAM_OFF(engine.worker_s), 0, "1.99ms", NPU_PF_NONNEG, 0, 0, NULL,
     "engine time per step added on an engine of more than one device (the multi-GPU executor hands each step's "
     "inputs to its workers, which run in lockstep); default: as serve.step_overhead, fitted at TP 2 and 4"},
    {"serve.worker_rank_overhead", NPU_PT_TIME, NPU_PARAM_OFF(engine.worker_rank_s), 0, "0.24ms", NPU_PF_NONNEG, 0,
     0, NULL, "engine time per step added for each device of an engine beyond the second; default: as "
     "serve.worker_overhead"},
    NPU_PARAM_ENUM("serve.speculative.method", speculative, "none", spec_names,
         "speculative decoding: none; ngram (prompt lookup: drafts cost nothing on the device); mtp (a draft module "
         "of one decoder layer and the head per draft token: DeepSeek MTP, EAGLE)"),
    NPU_PARAM_INT("serve.speculative.tokens", spec_tokens, "0", NPU_PF_NONNEG,
        "draft tokens each decoding sequence proposes per step (vLLM num_speculative_tokens); needed with a method"),
    {"serve.speculative.acceptance", NPU_PT_REAL, NPU_PARAM_OFF(spec_acceptance), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "the chance (0 to 1) a draft token is accepted given the ones before it were (measured for the draft, model "
     "and data: no default); the verifier keeps the accepted prefix and one more token"},
    {"serve.slo.ttft", NPU_PT_TIME, NPU_PARAM_OFF(slo_ttft_s), 0, "0s", NPU_PF_NONNEG, 0, 0, NULL,
     "goodput: time to first token a request must meet; 0 none"},
    {"serve.slo.tpot", NPU_PT_TIME, NPU_PARAM_OFF(slo_tpot_s), 0, "0s", NPU_PF_NONNEG, 0, 0, NULL,
     "goodput: time per output token after the first a request must meet; 0 none"},
    {"serve.slo.e2e", NPU_PT_TIME, NPU_PARAM_OFF(slo_e2e_s), 0, "0s", NPU_PF_NONNEG, 0, 0, NULL,
     "goodput: end-to-end latency a request must meet; 0 none"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *sv_spec_table(void)
{
  return &table;
}

void sv_spec_register(struct npu_cfg *cfg, struct sv_spec *s)
{
  memset(s, 0, sizeof *s);
  npu_cfg_add_table(cfg, &table, s);
}

const char *sv_router_name(int r)
{
  return r >= 0 && r < 3 ? router_names[r] : "?";
}

const char *sv_speculative_name(int m)
{
  return m >= 0 && m < 3 ? spec_names[m] : "?";
}

const char *sv_preemption_name(int p)
{
  return p >= 0 && p < 2 ? preempt_names[p] : "?";
}
