/*
 * l2.h - the L2 reuse model: which GM bytes a kernel touched earlier are still in L2.
 *
 * A fully associative cache of 128-byte lines (the smallest GM burst, so that a miss never
 * brings bytes nobody asked for into L2 for free) with the L2's capacity
 * and FIFO replacement with refresh: a line enters at the tail when touched and not resident;
 * it stays resident until `capacity` newer lines have entered; a hit on a line that is in the
 * older half of the cache moves it back to the tail (a second chance, so that lines reused
 * often stay, as under LRU). Every GM read and write touches its lines (writes allocate, as a
 * write-back L2 does); a read of a resident line is a hit, served at L2 bandwidth and latency,
 * the rest go to HBM. The model keeps one insertion stamp per line of the GM address range, so
 * a touch costs O(lines) with no hashing; above 16 Mi lines of address range (2 GiB of GM) the
 * line grows to the next power of two, keeping the stamps within 64 MiB. It ignores associativity and banking: it is exact for
 * streams that fit and for streams that do not, and approximate in between.
 */
#ifndef NPUSIM_MEMORY_L2_H
#define NPUSIM_MEMORY_L2_H

#include <stdint.h>

#define MEM_L2_LINE_BYTES 128u

struct mem_l2;

/*
 * An empty L2 of capacity_bytes (whole lines, at least one) for GM addresses in
 * [base, base + span).
 */
struct mem_l2 *mem_l2_create(uint64_t capacity_bytes, uint64_t base, uint64_t span);
void mem_l2_destroy(struct mem_l2 *l2);

/*
 * Touch [addr, addr + bytes): returns how many of those bytes were resident before (hits).
 * Afterwards all its lines are resident. The range must lie in the L2's address range.
 */
uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/*
 * Touch lines that nobody touched before, as many as [addr, addr + bytes) spans (addr gives only
 * the alignment; it need not lie in the L2's address range): returns 0 (no hits). The lines
 * enter at the tail and age every resident line as that many new lines do, so they evict what
 * real new lines would; they are never found again. For GM accesses whose address the model
 * does not know (an indexed copy in a timing-only run, see cores/exec_int.h core__gm_tile).
 */
uint64_t mem_l2_touch_fresh(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/* Drop everything (a new kernel run on a cold L2). */
void mem_l2_clear(struct mem_l2 *l2);

#endif
