/*
 * model.c - the "model" section: its parameter table, presets, checks and derived figures.
 */
#include "workloads/model.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "common/err.h"
#include "ops/op.h"
#include "ops/plugin.h"

#define NPU_PARAM_STRUCT struct wl_model

enum {
#define WL__SUBST_ENUM(op) SUBST_##op,
  WL_SUBST_OPS(WL__SUBST_ENUM)
#undef WL__SUBST_ENUM
};

static const char *const subst_names[] = {
#define WL__SUBST_NAME(op) #op,
    WL_SUBST_OPS(WL__SUBST_NAME)
#undef WL__SUBST_NAME
};

static const char *const norm_names[] = {"rmsnorm", "layernorm", NULL};
static const char *const act_names[] = {"swiglu", "gelu", NULL};
static const char *const pos_names[] = {"rope", "learned", "alibi", NULL};
static const char *const attn_names[] = {"flash", "standard", NULL};
static const char *const score_names[] = {"softmax", "sigmoid", NULL};

static const struct npu_section sections[] = {
    {"model", false, "the transformer being trained"},
};

static const struct npu_param params[] = {
    {"model.name", NPU_PT_STRING, NPU_PARAM_OFF(name), NPU_PARAM_SZ(name), NULL, 0, 0, 0, NULL, "preset name of the model"},
    {"model.title", NPU_PT_STRING, NPU_PARAM_OFF(title), NPU_PARAM_SZ(title), "", 0, 0, 0, NULL, "human-readable model name"},
    NPU_PARAM_INT("model.layers", layers, NULL, NPU_PF_POSITIVE, "transformer layers"),
    NPU_PARAM_INT("model.hidden", hidden, NULL, NPU_PF_POSITIVE, "hidden size"),
    NPU_PARAM_INT("model.ffn", ffn, NULL, NPU_PF_POSITIVE, "MLP inner size of a dense layer"),
    NPU_PARAM_INT("model.heads", heads, NULL, NPU_PF_POSITIVE, "attention (query) heads"),
    NPU_PARAM_INT("model.kv_heads", kv_heads, "0", NPU_PF_NONNEG, "key/value heads (GQA); 0: as heads"),
    NPU_PARAM_INT("model.head_dim", head_dim, "0", NPU_PF_NONNEG, "head dimension; 0: hidden / heads"),
    NPU_PARAM_INT("model.vocab", vocab, NULL, NPU_PF_POSITIVE, "vocabulary size"),
    NPU_PARAM_INT("model.seq_len", seq_len, NULL, NPU_PF_POSITIVE, "training sequence length, tokens"),
    NPU_PARAM_ENUM("model.norm", norm, "rmsnorm", norm_names, "normalisation: rmsnorm or layernorm"),
    NPU_PARAM_ENUM("model.activation", act, "swiglu", act_names, "MLP activation: swiglu (gated, 3 matrices) or gelu (2)"),
    NPU_PARAM_ENUM("model.position", pos, "rope", pos_names, "position encoding: rope, learned absolute embeddings, or alibi (a per-head linear bias on the attention "
         "scores, BLOOM and MPT)"),
    NPU_PARAM_ENUM("model.attention", attention, "flash", attn_names,
         "attention kernels: flash (FlashAttention) or standard (QK^T, softmax, PV as separate kernels)"),
    NPU_PARAM_BOOL("model.tied_embeddings", tied_embeddings, "false", "input embedding and output projection share weights"),
    NPU_PARAM_BOOL("model.bias", bias, "false", "linear layers and norms carry biases"),
    {"model.dropout", NPU_PT_REAL, NPU_PARAM_OFF(dropout), 0, "0", NPU_PF_NONNEG, 0, 0.99, NULL,
     "dropout probability after attention, the MLP and the embedding, and on attention scores (0: none)"},
    NPU_PARAM_BOOL("model.sandwich_norm", sandwich_norm, "false",
         "sandwich norm: a norm on each sublayer's output before the residual add as well as on its input "
         "(Pangu Ultra)"),
    NPU_PARAM_BOOL("model.qk_norm", qk_norm, "false", "a norm on each head's query and key before attention (Qwen3)"),
    NPU_PARAM_INT("model.doc_len", doc_len, "0", NPU_PF_NONNEG,
        "packed sequences: tokens per document, each sequence seq_len / doc_len documents whose attention is masked "
        "to their own tokens (Megatron --reset-attention-mask, FlashAttention's varlen kernels: costed document by "
        "document); 0: one document per sequence"),
    NPU_PARAM_INT("model.mtp_layers", mtp_layers, "0", NPU_PF_NONNEG,
        "multi-token prediction modules (DeepSeek-V3's MTP, Megatron --mtp-num-layers): each the next token's "
        "embedding and the previous depth's hidden state, both normalised, concatenated and projected (2 h -> h), "
        "one transformer layer of the last layer's kind, and the shared output head with its own loss, on the last "
        "pipeline stage after the head (docs/TRAINING.md); 0: none"),
    NPU_PARAM_INT("model.window", window, "0", NPU_PF_NONNEG,
        "sliding-window attention (Mistral, Gemma 2/3, gpt-oss): each query of a local layer attends to itself and "
        "window - 1 tokens before it (FlashAttention's band), a multiple of 128; 0: none"),
    NPU_PARAM_INT("model.global_every", global_every, "0", NPU_PF_NONNEG,
        "with model.window, layer l (from 0) attends to the whole causal prefix when (l + 1) % global_every = 0 "
        "(Gemma 3: 6, five local layers to one global; gpt-oss: 2, alternating); 0: every layer is local"),
    NPU_PARAM_INT("model.mla.q_lora_rank", mla.q_lora_rank, "0", NPU_PF_NONNEG,
        "MLA query compression rank (W_dq, a norm, W_uq); 0: queries projected directly"),
    NPU_PARAM_INT("model.mla.kv_lora_rank", mla.kv_lora_rank, "0", NPU_PF_NONNEG,
        "MLA key/value latent rank; > 0 turns multi-head latent attention (DeepSeek-V2/V3) on"),
    NPU_PARAM_INT("model.mla.qk_nope_head_dim", mla.qk_nope_head_dim, "0", NPU_PF_NONNEG,
        "MLA query/key head dimension without rotary positions"),
    NPU_PARAM_INT("model.mla.qk_rope_head_dim", mla.qk_rope_head_dim, "0", NPU_PF_NONNEG,
        "MLA query/key head dimension with rotary positions (the key's shared by all heads)"),
    NPU_PARAM_INT("model.mla.v_head_dim", mla.v_head_dim, "0", NPU_PF_NONNEG, "MLA value head dimension"),
    NPU_PARAM_INT("model.dsa.topk", dsa.topk, "0", NPU_PF_NONNEG,
        "DeepSeek sparse attention (DeepSeek-V3.2): each query attends to the topk earlier tokens its lightning "
        "indexer selects (FlashAttention's band of topk keys, a multiple of 128); 0: dense attention"),
    NPU_PARAM_INT("model.dsa.heads", dsa.heads, "64", NPU_PF_POSITIVE, "the lightning indexer's heads"),
    NPU_PARAM_INT("model.dsa.dim", dsa.dim, "128", NPU_PF_POSITIVE, "the lightning indexer's head dimension"),
    NPU_PARAM_INT("model.linear.heads", linear.heads, "0", NPU_PF_NONNEG,
        "hybrid linear attention (Gated DeltaNet, Qwen3-Next linear_num_value_heads): value heads of the gated "
        "delta-rule layers; 0: softmax attention in every layer"),
    NPU_PARAM_INT("model.linear.k_heads", linear.k_heads, "0", NPU_PF_NONNEG,
        "query/key heads of a linear-attention layer, each shared by heads / k_heads value heads "
        "(linear_num_key_heads); 0: as model.linear.heads"),
    NPU_PARAM_INT("model.linear.k_dim", linear.k_dim, "128", NPU_PF_POSITIVE,
        "query/key head dimension of a linear-attention layer (linear_key_head_dim)"),
    NPU_PARAM_INT("model.linear.v_dim", linear.v_dim, "128", NPU_PF_POSITIVE,
        "value head dimension of a linear-attention layer (linear_value_head_dim)"),
    NPU_PARAM_INT("model.linear.conv", linear.conv, "4", NPU_PF_POSITIVE,
        "width of the depthwise causal convolution over q, k and v (linear_conv_kernel_dim)"),
    NPU_PARAM_INT("model.linear.chunk", linear.chunk, "64", NPU_PF_POSITIVE,
        "tokens per chunk of the chunked gated delta rule (flash-linear-attention's 64)"),
    NPU_PARAM_INT("model.linear.full_every", linear.full_every, "0", NPU_PF_NONNEG,
        "with model.linear.heads, layer l (from 0) uses softmax attention when (l + 1) % full_every = 0, the "
        "gated delta rule otherwise (Qwen3-Next full_attention_interval: 4); 0: every layer linear"),
    NPU_PARAM_BOOL("model.attn_gate", attn_gate, "false",
        "gated attention (Qwen3-Next attn_output_gate): the query projection also gives a gate of the attention "
        "output's width, applied as sigmoid(gate) x output before the output projection"),
    NPU_PARAM_BOOL("model.sinks", sinks, "false",
        "attention sinks (gpt-oss): a learned logit per head and layer joins each softmax's denominator, with no "
        "value (FlashAttention's sinks option)"),
    NPU_PARAM_BOOL("model.qkv_bias", qkv_bias, "false",
        "biases on the query, key and value projections only (Qwen2, Megatron --add-qkv-bias); model.bias puts "
        "them on every linear layer"),
    NPU_PARAM_INT("model.vision.layers", vision.layers, "0", NPU_PF_NONNEG,
        "a vision encoder (ViT) in front of the language model: its transformer layers; 0: none (docs/TRAINING.md)"),
    NPU_PARAM_INT("model.vision.hidden", vision.hidden, "0", NPU_PF_NONNEG, "the vision encoder's hidden size"),
    NPU_PARAM_INT("model.vision.heads", vision.heads, "0", NPU_PF_NONNEG, "the vision encoder's attention heads"),
    NPU_PARAM_INT("model.vision.ffn", vision.ffn, "0", NPU_PF_NONNEG, "the vision encoder's MLP inner size"),
    NPU_PARAM_INT("model.vision.patches", vision.patches, "0", NPU_PF_NONNEG,
        "tokens per image through the encoder (patches, and a class token where the encoder has one: CLIP "
        "ViT-L/14 at 336 pixels, 577); a sample's images vary in practice: give the mean"),
    NPU_PARAM_INT("model.vision.images", vision.images, "1", NPU_PF_POSITIVE, "images per training sample"),
    NPU_PARAM_INT("model.vision.patch_dim", vision.patch_dim, "588", NPU_PF_POSITIVE,
        "pixels per patch the patch embedding reads (channels x patch size^2: 3 x 14 x 14)"),
    NPU_PARAM_INT("model.vision.merge", vision.merge, "1", NPU_PF_POSITIVE,
        "encoder tokens concatenated into one language-model token by the projector (Qwen2-VL's 2 x 2 merge: 4)"),
    NPU_PARAM_BOOL("model.vision.frozen", vision.frozen, "false",
        "the encoder is not trained (LLaVA's recipe): forward only, no gradients or optimizer states; the projector "
        "is trained"),
    NPU_PARAM_ENUM("model.vision.activation", vision.act, "gelu", act_names,
        "the encoder's MLP activation: gelu (CLIP, SigLIP) or swiglu"),
    NPU_PARAM_ENUM("model.vision.norm", vision.norm, "layernorm", norm_names,
        "the encoder's normalisation: layernorm (CLIP, SigLIP) or rmsnorm"),
    NPU_PARAM_INT("model.moe.experts", moe.experts, "0", NPU_PF_NONNEG, "routed experts per MoE layer; 0: a dense model"),
    NPU_PARAM_INT("model.moe.shared", moe.shared, "0", NPU_PF_NONNEG, "shared experts per MoE layer"),
    NPU_PARAM_INT("model.moe.top_k", moe.top_k, "0", NPU_PF_NONNEG, "experts each token is routed to"),
    NPU_PARAM_INT("model.moe.ffn", moe.ffn, "0", NPU_PF_NONNEG, "inner size of one expert's MLP"),
    NPU_PARAM_INT("model.moe.dense_layers", moe.dense_layers, "0", NPU_PF_NONNEG, "leading layers that stay dense"),
    NPU_PARAM_INT("model.moe.groups", moe.groups, "0", NPU_PF_NONNEG, "expert groups for group-limited routing; 0: none"),
    NPU_PARAM_INT("model.moe.top_groups", moe.top_groups, "0", NPU_PF_NONNEG, "groups a token may use"),
    {"model.moe.capacity_factor", NPU_PT_REAL, NPU_PARAM_OFF(moe.capacity_factor), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "expert capacity as a multiple of the mean load (tokens over it are dropped); 0: dropless"},
    NPU_PARAM_ENUM("model.moe.score", moe.score, "softmax", score_names,
         "router score function: softmax over the experts or sigmoid per expert (DeepSeek-V3)"),
    NPU_PARAM_INT("model.moe.layer_freq", moe.layer_freq, "1", NPU_PF_POSITIVE,
        "after the dense layers, layer l (from 0) is an MoE layer when l % layer_freq = 0; 1: every one"),
    NPU_PARAM_STR("model.kernels.load", kernels.load, "",
        "a kernel plugin (shared object, docs/KERNELS.md) to load, relative to this file; \"\": none"),
#define WL__SUBST_PARAM(op)                                                                              \
  NPU_PARAM_STR("model.kernels." #op, kernels.sub[SUBST_##op], "",                                       \
      "operator that costs every " #op " call of the step, with the parameters it shares by name and type " \
      "(a fusion what-if); \"\": " #op " itself"),
    WL_SUBST_OPS(WL__SUBST_PARAM)
#undef WL__SUBST_PARAM
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *wl_model_table(void)
{
  return &table;
}

const char *wl_model_preset_dir(void)
{
  static char dir[4300];
  const char *env = getenv("NPUSIM_MODEL_DIR");
  if (env && env[0]) return env;
  snprintf(dir, sizeof dir, "%s/scenarios/models", arch_source_root());
  return dir;
}

void wl_model_register(struct npu_cfg *cfg, struct wl_model *m)
{
  memset(m, 0, sizeof *m);
  npu_cfg_add_table(cfg, &table, m);
  npu_cfg_add_preset_dir(cfg, wl_model_preset_dir());
}

static int mla_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  if (!m->mla.kv_lora_rank) {
    if (m->mla.q_lora_rank || m->mla.qk_nope_head_dim || m->mla.qk_rope_head_dim || m->mla.v_head_dim)
      return npu_cfg_fail(cfg, diag, "model.mla.kv_lora_rank", "MLA keys are set but model.mla.kv_lora_rank is 0");
    return 0;
  }
  if (m->mla.qk_nope_head_dim + m->mla.qk_rope_head_dim <= 0)
    return npu_cfg_fail(cfg, diag, "model.mla.qk_nope_head_dim",
                        "MLA needs a query/key head dimension (qk_nope_head_dim + qk_rope_head_dim > 0)");
  if (!m->mla.v_head_dim) return npu_cfg_fail(cfg, diag, "model.mla.v_head_dim", "MLA needs the value head dimension");
  if (m->head_dim)
    return npu_cfg_fail(cfg, diag, "model.head_dim",
                        "with MLA the head dimensions are model.mla.qk_nope_head_dim, qk_rope_head_dim and "
                        "v_head_dim: leave model.head_dim at 0");
  if (m->kv_heads && m->kv_heads != m->heads)
    return npu_cfg_fail(cfg, diag, "model.kv_heads",
                        "MLA up-projects keys and values for every one of the %d heads: kv_heads must be %d (or 0)",
                        m->heads, m->heads);
  if (m->bias) return npu_cfg_fail(cfg, diag, "model.bias", "MLA layers are modelled without biases");
  if (m->qk_norm)
    return npu_cfg_fail(cfg, diag, "model.qk_norm", "MLA normalises its latents, not the heads: no model.qk_norm");
  m->kv_heads = m->heads;
  return 0;
}

/* model.linear: the gated delta rule's shapes and what it is not combined with. */
static int linear_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  if (!m->linear.heads) {
    if (m->linear.k_heads || m->linear.full_every)
      return npu_cfg_fail(cfg, diag, "model.linear.heads", "linear-attention keys are set but model.linear.heads is 0");
    return 0;
  }
  if (!m->linear.k_heads) m->linear.k_heads = m->linear.heads;
  if (m->linear.heads % m->linear.k_heads)
    return npu_cfg_fail(cfg, diag, "model.linear.k_heads", "%d value heads do not share %d query/key heads evenly",
                        m->linear.heads, m->linear.k_heads);
  if (m->seq_len % m->linear.chunk)
    return npu_cfg_fail(cfg, diag, "model.linear.chunk", "the sequence of %d tokens is not a whole number of chunks "
                        "of %d", m->seq_len, m->linear.chunk);
  if (m->window || m->dsa.topk || m->doc_len || m->attention != WL_ATTN_FLASH)
    return npu_cfg_fail(cfg, diag, "model.linear.heads", "linear-attention layers are modelled beside FlashAttention "
                        "layers over whole sequences: not with %s", m->window ? "a sliding window (model.window)"
                        : m->dsa.topk ? "sparse attention (model.dsa.topk)" : m->doc_len
                        ? "packed documents (model.doc_len)" : "model.attention = standard");
  return 0;
}

/* model.vision: the encoder's shapes, and its tokens within the sequence. */
static int vision_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  if (!m->vision.layers) {
    if (m->vision.hidden || m->vision.heads || m->vision.ffn || m->vision.patches)
      return npu_cfg_fail(cfg, diag, "model.vision.layers", "vision keys are set but model.vision.layers is 0");
    return 0;
  }
  const char *miss = !m->vision.hidden ? "model.vision.hidden" : !m->vision.heads ? "model.vision.heads"
                     : !m->vision.ffn ? "model.vision.ffn" : !m->vision.patches ? "model.vision.patches" : NULL;
  if (miss) return npu_cfg_fail(cfg, diag, miss, "a vision encoder needs its hidden size, heads, MLP size and patches");
  if (m->vision.hidden % m->vision.heads || (m->vision.hidden / m->vision.heads) % 64)
    return npu_cfg_fail(cfg, diag, "model.vision.heads", "hidden %d over %d heads: the head dimension must be a "
                        "multiple of 64 (FlashAttention)", m->vision.hidden, m->vision.heads);
  if (m->vision.patches % m->vision.merge)
    return npu_cfg_fail(cfg, diag, "model.vision.merge", "%d patches do not merge %d at a time", m->vision.patches,
                        m->vision.merge);
  if ((double)m->vision.images * m->vision.patches / m->vision.merge > m->seq_len)
    return npu_cfg_fail(cfg, diag, "model.vision.images", "%d images of %d tokens (merged %d to 1) exceed the "
                        "sequence of %d", m->vision.images, m->vision.patches, m->vision.merge, m->seq_len);
  return 0;
}

const char *wl_model_subst_op(int i)
{
  NPU_ASSERT(i >= 0 && i < WL_NSUBST);
  return subst_names[i];
}

const char *wl_model_kernel_for(const struct wl_model *m, const char *op)
{
  for (int i = 0; i < WL_NSUBST; i++)
    if (m->kernels.sub[i][0] && !strcmp(subst_names[i], op)) return m->kernels.sub[i];
  return op;
}

/* model.kernels: load the plugin (a path relative to the file that names it), then check that
 * every substitute exists and can be called with what the replaced operator's calls give: each
 * of its required parameters is one of the replaced operator's, of the same type. */
static int kernels_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  if (m->kernels.load[0]) {
    char shown[1024], path[2048];
    if (!npu_cfg_resolve_path(cfg, "model.kernels.load", m->kernels.load, shown, sizeof shown, path, sizeof path))
      return npu_cfg_fail(cfg, diag, "model.kernels.load", "the path is too long");
    struct npu_diag d;
    if (op_plugin_load(path, "model.kernels.load", &d))
      return npu_cfg_fail(cfg, diag, "model.kernels.load", "%s: %s", shown, d.msg);
  }
  for (int i = 0; i < WL_NSUBST; i++) {
    const char *to = m->kernels.sub[i];
    if (!to[0]) continue;
    char key[64];
    snprintf(key, sizeof key, "model.kernels.%s", subst_names[i]);
    const struct op_desc *d = op_find(to), *from = op_find(subst_names[i]);
    NPU_ASSERT(from);
    if (!d) {
      const char *s = op_suggest(to);
      if (s) return npu_cfg_fail(cfg, diag, key, "unknown operator '%s'; did you mean '%s'?", to, s);
      return npu_cfg_fail(cfg, diag, key, "unknown operator '%s'%s (see 'npusim kernel list')", to,
                          m->kernels.load[0] ? "" : "; a kernel plugin needs model.kernels.load");
    }
    for (int p = 0; p < d->nparams; p++) {
      if (d->params[p].def) continue;
      int q = op_param_index(from, d->params[p].name);
      if (q < 0 || from->params[q].type != d->params[p].type)
        return npu_cfg_fail(cfg, diag, key, "'%s' needs parameter '%s', which %s calls do not give%s", to,
                            d->params[p].name, subst_names[i], q < 0 ? "" : " with that type");
    }
  }
  return 0;
}

int wl_model_finish(struct npu_cfg *cfg, struct wl_model *m, struct npu_diag *diag)
{
  int rc = kernels_finish(cfg, m, diag);
  if (rc) return rc;
  rc = mla_finish(cfg, m, diag);
  if (rc) return rc;
  if (!m->kv_heads) m->kv_heads = m->heads;
  if (m->heads % m->kv_heads)
    return npu_cfg_fail(cfg, diag, "model.kv_heads", "%d query heads do not share %d key/value heads evenly",
                        m->heads, m->kv_heads);
  if (!wl_model_is_mla(m) && !m->head_dim && m->hidden % m->heads)
    return npu_cfg_fail(cfg, diag, "model.heads", "hidden %d is not a multiple of %d heads (set model.head_dim)",
                        m->hidden, m->heads);
  if (m->doc_len && (m->doc_len > m->seq_len || m->seq_len % m->doc_len))
    return npu_cfg_fail(cfg, diag, "model.doc_len", "documents of %d tokens do not pack a sequence of %d",
                        m->doc_len, m->seq_len);
  if (m->window) {
    if (m->window % 128)
      return npu_cfg_fail(cfg, diag, "model.window", "a multiple of 128 tokens (FlashAttention's key blocks), got %d",
                          m->window);
    if (m->attention != WL_ATTN_FLASH || wl_model_is_mla(m) || m->doc_len)
      return npu_cfg_fail(cfg, diag, "model.window", "a sliding window is costed with FlashAttention's band over "
                          "whole sequences: not with %s", m->attention != WL_ATTN_FLASH ? "model.attention = standard"
                          : wl_model_is_mla(m) ? "MLA" : "packed documents (model.doc_len)");
  } else if (m->global_every) {
    return npu_cfg_fail(cfg, diag, "model.global_every", "global layers among local ones need model.window");
  }
  if (m->dsa.topk) {
    if (m->dsa.topk % 128)
      return npu_cfg_fail(cfg, diag, "model.dsa.topk", "a multiple of 128 tokens (FlashAttention's key blocks), got %d",
                          m->dsa.topk);
    if (m->attention != WL_ATTN_FLASH || m->window || m->doc_len)
      return npu_cfg_fail(cfg, diag, "model.dsa.topk", "sparse attention is costed with FlashAttention's band of topk "
                          "keys over whole sequences: not with %s", m->attention != WL_ATTN_FLASH
                          ? "model.attention = standard" : m->window ? "a sliding window (model.window)"
                          : "packed documents (model.doc_len)");
  }
  rc = linear_finish(cfg, m, diag);
  if (rc) return rc;
  if (m->qkv_bias && (m->bias || wl_model_is_mla(m)))
    return npu_cfg_fail(cfg, diag, "model.qkv_bias", "%s", m->bias ? "model.bias already puts biases on every linear "
                        "layer" : "MLA layers are modelled without biases");
  /* ALiBi with standard attention is the QK^T batched GEMM's accumulated input (Megatron-DeepSpeed's
   * baddbmm onto the bias, BLOOM): a row of bias per head read, not costed */
  if ((m->sinks && (wl_model_is_mla(m) || m->attention != WL_ATTN_FLASH)) || (m->pos == WL_POS_ALIBI && wl_model_is_mla(m)))
    return npu_cfg_fail(cfg, diag, m->sinks ? "model.sinks" : "model.position", "%s is costed inside the "
                        "FlashAttention kernel of GQA/MHA layers: not with %s", m->sinks ? "an attention sink" : "ALiBi",
                        wl_model_is_mla(m) ? "MLA" : "model.attention = standard");
  if (m->attn_gate && wl_model_is_mla(m))
    return npu_cfg_fail(cfg, diag, "model.attn_gate", "a gated attention output is modelled for GQA/MHA, not MLA");
  rc = vision_finish(cfg, m, diag);
  if (rc) return rc;
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
    if (m->moe.groups && m->moe.top_k > m->moe.top_groups * (m->moe.experts / m->moe.groups))
      return npu_cfg_fail(cfg, diag, "model.moe.top_k",
                          "top_k %d exceeds the %d experts of the %d groups a token may use", m->moe.top_k,
                          m->moe.top_groups * (m->moe.experts / m->moe.groups), m->moe.top_groups);
    if (!m->moe.groups && m->moe.top_groups)
      return npu_cfg_fail(cfg, diag, "model.moe.top_groups", "top_groups needs model.moe.groups");
  } else if (m->moe.top_k || m->moe.shared || m->moe.ffn || m->moe.dense_layers || m->moe.groups ||
             m->moe.top_groups || m->moe.capacity_factor > 0 || m->moe.layer_freq > 1) {
    return npu_cfg_fail(cfg, diag, "model.moe.experts", "MoE keys are set but model.moe.experts is 0");
  }
  return 0;
}

int wl_model_attn_len(const struct wl_model *m)
{
  return m->doc_len ? m->doc_len : m->seq_len;
}

bool wl_model_is_mla(const struct wl_model *m)
{
  return m->mla.kv_lora_rank > 0;
}

int wl_model_head_dim(const struct wl_model *m)
{
  if (wl_model_is_mla(m)) return m->mla.qk_nope_head_dim + m->mla.qk_rope_head_dim;
  return m->head_dim ? m->head_dim : m->hidden / m->heads;
}

void wl_model_attn_shape(const struct wl_model *m, int *q_heads, int *kv_heads, int *qk_dim, int *v_dim)
{
  bool mla = wl_model_is_mla(m);
  int qk = wl_model_head_dim(m);
  if (q_heads) *q_heads = m->heads;
  if (kv_heads) *kv_heads = mla || !m->kv_heads ? m->heads : m->kv_heads;
  if (qk_dim) *qk_dim = qk;
  if (v_dim) *v_dim = mla ? m->mla.v_head_dim : qk;
}

bool wl_model_layer_is_moe(const struct wl_model *m, int l)
{
  if (l >= m->layers) l = m->layers - 1; /* an MTP module's layer: the last layer's kind */
  int freq = m->moe.layer_freq > 0 ? m->moe.layer_freq : 1;
  return m->moe.experts > 0 && l >= m->moe.dense_layers && l % freq == 0;
}

bool wl_model_layer_is_local(const struct wl_model *m, int l)
{
  if (l >= m->layers) l = m->layers - 1; /* an MTP module's layer: the last layer's kind */
  return m->window > 0 && (m->global_every == 0 || (l + 1) % m->global_every != 0);
}

bool wl_model_layer_is_linear(const struct wl_model *m, int l)
{
  if (l >= m->layers) l = m->layers - 1; /* an MTP module's layer: the last layer's kind */
  return m->linear.heads > 0 && (m->linear.full_every == 0 || (l + 1) % m->linear.full_every != 0);
}

bool wl_model_has_variants(const struct wl_model *m)
{
  return (m->window && m->global_every) || (m->linear.heads && m->linear.full_every);
}

bool wl_model_layer_is_variant(const struct wl_model *m, int l)
{
  return wl_model_has_variants(m) && (wl_model_layer_is_local(m, l) || wl_model_layer_is_linear(m, l));
}

const char *wl_model_inference_gap(const struct wl_model *m, const char **key)
{
  if (m->linear.heads) {
    *key = "model.linear.heads";
    return "inference of linear-attention layers (a recurrent state per sequence, not a KV cache) is not modelled";
  }
  if (m->attn_gate) {
    *key = "model.attn_gate";
    return "inference with a gated attention output is not modelled";
  }
  if (m->vision.layers) {
    *key = "model.vision.layers";
    return "inference with a vision encoder (its prefill of the images) is not modelled";
  }
  if (m->sinks || m->pos == WL_POS_ALIBI) {
    *key = m->sinks ? "model.sinks" : "model.position";
    return "the paged-attention decode kernel has no attention sinks or ALiBi";
  }
  return NULL;
}

int wl_model_linear_conv_channels(const struct wl_model *m)
{
  return 2 * m->linear.k_heads * m->linear.k_dim + m->linear.heads * m->linear.v_dim;
}

int wl_model_linear_in_cols(const struct wl_model *m)
{
  return wl_model_linear_conv_channels(m) + m->linear.heads * m->linear.v_dim + 2 * m->linear.heads;
}

int wl_model_layer_keys(const struct wl_model *m, int l)
{
  return m->dsa.topk ? m->dsa.topk : wl_model_layer_is_local(m, l) ? m->window : 0;
}

double wl_model_layer_attn_len(const struct wl_model *m, int l)
{
  double n = wl_model_attn_len(m), w = wl_model_layer_keys(m, l);
  return w > 0 && w < n ? 2 * w - w * w / n : n;
}

int wl_model_total_layers(const struct wl_model *m)
{
  return m->layers + m->mtp_layers;
}

int wl_model_moe_layers(const struct wl_model *m)
{
  int n = 0;
  for (int l = 0; l < m->layers; l++) n += wl_model_layer_is_moe(m, l);
  return n;
}

/* Parameters per element of a norm: weight, and bias for LayerNorm or biased models. */
static double norm_width(const struct wl_model *m)
{
  return m->norm == WL_NORM_LAYER || m->bias ? 2.0 : 1.0;
}

static double norm_params(const struct wl_model *m)
{
  return norm_width(m) * m->hidden;
}

/* Parameters of an MLP of inner size f (biases only when `bias`). */
static double mlp_params(const struct wl_model *m, double f, bool bias)
{
  double mats = m->act == WL_ACT_SWIGLU ? 3 : 2;
  return mats * m->hidden * f + (bias && m->bias ? (mats - 1) * f + m->hidden : 0);
}

/* Attention parameters without the sparse attention's indexer; `matmul`: only the weight
 * matrices, else also biases and the norms inside attention (MLA's latent norms, QK norms).
 * MLA, as DeepSeek-V3's config.json and modeling code (and its report, Sec. 2.1.1) shape it:
 * W_dq h x q_lora, the q latent norm, W_uq q_lora x heads (nope + rope) (or W_q h x heads
 * (nope + rope) without query compression), W_dkv h x (kv_lora + rope) (kv_a_proj_with_mqa:
 * the latent and the shared rotary key), the kv latent norm, W_ukv kv_lora x heads (nope + v),
 * W_o heads v x h. */
static double attn_params_dense(const struct wl_model *m, bool matmul)
{
  double h = m->hidden;
  int qh, kvh, qk, vd;
  wl_model_attn_shape(m, &qh, &kvh, &qk, &vd);
  if (wl_model_is_mla(m)) {
    double ql = m->mla.q_lora_rank, kl = m->mla.kv_lora_rank, q = (double)qh * qk;
    double p = ql > 0 ? h * ql + ql * q : h * q;
    p += h * (kl + m->mla.qk_rope_head_dim) + kl * qh * (double)(m->mla.qk_nope_head_dim + vd) + (double)qh * vd * h;
    if (!matmul) p += norm_width(m) * (ql + kl);
    return p;
  }
  double q = (double)qh * qk, kv = (double)kvh * qk;
  double p = h * ((m->attn_gate ? 2 : 1) * q + 2 * kv) + q * h;
  if (!matmul)
    p += (m->bias ? q + 2 * kv + h : m->qkv_bias ? q + 2 * kv : 0) + (m->qk_norm ? 2 * norm_width(m) * qk : 0) +
         (m->sinks ? qh : 0);
  return p;
}

/* A linear-attention layer (model.linear; Qwen3-Next's Qwen3NextGatedDeltaNet): in_proj_qkvz
 * and in_proj_ba (h -> wl_model_linear_in_cols), out_proj (heads v_dim -> h); besides the
 * matrices the convolution's weights (channels x conv, no bias), A_log and dt_bias (one per
 * head each) and the gated norm's weight (v_dim). */
double wl_model_linear_params(const struct wl_model *m, bool matmul)
{
  double h = m->hidden, hv = (double)m->linear.heads * m->linear.v_dim;
  double p = h * wl_model_linear_in_cols(m) + hv * h;
  if (!matmul) p += (double)wl_model_linear_conv_channels(m) * m->linear.conv + 2.0 * m->linear.heads + m->linear.v_dim;
  return p;
}

/* DeepSeek-V3.2's lightning indexer (DeepSeek-V3.2-Exp report, Sec. 2.1): W_qI (the query latent, or h without one) x
 * heads dim, W_kI h x dim with a LayerNorm on the key, W_w h x heads (the heads' weights). */
double wl_model_dsa_params(const struct wl_model *m, bool matmul)
{
  if (!m->dsa.topk) return 0;
  double h = m->hidden, in = wl_model_is_mla(m) && m->mla.q_lora_rank ? m->mla.q_lora_rank : h;
  double p = in * m->dsa.heads * (double)m->dsa.dim + h * m->dsa.dim + h * m->dsa.heads;
  return p + (matmul ? 0 : 2.0 * m->dsa.dim);
}

static double attn_params(const struct wl_model *m, bool matmul)
{
  return attn_params_dense(m, matmul) + wl_model_dsa_params(m, matmul);
}

/* Norms of a layer: before attention and the MLP, and with the sandwich norm after each too. */
static double layer_norm_params(const struct wl_model *m)
{
  return (m->sandwich_norm ? 4 : 2) * norm_params(m);
}

/* Layer parameters; `active`: count only the experts a token uses; `matmul`: only the weight
 * matrices (what model FLOPs count; the router is one). */
static double layer_params(const struct wl_model *m, int l, bool active, bool matmul)
{
  double p = (wl_model_layer_is_linear(m, l) ? wl_model_linear_params(m, matmul) : attn_params(m, matmul)) +
             (matmul ? 0 : layer_norm_params(m));
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

/* The vision encoder (CLIP's and SigLIP's shapes, with biases on every linear layer and norm):
 * the patch embedding (patch_dim x hidden and a bias), learned positions (patches x hidden),
 * per layer Q, K, V and output (4 hidden^2) and the MLP, two norms, a final norm. */
static double vision_encoder_params(const struct wl_model *m, bool matmul)
{
  double vh = m->vision.hidden, f = m->vision.ffn;
  bool swiglu = m->vision.act == WL_ACT_SWIGLU;
  double nw = m->vision.norm == WL_NORM_LAYER ? 2 : 1;
  double layer = 4 * vh * vh + (swiglu ? 3 : 2) * vh * f;
  if (!matmul) layer += 4 * vh + (swiglu ? 2 * f : f) + vh + 2 * nw * vh;
  double enc = m->vision.patch_dim * vh + m->vision.layers * layer;
  return enc + (matmul ? 0 : vh + (double)m->vision.patches * vh + nw * vh);
}

/* The projector: merge x hidden -> H and H -> H, with biases. */
static double vision_projector_params(const struct wl_model *m, bool matmul)
{
  double H = m->hidden;
  return (double)m->vision.merge * m->vision.hidden * H + H * H + (matmul ? 0 : 2 * H);
}

double wl_model_vision_params(const struct wl_model *m, bool trainable, bool matmul)
{
  if (!m->vision.layers) return 0;
  double proj = vision_projector_params(m, matmul);
  return trainable && m->vision.frozen ? proj : proj + vision_encoder_params(m, matmul);
}

double wl_model_vision_ratio(const struct wl_model *m)
{
  return m->vision.layers ? (double)m->vision.images * m->vision.patches / m->seq_len : 0;
}

double wl_model_params(const struct wl_model *m)
{
  double p = wl_model_embedding_params(m) + wl_model_vision_params(m, false, false);
  for (int l = 0; l < m->layers; l++) p += layer_params(m, l, false, false);
  return p;
}

double wl_model_mtp_rank_params(const struct wl_model *m, int tp)
{
  return 2.0 * m->hidden * m->hidden / tp + 3 * norm_params(m);
}

double wl_model_mtp_params(const struct wl_model *m)
{
  double p = m->mtp_layers * wl_model_mtp_rank_params(m, 1);
  for (int l = m->layers; l < wl_model_total_layers(m); l++) p += layer_params(m, l, false, false);
  return p;
}

double wl_model_active_params(const struct wl_model *m)
{
  double p = wl_model_embedding_params(m) + wl_model_vision_params(m, false, false);
  for (int l = 0; l < m->layers; l++) p += layer_params(m, l, true, false);
  return p;
}

/* Model FLOPs of the vision encoder and projector per language-model token: per encoder token
 * 2 x its matrices and, per layer, the bidirectional attention's 4 x patches x hidden (QK^T and
 * PV), x 3 with the backward or x 1 when frozen; the projector per merged token 6 x its
 * matrices, 4 when frozen (no input gradient). */
static double vision_flops(const struct wl_model *m)
{
  if (!m->vision.layers) return 0;
  double r = wl_model_vision_ratio(m), proj = vision_projector_params(m, true), enc = vision_encoder_params(m, true);
  double times = m->vision.frozen ? 1 : 3;
  double attn = 4.0 * m->vision.patches * m->vision.hidden * m->vision.layers;
  return r * times * (2 * enc + attn) + r / m->vision.merge * (m->vision.frozen ? 4 : 6) * proj;
}

double wl_model_flops(const struct wl_model *m, double tokens, bool causal_half)
{
  /* the output projection, once more per MTP module with the module's projection (2 h x h) */
  double mat = (1.0 + m->mtp_layers) * m->vocab * m->hidden + 2.0 * m->mtp_layers * m->hidden * m->hidden;
  for (int l = 0; l < wl_model_total_layers(m); l++) mat += layer_params(m, l, true, true);
  int qh, qk, vd;
  wl_model_attn_shape(m, &qh, NULL, &qk, &vd);
  /* per token, layer and query head: QK^T 2 seq qk, PV 2 seq v; backward twice the forward (a
   * local layer's band as its pairs: wl_model_layer_attn_len) */
  double len = 0, linear = 0;
  for (int l = 0; l < wl_model_total_layers(m); l++) {
    if (!wl_model_layer_is_linear(m, l)) len += wl_model_layer_attn_len(m, l);
    else linear++;
  }
  double attn = 6.0 * len * qh * (double)(qk + vd);
  if (causal_half) attn /= 2;
  /* a linear-attention layer: the recurrent form's products per token and value head, k^T S,
   * the rank-one update k u^T and S^T q (2 k_dim v_dim each), x 3 with the backward */
  attn += 18.0 * linear * m->linear.heads * (double)m->linear.k_dim * m->linear.v_dim;
  return tokens * (6 * mat + attn + vision_flops(m));
}
