/*
 * emit.c - the kernel-facing emission API: checks each instruction against the chip (paths,
 * buffers, alignment, dtypes, pipes of the selected core) and queues it on its pipe. The first
 * program error sticks and stops further emission.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "memory/dma.h"
#include "memory/gm.h"

#define PIPES_AIC ((1u << CORE_PIPE_S) | (1u << CORE_PIPE_MTE2) | (1u << CORE_PIPE_MTE1) | \
                   (1u << CORE_PIPE_M) | (1u << CORE_PIPE_FIX))
#define PIPES_AIV ((1u << CORE_PIPE_S) | (1u << CORE_PIPE_MTE2) | (1u << CORE_PIPE_V) | \
                   (1u << CORE_PIPE_MTE3))

void core__fail(struct core__run *r, int err, const char *fmt, ...)
{
  if (r->err) return;
  r->err = err;
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  npu_diag_set(&r->diag, NULL, 0, r->k->name, "%s", msg);
}

void core_fail(struct core_tp *t, int err, const char *fmt, ...)
{
  if (t->run->err) return;
  va_list ap;
  va_start(ap, fmt);
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  core__fail(t->run, err, "%s", msg);
}

bool core_failed(const struct core_tp *t)
{
  return t->run->err != 0;
}

void core_select(struct core_tp *t, enum core_sub sub)
{
  t->sel = sub;
}

int core_unit(const struct core_tp *t)
{
  return t->u->local;
}

int core_rank(const struct core_tp *t)
{
  return t->u->rank;
}

int core_ranks(const struct core_tp *t)
{
  return t->run->ranks;
}

const struct arch_chip *core_chip(const struct core_tp *t)
{
  return t->run->chip;
}

void *core_unit_ctx(const struct core_tp *t)
{
  return t->ctx;
}

static const char *kind_name(const struct core__core *c)
{
  return c->kind == CORE_KIND_AIC ? "cube core" : c->kind == CORE_KIND_AIV ? "vector core" : "core";
}

/* The physical core the selection targets, or NULL (error recorded). */
static struct core__core *target(struct core_tp *t)
{
  if (t->run->err || t->run->gm_sink) return NULL;
  if (t->sel < 0 || t->sel > 2 || t->u->phys[t->sel] < 0) {
    core_fail(t, NPU_EINVAL, "unit %d has no sub-core %d in this launch mode", t->u->index, t->sel);
    return NULL;
  }
  return &t->run->cores[t->u->phys[t->sel]];
}

static void push(struct core__run *r, struct core__core *c, struct core_instr *in)
{
  struct core__pipe *p = &c->pipe[in->pipe];
  if (in->op != CORE_OP_SCALAR) in->scalar_seq = c->scalar_emitted;
  if (p->count == p->cap) { /* a kept ring (exec.c), or one twice as large, the queue in order */
    uint32_t cap;
    struct core_instr *q = core__ring_take(p->cap ? 2 * p->cap : 64, &cap);
    for (uint32_t i = 0, m = p->cap - 1; i < p->count; i++) q[i] = p->q[(p->head + i) & m];
    core__ring_give(p->q, p->cap);
    p->q = q;
    p->head = 0;
    p->cap = cap;
  }
  p->q[(p->head + p->count) & (p->cap - 1)] = *in;
  p->count++;
  c->used = true;
  (void)r;
}

static bool has_pipe(struct core_tp *t, struct core__core *c, enum core_pipe p, const char *what)
{
  if (c->pipes & (1u << p)) return true;
  core_fail(t, NPU_EINVAL, "%s on a %s, which has no %s pipe", what, kind_name(c), core_pipe_name(p));
  return false;
}

static bool check_tile(struct core_tp *t, const struct core_tile *x, const char *role)
{
  const struct arch_chip *chip = t->run->chip;
  char why[256];
  if (x->space >= MEM_SPACE_COUNT || x->layout > CORE_ZN || x->dtype >= NPU_DT_COUNT) {
    core_fail(t, NPU_EINVAL, "%s tile: bad space, layout or dtype", role);
    return false;
  }
  if (!x->rows || !x->cols) {
    core_fail(t, NPU_EINVAL, "%s tile is empty (%" PRIu32 " x %" PRIu32 ")", role, x->rows, x->cols);
    return false;
  }
  uint64_t bytes = core_tile_bytes(x);
  if (x->space == MEM_GM) {
    if (x->layout != CORE_ND) {
      core_fail(t, NPU_EINVAL, "%s tile in GM must be ND", role);
      return false;
    }
    if (!mem_gm_resolve(t->run->gm, x->addr, bytes, NULL)) {
      core_fail(t, NPU_EINVAL, "%s tile [0x%" PRIx64 ", +%" PRIu64 ") is outside every GM tensor",
                role, x->addr, bytes);
      return false;
    }
    return true;
  }
  if (!mem_local_check(chip, (enum mem_space)x->space, x->addr, bytes, why, sizeof why)) {
    core_fail(t, NPU_EINVAL, "%s tile: %s", role, why);
    return false;
  }
  return true;
}

static enum core_pipe path_pipe(enum mem_space src, enum mem_space dst)
{
  if (src == MEM_GM) return CORE_PIPE_MTE2;
  if (src == MEM_L0C || dst == MEM_FB) return CORE_PIPE_FIX;
  if (src == MEM_L1) return CORE_PIPE_MTE1;
  return CORE_PIPE_MTE3; /* UB -> GM, UB -> L1, UB -> L0A */
}

void core_copy_ex(struct core_tp *t, const struct core_copy *cp)
{
  if (t->run->gm_sink) {
    if (cp->src.space == MEM_GM || cp->dst.space == MEM_GM) t->run->gm_sink(t->run->gm_sink_ctx, t->u->index, cp);
    return;
  }
  struct core__core *c = target(t);
  if (!c) return;
  const struct arch_chip *chip = t->run->chip;
  enum mem_space s = (enum mem_space)cp->src.space, d = (enum mem_space)cp->dst.space;
  enum arch_path path;
  if (!mem_path_of(chip, s, d, &path)) {
    core_fail(t, NPU_EUNSUPPORTED, "%s has no data path %s -> %s", chip->name, mem_space_name(s),
              mem_space_name(d));
    return;
  }
  enum core_pipe p = path_pipe(s, d);
  if (!has_pipe(t, c, p, "copy")) return;
  if (!check_tile(t, &cp->src, "source") || !check_tile(t, &cp->dst, "destination")) return;
  uint32_t dr = cp->transpose ? cp->src.cols : cp->src.rows, dc = cp->transpose ? cp->src.rows : cp->src.cols;
  if (cp->dst.rows != dr || cp->dst.cols != dc) {
    core_fail(t, NPU_EINVAL, "copy shapes differ: %" PRIu32 " x %" PRIu32 " into %" PRIu32 " x %" PRIu32,
              cp->src.rows, cp->src.cols, cp->dst.rows, cp->dst.cols);
    return;
  }
  if (cp->src.dtype != cp->dst.dtype && p != CORE_PIPE_FIX) {
    core_fail(t, NPU_EINVAL, "only FixPipe converts types (%s -> %s on %s)",
              npu_dtype_name(cp->src.dtype), npu_dtype_name(cp->dst.dtype), core_pipe_name(p));
    return;
  }
  if (d == MEM_L0A && cp->dst.layout != CORE_ZZ) {
    core_fail(t, NPU_EINVAL, "L0A holds ZZ fractals");
    return;
  }
  if (d == MEM_L0B && cp->dst.layout != CORE_ZN) {
    core_fail(t, NPU_EINVAL, "L0B holds ZN fractals");
    return;
  }
  if (cp->indexed) {
    if ((s != MEM_GM && d != MEM_GM) || !(c->pipes & (1u << CORE_PIPE_V)) || cp->index_ub % 4 ||
        cp->index_ub + 4 > chip->buf[ARCH_BUF_UB].size_bytes) {
      core_fail(t, NPU_EINVAL, "indexed copy: needs a GM side and its index in the UB of a vector core");
      return;
    }
  }
  if (cp->multicast > 1 && (s != MEM_GM || d != MEM_L1 || cp->indexed || cp->multicast > chip->dma.multicast)) {
    core_fail(t, NPU_EINVAL, "multicast copy: a GM -> L1 read to at most chip.dma.multicast = %d cores, got %u",
              chip->dma.multicast, (unsigned)cp->multicast);
    return;
  }
  if (cp->atomic_add && d != MEM_GM) {
    core_fail(t, NPU_EINVAL, "atomic add needs a GM destination");
    return;
  }
  if (cp->fb_scale != UINT64_MAX) {
    char why[256];
    if (p != CORE_PIPE_FIX ||
        !mem_local_check(chip, MEM_FB, cp->fb_scale, (uint64_t)cp->src.cols * 4, why, sizeof why)) {
      core_fail(t, NPU_EINVAL, "per-column scales: %s", p != CORE_PIPE_FIX ? "only on FixPipe" : why);
      return;
    }
  }
  struct core_instr in = {.op = CORE_OP_COPY, .pipe = (uint8_t)p};
  in.u.copy = *cp;
  push(t->run, c, &in);
}

void core_copy(struct core_tp *t, const struct core_tile *dst, const struct core_tile *src)
{
  struct core_copy cp = {.src = *src, .dst = *dst, .scale = 1.0f, .fb_scale = UINT64_MAX};
  core_copy_ex(t, &cp);
}

/* The MX side of an mmad: the chip's cube takes MX blocks of these elements, and the scale
 * tiles lie where struct core_mmad says. */
static bool check_mx(struct core_tp *t, const struct core_mmad *mm)
{
  const struct arch_chip *chip = t->run->chip;
  enum npu_dtype dt = (enum npu_dtype)mm->a.dtype;
  if (dt != NPU_DT_FP8_E4M3 && dt != NPU_DT_FP8_E5M2 && dt != NPU_DT_FP4_E2M1) {
    core_fail(t, NPU_EINVAL, "MX mmad elements are fp8_e4m3, fp8_e5m2 or fp4_e2m1, not %s", npu_dtype_name(dt));
    return false;
  }
  enum npu_dtype mx = dt == NPU_DT_FP4_E2M1 ? NPU_DT_MXFP4 : NPU_DT_MXFP8;
  if (chip->cube.macs_per_cycle[mx] == 0) {
    core_fail(t, NPU_EUNSUPPORTED, "the cube of %s has no %s (MX) input", chip->name, npu_dtype_name(mx));
    return false;
  }
  struct core_tile sa = core_mx_scales(mm, 0), sb = core_mx_scales(mm, 1);
  return check_tile(t, &sa, "L0A scale") && check_tile(t, &sb, "L0B scale");
}

void core_mmad_ex(struct core_tp *t, const struct core_mmad *mm)
{
  struct core__core *c = target(t);
  if (!c || !has_pipe(t, c, CORE_PIPE_M, "mmad")) return;
  const struct arch_chip *chip = t->run->chip;
  const struct core_tile *a = &mm->a, *b = &mm->b, *cc = &mm->c;
  uint32_t m = mm->m, k = mm->k, n = mm->n;
  enum npu_dtype dt = (enum npu_dtype)a->dtype;
  if (a->space != MEM_L0A || b->space != MEM_L0B || cc->space != MEM_L0C) {
    core_fail(t, NPU_EINVAL, "mmad reads L0A and L0B and writes L0C");
    return;
  }
  if ((int)dt >= (int)NPU_DT_CUBE_COUNT || chip->cube.macs_per_cycle[dt] == 0) {
    core_fail(t, NPU_EUNSUPPORTED, "the cube of %s has no %s input", chip->name, npu_dtype_name(dt));
    return;
  }
  if (b->dtype != a->dtype) {
    core_fail(t, NPU_EINVAL, "mmad inputs differ: %s x %s", npu_dtype_name(a->dtype), npu_dtype_name(b->dtype));
    return;
  }
  bool integer = dt == NPU_DT_INT8 || dt == NPU_DT_INT4;
  if (cc->dtype != (integer ? NPU_DT_INT32 : NPU_DT_FP32) || cc->layout != CORE_NZ || core_tile_c0(cc) != 16) {
    core_fail(t, NPU_EINVAL, "L0C holds %s in NZ fractals of 16 x 16", integer ? "int32" : "fp32");
    return;
  }
  if (a->layout != CORE_ZZ || b->layout != CORE_ZN) {
    core_fail(t, NPU_EINVAL, "mmad needs A in ZZ and B in ZN fractals");
    return;
  }
  if (!m || !k || !n || m > a->rows || k > a->cols || k > b->rows || n > b->cols || m > cc->rows || n > cc->cols) {
    core_fail(t, NPU_EINVAL, "mmad %" PRIu32 " x %" PRIu32 " x %" PRIu32 " exceeds its tiles", m, k, n);
    return;
  }
  if (!check_tile(t, a, "L0A") || !check_tile(t, b, "L0B") || !check_tile(t, cc, "L0C")) return;
  if (mm->mx && !check_mx(t, mm)) return;
  struct core_instr in = {.op = CORE_OP_MMAD, .pipe = CORE_PIPE_M};
  in.u.mmad = *mm;
  in.u.mmad.dtype = (uint8_t)dt;
  push(t->run, c, &in);
}

void core_mmad(struct core_tp *t, const struct core_tile *cc, const struct core_tile *a,
               const struct core_tile *b, uint32_t m, uint32_t k, uint32_t n, bool init)
{
  struct core_mmad mm = {.a = *a, .b = *b, .c = *cc, .m = m, .k = k, .n = n, .init = init};
  core_mmad_ex(t, &mm);
}

static bool vec_dtype_ok(enum core_vec_op op, enum npu_dtype dt)
{
  if (op == CORE_VEC_CAST || op == CORE_VEC_COPY || op == CORE_VEC_DUP) return npu_dtype_bits(dt) >= 8;
  if (op == CORE_VEC_SORT32) return dt == NPU_DT_FP16 || dt == NPU_DT_FP32;
  return dt == NPU_DT_FP16 || dt == NPU_DT_FP32 || dt == NPU_DT_INT16 || dt == NPU_DT_INT32;
}

/* Highest byte an operand touches: last repeat, last block. */
static uint64_t operand_end(uint64_t base, uint16_t rep, uint16_t blk, uint16_t repeat)
{
  return base + (uint64_t)(repeat - 1) * rep * 32 + 7ull * blk * 32 + 32;
}

void core_vec(struct core_tp *t, const struct core_vec *v)
{
  struct core__core *c = target(t);
  if (!c || !has_pipe(t, c, CORE_PIPE_V, "vector instruction")) return;
  const struct arch_chip *chip = t->run->chip;
  if (v->op >= CORE_VEC_COUNT) {
    core_fail(t, NPU_EINVAL, "unknown vector op %d", v->op);
    return;
  }
  enum core_vec_op op = (enum core_vec_op)v->op;
  if (!vec_dtype_ok(op, (enum npu_dtype)v->dtype)) {
    core_fail(t, NPU_EUNSUPPORTED, "vector %s has no %s form", core_vec_op_name(op), npu_dtype_name(v->dtype));
    return;
  }
  if (op != CORE_VEC_MRGSORT && (v->repeat == 0 || v->repeat > chip->vector.repeat_max)) {
    core_fail(t, NPU_EINVAL, "vector repeat %u outside 1..%d", v->repeat, chip->vector.repeat_max);
    return;
  }
  char why[256];
  uint64_t ub = chip->buf[ARCH_BUF_UB].size_bytes;
  uint64_t ends[4] = {0, 0, 0, 0};
  uint64_t starts[4] = {v->dst, v->src0, v->src1, v->aux};
  int nsrc = core_vec_op_sources(op);
  if (op == CORE_VEC_MRGSORT) {
    ends[0] = v->dst + (uint64_t)v->count * v->aux * 8;
    ends[1] = v->src0 + (uint64_t)v->count * v->aux * 8;
    if (v->aux < 2 || v->aux > 4) {
      core_fail(t, NPU_EINVAL, "mrgsort merges 2 to 4 lists, got %" PRIu64, v->aux);
      return;
    }
  } else if (op == CORE_VEC_SORT32) {
    ends[0] = operand_end(v->dst, v->dst_rep, 1, v->repeat);
    ends[1] = v->src0 + (uint64_t)(v->repeat - 1) * v->src0_rep * 32 + 32ull * npu_dtype_bits(v->dtype) / 8;
    ends[2] = v->src1 + (uint64_t)(v->repeat - 1) * v->src1_rep * 32 + 128;
  } else if (op == CORE_VEC_BRCB) {
    ends[0] = operand_end(v->dst, v->dst_rep, v->dst_blk, v->repeat);
    ends[1] = v->src0 + (uint64_t)(v->repeat - 1) * v->src0_rep * 32 + 8ull * npu_dtype_bits(v->dtype) / 8;
  } else if (op == CORE_VEC_REDUCE_SUM || op == CORE_VEC_REDUCE_MAX) {
    ends[0] = v->dst + (uint64_t)v->repeat * npu_dtype_bits(v->dtype) / 8;
    ends[1] = operand_end(v->src0, v->src0_rep, v->src0_blk, v->repeat);
  } else if (op == CORE_VEC_CMP || op == CORE_VEC_CMPS) {
    uint64_t bits = (uint64_t)v->repeat * 2048 / npu_dtype_bits(v->dtype);
    ends[0] = v->dst + (bits + 7) / 8;
    ends[1] = operand_end(v->src0, v->src0_rep, v->src0_blk, v->repeat);
    if (op == CORE_VEC_CMP) ends[2] = operand_end(v->src1, v->src1_rep, v->src1_blk, v->repeat);
  } else {
    ends[0] = operand_end(v->dst, v->dst_rep, v->dst_blk, v->repeat);
    if (nsrc >= 1) ends[1] = operand_end(v->src0, v->src0_rep, v->src0_blk, v->repeat);
    if (nsrc >= 2) ends[2] = operand_end(v->src1, v->src1_rep, v->src1_blk, v->repeat);
    if (op == CORE_VEC_SELECT) ends[3] = v->aux + ((uint64_t)v->repeat * 2048 / npu_dtype_bits(v->dtype) + 7) / 8;
    /* 4-bit results: fp16 -> int4 only (Ascend C Cast half -> int4b_t, A2 / A3 / 950) */
    bool to_int4 = v->dst_dtype == NPU_DT_INT4 && v->dtype == NPU_DT_FP16;
    if (op == CORE_VEC_CAST && !to_int4 && !vec_dtype_ok(CORE_VEC_CAST, (enum npu_dtype)v->dst_dtype)) {
      core_fail(t, NPU_EUNSUPPORTED, "vector cast to %s", npu_dtype_name(v->dst_dtype));
      return;
    }
  }
  if (v->scalar_from_ub) {
    uint64_t es = (uint64_t)npu_dtype_bits(v->dtype) / 8;
    if (v->scalar_ub % es || v->scalar_ub + es > ub) {
      core_fail(t, NPU_EINVAL, "vector %s: scalar operand at UB 0x%" PRIx64 " is misaligned or outside the UB",
                core_vec_op_name(op), v->scalar_ub);
      return;
    }
  }
  static const char *const role[4] = {"destination", "source 0", "source 1", "mask"};
  for (int i = 0; i < 4; i++) {
    if (!ends[i]) continue;
    if (starts[i] % 32 || ends[i] > ub) {
      snprintf(why, sizeof why, "%s [0x%" PRIx64 ", 0x%" PRIx64 ") %s", role[i], starts[i], ends[i],
               starts[i] % 32 ? "is not 32-byte aligned" : "overflows the UB");
      core_fail(t, NPU_EINVAL, "vector %s: %s (UB holds %" PRIu64 " bytes)", core_vec_op_name(op), why, ub);
      return;
    }
  }
  struct core_instr in = {.op = CORE_OP_VEC, .pipe = CORE_PIPE_V};
  in.u.vec = *v;
  if (op != CORE_VEC_CAST) in.u.vec.dst_dtype = v->dtype;
  push(t->run, c, &in);
}

void core_scalar(struct core_tp *t, double cycles)
{
  struct core__core *c = target(t);
  if (!c) return;
  struct core_instr in = {.op = CORE_OP_SCALAR, .pipe = CORE_PIPE_S};
  in.u.cycles = cycles;
  in.scalar_seq = c->scalar_emitted++;
  push(t->run, c, &in);
}

static void flag(struct core_tp *t, uint8_t op, enum core_pipe src, enum core_pipe dst, int id)
{
  struct core__core *c = target(t);
  if (!c) return;
  if (id < 0 || id >= CORE_FLAG_IDS || src >= CORE_PIPE_COUNT || dst >= CORE_PIPE_COUNT) {
    core_fail(t, NPU_EINVAL, "flag id %d outside 0..%d", id, CORE_FLAG_IDS - 1);
    return;
  }
  if (!has_pipe(t, c, src, "flag") || !has_pipe(t, c, dst, "flag")) return;
  struct core_instr in = {.op = op, .pipe = op == CORE_OP_SET_FLAG ? (uint8_t)src : (uint8_t)dst,
                          .src_pipe = (uint8_t)src, .dst_pipe = (uint8_t)dst, .id = (uint8_t)id};
  push(t->run, c, &in);
}

void core_set_flag(struct core_tp *t, enum core_pipe src, enum core_pipe dst, int id)
{
  flag(t, CORE_OP_SET_FLAG, src, dst, id);
}

void core_wait_flag(struct core_tp *t, enum core_pipe src, enum core_pipe dst, int id)
{
  flag(t, CORE_OP_WAIT_FLAG, src, dst, id);
}

void core_pipe_barrier(struct core_tp *t, enum core_pipe p)
{
  struct core__core *c = target(t);
  if (!c || !has_pipe(t, c, p, "pipe barrier")) return;
  struct core_instr in = {.op = CORE_OP_BARRIER, .pipe = (uint8_t)p};
  push(t->run, c, &in);
}

static void markers(struct core__run *r, struct core__core *c, uint8_t op)
{
  for (int p = 0; p < CORE_PIPE_COUNT; p++) {
    if (!(c->pipes & (1u << p))) continue;
    struct core_instr in = {.op = op, .pipe = (uint8_t)p};
    push(r, c, &in);
  }
}

void core_fence(struct core_tp *t)
{
  struct core__core *c = target(t);
  if (c) markers(t->run, c, CORE_OP_FENCE);
}

void core_sync_all(struct core_tp *t)
{
  if (t->run->err || t->run->gm_sink) return;
  for (int s = 0; s < 3; s++) {
    int phys = t->u->phys[s];
    if (phys < 0) continue;
    bool dup = false;
    for (int q = 0; q < s; q++) dup |= t->u->phys[q] == phys;
    if (!dup) markers(t->run, &t->run->cores[phys], CORE_OP_SYNC_ALL);
  }
}

static void xflag(struct core_tp *t, uint8_t op, enum core_pipe p, enum core_sub peer, int id)
{
  struct core__core *c = target(t);
  if (!c) return;
  if (t->run->k->mode != CORE_MODE_MIX) {
    core_fail(t, NPU_EINVAL, "cross-core flags need a MIX launch");
    return;
  }
  if (id < 0 || id >= CORE_XFLAG_IDS || peer < 0 || peer > 2 || t->u->phys[peer] < 0 || (int)peer == t->sel) {
    core_fail(t, NPU_EINVAL, "cross-core flag id %d to sub-core %d is not valid here", id, peer);
    return;
  }
  if (!has_pipe(t, c, p, "cross-core flag")) return;
  struct core_instr in = {.op = op, .pipe = (uint8_t)p, .src_pipe = (uint8_t)t->sel,
                          .dst_pipe = (uint8_t)peer, .id = (uint8_t)id};
  push(t->run, c, &in);
}

static void signal_op(struct core_tp *t, uint8_t op, enum core_pipe p, int rank, int id, uint32_t count)
{
  struct core__core *c = target(t);
  if (!c) return;
  if (id < 0 || id >= CORE_SIGNAL_IDS || rank < 0 || rank >= t->run->ranks) {
    core_fail(t, NPU_EINVAL, "signal id %d of device %d is not valid here (ids below %d, %d device%s)", id, rank,
              CORE_SIGNAL_IDS, t->run->ranks, t->run->ranks == 1 ? "" : "s");
    return;
  }
  if (op == CORE_OP_NOTIFY_WAIT && count == 0) {
    core_fail(t, NPU_EINVAL, "a wait for signal %d asks for no notify", id);
    return;
  }
  if (!has_pipe(t, c, p, op == CORE_OP_NOTIFY ? "notify" : "notify wait")) return;
  struct core_instr in = {.op = op, .pipe = (uint8_t)p};
  in.u.sig = (struct core_sig){(uint16_t)rank, (uint16_t)id, count};
  push(t->run, c, &in);
}

void core_notify(struct core_tp *t, enum core_pipe p, int rank, int id)
{
  signal_op(t, CORE_OP_NOTIFY, p, rank, id, 0);
}

void core_notify_wait(struct core_tp *t, enum core_pipe p, int id, uint32_t count)
{
  signal_op(t, CORE_OP_NOTIFY_WAIT, p, t->u->rank, id, count);
}

void core_xset(struct core_tp *t, enum core_pipe p, enum core_sub peer, int id)
{
  xflag(t, CORE_OP_XSET, p, peer, id);
}

void core_xwait(struct core_tp *t, enum core_pipe p, enum core_sub peer, int id)
{
  xflag(t, CORE_OP_XWAIT, p, peer, id);
}

/* ------------------------------------------------------------------ generation */

uint64_t core__unit_pending(const struct core__run *r, const struct core__unit *u)
{
  uint64_t n = 0;
  for (int s = 0; s < 3; s++) {
    if (u->phys[s] < 0 || (s > 0 && u->phys[s] == u->phys[0])) continue;
    const struct core__core *c = &r->cores[u->phys[s]];
    for (int p = 0; p < CORE_PIPE_COUNT; p++) n += c->pipe[p].count;
  }
  return n;
}

bool core__generate(struct core__run *r, struct core__unit *u)
{
  if (u->finished || r->err) return false;
  if (r->gm_sink) { /* only the GM copies of the next block are wanted */
    struct core_tp *t = &r->tps[u->index];
    const struct core_kernel *k = r->k;
    t->sel = k->mode == CORE_MODE_VECTOR ? CORE_SUB_AIV0 : CORE_SUB_AIC;
    uint64_t b = k->block_of ? k->block_of(k->ctx, u->local, u->next)
                             : u->next * (uint64_t)k->block_dim + (uint64_t)u->local;
    if (b >= k->nblocks || b == UINT64_MAX) {
      u->finished = true;
      return false;
    }
    if (!u->begun && k->unit_begin) k->unit_begin(t, k->ctx);
    u->begun = true;
    k->block(t, k->ctx, b);
    u->next++;
    return true;
  }
  struct core_tp *t = &r->tps[u->index];
  const struct core_kernel *k = r->k;
  t->sel = k->mode == CORE_MODE_VECTOR ? CORE_SUB_AIV0 : CORE_SUB_AIC;
  if (!u->begun) {
    u->begun = true;
    if (k->unit_begin) k->unit_begin(t, k->ctx);
  }
  uint64_t b = k->block_of ? k->block_of(k->ctx, u->local, u->next)
                           : u->next * (uint64_t)k->block_dim + (uint64_t)u->local;
  if (b < k->nblocks && b != UINT64_MAX) {
    t->sel = k->mode == CORE_MODE_VECTOR ? CORE_SUB_AIV0 : CORE_SUB_AIC;
    k->block(t, k->ctx, b);
    u->next++;
  } else {
    t->sel = k->mode == CORE_MODE_VECTOR ? CORE_SUB_AIV0 : CORE_SUB_AIC;
    if (k->unit_end) k->unit_end(t, k->ctx);
    u->finished = true;
  }
  for (int s = 0; s < 3; s++)
    if (u->phys[s] >= 0)
      for (int p = 0; p < CORE_PIPE_COUNT; p++) core__wake(r, &r->cores[u->phys[s]], p);
  return true;
}

void core__emit_reset(struct core__run *r)
{
  (void)r;
}
