/*
 * test_indexed.c - indexed copies (GM address = addr + index x index_stride, the index read from
 * UB when the copy runs) in the L2 reuse models of both fidelities. A functional run knows the
 * index and the models see the row really touched; a timing-only run does not, and the models
 * take every indexed copy to touch lines nobody touched before (a gather of distinct rows: all
 * misses, no reuse) -- not the unindexed base row over and over, which looked like L2 hits.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "cores/kernel.h"
#include "memory/gm.h"
#include "tests/support/chip.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
}

TestSuite(indexed, .init = setup, .timeout = 120);

static struct core_tile tile(uint8_t space, uint8_t dtype, uint64_t addr, uint32_t rows, uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space, .layout = CORE_ND,
                            .dtype = dtype};
}

/* Every block gathers one row of `row_bytes` from table into one of two UB buffers; MTE2 streams
 * the gathers back to back. The unit's indices are written to UB once, by vector dups of one
 * element each: the i-th block of unit u reads row u x per_core + i (distinct) or row 3. */
struct gather {
  uint64_t table, row_bytes;
  bool distinct;
  int dim, per_core;
};

static void gather_begin(struct core_tp *t, void *ctx)
{
  const struct gather *g = ctx;
  for (int i = 0; i < g->per_core; i++) {
    struct core_vec v = {.op = CORE_VEC_DUP, .dtype = NPU_DT_INT32, .repeat = 1, .dst_blk = 1, .dst_rep = 8,
                         .dst = 0, .scalar = g->distinct ? core_unit(t) * g->per_core + i : 3};
    v.mask[i / 64] = 1ull << (i % 64);
    core_vec(t, &v);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
}

static void gather_block(struct core_tp *t, void *ctx, uint64_t b)
{
  const struct gather *g = ctx;
  uint32_t elems = (uint32_t)(g->row_bytes / 2);
  uint64_t i = b / (uint64_t)g->dim; /* the block's ordinal in its unit */
  struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true, .index_ub = 4 * i,
                         .index_stride = g->row_bytes};
  cp.src = tile(MEM_GM, NPU_DT_FP16, g->table, 1, elems);
  cp.dst = tile(MEM_UB, NPU_DT_FP16, 32768 + (i % 2) * g->row_bytes, 1, elems);
  core_copy_ex(t, &cp);
}

static struct core_kernel gather_kernel(struct gather *g, int cores, int per_core)
{
  g->dim = cores;
  g->per_core = per_core;
  return (struct core_kernel){.name = "gather", .mode = CORE_MODE_VECTOR, .block_dim = cores,
                              .nblocks = (uint64_t)cores * per_core, .ctx = g, .unit_begin = gather_begin,
                              .block = gather_block};
}

static struct core_result launch(struct mem_gm *gm, const struct core_kernel *k, enum core_fidelity fid,
                                 bool functional)
{
  struct core_result r;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = fid, .functional = functional};
  int rc = fid == CORE_FIDELITY_EVENT ? core_launch_standalone(&sys.chip, gm, k, &o, &r, &d)
                                      : core_launch(&sys.chip, gm, k, &o, &r, &d);
  cr_assert_eq(rc, 0, "%s", d.msg);
  return r;
}

/* 48 vector cores gather 32 rows of 32 KiB each, timing-only: 48 MiB of distinct rows (the index
 * is unknown), so nothing hits in L2 and the time is the HBM's: 48 ports of 198 GB/s ask for
 * 9.5 TB/s, HBM gives 1.6 TB/s (L2 hits would have taken a third of that time). */
Test(indexed, timing_only_gathers_miss_and_are_hbm_bound)
{
  enum { CORES = 48, PER_CORE = 32, ROW = 32768 };
  struct mem_gm *gm = mem_gm_create();
  struct gather g = {.row_bytes = ROW};
  g.table = mem_gm_add(gm, "table", (uint64_t)CORES * PER_CORE * ROW, NULL);
  struct core_kernel k = gather_kernel(&g, CORES, PER_CORE);
  uint64_t bytes = (uint64_t)CORES * PER_CORE * ROW;
  double hbm_s = (double)bytes / (sys.chip.hbm.bw_bytes_per_s * sys.chip.calib.hbm.value);
  struct core_result an = launch(gm, &k, CORE_FIDELITY_ANALYTIC, false);
  struct core_result ev = launch(gm, &k, CORE_FIDELITY_EVENT, false); /* one engine per process */
  const struct core_result *rs[2] = {&an, &ev};
  const char *names[2] = {"analytic", "event"};
  for (int i = 0; i < 2; i++) {
    const struct core_result *r = rs[i];
    double t = r->time_s - r->launch_s;
    cr_assert_eq(r->gm_read_bytes, bytes, "%s: read %llu", names[i], (unsigned long long)r->gm_read_bytes);
    cr_assert_eq(r->l2_hit_bytes, 0, "%s: %llu bytes hit in L2", names[i], (unsigned long long)r->l2_hit_bytes);
    cr_assert_eq(r->hbm_bytes, bytes, "%s: HBM bytes %llu", names[i], (unsigned long long)r->hbm_bytes);
    cr_assert(t >= 0.999 * hbm_s && t <= 1.1 * hbm_s, "%s: %.4g us, HBM-bound %.4g us", names[i], t * 1e6,
              hbm_s * 1e6);
    printf("timing-only gather, %s: %.4g us (HBM-bound %.4g us)\n", names[i], t * 1e6, hbm_s * 1e6);
  }
  mem_gm_destroy(gm);
}

/* Functional: the models see the rows really read. */
static void functional_gather(bool distinct, enum core_fidelity fid)
{
  enum { CORES = 4, PER_CORE = 8, ROW = 32768, ROWS = CORES * PER_CORE };
  const char *name = fid == CORE_FIDELITY_EVENT ? "event" : "analytic";
  uint16_t *table = calloc((size_t)ROWS * ROW / 2, sizeof *table);
  struct mem_gm *gm = mem_gm_create();
  struct gather g = {.row_bytes = ROW, .distinct = distinct};
  g.table = mem_gm_add(gm, "table", (uint64_t)ROWS * ROW, table);
  struct core_kernel k = gather_kernel(&g, CORES, PER_CORE);
  uint64_t bytes = (uint64_t)CORES * PER_CORE * ROW;
  struct core_result r = launch(gm, &k, fid, true);
  cr_assert_eq(r.gm_read_bytes, bytes, "%s", name);
  cr_assert_eq(r.l2_hit_bytes + r.hbm_bytes, bytes, "%s", name);
  if (distinct) /* every row read once: nothing to reuse */
    cr_assert_eq(r.l2_hit_bytes, 0, "%s: %llu bytes hit", name, (unsigned long long)r.l2_hit_bytes);
  else /* one row over and over: all but its first read hit (the analytic model within 1%) */
    cr_assert(r.l2_hit_bytes >= bytes - ROW - bytes / 100, "%s: %llu of %llu bytes hit", name,
              (unsigned long long)r.l2_hit_bytes, (unsigned long long)bytes);
  mem_gm_destroy(gm);
  free(table);
}

Test(indexed, functional_gathers_of_one_row_hit)
{
  functional_gather(false, CORE_FIDELITY_ANALYTIC);
  functional_gather(false, CORE_FIDELITY_EVENT);
}

Test(indexed, functional_gathers_of_distinct_rows_miss)
{
  functional_gather(true, CORE_FIDELITY_ANALYTIC);
  functional_gather(true, CORE_FIDELITY_EVENT);
}
