/*
 * rope.c - rotary position embedding on the vector cores, half-rotation layout (Llama / Megatron
 * "rotate_half"): for x [tokens, heads, head_dim] with halves x1 = x[..., :D/2], x2 =
 * x[..., D/2:] and tables cos, sin [tokens, D/2],
 *   out1 = x1 cos - x2 sin,  out2 = x2 cos + x1 sin.
 * fp16 / bf16 / fp32 in GM, fp32 in the UB; head_dim a multiple of 16 (so that every half-row
 * starts on a 32-byte block in fp32).
 *
 * Tiling: tiles of Tt tokens x Hb heads (all heads when a token's heads fit, ~16 KiB of x per
 * tile, at least one tile per vector core), three load/compute/store slots (two if three do not
 * fit). A slot holds the x tile and the tokens' cos and sin rows. Per tile V widens them and, for
 * each token (repeats over its heads, the token's cos/sin row shared) or for each head (repeats
 * over the tokens, whichever issues fewer instructions), forms x1 sin and x2 sin in a scratch
 * tile, then x1 = x1 cos - x2 sin and x2 = x2 cos + x1 sin in place, and casts back into the
 * slot; MTE3 stores it. The tables are re-read per head group only when heads are split.
 *
 * Sources: RoFormer (Su et al. 2021); Llama / Megatron-LM apply_rotary_pos_emb (rotate_half).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"tokens", OP_P_DIM, NULL, "tokens (batch x sequence)", NULL},
    {"heads", OP_P_DIM, NULL, "heads", NULL},
    {"head_dim", OP_P_DIM, "128", "head dimension (a multiple of 16)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x, cos, sin and out: fp16, bf16 or fp32", NULL},
    {"tile_tokens", OP_P_INT, "0", "tokens per tile (0: automatic)", NULL},
    {"tile_heads", OP_P_INT, "0", "heads per tile (0: automatic)", NULL},
};

struct rope {
  const struct arch_chip *chip;
  uint64_t T;
  uint32_t Hh, D;
  enum npu_dtype dt;
  uint32_t es;
  uint32_t Tt, Hb;              /* tile: tokens, heads */
  uint32_t ntb, nhb;            /* token tiles, head tiles */
  int slots, dim;
  uint64_t nblocks;
  uint64_t x, cs, sn, out;      /* GM */
  uint64_t slot[VX_SLOTS_MAX];  /* UB: x at +0, cos at +cos_off, sin at +sin_off */
  uint64_t cos_off, sin_off;
  uint64_t F, Tm, Cf, Sf;       /* fp32 work: x, the sin products, cos, sin */
};

static uint64_t layout(struct rope *p, uint32_t Tt, uint32_t Hb, int slots, bool place)
{
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t e = (uint64_t)Tt * Hb * p->D, hc = (uint64_t)Tt * p->D / 2;
  uint64_t xb = ops_roundup(e * p->es, 512) + 256, tb = ops_roundup(hc * p->es, 512) + 256;
  uint64_t base = vx_lay_slots(&l, p->chip, slots, 1, xb + 2 * tb);
  bool f16 = p->es == 2;
  int F = f16 ? vx_lay_buf(&l, e * 4, false) : VX_NOBUF;
  int Tm = vx_lay_buf(&l, e * 4, false);
  int CS = f16 ? vx_lay_buf(&l, 2 * ops_roundup(hc * 4, 512), false) : VX_NOBUF;
  int Xf = f16 ? F : VX_SLOTIN(0);
  vx_lay_pass(&l, Tm, Xf, CS, 2);  /* x sin */
  vx_lay_pass(&l, Xf, Xf, CS, 2);  /* x cos */
  vx_lay_pass(&l, Xf, Xf, Tm, 2);  /* +- */
  if (!place) return base + vx_lay_bound(&l);
  vx_lay_solve(&l, p->chip, base, vx_ub_bytes(p->chip));
  for (int s = 0; s < slots; s++) p->slot[s] = l.slot[s];
  p->cos_off = xb;
  p->sin_off = xb + tb;
  p->F = F >= 0 ? l.addr[F] : 0;
  p->Tm = l.addr[Tm];
  p->Cf = CS >= 0 ? l.addr[CS] : 0;
  p->Sf = CS >= 0 ? p->Cf + ops_roundup(hc * 4, 512) : 0;
  return l.end;
}

static void decompose(const struct rope *p, uint64_t b, uint64_t *t0, uint32_t *nt, uint32_t *h0, uint32_t *nh)
{
  uint64_t tb = b / p->nhb;
  uint32_t hb = (uint32_t)(b % p->nhb);
  *t0 = tb * p->Tt;
  *nt = (uint32_t)vx_min64(p->Tt, p->T - *t0);
  *h0 = hb * p->Hb;
  *nh = p->Hh - *h0 < p->Hb ? p->Hh - *h0 : p->Hb;
}

static int block_class(void *ctx, uint64_t b)
{
  const struct rope *p = ctx;
  uint64_t t0;
  uint32_t nt, h0, nh;
  decompose(p, b, &t0, &nt, &h0, &nh);
  return (nt < p->Tt ? 1 : 0) | (nh < p->Hb ? 2 : 0);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct rope *p = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->slots);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct rope *p = ctx;
  vx_slots_end(t, p->slots);
}

/* The six products and sums for one group of rows: `rows` (tokens or heads) of x halves at x1
 * (row stride xrb), the matching scratch at t1, the table rows at c and s (row stride crb, or
 * 0: one row shared by all). */
static void rotate(struct core_tp *t, const struct rope *p, uint64_t x1, uint64_t t1, uint32_t xrb, uint64_t c,
                   uint64_t s, uint32_t crb, uint32_t rows)
{
  uint32_t half = p->D / 2, hb = half * 4;
  struct vx_opd X1 = vx_full(x1, xrb), X2 = vx_full(x1 + hb, xrb), T1 = vx_full(t1, xrb), T2 = vx_full(t1 + hb, xrb);
  struct vx_opd Cv = crb ? vx_full(c, crb) : vx_colv(c), Sv = crb ? vx_full(s, crb) : vx_colv(s);
  vx_rows(t, CORE_VEC_MUL, T1, X1, Sv, rows, half); /* x1 sin */
  vx_rows(t, CORE_VEC_MUL, T2, X2, Sv, rows, half); /* x2 sin */
  vx_rows(t, CORE_VEC_MUL, X1, X1, Cv, rows, half);
  vx_rows(t, CORE_VEC_SUB, X1, X1, T2, rows, half); /* x1 cos - x2 sin */
  vx_rows(t, CORE_VEC_MUL, X2, X2, Cv, rows, half);
  vx_rows(t, CORE_VEC_ADD, X2, X2, T1, rows, half); /* x2 cos + x1 sin */
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct rope *p = ctx;
  uint64_t t0;
  uint32_t nt, h0, nh;
  decompose(p, b, &t0, &nt, &h0, &nh);
  uint32_t D = p->D, half = D / 2;
  uint64_t e = (uint64_t)nt * nh * D, hc = (uint64_t)nt * half, ld = (uint64_t)p->Hh * D;
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)p->slots);
  uint64_t X = p->slot[s], Cn = X + p->cos_off, Sn = X + p->sin_off;
  uint64_t gx = (t0 * p->Hh + h0) * D * p->es, gt = t0 * half * p->es;
  vx_load_begin(t, s);
  vx_load(t, X, p->x + gx, p->dt, nt, nh * D, ld, nh * D);
  vx_load(t, Cn, p->cs + gt, p->dt, 1, (uint32_t)hc, hc, (uint32_t)hc);
  vx_load(t, Sn, p->sn + gt, p->dt, 1, (uint32_t)hc, hc, (uint32_t)hc);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  bool f16 = p->es == 2;
  uint64_t F = f16 ? p->F : X, Cf = f16 ? p->Cf : Cn, Sf = f16 ? p->Sf : Sn;
  vx_cast(t, F, NPU_DT_FP32, X, p->dt, e);
  vx_cast(t, Cf, NPU_DT_FP32, Cn, p->dt, hc);
  vx_cast(t, Sf, NPU_DT_FP32, Sn, p->dt, hc);
  uint32_t tok_bytes = nh * D * 4;
  if (nt <= nh) { /* per token, repeats over its heads */
    for (uint32_t k = 0; k < nt; k++)
      rotate(t, p, F + (uint64_t)k * tok_bytes, p->Tm + (uint64_t)k * tok_bytes, D * 4, Cf + (uint64_t)k * half * 4,
             Sf + (uint64_t)k * half * 4, 0, nh);
  } else { /* per head, repeats over the tokens */
    for (uint32_t h = 0; h < nh; h++)
      rotate(t, p, F + (uint64_t)h * D * 4, p->Tm + (uint64_t)h * D * 4, tok_bytes, Cf, Sf, half * 4, nt);
  }
  vx_cast(t, X, p->dt, F, NPU_DT_FP32, e);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, p->out + gx, X, p->dt, nt, nh * D, ld, nh * D);
  vx_store_end(t, s);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct rope *p = pp;
  memset(p, 0, sizeof *p);
  p->chip = chip;
  p->T = op_u(d, a, "tokens");
  p->dt = op_dtype(d, a, "dtype");
  if (op_u(d, a, "heads") > 65535 || op_u(d, a, "head_dim") > 65535)
    return npu_diag_set(diag, "command line", 0, "--heads", "heads and head_dim must be below 65536"), NPU_EINVAL;
  p->Hh = (uint32_t)op_u(d, a, "heads");
  p->D = (uint32_t)op_u(d, a, "head_dim");
  int rc = vx_check_io(p->dt, "--dtype", diag);
  if (rc) return rc;
  if (p->D % 16)
    return npu_diag_set(diag, "command line", 0, "--head_dim", "must be a multiple of 16, got %u", p->D), NPU_EINVAL;
  p->es = vx_es(p->dt);
  uint64_t ub = vx_ub_bytes(chip), tt = op_u(d, a, "tile_tokens"), th = op_u(d, a, "tile_heads");
  if (tt > 65535 || th > p->Hh)
    return npu_diag_set(diag, "command line", 0, tt > 65535 ? "--tile_tokens" : "--tile_heads",
                        "at most %u", tt > 65535 ? 65535u : p->Hh), NPU_EINVAL;
  /* heads per tile: all when one token's heads fit with three slots, else as many as fit */
  uint32_t Hb = th ? (uint32_t)th : p->Hh;
  if (!th) {
    while (Hb > 1 && layout(p, 1, Hb, 3, false) > ub) Hb = (Hb + 1) / 2;
    Hb = ops_ceil(p->Hh, ops_ceil(p->Hh, Hb)); /* equal head groups */
  }
  /* tokens per tile: ~16 KiB of x, at least one tile per vector core */
  uint64_t Tt = tt;
  if (!Tt) {
    uint64_t nhb = ops_ceil(p->Hh, Hb);
    Tt = 16384 / ((uint64_t)Hb * p->D * p->es);
    uint64_t per_core = ops_ceil(p->T, ops_ceil((uint64_t)vx_cores(chip), nhb));
    if (Tt > per_core) Tt = per_core;
    if (Tt > p->T) Tt = p->T;
    if (Tt < 1) Tt = 1;
    while (Tt > 1 && layout(p, (uint32_t)Tt, Hb, 3, false) > ub) Tt--;
  }
  p->Tt = (uint32_t)Tt;
  p->Hb = Hb;
  if (layout(p, p->Tt, p->Hb, 2, false) > ub)
    return npu_diag_set(diag, "command line", 0, tt ? "--tile_tokens" : "--tile_heads",
                        "tiling %u tokens x %u heads x %u does not fit: UB needs %llu bytes, has %llu", p->Tt, p->Hb,
                        p->D, (unsigned long long)layout(p, p->Tt, p->Hb, 2, false), (unsigned long long)ub),
           NPU_ENOFIT;
  p->slots = layout(p, p->Tt, p->Hb, 3, false) <= ub ? 3 : 2;
  layout(p, p->Tt, p->Hb, p->slots, true);
  p->ntb = (uint32_t)ops_ceil(p->T, p->Tt);
  p->nhb = ops_ceil(p->Hh, p->Hb);
  p->nblocks = (uint64_t)p->ntb * p->nhb;
  p->dim = vx_dim(chip, p->nblocks);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct rope *p = pp;
  uint64_t n = p->T * p->Hh * p->D, hc = p->T * p->D / 2;
  p->x = op_tensor(x, "x", p->dt, n, OP_INIT_UNIFORM)->addr;
  struct op_tensor *c = op_tensor(x, "cos", p->dt, hc, OP_INIT_NONE), *s = op_tensor(x, "sin", p->dt, hc, OP_INIT_NONE);
  if (op_functional(x)) /* the tables of RoPE (base 10000) at positions 0, 1, ... */
    for (uint64_t tk = 0; tk < p->T; tk++)
      for (uint32_t i = 0; i < p->D / 2; i++) {
        double ang = (double)tk * pow(10000.0, -2.0 * i / p->D);
        fmt_encode(p->dt, c->host, tk * (p->D / 2) + i, cos(ang));
        fmt_encode(p->dt, s->host, tk * (p->D / 2) + i, sin(ang));
      }
  p->cs = c->addr;
  p->sn = s->addr;
  p->out = op_tensor(x, "out", p->dt, n, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "rope", .mode = CORE_MODE_VECTOR, .block_dim = p->dim, .nblocks = p->nblocks,
                          .ctx = p, .unit_begin = unit_begin, .unit_end = unit_end, .block = block,
                          .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs: 4 multiplications and 2 additions per pair of elements. */
static double flops(const void *pp)
{
  const struct rope *p = pp;
  return 3.0 * (double)p->T * p->Hh * p->D;
}

/*
 * Tolerance: two fp32 products and a sum per output (2e-6 relative, 1e-6 absolute where they
 * cancel) and one rounding to the type (half an ulp x 1.1).
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct rope *p = pp;
  double *X = op_decode(op_find_tensor(x, "x")), *O = op_decode(op_find_tensor(x, "out"));
  double *C = op_decode(op_find_tensor(x, "cos")), *S = op_decode(op_find_tensor(x, "sin"));
  uint32_t D = p->D, half = D / 2;
  size_t n = (size_t)p->T * p->Hh * D;
  double *ref = npu_xmalloc(n * sizeof *ref);
  for (size_t tk = 0; tk < p->T; tk++)
    for (size_t h = 0; h < p->Hh; h++) {
      const double *xr = X + (tk * p->Hh + h) * D;
      double *o = ref + (tk * p->Hh + h) * D;
      for (uint32_t i = 0; i < half; i++) {
        double c = C[tk * half + i], s = S[tk * half + i];
        o[i] = xr[i] * c - xr[i + half] * s;
        o[i + half] = xr[i + half] * c + xr[i] * s;
      }
    }
  double rtol = 0.55 * vx_ulp(p->dt) + 2e-6, atol = 1e-6;
  *max_err = op_compare(O, ref, n, atol, rtol);
  snprintf(summary, len, "rope %llux%ux%u %s (tiles %u tokens x %u heads): worst error %.3g of tolerance (atol %.3g, rtol %.3g)",
           (unsigned long long)p->T, p->Hh, D, npu_dtype_name(p->dt), p->Tt, p->Hb, *max_err, atol, rtol);
  free(X);
  free(O);
  free(C);
  free(S);
  free(ref);
  return *max_err <= 1;
}

const struct op_desc op_rope = {
    .name = "rope",
    .summary = "rotary position embedding (half rotation, cos/sin tables) on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct rope),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward is a rotation by -theta: the forward kernel with the sine negated, the same work",
            op__bwd_same},
};
