/*
 * mc2_moe.c - the MC2 operators of MoE expert parallelism, on every device of a server at once:
 * CANN's AlltoAllvGroupedMatMul (the dispatch: tokens to their experts' devices, then the experts'
 * grouped matmul) and GroupedMatMulAlltoAllv (the combine: the experts' grouped matmul, then the
 * results back to the tokens' devices), each with the shared expert's matmul run beside it.
 *
 *   alltoallv_grouped_matmul, on device d with e local experts:
 *     permute_out = the rows every device sends to d's experts, expert by expert,
 *                   source device by source device within an expert   [A_d, h]
 *     gmm_y       = permute_out @ gmm_w[expert] group by group         [A_d, n]
 *     mm_y        = mm_x @ mm_w (the shared expert)                    [shared_rows, shared_n]
 *   grouped_matmul_alltoallv, the way back:
 *     gmm_y       = gmm_x @ gmm_w[expert] group by group (workspace)   [A_d, n]
 *     y           = on every device, the rows it sent, in its order    [tokens, n]
 *     mm_y        = mm_x @ mm_w
 *
 * Every device's `tokens` rows are sorted by destination device, then by that device's local
 * expert (CANN's sendCounts: ranks x experts counts, device-major). How many rows go to each of the
 * ranks x experts experts follows a Zipf-like profile (skew 0: the same to each), the same from
 * every device (an expert's popularity is the expert's), so that with skew the first devices
 * receive the most rows, as the hot experts' devices of a real MoE layer do.
 *
 * The scheme is the one of CANN's AIV-mode kernel (ops-transformer mc2/allto_allv_grouped_mat_mul,
 * allto_allv_grouped_mat_mul_aiv_mode.h: the vector cores copy each expert's rows from every source
 * into the expert-major receive buffer, and signal the cube cores expert by expert, so that the
 * grouped matmul of one expert overlaps the transfer of the next):
 *   dispatch: each device's vector cores put, expert by expert, their share of the rows for that
 *     expert on every device into that device's permute_out (peers rotated per vector core, so that
 *     every link of the full mesh carries data at once), then notify every device; the cube cores
 *     run the shared expert's matmul first (it needs no communication), then the grouped matmul
 *     expert by expert, each expert once its signal has every device's vector cores' notifies;
 *   combine: the cube cores run the grouped matmul expert by expert, notifying their own device
 *     after each block; the vector cores, once an expert's blocks are all done, put their share of
 *     its rows to every source device's y, while the cube cores go on with the next expert, and
 *     with the shared expert's matmul last.
 * CANN copies each device's input into an HCCL window first, since its buffers are not mapped for
 * the peers; here one address space spans the devices (core_launch_opts.ranks), so the copies read
 * the input where it is. CANN supports these operators on Atlas A3 only; npusim runs them on any
 * full-mesh server.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/mc2_int.h"

#define MAX_RANKS MC2_MAX_RANKS
#define MAX_EXPERTS 32 /* local experts, as CANN's e <= 32 */
#define MAX_GLOBAL 256 /* ranks x experts, as CANN's e x epWorldSize <= 256 */

static const struct op_param params[] = {
    {"tokens", OP_P_DIM, NULL, "rows each device sends (tokens x top-k: CANN's BSK) and gets back", NULL},
    {"experts", OP_P_DIM, "4", "experts on each device (CANN's e, at most 32; ranks x experts at most 256)", NULL},
    {"h", OP_P_DIM, NULL, "hidden size: columns of the rows sent, rows of each expert's weight (H1)", NULL},
    {"n", OP_P_DIM, NULL, "columns of each expert's weight and of the expert outputs (N1)", NULL},
    {"skew", OP_P_REAL, "0", "Zipf exponent of the rows per expert over the ranks x experts experts (0: equal)",
     NULL},
    {"shared_rows", OP_P_INT, "0", "rows of the shared expert's matmul on each device (CANN's BS; 0: none)", NULL},
    {"shared_n", OP_P_INT, "0", "columns of the shared expert's weight (N2; 0: n); its rows are h", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "element type of every tensor: fp16 or bf16", NULL},
    {"ranks", OP_P_DIM, "8", "devices of the expert-parallel group (2..16), all of one server", NULL},
};


enum { T_GX, T_GW, T_PERM, T_GY, T_Y, T_MX, T_MW, T_MY, T_PER_RANK };

struct moe {
  const struct arch_chip *chip;
  bool combine; /* grouped_matmul_alltoallv */
  struct mc2_devices dv;
  uint32_t e, tokens, h, n, bs, n2;
  /* rows device s sends to expert x of device d: cnt[s][d * e + x] (the same for every s here,
   * kept per source as the kernel reads it); where they start in s's rows (send) and in d's
   * expert-major rows (recv[d][x * ranks + s]) */
  uint32_t cnt[MAX_RANKS][MAX_GLOBAL];
  uint64_t send[MAX_RANKS][MAX_GLOBAL], recv[MAX_RANKS][MAX_GLOBAL];
  uint32_t rows[MAX_RANKS];           /* rows device d's experts get (CANN's A) */
  struct gemm *gmm[MAX_RANKS];        /* device d's grouped matmul */
  uint64_t gblocks[MAX_RANKS];
  struct gemm *mm;                    /* the shared expert's matmul (NULL: none) */
  uint64_t mblocks;
  uint64_t piece;
  uint64_t t[MAX_RANKS][T_PER_RANK];
  char names[MAX_RANKS][T_PER_RANK][24];
};

/* ------------------------------------------------------------------ the vector cores */

/* Vector core w of a team of nw: its share of `rows` rows of `cols` elements from GM address src
 * to dst. */
static void put_rows(struct core_tp *t, const struct moe *a, uint32_t *stage, int w, int nw, uint64_t rows,
                     uint32_t cols, uint64_t src, uint64_t dst)
{
  uint64_t lo, hi;
  mc2_share(rows * cols, nw, w, &lo, &hi);
  if (hi <= lo) return;
  uint64_t to = dst + mc2_bytes(a->dv.in, lo);
  mc2_put(t, a->dv.in, a->piece, stage, src + mc2_bytes(a->dv.in, lo), &to, 1, hi - lo);
}

/* Dispatch, vector core v of device `rank`: expert by expert, its share of the rows its team's
 * device gets for that expert put into the device's permute_out, then a notify to every device. */
static void dispatch_program(struct core_tp *t, const void *plan, int rank, int v)
{
  const struct moe *a = plan;
  uint32_t s = (uint32_t)rank, stage = 0, d;
  int w, nw;
  mc2_team(s, a->dv.ranks, a->dv.naiv, v, &d, &w, &nw);
  mc2_put_begin(t);
  for (uint32_t x = 0; x < a->e; x++) {
    uint32_t g = d * a->e + x;
    put_rows(t, a, &stage, w, nw, a->cnt[s][g], a->h, a->t[s][T_GX] + mc2_bytes(a->dv.in, a->send[s][g] * a->h),
             a->t[d][T_PERM] + mc2_bytes(a->dv.in, a->recv[d][x * a->dv.ranks + s] * a->h));
    for (uint32_t q = 0; q < a->dv.ranks; q++) core_notify(t, CORE_PIPE_MTE3, (int)q, (int)x);
  }
  mc2_put_end(t);
}

/* Combine, vector core v of device `rank`: expert by expert, once the expert's blocks are done,
 * its share of the expert's rows from its team's device put back into that device's y. */
static void combine_program(struct core_tp *t, const void *plan, int rank, int v)
{
  const struct moe *a = plan;
  uint32_t d = (uint32_t)rank, stage = 0, s;
  int w, nw;
  mc2_team(d, a->dv.ranks, a->dv.naiv, v, &s, &w, &nw);
  mc2_put_begin(t);
  for (uint32_t x = 0; x < a->e; x++) {
    uint64_t blocks = ops_gemm_group_blocks(a->gmm[d], x);
    if (!blocks) continue;
    core_notify_wait(t, CORE_PIPE_MTE2, (int)x, (uint32_t)blocks);
    uint32_t g = d * a->e + x;
    put_rows(t, a, &stage, w, nw, a->cnt[s][g], a->n, a->t[d][T_GY] + mc2_bytes(a->dv.in, a->recv[d][x * a->dv.ranks + s] * a->n),
             a->t[s][T_Y] + mc2_bytes(a->dv.in, a->send[s][g] * a->n));
  }
  mc2_put_end(t);
}

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct moe *a = ctx;
  mc2_unit_begin(t, a->gmm[core_rank(t)], a->dv.naiv, a->dv.units, a->combine ? combine_program : dispatch_program, a);
}

static void unit_end(struct core_tp *t, void *ctx)
{
  struct moe *a = ctx;
  mc2_unit_end(t, a->gmm[core_rank(t)]);
}

/* ------------------------------------------------------------------ the cube cores */

/* Block b of GEMM g with A, B and C at a, bm and c. The two GEMMs may lay their buffers out in L1
 * and L0 differently: a cube core drains its pipes before it changes from one to the other. */
static void gemm_block(struct core_tp *t, struct gemm *g, uint64_t b, uint64_t a, uint64_t bm, uint64_t c)
{
  struct mc2_unit *u = core_unit_ctx(t);
  if (u->last && u->last != g) core_fence(t);
  u->last = g;
  ops_gemm_block_at(t, g, b, a, bm, c);
}

static void shared_block(struct core_tp *t, const struct moe *a, uint32_t d, uint64_t b)
{
  gemm_block(t, a->mm, b, a->t[d][T_MX], a->t[d][T_MW], a->t[d][T_MY]);
}

/* Block b of device d: dispatch, the shared expert's blocks then the experts' in order; combine,
 * the experts' then the shared expert's. Devices with fewer blocks than the launch's have none
 * past their own. */
static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct moe *a = ctx;
  struct mc2_unit *u = core_unit_ctx(t);
  uint32_t d = (uint32_t)core_rank(t);
  uint64_t gb = a->gblocks[d];
  core_select(t, CORE_SUB_AIC);
  if (!a->combine) {
    if (b < a->mblocks) {
      shared_block(t, a, d, b);
      return;
    }
    b -= a->mblocks;
    if (b >= gb) return;
    uint32_t x = ops_gemm_block_group(a->gmm[d], b);
    if (!u->waited[x]) { /* the expert's rows: every device's vector cores have put theirs */
      core_notify_wait(t, CORE_PIPE_MTE2, (int)x, a->dv.ranks * (uint32_t)a->dv.naiv);
      u->waited[x] = 1;
    }
    gemm_block(t, a->gmm[d], b, a->t[d][T_PERM], a->t[d][T_GW], a->t[d][T_GY]);
    return;
  }
  if (b < gb) {
    gemm_block(t, a->gmm[d], b, a->t[d][T_GX], a->t[d][T_GW], a->t[d][T_GY]);
    core_notify(t, CORE_PIPE_FIX, (int)d, (int)ops_gemm_block_group(a->gmm[d], b));
  } else if (b - gb < a->mblocks) {
    shared_block(t, a, d, b - gb);
  }
}

/* ------------------------------------------------------------------ plan, setup, check */

static void moe_release(void *p)
{
  struct moe *a = p;
  for (uint32_t d = 0; d < MAX_RANKS; d++) {
    ops_gemm_free(a->gmm[d]);
    a->gmm[d] = NULL;
  }
  ops_gemm_free(a->mm);
  a->mm = NULL;
}

static int plan_counts(struct moe *a, double skew, struct npu_diag *diag)
{
  uint32_t ranks = a->dv.ranks, global = ranks * a->e, per[MAX_GLOBAL] = {0};
  ops_group_sizes(per, global, a->tokens, skew); /* grouped_gemm's profile */
  for (uint32_t s = 0; s < ranks; s++) {
    uint64_t at = 0;
    for (uint32_t g = 0; g < global; g++) {
      a->cnt[s][g] = per[g];
      a->send[s][g] = at;
      at += per[g];
    }
  }
  for (uint32_t d = 0; d < ranks; d++) {
    uint64_t at = 0;
    uint32_t grp[MAX_EXPERTS];
    for (uint32_t x = 0; x < a->e; x++) {
      grp[x] = 0;
      for (uint32_t s = 0; s < ranks; s++) {
        a->recv[d][x * ranks + s] = at;
        at += a->cnt[s][d * a->e + x];
        grp[x] += a->cnt[s][d * a->e + x];
      }
    }
    if (!at || at > 65536)
      return npu_diag_set(diag, "command line", 0, "--tokens",
                          "device %u's experts get %llu rows: each device's experts need 1 to 65536 (fewer tokens, "
                          "or less skew)",
                          d, (unsigned long long)at),
             NPU_EINVAL;
    a->rows[d] = (uint32_t)at;
    int rc = ops_gemm_grouped_plan(&a->gmm[d], a->chip, grp, a->e, a->n, a->h, a->dv.in, diag);
    if (rc) return rc;
    a->gblocks[d] = ops_gemm_blocks(a->gmm[d]);
  }
  return 0;
}

static int moe_plan(void *p, const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct moe *a = p;
  memset(a, 0, sizeof *a);
  a->chip = chip;
  a->combine = strcmp(d->name, "grouped_matmul_alltoallv") == 0;
  int rc = mc2_devices(d, args, chip, &a->dv, diag);
  if (rc) return rc;
  uint64_t tokens = op_u(d, args, "tokens"), e = op_u(d, args, "experts"), h = op_u(d, args, "h");
  uint64_t n = op_u(d, args, "n"), bs = op_u(d, args, "shared_rows"), n2 = op_u(d, args, "shared_n");
  double skew = op_r(d, args, "skew");
  if (e > MAX_EXPERTS || e * a->dv.ranks > MAX_GLOBAL)
    return npu_diag_set(diag, "command line", 0, "--experts",
                        "at most %d experts per device and %d in all (CANN's limits), not %llu x %u", MAX_EXPERTS,
                        MAX_GLOBAL, (unsigned long long)e, a->dv.ranks),
           NPU_EINVAL;
  if (tokens > 65536 || h > 65536 || n > 65536 || bs > 65536 || n2 > 65536)
    return npu_diag_set(diag, "command line", 0, "--tokens", "dimensions above 65536 are not supported"), NPU_EINVAL;
  if (skew < 0 || skew > 10)
    return npu_diag_set(diag, "command line", 0, "--skew", "expected 0 to 10, got %g", skew), NPU_EINVAL;
  a->e = (uint32_t)e;
  a->tokens = (uint32_t)tokens;
  a->h = (uint32_t)h;
  a->n = (uint32_t)n;
  a->bs = (uint32_t)bs;
  a->n2 = n2 ? (uint32_t)n2 : a->n;
  a->piece = mc2_piece(chip, a->dv.in);
  rc = plan_counts(a, skew, diag);
  if (!rc && a->bs) {
    rc = ops_gemm_plan(&a->mm, chip, a->bs, a->n2, a->h, a->dv.in, false, 1, diag);
    if (!rc) a->mblocks = ops_gemm_blocks(a->mm);
  }
  if (rc) {
    moe_release(a);
    return rc;
  }
  NPU_ASSERT(ops_gemm_unit_bytes() <= sizeof ((struct mc2_unit *)0)->gemm);
  return 0;
}

static int moe_ranks_of(const void *p)
{
  return (int)((const struct moe *)p)->dv.ranks;
}

static void moe_setup(void *p, struct op_exec *x)
{
  struct moe *a = p;
  static const char *const what[T_PER_RANK] = {"gmm_x", "gmm_w", "permute_out", "gmm_y", "y", "mm_x", "mm_w", "mm_y"};
  uint64_t most = 0;
  for (uint32_t r = 0; r < a->dv.ranks; r++) {
    uint64_t gx = a->combine ? a->rows[r] : a->tokens;
    uint64_t count[T_PER_RANK] = {gx * a->h, (uint64_t)a->e * a->h * a->n, a->combine ? 0 : (uint64_t)a->rows[r] * a->h,
                                  (uint64_t)a->rows[r] * a->n, a->combine ? (uint64_t)a->tokens * a->n : 0,
                                  (uint64_t)a->bs * a->h, (uint64_t)a->h * a->n2, (uint64_t)a->bs * a->n2};
    for (int i = 0; i < T_PER_RANK; i++) {
      if (!count[i]) continue;
      snprintf(a->names[r][i], sizeof a->names[r][i], "%s.%u", what[i], r);
      bool in = i == T_GX || i == T_GW || i == T_MX || i == T_MW;
      enum op_init init = in ? OP_INIT_UNIFORM : a->combine && i == T_GY ? OP_INIT_SCRATCH : OP_INIT_ZERO;
      struct op_tensor *t = op_tensor(x, a->names[r][i], a->dv.in, count[i], init);
      op_tensor_place(x, t, (int)r);
      a->t[r][i] = t->addr;
    }
    if (a->gblocks[r] > most) most = a->gblocks[r];
  }
  struct core_kernel k = {.name = a->combine ? "grouped_matmul_alltoallv" : "alltoallv_grouped_matmul",
                          .mode = CORE_MODE_MIX, .block_dim = a->dv.units, .nblocks = most + a->mblocks, .ctx = a,
                          .unit_begin = unit_begin, .unit_end = unit_end, .block = block,
                          .unit_ctx_bytes = sizeof(struct mc2_unit)};
  op_kernel(x, &k);
}

static double moe_flops(const void *p)
{
  const struct moe *a = p;
  double f = 0;
  for (uint32_t d = 0; d < a->dv.ranks; d++) f += 2.0 * a->rows[d] * a->h * (double)a->n;
  return f + 2.0 * a->dv.ranks * a->bs * (double)a->h * a->n2;
}

/* The rows of `rows` x k in A times the [k, n] matrix B into R (doubles). */
static void matmul(double *R, const double *A, const double *B, uint64_t rows, uint32_t k, uint32_t n)
{
  for (uint64_t i = 0; i < rows; i++)
    for (uint32_t j = 0; j < n; j++) {
      double s = 0;
      for (uint32_t kk = 0; kk < k; kk++) s += A[i * k + kk] * B[(size_t)kk * n + j];
      R[i * n + j] = s;
    }
}

/* The expert outputs of device d's expert x for source s's rows (cnt x n), from its inputs. */
static double *expert_out(const struct moe *a, const double *rows_in, const double *W, uint32_t x, uint64_t cnt)
{
  double *R = npu_xmalloc((size_t)(cnt ? cnt : 1) * a->n * sizeof *R);
  matmul(R, rows_in, W + (size_t)x * a->h * a->n, cnt, a->h, a->n);
  return R;
}

static bool moe_check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct moe *a = p;
  uint32_t ranks = a->dv.ranks;
  double eps = mc2_eps(a->dv.in), worst = 0, moved = 0;
  double atol = 1e-6 * sqrt((double)a->h) + eps * 0.5, rtol = eps * 0.51 + 1e-6;
  double *X[MAX_RANKS];
  for (uint32_t r = 0; r < ranks; r++) X[r] = op_decode(op_find_tensor(x, a->names[r][T_GX]));
  double *Y[MAX_RANKS] = {0};
  if (a->combine)
    for (uint32_t r = 0; r < ranks; r++) Y[r] = op_decode(op_find_tensor(x, a->names[r][T_Y]));
  for (uint32_t d = 0; d < ranks; d++) {
    double *W = op_decode(op_find_tensor(x, a->names[d][T_GW]));
    double *P = a->combine ? NULL : op_decode(op_find_tensor(x, a->names[d][T_PERM]));
    double *G = a->combine ? NULL : op_decode(op_find_tensor(x, a->names[d][T_GY]));
    for (uint32_t e = 0; e < a->e; e++)
      for (uint32_t s = 0; s < ranks; s++) {
        uint32_t g = d * a->e + e;
        uint64_t c = a->cnt[s][g], at = a->recv[d][e * ranks + s];
        if (!c) continue;
        if (!a->combine) { /* the rows s sent, in place in permute_out, and their products */
          moved = fmax(moved, op_compare(P + at * a->h, X[s] + a->send[s][g] * a->h, c * a->h, 0, 0));
          double *R = expert_out(a, X[s] + a->send[s][g] * a->h, W, e, c);
          worst = fmax(worst, op_compare(G + at * a->n, R, c * a->n, atol, rtol));
          free(R);
        } else { /* the products of d's rows from s, back in s's y where s's rows were */
          double *R = expert_out(a, X[d] + at * a->h, W, e, c);
          worst = fmax(worst, op_compare(Y[s] + a->send[s][g] * a->n, R, c * a->n, atol, rtol));
          free(R);
        }
      }
    free(W);
    free(P);
    free(G);
    if (a->bs) { /* the shared expert */
      double *MX = op_decode(op_find_tensor(x, a->names[d][T_MX])), *MW = op_decode(op_find_tensor(x, a->names[d][T_MW]));
      double *MY = op_decode(op_find_tensor(x, a->names[d][T_MY]));
      double *R = npu_xmalloc((size_t)a->bs * a->n2 * sizeof *R);
      matmul(R, MX, MW, a->bs, a->h, a->n2);
      worst = fmax(worst, op_compare(MY, R, (size_t)a->bs * a->n2, atol, rtol));
      free(R);
      free(MX);
      free(MW);
      free(MY);
    }
  }
  for (uint32_t r = 0; r < ranks; r++) {
    free(X[r]);
    free(Y[r]);
  }
  if (moved > 0) worst = INFINITY; /* the dispatch is a copy: any difference fails */
  *max_err = worst;
  uint32_t lo = a->rows[0], hi = a->rows[0];
  for (uint32_t d = 1; d < ranks; d++) {
    lo = a->rows[d] < lo ? a->rows[d] : lo;
    hi = a->rows[d] > hi ? a->rows[d] : hi;
  }
  snprintf(summary, n, "%u devices x %u experts, %u tokens each, %u to %u rows per device's experts, h %u, n %u%s %s: "
           "worst error %.3g of tolerance%s",
           ranks, a->e, a->tokens, lo, hi, a->h, a->n, a->bs ? ", with the shared expert" : "",
           npu_dtype_name(a->dv.in), worst, moved > 0 ? "; permute_out differs from the rows sent" : "");
  return worst <= 1;
}

/* ------------------------------------------------------------------ the analytic fidelity */

/*
 * The ideal pipeline of each device d, its grouped matmul G_d at the rate of the whole (its
 * experts' rows in equal groups, each expert's share in proportion to its rows), S the shared
 * expert's matmul; each link carries only its own team's rows, at the link's rate:
 *   dispatch: S first; expert x's matmul once the rows of experts 0..x have crossed from every
 *     source (the slowest link into d, a copy's and a notify's latency) and the experts before
 *     it are done;
 *   combine: expert x's rows leave once its matmul is done (a notify's latency) and the rows of
 *     the experts before it have left (the fullest link out of d); S after the experts.
 * The launch lasts as long as its busiest device.
 */
static int moe_closed_form(const void *p, const struct arch_chip *chip, const struct arch_node *node,
                           struct core_result *out, struct npu_diag *diag)
{
  const struct moe *a = p;
  uint32_t ranks = a->dv.ranks;
  double bw = mc2_link_rate(node), lat = node->link.latency_s, worst = -1, S = 0, comm = 0;
  struct core_result part = {0}, mm = {0};
  char kv[6][48];
  const char *const args[] = {kv[0], kv[1], kv[2], kv[3], kv[4], kv[5]};
  snprintf(kv[0], sizeof kv[0], "n=%u", a->n2);
  snprintf(kv[1], sizeof kv[1], "k=%u", a->h);
  snprintf(kv[2], sizeof kv[2], "dtype=%s", npu_dtype_name(a->dv.in));
  snprintf(kv[3], sizeof kv[3], "m=%u", a->bs);
  int rc = a->bs ? mc2_part(&op_gemm, chip, args, 4, &mm, diag) : 0;
  if (rc) return rc;
  if (a->bs) S = mm.time_s - mm.launch_s;
  uint64_t bytes = 0, width = a->combine ? a->n : a->h;
  for (uint32_t d = 0; d < ranks; d++) {
    snprintf(kv[0], sizeof kv[0], "groups=%u", a->e);
    snprintf(kv[1], sizeof kv[1], "m=%u", a->rows[d]);
    snprintf(kv[2], sizeof kv[2], "n=%u", a->n);
    snprintf(kv[3], sizeof kv[3], "k=%u", a->h);
    snprintf(kv[4], sizeof kv[4], "dtype=%s", npu_dtype_name(a->dv.in));
    snprintf(kv[5], sizeof kv[5], "skew=0");
    struct core_result g;
    rc = mc2_part(&op_grouped_gemm, chip, args, 6, &g, diag);
    if (rc) return rc;
    double G = g.time_s - g.launch_s, done = a->combine ? 0 : S, sent = 0, link = 0;
    uint64_t on[MAX_RANKS] = {0}; /* rows each link carried so far */
    for (uint32_t x = 0; x < a->e; x++) {
      uint64_t rows = 0, most = 0;
      for (uint32_t q = 0; q < ranks; q++) {
        uint32_t c = a->cnt[q][d * a->e + x]; /* q's rows for d's expert x, and back */
        rows += c;
        if (q == d) continue;
        on[q] += c;
        most = on[q] > most ? on[q] : most;
        bytes += mc2_bytes(a->dv.in, (uint64_t)c * width);
      }
      double share = G * (double)rows / a->rows[d], xfer = (double)mc2_bytes(a->dv.in, most * width) / bw;
      if (!rows) continue;
      if (a->combine) {
        done += share;
        sent = fmax(sent, done + lat) + (xfer - link) + lat;
        link = xfer;
      } else {
        done = fmax(done, xfer + 2 * lat) + share;
        link = xfer;
      }
    }
    double body = a->combine ? fmax(sent, done + S) : done;
    if (body > worst) {
      worst = body;
      part = g;
      comm = link;
    }
  }
  if (a->bs) { /* the shared expert's work beside the experts' */
    part.time_s += S;
    part.flops += mm.flops;
    part.cube_macs += mm.cube_macs;
    part.instructions += mm.instructions;
    part.gm_read_bytes += mm.gm_read_bytes;
    part.gm_write_bytes += mm.gm_write_bytes;
    part.l2_hit_bytes += mm.l2_hit_bytes;
    part.hbm_bytes += mm.hbm_bytes;
  }
  mc2_form_result(out, chip, &part, (int)ranks, a->dv.naiv, worst, comm, bytes, false);
  return 0;
}

#define MOE_RULE "none as an operator: a training step models the expert all-to-alls with plan.ep_overlap (workloads/expand.c)"

const struct op_desc op_alltoallv_grouped_matmul =
    MC2_DESC("alltoallv_grouped_matmul", "MC2 AlltoAllvGroupedMatMul on a server: the MoE dispatch all-to-all fused "
                                         "with the experts' grouped matmul (vector cores put each expert's rows, cube "
                                         "cores multiply each expert as it lands), the shared expert beside it",
             params, struct moe, moe_, MOE_RULE);

const struct op_desc op_grouped_matmul_alltoallv =
    MC2_DESC("grouped_matmul_alltoallv", "MC2 GroupedMatMulAlltoAllv on a server: the experts' grouped matmul fused "
                                         "with the MoE combine all-to-all (vector cores send each expert's outputs "
                                         "back as its blocks finish), the shared expert beside it",
             params, struct moe, moe_, MOE_RULE);
