/*
 * kind_micro.c - the sweep kinds "kernel" (a scenario with a kernel section: one operator on
 * the chip) and "collective" (a collective section: one collective on the cluster). Their rows
 * are the summary.csv rows `npusim run -o DIR` writes for such scenarios (micro/micro.h).
 *
 * A probe is a loaded micro/ job that is not finished; the sweep's struct sw_probe is opaque
 * to it (kind.h), so the probe here is a struct of its own behind that pointer.
 */
#include "sweep/kind_micro.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"
#include "interconnect/topo.h"
#include "micro/micro.h"

struct mc_probe {
  enum mc_kind kind;
  struct mc_kernel_job k; /* MC_KIND_KERNEL */
  struct mc_coll_job c;   /* MC_KIND_COLLECTIVE */
  int finished;           /* 0 not yet, 1 ok, -1 failed (fdiag kept) */
  struct npu_diag fdiag;
};

static struct mc_probe *P(struct sw_probe *p)
{
  return (struct mc_probe *)p;
}

static struct npu_cfg *cfg_of(struct mc_probe *p)
{
  return p->kind == MC_KIND_KERNEL ? p->k.cfg : p->c.cfg;
}

static struct sw_probe *probe_open(enum mc_kind kind, const char *scenario, const char *const *sets, int nsets,
                                   struct npu_diag *diag)
{
  struct mc_probe *p = npu_xcalloc(1, sizeof *p);
  p->kind = kind;
  if (kind == MC_KIND_KERNEL) mc_kernel_init(&p->k, scenario);
  else mc_coll_init(&p->c, scenario);
  int rc = npu_cfg_load_file(cfg_of(p), scenario, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(cfg_of(p), sets[i], diag);
  if (rc) {
    mc_kernel_release(&p->k);
    mc_coll_release(&p->c);
    free(p);
    return NULL;
  }
  return (struct sw_probe *)p;
}

static struct sw_probe *kernel_probe_open(const char *scenario, const char *const *sets, int nsets,
                                          struct npu_diag *diag)
{
  return probe_open(MC_KIND_KERNEL, scenario, sets, nsets, diag);
}

static struct sw_probe *coll_probe_open(const char *scenario, const char *const *sets, int nsets,
                                        struct npu_diag *diag)
{
  return probe_open(MC_KIND_COLLECTIVE, scenario, sets, nsets, diag);
}

static void probe_close(struct sw_probe *sp)
{
  struct mc_probe *p = P(sp);
  if (!p) return;
  mc_kernel_release(&p->k);
  mc_coll_release(&p->c);
  free(p);
}

static int probe_set(struct sw_probe *sp, const char *assignment, struct npu_diag *diag)
{
  struct mc_probe *p = P(sp);
  p->finished = 0;
  return npu_cfg_set(cfg_of(p), assignment, diag);
}

static bool kernel_detect(struct sw_probe *sp)
{
  return npu_cfg_section_present(cfg_of(P(sp)), "kernel");
}

static bool coll_detect(struct sw_probe *sp)
{
  return npu_cfg_section_present(cfg_of(P(sp)), "collective");
}

static const char *unit_suffix(enum npu_ptype t, int *kind)
{
  switch (t) {
  case NPU_PT_FREQUENCY: *kind = NPU_UNIT_FREQUENCY; return "_hz";
  case NPU_PT_BANDWIDTH: *kind = NPU_UNIT_BANDWIDTH; return "_bytes_per_s";
  case NPU_PT_TIME: *kind = NPU_UNIT_TIME; return "_s";
  case NPU_PT_SIZE: *kind = NPU_UNIT_SIZE; return "_bytes";
  case NPU_PT_FLOP_RATE: *kind = NPU_UNIT_FLOP_RATE; return "_flops_per_s";
  default: *kind = -1; return "";
  }
}

static bool probe_has_key(struct sw_probe *sp, const char *key, const char **suffix)
{
  *suffix = "";
  size_t n = strlen(key);
  if (!strcmp(key, "preset") || (n > 7 && !strcmp(key + n - 7, ".preset"))) return true;
  const struct npu_param *prm = npu_cfg_param(cfg_of(P(sp)), key);
  if (!prm) return false;
  int kind;
  *suffix = unit_suffix(prm->type, &kind);
  return true;
}

static int finish(struct mc_probe *p, struct npu_diag *diag)
{
  if (p->finished == 0) {
    npu_diag_clear(&p->fdiag);
    int rc = p->kind == MC_KIND_KERNEL ? mc_kernel_finish(&p->k, &p->fdiag) : mc_coll_finish(&p->c, &p->fdiag);
    p->finished = rc ? -1 : 1;
  }
  if (p->finished < 0) {
    *diag = p->fdiag;
    return NPU_ECONFIG;
  }
  return 0;
}

static int probe_value(struct sw_probe *sp, const char *key, double *out, struct npu_diag *diag)
{
  struct mc_probe *p = P(sp);
  int rc = finish(p, diag);
  if (rc) return rc;
  struct npu_cfg *cfg = cfg_of(p);
  if (!strcmp(key, "devices")) {
    *out = ic_topo_system_ranks(p->kind == MC_KIND_KERNEL ? &p->k.sys : &p->c.sys);
    return 0;
  }
  const struct npu_param *prm = npu_cfg_param(cfg, key);
  if (!prm) return npu_diag_set(diag, NULL, 0, key, "not a key of the scenario"), NPU_EINVAL;
  /* an operator argument: the value the operator takes, set or not */
  if (p->kind == MC_KIND_KERNEL && (prm->flags & NPU_PF_OPTIONAL)) return mc_kernel_param_value(&p->k, key, out, diag);
  char text[1100];
  npu_cfg_format_value(cfg, key, text, sizeof text);
  int kind;
  unit_suffix(prm->type, &kind);
  switch (prm->type) {
  case NPU_PT_INT:
  case NPU_PT_REAL: *out = strtod(text, NULL); return 0;
  case NPU_PT_BOOL: *out = !strcmp(text, "true"); return 0;
  case NPU_PT_STRING:
  case NPU_PT_ENUM: return npu_diag_set(diag, NULL, 0, key, "%s is not a number", text), NPU_EINVAL;
  default: {
    char why[256];
    if (npu_unit_parse(text, (enum npu_unit_kind)kind, out, why, sizeof why))
      return npu_diag_set(diag, NULL, 0, key, "%s", why), NPU_EINTERNAL;
    return 0;
  }
  }
}

static void kernel_header(struct npu_buf *out)
{
  struct npu_buf b = {0};
  mc_kernel_csv_header(&b);
  sw_first_line(out, &b);
  npu_buf_release(&b);
}

static void coll_header(struct npu_buf *out)
{
  struct npu_buf b = {0};
  mc_coll_csv_header(&b);
  sw_first_line(out, &b);
  npu_buf_release(&b);
}

static int kernel_run(const char *scenario, const char *display, const char *const *sets, int nsets,
                      struct npu_buf *row, struct npu_diag *diag)
{
  struct mc_kernel_job job;
  struct op_result res;
  int rc = mc_kernel_load(&job, scenario, sets, nsets, diag);
  if (!rc) rc = mc_kernel_run(&job, NULL, &res, diag);
  if (!rc) {
    if (display) snprintf(job.path, sizeof job.path, "%s", display);
    struct npu_buf b = {0};
    mc_kernel_csv_row(&job, &res, &b);
    sw_first_line(row, &b);
    npu_buf_release(&b);
  }
  mc_kernel_release(&job);
  return rc;
}

static int coll_run(const char *scenario, const char *display, const char *const *sets, int nsets,
                    struct npu_buf *row, struct npu_diag *diag)
{
  struct mc_coll_job job;
  struct mc_coll_result res;
  int rc = mc_coll_load(&job, scenario, sets, nsets, diag);
  if (!rc) rc = mc_coll_run(&job, &res, diag);
  if (!rc) {
    if (display) snprintf(job.path, sizeof job.path, "%s", display);
    struct npu_buf b = {0};
    mc_coll_csv_row(&job, &res, &b);
    sw_first_line(row, &b);
    npu_buf_release(&b);
  }
  mc_coll_release(&job);
  return rc;
}

static const struct sw_kind micro_kinds[] = {
    {
        .name = "kernel",
        .desc = "one operator kernel on the chip (a kernel section): time, achieved FLOP/s, GM traffic, pipes, "
                "bottleneck",
        .detect = kernel_detect,
        .header = kernel_header,
        .run = kernel_run,
        .probe_open = kernel_probe_open,
        .probe_set = probe_set,
        .probe_value = probe_value,
        .probe_has_key = probe_has_key,
        .probe_close = probe_close,
    },
    {
        .name = "collective",
        .desc = "one collective on the cluster (a collective section): time, algbw, busbw, algorithm",
        .detect = coll_detect,
        .header = coll_header,
        .run = coll_run,
        .probe_open = coll_probe_open,
        .probe_set = probe_set,
        .probe_value = probe_value,
        .probe_has_key = probe_has_key,
        .probe_close = probe_close,
    },
};

const struct sw_kind *sw__micro_kind_find(const char *name)
{
  for (size_t i = 0; i < sizeof micro_kinds / sizeof micro_kinds[0]; i++)
    if (!strcmp(micro_kinds[i].name, name)) return &micro_kinds[i];
  return NULL;
}

const struct sw_kind *sw__micro_kind_detect(const char *scenario, const char *const *sets, int nsets)
{
  switch (mc_file_kind(scenario, sets, nsets)) {
  case MC_KIND_KERNEL: return &micro_kinds[0];
  case MC_KIND_COLLECTIVE: return &micro_kinds[1];
  default: return NULL;
  }
}
