/* chip.c - load a hardware preset in tests. */
#include "tests/support/chip.h"

#include <criterion/criterion.h>

#include "common/cfg.h"

int ts_try_load_system(struct arch_system *sys, const char *name, const char *const *sets, struct npu_diag *d)
{
  struct npu_cfg *cfg = npu_cfg_create();
  arch_register(cfg, sys);
  npu_diag_clear(d);
  int rc = npu_cfg_load_spec(cfg, name, d);
  for (int i = 0; rc == 0 && sets && sets[i]; i++) rc = npu_cfg_set(cfg, sets[i], d);
  if (rc == 0) rc = arch_finish(cfg, sys, d);
  npu_cfg_destroy(cfg);
  return rc;
}

void ts_load_system(struct arch_system *sys, const char *name, const char *const *sets)
{
  struct npu_diag d;
  int rc = ts_try_load_system(sys, name, sets, &d);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", name, msg);
}
