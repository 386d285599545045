/*
 * test_platform.c - the generated platforms: exact link timing (S/B on the platform, S/B + L
 * through the executor), max-min fair sharing of 2 and 3 flows whatever their route lengths,
 * full duplex, the link classes of each kind of server and network, host names.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "interconnect/platform.h"
#include "tests/interconnect/helpers.h"

TestSuite(platform, .timeout = 30);

#define MAXF 4

struct flows {
  int n;
  const char *src[MAXF], *dst[MAXF];
  double bytes;
  double end[MAXF];
};

static void flow_actor(void *arg)
{
  struct flows *f = arg;
  struct npu_xfer *x[MAXF];
  int idx[MAXF];
  double t0 = npu_engine_clock();
  for (int i = 0; i < f->n; i++) {
    sg_host_t a = npu_engine_host(f->src[i]), b = npu_engine_host(f->dst[i]);
    cr_assert(a && b, "hosts %s %s", f->src[i], f->dst[i]);
    x[i] = npu_xfer_start(a, b, f->bytes, 0);
    idx[i] = i;
  }
  int n = f->n;
  while (n) {
    ssize_t k = npu_xfer_wait_any(x, (size_t)n, -1);
    if (k < 0) continue;
    f->end[idx[k]] = npu_engine_clock() - t0;
    npu_xfer_release(x[k]);
    x[k] = x[n - 1];
    idx[k] = idx[n - 1];
    n--;
  }
}

static void run_flows(struct th *h, struct flows *f)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_start_engine(h->sim, &d), 0, "%s", d.msg);
  npu_engine_spawn("flows", npu_engine_host("r0"), flow_actor, f);
  npu_engine_run();
}

static const char *const a2_exact[] = {"node.link.efficiency=1", "cluster.scaleout.efficiency=1",
                                       "cluster.nodes=4", NULL};

Test(platform, one_link_takes_s_over_b)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", a2_exact, 32);
  struct flows f = {.n = 1, .src = {"r0"}, .dst = {"r1"}, .bytes = 1e9};
  run_flows(&h, &f);
  th_close(f.end[0], 1e9 / 56e9, 1e-12, "1 GB over one 56 GB/s HCCS link");
  th_fini(&h);
}

Test(platform, executor_transfer_takes_s_over_b_plus_l)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", a2_exact, 32);
  h.prm.task_overhead_s = 0;
  h.prm.buffer_bytes = 0; /* one pass, no buffer loops */
  struct ic_comm c;
  th_comm(&h, &c, 0, 2, 1);
  double t = th_run(&h, &c, th_coll(IC_OP_SENDRECV, IC_ALGO_AUTO, IC_FIDELITY_STEP, 1e9), NULL);
  th_close(t, 1e9 / 56e9 + 0.5e-6, 1e-12, "send/recv over one HCCS link: S/B + L");
  /* and across servers, NIC to NIC through one leaf */
  struct ic_comm c2;
  th_comm(&h, &c2, 0, 2, 8);
  t = th_run(&h, &c2, th_coll(IC_OP_SENDRECV, IC_ALGO_AUTO, IC_FIDELITY_STEP, 1e9), NULL);
  th_close(t, 1e9 / 25e9 + 1.5e-6, 1e-12, "send/recv over RoCE: S/B + L");
  ic_comm_release(&c);
  ic_comm_release(&c2);
  th_fini(&h);
}

Test(platform, two_and_three_flows_share_one_link)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", a2_exact, 32);
  struct flows f = {.n = 3, .src = {"r0.nic", "r0.nic", "r0.nic"},
                    .dst = {"r8.nic", "r16.nic", "r24.nic"}, .bytes = 1e9};
  run_flows(&h, &f);
  for (int i = 0; i < 3; i++) th_close(f.end[i], 3 * 1e9 / 25e9, 1e-12, "3 flows on one NIC");
  th_fini(&h);
}

Test(platform, two_flows_of_different_route_lengths_share_fairly)
{
  /* leaves of 8 ports down: r1.nic is on r0's leaf (2 links), r8.nic on the next (4 links) */
  static const char *const sets[] = {"cluster.scaleout.efficiency=1", "cluster.nodes=4",
                                     "cluster.scaleout.switch_radix=16", NULL};
  struct th h;
  th_init(&h, "atlas-800t-a2", sets, 32);
  cr_assert_eq(ic_topo_fat_tree(ic_sim_topo(h.sim))->leaf_down, 8);
  struct flows f = {.n = 2, .src = {"r0.nic", "r0.nic"}, .dst = {"r1.nic", "r8.nic"}, .bytes = 1e9};
  run_flows(&h, &f);
  th_close(f.end[0], 2 * 1e9 / 25e9, 1e-12, "same-leaf flow");
  th_close(f.end[1], 2 * 1e9 / 25e9, 1e-12, "cross-leaf flow");
  th_fini(&h);
}

Test(platform, links_are_full_duplex)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", a2_exact, 32);
  struct flows f = {.n = 4, .src = {"r0", "r1", "r0.nic", "r8.nic"},
                    .dst = {"r1", "r0", "r8.nic", "r0.nic"}, .bytes = 1e9};
  run_flows(&h, &f);
  th_close(f.end[0], 1e9 / 56e9, 1e-12, "HCCS one way");
  th_close(f.end[1], 1e9 / 56e9, 1e-12, "HCCS the other way");
  th_close(f.end[2], 1e9 / 25e9, 1e-12, "NIC one way");
  th_close(f.end[3], 1e9 / 25e9, 1e-12, "NIC the other way");
  th_fini(&h);
}

Test(platform, superpod_classes)
{
  /* CloudMatrix384: SIO between the dies of a package, UB switch port (7 x 56 GB/s) inside a
   * server, the UB fabric between servers of the pod, RoCE between two pods */
  static const char *const sets[] = {"cluster.nodes=96", NULL};
  struct th h;
  th_init(&h, "atlas-a3-superpod", sets, 1536);
  const struct ic_topo *t = ic_sim_topo(h.sim);
  cr_assert_eq(ic_topo_class(t, 0, 1), IC_CLASS_D2D);
  cr_assert_eq(ic_topo_class(t, 0, 2), IC_CLASS_SWITCH);
  cr_assert_eq(ic_topo_class(t, 0, 16), IC_CLASS_POD);
  cr_assert_eq(ic_topo_class(t, 0, 768), IC_CLASS_NIC);
  th_close(ic_topo_latency_s(t, 0, 16), 5.5e-6, 1e-12, "pod latency");
  struct flows f = {.n = 4, .src = {"r0", "r2", "r4", "r6.nic"},
                    .dst = {"r1", "r5", "r16", "r800.nic"}, .bytes = 1e9};
  run_flows(&h, &f);
  th_close(f.end[0], 1e9 / 204e9, 1e-12, "SIO");
  th_close(f.end[1], 1e9 / (7 * 56e9), 1e-12, "UB switch port");
  th_close(f.end[2], 1e9 / (7 * 56e9), 1e-12, "UB fabric, package port bound");
  th_close(f.end[3], 1e9 / 25e9, 1e-12, "RoCE between pods");
  th_fini(&h);
}

Test(platform, nvswitch_and_rails)
{
  /* DGX A100 on a rail-optimized Clos: GPU i of every node on rail leaf i */
  static const char *const sets[] = {"cluster.nodes=4", NULL};
  struct th h;
  th_init(&h, "selene", sets, 32);
  const struct ic_topo *t = ic_sim_topo(h.sim);
  cr_assert_eq(ic_topo_class(t, 0, 1), IC_CLASS_SWITCH);
  th_close(ic_topo_latency_s(t, 0, 8), 2e-6, 1e-12, "same rail: one leaf");
  th_close(ic_topo_latency_s(t, 0, 9), 2e-6 + 2 * 0.3e-6, 1e-12, "across rails: through a spine");
  cr_assert_eq(ic_topo_slot(t, 8), ic_topo_slot(t, 0) + 1, "rail 0 of node 1 next to node 0's");
  struct flows f = {.n = 2, .src = {"r0", "r0.nic"}, .dst = {"r1", "r8.nic"}, .bytes = 1e9};
  run_flows(&h, &f);
  /* the preset's calibrated link efficiencies, whatever their fitted values */
  double nvl = h.sys.node.link_efficiency.value, ib = h.sys.cluster.scaleout.efficiency.value;
  cr_assert(nvl > 0.5 && nvl < 1 && ib > 0.5 && ib <= 1, "efficiencies %g, %g", nvl, ib);
  th_close(f.end[0], 1e9 / (12 * 25e9 * nvl), 1e-12, "NVSwitch port");
  th_close(f.end[1], 1e9 / (25e9 * ib), 1e-12, "HDR NIC");
  th_fini(&h);
}

Test(platform, host_names_and_xml)
{
  struct th h;
  th_init(&h, "atlas-800t-a2", a2_exact, 20);
  const struct ic_topo *t = ic_sim_topo(h.sim);
  cr_assert_eq(ic_topo_platform_ranks(t), 24, "whole nodes are generated");
  struct npu_buf xml = {0};
  struct ic_platform_stats st;
  ic_platform_xml(t, &xml, &st);
  const char *s = npu_buf_str(&xml);
  cr_assert(strstr(s, "<host id=\"r23\""));
  cr_assert(strstr(s, "<link id=\"n2.p7-p6\" bandwidth=\"56000000000Bps\" latency=\"0s\"/>"));
  cr_assert(strstr(s, "prefix=\"r\" suffix=\".nic\" radical=\"0-23\""));
  cr_assert(strstr(s, "latency=\"1") == NULL, "every link latency is zero");
  cr_assert_eq(st.hosts, 48);
  cr_assert_eq(st.links, 3 * 56);
  cr_assert_eq(st.routes, 3 * 56);
  npu_buf_release(&xml);
  char name[32];
  ic_topo_host_name(t, 5, IC_CLASS_NIC, name, sizeof name);
  cr_assert_str_eq(name, "r5.nic");
  ic_topo_host_name(t, 5, IC_CLASS_MESH, name, sizeof name);
  cr_assert_str_eq(name, "r5");
  th_fini(&h);
}
