/*
 * test_fidelity.c - step and bulk fidelity agree within 2% without cross traffic, for every
 * algorithm family, with buffer loops (bulk folds them into one pass), on the calibrated
 * presets. Where they part under contention or uneven sizes is in docs/INTERCONNECT.md.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/interconnect/helpers.h"

#define MIB (1024.0 * 1024)

TestSuite(fidelity, .timeout = 30);

static void agree_within(const char *preset, const char *const *sets, int nranks, enum ic_op op, enum ic_algo algo,
                         int first, int n, int stride, double bytes, double tol)
{
  struct th h;
  th_init(&h, preset, sets, nranks);
  struct ic_comm c;
  th_comm(&h, &c, first, n, stride);
  struct ic_run r[2] = {
      {.comm = &c, .coll = th_coll(op, algo, IC_FIDELITY_STEP, bytes), .group = 0},
      {.comm = &c, .coll = th_coll(op, algo, IC_FIDELITY_BULK, bytes), .group = 1},
  };
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_run(h.sim, r, 2, &d), 0, "%s", d.msg);
  cr_assert_str_eq(r[0].result.plan.name, r[1].result.plan.name);
  cr_assert(r[1].result.flows < r[0].result.flows || r[0].result.flows <= (size_t)n * 8,
            "bulk %zu flows, step %zu", r[1].result.flows, r[0].result.flows);
  char what[128];
  snprintf(what, sizeof what, "%s %s: bulk vs step", ic_op_name(op), r[0].result.plan.name);
  th_close(r[1].result.time_s, r[0].result.time_s, tol, what);
  ic_comm_release(&c);
  th_fini(&h);
}

static void agree(const char *preset, const char *const *sets, int nranks, enum ic_op op,
                  enum ic_algo algo, int first, int n, int stride, double bytes)
{
  agree_within(preset, sets, nranks, op, algo, first, n, stride, bytes, 0.02);
}

static const char *const four[] = {"cluster.nodes=4", NULL};
static const char *const eight[] = {"cluster.nodes=8", NULL};

Test(fidelity, ring_in_a_server)
{
  agree("atlas-800t-a2", NULL, 8, IC_OP_ALLREDUCE, IC_ALGO_RING, 0, 8, 1, 256 * MIB);
}

Test(fidelity, mesh_in_a_server)
{
  agree("atlas-800t-a2", NULL, 8, IC_OP_ALLREDUCE, IC_ALGO_MESH, 0, 8, 1, 256 * MIB);
}

Test(fidelity, ring_across_servers)
{
  agree("atlas-800t-a2", four, 32, IC_OP_ALLREDUCE, IC_ALGO_RING, 0, 4, 8, 64 * MIB);
}

Test(fidelity, nhr_across_servers)
{
  agree("atlas-800t-a2", eight, 64, IC_OP_ALLREDUCE, IC_ALGO_NHR, 0, 6, 8, 64 * MIB);
}

Test(fidelity, rhd_not_a_power_of_two)
{
  agree("atlas-800t-a2", eight, 64, IC_OP_ALLREDUCE, IC_ALGO_RHD, 0, 6, 8, 64 * MIB);
}

Test(fidelity, pairwise_across_servers)
{
  agree("atlas-800t-a2", eight, 64, IC_OP_ALLTOALL, IC_ALGO_PAIRWISE, 0, 8, 8, 64 * MIB);
}

/* A flat pairwise AllToAll over whole DGX H100 servers: each rank's merged scale-out transfer
 * goes to its rail's peer, so the servers' NICs receive evenly as at step fidelity (they all
 * named the next server's first rank once: 5.9x slow). The phase mixes NVLink and NIC steps,
 * which bulk overlaps (docs/INTERCONNECT.md): 2.5% apart here, 10% allowed. */
Test(fidelity, flat_pairwise_over_whole_servers)
{
  agree_within("dgx-h100", four, 32, IC_OP_ALLTOALL, IC_ALGO_PAIRWISE, 0, 32, 1, 64 * MIB, 0.10);
}

Test(fidelity, hierarchical_allreduce_with_loops)
{
  agree("atlas-800t-a2", four, 32, IC_OP_ALLREDUCE, IC_ALGO_HIER, 0, 32, 1, 512 * MIB);
}

Test(fidelity, hierarchical_alltoall)
{
  agree("atlas-800t-a2", four, 32, IC_OP_ALLTOALL, IC_ALGO_HIER, 0, 32, 1, 64 * MIB);
}

Test(fidelity, hierarchical_broadcast)
{
  agree("atlas-800t-a2", four, 32, IC_OP_BROADCAST, IC_ALGO_HIER, 0, 32, 1, 64 * MIB);
}

Test(fidelity, pipeline_allreduce)
{
  agree("atlas-800t-a2", four, 32, IC_OP_ALLREDUCE, IC_ALGO_PIPELINE, 0, 32, 1, 64 * MIB);
}

Test(fidelity, pipeline_allgather)
{
  agree("atlas-800t-a2", four, 32, IC_OP_ALLGATHER, IC_ALGO_PIPELINE, 0, 32, 1, 64 * MIB);
}

Test(fidelity, gpu_hierarchical_rings)
{
  static const char *const sets[] = {"cluster.nodes=2", NULL};
  agree("selene", sets, 16, IC_OP_ALLREDUCE, IC_ALGO_AUTO, 0, 16, 1, 256 * MIB);
}

Test(fidelity, superpod_across_servers)
{
  agree("atlas-a3-superpod", NULL, 32, IC_OP_ALLREDUCE, IC_ALGO_AUTO, 0, 32, 1, 64 * MIB);
}
