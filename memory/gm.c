/* gm.c - global memory tensors; see gm.h. */
#include "memory/gm.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define GM_BASE 0x100000000ull /* device addresses start away from 0: 0 is never valid */
#define GM_ALIGN 512ull

struct tensor {
  uint64_t addr, bytes;
  void *host;
  char *name;
  int device;
};

struct mem_gm {
  struct tensor *t; /* sorted by addr (they are added in increasing order) */
  size_t n, cap;
  uint64_t next;
  uint64_t total;
};

struct mem_gm *mem_gm_create(void)
{
  struct mem_gm *gm = npu_xcalloc(1, sizeof *gm);
  gm->next = GM_BASE;
  return gm;
}

void mem_gm_destroy(struct mem_gm *gm)
{
  if (!gm) return;
  for (size_t i = 0; i < gm->n; i++) free(gm->t[i].name);
  free(gm->t);
  free(gm);
}

uint64_t mem_gm_add(struct mem_gm *gm, const char *name, uint64_t bytes, void *host)
{
  if (gm->n == gm->cap) {
    gm->cap = gm->cap ? 2 * gm->cap : 8;
    gm->t = npu_xrealloc(gm->t, gm->cap * sizeof *gm->t);
  }
  uint64_t addr = gm->next;
  gm->t[gm->n++] = (struct tensor){addr, bytes, host, npu_xstrdup(name), 0};
  gm->next = addr + (bytes + GM_ALIGN - 1) / GM_ALIGN * GM_ALIGN + GM_ALIGN; /* a gap between */
  gm->total += bytes;
  return addr;
}

void mem_gm_set_device(struct mem_gm *gm, uint64_t addr, int device)
{
  long i = mem_gm_index(gm, addr);
  NPU_ASSERT(i >= 0 && device >= 0);
  gm->t[i].device = device;
}

int mem_gm_device(const struct mem_gm *gm, uint64_t addr)
{
  long i = mem_gm_index(gm, addr);
  return i < 0 ? -1 : gm->t[i].device;
}

size_t mem_gm_count(const struct mem_gm *gm)
{
  return gm->n;
}

uint64_t mem_gm_bytes(const struct mem_gm *gm, size_t i)
{
  NPU_ASSERT(i < gm->n);
  return gm->t[i].bytes;
}

long mem_gm_index(const struct mem_gm *gm, uint64_t addr)
{
  size_t lo = 0, hi = gm->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (gm->t[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0 || addr - gm->t[lo - 1].addr >= gm->t[lo - 1].bytes) return -1;
  return (long)(lo - 1);
}

bool mem_gm_resolve(const struct mem_gm *gm, uint64_t addr, uint64_t bytes, void **host_out)
{
  size_t lo = 0, hi = gm->n;
  while (lo < hi) { /* last tensor with t.addr <= addr */
    size_t mid = (lo + hi) / 2;
    if (gm->t[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return false;
  const struct tensor *t = &gm->t[lo - 1];
  if (addr - t->addr > t->bytes || bytes > t->bytes - (addr - t->addr)) return false;
  if (host_out) *host_out = t->host ? (char *)t->host + (addr - t->addr) : NULL;
  return true;
}

uint64_t mem_gm_total_bytes(const struct mem_gm *gm)
{
  return gm->total;
}

void mem_gm_range(const struct mem_gm *gm, uint64_t *base, uint64_t *span)
{
  *base = GM_BASE;
  *span = gm->next - GM_BASE;
}
