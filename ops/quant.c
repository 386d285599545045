/*
 * quant.c - quantize and dequantize between bf16 / fp16 / fp32 and 8-bit floating point on the
 * vector cores, with the scale granularities used in training:
 *   fp8_e4m3, per tensor     one fp32 scale s = amax / 448 (dynamic: amax of the whole tensor)
 *   fp8_e4m3, block1x128     one fp32 scale per 128 consecutive elements of a row (DeepSeek-V3
 *                            activations)
 *   fp8_e4m3, block128x128   one fp32 scale per 128 x 128 block (DeepSeek-V3 weights)
 *   mxfp8 (block1x32)        OCP MX v1.0: E4M3 elements, one E8M0 scale per 32 elements of a row,
 *                            2^(floor(log2 amax) - 8); bit-exact with fmt_mx_quantize
 * q = e4m3(x / s) (RNE, saturating at 448), x = q s. amax is clamped below at 1e-12 (fp8 scales)
 * so that an all-zero block gets a finite scale. Inputs are taken to be finite (a block holding an
 * infinity or NaN is not given the NaN scale of OCP MX; dequantizing a 0xFF scale gives NaN).
 *
 * The vector unit converts fp32 <-> fp8 only on chips with fp8 (the 950 generation); elsewhere
 * both operators are NPU_EUNSUPPORTED naming --dtype.
 *
 * Tiling: tensor, block1x128 and mxfp8 treat the tensor as a flat array (cols is a multiple of
 * the block, so blocks never straddle rows) cut into tiles of E elements (a multiple of 2048, up
 * to 8192, as fit with three load/compute/store slots, at least one tile per vector core);
 * block128x128 tiles are one block of up to 128 rows x 128 columns. The codes are cast into the
 * tile's input slot and stored from it with the scales.
 *
 * Per tile (quantize): widen to fp32; amax per block: |x| then a whole-repeat reduction per
 * block (block1x128: pairs of repeats folded first; mxfp8: a 32-lane masked reduction per
 * block; block128x128: row maxima and minima folded over the block's rows, amax = max(max,
 * -min)); the scales for all blocks of the tile at once on dense vectors; one Brcb of the
 * multipliers; a multiply with the block's broadcast multiplier (repeats over blocks); cast to
 * e4m3. MX exponents without a vector log2: p = 2^floor(log2 max(amax, 2^-119)) by an 8-step
 * binary search of compares and selects over powers of two (exact), the multiplier 256 / p
 * (exact: powers of two), the E8M0 code round(ln p / ln 2) + 119 (an integer to within 1e-5,
 * rounded by the cast to uint8). Per tensor: a first kernel reduces each core's amax into a
 * workspace; the second folds the workspace, computes the scale and quantizes.
 * Dequantize: widen the codes, expand the scales (MX: 2^(e - 127) by the same binary search over
 * the code), Brcb, multiply, cast to the output type.
 *
 * Sources: OCP Microscaling Formats v1.0 (section 6.3), OCP OFP8 E4M3; DeepSeek-V3 technical
 * report (fine-grained 1x128 / 128x128 FP8 quantization) and its act_quant / weight_dequant
 * kernels; formats/formats.h (fmt_mx_quantize, the bit-exact reference).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

enum gran { G_AUTO, G_TENSOR, G_1X128, G_128X128, G_1X32 };
static const char *const grans[] = {"auto", "tensor", "block1x128", "block128x128", "block1x32", NULL};

#define FP8_MAX 448.0
#define AMAX_MIN 1e-12
#define ID_SC VX_ID_AUX      /* V -> MTE3: a unit's amax (per-tensor kernel 1) or the scale (kernel 2) */
#define MAX_E 8192u

static const struct op_param q_params[] = {
    {"rows", OP_P_DIM, NULL, "rows", NULL},
    {"cols", OP_P_DIM, NULL, "columns (blocks run along rows)", NULL},
    {"in", OP_P_DTYPE, "bf16", "input type: bf16, fp16 or fp32", NULL},
    {"dtype", OP_P_DTYPE, "fp8_e4m3", "output: fp8_e4m3 (fp32 scales) or mxfp8 (E8M0 scales per 32)", NULL},
    {"granularity", OP_P_CHOICE, "auto", "scales: tensor, block1x128, block128x128, block1x32 (mxfp8); auto: block1x128 for fp8_e4m3", grans},
    {"tile", OP_P_INT, "0", "elements per tile of the flat granularities (0: automatic)", NULL},
};

static const struct op_param d_params[] = {
    {"rows", OP_P_DIM, NULL, "rows", NULL},
    {"cols", OP_P_DIM, NULL, "columns (blocks run along rows)", NULL},
    {"dtype", OP_P_DTYPE, "fp8_e4m3", "input: fp8_e4m3 (fp32 scales) or mxfp8 (E8M0 scales per 32)", NULL},
    {"out", OP_P_DTYPE, "bf16", "output type: bf16, fp16 or fp32", NULL},
    {"granularity", OP_P_CHOICE, "auto", "scales: tensor, block1x128, block128x128, block1x32 (mxfp8); auto: block1x128 for fp8_e4m3", grans},
    {"tile", OP_P_INT, "0", "elements per tile of the flat granularities (0: automatic)", NULL},
};

struct quant;
struct qk {                    /* the ctx of one launched kernel */
  struct quant *p;
  int phase;                   /* per tensor quantize: 0 amax, 1 quantize */
};

struct quant {
  const struct arch_chip *chip;
  bool deq;
  uint64_t rows, n;
  uint32_t cols;
  enum npu_dtype hi;           /* the wide type (quantize input, dequantize output) */
  uint32_t hes;
  bool mx;
  int gran;                    /* enum gran, resolved */
  uint32_t bs;                 /* block length along a row (128, 32; 0 per tensor) */
  uint32_t E;                  /* flat: elements per tile; block128x128: 128 x 128 */
  uint64_t nblocks;
  uint32_t cb128;              /* block128x128: column blocks */
  int dim, slots;
  int units;                   /* vector cores whose 32-byte partial maxima the UB layout holds */
  int max_units;               /* the most vector cores whose maxima leave room for the smallest tile */
  uint64_t x, q, sc, ws;       /* GM: wide values, codes, scales, per-tensor workspace */
  uint64_t slot[VX_SLOTS_MAX]; /* UB slot: quantize x then codes at +0; dequantize codes at +0 */
  uint64_t sc_off, out_off;    /* scales in the slot; dequantize's wide output */
  uint64_t F, W, T, BC;        /* fp32 work, fold scratch, Brcb blocks */
  uint64_t AM, V1, V2, V3, P, MB, MBN, C448, BC0, NANC, RUN, T64, WS;
  struct qk k[2];
};

static uint32_t blocks_per_tile(const struct quant *p, uint32_t E)
{
  return p->gran == G_128X128 ? 1 : p->bs ? E / p->bs : 1;
}

static uint64_t sc_bytes(const struct quant *p, uint32_t nb)
{
  return p->mx ? nb : (uint64_t)nb * 4;
}

/* The UB layout for tiles of E elements (see norm.c's norm_layout). */
static uint64_t layout(struct quant *p, uint32_t E, int slots, bool place)
{
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint32_t nb = blocks_per_tile(p, E);
  uint64_t lo = p->deq ? E : (uint64_t)E * p->hes; /* the slot's first area */
  uint64_t sco = ops_roundup(lo, 32), outo = ops_roundup(sco + sc_bytes(p, nb) + 32, 512);
  uint64_t slot_bytes = p->deq ? outo + (uint64_t)E * p->hes : sco + sc_bytes(p, nb) + 32;
  uint64_t base = vx_lay_slots(&l, p->chip, slots, 1, slot_bytes);
  /* fp32 values need no widened copy (quantize) and no narrowing buffer (dequantize) */
  bool wide32 = p->hes == 4;
  int F = p->deq || !wide32 ? vx_lay_buf(&l, (uint64_t)E * 4, false) : VX_NOBUF;
  int W = !p->deq || !wide32 ? vx_lay_buf(&l, (uint64_t)E * 4, false) : VX_NOBUF;
  int T = !p->deq && (p->gran == G_TENSOR || p->gran == G_1X128) ? vx_lay_buf(&l, (uint64_t)E * 2, false) : VX_NOBUF;
  int BC = vx_lay_buf(&l, ops_roundup(nb, 8) * 32ull, true);
  int Fx = F >= 0 ? F : VX_SLOTIN(0), Wx = W >= 0 ? W : VX_SLOTIN(0);
  if (!p->deq) vx_lay_pass(&l, Wx, Fx, VX_NOBUF, 1); /* |x| */
  if (T >= 0) vx_lay_pass(&l, T, Wx, VX_NOBUF, 0.5); /* first fold */
  vx_lay_pass(&l, Wx, Fx, BC, 1);                    /* x * multiplier */
  uint64_t vb = ops_roundup((uint64_t)nb * 4, VX_REP_BYTES) + VX_REP_BYTES;
  int units = p->units; /* a partial amax per unit */
  uint64_t small = 7 * vb + 2 * ops_roundup(nb / 8 + 32, 32) + 4 * VX_REP_BYTES + 32ull * (uint64_t)units + 1024;
  if (!place) return base + vx_lay_bound(&l) + small;
  vx_lay_solve(&l, p->chip, base, vx_ub_bytes(p->chip) - small);
  for (int s = 0; s < slots; s++) p->slot[s] = l.slot[s];
  p->sc_off = sco;
  p->out_off = outo;
  p->F = F >= 0 ? l.addr[F] : 0;
  p->W = W >= 0 ? l.addr[W] : 0;
  p->T = T >= 0 ? l.addr[T] : 0;
  p->BC = l.addr[BC];
  struct vx_ub u = {l.end};
  p->AM = vx_take(&u, vb);
  p->V1 = vx_take(&u, vb);
  p->V2 = vx_take(&u, vb);
  p->V3 = vx_take(&u, vb);
  p->P = vx_take(&u, vb);
  p->C448 = vx_take(&u, vb);
  p->MB = vx_take(&u, nb / 8 + 32);
  p->MBN = vx_take(&u, nb / 8 + 32);
  p->BC0 = vx_take(&u, 32);
  p->NANC = vx_take(&u, 32);
  p->RUN = vx_take(&u, VX_REP_BYTES);
  p->T64 = vx_take(&u, VX_REP_BYTES);
  p->WS = vx_take(&u, 32ull * (uint64_t)units);
  NPU_ASSERT(u.off <= vx_ub_bytes(p->chip));
  return u.off;
}

/* ------------------------------------------------------------------ compare / select */

/* bits = a cmp (b, or scalar s when b is VX_NOADDR) over n dense fp32 elements. */
static void cmp_n(struct core_tp *t, enum core_cmp c, uint64_t bits, uint64_t a, uint64_t b, double s, uint32_t n)
{
  struct core_vec v = vx_v(b == VX_NOADDR ? CORE_VEC_CMPS : CORE_VEC_CMP, NPU_DT_FP32);
  v.cmp = (uint8_t)c;
  v.scalar = s;
  for (uint32_t i = 0; i < n; i += VX_RED_GROUP * VX_REP) {
    uint32_t m = n - i < VX_RED_GROUP * VX_REP ? n - i : VX_RED_GROUP * VX_REP;
    v.repeat = (uint16_t)ops_ceil(m, VX_REP);
    vx_mask(&v, VX_REP);
    v.dst = bits + i / 8;
    v.src0 = a + (uint64_t)i * 4;
    v.src1 = b == VX_NOADDR ? 0 : b + (uint64_t)i * 4;
    core_vec(t, &v);
  }
}

/* dst = bit ? a : b over n dense fp32 elements (a may be one block broadcast: a_one). */
static void sel_n(struct core_tp *t, uint64_t dst, uint64_t bits, uint64_t a, uint64_t b, bool a_one, uint32_t n)
{
  struct core_vec v = vx_v(CORE_VEC_SELECT, NPU_DT_FP32);
  if (a_one) v.src0_blk = v.src0_rep = 0;
  for (uint32_t i = 0; i < n; i += VX_RED_GROUP * VX_REP) {
    uint32_t m = n - i < VX_RED_GROUP * VX_REP ? n - i : VX_RED_GROUP * VX_REP;
    v.repeat = (uint16_t)ops_ceil(m, VX_REP);
    vx_mask(&v, VX_REP);
    v.dst = dst + (uint64_t)i * 4;
    v.src0 = a_one ? a : a + (uint64_t)i * 4;
    v.src1 = b + (uint64_t)i * 4;
    v.aux = bits + i / 8;
    core_vec(t, &v);
  }
}

/* ------------------------------------------------------------------ tiles */

static void tile_of(const struct quant *p, uint64_t b, uint64_t *i0, uint32_t *cnt, uint64_t *r0, uint32_t *nr,
                    uint32_t *c0)
{
  if (p->gran == G_128X128) {
    uint64_t rb = b / p->cb128;
    *c0 = (uint32_t)(b % p->cb128) * 128;
    *r0 = rb * 128;
    *nr = (uint32_t)vx_min64(128, p->rows - *r0);
    *cnt = *nr * 128;
    *i0 = 0;
  } else {
    *i0 = b * p->E;
    *cnt = (uint32_t)vx_min64(p->E, p->n - *i0);
    *r0 = 0;
    *nr = 0;
    *c0 = 0;
  }
}

static int block_class(void *ctx, uint64_t b)
{
  const struct qk *k = ctx;
  const struct quant *p = k->p;
  uint64_t i0, r0;
  uint32_t cnt, nr, c0;
  tile_of(p, b, &i0, &cnt, &r0, &nr, &c0);
  return p->gran == G_128X128 ? nr < 128 : cnt < p->E;
}

/* inv = 448 / max(am, 1e-12) and the stored scale max(am, 1e-12) / 448 for n dense amax. */
static void fp8_scales(struct core_tp *t, const struct quant *p, uint64_t am, uint64_t inv, uint64_t scale, uint32_t n)
{
  vx_sc(t, CORE_VEC_MAXS, am, am, AMAX_MIN, n);
  vx_sc(t, CORE_VEC_MULS, scale, am, 1.0 / FP8_MAX, n);
  vx_bin(t, CORE_VEC_DIV, inv, p->C448, am, n);
}

/* The MX multipliers 256 / p and E8M0 codes for n dense amax (see the file comment). */
static void mx_scales(struct core_tp *t, const struct quant *p, uint64_t codes, uint32_t n)
{
  vx_dup(t, NPU_DT_FP32, p->P, ldexp(1.0, -119), n);
  for (int k = 128; k >= 1; k /= 2) {
    vx_sc(t, CORE_VEC_MULS, p->V1, p->P, ldexp(1.0, k), n);
    cmp_n(t, CORE_CMP_GE, p->MB, p->AM, p->V1, 0, n);
    sel_n(t, p->P, p->MB, p->V1, p->P, false, n);
  }
  vx_un(t, CORE_VEC_LN, p->V2, p->P, n);
  vx_sc(t, CORE_VEC_MULS, p->V2, p->V2, 1.0 / log(2.0), n);
  vx_sc(t, CORE_VEC_ADDS, p->V2, p->V2, 119.0, n);
  vx_cast(t, codes, NPU_DT_UINT8, p->V2, NPU_DT_FP32, n);
  vx_un(t, CORE_VEC_RECIP, p->V3, p->P, n);
  vx_sc(t, CORE_VEC_MULS, p->V3, p->V3, 256.0, n);
}

/* P = 2^(code - 127) for n E8M0 codes widened to fp32 at V2 (NaN for 0xFF). */
static void mx_expand(struct core_tp *t, const struct quant *p, uint32_t n)
{
  cmp_n(t, CORE_CMP_EQ, p->MBN, p->V2, VX_NOADDR, 255.0, n);
  vx_dup(t, NPU_DT_FP32, p->P, ldexp(1.0, -127), n);
  for (int k = 128; k >= 1; k /= 2) {
    cmp_n(t, CORE_CMP_GE, p->MB, p->V2, VX_NOADDR, (double)k, n);
    vx_sc(t, CORE_VEC_MULS, p->V1, p->P, ldexp(1.0, k), n);
    sel_n(t, p->P, p->MB, p->V1, p->P, false, n);
    vx_sc(t, CORE_VEC_ADDS, p->V3, p->V2, -(double)k, n);
    sel_n(t, p->V2, p->MB, p->V3, p->V2, false, n);
  }
  sel_n(t, p->P, p->MBN, p->NANC, p->P, true, n);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct qk *k = ctx;
  struct quant *p = k->p;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->slots);
  uint32_t nb = blocks_per_tile(p, p->E);
  vx_dup(t, NPU_DT_FP32, p->C448, FP8_MAX, ops_roundup(nb, 8));
  vx_dup(t, NPU_DT_FP32, p->NANC, NAN, 8);
  if (p->gran != G_TENSOR) return;
  if (!p->deq && k->phase == 0) { /* per-tensor amax: a running 64-lane maximum */
    vx_dup(t, NPU_DT_FP32, p->RUN, 0.0, VX_REP);
    return;
  }
  /* the tensor's scale: from the per-core maxima (quantize) or from GM (dequantize) */
  if (p->deq) {
    vx_load(t, p->V1, p->sc, NPU_DT_FP32, 1, 1, 1, 1);
  } else {
    vx_load(t, p->WS, p->ws, NPU_DT_FP32, 1, (uint32_t)p->dim * 8, (uint32_t)p->dim * 8, (uint32_t)p->dim * 8);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, VX_ID_INIT);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, VX_ID_INIT);
  if (!p->deq) {
    uint32_t lanes = vx_fold_row(t, CORE_VEC_MAX, p->T64, p->WS, (uint32_t)p->dim * 8, p->WS, VX_NOADDR);
    vx_reduce(t, CORE_VEC_MAX, p->AM, p->T64, 8, lanes, 1);
    fp8_scales(t, p, p->AM, p->V1, p->V2, 1);
    if (core_unit(t) == 0) {
      core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_SC);
      core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_SC);
      vx_store(t, p->sc, p->V2, NPU_DT_FP32, 1, 1, 1, 1);
    }
  }
  vx_brcb(t, p->BC0, p->V1, 1);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct qk *k = ctx;
  struct quant *p = k->p;
  if (p->gran == G_TENSOR && !p->deq && k->phase == 0) { /* this core's amax to the workspace */
    vx_reduce(t, CORE_VEC_MAX, p->AM, p->RUN, 8, VX_REP, 1);
    vx_brcb(t, p->BC0, p->AM, 1);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_SC);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_SC);
    vx_store(t, p->ws + 32ull * (uint64_t)core_unit(t), p->BC0, NPU_DT_FP32, 1, 8, 8, 8);
  }
  vx_slots_end(t, p->slots);
}

static void quantize_tile(struct core_tp *t, struct quant *p, int phase, uint64_t b)
{
  uint64_t i0, r0;
  uint32_t cnt, nr, c0;
  tile_of(p, b, &i0, &cnt, &r0, &nr, &c0);
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->slots);
  uint64_t X = p->slot[s], Sc = X + p->sc_off;
  bool b128 = p->gran == G_128X128;
  uint32_t nb = b128 ? 1 : p->bs ? cnt / p->bs : 0;
  uint64_t gx = b128 ? (r0 * p->cols + c0) * p->hes : i0 * p->hes;
  vx_load_begin(t, s);
  if (b128)
    vx_load(t, X, p->x + gx, p->hi, nr, 128, p->cols, 128);
  else
    vx_load(t, X, p->x + gx, p->hi, 1, cnt, cnt, cnt);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  uint64_t F = p->hes == 4 ? X : p->F;
  vx_cast(t, F, NPU_DT_FP32, X, p->hi, cnt);
  switch (p->gran) {
  case G_TENSOR:
    if (phase == 0) {
      vx_un(t, CORE_VEC_ABS, p->W, F, cnt);
      uint32_t lanes = vx_fold_row(t, CORE_VEC_MAX, p->T64, p->W, cnt, p->T, VX_NOADDR);
      vx_bin(t, CORE_VEC_MAX, p->RUN, p->RUN, p->T64, lanes);
    } else {
      vx_rows(t, CORE_VEC_MUL, vx_full(p->W, 0), vx_full(F, 0), vx_one(p->BC0), 1, cnt);
    }
    break;
  case G_1X128:
    vx_un(t, CORE_VEC_ABS, p->W, F, cnt);
    {
      struct core_vec v = vx_v(CORE_VEC_MAX, NPU_DT_FP32);
      v.dst = p->T;
      v.src0 = p->W;
      v.src1 = p->W + VX_REP_BYTES;
      v.src0_rep = v.src1_rep = 16;
      vx_issue(t, v, (uint64_t)nb * VX_REP, VX_REP);
    }
    vx_reduce(t, CORE_VEC_MAX, p->AM, p->T, 8, VX_REP, nb);
    fp8_scales(t, p, p->AM, p->V1, Sc, nb);
    vx_brcb(t, p->BC, p->V1, nb);
    vx_rows(t, CORE_VEC_MUL, vx_full(p->W, 512), vx_full(F, 512), vx_rowb(p->BC), nb, 128);
    break;
  case G_1X32:
    vx_un(t, CORE_VEC_ABS, p->W, F, cnt);
    vx_reduce(t, CORE_VEC_MAX, p->AM, p->W, 4, 32, nb);
    mx_scales(t, p, Sc, nb);
    vx_brcb(t, p->BC, p->V3, nb);
    vx_rows(t, CORE_VEC_MUL, vx_full(p->W, 128), vx_full(F, 128), vx_rowb(p->BC), nb, 32);
    break;
  default: { /* 128 x 128: amax = max(max x, -min x) over the block, folded over rows */
    struct core_vec v = vx_v(CORE_VEC_MAX, NPU_DT_FP32);
    v.dst = p->W;
    v.src0 = F;
    v.src1 = F + VX_REP_BYTES;
    v.src0_rep = v.src1_rep = 16;
    vx_issue(t, v, (uint64_t)nr * VX_REP, VX_REP);
    uint32_t lanes = vx_fold_row(t, CORE_VEC_MAX, p->T64, p->W, nr * VX_REP, p->W, VX_NOADDR);
    vx_reduce(t, CORE_VEC_MAX, p->AM, p->T64, 8, lanes, 1);
    v.op = CORE_VEC_MIN;
    vx_issue(t, v, (uint64_t)nr * VX_REP, VX_REP);
    lanes = vx_fold_row(t, CORE_VEC_MIN, p->T64, p->W, nr * VX_REP, p->W, VX_NOADDR);
    /* the minimum's reduction: a max of the negated lanes */
    vx_sc(t, CORE_VEC_MULS, p->T64, p->T64, -1.0, lanes);
    vx_reduce(t, CORE_VEC_MAX, p->V3, p->T64, 8, lanes, 1);
    vx_bin(t, CORE_VEC_MAX, p->AM, p->AM, p->V3, 1);
    fp8_scales(t, p, p->AM, p->V1, Sc, 1);
    vx_brcb(t, p->BC0, p->V1, 1);
    vx_rows(t, CORE_VEC_MUL, vx_full(p->W, 0), vx_full(F, 0), vx_one(p->BC0), 1, cnt);
  }
  }
  if (!(p->gran == G_TENSOR && phase == 0)) vx_cast(t, X, NPU_DT_FP8_E4M3, p->W, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  if (!(p->gran == G_TENSOR && phase == 0)) {
    if (b128) {
      vx_store(t, p->q + r0 * p->cols + c0, X, NPU_DT_FP8_E4M3, nr, 128, p->cols, 128);
      vx_store(t, p->sc + ((r0 / 128) * p->cb128 + c0 / 128) * 4, Sc, NPU_DT_FP32, 1, 1, 1, 1);
    } else {
      vx_store(t, p->q + i0, X, NPU_DT_FP8_E4M3, 1, cnt, cnt, cnt);
      if (nb)
        vx_store(t, p->sc + (i0 / p->bs) * (p->mx ? 1 : 4), Sc, p->mx ? NPU_DT_UINT8 : NPU_DT_FP32, 1, nb, nb, nb);
    }
  }
  vx_store_end(t, s);
}

static void dequantize_tile(struct core_tp *t, struct quant *p, uint64_t b)
{
  uint64_t i0, r0;
  uint32_t cnt, nr, c0;
  tile_of(p, b, &i0, &cnt, &r0, &nr, &c0);
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->slots);
  uint64_t X = p->slot[s], Sc = X + p->sc_off, Y = X + p->out_off;
  bool b128 = p->gran == G_128X128;
  uint32_t nb = b128 ? 1 : p->bs ? cnt / p->bs : 0;
  vx_load_begin(t, s);
  if (b128) {
    vx_load(t, X, p->q + r0 * p->cols + c0, NPU_DT_FP8_E4M3, nr, 128, p->cols, 128);
    vx_load(t, Sc, p->sc + ((r0 / 128) * p->cb128 + c0 / 128) * 4, NPU_DT_FP32, 1, 1, 1, 1);
  } else {
    vx_load(t, X, p->q + i0, NPU_DT_FP8_E4M3, 1, cnt, cnt, cnt);
    if (nb)
      vx_load(t, Sc, p->sc + (i0 / p->bs) * (p->mx ? 1 : 4), p->mx ? NPU_DT_UINT8 : NPU_DT_FP32, 1, nb, nb, nb);
  }
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  vx_cast(t, p->F, NPU_DT_FP32, X, NPU_DT_FP8_E4M3, cnt);
  uint64_t Wf = p->hes == 4 ? Y : p->W;
  switch (p->gran) {
  case G_TENSOR:
    vx_rows(t, CORE_VEC_MUL, vx_full(Wf, 0), vx_full(p->F, 0), vx_one(p->BC0), 1, cnt);
    break;
  case G_1X128:
    vx_brcb(t, p->BC, Sc, nb);
    vx_rows(t, CORE_VEC_MUL, vx_full(Wf, 512), vx_full(p->F, 512), vx_rowb(p->BC), nb, 128);
    break;
  case G_1X32:
    vx_cast(t, p->V2, NPU_DT_FP32, Sc, NPU_DT_UINT8, nb);
    mx_expand(t, p, nb);
    vx_brcb(t, p->BC, p->P, nb);
    vx_rows(t, CORE_VEC_MUL, vx_full(Wf, 128), vx_full(p->F, 128), vx_rowb(p->BC), nb, 32);
    break;
  default:
    vx_brcb(t, p->BC0, Sc, 1);
    vx_rows(t, CORE_VEC_MUL, vx_full(Wf, 0), vx_full(p->F, 0), vx_one(p->BC0), 1, cnt);
  }
  vx_cast(t, Y, p->hi, Wf, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  if (b128)
    vx_store(t, p->x + (r0 * p->cols + c0) * p->hes, Y, p->hi, nr, 128, p->cols, 128);
  else
    vx_store(t, p->x + i0 * p->hes, Y, p->hi, 1, cnt, cnt, cnt);
  vx_store_end(t, s);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct qk *k = ctx;
  if (k->p->deq)
    dequantize_tile(t, k->p, b);
  else
    quantize_tile(t, k->p, k->phase, b);
}

/* ------------------------------------------------------------------ operator */

static int plan_common(struct quant *p, const struct op_desc *d, const struct op_args *a,
                       const struct arch_chip *chip, bool deq, struct npu_diag *diag)
{
  memset(p, 0, sizeof *p);
  p->chip = chip;
  p->deq = deq;
  p->rows = op_u(d, a, "rows");
  if (op_u(d, a, "cols") > (1u << 24))
    return npu_diag_set(diag, "command line", 0, "--cols", "at most 16777216, got %llu",
                        (unsigned long long)op_u(d, a, "cols")), NPU_EINVAL;
  p->cols = (uint32_t)op_u(d, a, "cols");
  p->n = p->rows * p->cols;
  enum npu_dtype q = op_dtype(d, a, "dtype");
  p->hi = op_dtype(d, a, deq ? "out" : "in");
  if (q != NPU_DT_FP8_E4M3 && q != NPU_DT_MXFP8)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s %s fp8_e4m3 or mxfp8, not %s",
                        deq ? "dequantize" : "quantize", deq ? "reads" : "produces", npu_dtype_name(q)), NPU_EUNSUPPORTED;
  if (!vx_has_fp8(chip))
    return npu_diag_set(diag, "command line", 0, "--dtype",
                        "%s has no fp8 conversion in its vector unit (%s needs a 950-class chip)", chip->name,
                        npu_dtype_name(q)), NPU_EUNSUPPORTED;
  int rc = vx_check_io(p->hi, deq ? "--out" : "--in", diag);
  if (rc) return rc;
  p->hes = vx_es(p->hi);
  p->mx = q == NPU_DT_MXFP8;
  p->gran = (int)op_u(d, a, "granularity");
  if (p->gran == G_AUTO) p->gran = p->mx ? G_1X32 : G_1X128;
  if (p->mx != (p->gran == G_1X32))
    return npu_diag_set(diag, "command line", 0, "--granularity", "%s", p->mx ? "mxfp8 has its own 1x32 blocks (block1x32)"
                                                                            : "block1x32 is mxfp8's granularity; fp8_e4m3 takes tensor, block1x128 or block128x128"),
           NPU_EINVAL;
  p->bs = p->gran == G_1X32 ? 32 : p->gran == G_TENSOR ? 0 : 128;
  if (p->bs && p->cols % p->bs)
    return npu_diag_set(diag, "command line", 0, "--cols", "%s needs a multiple of %u columns, got %u", grans[p->gran],
                        p->bs, p->cols), NPU_EINVAL;
  uint64_t ub = vx_ub_bytes(chip), tile = op_u(d, a, "tile");
  int cores = vx_cores(chip);
  /* the kernel's core limit: a 32-byte partial maximum per vector core stays in UB beside the
   * smallest tile (when not even one core's fits, the tile is what does not fit: said below) */
  p->units = 0;
  uint64_t bare = layout(p, p->gran == G_128X128 ? 128 * 128 : 2048, 2, false);
  p->max_units = bare + 32 <= ub ? (int)((ub - bare) / 32) : 0;
  if (p->max_units && cores > p->max_units)
    return npu_diag_set(diag, NULL, 0, d->name,
                        "the chip has %d vector cores; this kernel supports at most %d (a 32-byte partial maximum "
                        "per core in UB)", cores, p->max_units), NPU_EUNSUPPORTED;
  p->units = cores;
  if (p->gran == G_128X128) {
    if (tile)
      return npu_diag_set(diag, "command line", 0, "--tile", "block128x128 tiles are one 128 x 128 block"), NPU_EINVAL;
    p->E = 128 * 128;
    p->cb128 = p->cols / 128;
    p->nblocks = ops_ceil(p->rows, 128) * (uint64_t)p->cb128;
  } else {
    if (tile) {
      if (tile % 2048 || tile > 65536)
        return npu_diag_set(diag, "command line", 0, "--tile", "a multiple of 2048 up to 65536, got %llu",
                            (unsigned long long)tile), NPU_EINVAL;
      if (layout(p, (uint32_t)tile, 2, false) > ub)
        return npu_diag_set(diag, "command line", 0, "--tile", "tiles of %llu elements do not fit: UB needs %llu bytes, has %llu",
                            (unsigned long long)tile, (unsigned long long)layout(p, (uint32_t)tile, 2, false),
                            (unsigned long long)ub), NPU_ENOFIT;
      p->E = (uint32_t)tile;
    } else {
      uint32_t e = 2048;
      while (e + 2048 <= MAX_E && layout(p, e + 2048, 3, false) <= ub) e += 2048;
      uint64_t per_core = ops_roundup(ops_ceil(p->n, (uint64_t)cores), 2048);
      p->E = (uint32_t)(per_core < e ? per_core : e);
    }
    p->nblocks = ops_ceil(p->n, p->E);
  }
  if (layout(p, p->E, 2, false) > ub)
    return npu_diag_set(diag, "command line", 0, "--tile", "tiles of %u elements do not fit: UB needs %llu bytes, has %llu",
                        p->E, (unsigned long long)layout(p, p->E, 2, false), (unsigned long long)ub), NPU_ENOFIT;
  p->slots = layout(p, p->E, 3, false) <= ub ? 3 : 2;
  layout(p, p->E, p->slots, true);
  p->dim = vx_dim(chip, p->nblocks);
  return 0;
}

static int q_plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                  struct npu_diag *diag)
{
  return plan_common(pp, d, a, chip, false, diag);
}

static int d_plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                  struct npu_diag *diag)
{
  return plan_common(pp, d, a, chip, true, diag);
}

static uint64_t scale_count(const struct quant *p)
{
  switch (p->gran) {
  case G_TENSOR: return 1;
  case G_128X128: return ops_ceil(p->rows, 128) * (uint64_t)p->cb128;
  default: return p->n / p->bs;
  }
}

/* The host quantizer (the check's reference and dequantize's input): codes and scales of x. */
static void host_quantize(const struct quant *p, const double *x, uint8_t *codes, void *scales)
{
  if (p->mx) {
    for (uint64_t r = 0; r < p->rows; r++)
      fmt_mx_quantize(NPU_DT_MXFP8, x + r * p->cols, p->cols, codes + r * p->cols,
                      (uint8_t *)scales + r * (p->cols / 32));
    return;
  }
  float *s = scales;
  uint64_t ns = scale_count(p);
  double *am = npu_xcalloc(ns, sizeof *am);
  for (uint64_t i = 0; i < p->n; i++) {
    uint64_t r = i / p->cols, c = i % p->cols;
    uint64_t k = p->gran == G_TENSOR ? 0 : p->gran == G_128X128 ? (r / 128) * p->cb128 + c / 128 : i / 128;
    if (fabs(x[i]) > am[k]) am[k] = fabs(x[i]);
  }
  for (uint64_t k = 0; k < ns; k++) s[k] = (float)((am[k] > AMAX_MIN ? am[k] : AMAX_MIN) / FP8_MAX);
  for (uint64_t i = 0; i < p->n; i++) {
    uint64_t r = i / p->cols, c = i % p->cols;
    uint64_t k = p->gran == G_TENSOR ? 0 : p->gran == G_128X128 ? (r / 128) * p->cb128 + c / 128 : i / 128;
    codes[i] = fmt_fp8_e4m3_from_double(x[i] / (double)s[k]);
  }
  free(am);
}

static void kernels(struct quant *p, struct op_exec *x)
{
  const char *name = p->deq ? "dequantize" : "quantize";
  int phases = p->gran == G_TENSOR && !p->deq ? 2 : 1;
  for (int ph = 0; ph < phases; ph++) {
    p->k[ph] = (struct qk){p, phases == 2 ? ph : 1};
    struct core_kernel k = {.name = phases == 2 && ph == 0 ? "quantize_amax" : name, .mode = CORE_MODE_VECTOR,
                            .block_dim = p->dim, .nblocks = p->nblocks, .ctx = &p->k[ph],
                            .unit_begin = unit_begin, .unit_end = unit_end, .block = block,
                            .block_class = block_class, .unit_ctx_bytes = sizeof(struct vx_unit),
                            .max_units = p->max_units};
    op_kernel(x, &k);
  }
}

static void q_setup(void *pp, struct op_exec *x)
{
  struct quant *p = pp;
  p->x = op_tensor(x, "x", p->hi, p->n, OP_INIT_UNIFORM)->addr;
  p->q = op_tensor(x, "q", p->mx ? NPU_DT_MXFP8 : NPU_DT_FP8_E4M3, p->n, OP_INIT_NONE)->addr;
  p->sc = op_tensor(x, "scales", p->mx ? NPU_DT_UINT8 : NPU_DT_FP32, scale_count(p), OP_INIT_NONE)->addr;
  if (p->gran == G_TENSOR) p->ws = op_tensor(x, "amax_ws", NPU_DT_FP32, (uint64_t)p->dim * 8, OP_INIT_SCRATCH)->addr;
  kernels(p, x);
}

static void d_setup(void *pp, struct op_exec *x)
{
  struct quant *p = pp;
  struct op_tensor *q = op_tensor(x, "q", p->mx ? NPU_DT_MXFP8 : NPU_DT_FP8_E4M3, p->n, OP_INIT_NONE);
  struct op_tensor *s = op_tensor(x, "scales", p->mx ? NPU_DT_UINT8 : NPU_DT_FP32, scale_count(p), OP_INIT_NONE);
  if (op_functional(x)) { /* codes and scales of values in [-4, 4), quantized on the host */
    double *v = npu_xmalloc(p->n * sizeof *v);
    for (uint64_t i = 0; i < p->n; i++) v[i] = 8 * op_rand(x) - 4;
    host_quantize(p, v, q->host, s->host);
    free(v);
  }
  p->q = q->addr;
  p->sc = s->addr;
  p->x = op_tensor(x, "y", p->hi, p->n, OP_INIT_NONE)->addr;
  kernels(p, x);
}

/* Model FLOPs per element: quantize |x|, max, scale; dequantize scale. */
static double flops(const void *pp)
{
  const struct quant *p = pp;
  return (p->deq ? 1.0 : 3.0) * (double)p->n;
}

/*
 * Quantize, mxfp8: codes and E8M0 scales must equal fmt_mx_quantize's (per row) exactly; the
 * error is the number of differing bytes. fp8_e4m3: the stored scale must be max(amax,
 * 1e-12) / 448 within 2^-22 relative (one fp32 rounding of the product by 1 / 448), and every
 * code must dequantize to x within half an e4m3 step: |q s - x| <= 2^-4 |x| + 2^-10 s (normal
 * and subnormal half steps), x 1.001 for the fp32 rounding of x * (448 / amax).
 */
static bool q_check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct quant *p = pp;
  double *X = op_decode(op_find_tensor(x, "x"));
  const uint8_t *Q = op_find_tensor(x, "q")->host;
  const void *S = op_find_tensor(x, "scales")->host;
  uint64_t ns = scale_count(p);
  uint8_t *rq = npu_xmalloc(p->n);
  void *rs = npu_xmalloc(ns * 4);
  host_quantize(p, X, rq, rs);
  double worst = 0;
  uint64_t differ = 0;
  if (p->mx) {
    for (uint64_t i = 0; i < p->n; i++) differ += Q[i] != rq[i];
    for (uint64_t k = 0; k < ns; k++) differ += ((const uint8_t *)S)[k] != ((const uint8_t *)rs)[k];
    worst = (double)differ;
    snprintf(summary, len, "quantize %llux%u %s -> mxfp8: %llu of %llu codes and scales differ from fmt_mx_quantize",
             (unsigned long long)p->rows, p->cols, npu_dtype_name(p->hi), (unsigned long long)differ,
             (unsigned long long)(p->n + ns));
  } else {
    const float *sk = S, *sr = rs;
    for (uint64_t k = 0; k < ns; k++) {
      double e = fabs((double)sk[k] - (double)sr[k]) / ((double)sr[k] * ldexp(1.0, -22));
      if (e > worst) worst = e;
    }
    for (uint64_t i = 0; i < p->n; i++) {
      uint64_t r = i / p->cols, c = i % p->cols;
      uint64_t k = p->gran == G_TENSOR ? 0 : p->gran == G_128X128 ? (r / 128) * p->cb128 + c / 128 : i / 128;
      double s = sk[k], got = fmt_fp8_e4m3_to_double(Q[i]) * s;
      double e = fabs(got - X[i]) / ((ldexp(1.0, -4) * fabs(X[i]) + ldexp(1.0, -10) * s) * 1.001);
      if (isnan(e))
        worst = INFINITY;
      else if (e > worst)
        worst = e;
      differ += Q[i] != rq[i];
    }
    snprintf(summary, len, "quantize %llux%u %s -> fp8_e4m3 %s: worst error %.3g of tolerance (half an e4m3 step; scales "
             "2^-22); %llu codes differ from the double-precision quantizer by a rounding",
             (unsigned long long)p->rows, p->cols, npu_dtype_name(p->hi), grans[p->gran], worst,
             (unsigned long long)differ);
  }
  *max_err = worst;
  free(X);
  free(rq);
  free(rs);
  return worst <= 1;
}

/*
 * Dequantize: y = code x scale in fp32 (exact for MX powers of two; one fp32 rounding for fp32
 * scales: 2^-23) rounded once to the output type (half an ulp x 1.1, or half its smallest
 * subnormal step x 1.1 absolute).
 */
static bool d_check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct quant *p = pp;
  double *Y = op_decode(op_find_tensor(x, "y"));
  const uint8_t *Q = op_find_tensor(x, "q")->host;
  const void *S = op_find_tensor(x, "scales")->host;
  double *ref = npu_xmalloc(p->n * sizeof *ref);
  if (p->mx) {
    for (uint64_t r = 0; r < p->rows; r++)
      fmt_mx_dequantize(NPU_DT_MXFP8, Q + r * p->cols, (const uint8_t *)S + r * (p->cols / 32), p->cols,
                        ref + r * p->cols);
  } else {
    const float *s = S;
    for (uint64_t i = 0; i < p->n; i++) {
      uint64_t r = i / p->cols, c = i % p->cols;
      uint64_t k = p->gran == G_TENSOR ? 0 : p->gran == G_128X128 ? (r / 128) * p->cb128 + c / 128 : i / 128;
      ref[i] = fmt_fp8_e4m3_to_double(Q[i]) * (double)s[k];
    }
  }
  double rtol = 0.55 * vx_ulp(p->hi) + ldexp(1.0, -23), atol = 0.55 * fmt_min_positive(p->hi);
  *max_err = op_compare(Y, ref, p->n, atol, rtol);
  snprintf(summary, len, "dequantize %llux%u %s %s -> %s: worst error %.3g of tolerance (rtol %.3g)",
           (unsigned long long)p->rows, p->cols, p->mx ? "mxfp8" : "fp8_e4m3", grans[p->gran], npu_dtype_name(p->hi),
           *max_err, rtol);
  free(Y);
  free(ref);
  return *max_err <= 1;
}

const struct op_desc op_quantize = {
    .name = "quantize",
    .summary = "quantize to fp8_e4m3 (per tensor, 1x128, 128x128 scales) or MXFP8, on the vector cores (fp8 chips)",
    .params = q_params,
    .nparams = sizeof q_params / sizeof q_params[0],
    .plan_size = sizeof(struct quant),
    .plan = q_plan,
    .setup = q_setup,
    .flops = flops,
    .check = q_check,
    .bwd = {OP_BWD_NONE, "a cast, not differentiated (fp8 training quantizes the backward GEMMs' operands again)",
            NULL, NULL},
};

const struct op_desc op_dequantize = {
    .name = "dequantize",
    .summary = "dequantize fp8_e4m3 (per tensor, 1x128, 128x128 scales) or MXFP8 to bf16 / fp16 / fp32, on the vector cores",
    .params = d_params,
    .nparams = sizeof d_params / sizeof d_params[0],
    .plan_size = sizeof(struct quant),
    .plan = d_plan,
    .setup = d_setup,
    .flops = flops,
    .check = d_check,
    .bwd = {OP_BWD_NONE, "a cast, not differentiated", NULL, NULL},
};
