/* isa.c - names and tile layout arithmetic of the instruction set; see isa.h. */
#include "cores/isa.h"

#include "common/err.h"

static const char *const pipe_names[CORE_PIPE_COUNT] = {"S", "MTE2", "MTE1", "M",
                                                        "FIXPIPE", "V", "MTE3"};

static const struct {
  const char *name;
  int nsrc;
  bool transc;
} vec_ops[CORE_VEC_COUNT] = {
#define CORE__VEC_ROW(e, name, nsrc, transc) {name, nsrc, transc},
    CORE_VEC_OP_MAP(CORE__VEC_ROW)
#undef CORE__VEC_ROW
};

const char *core_pipe_name(enum core_pipe p)
{
  NPU_ASSERT(p >= 0 && p < CORE_PIPE_COUNT);
  return pipe_names[p];
}

const char *core_vec_op_name(enum core_vec_op op)
{
  NPU_ASSERT(op >= 0 && op < CORE_VEC_COUNT);
  return vec_ops[op].name;
}

bool core_vec_op_transcendental(enum core_vec_op op)
{
  NPU_ASSERT(op >= 0 && op < CORE_VEC_COUNT);
  return vec_ops[op].transc;
}

int core_vec_op_sources(enum core_vec_op op)
{
  NPU_ASSERT(op >= 0 && op < CORE_VEC_COUNT);
  return vec_ops[op].nsrc;
}

uint32_t core_tile_c0(const struct core_tile *t)
{
  if (t->c0) return t->c0;
  return (uint32_t)(32 * 8 / npu_dtype_bits((enum npu_dtype)t->dtype));
}

static uint32_t ceil_div(uint32_t a, uint32_t b)
{
  return (a + b - 1) / b;
}

uint32_t core_tile_ld(const struct core_tile *t)
{
  if (t->ld) return t->ld;
  uint32_t c0 = core_tile_c0(t);
  switch (t->layout) {
  case CORE_ND: return t->cols;
  case CORE_NZ: return ceil_div(t->rows, 16) * 16;
  case CORE_ZZ: return ceil_div(t->cols, c0);
  case CORE_ZN: return ceil_div(t->cols, 16);
  }
  NPU_PANIC("bad layout %d", t->layout);
}

uint64_t core_tile_offset(const struct core_tile *t, uint32_t r, uint32_t c)
{
  uint64_t c0 = core_tile_c0(t), ld = core_tile_ld(t);
  switch (t->layout) {
  case CORE_ND: return (uint64_t)r * ld + c;
  case CORE_NZ: return (c / c0) * ld * c0 + (uint64_t)r * c0 + c % c0;
  case CORE_ZZ: return ((r / 16) * ld + c / c0) * 16 * c0 + (r % 16) * c0 + c % c0;
  case CORE_ZN: return ((r / c0) * ld + c / 16) * c0 * 16 + (c % 16) * c0 + r % c0;
  }
  NPU_PANIC("bad layout %d", t->layout);
}

/* The span from the tile's address to the end of its last element (padding included): a
 * sub-tile of a larger fractal tile keeps the parent's ld, and ends before the parent does. */
uint64_t core_tile_bytes(const struct core_tile *t)
{
  uint64_t c0 = core_tile_c0(t), ld = core_tile_ld(t), elems;
  switch (t->layout) {
  case CORE_ND: elems = t->rows ? (uint64_t)(t->rows - 1) * ld + t->cols : 0; break;
  case CORE_NZ: elems = (ceil_div(t->cols, (uint32_t)c0) - 1) * ld * c0 + ceil_div(t->rows, 16) * 16 * c0; break;
  case CORE_ZZ: elems = ((ceil_div(t->rows, 16) - 1) * ld + ceil_div(t->cols, (uint32_t)c0)) * 16 * c0; break;
  case CORE_ZN: elems = ((ceil_div(t->rows, (uint32_t)c0) - 1) * ld + ceil_div(t->cols, 16)) * c0 * 16; break;
  default: NPU_PANIC("bad layout %d", t->layout);
  }
  return (elems * (uint64_t)npu_dtype_bits((enum npu_dtype)t->dtype) + 7) / 8;
}
