/*
 * l2.h - the L2 reuse model: which GM bytes a kernel touched earlier are still in L2.
 *
 * A least-recently-used set of 512-byte lines (the largest GM burst) with the L2's capacity.
 * Every GM read and write touches its lines (writes allocate, as a write-back L2 does); a read
 * of a resident line is a hit, served at L2 bandwidth and latency, the rest go to HBM. This is
 * a capacity model: it ignores associativity and the replacement policy's details, so it is
 * exact for streams that fit and for streams that do not, and optimistic in between.
 */
#ifndef NPUSIM_MEMORY_L2_H
#define NPUSIM_MEMORY_L2_H

#include <stdint.h>

#define MEM_L2_LINE_BYTES 512u

struct mem_l2;

/* An empty L2 of capacity_bytes (rounded down to whole lines, at least one line). */
struct mem_l2 *mem_l2_create(uint64_t capacity_bytes);
void mem_l2_destroy(struct mem_l2 *l2);

/*
 * Touch [addr, addr + bytes): returns how many of those bytes were resident before (hits).
 * Afterwards all its lines are resident and most recently used; older lines may be evicted.
 */
uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/* Drop everything (a new kernel run on a cold L2). */
void mem_l2_clear(struct mem_l2 *l2);

#endif
