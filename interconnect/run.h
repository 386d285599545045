/*
 * run.h - the blocking convenience for the CLI, tests and benchmarks: generate the platform of
 * a cluster, start the process's engine on it, and run batches of collectives to completion
 * from one actor (exec.h). Collectives of one group start together and share links; groups
 * run one after another.
 */
#ifndef NPUSIM_INTERCONNECT_RUN_H
#define NPUSIM_INTERCONNECT_RUN_H

#include "interconnect/exec.h"
#include "interconnect/platform.h"

struct ic_sim;

/* One collective of a batch. */
struct ic_run {
  const struct ic_comm *comm; /* borrowed */
  struct ic_coll coll;
  int group;                  /* groups run in increasing order; a group's runs start together */
  struct ic_result result;    /* filled by ic_sim_run */
};

/*
 * Build the topology of nranks ranks of sys (no engine yet). sys and p are borrowed for the
 * life of the sim. Returns 0, or NPU_EINVAL with diag (key "ranks").
 */
int ic_sim_create(struct ic_sim **out, const struct arch_system *sys, int nranks,
                  const struct ic_params *p, struct npu_diag *diag);

/*
 * Generate the platform and start the process's one engine on it (ic_sim_run does it on its
 * first call). Returns 0 or NPU_EIO with diag.
 */
int ic_sim_start_engine(struct ic_sim *s, struct npu_diag *diag);
void ic_sim_destroy(struct ic_sim *s);

const struct ic_topo *ic_sim_topo(const struct ic_sim *s);
const struct ic_platform_stats *ic_sim_platform_stats(const struct ic_sim *s);

/* Plan every run without simulating: 0, or the first run's error in diag. */
int ic_sim_check(const struct ic_sim *s, const struct ic_run *runs, int n, struct npu_diag *diag);

/*
 * Check, start the engine if needed, then simulate the n runs (group by group) and fill their
 * results. Returns 0 or the check's error. May be called again: a later batch starts where
 * the previous one ended.
 */
int ic_sim_run(struct ic_sim *s, struct ic_run *runs, int n, struct npu_diag *diag);

#endif
