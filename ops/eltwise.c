/*
 * eltwise.c - one elementwise tensor operation as eager PyTorch launches it: y = fn(a[, b])
 * over n elements, each input read once and the output written once, the arithmetic in fp32
 * (the vector unit has no bf16 arithmetic; PyTorch's CUDA kernels also compute 16-bit types in
 * fp32). The training replay costs an unfused model's norms, rotary embedding, activation and
 * residual adds as chains of these (plan.fusion = eager, docs/TRAINING.md).
 *
 *   cast    y = a, converted from --in to --out
 *   add     y = a + b        mul     y = a * b
 *   acc     y = a + b with a read in --out's type (an accumulator: Megatron's
 *           main_grad.add_(grad) of an fp32 buffer and a bf16 gradient, in place)
 *   square  y = a * a        silu    y = a / (1 + exp(-a))
 *   neg     y = -a           rsqrt   y = 1 / sqrt(a)
 *   sum64   y[i] = a[64 i] + ... + a[64 i + 63] (n / 64 outputs; n a multiple of 64): one pass
 *           of a row reduction, which reads what a mean over the hidden size reads
 *
 * Tiles of 2048 elements stream GM -> UB -> GM on every vector core, double buffered: MTE2
 * loads a (and b), the vector unit converts to fp32, applies fn and converts to --out, MTE3
 * writes y.
 *
 * Reference: the same inputs on the host in double, rounded to --out; tolerance two roundings
 * of --out (one for fp32 intermediates, one for the result) beyond fp32's own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

#define TILE 2048u /* elements per tile */

enum fn { FN_CAST, FN_ADD, FN_MUL, FN_SQUARE, FN_SILU, FN_NEG, FN_RSQRT, FN_SUM64, FN_ACC, FN_COUNT };
static const char *const fn_names[] = {"cast", "add", "mul", "square", "silu", "neg", "rsqrt", "sum64", "acc", NULL};
static const int fn_inputs[FN_COUNT] = {1, 2, 2, 1, 1, 1, 1, 1, 2};

static const struct op_param params[] = {
    {"n", OP_P_DIM, NULL, "elements", NULL},
    {"fn", OP_P_CHOICE, "add",
     "the operation: cast, add (a + b), mul (a * b), square (a * a), silu (a / (1 + exp(-a))), neg, rsqrt, sum64 "
     "(the sum of each 64 consecutive elements), acc (a + b with a in --out's type: an accumulator)", fn_names},
    {"in", OP_P_DTYPE, "bf16", "type of the inputs: fp16, bf16 or fp32", NULL},
    {"out", OP_P_DTYPE, "bf16", "type of the output: fp16, bf16 or fp32", NULL},
};

struct elt {
  uint64_t n, blocks;
  enum fn fn;
  enum npu_dtype in, out;
  int cores;
  uint64_t a, b, y;
};

static uint32_t esz(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

/* The type of input i (0: a, 1: b): an accumulator's a is in the output's type. */
static enum npu_dtype in_type(const struct elt *e, int i)
{
  return e->fn == FN_ACC && i == 0 ? e->out : e->in;
}

/* UB: per buffer k (48 KiB each), the raw inputs a and b, their fp32 copies (a's also the
 * result), a temporary, and the raw output. */
#define UB_A(k) ((uint64_t)(k) * 49152u)
#define UB_B(k) (UB_A(k) + 8192u)
#define UB_AF(k) (UB_A(k) + 16384u)
#define UB_BF(k) (UB_A(k) + 24576u)
#define UB_T(k) (UB_A(k) + 32768u)
#define UB_Y(k) (UB_A(k) + 40960u)
#define UB_NEED (2u * 49152u)

/* One vector instruction over `reps` repeats of 64 fp32 elements: dst = op(s0, s1) (scalar for
 * the scalar forms). */
static void vop(struct core_tp *t, enum core_vec_op op, uint16_t reps, uint64_t dst, uint64_t s0, uint64_t s1,
                double scalar)
{
  struct core_vec v = {.op = (uint8_t)op, .dtype = NPU_DT_FP32, .dst_dtype = NPU_DT_FP32, .repeat = reps,
                       .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                       .mask = {~0ull, 0}, .dst = dst, .src0 = s0, .src1 = s1, .scalar = scalar};
  core_vec(t, &v);
}

/* dst (fp32 or `to`) = src (`from`), reps repeats of 64 elements. */
static void vcast(struct core_tp *t, enum npu_dtype from, enum npu_dtype to, uint16_t reps, uint64_t dst, uint64_t src)
{
  struct core_vec v = {.op = CORE_VEC_CAST, .dtype = (uint8_t)from, .dst_dtype = (uint8_t)to, .repeat = reps,
                       .dst_blk = 1, .src0_blk = 1, .dst_rep = (uint16_t)(2 * esz(to)),
                       .src0_rep = (uint16_t)(2 * esz(from)), .mask = {~0ull, 0}, .dst = dst, .src0 = src};
  core_vec(t, &v);
}

static void e_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  const struct elt *e = ctx;
  int k = (int)((blk / (uint64_t)e->cores) % 2);
  uint64_t first = blk * TILE;
  uint32_t n = (uint32_t)(e->n - first < TILE ? e->n - first : TILE), eo = esz(e->out);
  bool two = fn_inputs[e->fn] == 2;
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, k);
  for (int i = 0; i < (two ? 2 : 1); i++) {
    enum npu_dtype ti = in_type(e, i);
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, ti, (i ? e->b : e->a) + first * esz(ti), 1, n, 0);
    struct core_tile u = ops_tile(MEM_UB, CORE_ND, ti, i ? UB_B(k) : UB_A(k), 1, n, 0);
    core_copy(t, &u, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, k);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, k);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, k);
  uint16_t reps = (uint16_t)ops_ceil(n, 64);
  /* the inputs in fp32 (fp32 inputs are read where they were loaded) */
  uint64_t af = UB_A(k), bf = UB_B(k);
  if (in_type(e, 0) != NPU_DT_FP32) {
    vcast(t, in_type(e, 0), NPU_DT_FP32, reps, UB_AF(k), UB_A(k));
    af = UB_AF(k);
  }
  if (two && in_type(e, 1) != NPU_DT_FP32) {
    vcast(t, in_type(e, 1), NPU_DT_FP32, reps, UB_BF(k), UB_B(k));
    bf = UB_BF(k);
  }
  uint64_t r = af; /* the fp32 result */
  switch (e->fn) {
  case FN_CAST: break;
  case FN_ADD:
  case FN_ACC: vop(t, CORE_VEC_ADD, reps, UB_T(k), af, bf, 0), r = UB_T(k); break;
  case FN_MUL: vop(t, CORE_VEC_MUL, reps, UB_T(k), af, bf, 0), r = UB_T(k); break;
  case FN_SQUARE: vop(t, CORE_VEC_MUL, reps, UB_T(k), af, af, 0), r = UB_T(k); break;
  case FN_SILU: /* a / (1 + exp(-a)): neg, exp, + 1, 1 / x, * a */
    vop(t, CORE_VEC_NEG, reps, UB_T(k), af, 0, 0);
    vop(t, CORE_VEC_EXP, reps, UB_T(k), UB_T(k), 0, 0);
    vop(t, CORE_VEC_ADDS, reps, UB_T(k), UB_T(k), 0, 1.0);
    vop(t, CORE_VEC_RECIP, reps, UB_T(k), UB_T(k), 0, 0);
    vop(t, CORE_VEC_MUL, reps, UB_T(k), UB_T(k), af, 0);
    r = UB_T(k);
    break;
  case FN_NEG: vop(t, CORE_VEC_NEG, reps, UB_T(k), af, 0, 0), r = UB_T(k); break;
  case FN_RSQRT: vop(t, CORE_VEC_RSQRT, reps, UB_T(k), af, 0, 0), r = UB_T(k); break;
  case FN_SUM64: vop(t, CORE_VEC_REDUCE_SUM, reps, UB_T(k), af, 0, 0), r = UB_T(k); break;
  case FN_COUNT: NPU_PANIC("bad fn");
  }
  uint32_t m = e->fn == FN_SUM64 ? n / 64 : n; /* outputs of the tile */
  uint16_t oreps = (uint16_t)ops_ceil(m, 64);
  if (e->out != NPU_DT_FP32) vcast(t, NPU_DT_FP32, e->out, oreps, UB_Y(k), r);
  else vop(t, CORE_VEC_COPY, oreps, UB_Y(k), r, 0, 0);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, k);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, k);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, k);
  uint64_t at = e->fn == FN_SUM64 ? first / 64 : first;
  struct core_tile gy = ops_tile(MEM_GM, CORE_ND, e->out, e->y + at * eo, 1, m, 0);
  struct core_tile uy = ops_tile(MEM_UB, CORE_ND, e->out, UB_Y(k), 1, m, 0);
  core_copy(t, &gy, &uy);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, k);
}

static bool wide(enum npu_dtype t)
{
  return t == NPU_DT_BF16 || t == NPU_DT_FP16 || t == NPU_DT_FP32;
}

static int plan(void *p, const struct op_desc *desc, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct elt *e = p;
  memset(e, 0, sizeof *e);
  e->n = op_u(desc, a, "n");
  e->fn = (enum fn)op_u(desc, a, "fn");
  e->in = op_dtype(desc, a, "in");
  e->out = op_dtype(desc, a, "out");
  if (!wide(e->in))
    return npu_diag_set(diag, "command line", 0, "--in", "eltwise takes fp16, bf16 or fp32 inputs, got %s",
                        npu_dtype_name(e->in)), NPU_EINVAL;
  if (!wide(e->out))
    return npu_diag_set(diag, "command line", 0, "--out", "eltwise writes fp16, bf16 or fp32, got %s",
                        npu_dtype_name(e->out)), NPU_EINVAL;
  if (e->fn == FN_SUM64 && e->n % 64)
    return npu_diag_set(diag, "command line", 0, "--n", "sum64 needs a multiple of 64 elements, got %llu",
                        (unsigned long long)e->n), NPU_EINVAL;
  if (chip->buf[ARCH_BUF_UB].size_bytes < UB_NEED)
    return npu_diag_set(diag, "command line", 0, "--n", "eltwise needs %u bytes of UB, %s has %llu", UB_NEED,
                        chip->name, (unsigned long long)chip->buf[ARCH_BUF_UB].size_bytes), NPU_ENOFIT;
  e->blocks = ops_ceil(e->n, TILE);
  int vc = chip->org == ARCH_ORG_SPLIT ? chip->aiv_count : chip->aic_count;
  e->cores = e->blocks < (uint64_t)vc ? (int)e->blocks : vc;
  return 0;
}

static void setup(void *p, struct op_exec *x)
{
  struct elt *e = p;
  e->a = op_tensor(x, "a", in_type(e, 0), e->n, e->fn == FN_RSQRT ? OP_INIT_POSITIVE : OP_INIT_UNIFORM)->addr;
  if (fn_inputs[e->fn] == 2) e->b = op_tensor(x, "b", e->in, e->n, OP_INIT_UNIFORM)->addr;
  e->y = op_tensor(x, "y", e->out, e->fn == FN_SUM64 ? e->n / 64 : e->n, OP_INIT_NONE)->addr;
  struct core_kernel k = {.name = "eltwise", .mode = CORE_MODE_VECTOR, .block_dim = e->cores, .nblocks = e->blocks,
                          .ctx = e, .unit_begin = ops_stream2_begin, .unit_end = ops_stream2_end, .block = e_block};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  (void)p;
  return 0;
}

static double eps_of(enum npu_dtype t)
{
  return t == NPU_DT_BF16 ? 1.0 / 256 : t == NPU_DT_FP16 ? 1.0 / 2048 : 1.0 / (1u << 23);
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct elt *e = p;
  double *A = op_decode(op_find_tensor(x, "a")), *Y = op_decode(op_find_tensor(x, "y"));
  double *B = fn_inputs[e->fn] == 2 ? op_decode(op_find_tensor(x, "b")) : NULL;
  double worst = 0, eps = eps_of(e->out) + eps_of(NPU_DT_FP32);
  uint64_t outs = e->fn == FN_SUM64 ? e->n / 64 : e->n;
  for (uint64_t i = 0; i < outs; i++) {
    double a = A[i], v = 0, scale = 0;
    switch (e->fn) {
    case FN_CAST: v = a; break;
    case FN_ADD:
    case FN_ACC: v = a + B[i], scale = fmax(fabs(a), fabs(B[i])); break; /* where the sum cancels */
    case FN_MUL: v = a * B[i]; break;
    case FN_SQUARE: v = a * a; break;
    case FN_SILU: v = a / (1 + exp(-a)); break;
    case FN_NEG: v = -a; break;
    case FN_RSQRT: v = 1 / sqrt(a); break;
    case FN_SUM64: /* 64 fp32 additions: their rounding grows with the terms' magnitude */
      for (int q = 0; q < 64; q++) v += A[64 * i + (uint64_t)q], scale += fabs(A[64 * i + (uint64_t)q]);
      scale *= 64 * eps_of(NPU_DT_FP32) / eps;
      break;
    case FN_COUNT: NPU_PANIC("bad fn");
    }
    scale = fmax(fabs(v), scale) + 1e-30;
    double err = fabs(Y[i] - fmt_round(e->out, v)) / (2 * eps * scale);
    if (err > worst) worst = err;
  }
  *max_err = worst;
  snprintf(summary, n, "worst %.3g of two roundings of %s over %llu outputs (%s)", worst, npu_dtype_name(e->out),
           (unsigned long long)outs, fn_names[e->fn]);
  free(A);
  free(B);
  free(Y);
  return worst <= 1;
}

const struct op_desc op_eltwise = {
    .name = "eltwise",
    .summary = "one elementwise operation (cast, add, mul, square, silu, neg, rsqrt, a sum of 64, an accumulation) as an eager "
               "framework launches it",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct elt),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_NONE, "an eager framework's backward is other elementwise kernels, which the caller emits (the training replay's recipes, workloads/expand.c)", NULL, NULL},
};
