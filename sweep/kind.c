/*
 * kind.c - the per-kind runners of sweep points; see kind.h. Two kinds: RL iterations (a
 * scenario with an rl section, rl/) and training steps (a model section). RL comes first: an RL
 * scenario has a model section too, and the training loader does not know the rl keys. Kernel
 * and collective scenarios are kinds of kind_micro.c, detected before these.
 */
#include "sweep/kind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"
#include "workloads/job.h"
#include "workloads/replay.h"
#include "workloads/summary.h"
#ifdef NPUSIM_HAVE_RL
#include "rl/rl.h"
#endif
#ifdef NPUSIM_HAVE_MICRO
#include "sweep/kind_micro.h" /* kernel and collective scenarios */
#endif

/* The unit suffix of a parameter's column, and the kind for parsing its formatted value. */
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

/* ------------------------------------------------------------------ training */

struct sw_probe {
  struct npu_cfg *cfg;
  struct arch_system sys;
  struct wl_model model;
  struct wl_plan plan;
  struct wl_run run;
  struct wl_routing_cfg routing;
#ifdef NPUSIM_HAVE_RL
  struct rl_spec rl;    /* RL probes only */
#endif
  int finished; /* 0 not yet, 1 ok, -1 failed (diag kept) */
  struct npu_diag fdiag;
};

static struct sw_probe *train_probe_open(const char *scenario, const char *const *sets, int nsets,
                                         struct npu_diag *diag)
{
  struct sw_probe *p = npu_xcalloc(1, sizeof *p);
  p->cfg = npu_cfg_create();
  npu_cfg_set_display_root(p->cfg, arch_source_root());
  arch_register(p->cfg, &p->sys);
  wl_model_register(p->cfg, &p->model);
  wl_plan_register(p->cfg, &p->plan);
  wl_routing_register(p->cfg, &p->routing);
  wl_run_register(p->cfg, &p->run);
  int rc = npu_cfg_load_file(p->cfg, scenario, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(p->cfg, sets[i], diag);
  if (rc) {
    npu_cfg_destroy(p->cfg);
    free(p);
    return NULL;
  }
  return p;
}

static void train_probe_close(struct sw_probe *p)
{
  if (!p) return;
  npu_cfg_destroy(p->cfg);
  free(p);
}

static int train_probe_set(struct sw_probe *p, const char *assignment, struct npu_diag *diag)
{
  p->finished = 0;
  return npu_cfg_set(p->cfg, assignment, diag);
}

static bool train_detect(struct sw_probe *p)
{
  return npu_cfg_section_present(p->cfg, "model");
}

static bool train_has_key(struct sw_probe *p, const char *key, const char **suffix)
{
  *suffix = "";
  size_t n = strlen(key);
  if (!strcmp(key, "preset")) return true;
  if (n > 7 && !strcmp(key + n - 7, ".preset")) {
    return true; /* a section preset: probe_set checks the section and the name */
  }
  const struct npu_param *prm = npu_cfg_param(p->cfg, key);
  if (!prm) return false;
  int kind;
  *suffix = unit_suffix(prm->type, &kind);
  return true;
}

static int train_finish(struct sw_probe *p, struct npu_diag *diag)
{
  if (p->finished == 0) {
    npu_diag_clear(&p->fdiag);
    int rc = npu_cfg_finish(p->cfg, &p->fdiag);
    if (!rc) rc = arch_finish(p->cfg, &p->sys, &p->fdiag);
    p->finished = rc ? -1 : 1;
  }
  if (p->finished < 0) {
    *diag = p->fdiag;
    return NPU_ECONFIG;
  }
  return 0;
}

static int train_probe_value(struct sw_probe *p, const char *key, double *out, struct npu_diag *diag)
{
  int rc = train_finish(p, diag);
  if (rc) return rc;
  if (!strcmp(key, "devices")) {
    *out = wl_system_devices(&p->sys);
    return 0;
  }
  const struct npu_param *prm = npu_cfg_param(p->cfg, key);
  if (!prm) return npu_diag_set(diag, NULL, 0, key, "not a key of the scenario"), NPU_EINVAL;
  char text[512];
  npu_cfg_format_value(p->cfg, key, text, sizeof text);
  int kind;
  unit_suffix(prm->type, &kind);
  char why[256];
  switch (prm->type) {
  case NPU_PT_INT:
  case NPU_PT_REAL: *out = strtod(text, NULL); return 0;
  case NPU_PT_BOOL: *out = !strcmp(text, "true"); return 0;
  case NPU_PT_STRING:
  case NPU_PT_ENUM: return npu_diag_set(diag, NULL, 0, key, "%s is not a number", text), NPU_EINVAL;
  default: {
    /* unit values are formatted with quotes */
    size_t l = strlen(text);
    if (l >= 2 && text[0] == '"') {
      memmove(text, text + 1, l - 2);
      text[l - 2] = '\0';
    }
    if (npu_unit_parse(text, (enum npu_unit_kind)kind, out, why, sizeof why))
      return npu_diag_set(diag, NULL, 0, key, "%s", why), NPU_EINTERNAL;
    return 0;
  }
  }
}

void sw_first_line(struct npu_buf *out, const struct npu_buf *csv)
{
  const char *s = npu_buf_str(csv);
  npu_buf_printf(out, "%.*s", (int)strcspn(s, "\n"), s);
}

static void train_header(struct npu_buf *out)
{
  struct npu_buf b = {0};
  wl_summary_csv_header(&b);
  sw_first_line(out, &b);
  npu_buf_release(&b);
}

static int train_run(const char *scenario, const char *display, const char *const *sets, int nsets,
                     struct npu_buf *row, struct npu_diag *diag)
{
  struct wl_job job;
  struct wl_result res;
  memset(&res, 0, sizeof res);
  int rc = wl_job_load(&job, scenario, sets, nsets, diag);
  if (!rc && !wl_job_is_training(&job))
    rc = (npu_diag_set(diag, scenario, 0, "model", "the scenario has no model section"), NPU_ECONFIG);
  if (!rc) rc = wl_replay(&job, NULL, &res, diag);
  if (!rc) {
    if (display) snprintf(job.path, sizeof job.path, "%s", display);
    struct npu_buf b = {0};
    wl_summary_csv_row(&job, &res, &b);
    sw_first_line(row, &b);
    npu_buf_release(&b);
  }
  wl_result_release(&res);
  wl_job_release(&job);
  return rc;
}

/* ------------------------------------------------------------------ rl */

#ifdef NPUSIM_HAVE_RL
static struct sw_probe *rl_probe_open(const char *scenario, const char *const *sets, int nsets, struct npu_diag *diag)
{
  struct sw_probe *p = npu_xcalloc(1, sizeof *p);
  p->cfg = npu_cfg_create();
  npu_cfg_set_display_root(p->cfg, arch_source_root());
  arch_register(p->cfg, &p->sys);
  wl_model_register(p->cfg, &p->model);
  wl_plan_register(p->cfg, &p->plan);
  wl_routing_register(p->cfg, &p->routing);
  wl_run_register(p->cfg, &p->run);
  rl_spec_register(p->cfg, &p->rl);
  /* as rl_job_load: the global batch is derived in an RL iteration */
  int rc = npu_cfg_set(p->cfg, "plan.global_batch=1", diag);
  if (!rc) rc = npu_cfg_load_file(p->cfg, scenario, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(p->cfg, sets[i], diag);
  if (rc) {
    npu_cfg_destroy(p->cfg);
    free(p);
    return NULL;
  }
  return p;
}

static bool rl_detect(struct sw_probe *p)
{
  return npu_cfg_section_present(p->cfg, "rl");
}

static void rl_header(struct npu_buf *out)
{
  struct npu_buf b = {0};
  rl_summary_csv_header(&b);
  sw_first_line(out, &b);
  npu_buf_release(&b);
}

static int rl_kind_run(const char *scenario, const char *display, const char *const *sets, int nsets,
                       struct npu_buf *row, struct npu_diag *diag)
{
  struct rl_job job;
  struct rl_result res;
  int rc = rl_job_load(&job, scenario, sets, nsets, diag);
  if (!rc) rc = rl_run(&job, NULL, &res, diag);
  if (!rc) {
    if (display) snprintf(job.path, sizeof job.path, "%s", display);
    struct npu_buf b = {0};
    rl_summary_csv_row(&job, &res, &b);
    sw_first_line(row, &b);
    npu_buf_release(&b);
  }
  rl_job_release(&job);
  return rc;
}
#endif

static const struct sw_kind kinds[] = {
#ifdef NPUSIM_HAVE_RL
    {
        .name = "rl",
        .desc = "one RL iteration (npusim run on a scenario with an rl section): time per phase, utilisation, "
                "tokens/s",
        .detect = rl_detect,
        .header = rl_header,
        .run = rl_kind_run,
        .probe_open = rl_probe_open,
        .probe_set = train_probe_set,
        .probe_value = train_probe_value,
        .probe_has_key = train_has_key,
        .probe_close = train_probe_close,
    },
#endif
    {
        .name = "training",
        .desc = "one training step (npusim run): step time, MFU, memory, breakdown",
        .detect = train_detect,
        .header = train_header,
        .run = train_run,
        .probe_open = train_probe_open,
        .probe_set = train_probe_set,
        .probe_value = train_probe_value,
        .probe_has_key = train_has_key,
        .probe_close = train_probe_close,
    },
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const struct sw_kind *sw_kind_find(const char *name)
{
  for (size_t i = 0; i < NKINDS; i++)
    if (!strcmp(kinds[i].name, name)) return &kinds[i];
#ifdef NPUSIM_HAVE_MICRO
  return sw__micro_kind_find(name);
#else
  return NULL;
#endif
}

const char *sw_kind_names(void)
{
#if defined NPUSIM_HAVE_RL && defined NPUSIM_HAVE_MICRO
  return "rl, training, kernel, collective";
#elif defined NPUSIM_HAVE_RL
  return "rl, training";
#elif defined NPUSIM_HAVE_MICRO
  return "training, kernel, collective";
#else
  return "training";
#endif
}

const struct sw_kind *sw_kind_detect(const char *scenario, const char *const *sets, int nsets, struct npu_diag *diag)
{
#ifdef NPUSIM_HAVE_MICRO
  /* a kernel or collective section: the other kinds' loaders do not know these keys */
  const struct sw_kind *mk = sw__micro_kind_detect(scenario, sets, nsets);
  if (mk) return mk;
#endif
  for (size_t i = 0; i < NKINDS; i++) {
    struct sw_probe *p = kinds[i].probe_open(scenario, sets, nsets, diag);
    if (!p) return NULL;
    bool yes = kinds[i].detect(p);
    kinds[i].probe_close(p);
    if (yes) return &kinds[i];
  }
  npu_diag_set(diag, scenario, 0, NULL,
               "the scenario is of no kind a sweep can run (kinds: %s; a training scenario has a model section, an RL "
               "scenario an rl section, a kernel or collective scenario a kernel or collective section)",
               sw_kind_names());
  return NULL;
}
