/* run.c - platform + engine + one driving actor for batches of collectives; see run.h. */
#include "interconnect/run.h"

#include <stdlib.h>

#include "common/err.h"

struct ic_sim {
  struct ic_topo *topo;
  const struct ic_params *prm;
  struct ic_platform_stats stats;
  bool started;
};

int ic_sim_create(struct ic_sim **out, const struct arch_system *sys, int nranks,
                  const struct ic_params *p, struct npu_diag *diag)
{
  *out = NULL;
  struct ic_topo *t;
  int rc = ic_topo_create(&t, sys, nranks, diag);
  if (rc) return rc;
  struct ic_sim *s = npu_xcalloc(1, sizeof *s);
  s->topo = t;
  s->prm = p;
  *out = s;
  return 0;
}

int ic_sim_start_engine(struct ic_sim *s, struct npu_diag *diag)
{
  if (s->started) return 0;
  struct npu_buf xml = {0};
  ic_platform_xml(s->topo, &xml, &s->stats);
  int rc = npu_engine_init(npu_buf_str(&xml), diag);
  npu_buf_release(&xml);
  s->started = rc == 0;
  return rc;
}

void ic_sim_destroy(struct ic_sim *s)
{
  if (!s) return;
  ic_topo_destroy(s->topo);
  free(s);
}

const struct ic_topo *ic_sim_topo(const struct ic_sim *s) { return s->topo; }

const struct ic_platform_stats *ic_sim_platform_stats(const struct ic_sim *s) { return &s->stats; }

int ic_sim_check(const struct ic_sim *s, const struct ic_run *runs, int n, struct npu_diag *diag)
{
  for (int i = 0; i < n; i++) {
    struct ic_plan plan;
    int rc = ic_plan_make(&plan, s->topo, runs[i].comm, &runs[i].coll, s->prm, diag);
    if (rc) return rc;
  }
  return 0;
}

struct batch {
  struct ic_sim *sim;
  struct ic_run *runs;
  int n;
};

static void driver(void *arg)
{
  struct batch *b = arg;
  struct ic_exec *x = ic_exec_create(b->sim->topo, b->sim->prm);
  int *ids = npu_xmalloc((size_t)b->n * sizeof *ids);
  int group = -1;
  for (;;) {
    /* the next group: the smallest group number above the last one run */
    int next = -1;
    for (int i = 0; i < b->n; i++)
      if (b->runs[i].group > group && (next < 0 || b->runs[i].group < next))
        next = b->runs[i].group;
    if (next < 0) break;
    group = next;
    double now = npu_engine_clock();
    for (int i = 0; i < b->n; i++) {
      if (b->runs[i].group != group) continue;
      struct npu_diag d;
      ids[i] = ic_exec_start(x, b->runs[i].comm, &b->runs[i].coll, &d);
      NPU_ASSERT(ids[i] >= 0); /* checked before the engine ran */
      ic_exec_join_all(x, ids[i], now);
    }
    ic_exec_run(x);
    for (int i = 0; i < b->n; i++) {
      if (b->runs[i].group != group) continue;
      NPU_ASSERT(ic_exec_done(x, ids[i]));
      ic_exec_result(x, ids[i], &b->runs[i].result);
      ic_exec_release(x, ids[i]);
    }
  }
  free(ids);
  ic_exec_destroy(x);
}

int ic_sim_run(struct ic_sim *s, struct ic_run *runs, int n, struct npu_diag *diag)
{
  int rc = ic_sim_check(s, runs, n, diag);
  if (rc == 0) rc = ic_sim_start_engine(s, diag);
  if (rc) return rc;
  struct batch b = {s, runs, n};
  npu_engine_spawn("collectives", npu_engine_host("r0"), driver, &b);
  npu_engine_run();
  return 0;
}
