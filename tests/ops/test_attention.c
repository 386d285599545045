/*
 * test_attention.c - FlashAttention forward and backward: outputs and gradients against the
 * double-precision reference (tolerances in attention.c's check: O within 2 ulps of the input
 * type, the LSE within 1e-4; dQ, dK, dV within 8 unit roundoffs of the tensor's largest
 * element), on split cores (GM hand-over between cube and vector cores) and coupled cores (the
 * on-chip hand-over, and the GM one when the chip lacks UB -> L1), at both fidelities; shapes
 * that do not fit; and timing properties that follow from the FLOP counts. ALiBi and attention
 * sinks (the sinks' gradient too) against the same reference, BLOOM's slopes against the LSE, and
 * what the options cost.
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"

static struct arch_system b2, a100, a100_gm, h100, h100_smem, h100_32, h100_l0c, h100_p_l1;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&a100, "nvidia-a100-80gb", NULL);
  ts_load_system(&a100_gm, "nvidia-a100-80gb", (const char *const[]){"chip.dma.bytes_per_cycle.ub_to_l1=0", NULL});
  ts_load_system(&h100, "nvidia-h100-sxm", NULL);
  /* the UB as the shared memory it was before the H100 preset made it the register file */
  ts_load_system(&h100_smem, "nvidia-h100-sxm", (const char *const[]){"chip.ub.size=228KiB", "chip.ub.bank_bytes=7.125KiB", NULL});
  ts_load_system(&h100_32, "nvidia-h100-sxm", (const char *const[]){"chip.aic_count=32", "chip.aiv_count=32", NULL});
  /* the A100's 128 KiB of accumulators (L0C) the H100 preset had before it took the register file */
  ts_load_system(&h100_l0c, "nvidia-h100-sxm", (const char *const[]){"chip.l0c.size=128KiB", NULL});
  /* without the register path of P (UB -> L0A): P goes to the PV GEMM through L1 */
  ts_load_system(&h100_p_l1, "nvidia-h100-sxm", (const char *const[]){"chip.dma.bytes_per_cycle.ub_to_l0a=0", NULL});
}

TestSuite(attention, .init = setup, .timeout = 300);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(attention, forward_causal_and_full_on_split_cores)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("heads=2", "seq=384", "dim=64"));
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("heads=2", "seq=256", "causal=false"));
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("batch=2", "heads=1", "seq=256", "dtype=fp16"));
}

/* More blocks than cores: a core runs several blocks in turn, and each block's log-sum-exp must
 * survive the next block's softmax (its copy to GM once raced the next block's scratch writes). */
Test(attention, forward_with_several_blocks_per_core_keeps_every_lse)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("heads=8", "seq=512", "dim=64"));
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=8", "seq=512", "dim=64", "causal=false"));
}

Test(attention, backward_causal_and_full_on_split_cores)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("heads=2", "seq=384", "dim=64", "pass=bwd"));
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true,
        ARGS("heads=2", "seq=256", "causal=false", "pass=bwd", "dtype=fp16"));
}

Test(attention, gqa_shares_key_value_heads)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, ARGS("heads=4", "kv_heads=2", "seq=256"));
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true,
        ARGS("heads=4", "kv_heads=1", "seq=256", "pass=bwd"));
}

Test(attention, event_fidelity_runs_the_same_program)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "kv_heads=1", "seq=256", "pass=bwd"));
}

Test(attention, coupled_cores_hand_over_on_chip_or_through_gm)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=64"), ARGS("heads=2", "seq=256", "causal=false"),
                                ARGS("heads=2", "seq=384", "dim=64", "pass=bwd"),
                                ARGS("heads=4", "kv_heads=2", "seq=256", "causal=false", "pass=bwd")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    ts_op(&a100_gm.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  /* keeping S, P and O_j on the core is faster than the GM round trip */
  struct op_result on = ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("heads=16", "seq=4096", "causal=false"));
  struct op_result gm = ts_op(&a100_gm.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("heads=16", "seq=4096", "causal=false"));
  cr_expect_lt(on.total.time_s, 0.8 * gm.total.time_s, "on chip %g s, through GM %g s", on.total.time_s,
               gm.total.time_s);
  cr_expect_eq(on.total.gm_write_bytes < gm.total.gm_write_bytes / 10, true);
}

/* Where L1 holds 128 query rows with two K/V slots and the UB two 64-row roles (the H100), a
 * coupled core's forward block is 128 rows: every K/V block read from L2 serves twice the rows
 * of the 64-row block the same chip takes with a UB of its shared memory's size. */
Test(attention, coupled_forward_takes_128_row_blocks_where_two_roles_fit)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=64"), ARGS("heads=2", "seq=256", "causal=false"),
                                ARGS("heads=4", "kv_heads=2", "seq=512"), ARGS("batch=2", "heads=1", "seq=256", "dtype=fp16")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  struct op_result big = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("heads=16", "seq=4096", "causal=false"));
  struct op_result small = ts_op(&h100_smem.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("heads=16", "seq=4096", "causal=false"));
  double reads = (double)big.total.gm_read_bytes / (double)small.total.gm_read_bytes;
  cr_expect(reads > 0.49 && reads < 0.52, "GM reads of 128-row / 64-row blocks %.3f", reads);
  cr_expect_lt(big.total.time_s, 0.9 * small.total.time_s, "128 rows %g s, 64 rows %g s", big.total.time_s,
               small.total.time_s);
}

/* Where L0C holds dK and dV of a 128-row key block with two 64 x 128 fp32 slots (the H100, whose
 * accumulators are its register file), the backward takes FlashAttention-3's tile: 64 query rows
 * per step against 128 key rows, so each Q, dO load and each dQ atomic add serves twice the keys
 * of the 128 x 64 tile the same chip takes with 128 KiB of L0C (there L1 keeps Q, dO, P and dS
 * double buffered and K, V single). Both tilings check their gradients, causal and full, GQA. */
Test(attention, coupled_backward_takes_64_by_128_tiles_where_l0c_holds_them)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=64", "pass=bwd"),
                                ARGS("heads=4", "kv_heads=2", "seq=256", "causal=false", "pass=bwd"),
                                ARGS("heads=2", "kv_heads=1", "seq=512", "pass=bwd", "dtype=fp16")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    ts_op(&h100_l0c.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "kv_heads=1", "seq=384", "pass=bwd"));
  struct op_result wide = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                ARGS("heads=16", "seq=4096", "causal=false", "pass=bwd"));
  struct op_result narrow = ts_op(&h100_l0c.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=16", "seq=4096", "causal=false", "pass=bwd"));
  double reads = (double)wide.total.gm_read_bytes / (double)narrow.total.gm_read_bytes;
  double writes = (double)wide.total.gm_write_bytes / (double)narrow.total.gm_write_bytes;
  cr_expect(reads > 0.45 && reads < 0.6, "GM reads of the 64 x 128 / 128 x 64 backward %.3f", reads);
  cr_expect(writes > 0.45 && writes < 0.6, "GM writes of the 64 x 128 / 128 x 64 backward %.3f", writes);
  cr_expect_lt(wide.total.time_s, 0.8 * narrow.total.time_s, "64 x 128 %g s, 128 x 64 %g s", wide.total.time_s,
               narrow.total.time_s);
}

/* Where the UB reaches L0A (the H100: both are registers), the vector roles write P straight into
 * L0A as the PV GEMM's A operand, as FlashAttention-3's second wgmma takes it from registers: no P
 * slot in L1, whose 228 KiB then holds three K/V slots (Q 32 KiB + 3 x 64 KiB) instead of two, so
 * the cube core computes S two key blocks ahead instead of one. Outputs check either way. */
Test(attention, coupled_forward_feeds_p_from_registers_where_ub_reaches_l0a)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=64"), ARGS("heads=4", "kv_heads=2", "seq=256", "causal=false"),
                                ARGS("batch=2", "heads=1", "seq=256", "dtype=fp16")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    ts_op(&h100_p_l1.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "kv_heads=1", "seq=512"));
  struct op_result reg = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("heads=16", "seq=4096", "causal=false"));
  struct op_result l1 = ts_op(&h100_p_l1.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("heads=16", "seq=4096", "causal=false"));
  cr_expect_eq(reg.total.gm_read_bytes, l1.total.gm_read_bytes, "the same K/V and Q reads");
  cr_expect_lt(reg.total.time_s, 0.9 * l1.total.time_s, "P from registers %g s, through L1 %g s", reg.total.time_s,
               l1.total.time_s);
}

Test(attention, coupled_forward_with_two_roles_at_event_fidelity)
{
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=4", "kv_heads=2", "seq=384"));
}

/* 32 SMs and 32 query blocks per head: dealt head by head, SM u would always take block 31 - u
 * (the heaviest to one SM, the lightest to another) and a causal forward would take as long as a
 * full one; dealt heaviest first across heads, it takes about half. */
Test(attention, causal_blocks_are_balanced_over_coupled_cores)
{
  struct op_result full = ts_op(&h100_32.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                ARGS("heads=8", "seq=4096", "causal=false"));
  struct op_result causal = ts_op(&h100_32.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=8", "seq=4096"));
  double r = causal.total.time_s / full.total.time_s;
  cr_expect(r > 0.45 && r < 0.6, "causal / full time %.3f", r);
}

Test(attention, causal_does_half_the_work)
{
  for (int bwd = 0; bwd < 2; bwd++) {
    const char *pass = bwd ? "pass=bwd" : "pass=fwd";
    struct op_result full = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=32", "seq=4096", "causal=false", pass));
    struct op_result causal = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                    ARGS("heads=32", "seq=4096", pass));
    cr_expect_float_eq(causal.flops, full.flops / 2, 1e-6 * full.flops);
    double r = causal.total.time_s / full.total.time_s;
    cr_expect(r > 0.45 && r < 0.7, "%s causal / full time %.3f", pass, r);
  }
}

Test(attention, backward_costs_more_than_forward)
{
  struct op_result f = ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("heads=16", "seq=8192", "causal=false"));
  struct op_result b = ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                             ARGS("heads=16", "seq=8192", "causal=false", "pass=bwd"));
  cr_expect_float_eq(b.flops, 2.5 * f.flops, 1e-6 * f.flops);
  double r = b.total.time_s / f.total.time_s;
  cr_expect(r > 2.0 && r < 4.0, "bwd / fwd time %.3f (FLOPs ratio 2.5)", r);
  /* long sequences keep the cube core busy: at least half of the A100 preset's dense peak */
  cr_expect_gt(f.achieved_flops_per_s, 0.5 * 312e12, "fwd %g FLOP/s", f.achieved_flops_per_s);
}

/* A sliding window (--window): query i sees keys i - W + 1 .. i, against the reference, forward and
 * backward, on split cores (128 x 64 backward tiles), on the A100's 64-row coupled forward and
 * the H100's 128-row one (P from registers) and 64 x 128 backward; windows of one block (every
 * query block's lowest key block half masked), of several, GQA, and at event fidelity. */
Test(attention, sliding_window_matches_the_reference)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=640", "dim=64", "window=128"),
                                ARGS("heads=4", "kv_heads=2", "seq=768", "window=256"),
                                ARGS("heads=2", "seq=640", "dim=64", "window=128", "pass=bwd"),
                                ARGS("heads=2", "kv_heads=1", "seq=768", "window=384", "pass=bwd", "dtype=fp16")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (ts_rotate(i, 0, 3)) ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 1, 3)) ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 2, 3)) ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "seq=512", "window=128", "pass=bwd"));
}

/* The work of a window: seq W - W^2 / 2 query-key pairs of the causal seq^2 / 2, in FLOPs
 * exactly and in time roughly (the blocks on the window's edges are whole blocks of work); a
 * window as long as the sequence is the causal mask. */
Test(attention, a_window_does_the_work_of_its_band)
{
  for (int bwd = 0; bwd < 2; bwd++) {
    const char *pass = bwd ? "pass=bwd" : "pass=fwd";
    struct op_result causal = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                    ARGS("heads=32", "seq=8192", pass));
    struct op_result band = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=32", "seq=8192", "window=1024", pass));
    struct op_result whole = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                   ARGS("heads=32", "seq=8192", "window=8192", pass));
    double share = (8192.0 * 1024 - 1024.0 * 1024 / 2) / (8192.0 * 8192 / 2);
    cr_expect_float_eq(band.flops, share * causal.flops, 1e-9 * causal.flops);
    cr_expect_float_eq(whole.flops, causal.flops, 1e-9 * causal.flops);
    cr_expect_float_eq(whole.total.time_s, causal.total.time_s, 1e-12, "%s: a window of the sequence", pass);
    double r = band.total.time_s / causal.total.time_s;
    cr_expect(r > 0.9 * share && r < 1.6 * share, "%s window / causal time %.3f, pairs %.3f", pass, r, share);
  }
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=512", "window=100"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--window") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=512", "window=128", "causal=false"), msg),
               NPU_EINVAL);
  cr_expect(strstr(msg, "--window") != NULL, "%s", msg);
}

/* Head dimensions above 128 (Gemma's 256, 192): the GEMMs take the head dimension in chunks of
 * 128 columns (QK^T accumulating over them, PV and the gradient GEMMs producing theirs one by
 * one), against the reference: on split cores (910B2: 128-row key blocks forward, 128 x 32
 * backward tiles, whose 32-key blocks are narrower than a vector role's 64 rows), on the H100
 * (128-row query blocks against 64-row key blocks, both vector roles on one core taking O_j chunk
 * by chunk; 128 x 64 backward), with the A100's 164 KiB of L1 (64 x 64 backward tiles; the A100's
 * 64-row forward), causal, full, GQA, windows. */
Test(attention, head_dims_above_128_match_the_reference)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=256"),
                                ARGS("heads=2", "kv_heads=1", "seq=256", "dim=192", "causal=false"),
                                ARGS("heads=2", "seq=640", "dim=256", "window=256"),
                                ARGS("heads=2", "seq=384", "dim=256", "pass=bwd"),
                                ARGS("heads=4", "kv_heads=2", "seq=256", "dim=192", "causal=false", "pass=bwd"),
                                ARGS("heads=2", "seq=640", "dim=256", "window=256", "pass=bwd", "dtype=fp16")};
  struct arch_system h100_l1;
  ts_load_system(&h100_l1, "nvidia-h100-sxm", (const char *const[]){"chip.l1.size=164KiB", NULL});
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (ts_rotate(i, 0, 3)) ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 1, 3)) ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 2, 3)) ts_op(&h100_l1.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (i < 3 && ts_rotate(i, 0, 3)) ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  /* the A100's 128 KiB of accumulators hold no 64-row dK and dV of 256 columns beside S */
  char msg[2048];
  cr_expect_eq(ts_op_err(&a100.chip, "flash_attention", ARGS("heads=2", "seq=256", "dim=256", "pass=bwd"), msg),
               NPU_ENOFIT);
  cr_expect(strstr(msg, "L0C") != NULL, "%s", msg);
}

/* MLA's attention in its non-absorbed (training) form: queries and keys of 192 (nope + rope),
 * values and output of 128 (--dim_v), against the reference forward and backward; the FLOPs are
 * 2 x pairs x (192 + 128) per head, those of 160 heads of 128 at 128 heads. */
Test(attention, a_value_head_dim_of_its_own_matches_the_reference)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dim=192", "dim_v=128"),
                                ARGS("heads=4", "kv_heads=2", "seq=640", "dim=128", "dim_v=256", "window=256"),
                                ARGS("heads=2", "seq=384", "dim=192", "dim_v=128", "pass=bwd"),
                                ARGS("heads=2", "kv_heads=1", "seq=256", "dim=64", "dim_v=128", "causal=false", "pass=bwd")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (ts_rotate(i, 0, 3)) ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 1, 3)) ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
    if (ts_rotate(i, 2, 3)) ts_op(&a100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  }
  struct op_result mla = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                               ARGS("heads=128", "seq=1024", "dim=192", "dim_v=128"));
  struct op_result matched = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                   ARGS("heads=160", "seq=1024", "dim=128"));
  cr_expect_float_eq(mla.flops, matched.flops, 1e-9 * matched.flops);
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=256", "dim_v=96"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--dim_v") != NULL, "%s", msg);
}

Test(attention, a_value_head_dim_of_its_own_at_event_fidelity)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "seq=384", "dim=192", "dim_v=128", "pass=bwd"));
}

/* FP8 attention (FlashAttention-3's fp8 forward) on a chip whose cube takes fp8: Q, K, V and P
 * in e4m3, O in bf16, against the reference within 4 unit roundoffs of fp8 (P's 3 mantissa
 * bits); at long sequences faster than bf16 (the cube twice as fast, the softmax the same);
 * refused on the 910B2 (no fp8 cube) and for the backward. */
Test(attention, fp8_forward_on_fp8_cubes_matches_the_reference)
{
  const char *const *cases[] = {ARGS("heads=2", "seq=384", "dtype=fp8_e4m3"),
                                ARGS("heads=4", "kv_heads=2", "seq=256", "causal=false", "dtype=fp8_e4m3"),
                                ARGS("heads=2", "seq=640", "dim=256", "window=256", "dtype=fp8_e4m3")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  struct op_result f8 = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("heads=16", "seq=8192", "causal=false", "dtype=fp8_e4m3"));
  struct op_result bf = ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                              ARGS("heads=16", "seq=8192", "causal=false"));
  cr_expect_float_eq(f8.flops, bf.flops, 1e-9 * bf.flops);
  cr_expect_lt(f8.total.time_s, bf.total.time_s, "fp8 %g s, bf16 %g s", f8.total.time_s, bf.total.time_s);
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=256", "dtype=fp8_e4m3"), msg),
               NPU_EUNSUPPORTED);
  cr_expect(strstr(msg, "fp8") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&h100.chip, "flash_attention", ARGS("heads=2", "seq=256", "dtype=fp8_e4m3", "pass=bwd"), msg),
               NPU_EINVAL);
  cr_expect(strstr(msg, "forward only") != NULL, "%s", msg);
}

Test(attention, fp8_forward_at_event_fidelity)
{
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "kv_heads=1", "seq=384", "dtype=fp8_e4m3"));
}

/* ... at event fidelity (one SimGrid engine per test): every flag of the chunked hand-overs is
 * set and awaited in an order that cannot deadlock. */
Test(attention, head_dim_256_forward_on_split_cores_at_event_fidelity)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "kv_heads=1", "seq=384", "dim=256"));
}

Test(attention, head_dim_256_backward_on_split_cores_at_event_fidelity)
{
  ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "seq=384", "dim=256", "pass=bwd"));
}

Test(attention, head_dim_256_forward_on_coupled_cores_at_event_fidelity)
{
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "seq=384", "dim=256"));
}

Test(attention, head_dim_256_backward_on_coupled_cores_at_event_fidelity)
{
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_EVENT, true, ARGS("heads=2", "seq=384", "dim=256", "pass=bwd"));
}

/* The wider head does twice the FLOPs of 128 per query-key pair; on the 910B2 (cube-bound with
 * the GM hand-overs of S and O_j through FixPipe) it takes at least as long per pair and at most
 * twice as long per FLOP: the chunks re-copy Q per key block but move the same S. */
Test(attention, a_wide_head_costs_its_flops)
{
  for (int bwd = 0; bwd < 2; bwd++) {
    const char *pass = bwd ? "pass=bwd" : "pass=fwd";
    struct op_result d128 = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=8", "seq=4096", "causal=false", pass));
    struct op_result d256 = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=8", "seq=4096", "dim=256", "causal=false", pass));
    cr_expect_float_eq(d256.flops, 2 * d128.flops, 1e-9 * d128.flops);
    double r = d256.total.time_s / d128.total.time_s;
    cr_expect(r > 1.0 && r < 4.0, "%s dim 256 / 128 time %.3f (FLOPs ratio 2)", pass, r);
  }
}

Test(attention, bad_shapes_are_errors)
{
  char msg[2048];
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=200"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--seq") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=256", "dim=96"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--dim") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=256", "dim=320"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "up to 256") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=3", "kv_heads=2", "seq=256"), msg), NPU_EINVAL);
  cr_expect(strstr(msg, "--kv_heads") != NULL, "%s", msg);
  cr_expect_eq(ts_op_err(&b2.chip, "flash_attention", ARGS("heads=2", "seq=256", "dtype=fp32"), msg), NPU_EINVAL);
  struct arch_system small;
  ts_load_system(&small, "ascend-910b2", (const char *const[]){"chip.l1.size=64KiB", NULL});
  cr_expect_eq(ts_op_err(&small.chip, "flash_attention", ARGS("heads=2", "seq=256"), msg), NPU_ENOFIT);
  cr_expect(strstr(msg, "L1") != NULL, "%s", msg);
}

/* ALiBi (--alibi): every score gets its head's linear bias m_h (j - i), forward (the online
 * softmax) and backward (P recomputed), against the reference: on split cores (128 x 64 backward
 * tiles) and the H100's coupled cores (128-row forward blocks with P from registers, 64 x 128
 * backward), causal and full, GQA, head counts that are not a power of two (BLOOM's extra
 * slopes), a window, fp16, a wide head, each case on one of the two presets in turn; and the fp8
 * forward on the H100. */
Test(attention, alibi_matches_the_reference)
{
  const char *const *cases[] = {ARGS("heads=4", "kv_heads=2", "seq=384", "alibi=true"),
                                ARGS("heads=6", "kv_heads=2", "seq=256", "causal=false", "dtype=fp16", "alibi=true"),
                                ARGS("heads=4", "kv_heads=1", "seq=640", "dim=64", "window=256", "alibi=true"),
                                ARGS("heads=2", "seq=384", "dim=256", "alibi=true"),
                                ARGS("heads=4", "kv_heads=2", "seq=384", "pass=bwd", "alibi=true"),
                                ARGS("heads=6", "kv_heads=3", "seq=256", "causal=false", "pass=bwd", "dtype=fp16", "alibi=true"),
                                ARGS("heads=4", "kv_heads=2", "seq=640", "window=256", "pass=bwd", "alibi=true"),
                                ARGS("heads=2", "seq=384", "dim=256", "pass=bwd", "alibi=true")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) /* each case on one of the two presets, in turn */
    ts_op(i % 2 ? &h100.chip : &b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true,
        ARGS("heads=4", "kv_heads=2", "seq=384", "dtype=fp8_e4m3", "alibi=true"));
}

/* The slopes are BLOOM's (build_alibi_tensor), typed in here rather than taken from the kernel:
 * for 6 heads those of 4, 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 (every other slope of 8). The
 * LSE the forward saves, log sum_j exp(q_i.k_j / sqrt(dim) + m_h (j - i)), from the captured
 * inputs in double. */
Test(attention, alibi_uses_bloom_slopes)
{
  static const double slopes[6] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  const struct op_desc *d = op_find("flash_attention");
  const char *const *kv = ARGS("heads=6", "kv_heads=3", "seq=256", "dim=64", "alibi=true");
  int n = 0;
  while (kv[n]) n++;
  struct op_args a;
  struct npu_diag diag;
  cr_assert_eq(op_args_parse(d, &a, kv, n, &diag), 0, "%s", diag.msg);
  struct op_capture cap = {0};
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true, .seed = 7, .capture = &cap};
  struct op_result r;
  cr_assert_eq(op_run(d, &a, &b2.chip, &o, &r, &diag), 0, "%s", diag.msg);
  const struct op_captured *q = NULL, *k = NULL, *lse = NULL;
  for (int i = 0; i < cap.n; i++) {
    if (!strcmp(cap.t[i].name, "q")) q = &cap.t[i];
    if (!strcmp(cap.t[i].name, "k")) k = &cap.t[i];
    if (!strcmp(cap.t[i].name, "lse")) lse = &cap.t[i];
  }
  cr_assert(q && k && lse);
  double worst = 0;
  for (uint32_t h = 0; h < 6; h++)
    for (uint32_t i = 0; i < 256; i++) {
      double s[256], m = -INFINITY, l = 0;
      for (uint32_t j = 0; j <= i; j++) {
        double dot = 0;
        for (uint32_t c = 0; c < 64; c++)
          dot += fmt_decode(NPU_DT_BF16, q->before, ((uint64_t)i * 6 + h) * 64 + c) *
                 fmt_decode(NPU_DT_BF16, k->before, ((uint64_t)j * 3 + h / 2) * 64 + c);
        s[j] = dot / 8 + slopes[h] * ((double)j - (double)i);
        if (s[j] > m) m = s[j];
      }
      for (uint32_t j = 0; j <= i; j++) l += exp(s[j] - m);
      double got = fmt_decode(NPU_DT_FP32, lse->after, (uint64_t)h * 256 + i), e = fabs(got - (m + log(l)));
      if (e > worst) worst = e;
    }
  op_capture_release(&cap);
  cr_expect_lt(worst, 1e-4, "LSE against BLOOM's slopes: worst %.3g", worst);
}

/* Attention sinks (--sinks, gpt-oss): a logit per query head in each row's softmax denominator;
 * O and the LSE against the reference, the backward's dQ, dK, dV from that LSE and the sinks'
 * gradient dsink = -sum_i exp(sink_h - LSE_i) D_i (atomic adds over the preprocessing kernel's
 * blocks, several per head and batch): split and coupled cores, causal and full, GQA, a window,
 * fp16, two batches, with ALiBi; and the fp8 forward on the H100. */
Test(attention, sinks_match_the_reference)
{
  const char *const *cases[] = {ARGS("heads=4", "kv_heads=2", "seq=384", "sinks=true"),
                                ARGS("batch=2", "heads=2", "seq=256", "causal=false", "dtype=fp16", "sinks=true"),
                                ARGS("heads=4", "kv_heads=1", "seq=640", "dim=64", "window=256", "sinks=true"),
                                ARGS("heads=4", "kv_heads=2", "seq=384", "sinks=true", "alibi=true"),
                                ARGS("heads=4", "kv_heads=2", "seq=384", "pass=bwd", "sinks=true"),
                                ARGS("batch=2", "heads=2", "seq=256", "causal=false", "pass=bwd", "dtype=fp16", "sinks=true"),
                                ARGS("heads=4", "kv_heads=2", "seq=640", "window=256", "pass=bwd", "sinks=true"),
                                ARGS("heads=2", "seq=384", "dim=256", "pass=bwd", "sinks=true", "alibi=true")};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) /* each case on one of the two presets, in turn */
    ts_op(i % 2 ? &h100.chip : &b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true, cases[i]);
  ts_op(&h100.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, true,
        ARGS("heads=4", "kv_heads=2", "seq=384", "dtype=fp8_e4m3", "sinks=true", "alibi=true"));
}

/* ... at event fidelity (one SimGrid engine per test): the same program, every flag of the
 * options' loads set and awaited, against the reference; the analytic time within 15% of the
 * event one (8 heads of 768 rows forward, 512 backward, both options). */
static void options_at_event_fidelity(const struct arch_chip *chip, const char *pass)
{
  const char *seq = strcmp(pass, "pass=bwd") ? "seq=768" : "seq=512";
  const char *const *kv = ARGS("heads=8", "kv_heads=2", seq, "alibi=true", "sinks=true", pass);
  struct op_result e = ts_op(chip, "flash_attention", CORE_FIDELITY_EVENT, true, kv);
  struct op_result a = ts_op(chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false, kv);
  double te = e.total.time_s - e.total.launch_s, ta = a.total.time_s - a.total.launch_s;
  cr_expect(fabs(ta - te) < 0.15 * te, "%s %s: analytic %.2f us, event %.2f us (bodies)", chip->name, pass, ta * 1e6,
            te * 1e6);
}

Test(attention, alibi_and_sinks_forward_on_split_cores_at_event_fidelity)
{
  options_at_event_fidelity(&b2.chip, "pass=fwd");
}

Test(attention, alibi_and_sinks_backward_on_split_cores_at_event_fidelity)
{
  options_at_event_fidelity(&b2.chip, "pass=bwd");
}

Test(attention, alibi_and_sinks_forward_on_coupled_cores_at_event_fidelity)
{
  options_at_event_fidelity(&h100.chip, "pass=fwd");
}

Test(attention, alibi_and_sinks_backward_on_coupled_cores_at_event_fidelity)
{
  options_at_event_fidelity(&h100.chip, "pass=bwd");
}

/* Each option does real vector work, one tile add per score tile (ALiBi) or a reduction and an
 * extra zeroing kernel (the sinks' gradient), so it costs more than without, but within a few
 * percent at a realistic size (seq 4096, 32 heads of 128, bf16, causal) on the 910B2, whose
 * vector cores have room beside the cube core; the matmul FLOPs are the same. */
Test(attention, alibi_and_sinks_cost_more_but_within_a_few_percent)
{
  for (int bwd = 0; bwd < 2; bwd++) {
    const char *pass = bwd ? "pass=bwd" : "pass=fwd";
    struct op_result base = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                  ARGS("heads=32", "seq=4096", pass));
    static const char *const opts[] = {"alibi=true", "sinks=true"};
    for (int k = 0; k < 2; k++) {
      struct op_result r = ts_op(&b2.chip, "flash_attention", CORE_FIDELITY_ANALYTIC, false,
                                 ARGS("heads=32", "seq=4096", pass, opts[k]));
      double ratio = r.total.time_s / base.total.time_s;
      printf("flash_attention %s %s on %s: %.6f x the time without\n", pass, opts[k], b2.chip.name, ratio);
      cr_expect_float_eq(r.flops, base.flops, 1e-9 * base.flops, "%s %s: the same matmul FLOPs", pass, opts[k]);
      cr_expect(ratio > 1.0 && ratio < 1.03, "%s %s: %.6f x the time without", pass, opts[k], ratio);
    }
  }
}
