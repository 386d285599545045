/*
 * quant_int8.c - dynamic symmetric int8 quantization on the vector cores, per token (a scale per
 * row: W8A8 activations, CANN's DynamicQuant) or per channel (a scale per column: weights):
 *
 *   scale = max(max |x|, 1e-12) / 127     over the row (token) or the column (channel)
 *   q     = int8(round(x / scale))        fp32 arithmetic, through fp16 (910B casts to int8
 *                                         from fp16), round to nearest even
 *
 * x bf16, fp16 or fp32 [rows, cols]; q int8 [rows, cols]; scale fp32 [rows] or [cols].
 *
 * Per token, one kernel: a block is one row; rows are dealt to the vector cores. CopyIn (MTE2)
 * x row -> a double-buffered queue; Compute (V) widen, |x|, ReduceMax, the scale and its
 * reciprocal, x times it, fp32 -> fp16 -> int8; CopyOut (MTE3) the codes and the scale.
 * Per channel, two kernels. Kernel 1: a block is a strip of `strip` columns; chunks of rows of
 * the strip stream in (strided rows), widened, |x| and folded row-pairwise into the strip's
 * running maximum; at the end the strip's scales (to GM) and their reciprocals (to a workspace).
 * Kernel 2: a block is one row; each core loads the reciprocals once (unit start) and quantizes
 * its rows as per token, multiplying by the reciprocal row instead of a scalar.
 *
 * FLOPs: 3 per element (|x|, max, multiply). The host reference computes the scales in double
 * and the codes from them; codes may differ by one where x / scale is within rounding of a
 * half-integer (fp32, then fp16), scales by 1e-5 relative.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "ops/queue.h"
#include "ops/vec.h"

#define AMAX_MIN 1e-12

static const char *const pers[] = {"token", "channel", NULL};

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows (tokens)", NULL},
    {"cols", OP_P_DIM, NULL, "columns (channels), a multiple of 64", NULL},
    {"in", OP_P_DTYPE, "bf16", "input type: bf16, fp16 or fp32", NULL},
    {"per", OP_P_CHOICE, "token", "a scale per token (row) or per channel (column)", pers},
};

struct plan {
  uint64_t rows;
  uint32_t cols, es;
  enum npu_dtype dt;
  bool channel;
  int dim1, dim2;
  uint32_t strip, chunk;          /* per channel, kernel 1: columns per block, rows per chunk */
  uint64_t nstrips;
  uint64_t x, q, scale, inv;      /* GM */
  /* per row (per token, and kernel 2) */
  struct npk_que in, out, sout, iin;
  uint64_t xf, a, h16, red, invb;
  /* kernel 1 */
  struct npk_que cin, cout;
  uint64_t cf, acc;
};

struct unit {
  struct npk_que in, out, sout, cin, cout;
};

static void row_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  u->in = p->in;
  u->out = p->out;
  u->sout = p->sout;
  if (!p->channel) return;
  struct npk_que q = p->iin; /* the reciprocal scales, once per core */
  uint64_t b = npk_alloc(t, &q);
  vx_load(t, b, p->inv, NPU_DT_FP32, 1, p->cols, p->cols, p->cols);
  npk_enque(t, &q);
  b = npk_deque(t, &q);
  vx_un(t, CORE_VEC_COPY, p->invb, b, p->cols);
  npk_free(t, &q);
}

/* One row: per token with its own scale, per channel with the reciprocal row. */
static void row_block(struct core_tp *t, void *ctx, uint64_t r)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  uint32_t C = p->cols;
  uint64_t xb = npk_alloc(t, &u->in);
  vx_load(t, xb, p->x + r * C * p->es, p->dt, 1, C, C, C);
  npk_enque(t, &u->in);
  xb = npk_deque(t, &u->in);
  vx_cast(t, p->xf, NPU_DT_FP32, xb, p->dt, C);
  npk_free(t, &u->in);
  if (p->channel) {
    vx_bin(t, CORE_VEC_MUL, p->xf, p->xf, p->invb, C);
  } else {
    vx_un(t, CORE_VEC_ABS, p->a, p->xf, C);
    vx_reduce_n(t, CORE_VEC_REDUCE_MAX, p->red, p->a, C);
    vx_sc(t, CORE_VEC_MAXS, p->red, p->red, AMAX_MIN, 1);
    uint64_t sb = npk_alloc(t, &u->sout);
    vx_sc(t, CORE_VEC_MULS, sb, p->red, 1.0 / 127, 1);
    vx_un(t, CORE_VEC_RECIP, p->red + 32, sb, 1);
    npk_enque(t, &u->sout);
    vx_sc_ub(t, CORE_VEC_MULS, p->xf, p->xf, p->red + 32, C);
    sb = npk_deque(t, &u->sout);
    vx_store(t, p->scale + r * 4, sb, NPU_DT_FP32, 1, 1, 1, 1);
    npk_free(t, &u->sout);
  }
  vx_cast(t, p->h16, NPU_DT_FP16, p->xf, NPU_DT_FP32, C);
  uint64_t qb = npk_alloc(t, &u->out);
  vx_cast(t, qb, NPU_DT_INT8, p->h16, NPU_DT_FP16, C);
  npk_enque(t, &u->out);
  qb = npk_deque(t, &u->out);
  vx_store(t, p->q + r * C, qb, NPU_DT_INT8, 1, C, C, C);
  npk_free(t, &u->out);
}

static void strip_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  u->cin = p->cin;
  u->cout = p->cout;
}

/* Kernel 1 of per channel: the amax of a strip of columns over every row. */
static void strip_block(struct core_tp *t, void *ctx, uint64_t s)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  uint32_t c0 = (uint32_t)s * p->strip, w = p->cols - c0 < p->strip ? p->cols - c0 : p->strip;
  vx_dup(t, NPU_DT_FP32, p->acc, 0.0, w);
  for (uint64_t r0 = 0; r0 < p->rows; r0 += p->chunk) {
    uint32_t n = (uint32_t)(p->rows - r0 < p->chunk ? p->rows - r0 : p->chunk);
    uint64_t b = npk_alloc(t, &u->cin);
    vx_load(t, b, p->x + (r0 * p->cols + c0) * p->es, p->dt, n, w, p->cols, w);
    npk_enque(t, &u->cin);
    b = npk_deque(t, &u->cin);
    vx_cast(t, p->cf, NPU_DT_FP32, b, p->dt, (uint64_t)n * w);
    npk_free(t, &u->cin);
    vx_un(t, CORE_VEC_ABS, p->cf, p->cf, (uint64_t)n * w);
    vx_fold_rows(t, CORE_VEC_MAX, p->cf, n, w); /* row 0: the chunk's column maxima */
    vx_bin(t, CORE_VEC_MAX, p->acc, p->acc, p->cf, w);
  }
  vx_sc(t, CORE_VEC_MAXS, p->acc, p->acc, AMAX_MIN, w);
  uint64_t o = npk_alloc(t, &u->cout); /* scales, then reciprocals */
  vx_sc(t, CORE_VEC_MULS, o, p->acc, 1.0 / 127, w);
  vx_un(t, CORE_VEC_RECIP, o + (uint64_t)p->strip * 4, o, w);
  npk_enque(t, &u->cout);
  o = npk_deque(t, &u->cout);
  vx_store(t, p->scale + (uint64_t)c0 * 4, o, NPU_DT_FP32, 1, w, w, w);
  vx_store(t, p->inv + (uint64_t)c0 * 4, o + (uint64_t)p->strip * 4, NPU_DT_FP32, 1, w, w, w);
  npk_free(t, &u->cout);
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct plan *p = pp;
  memset(p, 0, sizeof *p);
  p->rows = op_u(d, a, "rows");
  uint64_t cols = op_u(d, a, "cols");
  p->dt = op_dtype(d, a, "in");
  p->channel = op_u(d, a, "per") == 1;
  if (p->dt != NPU_DT_BF16 && p->dt != NPU_DT_FP16 && p->dt != NPU_DT_FP32)
    return npu_diag_set(diag, "command line", 0, "--in", "bf16, fp16 or fp32, got %s", npu_dtype_name(p->dt)), NPU_EINVAL;
  if (cols % VX_REP || cols > 65536)
    return npu_diag_set(diag, "command line", 0, "--cols", "a multiple of 64 up to 65536, got %llu", (unsigned long long)cols),
           NPU_EINVAL;
  p->cols = (uint32_t)cols;
  p->es = vx_es(p->dt);
  struct npk_pipe pipe;
  npk_pipe_init(&pipe, chip);
  npk_pipe_que(&pipe, &p->in, NPK_VECIN, 2, cols * p->es);
  npk_pipe_que(&pipe, &p->out, NPK_VECOUT, 2, cols);
  npk_pipe_que(&pipe, &p->sout, NPK_VECOUT, 2, 32);
  if (p->channel) npk_pipe_que(&pipe, &p->iin, NPK_VECIN, 1, cols * 4);
  p->xf = npk_pipe_buf(&pipe, MEM_UB, cols * 4);
  p->a = p->channel ? 0 : npk_pipe_buf(&pipe, MEM_UB, cols * 4);
  p->h16 = npk_pipe_buf(&pipe, MEM_UB, cols * 2);
  p->red = npk_pipe_buf(&pipe, MEM_UB, 64);
  p->invb = p->channel ? npk_pipe_buf(&pipe, MEM_UB, cols * 4) : 0;
  int rc = npk_pipe_check(&pipe, "--cols", diag);
  if (rc) return rc;
  p->dim2 = vx_dim(chip, p->rows);
  if (p->channel) {
    /* strips of 64-column multiples, enough for every vector core when the columns allow */
    uint64_t per = (cols + (uint64_t)vx_cores(chip) - 1) / (uint64_t)vx_cores(chip);
    p->strip = (uint32_t)((per + VX_REP - 1) / VX_REP * VX_REP);
    if (p->strip > 1024) p->strip = 1024;
    p->chunk = 32768 / (p->strip * 4); /* a chunk's fp32 copy is 32 KiB */
    if (p->chunk < 1) p->chunk = 1;
    p->nstrips = (cols + p->strip - 1) / p->strip;
    struct npk_pipe k1;
    npk_pipe_init(&k1, chip);
    npk_pipe_que(&k1, &p->cin, NPK_VECIN, 2, (uint64_t)p->chunk * p->strip * p->es);
    npk_pipe_que(&k1, &p->cout, NPK_VECOUT, 1, (uint64_t)p->strip * 8);
    p->cf = npk_pipe_buf(&k1, MEM_UB, (uint64_t)p->chunk * p->strip * 4);
    p->acc = npk_pipe_buf(&k1, MEM_UB, (uint64_t)p->strip * 4);
    rc = npk_pipe_check(&k1, "--cols", diag);
    if (rc) return rc;
    p->dim1 = vx_dim(chip, p->nstrips);
  }
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct plan *p = pp;
  uint64_t n = p->rows * p->cols;
  p->x = op_tensor(x, "x", p->dt, n, OP_INIT_UNIFORM)->addr;
  p->q = op_tensor(x, "q", NPU_DT_INT8, n, OP_INIT_NONE)->addr;
  p->scale = op_tensor(x, "scale", NPU_DT_FP32, p->channel ? p->cols : p->rows, OP_INIT_NONE)->addr;
  if (p->channel) {
    p->inv = op_tensor(x, "inv_scale", NPU_DT_FP32, p->cols, OP_INIT_SCRATCH)->addr;
    struct core_kernel k1 = {.name = "quantize_int8_amax", .mode = CORE_MODE_VECTOR, .block_dim = p->dim1,
                             .nblocks = p->nstrips, .ctx = p, .unit_begin = strip_begin, .block = strip_block,
                             .unit_ctx_bytes = sizeof(struct unit)};
    op_kernel(x, &k1);
  }
  struct core_kernel k = {.name = "quantize_int8", .mode = CORE_MODE_VECTOR, .block_dim = p->dim2, .nblocks = p->rows,
                          .ctx = p, .unit_begin = row_begin, .block = row_block, .unit_ctx_bytes = sizeof(struct unit)};
  op_kernel(x, &k);
}

static double flops(const void *pp)
{
  const struct plan *p = pp;
  return 3.0 * (double)p->rows * p->cols;
}

static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct plan *p = pp;
  size_t R = (size_t)p->rows, C = p->cols, ns = p->channel ? C : R;
  double *X = op_decode(op_find_tensor(x, "x")), *Q = op_decode(op_find_tensor(x, "q"));
  double *S = op_decode(op_find_tensor(x, "scale"));
  double *rs = npu_xcalloc(ns, sizeof *rs), *rq = npu_xmalloc(R * C * sizeof *rq);
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < C; c++) {
      size_t k = p->channel ? c : r;
      rs[k] = fmax(rs[k], fabs(X[r * C + c]));
    }
  for (size_t k = 0; k < ns; k++) rs[k] = fmax(rs[k], AMAX_MIN) / 127;
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < C; c++) rq[r * C + c] = nearbyint(X[r * C + c] / rs[p->channel ? c : r]);
  double eq = op_compare(Q, rq, R * C, 1.01, 0), es = op_compare(S, rs, ns, 0, 1e-5);
  *max_err = eq > es ? eq : es;
  snprintf(summary, len, "quantize_int8 %zux%zu %s per %s: worst error %.3g of tolerance (codes %.3g of 1 code, scales "
           "%.3g of 1e-5)", R, C, npu_dtype_name(p->dt), p->channel ? "channel" : "token", *max_err, eq, es);
  free(X);
  free(Q);
  free(S);
  free(rs);
  free(rq);
  return *max_err <= 1;
}

const struct op_desc op_quantize_int8 = {
    .name = "quantize_int8",
    .summary = "dynamic symmetric int8 quantization per token or per channel (q int8, fp32 scales), vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct plan),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_NONE, "a cast, not differentiated (int8 training quantizes the backward GEMMs' operands again)", NULL,
            NULL},
};
