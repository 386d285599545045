/*
 * infer.h - what one step of an inference engine costs on the chip model: the shared cost
 * model of serving (serve/) and of the RL rollout and log-prob passes (rl/).
 *
 * An engine is a model sharded over tp devices (tensor parallel; MoE experts TP-sharded or
 * spread whole over the ranks). Its kernels are costed through the operator cost cache (ops/):
 * the layers' linear work (norms, GEMMs, RoPE, SwiGLU, MoE grouped GEMMs) at token-count
 * buckets, the sampling head at row buckets, prefill attention as the FlashAttention forward
 * kernel's FLOP rate at context buckets, decode attention as the paged-attention kernel
 * (linear in the context tokens a step reads), and the TP collectives by the interconnect
 * (registered in sv_colls, timed later by a probe). docs/SERVING.md has the formulas.
 */
#ifndef NPUSIM_SERVE_INFER_H
#define NPUSIM_SERVE_INFER_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "interconnect/coll.h"
#include "ops/cost_cache.h"
#include "workloads/model.h"

/* ------------------------------------------------------------------ collectives */

/* A distinct collective the costs need, timed alone on its group's links (by the caller's probe). */
struct sv_coll {
  enum ic_op op;
  double bytes;          /* nccl-tests convention */
  int group;             /* the caller's group id */
  double time_s;         /* filled by the probe */
};

struct sv_colls {
  struct sv_coll *v;
  int n, cap;
  const double *matrix;  /* an ALLTOALLV's byte matrix (the RL weight sync), matrix_ranks^2; borrowed */
  int matrix_ranks;
};

/* The index of (op, bytes, group), added when new. */
int sv_coll(struct sv_colls *c, enum ic_op op, double bytes, int group);
void sv_colls_release(struct sv_colls *c);

/* A group of ranks collectives run over: first, first + stride, ... (size ranks). */
struct sv_group {
  int first, size, stride;
  const char *key;         /* the key that chose it, for messages */
  bool custom_allreduce;   /* an inference engine's TP group: its all-reduces as vLLM's custom
                              all-reduce where vLLM takes it (sv_probe) */
};

/*
 * Time every collective of c alone, one after another, on the platform of sys with `ranks`
 * ranks, in a fork()ed child (SimGrid allows one engine per process): collective i runs over
 * groups[c->v[i].group]. Fills time_s. 0 or an error with diag (path named when the child dies).
 * An all-reduce of a custom_allreduce group runs as vLLM's custom all-reduce kernel (vLLM's
 * csrc/custom_all_reduce.cuh: one-shot or two-shot over the peers' buffers) where vLLM takes it:
 * a GPU platform (not HCCL), the group inside one server, 2, 4, 6 or 8 devices, under 8 MiB.
 */
int sv_probe(const struct arch_system *sys, int ranks, struct sv_colls *c, const struct sv_group *groups, int ngroups,
             const char *path, struct npu_diag *diag);

/* ------------------------------------------------------------------ costs */

#define SV_MAX_BUCKETS 24
#define SV_MAX_REFS 6

/* A cost from kernels plus collectives (their times known after the probe). */
struct sv_cost {
  double kernel_s;
  double flops;
  int coll[SV_MAX_REFS], mult[SV_MAX_REFS], ncoll;
};

/* What an engine runs on (borrowed). */
struct sv_target {
  const struct wl_model *model;
  const struct arch_system *sys;
  int fidelity;            /* enum core_fidelity of the kernels */
  const char *path;        /* the scenario, for messages */
  const char *key;         /* the key that chose the layout ("serve.tp", "rl.rollout.tp") */
};

/* How far the buckets reach (0: that part is not costed). */
struct sv_infer_shape {
  int max_tokens;          /* tokens of one step (the token budget; decode batches) */
  int max_rows;            /* sequences sampled in one step */
  int max_context;         /* longest context a prefill chunk attends to */
  int decode_batch;        /* paged attention's reference batch (its per-step and per-token costs) */
  int fwd_seq;             /* a whole forward with log-probs over a packed sequence (RL); 0 none */
};

struct sv_infer {
  struct sv_target tg;
  struct op_cache *cache;
  struct sv_colls *colls;
  int group;                /* of its TP collectives */
  int tp;
  bool ep;                  /* experts spread whole over the tp ranks (MoE) */
  double weight_bytes;      /* per device: all parameters / tp, bf16 */
  double kv_token_bytes;    /* per device and context token, all layers (K and V, bf16) */
  double step_overhead_s;   /* engine time per step beyond the kernels (sv_engine_step_s at tp) */
  double seq_overhead_s;    /* engine time per step and scheduled sequence beyond the kernels */
  int nb;                   /* linear work of every layer at tokens[i] tokens */
  int tokens[SV_MAX_BUCKETS];
  struct sv_cost body[SV_MAX_BUCKETS];
  int nh;                   /* the head (final norm, vocabulary projection, softmax, logits gather) */
  int rows[SV_MAX_BUCKETS];
  struct sv_cost head[SV_MAX_BUCKETS];
  int na;                   /* prefill attention: FLOP/s of the FlashAttention forward at context[i] */
  int context[SV_MAX_BUCKETS];
  double attn_rate[SV_MAX_BUCKETS];
  double decode_attn_step_s;  /* decode attention, all layers: per step ... */
  double decode_attn_token_s; /* ... plus per context token of the batch and layer (the paged-attention kernel) */
  int local_layers;         /* layers attending through model.window: their reads capped at it */
  int draft_layers;         /* speculative decoding: decoder layers of the draft module (MTP, EAGLE: 1);
                               0: drafts cost nothing on the device (n-gram lookup); set by the caller */
  struct sv_cost forward;   /* a forward with log-probs over fwd_seq tokens (RL) */
  int fwd_seq;
};

/*
 * An engine's time per step beyond its kernels, as measured for an engine and host (vLLM V0 on
 * H100 by default; docs/SERVING.md, "Engine time"): step + seq x scheduled sequences, and on an
 * engine of tp > 1 devices worker + worker_rank x (tp - 2) more (the multi-GPU executor: the
 * driver hands every step's inputs to the other workers, which run in lockstep).
 */
struct sv_engine_time {
  double step_s;
  double seq_s;
  double worker_s;
  double worker_rank_s;
};

/* The fixed part of that time per step on an engine of tp devices. */
double sv_engine_step_s(const struct sv_engine_time *et, int tp);

/* The per-device weights and KV cache of the model at TP tp (no costing). */
double sv_weight_bytes(const struct wl_model *m, int tp);
double sv_kv_token_bytes(const struct wl_model *m, int tp);
/* Live activations of one step of `tokens` tokens per device (bf16), reserved before the KV cache. */
double sv_activation_bytes(const struct wl_model *m, int tp, int tokens);
/* Model FLOPs per token at context ctx (2 x active matmul params + attention). */
double sv_token_flops(const struct wl_model *m, double ctx);

/*
 * Cost the engine's kernels on layout (tp, ep) over the buckets of shape; the collectives are
 * registered in colls under group. The engine's time beyond its kernels is the caller's measurement
 * (et; NULL: none). 0 or an error naming tg->key.
 */
int sv_infer_init(struct sv_infer *x, const struct sv_target *tg, struct op_cache *cache, struct sv_colls *colls,
                  int group, int tp, bool ep, const struct sv_infer_shape *shape, const struct sv_engine_time *et,
                  struct npu_diag *diag);
/* Time of a cost once the collectives are timed. */
double sv_cost_s(const struct sv_infer *x, const struct sv_cost *c);

/* One engine step as the scheduler built it. */
struct sv_step {
  int tokens;              /* decode tokens + prefill chunk tokens */
  int rows;                /* sequences that sample a token this step */
  int seqs;                /* sequences scheduled (the engine's per-sequence work) */
  int decode;              /* decode sequences */
  double decode_context;   /* context tokens the decode sequences read */
  double prefill_pairs;    /* prefill attention work: over chunks of c tokens after p cached, c (p + c/2) */
  int prefill_context;     /* the longest context of a prefill chunk */
  int draft_seqs;          /* speculative decoding: sequences that drafted tokens for this step ... */
  int draft_passes;        /* ... in this many sequential draft passes (the most drafted by one) */
  /* sliding-window layers (model.window): decode_context and prefill_pairs with each query's keys
   * capped at the window; 0 without one */
  double decode_window_context;
  double prefill_window_pairs;
};

/* Where a step's time goes. */
enum sv_part { SV_PART_LINEAR, SV_PART_ATTENTION, SV_PART_COMM, SV_PART_HEAD, SV_PART_ENGINE, SV_PART_DRAFT,
               SV_PART_COUNT };
const char *sv_part_name(int p);

/* The time of step s; parts (may be NULL) gets how it splits. */
double sv_step_s(const struct sv_infer *x, const struct sv_step *s, double parts[SV_PART_COUNT]);

#endif
