/*
 * algo_hier.c - algorithms over the servers of a communicator (p = S servers x d ranks):
 *
 * hierarchical (HCCL's decomposition, shared/reference/hccl.md):
 *   AllReduce     = intra ReduceScatter (S) -> inter AllReduce (S / d) -> intra AllGather (S)
 *   ReduceScatter = inter ReduceScatter (S) -> intra ReduceScatter (S / servers)
 *   AllGather     = intra AllGather (S / servers) -> inter AllGather (S)
 *   by columns (plan->columns, NCCL: its rings, one per NIC, cross the servers with S / d per
 *   NIC):
 *   ReduceScatter = intra ReduceScatter (S) -> inter ReduceScatter (S / d)
 *   AllGather     = inter AllGather (S / d) -> intra AllGather (S)
 *   Broadcast     = intra scatter from the root -> inter Broadcast (S / d) -> intra AllGather
 *   AllToAll(V)   = intra exchange of everything bound for each local peer's column, then
 *                   inter pairwise among ranks with the same local index
 * "inter" runs among the S ranks with the same local index, "intra" among a server's d ranks.
 *
 * pipeline (HCCL's AllGather/ReduceScatter pipeline templates): a ring over the servers whose
 * every step also runs a mesh exchange inside each server, so both stages overlap:
 *   AllGather: S steps; in step s a rank forwards the block it got in step s-1 (its own at
 *     s = 0) to the next server's rank with its local index (if s < S-1) and copies it to each
 *     local peer: per step max(alpha + c beta_inter, alpha + c beta_intra), c = S_bytes / p.
 *   ReduceScatter: S+1 steps; step s reduce-scatters one server-block inside the server (s < S)
 *     and forwards the partial sum of the previous block to the next server (s >= 1).
 *   AllReduce: ReduceScatter pipeline then AllGather pipeline.
 */
#include <stdlib.h>

#include "common/err.h"
#include "interconnect/interconnect_int.h"

/* inter[i * S + a]: the member with local index i on server a. */
static int *inter_groups(const struct ic__layout *l)
{
  int S = l->nservers, d = l->per_server;
  int *g = npu_xmalloc((size_t)S * d * sizeof *g);
  for (int i = 0; i < d; i++)
    for (int a = 0; a < S; a++) g[i * S + a] = l->members[l->first[a] + i];
  return g;
}

static void a2a_hier(struct ic__b *b, const struct ic_plan *plan, const struct ic__layout *l,
                     const int *inter, const struct ic__sizes *sz)
{
  int S = l->nservers, d = l->per_server;
  /* intra: (a,i) -> (a,j) carries all of (a,i)'s data for column j on every server */
  for (int a = 0; a < S; a++) {
    const int *m = &l->members[l->first[a]];
    int steps = plan->intra == IC_ALGO_MESH ? 1 : d - 1;
    for (int s = 1; s <= steps && d > 1; s++) {
      for (int i = 0; i < d; i++) {
        for (int j = 0; j < d; j++) {
          if (j == i || (plan->intra != IC_ALGO_MESH && j != (i + s) % d)) continue;
          double bytes = 0;
          if (sz->matrix)
            for (int c = 0; c < S; c++) bytes += ic__size(sz, m[i], inter[j * S + c]);
          else
            bytes = S * sz->uniform;
          ic__b_send(b, m[i], m[j], bytes);
        }
      }
      ic__b_end_step(b, m, d);
    }
    ic__b_end_phase(b);
  }
  /* inter: pairwise among ranks with the same local index; (a,j) -> (a+s,j) carries what every
   * rank of server a has for (a+s,j) */
  ic__b_rep_first(b, true);
  for (int j = 0; j < d; j++) {
    const int *g = &inter[j * S];
    for (int s = 1; s < S; s++) {
      for (int a = 0; a < S; a++) {
        int to = (a + s) % S;
        double bytes = 0;
        if (sz->matrix)
          for (int i = 0; i < d; i++) bytes += ic__size(sz, l->members[l->first[a] + i], g[to]);
        else
          bytes = d * sz->uniform;
        ic__b_send(b, g[a], g[to], bytes);
      }
      ic__b_end_step(b, g, S);
    }
    ic__b_end_phase(b);
  }
  ic__b_rep_first(b, false);
}

void ic__hier(struct ic__b *b, const struct ic_plan *plan, const struct ic__layout *l,
              enum ic_op op, int root, double n, const struct ic__sizes *sz)
{
  int S = l->nservers, d = l->per_server;
  NPU_ASSERT(l->uniform && S >= 2);
  int *inter = inter_groups(l);
  enum ic_algo in = plan->intra, out = plan->inter;
#define INTRA(o, bytes) \
  for (int a = 0; a < S; a++) ic__flat(b, o, in, &l->members[l->first[a]], d, 0, bytes, false)
#define INTER(o, root_, bytes) \
  for (int i = 0; i < d; i++) ic__flat(b, o, out, &inter[i * S], S, root_, bytes, false)
  switch (op) {
  case IC_OP_ALLREDUCE:
    INTRA(IC_OP_REDUCESCATTER, n);
    INTER(IC_OP_ALLREDUCE, 0, n / d);
    INTRA(IC_OP_ALLGATHER, n);
    break;
  case IC_OP_REDUCESCATTER:
    if (plan->columns) { /* each rank's column (n / d), then across servers */
      INTRA(IC_OP_REDUCESCATTER, n);
      INTER(IC_OP_REDUCESCATTER, 0, n / d);
      break;
    }
    INTER(IC_OP_REDUCESCATTER, 0, n);
    INTRA(IC_OP_REDUCESCATTER, n / S);
    break;
  case IC_OP_ALLGATHER:
    if (plan->columns) { /* the column across servers (n / d), then inside the server */
      INTER(IC_OP_ALLGATHER, 0, n / d);
      INTRA(IC_OP_ALLGATHER, n);
      break;
    }
    INTRA(IC_OP_ALLGATHER, n / S);
    INTER(IC_OP_ALLGATHER, 0, n);
    break;
  case IC_OP_BROADCAST: {
    int a0 = -1, i0 = -1;
    for (int a = 0; a < S; a++)
      for (int i = 0; i < d; i++)
        if (l->members[l->first[a] + i] == root) a0 = a, i0 = i;
    NPU_ASSERT(a0 >= 0);
    const int *m0 = &l->members[l->first[a0]];
    if (in == IC_ALGO_MESH) ic__scatter_star(b, m0, d, i0, n);
    else ic__scatter_binomial(b, m0, d, i0, n);
    INTER(IC_OP_BROADCAST, a0, n / d);
    INTRA(IC_OP_ALLGATHER, n);
    break;
  }
#undef INTRA
#undef INTER
  case IC_OP_ALLTOALL:
  case IC_OP_ALLTOALLV: a2a_hier(b, plan, l, inter, sz); break;
  default: NPU_PANIC("no hierarchical '%s'", ic_op_name(op));
  }
  free(inter);
}

static void pipe_ag(struct ic__b *b, const struct ic__layout *l, double c)
{
  int S = l->nservers, d = l->per_server;
  for (int s = 0; s < S; s++) {
    for (int a = 0; a < S; a++) {
      const int *m = &l->members[l->first[a]];
      const int *next = &l->members[l->first[(a + 1) % S]];
      for (int i = 0; i < d; i++) {
        if (s < S - 1) ic__b_send(b, m[i], next[i], c);
        for (int j = 1; j < d; j++) ic__b_send(b, m[i], m[(i + j) % d], c);
      }
    }
    ic__b_end_step(b, l->members, S * d);
  }
  ic__b_end_phase(b);
}

static void pipe_rs(struct ic__b *b, const struct ic__layout *l, double c)
{
  int S = l->nservers, d = l->per_server;
  for (int s = 0; s <= S; s++) {
    for (int a = 0; a < S; a++) {
      const int *m = &l->members[l->first[a]];
      const int *next = &l->members[l->first[(a + 1) % S]];
      for (int i = 0; i < d; i++) {
        if (s < S) {
          for (int j = 1; j < d; j++) ic__b_send(b, m[i], m[(i + j) % d], c);
          ic__b_reduce(b, m[i], (d - 1) * c);
        }
        if (s >= 1) {
          ic__b_send(b, m[i], next[i], c);
          ic__b_reduce(b, next[i], c);
        }
      }
    }
    ic__b_end_step(b, l->members, S * d);
  }
  ic__b_end_phase(b);
}

void ic__pipeline(struct ic__b *b, const struct ic__layout *l, enum ic_op op, double n)
{
  NPU_ASSERT(l->uniform && l->nservers >= 2);
  double c = n / (l->nservers * l->per_server);
  switch (op) {
  case IC_OP_ALLREDUCE:
    pipe_rs(b, l, c);
    pipe_ag(b, l, c);
    break;
  case IC_OP_REDUCESCATTER: pipe_rs(b, l, c); break;
  case IC_OP_ALLGATHER: pipe_ag(b, l, c); break;
  default: NPU_PANIC("no pipeline '%s'", ic_op_name(op));
  }
}
