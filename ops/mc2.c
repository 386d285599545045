/*
 * mc2.c - MC2 ("matmul and communication fused") operators that run on every device of a server at
 * once (core_launch_opts.ranks): all_gather_matmul here, matmul_reduce_scatter and
 * matmul_all_reduce below (the MoE pair: mc2_moe.c); what they share (mc2_int.h) and their closed
 * forms (the analytic fidelity).
 *
 * all_gather_matmul: CANN's AllGatherMatmul, the
 * all-gather of a tensor-parallel group's row shards followed by a matmul, as one kernel that runs
 * on every device of a server at once (core_launch_opts.ranks).
 *
 *   gather_out = all_gather(x1)            [ranks x m, k]   (x1: [m, k] on every device)
 *   out        = gather_out @ x2           [ranks x m, n]   (x2: [k, n], or [n, k] with trans_b)
 *
 * The scheme is the one of CANN's MC2 kernels and of the PTO allgather_gemm example for Atlas A2
 * (pto-isa kernels/manual/a2a3/allgather_gemm: an AIV communication kernel that puts chunks with
 * TPUT and notifies, an AIC compute kernel that waits on chunk flags):
 *   - the vector cores move the data, in one team per peer (and one for the device's own
 *     gather_out: mc2_team): each holds a share of every turn's rows of the device's own x1, loads
 *     it into UB (MTE2) and writes it (MTE3) into its team's device's gather_out over the link
 *     between the two, so that every link of the full mesh carries data all the time; after a
 *     turn every vector core notifies each peer;
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
#include "ops/mc2_int.h"
#include "ops/vec.h"

#define MAX_RANKS MC2_MAX_RANKS
#define MAX_TURNS 16
#define PIECE_BYTES (64u * 1024u) /* a vector core's UB buffer; two of them ping-pong */

static const struct op_param params[] = {
    {"m", OP_P_DIM, NULL, "rows of x1 on each device (the all-gathered rows: ranks x m)", NULL},
    {"k", OP_P_DIM, NULL, "columns of x1, rows of x2", NULL},
    {"n", OP_P_DIM, NULL, "columns of x2 and of the output on each device", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "element type of x1 and x2: fp16 or bf16 (the output's too)", NULL},
    {"ranks", OP_P_DIM, "8", "devices of the tensor-parallel group (2..16), all of one server", NULL},
    {"turns", OP_P_INT, "0", "communication turns (CANN's comm_turn): the gather in pieces of m / turns rows "
                             "(0: auto, the most up to 8 that divide m with at least 128 rows each)", NULL},
    {"trans_b", OP_P_BOOL, "false", "x2 stored [n, k]", NULL},
    {"gather_output", OP_P_BOOL, "true", "also write the gathered x1 into gather_out on every device", NULL},
};

/* Why these operators have no backward. */
#define TP_RULE "none as an operator: a training step models MC2 with plan.tp_overlap = \"mc2\" (workloads/expand.c)"

/* What the all-gather and reduce-scatter operators share: shapes, type, devices, turns and the
 * cores that run them. */
struct mc2_shape {
  uint32_t m, n, k, ranks, turns;
  enum npu_dtype in;
  bool tb;
  int units, naiv; /* AI cores (launch units) and vector cores per device */
};

enum { T_X1, T_X2, T_GATHER, T_OUT, T_PER_RANK };

struct agmm {
  const struct arch_chip *chip;
  struct mc2_shape sh;
  uint32_t s;                        /* rows of one turn */
  enum npu_dtype out;
  bool gather;
  struct gemm *g;                    /* the GEMM of one turn's rows of one device */
  uint64_t nb;                       /* its blocks */
  uint64_t piece;                    /* elements per UB buffer */
  uint64_t t[MAX_RANKS][T_PER_RANK]; /* tensor addresses, per device */
  char names[MAX_RANKS][T_PER_RANK][24];
};

static int signal_id(const struct agmm *a, uint32_t turn, uint32_t sender)
{
  return (int)(turn * a->sh.ranks + sender);
}

/* ------------------------------------------------------------------ the vector cores: the gather */

/* ------------------------------------------------------------------ what the MC2 operators share */

void mc2_share(uint64_t elems, int workers, int w, uint64_t *lo, uint64_t *hi)
{
  uint64_t share = (elems + (uint64_t)workers - 1) / (uint64_t)workers;
  share = (share + 255) / 256 * 256; /* 32-byte aligned shares for every dtype */
  *lo = (uint64_t)w * share < elems ? (uint64_t)w * share : elems;
  *hi = *lo + share < elems ? *lo + share : elems;
}

uint64_t mc2_piece(const struct arch_chip *chip, enum npu_dtype t)
{
  uint64_t ub = chip->buf[ARCH_BUF_UB].size_bytes;
  uint64_t bytes = PIECE_BYTES < ub / 2 ? PIECE_BYTES : ub / 2 / 32 * 32;
  return bytes * 8 / (uint64_t)npu_dtype_bits(t);
}

void mc2_put_begin(struct core_tp *t)
{
  for (int b = 0; b < 2; b++) core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
}

void mc2_put_end(struct core_tp *t)
{
  for (int b = 0; b < 2; b++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
}

void mc2_put(struct core_tp *t, enum npu_dtype dt, uint64_t piece, uint32_t *stage, uint64_t src,
             const uint64_t *dst, uint32_t ndst, uint64_t len)
{
  for (uint64_t e = 0; e < len; e += piece) {
    uint32_t n = (uint32_t)(len - e < piece ? len - e : piece);
    int b = (int)((*stage)++ % 2);
    struct core_tile ub = ops_tile(MEM_UB, CORE_ND, dt, (uint64_t)b * mc2_bytes(dt, piece), 1, n, n);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
    struct core_tile from = ops_tile(MEM_GM, CORE_ND, dt, src + mc2_bytes(dt, e), 1, n, n);
    core_copy(t, &ub, &from);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, b);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE3, b);
    for (uint32_t i = 0; i < ndst; i++) {
      struct core_tile to = ops_tile(MEM_GM, CORE_ND, dt, dst[i] + mc2_bytes(dt, e), 1, n, n);
      core_copy(t, &to, &ub);
    }
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, b);
  }
}

void mc2_team(uint32_t rank, uint32_t ranks, int naiv, int v, uint32_t *to, int *w, int *nw)
{
  int q = v % (int)ranks;
  *to = (rank + 1 + (uint32_t)q) % ranks;
  *w = v / (int)ranks;
  *nw = naiv / (int)ranks + (q < naiv % (int)ranks ? 1 : 0);
}

uint32_t mc2_peer(uint32_t rank, uint32_t ranks, int v, uint32_t q)
{
  return q < ranks - 1 ? (rank + 1 + (uint32_t)(v + (int)q) % (ranks - 1)) % ranks : rank;
}

/* ------------------------------------------------------------------ the vector cores: the gather */

/* Vector core v (0..naiv-1) of device `rank`, in the team of one device (mc2_team): its team's
 * share of each turn's rows of x1, put into that device's gather_out (the device itself: its own
 * gather_out, when asked for), then a notify to each peer per turn. */
static void gather_program(struct core_tp *t, const void *plan, int rank, int v)
{
  const struct agmm *a = plan;
  uint32_t to, stage = 0;
  int w, nw;
  mc2_team((uint32_t)rank, a->sh.ranks, a->sh.naiv, v, &to, &w, &nw);
  uint64_t lo, hi;
  mc2_share((uint64_t)a->s * a->sh.k, nw, w, &lo, &hi);
  mc2_put_begin(t);
  for (uint32_t turn = 0; turn < a->sh.turns; turn++) {
    uint64_t first = (uint64_t)turn * a->s * a->sh.k; /* the turn's first element in x1 */
    uint64_t dst = a->t[to][T_GATHER] + mc2_bytes(a->sh.in, (uint64_t)rank * a->sh.m * a->sh.k + first + lo);
    if (to != (uint32_t)rank || a->gather)
      mc2_put(t, a->sh.in, a->piece, &stage, a->t[rank][T_X1] + mc2_bytes(a->sh.in, first + lo), &dst, 1, hi - lo);
    for (uint32_t q = 1; q < a->sh.ranks; q++)
      core_notify(t, CORE_PIPE_MTE3, (int)((uint32_t)rank + q) % (int)a->sh.ranks, signal_id(a, turn, (uint32_t)rank));
  }
  mc2_put_end(t);
}

void mc2_unit_begin(struct core_tp *t, struct gemm *g, int naiv, int units,
                           void (*program)(struct core_tp *t, const void *plan, int rank, int v), const void *plan)
{
  memset(core_unit_ctx(t), 0, sizeof(struct mc2_unit));
  int rank = core_rank(t), per = naiv / units;
  for (int sub = 0; sub < per; sub++) {
    core_select(t, sub == 0 ? CORE_SUB_AIV0 : CORE_SUB_AIV1);
    program(t, plan, rank, core_unit(t) * per + sub);
  }
  core_select(t, CORE_SUB_AIC);
  ops_gemm_unit_begin(t, g);
}

void mc2_unit_end(struct core_tp *t, struct gemm *g)
{
  core_select(t, CORE_SUB_AIC);
  ops_gemm_unit_end(t, g);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct agmm *a = ctx;
  mc2_unit_begin(t, a->g, a->sh.naiv, a->sh.units, gather_program, a);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  mc2_unit_end(t, ((struct agmm *)ctx)->g);
}

/* ------------------------------------------------------------------ the cube cores: the GEMM */

/* Block b: the device's own rows first (turn by turn), then turn by turn every peer's slice. */
static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct agmm *a = ctx;
  struct mc2_unit *u = core_unit_ctx(t);
  uint32_t rank = (uint32_t)core_rank(t), turn, sender;
  uint64_t own = (uint64_t)a->sh.turns * a->nb, inner;
  if (b < own) {
    turn = (uint32_t)(b / a->nb);
    sender = rank;
    inner = b % a->nb;
  } else {
    uint64_t r = b - own;
    turn = (uint32_t)(r / ((uint64_t)(a->sh.ranks - 1) * a->nb));
    sender = (rank + 1 + (uint32_t)((r / a->nb) % (a->sh.ranks - 1))) % a->sh.ranks;
    inner = r % a->nb;
  }
  core_select(t, CORE_SUB_AIC);
  uint64_t row = (uint64_t)sender * a->sh.m + (uint64_t)turn * a->s; /* in gather_out and out */
  uint64_t A;
  if (sender == rank) {
    A = a->t[rank][T_X1] + mc2_bytes(a->sh.in, (uint64_t)turn * a->s * a->sh.k);
  } else {
    A = a->t[rank][T_GATHER] + mc2_bytes(a->sh.in, row * a->sh.k);
    unsigned char *w = &u->waited[turn * a->sh.ranks + sender];
    if (!*w) { /* the slice's notifies: one from every vector core of the sender */
      core_notify_wait(t, CORE_PIPE_MTE2, signal_id(a, turn, sender), (uint32_t)a->sh.naiv);
      *w = 1;
    }
  }
  ops_gemm_block_at(t, a->g, inner, A, a->t[rank][T_X2], a->t[rank][T_OUT] + mc2_bytes(a->out, row * a->sh.n));
}

/* ------------------------------------------------------------------ plan, setup, check */

/* The turns when none are asked for: the most, up to 8, of at least 128 rows each (one cube tile
 * high), a multiple of 16 rows. Chosen from the kernels' own times on the 910B2 server, as a
 * tiling function chooses (m 512 and 1024 by k 512, 2048, 4096 and n 4096, 2048, 1536, the
 * all-gather and the reduce-scatter: 128-row turns the fastest in 9 of the 12 cases and within 6%
 * of it in the others; 64-row turns up to 34% slower, 256-row ones up to 17%). */
static uint32_t auto_turns(uint32_t m)
{
  for (uint32_t t = 8; t > 1; t--)
    if (m % t == 0 && m / t >= 128 && (m / t) % 16 == 0) return t;
  return 1;
}

int mc2_devices(const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct mc2_devices *dv, struct npu_diag *diag)
{
  uint64_t ranks = op_u(d, args, "ranks");
  dv->in = op_dtype(d, args, "dtype");
  if (dv->in != NPU_DT_BF16 && dv->in != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--dtype", "fp16 or bf16 (as CANN's MC2 operators), not %s",
                        npu_dtype_name(dv->in)),
           NPU_EUNSUPPORTED;
  if (ranks < 2 || ranks > MAX_RANKS)
    return npu_diag_set(diag, "command line", 0, "--ranks", "2..%d devices, not %llu", MAX_RANKS,
                        (unsigned long long)ranks),
           NPU_EINVAL;
  dv->ranks = (uint32_t)ranks;
  if (chip->org != ARCH_ORG_SPLIT || chip->aiv_count < chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--arch",
                        "%s moves data with the vector cores beside each cube core (Ascend's separate AIC / AIV "
                        "cores); %s has none",
                        d->name, chip->name),
           NPU_EUNSUPPORTED;
  dv->units = chip->aic_count;
  dv->naiv = chip->aiv_count / chip->aic_count >= 2 ? 2 * dv->units : dv->units;
  return 0;
}

static int mc2_shape(const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                     struct mc2_shape *sh, struct npu_diag *diag)
{
  uint64_t m = op_u(d, args, "m"), n = op_u(d, args, "n"), k = op_u(d, args, "k");
  uint64_t turns = op_u(d, args, "turns");
  if (m > 65536 || n > 65536 || k > 65536)
    return npu_diag_set(diag, "command line", 0, "--m", "dimensions above 65536 are not supported"), NPU_EINVAL;
  struct mc2_devices dv;
  int rc = mc2_devices(d, args, chip, &dv, diag);
  if (rc) return rc;
  *sh = (struct mc2_shape){.m = (uint32_t)m, .n = (uint32_t)n, .k = (uint32_t)k, .in = dv.in,
                           .tb = op_u(d, args, "trans_b"), .ranks = dv.ranks, .units = dv.units, .naiv = dv.naiv};
  if (turns > MAX_TURNS)
    return npu_diag_set(diag, "command line", 0, "--turns", "at most %d turns", MAX_TURNS), NPU_EINVAL;
  sh->turns = turns ? (uint32_t)turns : auto_turns(sh->m);
  if (sh->m % sh->turns)
    return npu_diag_set(diag, "command line", 0, "--turns", "%u turns do not divide m = %u rows", sh->turns, sh->m),
           NPU_EINVAL;
  return 0;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct agmm *a = p;
  memset(a, 0, sizeof *a);
  a->chip = chip;
  int rc = mc2_shape(d, args, chip, &a->sh, diag);
  if (rc) return rc;
  a->s = a->sh.m / a->sh.turns;
  a->out = a->sh.in;
  a->gather = op_u(d, args, "gather_output");
  a->piece = mc2_piece(chip, a->sh.in);
  rc = ops_gemm_plan(&a->g, chip, a->s, a->sh.n, a->sh.k, a->sh.in, a->sh.tb, (int)a->sh.ranks, diag);
  if (rc) return rc;
  NPU_ASSERT(ops_gemm_unit_bytes() <= sizeof ((struct mc2_unit *)0)->gemm);
  a->nb = ops_gemm_blocks(a->g);
  a->out = ops_gemm_out(a->g);
  return 0;
}

static int ranks_of(const void *p)
{
  return (int)((const struct agmm *)p)->sh.ranks;
}

static void setup(void *p, struct op_exec *x)
{
  struct agmm *a = p;
  static const char *const what[T_PER_RANK] = {"x1", "x2", "gather_out", "out"};
  for (uint32_t r = 0; r < a->sh.ranks; r++) {
    uint64_t count[T_PER_RANK] = {(uint64_t)a->sh.m * a->sh.k, (uint64_t)a->sh.k * a->sh.n, (uint64_t)a->sh.ranks * a->sh.m * a->sh.k,
                                  (uint64_t)a->sh.ranks * a->sh.m * a->sh.n};
    for (int i = 0; i < T_PER_RANK; i++) {
      snprintf(a->names[r][i], sizeof a->names[r][i], "%s.%u", what[i], r);
      enum op_init init = i <= T_X2 ? OP_INIT_UNIFORM : OP_INIT_ZERO;
      struct op_tensor *t = op_tensor(x, a->names[r][i], i == T_OUT ? a->out : a->sh.in, count[i], init);
      op_tensor_place(x, t, (int)r);
      a->t[r][i] = t->addr;
    }
  }
  struct core_kernel k = {.name = "all_gather_matmul", .mode = CORE_MODE_MIX, .block_dim = a->sh.units,
                          .nblocks = (uint64_t)a->sh.ranks * a->sh.turns * a->nb, .ctx = a, .unit_begin = unit_begin,
                          .unit_end = unit_end, .block = block, .unit_ctx_bytes = sizeof(struct mc2_unit)};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  const struct agmm *a = p;
  return 2.0 * a->sh.ranks * ((double)a->sh.ranks * a->sh.m) * a->sh.n * (double)a->sh.k;
}

double mc2_eps(enum npu_dtype t)
{
  return t == NPU_DT_FP16 ? 1.0 / 1024 : 1.0 / 128;
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct agmm *a = p;
  uint64_t rows = (uint64_t)a->sh.ranks * a->sh.m;
  double *G = npu_xmalloc((size_t)(rows * a->sh.k) * sizeof *G); /* the gathered x1 */
  for (uint32_t r = 0; r < a->sh.ranks; r++) {
    double *x1 = op_decode(op_find_tensor(x, a->names[r][T_X1]));
    memcpy(G + (size_t)r * a->sh.m * a->sh.k, x1, (size_t)a->sh.m * a->sh.k * sizeof *G);
    free(x1);
  }
  double atol = 1e-6 * sqrt((double)a->sh.k) + mc2_eps(a->out) * 0.5, rtol = mc2_eps(a->out) * 0.51 + 1e-6;
  double worst = 0, gather_err = 0;
  double *ref = npu_xmalloc((size_t)(rows * a->sh.n) * sizeof *ref);
  for (uint32_t r = 0; r < a->sh.ranks; r++) {
    double *B = op_decode(op_find_tensor(x, a->names[r][T_X2]));
    for (uint64_t i = 0; i < rows; i++)
      for (uint32_t j = 0; j < a->sh.n; j++) {
        double sum = 0;
        for (uint32_t kk = 0; kk < a->sh.k; kk++)
          sum += G[i * a->sh.k + kk] * (a->sh.tb ? B[(size_t)j * a->sh.k + kk] : B[(size_t)kk * a->sh.n + j]);
        ref[i * a->sh.n + j] = sum;
      }
    double *C = op_decode(op_find_tensor(x, a->names[r][T_OUT]));
    double e = op_compare(C, ref, (size_t)(rows * a->sh.n), atol, rtol);
    if (e > worst) worst = e;
    if (a->gather) {
      double *g = op_decode(op_find_tensor(x, a->names[r][T_GATHER]));
      double eg = op_compare(g, G, (size_t)(rows * a->sh.k), 0, 0);
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
           a->sh.ranks, a->sh.ranks * a->sh.m, a->sh.n, a->sh.k, npu_dtype_name(a->sh.in), a->sh.turns, worst, atol, rtol,
           gather_err > 0 ? "; gather_out differs from the gathered x1" : "");
  return worst <= 1;
}

static void release(void *p)
{
  struct agmm *a = p;
  ops_gemm_free(a->g);
  a->g = NULL;
}

/* ------------------------------------------------------------------ the analytic fidelity */

int mc2_part(const struct op_desc *d, const struct arch_chip *chip, const char *const *kv, int n,
             struct core_result *r, struct npu_diag *diag)
{
  struct op_args a;
  int rc = op_args_parse(d, &a, kv, n, diag);
  struct op_result *res = npu_xmalloc(sizeof *res);
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .seed = 1};
  if (!rc) rc = op_run(d, &a, chip, &o, res, diag);
  if (!rc) *r = res->total;
  free(res);
  return rc;
}

double mc2_link_rate(const struct arch_node *node)
{
  return node->link.bw_bytes_per_s * node->link_efficiency.value;
}

void mc2_form_result(struct core_result *out, const struct arch_chip *chip, const struct core_result *part,
                     int ranks, int naiv, double body, double link_s, uint64_t link_bytes, bool reads)
{
  double launch = chip->launch_overhead_s, t = launch + body, busy = part->time_s / t;
  *out = (struct core_result){.time_s = t, .launch_s = launch, .ranks = ranks, .link_bytes = link_bytes};
  out->gm_read_bytes = part->gm_read_bytes * (uint64_t)ranks + link_bytes; /* each copy reads and writes once */
  out->gm_write_bytes = part->gm_write_bytes * (uint64_t)ranks + link_bytes;
  out->l2_hit_bytes = part->l2_hit_bytes * (uint64_t)ranks;
  out->hbm_bytes = part->hbm_bytes * (uint64_t)ranks + 2 * link_bytes;
  out->hbm_bw_bytes_per_s = (double)out->hbm_bytes / t;
  out->l2_bw_bytes_per_s = (double)(out->gm_read_bytes + out->gm_write_bytes) / t;
  out->flops = part->flops * ranks;
  out->cube_macs = part->cube_macs * (uint64_t)ranks;
  out->instructions = part->instructions * (uint64_t)ranks;
  out->aic_used = part->aic_used * ranks;
  out->aic_total = chip->aic_count * ranks;
  out->aiv_used = naiv * ranks;
  out->aiv_total = chip->aiv_count * ranks;
  out->aic_mac_ratio = part->aic_mac_ratio * busy;
  out->aic_mte1_ratio = part->aic_mte1_ratio * busy;
  out->aic_mte2_ratio = part->aic_mte2_ratio * busy;
  out->aic_fixpipe_ratio = part->aic_fixpipe_ratio * busy;
  out->aic_scalar_ratio = part->aic_scalar_ratio * busy;
  *(reads ? &out->aiv_mte2_ratio : &out->aiv_mte3_ratio) = fmin(1, link_s / t);
  if (launch >= 0.5 * t)
    out->bottleneck = "launch_bound";
  else if (link_s > part->time_s - part->launch_s) /* the copies wait on the links */
    out->bottleneck = reads ? "mte2_bound" : "mte3_bound";
  else
    out->bottleneck = part->bottleneck;
}

/* The GEMM of a device's ranks x m rows (all_gather_matmul and the reduce-scatter operators),
 * tiled as the kernel tiles one turn's (turn: its plan): narrower turns, smaller tiles. */
static int device_gemm(const struct mc2_shape *sh, const struct gemm *turn, const struct arch_chip *chip,
                       struct core_result *g, struct npu_diag *diag)
{
  char kv[7][48];
  uint32_t tm, tn;
  ops_gemm_tiles(turn, &tm, &tn);
  snprintf(kv[0], sizeof kv[0], "m=%u", sh->ranks * sh->m);
  snprintf(kv[1], sizeof kv[1], "n=%u", sh->n);
  snprintf(kv[2], sizeof kv[2], "k=%u", sh->k);
  snprintf(kv[3], sizeof kv[3], "dtype=%s", npu_dtype_name(sh->in));
  snprintf(kv[4], sizeof kv[4], "trans_b=%s", sh->tb ? "true" : "false");
  snprintf(kv[5], sizeof kv[5], "tile_m=%u", tm);
  snprintf(kv[6], sizeof kv[6], "tile_n=%u", tn);
  const char *const args[] = {kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], kv[6]};
  return mc2_part(&op_gemm, chip, args, 7, g, diag);
}

/* The ideal pipeline: the device's own rows, turn by turn, then each turn's rows of the peers once
 * the turn has crossed the links (every link carries one slice of m / turns rows a turn, all links
 * at once) and its notifies have flown, the GEMM at the rate of the whole GEMM of the device. */
static int closed_form(const void *p, const struct arch_chip *chip, const struct arch_node *node,
                       struct core_result *out, struct npu_diag *diag)
{
  const struct agmm *a = p;
  struct core_result g;
  int rc = device_gemm(&a->sh, a->g, chip, &g, diag);
  if (rc) return rc;
  double G = g.time_s - g.launch_s, lat = node->link.latency_s, T = a->sh.turns;
  double slice = G / (a->sh.ranks * T), turn_s = (double)mc2_bytes(a->sh.in, (uint64_t)a->s * a->sh.k) / mc2_link_rate(node);
  double end = T * slice;
  for (uint32_t t = 0; t < a->sh.turns; t++) end = fmax(end, (t + 1) * turn_s + 2 * lat) + (a->sh.ranks - 1) * slice;
  uint64_t bytes = mc2_bytes(a->sh.in, (uint64_t)a->sh.ranks * (a->sh.ranks - 1) * a->sh.m * a->sh.k);
  mc2_form_result(out, chip, &g, (int)a->sh.ranks, a->sh.naiv, end, T * turn_s, bytes, false);
  return 0;
}

const struct op_desc op_all_gather_matmul =
    MC2_DESC("all_gather_matmul", "MC2 AllGatherMatmul on a server: all-gather of x1's row shards fused with the matmul by x2 "
                                  "(vector cores put the shards over the links, cube cores multiply each turn as it lands)",
             params, struct agmm, , TP_RULE);

/* ================================================================== matmul_reduce_scatter */

/*
 * matmul_reduce_scatter: CANN's MatmulReduceScatter, the row-parallel linear of tensor
 * parallelism: every device multiplies all ranks x m rows of its x1 (its shard of K) by its x2,
 * and device r keeps rows [r m, (r + 1) m) of the sum over the devices:
 *
 *   out_r = sum over devices d of (x1_d @ x2_d)[r m : (r + 1) m]      [m, n]
 *
 *   - the cube cores run the GEMM turn by turn (CANN's comm_turn: m / turns rows of every owner's
 *     chunk a turn), in each turn the peers' chunks first and the device's own last, writing the
 *     partial products into the device's workspace (`partial`) and notifying the chunk's owner
 *     after each block;
 *   - the owner's vector cores, in one team per device (mc2_team), once a turn's signal has every
 *     device's blocks, read their share of that turn's rows from their team's device's workspace
 *     (across the link: PTO's TGET), cast them to fp32 and add them atomically into the owner's
 *     fp32 sum (`acc`, Ascend C's SetAtomicAdd, as HCCL's AIV reduce kernels do); once all have,
 *     each casts its share of the sum into the output, while the cube cores run the next turn.
 * Partial products travel in the input type, as HCCL's reduce-scatter of the matmul's output does.
 */

const struct op_desc op_matmul_all_reduce;

/* The parameters of matmul_reduce_scatter and matmul_all_reduce. */
static const struct op_param rs_params[] = {
    {"m", OP_P_DIM, NULL, "rows each device reduces, of the ranks x m rows of x1 (matmul_reduce_scatter's output; "
                          "matmul_all_reduce's has all ranks x m)", NULL},
    {"k", OP_P_DIM, NULL, "columns of x1 and rows of x2: each device's shard of the reduction", NULL},
    {"n", OP_P_DIM, NULL, "columns of x2 and of the output", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "element type of x1, x2, the partial products and the output: fp16 or bf16", NULL},
    {"ranks", OP_P_DIM, "8", "devices of the tensor-parallel group (2..16), all of one server", NULL},
    {"turns", OP_P_INT, "0", "communication turns (CANN's comm_turn): the reduction in pieces of m / turns rows "
                             "(0: auto, the most up to 8 that divide m with at least 128 rows each)", NULL},
    {"trans_b", OP_P_BOOL, "false", "x2 stored [n, k]", NULL},
};

enum { R_X1, R_X2, R_PART, R_ACC, R_OUT, R_PER_RANK };

#define RS_PIECE 8192u /* elements of a vector core's step: 16 bytes each in UB */

struct mmrs {
  const struct arch_chip *chip;
  struct mc2_shape sh;
  uint32_t s;                         /* rows of one turn */
  struct gemm *g;                     /* the GEMM of one turn's rows of one owner's chunk */
  uint64_t nb;
  bool all_reduce;                    /* matmul_all_reduce: every device gets every owner's rows */
  uint64_t piece;                     /* elements of a put's UB buffer (the all-reduce's last step) */
  uint64_t t[MAX_RANKS][R_PER_RANK];
  char names[MAX_RANKS][R_PER_RANK][24];
};

/* UB of a vector core: two buffers for what is loaded, two for what is stored, each of RS_PIECE
 * elements of up to 4 bytes. */
static uint64_t rs_ub(int stored, int b)
{
  return ((uint64_t)stored * 2 + (uint64_t)b) * 4 * RS_PIECE;
}

/* len elements from GM src (type from) through UB, cast to type to, stored to GM dst, added to
 * what is there with add (Ascend C's SetAtomicAdd), piece by piece, double buffered. Flags: MTE2
 * -> V (loaded), V -> MTE2 (load buffer free), V -> MTE3 (cast), MTE3 -> V (store buffer free),
 * set before the first call (rs_pass_begin) and waited for after the last (rs_pass_end). */
static void rs_pass(struct core_tp *t, uint32_t *stage, uint64_t src, enum npu_dtype from, uint64_t dst,
                    enum npu_dtype to, bool add, uint64_t len)
{
  for (uint64_t e = 0; e < len; e += RS_PIECE) {
    uint32_t n = (uint32_t)(len - e < RS_PIECE ? len - e : RS_PIECE);
    int b = (int)((*stage)++ % 2);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
    vx_load(t, rs_ub(0, b), src + mc2_bytes(from, e), from, 1, n, n, n);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, b);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, b);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
    vx_cast(t, rs_ub(1, b), to, rs_ub(0, b), from, n);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, b);
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, b);
    struct core_copy c = {.src = vx_nd(MEM_UB, to, rs_ub(1, b), 1, n, n), .dst = vx_nd(MEM_GM, to, dst + mc2_bytes(to, e), 1, n, n),
                          .scale = 1.0f, .fb_scale = UINT64_MAX, .atomic_add = add};
    core_copy_ex(t, &c);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
  }
}

static void rs_pass_begin(struct core_tp *t)
{
  for (int b = 0; b < 2; b++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
  }
}

static void rs_pass_end(struct core_tp *t)
{
  for (int b = 0; b < 2; b++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, b);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, b);
  }
}

/*
 * Vector core v of device `rank`, in the team of one device `from` (mc2_team: one team per link,
 * and one for the device's own products). Per turn, once every device's blocks of the turn are in:
 *   1. its share of the team's device's products of this device's rows (across the link, PTO's
 *      TGET), cast to fp32 and added (atomically) into the device's fp32 sum (`acc`); a notify;
 *   2. once all the device's vector cores have added theirs, its share of the sum cast to the
 *      output type into the output (the all-reduce: at the rows' place), and for the all-reduce
 *   3. once all of them have written theirs, its team's share of the rows put into the output of
 *      the team's device (across the link the other way: the all-gather half).
 * Signals of the device: turn (the cube cores' blocks), turns + turn (added), 2 turns + turn
 * (written).
 */
static void reduce_program(struct core_tp *t, const void *plan, int rank, int v)
{
  const struct mmrs *a = plan;
  uint32_t T = a->sh.turns, me = (uint32_t)rank, from, stage = 0;
  int w, nw;
  mc2_team(me, a->sh.ranks, a->sh.naiv, v, &from, &w, &nw);
  uint64_t elems = (uint64_t)a->s * a->sh.n, lo, hi;
  for (uint32_t turn = 0; turn < T; turn++) {
    uint64_t first = ((uint64_t)me * a->sh.m + (uint64_t)turn * a->s) * a->sh.n; /* in every partial */
    uint64_t acc = (uint64_t)turn * elems, out = a->all_reduce ? first : acc;
    core_notify_wait(t, CORE_PIPE_MTE2, (int)turn, (uint32_t)(a->sh.ranks * a->nb));
    mc2_share(elems, nw, w, &lo, &hi);
    rs_pass_begin(t);
    rs_pass(t, &stage, a->t[from][R_PART] + mc2_bytes(a->sh.in, first + lo), a->sh.in,
            a->t[me][R_ACC] + mc2_bytes(NPU_DT_FP32, acc + lo), NPU_DT_FP32, true, hi - lo);
    rs_pass_end(t);
    core_notify(t, CORE_PIPE_MTE3, (int)me, (int)(T + turn));
    core_notify_wait(t, CORE_PIPE_MTE2, (int)(T + turn), (uint32_t)a->sh.naiv);
    mc2_share(elems, a->sh.naiv, v, &lo, &hi);
    rs_pass_begin(t);
    rs_pass(t, &stage, a->t[me][R_ACC] + mc2_bytes(NPU_DT_FP32, acc + lo), NPU_DT_FP32,
            a->t[me][R_OUT] + mc2_bytes(a->sh.in, out + lo), a->sh.in, false, hi - lo);
    rs_pass_end(t);
    if (!a->all_reduce) continue;
    core_notify(t, CORE_PIPE_MTE3, (int)me, (int)(2 * T + turn));
    core_notify_wait(t, CORE_PIPE_MTE2, (int)(2 * T + turn), (uint32_t)a->sh.naiv);
    if (from == me) continue;
    mc2_share(elems, nw, w, &lo, &hi);
    uint64_t dst = a->t[from][R_OUT] + mc2_bytes(a->sh.in, out + lo);
    mc2_put_begin(t);
    mc2_put(t, a->sh.in, a->piece, &stage, a->t[me][R_OUT] + mc2_bytes(a->sh.in, out + lo), &dst, 1, hi - lo);
    mc2_put_end(t);
  }
}

static void rs_unit_begin(struct core_tp *t, void *ctx)
{
  struct mmrs *a = ctx;
  mc2_unit_begin(t, a->g, a->sh.naiv, a->sh.units, reduce_program, a);
}

static void rs_unit_end(struct core_tp *t, void *ctx)
{
  mc2_unit_end(t, ((struct mmrs *)ctx)->g);
}

/* Block b: turn b / (ranks x nb); in a turn the owners after this device first, its own last. */
static void rs_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct mmrs *a = ctx;
  uint32_t rank = (uint32_t)core_rank(t);
  uint64_t per_turn = (uint64_t)a->sh.ranks * a->nb;
  uint32_t turn = (uint32_t)(b / per_turn), q = (uint32_t)((b % per_turn) / a->nb);
  uint32_t owner = (rank + 1 + q) % a->sh.ranks;
  uint64_t row = (uint64_t)owner * a->sh.m + (uint64_t)turn * a->s;
  core_select(t, CORE_SUB_AIC);
  ops_gemm_block_at(t, a->g, b % a->nb, a->t[rank][R_X1] + mc2_bytes(a->sh.in, row * a->sh.k), a->t[rank][R_X2],
                    a->t[rank][R_PART] + mc2_bytes(a->sh.in, row * a->sh.n));
  core_notify(t, CORE_PIPE_FIX, (int)owner, (int)turn);
}

static int rs_plan(void *p, const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                   struct npu_diag *diag)
{
  struct mmrs *a = p;
  memset(a, 0, sizeof *a);
  a->chip = chip;
  a->all_reduce = d == &op_matmul_all_reduce;
  int rc = mc2_shape(d, args, chip, &a->sh, diag);
  if (rc) return rc;
  a->s = a->sh.m / a->sh.turns;
  if (chip->buf[ARCH_BUF_UB].size_bytes < rs_ub(2, 0))
    return npu_diag_set(diag, "command line", 0, "--arch", "%s's UB holds less than a reduction step (%llu bytes)",
                        chip->name, (unsigned long long)rs_ub(2, 0)),
           NPU_EUNSUPPORTED;
  a->piece = mc2_piece(chip, a->sh.in);
  rc = ops_gemm_plan(&a->g, chip, a->s, a->sh.n, a->sh.k, a->sh.in, a->sh.tb, (int)a->sh.ranks, diag);
  if (rc) return rc;
  NPU_ASSERT(ops_gemm_out(a->g) == a->sh.in); /* a plain GEMM writes its input type */
  a->nb = ops_gemm_blocks(a->g);
  if ((uint64_t)a->sh.ranks * a->nb > UINT32_MAX || a->sh.turns > CORE_SIGNAL_IDS)
    return npu_diag_set(diag, "command line", 0, "--m", "too many blocks per turn"), NPU_EINVAL;
  return 0;
}

static int rs_ranks_of(const void *p)
{
  return (int)((const struct mmrs *)p)->sh.ranks;
}

static void rs_setup(void *p, struct op_exec *x)
{
  struct mmrs *a = p;
  static const char *const what[R_PER_RANK] = {"x1", "x2", "partial", "acc", "out"};
  for (uint32_t r = 0; r < a->sh.ranks; r++) {
    uint64_t count[R_PER_RANK] = {(uint64_t)a->sh.ranks * a->sh.m * a->sh.k, (uint64_t)a->sh.k * a->sh.n,
                                  (uint64_t)a->sh.ranks * a->sh.m * a->sh.n, (uint64_t)a->sh.m * a->sh.n,
                                  (uint64_t)(a->all_reduce ? a->sh.ranks : 1) * a->sh.m * a->sh.n};
    for (int i = 0; i < R_PER_RANK; i++) {
      snprintf(a->names[r][i], sizeof a->names[r][i], "%s.%u", what[i], r);
      enum op_init init = i <= R_X2 ? OP_INIT_UNIFORM : i == R_PART || i == R_ACC ? OP_INIT_SCRATCH : OP_INIT_ZERO;
      struct op_tensor *t = op_tensor(x, a->names[r][i], i == R_ACC ? NPU_DT_FP32 : a->sh.in, count[i], init);
      op_tensor_place(x, t, (int)r);
      a->t[r][i] = t->addr;
    }
  }
  struct core_kernel k = {.name = a->all_reduce ? "matmul_all_reduce" : "matmul_reduce_scatter", .mode = CORE_MODE_MIX, .block_dim = a->sh.units,
                          .nblocks = (uint64_t)a->sh.turns * a->sh.ranks * a->nb, .ctx = a, .unit_begin = rs_unit_begin,
                          .unit_end = rs_unit_end, .block = rs_block, .unit_ctx_bytes = sizeof(struct mc2_unit)};
  op_kernel(x, &k);
}

static double rs_flops(const void *p)
{
  const struct mmrs *a = p;
  return 2.0 * a->sh.ranks * ((double)a->sh.ranks * a->sh.m) * a->sh.n * (double)a->sh.k;
}

/* Each partial product rounded to the input type (half an ulp of it), the fp32 sum, the output's
 * rounding: |out - sum| <= 0.51 eps (sum |partial| + |sum|) + fp32 accumulation. */
static bool rs_check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct mmrs *a = p;
  size_t mn = (size_t)a->sh.m * a->sh.n;
  double eps = mc2_eps(a->sh.in), worst = 0;
  double *sum = npu_xmalloc(mn * sizeof *sum), *mag = npu_xmalloc(mn * sizeof *mag);
  for (uint32_t r = 0; r < a->sh.ranks; r++) {
    memset(sum, 0, mn * sizeof *sum);
    memset(mag, 0, mn * sizeof *mag);
    for (uint32_t d = 0; d < a->sh.ranks; d++) {
      double *A = op_decode(op_find_tensor(x, a->names[d][R_X1])), *B = op_decode(op_find_tensor(x, a->names[d][R_X2]));
      for (uint32_t i = 0; i < a->sh.m; i++)
        for (uint32_t j = 0; j < a->sh.n; j++) {
          double s = 0;
          const double *row = A + ((size_t)r * a->sh.m + i) * a->sh.k;
          for (uint32_t kk = 0; kk < a->sh.k; kk++) s += row[kk] * (a->sh.tb ? B[(size_t)j * a->sh.k + kk] : B[(size_t)kk * a->sh.n + j]);
          sum[(size_t)i * a->sh.n + j] += s;
          mag[(size_t)i * a->sh.n + j] += fabs(s);
        }
      free(A);
      free(B);
    }
    /* reduce-scatter: owner r holds its rows; all-reduce: every device holds them at r m */
    for (uint32_t dev = a->all_reduce ? 0 : r; dev < (a->all_reduce ? a->sh.ranks : r + 1); dev++) {
      double *C = op_decode(op_find_tensor(x, a->names[dev][R_OUT]));
      const double *c = C + (a->all_reduce ? (size_t)r * mn : 0);
      for (size_t i = 0; i < mn; i++) {
        double bound = 0.51 * eps * (mag[i] + fabs(sum[i])) + a->sh.ranks * 1e-6 * sqrt((double)a->sh.k) + 1e-300;
        double e = isnan(c[i]) ? INFINITY : fabs(c[i] - sum[i]) / bound;
        if (e > worst) worst = e;
      }
      free(C);
    }
  }
  free(sum);
  free(mag);
  *max_err = worst;
  snprintf(summary, n, "%u devices, %ux%ux%u %s in %u turns: worst error %.3g of tolerance", a->sh.ranks,
           a->sh.ranks * a->sh.m, a->sh.n, a->sh.k, npu_dtype_name(a->sh.in), a->sh.turns, worst);
  return worst <= 1;
}

static void rs_release(void *p)
{
  struct mmrs *a = p;
  ops_gemm_free(a->g);
  a->g = NULL;
}

/* The ideal pipeline: turn t's products are complete once every device has run t + 1 turns of the
 * GEMM (at the whole GEMM's rate) and notified; the owner then reads them from the peers at the
 * link's rate, after the previous turn's reads. matmul_all_reduce: each link carries a device's
 * products for the owner and the owner's sums for the device in the same direction: twice. */
static int rs_closed_form(const void *p, const struct arch_chip *chip, const struct arch_node *node,
                          struct core_result *out, struct npu_diag *diag)
{
  const struct mmrs *a = p;
  struct core_result g;
  int rc = device_gemm(&a->sh, a->g, chip, &g, diag);
  if (rc) return rc;
  double G = g.time_s - g.launch_s, lat = node->link.latency_s, T = a->sh.turns, ways = a->all_reduce ? 2 : 1;
  double turn_s = ways * (double)mc2_bytes(a->sh.in, (uint64_t)a->s * a->sh.n) / mc2_link_rate(node), end = 0;
  for (uint32_t t = 0; t < a->sh.turns; t++) end = fmax(end, (t + 1) * G / T + lat) + turn_s + lat;
  uint64_t bytes = (uint64_t)ways * mc2_bytes(a->sh.in, (uint64_t)a->sh.ranks * (a->sh.ranks - 1) * a->sh.m * a->sh.n);
  mc2_form_result(out, chip, &g, (int)a->sh.ranks, a->sh.naiv, end, T * turn_s, bytes, true);
  return 0;
}

/* The two operators of this scheme differ by their name and summary only (rs_plan tells them apart). */
const struct op_desc op_matmul_reduce_scatter =
    MC2_DESC("matmul_reduce_scatter", "MC2 MatmulReduceScatter on a server: the matmul of every device's K shard fused "
                                      "with the reduce-scatter of the products (cube cores notify each block, vector "
                                      "cores sum each turn as it lands)",
             rs_params, struct mmrs, rs_, TP_RULE);

/* matmul_all_reduce: CANN's MatmulAllReduce, the reduce-scatter above whose owners then put their
 * reduced rows into every device's output across the links (the all-gather half of the
 * all-reduce, done by the same teams of vector cores, each to its own device). */
const struct op_desc op_matmul_all_reduce =
    MC2_DESC("matmul_all_reduce", "MC2 MatmulAllReduce on a server: the matmul of every device's K shard fused with the "
                                  "all-reduce of the products (matmul_reduce_scatter, then each owner puts its sums "
                                  "into every device)",
             rs_params, struct mmrs, rs_, TP_RULE);
