/*
 * exec.c - runs collective schedules as flows from one actor, without blocking; the timing
 * rules are in exec.h. State per instance and per buffer loop: remaining dependencies of each
 * step, steps left per rank, which ranks have joined, and steps parked until a rank joins.
 * Timed things (joins, task overheads, delays, latencies) go through one heap; flows are
 * SimGrid transfers between the hosts of the step's link class.
 */
#include "interconnect/exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

enum ev_kind { EV_JOIN, EV_START, EV_DONE };

struct ev {
  double t;
  uint32_t inst, loop, id; /* EV_JOIN: id = rank */
  uint8_t kind;
};

struct park {
  uint32_t *ids;
  uint32_t n, cap;
};

struct loop {
  const struct ic_schedule *s;
  uint32_t *deps;       /* remaining dependencies per step */
  uint32_t *left;       /* steps not done per rank */
  uint8_t *joined;      /* per rank */
  struct park *park;    /* per rank: steps ready but for this rank's join */
  size_t steps_left;
  int njoined;          /* ranks that joined */
  bool live;            /* arrays allocated */
};

struct inst {
  struct ic_comm comm;
  struct ic_coll coll;
  struct ic_plan plan;
  struct ic_schedule *full, *last;
  int nloops;
  struct loop *loops;
  double *join_s, *end_s, *busy_s;
  int ranks_done;
  double link_key; /* ic_coll_step_bytes: where its node links' efficiency curve is read */
  bool released;
  struct ic_result res;
};

struct flight {
  uint32_t inst, loop, id;
};

struct work {
  uint32_t inst, loop, id;
  double t;
  uint8_t what; /* 0 ready, 1 complete, 2 join */
};

struct ic_exec {
  const struct ic_topo *topo;
  const struct ic_params *prm;
  struct inst **inst;
  int ninst, capinst;
  struct ev *heap;
  size_t nheap, capheap;
  struct npu_xfer **xs;
  struct flight *fl;
  size_t nfl, capfl;
  struct work *work;
  size_t nwork, capwork;
  sg_host_t *die, *nic; /* per platform rank, looked up on first use */
};

struct ic_exec *ic_exec_create(const struct ic_topo *t, const struct ic_params *p)
{
  struct ic_exec *x = npu_xcalloc(1, sizeof *x);
  x->topo = t;
  x->prm = p;
  int n = ic_topo_platform_ranks(t);
  x->die = npu_xcalloc((size_t)n, sizeof *x->die);
  x->nic = npu_xcalloc((size_t)n, sizeof *x->nic);
  return x;
}

static void free_loop(struct loop *l, int nranks)
{
  if (!l->live) return;
  for (int r = 0; r < nranks; r++) free(l->park[r].ids);
  free(l->park);
  free(l->deps);
  free(l->left);
  free(l->joined);
  l->live = false;
}

static void free_inst(struct inst *in)
{
  if (in->released) return;
  for (int l = 0; l < in->nloops; l++) free_loop(&in->loops[l], in->comm.size);
  free(in->loops);
  if (in->last != in->full) ic_schedule_destroy(in->last);
  ic_schedule_destroy(in->full);
  ic_comm_release(&in->comm);
  free(in->join_s);
  free(in->end_s);
  free(in->busy_s);
  in->released = true;
}

void ic_exec_destroy(struct ic_exec *x)
{
  if (!x) return;
  for (size_t i = 0; i < x->nfl; i++) npu_xfer_release(x->xs[i]);
  for (int i = 0; i < x->ninst; i++) {
    free_inst(x->inst[i]);
    free(x->inst[i]);
  }
  free(x->inst);
  free(x->heap);
  free(x->xs);
  free(x->fl);
  free(x->work);
  free(x->die);
  free(x->nic);
  free(x);
}

/* ---- heap of timed events, ordered by time then by (kind, instance, loop, id) ---- */

static bool ev_less(const struct ev *a, const struct ev *b)
{
  if (a->t != b->t) return a->t < b->t;
  if (a->kind != b->kind) return a->kind < b->kind;
  if (a->inst != b->inst) return a->inst < b->inst;
  if (a->loop != b->loop) return a->loop < b->loop;
  return a->id < b->id;
}

static void ev_push(struct ic_exec *x, struct ev e)
{
  if (x->nheap == x->capheap) {
    x->capheap = x->capheap ? 2 * x->capheap : 256;
    x->heap = npu_xrealloc(x->heap, x->capheap * sizeof *x->heap);
  }
  size_t i = x->nheap++;
  x->heap[i] = e;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (!ev_less(&x->heap[i], &x->heap[up])) break;
    struct ev tmp = x->heap[i];
    x->heap[i] = x->heap[up];
    x->heap[up] = tmp;
    i = up;
  }
}

static struct ev ev_pop(struct ic_exec *x)
{
  struct ev top = x->heap[0];
  x->heap[0] = x->heap[--x->nheap];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, s = i;
    if (l < x->nheap && ev_less(&x->heap[l], &x->heap[s])) s = l;
    if (l + 1 < x->nheap && ev_less(&x->heap[l + 1], &x->heap[s])) s = l + 1;
    if (s == i) break;
    struct ev tmp = x->heap[i];
    x->heap[i] = x->heap[s];
    x->heap[s] = tmp;
    i = s;
  }
  return top;
}

static void work_push(struct ic_exec *x, uint32_t inst, uint32_t loop, uint32_t id, double t,
                      uint8_t what)
{
  if (x->nwork == x->capwork) {
    x->capwork = x->capwork ? 2 * x->capwork : 256;
    x->work = npu_xrealloc(x->work, x->capwork * sizeof *x->work);
  }
  x->work[x->nwork++] = (struct work){inst, loop, id, t, what};
}

/* ---- instances ---- */

int ic_exec_start(struct ic_exec *x, const struct ic_comm *c, const struct ic_coll *coll,
                  struct npu_diag *diag)
{
  struct ic_plan plan;
  int rc = ic_plan_make(&plan, x->topo, c, coll, x->prm, diag);
  if (rc) return rc;
  struct inst *in = npu_xcalloc(1, sizeof *in);
  ic_comm_copy(&in->comm, c);
  in->coll = *coll;
  in->plan = plan;
  in->link_key = ic_coll_step_bytes(coll, c->size);
  bool bulk = coll->fidelity == IC_FIDELITY_BULK;
  if (bulk) {
    in->full = ic_schedule_build(x->topo, &in->comm, coll, &plan, x->prm, coll->bytes, true,
                                 plan.loops);
    in->last = in->full;
    in->nloops = 1;
  } else {
    in->full =
        ic_schedule_build(x->topo, &in->comm, coll, &plan, x->prm, plan.loop_bytes, false, 1);
    in->last = plan.last_bytes == plan.loop_bytes
                   ? in->full
                   : ic_schedule_build(x->topo, &in->comm, coll, &plan, x->prm, plan.last_bytes,
                                       false, 1);
    in->nloops = plan.loops;
  }
  int p = c->size;
  in->loops = npu_xcalloc((size_t)in->nloops, sizeof *in->loops);
  for (int l = 0; l < in->nloops; l++) in->loops[l].s = l == in->nloops - 1 ? in->last : in->full;
  in->join_s = npu_xmalloc((size_t)p * sizeof *in->join_s);
  in->end_s = npu_xmalloc((size_t)p * sizeof *in->end_s);
  in->busy_s = npu_xcalloc((size_t)p, sizeof *in->busy_s);
  for (int r = 0; r < p; r++) in->join_s[r] = in->end_s[r] = NAN;
  in->res.plan = plan;
  in->res.fidelity = coll->fidelity;
  in->res.start_s = in->res.end_s = in->res.time_s = NAN;
  in->res.steps = in->full->nsteps * (size_t)(in->nloops - 1) + in->last->nsteps;
  if (x->ninst == x->capinst) {
    x->capinst = x->capinst ? 2 * x->capinst : 8;
    x->inst = npu_xrealloc(x->inst, (size_t)x->capinst * sizeof *x->inst);
  }
  x->inst[x->ninst] = in;
  return x->ninst++;
}

void ic_exec_join(struct ic_exec *x, int id, int rank, double t_s)
{
  NPU_ASSERT(id >= 0 && id < x->ninst && !x->inst[id]->released);
  NPU_ASSERT(rank >= 0 && rank < x->inst[id]->comm.size && isnan(x->inst[id]->join_s[rank]));
  x->inst[id]->join_s[rank] = t_s;
  ev_push(x, (struct ev){t_s, (uint32_t)id, 0, (uint32_t)rank, EV_JOIN});
}

void ic_exec_join_all(struct ic_exec *x, int id, double t_s)
{
  for (int r = 0; r < x->inst[id]->comm.size; r++) ic_exec_join(x, id, r, t_s);
}

static void park(struct loop *l, int rank, uint32_t id)
{
  struct park *p = &l->park[rank];
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 8;
    p->ids = npu_xrealloc(p->ids, p->cap * sizeof *p->ids);
  }
  p->ids[p->n++] = id;
}

/* A loop's state goes once all its ranks joined and all its steps ended. */
static void maybe_free(struct inst *in, struct loop *l)
{
  if (l->live && l->steps_left == 0 && l->njoined == in->comm.size) free_loop(l, in->comm.size);
}

static void loop_init(struct inst *in, struct loop *l)
{
  const struct ic_schedule *s = l->s;
  int p = in->comm.size;
  l->deps = npu_xmalloc((s->nsteps ? s->nsteps : 1) * sizeof *l->deps);
  l->left = npu_xmalloc((size_t)p * sizeof *l->left);
  l->joined = npu_xcalloc((size_t)p, 1);
  l->park = npu_xcalloc((size_t)p, sizeof *l->park);
  for (size_t i = 0; i < s->nsteps; i++) {
    l->deps[i] = s->steps[i].ndeps;
    if (s->steps[i].ndeps == 0) park(l, s->steps[i].src, (uint32_t)i);
  }
  memcpy(l->left, s->rank_steps, (size_t)p * sizeof *l->left);
  l->steps_left = s->nsteps;
  l->live = true;
}

/* Step id of loop l became free of dependencies at t: run it or park it on a missing rank. */
static void step_unblocked(struct ic_exec *x, uint32_t ii, uint32_t li, uint32_t id, double t)
{
  struct loop *l = &x->inst[ii]->loops[li];
  const struct ic_step *st = &l->s->steps[id];
  if (!l->joined[st->src]) park(l, st->src, id);
  else if (st->dst >= 0 && !l->joined[st->dst]) park(l, st->dst, id);
  else work_push(x, ii, li, id, t, 0);
}

static sg_host_t host(struct ic_exec *x, int g, enum ic_class cls)
{
  sg_host_t *slot = cls == IC_CLASS_NIC ? &x->nic[g] : &x->die[g];
  if (!*slot) {
    char name[48];
    ic_topo_host_name(x->topo, g, cls, name, sizeof name);
    *slot = npu_engine_host(name);
    if (!*slot) NPU_PANIC("no host %s: load ic_platform_xml of this topology first", name);
  }
  return *slot;
}

static void start_flow(struct ic_exec *x, uint32_t ii, uint32_t li, uint32_t id, double t)
{
  struct inst *in = x->inst[ii];
  const struct ic_step *st = &in->loops[li].s->steps[id];
  if (st->amount <= 0) {
    ev_push(x, (struct ev){t + st->post_s, ii, li, id, EV_DONE});
    return;
  }
  enum ic_class cls = (enum ic_class)st->cls;
  sg_host_t from = host(x, in->comm.ranks[st->src], cls);
  sg_host_t to = host(x, in->comm.ranks[st->dst], cls);
  if (x->nfl == x->capfl) {
    x->capfl = x->capfl ? 2 * x->capfl : 256;
    x->xs = npu_xrealloc(x->xs, x->capfl * sizeof *x->xs);
    x->fl = npu_xrealloc(x->fl, x->capfl * sizeof *x->fl);
  }
  x->xs[x->nfl] = npu_xfer_start(from, to, st->amount / ic_topo_link_scale(x->topo, cls, in->link_key, ic_op_p2p(in->coll.op)), 0);
  x->fl[x->nfl++] = (struct flight){ii, li, id};
  in->res.flows++;
}

static void rank_loop_done(struct ic_exec *x, uint32_t ii, uint32_t li, int r, double t)
{
  struct inst *in = x->inst[ii];
  if ((int)li + 1 < in->nloops) {
    work_push(x, ii, li + 1, (uint32_t)r, t, 2);
    return;
  }
  in->end_s[r] = t;
  in->ranks_done++;
  if (in->ranks_done == in->comm.size) {
    double start = INFINITY, end = -INFINITY;
    for (int k = 0; k < in->comm.size; k++) {
      start = fmin(start, in->join_s[k]);
      end = fmax(end, in->end_s[k]);
    }
    in->res.start_s = start;
    in->res.end_s = end;
    in->res.time_s = end - start;
  }
}

static void do_join(struct ic_exec *x, uint32_t ii, uint32_t li, int r, double t)
{
  struct inst *in = x->inst[ii];
  struct loop *l = &in->loops[li];
  if (!l->live) loop_init(in, l);
  NPU_ASSERT(!l->joined[r]);
  l->joined[r] = 1;
  l->njoined++;
  struct park pk = l->park[r];
  l->park[r] = (struct park){0};
  for (uint32_t k = 0; k < pk.n; k++) step_unblocked(x, ii, li, pk.ids[k], t);
  free(pk.ids);
  if (l->left[r] == 0) rank_loop_done(x, ii, li, r, t);
  maybe_free(in, l);
}

static void do_ready(struct ic_exec *x, uint32_t ii, uint32_t li, uint32_t id, double t)
{
  struct inst *in = x->inst[ii];
  const struct ic_step *st = &in->loops[li].s->steps[id];
  if (st->kind == IC_STEP_DELAY) {
    if (st->amount <= 0) {
      work_push(x, ii, li, id, t, 1);
      return;
    }
    double start = fmax(t, in->busy_s[st->src]);
    in->busy_s[st->src] = start + st->amount;
    ev_push(x, (struct ev){start + st->amount, ii, li, id, EV_DONE});
    return;
  }
  if (st->pre_s > 0) ev_push(x, (struct ev){t + st->pre_s, ii, li, id, EV_START});
  else start_flow(x, ii, li, id, t);
}

static void do_complete(struct ic_exec *x, uint32_t ii, uint32_t li, uint32_t id, double t)
{
  struct inst *in = x->inst[ii];
  struct loop *l = &in->loops[li];
  const struct ic_schedule *s = l->s;
  const struct ic_step *st = &s->steps[id];
  for (uint32_t k = 0; k < st->nsucc; k++) {
    uint32_t nx = s->succ[st->succ + k];
    if (--l->deps[nx] == 0) step_unblocked(x, ii, li, nx, t);
  }
  int src = st->src, dst = st->dst;
  if (--l->left[src] == 0) rank_loop_done(x, ii, li, src, t);
  if (dst >= 0 && dst != src && --l->left[dst] == 0) rank_loop_done(x, ii, li, dst, t);
  --l->steps_left;
  maybe_free(in, l);
}

static void drain(struct ic_exec *x)
{
  while (x->nwork) {
    struct work w = x->work[--x->nwork];
    if (w.what == 0) do_ready(x, w.inst, w.loop, w.id, w.t);
    else if (w.what == 1) do_complete(x, w.inst, w.loop, w.id, w.t);
    else do_join(x, w.inst, w.loop, (int)w.id, w.t);
  }
}

void ic_exec_advance(struct ic_exec *x, double now)
{
  double horizon = now + 1e-12 + fabs(now) * 1e-15;
  for (;;) {
    drain(x);
    if (x->nheap == 0 || x->heap[0].t > horizon) break;
    struct ev e = ev_pop(x);
    switch (e.kind) {
    case EV_JOIN: work_push(x, e.inst, 0, e.id, e.t, 2); break;
    case EV_START: start_flow(x, e.inst, e.loop, e.id, e.t); break;
    default: work_push(x, e.inst, e.loop, e.id, e.t, 1); break;
    }
  }
}

size_t ic_exec_xfers(const struct ic_exec *x, struct npu_xfer *const **out)
{
  *out = x->xs;
  return x->nfl;
}

void ic_exec_xfer_done(struct ic_exec *x, size_t i, double now)
{
  NPU_ASSERT(i < x->nfl);
  struct flight f = x->fl[i];
  npu_xfer_release(x->xs[i]);
  x->nfl--;
  x->xs[i] = x->xs[x->nfl];
  x->fl[i] = x->fl[x->nfl];
  const struct ic_step *st = &x->inst[f.inst]->loops[f.loop].s->steps[f.id];
  ev_push(x, (struct ev){now + st->post_s, f.inst, f.loop, f.id, EV_DONE});
}

size_t ic_exec_reap(struct ic_exec *x, double now)
{
  size_t n = 0;
  for (size_t i = 0; i < x->nfl;) {
    if (npu_xfer_remaining(x->xs[i]) <= 0) {
      ic_exec_xfer_done(x, i, now);
      n++;
    } else {
      i++;
    }
  }
  return n;
}

double ic_exec_next_event_s(const struct ic_exec *x)
{
  return x->nheap ? x->heap[0].t : INFINITY;
}

bool ic_exec_pending(const struct ic_exec *x)
{
  return x->nfl > 0 || x->nheap > 0 || x->nwork > 0;
}

bool ic_exec_done(const struct ic_exec *x, int id)
{
  const struct inst *in = x->inst[id];
  return in->ranks_done == in->comm.size;
}

double ic_exec_rank_end_s(const struct ic_exec *x, int id, int rank)
{
  const struct inst *in = x->inst[id];
  NPU_ASSERT(!in->released && rank >= 0 && rank < in->comm.size);
  return in->end_s[rank];
}

void ic_exec_result(const struct ic_exec *x, int id, struct ic_result *out)
{
  *out = x->inst[id]->res;
}

void ic_exec_release(struct ic_exec *x, int id)
{
  free_inst(x->inst[id]);
}

void ic_exec_run(struct ic_exec *x)
{
  for (;;) {
    double now = npu_engine_clock();
    ic_exec_advance(x, now);
    if (!ic_exec_pending(x)) break;
    struct npu_xfer *const *xs;
    size_t n = ic_exec_xfers(x, &xs);
    double next = ic_exec_next_event_s(x);
    if (n == 0) {
      npu_engine_sleep(next - now);
      continue;
    }
    ssize_t k = npu_xfer_wait_any(xs, n, isinf(next) ? -1 : fmax(0, next - now));
    now = npu_engine_clock();
    if (k >= 0) ic_exec_xfer_done(x, (size_t)k, now);
    ic_exec_reap(x, now);
  }
}
