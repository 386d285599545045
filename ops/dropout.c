/*
 * dropout.c - y = mask ? x / (1 - p) : 0 on the vector cores, with a given bit mask (Ascend's
 * DropOutDoMask; its backward, dx = mask ? dy / (1 - p) : 0, is the same kernel).
 *
 * The mask (one bit per element, set = keep) is an input, as on Ascend where a generator
 * kernel (StatelessDropOutGenMask, Philox) writes it ahead; GPUs fuse the generation, which
 * moves the same bytes. Tiles of 8192 elements stream GM -> UB -> GM on every vector core,
 * double buffered: MTE2 loads x and the tile's 1 KiB of mask bits, the vector unit scales by
 * 1 / (1 - p) and selects against a block of zeros by the bits, MTE3 writes y.
 *
 * Reference: the same mask on the host, in double; tolerance one rounding to the type.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

#define TILE 8192u /* elements per tile (fp32: in the x slot itself) */

static const struct op_param params[] = {
    {"rows", OP_P_DIM, NULL, "rows", NULL},
    {"cols", OP_P_DIM, NULL, "columns", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of x and y: fp16, bf16 or fp32", NULL},
    {"p", OP_P_REAL, "0.1", "probability of dropping an element", NULL},
};

struct drop {
  uint64_t n, blocks;
  enum npu_dtype dt;
  double p;
  int cores;
  uint64_t x, y, mask;
};

static uint32_t esz(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

/* UB: per buffer b (64 KiB each), x (and y in place), x as fp32, the mask bits; zeros after. */
#define UB_X(b) ((uint64_t)(b) * 65536u)
#define UB_F(b) (UB_X(b) + 16384u)
#define UB_M(b) (UB_X(b) + 49152u)
#define UB_ZERO 131072u

static void d_begin(struct core_tp *t, void *ctx)
{
  ops_stream2_begin(t, ctx);
  struct core_vec z = {.op = CORE_VEC_DUP, .dtype = NPU_DT_FP32, .dst_dtype = NPU_DT_FP32, .repeat = 1,
                       .dst_blk = 1, .dst_rep = 8, .mask = {~0ull, 0}, .dst = UB_ZERO};
  core_vec(t, &z);
}

static void d_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  const struct drop *d = ctx;
  int b = (int)((blk / (uint64_t)d->cores) % 2);
  uint64_t first = blk * TILE;
  uint32_t n = (uint32_t)(d->n - first < TILE ? d->n - first : TILE), es = esz(d->dt);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
  struct core_tile gx = ops_tile(MEM_GM, CORE_ND, d->dt, d->x + first * es, 1, n, 0);
  struct core_tile ux = ops_tile(MEM_UB, CORE_ND, d->dt, UB_X(b), 1, n, 0);
  core_copy(t, &ux, &gx);
  struct core_tile gm = ops_tile(MEM_GM, CORE_ND, NPU_DT_UINT8, d->mask + first / 8, 1, ops_ceil(n, 8), 0);
  struct core_tile um = ops_tile(MEM_UB, CORE_ND, NPU_DT_UINT8, UB_M(b), 1, ops_ceil(n, 8), 0);
  core_copy(t, &um, &gm);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, b);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, b);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
  /* in fp32 (the vector unit has no bf16 arithmetic): cast in, scale, select, cast out */
  uint16_t reps = (uint16_t)ops_ceil(n, 64);
  struct core_vec v = {.op = CORE_VEC_CAST, .dtype = (uint8_t)d->dt, .dst_dtype = NPU_DT_FP32, .repeat = reps,
                       .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = (uint16_t)(2 * es),
                       .src1_rep = 8, .mask = {~0ull, 0}, .dst = UB_F(b), .src0 = UB_X(b)};
  uint64_t f = UB_X(b);
  if (d->dt != NPU_DT_FP32) {
    core_vec(t, &v);
    f = UB_F(b);
  }
  v = (struct core_vec){.op = CORE_VEC_MULS, .dtype = NPU_DT_FP32, .dst_dtype = NPU_DT_FP32, .repeat = reps,
                        .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                        .mask = {~0ull, 0}, .dst = f, .src0 = f, .scalar = 1.0 / (1.0 - d->p)};
  core_vec(t, &v);
  v.op = CORE_VEC_SELECT;
  v.src1 = UB_ZERO;
  v.src1_blk = 0;
  v.src1_rep = 0;
  v.aux = UB_M(b);
  core_vec(t, &v);
  if (d->dt != NPU_DT_FP32) {
    v = (struct core_vec){.op = CORE_VEC_CAST, .dtype = NPU_DT_FP32, .dst_dtype = (uint8_t)d->dt, .repeat = reps,
                          .dst_blk = 1, .src0_blk = 1, .dst_rep = (uint16_t)(2 * es), .src0_rep = 8,
                          .mask = {~0ull, 0}, .dst = UB_X(b), .src0 = f};
    core_vec(t, &v);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, b);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, b);
  struct core_tile gy = ops_tile(MEM_GM, CORE_ND, d->dt, d->y + first * es, 1, n, 0);
  core_copy(t, &gy, &ux);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
}

static int plan(void *p, const struct op_desc *desc, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct drop *d = p;
  memset(d, 0, sizeof *d);
  d->n = op_u(desc, a, "rows") * op_u(desc, a, "cols");
  d->dt = op_dtype(desc, a, "dtype");
  d->p = op_r(desc, a, "p");
  if (d->dt != NPU_DT_BF16 && d->dt != NPU_DT_FP16 && d->dt != NPU_DT_FP32)
    return npu_diag_set(diag, "command line", 0, "--dtype", "dropout takes fp16, bf16 or fp32, got %s",
                        npu_dtype_name(d->dt)), NPU_EINVAL;
  if (!(d->p >= 0 && d->p < 1))
    return npu_diag_set(diag, "command line", 0, "--p", "a probability in [0, 1), got %g", d->p), NPU_EINVAL;
  if (chip->buf[ARCH_BUF_UB].size_bytes < UB_ZERO + 256)
    return npu_diag_set(diag, "command line", 0, "--dtype", "dropout needs %u bytes of UB, %s has %llu", UB_ZERO + 256,
                        chip->name, (unsigned long long)chip->buf[ARCH_BUF_UB].size_bytes), NPU_ENOFIT;
  d->blocks = ops_ceil(d->n, TILE);
  int vc = chip->org == ARCH_ORG_SPLIT ? chip->aiv_count : chip->aic_count;
  d->cores = d->blocks < (uint64_t)vc ? (int)d->blocks : vc;
  return 0;
}

static void setup(void *p, struct op_exec *x)
{
  struct drop *d = p;
  d->x = op_tensor(x, "x", d->dt, d->n, OP_INIT_UNIFORM)->addr;
  d->y = op_tensor(x, "y", d->dt, d->n, OP_INIT_NONE)->addr;
  uint64_t mb = (d->n + 7) / 8;
  struct op_tensor *m = op_tensor_bytes(x, "mask", mb, NULL);
  d->mask = m->addr;
  if (op_functional(x)) { /* keep each element with probability 1 - p, from the seeded generator */
    uint8_t *bits = m->host;
    memset(bits, 0, mb);
    for (uint64_t i = 0; i < d->n; i++)
      if (op_rand(x) >= d->p) bits[i / 8] |= (uint8_t)(1u << (i % 8));
  }
  struct core_kernel k = {.name = "dropout", .mode = CORE_MODE_VECTOR, .block_dim = d->cores, .nblocks = d->blocks,
                          .ctx = d, .unit_begin = d_begin, .unit_end = ops_stream2_end, .block = d_block};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  (void)p;
  return 0;
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct drop *d = p;
  const struct op_tensor *m = op_find_tensor(x, "mask");
  double *X = op_decode(op_find_tensor(x, "x")), *Y = op_decode(op_find_tensor(x, "y"));
  const uint8_t *bits = m->host;
  double worst = 0, eps = d->dt == NPU_DT_BF16 ? 1.0 / 256 : d->dt == NPU_DT_FP16 ? 1.0 / 2048 : 1e-7;
  uint64_t kept = 0;
  for (uint64_t i = 0; i < d->n; i++) {
    bool keep = (bits[i / 8] >> (i % 8)) & 1;
    kept += keep;
    /* the kernel rounds x / (1 - p) to the type before selecting, as the reference does here */
    double want = keep ? fmt_round(d->dt, X[i] / (1 - d->p)) : 0;
    double e = fabs(Y[i] - want) / (eps * fabs(want) + 1e-30);
    if (Y[i] == want) e = 0;
    if (e > worst) worst = e;
  }
  *max_err = worst;
  snprintf(summary, n, "worst %.3g of one rounding; %.4f of the elements kept (1 - p = %.4f)", worst,
           (double)kept / (double)d->n, 1 - d->p);
  free(X);
  free(Y);
  return worst <= 1;
}

const struct op_desc op_dropout = {
    .name = "dropout",
    .summary = "dropout with a given bit mask (its backward is the same kernel)",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct drop),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward applies the same mask and scale to dy: the forward kernel of the same shape",
            op__bwd_same},
};
