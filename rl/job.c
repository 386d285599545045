/*
 * job.c - loading an RL scenario: the system, the policy's model, the actor's training plan,
 * the run options and the `rl` section, checked together; pools and layouts are refused here,
 * before anything runs, with file:line and the key.
 */
#include "rl/rl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "rl/rl_int.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void register_all(struct rl_job *job)
{
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  wl_model_register(job->cfg, &job->model);
  wl_plan_register(job->cfg, &job->plan);
  wl_routing_register(job->cfg, &job->routing);
  wl_run_register(job->cfg, &job->run);
  rl_spec_register(job->cfg, &job->spec); /* last: the training scenario is what comes before */
}

/* The devices of a pool as a system of whole servers (or part of one): nodes x per-node. */
static int pool_shape(const struct rl_job *job, int devices, const char *key, int *nodes, int *per_node,
                      struct npu_diag *diag)
{
  int dpn = job->sys.has_node ? job->sys.node.devices : 1;
  if (devices % dpn == 0) {
    *nodes = devices / dpn;
    *per_node = dpn;
  } else if (devices < dpn) {
    *nodes = 1;
    *per_node = devices;
  } else {
    return npu_cfg_fail(job->cfg, diag, key, "a pool of %d devices is not whole servers of %d devices", devices,
                        dpn);
  }
  return 0;
}

static int check_pools(struct rl_job *job, struct npu_diag *diag)
{
  const struct rl_spec *s = &job->spec;
  int n = job->devices;
  if (s->placement == RL_PLACE_COLOCATED) {
    const char *key = s->rollout.devices ? "rl.rollout.devices" : s->train.devices ? "rl.train.devices" : NULL;
    int want = s->rollout.devices ? s->rollout.devices : s->train.devices;
    if (key && want > n)
      return npu_cfg_fail(job->cfg, diag, key, "the placement needs %d devices, but the cluster has %d", want, n);
    if (key && want != n)
      return npu_cfg_fail(job->cfg, diag, key, "a colocated placement uses every device of the cluster (%d); "
                          "separate pools need rl.placement = \"disaggregated\"", n);
    job->train_devices = job->rollout_devices = n;
    job->train_first = job->rollout_first = 0;
  } else {
    int r = s->rollout.devices, t = s->train.devices;
    if (!r && !t)
      return npu_cfg_fail(job->cfg, diag, "rl.placement", "a disaggregated placement needs rl.rollout.devices or "
                          "rl.train.devices");
    const char *key = r ? "rl.rollout.devices" : "rl.train.devices";
    int nr = r ? r : 1, nt = t ? t : 1; /* an unset pool needs at least one device */
    if (nr + nt > n)
      return npu_cfg_fail(job->cfg, diag, key, "the placement needs %d devices (rollout %d + training %d), but the "
                          "cluster has %d", nr + nt, nr, nt, n);
    if (!r) r = n - t;
    if (!t) t = n - r;
    job->rollout_devices = r;
    job->train_devices = t;
    job->train_first = 0;
    job->rollout_first = t;
  }
  int rn, rp;
  int rc = pool_shape(job, job->train_devices, s->train.devices ? "rl.train.devices" : "rl.rollout.devices",
                      &job->train_nodes, &job->train_node_devices, diag);
  if (!rc) rc = pool_shape(job, job->rollout_devices, s->rollout.devices ? "rl.rollout.devices" : "rl.train.devices",
                           &rn, &rp, diag);
  return rc;
}

/* The rollout layout must hold the model's shapes: the resharding target. */
static int check_rollout_layout(struct rl_job *job, struct npu_diag *diag)
{
  const struct wl_model *m = &job->model;
  int tp = job->spec.rollout.tp;
  const char *k = "rl.rollout.tp";
  if (job->rollout_devices % tp)
    return npu_cfg_fail(job->cfg, diag, k, "rollout tp %d does not divide the %d rollout devices", tp,
                        job->rollout_devices);
  if (m->heads % tp)
    return npu_cfg_fail(job->cfg, diag, k, "cannot reshard to the rollout layout: tp %d does not divide the %d "
                        "attention heads", tp, m->heads);
  if (m->kv_heads % tp && tp % m->kv_heads)
    return npu_cfg_fail(job->cfg, diag, k, "cannot reshard to the rollout layout: tp %d and the %d key/value heads "
                        "neither divide nor replicate evenly", tp, m->kv_heads);
  if (!m->moe.experts && m->ffn % tp)
    return npu_cfg_fail(job->cfg, diag, k, "cannot reshard to the rollout layout: tp %d does not divide the MLP "
                        "size %d", tp, m->ffn);
  if (m->moe.experts && job->spec.rollout.expert_parallel && m->moe.experts % tp)
    return npu_cfg_fail(job->cfg, diag, k, "cannot reshard to the rollout layout: %d experts do not spread evenly "
                        "over %d ranks", m->moe.experts, tp);
  if (m->moe.experts && !job->spec.rollout.expert_parallel && m->moe.ffn % tp)
    return npu_cfg_fail(job->cfg, diag, k, "cannot reshard to the rollout layout: tp %d does not divide the expert "
                        "MLP size %d (try rl.rollout.expert_parallel = true)", tp, m->moe.ffn);
  if (job->spec.rollout.expert_parallel && !m->moe.experts)
    return npu_cfg_fail(job->cfg, diag, "rl.rollout.expert_parallel", "expert parallelism needs an MoE model");
  if (m->moe.experts && job->plan.ep > 1 && m->moe.experts % job->plan.ep)
    return npu_cfg_fail(job->cfg, diag, "plan.ep", "%d experts do not spread evenly over ep %d", m->moe.experts,
                        job->plan.ep);
  return 0;
}

/* HBM of a rollout engine: the weights, a prefill chunk's activations, then the KV cache. */
static int check_rollout_memory(struct rl_job *job, struct npu_diag *diag)
{
  const struct rl_spec *s = &job->spec;
  double hbm = (double)job->sys.chip.hbm.size_bytes * s->rollout.memory_utilization;
  double w = sv_weight_bytes(&job->model, s->rollout.tp);
  if (w >= hbm)
    return npu_cfg_fail(job->cfg, diag, "rl.rollout.tp", "the rollout batch cannot fit in HBM: the policy's weights "
                        "take %.2f GiB per device at tp %d, more than the %.2f GiB the engine may use", w / GIB,
                        s->rollout.tp, hbm / GIB);
  /* in blocks of RL_BLOCK_TOKENS, as the engine holds them */
  double seq = ceil(((double)s->prompt_len + s->response.max) / RL_BLOCK_TOKENS) * RL_BLOCK_TOKENS;
  double per_token = sv_kv_token_bytes(&job->model, s->rollout.tp), kv = per_token * seq;
  double left = hbm - w - sv_activation_bytes(&job->model, s->rollout.tp, s->rollout.max_batched_tokens);
  if (seq > floor(left / (per_token * RL_BLOCK_TOKENS)) * RL_BLOCK_TOKENS)
    return npu_cfg_fail(job->cfg, diag, "rl.response.max", "the rollout batch cannot fit in HBM: one sequence of "
                        "%d + %d tokens needs %.2f GiB of KV cache per device, %.2f GiB are left after the weights "
                        "(%.2f GiB) and activations", s->prompt_len, s->response.max, kv / GIB,
                        left > 0 ? left / GIB : 0, w / GIB);
  return 0;
}

/* Parse rl.response.histogram ("LEN:WEIGHT, ...") into the spec's bins. */
static int parse_histogram(struct rl_job *job, struct npu_diag *diag)
{
  struct rl_spec *s = &job->spec;
  const char *k = "rl.response.histogram";
  if (s->response.distribution != RL_DIST_HISTOGRAM) {
    if (s->response.histogram[0])
      return npu_cfg_fail(job->cfg, diag, k, "a histogram needs rl.response.distribution = \"histogram\"");
    return 0;
  }
  const char *p = s->response.histogram;
  double total = 0;
  s->response.hist_n = 0;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    char *end;
    long len = strtol(p, &end, 10);
    if (end == p || *end != ':')
      return npu_cfg_fail(job->cfg, diag, k, "expected \"LEN:WEIGHT, ...\", got '%s'", p);
    p = end + 1;
    double w = strtod(p, &end);
    if (end == p || (*end && *end != ',' && *end != ' '))
      return npu_cfg_fail(job->cfg, diag, k, "expected a weight after '%ld:', got '%s'", len, p);
    p = end;
    if (len < 1 || len > s->response.max)
      return npu_cfg_fail(job->cfg, diag, k, "length %ld is outside 1..rl.response.max (%d)", len, s->response.max);
    if (!(w >= 0) || !isfinite(w))
      return npu_cfg_fail(job->cfg, diag, k, "weight %g of length %ld must be a non-negative number", w, len);
    if (s->response.hist_n == RL_HIST_MAX)
      return npu_cfg_fail(job->cfg, diag, k, "more than %d bins", RL_HIST_MAX);
    s->response.hist_len[s->response.hist_n] = (int)len;
    s->response.hist_w[s->response.hist_n++] = w;
    total += w;
  }
  if (!(total > 0))
    return npu_cfg_fail(job->cfg, diag, k, "a histogram needs at least one bin of positive weight");
  return 0;
}

static int check_spec(struct rl_job *job, struct npu_diag *diag)
{
  int rc = parse_histogram(job, diag);
  if (rc) return rc;
  const struct rl_spec *s = &job->spec;
  if (s->algorithm == RL_ALGO_GRPO && s->group_size < 2)
    return npu_cfg_fail(job->cfg, diag, "rl.group_size", "GRPO normalises rewards within a group of responses: "
                        "group_size needs at least 2, got %d", s->group_size);
  static const char *const dist[] = {"fixed", "uniform", "lognormal"};
  bool hist = s->response.distribution == RL_DIST_HISTOGRAM; /* its bins are the lengths */
  if (!hist && s->response.mean == 0)
    return npu_cfg_fail(job->cfg, diag, "rl.response.mean", "the %s distribution needs the response length "
                        "rl.response.mean", dist[s->response.distribution]);
  if (!hist && s->response.max < s->response.mean)
    return npu_cfg_fail(job->cfg, diag, "rl.response.max", "the longest response (%d) is shorter than the mean (%d)",
                        s->response.max, s->response.mean);
  if (!hist && s->response.min > s->response.mean)
    return npu_cfg_fail(job->cfg, diag, "rl.response.min", "the shortest response (%d) is longer than the mean (%d)",
                        s->response.min, s->response.mean);
  if (s->mode == RL_MODE_ASYNC && s->placement == RL_PLACE_COLOCATED)
    return npu_cfg_fail(job->cfg, diag, "rl.mode", "one-step asynchronous RL overlaps rollout and training on "
                        "separate devices: it needs rl.placement = \"disaggregated\"");
  if (s->train.seq_len % 128)
    return npu_cfg_fail(job->cfg, diag, "rl.train.seq_len", "FlashAttention needs a multiple of 128, got %d",
                        s->train.seq_len);
  int d = wl_model_head_dim(&job->model);
  if (job->model.attention != WL_ATTN_FLASH || wl_model_is_mla(&job->model) || d % 64 || d > 256)
    return npu_cfg_fail(job->cfg, diag, "model.attention", "RL inference costs prefill with the FlashAttention "
                        "kernel: it needs model.attention = \"flash\", no MLA, a head dimension of a multiple of 64 "
                        "up to 256");
  const char *gk, *gap = wl_model_inference_gap(&job->model, &gk);
  if (gap) return npu_cfg_fail(job->cfg, diag, gk, "%s", gap);
  return 0;
}

static int check_plan(struct rl_job *job, struct npu_diag *diag)
{
  struct arch_system tsys = job->sys;
  if (tsys.has_cluster) tsys.cluster.nodes = job->train_nodes;
  if (tsys.has_node) tsys.node.devices = job->train_node_devices;
  /* the global batch is derived from the iteration's tokens; a consistent placeholder for the check */
  int per = job->plan.tp * job->plan.cp * job->plan.pp;
  int dp = job->plan.dp ? job->plan.dp : (per > 0 && job->train_devices % per == 0 ? job->train_devices / per : 1);
  job->plan.global_batch = job->plan.micro_batch * (dp > 0 ? dp : 1);
  int rc = wl_plan_finish(job->cfg, &job->plan, &job->model, &tsys, diag);
  if (rc) return rc;
  if (!job->sys.chip.cube.macs_per_cycle[wl_plan_wide_dtype(&job->plan)] || wl_plan_is_fp8(&job->plan))
    return npu_cfg_fail(job->cfg, diag, "plan.dtype", "RL training is modelled in bf16 or fp16 on a chip that has it");
  if (job->model.moe.experts && job->plan.tp > 1 && !job->plan.sp)
    return npu_cfg_fail(job->cfg, diag, "plan.sp", "an MoE model with tp > 1 needs sequence parallelism");
  return 0;
}

int rl_job_load(struct rl_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  register_all(job);
  job->sets = npu_xcalloc((size_t)(nsets > 0 ? nsets : 1), sizeof *job->sets);
  for (int i = 0; i < nsets; i++) job->sets[i] = npu_xstrdup(sets[i]);
  job->nsets = nsets;
  /* plan.global_batch is derived in an RL iteration: a default before the file, so it need not be written */
  int rc = npu_cfg_set(job->cfg, "plan.global_batch=1", diag);
  if (!rc) rc = npu_cfg_load_file(job->cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(job->cfg, sets[i], diag);
  if (!rc) rc = npu_cfg_finish(job->cfg, diag);
  if (!rc) rc = arch_finish(job->cfg, &job->sys, diag);
  if (rc) return rc;
  if (!npu_cfg_section_present(job->cfg, "rl"))
    return npu_diag_set(diag, path, 0, "rl", "not an RL scenario: no rl section"), NPU_ECONFIG;
  if (!npu_cfg_section_present(job->cfg, "model"))
    return npu_diag_set(diag, path, 0, "model", "an RL scenario needs the policy's model section"), NPU_ECONFIG;
  rc = wl_model_finish(job->cfg, &job->model, diag);
  if (!rc && job->model.moe.experts) rc = wl_routing_finish(job->cfg, &job->routing, &job->model, diag);
  job->devices = wl_system_devices(&job->sys);
  if (!rc) rc = check_spec(job, diag);
  if (!rc) rc = check_pools(job, diag);
  if (!rc) rc = check_plan(job, diag);
  if (!rc) rc = check_rollout_layout(job, diag);
  if (!rc) rc = check_rollout_memory(job, diag);
  if (rc) return rc;
  const struct rl_spec *s = &job->spec;
  job->train_seq_len = s->train.seq_len ? s->train.seq_len : (s->prompt_len + s->response.max + 127) / 128 * 128;
  job->engines = job->rollout_devices / s->rollout.tp;
  job->sequences = s->prompts * s->group_size;
  return 0;
}

void rl_job_release(struct rl_job *job)
{
  for (int i = 0; i < job->nsets; i++) free(job->sets[i]);
  free(job->sets);
  wl_routing_release(&job->routing);
  if (job->cfg) npu_cfg_destroy(job->cfg);
  memset(job, 0, sizeof *job);
}
