/*
 * test_concurrency.c - collectives on different communicators in flight at once share links:
 * two DP groups crossing the same oversubscribed spine uplink each get half of it; a TP
 * collective inside a server leaves a DP collective on the NICs untouched; two collectives on
 * one NIC do slow each other; ranks may join at their own times.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/interconnect/helpers.h"

#define MIB (1024.0 * 1024)

TestSuite(concurrency, .timeout = 30);

/* Two servers on two leaves of 9-port switches: 8 ports down, 1 up (oversubscription 8:1). */
static const char *const spine[] = {"cluster.nodes=2", "cluster.scaleout.switch_radix=9",
                                    "cluster.scaleout.oversubscription=8",
                                    "cluster.scaleout.efficiency=1", NULL};

Test(concurrency, two_dp_groups_share_the_spine_uplink)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", spine, 16);
  const struct ic_fat_tree *f = ic_topo_fat_tree(ic_sim_topo(h.sim));
  cr_assert(f->leaf_down == 8 && f->leaf_up == 1 && f->leaves == 2);
  struct ic_comm a, b;
  th_comm(&h, &a, 0, 2, 8); /* ranks 0 and 8 */
  th_comm(&h, &b, 1, 2, 8); /* ranks 1 and 9 */
  double n = 64 * MIB;
  struct ic_run r[4] = {
      {.comm = &a, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, n), .group = 0},
      {.comm = &a, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, n), .group = 1},
      {.comm = &b, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, n), .group = 1},
      {.comm = &a, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_BULK, n), .group = 2},
  };
  struct ic_run rb = {.comm = &b, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_BULK, n),
                      .group = 2};
  struct ic_run all[5] = {r[0], r[1], r[2], r[3], rb};
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_run(h.sim, all, 5, &d), 0, "%s", d.msg);
  double alone = all[0].result.time_s, ta = all[1].result.time_s, tb = all[2].result.time_s;
  th_close(ta, tb, 1e-9, "the two groups get equal shares");
  /* ring AllReduce on 2 ranks: 2 steps of n/2 over the uplink; shared, each gets B/2 */
  double lat = 2 * (1.5e-6 + 1.5e-6 + 2 * 0.5e-6), red = n / 2 / 483e9;
  th_close(alone, lat + 2 * (n / 2) / 25e9 + red, 0.01, "one group alone: the NIC rate");
  th_close(ta, lat + 2 * (n / 2) / 12.5e9 + red, 0.01, "two groups: half the uplink each");
  th_close(all[3].result.time_s, all[4].result.time_s, 1e-9, "bulk: equal shares too");
  th_close(all[3].result.time_s, ta, 0.02, "bulk under this contention");
  ic_comm_release(&a);
  ic_comm_release(&b);
  th_fini(&h);
}

Test(concurrency, tp_inside_a_server_does_not_slow_dp_on_the_nics)
{
  static const char *const sets[] = {"cluster.nodes=2", NULL};
  struct th h;
  th_init(&h, "atlas-800t-a2", sets, 16);
  struct ic_comm dp, tp, dp2;
  th_comm(&h, &dp, 0, 2, 8);  /* ranks 0 and 8: NICs only */
  th_comm(&h, &tp, 8, 8, 1);  /* server 1: HCCS only, rank 8 in both */
  th_comm(&h, &dp2, 0, 2, 9); /* ranks 0 and 9: shares rank 0's NIC with dp */
  double n = 64 * MIB;
  struct ic_run r[5] = {
      {.comm = &dp, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, IC_FIDELITY_STEP, n), .group = 0},
      {.comm = &dp, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, IC_FIDELITY_STEP, n), .group = 1},
      {.comm = &tp, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, IC_FIDELITY_STEP, 4 * n), .group = 1},
      {.comm = &dp, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, IC_FIDELITY_STEP, n), .group = 2},
      {.comm = &dp2, .coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_AUTO, IC_FIDELITY_STEP, n), .group = 2},
  };
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_run(h.sim, r, 5, &d), 0, "%s", d.msg);
  cr_assert(r[2].result.time_s > r[0].result.time_s / 4, "the TP collective overlaps the DP one");
  th_close(r[1].result.time_s, r[0].result.time_s, 1e-9, "DP beside TP = DP alone");
  cr_assert(r[3].result.time_s > 1.5 * r[0].result.time_s,
            "two DP groups on one NIC slow each other: %g vs %g", r[3].result.time_s,
            r[0].result.time_s);
  ic_comm_release(&dp);
  ic_comm_release(&tp);
  ic_comm_release(&dp2);
  th_fini(&h);
}

struct late {
  struct th *h;
  struct ic_comm *c;
  double t_alone, t_late, end_late_rank;
};

/* Drive the executor by hand, as a replay would: rank 1 joins 1 ms after rank 0. */
static void late_actor(void *arg)
{
  struct late *l = arg;
  struct ic_exec *x = ic_exec_create(ic_sim_topo(l->h->sim), &l->h->prm);
  struct npu_diag d;
  struct ic_coll coll = th_coll(IC_OP_ALLREDUCE, IC_ALGO_RING, IC_FIDELITY_STEP, 8 * MIB);
  int id = ic_exec_start(x, l->c, &coll, &d);
  cr_assert(id >= 0);
  ic_exec_join_all(x, id, npu_engine_clock());
  ic_exec_run(x);
  struct ic_result res;
  ic_exec_result(x, id, &res);
  l->t_alone = res.time_s;
  double t0 = npu_engine_clock();
  id = ic_exec_start(x, l->c, &coll, &d);
  for (int r = 0; r < l->c->size; r++) ic_exec_join(x, id, r, t0 + (r == 1 ? 1e-3 : 0));
  for (;;) {
    double now = npu_engine_clock();
    ic_exec_advance(x, now);
    if (!ic_exec_pending(x)) break;
    struct npu_xfer *const *xs;
    size_t n = ic_exec_xfers(x, &xs);
    double next = ic_exec_next_event_s(x);
    if (n == 0) {
      npu_engine_sleep(next - now);
      continue;
    }
    ssize_t k = npu_xfer_wait_any(xs, n, isinf(next) ? -1 : next - now);
    if (k >= 0) ic_exec_xfer_done(x, (size_t)k, npu_engine_clock());
    ic_exec_reap(x, npu_engine_clock());
  }
  cr_assert(ic_exec_done(x, id));
  l->end_late_rank = ic_exec_rank_end_s(x, id, 1) - t0;
  ic_exec_result(x, id, &res);
  l->t_late = res.time_s;
  ic_exec_destroy(x);
}

Test(concurrency, ranks_join_at_their_own_time)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", NULL, 8);
  struct ic_comm c;
  th_comm(&h, &c, 0, 8, 1);
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_start_engine(h.sim, &d), 0);
  struct late l = {&h, &c, 0, 0, 0};
  npu_engine_spawn("late", npu_engine_host("r0"), late_actor, &l);
  npu_engine_run();
  /* nothing involving rank 1 can start before it joins: the ring waits for it */
  th_close(l.t_late, 1e-3 + l.t_alone, 1e-6, "a late rank delays the ring by its lateness");
  th_close(l.end_late_rank, 1e-3 + l.t_alone, 1e-6, "the late rank ends last");
  ic_comm_release(&c);
  th_fini(&h);
}
