/*
 * replay.c - a training step on the cluster: one SimGrid actor drives every pipeline stage's
 * program (workloads/schedule.h) as a state machine over simulated time.
 *
 * A stage runs the slots of its schedule in order. A slot (a micro-batch's forward or backward
 * through one model chunk) first waits for its input from the neighbouring stage, then keeps
 * the compute stream busy for the sum of its segments (expand.c: kernels from the cost cache
 * and memoised TP collectives), then posts its output to the next stage. Transfers and data-
 * parallel collectives are instances of the interconnect executor (interconnect/exec.h): their
 * flows share the platform's links with everything else in flight. At the end a stage waits
 * for its gradient reductions, runs the optimizer, and (ZeRO >= 1) gathers its parameters.
 *
 * Time a stage spends waiting for an input is split into bubble (the sender had not finished
 * yet) and exposed pipeline communication (the transfer itself); waiting for gradient buckets
 * and parameter gathers is exposed DP communication; the rest up to the slowest stage's end is
 * idle. Compute categories come from the segments.
 */
#include "workloads/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arch/derived.h"
#include "common/err.h"
#include "engine/engine.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/platform.h"
#include "interconnect/topo.h"
#include "ops/cost_cache.h"
#include "workloads/expand.h"
#include "workloads/schedule.h"

#define EPS 1e-12

enum st_state { ST_READY, ST_WAIT_RECV, ST_RUN, ST_WAIT_GATHER, ST_WAIT_DP, ST_OPT, ST_WAIT_AG, ST_DONE };

/* One pipeline transfer (all TP ranks of a stage to their counterparts). */
struct p2p {
  int first_id, n;       /* executor instances first_id .. first_id + n - 1; n = 0: not created */
  double send_s, recv_s; /* when the sender and the receiver joined (NAN: not yet) */
  bool done;
  double done_s;
};

struct stage {
  int s;
  struct wl_slot *prog;
  size_t n, pc;
  enum st_state st;
  double since;          /* when the current wait began */
  double run_end;
  int wait;              /* p2p index waited on */
  bool recv_ok;          /* the current slot's input has arrived */
  int *ids;              /* DP instances posted (gradient buckets), then the parameter gathers */
  int nids, capids;
  double bucket_acc;     /* parameters of the current chunk not yet in a bucket */
  struct ic_comm *dpc;   /* the stage's DP groups, one per (tp, cp) */
  int ndpc;
  /* ZeRO-3: the current slot as pieces (embedding, layers, head), each waiting for its
   * parameters' all-gather, which starts when the piece before it starts (prefetch) */
  struct piece { const struct wl_seg *seg; double params; int gather; } *pcs;
  int npcs, pk, cap_pcs;
  bool bwd;              /* the current slot is a backward */
  bool last_mb;          /* ... of the last micro-batch (its gradients are reduced) */
  struct wl_stage_result *res;
};

struct rp {
  struct wl_job *job;
  struct wl_result *res;
  struct npu_trace *trace;
  struct ic_topo *topo;
  struct ic_params icp;
  struct ic_exec *x;
  struct stage *st;
  int pp, chunks, mchunks, mb;
  struct p2p *p2p;       /* [dir][boundary][mb] */
  struct ic_comm *pair;  /* [boundary][tp]: 2-rank communicators for sends, built on demand */
  int rc;
  struct npu_diag *diag;
};

/* ------------------------------------------------------------------ geometry */

static int stage_of(const struct rp *r, int model_chunk)
{
  return model_chunk % r->pp;
}

static int phys_rank(const struct rp *r, int stage, int tp, int cp, int dp)
{
  struct wl_coord c = {{0}};
  c.c[WL_DIM_TP] = tp;
  c.c[WL_DIM_CP] = cp;
  c.c[WL_DIM_DP] = dp;
  c.c[WL_DIM_PP] = stage;
  return wl_plan_rank(&r->job->plan, &c);
}

static struct p2p *p2p_at(struct rp *r, int dir, int boundary, int mb)
{
  return &r->p2p[((size_t)dir * (size_t)(r->mchunks - 1) + (size_t)boundary) * (size_t)r->mb + (size_t)mb];
}

/* ------------------------------------------------------------------ communication */

static int start_coll(struct rp *r, const struct ic_comm *c, enum ic_op op, double bytes, int root)
{
  struct ic_coll coll = {.op = op, .algo = IC_ALGO_AUTO, .fidelity = (enum ic_fidelity)r->job->run.coll_fidelity,
                         .bytes = bytes, .root = root};
  int id = ic_exec_start(r->x, c, &coll, r->diag);
  if (id < 0 && !r->rc) r->rc = id;
  if (id >= 0) r->res->collectives++;
  return id;
}

/* The transfer over boundary b (model chunks b -> b+1 forward, b+1 -> b backward). */
static struct p2p *p2p_get(struct rp *r, int dir, int b, int mb)
{
  struct p2p *p = p2p_at(r, dir, b, mb);
  if (p->n || r->rc) return p;
  const struct wl_job *j = r->job;
  int from = stage_of(r, dir ? b + 1 : b), to = stage_of(r, dir ? b : b + 1), t = j->plan.tp;
  /* each TP rank sends its share: T h / t (sequence parallel, or Megatron's scatter-gather) */
  double bytes = (double)j->plan.micro_batch * (j->model.seq_len / j->plan.cp) * j->model.hidden * 2.0 / t;
  p->first_id = -1;
  for (int i = 0; i < t; i++) {
    struct ic_comm *c = &r->pair[((size_t)b * 2 + (size_t)dir) * (size_t)t + (size_t)i];
    if (!c->size) {
      int ranks[2] = {phys_rank(r, from, i, 0, 0), phys_rank(r, to, i, 0, 0)};
      int rc = ic_comm_init(c, ranks, 2, r->topo, "plan.pp", r->diag);
      if (rc) {
        r->rc = rc;
        return p;
      }
    }
    int id = start_coll(r, c, IC_OP_SEND, bytes, 0);
    if (id < 0) return p;
    if (p->first_id < 0) p->first_id = id;
    NPU_ASSERT(id == p->first_id + i);
  }
  p->n = t;
  p->send_s = p->recv_s = NAN;
  return p;
}

static void p2p_join(struct rp *r, struct p2p *p, int side, double t)
{
  for (int i = 0; i < p->n; i++) ic_exec_join(r->x, p->first_id + i, side, t);
  if (side == 0) p->send_s = t;
  else p->recv_s = t;
}

static bool p2p_done(struct rp *r, struct p2p *p, double *end)
{
  if (p->done) {
    *end = p->done_s;
    return true;
  }
  double e = 0;
  for (int i = 0; i < p->n; i++) {
    if (!ic_exec_done(r->x, p->first_id + i)) return false;
    double ri = ic_exec_rank_end_s(r->x, p->first_id + i, 1);
    if (ri > e) e = ri;
  }
  for (int i = 0; i < p->n; i++) ic_exec_release(r->x, p->first_id + i); /* free its schedule */
  p->done = true;
  p->done_s = e;
  *end = e;
  return true;
}

static void post_dp(struct rp *r, struct stage *st, enum ic_op op, double bytes, double t)
{
  if (r->job->plan.dp * r->job->plan.cp < 2 || bytes <= 0) return;
  for (int g = 0; g < st->ndpc; g++) {
    int id = start_coll(r, &st->dpc[g], op, bytes, 0);
    if (id < 0) return;
    ic_exec_join_all(r->x, id, t);
    if (st->nids == st->capids) {
      st->capids = st->capids ? 2 * st->capids : 16;
      st->ids = npu_xrealloc(st->ids, (size_t)st->capids * sizeof *st->ids);
    }
    st->ids[st->nids++] = id;
  }
  if (r->trace) npu_trace_add(r->trace, st->s, 2, op == IC_OP_ALLGATHER ? "param gather" : "grad bucket", t, 0);
}

static bool dp_done(struct rp *r, struct stage *st)
{
  for (int i = 0; i < st->nids; i++)
    if (!ic_exec_done(r->x, st->ids[i])) return false;
  for (int i = 0; i < st->nids; i++) ic_exec_release(r->x, st->ids[i]);
  st->nids = 0;
  return true;
}

/* A gradient bucket of n parameters (fp32 gradients, Megatron's main_grad). */
static void post_bucket(struct rp *r, struct stage *st, double n, double t)
{
  post_dp(r, st, r->job->plan.zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE, n * 4, t);
}

/* ZeRO-3: all-gather a piece's parameters (the training type) over every DP group of the stage;
 * returns the first instance id (the groups' instances are consecutive), or -1. */
static int gather_params(struct rp *r, struct stage *st, double params, double t)
{
  int first = -1;
  for (int g = 0; g < st->ndpc; g++) {
    int id = start_coll(r, &st->dpc[g], IC_OP_ALLGATHER, params * 2, 0);
    if (id < 0) return -1;
    ic_exec_join_all(r->x, id, t);
    if (first < 0) first = id;
  }
  return first;
}

static bool gathered(struct rp *r, const struct stage *st, int first)
{
  if (first < 0) return true;
  for (int g = 0; g < st->ndpc; g++)
    if (!ic_exec_done(r->x, first + g)) return false;
  return true;
}

static void release_gather(struct rp *r, const struct stage *st, int first)
{
  if (first >= 0)
    for (int g = 0; g < st->ndpc; g++) ic_exec_release(r->x, first + g);
}

static bool zero3(const struct rp *r)
{
  return r->job->plan.zero >= 3 && r->job->plan.dp * r->job->plan.cp > 1;
}

/* ------------------------------------------------------------------ slots */

static const char *slot_name(const struct wl_slot *sl)
{
  static const char *const names[] = {"F", "B", "Bi", "W"};
  return names[sl->phase];
}

static void add_seg(struct stage *st, const struct wl_seg *sg, double *t)
{
  for (int c = 0; c < WL_CAT_COUNT; c++) st->res->cat_s[c] += sg->cat_s[c];
  st->res->flops += sg->flops;
  st->res->model_flops += sg->model_flops;
  *t += sg->time_s;
}

static void add_piece(struct stage *st, const struct wl_seg *sg, double params)
{
  if (st->npcs == st->cap_pcs) {
    st->cap_pcs = st->cap_pcs ? 2 * st->cap_pcs : 16;
    st->pcs = npu_xrealloc(st->pcs, (size_t)st->cap_pcs * sizeof *st->pcs);
  }
  st->pcs[st->npcs++] = (struct piece){sg, params, -1};
}

/* ZeRO-3: start piece pk at now if its parameters have arrived, gathering the next piece's. */
static void start_piece(struct rp *r, struct stage *st, double now)
{
  struct piece *pc = &st->pcs[st->pk];
  if (!gathered(r, st, pc->gather)) {
    st->since = now;
    st->st = ST_WAIT_GATHER;
    return;
  }
  release_gather(r, st, pc->gather);
  pc->gather = -1;
  if (st->pk + 1 < st->npcs) st->pcs[st->pk + 1].gather = gather_params(r, st, st->pcs[st->pk + 1].params, now);
  double t = now;
  add_seg(st, pc->seg, &t);
  if (r->trace) npu_trace_add(r->trace, st->s, 0, st->bwd ? "B" : "F", now, t - now);
  st->run_end = t;
  st->st = ST_RUN;
}

/* ZeRO-3: the slot as pieces, the first one's gather started now. */
static void start_slot_zero3(struct rp *r, struct stage *st, double now, bool first, bool last, int layers)
{
  const struct wl_job *j = r->job;
  double emb = (double)j->model.vocab * j->model.hidden / j->plan.tp;
  st->npcs = st->pk = 0;
  if (!st->bwd) {
    if (first) add_piece(st, &j->seg[WL_SEG_EMBED_F], emb);
    for (int l = 0; l < layers; l++) add_piece(st, &j->seg[WL_SEG_LAYER_F], j->layer_params);
    if (last) add_piece(st, &j->seg[WL_SEG_HEAD_F], emb + j->model.hidden);
  } else {
    if (last) add_piece(st, &j->seg[WL_SEG_HEAD_B], emb + j->model.hidden);
    for (int l = 0; l < layers; l++) add_piece(st, &j->seg[WL_SEG_LAYER_B], j->layer_params);
    if (first) add_piece(st, &j->seg[WL_SEG_EMBED_B], emb);
  }
  st->pcs[0].gather = gather_params(r, st, st->pcs[0].params, now);
  start_piece(r, st, now);
}

/* Start slot pc at now: account its segments, post its gradient buckets, set run_end. */
static void start_slot(struct rp *r, struct stage *st, double now)
{
  const struct wl_job *j = r->job;
  const struct wl_slot *sl = &st->prog[st->pc];
  int k = wl_schedule_model_chunk((enum wl_schedule)j->plan.schedule, r->pp, j->plan.vpp, st->s, sl->chunk);
  bool first = k == 0, last = k == r->mchunks - 1, fwd = sl->phase == WL_PH_F;
  int layers = wl_plan_chunk_layers(&j->plan, j->model.layers, r->mchunks, k);
  bool bucket = !fwd && sl->mb == (uint32_t)r->mb - 1 && j->plan.overlap_grad_reduce;
  st->bwd = !fwd;
  st->last_mb = sl->mb == (uint32_t)r->mb - 1;
  if (zero3(r)) {
    start_slot_zero3(r, st, now, first, last, layers);
    return;
  }
  double t = now;
  if (fwd) {
    if (first) add_seg(st, &j->seg[WL_SEG_EMBED_F], &t);
    for (int l = 0; l < layers; l++) add_seg(st, &j->seg[WL_SEG_LAYER_F], &t);
    if (last) add_seg(st, &j->seg[WL_SEG_HEAD_F], &t);
  } else {
    double emb = (double)j->model.vocab * j->model.hidden / j->plan.tp;
    if (last) {
      add_seg(st, &j->seg[WL_SEG_HEAD_B], &t);
      st->bucket_acc += emb + j->model.hidden;
    }
    for (int l = 0; l < layers; l++) {
      add_seg(st, &j->seg[WL_SEG_LAYER_B], &t);
      st->bucket_acc += j->layer_params;
      if (bucket && st->bucket_acc >= j->plan.bucket_params) {
        post_bucket(r, st, st->bucket_acc, t);
        st->bucket_acc = 0;
      }
    }
    if (first) {
      add_seg(st, &j->seg[WL_SEG_EMBED_B], &t);
      st->bucket_acc += emb;
    }
    if (bucket && st->bucket_acc > 0) { /* the chunk's last, partial bucket */
      post_bucket(r, st, st->bucket_acc, t);
      st->bucket_acc = 0;
    }
    if (sl->mb != (uint32_t)r->mb - 1) st->bucket_acc = 0; /* count each chunk's parameters once */
  }
  if (r->trace) npu_trace_add(r->trace, st->s, 0, slot_name(sl), now, t - now);
  st->run_end = t;
  st->st = ST_RUN;
}

/* The transfer a slot waits for before it starts (NULL if none). */
static struct p2p *slot_input(struct rp *r, const struct stage *st, const struct wl_slot *sl)
{
  const struct wl_job *j = r->job;
  int k = wl_schedule_model_chunk((enum wl_schedule)j->plan.schedule, r->pp, j->plan.vpp, st->s, sl->chunk);
  if (sl->phase == WL_PH_F) return k > 0 && stage_of(r, k - 1) != st->s ? p2p_get(r, 0, k - 1, (int)sl->mb) : NULL;
  if (sl->phase == WL_PH_W) return NULL;
  return k < r->mchunks - 1 && stage_of(r, k + 1) != st->s ? p2p_get(r, 1, k, (int)sl->mb) : NULL;
}

/* The transfer a slot sends when it ends (NULL if none). */
static struct p2p *slot_output(struct rp *r, const struct stage *st, const struct wl_slot *sl)
{
  const struct wl_job *j = r->job;
  int k = wl_schedule_model_chunk((enum wl_schedule)j->plan.schedule, r->pp, j->plan.vpp, st->s, sl->chunk);
  if (sl->phase == WL_PH_F)
    return k < r->mchunks - 1 && stage_of(r, k + 1) != st->s ? p2p_get(r, 0, k, (int)sl->mb) : NULL;
  if (sl->phase == WL_PH_W) return NULL;
  return k > 0 && stage_of(r, k - 1) != st->s ? p2p_get(r, 1, k - 1, (int)sl->mb) : NULL;
}

/* ------------------------------------------------------------------ the state machine */

static void advance(struct rp *r, struct stage *st, double now)
{
  const struct wl_job *j = r->job;
  for (;;) {
    if (r->rc) return;
    switch (st->st) {
    case ST_RUN: {
      if (st->run_end > now + EPS) return;
      double t = st->run_end > now ? st->run_end : now;
      if (zero3(r)) {
        /* ZeRO-3 reduce-scatters each piece's gradients after the last micro-batch's backward */
        if (st->bwd && st->last_mb) post_bucket(r, st, st->pcs[st->pk].params, t);
        if (++st->pk < st->npcs) {
          start_piece(r, st, t);
          break;
        }
      }
      struct p2p *out = slot_output(r, st, &st->prog[st->pc]);
      if (out) p2p_join(r, out, 0, t);
      st->pc++;
      st->recv_ok = false;
      st->st = ST_READY;
      break;
    }
    case ST_READY: {
      if (st->pc == st->n) {
        if (!j->plan.overlap_grad_reduce && !zero3(r)) post_bucket(r, st, j->stage_params[st->s], now);
        st->since = now;
        st->st = ST_WAIT_DP;
        break;
      }
      const struct wl_slot *sl = &st->prog[st->pc];
      struct p2p *in = st->recv_ok ? NULL : slot_input(r, st, sl);
      if (r->rc) return;
      if (in) {
        p2p_join(r, in, 1, now);
        st->wait = (int)(in - r->p2p);
        st->since = now;
        st->st = ST_WAIT_RECV;
        break;
      }
      start_slot(r, st, now);
      break;
    }
    case ST_WAIT_RECV: {
      struct p2p *p = &r->p2p[st->wait];
      double end;
      if (!p2p_done(r, p, &end)) return;
      double sent = p->send_s > st->since ? p->send_s : st->since;
      st->res->cat_s[WL_CAT_BUBBLE] += sent - st->since;
      st->res->cat_s[WL_CAT_PP] += (end > sent ? end : sent) - sent;
      if (r->trace && now > st->since) npu_trace_add(r->trace, st->s, 1, "wait input", st->since, now - st->since);
      st->recv_ok = true;
      st->st = ST_READY;
      break;
    }
    case ST_WAIT_GATHER:
      if (!gathered(r, st, st->pcs[st->pk].gather)) return;
      st->res->cat_s[WL_CAT_DP] += now - st->since;
      if (r->trace && now > st->since) npu_trace_add(r->trace, st->s, 2, "wait params", st->since, now - st->since);
      start_piece(r, st, now);
      break;
    case ST_WAIT_DP:
      if (!dp_done(r, st)) return;
      st->res->cat_s[WL_CAT_DP] += now - st->since;
      st->run_end = now;
      add_seg(st, &j->optim[st->s], &st->run_end);
      if (r->trace) npu_trace_add(r->trace, st->s, 0, "optimizer", now, j->optim[st->s].time_s);
      st->st = ST_OPT;
      break;
    case ST_OPT: {
      if (st->run_end > now + EPS) return;
      double t = st->run_end > now ? st->run_end : now;
      if (j->plan.zero >= 1 && !zero3(r) && !j->plan.overlap_param_gather) {
        post_dp(r, st, IC_OP_ALLGATHER, j->stage_params[st->s] * 2, t);
        st->since = t;
        st->st = ST_WAIT_AG;
      } else {
        st->res->end_s = t;
        st->st = ST_DONE;
      }
      break;
    }
    case ST_WAIT_AG:
      if (!dp_done(r, st)) return;
      st->res->cat_s[WL_CAT_DP] += now - st->since;
      st->res->end_s = now;
      st->st = ST_DONE;
      break;
    case ST_DONE: return;
    }
  }
}

/* ------------------------------------------------------------------ the driver actor */

/* Cost each memoised collective alone on the first stage's group (its links are the same
 * class for every stage); sequential, before the step starts. */
static int probe_colls(struct rp *r)
{
  struct wl_job *j = r->job;
  for (int i = 0; i < j->ncolls; i++) {
    struct wl_coll *c = &j->colls[i];
    int n = wl_plan_dim(&j->plan, (enum wl_dim)c->dim), *ranks = npu_xmalloc((size_t)n * sizeof *ranks);
    wl_plan_group(&j->plan, 0, (enum wl_dim)c->dim, ranks);
    struct ic_comm comm;
    int rc = ic_comm_init(&comm, ranks, n, r->topo, "plan.tp", r->diag);
    free(ranks);
    if (rc) return rc;
    int id = start_coll(r, &comm, c->op, c->bytes, 0);
    if (id < 0) {
      ic_comm_release(&comm);
      return r->rc;
    }
    ic_exec_join_all(r->x, id, npu_engine_clock());
    ic_exec_run(r->x);
    struct ic_result res;
    ic_exec_result(r->x, id, &res);
    c->time_s = res.time_s;
    snprintf(c->algo, sizeof c->algo, "%s", ic_algo_name(res.plan.algo));
    ic_exec_release(r->x, id);
    ic_comm_release(&comm);
  }
  return 0;
}

static int build_stages(struct rp *r)
{
  struct wl_job *j = r->job;
  const struct wl_plan *p = &j->plan;
  r->st = npu_xcalloc((size_t)r->pp, sizeof *r->st);
  for (int s = 0; s < r->pp; s++) {
    struct stage *st = &r->st[s];
    st->s = s;
    st->res = &r->res->stages[s];
    int rc = wl_schedule_build((enum wl_schedule)p->schedule, r->pp, p->vpp, r->mb, s, &st->prog, &st->n, r->diag);
    if (rc) return rc;
    st->ndpc = p->tp * p->cp;
    st->dpc = npu_xcalloc((size_t)st->ndpc, sizeof *st->dpc);
    if (p->dp * p->cp < 2) continue;
    int n = p->dp * p->cp, *ranks = npu_xmalloc((size_t)n * sizeof *ranks);
    for (int t = 0; t < p->tp; t++)
      for (int c = 0; c < p->cp; c++) {
        int m = 0;
        for (int cc = 0; cc < p->cp; cc++) /* gradients reduce over dp x cp */
          for (int d = 0; d < p->dp; d++) ranks[m++] = phys_rank(r, s, t, cc, d);
        rc = ic_comm_init(&st->dpc[t * p->cp + c], ranks, n, r->topo, "plan.dp", r->diag);
        if (rc) break;
        if (p->cp > 1) break; /* one group covers all cp ranks of this tp rank */
      }
    if (p->cp > 1) st->ndpc = p->tp;
    free(ranks);
    if (rc) return rc;
  }
  return 0;
}

static bool all_done(const struct rp *r)
{
  for (int s = 0; s < r->pp; s++)
    if (r->st[s].st != ST_DONE) return false;
  return true;
}

static void drive(void *arg)
{
  struct rp *r = arg;
  r->x = ic_exec_create(r->topo, &r->icp);
  if ((r->rc = probe_colls(r))) return;
  wl_sum_segments(r->job);
  double t0 = npu_engine_clock();
  r->res->probe_s = t0;
  if ((r->rc = build_stages(r))) return;
  for (int s = 0; s < r->pp; s++) advance(r, &r->st[s], t0);
  while (!r->rc && !all_done(r)) {
    double now = npu_engine_clock();
    ic_exec_advance(r->x, now);
    double next = ic_exec_next_event_s(r->x);
    for (int s = 0; s < r->pp; s++)
      if ((r->st[s].st == ST_RUN || r->st[s].st == ST_OPT) && r->st[s].run_end < next) next = r->st[s].run_end;
    struct npu_xfer *const *xs;
    size_t n = ic_exec_xfers(r->x, &xs);
    if (n) {
      ssize_t k = npu_xfer_wait_any(xs, n, isfinite(next) ? (next > now ? next - now : 0) : -1);
      now = npu_engine_clock();
      if (k >= 0) ic_exec_xfer_done(r->x, (size_t)k, now);
      ic_exec_reap(r->x, now);
    } else if (isfinite(next)) {
      if (next > now) npu_engine_sleep(next - now);
      now = npu_engine_clock();
    } else {
      r->rc = npu_diag_set(r->diag, r->job->path, 0, "plan.schedule",
                           "the step cannot finish: every stage waits (a schedule or replay bug)");
      break;
    }
    ic_exec_advance(r->x, now);
    for (int s = 0; s < r->pp; s++) advance(r, &r->st[s], now);
  }
  /* shift times so that the step starts at 0 */
  for (int s = 0; s < r->pp; s++) r->res->stages[s].end_s -= t0;
}

/* ------------------------------------------------------------------ results */

static void finish(struct rp *r)
{
  struct wl_job *j = r->job;
  struct wl_result *res = r->res;
  double step = 0;
  for (int s = 0; s < r->pp; s++)
    if (res->stages[s].end_s > step) {
      step = res->stages[s].end_s;
      res->slowest_stage = s;
    }
  res->step_s = step;
  int per_stage = j->plan.tp * j->plan.cp * j->plan.dp;
  for (int s = 0; s < r->pp; s++) {
    struct wl_stage_result *sr = &res->stages[s];
    sr->cat_s[WL_CAT_IDLE] += step - sr->end_s;
    res->hw_flops += (sr->flops - sr->model_flops) * per_stage; /* recomputation */
    wl_memory_stage(&j->model, &j->plan, s, &sr->mem);
  }
  memcpy(res->cat_s, res->stages[res->slowest_stage].cat_s, sizeof res->cat_s);
  res->bubble_fraction = step > 0 ? res->cat_s[WL_CAT_BUBBLE] / step : 0;
  double tokens = (double)j->plan.global_batch * j->model.seq_len;
  res->tokens_per_s = tokens / step;
  res->model_flops = wl_model_flops(&j->model, tokens, false);
  res->hw_flops += res->model_flops; /* HFU: the model's FLOPs plus what recomputation adds */
  struct arch_derived dv;
  arch_derive(&j->sys, &dv);
  res->peak_flops_per_s = dv.peak_flops_per_s[j->plan.dtype == 1 ? NPU_DT_FP16 : NPU_DT_BF16];
  res->mfu = res->model_flops / (step * j->devices * res->peak_flops_per_s);
  res->hfu = res->hw_flops / (step * j->devices * res->peak_flops_per_s);
  wl_memory_peak(&j->model, &j->plan, &res->peak_mem);
  res->oom = res->peak_mem.total_bytes > (double)j->sys.chip.hbm.size_bytes;
  /* the bottleneck: the largest share of the slowest stage's step */
  int top = 0;
  for (int c = 1; c < WL_CAT_COUNT; c++)
    if (res->cat_s[c] > res->cat_s[top]) top = c;
  double compute = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (wl_cat_is_compute((enum wl_cat)c)) compute += res->cat_s[c];
  snprintf(res->bottleneck, sizeof res->bottleneck, "%s (%.0f%% of the step on stage %d; compute %.0f%%, bubble %.0f%%)",
           wl_cat_name((enum wl_cat)top), 100 * res->cat_s[top] / step, res->slowest_stage, 100 * compute / step,
           100 * res->bubble_fraction);
}

int wl_replay(struct wl_job *job, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  memset(res, 0, sizeof *res);
  struct rp r = {.job = job, .res = res, .trace = trace, .diag = diag};
  r.pp = job->plan.pp;
  r.mb = job->microbatches;
  r.chunks = wl_schedule_chunks((enum wl_schedule)job->plan.schedule, job->plan.vpp);
  r.mchunks = r.pp * r.chunks;
  res->nstages = r.pp;
  res->stages = npu_xcalloc((size_t)r.pp, sizeof *res->stages);
  /* kernels first: outside the engine (event-fidelity costs run in child processes) */
  wl_expand(job);
  struct op_cache *cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  int rc = wl_cost_kernels(job, cache, diag);
  size_t entries;
  uint64_t hits, misses;
  op_cache_stats(cache, &entries, &hits, &misses);
  res->kernels_costed = (size_t)misses;
  res->kernel_cache_hits = (size_t)hits;
  if (!rc && job->run.cost_cache[0]) op_cache_save(cache);
  op_cache_close(cache);
  if (rc) return rc;
  rc = ic_topo_create(&r.topo, &job->sys, job->devices, diag);
  if (rc) return rc;
  ic_params_default(&r.icp);
  struct npu_buf xml = {0};
  ic_platform_xml(r.topo, &xml, NULL);
  rc = npu_engine_init(npu_buf_str(&xml), diag);
  npu_buf_release(&xml);
  if (!rc) {
    r.p2p = npu_xcalloc((size_t)2 * (size_t)(r.mchunks > 1 ? r.mchunks - 1 : 1) * (size_t)r.mb, sizeof *r.p2p);
    r.pair = npu_xcalloc((size_t)2 * (size_t)r.mchunks * (size_t)job->plan.tp, sizeof *r.pair);
    if (trace)
      for (int s = 0; s < r.pp; s++) {
        char name[64];
        snprintf(name, sizeof name, "stage %d", s);
        npu_trace_name(trace, s, -1, name);
        npu_trace_name(trace, s, 0, "compute");
        npu_trace_name(trace, s, 1, "pipeline input");
        npu_trace_name(trace, s, 2, "data parallel");
      }
    npu_engine_spawn("replay", npu_engine_host("r0"), drive, &r);
    npu_engine_run();
    rc = r.rc;
    if (!rc) finish(&r);
  }
  if (r.x) {
    res->flows = 0;
    ic_exec_destroy(r.x);
  }
  if (r.st)
    for (int s = 0; s < r.pp; s++) {
      free(r.st[s].prog);
      free(r.st[s].ids);
      free(r.st[s].pcs);
      for (int g = 0; g < r.st[s].ndpc; g++)
        if (r.st[s].dpc[g].size) ic_comm_release(&r.st[s].dpc[g]);
      free(r.st[s].dpc);
    }
  free(r.st);
  if (r.pair)
    for (size_t i = 0; i < (size_t)2 * (size_t)r.mchunks * (size_t)job->plan.tp; i++)
      if (r.pair[i].size) ic_comm_release(&r.pair[i]);
  free(r.pair);
  free(r.p2p);
  ic_topo_destroy(r.topo);
  clock_gettime(CLOCK_MONOTONIC, &w1);
  res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
  return rc;
}

void wl_result_release(struct wl_result *res)
{
  free(res->stages);
  res->stages = NULL;
}
