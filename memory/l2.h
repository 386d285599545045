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
 * the rest go to HBM.
 *
 * Writes and write-back: a write makes its lines dirty. A dirty line costs one HBM write of its
 * bytes, whenever it leaves L2 (or at the end: the data must reach HBM eventually). The model
 * charges that write when the line becomes dirty -- a write to a line that is not resident, or
 * resident and clean (read before: in-place updates), goes to HBM -- and a write to a line that is
 * resident and already dirty is absorbed (write coalescing: a workspace rewritten while it stays
 * in L2 reaches HBM once). Charging at the first dirtying write rather than at eviction gives the
 * same HBM write volume (one write-back per dirty residency) without tracking evictions, which the
 * stamp model never enumerates (a line leaves implicitly, when capacity newer lines have entered),
 * and it counts the lines still dirty when the kernel ends; what it moves is when that traffic
 * loads HBM (earlier than a write-back would).
 *
 * The model keeps one insertion stamp per line of the GM address range, so a touch costs O(lines)
 * with no hashing; above 16 Mi lines of address range (2 GiB of GM) the line grows to the next
 * power of two, keeping the stamps within 128 MiB. Such a coarse line still remembers, per part (of
 * 128 bytes, or 1/8 of a line above 1 KiB; bits in its stamp), which parts were touched and which written since
 * it entered: replacement is per line, hits and write absorption per part, so that tiles that
 * share a coarse line (512-byte aligned tensors, 1 KiB lines) do not hit on each other's halves.
 * It ignores associativity and banking: it is exact for streams that fit and for streams that do
 * not, and approximate in between.
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
 * Read [addr, addr + bytes): returns how many of those bytes were resident before (hits; the rest
 * come from HBM). Afterwards all its lines are resident (dirty ones stay dirty, lines brought in
 * are clean). The range must lie in the L2's address range.
 */
uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/*
 * Write [addr, addr + bytes): returns how many of those bytes were absorbed by L2 -- bytes on
 * lines that were resident and already dirty; the rest cost an HBM write (the write-back of a line
 * that becomes dirty, charged now, see above). Afterwards all its lines are resident and dirty.
 */
uint64_t mem_l2_write(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/*
 * Touch lines that nobody touched before, as many as [addr, addr + bytes) spans (addr gives only
 * the alignment; it need not lie in the L2's address range): returns 0 (no hits). The lines
 * enter at the tail and age every resident line as that many new lines do, so they evict what
 * real new lines would; they are never found again. For GM accesses whose address the model
 * does not know (an indexed copy in a timing-only run, see cores/exec_int.h core__gm_tile). For a
 * write as for a read: lines nobody touches again absorb nothing, so all its bytes go to HBM.
 */
uint64_t mem_l2_touch_fresh(struct mem_l2 *l2, uint64_t addr, uint64_t bytes);

/* Drop everything (a new kernel run on a cold L2). */
void mem_l2_clear(struct mem_l2 *l2);

#endif
