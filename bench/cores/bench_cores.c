/*
 * bench_cores.c - speed of the chip model: simulated instructions per wall second at event
 * fidelity on a large matmul-shaped program (24 cube cores, double-buffered L1 and L0, the
 * instruction mix of a catlass GEMM), the same at analytic fidelity, and peak memory.
 * Prints figures; never fails on time. Usage: bench_cores [blocks_per_core]
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench/benchutil.h"
#include "common/cfg.h"
#include "cores/kernel.h"

struct prog {
  uint64_t a, b, c;
  int ksteps;  /* L1 k-steps per block */
  int dim;
};

static struct core_tile tile(uint8_t space, uint8_t layout, uint64_t addr, uint32_t rows, uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space, .layout = layout,
                            .dtype = NPU_DT_BF16};
}

static void begin(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int i = 0; i < 2; i++) {
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

static void end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int i = 0; i < 2; i++) {
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

/* C tile 128 x 256, K in steps of 256 through L1, 64 through L0 (catlass A2 defaults). */
static void block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct prog *p = ctx;
  uint64_t kbytes = (uint64_t)p->ksteps * 256 * 2;
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  for (int k = 0; k < p->ksteps; k++) {
    int s = k % 2;
    struct core_tile ga = tile(MEM_GM, CORE_ND, p->a + blk * 128 * kbytes + (uint64_t)k * 512, 128, 256);
    ga.ld = (uint32_t)(kbytes / 2);
    struct core_tile gb = tile(MEM_GM, CORE_ND, p->b + (uint64_t)k * 256 * 512, 256, 256);
    struct core_tile la = tile(MEM_L1, CORE_NZ, (uint64_t)s * 131072, 128, 256);
    struct core_tile lb = tile(MEM_L1, CORE_NZ, 262144 + (uint64_t)s * 131072, 256, 256);
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
    core_copy(t, &la, &ga);
    core_copy(t, &lb, &gb);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    for (int kk = 0; kk < 4; kk++) {
      int q = kk % 2;
      struct core_tile sa = tile(MEM_L1, CORE_NZ, (uint64_t)s * 131072 + (uint64_t)kk * 64 * 128 * 2, 128, 64);
      sa.ld = 128;
      struct core_tile sb = tile(MEM_L1, CORE_NZ, 262144 + (uint64_t)s * 131072 + (uint64_t)kk * 64 * 2 * 16, 64, 256);
      sb.ld = 256;
      struct core_tile l0a = tile(MEM_L0A, CORE_ZZ, (uint64_t)q * 32768, 128, 64);
      struct core_tile l0b = tile(MEM_L0B, CORE_ZN, (uint64_t)q * 32768, 64, 256);
      struct core_tile l0c = tile(MEM_L0C, CORE_NZ, 0, 128, 256);
      l0c.dtype = NPU_DT_FP32;
      l0c.c0 = 16;
      core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
      core_copy(t, &l0a, &sa);
      core_copy(t, &l0b, &sb);
      core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
      core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
      core_mmad(t, &l0c, &l0a, &l0b, 128, 64, 256, k == 0 && kk == 0);
      core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
    }
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
  }
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  struct core_tile l0c = tile(MEM_L0C, CORE_NZ, 0, 128, 256);
  l0c.dtype = NPU_DT_FP32;
  l0c.c0 = 16;
  struct core_tile gc = tile(MEM_GM, CORE_ND, p->c + blk * 128 * 256 * 2, 128, 256);
  core_copy(t, &gc, &l0c);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

static int run(const struct arch_chip *chip, enum core_fidelity f, uint64_t blocks, int ksteps,
               struct core_result *r, double *wall)
{
  struct prog p = {.ksteps = ksteps, .dim = 24};
  struct mem_gm *gm = mem_gm_create();
  p.a = mem_gm_add(gm, "a", blocks * 128 * (uint64_t)ksteps * 256 * 2, NULL);
  p.b = mem_gm_add(gm, "b", (uint64_t)ksteps * 256 * 256 * 2, NULL);
  p.c = mem_gm_add(gm, "c", blocks * 128 * 256 * 2, NULL);
  struct core_kernel k = {.name = "matmul-shaped", .mode = CORE_MODE_CUBE, .block_dim = 24, .nblocks = blocks,
                          .ctx = &p, .unit_begin = begin, .unit_end = end, .block = block};
  struct core_launch_opts o = {.fidelity = f};
  struct npu_diag d;
  npu_diag_clear(&d);
  double t0 = bench_now();
  int rc = core_launch_standalone(chip, gm, &k, &o, r, &d);
  *wall = bench_now() - t0;
  if (rc) npu_diag_print(stderr, &d);
  mem_gm_destroy(gm);
  return rc;
}

int main(int argc, char **argv)
{
  uint64_t per_core = argc > 1 ? strtoull(argv[1], NULL, 10) : 85;
  uint64_t blocks = 24 * per_core;
  int ksteps = 32;
  struct arch_system sys;
  struct npu_cfg *cfg = npu_cfg_create();
  arch_register(cfg, &sys);
  struct npu_diag d;
  if (npu_cfg_load_spec(cfg, "ascend-910b2", &d) || arch_finish(cfg, &sys, &d)) {
    npu_diag_print(stderr, &d);
    return 1;
  }
  struct core_result an, ev;
  double wall_an, wall_ev;
  if (run(&sys.chip, CORE_FIDELITY_ANALYTIC, blocks, ksteps, &an, &wall_an)) return 1;
  double rss_an = bench_peak_rss_bytes();
  if (run(&sys.chip, CORE_FIDELITY_EVENT, blocks, ksteps, &ev, &wall_ev)) return 1;
  printf("chip model speed: matmul-shaped program on ascend-910b2, 24 cube cores, %llu blocks x %d k-steps\n",
         (unsigned long long)blocks, ksteps);
  printf("  instructions simulated        %llu\n", (unsigned long long)ev.instructions);
  printf("  event fidelity: wall          %.3f s  (%.2f M instructions per second)\n", wall_ev,
         (double)ev.instructions / wall_ev / 1e6);
  printf("  event fidelity: simulated     %.6g s, %s, aic_mac_ratio %.3f\n", ev.time_s, ev.bottleneck, ev.aic_mac_ratio);
  printf("  analytic fidelity: wall       %.6f s, simulated %.6g s (%+.2f%% vs event)\n", wall_an, an.time_s,
         100 * (an.time_s - ev.time_s) / ev.time_s);
  printf("  peak RSS                      %.1f MiB (after analytic: %.1f MiB)\n", bench_peak_rss_bytes() / 1048576,
         rss_an / 1048576);
  return 0;
}
