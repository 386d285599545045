/*
 * test_models.c - every model preset loads through the cfg loader, names itself, and has the
 * published parameter count (and active count for MoE); model FLOPs follow Korthikanti et al.'s
 * formula for GPT shapes and MLA's real shapes; MLA, sandwich and QK norms, MoE layer
 * placement and the model checks.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/err.h"
#include "tests/support/support.h"
#include "tests/workloads/helpers.h"
#include "workloads/model.h"

/*
 * Published sizes: the rounded figure the source prints (checked within 3%) and, where a
 * source gives the exact count, that count (checked to 1e-12).
 *   GPT: Narayanan et al. 2021 Table 1 (gpt3-1.7b .. gpt3-1t), Table 2 (174.6B for GPT-3);
 *        Korthikanti et al. 2022 Table 3 (22B). Exact: their formula
 *        P = 12 l h^2 (1 + 13 / 12h + (V + s) / 12lh), plus the final LayerNorm (2h) that the
 *        formula leaves out.
 *   Llama, Mixtral, Qwen3: the safetensors parameter counts on the Hugging Face model pages
 *        (meta-llama, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B).
 *   Mixtral: 46.7B total, 12.9B active (Jiang et al. 2024, "Mixtral of Experts"; Mistral AI).
 *   DeepSeek-V3: 671B total, 37B active (DeepSeek-V3 Technical Report, abstract and Table 1;
 *        the main model without its 14B multi-token prediction module).
 *   DeepSeek-V3.2-Exp: its Hugging Face card's 685B counts the MTP module as V3's card does; the
 *        main model is V3's 671B / 37B with the 61 lightning indexers' 0.86B added.
 *   Qwen3: 30.5B / 3.3B and 235B / 22B (Qwen3 Technical Report, Table 2).
 *   Qwen3-Next-80B-A3B: the Hugging Face model card's 80B in total (79B without embeddings) and
 *        "3B activated": the name's rounding of 3.25B without the embeddings (3.87B with them).
 *   Pangu Ultra: 135B (Yin et al. 2025, abstract). Pangu Ultra MoE: 718B total, 39B active
 *        (Tang et al. 2025, abstract); the 39B counts the parameters a token uses without the
 *        input embedding (39.19B; with it 40.37B, +3.5%), so it is compared that way.
 */
enum { EXACT_GPT = 1, EXACT_COUNT, EXACT_NONE };
#define ACTIVE_NOMINAL 2
/* DeepSeek-V3.2-Exp's lightning indexer per layer (config.json: 64 heads of 128 from the 1536
 * query latent; a key of 128 with its LayerNorm and the heads' weights from the 7168 hidden) */
#define DSV32_INDEXER (1536.0 * 64 * 128 + 7168.0 * 128 + 2 * 128 + 7168.0 * 64)
static const struct {
  const char *name;
  double published;    /* as printed by the source */
  int exact_kind;      /* EXACT_GPT: the GPT formula; EXACT_COUNT: `exact`; EXACT_NONE */
  double exact;        /* exact count */
  double active;       /* published active parameters (MoE); 0: dense, all active */
  /* how the source counts active parameters: false, every one; true, without the input
   * embedding; ACTIVE_NOMINAL, the figure is the model name's rounding (Qwen3-Next's "A3B"),
   * compared with the count without both embeddings within 10% */
  int active_no_input_embedding;
} sizes[] = {
    {"gpt3-1.7b", 1.7e9, EXACT_GPT, 0, 0, false},
    {"gpt3-3.6b", 3.6e9, EXACT_GPT, 0, 0, false},
    {"gpt3-7.5b", 7.5e9, EXACT_GPT, 0, 0, false},
    {"gpt3-18b", 18.4e9, EXACT_GPT, 0, 0, false},
    {"gpt3-39b", 39.1e9, EXACT_GPT, 0, 0, false},
    {"gpt3-76b", 76.1e9, EXACT_GPT, 0, 0, false},
    {"gpt3-145b", 145.6e9, EXACT_GPT, 0, 0, false},
    {"gpt3-310b", 310.1e9, EXACT_GPT, 0, 0, false},
    {"gpt3-530b", 529.6e9, EXACT_GPT, 0, 0, false},
    {"gpt3-1t", 1008.0e9, EXACT_GPT, 0, 0, false},
    {"gpt3-22b", 22e9, EXACT_GPT, 0, 0, false},
    {"gpt3-175b", 174.6e9, EXACT_GPT, 0, 0, false},
    {"llama2-7b", 6.74e9, EXACT_COUNT, 6738415616.0, 0, false},
    {"llama2-13b", 13.0e9, EXACT_COUNT, 13015864320.0, 0, false},
    {"llama2-34b", 33.7e9, EXACT_COUNT, 33743970304.0, 0, false}, /* codellama/CodeLlama-34b-hf */
    {"llama2-70b", 69.0e9, EXACT_COUNT, 68976648192.0, 0, false},
    {"llama3-8b", 8.03e9, EXACT_COUNT, 8030261248.0, 0, false},
    {"llama3.1-8b", 8.03e9, EXACT_COUNT, 8030261248.0, 0, false},
    {"llama3-70b", 70.6e9, EXACT_COUNT, 70553706496.0, 0, false},
    {"llama3-405b", 405.9e9, EXACT_COUNT, 405853388800.0, 0, false},
    {"mixtral-8x7b", 46.7e9, EXACT_COUNT, 46702792704.0, 12.9e9, false},
    {"deepseek-v3", 671e9, EXACT_NONE, 0, 37e9, false},
    /* V3's main model and the 61 lightning indexers, which every token uses */
    {"deepseek-v3.2", 671e9 + 61 * DSV32_INDEXER, EXACT_NONE, 0, 37e9 + 61 * DSV32_INDEXER, false},
    {"qwen3-30b-a3b", 30.5e9, EXACT_COUNT, 30532122624.0, 3.3e9, false},
    {"qwen3-235b-a22b", 235e9, EXACT_COUNT, 235093634560.0, 22e9, false},
    /* the model card: 80B in total (79B without embeddings), 3B activated */
    {"qwen3-next-80b-a3b", 80e9, EXACT_NONE, 0, 3e9, ACTIVE_NOMINAL},
    {"pangu-ultra-135b", 135e9, EXACT_NONE, 0, 0, false},
    {"pangu-ultra-moe", 718e9, EXACT_NONE, 0, 39e9, true},
    {"gpt-oss-20b", 20.9e9, EXACT_NONE, 0, 3.61e9, true}, /* model card Table 1: 20.91B, 3.61B active */
    {"gemma3-12b", 12e9, EXACT_NONE, 0, 0, false}, /* the model card's 12B, its vision encoder (not modelled) in it */
    {"llava-1.5-7b", 7.06e9, EXACT_NONE, 0, 0, false}, /* Hugging Face liuhaotian/llava-v1.5-7b: 7.06B */
    /* the exact 176,247,271,424 counts the embedding LayerNorm (2 h), not modelled */
    {"bloom-176b", 176247271424.0, EXACT_COUNT, 176247271424.0 - 2 * 14336, 0, false},
};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void load_preset(const char *name, struct npu_cfg **cfg, struct wl_model *m)
{
  struct npu_diag d;
  char msg[2048];
  npu_diag_clear(&d);
  *cfg = npu_cfg_create();
  wl_model_register(*cfg, m);
  int rc = npu_cfg_load_preset(*cfg, name, &d);
  if (rc == 0) rc = npu_cfg_finish(*cfg, &d);
  if (rc == 0) rc = wl_model_finish(*cfg, m, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", name, msg);
}

static void preset_names(char ***names, size_t *n)
{
  struct npu_cfg *c = npu_cfg_create();
  struct wl_model m;
  wl_model_register(c, &m);
  npu_cfg_list_presets(c, names, n);
  npu_cfg_destroy(c);
  cr_assert_geq(*n, NSIZES, "expected the %zu shipped model presets, found %zu", NSIZES, *n);
}

static double gpt_formula(const struct wl_model *m)
{
  double l = m->layers, h = m->hidden, V = m->vocab, s = m->seq_len;
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + 2 * h;
}

Test(models, every_preset_has_its_published_size, .timeout = 30)
{
  char **names;
  size_t n;
  preset_names(&names, &n);
  printf("\nmodel presets: parameters vs published (B)\n");
  for (size_t i = 0; i < n; i++) {
    size_t k;
    for (k = 0; k < NSIZES; k++)
      if (!strcmp(sizes[k].name, names[i])) break;
    cr_assert_lt(k, NSIZES, "preset %s has no published size in this test", names[i]);
    struct npu_cfg *cfg;
    struct wl_model m;
    load_preset(names[i], &cfg, &m);
    cr_assert_str_eq(m.name, names[i], "the preset file names itself");
    cr_assert(m.title[0], "%s has a title", names[i]);
    double p = wl_model_params(&m), a = wl_model_active_params(&m);
    char what[128];
    snprintf(what, sizeof what, "%s parameters vs published", names[i]);
    tw_close(p, sizes[k].published, 0.03, what);
    snprintf(what, sizeof what, "%s parameters vs exact count", names[i]);
    if (sizes[k].exact_kind == EXACT_GPT) tw_close(p, gpt_formula(&m), 1e-12, what);
    if (sizes[k].exact_kind == EXACT_COUNT) tw_close(p, sizes[k].exact, 1e-12, what);
    if (!sizes[k].active) {
      cr_assert_eq(m.moe.experts, 0, "%s: an MoE preset needs its published active count", names[i]);
      cr_assert_eq(a, p, "%s: dense, every parameter active", names[i]);
    } else {
      cr_assert_gt(m.moe.experts, 0, "%s", names[i]);
      int how = sizes[k].active_no_input_embedding;
      double cmp = how ? a - (how == ACTIVE_NOMINAL ? 2.0 : 1.0) * m.vocab * m.hidden : a;
      snprintf(what, sizeof what, "%s active parameters vs published", names[i]);
      tw_close(cmp, sizes[k].active, how == ACTIVE_NOMINAL ? 0.10 : 0.03, what);
      printf("%-18s %9.3f vs %7.1f (%+.2f%%)   active %7.3f vs %5.1f (%+.2f%%)\n", names[i], p / 1e9,
             sizes[k].published / 1e9, 100 * (p / sizes[k].published - 1), cmp / 1e9, sizes[k].active / 1e9,
             100 * (cmp / sizes[k].active - 1));
    }
    if (!sizes[k].active)
      printf("%-18s %9.3f vs %7.1f (%+.2f%%)\n", names[i], p / 1e9, sizes[k].published / 1e9,
             100 * (p / sizes[k].published - 1));
    npu_cfg_destroy(cfg);
  }
  fflush(stdout);
  npu_cfg_free_names(names, n);
}

/* The shapes of the families, beyond the counts. */
Test(models, families_have_their_architecture, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("gpt3-175b", &cfg, &m);
  cr_assert_eq(m.norm, WL_NORM_LAYER);
  cr_assert_eq(m.act, WL_ACT_GELU);
  cr_assert_eq(m.pos, WL_POS_LEARNED);
  cr_assert(m.tied_embeddings && m.bias);
  cr_assert_eq(m.ffn, 4 * m.hidden);
  cr_assert_eq(m.kv_heads, m.heads);
  cr_assert_eq(wl_model_head_dim(&m), 128);
  cr_assert_eq(m.seq_len, 2048);
  npu_cfg_destroy(cfg);

  static const struct { const char *name; int kv, ffn, vocab, seq; } llama[] = {
      {"llama2-7b", 32, 11008, 32000, 4096},   {"llama2-13b", 40, 13824, 32000, 4096},
      {"llama2-70b", 8, 28672, 32000, 4096},   {"llama3-8b", 8, 14336, 128256, 8192},
      {"llama3-70b", 8, 28672, 128256, 8192},  {"llama3-405b", 8, 53248, 128256, 8192},
  };
  for (size_t i = 0; i < sizeof llama / sizeof llama[0]; i++) {
    load_preset(llama[i].name, &cfg, &m);
    cr_assert_eq(m.norm, WL_NORM_RMS, "%s", llama[i].name);
    cr_assert_eq(m.act, WL_ACT_SWIGLU, "%s", llama[i].name);
    cr_assert_eq(m.pos, WL_POS_ROPE, "%s", llama[i].name);
    cr_assert_eq(m.attention, WL_ATTN_FLASH, "%s", llama[i].name);
    cr_assert(!m.tied_embeddings && !m.bias, "%s", llama[i].name);
    cr_assert_eq(m.kv_heads, llama[i].kv, "%s", llama[i].name);
    cr_assert_eq(m.ffn, llama[i].ffn, "%s", llama[i].name);
    cr_assert_eq(m.vocab, llama[i].vocab, "%s", llama[i].name);
    cr_assert_eq(m.seq_len, llama[i].seq, "%s", llama[i].name);
    cr_assert_eq(wl_model_head_dim(&m), 128, "%s", llama[i].name);
    npu_cfg_destroy(cfg);
  }
}

/* A scenario names a preset inside its model section, and may override keys next to it. */
Test(models, a_section_preset_loads_and_overrides, .timeout = 30)
{
  char *dir = ts_tmpdir();
  char *path = ts_write(dir, "m.cfg", "model = { preset = \"llama2-7b\"; seq_len = 8192; };\n");
  struct npu_diag d;
  char msg[2048];
  npu_diag_clear(&d);
  struct npu_cfg *cfg = npu_cfg_create();
  struct wl_model m;
  wl_model_register(cfg, &m);
  int rc = npu_cfg_load_file(cfg, path, &d);
  if (rc == 0) rc = npu_cfg_finish(cfg, &d);
  if (rc == 0) rc = wl_model_finish(cfg, &m, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  cr_assert_str_eq(m.name, "llama2-7b");
  cr_assert_eq(m.seq_len, 8192);
  cr_assert_eq(m.layers, 32);
  tw_close(wl_model_params(&m), 6738415616.0, 1e-12, "llama2-7b parameters");
  npu_cfg_destroy(cfg);
  ts_rmtree(dir);
  free(path);
  free(dir);
}

/* Korthikanti et al. 2022, Sec. 6 / Table 5: F = 72 B s l h^2 (1 + s / 6h + V / 12lh) for the
 * GPT shapes (standard attention counted in full, no recomputation). */
Test(models, gpt_flops_follow_korthikanti, .timeout = 30)
{
  char **names;
  size_t n;
  preset_names(&names, &n);
  int checked = 0;
  for (size_t i = 0; i < n; i++) {
    if (strncmp(names[i], "gpt3-", 5) != 0) continue;
    struct npu_cfg *cfg;
    struct wl_model m;
    load_preset(names[i], &cfg, &m);
    double B = 1536, s = m.seq_len, l = m.layers, h = m.hidden, V = m.vocab;
    double want = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    char what[128];
    snprintf(what, sizeof what, "%s model FLOPs", names[i]);
    tw_close(wl_model_flops(&m, B * s, false), want, 1e-9, what);
    /* causal_half halves the attention-score term only: 12 B s^2 l h of it */
    tw_close(wl_model_flops(&m, B * s, true), want - 6 * B * s * s * l * h, 1e-9, what);
    checked++;
    npu_cfg_destroy(cfg);
  }
  cr_assert_eq(checked, 12);
  npu_cfg_free_names(names, n);
}

/* Load a preset with "KEY=VALUE" overrides; returns the status, the message in msg. */
static int load_with(const char *name, const char *const *sets, struct npu_cfg **cfg, struct wl_model *m, char *msg,
                     size_t n)
{
  struct npu_diag d;
  char buf[256];
  npu_diag_clear(&d);
  *cfg = npu_cfg_create();
  wl_model_register(*cfg, m);
  snprintf(buf, sizeof buf, "model.preset=%s", name);
  int rc = npu_cfg_set(*cfg, buf, &d);
  for (int i = 0; sets && sets[i] && rc == 0; i++) rc = npu_cfg_set(*cfg, sets[i], &d);
  if (rc == 0) rc = npu_cfg_finish(*cfg, &d);
  if (rc == 0) rc = wl_model_finish(*cfg, m, &d);
  npu_diag_format(&d, msg, n);
  return rc;
}

static void load_ok(const char *name, const char *const *sets, struct npu_cfg **cfg, struct wl_model *m)
{
  char msg[2048];
  int rc = load_with(name, sets, cfg, m, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", name, msg);
}

/* MLA attention parameters of DeepSeek-V3 (report Sec. 2.1.1 and 4.2, config.json):
 * W_dq h x 1536, q norm 1536, W_uq 1536 x 128 (128 + 64), W_dkv h x (512 + 64), kv norm 512,
 * W_ukv 512 x 128 (128 + 128), W_o 128 x 128 x h. */
static double dsv3_attn(const struct wl_model *m, bool norms)
{
  double h = m->hidden, a = m->heads, ql = 1536, kl = 512, n = 128, r = 64, v = 128;
  return h * ql + ql * a * (n + r) + h * (kl + r) + kl * a * (n + v) + a * v * h + (norms ? ql + kl : 0);
}

Test(models, mla_parameters_follow_deepseek_v3_shapes, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("deepseek-v3", &cfg, &m);
  cr_assert(wl_model_is_mla(&m));
  int qh, kvh, qk, vd;
  wl_model_attn_shape(&m, &qh, &kvh, &qk, &vd);
  cr_assert(qh == 128 && kvh == 128 && qk == 192 && vd == 128, "attention shape %d %d %d %d", qh, kvh, qk, vd);
  cr_assert_eq(wl_model_head_dim(&m), 192);
  cr_assert_eq(m.kv_heads, 128, "MLA: a key and value per head");
  cr_assert_eq(m.moe.score, WL_SCORE_SIGMOID);
  double h = m.hidden, V = m.vocab, expert = 3 * h * 2048;
  double dense = dsv3_attn(&m, true) + 2 * h + 3 * h * 18432;
  double moe = dsv3_attn(&m, true) + 2 * h + (256 + 1) * expert + 256 * h;
  tw_close(wl_model_layer_params(&m, 0), dense, 1e-12, "dense layer 0");
  tw_close(wl_model_layer_params(&m, 2), dense, 1e-12, "dense layer 2");
  tw_close(wl_model_layer_params(&m, 3), moe, 1e-12, "MoE layer 3");
  tw_close(wl_model_params(&m), 3 * dense + 58 * moe + 2 * V * h + h, 1e-12, "DeepSeek-V3 total");
  tw_close(wl_model_active_params(&m), 3 * dense + 58 * (moe - 248 * expert) + 2 * V * h + h, 1e-12,
           "DeepSeek-V3 active: 8 routed + 1 shared experts");
  npu_cfg_destroy(cfg);

  /* without query compression: W_q h x heads (nope + rope) replaces W_dq, the norm and W_uq */
  const char *noq[] = {"model.mla.q_lora_rank=0", NULL};
  load_ok("deepseek-v3", noq, &cfg, &m);
  tw_close(wl_model_layer_params(&m, 0),
           dense - (h * 1536 + 1536 + 1536 * 128 * 192.0) + h * 128 * 192.0, 1e-12, "MLA without q_lora_rank");
  npu_cfg_destroy(cfg);
}

/* Model FLOPs with MLA: 6 x the active matmul parameters (MLA's five matrices at their shapes,
 * the router, the output projection) + attention 6 L s a (qk + v) per token, QK^T on 192-wide
 * and PV on 128-wide heads. */
Test(models, mla_flops_use_real_shapes, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("deepseek-v3", &cfg, &m);
  double h = m.hidden, V = m.vocab, L = m.layers, s = m.seq_len, a = m.heads, T = 4096.0 * 1920;
  double dense = dsv3_attn(&m, false) + 3 * h * 18432;
  double moe = dsv3_attn(&m, false) + (8 + 1) * 3 * h * 2048 + 256 * h; /* the router counts */
  /* the MTP module: an MoE layer, its projection 2 h x h and the output head once more */
  double mat = 2 * V * h + 3 * dense + 59 * moe + 2 * h * h;
  double attn = 6 * (L + 1) * s * a * (192 + 128);
  tw_close(wl_model_flops(&m, T, false), T * (6 * mat + attn), 1e-12, "DeepSeek-V3 model FLOPs");
  cr_assert_eq(m.mtp_layers, 1);
  double mtp_layer = dsv3_attn(&m, true) + 2 * h + (256 + 1) * 3 * h * 2048 + 256 * h;
  tw_close(wl_model_mtp_params(&m), mtp_layer + 2 * h * h + 3 * h, 1e-12,
           "DeepSeek-V3 MTP parameters: an MoE layer, the projection and three norms");
  tw_close(wl_model_flops(&m, T, false) - wl_model_flops(&m, T, true), T * attn / 2, 1e-9, "causal half");
  npu_cfg_destroy(cfg);

  /* without MLA the attention term is Korthikanti's 12 L s a d */
  load_preset("llama3-8b", &cfg, &m);
  double flops = wl_model_flops(&m, 1, false) - wl_model_flops(&m, 1, true);
  tw_close(flops, 6.0 * m.layers * m.seq_len * m.heads * 128, 1e-12, "llama3-8b attention, halved");
  int qh, kvh, qk, vd;
  wl_model_attn_shape(&m, &qh, &kvh, &qk, &vd);
  cr_assert(qh == 32 && kvh == 8 && qk == 128 && vd == 128);
  npu_cfg_destroy(cfg);
}

/* MoE layers: after moe.dense_layers, every layer_freq-th (Megatron/Hugging Face: l % freq == 0). */
Test(models, moe_layer_placement, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("deepseek-v3", &cfg, &m);
  cr_assert_eq(wl_model_moe_layers(&m), 58);
  cr_assert(!wl_model_layer_is_moe(&m, 2) && wl_model_layer_is_moe(&m, 3) && wl_model_layer_is_moe(&m, 60));
  npu_cfg_destroy(cfg);
  const char *freq2[] = {"model.moe.layer_freq=2", NULL};
  load_ok("deepseek-v3", freq2, &cfg, &m);
  cr_assert_eq(wl_model_moe_layers(&m), 29, "layers 4, 6, .., 60");
  cr_assert(!wl_model_layer_is_moe(&m, 3) && wl_model_layer_is_moe(&m, 4) && !wl_model_layer_is_moe(&m, 5));
  double h = m.hidden, dense = wl_model_layer_params(&m, 0);
  tw_close(wl_model_layer_params(&m, 5), dense, 1e-12, "an odd layer is dense");
  tw_close(wl_model_layer_params(&m, 4), dense - 3 * h * 18432 + 257 * 3 * h * 2048 + 256 * h, 1e-12, "MoE layer 4");
  npu_cfg_destroy(cfg);

  static const char *const all_moe[] = {"qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b"};
  for (int i = 0; i < 3; i++) {
    load_preset(all_moe[i], &cfg, &m);
    cr_assert_eq(wl_model_moe_layers(&m), m.layers, "%s: every layer MoE", all_moe[i]);
    cr_assert_eq(m.moe.score, WL_SCORE_SOFTMAX, "%s", all_moe[i]);
    npu_cfg_destroy(cfg);
  }
}

/* Active parameters drop the routed experts a token does not use: (E - k) expert MLPs per MoE
 * layer. */
Test(models, active_parameters_count_the_routed_top_k, .timeout = 30)
{
  static const struct { const char *name; double e, k, f; } moe[] = {
      {"mixtral-8x7b", 8, 2, 14336}, {"qwen3-30b-a3b", 128, 8, 768}, {"qwen3-235b-a22b", 128, 8, 1536},
      {"deepseek-v3", 256, 8, 2048}, {"pangu-ultra-moe", 256, 8, 2048}};
  for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
    struct npu_cfg *cfg;
    struct wl_model m;
    load_preset(moe[i].name, &cfg, &m);
    double unused = wl_model_moe_layers(&m) * (moe[i].e - moe[i].k) * 3 * (double)m.hidden * moe[i].f;
    tw_close(wl_model_active_params(&m), wl_model_params(&m) - unused, 1e-12, moe[i].name);
    npu_cfg_destroy(cfg);
  }
}

/* Pangu Ultra's sandwich norm adds two norms per layer; Qwen3's QK norm two of head_dim. */
Test(models, sandwich_and_qk_norms, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("pangu-ultra-135b", &cfg, &m);
  cr_assert(m.sandwich_norm);
  double h = m.hidden, L = m.layers, V = m.vocab, q = 96 * 128.0, kv = 8 * 128.0, f = 28672;
  double layer = h * (q + 2 * kv) + q * h + 4 * h + 3 * h * f;
  tw_close(wl_model_params(&m), L * layer + 2 * V * h + h, 1e-12, "Pangu Ultra closed form");
  double with = wl_model_params(&m), flops = wl_model_flops(&m, 1, false);
  npu_cfg_destroy(cfg);
  const char *off[] = {"model.sandwich_norm=false", NULL};
  load_ok("pangu-ultra-135b", off, &cfg, &m);
  tw_close(with - wl_model_params(&m), 2 * h * L, 1e-12, "two output norms per layer");
  cr_assert_eq(flops, wl_model_flops(&m, 1, false), "norms are no matmul");
  npu_cfg_destroy(cfg);

  load_preset("qwen3-235b-a22b", &cfg, &m);
  cr_assert(m.qk_norm);
  with = wl_model_params(&m);
  flops = wl_model_flops(&m, 1, false);
  npu_cfg_destroy(cfg);
  const char *noqk[] = {"model.qk_norm=false", NULL};
  load_ok("qwen3-235b-a22b", noqk, &cfg, &m);
  tw_close(with - wl_model_params(&m), 2 * 128.0 * 94, 1e-12, "q_norm and k_norm of head_dim per layer");
  cr_assert_eq(flops, wl_model_flops(&m, 1, false), "norms are no matmul");
  npu_cfg_destroy(cfg);

  load_preset("pangu-ultra-moe", &cfg, &m);
  cr_assert(m.sandwich_norm && wl_model_is_mla(&m));
  double p = wl_model_params(&m);
  npu_cfg_destroy(cfg);
  load_ok("pangu-ultra-moe", off, &cfg, &m);
  tw_close(p - wl_model_params(&m), 2.0 * m.hidden * m.layers, 1e-12, "Pangu Ultra MoE sandwich norms");
  npu_cfg_destroy(cfg);
}

/* Cross-field checks name the key at fault. */
Test(models, checks_refuse_inconsistent_mla_and_moe_keys, .timeout = 30)
{
  static const struct { const char *preset, *set, *key; } bad[] = {
      {"deepseek-v3", "model.head_dim=128", "model.head_dim"},
      {"deepseek-v3", "model.kv_heads=8", "model.kv_heads"},
      {"deepseek-v3", "model.mla.v_head_dim=0", "model.mla.v_head_dim"},
      {"deepseek-v3", "model.bias=true", "model.bias"},
      {"deepseek-v3", "model.qk_norm=true", "model.qk_norm"},
      {"deepseek-v3", "model.moe.top_k=200", "model.moe.top_k"},
      {"llama2-7b", "model.mla.v_head_dim=128", "model.mla.kv_lora_rank"},
      {"llama2-7b", "model.moe.layer_freq=2", "model.moe.experts"},
      {"llama2-7b", "model.moe.dense_layers=1", "model.moe.experts"},
      {"mixtral-8x7b", "model.moe.top_groups=2", "model.moe.top_groups"},
      {"mixtral-8x7b", "model.moe.score=tanh", "model.moe.score"},
      {"mixtral-8x7b", "model.moe.layer_freq=0", "model.moe.layer_freq"},
      {"llama2-7b", "model.doc_len=3000", "model.doc_len"},
      {"llama2-7b", "model.doc_len=8192", "model.doc_len"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *sets[] = {bad[i].set, NULL};
    struct npu_cfg *cfg;
    struct wl_model m;
    char msg[2048];
    int rc = load_with(bad[i].preset, sets, &cfg, &m, msg, sizeof msg);
    cr_assert_neq(rc, 0, "%s with %s loads", bad[i].preset, bad[i].set);
    cr_assert(strstr(msg, bad[i].key) != NULL, "%s with %s: '%s' does not name %s", bad[i].preset, bad[i].set, msg,
              bad[i].key);
    npu_cfg_destroy(cfg);
  }
}

/* Packed documents (model.doc_len): the attention-score term of the model FLOPs is per document,
 * 12 s l h of it becoming 12 doc_len l h per token (Llama 2 7B: s 4096, doc_len 1024); the
 * matmuls do not change. */
Test(models, packed_documents_attend_per_document, .timeout = 30)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("llama2-7b", &cfg, &m);
  double whole = wl_model_flops(&m, 1, false), l = m.layers, h = m.hidden, s = m.seq_len;
  npu_cfg_destroy(cfg);
  const char *docs[] = {"model.doc_len=1024", NULL};
  load_ok("llama2-7b", docs, &cfg, &m);
  cr_assert_eq(wl_model_attn_len(&m), 1024);
  tw_close(whole - wl_model_flops(&m, 1, false), 12 * (s - 1024) * l * h, 1e-12, "attention over 1024, not 4096");
  npu_cfg_destroy(cfg);
}

/* Sliding-window layers (model.window, global_every) count the pairs of their causal band in
 * the attention FLOPs: W S - W^2 / 2 per query head and sequence, as half the square of 2 W -
 * W^2 / S; Llama 3 8B with a 1024-token window on every second layer (16 local of 32) at 8192.
 * The window's keys are checked. */
Test(models, sliding_window_layers_count_their_band)
{
  struct npu_cfg *cfg;
  struct wl_model m;
  load_preset("llama3-8b", &cfg, &m);
  double full = wl_model_flops(&m, 1, true);
  m.window = 1024;
  m.global_every = 2;
  cr_expect(wl_model_layer_is_local(&m, 0) && !wl_model_layer_is_local(&m, 1) && wl_model_layer_is_local(&m, 30));
  double band = wl_model_flops(&m, 1, true), S = m.seq_len, W = 1024;
  /* attention per token, layer and query head, causal: 6 x (S / 2) x (qk + v) -> 6 x (W - W^2 / 2S) x (qk + v) */
  double per_layer = 6.0 * m.heads * (128 + 128);
  tw_close(full - band, 16 * per_layer * (S / 2 - (W - W * W / (2 * S))), 1e-9, "16 local layers' attention saved");
  m.global_every = 0; /* every layer local */
  tw_close(full - wl_model_flops(&m, 1, true), 32 * per_layer * (S / 2 - (W - W * W / (2 * S))), 1e-9, "32 local layers");
  npu_cfg_destroy(cfg);

  const char *bad[][2] = {{"model.window=1000", "model.window"}, {"model.global_every=2", "model.global_every"}};
  for (int i = 0; i < 2; i++) {
    struct npu_diag d;
    npu_diag_clear(&d);
    cfg = npu_cfg_create();
    wl_model_register(cfg, &m);
    int rc = npu_cfg_load_preset(cfg, "llama3-8b", &d);
    if (!rc) rc = npu_cfg_set(cfg, bad[i][0], &d);
    if (!rc) rc = npu_cfg_finish(cfg, &d);
    if (!rc) rc = wl_model_finish(cfg, &m, &d);
    cr_expect_eq(rc, NPU_ECONFIG, "%s", bad[i][0]);
    cr_expect_str_eq(d.key, bad[i][1]);
    npu_cfg_destroy(cfg);
  }
}
