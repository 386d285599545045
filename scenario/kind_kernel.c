/*
 * kind_kernel.c - the kind "kernel": one operator kernel on the chip (micro/, a kernel
 * section): time, achieved FLOP/s, GM traffic, pipe ratios, the bottleneck. Its text and JSON
 * are what `npusim kernel` prints (the same functions).
 */
#include "scenario/scenario_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "interconnect/topo.h"
#include "micro/micro.h"

struct kernel {
  struct scn_scenario base; /* first */
  struct mc_kernel_job job;
  struct op_result res;
  struct mc_kernel_report report; /* what the columns read */
};

#define K(s) ((struct kernel *)(s))

static void *kernel_add(struct npu_cfg *cfg)
{
  return mc_kernel_tables_register(cfg);
}

static void kernel_values_release(void *v)
{
  mc_tables_destroy(v);
}

/* The kernel section, with a key per operator argument (kernel.m, ...). */
static const struct scn_section section_kernel = {"kernel", kernel_add, kernel_values_release};

static const struct scn_section *const sections[] = {&scn__section_system, &section_kernel, NULL};

static bool detect(const struct npu_cfg *cfg)
{
  return npu_cfg_section_present(cfg, "kernel");
}

static int load(struct scn_scenario **out, const char *path, const char *const *sets, int nsets,
                struct npu_diag *diag)
{
  struct kernel *k = npu_xcalloc(1, sizeof *k);
  k->base.kind = &scn__kind_kernel;
  int rc = mc_kernel_load(&k->job, path, sets, nsets, diag);
  if (rc) {
    mc_kernel_release(&k->job);
    free(k);
    return rc;
  }
  k->report.job = &k->job;
  k->report.res = &k->res;
  *out = &k->base;
  return 0;
}

static int run(struct scn_scenario *s, bool want_trace, struct npu_diag *diag)
{
  struct mc_kernel_job *job = &K(s)->job;
  if (want_trace && job->spec.fidelity != CORE_FIDELITY_EVENT)
    return npu_cfg_fail(job->cfg, diag, "kernel.fidelity", "a trace needs kernel.fidelity = \"event\"");
  job->progress = s->progress;
  return mc_kernel_run(job, want_trace ? &s->trace : NULL, &K(s)->res, diag);
}

static const char *fidelity(const struct scn_scenario *s)
{
  return K(s)->job.spec.fidelity == CORE_FIDELITY_EVENT ? "event" : "analytic";
}

static const void *row(const struct scn_scenario *s)
{
  return &K(s)->report;
}

static void json(const struct scn_scenario *s, struct npu_buf *out)
{
  const struct mc_kernel_job *job = &K(s)->job;
  mc_kernel_json(job->op, job->args_text, &job->sys, fidelity(s), (uint64_t)job->spec.seed, &K(s)->res, out);
}

static void text(const struct scn_scenario *s, struct npu_buf *out)
{
  const struct mc_kernel_job *job = &K(s)->job;
  mc_kernel_text(job->op, job->args_text, &job->sys, fidelity(s), &K(s)->res, out);
}

static void html(const struct scn_scenario *s, struct npu_buf *out)
{
  const struct mc_kernel_job *job = &K(s)->job;
  mc_kernel_html(job->path, job->op, job->args_text, &job->sys, fidelity(s), &K(s)->res, out);
}

static void set_display(struct scn_scenario *s, const char *name)
{
  snprintf(K(s)->job.path, sizeof K(s)->job.path, "%s", name);
}

static void release(struct scn_scenario *s)
{
  mc_kernel_release(&K(s)->job);
  free(s);
}

/* ------------------------------------------------------------------ probe */

struct probe {
  struct scn_probe base; /* first */
  struct mc_kernel_job job;
};

static struct scn_probe *probe_open(const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  struct probe *p = npu_xcalloc(1, sizeof *p);
  mc_kernel_init(&p->job, path);
  p->base.cfg = p->job.cfg;
  if (scn__cfg_load(p->base.cfg, path, sets, nsets, diag)) {
    mc_kernel_release(&p->job);
    free(p);
    return NULL;
  }
  return &p->base;
}

/* The operator and its arguments too: a shape the chip refuses is an error before anything runs. */
static int probe_finish(struct scn_probe *sp, struct npu_diag *diag)
{
  struct probe *p = (struct probe *)sp;
  sp->sys = &p->job.sys;
  return mc_kernel_finish(&p->job, diag);
}

static int probe_number(struct scn_probe *sp, const char *key, double *out, struct npu_diag *diag)
{
  struct probe *p = (struct probe *)sp;
  if (!strcmp(key, "devices")) {
    *out = ic_topo_system_ranks(&p->job.sys);
    return 0;
  }
  /* an operator argument: the value the operator takes, set or not */
  const struct npu_param *prm = npu_cfg_param(sp->cfg, key);
  if (prm && (prm->flags & NPU_PF_OPTIONAL)) return mc_kernel_param_value(&p->job, key, out, diag);
  return 1;
}

static void probe_close(struct scn_probe *sp)
{
  struct probe *p = (struct probe *)sp;
  mc_kernel_release(&p->job);
  free(p);
}

const struct scn_kind scn__kind_kernel = {
    .name = "kernel",
    .desc = "one operator kernel on the chip (a kernel section): time, achieved FLOP/s, GM traffic, pipes, "
            "bottleneck",
    .sections = sections,
    .detect = detect,
    .load = load,
    .run = run,
    .columns = mc_kernel_columns,
    .row = row,
    .json = json,
    .text = text,
    .html = html,
    .set_display = set_display,
    .release = release,
    .probe_open = probe_open,
    .probe_finish = probe_finish,
    .probe_number = probe_number,
    .probe_close = probe_close,
};
