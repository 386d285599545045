/*
 * rl.h - RL post-training iterations (PPO, GRPO) on a simulated cluster: the `rl` section of a
 * scenario, the job it describes, and one iteration's phases and results.
 *
 * An iteration, as veRL/HybridFlow, OpenRLHF and NeMo-RL run it: rollout generation (prefill,
 * then token-by-token decode with a KV cache and continuous batching, response lengths drawn
 * from a seeded distribution), reference-policy, reward-model and critic inference, advantage
 * computation, actor (and critic) training through the training replay (workloads/), and
 * weight synchronisation from the training layout to the rollout layout over the topology.
 * Placements: colocated (every role time-shares the devices; offload and reload through the
 * host link) or disaggregated (a rollout pool and a training pool); synchronous or one-step
 * off-policy asynchronous. Design and shortcuts: docs/RL.md.
 */
#ifndef NPUSIM_RL_RL_H
#define NPUSIM_RL_RL_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/diag.h"
#include "common/trace.h"
#include "serve/workload.h"
#include "workloads/job.h"
#include "workloads/model.h"
#include "workloads/plan.h"
#include "workloads/routing.h"

enum rl_algo { RL_ALGO_GRPO, RL_ALGO_PPO };
enum rl_placement { RL_PLACE_COLOCATED, RL_PLACE_DISAGGREGATED };
enum rl_mode { RL_MODE_SYNC, RL_MODE_ASYNC };
enum rl_dist { RL_DIST_FIXED = SV_DIST_FIXED, RL_DIST_UNIFORM = SV_DIST_UNIFORM, RL_DIST_LOGNORMAL = SV_DIST_LOGNORMAL,
               RL_DIST_HISTOGRAM = SV_DIST_HISTOGRAM };

#define RL_HIST_MAX SV_HIST_MAX
enum rl_reward { RL_REWARD_RULE, RL_REWARD_MODEL };

/* The `rl` section (every key in rl/spec.c's table and docs/SCENARIOS.md). */
struct rl_spec {
  int algorithm;               /* enum rl_algo */
  int placement;               /* enum rl_placement */
  int mode;                    /* enum rl_mode */
  int prompts;                 /* prompts per iteration */
  int group_size;              /* responses per prompt (GRPO's n) */
  int prompt_len;              /* tokens per prompt */
  struct sv_dist response;     /* response lengths (serve/workload.h: the serving workload's draws) */
  int seed;                    /* of the response lengths (reported) */
  struct {
    int devices;               /* rollout pool (disaggregated); 0: the devices the training pool leaves */
    int tp;                    /* tensor-parallel size of one inference engine */
    bool expert_parallel;      /* MoE: experts spread over the engine's ranks instead of TP-sharded */
    int max_num_seqs;          /* concurrent sequences per engine (vLLM max_num_seqs) */
    int max_batched_tokens;    /* prefill chunk per engine step (vLLM max_num_batched_tokens) */
    double memory_utilization; /* share of HBM the engine may use (vLLM gpu_memory_utilization) */
    struct sv_engine_time engine; /* engine time per step beyond the kernels (scheduling, sampling, launch) */
    bool custom_allreduce;     /* TP all-reduces as vLLM's custom all-reduce where it applies (serve/probe.c) */
  } rollout;
  struct {
    int devices;               /* training pool (disaggregated); 0: the devices the rollout pool leaves */
    int seq_len;               /* packing length of training sequences; 0: prompt + max response, to 128 */
    int mini_batches;          /* optimizer steps per epoch (PPO mini-batches) */
    int epochs;                /* passes over the iteration's data */
  } train;
  int reward;                  /* enum rl_reward */
  double reward_rule_s;        /* host time of a rule-based reward per response */
  bool reference;              /* a reference policy (KL penalty) */
  bool old_logprob;            /* recompute the behaviour policy's log-probs with the actor */
  double host_bw_bytes_per_s;  /* host <-> device link per device, one direction (offload) */
  bool offload_weights;        /* colocated: training weights leave HBM during rollout too */
};

/* The rl section's table (target: struct rl_spec) and its registration (zeroes s first). */
const struct npu_table *rl_spec_table(void);
void rl_spec_register(struct npu_cfg *cfg, struct rl_spec *s);

/* An RL scenario, loaded and checked. */
struct rl_job {
  char path[512];                 /* scenario file as given (or the display name) */
  struct npu_cfg *cfg;
  struct arch_system sys;
  struct wl_model model;          /* the policy (actor); reference, critic and reward model share it */
  struct wl_plan plan;            /* the actor's training plan, checked on the training pool */
  struct wl_routing_cfg routing;
  struct wl_run run;
  struct rl_spec spec;
  int devices;                    /* of the system */
  int train_devices, rollout_devices;
  int train_first, rollout_first; /* first global rank of each pool */
  int train_nodes;                /* the training pool as a system: nodes x node_devices */
  int train_node_devices;
  int train_seq_len;              /* packing length */
  int engines;                    /* rollout engines (rollout_devices / rollout.tp) */
  int sequences;                  /* prompts x group_size */
  char **sets;                    /* the overrides, copied */
  int nsets;
};

/*
 * Load and check an RL scenario: path, then overrides "KEY=VALUE". Errors (NPU_ECONFIG, ...)
 * name file:line and the key. A file without an `rl` section is refused (NPU_ECONFIG).
 */
int rl_job_load(struct rl_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag);
void rl_job_release(struct rl_job *job);

/* ------------------------------------------------------------------ results */

#define RL_MAX_PHASES 16

enum rl_pool { RL_POOL_ROLLOUT, RL_POOL_TRAIN };

struct rl_phase {
  char name[32];        /* "rollout", "reference", "actor_train", ... */
  int pool;             /* enum rl_pool: where it runs (colocated: both are the same devices) */
  double start_s;       /* in the (steady-state) iteration */
  double time_s;
  double flops;         /* model FLOPs of the phase, all devices */
  double mfu;           /* flops / (time x devices of the pool x peak); 0 for transfers */
  double bytes;         /* moved bytes (weight sync, offload), all devices */
};

struct rl_rollout_stats {
  double time_s;            /* until the last response of the iteration */
  double prefill_s, decode_s; /* of the engine that finished last */
  double tail_s;            /* that engine's drain: from its last admission to its end */
  double idle_s;            /* mean over engines of (end of the rollout - end of the engine) */
  double mean_batch;        /* mean running sequences per decode step, over engines */
  int max_batch;            /* concurrency cap per engine (max_num_seqs, or the KV cache) */
  double kv_capacity_tokens;/* per engine */
  double longest;           /* longest response, tokens */
  double mean_len;          /* mean response, tokens */
  double generated_tokens;  /* response tokens in all */
  double flops;             /* model FLOPs: 2 x active params + attention, per token */
  long decode_steps;        /* of the engine that finished last */
};

struct rl_result {
  double iteration_s;
  struct rl_phase phase[RL_MAX_PHASES];
  int nphases;
  struct rl_rollout_stats rollout;
  double train_step_s;      /* one actor optimizer step (the replay) */
  int train_steps;          /* optimizer steps per iteration (per model) */
  int train_global_batch;   /* packed sequences per step */
  double train_mfu;         /* of one step (the replay) */
  bool train_oom;
  double train_memory_bytes;
  char train_bottleneck[256];
  double sync_bytes;        /* weight sync, all devices */
  double generated_tokens_per_s, trained_tokens_per_s;
  double trained_tokens;    /* prompt + response tokens of the iteration */
  double util_rollout, util_train;  /* busy share of the iteration per pool */
  double peak_flops_per_s;
  double weights_bytes_rollout;     /* per device */
  char bottleneck[256];
};

/*
 * Simulate one iteration (steady state for async). Training steps run in child processes
 * (the training replay), so does the interconnect probe; the parent never starts SimGrid.
 * trace (may be NULL) gets the phases per pool. 0 or an error with diag.
 */
int rl_run(struct rl_job *job, struct npu_trace *trace, struct rl_result *res, struct npu_diag *diag);

/* What an RL iteration's columns read: the job and its result (both borrowed). */
struct rl_report {
  const struct rl_job *job;
  const struct rl_result *res;
};
struct rpt_column;
/* The columns of summary.csv (report/columns.h), read from a struct rl_report; static. */
const struct rpt_column *rl_summary_columns(void);

/* Reports (rl/summary.c): text, summary.json, the CSV header and row (each ends with '\n'). */
void rl_summary_text(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out);
void rl_summary_json(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out);
/* One self-contained HTML page (report/html.h): key figures, the phases per pool. */
void rl_summary_html(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out);
void rl_summary_csv_header(struct npu_buf *out);
void rl_summary_csv_row(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out);

const char *rl_algo_name(int a);
const char *rl_placement_name(int p);
const char *rl_mode_name(int m);

#endif
