/*
 * model.c - the "model" section: its parameter table, presets, checks and derived figures.
 */
#include "workloads/model.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "common/err.h"

#define OFF(f) offsetof(struct wl_model, f)
#define SZ(f) sizeof(((struct wl_model *)0)->f)
#define INT(name, field, def, flags, desc) {name, NPU_PT_INT, OFF(field), 0, def, flags, 0, 0, NULL, desc}
#define ENUM(name, field, def, names, desc) {name, NPU_PT_ENUM, OFF(field), 0, def, 0, 0, 0, names, desc}
#define BOOL(name, field, def, desc) {name, NPU_PT_BOOL, OFF(field), 0, def, 0, 0, 0, NULL, desc}

static const char *const norm_names[] = {"rmsnorm", "layernorm", NULL};
static const char *const act_names[] = {"swiglu", "gelu", NULL};
static const char *const pos_names[] = {"rope", "learned", NULL};
static const char *const attn_names[] = {"flash", "standard", NULL};

static const struct npu_section sections[] = {
    {"model", false, "the transformer being trained"},
};

static const struct npu_param params[] = {
    {"model.name", NPU_PT_STRING, OFF(name), SZ(name), NULL, 0, 0, 0, NULL, "preset name of the model"},
    {"model.title", NPU_PT_STRING, OFF(title), SZ(title), "", 0, 0, 0, NULL, "human-readable model name"},
    INT("model.layers", layers, NULL, NPU_PF_POSITIVE, "transformer layers"),
    INT("model.hidden", hidden, NULL, NPU_PF_POSITIVE, "hidden size"),
    INT("model.ffn", ffn, NULL, NPU_PF_POSITIVE, "MLP inner size of a dense layer"),
    INT("model.heads", heads, NULL, NPU_PF_POSITIVE, "attention (query) heads"),
    INT("model.kv_heads", kv_heads, "0", NPU_PF_NONNEG, "key/value heads (GQA); 0: as heads"),
    INT("model.head_dim", head_dim, "0", NPU_PF_NONNEG, "head dimension; 0: hidden / heads"),
    INT("model.vocab", vocab, NULL, NPU_PF_POSITIVE, "vocabulary size"),
    INT("model.seq_len", seq_len, NULL, NPU_PF_POSITIVE, "training sequence length, tokens"),
    ENUM("model.norm", norm, "rmsnorm", norm_names, "normalisation: rmsnorm or layernorm"),
    ENUM("model.activation", act, "swiglu", act_names, "MLP activation: swiglu (gated, 3 matrices) or gelu (2)"),
    ENUM("model.position", pos, "rope", pos_names, "position encoding: rope or learned absolute embeddings"),
    ENUM("model.attention", attention, "flash", attn_names,
         "attention kernels: flash (FlashAttention) or standard (QK^T, softmax, PV as separate kernels)"),
    BOOL("model.tied_embeddings", tied_embeddings, "false", "input embedding and output projection share weights"),
    BOOL("model.bias", bias, "false", "linear layers and norms carry biases"),
    {"model.dropout", NPU_PT_REAL, OFF(dropout), 0, "0", NPU_PF_NONNEG, 0, 0.99, NULL,
     "dropout probability after attention, the MLP and the embedding, and on attention scores (0: none)"},
    INT("model.moe.experts", moe.experts, "0", NPU_PF_NONNEG, "routed experts per MoE layer; 0: a dense model"),
    INT("model.moe.shared", moe.shared, "0", NPU_PF_NONNEG, "shared experts per MoE layer"),
    INT("model.moe.top_k", moe.top_k, "0", NPU_PF_NONNEG, "experts each token is routed to"),
    INT("model.moe.ffn", moe.ffn, "0", NPU_PF_NONNEG, "inner size of one expert's MLP"),
    INT("model.moe.dense_layers", moe.dense_layers, "0", NPU_PF_NONNEG, "leading layers that stay dense"),
    INT("model.moe.groups", moe.groups, "0", NPU_PF_NONNEG, "expert groups for group-limited routing; 0: none"),
    INT("model.moe.top_groups", moe.top_groups, "0", NPU_PF_NONNEG, "groups a token may use"),
    {"model.moe.capacity_factor", NPU_PT_REAL, OFF(moe.capacity_factor), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "expert capacity as a multiple of the mean load (tokens over it are dropped); 0: dropless"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *wl_model_table(void)
{
  return &table;
}

const char *wl_model_preset_dir(void)
{
  const char *env = getenv("NPUSIM_MODEL_DIR");
  return env && env[0] ? env : NPUSIM_SOURCE_DIR "/scenarios/models";
}

void wl_model_register(struct npu_cfg *cfg, struct wl_model *m)
{
  memset(m, 0, sizeof *m);
  npu_cfg_add_table(cfg, &table, m);
  npu_cfg_add_preset_dir(cfg, wl_model_preset_dir());
}

int wl_model_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  if (!m->kv_heads) m->kv_heads = m->heads;
  if (m->heads % m->kv_heads)
    return npu_cfg_fail(cfg, diag, "model.kv_heads", "%d query heads do not share %d key/value heads evenly",
                        m->heads, m->kv_heads);
  if (!m->head_dim && m->hidden % m->heads)
    return npu_cfg_fail(cfg, diag, "model.heads", "hidden %d is not a multiple of %d heads (set model.head_dim)",
                        m->hidden, m->heads);
  if (m->moe.experts) {
    if (!m->moe.top_k || m->moe.top_k > m->moe.experts)
      return npu_cfg_fail(cfg, diag, "model.moe.top_k", "an MoE model routes each token to 1..%d experts, got %d",
                          m->moe.experts, m->moe.top_k);
    if (!m->moe.ffn) return npu_cfg_fail(cfg, diag, "model.moe.ffn", "an MoE model needs the expert MLP size");
    if (m->moe.dense_layers > m->layers)
      return npu_cfg_fail(cfg, diag, "model.moe.dense_layers", "%d dense layers in a %d-layer model",
                          m->moe.dense_layers, m->layers);
    if (m->moe.groups && (m->moe.experts % m->moe.groups || !m->moe.top_groups ||
                          m->moe.top_groups > m->moe.groups))
      return npu_cfg_fail(cfg, diag, "model.moe.groups",
                          "%d experts in %d groups, %d of them per token: groups must divide the experts and "
                          "top_groups be 1..groups", m->moe.experts, m->moe.groups, m->moe.top_groups);
  } else if (m->moe.top_k || m->moe.shared || m->moe.ffn) {
    return npu_cfg_fail(cfg, diag, "model.moe.experts", "MoE keys are set but model.moe.experts is 0");
  }
  return 0;
}

int wl_model_head_dim(const struct wl_model *m)
{
  return m->head_dim ? m->head_dim : m->hidden / m->heads;
}

bool wl_model_layer_is_moe(const struct wl_model *m, int l)
{
  return m->moe.experts > 0 && l >= m->moe.dense_layers;
}

/* Parameters of an MLP of inner size f (biases only when `bias`). */
static double mlp_params(const struct wl_model *m, double f, bool bias)
{
  double mats = m->act == WL_ACT_SWIGLU ? 3 : 2;
  return mats * m->hidden * f + (bias && m->bias ? (mats - 1) * f + m->hidden : 0);
}

static double attn_params(const struct wl_model *m, bool bias)
{
  double hd = wl_model_head_dim(m), q = (double)m->heads * hd, kv = (double)m->kv_heads * hd;
  return (double)m->hidden * (q + 2 * kv) + q * m->hidden + (bias && m->bias ? q + 2 * kv + m->hidden : 0);
}

static double norm_params(const struct wl_model *m)
{
  return (m->norm == WL_NORM_LAYER || m->bias ? 2.0 : 1.0) * m->hidden;
}

/* Layer parameters; `active`: count only the experts a token uses; `matmul`: only the weight
 * matrices (what model FLOPs count). */
static double layer_params(const struct wl_model *m, int l, bool active, bool matmul)
{
  double p = attn_params(m, !matmul) + (matmul ? 0 : 2 * norm_params(m));
  if (!wl_model_layer_is_moe(m, l)) return p + mlp_params(m, m->ffn, !matmul);
  double experts = active ? m->moe.top_k : m->moe.experts;
  return p + (experts + m->moe.shared) * mlp_params(m, m->moe.ffn, !matmul) + (double)m->hidden * m->moe.experts;
}

double wl_model_layer_params(const struct wl_model *m, int l)
{
  return layer_params(m, l, false, false);
}

double wl_model_embedding_params(const struct wl_model *m)
{
  double e = (double)m->vocab * m->hidden * (m->tied_embeddings ? 1 : 2);
  if (m->pos == WL_POS_LEARNED) e += (double)m->seq_len * m->hidden;
  return e + norm_params(m);
}

double wl_model_params(const struct wl_model *m)
{
  double p = wl_model_embedding_params(m);
  for (int l = 0; l < m->layers; l++) p += layer_params(m, l, false, false);
  return p;
}

double wl_model_active_params(const struct wl_model *m)
{
  double p = wl_model_embedding_params(m);
  for (int l = 0; l < m->layers; l++) p += layer_params(m, l, true, false);
  return p;
}

double wl_model_flops(const struct wl_model *m, double tokens, bool causal_half)
{
  double mat = (double)m->vocab * m->hidden; /* output projection */
  for (int l = 0; l < m->layers; l++) mat += layer_params(m, l, true, true);
  double attn = 12.0 * m->layers * (double)m->seq_len * (double)m->heads * wl_model_head_dim(m);
  if (causal_half) attn /= 2;
  return tokens * (6 * mat + attn);
}
