/* l2.c - FIFO-with-refresh line cache over a flat stamp array; see l2.h. */
#include "memory/l2.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define MAX_TRACKED_LINES (16u << 20) /* at most 64 MiB of stamps */

struct mem_l2 {
  uint64_t line_bytes;  /* MEM_L2_LINE_BYTES, or a larger power of two for huge address ranges */
  uint64_t base, lines; /* address range, in lines */
  uint64_t cap;         /* capacity in lines */
  uint64_t inserts;     /* lines that have entered so far (starts at cap + 1: 0 = never) */
  uint64_t *stamp;      /* per line: insertion number when it last entered; 0 = never */
};

struct mem_l2 *mem_l2_create(uint64_t capacity_bytes, uint64_t base, uint64_t span)
{
  struct mem_l2 *l2 = npu_xcalloc(1, sizeof *l2);
  l2->line_bytes = MEM_L2_LINE_BYTES;
  while (span / l2->line_bytes > MAX_TRACKED_LINES) l2->line_bytes *= 2;
  l2->cap = capacity_bytes / l2->line_bytes;
  if (l2->cap < 1) l2->cap = 1;
  l2->base = base / l2->line_bytes;
  l2->lines = (base + span + l2->line_bytes - 1) / l2->line_bytes - l2->base;
  l2->stamp = npu_xcalloc(l2->lines ? l2->lines : 1, sizeof *l2->stamp);
  mem_l2_clear(l2);
  return l2;
}

void mem_l2_destroy(struct mem_l2 *l2)
{
  if (!l2) return;
  free(l2->stamp);
  free(l2);
}

void mem_l2_clear(struct mem_l2 *l2)
{
  memset(l2->stamp, 0, l2->lines * sizeof *l2->stamp);
  l2->inserts = l2->cap + 1; /* so that a stamp of 0 is always older than capacity */
}

uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes)
{
  if (!bytes) return 0;
  uint64_t lb = l2->line_bytes;
  uint64_t first = addr / lb, last = (addr + bytes - 1) / lb;
  NPU_ASSERT(first >= l2->base && last - l2->base < l2->lines);
  uint64_t hits = 0, cap = l2->cap;
  uint64_t *st = l2->stamp - l2->base;
  for (uint64_t line = first; line <= last; line++) {
    uint64_t age = l2->inserts - st[line];
    if (age <= cap) {
      uint64_t lo = line * lb, hi = lo + lb;
      if (lo < addr) lo = addr;
      if (hi > addr + bytes) hi = addr + bytes;
      hits += hi - lo;
      if (2 * age <= cap) continue; /* young enough: stays */
    }
    st[line] = ++l2->inserts;      /* enters (or re-enters) at the tail */
  }
  return hits;
}

uint64_t mem_l2_touch_fresh(struct mem_l2 *l2, uint64_t addr, uint64_t bytes)
{
  if (!bytes) return 0;
  uint64_t lb = l2->line_bytes;
  /* n new lines entering at the tail: the insertion counter moves on by n, so every resident
   * line is n insertions older, exactly as if n lines of unused addresses had been touched */
  l2->inserts += (addr + bytes - 1) / lb - addr / lb + 1;
  return 0;
}
