/* vecutil.c - fill and cast kernels over GM buffers; see vecutil.h. */
#include "ops/vecutil.h"

#include <string.h>

#include "ops/ops_int.h"

#define TILE_BYTES 16384u /* per buffer; two buffers in, two out */

struct stream {
  uint64_t src, dst;
  enum npu_dtype st, dt;
  uint64_t count;       /* elements */
  uint32_t per_tile;    /* elements per tile */
  double value;
  bool fill;
  int dim;
};

static uint32_t es_of(enum npu_dtype t)
{
  return (uint32_t)npu_dtype_bits(t) / 8;
}

void ops_stream2_begin(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int i = 0; i < 2; i++) {
    core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, i);
    core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, i);
  }
}

void ops_stream2_end(struct core_tp *t, void *ctx)
{
  (void)ctx;
  for (int i = 0; i < 2; i++) {
    core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, i);
    core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, i);
  }
}

/* One tile: load (cast only), convert or fill in UB, store. UB: inputs at 0, outputs at 64 KiB. */
static void s_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct stream *s = ctx;
  int buf = (int)((b / (uint64_t)s->dim) % 2);
  uint64_t first = b * s->per_tile;
  uint32_t n = (uint32_t)(s->count - first < s->per_tile ? s->count - first : s->per_tile);
  uint64_t in = (uint64_t)buf * TILE_BYTES * 2, out = 65536 + (uint64_t)buf * TILE_BYTES * 2;
  uint32_t ies = es_of(s->st), oes = es_of(s->dt);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, buf);
  if (!s->fill) {
    struct core_tile g = ops_tile(MEM_GM, CORE_ND, s->st, s->src + first * ies, 1, n, 0);
    struct core_tile u = ops_tile(MEM_UB, CORE_ND, s->st, in, 1, n, 0);
    core_copy(t, &u, &g);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, buf);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, buf);
  core_wait_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, buf);
  uint32_t wide = ies > oes ? ies : oes;
  uint32_t per_rep = s->fill ? 256 / oes : 256 / wide;
  uint32_t reps = ops_ceil(n, per_rep);
  for (uint32_t done = 0; done < reps;) {
    uint32_t r = reps - done > 255 ? 255 : reps - done;
    struct core_vec v = {.op = s->fill ? CORE_VEC_DUP : CORE_VEC_CAST, .dtype = s->fill ? s->dt : s->st,
                         .dst_dtype = s->dt, .repeat = (uint16_t)r, .dst_blk = 1, .src0_blk = 1,
                         .dst_rep = (uint16_t)(per_rep * oes / 32), .src0_rep = (uint16_t)(per_rep * ies / 32),
                         .mask = {~0ull, ~0ull}, .scalar = s->value};
    if (per_rep < 128) v.mask[1] = 0;
    if (per_rep < 64) v.mask[0] = (1ull << per_rep) - 1;
    v.dst = out + (uint64_t)done * per_rep * oes;
    v.src0 = in + (uint64_t)done * per_rep * ies;
    if (!v.dst_rep) v.dst_rep = 1;
    if (!v.src0_rep) v.src0_rep = 1;
    core_vec(t, &v);
    done += r;
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE2, buf);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, buf);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, buf);
  struct core_tile u = ops_tile(MEM_UB, CORE_ND, s->dt, out, 1, n, 0);
  struct core_tile g = ops_tile(MEM_GM, CORE_ND, s->dt, s->dst + first * oes, 1, n, 0);
  core_copy(t, &g, &u);
  core_set_flag(t, CORE_PIPE_MTE3, CORE_PIPE_V, buf);
}

static void add(struct op_exec *x, struct stream *s, const char *name)
{
  const struct arch_chip *chip = op_chip(x);
  uint32_t wide = es_of(s->st) > es_of(s->dt) ? es_of(s->st) : es_of(s->dt);
  s->per_tile = TILE_BYTES / wide;
  uint64_t blocks = (s->count + s->per_tile - 1) / s->per_tile;
  int cores = chip->org == ARCH_ORG_SPLIT ? chip->aiv_count : chip->aic_count;
  s->dim = blocks < (uint64_t)cores ? (int)blocks : cores;
  struct core_kernel k = {.name = name, .mode = CORE_MODE_VECTOR, .block_dim = s->dim,
                          .nblocks = blocks, .ctx = s, .unit_begin = ops_stream2_begin, .unit_end = ops_stream2_end,
                          .block = s_block};
  op_kernel(x, &k);
}

void ops_fill(struct op_exec *x, uint64_t dst, enum npu_dtype dtype, uint64_t count, double value)
{
  struct stream *s = op_alloc(x, sizeof *s);
  *s = (struct stream){.dst = dst, .st = dtype, .dt = dtype, .count = count, .value = value, .fill = true};
  add(x, s, "fill");
}

void ops_cast(struct op_exec *x, uint64_t src, enum npu_dtype st, uint64_t dst,
              enum npu_dtype dt, uint64_t count)
{
  struct stream *s = op_alloc(x, sizeof *s);
  *s = (struct stream){.src = src, .dst = dst, .st = st, .dt = dt, .count = count};
  add(x, s, "cast");
}
