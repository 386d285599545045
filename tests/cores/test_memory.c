/* test_memory.c - the memory layer: L2 reuse model, UB banks, GM tensors, DMA paths, platform. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/strutil.h"
#include "memory/dma.h"
#include "memory/gm.h"
#include "memory/l2.h"
#include "memory/platform.h"
#include "memory/ub.h"
#include "tests/support/chip.h"

static struct arch_system sys;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
}

TestSuite(memory, .init = setup, .timeout = 30);

Test(memory, l2_hits_what_was_touched_and_still_fits)
{
  struct mem_l2 *l2 = mem_l2_create(4096, 0, 1 << 20); /* 8 lines */
  cr_assert_eq(mem_l2_touch(l2, 0, 1024), 0);
  cr_assert_eq(mem_l2_touch(l2, 0, 1024), 1024);
  cr_assert_eq(mem_l2_touch(l2, 100, 50), 50);           /* partial line counts its bytes */
  cr_assert_eq(mem_l2_touch(l2, 1024, 3072), 0);         /* fills the other 6 lines */
  cr_assert_eq(mem_l2_touch(l2, 0, 4096), 4096);         /* all 8 resident */
  cr_assert_eq(mem_l2_touch(l2, 4096, 512), 0);          /* a 9th line evicts the oldest: line 0 */
  cr_assert_eq(mem_l2_touch(l2, 1024, 3072), 3072);      /* lines 2..7 still there */
  cr_assert_eq(mem_l2_touch(l2, 0, 512), 0);             /* line 0 was evicted */
  mem_l2_clear(l2);
  cr_assert_eq(mem_l2_touch(l2, 512, 512), 0);
  mem_l2_destroy(l2);
}

Test(memory, l2_streams_larger_than_capacity_never_hit)
{
  struct mem_l2 *l2 = mem_l2_create(1 << 20, 0, 16 << 20);
  uint64_t hits = 0;
  for (int pass = 0; pass < 3; pass++)
    for (uint64_t a = 0; a < (2u << 20); a += 65536) hits += mem_l2_touch(l2, a, 65536);
  cr_assert_eq(hits, 0, "a 2x-capacity cyclic stream must miss every time");
  for (uint64_t a = 0; a < (512u << 10); a += 65536) mem_l2_touch(l2, (8u << 20) + a, 65536);
  hits = 0;
  for (uint64_t a = 0; a < (512u << 10); a += 65536) hits += mem_l2_touch(l2, (8u << 20) + a, 65536);
  cr_assert_eq(hits, 512u << 10, "a working set that fits hits fully");
  mem_l2_destroy(l2);
}

Test(memory, l2_keeps_lines_that_are_reused_while_a_stream_passes)
{
  /* 1 MiB L2: a 64 KiB table read again after every 64 KiB of streaming stays resident */
  struct mem_l2 *l2 = mem_l2_create(1 << 20, 0, 64 << 20);
  uint64_t table_hits = 0;
  for (int i = 0; i < 200; i++) {
    table_hits += mem_l2_touch(l2, 0, 65536);
    mem_l2_touch(l2, (1u << 20) + (uint64_t)i * 65536, 65536);
  }
  cr_assert_eq(table_hits, 199ull * 65536, "only the first read of the table misses");
  mem_l2_destroy(l2);
}

Test(memory, l2_fresh_lines_never_hit_and_evict_as_new_lines_do)
{
  struct mem_l2 *l2 = mem_l2_create(4096, 0, 1 << 20); /* 32 lines of 128 B */
  cr_assert_eq(mem_l2_touch(l2, 0, 2048), 0);           /* lines 0..15 */
  cr_assert_eq(mem_l2_touch_fresh(l2, 0, 2048), 0);     /* 16 new lines, even at the same address */
  cr_assert_eq(mem_l2_touch(l2, 0, 2048), 2048, "32 lines fit: lines 0..15 are still resident");
  cr_assert_eq(mem_l2_touch_fresh(l2, 64, 4096), 0);    /* unaligned: 33 new lines */
  cr_assert_eq(mem_l2_touch(l2, 0, 2048), 0, "33 newer lines evicted lines 0..15");
  cr_assert_eq(mem_l2_touch_fresh(l2, UINT64_C(1) << 62, 128), 0, "any address: only its alignment counts");
  mem_l2_destroy(l2);
}

/* Writes make lines dirty; a dirty line costs one HBM write: a write to a line that is absent, or
 * resident and clean, goes to HBM (the write-back it will need, charged when the line becomes
 * dirty), a write to a resident dirty line is absorbed. Reads are unaffected by dirtiness. */
Test(memory, l2_write_back_of_dirty_lines)
{
  struct mem_l2 *l2 = mem_l2_create(4096, 0, 1 << 20);   /* 32 lines of 128 B */
  cr_assert_eq(mem_l2_touch(l2, 0, 1024), 0);            /* lines 0..7 in, clean */
  cr_assert_eq(mem_l2_write(l2, 0, 1024), 0, "in place: resident but clean, so the write reaches HBM");
  cr_assert_eq(mem_l2_write(l2, 0, 1024), 1024, "dirty now: a rewrite is absorbed");
  cr_assert_eq(mem_l2_touch(l2, 0, 1024), 1024, "a dirty line serves reads");
  cr_assert_eq(mem_l2_write(l2, 512, 1024), 512, "lines 4..7 dirty (absorbed), 8..11 new (HBM)");
  cr_assert_eq(mem_l2_write(l2, 1536, 64), 0, "a new line, partly written");
  cr_assert_eq(mem_l2_write(l2, 1600, 64), 64, "the rest of that line: dirty, absorbed");
  /* 32 new lines evict everything: a line that comes back is clean (its write-back was paid) */
  cr_assert_eq(mem_l2_touch(l2, 8192, 4096), 0);
  cr_assert_eq(mem_l2_touch(l2, 0, 1024), 0, "evicted");
  cr_assert_eq(mem_l2_write(l2, 0, 1024), 0, "back clean: the write reaches HBM again");
  /* a workspace rewritten while it stays: HBM sees it once */
  mem_l2_clear(l2);
  uint64_t absorbed = 0;
  for (int i = 0; i < 100; i++) absorbed += mem_l2_write(l2, 4096, 2048);
  cr_assert_eq(absorbed, 99 * 2048);
  /* refresh keeps a line dirty: rewrite lines 0..3 after 20 other lines entered (they are in the
   * older half, so the write moves them to the tail) and again after 20 more */
  mem_l2_clear(l2);
  cr_assert_eq(mem_l2_write(l2, 0, 512), 0);
  cr_assert_eq(mem_l2_touch(l2, 65536, 20 * 128), 0);
  cr_assert_eq(mem_l2_write(l2, 0, 512), 512);
  cr_assert_eq(mem_l2_touch(l2, 131072, 20 * 128), 0);
  cr_assert_eq(mem_l2_write(l2, 0, 512), 512, "refreshed by the last write: still resident and dirty");
  /* fresh lines (unknown addresses) never absorb a write */
  cr_assert_eq(mem_l2_touch_fresh(l2, 0, 512), 0);
  mem_l2_destroy(l2);
}

/* Above 2 GiB of GM the line grows (here to 256 B); it still hits and absorbs writes only on the
 * 128-byte parts that were touched / written: tiles of 512-byte aligned tensors share coarse lines
 * and must not hit on each other's halves (AdamW over 1e9 parameters showed 2% false hits). */
Test(memory, l2_coarse_lines_hit_only_what_was_touched)
{
  struct mem_l2 *l2 = mem_l2_create(1 << 20, 0, (2ull << 30) + 4096);
  cr_assert_eq(mem_l2_touch(l2, 0, 128), 0);
  cr_assert_eq(mem_l2_touch(l2, 128, 128), 0, "the other half of the line was never brought in");
  cr_assert_eq(mem_l2_touch(l2, 0, 256), 256);
  cr_assert_eq(mem_l2_touch(l2, 64, 100), 100);
  cr_assert_eq(mem_l2_write(l2, 512, 128), 0);
  cr_assert_eq(mem_l2_write(l2, 640, 128), 0, "the other half is not dirty: its write-back is due");
  cr_assert_eq(mem_l2_write(l2, 512, 256), 256);
  cr_assert_eq(mem_l2_touch(l2, 1024, 256), 0);
  cr_assert_eq(mem_l2_write(l2, 1024, 200), 0, "in place, clean: to HBM");
  cr_assert_eq(mem_l2_write(l2, 1024, 256), 256, "both 128-byte parts dirty (a part written in part counts whole, "
                                                "as a 128-byte line does)");
  /* ranges over several lines: whole lines inside, parts at both ends */
  cr_assert_eq(mem_l2_touch(l2, 4096 + 64, 4096), 0);  /* brings in the parts [4096, 8320) */
  cr_assert_eq(mem_l2_touch(l2, 4096, 4096 + 256), 4096 + 128, "[8320, 8448) was never brought in");
  cr_assert_eq(mem_l2_touch(l2, 4096, 4096 + 256), 4096 + 256);
  cr_assert_eq(mem_l2_write(l2, 4096 + 100, 2000), 0);  /* dirties the parts [4096, 6272) */
  cr_assert_eq(mem_l2_write(l2, 4096, 4096), 2176);
  mem_l2_destroy(l2);
}

Test(memory, ub_bank_rules_of_the_guide)
{
  const struct arch_chip *c = &sys.chip;
  uint64_t r[2], w[1];
  r[0] = 0;       /* group 0, bank 0 */
  r[1] = 32;      /* group 1 */
  w[0] = 0x10000; /* group 0, bank 16: the guide's example of no conflict with bank 0 */
  cr_assert_eq(mem_ub_repeat_cycles(c, r, 1, w, 1), 1);
  r[1] = 0x10000; /* two reads of group 0 */
  cr_assert_eq(mem_ub_repeat_cycles(c, r, 2, NULL, 0), 2);
  w[0] = 0;       /* read and write of bank 0 */
  cr_assert_eq(mem_ub_repeat_cycles(c, r, 1, w, 1), 2);
  uint64_t ww[2] = {0, 0x20000}; /* two writes of group 0 */
  cr_assert_eq(mem_ub_repeat_cycles(c, NULL, 0, ww, 2), 2);
  struct arch_system s950;
  ts_load_system(&s950, "ascend-950pr", NULL);
  uint64_t rr[2] = {0, 0x20000}; /* 950: two reads of one group, different banks, two ports */
  cr_assert_eq(mem_ub_repeat_cycles(&s950.chip, rr, 2, NULL, 0), 1);
  rr[1] = 0x100;  /* 950: 8 groups: 0x100 is group 0 again, same bank */
  cr_assert_eq(mem_ub_repeat_cycles(&s950.chip, rr, 2, NULL, 0), 2);
}

Test(memory, gm_tensors_and_bounds)
{
  struct mem_gm *gm = mem_gm_create();
  char a[100], b[1000];
  uint64_t x = mem_gm_add(gm, "a", sizeof a, a), y = mem_gm_add(gm, "b", sizeof b, b);
  void *p;
  cr_assert(y > x + sizeof a);
  cr_assert_eq(x % 512, 0);
  cr_assert(mem_gm_resolve(gm, x + 10, 90, &p));
  cr_assert_eq(p, a + 10);
  cr_assert(!mem_gm_resolve(gm, x + 10, 91, &p));
  cr_assert(!mem_gm_resolve(gm, 0, 1, &p));
  cr_assert(mem_gm_resolve(gm, y, 1000, &p));
  cr_assert_eq(p, b);
  cr_assert_eq(mem_gm_total_bytes(gm), 1100);
  mem_gm_destroy(gm);
}

Test(memory, paths_and_bursts)
{
  const struct arch_chip *c = &sys.chip;
  enum arch_path p;
  cr_assert(mem_path_of(c, MEM_GM, MEM_L1, &p));
  cr_assert_eq(p, ARCH_PATH_GM_TO_L1);
  cr_assert(!mem_path_of(c, MEM_L1, MEM_UB, &p), "910B has no L1 -> UB");
  cr_assert(!mem_path_of(c, MEM_UB, MEM_L0A, &p));
  cr_assert_eq(mem_path_bytes_per_s(c, ARCH_PATH_L1_TO_L0A), 512 * 1.8e9);
  cr_assert_eq(mem_gm_burst_bytes(c, 1, 1000), 1024);
  cr_assert_eq(mem_gm_burst_bytes(c, 128, 40), 128 * 128, "short rows waste their bursts");
}

Test(memory, platform_has_a_host_and_ports_per_core)
{
  struct npu_buf b = {0};
  mem_platform_chip_xml(&sys.chip, "npu0.", &b);
  const char *x = npu_buf_str(&b);
  cr_assert(strstr(x, "<host id=\"npu0.c71\"") != NULL, "72 cores: 24 AIC + 48 AIV");
  cr_assert(strstr(x, "<host id=\"npu0.c72\"") == NULL);
  cr_assert(strstr(x, "<link id=\"npu0.hbm\" bandwidth=\"1600000000000Bps\"") != NULL, "%.400s", x);
  cr_assert(strstr(x, "<route src=\"npu0.hbm\" dst=\"npu0.c5\"") != NULL);
  cr_assert_eq(mem_platform_cores(&sys.chip), 72);
  npu_buf_release(&b);
}
