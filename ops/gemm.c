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
 * W8A8: int8 activations and weights; FixPipe dequantizes with per-channel weight scales times
 * a per-tensor activation scale, or (group > 0) each K group's int32 sums with that group's
 * scales, accumulated with atomic adds into fp32.
 *
 * The host reference computes in double from the decoded inputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

#define MAX_UNITS 128

static const char *const outs[] = {"auto", "fp16", "bf16", "fp32", "int32", NULL};
static const char *const quants[] = {"none", "w8a8", NULL};

static const struct op_param params[] = {
    {"m", OP_P_DIM, NULL, "rows of A and C", NULL},
    {"n", OP_P_DIM, NULL, "columns of B and C", NULL},
    {"k", OP_P_DIM, NULL, "columns of A, rows of B", NULL},
    {"dtype", OP_P_DTYPE, "fp16", "input type of A and B", NULL},
    {"out", OP_P_CHOICE, "auto", "output type (auto: fp16/bf16 as the input, fp32 for hf32/fp32, int32 for int8/int4, bf16 for fp8 and w8a8)", outs},
    {"trans_a", OP_P_BOOL, "false", "A is stored K x M", NULL},
    {"trans_b", OP_P_BOOL, "false", "B is stored N x K", NULL},
    {"tile_m", OP_P_INT, "0", "L1 tile rows (0: 128, or M rounded to 16 when smaller)", NULL},
    {"tile_n", OP_P_INT, "0", "L1 tile columns (0: 256)", NULL},
    {"tile_k", OP_P_INT, "0", "L1 step of K (0: 512 bytes of K)", NULL},
    {"tile_k0", OP_P_INT, "0", "L0 step of K (0: 128 bytes of K)", NULL},
    {"swizzle", OP_P_INT, "3", "swizzle strip width in tiles (1: plain row-major order)", NULL},
    {"swizzle_dir", OP_P_INT, "0", "swizzle direction: 0 strips along M, 1 along N", NULL},
    {"split_k", OP_P_INT, "0", "K splits (0: auto, 1: off)", NULL},
    {"quant", OP_P_CHOICE, "none", "quantization: none, or w8a8 (int8, dequantized by FixPipe)", quants},
    {"group", OP_P_INT, "0", "w8a8 scale group along K (0: per channel)", NULL},
    {"cores", OP_P_INT, "0", "cube cores to use (0: all)", NULL},
};

struct gemm {
  const struct arch_chip *chip;
  uint32_t M, N, K;
  enum npu_dtype in, acc, out;
  bool ta, tb;
  int quant;
  uint32_t group;
  uint32_t mL1, nL1, kL1, k0, c0;
  uint32_t swz, swz_dir;
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
  uint32_t l1_stage[MAX_UNITS], l0_stage[MAX_UNITS];
  /* L1 layout */
  uint64_t l1a[2], l1b[2], l1s;
};

static uint32_t es_bits(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t);
}

/* catlass GemmIdentityBlockSwizzle: tile index t -> (mi, ni). */
static void swizzle(const struct gemm *g, uint64_t t, uint32_t *mi, uint32_t *ni)
{
  uint32_t off = g->swz ? g->swz : 1;
  if (g->swz_dir == 0) {
    uint32_t loops = ops_ceil(g->bm, off);
    uint32_t strip = (uint32_t)(t / ((uint64_t)off * g->bn));
    uint32_t in = (uint32_t)(t % ((uint64_t)off * g->bn));
    uint32_t rows = strip == loops - 1 ? g->bm - off * strip : off;
    *mi = strip * off + in % rows;
    *ni = in / rows;
    if (strip % 2) *ni = g->bn - *ni - 1;
  } else {
    uint32_t loops = ops_ceil(g->bn, off);
    uint32_t strip = (uint32_t)(t / ((uint64_t)off * g->bm));
    uint32_t in = (uint32_t)(t % ((uint64_t)off * g->bm));
    uint32_t cols = strip == loops - 1 ? g->bn - off * strip : off;
    *ni = strip * off + in % cols;
    *mi = in / cols;
    if (strip % 2) *mi = g->bm - *mi - 1;
  }
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
  int u = core_unit(t);
  g->l1_stage[u] = g->l0_stage[u] = 0;
  for (int i = 0; i < 2; i++) {
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  if (g->quant) core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct gemm *g = ctx;
  if (g->quant) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_MTE2, 1);
  for (int i = 0; i < 2; i++) {
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  }
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

/* FixPipe the accumulated tile out (with per-column scales for w8a8). */
static void write_out(struct core_tp *t, struct gemm *g, uint32_t row, uint32_t ni, uint32_t mt,
                      uint32_t nt, uint32_t group)
{
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .atomic_add = g->atomic};
  cp.src = ops_tile(MEM_L0C, CORE_NZ, g->acc, 0, mt, nt, (uint32_t)ops_roundup(mt, 16));
  cp.src.c0 = 16;
  uint64_t cbase = g->atomic ? g->acc_ws : g->c;
  uint64_t off = ((uint64_t)row * g->N + (uint64_t)ni * g->nL1) * es_bits(g->fix_out) / 8;
  cp.dst = ops_tile(MEM_GM, CORE_ND, g->fix_out, cbase + off, mt, nt, g->N);
  if (g->quant) {
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
    cp.scale = g->act_scale;
  }
  core_copy_ex(t, &cp);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct gemm *g = ctx;
  int u = core_unit(t);
  uint32_t grp, mi, ni, ks, row0;
  decompose(g, b, &grp, &mi, &ni, &ks);
  uint32_t mt = tile_rows(g, grp, mi, &row0);
  uint32_t row = row0 + mi * g->mL1; /* first row of the tile in A and C */
  uint64_t bbase = g->b + (uint64_t)grp * g->K * g->N * es_bits(g->in) / 8;
  uint32_t nt = g->N - ni * g->nL1 < g->nL1 ? g->N - ni * g->nL1 : g->nL1;
  uint32_t kb = ks * g->kper, ke = kb + g->kper < g->K ? kb + g->kper : g->K;
  uint32_t ebits = es_bits(g->in), c0 = g->c0;
  bool first = true;
  uint32_t group = g->group ? kb / g->group : 0;
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  for (uint32_t k = kb; k < ke; k += g->kL1) {
    uint32_t kt = ke - k < g->kL1 ? ke - k : g->kL1;
    int s = (int)(g->l1_stage[u]++ % 2);
    /* GM -> L1 (ND -> NZ), A and B as stored */
    struct core_tile ga, gb, la, lb;
    if (!g->ta) {
      ga = ops_tile(MEM_GM, CORE_ND, g->in, g->a + ((uint64_t)row * g->K + k) * ebits / 8, mt, kt, g->K);
      la = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1a[s], mt, kt, 0);
    } else {
      ga = ops_tile(MEM_GM, CORE_ND, g->in, g->a + ((uint64_t)k * g->M + (uint64_t)row) * ebits / 8, kt, mt, g->M);
      la = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1a[s], kt, mt, 0);
    }
    if (!g->tb) {
      gb = ops_tile(MEM_GM, CORE_ND, g->in, bbase + ((uint64_t)k * g->N + (uint64_t)ni * g->nL1) * ebits / 8, kt, nt, g->N);
      lb = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1b[s], kt, nt, 0);
    } else {
      gb = ops_tile(MEM_GM, CORE_ND, g->in, bbase + ((uint64_t)ni * g->nL1 * g->K + k) * ebits / 8, nt, kt, g->K);
      lb = ops_tile(MEM_L1, CORE_NZ, g->in, g->l1b[s], nt, kt, 0);
    }
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
    core_copy(t, &la, &ga);
    core_copy(t, &lb, &gb);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, s);
    for (uint32_t kk = 0; kk < kt; kk += g->k0) {
      uint32_t kl = kt - kk < g->k0 ? kt - kk : g->k0;
      int q = (int)(g->l0_stage[u]++ % 2);
      struct core_copy ca = {.scale = 1.0f, .fb_scale = UINT64_MAX}, cb = ca;
      uint32_t lda = core_tile_ld(&la), ldb = core_tile_ld(&lb);
      /* L1 -> L0A (ZZ m x kl), L1 -> L0B (ZN kl x n); sub-tiles of the L1 NZ tiles */
      if (!g->ta) {
        ca.src = ops_tile(MEM_L1, CORE_NZ, g->in, la.addr + (uint64_t)(kk / c0) * lda * c0 * ebits / 8, mt, kl, lda);
      } else {
        ca.src = ops_tile(MEM_L1, CORE_NZ, g->in, la.addr + (uint64_t)kk * c0 * ebits / 8, kl, mt, lda);
        ca.transpose = true;
      }
      if (!g->tb) {
        cb.src = ops_tile(MEM_L1, CORE_NZ, g->in, lb.addr + (uint64_t)kk * c0 * ebits / 8, kl, nt, ldb);
      } else {
        cb.src = ops_tile(MEM_L1, CORE_NZ, g->in, lb.addr + (uint64_t)(kk / c0) * ldb * c0 * ebits / 8, nt, kl, ldb);
        cb.transpose = true;
      }
      uint64_t l0a_half = core_chip(t)->buf[ARCH_BUF_L0A].size_bytes / 2;
      uint64_t l0b_half = core_chip(t)->buf[ARCH_BUF_L0B].size_bytes / 2;
      ca.dst = ops_tile(MEM_L0A, CORE_ZZ, g->in, (uint64_t)q * l0a_half, mt, kl, 0);
      cb.dst = ops_tile(MEM_L0B, CORE_ZN, g->in, (uint64_t)q * l0b_half, kl, nt, 0);
      core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
      core_copy_ex(t, &ca);
      core_copy_ex(t, &cb);
      core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
      core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, q);
      struct core_tile c = ops_tile(MEM_L0C, CORE_NZ, g->acc, 0, mt, nt, (uint32_t)ops_roundup(mt, 16));
      c.c0 = 16;
      core_mmad(t, &c, &ca.dst, &cb.dst, mt, kl, nt, first);
      first = false;
      core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, q);
      /* per-group dequantization: the group's sums leave L0C before the next group starts */
      uint32_t kabs = k + kk + kl;
      if (g->quant && g->group && kabs % g->group == 0 && kabs < ke) {
        write_out(t, g, row, ni, mt, nt, group++);
        core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
        first = true;
      }
    }
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s);
  }
  write_out(t, g, row, ni, mt, nt, group);
}

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

/*
 * catlass's N tile is 256. When the blocks that gives leave the last wave of cube cores mostly
 * idle (a 24-block GEMV on 20 cores takes two waves for 1.2 waves of work), take the widest
 * multiple of 16 below it whose blocks fill the waves to 90% or more (never below 64).
 */
static uint32_t default_tile_n(const struct gemm *g, const struct arch_chip *chip, uint64_t cores)
{
  uint64_t c = cores ? cores : (uint64_t)chip->aic_count, bm = ops_ceil(g->M, g->mL1);
  for (uint32_t tn = 256; tn >= 64; tn -= 16) {
    uint64_t blocks = bm * ops_ceil(g->N, tn), waves = (blocks + c - 1) / c;
    if ((double)bm * g->N / tn >= 0.9 * (double)(waves * c)) return tn;
  }
  return 256;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *a,
                const struct arch_chip *chip, struct npu_diag *diag)
{
  struct gemm *g = p;
  memset(g, 0, sizeof *g);
  g->chip = chip;
  g->M = (uint32_t)op_u(d, a, "m");
  g->N = (uint32_t)op_u(d, a, "n");
  g->K = (uint32_t)op_u(d, a, "k");
  g->in = op_dtype(d, a, "dtype");
  g->ta = op_u(d, a, "trans_a");
  g->tb = op_u(d, a, "trans_b");
  g->quant = (int)op_u(d, a, "quant");
  g->group = (uint32_t)op_u(d, a, "group");
  if (op_u(d, a, "m") > UINT32_MAX || op_u(d, a, "n") > UINT32_MAX || op_u(d, a, "k") > UINT32_MAX)
    return npu_diag_set(diag, "command line", 0, "--m", "dimensions above 2^32 are not supported"), NPU_EINVAL;
  if ((int)g->in >= (int)NPU_DT_CUBE_COUNT || chip->cube.macs_per_cycle[g->in] == 0)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s has no %s cube input", chip->name,
                        npu_dtype_name(g->in)), NPU_EUNSUPPORTED;
  if (g->in == NPU_DT_MXFP8 || g->in == NPU_DT_MXFP4)
    return npu_diag_set(diag, "command line", 0, "--dtype", "use the mx_gemm operator for %s",
                        npu_dtype_name(g->in)), NPU_EINVAL;
  bool integer = g->in == NPU_DT_INT8 || g->in == NPU_DT_INT4;
  g->acc = integer ? NPU_DT_INT32 : NPU_DT_FP32;
  if (g->quant && g->in != NPU_DT_INT8)
    return npu_diag_set(diag, "command line", 0, "--quant", "w8a8 needs --dtype int8"), NPU_EINVAL;
  if (!g->quant && g->group)
    return npu_diag_set(diag, "command line", 0, "--group", "a scale group needs --quant w8a8"), NPU_EINVAL;
  uint64_t oc = op_u(d, a, "out");
  g->out = oc == 0 ? auto_out(g->in, g->quant)
                   : (enum npu_dtype[]){NPU_DT_FP16, NPU_DT_FP16, NPU_DT_BF16, NPU_DT_FP32, NPU_DT_INT32}[oc];
  if (g->out == NPU_DT_INT32 && !integer)
    return npu_diag_set(diag, "command line", 0, "--out", "int32 output needs integer inputs"), NPU_EINVAL;
  if (integer && !g->quant && g->out != NPU_DT_INT32)
    return npu_diag_set(diag, "command line", 0, "--out", "integer GEMM writes int32 (use --quant w8a8 to dequantize)"), NPU_EINVAL;

  uint32_t ebits = es_bits(g->in);
  g->c0 = 256 / ebits;
  uint64_t tm = op_u(d, a, "tile_m"), tn = op_u(d, a, "tile_n"), tk = op_u(d, a, "tile_k"), tk0 = op_u(d, a, "tile_k0");
  g->mL1 = (uint32_t)(tm ? tm : (g->M < 128 ? ops_roundup(g->M, 16) : 128));
  g->nL1 = (uint32_t)(tn ? tn : default_tile_n(g, chip, op_u(d, a, "cores")));
  g->kL1 = (uint32_t)(tk ? tk : 4096 / ebits);
  g->k0 = (uint32_t)(tk0 ? tk0 : 1024 / ebits);
  if (g->mL1 % 16 || g->nL1 % 16)
    return npu_diag_set(diag, "command line", 0, "--tile_m", "tiles must be multiples of 16 (got %ux%u)", g->mL1, g->nL1), NPU_EINVAL;
  if (g->k0 % g->c0 || g->kL1 % g->k0)
    return npu_diag_set(diag, "command line", 0, "--tile_k0", "tile_k0 must be a multiple of %u and divide tile_k (got %u, %u)",
                        g->c0, g->k0, g->kL1), NPU_EINVAL;
  if (g->quant && g->group && (g->group % g->k0 || g->K % g->group))
    return npu_diag_set(diag, "command line", 0, "--group", "the group must be a multiple of tile_k0 (%u) and divide K", g->k0), NPU_EINVAL;
  /* buffers: L1 double buffers A and B (+ scales), L0A/L0B double buffer, L0C one tile */
  uint64_t a_bytes = ops_bytes(g->in, (uint64_t)ops_roundup(g->ta ? g->kL1 : g->mL1, 16) * ops_roundup(g->ta ? g->mL1 : g->kL1, g->c0));
  uint64_t b_bytes = ops_bytes(g->in, (uint64_t)ops_roundup(g->tb ? g->nL1 : g->kL1, 16) * ops_roundup(g->tb ? g->kL1 : g->nL1, g->c0));
  uint64_t l1 = 2 * (a_bytes + b_bytes) + (g->quant ? (uint64_t)g->nL1 * 4 : 0);
  uint64_t l0a = 2 * ops_bytes(g->in, (uint64_t)ops_roundup(g->mL1, 16) * g->k0);
  uint64_t l0b = 2 * ops_bytes(g->in, (uint64_t)g->k0 * ops_roundup(g->nL1, 16));
  uint64_t l0c = (uint64_t)ops_roundup(g->mL1, 16) * ops_roundup(g->nL1, 16) * 4;
  struct { uint64_t need, have; const char *what; } fit[] = {
      {l1, chip->buf[ARCH_BUF_L1].size_bytes, "L1"}, {l0a, chip->buf[ARCH_BUF_L0A].size_bytes, "L0A"},
      {l0b, chip->buf[ARCH_BUF_L0B].size_bytes, "L0B"}, {l0c, chip->buf[ARCH_BUF_L0C].size_bytes, "L0C"}};
  for (int i = 0; i < 4; i++)
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
  g->swz = (uint32_t)op_u(d, a, "swizzle");
  g->swz_dir = (uint32_t)op_u(d, a, "swizzle_dir");
  if (g->swz_dir > 1)
    return npu_diag_set(diag, "command line", 0, "--swizzle_dir", "expected 0 or 1"), NPU_EINVAL;
  uint64_t cores = op_u(d, a, "cores");
  if (cores > (uint64_t)chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--cores", "%s has %d cube cores", chip->name, chip->aic_count), NPU_EINVAL;
  g->cores = cores ? (int)cores : chip->aic_count;
  g->bm = ops_ceil(g->M, g->mL1);
  g->bn = ops_ceil(g->N, g->nL1);
  uint64_t tiles = (uint64_t)g->bm * g->bn;
  uint64_t sk = op_u(d, a, "split_k");
  uint32_t ksteps = ops_ceil(g->K, g->kL1);
  if (sk == 0) {
    /* split K when the tiles leave more than half the cores idle and each split keeps 4 L1 steps */
    sk = 1;
    if (tiles * 2 <= (uint64_t)g->cores && !(g->quant && g->group)) {
      sk = (uint64_t)g->cores / tiles;
      if (sk > ksteps / 4) sk = ksteps / 4;
      if (sk < 1) sk = 1;
    }
  }
  if (sk > ksteps) sk = ksteps;
  g->splitk = (uint32_t)sk;
  g->kper = ops_ceil(ksteps, g->splitk) * g->kL1;
  g->splitk = ops_ceil(g->K, g->kper);
  g->nblocks = tiles * g->splitk;
  g->atomic = g->splitk > 1 || (g->quant && g->group);
  g->fix_out = g->atomic ? (integer && !g->quant ? NPU_DT_INT32 : NPU_DT_FP32) : g->out;
  if (g->cores > (int)g->nblocks) g->cores = (int)g->nblocks;
  if (g->cores > MAX_UNITS) g->cores = MAX_UNITS;
  g->act_scale = 0.0123f;
  return 0;
}

static void setup(void *p, struct op_exec *x)
{
  struct gemm *g = p;
  uint64_t mk = (uint64_t)g->M * g->K, kn = (uint64_t)g->K * g->N, mn = (uint64_t)g->M * g->N;
  g->a = op_tensor(x, "a", g->in, mk, OP_INIT_UNIFORM)->addr;
  g->b = op_tensor(x, "b", g->in, kn, OP_INIT_UNIFORM)->addr;
  if (g->quant) {
    uint32_t groups = g->group ? g->K / g->group : 1;
    g->scales = op_tensor(x, "scales", NPU_DT_FP32, (uint64_t)groups * g->N, OP_INIT_POSITIVE)->addr;
  }
  g->c = op_tensor(x, "c", g->out, mn, OP_INIT_NONE)->addr;
  if (g->atomic) {
    if (g->fix_out == g->out)
      g->acc_ws = g->c;
    else
      g->acc_ws = op_tensor(x, "acc", g->fix_out, mn, OP_INIT_NONE)->addr;
    ops_fill(x, g->acc_ws, g->fix_out, mn, 0);
  }
  struct core_kernel k = {.name = "gemm", .mode = CORE_MODE_CUBE, .block_dim = g->cores,
                          .nblocks = g->nblocks, .ctx = g, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .block_class = block_class};
  op_kernel(x, &k);
  if (g->atomic && g->acc_ws != g->c) ops_cast(x, g->acc_ws, g->fix_out, g->c, g->out, mn);
}

static double flops(const void *p)
{
  const struct gemm *g = p;
  return 2.0 * g->M * g->N * (double)g->K;
}

static double eps_of(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP16: return 1.0 / 1024;
  case NPU_DT_BF16: return 1.0 / 128;
  case NPU_DT_FP32: return 1.0 / (1 << 20);
  default: return 0;
  }
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct gemm *g = p;
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

const struct op_desc op_gemm = {
    .name = "gemm",
    .summary = "C = A x B on the cube cores (catlass tiling, swizzle, split-K, W8A8)",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct gemm),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
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

/* Group sizes proportional to 1 / (i + 1)^skew, summing to m (largest remainders). */
static void group_sizes(uint32_t *rows, uint32_t groups, uint64_t m, double skew)
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
  group_sizes(g->rows, g->ngroups, g->M, skew);
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
                          .unit_end = unit_end, .block = block, .block_class = block_class};
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
};
