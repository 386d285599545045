/*
 * job.c - what is common to kernel and collective scenarios: telling them apart, the system's
 * name, CSV cells.
 */
#include "micro/micro.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"
#include "micro/micro_int.h"

/* A top-level `NAME = ...` / `NAME : ...` in the file's text, or a NAME.* override. */
static bool mentions(const char *path, const char *name, const char *const *sets, int nsets)
{
  size_t n = strlen(name);
  for (int i = 0; i < nsets; i++)
    if (!strncmp(sets[i], name, n) && sets[i][n] == '.') return true;
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[1024];
  bool yes = false;
  while (!yes && fgets(line, sizeof line, f)) {
    const char *p = line;
    while (isspace((unsigned char)*p)) p++;
    if (strncmp(p, name, n)) continue;
    p += n;
    while (*p == ' ' || *p == '\t') p++;
    yes = *p == '=' || *p == ':';
  }
  fclose(f);
  return yes;
}

enum mc_kind mc_file_kind(const char *path, const char *const *sets, int nsets)
{
  struct npu_cfg *cfg = npu_cfg_create();
  struct arch_system sys;
  struct mc_kernel_spec ks;
  struct mc_kparams *kp;
  struct mc_coll_spec cs;
  arch_register(cfg, &sys);
  mc__kernel_register(cfg, &ks, &kp);
  mc__coll_register(cfg, &cs);
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = npu_cfg_load_file(cfg, path, &d);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(cfg, sets[i], &d);
  bool kernel, coll;
  if (rc) {
    kernel = mentions(path, "kernel", sets, nsets);
    coll = mentions(path, "collective", sets, nsets);
  } else {
    kernel = npu_cfg_section_present(cfg, "kernel");
    coll = npu_cfg_section_present(cfg, "collective");
  }
  npu_cfg_destroy(cfg);
  mc__kernel_unregister(kp);
  return kernel ? MC_KIND_KERNEL : coll ? MC_KIND_COLLECTIVE : MC_KIND_NONE;
}

struct mc_tables {
  struct mc_kernel_spec kernel;
  struct mc_kparams *kp;
  struct mc_coll_spec coll;
};

struct mc_tables *mc_tables_register(struct npu_cfg *cfg)
{
  struct mc_tables *t = npu_xcalloc(1, sizeof *t);
  mc__kernel_register(cfg, &t->kernel, &t->kp);
  mc__coll_register(cfg, &t->coll);
  return t;
}

void mc_tables_destroy(struct mc_tables *t)
{
  if (!t) return;
  mc__kernel_unregister(t->kp);
  free(t);
}

const char *mc_system_name(const struct arch_system *sys)
{
  if (sys->has_cluster && sys->cluster.name[0]) return sys->cluster.name;
  if (sys->has_node && sys->node.name[0]) return sys->node.name;
  return sys->chip.name;
}

void mc__csv_number(struct npu_buf *out, double v)
{
  char num[64];
  npu_fmt_double(v, num, sizeof num);
  npu_buf_printf(out, ",%s", num);
}
