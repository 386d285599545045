/*
 * probe.c - the collectives of an iteration timed on the cluster's platform, and the
 * fork()ed child that runs anything needing a SimGrid engine (one engine per process: the
 * parent never starts one, so it can fork a training replay and this probe in turn).
 *
 * TP collectives of the inference engines are timed alone on their group's links, as the
 * training replay memoises its TP collectives; the weight synchronisation is one all-to-allv
 * over every rank with the byte matrix of reshard.c, so its flows contend on the real topology
 * (HCCS / NVLink inside a server, the scale-out network between the pools).
 */
#include "rl/rl_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fdio.h"
#include "workloads/isolate.h"
#include "interconnect/run.h"

int rl__coll(struct rl_colls *c, enum ic_op op, double bytes, int group)
{
  for (int i = 0; i < c->n; i++)
    if (c->v[i].op == op && c->v[i].bytes == bytes && c->v[i].group == group) return i;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 16;
    c->v = npu_xrealloc(c->v, (size_t)c->cap * sizeof *c->v);
  }
  c->v[c->n] = (struct rl_coll){op, bytes, group, 0};
  return c->n++;
}

void rl__colls_release(struct rl_colls *c)
{
  free(c->v);
  memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------------ fork */

/* What a forked call sends back: its status, its diagnostic, then its output. */
struct fork_call {
  int (*fn)(void *arg, void *out, struct npu_diag *diag);
  void *arg;
  size_t size;
};

struct fork_record {
  int rc;
  struct npu_diag d;
  unsigned char out[]; /* size bytes */
};

static void fork_child(void *ctx, void *record)
{
  const struct fork_call *c = ctx;
  struct fork_record *r = record;
  npu_diag_clear(&r->d);
  r->rc = c->fn(c->arg, r->out, &r->d);
}

int rl__fork(int (*fn)(void *arg, void *out, struct npu_diag *diag), void *arg, void *out, size_t size,
             struct npu_diag *diag)
{
  struct fork_call c = {fn, arg, size};
  size_t n = sizeof(struct fork_record) + size;
  struct fork_record *r = npu_xcalloc(1, n);
  int rc = wl_isolate(fork_child, &c, r, n, "a simulation child", diag);
  if (!rc) {
    rc = r->rc;
    if (rc) *diag = r->d;
    else memcpy(out, r->out, size);
  }
  free(r);
  return rc;
}

/* ------------------------------------------------------------------ probe */

struct probe_arg {
  const struct rl_job *job;
  const struct rl_colls *c;
};

static int probe_child(void *arg, void *out, struct npu_diag *diag)
{
  const struct probe_arg *a = arg;
  const struct rl_job *job = a->job;
  const struct rl_colls *c = a->c;
  double *times = out;
  struct ic_params prm;
  ic_params_default(&prm, &job->sys);
  struct ic_sim *sim = NULL;
  struct ic_comm comm[3];
  memset(comm, 0, sizeof comm);
  struct ic_run *runs = npu_xcalloc((size_t)c->n, sizeof *runs);
  int rc = ic_sim_create(&sim, &job->sys, job->devices, &prm, diag);
  if (!rc) {
    const struct ic_topo *t = ic_sim_topo(sim);
    rc = ic_comm_init_range(&comm[RL_GROUP_ROLLOUT_TP], job->rollout_first, job->spec.rollout.tp, 1, t,
                            "rl.rollout.tp", diag);
    if (!rc)
      rc = ic_comm_init_range(&comm[RL_GROUP_TRAIN_TP], job->train_first, job->plan.tp, 1, t, "plan.tp", diag);
    if (!rc)
      rc = ic_comm_init_range(&comm[RL_GROUP_ALL], 0, c->matrix_ranks > 0 ? c->matrix_ranks : job->devices, 1, t,
                              "rl.placement", diag);
  }
  for (int i = 0; !rc && i < c->n; i++) {
    runs[i].comm = &comm[c->v[i].group];
    runs[i].coll.op = c->v[i].op;
    runs[i].coll.algo = IC_ALGO_AUTO;
    runs[i].coll.fidelity = IC_FIDELITY_BULK;
    runs[i].coll.bytes = c->v[i].bytes;
    runs[i].coll.matrix = c->v[i].op == IC_OP_ALLTOALLV ? c->matrix : NULL;
    runs[i].group = i;
  }
  if (!rc && c->n) rc = ic_sim_run(sim, runs, c->n, diag);
  for (int i = 0; !rc && i < c->n; i++) times[i] = runs[i].result.time_s;
  free(runs);
  for (int i = 0; i < 3; i++) ic_comm_release(&comm[i]);
  ic_sim_destroy(sim);
  return rc;
}

int rl__probe(const struct rl_job *job, struct rl_colls *c, struct npu_diag *diag)
{
  if (!c->n) return 0;
  double *times = npu_xcalloc((size_t)c->n, sizeof *times);
  struct probe_arg a = {job, c};
  int rc = rl__fork(probe_child, &a, times, (size_t)c->n * sizeof *times, diag);
  for (int i = 0; !rc && i < c->n; i++) c->v[i].time_s = times[i];
  free(times);
  return rc;
}
