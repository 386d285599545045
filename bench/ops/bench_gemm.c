/*
 * bench_gemm.c - GEMM through the operator layer: an 8192 x 8192 x 8192 bf16 GEMM on
 * ascend-910b2 at analytic fidelity (target at most 1 ms wall) and event fidelity (target at
 * most 2 s), functional GEMM throughput on the host for 1024^3 (GFLOP/s of host compute), and
 * the analytic cost of a long causal FlashAttention (16K tokens, 8 heads of 128, forward and
 * backward, ascend-910b2 and nvidia-h100-sxm): the kernels whose affine block classes are
 * sampled in part (docs/CHIP_MODEL.md). Each event run needs its own process: the program
 * re-executes itself.
 * Usage: bench_gemm                 all figures
 *        bench_gemm event|functional  one part (internal)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/ops/opbench.h"

static int run(const struct arch_system *sys, const char *op, const char *const *kv, int n, enum core_fidelity f,
               bool functional, struct op_result *res, double *wall)
{
  struct op_run_opts o = {.fidelity = f, .functional = functional, .seed = 1};
  return opbench_run(sys, op, kv, n, &o, res, wall);
}

int main(int argc, char **argv)
{
  struct arch_system sys;
  if (opbench_load(&sys, "ascend-910b2")) return 1;
  static const char *const big[] = {"m=8192", "n=8192", "k=8192", "dtype=bf16"};
  static const char *const small[] = {"m=1024", "n=1024", "k=1024", "dtype=fp16"};
  struct op_result r;
  double wall;
  if (argc > 1 && !strcmp(argv[1], "event")) {
    if (run(&sys, "gemm", big, 4, CORE_FIDELITY_EVENT, false, &r, &wall)) return 1;
    printf("%.9g %.9g %.9g %llu\n", wall, r.total.time_s, bench_peak_rss_bytes(),
           (unsigned long long)r.total.instructions);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "functional")) {
    if (run(&sys, "gemm", small, 4, CORE_FIDELITY_ANALYTIC, true, &r, &wall)) return 1;
    printf("%.9g %d\n", wall, r.passed);
    return 0;
  }
  /* analytic: best of 5 (the first run warms caches) */
  double best = 1e9;
  for (int i = 0; i < 5; i++) {
    if (run(&sys, "gemm", big, 4, CORE_FIDELITY_ANALYTIC, false, &r, &wall)) return 1;
    if (wall < best) best = wall;
  }
  double an_time = r.total.time_s;
  char cmd[4096];
  double ev_wall, ev_time, ev_rss, f_wall;
  unsigned long long instr;
  int passed;
  snprintf(cmd, sizeof cmd, "'%s' event", argv[0]);
  FILE *p = popen(cmd, "r");
  if (!p || fscanf(p, "%lf %lf %lf %llu", &ev_wall, &ev_time, &ev_rss, &instr) != 4) return 1;
  pclose(p);
  snprintf(cmd, sizeof cmd, "'%s' functional", argv[0]);
  p = popen(cmd, "r");
  if (!p || fscanf(p, "%lf %d", &f_wall, &passed) != 2) return 1;
  pclose(p);
  double flop = 2.0 * 8192.0 * 8192 * 8192;
  printf("gemm 8192^3 bf16 on ascend-910b2\n");
  printf("  analytic fidelity   wall %.3f ms (target 1 ms), predicted %.4g us = %.1f TFLOP/s\n", best * 1e3,
         an_time * 1e6, flop / an_time / 1e12);
  printf("  event fidelity      wall %.3f s (target 2 s), predicted %.4g us = %.1f TFLOP/s, %llu instructions, peak RSS %.0f MiB\n",
         ev_wall, ev_time * 1e6, flop / ev_time / 1e12, instr, ev_rss / 1048576);
  printf("functional gemm 1024^3 fp16 on the host: wall %.3f s, %.2f GFLOP/s, check %s\n", f_wall,
         2.0 * 1024 * 1024 * 1024 / f_wall / 1e9, passed ? "passed" : "FAILED");
  static const char *const presets[] = {"ascend-910b2", "nvidia-h100-sxm"}, *const passes[] = {"pass=fwd", "pass=bwd"};
  for (int c = 0; c < 2; c++) {
    struct arch_system chip;
    if (opbench_load(&chip, presets[c])) return 1;
    for (int q = 0; q < 2; q++) {
      const char *const kv[] = {"heads=8", "seq=16384", "dim=128", "causal=true", passes[q]};
      if (run(&chip, "flash_attention", kv, 5, CORE_FIDELITY_ANALYTIC, false, &r, &wall)) return 1;
      printf("causal flash_attention 16K x 8 heads x 128, %s on %s: analytic wall %.3f s, predicted %.4g us\n",
             passes[q] + 5, presets[c], wall, r.total.time_s * 1e6);
    }
  }
  return 0;
}
