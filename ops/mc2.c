/*
 * mc2.c - all_gather_matmul: CANN's AllGatherMatmul (MC2, "matmul and communication fused"), the
 * all-gather of a tensor-parallel group's row shards followed by a matmul, as one kernel that runs
 * on every device of a server at once (core_launch_opts.ranks).
 *
 *   gather_out = all_gather(x1)            [ranks x m, k]   (x1: [m, k] on every device)
 *   out        = gather_out @ x2           [ranks x m, n]   (x2: [k, n], or [n, k] with trans_b)
 *
 * The scheme is the one of CANN's MC2 kernels and of the PTO allgather_gemm example for Atlas A2
 * (pto-isa kernels/manual/a2a3/allgather_gemm: an AIV communication kernel that puts chunks with
 * TPUT and notifies, an AIC compute kernel that waits on chunk flags):
 *   - the vector cores move the data: each holds a share of every turn's rows of the device's own
 *     x1, loads it into UB (MTE2) and writes it (MTE3) into every peer's gather_out over the link
 *     between the two devices (peers in an order rotated per vector core, so that every link of the
 *     full mesh carries data at once) and into its own; after a turn it notifies each peer;
 *   - the cube cores run the GEMM (gemm.c's tile program, tiled for one turn's rows) first on the
 *     device's own rows, which need no communication, then turn by turn on the rows that arrived,
 *     each peer's slice once its `turns` signal has every vector core's notify.
 * The turns are CANN's comm_turn: the gather in pieces of m / turns rows of every device, so that
 * the GEMM of one turn overlaps the transfer of the next.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "ops/ops_int.h"

#define MAX_RANKS 16
#define MAX_TURNS 16
#define PIECE_BYTES (64u * 1024u) /* a vector core's UB buffer; two of them ping-pong */

static const struct op_param params[] = {
    {"m", OP_P_DIM, NULL, "rows of x1 on each device (the all-gathered rows: ranks x m)", NULL},
    {"k", OP_P_DIM, NULL, "columns of x1, rows of x2", NULL},
    {"n", OP_P_DIM, NULL, "columns of x2 and of the output on each device", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "element type of x1 and x2: fp16 or bf16 (the output's too)", NULL},
    {"ranks", OP_P_DIM, "8", "devices of the tensor-parallel group (2..16), all of one server", NULL},
    {"turns", OP_P_INT, "0", "communication turns (CANN's comm_turn): the gather in pieces of m / turns rows "
                             "(0: auto, the most up to 8 that divide m with at least 256 rows each)", NULL},
    {"trans_b", OP_P_BOOL, "false", "x2 stored [n, k]", NULL},
    {"gather_output", OP_P_BOOL, "true", "also write the gathered x1 into gather_out on every device", NULL},
};

#define NPARAMS ((int)(sizeof params / sizeof params[0]))

enum { T_X1, T_X2, T_GATHER, T_OUT, T_PER_RANK };

struct agmm {
  const struct arch_chip *chip;
  uint32_t m, n, k, ranks, turns, s; /* s: rows of one turn */
  enum npu_dtype in, out;
  bool tb, gather;
  struct gemm *g;                    /* the GEMM of one turn's rows of one device */
  uint64_t nb;                       /* its blocks */
  int units, naiv;                   /* AI cores (launch units) per device; vector cores per device */
  uint64_t piece;                    /* elements per UB buffer */
  uint64_t t[MAX_RANKS][T_PER_RANK]; /* tensor addresses, per device */
  char names[MAX_RANKS][T_PER_RANK][24];
};

/* A unit's context: the GEMM's unit state first (ops_gemm_unit_begin uses it), then which
 * (turn, peer) slices its cube core has waited for. */
struct agmm_unit {
  unsigned char gemm[64];
  unsigned char waited[MAX_TURNS * MAX_RANKS];
};

static uint64_t es(enum npu_dtype t, uint64_t n)
{
  return n * (uint64_t)npu_dtype_bits(t) / 8;
}

static int signal_id(const struct agmm *a, uint32_t turn, uint32_t sender)
{
  return (int)(turn * a->ranks + sender);
}

/* ------------------------------------------------------------------ the vector cores: the gather */

/* Vector core v (0..naiv-1) of device `rank`: its share of each turn's rows of x1, put into every
 * device's gather_out (peers first, rotated by v), then a notify to each peer per turn. */
static void gather_program(struct core_tp *t, const struct agmm *a, int rank, int v)
{
  uint64_t turn_elems = (uint64_t)a->s * a->k;
  uint64_t share = (turn_elems + (uint64_t)a->naiv - 1) / (uint64_t)a->naiv;
  share = (share + 255) / 256 * 256; /* 32-byte aligned shares for every dtype */
  uint64_t lo = (uint64_t)v * share, hi = lo + share < turn_elems ? lo + share : turn_elems;
  uint32_t stage = 0;
  for (int b = 0; b < 2; b++) core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
  for (uint32_t turn = 0; turn < a->turns; turn++) {
    uint64_t first = (uint64_t)turn * a->s * a->k; /* the turn's first element in x1 */
    for (uint64_t e = lo; e < hi; e += a->piece) {
      uint32_t len = (uint32_t)(hi - e < a->piece ? hi - e : a->piece);
      int b = (int)(stage++ % 2);
      struct core_tile ub = ops_tile(MEM_UB, CORE_ND, a->in, (uint64_t)b * es(a->in, a->piece), 1, len, len);
      core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
      struct core_tile src = ops_tile(MEM_GM, CORE_ND, a->in, a->t[rank][T_X1] + es(a->in, first + e), 1, len, len);
      core_copy(t, &ub, &src);
      core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, b);
      core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, b);
      uint64_t at = es(a->in, (uint64_t)rank * a->m * a->k + first + e); /* its place in gather_out */
      for (uint32_t q = 0; q <= a->ranks - 1; q++) {
        uint32_t peer = q < a->ranks - 1 ? (uint32_t)rank + 1 + (uint32_t)(v + (int)q) % (a->ranks - 1) : (uint32_t)rank;
        peer %= a->ranks;
        if (peer == (uint32_t)rank && !a->gather) continue;
        struct core_tile dst = ops_tile(MEM_GM, CORE_ND, a->in, a->t[peer][T_GATHER] + at, 1, len, len);
        core_copy(t, &dst, &ub);
      }
      core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
    }
    for (uint32_t q = 1; q < a->ranks; q++)
      core_notify(t, CORE_PIPE_MTE3, (int)((uint32_t)rank + q) % (int)a->ranks, signal_id(a, turn, (uint32_t)rank));
  }
  for (int b = 0; b < 2; b++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct agmm *a = ctx;
  struct agmm_unit *u = core_unit_ctx(t);
  memset(u, 0, sizeof *u);
  int rank = core_rank(t), per = a->naiv / a->units;
  for (int sub = 0; sub < per; sub++) {
    core_select(t, sub == 0 ? CORE_SUB_AIV0 : CORE_SUB_AIV1);
    gather_program(t, a, rank, core_unit(t) * per + sub);
  }
  core_select(t, CORE_SUB_AIC);
  ops_gemm_unit_begin(t, a->g);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct agmm *a = ctx;
  core_select(t, CORE_SUB_AIC);
  ops_gemm_unit_end(t, a->g);
}

/* ------------------------------------------------------------------ the cube cores: the GEMM */

/* Block b: the device's own rows first (turn by turn), then turn by turn every peer's slice. */
static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct agmm *a = ctx;
  struct agmm_unit *u = core_unit_ctx(t);
  uint32_t rank = (uint32_t)core_rank(t), turn, sender;
  uint64_t own = (uint64_t)a->turns * a->nb, inner;
  if (b < own) {
    turn = (uint32_t)(b / a->nb);
    sender = rank;
    inner = b % a->nb;
  } else {
    uint64_t r = b - own;
    turn = (uint32_t)(r / ((uint64_t)(a->ranks - 1) * a->nb));
    sender = (rank + 1 + (uint32_t)((r / a->nb) % (a->ranks - 1))) % a->ranks;
    inner = r % a->nb;
  }
  core_select(t, CORE_SUB_AIC);
  uint64_t row = (uint64_t)sender * a->m + (uint64_t)turn * a->s; /* in gather_out and out */
  uint64_t A;
  if (sender == rank) {
    A = a->t[rank][T_X1] + es(a->in, (uint64_t)turn * a->s * a->k);
  } else {
    A = a->t[rank][T_GATHER] + es(a->in, row * a->k);
    unsigned char *w = &u->waited[turn * a->ranks + sender];
    if (!*w) { /* the slice's notifies: one from every vector core of the sender */
      core_notify_wait(t, CORE_PIPE_MTE2, signal_id(a, turn, sender), (uint32_t)a->naiv);
      *w = 1;
    }
  }
  ops_gemm_block_at(t, a->g, inner, A, a->t[rank][T_X2], a->t[rank][T_OUT] + es(a->out, row * a->n));
}

/* ------------------------------------------------------------------ plan, setup, check */

static uint32_t auto_turns(uint32_t m)
{
  for (uint32_t t = 8; t > 1; t--)
    if (m % t == 0 && m / t >= 256 && (m / t) % 16 == 0) return t;
  return 1;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct agmm *a = p;
  memset(a, 0, sizeof *a);
  a->chip = chip;
  uint64_t m = op_u(d, args, "m"), n = op_u(d, args, "n"), k = op_u(d, args, "k");
  uint64_t ranks = op_u(d, args, "ranks"), turns = op_u(d, args, "turns");
  if (m > 65536 || n > 65536 || k > 65536)
    return npu_diag_set(diag, "command line", 0, "--m", "dimensions above 65536 are not supported"), NPU_EINVAL;
  a->m = (uint32_t)m;
  a->n = (uint32_t)n;
  a->k = (uint32_t)k;
  a->in = a->out = op_dtype(d, args, "dtype");
  a->tb = op_u(d, args, "trans_b");
  a->gather = op_u(d, args, "gather_output");
  if (a->in != NPU_DT_BF16 && a->in != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--dtype", "fp16 or bf16 (as CANN's AllGatherMatmul), not %s",
                        npu_dtype_name(a->in)),
           NPU_EUNSUPPORTED;
  if (ranks < 2 || ranks > MAX_RANKS)
    return npu_diag_set(diag, "command line", 0, "--ranks", "2..%d devices, not %llu", MAX_RANKS,
                        (unsigned long long)ranks),
           NPU_EINVAL;
  a->ranks = (uint32_t)ranks;
  if (turns > MAX_TURNS)
    return npu_diag_set(diag, "command line", 0, "--turns", "at most %d turns", MAX_TURNS), NPU_EINVAL;
  a->turns = turns ? (uint32_t)turns : auto_turns(a->m);
  if (a->m % a->turns)
    return npu_diag_set(diag, "command line", 0, "--turns", "%u turns do not divide m = %u rows", a->turns, a->m),
           NPU_EINVAL;
  a->s = a->m / a->turns;
  if (chip->org != ARCH_ORG_SPLIT || chip->aiv_count < chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--arch",
                        "all_gather_matmul moves data with the vector cores beside each cube core (Ascend's "
                        "separate AIC / AIV cores); %s has none",
                        chip->name),
           NPU_EUNSUPPORTED;
  a->units = chip->aic_count;
  a->naiv = chip->aiv_count / chip->aic_count >= 2 ? 2 * a->units : a->units;
  uint64_t ub = chip->buf[ARCH_BUF_UB].size_bytes;
  uint64_t piece_bytes = PIECE_BYTES < ub / 2 ? PIECE_BYTES : ub / 2 / 32 * 32;
  a->piece = piece_bytes * 8 / (uint64_t)npu_dtype_bits(a->in);
  int rc = ops_gemm_plan(&a->g, chip, a->s, a->n, a->k, a->in, a->tb, diag);
  if (rc) return rc;
  NPU_ASSERT(ops_gemm_unit_bytes() <= sizeof ((struct agmm_unit *)0)->gemm);
  a->nb = ops_gemm_blocks(a->g);
  a->out = ops_gemm_out(a->g);
  return 0;
}

static int ranks_of(const void *p)
{
  return (int)((const struct agmm *)p)->ranks;
}

static void setup(void *p, struct op_exec *x)
{
  struct agmm *a = p;
  static const char *const what[T_PER_RANK] = {"x1", "x2", "gather_out", "out"};
  for (uint32_t r = 0; r < a->ranks; r++) {
    uint64_t count[T_PER_RANK] = {(uint64_t)a->m * a->k, (uint64_t)a->k * a->n, (uint64_t)a->ranks * a->m * a->k,
                                  (uint64_t)a->ranks * a->m * a->n};
    for (int i = 0; i < T_PER_RANK; i++) {
      snprintf(a->names[r][i], sizeof a->names[r][i], "%s.%u", what[i], r);
      enum op_init init = i <= T_X2 ? OP_INIT_UNIFORM : OP_INIT_ZERO;
      struct op_tensor *t = op_tensor(x, a->names[r][i], i == T_OUT ? a->out : a->in, count[i], init);
      op_tensor_place(x, t, (int)r);
      a->t[r][i] = t->addr;
    }
  }
  struct core_kernel k = {.name = "all_gather_matmul", .mode = CORE_MODE_MIX, .block_dim = a->units,
                          .nblocks = (uint64_t)a->ranks * a->turns * a->nb, .ctx = a, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .unit_ctx_bytes = sizeof(struct agmm_unit)};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  const struct agmm *a = p;
  return 2.0 * a->ranks * ((double)a->ranks * a->m) * a->n * (double)a->k;
}

static double eps_of(enum npu_dtype t)
{
  return t == NPU_DT_FP16 ? 1.0 / 1024 : 1.0 / 128;
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct agmm *a = p;
  uint64_t rows = (uint64_t)a->ranks * a->m;
  double *G = npu_xmalloc((size_t)(rows * a->k) * sizeof *G); /* the gathered x1 */
  for (uint32_t r = 0; r < a->ranks; r++) {
    double *x1 = op_decode(op_find_tensor(x, a->names[r][T_X1]));
    memcpy(G + (size_t)r * a->m * a->k, x1, (size_t)a->m * a->k * sizeof *G);
    free(x1);
  }
  double atol = 1e-6 * sqrt((double)a->k) + eps_of(a->out) * 0.5, rtol = eps_of(a->out) * 0.51 + 1e-6;
  double worst = 0, gather_err = 0;
  double *ref = npu_xmalloc((size_t)(rows * a->n) * sizeof *ref);
  for (uint32_t r = 0; r < a->ranks; r++) {
    double *B = op_decode(op_find_tensor(x, a->names[r][T_X2]));
    for (uint64_t i = 0; i < rows; i++)
      for (uint32_t j = 0; j < a->n; j++) {
        double sum = 0;
        for (uint32_t kk = 0; kk < a->k; kk++)
          sum += G[i * a->k + kk] * (a->tb ? B[(size_t)j * a->k + kk] : B[(size_t)kk * a->n + j]);
        ref[i * a->n + j] = sum;
      }
    double *C = op_decode(op_find_tensor(x, a->names[r][T_OUT]));
    double e = op_compare(C, ref, (size_t)(rows * a->n), atol, rtol);
    if (e > worst) worst = e;
    if (a->gather) {
      double *g = op_decode(op_find_tensor(x, a->names[r][T_GATHER]));
      double eg = op_compare(g, G, (size_t)(rows * a->k), 0, 0);
      if (eg > gather_err) gather_err = eg;
      free(g);
    }
    free(B);
    free(C);
  }
  free(ref);
  free(G);
  /* the gather is a copy: any difference fails */
  if (gather_err > 0) worst = INFINITY;
  *max_err = worst;
  snprintf(summary, n, "%u devices, %ux%ux%u %s in %u turns: worst error %.3g of tolerance (atol %.3g, rtol %.3g)%s",
           a->ranks, a->ranks * a->m, a->n, a->k, npu_dtype_name(a->in), a->turns, worst, atol, rtol,
           gather_err > 0 ? "; gather_out differs from the gathered x1" : "");
  return worst <= 1;
}

static void release(void *p)
{
  struct agmm *a = p;
  ops_gemm_free(a->g);
  a->g = NULL;
}

const struct op_desc op_all_gather_matmul = {
    .name = "all_gather_matmul",
    .summary = "MC2 AllGatherMatmul on a server: all-gather of x1's row shards fused with the matmul by x2 "
               "(vector cores put the shards over the links, cube cores multiply each turn as it lands)",
    .params = params,
    .nparams = NPARAMS,
    .plan_size = sizeof(struct agmm),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .release = release,
    .ranks = ranks_of,
    .bwd = {.kind = OP_BWD_NONE,
            .rule = "none as an operator: a training step models MC2 with plan.tp_overlap = \"mc2\" "
                    "(workloads/expand.c)"},
};
