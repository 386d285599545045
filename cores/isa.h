/*
 * isa.h - the instruction set of the modelled DaVinci AI core, as Ascend C programs see it.
 *
 * Pipes (each runs its instructions in order; pipes run concurrently):
 *   S     scalar unit                      MTE2  GM -> L1 / L0A / L0B / UB
 *   MTE1  L1 -> L0A / L0B                  M     cube: L0A x L0B -> L0C
 *   FIX   FixPipe: L0C -> GM / L1 / UB      V     vector unit over UB
 *   MTE3  UB -> GM (and UB -> L1 on 950)
 * A cube core (AIC) has S, MTE2, MTE1, M, FIX; a vector core (AIV) has S, MTE2, V, MTE3; a
 * coupled core (910A, GPU SM) has all seven.
 *
 * Data is addressed as tiles: a logical rows x cols matrix of one dtype at an address of one
 * space, in one layout:
 *   ND    row-major, ld = row stride in elements (>= cols)
 *   NZ    column strips c0 elements wide, each holding ld rows (ld a multiple of 16):
 *         element (r, c) at (c / c0) * ld * c0 + r * c0 + c % c0  -- the L1 layout; with c0 = 16
 *         it is also the L0C layout of 16 x 16 accumulator fractals
 *   ZZ    16 x c0 fractals laid row-major over the fractal grid, row-major inside (L0A):
 *         ((r / 16) * ld + c / c0) * 16 * c0 + (r % 16) * c0 + c % c0, ld = fractal columns
 *   ZN    c0 x 16 fractals laid row-major over the fractal grid, column-major inside (L0B):
 *         ((r / c0) * ld + c / 16) * c0 * 16 + (c % 16) * c0 + r % c0, ld = fractal columns
 * where c0 = 32 bytes / element size (16 for fp16, 32 for int8, 8 for fp32) unless given.
 * Copies into fractal layouts zero the padding, so a cube never multiplies stale data.
 */
#ifndef NPUSIM_CORES_ISA_H
#define NPUSIM_CORES_ISA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/dtype.h"
#include "memory/space.h"

enum core_pipe {
  CORE_PIPE_S, CORE_PIPE_MTE2, CORE_PIPE_MTE1, CORE_PIPE_M, CORE_PIPE_FIX, CORE_PIPE_V,
  CORE_PIPE_MTE3, CORE_PIPE_COUNT
};

enum core_layout { CORE_ND, CORE_NZ, CORE_ZZ, CORE_ZN };

struct core_tile {
  uint64_t addr;     /* byte address in space */
  uint32_t rows;     /* logical rows */
  uint32_t cols;     /* logical columns */
  uint32_t ld;       /* see the layouts above; 0 = the tight value */
  uint8_t space;     /* enum mem_space */
  uint8_t layout;    /* enum core_layout */
  uint8_t dtype;     /* enum npu_dtype */
  uint8_t c0;        /* fractal / strip width in elements; 0 = 32 bytes / element size */
};

/* Vector operations over UB. */
#define CORE_VEC_OP_MAP(XX)                                                          \
  XX(ADD, "add", 2, 0) XX(SUB, "sub", 2, 0) XX(MUL, "mul", 2, 0) XX(DIV, "div", 2, 1) \
  XX(MAX, "max", 2, 0) XX(MIN, "min", 2, 0)                                          \
  XX(ADDS, "adds", 1, 0) XX(MULS, "muls", 1, 0) XX(MAXS, "maxs", 1, 0)               \
  XX(MINS, "mins", 1, 0)                                                             \
  XX(EXP, "exp", 1, 1) XX(LN, "ln", 1, 1) XX(RECIP, "recip", 1, 1)                   \
  XX(SQRT, "sqrt", 1, 1) XX(RSQRT, "rsqrt", 1, 1) XX(ABS, "abs", 1, 0)               \
  XX(RELU, "relu", 1, 0) XX(NEG, "neg", 1, 0)                                        \
  XX(CAST, "cast", 1, 0) XX(DUP, "dup", 0, 0) XX(COPY, "copy", 1, 0)                 \
  XX(CMP, "cmp", 2, 0) XX(CMPS, "cmps", 1, 0) XX(SELECT, "select", 2, 0)             \
  XX(REDUCE_SUM, "reduce_sum", 1, 0) XX(REDUCE_MAX, "reduce_max", 1, 0)              \
  XX(SORT32, "sort32", 2, 0) XX(MRGSORT, "mrgsort", 0, 0) XX(BRCB, "brcb", 1, 0)

enum core_vec_op {
#define CORE__VEC_ENUM(e, name, nsrc, transc) CORE_VEC_##e,
  CORE_VEC_OP_MAP(CORE__VEC_ENUM)
#undef CORE__VEC_ENUM
  CORE_VEC_COUNT
};

enum core_cmp { CORE_CMP_LT, CORE_CMP_GT, CORE_CMP_LE, CORE_CMP_GE, CORE_CMP_EQ, CORE_CMP_NE };

/*
 * One vector instruction, Ascend C level-0 style: `repeat` repeats of 8 blocks of 32 bytes;
 * block strides and repeat strides are in 32-byte blocks; the mask selects elements of a
 * repeat (bit i = element i; 128 bits cover fp16, 64 fp32). A masked-off element keeps its
 * destination value. Sources and destination are UB byte addresses.
 *   binary      dst = src0 op src1                    (add sub mul div max min)
 *   scalar      dst = src0 op scalar                  (adds muls maxs mins)
 *   unary       dst = op(src0)                        (exp ln recip sqrt rsqrt abs relu neg copy)
 *   cast        dst (dst_dtype) = src0 (dtype), rounded to nearest even; types of 8 bits or
 *               more, and fp16 -> int4 (Ascend C Cast half -> int4b_t, packed two per byte)
 *   dup         dst = scalar
 *   cmp / cmps  bit i of the mask at dst = src0 cmp (src1 | scalar); dst gets repeat*mask bits
 *   select      dst = bit ? src0 : src1, bits read from UB at aux
 *   reduce_*    dst[r] = sum / max over the masked elements of repeat r (dense output)
 *   sort32      per repeat, sorts 32 (score = src0 element, index = uint32 from src1) pairs by
 *               score, descending, into dst as 8-byte (fp32 score, uint32 index) proposals
 *   mrgsort     merges `aux` (2..4) sorted proposal lists of `count` proposals each, laid
 *               out one after another from src0, into dst (descending)
 *   brcb        per repeat, 8 consecutive elements of src0 each fill one 32-byte block of dst
 *               (block stride dst_blk): per-row scalars broadcast for a following op that reads
 *               them with block stride 0 (Ascend C Brcb)
 */
struct core_vec {
  uint8_t op;                  /* enum core_vec_op */
  uint8_t dtype;               /* element type of the sources */
  uint8_t dst_dtype;           /* cast only: result type (else == dtype) */
  uint8_t cmp;                 /* enum core_cmp */
  uint16_t repeat;             /* 1..repeat_max */
  uint16_t dst_blk, src0_blk, src1_blk; /* block strides, in 32-byte blocks */
  uint16_t dst_rep, src0_rep, src1_rep; /* repeat strides, in 32-byte blocks */
  uint64_t mask[2];            /* element mask of one repeat */
  uint64_t dst, src0, src1;    /* UB addresses */
  uint64_t aux;                /* select: mask address; mrgsort: list count */
  uint32_t count;              /* mrgsort: proposals per list */
  double scalar;               /* scalar operand */
  bool scalar_from_ub;         /* the scalar operand is read from UB at scalar_ub when the
                                  instruction runs (Ascend C: GetValue on the scalar unit, after
                                  a V -> S sync, then Muls/Adds/...); else `scalar` */
  uint64_t scalar_ub;          /* UB address of that scalar (element of dtype) */
};

enum core_op {
  CORE_OP_COPY,      /* tile copy between spaces (with layout change, cast) */
  CORE_OP_MMAD,      /* cube matrix multiply-accumulate */
  CORE_OP_VEC,       /* vector instruction */
  CORE_OP_SCALAR,    /* scalar work of some cycles */
  CORE_OP_SET_FLAG,  /* set event (src pipe -> dst pipe, id): in the src pipe */
  CORE_OP_WAIT_FLAG, /* wait for it: in the dst pipe */
  CORE_OP_BARRIER,   /* pipe_barrier(pipe): earlier instructions of this pipe have landed */
  CORE_OP_FENCE,     /* pipe_barrier(PIPE_ALL) on this core: a marker in every pipe */
  CORE_OP_XSET,      /* cross-core set (between the cube and vector cores of one AI core) */
  CORE_OP_XWAIT,     /* cross-core wait */
  CORE_OP_SYNC_ALL,  /* all-core barrier: a marker in every pipe of every core of the launch */
  CORE_OP_NOTIFY,    /* add one to a device's signal (u.sig) */
  CORE_OP_NOTIFY_WAIT, /* wait until a signal of this device has u.sig.count notifies */
};

/* A notify or notify wait: the signal (device, id) and, for a wait, the notifies it needs. */
struct core_sig {
  uint16_t rank;
  uint16_t id;
  uint32_t count;
};

struct core_copy {
  struct core_tile src, dst;
  bool transpose;     /* dst(c, r) = src(r, c) */
  bool relu;          /* FixPipe: ReLU on the fly */
  float scale;        /* FixPipe: multiply before the cast (quantize / dequantize) */
  uint64_t fb_scale;  /* FixPipe: per-column fp32 scales at this FB address; UINT64_MAX none */
  bool atomic_add;    /* GM destination: add to what is there (Ascend C SetAtomicAdd) */
  bool indexed;       /* the GM tile's address is addr + index x index_stride, the index a
                         uint32 read from UB at index_ub when the copy runs (a row gather or
                         scatter with scalar-computed addresses); timing-only runs, which have
                         no data, use index 0 */
  uint64_t index_ub;
  uint64_t index_stride;
  uint8_t multicast;  /* GM read into L1 that the cores of a cluster (this many, at most
                         chip.dma.multicast) issue together for the same tile, as Hopper's TMA
                         multicast: each member's port receives the whole tile, but L2 serves
                         the hit bytes once for the cluster (1/multicast per member); misses
                         are fetched as usual. 0 or 1: an ordinary copy */
};

/*
 * A cube step. With mx set it is an MX (OCP Microscaling) step, as the 950's MmadMx: a and b
 * hold the elements (fp8_e4m3, fp8_e5m2 or fp4_e2m1), and one E8M0 scale code (uint8,
 * 2^(code - 127), 0xFF NaN) per 32 elements along K scales them:
 *   at sa in L0A, the m x ceil(k / 32) scales of a's rows, in ZZ fractals of 16 x 2 (c0 = 2);
 *   at sb in L0B, the ceil(k / 32) x n scales of b's columns, in ZN fractals of 2 x 16 (c0 = 2);
 * both tight (core_mx_scales gives the tiles), and c += sum over K of
 * (a(i, p) x 2^sa(i, p / 32)) x (b(p, j) x 2^sb(p / 32, j)), accumulated in fp32 at the element
 * type's MAC rate. These are the 950's scale fractal shapes (Ascend C asc_copy_l12l0a_mx: a
 * (16, 2) scale fractal per (16, 32) fp8 L0A fractal; catlass v1.6: scaleA zZ, scaleB nN). The
 * hardware keeps them in a side area of 1/16 of L0A / L0B addressed through the data's address;
 * this model has no such space, so a kernel places the scale tiles in L0A / L0B next to the
 * data, where they take room the data then cannot use.
 */
struct core_mmad {
  struct core_tile a, b, c; /* L0A (ZZ), L0B (ZN), L0C (NZ, c0 16) */
  uint32_t m, k, n;
  uint8_t dtype;            /* input type of a and b */
  bool init;                /* true: c = a x b; false: c += a x b */
  bool mx;                  /* scale a and b by the E8M0 tiles at sa and sb */
  uint64_t sa, sb;          /* mx: L0A / L0B addresses of the scale tiles */
};

/* The scale tile of an MX mmad's a (which 0) or b (which 1), as struct core_mmad lays it out. */
static inline struct core_tile core_mx_scales(const struct core_mmad *mm, int which)
{
  uint32_t kb = (mm->k + 31) / 32;
  struct core_tile t = {.addr = which ? mm->sb : mm->sa, .rows = which ? kb : mm->m, .cols = which ? mm->n : kb,
                        .space = (uint8_t)(which ? MEM_L0B : MEM_L0A), .layout = (uint8_t)(which ? CORE_ZN : CORE_ZZ),
                        .dtype = (uint8_t)NPU_DT_UINT8, .c0 = 2};
  return t;
}

struct core_instr {
  uint8_t op;        /* enum core_op */
  uint8_t pipe;      /* enum core_pipe it runs on */
  uint8_t src_pipe, dst_pipe, id; /* flags; xset/xwait: id, and dst_pipe = peer unit */
  uint32_t scalar_seq; /* scalar instructions issued before this one on its core */
  union {
    struct core_copy copy;
    struct core_mmad mmad;
    struct core_vec vec;
    double cycles;   /* scalar */
    struct core_sig sig; /* notify, notify wait */
  } u;
};

/* "S", "MTE2", ... as msprof and Ascend C name them. */
const char *core_pipe_name(enum core_pipe p);
/* "add", "exp", ... */
const char *core_vec_op_name(enum core_vec_op op);
/* Whether op is a transcendental (its repeats cost chip.vector.transcendental_cycles). */
bool core_vec_op_transcendental(enum core_vec_op op);
/* Number of tensor sources op reads (0, 1 or 2). */
int core_vec_op_sources(enum core_vec_op op);

/* c0 of a tile: its own, or 32 bytes / element size. */
uint32_t core_tile_c0(const struct core_tile *t);
/* Element offset of (r, c) in a tile's layout. */
uint64_t core_tile_offset(const struct core_tile *t, uint32_t r, uint32_t c);
/* ld of a tile: its own, or the tight value for its layout. */
uint32_t core_tile_ld(const struct core_tile *t);
/* Bytes a tile spans from its address (with padding for fractal layouts). */
uint64_t core_tile_bytes(const struct core_tile *t);

#endif
