/*
 * rms_norm_quant.c - an out-of-tree npusim kernel: RMSNorm fused with per-token int8
 * quantization, on the vector cores (the shape of CANN's AddRmsNormQuant / RmsNormQuant with a
 * dynamic per-token scale, as W8A8 inference and int8 training use before a quantized GEMM):
 *
 *   y[r][c]   = x[r][c] / sqrt(mean_c x[r][c]^2 + eps) * gamma[c]
 *   scale[r]  = max(max_c |y[r][c]|, 1e-12) / 127
 *   q[r][c]   = int8(round(y[r][c] / scale[r]))
 *
 * x and gamma bf16 or fp16, q int8, scale fp32. One block is one row; rows are dealt to the
 * vector cores round robin. Per row, as an Ascend C kernel writes it with a TPipe:
 *   CopyIn   (MTE2)  x row -> inQueue (double-buffered)
 *   Compute  (V)     widen to fp32, sum of squares (ReduceSum), rsqrt, times rstd and gamma,
 *                    |y| max (ReduceMax), the scale, y / scale, fp32 -> fp16 -> int8
 *                    (910B casts to int8 from fp16), into outQueue and scaleQueue
 *   CopyOut  (MTE3)  q row and its scale -> GM
 * gamma is loaded and widened once per core, in unit_begin.
 *
 * Build: make (pkg-config npusim-kernel); run:
 *   npusim kernel --load ./rms_norm_quant.so rms_norm_quant --rows 4096 --hidden 8192 --functional
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <npusim/kernel_api.h>

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"hidden", OP_P_DIM, NULL, "row length, a multiple of 64", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x and gamma: bf16 or fp16", NULL},
    {"eps", OP_P_REAL, "1e-6", "added to the mean square", NULL},
};

struct plan {
  uint64_t rows;
  uint32_t hidden;
  enum npu_dtype dt;
  double eps;
  int dim;
  uint64_t x, gamma, q, scale;        /* GM */
  struct npk_que in, out, sout, gin;  /* queues (laid out; counters per unit) */
  uint64_t xf, sq, gf, h16, red;      /* UB work buffers */
};

/* A launch unit's queues (its own counters). */
struct unit {
  struct npk_que in, out, sout;
};

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  u->in = p->in;
  u->out = p->out;
  u->sout = p->sout;
  struct npk_que g = p->gin;
  uint64_t gb = npk_alloc(t, &g);
  vx_load(t, gb, p->gamma, p->dt, 1, p->hidden, p->hidden, p->hidden);
  npk_enque(t, &g);
  gb = npk_deque(t, &g);
  vx_cast(t, p->gf, NPU_DT_FP32, gb, p->dt, p->hidden);
  npk_free(t, &g);
}

static void block(struct core_tp *t, void *ctx, uint64_t r)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  uint32_t H = p->hidden;
  uint32_t es = vx_es(p->dt);

  /* CopyIn */
  uint64_t xb = npk_alloc(t, &u->in);
  vx_load(t, xb, p->x + r * H * es, p->dt, 1, H, H, H);
  npk_enque(t, &u->in);

  /* Compute */
  xb = npk_deque(t, &u->in);
  vx_cast(t, p->xf, NPU_DT_FP32, xb, p->dt, H);
  npk_free(t, &u->in);
  vx_bin(t, CORE_VEC_MUL, p->sq, p->xf, p->xf, H);
  vx_reduce_n(t, CORE_VEC_REDUCE_SUM, p->red, p->sq, H);
  vx_sc(t, CORE_VEC_MULS, p->red, p->red, 1.0 / H, 1);
  vx_sc(t, CORE_VEC_ADDS, p->red, p->red, p->eps, 1);
  vx_un(t, CORE_VEC_RSQRT, p->red, p->red, 1);
  struct core_vec v = vx_v(CORE_VEC_MULS, NPU_DT_FP32); /* y = x * rstd (the scalar read from UB) */
  v.dst = v.src0 = p->xf;
  v.scalar_from_ub = true;
  v.scalar_ub = p->red;
  vx_issue(t, v, H, VX_REP);
  vx_bin(t, CORE_VEC_MUL, p->xf, p->xf, p->gf, H);
  vx_un(t, CORE_VEC_ABS, p->sq, p->xf, H);
  vx_reduce_n(t, CORE_VEC_REDUCE_MAX, p->red + 32, p->sq, H);
  vx_sc(t, CORE_VEC_MAXS, p->red + 32, p->red + 32, 1e-12, 1);
  uint64_t sb = npk_alloc(t, &u->sout);
  vx_sc(t, CORE_VEC_MULS, sb, p->red + 32, 1.0 / 127, 1); /* the scale */
  vx_un(t, CORE_VEC_RECIP, p->red + 64, sb, 1);
  npk_enque(t, &u->sout);
  v.scalar_ub = p->red + 64; /* y / scale */
  vx_issue(t, v, H, VX_REP);
  vx_cast(t, p->h16, NPU_DT_FP16, p->xf, NPU_DT_FP32, H);
  uint64_t qb = npk_alloc(t, &u->out);
  vx_cast(t, qb, NPU_DT_INT8, p->h16, NPU_DT_FP16, H);
  npk_enque(t, &u->out);

  /* CopyOut */
  qb = npk_deque(t, &u->out);
  vx_store(t, p->q + r * H, qb, NPU_DT_INT8, 1, H, H, H);
  npk_free(t, &u->out);
  sb = npk_deque(t, &u->sout);
  vx_store(t, p->scale + r * 4, sb, NPU_DT_FP32, 1, 1, 1, 1);
  npk_free(t, &u->sout);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct plan *p = pp;
  memset(p, 0, sizeof *p);
  p->rows = op_u(d, a, "rows");
  p->dt = op_dtype(d, a, "dtype");
  p->eps = op_r(d, a, "eps");
  if (p->dt != NPU_DT_BF16 && p->dt != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--dtype", "bf16 or fp16, got %s", npu_dtype_name(p->dt)), NPU_EINVAL;
  uint64_t h = op_u(d, a, "hidden");
  if (h % VX_REP || h > 65536)
    return npu_diag_set(diag, "command line", 0, "--hidden", "a multiple of 64 up to 65536, got %llu",
                        (unsigned long long)h), NPU_EINVAL;
  if (!(p->eps > 0))
    return npu_diag_set(diag, "command line", 0, "--eps", "must be positive"), NPU_EINVAL;
  p->hidden = (uint32_t)h;
  uint32_t es = vx_es(p->dt);
  struct npk_pipe pipe;
  npk_pipe_init(&pipe, chip);
  npk_pipe_que(&pipe, &p->in, NPK_VECIN, 2, (uint64_t)h * es);
  npk_pipe_que(&pipe, &p->gin, NPK_VECIN, 1, (uint64_t)h * es);
  npk_pipe_que(&pipe, &p->out, NPK_VECOUT, 2, h);
  npk_pipe_que(&pipe, &p->sout, NPK_VECOUT, 2, 32);
  p->xf = npk_pipe_buf(&pipe, MEM_UB, h * 4);
  p->sq = npk_pipe_buf(&pipe, MEM_UB, h * 4);
  p->gf = npk_pipe_buf(&pipe, MEM_UB, h * 4);
  p->h16 = npk_pipe_buf(&pipe, MEM_UB, h * 2);
  p->red = npk_pipe_buf(&pipe, MEM_UB, 96);
  int rc = npk_pipe_check(&pipe, "--hidden", diag);
  if (rc) return rc;
  p->dim = vx_dim(chip, p->rows);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct plan *p = pp;
  p->x = op_tensor(x, "x", p->dt, p->rows * p->hidden, OP_INIT_UNIFORM)->addr;
  p->gamma = op_tensor(x, "gamma", p->dt, p->hidden, OP_INIT_UNIFORM)->addr;
  p->q = op_tensor(x, "q", NPU_DT_INT8, p->rows * p->hidden, OP_INIT_NONE)->addr;
  p->scale = op_tensor(x, "scale", NPU_DT_FP32, p->rows, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "rms_norm_quant", .mode = CORE_MODE_VECTOR, .block_dim = p->dim,
                          .nblocks = p->rows, .ctx = p, .unit_begin = unit_begin, .block = block,
                          .unit_ctx_bytes = sizeof(struct unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per element: square, sum, normalise, gamma, abs, max, divide. */
static double flops(const void *pp)
{
  const struct plan *p = pp;
  return 7.0 * (double)p->rows * p->hidden;
}

/*
 * The host reference in double. Codes may differ by one where y / scale lies within rounding of
 * a half-integer (fp32 arithmetic, then the fp16 step before int8, as 910B casts): the check
 * allows 1 code (atol 1.01) and 1e-5 relative on the scales.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct plan *p = pp;
  size_t H = p->hidden, R = (size_t)p->rows;
  double *X = op_decode(op_find_tensor(x, "x")), *G = op_decode(op_find_tensor(x, "gamma"));
  double *Q = op_decode(op_find_tensor(x, "q")), *S = op_decode(op_find_tensor(x, "scale"));
  double *rq = malloc(R * H * sizeof *rq), *rs = malloc(R * sizeof *rs);
  for (size_t r = 0; r < R; r++) {
    double ss = 0, amax = 0;
    for (size_t c = 0; c < H; c++) ss += X[r * H + c] * X[r * H + c];
    double rstd = 1 / sqrt(ss / (double)H + p->eps);
    for (size_t c = 0; c < H; c++) amax = fmax(amax, fabs(X[r * H + c] * rstd * G[c]));
    rs[r] = fmax(amax, 1e-12) / 127;
    for (size_t c = 0; c < H; c++) rq[r * H + c] = nearbyint(X[r * H + c] * rstd * G[c] / rs[r]);
  }
  double eq = op_compare(Q, rq, R * H, 1.01, 0), es = op_compare(S, rs, R, 0, 1e-5);
  *max_err = eq > es ? eq : es;
  snprintf(summary, len, "rms_norm_quant %zux%zu %s: worst error %.3g of tolerance (codes %.3g of 1 code, scales %.3g "
           "of 1e-5)", R, H, npu_dtype_name(p->dt), *max_err, eq, es);
  free(X);
  free(G);
  free(Q);
  free(S);
  free(rq);
  free(rs);
  return *max_err <= 1;
}

/* In a training step this stands for rms_norm (model.kernels.rms_norm = "rms_norm_quant"): its
 * backward is the same call, as the built-in norm's proxy is. */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

static const struct op_desc rms_norm_quant = {
    .name = "rms_norm_quant",
    .summary = "RMSNorm fused with per-token int8 quantization (q int8, scale fp32 per row), vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct plan),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward of a norm reads x and dy and writes dx, the forward's traffic (x in, q out)", bwd},
};

NPUSIM_KERNEL_PLUGIN("rms_norm_quant", &rms_norm_quant)
