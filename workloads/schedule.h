/*
 * schedule.h - pipeline-parallel schedules as pure functions: the program order (forward,
 * backward, weight-gradient steps over micro-batches and model chunks) that one pipeline rank
 * runs in a training step.
 *
 * Each schedule reproduces its reference implementation step for step (docs/SCHEDULES.md):
 *   gpipe        GPipe (Huang et al. 2019): every forward, then every backward
 *   1f1b         Megatron-LM forward_backward_pipelining_without_interleaving
 *   interleaved  Megatron-LM forward_backward_pipelining_with_interleaving (virtual stages)
 *   zb_h1        ZB-H1, "Zero Bubble Pipeline Parallelism" (Qi et al., ICLR 2024), the
 *                handcrafted schedule of sail-sg/zero-bubble-pipeline-parallelism
 *   dualpipe     DualPipe, DeepSeek-V3 technical report, deepseek-ai/DualPipe dualpipe.py
 *
 * Micro-batches are numbered 0 .. mb-1. Model chunks are numbered in layer order
 * 0 .. pp*vpp-1; a micro-batch passes through them in that order for the forward and in the
 * reverse order for the backward. DualPipe feeds micro-batches 0 .. mb/2-1 in at rank 0
 * (chunk 0 of each rank) and mb/2 .. mb-1 at rank pp-1 (chunk 1 of each rank, which holds a
 * second copy of the stage pp-1-rank).
 *
 * Nothing here allocates except the returned arrays and strings; no global state.
 */
#ifndef NPUSIM_WORKLOADS_SCHEDULE_H
#define NPUSIM_WORKLOADS_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "common/diag.h"
#include "workloads/plan.h"

/* What a slot computes. A full backward is WL_PH_B; zero-bubble schedules split it into
 * WL_PH_BI (gradients of the inputs, sent on at once) and a later WL_PH_W (gradients of the
 * weights) for the same chunk and micro-batch. */
enum wl_phase {
  WL_PH_F,  /* forward */
  WL_PH_B,  /* full backward: input and weight gradients */
  WL_PH_BI, /* backward for the inputs only (the zero-bubble paper's "B") */
  WL_PH_W,  /* weight gradients of an earlier WL_PH_BI (the zero-bubble paper's "W") */
};

struct wl_slot {
  uint8_t phase;   /* enum wl_phase */
  uint8_t chunk;   /* local model chunk, 0 .. wl_schedule_chunks()-1 */
  uint32_t mb;     /* micro-batch, 0 .. mb-1 */
  uint8_t overlap; /* 1: this slot (a forward) and the next one (a full backward) run together
                      as one F&B pair (DualPipe, or combined 1F1B: wl_schedule_pair_fb), each
                      one's all-to-alls under the other's computation; 0 otherwise */
};

/*
 * The program of pipeline rank `stage` (0 .. pp-1) for `mb` micro-batches per step and `vpp`
 * model chunks per rank (1 except for the interleaved schedule). *out is malloc'ed (the caller
 * frees it), *n its length.
 *
 * Returns 0, or NPU_EINVAL with diag naming the key when the schedule cannot run the shape:
 *   every schedule: pp >= 1 (plan.pp), mb >= 1 (plan.global_batch), vpp >= 1 (plan.vpp);
 *   gpipe, 1f1b, zb_h1, dualpipe: vpp = 1 (plan.vpp);
 *   interleaved: vpp >= 2 (plan.vpp), pp >= 2 (plan.pp), mb a multiple of pp
 *                (plan.global_batch), as Megatron-LM requires;
 *   dualpipe: pp even (plan.pp), mb even and >= 2 pp (plan.global_batch), as dualpipe.py
 *             asserts.
 * A stage outside 0 .. pp-1 is a bug and aborts.
 */
int wl_schedule_build(enum wl_schedule kind, int pp, int vpp, int mb, int stage,
                      struct wl_slot **out, size_t *n, struct npu_diag *diag);

/*
 * Combined 1F1B (Megatron-Core --overlap-moe-expert-parallel-comm, MindSpeed --moe-fb-overlap):
 * turn a 1F1B or interleaved program of n slots into its paired form in place. Each steady-state
 * backward followed by a forward swaps with it and the two become an F&B pair (the forward's
 * overlap set): one more forward runs in warm-up, and every pair's forward and backward are of
 * different micro-batches, so neither waits for the other. Warm-up and cool-down stay unpaired.
 */
void wl_schedule_pair_fb(struct wl_slot *s, size_t n);

/* The model chunk (0 .. pp*vpp-1, layer order) that local chunk c of rank `stage` holds:
 * interleaved c*pp + stage (Megatron); dualpipe chunk 0 = stage, chunk 1 = pp-1-stage (the
 * reverse direction's copy, as in dualpipe.py's example); otherwise stage. */
int wl_schedule_model_chunk(enum wl_schedule kind, int pp, int vpp, int stage, int c);

/* Local chunks per rank: vpp for interleaved, 2 for dualpipe, else 1. */
/* Whether the schedule can run pp stages with vpp chunks each and mb micro-batches: 0, or
 * NPU_EINVAL with diag naming the plan key at fault (no file). */
int wl_schedule_check(enum wl_schedule kind, int pp, int vpp, int mb, struct npu_diag *diag);

int wl_schedule_chunks(enum wl_schedule kind, int vpp);

/*
 * Where micro-batch `m` (of `mb`) runs model chunk k (0 .. pp*vpp-1): the rank in *stage and
 * the local chunk in *chunk. Only DualPipe depends on the micro-batch: micro-batches
 * mb/2 .. mb-1 run model chunk k on rank pp-1-k, chunk 1. The replay uses this to route the
 * activations and gradients between ranks.
 */
void wl_schedule_locate(enum wl_schedule kind, int pp, int vpp, int mb, int m, int k,
                        int *stage, int *chunk);

/*
 * Most micro-batch activations the program holds at once, in units of one micro-batch's
 * activations of one local chunk (for 1f1b a chunk is the rank's whole stage; for interleaved
 * 1/vpp of it). A forward takes one; a full backward releases it; after a WL_PH_BI the
 * activations are held until the matching WL_PH_W (the weight gradient still needs the layer
 * inputs). In a DualPipe F&B pair the forward counts before the backward. `chunks` is
 * wl_schedule_chunks() (a bound check).
 */
int wl_schedule_max_inflight(const struct wl_slot *s, size_t n, int chunks);

/*
 * A text timeline of the schedule on every rank, one line per rank, for documentation:
 * durations in time units F = 1, BI = 1, W = 1, B = 2 and an overlapped F&B pair = 2, per local
 * chunk, zero communication, dependencies as in the pipeline. Each unit is 2 characters (3 when
 * a rank has several chunks): the phase letter (F, B, I for BI, W; lower case for the two
 * halves of an F&B pair), the chunk digit when there are several, the micro-batch in base 36;
 * '-' continues a slot, '.' is idle. *out is malloc'ed (the caller frees it). Errors as
 * wl_schedule_build, and mb > 36 (plan.global_batch).
 */
int wl_schedule_ascii(enum wl_schedule kind, int pp, int vpp, int mb, char **out,
                      struct npu_diag *diag);

#endif
