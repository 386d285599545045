/*
 * probe.c - the collectives an engine's costs need, timed on the cluster's platform in a
 * fork()ed child, so the process that costs and schedules never starts SimGrid (one engine per
 * process) and can run the probe and training replays in turn.
 *
 * Each collective is timed alone on its group's links, as the training replay memoises its TP
 * collectives: an engine's TP all-reduces on the HCCS / NVLink of its server, an all-to-allv
 * with a byte matrix (the RL weight sync) over every rank of its group, contending on the real
 * topology.
 */
#include "serve/infer.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "interconnect/run.h"
#include "workloads/isolate.h"

struct probe_ctx {
  const struct arch_system *sys;
  int ranks;
  const struct sv_colls *c;
  const struct sv_group *g;
  int ng;
};

struct probe_record {
  int rc;
  struct npu_diag d;
  double time_s[]; /* per collective */
};

/* vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py and
 * csrc/custom_all_reduce.cuh, 2024): taken for 2, 4, 6 or 8 GPUs of one server on NVLink under
 * 8 MiB (_MAX_CAR_SIZE); one-shot (cross_device_reduce_1stage) on 2 GPUs, on up to 4 under
 * 512 KiB and up to 8 under 256 KiB, else two-shot (reduce-scatter then all-gather through the
 * peers' buffers). IC_ALGO_AUTO where it is not taken: NCCL's (or HCCL's) own choice; *oneshot
 * the one-shot form. */
static enum ic_algo engine_allreduce(const struct ic_topo *t, const struct sv_group *g, double bytes, bool *oneshot)
{
  int n = g->size, per = ic_topo_devices_per_node(t);
  bool one_server = g->first / per == (g->first + (n - 1) * g->stride) / per;
  *oneshot = false;
  if (!g->custom_allreduce || ic_topo_hccl(t) || !one_server || (n != 2 && n != 4 && n != 6 && n != 8) ||
      !(bytes < 8.0 * 1024 * 1024))
    return IC_ALGO_AUTO;
  *oneshot = n == 2 || (n <= 4 && bytes < 512.0 * 1024) || bytes < 256.0 * 1024;
  return IC_ALGO_MESH;
}

static void probe_child(void *arg, void *record)
{
  const struct probe_ctx *a = arg;
  struct probe_record *out = record;
  const struct sv_colls *c = a->c;
  struct npu_diag *diag = &out->d;
  npu_diag_clear(diag);
  struct ic_params prm;
  ic_params_default(&prm, a->sys);
  struct ic_sim *sim = NULL;
  struct ic_comm *comm = npu_xcalloc((size_t)a->ng, sizeof *comm);
  struct ic_run *runs = npu_xcalloc((size_t)c->n, sizeof *runs);
  int rc = ic_sim_create(&sim, a->sys, a->ranks, &prm, diag);
  for (int i = 0; !rc && i < a->ng; i++)
    if (a->g[i].size > 0)
      rc = ic_comm_init_range(&comm[i], a->g[i].first, a->g[i].size, a->g[i].stride, ic_sim_topo(sim), a->g[i].key,
                              diag);
  for (int i = 0; !rc && i < c->n; i++) {
    NPU_ASSERT(c->v[i].group >= 0 && c->v[i].group < a->ng);
    runs[i].comm = &comm[c->v[i].group];
    runs[i].coll.op = c->v[i].op;
    const struct sv_group *g = &a->g[c->v[i].group];
    runs[i].coll.algo = c->v[i].op == IC_OP_ALLREDUCE
                            ? engine_allreduce(ic_sim_topo(sim), g, c->v[i].bytes, &runs[i].coll.oneshot)
                            : IC_ALGO_AUTO;
    runs[i].coll.fidelity = IC_FIDELITY_BULK;
    runs[i].coll.bytes = c->v[i].bytes;
    runs[i].coll.matrix = c->v[i].op == IC_OP_ALLTOALLV ? c->matrix : NULL;
    runs[i].group = i;
  }
  if (!rc && c->n) rc = ic_sim_run(sim, runs, c->n, diag);
  for (int i = 0; !rc && i < c->n; i++) out->time_s[i] = runs[i].result.time_s;
  out->rc = rc;
  free(runs);
  for (int i = 0; i < a->ng; i++) ic_comm_release(&comm[i]);
  free(comm);
  ic_sim_destroy(sim);
}

int sv_probe(const struct arch_system *sys, int ranks, struct sv_colls *c, const struct sv_group *groups, int ngroups,
             const char *path, struct npu_diag *diag)
{
  if (!c->n) return 0;
  struct probe_ctx a = {sys, ranks, c, groups, ngroups};
  size_t size = sizeof(struct probe_record) + (size_t)c->n * sizeof(double);
  struct probe_record *r = npu_xcalloc(1, size);
  int rc = wl_isolate(probe_child, &a, r, size, path, diag);
  if (!rc) {
    rc = r->rc;
    if (rc) *diag = r->d;
    for (int i = 0; !rc && i < c->n; i++) c->v[i].time_s = r->time_s[i];
  }
  free(r);
  return rc;
}
