/*
 * memory.c - per-rank memory of a training job (see memory.h and docs/MEMORY.md).
 *
 * Sources, cited by tag next to each rule:
 *   [KOR]  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
 *          Models" (arXiv:2205.05198): Sec. 4.1 per-layer breakdown, Table 2, Sec. 4.2.3
 *          (first stage holds p micro-batches; interleaving factor 1 + (p-1)/(pm)), Sec. 4.3
 *          (embedding dropout, output layer, fp32 logits), Fig. 1.
 *   [MDO]  Megatron Core developer guide, "Distributed Optimizer": bytes per parameter 18 with
 *          fp16/bf16 parameters and fp32 gradients, 6 + 12/d with the distributed optimizer.
 *   [ZERO] Rajbhandari et al. 2020, "ZeRO" (arXiv:1910.02054): stage 1 shards the optimizer
 *          states, stage 2 also the gradients, stage 3 also the parameters.
 *   [MSC]  Megatron-LM megatron/core/pipeline_parallel/schedules.py: 1F1B warm-up
 *          pp - rank - 1 micro-batches; interleaved warm-up 2 (pp - rank - 1) + (vpp - 1) x
 *          microbatch_group_size_per_vp_stage (default pp) micro-batch chunks, all of them when
 *          that reaches the total; forward chunk k runs model chunk (k mod pp vpp) / pp.
 *   [MDA]  Megatron-LM megatron/core/transformer/dot_product_attention.py: the unfused attention
 *          repeats K and V to every query head (repeat_interleave) before its batched GEMMs.
 *   [FA2]  Dao 2023, "FlashAttention-2" (arXiv:2307.08691): the backward recomputes the score
 *          matrix from Q, K, V, the output and the fp32 row log-sum-exp L.
 *   [ZB]   Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR): ZB-H1 peaks at 1F1B's
 *          activation memory.
 *   [DSV3] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437) Table 2:
 *          DualPipe keeps 2x the parameters and PP + 1 micro-batches of activations.
 *   [MLM]  Megatron-LM conventions: vocabulary-parallel embedding and output layer, learned
 *          position embeddings and norms replicated over TP, the last stage keeps its own copy
 *          of tied word embeddings, 2-byte P2P tensors of s b h (/ t with SP).
 */
#include "workloads/memory.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define W_BYTES 2.0    /* bf16/fp16 weights [MDO] */
#define G_BYTES 4.0    /* fp32 gradient buffer, main_grad [MDO] */
#define OPT_BYTES 12.0 /* fp32 master weights + Adam m + v [MDO] */
#define ACT_BYTES 2.0  /* activations in the training precision [KOR] */
#define MASK_BYTES 1.0 /* dropout masks, one byte per element [KOR] */

/* Divisor of the activations TP alone leaves whole: t with sequence parallelism [KOR]. */
static double whole_div(const struct wl_plan *p)
{
  return p->sp ? p->tp : 1;
}

/* Bytes per token of an MLP's inner tensors of size f (summed over the TP group).
 * GeLU [KOR]: the GeLU input and output, 2 x 2f (= 16 h at f = 4h, their "8sbh + 8sbh").
 * SwiGLU: the fused gate-and-up output (2f wide, the SwiGLU input) and the SwiGLU output (the
 * down projection's input, f wide): 2 x 3f. */
static double mlp_inner_bytes(const struct wl_model *m, double f)
{
  return ACT_BYTES * (m->act == WL_ACT_SWIGLU ? 3 : 2) * f;
}

double wl_memory_layer_activations(const struct wl_model *m, const struct wl_plan *p, int l)
{
  double s = (double)m->seq_len / p->cp, b = p->micro_batch, h = m->hidden, t = p->tp;
  double whole = whole_div(p), sbh = s * b * h;
  /* Full recompute: only the layer input, 2 sbh, sharded by SP [KOR Table 2]. */
  if (p->recompute == WL_RECOMPUTE_FULL) return ACT_BYTES * sbh / whole;

  double hd = wl_model_head_dim(m), q = (double)m->heads * hd, kv = (double)m->kv_heads * hd;
  bool standard = m->attention == WL_ATTN_STANDARD, selective = p->recompute == WL_RECOMPUTE_SELECTIVE;
  /* [KOR 4.1] kept whole by TP alone, 10 sbh: the inputs of the two norms (2 + 2), of the QKV
   * projection (2) and of the first MLP projection (2), and the two dropout masks (1 + 1). */
  double mask = m->dropout > 0 ? MASK_BYTES : 0; /* models trained without dropout keep none */
  double act = (4 * ACT_BYTES + 2 * mask) * sbh / whole;
  /* [KOR 4.1] Q and K for QK^T (4 sbh), V (2 sbh), with GQA: Q is s b q wide, K and V s b kv
   * each, so their 4 sbh share scales by kv_heads / heads. Megatron's unfused attention saves
   * K and V after repeating them to every query head [MDA], so GQA saves nothing there unless
   * the core attention is recomputed (its inputs are then the unrepeated K and V). */
  double kv_saved = standard && !selective ? q : kv;
  act += ACT_BYTES * s * b * (q + 2 * kv_saved) / t;
  /* The attention output, input of the output projection (2 sbh) [KOR]. */
  act += ACT_BYTES * s * b * q / t;
  if (!selective) {
    double a = m->heads, keys = m->seq_len; /* with CP the local queries see every key */
    if (standard)
      /* Softmax output (2), its dropout mask (1) and the dropout output (2): 5 a s^2 b [KOR];
       * without dropout the softmax output alone. */
      act += (ACT_BYTES + (mask > 0 ? ACT_BYTES + mask : 0)) * a * s * keys * b / t;
    else
      /* FlashAttention stores no score matrix, only the fp32 log-sum-exp per row and head
       * [FA2]; selective recompute of the core attention drops it too. */
      act += 4.0 * s * b * a / t;
  }
  if (!wl_model_layer_is_moe(m, l)) return act + s * b * mlp_inner_bytes(m, m->ffn) / t;

  /* MoE layer (approximation; the MoE issue refines it): router probabilities in fp32 on the
   * rank's tokens; the dispatched tokens (expert input) and the expert outputs (kept for the
   * probability-weighted combine), top_k copies of each token (x capacity factor when tokens
   * are padded to capacity), gathered over the TP group as Megatron's token dispatcher does;
   * the experts' inner tensors, sharded over TP; the shared experts as a dense MLP. */
  double tokens = s * b, k = m->moe.top_k, cf = m->moe.capacity_factor > 0 ? m->moe.capacity_factor : 1;
  act += 4.0 * tokens * m->moe.experts / whole;
  act += 2 * ACT_BYTES * tokens * k * cf * h;
  act += tokens * k * cf * mlp_inner_bytes(m, m->moe.ffn) / t;
  act += tokens * m->moe.shared * mlp_inner_bytes(m, m->moe.ffn) / t;
  return act;
}

/* Norm parameters (weight, and bias for LayerNorm or biased models), as model.c counts them. */
static double norm_params(const struct wl_model *m)
{
  return (m->norm == WL_NORM_LAYER || m->bias ? 2.0 : 1.0) * m->hidden;
}

/* Parameters of an MLP of inner size f on one TP rank: the matrices and the column-parallel
 * biases are split over TP, the row-parallel output bias is replicated [MLM]. */
static double mlp_rank_params(const struct wl_model *m, double f, double t)
{
  double mats = m->act == WL_ACT_SWIGLU ? 3 : 2;
  return mats * m->hidden * f / t + (m->bias ? (mats - 1) * f / t + m->hidden : 0);
}

/* Parameters of layer l on one rank: dense ones (sharded over dp x cp by ZeRO) and routed
 * experts (sharded over the expert data-parallel group dp x cp / ep). Norms and the router are
 * replicated over TP; experts split over EP, and over TP as Megatron's default expert TP = tp. */
static void layer_rank_params(const struct wl_model *m, const struct wl_plan *p, int l, double *dense,
                              double *expert)
{
  double t = p->tp, h = m->hidden, hd = wl_model_head_dim(m);
  double q = (double)m->heads * hd, kv = (double)m->kv_heads * hd;
  double attn = (h * (q + 2 * kv) + q * h) / t + (m->bias ? (q + 2 * kv) / t + h : 0);
  *dense = attn + 2 * norm_params(m);
  *expert = 0;
  if (!wl_model_layer_is_moe(m, l)) {
    *dense += mlp_rank_params(m, m->ffn, t);
    return;
  }
  *dense += m->moe.shared * mlp_rank_params(m, m->moe.ffn, t) + h * m->moe.experts;
  *expert = (double)m->moe.experts / p->ep * mlp_rank_params(m, m->moe.ffn, t);
}

/* A virtual pipeline stage a rank holds, and how many of its micro-batches are in flight. */
struct held {
  int vstage;
  double n;
};

/* The virtual stages rank `stage` holds and their micro-batches in flight at its peak;
 * returns how many, and the number of virtual stages of the whole pipeline in *nv. */
static int held_stages(const struct wl_plan *p, int stage, struct held *out, int *nv)
{
  int pp = p->pp, v = p->vpp, mb = wl_plan_microbatches(p);
  if (p->schedule == WL_SCHED_DUALPIPE && pp > 1) {
    /* [DSV3] rank r runs stage r of one direction and stage pp-1-r of the other: twice the
     * parameters, pp + 1 micro-batches of activations, split evenly over the two. */
    *nv = pp;
    out[0] = (struct held){stage, (pp + 1) / 2.0};
    if (pp - 1 - stage == stage) {
      out[0].n = pp + 1;
      return 1;
    }
    out[1] = (struct held){pp - 1 - stage, (pp + 1) / 2.0};
    return 2;
  }
  *nv = pp * v;
  for (int c = 0; c < v; c++) out[c] = (struct held){c * pp + stage, 0};
  if (p->schedule == WL_SCHED_INTERLEAVED) {
    /* [MSC] the warm-up forwards, then one more before the first backward; forward k runs
     * chunk (k mod pp v) / pp. At stage 0 this holds (v pp + pp - 1) chunks of L / (pp v) layers,
     * L (1 + (pp - 1) / (pp v)) layers: Korthikanti's interleaving factor [KOR 4.2.3]. */
    int total = mb * v, warm = 2 * (pp - stage - 1) + (v - 1) * pp;
    int k = warm >= total ? total : warm + 1;
    for (int i = 0; i < k; i++) out[(i % (pp * v)) / pp].n += 1;
  } else {
    /* GPipe: every micro-batch's forward runs before the first backward. 1F1B [MSC]: the
     * pp - stage - 1 warm-up forwards and one more. ZB-H1 peaks as 1F1B [ZB]. */
    int n = p->schedule == WL_SCHED_GPIPE ? mb : (mb < pp - stage ? mb : pp - stage);
    for (int c = 0; c < v; c++) out[c].n = n;
  }
  return v;
}

void wl_memory_stage(const struct wl_model *m, const struct wl_plan *p, int stage, struct wl_mem *out)
{
  NPU_ASSERT(stage >= 0 && stage < p->pp);
  NPU_ASSERT(p->vpp >= 1);
  struct held *held = npu_xcalloc((size_t)p->vpp + 2, sizeof *held);
  int nv;
  int nheld = held_stages(p, stage, held, &nv);
  double t = p->tp, h = m->hidden, vocab = m->vocab, whole = whole_div(p);
  double s = (double)m->seq_len / p->cp, b = p->micro_batch, sbh = s * b * h;

  double dense = 0, expert = 0, acts = 0, logits = 0, inflight = 0, layer_max = 0;
  bool has_embedding = false;
  for (int i = 0; i < nheld; i++)
    if (held[i].vstage == 0) has_embedding = true;
  for (int i = 0; i < nheld; i++) {
    int vs = held[i].vstage;
    double n = held[i].n;
    inflight += n;
    int first = wl_plan_chunk_first_layer(p, m->layers, nv, vs), count = wl_plan_chunk_layers(p, m->layers, nv, vs);
    for (int l = first; l < first + count; l++) {
      double d, e;
      layer_rank_params(m, p, l, &d, &e);
      dense += d;
      expert += e;
      if (d + e > layer_max) layer_max = d + e;
      acts += n * wl_memory_layer_activations(m, p, l);
    }
    if (vs == 0) {
      /* Word embedding split over the vocabulary [MLM]; learned positions replicated. */
      dense += vocab * h / t + (m->pos == WL_POS_LEARNED ? (double)m->seq_len * h : 0);
      /* The embedding dropout mask, s b h, sharded with SP [KOR 4.3]. */
      acts += m->dropout > 0 ? n * MASK_BYTES * sbh / whole : 0;
    }
    if (vs == nv - 1) {
      /* Final norm; output projection split over the vocabulary; with tied embeddings the
       * last stage keeps its own copy unless it also holds the embedding [MLM]. */
      dense += norm_params(m) + (m->tied_embeddings && has_embedding ? 0 : vocab * h / t);
      /* The final norm's input and the output projection's input, 2 + 2 sbh (/ t with SP),
       * and the fp32 logits for the cross-entropy, 4 s b V / t [KOR 4.3]. */
      acts += n * 2 * ACT_BYTES * sbh / whole;
      logits += n * 4.0 * s * b * vocab / t;
    }
  }
  free(held);

  /* ZeRO [ZERO] over the data-parallel group including CP (Megatron shards the distributed
   * optimizer over dp x cp); routed experts over the expert data-parallel group dp x cp / ep. */
  double d_dp = (double)p->dp * p->cp, e_dp = d_dp / p->ep;
  memset(out, 0, sizeof *out);
  out->stage = stage;
  out->inflight = (int)(inflight + 0.5);
  out->weights_bytes = W_BYTES * (p->zero >= 3 ? dense / d_dp + expert / e_dp : dense + expert);
  out->grads_bytes = G_BYTES * (p->zero >= 2 ? dense / d_dp + expert / e_dp : dense + expert);
  out->optimizer_bytes = OPT_BYTES * (p->zero >= 1 ? dense / d_dp + expert / e_dp : dense + expert);
  out->activations_bytes = acts;
  out->logits_bytes = logits;

  double comm = 0;
  /* One fp32 gradient bucket in flight for the data-parallel reduction. */
  if (d_dp > 1) comm += G_BYTES * p->bucket_params;
  /* Pipeline receive buffers: one activation and one gradient, s b h (/ t with SP) [MLM]. */
  if (p->pp > 1) comm += 2 * ACT_BYTES * sbh / whole;
  /* SP all-gathers a layer's input into a buffer of the whole sequence: s b h (Megatron's
   * global memory buffer). */
  if (p->sp && p->tp > 1) comm += ACT_BYTES * sbh;
  /* ZeRO-3 gathers a layer's parameters before use: the layer running and the one prefetched. */
  if (p->zero >= 3 && d_dp > 1) comm += 2 * W_BYTES * layer_max;
  out->comm_bytes = comm;

  out->total_bytes = out->weights_bytes + out->grads_bytes + out->optimizer_bytes + out->activations_bytes +
                     out->logits_bytes + out->comm_bytes;
}

void wl_memory_peak(const struct wl_model *m, const struct wl_plan *p, struct wl_mem *out)
{
  wl_memory_stage(m, p, 0, out);
  for (int s = 1; s < p->pp; s++) {
    struct wl_mem cur;
    wl_memory_stage(m, p, s, &cur);
    if (cur.total_bytes > out->total_bytes) *out = cur;
  }
}
