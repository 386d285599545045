/*
 * rl_int.h - declarations shared by the files of rl/ (not part of its interface).
 */
#ifndef NPUSIM_RL_RL_INT_H
#define NPUSIM_RL_RL_INT_H

#include <stdbool.h>

#include "interconnect/coll.h"
#include "ops/cost_cache.h"
#include "rl/rl.h"
#include "workloads/memory.h"

/* ------------------------------------------------------------------ collectives (probe.c) */

enum rl_group { RL_GROUP_ROLLOUT_TP, RL_GROUP_TRAIN_TP, RL_GROUP_ALL };

/* A distinct collective an estimate needs, timed alone on its group's links (probe.c). */
struct rl_coll {
  enum ic_op op;
  double bytes;          /* nccl-tests convention */
  int group;             /* enum rl_group */
  double time_s;         /* filled by rl__probe */
};

struct rl_colls {
  struct rl_coll *v;
  int n, cap;
  const double *matrix;  /* the one ALLTOALLV (weight sync) over RL_GROUP_ALL, p x p; borrowed */
  int matrix_ranks;      /* p: the ranks of RL_GROUP_ALL, 0 .. p-1 */
};

/* The index of (op, bytes, group), added when new. */
int rl__coll(struct rl_colls *c, enum ic_op op, double bytes, int group);
void rl__colls_release(struct rl_colls *c);

/*
 * Time every collective of c alone, one after another, on the system's platform, in a child
 * process (SimGrid allows one engine per process): group ROLLOUT_TP is the first rollout
 * engine's ranks, TRAIN_TP the first training TP group. Fills time_s. 0 or an error.
 */
int rl__probe(const struct rl_job *job, struct rl_colls *c, struct npu_diag *diag);

/* ------------------------------------------------------------------ inference costs (infer.c) */

#define RL_MAX_BUCKETS 24
#define RL_MAX_REFS 6

/* A cost from kernels plus collectives (times known after the probe). */
struct rl_cost {
  double kernel_s;
  double flops;
  int coll[RL_MAX_REFS], mult[RL_MAX_REFS], ncoll;
};

/* The inference cost model of the policy on one layout: TP size, expert placement. */
struct rl_infer {
  const struct rl_job *job;
  struct op_cache *cache;
  struct rl_colls *colls;
  int group;                /* enum rl_group of its TP collectives */
  int tp;
  bool ep;                  /* experts spread over the tp ranks (MoE) */
  double weight_bytes;      /* per device: all parameters / tp, bf16 */
  double kv_token_bytes;    /* per device and context token, all layers (K and V, bf16) */
  double kv_token_s;        /* decode: seconds per context token read per step */
  double step_overhead_s;   /* decode: engine time per step beyond the kernels (rl.rollout.step_overhead) */
  double seq_overhead_s;    /* decode: engine time per step and running sequence (rl.rollout.seq_overhead) */
  int nb;                   /* decode buckets */
  int batch[RL_MAX_BUCKETS];
  struct rl_cost decode[RL_MAX_BUCKETS]; /* one decode step at batch[i], without the KV reads */
  struct rl_cost prefill;   /* one prefill chunk of chunk_tokens prompt tokens */
  int chunk_tokens;
  struct rl_cost forward;   /* one forward over a packed training sequence (log-probs), fwd_seq tokens */
  int fwd_seq;
};

/* The per-device weights and KV cache sizes of the policy at TP tp (no costing). */
double rl__weight_bytes(const struct wl_model *m, int tp);
double rl__kv_token_bytes(const struct wl_model *m, int tp);
/* Live activations of one prefill chunk of `tokens` tokens per device (bf16), reserved before the KV cache. */
double rl__activation_bytes(const struct wl_model *m, int tp, int tokens);

/*
 * Cost the kernels of the policy on layout (tp, ep): decode steps at batches 1, 2, 4, ... up to
 * max_batch, one prefill chunk of chunk_tokens (prompts of prompt_len), and one forward over a
 * packed sequence of fwd_seq tokens (fwd_seq 0: none). Collectives are registered in colls.
 */
int rl__infer_init(struct rl_infer *x, const struct rl_job *job, struct op_cache *cache, struct rl_colls *colls,
                   int group, int tp, bool ep, int max_batch, int chunk_tokens, int prompt_len, int fwd_seq,
                   struct npu_diag *diag);
/* Time of a cost once the collectives are probed. */
double rl__cost_s(const struct rl_infer *x, const struct rl_cost *c);
/* One decode step of batch sequences holding ctx_tokens context tokens in all: the kernels, the
 * KV reads and the engine's time beyond its kernels (step_overhead_s + batch x seq_overhead_s). */
double rl__decode_step_s(const struct rl_infer *x, int batch, double ctx_tokens);
/* Model FLOPs of the policy per token at context ctx (2 x active matmul params + attention). */
double rl__token_flops(const struct wl_model *m, double ctx);

/* ------------------------------------------------------------------ rollout (rollout.c) */

/* Response lengths of the iteration: n draws, seeded (gsl mt19937), clipped to [min, max]. */
void rl__draw_lengths(const struct rl_spec *s, int n, int *out);

/*
 * Continuous batching on every engine: sequence i (prompt_len + len[i]) goes to engine
 * i * engines / n (contiguous chunks, GRPO groups together); an engine admits queued sequences
 * while fewer than max_batch run and their prompt + response fit the KV cache
 * (kv_capacity_tokens), prefills them in chunks, then decodes one token per running sequence
 * per step; a sequence leaves after its last token. Fills st.
 */
void rl__rollout(const struct rl_infer *x, const int *len, int n, int engines, int prompt_len, int max_batch,
                 double kv_capacity_tokens, struct rl_rollout_stats *st);

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

/* Run fn(arg, out, size) in a forked child and copy its `size`-byte result back; fn returns a
 * status, 0 ok. A child that dies is NPU_EINTERNAL with diag. */
int rl__fork(int (*fn)(void *arg, void *out, struct npu_diag *diag), void *arg, void *out, size_t size,
             struct npu_diag *diag);

#endif
