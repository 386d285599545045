/*
 * model.h - the model being trained: a decoder-only transformer, dense or mixture-of-experts,
 * with multi-head, grouped-query or multi-head latent attention (MLA, DeepSeek-V2/V3),
 * described by the "model" section of a scenario.
 *
 * Presets live in scenarios/models/NAME.cfg (`model = { preset = "llama2-7b"; }`); every key
 * is in workloads/model.c's table and docs/SCENARIOS.md. Derived figures (parameter counts,
 * model FLOPs) are computed here from the description, never typed in.
 */
#ifndef NPUSIM_WORKLOADS_MODEL_H
#define NPUSIM_WORKLOADS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/cfg.h"

#define WL_NAME_MAX 64

enum wl_norm { WL_NORM_RMS, WL_NORM_LAYER };
enum wl_act { WL_ACT_SWIGLU, WL_ACT_GELU };
/* rope; learned absolute embeddings (GPT-3); alibi: a per-head linear bias on the attention
 * scores, m_h (j - i) (Press et al. 2022; BLOOM, MPT), no position embedding */
enum wl_pos { WL_POS_ROPE, WL_POS_LEARNED, WL_POS_ALIBI };
/* flash: FlashAttention kernels (no s x s matrix in memory); standard: QK^T and PV as batched
 * GEMMs with the softmax in between (Megatron before FlashAttention). */
enum wl_attn { WL_ATTN_FLASH, WL_ATTN_STANDARD };
/* MoE router score function: softmax over the experts (Mixtral, Qwen3) or a sigmoid per expert
 * (DeepSeek-V3, Pangu Ultra MoE). */
enum wl_score { WL_SCORE_SOFTMAX, WL_SCORE_SIGMOID };

/* The built-in operators a training step calls, which model.kernels.<op> can replace. */
#define WL_SUBST_OPS(XX)                                                                    \
  XX(gemm) XX(grouped_gemm) XX(rms_norm) XX(layer_norm) XX(swiglu) XX(rope) XX(flash_attention) \
  XX(softmax) XX(dropout) XX(cross_entropy) XX(quantize) XX(moe_gating) XX(moe_permute)         \
  XX(moe_unpermute) XX(adamw)

#define WL__SUBST_COUNT(op) +1
#define WL_NSUBST (0 WL_SUBST_OPS(WL__SUBST_COUNT))

struct wl_model {
  char name[WL_NAME_MAX];
  char title[WL_NAME_MAX];
  int layers;
  int hidden;
  int ffn;                  /* MLP inner size (per expert for MoE layers: moe_ffn) */
  int heads;
  int kv_heads;             /* GQA groups; = heads for MHA */
  int head_dim;             /* 0: hidden / heads */
  int vocab;
  int seq_len;
  int norm;                 /* enum wl_norm */
  int act;                  /* enum wl_act */
  int pos;                  /* enum wl_pos */
  int attention;            /* enum wl_attn */
  bool tied_embeddings;
  bool bias;                /* linear layers carry biases (GPT-3) */
  double dropout;           /* dropout probability (hidden, attention, embedding); 0: none */
  bool sandwich_norm;       /* a norm on each sublayer's output too, before the residual add
                               (Pangu Ultra's depth-scaled sandwich norm): 4 norms per layer */
  bool qk_norm;             /* a norm on each head's query and key (Qwen3): weights of head_dim */
  int doc_len;              /* packed sequences: tokens per document, attention masked per
                               document (FlashAttention varlen); 0: one document per sequence */
  int mtp_layers;           /* multi-token prediction modules (DeepSeek-V3's MTP), after the
                               output head on the last pipeline stage; 0: none */
  int window;               /* sliding-window attention of the local layers: each query sees
                               itself and window - 1 keys before it; 0: none */
  int global_every;         /* with a window, layer l attends to the whole causal prefix when
                               (l + 1) % global_every == 0 (Gemma 3: 6, gpt-oss: 2); 0: every
                               layer is local (Mistral) */
  /* multi-head latent attention (DeepSeek-V2/V3), on when kv_lora_rank > 0. Queries: x W_dq
   * (h -> q_lora_rank), norm, W_uq (-> heads x (nope + rope)), or x W_q directly when
   * q_lora_rank = 0; keys and values: x W_dkv (h -> kv_lora_rank + rope, the rope part a key
   * shared by all heads), norm of the kv_lora_rank latent, W_ukv (-> heads x (nope + v)); W_o
   * (heads x v -> h). Attention runs on heads query and key/value heads of qk = nope + rope and
   * v = v_head_dim. */
  struct {
    int q_lora_rank;        /* 0: no query compression */
    int kv_lora_rank;       /* > 0: MLA */
    int qk_nope_head_dim;
    int qk_rope_head_dim;
    int v_head_dim;
  } mla;
  /* mixture of experts (experts = 0: dense) */
  struct {
    int experts;            /* routed experts */
    int shared;             /* shared experts */
    int top_k;
    int ffn;                /* inner size of one expert */
    int dense_layers;       /* the first layers stay dense */
    int groups, top_groups; /* group-limited routing (DeepSeek-V3); 0: none */
    double capacity_factor; /* 0: dropless */
    int score;              /* enum wl_score */
    int layer_freq;         /* after the dense layers, layer l is MoE when l % layer_freq == 0
                               (Megatron --moe-layer-freq, Hugging Face moe_layer_freq); 1: all */
  } moe;
  /* operator substitution (operator fusion as a what-if): every call the step makes of built-in
   * operator WL_SUBST_OPS[i] is costed by operator sub[i] instead ("" keeps it), with the
   * parameters the two share by name and type; load names a kernel plugin (ops/plugin.h) */
  struct {
    char load[512];         /* model.kernels.load: a shared object; "" none */
    char sub[WL_NSUBST][48];
  } kernels;
  /* DeepSeek sparse attention (DeepSeek-V3.2): a lightning indexer of `heads` heads of `dim`
   * scores each query's earlier tokens and attention reads the topk best; topk 0: dense */
  struct {
    int topk;
    int heads;
    int dim;
  } dsa;
  /* Hybrid linear attention (Gated DeltaNet layers, Qwen3-Next), on when heads > 0: a layer is
   * a gated delta-rule layer unless (l + 1) % full_every == 0 (then softmax attention; 0: every
   * layer linear). Projections x -> q, k (k_heads x k_dim each), v, z (heads x v_dim each) and
   * b, a (heads each); a depthwise causal convolution of width conv over q, k, v with SiLU; the
   * chunked gated delta rule (chunk tokens per chunk) over the heads; a gated RMSNorm of v_dim
   * with silu(z); the output projection heads x v_dim -> h. */
  struct {
    int heads;
    int k_heads;
    int k_dim;
    int v_dim;
    int conv;
    int chunk;
    int full_every;
  } linear;
  bool attn_gate;           /* softmax attention's output gated per element by sigmoid(x W_g) (Qwen3-Next:
                               the query projection twice as wide) */
  bool qkv_bias;            /* biases on the query, key and value projections only (Qwen2) */
  bool sinks;               /* a learned logit per head in each softmax's denominator (gpt-oss) */
  /* A vision encoder in front of the language model (a ViT: CLIP, SigLIP, InternViT), on when
   * layers > 0: each sample carries `images` images of `patches` tokens (class token included),
   * embedded from patch_dim pixels each, through `layers` pre-norm transformer layers (full
   * bidirectional attention per image, linear layers with biases); a projector (merge patches
   * concatenated, a two-layer MLP with GeLU to the model's hidden size) gives images x patches /
   * merge of the sequence's seq_len tokens. frozen: the encoder is not trained (forward only;
   * the projector still is). act, norm: enum wl_act, enum wl_norm. */
  struct {
    int layers;
    int hidden;
    int heads;
    int ffn;
    int patches;
    int images;
    int patch_dim;
    int merge;
    bool frozen;
    int act;
    int norm;
  } vision;
};

/* Tokens one query attends over: the document's (model.doc_len) or the sequence's. */
int wl_model_attn_len(const struct wl_model *m);

/* The i-th operator of WL_SUBST_OPS (0 <= i < WL_NSUBST). */
const char *wl_model_subst_op(int i);
/* The operator that costs calls of built-in operator op under m: op itself unless substituted. */
const char *wl_model_kernel_for(const struct wl_model *m, const char *op);

/* The "model" section's table (target: struct wl_model). */
const struct npu_table *wl_model_table(void);
/* Directory of model presets (scenarios/models, or $NPUSIM_MODEL_DIR). */
const char *wl_model_preset_dir(void);
/* Register the table and preset directory with a loader; zeroes m first. */
void wl_model_register(struct npu_cfg *cfg, struct wl_model *m);
/* Cross-field checks after loading (heads divisible by kv_heads, MLA dimensions, MoE keys, ...);
 * sets kv_heads (= heads when 0, and always for MLA). 0 or NPU_ECONFIG. */
int wl_model_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag);

/* Whether the attention is MLA (model.mla.kv_lora_rank > 0). */
bool wl_model_is_mla(const struct wl_model *m);
/* Head dimension of queries and keys: head_dim, or hidden / heads; MLA: nope + rope. The value
 * dimension can differ under MLA: use wl_model_attn_shape. */
int wl_model_head_dim(const struct wl_model *m);
/* The core attention's shape: query heads, key/value heads, query/key head dimension, value head
 * dimension. Without MLA: heads, kv_heads, head_dim, head_dim; MLA: heads, heads,
 * qk_nope_head_dim + qk_rope_head_dim, v_head_dim. Any pointer may be NULL. */
void wl_model_attn_shape(const struct wl_model *m, int *q_heads, int *kv_heads, int *qk_dim, int *v_dim);
/* Whether layer l (0-based) is an MoE layer: l >= moe.dense_layers and l % moe.layer_freq == 0.
 * Layers from `layers` on are the MTP modules' (wl_model_total_layers), of the last layer's kind. */
bool wl_model_layer_is_moe(const struct wl_model *m, int l);
/* Whether layer l attends through the sliding window (model.window, model.global_every). */
bool wl_model_layer_is_local(const struct wl_model *m, int l);
/* Whether layer l is a linear-attention (gated delta-rule) layer (model.linear). */
bool wl_model_layer_is_linear(const struct wl_model *m, int l);
/* Whether layer l is of the model's second layer kind, whose steps are expanded apart: a local
 * layer among global ones (model.window with global_every) or a linear-attention layer among
 * softmax-attention ones (model.linear with full_every). */
bool wl_model_layer_is_variant(const struct wl_model *m, int l);
/* Whether the model mixes two layer kinds (wl_model_layer_is_variant). */
bool wl_model_has_variants(const struct wl_model *m);
/* Channels of a linear-attention layer's causal convolution (q, k and v: 2 k_heads k_dim +
 * heads v_dim) and the widths of its input projection (q, k, v, z, b, a). */
int wl_model_linear_conv_channels(const struct wl_model *m);
int wl_model_linear_in_cols(const struct wl_model *m);
/* Parameters of a linear-attention layer's attention block (its norms apart): the projections,
 * and unless matmul the convolution's weights, A_log and dt_bias (a head each) and the gated
 * norm's weight (v_dim). */
double wl_model_linear_params(const struct wl_model *m, bool matmul);
/* What the inference engines (serve/, rl/ rollouts) cannot cost in m: NULL, or a sentence, with
 * the key at fault in *key. */
const char *wl_model_inference_gap(const struct wl_model *m, const char **key);
/* Parameters of one layer's sparse-attention indexer (model.dsa; 0 without); matmul: the weight
 * matrices only. Replicated on every TP rank. */
double wl_model_dsa_params(const struct wl_model *m, bool matmul);
/* The keys each query of layer l reads at most: the sliding window of a local layer, DeepSeek
 * sparse attention's topk (model.dsa.topk: every layer), or 0 (the whole causal prefix). */
int wl_model_layer_keys(const struct wl_model *m, int l);
/* Tokens a query of layer l attends over on average, as FlashAttention's work counts them: the
 * document's (wl_model_attn_len), or in a window 2 W - W^2 / attn_len (the causal band's
 * pairs, W attn_len - W^2 / 2, as half the square of that length). */
double wl_model_layer_attn_len(const struct wl_model *m, int l);
/* Parameters of the vision encoder (model.vision) and its projector: all of them (trainable
 * false) or only those the step trains (the projector alone when the encoder is frozen); matmul:
 * the weight matrices only. 0 without one. */
double wl_model_vision_params(const struct wl_model *m, bool trainable, bool matmul);
/* Vision tokens (patches through the encoder) per language-model token: images x patches /
 * seq_len; 0 without an encoder. */
double wl_model_vision_ratio(const struct wl_model *m);
/* Transformer layers the step runs: the model's and one per MTP module (layer layers + d is
 * module d's). */
int wl_model_total_layers(const struct wl_model *m);
/* Parameters one rank of a TP group of tp holds of one MTP module besides its transformer layer:
 * the projection of the concatenated hidden state and next-token embedding (2 h x h, split over
 * TP) and the norms of both and the module's final norm (replicated); the embedding and output
 * head are the main model's, shared. */
double wl_model_mtp_rank_params(const struct wl_model *m, int tp);
/* Parameters of the MTP modules in all (their layers and wl_model_mtp_extra_params); not
 * counted in wl_model_params, as model cards count the main model's. */
double wl_model_mtp_params(const struct wl_model *m);
/* Number of MoE layers. */
int wl_model_moe_layers(const struct wl_model *m);

/* Parameters: of one layer (l), of the embedding(s) and final norm, and in all. */
double wl_model_layer_params(const struct wl_model *m, int l);
double wl_model_embedding_params(const struct wl_model *m);
double wl_model_params(const struct wl_model *m);
/* Parameters a token activates (MoE: top_k + shared experts only; both embeddings counted, as
 * Mistral and Qwen count them). */
double wl_model_active_params(const struct wl_model *m);

/*
 * Model FLOPs of one training step over `tokens` tokens of sequence seq (forward + backward,
 * no recomputation): 6 x active matmul parameters per token (embeddings count only through
 * the output projection; the MoE router, h x experts, is a matmul; MLA's down- and
 * up-projections at their real shapes) + attention: per token and layer, QK^T 2 seq qk and
 * PV 2 seq v per query head, x 3 for forward and backward, i.e. 6 x layers x seq x heads x
 * (qk + v) = 12 x layers x seq x heads x head_dim without MLA (halved when causal_half is true,
 * as FlashAttention and Megatron's newer formula count it).
 * For GPT-3-shaped dense models this is Korthikanti et al.'s
 * 72 B s l h^2 (1 + s / 6h + V / 12lh) when causal_half is false. MTP modules count as their
 * layers, projections and output heads (as Megatron's num_floating_point_operations counts them).
 * A linear-attention layer (model.linear) has no softmax attention term but its recurrence's:
 * 18 k_dim v_dim per token and value head (k^T S, k u^T and S^T q, 2 k_dim v_dim each, x 3).
 */
double wl_model_flops(const struct wl_model *m, double tokens, bool causal_half);

#endif
