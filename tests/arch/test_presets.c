/*
 * test_presets.c - every preset loads, its derived figures follow their formulas, the
 * published peaks come out, and its effective configuration loads back unchanged.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "arch/derived.h"
#include "common/cfg.h"
#include "tests/support/support.h"

struct loaded {
  struct npu_cfg *cfg;
  struct arch_system sys;
};

static void load_ok(struct loaded *l, const char *spec)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  l->cfg = npu_cfg_create();
  arch_register(l->cfg, &l->sys);
  int rc = npu_cfg_load_spec(l->cfg, spec, &d);
  if (rc == 0) rc = arch_finish(l->cfg, &l->sys, &d);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", spec, msg);
}

static void preset_names(char ***names, size_t *n)
{
  struct npu_cfg *c = npu_cfg_create();
  struct arch_system s;
  arch_register(c, &s);
  npu_cfg_list_presets(c, names, n);
  npu_cfg_destroy(c);
  cr_assert_geq(*n, 18, "expected the 18 shipped presets, found %zu", *n);
}

static void close_to(double got, double want, double rel, const char *what)
{
  cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.6g, want %.6g (+-%.2g%%)", what,
            got, want, rel * 100);
}

Test(presets, derived_figures_follow_their_formulas, .timeout = 30)
{
  char **names;
  size_t n;
  preset_names(&names, &n);
  for (size_t i = 0; i < n; i++) {
    struct loaded l;
    load_ok(&l, names[i]);
    const struct arch_chip *c = &l.sys.chip;
    struct arch_derived d;
    arch_derive(&l.sys, &d);
    for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
      double want = c->aic_count * (double)c->cube.macs_per_cycle[t] * 2 * c->clock_hz;
      cr_assert_eq(d.peak_flops_per_s[t], want, "%s %s", names[i], npu_dtype_name(t));
      if (want > 0) cr_assert_eq(d.balance_flops_per_byte[t], want / c->hbm.bw_bytes_per_s);
    }
    cr_assert_eq(d.vector_flops_per_s_fp16,
                 c->aiv_count * c->vector.bytes_per_cycle / 2 * c->vector.flops_per_element *
                     c->clock_hz);
    cr_assert_eq(d.vector_flops_per_s_fp32, d.vector_flops_per_s_fp16 / 2);
    cr_assert_eq(d.hbm_bw_bytes_per_s, c->hbm.bw_bytes_per_s);
    cr_assert_eq(d.l2_bw_bytes_per_s, c->l2.bw_bytes_per_s);
    if (l.sys.has_node) {
      const struct arch_node *nd = &l.sys.node;
      int packages = nd->devices / nd->dies_per_package;
      int links = nd->topology == ARCH_NODE_FULL_MESH ? packages - 1 : nd->link.ports;
      cr_assert_eq(d.intra_node_bw_bytes_per_s,
                   links * nd->link.bw_bytes_per_s / nd->dies_per_package, "%s", names[i]);
    } else {
      cr_assert_eq(d.intra_node_bw_bytes_per_s, 0);
    }
    if (l.sys.has_cluster) {
      cr_assert_eq(d.devices, (long long)l.sys.cluster.nodes * l.sys.node.devices);
      cr_assert_eq(d.scale_out_bw_bytes_per_s,
                   l.sys.cluster.scaleout.nics_per_device * l.sys.cluster.scaleout.nic_bw_bytes_per_s);
    }
    npu_cfg_destroy(l.cfg);
  }
  npu_cfg_free_names(names, n);
}

/* Published dense peaks (hardware.md): independent of the formula's inputs being right. */
Test(presets, published_peaks, .timeout = 30)
{
  static const struct {
    const char *preset;
    enum npu_dtype t;
    double tflops;
  } cases[] = {
      {"ascend-910b1", NPU_DT_FP16, 363.7}, {"ascend-910b2", NPU_DT_FP16, 353.9},
      {"ascend-910b3", NPU_DT_FP16, 294.9}, {"ascend-910b4", NPU_DT_FP16, 245.8},
      {"ascend-910b2", NPU_DT_INT8, 707.8}, {"nvidia-a100-80gb", NPU_DT_BF16, 312},
      {"nvidia-a100-80gb", NPU_DT_HF32, 156}, {"nvidia-h100-sxm", NPU_DT_BF16, 989},
      {"nvidia-h100-sxm", NPU_DT_FP8_E4M3, 1979}, {"nvidia-h200", NPU_DT_BF16, 989},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct loaded l;
    load_ok(&l, cases[i].preset);
    struct arch_derived d;
    arch_derive(&l.sys, &d);
    char what[128];
    snprintf(what, sizeof what, "%s %s", cases[i].preset, npu_dtype_name(cases[i].t));
    close_to(d.peak_flops_per_s[cases[i].t], cases[i].tflops * 1e12, 0.001, what);
    npu_cfg_destroy(l.cfg);
  }
}

Test(presets, the_910b2_bf16_peak_is_exact, .timeout = 10)
{
  struct loaded l;
  load_ok(&l, "ascend-910b2");
  struct arch_derived d;
  arch_derive(&l.sys, &d);
  cr_assert_eq(d.peak_flops_per_s[NPU_DT_BF16], 24.0 * 4096 * 2 * 1.8e9);
  cr_assert_eq(d.peak_flops_per_s[NPU_DT_FP8_E4M3], 0, "910B has no fp8 cube");
  npu_cfg_destroy(l.cfg);
}

Test(presets, effective_configuration_round_trips, .timeout = 30)
{
  char **names;
  size_t n;
  preset_names(&names, &n);
  char *dir = ts_tmpdir();
  for (size_t i = 0; i < n; i++) {
    struct loaded a, b;
    load_ok(&a, names[i]);
    struct npu_buf text = {0};
    npu_cfg_write_config(a.cfg, &text);
    char *path = ts_write(dir, "effective.cfg", npu_buf_str(&text));
    load_ok(&b, path);
    const struct npu_table *t = arch_table();
    for (size_t k = 0; k < t->nparams; k++) {
      char v1[512], v2[512];
      npu_cfg_format_value(a.cfg, t->params[k].name, v1, sizeof v1);
      npu_cfg_format_value(b.cfg, t->params[k].name, v2, sizeof v2);
      cr_assert_str_eq(v1, v2, "%s: %s", names[i], t->params[k].name);
    }
    cr_assert_eq(a.sys.has_node, b.sys.has_node);
    cr_assert_eq(a.sys.has_cluster, b.sys.has_cluster);
    free(path);
    npu_buf_release(&text);
    npu_cfg_destroy(a.cfg);
    npu_cfg_destroy(b.cfg);
  }
  ts_rmtree(dir);
  free(dir);
  npu_cfg_free_names(names, n);
}

Test(presets, inheritance_and_section_presets, .timeout = 10)
{
  struct loaded l;
  load_ok(&l, "dgx-h200");
  cr_assert_str_eq(l.sys.chip.name, "nvidia-h200");
  cr_assert_eq(l.sys.chip.hbm.bw_bytes_per_s, 4.8e12);
  cr_assert_eq(l.sys.node.link.ports, 18);
  cr_assert_eq(l.sys.cluster.scaleout.nic_bw_bytes_per_s, 50e9);
  const struct npu_origin *o = npu_cfg_origin(l.cfg, "chip.aic_count");
  cr_assert_eq(o->kind, NPU_ORIGIN_FILE);
  cr_assert(strstr(o->file, "nvidia-h100-sxm.cfg") != NULL, "%s", o->file);
  npu_cfg_destroy(l.cfg);

  load_ok(&l, "atlas-a3-superpod");
  struct arch_derived d;
  arch_derive(&l.sys, &d);
  cr_assert_eq(d.devices, 768);
  cr_assert_eq(d.packages_per_node, 8);
  cr_assert_eq(d.intra_node_bw_bytes_per_s, 196e9);
  cr_assert_eq(d.superpod_bw_bytes_per_s, 196e9);
  npu_cfg_destroy(l.cfg);
}

/* The A100 40GB is the 80 GB part (its SMs, clock and cube share) with its own HBM and the HBM
 * share fitted to its stream kernels; Polaris is four of them on direct NVLink. */
Test(presets, the_a100_40gb_and_polaris, .timeout = 10)
{
  struct loaded big, l;
  load_ok(&big, "nvidia-a100-80gb");
  load_ok(&l, "polaris");
  cr_assert_str_eq(l.sys.chip.name, "nvidia-a100-40gb");
  cr_assert_eq(l.sys.chip.hbm.size_bytes, 40ull << 30);
  cr_assert_eq(l.sys.chip.hbm.bw_bytes_per_s, 1.555e12);
  cr_assert_eq(l.sys.chip.aic_count, big.sys.chip.aic_count);
  cr_assert_eq(l.sys.chip.calib.cube.value, big.sys.chip.calib.cube.value);
  cr_assert_eq(l.sys.chip.calib.hbm.value, 0.9158);
  cr_assert(strstr(l.sys.chip.calib.hbm.source, "a100_40.txt") != NULL, "%s", l.sys.chip.calib.hbm.source);
  struct arch_derived d;
  arch_derive(&l.sys, &d);
  cr_assert_eq(d.devices, 4);
  cr_assert_eq(l.sys.node.topology, ARCH_NODE_FULL_MESH);
  cr_assert_eq(d.intra_node_bw_bytes_per_s, 300e9);
  npu_cfg_destroy(l.cfg);
  npu_cfg_destroy(big.cfg);
}
