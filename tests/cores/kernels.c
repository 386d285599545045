/* kernels.c - tile programs with known answers for the cores tests; see kernels.h. */
#include "tests/cores/kernels.h"

#include <stdbool.h>
#include <string.h>

static struct core_tile tile(uint8_t space, uint8_t layout, uint8_t dtype, uint64_t addr,
                             uint32_t rows, uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space,
                            .layout = layout, .dtype = dtype};
}

static void stream_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct tk_stream *s = ctx;
  uint32_t elems = (uint32_t)(s->bytes / 2);
  struct core_tile src = tile(MEM_GM, CORE_ND, NPU_DT_FP16, s->gm + b * s->bytes, 1, elems);
  struct core_tile dst = tile(MEM_L1, CORE_ND, NPU_DT_FP16, ((b / s->dim) % 2) * s->bytes, 1, elems);
  core_copy(t, &dst, &src);
}

void tk_stream_kernel(struct core_kernel *k, struct tk_stream *s, int cores, uint64_t blocks)
{
  s->dim = (uint64_t)cores;
  *k = (struct core_kernel){.name = "stream", .mode = CORE_MODE_CUBE, .block_dim = cores,
                            .nblocks = blocks, .ctx = s, .block = stream_block};
}

static void cube_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  struct core_tile a = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP16, 0, 128, 256);
  struct core_tile bb = tile(MEM_L0B, CORE_ZN, NPU_DT_FP16, 0, 256, 128);
  struct core_tile c = tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, 128, 128);
  c.c0 = 16;
  core_mmad(t, &c, &a, &bb, 128, 256, 128, b == 0);
}

void tk_cube_kernel(struct core_kernel *k, struct tk_cube *c, int cores, uint64_t blocks)
{
  *k = (struct core_kernel){.name = "cube", .mode = CORE_MODE_CUBE, .block_dim = cores,
                            .nblocks = blocks, .ctx = c, .block = cube_block};
}

/* UB layout: inputs in the first 64 KiB, outputs in the next, so that reads and writes of
 * one repeat never share a bank. Single-buffered, the tile is computed in place and every stage
 * waits for the one before: load, compute, store, load, ... */
#define IN_BASE 0u
#define OUT_BASE 65536u

static void pipe_begin(struct core_tp *t, void *ctx)
{
  struct tk_pipeline *p = ctx;
  for (int i = 0; i < p->buffers; i++) {
    if (p->buffers == 1) {
      core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, i);
      continue;
    }
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, i);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, i);
  }
}

static void pipe_end(struct core_tp *t, void *ctx)
{
  struct tk_pipeline *p = ctx;
  for (int i = 0; i < p->buffers; i++) {
    if (p->buffers == 1) {
      core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, i);
      continue;
    }
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, i);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, i);
  }
}

static void pipe_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct tk_pipeline *p = ctx;
  bool single = p->buffers == 1;
  /* alternate buffers along this unit's own sequence (blocks u, u + dim, u + 2 dim, ...) */
  int buf = (int)((b / (uint64_t)p->dim) % (uint64_t)p->buffers);
  uint64_t bytes = (uint64_t)p->elems * 2;
  uint64_t in = IN_BASE + (uint64_t)buf * bytes, out = single ? in : OUT_BASE + (uint64_t)buf * bytes;
  struct core_tile g_in = tile(MEM_GM, CORE_ND, NPU_DT_FP16, p->in + b * bytes, 1, p->elems);
  struct core_tile g_out = tile(MEM_GM, CORE_ND, NPU_DT_FP16, p->out + b * bytes, 1, p->elems);
  struct core_tile u_in = tile(MEM_UB, CORE_ND, NPU_DT_FP16, in, 1, p->elems);
  struct core_tile u_out = tile(MEM_UB, CORE_ND, NPU_DT_FP16, out, 1, p->elems);
  if (single)
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_MTE2, buf);
  else
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, buf);
  core_copy(t, &u_in, &g_in);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, buf);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, buf);
  if (!single) core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, buf);
  struct core_vec v = {.op = (uint8_t)p->vec_op, .dtype = NPU_DT_FP16,
                       .repeat = (uint16_t)(p->elems / 128), .dst_blk = 1, .src0_blk = 1,
                       .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                       .mask = {~0ull, ~0ull}, .dst = out, .src0 = in, .src1 = in, .scalar = 2.0};
  for (int i = 0; i < (p->vecs > 0 ? p->vecs : 1); i++) core_vec(t, &v);
  if (!single) core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, buf);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, buf);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, buf);
  core_copy(t, &g_out, &u_out);
  core_set_flag(t, CORE_PIPE_MTE3, single ? CORE_PIPE_MTE2 : CORE_PIPE_V, buf);
}

void tk_pipeline_kernel(struct core_kernel *k, struct tk_pipeline *p, int cores, uint64_t blocks)
{
  p->dim = cores;
  *k = (struct core_kernel){.name = "pipeline", .mode = CORE_MODE_VECTOR, .block_dim = cores,
                            .nblocks = blocks, .ctx = p, .unit_begin = pipe_begin,
                            .unit_end = pipe_end, .block = pipe_block};
}

static void bank_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct tk_bank *x = ctx;
  (void)b;
  struct core_vec v = {.op = x->exp ? CORE_VEC_EXP : CORE_VEC_ADD, .dtype = NPU_DT_FP16, .repeat = 255,
                       .dst_blk = 1, .src0_blk = 1, .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                       .mask = {~0ull, ~0ull}, .dst = x->dst ? x->dst : 131072, .src0 = 0, .src1 = x->src1};
  core_vec(t, &v);
}

void tk_bank_kernel(struct core_kernel *k, struct tk_bank *b)
{
  *k = (struct core_kernel){.name = "bank", .mode = CORE_MODE_VECTOR, .block_dim = 1,
                            .nblocks = 1, .ctx = b, .block = bank_block};
}
