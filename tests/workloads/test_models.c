/*
 * test_models.c - every model preset loads through the cfg loader, names itself, and has the
 * published parameter count; model FLOPs follow Korthikanti et al.'s formula for GPT shapes.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
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
 *   Llama: the safetensors parameter counts on the Hugging Face model pages of meta-llama.
 */
static const struct {
  const char *name;
  double published; /* as printed by the source */
  double exact;     /* exact count; 0: the GPT formula */
} sizes[] = {
    {"gpt3-1.7b", 1.7e9, 0},
    {"gpt3-3.6b", 3.6e9, 0},
    {"gpt3-7.5b", 7.5e9, 0},
    {"gpt3-18b", 18.4e9, 0},
    {"gpt3-39b", 39.1e9, 0},
    {"gpt3-76b", 76.1e9, 0},
    {"gpt3-145b", 145.6e9, 0},
    {"gpt3-310b", 310.1e9, 0},
    {"gpt3-530b", 529.6e9, 0},
    {"gpt3-1t", 1008.0e9, 0},
    {"gpt3-22b", 22e9, 0},
    {"gpt3-175b", 174.6e9, 0},
    {"llama2-7b", 6.74e9, 6738415616.0},
    {"llama2-13b", 13.0e9, 13015864320.0},
    {"llama2-70b", 69.0e9, 68976648192.0},
    {"llama3-8b", 8.03e9, 8030261248.0},
    {"llama3-70b", 70.6e9, 70553706496.0},
    {"llama3-405b", 405.9e9, 405853388800.0},
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
    double p = wl_model_params(&m);
    char what[128];
    snprintf(what, sizeof what, "%s parameters vs published", names[i]);
    tw_close(p, sizes[k].published, 0.03, what);
    snprintf(what, sizeof what, "%s parameters vs exact count", names[i]);
    tw_close(p, sizes[k].exact ? sizes[k].exact : gpt_formula(&m), 1e-12, what);
    cr_assert_eq(wl_model_active_params(&m), p, "%s: dense, every parameter active", names[i]);
    npu_cfg_destroy(cfg);
  }
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
