/*
 * test_gemm.c - the GEMM operator: functional results against the double-precision reference
 * for every input type and option (tolerance: one rounding to the output type, plus fp32
 * accumulation of sqrt(K) ulps; exact for integers), tilings that do not fit, what the chip
 * lacks, and known timing properties (the catlass tail effect, weight streaming is HBM bound).
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"

static struct arch_system b2, b3, c950, a100;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&b3, "ascend-910b3", NULL);
  ts_load_system(&c950, "ascend-950pr", NULL);
  ts_load_system(&a100, "nvidia-a100-80gb", NULL);
}

TestSuite(gemm, .init = setup, .timeout = 120);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(gemm, fp16_and_bf16_with_edges)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=200", "n=300", "k=520", "dtype=fp16"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=129", "n=257", "k=33", "dtype=bf16"));
}

Test(gemm, transposed_inputs)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=150", "n=70", "k=300", "trans_a=true"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=150", "n=70", "k=300", "trans_b=true", "dtype=bf16"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=64", "n=80", "k=96", "trans_a=true", "trans_b=true"));
}

Test(gemm, integer_inputs_are_exact)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=100", "n=100", "k=1000", "dtype=int8"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=64", "n=96", "k=512", "dtype=int4"));
}

Test(gemm, fp32_and_hf32)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=48", "n=64", "k=200", "dtype=fp32"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=48", "n=64", "k=200", "dtype=hf32"));
}

Test(gemm, fp8_on_a_950)
{
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=96", "n=128", "k=512", "dtype=fp8_e4m3"));
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=96", "n=128", "k=512", "dtype=fp8_e5m2"));
  ts_op(&c950.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=96", "n=128", "k=512", "dtype=hif8"));
}

Test(gemm, w8a8_per_channel_and_per_group)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=64", "n=300", "k=1024", "dtype=int8", "quant=w8a8"));
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("m=64", "n=300", "k=1024", "dtype=int8", "quant=w8a8", "group=256"));
}

Test(gemm, split_k_accumulates_into_a_zeroed_workspace)
{
  struct op_result r = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true,
                             ARGS("m=64", "n=64", "k=4096", "split_k=4", "dtype=bf16"));
  cr_assert_eq(r.nkernels, 3, "fill, gemm, cast");
}

Test(gemm, event_fidelity_functional)
{
  ts_op(&b2.chip, "gemm", CORE_FIDELITY_EVENT, true, ARGS("m=300", "n=520", "k=640", "dtype=bf16", "swizzle=2"));
}

Test(gemm, tiling_that_does_not_fit)
{
  char msg[2048];
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=256", "n=256", "k=256", "tile_m=256", "tile_n=256"), msg), NPU_ENOFIT);
  cr_assert_str_eq(msg, "command line: --tile_m: tiling 256x256x256 (k0 64) does not fit: L0C needs 262144 bytes, has 131072");
}

Test(gemm, dtype_the_chip_lacks)
{
  char msg[2048];
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=64", "dtype=fp8_e4m3"), msg), NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "command line: --dtype: ascend-910b2 has no fp8_e4m3 cube input");
}

/* The catlass measurement on a 20-AIC 910B3: M1024 N576 K6144 fp16 makes 24 blocks of 128x256
 * (two waves on 20 cores) but 20 blocks of 256x128 (one wave): the first must be slower by
 * about one block. */
Test(gemm, tail_of_24_blocks_on_20_cores)
{
  struct op_result a = ts_op(&b3.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("m=1024", "n=576", "k=6144", "tile_m=128", "tile_n=256", "tile_k=256"));
  struct op_result b = ts_op(&b3.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("m=1024", "n=576", "k=6144", "tile_m=256", "tile_n=128", "tile_k=256"));
  double ta = a.total.time_s - a.total.launch_s, tb = b.total.time_s - b.total.launch_s;
  cr_assert(ta > 1.7 * tb && ta < 2.2 * tb, "two waves %g vs one %g", ta, tb);
}

Test(gemm, weight_streaming_is_hbm_bound)
{
  struct op_result r = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false, ARGS("m=20", "n=6144", "k=16384"));
  cr_assert_str_eq(r.total.bottleneck, "mte2_bound");
  double hbm = b2.chip.hbm.bw_bytes_per_s * b2.chip.calib.hbm.value;
  double body = r.total.time_s - r.total.launch_s;
  double bytes = 16384.0 * 6144 * 2;
  cr_assert(bytes / body > 0.9 * hbm && bytes / body <= 1.001 * hbm, "%g B/s vs HBM %g", bytes / body, hbm);
}

Test(gemm, grouped_gemm_variable_rows_per_group)
{
  ts_op(&b2.chip, "grouped_gemm", CORE_FIDELITY_ANALYTIC, true,
        ARGS("groups=8", "m=700", "n=300", "k=256", "skew=1.2"));
  ts_op(&b2.chip, "grouped_gemm", CORE_FIDELITY_EVENT, true, ARGS("groups=5", "m=300", "n=200", "k=128"));
  /* the same rows over fewer, bigger groups reuse each expert's weights more: more L2 hits */
  struct op_result even = ts_op(&b2.chip, "grouped_gemm", CORE_FIDELITY_ANALYTIC, false,
                                ARGS("groups=64", "m=16384", "n=2048", "k=2048"));
  struct op_result skew = ts_op(&b2.chip, "grouped_gemm", CORE_FIDELITY_ANALYTIC, false,
                                ARGS("groups=64", "m=16384", "n=2048", "k=2048", "skew=1.5"));
  cr_assert_eq(even.flops, skew.flops);
  double he = (double)even.total.l2_hit_bytes / (double)even.total.gm_read_bytes;
  double hs = (double)skew.total.l2_hit_bytes / (double)skew.total.gm_read_bytes;
  cr_assert(hs > he, "hit share skewed %g vs even %g", hs, he);
}

/*
 * Hopper multicast (chip.dma.multicast = 2): the two cores of a cluster take m-tiles with the
 * same B tile, and L2 serves each of them half of B's hits. 4096^3 bf16 in 128 x 256 tiles: 512
 * blocks, each reading K x 256 of B (2 MiB): 1 GiB of B through the cores' ports, of which the
 * cluster network delivers half the hits (under 0.5 GiB: the first touches miss). The ports move
 * the same bytes either way; the kernel is faster; the result is still right (functional).
 */
Test(gemm, multicast_halves_what_l2_serves_of_b)
{
  struct arch_system h1, h2;
  ts_load_system(&h2, "nvidia-h100-sxm", NULL);
  ts_load_system(&h1, "nvidia-h100-sxm", (const char *const[]){"chip.dma.multicast=1", NULL});
  cr_assert_eq(h2.chip.dma.multicast, 2);
  const char *const *kv = ARGS("m=4096", "n=4096", "k=4096", "dtype=bf16");
  struct op_result one = ts_op(&h1.chip, "gemm", CORE_FIDELITY_ANALYTIC, false, kv);
  struct op_result two = ts_op(&h2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false, kv);
  double gib = 1024.0 * 1024 * 1024;
  uint64_t port1 = one.total.path_bytes[ARCH_PATH_GM_TO_L1], port2 = two.total.path_bytes[ARCH_PATH_GM_TO_L1];
  cr_assert_eq(port1, port2, "the ports move the same bytes");
  cr_assert_eq(port1, (uint64_t)(1.5 * gib), "A (0.5 GiB) and B (1 GiB) through the ports");
  double peer = (double)(one.total.gm_read_bytes - two.total.gm_read_bytes);
  cr_assert(peer > 0.45 * gib && peer <= 0.5 * gib, "the cluster delivers %.3f GiB of B's hits", peer / gib);
  cr_assert(two.total.time_s < one.total.time_s, "multicast is faster: %g vs %g s", two.total.time_s, one.total.time_s);
  ts_op(&h2.chip, "gemm", CORE_FIDELITY_ANALYTIC, true, ARGS("m=512", "n=512", "k=256", "dtype=bf16"));
}

/* Hopper's multicast clusters at event fidelity, bf16 and fp8, with numbers checked (the Hopper
 * kernel rows of scenarios/validation/kernels run at full size in the normal build only). One
 * event run per test: the engine starts once per process. */
Test(gemm, hopper_multicast_at_event_fidelity_bf16)
{
  struct arch_system h;
  ts_load_system(&h, "nvidia-h100-sxm", NULL);
  ts_op(&h.chip, "gemm", CORE_FIDELITY_EVENT, true, ARGS("m=512", "n=512", "k=256", "dtype=bf16"));
}

Test(gemm, hopper_multicast_at_event_fidelity_fp8)
{
  struct arch_system h;
  ts_load_system(&h, "nvidia-h100-sxm", NULL);
  ts_op(&h.chip, "gemm", CORE_FIDELITY_EVENT, true, ARGS("m=512", "n=512", "k=512", "dtype=fp8_e4m3"));
}

Test(gemm, multicast_must_divide_the_cores)
{
  struct arch_system s;
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[2048];
  for (int i = 0; i < 2; i++) {
    const char *set = i ? "chip.dma.multicast=17" : "chip.dma.multicast=5";
    int rc = ts_try_load_system(&s, "nvidia-h100-sxm", (const char *const[]){set, NULL}, &d);
    npu_diag_format(&d, msg, sizeof msg);
    cr_assert_neq(rc, 0, "%s: %s", set, msg);
    cr_assert(strstr(msg, "chip.dma.multicast") && strstr(msg, "divides the 132 cube cores"), "%s", msg);
  }
}

/* Options that cannot be honoured are refused, never changed in silence. */
Test(gemm, impossible_swizzle_and_split_k_are_refused)
{
  char msg[2048];
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=64", "swizzle=0"), msg), NPU_EINVAL);
  cr_assert(strstr(msg, "--swizzle") != NULL, "%s", msg);
  cr_assert_eq(ts_op_err(&b2.chip, "gemm", ARGS("m=64", "n=64", "k=512", "split_k=64"), msg), NPU_EINVAL);
  cr_assert(strstr(msg, "--split_k") && strstr(msg, "at most 2 splits"), "%s", msg);
}

/* The tiling search (op_desc.variants): a ragged N of 257 on 64 row blocks. The default rule
 * (narrow N tiles that fill the last wave) gives 128 x 256 tiles whose second column of blocks
 * holds one column each, every one loading its 128 rows of A for it; the search runs the
 * fastest of the candidates at analytic fidelity, which must beat that default by the A traffic
 * it saves, and running the reported tiles directly gives the same time. */
Test(gemm, tiling_search_beats_a_ragged_default_tile)
{
  /* tile_k0=64 is the bf16 default: the same tiling with the search off (a tile was given) */
  struct op_result fixed = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("m=8192", "n=257", "k=8192", "dtype=bf16", "tile_k0=64"));
  struct op_result found = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("m=8192", "n=257", "k=8192", "dtype=bf16"));
  cr_assert_eq(fixed.searched, 0, "a given tile turns the search off");
  cr_assert_str_empty(fixed.chosen);
  cr_assert_geq(found.searched, 3, "default, equal 128-row tiles, 256 x 128, equal 256-row tiles");
  cr_assert(strstr(found.chosen, "tile_m=") && strstr(found.chosen, "tile_n="), "%s", found.chosen);
  cr_assert_lt(found.total.time_s, 0.8 * fixed.total.time_s, "searched %g s vs default %g s", found.total.time_s,
               fixed.total.time_s);
  cr_assert_lt(found.total.gm_read_bytes, fixed.total.gm_read_bytes, "fewer re-reads of A");
  /* the choice is what the search reports: running it with its tiles gives the same time */
  char tm[32], tn[32], tk[32];
  snprintf(tm, sizeof tm, "tile_m=%llu", (unsigned long long)found.args.u[op_param_index(op_find("gemm"), "tile_m")]);
  snprintf(tn, sizeof tn, "tile_n=%llu", (unsigned long long)found.args.u[op_param_index(op_find("gemm"), "tile_n")]);
  snprintf(tk, sizeof tk, "tile_k=%llu", (unsigned long long)found.args.u[op_param_index(op_find("gemm"), "tile_k")]);
  struct op_result again = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("m=8192", "n=257", "k=8192", "dtype=bf16", tm, tn, tk));
  cr_assert_float_eq(again.total.time_s, found.total.time_s, 1e-12 + 1e-9 * found.total.time_s);
}

/* Found by tests/property (more work never takes less time): where no N tile width fills 90%
 * of its waves, the default took the widest (256), so M 705 N 658 K 853 ran 18 blocks on 108
 * A100 SMs (29.6 us) and twice the rows ran faster (14.3 us); it takes the width of the least
 * waves x width now, narrower blocks on more SMs. */
Test(gemm, a_gemm_of_fewer_blocks_than_cores_takes_narrower_tiles)
{
  struct op_result small = ts_op(&a100.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("m=705", "n=658", "k=853", "dtype=fp16", "split_k=1"));
  struct op_result big = ts_op(&a100.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("m=1410", "n=658", "k=853", "dtype=fp16", "split_k=1"));
  cr_assert_gt(small.total.aic_used, 18, "%d SMs", small.total.aic_used);
  cr_assert_lt(small.total.time_s, big.total.time_s, "%g s vs twice the rows %g s", small.total.time_s,
               big.total.time_s);
}

/* Found the same way: the automatic K split (half the cores idle, 4 L1 steps per split) adds a
 * zeroing and a cast kernel, 20 us of launch each on A2, so M 1400 N 17 K 4476 split in two took
 * 70 us where twice the rows unsplit took 38 us. The search tries 1, 2, 4 and 8 splits. */
Test(gemm, the_k_split_is_searched_with_the_launches_it_adds)
{
  struct op_result small = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("m=1400", "n=17", "k=4476", "dtype=bf16"));
  struct op_result big = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("m=2800", "n=17", "k=4476", "dtype=bf16"));
  cr_assert_geq(small.searched, 4);
  cr_assert_leq(small.total.time_s, big.total.time_s, "%g s vs twice the rows %g s", small.total.time_s,
                big.total.time_s);
  cr_assert_lt(small.total.time_s, 50e-6, "%g s", small.total.time_s);
}

/* Where the default tiling is already the best (a square GEMM of 256-multiples), the search
 * keeps it: ties within 0.1% never change the tiling. */
Test(gemm, tiling_search_keeps_the_default_on_a_tie)
{
  struct op_result r = ts_op(&b2.chip, "gemm", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("m=4096", "n=4096", "k=4096", "dtype=bf16"));
  cr_assert_geq(r.searched, 2);
  cr_assert_str_empty(r.chosen, "changed to %s", r.chosen);
}
