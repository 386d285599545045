/*
 * bench_load.c - scenario loads per second in one process (issue 21 item 4, target 1,000): each
 * load parses the file and its preset, detects the kind, registers and checks every key, builds
 * the system (no run, no kernel costed), and is destroyed.
 *
 *   bench_load [SECONDS]   default 2 per scenario
 *
 * Prints, per scenario (training, RL, serving, kernel, collective), the loads per second and the
 * CPU time of one load.
 */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/benchutil.h"
#include "scenario/scenario.h"

static double cpu_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
  double secs = argc > 1 ? atof(argv[1]) : 2;
  static const char *const files[] = {"scenarios/default.cfg",          "scenarios/rl_grpo_llama8b_h100_colocated.cfg",
                                      "scenarios/serve_llama8b_h100.cfg", "scenarios/gemm_910b2.cfg",
                                      "scenarios/allreduce_atlas_800t_a2.cfg", "bench/workloads/llama3_405b_16384.cfg"};
  printf("%-44s %12s %14s\n", "scenario", "loads/s", "CPU per load");
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", NPUSIM_SOURCE_DIR, files[f]);
    int n = 0;
    double t0 = bench_now(), c0 = cpu_now();
    do {
      struct scn_scenario *s;
      struct npu_diag d;
      npu_diag_clear(&d);
      if (scn_load(&s, NULL, path, NULL, 0, &d)) {
        char msg[1024];
        npu_diag_format(&d, msg, sizeof msg);
        fprintf(stderr, "bench_load: %s\n", msg);
        return 1;
      }
      scn_destroy(s);
      n++;
    } while (bench_now() - t0 < secs);
    double wall = bench_now() - t0, cpu = cpu_now() - c0;
    printf("%-44s %12.0f %11.3f ms\n", files[f], n / wall, 1e3 * cpu / n);
  }
  printf("peak RSS %.0f MiB\n", bench_peak_rss_bytes() / (1024.0 * 1024.0));
  return 0;
}
