/*
 * job.c - loading a training scenario: the system, model, plan and run sections in one file.
 */
#include "workloads/job.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define OFF(f) offsetof(struct wl_run, f)

static const char *const fid_names[] = {"event", "analytic", NULL};
static const char *const cfid_names[] = {"step", "bulk", NULL};

static const struct npu_section sections[] = {
    {"run", false, "how to simulate"},
};

static const struct npu_param params[] = {
    {"run.fidelity", NPU_PT_ENUM, OFF(fidelity), 0, "analytic", 0, 0, 0, fid_names,
     "kernel costs: analytic (closed-form tile pipeline) or event (every instruction simulated)"},
    {"run.collectives", NPU_PT_ENUM, OFF(coll_fidelity), 0, "bulk", 0, 0, 0, cfid_names,
     "collectives simulated in the step: bulk (one flow per rank and link class) or step (every algorithm step)"},
    {"run.seed", NPU_PT_INT, OFF(seed), 0, "1", NPU_PF_NONNEG, 0, 0, NULL, "seed of anything random (reported)"},
    {"run.cost_cache", NPU_PT_STRING, OFF(cost_cache), sizeof(((struct wl_run *)0)->cost_cache), "", 0, 0, 0, NULL,
     "file of kernel costs kept across runs (\"\": in memory only)"},
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

int wl_job_load(struct wl_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  wl_model_register(job->cfg, &job->model);
  wl_plan_register(job->cfg, &job->plan);
  wl_run_register(job->cfg, &job->run);
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
  if (rc) return rc;
  if (job->plan.dtype == 2)
    return npu_cfg_fail(job->cfg, diag, "plan.dtype", "fp8 training comes with the MoE/fp8 issue; use bf16 or fp16"),
           NPU_ECONFIG;
  enum npu_dtype dt = job->plan.dtype == 1 ? NPU_DT_FP16 : NPU_DT_BF16;
  if (!job->sys.chip.cube.macs_per_cycle[dt])
    return npu_cfg_fail(job->cfg, diag, "plan.dtype", "%s has no %s cube", job->sys.chip.name, npu_dtype_name(dt));
  if (job->model.attention == WL_ATTN_FLASH) {
    int d = wl_model_head_dim(&job->model);
    if (d != 64 && d != 128)
      return npu_cfg_fail(job->cfg, diag, "model.attention",
                          "the FlashAttention kernel takes head dimension 64 or 128, the model has %d: use "
                          "model.attention = \"standard\"", d);
    if ((job->model.seq_len / job->plan.cp) % 128)
      return npu_cfg_fail(job->cfg, diag, "model.seq_len", "FlashAttention needs the sequence per rank (%d) to be a "
                          "multiple of 128", job->model.seq_len / job->plan.cp);
  }
  job->devices = wl_system_devices(&job->sys);
  job->microbatches = wl_plan_microbatches(&job->plan);
  return 0;
}

void wl_job_release(struct wl_job *job)
{
  free(job->items);
  free(job->kernels);
  free(job->colls);
  free(job->optim);
  free(job->stage_params);
  if (job->cfg) npu_cfg_destroy(job->cfg);
  memset(job, 0, sizeof *job);
}
