/*
 * model.h - the model being trained: a decoder-only transformer (dense, or MoE from the
 * "Training replay, MoE" issue on), described by the "model" section of a scenario.
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
enum wl_pos { WL_POS_ROPE, WL_POS_LEARNED };
/* flash: FlashAttention kernels (no s x s matrix in memory); standard: QK^T and PV as batched
 * GEMMs with the softmax in between (Megatron before FlashAttention). */
enum wl_attn { WL_ATTN_FLASH, WL_ATTN_STANDARD };

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
  /* mixture of experts (experts = 0: dense); filled in by the MoE issue */
  struct {
    int experts;            /* routed experts */
    int shared;             /* shared experts */
    int top_k;
    int ffn;                /* inner size of one expert */
    int dense_layers;       /* the first layers stay dense */
    int groups, top_groups; /* group-limited routing (DeepSeek-V3); 0: none */
    double capacity_factor; /* 0: dropless */
  } moe;
};

/* The "model" section's table (target: struct wl_model). */
const struct npu_table *wl_model_table(void);
/* Directory of model presets (scenarios/models, or $NPUSIM_MODEL_DIR). */
const char *wl_model_preset_dir(void);
/* Register the table and preset directory with a loader; zeroes m first. */
void wl_model_register(struct npu_cfg *cfg, struct wl_model *m);
/* Cross-field checks after loading (heads divisible by kv_heads, ...). 0 or NPU_ECONFIG. */
int wl_model_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag);

/* Head dimension (head_dim, or hidden / heads). */
int wl_model_head_dim(const struct wl_model *m);
/* Whether layer l (0-based) is an MoE layer. */
bool wl_model_layer_is_moe(const struct wl_model *m, int l);

/* Parameters: of one layer (l), of the embedding(s) and final norm, and in all. */
double wl_model_layer_params(const struct wl_model *m, int l);
double wl_model_embedding_params(const struct wl_model *m);
double wl_model_params(const struct wl_model *m);
/* Parameters a token activates (MoE: top_k + shared experts only). */
double wl_model_active_params(const struct wl_model *m);

/*
 * Model FLOPs of one training step over `tokens` tokens of sequence seq (forward + backward,
 * no recomputation): 6 x active matmul parameters per token (embeddings count only through
 * the output projection) + attention 12 x layers x seq x (heads x head_dim) per token (halved
 * when causal_half is true, as FlashAttention and Megatron's newer formula count it).
 * For GPT-3-shaped dense models this is Korthikanti et al.'s
 * 72 B s l h^2 (1 + s / 6h + V / 12lh) when causal_half is false.
 */
double wl_model_flops(const struct wl_model *m, double tokens, bool causal_half);

#endif
