/*
 * norm.c - rms_norm (fused with the residual add) and layer_norm on the vector cores.
 *
 *   rms_norm    h = x + residual (written out), y = h / sqrt(mean(h^2) + eps) * gamma;
 *               without --residual, y = x / sqrt(mean(x^2) + eps) * gamma
 *   layer_norm  y = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance)
 *
 * over rows of `hidden` elements, fp16 / bf16 / fp32 in GM, computed in fp32 in the UB (bf16 has
 * no vector arithmetic on 910B; fp16 is widened too so that every type shares one accuracy).
 *
 * Tiling (vx_plan_rows, ops/vecops_int.h): tiles of R whole rows, R chosen for ~32 KiB of input
 * per tile without leaving vector cores idle, with three load/compute/store slots when they fit,
 * else two. gamma (and beta) stay resident in the UB. The tile's outputs (h, y) are cast back
 * into its own input slot and stored from there, so a slot is one buffer per input and the next
 * load into it waits for its store. A row too long for the UB is cut into chunks walked twice:
 * pass 1 accumulates the sum of squares (rms_norm; it also writes h) or the sum and the sum of
 * squares (layer_norm: var = E[x^2] - mean^2), pass 2 reloads the chunk (h, or x) with the
 * chunk's gamma (and beta) and normalises. In chunked rms_norm, y is computed from the stored h
 * (rounded to the type), as a consumer of h would see it.
 *
 * Pipeline per tile: MTE2 loads x (and residual) into a slot; V casts to fp32, adds, squares,
 * folds each row to 64 lanes with a pairwise tree of whole repeats, reduces the rows to a dense
 * vector, computes rstd = rsqrt(ms / hidden + eps) for all rows at once, broadcasts it with one
 * Brcb per 8 rows, scales the rows and multiplies by gamma, casts back into the slot; MTE3 stores
 * h and y. Slots rotate, so tile i+1 loads while tile i computes and tile i-1 stores.
 *
 * Sources: RMSNorm (Zhang & Sennrich 2019), LayerNorm (Ba et al. 2016); the CANN AddRmsNorm and
 * LayerNorm kernels' structure (fp32 compute of 16-bit inputs, resident gamma, row chunking).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param rms_params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"hidden", OP_P_DIM, NULL, "row length", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x, residual, gamma, h and y: fp16, bf16 or fp32", NULL},
    {"eps", OP_P_REAL, "1e-6", "added to the mean square", NULL},
    {"residual", OP_P_BOOL, "true", "fuse h = x + residual (h written out, y normalises h)", NULL},
    {"tile_rows", OP_P_INT, "0", "rows per tile (0: automatic)", NULL},
    {"tile_cols", OP_P_INT, "0", "columns per tile: fewer than hidden cuts rows into chunks (0: automatic)", NULL},
};

static const struct op_param ln_params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"hidden", OP_P_DIM, NULL, "row length", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x, gamma, beta and y: fp16, bf16 or fp32", NULL},
    {"eps", OP_P_REAL, "1e-5", "added to the variance", NULL},
    {"tile_rows", OP_P_INT, "0", "rows per tile (0: automatic)", NULL},
    {"tile_cols", OP_P_INT, "0", "columns per tile: fewer than hidden cuts rows into chunks (0: automatic)", NULL},
};

#define ID_PASS VX_ID_AUX /* MTE3 -> MTE2: chunked rms_norm's h is in GM before pass 2 reads it */

struct norm {
  const struct arch_chip *chip;
  bool layer;                 /* layer_norm, else rms_norm */
  bool res;                   /* rms_norm: fused residual add */
  uint64_t rows;
  uint32_t H;                 /* hidden */
  enum npu_dtype dt;
  uint32_t es;                /* bytes per element of dt */
  double eps;
  struct vx_rowplan rp;
  int dim;
  uint64_t x, r, g, b, y, h;  /* GM tensors */
  /* UB layout (bytes) */
  uint64_t slot[VX_SLOTS_MAX];/* slot bases: input k at slot + k * in_stride */
  uint64_t in_stride;
  uint64_t F, W;              /* fp32 work tiles (0 when not needed) */
  uint64_t G, B;              /* resident gamma (rms 16-bit: native; else fp32) and beta (fp32) */
  uint64_t acc;               /* per-row 64-lane partial sums, R x 256 */
  uint64_t T1, T2, A1, A2;    /* chunked: a chunk's folded partials and the row's running ones */
  uint64_t sv1, sv2, tmp;     /* dense per-row statistics */
  uint64_t bc1, bc2;          /* their Brcb broadcasts, a block per row */
};

/*
 * Lay the UB out for R rows of stride rs with `slots` slots: the slots, then the work tiles,
 * resident gamma/beta and the Brcb blocks placed by vx_lay_solve against the kernel's main
 * passes (when `place`), then small per-row vectors. Returns the bytes needed (an upper bound
 * when not placing).
 */
static uint64_t norm_layout(struct norm *n, uint32_t R, uint32_t rs, int slots, bool chunked, bool place)
{
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t ib = (uint64_t)R * rs * n->es, fb = (uint64_t)R * rs * 4, bcb = ops_roundup(ops_roundup(R, 8) * 32ull, 512); /* bc2 in bc1's bank groups */
  int nin = chunked ? (n->layer ? 3 : 2) : (n->layer ? 1 : (n->res ? 2 : 1));
  uint64_t base = vx_lay_slots(&l, n->chip, slots, nin, ib);
  bool f16 = n->es == 2;
  bool need_w = f16 || chunked || n->layer || !n->res;
  int F = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int W = need_w ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int G = VX_NOBUF, B = VX_NOBUF;
  if (!chunked) {
    G = vx_lay_buf(&l, (uint64_t)rs * (n->layer || !f16 ? 4 : n->es), false);
    if (n->layer) B = vx_lay_buf(&l, (uint64_t)rs * 4, false);
  }
  int BC = vx_lay_buf(&l, 2 * bcb, true);
  int X = VX_SLOTIN(0), Rs = VX_SLOTIN(1), Xf = f16 ? F : X;
  if (n->layer) {
    vx_lay_pass(&l, W, Xf, BC, 1);  /* x - mean */
    vx_lay_pass(&l, Xf, W, W, 1);   /* squares */
    vx_lay_pass(&l, f16 ? X : Xf, Xf, VX_NOBUF, 0.5); /* their fold */
    vx_lay_pass(&l, Xf, W, BC, 1);  /* * rstd */
    vx_lay_pass(&l, W, Xf, G, 1);   /* * gamma */
    vx_lay_pass(&l, Xf, W, B, 1);   /* + beta */
  } else if (f16) {
    if (n->res) vx_lay_pass(&l, F, F, W, 1);
    vx_lay_pass(&l, W, F, F, 1);
    vx_lay_pass(&l, W, W, VX_NOBUF, 0.5);
    vx_lay_pass(&l, F, F, BC, 1);
    vx_lay_pass(&l, F, F, W, 1);
  } else {
    if (n->res) vx_lay_pass(&l, X, X, Rs, 1);
    vx_lay_pass(&l, n->res ? Rs : W, X, X, 1);
    vx_lay_pass(&l, n->res ? Rs : X, X, BC, 1);
    if (!chunked) vx_lay_pass(&l, n->res ? Rs : X, n->res ? Rs : X, G, 1);
  }
  uint64_t small = (uint64_t)R * VX_REP_BYTES + 4 * VX_REP_BYTES + 3 * ops_roundup((uint64_t)R * 4, VX_REP_BYTES);
  if (!place) return base + vx_lay_bound(&l) + small;
  vx_lay_solve(&l, n->chip, base, vx_ub_bytes(n->chip) - small);
  for (int s = 0; s < slots; s++) n->slot[s] = l.slot[s];
  n->in_stride = l.in_stride;
  n->F = F >= 0 ? l.addr[F] : 0;
  n->W = W >= 0 ? l.addr[W] : 0;
  n->G = G >= 0 ? l.addr[G] : 0;
  n->B = B >= 0 ? l.addr[B] : 0;
  n->bc1 = l.addr[BC];
  n->bc2 = n->bc1 + bcb;
  struct vx_ub u = {l.end};
  n->acc = vx_take(&u, (uint64_t)R * VX_REP_BYTES);
  n->T1 = vx_take(&u, VX_REP_BYTES);
  n->T2 = vx_take(&u, VX_REP_BYTES);
  n->A1 = vx_take(&u, VX_REP_BYTES);
  n->A2 = vx_take(&u, VX_REP_BYTES);
  uint64_t vb = ops_roundup((uint64_t)R * 4, VX_REP_BYTES);
  n->sv1 = vx_take(&u, vb);
  n->sv2 = vx_take(&u, vb);
  n->tmp = vx_take(&u, vb);
  NPU_ASSERT(u.off <= vx_ub_bytes(n->chip));
  return u.off;
}

static uint64_t norm_need(const void *ctx, uint32_t R, uint32_t rs, int slots, bool chunked)
{
  struct norm n = *(const struct norm *)ctx;
  return norm_layout(&n, R, rs, slots, chunked, false);
}

static int block_class(void *ctx, uint64_t b)
{
  const struct norm *n = ctx;
  return !n->rp.chunked && b == n->rp.tiles - 1 && n->rows % n->rp.R ? 1 : 0;
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct norm *n = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, n->rp.slots);
  if (n->rp.chunked) return;
  /* resident gamma (and beta): 16-bit layer_norm loads them into W and widens them once */
  uint32_t rs = n->rp.rs;
  bool widen = n->layer && n->es == 2;
  uint64_t gdst = widen ? n->W : n->G, bdst = widen ? n->W + (uint64_t)rs * 2 : n->B;
  vx_load(t, gdst, n->g, n->dt, 1, n->H, n->H, n->H);
  if (n->layer) vx_load(t, bdst, n->b, n->dt, 1, n->H, n->H, n->H);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, VX_ID_INIT);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, VX_ID_INIT);
  if (widen) {
    vx_cast(t, n->G, NPU_DT_FP32, gdst, n->dt, rs);
    vx_cast(t, n->B, NPU_DT_FP32, bdst, n->dt, rs);
  }
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct norm *n = ctx;
  vx_slots_end(t, n->rp.slots);
}

/* v = rsqrt(v / hidden + eps) over the n dense statistics at v. */
static void rstd_of(struct core_tp *t, const struct norm *n, uint64_t v, uint32_t cnt)
{
  vx_sc(t, CORE_VEC_MULS, v, v, 1.0 / n->H, cnt);
  vx_sc(t, CORE_VEC_ADDS, v, v, n->eps, cnt);
  vx_un(t, CORE_VEC_RSQRT, v, v, cnt);
}

/* A = T (first chunk) or A += T over its valid lanes. */
static void accumulate(struct core_tp *t, uint64_t A, uint64_t T, uint32_t lanes, bool first)
{
  if (first)
    vx_un(t, CORE_VEC_COPY, A, T, VX_REP);
  else
    vx_bin(t, CORE_VEC_ADD, A, A, T, lanes);
}

/* ------------------------------------------------------------------ rms_norm */

static void rms_rows(struct core_tp *t, struct norm *n, uint64_t b)
{
  uint32_t R = n->rp.R, rs = n->rp.rs, H = n->H, rb = rs * 4;
  uint64_t r0 = b * R, goff = r0 * H * n->es;
  uint32_t nr = (uint32_t)vx_min64(R, n->rows - r0);
  uint64_t cnt = (uint64_t)nr * rs;
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)n->rp.slots);
  uint64_t X = n->slot[s], Rs = X + n->in_stride;
  vx_load_begin(t, s);
  vx_load(t, X, n->x + goff, n->dt, nr, H, H, rs);
  if (n->res) vx_load(t, Rs, n->r + goff, n->dt, nr, H, H, rs);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  uint64_t Hf, Sq;
  if (n->es == 4) {
    Hf = X;
    if (n->res) vx_bin(t, CORE_VEC_ADD, X, X, Rs, cnt);
    Sq = n->res ? Rs : n->W;
  } else {
    Hf = n->F;
    vx_cast(t, n->F, NPU_DT_FP32, X, n->dt, cnt);
    if (n->res) {
      vx_cast(t, n->W, NPU_DT_FP32, Rs, n->dt, cnt);
      vx_bin(t, CORE_VEC_ADD, n->F, n->F, n->W, cnt);
      vx_cast(t, X, n->dt, n->F, NPU_DT_FP32, cnt);
    }
    Sq = n->W;
  }
  vx_bin(t, CORE_VEC_MUL, Sq, Hf, Hf, cnt);
  /* 16-bit: the fold's first level goes to a free input slot, later ones alternate with Sq */
  uint64_t free_in = n->res ? Rs : X;
  vx_rowred(t, CORE_VEC_ADD, n->sv1, Sq, rb, nr, H, n->acc, n->es == 2 ? free_in : Sq, n->es == 2 ? Sq : VX_NOADDR);
  rstd_of(t, n, n->sv1, nr);
  vx_brcb(t, n->bc1, n->sv1, nr);
  uint64_t Y = n->res ? Rs : X;
  if (n->es == 4) {
    vx_rows(t, CORE_VEC_MUL, vx_full(Y, rb), vx_full(Hf, rb), vx_rowb(n->bc1), nr, H);
    vx_rows(t, CORE_VEC_MUL, vx_full(Y, rb), vx_full(Y, rb), vx_colv(n->G), nr, H);
  } else {
    vx_cast(t, n->W, NPU_DT_FP32, n->G, n->dt, rs); /* gamma, widened once per tile */
    vx_rows(t, CORE_VEC_MUL, vx_full(n->F, rb), vx_full(n->F, rb), vx_rowb(n->bc1), nr, H);
    vx_rows(t, CORE_VEC_MUL, vx_full(n->F, rb), vx_full(n->F, rb), vx_colv(n->W), nr, H);
    vx_cast(t, Y, n->dt, n->F, NPU_DT_FP32, cnt);
  }
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  if (n->res) vx_store(t, n->h + goff, X, n->dt, nr, H, H, rs);
  vx_store(t, n->y + goff, Y, n->dt, nr, H, H, rs);
  vx_store_end(t, s);
}

static void rms_chunked(struct core_tp *t, struct norm *n, uint64_t row)
{
  uint32_t C = n->rp.C, H = n->H, slots = (uint32_t)n->rp.slots;
  uint64_t goff = row * H;
  for (uint32_t j = 0; j < n->rp.nchunk; j++) { /* pass 1: h, sum of squares */
    uint32_t c0 = j * C, cn = H - c0 < C ? H - c0 : C;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = n->slot[s], Rs = X + n->in_stride, e = (goff + c0) * n->es;
    vx_load_begin(t, s);
    vx_load(t, X, n->x + e, n->dt, 1, cn, H, cn);
    if (n->res) vx_load(t, Rs, n->r + e, n->dt, 1, cn, H, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    uint64_t Hf, Sq;
    if (n->es == 4) {
      Hf = X;
      if (n->res) vx_bin(t, CORE_VEC_ADD, X, X, Rs, cn);
      Sq = n->res ? Rs : n->W;
    } else {
      Hf = n->F;
      vx_cast(t, n->F, NPU_DT_FP32, X, n->dt, cn);
      if (n->res) {
        vx_cast(t, n->W, NPU_DT_FP32, Rs, n->dt, cn);
        vx_bin(t, CORE_VEC_ADD, n->F, n->F, n->W, cn);
        vx_cast(t, X, n->dt, n->F, NPU_DT_FP32, cn);
      }
      Sq = n->W;
    }
    vx_bin(t, CORE_VEC_MUL, Sq, Hf, Hf, cn);
    uint64_t free_in = n->res ? Rs : X;
    vx_fold_row(t, CORE_VEC_ADD, n->T1, Sq, cn, n->es == 2 ? free_in : Sq, n->es == 2 ? Sq : VX_NOADDR);
    accumulate(t, n->A1, n->T1, cn < VX_REP ? cn : VX_REP, j == 0);
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    if (n->res) vx_store(t, n->h + e, X, n->dt, 1, cn, H, cn);
    vx_store_end(t, s);
  }
  vx_reduce(t, CORE_VEC_ADD, n->sv1, n->A1, 8, VX_REP, 1);
  rstd_of(t, n, n->sv1, 1);
  vx_brcb(t, n->bc1, n->sv1, 1);
  if (n->res) { /* h is re-read: its stores land before pass 2 loads */
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_PASS);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, ID_PASS);
  }
  for (uint32_t j = 0; j < n->rp.nchunk; j++) { /* pass 2: y = h * rstd * gamma */
    uint32_t c0 = j * C, cn = H - c0 < C ? H - c0 : C;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = n->slot[s], Gs = X + n->in_stride, e = (goff + c0) * n->es;
    vx_load_begin(t, s);
    vx_load(t, X, (n->res ? n->h : n->x) + e, n->dt, 1, cn, H, cn);
    vx_load(t, Gs, n->g + (uint64_t)c0 * n->es, n->dt, 1, cn, H, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    if (n->es == 4) {
      vx_rows(t, CORE_VEC_MUL, vx_full(X, 0), vx_full(X, 0), vx_one(n->bc1), 1, cn);
      vx_bin(t, CORE_VEC_MUL, X, X, Gs, cn);
    } else {
      vx_cast(t, n->F, NPU_DT_FP32, X, n->dt, cn);
      vx_cast(t, n->W, NPU_DT_FP32, Gs, n->dt, cn);
      vx_rows(t, CORE_VEC_MUL, vx_full(n->F, 0), vx_full(n->F, 0), vx_one(n->bc1), 1, cn);
      vx_bin(t, CORE_VEC_MUL, n->F, n->F, n->W, cn);
      vx_cast(t, X, n->dt, n->F, NPU_DT_FP32, cn);
    }
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store(t, n->y + e, X, n->dt, 1, cn, H, cn);
    vx_store_end(t, s);
  }
}

/* ------------------------------------------------------------------ layer_norm */

static void ln_rows(struct core_tp *t, struct norm *n, uint64_t b)
{
  uint32_t R = n->rp.R, rs = n->rp.rs, H = n->H, rb = rs * 4;
  uint64_t r0 = b * R, goff = r0 * H * n->es;
  uint32_t nr = (uint32_t)vx_min64(R, n->rows - r0);
  uint64_t cnt = (uint64_t)nr * rs;
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)n->rp.slots);
  uint64_t X = n->slot[s];
  vx_load_begin(t, s);
  vx_load(t, X, n->x + goff, n->dt, nr, H, H, rs);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  uint64_t Xf = n->es == 4 ? X : n->F;
  struct vx_opd Xd = vx_full(Xf, rb), Wd = vx_full(n->W, rb);
  vx_cast(t, Xf, NPU_DT_FP32, X, n->dt, cnt);
  vx_rowred(t, CORE_VEC_ADD, n->sv1, Xf, rb, nr, H, n->acc, n->W, n->es == 2 ? X : VX_NOADDR);
  vx_sc(t, CORE_VEC_MULS, n->sv1, n->sv1, 1.0 / H, nr);
  vx_brcb(t, n->bc1, n->sv1, nr);
  vx_rows(t, CORE_VEC_SUB, Wd, Xd, vx_rowb(n->bc1), nr, H); /* x - mean */
  vx_bin(t, CORE_VEC_MUL, Xf, n->W, n->W, cnt);
  /* the fold's first level goes to the (free) input slot when it is a separate buffer */
  vx_rowred(t, CORE_VEC_ADD, n->sv2, Xf, rb, nr, H, n->acc, Xf == X ? Xf : X, Xf == X ? VX_NOADDR : Xf);
  rstd_of(t, n, n->sv2, nr);
  vx_brcb(t, n->bc2, n->sv2, nr);
  vx_rows(t, CORE_VEC_MUL, Xd, Wd, vx_rowb(n->bc2), nr, H);
  vx_rows(t, CORE_VEC_MUL, Wd, Xd, vx_colv(n->G), nr, H);
  vx_rows(t, CORE_VEC_ADD, Xd, Wd, vx_colv(n->B), nr, H);
  vx_cast(t, X, n->dt, Xf, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, n->y + goff, X, n->dt, nr, H, H, rs);
  vx_store_end(t, s);
}

static void ln_chunked(struct core_tp *t, struct norm *n, uint64_t row)
{
  uint32_t C = n->rp.C, H = n->H, slots = (uint32_t)n->rp.slots;
  uint64_t goff = row * H;
  for (uint32_t j = 0; j < n->rp.nchunk; j++) { /* pass 1: sum and sum of squares */
    uint32_t c0 = j * C, cn = H - c0 < C ? H - c0 : C;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = n->slot[s];
    vx_load_begin(t, s);
    vx_load(t, X, n->x + (goff + c0) * n->es, n->dt, 1, cn, H, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    uint64_t Xf = n->es == 4 ? X : n->F;
    vx_cast(t, Xf, NPU_DT_FP32, X, n->dt, cn);
    uint32_t lanes = cn < VX_REP ? cn : VX_REP;
    vx_fold_row(t, CORE_VEC_ADD, n->T1, Xf, cn, n->W, n->es == 2 ? X : VX_NOADDR);
    vx_bin(t, CORE_VEC_MUL, n->W, Xf, Xf, cn);
    vx_fold_row(t, CORE_VEC_ADD, n->T2, n->W, cn, X, n->W); /* the squares are in W; x and its slot are free */
    accumulate(t, n->A1, n->T1, lanes, j == 0);
    accumulate(t, n->A2, n->T2, lanes, j == 0);
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store_end(t, s);
  }
  /* mean = sum / H; var = max(sumsq / H - mean^2, 0); rstd = rsqrt(var + eps) */
  vx_reduce(t, CORE_VEC_ADD, n->sv1, n->A1, 8, VX_REP, 1);
  vx_reduce(t, CORE_VEC_ADD, n->sv2, n->A2, 8, VX_REP, 1);
  vx_sc(t, CORE_VEC_MULS, n->sv1, n->sv1, 1.0 / H, 1);
  vx_sc(t, CORE_VEC_MULS, n->sv2, n->sv2, 1.0 / H, 1);
  vx_bin(t, CORE_VEC_MUL, n->tmp, n->sv1, n->sv1, 1);
  vx_bin(t, CORE_VEC_SUB, n->sv2, n->sv2, n->tmp, 1);
  vx_sc(t, CORE_VEC_MAXS, n->sv2, n->sv2, 0.0, 1);
  vx_sc(t, CORE_VEC_ADDS, n->sv2, n->sv2, n->eps, 1);
  vx_un(t, CORE_VEC_RSQRT, n->sv2, n->sv2, 1);
  vx_brcb(t, n->bc1, n->sv1, 1);
  vx_brcb(t, n->bc2, n->sv2, 1);
  for (uint32_t j = 0; j < n->rp.nchunk; j++) { /* pass 2: normalise with the chunk's gamma, beta */
    uint32_t c0 = j * C, cn = H - c0 < C ? H - c0 : C;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = n->slot[s], Gs = X + n->in_stride, Bs = X + 2 * n->in_stride, e = (goff + c0) * n->es;
    vx_load_begin(t, s);
    vx_load(t, X, n->x + e, n->dt, 1, cn, H, cn);
    vx_load(t, Gs, n->g + (uint64_t)c0 * n->es, n->dt, 1, cn, H, cn);
    vx_load(t, Bs, n->b + (uint64_t)c0 * n->es, n->dt, 1, cn, H, cn);
    vx_load_end(t, s);
    vx_compute_begin(t, s);
    struct vx_opd Wd = vx_full(n->W, 0);
    if (n->es == 4) {
      vx_rows(t, CORE_VEC_SUB, Wd, vx_full(X, 0), vx_one(n->bc1), 1, cn);
      vx_rows(t, CORE_VEC_MUL, Wd, Wd, vx_one(n->bc2), 1, cn);
      vx_bin(t, CORE_VEC_MUL, n->W, n->W, Gs, cn);
      vx_bin(t, CORE_VEC_ADD, X, n->W, Bs, cn);
    } else {
      vx_cast(t, n->F, NPU_DT_FP32, X, n->dt, cn);
      vx_rows(t, CORE_VEC_SUB, Wd, vx_full(n->F, 0), vx_one(n->bc1), 1, cn);
      vx_rows(t, CORE_VEC_MUL, Wd, Wd, vx_one(n->bc2), 1, cn);
      vx_cast(t, n->F, NPU_DT_FP32, Gs, n->dt, cn);
      vx_bin(t, CORE_VEC_MUL, n->W, n->W, n->F, cn);
      vx_cast(t, n->F, NPU_DT_FP32, Bs, n->dt, cn);
      vx_bin(t, CORE_VEC_ADD, n->F, n->W, n->F, cn);
      vx_cast(t, X, n->dt, n->F, NPU_DT_FP32, cn);
    }
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store(t, n->y + e, X, n->dt, 1, cn, H, cn);
    vx_store_end(t, s);
  }
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct norm *n = ctx;
  if (n->layer)
    (n->rp.chunked ? ln_chunked : ln_rows)(t, n, b);
  else
    (n->rp.chunked ? rms_chunked : rms_rows)(t, n, b);
}

/* ------------------------------------------------------------------ operator */

static int plan_common(struct norm *n, const struct op_desc *d, const struct op_args *a,
                       const struct arch_chip *chip, bool layer, struct npu_diag *diag)
{
  memset(n, 0, sizeof *n);
  n->chip = chip;
  n->layer = layer;
  n->res = !layer && op_u(d, a, "residual");
  n->eps = op_r(d, a, "eps");
  int rc = vx_row_args(d, a, "hidden", &n->rows, &n->H, &n->dt, &n->es, diag);
  if (rc) return rc;
  if (n->eps < 0)
    return npu_diag_set(diag, "command line", 0, "--eps", "must not be negative"), NPU_EINVAL;
  rc = vx_plan_rows(&n->rp, n->rows, n->H, n->es * (n->res ? 2 : 1), vx_cores(chip), vx_ub_bytes(chip),
                    op_u(d, a, "tile_rows"), op_u(d, a, "tile_cols"), norm_need, n, "--hidden", diag);
  if (rc) return rc;
  norm_layout(n, n->rp.R, n->rp.rs, n->rp.slots, n->rp.chunked, true);
  n->dim = vx_dim(chip, n->rp.tiles);
  return 0;
}

static int rms_plan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                    struct npu_diag *diag)
{
  return plan_common(p, d, a, chip, false, diag);
}

static int ln_plan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                   struct npu_diag *diag)
{
  return plan_common(p, d, a, chip, true, diag);
}

static void setup(void *p, struct op_exec *x)
{
  struct norm *n = p;
  uint64_t cnt = n->rows * n->H;
  n->x = op_tensor(x, "x", n->dt, cnt, OP_INIT_UNIFORM)->addr;
  if (n->res) n->r = op_tensor(x, "residual", n->dt, cnt, OP_INIT_UNIFORM)->addr;
  n->g = op_tensor(x, "gamma", n->dt, n->H, OP_INIT_UNIFORM)->addr;
  if (n->layer) n->b = op_tensor(x, "beta", n->dt, n->H, OP_INIT_UNIFORM)->addr;
  n->y = op_tensor(x, "y", n->dt, cnt, OP_INIT_NONE)->addr;
  if (n->res) n->h = op_tensor(x, "h", n->dt, cnt, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = n->layer ? "layer_norm" : "rms_norm", .mode = CORE_MODE_VECTOR,
                          .block_dim = n->dim, .nblocks = n->rp.tiles, .ctx = n, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per element: rms_norm square, sum, scale, gamma (+ the residual add);
 * layer_norm sum, subtract, square, sum, scale, gamma, beta. */
static double flops(const void *p)
{
  const struct norm *n = p;
  double per = n->layer ? 7 : n->res ? 5 : 4;
  return per * (double)n->rows * n->H;
}

/*
 * Tolerances: the kernel computes in fp32 (sums of hidden squares by a pairwise tree: a few fp32
 * ulps) and rounds once to the type, so y must be within half an ulp of the type (x 1.1) plus
 * 5e-6 relative; layer_norm adds 2e-5 absolute for outputs near zero after + beta (its terms are
 * O(1)), rms_norm 1e-6. h is the fp32 sum rounded once: half an ulp.
 */
static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct norm *n = p;
  const struct op_tensor *tx = op_find_tensor(x, "x"), *ty = op_find_tensor(x, "y");
  const struct op_tensor *tr = n->res ? op_find_tensor(x, "residual") : NULL, *th = n->res ? op_find_tensor(x, "h") : NULL;
  double *G = op_decode(op_find_tensor(x, "gamma")), *B = n->layer ? op_decode(op_find_tensor(x, "beta")) : NULL;
  size_t H = n->H;
  /* row by row: the reference of one row, the row's outputs decoded */
  double *hf = npu_xmalloc(H * sizeof *hf), *ry = npu_xmalloc(H * sizeof *ry), *got = npu_xmalloc(H * sizeof *got);
  double rtol = 0.55 * vx_ulp(n->dt) + 5e-6, atol = n->layer ? 2e-5 : 1e-6, ey = 0, eh = 0;
  for (size_t i = 0; i < n->rows; i++) {
    double s = 0, ss = 0;
    for (size_t c = 0; c < H; c++) {
      hf[c] = fmt_decode(n->dt, tx->host, i * H + c) + (tr ? fmt_decode(n->dt, tr->host, i * H + c) : 0);
      s += hf[c];
    }
    double mean = n->layer ? s / (double)H : 0;
    for (size_t c = 0; c < H; c++) ss += (hf[c] - mean) * (hf[c] - mean);
    double rstd = 1.0 / sqrt(ss / (double)H + n->eps);
    for (size_t c = 0; c < H; c++) {
      double h = n->res && n->rp.chunked ? fmt_round(n->dt, hf[c]) : hf[c];
      ry[c] = n->layer ? (h - mean) * rstd * G[c] + B[c] : h * rstd * G[c];
      got[c] = fmt_decode(n->dt, ty->host, i * H + c);
    }
    double e = op_compare(got, ry, H, atol, rtol);
    if (!(e <= ey)) ey = e;
    if (th) {
      for (size_t c = 0; c < H; c++) got[c] = fmt_decode(n->dt, th->host, i * H + c);
      e = op_compare(got, hf, H, 1e-7, 0.505 * vx_ulp(n->dt));
      if (!(e <= eh)) eh = e;
    }
  }
  *max_err = ey > eh || isnan(ey) ? ey : eh;
  snprintf(summary, len, "%s %llux%u %s%s, %s: worst error %.3g of tolerance (y %.3g: atol %.3g, rtol %.3g%s)",
           n->layer ? "layer_norm" : "rms_norm", (unsigned long long)n->rows, n->H, npu_dtype_name(n->dt),
           n->res ? " with residual" : "", n->rp.chunked ? "chunked rows" : "whole rows", *max_err, ey, atol, rtol,
           th ? "; h: half an ulp" : "");
  free(G);
  free(B);
  free(hf);
  free(ry);
  free(got);
  return *max_err <= 1;
}

const struct op_desc op_rms_norm = {
    .name = "rms_norm",
    .summary = "RMSNorm fused with the residual add, on the vector cores",
    .params = rms_params,
    .nparams = sizeof rms_params / sizeof rms_params[0],
    .plan_size = sizeof(struct norm),
    .plan = rms_plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward reads x and dy and writes dx (and the gamma gradient), as the fused forward reads x and "
            "the residual and writes h and y: the same traffic, costed by the forward kernel of the same shape",
            op__bwd_same},
};

const struct op_desc op_layer_norm = {
    .name = "layer_norm",
    .summary = "LayerNorm (gamma, beta) on the vector cores",
    .params = ln_params,
    .nparams = sizeof ln_params / sizeof ln_params[0],
    .plan_size = sizeof(struct norm),
    .plan = ln_plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward reads x and dy and writes dx (and the gamma and beta gradients): a row pass of about the "
            "forward's traffic, costed by the forward kernel of the same shape",
            op__bwd_same},
};
