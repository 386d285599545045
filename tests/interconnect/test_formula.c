/*
 * test_formula.c - every algorithm against its alpha-beta formula, within 1%, at step fidelity
 * on an uncontended platform: 8-NPU Atlas 800T A2 servers with link efficiency 1 (HCCS
 * 56 GB/s, 0.5 us), one 200 Gb/s RoCE NIC per NPU (25 GB/s, 1.5 us) on one leaf switch.
 * alpha = task overhead (1.5 us) + latency, beta = 1/B, gamma = 1/483 GB/s; c = S/p.
 * The formulas are written out here, independently of the library.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/interconnect/helpers.h"

static const double O = 1.5e-6, BM = 56e9, LM = 0.5e-6, BN = 25e9, LN = 1.5e-6, G = 1 / 483e9;
#define AM (O + LM)
#define AN (O + LN)
#define MIB (1024.0 * 1024)

TestSuite(formula, .timeout = 30);

static const char *const sets[] = {"node.link.efficiency=1", "cluster.scaleout.efficiency=1",
                                   "cluster.nodes=8", "cluster.scaleout.switch_radix=128", NULL};

/* Run op with algo (oneshot: the one-shot form of a mesh AllReduce) on ranks first,
 * first+stride, ... and compare with want. */
static void check_as(enum ic_op op, enum ic_algo algo, bool oneshot, int first, int n, int stride, double bytes,
                     double want, const char *expect_name)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", sets, 64);
  struct ic_comm c;
  th_comm(&h, &c, first, n, stride);
  struct ic_result r;
  struct ic_coll coll = th_coll(op, algo, IC_FIDELITY_STEP, bytes);
  coll.oneshot = oneshot;
  double t = th_run(&h, &c, coll, &r);
  if (expect_name) cr_assert_str_eq(r.plan.name, expect_name);
  th_close(t, want, 0.01, r.plan.name);
  ic_comm_release(&c);
  th_fini(&h);
}

static void check(enum ic_op op, enum ic_algo algo, int first, int n, int stride, double bytes, double want,
                  const char *expect_name)
{
  check_as(op, algo, false, first, n, stride, bytes, want, expect_name);
}

Test(formula, ring_allreduce)
{
  double n = 64 * MIB, p = 8;
  check(IC_OP_ALLREDUCE, IC_ALGO_RING, 0, 8, 1, n,
        2 * (p - 1) * AM + 2 * (p - 1) / p * n / BM + (p - 1) / p * n * G, "ring");
}

Test(formula, ring_reducescatter)
{
  double n = 64 * MIB, p = 8;
  check(IC_OP_REDUCESCATTER, IC_ALGO_RING, 0, 8, 1, n,
        (p - 1) * AM + (p - 1) / p * n / BM + (p - 1) / p * n * G, "ring");
}

Test(formula, ring_allgather)
{
  double n = 64 * MIB, p = 8;
  check(IC_OP_ALLGATHER, IC_ALGO_RING, 0, 8, 1, n, (p - 1) * AM + (p - 1) / p * n / BM, "ring");
}

Test(formula, ring_broadcast_is_binomial_scatter_then_ring_allgather)
{
  double n = 64 * MIB, c = n / 8;
  check(IC_OP_BROADCAST, IC_ALGO_RING, 0, 8, 1, n, 3 * AM + 7 * c / BM + 7 * (AM + c / BM), "ring");
}

Test(formula, ring_reduce_is_ring_reducescatter_then_binomial_gather)
{
  double n = 64 * MIB, c = n / 8;
  check(IC_OP_REDUCE, IC_ALGO_RING, 0, 8, 1, n, 7 * (AM + c / BM + c * G) + 3 * AM + 7 * c / BM,
        "ring");
}

Test(formula, mesh_allreduce_two_shot)
{
  double n = 64 * MIB;
  check(IC_OP_ALLREDUCE, IC_ALGO_MESH, 0, 8, 1, n, 2 * AM + 2 * n / 8 / BM + 7.0 / 8 * n * G, "mesh");
}

Test(formula, mesh_allreduce_one_shot)
{
  double n = 128 * 1024;
  check_as(IC_OP_ALLREDUCE, IC_ALGO_MESH, true, 0, 8, 1, n, AM + n / BM + 7 * n * G, "mesh(one-shot)");
}

Test(formula, mesh_reducescatter)
{
  double n = 64 * MIB;
  check(IC_OP_REDUCESCATTER, IC_ALGO_MESH, 0, 8, 1, n, AM + n / 8 / BM + 7.0 / 8 * n * G, "mesh");
}

Test(formula, mesh_allgather)
{
  double n = 64 * MIB;
  check(IC_OP_ALLGATHER, IC_ALGO_MESH, 0, 8, 1, n, AM + n / 8 / BM, "mesh");
}

Test(formula, mesh_alltoall)
{
  double n = 64 * MIB;
  check(IC_OP_ALLTOALL, IC_ALGO_MESH, 0, 8, 1, n, AM + n / 8 / BM, "mesh");
}

Test(formula, mesh_broadcast_star)
{
  double n = 64 * MIB;
  check(IC_OP_BROADCAST, IC_ALGO_MESH, 0, 8, 1, n, AM + n / BM, "mesh");
}

Test(formula, mesh_reduce_star)
{
  double n = 16 * MIB;
  check(IC_OP_REDUCE, IC_ALGO_MESH, 0, 8, 1, n, AM + n / BM + 7 * n * G, "mesh");
}

Test(formula, rhd_allreduce_power_of_two)
{
  double n = 64 * MIB, p = 4;
  check(IC_OP_ALLREDUCE, IC_ALGO_RHD, 0, 4, 8, n,
        2 * 2 * AN + 2 * (p - 1) / p * n / BN + (p - 1) / p * n * G, "rhd");
}

Test(formula, rhd_allreduce_not_a_power_of_two)
{
  /* p = 6: fold 2 ranks into partners (n, reduced), RHD on 4, unfold (n) */
  double n = 64 * MIB, q = 4.0;
  check(IC_OP_ALLREDUCE, IC_ALGO_RHD, 0, 6, 8, n,
        2 * (2 + 1) * AN + (2 + 2 * (q - 1) / q) * n / BN + (1 + (q - 1) / q) * n * G, "rhd");
}

Test(formula, rhd_reducescatter_not_a_power_of_two)
{
  double n = 64 * MIB, q = 4.0;
  check(IC_OP_REDUCESCATTER, IC_ALGO_RHD, 0, 6, 8, n,
        (AN + n / BN + n * G) + (2 * AN + (q - 1) / q * n * (1 / BN + G)) + (AN + n / 6 / BN),
        "rhd");
}

Test(formula, rhd_allgather_not_a_power_of_two)
{
  double n = 64 * MIB, q = 4.0;
  check(IC_OP_ALLGATHER, IC_ALGO_RHD, 0, 5, 8, n,
        (AN + n / 5 / BN) + (2 * AN + (q - 1) / q * n / BN) + (AN + n / BN), "rhd");
}

Test(formula, nhr_allreduce)
{
  double n = 64 * MIB, p = 6;
  check(IC_OP_ALLREDUCE, IC_ALGO_NHR, 0, 6, 8, n,
        2 * 3 * AN + 2 * (p - 1) / p * n / BN + (p - 1) / p * n * G, "nhr");
}

Test(formula, nhr_allgather)
{
  double n = 64 * MIB, p = 5;
  check(IC_OP_ALLGATHER, IC_ALGO_NHR, 0, 5, 8, n, 3 * AN + (p - 1) / p * n / BN, "nhr");
}

Test(formula, nhr_broadcast)
{
  double n = 64 * MIB, c = n / 4;
  check(IC_OP_BROADCAST, IC_ALGO_NHR, 0, 4, 8, n, 2 * AN + 3 * c / BN + 2 * AN + 3 * c / BN, "nhr");
}

Test(formula, pairwise_alltoall)
{
  double n = 64 * MIB;
  check(IC_OP_ALLTOALL, IC_ALGO_PAIRWISE, 0, 4, 8, n, 3 * (AN + n / 4 / BN), "pairwise");
}

Test(formula, sendrecv)
{
  double n = 64 * MIB;
  check(IC_OP_SENDRECV, IC_ALGO_AUTO, 0, 8, 1, n, AM + n / BM, "direct");
}

Test(formula, send_inside_a_server_is_one_hccs_transfer)
{
  double n = 64 * MIB;
  check(IC_OP_SEND, IC_ALGO_AUTO, 0, 2, 1, n, AM + n / BM, "direct");
}

Test(formula, send_between_servers_is_one_roce_transfer)
{
  double n = 64 * MIB;
  check(IC_OP_SEND, IC_ALGO_AUTO, 0, 2, 8, n, AN + n / BN, "direct");
}

/* Hierarchical and pipeline on 2 servers x 8: intra HCCS mesh, inter RoCE ring (m = 2). */

Test(formula, hierarchical_allreduce)
{
  double n = 64 * MIB;
  check(IC_OP_ALLREDUCE, IC_ALGO_HIER, 0, 16, 1, n,
        (AM + n / 8 / BM + 7.0 / 8 * n * G) + (AN + n / 16 / BN + n / 16 * G) +
            (AN + n / 16 / BN) + (AM + n / 8 / BM),
        "hierarchical(mesh+ring)");
}

Test(formula, hierarchical_reducescatter)
{
  double n = 64 * MIB;
  check(IC_OP_REDUCESCATTER, IC_ALGO_HIER, 0, 16, 1, n,
        (AN + n / 2 / BN + n / 2 * G) + (AM + n / 16 / BM + 7.0 / 8 * n / 2 * G),
        "hierarchical(mesh+ring)");
}

Test(formula, hierarchical_allgather)
{
  double n = 64 * MIB;
  check(IC_OP_ALLGATHER, IC_ALGO_HIER, 0, 16, 1, n, (AM + n / 16 / BM) + (AN + n / 2 / BN),
        "hierarchical(mesh+ring)");
}

Test(formula, hierarchical_broadcast)
{
  double n = 64 * MIB;
  check(IC_OP_BROADCAST, IC_ALGO_HIER, 0, 16, 1, n,
        (AM + n / 8 / BM) + 2 * (AN + n / 16 / BN) + (AM + n / 8 / BM), "hierarchical(mesh+ring)");
}

Test(formula, hierarchical_alltoall)
{
  double n = 64 * MIB, c = n / 16;
  check(IC_OP_ALLTOALL, IC_ALGO_HIER, 0, 16, 1, n, (AM + 2 * c / BM) + (AN + 8 * c / BN),
        "hierarchical(mesh+pairwise)");
}

Test(formula, pipeline_allgather)
{
  double n = 64 * MIB, c = n / 16;
  check(IC_OP_ALLGATHER, IC_ALGO_PIPELINE, 0, 16, 1, n,
        (O + fmax(LM + c / BM, LN + c / BN)) + (AM + c / BM), "pipeline(mesh+ring)");
}

Test(formula, pipeline_allreduce)
{
  double n = 64 * MIB, c = n / 16;
  double rs = (AM + c / BM + 7 * c * G) + (O + fmax(LM + c / BM, LN + c / BN) + 8 * c * G) +
              (AN + c / BN + c * G);
  double ag = (O + fmax(LM + c / BM, LN + c / BN)) + (AM + c / BM);
  check(IC_OP_ALLREDUCE, IC_ALGO_PIPELINE, 0, 16, 1, n, rs + ag, "pipeline(mesh+ring)");
}
