/*
 * vec.h - vector instructions over dense UB ranges, the first layer above core_vec (cores/isa.h)
 * that every vector kernel writes with; part of the public kernel API (include/npusim/).
 *
 * An instruction covers repeats of 256 bytes (8 blocks of 32); these helpers cut n elements
 * into full repeats, at most the chip's repeat_max per instruction, and one masked repeat for
 * the rest, as Ascend C's level-2 calls (Add(dst, a, b, n)) do over the level-0 ones. Operands
 * are dense and advance by their own repeat strides; the fp32 forms are what the built-in
 * vector operators compute in (bf16 has no vector arithmetic).
 */
#ifndef NPUSIM_OPS_VEC_H
#define NPUSIM_OPS_VEC_H

#include <stdint.h>

#include "common/dtype.h"
#include "cores/isa.h"
#include "cores/kernel.h"

/* ------------------------------------------------------------------ chip */

/* Vector cores a VECTOR launch can use. */
static inline int vx_cores(const struct arch_chip *c)
{
  return c->org == ARCH_ORG_SPLIT ? c->aiv_count : c->aic_count;
}

/* UB bytes of one vector core. */
static inline uint64_t vx_ub_bytes(const struct arch_chip *c)
{
  return c->buf[ARCH_BUF_UB].size_bytes;
}

/* Launch units for nblocks blocks: every vector core, or fewer when there are fewer blocks. */
static inline int vx_dim(const struct arch_chip *chip, uint64_t nblocks)
{
  int c = vx_cores(chip);
  return nblocks < (uint64_t)c ? (int)nblocks : c;
}

/* ------------------------------------------------------------------ instructions */

#define VX_REP 64u        /* fp32 elements per repeat */
/* [A] scalar cycles to read one index from the UB, form the address and issue the indexed copy
 * it feeds (a gathered row, a cache block): an assumption, no microbenchmark yet. */
#define VX_GATHER_ADDR_CYCLES 4.0
#define VX_REP_BYTES 256u /* bytes per repeat */

/* Bytes per element of a type of at least 8 bits. */
static inline uint32_t vx_es(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

/* A vector instruction of op on dtype: full mask, dense blocks and repeats. */
static inline struct core_vec vx_v(enum core_vec_op op, enum npu_dtype dt)
{
  return (struct core_vec){.op = (uint8_t)op, .dtype = (uint8_t)dt, .dst_dtype = (uint8_t)dt, .repeat = 1,
                           .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = 8,
                           .src1_rep = 8, .mask = {~0ull, ~0ull}};
}

/* Mask of the first n elements of a repeat. */
static inline void vx_mask(struct core_vec *v, uint32_t n)
{
  v->mask[0] = n >= 64 ? ~0ull : (1ull << n) - 1;
  v->mask[1] = n >= 128 ? ~0ull : n > 64 ? (1ull << (n - 64)) - 1 : 0;
}

/*
 * Issue v over n elements, per elements to a repeat: full repeats in instructions of at most
 * repeat_max, then one masked repeat for the rest. Each operand advances by its own repeat
 * stride; v's addresses are the first repeat's.
 */
static inline void vx_issue(struct core_tp *t, struct core_vec v, uint64_t n, uint32_t per)
{
  uint64_t rmax = (uint64_t)core_chip(t)->vector.repeat_max;
  uint64_t full = n / per, rem = n % per;
  while (full) {
    uint64_t r = full < rmax ? full : rmax;
    v.repeat = (uint16_t)r;
    vx_mask(&v, per);
    core_vec(t, &v);
    v.dst += r * v.dst_rep * 32;
    v.src0 += r * v.src0_rep * 32;
    v.src1 += r * v.src1_rep * 32;
    full -= r;
  }
  if (rem) {
    v.repeat = 1;
    vx_mask(&v, (uint32_t)rem);
    core_vec(t, &v);
  }
}

/* dst = a op b over n dense fp32 elements (add sub mul div max min). */
static inline void vx_bin(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t a, uint64_t b, uint64_t n)
{
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = a;
  v.src1 = b;
  vx_issue(t, v, n, VX_REP);
}

/* dst = a op s over n dense fp32 elements (adds muls maxs mins). */
static inline void vx_sc(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t a, double s, uint64_t n)
{
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = a;
  v.scalar = s;
  vx_issue(t, v, n, VX_REP);
}

/* dst = a op (the fp32 scalar at UB address ub, read when the instruction runs: Ascend C's
 * GetValue after a V -> S sync, then Muls / Adds) over n dense fp32 elements (adds muls maxs mins). */
static inline void vx_sc_ub(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t a, uint64_t ub, uint64_t n)
{
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = a;
  v.scalar_from_ub = true;
  v.scalar_ub = ub;
  vx_issue(t, v, n, VX_REP);
}

/* dst = op(a) over n dense fp32 elements (exp ln recip sqrt rsqrt abs neg copy). */
static inline void vx_un(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t a, uint64_t n)
{
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = a;
  vx_issue(t, v, n, VX_REP);
}

/* dst = value over n dense elements of dt. */
static inline void vx_dup(struct core_tp *t, enum npu_dtype dt, uint64_t dst, double value, uint64_t n)
{
  struct core_vec v = vx_v(CORE_VEC_DUP, dt);
  v.dst = dst;
  v.scalar = value;
  vx_issue(t, v, n, 256 / vx_es(dt));
}

/* n dense elements from (src, st) to (dst, dt), rounded to nearest even; a copy when the types
 * agree, nothing when the ranges are the same. */
static inline void vx_cast(struct core_tp *t, uint64_t dst, enum npu_dtype dt, uint64_t src, enum npu_dtype st,
                           uint64_t n)
{
  if (dt == st && dst == src) return;
  uint32_t is = vx_es(st), os = vx_es(dt);
  uint32_t per = 256 / (is > os ? is : os);
  struct core_vec v = vx_v(dt == st ? CORE_VEC_COPY : CORE_VEC_CAST, st);
  v.dst_dtype = (uint8_t)dt;
  v.dst = dst;
  v.src0 = src;
  v.dst_rep = (uint16_t)(per * os / 32);
  v.src0_rep = (uint16_t)(per * is / 32);
  vx_issue(t, v, n, per);
}

/*
 * dst[0] = the sum (CORE_VEC_REDUCE_SUM) or maximum (CORE_VEC_REDUCE_MAX) of n dense fp32 at src,
 * as Ascend C's level-2 ReduceSum / ReduceMax: whole repeats folded pairwise with ADD / MAX
 * (ceil(log2) passes, in place: src is overwritten), the tail folded into the first repeat, then
 * one reduction of the last repeat. dst is 32-byte aligned UB.
 */
static inline void vx_reduce_n(struct core_tp *t, enum core_vec_op op, uint64_t dst, uint64_t src, uint64_t n)
{
  enum core_vec_op fold = op == CORE_VEC_REDUCE_MAX ? CORE_VEC_MAX : CORE_VEC_ADD;
  uint64_t nrep = n / VX_REP, rem = n % VX_REP;
  while (nrep > 1) {
    uint64_t half = nrep / 2;
    vx_bin(t, fold, src, src, src + half * VX_REP_BYTES, half * VX_REP);
    if (nrep % 2) vx_bin(t, fold, src, src, src + (nrep - 1) * VX_REP_BYTES, VX_REP);
    nrep = half;
  }
  if (rem && n >= VX_REP) vx_bin(t, fold, src, src, src + n / VX_REP * VX_REP_BYTES, rem);
  struct core_vec v = vx_v(op, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = n >= VX_REP ? src : src + n / VX_REP * VX_REP_BYTES;
  vx_mask(&v, (uint32_t)(n >= VX_REP ? VX_REP : rem));
  core_vec(t, &v);
}

/* Row 0 of a dense [rows x cols] fp32 matrix at m becomes the column sums (fold CORE_VEC_ADD)
 * or maxima (CORE_VEC_MAX): rows folded pairwise, in place, ceil(log2 rows) passes. */
static inline void vx_fold_rows(struct core_tp *t, enum core_vec_op fold, uint64_t m, uint32_t rows, uint32_t cols)
{
  uint64_t rb = (uint64_t)cols * 4;
  while (rows > 1) {
    uint32_t half = rows / 2;
    vx_bin(t, fold, m, m, m + half * rb, (uint64_t)half * cols);
    if (rows % 2) vx_bin(t, fold, m, m, m + (rows - 1) * rb, cols);
    rows = half;
  }
}

/* Per-row statistics (dense fp32, 8 per block) broadcast to one 32-byte block per row. */
static inline void vx_brcb(struct core_tp *t, uint64_t dst, uint64_t src, uint32_t rows)
{
  struct core_vec v = vx_v(CORE_VEC_BRCB, NPU_DT_FP32);
  v.dst = dst;
  v.src0 = src;
  v.src0_rep = 1;
  v.dst_rep = 8;
  vx_issue(t, v, (rows + 7ull) / 8 * 8, 8);
}

/* ------------------------------------------------------------------ GM <-> UB */

/* A row-major (ND) tile of rows x cols elements of dt at addr in space, row stride ld. */
static inline struct core_tile vx_nd(enum mem_space space, enum npu_dtype dt, uint64_t addr, uint32_t rows,
                                     uint32_t cols, uint32_t ld)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .ld = ld, .space = (uint8_t)space,
                            .layout = (uint8_t)CORE_ND, .dtype = (uint8_t)dt};
}

/* GM [rows x cols] (row stride gm_ld elements) -> UB (row stride ub_ld elements). */
static inline void vx_load(struct core_tp *t, uint64_t ub, uint64_t gm, enum npu_dtype dt, uint32_t rows,
                           uint32_t cols, uint64_t gm_ld, uint32_t ub_ld)
{
  struct core_tile g = vx_nd(MEM_GM, dt, gm, rows, cols, (uint32_t)gm_ld);
  struct core_tile u = vx_nd(MEM_UB, dt, ub, rows, cols, ub_ld);
  if (rows == 1) g.ld = u.ld = cols;
  core_copy(t, &u, &g);
}

/* UB [rows x cols] (row stride ub_ld) -> GM (row stride gm_ld). */
static inline void vx_store(struct core_tp *t, uint64_t gm, uint64_t ub, enum npu_dtype dt, uint32_t rows,
                            uint32_t cols, uint64_t gm_ld, uint32_t ub_ld)
{
  struct core_tile g = vx_nd(MEM_GM, dt, gm, rows, cols, (uint32_t)gm_ld);
  struct core_tile u = vx_nd(MEM_UB, dt, ub, rows, cols, ub_ld);
  if (rows == 1) g.ld = u.ld = cols;
  core_copy(t, &g, &u);
}

#endif
