/*
 * attention.c - FlashAttention forward and backward on the AI cores, as on Ascend A2.
 *
 * Layouts: q, dq [batch, seq, heads, dim] (BSND); o, do [batch, seq, heads, dim_v]; k, dk
 * [batch, seq, kv_heads, dim]; v, dv [batch, seq, kv_heads, dim_v] (dim_v: MLA's value head
 * dimension, 128 against queries and keys of 192; else dim); lse [batch, heads, seq] fp32 (the row's log-sum-exp, saved by the forward for the
 * backward). GQA: query head h reads key/value head h / (heads / kv_heads). Causal: query i
 * sees keys j <= i. A2 cores exchange data only through GM (L2), so every hand-over between
 * the cube core and the vector cores goes through a per-core GM workspace.
 *
 * Forward (FlashAttention-2 with the A2 split of work): one block is a query block of 128 rows
 * of one head; key/value blocks of 128 rows stream past it.
 *   cube core (AIC)   S_j = Q K_j^T / sqrt(dim) -> workspace;  O_j = P_j V_j -> workspace
 *   vector cores      each of the two takes 64 rows: online softmax of S_j (row max, exp, row
 *   (AIV0, AIV1)      sum, rescale factor alpha_j) -> P_j (input type) to the workspace; then
 *                     O = O alpha + O_j
 * The cube core computes S `look` key blocks ahead of O, so that it works while the vector cores
 * do the softmax: S_0, S_1, S_2, O_0, S_3, O_1, ... (look + 1 workspace and K/V slots).
 * Cross-core flags: S ready (AIC -> AIVs), P ready (AIV -> AIC), O_j ready (AIC -> AIVs). At
 * the end each vector core divides O by the row sum and writes O and the LSE.
 *
 * Backward (FlashAttention-2, key/value-block outer loop): a vector kernel first computes
 * D_i = rowsum(dO_i o O_i) and dQ's fp32 accumulator is zeroed. One block is a key/value block
 * of kb rows of one key/value head; its steps are the query blocks (qb rows) of every query
 * head sharing it (i >= j when causal). The tile is qb x kb = 128 x 64, or FlashAttention-3's
 * 64 x 128 on coupled cores whose L0C holds it (the H100: half the Q, dO loads and dQ atomics
 * per MAC); each vector role takes qb / 2 rows:
 *   AIC: S = Q_i K_j^T / sqrt(dim), dP = dO_i V_j^T -> workspace
 *   AIV: P = exp(S - LSE_i), dS = P o (dP - D_i) / sqrt(dim) -> workspace (input type)
 *   AIC: dV_j += P^T dO_i and dK_j += dS^T Q_i (both held in L0C over the block's steps),
 *        dQ_i += dS K_j (FixPipe atomic fp32 add into GM)
 * The cube core runs one step ahead (S and dP of step s+1 before the gradients of step s). At
 * the block's end dK_j and dV_j leave L0C; a cast kernel turns dQ into the input type.
 *
 * On coupled cores (910A, GPU SMs) the same program runs with both roles on one core: the
 * forward takes query blocks of 128 rows (two 64-row vector roles, as FlashAttention-3's tiles on
 * Hopper) where L1 holds Q, two K/V slots and P and the unified buffer two roles (on the H100
 * preset, whose UB is the register file, with the half-row scratch in P's buffer), else of 64
 * rows (one role: the A100, whose 164 KiB L1 does not hold them); the backward keeps its two
 * vector roles. The instructions of the roles are emitted interleaved per key block, so a pipe
 * shared by the roles (MTE2) never waits on work queued behind it.
 * Where the UB reaches L0A (the Hopper presets: both are registers), the forward's roles write P
 * straight into L0A as the PV GEMM's A operand (FlashAttention-3's wgmma with A in registers),
 * and L1 holds no P: on the H100 three K/V slots instead of two, S two key blocks ahead.
 * Buffers are double buffered where the chip's L1 and UB hold two copies (the tiling decides).
 *
 * FP8 (--dtype fp8_e4m3, the forward on chips whose cube takes fp8: FlashAttention-3's fp8
 * kernel): Q, K, V and P in e4m3 (the per-tensor descaling of Q and K folded into S's FixPipe
 * scale, unit scales here), S, the softmax and O's accumulator in fp32, O written in bf16.
 *
 * Sliding window (--window W, causal, a multiple of 128): query i sees keys i - W + 1 .. i. The
 * forward visits a query block's key blocks from the diagonal down to the window's lowest one
 * (so that the online softmax's first block has a key for every row), masking that lowest
 * block with the complement of the diagonal's mask; the backward's key block steps over the
 * query blocks up to the one holding its last viewer, masking past the window's edge with the
 * complements of its diagonal variants (a role wholly past it with variant 0).
 *
 * ALiBi (--alibi, Press et al. 2022; BLOOM, MPT): every score gets its head's linear bias,
 * S_ij = q_i.k_j / sqrt(dim) + m_h (j - i), with BLOOM's slopes (build_alibi_tensor: for H a
 * power of two m_h = 2^(-8 (h + 1) / H); else those of the power of two below H, then every
 * other slope of twice that power). The vector roles keep a ramp 0 .. 127 (fp32) in the UB and
 * per score tile add one row vector over the whole tile: m_h (c + o) for its columns c, the
 * block offset o a scalar (ADDS, MULS on one 128-lane vector, then one ADD of the tile with that
 * vector broadcast down the rows). The part of the bias that varies only with the row, -m_h r
 * for the role's row r, cancels in the softmax: the forward leaves it out of the running max
 * and subtracts it from the LSE it saves (the scores stay small near the diagonal); the
 * backward folds it, and the block offset, into the LSE row vector before P = exp(S - LSE).
 * One tile-wide vector add per score tile, forward and backward, no extra GM traffic.
 *
 * Attention sinks (--sinks, gpt-oss's sdpa): a learned logit per query head, sinks [heads]
 * fp32, joins each row's softmax as an extra column that carries no value. The forward starts
 * the online softmax with it, running max m = sink_h (in the shifted scale of ALiBi: plus m_h
 * r) and sum 1, so its final max, sum and the LSE it saves include exp(sink_h - m) and O is
 * normalised by that sum; the [H] sinks are loaded into the UB once per core, and a block's
 * row vector is a Brcb of its head's group of eight and one copy. The backward recomputes P
 * from that LSE, dS as before; the preprocessing kernel that computes D_i = rowsum(dO_i o O_i)
 * also reduces its rows' -exp(sink_h - LSE_i) D_i and adds the sum into dsink [heads] fp32
 * (zeroed by a fill kernel first, then atomic adds from the vector cores, as dQ's fp32
 * accumulator takes the cube's). Both options compose with GQA, masks, windows, head dims up to
 * 256 and the fp8 forward.
 *
 * FLOPs (FlashAttention-2 paper): forward 2 x seq^2 x (dim + dim_v) x heads x batch (halved
 * when causal; seq x W - W^2 / 2 query-key pairs in a window), backward 2.5 x forward: the
 * matmul FLOPs, unchanged by ALiBi and sinks (their vector work is not counted). The host
 * reference computes softmax(Q K^T / sqrt(dim) + bias, sinks) V and its gradients in double.
 *
 * Size: one operator over ~2,250 lines: the forward and backward share the tiling, the split-core
 * hand-over through GM, the coupled-core variant of the same dataflow and the head-dimension chunks.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "ops/ops_int.h"
#include "ops/vecutil.h"

#define BC 128u    /* forward: key rows per block (64 where L1 holds no more); sequence and window unit */
#define HALF 64u   /* forward: rows per vector role; the backward's D kernel: rows per block */
#define DC 128u    /* head-dimension chunk: the widest slice of Q, K, V or O one GEMM step takes */

static const char *const passes[] = {"fwd", "bwd", NULL};

static const struct op_param params[] = {
    {"batch", OP_P_DIM, "1", "batch size", NULL},
    {"heads", OP_P_DIM, NULL, "query heads", NULL},
    {"kv_heads", OP_P_INT, "0", "key/value heads (GQA; 0: as heads)", NULL},
    {"seq", OP_P_DIM, NULL, "sequence length (a multiple of 128)", NULL},
    {"dim", OP_P_DIM, "128", "head dimension: a multiple of 64, at most 256", NULL},
    {"dim_v", OP_P_INT, "0", "value (and output) head dimension, a multiple of 64 up to 256 (MLA's attention: dim 192, "
     "dim_v 128); 0: as dim", NULL},
    {"causal", OP_P_BOOL, "true", "causal mask (else full)", NULL},
    {"window", OP_P_INT, "0", "sliding window (with --causal): each query attends to itself and the window - 1 "
     "keys before it, a multiple of 128 (Mistral, Gemma, gpt-oss local layers); 0: the whole causal prefix", NULL},
    {"dtype", OP_P_DTYPE, "bf16", "q, k, v, o type: bf16 or fp16; fp8_e4m3 (forward, fp8 cubes: q, k, v and P in "
     "fp8, o in bf16)", NULL},
    {"pass", OP_P_CHOICE, "fwd", "fwd or bwd", passes},
    {"alibi", OP_P_BOOL, "false", "ALiBi (BLOOM, MPT): each score gets its head's linear bias m_h (j - i), BLOOM's "
     "slopes", NULL},
    {"sinks", OP_P_BOOL, "false", "attention sinks (gpt-oss): a learned logit per query head joins each row's softmax "
     "denominator (fp32 [heads]; its gradient in the backward)", NULL},
};

/* Unified-buffer map of one vector role (byte offsets). */
struct ub_map {
  uint32_t buf[2];   /* fwd: S (fp32 64 x 128); bwd: S, dP (fp32 64 x 64), LSE, D */
  uint32_t pb;       /* fwd: P, then O, in the input type; bwd: P in the input type */
  uint32_t ds;       /* bwd: dS in the input type */
  uint32_t o, oj;    /* fwd: the output accumulator, O_j from the cube core (fp32 64 x dim) */
  uint32_t t;        /* fwd: half-row maxima and sums (fp32 64 x 64) */
  uint32_t vec;      /* fwd: per-row vectors, 256 B each */
  uint32_t mask;     /* causal mask bits (then, with a window, their complements) */
  uint32_t brcb;     /* 64 blocks of 32 B */
  uint32_t ninf;     /* one block of -inf */
  uint32_t size;     /* bytes of one role */
  int nbuf;          /* 2: double buffered */
  uint32_t ramp;     /* ALiBi: 0 .. 127 in fp32 */
  uint32_t cb;       /* ALiBi: the tile's column bias (128 fp32); bwd: then the LSE's shift (64 fp32) */
  uint32_t sk;       /* sinks: the [H] sink logits */
};

struct attn {
  uint32_t B, H, KVH, S, D, group;
  uint32_t Dv;                   /* value (and output) head dimension; D: query and key */
  uint32_t W;                    /* sliding window (causal), a multiple of BC; 0: none */
  bool causal, bwd, coupled;
  bool onchip;                   /* coupled core with FixPipe -> UB and UB -> L1: hand-overs
                                    stay on the core (no GM workspace round trip) */
  bool rs;                       /* forward, on chip with UB -> L0A: the vector roles write P
                                    straight into L0A as the PV GEMM's A operand (Hopper's wgmma
                                    with A in registers), not through L1 */
  enum npu_dtype dt;             /* q, k, v (and P for the PV GEMM) */
  enum npu_dtype odt;            /* o, the gradients: dt, or bf16 for fp8 inputs */
  uint32_t halves;               /* vector roles per block: 2 (split), 1 (coupled forward) */
  uint32_t br;                   /* forward query rows per block */
  uint32_t bc;                   /* forward key rows per block: BC, or 64 (head dims above 128
                                    on a small L1: FlashAttention's narrower key blocks) */
  uint32_t look, ns;             /* forward lookahead; slots = look + 1 */
  uint32_t nl1, lookb;           /* backward: L1 buffers of Q, dO and P, dS (2: double
                                    buffered), steps the cube core runs ahead (1 when double
                                    buffered, else 0) */
  uint32_t nkv;                  /* backward: L1 buffers of K, V (2: the next block's load
                                    overlaps this block's steps) */
  uint32_t qb, kb, hb;           /* backward: query rows per step, key rows per block (its dK
                                    and dV stay in L0C), rows per vector role (qb / 2) */
  uint32_t qblocks, kblocks;     /* forward: S / br; backward: S / qb and S / kb */
  uint64_t nblocks;
  int cores;
  float scale;                   /* 1 / sqrt(D) */
  struct ub_map ub;
  struct ub_map fub[2];          /* forward: role r's map (ub shifted by role_base(r)) */
  bool tight;                    /* forward: the half-row scratch shares P's buffer */
  uint32_t role_stride;          /* UB bytes between the roles of one core (coupled) */
  /* GM */
  uint64_t q, k, v, o, lse, mask, dout, dq, dk, dv, dd, dq32;
  uint64_t ws, ws_bytes;         /* per-unit workspace */
  bool alibi, sinks;             /* ALiBi biases; a sink logit per query head */
  uint64_t ramp, sink, dsink;    /* GM: ALiBi's ramp 0 .. 127 (fp32); sinks, their gradient [H] fp32 */
};

/* One launch unit's emission state (the launch's unit context, core_unit_ctx). */
struct attn_unit {
  uint32_t kv_slot;              /* key/value L1 buffers used so far */
  uint32_t l0;                   /* backward: L0A/L0B ping-pong slots used so far */
  uint32_t xc;                   /* backward: extra L0C slots used so far */
};

static struct attn_unit *unit_of(struct core_tp *t)
{
  return core_unit_ctx(t);
}

/* ------------------------------------------------------------------ common */

static uint32_t es(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

/* Head dimensions above 128 are taken in chunks of DC columns: the QK^T GEMM accumulates over
 * the chunks of its K (the head dimension), the PV GEMM and the gradient GEMMs produce theirs
 * chunk by chunk along N, so that a chunk of Q, K, V or dO fits a 32 KiB half of L0A or L0B
 * and a chunk of O_j the 64 KiB of L0C after S. Matrices the vector roles hold whole (O and
 * its O_j chunk in UB, O_j in the GM workspace) are stored chunk-major: chunk c of a rows x D
 * matrix is a rows x width(c) row-major matrix at element rows x c x DC. */
static uint32_t chunks_of(uint32_t dim)
{
  return (dim + DC - 1) / DC;
}

static uint32_t width_of(uint32_t dim, uint32_t c)
{
  return dim - c * DC < DC ? dim - c * DC : DC;
}

/* Chunks of the query/key head dimension D, and of the value one Dv (MLA: 192 and 128). */
static uint32_t nchunks(const struct attn *a)
{
  return chunks_of(a->D);
}

static uint32_t chunk_w(const struct attn *a, uint32_t c)
{
  return width_of(a->D, c);
}

static uint32_t vchunks(const struct attn *a)
{
  return chunks_of(a->Dv);
}

static uint32_t vchunk_w(const struct attn *a, uint32_t c)
{
  return width_of(a->Dv, c);
}

/* Column strip [c0, c0 + n) or row band [r0, r0 + n) of an NZ tile (L1, or L0C with c0 16). */
static uint32_t nz_ld(const struct core_tile *t)
{
  return t->ld ? t->ld : (t->rows + 15u) / 16u * 16u;
}

static uint32_t nz_c0(const struct core_tile *t)
{
  return t->c0 ? t->c0 : 32u / es((enum npu_dtype)t->dtype);
}

static struct core_tile nz_cols(struct core_tile t, uint32_t c0, uint32_t n)
{
  t.ld = nz_ld(&t);
  t.addr += (uint64_t)c0 * t.ld * es((enum npu_dtype)t.dtype);
  t.cols = n;
  return t;
}

static struct core_tile nz_rows(struct core_tile t, uint32_t r0, uint32_t n)
{
  t.ld = nz_ld(&t);
  t.addr += (uint64_t)r0 * nz_c0(&t) * es((enum npu_dtype)t.dtype);
  t.rows = n;
  return t;
}

/* Element offset of row `tok`, head `h` in a BSND tensor with `heads` heads of `dim`. */
static uint64_t bsnd(const struct attn *a, uint32_t b, uint32_t tok, uint32_t h, uint32_t heads, uint32_t dim)
{
  return (((uint64_t)b * a->S + tok) * heads + h) * dim;
}

static uint64_t lse_at(const struct attn *a, uint32_t b, uint32_t h, uint32_t row)
{
  return (((uint64_t)b * a->H + h) * a->S + row) * 4;
}

/* UB offset of vector role r: on a coupled core both roles share one UB. */
static uint32_t role_base(const struct attn *a, uint32_t r)
{
  return a->coupled ? r * a->role_stride : 0;
}

static void sel_aiv(struct core_tp *t, uint32_t role)
{
  core_select(t, (enum core_sub)(CORE_SUB_AIV0 + role));
}

static struct core_vec vop(enum core_vec_op op, uint64_t dst, uint64_t s0, uint64_t s1, uint16_t repeat)
{
  return (struct core_vec){.op = (uint8_t)op, .dtype = NPU_DT_FP32, .dst_dtype = NPU_DT_FP32, .repeat = repeat,
                           .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                           .mask = {~0ull, 0}, .dst = dst, .src0 = s0, .src1 = s1};
}

/* Per-row scalars (`rows` fp32 at src) broadcast into 32-byte blocks at bc. */
static void brcb(struct core_tp *t, uint64_t bc, uint64_t src, uint32_t rows)
{
  struct core_vec v = vop(CORE_VEC_BRCB, bc, src, 0, (uint16_t)(rows / 8));
  v.src0_rep = 1;
  v.dst_rep = 8;
  core_vec(t, &v);
}

/* dst[r][c] = src[r][c] op bcast[r] for `rows` rows of `cols` fp32 (cols a multiple of 64, or
 * 32: half a repeat's lanes). */
static void rowwise(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t src, uint64_t bc, uint32_t rows,
                    uint32_t cols)
{
  for (uint32_t c = 0; c < cols; c += 64) {
    struct core_vec v = vop(op, dst + c * 4, src + c * 4, bc, (uint16_t)rows);
    v.dst_rep = v.src0_rep = (uint16_t)(cols * 4 / 32);
    v.src1_blk = 0;
    v.src1_rep = 1;
    if (cols - c < 64) v.mask[0] = (1ull << (cols - c)) - 1;
    core_vec(t, &v);
  }
}

/* Cast rows x cols fp32 at src to type dt at dst. */
static void cast_to(struct core_tp *t, enum npu_dtype dt, uint64_t dst, uint64_t src, uint32_t rows, uint32_t cols)
{
  struct core_vec v = vop(CORE_VEC_CAST, dst, src, 0, (uint16_t)(rows * cols / 64));
  v.dst_dtype = (uint8_t)dt;
  v.dst_rep = (uint16_t)(64 * es(dt) / 32);
  core_vec(t, &v);
}

/* ... to the input type (P, dS for the cube). */
static void cast_out(struct core_tp *t, const struct attn *a, uint64_t dst, uint64_t src, uint32_t rows, uint32_t cols)
{
  cast_to(t, a->dt, dst, src, rows, cols);
}

/* S = bits ? S : -inf over rows x cols fp32 (bits at mask, one per element). */
static void apply_mask(struct core_tp *t, const struct ub_map *m, uint64_t s, uint64_t mask, uint32_t rows,
                       uint32_t cols)
{
  struct core_vec v = vop(CORE_VEC_SELECT, s, s, m->ninf, (uint16_t)(rows * cols / 64));
  v.src1_blk = 0;
  v.src1_rep = 0;
  v.aux = mask;
  core_vec(t, &v);
}

/* ALiBi's slope of query head h of H (BLOOM's build_alibi_tensor): with n the largest power of
 * two <= H, 2^(-8 (h + 1) / n) for h < n, then 2^(-4 (2 (h - n) + 1) / n), every other slope of
 * 2n heads. The kernel holds it in fp32 (slope_of). */
static double alibi_slope(uint32_t H, uint32_t h)
{
  uint32_t n = 1;
  while (2 * n <= H) n *= 2;
  return h < n ? exp2(-8.0 * (h + 1) / n) : exp2(-4.0 * (2.0 * (h - n) + 1) / n);
}

static float slope_of(const struct attn *a, uint32_t h)
{
  return (float)alibi_slope(a->H, h);
}

/* One repeat over the first n <= 64 fp32 lanes (a per-row vector). */
static struct core_vec vop_n(enum core_vec_op op, uint64_t dst, uint64_t s0, uint64_t s1, uint32_t n)
{
  struct core_vec v = vop(op, dst, s0, s1, 1);
  if (n < 64) v.mask[0] = (1ull << n) - 1;
  return v;
}

/* ALiBi's column part over a rows x cols fp32 score tile at s (cols 32 or a multiple of 64): the
 * vector cb = slope x (ramp + off) over the columns (off, the block's offset, a scalar), then
 * s[r][c] += cb[c], cb broadcast down the rows (source 1's repeat stride 0). */
static void alibi_cols(struct core_tp *t, uint64_t ramp, uint64_t cb, uint64_t s, uint32_t rows, uint32_t cols,
                       double off, float slope)
{
  uint16_t reps = (uint16_t)((cols + 63) / 64);
  struct core_vec v;
  if (off != 0) {
    v = vop(CORE_VEC_ADDS, cb, ramp, 0, reps);
    v.scalar = off;
    core_vec(t, &v);
    ramp = cb;
  }
  v = vop(CORE_VEC_MULS, cb, ramp, 0, reps);
  v.scalar = slope;
  core_vec(t, &v);
  for (uint32_t c = 0; c < cols; c += 64) {
    v = vop(CORE_VEC_ADD, s + c * 4, s + c * 4, cb + c * 4, (uint16_t)rows);
    v.dst_rep = v.src0_rep = (uint16_t)(cols * 4 / 32);
    v.src1_rep = 0;
    if (cols - c < 64) v.mask[0] = (1ull << (cols - c)) - 1;
    core_vec(t, &v);
  }
}

/* Bytes of the [H] sinks in the UB. */
static uint32_t sk_bytes(const struct attn *a)
{
  return (a->H + 7) / 8 * 32;
}

/* Head h's sink logit broadcast into a 32-byte block: the eight sinks of its group of eight at
 * sk (the sinks in the UB) each into a block at bc (Brcb, 256 bytes); returns h's block, from
 * which an op with block and repeat strides 0 fills every lane. */
static uint64_t sink_bcast(struct core_tp *t, uint64_t bc, uint64_t sk, uint32_t h)
{
  brcb(t, bc, sk + h / 8 * 32, 8);
  return bc + h % 8 * 32;
}

/* A vector role's start with ALiBi or sinks: ALiBi's ramp and the sinks into the UB at ramp and
 * sk (UINT64_MAX: not this kernel's), MTE2 -> V event ev. */
static void opts_load(struct core_tp *t, const struct attn *a, uint64_t ramp, uint64_t sk, int ev)
{
  bool with_ramp = a->alibi && ramp != UINT64_MAX, with_sinks = a->sinks && sk != UINT64_MAX;
  if (!with_ramp && !with_sinks) return;
  if (with_ramp) {
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->ramp, 1, 128, 0);
    struct core_tile u = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, ramp, 1, 128, 0);
    core_copy(t, &u, &g);
  }
  if (with_sinks) {
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->sink, 1, a->H, 0);
    struct core_tile u = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, sk, 1, a->H, 0);
    core_copy(t, &u, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
}

/* Lays out a role's UB from its regions; returns false when it does not fit. */
static uint32_t take(uint32_t *at, uint32_t bytes)
{
  uint32_t r = *at;
  *at += (bytes + 255u) / 256u * 256u;
  return r;
}

/* UB regions of the options (ub_fwd, ub_bwd): ALiBi's ramp and column bias (the backward's row
 * shift after it); the sinks. */
static void take_opts(struct ub_map *m, const struct attn *a, bool sinks, uint32_t *at)
{
  if (a->alibi) {
    m->ramp = take(at, 128 * 4);
    m->cb = take(at, 128 * 4 + (a->bwd ? 256 : 0));
  }
  if (a->sinks && sinks) m->sk = take(at, sk_bytes(a));
}

/* Causal mask variants of a vector role's `rows` rows against a block of `keys` keys: the
 * offsets o = (first row) - (first key) are multiples of step = min(rows, keys), and variant v
 * is o = v step - rows (key c seen by row r when c <= r + o): v = 0 all masked, up to
 * var_count - 1. With a window their complements serve its lowest block (keys c with c <= r + o
 * are before it). */
static uint32_t var_step(uint32_t rows, uint32_t keys)
{
  return rows < keys ? rows : keys;
}

static uint32_t var_count(uint32_t rows, uint32_t keys)
{
  return (rows + keys) / var_step(rows, keys);
}

/* The variant of offset o (< keys). */
static uint32_t var_of(int64_t o, uint32_t rows, uint32_t keys)
{
  return o <= -(int64_t)rows ? 0 : (uint32_t)((o + rows) / var_step(rows, keys));
}

/* Variants v0 .. v0 + n - 1, one rows x keys bit matrix each, into m. */
static void var_bits(uint8_t *m, uint32_t v0, uint32_t n, uint32_t rows, uint32_t keys)
{
  for (uint32_t k = 0; k < n; k++)
    for (uint32_t r = 0; r < rows; r++)
      for (uint32_t c = 0; c < keys; c++)
        if ((int64_t)c <= (int64_t)r + (int64_t)(v0 + k) * var_step(rows, keys) - rows) {
          uint32_t bit = (k * rows + r) * keys + c;
          m[bit / 8] |= (uint8_t)(1u << (bit % 8));
        }
}

/* ------------------------------------------------------------------ forward: geometry */

/* Workspace slots of unit u: S[ns] (fp32 br x bc), P[ns] (dt br x bc), O[ns] (fp32 br x D,
 * chunk-major). */
static uint64_t ws_s(const struct attn *a, int u, uint32_t slot)
{
  return a->ws + (uint64_t)u * a->ws_bytes + (uint64_t)slot * a->br * a->bc * 4;
}

static uint64_t ws_p(const struct attn *a, int u, uint32_t slot)
{
  return ws_s(a, u, a->ns) + (uint64_t)slot * a->br * a->bc * es(a->dt);
}

static uint64_t ws_o(const struct attn *a, int u, uint32_t slot)
{
  return ws_p(a, u, a->ns) + (uint64_t)slot * a->br * a->Dv * 4;
}

/* The highest and lowest key block query block i attends to: the block of its last row
 * (causal) or the last; the block of its first row's first key in the window, or the first. */
static uint32_t kv_hi(const struct attn *a, uint32_t i)
{
  return a->causal ? (i * a->br + a->br - 1) / a->bc : a->S / a->bc - 1;
}

static uint32_t kv_lo(const struct attn *a, uint32_t i)
{
  int64_t first = (int64_t)i * a->br - a->W + 1;
  return a->W && first > 0 ? (uint32_t)(first / a->bc) : 0;
}

static uint32_t kv_blocks(const struct attn *a, uint32_t i)
{
  return kv_hi(a, i) - kv_lo(a, i) + 1;
}

/* The q-th key block query block i processes: in order, or with a window from the diagonal
 * down, so that the online softmax's first block has a key for most rows (the window's lowest
 * block has none for some). A role's rows wholly masked in the first block processed (key
 * blocks narrower than the query block) are harmless: the running maximum starts finite. */
static uint32_t kv_block(const struct attn *a, uint32_t i, uint32_t q)
{
  return a->W ? kv_hi(a, i) - q : q;
}

/* The forward's masks: the HALF x bc variants from fwd_var0 (v = 0, all masked, only where key
 * blocks are narrower than query blocks), then with a window their complements. */
static uint32_t fwd_var0(const struct attn *a)
{
  return a->bc < a->br ? 0 : 1;
}

static uint32_t fwd_nvar(const struct attn *a)
{
  return var_count(HALF, a->bc) - fwd_var0(a);
}

static uint32_t fwd_mask_var_bytes(const struct attn *a)
{
  return HALF * a->bc / 8;
}

static uint32_t fwd_mask_bytes(const struct attn *a)
{
  return (a->W ? 2 : 1) * fwd_nvar(a) * fwd_mask_var_bytes(a);
}

/* Block b -> (batch, head, query block); query blocks of one head in order. */
static void fwd_decompose(const struct attn *a, uint64_t b, uint32_t *bb, uint32_t *h, uint32_t *i)
{
  *i = (uint32_t)(b % a->qblocks);
  *h = (uint32_t)(b / a->qblocks % a->H);
  *bb = (uint32_t)(b / a->qblocks / a->H);
}

/* Heaviest blocks first (causal rows near the end see the most keys), dealt round robin. On a
 * split chip (the kernel's own static split over block_dim cores) head by head; on coupled
 * cores (GPU SMs, whose block scheduler hands the next block to whichever SM is free) across
 * heads, heaviest of every head first: dealt head by head, a core whose turn always falls on
 * a head's heavy rows does up to twice the work of another when the cores are about as many
 * as a head's query blocks (132 SMs, 128 blocks of 128 rows: 353 against 519 TFLOP/s). */
static uint64_t fwd_block_of(void *ctx, int unit, uint64_t n)
{
  const struct attn *a = ctx;
  uint64_t pos = n * (uint64_t)a->cores + (uint64_t)unit;
  if (pos >= a->nblocks) return UINT64_MAX;
  if (!a->causal) return pos;
  uint64_t heads = a->nblocks / a->qblocks, head = pos / a->qblocks, i = pos % a->qblocks;
  if (a->coupled) head = pos % heads, i = pos / heads;
  return head * a->qblocks + (a->qblocks - 1 - i);
}

/* Blocks that see the same number of key blocks take the same time (see plan: < 256). */
static int fwd_class(void *ctx, uint64_t b)
{
  const struct attn *a = ctx;
  uint32_t bb, h, i;
  fwd_decompose(a, b, &bb, &h, &i);
  return (int)kv_blocks(a, i) - 1;
}

/* ------------------------------------------------------------------ forward: cube core */

/* Cross-core flag ids: S ready, P ready, O_j ready, each + slot. */
#define X_S(a, s) ((int)(s))
#define X_P(a, s) ((int)((a)->ns + (s)))
#define X_O(a, s) ((int)(2 * (a)->ns + (s)))
/* MTE1 -> MTE2 event ids: the L1 P slot free, the K/V slots free, the L1 Q slot free. */
#define E_P 2
#define E_KV(s) (3 + (int)(s))
#define E_Q(a) (3 + (int)(a)->ns)

/* L1: Q at 0, the K/V slots after it, P after those. */
static uint32_t l1_kv(const struct attn *a, uint32_t slot, int which)
{
  return (a->br * a->D + slot * a->bc * (a->D + a->Dv) + (uint32_t)which * a->bc * a->D) * es(a->dt);
}

static uint32_t l1_p(const struct attn *a)
{
  return l1_kv(a, a->ns, 0);
}

static void fwd_aic_begin(struct core_tp *t, const struct attn *a)
{
  for (int i = 0; i < 2; i++) {
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
    core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, i);
  }
  for (int i = E_P; i <= E_Q(a); i++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
  for (uint32_t r = 0; r < a->halves && a->onchip; r++) /* P's L1 (L0A) slot free */
    core_set_flag(t, a->rs ? CORE_PIPE_M : CORE_PIPE_MTE1, CORE_PIPE_MTE3, (int)r);
}

static void fwd_aic_end(struct core_tp *t, const struct attn *a)
{
  for (int i = 0; i < 2; i++) {
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
    core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, i);
  }
  for (int i = E_P; i <= E_Q(a); i++) core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, i);
  for (uint32_t r = 0; r < a->halves && a->onchip; r++)
    core_wait_flag(t, a->rs ? CORE_PIPE_M : CORE_PIPE_MTE1, CORE_PIPE_MTE3, (int)r);
}

static void fwd_load_q(struct core_tp *t, const struct attn *a, uint32_t bb, uint32_t h, uint32_t i)
{
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_Q(a));
  struct core_tile gq = ops_tile(MEM_GM, CORE_ND, a->dt, a->q + bsnd(a, bb, i * a->br, h, a->H, a->D) * es(a->dt), a->br,
                                 a->D, a->H * a->D);
  struct core_tile lq = ops_tile(MEM_L1, CORE_NZ, a->dt, 0, a->br, a->D, 0);
  core_copy(t, &lq, &gq);
}

static void fwd_load_kv(struct core_tp *t, const struct attn *a, uint32_t slot, uint32_t bb, uint32_t kvh, uint32_t j)
{
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_KV(slot));
  for (int w = 0; w < 2; w++) {
    uint64_t base = w ? a->v : a->k;
    uint32_t dim = w ? a->Dv : a->D;
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt, base + bsnd(a, bb, j * a->bc, kvh, a->KVH, dim) * es(a->dt),
                                  a->bc, dim, a->KVH * dim);
    struct core_tile l = ops_tile(MEM_L1, CORE_NZ, a->dt, l1_kv(a, slot, w), a->bc, dim, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 0);
}

/* On chip: each vector role's HALF rows of the br x cols fp32 result at L0C address l0c into its
 * UB buffer (dst[r]), once the role freed it (V -> FIX event ev0 + 3r); then L0C is free for the
 * cube (FIX -> M event mev) and the roles are told (FIX -> V). */
static void fwd_to_roles(struct core_tp *t, const struct attn *a, struct core_copy out, uint32_t l0c, uint32_t cols,
                         const uint32_t *dst, int ev0, int mev)
{
  for (uint32_t r = 0; r < a->halves; r++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_FIX, 3 * (int)r + ev0);
    out.src = ops_tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, l0c + r * HALF * 16 * 4, HALF, cols, 0);
    out.src.c0 = 16;
    out.src.ld = a->br;
    out.dst = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, dst[r], HALF, cols, 0);
    core_copy_ex(t, &out);
  }
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, mev);
  for (uint32_t r = 0; r < a->halves; r++) core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_V, 3 * (int)r + ev0);
}

/* S_j = Q K_j^T / sqrt(D) -> workspace; tells the vector roles. With one head-dimension chunk
 * Q stays in L0A over the query block (copied at its first key block); with more, each chunk of
 * Q and K_j is copied in turn and the GEMM accumulates over them, and Q's L1 slot is held to
 * the block's last key block. */
static void fwd_s(struct core_tp *t, const struct attn *a, int u, uint32_t kvslot, uint32_t j, bool first, bool last)
{
  uint32_t nd = nchunks(a);
  struct core_tile c = ops_tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, a->br, a->bc, 0);
  c.c0 = 16;
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 0);
  for (uint32_t d = 0; d < nd; d++) {
    uint32_t w = chunk_w(a, d);
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, 0);
    if (first || nd > 1) {
      struct core_tile lq = nz_cols(ops_tile(MEM_L1, CORE_NZ, a->dt, 0, a->br, a->D, 0), d * DC, w);
      struct core_tile l0q = ops_tile(MEM_L0A, CORE_ZZ, a->dt, 0, a->br, w, 0);
      core_copy(t, &l0q, &lq);
      if (nd == 1 || (last && d == nd - 1))
        core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_Q(a)); /* L1 Q slot free */
    }
    struct core_copy ck = {.scale = 1.0f, .fb_scale = UINT64_MAX, .transpose = true};
    ck.src = nz_cols(ops_tile(MEM_L1, CORE_NZ, a->dt, l1_kv(a, kvslot, 0), a->bc, a->D, 0), d * DC, w);
    ck.dst = ops_tile(MEM_L0B, CORE_ZN, a->dt, 0, w, a->bc, 0);
    core_copy_ex(t, &ck);
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 0);
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 0);
    if (d == 0) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
    struct core_tile q = ops_tile(MEM_L0A, CORE_ZZ, a->dt, 0, a->br, w, 0);
    core_mmad(t, &c, &q, &ck.dst, a->br, w, a->bc, d == 0);
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, 0);
  }
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  struct core_copy out = {.scale = a->scale, .fb_scale = UINT64_MAX};
  out.src = c;
  if (a->onchip) { /* each role's rows straight into its S buffer */
    uint32_t us = j % (uint32_t)a->ub.nbuf, dst[2] = {a->fub[0].buf[us], a->fub[1].buf[us]};
    fwd_to_roles(t, a, out, 0, a->bc, dst, (int)us, 0);
    return;
  }
  out.dst = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, ws_s(a, u, j % a->ns), a->br, a->bc, 0);
  core_copy_ex(t, &out);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 0);
  for (uint32_t r = 0; r < a->halves; r++)
    core_xset(t, CORE_PIPE_FIX, (enum core_sub)(CORE_SUB_AIV0 + r), X_S(a, j % a->ns));
}

/* O_j = P_j V_j -> workspace, once the vector roles have written P_j. */
static void fwd_pv(struct core_tp *t, const struct attn *a, int u, uint32_t kvslot, uint32_t j)
{
  uint32_t slot = j % a->ns;
  struct core_tile lp = ops_tile(MEM_L1, CORE_NZ, a->dt, l1_p(a), a->br, a->bc, 0);
  struct core_tile l0p = ops_tile(MEM_L0A, CORE_ZZ, a->dt, 32768, a->br, a->bc, 0);
  if (a->rs) { /* the vector roles wrote P into L0A */
    for (uint32_t r = 0; r < a->halves; r++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_M, (int)r);
  } else if (a->onchip) { /* the vector roles wrote P into L1 */
    for (uint32_t r = 0; r < a->halves; r++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE1, (int)r);
  } else {
    for (uint32_t r = 0; r < a->halves; r++)
      core_xwait(t, CORE_PIPE_MTE2, (enum core_sub)(CORE_SUB_AIV0 + r), X_P(a, slot));
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_P);
    struct core_tile gp = ops_tile(MEM_GM, CORE_ND, a->dt, ws_p(a, u, slot), a->br, a->bc, 0);
    core_copy(t, &lp, &gp);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 1);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 1);
  }
  /* O_j chunk by chunk of the head dimension: V's chunk into L0B, its GEMM into L0C, out */
  uint32_t nd = vchunks(a);
  for (uint32_t d = 0; d < nd; d++) {
    uint32_t w = vchunk_w(a, d);
    bool lastc = d == nd - 1;
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, 1);
    if (!a->rs && d == 0) core_copy(t, &l0p, &lp);
    struct core_tile lv = nz_cols(ops_tile(MEM_L1, CORE_NZ, a->dt, l1_kv(a, kvslot, 1), a->bc, a->Dv, 0), d * DC, w);
    struct core_tile l0v = ops_tile(MEM_L0B, CORE_ZN, a->dt, 32768, a->bc, w, 0);
    core_copy(t, &l0v, &lv);
    if (d == 0 && a->onchip && !a->rs) /* L1 P free */
      for (uint32_t r = 0; r < a->halves; r++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, (int)r);
    else if (d == 0 && !a->onchip)
      core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_P);
    if (lastc) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, E_KV(kvslot)); /* K/V slot free */
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 1);
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 1);
    core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 1);
    struct core_tile c = ops_tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 65536, a->br, w, 0);
    c.c0 = 16;
    core_mmad(t, &c, &l0p, &l0v, a->br, a->bc, w, true);
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, 1);
    for (uint32_t r = 0; r < a->halves && a->rs && lastc; r++)
      core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE3, (int)r); /* L0A P free */
    core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 1);
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 1);
    if (a->onchip) { /* each role's rows of the chunk straight into its O_j buffer */
      uint32_t dst[2] = {a->fub[0].oj, a->fub[1].oj};
      fwd_to_roles(t, a, (struct core_copy){.scale = 1.0f, .fb_scale = UINT64_MAX}, 65536, w, dst, 2, 1);
      continue;
    }
    struct core_tile go = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, ws_o(a, u, slot) + (uint64_t)a->br * d * DC * 4, a->br,
                                   w, 0);
    core_copy(t, &go, &c);
    core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 1);
    if (lastc)
      for (uint32_t r = 0; r < a->halves; r++)
        core_xset(t, CORE_PIPE_FIX, (enum core_sub)(CORE_SUB_AIV0 + r), X_O(a, slot));
  }
}

/* ------------------------------------------------------------------ forward: vector roles */

#define VEC(m, i) ((m)->vec + 256u * (i))
/* V_LSE stages the row's log-sum-exp for its copy to GM: only the finish writes it (after the
 * previous block's copy-out is done), so the next block's softmax, which uses V_T as scratch,
 * cannot overwrite a value MTE3 has yet to read. V_A0 + t % ns: alpha of key block t (ns <= 3). */
enum { V_M, V_MNEW, V_L, V_T, V_R, V_LSE, V_A0, V_SLOTS = V_A0 + 3 };

/* Event ids of role r: V -> MTE2 3r + {0, 1} the S buffers free, 3r + 2 the O_j region free;
 * MTE2 -> V the same ids loaded; V <-> MTE3 id r. */
static void fwd_aiv_begin(struct core_tp *t, const struct attn *a, uint32_t r)
{
  const struct ub_map *m = &a->fub[r];
  for (int i = 0; i < 3; i++) core_set_flag(t, CORE_PIPE_V, a->onchip ? CORE_PIPE_FIX : CORE_PIPE_MTE2, 3 * (int)r + i);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  struct core_vec ni = vop(CORE_VEC_DUP, m->ninf, 0, 0, 1);
  ni.scalar = -INFINITY;
  ni.mask[0] = 0xff;
  core_vec(t, &ni);
  if (a->causal) {
    struct core_tile gm = ops_tile(MEM_GM, CORE_ND, NPU_DT_UINT8, a->mask, 1, fwd_mask_bytes(a), 0);
    struct core_tile um = ops_tile(MEM_UB, CORE_ND, NPU_DT_UINT8, m->mask, 1, fwd_mask_bytes(a), 0);
    core_copy(t, &um, &gm);
  }
  opts_load(t, a, m->ramp, m->sk, 6 + (int)r);
}

static void fwd_aiv_end(struct core_tp *t, const struct attn *a, uint32_t r)
{
  for (int i = 0; i < 3; i++) core_wait_flag(t, CORE_PIPE_V, a->onchip ? CORE_PIPE_FIX : CORE_PIPE_MTE2, 3 * (int)r + i);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
}

/* The forward's ALiBi row shift m_h r of a role's rows r into per-row vector slot. */
static void row_shift(struct core_tp *t, const struct attn *a, const struct ub_map *m, uint32_t slot, uint32_t h)
{
  struct core_vec v = vop(CORE_VEC_MULS, VEC(m, slot), m->ramp, 0, 1);
  v.scalar = slope_of(a, h);
  core_vec(t, &v);
}

static void fwd_aiv_init(struct core_tp *t, const struct attn *a, uint32_t r, uint32_t h)
{
  const struct ub_map *m = &a->fub[r];
  struct core_vec v;
  if (a->sinks) { /* m = sink_h (+ m_h r with ALiBi: see fwd_aiv_softmax), l = 1: the softmax's first column */
    uint64_t sb = sink_bcast(t, m->brcb, m->sk, h);
    if (a->alibi) row_shift(t, a, m, V_T, h);
    v = a->alibi ? vop(CORE_VEC_ADD, VEC(m, V_M), VEC(m, V_T), sb, 1) : vop(CORE_VEC_COPY, VEC(m, V_M), sb, 0, 1);
    if (a->alibi)
      v.src1_blk = v.src1_rep = 0;
    else
      v.src0_blk = v.src0_rep = 0;
  } else {
    v = vop(CORE_VEC_DUP, VEC(m, V_M), 0, 0, 1);
    v.scalar = -FLT_MAX; /* finite: a first block wholly masked for a row leaves it finite (no NaN) */
  }
  core_vec(t, &v);
  v = vop(CORE_VEC_DUP, VEC(m, V_L), 0, 0, 1);
  v.scalar = a->sinks ? 1.0 : 0.0;
  core_vec(t, &v);
  for (uint32_t d = 0; d < vchunks(a); d++) { /* a chunk at a time: at most 255 repeats */
    v = vop(CORE_VEC_DUP, m->o + HALF * d * DC * 4, 0, 0, (uint16_t)(HALF * vchunk_w(a, d) / 64));
    core_vec(t, &v);
  }
}

/* Online softmax of S_j for role r's rows (query block i): the j-th block processed, key block
 * jb; P_j to the workspace. */
static void fwd_aiv_softmax(struct core_tp *t, const struct attn *a, int u, uint32_t r, uint32_t h, uint32_t i,
                            uint32_t j, uint32_t jb)
{
  const struct ub_map *m = &a->fub[r];
  uint32_t alpha = V_A0 + j % a->ns, us = j % (uint32_t)m->nbuf;
  uint64_t S = m->buf[us];
  int ev = 3 * (int)r + (int)us;
  struct core_vec v;
  if (a->onchip) {
    core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_V, ev);
  } else {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ev);
    core_xwait(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_S(a, j % a->ns));
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, ws_s(a, u, j % a->ns) + (uint64_t)r * HALF * a->bc * 4,
                                  HALF, a->bc, 0);
    struct core_tile s = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, S, HALF, a->bc, 0);
    core_copy(t, &s, &g);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
  }
  int64_t row0 = (int64_t)i * a->br + r * HALF, o = row0 - (int64_t)jb * a->bc, ow = o - a->W;
  uint32_t vb = fwd_mask_var_bytes(a), v0 = fwd_var0(a);
  if (a->alibi) /* + m_h (j - row0); the row shift -m_h r is left to the LSE (fwd_aiv_finish) */
    alibi_cols(t, m->ramp, m->cb, S, HALF, a->bc, (double)-o, slope_of(a, h));
  if (a->causal && o < (int64_t)a->bc - 1) /* keys after a query: -inf */
    apply_mask(t, m, S, m->mask + (var_of(o, HALF, a->bc) - v0) * vb, HALF, a->bc);
  if (a->W && ow > -(int64_t)HALF) /* keys before the window: -inf (complements; all when ow >= bc) */
    apply_mask(t, m, S, ow >= a->bc ? m->mask : m->mask + (fwd_nvar(a) + var_of(ow, HALF, a->bc) - v0) * vb, HALF,
               a->bc);
  /* row max of the block; running max m_new; alpha_j = exp(m - m_new) */
  if (a->tight) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r); /* t is P's buffer: its copy is out */
  if (a->bc > 64) { /* the two 64-column halves, then across */
    v = vop(CORE_VEC_MAX, m->t, S, S + 256, HALF);
    v.src0_rep = v.src1_rep = a->bc * 4 / 32;
    core_vec(t, &v);
  }
  v = vop(CORE_VEC_REDUCE_MAX, VEC(m, V_T), a->bc > 64 ? m->t : S, 0, HALF);
  core_vec(t, &v);
  core_vec(t, &(struct core_vec){.op = CORE_VEC_MAX, .dtype = NPU_DT_FP32, .repeat = 1, .dst_blk = 1, .src0_blk = 1,
                                 .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8, .mask = {~0ull, 0},
                                 .dst = VEC(m, V_MNEW), .src0 = VEC(m, V_M), .src1 = VEC(m, V_T)});
  v = vop(CORE_VEC_SUB, VEC(m, alpha), VEC(m, V_M), VEC(m, V_MNEW), 1);
  core_vec(t, &v);
  v = vop(CORE_VEC_EXP, VEC(m, alpha), VEC(m, alpha), 0, 1);
  core_vec(t, &v);
  /* P = exp(S - m_new); row sums; l = l alpha + rowsum; m = m_new */
  brcb(t, m->brcb, VEC(m, V_MNEW), HALF);
  rowwise(t, CORE_VEC_SUB, S, S, m->brcb, HALF, a->bc);
  v = vop(CORE_VEC_EXP, S, S, 0, (uint16_t)(HALF * a->bc / 64));
  core_vec(t, &v);
  if (a->bc > 64) {
    v = vop(CORE_VEC_ADD, m->t, S, S + 256, HALF);
    v.src0_rep = v.src1_rep = a->bc * 4 / 32;
    core_vec(t, &v);
  }
  v = vop(CORE_VEC_REDUCE_SUM, VEC(m, V_T), a->bc > 64 ? m->t : S, 0, HALF);
  core_vec(t, &v);
  v = vop(CORE_VEC_MUL, VEC(m, V_L), VEC(m, V_L), VEC(m, alpha), 1);
  core_vec(t, &v);
  v = vop(CORE_VEC_ADD, VEC(m, V_L), VEC(m, V_L), VEC(m, V_T), 1);
  core_vec(t, &v);
  v = vop(CORE_VEC_COPY, VEC(m, V_M), VEC(m, V_MNEW), 0, 1);
  core_vec(t, &v);
  /* P to the cube core, in the input type */
  if (!a->tight) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  cast_out(t, a, m->pb, S, HALF, a->bc);
  core_set_flag(t, CORE_PIPE_V, a->onchip ? CORE_PIPE_FIX : CORE_PIPE_MTE2, ev);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  struct core_tile up = ops_tile(MEM_UB, CORE_ND, a->dt, m->pb, HALF, a->bc, 0);
  if (a->rs) { /* P into the cube role's L0A, its rows of the PV GEMM's A operand */
    core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE3, (int)r);
    struct core_tile l0p = ops_tile(MEM_L0A, CORE_ZZ, a->dt, 32768 + r * HALF * a->bc * es(a->dt), HALF, a->bc, 0);
    core_copy(t, &l0p, &up);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_M, (int)r);
    return;
  }
  if (a->onchip) { /* P into the cube role's L1 */
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, (int)r);
    struct core_tile lp = ops_tile(MEM_L1, CORE_NZ, a->dt, l1_p(a) + r * HALF * 32, HALF, a->bc, a->br);
    core_copy(t, &lp, &up);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE1, (int)r);
    return;
  }
  struct core_tile gp = ops_tile(MEM_GM, CORE_ND, a->dt, ws_p(a, u, j % a->ns) + (uint64_t)r * HALF * a->bc * es(a->dt),
                                 HALF, a->bc, 0);
  core_copy(t, &gp, &up);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  core_xset(t, CORE_PIPE_MTE3, CORE_SUB_AIC, X_P(a, j % a->ns));
}

/* O = O alpha_j + O_j (alpha_j, the rescale at block j, was known only at block j). */
/* Where the vector roles put O in the input type for its copy out: P's buffer, or, when the
 * head dimension is wider than a key block (P's buffer is then too small), the O_j buffer, held
 * from the block's last O_j to the end of the copy (oj_held). */
static bool oj_held(const struct attn *a)
{
  return a->Dv * es(a->odt) > a->bc * es(a->dt);
}

/* ... for head-dimension chunk d of O_j (chunk-major): the cube core hands the chunks over to
 * both roles in turn, so on a coupled core the roles take them chunk by chunk (fwd_block). */
static void fwd_accumulate(struct core_tp *t, const struct attn *a, int u, uint32_t r, uint32_t j, bool last,
                           uint32_t d)
{
  const struct ub_map *m = &a->fub[r];
  int ev = 3 * (int)r + 2;
  uint32_t w = vchunk_w(a, d);
  uint64_t od = m->o + (uint64_t)HALF * d * DC * 4;
  if (a->onchip) {
    core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_V, ev);
  } else {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ev);
    if (d == 0) core_xwait(t, CORE_PIPE_MTE2, CORE_SUB_AIC, X_O(a, j % a->ns));
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32,
                                  ws_o(a, u, j % a->ns) + ((uint64_t)a->br * d * DC + (uint64_t)r * HALF * w) * 4, HALF,
                                  w, 0);
    struct core_tile o = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, m->oj, HALF, w, 0);
    core_copy(t, &o, &g);
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
  }
  if (d == 0) brcb(t, m->brcb, VEC(m, V_A0 + j % a->ns), HALF);
  rowwise(t, CORE_VEC_MUL, od, od, m->brcb, HALF, w);
  struct core_vec add = vop(CORE_VEC_ADD, od, od, m->oj, (uint16_t)(HALF * w / 64));
  core_vec(t, &add);
  if (!(last && d == vchunks(a) - 1 && oj_held(a))) /* O_j's buffer free (else after O's copy) */
    core_set_flag(t, CORE_PIPE_V, a->onchip ? CORE_PIPE_FIX : CORE_PIPE_MTE2, ev);
}

/* O /= l; lse = m + ln l; write both. */
static void fwd_aiv_finish(struct core_tp *t, const struct attn *a, uint32_t r, uint32_t bb, uint32_t h, uint32_t i)
{
  const struct ub_map *m = &a->fub[r];
  struct core_vec v = vop(CORE_VEC_RECIP, VEC(m, V_R), VEC(m, V_L), 0, 1);
  core_vec(t, &v);
  brcb(t, m->brcb, VEC(m, V_R), HALF);
  for (uint32_t d = 0; d < vchunks(a); d++)
    rowwise(t, CORE_VEC_MUL, m->o + HALF * d * DC * 4, m->o + HALF * d * DC * 4, m->brcb, HALF, vchunk_w(a, d));
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r); /* the previous block's O and LSE are out */
  v = vop(CORE_VEC_LN, VEC(m, V_LSE), VEC(m, V_L), 0, 1);
  core_vec(t, &v);
  v = vop(CORE_VEC_ADD, VEC(m, V_LSE), VEC(m, V_LSE), VEC(m, V_M), 1);
  core_vec(t, &v);
  if (a->alibi) { /* the scores were m_h r above the true ones (V_R is free once broadcast) */
    row_shift(t, a, m, V_R, h);
    v = vop(CORE_VEC_SUB, VEC(m, V_LSE), VEC(m, V_LSE), VEC(m, V_R), 1);
    core_vec(t, &v);
  }
  uint32_t ob = oj_held(a) ? m->oj : m->pb;
  for (uint32_t d = 0; d < vchunks(a); d++)
    cast_to(t, a->odt, ob + HALF * d * DC * es(a->odt), m->o + HALF * d * DC * 4, HALF, vchunk_w(a, d));
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  uint32_t row = i * a->br + r * HALF;
  for (uint32_t d = 0; d < vchunks(a); d++) { /* O is chunk-major in UB */
    uint32_t w = vchunk_w(a, d);
    struct core_tile uo = ops_tile(MEM_UB, CORE_ND, a->odt, ob + HALF * d * DC * es(a->odt), HALF, w, 0);
    struct core_tile go = ops_tile(MEM_GM, CORE_ND, a->odt,
                                   a->o + (bsnd(a, bb, row, h, a->H, a->Dv) + d * DC) * es(a->odt), HALF, w, a->H * a->Dv);
    core_copy(t, &go, &uo);
  }
  struct core_tile ul = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, VEC(m, V_LSE), 1, HALF, 0);
  struct core_tile gl = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->lse + lse_at(a, bb, h, row), 1, HALF, 0);
  core_copy(t, &gl, &ul);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  if (oj_held(a)) { /* O is out: the O_j buffer is free for the next block */
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
    core_set_flag(t, CORE_PIPE_V, a->onchip ? CORE_PIPE_FIX : CORE_PIPE_MTE2, 3 * (int)r + 2);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  }
}

/* ------------------------------------------------------------------ forward: the kernel */

static void fwd_begin(struct core_tp *t, void *ctx)
{
  struct attn *a = ctx;
  unit_of(t)->kv_slot = 0;
  core_select(t, CORE_SUB_AIC);
  fwd_aic_begin(t, a);
  for (uint32_t r = 0; r < a->halves; r++) {
    sel_aiv(t, r);
    fwd_aiv_begin(t, a, r);
  }
}

static void fwd_end(struct core_tp *t, void *ctx)
{
  struct attn *a = ctx;
  core_select(t, CORE_SUB_AIC);
  fwd_aic_end(t, a);
  for (uint32_t r = 0; r < a->halves; r++) {
    sel_aiv(t, r);
    fwd_aiv_end(t, a, r);
  }
}

/* Emitted key block by key block, cube role first, so that on a coupled core (one MTE2 for
 * both roles) no load waits behind one that depends on it. */
static void fwd_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct attn *a = ctx;
  int u = core_unit(t);
  uint32_t bb, h, i;
  fwd_decompose(a, b, &bb, &h, &i);
  uint32_t kvh = h / a->group, n = kv_blocks(a, i);
  uint32_t base = unit_of(t)->kv_slot;
  unit_of(t)->kv_slot += n;
  core_select(t, CORE_SUB_AIC);
  fwd_load_q(t, a, bb, h, i);
  for (uint32_t r = 0; r < a->halves; r++) {
    sel_aiv(t, r);
    fwd_aiv_init(t, a, r, h);
  }
  for (uint32_t j = 0; j < n + a->look; j++) { /* j: the order of processing; key block kv_block(j) */
    core_select(t, CORE_SUB_AIC);
    if (j < n) {
      fwd_load_kv(t, a, (base + j) % a->ns, bb, kvh, kv_block(a, i, j));
      fwd_s(t, a, u, (base + j) % a->ns, j, j == 0, j == n - 1);
    }
    if (j >= a->look) fwd_pv(t, a, u, (base + j - a->look) % a->ns, j - a->look);
    bool acc = j >= a->look, last = j - a->look == n - 1;
    for (uint32_t r = 0; r < a->halves; r++) {
      sel_aiv(t, r);
      if (j < n) fwd_aiv_softmax(t, a, u, r, h, i, j, kv_block(a, i, j));
      if (acc && vchunks(a) == 1) fwd_accumulate(t, a, u, r, j - a->look, last, 0);
    }
    for (uint32_t d = 0; acc && vchunks(a) > 1 && d < vchunks(a); d++)
      for (uint32_t r = 0; r < a->halves; r++) {
        sel_aiv(t, r);
        fwd_accumulate(t, a, u, r, j - a->look, last, d);
      }
  }
  for (uint32_t r = 0; r < a->halves; r++) {
    sel_aiv(t, r);
    fwd_aiv_finish(t, a, r, bb, h, i);
  }
}

/* ------------------------------------------------------------------ backward: geometry */

/* Bytes of the backward's masks: every hb x kb variant (var_bits). */
static uint32_t bwd_mask_bytes(const struct attn *a)
{
  return var_count(a->hb, a->kb) * a->hb * a->kb / 8;
}

/* ... and with a window their complements after them (the window's edge: key c sees row r
 * when c > r + o). */
static uint32_t bwd_masks_bytes(const struct attn *a)
{
  return (a->W ? 2 : 1) * bwd_mask_bytes(a);
}

/* Workspace of unit u: two slots of S, dP (fp32 a->qb x a->kb), P, dS (input type a->qb x a->kb). */
static uint64_t bws(const struct attn *a, int u, uint32_t slot, int which)
{
  uint64_t f = (uint64_t)a->qb * a->kb * 4, h = (uint64_t)a->qb * a->kb * es(a->dt);
  uint64_t base = a->ws + (uint64_t)u * a->ws_bytes + (uint64_t)slot * 2 * (f + h);
  return which < 2 ? base + (uint64_t)which * f : base + 2 * f + (uint64_t)(which - 2) * h;
}
enum { W_S, W_DP, W_P, W_DS };

/* Block b -> (batch, key/value head, key block). */
static void bwd_decompose(const struct attn *a, uint64_t b, uint32_t *bb, uint32_t *kvh, uint32_t *j)
{
  *j = (uint32_t)(b % a->kblocks);
  *kvh = (uint32_t)(b / a->kblocks % a->KVH);
  *bb = (uint32_t)(b / a->kblocks / a->KVH);
}

/* First query block that sees key block j. */
static uint32_t bwd_first_q(const struct attn *a, uint32_t j)
{
  return a->causal ? j * a->kb / a->qb : 0;
}

/* Query blocks that see key block j: to the last, or to the one of the window's last row. */
static uint32_t bwd_nq(const struct attn *a, uint32_t j)
{
  uint32_t last = a->qblocks - 1;
  if (a->W) {
    uint64_t row = (uint64_t)(j + 1) * a->kb + a->W - 2; /* the last query that sees the block */
    if (row / a->qb < last) last = (uint32_t)(row / a->qb);
  }
  return last - bwd_first_q(a, j) + 1;
}

static int bwd_class(void *ctx, uint64_t b)
{
  const struct attn *a = ctx;
  uint32_t bb, kvh, j;
  bwd_decompose(a, b, &bb, &kvh, &j);
  return (int)bwd_nq(a, j) - 1;
}

/* Step s of a block -> (query head, query block). */
static void bwd_step(const struct attn *a, uint32_t kvh, uint32_t j, uint32_t s, uint32_t *h, uint32_t *i)
{
  uint32_t per = bwd_nq(a, j);
  *h = kvh * a->group + s / per;
  *i = bwd_first_q(a, j) + s % per;
}

/* ------------------------------------------------------------------ backward: cube core */

/* Cross-core flags: S and dP ready (AIC -> AIVs) 0..1, P and dS ready (AIVs -> AIC) 2..3. */
#define BX_S(s) ((int)(s))
#define BX_P(s) (2 + (int)(s))
/* L1 buffers (nl1 of each): K and V, Q and dO, P and dS. Event ids MTE1 <-> MTE2: 0..1 Q/dO,
 * 2..3 P/dS, 4..5 K/V. L0C: dV, dK, then two 32 KiB slots X0, X1 for S, dP and dQ halves;
 * FIX -> M ids 0, 1 the X slots free, 2 dK/dV read out. */
#define BE_QD(x) ((int)(x))
#define BE_PD(y) (2 + (int)(y))
#define BE_KV(z) (4 + (int)(z))

static uint32_t bl1_kv(const struct attn *a, uint32_t z, int which)
{
  return (z * a->kb * (a->D + a->Dv) + (uint32_t)which * a->kb * a->D) * es(a->dt);
}

static uint32_t bl1_qd(const struct attn *a, uint32_t x, int which)
{
  return bl1_kv(a, a->nkv, 0) + (x * a->qb * (a->D + a->Dv) + (uint32_t)which * a->qb * a->D) * es(a->dt);
}

static uint32_t bl1_pd(const struct attn *a, uint32_t y, int which)
{
  return bl1_qd(a, a->nl1, 0) + (y * 2 + (uint32_t)which) * a->qb * a->kb * es(a->dt);
}

static uint32_t l1_bytes_bwd(const struct attn *a)
{
  return bl1_pd(a, a->nl1, 0);
}

static void bwd_aic_begin(struct core_tp *t, const struct attn *a)
{
  for (int i = 0; i < 2; i++) core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  for (int i = 0; i < 3; i++) core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, i);
  for (uint32_t x = 0; x < a->nl1; x++) {
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_QD(x));
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_PD(x));
    for (int r = 0; r < 2 && a->onchip; r++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, 2 * r + (int)x);
  }
  for (uint32_t z = 0; z < a->nkv; z++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_KV(z));
}

static void bwd_aic_end(struct core_tp *t, const struct attn *a)
{
  for (int i = 0; i < 2; i++) core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, i);
  for (int i = 0; i < 3; i++) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, i);
  for (uint32_t x = 0; x < a->nl1; x++) {
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_QD(x));
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_PD(x));
    for (int r = 0; r < 2 && a->onchip; r++) core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, 2 * r + (int)x);
  }
  for (uint32_t z = 0; z < a->nkv; z++) core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_KV(z));
}

static struct core_tile l1t(const struct attn *a, uint32_t addr, uint32_t rows, uint32_t cols, uint32_t ld)
{
  return ops_tile(MEM_L1, CORE_NZ, a->dt, addr, rows, cols, ld);
}

/* L0C accumulators and slots. */
static struct core_tile l0c(uint32_t addr, uint32_t rows, uint32_t cols)
{
  struct core_tile c = ops_tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, addr, rows, cols, 0);
  c.c0 = 16;
  return c;
}

/* L0C: dV (kb x Dv) at 0, dK (kb x D) after it, then two slots of qb x kb fp32 (S, dP, or a
 * piece of dQ). */
#define L0C_DV 0u

static uint32_t l0c_dk(const struct attn *a)
{
  return a->kb * a->Dv * 4;
}

static uint32_t l0c_slot_bytes(const struct attn *a)
{
  return a->qb * a->kb * 4;
}

/* Rows of dQ_i an L0C slot holds: qb halved until a slot holds them (the dS K GEMM's pieces). */
static uint32_t dq_rows(const struct attn *a)
{
  uint32_t r = a->qb;
  while (r > 16 && r * a->D * 4 > l0c_slot_bytes(a)) r /= 2;
  return r;
}

/* Slot x's address; l0c_x(a, 2) is the bytes the backward needs. */
static uint32_t l0c_x(const struct attn *a, int x)
{
  return a->kb * (a->D + a->Dv) * 4 + l0c_slot_bytes(a) * (uint32_t)x;
}

/* One step of bwd_mm: c (+)= op(A) x op(B) through the next L0A/L0B ping-pong slot. */
static void bwd_mm1(struct core_tp *t, struct attn *a, struct core_tile asrc, bool at, struct core_tile bsrc,
                    bool bt, struct core_tile c, bool init, int fix)
{
  int p = (int)(unit_of(t)->l0++ % 2);
  uint32_t m = at ? asrc.cols : asrc.rows, k = at ? asrc.rows : asrc.cols, n = bt ? bsrc.rows : bsrc.cols;
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, p);
  struct core_copy ca = {.scale = 1.0f, .fb_scale = UINT64_MAX, .transpose = at, .src = asrc};
  ca.dst = ops_tile(MEM_L0A, CORE_ZZ, a->dt, (uint32_t)p * 32768u, m, k, 0);
  core_copy_ex(t, &ca);
  struct core_copy cb = {.scale = 1.0f, .fb_scale = UINT64_MAX, .transpose = bt, .src = bsrc};
  cb.dst = ops_tile(MEM_L0B, CORE_ZN, a->dt, (uint32_t)p * 32768u, k, n, 0);
  core_copy_ex(t, &cb);
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, p);
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, p);
  if (fix >= 0) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, fix);
  core_mmad(t, &c, &ca.dst, &cb.dst, m, k, n, init);
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_MTE1, p);
}

/* K (or N) strip [at, at + n) of an operand: rows of a transposed one, columns of the other. */
static struct core_tile strip(struct core_tile x, bool rows, uint32_t at, uint32_t n)
{
  return rows ? nz_rows(x, at, n) : nz_cols(x, at, n);
}

/* c (+)= op(A) x op(B) from L1 tiles through a ping-pong pair of L0A/L0B slots (32 KiB each):
 * in head-dimension chunks along N (columns of c) and along K where an operand is wider than a
 * slot holds; `fix` >= 0: first wait until FixPipe has read that L0C slot out. */
static void bwd_mm(struct core_tp *t, struct attn *a, struct core_tile asrc, bool at, struct core_tile bsrc,
                   bool bt, struct core_tile c, bool init, int fix)
{
  uint32_t m = at ? asrc.cols : asrc.rows, k = at ? asrc.rows : asrc.cols, n = bt ? bsrc.rows : bsrc.cols;
  uint32_t e = es(a->dt), nw = (uint64_t)k * n * e > 32768 ? DC : n;
  uint32_t kw = (uint64_t)m * k * e > 32768 || (uint64_t)k * nw * e > 32768 ? DC : k;
  for (uint32_t n0 = 0; n0 < n; n0 += nw) {
    uint32_t nn = n - n0 < nw ? n - n0 : nw;
    struct core_tile b = nw < n ? strip(bsrc, bt, n0, nn) : bsrc, cc = nw < n ? nz_cols(c, n0, nn) : c;
    for (uint32_t k0 = 0; k0 < k; k0 += kw) {
      uint32_t kk = k - k0 < kw ? k - k0 : kw;
      struct core_tile ak = kw < k ? strip(asrc, at, k0, kk) : asrc, bk = kw < k ? strip(b, !bt, k0, kk) : b;
      bwd_mm1(t, a, ak, at, bk, bt, cc, init && k0 == 0, n0 == 0 && k0 == 0 ? fix : -1);
    }
  }
}

/* FixPipe an L0C slot out to GM. */
static void bwd_out(struct core_tp *t, int x, struct core_tile c, struct core_tile g, float scale, bool atomic)
{
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, x);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, x);
  struct core_copy o = {.src = c, .dst = g, .scale = scale, .fb_scale = UINT64_MAX, .atomic_add = atomic};
  core_copy_ex(t, &o);
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, x);
}

/* Stage A of step s: Q_i, dO_i in; S and dP out to the workspace. */
static void bwd_aic_a(struct core_tp *t, struct attn *a, int u, uint32_t bb, uint32_t kvh, uint32_t j, uint32_t s,
                      uint32_t z)
{
  uint32_t h, i, x = s % a->nl1, w = s % 2;
  bwd_step(a, kvh, j, s, &h, &i);
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_QD(x));
  for (int which = 0; which < 2; which++) {
    uint64_t base = which ? a->dout : a->q;
    uint32_t dim = which ? a->Dv : a->D;
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt, base + bsnd(a, bb, i * a->qb, h, a->H, dim) * es(a->dt), a->qb,
                                  dim, a->H * dim);
    struct core_tile l = l1t(a, bl1_qd(a, x, which), a->qb, dim, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_QD(x));
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_QD(x));
  for (int which = 0; which < 2; which++) { /* S = Q K^T, dP = dO V^T */
    int xs = (int)(unit_of(t)->xc++ % 2);
    struct core_tile c = l0c(l0c_x(a, xs), a->qb, a->kb);
    uint32_t dim = which ? a->Dv : a->D;
    bwd_mm(t, a, l1t(a, bl1_qd(a, x, which), a->qb, dim, 0), false, l1t(a, bl1_kv(a, z, which), a->kb, dim, 0), true,
           c, true, xs);
    if (a->onchip) { /* each role's 64 rows straight into its UB buffer */
      uint32_t us = s % (uint32_t)a->ub.nbuf;
      core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, xs);
      core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, xs);
      for (uint32_t r = 0; r < 2; r++) {
        if (!which) core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_FIX, 2 * (int)r + (int)us);
        struct core_copy o = {.scale = which ? 1.0f : a->scale, .fb_scale = UINT64_MAX};
        o.src = l0c(l0c_x(a, xs) + r * a->hb * 16 * 4, a->hb, a->kb);
        o.src.ld = a->qb;
        o.dst = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, role_base(a, r) + a->ub.buf[us] + (uint32_t)which * a->hb * a->kb * 4,
                         a->hb, a->kb, 0);
        core_copy_ex(t, &o);
      }
      core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, xs);
      continue;
    }
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, bws(a, u, w, which ? W_DP : W_S), a->qb, a->kb, 0);
    bwd_out(t, xs, c, g, which ? 1.0f : a->scale, false);
  }
  for (uint32_t r = 0; r < 2; r++) {
    if (a->onchip)
      core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_V, 2 * (int)r + (int)(s % (uint32_t)a->ub.nbuf));
    else
      core_xset(t, CORE_PIPE_FIX, (enum core_sub)(CORE_SUB_AIV0 + r), BX_S(w));
  }
}

/* Stage B of step s: P, dS in; dV += P^T dO, dK += dS^T Q, dQ += dS K. */
static void bwd_aic_b(struct core_tp *t, struct attn *a, int u, uint32_t bb, uint32_t kvh, uint32_t j, uint32_t s,
                      uint32_t z)
{
  uint32_t h, i, x = s % a->nl1, y = s % a->nl1, w = s % 2;
  bwd_step(a, kvh, j, s, &h, &i);
  if (a->onchip) { /* the vector roles wrote P and dS into L1 */
    for (int r = 0; r < 2; r++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE1, r);
  } else {
    for (uint32_t r = 0; r < 2; r++) core_xwait(t, CORE_PIPE_MTE2, (enum core_sub)(CORE_SUB_AIV0 + r), BX_P(w));
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_PD(y));
    for (int which = 0; which < 2; which++) {
      struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt, bws(a, u, w, which ? W_DS : W_P), a->qb, a->kb, 0);
      struct core_tile l = l1t(a, bl1_pd(a, y, which), a->qb, a->kb, 0);
      core_copy(t, &l, &g);
    }
    core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_PD(y));
    core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_PD(y));
  }
  bool first = s == 0;
  /* dV += P^T dO_i; dK += dS^T Q_i (the block's first step waits for the last read-out) */
  bwd_mm(t, a, l1t(a, bl1_pd(a, y, 0), a->qb, a->kb, 0), true, l1t(a, bl1_qd(a, x, 1), a->qb, a->Dv, 0), false,
         l0c(L0C_DV, a->kb, a->Dv), first, first ? 2 : -1);
  bwd_mm(t, a, l1t(a, bl1_pd(a, y, 1), a->qb, a->kb, 0), true, l1t(a, bl1_qd(a, x, 0), a->qb, a->D, 0), false,
         l0c(l0c_dk(a), a->kb, a->D), first, -1);
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_QD(x)); /* Q_i, dO_i no longer needed */
  /* dQ_i += dS K_j, in pieces of the rows an L0C slot holds (two halves of 64 rows at 128 x 64) */
  uint32_t dqr = dq_rows(a);
  for (uint32_t half = 0; half < a->qb / dqr; half++) {
    int xs = (int)(unit_of(t)->xc++ % 2);
    struct core_tile ds = l1t(a, bl1_pd(a, y, 1) + half * dqr * 32, dqr, a->kb, a->qb);
    struct core_tile c = l0c(l0c_x(a, xs), dqr, a->D);
    bwd_mm(t, a, ds, false, l1t(a, bl1_kv(a, z, 0), a->kb, a->D, 0), false, c, true, xs);
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32,
                                  a->dq32 + bsnd(a, bb, i * a->qb + half * dqr, h, a->H, a->D) * 4, dqr, a->D, a->H * a->D);
    bwd_out(t, xs, c, g, 1.0f, true);
  }
  if (a->onchip)
    for (int r = 0; r < 2; r++) core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, 2 * r + (int)y);
  else
    core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_PD(y));
}

/* ------------------------------------------------------------------ backward: vector roles */

/* Event ids of role r: V -> MTE2 2r + buffer; MTE2 -> V the same; V <-> MTE3 id r. */

static void bwd_aiv_begin(struct core_tp *t, const struct attn *a, uint32_t r)
{
  const struct ub_map *m = &a->ub;
  uint32_t rb = role_base(a, r);
  for (int i = 0; i < m->nbuf; i++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 2 * (int)r + i);
    if (a->onchip) core_set_flag(t, CORE_PIPE_V, CORE_PIPE_FIX, 2 * (int)r + i);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  struct core_vec ni = vop(CORE_VEC_DUP, rb + m->ninf, 0, 0, 1);
  ni.scalar = -INFINITY;
  ni.mask[0] = 0xff;
  core_vec(t, &ni);
  if (a->causal) {
    struct core_tile gm = ops_tile(MEM_GM, CORE_ND, NPU_DT_UINT8, a->mask, 1, bwd_masks_bytes(a), 0);
    struct core_tile um = ops_tile(MEM_UB, CORE_ND, NPU_DT_UINT8, rb + m->mask, 1, bwd_masks_bytes(a), 0);
    core_copy(t, &um, &gm);
  }
  opts_load(t, a, rb + m->ramp, UINT64_MAX, 6 + (int)r);
}

static void bwd_aiv_end(struct core_tp *t, const struct attn *a, uint32_t r)
{
  for (int i = 0; i < a->ub.nbuf; i++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 2 * (int)r + i);
    if (a->onchip) core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_FIX, 2 * (int)r + i);
  }
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
}

/* P = exp(S - LSE), dS = P o (dP - D) / sqrt(dim) for role r's 64 rows of step s. */
static void bwd_aiv_step(struct core_tp *t, const struct attn *a, int u, uint32_t r, uint32_t bb, uint32_t kvh,
                         uint32_t j, uint32_t s)
{
  const struct ub_map *m = &a->ub;
  uint32_t rb = role_base(a, r), h, i, w = s % 2, us = s % (uint32_t)m->nbuf;
  bwd_step(a, kvh, j, s, &h, &i);
  uint64_t S = rb + m->buf[us], dP = S + a->hb * a->kb * 4, L = dP + a->hb * a->kb * 4, D = L + 256;
  uint64_t bc = rb + m->brcb;
  int ev = 2 * (int)r + (int)us;
  uint32_t row0 = i * a->qb + r * a->hb;
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ev);
  if (!a->onchip) {
    core_xwait(t, CORE_PIPE_MTE2, CORE_SUB_AIC, BX_S(w));
    for (int which = 0; which < 2; which++) {
      struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, bws(a, u, w, which ? W_DP : W_S) + r * a->hb * a->kb * 4,
                                    a->hb, a->kb, 0);
      struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, which ? dP : S, a->hb, a->kb, 0);
      core_copy(t, &l, &g);
    }
  }
  for (int which = 0; which < 2; which++) {
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, (which ? a->dd : a->lse) + lse_at(a, bb, h, row0), 1,
                                  a->hb, 0);
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, which ? D : L, 1, a->hb, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, ev);
  if (a->onchip) core_wait_flag(t, CORE_PIPE_FIX, CORE_PIPE_V, ev);
  if (a->alibi) { /* S + m_h c, LSE + m_h (row0 + r - col0): P = exp(S + m_h (j - i) - LSE) */
    float sl = slope_of(a, h);
    uint64_t sh = rb + m->cb + 512;
    alibi_cols(t, rb + m->ramp, rb + m->cb, S, a->hb, a->kb, 0, sl);
    struct core_vec av = vop_n(CORE_VEC_ADDS, sh, rb + m->ramp, 0, a->hb);
    av.scalar = (double)row0 - (double)j * a->kb;
    core_vec(t, &av);
    av = vop_n(CORE_VEC_MULS, sh, sh, 0, a->hb);
    av.scalar = sl;
    core_vec(t, &av);
    av = vop_n(CORE_VEC_ADD, L, L, sh, a->hb);
    core_vec(t, &av);
  }
  if (a->causal && j * a->kb + a->kb > row0 + 1) { /* keys after some query: the diagonal or all */
    int64_t o = (int64_t)row0 - (int64_t)j * a->kb; /* the mask variant of this offset (masks()) */
    apply_mask(t, m, S, rb + m->mask + var_of(o, a->hb, a->kb) * (a->hb * a->kb / 8), a->hb, a->kb);
  }
  if (a->W) { /* the window's edge: queries further than W - 1 past a key do not see it */
    int64_t o = (int64_t)row0 - (int64_t)j * a->kb - a->W;
    if (o >= (int64_t)a->kb) /* every row past the window: variant 0, all masked */
      apply_mask(t, m, S, rb + m->mask, a->hb, a->kb);
    else if (o > -(int64_t)a->hb) /* the complement of the variant of offset o */
      apply_mask(t, m, S, rb + m->mask + bwd_mask_bytes(a) + var_of(o, a->hb, a->kb) * (a->hb * a->kb / 8), a->hb,
                 a->kb);
  }
  brcb(t, bc, L, a->hb);
  rowwise(t, CORE_VEC_SUB, S, S, bc, a->hb, a->kb);
  struct core_vec v = vop(CORE_VEC_EXP, S, S, 0, (uint16_t)(a->hb * a->kb / 64));
  core_vec(t, &v);
  brcb(t, bc, D, a->hb);
  rowwise(t, CORE_VEC_SUB, dP, dP, bc, a->hb, a->kb);
  v = vop(CORE_VEC_MUL, dP, dP, S, (uint16_t)(a->hb * a->kb / 64));
  core_vec(t, &v);
  v = vop(CORE_VEC_MULS, dP, dP, 0, (uint16_t)(a->hb * a->kb / 64));
  v.scalar = a->scale;
  core_vec(t, &v);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  cast_out(t, a, rb + m->pb, S, a->hb, a->kb);
  cast_out(t, a, rb + m->ds, dP, a->hb, a->kb);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, ev);
  if (a->onchip) core_set_flag(t, CORE_PIPE_V, CORE_PIPE_FIX, ev);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, (int)r);
  if (a->onchip) { /* P and dS rows of this role into the cube role's L1 slot */
    uint32_t y = s % a->nl1;
    core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE3, 2 * (int)r + (int)y);
    for (int which = 0; which < 2; which++) {
      struct core_tile l = ops_tile(MEM_UB, CORE_ND, a->dt, rb + (which ? m->ds : m->pb), a->hb, a->kb, 0);
      struct core_tile d = l1t(a, bl1_pd(a, y, which) + r * a->hb * 32, a->hb, a->kb, a->qb);
      core_copy(t, &d, &l);
    }
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE1, (int)r);
    return;
  }
  for (int which = 0; which < 2; which++) {
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, a->dt, rb + (which ? m->ds : m->pb), a->hb, a->kb, 0);
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt,
                                  bws(a, u, w, which ? W_DS : W_P) + (uint64_t)r * a->hb * a->kb * es(a->dt), a->hb, a->kb, 0);
    core_copy(t, &g, &l);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, (int)r);
  core_xset(t, CORE_PIPE_MTE3, CORE_SUB_AIC, BX_P(w));
}

/* ------------------------------------------------------------------ backward: the kernels */

static void bwd_begin(struct core_tp *t, void *ctx)
{
  struct attn *a = ctx;
  *unit_of(t) = (struct attn_unit){0};
  core_select(t, CORE_SUB_AIC);
  bwd_aic_begin(t, a);
  for (uint32_t r = 0; r < 2; r++) {
    sel_aiv(t, r);
    bwd_aiv_begin(t, a, r);
  }
}

static void bwd_end(struct core_tp *t, void *ctx)
{
  struct attn *a = ctx;
  core_select(t, CORE_SUB_AIC);
  bwd_aic_end(t, a);
  for (uint32_t r = 0; r < 2; r++) {
    sel_aiv(t, r);
    bwd_aiv_end(t, a, r);
  }
}

/* One key/value block: K_j, V_j in; steps with the cube core one step ahead; dK, dV out. */
static void bwd_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct attn *a = ctx;
  int u = core_unit(t);
  uint32_t bb, kvh, j;
  bwd_decompose(a, b, &bb, &kvh, &j);
  uint32_t steps = a->group * bwd_nq(a, j), z = unit_of(t)->kv_slot++ % a->nkv;
  core_select(t, CORE_SUB_AIC);
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_KV(z));
  for (int which = 0; which < 2; which++) {
    uint64_t base = which ? a->v : a->k;
    uint32_t dim = which ? a->Dv : a->D;
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt, base + bsnd(a, bb, j * a->kb, kvh, a->KVH, dim) * es(a->dt),
                                  a->kb, dim, a->KVH * dim);
    struct core_tile l = l1t(a, bl1_kv(a, z, which), a->kb, dim, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_KV(z));
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, BE_KV(z));
  /* order per step: stage A, the vector roles, stage B of the step `lookb` before (on a coupled
   * core MTE2 then never holds a P load in front of the S load it depends on) */
  for (uint32_t s = 0; s < steps + a->lookb; s++) {
    if (s < steps) {
      core_select(t, CORE_SUB_AIC);
      bwd_aic_a(t, a, u, bb, kvh, j, s, z);
      for (uint32_t r = 0; r < 2; r++) {
        sel_aiv(t, r);
        bwd_aiv_step(t, a, u, r, bb, kvh, j, s);
      }
    }
    if (s >= a->lookb) {
      core_select(t, CORE_SUB_AIC);
      bwd_aic_b(t, a, u, bb, kvh, j, s - a->lookb, z);
    }
  }
  core_select(t, CORE_SUB_AIC);
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_MTE2, BE_KV(z));
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 2);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 2);
  for (int which = 0; which < 2; which++) {
    uint64_t base = which ? a->dk : a->dv;
    uint32_t dim = which ? a->D : a->Dv;
    struct core_copy o = {.src = l0c(which ? l0c_dk(a) : L0C_DV, a->kb, dim), .scale = 1.0f, .fb_scale = UINT64_MAX};
    o.dst = ops_tile(MEM_GM, CORE_ND, a->dt, base + bsnd(a, bb, j * a->kb, kvh, a->KVH, dim) * es(a->dt), a->kb, dim,
                     a->KVH * dim);
    core_copy_ex(t, &o);
  }
  core_set_flag(t, CORE_PIPE_FIX, CORE_PIPE_M, 2);
}

/* Preprocessing on the vector cores: D = rowsum(dO o O) for pre_rows rows of one head per block
 * (64; 32 above value head dimension 128). UB (pre_ub, for head dimension 128 and below at 64 rows):
 * dO and O in the input type at 0 and 16 KiB, as fp32 at 32 and 64 KiB, partial sums at 96 KiB,
 * D at 112 KiB. */
static uint32_t pre_rows(const struct attn *a)
{
  return a->Dv > 128 ? 32 : HALF;
}

enum { PRE_DO, PRE_O, PRE_FDO, PRE_FO, PRE_ACC, PRE_D, PRE_L, PRE_T, PRE_PS, PRE_SK, PRE_BC, PRE_END };

static uint32_t pre_ub(const struct attn *a, int which)
{
  uint32_t w = pre_rows(a) * (a->Dv > 128 ? 256u : 128u); /* elements of a row block, padded */
  uint32_t at[PRE_END + 1];
  at[PRE_DO] = 0;
  at[PRE_O] = w * es(a->dt);
  at[PRE_FDO] = 2 * w * es(a->dt);
  at[PRE_FO] = at[PRE_FDO] + w * 4;
  at[PRE_ACC] = at[PRE_FO] + w * 4;
  at[PRE_D] = at[PRE_ACC] + pre_rows(a) * 256;
  /* sinks: the LSE rows, exp(sink - LSE) D, its sum, the sinks; their head's broadcast */
  uint32_t sk = a->sinks ? 256 : 0;
  at[PRE_L] = at[PRE_D] + 256;
  at[PRE_T] = at[PRE_L] + sk;
  at[PRE_PS] = at[PRE_T] + sk;
  at[PRE_SK] = at[PRE_PS] + sk;
  at[PRE_BC] = at[PRE_SK] + (a->sinks ? (sk_bytes(a) + 255) / 256 * 256 : 0);
  at[PRE_END] = at[PRE_BC] + sk;
  return at[which];
}

static void pre_begin(struct core_tp *t, void *ctx)
{
  const struct attn *a = ctx;
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, 0);
  opts_load(t, a, UINT64_MAX, pre_ub(a, PRE_SK), 1);
}

static void pre_end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, 0);
}

static void pre_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct attn *a = ctx;
  uint32_t pr = pre_rows(a), chunks = a->S / pr, c = (uint32_t)(b % chunks), h = (uint32_t)(b / chunks % a->H);
  uint32_t bb = (uint32_t)(b / chunks / a->H), row0 = c * pr;
  uint32_t fdo = pre_ub(a, PRE_FDO), fo = pre_ub(a, PRE_FO), acc = pre_ub(a, PRE_ACC), dd = pre_ub(a, PRE_D);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
  for (int which = 0; which < 2; which++) {
    uint64_t base = which ? a->o : a->dout;
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, a->dt, base + bsnd(a, bb, row0, h, a->H, a->Dv) * es(a->dt), pr, a->Dv,
                                  a->H * a->Dv);
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, a->dt, pre_ub(a, which ? PRE_O : PRE_DO), pr, a->Dv, 0);
    core_copy(t, &l, &g);
  }
  if (a->sinks) { /* the rows' LSE */
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->lse + lse_at(a, bb, h, row0), 1, pr, 0);
    struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, pre_ub(a, PRE_L), 1, pr, 0);
    core_copy(t, &l, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  uint16_t reps = (uint16_t)(pr * a->Dv / 64);
  for (int which = 0; which < 2; which++) {
    struct core_vec v = vop(CORE_VEC_CAST, which ? fo : fdo, pre_ub(a, which ? PRE_O : PRE_DO), 0, reps);
    v.dtype = (uint8_t)a->dt;
    v.src0_rep = (uint16_t)(64 * es(a->dt) / 32);
    core_vec(t, &v);
  }
  uint32_t st = pre_ub(a, PRE_T), ps = pre_ub(a, PRE_PS);
  if (a->sinks) { /* sink_h - LSE_i, before the LSE buffer is free for the next block's load */
    uint64_t sb = sink_bcast(t, pre_ub(a, PRE_BC), pre_ub(a, PRE_SK), h);
    struct core_vec v = vop_n(CORE_VEC_SUB, st, sb, pre_ub(a, PRE_L), pr);
    v.src0_blk = v.src0_rep = 0;
    core_vec(t, &v);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, 0);
  struct core_vec v = vop(CORE_VEC_MUL, fdo, fdo, fo, reps);
  core_vec(t, &v);
  uint64_t src = fdo;
  for (uint32_t g = 1; g < a->Dv / 64; g++) { /* fold each row's 64-column groups into the first */
    v = vop(CORE_VEC_ADD, acc, g == 1 ? fdo : acc, fdo + g * 256u, (uint16_t)pr);
    if (g == 1) v.src0_rep = (uint16_t)(a->Dv * 4 / 32);
    v.src1_rep = (uint16_t)(a->Dv * 4 / 32);
    core_vec(t, &v);
    src = acc;
  }
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, 0);
  v = vop(CORE_VEC_REDUCE_SUM, dd, src, 0, (uint16_t)pr);
  core_vec(t, &v);
  if (a->sinks) { /* -sum_i exp(sink_h - LSE_i) D_i over the block's rows */
    v = vop_n(CORE_VEC_EXP, st, st, 0, pr);
    core_vec(t, &v);
    v = vop_n(CORE_VEC_MUL, st, st, dd, pr);
    core_vec(t, &v);
    v = vop_n(CORE_VEC_REDUCE_SUM, ps, st, 0, pr);
    core_vec(t, &v);
    v = vop_n(CORE_VEC_NEG, ps, ps, 0, 1);
    core_vec(t, &v);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  struct core_tile l = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, dd, 1, pr, 0);
  struct core_tile g = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->dd + lse_at(a, bb, h, row0), 1, pr, 0);
  core_copy(t, &g, &l);
  if (a->sinks) { /* dsink_h += the block's sum (zeroed before the kernel) */
    struct core_copy add = {.src = ops_tile(MEM_UB, CORE_ND, NPU_DT_FP32, ps, 1, 1, 0),
                            .dst = ops_tile(MEM_GM, CORE_ND, NPU_DT_FP32, a->dsink + (uint64_t)h * 4, 1, 1, 0),
                            .scale = 1.0f, .fb_scale = UINT64_MAX, .atomic_add = true};
    core_copy_ex(t, &add);
  }
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, 0);
}

/* ------------------------------------------------------------------ operator */

/* Block classes for the analytic fidelity (cores/analytic.c takes 0..255): blocks that see the
 * same number of key blocks (query blocks) take the same time; past 256 they share classes. */
#define CLASSES 256u

static uint32_t ub_fwd(struct ub_map *m, const struct attn *a, int nbuf, bool tight)
{
  uint32_t at = 0, es_ = es(a->dt);
  memset(m, 0, sizeof *m);
  m->nbuf = nbuf;
  for (int k = 0; k < nbuf; k++) m->buf[k] = take(&at, HALF * a->bc * 4);
  m->pb = take(&at, HALF * a->bc * es_); /* P; O too unless oj_held */
  m->o = take(&at, HALF * a->Dv * 4);
  at += 256; /* O_j starts 256 B past a bank-group boundary of O: O + O_j reads two groups */
  m->oj = take(&at, HALF * vchunk_w(a, 0) * 4); /* one head-dimension chunk of O_j */
  /* HALF x 64 fp32 fits in P's HALF x 128 input type; 64-column key blocks need none */
  m->t = a->bc == 64 ? 0 : tight ? m->pb : take(&at, HALF * 64 * 4);
  m->vec = take(&at, V_SLOTS * 256);
  m->mask = take(&at, fwd_mask_bytes(a));
  m->brcb = take(&at, HALF * 32);
  m->ninf = take(&at, 32);
  take_opts(m, a, true, &at);
  return m->size = at;
}

static uint32_t ub_bwd(struct ub_map *m, const struct attn *a, int nbuf)
{
  uint32_t at = 0, es_ = es(a->dt);
  memset(m, 0, sizeof *m);
  m->nbuf = nbuf;
  for (int k = 0; k < nbuf; k++) m->buf[k] = take(&at, 2 * a->hb * a->kb * 4 + 512);
  m->pb = take(&at, a->hb * a->kb * es_);
  m->ds = take(&at, a->hb * a->kb * es_);
  m->mask = take(&at, bwd_masks_bytes(a));
  m->brcb = take(&at, a->hb * 32);
  m->ninf = take(&at, 32);
  take_opts(m, a, false, &at); /* the backward's roles need no sinks */
  return m->size = at;
}

/* L1 bytes of the forward's tiling: Q, ns K/V slots and P (none when P goes to L0A). */
static uint64_t fwd_l1_bytes(const struct attn *a)
{
  return l1_p(a) + (a->rs ? 0 : a->br * a->bc * es(a->dt));
}

/* The forward's tiling with `halves` 64-row roles per query block (both on the core when it is
 * coupled) and the cube core at least min_look key blocks ahead: L1 holds Q, look + 1 K/V slots
 * and P; UB one map per role, double buffered if it can, else single, else with the half-row
 * scratch in P's buffer. False when nothing fits. Look 0 (S and O_j of a key block in turn,
 * one K/V slot: FlashAttention-2's single-stage K/V on GPUs whose shared memory holds no more)
 * is the last resort, for head dimensions above 128 on small L1s; key blocks of bc rows (BC,
 * else 64 where L1 holds no 128-row K/V slots). */
static bool fwd_tiling(struct attn *a, const struct arch_chip *chip, uint32_t halves, uint32_t min_look, uint32_t bc)
{
  a->bc = bc;
  uint64_t l1 = chip->buf[ARCH_BUF_L1].size_bytes, ub = chip->buf[ARCH_BUF_UB].size_bytes;
  uint32_t roles = a->coupled ? halves : 1;
  a->halves = halves;
  a->br = halves * HALF;
  uint32_t look;
  for (look = 3; look-- > min_look;) { /* as far ahead as L1 holds K/V slots for */
    a->look = look, a->ns = look + 1;
    if (fwd_l1_bytes(a) <= l1) break;
  }
  if (fwd_l1_bytes(a) > l1) return false;
  a->tight = false;
  if ((uint64_t)ub_fwd(&a->ub, a, 2, false) * roles <= ub || (uint64_t)ub_fwd(&a->ub, a, 1, false) * roles <= ub) return true;
  if (a->bc > 64 && 64 * 4 > a->bc * es(a->dt)) return false; /* the HALF x 64 fp32 scratch exceeds fp8's P */
  a->tight = true;
  return (uint64_t)ub_fwd(&a->ub, a, 1, true) * roles <= ub;
}

/* m with every UB address moved by `by` (role r's map on a coupled core; every address field of
 * struct ub_map is listed here). */
static struct ub_map shifted(const struct ub_map *m, uint32_t by)
{
  struct ub_map s = *m;
  for (int k = 0; k < 2; k++) s.buf[k] += by;
  s.pb += by, s.ds += by, s.o += by, s.oj += by, s.t += by, s.vec += by, s.mask += by, s.brcb += by, s.ninf += by;
  s.ramp += by, s.cb += by, s.sk += by;
  return s;
}

static int nofit(struct npu_diag *diag, const struct arch_chip *chip, const char *what, uint64_t need, uint64_t have)
{
  return npu_diag_set(diag, "command line", 0, "--dim",
                      "the attention tiling needs %llu bytes of %s, %s has %llu", (unsigned long long)need, what,
                      chip->name, (unsigned long long)have),
         NPU_ENOFIT;
}

/* The backward's tiling with qb query rows per step and kb key rows per block: L0C holds dV, dK
 * and two slots of qb x kb fp32; L1 Q, dO and P, dS double buffered if it can (then the cube core
 * runs a step ahead), K, V too if it can; UB the two roles' maps. False (diag set) when nothing
 * fits. */
static bool bwd_tiling(struct attn *a, const struct arch_chip *chip, uint32_t qb, uint32_t kb, struct npu_diag *diag)
{
  uint64_t l0c = chip->buf[ARCH_BUF_L0C].size_bytes, l1 = chip->buf[ARCH_BUF_L1].size_bytes;
  uint64_t ub = chip->buf[ARCH_BUF_UB].size_bytes;
  a->halves = 2;
  a->qb = qb, a->kb = kb, a->hb = qb / 2;
  if (l0c_x(a, 2) > l0c || dq_rows(a) * a->D * 4 > l0c_slot_bytes(a))
    return nofit(diag, chip, "L0C", l0c_x(a, 2), l0c), false;
  a->nl1 = a->nkv = 2;
  if (l1_bytes_bwd(a) > l1) a->nkv = 1;
  if (l1_bytes_bwd(a) > l1) a->nl1 = 1;
  if (l1_bytes_bwd(a) > l1) return nofit(diag, chip, "L1", l1_bytes_bwd(a), l1), false;
  a->lookb = a->nl1 == 2 ? 1 : 0;
  uint32_t roles = a->coupled ? 2 : 1;
  if (ub_bwd(&a->ub, a, 2) * roles > ub && ub_bwd(&a->ub, a, 1) * roles > ub)
    return nofit(diag, chip, "UB", a->ub.size * roles, ub), false;
  a->role_stride = a->ub.size;
  return true;
}

static int plan(void *p, const struct op_desc *d, const struct op_args *args, const struct arch_chip *chip,
                struct npu_diag *diag)
{
  struct attn *a = p;
  memset(a, 0, sizeof *a);
  a->B = (uint32_t)op_u(d, args, "batch");
  a->H = (uint32_t)op_u(d, args, "heads");
  a->KVH = (uint32_t)op_u(d, args, "kv_heads");
  if (!a->KVH) a->KVH = a->H;
  a->S = (uint32_t)op_u(d, args, "seq");
  a->D = (uint32_t)op_u(d, args, "dim");
  a->Dv = (uint32_t)op_u(d, args, "dim_v");
  if (!a->Dv) a->Dv = a->D;
  a->causal = op_u(d, args, "causal");
  uint64_t w = op_u(d, args, "window");
  a->dt = op_dtype(d, args, "dtype");
  a->bwd = op_u(d, args, "pass") == 1;
  a->alibi = op_u(d, args, "alibi");
  a->sinks = op_u(d, args, "sinks");
  a->coupled = chip->org != ARCH_ORG_SPLIT;
  a->onchip = a->coupled && chip->dma.path_bytes_per_cycle[ARCH_PATH_L0C_TO_UB] > 0 &&
              chip->dma.path_bytes_per_cycle[ARCH_PATH_UB_TO_L1] > 0;
  a->rs = !a->bwd && a->onchip && chip->dma.path_bytes_per_cycle[ARCH_PATH_UB_TO_L0A] > 0;
  if (a->dt != NPU_DT_BF16 && a->dt != NPU_DT_FP16 && a->dt != NPU_DT_FP8_E4M3)
    return npu_diag_set(diag, "command line", 0, "--dtype", "attention takes bf16, fp16 or fp8_e4m3, got %s",
                        npu_dtype_name(a->dt)), NPU_EINVAL;
  if (a->dt == NPU_DT_FP8_E4M3 && a->bwd)
    return npu_diag_set(diag, "command line", 0, "--dtype", "fp8 attention is forward only (FlashAttention-3's fp8 "
                        "kernel, for inference); the backward takes bf16 or fp16"), NPU_EINVAL;
  a->odt = a->dt == NPU_DT_FP8_E4M3 ? NPU_DT_BF16 : a->dt;
  if (a->H % a->KVH)
    return npu_diag_set(diag, "command line", 0, "--kv_heads", "%u query heads do not share %u key/value heads evenly", a->H, a->KVH), NPU_EINVAL;
  if (a->S % BC)
    return npu_diag_set(diag, "command line", 0, "--seq", "must be a multiple of the block size %u, got %u", BC, a->S), NPU_EINVAL;
  if (a->D % 64 || a->D > 256)
    return npu_diag_set(diag, "command line", 0, "--dim", "a multiple of 64 up to 256, got %u", a->D), NPU_EINVAL;
  if (a->Dv % 64 || a->Dv > 256)
    return npu_diag_set(diag, "command line", 0, "--dim_v", "a multiple of 64 up to 256, got %u", a->Dv), NPU_EINVAL;
  if (w && !a->causal)
    return npu_diag_set(diag, "command line", 0, "--window", "a sliding window needs --causal true"), NPU_EINVAL;
  if (w % BC)
    return npu_diag_set(diag, "command line", 0, "--window", "must be a multiple of %u, got %llu", BC,
                        (unsigned long long)w), NPU_EINVAL;
  a->W = w < a->S ? (uint32_t)w : 0; /* a window of the whole sequence is the causal mask */
  if (!a->coupled && chip->aiv_count != 2 * chip->aic_count)
    return npu_diag_set(diag, "command line", 0, "--arch", "this FlashAttention kernel is written for two vector cores per cube core (A2/A3/950) or coupled cores; %s has %d:%d", chip->name, chip->aic_count, chip->aiv_count), NPU_EUNSUPPORTED;
  if (chip->cube.macs_per_cycle[a->dt] == 0)
    return npu_diag_set(diag, "command line", 0, "--dtype", "%s has no %s cube input", chip->name, npu_dtype_name(a->dt)), NPU_EUNSUPPORTED;
  a->group = a->H / a->KVH;
  a->scale = (float)(1.0 / sqrt((double)a->D));
  uint32_t e = es(a->dt);
  if (chip->buf[ARCH_BUF_L0A].size_bytes < 65536 || chip->buf[ARCH_BUF_L0B].size_bytes < 65536 || chip->buf[ARCH_BUF_L0C].size_bytes < 131072)
    return nofit(diag, chip, "L0A/L0B/L0C", 65536, chip->buf[ARCH_BUF_L0A].size_bytes);
  if (!a->bwd) {
    bool fit = false;
    /* the cube a key block ahead, then not; 128-row key blocks, then 64 */
    for (uint32_t pass = 0; !fit && pass < 4; pass++) {
      uint32_t look = pass < 2 ? 1 : 0, bc = pass % 2 ? 64 : BC;
      fit = fwd_tiling(a, chip, 2, look, bc) || (a->coupled && fwd_tiling(a, chip, 1, look, bc));
    }
    if (!fit) {
      if (fwd_l1_bytes(a) > chip->buf[ARCH_BUF_L1].size_bytes)
        return nofit(diag, chip, "L1", fwd_l1_bytes(a), chip->buf[ARCH_BUF_L1].size_bytes);
      return nofit(diag, chip, "UB", a->ub.size * (a->coupled ? a->halves : 1), chip->buf[ARCH_BUF_UB].size_bytes);
    }
    a->role_stride = a->ub.size;
    for (uint32_t r = 0; r < 2; r++) a->fub[r] = shifted(&a->ub, role_base(a, r));
    a->qblocks = a->S / a->br;
    a->nblocks = (uint64_t)a->B * a->H * a->qblocks;
    a->ws_bytes = (uint64_t)a->ns * (a->br * a->bc * 4 + a->br * a->bc * e + (uint64_t)a->br * a->Dv * 4);
  } else {
    /* On coupled cores (GPU SMs) FlashAttention-3's backward tile where L0C holds it with the
     * cube core a step ahead: 64 query rows per step against 128-row key blocks, half the Q, dO
     * loads and dQ atomics per MAC of 128 x 64. Else, and on split chips (CANN's tiles), 128 x 64. */
    if (!a->coupled || !bwd_tiling(a, chip, 64, 128, diag) || a->nl1 < 2) {
      /* then, for head dimensions above 128: 32-row key blocks where a 128 KiB L0C holds no
       * 64-row dK and dV (910B), 64 x 64 where L1 holds no 128 query rows (A100) */
      static const uint32_t tiles[][2] = {{128, 64}, {128, 32}, {64, 64}};
      bool fit = false;
      for (size_t k = 0; !fit && k < sizeof tiles / sizeof tiles[0]; k++) {
        npu_diag_clear(diag);
        fit = bwd_tiling(a, chip, tiles[k][0], tiles[k][1], diag);
      }
      if (!fit) return NPU_ENOFIT;
    }
    if (chip->buf[ARCH_BUF_UB].size_bytes < pre_ub(a, PRE_END))
      return nofit(diag, chip, "UB", pre_ub(a, PRE_END), chip->buf[ARCH_BUF_UB].size_bytes);
    a->qblocks = a->S / a->qb;
    a->kblocks = a->S / a->kb;
    a->nblocks = (uint64_t)a->B * a->KVH * a->kblocks;
    a->ws_bytes = 2 * 2 * ((uint64_t)a->qb * a->kb * 4 + (uint64_t)a->qb * a->kb * e);
  }
  a->cores = a->nblocks < (uint64_t)chip->aic_count ? (int)a->nblocks : chip->aic_count;
  return 0;
}

/* A class scaled into 0 .. CLASSES - 1 when there are n > CLASSES of them (n: the largest class
 * + 1: the key blocks of the last query block, forward; the query blocks of the first key block,
 * backward; whole sequences without a causal mask too). */
static int scaled_class(uint32_t c, uint32_t n)
{
  return n <= CLASSES ? (int)c : (int)((uint64_t)c * CLASSES / n);
}

static int fwd_class_b(void *ctx, uint64_t b)
{
  const struct attn *a = ctx;
  return scaled_class((uint32_t)fwd_class(ctx, b), kv_blocks(a, a->qblocks - 1));
}

static int bwd_class_b(void *ctx, uint64_t b)
{
  const struct attn *a = ctx;
  return scaled_class((uint32_t)bwd_class(ctx, b), bwd_nq(a, 0));
}

/* The causal masks (var_bits): the forward's HALF x bc variants from fwd_var0, the backward's
 * hb x kb ones; with a window their complements after them. */
static struct op_tensor *masks(struct op_exec *x, const struct attn *a)
{
  uint8_t m[8192];
  memset(m, 0, sizeof m);
  uint32_t n = a->bwd ? bwd_mask_bytes(a) : fwd_mask_bytes(a) / (a->W ? 2 : 1);
  NPU_ASSERT(2 * n <= sizeof m);
  if (a->bwd)
    var_bits(m, 0, var_count(a->hb, a->kb), a->hb, a->kb);
  else
    var_bits(m, fwd_var0(a), fwd_nvar(a), HALF, a->bc);
  for (uint32_t i = 0; a->W && i < n; i++) m[n + i] = (uint8_t)~m[i]; /* the window's edges */
  return op_tensor_bytes(x, "mask", a->W ? 2 * n : n, m);
}

static void reference_fwd(const struct attn *a, const double *Q, const double *K, const double *V, const double *SK,
                          double *O, double *L);

static void setup(void *p, struct op_exec *x)
{
  struct attn *a = p;
  uint64_t qn = (uint64_t)a->B * a->S * a->H * a->D, kn = (uint64_t)a->B * a->S * a->KVH * a->D;
  uint64_t on = (uint64_t)a->B * a->S * a->H * a->Dv, vn = (uint64_t)a->B * a->S * a->KVH * a->Dv;
  uint64_t ln = (uint64_t)a->B * a->H * a->S;
  struct op_tensor *q = op_tensor(x, "q", a->dt, qn, OP_INIT_UNIFORM), *k = op_tensor(x, "k", a->dt, kn, OP_INIT_UNIFORM);
  struct op_tensor *v = op_tensor(x, "v", a->dt, vn, OP_INIT_UNIFORM);
  a->q = q->addr;
  a->k = k->addr;
  a->v = v->addr;
  struct op_tensor *o = op_tensor(x, "o", a->odt, on, OP_INIT_NONE), *lse = op_tensor(x, "lse", NPU_DT_FP32, ln, OP_INIT_NONE);
  a->o = o->addr;
  a->lse = lse->addr;
  a->mask = masks(x, a)->addr;
  if (a->alibi) {
    float ramp[128];
    for (int n = 0; n < 128; n++) ramp[n] = (float)n;
    a->ramp = op_tensor_bytes(x, "alibi_ramp", sizeof ramp, ramp)->addr;
  }
  struct op_tensor *sk = NULL;
  if (a->sinks) { /* learned logits in a realistic range: uniform in [-1, 2) */
    sk = op_tensor(x, "sinks", NPU_DT_FP32, a->H, OP_INIT_UNIFORM);
    for (uint32_t n = 0; sk->host && n < a->H; n++)
      fmt_encode(NPU_DT_FP32, sk->host, n, 1.5 * fmt_decode(NPU_DT_FP32, sk->host, n) + 0.5);
    a->sink = sk->addr;
  }
  struct op_tensor *ws = op_tensor_bytes(x, "workspace", a->ws_bytes * (uint64_t)a->cores, NULL);
  ws->scratch = true;
  a->ws = ws->addr;
  if (!a->bwd) {
    struct core_kernel kf = {.name = "flash_attention_fwd", .mode = CORE_MODE_MIX, .block_dim = a->cores,
                             .nblocks = a->nblocks, .ctx = a, .unit_begin = fwd_begin, .unit_end = fwd_end,
                             .block = fwd_block, .block_of = fwd_block_of, .block_class = fwd_class_b, .class_affine = true,
                             .unit_ctx_bytes = sizeof(struct attn_unit)};
    op_kernel(x, &kf);
    return;
  }
  /* the backward's inputs: dO, and O and LSE as the forward leaves them (computed on the host) */
  a->dout = op_tensor(x, "do", a->dt, on, OP_INIT_UNIFORM)->addr;
  if (op_functional(x)) {
    double *Q = op_decode(q), *K = op_decode(k), *V = op_decode(v), *SK = sk ? op_decode(sk) : NULL;
    double *RO = npu_xmalloc(on * sizeof *RO), *RL = npu_xmalloc(ln * sizeof *RL);
    reference_fwd(a, Q, K, V, SK, RO, RL);
    for (uint64_t n = 0; n < on; n++) fmt_encode(a->dt, o->host, n, RO[n]);
    for (uint64_t n = 0; n < ln; n++) fmt_encode(NPU_DT_FP32, lse->host, n, RL[n]);
    free(Q);
    free(K);
    free(V);
    free(SK);
    free(RO);
    free(RL);
  }
  a->dq = op_tensor(x, "dq", a->dt, qn, OP_INIT_NONE)->addr;
  a->dk = op_tensor(x, "dk", a->dt, kn, OP_INIT_NONE)->addr;
  a->dv = op_tensor(x, "dv", a->dt, vn, OP_INIT_NONE)->addr;
  a->dd = op_tensor(x, "d", NPU_DT_FP32, ln, OP_INIT_SCRATCH)->addr; /* rowsum(dO o O), between the kernels */
  a->dq32 = op_tensor(x, "dq32", NPU_DT_FP32, qn, OP_INIT_NONE)->addr;
  ops_fill(x, a->dq32, NPU_DT_FP32, qn, 0.0);
  if (a->sinks) { /* the sinks' gradient: atomic adds of the preprocessing kernel's blocks */
    a->dsink = op_tensor(x, "dsink", NPU_DT_FP32, a->H, OP_INIT_NONE)->addr;
    ops_fill(x, a->dsink, NPU_DT_FP32, a->H, 0.0);
  }
  const struct arch_chip *chip = op_chip(x);
  uint64_t pre_blocks = (uint64_t)a->B * a->H * (a->S / pre_rows(a));
  int vcores = chip->aiv_count < (int)pre_blocks ? chip->aiv_count : (int)pre_blocks;
  struct core_kernel kp = {.name = "flash_attention_bwd_pre", .mode = CORE_MODE_VECTOR, .block_dim = vcores,
                           .nblocks = pre_blocks, .ctx = a, .unit_begin = pre_begin, .unit_end = pre_end,
                           .block = pre_block};
  op_kernel(x, &kp);
  struct core_kernel kb = {.name = "flash_attention_bwd", .mode = CORE_MODE_MIX, .block_dim = a->cores,
                           .nblocks = a->nblocks, .ctx = a, .unit_begin = bwd_begin, .unit_end = bwd_end,
                           .block = bwd_block, .block_class = bwd_class_b, .class_affine = true,
                           .unit_ctx_bytes = sizeof(struct attn_unit)};
  op_kernel(x, &kb);
  ops_cast(x, a->dq32, NPU_DT_FP32, a->dq, a->dt, qn);
}

static double flops(const void *p)
{
  const struct attn *a = p;
  /* query-key pairs: S^2, S^2 / 2 causal, S W - W^2 / 2 in a window (as S^2 / 2 at W = S) */
  double pairs = a->W ? a->S * (double)a->W - a->W * (double)a->W / 2 : a->S * (double)a->S / (a->causal ? 2 : 1);
  double f = 2.0 * pairs * (a->D + a->Dv) * a->H * a->B; /* Q K^T and P V */
  return a->bwd ? 2.5 * f : f;
}

/* ALiBi's bias of query i and key j of head h (0 without ALiBi). */
static double ref_bias(const struct attn *a, uint32_t h, uint32_t i, uint32_t j)
{
  return a->alibi ? alibi_slope(a->H, h) * ((double)j - (double)i) : 0;
}

/* softmax(Q K^T / sqrt(D) + ALiBi's bias, the sink SK[h] an extra column when SK) V per (batch,
 * head) in double; fills O and LSE. */
static void reference_fwd(const struct attn *a, const double *Q, const double *K, const double *V, const double *SK,
                          double *O, double *L)
{
  double *s = npu_xmalloc(a->S * sizeof *s);
  for (uint32_t b = 0; b < a->B; b++)
    for (uint32_t h = 0; h < a->H; h++) {
      uint32_t kvh = h / a->group;
      for (uint32_t i = 0; i < a->S; i++) {
        const double *q = Q + bsnd(a, b, i, h, a->H, a->D);
        uint32_t n = a->causal ? i + 1 : a->S, j0 = a->W && i + 1 > a->W ? i + 1 - a->W : 0;
        double m = -INFINITY, l = 0;
        for (uint32_t j = j0; j < n; j++) {
          const double *k = K + bsnd(a, b, j, kvh, a->KVH, a->D);
          double dot = 0;
          for (uint32_t d = 0; d < a->D; d++) dot += q[d] * k[d];
          s[j] = dot / sqrt((double)a->D) + ref_bias(a, h, i, j);
          if (s[j] > m) m = s[j];
        }
        if (SK && SK[h] > m) m = SK[h];
        if (SK) l = exp(SK[h] - m); /* the sink's column: in the sum, no value */
        double *o = O + bsnd(a, b, i, h, a->H, a->Dv);
        memset(o, 0, a->Dv * sizeof *o);
        for (uint32_t j = j0; j < n; j++) {
          double p = exp(s[j] - m);
          l += p;
          const double *v = V + bsnd(a, b, j, kvh, a->KVH, a->Dv);
          for (uint32_t d = 0; d < a->Dv; d++) o[d] += p * v[d];
        }
        for (uint32_t d = 0; d < a->Dv; d++) o[d] /= l;
        L[((uint64_t)b * a->H + h) * a->S + i] = m + log(l);
      }
    }
  free(s);
}

/* Gradients in double from the inputs the kernel had (O as stored, the LSE of the forward); with
 * sinks SK, their gradient dSK[h] = -sum over the head's rows of exp(SK[h] - LSE_i) D_i. */
static void reference_bwd(const struct attn *a, const double *Q, const double *K, const double *V, const double *O,
                          const double *dO, const double *L, const double *SK, double *dQ, double *dK, double *dV,
                          double *dSK)
{
  uint64_t qn = (uint64_t)a->B * a->S * a->H * a->D, kn = (uint64_t)a->B * a->S * a->KVH * a->D;
  uint64_t vn = (uint64_t)a->B * a->S * a->KVH * a->Dv;
  memset(dQ, 0, qn * sizeof *dQ);
  memset(dK, 0, kn * sizeof *dK);
  memset(dV, 0, vn * sizeof *dV);
  if (SK) memset(dSK, 0, a->H * sizeof *dSK);
  double sc = 1.0 / sqrt((double)a->D);
  for (uint32_t b = 0; b < a->B; b++)
    for (uint32_t h = 0; h < a->H; h++) {
      uint32_t kvh = h / a->group;
      for (uint32_t i = 0; i < a->S; i++) {
        const double *q = Q + bsnd(a, b, i, h, a->H, a->D), *o = O + bsnd(a, b, i, h, a->H, a->Dv);
        const double *go = dO + bsnd(a, b, i, h, a->H, a->Dv);
        double Di = 0, Li = L[((uint64_t)b * a->H + h) * a->S + i];
        for (uint32_t d = 0; d < a->Dv; d++) Di += go[d] * o[d];
        if (SK) dSK[h] -= exp(SK[h] - Li) * Di;
        double *gq = dQ + bsnd(a, b, i, h, a->H, a->D);
        uint32_t n = a->causal ? i + 1 : a->S, j0 = a->W && i + 1 > a->W ? i + 1 - a->W : 0;
        for (uint32_t j = j0; j < n; j++) {
          const double *k = K + bsnd(a, b, j, kvh, a->KVH, a->D), *v = V + bsnd(a, b, j, kvh, a->KVH, a->Dv);
          double s = 0, dp = 0;
          for (uint32_t d = 0; d < a->D; d++) s += q[d] * k[d];
          for (uint32_t d = 0; d < a->Dv; d++) dp += go[d] * v[d];
          double pr = exp(s * sc + ref_bias(a, h, i, j) - Li), ds = pr * (dp - Di) * sc;
          double *gk = dK + bsnd(a, b, j, kvh, a->KVH, a->D), *gv = dV + bsnd(a, b, j, kvh, a->KVH, a->Dv);
          for (uint32_t d = 0; d < a->D; d++) {
            gq[d] += ds * k[d];
            gk[d] += ds * q[d];
          }
          for (uint32_t d = 0; d < a->Dv; d++) gv[d] += pr * go[d];
        }
      }
    }
}

static double max_abs(const double *x, uint64_t n)
{
  double m = 0;
  for (uint64_t i = 0; i < n; i++)
    if (fabs(x[i]) > m) m = fabs(x[i]);
  return m;
}

/*
 * Tolerances. Forward: P is rounded to the input type before P V (as the kernel must feed the
 * cube) and O once at the end: 2 ulps of the input type at |O| < 1 (fp8 inputs: of fp8, whose
 * P carries 3 mantissa bits; O is bf16); the LSE 1e-4. Backward: P
 * and dS are rounded to the input type before the gradient matmuls, dK and dV once at the end:
 * 4 ulps of the input type relative to the largest gradient element of the tensor (errors of
 * rounded terms add up over the key or query blocks).
 */
static bool check(void *p, struct op_exec *x, double *max_err, char *summary, size_t n)
{
  struct attn *a = p;
  /* half an ulp at 1 of the input type (P's): the unit roundoff */
  double eps = a->dt == NPU_DT_BF16 ? 1.0 / 256 : a->dt == NPU_DT_FP8_E4M3 ? 1.0 / 16 : 1.0 / 2048;
  uint64_t qn = (uint64_t)a->B * a->S * a->H * a->D, kn = (uint64_t)a->B * a->S * a->KVH * a->D;
  uint64_t on = (uint64_t)a->B * a->S * a->H * a->Dv, vn = (uint64_t)a->B * a->S * a->KVH * a->Dv;
  uint64_t ln = (uint64_t)a->B * a->H * a->S;
  double *Q = op_decode(op_find_tensor(x, "q")), *K = op_decode(op_find_tensor(x, "k"));
  double *V = op_decode(op_find_tensor(x, "v")), *O = op_decode(op_find_tensor(x, "o"));
  double *L = op_decode(op_find_tensor(x, "lse"));
  double *SK = a->sinks ? op_decode(op_find_tensor(x, "sinks")) : NULL;
  if (!a->bwd) {
    double *RO = npu_xmalloc(on * sizeof *RO), *RL = npu_xmalloc(ln * sizeof *RL);
    reference_fwd(a, Q, K, V, SK, RO, RL);
    double eo = op_compare(O, RO, on, 4 * eps, 0), el = op_compare(L, RL, ln, 1e-4, 1e-5);
    *max_err = eo > el ? eo : el;
    snprintf(summary, n, "O worst %.3g, LSE worst %.3g of tolerance (O atol %.3g; LSE atol 1e-4)", eo, el, 4 * eps);
    free(RO);
    free(RL);
  } else {
    double *dO = op_decode(op_find_tensor(x, "do"));
    double *gq = op_decode(op_find_tensor(x, "dq")), *gk = op_decode(op_find_tensor(x, "dk"));
    double *gv = op_decode(op_find_tensor(x, "dv"));
    double *rq = npu_xmalloc(qn * sizeof *rq), *rk = npu_xmalloc(kn * sizeof *rk), *rv = npu_xmalloc(vn * sizeof *rv);
    double *rs = npu_xmalloc(a->H * sizeof *rs);
    reference_bwd(a, Q, K, V, O, dO, L, SK, rq, rk, rv, rs);
    double tq = 8 * eps * max_abs(rq, qn), tk = 8 * eps * max_abs(rk, kn), tv = 8 * eps * max_abs(rv, vn);
    double eq = op_compare(gq, rq, qn, tq, 0), ek = op_compare(gk, rk, kn, tk, 0), ev = op_compare(gv, rv, vn, tv, 0);
    *max_err = eq > ek ? eq : ek;
    if (ev > *max_err) *max_err = ev;
    int at = snprintf(summary, n, "dQ %.3g, dK %.3g, dV %.3g of tolerance (8 unit roundoffs x the largest element: %.3g, "
                      "%.3g, %.3g)", eq, ek, ev, tq, tk, tv);
    if (a->sinks) { /* fp32 throughout: 1e-4 of the largest */
      double *gs = op_decode(op_find_tensor(x, "dsink")), ts = 1e-4 * max_abs(rs, a->H);
      double es_ = op_compare(gs, rs, a->H, ts, 1e-4);
      if (es_ > *max_err) *max_err = es_;
      if (at >= 0 && (size_t)at < n) snprintf(summary + at, n - (size_t)at, ", dsink %.3g (atol %.3g, rtol 1e-4)", es_, ts);
      free(gs);
    }
    free(dO);
    free(gq);
    free(gk);
    free(gv);
    free(rq);
    free(rk);
    free(rv);
    free(rs);
  }
  free(SK);
  free(Q);
  free(K);
  free(V);
  free(O);
  free(L);
  return *max_err <= 1;
}

/* The backward: this operator's own backward pass. */
static int bwd(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  op_call_choice(&out[0], "pass", "bwd");
  grad[0] = OP_GRAD_INPUT;
  return 1;
}

const struct op_desc op_flash_attention = {
    .name = "flash_attention",
    .summary = "FlashAttention forward/backward: QK^T and PV on the cube, online softmax on the vector cores",
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .plan_size = sizeof(struct attn),
    .plan = plan,
    .setup = setup,
    .flops = flops,
    .check = check,
    .bwd = {OP_BWD_KERNEL, "the same call with pass=bwd (the FlashAttention backward, recomputing P)", NULL, bwd},
};
