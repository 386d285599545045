/*
 * dequant_swiglu_quant.c - an out-of-tree npusim kernel: the MoE expert activation of W8A8
 * inference and int8 training, between the int8 gate-up and down grouped GEMMs (the shape of
 * CANN's DequantSwigluQuant):
 *
 *   h[r][c]   = x[r][c] * weight_scale[c] * act_scale[r]     x int32, the GEMM's accumulators
 *   y[r][c]   = silu(h[r][c]) * h[r][ffn + c]                 gate, then up (fused gate-up layout)
 *   scale[r]  = max(max_c |y[r][c]|, 1e-12) / 127
 *   q[r][c]   = int8(round(y[r][c] / scale[r]))
 *
 * x [rows, 2 ffn] int32, weight_scale [2 ffn] fp32 (per output channel of the GEMM), act_scale
 * [rows] fp32 (per token), q [rows, ffn] int8, scale [rows] fp32. One block is one row, dealt
 * to the vector cores round robin; per row, CopyIn (x row and its act_scale, double-buffered
 * queues), Compute (int32 -> fp32, the two scales, silu(g) u, ReduceMax of |y|, y / scale,
 * fp32 -> fp16 -> int8), CopyOut (q row and scale). weight_scale is loaded once per core. A row
 * must fit the UB: ffn up to about 4,000 on 910B (the planner says how far, naming --ffn).
 *
 * Build: make (pkg-config npusim-kernel); run:
 *   npusim kernel --load ./dequant_swiglu_quant.so dequant_swiglu_quant --rows 2048 --ffn 2048 --functional
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <npusim/kernel_api.h>

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens routed to the expert group)", NULL},
    {"ffn", OP_P_DIM, NULL, "output columns, a multiple of 64; the input has 2 ffn (gate, then up)", NULL},
};

struct plan {
  uint64_t rows;
  uint32_t ffn;
  int dim;
  uint64_t x, ws, as, q, scale;             /* GM */
  struct npk_que in, ain, out, sout, win;   /* queues (laid out; counters per unit) */
  uint64_t w, tmp, wsf, h16, red;           /* UB work buffers */
};

struct unit {
  struct npk_que in, ain, out, sout;
};

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  u->in = p->in;
  u->ain = p->ain;
  u->out = p->out;
  u->sout = p->sout;
  struct npk_que wq = p->win; /* weight_scale, once: fp32 already, kept in its buffer */
  uint64_t b = npk_alloc(t, &wq);
  vx_load(t, b, p->ws, NPU_DT_FP32, 1, 2 * p->ffn, 2 * p->ffn, 2 * p->ffn);
  npk_enque(t, &wq);
  npk_deque(t, &wq);
}

static void block(struct core_tp *t, void *ctx, uint64_t r)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  uint32_t F = p->ffn;

  /* CopyIn */
  uint64_t xb = npk_alloc(t, &u->in);
  vx_load(t, xb, p->x + r * 2 * F * 4, NPU_DT_INT32, 1, 2 * F, 2 * F, 2 * F);
  npk_enque(t, &u->in);
  uint64_t ab = npk_alloc(t, &u->ain);
  vx_load(t, ab, p->as + r * 4, NPU_DT_FP32, 1, 1, 1, 1);
  npk_enque(t, &u->ain);

  /* Compute: dequantize */
  xb = npk_deque(t, &u->in);
  vx_cast(t, p->w, NPU_DT_FP32, xb, NPU_DT_INT32, 2 * F);
  npk_free(t, &u->in);
  vx_bin(t, CORE_VEC_MUL, p->w, p->w, p->wsf, 2 * F);
  ab = npk_deque(t, &u->ain);
  struct core_vec v = vx_v(CORE_VEC_MULS, NPU_DT_FP32); /* times the token's scale, read from UB */
  v.dst = v.src0 = p->w;
  v.scalar_from_ub = true;
  v.scalar_ub = ab;
  vx_issue(t, v, 2 * F, VX_REP);
  npk_free(t, &u->ain);
  /* silu(g) * u into the gate half */
  uint64_t g = p->w, up = p->w + (uint64_t)F * 4;
  vx_sc(t, CORE_VEC_MULS, p->tmp, g, -1.0, F);
  vx_un(t, CORE_VEC_EXP, p->tmp, p->tmp, F);
  vx_sc(t, CORE_VEC_ADDS, p->tmp, p->tmp, 1.0, F);
  vx_bin(t, CORE_VEC_DIV, p->tmp, g, p->tmp, F);
  vx_bin(t, CORE_VEC_MUL, g, p->tmp, up, F);
  /* per-token int8 */
  vx_un(t, CORE_VEC_ABS, p->tmp, g, F);
  vx_reduce_n(t, CORE_VEC_REDUCE_MAX, p->red, p->tmp, F);
  vx_sc(t, CORE_VEC_MAXS, p->red, p->red, 1e-12, 1);
  uint64_t sb = npk_alloc(t, &u->sout);
  vx_sc(t, CORE_VEC_MULS, sb, p->red, 1.0 / 127, 1);
  vx_un(t, CORE_VEC_RECIP, p->red + 32, sb, 1);
  npk_enque(t, &u->sout);
  v.dst = v.src0 = g;
  v.scalar_ub = p->red + 32;
  vx_issue(t, v, F, VX_REP);
  vx_cast(t, p->h16, NPU_DT_FP16, g, NPU_DT_FP32, F);
  uint64_t qb = npk_alloc(t, &u->out);
  vx_cast(t, qb, NPU_DT_INT8, p->h16, NPU_DT_FP16, F);
  npk_enque(t, &u->out);

  /* CopyOut */
  qb = npk_deque(t, &u->out);
  vx_store(t, p->q + r * F, qb, NPU_DT_INT8, 1, F, F, F);
  npk_free(t, &u->out);
  sb = npk_deque(t, &u->sout);
  vx_store(t, p->scale + r * 4, sb, NPU_DT_FP32, 1, 1, 1, 1);
  npk_free(t, &u->sout);
}

/* The UB layout for ffn F with an input queue of depth in_depth; 0 or NPU_ENOFIT. */
static int layout(struct plan *p, const struct arch_chip *chip, uint64_t F, int in_depth, struct npu_diag *diag)
{
  struct npk_pipe pipe;
  npk_pipe_init(&pipe, chip);
  npk_pipe_que(&pipe, &p->in, NPK_VECIN, in_depth, 2 * F * 4);
  npk_pipe_que(&pipe, &p->ain, NPK_VECIN, 2, 32);
  npk_pipe_que(&pipe, &p->win, NPK_VECIN, 1, 2 * F * 4);
  npk_pipe_que(&pipe, &p->out, NPK_VECOUT, 2, F);
  npk_pipe_que(&pipe, &p->sout, NPK_VECOUT, 2, 32);
  p->wsf = p->win.base;
  p->w = npk_pipe_buf(&pipe, MEM_UB, 2 * F * 4);
  p->tmp = npk_pipe_buf(&pipe, MEM_UB, F * 4);
  p->h16 = npk_pipe_buf(&pipe, MEM_UB, F * 2);
  p->red = npk_pipe_buf(&pipe, MEM_UB, 64);
  return npk_pipe_check(&pipe, "--ffn", diag);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct plan *p = pp;
  memset(p, 0, sizeof *p);
  p->rows = op_u(d, a, "rows");
  uint64_t F = op_u(d, a, "ffn");
  if (F % VX_REP || F > 65536)
    return npu_diag_set(diag, "command line", 0, "--ffn", "a multiple of 64 up to 65536, got %llu",
                        (unsigned long long)F), NPU_EINVAL;
  p->ffn = (uint32_t)F;
  if (layout(p, chip, F, 2, diag) && layout(p, chip, F, 1, diag)) return NPU_ENOFIT;
  p->dim = vx_dim(chip, p->rows);
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct plan *p = pp;
  uint64_t F = p->ffn;
  struct op_tensor *xi = op_tensor(x, "x", NPU_DT_INT32, p->rows * 2 * F, OP_INIT_NONE);
  struct op_tensor *ws = op_tensor(x, "weight_scale", NPU_DT_FP32, 2 * F, OP_INIT_POSITIVE);
  struct op_tensor *as = op_tensor(x, "act_scale", NPU_DT_FP32, p->rows, OP_INIT_POSITIVE);
  if (op_functional(x)) { /* accumulators of a K = 4096 int8 GEMM: about +-2^15; scales near 1/2^13 */
    for (uint64_t i = 0; i < xi->count; i++) fmt_encode(NPU_DT_INT32, xi->host, i, floor((2 * op_rand(x) - 1) * 32768));
    for (uint64_t i = 0; i < ws->count; i++) fmt_encode(NPU_DT_FP32, ws->host, i, (0.5 + op_rand(x)) / 4096);
    for (uint64_t i = 0; i < as->count; i++) fmt_encode(NPU_DT_FP32, as->host, i, (0.5 + op_rand(x)) / 2);
  }
  p->x = xi->addr;
  p->ws = ws->addr;
  p->as = as->addr;
  p->q = op_tensor(x, "q", NPU_DT_INT8, p->rows * F, OP_INIT_NONE)->addr;
  p->scale = op_tensor(x, "scale", NPU_DT_FP32, p->rows, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "dequant_swiglu_quant", .mode = CORE_MODE_VECTOR, .block_dim = p->dim,
                          .nblocks = p->rows, .ctx = p, .unit_begin = unit_begin, .block = block,
                          .unit_ctx_bytes = sizeof(struct unit)};
  op_kernel(x, &k);
}

/* Model FLOPs per output: two scale multiplies on each of two inputs, silu (4), the product,
 * abs, max, divide. */
static double flops(const void *pp)
{
  const struct plan *p = pp;
  return 12.0 * (double)p->rows * p->ffn;
}

/* The host reference in double; codes may differ by one (fp32 exp and division, the fp16 step
 * before int8), scales by 1e-5 relative. */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct plan *p = pp;
  size_t F = p->ffn, R = (size_t)p->rows;
  double *X = op_decode(op_find_tensor(x, "x")), *W = op_decode(op_find_tensor(x, "weight_scale"));
  double *A = op_decode(op_find_tensor(x, "act_scale"));
  double *Q = op_decode(op_find_tensor(x, "q")), *S = op_decode(op_find_tensor(x, "scale"));
  double *y = malloc(F * sizeof *y), *rq = malloc(R * F * sizeof *rq), *rs = malloc(R * sizeof *rs);
  for (size_t r = 0; r < R; r++) {
    double amax = 0;
    for (size_t c = 0; c < F; c++) {
      double g = X[r * 2 * F + c] * W[c] * A[r], u = X[r * 2 * F + F + c] * W[F + c] * A[r];
      y[c] = g / (1 + exp(-g)) * u;
      amax = fmax(amax, fabs(y[c]));
    }
    rs[r] = fmax(amax, 1e-12) / 127;
    for (size_t c = 0; c < F; c++) rq[r * F + c] = nearbyint(y[c] / rs[r]);
  }
  double eq = op_compare(Q, rq, R * F, 1.01, 0), es = op_compare(S, rs, R, 0, 1e-5);
  *max_err = eq > es ? eq : es;
  snprintf(summary, len, "dequant_swiglu_quant %zux%zu: worst error %.3g of tolerance (codes %.3g of 1 code, scales "
           "%.3g of 1e-5)", R, F, *max_err, eq, es);
  free(X);
  free(W);
  free(A);
  free(Q);
  free(S);
  free(y);
  free(rq);
  free(rs);
  return *max_err <= 1;
}

/* Standing in for swiglu in a training step (model.kernels.swiglu): the backward of the built-in
 * swiglu's proxy, 5/3 of the rows (it reads x and dy, writes dx). */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  op_call_dim(&out[0], "rows", (int64_t)((op_call_u(fwd, "rows") * 5 + 2) / 3));
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

static const struct op_desc dequant_swiglu_quant = {
    .name = "dequant_swiglu_quant",
    .summary = "dequantize int32 accumulators (per-channel and per-token scales), SwiGLU, per-token int8 quantize",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct plan),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call with 5/3 of the rows (rounded)",
            "as the built-in swiglu: the backward reads x and dy and writes dx, 5/3 of the forward's rows of traffic", bwd},
};

NPUSIM_KERNEL_PLUGIN("dequant_swiglu_quant", &dequant_swiglu_quant)
