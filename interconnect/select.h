/*
 * select.h - HCCL-like algorithm selection, validation of a forced algorithm, buffer loops, and
 * the alpha-beta cost formulas the selector compares.
 *
 * Rules (shared/reference/hccl.md, legacy A2/A3 selector), for split-core Ascend chips:
 *   - one server: mesh (AllReduce of oneshot_max_bytes or less: one-shot mesh);
 *   - several servers, the same number of ranks (>= 2) on each: pipeline for AllReduce with
 *     S / p >= pipeline_ar_slice_bytes and ReduceScatter / AllGather with S / p >=
 *     pipeline_chunk_bytes, when its task count fits HCCL's FFTS+ graph (servers x
 *     (5 (d-1) + 8) + 5 contexts, twice for AllReduce, at most 65535); otherwise hierarchical
 *     (intra mesh, inter the cheapest of ring, NHR, RHD by ic_select_cost_s with alpha =
 *     select_alpha_s, beta from the inter-server link class and the size of one buffer loop;
 *     ties prefer ring, then NHR, then RHD); AllToAll(V) hierarchical (intra mesh, inter
 *     pairwise);
 *   - otherwise (uneven servers, one rank per server, Reduce): flat ring / NHR / RHD by the same
 *     comparison; AllToAll(V) pairwise.
 * Coupled-core chips (GPUs, NCCL-like): ring inside a server; across servers with the same
 * number of ranks on each, hierarchical ring + ring (NCCL's ring per NIC moves the same bytes
 * per NIC), else a flat ring; AllToAll mesh inside one server, pairwise across. SendRecv is
 * always direct.
 * Forcing an algorithm that cannot run is an error: mesh across servers, hierarchical or
 * pipeline on one server or uneven servers, an algorithm that does not implement the op.
 *
 * Payloads larger than the communicator buffer loop: loops = ceil(S / buffer_bytes); every loop
 * but the last moves a full buffer (AllToAllV: loops of equal size).
 */
#ifndef NPUSIM_INTERCONNECT_SELECT_H
#define NPUSIM_INTERCONNECT_SELECT_H

#include <stdbool.h>

#include "common/diag.h"
#include "interconnect/coll.h"
#include "interconnect/comm.h"
#include "interconnect/topo.h"

struct ic_plan {
  enum ic_algo algo;          /* resolved algorithm */
  enum ic_algo intra, inter;  /* hierarchical / pipeline: per-level algorithms */
  bool oneshot;               /* mesh AllReduce that sends whole vectors */
  int loops;                  /* passes through the communicator buffer */
  double loop_bytes;          /* S of each loop but the last */
  double last_bytes;          /* S of the last loop */
  int servers;                /* servers (nodes) the communicator spans */
  int per_server;             /* members on each server; 0 when uneven */
  /* hierarchical AllGather / ReduceScatter: each rank moves its column's share across the
   * servers (n / per_server: NCCL's rings, one per NIC, carry that much per NIC), the
   * intra-server stage moving the rest; false: HCCL's decomposition, whose inter-server stage
   * moves the whole n per rank */
  bool columns;
  char name[64];              /* "mesh", "mesh(one-shot)", "hierarchical(mesh+nhr)", ... */
};

/*
 * Choose (coll->algo == IC_ALGO_AUTO) or check the algorithm and compute the loops. Returns 0,
 * or NPU_EINVAL with diag naming the option ("--bytes", "--algo", "--root", "--matrix").
 */
int ic_plan_make(struct ic_plan *out, const struct ic_topo *t, const struct ic_comm *c,
                 const struct ic_coll *coll, const struct ic_params *p, struct npu_diag *diag);

/*
 * The cost HCCL's legacy selector compares (hcomm coll_alg_operator.cc SelectAlgoTypeFor*) for
 * ring, NHR, RHD on m servers: n is S of the inter-server stage (AllReduce, Broadcast, Reduce:
 * S / ranks-per-server; ReduceScatter, AllGather: S), alpha per step, beta seconds per byte.
 * AllReduce: ring 2(m-1)a + 2(m-1)/m n b, NHR 2 ceil(log2 m) a + 2(m-1)/m n b, RHD
 * 2 log2(m) a + 2(m-1)/m n b, or when m is not a power of two 2 ceil(log2 m) a + 2(2m-1)/m n b;
 * ReduceScatter / AllGather: half of each; Broadcast / Reduce: ring as AllReduce, RHD
 * 2 log2(m) a + 2(m-1)/m n b or (1 + 2 floor(log2 m)) a + (1 + 2(m-1)/m) n b, no NHR (INFINITY).
 * These pick an algorithm; the schedules' own times are in docs/INTERCONNECT.md.
 */
double ic_select_cost_s(enum ic_op op, enum ic_algo a, int m, double n, double alpha_s,
                        double beta_s_per_byte);

#endif
