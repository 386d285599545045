/* l2.c - FIFO-with-refresh line cache over a flat stamp array, with touched and dirty bits per
 * line (per 128-byte part of a coarse line); see l2.h. */
#include "memory/l2.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define MAX_TRACKED_LINES (16u << 20) /* at most 128 MiB of stamps */
#define MAX_SUBS 8                    /* parts of a line with their own touched / dirty bits */

/*
 * A line's stamp: bits 0..47 the insertion number when it last entered (0 = never; a run would
 * need 2^47 line insertions, 32 PB of traffic, to reach bit 48), bits 48..55 which of its parts
 * were touched and bits 56..63 which were written since it entered. A part is the whole line for
 * 128-byte lines (touched = resident), a 1/8 of a coarse line (MEM_L2_LINE_BYTES for lines up to
 * 1 KiB). The bits of a line that is no longer resident mean nothing: it re-enters with only the
 * parts the access touches (and writes).
 */
#define NUMBER(s) ((s) & ((UINT64_C(1) << 48) - 1))
#define TOUCHED(s) ((unsigned)((s) >> 48) & 0xffu)
#define DIRTY(s) ((unsigned)((s) >> 56) & 0xffu)

struct mem_l2 {
  uint64_t line_bytes;  /* MEM_L2_LINE_BYTES, or a larger power of two for huge address ranges */
  unsigned line_shift;  /* log2(line_bytes) */
  unsigned sub_shift;   /* log2 of the bytes of one part of a line (line_bytes / parts, parts <= MAX_SUBS) */
  unsigned full;        /* the bits of every part of a line */
  uint64_t base, lines; /* address range, in lines */
  uint64_t cap;         /* capacity in lines */
  uint64_t inserts;     /* lines that have entered so far (starts at cap + 1: 0 = never) */
  uint64_t *stamp;      /* per line, see above */
};

struct mem_l2 *mem_l2_create(uint64_t capacity_bytes, uint64_t base, uint64_t span)
{
  struct mem_l2 *l2 = npu_xcalloc(1, sizeof *l2);
  l2->line_bytes = MEM_L2_LINE_BYTES;
  while (span / l2->line_bytes > MAX_TRACKED_LINES) l2->line_bytes *= 2;
  while ((UINT64_C(1) << l2->line_shift) < l2->line_bytes) l2->line_shift++;
  l2->sub_shift = l2->line_shift;
  while ((l2->line_bytes >> l2->sub_shift) < MAX_SUBS && (UINT64_C(1) << l2->sub_shift) > MEM_L2_LINE_BYTES)
    l2->sub_shift--;
  l2->full = (1u << (1u << (l2->line_shift - l2->sub_shift))) - 1;
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

/* Touch the lines of [addr, addr + bytes) for a read or a write; returns the bytes served by L2:
 * a read's bytes on touched parts of resident lines, a write's bytes on parts already dirty. */
static uint64_t touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes, bool write)
{
  if (!bytes) return 0;
  unsigned ls = l2->line_shift, ss = l2->sub_shift;
  uint64_t lb = l2->line_bytes, sb = UINT64_C(1) << ss;
  uint64_t first = addr >> ls, last = (addr + bytes - 1) >> ls, end = addr + bytes;
  NPU_ASSERT(first >= l2->base && last - l2->base < l2->lines);
  unsigned full = l2->full;
  uint64_t hits = 0, cap = l2->cap, inserts = l2->inserts; /* (a local: stores to st cannot alias it) */
  uint64_t *st = l2->stamp - l2->base;
  for (uint64_t line = first; line <= last; line++) {
    uint64_t s = st[line], number = NUMBER(s), age = inserts - number, l0 = line << ls;
    bool resident = age <= cap;
    unsigned touched = resident ? TOUCHED(s) : 0, dirty = resident ? DIRTY(s) : 0;
    /* the parts [ka, kb] the access covers, from lo to hi (all of them inside the range) */
    uint64_t lo = l0, hi = l0 + lb;
    unsigned mask = full, ka = 0, kb = (1u << (ls - ss)) - 1;
    if (line == first || line == last) {
      if (addr > lo) lo = addr;
      if (end < hi) hi = end;
      ka = (unsigned)((lo - l0) >> ss);
      kb = (unsigned)((hi - 1 - l0) >> ss);
      mask = (2u << kb) - (1u << ka);
    }
    unsigned have = (write ? dirty : touched) & mask;
    if (have == mask) {
      hits += hi - lo;
    } else if (have) { /* some parts: whole ones inside, the first from lo, the last up to hi */
      for (unsigned k = ka; k <= kb; k++)
        if (have >> k & 1) hits += sb;
      if (have >> ka & 1) hits -= lo - (l0 + ((uint64_t)ka << ss));
      if (have >> kb & 1) hits -= l0 + ((uint64_t)(kb + 1) << ss) - hi;
    }
    touched |= mask;
    if (write) dirty |= mask;
    if (!resident || 2 * age > cap) number = ++inserts; /* enters (or re-enters) at the tail */
    st[line] = number | (uint64_t)touched << 48 | (uint64_t)dirty << 56;
  }
  l2->inserts = inserts;
  return hits;
}

uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes)
{
  return touch(l2, addr, bytes, false);
}

uint64_t mem_l2_write(struct mem_l2 *l2, uint64_t addr, uint64_t bytes)
{
  return touch(l2, addr, bytes, true);
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
