/*
 * test_mx_gemm.c - the quantized GEMM variants of `gemm`: MX (OCP Microscaling, fp8 e4m3 / e5m2
 * and fp4 elements with E8M0 scales per 32 along K, the 950's MX cube inputs) and W4A8 (int8
 * activations x int4 weights, per-channel or per-group scales, CANN's MSD split on the A2 int4
 * cube). Functional results against the double-precision references at odd shapes, what chips
 * without the inputs say, the MX mmad's own checks, and timing properties: MXFP8 reaches about
 * the share of the fp8 peak that bf16 reaches of its peak; W4A8 weight streaming reads about half
 * the bytes of W8A8 and takes less time.
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"

static struct arch_system b2, c950;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&c950, "ascend-950pr", NULL);
}

TestSuite(mx_gemm, .init = setup, .timeout = 180);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(mx_gemm, mxfp8_both_element_types_at_odd_shapes)
{
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=33", "n=17", "k=96", "dtype=mxfp8"));
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=150", "n=301", "k=1056", "dtype=fp8_e4m3", "quant=mx"));
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=150", "n=301", "k=1056", "dtype=fp8_e5m2", "quant=mx", "out=fp32"));
}

Test(mx_gemm, mx_transposed_split_k_and_fp4)
{
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=130", "n=70", "k=608", "dtype=fp8_e5m2", "quant=mx", "trans_a=true", "trans_b=true"));
  struct op_result r = ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
                             ARGS("m=40", "n=260", "k=2080", "dtype=mxfp8", "split_k=3"));
  cr_assert_eq(r.nkernels, 3, "fill, gemm, cast");
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=65", "n=77", "k=1600", "dtype=mxfp4"));
}

Test(mx_gemm, mx_event_fidelity_functional)
{
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_EVENT, true, ARGS("m=150", "n=270", "k=700", "dtype=fp8_e5m2", "quant=mx"));
}

Test(mx_gemm, w4a8_per_channel_and_per_group)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=130", "n=302", "k=600", "dtype=int8", "quant=w4a8"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=150", "n=300", "k=1024", "dtype=int8", "quant=w4a8", "group=128"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=129", "n=257", "k=768", "dtype=int8", "quant=w4a8", "group=256", "trans_b=true", "out=fp32"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=1", "n=2", "k=2", "dtype=int8", "quant=w4a8"));
}

Test(mx_gemm, w4a8_event_fidelity_functional)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_EVENT, true,
        ARGS("m=70", "n=330", "k=512", "dtype=int8", "quant=w4a8", "group=128", "out=fp16"));
}

Test(mx_gemm, chips_without_the_inputs_say_so)
{
  char msg[2048];
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=mxfp8"), msg), NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "command line: --dtype: ascend-910b2 has no mxfp8 cube input");
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=fp8_e5m2", "quant=mx"), msg),
               NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "command line: --dtype: ascend-910b2 has no fp8_e5m2 cube input");
  cr_assert_eq(ts_op_err(&c950.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=int8", "quant=w4a8"), msg),
               NPU_EUNSUPPORTED);
  cr_assert(strstr(msg, "--quant") && strstr(msg, "ascend-950pr has no int4 cube input"), "%s", msg);
  cr_assert_eq(ts_op_err(&c950.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=bf16", "quant=mx"), msg), NPU_EINVAL);
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=63", "dtype=int8", "quant=w4a8"), msg), NPU_EINVAL);
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=int8", "quant=w4a8", "split_k=2"), msg),
               NPU_EINVAL);
}

/* MX mmads the cube refuses: scales outside L0A, and a cube without MX inputs. */
static struct mem_gm *gm;
static uint64_t mm_scales_at;

static void mx_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  struct core_mmad mm = {.m = 16, .k = 64, .n = 16, .init = true, .mx = true, .sa = mm_scales_at, .sb = 4096};
  mm.a = (struct core_tile){.rows = 16, .cols = 64, .space = MEM_L0A, .layout = CORE_ZZ, .dtype = NPU_DT_FP8_E4M3};
  mm.b = (struct core_tile){.rows = 64, .cols = 16, .space = MEM_L0B, .layout = CORE_ZN, .dtype = NPU_DT_FP8_E4M3};
  mm.c = (struct core_tile){.rows = 16, .cols = 16, .space = MEM_L0C, .layout = CORE_NZ, .dtype = NPU_DT_FP32,
                            .c0 = 16};
  core_mmad_ex(t, &mm);
}

static int try_mx(const struct arch_chip *chip, uint64_t scales_at, char *msg)
{
  mm_scales_at = scales_at;
  gm = mem_gm_create();
  struct core_kernel k = {.name = "mx", .mode = CORE_MODE_CUBE, .block_dim = 1, .nblocks = 1, .block = mx_block};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
  int rc = core_launch(chip, gm, &k, &o, &res, &d);
  npu_diag_format(&d, msg, 2048);
  mem_gm_destroy(gm);
  return rc;
}

Test(mx_gemm, mx_mmad_checks_its_scales)
{
  char msg[2048];
  cr_assert_eq(try_mx(&c950.chip, 4096, msg), 0, "%s", msg);
  cr_assert_eq(try_mx(&c950.chip, 65536 - 512, msg), 0, "%s", msg); /* 16 x 2 scales: one 512-byte unit */
  cr_assert_eq(try_mx(&c950.chip, 65536, msg), NPU_EINVAL);
  cr_assert(strstr(msg, "L0A scale tile: l0a overflow"), "%s", msg);
  cr_assert_eq(try_mx(&b2.chip, 4096, msg), NPU_EUNSUPPORTED);
  cr_assert(strstr(msg, "has no fp8_e4m3 input"), "%s", msg);
}

/* Achieved over peak FLOP/s of a GEMM of the input type's MAC rate. */
static double peak_share(const struct arch_chip *c, const struct op_result *r, enum npu_dtype rate_of)
{
  double peak = (double)c->aic_count * c->cube.macs_per_cycle[rate_of] * 2 * c->clock_hz;
  return r->achieved_flops_per_s / peak;
}

Test(mx_gemm, mxfp8_runs_at_the_fp8_peak_share_bf16_has_at_its_peak)
{
  struct op_result bf = ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("m=8192", "n=8192", "k=8192", "dtype=bf16"));
  struct op_result mx = ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("m=8192", "n=8192", "k=8192", "dtype=mxfp8"));
  double sb = peak_share(&c950.chip, &bf, NPU_DT_BF16), sm = peak_share(&c950.chip, &mx, NPU_DT_FP8_E4M3);
  cr_assert(sm > 0.8 * sb && sm <= 1.0, "mxfp8 %.3f of the fp8 peak, bf16 %.3f of the bf16 peak", sm, sb);
  cr_assert_str_eq(mx.total.bottleneck, "cube_bound");
}

Test(mx_gemm, w4a8_weight_streaming_reads_half_the_bytes_of_w8a8)
{
  struct op_result w8 = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("m=16", "n=8192", "k=8192", "dtype=int8", "quant=w8a8"));
  struct op_result w4 = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("m=16", "n=8192", "k=8192", "dtype=int8", "quant=w4a8"));
  double ratio = (double)w4.total.gm_read_bytes / (double)w8.total.gm_read_bytes;
  cr_assert(ratio > 0.45 && ratio < 0.65, "w4a8 reads %.3f of w8a8's bytes", ratio);
  cr_assert_lt(w4.total.time_s, w8.total.time_s);
}
