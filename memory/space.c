/* space.c - address spaces and local buffer checks. */
#include "memory/space.h"

#include <inttypes.h>
#include <stdio.h>

#include "common/err.h"

static const char *const names[MEM_SPACE_COUNT] = {"gm", "l1", "l0a", "l0b", "l0c",
                                                   "ub", "bias_table", "fixpipe_buf"};

const char *mem_space_name(enum mem_space s)
{
  NPU_ASSERT(s >= 0 && s < MEM_SPACE_COUNT);
  return names[s];
}

enum arch_buf mem_space_buf(enum mem_space s)
{
  switch (s) {
  case MEM_L1: return ARCH_BUF_L1;
  case MEM_L0A: return ARCH_BUF_L0A;
  case MEM_L0B: return ARCH_BUF_L0B;
  case MEM_L0C: return ARCH_BUF_L0C;
  case MEM_UB: return ARCH_BUF_UB;
  case MEM_BT: return ARCH_BUF_BT;
  case MEM_FB: return ARCH_BUF_FB;
  default: NPU_PANIC("GM is not a local buffer");
  }
}

bool mem_local_check(const struct arch_chip *chip, enum mem_space s, uint64_t addr,
                     uint64_t bytes, char *why, size_t whylen)
{
  const struct arch_buffer *b = &chip->buf[mem_space_buf(s)];
  if (addr % b->align_bytes) {
    snprintf(why, whylen, "%s address 0x%" PRIx64 " is not aligned to %" PRIu64 " bytes",
             names[s], addr, b->align_bytes);
    return false;
  }
  if (addr > b->size_bytes || bytes > b->size_bytes - addr) {
    snprintf(why, whylen,
             "%s overflow: [0x%" PRIx64 ", 0x%" PRIx64 ") does not fit in %" PRIu64 " bytes",
             names[s], addr, addr + bytes, b->size_bytes);
    return false;
  }
  return true;
}
