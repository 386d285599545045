/*
 * job.c - what is common to kernel and collective scenarios: their sections for a shared loader
 * (the scenario layer tells kinds apart from the parsed configuration), the system's name.
 */
#include "micro/micro.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"
#include "micro/micro_int.h"

struct mc_tables {
  struct mc_kernel_spec kernel;
  struct mc_kparams *kp;
  struct mc_coll_spec coll;
};

struct mc_tables *mc_kernel_tables_register(struct npu_cfg *cfg)
{
  struct mc_tables *t = npu_xcalloc(1, sizeof *t);
  mc__kernel_register(cfg, &t->kernel, &t->kp);
  return t;
}

struct mc_tables *mc_coll_tables_register(struct npu_cfg *cfg)
{
  struct mc_tables *t = npu_xcalloc(1, sizeof *t);
  mc__coll_register(cfg, &t->coll);
  return t;
}

void mc_tables_destroy(struct mc_tables *t)
{
  if (!t) return;
  mc__kernel_unregister(t->kp);
  free(t);
}

const char *mc_system_name(const struct arch_system *sys)
{
  if (sys->has_cluster && sys->cluster.name[0]) return sys->cluster.name;
  if (sys->has_node && sys->node.name[0]) return sys->node.name;
  return sys->chip.name;
}
