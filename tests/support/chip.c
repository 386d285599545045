/* chip.c - load a hardware preset in tests. */
#include "tests/support/chip.h"

#include <criterion/criterion.h>

#include "common/cfg.h"

void ts_load_system(struct arch_system *sys, const char *name, const char *const *sets)
{
  struct npu_cfg *cfg = npu_cfg_create();
  arch_register(cfg, sys);
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = npu_cfg_load_spec(cfg, name, &d);
  for (int i = 0; rc == 0 && sets && sets[i]; i++) rc = npu_cfg_set(cfg, sets[i], &d);
  if (rc == 0) rc = arch_finish(cfg, sys, &d);
  char msg[2048];
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s: %s", name, msg);
  npu_cfg_destroy(cfg);
}
