/*
 * memory.h - device memory of one rank of a training job: weights, gradients, optimizer states,
 * stored activations, logits and communication buffers, from the model and the parallel plan.
 *
 * Mixed precision with Megatron's conventions (bf16/fp16 weights, fp32 gradient buffer, fp32
 * Adam master weights and moments, optimizer sharded over data parallelism by ZeRO-1/2/3;
 * fp8 training with TransformerEngine's fp8 copies of linear-layer inputs and weights);
 * activations per layer after Korthikanti et al. 2022, "Reducing Activation Recomputation in
 * Large Transformer Models", extended to GQA, MLA, QK and sandwich norms, SwiGLU,
 * FlashAttention, MoE and context parallelism; micro-batches in flight from the pipeline
 * schedule (DualPipe from its program). Formulas, sources and validation: docs/MEMORY.md.
 */
#ifndef NPUSIM_WORKLOADS_MEMORY_H
#define NPUSIM_WORKLOADS_MEMORY_H

#include "workloads/model.h"
#include "workloads/plan.h"

struct wl_mem {
  double weights_bytes;     /* training-precision (bf16/fp16) parameters held by the rank; with
                               fp8, plus the fp8 weight copies (rowwise + columnwise) of the
                               linear layers */
  double grads_bytes;       /* fp32 gradient buffer (Megatron main_grad) */
  double optimizer_bytes;   /* fp32 master weights + Adam first and second moments */
  double activations_bytes; /* activations stored for the backward, at the stage's peak */
  double logits_bytes;      /* fp32 logits kept for the cross-entropy backward (last stage) */
  double comm_bytes;        /* communication buffers: DP bucket, PP receive, SP gather, ZeRO-3,
                               CP ring-attention K/V blocks */
  double total_bytes;       /* sum of the above */
  int stage;                /* pipeline stage (0..pp-1) */
  int inflight;             /* (micro-batch, model chunk) pairs whose activations the stage holds at
                               its peak; = micro-batches when plan.vpp = 1 */
};

/*
 * Activations one rank stores for the backward of layer l (0-based) for one micro-batch, in
 * bytes: Korthikanti et al.'s per-layer terms under the plan's tp, sp, cp, recompute and dtype
 * (fp8: linear-layer inputs kept in fp8).
 */
double wl_memory_layer_activations(const struct wl_model *m, const struct wl_plan *p, int l);

/*
 * Memory of one rank of pipeline stage `stage` (0..pp-1; every rank of a stage holds the same),
 * for a model and plan that passed wl_model_finish and wl_plan_finish. Fills *out.
 */
void wl_memory_stage(const struct wl_model *m, const struct wl_plan *p, int stage, struct wl_mem *out);

/* The stage with the largest total (the lowest such stage on ties). Fills *out. */
void wl_memory_peak(const struct wl_model *m, const struct wl_plan *p, struct wl_mem *out);

#endif
