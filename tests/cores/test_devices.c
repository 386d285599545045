/*
 * test_devices.c - launches over several devices of a server (core_launch_opts.ranks): copies into
 * another device's memory cross the link between the two, notifies carry signals between devices,
 * and a signal's misuse is an error with a message, never a wrong time.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "common/err.h"
#include "cores/kernel.h"
#include "engine/engine.h"
#include "memory/gm.h"
#include "memory/platform.h"
#include "tests/support/chip.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "atlas-800t-a2", NULL);
}

TestSuite(devices, .init = setup, .timeout = 60);

#define ELEMS 32768u /* fp16: 64 KiB per copy */
#define COPIES 16u

struct put {
  uint64_t dst;      /* a tensor on device 1 */
  int notifies;      /* device 0 notifies device 1's signal 0 this many times */
  uint32_t wait_for; /* device 1 waits for this many */
};

static struct core_tile row(uint8_t space, uint64_t addr)
{
  return (struct core_tile){.addr = addr, .rows = 1, .cols = ELEMS, .ld = ELEMS, .space = space,
                            .layout = CORE_ND, .dtype = NPU_DT_FP16};
}

/* Device 0's vector core writes COPIES x 64 KiB from UB into device 1's tensor, then notifies;
 * device 1's vector core waits for the notifies. */
static void put_block(struct core_tp *t, void *ctx, uint64_t b)
{
  const struct put *p = ctx;
  (void)b;
  if (core_rank(t) == 0) {
    struct core_tile ub = row(MEM_UB, 0);
    for (uint32_t i = 0; i < COPIES; i++) {
      struct core_tile dst = row(MEM_GM, p->dst + (uint64_t)i * ELEMS * 2);
      core_copy(t, &dst, &ub);
    }
    for (int i = 0; i < p->notifies; i++) core_notify(t, CORE_PIPE_MTE3, 1, 0);
  } else {
    core_notify_wait(t, CORE_PIPE_S, 0, p->wait_for);
    core_scalar(t, 1);
  }
}

static double link_bytes_per_s(void)
{
  return sys.node.link.bw_bytes_per_s * sys.node.link_efficiency.value;
}

struct group_run {
  struct core_kernel k;
  struct mem_gm *gm;
  struct core_launch_opts o;
  struct core_result r;
  struct npu_diag d;
  int rc;
};

static void group_actor(void *arg)
{
  struct group_run *g = arg;
  g->rc = core_launch(&sys.chip, g->gm, &g->k, &g->o, &g->r, &g->d);
}

/* Start the engine on a two-device server (once per process) and run the put kernel. */
static void run_put(struct group_run *g, struct put *p, enum core_fidelity fid)
{
  memset(g, 0, sizeof *g);
  g->gm = mem_gm_create();
  p->dst = mem_gm_add(g->gm, "dst", (uint64_t)COPIES * ELEMS * 2, NULL);
  mem_gm_set_device(g->gm, p->dst, 1);
  g->k = (struct core_kernel){.name = "put", .mode = CORE_MODE_VECTOR, .block_dim = 1, .nblocks = 1, .ctx = p,
                              .block = put_block};
  g->o = (struct core_launch_opts){.fidelity = fid, .ranks = 2, .link_latency_s = sys.node.link.latency_s};
  npu_diag_clear(&g->d);
  if (fid == CORE_FIDELITY_ANALYTIC) {
    g->rc = core_launch(&sys.chip, g->gm, &g->k, &g->o, &g->r, &g->d);
  } else {
    struct npu_buf xml = {0};
    mem_platform_group_xml(&sys.chip, 2, link_bytes_per_s(), &xml);
    cr_assert_eq(npu_engine_init(npu_buf_str(&xml), &g->d), 0, "%s", g->d.msg);
    npu_buf_release(&xml);
    npu_engine_spawn("group", npu_engine_host("d0.l2"), group_actor, g);
    npu_engine_run();
  }
  mem_gm_destroy(g->gm);
}

/* 1 MiB over one link, then the notify's flight: the body takes bytes / link rate + the link's
 * latency for the data and again for the notify (plus each copy's DMA set-up, pipelined under the
 * transfer); the link carries exactly the bytes written. */
Test(devices, a_remote_write_crosses_the_link_and_a_notify_takes_its_latency)
{
  struct put p = {.notifies = 1, .wait_for = 1};
  struct group_run g;
  run_put(&g, &p, CORE_FIDELITY_EVENT);
  cr_assert_eq(g.rc, 0, "%s", g.d.msg);
  double bytes = (double)COPIES * ELEMS * 2;
  cr_assert_eq(g.r.link_bytes, (uint64_t)bytes);
  cr_assert_eq(g.r.ranks, 2);
  double want = bytes / link_bytes_per_s() + 2 * sys.node.link.latency_s;
  double body = g.r.time_s - g.r.launch_s;
  cr_assert(fabs(body - want) <= 0.03 * want, "body %.4g us, closed form %.4g us", body * 1e6, want * 1e6);
}

Test(devices, a_signal_with_more_notifies_than_its_wait_asked_for_is_an_error)
{
  struct put p = {.notifies = 2, .wait_for = 1};
  struct group_run g;
  run_put(&g, &p, CORE_FIDELITY_EVENT);
  cr_assert_eq(g.rc, NPU_EINVAL);
  cr_assert(strstr(g.d.msg, "signal 0 of device 1 received 2 notifies, but a wait asked for 1"), "%s", g.d.msg);
}

Test(devices, a_wait_for_notifies_that_never_come_is_a_deadlock_naming_the_signal)
{
  struct put p = {.notifies = 1, .wait_for = 2};
  struct group_run g;
  run_put(&g, &p, CORE_FIDELITY_EVENT);
  cr_assert_eq(g.rc, NPU_EINVAL);
  cr_assert(strstr(g.d.msg, "device 1 aiv0 pipe S waits for 2 notifies of signal 0 (1 arrived)"), "%s", g.d.msg);
}

Test(devices, a_launch_over_devices_is_refused_at_analytic_fidelity)
{
  struct put p = {.notifies = 1, .wait_for = 1};
  struct group_run g;
  run_put(&g, &p, CORE_FIDELITY_ANALYTIC);
  cr_assert_eq(g.rc, NPU_EUNSUPPORTED);
  cr_assert(strstr(g.d.msg, "event fidelity only"), "%s", g.d.msg);
}
