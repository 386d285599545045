/*
 * job.c - loading a training scenario: the system, model, plan and run sections in one file.
 */
#include "workloads/job.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/workloads_int.h"

#define NPU_PARAM_STRUCT struct wl_run

static const char *const fid_names[] = {"event", "analytic", NULL};
static const char *const cfid_names[] = {"step", "bulk", NULL};
static const char *const network_names[] = {"flows", "formula", NULL};
static const char *const detail_names[] = {"auto", "all", NULL};

static const struct npu_section sections[] = {
    {"run", false, "how to simulate"},
};

static const struct npu_param params[] = {
    {"run.fidelity", NPU_PT_ENUM, NPU_PARAM_OFF(fidelity), 0, "analytic", 0, 0, 0, fid_names,
     "kernel costs: analytic (closed-form tile pipeline) or event (every instruction simulated)"},
    {"run.collectives", NPU_PT_ENUM, NPU_PARAM_OFF(coll_fidelity), 0, "bulk", 0, 0, 0, cfid_names,
     "collectives simulated in the step: bulk (one flow per rank and link class) or step (every algorithm step)"},
    {"run.network", NPU_PT_ENUM, NPU_PARAM_OFF(network), 0, "flows", 0, 0, 0, network_names,
     "pipeline sends and expert all-to-alls: flows (on the platform, contending) or formula (closed form, alone on "
     "their routes: for very large jobs)"},
    {"run.seed", NPU_PT_INT, NPU_PARAM_OFF(seed), 0, "1", NPU_PF_NONNEG, 0, 0, NULL, "seed of anything random (reported)"},
    {"run.cost_cache", NPU_PT_STRING, NPU_PARAM_OFF(cost_cache), NPU_PARAM_SZ(cost_cache), "", 0, 0, 0, NULL,
     "file of kernel costs kept across runs (\"\": in memory only)"},
    {"run.trace_detail", NPU_PT_ENUM, NPU_PARAM_OFF(trace_detail), 0, "auto", 0, 0, 0, detail_names,
     "a training trace (--trace): all (every kernel, wait and bucket of every replay rank) or auto (as all up to "
     "64 replay ranks; above, those of the first EP rank of each stage, the others' schedule slots, arrows and "
     "memory only: a 1,024-rank step stays below 100 MB)"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

void wl_run_register(struct npu_cfg *cfg, struct wl_run *run)
{
  memset(run, 0, sizeof *run);
  npu_cfg_add_table(cfg, &table, run);
}

bool wl_job_is_training(const struct wl_job *job)
{
  return npu_cfg_section_present(job->cfg, "model");
}

void wl_job_init(struct wl_job *job, const char *path)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  wl_model_register(job->cfg, &job->model);
  wl_plan_register(job->cfg, &job->plan);
  wl_routing_register(job->cfg, &job->routing);
  wl_run_register(job->cfg, &job->run);
}

/* plan.ep_dispatch = node_limited: the routing's groups are the EP group's nodes (group g's
 * experts on the ranks of one node, a node per group), and the network is in closed form. */
static int node_limited_check(struct wl_job *job, struct npu_diag *diag)
{
  const struct wl_plan *p = &job->plan;
  int G = job->model.moe.groups, ep = p->ep, per = job->sys.node.devices > 0 ? job->sys.node.devices : 1;
  if (!job->model.moe.experts || ep < 2 || !G)
    return npu_cfg_fail(job->cfg, diag, "plan.ep_dispatch", "node-limited dispatch needs an MoE model with plan.ep > 1 "
                        "and group-limited routing (model.moe.groups: the nodes a token may reach)");
  if (job->run.network != WL_NETWORK_FORMULA)
    return npu_cfg_fail(job->cfg, diag, "plan.ep_dispatch", "node-limited dispatch is modelled in closed form only: "
                        "set run.network = \"formula\"");
  bool ok = ep % G == 0;
  for (int e = 0; ok && e < ep; e++) { /* every rank of group g on one node, each group on its own */
    int node = wl_plan_expert_rank(p, 0, 0, e, 0) / per;
    int first = wl_plan_expert_rank(p, 0, 0, e / (ep / G) * (ep / G), 0) / per;
    ok = node == first && (e < ep / G || node != wl_plan_expert_rank(p, 0, 0, e - ep / G, 0) / per);
  }
  if (!ok)
    return npu_cfg_fail(job->cfg, diag, "plan.ep_dispatch", "node-limited dispatch needs the routing's %d groups to "
                        "be the EP group's nodes: ep %d over nodes of %d devices puts them elsewhere", G, ep, per);
  return 0;
}

int wl_job_load(struct wl_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  wl_job_init(job, path);
  int rc = npu_cfg_load_file(job->cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(job->cfg, sets[i], diag);
  if (!rc) rc = npu_cfg_finish(job->cfg, diag);
  if (!rc) rc = arch_finish(job->cfg, &job->sys, diag);
  if (rc || !wl_job_is_training(job)) return rc;
  if (!npu_cfg_section_present(job->cfg, "plan"))
    return npu_diag_set(diag, path, 0, "plan", "a training scenario needs a plan section (plan.global_batch at least)"),
           NPU_ECONFIG;
  rc = wl_model_finish(job->cfg, &job->model, diag);
  if (!rc) rc = wl_plan_finish(job->cfg, &job->plan, &job->model, &job->sys, diag);
  if (!rc && job->model.moe.experts) rc = wl_routing_finish(job->cfg, &job->routing, &job->model, diag);
  if (rc) return rc;
  enum npu_dtype dt = wl_plan_wide_dtype(&job->plan);
  if (!job->sys.chip.cube.macs_per_cycle[dt])
    return npu_cfg_fail(job->cfg, diag, "plan.dtype", "%s has no %s cube", job->sys.chip.name, npu_dtype_name(dt));
  if (wl_plan_is_fp8(&job->plan) && !job->sys.chip.cube.macs_per_cycle[wl_plan_fp8_dtype(&job->plan)])
    return npu_cfg_fail(job->cfg, diag, "plan.dtype", "%s has no %s cube input for fp8 training (950-class and H100 "
                        "presets do)", job->sys.chip.name, job->plan.fp8_recipe == WL_FP8_MX ? "mxfp8" : "fp8");
  if (job->plan.cp > 1 && job->model.attention != WL_ATTN_FLASH)
    return npu_cfg_fail(job->cfg, diag, "plan.cp", "context parallelism runs FlashAttention kernels (Megatron with "
                        "Transformer Engine): set model.attention = \"flash\"");
  if (job->model.moe.experts && job->plan.tp > 1 && !job->plan.sp)
    return npu_cfg_fail(job->cfg, diag, "plan.sp", "an MoE model with tp > 1 needs sequence parallelism (Megatron "
                        "requires it for expert parallelism with tensor parallelism)");
  if (job->model.attention == WL_ATTN_FLASH && !wl_model_is_mla(&job->model)) { /* MLA: see expand.c */
    int d = wl_model_head_dim(&job->model);
    if (d % 64 || d > 256)
      return npu_cfg_fail(job->cfg, diag, "model.attention",
                          "the FlashAttention kernel takes head dimensions of a multiple of 64 up to 256, the model "
                          "has %d: use "
                          "model.attention = \"standard\"", d);
    if ((job->model.seq_len / job->plan.cp) % 128)
      return npu_cfg_fail(job->cfg, diag, "model.seq_len", "FlashAttention needs the sequence per rank (%d) to be a "
                          "multiple of 128", job->model.seq_len / job->plan.cp);
  }
  if (job->plan.ep_dispatch == WL_EPD_NODE_LIMITED) {
    rc = node_limited_check(job, diag);
    if (rc) return rc;
  }
  job->devices = wl_system_devices(&job->sys);
  job->microbatches = wl_plan_microbatches(&job->plan);
  return 0;
}

void wl_job_release(struct wl_job *job)
{
  wl_routing_release(&job->routing);
  if (job->cfg) npu_cfg_destroy(job->cfg);
  memset(job, 0, sizeof *job);
}
