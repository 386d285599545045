/*
 * test_mc2.c - the MC2 operators on an 8-device Atlas 800T A2 server. all_gather_matmul
 * (AllGatherMatmul): its
 * numbers against a double-precision reference on every device, and its time against closed forms
 * of the overlap: a gather longer than the GEMM is exposed by the link time, a GEMM longer than the
 * gather hides it, and between them the time lies between the ideal pipeline and "gather, then
 * multiply". One event-fidelity run per test (one engine per process).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "tests/ops/opsupport.h"

static struct arch_system server;

static void setup(void)
{
  ts_load_system(&server, "atlas-800t-a2", NULL);
}

TestSuite(mc2, .init = setup, .timeout = 120);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int run_op(const char *op, const char *const *kv, enum core_fidelity f, bool functional,
                  const struct arch_node *node, struct op_result *r, char *msg)
{
  struct op_run_opts o = {.fidelity = f, .functional = functional, .seed = 7, .node = node};
  return ts_op_with(&server.chip, op, kv, &o, r, msg);
}

static int run(const char *const *kv, enum core_fidelity f, bool functional, const struct arch_node *node,
               struct op_result *r, char *msg)
{
  return run_op("all_gather_matmul", kv, f, functional, node, r, msg);
}

static double event_s(const char *op, const char *const *kv)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run_op(op, kv, CORE_FIDELITY_EVENT, false, &server.node, &r, msg), 0, "%s", msg);
  return r.total.time_s;
}

/* The analytic fidelity (the operator's closed form) gives the ideal pipeline the test computes. */
static void analytic_is(const char *op, const char *const *kv, double ideal)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run_op(op, kv, CORE_FIDELITY_ANALYTIC, false, &server.node, &r, msg), 0, "%s", msg);
  cr_assert(fabs(r.total.time_s - ideal) <= 1e-9 * ideal, "analytic %.6g us, closed form %.6g us", r.total.time_s * 1e6,
            ideal * 1e6);
}

static void within(double t, double lo, double hi)
{
  cr_assert(t >= lo && t <= hi, "%.4g us, not within [%.4g, %.4g] us", t * 1e6, lo * 1e6, hi * 1e6);
}

/* The event time of op with arguments kv, checked within [0.98, 1.05] x the ideal pipeline the
 * test states, which the analytic fidelity must compute (analytic_is). */
static double timed(const char *op, const char *const *kv, double ideal)
{
  double t = event_s(op, kv);
  analytic_is(op, kv, ideal);
  within(t, 0.98 * ideal, 1.05 * ideal);
  return t;
}

static double link_s(double bytes)
{
  return bytes / (server.node.link.bw_bytes_per_s * server.node.link_efficiency.value);
}

/* The analytic time of the whole GEMM one device runs (ranks x m rows), less the launch. */
static double gemm_body_s(unsigned rows, unsigned n, unsigned k, unsigned tile_n)
{
  char m_[32], n_[32], k_[32], t_[32];
  snprintf(m_, sizeof m_, "m=%u", rows);
  snprintf(n_, sizeof n_, "n=%u", n);
  snprintf(k_, sizeof k_, "k=%u", k);
  snprintf(t_, sizeof t_, "tile_n=%u", tile_n);
  struct op_result r = ts_op(&server.chip, "gemm", CORE_FIDELITY_ANALYTIC, false, ARGS(m_, n_, k_, "dtype=bf16", t_));
  return r.total.time_s - server.chip.launch_overhead_s;
}

/* The ideal pipeline (the GEMM tiled tile_n wide as the kernel's turns are, 0: the default): the
 * device's own rows, then each turn's rows of the 7 peers once the turn has
 * crossed the links (every link carries one slice of m / turns rows per turn, all links at once),
 * the GEMM at the rate of the whole GEMM. And "gather, then multiply": the whole gather, then the
 * whole GEMM. */
static void bounds(unsigned m, unsigned k, unsigned n, unsigned turns, unsigned tile_n, double *ideal,
                   double *serial)
{
  double g = gemm_body_s(8 * m, n, k, tile_n), slice = g / (8.0 * turns), lat = server.node.link.latency_s;
  double turn_s = link_s(2.0 * m / turns * k), end = turns * slice;
  for (unsigned t = 0; t < turns; t++) {
    double start = fmax(end, (t + 1) * turn_s + 2 * lat);
    end = start + 7 * slice;
  }
  *ideal = server.chip.launch_overhead_s + end;
  *serial = server.chip.launch_overhead_s + link_s(2.0 * m * k) + 2 * lat + g;
}

Test(mc2, all_gather_matmul_matches_its_reference_on_every_device_of_the_server)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(ARGS("m=128", "k=256", "n=160", "turns=2"), CORE_FIDELITY_EVENT, true, &server.node, &r, msg), 0,
               "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert(strstr(r.check_summary, "8 devices, 1024x160x256 bf16 in 2 turns"), "%s", r.check_summary);
  cr_assert_eq(r.total.ranks, 8);
  /* every device sends its 128 x 256 rows to 7 peers */
  cr_assert_eq(r.total.link_bytes, 8ull * 7 * 128 * 256 * 2);
}

/* N = 128: the GEMM is a few microseconds, the gather 1 MiB per link: the time is the launch, the
 * link time and the last rows' GEMM, within 5% of the ideal pipeline (measured +1.5%). */
Test(mc2, a_gather_longer_than_the_gemm_is_exposed_by_its_link_time)
{
  double ideal, serial;
  bounds(256, 2048, 128, 1, 0, &ideal, &serial);
  double t = timed("all_gather_matmul", ARGS("m=256", "k=2048", "n=128", "turns=1"), ideal);
  cr_assert(t >= server.chip.launch_overhead_s + link_s(2.0 * 256 * 2048), "faster than its links");
}

/* N = 4096: the GEMM (70 us) outlasts the gather (29 us): only the device's own rows run before the
 * others arrive; within 5% of the ideal pipeline (measured +3.1%). */
Test(mc2, a_gemm_longer_than_the_gather_hides_it)
{
  double ideal, serial;
  bounds(256, 1024, 4096, 1, 0, &ideal, &serial);
  double t = timed("all_gather_matmul", ARGS("m=256", "k=1024", "n=4096", "turns=1"), ideal);
  cr_assert(t < serial, "%.4g us, not faster than gather-then-multiply (%.4g us)", t * 1e6, serial * 1e6);
}

/* Four turns, GEMM and gather of the same order: within 5% of the ideal pipeline (measured +3.6%),
 * faster than gather-then-multiply. */
Test(mc2, turns_overlap_the_gather_with_the_gemm)
{
  double ideal, serial;
  /* the kernel tiles each turn's GEMM as the 8 devices' slices of it together, 8 x 128 rows: 240
   * columns wide (the first width from 256 down whose blocks fill 90% of their waves of 24 cores) */
  bounds(512, 1024, 2048, 4, 240, &ideal, &serial);
  double t = timed("all_gather_matmul", ARGS("m=512", "k=1024", "n=2048", "turns=4"), ideal);
  cr_assert(t < serial, "%.4g us, not faster than gather-then-multiply (%.4g us)", t * 1e6, serial * 1e6);
}

Test(mc2, all_gather_matmul_needs_a_full_mesh_server_and_the_event_fidelity_for_data)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(ARGS("m=128", "k=256", "n=128"), CORE_FIDELITY_EVENT, false, NULL, &r, msg), NPU_EINVAL);
  cr_assert(strstr(msg, "--arch: all_gather_matmul runs on 8 devices: give a server"), "%s", msg);
  cr_assert_eq(run(ARGS("m=128", "k=256", "n=128"), CORE_FIDELITY_ANALYTIC, true, &server.node, &r, msg),
               NPU_EUNSUPPORTED);
  cr_assert(strstr(msg, "--functional, --trace and --msprof need --fidelity event"), "%s", msg);
  cr_assert_eq(run(ARGS("m=128", "k=256", "n=128", "ranks=16"), CORE_FIDELITY_EVENT, false, &server.node, &r, msg),
               NPU_EINVAL);
  cr_assert(strstr(msg, "16 ranks, but a atlas-800t-a2 server has 8 devices"), "%s", msg);
  cr_assert_eq(run(ARGS("m=100", "k=256", "n=128", "turns=3"), CORE_FIDELITY_EVENT, false, &server.node, &r, msg),
               NPU_EINVAL);
  cr_assert(strstr(msg, "3 turns do not divide m = 100 rows"), "%s", msg);
}

/* ------------------------------------------------------------------ matmul_reduce_scatter */

/* The ideal pipeline of the reduce-scatter (ways 1): turn t's products are complete when every
 * device has run t + 1 turns of the GEMM (at the whole GEMM's rate); the owner then reads them from
 * the 7 peers at the link's rate, after the previous turn's reads. "Multiply, then reduce-scatter":
 * the whole GEMM, then all the reads. The all-reduce (ways 2): each link carries a device's
 * products for the owner and the owner's sums for the device in the same direction, twice the
 * reduce-scatter's bytes. */
static void ar_bounds(unsigned ways, unsigned m, unsigned k, unsigned n, unsigned turns, unsigned tile_n,
                      double *ideal, double *serial)
{
  double g = gemm_body_s(8 * m, n, k, tile_n), lat = server.node.link.latency_s, turn_s = ways * link_s(2.0 * m / turns * n);
  double end = 0;
  for (unsigned t = 0; t < turns; t++) end = fmax(end, (t + 1) * g / turns + lat) + turn_s + lat;
  *ideal = server.chip.launch_overhead_s + end;
  *serial = server.chip.launch_overhead_s + g + turns * turn_s + 2 * lat;
}

static void rs_bounds(unsigned m, unsigned k, unsigned n, unsigned turns, unsigned tile_n, double *ideal,
                      double *serial)
{
  ar_bounds(1, m, k, n, turns, tile_n, ideal, serial);
}

Test(mc2, matmul_reduce_scatter_matches_its_reference_on_every_device_of_the_server)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run_op("matmul_reduce_scatter", ARGS("m=64", "k=256", "n=160"), CORE_FIDELITY_EVENT, true,
                      &server.node, &r, msg),
               0, "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert(strstr(r.check_summary, "8 devices, 512x160x256 bf16 in 1 turns"), "%s", r.check_summary);
  /* every device reads its 64 x 160 rows of the 7 peers' products */
  cr_assert_eq(r.total.link_bytes, 8ull * 7 * 64 * 160 * 2);
}

/* Four devices, four turns, x2 stored [n, k], fp16: checked against the reference. */
static void four_devices_in_turns(const char *op)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run_op(op, ARGS("m=128", "k=192", "n=96", "ranks=4", "turns=4", "trans_b=true", "dtype=fp16"),
                      CORE_FIDELITY_EVENT, true, &server.node, &r, msg),
               0, "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert(strstr(r.check_summary, "4 devices, 512x96x192 fp16 in 4 turns"), "%s", r.check_summary);
}

Test(mc2, matmul_reduce_scatter_in_turns_with_trans_b_and_fp16_on_four_devices)
{
  four_devices_in_turns("matmul_reduce_scatter");
}

/* K = 256, N = 4096: the products are 2 MiB per link and the GEMM a few microseconds: the time is
 * the launch, the GEMM and the reads of the peers' products at the link's rate, within 5%
 * (measured -1.2%: the GEMM runs a little faster than its analytic time). */
Test(mc2, a_reduce_scatter_longer_than_the_gemm_is_exposed_by_its_link_time)
{
  double ideal, serial;
  rs_bounds(256, 256, 4096, 1, 0, &ideal, &serial);
  timed("matmul_reduce_scatter", ARGS("m=256", "k=256", "n=4096", "turns=1"), ideal);
}

/* K = 8192: the GEMM (about 130 us) dwarfs the reads (29 us): within 5% of the closed form
 * (measured +0.7%). */
Test(mc2, a_gemm_longer_than_the_reduce_scatter_sets_its_time)
{
  double ideal, serial;
  rs_bounds(256, 8192, 1024, 1, 0, &ideal, &serial);
  timed("matmul_reduce_scatter", ARGS("m=256", "k=8192", "n=1024", "turns=1"), ideal);
}

/* Two turns: the reads of the first overlap the GEMM of the second: faster than multiply-then-
 * reduce-scatter, within 5% of the ideal pipeline (measured +2%). */
Test(mc2, turns_overlap_the_reduce_scatter_with_the_gemm)
{
  double ideal, serial;
  /* each turn's GEMM tiled as 8 x 256 rows: 176 columns wide (as above) */
  rs_bounds(512, 2048, 1024, 2, 176, &ideal, &serial);
  double t = timed("matmul_reduce_scatter", ARGS("m=512", "k=2048", "n=1024", "turns=2"), ideal);
  cr_assert(t < serial, "%.4g us, not faster than multiply-then-reduce-scatter (%.4g us)", t * 1e6, serial * 1e6);
}

/* ------------------------------------------------------------------ matmul_all_reduce */

/* The reduce-scatter's sums put into every device's output: every device holds every owner's rows,
 * each checked against the reference; the links carry the products and then the sums. */
Test(mc2, matmul_all_reduce_leaves_every_sum_on_every_device)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run_op("matmul_all_reduce", ARGS("m=64", "k=256", "n=160"), CORE_FIDELITY_EVENT, true, &server.node,
                      &r, msg),
               0, "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert_eq(r.total.link_bytes, 2 * 8ull * 7 * 64 * 160 * 2);
}

Test(mc2, matmul_all_reduce_in_turns_with_trans_b_and_fp16_on_four_devices)
{
  four_devices_in_turns("matmul_all_reduce");
}

/* N = 1024, K = 4096, one turn: the reduce-scatter's reads and the sums' writes (twice the bytes
 * per link) after the GEMM, within 5% of the closed form (measured +4.2%). */
Test(mc2, an_all_reduce_carries_twice_the_reduce_scatters_bytes_per_link)
{
  double ideal, serial;
  ar_bounds(2, 256, 4096, 1024, 1, 0, &ideal, &serial);
  timed("matmul_all_reduce", ARGS("m=256", "k=4096", "n=1024", "turns=1"), ideal);
}
