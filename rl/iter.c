/*
 * iter.c - one RL iteration as phases on the device pools.
 *
 * Order of a synchronous iteration (veRL's RayPPOTrainer.fit, OpenRLHF's PPO trainer):
 *   rollout -> [colocated: reload the training states from the host] -> reward (rule on the
 *   host, or a reward model's forward) -> reference forward -> critic forward (PPO) -> actor
 *   forward for the old log-probs -> advantages -> actor training -> critic training (PPO) ->
 *   [colocated: offload the training states] -> weight sync to the rollout layout.
 * The forward passes run on the training pool in the actor's layout: pipelined over pp stages,
 * (m + pp - 1) stage times for m packed sequences per replica. Reference, reward model and
 * critic share the policy's architecture. Colocated, every role's states move over the host
 * link (rl.host_bandwidth) when the devices switch between rollout and training: optimizer
 * states and gradients of the actor (and critic), the actor's weights unless
 * rl.offload_weights is false, the reference / reward model weights; the rollout's weights and
 * KV cache are dropped and rebuilt by the weight sync. Disaggregated, each pool keeps its
 * roles resident.
 * One-step asynchronous (disaggregated): the rollout of iteration i+1 runs while the training
 * pool scores and trains on iteration i and sends the weights; in steady state the iteration
 * takes max(rollout, training-pool chain including the weight sync).
 */
#include "rl/rl_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/derived.h"
#include "common/err.h"

static struct rl_phase *add(struct rl_result *r, const char *name, int pool, double time_s)
{
  NPU_ASSERT(r->nphases < RL_MAX_PHASES);
  struct rl_phase *p = &r->phase[r->nphases++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->pool = pool;
  p->time_s = time_s;
  return p;
}

/* Static names for the trace (its events keep pointers). */
static const char *static_name(const char *n)
{
  static const char *const names[] = {"rollout",   "reload",      "reward",      "reference",  "critic_inference",
                                      "old_logprob", "advantage", "actor_train", "critic_train", "offload",
                                      "weight_sync"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(names[i], n)) return names[i];
  return "phase";
}

int rl_run(struct rl_job *job, struct npu_trace *trace, struct rl_result *res, struct npu_diag *diag)
{
  memset(res, 0, sizeof *res);
  const struct rl_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  int n = job->sequences, P = s->prompt_len;
  struct op_cache *cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  int *len = npu_xmalloc((size_t)n * sizeof *len);
  rl__draw_lengths(s, n, len);
  double tokens = 0;
  for (int i = 0; i < n; i++) tokens += P + len[i];

  /* the rollout engine's KV cache in blocks */
  int tpr = s->rollout.tp;
  double hbm = (double)job->sys.chip.hbm.size_bytes * s->rollout.memory_utilization;
  double kv_left = hbm - sv_weight_bytes(m, tpr) - sv_activation_bytes(m, tpr, s->rollout.max_batched_tokens);
  long kv_blocks = (long)floor(kv_left / (sv_kv_token_bytes(m, tpr) * RL_BLOCK_TOKENS));
  int longest = 0;
  for (int i = 0; i < n; i++) longest = len[i] > longest ? len[i] : longest;

  struct sv_colls colls = {0};
  struct sv_infer roll, trn;
  double *matrix = npu_xcalloc((size_t)job->devices * job->devices, sizeof *matrix);
  struct sv_target tr_roll = {m, &job->sys, job->run.fidelity, job->path, "rl.rollout.tp"};
  struct sv_target tr_train = {m, &job->sys, job->run.fidelity, job->path, "plan.tp"};
  int budget = s->rollout.max_batched_tokens, seqs = s->rollout.max_num_seqs;
  struct sv_infer_shape sh_roll = {budget, seqs < budget ? seqs : budget, P + longest, seqs, 0};
  struct sv_infer_shape sh_train = {0, 0, 0, 0, job->train_seq_len};
  int rc = sv_infer_init(&roll, &tr_roll, cache, &colls, RL_GROUP_ROLLOUT_TP, tpr, s->rollout.expert_parallel,
                         &sh_roll, &s->rollout.engine, diag);
  if (!rc)
    rc = sv_infer_init(&trn, &tr_train, cache, &colls, RL_GROUP_TRAIN_TP, job->plan.tp, false, &sh_train, NULL, diag);
  int sync = -1;
  double needed = 0, kept = 0;
  if (!rc) {
    res->sync_bytes = rl__reshard_matrix(job, matrix, &needed, &kept);
    if (res->sync_bytes > 0) {
      double rowmax = 0;
      for (int i = 0; i < job->devices; i++) {
        double row = 0;
        for (int j = 0; j < job->devices; j++) row += matrix[(size_t)i * job->devices + j];
        rowmax = row > rowmax ? row : rowmax;
      }
      colls.matrix = matrix;
      colls.matrix_ranks = job->devices;
      sync = sv_coll(&colls, IC_OP_ALLTOALLV, rowmax, RL_GROUP_ALL);
    }
  }
  /* the groups: the first rollout engine's ranks, the first training TP group, every rank */
  struct sv_group groups[3] = {{job->rollout_first, tpr, 1, "rl.rollout.tp", job->spec.rollout.custom_allreduce},
                               {job->train_first, job->plan.tp, 1, "plan.tp", false},
                               {0, job->devices, 1, "rl.placement", false}};
  if (!rc) rc = sv_probe(&job->sys, job->devices, &colls, groups, 3, job->path, diag);
  struct rl_train tr;
  if (!rc) rc = rl__train(job, tokens, &tr, diag);
  if (!rc) {
    rl__rollout(&roll, job, len, n, P, kv_blocks, &res->rollout);
    res->weights_bytes_rollout = roll.weight_bytes;
  }
  if (rc) goto out;

  struct arch_derived dv;
  arch_derive(&job->sys, &dv);
  double peak = dv.peak_flops_per_s[wl_plan_wide_dtype(&job->plan)];
  res->peak_flops_per_s = peak;
  res->train_step_s = tr.step_s;
  res->train_steps = tr.steps;
  res->train_global_batch = tr.global_batch;
  res->train_mfu = tr.mfu;
  res->train_oom = tr.oom;
  res->train_memory_bytes = tr.memory_bytes;
  snprintf(res->train_bottleneck, sizeof res->train_bottleneck, "%s", tr.bottleneck);
  res->trained_tokens = tokens;

  bool colo = s->placement == RL_PLACE_COLOCATED, ppo = s->algorithm == RL_ALGO_PPO;
  int T = job->train_devices, R = job->rollout_devices;
  /* forward passes over the packed sequences on the training layout */
  double packed = ceil(tokens / job->train_seq_len);
  int replicas = T / (job->plan.tp * job->plan.pp * job->plan.cp);
  double per = ceil(packed / replicas), pp = job->plan.pp;
  double fwd_s = (per + pp - 1) * sv_cost_s(&trn, &trn.forward) / pp;
  double fwd_flops = tokens * sv_token_flops(m, job->train_seq_len / 2.0);
  /* states over the host link, per device (colocated) */
  double w_train = tr.mem.weights_bytes, states = tr.mem.grads_bytes + tr.mem.optimizer_bytes;
  double host = 0;
  if (colo) {
    host = states + (s->offload_weights ? w_train : 0);
    if (ppo) host += states + w_train;                         /* the critic */
    if (s->reference) host += w_train;                         /* the reference policy */
    if (s->reward == RL_REWARD_MODEL) host += w_train;         /* the reward model */
  }
  double host_s = host / s->host_bw_bytes_per_s;

  struct rl_phase *ph = add(res, "rollout", RL_POOL_ROLLOUT, res->rollout.time_s);
  ph->flops = res->rollout.flops;
  if (colo) {
    ph = add(res, "reload", RL_POOL_TRAIN, host_s);
    ph->bytes = host * T;
  }
  if (s->reward == RL_REWARD_MODEL) {
    ph = add(res, "reward", RL_POOL_TRAIN, fwd_s);
    ph->flops = fwd_flops;
  } else {
    add(res, "reward", RL_POOL_TRAIN, s->reward_rule_s * n / T); /* one host worker per device */
  }
  if (s->reference) {
    ph = add(res, "reference", RL_POOL_TRAIN, fwd_s);
    ph->flops = fwd_flops;
  }
  if (ppo) {
    ph = add(res, "critic_inference", RL_POOL_TRAIN, fwd_s);
    ph->flops = fwd_flops;
  }
  if (s->old_logprob) {
    ph = add(res, "old_logprob", RL_POOL_TRAIN, fwd_s);
    ph->flops = fwd_flops;
  }
  /* advantages: GRPO normalises n rewards per group, PPO runs GAE over the response tokens
   * (values, rewards in; advantages, returns out: 16 bytes of fp32 per token), memory-bound */
  double adv_bytes = ppo ? 16.0 * res->rollout.generated_tokens : 8.0 * n;
  add(res, "advantage", RL_POOL_TRAIN,
      job->sys.chip.launch_overhead_s + adv_bytes / T / (job->sys.chip.hbm.bw_bytes_per_s * job->sys.chip.calib.hbm.value));
  ph = add(res, "actor_train", RL_POOL_TRAIN, tr.step_s * tr.steps);
  ph->flops = tr.model_flops * tr.steps;
  if (ppo) {
    ph = add(res, "critic_train", RL_POOL_TRAIN, tr.step_s * tr.steps);
    ph->flops = tr.model_flops * tr.steps;
  }
  if (colo) {
    ph = add(res, "offload", RL_POOL_TRAIN, host_s);
    ph->bytes = host * T;
  }
  /* the network part, and the copy of what a device keeps into the engine's buffers (read + write) */
  double copy_s = 2 * kept / (job->sys.chip.hbm.bw_bytes_per_s * job->sys.chip.calib.hbm.value);
  ph = add(res, "weight_sync", RL_POOL_TRAIN, (sync >= 0 ? colls.v[sync].time_s : 0) + copy_s);
  ph->bytes = res->sync_bytes;

  /* timeline */
  double t = 0, train_chain = 0;
  bool async = s->mode == RL_MODE_ASYNC;
  for (int i = 0; i < res->nphases; i++) {
    struct rl_phase *p = &res->phase[i];
    if (async) { /* rollout of the next iteration alongside the training pool's chain */
      p->start_s = p->pool == RL_POOL_ROLLOUT ? 0 : train_chain;
      if (p->pool == RL_POOL_TRAIN) train_chain += p->time_s;
    } else {
      p->start_s = t;
      t += p->time_s;
    }
    int devs = p->pool == RL_POOL_ROLLOUT ? R : T;
    p->mfu = p->flops > 0 && p->time_s > 0 ? p->flops / (p->time_s * devs * peak) : 0;
  }
  res->iteration_s = async ? fmax(res->rollout.time_s, train_chain) : t;
  double it = res->iteration_s;
  res->generated_tokens_per_s = res->rollout.generated_tokens / it;
  res->trained_tokens_per_s = tokens * s->train.epochs / it;
  /* busy device-time per pool: the rollout minus the engines' wait for the slowest one; host-side
   * reward rules keep no device busy; the weight sync occupies both pools */
  double roll_busy = res->rollout.time_s - res->rollout.idle_s, train_busy = 0, sync_s = 0;
  for (int i = 1; i < res->nphases; i++) {
    const struct rl_phase *p = &res->phase[i];
    if (!strcmp(p->name, "reward") && s->reward == RL_REWARD_RULE) continue;
    if (!strcmp(p->name, "weight_sync")) sync_s = p->time_s;
    train_busy += p->time_s;
  }
  if (colo) {
    res->util_rollout = res->util_train = (roll_busy + train_busy) / it;
  } else { /* async: the weights arrive while the engines generate (in-flight weight updates) */
    res->util_rollout = (roll_busy + (async ? 0 : sync_s)) / it;
    res->util_train = train_busy / it;
  }
  /* the bottleneck */
  int top = 0;
  for (int i = 1; i < res->nphases; i++)
    if (res->phase[i].time_s > res->phase[top].time_s) top = i;
  if (async) {
    bool rb = res->rollout.time_s >= train_chain;
    snprintf(res->bottleneck, sizeof res->bottleneck, "%s-bound: the %s pool waits %.1f%% of the iteration",
             rb ? "rollout" : "training", rb ? "training" : "rollout",
             100 * fabs(res->rollout.time_s - train_chain) / it);
  } else {
    char why[160] = "";
    if (!strcmp(res->phase[top].name, "rollout") && res->rollout.mean_batch < 0.5 * res->rollout.max_batch)
      snprintf(why, sizeof why, "; long-tail responses: decode steps average %.1f of up to %d sequences",
               res->rollout.mean_batch, res->rollout.max_batch);
    snprintf(res->bottleneck, sizeof res->bottleneck, "%s (%.1f%% of the iteration)%s", res->phase[top].name,
             100 * res->phase[top].time_s / it, why);
  }
  if (trace) {
    int pools = colo ? 1 : 2;
    npu_trace_name(trace, 0, -1, colo ? "all devices" : "rollout pool");
    npu_trace_name(trace, 0, 0, "phases");
    if (pools == 2) {
      npu_trace_name(trace, 1, -1, "training pool");
      npu_trace_name(trace, 1, 0, "phases");
    }
    for (int i = 0; i < res->nphases; i++) {
      const struct rl_phase *p = &res->phase[i];
      int pid = colo ? 0 : p->pool == RL_POOL_ROLLOUT ? 0 : 1;
      if (p->time_s > 0) npu_trace_add(trace, pid, 0, static_name(p->name), p->start_s, p->time_s);
      if (!colo && !strcmp(p->name, "weight_sync") && p->time_s > 0)
        npu_trace_add(trace, 0, 0, static_name(p->name), p->start_s, p->time_s);
    }
  }
out:
  if (!rc && job->run.cost_cache[0]) rc = op_cache_save(cache) ? (npu_diag_set(diag, job->run.cost_cache, 0,
                                                                    "run.cost_cache", "cannot save the cost cache"),
                                                                    NPU_EIO)
                                                               : 0;
  op_cache_close(cache);
  sv_colls_release(&colls);
  free(matrix);
  free(len);
  return rc;
}
