/*
 * timing.c - how long one instruction takes on its pipe, when it touches no shared resource.
 *
 * Formulas (cycles at the chip clock):
 *   copy   setup_cycles + bytes / path rate; bytes are the destination footprint (fractal
 *          layouts include their padding); GM copies are timed by the executor from the
 *          burst-rounded GM bytes instead.
 *   mmad   ceil(m/m0) x ceil(n/n0) x ceil(k/k0) fractal steps, each m0 x n0 x k0 MACs at the
 *          chip's MAC/cycle for the input type, divided by calib.cube (calib.cube_fp8 for 8-bit
 *          float inputs where set: arch_cube_share). An MX mmad runs at the
 *          rate of its element type (fp8 / fp4): the scales ride along with the data.
 *   vector repeat x max(w x op factor, UB bank passes x w), w = 256 B (a repeat) / vector
 *          bytes per cycle (a fraction of a cycle on a unit wider than a repeat), divided by
 *          calib.vector. Op factors: 1 for elementwise, compare, select, cast, copy; 2 for
 *          whole-repeat reductions [A]; sort32 8 [A]; exp, ln, recip, sqrt, rsqrt and div take
 *          max(w, chip.vector.transcendental_cycles): cycles per repeat on the special
 *          function units, which do not widen with the vector lanes; mrgsort one
 *          proposal per cycle per list [A]. [A]: not published, assumptions of this model.
 *          A vector instruction whose scalar operand is read from UB (scalar_from_ub) also waits,
 *          before it starts, for a V -> S sync and the scalar read: flag_cycles + scalar_cycles
 *          after the vector work before it has landed; that wait is the executor's (exec.c), it
 *          is not vector busy time.
 *   scalar chip.sync.scalar_cycles per instruction, or the cycles given.
 * UB bank conflicts are evaluated on the first repeat (strides repeat the pattern) and charged
 * to every repeat.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "memory/dma.h"
#include "memory/ub.h"

static uint32_t ceil_div(uint32_t a, uint32_t b)
{
  return (a + b - 1) / b;
}

uint64_t core__copy_bytes(const struct core_instr *in)
{
  const struct core_copy *c = &in->u.copy;
  const struct core_tile *d = &c->dst;
  if (d->layout == CORE_ND) {
    uint64_t bits = (uint64_t)d->rows * d->cols * (uint64_t)npu_dtype_bits((enum npu_dtype)d->dtype);
    return (bits + 7) / 8;
  }
  return core_tile_bytes(d);
}

/* GM side of a copy: contiguous runs of an ND tile, rounded up to bursts. */
uint64_t core__gm_bytes(const struct arch_chip *chip, const struct core_instr *in)
{
  const struct core_copy *c = &in->u.copy;
  const struct core_tile *g = c->src.space == MEM_GM ? &c->src : &c->dst;
  uint64_t es_bits = (uint64_t)npu_dtype_bits((enum npu_dtype)g->dtype);
  uint32_t rows = g->rows, cols = g->cols;
  if (c->dst.space == MEM_GM && c->transpose) { /* the GM tile is the transposed shape */
    rows = c->src.cols;
    cols = c->src.rows;
  }
  if (g->layout != CORE_ND) return core_tile_bytes(g);
  uint64_t row_bytes = ((uint64_t)cols * es_bits + 7) / 8;
  if (core_tile_ld(g) == g->cols || rows == 1) return mem_gm_burst_bytes(chip, 1, row_bytes * rows);
  return mem_gm_burst_bytes(chip, rows, row_bytes);
}

uint64_t core__multicast_share(const struct core_instr *in, uint64_t hit_bytes)
{
  unsigned g = in->u.copy.multicast;
  return g > 1 && in->u.copy.src.space == MEM_GM ? (hit_bytes + g - 1) / g : hit_bytes;
}

/* The UB bank passes of one repeat of v (mem_ub_repeat_cycles). */
static double vec_bank_pattern(const struct arch_chip *chip, const struct core_vec *v, int nsrc)
{
  uint64_t reads[16], writes[8];
  int nr = 0, nw = 0;
  /* a block read several times in one repeat (block stride 0: a broadcast) is read once */
  for (int b = 0; b < 8; b++) {
    if (nsrc >= 1 && (b == 0 || v->src0_blk)) reads[nr++] = v->src0 + (uint64_t)b * v->src0_blk * 32;
    if (nsrc >= 2 && (b == 0 || v->src1_blk)) reads[nr++] = v->src1 + (uint64_t)b * v->src1_blk * 32;
    writes[nw++] = v->dst + (uint64_t)b * v->dst_blk * 32;
  }
  return mem_ub_repeat_cycles(chip, reads, nr, writes, nw);
}

/*
 * The bank passes of a repeat depend only on the UB's geometry and the instruction's addresses
 * and block strides, and a kernel issues the same few patterns (its double buffers) thousands of
 * times: a small direct-mapped memo of the answer, keyed by all of them (fewer than 1,024 misses
 * in 26 M lookups of the 32K Mixtral validation step). A pure cache: a miss computes what a hit
 * returns.
 */
struct bank_key {
  uint64_t bank_bytes, src0, src1, dst;
  int banks, groups, ports, nsrc;
  uint32_t src0_blk, src1_blk, dst_blk;
};

enum { BANK_MEMO = 1024 };
static struct {
  struct bank_key k;
  int cycles;
  bool valid;
} bank_memo[BANK_MEMO];

static double vec_bank_cycles(const struct arch_chip *chip, const struct core_vec *v)
{
  int nsrc = core_vec_op_sources((enum core_vec_op)v->op);
  if (v->op == CORE_VEC_SORT32 || v->op == CORE_VEC_MRGSORT || v->op == CORE_VEC_CAST || v->op == CORE_VEC_BRCB ||
      v->op == CORE_VEC_REDUCE_SUM || v->op == CORE_VEC_REDUCE_MAX || v->op == CORE_VEC_CMP ||
      v->op == CORE_VEC_CMPS)
    return 1; /* dense or irregular access: no strided pattern to conflict */
  struct bank_key k;
  memset(&k, 0, sizeof k); /* padding too: the key is compared with memcmp */
  k.bank_bytes = chip->ub.bank_bytes;
  k.banks = chip->ub.banks;
  k.groups = chip->ub.bank_groups;
  k.ports = chip->ub.read_ports_per_group;
  k.nsrc = nsrc;
  k.dst = v->dst;
  k.dst_blk = v->dst_blk;
  if (nsrc >= 1) {
    k.src0 = v->src0;
    k.src0_blk = v->src0_blk;
  }
  if (nsrc >= 2) {
    k.src1 = v->src1;
    k.src1_blk = v->src1_blk;
  }
  uint64_t h = (k.src0 * 0x9E3779B97F4A7C15ull) ^ (k.src1 * 0xC2B2AE3D27D4EB4Full) ^ (k.dst * 0x165667B19E3779F9ull) ^
               ((uint64_t)k.src0_blk << 7) ^ ((uint64_t)k.src1_blk << 19) ^ ((uint64_t)k.dst_blk << 31) ^
               (uint64_t)k.nsrc;
  h ^= h >> 29;
  unsigned slot = (unsigned)(h & (BANK_MEMO - 1));
  if (bank_memo[slot].valid && !memcmp(&bank_memo[slot].k, &k, sizeof k)) return bank_memo[slot].cycles;
  int cycles = (int)vec_bank_pattern(chip, v, nsrc);
  bank_memo[slot].k = k;
  bank_memo[slot].cycles = cycles;
  bank_memo[slot].valid = true;
  return cycles;
}

static double vec_cycles(const struct arch_chip *chip, const struct core_vec *v, uint64_t *conflict)
{
  /* a repeat is 256 B; a unit wider than that (Hopper's 128 fp32 lanes) finishes one in a
   * fraction of a cycle. transcendental_cycles is per repeat, whatever the width (the special
   * function units are their own, narrower pipe). */
  double per = 256.0 / chip->vector.bytes_per_cycle;
  double cyc;
  switch (v->op) {
  case CORE_VEC_REDUCE_SUM:
  case CORE_VEC_REDUCE_MAX: cyc = 2 * per; break;
  case CORE_VEC_SORT32: cyc = 8 * per; break;
  case CORE_VEC_MRGSORT: return (double)v->count * (double)v->aux; /* one proposal per cycle per list */
  default:
    cyc = core_vec_op_transcendental((enum core_vec_op)v->op) && chip->vector.transcendental_cycles > per
              ? chip->vector.transcendental_cycles
              : per;
  }
  /* the bank model counts the passes a repeat needs (1: conflict-free), each at the unit's width */
  double bank = vec_bank_cycles(chip, v) * per;
  if (bank > cyc) {
    if (conflict) *conflict += (uint64_t)((bank - cyc) * v->repeat);
    cyc = bank;
  }
  return cyc * v->repeat;
}

double core__vec_flops(const struct core_vec *v)
{
  int bits = npu_dtype_bits((enum npu_dtype)v->dtype);
  double per = 256.0 * 8 / bits;
  switch (v->op) {
  case CORE_VEC_DUP:
  case CORE_VEC_COPY:
  case CORE_VEC_CAST:
  case CORE_VEC_SELECT:
  case CORE_VEC_SORT32:
  case CORE_VEC_BRCB:
  case CORE_VEC_MRGSORT: return 0;
  default: return per * v->repeat;
  }
}

double core__local_time(const struct arch_chip *chip, const struct core_instr *in,
                        uint64_t *conflict_cycles)
{
  double hz = chip->clock_hz;
  switch (in->op) {
  case CORE_OP_COPY: {
    enum arch_path p;
    bool ok = mem_path_of(chip, in->u.copy.src.space, in->u.copy.dst.space, &p);
    NPU_ASSERT(ok);
    return chip->dma.setup_cycles / hz + (double)core__copy_bytes(in) / mem_path_bytes_per_s(chip, p);
  }
  case CORE_OP_MMAD: {
    const struct core_mmad *m = &in->u.mmad;
    uint32_t m0 = (uint32_t)chip->cube.fractal_m, n0 = (uint32_t)chip->cube.fractal_n;
    uint32_t k0 = (uint32_t)arch_fractal_k(chip, (enum npu_dtype)m->dtype);
    double steps = (double)ceil_div(m->m, m0) * ceil_div(m->n, n0) * ceil_div(m->k, k0);
    double macs = chip->cube.macs_per_cycle[m->dtype];
    return steps * ((double)m0 * n0 * k0 / macs) / (hz * arch_cube_share(chip, m->dtype));
  }
  case CORE_OP_VEC:
    return vec_cycles(chip, &in->u.vec, conflict_cycles) / (hz * chip->calib.vector.value);
  case CORE_OP_SCALAR:
    return in->u.cycles / hz;
  default:
    return 0;
  }
}
