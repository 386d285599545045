/*
 * test_errors.c - program errors are reported, not simulated: buffer overflow, misalignment,
 * a path or dtype the chip lacks, more cores than it has, a wait that is never satisfied.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/err.h"
#include "tests/support/chip.h"
#include "cores/kernel.h"

static struct arch_system sys;
static struct mem_gm *gm;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
  gm = mem_gm_create();
}

static void teardown(void)
{
  mem_gm_destroy(gm);
}

TestSuite(errors, .init = setup, .fini = teardown, .timeout = 30);

static void (*body)(struct core_tp *t);

static void one_block(struct core_tp *t, void *ctx, uint64_t b)
{
  (void)ctx;
  (void)b;
  body(t);
}

/* Run body as a 1-block kernel in mode on chip; return the status and the message. */
static int try(const struct arch_chip *chip, enum core_mode mode, int dim, void (*fn)(struct core_tp *),
               enum core_fidelity f, char *msg)
{
  body = fn;
  struct core_kernel k = {.name = "k", .mode = mode, .block_dim = dim, .nblocks = 1, .block = one_block};
  struct core_result res;
  struct npu_diag d;
  npu_diag_clear(&d);
  struct core_launch_opts o = {.fidelity = f};
  int rc = core_launch_standalone(chip, gm, &k, &o, &res, &d);
  npu_diag_format(&d, msg, 2048);
  return rc;
}

static struct core_tile tile(uint8_t space, uint8_t layout, uint8_t dtype, uint64_t addr, uint32_t rows,
                             uint32_t cols)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .space = space, .layout = layout,
                            .dtype = dtype};
}

static uint64_t gm_addr;

static void l1_overflow(struct core_tp *t)
{
  struct core_tile src = tile(MEM_GM, CORE_ND, NPU_DT_FP16, gm_addr, 1, 32768);
  struct core_tile dst = tile(MEM_L1, CORE_ND, NPU_DT_FP16, 500 * 1024, 1, 32768);
  core_copy(t, &dst, &src);
}

Test(errors, buffer_overflow)
{
  char msg[2048];
  gm_addr = mem_gm_add(gm, "x", 65536, NULL);
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 1, l1_overflow, CORE_FIDELITY_ANALYTIC, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: destination tile: l1 overflow: [0x7d000, 0x8d000) does not fit in 524288 bytes");
}

static void misaligned(struct core_tp *t)
{
  struct core_tile a = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP16, 100, 16, 16);
  struct core_tile b = tile(MEM_L0B, CORE_ZN, NPU_DT_FP16, 0, 16, 16);
  struct core_tile c = tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, 16, 16);
  c.c0 = 16;
  core_mmad(t, &c, &a, &b, 16, 16, 16, true);
}

Test(errors, misaligned_address)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 1, misaligned, CORE_FIDELITY_ANALYTIC, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: L0A tile: l0a address 0x64 is not aligned to 512 bytes");
}

static void fp8_mmad(struct core_tp *t)
{
  struct core_tile a = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP8_E4M3, 0, 16, 32);
  struct core_tile b = tile(MEM_L0B, CORE_ZN, NPU_DT_FP8_E4M3, 0, 32, 16);
  struct core_tile c = tile(MEM_L0C, CORE_NZ, NPU_DT_FP32, 0, 16, 16);
  c.c0 = 16;
  core_mmad(t, &c, &a, &b, 16, 32, 16, true);
}

Test(errors, dtype_the_chip_lacks)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 1, fp8_mmad, CORE_FIDELITY_ANALYTIC, msg), NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "k: the cube of ascend-910b2 has no fp8_e4m3 input");
  struct arch_system s950;
  ts_load_system(&s950, "ascend-950pr", NULL);
  cr_assert_eq(try(&s950.chip, CORE_MODE_CUBE, 1, fp8_mmad, CORE_FIDELITY_ANALYTIC, msg), 0, "%s", msg);
}

static void gm_to_l0a(struct core_tp *t)
{
  struct core_tile src = tile(MEM_GM, CORE_ND, NPU_DT_FP16, gm_addr, 16, 16);
  struct core_tile dst = tile(MEM_L0A, CORE_ZZ, NPU_DT_FP16, 0, 16, 16);
  core_copy(t, &dst, &src);
}

Test(errors, path_the_chip_lacks)
{
  char msg[2048];
  gm_addr = mem_gm_add(gm, "x", 65536, NULL);
  struct arch_system s950;
  ts_load_system(&s950, "ascend-950pr", NULL);
  cr_assert_eq(try(&s950.chip, CORE_MODE_CUBE, 1, gm_to_l0a, CORE_FIDELITY_ANALYTIC, msg), NPU_EUNSUPPORTED);
  cr_assert_str_eq(msg, "k: ascend-950pr has no data path gm -> l0a");
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 1, gm_to_l0a, CORE_FIDELITY_ANALYTIC, msg), 0, "%s", msg);
}

static void vector_on_cube(struct core_tp *t)
{
  struct core_vec v = {.op = CORE_VEC_ADD, .dtype = NPU_DT_FP16, .repeat = 1, .mask = {~0ull, ~0ull}};
  core_vec(t, &v);
}

Test(errors, instruction_on_the_wrong_core)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 1, vector_on_cube, CORE_FIDELITY_ANALYTIC, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: vector instruction on a cube core, which has no V pipe");
}

static void nothing(struct core_tp *t)
{
  core_scalar(t, 1);
}

Test(errors, more_cores_than_the_chip_has)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_CUBE, 25, nothing, CORE_FIDELITY_ANALYTIC, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: block_dim 25 outside 1..24 (cube cores of ascend-910b2)");
  cr_assert_eq(try(&sys.chip, CORE_MODE_VECTOR, 48, nothing, CORE_FIDELITY_ANALYTIC, msg), 0, "%s", msg);
}

static void lonely_wait(struct core_tp *t)
{
  core_set_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 1);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 1);
  core_wait_flag(t, CORE_PIPE_MTE2, CORE_PIPE_V, 3);
}

Test(errors, deadlock_is_reported_with_the_waiting_pipe)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_VECTOR, 1, lonely_wait, CORE_FIDELITY_EVENT, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: deadlock: aiv0 pipe V waits for flag MTE2->V id 3 that is never satisfied");
}

static void vec_overflow(struct core_tp *t)
{
  struct core_vec v = {.op = CORE_VEC_ADD, .dtype = NPU_DT_FP32, .repeat = 255, .dst_blk = 1, .src0_blk = 1,
                       .src1_blk = 1, .dst_rep = 8, .src0_rep = 8, .src1_rep = 8,
                       .mask = {~0ull, 0}, .dst = 147456, .src0 = 0, .src1 = 0};
  core_vec(t, &v);
}

Test(errors, vector_overflow)
{
  char msg[2048];
  cr_assert_eq(try(&sys.chip, CORE_MODE_VECTOR, 1, vec_overflow, CORE_FIDELITY_ANALYTIC, msg), NPU_EINVAL);
  cr_assert_str_eq(msg, "k: vector add: destination [0x24000, 0x33f00) overflows the UB (UB holds 196608 bytes)");
}
