/*
 * test_unit_ctx.c - per-unit kernel contexts: the launch gives every unit its own zeroed context
 * of the declared size, which lives across the unit's blocks; a kernel that declares a core limit
 * is refused on a chip with more cores, never run on fewer.
 */
#include <criterion/criterion.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "cores/kernel.h"
#include "tests/support/chip.h"

static struct arch_system sys;
static struct mem_gm *gm;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
  gm = mem_gm_create();
}

static void teardown(void)
{
  mem_gm_destroy(gm);
}

TestSuite(unit_ctx, .init = setup, .fini = teardown, .timeout = 30);

#define UNITS 20
#define MAGIC 0x5eedu

struct unit_state {
  uint32_t magic;   /* set by unit_begin */
  uint32_t blocks;  /* blocks this unit emitted */
  char pad[100];    /* an odd size: the launch aligns each unit's context itself */
};

struct probe {
  int not_zeroed, no_magic, misaligned; /* violations seen */
  void *ctx_of[UNITS];                  /* last context each unit saw */
  uint32_t blocks_of[UNITS];            /* blocks counted in the unit's context, at unit_end */
};

static void p_begin(struct core_tp *t, void *ctx)
{
  struct probe *p = ctx;
  struct unit_state *s = core_unit_ctx(t);
  static const struct unit_state zero;
  if (memcmp(s, &zero, sizeof zero)) p->not_zeroed++;
  if ((uintptr_t)s % alignof(max_align_t)) p->misaligned++;
  s->magic = MAGIC;
  p->ctx_of[core_unit(t)] = s;
}

static void p_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct probe *p = ctx;
  struct unit_state *s = core_unit_ctx(t);
  (void)b;
  if (s->magic != MAGIC) p->no_magic++;
  s->blocks++;
  core_scalar(t, 10);
}

static void p_end(struct core_tp *t, void *ctx)
{
  struct probe *p = ctx;
  struct unit_state *s = core_unit_ctx(t);
  p->blocks_of[core_unit(t)] = s->blocks;
}

static struct core_kernel probe_kernel(struct probe *p, uint64_t nblocks)
{
  return (struct core_kernel){.name = "probe", .mode = CORE_MODE_CUBE, .block_dim = UNITS, .nblocks = nblocks,
                              .ctx = p, .unit_begin = p_begin, .unit_end = p_end, .block = p_block,
                              .unit_ctx_bytes = sizeof(struct unit_state)};
}

Test(unit_ctx, every_unit_has_its_own_zeroed_context_across_its_blocks)
{
  struct probe p = {0};
  struct core_kernel k = probe_kernel(&p, 50);
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  cr_assert_eq(p.not_zeroed, 0);
  cr_assert_eq(p.no_magic, 0);
  cr_assert_eq(p.misaligned, 0);
  for (int u = 0; u < UNITS; u++) {
    cr_assert_eq(p.blocks_of[u], u < 50 % UNITS ? 3u : 2u, "unit %d", u); /* blocks u, u + 20, u + 40 */
    for (int v = 0; v < u; v++) cr_assert_neq(p.ctx_of[u], p.ctx_of[v], "units %d and %d share a context", u, v);
  }
}

/* The analytic fidelity runs sampled units on their own: each run starts from a zeroed context. */
Test(unit_ctx, analytic_runs_start_from_zeroed_contexts)
{
  struct probe p = {0};
  struct core_kernel k = probe_kernel(&p, 50);
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  cr_assert_eq(p.not_zeroed, 0);
  cr_assert_eq(p.no_magic, 0);
  cr_assert_gt(res.time_s, 0);
}

static void null_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)b;
  *(int *)ctx += core_unit_ctx(t) == NULL;
  core_scalar(t, 10);
}

Test(unit_ctx, no_declared_context_means_null)
{
  int nulls = 0;
  struct core_kernel k = {.name = "plain", .mode = CORE_MODE_CUBE, .block_dim = 2, .nblocks = 2, .ctx = &nulls,
                          .block = null_block};
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  cr_assert_eq(nulls, 2);
}

/* A declared limit below the chip's cores refuses the launch, whatever block_dim asks for. */
Test(unit_ctx, a_chip_with_more_cores_than_the_kernel_supports_is_refused)
{
  struct probe p = {0};
  struct core_kernel k = probe_kernel(&p, 4);
  k.block_dim = 4;
  k.max_units = 8;
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch(&sys.chip, gm, &k, &o, &res, &d), NPU_EUNSUPPORTED);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_str_eq(msg, "probe: the chip has 24 cube cores; this kernel supports at most 8");
  k.max_units = 24; /* exactly the chip's cores: runs */
  npu_diag_clear(&d);
  cr_assert_eq(core_launch(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
}
