/*
 * gated_delta.c - the chunked gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2024,
 * "Gated Delta Networks: Improving Mamba2 with Delta Rule"; the linear-attention layers of
 * Qwen3-Next), as flash-linear-attention's chunk_gated_delta_rule computes it, on the cube and
 * vector units.
 *
 * Layouts: q, k [batch, seq, k_heads, dk]; v, o [batch, seq, heads, dv] (q, k, v, o in dtype);
 * g, beta [batch, seq, heads] fp32; the final state ht [batch, heads, dk, dv] fp32. Value head h
 * reads q/k head h / (heads / k_heads). Per (batch, value head), with S dk x dv, scale 1/sqrt(dk)
 * and S = 0 at the start:
 *   S = S exp(g_t);  u_t = beta_t (v_t - S^T k_t);  S = S + k_t u_t^T;  o_t = scale S^T q_t.
 *
 * Chunked form (chunk C; gc the cumulative sum of g within the chunk; fla's chunk.py and the
 * kernels it calls), in four launches:
 *   1 gated_delta_cumsum (vector; chunk_local_cumsum): gc per chunk, and g, beta turned
 *     head-major [batch, heads, seq] so that a chunk's values of one head are one dense vector.
 *   2 gated_delta_wy (MIX; chunk_scaled_dot_kkt + solve_tril + recompute_w_u, fused):
 *     cube      K K^T (fp32) -> GM
 *     vector    A^T = strictly-upper(K K^T o beta_i exp(gc_i - gc_j)) (K K^T is symmetric, so the
 *               vector core builds the transpose of fla's A directly), then T = (I + A)^-1 by
 *               right-looking forward substitution (row j final, rows below it updated by one
 *               Brcb'd column of A: 3 instructions per row), T in dtype -> GM; and the scaled
 *               copies the cube needs: k beta exp(gc), v beta, k exp(gc_last - gc) and
 *               q exp(gc) scale, in dtype.
 *     cube      w = T (k beta exp(gc)), u = T (v beta) -> GM (dtype)
 *   3 gated_delta_state (MIX; chunk_gated_delta_rule_fwd_h): per (batch, head, block of dv
 *     columns: fla's BV split, the state's columns evolve independently), over the chunks in order:
 *     cube      w h -> GM (fp32)               (not at the first chunk: h = 0)
 *     vector    v_new = u - w h -> GM (dtype)
 *     cube      (k exp(gc_last - gc))^T v_new -> GM (fp32)
 *     vector    h = h exp(gc_last) + that (fp32, held in the UB), h in dtype -> GM for the next
 *               chunk's w h and for the output; the last chunk's h in fp32 -> ht
 *   4 gated_delta_out (MIX; chunk_fwd_o):
 *     cube      q k^T (fp32) -> GM
 *     vector    P = causal(q k^T o exp(gc_i - gc_j)) scale (j <= i), dtype -> GM
 *     cube      o = (q exp(gc) scale) h + P v_new, one L0C accumulation, cast to dtype -> o
 * (fla applies exp(gc_last - gc) to v_new before k^T v_new; here to k, in the WY launch, off the
 * state pass's critical path: the same product.)
 * The cube core and the vector cores hand over through GM (full-size intermediate tensors, as
 * fla's launches do), with cross-core flags inside a launch; on A2 split cores each of the two
 * vector cores of an AI core serves its own chunk (its own state chains in the state pass) while
 * the cube core does the GEMMs of both; on coupled cores (GPU SMs) one role per core. Within a
 * vector role most hand-overs between pipes are a set and its wait at once (a step's vector work
 * does not overlap its own loads); the WY role's stores rotate through up to three staging
 * buffers, the state chains' through their own. The cube's GEMMs are double buffered in L1, L0
 * and L0C where two fit, and load an operand the vector role writes only after the one it does
 * not.
 *
 * FLOPs (flops): the matmuls executed, 2 m n k each, per chunk of a value head: K K^T (C C dk),
 * w (C C dk), u (C C dv), w h (C dk dv, not at a sequence's first chunk), k^T v_new (dk C dv),
 * q k^T (C C dk), q h (C dk dv, not at the first chunk), P v_new (C C dv). The vector work
 * (decays, masks, the triangular solve) is not counted.
 *
 * Backward (pass=bwd): a declared proxy (OP_BWD_PROXY), not fla's backward: forward launches in
 * the order of fla's chunk_gated_delta_rule_bwd stand for its work (the reason in op_gated_delta
 * below: cumsum, WY, the state pass x 3, the output x 2, WY); only the forward's outputs, which
 * the proxy also produces, are checked.
 *
 * Sources: Yang et al. 2024 (arXiv:2412.06464); fla-org/flash-linear-attention
 * fla/ops/gated_delta_rule/chunk.py, fla/ops/common/chunk_scaled_dot_kkt.py,
 * fla/ops/utils/solve_tril.py, fla/ops/gated_delta_rule/wy_fast.py,
 * fla/ops/common/chunk_delta_h.py, fla/ops/common/chunk_o.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/vecops_int.h"

static const char *const passes[] = {"fwd", "bwd", NULL};

static const struct op_param params[] = {
    {"batch", OP_P_DIM, "1", "sequences", NULL},
    {"seq", OP_P_DIM, NULL, "tokens per sequence (a multiple of chunk)", NULL},
    {"heads", OP_P_DIM, NULL, "value heads (Qwen3-Next: 32)", NULL},
    {"k_heads", OP_P_INT, "0", "query/key heads (0: as heads); heads a multiple of k_heads, each q/k head shared by "
     "heads / k_heads value heads (Qwen3-Next: 16)", NULL},
    {"dk", OP_P_DIM, "128", "query/key head dimension (a multiple of 16, at most 256)", NULL},
    {"dv", OP_P_DIM, "128", "value head dimension (a multiple of 16, at most 256)", NULL},
    {"chunk", OP_P_DIM, "64", "chunk length (a multiple of 16, at most 128)", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "q, k, v, o: bf16 or fp16 (g, beta and the state in fp32)", NULL},
    {"pass", OP_P_CHOICE, "fwd", "fwd or bwd (bwd: a declared proxy of forward launches)", passes},
    {"state_split", OP_P_INT, "0", "blocks of dv columns the state pass runs in parallel per head (fla's BV "
     "split; dv / state_split a multiple of 16); 0: automatic", NULL},
    {"state_chains", OP_P_INT, "0", "state items (sequence, head, dv block) each vector role runs in step, so that one's "
     "hand-overs hide behind another's work (1 to 4); 0: automatic", NULL},
};

#define NEG_BIG (-1e30) /* masked exponents: exp() of it is 0 */
#define MM_FWD 3        /* flag id of the cube's forward hand-overs (set and waited at once) */
#define X_CUBE 0        /* cross-core ids, cube -> vector: a GEMM result is in GM */
#define X_VEC 1         /* vector -> cube: an operand is in GM */

/* UB map of a vector role (byte offsets). */
struct ub_wy {
  uint32_t g, b, eg, egl, tv, bc, ku, vu, f1, f2, s, e, x, y, tm, mk, neg, end;
  uint32_t o16[3];   /* staging of the stores in the input type, taken in turn */
  uint32_t nstage;
};
struct ub_st {
  uint32_t hst, buf, u32, ud, g, end;
};
struct ub_out {
  uint32_t g, bc, e, qk, pd, mk, neg, end;
};
struct ub_cs {
  uint32_t x, y, bx, og, ob, end;
};

struct gdn {
  uint32_t B, S, H, KH, group, DK, DV, C, NC;
  uint32_t NV, DVb;              /* state pass: column blocks of dv and their width */
  uint32_t P;                    /* state pass: chains (state items) per vector role, in step */
  enum npu_dtype dt;
  uint32_t es;
  bool bwd, coupled;
  uint32_t R;                    /* vector roles per MIX unit (items per block): 2 split, 1 coupled */
  double scale;
  uint64_t N;                    /* chunk items: B H NC */
  uint64_t nb_wy, nb_st, nb_cs;  /* blocks of the launches (the output launch: nb_wy) */
  int dim_wy, dim_st, dim_cs;    /* launch units */
  uint32_t nl1, nl0, nl0c;       /* cube slots of L1, L0A/L0B, L0C (1 or 2) */
  uint64_t l1_slot, l0a_slot, l0b_slot, l0c_slot;
  struct ub_wy uw;
  struct ub_st us;
  struct ub_out uo;
  struct ub_cs uc;
  /* GM */
  uint64_t q, k, v, g, beta, o, ht;
  uint64_t gc, bt, skk, tm, w, u, kb, vb, kd, qg, wh, vn, hs, dh, qk, pm, masks, eye;
};

struct gdn_unit {
  uint32_t mm;        /* GEMMs the unit's cube core has issued: the next takes slot mm % nl */
  uint32_t stage[2];  /* stores each vector role has staged: the next takes o16[stage % nstage] */
};

#define E_STAGE 4     /* MTE3 -> V flag ids E_STAGE + k: staging buffer k stored (free) */

/* ------------------------------------------------------------------ geometry */

static uint64_t item(const struct gdn *p, uint32_t b, uint32_t h, uint32_t c)
{
  return ((uint64_t)b * p->H + h) * p->NC + c;
}

static void item_of(const struct gdn *p, uint64_t n, uint32_t *b, uint32_t *h, uint32_t *c)
{
  *c = (uint32_t)(n % p->NC);
  *h = (uint32_t)(n / p->NC % p->H);
  *b = (uint32_t)(n / p->NC / p->H);
}

/* GM byte address of row `tok` of head `hd` in a [batch, seq, heads, dim] tensor of dtype. */
static uint64_t bshd(const struct gdn *p, uint64_t base, uint32_t b, uint32_t tok, uint32_t hd, uint32_t heads,
                     uint32_t dim)
{
  return base + (((uint64_t)b * p->S + tok) * heads + hd) * dim * p->es;
}

/* A chunk's dense fp32 vector of gc or beta (head-major). */
static uint64_t hm(const struct gdn *p, uint64_t base, uint32_t b, uint32_t h, uint32_t c)
{
  return base + (((uint64_t)b * p->H + h) * p->S + (uint64_t)c * p->C) * 4;
}

/* Per-item scratch: item n's rows x cols matrix of elements of es bytes. */
static uint64_t at_item(uint64_t base, uint64_t n, uint32_t rows, uint32_t cols, uint32_t es)
{
  return base + n * rows * cols * es;
}

static void sel_aiv(struct core_tp *t, uint32_t r)
{
  core_select(t, (enum core_sub)(CORE_SUB_AIV0 + r));
}

/* Pipe `to` waits for what pipe `from` has issued so far (Ascend C SetFlag + WaitFlag). */
static void order(struct core_tp *t, enum core_pipe from, enum core_pipe to)
{
  core_set_flag(t, from, to, MM_FWD);
  core_wait_flag(t, from, to, MM_FWD);
}

/* ------------------------------------------------------------------ cube: GEMMs GM -> GM */

/* One product term of a GEMM: A (m x k) from GM, stored as is (ta false, ld a_ld) or as its
 * transpose (k x m); B (k x n) likewise. */
struct mm_term {
  uint64_t a, b;
  uint32_t a_ld, b_ld, k;
  bool ta, tb;
  uint32_t wait_a, wait_b; /* r + 1: A (B) is vector role r's result in GM: wait for it (cross-core)
                              just before its load, so that what comes before loads meanwhile */
};

static uint64_t l1_tile_bytes(const struct gdn *p, uint32_t rows, uint32_t cols)
{
  return ops_roundup(ops_roundup(rows, 16) * ops_roundup(cols, 16) * p->es, 512);
}

static void mm_begin(struct core_tp *t, const struct gdn *p)
{
  core_select(t, CORE_SUB_AIC);
  for (uint32_t s = 0; s < p->nl1; s++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, (int)s);
  for (uint32_t s = 0; s < p->nl0; s++) core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, (int)s);
  for (uint32_t s = 0; s < p->nl0c; s++) core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, (int)s);
}

static void mm_end(struct core_tp *t, const struct gdn *p)
{
  core_select(t, CORE_SUB_AIC);
  for (uint32_t s = 0; s < p->nl1; s++) core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, (int)s);
  for (uint32_t s = 0; s < p->nl0; s++) core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, (int)s);
  for (uint32_t s = 0; s < p->nl0c; s++) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, (int)s);
}

/*
 * out (m x n, GM, row stride out_ld, type odt) = sum of the terms' A B, accumulated in L0C: the
 * operands GM -> L1 (NZ), L1 -> L0A / L0B (transposed there when stored transposed), the mmads,
 * FixPipe -> GM. Each buffer takes the next of its slots (double buffered where two fit).
 */
static void mm(struct core_tp *t, const struct gdn *p, const struct mm_term *tm, int nt, uint32_t m, uint32_t n,
               uint64_t out, uint32_t out_ld, enum npu_dtype odt)
{
  struct gdn_unit *un = core_unit_ctx(t);
  uint32_t i = un->mm++;
  int s1 = (int)(i % p->nl1), s0 = (int)(i % p->nl0), sc = (int)(i % p->nl0c);
  struct core_tile la[2], lb[2];
  uint64_t l1 = (uint64_t)s1 * p->l1_slot;
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s1);
  for (int q = 0; q < nt; q++) {
    uint32_t ar = tm[q].ta ? tm[q].k : m, ac = tm[q].ta ? m : tm[q].k;
    uint32_t br = tm[q].tb ? n : tm[q].k, bc = tm[q].tb ? tm[q].k : n;
    if (tm[q].wait_a) core_xwait(t, CORE_PIPE_MTE2, (enum core_sub)(CORE_SUB_AIV0 + tm[q].wait_a - 1), X_VEC);
    struct core_tile ga = ops_tile(MEM_GM, CORE_ND, p->dt, tm[q].a, ar, ac, tm[q].a_ld);
    la[q] = ops_tile(MEM_L1, CORE_NZ, p->dt, l1, ar, ac, 0);
    core_copy(t, &la[q], &ga);
    l1 += l1_tile_bytes(p, ar, ac);
    if (tm[q].wait_b) core_xwait(t, CORE_PIPE_MTE2, (enum core_sub)(CORE_SUB_AIV0 + tm[q].wait_b - 1), X_VEC);
    struct core_tile gb = ops_tile(MEM_GM, CORE_ND, p->dt, tm[q].b, br, bc, tm[q].b_ld);
    lb[q] = ops_tile(MEM_L1, CORE_NZ, p->dt, l1, br, bc, 0);
    core_copy(t, &lb[q], &gb);
    l1 += l1_tile_bytes(p, br, bc);
  }
  order(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, s0);
  struct core_tile a0[2], b0[2];
  uint64_t oa = (uint64_t)s0 * p->l0a_slot, ob = (uint64_t)s0 * p->l0b_slot;
  for (int q = 0; q < nt; q++) {
    struct core_copy ca = {.src = la[q], .scale = 1.0f, .fb_scale = UINT64_MAX, .transpose = tm[q].ta};
    ca.dst = a0[q] = ops_tile(MEM_L0A, CORE_ZZ, p->dt, oa, m, tm[q].k, 0);
    core_copy_ex(t, &ca);
    oa += ops_roundup(core_tile_bytes(&ca.dst), 512);
    struct core_copy cb = {.src = lb[q], .scale = 1.0f, .fb_scale = UINT64_MAX, .transpose = tm[q].tb};
    cb.dst = b0[q] = ops_tile(MEM_L0B, CORE_ZN, p->dt, ob, tm[q].k, n, 0);
    core_copy_ex(t, &cb);
    ob += ops_roundup(core_tile_bytes(&cb.dst), 512);
  }
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, s1);
  order(t, CORE_PIPE_MTE1, CORE_PIPE_M);
  core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, sc);
  struct core_tile c = ops_tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, (uint64_t)sc * p->l0c_slot, m, n,
                                (uint32_t)ops_roundup(m, 16));
  c.c0 = 16;
  for (int q = 0; q < nt; q++) core_mmad(t, &c, &a0[q], &b0[q], m, tm[q].k, n, q == 0);
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, s0);
  order(t, CORE_PIPE_M, CORE_PIPE_FIX);
  struct core_copy co = {.src = c, .scale = 1.0f, .fb_scale = UINT64_MAX};
  co.dst = ops_tile(MEM_GM, CORE_ND, odt, out, m, n, out_ld);
  core_copy_ex(t, &co);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, sc);
}

/* Tell vector role r (from FixPipe) that a result is in GM; wait (on MTE2) for its operand. */
static void cube_tell(struct core_tp *t, uint32_t r)
{
  core_xset(t, CORE_PIPE_FIX, (enum core_sub)(CORE_SUB_AIV0 + r), X_CUBE);
}

static void vec_tell(struct core_tp *t)
{
  core_xset(t, CORE_PIPE_MTE3, CORE_SUB_AIC, X_VEC);
}

static void vec_await(struct core_tp *t)
{
  core_xwait(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_CUBE);
}

/* ------------------------------------------------------------------ vector helpers */

/* dst (rows x cols fp32, dense) = bits ? dst : NEG_BIG, bits at mk (one per element, dense),
 * the constant block at neg. */
static void mask_select(struct core_tp *t, uint64_t dst, uint64_t mk, uint64_t neg, uint32_t elems)
{
  struct core_vec v = vx_v(CORE_VEC_SELECT, NPU_DT_FP32);
  v.src1_blk = 0;
  v.src1_rep = 0;
  uint32_t reps = elems / VX_REP;
  for (uint32_t r0 = 0; r0 < reps; r0 += 128) {
    v.repeat = (uint16_t)(reps - r0 < 128 ? reps - r0 : 128);
    v.dst = v.src0 = dst + (uint64_t)r0 * VX_REP_BYTES;
    v.src1 = neg;
    v.aux = mk + (uint64_t)r0 * 8;
    core_vec(t, &v);
  }
}

/* dst[i][j] = exp(g[i] - g[j]) (rows_are_i) or exp(g[j] - g[i]) where the mask is set, else 0:
 * the chunk's decay matrix, C x C dense fp32. bc: C Brcb blocks of g. */
static void decay(struct core_tp *t, const struct gdn *p, uint64_t dst, uint64_t g, uint64_t bc, uint64_t mk,
                  uint64_t neg, bool rows_are_i)
{
  uint32_t C = p->C;
  vx_brcb(t, bc, g, C);
  if (rows_are_i) /* E[i][j] = g_i - g_j */
    vx_rows(t, CORE_VEC_SUB, vx_full(dst, C * 4), vx_rowb(bc), vx_colv(g), C, C);
  else /* E[j][i] = g_i - g_j */
    vx_rows(t, CORE_VEC_SUB, vx_full(dst, C * 4), vx_colv(g), vx_rowb(bc), C, C);
  mask_select(t, dst, mk, neg, C * C);
  vx_un(t, CORE_VEC_EXP, dst, dst, (uint64_t)C * C);
}

/* The WY role's next staging buffer for a store in the input type, once its last store is done
 * (MTE3 -> V E_STAGE + k, set after that store); stage_stored marks the store issued. */
static uint32_t stage_take(struct core_tp *t, const struct gdn *p, uint32_t r, int *k)
{
  struct gdn_unit *un = core_unit_ctx(t);
  *k = (int)(un->stage[r]++ % p->uw.nstage);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, E_STAGE + *k);
  return p->uw.o16[*k];
}

static void stage_stored(struct core_tp *t, int k)
{
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, E_STAGE + k);
}

/* f1 (rows x cols fp32) o row scale s (dense fp32 per row), in the input type, stored to GM at gm
 * (row stride ld) through the next staging buffer; f2 and bc are scratch. */
static void scale_rows_out(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t s, uint32_t rows,
                           uint32_t cols, uint64_t gm, uint32_t ld)
{
  const struct ub_wy *m = &p->uw;
  vx_brcb(t, m->bc, s, rows);
  vx_rows(t, CORE_VEC_MUL, vx_full(m->f2, cols * 4), vx_full(m->f1, cols * 4), vx_rowb(m->bc), rows, cols);
  int k;
  uint64_t o16 = stage_take(t, p, r, &k);
  vx_cast(t, o16, p->dt, m->f2, NPU_DT_FP32, (uint64_t)rows * cols);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
  vx_store(t, gm, o16, p->dt, rows, cols, ld, cols);
  stage_stored(t, k);
}

/* ------------------------------------------------------------------ 1: cumsum (vector) */

static void cs_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct gdn *p = ctx;
  const struct ub_cs *m = &p->uc;
  uint32_t b = (uint32_t)(blk / p->NC), c = (uint32_t)(blk % p->NC), C = p->C, H = p->H;
  uint32_t Hp = (uint32_t)ops_roundup(H, 8);
  uint64_t row0 = ((uint64_t)b * p->S + (uint64_t)c * C) * H * 4;
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2);
  order(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2);
  vx_load(t, m->x, p->g + row0, NPU_DT_FP32, C, H, H, Hp);
  vx_load(t, m->bx, p->beta + row0, NPU_DT_FP32, C, H, H, Hp);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  order(t, CORE_PIPE_MTE3, CORE_PIPE_V);
  /* inclusive prefix sum over the chunk's rows, Hillis-Steele between x and y */
  uint64_t src = m->x, dst = m->y, rb = (uint64_t)Hp * 4;
  for (uint32_t s = 1; s < C; s *= 2) {
    vx_un(t, CORE_VEC_COPY, dst, src, (uint64_t)s * Hp);
    vx_bin(t, CORE_VEC_ADD, dst + s * rb, src + s * rb, src, (uint64_t)(C - s) * Hp);
    uint64_t tmp = src;
    src = dst;
    dst = tmp;
  }
  /* each head's column to a dense row: a one-lane reduction per element */
  for (int w = 0; w < 2; w++) {
    uint64_t in = w ? m->bx : src, out = w ? m->ob : m->og;
    for (uint32_t h = 0; h < H; h++) {
      struct core_vec v = vx_v(CORE_VEC_REDUCE_SUM, NPU_DT_FP32);
      v.mask[0] = 1ull << (h % 8);
      v.mask[1] = 0;
      v.src0 = in + (uint64_t)(h / 8) * 32;
      v.src0_rep = (uint16_t)(Hp / 8);
      v.repeat = (uint16_t)C;
      v.dst = out + (uint64_t)h * C * 4;
      core_vec(t, &v);
    }
  }
  order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
  vx_store(t, hm(p, p->gc, b, 0, c), m->og, NPU_DT_FP32, H, C, p->S, C);
  vx_store(t, hm(p, p->bt, b, 0, c), m->ob, NPU_DT_FP32, H, C, p->S, C);
}

/* ------------------------------------------------------------------ 2: WY (MIX) */

/* The items of block blk: R consecutive chunk items (fewer in the last block). */
static uint32_t block_items(const struct gdn *p, uint64_t blk, uint64_t total)
{
  uint64_t first = blk * p->R;
  return (uint32_t)(total - first < p->R ? total - first : p->R);
}

/* Unit begin of a MIX launch whose vector roles select with a mask: the cube's slots free, each
 * role's mask bits (from GM at mk_gm) and its NEG_BIG block in the UB. */
static void mix_begin(struct core_tp *t, const struct gdn *p, uint64_t mk_gm, uint32_t mk, uint32_t neg)
{
  mm_begin(t, p);
  uint32_t mb = p->C * p->C / 8;
  for (uint32_t r = 0; r < p->R; r++) {
    sel_aiv(t, r);
    vx_load(t, mk, mk_gm, NPU_DT_UINT8, 1, mb, mb, mb);
    vx_dup(t, NPU_DT_FP32, neg, NEG_BIG, 8);
    order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  }
}

/* On every vector role, set (at a unit's start) or wait for (at its end) flags from -> to of ids
 * id0 .. id0 + n - 1: buffers that start free and must be free again at the end. */
static void role_flags(struct core_tp *t, const struct gdn *p, enum core_pipe from, enum core_pipe to, int id0,
                       uint32_t n, bool set)
{
  for (uint32_t r = 0; r < p->R; r++) {
    sel_aiv(t, r);
    for (uint32_t k = 0; k < n; k++) {
      if (set)
        core_set_flag(t, from, to, id0 + (int)k);
      else
        core_wait_flag(t, from, to, id0 + (int)k);
    }
  }
}

static void wy_begin(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mix_begin(t, p, p->masks, p->uw.mk, p->uw.neg);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_V, E_STAGE, p->uw.nstage, true);
}

static void wy_end(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mm_end(t, p);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_V, E_STAGE, p->uw.nstage, false);
}

static void mix_end(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mm_end(t, p);
}

/* Vector role of the WY launch for item n. */
static void wy_vec(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  const struct ub_wy *m = &p->uw;
  uint32_t b, h, c, C = p->C, DK = p->DK, DV = p->DV;
  item_of(p, n, &b, &h, &c);
  uint32_t kh = h / p->group;
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2); /* (the stores read only the staging buffers) */
  vx_load(t, m->g, hm(p, p->gc, b, h, c), NPU_DT_FP32, 1, C, C, C);
  vx_load(t, m->b, hm(p, p->bt, b, h, c), NPU_DT_FP32, 1, C, C, C);
  vx_load(t, m->ku, bshd(p, p->k, b, c * C, kh, p->KH, DK), p->dt, C, DK, p->KH * DK, DK);
  vx_load(t, m->vu, bshd(p, p->v, b, c * C, h, p->H, DV), p->dt, C, DV, p->H * DV, DV);
  vx_load(t, m->x, p->eye, NPU_DT_FP32, 1, C * C, C * C, C * C);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  /* exp(gc), exp(gc_last - gc), beta exp(gc) */
  vx_un(t, CORE_VEC_EXP, m->eg, m->g, C);
  vx_sc(t, CORE_VEC_MULS, m->tv, m->g, -1.0, C);
  vx_sc_ub(t, CORE_VEC_ADDS, m->tv, m->tv, m->g + (uint64_t)(C - 1) * 4, C);
  vx_un(t, CORE_VEC_EXP, m->egl, m->tv, C);
  vx_bin(t, CORE_VEC_MUL, m->tv, m->b, m->eg, C);
  /* k beta exp(gc) and k exp(gc_last - gc) */
  vx_cast(t, m->f1, NPU_DT_FP32, m->ku, p->dt, (uint64_t)C * DK);
  scale_rows_out(t, p, r, m->tv, C, DK, at_item(p->kb, n, C, DK, p->es), DK);
  scale_rows_out(t, p, r, m->egl, C, DK, at_item(p->kd, n, C, DK, p->es), DK);
  /* v beta */
  vx_cast(t, m->f1, NPU_DT_FP32, m->vu, p->dt, (uint64_t)C * DV);
  scale_rows_out(t, p, r, m->b, C, DV, at_item(p->vb, n, C, DV, p->es), DV);
  /* q exp(gc) scale, q through k's buffer */
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2);
  vx_load(t, m->ku, bshd(p, p->q, b, c * C, kh, p->KH, DK), p->dt, C, DK, p->KH * DK, DK);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  vx_cast(t, m->f1, NPU_DT_FP32, m->ku, p->dt, (uint64_t)C * DK);
  vx_sc(t, CORE_VEC_MULS, m->tv, m->eg, p->scale, C);
  scale_rows_out(t, p, r, m->tv, C, DK, at_item(p->qg, n, C, DK, p->es), DK);
  /* A^T[j][i] = (K K^T)[j][i] beta_i exp(gc_i - gc_j), i > j */
  vec_await(t);
  vx_load(t, m->s, at_item(p->skk, n, C, C, 4), NPU_DT_FP32, 1, C * C, C * C, C * C);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  decay(t, p, m->e, m->g, m->bc, m->mk, m->neg, false);
  vx_rows(t, CORE_VEC_MUL, vx_full(m->e, C * 4), vx_full(m->e, C * 4), vx_colv(m->b), C, C);
  vx_bin(t, CORE_VEC_MUL, m->s, m->s, m->e, (uint64_t)C * C);
  /* T = (I + A)^-1: for each j, rows i > j of X -= A[i][j] X[j] (A[i][j] = A^T[j][i]), written out
   * of place (X and Y in turn, in other UB bank regions than the products tm: no read/write bank
   * conflict); row i ends in X (even i) or Y (odd i) */
  uint32_t rb = C * 4;
  for (uint32_t j = 0; j + 1 < C; j++) {
    uint32_t rows = C - 1 - j;
    uint64_t src = j % 2 ? m->y : m->x, dst = j % 2 ? m->x : m->y, r1 = (uint64_t)(j + 1) * rb;
    vx_brcb(t, m->bc, m->s + (uint64_t)j * rb, C);
    vx_rows(t, CORE_VEC_MUL, vx_full(m->tm + r1, rb), vx_colv(src + (uint64_t)j * rb), vx_rowb(m->bc + (uint64_t)(j + 1) * 32),
            rows, C);
    vx_rows(t, CORE_VEC_SUB, vx_full(dst + r1, rb), vx_full(src + r1, rb), vx_full(m->tm + r1, rb), rows, C);
  }
  vx_map2(t, vx_v(CORE_VEC_COPY, NPU_DT_FP32), vx_full(m->x + rb, 2 * rb), vx_full(m->y + rb, 2 * rb),
          vx_full(m->y + rb, 2 * rb), C / 2, C);
  int k;
  uint64_t o16 = stage_take(t, p, r, &k);
  vx_cast(t, o16, p->dt, m->x, NPU_DT_FP32, (uint64_t)C * C);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
  vx_store(t, at_item(p->tm, n, C, C, p->es), o16, p->dt, 1, C * C, C * C, C * C);
  stage_stored(t, k);
  vec_tell(t);
}

/*
 * A block of the WY or output launch: its R chunk items, each through a cube step (its first
 * GEMM, the result told to the item's vector role), the role's vector step, then a second cube
 * step; emitted in that order, the order the data flows, so that on a coupled core (one MTE2 for
 * every role) no load waits behind one that depends on it.
 */
typedef void (*item_step)(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n);

static void three_steps(struct core_tp *t, const struct gdn *p, uint64_t blk, item_step cube1, item_step vec,
                        item_step cube2)
{
  uint32_t ni = block_items(p, blk, p->N);
  uint64_t n0 = blk * p->R;
  core_select(t, CORE_SUB_AIC);
  for (uint32_t r = 0; r < ni; r++) {
    cube1(t, p, r, n0 + r);
    cube_tell(t, r);
  }
  for (uint32_t r = 0; r < ni; r++) {
    sel_aiv(t, r);
    vec(t, p, r, n0 + r);
  }
  core_select(t, CORE_SUB_AIC);
  for (uint32_t r = 0; r < ni; r++) cube2(t, p, r, n0 + r);
}

/* K K^T (fp32) -> GM. */
static void wy_kkt(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  uint32_t b, h, c, C = p->C, DK = p->DK;
  (void)r;
  item_of(p, n, &b, &h, &c);
  uint64_t ka = bshd(p, p->k, b, c * C, h / p->group, p->KH, DK);
  struct mm_term kk = {.a = ka, .b = ka, .a_ld = p->KH * DK, .b_ld = p->KH * DK, .k = DK, .tb = true};
  mm(t, p, &kk, 1, C, C, at_item(p->skk, n, C, C, 4), C, NPU_DT_FP32);
}

/* w = T (k beta exp(gc)), u = T (v beta), once role r has written T and the scaled k and v. */
static void wy_wu(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  uint32_t C = p->C, DK = p->DK, DV = p->DV;
  uint64_t ta = at_item(p->tm, n, C, C, p->es);
  struct mm_term tw = {.a = ta, .b = at_item(p->kb, n, C, DK, p->es), .a_ld = C, .b_ld = DK, .k = C, .wait_a = r + 1};
  mm(t, p, &tw, 1, C, DK, at_item(p->w, n, C, DK, p->es), DK, p->dt);
  struct mm_term tu = {.a = ta, .b = at_item(p->vb, n, C, DV, p->es), .a_ld = C, .b_ld = DV, .k = C};
  mm(t, p, &tu, 1, C, DV, at_item(p->u, n, C, DV, p->es), DV, p->dt);
}

static void wy_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  three_steps(t, ctx, blk, wy_kkt, wy_vec, wy_wu);
}

static int wy_class(void *ctx, uint64_t blk)
{
  const struct gdn *p = ctx;
  return block_items(p, blk, p->N) < p->R ? 1 : 0;
}

/* ------------------------------------------------------------------ 3: the state pass (MIX) */

/* State item s = (batch, head, column block vb). */
static void st_of(const struct gdn *p, uint64_t s, uint32_t *b, uint32_t *h, uint32_t *vb)
{
  *vb = (uint32_t)(s % p->NV);
  *h = (uint32_t)(s / p->NV % p->H);
  *b = (uint32_t)(s / p->NV / p->H);
}

/* Flag ids of chain k of a vector role: MTE3 -> MTE2 its v_new stored (u's buffer free), MTE3 -> V
 * its state stored (the cast buffer and, after a sequence's last chunk, the state free). */
#define E_VN(k) (8 + (int)(k))
#define E_H(k) (12 + (int)(k))

static void st_begin(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mm_begin(t, p);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_MTE2, E_VN(0), p->P, true);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_V, E_H(0), p->P, true);
}

static void st_end(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mm_end(t, p);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_MTE2, E_VN(0), p->P, false);
  role_flags(t, p, CORE_PIPE_MTE3, CORE_PIPE_V, E_H(0), p->P, false);
}

/* Chain k's UB map. */
static struct ub_st st_map(const struct gdn *p, uint32_t k)
{
  struct ub_st m = p->us;
  uint32_t by = k * p->us.end;
  m.hst += by, m.buf += by, m.u32 += by, m.ud += by, m.g += by;
  return m;
}

/* Vector role, chain k, first half of chunk c: v_new = u - w h (w h from the cube unless c = 0). */
static void st_vec_vn(struct core_tp *t, const struct gdn *p, uint64_t s, uint32_t k, uint32_t c)
{
  struct ub_st m = st_map(p, k);
  uint32_t b, h, vb, C = p->C, W = p->DVb, DV = p->DV;
  st_of(p, s, &b, &h, &vb);
  uint64_t n = item(p, b, h, c), col = (uint64_t)vb * W;
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, E_VN(k));
  vx_load(t, m.ud, at_item(p->u, n, C, DV, p->es) + col * p->es, p->dt, C, W, DV, W);
  vx_load(t, m.g, hm(p, p->gc, b, h, c), NPU_DT_FP32, 1, C, C, C);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, E_H(k)); /* the previous state's store is done */
  if (c == 0) vx_dup(t, NPU_DT_FP32, m.hst, 0.0, (uint64_t)p->DK * W);
  vx_cast(t, m.u32, NPU_DT_FP32, m.ud, p->dt, (uint64_t)C * W);
  if (c > 0) {
    vec_await(t);
    vx_load(t, m.buf, at_item(p->wh, n, C, DV, 4) + col * 4, NPU_DT_FP32, C, W, DV, W);
    order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
    vx_bin(t, CORE_VEC_SUB, m.u32, m.u32, m.buf, (uint64_t)C * W);
  }
  vx_cast(t, m.ud, p->dt, m.u32, NPU_DT_FP32, (uint64_t)C * W);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
  vx_store(t, at_item(p->vn, n, C, DV, p->es) + col * p->es, m.ud, p->dt, C, W, DV, W);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, E_VN(k));
  vec_tell(t);
}

/* Vector role, chain k, second half: h = h exp(gc_last) + (k exp(gc_last - gc))^T v_new. */
static void st_vec_h(struct core_tp *t, const struct gdn *p, uint64_t s, uint32_t k, uint32_t c)
{
  struct ub_st m = st_map(p, k);
  uint32_t b, h, vb, C = p->C, W = p->DVb, DV = p->DV, DK = p->DK;
  st_of(p, s, &b, &h, &vb);
  uint64_t n = item(p, b, h, c), col = (uint64_t)vb * W;
  vx_un(t, CORE_VEC_EXP, m.g, m.g, C);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2);
  vec_await(t);
  vx_load(t, m.buf, at_item(p->dh, n, DK, DV, 4) + col * 4, NPU_DT_FP32, DK, W, DV, W);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  vx_sc_ub(t, CORE_VEC_MULS, m.hst, m.hst, m.g + (uint64_t)(C - 1) * 4, (uint64_t)DK * W);
  vx_bin(t, CORE_VEC_ADD, m.hst, m.hst, m.buf, (uint64_t)DK * W);
  if (c + 1 < p->NC) { /* the state after chunk c is the one chunk c + 1 starts from */
    vx_cast(t, m.u32, p->dt, m.hst, NPU_DT_FP32, (uint64_t)DK * W);
    order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
    vx_store(t, at_item(p->hs, n + 1, DK, DV, p->es) + col * p->es, m.u32, p->dt, DK, W, DV, W);
    vec_tell(t);
  } else {
    order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
    vx_store(t, p->ht + (((uint64_t)b * p->H + h) * DK * DV + col) * 4, m.hst, NPU_DT_FP32, DK, W, DV, W);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, E_H(k));
}

/* A state block: R roles x P chains (R P consecutive state items, fewer in the last block), role r
 * running items r P .. r P + P - 1, all of them chunk by chunk in step. */
static void st_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct gdn *p = ctx;
  uint64_t total = (uint64_t)p->B * p->H * p->NV, per = (uint64_t)p->R * p->P, s0 = blk * per;
  uint32_t ni = (uint32_t)(total - s0 < per ? total - s0 : per), C = p->C, DK = p->DK, DV = p->DV, W = p->DVb;
  for (uint32_t c = 0; c < p->NC; c++) {
    core_select(t, CORE_SUB_AIC);
    for (uint32_t i = 0; i < ni && c > 0; i++) { /* w h */
      uint32_t b, h, vb;
      st_of(p, s0 + i, &b, &h, &vb);
      uint64_t n = item(p, b, h, c), col = (uint64_t)vb * W;
      struct mm_term th = {.a = at_item(p->w, n, C, DK, p->es), .b = at_item(p->hs, n, DK, DV, p->es) + col * p->es,
                           .a_ld = DK, .b_ld = DV, .k = DK, .wait_b = i / p->P + 1};
      mm(t, p, &th, 1, C, W, at_item(p->wh, n, C, DV, 4) + col * 4, DV, NPU_DT_FP32);
      cube_tell(t, i / p->P);
    }
    for (uint32_t i = 0; i < ni; i++) {
      sel_aiv(t, i / p->P);
      st_vec_vn(t, p, s0 + i, i % p->P, c);
    }
    core_select(t, CORE_SUB_AIC);
    for (uint32_t i = 0; i < ni; i++) { /* (k exp(gc_last - gc))^T v_new */
      uint32_t b, h, vb;
      st_of(p, s0 + i, &b, &h, &vb);
      uint64_t n = item(p, b, h, c), col = (uint64_t)vb * W;
      struct mm_term td = {.a = at_item(p->kd, n, C, DK, p->es), .b = at_item(p->vn, n, C, DV, p->es) + col * p->es,
                           .a_ld = DK, .b_ld = DV, .k = C, .ta = true, .wait_b = i / p->P + 1};
      mm(t, p, &td, 1, DK, W, at_item(p->dh, n, DK, DV, 4) + col * 4, DV, NPU_DT_FP32);
      cube_tell(t, i / p->P);
    }
    for (uint32_t i = 0; i < ni; i++) {
      sel_aiv(t, i / p->P);
      st_vec_h(t, p, s0 + i, i % p->P, c);
    }
  }
}

static int st_class(void *ctx, uint64_t blk)
{
  const struct gdn *p = ctx;
  uint64_t total = (uint64_t)p->B * p->H * p->NV, per = (uint64_t)p->R * p->P;
  return total - blk * per < per ? 1 : 0;
}

/* ------------------------------------------------------------------ 4: the output (MIX) */

static void out_begin(struct core_tp *t, void *ctx)
{
  struct gdn *p = ctx;
  mix_begin(t, p, p->masks + p->C * p->C / 8, p->uo.mk, p->uo.neg);
}

static void out_vec(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  const struct ub_out *m = &p->uo;
  uint32_t b, h, c, C = p->C;
  (void)r;
  item_of(p, n, &b, &h, &c);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE2);
  vx_load(t, m->g, hm(p, p->gc, b, h, c), NPU_DT_FP32, 1, C, C, C);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  decay(t, p, m->e, m->g, m->bc, m->mk, m->neg, true);
  vec_await(t);
  vx_load(t, m->qk, at_item(p->qk, n, C, C, 4), NPU_DT_FP32, 1, C * C, C * C, C * C);
  order(t, CORE_PIPE_MTE2, CORE_PIPE_V);
  vx_bin(t, CORE_VEC_MUL, m->qk, m->qk, m->e, (uint64_t)C * C);
  vx_sc(t, CORE_VEC_MULS, m->qk, m->qk, p->scale, (uint64_t)C * C);
  order(t, CORE_PIPE_MTE3, CORE_PIPE_V);
  vx_cast(t, m->pd, p->dt, m->qk, NPU_DT_FP32, (uint64_t)C * C);
  order(t, CORE_PIPE_V, CORE_PIPE_MTE3);
  vx_store(t, at_item(p->pm, n, C, C, p->es), m->pd, p->dt, 1, C * C, C * C, C * C);
  vec_tell(t);
}

/* q k^T (fp32) -> GM. */
static void out_qk(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  uint32_t b, h, c, C = p->C, DK = p->DK;
  (void)r;
  item_of(p, n, &b, &h, &c);
  uint32_t kh = h / p->group;
  struct mm_term qk = {.a = bshd(p, p->q, b, c * C, kh, p->KH, DK), .b = bshd(p, p->k, b, c * C, kh, p->KH, DK),
                       .a_ld = p->KH * DK, .b_ld = p->KH * DK, .k = DK, .tb = true};
  mm(t, p, &qk, 1, C, C, at_item(p->qk, n, C, C, 4), C, NPU_DT_FP32);
}

/* o = (q exp(gc) scale) h + P v_new, once role r has written P (no q h at a sequence's first chunk). */
static void out_o(struct core_tp *t, const struct gdn *p, uint32_t r, uint64_t n)
{
  uint32_t b, h, c, C = p->C, DK = p->DK, DV = p->DV;
  item_of(p, n, &b, &h, &c);
  struct mm_term tt[2];
  int nt = 0;
  if (c > 0)
    tt[nt++] = (struct mm_term){.a = at_item(p->qg, n, C, DK, p->es), .b = at_item(p->hs, n, DK, DV, p->es),
                                .a_ld = DK, .b_ld = DV, .k = DK};
  tt[nt++] = (struct mm_term){.a = at_item(p->pm, n, C, C, p->es), .b = at_item(p->vn, n, C, DV, p->es),
                              .a_ld = C, .b_ld = DV, .k = C, .wait_a = r + 1};
  mm(t, p, tt, nt, C, DV, bshd(p, p->o, b, c * C, h, p->H, DV), p->H * DV, p->dt);
}

static void out_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  three_steps(t, ctx, blk, out_qk, out_vec, out_o);
}

/* Blocks whose items include a sequence's first chunk skip its q h term. */
static int out_class(void *ctx, uint64_t blk)
{
  const struct gdn *p = ctx;
  uint32_t ni = block_items(p, blk, p->N), cls = ni < p->R ? 4 : 0;
  for (uint32_t r = 0; r < ni; r++)
    if ((blk * p->R + r) % p->NC == 0) cls |= 1u << r;
  return (int)cls;
}

/* ------------------------------------------------------------------ plan */

static uint32_t take(uint32_t *at, uint64_t bytes)
{
  uint32_t r = *at;
  *at += (uint32_t)ops_roundup(bytes + 256, 512); /* + 256: a strided operand's last block */
  return r;
}

static void lay_ub(struct gdn *p, uint32_t nstage)
{
  uint32_t C = p->C, DK = p->DK, DV = p->DV, W = p->DVb, at, mx = DK > DV ? DK : DV, es = p->es;
  struct ub_wy *w = &p->uw;
  at = 0;
  w->g = take(&at, C * 4);
  w->b = take(&at, C * 4);
  w->eg = take(&at, C * 4);
  w->egl = take(&at, C * 4);
  w->tv = take(&at, C * 4);
  w->bc = take(&at, C * 32);
  w->ku = take(&at, (uint64_t)C * DK * es);
  w->vu = take(&at, (uint64_t)C * DV * es);
  w->f1 = take(&at, (uint64_t)C * mx * 4);
  w->f2 = take(&at, (uint64_t)C * mx * 4);
  w->nstage = nstage;
  for (uint32_t k = 0; k < nstage; k++) w->o16[k] = take(&at, (uint64_t)C * (mx > C ? mx : C) * es); /* also T */
  w->s = take(&at, (uint64_t)C * C * 4);
  w->x = take(&at, (uint64_t)C * C * 4);
  /* the decay matrix and the solve's products reuse f1 and f2, whose last use came before */
  w->e = mx >= C ? w->f1 : take(&at, (uint64_t)C * C * 4);
  w->y = w->e;
  w->tm = (mx >= C ? w->f2 : take(&at, (uint64_t)C * C * 4)) + 256; /* the other half of the bank groups */
  w->mk = take(&at, C * C / 8);
  w->neg = take(&at, 32);
  w->end = at;
  struct ub_st *s = &p->us;
  at = 0;
  uint64_t big = (uint64_t)DK * W * 4 > (uint64_t)C * W * 4 ? (uint64_t)DK * W * 4 : (uint64_t)C * W * 4;
  s->hst = take(&at, (uint64_t)DK * W * 4);
  s->buf = take(&at, big);
  s->u32 = take(&at, (uint64_t)C * W * 4 > (uint64_t)DK * W * es ? (uint64_t)C * W * 4 : (uint64_t)DK * W * es);
  s->ud = take(&at, (uint64_t)C * W * es);
  s->g = take(&at, C * 4);
  s->end = at;
  struct ub_out *o = &p->uo;
  at = 0;
  o->g = take(&at, C * 4);
  o->bc = take(&at, C * 32);
  o->e = take(&at, (uint64_t)C * C * 4);
  o->qk = take(&at, (uint64_t)C * C * 4);
  o->pd = take(&at, (uint64_t)C * C * es);
  o->mk = take(&at, C * C / 8);
  o->neg = take(&at, 32);
  o->end = at;
  struct ub_cs *cs = &p->uc;
  at = 0;
  uint64_t tile = (uint64_t)C * ops_roundup(p->H, 8) * 4;
  cs->x = take(&at, tile);
  cs->y = take(&at, tile);
  cs->bx = take(&at, tile);
  cs->og = take(&at, (uint64_t)p->H * C * 4);
  cs->ob = take(&at, (uint64_t)p->H * C * 4);
  cs->end = at;
}

static int bad(struct npu_diag *diag, const char *opt, const char *msg, uint32_t got)
{
  return npu_diag_set(diag, "command line", 0, opt, "%s, got %u", msg, got), NPU_EINVAL;
}

static int nofit(struct npu_diag *diag, const struct arch_chip *chip, const char *opt, const char *what, uint64_t need,
                 uint64_t have)
{
  return npu_diag_set(diag, "command line", 0, opt, "the gated delta tiling needs %llu bytes of %s, %s has %llu",
                      (unsigned long long)need, what, chip->name, (unsigned long long)have),
         NPU_ENOFIT;
}

static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct gdn *p = pp;
  memset(p, 0, sizeof *p);
  uint64_t B = op_u(d, a, "batch"), S = op_u(d, a, "seq"), H = op_u(d, a, "heads"), KH = op_u(d, a, "k_heads");
  uint64_t DK = op_u(d, a, "dk"), DV = op_u(d, a, "dv"), C = op_u(d, a, "chunk"), split = op_u(d, a, "state_split");
  uint64_t chains = op_u(d, a, "state_chains");
  p->dt = op_dtype(d, a, "dtype");
  p->bwd = op_u(d, a, "pass") == 1;
  if (p->dt != NPU_DT_BF16 && p->dt != NPU_DT_FP16)
    return npu_diag_set(diag, "command line", 0, "--dtype", "the gated delta rule takes bf16 or fp16, got %s",
                        npu_dtype_name(p->dt)), NPU_EINVAL;
  if (B > 65536 || S > (1u << 24) || H > 4096)
    return npu_diag_set(diag, "command line", 0, B > 65536 ? "--batch" : S > (1u << 24) ? "--seq" : "--heads",
                        "too large (batch <= 65536, seq <= 16777216, heads <= 4096)"), NPU_EINVAL;
  if (!KH) KH = H;
  if (KH > H || H % KH) return bad(diag, "--k_heads", "heads must be a multiple of k_heads", (uint32_t)KH);
  if (C % 16 || C > 128) return bad(diag, "--chunk", "a multiple of 16 up to 128", (uint32_t)C);
  if (S % C) return bad(diag, "--seq", "must be a multiple of the chunk", (uint32_t)S);
  if (DK % 16 || DK > 256) return bad(diag, "--dk", "a multiple of 16 up to 256", (uint32_t)DK);
  if (DV % 16 || DV > 256) return bad(diag, "--dv", "a multiple of 16 up to 256", (uint32_t)DV);
  p->B = (uint32_t)B, p->S = (uint32_t)S, p->H = (uint32_t)H, p->KH = (uint32_t)KH, p->group = (uint32_t)(H / KH);
  p->DK = (uint32_t)DK, p->DV = (uint32_t)DV, p->C = (uint32_t)C, p->NC = (uint32_t)(S / C);
  p->es = vx_es(p->dt);
  p->scale = 1.0 / sqrt((double)DK);
  p->coupled = chip->org != ARCH_ORG_SPLIT;
  if (!p->coupled && chip->aiv_count != 2 * chip->aic_count && chip->aiv_count != chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--arch", "written for one or two vector cores per cube core, or "
                        "coupled cores; %s has %d:%d", chip->name, chip->aic_count, chip->aiv_count), NPU_EUNSUPPORTED;
  if (chip->cube.macs_per_cycle[p->dt] == 0)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s has no %s cube input", chip->name,
                        npu_dtype_name(p->dt)), NPU_EUNSUPPORTED;
  p->R = p->coupled ? 1 : (uint32_t)(chip->aiv_count / chip->aic_count);
  p->N = (uint64_t)B * H * p->NC;
  /* the state pass: dv in NV column blocks (multiples of 16 columns) */
  if (split) {
    if (DV % split || (DV / split) % 16)
      return bad(diag, "--state_split", "must split dv into blocks of a multiple of 16 columns", (uint32_t)split);
    p->NV = (uint32_t)split;
  } else {
    p->NV = 1; /* the widest blocks that still give every AI core a chain, in one round */
    while (DV % (p->NV * 2) == 0 && (DV / (p->NV * 2)) % 16 == 0 &&
           ops_ceil(B * H * p->NV * 2, p->R) <= (uint64_t)chip->aic_count)
      p->NV *= 2;
  }
  p->DVb = p->DV / p->NV;
  /* cube buffers: the largest GEMM is o = qg h + P v_new */
  uint64_t es = p->es, l1 = chip->buf[ARCH_BUF_L1].size_bytes, l0a = chip->buf[ARCH_BUF_L0A].size_bytes;
  uint64_t l0b = chip->buf[ARCH_BUF_L0B].size_bytes, l0c = chip->buf[ARCH_BUF_L0C].size_bytes;
  p->l1_slot = l1_tile_bytes(p, p->C, p->DK) * 2 + l1_tile_bytes(p, p->C, p->C) + l1_tile_bytes(p, p->DK, p->DV) +
               l1_tile_bytes(p, p->C, p->DV);
  uint64_t na = ops_roundup(C * DK * es, 512) + ops_roundup(C * C * es, 512);
  uint64_t nbb = ops_roundup(DK * DV * es, 512) + ops_roundup(C * DV * es, 512);
  if (ops_roundup(C * DK * es, 512) > nbb) nbb = ops_roundup(C * DK * es, 512); /* K^T of K K^T, k beta of w */
  uint64_t mc = C > DK ? C : DK, nc = DV > C ? DV : C;
  if (DK > nc) nc = DK;
  uint64_t ncc = ops_roundup(mc, 16) * nc * 4;
  if (p->l1_slot > l1) return nofit(diag, chip, "--dk", "L1", p->l1_slot, l1);
  if (na > l0a) return nofit(diag, chip, "--dk", "L0A", na, l0a);
  if (nbb > l0b) return nofit(diag, chip, "--dv", "L0B", nbb, l0b);
  if (ncc > l0c) return nofit(diag, chip, "--dv", "L0C", ncc, l0c);
  p->nl1 = 2 * p->l1_slot <= l1 ? 2 : 1;
  p->nl0 = 2 * na <= l0a && 2 * nbb <= l0b ? 2 : 1;
  p->nl0c = 2 * ncc <= l0c ? 2 : 1;
  p->l0a_slot = l0a / p->nl0 / 512 * 512;
  p->l0b_slot = l0b / p->nl0 / 512 * 512;
  p->l0c_slot = l0c / p->nl0c / 512 * 512;
  uint64_t ub = vx_ub_bytes(chip);
  for (uint32_t ns = 3; ns >= 1; ns--) { /* as many staging buffers for the WY stores as fit */
    lay_ub(p, ns);
    if (p->uw.end <= ub) break;
  }
  if (p->uw.end > ub) return nofit(diag, chip, "--chunk", "UB (the WY launch)", p->uw.end, ub);
  if (p->uo.end > ub) return nofit(diag, chip, "--chunk", "UB (the output launch)", p->uo.end, ub);
  if (p->uc.end > ub) return nofit(diag, chip, "--heads", "UB (the cumsum launch)", p->uc.end, ub);
  if (chains > 4) return bad(diag, "--state_chains", "1 to 4 (0: automatic)", (uint32_t)chains);
  p->P = chains ? (uint32_t)chains : 1;
  if ((uint64_t)p->P * p->us.end > ub)
    return nofit(diag, chip, chains ? "--state_chains" : "--state_split", "UB (the state pass)", (uint64_t)p->P * p->us.end, ub);
  p->nb_wy = ops_ceil(p->N, p->R);
  p->nb_st = ops_ceil((uint64_t)B * H * p->NV, (uint64_t)p->R * p->P);
  p->nb_cs = (uint64_t)B * p->NC;
  p->dim_wy = p->nb_wy < (uint64_t)chip->aic_count ? (int)p->nb_wy : chip->aic_count;
  p->dim_st = p->nb_st < (uint64_t)chip->aic_count ? (int)p->nb_st : chip->aic_count;
  p->dim_cs = vx_dim(chip, p->nb_cs);
  return 0;
}

/* ------------------------------------------------------------------ setup */

/* Functional inputs as the model sees them, from each tensor's own seeded stream (so that a
 * sequence's inputs do not depend on the batch): q and k rows L2-normalised per head, g a log
 * decay in [-0.25, -0.001) (Qwen3-Next's -exp(A_log) softplus(a + dt_bias) is of this order), beta
 * in (0, 1) (a sigmoid). */
static void inputs(struct gdn *p, struct op_tensor *q, struct op_tensor *k, struct op_tensor *g)
{
  uint64_t rows = (uint64_t)p->B * p->S * p->KH;
  for (int w = 0; w < 2; w++) {
    struct op_tensor *t = w ? k : q;
    for (uint64_t i = 0; i < rows; i++) {
      double ss = 0;
      for (uint32_t e = 0; e < p->DK; e++) ss += pow(fmt_decode(p->dt, t->host, i * p->DK + e), 2);
      double inv = ss > 0 ? 1 / sqrt(ss) : 0;
      for (uint32_t e = 0; e < p->DK; e++)
        fmt_encode(p->dt, t->host, i * p->DK + e, fmt_decode(p->dt, t->host, i * p->DK + e) * inv);
    }
  }
  for (uint64_t i = 0; i < g->count; i++) /* uniform in [-1, 1) -> [-0.25, -0.001) */
    fmt_encode(NPU_DT_FP32, g->host, i, -0.001 - 0.249 * (fmt_decode(NPU_DT_FP32, g->host, i) + 1) / 2);
}

static void setup(void *pp, struct op_exec *x)
{
  struct gdn *p = pp;
  uint32_t C = p->C, DK = p->DK, DV = p->DV;
  uint64_t qn = (uint64_t)p->B * p->S * p->KH * DK, vn = (uint64_t)p->B * p->S * p->H * DV;
  uint64_t gn = (uint64_t)p->B * p->S * p->H, N = p->N;
  struct op_tensor *q = op_tensor(x, "q", p->dt, qn, OP_INIT_UNIFORM), *k = op_tensor(x, "k", p->dt, qn, OP_INIT_UNIFORM);
  struct op_tensor *g = op_tensor(x, "g", NPU_DT_FP32, gn, OP_INIT_UNIFORM);
  p->q = q->addr, p->k = k->addr, p->g = g->addr;
  p->v = op_tensor(x, "v", p->dt, vn, OP_INIT_UNIFORM)->addr;
  p->beta = op_tensor(x, "beta", NPU_DT_FP32, gn, OP_INIT_POSITIVE)->addr;
  if (op_functional(x)) inputs(p, q, k, g);
  p->o = op_tensor(x, "o", p->dt, vn, OP_INIT_NONE)->addr;
  p->ht = op_tensor(x, "ht", NPU_DT_FP32, (uint64_t)p->B * p->H * DK * DV, OP_INIT_NONE)->addr;
  /* constants: the strictly-upper mask of A^T, the causal mask of P (bit i C + j: j <= i), I */
  uint32_t mb = C * C / 8;
  uint8_t *mk = npu_xcalloc(2 * mb + (size_t)C * C * 4, 1);
  float *eye = (float *)(void *)(mk + 2 * mb);
  for (uint32_t i = 0; i < C; i++) {
    eye[(size_t)i * C + i] = 1.0f;
    for (uint32_t j = 0; j < C; j++) {
      uint32_t bit = i * C + j;
      if (j > i) mk[bit / 8] |= (uint8_t)(1u << (bit % 8));
      if (j <= i) mk[mb + bit / 8] |= (uint8_t)(1u << (bit % 8));
    }
  }
  p->masks = op_tensor_bytes(x, "constants", 2 * mb + (uint64_t)C * C * 4, mk)->addr;
  p->eye = p->masks + 2 * mb;
  free(mk);
  /* intermediates between the launches, full size as fla keeps them */
  struct {
    uint64_t *at;
    const char *name;
    enum npu_dtype dt;
    uint64_t count;
  } ws[] = {
      {&p->gc, "g_beta", NPU_DT_FP32, 2 * gn}, /* gc, then beta, head-major */
      {&p->skk, "kkt", NPU_DT_FP32, N * C * C}, /* K K^T, later q k^T */
      {&p->tm, "a_inv", p->dt, N * C * C},      /* T, later P */
      {&p->kb, "k_beta", p->dt, N * C * DK},
      {&p->vb, "v_beta", p->dt, N * C * DV},
      {&p->kd, "k_decay", p->dt, N * C * DK},
      {&p->qg, "q_gate", p->dt, N * C * DK},
      {&p->w, "w", p->dt, N * C * DK},
      {&p->u, "u", p->dt, N * C * DV},
      {&p->wh, "wh", NPU_DT_FP32, N * C * DV},
      {&p->vn, "v_new", p->dt, N * C * DV},
      {&p->hs, "h", p->dt, N * DK * DV},
      {&p->dh, "kv", NPU_DT_FP32, N * DK * DV},
  };
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
    *ws[i].at = op_tensor(x, ws[i].name, ws[i].dt, ws[i].count, OP_INIT_SCRATCH)->addr;
  p->bt = p->gc + gn * 4;
  p->qk = p->skk; /* the launches run in order: the output's scratch reuses the WY launch's */
  p->pm = p->tm;
  struct core_kernel kc = {.name = "gated_delta_cumsum", .mode = CORE_MODE_VECTOR, .block_dim = p->dim_cs,
                           .nblocks = p->nb_cs, .ctx = p, .block = cs_block};
  struct core_kernel kw = {.name = "gated_delta_wy", .mode = CORE_MODE_MIX, .block_dim = p->dim_wy, .nblocks = p->nb_wy,
                           .ctx = p, .unit_begin = wy_begin, .unit_end = wy_end, .block = wy_block,
                           .block_class = wy_class, .unit_ctx_bytes = sizeof(struct gdn_unit)};
  struct core_kernel ks = {.name = "gated_delta_state", .mode = CORE_MODE_MIX, .block_dim = p->dim_st,
                           .nblocks = p->nb_st, .ctx = p, .unit_begin = st_begin, .unit_end = st_end,
                           .block = st_block, .block_class = st_class, .unit_ctx_bytes = sizeof(struct gdn_unit)};
  struct core_kernel ko = {.name = "gated_delta_out", .mode = CORE_MODE_MIX, .block_dim = p->dim_wy, .nblocks = p->nb_wy,
                           .ctx = p, .unit_begin = out_begin, .unit_end = mix_end, .block = out_block,
                           .block_class = out_class, .unit_ctx_bytes = sizeof(struct gdn_unit)};
  op_kernel(x, &kc);
  op_kernel(x, &kw);
  op_kernel(x, &ks);
  if (p->bwd) { /* the proxy of fla's backward (see op_gated_delta.bwd) */
    op_kernel(x, &ks);
    op_kernel(x, &ks);
    op_kernel(x, &ko);
  }
  op_kernel(x, &ko);
  if (p->bwd) op_kernel(x, &kw);
}

/* ------------------------------------------------------------------ FLOPs, reference, check */

/* Matmul FLOPs of the launches (see the header): WY (K K^T, w, u), the state pass (w h, k^T
 * v_new), the output (q k^T, q h, P v_new). */
static void launch_flops(const struct gdn *p, double *wy, double *st, double *out)
{
  double C = p->C, K = p->DK, V = p->DV, heads = (double)p->B * p->H, NC = p->NC;
  *wy = heads * NC * (2 * C * C * K * 2 + 2 * C * C * V);
  *st = heads * (NC * 2 * K * C * V + (NC - 1) * 2 * C * K * V);
  *out = heads * (NC * (2 * C * C * K + 2 * C * C * V) + (NC - 1) * 2 * C * K * V);
}

/* The forward's, or the proxy's with pass=bwd: WY twice, the state pass three times, the output
 * twice. */
static double flops(const void *pp)
{
  const struct gdn *p = pp;
  double wy, st, out;
  launch_flops(p, &wy, &st, &out);
  return p->bwd ? 2 * wy + 3 * st + 2 * out : wy + st + out;
}

/* The recurrence per (batch, value head) in double; O [B, S, H, DV], Ht [B, H, DK, DV]. */
static void reference(const struct gdn *p, const double *Q, const double *K, const double *V, const double *G,
                      const double *Bt, double *O, double *Ht)
{
  uint32_t DK = p->DK, DV = p->DV;
  double *S = npu_xmalloc((size_t)DK * DV * sizeof *S), *u = npu_xmalloc(DV * sizeof *u);
  for (uint32_t b = 0; b < p->B; b++)
    for (uint32_t h = 0; h < p->H; h++) {
      uint32_t kh = h / p->group;
      memset(S, 0, (size_t)DK * DV * sizeof *S);
      for (uint32_t t = 0; t < p->S; t++) {
        uint64_t gi = ((uint64_t)b * p->S + t) * p->H + h;
        const double *q = Q + (((uint64_t)b * p->S + t) * p->KH + kh) * DK;
        const double *k = K + (((uint64_t)b * p->S + t) * p->KH + kh) * DK;
        const double *v = V + gi * DV;
        double dec = exp(G[gi]);
        for (size_t e = 0; e < (size_t)DK * DV; e++) S[e] *= dec;
        for (uint32_t j = 0; j < DV; j++) {
          double sk = 0;
          for (uint32_t i = 0; i < DK; i++) sk += S[(size_t)i * DV + j] * k[i];
          u[j] = Bt[gi] * (v[j] - sk);
        }
        for (uint32_t i = 0; i < DK; i++)
          for (uint32_t j = 0; j < DV; j++) S[(size_t)i * DV + j] += k[i] * u[j];
        double *o = O + gi * DV;
        for (uint32_t j = 0; j < DV; j++) {
          double acc = 0;
          for (uint32_t i = 0; i < DK; i++) acc += S[(size_t)i * DV + j] * q[i];
          o[j] = p->scale * acc;
        }
      }
      memcpy(Ht + ((uint64_t)b * p->H + h) * DK * DV, S, (size_t)DK * DV * sizeof *S);
    }
  free(S);
  free(u);
}

static double max_abs(const double *x, uint64_t n)
{
  double m = 0;
  for (uint64_t i = 0; i < n; i++)
    if (fabs(x[i]) > m) m = fabs(x[i]);
  return m;
}

/*
 * Tolerance: the chunked form rounds T, w, u, v_new, the states and P to the input type before
 * the cube takes them (as fla does), and o once at the end; the errors add over a chunk's rows
 * and carry through the state from chunk to chunk. o and the final state within 4 unit
 * roundoffs of the input type x the tensor's largest element.
 */
static bool check(void *pp, struct op_exec *x, double *max_err, char *summary, size_t len)
{
  struct gdn *p = pp;
  double eps = p->dt == NPU_DT_BF16 ? 1.0 / 256 : 1.0 / 2048;
  uint64_t on = (uint64_t)p->B * p->S * p->H * p->DV, hn = (uint64_t)p->B * p->H * p->DK * p->DV;
  double *Q = op_decode(op_find_tensor(x, "q")), *K = op_decode(op_find_tensor(x, "k"));
  double *V = op_decode(op_find_tensor(x, "v")), *G = op_decode(op_find_tensor(x, "g"));
  double *Bt = op_decode(op_find_tensor(x, "beta")), *O = op_decode(op_find_tensor(x, "o"));
  double *Ht = op_decode(op_find_tensor(x, "ht"));
  double *RO = npu_xmalloc(on * sizeof *RO), *RH = npu_xmalloc(hn * sizeof *RH);
  reference(p, Q, K, V, G, Bt, RO, RH);
  double to = 4 * eps * max_abs(RO, on), th = 4 * eps * max_abs(RH, hn);
  double eo = op_compare(O, RO, on, to, 0), eh = op_compare(Ht, RH, hn, th, 0);
  *max_err = eo > eh ? eo : eh;
  snprintf(summary, len, "%so %.3g, final state %.3g of tolerance (4 unit roundoffs x the largest element: %.3g, %.3g)",
           p->bwd ? "backward proxy (forward outputs checked, no gradients): " : "", eo, eh, to, th);
  free(Q);
  free(K);
  free(V);
  free(G);
  free(Bt);
  free(O);
  free(Ht);
  free(RO);
  free(RH);
  return *max_err <= 1;
}

/* The backward: the same call with pass=bwd, which runs the proxy launches. */
static int bwd_proxy(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  op_call_choice(&out[0], "pass", "bwd");
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

const struct op_desc op_gated_delta = {
    .name = "gated_delta",
    .summary = "chunked gated delta rule (Gated DeltaNet, fla chunk_gated_delta_rule): WY form, triangular solve "
               "and the chunk state pass on the cube and vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct gdn),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_PROXY, "the same call with pass=bwd",
            "fla's chunk_gated_delta_rule_bwd is not written as a tile program here; pass=bwd runs forward launches "
            "of the same GEMM shapes in its order: cumsum + WY + the state pass for its recompute of w, u, h and "
            "v_new; the state pass twice more for chunk_gated_delta_rule_bwd_dhu (three dk x dv-sized GEMMs per "
            "chunk, reverse order); the output launch twice for chunk_bwd_dv_local and chunk_bwd_dqkwg (C x C and "
            "C x dk x dv GEMMs); the WY launch again for prepare_wy_repr_bwd. 2.4x the forward's matmul FLOPs at "
            "chunk 64, dk = dv = 128, against about 2.7x for fla's backward; no gradient is computed or checked",
            bwd_proxy},
};
