/*
 * vecops_int.h - helpers shared by the vector-core operators (norm.c, softmax.c, swiglu.c,
 * rope.c, cross_entropy.c, adamw.c, quant.c), and only by them.
 *
 * What they provide, all in Ascend C level-0 terms (cores/isa.h):
 *   - vector instructions over a dense UB range, cut into full repeats of at most repeat_max
 *     and a masked tail (vx_issue and the vx_bin / vx_sc / vx_un / vx_dup / vx_cast wrappers);
 *   - row-structured fp32 tiles: an op applied to rows x cols with a second operand that is a
 *     full tile, one per-row broadcast block (from Brcb) or one row shared by every row (gamma),
 *     issued with repeats over rows or over columns, whichever needs fewer instructions
 *     (vx_map2);
 *   - per-row reductions (sum or max) to a dense fp32 vector: a pairwise tree of whole repeats
 *     down to 64 lanes per row, then one whole-repeat reduction per row (vx_rowred), so that the
 *     per-row statistics of a tile are dense and are broadcast back with one Brcb;
 *   - the slot protocol of a load -> compute -> store pipeline in which a tile's outputs are
 *     written back into its own input slot: MTE2 waits for the slot's previous store
 *     (MTE3 -> MTE2), V for the load (MTE2 -> V), MTE3 for the results (V -> MTE3);
 *   - an online log-sum-exp step over a chunk of rows (vx_online_lse: softmax, cross entropy);
 *   - GM <-> UB tile copies, the row tiling planner (vx_plan_rows), per-dtype tolerances;
 *   - bank-aware placement of an operator's UB buffers (vx_lay_*): each operator declares its
 *     buffers and its main vector passes, and the placement minimises their UB bank-conflict
 *     cycles under the executor's own rule (memory/ub.h): two sources in different halves of the
 *     bank groups, a destination in another bank (64 KiB region on 910B, 128 KiB on 950).
 *
 * Work tiles are fp32 (bf16 has no vector arithmetic; fp16 inputs are widened too, so every
 * dtype shares one code path and one accuracy); inputs and outputs are cast at the ends.
 * Per-row scalars (max, sum, rstd) are computed densely for all rows of a tile and broadcast
 * with Brcb, never read back by the scalar unit, so no V -> S synchronisation stalls the pipes.
 *
 * Size: ~900 lines of inline tile helpers (queues, casts, reductions, row plans) that the vector
 * operators share; the public kernel API of the operator-developer issue will take its stable
 * part.
 */
#ifndef NPUSIM_OPS_VECOPS_INT_H
#define NPUSIM_OPS_VECOPS_INT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"
#include "memory/ub.h"
#include "ops/ops_int.h"
#include "ops/vec.h"

#define VX_NOADDR UINT64_MAX /* "no buffer" for optional UB scratch arguments */
#define VX_RED_GROUP 248u /* rows per dense-output reduction instruction (<= 255, a multiple of 8
                             so that the next dense output stays 32-byte aligned) */

/* Flag ids of the slot protocol (one per slot) and of operator-specific flows. */
#define VX_SLOTS_MAX 4
#define VX_ID_INIT 8      /* unit_begin loads (MTE2 -> V) */
#define VX_ID_AUX 9       /* first id free for an operator's own flows */

/* ------------------------------------------------------------------ chip */

/* Whether the chip converts to and from fp8 (the 950 generation): taken from its cube, whose fp8
 * inputs come with the vector conversions that produce them. */
static inline bool vx_has_fp8(const struct arch_chip *c)
{
  return c->cube.macs_per_cycle[NPU_DT_FP8_E4M3] > 0;
}

static inline uint64_t vx_min64(uint64_t a, uint64_t b)
{
  return a < b ? a : b;
}

/* ------------------------------------------------------------------ per-unit state */

/* One launch unit's emission state, the launch's unit context (core_unit_ctx): every vector
 * operator's kernels declare .unit_ctx_bytes = sizeof(struct vx_unit). */
struct vx_unit {
  uint32_t stage; /* tiles the unit has started: the next one takes slot stage % slots */
};

/* The unit's state. */
static inline struct vx_unit *vx_unit(struct core_tp *t)
{
  return core_unit_ctx(t);
}

/* ------------------------------------------------------------------ row-structured tiles */

enum vx_kind {
  VX_FULL, /* a rows x cols tile with row stride row_bytes */
  VX_ROWB, /* one 32-byte block per row (from vx_brcb), 32 bytes apart */
  VX_COLV, /* one row of cols elements shared by every row (gamma, beta, cos) */
  VX_ONE,  /* one 32-byte block shared by every element (a tile-wide scalar) */
};

struct vx_opd {
  uint64_t addr;
  uint32_t row_bytes; /* VX_FULL: row stride (a multiple of 32) */
  uint8_t kind;       /* enum vx_kind */
};

static inline struct vx_opd vx_full(uint64_t addr, uint32_t row_bytes)
{
  return (struct vx_opd){addr, row_bytes, VX_FULL};
}

static inline struct vx_opd vx_rowb(uint64_t addr)
{
  return (struct vx_opd){addr, 32, VX_ROWB};
}

static inline struct vx_opd vx_colv(uint64_t addr)
{
  return (struct vx_opd){addr, 0, VX_COLV};
}

static inline struct vx_opd vx_one(uint64_t addr)
{
  return (struct vx_opd){addr, 0, VX_ONE};
}

/* Address, block stride and repeat stride of an operand at (row r, 64-column chunk k), for
 * repeats running over rows (by_rows) or over column chunks. */
static inline void vx__opd_at(const struct vx_opd *o, uint32_t r, uint32_t k, bool by_rows, uint64_t *addr,
                              uint16_t *blk, uint16_t *rep)
{
  switch (o->kind) {
  case VX_FULL:
    *addr = o->addr + (uint64_t)r * o->row_bytes + (uint64_t)k * VX_REP_BYTES;
    *blk = 1;
    *rep = (uint16_t)(by_rows ? o->row_bytes / 32 : 8);
    break;
  case VX_ROWB:
    *addr = o->addr + (uint64_t)r * 32;
    *blk = 0;
    *rep = (uint16_t)(by_rows ? 1 : 0);
    break;
  case VX_COLV:
    *addr = o->addr + (uint64_t)k * VX_REP_BYTES;
    *blk = 1;
    *rep = (uint16_t)(by_rows ? 0 : 8);
    break;
  default:
    *addr = o->addr;
    *blk = 0;
    *rep = 0;
  }
}

/*
 * dst = a op b (b unused by unary and scalar ops) over rows x cols fp32 elements, row by row
 * (repeats over 64-column chunks) or chunk by chunk (repeats over rows), whichever issues fewer
 * instructions. Masked-off columns past cols keep their destination value.
 */
static inline void vx_map2(struct core_tp *t, struct core_vec tmpl, struct vx_opd d, struct vx_opd a,
                           struct vx_opd b, uint32_t rows, uint32_t cols)
{
  uint32_t nk = ops_ceil(cols, VX_REP), rem = cols % VX_REP;
  uint32_t rmax = (uint32_t)core_chip(t)->vector.repeat_max;
  bool strides_ok = d.row_bytes / 32 <= UINT16_MAX && a.row_bytes / 32 <= UINT16_MAX && b.row_bytes / 32 <= UINT16_MAX;
  bool by_rows = rows > 1 && strides_ok && (uint64_t)nk * ops_ceil(rows, rmax) < (uint64_t)rows * ops_ceil(nk, rmax) + (rem ? rows : 0);
  struct core_vec v = tmpl;
  if (by_rows) {
    for (uint32_t k = 0; k < nk; k++) {
      vx_mask(&v, k == nk - 1 && rem ? rem : VX_REP);
      for (uint32_t r0 = 0; r0 < rows; r0 += rmax) {
        v.repeat = (uint16_t)(rows - r0 < rmax ? rows - r0 : rmax);
        vx__opd_at(&d, r0, k, true, &v.dst, &v.dst_blk, &v.dst_rep);
        vx__opd_at(&a, r0, k, true, &v.src0, &v.src0_blk, &v.src0_rep);
        vx__opd_at(&b, r0, k, true, &v.src1, &v.src1_blk, &v.src1_rep);
        core_vec(t, &v);
      }
    }
    return;
  }
  for (uint32_t r = 0; r < rows; r++) {
    vx__opd_at(&d, r, 0, false, &v.dst, &v.dst_blk, &v.dst_rep);
    vx__opd_at(&a, r, 0, false, &v.src0, &v.src0_blk, &v.src0_rep);
    vx__opd_at(&b, r, 0, false, &v.src1, &v.src1_blk, &v.src1_rep);
    vx_issue(t, v, cols, VX_REP);
  }
}

/* dst = a op b for rows x cols fp32 tiles (binary ops). */
static inline void vx_rows(struct core_tp *t, enum core_vec_op op, struct vx_opd d, struct vx_opd a,
                           struct vx_opd b, uint32_t rows, uint32_t cols)
{
  vx_map2(t, vx_v(op, NPU_DT_FP32), d, a, b, rows, cols);
}

/* The whole-repeat reduction matching an elementwise op. */
static inline enum core_vec_op vx_reduce_of(enum core_vec_op op)
{
  return op == CORE_VEC_MAX ? CORE_VEC_REDUCE_MAX : CORE_VEC_REDUCE_SUM;
}

/* out[i] (dense, 32-byte aligned) = reduction of the first `lanes` elements of each of n
 * repeats starting at src, src_rep blocks apart. */
static inline void vx_reduce(struct core_tp *t, enum core_vec_op op, uint64_t out, uint64_t src, uint32_t src_rep,
                             uint32_t lanes, uint32_t n)
{
  struct core_vec v = vx_v(vx_reduce_of(op), NPU_DT_FP32);
  v.src0_rep = (uint16_t)src_rep;
  vx_mask(&v, lanes);
  for (uint32_t i = 0; i < n; i += VX_RED_GROUP) {
    v.repeat = (uint16_t)(n - i < VX_RED_GROUP ? n - i : VX_RED_GROUP);
    v.dst = out + (uint64_t)i * 4;
    v.src0 = src + (uint64_t)i * src_rep * 32;
    core_vec(t, &v);
  }
}

/*
 * One row of cols fp32 at x folded to 64 lanes at acc (op ADD or MAX) by a pairwise tree of
 * whole repeats: the first level writes scratch s (ceil(cols / 128) repeats; it may be x itself
 * when x may be destroyed), later levels alternate between s2 (half that) and s, or stay in s
 * when s2 is VX_NOADDR. Returns the lanes of acc that hold data (cols when cols < 64, else 64).
 */
static inline uint32_t vx_fold_row(struct core_tp *t, enum core_vec_op op, uint64_t acc, uint64_t x,
                                   uint32_t cols, uint64_t s, uint64_t s2)
{
  uint32_t nf = cols / VX_REP, rem = cols % VX_REP, m;
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  if (nf == 0) { /* one partial repeat */
    vx_un(t, CORE_VEC_COPY, acc, x, rem);
    return rem;
  }
  if (nf == 1 && !rem) {
    vx_un(t, CORE_VEC_COPY, acc, x, VX_REP);
    return VX_REP;
  }
  if (nf == 2 && !rem) {
    vx_bin(t, op, acc, x, x + VX_REP_BYTES, VX_REP);
    return VX_REP;
  }
  uint64_t src = x, dst = s;
  if (nf >= 2) { /* dst[j] = src[2j] op src[2j+1] */
    m = nf / 2;
    v.src0 = src;
    v.src1 = src + VX_REP_BYTES;
    v.dst = dst;
    v.src0_rep = v.src1_rep = 16;
    vx_issue(t, v, (uint64_t)m * VX_REP, VX_REP);
  } else {
    m = 1;
    vx_un(t, CORE_VEC_COPY, dst, src, VX_REP);
  }
  if (nf % 2 && nf >= 2) vx_bin(t, op, dst, dst, src + (uint64_t)(nf - 1) * VX_REP_BYTES, VX_REP);
  if (rem) vx_bin(t, op, dst, dst, src + (uint64_t)nf * VX_REP_BYTES, rem);
  while (m > 2) {
    src = dst;
    dst = s2 != VX_NOADDR ? (src == s ? s2 : s) : src;
    if (m % 2) vx_bin(t, op, src, src, src + (uint64_t)(m - 1) * VX_REP_BYTES, VX_REP);
    m /= 2;
    v = vx_v(op, NPU_DT_FP32);
    v.src0 = src;
    v.src1 = src + VX_REP_BYTES;
    v.dst = dst;
    v.src0_rep = v.src1_rep = 16;
    vx_issue(t, v, (uint64_t)m * VX_REP, VX_REP);
  }
  if (m == 2)
    vx_bin(t, op, acc, dst, dst + VX_REP_BYTES, VX_REP);
  else
    vx_un(t, CORE_VEC_COPY, acc, dst, VX_REP);
  return VX_REP;
}

/*
 * out[r] (dense fp32, 32-byte aligned) = sum or max (op ADD or MAX) of x[r][0..cols) for
 * r < rows; x fp32 with row stride row_bytes (a multiple of 256). acc: rows x 256 bytes; s, s2:
 * fold scratch as for vx_fold_row (s may be x when x may be destroyed; s2 may be VX_NOADDR).
 */
static inline void vx_rowred(struct core_tp *t, enum core_vec_op op, uint64_t out, uint64_t x, uint32_t row_bytes,
                             uint32_t rows, uint32_t cols, uint64_t acc, uint64_t s, uint64_t s2)
{
  uint32_t nk = ops_ceil(cols, VX_REP);
  if (nk == 1) {
    vx_reduce(t, op, out, x, row_bytes / 32, cols, rows);
    return;
  }
  if (rows >= 8 && nk <= 8 && row_bytes / 32 <= UINT16_MAX) {
    /* column by column, repeats over rows: acc[r] = x[r][chunk 0] op x[r][chunk 1] op ... */
    struct vx_opd A = vx_full(acc, VX_REP_BYTES), X = vx_full(x, row_bytes);
    uint32_t k = 1;
    if (cols >= 2 * VX_REP) {
      vx_rows(t, op, A, X, vx_full(x + VX_REP_BYTES, row_bytes), rows, VX_REP);
      k = 2;
    } else {
      vx_map2(t, vx_v(CORE_VEC_COPY, NPU_DT_FP32), A, X, A, rows, VX_REP);
    }
    for (; k < nk; k++) {
      uint32_t n = k == nk - 1 && cols % VX_REP ? cols % VX_REP : VX_REP;
      vx_rows(t, op, A, A, vx_full(x + (uint64_t)k * VX_REP_BYTES, row_bytes), rows, n);
    }
  } else {
    for (uint32_t r = 0; r < rows; r++)
      vx_fold_row(t, op, acc + (uint64_t)r * VX_REP_BYTES, x + (uint64_t)r * row_bytes, cols, s, s2);
  }
  vx_reduce(t, op, out, acc, 8, VX_REP, rows);
}

/*
 * One chunk of an online log-sum-exp (Milakov & Gimelshein 2018) over nr rows: F holds the
 * chunk (fp32, cols columns, row stride rb); the running max M and sum S (dense, nr each) are
 * initialised by the first chunk and then updated: M' = max(M, max F), S = S e^(M - M') +
 * sum e^(F - M'). F is destroyed (the sums' fold writes it). Scratch: W (like F; it ends holding
 * e^(F - M')), s2 (the folds' second scratch, may be VX_NOADDR), acc (nr x 256), cm and tmp (dense nr),
 * bc (nr Brcb blocks; it ends holding M').
 */
static inline void vx_online_lse(struct core_tp *t, uint64_t F, uint64_t W, uint64_t s2, uint32_t rb, uint32_t nr,
                                 uint32_t cols, uint64_t M, uint64_t S, uint64_t cm, uint64_t tmp, uint64_t acc,
                                 uint64_t bc, bool first)
{
  vx_rowred(t, CORE_VEC_MAX, cm, F, rb, nr, cols, acc, W, s2);
  if (first) {
    vx_un(t, CORE_VEC_COPY, M, cm, nr);
  } else {
    vx_bin(t, CORE_VEC_MAX, tmp, M, cm, nr);
    vx_bin(t, CORE_VEC_SUB, cm, M, tmp, nr);
    vx_un(t, CORE_VEC_EXP, cm, cm, nr);
    vx_bin(t, CORE_VEC_MUL, S, S, cm, nr);
    vx_un(t, CORE_VEC_COPY, M, tmp, nr);
  }
  vx_brcb(t, bc, M, nr);
  vx_rows(t, CORE_VEC_SUB, vx_full(W, rb), vx_full(F, rb), vx_rowb(bc), nr, cols);
  vx_un(t, CORE_VEC_EXP, W, W, (uint64_t)nr * (rb / 4));
  vx_rowred(t, CORE_VEC_ADD, cm, W, rb, nr, cols, acc, F, s2);
  if (first)
    vx_un(t, CORE_VEC_COPY, S, cm, nr);
  else
    vx_bin(t, CORE_VEC_ADD, S, S, cm, nr);
}

/* ------------------------------------------------------------------ slots and copies */

/*
 * The slot protocol: a tile is loaded into slot s (MTE2), computed in place (V) and stored from
 * the same slot (MTE3); the next load into s waits for that store. A tile without a store still
 * passes through MTE3 (vx_store_begin / vx_store_end with nothing between) to free its slot.
 */
static inline void vx_slots_begin(struct core_tp *t, int nslots)
{
  for (int s = 0; s < nslots; s++) core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, s);
}

static inline void vx_slots_end(struct core_tp *t, int nslots)
{
  for (int s = 0; s < nslots; s++) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, s);
}

static inline void vx_load_begin(struct core_tp *t, int s)
{
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, s);
}

static inline void vx_load_end(struct core_tp *t, int s)
{
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, s);
}

static inline void vx_compute_begin(struct core_tp *t, int s)
{
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, s);
}

static inline void vx_compute_end(struct core_tp *t, int s)
{
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, s);
}

static inline void vx_store_begin(struct core_tp *t, int s)
{
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, s);
}

static inline void vx_store_end(struct core_tp *t, int s)
{
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, s);
}

/* ------------------------------------------------------------------ UB layout */

/* A bump allocator over the UB for an operator's small buffers (per-row vectors, masks), placed
 * after the bank-aware placement of its big ones. */
struct vx_ub {
  uint64_t off;
};

static inline uint64_t vx_take(struct vx_ub *u, uint64_t bytes)
{
  uint64_t at = ops_roundup(u->off, 32);
  u->off = at + ops_roundup(bytes, 32);
  return at;
}

/* ------------------------------------------------------------------ bank-aware placement */

/*
 * Placement of an operator's UB buffers that minimises the UB bank-conflict cycles (memory/ub.h,
 * the executor's own rule) of its main vector passes. The slots come first, at fixed
 * addresses; the other buffers are placed after them in the order and with the 256-byte skews
 * (which half of the 16 bank groups a buffer's first blocks fall in) that cost least, every
 * permutation and skew tried (at most VX_LB_MAX buffers). A pass names its destination and
 * sources as buffers (>= 0), slot inputs (VX_SLOTIN(k), costed for every slot) or nothing.
 * Like the executor, the cost looks at a pass's first repeat.
 */
#define VX_LB_MAX 5
#define VX_LP_MAX 24
#define VX_NOBUF (-1)
#define VX_SLOTIN(k) (-10 - (k))

struct vx_layout {
  int n;                           /* permuted buffers */
  uint64_t bytes[VX_LB_MAX];
  bool one[VX_LB_MAX];             /* read as one broadcast block (Brcb output, a scalar) */
  uint64_t addr[VX_LB_MAX];        /* result */
  int nslots;
  uint64_t slot[VX_SLOTS_MAX];     /* slot bases (fixed) */
  uint64_t in_stride;              /* slot input k at slot + k * in_stride */
  int np;
  struct { int d, a, b; double w; } p[VX_LP_MAX];
  uint64_t end;                    /* first byte after the placed buffers */
};

static inline int vx_lay_buf(struct vx_layout *l, uint64_t bytes, bool one)
{
  NPU_ASSERT(l->n < VX_LB_MAX);
  l->bytes[l->n] = bytes;
  l->one[l->n] = one;
  return l->n++;
}

/* A pass dst = a op b repeated about w times per tile. */
static inline void vx_lay_pass(struct vx_layout *l, int d, int a, int b, double w)
{
  NPU_ASSERT(l->np < VX_LP_MAX);
  l->p[l->np].d = d;
  l->p[l->np].a = a;
  l->p[l->np].b = b;
  l->p[l->np].w = w;
  l->np++;
}

/* Bytes the placed buffers may need after `base` whatever their order and skews (for bank-group
 * periods up to 512 B). */
static inline uint64_t vx_lay_bound(const struct vx_layout *l)
{
  uint64_t b = 0;
  for (int i = 0; i < l->n; i++) b += ops_roundup(l->bytes[i], 512) + 512;
  return b;
}

static inline int vx__lay_blocks(const struct vx_layout *l, const uint64_t *addr, int op, int slot, uint64_t *out)
{
  if (op == VX_NOBUF) return 0;
  uint64_t a;
  bool one = false;
  if (op <= VX_SLOTIN(0)) {
    a = l->slot[slot] + (uint64_t)(VX_SLOTIN(0) - op) * l->in_stride;
  } else {
    a = addr[op];
    one = l->one[op];
  }
  int n = one ? 1 : 8;
  for (int b = 0; b < n; b++) out[b] = a + 32ull * (uint64_t)b;
  return n;
}

/* Weighted bank cycles of the passes whose operands are all placed (placed[i] for buffers). */
static inline double vx__lay_cost(const struct vx_layout *l, const struct arch_chip *chip, const uint64_t *addr,
                                  const bool *placed)
{
  double c = 0;
  int ns = l->nslots > 0 ? l->nslots : 1;
  for (int i = 0; i < l->np; i++) {
    int ops[3] = {l->p[i].d, l->p[i].a, l->p[i].b};
    bool ready = true, uses_slot = false;
    for (int k = 0; k < 3; k++) {
      if (ops[k] >= 0 && !placed[ops[k]]) ready = false;
      if (ops[k] <= VX_SLOTIN(0)) uses_slot = true;
    }
    if (!ready) continue;
    int nss = uses_slot ? ns : 1;
    for (int s = 0; s < nss; s++) {
      uint64_t rd[16], wr[8];
      int nr = vx__lay_blocks(l, addr, l->p[i].a, s, rd);
      nr += vx__lay_blocks(l, addr, l->p[i].b, s, rd + nr);
      int nw = vx__lay_blocks(l, addr, l->p[i].d, s, wr);
      c += l->p[i].w / nss * mem_ub_repeat_cycles(chip, rd, nr, wr, nw);
    }
  }
  return c;
}

/* The UB's bank-group period (32 bytes x groups: 512 B on 910B, 256 B on 950) and its region
 * (bank bytes x groups: 64 KiB on 910B, 128 KiB on 950): a buffer half a period past a period
 * boundary reads the other half of the groups; one in another region uses other banks. */
static inline uint64_t vx_period(const struct arch_chip *chip)
{
  return 32ull * (uint64_t)(chip->ub.bank_groups > 0 ? chip->ub.bank_groups : 16);
}

static inline uint64_t vx_region(const struct arch_chip *chip)
{
  uint64_t r = chip->ub.bank_bytes * (uint64_t)(chip->ub.bank_groups > 0 ? chip->ub.bank_groups : 16);
  return r ? r : 65536;
}

/* Where buffer bytes go after `off` for placement option o: the next period boundary, half a
 * period past it, the next region boundary, or half a period past that. */
static inline uint64_t vx__lay_at(const struct arch_chip *chip, uint64_t off, int o)
{
  uint64_t period = vx_period(chip), half = period / 2;
  uint64_t at = o < 2 ? ops_roundup(off, period) : ops_roundup(off, vx_region(chip));
  return at + (o % 2 ? half : 0);
}

/*
 * Place the buffers from `base` within `limit` bytes of UB. For every order of the buffers each
 * buffer in turn takes the placement option (vx__lay_at) that costs least over the passes it
 * completes; the order whose placement costs least overall wins (then the one that ends first).
 * Returns the modelled conflict cost (extra cycles over one per repeat, weighted).
 */
static inline double vx_lay_solve(struct vx_layout *l, const struct arch_chip *chip, uint64_t base, uint64_t limit)
{
  int n = l->n, perm[VX_LB_MAX];
  for (int i = 0; i < n; i++) perm[i] = i;
  double best = INFINITY, floor_cost = 0;
  for (int i = 0; i < l->np; i++) floor_cost += l->p[i].w;
  uint64_t best_addr[VX_LB_MAX] = {0}, best_end = UINT64_MAX;
  for (;;) {
    uint64_t addr[VX_LB_MAX] = {0}, off = base;
    bool placed[VX_LB_MAX] = {false}, ok = true;
    for (int k = 0; k < n && ok; k++) {
      int i = perm[k];
      double bc = INFINITY;
      uint64_t ba = 0;
      for (int o = 0; o < 4; o++) {
        uint64_t at = vx__lay_at(chip, off, o);
        if (at + ops_roundup(l->bytes[i], 32) > limit) continue;
        addr[i] = at;
        placed[i] = true;
        double c = vx__lay_cost(l, chip, addr, placed);
        placed[i] = false;
        if (c < bc - 1e-9) {
          bc = c;
          ba = at;
        }
      }
      if (bc == INFINITY) {
        ok = false;
        break;
      }
      addr[i] = ba;
      placed[i] = true;
      off = ba + ops_roundup(l->bytes[i], 32);
    }
    if (ok) {
      double c = vx__lay_cost(l, chip, addr, placed);
      if (c < best - 1e-9 || (c < best + 1e-9 && off < best_end)) {
        best = c;
        best_end = off;
        memcpy(best_addr, addr, sizeof addr);
      }
    }
    /* next permutation (lexicographic) */
    int i = n - 2;
    while (i >= 0 && perm[i] > perm[i + 1]) i--;
    if (i < 0) break;
    int j = n - 1;
    while (perm[j] < perm[i]) j--;
    int tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) {
      tmp = perm[a];
      perm[a] = perm[b];
      perm[b] = tmp;
    }
  }
  if (best == INFINITY) { /* nothing fits with region jumps: pack tightly */
    uint64_t off = base;
    for (int i = 0; i < n; i++) {
      best_addr[i] = ops_roundup(off, vx_period(chip));
      off = best_addr[i] + ops_roundup(l->bytes[i], 32);
    }
    best_end = off;
  }
  memcpy(l->addr, best_addr, sizeof best_addr);
  l->end = best_end;
  return best < INFINITY ? best - floor_cost : 0;
}

/* Slots of nin inputs of `in_bytes` each from UB address 0, each input half a bank-group period
 * past the previous one; returns their end. */
static inline uint64_t vx_lay_slots(struct vx_layout *l, const struct arch_chip *chip, int nslots, int nin,
                                    uint64_t in_bytes)
{
  l->nslots = nslots;
  l->in_stride = ops_roundup(in_bytes, 512) + vx_period(chip) / 2;
  uint64_t off = 0;
  for (int s = 0; s < nslots; s++) {
    l->slot[s] = off;
    off = ops_roundup(off + l->in_stride * (uint64_t)(nin - 1) + in_bytes, 512);
  }
  return off;
}

/* ------------------------------------------------------------------ row tiling */

/*
 * The tiling of a row operator: tiles of R whole rows, or (chunked) one row cut into chunks of
 * C columns that the kernel walks in one or more passes. rs is the UB row stride in elements (C
 * rounded up to a whole fp32 repeat), shared by the input types and the fp32 work tiles so that
 * a cast over a whole tile keeps every element in its row and column.
 */
struct vx_rowplan {
  uint32_t R;        /* rows per tile */
  uint32_t C;        /* columns per tile (the row length unless chunked) */
  uint32_t rs;       /* UB row stride, elements: C rounded up to 64 */
  uint32_t nchunk;   /* chunks per row (1 unless chunked) */
  int slots;         /* load/compute/store slots (2 or 3) */
  bool chunked;
  uint64_t tiles;    /* row tiles: ceil(rows / R), or rows when chunked */
  uint64_t ub_bytes; /* UB the layout needs */
};

/* UB bytes an operator's layout needs for R rows of row stride rs with `slots` slots. */
typedef uint64_t (*vx_need_fn)(const void *ctx, uint32_t R, uint32_t rs, int slots, bool chunked);

static inline uint32_t vx__fit_rows(vx_need_fn need, const void *ctx, uint32_t rs, int slots, uint32_t cap,
                                    uint64_t ub)
{
  uint32_t lo = 0, hi = cap;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo + 1) / 2;
    if (need(ctx, mid, rs, slots, false) <= ub) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/*
 * Choose a row tiling: whole rows when one fits, R rows per tile aiming at 32 KiB of input per
 * tile without leaving cores idle, three slots when they fit at half that size, else two;
 * otherwise one row in chunks of C columns (a multiple of 64, balanced over the row), as large as
 * fits with three slots (two when that allows more than twice the size). tile_rows / tile_cols (0: automatic) force a choice; one that does not fit
 * is NPU_ENOFIT naming the option. `what` names the row length option (--hidden, --cols).
 */
static inline int vx_plan_rows(struct vx_rowplan *p, uint64_t rows, uint32_t cols, uint32_t es_in, int cores,
                               uint64_t ub, uint64_t tile_rows, uint64_t tile_cols, vx_need_fn need,
                               const void *ctx, const char *what, struct npu_diag *diag)
{
  memset(p, 0, sizeof *p);
  if (tile_cols && tile_cols < cols && tile_cols % VX_REP)
    return npu_diag_set(diag, "command line", 0, "--tile_cols", "a chunk of a row must be a multiple of 64 columns, got %llu",
                        (unsigned long long)tile_cols), NPU_EINVAL;
  if (tile_rows > 65535)
    return npu_diag_set(diag, "command line", 0, "--tile_rows", "at most 65535 rows per tile, got %llu",
                        (unsigned long long)tile_rows), NPU_EINVAL;
  bool chunked = tile_cols && tile_cols < cols;
  if (chunked && tile_rows > 1)
    return npu_diag_set(diag, "command line", 0, "--tile_rows", "a chunked row (--tile_cols %llu < %u) is one row per tile",
                        (unsigned long long)tile_cols, cols), NPU_EINVAL;
  uint32_t rs = (uint32_t)ops_roundup(cols, VX_REP);
  if (!chunked) {
    uint64_t per_core = (rows + (uint64_t)cores - 1) / (uint64_t)cores;
    uint64_t target = 32768 / ((uint64_t)rs * es_in);
    if (target < 1) target = 1;
    /* tiles of about the target, balanced over a core's rows: per_core rows in
     * ceil(per_core / target) equal tiles, so no core runs one more, smaller wave than the
     * others (65 rows a core in 64-row tiles took a second wave on two cores) */
    uint64_t per_tile = per_core <= target ? per_core : (per_core + (per_core + target - 1) / target - 1) /
                                                             ((per_core + target - 1) / target);
    uint32_t want = (uint32_t)vx_min64(per_tile, vx_min64(rows, 4096));
    if (tile_rows) want = (uint32_t)tile_rows;
    uint32_t r3 = vx__fit_rows(need, ctx, rs, 3, want, ub), r2 = vx__fit_rows(need, ctx, rs, 2, want, ub);
    if (tile_rows && r2 < want) {
      return npu_diag_set(diag, "command line", 0, "--tile_rows",
                          "tiling %u rows x %u columns does not fit: UB needs %llu bytes, has %llu", want, cols,
                          (unsigned long long)need(ctx, want, rs, 2, false), (unsigned long long)ub), NPU_ENOFIT;
    }
    if (r2 >= 1) {
      bool three = r3 >= 1 && 2 * r3 >= want;
      p->R = three ? r3 : r2;
      p->slots = three ? 3 : 2;
      p->C = cols;
      p->rs = rs;
      p->nchunk = 1;
      p->tiles = (rows + p->R - 1) / p->R;
      p->ub_bytes = need(ctx, p->R, rs, p->slots, false);
      return 0;
    }
    if (tile_cols >= cols)
      return npu_diag_set(diag, "command line", 0, "--tile_cols",
                          "a whole row of %u columns does not fit: UB needs %llu bytes, has %llu", cols,
                          (unsigned long long)need(ctx, 1, rs, 2, false), (unsigned long long)ub), NPU_ENOFIT;
  }
  uint32_t C;
  if (tile_cols) {
    C = (uint32_t)tile_cols;
    if (need(ctx, 1, C, 2, true) > ub)
      return npu_diag_set(diag, "command line", 0, "--tile_cols",
                          "tiling 1 row x %u columns does not fit: UB needs %llu bytes, has %llu", C,
                          (unsigned long long)need(ctx, 1, C, 2, true), (unsigned long long)ub), NPU_ENOFIT;
  } else {
    /* the largest chunk with three slots (a chunk's load and its GM latency then hide behind two
     * chunks of compute), unless two slots allow more than twice the size */
    uint32_t fit[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
      uint32_t lo = 0, hi = (uint32_t)vx_min64(rs / VX_REP, 1024);
      while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (need(ctx, 1, mid * VX_REP, 3 - k, true) <= ub) lo = mid; else hi = mid - 1;
      }
      fit[k] = lo;
    }
    if (!fit[1])
      return npu_diag_set(diag, "command line", 0, what, "not even 64 columns of a row fit in the UB (%llu bytes)",
                          (unsigned long long)ub), NPU_ENOFIT;
    uint32_t lo = 2 * fit[0] >= fit[1] ? fit[0] : fit[1];
    uint32_t n = ops_ceil(cols, (uint64_t)lo * VX_REP);
    C = (uint32_t)ops_roundup(ops_ceil(cols, n), VX_REP);
  }
  p->R = 1;
  p->C = C;
  p->rs = C;
  p->nchunk = ops_ceil(cols, C);
  p->slots = need(ctx, 1, C, 3, true) <= ub ? 3 : 2;
  p->chunked = true;
  p->tiles = rows;
  p->ub_bytes = need(ctx, 1, C, p->slots, true);
  return 0;
}

/* ------------------------------------------------------------------ checks */

/* One unit in the last place of the element type of an output (0 for fp32 outputs is not
 * wanted: fp32 gets its own tolerance). */
static inline double vx_ulp(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP16: return 1.0 / 1024;
  case NPU_DT_BF16: return 1.0 / 128;
  default: return 1.0 / (1 << 23);
  }
}

/* Whether dt is one of the operators' storage types fp16, bf16, fp32. */
static inline bool vx_float_io(enum npu_dtype dt)
{
  return dt == NPU_DT_FP16 || dt == NPU_DT_BF16 || dt == NPU_DT_FP32;
}

/* Refuse a storage type other than fp16 / bf16 / fp32, naming the option. */
static inline int vx_check_io(enum npu_dtype dt, const char *opt, struct npu_diag *diag)
{
  if (vx_float_io(dt)) return 0;
  return npu_diag_set(diag, "command line", 0, opt, "%s is not supported here (fp16, bf16 or fp32)",
                      npu_dtype_name(dt)), NPU_EUNSUPPORTED;
}

/*
 * The arguments every row operator reads the same way: `rows`, the row length (the parameter
 * called `cols_name`: "cols", "hidden", "vocab"; at most 2^24) and `dtype`, checked as an
 * input/output type of the vector unit, with its element size. 0 or NPU_EINVAL with diag naming
 * the option.
 */
static inline int vx_row_args(const struct op_desc *d, const struct op_args *a, const char *cols_name,
                              uint64_t *rows, uint32_t *cols, enum npu_dtype *dt, uint32_t *es,
                              struct npu_diag *diag)
{
  *rows = op_u(d, a, "rows");
  *dt = op_dtype(d, a, "dtype");
  uint64_t c = op_u(d, a, cols_name);
  if (c > (1u << 24))
    return npu_diag_set(diag, "command line", 0, NULL, "--%s: at most 16777216, got %llu", cols_name,
                        (unsigned long long)c), NPU_EINVAL;
  *cols = (uint32_t)c;
  int rc = vx_check_io(*dt, "--dtype", diag);
  if (rc) return rc;
  *es = vx_es(*dt);
  return 0;
}

#endif
