/*
 * kernel.h - writing and launching tile programs on the chip model.
 *
 * A kernel is written as Ascend C kernels are: per core, a stream of instructions on the
 * pipes, synchronised by flags. Here the kernel supplies callbacks that emit those
 * instructions through the core_* functions below; the launch runs them over block_dim
 * cores with one of two fidelities:
 *   event     every instruction is an event; GM traffic of all cores shares L2 and HBM
 *             through SimGrid flows (needs the process's engine, see engine/engine.h);
 *   analytic  the same instructions, one or two blocks per block class, pipelined in closed
 *             form with GM bandwidth shared statically (no SimGrid).
 * In functional mode the instructions also really move and compute data through buffers of
 * the modelled sizes.
 *
 * Work is cut into blocks: each launch unit (a core, or in MIX mode one AI core = a cube core
 * and its vector cores) runs its blocks in order; `block` emits one block's instructions and
 * is called lazily, so a kernel of millions of instructions never holds them all. Control
 * flow in a kernel may depend on its tiling, never on data it computes: data-dependent sizes
 * (MoE group counts) are tiling data prepared on the host, as Ascend C host tiling does.
 *
 * Per-unit emission state (which buffer a unit's next block uses) is not kept by the kernel:
 * the kernel declares its size (unit_ctx_bytes) and the launch allocates one per unit, because
 * only the launch knows how many units each run has (the analytic fidelity runs sampled units
 * on their own). A kernel with a real limit on its cores declares it (max_units).
 *
 * Errors in a program (buffer overflow, misalignment, a path or dtype the chip lacks, a wait
 * that is never satisfied) are reported by core_launch with a message; the first one sticks.
 */
#ifndef NPUSIM_CORES_KERNEL_H
#define NPUSIM_CORES_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "common/strutil.h"
#include "common/progress.h"
#include "common/trace.h"
#include "cores/isa.h"
#include "memory/gm.h"

enum core_mode {
  CORE_MODE_CUBE,   /* units are cube cores */
  CORE_MODE_VECTOR, /* units are vector cores */
  CORE_MODE_MIX,    /* units are AI cores: a cube core and its vector cores */
};

/* The sub-core a MIX unit emits to. */
enum core_sub { CORE_SUB_AIC, CORE_SUB_AIV0, CORE_SUB_AIV1 };

enum core_fidelity { CORE_FIDELITY_EVENT, CORE_FIDELITY_ANALYTIC };

struct core_tp; /* emission context: one launch unit */

struct core_kernel {
  const char *name;
  enum core_mode mode;
  int block_dim;          /* launch units */
  uint64_t nblocks;       /* blocks of work, dealt to units */
  void *ctx;              /* the kernel's tiling and arguments */
  /* Optional: emitted once per unit before its first block / after its last. */
  void (*unit_begin)(struct core_tp *t, void *ctx);
  void (*unit_end)(struct core_tp *t, void *ctx);
  /* Emit the instructions of one block. */
  void (*block)(struct core_tp *t, void *ctx, uint64_t block);
  /* Optional: the i-th block of unit u, or UINT64_MAX when u has no more (default: i*dim+u). */
  uint64_t (*block_of)(void *ctx, int unit, uint64_t i);
  /* Optional, for the analytic fidelity: blocks of one class take the same time. */
  int (*block_class)(void *ctx, uint64_t block);
  /* With block_class: a block's time and counts are affine in its class (the class numbers the
   * steps of its inner loop, as causal attention's rows do), so the analytic fidelity samples
   * some classes and interpolates the others (cores/analytic.c, CLASS_SAMPLES). */
  bool class_affine;
  /* Bytes of per-unit emission state (stage counters, ping-pong parities): the launch gives
   * every unit its own, zeroed, through core_unit_ctx. 0: none. */
  size_t unit_ctx_bytes;
  /* Most cores of the launch's kind (cube for CUBE and MIX, vector for VECTOR) the program
   * supports; a chip with more is refused (NPU_EUNSUPPORTED) rather than run on fewer. 0: any. */
  int max_units;
};

/* Per-pipe results of one launch, summed over the cores of each kind. */
struct core_pipe_stats {
  double busy_s;          /* sum of instruction durations */
  double gm_busy_s;       /* of which copies to or from GM */
  uint64_t instructions;
};

struct core_result {
  double time_s;                 /* launch overhead + first instruction to last completion */
  double launch_s;               /* launch overhead included in time_s */
  int aic_used, aiv_used;        /* physical cores that ran instructions */
  int aic_total, aiv_total;      /* cores of the chip */
  struct core_pipe_stats aic[CORE_PIPE_COUNT], aiv[CORE_PIPE_COUNT];
  /* msprof names: busy / (kernel time x cores used of that kind) */
  double aic_mac_ratio, aic_mte1_ratio, aic_mte2_ratio, aic_fixpipe_ratio, aic_scalar_ratio;
  double aiv_vec_ratio, aiv_mte2_ratio, aiv_mte3_ratio, aiv_scalar_ratio;
  uint64_t path_bytes[ARCH_PATH_COUNT]; /* bytes moved per path (GM ones after bursts) */
  uint64_t gm_read_bytes, gm_write_bytes, l2_hit_bytes, hbm_bytes;
  double hbm_bw_bytes_per_s, l2_bw_bytes_per_s; /* achieved over time_s */
  double flops;                  /* cube MACs x 2 + vector element operations */
  uint64_t cube_macs;
  uint64_t bank_conflict_cycles; /* vector cycles lost to UB bank conflicts */
  uint64_t instructions;
  const char *bottleneck;        /* cube_bound, vec_bound, mte2_bound, ... */
  int ranks;                     /* devices of the launch (1: one); counts above are summed over
                                    them, aic_total / aiv_total are the devices' cores together */
  uint64_t link_bytes;           /* bytes copied to or from another device's memory */
};

/*
 * One instruction as it ran (event fidelity), for profilers' formats (micro/msprof.c writes
 * msprof's). Flags and barriers are reported too: a set as a zero-length event when its flag
 * lands, a wait from when it reached the head of its pipe until the flag it waited for landed.
 * Each set starts a flow (an id from 1 up, unique in the launch) and the wait that consumes its
 * flag ends it: the arrows of msprof's pipeline view, within a core and across cores.
 */
struct core_obs_instr {
  int core;                     /* core id: cube (AIC) or coupled cores 0..aic_count-1, vector
                                   (AIV) cores aic_count.. */
  int unit;                     /* launch unit (block) */
  int pipe;                     /* enum core_pipe it ran on */
  const struct core_instr *in;  /* valid during the call */
  double start_s, end_s;        /* from the start of the kernel body (after the launch) */
  double body_t0_s;             /* when that body started on the engine's clock (a sequence of
                                   launches: each its own) */
  uint64_t bytes;               /* copies: bytes moved; 0 otherwise */
  uint64_t flow;                /* set / cross-core set: the flow it starts; wait: the one it
                                   ends; 0 otherwise */
};

struct core_observer {
  void (*instr)(void *ctx, const struct core_obs_instr *e);
  void *ctx;
};

struct core_launch_opts {
  enum core_fidelity fidelity;
  bool functional;         /* really move and compute data */
  struct npu_trace *trace; /* if not NULL, one event per instruction is recorded (event only) */
  const struct core_observer *observe; /* if not NULL, told of every instruction (event only) */
  const struct npu_progress *progress; /* if not NULL, told of the blocks issued (event only) */
  const char *host_prefix; /* engine host names of this chip's memory platform ("" if NULL) */
  /* Devices of the launch (0 or 1: one). With ranks > 1 the kernel runs on every device of a
   * server at once (event fidelity only, on a platform of mem_platform_group_xml: hosts
   * "d<r>."), each device with its own cores, block_dim units, L2 and HBM: an SPMD launch, as a
   * fused communication kernel (MC2) is started on every rank of its group. A GM copy whose
   * tensor lives on another device (mem_gm_device) crosses the link between the two. */
  int ranks;
  double link_latency_s;   /* ranks > 1: the link's latency between two devices: a notify's flight,
                              and what a copy to or from another device adds before its data land
                              (a DMA engine pipelines it, as it does HBM's) */
};

/*
 * Run kernel k on chip, GM tensors in gm. Event fidelity must run inside the engine: call it
 * from npu_engine's actor, or through core_launch_standalone. Returns 0 and fills *out, or
 * NPU_EINVAL (a program error, e.g. a buffer overflow; diag says what) or NPU_EUNSUPPORTED
 * (an instruction or dtype the chip lacks).
 */
int core_launch(const struct arch_chip *chip, struct mem_gm *gm, const struct core_kernel *k,
                const struct core_launch_opts *opts, struct core_result *out,
                struct npu_diag *diag);

/*
 * Start the process's engine on a platform of this chip's memory system and run one launch
 * in it (event fidelity), or run analytic directly. For tests, benchmarks and `npusim
 * kernel`; a process can start its engine once.
 */
int core_launch_standalone(const struct arch_chip *chip, struct mem_gm *gm,
                           const struct core_kernel *k, const struct core_launch_opts *opts,
                           struct core_result *out, struct npu_diag *diag);

/* ------------------------------------------------------------------ emission */

/* Select the sub-core that following instructions go to (MIX units; others ignore it). */
void core_select(struct core_tp *t, enum core_sub sub);
/* The launch unit index (0..block_dim-1) and the chip. */
int core_unit(const struct core_tp *t);
const struct arch_chip *core_chip(const struct core_tp *t);
/* The unit's own context of k->unit_ctx_bytes (NULL if 0): owned by the launch, zeroed when the
 * launch (or, in the analytic fidelity, each sampled run of the unit) starts, valid until it ends. */
void *core_unit_ctx(const struct core_tp *t);

/* Copy a tile between spaces; the pipe follows from the path (MTE2, MTE1, FIX, MTE3). */
void core_copy(struct core_tp *t, const struct core_tile *dst, const struct core_tile *src);
/* The same with FixPipe options: scale, ReLU, per-column scales in FB, transpose. */
void core_copy_ex(struct core_tp *t, const struct core_copy *c);
/* c (L0C, fp32 or int32) = / += a (L0A) x b (L0B), m x k x n, inputs of dtype. */
void core_mmad(struct core_tp *t, const struct core_tile *c, const struct core_tile *a,
               const struct core_tile *b, uint32_t m, uint32_t k, uint32_t n, bool init);
/* The same from a filled struct, with MX scales when mm->mx (see struct core_mmad and
 * core_mx_scales); the dtype is a's. MX needs the chip's mxfp8 (fp8 elements) or mxfp4 (fp4
 * elements) cube input. */
void core_mmad_ex(struct core_tp *t, const struct core_mmad *mm);
/* A vector instruction. */
void core_vec(struct core_tp *t, const struct core_vec *v);
/* Scalar work of cycles cycles on the scalar unit (address arithmetic, loop control). */
void core_scalar(struct core_tp *t, double cycles);
void core_set_flag(struct core_tp *t, enum core_pipe src, enum core_pipe dst, int id);
void core_wait_flag(struct core_tp *t, enum core_pipe src, enum core_pipe dst, int id);
/* Wait until the pipe's earlier instructions have completed and their data landed. */
void core_pipe_barrier(struct core_tp *t, enum core_pipe p);
/* pipe_barrier(PIPE_ALL): every pipe of the selected core. */
void core_fence(struct core_tp *t);
/* Cross-core flags between the sub-cores of one MIX unit: set from pipe p towards peer. */
void core_xset(struct core_tp *t, enum core_pipe p, enum core_sub peer, int id);
void core_xwait(struct core_tp *t, enum core_pipe p, enum core_sub peer, int id);
/* All-core barrier across every core of the launch (of every device, with ranks > 1). */
void core_sync_all(struct core_tp *t);
/* The device this unit runs on (0..ranks-1) and the launch's devices (1 for one chip). */
int core_rank(const struct core_tp *t);
int core_ranks(const struct core_tp *t);
/*
 * Signals between devices (and between any cores of one), as HCCL's notifies or PTO's
 * TNOTIFY / TWAIT: core_notify adds one, from pipe p once that pipe's earlier copies have landed,
 * to signal id of device rank (the unit's own device too), arriving a notify's flight later
 * (core_launch_opts.link_latency_s; cross_core_s on one device); core_notify_wait holds pipe p until
 * signal id of its own device has received count notifies. A signal is one event: its waits all
 * ask for every notify it will receive (the executor resolves waits ahead of simulated time, so a
 * wait for fewer would see notifies in resolution order, not time order); a launch in which a
 * signal receives more notifies than a wait asked for fails with a message. id < CORE_SIGNAL_IDS.
 */
void core_notify(struct core_tp *t, enum core_pipe p, int rank, int id);
void core_notify_wait(struct core_tp *t, enum core_pipe p, int id, uint32_t count);
/* Record a program error (the first sticks; later emissions are ignored). */
void core_fail(struct core_tp *t, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether a program error has been recorded. */
bool core_failed(const struct core_tp *t);

#define CORE_FLAG_IDS 16  /* event ids per pipe pair */
#define CORE_XFLAG_IDS 16 /* cross-core flag ids */
#define CORE_SIGNAL_IDS 4096 /* signal ids per device */
#define CORE_MAX_RANKS 16    /* devices of one launch */

#endif
