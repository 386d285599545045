/*
 * adamw.c - one AdamW step (Loshchilov & Hutter 2019, decoupled weight decay) on the vector
 * cores, with fp32 master weights and moments and a 16-bit copy of the parameters for the model:
 *   m = b1 m + (1 - b1) g
 *   v = b2 v + (1 - b2) g^2
 *   p = p - lr (m_hat / (sqrt(v_hat) + eps) + wd p),  m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)
 *   p16 = p rounded to bf16 (or fp16)
 * g in bf16, fp16 or fp32. p, m, v are updated in place; p16 is written out. The step's scalars
 * (1 - b1, lr / (1 - b1^t), 1 / (1 - b2^t), 1 - lr wd) are computed on the host, as an optimizer
 * passes them to its kernel.
 *
 * Tiling: the n elements are cut into tiles of E elements (a multiple of 256, as many as fit with
 * three load/compute/store slots; each slot holds p, m, v, g), dealt round robin to every vector
 * core. Per tile MTE2 loads the four tensors, V updates p, m, v in place and casts p into the g
 * area of the slot, MTE3 stores p, m, v and p16. 28 bytes per element move (bf16 g and p16), so the
 * step is HBM bound; the vector work is ~14 ops per element.
 *
 * Sources: AdamW (arXiv 1711.05101); PyTorch torch.optim.AdamW and Megatron-LM's distributed
 * optimizer (fp32 main params and moments, bf16 model params).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/vecops_int.h"

static const struct op_param params[] = {
    {"n", OP_P_DIM, NULL, "parameters", NULL},
    {"grad", OP_P_DTYPE, "bf16", "gradient type: bf16, fp16 or fp32", NULL},
    {"param", OP_P_DTYPE, "bf16", "type of the model's copy of the parameters: bf16 or fp16", NULL},
    {"lr", OP_P_REAL, "1e-3", "learning rate", NULL},
    {"b1", OP_P_REAL, "0.9", "first-moment decay", NULL},
    {"b2", OP_P_REAL, "0.999", "second-moment decay", NULL},
    {"eps", OP_P_REAL, "1e-8", "added to sqrt(v_hat)", NULL},
    {"wd", OP_P_REAL, "0.01", "decoupled weight decay", NULL},
    {"step", OP_P_DIM, "1", "step number t (bias correction)", NULL},
    {"tile", OP_P_INT, "0", "elements per tile (0: automatic)", NULL},
};

struct adamw {
  const struct arch_chip *chip;
  uint64_t n;
  enum npu_dtype gt, pt;        /* gradient, model-parameter types */
  uint32_t ges;
  double lr, b1, b2, eps, wd;
  uint64_t step;
  double c1, c2, decay;         /* lr / (1 - b1^t), 1 / (1 - b2^t), 1 - lr wd */
  uint32_t E;                   /* elements per tile */
  int slots, dim;
  uint64_t nblocks;
  uint64_t p, m, v, g, p16;     /* GM */
  double *p0, *m0, *v0, *g0;    /* functional: the inputs before the step, for the reference */
  uint64_t slot[VX_SLOTS_MAX], in_stride; /* p, m, v, g at slot + k * in_stride */
  uint64_t Gf, T1, T2;          /* fp32 work */
};

static uint64_t layout(struct adamw *a, uint32_t E, int slots, bool place)
{
  struct vx_layout l;
  memset(&l, 0, sizeof l);
  uint64_t fb = (uint64_t)E * 4;
  uint64_t base = vx_lay_slots(&l, a->chip, slots, 4, fb); /* g (<= 4 bytes) sits in the fourth input */
  bool f16 = a->ges == 2;
  int G = f16 ? vx_lay_buf(&l, fb, false) : VX_NOBUF;
  int T1 = vx_lay_buf(&l, fb, false), T2 = vx_lay_buf(&l, fb, false);
  int P = VX_SLOTIN(0), M = VX_SLOTIN(1), V = VX_SLOTIN(2), Gx = f16 ? G : VX_SLOTIN(3);
  vx_lay_pass(&l, T1, Gx, VX_NOBUF, 1);
  vx_lay_pass(&l, M, M, T1, 1);
  vx_lay_pass(&l, T2, Gx, Gx, 1);
  vx_lay_pass(&l, V, V, T2, 1);
  vx_lay_pass(&l, T2, V, VX_NOBUF, 1);
  vx_lay_pass(&l, T1, M, VX_NOBUF, 1);
  vx_lay_pass(&l, P, P, T1, 1);
  if (!place) return base + vx_lay_bound(&l);
  vx_lay_solve(&l, a->chip, base, vx_ub_bytes(a->chip));
  for (int s = 0; s < slots; s++) a->slot[s] = l.slot[s];
  a->in_stride = l.in_stride;
  a->Gf = G >= 0 ? l.addr[G] : 0;
  a->T1 = l.addr[T1];
  a->T2 = l.addr[T2];
  return l.end;
}

static int block_class(void *ctx, uint64_t b)
{
  const struct adamw *a = ctx;
  return b == a->nblocks - 1 && a->n % a->E ? 1 : 0;
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct adamw *a = ctx;
  vx_unit(t)->stage = 0;
  vx_slots_begin(t, a->slots);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct adamw *a = ctx;
  vx_slots_end(t, a->slots);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct adamw *a = ctx;
  uint64_t i0 = b * a->E;
  uint32_t cnt = (uint32_t)vx_min64(a->E, a->n - i0);
  int s = (int)(vx_unit(t)->stage++ % (uint32_t)a->slots);
  uint64_t P = a->slot[s], M = P + a->in_stride, V = P + 2 * a->in_stride, Gs = P + 3 * a->in_stride;
  vx_load_begin(t, s);
  vx_load(t, P, a->p + i0 * 4, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_load(t, M, a->m + i0 * 4, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_load(t, V, a->v + i0 * 4, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_load(t, Gs, a->g + i0 * a->ges, a->gt, 1, cnt, cnt, cnt);
  vx_load_end(t, s);

  vx_compute_begin(t, s);
  uint64_t G = a->ges == 2 ? a->Gf : Gs;
  vx_cast(t, G, NPU_DT_FP32, Gs, a->gt, cnt);
  vx_sc(t, CORE_VEC_MULS, a->T1, G, 1 - a->b1, cnt); /* m = b1 m + (1 - b1) g */
  vx_sc(t, CORE_VEC_MULS, M, M, a->b1, cnt);
  vx_bin(t, CORE_VEC_ADD, M, M, a->T1, cnt);
  vx_bin(t, CORE_VEC_MUL, a->T2, G, G, cnt);         /* v = b2 v + (1 - b2) g^2 */
  vx_sc(t, CORE_VEC_MULS, a->T2, a->T2, 1 - a->b2, cnt);
  vx_sc(t, CORE_VEC_MULS, V, V, a->b2, cnt);
  vx_bin(t, CORE_VEC_ADD, V, V, a->T2, cnt);
  vx_sc(t, CORE_VEC_MULS, a->T2, V, a->c2, cnt);     /* sqrt(v_hat) + eps */
  vx_un(t, CORE_VEC_SQRT, a->T2, a->T2, cnt);
  vx_sc(t, CORE_VEC_ADDS, a->T2, a->T2, a->eps, cnt);
  vx_sc(t, CORE_VEC_MULS, a->T1, M, a->c1, cnt);     /* lr m_hat / (...) */
  vx_bin(t, CORE_VEC_DIV, a->T1, a->T1, a->T2, cnt);
  vx_sc(t, CORE_VEC_MULS, P, P, a->decay, cnt);      /* p (1 - lr wd) - ... */
  vx_bin(t, CORE_VEC_SUB, P, P, a->T1, cnt);
  vx_cast(t, Gs, a->pt, P, NPU_DT_FP32, cnt);
  vx_compute_end(t, s);

  vx_store_begin(t, s);
  vx_store(t, a->p + i0 * 4, P, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_store(t, a->m + i0 * 4, M, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_store(t, a->v + i0 * 4, V, NPU_DT_FP32, 1, cnt, cnt, cnt);
  vx_store(t, a->p16 + i0 * vx_es(a->pt), Gs, a->pt, 1, cnt, cnt, cnt);
  vx_store_end(t, s);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *ar, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct adamw *a = pp;
  memset(a, 0, sizeof *a);
  a->chip = chip;
  a->n = op_u(d, ar, "n");
  a->gt = op_dtype(d, ar, "grad");
  a->pt = op_dtype(d, ar, "param");
  a->lr = op_r(d, ar, "lr");
  a->b1 = op_r(d, ar, "b1");
  a->b2 = op_r(d, ar, "b2");
  a->eps = op_r(d, ar, "eps");
  a->wd = op_r(d, ar, "wd");
  a->step = op_u(d, ar, "step");
  int rc = vx_check_io(a->gt, "--grad", diag);
  if (rc) return rc;
  if (a->pt != NPU_DT_BF16 && a->pt != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--param", "the model's copy is bf16 or fp16, got %s",
                        npu_dtype_name(a->pt)), NPU_EUNSUPPORTED;
  if (a->b1 < 0 || a->b1 >= 1 || a->b2 < 0 || a->b2 >= 1)
    return npu_diag_set(diag, "command line", 0, a->b1 < 0 || a->b1 >= 1 ? "--b1" : "--b2", "must be in [0, 1)"),
           NPU_EINVAL;
  if (a->eps <= 0)
    return npu_diag_set(diag, "command line", 0, "--eps", "must be positive"), NPU_EINVAL;
  a->ges = vx_es(a->gt);
  a->c1 = a->lr / (1 - pow(a->b1, (double)a->step));
  a->c2 = 1 / (1 - pow(a->b2, (double)a->step));
  a->decay = 1 - a->lr * a->wd;
  uint64_t ub = vx_ub_bytes(chip), tile = op_u(d, ar, "tile");
  if (tile) {
    if (tile % 64 || tile > 65536)
      return npu_diag_set(diag, "command line", 0, "--tile", "a multiple of 64 up to 65536, got %llu",
                          (unsigned long long)tile), NPU_EINVAL;
    if (layout(a, (uint32_t)tile, 2, false) > ub)
      return npu_diag_set(diag, "command line", 0, "--tile", "tiles of %llu elements do not fit: UB needs %llu bytes, has %llu",
                          (unsigned long long)tile, (unsigned long long)layout(a, (uint32_t)tile, 2, false),
                          (unsigned long long)ub), NPU_ENOFIT;
    a->E = (uint32_t)tile;
  } else {
    uint32_t e = 256;
    while (e + 256 <= 16384 && layout(a, e + 256, 3, false) <= ub) e += 256;
    uint64_t per_core = ops_roundup(ops_ceil(a->n, (uint64_t)vx_cores(chip)), 256); /* every core busy */
    a->E = (uint32_t)(per_core < e ? per_core : e);
  }
  a->slots = layout(a, a->E, 3, false) <= ub ? 3 : 2;
  layout(a, a->E, a->slots, true);
  a->nblocks = ops_ceil(a->n, a->E);
  a->dim = vx_dim(chip, a->nblocks);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct adamw *a = pp;
  struct op_tensor *p = op_tensor(x, "p", NPU_DT_FP32, a->n, OP_INIT_UNIFORM);
  struct op_tensor *m = op_tensor(x, "m", NPU_DT_FP32, a->n, OP_INIT_UNIFORM);
  struct op_tensor *v = op_tensor(x, "v", NPU_DT_FP32, a->n, OP_INIT_POSITIVE);
  struct op_tensor *g = op_tensor(x, "g", a->gt, a->n, OP_INIT_UNIFORM);
  if (op_functional(x)) { /* the reference needs the inputs the step overwrites */
    for (uint64_t i = 0; i < a->n; i++) /* second moments of the size of squared gradients */
      fmt_encode(NPU_DT_FP32, v->host, i, 0.1 * fmt_decode(NPU_DT_FP32, v->host, i));
    a->p0 = op_decode(p);
    a->m0 = op_decode(m);
    a->v0 = op_decode(v);
    a->g0 = op_decode(g);
  }
  a->p = p->addr;
  a->m = m->addr;
  a->v = v->addr;
  a->g = g->addr;
  a->p16 = op_tensor(x, "p16", a->pt, a->n, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "adamw", .mode = CORE_MODE_VECTOR, .block_dim = a->dim, .nblocks = a->nblocks,
                          .ctx = a, .unit_begin = unit_begin, .unit_end = unit_end, .block = block,
                          .block_class = block_class,
                          .unit_ctx_bytes = sizeof(struct vx_unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per parameter: m 3, v 4, bias corrections 2, sqrt 1, + eps 1, divide 1, decay and
 * update 2. */
static double flops(const void *pp)
{
  const struct adamw *a = pp;
  return 14.0 * (double)a->n;
}

/*
 * Tolerances: p, m, v are fp32 results of a few fp32 operations each (within ~4 ulps: 1e-6
 * relative, 1e-7 absolute where terms cancel, the update lr m_hat / sqrt(v_hat) ~ 1e-2 being
 * exact to ~1e-8); p16 is p rounded once to its type (half an ulp x 1.1, plus 1e-6).
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct adamw *a = pp;
  double *P = op_decode(op_find_tensor(x, "p")), *M = op_decode(op_find_tensor(x, "m"));
  double *V = op_decode(op_find_tensor(x, "v")), *P16 = op_decode(op_find_tensor(x, "p16"));
  size_t n = a->n;
  double *rp = npu_xmalloc(n * sizeof *rp), *rm = npu_xmalloc(n * sizeof *rm), *rv = npu_xmalloc(n * sizeof *rv);
  double bc1 = 1 - pow(a->b1, (double)a->step), bc2 = 1 - pow(a->b2, (double)a->step);
  for (size_t i = 0; i < n; i++) {
    double g = a->g0[i];
    rm[i] = a->b1 * a->m0[i] + (1 - a->b1) * g;
    rv[i] = a->b2 * a->v0[i] + (1 - a->b2) * g * g;
    rp[i] = a->p0[i] - a->lr * (rm[i] / bc1 / (sqrt(rv[i] / bc2) + a->eps) + a->wd * a->p0[i]);
  }
  double e[4] = {op_compare(P, rp, n, 1e-7, 1e-6), op_compare(M, rm, n, 1e-7, 1e-6), op_compare(V, rv, n, 1e-9, 1e-6),
                 op_compare(P16, rp, n, 1e-6, 0.55 * vx_ulp(a->pt) + 1e-6)};
  *max_err = 0;
  for (int i = 0; i < 4; i++)
    if (e[i] > *max_err) *max_err = e[i];
  snprintf(summary, len, "adamw n=%llu g %s -> %s, step %llu: worst error %.3g of tolerance (p %.3g, m %.3g, v %.3g, p16 %.3g)",
           (unsigned long long)n, npu_dtype_name(a->gt), npu_dtype_name(a->pt), (unsigned long long)a->step, *max_err,
           e[0], e[1], e[2], e[3]);
  free(P);
  free(M);
  free(V);
  free(P16);
  free(rp);
  free(rm);
  free(rv);
  return *max_err <= 1;
}

static void release(void *pp)
{
  struct adamw *a = pp;
  free(a->p0);
  free(a->m0);
  free(a->v0);
  free(a->g0);
}

const struct op_desc op_adamw = {
    .name = "adamw",
    .summary = "one AdamW step: fp32 master weights and moments, 16-bit model copy, on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct adamw),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .release = release,
    .bwd = {OP_BWD_NONE, "the optimizer step is not differentiated", NULL, NULL},
};
