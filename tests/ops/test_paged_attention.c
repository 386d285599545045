/*
 * test_paged_attention.c - decode attention over a paged KV cache (ops/paged_attention.c):
 * functional results against the double-precision reference through the same block table
 * (GQA and MHA, a last block and a last partition that are partly filled, one partition and
 * several with the reduction kernel, dim 64, 128, 192 and 256, bf16 and fp16, a coupled chip, event
 * fidelity), the two fidelities agreeing, the time never below the cache's bytes over HBM
 * bandwidth, and the refusals with their messages.
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"

static struct arch_system b2, h100;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&h100, "nvidia-h100-sxm", NULL);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define AN CORE_FIDELITY_ANALYTIC
#define EV CORE_FIDELITY_EVENT

TestSuite(paged_attention, .init = setup, .timeout = 120);

Test(paged_attention, matches_the_reference_through_the_block_table)
{
  /* one partition, GQA 4 */
  ts_op(&b2.chip, "paged_attention", AN, true, ARGS("batch=2", "heads=8", "kv_heads=2", "context=256"));
  /* a partly filled last block and last partition, two partitions reduced */
  ts_op(&b2.chip, "paged_attention", AN, true, ARGS("batch=3", "heads=8", "kv_heads=2", "context=1000"));
  /* MHA, small blocks, dim 64, fp16, many partitions */
  ts_op(&b2.chip, "paged_attention", AN, true,
        ARGS("batch=1", "heads=4", "context=777", "dim=64", "block_size=16", "partition=128", "dtype=fp16"));
  /* a context shorter than one block */
  ts_op(&b2.chip, "paged_attention", AN, true, ARGS("batch=2", "heads=2", "context=5", "block_size=32"));
}

Test(paged_attention, event_fidelity_and_a_coupled_chip_compute_the_same)
{
  ts_op(&b2.chip, "paged_attention", EV, true, ARGS("batch=2", "heads=8", "kv_heads=2", "context=640", "partition=256"));
  ts_op(&h100.chip, "paged_attention", AN, true, ARGS("batch=2", "heads=8", "kv_heads=1", "context=300"));
}

Test(paged_attention, fidelities_agree_and_the_cache_read_bounds_the_time)
{
  const char *const *kv = ARGS("batch=16", "heads=32", "kv_heads=8", "context=4096");
  struct op_result a = ts_op(&b2.chip, "paged_attention", AN, false, kv);
  struct op_result e = ts_op(&b2.chip, "paged_attention", EV, false, kv);
  double ta = a.total.time_s, te = e.total.time_s;
  cr_assert(fabs(ta - te) < 0.15 * te, "analytic %.1f us, event %.1f us", ta * 1e6, te * 1e6);
  /* K and V of every sequence and key/value head are read once: 16 x 4096 x 8 x 128 x 2 x 2 bytes */
  double bytes = 16.0 * 4096 * 8 * 128 * 2 * 2;
  const struct arch_chip *c = &b2.chip;
  double floor_s = bytes / (c->hbm.bw_bytes_per_s * c->calib.hbm.value);
  cr_assert_gt(te - e.total.launch_s, floor_s, "%.1f us body, HBM floor %.1f us", (te - e.total.launch_s) * 1e6, floor_s * 1e6);
  cr_assert_eq(e.nkernels, 2, "8 partitions of 512 tokens: the attention kernel and the reduction");
  cr_assert(a.total.hbm_bytes >= bytes, "the cache is read from HBM: %llu of %.0f bytes", (unsigned long long)a.total.hbm_bytes, bytes);
}

/* Heads wider than 128 (Gemma's 256, 192): each row's 64-column groups folded in turn, fewer
 * cache rows widened at a time (the wider K/V blocks leave less of the UB), against the
 * reference on the 910B2 and the H100, two partitions reduced, at both fidelities. */
Test(paged_attention, wide_heads_match_the_reference)
{
  ts_op(&b2.chip, "paged_attention", AN, true, ARGS("batch=3", "heads=8", "kv_heads=2", "context=700", "dim=256"));
  ts_op(&b2.chip, "paged_attention", AN, true, ARGS("batch=2", "heads=4", "context=300", "dim=192", "dtype=fp16"));
  ts_op(&h100.chip, "paged_attention", AN, true, ARGS("batch=3", "heads=8", "kv_heads=2", "context=700", "dim=256"));
  ts_op(&b2.chip, "paged_attention", EV, true, ARGS("batch=2", "heads=8", "kv_heads=2", "context=600", "dim=256"));
}

Test(paged_attention, one_partition_needs_no_reduction)
{
  struct op_result r = ts_op(&b2.chip, "paged_attention", AN, false, ARGS("batch=4", "heads=8", "context=512"));
  cr_assert_eq(r.nkernels, 1);
}

static void expect_error(const char *const *kv, const char *msg)
{
  char got[2048];
  cr_assert_neq(ts_op_err(&b2.chip, "paged_attention", kv, got), 0, "refused: %s", got);
  cr_assert(strstr(got, msg), "%s", got);
}

Test(paged_attention, refuses_shapes_it_cannot_run_naming_the_option)
{
  expect_error(ARGS("heads=8", "kv_heads=3", "context=64"), "--kv_heads: must divide --heads, got 3");
  expect_error(ARGS("heads=8", "context=64", "dim=96"), "--dim: a multiple of 64 up to 256, got 96");
  expect_error(ARGS("heads=8", "context=64", "block_size=24"), "--block_size: a multiple of 16 up to 128, got 24");
  expect_error(ARGS("heads=8", "context=64", "partition=200"), "--partition: a multiple of --block_size up to 4096, got 200");
  expect_error(ARGS("heads=8", "context=64", "dtype=fp32"), "--dtype: bf16 or fp16, got fp32");
  expect_error(ARGS("heads=64", "kv_heads=1", "context=4096", "partition=4096"), "--partition: the tiling does not fit");
  expect_error(ARGS("heads=128", "kv_heads=1", "context=64"), "--heads: at most 64 query heads per key/value head, got 128");
}
