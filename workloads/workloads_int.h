/*
 * workloads_int.h - declarations shared by the files of workloads/ and no one else: the
 * expansion's kernel table, expert costing, rank geometry, the shared-collective table of the
 * replay, the replay's state (replay.c) with its pipeline transfers (replay_p2p.c) and
 * collectives (replay_coll.c), and the results' attribution.
 */
#ifndef NPUSIM_WORKLOADS_WORKLOADS_INT_H
#define NPUSIM_WORKLOADS_WORKLOADS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "interconnect/exec.h"
#include "ops/cost_cache.h"
#include "workloads/program.h"
#include "workloads/replay.h"

/* ------------------------------------------------------------------ expand.c, cost.c */

/* The index of kernel "op args" in p->kernels, added (not costed) if new. */
int wl__kernel_add(struct wl_program *p, const struct op_call *c);
/* The same on chip variant sys (0: the system's; else p->slow_sys[sys - 1]). */
int wl__kernel_add_on(struct wl_program *p, const struct op_call *c, int sys);
/* The 1-based index of chip variant v among p->slow_sys (added when no variant with the same
 * chip fingerprint is there). */
int wl__slow_sys(struct wl_program *p, const struct arch_system *v);
/* The typed calls of the routed experts' kernels (expand.c): a grouped GEMM, a SwiGLU. */
struct op_call wl__grouped_gemm_call(int64_t groups, int64_t m, int64_t n, int64_t k, enum npu_dtype dt);
/* Gradient accumulation (expand.c, plan.grad_accum_fusion): the gradient buffer's type, whether
 * each weight gradient is added into it by a kernel of its own, and that kernel's call. */
enum npu_dtype wl__grad_buffer_dtype(const struct wl_plan *p);
bool wl__grad_accum_add(const struct wl_plan *p);
struct op_call wl__grad_accum_call(const struct wl_plan *p, int64_t elements);
struct op_call wl__swiglu_call(int64_t rows, int64_t ffn, enum npu_dtype dt);

/* A GEMM taking g alone and gr beside the collective overlapped with it by method m in n steps
 * (comm: the collective alone; chunk: one chunk's collective, WL_OVL_PIPE): the pair's time,
 * and in *lost what the GEMM loses to the communication (docs/TRAINING.md). */
double wl__overlap_time(enum wl_ovl m, int n, double g, double gr, double comm, double chunk, double *lost);
/* Item i's time on its compute stream, as a segment's time_s sums it (cost.c). */
double wl__item_time(const struct wl_program *j, int i);
/* The same, with what the GEMM beside it loses (*lost), its exposed part and what is hidden. */
double wl__item_time_parts(const struct wl_program *j, int i, double *lost, double *exposed, double *hidden);

/* Cost every kernel of p not costed yet through cache (the chip model at the run's fidelity).
 * Returns 0, or an error with diag naming the kernel (a shape the chip cannot run). */
int wl__cost_kernels(struct wl_program *p, struct op_cache *cache, struct npu_diag *diag);
/*
 * Data-parallel interference (docs/TRAINING.md): with a data-parallel group, the chip a DP
 * collective leaves to compute beside it (p->dp_sys: node.ccl.cores, or scaleout_cores when the
 * group crosses nodes, fewer cores; HBM less twice the device's injection rate on those links),
 * and every kernel's twin on it, costed (wl_kernel.dp_twin). 0, or an error (a core count that
 * leaves no core, a kernel that does not fit the smaller chip).
 */
int wl__dp_twins(struct wl_program *p, struct op_cache *cache, struct npu_diag *diag);

/* The routed experts of one rank receiving `tokens` token copies in one layer and micro-batch:
 * seconds of each pass (out[WL_EXPERT_PASSES]) and FLOPs that recomputation reruns
 * (flops[WL_EXPERT_RC_KINDS]), from p->experts' bucket of tokens (within 5%, scaled), costing
 * the bucket's kernels through cache if it is new. Returns 0 or an error. */
int wl__expert_cost(struct wl_program *p, struct op_cache *cache, double tokens, double *out, double *flops,
                    struct npu_diag *diag);

/* ------------------------------------------------------------------ program.c: geometry */

/* The physical rank of (stage, tp, cp, dp) under the plan's rank order. */
int wl__phys_rank(const struct wl_plan *plan, int stage, int tp, int cp, int dp);


/* The stage running model chunk k for micro-batch m (DualPipe depends on m). */
int wl__stage_of(const struct wl_program *p, int k, int m);

/* Token copies one EP rank routes per micro-batch (the sequence-parallel share, before top-k). */
double wl__moe_tokens(const struct wl_plan *plan, const struct wl_model *model);

/* ------------------------------------------------------------------ shared_coll.c */

/* A collective several replay ranks take part in (an EP all-to-all, a DP bucket, a gather):
 * n consecutive executor instances, one per physical group it stands for. */
struct wl__shared {
  uint64_t key;          /* wl__shared_key() */
  int first, n;          /* executor instances first .. first + n - 1; first < 0: none (left) */
  int joined;            /* replay ranks that joined */
  int members;           /* replay ranks that will join */
  int released;          /* members done with it */
  double formula_s;      /* run.network = formula (all-to-alls): time once the last member
                            joined; < 0 otherwise */
  double last_join;      /* ... and when that was */
  double *matrix;        /* AllToAllV sizes, owned (the executor borrows it) */
  /* A chained collective (hybrid sharding's gradient reduce-scatter in the shard groups, then
   * the all-reduce of the shards between the replicas): a second phase over then_groups,
   * started by the replay (wl__pump_chains) once the first ends; done when it is. */
  int then_first, then_n; /* its executor instances; then_n 0: no second phase; then_first < 0:
                             not started yet */
  enum ic_op then_op;
  double then_bytes;
  const struct ic_comm *then_groups;
};

/* Every shared collective of a step in creation order (a handle, the index, stays valid for
 * the whole step) and an open-addressing index from key to handle. */
struct wl__shared_table {
  struct wl__shared *v;
  size_t n, cap;
  int *ix;               /* key -> handle, -1 empty */
  size_t cap_ix;
};

/* Kinds of shared collectives (the low 4 bits of a key). */
enum { WL__KEY_A2A = 1, WL__KEY_BUCKET, WL__KEY_EBUCKET, WL__KEY_GATHER, WL__KEY_EGATHER, WL__KEY_PGATHER };

/* The key of a shared collective: kind, stage, rank-specific index and sequence number. */
uint64_t wl__shared_key(int kind, uint64_t a, uint64_t b, uint64_t c);

/* The handle of key, or -1 if it does not exist yet. */
int wl__shared_find(const struct wl__shared_table *t, uint64_t key);

/* A new entry for key (not there yet): its handle. Entries are never removed. */
int wl__shared_add(struct wl__shared_table *t, uint64_t key);

/* When shared collective h finished (its last rank), NAN while it runs. */
double wl__shared_end_s(const struct wl__shared_table *t, int h, const struct ic_exec *x);

/* Whether the first (or only) phase of shared collective s is done (x: its executor). */
bool wl__shared_first_done(const struct wl__shared *s, struct ic_exec *x);

/* Whether shared collective h has finished at the engine's clock (x: its executor). */
bool wl__shared_done(const struct wl__shared_table *t, int h, struct ic_exec *x);

/* Called by each member once it no longer needs h's result; the last one frees its executor
 * instances and matrix (the entry stays, done, under its key). */
void wl__shared_drop(struct wl__shared_table *t, int h, struct ic_exec *x);

/* Free the table (the executor instances are the executor's). */
void wl__shared_release(struct wl__shared_table *t);

/* ------------------------------------------------------------------ replay.c: the replay's state */

/* Where a replay rank is. Each state has a phase function (replay.c, advance()). */
enum wl__state {
  WL__ST_READY,     /* between slots: wait for the next slot's inputs, or end the slots */
  WL__ST_WAIT_RECV, /* waiting for a pipeline transfer (bubble, then pp_comm) */
  WL__ST_STEP,      /* running the current slot's steps */
  WL__ST_RUN,       /* the compute stream is busy until run_end */
  WL__ST_WAITC,     /* waiting for a shared collective (waitcat) */
  WL__ST_WAIT_A2A,  /* in an F&B pair: waiting for a deferred all-to-all (wait_which) */
  WL__ST_WAIT_DP,   /* after the slots: waiting for the gradient reductions */
  WL__ST_OPT,       /* running the optimizer until run_end */
  WL__ST_WAIT_AG,   /* waiting for the parameter all-gathers after the optimizer */
  WL__ST_DONE,
  WL__ST_COUNT
};

/* One pipeline transfer (all TP ranks of a stage to their counterparts): replay_p2p.c. */
struct wl__p2p {
  int first_id, n;       /* executor instances first_id .. first_id + n - 1; n = 0: not created,
                            n < 0: run.network = formula */
  double send_s;         /* when the sender joined (NAN: not yet) */
  double recv_s;         /* when the receiver joined (NAN: not yet) */
  double formula_s;      /* run.network = formula: the transfer's time, alone on its route */
  int to_idx;            /* the receiving replay rank */
  int from_idx;          /* the sending replay rank (set when it sends) */
  double send_t0;        /* when the sender's slot began (the trace's arrow starts in that slice) */
  bool traced;           /* its arrow is in the trace */
  bool done;
  bool counted;          /* the receiver has counted its hidden and exposed time */
  double done_s;
};

/* One replay rank: a pipeline stage (and EP index) as a state machine over its slots. */
/* The host's dispatch time per kernel for the program's plan (eager or graph), and the lead of
 * n items of device times t (max over j of (j + 1) d + t[j] + ... + t[n-1]); of n equal parts of
 * total_s. See struct wl_seg. */
double wl__host_dispatch_s(const struct wl_program *j);
double wl__host_lead(const double *t, int n, double d);
double wl__host_lead_equal(double total_s, int n, double d);

/* An interval the compute stream was busy, and the share of its throughput a data-parallel
 * collective beside it would take (wl_seg.dp_loss). */
struct wl__busy {
  double t0, t1, loss;
};

/*
 * The compute time a data-parallel collective running from t0 to t1 costs a stream whose busy
 * intervals (in time order, not overlapping) are b[0..n-1]: in the window each busy second
 * does (1 - loss) of its work, so loss x the busy time is owed, less the window's idle time
 * (which slowed work would have filled). A collective under busy compute throughout costs
 * loss x (t1 - t0); one longer than the compute beside it, nothing beyond its exposed part.
 */
double wl__dp_lost(const struct wl__busy *b, int n, double t0, double t1);

struct wl__rank {
  int s, e;              /* pipeline stage, EP index */
  int idx;               /* s x E + e */
  /* the trace's memory counter: what the rank holds besides activations, the activations of one
   * (micro-batch, chunk) in flight, and how many are in flight */
  double mem_static_bytes, mem_unit_bytes;
  int live;
  bool detail;           /* the trace holds its kernels, waits and buckets (run.trace_detail) */
  const struct wl_prog_stage *ps; /* its stage's slots and steps (the program's) */
  size_t pc;             /* current slot */
  enum wl__state st;
  double since;          /* when the current wait began */
  double slot_t0;        /* when the current slot started (traced as one slice) */
  double run_end;
  int wait;              /* p2p index waited on */
  int waitsh;            /* shared collective waited on */
  int waitcat;           /* where that wait counts */
  bool recv_ok;          /* the current slot's inputs have arrived */
  const struct wl_step *steps; /* the current slot's steps */
  int nsteps, sk;
  int *ids;              /* shared collectives to wait for before the optimizer */
  int nids, capids;
  double *ids_t;         /* ... when each was posted, and its name, for the trace */
  const char **ids_name;
  double dp_lane_end[16]; /* trace: data-parallel lanes (concurrent buckets side by side) */
  unsigned dp_named;     /* trace: the data-parallel lanes named so far (bit lane) */
  double comm_lane_end[WL_GROUP_ETP + 1][2]; /* trace: each dimension's communication lanes */
  unsigned comm_named;   /* trace: the communication tracks named so far (bit 2 dim + lane) */
  int buckets;           /* gradient buckets posted (the shared key's sequence number) */
  int gathers;           /* ZeRO-3 gathers posted */
  int next_gather;       /* ZeRO-3: the next piece's gather, posted ahead */
  /* an F&B pair's communication stream: its deferred all-to-alls in issue order, one at a
   * time (replay.c, pump_comm), each until its WL_STEP_A2A_WAIT */
  struct wl__defer {
    int layer, mb;
    uint8_t which;
    int h;               /* the collective once started (-1: queued behind the one in flight) */
    double t0;           /* when it started */
    bool done;
  } dq[8];
  int ndq;
  int wait_which;        /* WL__ST_WAIT_A2A: the all-to-all waited for */
  struct wl_stage_result *res;
  double host;           /* the host's clock: when it has dispatched what the rank ran so far */
  /* data-parallel interference (wl__dp_twins): the stream's busy intervals of the step, the
   * compute time lost to DP collectives found done and not yet added to the stream, and the
   * post times of the ZeRO-3 gather posted ahead and of the DP collective waited on */
  struct wl__busy *busy;
  int nbusy, capbusy;
  struct wl__busy *dpspan; /* every data-parallel collective's span, posted to done (hidden_s) */
  int ndp, capdp;
  double debt;
  double gather_t, wait_t0;
  /* activation offload: when the copy to host and the copy back in flight end (the host link's
   * two directions, one copy each at a time), and how long each takes */
  double d2h_end, h2d_end, d2h_dur, h2d_dur;
};

/* A replay rank to look at again at time t (the driver's min-heap). */
struct wl__wake {
  double t;
  int idx;
};

/* The whole replay of one step: the program, the platform, the executor, the ranks, the
 * pipeline transfers (replay_p2p.c) and the collectives' groups and table (replay_coll.c). */
struct wl__replay {
  const struct wl_job *job;
  const struct wl_program *prog;
  struct wl_result *res;
  struct npu_trace *trace;
  const char **kargs;    /* traced: each kernel's slice arguments (JSON, interned), built once */
  double *item_t0;       /* traced: scratch, each item's start then each item's time, of the segment traced */
  int item_cap;
  struct ic_topo *topo;
  struct ic_params icp;
  struct ic_exec *x;
  struct wl__rank *rk;
  int nr, E, pp, mchunks, mb, edp;
  double host_d;         /* the host's time per dispatched kernel (wl__host_dispatch_s) */
  struct wl__p2p *p2p;   /* [dir][boundary][mb][EP index] */
  struct ic_comm *pair;  /* [boundary][dir][tp][EP index]: 2-rank communicators for sends, on demand */
  struct wl__shared_table sh; /* every shared collective of the step */
  struct ic_comm *dpc;   /* per stage x tp: the DP (x CP) group */
  struct ic_comm *epc;   /* per stage x etp x edp: the EP group (wl__ep_groups per stage) */
  struct ic_comm *edpc;  /* per stage x ep x etp: the expert data-parallel group */
  /* hybrid sharding (plan.zero_shard < dp x cp): per stage x tp x k the k-th shard group (g
   * consecutive ranks of the DP group), per stage x tp x j the replica group of the ranks at
   * position j of every shard group; nshard shard groups per DP group, 0 without */
  struct ic_comm *shc, *rpc;
  int nshard;
  int *chains;           /* shared collectives whose second phase has not started */
  int nchains, capchains;
  struct wl__wake *heap; /* replay ranks to look at again, by time */
  size_t nheap, capheap;
  int ndone;
  int rc;
  struct npu_diag *diag;
};

/* The EP groups of a stage, all running each all-to-all side by side: etp x edp. */
static inline int wl__ep_groups(const struct wl__replay *r)
{
  return r->job->plan.etp * r->edp;
}

/* Whether the step's pipeline sends and EP all-to-alls are closed forms (run.network = formula). */
static inline bool wl__formula(const struct wl__replay *r)
{
  return r->job->run.network == WL_NETWORK_FORMULA;
}

/* Look at replay rank idx again at time t (a min-heap; stale entries are harmless). */
void wl__wake_at(struct wl__replay *r, int idx, double t);

/* ------------------------------------------------------------------ replay_p2p.c */

/* Allocate r's pipeline transfers and their 2-rank communicators (none created yet). */
void wl__p2p_init(struct wl__replay *r);

/* Transfer index i of the program (wl_program_p2p_index) for EP index e, created on first use
 * (as flows, or in closed form); on failure r->rc is set. */
struct wl__p2p *wl__p2p_get(struct wl__replay *r, int i, int e);

/* Side `side` of transfer p (0 the sender, 1 the receiver) joins it at t. */
void wl__p2p_join(struct wl__replay *r, struct wl__p2p *p, int side, double t);

/* Whether transfer p has arrived at the engine's clock; if so *end is when. */
bool wl__p2p_done(struct wl__replay *r, struct wl__p2p *p, double *end);
/* The time done transfer p, ending at end, was on the network: from its post (formula: eager)
 * or from when both sides had joined (flows: a rendezvous, as NCCL's and HCCL's send/recv). */
double wl__p2p_span_s(const struct wl__p2p *p, double end);

/* Free r's transfers and their communicators. */
void wl__p2p_release(struct wl__replay *r);

/* ------------------------------------------------------------------ replay_coll.c */

/* Start op of `bytes` per rank (matrix: AllToAllV sizes, borrowed) over c on r's executor,
 * counted in the result: the instance's id, or < 0 with r->rc set. */
int wl__start_coll(struct wl__replay *r, const struct ic_comm *c, enum ic_op op, double bytes, const double *matrix);

/* The DP, EP and expert data-parallel communicators of every stage. Returns 0 or an error. */
int wl__build_comms(struct wl__replay *r);

/* Free the communicators of wl__build_comms. */
void wl__comms_release(struct wl__replay *r);

/* Post a dense gradient bucket of n parameters over rk's DP groups (waited for before the
 * optimizer). */
void wl__post_bucket(struct wl__replay *r, struct wl__rank *rk, double n, double t);

/* Post an expert gradient bucket of n parameters over rk's expert data-parallel groups. */
void wl__post_ebucket(struct wl__replay *r, struct wl__rank *rk, double n, double t);

/* Start the second phase of every chained collective whose first has ended, at now (after an
 * executor event: only one can end a phase). */
void wl__pump_chains(struct wl__replay *r, double now);

/* ZeRO-3: join the all-gather of `params` parameters of a piece of rk's current slot; its handle. */
int wl__post_gather(struct wl__replay *r, struct wl__rank *rk, double params, double t);

/* ZeRO 1-2 after the optimizer: join the gathers of rk's parameters (waited for in rk->ids). */
void wl__post_param_gathers(struct wl__replay *r, struct wl__rank *rk, double t);

/* Join the EP all-to-all of (layer, mb, which) from the routing draw (flows, or closed form);
 * its handle, or < 0 on failure. */
int wl__join_a2a(struct wl__replay *r, struct wl__rank *rk, int layer, int mb, enum wl_a2a_which which, double t);

/* ------------------------------------------------------------------ results.c */

/* Fill res's step time, MFU, HFU, memory, bubble fraction, MoE routing statistics and
 * bottleneck from its per-rank results (res->stages, end_s relative to the step's start). */
void wl__results_finish(const struct wl_program *p, struct wl_result *res);

#endif
