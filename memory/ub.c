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
  int rbank[MAX_BANKS] = {0}, wbank[MAX_BANKS] = {0}, rgroup[MAX_BANKS] = {0},
      wgroup[MAX_BANKS] = {0};
  uint64_t span = u->bank_bytes * (uint64_t)groups;
  for (int i = 0; i < nr; i++) {
    int g = (int)((reads[i] / 32) % (uint64_t)groups);
    int b = (g + groups * (int)(reads[i] / span)) % u->banks;
    rgroup[g]++;
    rbank[b]++;
  }
  for (int i = 0; i < nw; i++) {
    int g = (int)((writes[i] / 32) % (uint64_t)groups);
    int b = (g + groups * (int)(writes[i] / span)) % u->banks;
    wgroup[g]++;
    wbank[b]++;
  }
  int cycles = 1, ports = u->read_ports_per_group;
  for (int g = 0; g < groups; g++) {
    int rc = (rgroup[g] + ports - 1) / ports;
    if (rc > cycles) cycles = rc;
    if (wgroup[g] > cycles) cycles = wgroup[g];
  }
  bool rw = false;
  for (int b = 0; b < u->banks; b++) {
    if (rbank[b] > cycles) cycles = rbank[b]; /* one bank serves one read a cycle */
    rw |= rbank[b] && wbank[b];
  }
  return cycles + (rw ? 1 : 0);
}
