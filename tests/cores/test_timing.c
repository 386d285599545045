/*
 * test_timing.c - the chip model against closed-form answers (event fidelity, SimGrid):
 * a GM stream reaches the per-core rate on one core and the HBM rate (not more) on all cores;
 * a cube stream reaches the peak MAC rate; a double-buffered copy-in/compute/copy-out takes
 * about the longest stage per tile, single-buffered the sum; a UB bank conflict doubles a
 * vector add, as the Ascend C guide documents. Each test is its own process (one engine each).
 */
#include <criterion/criterion.h>
#include <math.h>

#include "common/err.h"
#include "memory/gm.h"
#include "memory/platform.h"
#include "tests/cores/kernels.h"
#include "tests/support/chip.h"

static struct arch_system sys;
static const struct arch_chip *chip;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
  chip = &sys.chip;
}

TestSuite(timing, .init = setup, .timeout = 60);

static struct core_result run(const struct core_kernel *k, struct mem_gm *gm, enum core_fidelity f)
{
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = f};
  int rc = core_launch_standalone(chip, gm, k, &o, &res, &d);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  return res;
}

static void close_to(double got, double want, double rel, const char *what)
{
  cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.6g, want %.6g (+-%.2g%%)", what, got,
            want, rel * 100);
}

Test(timing, one_core_stream_reaches_the_port_rate)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_stream s = {.bytes = 65536};
  uint64_t n = 200;
  s.gm = mem_gm_add(gm, "src", n * s.bytes, NULL);
  struct core_kernel k;
  tk_stream_kernel(&k, &s, 1, n);
  struct core_result r = run(&k, gm, CORE_FIDELITY_EVENT);
  double port = chip->dma.gm_read_bytes_per_cycle * chip->clock_hz;
  double setup_s = chip->dma.setup_cycles / chip->clock_hz;
  /* closed form: n x (setup + bytes / port + the platform's 0.4 ns route latency), then the
   * last data lands one HBM latency later */
  double want = (double)n * (setup_s + (double)s.bytes / port + MEM_PLATFORM_ROUTE_LATENCY_S) +
                chip->hbm.latency_s;
  close_to(r.time_s - r.launch_s, want, 0.001, "stream time");
  close_to((double)r.gm_read_bytes, (double)(n * s.bytes), 0, "bytes");
  cr_assert_eq(r.l2_hit_bytes, 0, "every byte is read once: all from HBM");
  cr_assert_str_eq(r.bottleneck, "mte2_bound");
  mem_gm_destroy(gm);
}

Test(timing, all_cores_stream_share_hbm)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_stream s = {.bytes = 65536};
  uint64_t n = 24 * 100;
  s.gm = mem_gm_add(gm, "src", n * s.bytes, NULL);
  struct core_kernel k;
  tk_stream_kernel(&k, &s, 24, n);
  struct core_result r = run(&k, gm, CORE_FIDELITY_EVENT);
  double hbm = chip->hbm.bw_bytes_per_s * chip->calib.hbm.value;
  double body = r.time_s - r.launch_s;
  /* every core gets 1/24 of HBM; per block: setup, then the bytes at that share */
  double setup_s = chip->dma.setup_cycles / chip->clock_hz;
  double want = 100 * (setup_s + (double)s.bytes / (hbm / 24)) + chip->hbm.latency_s;
  close_to(body, want, 0.002, "24-core stream time");
  double achieved = (double)(n * s.bytes) / body;
  cr_assert(achieved <= hbm, "%.4g exceeds HBM", achieved);
  close_to(achieved, hbm, 0.015, "aggregate rate");
  double port = chip->dma.gm_read_bytes_per_cycle * chip->clock_hz;
  cr_assert(achieved < 24 * port / 3, "24 ports would give %.3g", 24 * port);
  cr_assert_eq(r.aic_used, 24);
  mem_gm_destroy(gm);
}

Test(timing, cube_stream_reaches_peak)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_cube c;
  struct core_kernel k;
  tk_cube_kernel(&k, &c, 24, 24 * 50);
  struct core_result r = run(&k, gm, CORE_FIDELITY_EVENT);
  double peak = 24.0 * chip->cube.macs_per_cycle[NPU_DT_FP16] * chip->clock_hz;
  close_to((double)r.cube_macs / (r.time_s - r.launch_s), peak * chip->calib.cube.value, 1e-9, "MAC rate");
  close_to(r.aic_mac_ratio, (r.time_s - r.launch_s) / r.time_s, 1e-9, "aic_mac_ratio");
  cr_assert_str_eq(r.bottleneck, "cube_bound");
  mem_gm_destroy(gm);
}

/* Stage times of one tile of the pipeline kernel, from the chip's rates. */
static void stage_times(uint32_t elems, double *t_in, double *t_v, double *t_out)
{
  double setup = chip->dma.setup_cycles / chip->clock_hz;
  double bytes = elems * 2.0;
  *t_in = setup + bytes / (chip->dma.gm_read_bytes_per_cycle * chip->clock_hz);
  *t_v = (elems / 128.0) * chip->vector.transcendental_cycles / chip->clock_hz;
  *t_out = setup + bytes / (chip->dma.path_bytes_per_cycle[ARCH_PATH_UB_TO_GM] * chip->clock_hz);
}

static double pipeline_time(int buffers, uint64_t n, uint32_t elems)
{
  /* stages only: memory latency is tested on its own below */
  static const char *const no_latency[] = {"chip.hbm.latency=0s", "chip.l2.latency=0s", NULL};
  ts_load_system(&sys, "ascend-910b2", no_latency);
  struct mem_gm *gm = mem_gm_create();
  struct tk_pipeline p = {.elems = elems, .buffers = buffers, .vec_op = CORE_VEC_EXP};
  p.in = mem_gm_add(gm, "in", n * elems * 2, NULL);
  p.out = mem_gm_add(gm, "out", n * elems * 2, NULL);
  struct core_kernel k;
  tk_pipeline_kernel(&k, &p, 1, n);
  struct core_result r = run(&k, gm, CORE_FIDELITY_EVENT);
  mem_gm_destroy(gm);
  return r.time_s - r.launch_s;
}

Test(timing, double_buffering_takes_the_longest_stage_per_tile)
{
  uint64_t n = 64;
  uint32_t elems = 16384;
  double a, b, c;
  stage_times(elems, &a, &b, &c);
  double longest = fmax(a, fmax(b, c));
  double t = pipeline_time(2, n, elems);
  /* n tiles at the slowest stage, plus filling and draining the other stages once */
  close_to(t, n * longest + (a + b + c - longest), 0.02, "double buffered");
  cr_assert(t < 0.7 * n * (a + b + c), "%g is not faster than the sum of stages", t);
}

Test(timing, single_buffering_takes_the_sum_of_stages)
{
  uint64_t n = 64;
  uint32_t elems = 16384;
  double a, b, c;
  stage_times(elems, &a, &b, &c);
  double t = pipeline_time(1, n, elems);
  close_to(t, n * (a + b + c), 0.03, "single buffered");
}

Test(timing, read_latency_is_exposed_when_nothing_overlaps_it)
{
  uint64_t n = 16;
  uint32_t elems = 16384;
  struct mem_gm *gm = mem_gm_create();
  struct tk_pipeline p = {.elems = elems, .buffers = 1, .vec_op = CORE_VEC_EXP};
  p.in = mem_gm_add(gm, "in", n * elems * 2, NULL);
  p.out = mem_gm_add(gm, "out", n * elems * 2, NULL);
  struct core_kernel k;
  tk_pipeline_kernel(&k, &p, 1, n);
  double a, b, c;
  stage_times(elems, &a, &b, &c);
  struct core_result r = run(&k, gm, CORE_FIDELITY_EVENT);
  close_to(r.time_s - r.launch_s, n * (a + chip->hbm.latency_s + b + c), 0.02, "single buffered with latency");
  mem_gm_destroy(gm);
}

static double bank_time(uint64_t src1)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_bank b = {.src1 = src1};
  struct core_kernel k;
  tk_bank_kernel(&k, &b);
  struct core_result r = run(&k, gm, CORE_FIDELITY_ANALYTIC);
  mem_gm_destroy(gm);
  return r.aiv[CORE_PIPE_V].busy_s;
}

Test(timing, ub_bank_conflict_doubles_a_vector_add)
{
  double fast = bank_time(256);      /* src1 in bank groups 8-15: no conflict */
  double slow = bank_time(65536);    /* src1 in groups 0-7 with src0: read/read conflicts */
  close_to(fast, 255 / chip->clock_hz, 1e-9, "conflict-free add: one cycle per repeat");
  close_to(slow / fast, 2.0, 1e-9, "conflicting add");
}

/* Hopper's vector unit is 512 B wide: a 256-byte repeat in half a cycle, conflict-free; an exp
 * takes chip.vector.transcendental_cycles per repeat (the special function units, 16 results a
 * cycle, do not widen with the lanes); a bank conflict costs a whole pass at the unit's width. */
Test(timing, a_vector_unit_wider_than_a_repeat_halves_elementwise_but_not_exp)
{
  struct arch_system h;
  ts_load_system(&h, "nvidia-h100-sxm", NULL);
  cr_assert_eq(h.chip.vector.bytes_per_cycle, 512.0);
  double cyc = 1 / h.chip.clock_hz;
  struct tk_bank add = {.src1 = 256, .dst = 131072 + 512}, exp = {.dst = 131072 + 512, .exp = true},
                 clash = {.src1 = 0, .dst = 131072 + 512};
  struct core_result r[3];
  struct tk_bank *b[3] = {&add, &exp, &clash};
  for (int i = 0; i < 3; i++) {
    struct mem_gm *gm = mem_gm_create();
    struct core_kernel k;
    tk_bank_kernel(&k, b[i]);
    struct npu_diag d;
    npu_diag_clear(&d);
    struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
    cr_assert_eq(core_launch_standalone(&h.chip, gm, &k, &o, &r[i], &d), 0);
    mem_gm_destroy(gm);
  }
  close_to(r[0].aiv[CORE_PIPE_V].busy_s, 255 * 0.5 * cyc, 1e-9, "conflict-free add: half a cycle per repeat");
  close_to(r[1].aiv[CORE_PIPE_V].busy_s, 255 * h.chip.vector.transcendental_cycles * cyc, 1e-9,
           "exp: transcendental_cycles per repeat");
  close_to(r[2].aiv[CORE_PIPE_V].busy_s, 255 * 1.0 * cyc, 1e-9, "src0 read twice in one group: two passes");
}
