/*
 * moe_int.h - helpers shared by the mixture-of-experts routing operators (moe_gating.c,
 * moe_permute.c, moe_unpermute.c), and only by them.
 *
 * What they provide:
 *   - a bump allocator for the UB with a bank-group phase: every buffer starts on a 512-byte
 *     boundary (bank group 0 of the 16 groups of 32-byte rows) or 256 bytes past one (group 8),
 *     so that an op reading one buffer and writing (or also reading) another of the other phase
 *     touches disjoint bank groups in every repeat (memory/ub.h; Ascend C best practice "avoid
 *     UB bank conflicts");
 *   - Ascend C level-0 vector instructions over dense UB ranges, cut into repeats of at most
 *     repeat_max with a masked tail (moe_vrun), casts (moe_vcast), and element masks;
 *   - the routing that permute / unpermute take as input, generated on the host from the
 *     execution's seeded generator: k distinct experts per token, uniform or Zipf-skewed
 *     (moe_route), and the stable counting sort that defines the permuted order (moe_sort).
 */
#ifndef NPUSIM_OPS_MOE_INT_H
#define NPUSIM_OPS_MOE_INT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "ops/ops_int.h"

#define MOE_RED_CHUNK 248 /* repeats per dense-output reduction (<= 255, a multiple of 8 so the
                             next chunk's output stays 32-byte aligned for 32-bit elements) */

/* ------------------------------------------------------------------ chip */

/* Vector cores a VECTOR launch can use. */
static inline int moe_cores(const struct arch_chip *c)
{
  return c->org == ARCH_ORG_SPLIT ? c->aiv_count : c->aic_count;
}

static inline uint64_t moe_ub_bytes(const struct arch_chip *c)
{
  return c->buf[ARCH_BUF_UB].size_bytes;
}

static inline uint32_t moe_es(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

/* ------------------------------------------------------------------ UB allocation */

/* A bump allocator over the UB; `top` past the UB size means the layout does not fit. */
struct moe_ub {
  uint64_t top;
};

/* A buffer of bytes at a 512-byte boundary plus phase (0 or 256 bytes: bank groups 0-7 or 8-15
 * first). Returns its UB address. */
static inline uint64_t moe_alloc(struct moe_ub *u, uint64_t bytes, unsigned phase)
{
  uint64_t a = u->top / 512 * 512 + phase;
  if (a < u->top) a += 512;
  u->top = a + ops_roundup(bytes ? bytes : 32, 32);
  return a;
}

/* moe_alloc, but in another 64 KiB bank row than `other` (a different bank of every group: an op
 * may then read one and write the other in the same groups) when the UB (ub bytes) has room. */
static inline uint64_t moe_alloc_apart(struct moe_ub *u, uint64_t bytes, unsigned phase, uint64_t other, uint64_t ub)
{
  struct moe_ub v = *u;
  uint64_t a = moe_alloc(&v, bytes, phase);
  if (a / 65536 == other / 65536 && (a + bytes - 1) / 65536 == other / 65536) {
    struct moe_ub w = {ops_roundup(u->top + 1, 65536)};
    uint64_t b = moe_alloc(&w, bytes, phase);
    if (w.top <= ub) {
      *u = w;
      return b;
    }
  }
  *u = v;
  return a;
}

/* ------------------------------------------------------------------ vector instructions */

/* Elements of dtype in one repeat (256 bytes). */
static inline uint32_t moe_per_rep(enum npu_dtype t)
{
  return 256 / moe_es(t);
}

/* Mask of the first n elements of a repeat (n <= elements per repeat). */
static inline void moe_mask_first(uint64_t mask[2], uint32_t n)
{
  mask[0] = n >= 64 ? ~0ull : (1ull << n) - 1;
  mask[1] = n >= 128 ? ~0ull : n > 64 ? (1ull << (n - 64)) - 1 : 0;
}

/* Mask of lanes [lo, hi) of every 32-byte block of a repeat of dtype t. */
static inline void moe_mask_lanes(uint64_t mask[2], enum npu_dtype t, uint32_t lo, uint32_t hi)
{
  uint32_t epb = 32 / moe_es(t);
  mask[0] = mask[1] = 0;
  for (uint32_t b = 0; b < 8; b++)
    for (uint32_t l = lo; l < hi && l < epb; l++) {
      uint32_t i = b * epb + l;
      mask[i / 64] |= 1ull << (i % 64);
    }
}

/* Mask of the even (or odd) elements among the first n of a repeat. */
static inline void moe_mask_parity(uint64_t mask[2], uint32_t n, int odd)
{
  mask[0] = mask[1] = 0;
  for (uint32_t i = (uint32_t)odd; i < n && i < 128; i += 2) mask[i / 64] |= 1ull << (i % 64);
}

/* A vector instruction with dense operands: block stride 1, repeat stride 8 blocks, full mask. */
static inline struct core_vec moe_v(enum core_vec_op op, enum npu_dtype t, uint64_t dst, uint64_t s0,
                                    uint64_t s1, uint32_t repeat)
{
  struct core_vec v = {.op = (uint8_t)op, .dtype = (uint8_t)t, .dst_dtype = (uint8_t)t,
                       .repeat = (uint16_t)repeat, .dst_blk = 1, .src0_blk = 1, .src1_blk = 1,
                       .dst_rep = 8, .src0_rep = 8, .src1_rep = 8, .dst = dst, .src0 = s0, .src1 = s1};
  moe_mask_first(v.mask, moe_per_rep(t));
  return v;
}

/*
 * Apply op to n dense elements of dtype t: dst[i] = src0[i] op src1[i] (or op scalar, the scalar
 * read from UB at scalar_ub when that is not UINT64_MAX); the sources op does not read are
 * ignored. Cut into instructions of at most repeat_max repeats and a masked tail repeat.
 */
static inline void moe_vrun_ub(struct core_tp *t, enum core_vec_op op, enum npu_dtype dt, uint64_t dst,
                               uint64_t s0, uint64_t s1, uint64_t n, double scalar, uint64_t scalar_ub)
{
  uint32_t per = moe_per_rep(dt), rmax = (uint32_t)core_chip(t)->vector.repeat_max;
  uint64_t full = n / per, done = 0;
  while (done < full || (done == full && n % per)) {
    uint32_t r = done == full ? 1 : full - done > rmax ? rmax : (uint32_t)(full - done);
    struct core_vec v = moe_v(op, dt, dst + done * 256, s0 + done * 256, s1 + done * 256, r);
    if (done == full) moe_mask_first(v.mask, (uint32_t)(n % per));
    v.scalar = scalar;
    if (scalar_ub != UINT64_MAX) {
      v.scalar_from_ub = true;
      v.scalar_ub = scalar_ub;
    }
    core_vec(t, &v);
    done += r;
  }
}

/* moe_vrun_ub with an immediate scalar. */
static inline void moe_vrun(struct core_tp *t, enum core_vec_op op, enum npu_dtype dt, uint64_t dst,
                            uint64_t s0, uint64_t s1, uint64_t n, double scalar)
{
  moe_vrun_ub(t, op, dt, dst, s0, s1, n, scalar, UINT64_MAX);
}

/* Cast n dense elements from (src, st) to (dst, dt): repeats of 256 / max(sizes) elements. */
static inline void moe_vcast(struct core_tp *t, uint64_t dst, enum npu_dtype dt, uint64_t src,
                             enum npu_dtype st, uint64_t n)
{
  uint32_t wide = moe_es(st) > moe_es(dt) ? moe_es(st) : moe_es(dt);
  uint32_t per = 256 / wide, rmax = (uint32_t)core_chip(t)->vector.repeat_max;
  uint64_t reps = (n + per - 1) / per;
  for (uint64_t done = 0; done < reps;) {
    uint32_t r = reps - done > rmax ? rmax : (uint32_t)(reps - done);
    struct core_vec v = moe_v(CORE_VEC_CAST, st, dst + done * per * moe_es(dt), src + done * per * moe_es(st),
                              0, r);
    v.dst_dtype = (uint8_t)dt;
    v.dst_rep = (uint16_t)(per * moe_es(dt) / 32);
    v.src0_rep = (uint16_t)(per * moe_es(st) / 32);
    uint64_t left = n - done * per;
    if (left < (uint64_t)r * per) { /* a partial last repeat: cut it off and mask it */
      if (r > 1) {
        v.repeat = (uint16_t)(r - 1);
        core_vec(t, &v);
        v.dst += (uint64_t)(r - 1) * per * moe_es(dt);
        v.src0 += (uint64_t)(r - 1) * per * moe_es(st);
        left -= (uint64_t)(r - 1) * per;
      }
      v.repeat = 1;
      moe_mask_first(v.mask, (uint32_t)left);
    }
    core_vec(t, &v);
    done += r;
  }
}

/*
 * Copy count 32-byte blocks of 32-bit data: block i from src + i * sblk * 32 to
 * dst + i * dblk * 32 (strides in blocks), eight blocks per repeat.
 */
static inline void moe_copy_blocks(struct core_tp *t, uint64_t dst, uint32_t dblk, uint64_t src, uint32_t sblk,
                                   uint64_t count)
{
  uint32_t rmax = (uint32_t)core_chip(t)->vector.repeat_max;
  uint64_t full = count / 8, done = 0;
  while (done < full) {
    uint32_t r = full - done > rmax ? rmax : (uint32_t)(full - done);
    struct core_vec v = moe_v(CORE_VEC_COPY, NPU_DT_INT32, dst + done * 8 * dblk * 32, src + done * 8 * sblk * 32, 0, r);
    v.dst_blk = (uint16_t)dblk;
    v.src0_blk = (uint16_t)sblk;
    v.dst_rep = (uint16_t)(8 * dblk);
    v.src0_rep = (uint16_t)(8 * sblk);
    core_vec(t, &v);
    done += r;
  }
  if (count % 8) {
    struct core_vec v = moe_v(CORE_VEC_COPY, NPU_DT_INT32, dst + full * 8 * dblk * 32, src + full * 8 * sblk * 32, 0, 1);
    v.dst_blk = (uint16_t)dblk;
    v.src0_blk = (uint16_t)sblk;
    moe_mask_first(v.mask, (uint32_t)(count % 8) * 8);
    core_vec(t, &v);
  }
}

/* ------------------------------------------------------------------ routing on the host */

/*
 * Fill ids[tokens * k] with k distinct experts per token, drawn without replacement with
 * probability proportional to w(e) = 1 / (rank(e) + 1)^skew, where rank is a seeded random
 * permutation of the experts (skew 0: uniform; skew 1: Zipf-like, a few hot experts).
 */
static inline void moe_route(struct op_exec *x, int32_t *ids, uint32_t tokens, uint32_t k, uint32_t experts,
                             double skew)
{
  double *w = npu_xmalloc(experts * sizeof *w), *cur = npu_xmalloc(experts * sizeof *cur);
  uint32_t *perm = npu_xmalloc(experts * sizeof *perm);
  for (uint32_t e = 0; e < experts; e++) perm[e] = e;
  for (uint32_t e = experts; e > 1; e--) { /* Fisher-Yates with the execution's generator */
    uint32_t j = (uint32_t)(op_rand(x) * e);
    if (j >= e) j = e - 1;
    uint32_t tmp = perm[e - 1];
    perm[e - 1] = perm[j];
    perm[j] = tmp;
  }
  for (uint32_t r = 0; r < experts; r++) w[perm[r]] = pow(r + 1.0, -skew);
  for (uint32_t t = 0; t < tokens; t++) {
    memcpy(cur, w, experts * sizeof *cur);
    double total = 0;
    for (uint32_t e = 0; e < experts; e++) total += cur[e];
    for (uint32_t j = 0; j < k; j++) {
      double u = op_rand(x) * total, acc = 0;
      uint32_t pick = experts;
      for (uint32_t e = 0; e < experts; e++) {
        if (cur[e] == 0) continue;
        acc += cur[e];
        pick = e;
        if (u < acc) break;
      }
      ids[(uint64_t)t * k + j] = (int32_t)pick;
      total -= cur[pick];
      cur[pick] = 0;
    }
  }
  free(w);
  free(cur);
  free(perm);
}

/*
 * The permuted order of a routing: rows sorted by expert, stable in source order (a source
 * slot is s = token * k + j). Fills row_map[r] = s of output row r, dst_row[s] = r and
 * counts[e] (any of them may be NULL).
 */
static inline void moe_sort(const int32_t *ids, uint64_t slots, uint32_t experts, int32_t *row_map,
                            int32_t *dst_row, int32_t *counts)
{
  uint64_t *next = npu_xcalloc(experts + 1, sizeof *next);
  for (uint64_t s = 0; s < slots; s++) next[ids[s] + 1]++;
  if (counts)
    for (uint32_t e = 0; e < experts; e++) counts[e] = (int32_t)next[e + 1];
  for (uint32_t e = 0; e < experts; e++) next[e + 1] += next[e];
  for (uint64_t s = 0; s < slots; s++) {
    uint64_t r = next[ids[s]]++;
    if (row_map) row_map[r] = (int32_t)s;
    if (dst_row) dst_row[s] = (int32_t)r;
  }
  free(next);
}

/* Dtypes of token rows and logits: the vector unit widens them to fp32. */
static inline bool moe_float_dtype(enum npu_dtype t)
{
  return t == NPU_DT_FP16 || t == NPU_DT_BF16 || t == NPU_DT_FP32;
}

#endif
