/*
 * test_vector_ops.c - the vector-core operators (ops/norm.c, softmax.c, swiglu.c, rope.c,
 * causal_conv1d.c, cross_entropy.c, adamw.c, quant.c): functional results against each operator's
 * double-precision reference within the tolerance its check() states (small and edge shapes:
 * rows that do not fill the last tile, row lengths that are not a multiple of 64, rows cut into
 * several UB chunks, every storage type), one event-fidelity functional run per family, tilings
 * that do not fit and types the chip lacks (exact messages), and timing sanity: the streaming
 * operators run at HBM bandwidth on large shapes.
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

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define AN CORE_FIDELITY_ANALYTIC
#define EV CORE_FIDELITY_EVENT

/* bytes moved over the kernel body (launch overhead excluded), against HBM x calib.hbm */
static double hbm_share(const struct arch_chip *chip, const struct op_result *r, double bytes)
{
  double hbm = chip->hbm.bw_bytes_per_s * chip->calib.hbm.value;
  return bytes / (r->total.time_s - r->total.launch_s) / hbm;
}

static bool streaming_bound(const char *b)
{
  return !strcmp(b, "mte2_bound") || !strcmp(b, "mte3_bound");
}

static void expect_error(const struct arch_chip *chip, const char *op, const char *const *kv, int rc, const char *msg)
{
  char got[2048];
  cr_assert_eq(ts_op_err(chip, op, kv, got), rc, "%s: %s", op, got);
  cr_assert_str_eq(got, msg);
}

/* ------------------------------------------------------------------ norms */

TestSuite(vector_norm, .init = setup, .timeout = 60);

Test(vector_norm, rms_norm_whole_rows_every_dtype)
{
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=37", "hidden=1000", "dtype=fp16"));
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=300", "hidden=40", "dtype=bf16"));
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=7", "hidden=130", "dtype=fp32", "residual=false"));
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=50", "hidden=2048", "dtype=fp32", "tile_rows=3"));
}

Test(vector_norm, rms_norm_rows_in_chunks)
{
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=3", "hidden=20000", "dtype=bf16", "tile_cols=4096"));
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=3", "hidden=9000", "dtype=fp32", "residual=false", "tile_cols=640"));
  ts_op(&b2.chip, "rms_norm", AN, true, ARGS("rows=2", "hidden=70000", "dtype=fp16")); /* chunked by itself */
}

Test(vector_norm, layer_norm_whole_rows_and_chunks)
{
  ts_op(&b2.chip, "layer_norm", AN, true, ARGS("rows=37", "hidden=1000", "dtype=fp16"));
  ts_op(&b2.chip, "layer_norm", AN, true, ARGS("rows=300", "hidden=40", "dtype=bf16"));
  ts_op(&b2.chip, "layer_norm", AN, true, ARGS("rows=20", "hidden=700", "dtype=fp32"));
  ts_op(&b2.chip, "layer_norm", AN, true, ARGS("rows=5", "hidden=3000", "dtype=bf16", "tile_cols=1024"));
  ts_op(&b2.chip, "layer_norm", AN, true, ARGS("rows=2", "hidden=50000", "dtype=fp32"));
}

Test(vector_norm, event_fidelity_functional)
{
  ts_op(&b2.chip, "rms_norm", EV, true, ARGS("rows=40", "hidden=3000", "dtype=bf16"));
}

Test(vector_norm, tilings_that_do_not_fit)
{
  expect_error(&b2.chip, "rms_norm", ARGS("rows=64", "hidden=8192", "tile_rows=16"), NPU_ENOFIT,
               "command line: --tile_rows: tiling 16 rows x 8192 columns does not fit: UB needs 2123520 bytes, has 196608");
  expect_error(&b2.chip, "rms_norm", ARGS("rows=64", "hidden=300000", "tile_cols=300000"), NPU_ENOFIT,
               "command line: --tile_cols: a whole row of 300000 columns does not fit: UB needs 5406720 bytes, has 196608");
  expect_error(&b2.chip, "layer_norm", ARGS("rows=4", "hidden=1000", "tile_cols=100"), NPU_EINVAL,
               "command line: --tile_cols: a chunk of a row must be a multiple of 64 columns, got 100");
}

Test(vector_norm, unsupported_dtype)
{
  expect_error(&b2.chip, "rms_norm", ARGS("rows=64", "hidden=8192", "dtype=int8"), NPU_EUNSUPPORTED,
               "command line: --dtype: int8 is not supported here (fp16, bf16 or fp32)");
}

/* 8192 x 8192 bf16 with the residual: 4 x 128 MiB through HBM; event fidelity (the analytic
 * estimate counts gamma, loaded once per core, as re-read). */
Test(vector_norm, rms_norm_8192_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "rms_norm", EV, false, ARGS("rows=8192", "hidden=8192", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 4.0 * 8192 * 8192 * 2);
  cr_assert(s > 0.7 && s < 1.3, "achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
  cr_assert_eq(r.total.aiv_used, 48);
}

Test(vector_norm, layer_norm_8192_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "layer_norm", EV, false, ARGS("rows=8192", "hidden=8192", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 2.0 * 8192 * 8192 * 2);
  cr_assert(s > 0.7 && s < 1.3, "achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
}

/* ------------------------------------------------------------------ softmax */

TestSuite(vector_softmax, .init = setup, .timeout = 60);

Test(vector_softmax, whole_rows_every_dtype)
{
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=37", "cols=1000", "dtype=fp16"));
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=300", "cols=40", "dtype=bf16"));
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=9", "cols=200", "dtype=fp32"));
}

Test(vector_softmax, online_over_chunks)
{
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=5", "cols=3000", "dtype=bf16", "tile_cols=1024"));
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=3", "cols=70000", "dtype=fp32"));
  ts_op(&b2.chip, "softmax", AN, true, ARGS("rows=2", "cols=100000", "dtype=fp16"));
}

Test(vector_softmax, event_fidelity_functional)
{
  ts_op(&b2.chip, "softmax", EV, true, ARGS("rows=30", "cols=5000", "dtype=bf16", "tile_cols=2048"));
}

Test(vector_softmax, bad_chunk)
{
  expect_error(&b2.chip, "softmax", ARGS("rows=64", "cols=100000", "tile_cols=60000"), NPU_EINVAL,
               "command line: --tile_cols: a chunk of a row must be a multiple of 64 columns, got 60000");
}

/* Event fidelity: at 1.6 TB/s the vector unit is ~70% busy, and the analytic estimate, floored at
 * the roofline, names whichever pipe it counts busier. */
Test(vector_softmax, softmax_8192_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "softmax", EV, false, ARGS("rows=8192", "cols=8192", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 2.0 * 8192 * 8192 * 2);
  cr_assert(s > 0.7 && s < 1.3, "achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
}

/* ------------------------------------------------------------------ cross entropy */

TestSuite(vector_ce, .init = setup, .timeout = 60);

Test(vector_ce, whole_rows_and_chunks)
{
  ts_op(&b2.chip, "cross_entropy", AN, true, ARGS("rows=37", "vocab=1000", "dtype=fp16"));
  ts_op(&b2.chip, "cross_entropy", AN, true, ARGS("rows=300", "vocab=40", "dtype=bf16"));
  ts_op(&b2.chip, "cross_entropy", AN, true, ARGS("rows=5", "vocab=3000", "dtype=bf16", "tile_cols=1024"));
  ts_op(&b2.chip, "cross_entropy", AN, true, ARGS("rows=3", "vocab=70000", "dtype=fp32"));
}

Test(vector_ce, event_fidelity_functional)
{
  ts_op(&b2.chip, "cross_entropy", EV, true, ARGS("rows=6", "vocab=32000", "dtype=bf16"));
}

Test(vector_ce, chunk_that_does_not_fit)
{
  expect_error(&b2.chip, "cross_entropy", ARGS("rows=64", "vocab=131072", "tile_cols=65536"), NPU_ENOFIT,
               "command line: --tile_cols: tiling 1 row x 65536 columns does not fit: UB needs 792320 bytes, has 196608");
}

/* A 128k vocabulary in bf16 reads 1 GiB once. On 910B the exp (transcendental_cycles per repeat)
 * makes the vector unit about as busy as HBM: the time stays within 35% of HBM's. */
Test(vector_ce, vocab_128k_streams_the_logits_once)
{
  struct op_result r = ts_op(&b2.chip, "cross_entropy", AN, false, ARGS("rows=4096", "vocab=131072", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 4096.0 * 131072 * 2);
  cr_assert(s > 0.74 && s < 1.05, "achieved %.3f of HBM", s);
  cr_assert((double)r.total.gm_read_bytes < 1.01 * 4096.0 * 131072 * 2, "logits read once");
}

/* ------------------------------------------------------------------ swiglu */

TestSuite(vector_swiglu, .init = setup, .timeout = 60);

Test(vector_swiglu, every_dtype_and_edge_tiles)
{
  ts_op(&b2.chip, "swiglu", AN, true, ARGS("rows=37", "ffn=1000", "dtype=fp16"));
  ts_op(&b2.chip, "swiglu", AN, true, ARGS("rows=300", "ffn=40", "dtype=bf16"));
  ts_op(&b2.chip, "swiglu", AN, true, ARGS("rows=5", "ffn=3000", "dtype=fp32", "tile_cols=1024"));
  ts_op(&b2.chip, "swiglu", AN, true, ARGS("rows=3", "ffn=20000", "dtype=bf16"));
}

Test(vector_swiglu, event_fidelity_functional)
{
  ts_op(&b2.chip, "swiglu", EV, true, ARGS("rows=40", "ffn=3000", "dtype=bf16"));
}

Test(vector_swiglu, tiling_that_does_not_fit)
{
  expect_error(&b2.chip, "swiglu", ARGS("rows=64", "ffn=8192", "tile_rows=8", "tile_cols=8192"), NPU_ENOFIT,
               "command line: --tile_rows: tiling 8 rows x 8192 columns does not fit: UB needs 1313280 bytes, has 196608");
}

Test(vector_swiglu, llama_ffn_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "swiglu", AN, false, ARGS("rows=8192", "ffn=11008", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 3.0 * 8192 * 11008 * 2);
  cr_assert(s > 0.7 && s < 1.3, "achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
}

/* ------------------------------------------------------------------ rope */

TestSuite(vector_rope, .init = setup, .timeout = 60);

Test(vector_rope, every_dtype_and_head_split)
{
  ts_op(&b2.chip, "rope", AN, true, ARGS("tokens=37", "heads=8", "head_dim=128", "dtype=fp16"));
  ts_op(&b2.chip, "rope", AN, true, ARGS("tokens=5", "heads=3", "head_dim=64", "dtype=fp32"));
  ts_op(&b2.chip, "rope", AN, true, ARGS("tokens=300", "heads=2", "head_dim=16", "dtype=bf16"));
  ts_op(&b2.chip, "rope", AN, true, ARGS("tokens=3", "heads=200", "head_dim=256", "dtype=bf16")); /* heads split */
  ts_op(&b2.chip, "rope", AN, true, ARGS("tokens=100", "heads=1", "head_dim=80", "dtype=fp32"));
}

Test(vector_rope, event_fidelity_functional)
{
  ts_op(&b2.chip, "rope", EV, true, ARGS("tokens=50", "heads=4", "head_dim=64", "dtype=bf16"));
}

Test(vector_rope, bad_shapes)
{
  expect_error(&b2.chip, "rope", ARGS("tokens=64", "heads=8", "head_dim=72"), NPU_EINVAL,
               "command line: --head_dim: must be a multiple of 16, got 72");
  expect_error(&b2.chip, "rope", ARGS("tokens=64", "heads=64", "head_dim=128", "tile_tokens=64"), NPU_ENOFIT,
               "command line: --tile_tokens: tiling 64 tokens x 64 heads x 128 does not fit: UB needs 6360576 bytes, has 196608");
}

Test(vector_rope, llama_rope_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "rope", AN, false, ARGS("tokens=8192", "heads=32", "head_dim=128", "dtype=bf16"));
  double s = hbm_share(&b2.chip, &r, 2.0 * 8192 * 32 * 128 * 2);
  cr_assert(s > 0.7 && s < 1.3, "achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
}

/* ------------------------------------------------------------------ causal_conv1d */

TestSuite(vector_conv, .init = setup, .timeout = 60);

/* Every dtype, with and without silu and bias, widths 1 to 16, tiles shorter than the halo (the
 * second tile's halo reaches into the sequence's start), several channel tiles, batches. */
Test(vector_conv, every_dtype_width_and_tile_edge)
{
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("seq=100", "channels=300"));
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("seq=37", "channels=1000", "width=3", "dtype=fp16", "bias=true"));
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("batch=2", "seq=64", "channels=64", "silu=false", "dtype=fp32"));
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("seq=20", "channels=5000", "tile_tokens=2", "bias=true"));
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("batch=3", "seq=7", "channels=4096", "width=16"));
  ts_op(&b2.chip, "causal_conv1d", AN, true, ARGS("seq=9", "channels=200", "width=1", "tile_channels=64"));
  ts_op(&c950.chip, "causal_conv1d", AN, true, ARGS("batch=2", "seq=50", "channels=2100"));
}

Test(vector_conv, event_fidelity_functional)
{
  ts_op(&b2.chip, "causal_conv1d", EV, true, ARGS("batch=2", "seq=40", "channels=1100", "bias=true"));
}

Test(vector_conv, bad_shapes)
{
  expect_error(&b2.chip, "causal_conv1d", ARGS("seq=64", "channels=64", "width=17"), NPU_EINVAL,
               "command line: --width: at most 16 taps, got 17");
  expect_error(&b2.chip, "causal_conv1d", ARGS("seq=64", "channels=300", "tile_channels=100"), NPU_EINVAL,
               "command line: --tile_channels: a tile narrower than channels must be a multiple of 64, got 100");
  expect_error(&b2.chip, "causal_conv1d", ARGS("seq=64", "channels=64", "dtype=int8"), NPU_EUNSUPPORTED,
               "command line: --dtype: int8 is not supported here (fp16, bf16 or fp32)");
  expect_error(&b2.chip, "causal_conv1d", ARGS("seq=64", "channels=4096", "tile_channels=4096", "tile_tokens=64"),
               NPU_ENOFIT, "command line: --tile_tokens: tiling 64 tokens x 4096 channels does not fit: UB needs "
               "4916224 bytes, has 196608");
}

/* Qwen3-Next's conv per TP-2 rank (4096 channels, width 4): vector-bound (four taps, silu's exp
 * and division per element) at a third of HBM or more, reading x about once (the halo rows of
 * each 9-token tile again, the weights once per core and channel tile). */
Test(vector_conv, qwen3_next_conv_reads_x_about_once)
{
  struct op_result r = ts_op(&b2.chip, "causal_conv1d", AN, false, ARGS("seq=4096", "channels=4096"));
  double x = 4096.0 * 4096 * 2;
  cr_assert(hbm_share(&b2.chip, &r, 2 * x) > 0.3, "achieved %.3f of HBM", hbm_share(&b2.chip, &r, 2 * x));
  cr_assert((double)r.total.gm_read_bytes < 1.4 * x, "read %.4g bytes of x's %.4g", (double)r.total.gm_read_bytes, x);
  cr_assert_str_eq(r.total.bottleneck, "vec_bound");
}

/* The backward is a declared proxy: two forward calls (input and weight gradients). */
Test(vector_conv, backward_is_two_forward_calls)
{
  const struct op_desc *d = op_find("causal_conv1d");
  cr_assert_eq(d->bwd.kind, OP_BWD_PROXY);
  struct op_call c, out[OP_MAX_BWD_CALLS];
  enum op_grad g[OP_MAX_BWD_CALLS];
  op_call_init(&c, "causal_conv1d");
  op_call_dim(&c, "seq", 4096);
  op_call_dim(&c, "channels", 4096);
  cr_assert(op_call_ok(&c));
  cr_assert_eq(op_call_backward(&c, out, g), 2);
  cr_assert(op_call_equal(&out[0], &c) && op_call_equal(&out[1], &c));
  cr_assert(g[0] == OP_GRAD_INPUT && g[1] == OP_GRAD_WEIGHT);
}

/* ------------------------------------------------------------------ adamw */

TestSuite(vector_adamw, .init = setup, .timeout = 60);

Test(vector_adamw, gradient_and_parameter_types)
{
  ts_op(&b2.chip, "adamw", AN, true, ARGS("n=1000", "grad=bf16"));
  ts_op(&b2.chip, "adamw", AN, true, ARGS("n=100000", "grad=fp32", "param=fp16", "step=10"));
  ts_op(&b2.chip, "adamw", AN, true, ARGS("n=77777", "grad=fp16", "step=3", "lr=3e-4", "wd=0.1"));
}

Test(vector_adamw, event_fidelity_functional)
{
  ts_op(&b2.chip, "adamw", EV, true, ARGS("n=30000", "grad=bf16", "step=5"));
}

Test(vector_adamw, bad_options)
{
  expect_error(&b2.chip, "adamw", ARGS("n=1000000", "tile=65536"), NPU_ENOFIT,
               "command line: --tile: tiles of 65536 elements do not fit: UB needs 2887168 bytes, has 196608");
  expect_error(&b2.chip, "adamw", ARGS("n=1000", "param=fp32"), NPU_EUNSUPPORTED,
               "command line: --param: the model's copy is bf16 or fp16, got fp32");
}

/* 28 bytes per parameter; the updates of p, m, v are in place, so their writes land in L2 lines
 * the step has just read: what reaches HBM is read at HBM bandwidth. */
Test(vector_adamw, step_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "adamw", AN, false, ARGS("n=100000000"));
  double hbm = b2.chip.hbm.bw_bytes_per_s * b2.chip.calib.hbm.value;
  double body = r.total.time_s - r.total.launch_s;
  double s = (double)r.total.hbm_bytes / body / hbm;
  cr_assert(s > 0.7 && s < 1.3, "HBM at %.3f of its bandwidth", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
  double gm = (double)(r.total.gm_read_bytes + r.total.gm_write_bytes);
  cr_assert(fabs(gm / 28e8 - 1) < 1e-3, "28 bytes per parameter, got %g", gm);
}

/* ------------------------------------------------------------------ quantize, dequantize */

TestSuite(vector_quant, .init = setup, .timeout = 60);

Test(vector_quant, mxfp8_is_bit_exact)
{
  ts_op(&c950.chip, "quantize", AN, true, ARGS("rows=300", "cols=512", "in=bf16", "dtype=mxfp8"));
  ts_op(&c950.chip, "quantize", AN, true, ARGS("rows=3", "cols=4000", "in=fp32", "dtype=mxfp8", "tile=2048"));
  ts_op(&c950.chip, "dequantize", AN, true, ARGS("rows=300", "cols=512", "out=bf16", "dtype=mxfp8"));
  ts_op(&c950.chip, "dequantize", AN, true, ARGS("rows=7", "cols=96", "out=fp32", "dtype=mxfp8"));
}

Test(vector_quant, fp8_e4m3_granularities)
{
  static const char *const g[] = {"granularity=tensor", "granularity=block1x128", "granularity=block128x128"};
  for (int i = 0; i < 3; i++) {
    ts_op(&c950.chip, "quantize", AN, true, ARGS("rows=300", "cols=384", "in=bf16", g[i]));
    ts_op(&c950.chip, "quantize", AN, true, ARGS("rows=130", "cols=256", "in=fp32", g[i]));
    ts_op(&c950.chip, "dequantize", AN, true, ARGS("rows=300", "cols=384", "out=fp16", g[i]));
    ts_op(&c950.chip, "dequantize", AN, true, ARGS("rows=130", "cols=256", "out=fp32", g[i]));
  }
}

Test(vector_quant, event_fidelity_functional)
{
  ts_op(&c950.chip, "quantize", EV, true, ARGS("rows=64", "cols=1024", "dtype=mxfp8"));
}

Test(vector_quant, what_the_chip_or_the_shape_lacks)
{
  expect_error(&b2.chip, "quantize", ARGS("rows=64", "cols=4096"), NPU_EUNSUPPORTED,
               "command line: --dtype: ascend-910b2 has no fp8 conversion in its vector unit (fp8_e4m3 needs a 950-class chip)");
  expect_error(&b2.chip, "dequantize", ARGS("rows=64", "cols=4096", "dtype=mxfp8"), NPU_EUNSUPPORTED,
               "command line: --dtype: ascend-910b2 has no fp8 conversion in its vector unit (mxfp8 needs a 950-class chip)");
  expect_error(&c950.chip, "quantize", ARGS("rows=8", "cols=100"), NPU_EINVAL,
               "command line: --cols: block1x128 needs a multiple of 128 columns, got 100");
  expect_error(&c950.chip, "quantize", ARGS("rows=8", "cols=128", "granularity=block1x32"), NPU_EINVAL,
               "command line: --granularity: block1x32 is mxfp8's granularity; fp8_e4m3 takes tensor, block1x128 or block128x128");
  expect_error(&c950.chip, "quantize", ARGS("rows=64", "cols=4096", "tile=65536"), NPU_ENOFIT,
               "command line: --tile: tiles of 65536 elements do not fit: UB needs 961472 bytes, has 253952");
}

/* DeepSeek-V3 sized activations (8192 x 7168 bf16) on a 950PR. */
Test(vector_quant, quantize_streams_at_hbm_bandwidth)
{
  static const char *const d[] = {"dtype=fp8_e4m3", "dtype=mxfp8"};
  for (int i = 0; i < 2; i++) {
    struct op_result r = ts_op(&c950.chip, "quantize", AN, false, ARGS("rows=8192", "cols=7168", d[i]));
    double n = 8192.0 * 7168, s = hbm_share(&c950.chip, &r, n * 3 + n / 32); /* x, q, scales */
    cr_assert(s > 0.7 && s < 1.3, "%s: achieved %.3f of HBM", d[i], s);
  }
  struct op_result r = ts_op(&c950.chip, "dequantize", AN, false, ARGS("rows=8192", "cols=7168", "dtype=mxfp8"));
  double s = hbm_share(&c950.chip, &r, 8192.0 * 7168 * 3);
  cr_assert(s > 0.7 && s < 1.3, "dequantize: achieved %.3f of HBM", s);
  cr_assert(streaming_bound(r.total.bottleneck), "%s", r.total.bottleneck);
}

/* ------------------------------------------------------------------ int8 quantization */

TestSuite(vector_quant_int8, .init = setup, .timeout = 60);

Test(vector_quant_int8, per_token_and_per_channel_match_the_reference)
{
  ts_op(&b2.chip, "quantize_int8", AN, true, ARGS("rows=37", "cols=1024"));
  ts_op(&b2.chip, "quantize_int8", AN, true, ARGS("rows=77", "cols=640", "in=fp16"));
  ts_op(&b2.chip, "quantize_int8", AN, true, ARGS("rows=300", "cols=4096", "per=channel"));
  ts_op(&b2.chip, "quantize_int8", AN, true, ARGS("rows=5", "cols=192", "per=channel", "in=fp32"));
}

/* one engine per process: one event run per test */
Test(vector_quant_int8, per_channel_at_event_fidelity)
{
  ts_op(&b2.chip, "quantize_int8", EV, true, ARGS("rows=65", "cols=512", "per=channel"));
}

Test(vector_quant_int8, per_token_at_event_fidelity)
{
  ts_op(&b2.chip, "quantize_int8", EV, true, ARGS("rows=65", "cols=512"));
}

Test(vector_quant_int8, streams_at_hbm_bandwidth_and_per_channel_reads_twice)
{
  struct op_result t = ts_op(&b2.chip, "quantize_int8", AN, false, ARGS("rows=4096", "cols=8192"));
  struct op_result c = ts_op(&b2.chip, "quantize_int8", AN, false, ARGS("rows=4096", "cols=8192", "per=channel"));
  double x = 4096.0 * 8192 * 2, q = 4096.0 * 8192;
  /* what crosses HBM (L2 keeps a few lines: within 2% of the tensors' bytes) at most at its rate */
  cr_assert_float_eq((double)t.total.hbm_bytes, x + q, 0.02 * (x + q));
  cr_assert_float_eq((double)c.total.hbm_bytes, 2 * x + q, 0.02 * (2 * x + q));
  double st = hbm_share(&b2.chip, &t, (double)t.total.hbm_bytes), sc = hbm_share(&b2.chip, &c, (double)c.total.hbm_bytes);
  cr_assert(st > 0.8 && st <= 1.0 + 1e-9, "per token: %.3f of HBM bandwidth", st);
  cr_assert(sc > 0.7 && sc <= 1.0 + 1e-9, "per channel: %.3f of HBM bandwidth (x read for the amax, then again)", sc);
  cr_assert(streaming_bound(t.total.bottleneck), "%s", t.total.bottleneck);
  cr_assert_eq(c.nkernels, 2, "per channel: the column amax, then the quantization");
}

Test(vector_quant_int8, refuses_rows_it_cannot_hold)
{
  expect_error(&b2.chip, "quantize_int8", ARGS("rows=4", "cols=1000"), NPU_EINVAL,
               "command line: --cols: a multiple of 64 up to 65536, got 1000");
  expect_error(&b2.chip, "quantize_int8", ARGS("rows=4", "cols=64", "in=int8"), NPU_EINVAL,
               "command line: --in: bf16, fp16 or fp32, got int8");
}
