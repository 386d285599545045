/*
 * test_mc2_moe.c - the MC2 operators of MoE expert parallelism on an 8-device Atlas 800T A2 server:
 * alltoallv_grouped_matmul (the dispatch all-to-all fused with the experts' grouped matmul) and
 * grouped_matmul_alltoallv (the grouped matmul fused with the combine all-to-all). Their numbers
 * against a double-precision reference on every device, and their times against closed forms of
 * the pipeline: expert by expert, the transfer of one expert's rows overlaps the matmul of
 * another, so a transfer longer than the matmul is exposed by its link time and a matmul longer
 * than the transfer hides all but one expert's share of it. One event-fidelity run per test.
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

TestSuite(mc2_moe, .init = setup, .timeout = 120);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define DISPATCH "alltoallv_grouped_matmul"
#define COMBINE "grouped_matmul_alltoallv"

static int run(const char *op, const char *const *kv, enum core_fidelity f, bool functional, struct op_result *r,
               char *msg)
{
  struct op_run_opts o = {.fidelity = f, .functional = functional, .seed = 7, .node = &server.node};
  return ts_op_with(&server.chip, op, kv, &o, r, msg);
}

static double event_s(const char *op, const char *const *kv)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(op, kv, CORE_FIDELITY_EVENT, false, &r, msg), 0, "%s", msg);
  return r.total.time_s;
}

static double analytic_s(const char *op, const char *const *kv)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(op, kv, CORE_FIDELITY_ANALYTIC, false, &r, msg), 0, "%s", msg);
  return r.total.time_s;
}

static double link_s(double bytes)
{
  return bytes / (server.node.link.bw_bytes_per_s * server.node.link_efficiency.value);
}

/* The analytic time, less the launch, of one device's grouped matmul: `experts` groups of equal
 * rows, `rows` in all. */
static double grouped_body_s(unsigned experts, unsigned rows, unsigned n, unsigned h)
{
  char g_[32], m_[32], n_[32], k_[32];
  snprintf(g_, sizeof g_, "groups=%u", experts);
  snprintf(m_, sizeof m_, "m=%u", rows);
  snprintf(n_, sizeof n_, "n=%u", n);
  snprintf(k_, sizeof k_, "k=%u", h);
  struct op_result r = ts_op(&server.chip, "grouped_gemm", CORE_FIDELITY_ANALYTIC, false, ARGS(g_, m_, n_, k_));
  return r.total.time_s - server.chip.launch_overhead_s;
}

/*
 * The ideal pipelines of 8 devices with equal rows per expert (skew 0), every device's experts
 * getting `tokens` rows: each link carries tokens / (8 experts) rows of one expert per step, all
 * links at once, and the grouped matmul runs at its whole rate, G / experts per expert.
 *   dispatch: expert x's matmul starts once its rows have crossed (x + 1 steps, a copy's and a
 *     notify's latency) and the matmul of the experts before it is done;
 *   combine: expert x's rows leave once its matmul is done (a notify's latency) and the rows of
 *     the experts before it have left.
 * And the serial forms: the whole all-to-all, then the whole matmul, or the other way round.
 */
static void bounds(bool combine, unsigned tokens, unsigned h, unsigned n, unsigned experts, double *ideal,
                   double *serial)
{
  double g = grouped_body_s(experts, tokens, n, h), per = g / experts, lat = server.node.link.latency_s;
  double step = link_s(2.0 * tokens / (8.0 * experts) * (combine ? n : h)), end = 0;
  for (unsigned x = 0; x < experts; x++)
    end = combine ? fmax(end, (x + 1) * per + lat) + step + lat : fmax(end, (x + 1) * step + 2 * lat) + per;
  *ideal = server.chip.launch_overhead_s + end;
  *serial = server.chip.launch_overhead_s + g + experts * step + 2 * lat;
}

static void within(double t, double lo, double hi, const char *what)
{
  cr_assert(t >= lo && t <= hi, "%s: %.4g us, not within [%.4g, %.4g] us", what, t * 1e6, lo * 1e6, hi * 1e6);
}

/* ------------------------------------------------------------------ numbers */

/* Skewed experts (device 0's get 912 rows, device 7's 72) and the shared expert: permute_out holds
 * exactly the rows sent, the outputs match the reference; the links carry every row that leaves
 * its device once. */
Test(mc2_moe, the_dispatch_matches_its_reference_on_every_device_of_the_server)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(DISPATCH, ARGS("tokens=256", "h=256", "n=192", "experts=2", "skew=1", "shared_rows=128"),
                   CORE_FIDELITY_EVENT, true, &r, msg),
               0, "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert(strstr(r.check_summary, "8 devices x 2 experts, 256 tokens each, 72 to 912 rows per device's experts, "
                                    "h 256, n 192, with the shared expert bf16"),
            "%s", r.check_summary);
  cr_assert_eq(r.total.ranks, 8);
  /* device d's experts get rows_d from each of 8 devices, 7 of them remote: 7/8 of all rows */
  cr_assert_eq(r.total.link_bytes, 7ull * 256 * 256 * 2);
}

/* Four devices, fp16, steep skew: device 3's last three experts get no rows (no blocks, and no
 * wait: the vector cores skip them); the outputs land back where each device's rows were. */
Test(mc2_moe, the_combine_matches_its_reference_with_experts_that_get_no_rows)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(COMBINE, ARGS("tokens=100", "h=128", "n=96", "experts=4", "skew=1.5", "ranks=4", "dtype=fp16",
                                 "shared_rows=64", "shared_n=80"),
                   CORE_FIDELITY_EVENT, true, &r, msg),
               0, "%s", msg);
  cr_assert(r.checked && r.passed, "%s", r.check_summary);
  cr_assert(strstr(r.check_summary, "4 devices x 4 experts, 100 tokens each, 4 to "), "%s", r.check_summary);
  /* 3/4 of all rows cross a link (every device's own share of all experts is one device's share),
   * a 192-byte row's copies rounded up to whole bursts */
  double exact = 3.0 * 100 * 96 * 2;
  cr_assert(r.total.link_bytes >= exact && r.total.link_bytes <= 1.05 * exact, "%llu link bytes, %g rows' worth",
            (unsigned long long)r.total.link_bytes, exact);
}

/* ------------------------------------------------------------------ times */

/* One device's 2048 tokens x h sent to 4 experts per device and multiplied by [h, n]: the event
 * time, checked to lie within [0.98, over] x the ideal pipeline; *serial the serial form. */
static double pipeline(bool combine, unsigned h, unsigned n, double over, double *serial)
{
  double ideal;
  bounds(combine, 2048, h, n, 4, &ideal, serial);
  char h_[32], n_[32];
  snprintf(h_, sizeof h_, "h=%u", h);
  snprintf(n_, sizeof n_, "n=%u", n);
  double t = event_s(combine ? COMBINE : DISPATCH, ARGS("tokens=2048", h_, n_));
  within(t, 0.98 * ideal, over * ideal, combine ? "combine" : "dispatch");
  /* the analytic fidelity is this closed form */
  double a = analytic_s(combine ? COMBINE : DISPATCH, ARGS("tokens=2048", h_, n_));
  cr_assert(fabs(a - ideal) <= 1e-9 * ideal, "analytic %.6g us, closed form %.6g us", a * 1e6, ideal * 1e6);
  return t;
}

/* n = 128: the matmul is a few microseconds, the rows 1 MiB per link: the time is the launch, the
 * link time and the matmul of the last expert, within 10% of the ideal pipeline (measured +8%). */
Test(mc2_moe, a_dispatch_longer_than_the_matmul_is_exposed_by_its_link_time)
{
  double serial;
  pipeline(false, 2048, 128, 1.10, &serial);
}

/* n = 4096: the matmul (about 70 us) outlasts the rows' transfer (29 us): only the first expert's
 * rows are waited for; within 5% of the ideal pipeline, and faster than all-to-all-then-matmul. */
Test(mc2_moe, a_matmul_longer_than_the_dispatch_hides_all_but_its_first_expert)
{
  double serial, t = pipeline(false, 1024, 4096, 1.05, &serial);
  cr_assert(t < serial - 15e-6, "%.4g us, not faster than all-to-all-then-matmul (%.4g us)", t * 1e6, serial * 1e6);
}

/* The combine's rows leave expert by expert as the matmul finishes each: a combine longer than the
 * matmul is exposed by its link time after the first expert's matmul, within 5%. */
Test(mc2_moe, a_combine_longer_than_the_matmul_is_exposed_by_its_link_time)
{
  double serial, t = pipeline(true, 1024, 4096, 1.05, &serial);
  cr_assert(t < serial - 40e-6, "%.4g us, not faster than matmul-then-all-to-all (%.4g us)", t * 1e6, serial * 1e6);
}

/* h = 4096, n = 1024: the matmul (about 62 us) hides the combine of all but the last expert. */
Test(mc2_moe, a_matmul_longer_than_the_combine_hides_all_but_its_last_expert)
{
  double serial;
  pipeline(true, 4096, 1024, 1.05, &serial);
}

/* The shared expert's matmul runs first, on the rows each device already has, while the routed
 * rows cross the links: a dispatch as long as the shared matmul adds little to the two matmuls. */
Test(mc2_moe, the_shared_expert_runs_while_the_rows_travel)
{
  double g = grouped_body_s(4, 2048, 128, 2048);
  struct op_result r = ts_op(&server.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("m=2048", "n=2048", "k=2048", "dtype=bf16"));
  double shared = r.total.time_s - server.chip.launch_overhead_s;
  double xfer = link_s(2048.0 / 8 * 2048 * 2) + 2 * server.node.link.latency_s;
  cr_assert(shared > xfer && shared < 1.5 * xfer, "shared %.4g us, transfer %.4g us: not of the same order",
            shared * 1e6, xfer * 1e6);
  double t = event_s(DISPATCH, ARGS("tokens=2048", "h=2048", "n=128", "shared_rows=2048", "shared_n=2048"));
  /* the cube cores run both matmuls back to back, without the ramps of two launches: not slower
   * than the two apart, not faster than the shared one and the last expert's share of the other */
  double both = server.chip.launch_overhead_s + shared + g;
  within(t, server.chip.launch_overhead_s + shared + g / 4, both, "dispatch with the shared expert");
  /* the closed form: the shared matmul outlasts the transfer, then the experts' */
  double a = analytic_s(DISPATCH, ARGS("tokens=2048", "h=2048", "n=128", "shared_rows=2048", "shared_n=2048"));
  cr_assert(fabs(a - both) <= 1e-9 * both, "analytic %.6g us, %.6g us", a * 1e6, both * 1e6);
  cr_assert(t < server.chip.launch_overhead_s + xfer + shared + g - 40e-6, "%.4g us: the transfer is not hidden",
            t * 1e6);
}

/* Skewed experts: the devices of the hot experts get the most rows, and the launch ends with the
 * busiest device's matmul: not faster than it, and far slower than the pipeline of even experts. */
Test(mc2_moe, the_device_with_the_hottest_experts_sets_the_time)
{
  double ideal, serial;
  bounds(false, 2048, 1024, 4096, 4, &ideal, &serial);
  double t = event_s(DISPATCH, ARGS("tokens=2048", "h=1024", "n=4096", "skew=1"));
  /* skew 1 over 32 experts: device 0's four get (1 + 1/2 + 1/3 + 1/4) / H(32) = 51.3% of every
   * device's rows: 8 x 1051 rows */
  double hot = server.chip.launch_overhead_s + grouped_body_s(4, 8 * 1051, 4096, 1024);
  cr_assert(t >= 0.98 * hot, "%.4g us, faster than the hottest device's matmul alone (%.4g us)", t * 1e6, hot * 1e6);
  cr_assert(t > 3 * ideal, "%.4g us, against %.4g us for the ideal pipeline of even experts", t * 1e6, ideal * 1e6);
  /* the closed form, each device's experts taken as equal groups: within 10% (measured +4%) */
  double a = analytic_s(DISPATCH, ARGS("tokens=2048", "h=1024", "n=4096", "skew=1"));
  within(a, 0.9 * t, 1.1 * t, "analytic");
}

/* ------------------------------------------------------------------ refusals */

Test(mc2_moe, bad_shapes_are_refused_with_a_message)
{
  struct op_result r;
  char msg[2048];
  cr_assert_eq(run(DISPATCH, ARGS("tokens=256", "h=128", "n=128", "experts=33"), CORE_FIDELITY_EVENT, false, &r, msg),
               NPU_EINVAL);
  cr_assert(strstr(msg, "--experts: at most 32 experts per device and 256 in all"), "%s", msg);
  cr_assert_eq(run(COMBINE, ARGS("tokens=256", "h=128", "n=128", "experts=20", "ranks=16"), CORE_FIDELITY_EVENT, false,
                   &r, msg),
               NPU_EINVAL);
  cr_assert(strstr(msg, "256 in all"), "%s", msg);
  cr_assert_eq(run(DISPATCH, ARGS("tokens=16", "h=128", "n=128", "skew=4"), CORE_FIDELITY_EVENT, false, &r, msg),
               NPU_EINVAL);
  cr_assert(strstr(msg, "--tokens: device 1's experts get 0 rows"), "%s", msg);
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true, .seed = 7, .node = &server.node};
  cr_assert_eq(ts_op_with(&server.chip, COMBINE, ARGS("tokens=256", "h=128", "n=128"), &o, &r, msg), NPU_EUNSUPPORTED);
  cr_assert(strstr(msg, "--functional, --trace and --msprof need --fidelity event"), "%s", msg);
}
