/*
 * expand.h - a training step's work per rank: the kernels and tensor-parallel collectives of
 * each segment (a layer's forward, its backward, embedding, head and loss, optimizer), with
 * real shapes from the model and the plan.
 */
#ifndef NPUSIM_WORKLOADS_EXPAND_H
#define NPUSIM_WORKLOADS_EXPAND_H

#include "ops/cost_cache.h"
#include "workloads/job.h"

/* Build job->items, kernels, colls and the segments' item lists (no costs yet). */
void wl_expand(struct wl_job *job);

/* One rank's parameters of layer l: the non-expert part (TP-sharded) in *dense, the routed
 * experts (experts / ep of them, whole) in *expert (0 for a dense layer, and with ep 1, where the
 * experts are TP-split and replicated over dp x cp like the rest). */
void wl_layer_rank_params(const struct wl_job *job, int l, double *dense, double *expert);

/*
 * Cost every distinct kernel through the cache (the chip model at job->run.fidelity). Returns
 * 0, or an error with diag naming the kernel (a shape the chip cannot run).
 */
int wl_cost_kernels(struct wl_job *job, struct op_cache *cache, struct npu_diag *diag);

/*
 * The routed experts of one rank receiving `tokens` token copies in one layer and micro-batch:
 * forward, input-gradient and weight-gradient times (costed through the cache on first use,
 * by buckets within 5%), and their FLOPs (may be NULL).
 */
int wl_expert_cost(struct wl_job *job, struct op_cache *cache, double tokens, double *f_s, double *bi_s,
                   double *w_s, double *flops, struct npu_diag *diag);

/* Sum the costs of each segment's items into its time and breakdown (after kernels and
 * collectives have their times). */
void wl_sum_segments(struct wl_job *job);

/* Text of a kernel for reports: "gemm m=... n=...". */
void wl_kernel_label(const struct wl_kernel *k, char *buf, size_t n);

#endif
