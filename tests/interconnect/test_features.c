/*
 * test_features.c - AllToAllV with uneven sizes, payloads looped through the communicator
 * buffer, HCCL-like selection for the cases hccl.md describes, and the library's refusals.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "common/err.h"
#include "interconnect/select.h"
#include "tests/support/chip.h"
#include "tests/interconnect/helpers.h"

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
  th_close(t, 2 * t1 + th, 1e-9, "three loops: two full buffers and a half");
  double tb = th_run(&h, &c, th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_BULK, 2.5e6), &r);
  cr_assert_eq(r.plan.loops, 3);
  th_close(tb, t, 1e-9, "bulk folds the loops");
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
