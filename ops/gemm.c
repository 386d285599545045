/*
 * gemm.c - C[M,N] = A[M,K] x B[K,N], catlass-style, on the cube cores.
 *
 * Tiling (catlass defaults on A2, hardware.md): the output is cut into L1 tiles of
 * tile_m x tile_n (128 x 256), K is walked in L1 steps of tile_k (256 for 16-bit inputs, i.e.
 * 512 bytes of K) and L0 steps of tile_k0 (64, i.e. 128 bytes). L1 and L0A/L0B are double
 * buffered (ping-pong with flags, as catlass does), L0C holds the tile's fp32 (int32) sums
 * until FixPipe writes them out with the output cast. Output tiles are dealt to the cube cores
 * in catlass's swizzled order (GemmIdentityBlockSwizzle: strips of `swizzle` tiles along M,
 * every other strip reversed along N) so that cores working at once share A and B in L2.
 *
 * Inputs: fp16, bf16 (fp32 accumulation), hf32/fp32, int8 / int4 (int32 accumulation), fp8
 * e4m3/e5m2 and hif8 (950-class cubes), each with transposed storage of A and/or B. Split-K
 * (auto when there are too few output tiles for the cores and K is long) accumulates fp32
 * partial sums with FixPipe atomic adds into a zeroed workspace, then casts to the output.
 *
 * Quantized modes (--quant):
 *   w8a8  int8 activations and weights; FixPipe dequantizes with per-channel weight scales times
 *         a per-tensor activation scale, or (group > 0) each K group's int32 sums with that
 *         group's scales, accumulated with atomic adds into fp32.
 *   mx    OCP MX v1.0 blocks (MXFP8: fp8_e4m3 or fp8_e5m2 elements; MXFP4: fp4_e2m1), one E8M0
 *         scale per 32 elements along K: A's scales [M, K/32], B's [K/32, N]. The 950 cube takes
 *         them natively (Ascend C MmadMx, asc_mmad_mx; catlass v1.6 "MX Scaling"): the scales
 *         travel with the data GM -> L1 -> L0 (A's in 16 x 2 zZ fractals, B's in 2 x 16 nN
 *         fractals, asc_copy_l12l0a_mx) and the cube applies them per 32-element K block,
 *         accumulating in fp32 at the fp8 (fp4) MAC rate (cores/isa.h, struct core_mmad). The
 *         hardware keeps L0 scales in a side area; here they sit next to the data in L0A/L0B,
 *         so the L0 K step is 64 bytes of K (half the usual) to leave them room. Chips without
 *         MX cube inputs (910B/910C) refuse --dtype.
 *   w4a8  int8 activations, int4 weights (two a byte), per-channel or per-group (--group, along
 *         K) fp32 weight scales, per-token fp32 activation scales. The A2/A3 cube has no
 *         int8 x int4 mode and no documented int4 -> int8 conversion on the way to L0B, so
 *         CANN's A8W4 kernel (ops-transformer gmm/grouped_matmul, grouped_matmul_antiquant_
 *         a8w4_msd_pre.h and grouped_matmul_antiquant_a8w4_msd.h, "MSD": __CCE_AICORE__ 220)
 *         splits each int8 activation x into two int4 rows, hi = floor(x / 16) and
 *         lo = (x mod 16) - 8, so that x = 16 hi + lo + 8, and runs an int4 x int4 GEMM over the
 *         2M rows. That is what is modelled, as CANN's one MIX kernel:
 *           1. vector cores split A into the int4 rows (cast int8 -> fp16, x / 16 - 15/32
 *              rounded to an integer is floor(x / 16) because no tie can occur -- CANN casts
 *              with floor mode and masks the low nibble with a bitwise AND, which this model's
 *              vector unit lacks; the values are the same), then an all-core barrier (SyncAll);
 *           2. the cube runs the catlass kernel on the int4 rows, each K group's int32 sums
 *              dequantized by FixPipe with the group's per-channel scales into an fp32
 *              workspace slot of its core (the first group writing, the next adding atomically);
 *           3. the core's two vector cores take the slot (cross-core flags, two slots
 *              ping-pong) and compute y = (16 hi + lo + bias) x x_scale, bias = 8 x sum over K of
 *              w x scale per column (prepared once with the weights: the kernel's bias input),
 *              cast to the output.
 *         CANN keeps that workspace in fp16; here it is fp32.
 *
 * The host reference computes in double from the decoded inputs.
 *
 * Size: one operator family over ~1,500 lines: GEMM, grouped GEMM, MX and W4A8 GEMMs share the
 * catlass block kernel, its tiling search and its swizzle; each variant is a plan and a few
 * emission hooks around it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

#define MX_SF 8 /* mx: K steps whose scales of A one L1 load brings */

static const char *const outs[] = {"auto", "fp16", "bf16", "fp32", "int32", NULL};
static const char *const quants[] = {"none", "w8a8", "mx", "w4a8", NULL};
enum { Q_NONE, Q_W8A8, Q_MX, Q_W4A8 }; /* --quant, in the order of quants[] */

static const struct op_param params[] = {
    {"m", OP_P_DIM, NULL, "rows of A and C", NULL},
    {"n", OP_P_DIM, NULL, "columns of B and C", NULL},
    {"k", OP_P_DIM, NULL, "columns of A, rows of B", NULL},
    {"dtype", OP_P_DTYPE, "fp16", "input type of A and B (mx: the element type; w4a8: int8)", NULL},
    {"out", OP_P_CHOICE, "auto", "output type (auto: fp16/bf16 as the input, fp32 for hf32/fp32, int32 for int8/int4, bf16 for fp8 and quantized modes)", outs},
    {"trans_a", OP_P_BOOL, "false", "A is stored K x M", NULL},
    {"trans_b", OP_P_BOOL, "false", "B is stored N x K", NULL},
    {"tile_m", OP_P_INT, "0", "L1 tile rows (0: 128, or M rounded to 16 when smaller)", NULL},
    {"tile_n", OP_P_INT, "0", "L1 tile columns (0: 256)", NULL},
    {"tile_k", OP_P_INT, "0", "L1 step of K (0: 512 bytes of K)", NULL},
    {"tile_k0", OP_P_INT, "0", "L0 step of K (0: 128 bytes of K, 64 bytes for mx; the w8a8 / w4a8 group if smaller)", NULL},
    {"swizzle", OP_P_INT, "3", "swizzle strip width in tiles (1: plain row-major order)", NULL},
    {"swizzle_dir", OP_P_INT, "0", "swizzle direction: 0 strips along M, 1 along N", NULL},
    {"split_k", OP_P_INT, "0", "K splits (0: auto, 1: off)", NULL},
    {"quant", OP_P_CHOICE, "none", "quantization: none; w8a8 (int8, FixPipe dequantization); mx (OCP MX blocks of 32 with E8M0 scales, 950 cubes; --dtype mxfp8 implies it); w4a8 (int8 x int4 weights, CANN's MSD split)", quants},
    {"group", OP_P_INT, "0", "w8a8 / w4a8 weight scale group along K (0: per channel)", NULL},
    {"cores", OP_P_INT, "0", "cube cores to use (0: all)", NULL},
};

struct gemm {
  const struct arch_chip *chip;
  uint32_t M, N, K;            /* of the cube's GEMM (w4a8: M is twice the output rows) */
  uint32_t mo;                 /* rows of C */
  enum npu_dtype in, acc, out;
  bool ta, tb;
  int quant;
  uint32_t group;
  uint32_t mL1, nL1, kL1, k0, c0;
  uint32_t swz, swz_dir;
  uint32_t cluster;            /* m-tiles of one cluster sharing B by multicast (1: none) */
  uint32_t splitk, kper;       /* splits and K per split (a multiple of kL1) */
  uint32_t bm, bn;
  uint64_t nblocks;
  /* grouped GEMM: group g multiplies rows [row0[g], row0[g] + rows[g]) of A by B[g] */
  uint32_t ngroups;
  uint32_t *row0, *rows;
  uint32_t *blk;               /* per block: group, m-block in group, n-block (3 entries) */
  int cores;
  bool atomic;                 /* FixPipe accumulates into fp32 */
  enum npu_dtype fix_out;      /* what FixPipe writes */
  uint64_t a, b, c, acc_ws, scales, scales_l1;
  float act_scale;
  /* L1 layout */
  uint64_t l1a[2], l1b[2], l1s;
  /* mx: E8M0 scales in GM ([M, kb] and [kb, N], kb = K / 32 rounded up), in L1, and their
   * offsets in an L0A / L0B stage */
  uint32_t kb;
  uint64_t sa, sb, l1sa[2], l1sb[2], l0sa, l0sb;
  /* w4a8: int8 activations, per-token scales, bias, the fp32 workspace slots; vector cores
   * per AI core (2, or 1 on coupled cores) */
  uint64_t x8, xsc, bias, ws;
  uint32_t halves;
};

/* One launch unit's emission state (the launch's unit context, core_unit_ctx). */
struct gemm_unit {
  uint32_t l1_stage, l0_stage, l1_sa_stage; /* L1, L0 and L1 scale buffers used so far */
  uint32_t w4_blocks;                       /* w4a8: blocks done */
  bool w4_wrote;                            /* w4a8: the block's tile is in its slot yet */
};

static struct gemm_unit *unit_of(struct core_tp *t)
{
  return core_unit_ctx(t);
}

static uint32_t es_bits(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t);
}

/* Whether FixPipe dequantizes with per-column scales from the FixPipe buffer. */
static bool fb_dequant(const struct gemm *g)
{
  return g->quant == Q_W8A8 || g->quant == Q_W4A8;
}

/* catlass GemmIdentityBlockSwizzle: tile index t -> (mi, ni), over a grid of bm / cluster
 * cluster rows (each `cluster` m-tiles high): block t is member t % cluster of cluster tile
 * t / cluster, so the members run at once on consecutive cores. */
static void swizzle(const struct gemm *g, uint64_t t, uint32_t *mi, uint32_t *ni)
{
  uint32_t off = g->swz, member = (uint32_t)(t % g->cluster), bm = g->bm / g->cluster;
  t /= g->cluster;
  if (g->swz_dir == 0) {
    uint32_t loops = ops_ceil(bm, off);
    uint32_t strip = (uint32_t)(t / ((uint64_t)off * g->bn));
    uint32_t in = (uint32_t)(t % ((uint64_t)off * g->bn));
    uint32_t rows = strip == loops - 1 ? bm - off * strip : off;
    *mi = strip * off + in % rows;
    *ni = in / rows;
    if (strip % 2) *ni = g->bn - *ni - 1;
  } else {
    uint32_t loops = ops_ceil(g->bn, off);
    uint32_t strip = (uint32_t)(t / ((uint64_t)off * bm));
    uint32_t in = (uint32_t)(t % ((uint64_t)off * bm));
    uint32_t cols = strip == loops - 1 ? g->bn - off * strip : off;
    *ni = strip * off + in % cols;
    *mi = in / cols;
    if (strip % 2) *mi = bm - *mi - 1;
  }
  *mi = *mi * g->cluster + member;
}

/* Block b -> group, m-block (within the group), n-block, K split. */
static void decompose(const struct gemm *g, uint64_t b, uint32_t *grp, uint32_t *mi, uint32_t *ni, uint32_t *ks)
{
  *ks = (uint32_t)(b % g->splitk);
  if (g->blk) {
    const uint32_t *e = &g->blk[3 * (b / g->splitk)];
    *grp = e[0];
    *mi = e[1];
    *ni = e[2];
    return;
  }
  *grp = 0;
  swizzle(g, b / g->splitk, mi, ni);
}

/* Rows of the block's tile and the first row of its group. */
static uint32_t tile_rows(const struct gemm *g, uint32_t grp, uint32_t mi, uint32_t *row0)
{
  uint32_t m = g->blk ? g->rows[grp] : g->M;
  *row0 = g->blk ? g->row0[grp] : 0;
  return m - mi * g->mL1 < g->mL1 ? m - mi * g->mL1 : g->mL1;
}

/* Columns of the tile of n-block ni. */
static uint32_t tile_cols(const struct gemm *g, uint32_t ni)
{
  return g->N - ni * g->nL1 < g->nL1 ? g->N - ni * g->nL1 : g->nL1;
}

/* Blocks of one class take the same time: same tile rows (in 16-row steps), an N edge or not,
 * a short last K split or not. */
static int block_class(void *ctx, uint64_t b)
{
  const struct gemm *g = ctx;
  uint32_t grp, mi, ni, ks, r0;
  decompose(g, b, &grp, &mi, &ni, &ks);
  uint32_t mt = tile_rows(g, grp, mi, &r0);
  int c = mt == g->mL1 ? 0 : (int)ops_ceil(mt, 16);
  c = 2 * c + (ni == g->bn - 1 && g->N % g->nL1 ? 1 : 0);
  return 2 * c + (ks == g->splitk - 1 && (uint64_t)g->kper * g->splitk != g->K ? 1 : 0);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct gemm *g = ctx;
  *unit_of(t) = (struct gemm_unit){0};
  for (int i = 0; i < 2; i++) {
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  if (fb_dequant(g)) core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct gemm *g = ctx;
  if (fb_dequant(g)) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
  for (int i = 0; i < 2; i++) {
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

/* ------------------------------------------------------------------ w4a8 hand-over flags */

/* Cross-core flag ids between a cube core and its vector cores: a workspace slot is full
 * (cube -> vector) or free again (vector -> cube). */
#define X_FULL(s) (s)
#define X_FREE(s) (2 + (s))

/* Vector core v of an AI core. */
static enum core_sub aiv(uint32_t v)
{
  return (enum core_sub)(CORE_SUB_AIV0 + v);
}

/* The fp32 workspace slot (tile_m x tile_n) the unit's current block writes. */
static uint64_t w4_slot(struct core_tp *t, const struct gemm *g)
{
  uint64_t s = (uint64_t)core_unit(t) * 2 + unit_of(t)->w4_blocks % 2;
  return g->ws + s * g->mL1 * g->nL1 * 4;
}

/* The cube side: before the first write of a block, wait until the vector cores have taken
 * what the slot held. */
static void w4_wait_slot(struct core_tp *t, const struct gemm *g)
{
  for (uint32_t v = 0; v < g->halves; v++)
    core_xwait(t, CORE_PIPE_FIX, aiv(v), X_FREE((int)(unit_of(t)->w4_blocks % 2)));
}

/* ------------------------------------------------------------------ the cube kernel */

/* Where FixPipe writes a tile: C, or the fp32 workspace of split-K and W8A8 groups, or for
 * W4A8 the unit's workspace slot, which the first group of the tile overwrites and later ones
 * add to. */
static struct core_tile fix_dst(struct core_tp *t, struct gemm *g, uint32_t row, uint32_t ni, uint32_t mt,
                                uint32_t nt, bool *atomic)
{
  if (g->quant == Q_W4A8) {
    struct gemm_unit *un = unit_of(t);
    if (!un->w4_wrote) w4_wait_slot(t, g);
    *atomic = un->w4_wrote;
    un->w4_wrote = true;
    return ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, w4_slot(t, g), mt, nt, g->nL1);
  }
  *atomic = g->atomic;
  uint64_t cbase = g->atomic ? g->acc_ws : g->c;
  uint64_t off = ((uint64_t)row * g->N + (uint64_t)ni * g->nL1) * es_bits(g->fix_out) / 8;
  return ops_tile(MEM_GM, CORE_ND, g->fix_out, cbase + off, mt, nt, g->N);
}

/* FixPipe the accumulated tile out (with per-column scales for w8a8 / w4a8). */
static void write_out(struct core_tp *t, struct gemm *g, uint32_t row, uint32_t ni, uint32_t mt,
                      uint32_t nt, uint32_t group)
{
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX};
  cp.src = ops_tile(MEM_L0C, CORE_NZ, g->acc, 0, mt, nt, (uint32_t)ops_roundup(mt, 16));
  cp.src.c0 = 16;
  if (fb_dequant(g)) {
    /* the group's per-column scales: GM -> L1 (MTE2) -> FixPipe buffer; the L1 slot is free
     * once FixPipe has copied the previous scales out of it */
    core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
    uint64_t soff = ((uint64_t)group * g->N + (uint64_t)ni * g->nL1) * 4;
    struct core_tile gs = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->scales + soff, 1, nt, 0);
    struct core_tile ls = ops_tile(MEM_L1, CORE_ND, NPU_DT_FP32, g->l1s, 1, nt, 0);
    struct core_tile fs = ops_tile(MEM_FB, CORE_ND, NPU_DT_FP32, 0, 1, nt, 0);
    core_copy(t, &ls, &gs);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_FIX, 1);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_FIX, 1);
    core_copy(t, &fs, &ls);
    core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
    cp.fb_scale = 0;
    cp.scale = g->quant == Q_W8A8 ? g->act_scale : 1.0f; /* w4a8: per token, on the vector cores */
  }
  cp.dst = fix_dst(t, g, row, ni, mt, nt, &cp.atomic_add);
  core_copy_ex(t, &cp);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

/* MX: A's scales of the block's K steps from k (MX_SF of them) are in L1 slot `slot`. */
struct mx_at {
  int slot;
  uint32_t k0;
};

/* MX: E8M0 scales beside the data, GM -> L1 on MTE2. A's (mt x kbt) for MX_SF K steps at a time
 * (catlass's L1_SCALE_FACTOR_K: a row of A's scales per step is only kL1 / 32 bytes, which a GM
 * burst would mostly waste), in strips of two scales along K (NZ, c0 2) so that every 64 of K
 * starts a 32-byte aligned sub-tile; B's (kbt x nt) for each step, row-major with rows of
 * tile_n. MTE1's release of the step's data slot also covers the older scale slot. */
static void load_scales(struct core_tp *t, struct gemm *g, int s, uint32_t row, uint32_t ni, uint32_t mt,
                        uint32_t nt, uint32_t k, uint32_t kt, uint32_t kb, uint32_t ke, struct mx_at *at)
{
  if ((k - kb) % (MX_SF * g->kL1) == 0) {
    uint32_t span = ke - k < MX_SF * g->kL1 ? ke - k : MX_SF * g->kL1;
    at->slot = (int)(unit_of(t)->l1_sa_stage++ % 2);
    at->k0 = k;
    struct core_tile ga = ops_tile(MEM_GM, CORE_ND, NPU_DT_UINT8, g->sa + (uint64_t)row * g->kb + k / 32, mt,
                                   ops_ceil(span, 32), g->kb);
    struct core_tile la = ops_tile(MEM_L1, CORE_NZ, NPU_DT_UINT8, g->l1sa[at->slot], mt, ops_ceil(span, 32), 0);
    la.c0 = 2;
    core_copy(t, &la, &ga);
  }
  uint32_t kbt = ops_ceil(kt, 32);
  uint64_t boff = (uint64_t)(k / 32) * g->N + (uint64_t)ni * g->nL1;
  struct core_tile gb = ops_tile(MEM_GM, CORE_ND, NPU_DT_UINT8, g->sb + boff, kbt, nt, g->N);
  struct core_tile lb = ops_tile(MEM_L1, CORE_ND, NPU_DT_UINT8, g->l1sb[s], kbt, nt, g->nL1);
  core_copy(t, &lb, &gb);
}

/* GM -> L1 (ND -> NZ) of the K step's A and B tiles, as stored (and their MX scales). */
static void load_l1(struct core_tp *t, const struct gemm *g, int s, uint32_t row, uint64_t bbase, uint32_t ni,
                    uint32_t mt, uint32_t nt, uint32_t k, uint32_t kt, struct core_tile *la, struct core_tile *lb)
{
  uint32_t ebits = es_bits(g->in);
  struct core_tile ga, gb;
  if (!g->ta) {
    ga = ops_tile(MEM_GM, CORE_ND, g->in, g->a + ((uint64_t)row * g->K + k) * ebits / 8, mt, kt, g->K);
    *la = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1a[s], mt, kt, 0);
  } else {
    ga = ops_tile(MEM_GM, CORE_ND, g->in, g->a + ((uint64_t)k * g->M + (uint64_t)row) * ebits / 8, kt, mt, g->M);
    *la = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1a[s], kt, mt, 0);
  }
  if (!g->tb) {
    gb = ops_tile(MEM_GM, CORE_ND, g->in, bbase + ((uint64_t)k * g->N + (uint64_t)ni * g->nL1) * ebits / 8, kt, nt, g->N);
    *lb = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1b[s], kt, nt, 0);
  } else {
    gb = ops_tile(MEM_GM, CORE_ND, g->in, bbase + ((uint64_t)ni * g->nL1 * g->K + k) * ebits / 8, nt, kt, g->K);
    *lb = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1b[s], nt, kt, 0);
  }
  core_copy(t, la, &ga);
  core_copy_ex(t, &(struct core_copy){.src = gb, .dst = *lb, .scale = 1.0f, .fb_scale = UINT64_MAX,
                                      .multicast = (uint8_t)g->cluster});
}

/* MX: L1 -> L0A / L0B (MTE1) of the L0 step's scales (K from ka, kk into the L1 step), right
 * after its data in the stage. */
static void load_l0_scales(struct core_tp *t, const struct gemm *g, int s, const struct mx_at *at, uint64_t a_stage,
                           uint64_t b_stage, uint32_t mt, uint32_t nt, uint32_t ka, uint32_t kk, uint32_t kl,
                           struct core_mmad *mm)
{
  uint32_t kbl = ops_ceil(kl, 32), lda = (uint32_t)ops_roundup(mt, 16);
  uint64_t a_off = (uint64_t)((ka - at->k0) / 64) * lda * 2;
  struct core_copy ca = {.scale = 1.0f, .fb_scale = UINT64_MAX}, cb = ca;
  mm->mx = true;
  mm->sa = a_stage + g->l0sa;
  mm->sb = b_stage + g->l0sb;
  ca.src = ops_tile(MEM_L1, CORE_NZ, NPU_DT_UINT8, g->l1sa[at->slot] + a_off, mt, kbl, lda);
  ca.src.c0 = 2;
  ca.dst = core_mx_scales(mm, 0);
  cb.src = ops_tile(MEM_L1, CORE_ND, NPU_DT_UINT8, g->l1sb[s] + (uint64_t)(kk / 32) * g->nL1, kbl, nt, g->nL1);
  cb.dst = core_mx_scales(mm, 1);
  core_copy_ex(t, &ca);
  core_copy_ex(t, &cb);
}

/* One L0 step (K from k + kk): L1 -> L0A (ZZ m x kl) and L0B (ZN kl x n), sub-tiles of the L1 NZ
 * tiles, then the mmad into L0C. */
static void step_l0(struct core_tp *t, struct gemm *g, int s, const struct mx_at *at, const struct core_tile *la,
                    const struct core_tile *lb, uint32_t mt, uint32_t nt, uint32_t k, uint32_t kk, uint32_t kl,
                    bool first)
{
  int q = (int)(unit_of(t)->l0_stage++ % 2);
  uint32_t ebits = es_bits(g->in), c0 = g->c0;
  struct core_copy ca = {.scale = 1.0f, .fb_scale = UINT64_MAX}, cb = ca;
  uint32_t lda = core_tile_ld(la), ldb = core_tile_ld(lb);
  if (!g->ta) {
    ca.src = ops_tile(MEM_L1, CORE_NZ, g->in, la->addr + (uint64_t)(kk / c0) * lda * c0 * ebits / 8, mt, kl, lda);
  } else {
    ca.src = ops_tile(MEM_L1, CORE_NZ, g->in, la->addr + (uint64_t)kk * c0 * ebits / 8, kl, mt, lda);
    ca.transpose = true;
  }
  if (!g->tb) {
    cb.src = ops_tile(MEM_L1, CORE_NZ, g->in, lb->addr + (uint64_t)kk * c0 * ebits / 8, kl, nt, ldb);
  } else {
    cb.src = ops_tile(MEM_L1, CORE_NZ, g->in, lb->addr + (uint64_t)(kk / c0) * ldb * c0 * ebits / 8, nt, kl, ldb);
    cb.transpose = true;
  }
  uint64_t a_stage = (uint64_t)q * (core_chip(t)->buf[ARCH_BUF_L0A].size_bytes / 2);
  uint64_t b_stage = (uint64_t)q * (core_chip(t)->buf[ARCH_BUF_L0B].size_bytes / 2);
  ca.dst = ops_tile(MEM_L0A, CORE_ZZ, g->in, a_stage, mt, kl, 0);
  cb.dst = ops_tile(MEM_L0B, CORE_ZN, g->in, b_stage, kl, nt, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
  core_copy_ex(t, &ca);
  core_copy_ex(t, &cb);
  struct core_mmad mm = {.a = ca.dst, .b = cb.dst, .m = mt, .k = kl, .n = nt, .init = first};
  if (g->quant == Q_MX) load_l0_scales(t, g, s, at, a_stage, b_stage, mt, nt, k + kk, kk, kl, &mm);
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
  mm.c = ops_tile(MEM_L0C, CORE_NZ, g->acc, 0, mt, nt, (uint32_t)ops_roundup(mt, 16));
  mm.c.c0 = 16;
  core_mmad_ex(t, &mm);
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct gemm *g = ctx;
  struct gemm_unit *un = unit_of(t);
  uint32_t grp, mi, ni, ks, row0;
  decompose(g, b, &grp, &mi, &ni, &ks);
  uint32_t mt = tile_rows(g, grp, mi, &row0);
  uint32_t row = row0 + mi * g->mL1; /* first row of the tile in A and C */
  uint64_t bbase = g->b + (uint64_t)grp * g->K * g->N * es_bits(g->in) / 8;
  uint32_t nt = tile_cols(g, ni);
  uint32_t kb = ks * g->kper, ke = kb + g->kper < g->K ? kb + g->kper : g->K;
  bool first = true;
  uint32_t group = g->group ? kb / g->group : 0;
  struct mx_at at = {0, kb};
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  for (uint32_t k = kb; k < ke; k += g->kL1) {
    uint32_t kt = ke - k < g->kL1 ? ke - k : g->kL1;
    int s = (int)(un->l1_stage++ % 2);
    struct core_tile la, lb;
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
    load_l1(t, g, s, row, bbase, ni, mt, nt, k, kt, &la, &lb);
    if (g->quant == Q_MX) load_scales(t, g, s, row, ni, mt, nt, k, kt, kb, ke, &at);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    for (uint32_t kk = 0; kk < kt; kk += g->k0) {
      uint32_t kl = kt - kk < g->k0 ? kt - kk : g->k0;
      step_l0(t, g, s, &at, &la, &lb, mt, nt, k, kk, kl, first);
      first = false;
      /* per-group dequantization: the group's sums leave L0C before the next group starts */
      uint32_t kabs = k + kk + kl;
      if (fb_dequant(g) && g->group && kabs % g->group == 0 && kabs < ke) {
        write_out(t, g, row, ni, mt, nt, group++);
        core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
        first = true;
      }
    }
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
  }
  write_out(t, g, row, ni, mt, nt, group);
}

/* ------------------------------------------------------------------ w4a8: the vector cores */

/* Flag ids of the vector cores: the split's two UB slots, the epilogue. */
#define ID_PRE 8
#define ID_POST 10

/* The split, per UB slot: int8 in, fp16 work, int16 for the rounding, the two int4 rows out.
 * Each region ends 256 bytes past its data: a vector operand's bounds are checked over whole
 * repeats of 256 bytes. */
#define PRE_CHUNK 4096u /* activations per tile (a piece of one row) */
enum {
  PRE_X = 0,                       /* int8 x */
  PRE_F = PRE_X + PRE_CHUNK + 256, /* fp16 x */
  PRE_T = PRE_F + 2 * PRE_CHUNK,   /* fp16 work */
  PRE_I = PRE_T + 2 * PRE_CHUNK,   /* int16 floor(x / 16) */
  PRE_H = PRE_I + 2 * PRE_CHUNK,   /* fp16 floor(x / 16) */
  PRE_H4 = PRE_H + 2 * PRE_CHUNK,  /* int4 hi row */
  PRE_L4 = PRE_H4 + PRE_CHUNK / 2 + 256, /* int4 lo row */
  PRE_SLOT = PRE_L4 + PRE_CHUNK / 2 + 256,
};

/* One vector instruction of the split over `reps` repeats of 128 contiguous elements (256
 * bytes of fp16, the widest type of every step). */
static void pre_vec(struct core_tp *t, enum core_vec_op op, enum npu_dtype st, enum npu_dtype dt, uint64_t dst,
                    uint64_t src0, uint64_t src1, double scalar, uint32_t reps)
{
  struct core_vec v = {.op = (uint8_t)op, .dtype = (uint8_t)st, .dst_dtype = (uint8_t)dt, .repeat = (uint16_t)reps,
                       .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .mask = {~0ull, ~0ull},
                       .dst = dst, .src0 = src0, .src1 = src1, .scalar = scalar};
  /* 128 elements of b bits are b / 2 blocks of 32 bytes */
  v.dst_rep = (uint16_t)(npu_dtype_bits(dt) / 2);
  v.src0_rep = v.src1_rep = (uint16_t)(npu_dtype_bits(st) / 2);
  core_vec(t, &v);
}

/* The split of n activations at UB slot base u into hi = floor(x / 16) and lo = x - 16 hi - 8,
 * both int4. floor(x / 16) is x / 16 - 15/32 rounded to the nearest integer: x = 16 q + r with
 * r in 0..15 puts it within 15/32 of q, never on a tie; all fp16 steps are exact. */
static void pre_split(struct core_tp *t, uint64_t u, uint32_t n)
{
  uint32_t reps = ops_ceil(n, 128);
  pre_vec(t, CORE_VEC_CAST, NPU_DT_INT8, NPU_DT_FP16, u + PRE_F, u + PRE_X, 0, 0, reps);
  pre_vec(t, CORE_VEC_MULS, NPU_DT_FP16, NPU_DT_FP16, u + PRE_T, u + PRE_F, 0, 1.0 / 16, reps);
  pre_vec(t, CORE_VEC_ADDS, NPU_DT_FP16, NPU_DT_FP16, u + PRE_T, u + PRE_T, 0, -15.0 / 32, reps);
  pre_vec(t, CORE_VEC_CAST, NPU_DT_FP16, NPU_DT_INT16, u + PRE_I, u + PRE_T, 0, 0, reps);
  pre_vec(t, CORE_VEC_CAST, NPU_DT_INT16, NPU_DT_FP16, u + PRE_H, u + PRE_I, 0, 0, reps);
  pre_vec(t, CORE_VEC_CAST, NPU_DT_FP16, NPU_DT_INT4, u + PRE_H4, u + PRE_H, 0, 0, reps);
  pre_vec(t, CORE_VEC_MULS, NPU_DT_FP16, NPU_DT_FP16, u + PRE_T, u + PRE_H, 0, -16, reps);
  pre_vec(t, CORE_VEC_ADD, NPU_DT_FP16, NPU_DT_FP16, u + PRE_T, u + PRE_T, u + PRE_F, 0, reps);
  pre_vec(t, CORE_VEC_ADDS, NPU_DT_FP16, NPU_DT_FP16, u + PRE_T, u + PRE_T, 0, -8, reps);
  pre_vec(t, CORE_VEC_CAST, NPU_DT_FP16, NPU_DT_INT4, u + PRE_L4, u + PRE_T, 0, 0, reps);
}

/* One tile of the split: n activations of row r from column c, through UB slot s: GM -> UB
 * (MTE2), split (V), the hi and lo pieces to rows 2r and 2r + 1 of the int4 A (MTE3). */
static void pre_tile(struct core_tp *t, const struct gemm *g, uint32_t r, uint32_t c, uint32_t n, int s)
{
  uint64_t u = (uint64_t)s * PRE_SLOT;
  struct core_tile gx = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT8, g->x8 + (uint64_t)r * g->K + c, 1, n, 0);
  struct core_tile ux = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT8, u + PRE_X, 1, n, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PRE + s);
  core_copy(t, &ux, &gx);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_PRE + s);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_PRE + s);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_PRE + s);
  pre_split(t, u, n);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PRE + s);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_PRE + s);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_PRE + s);
  for (uint32_t h = 0; h < 2; h++) {
    struct core_tile uh = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT4, u + (h ? PRE_L4 : PRE_H4), 1, n, 0);
    struct core_tile gh = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT4, g->a + ((2ull * r + h) * g->K + c) / 2, 1, n, 0);
    core_copy(t, &gh, &uh);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_PRE + s);
}

/* Phase 1 on vector core v of the unit: its share of A's rows (every (cores x halves)-th),
 * split in tiles of PRE_CHUNK, two UB slots ping-pong. */
static void pre_phase(struct core_tp *t, const struct gemm *g, uint32_t v)
{
  uint32_t me = (uint32_t)core_unit(t) * g->halves + v, all = (uint32_t)g->cores * g->halves;
  for (int s = 0; s < 2; s++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PRE + s);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_PRE + s);
  }
  uint32_t i = 0;
  for (uint32_t r = me; r < g->mo; r += all)
    for (uint32_t c = 0; c < g->K; c += PRE_CHUNK, i++)
      pre_tile(t, g, r, c, g->K - c < PRE_CHUNK ? g->K - c : PRE_CHUNK, (int)(i % 2));
  for (int s = 0; s < 2; s++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_PRE + s);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_PRE + s);
  }
}

/* The epilogue's UB: the slot's 2 hv rows (hi, lo interleaved) of ntp fp32, the bias row, the
 * hv per-token scales, their broadcast blocks, the fp32 result, the output; each region ends
 * 256 bytes past its data (operands are checked over whole repeats). ntp is the tile width
 * rounded to 16, so that rows of fp32 and of 16-bit outputs start on 32-byte blocks. */
struct post_ub {
  uint64_t w, bias, xs, br, res, y, end;
};

static struct post_ub post_layout(uint32_t hv, uint32_t ntp)
{
  struct post_ub p;
  uint64_t row = (uint64_t)ntp * 4;
  p.w = 0;
  p.bias = p.w + 2 * hv * row + 256;
  p.xs = p.bias + row + 256;
  p.br = p.xs + ops_roundup(hv * 4, 32) + 256;
  p.res = p.br + (uint64_t)hv * 32 + 256;
  p.y = p.res + hv * row + 256;
  p.end = p.y + hv * row + 256;
  return p;
}

/* The epilogue's arithmetic on hv rows: per 64-column chunk (masked at the edge),
 * res = (16 hi + lo + bias) x x_scale, then the cast to the output type. */
static void post_math(struct core_tp *t, const struct gemm *g, const struct post_ub *p, uint32_t hv, uint32_t nt,
                      uint32_t ntp)
{
  uint16_t rs = (uint16_t)(ntp / 8); /* an fp32 row, in 32-byte blocks */
  struct core_vec b = {.op = CORE_VEC_BRCB, .dtype = NPU_DT_FP32, .repeat = (uint16_t)ops_ceil(hv, 8),
                       .dst_blk = 1, .dst_rep = 8, .src0_rep = 1, .mask = {~0ull, ~0ull}, .dst = p->br, .src0 = p->xs};
  core_vec(t, &b);
  for (uint32_t c = 0; c < nt; c += 64) {
    uint32_t lanes = nt - c < 64 ? nt - c : 64;
    uint64_t off = (uint64_t)c * 4;
    struct core_vec v = {.dtype = NPU_DT_FP32, .dst_dtype = NPU_DT_FP32, .repeat = (uint16_t)hv, .dst_blk = 1,
                         .src0_blk = 1, .src1_blk = 1, .dst_rep = rs, .src0_rep = (uint16_t)(2 * rs),
                         .mask = {lanes < 64 ? (1ull << lanes) - 1 : ~0ull, 0}};
    /* res = 16 x hi (the even rows of w) */
    v.op = CORE_VEC_MULS;
    v.dst = p->res + off;
    v.src0 = p->w + off;
    v.scalar = 16;
    core_vec(t, &v);
    /* res += lo (the odd rows) */
    v.op = CORE_VEC_ADD;
    v.src0 = p->res + off;
    v.src0_rep = rs;
    v.src1 = p->w + (uint64_t)ntp * 4 + off;
    v.src1_rep = (uint16_t)(2 * rs);
    core_vec(t, &v);
    /* res += bias (one row for every row) */
    v.src1 = p->bias + off;
    v.src1_rep = 0;
    core_vec(t, &v);
    /* res *= x_scale (a broadcast block per row) */
    v.op = CORE_VEC_MUL;
    v.src1 = p->br;
    v.src1_blk = 0;
    v.src1_rep = 1;
    core_vec(t, &v);
    if (g->out != NPU_DT_FP32) {
      v.op = CORE_VEC_CAST;
      v.dst_dtype = (uint8_t)g->out;
      v.dst = p->y + off / 2;
      v.dst_rep = rs / 2;
      core_vec(t, &v);
    }
  }
}

/* Rows of C the vector core v takes of a tile of mt int4 rows (mt / 2 rows of C): the first
 * half, rounded up, to the first vector core. */
static uint32_t post_rows(const struct gemm *g, uint32_t mt, uint32_t v, uint32_t *i0)
{
  uint32_t h = mt / 2, first = g->halves == 2 ? (h + 1) / 2 : h;
  *i0 = v ? first : 0;
  return v ? h - first : first;
}

/* Phase 3 on vector core v for one block: take the slot once the cube has filled it (GM -> UB:
 * the rows, bias, per-token scales), free it, compute, write the rows of C (MTE3). */
static void post_block(struct core_tp *t, const struct gemm *g, uint64_t slot, uint32_t row, uint32_t ni, uint32_t mt,
                       uint32_t v)
{
  uint32_t i0, hv = post_rows(g, mt, v, &i0), nt = tile_cols(g, ni), ntp = (uint32_t)ops_roundup(nt, 16);
  uint32_t crow = row / 2 + i0, s = unit_of(t)->w4_blocks % 2;
  struct post_ub p = post_layout(hv, ntp);
  core_xwait(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_FULL((int)s));
  if (hv) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_POST);
    struct core_tile gw = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, slot + 2ull * i0 * g->nL1 * 4, 2 * hv, nt, g->nL1);
    struct core_tile uw = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, p.w, 2 * hv, nt, ntp);
    struct core_tile gb = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->bias + (uint64_t)ni * g->nL1 * 4, 1, nt, 0);
    struct core_tile ub = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, p.bias, 1, nt, 0);
    struct core_tile gx = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->xsc + (uint64_t)crow * 4, 1, hv, 0);
    struct core_tile ux = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, p.xs, 1, hv, 0);
    core_copy(t, &uw, &gw);
    core_copy(t, &ub, &gb);
    core_copy(t, &ux, &gx);
  }
  core_xset(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_FREE((int)s));
  if (!hv) return;
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_POST);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_POST);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_POST);
  post_math(t, g, &p, hv, nt, ntp);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_POST);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_POST);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_POST);
  uint64_t coff = ((uint64_t)crow * g->N + (uint64_t)ni * g->nL1) * es_bits(g->out) / 8;
  struct core_tile uy = ops_tile(MEM_UB, CORE_ND, g->out, g->out == NPU_DT_FP32 ? p.res : p.y, hv, nt, ntp);
  struct core_tile gy = ops_tile(MEM_GM, CORE_ND, g->out, g->c + coff, hv, nt, g->N);
  core_copy(t, &gy, &uy);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_POST);
}

/* ------------------------------------------------------------------ w4a8: the MIX kernel */

static void select_aiv(struct core_tp *t, uint32_t v)
{
  core_select(t, aiv(v));
}

/* Phase 1 on the vector cores, the all-core barrier, then each core's set-up for phases 2 and 3:
 * the epilogue's UB is free, and both workspace slots are free for the cube. */
static void w4_begin(struct core_tp *t, void *ctx)
{
  struct gemm *g = ctx;
  for (uint32_t v = 0; v < g->halves; v++) {
    select_aiv(t, v);
    pre_phase(t, g, v);
  }
  core_sync_all(t);
  core_select(t, CORE_SUB_AIC);
  unit_begin(t, ctx);
  for (uint32_t v = 0; v < g->halves; v++) {
    select_aiv(t, v);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_POST);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_POST);
    for (int s = 0; s < 2; s++) core_xset(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_FREE(s));
  }
}

static void w4_end(struct core_tp *t, void *ctx)
{
  struct gemm *g = ctx;
  core_select(t, CORE_SUB_AIC);
  unit_end(t, ctx);
  for (int s = 0; s < 2; s++)
    for (uint32_t v = 0; v < g->halves; v++) core_xwait(t, CORE_PIPE_FIX, aiv(v), X_FREE(s));
  for (uint32_t v = 0; v < g->halves; v++) {
    select_aiv(t, v);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_POST);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_POST);
  }
}

/* Phase 2 (the cube's tile into the slot) and phase 3 (the vector cores' epilogue). */
static void w4_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct gemm *g = ctx;
  struct gemm_unit *un = unit_of(t);
  core_select(t, CORE_SUB_AIC);
  block(t, ctx, b);
  uint64_t slot = w4_slot(t, g);
  for (uint32_t v = 0; v < g->halves; v++)
    core_xset(t, CORE_PIPE_FIX, aiv(v), X_FULL((int)(un->w4_blocks % 2)));
  uint32_t grp, mi, ni, ks, row0;
  decompose(g, b, &grp, &mi, &ni, &ks);
  uint32_t mt = tile_rows(g, grp, mi, &row0);
  for (uint32_t v = 0; v < g->halves; v++) {
    select_aiv(t, v);
    post_block(t, g, slot, row0 + mi * g->mL1, ni, mt, v);
  }
  un->w4_wrote = false;
  un->w4_blocks++;
}

/* ------------------------------------------------------------------ planning */

static enum npu_dtype auto_out(enum npu_dtype in, int quant)
{
  if (quant) return NPU_DT_BF16;
  switch (in) {
  case NPU_DT_FP16: return NPU_DT_FP16;
  case NPU_DT_HF32:
  case NPU_DT_FP32: return NPU_DT_FP32;
  case NPU_DT_INT8:
  case NPU_DT_INT4: return NPU_DT_INT32;
  default: return NPU_DT_BF16;
  }
}

/* MX: the element type (--dtype mxfp8 / mxfp4 name the E4M3 / E2M1 forms and imply --quant mx)
 * and the chip's MX cube input. */
static int plan_mx(struct gemm *g, const struct arch_chip *chip, struct npu_diag *diag)
{
  if (g->in == NPU_DT_MXFP8 || g->in == NPU_DT_MXFP4) {
    g->in = g->in == NPU_DT_MXFP8 ? NPU_DT_FP8_E4M3 : NPU_DT_FP4_E2M1;
    g->quant = Q_MX;
  }
  if (g->quant != Q_MX) return 0;
  if (g->in != NPU_DT_FP8_E4M3 && g->in != NPU_DT_FP8_E5M2 && g->in != NPU_DT_FP4_E2M1)
    return npu_diag_set(diag, "command line", 0, "--dtype",
                        "--quant mx takes fp8_e4m3, fp8_e5m2 or fp4_e2m1 elements (or mxfp8, mxfp4), not %s",
                        npu_dtype_name(g->in)), NPU_EINVAL;
  enum npu_dtype mx = g->in == NPU_DT_FP4_E2M1 ? NPU_DT_MXFP4 : NPU_DT_MXFP8;
  if (chip->cube.macs_per_cycle[g->in] == 0 || chip->cube.macs_per_cycle[mx] == 0)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s has no %s cube input (MX blocks of %s)", chip->name,
                        npu_dtype_name(mx), npu_dtype_name(g->in)), NPU_EUNSUPPORTED;
  g->kb = ops_ceil(g->K, 32);
  return 0;
}

/* W4A8: int8 activations, split into int4 rows for the chip's int4 cube (2M rows of A). */
static int plan_w4a8(struct gemm *g, const struct arch_chip *chip, struct npu_diag *diag)
{
  if (g->in != NPU_DT_INT8)
    return npu_diag_set(diag, "command line", 0, "--quant",
                        "w4a8 needs --dtype int8 (the activations; the weights are int4)"), NPU_EINVAL;
  if (chip->cube.macs_per_cycle[NPU_DT_INT4] == 0)
    return npu_diag_set(diag, "command line", 0, "--quant",
                        "w4a8 runs the activations' int4 halves on the int4 cube (CANN's A8W4 MSD); %s has no int4 cube input",
                        chip->name), NPU_EUNSUPPORTED;
  if (g->ta)
    return npu_diag_set(diag, "command line", 0, "--trans_a", "w4a8 splits the rows of A: A is stored M x K"), NPU_EINVAL;
  if (g->K % 2 || (!g->tb && g->N % 2))
    return npu_diag_set(diag, "command line", 0, "--k",
                        "w4a8 packs int4 rows two a byte: K (and N unless --trans_b) must be even"), NPU_EINVAL;
  if (g->M > UINT32_MAX / 2)
    return npu_diag_set(diag, "command line", 0, "--m", "w4a8 needs 2M below 2^32"), NPU_EINVAL;
  g->mo = g->M;
  g->M *= 2;
  g->in = NPU_DT_INT4;
  g->halves = chip->org == ARCH_ORG_SPLIT && chip->aiv_count >= 2 * chip->aic_count ? 2 : 1;
  return 0;
}

/* Input, accumulator and output types, and the quantized modes' conditions. */
static int plan_types(struct gemm *g, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                      struct npu_diag *diag)
{
  if ((int)g->in >= (int)NPU_DT_CUBE_COUNT || chip->cube.macs_per_cycle[g->in] == 0)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s has no %s cube input", chip->name,
                        npu_dtype_name(g->in)), NPU_EUNSUPPORTED;
  int rc = plan_mx(g, chip, diag);
  if (rc) return rc;
  if (g->quant == Q_W8A8 && g->in != NPU_DT_INT8)
    return npu_diag_set(diag, "command line", 0, "--quant", "w8a8 needs --dtype int8"), NPU_EINVAL;
  if (g->quant == Q_W4A8 && (rc = plan_w4a8(g, chip, diag))) return rc;
  if (!fb_dequant(g) && g->group)
    return npu_diag_set(diag, "command line", 0, "--group", "a scale group needs --quant w8a8 or w4a8"), NPU_EINVAL;
  bool integer = g->in == NPU_DT_INT8 || g->in == NPU_DT_INT4;
  g->acc = integer ? NPU_DT_INT32 : NPU_DT_FP32;
  uint64_t oc = op_u(d, a, "out");
  g->out = oc == 0 ? auto_out(g->in, g->quant)
                   : (enum npu_dtype[]){NPU_DT_FP16, NPU_DT_FP16, NPU_DT_BF16, NPU_DT_FP32, NPU_DT_INT32}[oc];
  if (g->out == NPU_DT_INT32 && (!integer || g->quant == Q_W4A8))
    return npu_diag_set(diag, "command line", 0, "--out", "int32 output needs integer inputs, not dequantized"), NPU_EINVAL;
  if (integer && !g->quant && g->out != NPU_DT_INT32)
    return npu_diag_set(diag, "command line", 0, "--out", "integer GEMM writes int32 (use --quant w8a8 to dequantize)"), NPU_EINVAL;
  return 0;
}

/* L1, L0 and UB bytes the tiling needs, checked against the chip. */
static int plan_fit(struct gemm *g, const struct arch_chip *chip, struct npu_diag *diag)
{
  uint64_t a_bytes = ops_bytes(g->in, (uint64_t)ops_roundup(g->ta ? g->kL1 : g->mL1, 16) * ops_roundup(g->ta ? g->mL1 : g->kL1, g->c0));
  uint64_t b_bytes = ops_bytes(g->in, (uint64_t)ops_roundup(g->tb ? g->nL1 : g->kL1, 16) * ops_roundup(g->tb ? g->kL1 : g->nL1, g->c0));
  bool mx = g->quant == Q_MX;
  /* mx scales: A's in NZ strips of 2, B's in rows of tile_n; in L0 after the data of a stage */
  uint64_t sa_l1 = mx ? ops_roundup(ops_roundup(g->mL1, 16) * ops_roundup(ops_ceil(MX_SF * g->kL1, 32), 2), 32) : 0;
  uint64_t sb_l1 = mx ? ops_roundup((uint64_t)ops_ceil(g->kL1, 32) * g->nL1, 32) : 0;
  g->l0sa = ops_roundup(ops_bytes(g->in, (uint64_t)ops_roundup(g->mL1, 16) * g->k0), 512);
  g->l0sb = ops_roundup(ops_bytes(g->in, (uint64_t)g->k0 * ops_roundup(g->nL1, 16)), 512);
  uint64_t sa_l0 = mx ? ops_roundup(ops_roundup(g->mL1, 16) * ops_roundup(ops_ceil(g->k0, 32), 2), 512) : 0;
  uint64_t sb_l0 = mx ? ops_roundup(ops_roundup(ops_ceil(g->k0, 32), 2) * ops_roundup(g->nL1, 16), 512) : 0;
  uint64_t l1 = 2 * (a_bytes + b_bytes + sa_l1 + sb_l1) + (fb_dequant(g) ? (uint64_t)g->nL1 * 4 : 0);
  uint64_t l0c = (uint64_t)ops_roundup(g->mL1, 16) * ops_roundup(g->nL1, 16) * 4;
  uint32_t hv = g->mL1 / 2 - (g->halves == 2 ? g->mL1 / 4 : 0);
  uint64_t ub = g->quant == Q_W4A8 ? post_layout(hv, (uint32_t)ops_roundup(g->nL1, 16)).end : 0;
  if (g->quant == Q_W4A8 && 2 * PRE_SLOT > ub) ub = 2 * PRE_SLOT;
  struct { uint64_t need, have; const char *what; } fit[] = {
      {l1, chip->buf[ARCH_BUF_L1].size_bytes, "L1"}, {2 * (g->l0sa + sa_l0), chip->buf[ARCH_BUF_L0A].size_bytes, "L0A"},
      {2 * (g->l0sb + sb_l0), chip->buf[ARCH_BUF_L0B].size_bytes, "L0B"}, {l0c, chip->buf[ARCH_BUF_L0C].size_bytes, "L0C"},
      {ub, chip->buf[ARCH_BUF_UB].size_bytes, "UB"}};
  for (int i = 0; i < 5; i++)
    if (fit[i].need > fit[i].have)
      return npu_diag_set(diag, "command line", 0, "--tile_m",
                          "tiling %ux%ux%u (k0 %u) does not fit: %s needs %llu bytes, has %llu",
                          g->mL1, g->nL1, g->kL1, g->k0, fit[i].what, (unsigned long long)fit[i].need,
                          (unsigned long long)fit[i].have), NPU_ENOFIT;
  g->l1a[0] = 0;
  g->l1a[1] = a_bytes;
  g->l1b[0] = 2 * a_bytes;
  g->l1b[1] = 2 * a_bytes + b_bytes;
  g->l1s = 2 * (a_bytes + b_bytes);
  for (int s = 0; s < 2; s++) {
    g->l1sa[s] = g->l1s + (uint64_t)g->nL1 * 4 * fb_dequant(g) + (uint64_t)s * sa_l1;
    g->l1sb[s] = g->l1sa[0] + 2 * sa_l1 + (uint64_t)s * sb_l1;
  }
  return 0;
}

/*
 * catlass's N tile is 256. When the blocks that gives leave the last wave of cube cores mostly
 * idle (a 24-block GEMV on 20 cores takes two waves for 1.2 waves of work), take the widest
 * multiple of 16 below it whose blocks fill the waves to 90% or more (never below 64); where
 * none does (a GEMM of fewer blocks than cores at every width: M 705, N 658 on 108 SMs had 18
 * blocks of 256 columns, 29.6 us, where 66 of 64 take a quarter of the time), the width of the
 * least waves x width.
 */
static uint32_t default_tile_n(const struct gemm *g, const struct arch_chip *chip, uint64_t cores)
{
  uint64_t c = cores ? cores : (uint64_t)chip->aic_count, bm = ops_ceil(g->M, g->mL1);
  uint32_t best = 256;
  double best_cost = INFINITY;
  for (uint32_t tn = 256; tn >= 64; tn -= 16) {
    uint64_t blocks = bm * ops_ceil(g->N, tn), waves = (blocks + c - 1) / c;
    if ((double)bm * g->N / tn >= 0.9 * (double)(waves * c)) return tn;
    /* none fills 90% of its waves (too few blocks for the cores): the width whose waves take
     * least time (a block's time goes with its width), the widest of equal ones */
    double cost = (double)waves * tn;
    if (cost < best_cost) best_cost = cost, best = tn;
  }
  return best;
}

/* Tile sizes: the defaults, options, and the conditions of the L0 step. */
static int plan_tiles(struct gemm *g, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                      struct npu_diag *diag)
{
  uint32_t ebits = es_bits(g->in);
  g->c0 = 256 / ebits;
  uint64_t tm = op_u(d, a, "tile_m"), tn = op_u(d, a, "tile_n"), tk = op_u(d, a, "tile_k"), tk0 = op_u(d, a, "tile_k0");
  g->mL1 = (uint32_t)(tm ? tm : (g->M < 128 ? ops_roundup(g->M, 16) : 128));
  g->nL1 = (uint32_t)(tn ? tn : default_tile_n(g, chip, op_u(d, a, "cores")));
  g->kL1 = (uint32_t)(tk ? tk : 4096 / ebits);
  g->k0 = (uint32_t)(tk0 ? tk0 : (g->quant == Q_MX ? 512 : 1024) / ebits);
  if (!tk0 && fb_dequant(g) && g->group && g->group < g->k0 && g->group % g->c0 == 0) g->k0 = g->group;
  if (g->mL1 % 16 || g->nL1 % 16)
    return npu_diag_set(diag, "command line", 0, "--tile_m", "tiles must be multiples of 16 (got %ux%u)", g->mL1, g->nL1), NPU_EINVAL;
  if (g->k0 % g->c0 || g->kL1 % g->k0)
    return npu_diag_set(diag, "command line", 0, "--tile_k0", "tile_k0 must be a multiple of %u and divide tile_k (got %u, %u)",
                        g->c0, g->k0, g->kL1), NPU_EINVAL;
  if (g->quant == Q_MX && g->k0 % 64)
    return npu_diag_set(diag, "command line", 0, "--tile_k0", "mx needs tile_k0 a multiple of 64 (a 2-scale fractal), got %u",
                        g->k0), NPU_EINVAL;
  if (fb_dequant(g) && g->group && (g->group % g->k0 || g->K % g->group))
    return npu_diag_set(diag, "command line", 0, "--group", "the group must be a multiple of tile_k0 (%u) and divide K", g->k0), NPU_EINVAL;
  int rc = plan_fit(g, chip, diag);
  /* Default tiles that a small L1 (a GPU's shared memory) cannot hold shrink: shorter L1 K
   * steps first (down to the L0 step), then narrower N tiles (down to 64). */
  while (rc == NPU_ENOFIT && !tm && !tn && !tk && !tk0) {
    if (g->kL1 > g->k0) g->kL1 /= 2;
    else if (g->nL1 > 64) g->nL1 /= 2;
    else break;
    rc = plan_fit(g, chip, diag);
  }
  return rc;
}

/* Cores, blocks and the K split. */
static int plan_blocks(struct gemm *g, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                       struct npu_diag *diag)
{
  g->swz = (uint32_t)op_u(d, a, "swizzle");
  g->swz_dir = (uint32_t)op_u(d, a, "swizzle_dir");
  if (g->swz_dir > 1)
    return npu_diag_set(diag, "command line", 0, "--swizzle_dir", "expected 0 or 1"), NPU_EINVAL;
  if (g->swz == 0)
    return npu_diag_set(diag, "command line", 0, "--swizzle", "expected a strip width of at least 1 tile (1: plain row-major order)"),
           NPU_EINVAL;
  uint64_t cores = op_u(d, a, "cores");
  if (cores > (uint64_t)chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--cores", "%s has %d cube cores", chip->name, chip->aic_count), NPU_EINVAL;
  g->cores = cores ? (int)cores : chip->aic_count;
  g->bm = ops_ceil(g->M, g->mL1);
  g->bn = ops_ceil(g->N, g->nL1);
  uint64_t tiles = (uint64_t)g->bm * g->bn;
  uint64_t sk = op_u(d, a, "split_k");
  uint32_t ksteps = ops_ceil(g->K, g->kL1);
  if (g->quant == Q_W4A8 && sk > 1)
    return npu_diag_set(diag, "command line", 0, "--split_k", "w4a8 does not split K: its vector epilogue needs whole sums"),
           NPU_EINVAL;
  if (sk == 0) {
    /* split K when the tiles leave more than half the cores idle and each split keeps 4 L1 steps */
    sk = 1;
    if (tiles * 2 <= (uint64_t)g->cores && !(fb_dequant(g) && g->group) && g->quant != Q_W4A8) {
      sk = (uint64_t)g->cores / tiles;
      if (sk > ksteps / 4) sk = ksteps / 4;
      if (sk < 1) sk = 1;
    }
  }
  if (sk > ksteps)
    return npu_diag_set(diag, "command line", 0, "--split_k",
                        "%llu splits of K = %u, but it has only %u L1 steps of %u (at most %u splits)",
                        (unsigned long long)sk, g->K, ksteps, g->kL1, ksteps),
           NPU_EINVAL;
  g->splitk = (uint32_t)sk;
  g->kper = ops_ceil(ksteps, g->splitk) * g->kL1;
  g->splitk = ops_ceil(g->K, g->kper);
  g->nblocks = tiles * g->splitk;
  g->atomic = g->splitk > 1 || (g->quant == Q_W8A8 && g->group);
  bool integer = g->in == NPU_DT_INT8 || g->in == NPU_DT_INT4;
  g->fix_out = g->atomic ? (integer && !g->quant ? NPU_DT_INT32 : NPU_DT_FP32) : g->out;
  if (g->quant == Q_W4A8) g->fix_out = NPU_DT_FP32;
  if (g->cores > (int)g->nblocks) g->cores = (int)g->nblocks;
  /* Hopper-class chips: clusters of m-tiles with one B tile, multicast to the members (CUTLASS's
   * sm90 GEMMs: cluster 2 x 1 x 1), where whole clusters tile M, K is not split and the cores
   * hold whole clusters */
  g->cluster = 1;
  uint32_t mc = (uint32_t)chip->dma.multicast;
  if (mc > 1 && g->splitk == 1 && g->bm % mc == 0 && g->cores % (int)mc == 0) g->cluster = mc;
  return 0;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *a,
                const struct arch_chip *chip, struct npu_diag *diag)
{
  struct gemm *g = p;
  memset(g, 0, sizeof *g);
  g->chip = chip;
  g->M = g->mo = (uint32_t)op_u(d, a, "m");
  g->N = (uint32_t)op_u(d, a, "n");
  g->K = (uint32_t)op_u(d, a, "k");
  g->in = op_dtype(d, a, "dtype");
  g->ta = op_u(d, a, "trans_a");
  g->tb = op_u(d, a, "trans_b");
  g->quant = (int)op_u(d, a, "quant");
  g->group = (uint32_t)op_u(d, a, "group");
  g->act_scale = 0.0123f;
  if (op_u(d, a, "m") > UINT32_MAX || op_u(d, a, "n") > UINT32_MAX || op_u(d, a, "k") > UINT32_MAX)
    return npu_diag_set(diag, "command line", 0, "--m", "dimensions above 2^32 are not supported"), NPU_EINVAL;
  int rc = plan_types(g, d, a, chip, diag);
  if (!rc) rc = plan_tiles(g, d, a, chip, diag);
  if (!rc) rc = plan_blocks(g, d, a, chip, diag);
  return rc;
}

/* ------------------------------------------------------------------ setup */

/*
 * MX inputs (functional runs): values uniform in [-1, 1) times 2^e, e drawn per block of 32 in
 * -4..4 so that scales differ from block to block, quantized along K one line (a row of A, a
 * column of B) at a time (fmt_mx_quantize). Element (line, k) is stored at line x ls + k x ks,
 * the scale of (line, block) at line x ss + block x sks.
 */
static void mx_fill(struct op_exec *x, const struct gemm *g, struct op_tensor *data, struct op_tensor *scales,
                    uint32_t lines, uint64_t ls, uint64_t ks, uint64_t ss, uint64_t sks)
{
  double *v = npu_xmalloc((size_t)g->K * sizeof *v);
  uint8_t *codes = npu_xmalloc(fmt_bytes(g->in, g->K) + 1), *sc = npu_xmalloc(g->kb);
  uint8_t *shost = scales->host;
  for (uint32_t line = 0; line < lines; line++) {
    int e = 0;
    for (uint32_t k = 0; k < g->K; k++) {
      if (k % 32 == 0) e = (int)floor(op_rand(x) * 9) - 4;
      v[k] = (2 * op_rand(x) - 1) * ldexp(1.0, e);
    }
    fmt_mx_quantize(g->in, v, g->K, codes, sc);
    for (uint32_t k = 0; k < g->K; k++) fmt_encode(g->in, data->host, line * ls + k * ks, fmt_decode(g->in, codes, k));
    for (uint32_t b = 0; b < g->kb; b++) shost[line * ss + b * sks] = sc[b];
  }
  free(v);
  free(codes);
  free(sc);
}

/* A and B of the GEMM (with their MX scales). */
static void setup_inputs(struct gemm *g, struct op_exec *x)
{
  uint64_t mk = (uint64_t)g->M * g->K, kn = (uint64_t)g->K * g->N;
  if (g->quant != Q_MX) {
    g->a = op_tensor(x, "a", g->in, mk, OP_INIT_UNIFORM)->addr;
    g->b = op_tensor(x, "b", g->in, kn, OP_INIT_UNIFORM)->addr;
    return;
  }
  struct op_tensor *a = op_tensor(x, "a", g->in, mk, OP_INIT_NONE), *b = op_tensor(x, "b", g->in, kn, OP_INIT_NONE);
  struct op_tensor *sa = op_tensor(x, "a_scale", NPU_DT_UINT8, (uint64_t)g->M * g->kb, OP_INIT_NONE);
  struct op_tensor *sb = op_tensor(x, "b_scale", NPU_DT_UINT8, (uint64_t)g->kb * g->N, OP_INIT_NONE);
  if (op_functional(x)) {
    mx_fill(x, g, a, sa, g->M, g->ta ? 1 : g->K, g->ta ? g->M : 1, g->kb, 1);
    mx_fill(x, g, b, sb, g->N, g->tb ? g->K : 1, g->tb ? 1 : g->N, 1, g->N);
  }
  g->a = a->addr;
  g->b = b->addr;
  g->sa = sa->addr;
  g->sb = sb->addr;
}

/* W4A8's bias input, 8 x sum over K of w x scale per column (the "+ 8" of every lo half),
 * computed once with the weights. */
static void w4_bias(const struct gemm *g, struct op_exec *x, struct op_tensor *bias)
{
  const struct op_tensor *w = op_find_tensor(x, "b"), *s = op_find_tensor(x, "scales");
  for (uint32_t n = 0; n < g->N; n++) {
    double sum = 0;
    for (uint32_t k = 0; k < g->K; k++) {
      uint64_t wi = g->tb ? (uint64_t)n * g->K + k : (uint64_t)k * g->N + n;
      uint64_t si = (uint64_t)(g->group ? k / g->group : 0) * g->N + n;
      sum += fmt_decode(NPU_DT_INT4, w->host, wi) * fmt_decode(NPU_DT_FP32, s->host, si);
    }
    fmt_encode(NPU_DT_FP32, bias->host, n, 8 * sum);
  }
}

/* W4A8: inputs, the int4 split of A, the workspace slots, and the one MIX kernel. */
static void w4_setup(struct gemm *g, struct op_exec *x)
{
  uint64_t mk = (uint64_t)g->mo * g->K;
  g->x8 = op_tensor(x, "a", NPU_DT_INT8, mk, OP_INIT_UNIFORM)->addr;
  g->b = op_tensor(x, "b", NPU_DT_INT4, (uint64_t)g->K * g->N, OP_INIT_UNIFORM)->addr;
  uint32_t groups = g->group ? g->K / g->group : 1;
  g->scales = op_tensor(x, "scales", NPU_DT_FP32, (uint64_t)groups * g->N, OP_INIT_POSITIVE)->addr;
  g->xsc = op_tensor(x, "x_scale", NPU_DT_FP32, g->mo, OP_INIT_POSITIVE)->addr;
  struct op_tensor *bias = op_tensor(x, "bias", NPU_DT_FP32, g->N, OP_INIT_NONE);
  if (op_functional(x)) w4_bias(g, x, bias);
  g->bias = bias->addr;
  g->a = op_tensor(x, "xs", NPU_DT_INT4, 2 * mk, OP_INIT_NONE)->addr;
  g->ws = op_tensor(x, "ws", NPU_DT_FP32, (uint64_t)g->cores * 2 * g->mL1 * g->nL1, OP_INIT_SCRATCH)->addr;
  g->c = op_tensor(x, "c", g->out, (uint64_t)g->mo * g->N, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "gemm_w4a8", .mode = CORE_MODE_MIX, .block_dim = g->cores,
                          .nblocks = g->nblocks, .ctx = g, .unit_begin = w4_begin,
                          .unit_end = w4_end, .block = w4_block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct gemm_unit)};
  op_kernel(x, &k);
}

static void setup(void *p, struct op_exec *x)
{
  struct gemm *g = p;
  if (g->quant == Q_W4A8) {
    w4_setup(g, x);
    return;
  }
  uint64_t mn = (uint64_t)g->M * g->N;
  setup_inputs(g, x);
  if (g->quant == Q_W8A8) {
    uint32_t groups = g->group ? g->K / g->group : 1;
    g->scales = op_tensor(x, "scales", NPU_DT_FP32, (uint64_t)groups * g->N, OP_INIT_POSITIVE)->addr;
  }
  g->c = op_tensor(x, "c", g->out, mn, OP_INIT_NONE)->addr;
  if (g->atomic) {
    if (g->fix_out == g->out)
      g->acc_ws = g->c;
    else
      g->acc_ws = op_tensor(x, "acc", g->fix_out, mn, OP_INIT_SCRATCH)->addr;
    ops_fill(x, g->acc_ws, g->fix_out, mn, 0);
  }
  struct core_kernel k = {.name = "gemm", .mode = CORE_MODE_CUBE, .block_dim = g->cores,
                          .nblocks = g->nblocks, .ctx = g, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct gemm_unit)};
  op_kernel(x, &k);
  if (g->atomic && g->acc_ws != g->c) ops_cast(x, g->acc_ws, g->fix_out, g->c, g->out, mn);
}

/* The plain GEMM's arguments; tile_n 0: the default width. */
static int plain_args(struct op_args *a, uint32_t m, uint32_t n, uint32_t k, enum npu_dtype dtype, bool trans_b,
                      uint32_t tile_n, struct npu_diag *diag)
{
  char kv[6][48];
  snprintf(kv[0], sizeof kv[0], "m=%u", m);
  snprintf(kv[1], sizeof kv[1], "n=%u", n);
  snprintf(kv[2], sizeof kv[2], "k=%u", k);
  snprintf(kv[3], sizeof kv[3], "dtype=%s", npu_dtype_name(dtype));
  snprintf(kv[4], sizeof kv[4], "trans_b=%s", trans_b ? "true" : "false");
  snprintf(kv[5], sizeof kv[5], "tile_n=%u", tile_n);
  const char *const args[] = {kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], "split_k=1"};
  return op_args_parse(&op_gemm, a, args, 7, diag);
}

int ops_gemm_plan(struct gemm **out, const struct arch_chip *chip, uint32_t m, uint32_t n, uint32_t k,
                  enum npu_dtype dtype, bool trans_b, int share, struct npu_diag *diag)
{
  struct op_args a;
  struct gemm *g = npu_xcalloc(1, sizeof *g);
  uint32_t tile_n = 0;
  int rc = 0;
  if (share > 1) { /* the width the GEMM of all `share` slices together would take */
    rc = plain_args(&a, m * (uint32_t)share, n, k, dtype, trans_b, 0, diag);
    if (!rc) rc = plan(g, &op_gemm, &a, chip, diag);
    tile_n = g->nL1;
  }
  if (!rc) rc = plain_args(&a, m, n, k, dtype, trans_b, tile_n, diag);
  if (!rc) rc = plan(g, &op_gemm, &a, chip, diag);
  if (rc) {
    free(g);
    return rc;
  }
  *out = g;
  return 0;
}

static void group_blocks(struct gemm *g);

int ops_gemm_grouped_plan(struct gemm **out, const struct arch_chip *chip, const uint32_t *rows, uint32_t groups,
                          uint32_t n, uint32_t k, enum npu_dtype dtype, struct npu_diag *diag)
{
  uint64_t m = 0;
  for (uint32_t i = 0; i < groups; i++) m += rows[i];
  if (!groups || !m || m > UINT32_MAX)
    return npu_diag_set(diag, "command line", 0, "--m", "a grouped GEMM of %llu rows in %u groups",
                        (unsigned long long)m, groups),
           NPU_EINVAL;
  int rc = ops_gemm_plan(out, chip, (uint32_t)m, n, k, dtype, false, 1, diag);
  if (rc) return rc;
  struct gemm *g = *out;
  g->ngroups = groups;
  g->rows = npu_xmalloc(groups * sizeof *g->rows);
  g->row0 = npu_xcalloc(groups, sizeof *g->row0);
  memcpy(g->rows, rows, groups * sizeof *g->rows);
  group_blocks(g);
  return 0;
}

void ops_gemm_tiles(const struct gemm *g, uint32_t *tile_m, uint32_t *tile_n)
{
  *tile_m = g->mL1;
  *tile_n = g->nL1;
}

uint32_t ops_gemm_block_group(const struct gemm *g, uint64_t b)
{
  return g->blk ? g->blk[3 * (b / g->splitk)] : 0;
}

uint64_t ops_gemm_group_blocks(const struct gemm *g, uint32_t group)
{
  if (!g->blk) return g->nblocks;
  return (uint64_t)ops_ceil(g->rows[group], g->mL1) * g->bn * g->splitk;
}

void ops_gemm_free(struct gemm *g)
{
  if (!g) return;
  free(g->rows);
  free(g->row0);
  free(g->blk);
  free(g);
}

uint64_t ops_gemm_blocks(const struct gemm *g)
{
  return g->nblocks;
}

enum npu_dtype ops_gemm_out(const struct gemm *g)
{
  return g->out;
}

size_t ops_gemm_unit_bytes(void)
{
  return sizeof(struct gemm_unit);
}

void ops_gemm_unit_begin(struct core_tp *t, struct gemm *g)
{
  unit_begin(t, g);
}

void ops_gemm_unit_end(struct core_tp *t, struct gemm *g)
{
  unit_end(t, g);
}

/* The block's instructions carry their addresses once emitted, so A, B and C are the plan's only
 * while the block is emitted. */
void ops_gemm_block_at(struct core_tp *t, struct gemm *g, uint64_t b, uint64_t a, uint64_t bm, uint64_t c)
{
  uint64_t keep[3] = {g->a, g->b, g->c};
  g->a = a;
  g->b = bm;
  g->c = c;
  block(t, g, b);
  g->a = keep[0];
  g->b = keep[1];
  g->c = keep[2];
}

static double flops(const void *p)
{
  const struct gemm *g = p;
  return 2.0 * g->mo * g->N * (double)g->K;
}

/* ------------------------------------------------------------------ host references */

static double eps_of(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP16: return 1.0 / 1024;
  case NPU_DT_BF16: return 1.0 / 128;
  case NPU_DT_FP32: return 1.0 / (1 << 20);
  default: return 0;
  }
}

/* Worst |got - ref| / bound over n outputs, bound = (one rounding to out) of (|ref| + acc) plus
 * acc, acc[i] the accumulation error allowed for output i. */
static double compare_bound(const double *got, const double *ref, const double *acc, size_t n, enum npu_dtype out)
{
  double u = eps_of(out) * 0.51, worst = 0;
  for (size_t i = 0; i < n; i++) {
    double bound = u * (fabs(ref[i]) + acc[i]) + acc[i] + 1e-300;
    double e = isnan(got[i]) || isnan(ref[i]) ? INFINITY : fabs(got[i] - ref[i]) / bound;
    if (e > worst) worst = e;
  }
  return worst;
}

/* Decoded MX input: element (line, k) at line x ls + k x ks, times its E8M0 scale. */
static double *mx_decode(const struct gemm *g, const struct op_tensor *data, const struct op_tensor *scales,
                         uint32_t lines, uint64_t ls, uint64_t ks, uint64_t ss, uint64_t sks)
{
  double *v = npu_xmalloc((size_t)lines * g->K * sizeof *v);
  const uint8_t *sc = scales->host;
  for (uint32_t line = 0; line < lines; line++)
    for (uint32_t k = 0; k < g->K; k++)
      v[(size_t)line * g->K + k] = fmt_decode(g->in, data->host, line * ls + k * ks) *
                                   fmt_e8m0_to_double(sc[line * ss + (k / 32) * sks]);
  return v;
}

/* MX: the decoded blocks multiplied in double. Tolerance: fp32 accumulation of K products,
 * at most K x 2^-24 x sum |a b| (the worst case of recursive summation; the scaled products
 * are exact in fp32), then one rounding to the output type. */
static bool check_mx(struct gemm *g, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  double *A = mx_decode(g, op_find_tensor(x, "a"), op_find_tensor(x, "a_scale"), g->M, g->ta ? 1 : g->K,
                        g->ta ? g->M : 1, g->kb, 1);
  double *B = mx_decode(g, op_find_tensor(x, "b"), op_find_tensor(x, "b_scale"), g->N, g->tb ? g->K : 1,
                        g->tb ? 1 : g->N, 1, g->N);
  double *C = op_decode(op_find_tensor(x, "c"));
  size_t mn = (size_t)g->M * g->N;
  double *R = npu_xcalloc(mn, sizeof *R), *E = npu_xcalloc(mn, sizeof *E);
  for (uint32_t i = 0; i < g->M; i++)
    for (uint32_t j = 0; j < g->N; j++)
      for (uint32_t k = 0; k < g->K; k++) {
        double ab = A[(size_t)i * g->K + k] * B[(size_t)j * g->K + k];
        R[(size_t)i * g->N + j] += ab;
        E[(size_t)i * g->N + j] += fabs(ab) * g->K * 0x1p-24;
      }
  *max_err = compare_bound(C, R, E, mn, g->out);
  snprintf(summary, n, "%ux%ux%u MX %s -> %s: worst error %.3g of tolerance (one %s rounding + K x 2^-24 x sum|ab|)",
           g->M, g->N, g->K, npu_dtype_name(g->in), npu_dtype_name(g->out), *max_err, npu_dtype_name(g->out));
  free(A);
  free(B);
  free(C);
  free(R);
  free(E);
  return *max_err <= 1;
}

/*
 * W4A8: y = x_scale x sum over groups of scale x (sum over the group of x w), in double.
 * Tolerance: the fp32 steps (each group's FixPipe dequantization of its hi and lo sums, the
 * atomic adds, the bias and the epilogue's four operations) each err by at most 2^-24 of
 * T = x_scale x sum |x + 32| |w| scale, a bound of every partial result; then one rounding to
 * the output type.
 */
static bool check_w4a8(struct gemm *g, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  double *X = op_decode(op_find_tensor(x, "a")), *W = op_decode(op_find_tensor(x, "b"));
  double *S = op_decode(op_find_tensor(x, "scales")), *XS = op_decode(op_find_tensor(x, "x_scale"));
  double *C = op_decode(op_find_tensor(x, "c"));
  size_t mn = (size_t)g->mo * g->N;
  double *R = npu_xcalloc(mn, sizeof *R), *E = npu_xcalloc(mn, sizeof *E);
  uint32_t ngroups = g->group ? g->K / g->group : 1;
  double steps = 2.0 * ngroups + 8;
  for (uint32_t i = 0; i < g->mo; i++)
    for (uint32_t j = 0; j < g->N; j++)
      for (uint32_t k = 0; k < g->K; k++) {
        double xv = X[(size_t)i * g->K + k], s = S[(size_t)(g->group ? k / g->group : 0) * g->N + j];
        double w = W[g->tb ? (size_t)j * g->K + k : (size_t)k * g->N + j];
        R[(size_t)i * g->N + j] += XS[i] * xv * w * s;
        E[(size_t)i * g->N + j] += XS[i] * (fabs(xv) + 32) * fabs(w) * s * steps * 0x1p-24;
      }
  *max_err = compare_bound(C, R, E, mn, g->out);
  snprintf(summary, n, "%ux%ux%u W4A8 (group %u) -> %s: worst error %.3g of tolerance (one %s rounding + fp32 steps)",
           g->mo, g->N, g->K, g->group, npu_dtype_name(g->out), *max_err, npu_dtype_name(g->out));
  free(X);
  free(W);
  free(S);
  free(XS);
  free(C);
  free(R);
  free(E);
  return *max_err <= 1;
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct gemm *g = p;
  if (g->quant == Q_MX) return check_mx(g, x, max_err, summary, n);
  if (g->quant == Q_W4A8) return check_w4a8(g, x, max_err, summary, n);
  double *A = op_decode(op_find_tensor(x, "a")), *B = op_decode(op_find_tensor(x, "b"));
  double *C = op_decode(op_find_tensor(x, "c"));
  double *S = g->quant ? op_decode(op_find_tensor(x, "scales")) : NULL;
  size_t mn = (size_t)g->M * g->N;
  double *R = npu_xcalloc(mn, sizeof *R);
  uint32_t gs = g->quant && g->group ? g->group : g->K;
  double as = (double)g->act_scale;
  double *part = npu_xmalloc((size_t)g->N * sizeof *part);
  double *brow = npu_xmalloc((size_t)g->N * sizeof *brow);
  for (uint32_t i = 0; i < g->M; i++) {
    double *r = R + (size_t)i * g->N;
    for (uint32_t k0 = 0; k0 < g->K; k0 += gs) {
      memset(part, 0, (size_t)g->N * sizeof *part);
      for (uint32_t k = k0; k < k0 + gs && k < g->K; k++) {
        double a = g->ta ? A[(size_t)k * g->M + i] : A[(size_t)i * g->K + k];
        const double *b = B + (size_t)k * g->N;
        if (g->tb) {
          for (uint32_t j = 0; j < g->N; j++) brow[j] = B[(size_t)j * g->K + k];
          b = brow;
        }
        for (uint32_t j = 0; j < g->N; j++) part[j] += a * b[j];
      }
      for (uint32_t j = 0; j < g->N; j++)
        r[j] += g->quant ? part[j] * S[(size_t)(k0 / gs) * g->N + j] * as : part[j];
    }
  }
  free(part);
  free(brow);
  /* fp32 sums over K of products of values in [-1, 1): error ~ sqrt(K) fp32 ulps, then one
   * rounding to the output type */
  double atol = g->out == NPU_DT_INT32 ? 0.5 : 1e-6 * sqrt((double)g->K) + eps_of(g->out) * 0.5;
  double rtol = g->out == NPU_DT_INT32 ? 0 : eps_of(g->out) * 0.51 + 1e-6;
  *max_err = op_compare(C, R, mn, atol, rtol);
  snprintf(summary, n, "%ux%ux%u %s -> %s: worst error %.3g of tolerance (atol %.3g, rtol %.3g)", g->M,
           g->N, g->K, npu_dtype_name(g->in), npu_dtype_name(g->out), *max_err, atol, rtol);
  free(A);
  free(B);
  free(C);
  free(S);
  free(R);
  return *max_err <= 1;
}

/* The backward of C = op(A) op(B) (m x k by k x n): dA and dB, each in its operand's layout; the
 * precision is the forward's (a training step's fp8 recipe re-types them). */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  int64_t m = (int64_t)op_call_u(fwd, "m"), n = (int64_t)op_call_u(fwd, "n"), k = (int64_t)op_call_u(fwd, "k");
  bool ta = op_call_u(fwd, "trans_a") != 0, tb = op_call_u(fwd, "trans_b") != 0;
  enum npu_dtype dt = (enum npu_dtype)op_call_u(fwd, "dtype");
  /* dA: dC op(B)^T (m x k), or its transpose op(B) dC^T (k x m) when A is stored K x M */
  bool dta = ta ? tb : false, dtb = ta ? true : !tb;
  op_call_init(&out[0], "gemm");
  op_call_dim(&out[0], "m", ta ? k : m);
  op_call_dim(&out[0], "n", ta ? m : k);
  op_call_dim(&out[0], "k", n);
  op_call_dtype(&out[0], "dtype", dt);
  if (dta) op_call_bool(&out[0], "trans_a", true);
  if (dtb) op_call_bool(&out[0], "trans_b", true);
  grad[0] = OP_GRAD_INPUT;
  /* dB: dC^T op(A) (n x k) when B is stored N x K, else op(A)^T dC (k x n) */
  op_call_init(&out[1], "gemm");
  op_call_dim(&out[1], "m", tb ? n : k);
  op_call_dim(&out[1], "n", tb ? k : n);
  op_call_dim(&out[1], "k", m);
  op_call_dtype(&out[1], "dtype", dt);
  if (tb ? true : !ta) op_call_bool(&out[1], "trans_a", true);
  if (tb ? ta : false) op_call_bool(&out[1], "trans_b", true);
  grad[1] = OP_GRAD_WEIGHT;
  return 2;
}

/* The width of the fewest equal tiles of at most max columns that cover n, in multiples of 16. */
static uint64_t even(uint64_t n, uint64_t max)
{
  return ops_roundup(ops_ceil(n, ops_ceil(n, max)), 16);
}

/*
 * The tiling search's candidates (op_desc.variants), when the caller fixed no tile: the default
 * tiling (128 x 256, or narrower N tiles that fill the last wave), 128-row tiles of equal width
 * up to 256 (catlass's 128 x 256 when N is a multiple of 256; a ragged last tile would load all
 * of its A rows for a few columns), rows balanced over the cores (below), 256 x 128 tiles (half
 * the B traffic per block) and 256-row tiles of equal width up to 128; and, where the default
 * tiles are few (at most 64), K split 1, 2, 4 and 8 ways: the automatic split is a rule (half
 * the cores idle, 4 L1 steps per split) that ignores the launches a split adds (zeroing and
 * casting kernels, 20 us each on A2), so M 1400 N 17 K 4476 on 910B2 took 70 us split in two
 * against 38 us for twice the rows unsplit.
 * A tiling the chip's buffers cannot hold, or a split of more ways than K has L1 steps, fails
 * its plan and drops out of the search.
 */
#define SPLIT_SEARCH_TILES 64 /* default tiles at most: K splits are candidates (more SMs than any preset) */

static int variants(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, struct op_args *out,
                    int max)
{
  int im = op_param_index(d, "tile_m"), in = op_param_index(d, "tile_n"), ik = op_param_index(d, "tile_k");
  if (a->u[im] || a->u[in] || a->u[ik] || op_u(d, a, "tile_k0") || op_u(d, a, "quant") != Q_NONE) return 0;
  uint64_t M = op_u(d, a, "m"), N = op_u(d, a, "n");
  int n = 0;
  out[n++] = *a;
#define CAND(tm, tn, tk)                                                                                              \
  do {                                                                                                                \
    if (n < max) {                                                                                                    \
      out[n] = *a;                                                                                                    \
      out[n].u[im] = (tm);                                                                                            \
      out[n].u[in] = (tn);                                                                                            \
      out[n++].u[ik] = (tk);                                                                                          \
    }                                                                                                                 \
  } while (0)
  if (M >= 128) CAND(128, even(N, 256), 0);
  /* rows balanced over the cores where the N tiles are fewer than the cores: the equal M tiles
   * that fill one wave, and two (M 3627 N 57 on 24 cores: 29 blocks of 128 rows take two waves,
   * 23 of 160 one), unsplit unless the caller split K (they fill the cores a split would) */
  int isk = op_param_index(d, "split_k");
  uint64_t wn = even(N, 256), bn = ops_ceil(N, wn), c = op_u(d, a, "cores") ? op_u(d, a, "cores") : (uint64_t)chip->aic_count;
  for (uint64_t w = 1, prev = 0; w <= 2 && bn < c; w++) {
    uint64_t tm = ops_roundup(ops_ceil(M, w * (c / bn)), 16);
    if (tm != 128 && tm != prev && tm <= 256 && tm < ops_roundup(M, 16) && n < max) {
      CAND(tm, wn, 0);
      if (!a->u[isk]) out[n - 1].u[isk] = 1;
    }
    prev = tm;
  }
  if (M >= 256 && N >= 128) CAND(256, 128, 0);
  if (M >= 256 && N >= 128 && N % 128) CAND(256, even(N, 128), 0);
#undef CAND
  if (!a->u[isk] && ops_ceil(M, 128) * ops_ceil(N, 256) <= SPLIT_SEARCH_TILES)
    for (uint64_t sk = 1; sk <= 8 && n < max; sk *= 2) {
      out[n] = *a;
      out[n++].u[isk] = sk;
    }
  return n;
}

const struct op_desc op_gemm = {
    .name = "gemm",
    .summary = "C = A x B on the cube cores (catlass tiling, swizzle, split-K, W8A8, MX, W4A8)",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct gemm),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_KERNEL, "two GEMMs: the input gradient dA = dC op(B)^T, the weight gradient dB = op(A)^T dC, "
            "each stored as its operand", NULL, bwd},
    .variants = variants,
};

/* ------------------------------------------------------------------ grouped GEMM */

/*
 * grouped_gemm: the experts of an MoE layer. A holds the tokens sorted by expert
 * ([rows, K], rows = sum of the group sizes), B one [K, N] matrix per expert, C [rows, N].
 * Group sizes are tiling data, as in Ascend's GroupedMatmul: here they follow a seeded
 * Zipf-like profile over the experts (skew 0: equal), computed in plan. Each group's tiles are
 * blocks of the same catlass kernel; the blocks of all groups are dealt to the cube cores.
 */
static const struct op_param gparams[] = {
    {"groups", OP_P_DIM, NULL, "experts (groups)", NULL},
    {"m", OP_P_DIM, NULL, "rows in all groups (tokens x top-k)", NULL},
    {"n", OP_P_DIM, NULL, "columns of each expert's B", NULL},
    {"k", OP_P_DIM, NULL, "columns of A, rows of B", NULL},
    {"skew", OP_P_REAL, "0", "Zipf exponent of the group sizes (0: equal)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "input type of A and B", NULL},
    {"tile_m", OP_P_INT, "0", "L1 tile rows (0: 128)", NULL},
    {"tile_n", OP_P_INT, "0", "L1 tile columns (0: 256)", NULL},
    {"cores", OP_P_INT, "0", "cube cores to use (0: all)", NULL},
};

void ops_group_sizes(uint32_t *rows, uint32_t groups, uint64_t m, double skew)
{
  double *w = npu_xmalloc(groups * sizeof *w), sum = 0;
  for (uint32_t i = 0; i < groups; i++) sum += w[i] = pow((double)i + 1, -skew);
  uint64_t given = 0;
  for (uint32_t i = 0; i < groups; i++) {
    rows[i] = (uint32_t)floor((double)m * w[i] / sum);
    given += rows[i];
  }
  for (uint32_t i = 0; given < m; i = (i + 1) % groups, given++) rows[i]++;
  free(w);
}

/* The blocks of the groups g->rows (g->ngroups of them): every group's m-tiles by the n-tiles,
 * group by group. */
static void group_blocks(struct gemm *g)
{
  uint64_t tiles = 0;
  for (uint32_t i = 0; i < g->ngroups; i++) {
    g->row0[i] = i ? g->row0[i - 1] + g->rows[i - 1] : 0;
    tiles += (uint64_t)ops_ceil(g->rows[i], g->mL1) * g->bn;
  }
  g->blk = npu_xmalloc((tiles ? tiles : 1) * 3 * sizeof *g->blk);
  uint64_t t = 0;
  for (uint32_t i = 0; i < g->ngroups; i++)
    for (uint32_t mi = 0; mi < ops_ceil(g->rows[i], g->mL1); mi++)
      for (uint32_t ni = 0; ni < g->bn; ni++, t++) {
        g->blk[3 * t] = i;
        g->blk[3 * t + 1] = mi;
        g->blk[3 * t + 2] = ni;
      }
  g->nblocks = tiles;
  g->cluster = 1; /* groups of rows: no clusters of equal m-tiles */
}

static int gplan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                 struct npu_diag *diag)
{
  struct gemm *g = p;
  char kv[8][64];
  snprintf(kv[0], 64, "m=%llu", (unsigned long long)op_u(d, a, "m"));
  snprintf(kv[1], 64, "n=%llu", (unsigned long long)op_u(d, a, "n"));
  snprintf(kv[2], 64, "k=%llu", (unsigned long long)op_u(d, a, "k"));
  snprintf(kv[3], 64, "dtype=%s", npu_dtype_name(op_dtype(d, a, "dtype")));
  snprintf(kv[4], 64, "tile_m=%llu", (unsigned long long)op_u(d, a, "tile_m"));
  snprintf(kv[5], 64, "tile_n=%llu", (unsigned long long)op_u(d, a, "tile_n"));
  snprintf(kv[6], 64, "cores=%llu", (unsigned long long)op_u(d, a, "cores"));
  snprintf(kv[7], 64, "split_k=1");
  const char *kvp[8];
  for (int i = 0; i < 8; i++) kvp[i] = kv[i];
  struct op_args ga;
  int rc = op_args_parse(&op_gemm, &ga, kvp, 8, diag);
  if (!rc) rc = plan(g, &op_gemm, &ga, chip, diag);
  if (rc) return rc;
  double skew = op_r(d, a, "skew");
  if (skew < 0 || skew > 10)
    return npu_diag_set(diag, "command line", 0, "--skew", "expected 0 to 10, got %g", skew), NPU_EINVAL;
  uint64_t groups = op_u(d, a, "groups");
  if (groups > 4096) return npu_diag_set(diag, "command line", 0, "--groups", "at most 4096"), NPU_EINVAL;
  g->ngroups = (uint32_t)groups;
  g->rows = npu_xcalloc(groups, sizeof *g->rows);
  g->row0 = npu_xcalloc(groups, sizeof *g->row0);
  ops_group_sizes(g->rows, g->ngroups, g->M, skew);
  group_blocks(g);
  uint64_t cores = op_u(d, a, "cores");
  g->cores = cores ? (int)cores : chip->aic_count;
  if (g->cores > (int)g->nblocks) g->cores = g->nblocks ? (int)g->nblocks : 1;
  return 0;
}

static void grelease(void *p)
{
  struct gemm *g = p;
  free(g->rows);
  free(g->row0);
  free(g->blk);
}

static void gsetup(void *p, struct op_exec *x)
{
  struct gemm *g = p;
  g->a = op_tensor(x, "a", g->in, (uint64_t)g->M * g->K, OP_INIT_UNIFORM)->addr;
  g->b = op_tensor(x, "b", g->in, (uint64_t)g->ngroups * g->K * g->N, OP_INIT_UNIFORM)->addr;
  g->c = op_tensor(x, "c", g->out, (uint64_t)g->M * g->N, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "grouped_gemm", .mode = CORE_MODE_CUBE, .block_dim = g->cores,
                          .nblocks = g->nblocks, .ctx = g, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct gemm_unit)};
  op_kernel(x, &k);
}

static bool gcheck(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct gemm *g = p;
  double *A = op_decode(op_find_tensor(x, "a")), *B = op_decode(op_find_tensor(x, "b"));
  double *C = op_decode(op_find_tensor(x, "c"));
  size_t mn = (size_t)g->M * g->N;
  double *R = npu_xcalloc(mn, sizeof *R);
  for (uint32_t e = 0; e < g->ngroups; e++) {
    const double *Be = B + (size_t)e * g->K * g->N;
    for (uint32_t i = g->row0[e]; i < g->row0[e] + g->rows[e]; i++) {
      double *r = R + (size_t)i * g->N;
      for (uint32_t k = 0; k < g->K; k++) {
        double a = A[(size_t)i * g->K + k];
        for (uint32_t j = 0; j < g->N; j++) r[j] += a * Be[(size_t)k * g->N + j];
      }
    }
  }
  double atol = 1e-6 * sqrt((double)g->K) + eps_of(g->out) * 0.5, rtol = eps_of(g->out) * 0.51 + 1e-6;
  *max_err = op_compare(C, R, mn, atol, rtol);
  snprintf(summary, n, "%u groups, %u rows x %u x %u %s: worst error %.3g of tolerance", g->ngroups, g->M, g->N,
           g->K, npu_dtype_name(g->in), *max_err);
  free(A);
  free(B);
  free(C);
  free(R);
  return *max_err <= 1;
}

/* The backward of the experts' GEMMs (see .bwd): the input gradient, twice. */
static int gbwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  for (int i = 0; i < 2; i++) {
    out[i] = *fwd;
    op_call_dim(&out[i], "n", (int64_t)op_call_u(fwd, "k"));
    op_call_dim(&out[i], "k", (int64_t)op_call_u(fwd, "n"));
    grad[i] = i ? OP_GRAD_WEIGHT : OP_GRAD_INPUT;
  }
  return 2;
}

const struct op_desc op_grouped_gemm = {
    .name = "grouped_gemm",
    .summary = "MoE experts: one GEMM per group of rows, variable rows per group",
    .params = gparams,
    .nparams = sizeof gparams / sizeof gparams[0],
    .plan_size = sizeof(struct gemm),
    .plan = gplan,
    .setup = gsetup,
    .flops = flops,
    .check = gcheck,
    .release = grelease,
    .bwd = {OP_BWD_PROXY, "the input gradient (n and k swapped) twice: for dX, and standing for dW",
            "the weight gradient of each expert (its tokens x k by its tokens x n) has the input gradient's "
            "FLOPs but reduces over the group's rows, which the kernel cannot split by: it is costed by the "
            "input-gradient grouped GEMM",
            gbwd},
};
