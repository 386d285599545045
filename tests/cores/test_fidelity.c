/*
 * test_fidelity.c - the analytic fidelity against the event fidelity on the same programs:
 * (times without the launch overhead, which both add alike)
 * within 5% where the program is regular (streams, cube, double-buffered pipelines, all cores
 * busy the whole time), and where they part: a partial last wave, whose few cores get more of
 * HBM in the event model than the analytic model's static share gives them.
 * docs/CHIP_MODEL.md has the table.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "tests/cores/kernels.h"
#include "tests/support/chip.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
}

TestSuite(fidelity, .init = setup, .timeout = 120);

static double both(const struct core_kernel *k, struct mem_gm *gm, double *analytic)
{
  struct core_result ev, an;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts oa = {.fidelity = CORE_FIDELITY_ANALYTIC};
  cr_assert_eq(core_launch(&sys.chip, gm, k, &oa, &an, &d), 0, "%s", d.msg);
  struct core_launch_opts oe = {.fidelity = CORE_FIDELITY_EVENT};
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, k, &oe, &ev, &d), 0, "%s", d.msg);
  *analytic = an.time_s - an.launch_s;
  cr_assert_eq(an.cube_macs, ev.cube_macs);
  cr_assert_eq(an.gm_read_bytes, ev.gm_read_bytes);
  cr_assert_eq(an.instructions, ev.instructions);
  return ev.time_s - ev.launch_s;
}

static void agree(double ev, double an, double rel, const char *what)
{
  cr_assert(fabs(an - ev) <= rel * ev, "%s: event %.6g s, analytic %.6g s (%.2f%%)", what, ev, an,
            100 * (an - ev) / ev);
}

Test(fidelity, one_core_stream)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_stream s = {.bytes = 65536};
  s.gm = mem_gm_add(gm, "src", 300 * s.bytes, NULL);
  struct core_kernel k;
  tk_stream_kernel(&k, &s, 1, 300);
  double an, ev = both(&k, gm, &an);
  agree(ev, an, 0.05, "one-core stream");
  mem_gm_destroy(gm);
}

Test(fidelity, all_core_stream)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_stream s = {.bytes = 65536};
  s.gm = mem_gm_add(gm, "src", 24 * 50 * s.bytes, NULL);
  struct core_kernel k;
  tk_stream_kernel(&k, &s, 24, 24 * 50);
  double an, ev = both(&k, gm, &an);
  agree(ev, an, 0.05, "24-core stream");
  mem_gm_destroy(gm);
}

Test(fidelity, cube_stream)
{
  struct mem_gm *gm = mem_gm_create();
  struct tk_cube c;
  struct core_kernel k;
  tk_cube_kernel(&k, &c, 24, 24 * 20);
  double an, ev = both(&k, gm, &an);
  agree(ev, an, 0.05, "cube stream");
  mem_gm_destroy(gm);
}

static double pipeline(int cores, uint64_t per_core, double *analytic)
{
  struct mem_gm *gm = mem_gm_create();
  uint32_t elems = 16384;
  uint64_t n = (uint64_t)cores * per_core;
  struct tk_pipeline p = {.elems = elems, .buffers = 2, .vec_op = CORE_VEC_EXP};
  p.in = mem_gm_add(gm, "in", n * elems * 2, NULL);
  p.out = mem_gm_add(gm, "out", n * elems * 2, NULL);
  struct core_kernel k;
  tk_pipeline_kernel(&k, &p, cores, n);
  double ev = both(&k, gm, analytic);
  mem_gm_destroy(gm);
  return ev;
}

Test(fidelity, double_buffered_pipeline_on_all_vector_cores)
{
  double an, ev = pipeline(48, 64, &an);
  agree(ev, an, 0.05, "48-core pipeline");
}

Test(fidelity, double_buffered_pipeline_with_exposed_latency)
{
  /* one core: two buffers cannot hide 500 ns of HBM latency; both models see it */
  double an, ev = pipeline(1, 64, &an);
  agree(ev, an, 0.05, "1-core pipeline");
}

Test(fidelity, a_partial_last_wave_is_where_they_differ)
{
  /* 30 equal blocks on 24 cores: the last wave has 6 cores, which the event model lets share
   * all of HBM; the analytic model keeps the first wave's share of 1/24. */
  struct mem_gm *gm = mem_gm_create();
  struct tk_stream s = {.bytes = 256 << 10};
  s.gm = mem_gm_add(gm, "src", 30 * s.bytes, NULL);
  struct core_kernel k;
  tk_stream_kernel(&k, &s, 24, 30);
  double an, ev = both(&k, gm, &an);
  /* the analytic model keeps the first wave's share: never faster than the event model here (a
   * bound in the direction of its simplification; it still holds if the model improves) */
  cr_assert(an >= 0.95 * ev, "the analytic model is optimistic on a partial wave: event %g, analytic %g", ev, an);
  printf("partial wave: event %.4g us, analytic %.4g us\n", ev * 1e6, an * 1e6);
  mem_gm_destroy(gm);
}
