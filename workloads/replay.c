/*
 * replay.c - a training step on the cluster: one SimGrid actor drives every replay rank's
 * program (workloads/schedule.h) as a state machine over simulated time.
 *
 * Replay ranks. Ranks that do the same work at the same time are replayed once: one replay rank
 * per pipeline stage in a dense model (it stands for the stage's tp x cp x dp ranks); in an MoE
 * model one per (stage, EP index), since the experts a rank holds receive different numbers of
 * tokens (it stands for the tp x edp ranks of that EP index).
 *
 * Slots and steps. A replay rank runs the slots of its schedule in order (a micro-batch's
 * forward, backward, input-gradient or weight-gradient pass through one model chunk). A slot
 * first waits for its input from the neighbouring stage, then runs its steps: compute (the
 * segments of expand.c: kernels from the cost cache and memoised TP/CP collectives, or a
 * rank's experts for its routed tokens), collectives it joins and waits for (the EP
 * all-to-alls, which every replay rank of the EP group joins), collectives it only posts
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

#include "arch/derived.h"
#include "common/err.h"
#include "engine/engine.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/platform.h"
#include "interconnect/topo.h"
#include "ops/cost_cache.h"
#include "workloads/expand.h"
#include "workloads/routing.h"
#include "workloads/schedule.h"

#define EPS 1e-12

enum st_state { ST_READY, ST_WAIT_RECV, ST_STEP, ST_RUN, ST_WAITC, ST_WAIT_DP, ST_OPT, ST_WAIT_AG, ST_DONE };

/* One pipeline transfer (all TP ranks of a stage to their counterparts). */
struct p2p {
  int first_id, n;       /* executor instances first_id .. first_id + n - 1; n = 0: not created */
  double send_s;         /* when the sender joined (NAN: not yet) */
  double formula_s;      /* run.network = formula: the transfer's time, alone on its route */
  int to_idx;            /* the receiving replay rank */
  bool done;
  double done_s;
};

/* A collective several replay ranks take part in (an EP all-to-all, a DP bucket, a gather):
 * n consecutive executor instances, one per physical group it stands for. */
struct shared {
  uint64_t key;          /* 0: empty slot */
  int first, n;
  int joined;            /* replay ranks that joined */
  int members;           /* replay ranks that will join */
  int released;          /* members done with it */
  double formula_s;      /* run.network = formula (all-to-alls): time once the last member joined */
  double last_join;      /* ... and when that was */
  double *matrix;        /* AllToAllV sizes, owned (the executor borrows it) */
};

enum step_kind { K_RUN, K_WAIT };

struct step {
  uint8_t kind, cat;     /* enum step_kind / step_kind2; cat: where a wait counts */
  bool pair;             /* K_A2A inside a DualPipe F&B pair */
  const struct wl_seg *seg; /* K_RUN: a segment, or NULL with dur */
  double dur, flops;     /* K_RUN without a segment: the rank's experts */
  int sh;
  int layer, mb, which;  /* K_A2A; K_GATHER: which = piece, layer = a next piece exists */
  double params, eparams;/* K_BUCKET, K_GATHER */
};

struct rank {
  int s, e;              /* pipeline stage, EP index */
  int idx;               /* s x E + e */
  struct wl_slot *prog;
  size_t n, pc;
  enum st_state st;
  double since;          /* when the current wait began */
  double run_end;
  int wait;              /* p2p index waited on */
  int waitsh;            /* shared collective waited on */
  bool recv_ok;          /* the current slot's inputs have arrived */
  struct step *steps;
  int nsteps, sk, cap_steps;
  int *ids;              /* shared collectives to wait for before the optimizer */
  int nids, capids;
  int buckets;           /* gradient buckets posted (the shared key's sequence number) */
  double bucket_acc, ebucket_acc; /* dense and expert parameters not yet in a bucket */
  int gathers;           /* ZeRO-3 gathers posted */
  int next_gather;       /* ZeRO-3: the next piece's gather, posted ahead */
  int *paired;           /* a DualPipe pair's all-to-alls, waited for at its end */
  int npaired, cap_paired;
  bool pair_wait;
  int waitcat;
  double slot_start;
  struct wl_stage_result *res;
};

struct rp {
  struct wl_job *job;
  struct wl_result *res;
  struct npu_trace *trace;
  struct op_cache *cache;
  struct ic_topo *topo;
  struct ic_params icp;
  struct ic_exec *x;
  struct rank *rk;
  int nr, E, pp, chunks, mchunks, mb, edp;
  struct p2p *p2p;       /* [dir][boundary][mb] */
  struct ic_comm *pair;  /* [boundary][dir][tp]: 2-rank communicators for sends, built on demand */
  struct shared *sh;     /* every shared collective of the step, in creation order: a handle
                            (index) stays valid for the whole step */
  size_t cap_sh, nsh;
  int *shix;             /* open-addressing index: key -> handle, -1 empty */
  size_t cap_ix;
  struct ic_comm *dpc;   /* per stage x tp: the DP (x CP) group */
  struct ic_comm *epc;   /* per stage x tp x edp: the EP group */
  struct ic_comm *edpc;  /* per stage x tp x ep: the expert data-parallel group */
  struct wake { double t; int idx; } *heap; /* replay ranks to look at again, by time */
  size_t nheap, capheap;
  int ndone;
  const struct wl_routing_cfg *routing;
  struct wl_route *routes; /* [layer][mb], drawn on first use */
  bool *have;
  int rc;
  struct npu_diag *diag;
};

/* ------------------------------------------------------------------ geometry */

static int phys_rank(const struct rp *r, int stage, int tp, int cp, int dp)
{
  struct wl_coord c = {{0}};
  c.c[WL_DIM_TP] = tp;
  c.c[WL_DIM_CP] = cp;
  c.c[WL_DIM_DP] = dp;
  c.c[WL_DIM_PP] = stage;
  return wl_plan_rank(&r->job->plan, &c);
}

/* The rank of index ci (0 .. cp x dp - 1) of the expert layout of (stage, tp): EP varies fastest,
 * over the dp x cp ranks (cp faster than dp, as in Megatron's tp-cp-ep-dp-pp). */
static int ep_rank(const struct rp *r, int stage, int tp, int ci)
{
  int cp = r->job->plan.cp;
  return phys_rank(r, stage, tp, ci % cp, ci / cp);
}

/* The rank running model chunk k for micro-batch m (DualPipe depends on m). */
static int stage_of(const struct rp *r, int k, int m)
{
  int st, ch;
  wl_schedule_locate((enum wl_schedule)r->job->plan.schedule, r->pp, r->job->plan.vpp, r->mb, m, k, &st, &ch);
  return st;
}

static int model_chunk(const struct rp *r, const struct rank *rk, const struct wl_slot *sl)
{
  return wl_schedule_model_chunk((enum wl_schedule)r->job->plan.schedule, r->pp, r->job->plan.vpp, rk->s, sl->chunk);
}

/* Each EP index has its own transfers: replay rank (s, e) stands for dp coordinate e (and its
 * expert data-parallel replicas), whose neighbours in the pipeline have the same coordinate. */
static struct p2p *p2p_at(struct rp *r, int dir, int boundary, int mb, int e)
{
  return &r->p2p[(((size_t)dir * (size_t)(r->mchunks - 1) + (size_t)boundary) * (size_t)r->mb + (size_t)mb) *
                     (size_t)r->E + (size_t)e];
}

static bool moe(const struct rp *r)
{
  return r->job->model.moe.experts > 0;
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

static bool formula(const struct rp *r)
{
  return r->job->run.network == 1;
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

static uint64_t mix(uint64_t h)
{
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

/* The shared collective of key, or -1 if it does not exist yet. */
static int shared_find(struct rp *r, uint64_t key)
{
  if (!r->cap_ix) return -1;
  size_t i = mix(key) & (r->cap_ix - 1);
  while (r->shix[i] >= 0) {
    if (r->sh[r->shix[i]].key == key) return r->shix[i];
    i = (i + 1) & (r->cap_ix - 1);
  }
  return -1;
}

static void shared_index(struct rp *r, int h)
{
  size_t i = mix(r->sh[h].key) & (r->cap_ix - 1);
  while (r->shix[i] >= 0) i = (i + 1) & (r->cap_ix - 1);
  r->shix[i] = h;
}

/* A new shared collective of key (not there yet); its handle. Entries are never removed: a
 * finished one keeps its key (later lookups find it done) and frees its executor state. */
static int shared_add(struct rp *r, uint64_t key)
{
  if (r->nsh == r->cap_sh) {
    r->cap_sh = r->cap_sh ? 2 * r->cap_sh : 1024;
    r->sh = npu_xrealloc(r->sh, r->cap_sh * sizeof *r->sh);
  }
  int h = (int)r->nsh++;
  memset(&r->sh[h], 0, sizeof r->sh[h]);
  r->sh[h].key = key;
  r->sh[h].first = -1;
  r->sh[h].formula_s = -1;
  if (2 * r->nsh > r->cap_ix) { /* grow the index: handles do not move */
    free(r->shix);
    r->cap_ix = r->cap_ix ? 2 * r->cap_ix : 2048;
    r->shix = npu_xmalloc(r->cap_ix * sizeof *r->shix);
    for (size_t k = 0; k < r->cap_ix; k++) r->shix[k] = -1;
    for (size_t k = 0; k < r->nsh; k++) shared_index(r, (int)k);
  } else {
    shared_index(r, h);
  }
  return h;
}

static bool shared_done(struct rp *r, const struct shared *s)
{
  if (s->formula_s >= 0 && s->n == 0 && s->members) /* a formula all-to-all */
    return s->joined >= s->members && npu_engine_clock() + EPS >= s->last_join + s->formula_s;
  if (s->first < 0) return true;
  for (int i = 0; i < s->n; i++)
    if (!ic_exec_done(r->x, s->first + i)) return false;
  return true;
}

/* Called by each member once it no longer needs the result; the last one frees it. */
static void shared_drop(struct rp *r, int h)
{
  struct shared *s = &r->sh[h];
  if (++s->released < s->members) return;
  for (int i = 0; i < s->n && s->first >= 0; i++) ic_exec_release(r->x, s->first + i);
  free(s->matrix);
  s->matrix = NULL;
  /* the entry stays, done, under its key (its handle may still be held) */
  s->first = -1;
}

/* Keys: kind in the low 4 bits, then stage, rank-specific index and sequence numbers. */
enum { KEY_A2A = 1, KEY_BUCKET, KEY_EBUCKET, KEY_GATHER, KEY_EGATHER, KEY_PGATHER };

static uint64_t key_of(int kind, uint64_t a, uint64_t b, uint64_t c)
{
  return (((c * 1000003ull + b) * 1000033ull + a) << 4 | (uint64_t)kind) | 1ull << 63;
}

/* ------------------------------------------------------------------ pipeline transfers */

static struct p2p *p2p_get(struct rp *r, int dir, int b, int mb, int e)
{
  struct p2p *p = p2p_at(r, dir, b, mb, e);
  if (p->n != 0 || r->rc) return p;
  const struct wl_job *j = r->job;
  int from = stage_of(r, dir ? b + 1 : b, mb), to = stage_of(r, dir ? b : b + 1, mb), t = j->plan.tp;
  /* each TP rank sends its share: T h / t (sequence parallel, or Megatron's scatter-gather) */
  double bytes = (double)j->plan.micro_batch * (j->model.seq_len / j->plan.cp) * j->model.hidden * 2.0 / t;
  p->first_id = -1;
  p->send_s = NAN;
  if (formula(r)) { /* the TP ranks' transfers side by side: as one, alone on its route */
    p->formula_s = transfer_s(r, ep_rank(r, from, 0, e), ep_rank(r, to, 0, e), bytes);
    p->to_idx = to * r->E + e;
    p->n = -1;
    return p;
  }
  for (int i = 0; i < t; i++) {
    struct ic_comm *c = &r->pair[(((size_t)b * 2 + (size_t)dir) * (size_t)t + (size_t)i) * (size_t)r->E + (size_t)e];
    int a = ep_rank(r, from, i, e), z = ep_rank(r, to, i, e);
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
    NPU_ASSERT(id == p->first_id + i);
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

/* The transfer a slot waits for before it starts (NULL if none). */
static struct p2p *slot_input(struct rp *r, const struct rank *rk, const struct wl_slot *sl)
{
  int k = model_chunk(r, rk, sl), m = (int)sl->mb;
  if (sl->phase == WL_PH_F) return k > 0 && stage_of(r, k - 1, m) != rk->s ? p2p_get(r, 0, k - 1, m, rk->e) : NULL;
  if (sl->phase == WL_PH_W) return NULL;
  return k < r->mchunks - 1 && stage_of(r, k + 1, m) != rk->s ? p2p_get(r, 1, k, m, rk->e) : NULL;
}

/* The transfer a slot sends when it ends (NULL if none). */
static struct p2p *slot_output(struct rp *r, const struct rank *rk, const struct wl_slot *sl)
{
  int k = model_chunk(r, rk, sl), m = (int)sl->mb;
  if (sl->phase == WL_PH_F)
    return k < r->mchunks - 1 && stage_of(r, k + 1, m) != rk->s ? p2p_get(r, 0, k, m, rk->e) : NULL;
  if (sl->phase == WL_PH_W) return NULL;
  return k > 0 && stage_of(r, k - 1, m) != rk->s ? p2p_get(r, 1, k - 1, m, rk->e) : NULL;
}

/* ------------------------------------------------------------------ data-parallel collectives */

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
  int h = shared_find(r, key);
  if (h < 0) {
    h = shared_add(r, key);
    struct shared *s = &r->sh[h];
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
  struct shared *s = &r->sh[h];
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

static bool zero3(const struct rp *r)
{
  return r->job->plan.zero >= 3 && r->job->plan.dp * r->job->plan.cp > 1;
}

/* A dense gradient bucket of n parameters (fp32, Megatron's main_grad) over the stage's DP
 * groups: reduce-scatter with ZeRO >= 1, else all-reduce; waited for before the optimizer. */
static void post_bucket(struct rp *r, struct rank *rk, double n, double t)
{
  const struct wl_plan *p = &r->job->plan;
  if (p->dp * p->cp < 2 || n <= 0) return;
  enum ic_op op = p->zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE;
  int h = join_shared(r, rk, key_of(KEY_BUCKET, (uint64_t)rk->s, 0, (uint64_t)rk->buckets++), op, n * 4,
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
  int h = join_shared(r, rk, key_of(KEY_EBUCKET, (uint64_t)rk->s, (uint64_t)rk->e, (uint64_t)rk->buckets++), op,
                      n * 4, &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->tp], p->tp, 1, JOIN_ALL, t, NULL);
  wait_later(rk, h);
}

/* ------------------------------------------------------------------ MoE: routing and experts */

/* Tokens of one micro-batch one rank routes (the sequence-parallel share). */
static double moe_tokens(const struct rp *r)
{
  const struct wl_plan *p = &r->job->plan;
  return (double)p->micro_batch * (r->job->model.seq_len / p->cp) / (p->sp ? p->tp : 1);
}

/* The routing of a layer and micro-batch (token copies EP rank i sends to EP rank j), drawn
 * once and kept for the step; NULL after an error. */
static const struct wl_route *route(struct rp *r, int layer, int mb)
{
  size_t i = (size_t)layer * (size_t)r->mb + (size_t)mb;
  if (!r->have[i]) {
    int rc = wl_route_draw(r->routing, &r->job->model, r->E, moe_tokens(r), r->job->run.seed, layer, mb,
                           &r->routes[i], r->diag);
    if (rc) {
      if (!r->rc) r->rc = rc;
      return NULL;
    }
    r->have[i] = true;
  }
  return &r->routes[i];
}

/* The EP all-to-all of (layer, mb, which: 0 dispatch, 1 combine, 2 combine^T, 3 dispatch^T). */
static int join_a2a(struct rp *r, struct rank *rk, int layer, int mb, int which, double t, double *tokens_in)
{
  const struct wl_plan *p = &r->job->plan;
  const struct wl_route *rt = route(r, layer, mb);
  if (!rt) return -1;
  int E = r->E;
  /* dispatch sends rows to the experts' ranks, combine sends them back: the transpose */
  double copy = r->job->model.hidden * 2.0, *m = npu_xmalloc((size_t)E * E * sizeof *m);
  bool back = which == 1 || which == 3;
  for (int i = 0; i < E; i++)
    for (int k = 0; k < E; k++) m[(size_t)i * E + k] = copy * (back ? rt->matrix[(size_t)k * E + i] : rt->matrix[(size_t)i * E + k]);
  if (tokens_in) {
    *tokens_in = 0;
    for (int i = 0; i < E; i++) *tokens_in += rt->matrix[(size_t)i * E + rk->e];
  }
  double total = 0;
  for (int i = 0; i < E * E; i++) total += m[i];
  uint64_t key = key_of(KEY_A2A, (uint64_t)rk->s, (uint64_t)(layer * 4 + which), (uint64_t)mb);
  if (formula(r)) {
    int h = shared_find(r, key);
    if (h < 0) {
      h = shared_add(r, key);
      r->sh[h].members = E;
      r->sh[h].formula_s = a2a_formula_s(r, &r->epc[(size_t)rk->s * p->tp * r->edp], m);
    }
    free(m);
    struct shared *s = &r->sh[h];
    s->joined++;
    if (t > s->last_join) s->last_join = t;
    if (s->joined == s->members) /* its end is known now: wake the members at it */
      for (int e = 0; e < E; e++) wake_at(r, rk->s * r->E + e, s->last_join + s->formula_s);
    return h;
  }
  return join_shared(r, rk, key, IC_OP_ALLTOALLV, total / E, &r->epc[(size_t)rk->s * p->tp * r->edp],
                     p->tp * r->edp, E, JOIN_EP, t, m);
}

/* ------------------------------------------------------------------ slot programs */

/*
 * Steps of a slot:
 *   K_RUN     the compute stream runs a segment (its items) or the rank's experts (dur)
 *   K_A2A     join the EP all-to-all (layer, mb, which) now; wait for it, or (in a DualPipe F&B
 *             pair) wait at the pair's end (K_WAIT of the same collective)
 *   K_BUCKET  post gradient buckets of `params` dense and `eparams` expert parameters
 *   K_GATHER  ZeRO-3: post the all-gather of piece q's parameters (`params`) if not posted yet,
 *             post piece q+1's, then wait for piece q's
 */
enum step_kind2 { K_A2A = K_WAIT + 1, K_BUCKET, K_GATHER };

static struct step *add_step(struct rank *rk, int kind, enum wl_cat cat)
{
  if (rk->nsteps == rk->cap_steps) {
    rk->cap_steps = rk->cap_steps ? 2 * rk->cap_steps : 64;
    rk->steps = npu_xrealloc(rk->steps, (size_t)rk->cap_steps * sizeof *rk->steps);
  }
  struct step *s = &rk->steps[rk->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = (uint8_t)kind;
  s->cat = (uint8_t)cat;
  s->sh = -1;
  return s;
}

static void run_seg(struct rank *rk, const struct wl_seg *sg)
{
  if (sg->nitems) add_step(rk, K_RUN, WL_CAT_GEMM)->seg = sg;
}

static void run_experts(struct rank *rk, double dur, double flops)
{
  struct step *s = add_step(rk, K_RUN, WL_CAT_GEMM);
  s->dur = dur;
  s->flops = flops;
}

static void a2a_step(const struct rp *r, struct rank *rk, int layer, int mb, int which, bool pair)
{
  if (r->E < 2) return; /* ep 1: every expert is local, the tokens stay */
  struct step *s = add_step(rk, K_A2A, WL_CAT_EP);
  s->layer = layer;
  s->mb = mb;
  s->which = which;
  s->pair = pair;
}

/*
 * Append one slot's steps. Pieces (embedding, layers, head) run in layer order for a forward
 * and in reverse for backward passes: F runs forwards; BI input gradients; W weight gradients;
 * B both for each piece in turn. In the last micro-batch the pass that finishes a piece's
 * weight gradients adds them to the buckets.
 */
static void build_slot(struct rp *r, struct rank *rk, const struct wl_slot *sl, bool pair)
{
  const struct wl_job *j = r->job;
  int k = model_chunk(r, rk, sl), mb = (int)sl->mb;
  bool first = k == 0, last = k == r->mchunks - 1, fwd = sl->phase == WL_PH_F, z3 = zero3(r);
  int n = wl_plan_chunk_layers(&j->plan, j->model.layers, r->mchunks, k);
  int l0 = wl_plan_chunk_first_layer(&j->plan, j->model.layers, r->mchunks, k);
  bool grads = (sl->phase == WL_PH_B || sl->phase == WL_PH_W) && mb == r->mb - 1 && j->plan.overlap_grad_reduce && !z3;
  double emb = (double)j->model.vocab * j->model.hidden / j->plan.tp, head = emb + j->model.hidden;
  int np = n + (first ? 1 : 0) + (last ? 1 : 0);
  for (int q = 0; q < np; q++) {
    int pos = fwd ? q : np - 1 - q; /* position in layer order (the embedding first) */
    bool is_emb = first && pos == 0, is_head = last && pos == np - 1;
    int layer = l0 + pos - (first ? 1 : 0);
    bool is_moe = !is_emb && !is_head && wl_model_layer_is_moe(&j->model, layer);
    double params = is_emb ? emb : head, eparams = 0;
    if (!is_emb && !is_head) wl_layer_rank_params(j, layer, &params, &eparams); /* experts / ep on this rank */
    if (z3) {
      struct step *g = add_step(rk, K_GATHER, WL_CAT_DP);
      g->params = params + eparams * j->plan.ep / (j->plan.dp * j->plan.cp); /* experts: over their own group */
      g->which = q;
      g->layer = q + 1 < np ? 1 : 0; /* whether a next piece exists */
    }
    double f = 0, bi = 0, w = 0, ff = 0;
    if (is_moe) {
      double in = 0;
      const struct wl_route *rt = route(r, layer, mb);
      if (rt) {
        for (int i = 0; i < r->E; i++) in += rt->matrix[(size_t)i * r->E + rk->e];
        int rc = wl_expert_cost(r->job, r->cache, in, &f, &bi, &w, &ff, r->diag);
        if (rc && !r->rc) r->rc = rc;
      }
    }
    if (fwd) {
      if (is_emb) run_seg(rk, &j->seg[WL_SEG_EMBED_F]);
      else if (is_head) run_seg(rk, &j->seg[WL_SEG_HEAD_F]);
      else if (!is_moe) run_seg(rk, &j->seg[WL_SEG_LAYER_F]);
      else {
        run_seg(rk, &j->seg[WL_SEG_MOE_PRE_F]);
        a2a_step(r, rk, layer, mb, 0, pair);
        run_experts(rk, f, 0);
        a2a_step(r, rk, layer, mb, 1, pair);
        run_seg(rk, &j->seg[WL_SEG_MOE_POST_F]);
      }
    } else {
      bool do_bi = sl->phase != WL_PH_W, do_w = sl->phase != WL_PH_BI;
      if (is_emb) {
        if (do_bi) run_seg(rk, &j->seg[WL_SEG_EMBED_B]);
      } else if (is_head) {
        if (do_bi) run_seg(rk, &j->seg[WL_SEG_HEAD_BI]);
        if (do_w) run_seg(rk, &j->seg[WL_SEG_HEAD_W]);
      } else if (!is_moe) {
        if (do_bi) run_seg(rk, &j->seg[WL_SEG_LAYER_BI]);
        if (do_w) run_seg(rk, &j->seg[WL_SEG_LAYER_W]);
      } else {
        if (do_bi) {
          run_seg(rk, &j->seg[WL_SEG_MOE_POST_BI]);
          a2a_step(r, rk, layer, mb, 2, pair);
          run_experts(rk, bi, 0);
          a2a_step(r, rk, layer, mb, 3, pair);
          run_seg(rk, &j->seg[WL_SEG_MOE_PRE_BI]);
        }
        if (do_w) {
          run_seg(rk, &j->seg[WL_SEG_MOE_W]);
          run_experts(rk, w, 0);
        }
      }
      if (grads) {
        rk->bucket_acc += params;
        rk->ebucket_acc += eparams;
        if (rk->bucket_acc >= j->plan.bucket_params || q == np - 1) {
          struct step *b = add_step(rk, K_BUCKET, WL_CAT_DP);
          b->params = rk->bucket_acc;
          b->eparams = rk->ebucket_acc;
          rk->bucket_acc = rk->ebucket_acc = 0;
        }
      }
    }
  }
}

/* Start the slot at pc (and its F&B partner): build its steps. */
static void start_slot(struct rp *r, struct rank *rk, double now)
{
  const struct wl_slot *sl = &rk->prog[rk->pc];
  bool pair = sl->overlap && rk->pc + 1 < rk->n;
  rk->nsteps = rk->sk = rk->npaired = 0;
  build_slot(r, rk, sl, pair);
  if (pair) build_slot(r, rk, &rk->prog[rk->pc + 1], true);
  if (r->trace) npu_trace_add(r->trace, rk->idx, 0, (const char *[]){"F", "B", "Bi", "W"}[sl->phase], now, 0);
  rk->slot_start = now;
  rk->st = ST_STEP;
}

/* ------------------------------------------------------------------ the state machine */

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

/* ZeRO-3: the all-gather of `params` parameters of this rank's current slot, piece q. */
static int post_gather(struct rp *r, struct rank *rk, double params, double t)
{
  const struct wl_plan *p = &r->job->plan;
  return join_shared(r, rk, key_of(KEY_GATHER, (uint64_t)rk->s, 0, (uint64_t)rk->gathers++), IC_OP_ALLGATHER,
                     params * 2, &r->dpc[(size_t)rk->s * p->tp], p->tp, r->E, JOIN_DP, t, NULL);
}

/* Run the current slot's steps from sk at `now` until one needs time or a collective. */
static void run_steps(struct rp *r, struct rank *rk, double now)
{
  for (;;) {
    if (r->rc) return;
    if (rk->sk == rk->nsteps) {
      if (rk->npaired) { /* a DualPipe pair: its all-to-alls' ends */
        int h = rk->paired[--rk->npaired];
        if (!shared_done(r, &r->sh[h])) {
          wait_on(rk, h, WL_CAT_EP, now);
          rk->sk--; /* come back here */
          rk->st = ST_WAITC;
          rk->pair_wait = true;
          return;
        }
        shared_drop(r, h);
        continue;
      }
      const struct wl_slot *sl = &rk->prog[rk->pc];
      bool pair = sl->overlap && rk->pc + 1 < rk->n;
      for (int q = 0; q <= (pair ? 1 : 0); q++) {
        struct p2p *out = slot_output(r, rk, &rk->prog[rk->pc]);
        if (out) p2p_join(r, out, 0, now);
        rk->pc++;
      }
      rk->recv_ok = false;
      rk->st = ST_READY;
      return;
    }
    struct step *s = &rk->steps[rk->sk];
    switch (s->kind) {
    case K_RUN: {
      double d = s->seg ? s->seg->time_s : s->dur;
      if (s->seg) add_seg(rk, s->seg);
      else {
        rk->res->cat_s[WL_CAT_GEMM] += d;
        rk->res->flops += s->flops;
        rk->res->model_flops += s->flops;
      }
      if (r->trace && d > 0) npu_trace_add(r->trace, rk->idx, 0, "compute", now, d);
      rk->run_end = now + d;
      rk->sk++;
      rk->st = ST_RUN;
      return;
    }
    case K_A2A: {
      int h = join_a2a(r, rk, s->layer, s->mb, s->which, now, NULL);
      rk->sk++;
      if (h < 0) return;
      if (s->pair) { /* waited for at the pair's end */
        if (rk->npaired == rk->cap_paired) {
          rk->cap_paired = rk->cap_paired ? 2 * rk->cap_paired : 16;
          rk->paired = npu_xrealloc(rk->paired, (size_t)rk->cap_paired * sizeof *rk->paired);
        }
        rk->paired[rk->npaired++] = h;
        break;
      }
      if (!shared_done(r, &r->sh[h])) {
        wait_on(rk, h, WL_CAT_EP, now);
        return;
      }
      shared_drop(r, h);
      break;
    }
    case K_BUCKET:
      post_bucket(r, rk, s->params, now);
      post_ebucket(r, rk, s->eparams, now);
      rk->sk++;
      break;
    case K_GATHER: {
      /* piece q's gather (posted by piece q-1, or now for the first), then piece q+1's */
      int h = s->which == 0 ? post_gather(r, rk, s->params, now) : rk->next_gather;
      rk->next_gather = -1;
      if (s->layer) { /* a next piece: its K_GATHER step follows this piece's compute */
        for (int i = rk->sk + 1; i < rk->nsteps; i++)
          if (rk->steps[i].kind == K_GATHER) {
            rk->next_gather = post_gather(r, rk, rk->steps[i].params, now);
            break;
          }
      }
      rk->sk++;
      if (h < 0) break;
      if (!shared_done(r, &r->sh[h])) {
        wait_on(rk, h, WL_CAT_DP, now);
        return;
      }
      shared_drop(r, h);
      break;
    }
    default: NPU_PANIC("bad step %d", s->kind);
    }
  }
}

static void advance(struct rp *r, struct rank *rk, double now)
{
  const struct wl_job *j = r->job;
  for (;;) {
    if (r->rc) return;
    switch (rk->st) {
    case ST_RUN:
      if (rk->run_end > now + EPS) return;
      rk->st = ST_STEP;
      run_steps(r, rk, rk->run_end > now ? rk->run_end : now);
      if (rk->st == ST_STEP) return;
      break;
    case ST_STEP:
      run_steps(r, rk, now);
      if (rk->st == ST_STEP) return;
      break;
    case ST_WAITC: {
      if (!shared_done(r, &r->sh[rk->waitsh])) return;
      rk->res->cat_s[rk->waitcat] += now - rk->since;
      if (r->trace && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait collective", rk->since, now - rk->since);
      shared_drop(r, rk->waitsh);
      if (rk->pair_wait) {
        rk->pair_wait = false;
        rk->sk++; /* undo the step back */
      }
      rk->st = ST_STEP;
      break;
    }
    case ST_READY: {
      if (rk->pc == rk->n) {
        if (!j->plan.overlap_grad_reduce && !zero3(r)) {
          post_bucket(r, rk, j->stage_params[rk->s], now);
          post_ebucket(r, rk, j->stage_eparams[rk->s], now);
        }
        rk->since = now;
        rk->st = ST_WAIT_DP;
        break;
      }
      const struct wl_slot *sl = &rk->prog[rk->pc];
      bool pair = sl->overlap && rk->pc + 1 < rk->n, waiting = false;
      if (!rk->recv_ok) {
        for (int q = 0; q <= (pair ? 1 : 0) && !waiting; q++) { /* the inputs of the slot and its partner */
          struct p2p *in = slot_input(r, rk, &rk->prog[rk->pc + (size_t)q]);
          if (r->rc) return;
          double end;
          if (!in || p2p_done(r, in, &end)) continue;
          p2p_join(r, in, 1, now);
          rk->wait = (int)(in - r->p2p);
          rk->since = now;
          rk->st = ST_WAIT_RECV;
          waiting = true;
        }
        if (waiting) break;
        rk->recv_ok = true;
      }
      start_slot(r, rk, now);
      break;
    }
    case ST_WAIT_RECV: {
      struct p2p *p = &r->p2p[rk->wait];
      double end;
      if (!p2p_done(r, p, &end)) return;
      double sent = p->send_s > rk->since ? p->send_s : rk->since;
      rk->res->cat_s[WL_CAT_BUBBLE] += sent - rk->since;
      rk->res->cat_s[WL_CAT_PP] += (now > sent ? now : sent) - sent; /* now == end unless woken late */
      if (r->trace && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait input", rk->since, now - rk->since);
      rk->st = ST_READY; /* then the partner's input, if any */
      break;
    }
    case ST_WAIT_DP: {
      for (int i = 0; i < rk->nids; i++)
        if (!shared_done(r, &r->sh[rk->ids[i]])) return;
      for (int i = 0; i < rk->nids; i++) shared_drop(r, rk->ids[i]);
      rk->nids = 0;
      rk->res->cat_s[WL_CAT_DP] += now - rk->since;
      add_seg(rk, &j->optim[rk->s]);
      rk->run_end = now + j->optim[rk->s].time_s;
      if (r->trace) npu_trace_add(r->trace, rk->idx, 0, "optimizer", now, j->optim[rk->s].time_s);
      rk->st = ST_OPT;
      break;
    }
    case ST_OPT: {
      if (rk->run_end > now + EPS) return;
      double t = rk->run_end > now ? rk->run_end : now;
      if (j->plan.zero >= 1 && !zero3(r) && !j->plan.overlap_param_gather && j->plan.dp * j->plan.cp > 1) {
        const struct wl_plan *p = &j->plan;
        int h = join_shared(r, rk, key_of(KEY_PGATHER, (uint64_t)rk->s, 0, 0), IC_OP_ALLGATHER,
                            j->stage_params[rk->s] * 2, &r->dpc[(size_t)rk->s * p->tp], p->tp, r->E, JOIN_DP, t, NULL);
        wait_later(rk, h);
        if (r->edp > 1 && j->stage_eparams[rk->s] > 0) { /* experts: over their data-parallel group */
          h = join_shared(r, rk, key_of(KEY_PGATHER, (uint64_t)rk->s, (uint64_t)rk->e, 1), IC_OP_ALLGATHER,
                          j->stage_eparams[rk->s] * 2, &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->tp], p->tp,
                          1, JOIN_ALL, t, NULL);
          wait_later(rk, h);
        }
        rk->since = t;
        rk->st = ST_WAIT_AG;
      } else {
        rk->res->end_s = t;
        rk->st = ST_DONE;
      }
      break;
    }
    case ST_WAIT_AG:
      for (int i = 0; i < rk->nids; i++)
        if (!shared_done(r, &r->sh[rk->ids[i]])) return;
      for (int i = 0; i < rk->nids; i++) shared_drop(r, rk->ids[i]);
      rk->nids = 0;
      rk->res->cat_s[WL_CAT_DP] += now - rk->since;
      rk->res->end_s = now;
      rk->st = ST_DONE;
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
    c->time_s = res.time_s;
    snprintf(c->algo, sizeof c->algo, "%s", ic_algo_name(res.plan.algo));
    ic_exec_release(r->x, id);
    ic_comm_release(&comm);
  }
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
          for (int d = 0; d < p->dp; d++) ranks[m++] = phys_rank(r, s, t, c, d);
        rc = ic_comm_init(&r->dpc[(size_t)s * p->tp + t], ranks, n, r->topo, "plan.dp", r->diag);
      }
      for (int g = 0; r->E > 1 && g < r->edp && !rc; g++) {
        for (int e = 0; e < r->E; e++) ranks[e] = ep_rank(r, s, t, g * r->E + e);
        rc = ic_comm_init(&r->epc[((size_t)s * p->tp + t) * r->edp + g], ranks, r->E, r->topo, "plan.ep", r->diag);
      }
      for (int e = 0; r->E > 1 && r->edp > 1 && e < r->E && !rc; e++) {
        for (int g = 0; g < r->edp; g++) ranks[g] = ep_rank(r, s, t, g * r->E + e);
        rc = ic_comm_init(&r->edpc[((size_t)s * r->E + e) * p->tp + t], ranks, r->edp, r->topo, "plan.ep", r->diag);
      }
    }
  free(ranks);
  return rc;
}

static int build_ranks(struct rp *r)
{
  const struct wl_plan *p = &r->job->plan;
  r->rk = npu_xcalloc((size_t)r->nr, sizeof *r->rk);
  for (int s = 0; s < r->pp; s++) {
    struct wl_slot *prog;
    size_t n;
    int rc = wl_schedule_build((enum wl_schedule)p->schedule, r->pp, p->vpp, r->mb, s, &prog, &n, r->diag);
    if (rc) return rc;
    for (int e = 0; e < r->E; e++) {
      struct rank *rk = &r->rk[s * r->E + e];
      rk->s = s;
      rk->e = e;
      rk->idx = s * r->E + e;
      rk->next_gather = -1;
      rk->res = &r->res->stages[rk->idx];
      rk->res->stage = s;
      rk->res->ep = e;
      rk->n = n;
      rk->prog = npu_xmalloc(n * sizeof *prog);
      memcpy(rk->prog, prog, n * sizeof *prog);
    }
    free(prog);
  }
  return 0;
}

/* When rank rk next has something due by itself (compute ending), or INFINITY. */
static double own_time(const struct rank *rk)
{
  return rk->st == ST_RUN || rk->st == ST_OPT ? rk->run_end : INFINITY;
}

/* Whether rk waits for something only a flow's completion can end. */
static bool waits_on_flows(const struct rp *r, const struct rank *rk)
{
  switch (rk->st) {
  case ST_WAITC: return r->sh[rk->waitsh].formula_s < 0;
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

/*
 * The event loop. Ranks are looked at again when their own compute ends (the heap), when a
 * formula transfer they wait for ends (woken by whoever learned its end), and after any flow
 * completes (those waiting on flows).
 */
static void drive(void *arg)
{
  struct rp *r = arg;
  r->x = ic_exec_create(r->topo, &r->icp);
  if ((r->rc = probe_colls(r))) return;
  wl_sum_segments(r->job);
  double t0 = npu_engine_clock();
  r->res->probe_s = t0;
  if ((r->rc = build_comms(r)) || (r->rc = build_ranks(r))) return;
  for (int i = 0; i < r->nr; i++) step_rank(r, &r->rk[i], t0);
  while (!r->rc && r->ndone < r->nr) {
    double now = npu_engine_clock();
    bool event = exec_catch_up(r, now);
    double next = ic_exec_next_event_s(r->x);
    if (r->nheap && r->heap[0].t < next) next = r->heap[0].t;
    struct npu_xfer *const *xs;
    size_t n = ic_exec_xfers(r->x, &xs);
    if (n) {
      ssize_t k = npu_xfer_wait_any(xs, n, isfinite(next) ? (next > now ? next - now : 0) : -1);
      now = npu_engine_clock();
      if (k >= 0) ic_exec_xfer_done(r->x, (size_t)k, now);
      event |= k >= 0;
      event |= ic_exec_reap(r->x, now) > 0;
    } else if (isfinite(next)) {
      if (next > now) npu_engine_sleep(next - now);
      now = npu_engine_clock();
    } else if (!ic_exec_pending(r->x)) {
      r->rc = npu_diag_set(r->diag, r->job->path, 0, "plan.schedule",
                           "the step cannot finish: every rank waits (a schedule or replay bug)");
      break;
    }
    event |= exec_catch_up(r, now);
    while (r->nheap && r->heap[0].t <= now + EPS) {
      struct wake w = wake_pop(r);
      step_rank(r, &r->rk[w.idx], now);
    }
    /* a collective's end may come from a flow, a latency or a delay of the executor */
    if (event)
      for (int i = 0; i < r->nr; i++)
        if (waits_on_flows(r, &r->rk[i])) step_rank(r, &r->rk[i], now);
  }
  for (int i = 0; i < r->nr; i++) r->res->stages[i].end_s -= t0; /* the step starts at 0 */
}

/* ------------------------------------------------------------------ results */

/* Routing statistics over every MoE layer and micro-batch of the step (one EP group). */
static void moe_stats(struct rp *r)
{
  const struct wl_job *j = r->job;
  if (!moe(r)) return;
  double me = 0, mr = 0, dropped = 0, routed = 0;
  int n = 0;
  for (int l = 0; l < j->model.layers && !r->rc; l++) {
    if (!wl_model_layer_is_moe(&j->model, l)) continue;
    for (int m = 0; m < r->mb; m++) {
      const struct wl_route *rt = route(r, l, m);
      if (!rt) return;
      me += rt->max_mean_expert;
      mr += rt->max_mean_rank;
      dropped += rt->dropped;
      routed += moe_tokens(r) * r->E * j->model.moe.top_k;
      n++;
    }
  }
  r->res->moe_max_mean_expert = n ? me / n : 0;
  r->res->moe_max_mean_rank = n ? mr / n : 0;
  r->res->moe_dropped_fraction = routed > 0 ? dropped / routed : 0;
}

static void finish(struct rp *r)
{
  struct wl_job *j = r->job;
  struct wl_result *res = r->res;
  double step = 0;
  for (int i = 0; i < r->nr; i++)
    if (res->stages[i].end_s > step) {
      step = res->stages[i].end_s;
      res->slowest_stage = i;
    }
  res->step_s = step;
  /* each replay rank stands for tp x cp x dp / E physical ranks */
  double per = (double)j->plan.tp * j->plan.cp * j->plan.dp / r->E;
  for (int i = 0; i < r->nr; i++) {
    struct wl_stage_result *sr = &res->stages[i];
    sr->cat_s[WL_CAT_IDLE] += step - sr->end_s;
    res->hw_flops += (sr->flops - sr->model_flops) * per; /* recomputation */
    wl_memory_stage(&j->model, &j->plan, sr->stage, &sr->mem);
  }
  memcpy(res->cat_s, res->stages[res->slowest_stage].cat_s, sizeof res->cat_s);
  /* the schedule's bubble: the share of the step the least-waiting rank spends without work
   * (waiting for another stage, or finished early); for uniform stages every rank has the
   * closed form's (p - 1) slots, while more waiting on a rank is its stage's lighter load */
  double least = INFINITY;
  for (int i = 0; i < r->nr; i++) {
    double w = res->stages[i].cat_s[WL_CAT_BUBBLE] + res->stages[i].cat_s[WL_CAT_IDLE];
    if (w < least) least = w;
  }
  res->bubble_fraction = step > 0 && isfinite(least) ? least / step : 0;
  double tokens = (double)j->plan.global_batch * j->model.seq_len;
  res->tokens_per_s = tokens / step;
  res->model_flops = wl_model_flops(&j->model, tokens, false);
  res->hw_flops += res->model_flops; /* HFU: the model's FLOPs plus what recomputation adds */
  struct arch_derived dv;
  arch_derive(&j->sys, &dv);
  enum npu_dtype pd = j->plan.dtype == 1 ? NPU_DT_FP16 : NPU_DT_BF16; /* fp8 runs are judged against bf16 */
  res->peak_flops_per_s = dv.peak_flops_per_s[pd];
  res->mfu = res->model_flops / (step * j->devices * res->peak_flops_per_s);
  res->hfu = res->hw_flops / (step * j->devices * res->peak_flops_per_s);
  wl_memory_peak(&j->model, &j->plan, &res->peak_mem);
  res->oom = res->peak_mem.total_bytes > (double)j->sys.chip.hbm.size_bytes;
  moe_stats(r);
  int top = 0;
  for (int c = 1; c < WL_CAT_COUNT; c++)
    if (res->cat_s[c] > res->cat_s[top]) top = c;
  double compute = 0;
  for (int c = 0; c < WL_CAT_COUNT; c++)
    if (wl_cat_is_compute((enum wl_cat)c)) compute += res->cat_s[c];
  const struct wl_stage_result *sl = &res->stages[res->slowest_stage];
  char where[32];
  if (r->E > 1) snprintf(where, sizeof where, "stage %d EP rank %d", sl->stage, sl->ep);
  else snprintf(where, sizeof where, "stage %d", sl->stage);
  snprintf(res->bottleneck, sizeof res->bottleneck, "%s (%.0f%% of the step on %s; compute %.0f%%, bubble %.0f%%)",
           wl_cat_name((enum wl_cat)top), 100 * res->cat_s[top] / step, where, 100 * compute / step,
           100 * res->cat_s[WL_CAT_BUBBLE] / step);
}

int wl_replay(struct wl_job *job, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  memset(res, 0, sizeof *res);
  struct rp r = {.job = job, .res = res, .trace = trace, .diag = diag, .routing = &job->routing};
  r.pp = job->plan.pp;
  r.mb = job->microbatches;
  r.E = job->model.moe.experts ? job->plan.ep : 1;
  r.edp = job->plan.dp * job->plan.cp / r.E;
  r.nr = r.pp * r.E;
  r.chunks = wl_schedule_chunks((enum wl_schedule)job->plan.schedule, job->plan.vpp);
  r.mchunks = r.pp * job->plan.vpp;
  res->nstages = r.nr;
  res->ep = r.E;
  res->stages = npu_xcalloc((size_t)r.nr, sizeof *res->stages);
  if (job->model.moe.experts) {
    r.routes = npu_xcalloc((size_t)job->model.layers * (size_t)r.mb, sizeof *r.routes);
    r.have = npu_xcalloc((size_t)job->model.layers * (size_t)r.mb, sizeof *r.have);
  }
  /* kernels first: outside the engine (event-fidelity costs run in child processes) */
  wl_expand(job);
  r.cache = op_cache_open(job->run.cost_cache[0] ? job->run.cost_cache : NULL, stderr);
  int rc = wl_cost_kernels(job, r.cache, diag);
  if (!rc) rc = ic_topo_create(&r.topo, &job->sys, job->devices, diag);
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
    if (trace)
      for (int i = 0; i < r.nr; i++) {
        char name[64];
        if (r.E > 1) snprintf(name, sizeof name, "stage %d, EP rank %d", i / r.E, i % r.E);
        else snprintf(name, sizeof name, "stage %d", i);
        npu_trace_name(trace, i, -1, name);
        npu_trace_name(trace, i, 0, "compute");
        npu_trace_name(trace, i, 1, "waits");
        npu_trace_name(trace, i, 2, "data parallel");
      }
    npu_engine_spawn("replay", npu_engine_host("r0"), drive, &r);
    npu_engine_run();
    rc = r.rc;
    if (!rc) finish(&r);
  }
  size_t entries;
  uint64_t hits, misses;
  op_cache_stats(r.cache, &entries, &hits, &misses);
  res->kernels_costed = (size_t)misses;
  res->kernel_cache_hits = (size_t)hits;
  if (!rc && job->run.cost_cache[0]) op_cache_save(r.cache);
  op_cache_close(r.cache);
  if (r.x) ic_exec_destroy(r.x);
  for (int i = 0; r.rk && i < r.nr; i++) {
    free(r.rk[i].prog);
    free(r.rk[i].ids);
    free(r.rk[i].steps);
    free(r.rk[i].paired);
  }
  free(r.rk);
  free(r.heap);
  for (size_t i = 0; i < r.nsh; i++) free(r.sh[i].matrix);
  for (size_t i = 0; r.have && i < (size_t)job->model.layers * (size_t)r.mb; i++)
    if (r.have[i]) wl_route_release(&r.routes[i]);
  free(r.routes);
  free(r.have);
  free(r.sh);
  free(r.shix);
  struct ic_comm *sets[] = {r.dpc, r.epc, r.edpc};
  size_t counts[] = {(size_t)r.pp * job->plan.tp, (size_t)r.pp * job->plan.tp * r.edp, (size_t)r.pp * r.E * job->plan.tp};
  for (int s = 0; s < 3; s++) {
    for (size_t i = 0; sets[s] && i < counts[s]; i++)
      if (sets[s][i].size) ic_comm_release(&sets[s][i]);
    free(sets[s]);
  }
  if (r.pair)
    for (size_t i = 0; i < (size_t)2 * (size_t)r.mchunks * (size_t)job->plan.tp * (size_t)r.E; i++)
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
