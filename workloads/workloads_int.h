/*
 * workloads_int.h - declarations shared by the files of workloads/ and no one else: the
 * expansion's kernel table, expert costing, rank geometry, the shared-collective table of the
 * replay and the results' attribution.
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
/* The typed calls of the routed experts' kernels (expand.c): a grouped GEMM, a SwiGLU. */
struct op_call wl__grouped_gemm_call(int64_t groups, int64_t m, int64_t n, int64_t k, enum npu_dtype dt);
struct op_call wl__swiglu_call(int64_t rows, int64_t ffn, enum npu_dtype dt);

/* Cost every kernel of p not costed yet through cache (the chip model at the run's fidelity).
 * Returns 0, or an error with diag naming the kernel (a shape the chip cannot run). */
int wl__cost_kernels(struct wl_program *p, struct op_cache *cache, struct npu_diag *diag);

/* The routed experts of one rank receiving `tokens` token copies in one layer and micro-batch:
 * seconds of each pass (out[WL_EXPERT_PASSES]), from p->experts' bucket of tokens (within 5%,
 * scaled), costing the bucket's kernels through cache if it is new. Returns 0 or an error. */
int wl__expert_cost(struct wl_program *p, struct op_cache *cache, double tokens, double *out,
                    struct npu_diag *diag);

/* ------------------------------------------------------------------ program.c: geometry */

/* The physical rank of (stage, tp, cp, dp) under the plan's rank order. */
int wl__phys_rank(const struct wl_plan *plan, int stage, int tp, int cp, int dp);

/* The rank of index ci (0 .. cp x dp - 1) of the expert layout of (stage, tp): EP varies fastest,
 * over the dp x cp ranks (cp faster than dp, as in Megatron's tp-cp-ep-dp-pp). */
int wl__ep_rank(const struct wl_plan *plan, int stage, int tp, int ci);

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

/* Whether shared collective h has finished at the engine's clock (x: its executor). */
bool wl__shared_done(const struct wl__shared_table *t, int h, struct ic_exec *x);

/* Called by each member once it no longer needs h's result; the last one frees its executor
 * instances and matrix (the entry stays, done, under its key). */
void wl__shared_drop(struct wl__shared_table *t, int h, struct ic_exec *x);

/* Free the table (the executor instances are the executor's). */
void wl__shared_release(struct wl__shared_table *t);

/* ------------------------------------------------------------------ results.c */

/* Fill res's step time, MFU, HFU, memory, bubble fraction, MoE routing statistics and
 * bottleneck from its per-rank results (res->stages, end_s relative to the step's start). */
void wl__results_finish(const struct wl_program *p, struct wl_result *res);

#endif
