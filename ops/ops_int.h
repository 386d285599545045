/*
 * ops_int.h - internals shared by the operator files: the registry list and tile helpers.
 */
#ifndef NPUSIM_OPS_OPS_INT_H
#define NPUSIM_OPS_OPS_INT_H

#include "cores/kernel.h"
#include "ops/op.h"

#include "ops/list_moe.h"
#include "ops/list_vector.h"

/* Every operator, in `npusim kernel list` order. Families kept apart by their own lists. */
#define OPS_LIST(XX)     \
  XX(op_gemm)            \
  OPS_LIST_GEMM(XX)      \
  OPS_LIST_ATTENTION(XX) \
  OPS_LIST_VECTOR(XX)    \
  OPS_LIST_MOE(XX)

/* GEMM variants (grouped, MX and W4A8 all in gemm.c) and attention (attention.c; decode over a
 * paged KV cache: paged_attention.c; the gated delta rule, Gated DeltaNet's linear attention:
 * gated_delta.c). */
#define OPS_LIST_GEMM(XX) XX(op_grouped_gemm) XX(op_all_gather_matmul) XX(op_matmul_reduce_scatter) XX(op_matmul_all_reduce) \
  XX(op_alltoallv_grouped_matmul) XX(op_grouped_matmul_alltoallv)
#define OPS_LIST_ATTENTION(XX) XX(op_flash_attention) XX(op_paged_attention) XX(op_gated_delta)

#define OP__DECLARE(sym) extern const struct op_desc sym;
OPS_LIST(OP__DECLARE)
#undef OP__DECLARE

/*
 * gemm.c's tile program for operators that fuse a GEMM with other work (mc2.c): plan a plain
 * GEMM (C[m, n] = A[m, k] B[k, n], or B^T with trans_b; K not split, the default tiling, its tile
 * width the one a GEMM of `share` times the rows would take: `share` such GEMMs run at once), then
 * emit its blocks with A, B and C at addresses chosen per block, on the cube core of a launch
 * unit whose context starts with ops_gemm_unit_bytes() bytes of the GEMM's unit state.
 */
struct gemm;
int ops_gemm_plan(struct gemm **out, const struct arch_chip *chip, uint32_t m, uint32_t n, uint32_t k,
                  enum npu_dtype dtype, bool trans_b, int share, struct npu_diag *diag);
/* The same for a grouped GEMM (the experts of an MoE layer): group i multiplies rows[i] rows of A,
 * from the sum of the rows before it, by the i-th [k, n] matrix of B; blocks run group by group. */
int ops_gemm_grouped_plan(struct gemm **out, const struct arch_chip *chip, const uint32_t *rows, uint32_t groups,
                          uint32_t n, uint32_t k, enum npu_dtype dtype, struct npu_diag *diag);
/* Group sizes proportional to 1 / (i + 1)^skew, summing to m (largest remainders): grouped_gemm's
 * groups and the MoE MC2 operators' experts. */
void ops_group_sizes(uint32_t *rows, uint32_t groups, uint64_t m, double skew);
/* Its L1 tile (rows, columns): the gemm operator's tile_m and tile_n that tile as it does. */
void ops_gemm_tiles(const struct gemm *g, uint32_t *tile_m, uint32_t *tile_n);
/* The group of block b (0 for a plain GEMM) and the blocks of one group. */
uint32_t ops_gemm_block_group(const struct gemm *g, uint64_t b);
uint64_t ops_gemm_group_blocks(const struct gemm *g, uint32_t group);
void ops_gemm_free(struct gemm *g);
uint64_t ops_gemm_blocks(const struct gemm *g);
enum npu_dtype ops_gemm_out(const struct gemm *g);
size_t ops_gemm_unit_bytes(void);
void ops_gemm_unit_begin(struct core_tp *t, struct gemm *g);
void ops_gemm_unit_end(struct core_tp *t, struct gemm *g);
void ops_gemm_block_at(struct core_tp *t, struct gemm *g, uint64_t block, uint64_t a, uint64_t b, uint64_t c);

/* The combined list of operators once a plugin has been loaded (plugin.c; NULL before). */
const struct op_desc *const *op__plugin_all(size_t *n);

/* 0, or NPU_ECONFIG naming the first parameter of d's table that is malformed (no name, an
 * unknown type, a name given twice, a default its own parser refuses). */
int op__check_params(const struct op_desc *d, struct npu_diag *diag);

/* Backward rule shared by operators whose backward is costed by the forward call unchanged
 * (one input-gradient call, a copy of fwd); see struct op_bwd. */
int op__bwd_same(const struct op_call *fwd, struct op_call *out, enum op_grad *grad);

/* A tile descriptor. */
static inline struct core_tile ops_tile(enum mem_space space, enum core_layout layout,
                                        enum npu_dtype dtype, uint64_t addr, uint32_t rows,
                                        uint32_t cols, uint32_t ld)
{
  return (struct core_tile){.addr = addr, .rows = rows, .cols = cols, .ld = ld,
                            .space = (uint8_t)space, .layout = (uint8_t)layout,
                            .dtype = (uint8_t)dtype};
}

static inline uint32_t ops_ceil(uint64_t a, uint64_t b)
{
  return (uint32_t)((a + b - 1) / b);
}

static inline uint64_t ops_roundup(uint64_t a, uint64_t b)
{
  return (a + b - 1) / b * b;
}

/* Bytes of n elements of t (4-bit types pack two per byte). */
static inline uint64_t ops_bytes(enum npu_dtype t, uint64_t n)
{
  return (n * (uint64_t)npu_dtype_bits(t) + 7) / 8;
}

#endif
