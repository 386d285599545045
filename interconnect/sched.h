/*
 * sched.h - a collective as a schedule: a DAG of transfers (source rank, destination rank,
 * bytes) and local delays (reduction compute), with dependencies, built from an operation, an
 * algorithm plan, a communicator, the per-rank size and the link parameters of the topology.
 *
 * A transfer charges the library's task overhead before its bytes move (pre_s) and its route's
 * latency after they leave (post_s), so that alone on its links it takes pre + S/B + post.
 * A delay is local work of its rank (reducing received data at ic_params.reduce_bytes_per_s);
 * the delays of one rank in one collective run one after another. Zero-second delays are
 * synchronisation points.
 *
 * Step fidelity: every algorithm step of every rank is a transfer; rank r's step k+1 depends
 * on the end of its step k (its sends, its receives and the reduction of what it received),
 * and a transfer also waits for its receiver to finish its previous step (HCCL's per-step
 * handshake).
 * Bulk fidelity: within each phase of an algorithm (a ring pass, a mesh exchange, the
 * inter-server part of a hierarchical algorithm), a rank's consecutive steps on the same set of
 * link classes become one transfer per class: its bytes are the per-step loads summed (the
 * busiest link of the class: max over peers on links of their own, sum on a shared port), its
 * overhead and latency the per-step ones summed, its destination the peer of the largest step
 * (pairwise AllToAll: of the first step, which keeps uneven sizes a permutation); the phase's
 * reductions follow as one delay. Uncontended, each rank's time
 * is the same as at step fidelity whenever one class dominates every step; the number of flows
 * drops from O(steps x p) to O(phases x p). Loops over the buffer fold into one pass whose
 * overheads and latencies are multiplied by the loop count.
 */
#ifndef NPUSIM_INTERCONNECT_SCHED_H
#define NPUSIM_INTERCONNECT_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "interconnect/comm.h"
#include "interconnect/select.h"

enum ic_step_kind { IC_STEP_XFER, IC_STEP_DELAY };

struct ic_step {
  double amount;   /* transfer: bytes; delay: seconds */
  double pre_s;    /* transfer: task overhead before the bytes start */
  double post_s;   /* transfer: route latency after the bytes left */
  int32_t src;     /* transfer: sending comm rank; delay: its rank */
  int32_t dst;     /* transfer: receiving comm rank; delay: -1 */
  uint32_t ndeps;  /* steps that must end first */
  uint32_t succ;   /* first of its successors in ic_schedule.succ */
  uint32_t nsucc;  /* successors */
  uint8_t kind;    /* enum ic_step_kind */
  uint8_t cls;     /* transfer: enum ic_class of its route */
};

struct ic_schedule {
  int nranks;             /* communicator size */
  size_t nsteps;
  struct ic_step *steps;  /* owned */
  uint32_t *succ;         /* successor ids, grouped per step; owned */
  uint32_t *rank_steps;   /* per comm rank: steps that involve it (sender, receiver, owner) */
  size_t nxfers;          /* transfers */
  double xfer_bytes;      /* their bytes in all */
};

/*
 * Build the schedule of coll under plan for one pass of S = bytes per rank (one buffer loop at
 * step fidelity; the whole payload with lat_mult = loops at bulk fidelity). plan comes from
 * ic_plan_make for the same topology, communicator and collective. Never fails for a valid
 * plan; the caller destroys the result.
 */
struct ic_schedule *ic_schedule_build(const struct ic_topo *t, const struct ic_comm *c,
                                      const struct ic_coll *coll, const struct ic_plan *plan,
                                      const struct ic_params *p, double bytes, bool bulk,
                                      double lat_mult);

void ic_schedule_destroy(struct ic_schedule *s);

#endif
