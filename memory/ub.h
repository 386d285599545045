/*
 * ub.h - Unified Buffer bank conflicts, after the Ascend C best-practice guide ("avoid UB bank
 * conflicts"). Consecutive 32-byte rows go to consecutive bank groups; the bank inside a group
 * is address / (bank_bytes x groups). On 220x (910B) UB is 16 groups of 3 banks of 4 KiB;
 * per cycle each group serves one read and one write. Conflicts:
 *   read/read:   more reads of one group than its read ports (or two reads of one bank);
 *   write/write: two writes to one group;
 *   read/write:  a read and a write to the same bank.
 * Conflicting accesses queue: the repeat takes more cycles.
 */
#ifndef NPUSIM_MEMORY_UB_H
#define NPUSIM_MEMORY_UB_H

#include <stdint.h>

#include "arch/arch.h"

/*
 * Cycles the UB needs to serve one vector repeat that reads the 32-byte rows at reads[0..nr)
 * and writes those at writes[0..nw) (UB byte addresses). At least 1.
 */
int mem_ub_repeat_cycles(const struct arch_chip *chip, const uint64_t *reads, int nr,
                         const uint64_t *writes, int nw);

#endif
