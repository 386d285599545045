/*
 * rl_int.h - declarations shared by the files of rl/ (not part of its interface).
 */
#ifndef NPUSIM_RL_RL_INT_H
#define NPUSIM_RL_RL_INT_H

#include <stdbool.h>

#include "interconnect/coll.h"
#include "ops/cost_cache.h"
#include "rl/rl.h"
#include "serve/engine.h"
#include "serve/infer.h"
#include "workloads/memory.h"

/*
 * The rollout engine is serve/'s (issue 20: one engine model for serving and the RL rollout):
 * its step costs (serve/infer.h), its scheduler (serve/engine.h) and its probe of the
 * collectives (sv_probe). The groups of an iteration's collectives:
 */
enum rl_group { RL_GROUP_ROLLOUT_TP, RL_GROUP_TRAIN_TP, RL_GROUP_ALL };

/* Tokens per KV cache block of a rollout engine (vLLM's default block size). */
#define RL_BLOCK_TOKENS 16

/* ------------------------------------------------------------------ rollout (rollout.c) */

/* Response lengths of the iteration: n draws, seeded (gsl mt19937), clipped to [min, max]. */
void rl__draw_lengths(const struct rl_spec *s, int n, int *out);

/*
 * The rollout as serve/'s engines run it: sequence i (prompt_len + len[i]) goes to engine
 * i * engines / n (contiguous chunks, GRPO groups together; job->engines engines of
 * rl.rollout.tp), all at t = 0; continuous batching with chunked prefill in
 * rl.rollout.max_batched_tokens, at most rl.rollout.max_num_seqs running, admission reserving
 * KV blocks for the whole sequence (kv_blocks of 16 tokens per engine: no preemption), decode
 * steps padded to vLLM's graph sizes; steps costed by x. Fills st.
 */
void rl__rollout(const struct sv_infer *x, const struct rl_job *job, const int *len, int n, int prompt_len,
                 long kv_blocks, struct rl_rollout_stats *st);

/* ------------------------------------------------------------------ weight sync (reshard.c) */

/*
 * The bytes each device sends to each other device to turn the training layout (plan on the
 * training pool's ranks) into the rollout layout (engines of tp ranks on the rollout pool's
 * ranks; ep: experts spread over an engine's ranks): matrix[src * p + dst], p = job->devices
 * (global ranks). A device that holds a piece of its rollout shard in its training shard keeps
 * it (colocated). Returns the total bytes sent; *needed (may be NULL) the bytes of the rollout
 * shards in all, *local_max (may be NULL) the most any device keeps from its own training shard.
 */
double rl__reshard_matrix(const struct rl_job *job, double *matrix, double *needed, double *local_max);

/* ------------------------------------------------------------------ training (train.c) */

struct rl_train {
  double step_s, mfu, memory_bytes, model_flops;
  bool oom;
  char bottleneck[256];
  int global_batch;          /* packed sequences per optimizer step */
  int steps;                 /* optimizer steps per iteration */
  struct wl_mem mem;         /* per device of the training pool (peak stage) */
};

/* Replay one actor optimizer step (in a child) for `tokens` trained tokens. */
int rl__train(const struct rl_job *job, double tokens, struct rl_train *out, struct npu_diag *diag);


#endif
