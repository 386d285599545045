/*
 * test_functional.c - functional mode really moves and computes data: a GEMM tile through
 * L1 (ND->NZ), L0A/L0B (ZZ/ZN), the cube and FixPipe (NZ->ND with a cast), and vector
 * instructions over UB, checked against double-precision references.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "tests/support/chip.h"
#include "cores/kernel.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
}

TestSuite(functional, .init = setup, .timeout = 60);

static struct core_tile tile(uint8_t space, uint8_t layout, uint8_t dtype, uint64_t addr, uint32_t rows,
                             uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space, .layout = layout,
                            .dtype = dtype};
}

struct gemm {
  uint64_t a, b, c;
  uint32_t m, k, n;
};

/* One tile of C = A x B, fp16 in, fp32 accumulate, fp16 out, B given row-major K x N. */
static void gemm_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct gemm *g = ctx;
  (void)blk;
  struct core_tile ga = tile(MEM_GM, CORE_ND, NPU_DT_FP16, g->a, g->m, g->k);
  struct core_tile gb = tile(MEM_GM, CORE_ND, NPU_DT_FP16, g->b, g->k, g->n);
  struct core_tile l1a = tile(MEM_L1, CORE_NZ, NPU_DT_FP16, 0, g->m, g->k);
  struct core_tile l1b = tile(MEM_L1, CORE_NZ, NPU_DT_FP16, 65536, g->k, g->n);
  struct core_tile l0a = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP16, 0, g->m, g->k);
  struct core_tile l0b = tile(MEM_L0B, CORE_ZN, NPU_DT_FP16, 0, g->k, g->n);
  struct core_tile l0c = tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, g->m, g->n);
  l0c.c0 = 16;
  struct core_tile gc = tile(MEM_GM, CORE_ND, NPU_DT_FP16, g->c, g->m, g->n);
  core_copy(t, &l1a, &ga);
  core_copy(t, &l1b, &gb);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 0);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_MTE1, 0);
  core_copy(t, &l0a, &l1a);
  core_copy(t, &l0b, &l1b);
  core_set_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 0);
  core_wait_flag(t, CORE_PIPE_MTE1, CORE_PIPE_M, 0);
  /* two k halves, accumulating, to exercise init / accumulate */
  uint32_t kh = g->k / 2;
  struct core_tile a0 = l0a, b0 = l0b;
  core_mmad(t, &l0c, &a0, &b0, g->m, kh, g->n, true);
  struct core_tile a1 = l0a, b1 = l0b;
  a1.addr += (uint64_t)(kh / 16) * 16 * 16 * 2;          /* next fractal columns of ZZ */
  a1.cols = g->k - kh;
  a1.ld = (g->k + 15) / 16;
  b1.addr += (uint64_t)(kh / 16) * ((g->n + 15) / 16) * 16 * 16 * 2; /* next fractal rows of ZN */
  b1.rows = g->k - kh;
  core_mmad(t, &l0c, &a1, &b1, g->m, g->k - kh, g->n, false);
  core_set_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_wait_flag(t, CORE_PIPE_M, CORE_PIPE_FIX, 0);
  core_copy(t, &gc, &l0c);
}

static void fill(uint16_t *x, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    double v = ((double)(seed >> 8 & 0xffff) / 65536.0 - 0.5) * 4;
    x[i] = fmt_fp16_from_double(v);
  }
}

static void run_gemm(enum core_fidelity f)
{
  struct gemm g = {.m = 40, .k = 64, .n = 48};
  uint16_t *a = malloc(sizeof *a * g.m * g.k), *b = malloc(sizeof *b * g.k * g.n), *c = calloc(g.m * g.n, 2);
  fill(a, g.m * g.k, 1);
  fill(b, g.k * g.n, 2);
  struct mem_gm *gm = mem_gm_create();
  g.a = mem_gm_add(gm, "a", g.m * g.k * 2, a);
  g.b = mem_gm_add(gm, "b", g.k * g.n * 2, b);
  g.c = mem_gm_add(gm, "c", g.m * g.n * 2, c);
  struct core_kernel k = {.name = "gemm", .mode = CORE_MODE_CUBE, .block_dim = 1, .nblocks = 1, .ctx = &g,
                          .block = gemm_block};
  struct core_launch_opts o = {.fidelity = f, .functional = true};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  char msg[2048];
  int rc = core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  double worst = 0;
  for (uint32_t i = 0; i < g.m; i++)
    for (uint32_t j = 0; j < g.n; j++) {
      double ref = 0;
      for (uint32_t p = 0; p < g.k; p++)
        ref += fmt_fp16_to_double(a[i * g.k + p]) * fmt_fp16_to_double(b[p * g.n + j]);
      double got = fmt_fp16_to_double(c[i * g.n + j]);
      double err = fabs(got - ref) / fmax(1.0, fabs(ref));
      if (err > worst) worst = err;
    }
  /* fp32 accumulation of 64 products, then one fp16 rounding: within 2^-10 relative */
  cr_assert_leq(worst, 1.0 / 1024, "worst relative error %g", worst);
  cr_assert_eq(res.cube_macs, (uint64_t)g.m * g.k * g.n);
  mem_gm_destroy(gm);
  free(a);
  free(b);
  free(c);
}

Test(functional, gemm_tile_through_the_cube_event)
{
  run_gemm(CORE_FIDELITY_EVENT);
}

Test(functional, gemm_tile_through_the_cube_analytic)
{
  run_gemm(CORE_FIDELITY_ANALYTIC);
}

struct vec_case {
  uint64_t in, out;
  uint32_t n;
};

/* out = sum over rows of exp(x * 0.5) for 8 rows of 64 fp32, plus max, through UB. */
static void vec_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct vec_case *v = ctx;
  (void)blk;
  struct core_tile g = tile(MEM_GM, CORE_ND, NPU_DT_FP32, v->in, 1, v->n);
  struct core_tile u = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 0, 1, v->n);
  core_copy(t, &u, &g);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  uint16_t rep = (uint16_t)(v->n / 64);
  struct core_vec m = {.op = CORE_VEC_MULS, .dtype = NPU_DT_FP32, .repeat = rep, .dst_blk = 1, .src0_blk = 1,
                       .dst_rep = 8, .src0_rep = 8, .mask = {~0ull, 0}, .dst = 65536, .src0 = 0, .scalar = 0.5};
  core_vec(t, &m);
  struct core_vec e = m;
  e.op = CORE_VEC_EXP;
  e.src0 = 65536;
  e.dst = 65536;
  core_vec(t, &e);
  struct core_vec s = {.op = CORE_VEC_REDUCE_SUM, .dtype = NPU_DT_FP32, .repeat = rep, .src0_blk = 1,
                       .src0_rep = 8, .mask = {~0ull, 0}, .dst = 131072, .src0 = 65536};
  core_vec(t, &s);
  struct core_vec x = s;
  x.op = CORE_VEC_REDUCE_MAX;
  x.src0 = 0;
  x.dst = 131072 + 256;
  core_vec(t, &x);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  struct core_tile o1 = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 131072, 1, rep);
  struct core_tile o2 = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 131072 + 256, 1, rep);
  struct core_tile g1 = tile(MEM_GM, CORE_ND, NPU_DT_FP32, v->out, 1, rep);
  struct core_tile g2 = tile(MEM_GM, CORE_ND, NPU_DT_FP32, v->out + 4u * rep, 1, rep);
  core_copy(t, &g1, &o1);
  core_copy(t, &g2, &o2);
}

Test(functional, vector_exp_reduce_over_ub)
{
  struct vec_case v = {.n = 512};
  float in[512], out[16] = {0};
  for (int i = 0; i < 512; i++) in[i] = (float)((i % 37) * 0.1 - 1.5);
  struct mem_gm *gm = mem_gm_create();
  v.in = mem_gm_add(gm, "in", sizeof in, in);
  v.out = mem_gm_add(gm, "out", sizeof out, out);
  struct core_kernel k = {.name = "vec", .mode = CORE_MODE_VECTOR, .block_dim = 1, .nblocks = 1, .ctx = &v,
                          .block = vec_block};
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT, .functional = true};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  for (int r = 0; r < 8; r++) {
    double sum = 0, mx = -INFINITY;
    for (int i = 0; i < 64; i++) {
      float x = in[r * 64 + i];
      float y = (float)exp((double)(float)(x * 0.5f));
      sum += y;
      mx = fmax(mx, x);
    }
    cr_assert_float_eq(out[r], sum, 1e-5 * sum, "row %d sum %g vs %g", r, out[r], sum);
    cr_assert_eq(out[8 + r], (float)mx);
  }
  mem_gm_destroy(gm);
}

struct sort_case {
  uint64_t in, out;
};

/* top-k by sort32 over 4 groups then one 4-way merge. */
static void sort_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct sort_case *s = ctx;
  (void)blk;
  struct core_tile g = tile(MEM_GM, CORE_ND, NPU_DT_FP32, s->in, 1, 128);
  struct core_tile u = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 0, 1, 128);
  struct core_tile gi = tile(MEM_GM, CORE_ND, NPU_DT_INT32, s->in + 512, 1, 128);
  struct core_tile ui = tile(MEM_UB, CORE_ND, NPU_DT_INT32, 1024, 1, 128);
  core_copy(t, &u, &g);
  core_copy(t, &ui, &gi);
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  struct core_vec v = {.op = CORE_VEC_SORT32, .dtype = NPU_DT_FP32, .repeat = 4, .dst_rep = 8, .src0_rep = 4,
                       .src1_rep = 4, .dst = 4096, .src0 = 0, .src1 = 1024};
  core_vec(t, &v);
  struct core_vec m = {.op = CORE_VEC_MRGSORT, .dtype = NPU_DT_FP32, .dst = 8192, .src0 = 4096, .aux = 4, .count = 32};
  core_vec(t, &m);
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  struct core_tile o = tile(MEM_UB, CORE_ND, NPU_DT_INT32, 8192, 1, 256);
  struct core_tile go = tile(MEM_GM, CORE_ND, NPU_DT_INT32, s->out, 1, 256);
  core_copy(t, &go, &o);
}

Test(functional, sort32_and_merge_give_a_sorted_top_k)
{
  struct { float v[128]; int32_t idx[128]; } in;
  struct { float score; int32_t index; } out[128];
  for (int i = 0; i < 128; i++) {
    in.v[i] = (float)((i * 53) % 128) - 64.0f;
    in.idx[i] = i;
  }
  struct mem_gm *gm = mem_gm_create();
  struct sort_case s;
  s.in = mem_gm_add(gm, "in", sizeof in, &in);
  s.out = mem_gm_add(gm, "out", sizeof out, out);
  struct core_kernel k = {.name = "sort", .mode = CORE_MODE_VECTOR, .block_dim = 1, .nblocks = 1, .ctx = &s,
                          .block = sort_block};
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  for (int i = 0; i < 128; i++) {
    cr_assert_eq(out[i].score, 63.0f - i, "rank %d: %g", i, out[i].score);
    cr_assert_eq(in.v[out[i].index], out[i].score);
  }
  mem_gm_destroy(gm);
}

struct gather_case {
  uint64_t table, idx, out;
};

/* out[i] = table[idx[i]] * max(table[idx[i]]): rows gathered by index, scaled by a scalar the
 * vector unit computed (read back from UB at run time). */
static void gather_block(struct core_tp *t, void *ctx, uint64_t blk)
{
  struct gather_case *g = ctx;
  (void)blk;
  struct core_tile gi = tile(MEM_GM, CORE_ND, NPU_DT_INT32, g->idx, 1, 8);
  struct core_tile ui = tile(MEM_UB, CORE_ND, NPU_DT_INT32, 0, 1, 8);
  core_copy(t, &ui, &gi);
  core_pipe_barrier(t, CORE_PIPE_MTE2);
  for (int i = 0; i < 4; i++) {
    struct core_copy cp = {.scale = 1.0f, .fb_scale = UINT64_MAX, .indexed = true, .index_ub = 4u * i,
                           .index_stride = 64 * 4};
    cp.src = tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->table, 1, 64);
    cp.dst = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 1024 + 256u * i, 1, 64);
    core_copy_ex(t, &cp);
  }
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 0);
  struct core_vec mx = {.op = CORE_VEC_REDUCE_MAX, .dtype = NPU_DT_FP32, .repeat = 4, .src0_blk = 1,
                        .src0_rep = 8, .mask = {~0ull, 0}, .dst = 65536, .src0 = 1024};
  core_vec(t, &mx);
  struct core_vec s = {.op = CORE_VEC_MULS, .dtype = NPU_DT_FP32, .repeat = 1, .dst_blk = 1, .src0_blk = 1,
                       .dst_rep = 8, .src0_rep = 8, .mask = {~0ull, 0}, .scalar_from_ub = true};
  for (int i = 0; i < 4; i++) {
    s.dst = 131072 + 256u * i;
    s.src0 = 1024 + 256u * i;
    s.scalar_ub = 65536 + 4u * i;
    core_vec(t, &s);
  }
  core_set_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  core_wait_flag(t, CORE_PIPE_V, CORE_PIPE_MTE3, 0);
  struct core_tile uo = tile(MEM_UB, CORE_ND, NPU_DT_FP32, 131072, 1, 256);
  struct core_tile go = tile(MEM_GM, CORE_ND, NPU_DT_FP32, g->out, 1, 256);
  core_copy(t, &go, &uo);
}

Test(functional, indexed_gather_and_scalar_from_ub)
{
  float table[10][64], out[4][64];
  int32_t idx[8] = {7, 2, 9, 2, 0, 0, 0, 0};
  for (int r = 0; r < 10; r++)
    for (int c = 0; c < 64; c++) table[r][c] = (float)(r * 100 + c) / 1000.0f;
  struct mem_gm *gm = mem_gm_create();
  struct gather_case g = {mem_gm_add(gm, "table", sizeof table, table), mem_gm_add(gm, "idx", sizeof idx, idx),
                          mem_gm_add(gm, "out", sizeof out, out)};
  struct core_kernel k = {.name = "gather", .mode = CORE_MODE_VECTOR, .block_dim = 1, .nblocks = 1, .ctx = &g,
                          .block = gather_block};
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_EVENT, .functional = true};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(core_launch_standalone(&sys.chip, gm, &k, &o, &res, &d), 0, "%s", d.msg);
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < 64; c++)
      cr_assert_eq(out[i][c], table[idx[i]][c] * table[idx[i]][63], "row %d col %d", i, c);
  mem_gm_destroy(gm);
}
