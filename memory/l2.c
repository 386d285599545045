/* l2.c - LRU of 512-byte lines with an open-addressing index; see l2.h. */
#include "memory/l2.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define EMPTY UINT32_MAX

struct slot {
  uint64_t line;       /* line number (address / 512) */
  uint32_t prev, next; /* LRU list: head is most recent */
};

struct mem_l2 {
  struct slot *slots;  /* capacity entries */
  uint32_t cap, used;
  uint32_t head, tail; /* EMPTY when the list is empty */
  uint32_t *index;     /* hash table of slot numbers, size mask + 1 */
  uint64_t mask;
};

static uint64_t hash(uint64_t x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

struct mem_l2 *mem_l2_create(uint64_t capacity_bytes)
{
  struct mem_l2 *l2 = npu_xcalloc(1, sizeof *l2);
  uint64_t lines = capacity_bytes / MEM_L2_LINE_BYTES;
  if (lines < 1) lines = 1;
  NPU_ASSERT(lines < UINT32_MAX / 4);
  l2->cap = (uint32_t)lines;
  l2->slots = npu_xmalloc(lines * sizeof *l2->slots);
  uint64_t size = 1;
  while (size < 2 * lines) size <<= 1;
  l2->mask = size - 1;
  l2->index = npu_xmalloc(size * sizeof *l2->index);
  mem_l2_clear(l2);
  return l2;
}

void mem_l2_destroy(struct mem_l2 *l2)
{
  if (!l2) return;
  free(l2->slots);
  free(l2->index);
  free(l2);
}

void mem_l2_clear(struct mem_l2 *l2)
{
  memset(l2->index, 0xff, (l2->mask + 1) * sizeof *l2->index);
  l2->used = 0;
  l2->head = l2->tail = EMPTY;
}

static void unlink_slot(struct mem_l2 *l2, uint32_t s)
{
  struct slot *x = &l2->slots[s];
  if (x->prev != EMPTY) l2->slots[x->prev].next = x->next; else l2->head = x->next;
  if (x->next != EMPTY) l2->slots[x->next].prev = x->prev; else l2->tail = x->prev;
}

static void push_front(struct mem_l2 *l2, uint32_t s)
{
  struct slot *x = &l2->slots[s];
  x->prev = EMPTY;
  x->next = l2->head;
  if (l2->head != EMPTY) l2->slots[l2->head].prev = s;
  l2->head = s;
  if (l2->tail == EMPTY) l2->tail = s;
}

/* Position in the index of line, or of the empty cell where it would go. */
static uint64_t probe(const struct mem_l2 *l2, uint64_t line)
{
  uint64_t i = hash(line) & l2->mask;
  while (l2->index[i] != EMPTY && l2->slots[l2->index[i]].line != line) i = (i + 1) & l2->mask;
  return i;
}

/* Remove the index cell at i, shifting back the cluster after it (linear probing). */
static void index_delete(struct mem_l2 *l2, uint64_t i)
{
  uint64_t j = i;
  for (;;) {
    l2->index[i] = EMPTY;
    for (;;) {
      j = (j + 1) & l2->mask;
      if (l2->index[j] == EMPTY) return;
      uint64_t home = hash(l2->slots[l2->index[j]].line) & l2->mask;
      /* move j to i unless home lies cyclically in (i, j] */
      if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
      break;
    }
    l2->index[i] = l2->index[j];
    i = j;
  }
}

/* Touch one line; returns whether it was resident. */
static int touch_line(struct mem_l2 *l2, uint64_t line)
{
  uint64_t i = probe(l2, line);
  if (l2->index[i] != EMPTY) {
    uint32_t s = l2->index[i];
    if (l2->head != s) {
      unlink_slot(l2, s);
      push_front(l2, s);
    }
    return 1;
  }
  uint32_t s;
  if (l2->used < l2->cap) {
    s = l2->used++;
  } else {
    s = l2->tail; /* evict the least recently used */
    unlink_slot(l2, s);
    index_delete(l2, probe(l2, l2->slots[s].line));
    i = probe(l2, line); /* the deletion may have moved cells */
  }
  l2->slots[s].line = line;
  l2->index[i] = s;
  push_front(l2, s);
  return 0;
}

uint64_t mem_l2_touch(struct mem_l2 *l2, uint64_t addr, uint64_t bytes)
{
  if (!bytes) return 0;
  uint64_t first = addr / MEM_L2_LINE_BYTES, last = (addr + bytes - 1) / MEM_L2_LINE_BYTES;
  uint64_t hits = 0;
  for (uint64_t line = first; line <= last; line++) {
    if (!touch_line(l2, line)) continue;
    uint64_t lo = line * MEM_L2_LINE_BYTES, hi = lo + MEM_L2_LINE_BYTES;
    if (lo < addr) lo = addr;
    if (hi > addr + bytes) hi = addr + bytes;
    hits += hi - lo;
  }
  return hits;
}
