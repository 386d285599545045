/*
 * causal_conv1d.c - the short depthwise causal convolution of Mamba and of Qwen3-Next's linear
 * attention (the conv before the gated delta rule), on the vector cores, as Dao's causal_conv1d
 * computes it:
 *   out[b, t, c] = silu( sum_{i < width} w[c, i] x[b, t - width + 1 + i, c]  (+ bias[c]) ),
 * x zero before the sequence's start; x, out [batch, seq, channels], w [channels, width] (PyTorch's
 * Conv1d weight [channels, 1, width]), bias [channels] (--bias), all in dtype; fp32 in the UB.
 *
 * Tiling: tiles of T tokens x Cc channels of one sequence (all channels when a tile of them holds
 * ~16 KiB of x, else equal column tiles of a multiple of 64), at least one tile per vector core,
 * three load/compute/store slots (two if three do not fit), dealt channel tile by channel tile. A
 * slot holds the tile's x rows with the width - 1 rows before them (the halo: zero rows at the
 * sequence's start, instead of a load). V widens them, accumulates the taps (a multiply and an
 * add per tap, repeats over the tokens, the tap's row of channel weights shared), adds the bias,
 * applies silu (x / (1 + e^-x)) and casts back into the slot; MTE3 stores it. When a core's
 * block has other channels than its last one it also loads their weights (and bias) and turns
 * each tap into a dense row over the channels (a one-lane reduction over the [Cc, width] weight
 * tile: the transpose without a transpose instruction), kept for the blocks that follow.
 *
 * Sources: Gu & Dao 2023 (Mamba); Dao-AILab/causal-conv1d causal_conv1d_fn (weight (dim, width),
 * activation "silu"); Qwen3-Next's Qwen3NextGatedDeltaNet conv1d (kernel 4, no bias).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"batch", OP_P_DIM, "1", "sequences", NULL},
    {"seq", OP_P_DIM, NULL, "tokens per sequence", NULL},
    {"channels", OP_P_DIM, NULL, "channels (Qwen3-Next: q, k and v of the linear attention, 8192)", NULL},
    {"width", OP_P_DIM, "4", "taps of the convolution (at most 16)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x, w, bias and out: fp16, bf16 or fp32", NULL},
    {"silu", OP_P_BOOL, "true", "apply silu to the sum (Mamba, Qwen3-Next)", NULL},
    {"bias", OP_P_BOOL, "false", "add a bias per channel (Mamba; Qwen3-Next has none)", NULL},
    {"tile_tokens", OP_P_INT, "0", "tokens per tile (0: automatic)", NULL},
    {"tile_channels", OP_P_INT, "0", "channels per tile (0: automatic; a multiple of 64 below channels)", NULL},
};

#define WMAX 16u

struct conv {
  const struct arch_chip *chip;
  uint32_t B, S, Ch, W;
  enum npu_dtype dt;
  uint32_t es;
  bool silu, bias;
  uint32_t T, Cc, rs, ldw;       /* tile: tokens, channels; UB row stride (Cc rounded to 64); weight row stride */
  uint32_t ntb, ncb;             /* token tiles per sequence, channel tiles */
  int slots, dim;
  uint64_t nblocks;
  uint64_t x, w, bs, out;        /* GM */
  uint64_t slot[VX_SLOTS_MAX];   /* UB: x (halo + T rows) at +0, w at +w_off, bias at +b_off */
  uint64_t w_off, b_off;
  uint64_t F, A, Tm, Wf, Wd, Bf; /* fp32 work: x, the sum, scratch, w, the taps (dense rows), bias */
};

/* UB bytes for T tokens x rs channels with `slots` slots (place: also set the addresses). */
static uint64_t layout(struct conv *p, uint32_t T, uint32_t rs, int slots, bool place)
{
  uint64_t rows = (uint64_t)T + p->W - 1, cc = rs;
  uint64_t xb = ops_roundup(rows * rs * p->es, 512), wb = ops_roundup(cc * p->ldw * p->es, 512);
  uint64_t bb = ops_roundup(rs * p->es, 512), per = xb + wb + bb, at = (uint64_t)slots * per;
  uint64_t f = at, a = f + ops_roundup(rows * rs * 4, 512) + 256, tm = a + ops_roundup((uint64_t)T * rs * 4, 512) + 256;
  uint64_t wf = tm + ops_roundup((uint64_t)T * rs * 4, 512) + 256, wd = wf + ops_roundup(cc * p->ldw * 4, 512) + 256;
  uint64_t bf = wd + ops_roundup((uint64_t)p->W * rs * 4, 512), end = bf + ops_roundup(rs * 4, 512);
  if (place) {
    for (int s = 0; s < slots; s++) p->slot[s] = (uint64_t)s * per;
    p->w_off = xb;
    p->b_off = xb + wb;
    p->F = f, p->A = a, p->Tm = tm, p->Wf = wf, p->Wd = wd, p->Bf = bf;
  }
  return end;
}

/* Blocks run channel tile by channel tile (then sequence, then token tile), so that a unit's next
 * block mostly has the channels of its last one and keeps their taps (fresh below). */
static void decompose(const struct conv *p, uint64_t blk, uint32_t *b, uint32_t *t0, uint32_t *nt, uint32_t *c0,
                      uint32_t *cn)
{
  uint64_t per = (uint64_t)p->B * p->ntb, r = blk % per;
  uint32_t cb = (uint32_t)(blk / per);
  *b = (uint32_t)(r / p->ntb);
  *t0 = (uint32_t)(r % p->ntb) * p->T;
  *nt = p->S - *t0 < p->T ? p->S - *t0 : p->T;
  *c0 = cb * p->Cc;
  *cn = p->Ch - *c0 < p->Cc ? p->Ch - *c0 : p->Cc;
}

/* Whether block blk's unit must load and arrange its channels' taps: its first block, or one whose
 * channels differ from the unit's previous block's (blk - dim: units take blocks round robin). */
static bool fresh(const struct conv *p, uint64_t blk)
{
  uint64_t per = (uint64_t)p->B * p->ntb;
  return blk < (uint64_t)p->dim || (blk - (uint64_t)p->dim) / per != blk / per;
}

/* Classes: a tile at the sequence's start (its halo partly zeros, not loaded), a short last
 * tile, a narrow last column tile, a tile that arranges its taps. */
static int block_class(void *ctx, uint64_t blk)
{
  const struct conv *p = ctx;
  uint32_t b, t0, nt, c0, cn;
  decompose(p, blk, &b, &t0, &nt, &c0, &cn);
  return (t0 < p->W - 1 ? 1 : 0) | (nt < p->T ? 2 : 0) | (cn < p->Cc ? 4 : 0) | (fresh(p, blk) ? 8 : 0);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct conv *p = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->slots);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct conv *p = ctx;
  vx_slots_end(t, p->slots);
}

static void block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct conv *p = ctx;
  uint32_t b, t0, nt, c0, cn, W = p->W, rs = p->rs, halo = W - 1;
  decompose(p, blk, &b, &t0, &nt, &c0, &cn);
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->slots);
  uint64_t X = p->slot[s], Wt = X + p->w_off, Bt = X + p->b_off, rb = (uint64_t)rs * 4;
  uint32_t first = halo > t0 ? halo - t0 : 0, rows = nt + halo - first; /* rows of x loaded, from UB row `first` */
  vx_load_begin(t, s);
  vx_load(t, X + (uint64_t)first * rs * p->es, p->x + (((uint64_t)b * p->S + t0 + first - halo) * p->Ch + c0) * p->es,
          p->dt, rows, cn, p->Ch, rs);
  bool fr = fresh(p, blk);
  if (fr) vx_load(t, Wt, p->w + (uint64_t)c0 * W * p->es, p->dt, cn, W, W, p->ldw);
  if (fr && p->bias) vx_load(t, Bt, p->bs + (uint64_t)c0 * p->es, p->dt, 1, cn, cn, cn);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  if (first) vx_dup(t, NPU_DT_FP32, p->F, 0.0, (uint64_t)halo * rs);
  vx_cast(t, p->F + (uint64_t)first * rb, NPU_DT_FP32, X + (uint64_t)first * rs * p->es, p->dt, (uint64_t)rows * rs);
  if (fr) vx_cast(t, p->Wf, NPU_DT_FP32, Wt, p->dt, (uint64_t)cn * p->ldw);
  if (fr && p->bias) vx_cast(t, p->Bf, NPU_DT_FP32, Bt, p->dt, cn);
  for (uint32_t i = 0; fr && i < W; i++) /* tap i of every channel: lane i of each weight row */
    for (uint32_t r0 = 0; r0 < cn; r0 += VX_RED_GROUP) {
      struct core_vec v = vx_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32);
      v.mask[0] = 1ull << (i % 8);
      v.mask[1] = 0;
      v.src0 = p->Wf + (uint64_t)r0 * p->ldw * 4 + (uint64_t)(i / 8) * 32;
      v.src0_rep = (uint16_t)(p->ldw / 8);
      v.repeat = (uint16_t)(cn - r0 < VX_RED_GROUP ? cn - r0 : VX_RED_GROUP);
      v.dst = p->Wd + (uint64_t)i * rb + (uint64_t)r0 * 4;
      core_vec(t, &v);
    }
  struct vx_opd A = vx_full(p->A, (uint32_t)rb), Tm = vx_full(p->Tm, (uint32_t)rb);
  for (uint32_t i = 0; i < W; i++) {
    struct vx_opd Xi = vx_full(p->F + (uint64_t)i * rb, (uint32_t)rb), Wi = vx_colv(p->Wd + (uint64_t)i * rb);
    vx_rows(t, CORE_VEC_MUL, i ? Tm : A, Xi, Wi, nt, cn);
    if (i) vx_rows(t, CORE_VEC_ADD, A, A, Tm, nt, cn);
  }
  uint64_t n = (uint64_t)nt * rs;
  if (p->bias) vx_rows(t, CORE_VEC_ADD, A, A, vx_colv(p->Bf), nt, cn);
  if (p->silu) { /* x / (1 + e^-x) */
    vx_sc(t, CORE_VEC_MULS, p->Tm, p->A, -1.0, n);
    vx_un(t, CORE_VEC_EXP, p->Tm, p->Tm, n);
    vx_sc(t, CORE_VEC_ADDS, p->Tm, p->Tm, 1.0, n);
    vx_bin(t, CORE_VEC_DIV, p->A, p->A, p->Tm, n);
  }
  vx_cast(t, X, p->dt, p->A, NPU_DT_FP32, n);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, p->out + (((uint64_t)b * p->S + t0) * p->Ch + c0) * p->es, X, p->dt, nt, cn, p->Ch, rs);
  vx_store_end(t, s);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct conv *p = pp;
  memset(p, 0, sizeof *p);
  p->chip = chip;
  uint64_t B = op_u(d, a, "batch"), S = op_u(d, a, "seq"), Ch = op_u(d, a, "channels"), W = op_u(d, a, "width");
  uint64_t tt = op_u(d, a, "tile_tokens"), tc = op_u(d, a, "tile_channels");
  p->dt = op_dtype(d, a, "dtype");
  p->silu = op_u(d, a, "silu");
  p->bias = op_u(d, a, "bias");
  int rc = vx_check_io(p->dt, "--dtype", diag);
  if (rc) return rc;
  if (W > WMAX)
    return npu_diag_set(diag, "command line", 0, "--width", "at most %u taps, got %llu", WMAX, (unsigned long long)W),
           NPU_EINVAL;
  if (B > 65536 || S > (1u << 24) || Ch > (1u << 24))
    return npu_diag_set(diag, "command line", 0, B > 65536 ? "--batch" : S > (1u << 24) ? "--seq" : "--channels",
                        "too large (batch <= 65536, seq and channels <= 16777216)"), NPU_EINVAL;
  if (tc && tc < Ch && tc % VX_REP)
    return npu_diag_set(diag, "command line", 0, "--tile_channels",
                        "a tile narrower than channels must be a multiple of 64, got %llu", (unsigned long long)tc),
           NPU_EINVAL;
  if (tt > 65535)
    return npu_diag_set(diag, "command line", 0, "--tile_tokens", "at most 65535, got %llu", (unsigned long long)tt),
           NPU_EINVAL;
  p->B = (uint32_t)B, p->S = (uint32_t)S, p->Ch = (uint32_t)Ch, p->W = (uint32_t)W;
  p->es = vx_es(p->dt);
  p->ldw = (uint32_t)ops_roundup(W, 32 / p->es > 8 ? 32 / p->es : 8); /* a weight row: whole 32-byte blocks */
  uint64_t ub = vx_ub_bytes(chip);
  int cores = vx_cores(chip);
  /* channels per tile: all when they are at most 1024 and 8 tokens of them fit with three slots,
   * else equal tiles of 64s as wide as that */
  uint32_t rsf = (uint32_t)ops_roundup(p->Ch, VX_REP), cmax = 1024;
  while (cmax > VX_REP && layout(p, 8, cmax, 3, false) > ub) cmax /= 2;
  p->Cc = tc ? (uint32_t)vx_min64(tc, p->Ch) : rsf <= cmax ? p->Ch : cmax;
  p->ncb = ops_ceil(p->Ch, p->Cc);
  if (!tc && p->ncb > 1) p->Cc = (uint32_t)ops_roundup(ops_ceil(p->Ch, p->ncb), VX_REP);
  p->rs = (uint32_t)ops_roundup(p->Cc, VX_REP);
  /* tokens per tile: ~16 KiB of x, a tile per core at least, as many as fit with three slots */
  uint64_t T = tt;
  if (!T) {
    T = 16384 / ((uint64_t)p->rs * p->es);
    uint64_t tiles_wanted = ops_ceil((uint64_t)cores, B * p->ncb);
    uint64_t per = ops_ceil(S, tiles_wanted);
    if (T > per) T = per;
    if (T > S) T = S;
    if (T < 1) T = 1;
    while (T > 1 && layout(p, (uint32_t)T, p->rs, 3, false) > ub) T--;
  }
  p->T = (uint32_t)T;
  if (layout(p, p->T, p->rs, 2, false) > ub)
    return npu_diag_set(diag, "command line", 0, tt ? "--tile_tokens" : "--tile_channels",
                        "tiling %u tokens x %u channels does not fit: UB needs %llu bytes, has %llu", p->T, p->Cc,
                        (unsigned long long)layout(p, p->T, p->rs, 2, false), (unsigned long long)ub), NPU_ENOFIT;
  p->slots = layout(p, p->T, p->rs, 3, false) <= ub ? 3 : 2;
  layout(p, p->T, p->rs, p->slots, true);
  p->ntb = ops_ceil(p->S, p->T);
  p->nblocks = (uint64_t)p->B * p->ntb * p->ncb;
  p->dim = vx_dim(chip, p->nblocks);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct conv *p = pp;
  uint64_t n = (uint64_t)p->B * p->S * p->Ch;
  p->x = op_tensor(x, "x", p->dt, n, OP_INIT_UNIFORM)->addr;
  p->w = op_tensor(x, "w", p->dt, (uint64_t)p->Ch * p->W, OP_INIT_UNIFORM)->addr;
  if (p->bias) p->bs = op_tensor(x, "bias", p->dt, p->Ch, OP_INIT_UNIFORM)->addr;
  p->out = op_tensor(x, "out", p->dt, n, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "causal_conv1d", .mode = CORE_MODE_VECTOR, .block_dim = p->dim,
                          .nblocks = p->nblocks, .ctx = p, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_class = block_class, .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs: a multiply and an add per tap and output (the bias and silu not counted). */
static double flops(const void *pp)
{
  const struct conv *p = pp;
  return 2.0 * p->W * (double)p->B * p->S * p->Ch;
}

/*
 * Tolerance: width fp32 products and sums, fp32 exp and division (1e-5 relative) and one rounding
 * to the type (half an ulp x 1.1); 1e-5 absolute where the sum cancels.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct conv *p = pp;
  double *X = op_decode(op_find_tensor(x, "x")), *Wt = op_decode(op_find_tensor(x, "w"));
  double *Bs = p->bias ? op_decode(op_find_tensor(x, "bias")) : NULL, *O = op_decode(op_find_tensor(x, "out"));
  size_t n = (size_t)p->B * p->S * p->Ch;
  double *ref = npu_xmalloc(n * sizeof *ref);
  for (size_t b = 0; b < p->B; b++)
    for (size_t tk = 0; tk < p->S; tk++)
      for (size_t c = 0; c < p->Ch; c++) {
        double acc = Bs ? Bs[c] : 0;
        for (size_t i = 0; i < p->W; i++) {
          int64_t src = (int64_t)tk - (int64_t)p->W + 1 + (int64_t)i;
          if (src >= 0) acc += Wt[c * p->W + i] * X[(b * p->S + (size_t)src) * p->Ch + c];
        }
        ref[(b * p->S + tk) * p->Ch + c] = p->silu ? acc / (1 + exp(-acc)) : acc;
      }
  double rtol = 0.55 * vx_ulp(p->dt) + 1e-5, atol = 1e-5;
  *max_err = op_compare(O, ref, n, atol, rtol);
  snprintf(summary, len, "causal_conv1d %ux%ux%u width %u %s (tiles %u tokens x %u channels): worst error %.3g of "
           "tolerance (atol %.3g, rtol %.3g)", p->B, p->S, p->Ch, p->W, npu_dtype_name(p->dt), p->T, p->Cc, *max_err,
           atol, rtol);
  free(X);
  free(Wt);
  free(Bs);
  free(O);
  free(ref);
  return *max_err <= 1;
}

/* The backward: the forward call twice (see .bwd). */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = out[1] = *fwd;
  grad[0] = OP_GRAD_INPUT;
  grad[1] = OP_GRAD_WEIGHT;
  return 2;
}

const struct op_desc op_causal_conv1d = {
    .name = "causal_conv1d",
    .summary = "depthwise causal 1-D convolution with silu (Mamba, Qwen3-Next's linear attention) on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct conv),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged, twice (input gradient, weight gradient)",
            "causal_conv1d_bwd reads x and dy and writes dx (an anti-causal convolution of dy with the same taps, "
            "through silu's derivative: the forward's traffic and work) and reduces x dy over the tokens into dw "
            "(the same reads again): costed as two forward calls",
            bwd},
};
