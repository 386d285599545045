/*
 * test_calibrate.c - fitting calibration knobs to microbenchmark data: data made by the model
 * itself at a known knob value is fitted back to that value (closed form), data the model cannot
 * reach is reported at the bound, the fitted value is written into the preset file that sets
 * it, and bad data files are refused at file:line.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate/calibrate.h"
#include "common/cfg.h"
#include "cores/kernel.h"
#include "interconnect/coll.h"
#include "ops/cost_cache.h"
#include "tests/support/chip.h"
#include "tests/support/support.h"

static char *dir;

static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(calibrate, .init = setup, .fini = teardown, .timeout = 120);

static const struct cal_opts opts = {.kernel_fidelity = CORE_FIDELITY_ANALYTIC, .coll_fidelity = IC_FIDELITY_BULK};

static const struct cal_knob *knob(const char *key)
{
  int n;
  const struct cal_knob *k = cal_knobs(&n);
  for (int i = 0; i < n; i++)
    if (!strcmp(k[i].key, key)) return &k[i];
  cr_assert_fail("no knob %s", key);
  return NULL;
}

/* TFLOP/s of a GEMM of type dtype on preset's chip with the knob `key` at c (device time). */
static double gemm_tflops_of(const char *preset, long m, long n, long k, const char *dtype, const char *key, double c)
{
  char set[64], dt[32];
  snprintf(set, sizeof set, "%s=%g", key, c);
  snprintf(dt, sizeof dt, "dtype=%s", dtype);
  const char *sets[] = {set, NULL};
  struct arch_system sys;
  ts_load_system(&sys, preset, sets);
  const struct op_desc *d = op_find("gemm");
  char a1[32], a2[32], a3[32];
  snprintf(a1, sizeof a1, "m=%ld", m);
  snprintf(a2, sizeof a2, "n=%ld", n);
  snprintf(a3, sizeof a3, "k=%ld", k);
  const char *kv[] = {a1, a2, a3, dt};
  struct op_args a;
  struct npu_diag diag;
  cr_assert_eq(op_args_parse(d, &a, kv, 4, &diag), 0);
  struct op_cache *cache = op_cache_open(NULL, NULL);
  struct op_cost cost;
  cr_assert_eq(op_cost_get(cache, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &cost, &diag), 0);
  op_cache_close(cache);
  return 2.0 * m * n * k / (cost.time_s - cost.launch_s) / 1e12;
}

/* TFLOP/s of a bf16 GEMM on sys's chip with its cube at fraction c (device time). */
static double gemm_tflops(const char *preset, long m, long n, long k, double c)
{
  return gemm_tflops_of(preset, m, n, k, "bf16", "chip.calib.cube", c);
}

static struct cal_set load(const char *arch)
{
  const char *archs[] = {arch, NULL};
  struct cal_set set;
  struct npu_diag diag;
  int rc = cal_points_load(&set, dir, archs, &diag);
  cr_assert_eq(rc, 0, "%s", diag.msg);
  return set;
}

/* Write csv as gemm.csv and fit the A100's chip.calib.cube to it: the points in *set, the
 * preset in *sys, the fit in *f. */
static void fit_a100_cube(const char *csv, struct cal_set *set, struct arch_system *sys, struct cal_fit *f)
{
  free(ts_write(dir, "gemm.csv", csv));
  *set = load("nvidia-a100-80gb");
  ts_load_system(sys, "nvidia-a100-80gb", NULL);
  struct npu_diag diag;
  cr_assert_eq(cal_fit_knob(f, knob("chip.calib.cube"), set, sys, &opts, &diag), 0, "%s", diag.msg);
}

/* GEMM throughput the model itself gives at cube fraction 0.8, over three shapes: the two the
 * cube bounds in the model are fitted (0.8, residuals vanish), the memory-bound one is left out
 * and named (the knob cannot explain it). */
Test(calibrate, gemm_points_made_at_a_known_fraction_fit_back_to_it)
{
  static const long shapes[][3] = {{8192, 8192, 8192}, {8192, 4096, 8192}, {64, 8192, 8192}};
  char csv[2048] = "arch,m,n,k,dtype,tflops,source\n";
  for (int i = 0; i < 3; i++) {
    char line[256];
    snprintf(line, sizeof line, "nvidia-a100-80gb,%ld,%ld,%ld,bf16,%.17g,made by the test\n", shapes[i][0],
             shapes[i][1], shapes[i][2], gemm_tflops("nvidia-a100-80gb", shapes[i][0], shapes[i][1], shapes[i][2], 0.8));
    strcat(csv, line);
  }
  struct cal_set set;
  struct arch_system sys;
  struct cal_fit f;
  fit_a100_cube(csv, &set, &sys, &f);
  cr_assert_eq(set.n, 3);
  cr_assert_eq(f.npoints, 2);
  cr_assert_eq(f.unbound, 1);
  cr_assert(strstr(f.unbound_at, "gemm.csv:4 (cube ") != NULL, "%s", f.unbound_at);
  cr_assert_float_eq(f.value, 0.8, 2e-4, "fitted %g", f.value);
  cr_assert_float_eq(f.before, sys.chip.calib.cube.value, 1e-12);
  cr_assert(!f.at_bound);
  cr_assert_lt(f.max_abs, 1e-3, "worst residual %g", f.max_abs);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* The H100's large GEMMs are bound by L2 reads with the cube at its peak and by the cube below
 * about 0.9: made at 0.8 (bf16) and at 0.7 (fp8, chip.calib.cube_fp8), each knob fits back to
 * its value from its own dtype's points, which enter the fit at the fitted share (a fixed point;
 * chosen at the peak alone, none would). */
Test(calibrate, gemm_points_bound_elsewhere_at_the_peak_fit_at_the_fixed_point)
{
  static const long shapes[][3] = {{8192, 8192, 8192}, {12288, 12288, 12288}};
  char csv[2048] = "arch,m,n,k,dtype,tflops,source\n";
  for (int i = 0; i < 4; i++) {
    const long *sh = shapes[i % 2];
    bool f8 = i >= 2;
    char line[256];
    snprintf(line, sizeof line, "nvidia-h100-sxm,%ld,%ld,%ld,%s,%.17g,made by the test\n", sh[0], sh[1], sh[2],
             f8 ? "fp8_e4m3" : "bf16",
             gemm_tflops_of("nvidia-h100-sxm", sh[0], sh[1], sh[2], f8 ? "fp8_e4m3" : "bf16",
                            f8 ? "chip.calib.cube_fp8" : "chip.calib.cube", f8 ? 0.7 : 0.8));
    strcat(csv, line);
  }
  free(ts_write(dir, "gemm.csv", csv));
  struct cal_set set = load("nvidia-h100-sxm");
  struct arch_system sys;
  ts_load_system(&sys, "nvidia-h100-sxm", (const char *const[]){"chip.calib.cube=1", "chip.calib.cube_fp8=0", NULL});
  double at_peak = gemm_tflops_of("nvidia-h100-sxm", 8192, 8192, 8192, "bf16", "chip.calib.cube", 1.0);
  double at_09 = gemm_tflops_of("nvidia-h100-sxm", 8192, 8192, 8192, "bf16", "chip.calib.cube", 0.9);
  cr_assert_lt(at_peak / at_09, 1.05, "at the peak the cube does not bound it: %g vs %g TFLOP/s", at_peak, at_09);
  const char *keys[] = {"chip.calib.cube", "chip.calib.cube_fp8"};
  for (int i = 0; i < 2; i++) {
    struct cal_fit f;
    struct npu_diag diag;
    cr_assert_eq(cal_fit_knob(&f, knob(keys[i]), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
    cr_assert_eq(f.npoints, 2, "%s: %d points (%s)", keys[i], f.npoints, f.unbound_at);
    cr_assert_float_eq(f.value, i ? 0.7 : 0.8, 2e-4, "%s fitted %g", keys[i], f.value);
    for (int r = 0; r < f.npoints; r++)
      cr_assert_eq(!strcmp(set.p[f.res[r].point].dtype, "fp8_e4m3"), i == 1, "%s took %s", keys[i],
                   set.p[f.res[r].point].where);
    cal_fit_release(&f);
  }
  cal_set_release(&set);
}

/* Streaming points: the fit is the geometric mean of measured traffic over the HBM's bandwidth
 * (closed form), with the tool's counted bytes scaled by traffic_per_counted_byte; a row that is
 * not one streaming kernel (no factor) is skipped. */
Test(calibrate, hbm_points_fit_the_mean_share_of_the_bandwidth)
{
  struct arch_system sys;
  ts_load_system(&sys, "nvidia-a100-80gb", NULL);
  double bw = sys.chip.hbm.bw_bytes_per_s / 1e9;
  char csv[1024];
  snprintf(csv, sizeof csv,
           "arch,kernel,gbps,traffic_per_counted_byte,source\n"
           "nvidia-a100-80gb,copy,%.17g,1,made by the test\n"
           "nvidia-a100-80gb,exp (input bytes),%.17g,2,made by the test\n"
           "nvidia-a100-80gb,several kernels,100,,made by the test\n",
           0.9 * bw, 0.4 * bw);
  free(ts_write(dir, "hbm.csv", csv));
  struct cal_set set = load("nvidia-a100-80gb");
  cr_assert_eq(set.n, 2);
  cr_assert_eq(set.skipped, 1);
  struct cal_fit f;
  struct npu_diag diag;
  cr_assert_eq(cal_fit_knob(&f, knob("chip.calib.hbm"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_eq(f.npoints, 2);
  cr_assert_float_eq(f.value, sqrt(0.9 * 0.8), 1e-4, "fitted %g", f.value);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* What the HBM fit assumes of the chip model: a large stream (a 1 GiB fp32 dropout: read x and
 * its mask, write y) runs at the HBM bandwidth times calib.hbm on every preset it is fitted for. */
Test(calibrate, a_large_stream_runs_at_the_calibrated_hbm_bandwidth)
{
  static const char *const presets[] = {"nvidia-a100-80gb", "nvidia-h100-sxm", "ascend-910b2"};
  for (int i = 0; i < 3; i++) {
    struct arch_system sys;
    ts_load_system(&sys, presets[i], NULL);
    const struct op_desc *d = op_find("dropout");
    const char *kv[] = {"rows=16384", "cols=16384", "dtype=fp32"};
    struct op_args a;
    struct npu_diag diag;
    cr_assert_eq(op_args_parse(d, &a, kv, 3, &diag), 0, "%s", diag.msg);
    struct op_cache *cache = op_cache_open(NULL, NULL);
    struct op_cost c;
    cr_assert_eq(op_cost_get(cache, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &c, &diag), 0, "%s", diag.msg);
    op_cache_close(cache);
    double rate = (double)c.hbm_bytes / (c.time_s - c.launch_s),
           want = sys.chip.hbm.bw_bytes_per_s * sys.chip.calib.hbm.value;
    cr_expect(rate > 0.95 * want && rate <= 1.0001 * want, "%s: %.4g B/s, HBM x calib %.4g B/s", presets[i], rate, want);
  }
}

/* A measurement above what the chip can do at its full peak: the knob stays at 1 and the fit
 * says the bound was hit, never a fraction above 1. */
Test(calibrate, data_beyond_the_peak_is_reported_at_the_bound)
{
  char csv[512];
  snprintf(csv, sizeof csv, "arch,m,n,k,dtype,tflops,source\nnvidia-a100-80gb,8192,8192,8192,bf16,%.17g,too fast\n",
           1.2 * gemm_tflops("nvidia-a100-80gb", 8192, 8192, 8192, 1.0));
  struct cal_set set;
  struct arch_system sys;
  struct cal_fit f;
  fit_a100_cube(csv, &set, &sys, &f);
  cr_assert_eq(f.value, 1.0);
  cr_assert(f.at_bound);
  cr_assert_float_eq(f.res[0].residual, 1 / 1.2 - 1, 1e-6, "residual %g", f.res[0].residual);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* Run `npusim collective` and read its busbw (GB/s) of one size (at one link share: no curve). */
static double busbw(const char *arch, const char *op, const char *bytes, const char *ranks, const char *eff,
                     const char *overhead)
{
  char set[64], set2[64];
  snprintf(set, sizeof set, "node.link.efficiency=%s", eff);
  snprintf(set2, sizeof set2, "node.ccl.step_overhead=%s", overhead);
  struct run_result r = ts_npusim("collective", "--op", op, "--bytes", bytes, "--ranks", ranks, "--arch", arch,
                                  "--fidelity", "bulk", "--set", set, "--set", set2, "--set",
                                  "node.link.efficiency_curve=\"\"", "--set", "node.link.p2p_fraction=0", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *p = strstr(r.out, "\"busbw_bytes_per_s\": ");
  cr_assert(p != NULL, "%s", r.out);
  double v = strtod(p + strlen("\"busbw_bytes_per_s\": "), NULL) / 1e9;
  ts_run_free(&r);
  return v;
}

/* Append to csv the one-node point of op at bytes on ranks ranks of arch, made by the model at
 * link efficiency eff and step overhead overhead. */
static void add_point(char *csv, size_t n, const char *arch, const char *op, const char *bytes, const char *ranks,
                      const char *eff, const char *overhead)
{
  size_t len = strlen(csv);
  snprintf(csv + len, n - len, "%s,%s,%s,%s,1,%.17g,made by the test\n", arch, op, bytes, ranks,
           busbw(arch, op, bytes, ranks, eff, overhead));
}

/* An all-reduce curve simulated at link efficiency 0.6 and 4 us per algorithm step, 1 KiB to
 * 1 GiB on 8 ranks of a DGX A100: the small sizes are per-step cost, the large ones bandwidth,
 * so both knobs are fitted back jointly (each fit reports its own coordinate of the same
 * optimum). From large sizes alone the step overhead cannot be told from the link: left as is. */
Test(calibrate, a_collective_curve_fits_back_to_its_step_overhead_and_link_share)
{
  char csv[4096] = "arch,op,size_bytes,ranks,nodes,busbw_gbps,source\n";
  static const char *const sizes[] = {"1024", "16384", "262144", "4194304", "67108864", "1073741824"};
  for (int i = 0; i < 6; i++) add_point(csv, sizeof csv, "dgx-a100", "allreduce", sizes[i], "8", "0.6", "4us");
  free(ts_write(dir, "collective.csv", csv));
  struct cal_set set = load("dgx-a100");
  struct arch_system sys;
  ts_load_system(&sys, "dgx-a100", NULL);
  struct cal_fit f;
  struct npu_diag diag;
  cr_assert_eq(cal_fit_knob(&f, knob("node.ccl.step_overhead"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_eq(f.npoints, 6);
  cr_assert_float_eq(f.value, 4e-6, 2e-8, "fitted %g s", f.value);
  cr_assert_lt(f.max_abs, 5e-3, "worst residual %g", f.max_abs);
  cal_fit_release(&f);
  cr_assert_eq(cal_fit_knob(&f, knob("node.link.efficiency"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_float_eq(f.value, 0.6, 2e-3, "fitted %g", f.value);
  cal_fit_release(&f);
  cal_set_release(&set);
  /* the two largest sizes only: bandwidth-bound, the overhead is not identifiable */
  char big[1024] = "arch,op,size_bytes,ranks,nodes,busbw_gbps,source\n";
  for (int i = 4; i < 6; i++) add_point(big, sizeof big, "dgx-a100", "allreduce", sizes[i], "8", "0.6", "4us");
  free(ts_write(dir, "collective.csv", big));
  set = load("dgx-a100");
  cr_assert_eq(cal_fit_knob(&f, knob("node.ccl.step_overhead"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert(f.not_identifiable && f.npoints == 0);
  cr_assert_eq(f.value, sys.node.ccl.step_overhead_s);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* A link whose share grows with size: all-reduces on 8 ranks of a DGX A100 made at 0.4 (4 MiB),
 * 0.5 (32 MiB) and 0.7 (256 MiB, 1 GiB), sendrecvs at 0.35. One share cannot follow them; the
 * curve fits back: plateau 0.7 (node.link.efficiency), the fractions 4/7 and 5/7 of it at 512 KiB and
 * 4 MiB per ring step (S / 8), 1 from 32 MiB, the sendrecvs' fraction 0.5, and the residuals
 * vanish. Sizes at several rank counts are no curve: none is fitted. */
Test(calibrate, a_link_share_that_grows_with_size_fits_back_as_a_curve)
{
  char csv[4096] = "arch,op,size_bytes,ranks,nodes,busbw_gbps,source\n";
  static const char *const pts[][3] = {{"allreduce", "4194304", "0.4"},     {"allreduce", "33554432", "0.5"},
                                       {"allreduce", "268435456", "0.7"},   {"allreduce", "1073741824", "0.7"},
                                       {"sendrecv", "268435456", "0.35"},   {"sendrecv", "1073741824", "0.35"}};
  for (int i = 0; i < 6; i++) add_point(csv, sizeof csv, "dgx-a100", pts[i][0], pts[i][1], "8", pts[i][2], "2.151us");
  free(ts_write(dir, "collective.csv", csv));
  struct cal_set set = load("dgx-a100");
  struct arch_system sys;
  ts_load_system(&sys, "dgx-a100", NULL);
  struct cal_fit f;
  struct npu_diag diag;
  cr_assert_eq(cal_fit_knob(&f, knob("node.link.efficiency"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_eq(f.npoints, 6);
  cr_assert_gt(f.scalar_rms, 0.1, "one share leaves %g", f.scalar_rms);
  cr_assert_float_eq(f.value, 0.7, 2e-3, "plateau %g", f.value);
  cr_assert_eq(f.curve.n, 4, "%s", f.curve_text);
  static const double want[4][2] = {{512 * 1024.0, 4 / 7.0}, {4 * 1048576.0, 5 / 7.0}, {32 * 1048576.0, 1}, {128 * 1048576.0, 1}};
  for (int i = 0; i < 4; i++) {
    cr_assert_float_eq(f.curve.bytes[i], want[i][0], 1, "knot %d of %s", i, f.curve_text);
    cr_assert_float_eq(f.curve.share[i], want[i][1], 2e-3, "knot %d of %s", i, f.curve_text);
  }
  cr_assert_float_eq(f.p2p, 0.5, 2e-3, "p2p fraction %g", f.p2p);
  cr_assert_lt(f.max_abs, 5e-3, "worst residual %g", f.max_abs);
  cal_fit_release(&f);
  cal_set_release(&set);
  /* the same size on 2, 4 and 8 ranks: a spread over rank counts, not sizes */
  char many[2048] = "arch,op,size_bytes,ranks,nodes,busbw_gbps,source\n";
  static const char *const ranks[] = {"2", "4", "8"};
  for (int i = 0; i < 3; i++) add_point(many, sizeof many, "dgx-a100", "allgather", "1073741824", ranks[i], "0.6", "2.151us");
  free(ts_write(dir, "collective.csv", many));
  set = load("dgx-a100");
  cr_assert_eq(cal_fit_knob(&f, knob("node.link.efficiency"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_eq(f.curve.n, 0);
  cr_assert_float_eq(f.value, 0.6, 2e-3, "fitted %g", f.value);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* Collective bus bandwidth simulated at link efficiency 0.5 (all-gather and all-reduce, two
 * sizes): the fit finds 0.5, through its a + b / e closed form and a check run. */
Test(calibrate, collective_points_made_at_a_known_efficiency_fit_back_to_it)
{
  char csv[2048] = "arch,op,size_bytes,ranks,nodes,busbw_gbps,source\n";
  static const char *const cases[][3] = {{"allgather", "268435456", "8"}, {"allreduce", "1073741824", "8"},
                                         {"allgather", "1048576", "4"}};
  for (int i = 0; i < 3; i++)
    add_point(csv, sizeof csv, "atlas-800t-a2", cases[i][0], cases[i][1], cases[i][2], "0.5", "1.5us");
  free(ts_write(dir, "collective.csv", csv));
  struct cal_set set = load("atlas-800t-a2");
  struct arch_system sys;
  ts_load_system(&sys, "atlas-800t-a2", NULL);
  struct cal_fit f;
  struct npu_diag diag;
  cr_assert_eq(cal_fit_knob(&f, knob("node.link.efficiency"), &set, &sys, &opts, &diag), 0, "%s", diag.msg);
  cr_assert_eq(f.npoints, 3);
  cr_assert_float_eq(f.value, 0.5, 1e-3, "fitted %g", f.value);
  cr_assert_lt(f.max_abs, 2e-3, "worst residual %g", f.max_abs);
  cr_assert_str_eq(f.trend, "");
  cal_fit_release(&f);
  /* the scale-out knob has no multi-node points here */
  cr_assert_eq(cal_fit_knob(&f, knob("cluster.scaleout.efficiency"), &set, &sys, &opts, &diag), 0);
  cr_assert_eq(f.npoints, 0);
  cal_fit_release(&f);
  cal_set_release(&set);
}

/* --write: into the line that sets the knob (value and source replaced), or, where only a
 * default sets it, after a sibling of its group; the file loads back with the new values. */
Test(calibrate, write_puts_the_value_and_its_source_into_the_preset_file)
{
  char src[1100];
  snprintf(src, sizeof src, "%s/arch/presets/nvidia-a100-80gb.cfg", NPUSIM_SOURCE_DIR);
  char *text = ts_read(src);
  cr_assert(text != NULL);
  char *path = ts_write(dir, "a100.cfg", text);
  free(text);
  for (int pass = 0; pass < 2; pass++) {
    struct npu_cfg *cfg = npu_cfg_create();
    struct arch_system sys;
    arch_register(cfg, &sys);
    struct npu_diag diag;
    cr_assert_eq(npu_cfg_load_file(cfg, path, &diag), 0, "%s", diag.msg);
    cr_assert_eq(npu_cfg_finish(cfg, &diag), 0, "%s", diag.msg);
    cr_assert_eq(arch_finish(cfg, &sys, &diag), 0, "%s", diag.msg);
    char file[1100];
    /* pass 0: chip.calib.cube is set on its own line; pass 1: chip.calib.hbm is a default */
    const char *key = pass == 0 ? "chip.calib.cube" : "chip.calib.vector";
    struct cal_knob k = *knob("chip.calib.cube");
    k.key = key;
    k.source_key = pass == 0 ? "chip.calib.cube_source" : "chip.calib.vector_source";
    cr_assert_eq(cal_write_knob(cfg, &k, pass == 0 ? 0.8123 : 0.7, "fitted by the test", NULL, file, sizeof file, &diag), 0,
                 "%s", diag.msg);
    cr_assert_str_eq(file, path);
    npu_cfg_destroy(cfg);
  }
  struct npu_cfg *cfg = npu_cfg_create();
  struct arch_system sys;
  arch_register(cfg, &sys);
  struct npu_diag diag;
  cr_assert_eq(npu_cfg_load_file(cfg, path, &diag), 0, "%s", diag.msg);
  cr_assert_eq(npu_cfg_finish(cfg, &diag), 0, "%s", diag.msg);
  cr_assert_eq(arch_finish(cfg, &sys, &diag), 0, "%s", diag.msg);
  cr_assert_float_eq(sys.chip.calib.cube.value, 0.8123, 1e-12);
  cr_assert_str_eq(sys.chip.calib.cube.source, "fitted by the test");
  cr_assert_float_eq(sys.chip.calib.vector.value, 0.7, 1e-12);
  cr_assert_str_eq(sys.chip.calib.vector.source, "fitted by the test");
  npu_cfg_destroy(cfg);
  free(path);
}

/* Bad data: a field that is not a number, a missing column; exit 2 with file:line. */
Test(calibrate, bad_data_files_are_refused_at_their_line)
{
  free(ts_write(dir, "gemm.csv", "arch,m,n,k,dtype,tflops,source\nnvidia-a100-80gb,8192,8192,x,bf16,271,src\n"));
  struct run_result r = ts_npusim("calibrate", "nvidia-a100-80gb", "--data", dir, NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  char want[1300];
  snprintf(want, sizeof want, "error: %s/gemm.csv:2: k: expected a positive number, got 'x'\n", dir);
  cr_assert_str_eq(r.err, want);
  cr_assert_str_eq(r.out, "");
  ts_run_free(&r);
  free(ts_write(dir, "gemm.csv", "arch,m,n,k,dtype,source\nnvidia-a100-80gb,8192,8192,8192,bf16,src\n"));
  r = ts_npusim("calibrate", "nvidia-a100-80gb", "--data", dir, NULL);
  cr_assert_eq(r.status, 2, "%s", r.err);
  snprintf(want, sizeof want, "error: %s/gemm.csv:1: tflops: the header has no column 'tflops'\n", dir);
  cr_assert_str_eq(r.err, want);
  ts_run_free(&r);
  r = ts_npusim("calibrate", "nvidia-a100-80gb", "--knob", "chip.calib.l2", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert_str_eq(r.err, "error: command line: --knob: 'chip.calib.l2' is not a calibrated knob\n");
  ts_run_free(&r);
}

/* The provenance of a real fit fits a preset's source string (at most 255 characters), names
 * its points by line ranges, and --write leaves a preset that loads back with it. */
Test(calibrate, provenance_fits_the_preset_and_loads_back)
{
  char csv[8192] = "arch,m,n,k,dtype,tflops,source\n";
  for (int i = 0; i < 12; i++) {
    char line[512];
    snprintf(line, sizeof line,
             "nvidia-a100-80gb,%d,8192,8192,bf16,%d,a long source name repeated to overflow the string: "
             "github.com/example/benchmarks@0123456789abcdef/results/a100/gemm-%d.md table %d\n",
             8192 + 1024 * i, 200 + i, i, i); /* large: every point cube-bound, so every point is fitted */
    strcat(csv, line);
  }
  struct cal_set set;
  struct arch_system sys;
  struct cal_fit f;
  fit_a100_cube(csv, &set, &sys, &f);
  char prov[ARCH_SOURCE_MAX];
  cal_provenance(&f, &set, prov, sizeof prov);
  cr_assert_lt(strlen(prov), (size_t)ARCH_SOURCE_MAX);
  char want[1200];
  snprintf(want, sizeof want, "%s/gemm.csv:2-13", dir);
  cr_assert(strstr(prov, want) != NULL, "%s", prov);
  cr_assert(strstr(prov, "...") != NULL, "%s", prov);
  cal_fit_release(&f);
  cal_set_release(&set);
  /* written into a copy of the preset, which loads back */
  char src[1100];
  snprintf(src, sizeof src, "%s/arch/presets/nvidia-a100-80gb.cfg", NPUSIM_SOURCE_DIR);
  char *text = ts_read(src);
  char *path = ts_write(dir, "a100.cfg", text);
  free(text);
  struct run_result r = ts_npusim("calibrate", path, "--data", dir, "--knob", "chip.calib.cube", "--write", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("arch", "show", path, "--config", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "cube_source = \"npusim calibrate: 12 points") != NULL, "%s", r.out);
  ts_run_free(&r);
  free(path);
}

/* --write edits the file of the preset calibrated, never one it inherits from: a child preset
 * that inherits chip.calib.hbm from its base gets its own setting, and the base stays as it was. */
Test(calibrate, write_never_edits_an_inherited_preset)
{
  char src[1100];
  snprintf(src, sizeof src, "%s/arch/presets/nvidia-a100-80gb.cfg", NPUSIM_SOURCE_DIR);
  char *text = ts_read(src);
  char *base = ts_write(dir, "base.cfg", text);
  char child_text[1400];
  snprintf(child_text, sizeof child_text, "preset = \"%s\";\nchip = {\n  name = \"child\";\n  calib = { cube = 0.5; };\n};\n",
           base);
  char *child = ts_write(dir, "child.cfg", child_text);
  free(ts_write(dir, "hbm.csv",
                "arch,kernel,gbps,traffic_per_counted_byte,source\nchild,copy,1000,1,made by the test\n"));
  struct run_result r = ts_npusim("calibrate", child, "--data", dir, "--knob", "chip.calib.hbm", "--write", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *after = ts_read(base);
  cr_assert_str_eq(after, text, "the base preset was edited");
  char *c = ts_read(child);
  cr_assert(strstr(c, "hbm = ") && strstr(c, "hbm_source = \"npusim calibrate: 1 point"), "%s", c);
  free(c);
  free(after);
  free(text);
  free(base);
  free(child);
}

/* A best-of-search figure (stat "peak of ..." or "best of ...") is listed and never fitted: two
 * GEMMs made at cube fraction 0.8 and a third 20% faster marked as a sweep's peak fit back to 0.8
 * with the peak named apart; unmarked, the same three fit higher. */
Test(calibrate, best_of_search_figures_are_shown_and_not_fitted)
{
  static const long shapes[][3] = {{8192, 8192, 8192}, {8192, 4096, 8192}, {16384, 8192, 8192}};
  for (int marked = 1; marked >= 0; marked--) {
    char csv[2048] = "arch,m,n,k,dtype,tflops,stat,source\n";
    for (int i = 0; i < 3; i++) {
      double tf = gemm_tflops("nvidia-a100-80gb", shapes[i][0], shapes[i][1], shapes[i][2], 0.8);
      char line[256];
      snprintf(line, sizeof line, "nvidia-a100-80gb,%ld,%ld,%ld,bf16,%.17g,%s,made by the test\n", shapes[i][0],
               shapes[i][1], shapes[i][2], i == 2 ? 1.2 * tf : tf,
               i == 2 && marked ? "peak of sweep (MAMF)" : "single shape");
      strcat(csv, line);
    }
    struct cal_set set;
    struct arch_system sys;
    struct cal_fit f;
    fit_a100_cube(csv, &set, &sys, &f);
    if (marked) {
      cr_assert_eq(f.npoints, 2);
      cr_assert_eq(f.maxima, 1);
      cr_assert(strstr(f.maxima_at, "gemm.csv:4 (") != NULL, "%s", f.maxima_at);
      cr_assert_float_eq(f.value, 0.8, 2e-4, "fitted %g", f.value);
    } else {
      cr_assert_eq(f.npoints, 3);
      cr_assert_eq(f.maxima, 0);
      cr_assert_gt(f.value, 0.82, "fitted %g", f.value);
    }
    cal_fit_release(&f);
    cal_set_release(&set);
  }
}

/* --json: the preset, each knob's fit (points, value, the value before, rms) and every point's
 * residual with where it comes from; the HBM share of the H100 preset reproduces its own value
 * (the preset's was written by this fit); --fidelity takes analytic or event only. */
Test(calibrate, the_json_report_carries_every_point_of_the_fit)
{
  struct run_result r = ts_npusim("calibrate", "nvidia-h100-sxm", "--knob", "chip.calib.hbm", "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"preset\": \"nvidia-h100-sxm\"") && strstr(r.out, "\"key\": \"chip.calib.hbm\""), "%s", r.out);
  cr_assert(strstr(r.out, "\"points\": 5,") && strstr(r.out, "\"rms\": ") && strstr(r.out, "\"residuals\": ["), "%s", r.out);
  cr_assert(strstr(r.out, "\"where\": \"calibration/data/hbm.csv:7\"") && strstr(r.out, "\"measured_s\": "), "%s", r.out);
  const char *v = strstr(r.out, "\"value\": "), *b = strstr(r.out, "\"before\": ");
  cr_assert(v && b);
  cr_assert(fabs(atof(v + 9) - atof(b + 10)) < 1e-4, "refitted %g, preset %g", atof(v + 9), atof(b + 10));
  ts_run_free(&r);
  r = ts_npusim("calibrate", "nvidia-h100-sxm", "--knob", "chip.calib.hbm", "--fidelity", "exact", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "--fidelity: expected analytic or event, got 'exact'"), "%s", r.err);
  ts_run_free(&r);
}
