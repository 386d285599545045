/*
 * test_features.c - AllToAllV with uneven sizes, payloads looped through the communicator
 * buffer, HCCL-like selection for the cases hccl.md describes, and the library's refusals.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "interconnect/select.h"
#include "tests/support/chip.h"
#include "tests/interconnect/helpers.h"
#include "tests/support/support.h"

#define MIB (1024.0 * 1024)

static const double O = 1.5e-6, BN = 25e9, LN = 1.5e-6, BM = 56e9, LM = 0.5e-6;

TestSuite(features, .timeout = 30);

static const char *const exact8[] = {"node.link.efficiency=1", "cluster.scaleout.efficiency=1",
                                     "cluster.nodes=8", "cluster.scaleout.switch_radix=128", NULL};

Test(features, alltoallv_pairwise_uneven_sizes)
{
  /* 4 ranks on 4 servers; sizes depend on the distance k = j - i: every rank's round k moves
   * the same bytes, so the time is (p-1) alpha + beta sum_k max_i n(i, i+k) exactly */
  struct th h;
  th_init(&h, "atlas-800t-a2", exact8, 64);
  h.prm.buffer_bytes = 0;
  struct ic_comm c;
  th_comm(&h, &c, 0, 4, 8);
  double m[16] = {0}, per_k[4] = {0, 8 * MIB, 1 * MIB, 32 * MIB};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) m[i * 4 + j] = per_k[(j - i + 4) % 4];
  struct ic_coll coll = th_coll(IC_OP_ALLTOALLV, IC_ALGO_PAIRWISE, IC_FIDELITY_STEP, 41 * MIB);
  coll.matrix = m;
  double t = th_run(&h, &c, coll, NULL);
  th_close(t, 3 * (O + LN) + (8 + 1 + 32) * MIB / BN, 0.01, "alltoallv by distance");
  ic_comm_release(&c);
  th_fini(&h);
}

Test(features, alltoallv_irregular_matrix)
{
  /* an irregular matrix: between each rank's own sum of rounds and the sum of round maxima */
  struct th h;
  th_init(&h, "atlas-800t-a2", exact8, 64);
  h.prm.buffer_bytes = 0;
  struct ic_comm c;
  th_comm(&h, &c, 0, 5, 8);
  double m[25];
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) m[i * 5 + j] = i == j ? 0 : MIB * (1 + (7 * i + 3 * j) % 11);
  struct ic_coll coll = th_coll(IC_OP_ALLTOALLV, IC_ALGO_PAIRWISE, IC_FIDELITY_STEP, 20 * MIB);
  coll.matrix = m;
  double t = th_run(&h, &c, coll, NULL);
  double upper = 0, lower = 0;
  for (int k = 1; k < 5; k++) {
    double mx = 0;
    for (int i = 0; i < 5; i++) mx = fmax(mx, m[i * 5 + (i + k) % 5]);
    upper += O + LN + mx / BN;
  }
  for (int i = 0; i < 5; i++) {
    double own = 0;
    for (int k = 1; k < 5; k++) own += O + LN + m[i * 5 + (i + k) % 5] / BN;
    lower = fmax(lower, own);
  }
  cr_assert(t >= lower * (1 - 1e-9) && t <= upper * (1 + 1e-9), "%g not in [%g, %g]", t, lower, upper);
  /* mesh in one server: every pair at once, the largest pair bounds it */
  struct ic_comm s;
  th_comm(&h, &s, 0, 5, 1);
  coll.algo = IC_ALGO_MESH;
  double mx = 0;
  for (int i = 0; i < 25; i++) mx = fmax(mx, m[i]);
  th_close(th_run(&h, &s, coll, NULL), O + LM + mx / BM, 1e-6, "alltoallv mesh");
  ic_comm_release(&c);
  ic_comm_release(&s);
  th_fini(&h);
}

Test(features, payloads_beyond_the_buffer_loop)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", exact8, 64);
  h.prm.buffer_bytes = 1e6;
  struct ic_comm c;
  th_comm(&h, &c, 0, 8, 1);
  struct ic_result r;
  double t = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, 2.5e6), &r);
  cr_assert_eq(r.plan.loops, 3);
  cr_assert_eq(r.plan.loop_bytes, 1e6);
  cr_assert_eq(r.plan.last_bytes, 0.5e6);
  double t1 = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, 1e6), NULL);
  double th = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, 0.5e6), NULL);
  th_close(t, 2 * t1 + th, 1e-6, "three loops: two full buffers and a half");
  double tb = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_BULK, 2.5e6), &r);
  cr_assert_eq(r.plan.loops, 3);
  th_close(tb, t, 1e-6, "bulk folds the loops");
  ic_comm_release(&c);
  th_fini(&h);
}

/* Plan op on ranks first..first+n-1 (stride 1) of preset and return the algorithm's name. */
static const char *plan_name(const char *preset, const char *const *sets, int nranks, int n,
                             enum ic_op op, double bytes)
{
  static char name[64];
  struct arch_system sys;
  ts_load_system(&sys, preset, sets);
  struct ic_topo *t;
  struct npu_diag d;
  cr_assert_eq(ic_topo_create(&t, &sys, nranks, &d), 0, "%s", d.msg);
  struct ic_comm c;
  cr_assert_eq(ic_comm_init_range(&c, 0, n, 1, t, "comm", &d), 0);
  struct ic_params p;
  ic_params_default(&p, &sys);
  struct ic_plan plan;
  struct ic_coll coll = th_coll(op, IC_ALGO_AUTO, IC_FIDELITY_STEP, bytes);
  cr_assert_eq(ic_plan_make(&plan, t, &c, &coll, &p, &d), 0, "%s", d.msg);
  snprintf(name, sizeof name, "%s", plan.name);
  ic_comm_release(&c);
  ic_topo_destroy(t);
  return name;
}

Test(features, selection_follows_hccl)
{
  static const char *const four[] = {"cluster.nodes=4", NULL};
  static const char *const big[] = {"cluster.nodes=512", "cluster.scaleout.tiers=3", NULL};
  static const char *const three[] = {"cluster.nodes=3", NULL};
  /* one server: mesh; one-shot for small AllReduces (up to 256 KiB where it costs less than
   * two-shot: at 16 KiB, not at 256 KiB) */
  cr_assert_str_eq(plan_name("atlas-800t-a2", NULL, 8, 8, IC_OP_ALLREDUCE, 1 << 30), "mesh");
  cr_assert_str_eq(plan_name("atlas-800t-a2", NULL, 8, 8, IC_OP_ALLREDUCE, 16 << 10), "mesh(one-shot)");
  cr_assert_str_eq(plan_name("atlas-800t-a2", NULL, 8, 8, IC_OP_ALLREDUCE, 256 << 10), "mesh");
  cr_assert_str_eq(plan_name("atlas-800t-a2", NULL, 8, 8, IC_OP_ALLGATHER, 1 << 30), "mesh");
  /* servers: pipeline from 1 MiB AllReduce slices (S/p) and 32 KiB RS/AG chunks */
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 32, IC_OP_ALLREDUCE, 32 * MIB), "pipeline(mesh+ring)");
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 32, IC_OP_ALLREDUCE, 8 * MIB), "hierarchical(mesh+nhr)");
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 32, IC_OP_ALLGATHER, 2 * MIB), "pipeline(mesh+ring)");
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 32, IC_OP_ALLGATHER, 512 << 10), "hierarchical(mesh+nhr)");
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 32, IC_OP_ALLTOALL, 64 * MIB), "hierarchical(mesh+pairwise)");
  /* two servers: ring and NHR tie (2 steps each), ring wins the tie */
  cr_assert_str_eq(plan_name("atlas-800t-a2", four, 32, 16, IC_OP_ALLREDUCE, 1 * MIB), "hierarchical(mesh+ring)");
  /* three servers: RHD needs an extra step, ring and NHR tie again */
  cr_assert_str_eq(plan_name("atlas-800t-a2", three, 24, 24, IC_OP_ALLREDUCE, 1 * MIB), "hierarchical(mesh+ring)");
  /* 512 servers, 1 GiB: 256 KiB slices, no pipeline; NHR's log steps beat the ring */
  cr_assert_str_eq(plan_name("atlas-800t-a2", big, 4096, 4096, IC_OP_ALLREDUCE, 1 << 30), "hierarchical(mesh+nhr)");
  /* GPUs: ring inside, rings per NIC across */
  cr_assert_str_eq(plan_name("dgx-a100", NULL, 8, 8, IC_OP_ALLREDUCE, 1 << 30), "ring");
  static const char *const two[] = {"cluster.nodes=2", NULL};
  cr_assert_str_eq(plan_name("selene", two, 16, 16, IC_OP_ALLREDUCE, 1 << 30), "hierarchical(ring+ring)");
}

Test(features, selector_costs_are_hccls)
{
  double a = 60e-6, b = 1 / 20e9, n = 1e6;
  th_close(ic_select_cost_s(IC_OP_ALLREDUCE, IC_ALGO_RING, 4, n, a, b), 6 * a + 1.5 * n * b, 1e-12, "ring");
  th_close(ic_select_cost_s(IC_OP_ALLREDUCE, IC_ALGO_NHR, 5, n, a, b), 6 * a + 1.6 * n * b, 1e-12, "nhr");
  th_close(ic_select_cost_s(IC_OP_ALLREDUCE, IC_ALGO_RHD, 5, n, a, b), 6 * a + 3.6 * n * b, 1e-12, "rhd");
  th_close(ic_select_cost_s(IC_OP_ALLGATHER, IC_ALGO_RHD, 8, n, a, b), 3 * a + 0.875 * n * b, 1e-12, "hd");
}

Test(features, library_refuses_what_cannot_run)
{
  static const char *const two[] = {"cluster.nodes=2", NULL};
  struct arch_system sys;
  ts_load_system(&sys, "atlas-800t-a2", two);
  struct ic_topo *t;
  struct npu_diag d;
  cr_assert_eq(ic_topo_create(&t, &sys, 17, &d), NPU_EINVAL);
  cr_assert_str_eq(d.msg, "17 ranks exceed the 16 devices of the system (2 nodes x 8)");
  cr_assert_eq(ic_topo_create(&t, &sys, 16, &d), 0);
  struct ic_comm c;
  int dup[] = {0, 3, 3};
  cr_assert_eq(ic_comm_init(&c, dup, 3, t, "--comm", &d), NPU_EINVAL);
  cr_assert_str_eq(d.key, "--comm");
  cr_assert_str_eq(d.msg, "rank 3 appears twice in the communicator");
  cr_assert_eq(ic_comm_init_range(&c, 0, 16, 1, t, "comm", &d), 0);
  struct ic_params p;
  ic_params_default(&p, &sys);
  struct ic_plan plan;
  struct ic_coll coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_MESH, IC_FIDELITY_STEP, 1e6);
  cr_assert_eq(ic_plan_make(&plan, t, &c, &coll, &p, &d), NPU_EINVAL);
  cr_assert_str_eq(d.msg, "'mesh' needs every rank in one server, but the communicator spans 2 servers");
  coll.algo = IC_ALGO_PAIRWISE;
  cr_assert_eq(ic_plan_make(&plan, t, &c, &coll, &p, &d), NPU_EINVAL);
  cr_assert_str_eq(d.msg, "'pairwise' cannot run allreduce (it runs alltoall, alltoallv)");
  coll.algo = IC_ALGO_AUTO;
  coll.bytes = -1;
  cr_assert_eq(ic_plan_make(&plan, t, &c, &coll, &p, &d), NPU_EINVAL);
  cr_assert_str_eq(d.key, "--bytes");
  ic_comm_release(&c);
  int uneven[] = {0, 1, 8};
  cr_assert_eq(ic_comm_init(&c, uneven, 3, t, "comm", &d), 0);
  coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_HIER, IC_FIDELITY_STEP, 1e6);
  cr_assert_eq(ic_plan_make(&plan, t, &c, &coll, &p, &d), NPU_EINVAL);
  cr_assert_str_eq(d.msg, "'hierarchical' needs the same number of ranks on every server (the "
                          "communicator's servers hold different numbers)");
  ic_comm_release(&c);
  ic_topo_destroy(t);
}

/* A collective smaller than its communicator (8 bytes over 16 ranks on 2 servers: transfers of
 * half a byte) once handed SimGrid 0-byte payloads and ended in a reported deadlock with time 0:
 * it takes its latency-bound time. One test per fidelity (one engine per process). */
static void tiny_allreduce(enum ic_fidelity f)
{
  static const char *const two[] = {"cluster.nodes=2", NULL};
  struct th h;
  th_init(&h, "dgx-h100", two, 16);
  struct ic_comm c;
  th_comm(&h, &c, 0, 16, 1);
  struct ic_result res;
  double t8 = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, f, 8), &res);
  cr_assert_gt(t8, 1e-6, "8-byte all-reduce over 16 ranks took %g s", t8);
  cr_assert_geq(res.plan.loops, 1);
  ic_comm_release(&c);
  th_fini(&h);
}

Test(features, collectives_smaller_than_their_communicator_take_their_latency_bulk) { tiny_allreduce(IC_FIDELITY_BULK); }
Test(features, collectives_smaller_than_their_communicator_take_their_latency_step) { tiny_allreduce(IC_FIDELITY_STEP); }

/* Time of `npusim collective` (bulk fidelity) of op over bytes on ranks of arch (cli_time: a DGX
 * A100) with the overrides sets (NULL-terminated, at most 4): one process per run, one SimGrid
 * engine each. */
/* The time of `npusim collective --json` with args (NULL-terminated, at most 14) and --set sets. */
static double cli_time_args(const char *const *args, const char *const *sets)
{
  const char *a[32] = {0};
  int n = 0;
  for (int i = 0; args[i]; i++) a[n++] = args[i];
  for (int i = 0; sets && sets[i]; i++) a[n++] = "--set", a[n++] = sets[i];
  cr_assert(n < 31);
  struct run_result r = ts_npusim("collective", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                                  a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22],
                                  a[23], a[24], a[25], a[26], a[27], a[28], a[29], a[30], NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *t = strstr(r.out, "\"time_s\": ");
  cr_assert(t != NULL, "%s", r.out);
  double v = strtod(t + strlen("\"time_s\": "), NULL);
  ts_run_free(&r);
  return v;
}

static double cli_time_on(const char *arch, const char *op, const char *algo, const char *bytes, const char *ranks,
                          const char *const *sets)
{
  const char *args[] = {"--op", op, "--algo", algo, "--bytes", bytes, "--ranks", ranks, "--arch", arch, "--fidelity",
                        "bulk", "--json", NULL};
  return cli_time_args(args, sets);
}

static double cli_time(const char *op, const char *algo, const char *bytes, const char *ranks, const char *const *sets)
{
  return cli_time_on("dgx-a100", op, algo, bytes, ranks, sets);
}

/* node.link.efficiency_curve: a collective runs as on links at its own size's fraction of the
 * capacity. An all-reduce of 64 MiB on 8 ranks (8 MiB per ring step) with capacity 0.8 and the
 * curve "1MiB:0.5 64MiB:1" (0.75 at 8 MiB, halfway in log size) takes what it
 * takes with no curve at efficiency 0.6; a send of 64 MiB (its own size: 1, so 0.8) what it
 * takes at 0.8, or at node.link.p2p_fraction 0.625 of 0.8 (0.5) where that is set, the all-reduce
 * staying on the curve. */
Test(features, a_collective_runs_at_its_sizes_share_of_the_link)
{
  static const char *const curve[] = {"node.link.efficiency=0.8", "node.link.efficiency_curve=\"1MiB:0.5 64MiB:1\"",
                                      "node.link.p2p_fraction=0", NULL},
                           *p2p[] = {"node.link.efficiency=0.8", "node.link.efficiency_curve=\"1MiB:0.5 64MiB:1\"",
                                     "node.link.p2p_fraction=0.625", NULL},
                           *flat6[] = {"node.link.efficiency=0.6", "node.link.efficiency_curve=\"\"",
                                       "node.link.p2p_fraction=0", NULL},
                           *flat8[] = {"node.link.efficiency=0.8", "node.link.efficiency_curve=\"\"",
                                       "node.link.p2p_fraction=0", NULL},
                           *flat5[] = {"node.link.efficiency=0.5", "node.link.efficiency_curve=\"\"",
                                       "node.link.p2p_fraction=0", NULL};
  double ar = cli_time("allreduce", "ring", "64MiB", "8", curve);
  th_close(ar, cli_time("allreduce", "ring", "64MiB", "8", flat6), 1e-6, "all-reduce on the curve = at 0.6");
  th_close(cli_time("send", "direct", "64MiB", "2", curve), cli_time("send", "direct", "64MiB", "2", flat8), 1e-9,
           "send on the curve = at 0.8");
  th_close(cli_time("allreduce", "ring", "64MiB", "8", p2p), ar, 1e-6, "all-reduce with a p2p fraction: the curve");
  th_close(cli_time("send", "direct", "64MiB", "2", p2p), cli_time("send", "direct", "64MiB", "2", flat5), 1e-6,
           "send at the p2p fraction: 0.5");
  cr_assert_gt(ar, cli_time("allreduce", "ring", "64MiB", "8", flat8) * 1.1, "the share matters");
}

/* node.ccl.reduce_bandwidth 0 (NCCL, the DGX presets): the reduction is fused into the
 * transfers, so a bandwidth-bound ring all-reduce of S on p ranks takes 2 (p-1)/p S over the
 * link's rate plus its steps' fixed costs (the library's and the link's latency), and a local
 * reduction pass (HCCL's 483 GB/s) adds (p-1)/p S / 483 GB/s to it. */
Test(features, a_fused_reduction_costs_nothing_beyond_the_transfer)
{
  static const char *const fused[] = {"node.link.efficiency=1", "node.link.efficiency_curve=\"\"",
                                      "node.ccl.step_overhead=2us", NULL},
                           *pass[] = {"node.link.efficiency=1", "node.link.efficiency_curve=\"\"",
                                      "node.ccl.step_overhead=2us", "node.ccl.reduce_bandwidth=483GBps", NULL};
  double S = 128 * MIB, t0 = cli_time("allreduce", "ring", "128MiB", "8", fused),
         t1 = cli_time("allreduce", "ring", "128MiB", "8", pass); /* below the 200 MB buffer: one loop */
  th_close(t0, 2 * 7.0 / 8 * S / (12 * 25e9) + 14 * (2e-6 + 1e-6), 0.01, "fused: the transfers alone");
  th_close(t1 - t0, 7.0 / 8 * S / 483e9, 0.02, "a reduction pass adds (p-1)/p S at 483 GB/s");
}

/* NVLink SHARP (node.nvls, the DGX H100): an all-reduce inside the node runs in-switch, each
 * rank's port carrying S (1 + 1/p) each way in one pipelined step: alpha + S (1 + 1/p) / B, with
 * no reduction on the ranks. Auto-selection takes it where it costs less than the ring (p = 8;
 * not p = 2, where the ring moves S and NVLS 1.5 S); forcing it where the switches cannot reduce,
 * or for an all-gather (NVLS moves no fewer bytes there: NCCL keeps the ring), is refused. */
Test(features, an_nvls_all_reduce_runs_in_the_switch)
{
  static const char *const h100[] = {"node.link.efficiency=1", "node.link.efficiency_curve=\"\"",
                                     "node.ccl.step_overhead=2us", NULL};
  struct run_result r = ts_npusim("collective", "--op", "allreduce", "--bytes", "128MiB", "--ranks", "8", "--arch",
                                  "dgx-h100", "--fidelity", "bulk", "--set", h100[0], "--set", h100[1], "--set",
                                  h100[2], "--json", NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "\"algorithm\": \"nvls\"") != NULL, "%s", r.out);
  ts_run_free(&r);
  double S = 128 * MIB, B = 18 * 25e9;
  th_close(cli_time_on("dgx-h100", "allreduce", "auto", "128MiB", "8", h100), 2e-6 + 1e-6 + S * 9 / 8 / B, 1e-6,
           "nvls: one step of S (1 + 1/p)");
  r = ts_npusim("collective", "--op", "allreduce", "--bytes", "128MiB", "--ranks", "2", "--arch", "dgx-h100",
                "--fidelity", "bulk", "--json", NULL);
  cr_assert(strstr(r.out, "\"algorithm\": \"ring\"") != NULL, "two ranks: the ring (%s)", r.out);
  ts_run_free(&r);
  r = ts_npusim("collective", "--op", "allreduce", "--algo", "nvls", "--bytes", "1MiB", "--ranks", "8", "--arch",
                "dgx-a100", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "'nvls' needs switches that reduce (node.nvls = true)") != NULL, "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("collective", "--op", "allgather", "--algo", "nvls", "--bytes", "1MiB", "--ranks", "8", "--arch",
                "dgx-h100", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "'nvls' cannot run allgather") != NULL, "%s", r.err);
  ts_run_free(&r);
}

/* A collective's time on dgx-a100 (2 nodes) over the ranks of `comm` ("0,8" or "0-15"), with one
 * link share at every size (the curve's share follows each collective's own step size, which a
 * phase of a hierarchical collective does not have apart). */
static double dgx_time(const char *op, const char *algo, const char *bytes, const char *comm)
{
  const char *args[] = {"--op", op, "--algo", algo, "--bytes", bytes, "--comm", comm, "--arch", "dgx-a100",
                        "--fidelity", "bulk", "--json", NULL},
             *sets[] = {"cluster.nodes=2", "node.link.efficiency_curve=\"\"", NULL};
  return cli_time_args(args, sets);
}

/*
 * NCCL's multi-node all-gather and reduce-scatter cross the servers by columns: its rings, one
 * per NIC, carry S / d per NIC (d = 8 ranks per server). On two DGX A100 nodes the hierarchical
 * all-gather of S over 16 ranks is the all-gather of S / 8 between each rank and its
 * counterpart in the other node, then the all-gather of S inside each node; the reduce-scatter
 * the reverse: each takes the sum of its two phases run alone (within 2%), and the cross-node
 * phase moves S / 16 through each NIC, not S / 2 (HCCL's decomposition, the Atlas presets').
 */
Test(features, nccl_allgather_and_reducescatter_cross_servers_by_columns)
{
  double S = 256.0 * 1024 * 1024;
  double ag = dgx_time("allgather", "auto", "256MiB", "0-15"), rs = dgx_time("reducescatter", "auto", "256MiB", "0-15");
  double inter_ag = dgx_time("allgather", "ring", "32MiB", "0,8"), inter_rs = dgx_time("reducescatter", "ring", "32MiB", "0,8");
  double intra_ag = dgx_time("allgather", "ring", "256MiB", "0-7"), intra_rs = dgx_time("reducescatter", "ring", "256MiB", "0-7");
  cr_expect(fabs(ag - (inter_ag + intra_ag)) <= 0.02 * ag, "all-gather %g s, phases %g + %g s", ag, inter_ag, intra_ag);
  cr_expect(fabs(rs - (inter_rs + intra_rs)) <= 0.02 * rs, "reduce-scatter %g s, phases %g + %g s", rs, inter_rs,
            intra_rs);
  /* the cross-node phase: S / 16 through a 200 Gb/s NIC (25 GB/s), plus its latencies */
  double nic = S / 16 / 25e9;
  cr_expect(inter_ag > nic && inter_ag < 1.1 * nic, "cross-node all-gather %g s, S / 16 at 25 GB/s %g s", inter_ag, nic);
}
