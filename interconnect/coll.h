/*
 * coll.h - collective operations, algorithms and fidelities: their names, the cost parameters
 * of the communication library, what one collective request carries, and the reporting
 * conventions of nccl-tests / hccl_test.
 *
 * Sizes follow nccl-tests: S ("bytes") is the buffer size per rank that the test reports:
 * AllReduce, Broadcast, Reduce, SendRecv: the vector; AllGather: the gathered output (each rank
 * contributes S/p); ReduceScatter: the input (each rank keeps S/p); AllToAll: what a rank sends
 * in all (S/p to each rank, its own part a local copy). algbw = S / t, busbw = algbw x factor:
 * (p-1)/p for AllGather, ReduceScatter, AllToAll(V); 2(p-1)/p for AllReduce; 1 otherwise
 * (nccl-tests doc/PERFORMANCE.md; hccl_test uses the same).
 *
 * Defaults of struct ic_params are HCCL's (shared/reference/hccl.md): 1-2 us per task (1.5 us
 * taken), local reduce 483 GB/s, 200 MB communicator buffer, selector alpha 60 us, one-shot
 * AllReduce up to 256 KiB, pipeline from 1 MiB AllReduce slices (S/p) and 32 KiB RS-AG chunks
 * (S/p), as in hcomm's coll_alg_operator.cc (PIPELINE_ALLREDUCE_MIN_SIZE, PIPELINE_MIN_SIZE).
 */
#ifndef NPUSIM_INTERCONNECT_COLL_H
#define NPUSIM_INTERCONNECT_COLL_H

#include <stdbool.h>

enum ic_op {
  IC_OP_ALLREDUCE,
  IC_OP_REDUCESCATTER,
  IC_OP_ALLGATHER,
  IC_OP_ALLTOALL,
  IC_OP_ALLTOALLV,
  IC_OP_BROADCAST,
  IC_OP_REDUCE,
  IC_OP_SENDRECV,
  IC_OP_SEND,       /* comm rank 0 sends S bytes to comm rank 1 (a communicator of two) */
  IC_OP_COUNT
};

enum ic_algo {
  IC_ALGO_AUTO,     /* HCCL-like selection (select.h) */
  IC_ALGO_RING,     /* ring; Broadcast: binomial scatter + ring AllGather */
  IC_ALGO_MESH,     /* all peers at once over the full mesh / switch, one server */
  IC_ALGO_RHD,      /* recursive halving-doubling, any p (extra step when not a power of 2) */
  IC_ALGO_NHR,      /* non-uniform hierarchical ring: ceil(log2 p) steps of uneven sizes */
  IC_ALGO_PAIRWISE, /* AllToAll(V): p-1 rounds, rank i sends to i+k in round k */
  IC_ALGO_HIER,     /* intra-server / inter-server decomposition */
  IC_ALGO_PIPELINE, /* hierarchical with intra and inter stages overlapped step by step */
  IC_ALGO_DIRECT,   /* SendRecv: one transfer per rank */
  IC_ALGO_NVLS,     /* AllReduce in one server through switches that reduce and multicast (NVLink
                       SHARP, node.nvls): each rank moves S (1 + 1/p) each way, pipelined */
  IC_ALGO_COUNT
};

enum ic_fidelity {
  IC_FIDELITY_STEP, /* every algorithm step is a flow on the platform */
  IC_FIDELITY_BULK  /* per rank and link class, one flow per phase; loops folded */
};

/* Cost parameters of the communication library (not of the hardware). */
struct ic_params {
  double task_overhead_s;         /* per algorithm step before its transfer starts */
  double reduce_bytes_per_s;      /* local reduction rate (node.ccl.reduce_bandwidth); 0: fused */
  double buffer_bytes;            /* communicator buffer: larger payloads are looped */
  double select_alpha_s;          /* alpha in the selector's alpha-beta comparison */
  double oneshot_max_bytes;       /* one-server AllReduce this small may go one-shot mesh (where the
                                     alpha-beta cost of one-shot is below two-shot's) */
  double pipeline_ar_slice_bytes; /* AllReduce pipeline from S / p this big */
  double pipeline_chunk_bytes;    /* ReduceScatter / AllGather pipeline from S / p this big */
};

/* One collective to run on a communicator. */
struct ic_coll {
  enum ic_op op;
  enum ic_algo algo;         /* IC_ALGO_AUTO lets the selector choose */
  enum ic_fidelity fidelity;
  double bytes;              /* S, nccl-tests convention (see above) */
  const double *matrix;      /* AllToAllV: p x p bytes, matrix[i * p + j] from comm rank i to
                                j; NULL = uniform S/p. Borrowed: must outlive the instance */
  int root;                  /* Broadcast / Reduce: comm rank of the root */
  bool oneshot;              /* with algo mesh, AllReduce: the one-shot form (whole vectors),
                                "mesh(one-shot)"; auto chooses it where its cost is lower */
  enum ic_algo intra, inter; /* with algo hierarchical or pipeline: the algorithms inside and
                                across servers, "hierarchical(mesh+nhr)"; IC_ALGO_AUTO (0): the
                                selector's */
};

/* HCCL defaults (see the file header), with the per-step overhead of sys's collective library
 * (node.ccl.step_overhead) when sys is not NULL. */
struct arch_system;
void ic_params_default(struct ic_params *p, const struct arch_system *sys);

/* Names: "allreduce", ...; "ring", "hierarchical", ...; "step", "bulk". */
const char *ic_op_name(enum ic_op op);
const char *ic_algo_name(enum ic_algo a);
const char *ic_fidelity_name(enum ic_fidelity f);

/* Parse a name; returns 0, or -1 if unknown (the caller reports it). */
int ic_op_parse(const char *name, enum ic_op *out);
int ic_algo_parse(const char *name, enum ic_algo *out);
int ic_fidelity_parse(const char *name, enum ic_fidelity *out);
/* Parse any name a collective's report prints for its algorithm into coll's algo, oneshot, intra
 * and inter: "ring", "mesh(one-shot)", "hierarchical(mesh+nhr)", "pipeline(mesh+ring)". 0, or -1
 * if it is none (the caller reports it; whether the plan can run is ic_plan_make's). */
int ic_coll_parse_algo(const char *name, struct ic_coll *coll);
/* The forms it reads, for key descriptions and messages. */
#define IC_ALGO_FORMS                                                                                                 \
  "auto, ring, mesh, mesh(one-shot), rhd, nhr, pairwise, hierarchical, hierarchical(INTRA+INTER), pipeline, "         \
  "pipeline(mesh+ring), direct, nvls"

/* Candidate name arrays for "did you mean" suggestions; counts in *n. */
const char *const *ic_op_names(int *n);
const char *const *ic_algo_names(int *n);

/* Whether op reduces data (AllReduce, ReduceScatter, Reduce). */
bool ic_op_reduces(enum ic_op op);

/* busbw / algbw for op on p ranks (nccl-tests convention). */
double ic_busbw_factor(enum ic_op op, int p);

/*
 * Bytes of one transfer of the collective's ring-like form on p ranks, the size its link
 * efficiency is read at (node.link.efficiency_curve): S for Send and SendRecv, S / p otherwise
 * (the chunk each step of a ring moves; an all-to-all's share per peer).
 */
double ic_coll_step_bytes(const struct ic_coll *c, int p);
/* Whether its transfers are point-to-point ones (Send, SendRecv, AllToAll(V)), whose link share is
 * node.link.p2p_efficiency. */
bool ic_op_p2p(enum ic_op op);

/* algbw = S / t in bytes/s (0 when t <= 0). */
double ic_algbw_bytes_per_s(double bytes, double time_s);

#endif
