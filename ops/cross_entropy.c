/*
 * cross_entropy.c - per-row cross-entropy loss from logits on the vector cores:
 *   loss[r] = logsumexp(x[r][:]) - x[r][label[r]] = -log_softmax(x[r])[label[r]]
 * logits [rows, vocab] fp16 / bf16 / fp32, labels int32 [rows], loss fp32 [rows].
 *
 * Vocabularies are large (32k to 256k: a bf16 row is 64 to 512 KiB), so a row is cut into
 * chunks walked once with an online logsumexp (Milakov & Gimelshein 2018): per chunk the row max
 * M' = max(M, max x) and the sum S = S e^(M - M') + sum e^(x - M'), all in fp32; at the end
 * lse = M + ln S. Small vocabularies take tiles of R whole rows instead (one "chunk" per tile,
 * the same code). Tiling by vx_plan_rows (ops/vecops_int.h): chunks as large as fit with two or
 * three load/compute slots, balanced over the row.
 *
 * The label's logit is fetched by an indexed copy (MTE2 gathers x[r][label[r]] with the label
 * read from the UB when the copy runs): the tile's labels are loaded just before its first chunk,
 * the scalar unit waits for them (MTE2 -> S) and computes the addresses, and one copy per row
 * gathers the logit into a 32-byte slot behind that chunk, so that it has landed long before the
 * row's end; there the vector unit widens the slots, compacts lane 0 of each with one reduction,
 * and writes lse - x[label] for the tile's rows. Per tile the logits are read once.
 *
 * Sources: online normaliser (arXiv 1805.02867); Megatron-LM / Liger fused cross entropy
 * (chunked logsumexp, gather of the target logit).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"vocab", OP_P_DIM, NULL, "vocabulary size (row length)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of the logits: fp16, bf16 or fp32", NULL},
    {"tile_rows", OP_P_INT, "0", "rows per tile (0: automatic)", NULL},
    {"tile_cols", OP_P_INT, "0", "columns per chunk: fewer than vocab cuts rows into chunks (0: automatic)", NULL},
};

#define ID_LBL VX_ID_AUX       /* MTE2 -> S: the tile's labels are in the UB */
#define ID_G (VX_ID_AUX + 1)   /* MTE2 -> V: gathered; V -> MTE2: gather slots free */
#define ID_LO (VX_ID_AUX + 2)  /* V -> MTE3: losses ready; MTE3 -> V: stored */

struct ce {
  const struct arch_chip *chip;
  uint64_t rows;
  uint32_t V;
  enum npu_dtype dt;
  uint32_t es;
  struct vx_rowplan rp;
  int dim;
  uint64_t x, lab, loss;        /* GM */
  int32_t *labels;              /* functional: the labels (host copy for the reference) */
  uint64_t slot[VX_SLOTS_MAX];  /* UB */
  uint64_t F, W, bc, acc, M, S, cm, tmp, Lb, Gx, Gf, xd, Lo;
};

static uint64_t ce_layout(struct ce *p, uint32_t R, uint32_t rs, int slots, bool chunked, bool place)
{
  (void)chunked;
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t ib = (uint64_t)R * rs * p->es, fb = (uint64_t)R * rs * 4;
  uint64_t base = vx_lay_slots(&l, p->chip, slots, 1, ib);
  bool f16 = p->es == 2;
  int F = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int W = vx_lay_buf(&l, fb, false);
  int BC = vx_lay_buf(&l, ops_roundup(R, 8) * 32ull, true);
  int Xf = f16 ? F : VX_SLOTIN(0);
  vx_lay_pass(&l, W, Xf, BC, 1);         /* x - max */
  vx_lay_pass(&l, W, Xf, VX_NOBUF, 0.5); /* fold of the maxima */
  vx_lay_pass(&l, Xf, W, VX_NOBUF, 0.5); /* fold of the sums */
  uint64_t vb = ops_roundup((uint64_t)R * 4, VX_REP_BYTES);
  uint64_t gx = ops_roundup((uint64_t)R * 32, VX_REP_BYTES) + VX_REP_BYTES;
  uint64_t small = (uint64_t)R * VX_REP_BYTES + 7 * vb + gx + 2 * gx + 256;
  if (!place) return base + vx_lay_bound(&l) + small;
  vx_lay_solve(&l, p->chip, base, vx_ub_bytes(p->chip) - small);
  for (int s = 0; s < slots; s++) p->slot[s] = l.slot[s];
  p->F = F >= 0 ? l.addr[F] : 0;
  p->W = l.addr[W];
  p->bc = l.addr[BC];
  struct vx_ub u = {l.end};
  p->acc = vx_take(&u, (uint64_t)R * VX_REP_BYTES);
  p->M = vx_take(&u, vb);
  p->S = vx_take(&u, vb);
  p->cm = vx_take(&u, vb);
  p->tmp = vx_take(&u, vb);
  p->xd = vx_take(&u, vb);
  p->Lo = vx_take(&u, vb);
  p->Lb = vx_take(&u, vb);
  p->Gx = vx_take(&u, gx);     /* a 32-byte slot per row (+ the cast's overreach) */
  p->Gf = vx_take(&u, 2 * gx); /* widened: row r's logit at 64 r */
  NPU_ASSERT(u.off <= vx_ub_bytes(p->chip));
  return u.off;
}

static uint64_t ce_need(const void *ctx, uint32_t R, uint32_t rs, int slots, bool chunked)
{
  struct ce p = *(const struct ce *)ctx;
  return ce_layout(&p, R, rs, slots, chunked, false);
}

static int block_class(void *ctx, uint64_t b)
{
  const struct ce *p = ctx;
  return !p->rp.chunked && b == p->rp.tiles - 1 && p->rows % p->rp.R ? 1 : 0;
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct ce *p = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, p->rp.slots);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_G);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_LO);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct ce *p = ctx;
  vx_slots_end(t, p->rp.slots);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_G);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_LO);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct ce *p = ctx;
  uint32_t R = p->rp.R, CH = p->rp.C, V = p->V, rs = p->rp.rs, slots = (uint32_t)p->rp.slots;
  uint64_t r0 = p->rp.chunked ? b : b * R;
  uint32_t nr = p->rp.chunked ? 1 : (uint32_t)vx_min64(R, p->rows - r0);
  bool f16 = p->es == 2;
  /* the tile's labels first: the scalar unit needs them for the gather at the end */
  vx_load(t, p->Lb, p->lab + r0 * 4, NPU_DT_INT32, 1, nr, nr, nr);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_S, ID_LBL);
  for (uint32_t j = 0; j < p->rp.nchunk; j++) {
    uint32_t c0 = j * CH, cn = V - c0 < CH ? V - c0 : CH;
    int s = (int)(vx_unit(t)->stage++ % slots);
    uint64_t X = p->slot[s], Xf = f16 ? p->F : X;
    vx_load_begin(t, s);
    vx_load(t, X, p->x + (r0 * V + c0) * p->es, p->dt, nr, cn, V, rs);
    vx_load_end(t, s);
    if (j == 0) {
      /* gather x[r][label[r]] into a 32-byte slot per row, behind the first chunk: the labels land
       * with it, and the gathered logits are in the UB long before the row's last chunk */
      core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_S, ID_LBL);
      core_scalar(t, VX_GATHER_ADDR_CYCLES * nr);
      core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_G);
      for (uint32_t r = 0; r < nr; r++) {
        struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true,
                               .index_ub = p->Lb + 4ull * r, .index_stride = p->es};
        cp.src = ops_tile(MEM_GM, CORE_ND, p->dt, p->x + (r0 + r) * V * p->es, 1, 1, 1);
        cp.dst = ops_tile(MEM_UB, CORE_ND, p->dt, p->Gx + 32ull * r, 1, 1, 1);
        core_copy_ex(t, &cp);
      }
    }
    vx_compute_begin(t, s);
    vx_cast(t, Xf, NPU_DT_FP32, X, p->dt, (uint64_t)nr * rs);
    vx_online_lse(t, Xf, p->W, f16 ? X : VX_NOADDR, rs * 4, nr, cn, p->M, p->S, p->cm, p->tmp, p->acc, p->bc, j == 0);
    vx_compute_end(t, s);
    vx_store_begin(t, s);
    vx_store_end(t, s);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_G);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_G);
  /* lane 0 of each slot, widened, compacted to a dense vector by one reduction */
  if (f16) {
    vx_cast(t, p->Gf, NPU_DT_FP32, p->Gx, p->dt, (uint64_t)nr * 16);
    vx_reduce(t, CORE_VEC_ADD, p->xd, p->Gf, 2, 1, nr);
  } else {
    vx_reduce(t, CORE_VEC_ADD, p->xd, p->Gx, 1, 1, nr);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_G);
  vx_un(t, CORE_VEC_LN, p->cm, p->S, nr);
  vx_bin(t, CORE_VEC_ADD, p->cm, p->cm, p->M, nr);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_LO);
  vx_bin(t, CORE_VEC_SUB, p->Lo, p->cm, p->xd, nr);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_LO);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_LO);
  vx_store(t, p->loss + r0 * 4, p->Lo, NPU_DT_FP32, 1, nr, nr, nr);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_LO);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct ce *p = pp;
  memset(p, 0, sizeof *p);
  p->chip = chip;
  int rc = vx_row_args(d, a, "vocab", &p->rows, &p->V, &p->dt, &p->es, diag);
  if (rc) return rc;
  rc = vx_plan_rows(&p->rp, p->rows, p->V, p->es, vx_cores(chip), vx_ub_bytes(chip), op_u(d, a, "tile_rows"),
                    op_u(d, a, "tile_cols"), ce_need, p, "--vocab", diag);
  if (rc) return rc;
  ce_layout(p, p->rp.R, p->rp.rs, p->rp.slots, p->rp.chunked, true);
  p->dim = vx_dim(chip, p->rp.tiles);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct ce *p = pp;
  struct op_tensor *in = op_tensor(x, "logits", p->dt, p->rows * p->V, OP_INIT_UNIFORM);
  if (op_functional(x)) { /* logits in [-8, 8): the running max matters */
    for (uint64_t i = 0; i < in->count; i++) fmt_encode(p->dt, in->host, i, 8 * fmt_decode(p->dt, in->host, i));
    p->labels = npu_xmalloc(p->rows * sizeof *p->labels);
    for (uint64_t r = 0; r < p->rows; r++) {
      int32_t l = (int32_t)(op_rand(x) * p->V);
      p->labels[r] = l < (int32_t)p->V ? l : (int32_t)p->V - 1;
    }
  }
  p->x = in->addr;
  p->lab = op_tensor_bytes(x, "labels", p->rows * 4, p->labels)->addr;
  p->loss = op_tensor(x, "loss", NPU_DT_FP32, p->rows, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "cross_entropy", .mode = CORE_MODE_VECTOR, .block_dim = p->dim,
                          .nblocks = p->rp.tiles, .ctx = p, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per logit: max, subtract, exp, sum. */
static double flops(const void *pp)
{
  const struct ce *p = pp;
  return 4.0 * (double)p->rows * p->V;
}

/*
 * Tolerance: fp32 compute of lse = M + ln S, S a pairwise sum of vocab terms (relative error a few
 * fp32 ulps, so ln S within ~1e-6 absolute), x[label] exact: 2e-5 absolute plus 2e-6 relative
 * on losses of about ln(vocab) + 8, for every input type (the logits are exact inputs).
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct ce *p = pp;
  double *X = op_decode(op_find_tensor(x, "logits")), *L = op_decode(op_find_tensor(x, "loss"));
  double *ref = npu_xmalloc(p->rows * sizeof *ref);
  for (uint64_t r = 0; r < p->rows; r++) {
    const double *xr = X + r * p->V;
    double m = -INFINITY, s = 0;
    for (uint32_t c = 0; c < p->V; c++) m = xr[c] > m ? xr[c] : m;
    for (uint32_t c = 0; c < p->V; c++) s += exp(xr[c] - m);
    ref[r] = m + log(s) - xr[p->labels[r]];
  }
  double atol = 2e-5, rtol = 2e-6;
  *max_err = op_compare(L, ref, p->rows, atol, rtol);
  snprintf(summary, len, "cross_entropy %llux%u %s, %s: worst error %.3g of tolerance (atol %.3g, rtol %.3g)",
           (unsigned long long)p->rows, p->V, npu_dtype_name(p->dt),
           p->rp.chunked ? "chunked rows" : "whole rows", *max_err, atol, rtol);
  free(X);
  free(L);
  free(ref);
  return *max_err <= 1;
}

static void release(void *pp)
{
  struct ce *p = pp;
  free(p->labels);
}

const struct op_desc op_cross_entropy = {
    .name = "cross_entropy",
    .summary = "per-row cross-entropy loss (online logsumexp over vocab chunks, gathered label logit)",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct ce),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .release = release,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward (softmax of the logits minus the one-hot label) is another online pass over the "
            "logits: costed as the forward pass of the same shape",
            op__bwd_same},
};
