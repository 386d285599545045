/*
 * replay_p2p.c - the replay's pipeline transfers: the activations (forward) and gradients
 * (backward) a replay rank sends across a model-chunk boundary to the stage that runs the next
 * chunk, for one micro-batch. One job: put each transfer on the network when its sender posts
 * it and tell the receiver when it has arrived.
 *
 * A transfer stands for every TP rank of the sending stage sending its share (T h / t bytes) to
 * its counterpart: one SEND per TP rank on the interconnect executor, over 2-rank communicators
 * kept per (boundary, direction, TP rank, EP index) and reused by every micro-batch (the route
 * cache; DualPipe, whose chunks run both ways, rebuilds one when the direction turns). With
 * run.network = formula a transfer is a closed form instead: the TP ranks' sends side by side,
 * as one alone on its route, starting when the sender posts it (the receiver is woken at its
 * end). The state machine (replay.c) decides when to post and wait; nothing here counts time.
 */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdlib.h>

#include "common/err.h"
#include "engine/engine.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/topo.h"

#define EPS 1e-12

void wl__p2p_init(struct wl__replay *r)
{
  r->p2p = npu_xcalloc((size_t)2 * (size_t)(r->mchunks > 1 ? r->mchunks - 1 : 1) * (size_t)r->mb * (size_t)r->E,
                       sizeof *r->p2p);
  r->pair = npu_xcalloc((size_t)2 * (size_t)r->mchunks * (size_t)r->job->plan.etp * (size_t)r->E, sizeof *r->pair);
}

void wl__p2p_release(struct wl__replay *r)
{
  const struct wl_plan *p = &r->job->plan;
  if (r->pair)
    for (size_t i = 0; i < (size_t)2 * (size_t)r->mchunks * (size_t)p->etp * (size_t)r->E; i++)
      if (r->pair[i].size) ic_comm_release(&r->pair[i]);
  free(r->pair);
  free(r->p2p);
  r->pair = NULL;
  r->p2p = NULL;
}

/* run.network = formula: one transfer of `bytes` from a to b alone on its route. */
static double transfer_s(const struct wl__replay *r, int a, int b, double bytes)
{
  enum ic_class cl = ic_topo_class(r->topo, a, b);
  return r->icp.task_overhead_s + ic_topo_latency_s(r->topo, a, b) +
         bytes / (ic_topo_class_bw(r->topo, cl) * ic_topo_link_scale(r->topo, cl, bytes, true));
}

/* Each EP index has its own transfers: replay rank (s, e) sends for the ranks of expert grid
 * points (et, e, 0), et < etp (with etp = tp the TP group at dp coordinate e; a dense plan's
 * etp is tp), and stands for their expert data-parallel replicas, whose pipeline neighbours
 * have the same coordinates. */
struct wl__p2p *wl__p2p_get(struct wl__replay *r, int i, int e)
{
  struct wl__p2p *p = &r->p2p[(size_t)i * (size_t)r->E + (size_t)e];
  if (p->n != 0 || r->rc) return p;
  const struct wl_job *j = r->job;
  int per = (r->mchunks - 1) * r->mb, dir = i / per, b = i % per / r->mb, mb = i % r->mb;
  int from = wl__stage_of(r->prog, dir ? b + 1 : b, mb), to = wl__stage_of(r->prog, dir ? b : b + 1, mb);
  int t = j->plan.etp;
  /* each TP rank sends its share: T h / tp (sequence parallel, or Megatron's scatter-gather) */
  double bytes = (double)j->plan.micro_batch * (j->model.seq_len / j->plan.cp) * j->model.hidden * 2.0 / j->plan.tp;
  p->first_id = -1;
  p->send_s = p->recv_s = NAN;
  if (wl__formula(r)) { /* the TP ranks' transfers side by side: as one, alone on its route */
    p->formula_s = transfer_s(r, wl_plan_expert_rank(&j->plan, from, 0, e, 0), wl_plan_expert_rank(&j->plan, to, 0, e, 0),
                              bytes);
    p->to_idx = to * r->E + e;
    p->n = -1;
    return p;
  }
  for (int k = 0; k < t; k++) {
    struct ic_comm *c = &r->pair[(((size_t)b * 2 + (size_t)dir) * (size_t)t + (size_t)k) * (size_t)r->E + (size_t)e];
    int a = wl_plan_expert_rank(&j->plan, from, k, e, 0), z = wl_plan_expert_rank(&j->plan, to, k, e, 0);
    if (c->size && (c->ranks[0] != a || c->ranks[1] != z)) ic_comm_release(c); /* DualPipe: the other direction */
    if (!c->size) {
      int ranks[2] = {a, z};
      int rc = ic_comm_init(c, ranks, 2, r->topo, "plan.pp", r->diag);
      if (rc) {
        r->rc = rc;
        return p;
      }
    }
    int id = wl__start_coll(r, c, IC_OP_SEND, bytes, NULL);
    if (id < 0) return p;
    if (p->first_id < 0) p->first_id = id;
    NPU_ASSERT(id == p->first_id + k);
  }
  p->n = t;
  p->send_s = NAN;
  return p;
}

void wl__p2p_join(struct wl__replay *r, struct wl__p2p *p, int side, double t)
{
  for (int i = 0; i < p->n; i++) ic_exec_join(r->x, p->first_id + i, side, t);
  if (p->n < 0 && side == 0) { /* eager: starts when the sender posts it */
    p->done_s = t + p->formula_s;
    wl__wake_at(r, p->to_idx, p->done_s);
  }
  if (side == 0) p->send_s = t;
  else p->recv_s = t;
}

double wl__p2p_span_s(const struct wl__p2p *p, double end)
{
  double start = p->send_s;
  if (p->n >= 0 && !isnan(p->recv_s) && p->recv_s > start) start = p->recv_s;
  return end > start ? end - start : 0;
}

bool wl__p2p_done(struct wl__replay *r, struct wl__p2p *p, double *end)
{
  if (p->done) {
    *end = p->done_s;
    return true;
  }
  if (p->n < 0) { /* formula: known once the sender posted it */
    if (isnan(p->send_s) || npu_engine_clock() + EPS < p->done_s) return false;
    p->done = true;
    *end = p->done_s;
    return true;
  }
  double e = 0;
  for (int i = 0; i < p->n; i++) {
    if (!ic_exec_done(r->x, p->first_id + i)) return false;
    double ri = ic_exec_rank_end_s(r->x, p->first_id + i, 1);
    if (ri > e) e = ri;
  }
  for (int i = 0; i < p->n; i++) ic_exec_release(r->x, p->first_id + i);
  p->done = true;
  p->done_s = e;
  *end = e;
  return true;
}
