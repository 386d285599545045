/*
 * kernels.h - small tile programs with known answers, shared by the cores tests:
 * GM streams, a cube stream, a copy-in/compute/copy-out pipeline (single or double buffered),
 * a vector instruction with or without UB bank conflicts.
 */
#ifndef NPUSIM_TESTS_CORES_KERNELS_H
#define NPUSIM_TESTS_CORES_KERNELS_H

#include <stdint.h>

#include "cores/kernel.h"
#include "memory/gm.h"

struct tk_stream {           /* every block copies `bytes` GM -> L1 (cube cores) */
  uint64_t gm, bytes;
  uint64_t dim;              /* set by tk_stream_kernel */
};
void tk_stream_kernel(struct core_kernel *k, struct tk_stream *s, int cores, uint64_t blocks);

struct tk_cube {             /* every block is one 128 x 256 x 128 fp16 mmad */
  int dummy;
};
void tk_cube_kernel(struct core_kernel *k, struct tk_cube *c, int cores, uint64_t blocks);

struct tk_pipeline {         /* GM -> UB, vector muls, UB -> GM, per tile of `elems` fp16 */
  uint64_t in, out;
  uint32_t elems;
  int buffers;               /* 1 or 2 */
  int vec_op;                /* enum core_vec_op: muls or exp */
  int vecs;                  /* vector instructions per tile (0: 1) */
  int dim;                   /* set by tk_pipeline_kernel */
};
void tk_pipeline_kernel(struct core_kernel *k, struct tk_pipeline *p, int cores, uint64_t blocks);

struct tk_bank {             /* one vector add (exp: an exp of src0), repeat 255, src1 at src1 */
  uint64_t src1;
  uint64_t dst;              /* 0: 131072 */
  bool exp;
};
void tk_bank_kernel(struct core_kernel *k, struct tk_bank *b);

#endif
