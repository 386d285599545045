/*
 * exec_int.h - internals shared by the files of cores/: the run state of one launch, the
 * per-core pipes, and the functional and timing helpers. Not for use outside cores/.
 */
#ifndef NPUSIM_CORES_EXEC_INT_H
#define NPUSIM_CORES_EXEC_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/trace.h"
#include "cores/kernel.h"
#include "memory/l2.h"

enum core_kind { CORE_KIND_AIC, CORE_KIND_AIV, CORE_KIND_COUPLED };

/* Pipe states. */
enum {
  P_RUN,      /* can try its head instruction */
  P_EMPTY,    /* nothing queued */
  P_FLAG,     /* waiting for a set_flag */
  P_XFLAG,    /* waiting for a cross-core set */
  P_SIGNAL,   /* waiting for a signal's notifies */
  P_FENCE,    /* waiting at a fence or all-core barrier */
  P_SCALAR,   /* waiting for the scalar unit to reach this instruction */
  P_ISSUE,    /* GM copy waiting for its start time */
  P_INFLIGHT, /* GM copy in flight */
};

/* FIFO of times (set flags not yet consumed). */
struct core__tq {
  double *t;
  uint64_t *flow;  /* the flow id of each set (observed launches) */
  uint32_t head, n, cap;
};

struct core__pipe {
  struct core_instr *q; /* ring of queued instructions */
  uint32_t head, count, cap;
  double free_at;       /* when the next instruction may start */
  double data_ready;    /* when the data of earlier copies has landed */
  uint8_t st;           /* P_* */
  bool in_ready;        /* on the ready list */
  double start;         /* P_ISSUE / P_INFLIGHT: start of the head instruction */
  int parts;            /* P_INFLIGHT: transfers still running */
  bool miss;            /* P_INFLIGHT: some bytes come from HBM */
  bool remote;          /* P_INFLIGHT: to or from another device's memory (event, ranks > 1) */
  double miss_share;    /* P_INFLIGHT, analytic: the share of its bytes expected to miss */
  double busy_s;
  uint64_t n;
};

struct core__core {
  int id;                /* physical core number (platform host c<id>) */
  uint8_t kind;          /* enum core_kind */
  uint8_t pipes;         /* bit mask of the pipes this core has */
  bool used;
  int unit;              /* launch unit owning this core */
  int sub;               /* its sub-core in that unit */
  struct core__pipe pipe[CORE_PIPE_COUNT];
  struct core__tq *flags; /* CORE_PIPE_COUNT^2 x CORE_FLAG_IDS, for cores of the launch */
  double *scalar_t;      /* completion time of the i-th scalar instruction */
  uint32_t scalar_done, scalar_cap, scalar_emitted;
  int fence_arrived;     /* pipes at the current fence */
  double fence_t;
  uint8_t *buf[MEM_SPACE_COUNT]; /* functional storage of local buffers */
};

struct core__unit {
  int index;             /* in the launch: rank x block_dim + local */
  int rank, local;       /* its device, and its index there (core_unit) */
  int phys[3];           /* physical core of each sub-core, -1 if none */
  uint64_t next;         /* ordinal of the next block */
  bool begun, finished;
  struct core__tq xflags[3 * 3 * CORE_XFLAG_IDS]; /* (from sub, to sub, id) */
};

struct core_tp {
  struct core__run *run;
  struct core__unit *u;
  int sel;
  void *ctx;             /* the unit's context (core_unit_ctx), NULL if the kernel has none */
};

struct core__run;
struct core__ixlog;

/* A signal of one device (core_notify): the arrival times of its notifies, and the most a wait
 * asked for. */
struct core__signal {
  double *t;
  uint32_t n, cap;
  uint32_t asked;
};

/* GM backends: when a GM copy may start at t, resolve it now (analytic) or later (event). */
struct core__gm_backend {
  const char *name;
  /* Returns true if the copy was completed (core__gm_finish called), false if pending. */
  bool (*start)(struct core__run *r, struct core__core *c, int pipe, double t);
};

struct core__heap_item {
  double t;
  int core, pipe;
};

struct core__run {
  const struct arch_chip *chip;
  struct mem_gm *gm;
  const struct core_kernel *k;
  struct core_launch_opts opts;
  struct core__core *cores;
  int ncores;
  int ranks;             /* devices (1: one chip) */
  int per_rank;          /* physical cores of one device: core c is device c / per_rank's
                            core c % per_rank */
  struct core__signal *signals[CORE_MAX_RANKS]; /* CORE_SIGNAL_IDS each, at a device's first notify */
  struct mem_l2 *l2_of[CORE_MAX_RANKS]; /* event, ranks > 1: each device's L2 (l2_of[0] == l2) */
  struct core__unit *units;
  int nunits;
  struct core_tp *tps;
  unsigned char *unit_ctx; /* nunits contexts of k->unit_ctx_bytes, each at an aligned stride */
  int *ready; /* stack of core * CORE_PIPE_COUNT + pipe */
  int nready, ready_cap;
  int err;
  struct npu_diag diag;
  const struct core__gm_backend *be;
  struct mem_l2 *l2;
  double hit_fraction;   /* analytic: share of GM reads served by L2 */
  double hit_fraction_wr; /* analytic: share of GM writes that stay in L2 */
  const double *tensor_hits; /* analytic: per GM tensor, the shares of its reads and writes L2 serves */
  double now;            /* event: simulated time of the engine, relative to t0 */
  double t0;
  double end;            /* latest completion seen */
  int sync_arrived, sync_members;
  double sync_t;
  struct core__heap_item *heap; /* event, analytic: GM copies waiting for their start time */
  int nheap, heap_cap;
  uint64_t pending_limit;
  /* analytic L2 estimate: emission only reports GM copies here and queues nothing */
  void (*gm_sink)(void *ctx, int unit, const struct core_copy *cp);
  void *gm_sink_ctx;
  /* analytic, functional pass: where its indexed copies really went (see analytic.c) */
  struct core__ixlog *ixlog;
  struct core_result res;
  struct npu_trace *trace;
  const struct core_observer *observe;
  uint64_t flows;        /* flow ids given so far (observed launches) */
  const char *host_prefix;
};

/* emit.c */
void core__emit_reset(struct core__run *r);
bool core__generate(struct core__run *r, struct core__unit *u); /* false if nothing left */
uint64_t core__unit_pending(const struct core__run *r, const struct core__unit *u);

/* stats.c: tell the launch's observer of an instruction (absolute times) */
void core__observe(struct core__run *r, const struct core__core *c, int pipe, const struct core_instr *in,
                   double start, double end, uint64_t flow);

/* exec.c */
void core__wake(struct core__run *r, struct core__core *c, int pipe);
/* miss: 1 when the copy waits for HBM, 0 for L2; the analytic fidelity, which knows only the
 * kernel's hit share, passes the share of copies that miss (1 - hit share: expected latency). */
void core__gm_finish(struct core__run *r, struct core__core *c, int pipe, double end, double miss);
void core__drain(struct core__run *r);
/* The GM copies handed to a backend that waits for simulated time (P_ISSUE): a min-heap on
 * (start, core, pipe), so that ties resolve in the same order on every run. */
void core__heap_push(struct core__run *r, double t, int core, int pipe);
struct core__heap_item core__heap_pop(struct core__run *r);
bool core__all_done(const struct core__run *r);
int core__deadlock(struct core__run *r);
void core__run_init(struct core__run *r, const struct arch_chip *chip, struct mem_gm *gm,
                    const struct core_kernel *k, const struct core_launch_opts *opts);
void core__run_release(struct core__run *r);

/* Instruction rings outlive their run (exec.c): core__ring_take gives a ring of at least
 * min_cap entries (a power of two, in *cap), the largest one kept if any; core__ring_give
 * keeps one for the next run (or frees it). A costed kernel's sampled blocks emit thousands of
 * instructions per pipe before the first runs, and rings grown afresh for every kernel were a
 * third of the costing's time under the sanitizers, in page faults. */
struct core_instr *core__ring_take(uint32_t min_cap, uint32_t *cap);
void core__ring_give(struct core_instr *q, uint32_t cap);
void core__fail(struct core__run *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/*
 * The GM tile a GM copy of core c touches, for the L2 reuse models (event.c issue, analytic.c's
 * trace). A plain copy touches its GM tile. An indexed copy touches addr + index x index_stride,
 * the index a uint32 in c's UB at index_ub when the copy runs: a functional run has it (read as
 * func.c reads it) and gets the real tile; a timing-only run has no data, hence no index (its
 * copies move data as if the index were 0), and the models take such a copy to touch lines that
 * nobody touched before and nobody touches again -- a gather or scatter of distinct rows: every
 * read misses and nothing is reused (mem_l2_touch_fresh in event, a key of its own in the
 * analytic trace). Returns false, and *g the unindexed tile, when the address is unknown that way
 * (or, in a functional run, when the index puts the tile outside every tensor: func.c then fails
 * the run).
 */
bool core__gm_tile(const struct core__run *r, const struct core__core *c, const struct core_copy *cp,
                   struct core_tile *g);

/* timing.c: durations of instructions that do not touch GM, and GM copy byte counts */
double core__local_time(const struct arch_chip *chip, const struct core_instr *in,
                        uint64_t *conflict_cycles);
uint64_t core__gm_bytes(const struct arch_chip *chip, const struct core_instr *in);
/* Of a GM read's hit bytes, those L2 serves to this member: hit / multicast (all for an
 * ordinary copy); the cluster's network delivers the rest. */
uint64_t core__multicast_share(const struct core_instr *in, uint64_t hit_bytes);
uint64_t core__copy_bytes(const struct core_instr *in);
double core__vec_flops(const struct core_vec *v);

/* func.c: functional execution */
void core__func(struct core__run *r, struct core__core *c, const struct core_instr *in);

/* event.c, analytic.c */
extern const struct core__gm_backend core__event_backend;
int core__run_event(struct core__run *r);
int core__run_analytic(const struct arch_chip *chip, struct mem_gm *gm,
                       const struct core_kernel *k, const struct core_launch_opts *opts,
                       struct core_result *out, struct npu_diag *diag);

/* stats.c */
void core__finish_result(struct core__run *r);
void core__result_finish(struct core_result *res, const struct arch_chip *chip,
                         enum core_mode mode, double body_s);
/* The time was set by the memory system (HBM or L2 bandwidth), not by a pipe: the bottleneck is
 * the busiest GM pipe's (mte2_bound, mte3_bound, fixpipe_bound); launch_bound stays. */
void core__result_memory_bound(struct core_result *res);
void core__account(struct core__run *r, struct core__core *c, int pipe,
                   const struct core_instr *in, double start, double end);

#endif
