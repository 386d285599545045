/*
 * dma.h - the data paths between address spaces, their per-core rates, and GM burst rounding.
 *
 * A path exists when the chip's rate for it is non-zero (910B has GM->L0A, 950 does not; 950
 * has L0C->UB, 910B does not). Local paths run at their own rate; paths to and from GM are
 * further limited by the core's GM port and by L2/HBM bandwidth shared with every other core
 * (the executor's job, through SimGrid flows). GM moves whole bursts: each contiguous run of a
 * transfer is rounded up to the chip's burst, so short rows waste bandwidth.
 */
#ifndef NPUSIM_MEMORY_DMA_H
#define NPUSIM_MEMORY_DMA_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"
#include "memory/space.h"

/* The path from src to dst; false when the chip has no such path (rate 0 or not a path). */
bool mem_path_of(const struct arch_chip *chip, enum mem_space src, enum mem_space dst,
                 enum arch_path *out);

/* Whether path p reads or writes GM (its copies go through the core's GM port and L2). */
bool mem_path_touches_gm(enum arch_path p);

/* A path's rate for one core, bytes per second. */
double mem_path_bytes_per_s(const struct arch_chip *chip, enum arch_path p);

/* Bytes GM moves for runs contiguous runs of run_bytes each (each rounded up to a burst). */
uint64_t mem_gm_burst_bytes(const struct arch_chip *chip, uint64_t runs, uint64_t run_bytes);

#endif
