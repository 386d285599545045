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
 *   [MCA]  Megatron Core user guide, "Combined 1F1B: Expert-Parallel All-to-All Overlap", and
 *          MindSpeed docs/features/megatron_moe/megatron-moe-fb-overlap.md: the paired schedule
 *          runs one more warm-up forward than the interleaved (or pp 1) one.
 *   [MDA]  Megatron-LM megatron/core/transformer/dot_product_attention.py: the unfused attention
 *          repeats K and V to every query head (repeat_interleave) before its batched GEMMs.
 *   [FA2]  Dao 2023, "FlashAttention-2" (arXiv:2307.08691): the backward recomputes the score
 *          matrix from Q, K, V, the output and the fp32 row log-sum-exp L.
 *   [ZB]   Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR): ZB-H1 peaks at 1F1B's
 *          activation memory.
 *   [DSV3] DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv:2412.19437): Table 2,
 *          DualPipe keeps 2x the parameters and PP + 1 micro-batches of activations; Sec. 3.3,
 *          fp8 training caches the activations of the linear layers in fp8 and dispatches the
 *          tokens to the experts in fp8; embedding, output head, gating, norms and attention
 *          stay in higher precision.
 *   [DPS]  workloads/schedule.c: DualPipe's program per rank (deepseek-ai/DualPipe
 *          dualpipe.py), rank r holding model chunks r and pp-1-r.
 *   [MLA]  Megatron-LM megatron/core/transformer/multi_latent_attention.py and
 *          models/gpt/gpt_layer_specs.py (MLASelfAttention with Transformer Engine): the down
 *          projections W_dq and W_dkv are "duplicated" linears (whole on every TP rank), run on
 *          the rank's sequence shard with SP; the latents go through TE LayerNormColumnParallel
 *          linears (the latent norm fused into W_uq, W_ukv), which keep the latent (the norm's
 *          input) and the normalised latent (the GEMM's input); the up projections give Q
 *          (heads x (nope + rope)), K (heads x (nope + rope), the rotary part shared by the
 *          heads) and V (heads x v), which the core attention keeps.
 *   [MOE]  Megatron-LM megatron/core/transformer/moe: the router keeps fp32 scores of every
 *          expert; the all-to-all dispatcher gathers the tokens over the TP group before the
 *          experts (over the expert TP group, tp by default); the grouped MLP keeps its input, the fc1 output and, with
 *          the probabilities applied in the fused weighted SwiGLU (experts.py,
 *          weighted_bias_swiglu_impl), the probability of each token copy and the fc2 input,
 *          not the expert output; expert parameters shard over EP x expert TP, their gradients
 *          and optimizer states over the expert data-parallel group tp x cp x dp / (etp x ep)
 *          (MoE parallel folding, wl_plan_edp).
 *   [TE]   NVIDIA TransformerEngine transformer_engine/pytorch/module/linear.py and
 *          layernorm_linear.py: with fp8 a linear layer keeps its input quantised to fp8 for the
 *          weight gradient (1 byte per element; a fused norm keeps its own input in the
 *          training precision), and caches the fp8 weight (rowwise and columnwise copies)
 *          across the micro-batches of a step; attention/dot_product_attention/
 *          context_parallel.py (AttnFuncWithCPAndKVP2P): ring attention passes K/V blocks
 *          around the CP group, the backward through two buffers each holding a K/V block and
 *          its gradient.
 *   [MLM]  Megatron-LM conventions: vocabulary-parallel embedding and output layer, learned
 *          position embeddings and norms replicated over TP, the last stage keeps its own copy
 *          of tied word embeddings, 2-byte P2P tensors of s b h (/ t with SP).
 */
#include "workloads/memory.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/diag.h"
#include "common/err.h"
#include "workloads/schedule.h"

#define W_BYTES 2.0    /* bf16/fp16 weights [MDO] */
/* gradient buffer: fp32 main_grad [MDO], or bf16 (wl_plan_grad_reduce_bytes) */
#define OPT_BYTES 12.0 /* fp32 master weights + Adam m + v [MDO] */
#define OPT_BYTES_BF16_MOMENTS 8.0 /* fp32 master weights + bf16 m + v [DSV3] */
#define ACT_BYTES 2.0  /* activations in the training precision [KOR] */
#define MASK_BYTES 1.0 /* dropout masks, one byte per element [KOR] */
#define FP8_BYTES 1.0  /* an fp8 element [TE] */
#define PLAN_FP8 2     /* plan.dtype of fp8 training (plan.h: 0 bf16, 1 fp16, 2 fp8) */

static bool fp8(const struct wl_plan *p)
{
  return p->dtype == PLAN_FP8;
}

/* Bytes per element of an activation kept only as the input of a linear layer's GEMM: fp8 in
 * fp8 training [TE] [DSV3], else the training precision. */
static double gemm_in(const struct wl_plan *p)
{
  return fp8(p) ? FP8_BYTES : ACT_BYTES;
}

/* Megatron's expert tensor parallelism (--expert-tensor-parallel-size), by default = tp [MOE]. */
static double expert_tp(const struct wl_plan *p)
{
  return wl_plan_etp(p);
}

/* Divisor of the activations TP alone leaves whole: t with sequence parallelism [KOR]. */
static double whole_div(const struct wl_plan *p)
{
  return p->sp ? p->tp : 1;
}

/* Bytes per token of an MLP's inner tensors of size f (summed over the TP group).
 * GeLU [KOR]: the GeLU input and output, 2 x 2f (= 16 h at f = 4h, their "8sbh + 8sbh").
 * SwiGLU: the fused gate-and-up output (2f wide, the SwiGLU input) and the SwiGLU output (the
 * down projection's input, f wide): 2 x 3f. With fp8 the activation's input stays in the
 * training precision (kept by the activation) and its output, the down projection's input, is
 * kept in fp8 [TE]: 5f (SwiGLU), 3f (GeLU). */
static double mlp_inner_bytes(const struct wl_model *m, const struct wl_plan *p, double f)
{
  return ACT_BYTES * (m->act == WL_ACT_SWIGLU ? 2 : 1) * f + gemm_in(p) * f;
}

/* Bytes per token of a linear-attention layer's own tensors, summed over the TP group
 * (model.linear; flash-linear-attention's chunk_gated_delta_rule keeps q and k L2-normalised
 * with their fp32 inverse norms, v, g, beta and the chunks' (I + A)^-1 in the training type,
 * one row of chunk per token and head; causal_conv1d keeps its input; the gated norm its input
 * and z; out_proj its input): the convolution's input and output (q, k, v), z, b and a, g and
 * beta in fp32, the inverse norms, the chunk matrices, the gated norm's input and its output
 * (the GEMM input). */
static double linear_acts(const struct wl_model *m, const struct wl_plan *p)
{
  double hv = m->linear.heads, hk = m->linear.k_heads, vw = hv * m->linear.v_dim;
  double conv = wl_model_linear_conv_channels(m);
  return ACT_BYTES * (2 * conv + vw + 2 * hv + hv * m->linear.chunk + vw) + 4.0 * (2 * hv + 2 * hk) + gemm_in(p) * vw;
}

/* The MLP's (a dense layer's) or the MoE block's inner activations of layer l over `tokens` of
 * the rank's sequence, with the recompute modules given. */
static double mlp_acts(const struct wl_model *m, const struct wl_plan *p, int l, double tokens, bool rc_mlp,
                       bool rc_act, bool rc_shared)
{
  double t = p->tp, h = m->hidden, whole = whole_div(p), g = gemm_in(p);
  if (!wl_model_layer_is_moe(m, l)) return rc_mlp ? 0 : tokens * mlp_inner_bytes(m, p, m->ffn) / t;

  /* MoE layer [MOE]: the router's fp32 scores of every expert on the rank's tokens; per token
   * copy routed to an expert (top_k per token, x capacity factor when padded to capacity;
   * gathered over the TP group, so not divided by t): the expert's input (fp8 with fp8,
   * dispatched in fp8 [DSV3]), its fp32 probability, and the expert MLP's inner tensors split
   * over expert TP; the shared experts as a dense MLP of shared x moe.ffn. */
  double act = 0, copies = tokens * m->moe.top_k * (m->moe.capacity_factor > 0 ? m->moe.capacity_factor : 1);
  if (wl_plan_moe_own_tokens(p)) copies *= expert_tp(p) / p->tp; /* own tokens, gathered over expert TP */
  act += 4.0 * tokens * m->moe.experts / whole;
  act += copies * (g * h + 4.0);
  double inner = mlp_inner_bytes(m, p, m->moe.ffn) - (rc_act ? gemm_in(p) * m->moe.ffn : 0);
  if (p->fp8_moe_act_input) /* the activation's input (the first projection's output) in fp8 [DSV3] */
    inner -= (ACT_BYTES - FP8_BYTES) * (m->act == WL_ACT_SWIGLU ? 2 : 1) * m->moe.ffn;
  act += copies * inner / expert_tp(p);
  if (!rc_shared) act += tokens * m->moe.shared * mlp_inner_bytes(m, p, m->moe.ffn) / t;
  return act;
}

/* Activations of one micro-batch's vision encoder and projector (model.vision), on the first
 * stage: per encoder token the pixels the patch embedding keeps, and per layer the inputs of the
 * two norms, of QKV and of the MLP (whole on every TP rank: no sequence parallelism), Q, K, V,
 * the attention output, its fp32 log-sum-exp per head and the MLP's inner tensors (split over
 * TP); the projector's input and its GeLU's input and output per merged token. A frozen encoder
 * keeps only the projector's. */
static double vision_acts(const struct wl_model *m, const struct wl_plan *p)
{
  if (!m->vision.layers) return 0;
  double t = p->tp, vh = m->vision.hidden, f = m->vision.ffn, H = m->hidden;
  double tokens = (double)p->micro_batch * m->vision.images * m->vision.patches, merged = tokens / m->vision.merge;
  double act = merged * (ACT_BYTES * m->vision.merge * vh + 2 * ACT_BYTES * H / t);
  if (m->vision.frozen) return act;
  double inner = (m->vision.act == WL_ACT_SWIGLU ? 3 : 2) * ACT_BYTES * f;
  double layer = 4 * ACT_BYTES * vh + (4 * ACT_BYTES * vh + 4.0 * m->vision.heads + inner) / t;
  return act + tokens * (ACT_BYTES * m->vision.patch_dim + m->vision.layers * layer);
}

double wl_memory_layer_activations(const struct wl_model *m, const struct wl_plan *p, int l)
{
  double s = (double)m->seq_len / p->cp, b = p->micro_batch, h = m->hidden, t = p->tp;
  double whole = whole_div(p), sbh = s * b * h, g = gemm_in(p);
  /* Full recompute: only the layer input, 2 sbh, sharded by SP [KOR Table 2]; with Megatron's
   * uniform method in groups of n layers, one input per group [MLM]; with the block method the
   * layers it leaves out keep everything (as without recomputation). */
  if (wl_plan_layer_recomputed(p, m->layers, p->pp * p->vpp, l)) {
    double group = p->recompute_method == WL_RCM_UNIFORM && p->recompute_layers > 1 ? p->recompute_layers : 1;
    return ACT_BYTES * sbh / whole / group;
  }

  int qh, kvh, qk, vd;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &vd);
  double q = (double)qh * qk, k = (double)kvh * qk, v = (double)kvh * vd, o = (double)qh * vd;
  bool standard = m->attention == WL_ATTN_STANDARD, selective = wl_plan_recomputes(p, WL_RCM_CORE_ATTN);
  bool mla = wl_model_is_mla(m), moe = wl_model_layer_is_moe(m, l);
  /* Megatron-Core's recompute modules [MLM]: a recomputed norm keeps its input (the residual
   * stream, counted above) but not its output, so the training-precision GEMM inputs that are
   * norm outputs go (fp8 copies, which the linear layers own, stay); recomputed MLA up
   * projections keep the latents but not Q, K and V, nor their own inputs (the normalised
   * latents: the whole up-projection forward reruns); a recomputed expert activation keeps its
   * input but not its output; a recomputed MoE block (module moe) keeps its input alone, as a
   * recomputed MLP does. */
  bool rc_norm = wl_plan_recomputes(p, WL_RCM_LAYERNORM), rc_up = mla && wl_plan_recomputes(p, WL_RCM_MLA_UP_PROJ),
       rc_act = moe && wl_plan_recomputes(p, WL_RCM_MOE_ACT), rc_mlp = !moe && wl_plan_recomputes(p, WL_RCM_MLP),
       rc_moe = moe && wl_plan_recomputes(p, WL_RCM_MOE),
       rc_shared = moe && (rc_moe || wl_plan_recomputes(p, WL_RCM_SHARED_EXPERTS));
  double norm_out = rc_norm && !fp8(p) ? 0 : g; /* a norm output kept as a GEMM input */
  /* [KOR 4.1] kept whole by TP alone, 10 sbh: the inputs of the two norms (2 + 2), of the QKV
   * projection (2) and of the first MLP projection (2), and the two dropout masks (1 + 1).
   * The sandwich norm's two output norms keep their inputs too (2 + 2). */
  double mask = m->dropout > 0 ? MASK_BYTES : 0; /* models trained without dropout keep none */
  double act = ((m->sandwich_norm ? 4 : 2) * ACT_BYTES + 2 * mask) * sbh / whole;
  /* The attention's input, kept by the QKV projection; under MLA by both down projections (or
   * the query projection and W_dkv) [MLA]: one tensor shared in bf16, an fp8 copy each with fp8
   * [TE]. */
  act += (mla && fp8(p) ? 2 * g : norm_out) * sbh / whole;
  /* The MLP's input, kept by its first projection; in an MoE layer by the router, a bf16 GEMM
   * [DSV3] [MOE], and with fp8 also as the shared experts' fp8 copy. */
  /* A recomputed MLP (or shared experts) keeps its input as the checkpoint's, in the training
   * precision (unless the norm that makes it is recomputed too), and nothing inside. */
  if (!moe) act += (rc_mlp ? (rc_norm ? 0 : ACT_BYTES) : norm_out) * sbh / whole;
  else act += ((rc_norm ? 0 : ACT_BYTES) + (fp8(p) && m->moe.shared && !rc_shared ? g : 0)) * sbh / whole;
  /* MLA latents [MLA]: each latent (the norm's input) and its normalised copy (the up
   * projection's GEMM input), on the rank's sequence shard with SP, whole without. */
  if (mla) act += (ACT_BYTES + (rc_up ? 0 : g)) * s * b * ((double)m->mla.q_lora_rank + m->mla.kv_lora_rank) / whole;
  if (wl_model_layer_is_linear(m, l)) {
    act += linear_acts(m, p) * s * b / t;
    return act + (rc_moe ? 0 : mlp_acts(m, p, l, s * b, rc_mlp, rc_act, rc_shared));
  }
  /* QK norm: the query and key before the norm. Gated attention: the gate (sigmoid's input). */
  if (m->qk_norm) act += ACT_BYTES * s * b * (q + k) / t;
  if (m->attn_gate) act += ACT_BYTES * s * b * q / t;
  /* [KOR 4.1] Q and K for QK^T (4 sbh), V (2 sbh), with GQA: Q is s b q wide, K and V s b kv
   * each, so their 4 sbh share scales by kv_heads / heads; under MLA Q and K are heads x qk
   * wide and V heads x v [MLA]. Megatron's unfused attention saves K and V after repeating them
   * to every query head [MDA], so GQA saves nothing there unless the core attention is
   * recomputed (its inputs are then the unrepeated K and V). The core attention stays in the
   * training precision with fp8 [DSV3]. */
  bool repeat = standard && !selective;
  if (!rc_up) act += ACT_BYTES * s * b * (q + (repeat ? (double)qh * qk : k) + (repeat ? o : v)) / t;
  /* The attention output, input of the output projection (2 sbh) [KOR]: FlashAttention keeps
   * it for its own backward and the projection uses that copy (Megatron sets the projection to
   * save the original input with fp8 [MLA]); the unfused attention's output is the projection's
   * GEMM input alone. */
  act += (standard ? g : ACT_BYTES) * s * b * o / t;
  if (!selective) {
    double a = qh, keys = m->seq_len; /* with CP the local queries see every key */
    if (standard)
      /* Softmax output (2), its dropout mask (1) and the dropout output (2): 5 a s^2 b [KOR];
       * without dropout the softmax output alone. */
      act += (ACT_BYTES + (mask > 0 ? ACT_BYTES + mask : 0)) * a * s * keys * b / t;
    else
      /* FlashAttention stores no score matrix, only the fp32 log-sum-exp per row and head
       * [FA2]; selective recompute of the core attention drops it too. */
      act += 4.0 * s * b * a / t;
  }
  return act + (rc_moe ? 0 : mlp_acts(m, p, l, s * b, rc_mlp, rc_act, rc_shared));
}

/* Matrices of an MLP of inner size f on one TP rank (what fp8 GEMMs run on). */
static double mlp_rank_matrices(const struct wl_model *m, double f, double t)
{
  return (m->act == WL_ACT_SWIGLU ? 3 : 2) * m->hidden * f / t;
}

/* Parameters of an MLP of inner size f on one TP rank: the matrices and the column-parallel
 * biases are split over TP, the row-parallel output bias is replicated [MLM]. */
static double mlp_rank_params(const struct wl_model *m, double f, double t)
{
  double mats = m->act == WL_ACT_SWIGLU ? 3 : 2;
  return mlp_rank_matrices(m, f, t) + (m->bias ? (mats - 1) * f / t + m->hidden : 0);
}

/* Per-element parameters of a norm (weight, and bias for LayerNorm or biased models), as
 * model.c counts them. */
static double norm_width(const struct wl_model *m)
{
  return m->norm == WL_NORM_LAYER || m->bias ? 2.0 : 1.0;
}

/* Attention parameters on one TP rank: all of them, and the matrices alone in *mats.
 * Without MLA: Q, K, V and output projections split over TP, biases of the column-parallel
 * QKV split, the output bias and QK norms (head_dim wide) replicated [MLM]. MLA [MLA]: W_dq,
 * W_dkv and the latent norms whole on every TP rank; W_uq (or W_q), W_ukv and W_o split. */
static double attn_rank_params_dense(const struct wl_model *m, double t, double *mats)
{
  double h = m->hidden;
  int qh, kvh, qk, vd;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &vd);
  double q = (double)qh * qk;
  if (wl_model_is_mla(m)) {
    double ql = m->mla.q_lora_rank, kl = m->mla.kv_lora_rank;
    double whole = (ql > 0 ? h * ql : 0) + h * (kl + m->mla.qk_rope_head_dim);
    double split = (ql > 0 ? ql * q : h * q) + kl * qh * (double)(m->mla.qk_nope_head_dim + vd) + (double)qh * vd * h;
    *mats = whole + split / t;
    return *mats + norm_width(m) * (ql + kl);
  }
  double kv = (double)kvh * qk;
  *mats = (h * ((m->attn_gate ? 2 : 1) * q + 2 * kv) + q * h) / t;
  return *mats + (m->bias ? (q + 2 * kv) / t + h : m->qkv_bias ? (q + 2 * kv) / t : 0) +
         (m->qk_norm ? 2 * norm_width(m) * qk : 0) + (m->sinks ? qh / t : 0);
}

/* A linear-attention layer's parameters on one rank (model.linear): all split by heads over TP
 * but the gated norm's weight (v_dim), replicated. */
static double linear_rank_params(const struct wl_model *m, double t, double *mats)
{
  *mats = wl_model_linear_params(m, true) / t;
  return (wl_model_linear_params(m, false) - m->linear.v_dim) / t + m->linear.v_dim;
}

/* With sparse attention's indexer (model.dsa), whole on every TP rank. */
static double attn_rank_params(const struct wl_model *m, double t, double *mats)
{
  double p = attn_rank_params_dense(m, t, mats);
  *mats += wl_model_dsa_params(m, true);
  return p + wl_model_dsa_params(m, false);
}

/* Parameters of layer l on one rank: dense ones (sharded over dp x cp by ZeRO) and routed
 * experts (sharded over the expert data-parallel group dp x cp / ep), and of each the matrices
 * fp8 GEMMs use (the router excepted [DSV3]). Norms (2 per layer, 4 with the sandwich norm)
 * and the router are replicated over TP; experts split over EP and expert TP [MOE]. */
struct rank_params {
  double dense, expert;           /* parameters */
  double dense_mats, expert_mats; /* of which linear-layer matrices */
};

static void layer_rank_params(const struct wl_model *m, const struct wl_plan *p, int l, struct rank_params *r)
{
  double t = p->tp, h = m->hidden, mats;
  r->dense = (wl_model_layer_is_linear(m, l) ? linear_rank_params(m, t, &mats) : attn_rank_params(m, t, &mats)) +
             (m->sandwich_norm ? 4 : 2) * norm_width(m) * h;
  r->dense_mats = mats;
  r->expert = r->expert_mats = 0;
  if (!wl_model_layer_is_moe(m, l)) {
    r->dense += mlp_rank_params(m, m->ffn, t);
    r->dense_mats += mlp_rank_matrices(m, m->ffn, t);
    return;
  }
  r->dense += m->moe.shared * mlp_rank_params(m, m->moe.ffn, t) + h * m->moe.experts;
  r->dense_mats += m->moe.shared * mlp_rank_matrices(m, m->moe.ffn, t);
  double local = (double)m->moe.experts / p->ep;
  r->expert = local * mlp_rank_params(m, m->moe.ffn, expert_tp(p));
  r->expert_mats = local * mlp_rank_matrices(m, m->moe.ffn, expert_tp(p));
}

/* A virtual pipeline stage a rank holds, how many of its micro-batches are in flight at the
 * rank's peak, and what one micro-batch of it keeps (activations, logits). */
struct held {
  int vstage;
  double n;
  double act, logits;
};

/* The virtual stages rank `stage` holds and their micro-batches in flight at its peak (DualPipe:
 * a first split, refined by dualpipe_inflight once the activations are known); returns how
 * many, and the number of virtual stages of the whole pipeline in *nv. */
static int held_stages(const struct wl_plan *p, int stage, struct held *out, int *nv)
{
  int pp = p->pp, v = p->vpp, mb = wl_plan_microbatches(p);
  if (p->schedule == WL_SCHED_DUALPIPE && pp > 1) {
    /* [DSV3] [DPS] rank r runs model chunk r for the micro-batches fed in at rank 0 and chunk
     * pp-1-r for those fed in at rank pp-1: both chunks' parameters, pp + 1 micro-batches of
     * activations, here split evenly over the two. */
    *nv = pp;
    out[0] = (struct held){stage, (pp + 1) / 2.0, 0, 0};
    if (pp - 1 - stage == stage) {
      out[0].n = pp + 1;
      return 1;
    }
    out[1] = (struct held){pp - 1 - stage, (pp + 1) / 2.0, 0, 0};
    return 2;
  }
  *nv = pp * v;
  for (int c = 0; c < v; c++) out[c] = (struct held){c * pp + stage, 0, 0, 0};
  if (p->schedule == WL_SCHED_INTERLEAVED) {
    /* [MSC] the warm-up forwards, then one more before the first backward; forward k runs
     * chunk (k mod pp v) / pp. At stage 0 this holds (v pp + pp - 1) chunks of L / (pp v) layers,
     * L (1 + (pp - 1) / (pp v)) layers: Korthikanti's interleaving factor [KOR 4.2.3]. */
    int total = mb * v, warm = 2 * (pp - stage - 1) + (v - 1) * pp;
    if (p->ep_overlap != WL_EPO_NONE) warm++; /* combined 1F1B: one more warm-up forward [MCA] */
    int k = warm >= total ? total : warm + 1;
    for (int i = 0; i < k; i++) out[(i % (pp * v)) / pp].n += 1;
  } else {
    /* GPipe: every micro-batch's forward runs before the first backward. 1F1B [MSC]: the
     * pp - stage - 1 warm-up forwards and one more. ZB-H1 peaks as 1F1B [ZB]. */
    int n = p->schedule == WL_SCHED_GPIPE ? mb : (mb < pp - stage ? mb : pp - stage);
    if (p->ep_overlap != WL_EPO_NONE && n < mb) n++; /* combined 1F1B (pp 1): F of i+1 beside B of i [MCA] */
    for (int c = 0; c < v; c++) out[c].n = n;
  }
  return v;
}

/* DualPipe [DPS]: walk the rank's program (a forward takes one micro-batch of its chunk, a full
 * backward or a weight-gradient step releases it; in an overlapped F&B pair the forward comes
 * first) and keep the per-chunk counts where the activations held (with the logits) peak.
 * Leaves the even split when the schedule cannot be built for this shape. */
static void dualpipe_inflight(const struct wl_plan *p, int stage, struct held *held, int nheld)
{
  if (nheld != 2) return;
  struct wl_slot *slots = NULL;
  size_t n = 0;
  struct npu_diag d;
  npu_diag_clear(&d);
  if (wl_schedule_build(WL_SCHED_DUALPIPE, p->pp, 1, wl_plan_microbatches(p), stage, &slots, &n, &d) != 0) return;
  double cnt[2] = {0, 0}, best = -1, bestn[2] = {0, 0};
  for (size_t i = 0; i < n; i++) {
    int c = slots[i].chunk, k = wl_schedule_model_chunk(WL_SCHED_DUALPIPE, p->pp, 1, stage, c);
    int h = held[0].vstage == k ? 0 : 1;
    NPU_ASSERT(held[h].vstage == k);
    if (slots[i].phase == WL_PH_F) cnt[h] += 1;
    else if (slots[i].phase == WL_PH_B || slots[i].phase == WL_PH_W) cnt[h] -= 1;
    double bytes = cnt[0] * (held[0].act + held[0].logits) + cnt[1] * (held[1].act + held[1].logits);
    if (bytes > best) {
      best = bytes;
      bestn[0] = cnt[0];
      bestn[1] = cnt[1];
    }
  }
  free(slots);
  held[0].n = bestn[0];
  held[1].n = bestn[1];
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

  struct rank_params rp = {0, 0, 0, 0};
  double frozen = 0; /* parameters held without gradients or optimizer states */
  double layer_max = 0, off_max = 0;
  bool has_embedding = false;
  for (int i = 0; i < nheld; i++)
    if (held[i].vstage == 0) has_embedding = true;
  for (int i = 0; i < nheld; i++) {
    int vs = held[i].vstage;
    int first = wl_plan_chunk_first_layer(p, m->layers, nv, vs), count = wl_plan_chunk_layers(p, m->layers, nv, vs);
    for (int l = first; l < first + count; l++) {
      struct rank_params r;
      layer_rank_params(m, p, l, &r);
      rp.dense += r.dense;
      rp.expert += r.expert;
      rp.dense_mats += r.dense_mats;
      rp.expert_mats += r.expert_mats;
      if (r.dense + r.expert > layer_max) layer_max = r.dense + r.expert;
      /* activation offload (plan.offload_layers): the chunk's first layers' activations live in
       * host memory between their forward and their backward */
      if (l - first < p->offload_layers)
        off_max = fmax(off_max, wl_memory_layer_activations(m, p, l));
      else
        held[i].act += wl_memory_layer_activations(m, p, l);
    }
    if (vs == 0) {
      /* Word embedding split over the vocabulary [MLM]; learned positions replicated. */
      rp.dense += vocab * h / t + (m->pos == WL_POS_LEARNED ? (double)m->seq_len * h : 0);
      /* A vision encoder and its projector (model.vision), split over TP: what the step trains
       * as dense parameters, a frozen encoder as weights alone; their activations. */
      double vtrain = wl_model_vision_params(m, true, false);
      rp.dense += vtrain / t;
      frozen += (wl_model_vision_params(m, false, false) - vtrain) / t;
      held[i].act += vision_acts(m, p);
      /* The embedding dropout mask, s b h, sharded with SP [KOR 4.3]. */
      held[i].act += m->dropout > 0 ? MASK_BYTES * sbh / whole : 0;
    }
    if (vs == nv - 1) {
      /* Final norm; output projection split over the vocabulary; with tied embeddings the
       * last stage keeps its own copy unless it also holds the embedding [MLM]. The output
       * layer stays in the training precision with fp8 [DSV3]. */
      rp.dense += norm_width(m) * h + (m->tied_embeddings && has_embedding ? 0 : vocab * h / t);
      /* The final norm's input and the output projection's input, 2 + 2 sbh (/ t with SP),
       * and the fp32 logits for the cross-entropy, 4 s b V / t [KOR 4.3]. */
      held[i].act += 2 * ACT_BYTES * sbh / whole;
      held[i].logits += 4.0 * s * b * vocab / t;
      /* MTP modules (model.mtp_layers) after the head: each its layer, its projection (2 h x h
       * / t) and three norms; it keeps the two norms' inputs (the hidden state and the next
       * token's embedding), the projection's gathered input (2 sbh) and its head's inputs and
       * logits, as the main head's. The embedding and output head are shared, not copied. */
      for (int l = m->layers; l < wl_model_total_layers(m); l++) {
        struct rank_params r;
        layer_rank_params(m, p, l, &r);
        rp.dense += r.dense + wl_model_mtp_rank_params(m, p->tp);
        rp.expert += r.expert;
        rp.dense_mats += r.dense_mats + 2 * h * h / t;
        rp.expert_mats += r.expert_mats;
        held[i].act += wl_memory_layer_activations(m, p, l) + 2 * ACT_BYTES * sbh / whole + 2 * ACT_BYTES * sbh +
                       2 * ACT_BYTES * sbh / whole;
        held[i].logits += 4.0 * s * b * vocab / t;
      }
    }
  }
  if (p->schedule == WL_SCHED_DUALPIPE && p->pp > 1) dualpipe_inflight(p, stage, held, nheld);
  double acts = 0, logits = 0, inflight = 0;
  for (int i = 0; i < nheld; i++) {
    acts += held[i].n * held[i].act;
    logits += held[i].n * held[i].logits;
    inflight += held[i].n;
  }
  /* Offloaded activations on the device: a layer's being copied out while the next is made,
   * or copied in while the one after it runs its backward [TE]: two layers' at most. */
  acts += 2 * off_max;
  /* Uniform recompute in groups of n: the backward of a group recomputes its n layers at once,
   * holding n layers' activations for one micro-batch (one layer's is left out, as for n = 1) */
  if (p->recompute == WL_RECOMPUTE_FULL && p->recompute_method == WL_RCM_UNIFORM && p->recompute_layers > 1) {
    struct wl_plan kept = *p;
    kept.recompute = WL_RECOMPUTE_NONE;
    double most = 0;
    for (int l = 0; l < m->layers; l++) most = fmax(most, wl_memory_layer_activations(m, &kept, l));
    acts += (p->recompute_layers - 1) * most;
  }
  free(held);

  /* ZeRO [ZERO] over the data-parallel group including CP (Megatron shards the distributed
   * optimizer over dp x cp), or over its shard groups (plan.zero_shard: hybrid sharding);
   * routed experts over the expert data-parallel group (wl_plan_edp; hybrid sharding is refused
   * with ep > 1). */
  double d_dp = wl_plan_shard(p), e_dp = wl_plan_edp(p), g_bytes = wl_plan_grad_reduce_bytes(p);
  double dense = rp.dense, expert = rp.expert;
  memset(out, 0, sizeof *out);
  out->stage = stage;
  out->inflight = (int)(inflight + 0.5);
  out->weights_bytes = W_BYTES * (p->zero >= 3 ? (dense + frozen) / d_dp + expert / e_dp : dense + frozen + expert);
  /* fp8: the weights stay in the training precision (the fp32 master copy is the optimizer's);
   * each linear layer caches its fp8 weight, rowwise and columnwise, for the step [TE]
   * (sharded as the weights are under ZeRO-3). */
  double mats = p->zero >= 3 ? rp.dense_mats / d_dp + rp.expert_mats / e_dp : rp.dense_mats + rp.expert_mats;
  if (fp8(p)) out->weights_bytes += 2 * FP8_BYTES * mats;
  out->grads_bytes = g_bytes * (p->zero >= 2 ? dense / d_dp + expert / e_dp : dense + expert);
  out->optimizer_bytes = (p->optimizer_moments ? OPT_BYTES_BF16_MOMENTS : OPT_BYTES) *
                         (p->zero >= 1 ? dense / d_dp + expert / e_dp : dense + expert);
  out->activations_bytes = acts;
  out->logits_bytes = logits;

  double comm = 0;
  /* One gradient bucket (fp32, or bf16 with plan.grad_reduce_dtype) in flight for the
   * data-parallel reduction. */
  if (p->dp * p->cp > 1) comm += g_bytes * p->bucket_params;
  /* Pipeline receive buffers: one activation and one gradient, s b h (/ t with SP) [MLM]. */
  if (p->pp > 1) comm += 2 * ACT_BYTES * sbh / whole;
  /* SP all-gathers a layer's input into a buffer of the whole sequence: s b h (Megatron's
   * global memory buffer). */
  if (p->sp && p->tp > 1) comm += ACT_BYTES * sbh;
  /* ZeRO-3 gathers a layer's parameters before use: the layer running and the one prefetched. */
  if (p->zero >= 3 && d_dp > 1) comm += 2 * W_BYTES * layer_max;
  /* Context parallelism, ring attention [TE]: K/V blocks of the local sequence chunk travel
   * around the CP group. The forward holds two (the one in use, the one arriving); the
   * backward two buffers, each a K/V block and its gradient: 4 blocks at the peak. */
  if (p->cp > 1) {
    int kvh, qk, vd;
    wl_model_attn_shape(m, NULL, &kvh, &qk, &vd);
    comm += 4 * ACT_BYTES * s * b * kvh * (double)(qk + vd) / t;
  }
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
