/*
 * space.h - the address spaces an AI core sees: global memory (GM, behind L2 and HBM) and the
 * per-core buffers of the DaVinci core (L1, L0A, L0B, L0C, UB, BiasTable, FixPipe buffer).
 */
#ifndef NPUSIM_MEMORY_SPACE_H
#define NPUSIM_MEMORY_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"

enum mem_space { MEM_GM, MEM_L1, MEM_L0A, MEM_L0B, MEM_L0C, MEM_UB, MEM_BT, MEM_FB,
                 MEM_SPACE_COUNT };

/* "gm", "l1", "l0a", ... */
const char *mem_space_name(enum mem_space s);

/* The arch buffer behind a local space (not MEM_GM). */
enum arch_buf mem_space_buf(enum mem_space s);

/*
 * Check that [addr, addr + bytes) lies inside local space s of a core of chip and that addr
 * is aligned as the buffer requires. Returns true, or false with a reason in why.
 */
bool mem_local_check(const struct arch_chip *chip, enum mem_space s, uint64_t addr,
                     uint64_t bytes, char *why, size_t whylen);

#endif
