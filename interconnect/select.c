/* select.c - HCCL-like selection, checks of forced algorithms, loops, costs; see select.h. */
#include "interconnect/select.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"
#include "interconnect/interconnect_int.h"

#define OPBIT(op) (1u << (op))

static int ilog2(int p)
{
  int l = 0;
  while ((1 << (l + 1)) <= p) l++;
  return l;
}

static int clog2(int p)
{
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

double ic_select_cost_s(enum ic_op op, enum ic_algo a, int m, double n, double al, double be)
{
  if (m < 2) return 0;
  double steps = m - 1, f = steps / m, K = clog2(m), L = ilog2(m);
  bool pow2 = (1 << ilog2(m)) == m;
  switch (op) {
  case IC_OP_ALLREDUCE:
    if (a == IC_ALGO_RING) return 2 * steps * al + 2 * f * n * be;
    if (a == IC_ALGO_NVLS) return al + (1 + 1.0 / m) * n * be;
    if (a == IC_ALGO_NHR) return 2 * K * al + 2 * f * n * be;
    return pow2 ? 2 * L * al + 2 * f * n * be : 2 * K * al + 2 * (2.0 * m - 1) / m * n * be;
  case IC_OP_REDUCESCATTER:
  case IC_OP_ALLGATHER:
    if (a == IC_ALGO_RING) return steps * al + f * n * be;
    if (a == IC_ALGO_NHR) return K * al + f * n * be;
    return pow2 ? L * al + f * n * be : K * al + (2.0 * m - 1) / m * n * be;
  case IC_OP_BROADCAST:
  case IC_OP_REDUCE:
    if (a == IC_ALGO_RING) return 2 * steps * al + 2 * f * n * be;
    if (a == IC_ALGO_NHR) return INFINITY; /* not among HCCL's choices for these */
    return pow2 ? 2 * L * al + 2 * f * n * be : (1 + 2 * L) * al + (1 + 2 * f) * n * be;
  default: return INFINITY;
  }
}

/* The cheapest of ring, NHR, RHD by HCCL's formulas; ties prefer that order. */
static enum ic_algo best_flat(enum ic_op op, int k, double n, double beta,
                              const struct ic_params *p)
{
  static const enum ic_algo order[] = {IC_ALGO_RING, IC_ALGO_NHR, IC_ALGO_RHD};
  enum ic_algo best = IC_ALGO_RING;
  double best_t = INFINITY;
  for (int i = 0; i < 3; i++) {
    double t = ic_select_cost_s(op, order[i], k, n, p->select_alpha_s, beta);
    if (t < best_t * (1 - 1e-12)) {
      best_t = t;
      best = order[i];
    }
  }
  return best;
}

/* Seconds per byte on the link class between the communicator's servers. */
static double inter_beta(const struct ic_topo *t, const struct ic_comm *c)
{
  int pod = ic_topo_pod_nodes(t);
  enum ic_class cls = IC_CLASS_POD;
  if (pod == 0) {
    cls = IC_CLASS_NIC;
  } else {
    int q0 = ic_topo_node_of(t, c->ranks[0]) / pod;
    for (int i = 1; i < c->size; i++)
      if (ic_topo_node_of(t, c->ranks[i]) / pod != q0) cls = IC_CLASS_NIC;
  }
  double bw = ic_topo_class_bw(t, cls);
  return bw > 0 ? 1.0 / bw : 0;
}

static int ops_text(char *buf, size_t n, unsigned mask)
{
  size_t len = 0;
  buf[0] = '\0';
  for (int op = 0; op < IC_OP_COUNT; op++)
    if (mask & OPBIT(op))
      len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s", len ? ", " : "",
                              ic_op_name((enum ic_op)op));
  return (int)len;
}

static int bad_algo(struct npu_diag *d, const char *fmt, const char *a, const char *b)
{
  return npu_diag_set(d, "command line", 0, "--algo", fmt, a, b), NPU_EINVAL;
}

/* Check a forced algorithm against the op and the communicator's servers. */
static int check_forced(const struct ic_topo *t, const struct ic_coll *coll, const struct ic__layout *l, int p,
                        struct npu_diag *d)
{
  enum ic_algo a = coll->algo;
  const char *name = ic_algo_name(a);
  unsigned ops_mask = ic__algo_get(a)->ops;
  if (!(ops_mask & OPBIT(coll->op))) {
    char ops[256];
    ops_text(ops, sizeof ops, ops_mask);
    char msg[400];
    snprintf(msg, sizeof msg, "'%%s' cannot run %s (it runs %s)", ic_op_name(coll->op), ops);
    return npu_diag_set(d, "command line", 0, "--algo", msg, name), NPU_EINVAL;
  }
  if (p < 2) return 0;
  if (a == IC_ALGO_NVLS) {
    const struct arch_system *sys = ic_topo_system(t);
    if (!(sys && sys->has_node && sys->node.nvls))
      return bad_algo(d, "'%s' needs switches that reduce (node.nvls = true)%s", name, "");
    if (l->nservers > 1)
      return bad_algo(d, "'%s' needs every rank in one server%s", name, " (NVLink SHARP inside a node)");
  }
  if (a == IC_ALGO_MESH && l->nservers > 1) {
    char n[32];
    snprintf(n, sizeof n, "%d", l->nservers);
    return bad_algo(d, "'%s' needs every rank in one server, but the communicator spans %s "
                       "servers", name, n);
  }
  if (a == IC_ALGO_HIER || a == IC_ALGO_PIPELINE) {
    if (l->nservers < 2)
      return bad_algo(d, "'%s' needs ranks on at least 2 servers, but all ranks are in one%s",
                      name, " server");
    if (!l->uniform)
      return bad_algo(d, "'%s' needs the same number of ranks on every server%s", name,
                      " (the communicator's servers hold different numbers)");
    if (a == IC_ALGO_PIPELINE && l->per_server < 2)
      return bad_algo(d, "'%s' needs at least 2 ranks per server%s", name,
                      " (it overlaps intra- and inter-server stages)");
  }
  if (coll->intra != IC_ALGO_AUTO || coll->inter != IC_ALGO_AUTO) { /* "hierarchical(mesh+nhr)" */
    bool a2a = coll->op == IC_OP_ALLTOALL || coll->op == IC_OP_ALLTOALLV;
    char both[64];
    snprintf(both, sizeof both, "%s+%s", ic_algo_name(coll->intra), ic_algo_name(coll->inter));
    if (a != IC_ALGO_HIER && a != IC_ALGO_PIPELINE)
      return bad_algo(d, "levels (%s) go with hierarchical or pipeline, not '%s'", both, name);
    if (a == IC_ALGO_PIPELINE && (coll->intra != IC_ALGO_MESH || coll->inter != IC_ALGO_RING))
      return bad_algo(d, "'pipeline' runs mesh inside servers and ring across them (HCCL's templates), not %s%s", both,
                      "");
    bool intra_ok = coll->intra == IC_ALGO_MESH || coll->intra == IC_ALGO_RING;
    bool inter_ok = a2a ? coll->inter == IC_ALGO_PAIRWISE
                        : coll->inter == IC_ALGO_RING || coll->inter == IC_ALGO_NHR || coll->inter == IC_ALGO_RHD;
    if (!intra_ok || !inter_ok)
      return bad_algo(d, "'hierarchical(%s)': inside servers mesh or ring, across them %s", both,
                      a2a ? "pairwise (an all-to-all)" : "ring, nhr or rhd");
  }
  return 0;
}

/*
 * One-shot against two-shot mesh AllReduce in one server, by their alpha-beta costs: one-shot
 * sends the whole vector to every peer at once (one step of n per link, then m - 1 vectors to
 * add), two-shot a reduce-scatter and an all-gather (two steps of n / m per link, m - 1
 * chunks of n / m to add). Alpha is the library's step cost plus a link's latency, beta a mesh
 * link's. One-shot wins only for small vectors: below alpha / (beta (1 - 2 / m)) roughly.
 */
static bool oneshot_cheaper(const struct ic_topo *t, const struct ic_comm *c, const struct ic_coll *coll,
                            const struct ic_params *p)
{
  int m = c->size;
  double bw = ic_topo_class_bw(t, IC_CLASS_MESH);
  if (!(bw > 0)) return true; /* no mesh links to compare on: HCCL's size rule */
  double al = p->task_overhead_s + ic_topo_latency_s(t, c->ranks[0], c->ranks[1]), be = 1 / bw, n = coll->bytes;
  double red = p->reduce_bytes_per_s > 0 ? 1 / p->reduce_bytes_per_s : 0;
  double one = al + n * be + (m - 1) * n * red;
  double two = 2 * al + 2 * n / m * be + (m - 1) * n / m * red;
  return one < two;
}

static void set_name(struct ic_plan *pl)
{
  if (pl->algo == IC_ALGO_HIER || pl->algo == IC_ALGO_PIPELINE)
    snprintf(pl->name, sizeof pl->name, "%s(%s+%s)", ic_algo_name(pl->algo),
             ic_algo_name(pl->intra), ic_algo_name(pl->inter));
  else if (pl->oneshot)
    snprintf(pl->name, sizeof pl->name, "mesh(one-shot)");
  else
    snprintf(pl->name, sizeof pl->name, "%s", ic_algo_name(pl->algo));
}

static void levels(struct ic_plan *pl, const struct ic_topo *t, const struct ic_comm *c,
                   const struct ic_coll *coll, const struct ic_params *p)
{
  bool a2a = coll->op == IC_OP_ALLTOALL || coll->op == IC_OP_ALLTOALLV;
  int S = pl->servers, d = pl->per_server;
  if (coll->intra != IC_ALGO_AUTO && coll->inter != IC_ALGO_AUTO) { /* given, checked by ic_plan_make */
    pl->intra = coll->intra;
    pl->inter = coll->inter;
    return;
  }
  if (pl->algo == IC_ALGO_PIPELINE) {
    pl->intra = IC_ALGO_MESH;
    pl->inter = IC_ALGO_RING; /* HCCL's pipeline templates ring the servers */
    return;
  }
  pl->intra = ic_topo_hccl(t) ? IC_ALGO_MESH : IC_ALGO_RING;
  if (a2a) {
    pl->inter = IC_ALGO_PAIRWISE;
    return;
  }
  if (!ic_topo_hccl(t) && coll->algo == IC_ALGO_AUTO) {
    pl->inter = IC_ALGO_RING;
    return;
  }
  double n = fmin(coll->bytes, p->buffer_bytes > 0 ? p->buffer_bytes : INFINITY);
  enum ic_op op = coll->op;
  if (op == IC_OP_ALLREDUCE || op == IC_OP_BROADCAST) n /= d;
  pl->inter = best_flat(op, S, n, inter_beta(t, c), p);
}

static void auto_select(struct ic_plan *pl, const struct ic_topo *t, const struct ic_comm *c,
                        const struct ic_coll *coll, const struct ic_params *p)
{
  enum ic_op op = coll->op;
  int P = c->size, S = pl->servers, d = pl->per_server;
  bool hccl = ic_topo_hccl(t);
  double n = coll->bytes;
  if (op == IC_OP_SENDRECV || op == IC_OP_SEND) {
    pl->algo = IC_ALGO_DIRECT;
  } else if (op == IC_OP_ALLTOALL || op == IC_OP_ALLTOALLV) {
    if (S == 1) pl->algo = IC_ALGO_MESH;
    else if (hccl && d >= 2) pl->algo = IC_ALGO_HIER;
    else pl->algo = IC_ALGO_PAIRWISE;
  } else if (S == 1) {
    pl->algo = hccl ? IC_ALGO_MESH : IC_ALGO_RING;
    /* NCCL takes NVLS for an all-reduce where the switches can (not for all-gather or
     * reduce-scatter, where it moves no fewer bytes: NVIDIA/nccl#1506): where it costs less */
    const struct arch_system *sys = ic_topo_system(t);
    if (op == IC_OP_ALLREDUCE && !hccl && sys && sys->has_node && sys->node.nvls) {
      double al = p->task_overhead_s + ic_topo_latency_s(t, c->ranks[0], c->ranks[1]),
             be = 1 / ic_topo_class_bw(t, IC_CLASS_SWITCH);
      if (ic_select_cost_s(op, IC_ALGO_NVLS, P, n, al, be) < ic_select_cost_s(op, IC_ALGO_RING, P, n, al, be))
        pl->algo = IC_ALGO_NVLS;
    }
  } else if (!hccl) {
    /* NCCL runs one ring per NIC: the same bytes per NIC as rings inside and across servers
     * (AllGather and ReduceScatter by columns: plan.columns) */
    pl->algo = d >= 2 && op != IC_OP_REDUCE ? IC_ALGO_HIER : IC_ALGO_RING;
  } else if (d >= 2 && op != IC_OP_REDUCE) {
    /* HCCL's FFTS+ graph holds 65535 contexts: S x (5(d-1) + 8) + 5 per pass, twice for AR */
    double contexts = S * (5.0 * (d - 1) + 8) + 5;
    if (op == IC_OP_ALLREDUCE) contexts *= 2;
    bool pipe = contexts <= 65535 &&
                ((op == IC_OP_ALLREDUCE && n / P >= p->pipeline_ar_slice_bytes) ||
                 ((op == IC_OP_REDUCESCATTER || op == IC_OP_ALLGATHER) &&
                  n / P >= p->pipeline_chunk_bytes));
    pl->algo = pipe ? IC_ALGO_PIPELINE : IC_ALGO_HIER;
  } else {
    double loop = fmin(n, p->buffer_bytes > 0 ? p->buffer_bytes : INFINITY);
    pl->algo = best_flat(op, P, loop, inter_beta(t, c), p);
  }
}

int ic_plan_make(struct ic_plan *pl, const struct ic_topo *t, const struct ic_comm *c,
                 const struct ic_coll *coll, const struct ic_params *p, struct npu_diag *d)
{
  memset(pl, 0, sizeof *pl);
  pl->intra = pl->inter = IC_ALGO_AUTO;
  int P = c->size;
  if (!(coll->bytes > 0) || !isfinite(coll->bytes))
    return npu_diag_set(d, "command line", 0, "--bytes", "expected a positive size, got %g",
                        coll->bytes), NPU_EINVAL;
  if ((coll->op == IC_OP_BROADCAST || coll->op == IC_OP_REDUCE) &&
      (coll->root < 0 || coll->root >= P))
    return npu_diag_set(d, "command line", 0, "--root",
                        "root %d is outside the communicator of %d ranks", coll->root, P),
           NPU_EINVAL;
  if (coll->op == IC_OP_SEND && P != 2)
    return npu_diag_set(d, "command line", 0, "--ranks", "send needs a communicator of two ranks (from, to), got %d",
                        P), NPU_EINVAL;
  double rowmax = coll->bytes;
  if (coll->op == IC_OP_ALLTOALLV && coll->matrix) {
    rowmax = 0;
    for (int i = 0; i < P; i++) {
      double row = 0;
      for (int j = 0; j < P; j++) {
        double v = coll->matrix[(size_t)i * P + j];
        if (!(v >= 0) || !isfinite(v))
          return npu_diag_set(d, "command line", 0, "--matrix",
                              "size from rank %d to rank %d must be a non-negative number, got "
                              "%g", i, j, v), NPU_EINVAL;
        if (j != i) row += v;
      }
      rowmax = fmax(rowmax, row);
    }
  }
  /* a buffer no device could hold would only make the simulation unbounded */
  const struct arch_system *sys = ic_topo_system(t);
  double hbm = sys ? (double)sys->chip.hbm.size_bytes : 0;
  if (hbm > 0 && (coll->bytes > hbm || rowmax > hbm)) {
    char b[32];
    npu_unit_format(hbm, NPU_UNIT_SIZE, b, sizeof b);
    return npu_diag_set(d, "command line", 0, "--bytes", "%.4g bytes per rank is more than a device's memory (%s HBM on %s)",
                        fmax(coll->bytes, rowmax), b, sys->chip.name),
           NPU_EINVAL;
  }
  struct ic__layout l;
  ic__layout_init(&l, c, t);
  pl->servers = l.nservers;
  pl->per_server = l.uniform ? l.per_server : 0;
  int rc = 0;
  if (coll->algo == IC_ALGO_AUTO) {
    if (P < 2) pl->algo = IC_ALGO_DIRECT;
    else auto_select(pl, t, c, coll, p);
  } else {
    rc = check_forced(t, coll, &l, P, d);
    pl->algo = coll->algo;
  }
  ic__layout_release(&l);
  if (rc) return rc;
  if (P < 2) pl->algo = IC_ALGO_DIRECT; /* nothing to move whatever was forced */
  if (pl->algo == IC_ALGO_HIER || pl->algo == IC_ALGO_PIPELINE) levels(pl, t, c, coll, p);
  pl->columns = pl->algo == IC_ALGO_HIER && !ic_topo_hccl(t);
  if (pl->algo == IC_ALGO_MESH && coll->op == IC_OP_ALLREDUCE && P > 2)
    pl->oneshot = coll->algo == IC_ALGO_AUTO ? coll->bytes <= p->oneshot_max_bytes && oneshot_cheaper(t, c, coll, p)
                                             : coll->oneshot;
  if (P < 2) snprintf(pl->name, sizeof pl->name, "local");
  else set_name(pl);

  double buf = p->buffer_bytes > 0 ? p->buffer_bytes : INFINITY;
  if (coll->op == IC_OP_ALLTOALLV) {
    pl->loops = rowmax > buf ? (int)ceil(rowmax / buf) : 1;
    pl->loop_bytes = pl->last_bytes = coll->bytes / pl->loops;
  } else {
    pl->loops = coll->bytes > buf ? (int)ceil(coll->bytes / buf) : 1;
    pl->loop_bytes = pl->loops > 1 ? buf : coll->bytes;
    pl->last_bytes = coll->bytes - (pl->loops - 1) * pl->loop_bytes;
  }
  return 0;
}
