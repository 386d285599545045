/*
 * kind_micro.h - the sweep kinds of kernel and collective scenarios (micro/), entries beside
 * those of kind.c: sweeping a kernel's shape or a collective's size over hardware keys.
 */
#ifndef NPUSIM_SWEEP_KIND_MICRO_H
#define NPUSIM_SWEEP_KIND_MICRO_H

#include "sweep/kind.h"

/* The kind "kernel" or "collective" called name, or NULL. */
const struct sw_kind *sw__micro_kind_find(const char *name);

/* The kind of a scenario with a kernel or a collective section, or NULL for any other. */
const struct sw_kind *sw__micro_kind_detect(const char *scenario, const char *const *sets, int nsets);

#endif
