/*
 * test_many_cores.c - operators on chips with more cores than any preset: per-unit state lives in
 * the launch's unit contexts, so every core is used and results stay exact (functional runs on
 * 300 cube / 600 vector cores, more units than the old 256-entry tables held); the one kernel
 * with a real core limit (quantize / dequantize: a 32-byte partial maximum per vector core in UB)
 * runs up to it and is refused above it with the operator and the core count, never clamped.
 */
#include "tests/ops/opsupport.h"

#include <string.h>

#include "common/err.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define AN CORE_FIDELITY_ANALYTIC

static struct arch_system big;

static void setup(void)
{
  ts_load_system(&big, "ascend-950pr", ARGS("chip.aic_count=300", "chip.aiv_count=600"));
}

TestSuite(many_cores, .init = setup, .timeout = 600);

Test(many_cores, vector_operators_use_every_core_and_stay_exact)
{
  struct op_result r = ts_op(&big.chip, "softmax", AN, true, ARGS("rows=600", "cols=8192"));
  cr_assert_eq(r.total.aiv_used, 600);
  r = ts_op(&big.chip, "moe_permute", AN, true, ARGS("tokens=4096", "hidden=64"));
  cr_assert_eq(r.total.aiv_used, 600);
  r = ts_op(&big.chip, "moe_unpermute", AN, true, ARGS("tokens=8192", "hidden=64"));
  cr_assert_gt(r.total.aiv_used, 256);
  r = ts_op(&big.chip, "moe_gating", AN, true, ARGS("tokens=8192"));
  cr_assert_gt(r.total.aiv_used, 256);
}

Test(many_cores, cube_operators_use_every_core_and_stay_exact)
{
  /* 320 blocks of 128 x 256 (the tiling fixed: the search would take 288 rows-balanced blocks, one wave) */
  struct op_result r = ts_op(&big.chip, "gemm", AN, true, ARGS("m=2560", "n=4096", "k=64", "tile_m=128"));
  cr_assert_eq(r.total.aic_used, 300);
  /* the forward timing-only: its functional check fails whenever a unit runs more than one block,
   * on any chip and core count (as before unit contexts; to be fixed on its own) */
  r = ts_op(&big.chip, "flash_attention", AN, false, ARGS("batch=160", "heads=2", "seq=128", "dim=64"));
  cr_assert_eq(r.total.aic_used, 300);
  r = ts_op(&big.chip, "flash_attention", AN, true, ARGS("batch=160", "heads=2", "seq=128", "dim=64", "pass=bwd"));
  cr_assert_eq(r.total.aic_used, 300);
}

Test(many_cores, quantize_beyond_its_core_limit_is_refused)
{
  struct arch_system huge;
  ts_load_system(&huge, "ascend-950pr", ARGS("chip.aic_count=4096", "chip.aiv_count=8192"));
  char msg[2048];
  cr_assert_eq(ts_op_err(&huge.chip, "quantize", ARGS("rows=64", "cols=4096"), msg), NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "quantize: the chip has 8192 vector cores; this kernel supports at most 6748 (a 32-byte "
                        "partial maximum per core in UB)");
  cr_assert_eq(ts_op_err(&huge.chip, "dequantize", ARGS("rows=64", "cols=4096"), msg), NPU_EUNSUPPORTED);
  cr_assert(strstr(msg, "dequantize: the chip has 8192 vector cores; this kernel supports at most ") == msg, "%s", msg);
  /* at the limit it runs */
  struct arch_system edge;
  ts_load_system(&edge, "ascend-950pr", ARGS("chip.aic_count=3374", "chip.aiv_count=6748"));
  ts_op(&edge.chip, "quantize", AN, true, ARGS("rows=64", "cols=4096"));
}
