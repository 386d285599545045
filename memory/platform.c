/* platform.c - SimGrid platform XML for one chip's memory system; see platform.h. */
#include "memory/platform.h"

#include <stdio.h>

#include "common/units.h"

int mem_platform_cores(const struct arch_chip *chip)
{
  return chip->org == ARCH_ORG_SPLIT ? chip->aic_count + chip->aiv_count : chip->aic_count;
}

static bool is_cube(const struct arch_chip *chip, int i)
{
  return chip->org != ARCH_ORG_SPLIT || i < chip->aic_count;
}

static bool is_vector(const struct arch_chip *chip, int i)
{
  return chip->org != ARCH_ORG_SPLIT || i >= chip->aic_count;
}

bool mem_platform_core_has(const struct arch_chip *chip, int i, enum arch_path write_path)
{
  if (chip->dma.path_bytes_per_cycle[write_path] <= 0) return false;
  if (write_path == ARCH_PATH_UB_TO_GM) return is_vector(chip, i);
  if (write_path == ARCH_PATH_L0C_TO_GM) return is_cube(chip, i);
  return false;
}

double mem_platform_core_read_bytes_per_s(const struct arch_chip *chip, int i)
{
  double r = 0;
  const double *p = chip->dma.path_bytes_per_cycle;
  if (is_cube(chip, i)) {
    if (p[ARCH_PATH_GM_TO_L1] > r) r = p[ARCH_PATH_GM_TO_L1];
    if (p[ARCH_PATH_GM_TO_L0A] > r) r = p[ARCH_PATH_GM_TO_L0A];
    if (p[ARCH_PATH_GM_TO_L0B] > r) r = p[ARCH_PATH_GM_TO_L0B];
  }
  if (is_vector(chip, i) && p[ARCH_PATH_GM_TO_UB] > r) r = p[ARCH_PATH_GM_TO_UB];
  if (chip->dma.gm_read_bytes_per_cycle < r) r = chip->dma.gm_read_bytes_per_cycle;
  return r * chip->clock_hz;
}

double mem_platform_core_write_bytes_per_s(const struct arch_chip *chip)
{
  return chip->dma.gm_write_bytes_per_cycle * chip->clock_hz;
}

double mem_platform_engine_bytes_per_s(const struct arch_chip *chip, enum arch_path write_path)
{
  return chip->dma.path_bytes_per_cycle[write_path] * chip->clock_hz;
}

static void add_link(struct npu_buf *o, const char *prefix, const char *name, double bw, bool fat)
{
  char num[64];
  npu_fmt_double(bw, num, sizeof num);
  npu_buf_printf(o, "    <link id=\"%s%s\" bandwidth=\"%sBps\" latency=\"%gs\"%s/>\n", prefix, name,
                 num, MEM_PLATFORM_LINK_LATENCY_S, fat ? " sharing_policy=\"FATPIPE\"" : "");
}

static void route(struct npu_buf *o, const char *prefix, const char *src, const char *dst,
                  const char *const links[4])
{
  npu_buf_printf(o, "    <route src=\"%s%s\" dst=\"%s%s\" symmetrical=\"NO\">", prefix, src, prefix, dst);
  for (int i = 0; i < 4; i++) npu_buf_printf(o, "<link_ctn id=\"%s%s\"/>", prefix, links[i]);
  npu_buf_puts(o, "</route>\n");
}

static const struct {
  enum arch_path path;
  const char *suffix;
} writers[] = {{ARCH_PATH_UB_TO_GM, "mte3"}, {ARCH_PATH_L0C_TO_GM, "fix"}};

/* The chip's hosts and links (a zone declares them before its routes). */
static void chip_decls(const struct arch_chip *chip, const char *prefix, struct npu_buf *o)
{
  int n = mem_platform_cores(chip);
  npu_buf_printf(o, "    <host id=\"%shbm\" speed=\"1f\"/>\n    <host id=\"%sl2\" speed=\"1f\"/>\n",
                 prefix, prefix);
  bool dsm = chip->dma.multicast > 1;
  if (dsm) npu_buf_printf(o, "    <host id=\"%sdsm\" speed=\"1f\"/>\n", prefix);
  for (int i = 0; i < n; i++) {
    npu_buf_printf(o, "    <host id=\"%sc%d\" speed=\"1f\"/>\n", prefix, i);
    for (int w = 0; w < 2; w++)
      if (mem_platform_core_has(chip, i, writers[w].path))
        npu_buf_printf(o, "    <host id=\"%sc%d.%s\" speed=\"1f\"/>\n", prefix, i, writers[w].suffix);
  }
  add_link(o, prefix, "hbm", chip->hbm.bw_bytes_per_s * chip->calib.hbm.value, false);
  add_link(o, prefix, "l2", chip->l2.bw_bytes_per_s * chip->calib.l2.value, false);
  add_link(o, prefix, "pad", 1e18, true);
  for (int i = 0; i < n; i++) {
    char name[48];
    snprintf(name, sizeof name, "c%d.rd", i);
    add_link(o, prefix, name, mem_platform_core_read_bytes_per_s(chip, i), false);
    snprintf(name, sizeof name, "c%d.wr", i);
    add_link(o, prefix, name, mem_platform_core_write_bytes_per_s(chip), false);
    for (int w = 0; w < 2; w++) {
      if (!mem_platform_core_has(chip, i, writers[w].path)) continue;
      snprintf(name, sizeof name, "c%d.%s", i, writers[w].suffix);
      add_link(o, prefix, name, mem_platform_engine_bytes_per_s(chip, writers[w].path), false);
    }
  }
}

static void chip_routes(const struct arch_chip *chip, const char *prefix, struct npu_buf *o)
{
  int n = mem_platform_cores(chip);
  bool dsm = chip->dma.multicast > 1;
  for (int i = 0; i < n; i++) {
    char c[32], rd[32], wr[32], eng[48];
    snprintf(c, sizeof c, "c%d", i);
    snprintf(rd, sizeof rd, "c%d.rd", i);
    snprintf(wr, sizeof wr, "c%d.wr", i);
    route(o, prefix, "hbm", c, (const char *const[4]){"hbm", "l2", rd, "pad"});
    route(o, prefix, "l2", c, (const char *const[4]){"pad", "l2", rd, "pad"});
    if (dsm) route(o, prefix, "dsm", c, (const char *const[4]){"pad", "pad", rd, "pad"});
    for (int w = 0; w < 2; w++) {
      if (!mem_platform_core_has(chip, i, writers[w].path)) continue;
      snprintf(eng, sizeof eng, "c%d.%s", i, writers[w].suffix);
      route(o, prefix, eng, "hbm", (const char *const[4]){eng, wr, "l2", "hbm"});
      route(o, prefix, eng, "l2", (const char *const[4]){eng, wr, "l2", "pad"});
    }
  }
}

void mem_platform_chip_elements(const struct arch_chip *chip, const char *prefix, struct npu_buf *o)
{
  chip_decls(chip, prefix, o);
  chip_routes(chip, prefix, o);
}

void mem_platform_chip_xml(const struct arch_chip *chip, const char *prefix, struct npu_buf *o)
{
  npu_buf_puts(o, "<?xml version='1.0'?>\n"
                  "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                  "<platform version=\"4.1\">\n  <zone id=\"chip\" routing=\"Full\">\n");
  mem_platform_chip_elements(chip, prefix, o);
  npu_buf_puts(o, "  </zone>\n</platform>\n");
}

void mem_platform_group_xml(const struct arch_chip *chip, int ranks, double link_bytes_per_s,
                            struct npu_buf *o)
{
  npu_buf_puts(o, "<?xml version='1.0'?>\n"
                  "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                  "<platform version=\"4.1\">\n  <zone id=\"server\" routing=\"Full\">\n");
  char prefix[16], num[64];
  for (int r = 0; r < ranks; r++) {
    snprintf(prefix, sizeof prefix, "d%d.", r);
    chip_decls(chip, prefix, o);
  }
  npu_fmt_double(link_bytes_per_s, num, sizeof num);
  for (int a = 0; a < ranks; a++)
    for (int b = 0; b < ranks; b++)
      if (a != b)
        npu_buf_printf(o, "    <link id=\"x%d.%d\" bandwidth=\"%sBps\" latency=\"%gs\"/>\n", a, b, num,
                       MEM_PLATFORM_LINK_LATENCY_S);
  for (int r = 0; r < ranks; r++) {
    snprintf(prefix, sizeof prefix, "d%d.", r);
    chip_routes(chip, prefix, o);
  }
  int n = mem_platform_cores(chip);
  for (int a = 0; a < ranks; a++)
    for (int b = 0; b < ranks; b++) {
      if (a == b) continue;
      for (int i = 0; i < n; i++) {
        npu_buf_printf(o, "    <route src=\"d%d.hbm\" dst=\"d%d.c%d\" symmetrical=\"NO\">"
                          "<link_ctn id=\"x%d.%d\"/><link_ctn id=\"d%d.c%d.rd\"/><link_ctn id=\"d%d.pad\"/></route>\n",
                       a, b, i, a, b, b, i, b);
        for (int w = 0; w < 2; w++)
          if (mem_platform_core_has(chip, i, writers[w].path))
            npu_buf_printf(o, "    <route src=\"d%d.c%d.%s\" dst=\"d%d.hbm\" symmetrical=\"NO\"><link_ctn id=\"d%d.c%d.%s\"/>"
                              "<link_ctn id=\"d%d.c%d.wr\"/><link_ctn id=\"x%d.%d\"/></route>\n",
                           b, i, writers[w].suffix, a, b, i, writers[w].suffix, b, i, b, a);
      }
    }
  npu_buf_puts(o, "  </zone>\n</platform>\n");
}
