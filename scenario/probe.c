/*
 * probe.c - what every kind's probe shares: keys, their unit suffixes, values as SI numbers;
 * see scenario.h. A kind supplies open, finish, its own numbers and close.
 */
#include "scenario/scenario.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

/* The unit suffix of a parameter's column, and the unit kind for parsing its formatted value. */
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

struct scn_probe *scn_probe_open(const struct scn_kind *kind, const char *path, const char *const *sets, int nsets,
                                 struct npu_diag *diag)
{
  struct scn_probe *p = kind->probe_open(path, sets, nsets, diag);
  if (p) p->kind = kind;
  return p;
}

void scn_probe_close(struct scn_probe *p)
{
  if (p) p->kind->probe_close(p);
}

int scn_probe_set(struct scn_probe *p, const char *assignment, struct npu_diag *diag)
{
  p->finished = 0;
  return npu_cfg_set(p->cfg, assignment, diag);
}

bool scn_probe_has_key(struct scn_probe *p, const char *key, const char **suffix)
{
  *suffix = "";
  size_t n = strlen(key);
  /* a preset or a section preset: setting it checks the section and the name */
  if (!strcmp(key, "preset") || (n > 7 && !strcmp(key + n - 7, ".preset"))) return true;
  const struct npu_param *prm = npu_cfg_param(p->cfg, key);
  if (!prm) return false;
  int kind;
  *suffix = unit_suffix(prm->type, &kind);
  return true;
}

static int finish(struct scn_probe *p, struct npu_diag *diag)
{
  if (p->finished == 0) {
    npu_diag_clear(&p->fdiag);
    p->finished = p->kind->probe_finish(p, &p->fdiag) ? -1 : 1;
  }
  if (p->finished < 0) {
    *diag = p->fdiag;
    return NPU_ECONFIG;
  }
  return 0;
}

int scn_probe_value(struct scn_probe *p, const char *key, double *out, struct npu_diag *diag)
{
  int rc = finish(p, diag);
  if (rc) return rc;
  rc = p->kind->probe_number(p, key, out, diag);
  if (rc <= 0) return rc;
  const struct npu_param *prm = npu_cfg_param(p->cfg, key);
  if (!prm) return npu_diag_set(diag, NULL, 0, key, "not a key of the scenario"), NPU_EINVAL;
  char text[1100];
  npu_cfg_format_value(p->cfg, key, text, sizeof text);
  int kind;
  unit_suffix(prm->type, &kind);
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
    char why[256];
    if (npu_unit_parse(text, (enum npu_unit_kind)kind, out, why, sizeof why))
      return npu_diag_set(diag, NULL, 0, key, "%s", why), NPU_EINTERNAL;
    return 0;
  }
  }
}
