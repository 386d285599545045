/*
 * test_moe_ops.c - the MoE routing operators: moe_gating, moe_permute, moe_unpermute.
 *
 * Functional runs (analytic fidelity, every instruction executed on real data) against each
 * operator's double-precision / host reference: gating within fp32 tolerances and with exact
 * ties in ascending expert order, permute bit for bit (rows, row map, destination rows, counts),
 * unpermute within one fp32 rounding per operation plus the output rounding. Shapes cover tokens
 * that are not multiples of 32, 8 / 64 / 160 / 256 / 384 experts, top-1 / 2 / 6 / 8 / 32, groups
 * of 32 and of other sizes, skewed routing, several cores per token range and several passes per
 * core. One event-fidelity functional run per operator; the error messages; and timing sanity on
 * DeepSeek-V3 shapes (16384 tokens, 7168 hidden, 256 experts, top-8) on ascend-910b2.
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"

static struct arch_system b2;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define FUNC(op, ...) ts_op(&b2.chip, op, CORE_FIDELITY_ANALYTIC, true, ARGS(__VA_ARGS__))
#define TIME(op, ...) ts_op(&b2.chip, op, CORE_FIDELITY_ANALYTIC, false, ARGS(__VA_ARGS__))

static void err_is(const char *op, const char *const *kv, int code, const char *want)
{
  char msg[2048];
  int rc = ts_op_err(&b2.chip, op, kv, msg);
  cr_assert_eq(rc, code, "%s: status %d (%s)", op, rc, msg);
  cr_assert_str_eq(msg, want);
}

static double body(const struct op_result *r)
{
  return r->total.time_s - r->total.launch_s;
}

/* ------------------------------------------------------------------ moe_gating */

TestSuite(moe_gating, .init = setup, .timeout = 60);

Test(moe_gating, mixtral_softmax_top2)
{
  FUNC("moe_gating", "tokens=100", "experts=8", "topk=2", "norm=true");
  FUNC("moe_gating", "tokens=37", "experts=8", "topk=2", "dtype=fp32");
}

Test(moe_gating, deepseek_v3_sigmoid_groups)
{
  struct op_result r = FUNC("moe_gating", "tokens=300", "experts=256", "topk=8", "score=sigmoid", "groups=8",
                            "topk_groups=4", "norm=true", "scaling=2.5", "dtype=fp32");
  cr_assert(strstr(r.check_summary, "group-limited") != NULL, "%s", r.check_summary);
  FUNC("moe_gating", "tokens=77", "experts=256", "topk=8", "score=sigmoid", "groups=8", "topk_groups=4",
       "norm=true", "scaling=2.5");
}

Test(moe_gating, sixty_four_experts)
{
  FUNC("moe_gating", "tokens=77", "experts=64", "topk=6", "dtype=fp32");
  FUNC("moe_gating", "tokens=77", "experts=64", "topk=1", "score=sigmoid", "dtype=fp16");
  FUNC("moe_gating", "tokens=40", "experts=64", "topk=32", "norm=true", "scaling=1.5");
}

Test(moe_gating, groups_not_a_multiple_of_32)
{
  /* DeepSeek-V2: 160 experts in 8 groups of 20; and 4 groups of 16, 2 groups of 4 */
  FUNC("moe_gating", "tokens=50", "experts=160", "topk=6", "groups=8", "topk_groups=3");
  FUNC("moe_gating", "tokens=41", "experts=64", "topk=4", "groups=4", "topk_groups=2", "score=sigmoid");
  FUNC("moe_gating", "tokens=33", "experts=8", "topk=8", "groups=2", "topk_groups=2", "norm=true");
  FUNC("moe_gating", "tokens=33", "experts=8", "topk=3", "groups=2", "topk_groups=1", "score=sigmoid");
}

Test(moe_gating, many_experts_and_groups)
{
  FUNC("moe_gating", "tokens=50", "experts=384", "topk=8", "score=sigmoid", "norm=true", "scaling=2.827");
  FUNC("moe_gating", "tokens=20", "experts=512", "topk=32", "groups=16", "topk_groups=4", "score=sigmoid");
  FUNC("moe_gating", "tokens=1", "experts=128", "topk=8", "norm=true");
}

Test(moe_gating, tiles_and_cores)
{
  FUNC("moe_gating", "tokens=203", "experts=256", "topk=8", "score=sigmoid", "groups=8", "topk_groups=4",
       "tile=8", "cores=3");
  FUNC("moe_gating", "tokens=203", "experts=32", "topk=4", "tile=64", "cores=2");
}

Test(moe_gating, event_fidelity_functional)
{
  ts_op(&b2.chip, "moe_gating", CORE_FIDELITY_EVENT, true,
        ARGS("tokens=70", "experts=256", "topk=8", "score=sigmoid", "groups=8", "topk_groups=4", "norm=true",
             "scaling=2.5"));
}

Test(moe_gating, errors)
{
  err_is("moe_gating", ARGS("tokens=8", "experts=8", "topk=9"), NPU_EINVAL, "command line: --topk: top-9 of 8 experts");
  err_is("moe_gating", ARGS("tokens=8", "experts=256", "groups=3"), NPU_EINVAL,
         "command line: --groups: 3 groups do not divide 256 experts");
  err_is("moe_gating", ARGS("tokens=8", "experts=256", "groups=8", "topk_groups=9"), NPU_EINVAL,
         "command line: --topk_groups: keeps 9 of 8 groups");
  err_is("moe_gating", ARGS("tokens=8", "experts=64", "topk=9", "groups=8", "topk_groups=1"), NPU_EINVAL,
         "command line: --topk: top-9 needs 9 experts in the kept groups, which hold 8 (topk_groups 1 x 8 experts)");
  err_is("moe_gating", ARGS("tokens=8", "experts=128", "topk=40"), NPU_EUNSUPPORTED,
         "command line: --topk: at most 32 (a merge keeps 32 proposals per list), got 40");
  err_is("moe_gating", ARGS("tokens=8", "experts=64", "groups=32"), NPU_EUNSUPPORTED,
         "command line: --groups: at most 16 groups (one sort32 ranks them), got 32");
  err_is("moe_gating", ARGS("tokens=8", "dtype=int8"), NPU_EUNSUPPORTED,
         "command line: --dtype: logits must be fp16, bf16 or fp32, got int8");
  err_is("moe_gating", ARGS("tokens=64", "experts=2048", "topk=8", "tile=64"), NPU_ENOFIT,
         "command line: --tile: 64 tokens of 2048 experts need 2837248 bytes of UB, has 196608");
  err_is("moe_gating", ARGS("tokens=64", "experts=16384", "topk=8"), NPU_ENOFIT,
         "command line: --experts: a tile of 8 tokens of 16384 experts needs 2830592 bytes of UB, has 196608");
}

/* DeepSeek-V3's router on 16384 tokens: every vector core busy, bound by the vector unit (the
 * sort and merges), about 250 vector cycles per token with this model's sort32 / mrgsort costs;
 * and linear in tokens. */
Test(moe_gating, deepseek_v3_timing)
{
  struct op_result r = TIME("moe_gating", "tokens=16384", "experts=256", "topk=8", "score=sigmoid", "groups=8",
                            "topk_groups=4", "norm=true", "scaling=2.5", "dtype=fp32");
  cr_assert_str_eq(r.total.bottleneck, "vec_bound");
  cr_assert_eq(r.total.aiv_used, 48);
  double cycles = body(&r) * b2.chip.clock_hz * 48 / 16384;
  cr_assert(cycles > 150 && cycles < 400, "%g vector cycles per token", cycles);
  struct op_result r2 = TIME("moe_gating", "tokens=32768", "experts=256", "topk=8", "score=sigmoid", "groups=8",
                             "topk_groups=4", "norm=true", "scaling=2.5", "dtype=fp32");
  cr_assert(body(&r2) > 1.9 * body(&r) && body(&r2) < 2.1 * body(&r), "%g vs %g", body(&r2), body(&r));
}

/* ------------------------------------------------------------------ moe_permute */

TestSuite(moe_permute, .init = setup, .timeout = 60);

Test(moe_permute, mixtral_shapes)
{
  FUNC("moe_permute", "tokens=100", "hidden=200", "experts=8", "topk=2");
  FUNC("moe_permute", "tokens=77", "hidden=33", "experts=8", "topk=1", "dtype=int8");
}

Test(moe_permute, deepseek_experts_skewed)
{
  FUNC("moe_permute", "tokens=257", "hidden=64", "experts=256", "topk=8", "skew=1");
  FUNC("moe_permute", "tokens=333", "hidden=100", "experts=64", "topk=6", "dtype=fp16", "skew=1.2", "cores=7",
       "tile=3");
}

Test(moe_permute, several_histogram_chunks_and_wide_rows)
{
  /* 12000 slots per core: more than one histogram chunk; 20000 bf16 columns: two row chunks */
  FUNC("moe_permute", "tokens=3000", "hidden=16", "experts=256", "topk=8", "cores=2", "dtype=fp32");
  FUNC("moe_permute", "tokens=9", "hidden=20000", "experts=8", "topk=2");
  FUNC("moe_permute", "tokens=5", "hidden=16", "experts=384", "topk=8");
}

Test(moe_permute, event_fidelity_functional)
{
  ts_op(&b2.chip, "moe_permute", CORE_FIDELITY_EVENT, true,
        ARGS("tokens=150", "hidden=96", "experts=64", "topk=6", "skew=1"));
}

Test(moe_permute, errors)
{
  err_is("moe_permute", ARGS("tokens=8", "hidden=8", "experts=4", "topk=5"), NPU_EINVAL,
         "command line: --topk: top-5 of 4 experts");
  err_is("moe_permute", ARGS("tokens=8", "hidden=8", "dtype=int4"), NPU_EUNSUPPORTED,
         "command line: --dtype: rows of int4 are not byte addressable");
  err_is("moe_permute", ARGS("tokens=8", "hidden=8", "topk=8", "tile=32"), NPU_EINVAL,
         "command line: --tile: at most 31 tokens of top-8 (248 slots per tile)");
  err_is("moe_permute", ARGS("tokens=64", "hidden=16384", "topk=2", "tile=8"), NPU_ENOFIT,
         "command line: --tile: 8 tokens of 16384 bf16 columns need 532480 bytes of UB, has 196608");
}

/* DeepSeek-V3 dispatch, 16384 tokens x 7168 bf16, top-8: x is read once and y written once
 * ((k + 1) x tokens x hidden x 2 bytes: 9/16 of a gather that reads a row per expert), bound by
 * the stores (MTE3) at the HBM bandwidth. Besides the rows: the ids are read twice (histogram,
 * then destinations), every core reads every core's histogram, and each slot writes its row_map
 * entry (4 bytes in one 128-byte burst) and its dst_row entry. */
Test(moe_permute, deepseek_v3_timing)
{
  struct op_result r = TIME("moe_permute", "tokens=16384", "hidden=7168", "experts=256", "topk=8");
  double row = 7168.0 * 2, T = 16384, k = 8;
  cr_assert_str_eq(r.total.bottleneck, "mte3_bound");
  cr_assert_eq(r.total.aiv_used, 48);
  double rd = (double)r.total.gm_read_bytes, wr = (double)r.total.gm_write_bytes;
  double rd_model = T * row + 2 * T * k * 4 + 48.0 * 48 * 256 * 4;
  double wr_model = T * k * row + T * k * (128 + 4) + 48.0 * 256 * 4;
  cr_assert(fabs(rd / rd_model - 1) < 1e-3, "read %g, expected %g", rd, rd_model);
  cr_assert(fabs(wr / wr_model - 1) < 1e-3, "written %g, expected %g", wr, wr_model);
  double hbm = b2.chip.hbm.bw_bytes_per_s * b2.chip.calib.hbm.value;
  /* the scatters of a timing-only run write lines nobody touched before (their index is unknown),
   * so they all reach HBM, as the rows of a real dispatch do: no faster than the HBM allows */
  cr_assert((double)r.total.hbm_bytes > 0.99 * (rd + wr), "HBM %g of %g bytes", (double)r.total.hbm_bytes, rd + wr);
  cr_assert(body(&r) > 0.99 * (rd + wr) / hbm && body(&r) < 1.1 * (rd + wr) / hbm, "%g s for %g bytes", body(&r),
            rd + wr);
}

/* ------------------------------------------------------------------ moe_unpermute */

TestSuite(moe_unpermute, .init = setup, .timeout = 60);

Test(moe_unpermute, combine)
{
  FUNC("moe_unpermute", "tokens=100", "hidden=200", "experts=8", "topk=2");
  FUNC("moe_unpermute", "tokens=37", "hidden=130", "experts=64", "topk=8", "skew=1", "residual=true",
       "dtype=fp32");
  FUNC("moe_unpermute", "tokens=45", "hidden=300", "experts=8", "topk=1", "dtype=fp16", "chunk=100", "tile=4");
  FUNC("moe_unpermute", "tokens=33", "hidden=64", "experts=256", "topk=8", "residual=true");
}

Test(moe_unpermute, event_fidelity_functional)
{
  ts_op(&b2.chip, "moe_unpermute", CORE_FIDELITY_EVENT, true,
        ARGS("tokens=60", "hidden=96", "experts=16", "topk=4", "residual=true"));
}

Test(moe_unpermute, errors)
{
  err_is("moe_unpermute", ARGS("tokens=8", "hidden=8", "experts=4", "topk=5"), NPU_EINVAL,
         "command line: --topk: top-5 of 4 experts");
  err_is("moe_unpermute", ARGS("tokens=8", "hidden=8", "dtype=int8"), NPU_EUNSUPPORTED,
         "command line: --dtype: expert outputs must be fp16, bf16 or fp32, got int8");
  err_is("moe_unpermute", ARGS("tokens=8", "hidden=20000", "topk=8", "chunk=8192"), NPU_ENOFIT,
         "command line: --chunk: 8192 columns of 8 rows (tile 1) need 428800 bytes of UB, has 196608");
}

/* DeepSeek-V3 combine: every expert row read once and every output row written once, bound by
 * the gathers (MTE2) at the HBM bandwidth: a timing-only gather's index is unknown, so the L2
 * models take it to read lines nobody touched before -- from HBM, as the distinct rows of a real
 * combine come (about 1.41 ms on ascend-910b2; see moe_unpermute.c). */
Test(moe_unpermute, deepseek_v3_traffic)
{
  struct op_result r = TIME("moe_unpermute", "tokens=16384", "hidden=7168", "experts=256", "topk=8");
  double row = 7168.0 * 2, T = 16384, k = 8;
  double rd = (double)r.total.gm_read_bytes, wr = (double)r.total.gm_write_bytes;
  cr_assert(rd > T * k * row && rd < 1.01 * T * k * row, "read %g", rd);
  cr_assert(wr >= T * row && wr < 1.01 * T * row, "written %g", wr);
  cr_assert_eq(r.total.aiv_used, 48);
  cr_assert_str_eq(r.total.bottleneck, "mte2_bound");
  double hbm = b2.chip.hbm.bw_bytes_per_s * b2.chip.calib.hbm.value;
  cr_assert(body(&r) > (rd + wr) / hbm && body(&r) < 1.15 * (rd + wr) / hbm, "%g s for %g bytes at %g B/s", body(&r),
            rd + wr, hbm);
}
