/*
 * kernel_api.h - npusim's public kernel API: write an operator outside npusim, build it as a
 * shared object, and run it on the chip model (`npusim kernel --load FILE OP ...`).
 *
 *   cc -shared -fPIC $(pkg-config --cflags npusim-kernel) my_kernel.c -o my_kernel.so
 *
 * What it holds (each header documents its part; docs/KERNELS.md walks through an example):
 *   cores/kernel.h, cores/isa.h  the tile program: a kernel's callbacks emit instructions on
 *                                 the pipes of one launch unit (core_copy, core_mmad, core_vec,
 *                                 flags, barriers), run at event or analytic fidelity;
 *   ops/op.h                      the operator description: parameters, plan (checks and
 *                                 tiling), setup (GM tensors, kernels), FLOPs, the host
 *                                 reference check, the backward rule for training steps;
 *   ops/queue.h                   Ascend C's TPipe / TQue: buffers and double-buffered queues
 *                                 whose flags follow from alloc / enque / deque / free;
 *   ops/vec.h                     vector instructions over dense ranges (full repeats and a
 *                                 masked tail), fp32 arithmetic, casts;
 *   formats/formats.h             element encodings (fmt_encode / fmt_decode) for set-up and
 *                                 checks;
 *   ops/plugin.h                  NPUSIM_KERNEL_PLUGIN, the entry npusim looks for, carrying
 *                                 NPUSIM_KERNEL_API_VERSION and the layout hash it checks.
 *
 * The functions bind to the npusim executable that loads the object; build against the headers
 * installed with that npusim (its pkg-config file), or the object is refused when it loads.
 */
#ifndef NPUSIM_KERNEL_API_H
#define NPUSIM_KERNEL_API_H

#include "common/err.h"
#include "cores/isa.h"
#include "cores/kernel.h"
#include "formats/formats.h"
#include "ops/op.h"
#include "ops/plugin.h"
#include "ops/queue.h"
#include "ops/vec.h"

#endif
