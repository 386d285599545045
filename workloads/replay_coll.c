/*
 * replay_coll.c - the replay's collectives between ranks: the data-parallel gradient
 * reductions (dense buckets over DP x CP, expert buckets over the expert data-parallel group),
 * the parameter gathers (ZeRO-3 per piece, ZeRO 1-2 after the optimizer) and the EP
 * all-to-alls whose sizes come from the program's routing draw. One job: join a replay rank to
 * the collective it takes part in, creating it on the executor for every physical group it
 * stands for when the rank is the first member (the shared-collective table, shared_coll.c,
 * keeps them by key), or, for the all-to-alls with run.network = formula, in closed form.
 *
 * Also the communicators of those groups (per stage the DP, EP and expert data-parallel
 * groups) and the one way the replay starts a collective on the executor (wl__start_coll,
 * which counts it). Waiting for a collective and what the wait counts as are the state
 * machine's (replay.c).
 */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/trace.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/topo.h"

int wl__start_coll(struct wl__replay *r, const struct ic_comm *c, enum ic_op op, double bytes, const double *matrix)
{
  struct ic_coll coll = {.op = op, .algo = IC_ALGO_AUTO, .fidelity = (enum ic_fidelity)r->job->run.coll_fidelity,
                         .bytes = bytes, .matrix = matrix};
  int id = ic_exec_start(r->x, c, &coll, r->diag);
  if (id < 0 && !r->rc) r->rc = id;
  if (id >= 0) r->res->collectives++;
  return id;
}

/* ------------------------------------------------------------------ communicators */

/*
 * Per (stage, tp) the DP group over dp x cp; with EP, the expert grid of MoE parallel folding
 * (plan.h, wl_plan_expert_rank): per stage the tp cp dp / E EP groups, one per (et, g) at index
 * et edp + g, and per (stage, ep index, et) the expert data-parallel group over g.
 */
int wl__build_comms(struct wl__replay *r)
{
  const struct wl_plan *p = &r->job->plan;
  int n = p->dp * p->cp, most = n > r->E ? n : r->E, rc = 0;
  int *ranks = npu_xmalloc((size_t)(most > r->edp ? most : r->edp) * sizeof *ranks);
  r->dpc = npu_xcalloc((size_t)r->pp * p->tp, sizeof *r->dpc);
  if (r->E > 1) {
    r->epc = npu_xcalloc((size_t)r->pp * wl__ep_groups(r), sizeof *r->epc);
    r->edpc = npu_xcalloc((size_t)r->pp * r->E * p->etp, sizeof *r->edpc);
  }
  int sg = wl_plan_shard(p), *sub = npu_xmalloc((size_t)n * sizeof *sub);
  r->nshard = sg < n ? n / sg : 0;
  NPU_ASSERT(!r->nshard || r->E == 1); /* wl_plan_finish refuses hybrid sharding with ep > 1 */
  if (r->nshard) {
    r->shc = npu_xcalloc((size_t)r->pp * p->tp * r->nshard, sizeof *r->shc);
    r->rpc = npu_xcalloc((size_t)r->pp * p->tp * sg, sizeof *r->rpc);
  }
  for (int s = 0; s < r->pp && !rc; s++)
    for (int t = 0; t < p->tp && !rc; t++) {
      if (n > 1) {
        int m = 0;
        for (int c = 0; c < p->cp; c++)
          for (int d = 0; d < p->dp; d++) ranks[m++] = wl__phys_rank(p, s, t, c, d);
        rc = ic_comm_init(&r->dpc[(size_t)s * p->tp + t], ranks, n, r->topo, "plan.dp", r->diag);
      }
      /* hybrid sharding: shard group k holds DP ranks k g .. k g + g - 1; replica group j the
       * ranks at position j of every shard group */
      for (int k = 0; r->nshard && k < r->nshard && !rc; k++)
        rc = ic_comm_init(&r->shc[((size_t)s * p->tp + t) * r->nshard + k], ranks + (size_t)k * sg, sg, r->topo,
                          "plan.zero_shard", r->diag);
      for (int j = 0; r->nshard && j < sg && !rc; j++) {
        for (int k = 0; k < r->nshard; k++) sub[k] = ranks[(size_t)k * sg + j];
        rc = ic_comm_init(&r->rpc[((size_t)s * p->tp + t) * sg + j], sub, r->nshard, r->topo, "plan.zero_shard",
                          r->diag);
      }
    }
  for (int s = 0; r->E > 1 && s < r->pp && !rc; s++)
    for (int et = 0; et < p->etp && !rc; et++) {
      for (int g = 0; g < r->edp && !rc; g++) {
        for (int e = 0; e < r->E; e++) ranks[e] = wl_plan_expert_rank(p, s, et, e, g);
        rc = ic_comm_init(&r->epc[(size_t)s * wl__ep_groups(r) + (size_t)et * r->edp + g], ranks, r->E, r->topo,
                          "plan.ep", r->diag);
      }
      for (int e = 0; r->edp > 1 && e < r->E && !rc; e++) {
        for (int g = 0; g < r->edp; g++) ranks[g] = wl_plan_expert_rank(p, s, et, e, g);
        rc = ic_comm_init(&r->edpc[((size_t)s * r->E + e) * p->etp + et], ranks, r->edp, r->topo, "plan.ep", r->diag);
      }
    }
  free(sub);
  free(ranks);
  return rc;
}

void wl__comms_release(struct wl__replay *r)
{
  const struct wl_plan *p = &r->job->plan;
  size_t g = r->nshard ? (size_t)wl_plan_shard(p) : 0;
  struct ic_comm *sets[] = {r->dpc, r->epc, r->edpc, r->shc, r->rpc};
  size_t counts[] = {(size_t)r->pp * p->tp, (size_t)r->pp * wl__ep_groups(r), (size_t)r->pp * r->E * p->etp,
                     (size_t)r->pp * p->tp * r->nshard, (size_t)r->pp * p->tp * g};
  for (int s = 0; s < 5; s++) {
    for (size_t i = 0; sets[s] && i < counts[s]; i++)
      if (sets[s][i].size) ic_comm_release(&sets[s][i]);
    free(sets[s]);
  }
  r->dpc = r->epc = r->edpc = r->shc = r->rpc = NULL;
  free(r->chains);
  r->chains = NULL;
}

/* ------------------------------------------------------------------ joining */

/* Which comm ranks of a shared collective's groups a replay rank joins as: all of them (it
 * stands for the whole group), those of a DP group (the DP group of TP rank g, comm rank
 * c dp + d) that have its EP index (a DP group spans the EP ranks), or only comm rank e (an EP
 * group). */
enum join_as { JOIN_ALL, JOIN_DP, JOIN_EP };

/*
 * Join (creating if first) the shared collective `key`: op over the n groups, this rank joining
 * the comm ranks it stands for. matrix (AllToAllV) is taken over. Returns the table index.
 */
static int join_shared(struct wl__replay *r, struct wl__rank *rk, uint64_t key, enum ic_op op, double bytes,
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
      int id = wl__start_coll(r, &groups[g], op, bytes, s->matrix);
      if (id < 0) return h;
      if (s->first < 0) s->first = id;
    }
  } else {
    free(matrix);
  }
  struct wl__shared *s = &r->sh.v[h];
  s->joined++;
  const struct wl_plan *p = &r->job->plan;
  for (int g = 0; g < s->n && s->first >= 0; g++)
    for (int i = 0; i < groups[g].size; i++) {
      bool mine = as == JOIN_ALL || (as == JOIN_EP && i == rk->e) ||
                  (as == JOIN_DP && (r->E == 1 || wl_plan_expert_index(p, g, i / p->dp, i % p->dp) == rk->e));
      if (mine) ic_exec_join(r->x, s->first + g, i, t);
    }
  return h;
}

/* Wait for shared collective h before the optimizer (or, after it, before the step's end). */
static void wait_later(struct wl__rank *rk, int h, const char *name, double t)
{
  if (rk->nids == rk->capids) {
    rk->capids = rk->capids ? 2 * rk->capids : 16;
    rk->ids = npu_xrealloc(rk->ids, (size_t)rk->capids * sizeof *rk->ids);
    rk->ids_t = npu_xrealloc(rk->ids_t, (size_t)rk->capids * sizeof *rk->ids_t);
    rk->ids_name = npu_xrealloc(rk->ids_name, (size_t)rk->capids * sizeof *rk->ids_name);
  }
  rk->ids_t[rk->nids] = t;
  rk->ids_name[rk->nids] = name;
  rk->ids[rk->nids++] = h;
}

/* The groups ZeRO's parameters are gathered in for stage s (the DP groups, or with hybrid
 * sharding the shard groups), and in *n how many. */
static const struct ic_comm *shard_groups(const struct wl__replay *r, int s, int *n)
{
  int tp = r->job->plan.tp;
  *n = r->nshard ? tp * r->nshard : tp;
  return r->nshard ? &r->shc[(size_t)s * tp * r->nshard] : &r->dpc[(size_t)s * tp];
}

void wl__pump_chains(struct wl__replay *r, double now)
{
  for (int c = 0; c < r->nchains && !r->rc;) {
    struct wl__shared *s = &r->sh.v[r->chains[c]];
    if (!wl__shared_first_done(s, r->x)) {
      c++;
      continue;
    }
    for (int g = 0; s->first >= 0 && g < s->then_n; g++) {
      int id = wl__start_coll(r, &s->then_groups[g], s->then_op, s->then_bytes, NULL);
      if (id < 0) return;
      if (s->then_first < 0) s->then_first = id;
      ic_exec_join_all(r->x, id, now);
    }
    r->chains[c] = r->chains[--r->nchains]; /* the order of the rest does not matter */
  }
}

/* A dense gradient bucket of n parameters (in plan.grad_reduce_dtype: fp32, Megatron's
 * main_grad, or bf16) over the stage's DP groups: reduce-scatter with ZeRO >= 1, else
 * all-reduce; with hybrid sharding the reduce-scatter runs in the shard groups and the shards
 * are then all-reduced between the replicas (PyTorch FSDP HYBRID_SHARD's post-backward).
 * Waited for before the optimizer. */
void wl__post_bucket(struct wl__replay *r, struct wl__rank *rk, double n, double t)
{
  const struct wl_plan *p = &r->job->plan;
  if (p->dp * p->cp < 2 || n <= 0) return;
  enum ic_op op = p->zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE;
  double bytes = n * wl_plan_grad_reduce_bytes(p);
  int ng; /* without ZeRO there are no shard groups (wl_plan_finish): the DP groups */
  const struct ic_comm *groups = shard_groups(r, rk->s, &ng);
  int h = join_shared(r, rk, wl__shared_key(WL__KEY_BUCKET, (uint64_t)rk->s, 0, (uint64_t)rk->buckets++), op, bytes,
                      groups, ng, r->E, JOIN_DP, t, NULL);
  struct wl__shared *s = &r->sh.v[h];
  if (r->nshard && !s->then_n) { /* the first member: chain the replicas' all-reduce */
    int g = wl_plan_shard(p);
    s->then_n = p->tp * g;
    s->then_op = IC_OP_ALLREDUCE;
    s->then_bytes = bytes / g;
    s->then_groups = &r->rpc[(size_t)rk->s * p->tp * g];
    if (r->nchains == r->capchains) {
      r->capchains = r->capchains ? 2 * r->capchains : 16;
      r->chains = npu_xrealloc(r->chains, (size_t)r->capchains * sizeof *r->chains);
    }
    r->chains[r->nchains++] = h;
  }
  wait_later(rk, h, "grad bucket", t);
}

/* An expert gradient bucket over this rank's expert data-parallel groups. */
void wl__post_ebucket(struct wl__replay *r, struct wl__rank *rk, double n, double t)
{
  const struct wl_plan *p = &r->job->plan;
  if (r->edp < 2 || n <= 0) return;
  enum ic_op op = p->zero >= 1 ? IC_OP_REDUCESCATTER : IC_OP_ALLREDUCE;
  int h = join_shared(r, rk, wl__shared_key(WL__KEY_EBUCKET, (uint64_t)rk->s, (uint64_t)rk->e, (uint64_t)rk->buckets++),
                      op, n * wl_plan_grad_reduce_bytes(p), &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->etp],
                      p->etp, 1, JOIN_ALL, t, NULL);
  wait_later(rk, h, "expert grad bucket", t);
}

/* ZeRO-3: the all-gather of `params` parameters of one piece of this rank's current slot. */
int wl__post_gather(struct wl__replay *r, struct wl__rank *rk, double params, double t)
{
  int ng;
  const struct ic_comm *groups = shard_groups(r, rk->s, &ng);
  return join_shared(r, rk, wl__shared_key(WL__KEY_GATHER, (uint64_t)rk->s, 0, (uint64_t)rk->gathers++),
                     IC_OP_ALLGATHER, params * 2, groups, ng, r->E, JOIN_DP, t, NULL);
}

/* ZeRO 1-2: the stage's parameters (bf16) over its DP (or shard) groups, the experts' over
 * their data-parallel group. */
void wl__post_param_gathers(struct wl__replay *r, struct wl__rank *rk, double t)
{
  const struct wl_plan *p = &r->job->plan;
  const struct wl_program *pg = r->prog;
  int ng;
  const struct ic_comm *groups = shard_groups(r, rk->s, &ng);
  int h = join_shared(r, rk, wl__shared_key(WL__KEY_PGATHER, (uint64_t)rk->s, 0, 0), IC_OP_ALLGATHER,
                      pg->stage_params[rk->s] * 2, groups, ng, r->E, JOIN_DP, t, NULL);
  wait_later(rk, h, "param gather", t);
  if (r->edp > 1 && pg->stage_eparams[rk->s] > 0) { /* experts: over their data-parallel group */
    h = join_shared(r, rk, wl__shared_key(WL__KEY_PGATHER, (uint64_t)rk->s, (uint64_t)rk->e, 1), IC_OP_ALLGATHER,
                    pg->stage_eparams[rk->s] * 2, &r->edpc[((size_t)rk->s * r->E + (size_t)rk->e) * p->etp], p->etp,
                    1, JOIN_ALL, t, NULL);
    wait_later(rk, h, "expert param gather", t);
  }
}

/*
 * An all-to-all's transfers in closed form (run.network = formula): every rank sends and
 * receives through its scale-up port and its NIC at once, each at its class bandwidth (at its
 * share for the transfer's size). A port its peers share (NIC, switch, pod fabric) adds its
 * transfers up; a link of its own per pair (a mesh, a package's dies) carries that pair's alone,
 * each direction apart. The busiest stream sets the time, plus one step's overhead and the
 * latency of the farthest peer. Contention between collectives is not seen.
 */
struct a2a_streams {
  int n;
  double *port;   /* [rank][NIC out, NIC in, scale-up out, scale-up in] */
  double *link;   /* [a n + b] the dedicated link from a to b */
  double lat;
};

static void streams_init(struct a2a_streams *s, int n)
{
  s->n = n;
  s->port = npu_xcalloc((size_t)n * 4, sizeof *s->port);
  s->link = npu_xcalloc((size_t)n * n, sizeof *s->link);
  s->lat = 0;
}

/* bytes from comm rank a to comm rank b of c. */
static void streams_add(const struct wl__replay *r, const struct ic_comm *c, struct a2a_streams *s, int a, int b,
                        double bytes)
{
  int x = c->ranks[a], y = c->ranks[b];
  enum ic_class cl = ic_topo_class(r->topo, x, y);
  s->lat = fmax(s->lat, ic_topo_latency_s(r->topo, x, y));
  double d = bytes / (ic_topo_class_bw(r->topo, cl) * ic_topo_link_scale(r->topo, cl, bytes, true));
  if (!ic_class_shared(cl)) {
    s->link[(size_t)a * s->n + b] += d;
    return;
  }
  int k = cl == IC_CLASS_NIC ? 0 : 2;
  s->port[(size_t)a * 4 + k] += d;
  s->port[(size_t)b * 4 + k + 1] += d;
}

static double streams_time(const struct wl__replay *r, struct a2a_streams *s)
{
  int n = s->n;
  double worst = 0;
  for (int a = 0; a < n; a++) {
    double out = 0, in = 0;
    for (int b = 0; b < n; b++) out = fmax(out, s->link[(size_t)a * n + b]), in = fmax(in, s->link[(size_t)b * n + a]);
    for (int k = 0; k < 4; k++) worst = fmax(worst, s->port[(size_t)a * 4 + k] + (k == 2 ? out : k == 3 ? in : 0));
  }
  free(s->port);
  free(s->link);
  return worst + s->lat + r->icp.task_overhead_s;
}

/* An AllToAllV over group c with sizes m (bytes from comm rank i to j), every copy to its rank. */
static double a2a_formula_s(const struct wl__replay *r, const struct ic_comm *c, const double *m)
{
  struct a2a_streams s;
  streams_init(&s, c->size);
  for (int i = 0; i < c->size; i++)
    for (int j = 0; j < c->size; j++)
      if (i != j) streams_add(r, c, &s, i, j, m[(size_t)i * c->size + j]);
  return streams_time(r, &s);
}

/*
 * plan.ep_dispatch = node_limited (DeepEP's internode kernels): the EP group's ranks are G nodes
 * of n = E / G ranks, group g's experts on node g (checked at load). A token of rank i routed to
 * node g != i's crosses the scale-out network once, to the rank of i's in-node index there (L),
 * and L forwards its copies to their ranks over the scale-up links; copies for i's own node go
 * there directly. back (the combine and the dispatch's gradient) runs the other way: the copies
 * to L over the scale-up links, one crossing per token back to i. m holds the copies' bytes
 * (comm rank i to j, already transposed for back), tok[i G + g] the tokens of i with a copy on
 * node g, copy the bytes of one.
 */
static double a2a_node_limited_s(const struct wl__replay *r, const struct ic_comm *c, const double *m, const double *tok,
                                 int G, double copy, bool back)
{
  int E = c->size, n = E / G;
  struct a2a_streams s;
  streams_init(&s, E);
  for (int i = 0; i < E; i++)
    for (int g = 0; g < G; g++) {
      int L = g * n + i % n, from = g == i / n ? i : L; /* i's tokens land on node g at L */
      if (from != i && tok[(size_t)i * G + g] > 0) {
        double b = tok[(size_t)i * G + g] * copy;
        if (back) streams_add(r, c, &s, L, i, b);
        else streams_add(r, c, &s, i, L, b);
      }
      for (int j = g * n; j < (g + 1) * n; j++) {
        double b = back ? m[(size_t)j * E + i] : m[(size_t)i * E + j];
        if (j == from || b <= 0) continue;
        if (back) streams_add(r, c, &s, j, from, b);
        else streams_add(r, c, &s, from, j, b);
      }
    }
  return streams_time(r, &s);
}

/* The EP all-to-all of (layer, mb, which: enum wl_a2a_which),
 * its sizes from the program's routing draw. With run.network = formula its end is known once
 * the last member joined: every member is woken at it. */
int wl__join_a2a(struct wl__replay *r, struct wl__rank *rk, int layer, int mb, enum wl_a2a_which which, double t)
{
  const struct wl_plan *p = &r->job->plan;
  const struct wl_route *rt = wl_program_route(r->prog, layer, mb);
  NPU_ASSERT(rt != NULL);
  int E = r->E;
  uint64_t key = wl__shared_key(WL__KEY_A2A, (uint64_t)rk->s, (uint64_t)layer * WL_A2A_KINDS + (uint64_t)which, (uint64_t)mb);
  /* in closed form the first member to join costs it: the others need no matrix (E^2 each) */
  int h = wl__formula(r) ? wl__shared_find(&r->sh, key) : -1;
  /* dispatch sends rows to the experts' ranks, combine sends them back: the transpose */
  double copy = r->job->model.hidden * wl_plan_a2a_bytes(p, which), *m = NULL, total = 0;
  bool back = wl_plan_a2a_back(which);
  if (h < 0) {
    m = npu_xmalloc((size_t)E * E * sizeof *m);
    for (int i = 0; i < E; i++)
      for (int k = 0; k < E; k++)
        m[(size_t)i * E + k] = copy * (back ? rt->matrix[(size_t)k * E + i] : rt->matrix[(size_t)i * E + k]);
    for (int i = 0; i < E * E; i++) total += m[i];
  }
  if (wl__formula(r)) {
    if (h < 0) {
      h = wl__shared_add(&r->sh, key);
      r->sh.v[h].members = E;
      const struct ic_comm *c = &r->epc[(size_t)rk->s * wl__ep_groups(r)];
      r->sh.v[h].formula_s = p->ep_dispatch == WL_EPD_NODE_LIMITED
                                 ? a2a_node_limited_s(r, c, m, rt->group_tokens, rt->groups, copy, back)
                                 : a2a_formula_s(r, c, m);
    }
    free(m);
    struct wl__shared *s = &r->sh.v[h];
    s->joined++;
    if (t > s->last_join) s->last_join = t;
    if (s->joined == s->members) /* its end is known now: wake the members at it */
      for (int e = 0; e < E; e++) wl__wake_at(r, rk->s * r->E + e, s->last_join + s->formula_s);
    return h;
  }
  return join_shared(r, rk, key, IC_OP_ALLTOALLV, total / E, &r->epc[(size_t)rk->s * wl__ep_groups(r)],
                     wl__ep_groups(r), E, JOIN_EP, t, m);
}
