/* dma.c - paths, rates and bursts; see dma.h. */
#include "memory/dma.h"

static const struct {
  enum mem_space src, dst;
  enum arch_path path;
} table[] = {
    {MEM_GM, MEM_L1, ARCH_PATH_GM_TO_L1},     {MEM_GM, MEM_L0A, ARCH_PATH_GM_TO_L0A},
    {MEM_GM, MEM_L0B, ARCH_PATH_GM_TO_L0B},   {MEM_GM, MEM_UB, ARCH_PATH_GM_TO_UB},
    {MEM_L1, MEM_L0A, ARCH_PATH_L1_TO_L0A},   {MEM_L1, MEM_L0B, ARCH_PATH_L1_TO_L0B},
    {MEM_L1, MEM_UB, ARCH_PATH_L1_TO_UB},     {MEM_UB, MEM_L1, ARCH_PATH_UB_TO_L1},
    {MEM_L0C, MEM_GM, ARCH_PATH_L0C_TO_GM},   {MEM_L0C, MEM_L1, ARCH_PATH_L0C_TO_L1},
    {MEM_L0C, MEM_UB, ARCH_PATH_L0C_TO_UB},   {MEM_UB, MEM_GM, ARCH_PATH_UB_TO_GM},
    {MEM_L1, MEM_FB, ARCH_PATH_L1_TO_FB},     {MEM_L1, MEM_BT, ARCH_PATH_L1_TO_BT},
    {MEM_UB, MEM_L0A, ARCH_PATH_UB_TO_L0A},
};

bool mem_path_of(const struct arch_chip *chip, enum mem_space src, enum mem_space dst,
                 enum arch_path *out)
{
  for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (table[i].src != src || table[i].dst != dst) continue;
    if (chip->dma.path_bytes_per_cycle[table[i].path] <= 0) return false;
    *out = table[i].path;
    return true;
  }
  return false;
}

bool mem_path_touches_gm(enum arch_path p)
{
  for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].path == p) return table[i].src == MEM_GM || table[i].dst == MEM_GM;
  return false;
}

double mem_path_bytes_per_s(const struct arch_chip *chip, enum arch_path p)
{
  return chip->dma.path_bytes_per_cycle[p] * chip->clock_hz;
}

uint64_t mem_gm_burst_bytes(const struct arch_chip *chip, uint64_t runs, uint64_t run_bytes)
{
  uint64_t b = chip->dma.burst_bytes;
  return runs * ((run_bytes + b - 1) / b * b);
}
