/*
 * test_dropout.c - dropout with a given mask: exact against the reference (one rounding of
 * x / (1 - p)), every type, both fidelities; bad probabilities; and streaming at HBM speed.
 */
#include "tests/ops/opsupport.h"

#include <string.h>

#include "common/err.h"

static struct arch_system b2;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
}

TestSuite(dropout, .init = setup, .timeout = 60);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(dropout, every_type_matches_the_reference)
{
  ts_op(&b2.chip, "dropout", CORE_FIDELITY_ANALYTIC, true, ARGS("rows=37", "cols=1000", "dtype=bf16"));
  ts_op(&b2.chip, "dropout", CORE_FIDELITY_ANALYTIC, true, ARGS("rows=37", "cols=1000", "dtype=fp16", "p=0.5"));
  ts_op(&b2.chip, "dropout", CORE_FIDELITY_ANALYTIC, true, ARGS("rows=3", "cols=9000", "dtype=fp32", "p=0"));
}

Test(dropout, event_fidelity)
{
  ts_op(&b2.chip, "dropout", CORE_FIDELITY_EVENT, true, ARGS("rows=64", "cols=4096"));
}

Test(dropout, bad_probability)
{
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "dropout", ARGS("rows=4", "cols=4", "p=1"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--p") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "dropout", ARGS("rows=4", "cols=4", "dtype=int8"), msg), NPU_EINVAL);
}

Test(dropout, streams_at_hbm_speed)
{
  /* reads 2 B + 1/8 B and writes 2 B per element: within 25% of that traffic at the HBM rate */
  struct op_result r = ts_op(&b2.chip, "dropout", CORE_FIDELITY_ANALYTIC, false, ARGS("rows=8192", "cols=8192"));
  double bytes = 8192.0 * 8192 * (4 + 0.125), ideal = bytes / b2.chip.hbm.bw_bytes_per_s;
  double body = r.total.time_s - r.total.launch_s;
  cr_expect(body > 0.95 * ideal && body < 1.25 * ideal, "body %g s, HBM time %g s", body, ideal);
}
