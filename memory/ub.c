/* ub.c - UB bank-conflict cycles of one vector repeat; see ub.h. */
#include "memory/ub.h"

#include <stdbool.h>
#include <string.h>

#include "common/err.h"

#define MAX_BANKS 256

int mem_ub_repeat_cycles(const struct arch_chip *chip, const uint64_t *reads, int nr,
                         const uint64_t *writes, int nw)
{
  const struct arch_ub *u = &chip->ub;
  int groups = u->bank_groups;
  NPU_ASSERT(u->banks <= MAX_BANKS && groups > 0);
  /* counters are cleared and read only at the banks and groups touched (at most 24 of them):
   * clearing all MAX_BANKS of each was most of an analytic kernel timing */
  enum { MAX_ACCESS = 64 };
  NPU_ASSERT(nr <= MAX_ACCESS && nw <= MAX_ACCESS);
  int rbank[MAX_BANKS], wbank[MAX_BANKS], rgroup[MAX_BANKS], wgroup[MAX_BANKS];
  int rg[MAX_ACCESS], rb[MAX_ACCESS], wg[MAX_ACCESS], wb[MAX_ACCESS];
  uint64_t span = u->bank_bytes * (uint64_t)groups;
  for (int i = 0; i < nr; i++) {
    rg[i] = (int)((reads[i] / 32) % (uint64_t)groups);
    rb[i] = (rg[i] + groups * (int)(reads[i] / span)) % u->banks;
    rgroup[rg[i]] = wgroup[rg[i]] = 0;
    rbank[rb[i]] = wbank[rb[i]] = 0;
  }
  for (int i = 0; i < nw; i++) {
    wg[i] = (int)((writes[i] / 32) % (uint64_t)groups);
    wb[i] = (wg[i] + groups * (int)(writes[i] / span)) % u->banks;
    rgroup[wg[i]] = wgroup[wg[i]] = 0;
    rbank[wb[i]] = wbank[wb[i]] = 0;
  }
  for (int i = 0; i < nr; i++) {
    rgroup[rg[i]]++;
    rbank[rb[i]]++;
  }
  for (int i = 0; i < nw; i++) {
    wgroup[wg[i]]++;
    wbank[wb[i]]++;
  }
  int cycles = 1, ports = u->read_ports_per_group;
  bool rw = false;
  for (int i = 0; i < nr; i++) {
    int rc = (rgroup[rg[i]] + ports - 1) / ports;
    if (rc > cycles) cycles = rc;
    if (rbank[rb[i]] > cycles) cycles = rbank[rb[i]]; /* one bank serves one read a cycle */
  }
  for (int i = 0; i < nw; i++) {
    if (wgroup[wg[i]] > cycles) cycles = wgroup[wg[i]];
    rw |= rbank[wb[i]] > 0;
  }
  return cycles + (rw ? 1 : 0);
}
