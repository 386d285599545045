/*
 * moe_unpermute.c - the MoE combine (Ascend MoeFinalizeRouting): expert outputs in expert-sorted
 * order back to tokens, out[t] = sum_j w[t, j] * y[dst_row[t * k + j]] (+ residual[t]).
 *
 * Inputs: y [tokens * k, hidden] (the rows moe_permute produced, after the experts), dst_row
 * [tokens * k] int32 (for each source slot s = t * k + j, the row of y that holds it: moe_permute's
 * `dst_row`, MoeInitRouting's expanded_row_idx, MoeFinalizeRouting's expandedSrcToDstRow), the top-k
 * weights [tokens, k] fp32 and, optionally, a residual / shared-expert output [tokens, hidden].
 * Output: out [tokens, hidden] in the dtype of y. The combine is a gather, so every output row is
 * written once, with no atomics and in a fixed order: y is read once (tokens x k rows) and out
 * written once, the least traffic the operation allows.
 *
 * Tiling: blocks of `tile` tokens, dealt to every vector core. A block loads its dst_row and
 * weights slice (waiting until the indices have landed: the gathers read them from UB), then
 * walks its tokens and the columns of hidden in chunks of `chunk` (sized to the UB): MTE2 gathers
 * the token's k rows with indexed copies (GM address y + dst_row x row bytes, the index read from
 * UB) and its residual slice; V widens each row to fp32 (bf16 / fp16), multiplies it by its weight
 * (a scalar read from UB) and accumulates in fp32; the sum is cast to the output type and MTE3
 * stores it. Row buffers, residual and output are double buffered, so the next token's gathers
 * overlap this token's arithmetic and store. UB: rows at bank phase 0, the widened row at 256 B,
 * product and accumulators alternating, so no repeat reads and writes one bank group.
 *
 * Inputs for a functional run are generated in setup(): a seeded routing (uniform, or Zipf-skewed
 * with `skew`), its stable expert sort (dst_row), positive weights normalised per token, uniform
 * y and residual. Timing-only runs have no data: their gathers move data as if they read row 0
 * (the model's rule for indexed copies), and the L2 models of both fidelities take each of them
 * to read lines nobody touched before and nobody touches again -- a gather of distinct rows, which
 * this kernel's are (every row of y is read once) -- so the gathers come from HBM and the kernel
 * runs HBM-bound (16384 tokens x 7168 bf16, top-8 on ascend-910b2: about 1.41 ms). A functional
 * run gives the models the rows really read (cores/exec_int.h core__gm_tile).
 *
 * Reference: the sum in double over the decoded inputs; tolerance: one fp32 rounding per product
 * and per addition ((k + 2) fp32 ulps of the magnitudes involved) plus one rounding to the output
 * type.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "ops/moe_int.h"

static const struct op_param params[] = {
    {"tokens", OP_P_DIM, NULL, "tokens", NULL},
    {"hidden", OP_P_DIM, NULL, "hidden size (columns of a row)", NULL},
    {"experts", OP_P_DIM, "8", "experts (shape of the generated routing)", NULL},
    {"topk", OP_P_DIM, "2", "experts per token (rows combined per token)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of the expert outputs, residual and result (fp16, bf16, fp32)", NULL},
    {"residual", OP_P_BOOL, "false", "add a residual / shared-expert input [tokens, hidden]", NULL},
    {"skew", OP_P_REAL, "0", "Zipf exponent of the generated expert load (0: uniform)", NULL},
    {"tile", OP_P_INT, "0", "tokens per block (0: auto)", NULL},
    {"chunk", OP_P_INT, "0", "hidden columns per step (0: auto, as large as the UB allows)", NULL},
    {"cores", OP_P_INT, "0", "vector cores to use (0: all)", NULL},
};

struct unperm {
  uint32_t T, H, E, k;
  enum npu_dtype dt;
  bool res;
  double skew;
  uint32_t R;            /* tokens per block */
  uint32_t hc, nch;      /* columns per step, steps per row */
  uint64_t rowb;         /* UB bytes of one row slot */
  int cores;
  uint64_t nblocks;
  uint64_t y, dst_row, w, residual, out; /* GM */
  uint64_t yb[2], wt[2], dr[2], rb[2], ob[2], tmp, t2, acc[2]; /* UB */
};

/* One launch unit's emission state (the launch's unit context, core_unit_ctx). */
struct unperm_unit {
  uint64_t step, blk;    /* column steps and blocks emitted so far (their ping-pong parities) */
};

static struct unperm_unit *unit_of(struct core_tp *t)
{
  return core_unit_ctx(t);
}

enum { ID_YB = 0, ID_SMALL = 2 }; /* flag ids: row buffers 0-1, dst_row / weights 2-3 */

/* UB layout for chunk hc and tile R; returns the bytes it needs. */
static uint64_t layout(struct unperm *u, uint32_t hc, uint32_t R)
{
  struct moe_ub a = {0};
  uint32_t es = moe_es(u->dt);
  bool wide = u->dt != NPU_DT_FP32;
  unsigned tp = wide ? 0 : 256; /* phase of the product: opposite to what muls reads */
  u->rowb = ops_roundup((uint64_t)hc * es, 32);
  u->acc[0] = moe_alloc(&a, (uint64_t)hc * 4, 256 - tp);
  for (int p = 0; p < 2; p++) u->yb[p] = moe_alloc(&a, u->rowb * u->k, 0);
  u->tmp = wide ? moe_alloc(&a, (uint64_t)hc * 4, 256) : 0;
  u->t2 = moe_alloc(&a, (uint64_t)hc * 4, tp);
  for (int p = 0; p < 2; p++) u->ob[p] = moe_alloc(&a, (uint64_t)hc * es, tp);
  for (int p = 0; p < 2; p++) u->rb[p] = u->res ? moe_alloc(&a, (uint64_t)hc * es, 0) : 0;
  for (int p = 0; p < 2; p++) {
    u->wt[p] = moe_alloc(&a, (uint64_t)R * u->k * 4, 0);
    u->dr[p] = moe_alloc(&a, (uint64_t)R * u->k * 4, 0);
  }
  u->acc[1] = moe_alloc(&a, (uint64_t)hc * 4, 256 - tp);
  return a.top;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct unperm *u = p;
  memset(u, 0, sizeof *u);
  uint64_t T = op_u(d, a, "tokens"), H = op_u(d, a, "hidden"), E = op_u(d, a, "experts"), k = op_u(d, a, "topk");
  u->dt = op_dtype(d, a, "dtype");
  u->res = op_u(d, a, "residual");
  u->skew = op_r(d, a, "skew");
  if (!moe_float_dtype(u->dt))
    return npu_diag_set(diag, "command line", 0, "--dtype", "expert outputs must be fp16, bf16 or fp32, got %s",
                        npu_dtype_name(u->dt)), NPU_EUNSUPPORTED;
  if (k > E)
    return npu_diag_set(diag, "command line", 0, "--topk", "top-%llu of %llu experts", (unsigned long long)k,
                        (unsigned long long)E), NPU_EINVAL;
  if (T * k > INT32_MAX || H > UINT32_MAX / 4 || E > UINT32_MAX)
    return npu_diag_set(diag, "command line", 0, "--tokens", "tokens x topk must stay below 2^31 (int32 row indices)"),
           NPU_EINVAL;
  if (u->skew < 0)
    return npu_diag_set(diag, "command line", 0, "--skew", "must be at least 0"), NPU_EINVAL;
  u->T = (uint32_t)T;
  u->H = (uint32_t)H;
  u->E = (uint32_t)E;
  u->k = (uint32_t)k;
  uint64_t cores = op_u(d, a, "cores");
  if (cores > (uint64_t)moe_cores(chip))
    return npu_diag_set(diag, "command line", 0, "--cores", "%s has %d vector cores", chip->name, moe_cores(chip)),
           NPU_EINVAL;
  int ncores = cores ? (int)cores : moe_cores(chip);
  uint64_t ub = moe_ub_bytes(chip);
  uint64_t tile = op_u(d, a, "tile"), chunk = op_u(d, a, "chunk");
  /* tokens per block: 16 amortises the per-block index load, but every core gets work */
  uint64_t per_core = (T + (uint64_t)ncores - 1) / (uint64_t)ncores;
  u->R = (uint32_t)(tile ? tile : per_core < 16 ? per_core : 16);
  if (u->R > T) u->R = (uint32_t)T;
  if (chunk) {
    if (chunk > H) chunk = H;
    uint64_t need = layout(u, (uint32_t)chunk, u->R);
    if (need > ub)
      return npu_diag_set(diag, "command line", 0, "--chunk",
                          "%llu columns of %u rows (tile %u) need %llu bytes of UB, has %llu",
                          (unsigned long long)chunk, u->k, u->R, (unsigned long long)need, (unsigned long long)ub),
             NPU_ENOFIT;
    u->hc = (uint32_t)chunk;
  } else {
    /* the largest chunk that fits, then equal chunks rounded to whole fp32 repeats */
    uint32_t lo = 1, hi = u->H;
    if (layout(u, 1, u->R) > ub) {
      uint64_t need = layout(u, 1, u->R);
      return npu_diag_set(diag, "command line", 0, tile ? "--tile" : "--topk",
                          "%u tokens of %u rows need %llu bytes of UB even one column at a time, has %llu", u->R,
                          u->k, (unsigned long long)need, (unsigned long long)ub), NPU_ENOFIT;
    }
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo + 1) / 2;
      if (layout(u, mid, u->R) <= ub) lo = mid; else hi = mid - 1;
    }
    uint32_t nch = ops_ceil(u->H, lo);
    uint32_t hc = ops_ceil(u->H, nch);
    uint32_t hr = (uint32_t)ops_roundup(hc, 64);
    u->hc = hr <= lo && hr <= u->H ? hr : hc;
  }
  u->nch = ops_ceil(u->H, u->hc);
  layout(u, u->hc, u->R);
  u->nblocks = ops_ceil(u->T, u->R);
  u->cores = ncores < (int)u->nblocks ? ncores : (int)u->nblocks;
  return 0;
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  (void)ctx;
  *unit_of(t) = (struct unperm_unit){0};
  for (int p = 0; p < 2; p++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_YB + p);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_SMALL + p);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_YB + p);
  }
}

static void unit_end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int p = 0; p < 2; p++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_YB + p);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_SMALL + p);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_YB + p);
  }
}

static int block_class(void *ctx, uint64_t b)
{
  const struct unperm *u = ctx;
  return (b + 1) * u->R > u->T ? 1 : 0;
}

/* One token's chunk of columns: gather, weigh, accumulate, cast, store. */
static void step(struct core_tp *t, struct unperm *u, int bp, uint32_t tok, uint32_t r, uint32_t ch)
{
  int p = (int)(unit_of(t)->step++ % 2);
  uint32_t h0 = ch * u->hc, hn = u->H - h0 < u->hc ? u->H - h0 : u->hc;
  uint32_t es = moe_es(u->dt);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_YB + p);
  for (uint32_t j = 0; j < u->k; j++) {
    struct core_copy c = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true,
                          .index_ub = u->dr[bp] + 4ull * (r * u->k + j), .index_stride = (uint64_t)u->H * es};
    c.src = ops_tile(MEM_GM, CORE_ND, u->dt, u->y + (uint64_t)h0 * es, 1, hn, 0);
    c.dst = ops_tile(MEM_UB, CORE_ND, u->dt, u->yb[p] + j * u->rowb, 1, hn, 0);
    core_copy_ex(t, &c);
  }
  if (u->res) {
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, u->dt, u->residual + ((uint64_t)tok * u->H + h0) * es, 1, hn, 0);
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, u->dt, u->rb[p], 1, hn, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_YB + p);

  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_YB + p);
  int a = 0;
  bool have = false;
  if (u->res) {
    if (u->dt == NPU_DT_FP32)
      moe_vrun(t, CORE_VEC_COPY, NPU_DT_FP32, u->acc[a], u->rb[p], 0, hn, 0);
    else
      moe_vcast(t, u->acc[a], NPU_DT_FP32, u->rb[p], u->dt, hn);
    have = true;
  }
  for (uint32_t j = 0; j < u->k; j++) {
    uint64_t src = u->yb[p] + j * u->rowb;
    if (u->dt != NPU_DT_FP32) {
      moe_vcast(t, u->tmp, NPU_DT_FP32, src, u->dt, hn);
      src = u->tmp;
    }
    uint64_t prod = have ? u->t2 : u->acc[a];
    moe_vrun_ub(t, CORE_VEC_MULS, NPU_DT_FP32, prod, src, 0, hn, 0, u->wt[bp] + 4ull * (r * u->k + j));
    if (have) {
      moe_vrun(t, CORE_VEC_ADD, NPU_DT_FP32, u->acc[1 - a], u->acc[a], u->t2, hn, 0);
      a = 1 - a;
    }
    have = true;
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_YB + p);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_YB + p);
  if (u->dt == NPU_DT_FP32)
    moe_vrun(t, CORE_VEC_COPY, NPU_DT_FP32, u->ob[p], u->acc[a], 0, hn, 0);
  else
    moe_vcast(t, u->ob[p], u->dt, u->acc[a], NPU_DT_FP32, hn);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_YB + p);

  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_YB + p);
  struct core_tile l = ops_tile(MEM_UB, CORE_ND, u->dt, u->ob[p], 1, hn, 0);
  struct core_tile g = ops_tile(MEM_GM, CORE_ND, u->dt, u->out + ((uint64_t)tok * u->H + h0) * es, 1, hn, 0);
  core_copy(t, &g, &l);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_YB + p);
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct unperm *u = ctx;
  int bp = (int)(unit_of(t)->blk++ % 2);
  uint32_t t0 = (uint32_t)(b * u->R), tb = u->T - t0 < u->R ? u->T - t0 : u->R;
  uint64_t s0 = (uint64_t)t0 * u->k;
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_SMALL + bp);
  struct core_tile gd = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, u->dst_row + s0 * 4, 1, tb * u->k, 0);
  struct core_tile ld = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, u->dr[bp], 1, tb * u->k, 0);
  struct core_tile gw = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, u->w + s0 * 4, 1, tb * u->k, 0);
  struct core_tile lw = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, u->wt[bp], 1, tb * u->k, 0);
  core_copy(t, &ld, &gd);
  core_copy(t, &lw, &gw);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_SMALL + bp);
  core_pipe_barrier(t, CORE_PIPE_MTE2); /* the gathers read their indices from UB */
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_SMALL + bp);
  for (uint32_t r = 0; r < tb; r++)
    for (uint32_t ch = 0; ch < u->nch; ch++) step(t, u, bp, t0 + r, r, ch);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_SMALL + bp);
}

static void setup(void *p, struct op_exec *x)
{
  struct unperm *u = p;
  uint64_t slots = (uint64_t)u->T * u->k;
  u->y = op_tensor(x, "y", u->dt, slots * u->H, OP_INIT_UNIFORM)->addr;
  struct op_tensor *dr = op_tensor(x, "dst_row", NPU_DT_INT32, slots, OP_INIT_NONE);
  struct op_tensor *w = op_tensor(x, "weights", NPU_DT_FP32, slots, OP_INIT_NONE);
  u->dst_row = dr->addr;
  u->w = w->addr;
  if (u->res) u->residual = op_tensor(x, "residual", u->dt, (uint64_t)u->T * u->H, OP_INIT_UNIFORM)->addr;
  u->out = op_tensor(x, "out", u->dt, (uint64_t)u->T * u->H, OP_INIT_NONE)->addr;
  if (op_functional(x)) {
    int32_t *ids = npu_xmalloc(slots * sizeof *ids);
    moe_route(x, ids, u->T, u->k, u->E, u->skew);
    moe_sort(ids, slots, u->E, NULL, dr->host, NULL);
    free(ids);
    float *wf = w->host;
    for (uint32_t t = 0; t < u->T; t++) {
      double sum = 0;
      for (uint32_t j = 0; j < u->k; j++) sum += wf[(uint64_t)t * u->k + j] = (float)(0.05 + op_rand(x));
      for (uint32_t j = 0; j < u->k; j++) wf[(uint64_t)t * u->k + j] = (float)(wf[(uint64_t)t * u->k + j] / sum);
    }
  }
  struct core_kernel k = {.name = "moe_unpermute", .mode = CORE_MODE_VECTOR, .block_dim = u->cores,
                          .nblocks = u->nblocks, .ctx = u, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_class = block_class, .unit_ctx_bytes = sizeof(struct unperm_unit)};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  const struct unperm *u = p;
  return ((double)u->k * 2 + (u->res ? 1 : 0)) * u->T * (double)u->H;
}

static double eps_of(enum npu_dtype t)
{
  return t == NPU_DT_FP16 ? 1.0 / 1024 : t == NPU_DT_BF16 ? 1.0 / 128 : 1.0 / (1 << 23);
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct unperm *u = p;
  double *Y = op_decode(op_find_tensor(x, "y")), *W = op_decode(op_find_tensor(x, "weights"));
  double *D = op_decode(op_find_tensor(x, "dst_row")), *O = op_decode(op_find_tensor(x, "out"));
  double *Rs = u->res ? op_decode(op_find_tensor(x, "residual")) : NULL;
  uint64_t th = (uint64_t)u->T * u->H;
  double *ref = npu_xcalloc(th, sizeof *ref);
  for (uint32_t t = 0; t < u->T; t++) {
    double *r = ref + (uint64_t)t * u->H;
    if (Rs) memcpy(r, Rs + (uint64_t)t * u->H, u->H * sizeof *r);
    for (uint32_t j = 0; j < u->k; j++) {
      uint64_t s = (uint64_t)t * u->k + j;
      const double *row = Y + (uint64_t)D[s] * u->H;
      for (uint32_t h = 0; h < u->H; h++) r[h] += W[s] * row[h];
    }
  }
  /* |y|, |residual| < 1 and the weights sum to 1: every fp32 intermediate is below 2, so each
   * of the k products, k additions and the residual cast costs at most one fp32 ulp of 2 */
  double atol = (u->k + 2) * ldexp(1, -22), rtol = eps_of(u->dt) * 0.51;
  *max_err = op_compare(O, ref, th, atol, rtol);
  snprintf(summary, n, "%u tokens x top-%u x %u %s%s: worst error %.3g of tolerance (atol %.3g, rtol %.3g)", u->T,
           u->k, u->H, npu_dtype_name(u->dt), u->res ? " + residual" : "", *max_err, atol, rtol);
  free(Y);
  free(W);
  free(D);
  free(O);
  free(Rs);
  free(ref);
  return *max_err <= 1;
}

/* The backward of the combine: the dispatch of the same shape. */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  op_call_init(&out[0], "moe_permute");
  op_call_copy_given(&out[0], fwd);
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

const struct op_desc op_moe_unpermute = {
    .name = "moe_unpermute",
    .summary = "MoE combine (MoeFinalizeRouting): gather each token's k expert rows, weigh, sum in fp32",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct unperm),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "moe_permute with the same tokens, hidden, experts, topk and dtype",
            "the backward sends each token's gradient back to its k expert rows: the work of the dispatch "
            "kernel (the gradient of the k weights is not costed)",
            bwd},
};
