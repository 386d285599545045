/*
 * softmax.c - row softmax with max subtraction on the vector cores:
 *   y[r][c] = exp(x[r][c] - max_r) / sum_c exp(x[r][c] - max_r)
 * over rows of `cols` elements, fp16 / bf16 / fp32 in GM, computed in fp32 in the UB.
 *
 * Tiling (vx_plan_rows, ops/vecops_int.h): tiles of R whole rows (~32 KiB of input, all vector
 * cores busy), three load/compute/store slots when they fit, else two; y is cast back into the
 * tile's input slot and stored from it. Per tile: cast, row max (pairwise tree of whole repeats
 * to 64 lanes per row, then one whole-repeat reduction per row), one Brcb of the maxima, x - max,
 * exp, row sums the same way, one reciprocal per row, Brcb, scale, cast. A row too long for the
 * UB is cut into chunks walked twice: pass 1 keeps an online max and sum (Milakov & Gimelshein
 * 2018: S = S e^(M - M') + sum e^(x - M')), pass 2 reloads each chunk and writes
 * e^(x - M) / S. So a whole-row tile reads x once; a chunked row reads it twice.
 *
 * Sources: the online normaliser calculation (arXiv 1805.02867); CANN SoftmaxV2 / FlashAttention
 * vector code for the structure (fp32 compute, Brcb of per-row statistics).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows", NULL},
    {"cols", OP_P_DIM, NULL, "row length (the softmax axis)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x and y: fp16, bf16 or fp32", NULL},
    {"tile_rows", OP_P_INT, "0", "rows per tile (0: automatic)", NULL},
    {"tile_cols", OP_P_INT, "0", "columns per tile: fewer than cols cuts rows into chunks (0: automatic)", NULL},
};

struct softmax {
  const struct arch_chip *chip;
  uint64_t rows;
  uint32_t C;
  enum npu_dtype dt;
  uint32_t es;
  struct vx_rowplan rp;
  int dim;
  uint64_t x, y;                 /* GM */
  uint64_t slot[VX_SLOTS_MAX];   /* UB: slots (one input each) */
  uint64_t F, W, bc1, bc2, acc, M, S, cm, tmp;
};

/* The UB layout for R rows of stride rs (see norm.c's norm_layout). */
static uint64_t sm_layout(struct softmax *p, uint32_t R, uint32_t rs, int slots, bool chunked, bool place)
{
  (void)chunked;
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t ib = (uint64_t)R * rs * p->es, fb = (uint64_t)R * rs * 4;
  uint64_t bcb = ops_roundup(ops_roundup(R, 8) * 32ull, 512);
  uint64_t base = vx_lay_slots(&l, p->chip, slots, 1, ib);
  bool f16 = p->es == 2;
  int F = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int W = vx_lay_buf(&l, fb, false);
  int BC = vx_lay_buf(&l, 2 * bcb, true);
  int Xf = f16 ? F : VX_SLOTIN(0);
  vx_lay_pass(&l, W, Xf, BC, 1);            /* x - max */
  vx_lay_pass(&l, f16 ? F : VX_SLOTIN(0), W, VX_NOBUF, 0.5); /* fold of the sums */
  vx_lay_pass(&l, Xf, W, BC, 1);            /* * 1 / sum */
  vx_lay_pass(&l, W, Xf, VX_NOBUF, 0.5);    /* fold of the maxima */
  uint64_t vb = ops_roundup((uint64_t)R * 4, VX_REP_BYTES);
  uint64_t small = (uint64_t)R * VX_REP_BYTES + 4 * vb;
  if (!place) return base + vx_lay_bound(&l) + small;
  vx_lay_solve(&l, p->chip, base, vx_ub_bytes(p->chip) - small);
  for (int s = 0; s < slots; s++) p->slot[s] = l.slot[s];
  p->F = F >= 0 ? l.addr[F] : 0;
  p->W = l.addr[W];
  p->bc1 = l.addr[BC];
  p->bc2 = p->bc1 + bcb;
  struct vx_ub u = {l.end};
  p->acc = vx_take(&u, (uint64_t)R * VX_REP_BYTES);
  p->M = vx_take(&u, vb);
  p->S = vx_take(&u, vb);
  p->cm = vx_take(&u, vb);
  p->tmp = vx_take(&u, vb);
  NPU_ASSERT(u.off <= vx_ub_bytes(p->chip));
  return u.off;
}

static uint64_t sm_need(const void *ctx, uint32_t R, uint32_t rs, int slots, bool chunked)
{
  struct softmax p = *(const struct softmax *)ctx;
  return sm_layout(&p, R, rs, slots, chunked, false);
}

static int block_class(void *ctx, uint64_t b)
{
  const struct softmax *p = ctx;
  return !p->rp.chunked && b == p->rp.tiles - 1 && p->rows % p->rp.R ? 1 : 0;
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct softmax *p = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->rp.slots);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct softmax *p = ctx;
  vx_slots_end(t, p->rp.slots);
}

static void sm_rows(struct core_tp *t, struct softmax *p, uint64_t b)
{
  uint32_t R = p->rp.R, rs = p->rp.rs, C = p->C, rb = rs * 4;
  uint64_t r0 = b * R, goff = r0 * C * p->es;
  uint32_t nr = (uint32_t)vx_min64(R, p->rows - r0);
  uint64_t cnt = (uint64_t)nr * rs;
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->rp.slots);
  uint64_t X = p->slot[s];
  vx_load_begin(t, s);
  vx_load(t, X, p->x + goff, p->dt, nr, C, C, rs);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  bool f16 = p->es == 2;
  uint64_t Xf = f16 ? p->F : X;
  vx_cast(t, Xf, NPU_DT_FP32, X, p->dt, cnt);
  vx_rowred(t, CORE_VEC_MAX, p->M, Xf, rb, nr, C, p->acc, p->W, f16 ? X : VX_NOADDR);
  vx_brcb(t, p->bc1, p->M, nr);
  vx_rows(t, CORE_VEC_SUB, vx_full(p->W, rb), vx_full(Xf, rb), vx_rowb(p->bc1), nr, C);
  vx_un(t, CORE_VEC_EXP, p->W, p->W, cnt);
  /* the sums' fold writes the (now free) x tile, W keeps the exponentials */
  vx_rowred(t, CORE_VEC_ADD, p->S, p->W, rb, nr, C, p->acc, Xf, f16 ? X : VX_NOADDR);
  vx_un(t, CORE_VEC_RECIP, p->S, p->S, nr);
  vx_brcb(t, p->bc2, p->S, nr);
  vx_rows(t, CORE_VEC_MUL, vx_full(Xf, rb), vx_full(p->W, rb), vx_rowb(p->bc2), nr, C);
  vx_cast(t, X, p->dt, Xf, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, p->y + goff, X, p->dt, nr, C, C, rs);
  vx_store_end(t, s);
}

static void sm_chunked(struct core_tp *t, struct softmax *p, uint64_t row)
{
  uint32_t CH = p->rp.C, C = p->C, slots = (uint32_t)p->rp.slots;
  bool f16 = p->es == 2;
  for (uint32_t j = 0; j < p->rp.nchunk; j++) { /* pass 1: online max and sum */
    uint32_t c0 = j * CH, cn = C - c0 < CH ? C - c0 : CH;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = p->slot[s], Xf = f16 ? p->F : X;
    vx_load_begin(t, s);
    vx_load(t, X, p->x + (row * C + c0) * p->es, p->dt, 1, cn, C, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    vx_cast(t, Xf, NPU_DT_FP32, X, p->dt, cn);
    vx_online_lse(t, Xf, p->W, f16 ? X : VX_NOADDR, (uint32_t)ops_roundup(cn, VX_REP) * 4, 1, cn, p->M, p->S, p->cm,
                  p->tmp, p->acc, p->bc1, j == 0);
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store_end(t, s);
  }
  vx_un(t, CORE_VEC_RECIP, p->S, p->S, 1);
  vx_brcb(t, p->bc2, p->S, 1); /* bc1 holds the row max from the last chunk */
  for (uint32_t j = 0; j < p->rp.nchunk; j++) { /* pass 2: e^(x - M) / S */
    uint32_t c0 = j * CH, cn = C - c0 < CH ? C - c0 : CH;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = p->slot[s], Xf = f16 ? p->F : X, e = (row * C + c0) * p->es;
    vx_load_begin(t, s);
    vx_load(t, X, p->x + e, p->dt, 1, cn, C, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    vx_cast(t, Xf, NPU_DT_FP32, X, p->dt, cn);
    vx_rows(t, CORE_VEC_SUB, vx_full(p->W, 0), vx_full(Xf, 0), vx_one(p->bc1), 1, cn);
    vx_un(t, CORE_VEC_EXP, p->W, p->W, cn);
    vx_rows(t, CORE_VEC_MUL, vx_full(Xf, 0), vx_full(p->W, 0), vx_one(p->bc2), 1, cn);
    vx_cast(t, X, p->dt, Xf, NPU_DT_FP32, cn);
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store(t, p->y + e, X, p->dt, 1, cn, C, cn);
    vx_store_end(t, s);
  }
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct softmax *p = ctx;
  (p->rp.chunked ? sm_chunked : sm_rows)(t, p, b);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct softmax *p = pp;
  memset(p, 0, sizeof *p);
  p->chip = chip;
  int rc = vx_row_args(d, a, "cols", &p->rows, &p->C, &p->dt, &p->es, diag);
  if (rc) return rc;
  rc = vx_plan_rows(&p->rp, p->rows, p->C, p->es, vx_cores(chip), vx_ub_bytes(chip), op_u(d, a, "tile_rows"),
                    op_u(d, a, "tile_cols"), sm_need, p, "--cols", diag);
  if (rc) return rc;
  sm_layout(p, p->rp.R, p->rp.rs, p->rp.slots, p->rp.chunked, true);
  p->dim = vx_dim(chip, p->rp.tiles);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct softmax *p = pp;
  struct op_tensor *in = op_tensor(x, "x", p->dt, p->rows * p->C, OP_INIT_UNIFORM);
  if (op_functional(x)) /* logits in [-8, 8): the max subtraction matters */
    for (uint64_t i = 0; i < in->count; i++) fmt_encode(p->dt, in->host, i, 8 * fmt_decode(p->dt, in->host, i));
  p->x = in->addr;
  p->y = op_tensor(x, "y", p->dt, p->rows * p->C, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "softmax", .mode = CORE_MODE_VECTOR, .block_dim = p->dim,
                          .nblocks = p->rp.tiles, .ctx = p, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per element: max, subtract, exp, sum, scale. */
static double flops(const void *pp)
{
  const struct softmax *p = pp;
  return 5.0 * (double)p->rows * p->C;
}

/*
 * Tolerance: fp32 compute (x - max exact or within an fp32 rounding of |x - max| <= 16, exp and
 * the pairwise sums within a few ulps: 8e-6 relative), then one rounding to the type (half an
 * ulp, x 1.1); 5e-8 absolute covers fp16's subnormal spacing.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct softmax *p = pp;
  double *X = op_decode(op_find_tensor(x, "x")), *Y = op_decode(op_find_tensor(x, "y"));
  size_t C = p->C, cnt = (size_t)p->rows * C;
  double *ref = npu_xmalloc(cnt * sizeof *ref);
  for (size_t r = 0; r < p->rows; r++) {
    const double *xr = X + r * C;
    double m = -INFINITY, s = 0;
    for (size_t c = 0; c < C; c++) m = xr[c] > m ? xr[c] : m;
    for (size_t c = 0; c < C; c++) s += ref[r * C + c] = exp(xr[c] - m);
    for (size_t c = 0; c < C; c++) ref[r * C + c] /= s;
  }
  double rtol = 0.55 * vx_ulp(p->dt) + 8e-6, atol = 5e-8;
  *max_err = op_compare(Y, ref, cnt, atol, rtol);
  snprintf(summary, len, "softmax %llux%u %s, %s: worst error %.3g of tolerance (atol %.3g, rtol %.3g)",
           (unsigned long long)p->rows, p->C, npu_dtype_name(p->dt), p->rp.chunked ? "chunked rows" : "whole rows",
           *max_err, atol, rtol);
  free(X);
  free(Y);
  free(ref);
  return *max_err <= 1;
}

const struct op_desc op_softmax = {
    .name = "softmax",
    .summary = "row softmax with max subtraction (online over chunks for long rows), on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct softmax),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward dx = y (dy - sum(dy y)) is a row pass over y and dy: costed as a softmax pass of the "
            "same shape",
            op__bwd_same},
};
