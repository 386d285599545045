/*
 * swiglu.c - the SwiGLU activation on the vector cores:
 *   out[r][c] = silu(gate[r][c]) * up[r][c],  silu(g) = g / (1 + e^-g)
 * where the input x [rows, 2 ffn] holds gate = x[:, :ffn] and up = x[:, ffn:] (Megatron / Llama
 * layout of the fused gate-up projection), out [rows, ffn]; fp16 / bf16 / fp32 in GM, fp32 in
 * the UB.
 *
 * Tiling: the output is cut into tiles of R rows x C columns (C = ffn when a row fits, else a
 * multiple of 64), aiming at 16 KiB of each input per tile with three load/compute/store slots
 * (two when three do not fit) and at least one tile per vector core; tiles are dealt to the
 * cores round robin. Per tile: MTE2 loads the gate and up sub-tiles (row stride 2 ffn) into a
 * slot; V widens them, computes t = 1 + e^-g, g / t, times up, casts into the slot's gate half;
 * MTE3 stores it. Elementwise passes run over the whole tile, row padding included.
 *
 * Sources: Shazeer 2020 (GLU variants); CANN SwiGlu kernel structure (gate/up halves, fp32
 * compute).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"ffn", OP_P_DIM, NULL, "output columns; the input has 2 ffn (gate, then up)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x and out: fp16, bf16 or fp32", NULL},
    {"tile_rows", OP_P_INT, "0", "rows per tile (0: automatic)", NULL},
    {"tile_cols", OP_P_INT, "0", "columns per tile (0: automatic; a multiple of 64 below ffn)", NULL},
};

struct swiglu {
  const struct arch_chip *chip;
  uint64_t rows;
  uint32_t ffn;
  enum npu_dtype dt;
  uint32_t es;
  uint32_t R, C, rs;             /* tile rows, columns, UB row stride (C rounded up to 64) */
  uint32_t nrb, ncb;             /* row tiles, column tiles */
  int slots, dim;
  uint64_t nblocks;
  uint64_t x, out;               /* GM */
  uint64_t slot[VX_SLOTS_MAX], in_stride;
  uint64_t G, U, T;              /* fp32 work tiles */
};

static uint64_t layout(struct swiglu *p, uint32_t R, uint32_t rs, int slots, bool place)
{
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t e = (uint64_t)R * rs, ib = e * p->es, fb = e * 4;
  uint64_t base = vx_lay_slots(&l, p->chip, slots, 2, ib);
  bool f16 = p->es == 2;
  int G = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int U = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int T = vx_lay_buf(&l, fb, false);
  int Gx = f16 ? G : VX_SLOTIN(0), Ux = f16 ? U : VX_SLOTIN(1);
  vx_lay_pass(&l, T, Gx, VX_NOBUF, 1);   /* -g */
  vx_lay_pass(&l, T, T, VX_NOBUF, 1);    /* + 1 */
  vx_lay_pass(&l, Gx, T, Ux, 1);         /* silu * up */
  if (!place) return base + vx_lay_bound(&l);
  vx_lay_solve(&l, p->chip, base, vx_ub_bytes(p->chip));
  for (int s = 0; s < slots; s++) p->slot[s] = l.slot[s];
  p->in_stride = l.in_stride;
  p->G = G >= 0 ? l.addr[G] : 0;
  p->U = U >= 0 ? l.addr[U] : 0;
  p->T = l.addr[T];
  return l.end;
}

static void decompose(const struct swiglu *p, uint64_t b, uint64_t *r0, uint32_t *nr, uint32_t *c0, uint32_t *cn)
{
  uint64_t rb = b / p->ncb;
  uint32_t cb = (uint32_t)(b % p->ncb);
  *r0 = rb * p->R;
  *nr = (uint32_t)vx_min64(p->R, p->rows - *r0);
  *c0 = cb * p->C;
  *cn = p->ffn - *c0 < p->C ? p->ffn - *c0 : p->C;
}

static int block_class(void *ctx, uint64_t b)
{
  const struct swiglu *p = ctx;
  uint64_t r0;
  uint32_t nr, c0, cn;
  decompose(p, b, &r0, &nr, &c0, &cn);
  return (nr < p->R ? 1 : 0) | (cn < p->C ? 2 : 0);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct swiglu *p = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->slots);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct swiglu *p = ctx;
  vx_slots_end(t, p->slots);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct swiglu *p = ctx;
  uint64_t r0;
  uint32_t nr, c0, cn;
  decompose(p, b, &r0, &nr, &c0, &cn);
  uint64_t cnt = (uint64_t)nr * p->rs, ld = 2ull * p->ffn;
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->slots);
  uint64_t Xg = p->slot[s], Xu = Xg + p->in_stride;
  uint64_t gate = p->x + (r0 * ld + c0) * p->es;
  vx_load_begin(t, s);
  vx_load(t, Xg, gate, p->dt, nr, cn, ld, p->rs);
  vx_load(t, Xu, gate + (uint64_t)p->ffn * p->es, p->dt, nr, cn, ld, p->rs);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  bool f16 = p->es == 2;
  uint64_t G = f16 ? p->G : Xg, U = f16 ? p->U : Xu;
  vx_cast(t, G, NPU_DT_FP32, Xg, p->dt, cnt);
  vx_cast(t, U, NPU_DT_FP32, Xu, p->dt, cnt);
  vx_sc(t, CORE_VEC_MULS, p->T, G, -1.0, cnt);
  vx_un(t, CORE_VEC_EXP, p->T, p->T, cnt);
  vx_sc(t, CORE_VEC_ADDS, p->T, p->T, 1.0, cnt);
  vx_bin(t, CORE_VEC_DIV, p->T, G, p->T, cnt);
  vx_bin(t, CORE_VEC_MUL, G, p->T, U, cnt);
  vx_cast(t, Xg, p->dt, G, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, p->out + (r0 * p->ffn + c0) * p->es, Xg, p->dt, nr, cn, p->ffn, p->rs);
  vx_store_end(t, s);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct swiglu *p = pp;
  memset(p, 0, sizeof *p);
  p->chip = chip;
  p->rows = op_u(d, a, "rows");
  p->dt = op_dtype(d, a, "dtype");
  if (op_u(d, a, "ffn") > (1u << 24))
    return npu_diag_set(diag, "command line", 0, "--ffn", "at most 16777216, got %llu",
                        (unsigned long long)op_u(d, a, "ffn")), NPU_EINVAL;
  p->ffn = (uint32_t)op_u(d, a, "ffn");
  int rc = vx_check_io(p->dt, "--dtype", diag);
  if (rc) return rc;
  p->es = vx_es(p->dt);
  uint64_t ub = vx_ub_bytes(chip), tr = op_u(d, a, "tile_rows"), tc = op_u(d, a, "tile_cols");
  int cores = vx_cores(chip);
  if (tc && tc < p->ffn && tc % VX_REP)
    return npu_diag_set(diag, "command line", 0, "--tile_cols", "a tile narrower than ffn must be a multiple of 64 columns, got %llu",
                        (unsigned long long)tc), NPU_EINVAL;
  if (tr > 65535)
    return npu_diag_set(diag, "command line", 0, "--tile_rows", "at most 65535 rows per tile, got %llu",
                        (unsigned long long)tr), NPU_EINVAL;
  /* elements per tile: 16 KiB of each input, as many as fit with three slots */
  uint64_t target = 16384 / p->es, fit3 = 0;
  for (uint64_t e = 64; e <= 65536 && layout(p, 1, (uint32_t)e, 3, false) <= ub; e += 64) fit3 = e;
  uint64_t emax = fit3 < target ? fit3 : target;
  if (emax < 64) emax = 64;
  uint32_t rsf = (uint32_t)ops_roundup(p->ffn, VX_REP);
  p->C = tc ? (uint32_t)vx_min64(tc, p->ffn) : (rsf <= emax ? p->ffn : (uint32_t)(emax / VX_REP * VX_REP));
  p->ncb = ops_ceil(p->ffn, p->C);
  if (!tc && p->ncb > 1) /* equal column tiles: cores dealt every ncb-th tile get equal work */
    p->C = (uint32_t)ops_roundup(ops_ceil(p->ffn, p->ncb), VX_REP);
  p->rs = (uint32_t)ops_roundup(p->C, VX_REP);
  uint64_t R = tr ? tr : emax / p->rs;
  if (!tr) {
    uint64_t want_rows = ops_ceil(p->rows, ops_ceil((uint64_t)cores, p->ncb)); /* a tile per core at least */
    if (R > want_rows) R = want_rows;
    if (R < 1) R = 1;
  }
  if (!tr && R > p->rows) R = p->rows;
  p->R = (uint32_t)R;
  p->slots = layout(p, p->R, p->rs, 3, false) <= ub ? 3 : 2;
  if (layout(p, p->R, p->rs, 2, false) > ub)
    return npu_diag_set(diag, "command line", 0, tr ? "--tile_rows" : "--tile_cols",
                        "tiling %u rows x %u columns does not fit: UB needs %llu bytes, has %llu", p->R, p->C,
                        (unsigned long long)layout(p, p->R, p->rs, 2, false), (unsigned long long)ub), NPU_ENOFIT;
  layout(p, p->R, p->rs, p->slots, true);
  p->nrb = (uint32_t)ops_ceil(p->rows, p->R);
  p->nblocks = (uint64_t)p->nrb * p->ncb;
  p->dim = vx_dim(chip, p->nblocks);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct swiglu *p = pp;
  struct op_tensor *in = op_tensor(x, "x", p->dt, p->rows * 2 * p->ffn, OP_INIT_UNIFORM);
  if (op_functional(x)) /* gates in [-6, 6): both tails of silu */
    for (uint64_t i = 0; i < in->count; i++) fmt_encode(p->dt, in->host, i, 6 * fmt_decode(p->dt, in->host, i));
  p->x = in->addr;
  p->out = op_tensor(x, "out", p->dt, p->rows * p->ffn, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "swiglu", .mode = CORE_MODE_VECTOR, .block_dim = p->dim, .nblocks = p->nblocks,
                          .ctx = p, .unit_begin = unit_begin, .unit_end = unit_end, .block = block,
                          .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per output: negate, exp, add, divide, multiply. */
static double flops(const void *pp)
{
  const struct swiglu *p = pp;
  return 5.0 * (double)p->rows * p->ffn;
}

/*
 * Tolerance: fp32 exp and division (a few ulps: 4e-6 relative) and one rounding to the type
 * (half an ulp x 1.1); 1e-6 absolute for outputs near zero.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct swiglu *p = pp;
  double *X = op_decode(op_find_tensor(x, "x")), *O = op_decode(op_find_tensor(x, "out"));
  size_t F = p->ffn, cnt = (size_t)p->rows * F;
  double *ref = npu_xmalloc(cnt * sizeof *ref);
  for (size_t r = 0; r < p->rows; r++)
    for (size_t c = 0; c < F; c++) {
      double g = X[r * 2 * F + c], u = X[r * 2 * F + F + c];
      ref[r * F + c] = g / (1 + exp(-g)) * u;
    }
  double rtol = 0.55 * vx_ulp(p->dt) + 4e-6, atol = 1e-6;
  *max_err = op_compare(O, ref, cnt, atol, rtol);
  snprintf(summary, len, "swiglu %llux%u %s (tiles %ux%u): worst error %.3g of tolerance (atol %.3g, rtol %.3g)",
           (unsigned long long)p->rows, p->ffn, npu_dtype_name(p->dt), p->R, p->C, *max_err, atol, rtol);
  free(X);
  free(O);
  free(ref);
  return *max_err <= 1;
}

/* The backward: the forward with 5/3 of the rows (see .bwd). */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  op_call_dim(&out[0], "rows", (int64_t)((op_call_u(fwd, "rows") * 5 + 2) / 3));
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

const struct op_desc op_swiglu = {
    .name = "swiglu",
    .summary = "SwiGLU: silu(gate) * up over the two halves of the gate-up projection, on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct swiglu),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call with 5/3 of the rows (rounded)",
            "the backward reads x (2 ffn) and dy (ffn) and writes dx (2 ffn), 5/3 of the forward's bytes (reads "
            "2 ffn, writes ffn): costed as the forward kernel over 5/3 of the rows",
            bwd},
};
