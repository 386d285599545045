/*
 * moe_gating.c - the MoE router: logits [tokens, experts] -> the top-k experts of every token
 * (ids int32 [tokens, k]) and their weights (fp32 [tokens, k]), on the vector cores.
 *
 * Scores: softmax over the experts (Mixtral, Qwen) or an element-wise sigmoid (DeepSeek-V3).
 * Group-limited routing (DeepSeek-V3 technical report, section 2.1.2 and its node-limited
 * routing; the released inference code's "noaux_tc" gate): the experts are split into `groups`
 * equal groups; a group's score is the sum of its two best expert scores; only the best
 * `topk_groups` groups stay and the top-k experts are chosen among theirs. The k weights are the
 * chosen scores, optionally normalised to sum 1 (`norm`; Mixtral's softmax-then-renormalise is
 * the softmax of the k chosen logits), times the routed scaling factor (`scaling`, 2.5 in
 * DeepSeek-V3). Ids come out in descending score order; ties go to the lower expert id (the
 * hardware sort's order for equal scores, and so the order of every merge below).
 *
 * Tile program (blocks of `tile` tokens dealt to every vector core, MTE2 / V / MTE3 pipelined
 * with the logits and outputs double buffered):
 *   1. MTE2 loads the logits as rows of one group each, padded to a multiple of 32 experts (the
 *      pad lanes were set to -inf once); V widens them to fp32.
 *   2. Scores, whole tile at a time: sigmoid = 1 / (1 + exp(-x)); softmax = exp(x - max) / sum
 *      with the row max and sum from a pairwise tree of whole repeats and one reduction per row,
 *      broadcast back with Brcb. Pad lanes score 0 and carry ids above every expert, so they
 *      sort after every real expert.
 *   3. sort32 sorts every 32 experts into 8-byte (score, id) proposals. Top-m lists are then
 *      merged with mrgsort (2-4 lists a time), keeping only each list's first m = k rounded up to
 *      4 proposals (copied out with block-strided copies) before every merge, so a merge costs
 *      4m proposal-cycles at most. With groups, first each group's lists are merged; the group
 *      score is a reduction of the top two of each group list; a sort32 of the group scores ranks
 *      the groups; a second sort32, keyed by -group id with the rank's penalty (0 for the best
 *      topk_groups, -inf for the rest) as payload, turns the ranking into a penalty per group in
 *      group order; Brcb spreads the penalties over blocks and masked adds (a repeat per token)
 *      apply them to the group lists' scores; the penalised group lists are merged. Sorting
 *      never moves scores apart from their ids, so ties resolve the same way everywhere.
 *   4. Weights: a masked reduction of each token's k best scores, its reciprocal (times the
 *      scaling) broadcast with Brcb and multiplied in, or the scaling alone.
 *   5. The proposals are split into ids and weights by Brcb (each element into a block of its
 *      own) and one-element-per-repeat reductions (dense outputs), a vector form of Ascend C's
 *      Extract; MTE3 stores both.
 * Every step after the load works on the whole tile; only the merges are per token (mrgsort
 * merges one set of lists per instruction). UB: operands 256 bytes apart in bank-group phase,
 * list strides of an odd number of blocks (strided reads spread over the bank groups), row
 * broadcasts as whole repeats rather than block stride 0; the merge buffer reuses the room of
 * the fp32 scores, dead once sorted.
 *
 * Reference: softmax / sigmoid and the whole selection in double. The kernel computes in fp32,
 * so near-ties may be ordered differently: the check accepts any selection whose scores match
 * the reference's k best within the fp32 tolerance (and whose groups are among the best groups
 * within tolerance), requires exact ties (equal inputs) in ascending id order, and compares each
 * weight with the double-precision weight of the id the kernel chose.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "ops/moe_int.h"

static const char *const scores[] = {"softmax", "sigmoid", NULL};

static const struct op_param params[] = {
    {"tokens", OP_P_DIM, NULL, "tokens (rows of logits)", NULL},
    {"experts", OP_P_DIM, "8", "routed experts (columns of logits)", NULL},
    {"topk", OP_P_DIM, "2", "experts chosen per token (at most 32)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "type of the logits (fp16, bf16, fp32)", NULL},
    {"score", OP_P_CHOICE, "softmax", "score function: softmax (Mixtral) or sigmoid (DeepSeek-V3)", scores},
    {"groups", OP_P_DIM, "1", "expert groups for group-limited routing (1: none; at most 16)", NULL},
    {"topk_groups", OP_P_INT, "0", "groups kept per token (0: all)", NULL},
    {"norm", OP_P_BOOL, "false", "normalise the k weights to sum 1", NULL},
    {"scaling", OP_P_REAL, "1", "routed scaling factor applied to the weights", NULL},
    {"tile", OP_P_INT, "0", "tokens per block, a multiple of 8 (0: auto)", NULL},
    {"cores", OP_P_INT, "0", "vector cores to use (0: all)", NULL},
};

struct gate {
  uint32_t T, E, k, G, kg;
  bool sigmoid, norm;
  double scaling;
  enum npu_dtype dt;
  uint32_t gs, gp, Ep, L, nl; /* group size, padded group, padded row, sort32 lists per token / group */
  uint32_t mc, kp, P2;        /* proposals kept per list, k rounded up to 8, Brcb blocks of penalties */
  uint32_t prs;               /* proposals between sort32 lists: 36 (an odd 9 blocks, for the strided
                                 reads that pack them) unless they are merged whole (mc = 32) */
  uint32_t tt;                /* tokens per block */
  int cores;
  uint64_t nblocks;
  uint64_t logits, ids, w, tables; /* GM */
  /* UB */
  uint64_t in[2], x, s, wf, rd, rd2, rb, pr, ma;
  uint64_t gsd, gsp, gpr, t1, t2, penp, pb;
  uint64_t xb, ow[2], oi[2], idx, gidx, rt;
  uint64_t need_pr, need_ma;  /* bytes the merges use in pr and ma (from a dry run) */
};

/* One launch unit's emission state (the launch's unit context, core_unit_ctx). */
struct gate_unit {
  uint64_t blk;               /* blocks emitted so far (their ping-pong parity) */
};

static struct gate_unit *unit_of(struct core_tp *t)
{
  return core_unit_ctx(t);
}

enum { ID_IN = 0, ID_OUT = 2, ID_TAB = 4 };

/* ------------------------------------------------------------------ merging */

/* Proposal lists in one of two buffers: segs segments of n lists, lists `ls` proposals apart,
 * each with at least `len` valid proposals. */
struct mlist {
  int buf; /* 0: pr, 1: ma */
  uint32_t segs, n, len, ls;
};

static uint64_t buf_addr(const struct gate *g, int b)
{
  return b ? g->ma : g->pr;
}

static void note(struct gate *g, int b, uint64_t bytes)
{
  uint64_t *need = b ? &g->need_ma : &g->need_pr;
  if (bytes > *need) *need = bytes;
}

/* Keep the first mc proposals of every list, packed, in the other buffer (t NULL: dry run). */
static void compact(struct core_tp *t, struct gate *g, struct mlist *l)
{
  uint64_t lists = (uint64_t)l->segs * l->n;
  int to = 1 - l->buf;
  note(g, to, lists * g->mc * 8);
  if (t)
    for (uint32_t b = 0; b < g->mc / 4; b++)
      moe_copy_blocks(t, buf_addr(g, to) + b * 32ull, g->mc / 4, buf_addr(g, l->buf) + b * 32ull, l->ls / 4, lists);
  l->buf = to;
  l->len = l->ls = g->mc;
}

/* One merge level: groups of 2-4 consecutive lists of each segment, balanced. */
static void merge_level(struct core_tp *t, struct gate *g, struct mlist *l)
{
  uint32_t ng = (l->n + 3) / 4, maxsz = (l->n + ng - 1) / ng, minsz = l->n / ng;
  uint32_t out_ls = maxsz * l->ls;
  if (out_ls / 4 % 2 == 0) out_ls += 4; /* an odd block stride: strided reads hit 8 bank groups */
  int to = 1 - l->buf;
  note(g, to, (uint64_t)l->segs * ng * out_ls * 8);
  if (t) {
    uint64_t src = buf_addr(g, l->buf), dst = buf_addr(g, to);
    for (uint32_t s = 0; s < l->segs; s++) {
      uint32_t start = 0;
      for (uint32_t q = 0; q < ng; q++) {
        uint32_t sz = l->n / ng + (q < l->n % ng ? 1 : 0);
        struct core_vec v = moe_v(CORE_VEC_MRGSORT, NPU_DT_FP32, dst + ((uint64_t)s * ng + q) * out_ls * 8,
                                  src + ((uint64_t)s * l->n + start) * l->ls * 8, 0, 1);
        v.aux = sz;
        v.count = l->ls;
        core_vec(t, &v);
        start += sz;
      }
    }
  }
  l->buf = to;
  l->len = minsz * l->len;
  l->ls = out_ls;
  l->n = ng;
}

/* Merge the lists of every segment down to one sorted list with at least mc proposals. */
static void merge_all(struct core_tp *t, struct gate *g, struct mlist *l)
{
  while (l->n > 1) {
    if (l->len != g->mc || l->ls != g->mc) compact(t, g, l);
    merge_level(t, g, l);
  }
}

/* ------------------------------------------------------------------ layout and plan */

/* The merge structure of one tile (also sizes pr and ma); returns the final lists. */
static struct mlist merges(struct core_tp *t, struct gate *g);

static uint64_t layout(struct gate *g, uint32_t tt)
{
  struct moe_ub a = {0};
  uint32_t es = moe_es(g->dt);
  g->tt = tt;
  g->need_pr = (uint64_t)tt * g->L * g->prs * 8;
  g->need_ma = 0;
  merges(NULL, g);
  for (int p = 0; p < 2; p++) g->in[p] = moe_alloc(&a, (uint64_t)tt * g->Ep * es, 0);
  g->x = moe_alloc(&a, (uint64_t)tt * g->Ep * 4, 256);
  g->s = moe_alloc(&a, (uint64_t)tt * g->Ep * 4, 0);
  g->wf = !g->sigmoid ? moe_alloc(&a, (uint64_t)tt * 256, 0) : 0;
  bool rows = !g->sigmoid || g->norm; /* per-token values and their Brcb blocks */
  g->rd = rows ? moe_alloc(&a, (uint64_t)tt * 4, 0) : 0;
  g->rd2 = rows ? moe_alloc(&a, (uint64_t)tt * 4, 256) : 0;
  g->rb = rows ? moe_alloc(&a, (uint64_t)tt * 256, 256) : 0;
  uint64_t slack = (uint64_t)g->kp * 8 + 256; /* Brcb of kp proposals may read past a short list */
  g->pr = moe_alloc(&a, g->need_pr + slack, 0);
  /* the merges start after sort32, when the fp32 logits and scores are dead: reuse their room */
  g->ma = g->need_ma + slack <= g->s + (uint64_t)tt * g->Ep * 4 - g->x ? g->x : moe_alloc(&a, g->need_ma + slack, 256);
  if (g->G > 1) {
    g->gsd = moe_alloc(&a, (uint64_t)tt * g->G * 4 + 256, 0);
    g->gsp = moe_alloc(&a, (uint64_t)tt * 128 + 256, 256);
    g->gpr = moe_alloc(&a, (uint64_t)tt * 256, 0);
    g->t1 = moe_alloc(&a, (uint64_t)tt * 256, 256);
    g->t2 = moe_alloc(&a, (uint64_t)tt * 256, 0);
    g->penp = moe_alloc(&a, (uint64_t)tt * 256, 256);
    g->pb = moe_alloc(&a, (uint64_t)tt * g->P2 * 32, 0);
    g->gidx = moe_alloc(&a, 128, 256);
    g->rt = moe_alloc(&a, 128, 0);
  }
  g->xb = moe_alloc(&a, (uint64_t)tt * 2 * g->kp * 32 + 256, 256); /* + a repeat read past the end */
  for (int p = 0; p < 2; p++) {
    g->ow[p] = moe_alloc(&a, (uint64_t)tt * g->kp * 4, 0);
    g->oi[p] = moe_alloc(&a, (uint64_t)tt * g->kp * 4, 0);
  }
  g->idx = moe_alloc(&a, (uint64_t)g->Ep * 4, 256);
  return a.top;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct gate *g = p;
  memset(g, 0, sizeof *g);
  uint64_t T = op_u(d, a, "tokens"), E = op_u(d, a, "experts"), k = op_u(d, a, "topk"), G = op_u(d, a, "groups");
  uint64_t kg = op_u(d, a, "topk_groups");
  g->dt = op_dtype(d, a, "dtype");
  g->sigmoid = op_u(d, a, "score") == 1;
  g->norm = op_u(d, a, "norm");
  g->scaling = op_r(d, a, "scaling");
  if (!moe_float_dtype(g->dt))
    return npu_diag_set(diag, "command line", 0, "--dtype", "logits must be fp16, bf16 or fp32, got %s",
                        npu_dtype_name(g->dt)), NPU_EUNSUPPORTED;
  if (T > INT32_MAX || E > 65536)
    return npu_diag_set(diag, "command line", 0, E > 65536 ? "--experts" : "--tokens", "too large (at most %s)",
                        E > 65536 ? "65536 experts" : "2^31 tokens"), NPU_EINVAL;
  if (k > E)
    return npu_diag_set(diag, "command line", 0, "--topk", "top-%llu of %llu experts", (unsigned long long)k,
                        (unsigned long long)E), NPU_EINVAL;
  if (k > 32)
    return npu_diag_set(diag, "command line", 0, "--topk", "at most 32 (a merge keeps 32 proposals per list), got %llu",
                        (unsigned long long)k), NPU_EUNSUPPORTED;
  if (E % G)
    return npu_diag_set(diag, "command line", 0, "--groups", "%llu groups do not divide %llu experts",
                        (unsigned long long)G, (unsigned long long)E), NPU_EINVAL;
  if (G > 16)
    return npu_diag_set(diag, "command line", 0, "--groups", "at most 16 groups (one sort32 ranks them), got %llu",
                        (unsigned long long)G), NPU_EUNSUPPORTED;
  if (kg == 0) kg = G;
  if (kg > G)
    return npu_diag_set(diag, "command line", 0, "--topk_groups", "keeps %llu of %llu groups", (unsigned long long)kg,
                        (unsigned long long)G), NPU_EINVAL;
  if (G > 1 && E / G < 2)
    return npu_diag_set(diag, "command line", 0, "--groups", "a group's score sums its top 2 experts: %llu groups of "
                        "%llu experts have fewer", (unsigned long long)G, (unsigned long long)E), NPU_EINVAL;
  if (k > kg * (E / G))
    return npu_diag_set(diag, "command line", 0, "--topk", "top-%llu needs %llu experts in the kept groups, which "
                        "hold %llu (topk_groups %llu x %llu experts)", (unsigned long long)k, (unsigned long long)k,
                        (unsigned long long)(kg * (E / G)), (unsigned long long)kg, (unsigned long long)(E / G)),
           NPU_EINVAL;
  if (!(g->scaling > 0))
    return npu_diag_set(diag, "command line", 0, "--scaling", "must be positive"), NPU_EINVAL;
  g->T = (uint32_t)T;
  g->E = (uint32_t)E;
  g->k = (uint32_t)k;
  g->G = (uint32_t)G;
  g->kg = (uint32_t)kg;
  g->gs = g->E / g->G;
  g->gp = (uint32_t)ops_roundup(g->gs, 32);
  g->Ep = g->G * g->gp;
  g->L = g->Ep / 32;
  g->nl = g->gp / 32;
  g->mc = (uint32_t)ops_roundup(g->k, 4);
  g->kp = (uint32_t)ops_roundup(g->k, 8);
  g->P2 = (uint32_t)ops_roundup(2 * g->G, 8) + 1; /* odd: a token's penalty blocks start in another group */
  g->prs = g->mc < 32 ? 36 : 32;
  uint64_t cores = op_u(d, a, "cores");
  if (cores > (uint64_t)moe_cores(chip))
    return npu_diag_set(diag, "command line", 0, "--cores", "%s has %d vector cores", chip->name, moe_cores(chip)),
           NPU_EINVAL;
  int ncores = cores ? (int)cores : moe_cores(chip);
  uint64_t ub = moe_ub_bytes(chip), tile = op_u(d, a, "tile");
  if (tile) {
    if (tile % 8 || tile > 248)
      return npu_diag_set(diag, "command line", 0, "--tile", "a multiple of 8 up to 248, got %llu",
                          (unsigned long long)tile), NPU_EINVAL;
    uint64_t need = layout(g, (uint32_t)tile);
    if (need > ub)
      return npu_diag_set(diag, "command line", 0, "--tile", "%llu tokens of %u experts need %llu bytes of UB, has %llu",
                          (unsigned long long)tile, g->E, (unsigned long long)need, (unsigned long long)ub), NPU_ENOFIT;
  } else {
    /* as many tokens as fit, up to 64, but no more than every core's share */
    uint64_t share = ops_roundup((T + (uint64_t)ncores - 1) / (uint64_t)ncores, 8);
    uint32_t tt = (uint32_t)(share < 64 ? share : 64);
    while (tt > 8 && layout(g, tt) > ub) tt -= 8;
    uint64_t need = layout(g, tt);
    if (need > ub)
      return npu_diag_set(diag, "command line", 0, "--experts", "a tile of 8 tokens of %u experts needs %llu bytes "
                          "of UB, has %llu", g->E, (unsigned long long)need, (unsigned long long)ub), NPU_ENOFIT;
  }
  g->nblocks = ops_ceil(g->T, g->tt);
  g->cores = ncores < (int)g->nblocks ? ncores : (int)g->nblocks;
  return 0;
}

/* ------------------------------------------------------------------ kernel */

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct gate *g = ctx;
  unit_of(t)->blk = 0;
  for (int p = 0; p < 2; p++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IN + p);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_OUT + p);
  }
  /* the sort tables: expert ids of the lanes, group ids, group-rank penalties */
  struct core_tile gt = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, g->tables, 1, g->Ep, 0);
  struct core_tile lt = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, g->idx, 1, g->Ep, 0);
  core_copy(t, &lt, &gt);
  if (g->G > 1) {
    gt = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, g->tables + g->Ep * 4ull, 1, 32, 0);
    lt = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, g->gidx, 1, 32, 0);
    core_copy(t, &lt, &gt);
    gt = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, g->tables + g->Ep * 4ull + 128, 1, 32, 0);
    lt = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, g->rt, 1, 32, 0);
    core_copy(t, &lt, &gt);
    /* group scores sit in rows of 32, the rest of each row -inf */
    moe_vrun(t, CORE_VEC_DUP, NPU_DT_FP32, g->gsp, 0, 0, (uint64_t)g->tt * 32, -INFINITY);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_TAB);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_TAB);
  /* pad lanes of the logit buffers: -inf, once (loads write only the experts' lanes) */
  if (g->gs != g->gp) {
    uint32_t epb = 32 / moe_es(g->dt), rowblk = g->gp / epb, rows = g->tt * g->G;
    for (int p = 0; p < 2; p++)
      for (uint32_t b = g->gs / epb; b < rowblk; b++) {
        uint32_t lo = b * epb < g->gs ? g->gs - b * epb : 0;
        struct core_vec v = moe_v(CORE_VEC_DUP, g->dt, g->in[p] + b * 32ull, 0, 0, rows / 8);
        v.dst_blk = (uint16_t)rowblk;
        v.dst_rep = (uint16_t)(8 * rowblk);
        moe_mask_lanes(v.mask, g->dt, lo, epb);
        v.scalar = -INFINITY;
        core_vec(t, &v);
      }
  }
}

static void unit_end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int p = 0; p < 2; p++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IN + p);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_OUT + p);
  }
}

static int block_class(void *ctx, uint64_t b)
{
  const struct gate *g = ctx;
  return (b + 1) * g->tt > g->T ? 1 : 0;
}

/* Per-row reduction (max or sum) of tt rows of Ep fp32 at src into dense out[tt]. */
static void rowred(struct core_tp *t, struct gate *g, enum core_vec_op bin, enum core_vec_op red, uint64_t src,
                   uint64_t out)
{
  uint32_t nc = ops_ceil(g->Ep, 64), rs = g->Ep / 8;
  uint64_t from = src;
  uint16_t from_rep = (uint16_t)rs;
  if (nc > 1) { /* fold the row's repeats into one */
    uint32_t c0 = 2;
    struct core_vec v = moe_v(bin, NPU_DT_FP32, g->wf, src, src + 256, g->tt);
    v.src0_rep = v.src1_rep = (uint16_t)rs;
    if (g->Ep < 128) { /* the second chunk is half a repeat: start from a copy of the first */
      v.op = CORE_VEC_COPY;
      c0 = 1;
    }
    core_vec(t, &v);
    for (uint32_t c = c0; c < nc; c++) {
      v = moe_v(bin, NPU_DT_FP32, g->wf, g->wf, src + c * 256ull, g->tt);
      v.src1_rep = (uint16_t)rs;
      moe_mask_first(v.mask, g->Ep - c * 64 < 64 ? g->Ep - c * 64 : 64);
      core_vec(t, &v);
    }
    from = g->wf;
    from_rep = 8;
  }
  struct core_vec r = moe_v(red, NPU_DT_FP32, out, from, 0, g->tt);
  r.src0_rep = from_rep;
  moe_mask_first(r.mask, g->Ep < 64 ? g->Ep : 64);
  core_vec(t, &r);
}

/* Brcb: dense n fp32 values at src into n blocks at dst (n a multiple of 8). */
static void brcb(struct core_tp *t, uint64_t dst, uint64_t src, uint32_t n)
{
  struct core_vec v = moe_v(CORE_VEC_BRCB, NPU_DT_FP32, dst, src, 0, n / 8);
  v.src0_rep = 1;
  core_vec(t, &v);
}

/* Brcb of dense n fp32 values at src into a whole repeat (8 blocks) per value at dst, so that an
 * op reading it needs no block stride 0 (eight reads of one bank group). */
static void brcb_rows(struct core_tp *t, uint64_t dst, uint64_t src, uint32_t n)
{
  for (uint32_t c = 0; c < 8; c++) {
    struct core_vec v = moe_v(CORE_VEC_BRCB, NPU_DT_FP32, dst + c * 32ull, src, 0, n / 8);
    v.src0_rep = 1;
    v.dst_blk = 8;
    v.dst_rep = 64;
    core_vec(t, &v);
  }
}

/* dst row = src row op the row's broadcast repeat (rows of Ep fp32, repeats at rb). */
static void rowbin(struct core_tp *t, struct gate *g, enum core_vec_op op, uint64_t dst, uint64_t src)
{
  for (uint32_t c = 0; c < ops_ceil(g->Ep, 64); c++) {
    struct core_vec v = moe_v(op, NPU_DT_FP32, dst + c * 256ull, src + c * 256ull, g->rb, g->tt);
    v.dst_rep = v.src0_rep = (uint16_t)(g->Ep / 8);
    moe_mask_first(v.mask, g->Ep - c * 64 < 64 ? g->Ep - c * 64 : 64);
    core_vec(t, &v);
  }
}

/* Scores of the tile in fp32; returns their buffer. */
static uint64_t score(struct core_tp *t, struct gate *g)
{
  uint64_t n = (uint64_t)g->tt * g->Ep;
  if (g->sigmoid) {
    moe_vrun(t, CORE_VEC_MULS, NPU_DT_FP32, g->s, g->x, 0, n, -1);
    moe_vrun(t, CORE_VEC_EXP, NPU_DT_FP32, g->x, g->s, 0, n, 0);
    moe_vrun(t, CORE_VEC_ADDS, NPU_DT_FP32, g->s, g->x, 0, n, 1);
    moe_vrun(t, CORE_VEC_RECIP, NPU_DT_FP32, g->x, g->s, 0, n, 0);
    return g->x;
  }
  rowred(t, g, CORE_VEC_MAX, CORE_VEC_REDUCE_MAX, g->x, g->rd);
  moe_vrun(t, CORE_VEC_MULS, NPU_DT_FP32, g->rd2, g->rd, 0, g->tt, -1);
  brcb_rows(t, g->rb, g->rd2, g->tt);
  rowbin(t, g, CORE_VEC_ADD, g->s, g->x);
  moe_vrun(t, CORE_VEC_EXP, NPU_DT_FP32, g->x, g->s, 0, n, 0);
  rowred(t, g, CORE_VEC_ADD, CORE_VEC_REDUCE_SUM, g->x, g->rd);
  moe_vrun(t, CORE_VEC_RECIP, NPU_DT_FP32, g->rd2, g->rd, 0, g->tt, 0);
  brcb_rows(t, g->rb, g->rd2, g->tt);
  rowbin(t, g, CORE_VEC_MUL, g->s, g->x);
  return g->s;
}

/* Group-limited routing: rank the groups and push the scores of all but the best kg of each
 * token to -inf. cl: the groups' packed lists (mc proposals each, tokens x groups). */
static void limit_groups(struct core_tp *t, struct gate *g, uint64_t cl)
{
  uint32_t tt = g->tt, G = g->G, lb = g->mc / 4; /* blocks per list */
  /* group score: the sum of the list's two best scores */
  uint64_t top2[2];
  moe_mask_parity(top2, 4, 0);
  if (G % 8 == 0) {
    for (uint32_t d0 = 0; d0 < tt * G; d0 += MOE_RED_CHUNK) {
      uint32_t nd = tt * G - d0 < MOE_RED_CHUNK ? tt * G - d0 : MOE_RED_CHUNK;
      struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32, g->gsd + 4ull * d0, cl + (uint64_t)d0 * lb * 32, 0, nd);
      r.src0_rep = (uint16_t)lb;
      r.mask[0] = top2[0];
      core_vec(t, &r);
    }
    for (uint32_t b = 0; b < G / 8; b++) moe_copy_blocks(t, g->gsp + b * 32ull, 4, g->gsd + b * 32ull, G / 8, tt);
  } else {
    for (uint32_t i = 0; i < tt; i++) {
      struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32, g->gsp + i * 128ull, cl + (uint64_t)i * G * lb * 32, 0, G);
      r.src0_rep = (uint16_t)lb;
      r.mask[0] = top2[0];
      core_vec(t, &r);
    }
  }
  /* rank: sort32 of (group score, group id) per token */
  struct core_vec v = moe_v(CORE_VEC_SORT32, NPU_DT_FP32, g->gpr, g->gsp, g->gidx, tt);
  v.src0_rep = 4;
  v.src1_rep = 0;
  core_vec(t, &v);
  /* penalty per group in group order: sort32 keyed by -(group id of rank r), payload the
   * penalty of rank r (the -inf keys of the score lanes sort last) */
  moe_vcast(t, g->t1, NPU_DT_FP32, g->gpr, NPU_DT_INT32, (uint64_t)tt * 64);
  uint64_t odd[2], even[2];
  moe_mask_parity(odd, 64, 1);
  moe_mask_parity(even, 64, 0);
  v = moe_v(CORE_VEC_MULS, NPU_DT_FP32, g->t2, g->t1, 0, tt);
  v.mask[0] = odd[0];
  v.scalar = -1;
  core_vec(t, &v);
  v = moe_v(CORE_VEC_DUP, NPU_DT_FP32, g->t2, 0, 0, tt);
  v.mask[0] = even[0];
  v.scalar = -INFINITY;
  core_vec(t, &v);
  v = moe_v(CORE_VEC_SORT32, NPU_DT_FP32, g->penp, g->t2, g->rt, tt);
  v.src1_rep = 0;
  core_vec(t, &v);
  /* spread: block 2g + 1 of a token's row holds group g's penalty in every lane */
  for (uint32_t c = 0; c < g->P2 / 8; c++) {
    v = moe_v(CORE_VEC_BRCB, NPU_DT_FP32, g->pb + c * 256ull, g->penp + c * 32ull, 0, tt);
    v.dst_rep = (uint16_t)g->P2;
    v.src0_rep = 8;
    core_vec(t, &v);
  }
  /* add each group's penalty to the scores of its list: a repeat is one token's lists (eight
   * groups at most), the penalties read from every other block of the token's Brcb row */
  for (uint32_t g0 = 0; g0 < G; g0 += 8)
    for (uint32_t b = 0; b < lb; b++) {
      uint64_t at = cl + ((uint64_t)g0 * lb + b) * 32;
      v = moe_v(CORE_VEC_ADD, NPU_DT_FP32, at, at, g->pb + (2ull * g0 + 1) * 32, tt);
      v.dst_blk = v.src0_blk = (uint16_t)lb;
      v.dst_rep = v.src0_rep = (uint16_t)(G * lb);
      v.src1_blk = 2;
      v.src1_rep = (uint16_t)g->P2;
      moe_mask_lanes(v.mask, NPU_DT_FP32, 0, 8);
      if (G - g0 < 8) v.mask[0] &= (1ull << (8 * (G - g0))) - 1;
      v.mask[0] &= 0x5555555555555555ull;
      core_vec(t, &v);
    }
}

static struct mlist merges(struct core_tp *t, struct gate *g)
{
  struct mlist l = {.buf = 0, .segs = g->tt * g->G, .n = g->nl, .len = 32, .ls = g->prs};
  if (g->G == 1) {
    l.segs = g->tt;
    merge_all(t, g, &l);
    return l;
  }
  merge_all(t, g, &l); /* each group's lists into one */
  /* the groups of a token as one segment of G lists, packed to mc proposals */
  l.segs = g->tt;
  l.n = g->G;
  if (l.len != g->mc || l.ls != g->mc) compact(t, g, &l);
  if (t) limit_groups(t, g, buf_addr(g, l.buf));
  merge_all(t, g, &l);
  return l;
}

/* Weights (normalised and / or scaled) of the final lists, in place. */
static void weights(struct core_tp *t, struct gate *g, const struct mlist *l)
{
  uint64_t f = buf_addr(g, l->buf);
  uint32_t lb = l->ls / 4; /* blocks per token */
  if (g->norm) {
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32, g->rd, f, 0, g->tt);
    r.src0_rep = (uint16_t)lb;
    moe_mask_parity(r.mask, 2 * g->k, 0);
    core_vec(t, &r);
    moe_vrun(t, CORE_VEC_RECIP, NPU_DT_FP32, g->rd2, g->rd, 0, g->tt, 0);
    if (g->scaling != 1) moe_vrun(t, CORE_VEC_MULS, NPU_DT_FP32, g->rd2, g->rd2, 0, g->tt, g->scaling);
    brcb(t, g->rb, g->rd2, g->tt);
  } else if (g->scaling == 1) {
    return;
  }
  for (uint32_t b = 0; b * 8 < 2 * g->k; b++) {
    uint64_t at = f + b * 32ull;
    struct core_vec v = moe_v(g->norm ? CORE_VEC_MUL : CORE_VEC_MULS, NPU_DT_FP32, at, at, g->rb, g->tt / 8);
    v.dst_blk = v.src0_blk = (uint16_t)lb;
    v.dst_rep = v.src0_rep = (uint16_t)(8 * lb);
    v.src1_blk = 1;
    v.src1_rep = 8;
    v.scalar = g->scaling;
    uint32_t hi = 2 * g->k - b * 8 < 8 ? 2 * g->k - b * 8 : 8;
    moe_mask_lanes(v.mask, NPU_DT_FP32, 0, hi);
    v.mask[0] &= 0x5555555555555555ull;
    core_vec(t, &v);
  }
}

static void block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct gate *g = ctx;
  int p = (int)(unit_of(t)->blk++ % 2);
  uint32_t t0 = (uint32_t)(b * g->tt), tb = g->T - t0 < g->tt ? g->T - t0 : g->tt;
  uint32_t es = moe_es(g->dt);
  /* load: rows of one group each, into rows of gp lanes */
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IN + p);
  struct core_tile gl = ops_tile(MEM_GM, CORE_ND, g->dt, g->logits + (uint64_t)t0 * g->E * es, tb * g->G, g->gs, 0);
  struct core_tile ll = ops_tile(MEM_UB, CORE_ND, g->dt, g->in[p], tb * g->G, g->gs, g->gp);
  core_copy(t, &ll, &gl);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_IN + p);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ID_IN + p);
  uint64_t n = (uint64_t)g->tt * g->Ep;
  if (g->dt == NPU_DT_FP32)
    moe_vrun(t, CORE_VEC_COPY, NPU_DT_FP32, g->x, g->in[p], 0, n, 0);
  else
    moe_vcast(t, g->x, NPU_DT_FP32, g->in[p], g->dt, n);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ID_IN + p);
  uint64_t sc = score(t, g);
  /* sort every 32 lanes into proposals: list j of each token, tokens L lists apart */
  for (uint32_t j = 0; j < g->L; j++) {
    struct core_vec v = moe_v(CORE_VEC_SORT32, NPU_DT_FP32, g->pr + j * g->prs * 8ull, sc + j * 128ull,
                              g->idx + j * 128ull, g->tt);
    v.src0_rep = (uint16_t)(g->Ep / 8);
    v.src1_rep = 0;
    v.dst_rep = (uint16_t)(g->L * g->prs / 4);
    core_vec(t, &v);
  }
  struct mlist l = merges(t, g);
  weights(t, g, &l);
  /* split the proposals: Brcb puts each element in a block, a reduction per block takes lane 0 */
  uint64_t f = buf_addr(g, l.buf);
  for (uint32_t c = 0; c < g->kp / 4; c++) {
    struct core_vec v = moe_v(CORE_VEC_BRCB, NPU_DT_FP32, g->xb + c * 256ull, f + c * 32ull, 0, g->tt);
    v.src0_rep = (uint16_t)(l.ls / 4);
    v.dst_rep = (uint16_t)(2 * g->kp);
    core_vec(t, &v);
  }
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_OUT + p);
  uint32_t outs = g->tt * g->kp;
  for (uint32_t d0 = 0; d0 < outs; d0 += MOE_RED_CHUNK) {
    uint32_t nd = outs - d0 < MOE_RED_CHUNK ? outs - d0 : MOE_RED_CHUNK;
    struct core_vec r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32, g->ow[p] + 4ull * d0, g->xb + 64ull * d0, 0, nd);
    r.src0_rep = 2;
    r.mask[0] = 1;
    core_vec(t, &r);
    r = moe_v(CORE_VEC_REDUCE_SUM, NPU_DT_INT32, g->oi[p] + 4ull * d0, g->xb + 64ull * d0 + 32, 0, nd);
    r.src0_rep = 2;
    r.mask[0] = 1;
    core_vec(t, &r);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_OUT + p);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, ID_OUT + p);
  struct core_tile lw = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, g->ow[p], tb, g->k, g->kp);
  struct core_tile gw = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->w + (uint64_t)t0 * g->k * 4, tb, g->k, 0);
  core_copy(t, &gw, &lw);
  struct core_tile li = ops_tile(MEM_UB, CORE_ND, NPU_DT_INT32, g->oi[p], tb, g->k, g->kp);
  struct core_tile gi = ops_tile(MEM_GM, CORE_ND, NPU_DT_INT32, g->ids + (uint64_t)t0 * g->k * 4, tb, g->k, 0);
  core_copy(t, &gi, &li);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, ID_OUT + p);
}

static void setup(void *p, struct op_exec *x)
{
  struct gate *g = p;
  g->logits = op_tensor(x, "logits", g->dt, (uint64_t)g->T * g->E, OP_INIT_UNIFORM)->addr;
  g->ids = op_tensor(x, "ids", NPU_DT_INT32, (uint64_t)g->T * g->k, OP_INIT_NONE)->addr;
  g->w = op_tensor(x, "weights", NPU_DT_FP32, (uint64_t)g->T * g->k, OP_INIT_NONE)->addr;
  /* tables: lane -> expert id (pad lanes above every expert), group ids, rank penalties */
  uint32_t n = g->Ep + 64;
  uint32_t *tab = npu_xcalloc(n, sizeof *tab);
  for (uint32_t gi = 0; gi < g->G; gi++)
    for (uint32_t i = 0; i < g->gp; i++)
      tab[gi * g->gp + i] = i < g->gs ? gi * g->gs + i : g->E + gi * g->gp + i;
  for (uint32_t i = 0; i < 32; i++) tab[g->Ep + i] = i < g->G ? i : 64 + i;
  for (uint32_t r = 0; r < 16; r++) tab[g->Ep + 32 + 2 * r + 1] = r < g->kg ? 0 : 0xff800000u; /* 0.0f, -inf */
  g->tables = op_tensor_bytes(x, "tables", n * 4ull, tab)->addr;
  free(tab);
  struct core_kernel k = {.name = "moe_gating", .mode = CORE_MODE_VECTOR, .block_dim = g->cores,
                          .nblocks = g->nblocks, .ctx = g, .unit_begin = unit_begin, .unit_end = unit_end,
                          .block = block, .block_class = block_class, .unit_ctx_bytes = sizeof(struct gate_unit)};
  op_kernel(x, &k);
}

static double flops(const void *p)
{
  const struct gate *g = p;
  /* sigmoid: 4 operations per logit; softmax: max, subtract, exp, sum, scale */
  return (g->sigmoid ? 4.0 : 5.0) * g->T * (double)g->E;
}

/* ------------------------------------------------------------------ reference */

struct cand {
  double s;
  uint32_t id;
};

static int cand_desc(const void *a, const void *b)
{
  const struct cand *x = a, *y = b;
  if (x->s != y->s) return x->s > y->s ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct gate *g = p;
  double *X = op_decode(op_find_tensor(x, "logits")), *W = op_decode(op_find_tensor(x, "weights"));
  const int32_t *I = op_find_tensor(x, "ids")->host;
  uint32_t E = g->E, k = g->k, G = g->G, gs = g->gs;
  double *s = npu_xmalloc(E * sizeof *s);
  struct cand *c = npu_xmalloc(E * sizeof *c), *gc = npu_xmalloc(G * sizeof *gc);
  bool *kept = npu_xmalloc(G * sizeof *kept), *used = npu_xmalloc(G * sizeof *used);
  /* fp32 tolerances: a score is a few roundings (sigmoid) or a sum of E terms (softmax);
   * weights add k terms and up to three roundings */
  double u = ldexp(1, -24);
  double tol_s = (g->sigmoid ? 8 : E + 8) * u, tol_g = 2 * tol_s + 4 * u;
  double rtol = (g->sigmoid ? 16 : E + 16) * u + (g->norm ? (k + 8) * u : 0), atol = 1e-30;
  double worst = 0;
  long bad_tok = -1;
  const char *why = "";
  for (uint32_t t = 0; t < g->T && bad_tok < 0; t++) {
    const double *row = X + (uint64_t)t * E;
    if (g->sigmoid) {
      for (uint32_t e = 0; e < E; e++) s[e] = 1 / (1 + exp(-row[e]));
    } else {
      double m = -INFINITY, z = 0;
      for (uint32_t e = 0; e < E; e++) m = row[e] > m ? row[e] : m;
      for (uint32_t e = 0; e < E; e++) z += s[e] = exp(row[e] - m);
      for (uint32_t e = 0; e < E; e++) s[e] /= z;
    }
    const int32_t *id = I + (uint64_t)t * k;
    const double *w = W + (uint64_t)t * k;
    for (uint32_t gi = 0; gi < G; gi++) kept[gi] = G == 1, used[gi] = false;
    for (uint32_t j = 0; j < k && bad_tok < 0; j++) {
      if (id[j] < 0 || (uint32_t)id[j] >= E) bad_tok = t, why = "id out of range";
      for (uint32_t i = 0; i < j && bad_tok < 0; i++)
        if (id[i] == id[j]) bad_tok = t, why = "an expert chosen twice";
      if (bad_tok < 0) used[(uint32_t)id[j] / gs] = true;
    }
    if (bad_tok >= 0) break;
    if (G > 1) {
      /* groups by the sum of their top two; those within tol_g of the kg-th may go either way */
      for (uint32_t gi = 0; gi < G; gi++) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (uint32_t e = gi * gs; e < (gi + 1) * gs; e++) {
          if (s[e] > b1) b2 = b1, b1 = s[e];
          else if (s[e] > b2) b2 = s[e];
        }
        gc[gi] = (struct cand){b1 + b2, gi};
      }
      qsort(gc, G, sizeof *gc, cand_desc);
      double tau = gc[g->kg - 1].s;
      uint32_t nk = 0;
      for (uint32_t r = 0; r < G; r++)
        if (gc[r].s > tau + tol_g) kept[gc[r].id] = true, nk++;
      for (uint32_t gi = 0; gi < G; gi++)
        if (used[gi] && !kept[gi]) {
          double gsc = 0;
          for (uint32_t r = 0; r < G; r++)
            if (gc[r].id == gi) gsc = gc[r].s;
          if (gsc < tau - tol_g) {
            bad_tok = t, why = "an expert of a dropped group";
            break;
          }
          kept[gi] = true, nk++;
        }
      for (uint32_t r = 0; r < G && nk < g->kg; r++)
        if (!kept[gc[r].id]) kept[gc[r].id] = true, nk++;
      if (bad_tok >= 0) break;
      if (nk > g->kg) {
        bad_tok = t, why = "experts from more than topk_groups groups";
        break;
      }
    }
    uint32_t nc = 0;
    for (uint32_t e = 0; e < E; e++)
      if (kept[e / gs]) c[nc++] = (struct cand){s[e], e};
    qsort(c, nc, sizeof *c, cand_desc);
    double sum = 0;
    for (uint32_t j = 0; j < k; j++) sum += s[id[j]];
    for (uint32_t j = 0; j < k; j++) {
      double e1 = fabs(s[id[j]] - c[j].s) / tol_s;
      if (e1 > worst) worst = e1;
      if (e1 > 1) {
        bad_tok = t, why = "a score differs from the reference's";
        break;
      }
      if (j && s[id[j]] == s[id[j - 1]] && id[j] < id[j - 1]) {
        bad_tok = t, why = "a tie not in ascending id order";
        break;
      }
      double ref = s[id[j]] * (g->norm ? 1 / sum : 1) * g->scaling;
      double e2 = fabs(w[j] - ref) / (atol + rtol * fabs(ref));
      if (e2 > worst) worst = e2;
    }
  }
  *max_err = bad_tok >= 0 ? INFINITY : worst;
  if (bad_tok >= 0)
    snprintf(summary, n, "token %ld: %s", bad_tok, why);
  else
    snprintf(summary, n, "%u tokens, top-%u of %u experts (%s%s): worst error %.3g of tolerance (scores %.3g, rtol "
             "%.3g)", g->T, k, E, g->sigmoid ? "sigmoid" : "softmax", G > 1 ? ", group-limited" : "", worst, tol_s, rtol);
  free(X);
  free(W);
  free(s);
  free(c);
  free(gc);
  free(kept);
  free(used);
  return bad_tok < 0 && worst <= 1;
}

const struct op_desc op_moe_gating = {
    .name = "moe_gating",
    .summary = "MoE router: softmax / sigmoid scores, group-limited top-k (sort32 + mrgsort), weights",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct gate),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the forward call unchanged",
            "the backward of the scores and the top-k weights (a row pass over the tokens x experts scores) is "
            "costed by the gating kernel of the same shape",
            op__bwd_same},
};
