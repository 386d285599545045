/*
 * replay.c - a training step on the cluster: one SimGrid actor drives every replay rank of a
 * step program (program.h) as a state machine over simulated time. The program arrives built
 * and costed; the replay probes the memoised collectives, then only simulates: it never costs a
 * kernel (event-fidelity costing forks, which a started engine must not see).
 *
 * Replay ranks. Ranks that do the same work at the same time are replayed once: one replay rank
 * per pipeline stage in a dense model (it stands for the stage's tp x cp x dp ranks); in an MoE
 * model one per (stage, EP index), since the experts a rank holds receive different numbers of
 * tokens (it stands for the tp x edp ranks of that EP index).
 *
 * Slots and steps. A replay rank runs the slots of its schedule in order (a micro-batch's
 * forward, backward, input-gradient or weight-gradient pass through one model chunk). A slot
 * first waits for its input from the neighbouring stage, then runs its steps (struct wl_step):
 * compute (a costed segment, or the rank's experts for its routed tokens), collectives it joins
 * and waits for (the EP all-to-alls, which every replay rank of the EP group joins), collectives
 * it only posts
 * (gradient buckets, ZeRO-3 parameter gathers one piece ahead) and waits for posted ones; then
 * it posts its output. Collectives are instances of the interconnect executor
 * (interconnect/exec.h) over every physical group they stand for: their flows share links.
 * At the end a rank waits for its gradient reductions, runs the optimizer and (ZeRO 1-2)
 * gathers its parameters.
 *
 * Where time goes: compute categories and TP/CP from the segments; waiting for an input splits
 * into bubble (the sender had not finished) and pp_comm (the transfer); waiting in an EP
 * all-to-all is ep_comm; waiting for gradients, gathers and parameter gathers is dp_comm; the
 * rest up to the slowest rank's end is idle.
 */
#include "workloads/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "engine/engine.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/platform.h"
#include "interconnect/topo.h"
#include "workloads/program.h"
#include "workloads/workloads_int.h"

#define EPS 1e-12

/* Where a replay rank is. Each state has a phase function (see advance()). */
enum st_state {
  ST_READY,     /* between slots: wait for the next slot's inputs, or end the slots */
  ST_WAIT_RECV, /* waiting for a pipeline transfer (bubble, then pp_comm) */
  ST_STEP,      /* running the current slot's steps */
  ST_RUN,       /* the compute stream is busy until run_end */
  ST_WAITC,     /* waiting for a shared collective (waitcat) */
  ST_WAIT_DP,   /* after the slots: waiting for the gradient reductions */
  ST_OPT,       /* running the optimizer until run_end */
  ST_WAIT_AG,   /* waiting for the parameter all-gathers after the optimizer */
  ST_DONE,
  ST_COUNT
};

/* One pipeline transfer (all TP ranks of a stage to their counterparts). */
struct p2p {
  int first_id, n;       /* executor instances first_id .. first_id + n - 1; n = 0: not created,
                            n < 0: run.network = formula */
  double send_s;         /* when the sender joined (NAN: not yet) */
  double formula_s;      /* run.network = formula: the transfer's time, alone on its route */
  int to_idx;            /* the receiving replay rank */
  bool done;
  double done_s;
};

struct rank {
  int s, e;              /* pipeline stage, EP index */
  int idx;               /* s x E + e */
  const struct wl_prog_stage *ps; /* its stage's slots and steps (the program's) */
  size_t pc;             /* current slot */
  enum st_state st;
  double since;          /* when the current wait began */
  double run_end;
  int wait;              /* p2p index waited on */
  int waitsh;            /* shared collective waited on */
  int waitcat;           /* where that wait counts */
  bool recv_ok;          /* the current slot's inputs have arrived */
  const struct wl_step *steps; /* the current slot's steps */
  int nsteps, sk;
  int *ids;              /* shared collectives to wait for before the optimizer */
  int nids, capids;
  int buckets;           /* gradient buckets posted (the shared key's sequence number) */
  int gathers;           /* ZeRO-3 gathers posted */
  int next_gather;       /* ZeRO-3: the next piece's gather, posted ahead */
  int *paired;           /* a DualPipe pair's all-to-alls, waited for at its end */
  int npaired, cap_paired;
  bool pair_wait;
  struct wl_stage_result *res;
};

struct rp {
  const struct wl_job *job;
  const struct wl_program *prog;
  struct wl_result *res;
  struct npu_trace *trace;
  struct ic_topo *topo;
  struct ic_params icp;
  struct ic_exec *x;
  struct rank *rk;
  int nr, E, pp, mchunks, mb, edp;
  struct p2p *p2p;       /* [dir][boundary][mb][EP index] */
  struct ic_comm *pair;  /* [boundary][dir][tp][EP index]: 2-rank communicators for sends, on demand */
  struct wl__shared_table sh; /* every shared collective of the step */
  struct ic_comm *dpc;   /* per stage x tp: the DP (x CP) group */
  struct ic_comm *epc;   /* per stage x tp x edp: the EP group */
  struct ic_comm *edpc;  /* per stage x ep x tp: the expert data-parallel group */
  struct wake { double t; int idx; } *heap; /* replay ranks to look at again, by time */
  size_t nheap, capheap;
  int ndone;
  int rc;
  struct npu_diag *diag;
};

static bool formula(const struct rp *r)
{
  return r->job->run.network == 1;
}

static bool zero3(const struct rp *r)
{
  return r->job->plan.zero >= 3 && r->job->plan.dp * r->job->plan.cp > 1;
}

/* The micro-batch of step s of rank rk's current slot (or its pair's second slot). */
static int step_mb(const struct rank *rk, const struct wl_step *s)
{
  return (int)rk->ps->slots[rk->pc + s->half].slot.mb;
}

/* ------------------------------------------------------------------ collectives */

static int start_coll(struct rp *r, const struct ic_comm *c, enum ic_op op, double bytes, const double *matrix)
{
  struct ic_coll coll = {.op = op, .algo = IC_ALGO_AUTO, .fidelity = (enum ic_fidelity)r->job->run.coll_fidelity,
                         .bytes = bytes, .matrix = matrix};
  int id = ic_exec_start(r->x, c, &coll, r->diag);
  if (id < 0 && !r->rc) r->rc = id;
  if (id >= 0) r->res->collectives++;
  return id;
}

/* Look at replay rank idx again at time t (a min-heap; stale entries are harmless). */
static void wake_at(struct rp *r, int idx, double t)
{
  if (r->nheap == r->capheap) {
    r->capheap = r->capheap ? 2 * r->capheap : 1024;
    r->heap = npu_xrealloc(r->heap, r->capheap * sizeof *r->heap);
  }
  size_t i = r->nheap++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (r->heap[up].t <= t) break;
    r->heap[i] = r->heap[up];
    i = up;
  }
  r->heap[i] = (struct wake){t, idx};
}

static struct wake wake_pop(struct rp *r)
{
  struct wake top = r->heap[0], last = r->heap[--r->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= r->nheap) break;
    if (c + 1 < r->nheap && r->heap[c + 1].t < r->heap[c].t) c++;
    if (r->heap[c].t >= last.t) break;
    r->heap[i] = r->heap[c];
    i = c;
  }
  if (r->nheap) r->heap[i] = last;
  return top;
}
/* run.network = formula: one transfer of `bytes` from a to b alone on its route. */
static double transfer_s(const struct rp *r, int a, int b, double bytes)
{
  return r->icp.task_overhead_s + ic_topo_latency_s(r->topo, a, b) + bytes / ic_topo_class_bw(r->topo, ic_topo_class(r->topo, a, b));
}

/*
 * run.network = formula: an AllToAllV over group c with sizes m (bytes from comm rank i to j):
 * every rank sends and receives through its scale-up port and its NIC at once, each at its
 * class bandwidth, so the collective takes the busiest rank's larger of the two, plus one step's
 * overhead and latency per peer class it reaches. Contention between collectives is not seen.
 */
static double a2a_formula_s(const struct rp *r, const struct ic_comm *c, const double *m)
{
  int n = c->size;
  double worst = 0, lat = 0;
  for (int i = 0; i < n; i++) {
    double up_s = 0, nic_s = 0, up_r = 0, nic_r = 0;
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      enum ic_class cl = ic_topo_class(r->topo, c->ranks[i], c->ranks[j]);
      double bw = ic_topo_class_bw(r->topo, cl), l = ic_topo_latency_s(r->topo, c->ranks[i], c->ranks[j]);
      double out = m[(size_t)i * n + j] / bw, in = m[(size_t)j * n + i] / bw;
      if (cl == IC_CLASS_NIC) nic_s += out, nic_r += in;
      else up_s += out, up_r += in;
      if (l > lat) lat = l;
    }
    double t = fmax(fmax(up_s, nic_s), fmax(up_r, nic_r));
    if (t > worst) worst = t;
  }
  return worst + lat + r->icp.task_overhead_s;
}

/* ------------------------------------------------------------------ pipeline transfers */

/* Transfer index i of the program (wl_program_p2p_index) for EP index e, created on first use:
 * each EP index has its own transfers (replay rank (s, e) stands for dp coordinate e and its
 * expert data-parallel replicas, whose pipeline neighbours have the same coordinate). */
static struct p2p *p2p_get(struct rp *r, int i, int e)
{
  struct p2p *p = &r->p2p[(size_t)i * (size_t)r->E + (size_t)e];
  if (p->n != 0 || r->rc) return p;
  const struct wl_job *j = r->job;
  int per = (r->mchunks - 1) * r->mb, dir = i / per, b = i % per / r->mb, mb = i % r->mb;
  int from = wl__stage_of(r->prog, dir ? b + 1 : b, mb), to = wl__stage_of(r->prog, dir ? b : b + 1, mb), t = j->plan.tp;
  /* each TP rank sends its share: T h / t (sequence parallel, or Megatron's scatter-gather) */
  double bytes = (double)j->plan.micro_batch * (j->model.seq_len / j->plan.cp) * j->model.hidden * 2.0 / t;
  p->first_id = -1;
  p->send_s = NAN;
  if (formula(r)) { /* the TP ranks' transfers side by side: as one, alone on its route */
    p->formula_s = transfer_s(r, wl__ep_rank(&j->plan, from, 0, e), wl__ep_rank(&j->plan, to, 0, e), bytes);
    p->to_idx = to * r->E + e;
    p->n = -1;
    return p;
  }
  for (int k = 0; k < t; k++) {
    struct ic_comm *c = &r->pair[(((size_t)b * 2 + (size_t)dir) * (size_t)t + (size_t)k) * (size_t)r->E + (size_t)e];
    int a = wl__ep_rank(&j->plan, from, k, e), z = wl__ep_rank(&j->plan, to, k, e);
    if (c->size && (c->ranks[0] != a || c->ranks[1] != z)) ic_comm_release(c); /* DualPipe: the other direction */
    if (!c->size) {
      int ranks[2] = {a, z};
      int rc = ic_comm_init(c, ranks, 2, r->topo, "plan.pp", r->diag);
      if (rc) {
        r->rc = rc;
        return p;
      }
    }
    int id = start_coll(r, c, IC_OP_SEND, bytes, NULL);
    if (id < 0) return p;
    if (p->first_id < 0) p->first_id = id;
    NPU_ASSERT(id == p->first_id + k);
  }
  p->n = t;
  p->send_s = NAN;
  return p;
}

static void p2p_join(struct rp *r, struct p2p *p, int side, double t)
{
  for (int i = 0; i < p->n; i++) ic_exec_join(r->x, p->first_id + i, side, t);
  if (p->n < 0 && side == 0) { /* eager: starts when the sender posts it */
    p->done_s = t + p->formula_s;
    wake_at(r, p->to_idx, p->done_s);
  }
  if (side == 0) p->send_s = t;
}

static bool p2p_done(struct rp *r, struct p2p *p, double *end)
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

/* ------------------------------------------------------------------ shared collectives */

static bool sh_done(struct rp *r, int h)
{
  return wl__shared_done(&r->sh, h, r->x);
}

static void sh_drop(struct rp *r, int h)
{
  wl__shared_drop(&r->sh, h, r->x);
}

/* Which comm ranks of a shared collective's groups a replay rank joins as: all of them (it
 * stands for the whole group), those of a DP group whose dp coordinate has its EP index (a DP
 * group spans the EP ranks), or only comm rank e (an EP group). */
enum join_as { JOIN_ALL, JOIN_DP, JOIN_EP };

/*
 * Join (creating if first) the shared collective `key`: op over the n groups, this rank joining
 * the comm ranks it stands for. matrix (AllToAllV) is taken over. Returns the table index.
 */
static int join_shared(struct rp *r, struct rank *rk, uint64_t key, enum ic_op op, double bytes,
                       const struct ic_comm *groups, int n, int members, enum join_as as, double t, double *matrix)
{
  int h = wl__shared_find(&r->sh, key);
  if (h < 0) {
    h = wl__shared_add(&r->sh, key);
    struct wl__shared *s = &r->sh.v[h];
    s->members = members;
    s->n = n;
    s->matrix = matrix;
    for (int g = 0; g < n; g++) {
      int id = start_coll(r, &groups[g], op, bytes, s->matrix);
      if (id < 0) return h;
      if (s->first < 0) s->first = id;
    }
  } else {
    free(matrix);
  }
  struct wl__shared *s = &r->sh.v[h];
  s->joined++;
  int dp = r->job->plan.dp;
  for (int g = 0; g < s->n && s->first >= 0; g++)
    for (int i = 0; i < groups[g].size; i++) {
      bool mine = as == JOIN_ALL || (as == JOIN_EP && i == rk->e) || (as == JOIN_DP && (i % dp) % r->E == rk->e);
      if (mine) ic_exec_join(r->x, s->first + g, i, t);
    }
  return h;
}

static void wait_later(struct rank *rk, int h)
{
  if (rk->nids == rk->capids) {
    rk->capids = rk->capids ? 2 * rk->capids : 16;
    rk->ids = npu_xrealloc(rk->ids, (size_t)rk->capids * sizeof *rk->ids);
  }
  rk->ids[rk->nids++] = h;
}

/* A dense gradient bucket of n parameters (fp32, Megatron's main_grad) over the stage's DP
 * groups: reduce-scatter with ZeRO >= 1, else all-reduce; waited for before the optimizer. */
static void post_bucket(struct rp *r, struct rank *rk, double n, double t)
{
  const struct wl_plan *p = &r->job->plan;
  if (p->dp * p->cp < 2 || n <= 0) return;
  enum ic_op op = p->zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE;
  int h = join_shared(r, rk, wl__shared_key(WL__KEY_BUCKET, (uint64_t)rk->s, 0, (uint64_t)rk->buckets++), op, n * 4,
                      &r->dpc[(size_t)rk->s * p->tp], p->tp, r->E, JOIN_DP, t, NULL);
  wait_later(rk, h);
  if (r->trace) npu_trace_add(r->trace, rk->idx, 2, "grad bucket", t, 0);
}

/* An expert gradient bucket over this rank's expert data-parallel groups. */
static void post_ebucket(struct rp *r, struct rank *rk, double n, double t)
{
  const struct wl_plan *p = &r->job->plan;
  if (r->edp < 2 || n <= 0) return;
  enum ic_op op = p->zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE;
  int h = join_shared(r, rk, wl__shared_key(WL__KEY_EBUCKET, (uint64_t)rk->s, (uint64_t)rk->e, (uint64_t)rk->buckets++),
                      op, n * 4, &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->tp], p->tp, 1, JOIN_ALL, t, NULL);
  wait_later(rk, h);
}

/* ZeRO-3: the all-gather of `params` parameters of one piece of this rank's current slot. */
static int post_gather(struct rp *r, struct rank *rk, double params, double t)
{
  const struct wl_plan *p = &r->job->plan;
  return join_shared(r, rk, wl__shared_key(WL__KEY_GATHER, (uint64_t)rk->s, 0, (uint64_t)rk->gathers++),
                     IC_OP_ALLGATHER, params * 2, &r->dpc[(size_t)rk->s * p->tp], p->tp, r->E, JOIN_DP, t, NULL);
}

/* The EP all-to-all of (layer, mb, which: 0 dispatch, 1 combine, 2 combine^T, 3 dispatch^T),
 * its sizes from the program's routing draw. */
static int join_a2a(struct rp *r, struct rank *rk, int layer, int mb, int which, double t)
{
  const struct wl_plan *p = &r->job->plan;
  const struct wl_route *rt = wl_program_route(r->prog, layer, mb);
  NPU_ASSERT(rt != NULL);
  int E = r->E;
  /* dispatch sends rows to the experts' ranks, combine sends them back: the transpose */
  double copy = r->job->model.hidden * 2.0, *m = npu_xmalloc((size_t)E * E * sizeof *m);
  bool back = which == 1 || which == 3;
  for (int i = 0; i < E; i++)
    for (int k = 0; k < E; k++) m[(size_t)i * E + k] = copy * (back ? rt->matrix[(size_t)k * E + i] : rt->matrix[(size_t)i * E + k]);
  double total = 0;
  for (int i = 0; i < E * E; i++) total += m[i];
  uint64_t key = wl__shared_key(WL__KEY_A2A, (uint64_t)rk->s, (uint64_t)(layer * 4 + which), (uint64_t)mb);
  if (formula(r)) {
    int h = wl__shared_find(&r->sh, key);
    if (h < 0) {
      h = wl__shared_add(&r->sh, key);
      r->sh.v[h].members = E;
      r->sh.v[h].formula_s = a2a_formula_s(r, &r->epc[(size_t)rk->s * p->tp * r->edp], m);
    }
    free(m);
    struct wl__shared *s = &r->sh.v[h];
    s->joined++;
    if (t > s->last_join) s->last_join = t;
    if (s->joined == s->members) /* its end is known now: wake the members at it */
      for (int e = 0; e < E; e++) wake_at(r, rk->s * r->E + e, s->last_join + s->formula_s);
    return h;
  }
  return join_shared(r, rk, key, IC_OP_ALLTOALLV, total / E, &r->epc[(size_t)rk->s * p->tp * r->edp],
                     p->tp * r->edp, E, JOIN_EP, t, m);
}

/* ------------------------------------------------------------------ steps */

static void add_seg(struct rank *rk, const struct wl_seg *sg)
{
  for (int c = 0; c < WL_CAT_COUNT; c++) rk->res->cat_s[c] += sg->cat_s[c];
  rk->res->flops += sg->flops;
  rk->res->model_flops += sg->model_flops;
}

static void wait_on(struct rank *rk, int h, enum wl_cat cat, double now)
{
  rk->waitsh = h;
  rk->waitcat = cat;
  rk->since = now;
  rk->st = ST_WAITC;
}

/* Start the slot at pc (and its F&B partner): its steps from the program. */
static void start_slot(struct rp *r, struct rank *rk, double now)
{
  const struct wl_prog_slot *ps = &rk->ps->slots[rk->pc];
  const struct wl_step_list *l = &rk->ps->lists[ps->list];
  rk->steps = &rk->ps->steps[l->first];
  rk->nsteps = l->n;
  rk->sk = rk->npaired = 0;
  if (r->trace) npu_trace_add(r->trace, rk->idx, 0, (const char *[]){"F", "B", "Bi", "W"}[ps->slot.phase], now, 0);
  rk->st = ST_STEP;
}

/* The end of the current slot (and its partner): post the outputs, go to the next slot. */
static void end_slot(struct rp *r, struct rank *rk, double now)
{
  bool pair = rk->ps->slots[rk->pc].slot.overlap && rk->pc + 1 < rk->ps->nslots;
  for (int q = 0; q <= (pair ? 1 : 0); q++) {
    int send = rk->ps->slots[rk->pc].send;
    if (send >= 0) p2p_join(r, p2p_get(r, send, rk->e), 0, now);
    rk->pc++;
  }
  rk->recv_ok = false;
  rk->st = ST_READY;
}

/* Run the current slot's steps from sk at `now` until one needs time or a collective. */
static void run_steps(struct rp *r, struct rank *rk, double now)
{
  for (;;) {
    if (r->rc) return;
    if (rk->sk == rk->nsteps) {
      if (rk->npaired) { /* a DualPipe pair: its all-to-alls' ends */
        int h = rk->paired[--rk->npaired];
        if (!sh_done(r, h)) {
          wait_on(rk, h, WL_CAT_EP, now);
          rk->sk--; /* come back here */
          rk->pair_wait = true;
          return;
        }
        sh_drop(r, h);
        continue;
      }
      end_slot(r, rk, now);
      return;
    }
    const struct wl_step *s = &rk->steps[rk->sk];
    switch ((enum wl_step_kind)s->kind) {
    case WL_STEP_SEG:
    case WL_STEP_EXPERTS: {
      double d;
      if (s->kind == WL_STEP_SEG) {
        d = s->u.seg.seg->time_s;
        add_seg(rk, s->u.seg.seg);
      } else { /* the experts' FLOPs are not counted per rank (the model's formula has them) */
        d = wl_program_expert_s(r->prog, s->u.experts.layer, step_mb(rk, s), rk->e,
                                (enum wl_expert_pass)s->u.experts.pass);
        rk->res->cat_s[WL_CAT_GEMM] += d;
      }
      if (r->trace && d > 0) npu_trace_add(r->trace, rk->idx, 0, "compute", now, d);
      rk->run_end = now + d;
      rk->sk++;
      rk->st = ST_RUN;
      return;
    }
    case WL_STEP_A2A: {
      int h = join_a2a(r, rk, s->u.a2a.layer, step_mb(rk, s), s->u.a2a.which, now);
      rk->sk++;
      if (h < 0) return;
      if (s->u.a2a.pair) { /* waited for at the pair's end */
        if (rk->npaired == rk->cap_paired) {
          rk->cap_paired = rk->cap_paired ? 2 * rk->cap_paired : 16;
          rk->paired = npu_xrealloc(rk->paired, (size_t)rk->cap_paired * sizeof *rk->paired);
        }
        rk->paired[rk->npaired++] = h;
        break;
      }
      if (!sh_done(r, h)) {
        wait_on(rk, h, WL_CAT_EP, now);
        return;
      }
      sh_drop(r, h);
      break;
    }
    case WL_STEP_BUCKET:
      post_bucket(r, rk, s->u.bucket.params, now);
      post_ebucket(r, rk, s->u.bucket.eparams, now);
      rk->sk++;
      break;
    case WL_STEP_GATHER: {
      /* piece q's gather (posted by piece q-1, or now for the first), then piece q+1's */
      int h = s->u.gather.piece == 0 ? post_gather(r, rk, s->u.gather.params, now) : rk->next_gather;
      rk->next_gather = -1;
      if (s->u.gather.next) { /* the next piece's gather step follows this piece's compute */
        for (int i = rk->sk + 1; i < rk->nsteps; i++)
          if (rk->steps[i].kind == WL_STEP_GATHER) {
            rk->next_gather = post_gather(r, rk, rk->steps[i].u.gather.params, now);
            break;
          }
      }
      rk->sk++;
      if (h < 0) break;
      if (!sh_done(r, h)) {
        wait_on(rk, h, WL_CAT_DP, now);
        return;
      }
      sh_drop(r, h);
      break;
    }
    default: NPU_PANIC("bad step %d", s->kind);
    }
  }
}
/* ------------------------------------------------------------------ the state machine */

/* Each phase function handles one state at `now`: true to look at the rank again at once (its
 * state changed), false when it waits (for time, a transfer or a collective). */

static bool on_run(struct rp *r, struct rank *rk, double now)
{
  if (rk->run_end > now + EPS) return false;
  rk->st = ST_STEP;
  run_steps(r, rk, rk->run_end > now ? rk->run_end : now);
  return rk->st != ST_STEP;
}

static bool on_step(struct rp *r, struct rank *rk, double now)
{
  run_steps(r, rk, now);
  return rk->st != ST_STEP;
}

static bool on_wait_coll(struct rp *r, struct rank *rk, double now)
{
  if (!sh_done(r, rk->waitsh)) return false;
  rk->res->cat_s[rk->waitcat] += now - rk->since;
  if (r->trace && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait collective", rk->since, now - rk->since);
  sh_drop(r, rk->waitsh);
  if (rk->pair_wait) {
    rk->pair_wait = false;
    rk->sk++; /* undo the step back */
  }
  rk->st = ST_STEP;
  return true;
}

/* Between slots: after the last, post the buckets not posted yet and wait for them; else wait
 * for the next slot's inputs (and its partner's), then start it. */
static bool on_ready(struct rp *r, struct rank *rk, double now)
{
  const struct wl_job *j = r->job;
  const struct wl_program *pg = r->prog;
  if (rk->pc == rk->ps->nslots) {
    if (!j->plan.overlap_grad_reduce && !zero3(r)) {
      post_bucket(r, rk, pg->stage_params[rk->s], now);
      post_ebucket(r, rk, pg->stage_eparams[rk->s], now);
    }
    rk->since = now;
    rk->st = ST_WAIT_DP;
    return true;
  }
  bool pair = rk->ps->slots[rk->pc].slot.overlap && rk->pc + 1 < rk->ps->nslots;
  if (!rk->recv_ok) {
    for (int q = 0; q <= (pair ? 1 : 0); q++) { /* the inputs of the slot and its partner */
      int recv = rk->ps->slots[rk->pc + (size_t)q].recv;
      if (recv < 0) continue;
      struct p2p *in = p2p_get(r, recv, rk->e);
      if (r->rc) return false;
      double end;
      if (p2p_done(r, in, &end)) continue;
      p2p_join(r, in, 1, now);
      rk->wait = (int)(in - r->p2p);
      rk->since = now;
      rk->st = ST_WAIT_RECV;
      return true;
    }
    rk->recv_ok = true;
  }
  start_slot(r, rk, now);
  return true;
}

static bool on_wait_recv(struct rp *r, struct rank *rk, double now)
{
  struct p2p *p = &r->p2p[rk->wait];
  double end;
  if (!p2p_done(r, p, &end)) return false;
  double sent = p->send_s > rk->since ? p->send_s : rk->since;
  rk->res->cat_s[WL_CAT_BUBBLE] += sent - rk->since;
  rk->res->cat_s[WL_CAT_PP] += (now > sent ? now : sent) - sent; /* now == end unless woken late */
  if (r->trace && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait input", rk->since, now - rk->since);
  rk->st = ST_READY; /* then the partner's input, if any */
  return true;
}

/* Whether every collective in rk->ids is done; if so they are dropped. */
static bool ids_done(struct rp *r, struct rank *rk)
{
  for (int i = 0; i < rk->nids; i++)
    if (!sh_done(r, rk->ids[i])) return false;
  for (int i = 0; i < rk->nids; i++) sh_drop(r, rk->ids[i]);
  rk->nids = 0;
  return true;
}

static bool on_wait_dp(struct rp *r, struct rank *rk, double now)
{
  if (!ids_done(r, rk)) return false;
  const struct wl_seg *opt = &r->prog->optim[rk->s];
  rk->res->cat_s[WL_CAT_DP] += now - rk->since;
  add_seg(rk, opt);
  rk->run_end = now + opt->time_s;
  if (r->trace) npu_trace_add(r->trace, rk->idx, 0, "optimizer", now, opt->time_s);
  rk->st = ST_OPT;
  return true;
}

/* After the optimizer: with ZeRO 1-2 and no overlap, gather the parameters. */
static bool on_opt(struct rp *r, struct rank *rk, double now)
{
  const struct wl_job *j = r->job;
  const struct wl_program *pg = r->prog;
  if (rk->run_end > now + EPS) return false;
  double t = rk->run_end > now ? rk->run_end : now;
  if (j->plan.zero >= 1 && !zero3(r) && !j->plan.overlap_param_gather && j->plan.dp * j->plan.cp > 1) {
    const struct wl_plan *p = &j->plan;
    int h = join_shared(r, rk, wl__shared_key(WL__KEY_PGATHER, (uint64_t)rk->s, 0, 0), IC_OP_ALLGATHER,
                        pg->stage_params[rk->s] * 2, &r->dpc[(size_t)rk->s * p->tp], p->tp, r->E, JOIN_DP, t, NULL);
    wait_later(rk, h);
    if (r->edp > 1 && pg->stage_eparams[rk->s] > 0) { /* experts: over their data-parallel group */
      h = join_shared(r, rk, wl__shared_key(WL__KEY_PGATHER, (uint64_t)rk->s, (uint64_t)rk->e, 1), IC_OP_ALLGATHER,
                      pg->stage_eparams[rk->s] * 2, &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->tp], p->tp,
                      1, JOIN_ALL, t, NULL);
      wait_later(rk, h);
    }
    rk->since = t;
    rk->st = ST_WAIT_AG;
  } else {
    rk->res->end_s = t;
    rk->st = ST_DONE;
  }
  return true;
}

static bool on_wait_ag(struct rp *r, struct rank *rk, double now)
{
  if (!ids_done(r, rk)) return false;
  rk->res->cat_s[WL_CAT_DP] += now - rk->since;
  rk->res->end_s = now;
  rk->st = ST_DONE;
  return true;
}

static bool on_done(struct rp *r, struct rank *rk, double now)
{
  (void)r, (void)rk, (void)now;
  return false;
}

/* The phase function of each state. */
static bool (*const phases[ST_COUNT])(struct rp *, struct rank *, double) = {
    [ST_READY] = on_ready,         [ST_WAIT_RECV] = on_wait_recv, [ST_STEP] = on_step,
    [ST_RUN] = on_run,             [ST_WAITC] = on_wait_coll,     [ST_WAIT_DP] = on_wait_dp,
    [ST_OPT] = on_opt,             [ST_WAIT_AG] = on_wait_ag,     [ST_DONE] = on_done,
};

/* Move rank rk on at `now` as far as it goes without waiting. */
static void advance(struct rp *r, struct rank *rk, double now)
{
  while (!r->rc && phases[rk->st](r, rk, now)) {}
}
/* ------------------------------------------------------------------ set-up */

/* Cost each memoised collective of the program alone on the first stage's group (its links are
 * the same class for every stage); sequential, before the step starts. */
static int probe_colls(struct rp *r, struct wl_program *pg)
{
  for (int i = 0; i < pg->ncolls; i++) {
    const struct wl_coll *c = &pg->colls[i];
    int n = wl_plan_dim(&pg->plan, (enum wl_dim)c->dim), *ranks = npu_xmalloc((size_t)n * sizeof *ranks);
    wl_plan_group(&pg->plan, 0, (enum wl_dim)c->dim, ranks);
    struct ic_comm comm;
    int rc = ic_comm_init(&comm, ranks, n, r->topo, c->dim == WL_DIM_CP ? "plan.cp" : "plan.tp", r->diag);
    free(ranks);
    if (rc) return rc;
    int id = start_coll(r, &comm, c->op, c->bytes, NULL);
    if (id < 0) {
      ic_comm_release(&comm);
      return r->rc;
    }
    ic_exec_join_all(r->x, id, npu_engine_clock());
    ic_exec_run(r->x);
    struct ic_result res;
    ic_exec_result(r->x, id, &res);
    wl_program_set_coll_time(pg, i, res.time_s, ic_algo_name(res.plan.algo));
    ic_exec_release(r->x, id);
    ic_comm_release(&comm);
  }
  wl_program_sum_segments(pg);
  return 0;
}

/*
 * Communicators: per (stage, tp) the DP group over dp x cp; with EP, per (stage, tp, edp
 * index) the EP group (dp coordinate = edp x ep + e: EP varies fastest inside DP, as Megatron's
 * tp-cp-ep-dp-pp order has it) and per (stage, ep index, tp) the expert data-parallel group.
 */
static int build_comms(struct rp *r)
{
  const struct wl_plan *p = &r->job->plan;
  int n = p->dp * p->cp, *ranks = npu_xmalloc((size_t)(n > r->E ? n : r->E) * sizeof *ranks), rc = 0;
  r->dpc = npu_xcalloc((size_t)r->pp * p->tp, sizeof *r->dpc);
  if (r->E > 1) {
    r->epc = npu_xcalloc((size_t)r->pp * p->tp * r->edp, sizeof *r->epc);
    r->edpc = npu_xcalloc((size_t)r->pp * r->E * p->tp, sizeof *r->edpc);
  }
  for (int s = 0; s < r->pp && !rc; s++)
    for (int t = 0; t < p->tp && !rc; t++) {
      if (n > 1) {
        int m = 0;
        for (int c = 0; c < p->cp; c++)
          for (int d = 0; d < p->dp; d++) ranks[m++] = wl__phys_rank(p, s, t, c, d);
        rc = ic_comm_init(&r->dpc[(size_t)s * p->tp + t], ranks, n, r->topo, "plan.dp", r->diag);
      }
      for (int g = 0; r->E > 1 && g < r->edp && !rc; g++) {
        for (int e = 0; e < r->E; e++) ranks[e] = wl__ep_rank(p, s, t, g * r->E + e);
        rc = ic_comm_init(&r->epc[((size_t)s * p->tp + t) * r->edp + g], ranks, r->E, r->topo, "plan.ep", r->diag);
      }
      for (int e = 0; r->E > 1 && r->edp > 1 && e < r->E && !rc; e++) {
        for (int g = 0; g < r->edp; g++) ranks[g] = wl__ep_rank(p, s, t, g * r->E + e);
        rc = ic_comm_init(&r->edpc[((size_t)s * r->E + e) * p->tp + t], ranks, r->edp, r->topo, "plan.ep", r->diag);
      }
    }
  free(ranks);
  return rc;
}

static void init_ranks(struct rp *r)
{
  r->rk = npu_xcalloc((size_t)r->nr, sizeof *r->rk);
  for (int i = 0; i < r->nr; i++) {
    struct rank *rk = &r->rk[i];
    rk->s = i / r->E;
    rk->e = i % r->E;
    rk->idx = i;
    rk->ps = &r->prog->stages[rk->s];
    rk->next_gather = -1;
    rk->res = &r->res->stages[i];
    rk->res->stage = rk->s;
    rk->res->ep = rk->e;
  }
}

/* ------------------------------------------------------------------ the driver actor */

/* When rank rk next has something due by itself (compute ending), or INFINITY. */
static double own_time(const struct rank *rk)
{
  return rk->st == ST_RUN || rk->st == ST_OPT ? rk->run_end : INFINITY;
}

/* Whether rk waits for something only a flow's completion can end. */
static bool waits_on_flows(const struct rp *r, const struct rank *rk)
{
  switch (rk->st) {
  case ST_WAITC: return r->sh.v[rk->waitsh].formula_s < 0;
  case ST_WAIT_RECV: return r->p2p[rk->wait].n > 0;
  case ST_WAIT_DP:
  case ST_WAIT_AG: return true;
  default: return false;
  }
}

/* Let the executor catch up to now; whether any of its events (a flow's start, a latency, a
 * delay) fell due, which may have ended a collective or a transfer. */
static bool exec_catch_up(struct rp *r, double now)
{
  bool due = ic_exec_next_event_s(r->x) <= now + EPS;
  ic_exec_advance(r->x, now);
  return due;
}

static void step_rank(struct rp *r, struct rank *rk, double now)
{
  bool was_done = rk->st == ST_DONE;
  advance(r, rk, now);
  if (!was_done && rk->st == ST_DONE) r->ndone++;
  double t = own_time(rk);
  if (isfinite(t)) wake_at(r, rk->idx, t);
}

/* Phase: wait for the network or the next timer, whichever comes first; *now is the clock after
 * it. Whether an executor event happened (a flow ended, or one of its timers fell due). */
static bool poll_network(struct rp *r, double *now)
{
  bool event = exec_catch_up(r, *now);
  double next = ic_exec_next_event_s(r->x);
  if (r->nheap && r->heap[0].t < next) next = r->heap[0].t;
  struct npu_xfer *const *xs;
  size_t n = ic_exec_xfers(r->x, &xs);
  if (n) {
    ssize_t k = npu_xfer_wait_any(xs, n, isfinite(next) ? (next > *now ? next - *now : 0) : -1);
    *now = npu_engine_clock();
    if (k >= 0) ic_exec_xfer_done(r->x, (size_t)k, *now);
    event |= k >= 0;
    event |= ic_exec_reap(r->x, *now) > 0;
  } else if (isfinite(next)) {
    if (next > *now) npu_engine_sleep(next - *now);
    *now = npu_engine_clock();
  } else if (!ic_exec_pending(r->x)) {
    r->rc = npu_diag_set(r->diag, r->job->path, 0, "plan.schedule",
                         "the step cannot finish: every rank waits (a schedule or replay bug)");
    return false;
  }
  return event | exec_catch_up(r, *now);
}

/* Phase: the ranks whose own time (compute, a formula transfer) has come. */
static void run_timers(struct rp *r, double now)
{
  while (r->nheap && r->heap[0].t <= now + EPS) {
    struct wake w = wake_pop(r);
    step_rank(r, &r->rk[w.idx], now);
  }
}

/* Phase: after an executor event, the ranks waiting on flows (a collective's end may come from
 * a flow, a latency or a delay of the executor). */
static void run_flow_waiters(struct rp *r, double now)
{
  for (int i = 0; i < r->nr; i++)
    if (waits_on_flows(r, &r->rk[i])) step_rank(r, &r->rk[i], now);
}

/*
 * The actor: probe the memoised collectives, set up, then the event loop. Ranks are looked at
 * again when their own compute ends (the heap), when a formula transfer they wait for ends
 * (woken by whoever learned its end), and after any flow completes (those waiting on flows).
 */
static void drive(void *arg)
{
  struct rp *r = arg;
  r->x = ic_exec_create(r->topo, &r->icp);
  if ((r->rc = probe_colls(r, r->res->program))) return;
  double t0 = npu_engine_clock();
  r->res->probe_s = t0;
  if ((r->rc = build_comms(r))) return;
  init_ranks(r);
  for (int i = 0; i < r->nr; i++) step_rank(r, &r->rk[i], t0);
  while (!r->rc && r->ndone < r->nr) {
    double now = npu_engine_clock();
    bool event = poll_network(r, &now);
    if (r->rc) break;
    run_timers(r, now);
    if (event) run_flow_waiters(r, now);
  }
  for (int i = 0; i < r->nr; i++) r->res->stages[i].end_s -= t0; /* the step starts at 0 */
}

/* ------------------------------------------------------------------ entry points */

static void trace_tracks(const struct rp *r)
{
  for (int i = 0; i < r->nr; i++) {
    char name[64];
    if (r->E > 1) snprintf(name, sizeof name, "stage %d, EP rank %d", i / r->E, i % r->E);
    else snprintf(name, sizeof name, "stage %d", i);
    npu_trace_name(r->trace, i, -1, name);
    npu_trace_name(r->trace, i, 0, "compute");
    npu_trace_name(r->trace, i, 1, "waits");
    npu_trace_name(r->trace, i, 2, "data parallel");
  }
}

static void rp_release(struct rp *r)
{
  const struct wl_plan *p = &r->job->plan;
  if (r->x) ic_exec_destroy(r->x);
  for (int i = 0; r->rk && i < r->nr; i++) {
    free(r->rk[i].ids);
    free(r->rk[i].paired);
  }
  free(r->rk);
  free(r->heap);
  wl__shared_release(&r->sh);
  struct ic_comm *sets[] = {r->dpc, r->epc, r->edpc};
  size_t counts[] = {(size_t)r->pp * p->tp, (size_t)r->pp * p->tp * r->edp, (size_t)r->pp * r->E * p->tp};
  for (int s = 0; s < 3; s++) {
    for (size_t i = 0; sets[s] && i < counts[s]; i++)
      if (sets[s][i].size) ic_comm_release(&sets[s][i]);
    free(sets[s]);
  }
  if (r->pair)
    for (size_t i = 0; i < (size_t)2 * (size_t)r->mchunks * (size_t)p->tp * (size_t)r->E; i++)
      if (r->pair[i].size) ic_comm_release(&r->pair[i]);
  free(r->pair);
  free(r->p2p);
  ic_topo_destroy(r->topo);
}

static void result_init(struct wl_result *res, struct wl_program *p)
{
  memset(res, 0, sizeof *res);
  res->program = p;
  res->kernels = p->kernels;
  res->nkernels = p->nkernels;
  res->colls = p->colls;
  res->ncolls = p->ncolls;
  res->kernels_costed = p->kernels_costed;
  res->kernel_cache_hits = p->kernel_cache_hits;
  res->nstages = p->nranks;
  res->ep = p->E;
  res->stages = npu_xcalloc((size_t)p->nranks, sizeof *res->stages);
}

int wl_replay_program(struct wl_program *p, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  const struct wl_job *job = p->job;
  result_init(res, p);
  struct rp r = {.job = job, .prog = p, .res = res, .trace = trace, .diag = diag};
  r.pp = p->pp;
  r.mb = p->mb;
  r.E = p->E;
  r.edp = p->edp;
  r.nr = p->nranks;
  r.mchunks = p->mchunks;
  int rc = ic_topo_create(&r.topo, &job->sys, job->devices, diag);
  if (!rc) {
    ic_params_default(&r.icp);
    struct npu_buf xml = {0};
    ic_platform_xml(r.topo, &xml, NULL);
    rc = npu_engine_init(npu_buf_str(&xml), diag);
    npu_buf_release(&xml);
  }
  if (!rc) {
    r.p2p = npu_xcalloc((size_t)2 * (size_t)(r.mchunks > 1 ? r.mchunks - 1 : 1) * (size_t)r.mb * (size_t)r.E,
                        sizeof *r.p2p);
    r.pair = npu_xcalloc((size_t)2 * (size_t)r.mchunks * (size_t)job->plan.tp * (size_t)r.E, sizeof *r.pair);
    if (trace) trace_tracks(&r);
    npu_engine_spawn("replay", npu_engine_host("r0"), drive, &r);
    npu_engine_run();
    rc = r.rc;
    if (!rc) wl__results_finish(p, res);
  }
  rp_release(&r);
  return rc;
}

int wl_replay(struct wl_job *job, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  memset(res, 0, sizeof *res);
  struct wl_program *p;
  int rc = wl_program_create(&p, job, diag); /* kernels and experts costed: before the engine */
  if (!rc) {
    rc = wl_replay_program(p, trace, res, diag);
    job->kernels = p->kernels;
    job->nkernels = p->nkernels;
    job->colls = p->colls;
    job->ncolls = p->ncolls;
  }
  clock_gettime(CLOCK_MONOTONIC, &w1);
  res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
  return rc;
}

void wl_result_release(struct wl_result *res)
{
  free(res->stages);
  res->stages = NULL;
  wl_program_destroy(res->program);
  res->program = NULL;
  res->kernels = NULL;
  res->colls = NULL;
}
