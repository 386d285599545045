/*
 * test_eltwise.c - one eager elementwise operation: every function and type pair against the
 * reference (two roundings of the output type; n not a multiple of the 2048-element tile), both
 * fidelities; bad types and sizes; and streaming at HBM speed, whose closed form is the bytes it
 * moves (inputs read once, output written once).
 */
#include "tests/ops/opsupport.h"

#include <string.h>

#include "common/err.h"

static struct arch_system b2, a100;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&a100, "nvidia-a100-80gb", NULL);
}

TestSuite(eltwise, .init = setup, .timeout = 60);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(eltwise, every_function_matches_the_reference)
{
  const char *fns[] = {"fn=cast",  "fn=add",  "fn=mul",   "fn=square", "fn=silu",
                       "fn=neg",   "fn=rsqrt", "fn=sum64", "fn=acc"};
  const char *types[][2] = {{"in=bf16", "out=bf16"}, {"in=bf16", "out=fp32"}, {"in=fp32", "out=bf16"},
                            {"in=fp16", "out=fp16"}, {"in=fp32", "out=fp32"}};
  for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      ts_op(&b2.chip, "eltwise", CORE_FIDELITY_ANALYTIC, true, ARGS("n=5056", fns[f], types[t][0], types[t][1]));
}

/* one event-fidelity run per test: one SimGrid engine per process */
Test(eltwise, event_fidelity_on_a_split_chip)
{
  ts_op(&b2.chip, "eltwise", CORE_FIDELITY_EVENT, true, ARGS("n=70001", "fn=silu", "in=bf16", "out=bf16"));
}

Test(eltwise, accumulation_reads_its_accumulator_in_the_output_type)
{
  /* acc's a is the buffer (--out's type): an fp32 accumulator moves 2 B more per element than an
   * add of two bf16 inputs into fp32 */
  struct op_result add = ts_op(&a100.chip, "eltwise", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("n=67108864", "fn=add", "in=bf16", "out=fp32"));
  struct op_result acc = ts_op(&a100.chip, "eltwise", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("n=67108864", "fn=acc", "in=bf16", "out=fp32"));
  double extra = 67108864.0 * 2 / a100.chip.hbm.bw_bytes_per_s, d = acc.total.time_s - add.total.time_s;
  cr_expect(d > 0.8 * extra && d < 1.35 * extra, "acc - add %g s, 2 B per element at HBM speed %g s", d, extra);
}

Test(eltwise, event_fidelity_on_a_gpu)
{
  ts_op(&a100.chip, "eltwise", CORE_FIDELITY_EVENT, true, ARGS("n=70001", "fn=mul", "in=fp32", "out=bf16"));
}

Test(eltwise, bad_types)
{
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "eltwise", ARGS("n=4", "in=int8"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--in") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "eltwise", ARGS("n=4", "out=fp8_e4m3"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--out") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "eltwise", ARGS("n=100", "fn=sum64"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--n") != NULL, "%s", msg);
}

Test(eltwise, streams_at_hbm_speed)
{
  /* add, bf16 -> fp32: reads 2 x 2 B and writes 4 B per element; mul fp32 -> fp32: 12 B; acc of
   * a bf16 gradient into an fp32 buffer: reads 4 + 2 B, writes 4 B */
  struct {
    const char *fn, *in, *out;
    double bytes;
  } c[] = {{"fn=add", "in=bf16", "out=fp32", 8}, {"fn=mul", "in=fp32", "out=fp32", 12}, {"fn=cast", "in=fp32", "out=bf16", 6},
         {"fn=acc", "in=bf16", "out=fp32", 10}};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    struct op_result r = ts_op(&a100.chip, "eltwise", CORE_FIDELITY_ANALYTIC, false, ARGS("n=67108864", c[i].fn, c[i].in, c[i].out));
    double ideal = 67108864.0 * c[i].bytes / a100.chip.hbm.bw_bytes_per_s, body = r.total.time_s - r.total.launch_s;
    cr_expect(body > 0.95 * ideal && body < 1.35 * ideal, "%s %s -> %s: body %g s, HBM time %g s", c[i].fn, c[i].in,
              c[i].out, body, ideal);
  }
}
