/*
 * test_sync.c - synchronisation: cross-core flags between a cube core and its vector cores,
 * pipe barriers of all pipes, and the all-core barrier, with their latencies.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/support/chip.h"
#include "cores/kernel.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
}

TestSuite(sync, .init = setup, .timeout = 30);

static struct core_tile tile(uint8_t space, uint8_t layout, uint8_t dtype, uint64_t addr, uint32_t rows,
                             uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space, .layout = layout,
                            .dtype = dtype};
}

static void mmad(struct core_tp *t)
{
  struct core_tile a = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP16, 0, 128, 256);
  struct core_tile b = tile(MEM_L0B, CORE_ZN, NPU_DT_FP16, 0, 256, 128);
  struct core_tile c = tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, 128, 128);
  c.c0 = 16;
  core_mmad(t, &c, &a, &b, 128, 256, 128, true);
}

static void vexp(struct core_tp *t)
{
  struct core_vec v = {.op = CORE_VEC_EXP, .dtype = NPU_DT_FP16, .repeat = 100, .dst_blk = 1, .src0_blk = 1,
                       .dst_rep = 8, .src0_rep = 8, .mask = {~0ull, ~0ull}, .dst = 65536, .src0 = 0};
  core_vec(t, &v);
}

/* AIC: mmad, then tell both vector cores; each AIV: wait, then a vector exp. */
static void mix_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  core_select(t, CORE_SUB_AIC);
  mmad(t);
  core_xset(t, CORE_PIPE_M, CORE_SUB_AIV0, 0);
  core_xset(t, CORE_PIPE_M, CORE_SUB_AIV1, 0);
  for (int s = CORE_SUB_AIV0; s <= CORE_SUB_AIV1; s++) {
    core_select(t, (enum core_sub)s);
    core_xwait(t, CORE_PIPE_V, CORE_SUB_AIC, 0);
    vexp(t);
  }
}

static double run(struct core_kernel *k)
{
  struct mem_gm *gm = mem_gm_create();
  struct core_result r;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT};
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, k, &o, &r, &d), 0, "%s", d.msg);
  mem_gm_destroy(gm);
  return r.time_s - r.launch_s;
}

static double mmad_s(void)
{
  return 8.0 * 8 * 16 / (sys.chip.clock_hz * sys.chip.calib.cube.value); /* at the preset's cube share */
}

static double vexp_s(void)
{
  return 100 * sys.chip.vector.transcendental_cycles / sys.chip.clock_hz;
}

Test(sync, cross_core_flags_order_cube_then_vector)
{
  struct core_kernel k = {.name = "mix", .mode = CORE_MODE_MIX, .block_dim = 1, .nblocks = 1, .block = mix_block};
  double want = mmad_s() + sys.chip.sync.cross_core_s + vexp_s();
  double t = run(&k);
  cr_assert(fabs(t - want) < 1e-12, "got %.12g, want %.12g", t, want);
}

static void fence_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  mmad(t);              /* M pipe busy */
  core_fence(t);        /* every pipe waits for it */
  core_scalar(t, 1000); /* then the scalar unit works */
}

Test(sync, fence_waits_for_every_pipe)
{
  struct core_kernel k = {.name = "fence", .mode = CORE_MODE_CUBE, .block_dim = 1, .nblocks = 1, .block = fence_block};
  double want = mmad_s() + 1000 / sys.chip.clock_hz;
  double t = run(&k);
  cr_assert(fabs(t - want) < 1e-12, "got %.12g, want %.12g", t, want);
}

static void sync_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  core_scalar(t, b == 3 ? 5000 : 10); /* core 3 is late */
  core_sync_all(t);
  core_scalar(t, 100);
}

Test(sync, all_core_barrier_waits_for_the_latest_core)
{
  struct core_kernel k = {.name = "sync", .mode = CORE_MODE_CUBE, .block_dim = 8, .nblocks = 8, .block = sync_block};
  double want = 5000 / sys.chip.clock_hz + sys.chip.sync.all_core_s + 100 / sys.chip.clock_hz;
  double t = run(&k);
  cr_assert(fabs(t - want) < 1e-12, "got %.12g, want %.12g", t, want);
}

static void trailing_sync_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  core_scalar(t, 5000); /* equal blocks: the analytic fidelity times one per class */
  core_sync_all(t);     /* nothing after it: the kernel still ends only when the barrier releases */
}

/* A trailing all-core barrier is part of the kernel: every core waits at it (chip.sync.all_core
 * after the latest arrival) before the kernel ends. It used to release without moving the end. */
static void trailing_barrier(enum core_fidelity fid)
{
  struct core_kernel k = {.name = "trailing_sync", .mode = CORE_MODE_CUBE, .block_dim = 8, .nblocks = 8,
                          .block = trailing_sync_block};
  struct mem_gm *gm = mem_gm_create();
  struct core_result r;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = fid};
  int rc = fid == CORE_FIDELITY_EVENT ? core_launch_standalone(&sys.chip, gm, &k, &o, &r, &d)
                                      : core_launch(&sys.chip, gm, &k, &o, &r, &d);
  cr_assert_eq(rc, 0, "%s", d.msg);
  mem_gm_destroy(gm);
  double want = 5000 / sys.chip.clock_hz + sys.chip.sync.all_core_s, t = r.time_s - r.launch_s;
  cr_assert(fabs(t - want) < 1e-12, "%s: got %.12g, want %.12g", fid == CORE_FIDELITY_EVENT ? "event" : "analytic",
            t, want);
}

Test(sync, trailing_all_core_barrier_counts_in_kernel_time)
{
  trailing_barrier(CORE_FIDELITY_ANALYTIC);
  trailing_barrier(CORE_FIDELITY_EVENT); /* one engine per process: last */
}

static void scalar_issue_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  core_scalar(t, 3000); /* address arithmetic before the instruction can issue */
  mmad(t);
}

Test(sync, instructions_issue_after_the_scalar_work_before_them)
{
  struct core_kernel k = {.name = "scalar", .mode = CORE_MODE_CUBE, .block_dim = 1, .nblocks = 1,
                          .block = scalar_issue_block};
  double want = 3000 / sys.chip.clock_hz + mmad_s();
  double t = run(&k);
  cr_assert(fabs(t - want) < 1e-12, "got %.12g, want %.12g", t, want);
}

#include <string.h>

#include "common/trace.h"
#include "report/chrome.h"

Test(sync, chrome_trace_has_a_track_per_pipe_per_core)
{
  struct core_kernel k = {.name = "mix", .mode = CORE_MODE_MIX, .block_dim = 2, .nblocks = 2, .block = mix_block};
  struct npu_trace tr = {0};
  struct mem_gm *gm = mem_gm_create();
  struct core_result r;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT, .trace = &tr};
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &r, &d), 0, "%s", d.msg);
  cr_assert_eq(tr.n, 6, "2 mmads and 4 vector exps, got %zu events", tr.n);
  struct npu_buf b = {0};
  rpt_chrome_write(&tr, &b);
  const char *x = npu_buf_str(&b);
  cr_assert(strstr(x, "\"traceEvents\":[") != NULL);
  cr_assert(strstr(x, "\"args\":{\"name\":\"aic1\"}") != NULL, "%s", x);
  cr_assert(strstr(x, "\"args\":{\"name\":\"aiv3\"}") != NULL);
  cr_assert(strstr(x, "{\"name\":\"mmad\",\"ph\":\"X\",\"ts\":0.000000,") != NULL, "%s", x);
  cr_assert(strstr(x, "\"name\":\"exp\"") != NULL);
  npu_buf_release(&b);
  npu_trace_release(&tr);
  mem_gm_destroy(gm);
}

/*
 * GM copies next to an all-core barrier or a fence, on several cores, two blocks per core. Each
 * pipe's arrival at a barrier marker must count once, and each GM copy must start once. Two
 * stale wake-ups used to break that: in the analytic fidelity a GM copy resolves at once and
 * wakes its own pipe, which then parks at the marker right behind it; in both fidelities a pipe
 * that empties makes its unit emit the next block and wakes itself, then runs on into that block.
 * The stale wake-up re-resolved the parked pipe: its barrier arrival counted twice (an early
 * release, or a barrier that never releases: a false deadlock) or its GM copy started twice
 * (its bytes counted twice).
 *   COPIES_BARRIER_SCALAR  copies, barrier, scalar work (the next block's copies wait for it)
 *   COPIES_BARRIER         copies, barrier: a pipe empties at the release and emits the next
 *                          block, whose GM copy comes first
 *   BARRIER_COPIES         barrier, copies: the pipe that emits the next block runs on into its
 *                          barrier marker
 */
enum gm_barrier_layout { COPIES_BARRIER_SCALAR, COPIES_BARRIER, BARRIER_COPIES };

struct gm_barrier {
  uint64_t in, out, bytes;
  bool fence;
  enum gm_barrier_layout layout;
};

static void gm_barrier_block(struct core_tp *t, void *ctx, uint64_t b)
{
  const struct gm_barrier *g = ctx;
  uint32_t elems = (uint32_t)(g->bytes / 2);
  struct core_tile src = tile(MEM_GM, CORE_ND, NPU_DT_FP16, g->in + b * g->bytes, 1, elems);
  struct core_tile ub0 = tile(MEM_UB, CORE_ND, NPU_DT_FP16, 0, 1, elems);
  struct core_tile ub1 = tile(MEM_UB, CORE_ND, NPU_DT_FP16, 65536, 1, elems);
  struct core_tile dst = tile(MEM_GM, CORE_ND, NPU_DT_FP16, g->out + b * g->bytes, 1, elems);
  for (int step = 0; step < 2; step++) {
    if ((step == 0) == (g->layout == BARRIER_COPIES)) {
      if (g->fence)
        core_fence(t);
      else
        core_sync_all(t);
    } else {
      core_copy(t, &ub0, &src); /* MTE2 */
      core_copy(t, &dst, &ub1); /* MTE3 */
    }
  }
  if (g->layout == COPIES_BARRIER_SCALAR) core_scalar(t, 100);
}

enum { GB_CORES = 4, GB_PER_CORE = 2, GB_BYTES = 32768 };

/* Runs the kernel at one fidelity; returns the time without the launch overhead. */
static double gm_barrier_run(bool fence, enum gm_barrier_layout layout, enum core_fidelity fid)
{
  const char *fname = fid == CORE_FIDELITY_EVENT ? "event" : "analytic";
  struct mem_gm *gm = mem_gm_create();
  struct gm_barrier g = {.bytes = GB_BYTES, .fence = fence, .layout = layout};
  uint64_t blocks = (uint64_t)GB_CORES * GB_PER_CORE;
  g.in = mem_gm_add(gm, "in", blocks * g.bytes, NULL);
  g.out = mem_gm_add(gm, "out", blocks * g.bytes, NULL);
  struct core_kernel k = {.name = fence ? "gm_fence" : "gm_sync_all", .mode = CORE_MODE_VECTOR,
                          .block_dim = GB_CORES, .nblocks = blocks, .ctx = &g, .block = gm_barrier_block};
  struct core_result r;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = fid};
  int rc = fid == CORE_FIDELITY_EVENT ? core_launch_standalone(&sys.chip, gm, &k, &o, &r, &d)
                                      : core_launch(&sys.chip, gm, &k, &o, &r, &d);
  cr_assert_eq(rc, 0, "%s, layout %d, %s fidelity: %s", k.name, layout, fname, d.msg);
  cr_assert_eq(r.gm_read_bytes, blocks * g.bytes, "%s: every GM read starts once", fname);
  cr_assert_eq(r.gm_write_bytes, blocks * g.bytes, "%s: every GM write starts once", fname);
  cr_assert_eq(r.aiv[CORE_PIPE_MTE2].instructions, blocks, "%s", fname);
  cr_assert_eq(r.aiv[CORE_PIPE_MTE3].instructions, blocks, "%s", fname);
  mem_gm_destroy(gm);
  return r.time_s - r.launch_s;
}

/* Per block, the read (setup, 32 KiB at the core's port, then the HBM latency until its data has
 * landed) is the slower of the two copies; a barrier costs chip.sync.all_core (a fence nothing)
 * after the last arrival, the last one too (the kernel ends when every core has left it). */
static double gm_barrier_want(bool fence, enum gm_barrier_layout layout)
{
  const struct arch_chip *c = &sys.chip;
  double rd = c->dma.setup_cycles / c->clock_hz + GB_BYTES / (c->dma.gm_read_bytes_per_cycle * c->clock_hz);
  double s = fence ? 0 : c->sync.all_core_s, copies = GB_PER_CORE * (rd + c->hbm.latency_s);
  switch (layout) {
  case COPIES_BARRIER_SCALAR: return copies + GB_PER_CORE * (s + 100 / c->clock_hz);
  case COPIES_BARRIER: return copies + GB_PER_CORE * s;
  case BARRIER_COPIES: return copies + GB_PER_CORE * s;
  }
  return 0;
}

static void gm_barrier_check(bool fence, enum gm_barrier_layout layout)
{
  double want = gm_barrier_want(fence, layout);
  double an = gm_barrier_run(fence, layout, CORE_FIDELITY_ANALYTIC);
  cr_assert(fabs(an - want) <= 1e-9 * want, "analytic: got %.12g, want %.12g", an, want);
  double ev = gm_barrier_run(fence, layout, CORE_FIDELITY_EVENT); /* one engine per process: last */
  cr_assert(fabs(ev - want) <= 1e-3 * want, "event: got %.12g, want %.12g", ev, want);
}

Test(sync, gm_copies_then_all_core_barrier_then_scalar)
{
  gm_barrier_check(false, COPIES_BARRIER_SCALAR);
}

Test(sync, gm_copies_then_all_core_barrier)
{
  gm_barrier_check(false, COPIES_BARRIER);
}

Test(sync, all_core_barrier_then_gm_copies)
{
  gm_barrier_check(false, BARRIER_COPIES);
}

Test(sync, gm_copies_then_fence_then_scalar)
{
  gm_barrier_check(true, COPIES_BARRIER_SCALAR);
}

Test(sync, gm_copies_then_fence)
{
  gm_barrier_check(true, COPIES_BARRIER);
}

Test(sync, fence_then_gm_copies)
{
  gm_barrier_check(true, BARRIER_COPIES);
}
