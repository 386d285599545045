/*
 * sections.c - the configuration section groups more than one kind registers: the system
 * (arch/), and a training job's model, plan, routing and run sections (workloads/).
 */
#include "scenario/scenario_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/job.h"
#include "workloads/model.h"
#include "workloads/plan.h"
#include "workloads/routing.h"

static void *system_add(struct npu_cfg *cfg)
{
  struct arch_system *sys = npu_xcalloc(1, sizeof *sys);
  arch_register(cfg, sys);
  return sys;
}

const struct scn_section scn__section_system = {"system", system_add, free};

struct training {
  struct wl_model model;
  struct wl_plan plan;
  struct wl_routing_cfg routing;
  struct wl_run run;
};

static void *training_add(struct npu_cfg *cfg)
{
  struct training *t = npu_xcalloc(1, sizeof *t);
  wl_model_register(cfg, &t->model);
  wl_plan_register(cfg, &t->plan);
  wl_routing_register(cfg, &t->routing);
  wl_run_register(cfg, &t->run);
  return t;
}

static void training_release(void *v)
{
  struct training *t = v;
  if (!t) return;
  wl_routing_release(&t->routing);
  free(t);
}

const struct scn_section scn__section_training = {"training", training_add, training_release};

#define MAX_GROUPS 8

struct group_probe {
  struct scn_probe base; /* first */
  const struct scn_section *const *groups;
  void *values[MAX_GROUPS]; /* what each group's add returned; the system's first */
};

static void group_probe_free(struct group_probe *p)
{
  npu_cfg_destroy(p->base.cfg);
  for (int i = 0; p->groups[i]; i++)
    if (p->groups[i]->release) p->groups[i]->release(p->values[i]);
  free(p);
}

struct scn_probe *scn__probe_open(const struct scn_section *const *groups, const char *first, const char *path,
                                  const char *const *sets, int nsets, struct npu_diag *diag)
{
  NPU_ASSERT(groups[0] == &scn__section_system);
  struct group_probe *p = npu_xcalloc(1, sizeof *p);
  p->groups = groups;
  p->base.cfg = npu_cfg_create();
  npu_cfg_set_display_root(p->base.cfg, arch_source_root());
  for (int i = 0; groups[i]; i++) {
    NPU_ASSERT(i < MAX_GROUPS);
    p->values[i] = groups[i]->add(p->base.cfg);
  }
  int rc = first ? npu_cfg_set(p->base.cfg, first, diag) : 0;
  if (!rc) rc = scn__cfg_load(p->base.cfg, path, sets, nsets, diag);
  if (rc) {
    group_probe_free(p);
    return NULL;
  }
  return &p->base;
}

int scn__probe_finish(struct scn_probe *sp, struct npu_diag *diag)
{
  struct group_probe *p = (struct group_probe *)sp;
  struct arch_system *sys = p->values[0];
  int rc = npu_cfg_finish(sp->cfg, diag);
  if (!rc) rc = arch_finish(sp->cfg, sys, diag);
  sp->sys = sys;
  return rc;
}

int scn__probe_number(struct scn_probe *p, const char *key, double *out, struct npu_diag *diag)
{
  (void)diag;
  if (strcmp(key, "devices")) return 1;
  *out = wl_system_devices(p->sys);
  return 0;
}

void scn__probe_close(struct scn_probe *p)
{
  group_probe_free((struct group_probe *)p);
}

int scn__cfg_load(struct npu_cfg *cfg, const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  int rc = npu_cfg_load_file(cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(cfg, sets[i], diag);
  return rc;
}
