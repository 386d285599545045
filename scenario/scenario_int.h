/* scenario_int.h - declarations shared by the files of scenario/ only. */
#ifndef NPUSIM_SCENARIO_SCENARIO_INT_H
#define NPUSIM_SCENARIO_SCENARIO_INT_H

#include "scenario/scenario.h"

/* The kinds (one file each: kind_training.c, kind_rl.c, kind_serve.c, kind_kernel.c, kind_collective.c). */
extern const struct scn_kind scn__kind_training;
extern const struct scn_kind scn__kind_rl;
extern const struct scn_kind scn__kind_serve;
extern const struct scn_kind scn__kind_kernel;
extern const struct scn_kind scn__kind_collective;

/* Section groups shared by kinds (sections.c): the system; model, plan, routing and run. */
extern const struct scn_section scn__section_system;
extern const struct scn_section scn__section_training;

/*
 * A probe over section groups (the system first): a new loader with the groups registered,
 * first (may be NULL) applied before the file, then path and the overrides. NULL with diag when
 * they do not load. Its finish is the loader's and the system's checks, its numbers
 * "devices"; close frees it.
 */
struct scn_probe *scn__probe_open(const struct scn_section *const *groups, const char *first, const char *path,
                                  const char *const *sets, int nsets, struct npu_diag *diag);
int scn__probe_finish(struct scn_probe *p, struct npu_diag *diag);
int scn__probe_number(struct scn_probe *p, const char *key, double *out, struct npu_diag *diag);
void scn__probe_close(struct scn_probe *p);

/* Load path then the overrides into cfg. 0 or the loader's error. */
int scn__cfg_load(struct npu_cfg *cfg, const char *path, const char *const *sets, int nsets, struct npu_diag *diag);

#endif
