/*
 * func.c - functional execution: what an instruction does to the bytes of the buffers.
 *
 * Values are decoded to double, computed, and encoded to the destination type with round to
 * nearest even (formats/). The cube accumulates in fp32 (int32 for integer inputs) in the
 * order k = 0, 1, ... within one mmad, MX elements scaled by their E8M0 block scales first;
 * copies into fractal layouts zero their padding.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "memory/gm.h"
#include "cores/exec_int.h"
#include "formats/formats.h"
#include "memory/gm.h"

static uint8_t *host_addr(struct core__run *r, struct core__core *c, uint8_t space, uint64_t addr)
{
  if (space == MEM_GM) {
    void *p = NULL;
    bool ok = mem_gm_resolve(r->gm, addr, 1, &p);
    NPU_ASSERT(ok && p);
    return p;
  }
  NPU_ASSERT(c->buf[space] != NULL);
  return c->buf[space] + addr;
}

/* Zero the padding of a fractal-layout tile: rows up to 16 (c0 for ZN), columns up to c0 (16).
 * Rows past that up to an NZ tile's ld are not padding: a tile may be the upper rows of a
 * taller one whose other rows another copy fills (two vector cores each writing half). */
static void zero_padding(const struct core_tile *t, uint8_t *base)
{
  if (t->layout == CORE_ND) return;
  uint32_t c0 = core_tile_c0(t);
  uint32_t rq = t->layout == CORE_ZN ? c0 : 16, cq = t->layout == CORE_ZN ? 16 : c0;
  uint32_t rows = (t->rows + rq - 1) / rq * rq, cols = (t->cols + cq - 1) / cq * cq;
  enum npu_dtype dt = (enum npu_dtype)t->dtype;
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t col = (r < t->rows ? t->cols : 0); col < cols; col++)
      fmt_encode(dt, base, core_tile_offset(t, r, col), 0.0);
}

static void func_copy(struct core__run *r, struct core__core *c, const struct core_copy *cp)
{
  struct core_tile src = cp->src, dst = cp->dst;
  if (cp->indexed) {
    uint32_t index;
    memcpy(&index, c->buf[MEM_UB] + cp->index_ub, sizeof index);
    struct core_tile *g = src.space == MEM_GM ? &src : &dst;
    g->addr += (uint64_t)index * cp->index_stride;
    if (!mem_gm_resolve(r->gm, g->addr, core_tile_bytes(g), NULL)) {
      core__fail(r, NPU_EINVAL, "indexed copy: index %u puts the GM tile outside every tensor", index);
      return;
    }
  }
  const struct core_tile *s = &src, *d = &dst;
  uint8_t *sb = host_addr(r, c, s->space, s->addr), *db = host_addr(r, c, d->space, d->addr);
  enum npu_dtype sd = (enum npu_dtype)s->dtype, dd = (enum npu_dtype)d->dtype;
  bool same = sd == dd && !cp->relu && cp->scale == 1.0f && cp->fb_scale == UINT64_MAX &&
              !cp->atomic_add && npu_dtype_bits(sd) >= 8;
  bool plain = same && !cp->transpose;
  if (plain && s->layout == CORE_ND && d->layout == CORE_ND) {
    size_t es = (size_t)npu_dtype_bits(sd) / 8, row = (size_t)s->cols * es;
    for (uint32_t i = 0; i < s->rows; i++)
      memmove(db + (size_t)i * core_tile_ld(d) * es, sb + (size_t)i * core_tile_ld(s) * es, row);
    return;
  }
  zero_padding(d, db);
  if (same) {
    /* same type, no conversion: move element bytes by layout offsets */
    size_t es = (size_t)npu_dtype_bits(sd) / 8;
    for (uint32_t i = 0; i < s->rows; i++) {
      for (uint32_t j = 0; j < s->cols; j++) {
        const uint8_t *from = sb + core_tile_offset(s, i, j) * es;
        uint8_t *to = db + (cp->transpose ? core_tile_offset(d, j, i) : core_tile_offset(d, i, j)) * es;
        switch (es) {
        case 1: *to = *from; break;
        case 2: memcpy(to, from, 2); break;
        case 4: memcpy(to, from, 4); break;
        default: memcpy(to, from, es);
        }
      }
    }
    return;
  }
  const float *fb = NULL;
  if (cp->fb_scale != UINT64_MAX) fb = (const float *)(c->buf[MEM_FB] + cp->fb_scale);
  for (uint32_t i = 0; i < s->rows; i++) {
    for (uint32_t j = 0; j < s->cols; j++) {
      double v = fmt_decode(sd, sb, core_tile_offset(s, i, j));
      if (fb) v *= fb[j];
      v *= cp->scale;
      if (cp->relu && v < 0) v = 0;
      uint64_t o = cp->transpose ? core_tile_offset(d, j, i) : core_tile_offset(d, i, j);
      if (cp->atomic_add) v += fmt_decode(dd, db, o);
      fmt_encode(dd, db, o, v);
    }
  }
}

/* The E8M0 scale of element (r, c) of MX mmad input `which` (0: a, 1: b; one scale per 32 along
 * K, which is c for a and r for b), as a factor. */
static double mx_scale(struct core__run *r, struct core__core *c, const struct core_mmad *m, int which,
                       uint32_t row, uint32_t col)
{
  struct core_tile s = core_mx_scales(m, which);
  const uint8_t *sb = host_addr(r, c, s.space, s.addr);
  return fmt_e8m0_to_double(sb[core_tile_offset(&s, which ? row / 32 : row, which ? col : col / 32)]);
}

static void func_mmad(struct core__run *r, struct core__core *c, const struct core_mmad *m)
{
  uint8_t *ab = host_addr(r, c, MEM_L0A, m->a.addr), *bb = host_addr(r, c, MEM_L0B, m->b.addr);
  uint8_t *cb = host_addr(r, c, MEM_L0C, m->c.addr);
  enum npu_dtype dt = (enum npu_dtype)m->dtype, ct = (enum npu_dtype)m->c.dtype;
  bool integer = dt == NPU_DT_INT8 || dt == NPU_DT_INT4;
  float *a = npu_xmalloc((size_t)m->m * m->k * sizeof *a);
  float *b = npu_xmalloc((size_t)m->k * m->n * sizeof *b);
  /* MX: each element times its block's power-of-two scale, exact in fp32 within its range */
  for (uint32_t i = 0; i < m->m; i++)
    for (uint32_t p = 0; p < m->k; p++) {
      double v = fmt_decode(dt, ab, core_tile_offset(&m->a, i, p));
      a[(size_t)i * m->k + p] = (float)(m->mx ? v * mx_scale(r, c, m, 0, i, p) : v);
    }
  for (uint32_t p = 0; p < m->k; p++)
    for (uint32_t j = 0; j < m->n; j++) {
      double v = fmt_decode(dt, bb, core_tile_offset(&m->b, p, j));
      b[(size_t)p * m->n + j] = (float)(m->mx ? v * mx_scale(r, c, m, 1, p, j) : v);
    }
  /* For each output element the products are added in k order: the same sums as a plain
   * triple loop, laid out so that the inner loop runs over contiguous j. */
  if (integer) {
    int64_t *acc = npu_xmalloc((size_t)m->n * sizeof *acc);
    for (uint32_t i = 0; i < m->m; i++) {
      for (uint32_t j = 0; j < m->n; j++)
        acc[j] = m->init ? 0 : (int64_t)fmt_decode(ct, cb, core_tile_offset(&m->c, i, j));
      for (uint32_t p = 0; p < m->k; p++) {
        int64_t x = (int64_t)a[(size_t)i * m->k + p];
        const float *brow = b + (size_t)p * m->n;
        for (uint32_t j = 0; j < m->n; j++) acc[j] += x * (int64_t)brow[j];
      }
      for (uint32_t j = 0; j < m->n; j++)
        fmt_encode(ct, cb, core_tile_offset(&m->c, i, j), (double)(int32_t)(uint32_t)acc[j]); /* int32 wraps */
    }
    free(acc);
  } else {
    float *acc = npu_xmalloc((size_t)m->n * sizeof *acc);
    for (uint32_t i = 0; i < m->m; i++) {
      for (uint32_t j = 0; j < m->n; j++)
        acc[j] = m->init ? 0.0f : (float)fmt_decode(ct, cb, core_tile_offset(&m->c, i, j));
      for (uint32_t p = 0; p < m->k; p++) {
        float x = a[(size_t)i * m->k + p];
        const float *brow = b + (size_t)p * m->n;
        for (uint32_t j = 0; j < m->n; j++) acc[j] += x * brow[j];
      }
      for (uint32_t j = 0; j < m->n; j++) fmt_encode(ct, cb, core_tile_offset(&m->c, i, j), acc[j]);
    }
    free(acc);
  }
  free(a);
  free(b);
}

static bool mask_bit(const struct core_vec *v, uint32_t i)
{
  return i < 128 && ((v->mask[i / 64] >> (i % 64)) & 1);
}

static double scalar_op(enum core_vec_op op, double x, double y)
{
  switch (op) {
  case CORE_VEC_ADD: case CORE_VEC_ADDS: return x + y;
  case CORE_VEC_SUB: return x - y;
  case CORE_VEC_MUL: case CORE_VEC_MULS: return x * y;
  case CORE_VEC_DIV: return x / y;
  case CORE_VEC_MAX: case CORE_VEC_MAXS: return x > y ? x : y;
  case CORE_VEC_MIN: case CORE_VEC_MINS: return x < y ? x : y;
  case CORE_VEC_EXP: return exp(x);
  case CORE_VEC_LN: return log(x);
  case CORE_VEC_RECIP: return 1.0 / x;
  case CORE_VEC_SQRT: return sqrt(x);
  case CORE_VEC_RSQRT: return 1.0 / sqrt(x);
  case CORE_VEC_ABS: return fabs(x);
  case CORE_VEC_RELU: return x > 0 ? x : 0;
  case CORE_VEC_NEG: return -x;
  case CORE_VEC_COPY: case CORE_VEC_CAST: return x;
  case CORE_VEC_DUP: return y;
  default: NPU_PANIC("not an elementwise op");
  }
}

static bool compare(enum core_cmp k, double x, double y)
{
  switch (k) {
  case CORE_CMP_LT: return x < y;
  case CORE_CMP_GT: return x > y;
  case CORE_CMP_LE: return x <= y;
  case CORE_CMP_GE: return x >= y;
  case CORE_CMP_EQ: return x == y;
  case CORE_CMP_NE: return x != y;
  }
  return false;
}

struct proposal {
  float score;
  uint32_t index;
};

static int by_score_desc(const void *a, const void *b)
{
  const struct proposal *x = a, *y = b;
  if (x->score > y->score) return -1;
  if (x->score < y->score) return 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static void func_vec(struct core__run *r, struct core__core *c, const struct core_vec *v)
{
  (void)r;
  uint8_t *ub = c->buf[MEM_UB];
  enum core_vec_op op = (enum core_vec_op)v->op;
  enum npu_dtype dt = (enum npu_dtype)v->dtype;
  uint32_t es = (uint32_t)npu_dtype_bits(dt) / 8;
  uint32_t per_block = 32 / es, per_rep = 8 * per_block;
  switch (op) {
  case CORE_VEC_SORT32:
    for (uint32_t rep = 0; rep < v->repeat; rep++) {
      struct proposal p[32];
      const uint8_t *s = ub + v->src0 + (uint64_t)rep * v->src0_rep * 32;
      const uint32_t *ix = (const uint32_t *)(ub + v->src1 + (uint64_t)rep * v->src1_rep * 32);
      for (int i = 0; i < 32; i++) p[i] = (struct proposal){(float)fmt_decode(dt, s, (size_t)i), ix[i]};
      qsort(p, 32, sizeof p[0], by_score_desc);
      memcpy(ub + v->dst + (uint64_t)rep * v->dst_rep * 32, p, sizeof p);
    }
    return;
  case CORE_VEC_MRGSORT: {
    size_t n = (size_t)v->count * v->aux;
    struct proposal *p = npu_xmalloc(n * sizeof *p);
    memcpy(p, ub + v->src0, n * sizeof *p);
    qsort(p, n, sizeof *p, by_score_desc); /* a merge of sorted lists gives the same order */
    memcpy(ub + v->dst, p, n * sizeof *p);
    free(p);
    return;
  }
  case CORE_VEC_REDUCE_SUM:
  case CORE_VEC_REDUCE_MAX:
    for (uint32_t rep = 0; rep < v->repeat; rep++) {
      double acc = op == CORE_VEC_REDUCE_SUM ? 0 : -INFINITY;
      for (uint32_t i = 0; i < per_rep; i++) {
        if (!mask_bit(v, i)) continue;
        uint64_t a = v->src0 + (uint64_t)rep * v->src0_rep * 32 + (uint64_t)(i / per_block) * v->src0_blk * 32;
        double x = fmt_decode(dt, ub + a, i % per_block);
        acc = op == CORE_VEC_REDUCE_SUM ? acc + x : (x > acc ? x : acc);
      }
      fmt_encode(dt, ub + v->dst, rep, acc);
    }
    return;
  case CORE_VEC_CMP:
  case CORE_VEC_CMPS:
    for (uint32_t rep = 0; rep < v->repeat; rep++) {
      for (uint32_t i = 0; i < per_rep; i++) {
        uint64_t blk = (uint64_t)(i / per_block) * 32, e = i % per_block;
        double x = fmt_decode(dt, ub + v->src0 + (uint64_t)rep * v->src0_rep * 32 + blk * v->src0_blk, e);
        double y = op == CORE_VEC_CMPS ? (v->scalar_from_ub ? fmt_decode(dt, ub + v->scalar_ub, 0) : v->scalar)
                                       : fmt_decode(dt, ub + v->src1 + (uint64_t)rep * v->src1_rep * 32 + blk * v->src1_blk, e);
        uint64_t bit = (uint64_t)rep * per_rep + i;
        uint8_t *byte = ub + v->dst + bit / 8;
        bool on = mask_bit(v, i) && compare((enum core_cmp)v->cmp, x, y);
        *byte = (uint8_t)(on ? (*byte | (1u << (bit % 8))) : (*byte & ~(1u << (bit % 8))));
      }
    }
    return;
  case CORE_VEC_BRCB:
    for (uint32_t rep = 0; rep < v->repeat; rep++)
      for (uint32_t i = 0; i < 8; i++) {
        double x = fmt_decode(dt, ub + v->src0 + (uint64_t)rep * v->src0_rep * 32, i);
        uint8_t *blk = ub + v->dst + (uint64_t)rep * v->dst_rep * 32 + (uint64_t)i * v->dst_blk * 32;
        for (uint32_t e = 0; e < per_block; e++) fmt_encode(dt, blk, e, x);
      }
    return;
  case CORE_VEC_CAST: {
    /* a repeat holds 256 bytes of the wider type; 4-bit results pack two per byte */
    enum npu_dtype od = (enum npu_dtype)v->dst_dtype;
    int wide = npu_dtype_bits(dt) > npu_dtype_bits(od) ? npu_dtype_bits(dt) : npu_dtype_bits(od);
    uint32_t n = 2048 / (uint32_t)wide;
    for (uint32_t rep = 0; rep < v->repeat; rep++)
      for (uint32_t i = 0; i < n; i++) {
        if (!mask_bit(v, i)) continue;
        double x = fmt_decode(dt, ub + v->src0 + (uint64_t)rep * v->src0_rep * 32, i);
        fmt_encode(od, ub + v->dst + (uint64_t)rep * v->dst_rep * 32, i, x);
      }
    return;
  }
  default:
    break;
  }
  int nsrc = core_vec_op_sources(op);
  for (uint32_t rep = 0; rep < v->repeat; rep++) {
    for (uint32_t i = 0; i < per_rep; i++) {
      if (!mask_bit(v, i)) continue;
      uint64_t blk = (uint64_t)(i / per_block) * 32, e = i % per_block;
      double x = 0, y = v->scalar_from_ub ? fmt_decode(dt, ub + v->scalar_ub, 0) : v->scalar;
      if (nsrc >= 1) x = fmt_decode(dt, ub + v->src0 + (uint64_t)rep * v->src0_rep * 32 + blk * v->src0_blk, e);
      if (nsrc >= 2) y = fmt_decode(dt, ub + v->src1 + (uint64_t)rep * v->src1_rep * 32 + blk * v->src1_blk, e);
      double out;
      if (op == CORE_VEC_SELECT) {
        uint64_t bit = (uint64_t)rep * per_rep + i;
        out = (ub[v->aux + bit / 8] >> (bit % 8)) & 1 ? x : y;
      } else {
        out = scalar_op(op, x, y);
      }
      fmt_encode(dt, ub + v->dst + (uint64_t)rep * v->dst_rep * 32 + blk * v->dst_blk, e, out);
    }
  }
}

void core__func(struct core__run *r, struct core__core *c, const struct core_instr *in)
{
  switch (in->op) {
  case CORE_OP_COPY: func_copy(r, c, &in->u.copy); break;
  case CORE_OP_MMAD: func_mmad(r, c, &in->u.mmad); break;
  case CORE_OP_VEC: func_vec(r, c, &in->u.vec); break;
  default: break;
  }
}
