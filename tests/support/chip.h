/* chip.h - load a hardware preset in tests. */
#ifndef NPUSIM_TESTS_CHIP_H
#define NPUSIM_TESTS_CHIP_H

#include "arch/arch.h"

/* Load preset name (with optional "KEY=VALUE" overrides, NULL-terminated) or fail the test. */
void ts_load_system(struct arch_system *sys, const char *name, const char *const *sets);
/* The same, returning the status and the diagnostic instead of failing (for error tests). */
int ts_try_load_system(struct arch_system *sys, const char *name, const char *const *sets, struct npu_diag *d);

#endif
