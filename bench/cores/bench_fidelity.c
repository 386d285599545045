/*
 * bench_fidelity.c - the event and analytic fidelities side by side on the programs of
 * tests/cores/test_fidelity.c, printed as the table of docs/CHIP_MODEL.md. Each event run needs
 * its own process (one SimGrid engine per process), so the program re-executes itself per case.
 * Usage: bench_fidelity            print the table
 *        bench_fidelity CASE       run one case, print "event_s analytic_s"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/benchutil.h"
#include "common/cfg.h"
#include "tests/cores/kernels.h"

static const struct {
  const char *name, *what;
} cases[] = {
    {"stream1", "GM -> L1 stream, 1 core, 300 x 64 KiB"},
    {"stream24", "GM -> L1 stream, 24 cores, 50 x 64 KiB each"},
    {"cube", "cube stream, 24 cores, 20 mmads of 128x256x128 each"},
    {"pipe1", "double-buffered GM->UB, exp, UB->GM; 1 core, 64 tiles (latency exposed)"},
    {"pipe48", "the same on 48 vector cores, 64 tiles each (HBM bound)"},
    {"wave", "256 KiB stream, 30 blocks on 24 cores (partial last wave)"},
};

static int load(struct arch_system *sys)
{
  struct npu_cfg *cfg = npu_cfg_create();
  arch_register(cfg, sys);
  struct npu_diag d;
  int rc = npu_cfg_load_spec(cfg, "ascend-910b2", &d);
  if (!rc) rc = arch_finish(cfg, sys, &d);
  if (rc) npu_diag_print(stderr, &d);
  npu_cfg_destroy(cfg);
  return rc;
}

static int one(const char *name)
{
  struct arch_system sys;
  if (load(&sys)) return 1;
  struct mem_gm *gm = mem_gm_create();
  struct core_kernel k;
  struct tk_stream s = {.bytes = 65536};
  struct tk_cube c;
  struct tk_pipeline p = {.elems = 16384, .buffers = 2, .vec_op = CORE_VEC_EXP};
  if (!strcmp(name, "stream1")) {
    s.gm = mem_gm_add(gm, "src", 300 * s.bytes, NULL);
    tk_stream_kernel(&k, &s, 1, 300);
  } else if (!strcmp(name, "stream24")) {
    s.gm = mem_gm_add(gm, "src", 24 * 50 * s.bytes, NULL);
    tk_stream_kernel(&k, &s, 24, 24 * 50);
  } else if (!strcmp(name, "cube")) {
    tk_cube_kernel(&k, &c, 24, 24 * 20);
  } else if (!strcmp(name, "pipe1") || !strcmp(name, "pipe48")) {
    int cores = name[4] == '1' ? 1 : 48;
    uint64_t n = (uint64_t)cores * 64;
    p.in = mem_gm_add(gm, "in", n * p.elems * 2, NULL);
    p.out = mem_gm_add(gm, "out", n * p.elems * 2, NULL);
    tk_pipeline_kernel(&k, &p, cores, n);
  } else if (!strcmp(name, "wave")) {
    s.bytes = 256 << 10;
    s.gm = mem_gm_add(gm, "src", 30 * s.bytes, NULL);
    tk_stream_kernel(&k, &s, 24, 30);
  } else {
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
  }
  struct core_result an, ev;
  struct npu_diag d;
  struct core_launch_opts oa = {.fidelity = CORE_FIDELITY_ANALYTIC}, oe = {.fidelity = CORE_FIDELITY_EVENT};
  if (core_launch(&sys.chip, gm, &k, &oa, &an, &d) || core_launch_standalone(&sys.chip, gm, &k, &oe, &ev, &d)) {
    npu_diag_print(stderr, &d);
    return 1;
  }
  printf("%.9g %.9g\n", ev.time_s - ev.launch_s, an.time_s - an.launch_s);
  mem_gm_destroy(gm);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc > 1) return one(argv[1]);
  printf("| program | event (us) | analytic (us) | analytic vs event |\n|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s", argv[0], cases[i].name);
    FILE *f = popen(cmd, "r");
    double ev = 0, an = 0;
    if (!f || fscanf(f, "%lf %lf", &ev, &an) != 2) {
      fprintf(stderr, "case %s failed\n", cases[i].name);
      return 1;
    }
    pclose(f);
    printf("| %s | %.3f | %.3f | %+.1f%% |\n", cases[i].what, ev * 1e6, an * 1e6, 100 * (an - ev) / ev);
  }
  return 0;
}
