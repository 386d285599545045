/*
 * paged_attention.c - decode attention over a paged KV cache on the vector cores, as vLLM's
 * paged_attention_v2 computes it (one new token per sequence; the cache in fixed-size blocks
 * that a block table maps; the context split into partitions whose partial results a second
 * kernel reduces):
 *
 *   q            [batch, heads, dim]                       the new tokens' queries
 *   k/v_cache    [num_blocks, block_size, kv_heads, dim]   vLLM's layout (the same on Ascend vLLM)
 *   block_table  [batch, blocks_per_seq] int32             sequence b's j-th block
 *   o            [batch, heads, dim]                       softmax(q K^T / sqrt(dim)) V
 *
 * Every sequence holds `context` tokens (ceil(context / block_size) blocks); the block table is
 * a seeded random permutation of the cache's blocks, so every block read is a gather. GQA: query
 * head h reads key/value head h / (heads / kv_heads).
 *
 * Kernel 1: one block of work is (sequence, key/value head, partition of `partition` tokens),
 * on one vector core, for the group of query heads that share the key/value head:
 *   unit start  the group's queries (MTE2), widened and scaled by 1/sqrt(dim); the partition's
 *               block-table entries (MTE2, then the scalar unit reads them: MTE2 -> S)
 *   pass 1      per cache block: K gathered by an indexed copy (the block id read from the UB,
 *               address k_cache + id x block bytes), widened per 64 rows; per head, q times each
 *               row (the query repeat reused: repeat stride 0), the two halves of a 128-wide row
 *               added, one ReduceSum per row: the scores, S[head][token]
 *   softmax     per head over the partition: max, exp(S - max), sum (exact within a partition)
 *   pass 2      per cache block: V gathered the same way; per head, the probabilities broadcast
 *               to a block per row (Brcb), times V's rows, rows folded pairwise: O[head] += P V
 *   end         one partition: O / sum, cast, stored; several: O, max and sum (fp32) to a
 *               workspace
 * Kernel 2 (several partitions): one block per (sequence, head): the partitions' maxima and
 * sums combined (w_p = exp(m_p - max m), O = sum w_p O_p / sum w_p l_p), cast, stored.
 * K and V blocks stream through one double-buffered queue (Ascend C VECIN): the next gather is
 * in flight while the vector unit works on the last.
 *
 * This is the CUDA-core algorithm of vLLM's kernels (no matrix unit: a decode step's attention is
 * bound by reading the cache, and the matrix unit would be idle for lack of query rows); CANN's
 * IncreFlashAttention / PagedAttention use the cube core for Q K^T and P V on A2. On a coupled
 * chip (GPU presets) the same program runs on every SM.
 *
 * FLOPs: 4 x batch x heads x context x dim (Q K^T and P V). The host reference computes the
 * attention in double through the same block table.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "ops/queue.h"
#include "ops/vec.h"

#define CHUNK 64u        /* cache rows widened and multiplied at a time (head dims up to 128) */
#define ID_BT 0          /* MTE2 -> S: the partition's block-table entries are in the UB */

static const struct op_param params[] = {
    {"batch", OP_P_DIM, "16", "sequences, one new token each", NULL},
    {"heads", OP_P_DIM, NULL, "query heads", NULL},
    {"kv_heads", OP_P_INT, "0", "key/value heads (GQA; 0: as heads)", NULL},
    {"context", OP_P_DIM, NULL, "tokens in each sequence's KV cache", NULL},
    {"dim", OP_P_DIM, "128", "head dimension: a multiple of 64, at most 256", NULL},
    {"block_size", OP_P_DIM, "128", "tokens per cache block (a multiple of 16, at most 128)", NULL},
    {"partition", OP_P_DIM, "512", "tokens per partition of the context (a multiple of block_size)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "q, cache and o type: bf16 or fp16", NULL},
};

struct plan {
  uint32_t B, H, KVH, g, D, ctx, bs, PT, P, nbps;
  uint32_t chunk;        /* cache rows widened and multiplied at a time: CHUNK, fewer above 128 wide */
  enum npu_dtype dt;
  uint32_t es;
  float scale;
  uint64_t nunits, nrows;
  int dim1, dim2;
  /* GM */
  uint64_t q, kc, vc, bt, o, wo, wm, wl;
  /* UB */
  struct npk_que qin, kv, out, ml;
  uint64_t qf, bub, S, T, F, W, PB, O, red;
  /* kernel 2 */
  struct npk_que rin, rout;
  uint64_t rm, rw, rf, rW, rPB, rO, rred;
};

struct unit {
  struct npk_que qin, kv, out, ml;
};

static void unit_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  u->qin = p->qin;
  u->kv = p->kv;
  u->out = p->out;
  u->ml = p->ml;
}

/* A vector instruction of op over `rows` rows of one repeat each, at row strides (bytes). */
static void rows_v(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t a, uint64_t b, uint32_t rows,
                   uint32_t dst_stride, uint32_t a_stride, uint32_t b_stride)
{
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = a;
  v.src1 = b;
  v.dst_rep = (uint16_t)(dst_stride / 32);
  v.src0_rep = (uint16_t)(a_stride / 32);
  v.src1_rep = (uint16_t)(b_stride / 32);
  v.repeat = (uint16_t)rows;
  core_vec(t, &v);
}

/* dst row r = src row r x the value broadcast in 32-byte block r of pb (Brcb's output), over
 * rows dense fp32 rows of D (a multiple of 64): a row's one block serves its whole repeat. */
static void scale_rows(struct core_tp *t, uint64_t dst, uint64_t src, uint64_t pb, uint32_t rows, uint32_t D)
{
  for (uint32_t h = 0; h < D / VX_REP; h++) {
    struct core_vec v = vx_v(CORE_VEC_MUL, NPU_DT_FP32);
    v.dst = dst + h * VX_REP_BYTES;
    v.src0 = src + h * VX_REP_BYTES;
    v.src1 = pb;
    v.src1_blk = 0;
    v.dst_rep = v.src0_rep = (uint16_t)(D * 4 / 32);
    v.src1_rep = 1;
    v.repeat = (uint16_t)rows;
    core_vec(t, &v);
  }
}

/* Gather cache block j of the partition (n rows of kv head kvh) into the next K/V buffer. */
static uint64_t gather(struct core_tp *t, const struct plan *p, struct unit *u, uint64_t cache, uint32_t kvh,
                       uint32_t j, uint32_t n)
{
  uint64_t buf = npk_alloc(t, &u->kv);
  struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true, .index_ub = p->bub + 4ull * j,
                         .index_stride = (uint64_t)p->bs * p->KVH * p->D * p->es};
  cp.src = vx_nd(MEM_GM, p->dt, cache + (uint64_t)kvh * p->D * p->es, n, p->D, p->KVH * p->D);
  cp.dst = vx_nd(MEM_UB, p->dt, buf, n, p->D, p->D);
  core_copy_ex(t, &cp);
  npk_enque(t, &u->kv);
  return npk_deque(t, &u->kv);
}

static void block(struct core_tp *t, void *ctx, uint64_t w)
{
  struct plan *p = ctx;
  struct unit *u = core_unit_ctx(t);
  uint32_t part = (uint32_t)(w % p->P), kvh = (uint32_t)(w / p->P % p->KVH), b = (uint32_t)(w / p->P / p->KVH);
  uint32_t t0 = part * p->PT, np = p->ctx - t0 < p->PT ? p->ctx - t0 : p->PT, nb = (np + p->bs - 1) / p->bs;
  uint32_t D = p->D, g = p->g, rowb = D * 4, halves = D / VX_REP;
  uint64_t h0 = (uint64_t)b * p->H + (uint64_t)kvh * g; /* the group's first query head */

  /* the group's queries, widened and scaled; the partition's block-table entries */
  uint64_t qb = npk_alloc(t, &u->qin);
  vx_load(t, qb, p->q + h0 * D * p->es, p->dt, g, D, D, D);
  npk_enque(t, &u->qin);
  struct core_tile bg = vx_nd(MEM_GM, NPU_DT_INT32, p->bt + ((uint64_t)b * p->nbps + t0 / p->bs) * 4, 1, nb, nb);
  struct core_tile bu = vx_nd(MEM_UB, NPU_DT_INT32, p->bub, 1, nb, nb);
  core_copy(t, &bu, &bg);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_S, ID_BT);
  qb = npk_deque(t, &u->qin);
  vx_cast(t, p->qf, NPU_DT_FP32, qb, p->dt, (uint64_t)g * D);
  npk_free(t, &u->qin);
  vx_sc(t, CORE_VEC_MULS, p->qf, p->qf, p->scale, (uint64_t)g * D);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_S, ID_BT);
  core_scalar(t, VX_GATHER_ADDR_CYCLES * nb);

  /* pass 1: scores */
  for (uint32_t j = 0; j < nb; j++) {
    uint32_t n = j + 1 < nb ? p->bs : np - j * p->bs;
    uint64_t kb = gather(t, p, u, p->kc, kvh, j, n);
    for (uint32_t c = 0; c < n; c += p->chunk) {
      uint32_t cn = n - c < p->chunk ? n - c : p->chunk;
      vx_cast(t, p->F, NPU_DT_FP32, kb + (uint64_t)c * D * p->es, p->dt, (uint64_t)cn * D);
      for (uint32_t i = 0; i < g; i++) {
        for (uint32_t h = 0; h < halves; h++)
          rows_v(t, CORE_VEC_MUL, p->W + h * VX_REP_BYTES, p->F + h * VX_REP_BYTES, p->qf + (uint64_t)i * rowb + h * VX_REP_BYTES,
                 cn, rowb, rowb, 0);
        for (uint32_t h = 1; h < halves; h++) /* fold each row's 64-column groups into the first */
          rows_v(t, CORE_VEC_ADD, p->W, p->W, p->W + h * VX_REP_BYTES, cn, rowb, rowb, rowb);
        struct core_vec r = vx_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32);
        r.dst = p->S + ((uint64_t)i * p->PT + (uint64_t)j * p->bs + c) * 4;
        r.src0 = p->W;
        r.src0_rep = (uint16_t)(rowb / 32);
        r.repeat = (uint16_t)cn;
        core_vec(t, &r);
      }
    }
    npk_free(t, &u->kv);
  }

  /* softmax per head: m = max, S = exp(S - m), l = sum */
  for (uint32_t i = 0; i < g; i++) {
    uint64_t s = p->S + (uint64_t)i * p->PT * 4, m = p->red + i * 32ull, neg = m + g * 32ull, l = neg + g * 32ull;
    vx_un(t, CORE_VEC_COPY, p->T, s, np);
    vx_reduce_n(t, CORE_VEC_REDUCE_MAX, m, p->T, np);
    vx_sc(t, CORE_VEC_MULS, neg, m, -1.0, 1);
    vx_sc_ub(t, CORE_VEC_ADDS, s, s, neg, np);
    vx_un(t, CORE_VEC_EXP, s, s, np);
    vx_un(t, CORE_VEC_COPY, p->T, s, np);
    vx_reduce_n(t, CORE_VEC_REDUCE_SUM, l, p->T, np);
  }

  /* pass 2: O += P V */
  vx_dup(t, NPU_DT_FP32, p->O, 0.0, (uint64_t)g * D);
  for (uint32_t j = 0; j < nb; j++) {
    uint32_t n = j + 1 < nb ? p->bs : np - j * p->bs;
    uint64_t vb = gather(t, p, u, p->vc, kvh, j, n);
    for (uint32_t c = 0; c < n; c += p->chunk) {
      uint32_t cn = n - c < p->chunk ? n - c : p->chunk;
      vx_cast(t, p->F, NPU_DT_FP32, vb + (uint64_t)c * D * p->es, p->dt, (uint64_t)cn * D);
      for (uint32_t i = 0; i < g; i++) {
        vx_brcb(t, p->PB, p->S + ((uint64_t)i * p->PT + (uint64_t)j * p->bs + c) * 4, cn);
        scale_rows(t, p->W, p->F, p->PB, cn, D);
        vx_fold_rows(t, CORE_VEC_ADD, p->W, cn, D);
        vx_bin(t, CORE_VEC_ADD, p->O + (uint64_t)i * rowb, p->O + (uint64_t)i * rowb, p->W, D);
      }
    }
    npk_free(t, &u->kv);
  }

  /* out */
  if (p->P == 1) {
    for (uint32_t i = 0; i < g; i++) {
      uint64_t inv = p->red + (g + i) * 32ull, l = p->red + (2ull * g + i) * 32;
      vx_un(t, CORE_VEC_RECIP, inv, l, 1);
      vx_sc_ub(t, CORE_VEC_MULS, p->O + (uint64_t)i * rowb, p->O + (uint64_t)i * rowb, inv, D);
    }
    uint64_t ob = npk_alloc(t, &u->out);
    vx_cast(t, ob, p->dt, p->O, NPU_DT_FP32, (uint64_t)g * D);
    npk_enque(t, &u->out);
    ob = npk_deque(t, &u->out);
    vx_store(t, p->o + h0 * D * p->es, ob, p->dt, g, D, D, D);
    npk_free(t, &u->out);
    return;
  }
  uint64_t ob = npk_alloc(t, &u->out), mb = npk_alloc(t, &u->ml);
  vx_un(t, CORE_VEC_COPY, ob, p->O, (uint64_t)g * D);
  vx_un(t, CORE_VEC_COPY, mb, p->red, (uint64_t)g * 8);                             /* maxima, one per 32 bytes */
  vx_un(t, CORE_VEC_COPY, mb + g * 32ull, p->red + 2ull * g * 32, (uint64_t)g * 8); /* sums */
  npk_enque(t, &u->out);
  npk_enque(t, &u->ml);
  ob = npk_deque(t, &u->out);
  vx_store(t, p->wo + (h0 * p->P + part) * D * 4, ob, NPU_DT_FP32, g, D, (uint64_t)p->P * D, D);
  npk_free(t, &u->out);
  mb = npk_deque(t, &u->ml);
  struct core_tile su = vx_nd(MEM_UB, NPU_DT_FP32, mb, g, 1, 8), sg = vx_nd(MEM_GM, NPU_DT_FP32, p->wm + (h0 * p->P + part) * 4, g, 1, p->P);
  core_copy(t, &sg, &su);
  su.addr = mb + g * 32ull;
  sg.addr = p->wl + (h0 * p->P + part) * 4;
  core_copy(t, &sg, &su);
  npk_free(t, &u->ml);
}

/* ------------------------------------------------------------------ kernel 2: the reduction */

struct runit {
  struct npk_que rin, rout;
};

static void r_begin(struct core_tp *t, void *ctx)
{
  struct plan *p = ctx;
  struct runit *u = core_unit_ctx(t);
  u->rin = p->rin;
  u->rout = p->rout;
}

static void r_block(struct core_tp *t, void *ctx, uint64_t row)
{
  struct plan *p = ctx;
  struct runit *u = core_unit_ctx(t);
  uint32_t P = p->P, D = p->D;
  uint64_t in = npk_alloc(t, &u->rin); /* [P x D] partial outputs, then P maxima, then P sums */
  uint64_t ml = in + (uint64_t)P * D * 4, lb = ml + (P + 7ull) / 8 * 32;
  vx_load(t, in, p->wo + row * P * D * 4, NPU_DT_FP32, P, D, D, D);
  vx_load(t, ml, p->wm + row * P * 4, NPU_DT_FP32, 1, P, P, P);
  vx_load(t, lb, p->wl + row * P * 4, NPU_DT_FP32, 1, P, P, P);
  npk_enque(t, &u->rin);
  in = npk_deque(t, &u->rin);
  /* M = max m_p; w_p = exp(m_p - M); L = sum w_p l_p */
  vx_un(t, CORE_VEC_COPY, p->rm, ml, P);
  vx_reduce_n(t, CORE_VEC_REDUCE_MAX, p->rred, p->rm, P);
  vx_sc(t, CORE_VEC_MULS, p->rred + 32, p->rred, -1.0, 1);
  vx_sc_ub(t, CORE_VEC_ADDS, p->rw, ml, p->rred + 32, P);
  vx_un(t, CORE_VEC_EXP, p->rw, p->rw, P);
  vx_bin(t, CORE_VEC_MUL, p->rm, p->rw, lb, P);
  vx_reduce_n(t, CORE_VEC_REDUCE_SUM, p->rred + 64, p->rm, P);
  /* O = sum w_p O_p / L */
  vx_brcb(t, p->rPB, p->rw, P);
  scale_rows(t, p->rW, in, p->rPB, P, D);
  npk_free(t, &u->rin);
  vx_fold_rows(t, CORE_VEC_ADD, p->rW, P, D);
  vx_un(t, CORE_VEC_RECIP, p->rred + 32, p->rred + 64, 1);
  vx_sc_ub(t, CORE_VEC_MULS, p->rW, p->rW, p->rred + 32, D);
  uint64_t ob = npk_alloc(t, &u->rout);
  vx_cast(t, ob, p->dt, p->rW, NPU_DT_FP32, D);
  npk_enque(t, &u->rout);
  ob = npk_deque(t, &u->rout);
  vx_store(t, p->o + row * D * p->es, ob, p->dt, 1, D, D, D);
  npk_free(t, &u->rout);
}

/* ------------------------------------------------------------------ operator */

static int bad(struct npu_diag *diag, const char *key, const char *fmt, unsigned long long v)
{
  char m[160];
  snprintf(m, sizeof m, fmt, v);
  return npu_diag_set(diag, "command line", 0, key, "%s", m), NPU_EINVAL;
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct plan *p = pp;
  memset(p, 0, sizeof *p);
  uint64_t B = op_u(d, a, "batch"), H = op_u(d, a, "heads"), ctx = op_u(d, a, "context"), D = op_u(d, a, "dim");
  uint64_t bs = op_u(d, a, "block_size"), PT = op_u(d, a, "partition");
  uint64_t kvh = op_u(d, a, "kv_heads");
  p->dt = op_dtype(d, a, "dtype");
  if (p->dt != NPU_DT_BF16 && p->dt != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--dtype", "bf16 or fp16, got %s", npu_dtype_name(p->dt)), NPU_EINVAL;
  if (D % 64 || D > 256) return bad(diag, "--dim", "a multiple of 64 up to 256, got %llu", D);
  if (kvh && H % kvh) return bad(diag, "--kv_heads", "must divide --heads, got %llu", kvh);
  if (bs % 16 || bs > 128) return bad(diag, "--block_size", "a multiple of 16 up to 128, got %llu", bs);
  if (PT % bs || PT > 4096) return bad(diag, "--partition", "a multiple of --block_size up to 4096, got %llu", PT);
  if (ctx > (1ull << 20)) return bad(diag, "--context", "at most 1048576 tokens, got %llu", ctx);
  if (B * H > (1ull << 24)) return bad(diag, "--batch", "batch x heads at most 16777216, got %llu", B * H);
  p->B = (uint32_t)B;
  p->H = (uint32_t)H;
  p->KVH = kvh ? (uint32_t)kvh : (uint32_t)H;
  p->g = p->H / p->KVH;
  p->D = (uint32_t)D;
  p->ctx = (uint32_t)ctx;
  p->bs = (uint32_t)bs;
  p->PT = (uint32_t)(PT < ctx ? PT : (ctx + bs - 1) / bs * bs);
  p->P = (p->ctx + p->PT - 1) / p->PT;
  if (p->P > 256) return bad(diag, "--partition", "the context needs at most 256 partitions, got %llu", p->P);
  p->nbps = (p->ctx + p->bs - 1) / p->bs;
  p->es = vx_es(p->dt);
  p->scale = (float)(1.0 / sqrt((double)D));
  uint32_t g = p->g;
  struct npk_pipe pipe;
  npk_pipe_init(&pipe, chip);
  npk_pipe_que(&pipe, &p->qin, NPK_VECIN, 1, (uint64_t)g * D * p->es);
  npk_pipe_que(&pipe, &p->kv, NPK_VECIN, 2, (uint64_t)p->bs * D * p->es);
  npk_pipe_que(&pipe, &p->out, NPK_VECOUT, 1, (uint64_t)g * D * 4);
  npk_pipe_que(&pipe, &p->ml, NPK_VECOUT, 1, (uint64_t)g * 64);
  p->qf = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)g * D * 4);
  p->bub = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)p->PT / p->bs * 4);
  p->S = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)g * p->PT * 4 + 32); /* + Brcb's read past a row's end */
  p->T = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)p->PT * 4);
  p->chunk = D > 192 ? CHUNK / 8 : D > 128 ? CHUNK / 4 : CHUNK; /* wide heads' K/V blocks leave less UB */
  p->F = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)p->chunk * D * 4);
  p->W = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)p->chunk * D * 4);
  p->PB = npk_pipe_buf(&pipe, MEM_UB, p->chunk * 32);
  p->O = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)g * D * 4);
  p->red = npk_pipe_buf(&pipe, MEM_UB, (uint64_t)g * 96); /* per head 32 bytes each: max, -max (1/sum), sum */
  if (g > 64) return bad(diag, "--heads", "at most 64 query heads per key/value head, got %llu", g);
  int rc = npk_pipe_check(&pipe, "--partition", diag);
  if (rc) return rc;
  p->nunits = (uint64_t)p->B * p->KVH * p->P;
  p->nrows = (uint64_t)p->B * p->H;
  p->dim1 = vx_dim(chip, p->nunits);
  if (p->P > 1) {
    struct npk_pipe r;
    npk_pipe_init(&r, chip);
    uint32_t pr = (p->P + 7) / 8 * 8;
    npk_pipe_que(&r, &p->rin, NPK_VECIN, 2, (uint64_t)p->P * D * 4 + 2ull * pr * 4 + 64);
    npk_pipe_que(&r, &p->rout, NPK_VECOUT, 2, (uint64_t)D * p->es);
    p->rm = npk_pipe_buf(&r, MEM_UB, (uint64_t)pr * 4);
    p->rw = npk_pipe_buf(&r, MEM_UB, (uint64_t)pr * 4);
    p->rW = npk_pipe_buf(&r, MEM_UB, (uint64_t)p->P * D * 4);
    p->rPB = npk_pipe_buf(&r, MEM_UB, (uint64_t)pr * 32);
    p->rred = npk_pipe_buf(&r, MEM_UB, 96);
    rc = npk_pipe_check(&r, "--partition", diag);
    if (rc) return rc;
    p->dim2 = vx_dim(chip, p->nrows);
  }
  return 0;
}

static void setup(void *pp, struct op_exec *x)
{
  struct plan *p = pp;
  uint64_t nblocks = (uint64_t)p->B * p->nbps, cache = nblocks * p->bs * p->KVH * p->D;
  p->q = op_tensor(x, "q", p->dt, (uint64_t)p->B * p->H * p->D, OP_INIT_UNIFORM)->addr;
  p->kc = op_tensor(x, "k_cache", p->dt, cache, OP_INIT_UNIFORM)->addr;
  p->vc = op_tensor(x, "v_cache", p->dt, cache, OP_INIT_UNIFORM)->addr;
  /* a seeded permutation of the cache's blocks (Fisher-Yates) */
  int32_t *bt = npu_xmalloc(nblocks * sizeof *bt);
  for (uint64_t i = 0; i < nblocks; i++) bt[i] = (int32_t)i;
  for (uint64_t i = nblocks; i > 1; i--) {
    uint64_t j = (uint64_t)(op_rand(x) * (double)i);
    if (j >= i) j = i - 1;
    int32_t s = bt[i - 1];
    bt[i - 1] = bt[j];
    bt[j] = s;
  }
  p->bt = op_tensor_bytes(x, "block_table", nblocks * 4, bt)->addr;
  free(bt);
  p->o = op_tensor(x, "o", p->dt, (uint64_t)p->B * p->H * p->D, OP_INIT_NONE)->addr;
  if (p->P > 1) {
    p->wo = op_tensor(x, "partial_o", NPU_DT_FP32, p->nrows * p->P * p->D, OP_INIT_SCRATCH)->addr;
    p->wm = op_tensor(x, "partial_max", NPU_DT_FP32, p->nrows * p->P, OP_INIT_SCRATCH)->addr;
    p->wl = op_tensor(x, "partial_sum", NPU_DT_FP32, p->nrows * p->P, OP_INIT_SCRATCH)->addr;
  }
  struct core_kernel k1 = {.name = "paged_attention", .mode = CORE_MODE_VECTOR, .block_dim = p->dim1,
                           .nblocks = p->nunits, .ctx = p, .unit_begin = unit_begin, .block = block,
                           .unit_ctx_bytes = sizeof(struct unit)};
  op_kernel(x, &k1);
  if (p->P > 1) {
    struct core_kernel k2 = {.name = "paged_attention_reduce", .mode = CORE_MODE_VECTOR, .block_dim = p->dim2,
                             .nblocks = p->nrows, .ctx = p, .unit_begin = r_begin, .block = r_block,
                             .unit_ctx_bytes = sizeof(struct runit)};
    op_kernel(x, &k2);
  }
}

static double flops(const void *pp)
{
  const struct plan *p = pp;
  return 4.0 * p->B * p->H * (double)p->ctx * p->D;
}

/*
 * The host reference in double through the same block table. Tolerance: the output is rounded
 * to the input type (2^-8 relative for bf16, 2^-11 fp16) after fp32 arithmetic; |o| <= max |v|
 * <= 1, so 4 unit roundoffs absolute.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct plan *p = pp;
  double *Q = op_decode(op_find_tensor(x, "q")), *K = op_decode(op_find_tensor(x, "k_cache"));
  double *V = op_decode(op_find_tensor(x, "v_cache")), *O = op_decode(op_find_tensor(x, "o"));
  const int32_t *bt = op_find_tensor(x, "block_table")->host;
  size_t D = p->D, n = (size_t)p->nrows * D;
  double *R = npu_xcalloc(n, sizeof *R), *s = npu_xmalloc(p->ctx * sizeof *s);
  for (uint32_t b = 0; b < p->B; b++)
    for (uint32_t h = 0; h < p->H; h++) {
      uint32_t kvh = h / p->g;
      const double *q = Q + ((size_t)b * p->H + h) * D;
      double m = -INFINITY, l = 0;
      for (uint32_t tk = 0; tk < p->ctx; tk++) {
        size_t row = (((size_t)bt[(size_t)b * p->nbps + tk / p->bs] * p->bs + tk % p->bs) * p->KVH + kvh) * D;
        double dot = 0;
        for (size_t c = 0; c < D; c++) dot += q[c] * K[row + c];
        s[tk] = dot / sqrt((double)D);
        m = fmax(m, s[tk]);
      }
      double *r = R + ((size_t)b * p->H + h) * D;
      for (uint32_t tk = 0; tk < p->ctx; tk++) {
        size_t row = (((size_t)bt[(size_t)b * p->nbps + tk / p->bs] * p->bs + tk % p->bs) * p->KVH + kvh) * D;
        double e = exp(s[tk] - m);
        l += e;
        for (size_t c = 0; c < D; c++) r[c] += e * V[row + c];
      }
      for (size_t c = 0; c < D; c++) r[c] /= l;
    }
  double eps = p->dt == NPU_DT_BF16 ? 1.0 / 256 : 1.0 / 2048;
  *max_err = op_compare(O, R, n, 4 * eps, 0);
  snprintf(summary, len, "paged_attention %ux%u heads, context %u, %u partition(s): O worst %.3g of tolerance (atol %.3g)",
           p->B, p->H, p->ctx, p->P, *max_err, 4 * eps);
  free(Q);
  free(K);
  free(V);
  free(O);
  free(R);
  free(s);
  return *max_err <= 1;
}

const struct op_desc op_paged_attention = {
    .name = "paged_attention",
    .summary = "decode attention over a paged KV cache (vLLM paged_attention_v2: block table, split-KV partitions), vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct plan),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_NONE, "a decode step (inference) is not differentiated", NULL, NULL},
};
